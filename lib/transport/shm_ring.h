/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * A single-producer single-consumer byte ring in memory shared by two
 * processes (the shm transport, xport_shm.c).  Not installed.
 *
 * Layout: a header of TPU__SHM_RING_HDR_SIZE bytes, then the data area of
 * a power-of-two capacity.  head and tail count every byte ever written and
 * read (64 bits: they never wrap), each on its own cache line so that the
 * two sides do not bounce one line between them:
 *
 *   head		written by the producer (release) once bytes are in;
 *   tail		written by the consumer (release) once bytes are out;
 *   reader_asleep	set by the consumer before its thread sleeps;
 *   writer_waiting	set by the producer before it sleeps on a full ring.
 *
 * The sleep protocol (no lost wake-up): the sleeper stores its flag,
 * fences (seq_cst) and looks at the ring again (..._arm returns true if
 * there is something to do after all); the other side publishes bytes or
 * space, fences, and if the flag is set clears it with an exchange and
 * wakes the sleeper (..._needs_wake returns true once per sleep).  One of
 * the two fences comes first, so one side always sees the other.
 *
 * The peer is not trusted: each side keeps the capacity and its own
 * counter in process memory (struct tpu__shm_ring), so that a peer
 * scribbling on the header can only make this side see a broken ring
 * (tpu__shm_ring_broken), never copy outside the data area.
 *
 * Each struct tpu__shm_ring is used by one thread, in one role.
 */
#ifndef TPU_SHM_RING_H
#define TPU_SHM_RING_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define TPU__SHM_RING_MAGIC	0x31474e5253555054ull	/* "TPUSRNG1" little-endian */
/* The data area starts one page in, so that it is page-aligned in a mapping. */
#define TPU__SHM_RING_HDR_SIZE	4096u
#define TPU__SHM_RING_MIN	4096u
#define TPU__SHM_RING_MAX	(1u << 30)

struct tpu__shm_ring_hdr {
	_Alignas(64) _Atomic uint64_t head;
	_Alignas(64) _Atomic uint64_t tail;
	_Alignas(64) _Atomic uint32_t reader_asleep;
	_Alignas(64) _Atomic uint32_t writer_waiting;
	_Alignas(64) uint64_t magic;
	uint64_t capacity;
};

/* One side's handle on a ring. */
struct tpu__shm_ring {
	struct tpu__shm_ring_hdr *hdr;
	uint8_t *data;
	uint64_t cap;		/* a power of two, from attach (never re-read) */
	uint64_t pos;		/* producer: head; consumer: tail (this side's own) */
	/*
	 * Producer: the tail as last loaded.  The space it leaves is never
	 * more than the real space (the tail only grows), so the shared line
	 * the consumer stores to is loaded again only when that is too small:
	 * once per lap of the ring while the consumer keeps up, not once per
	 * write (each load is a cache miss when the consumer just stored).
	 */
	uint64_t tail_seen;
	/*
	 * Consumer: the head as last loaded.  The bytes before it stay
	 * readable until this side takes them, so a peek or take within them
	 * loads the producer's line again only when they do not suffice: once
	 * per message read in place (the poll's look), not once per peek.
	 */
	uint64_t head_seen;
	bool producer;
	bool broken;		/* the other side's counter made no sense */
	_Atomic uint64_t tail_moves;	/* consumer: stores to the tail (tests read it) */
	_Atomic uint64_t head_moves;	/* producer: stores to the head (tests read it) */
	_Atomic uint64_t tail_loads;	/* producer: loads of the consumer's tail (tests) */
	_Atomic uint64_t head_loads;	/* consumer: loads of the producer's head (tests) */
};

/* Bytes of shared memory one ring of @cap bytes takes. */
static inline size_t tpu__shm_ring_size(uint64_t cap)
{
	return TPU__SHM_RING_HDR_SIZE + (size_t)cap;
}

/*
 * Format a ring of @cap bytes (a power of two, TPU__SHM_RING_MIN to _MAX)
 * at @mem (tpu__shm_ring_size(cap) bytes, 64-byte aligned).  -EINVAL if
 * @cap is not acceptable.
 */
int tpu__shm_ring_init(void *mem, uint64_t cap);
/*
 * Take one side of the ring formatted at @mem: -EPROTO unless it carries
 * the magic, a capacity of exactly @cap and counters that make sense.
 */
int tpu__shm_ring_attach(struct tpu__shm_ring *r, void *mem, uint64_t cap, bool producer);

/* Producer: copy what fits of iov[0..n), skipping its first @skip bytes. */
size_t tpu__shm_ring_write(struct tpu__shm_ring *r, const struct iovec *iov, unsigned int n,
			   size_t skip);
/* Consumer: copy out up to @len bytes. */
size_t tpu__shm_ring_read(struct tpu__shm_ring *r, void *buf, size_t len);
/* The same with non-temporal stores to @buf (copy_stream.h), for large reads. */
size_t tpu__shm_ring_read_stream(struct tpu__shm_ring *r, void *buf, size_t len);
/*
 * Consumer, reading in place: if @skip + @len bytes are readable, copy the
 * @len bytes that follow the first @skip into @buf and return true; else
 * return false and change nothing.  peek leaves every byte in the ring;
 * take then gives the first @skip + @len back to the producer, in one move
 * of the tail (so a frame's header and body, or the bytes peeked before and
 * what follows them, cost one store to the shared line).  The bytes are
 * the peer's to scribble on until then: decode only the copy.
 */
bool tpu__shm_ring_peek(struct tpu__shm_ring *r, size_t skip, void *buf, size_t len);
bool tpu__shm_ring_take(struct tpu__shm_ring *r, size_t skip, void *buf, size_t len);
/* Consumer: how many times the tail moved (each read, each take; for tests). */
uint64_t tpu__shm_ring_tail_moves(const struct tpu__shm_ring *r);
/* Consumer: how many times the producer's head was loaded (for tests). */
uint64_t tpu__shm_ring_head_loads(const struct tpu__shm_ring *r);
/* Producer: how many times the head moved, and the tail was loaded (for tests). */
uint64_t tpu__shm_ring_head_moves(const struct tpu__shm_ring *r);
uint64_t tpu__shm_ring_tail_loads(const struct tpu__shm_ring *r);
/*
 * Producer: copy all of iov[0..n) (@total bytes, their sum) with one move
 * of the head and return true, or copy nothing and return false when they
 * do not fit now (or the ring is broken).
 */
bool tpu__shm_ring_write_all(struct tpu__shm_ring *r, const struct iovec *iov, unsigned int n,
			     size_t total);
/*
 * Bytes the consumer may read now (the head loaded again: the poll's look);
 * bytes the producer may write now.
 */
size_t tpu__shm_ring_readable(struct tpu__shm_ring *r);
size_t tpu__shm_ring_writable(struct tpu__shm_ring *r);

static inline bool tpu__shm_ring_broken(const struct tpu__shm_ring *r)
{
	return r->broken;
}

/* Consumer about to sleep: true if bytes arrived meanwhile. */
bool tpu__shm_ring_reader_arm(struct tpu__shm_ring *r);
void tpu__shm_ring_reader_disarm(struct tpu__shm_ring *r);
/* Producer about to sleep on a full ring: true if space appeared meanwhile. */
bool tpu__shm_ring_writer_arm(struct tpu__shm_ring *r);
void tpu__shm_ring_writer_disarm(struct tpu__shm_ring *r);
/* Producer, after writing: true if the consumer must be woken (once per sleep). */
bool tpu__shm_ring_reader_needs_wake(struct tpu__shm_ring *r);
/* Consumer, after reading: true if the producer must be woken. */
bool tpu__shm_ring_writer_needs_wake(struct tpu__shm_ring *r);

#endif /* TPU_SHM_RING_H */
