// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The shm transport's byte ring (lib/shm_ring.c): formats, counts,
 * wrap-around against a reference model, scatter writes, reading in place
 * (peek and take, a frame split across the end), a peer scribbling
 * on the header, the sleep flags, and two threads streaming through a
 * small ring, busy and with the sleep protocol, checksummed.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shm_ring.h"
#include "tap.h"
#include "tpu_user.h"

#define CAP	4096u

static void *ring_mem(uint64_t cap)
{
	void *p = mmap(NULL, tpu__shm_ring_size(cap), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

static void ring_mem_free(void *p, uint64_t cap)
{
	if (p)
		munmap(p, tpu__shm_ring_size(cap));
}

/* The byte at stream offset i: a pattern no shifted copy matches. */
static uint8_t pat(uint64_t i)
{
	return (uint8_t)((i * 2654435761u) >> 13 ^ i >> 8);
}

static uint64_t rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void test_formats(void)
{
	static const uint64_t bad[] = { 0, 1, 100, 3000, 4097, 6144, 1ull << 31 };
	struct tpu__shm_ring r;
	void *mem = ring_mem(CAP);
	unsigned int i;
	bool all = true;

	CHECK(mem != NULL, "ring: shared memory");
	if (!mem)
		return;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		all &= tpu__shm_ring_init(mem, bad[i]) == -EINVAL;
	CHECK(all, "ring: capacities that are not a power of two in range are -EINVAL");
	CHECK_STATUS(tpu__shm_ring_init(mem, CAP), 0, "ring: init with 4096");
	CHECK_STATUS(tpu__shm_ring_attach(&r, mem, CAP * 2, true), -EPROTO,
		     "ring: attach with another capacity is -EPROTO");
	CHECK_STATUS(tpu__shm_ring_attach(&r, mem, CAP, true), 0, "ring: attach as producer");
	CHECK(tpu__shm_ring_writable(&r) == CAP, "ring: empty ring is all writable");
	CHECK_STATUS(tpu__shm_ring_attach(&r, mem, CAP, false), 0, "ring: attach as consumer");
	CHECK(tpu__shm_ring_readable(&r) == 0, "ring: empty ring has nothing to read");
	((struct tpu__shm_ring_hdr *)mem)->magic ^= 1;
	CHECK_STATUS(tpu__shm_ring_attach(&r, mem, CAP, false), -EPROTO,
		     "ring: attach without the magic is -EPROTO");
	CHECK_STATUS(tpu__shm_ring_init(mem, CAP), 0, "ring: re-init");
	atomic_store(&((struct tpu__shm_ring_hdr *)mem)->head, 2 * CAP);
	CHECK_STATUS(tpu__shm_ring_attach(&r, mem, CAP, false), -EPROTO,
		     "ring: attach with counters further apart than the capacity is -EPROTO");
	ring_mem_free(mem, CAP);
}

static void test_basic(void)
{
	struct tpu__shm_ring p, c;
	void *mem = ring_mem(CAP);
	uint8_t in[CAP + 100], out[CAP + 100];
	struct iovec iov = { .iov_base = in, .iov_len = 100 };
	size_t i;

	CHECK(mem != NULL, "ring: shared memory");
	if (!mem)
		return;
	for (i = 0; i < sizeof(in); i++)
		in[i] = pat(i);
	tpu__shm_ring_init(mem, CAP);
	tpu__shm_ring_attach(&p, mem, CAP, true);
	tpu__shm_ring_attach(&c, mem, CAP, false);
	CHECK(tpu__shm_ring_read(&c, out, 10) == 0, "ring: reading an empty ring gives 0");
	CHECK(tpu__shm_ring_write(&p, &iov, 1, 0) == 100, "ring: write 100");
	CHECK(tpu__shm_ring_readable(&c) == 100 && tpu__shm_ring_writable(&p) == CAP - 100,
	      "ring: 100 readable, capacity - 100 writable");
	CHECK(tpu__shm_ring_read(&c, out, 40) == 40 && tpu__shm_ring_read(&c, out + 40, 100) == 60,
	      "ring: read 40 then the other 60");
	CHECK(!memcmp(in, out, 100), "ring: bytes come out as they went in");
	CHECK(tpu__shm_ring_read(&c, out, 0) == 0, "ring: a read of 0 bytes is 0");
	iov.iov_len = sizeof(in);
	CHECK(tpu__shm_ring_write(&p, &iov, 1, 0) == CAP,
	      "ring: a write larger than the ring fills it");
	CHECK(tpu__shm_ring_writable(&p) == 0, "ring: a full ring has no room");
	CHECK(tpu__shm_ring_write(&p, &iov, 1, CAP) == 0, "ring: writing to a full ring gives 0");
	CHECK(tpu__shm_ring_read(&c, out, sizeof(out)) == CAP && !memcmp(in, out, CAP),
	      "ring: a full ring reads back, across the end of the data area");
	CHECK(tpu__shm_ring_readable(&c) == 0 && tpu__shm_ring_writable(&p) == CAP,
	      "ring: empty again");
	ring_mem_free(mem, CAP);
}

/* Scatter writes: the iovec list, with a number of leading bytes skipped. */
static void test_iovec(void)
{
	struct tpu__shm_ring p, c;
	void *mem = ring_mem(CAP);
	char a[] = "abc", d[] = "defgh", e[] = "ij";
	struct iovec iov[4] = {
		{ a, 3 }, { NULL, 0 }, { d, 5 }, { e, 2 },
	};
	char out[16] = { 0 };

	CHECK(mem != NULL, "ring: shared memory");
	if (!mem)
		return;
	tpu__shm_ring_init(mem, CAP);
	tpu__shm_ring_attach(&p, mem, CAP, true);
	tpu__shm_ring_attach(&c, mem, CAP, false);
	CHECK(tpu__shm_ring_write(&p, iov, 4, 4) == 6, "ring: iovec write skipping 4 bytes");
	CHECK(tpu__shm_ring_read(&c, out, sizeof(out)) == 6 && !strcmp(out, "efghij"),
	      "ring: the skipped write is 'efghij' (got '%s')", out);
	CHECK(tpu__shm_ring_write(&p, iov, 4, 10) == 0, "ring: skipping everything writes nothing");
	CHECK(tpu__shm_ring_write(&p, iov, 0, 0) == 0, "ring: no iovecs write nothing");
	ring_mem_free(mem, CAP);
}

/* Random writes and reads against a model; every wrap position gets hit. */
static void test_model(void)
{
	struct tpu__shm_ring p, c;
	void *mem = ring_mem(CAP);
	static uint8_t src[3 * CAP], dst[3 * CAP];
	uint64_t seed = 88172645463325252ull, wpos = 0, rpos = 0;
	bool ok = true;
	int i;

	CHECK(mem != NULL, "ring: shared memory");
	if (!mem)
		return;
	tpu__shm_ring_init(mem, CAP);
	tpu__shm_ring_attach(&p, mem, CAP, true);
	tpu__shm_ring_attach(&c, mem, CAP, false);
	for (i = 0; i < 20000 && ok; i++) {
		size_t want = rng(&seed) % (CAP + CAP / 2), got, expect, k;
		struct iovec iov[3];
		size_t split1 = want ? rng(&seed) % want : 0, split2 = want - split1;

		for (k = 0; k < want; k++)
			src[k] = pat(wpos + k);
		/* Three pieces, the middle one empty, so that pieces cross the wrap too. */
		iov[0] = (struct iovec){ src, split1 };
		iov[1] = (struct iovec){ src + split1, 0 };
		iov[2] = (struct iovec){ src + split1, split2 };
		expect = CAP - (wpos - rpos) < want ? CAP - (wpos - rpos) : want;
		got = tpu__shm_ring_write(&p, iov, 3, 0);
		ok &= got == expect;
		wpos += got;
		ok &= tpu__shm_ring_readable(&c) == wpos - rpos;
		want = rng(&seed) % (CAP + CAP / 2);
		expect = wpos - rpos < want ? wpos - rpos : want;
		got = tpu__shm_ring_read(&c, dst, want);
		ok &= got == expect;
		for (k = 0; k < got; k++)
			ok &= dst[k] == pat(rpos + k);
		rpos += got;
		ok &= tpu__shm_ring_writable(&p) == CAP - (wpos - rpos);
	}
	CHECK(ok, "ring: 20000 random writes and reads agree with a model (%llu bytes, %d steps)",
	      (unsigned long long)rpos, i);
	CHECK(wpos > 100 * CAP, "ring: the model test wrapped around many times");
	ring_mem_free(mem, CAP);
}

/* A peer that scribbles on the counters makes the ring broken, never an overrun. */
static void test_hostile(void)
{
	struct tpu__shm_ring p, c;
	void *mem = ring_mem(CAP);
	struct tpu__shm_ring_hdr *h = mem;
	uint8_t buf[64] = { 0 };
	struct iovec iov = { buf, sizeof(buf) };

	CHECK(mem != NULL, "ring: shared memory");
	if (!mem)
		return;
	tpu__shm_ring_init(mem, CAP);
	tpu__shm_ring_attach(&p, mem, CAP, true);
	tpu__shm_ring_attach(&c, mem, CAP, false);
	atomic_store(&h->head, CAP + 1);
	CHECK(tpu__shm_ring_read(&c, buf, sizeof(buf)) == 0 && tpu__shm_ring_broken(&c),
	      "ring: a head more than the capacity ahead breaks the consumer's ring");
	CHECK(tpu__shm_ring_readable(&c) == 0, "ring: a broken ring has nothing to read");
	/* Ahead of any head the producer reaches before it looks again. */
	atomic_store(&h->tail, CAP + 5);
	/*
	 * The producer keeps writing into the space it last saw free (the
	 * tail is loaded again only when that runs out): never more than the
	 * capacity, and the next load sees the nonsense.
	 */
	{
		size_t n, total = 0;

		while ((n = tpu__shm_ring_write(&p, &iov, 1, 0)) > 0 && total <= CAP)
			total += n;
		CHECK(total <= CAP && tpu__shm_ring_broken(&p),
		      "ring: a tail ahead of the head breaks the producer's ring at its next "
		      "look at the tail (%zu bytes written before)", total);
	}
	h->capacity = 1ull << 40;
	CHECK(tpu__shm_ring_writable(&p) == 0, "ring: the capacity is not re-read from the header");
	ring_mem_free(mem, CAP);
}

static void test_flags(void)
{
	struct tpu__shm_ring p, c;
	void *mem = ring_mem(CAP);
	uint8_t buf[CAP];
	struct iovec iov = { buf, 10 };

	CHECK(mem != NULL, "ring: shared memory");
	if (!mem)
		return;
	memset(buf, 7, sizeof(buf));
	tpu__shm_ring_init(mem, CAP);
	tpu__shm_ring_attach(&p, mem, CAP, true);
	tpu__shm_ring_attach(&c, mem, CAP, false);
	CHECK(!tpu__shm_ring_reader_needs_wake(&p), "ring: nobody asleep, no wake");
	CHECK(!tpu__shm_ring_reader_arm(&c), "ring: arming the reader of an empty ring: sleep");
	tpu__shm_ring_write(&p, &iov, 1, 0);
	CHECK(tpu__shm_ring_reader_needs_wake(&p), "ring: a write wakes the sleeping reader");
	CHECK(!tpu__shm_ring_reader_needs_wake(&p), "ring: only once per sleep");
	CHECK(tpu__shm_ring_reader_arm(&c), "ring: arming with bytes there: do not sleep");
	tpu__shm_ring_reader_disarm(&c);
	tpu__shm_ring_write(&p, &iov, 1, 0);
	CHECK(!tpu__shm_ring_reader_needs_wake(&p), "ring: a disarmed reader is not woken");
	tpu__shm_ring_read(&c, buf, sizeof(buf));

	iov.iov_len = CAP;
	tpu__shm_ring_write(&p, &iov, 1, 0);
	CHECK(!tpu__shm_ring_writer_arm(&p), "ring: arming the writer of a full ring: sleep");
	tpu__shm_ring_read(&c, buf, 1);
	CHECK(tpu__shm_ring_writer_needs_wake(&c), "ring: a read wakes the waiting writer");
	CHECK(!tpu__shm_ring_writer_needs_wake(&c), "ring: only once per wait");
	CHECK(tpu__shm_ring_writer_arm(&p), "ring: arming with room there: do not sleep");
	tpu__shm_ring_writer_disarm(&p);
	tpu__shm_ring_read(&c, buf, 1);
	CHECK(!tpu__shm_ring_writer_needs_wake(&c), "ring: a disarmed writer is not woken");
	ring_mem_free(mem, CAP);
}

/* ---- two threads ----------------------------------------------------------- */

#define STRESS_BYTES	(8u << 20)

struct stress {
	void *mem;
	bool sleepy;		/* use the sleep protocol instead of spinning */
	int efd_reader, efd_writer;
	uint64_t sum_in, sum_out;
	bool order_ok;
	atomic_int timeouts;	/* sleeps that needed the fallback timeout: a lost wake-up */
	atomic_int sleeps;
};

static uint64_t fnv(uint64_t h, const uint8_t *p, size_t n)
{
	while (n--)
		h = (h ^ *p++) * 0x100000001b3ull;
	return h;
}

static void efd_wait(struct stress *s, int fd)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	uint64_t v;

	atomic_fetch_add(&s->sleeps, 1);
	if (poll(&pfd, 1, 2000) == 0)
		atomic_fetch_add(&s->timeouts, 1);
	else if (read(fd, &v, sizeof(v)) < 0)
		atomic_fetch_add(&s->timeouts, 1);
}

static void efd_kick(int fd)
{
	uint64_t one = 1;

	if (write(fd, &one, sizeof(one)) != sizeof(one))
		abort();
}

static void *stress_producer(void *arg)
{
	struct stress *s = arg;
	struct tpu__shm_ring r;
	static uint8_t chunk[3000];
	uint64_t seed = 0x9e3779b97f4a7c15ull, pos = 0;

	tpu__shm_ring_attach(&r, s->mem, CAP, true);
	s->sum_in = 0xcbf29ce484222325ull;
	while (pos < STRESS_BYTES) {
		size_t len = 1 + rng(&seed) % sizeof(chunk), k, off = 0;
		struct iovec iov[2];

		if (len > STRESS_BYTES - pos)
			len = STRESS_BYTES - pos;
		for (k = 0; k < len; k++)
			chunk[k] = pat(pos + k);
		s->sum_in = fnv(s->sum_in, chunk, len);
		iov[0] = (struct iovec){ chunk, len / 3 };
		iov[1] = (struct iovec){ chunk + len / 3, len - len / 3 };
		while (off < len) {
			size_t n = tpu__shm_ring_write(&r, iov, 2, off);

			off += n;
			if (n && tpu__shm_ring_reader_needs_wake(&r))
				efd_kick(s->efd_reader);
			if (n)
				continue;
			if (!s->sleepy)
				sched_yield();
			else if (!tpu__shm_ring_writer_arm(&r))
				efd_wait(s, s->efd_writer);
			else
				tpu__shm_ring_writer_disarm(&r);
		}
		pos += len;
	}
	return NULL;
}

static void *stress_consumer(void *arg)
{
	struct stress *s = arg;
	struct tpu__shm_ring r;
	static uint8_t buf[5000];
	uint64_t seed = 0x2545f4914f6cdd1dull, pos = 0;

	tpu__shm_ring_attach(&r, s->mem, CAP, false);
	s->sum_out = 0xcbf29ce484222325ull;
	s->order_ok = true;
	while (pos < STRESS_BYTES) {
		size_t want = 1 + rng(&seed) % sizeof(buf), n, k;

		n = tpu__shm_ring_read(&r, buf, want);
		if (n) {
			if (tpu__shm_ring_writer_needs_wake(&r))
				efd_kick(s->efd_writer);
			for (k = 0; k < n; k++)
				s->order_ok &= buf[k] == pat(pos + k);
			s->sum_out = fnv(s->sum_out, buf, n);
			pos += n;
			continue;
		}
		if (!s->sleepy)
			sched_yield();
		else if (!tpu__shm_ring_reader_arm(&r))
			efd_wait(s, s->efd_reader);
		else
			tpu__shm_ring_reader_disarm(&r);
	}
	return NULL;
}

static void run_stress(bool sleepy)
{
	struct stress s = { .sleepy = sleepy };
	pthread_t a, b;
	const char *what = sleepy ? "with the sleep protocol" : "spinning";

	s.mem = ring_mem(CAP);
	s.efd_reader = eventfd(0, EFD_CLOEXEC);
	s.efd_writer = eventfd(0, EFD_CLOEXEC);
	CHECK(s.mem && s.efd_reader >= 0 && s.efd_writer >= 0, "ring stress: setup");
	if (!s.mem || s.efd_reader < 0 || s.efd_writer < 0)
		goto out;
	tpu__shm_ring_init(s.mem, CAP);
	pthread_create(&a, NULL, stress_producer, &s);
	pthread_create(&b, NULL, stress_consumer, &s);
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	CHECK(s.order_ok, "ring stress %s: 8 MiB through 4 KiB arrive in order", what);
	CHECK(s.sum_in == s.sum_out, "ring stress %s: checksums agree", what);
	if (sleepy)
		CHECK(atomic_load(&s.timeouts) == 0,
		      "ring stress %s: no lost wake-up in %d sleeps", what, atomic_load(&s.sleeps));
out:
	if (s.efd_reader >= 0)
		close(s.efd_reader);
	if (s.efd_writer >= 0)
		close(s.efd_writer);
	ring_mem_free(s.mem, CAP);
}

/*
 * Reading in place: a 16-byte "header" in the last bytes of the data area
 * and its "body" at the start, peeked without moving the tail, then taken
 * in one move; a body bigger than what is in the ring yet is refused and
 * changes nothing; a peek split inside the header.
 */
static void test_peek_take(void)
{
	struct tpu__shm_ring p, c;
	void *mem = ring_mem(CAP);
	uint8_t in[CAP], hdr[16], body[200], out[CAP];
	struct iovec iov = { .iov_base = in, .iov_len = CAP - 16 };
	uint64_t moves;
	size_t i;

	CHECK(mem != NULL, "ring peek: shared memory");
	if (!mem)
		return;
	for (i = 0; i < sizeof(in); i++)
		in[i] = pat(i);
	tpu__shm_ring_init(mem, CAP);
	tpu__shm_ring_attach(&p, mem, CAP, true);
	tpu__shm_ring_attach(&c, mem, CAP, false);
	/* Put the reader 16 bytes before the end of the data area. */
	tpu__shm_ring_write(&p, &iov, 1, 0);
	tpu__shm_ring_read(&c, out, CAP - 16);
	moves = tpu__shm_ring_tail_moves(&c);
	CHECK(!tpu__shm_ring_peek(&c, 0, hdr, 16), "ring peek: nothing to peek in an empty ring");
	/* Header and the first 100 bytes of a 200-byte body: the body wraps. */
	iov.iov_len = 116;
	tpu__shm_ring_write(&p, &iov, 1, 0);
	CHECK(tpu__shm_ring_peek(&c, 0, hdr, 16) && !memcmp(hdr, in, 16),
	      "ring peek: the header in the last 16 bytes of the data area");
	CHECK(!tpu__shm_ring_peek(&c, 16, body, 200) && !tpu__shm_ring_take(&c, 16, body, 200),
	      "ring peek: a body bigger than what is in the ring is refused");
	CHECK(tpu__shm_ring_readable(&c) == 116 && tpu__shm_ring_tail_moves(&c) == moves,
	      "ring peek: a refused peek or take changes nothing");
	iov.iov_base = in + 116;
	iov.iov_len = 100;
	tpu__shm_ring_write(&p, &iov, 1, 0);
	memset(body, 0, sizeof(body));
	CHECK(tpu__shm_ring_peek(&c, 16, body, 200) && !memcmp(body, in + 16, 200) &&
	      tpu__shm_ring_readable(&c) == 216 && tpu__shm_ring_tail_moves(&c) == moves,
	      "ring peek: the body across the end of the data area, the tail unmoved");
	memset(body, 0, sizeof(body));
	CHECK(tpu__shm_ring_take(&c, 16, body, 200) && !memcmp(body, in + 16, 200) &&
	      tpu__shm_ring_readable(&c) == 0 && tpu__shm_ring_tail_moves(&c) == moves + 1 &&
	      tpu__shm_ring_writable(&p) == CAP,
	      "ring take: header and body given back in one move of the tail");
	/* The next header split by the end: 8 bytes at the end, 8 at the start. */
	i = CAP - 8 - (size_t)(c.pos & (CAP - 1));
	tpu__shm_ring_write(&p, &(struct iovec){ in, i }, 1, 0);
	tpu__shm_ring_read(&c, out, i);
	tpu__shm_ring_write(&p, &(struct iovec){ in + 1000, 24 }, 1, 0);
	CHECK((c.pos & (CAP - 1)) == CAP - 8 && tpu__shm_ring_peek(&c, 0, hdr, 16) &&
	      !memcmp(hdr, in + 1000, 16) && tpu__shm_ring_take(&c, 16, out, 8) &&
	      !memcmp(out, in + 1016, 8),
	      "ring peek: a header split by the end of the data area");
	CHECK(!tpu__shm_ring_peek(&c, CAP, out, 1) && !tpu__shm_ring_take(&c, 1, out, CAP),
	      "ring peek: more than the capacity is refused");
	/* A skip and a length whose sum wraps to what is there: still refused. */
	tpu__shm_ring_write(&p, &(struct iovec){ in, 8 }, 1, 0);
	CHECK(tpu__shm_ring_readable(&c) == 8 && !tpu__shm_ring_peek(&c, SIZE_MAX - 3, out, 8) &&
	      !tpu__shm_ring_take(&c, SIZE_MAX - 3, out, 8) &&
	      !tpu__shm_ring_peek(&c, 8, out, SIZE_MAX - 3) && !tpu__shm_ring_broken(&c),
	      "ring peek: a skip and a length whose sum wraps are refused");
	ring_mem_free(mem, CAP);
}

/*
 * A frame read in place the way the pipe reads it (the poll looks, then the
 * header, the body and a payload are peeked and all of it taken) loads the
 * producer's head once, at the look: the peeks and the take stay within
 * the bytes that look saw.  A peek beyond them loads it again.
 */
static void test_peek_loads(void)
{
	struct tpu__shm_ring p, c;
	void *mem = ring_mem(CAP);
	uint8_t in[280], out[280];
	struct iovec iov = { in, sizeof(in) };
	uint64_t loads;
	bool ok;

	CHECK(mem != NULL, "ring peek: shared memory");
	if (!mem)
		return;
	for (size_t i = 0; i < sizeof(in); i++)
		in[i] = (uint8_t)(i * 13 + 5);
	tpu__shm_ring_init(mem, CAP);
	tpu__shm_ring_attach(&p, mem, CAP, true);
	tpu__shm_ring_attach(&c, mem, CAP, false);
	ok = tpu__shm_ring_write_all(&p, &iov, 1, sizeof(in));
	loads = tpu__shm_ring_head_loads(&c);
	ok &= tpu__shm_ring_readable(&c) == sizeof(in);
	ok &= tpu__shm_ring_peek(&c, 0, out, 16) && tpu__shm_ring_peek(&c, 16, out + 16, 200) &&
	      tpu__shm_ring_peek(&c, 216, out + 216, 64) && tpu__shm_ring_take(&c, 280, NULL, 0);
	CHECK(ok && !memcmp(out, in, sizeof(in)) && tpu__shm_ring_head_loads(&c) == loads + 1,
	      "ring peek: a frame peeked in three parts and taken loads the head once (%llu loads)",
	      (unsigned long long)(tpu__shm_ring_head_loads(&c) - loads));
	/* Nothing left: a peek loads the head again, and sees what came meanwhile. */
	ok = !tpu__shm_ring_peek(&c, 0, out, 16) && tpu__shm_ring_head_loads(&c) == loads + 2;
	ok &= tpu__shm_ring_write_all(&p, &iov, 1, 16);
	ok &= tpu__shm_ring_peek(&c, 0, out, 16) && !memcmp(out, in, 16) &&
	      tpu__shm_ring_head_loads(&c) == loads + 3;
	CHECK(ok, "ring peek: beyond the head last seen the head is loaded again");
	ring_mem_free(mem, CAP);
}

/*
 * The bounds of peek and take rest on the head the peer publishes: one
 * more than the capacity ahead breaks the ring, and nothing is copied or
 * given back, whatever the skip and length asked for.
 */
static void test_peek_hostile(void)
{
	struct tpu__shm_ring p, c;
	void *mem = ring_mem(CAP);
	struct tpu__shm_ring_hdr *h = mem;
	uint8_t in[32] = { 1 }, out[32];
	struct iovec iov = { in, sizeof(in) };
	uint64_t tail;

	CHECK(mem != NULL, "ring peek: shared memory");
	if (!mem)
		return;
	tpu__shm_ring_init(mem, CAP);
	tpu__shm_ring_attach(&p, mem, CAP, true);
	tpu__shm_ring_attach(&c, mem, CAP, false);
	tpu__shm_ring_write(&p, &iov, 1, 0);
	tail = atomic_load(&h->tail);
	/* The head scribbled a byte past a full lap: every skip and length is refused. */
	atomic_store(&h->head, c.pos + CAP + 1);
	CHECK(!tpu__shm_ring_peek(&c, 0, out, 1) && tpu__shm_ring_broken(&c),
	      "ring peek: a head more than the capacity ahead breaks the ring");
	CHECK(!tpu__shm_ring_peek(&c, CAP, out, 1) && !tpu__shm_ring_take(&c, 0, out, 16) &&
	      !tpu__shm_ring_take(&c, CAP, NULL, 0) && atomic_load(&h->tail) == tail &&
	      tpu__shm_ring_tail_moves(&c) == 0,
	      "ring take: nothing is given back on a broken ring");
	/* A head exactly a lap ahead is a full ring, which a fresh side may read. */
	atomic_store(&h->head, sizeof(in));
	CHECK(tpu__shm_ring_attach(&c, mem, CAP, false) == 0, "ring peek: attached again");
	atomic_store(&h->head, c.pos + CAP);
	CHECK(tpu__shm_ring_peek(&c, CAP - 16, out, 16) && !tpu__shm_ring_peek(&c, CAP - 15, out, 16) &&
	      !tpu__shm_ring_broken(&c),
	      "ring peek: a full lap is readable to its last byte, and no further");
	ring_mem_free(mem, CAP);
}

/*
 * The producer's side of the write path: write_all copies all or nothing
 * with one head move; the consumer's tail is loaded again only when the
 * space last seen is too small (once a lap while the consumer keeps up);
 * a tail that goes back is the peer's nonsense.
 */
static void test_write_all(void)
{
	struct tpu__shm_ring p, c;
	void *mem = ring_mem(CAP);
	struct tpu__shm_ring_hdr *h = mem;
	uint8_t a[100], b[1000], out[1100];
	struct iovec iov[2] = { { a, sizeof(a) }, { b, sizeof(b) } };
	bool ok = true;
	unsigned int i;

	CHECK(mem != NULL, "ring: shared memory");
	if (!mem)
		return;
	for (i = 0; i < sizeof(a); i++)
		a[i] = (uint8_t)(i + 1);
	for (i = 0; i < sizeof(b); i++)
		b[i] = (uint8_t)(i * 7 + 3);
	tpu__shm_ring_init(mem, CAP);
	tpu__shm_ring_attach(&p, mem, CAP, true);
	tpu__shm_ring_attach(&c, mem, CAP, false);
	/* Three fit (3300 of 4096 bytes), the fourth does not: nothing of it goes in. */
	for (i = 0; i < 3; i++)
		ok &= tpu__shm_ring_write_all(&p, iov, 2, 1100);
	CHECK(ok && tpu__shm_ring_head_moves(&p) == 3 && tpu__shm_ring_readable(&c) == 3300,
	      "ring: write_all puts two iovecs in with one head move each");
	CHECK(!tpu__shm_ring_write_all(&p, iov, 2, 1100) && tpu__shm_ring_head_moves(&p) == 3 &&
	      tpu__shm_ring_readable(&c) == 3300 && !tpu__shm_ring_broken(&p),
	      "ring: write_all of more than the space writes nothing");
	CHECK(!tpu__shm_ring_write_all(&p, iov, 2, CAP + 1), "ring: write_all of more than the capacity fails");
	/* Reading makes room; the writes then wrap around the end, intact. */
	ok = tpu__shm_ring_read(&c, out, sizeof(out)) == sizeof(out) &&
	     !memcmp(out, a, sizeof(a)) && !memcmp(out + sizeof(a), b, sizeof(b));
	ok &= tpu__shm_ring_write_all(&p, iov, 2, 1100);
	for (i = 0; i < 3; i++)
		ok &= tpu__shm_ring_read(&c, out, sizeof(out)) == sizeof(out) &&
		      !memcmp(out, a, sizeof(a)) && !memcmp(out + sizeof(a), b, sizeof(b));
	CHECK(ok && tpu__shm_ring_readable(&c) == 0, "ring: write_all wraps around the end intact");
	ring_mem_free(mem, CAP);

	/* A consumer that keeps up: 1000 writes of 100 bytes load the tail about once a lap. */
	mem = ring_mem(CAP);
	if (!mem)
		return;
	h = mem;
	tpu__shm_ring_init(mem, CAP);
	tpu__shm_ring_attach(&p, mem, CAP, true);
	tpu__shm_ring_attach(&c, mem, CAP, false);
	ok = true;
	for (i = 0; i < 1000; i++)
		ok &= tpu__shm_ring_write(&p, iov, 1, 0) == sizeof(a) &&
		      tpu__shm_ring_read(&c, out, sizeof(a)) == sizeof(a) && !memcmp(out, a, sizeof(a));
	tap_diag("ring: %llu tail loads in 1000 writes of 100 bytes through %u bytes",
		 (unsigned long long)tpu__shm_ring_tail_loads(&p), CAP);
	CHECK(ok && tpu__shm_ring_tail_loads(&p) <= 1000 * sizeof(a) / CAP + 1,
	      "ring: the producer loads the tail once a lap, not once a write (%llu loads)",
	      (unsigned long long)tpu__shm_ring_tail_loads(&p));
	/* The tail goes back (it was 100000): the next load breaks the producer's ring. */
	atomic_store(&h->tail, 50);
	for (i = 0; i < 100 && tpu__shm_ring_write(&p, iov, 1, 0); i++)
		;
	CHECK(tpu__shm_ring_broken(&p) && i <= CAP / sizeof(a),
	      "ring: a tail that goes back breaks the producer's ring (%u writes before)", i);
	ring_mem_free(mem, CAP);
}

void test_shm_ring(void)
{
	test_formats();
	test_basic();
	test_iovec();
	test_peek_take();
	test_peek_hostile();
	test_peek_loads();
	test_model();
	test_hostile();
	test_write_all();
	test_flags();
	run_stress(false);
	run_stress(true);
}
