// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The shm transport's byte ring (see shm_ring.h for the protocol).
 */
#include <errno.h>
#include <string.h>

#include "base/base.h"
#include "shm_ring.h"

/* The counters are shared with another process: they must not need a lock. */
_Static_assert(__atomic_always_lock_free(sizeof(uint64_t), 0) &&
	       __atomic_always_lock_free(sizeof(uint32_t), 0),
	       "the shm ring needs lock-free 64-bit atomics");
_Static_assert(sizeof(struct tpu__shm_ring_hdr) <= TPU__SHM_RING_HDR_SIZE,
	       "ring header too large");

static bool cap_ok(uint64_t cap)
{
	return cap >= TPU__SHM_RING_MIN && cap <= TPU__SHM_RING_MAX && !(cap & (cap - 1));
}

int tpu__shm_ring_init(void *mem, uint64_t cap)
{
	struct tpu__shm_ring_hdr *h = mem;

	if (!cap_ok(cap))
		return -EINVAL;
	memset(h, 0, sizeof(*h));
	atomic_init(&h->head, 0);
	atomic_init(&h->tail, 0);
	atomic_init(&h->reader_asleep, 0);
	atomic_init(&h->writer_waiting, 0);
	h->magic = TPU__SHM_RING_MAGIC;
	h->capacity = cap;
	return 0;
}

int tpu__shm_ring_attach(struct tpu__shm_ring *r, void *mem, uint64_t cap, bool producer)
{
	struct tpu__shm_ring_hdr *h = mem;
	uint64_t head, tail;

	memset(r, 0, sizeof(*r));
	if (!cap_ok(cap) || h->magic != TPU__SHM_RING_MAGIC || h->capacity != cap)
		return -EPROTO;
	head = atomic_load_explicit(&h->head, memory_order_acquire);
	tail = atomic_load_explicit(&h->tail, memory_order_acquire);
	if (head - tail > cap)
		return -EPROTO;
	r->hdr = h;
	r->data = (uint8_t *)mem + TPU__SHM_RING_HDR_SIZE;
	r->cap = cap;
	r->producer = producer;
	r->pos = producer ? head : tail;
	r->tail_seen = tail;
	r->head_seen = head;
	return 0;
}

/* Only this thread writes a counter: no locked add. */
static void count(_Atomic uint64_t *n)
{
	atomic_store_explicit(n, atomic_load_explicit(n, memory_order_relaxed) + 1,
			      memory_order_relaxed);
}

/*
 * Producer: free bytes, reloading the tail only when the tail last seen
 * leaves fewer than @want; 0 (and broken) if the tail is nonsense.
 */
static uint64_t ring_space(struct tpu__shm_ring *r, uint64_t want)
{
	uint64_t used = r->pos - r->tail_seen, tail;

	if (r->cap - used >= want)
		return r->cap - used;
	/* Acquire: the consumer's copies out of that space are done. */
	tail = atomic_load_explicit(&r->hdr->tail, memory_order_acquire);
	count(&r->tail_loads);
	used = r->pos - tail;
	/* Behind the tail seen, or ahead of the head: the peer scribbled. */
	if (used > r->cap || tail - r->tail_seen > r->pos - r->tail_seen) {
		r->broken = true;
		return 0;
	}
	r->tail_seen = tail;
	return r->cap - used;
}

/* Consumer: bytes available, reloading the head; 0 (and broken) if it is nonsense. */
static uint64_t ring_avail(struct tpu__shm_ring *r)
{
	/* Acquire: the producer's copies into those bytes are visible. */
	uint64_t head = atomic_load_explicit(&r->hdr->head, memory_order_acquire);

	count(&r->head_loads);
	/* Behind this side's tail, or more than a lap ahead: the peer scribbled. */
	if (head - r->pos > r->cap) {
		r->broken = true;
		return 0;
	}
	r->head_seen = head;
	return head - r->pos;
}

/*
 * Consumer: bytes available, at least @want of them if they are there: the
 * head last seen when it leaves enough (pos never passes it, so this is at
 * most the capacity), else loaded again.
 */
static uint64_t ring_avail_for(struct tpu__shm_ring *r, uint64_t want)
{
	uint64_t seen = r->head_seen - r->pos;

	return seen >= want ? seen : ring_avail(r);
}

size_t tpu__shm_ring_writable(struct tpu__shm_ring *r)
{
	/* Asked for the most space: the tail is loaded unless the ring is known empty. */
	return r->broken ? 0 : ring_space(r, r->cap);
}

size_t tpu__shm_ring_readable(struct tpu__shm_ring *r)
{
	return r->broken ? 0 : ring_avail(r);
}

/* Copy @len bytes into the ring at counter @at, wrapping around the end. */
static void put_bytes(struct tpu__shm_ring *r, uint64_t at, const uint8_t *src, size_t len)
{
	size_t off = at & (r->cap - 1);
	size_t first = r->cap - off < len ? r->cap - off : len;

	memcpy(r->data + off, src, first);
	if (len > first)
		memcpy(r->data, src + first, len - first);
}

/* Publish @done bytes copied in at r->pos. */
static void move_head(struct tpu__shm_ring *r, size_t done)
{
	r->pos += done;
	/* Release: the bytes are in before the consumer can see the new head. */
	atomic_store_explicit(&r->hdr->head, r->pos, memory_order_release);
	count(&r->head_moves);
}

size_t tpu__shm_ring_write(struct tpu__shm_ring *r, const struct iovec *iov, unsigned int n,
			   size_t skip)
{
	uint64_t space, done = 0, want = 0;
	unsigned int i;

	if (r->broken)
		return 0;
	for (i = 0; i < n && want < r->cap; i++)
		want += iov[i].iov_len;
	want = want > skip ? want - skip : 0;
	space = ring_space(r, want < r->cap ? want : r->cap);
	for (i = 0; i < n && done < space; i++) {
		size_t len = iov[i].iov_len, chunk;

		if (skip >= len) {
			skip -= len;
			continue;
		}
		chunk = len - skip;
		if (chunk > space - done)
			chunk = space - done;
		put_bytes(r, r->pos + done, (const uint8_t *)iov[i].iov_base + skip, chunk);
		done += chunk;
		skip = 0;
	}
	if (done)
		move_head(r, done);
	return done;
}

bool tpu__shm_ring_write_all(struct tpu__shm_ring *r, const struct iovec *iov, unsigned int n,
			     size_t total)
{
	uint64_t done = 0;

	if (r->broken || total > r->cap || ring_space(r, total) < total)
		return false;
	for (unsigned int i = 0; i < n; i++) {
		if (!iov[i].iov_len)
			continue;	/* its base may be NULL, which memcpy may not be given */
		put_bytes(r, r->pos + done, iov[i].iov_base, iov[i].iov_len);
		done += iov[i].iov_len;
	}
	if (done)
		move_head(r, done);
	return true;
}

static void copy_plain(void *dst, const void *src, size_t n)
{
	memcpy(dst, src, n);
}

/* Copy @len bytes out of the ring from counter @at, wrapping around the end. */
static void get_bytes(struct tpu__shm_ring *r, uint64_t at, void *buf, size_t len,
		      void (*copy)(void *dst, const void *src, size_t n))
{
	size_t off = at & (r->cap - 1);
	size_t first = r->cap - off < len ? r->cap - off : len;

	copy(buf, r->data + off, first);
	if (len > first)
		copy((uint8_t *)buf + first, r->data, len - first);
}

/* Give the producer the bytes before counter r->pos + @n: the one store to the tail. */
static void move_tail(struct tpu__shm_ring *r, size_t n)
{
	r->pos += n;
	/* Release: our copies are done before the producer may reuse the space. */
	atomic_store_explicit(&r->hdr->tail, r->pos, memory_order_release);
	count(&r->tail_moves);
}

static size_t ring_read(struct tpu__shm_ring *r, void *buf, size_t len,
			void (*copy)(void *dst, const void *src, size_t n))
{
	uint64_t avail;

	if (r->broken || !len)
		return 0;
	avail = ring_avail_for(r, len);
	if (len > avail)
		len = avail;
	if (!len)
		return 0;
	get_bytes(r, r->pos, buf, len, copy);
	move_tail(r, len);
	return len;
}

/*
 * Whether @skip + @len bytes fit in @avail.  This one check bounds both:
 * @avail is never more than the capacity (ring_avail refuses a head
 * further ahead, whatever the peer wrote), and the sum is compared without
 * forming it, so that no @skip or @len can wrap it.
 */
static bool fits(uint64_t avail, size_t skip, size_t len)
{
	return len <= avail && skip <= avail - len;
}

/* Whether @skip + @len bytes are readable: the head last seen first. */
static bool ring_has(struct tpu__shm_ring *r, size_t skip, size_t len)
{
	if (r->broken)
		return false;
	return fits(r->head_seen - r->pos, skip, len) || fits(ring_avail(r), skip, len);
}

bool tpu__shm_ring_peek(struct tpu__shm_ring *r, size_t skip, void *buf, size_t len)
{
	if (!ring_has(r, skip, len))
		return false;
	if (len)
		get_bytes(r, r->pos + skip, buf, len, copy_plain);
	return true;
}

bool tpu__shm_ring_take(struct tpu__shm_ring *r, size_t skip, void *buf, size_t len)
{
	if (!ring_has(r, skip, len))
		return false;
	if (len)
		get_bytes(r, r->pos + skip, buf, len,
			  len >= TPU__COPY_STREAM_MIN ? tpu__copy_stream : copy_plain);
	if (skip + len)
		move_tail(r, skip + len);
	return true;
}

uint64_t tpu__shm_ring_tail_moves(const struct tpu__shm_ring *r)
{
	return atomic_load_explicit(&r->tail_moves, memory_order_relaxed);
}

uint64_t tpu__shm_ring_head_loads(const struct tpu__shm_ring *r)
{
	return atomic_load_explicit(&r->head_loads, memory_order_relaxed);
}

uint64_t tpu__shm_ring_head_moves(const struct tpu__shm_ring *r)
{
	return atomic_load_explicit(&r->head_moves, memory_order_relaxed);
}

uint64_t tpu__shm_ring_tail_loads(const struct tpu__shm_ring *r)
{
	return atomic_load_explicit(&r->tail_loads, memory_order_relaxed);
}

size_t tpu__shm_ring_read(struct tpu__shm_ring *r, void *buf, size_t len)
{
	return ring_read(r, buf, len, copy_plain);
}

size_t tpu__shm_ring_read_stream(struct tpu__shm_ring *r, void *buf, size_t len)
{
	return ring_read(r, buf, len, tpu__copy_stream);
}

bool tpu__shm_ring_reader_arm(struct tpu__shm_ring *r)
{
	atomic_store_explicit(&r->hdr->reader_asleep, 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_seq_cst);
	return tpu__shm_ring_readable(r) > 0 || r->broken;
}

void tpu__shm_ring_reader_disarm(struct tpu__shm_ring *r)
{
	atomic_store_explicit(&r->hdr->reader_asleep, 0, memory_order_relaxed);
}

bool tpu__shm_ring_writer_arm(struct tpu__shm_ring *r)
{
	atomic_store_explicit(&r->hdr->writer_waiting, 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_seq_cst);
	return tpu__shm_ring_writable(r) > 0 || r->broken;
}

void tpu__shm_ring_writer_disarm(struct tpu__shm_ring *r)
{
	atomic_store_explicit(&r->hdr->writer_waiting, 0, memory_order_relaxed);
}

/* The load first, so that a peer wide awake costs no locked instruction. */
static bool take_flag(_Atomic uint32_t *flag)
{
	atomic_thread_fence(memory_order_seq_cst);
	return atomic_load_explicit(flag, memory_order_relaxed) &&
	       atomic_exchange_explicit(flag, 0, memory_order_relaxed);
}

bool tpu__shm_ring_reader_needs_wake(struct tpu__shm_ring *r)
{
	return take_flag(&r->hdr->reader_asleep);
}

bool tpu__shm_ring_writer_needs_wake(struct tpu__shm_ring *r)
{
	return take_flag(&r->hdr->writer_waiting);
}
