/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The shared segment of a group whose members share a host (coll_shm_seg.c
 * maps it and waits on it, coll_shm.c runs the collectives over it).
 *
 * Layout: a header line, one control line per member, two data slots per
 * member (alternating by call), then per member a ring of SHM_RING call
 * descriptions and a ring of SHM_RING small slots (calls through the slots
 * of up to SHM_SMALL bytes per member take the small slot of their place
 * in the ring, larger ones the slot of their parity).  A member writes
 * only its own line, descriptions and slots; what others wrote there is
 * read as hostile: counts are compared with the reader's own, addresses
 * are used only with the pid the kernel proved, and nothing else is acted
 * on.
 *
 * No call ends in a barrier: a member returns once its own result is
 * complete (a broadcast's root right after filling its slot).  What keeps
 * that safe is the reuse rule: before call k writes its description and
 * data, the member waits until every other member's parts word names call
 * k - D + 1 or a later one, D being SHM_RING for a small call and 2 for any
 * other (its parity's slot, the grant table of a single-copy call;
 * wait_reuse() in coll_shm.c).  Why that suffices:
 *  - a member writes its parts word for call j only on entering call j,
 *    after it returned from call j - 1: a word naming call k - D + 1 means
 *    that member finished call k - D and every call before, every read of
 *    them included;
 *  - a member reads another's description and data of call k only inside
 *    call k, and only what the owner wrote in call k (the parts word
 *    carries the call's number, and nothing is read before that word names
 *    call k or a later one);
 *  - the places call k writes were last written by call k - SHM_RING (the
 *    small slot and the description) or, for a parity slot, by a call no
 *    later than k - 2; so every write of call k comes after every read of
 *    what it overwrites.  An owner that runs ahead blocks when it would
 *    overwrite what a late member has yet to read, never earlier.
 * Call numbers in a parts word are 16 bits, compared as a signed
 * difference: members are never more than SHM_RING calls apart.
 */
#ifndef TPU_COLL_SHM_H
#define TPU_COLL_SHM_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "coll.h"

#define SHM_MAGIC	0x73636f6cU	/* "scol" */
#define SHM_LINE	128u		/* two cache lines: no false sharing with prefetch */
/*
 * A slot is written and published in parts of this many bytes (a multiple
 * of every element size), so that readers copy or reduce one part while
 * its writer copies the next.
 */
#define SHM_PART	(16u << 10)
/*
 * Calls through the slots of up to SHM_SMALL bytes per member go through a
 * ring of SHM_RING small slots: a member may run that many calls ahead of
 * the slowest instead of two, so that with more members than cores each
 * runs several calls per time slice instead of waiting for the others'
 * turn at every second call.
 */
#define SHM_RING	8u
#define SHM_SMALL	(4u << 10)
_Static_assert(SHM_SMALL <= SHM_PART, "a small slot is one part");
/*
 * All-reduces of this many bytes and more through the slots are split:
 * each member reduces 1/n of the slots and copies the rest reduced by the
 * others (split_all_reduce()); on a loaded 2-core host 2 members at 4 KiB
 * took 2.3-2.4 against 3.8-4.2 us, at 64 KiB 36 against 37-53 us, at 4
 * members 14.5 against 18.2 us at 4 KiB and 100 against 136 us at 64 KiB.
 * Below it, one phase fewer: every member reduces every slot.
 */
#define SHM_SPLIT	(4u << 10)
/* A parts word's count once the member's chunk of an all-reduce is reduced in its slot. */
#define SHM_REDUCED	0xffffu
_Static_assert(TPU__SHM_SLOT / SHM_PART < SHM_REDUCED, "a slot's parts must count below SHM_REDUCED");
/*
 * Broadcasts and all-gathers of this many bytes per member and more are
 * read straight from the members' buffers (process_vm_readv), not through
 * the slots: on a 2-core host, 2 members, 64 KiB: 6.7 against 7.9 us
 * (broadcast), 7.7 against 10.5 us (all-gather); at 16 KiB the slots win
 * (2.0 against 3.2 us), at 32 KiB both take 4.2 us.
 */
#define SHM_SINGLE_COPY	(32u << 10)
/*
 * A broadcast whose share per member is this many bytes and more is
 * copied by every member: the root writes each receiver's share of its
 * output (process_vm_writev), the receiver reads the rest
 * (split_broadcast() in coll_shm.c).  4 members on a loaded 2-core host:
 * 128 KiB took the same either way, 256 KiB 48-59 against 54-67 us, 1 MiB
 * 148-191 against 217-240 us; at 64 KiB the split lost (23-26 against
 * 20-22 us).  2 members split from 64 KiB as before.
 */
#define SHM_BCAST_SHARE	(32u << 10)

/* Whether a broadcast of @bytes is split between the members (SHM_BCAST_SHARE). */
static inline bool shm_bcast_split(int n, uint64_t bytes)
{
	return n > 1 && bytes / (uint64_t)n >= SHM_BCAST_SHARE;
}

/* What a call is: every member must publish the same (the slot index apart). */
struct shm_desc {
	int32_t type, dtype, op, final_op, root, pad;
	uint64_t count;
	uint64_t in, out;		/* this member's buffers (large path) */
};

struct shm_line {
	_Atomic uint32_t seq;		/* futex word: phases published so far */
	_Atomic uint32_t waiters;	/* members asleep on seq */
	int32_t pid;			/* informative only */
	_Atomic int32_t cpu;		/* where this member last looked from */
	_Atomic uint32_t ready;		/* futex word: call (high 16 bits), slot parts written */
	uint64_t ep;			/* module endpoint id (coll_shm_kmod.c), else 0 */
};

/*
 * The module path: a member's slot of a call it runs single-copy holds
 * one of these per member instead of data, the grants it made to that
 * member (0: none; the reader then uses process_vm_readv/writev).
 */
struct shm_grants {
	uint32_t in, out;
};
_Static_assert(TPU__SHM_MAX_MEMBERS * sizeof(struct shm_grants) <= TPU__SHM_SLOT,
	       "a slot must hold a grant table");

struct shm_hdr {
	uint32_t magic;
	uint32_t n;
	uint64_t slot;
	_Atomic int32_t abort;		/* 0, or the status every member fails with */
	_Atomic uint32_t why_state;	/* 0, 1 while a mismatch's reason is written, 2 */
	char why[96];			/* that reason (another member's words: sanitised) */
};

_Static_assert(sizeof(struct shm_line) <= SHM_LINE, "control line too long");
_Static_assert(sizeof(struct shm_hdr) <= SHM_LINE, "header too long");

struct tpu__shm_coll {
	int n, rank;
	size_t slot;
	size_t size;
	unsigned char *base;
	bool own_base;			/* detach unmaps base (not a lane of a larger mapping) */
	pid_t *pids;			/* proven by the kernel */
	int *pidfds;			/* liveness (-1 for this member) */
	uint32_t seq;			/* this member's phases published */
	uint64_t spin_ns;		/* spin this long before yielding the core */
	uint64_t calls;			/* calls run */
	bool small;			/* this call goes through the small slots */
	void *tmp;			/* one piece, for reductions from peers */
	tpu_status failed;		/* sticky: the segment is out of step */
	const atomic_bool *cancel;	/* the running call's (tpu__shm_call), or NULL */
	const char *way;		/* of the last call: "slots", "cma", "kmod" or "kmod+cma" */

	/* The module path (coll_shm_kmod.c): on when every member joined one domain. */
	int kfd;			/* this member's endpoint, or -1 */
	bool kmod;
	uint64_t *eps;			/* every member's endpoint id, read once when turned on */
	uint32_t regions[2];		/* this call's module regions (0: none) */
	bool fell_back;			/* this call read a member by process_vm_readv instead */
};

static inline struct shm_hdr *shm_hdr(const struct tpu__shm_coll *s)
{
	return (struct shm_hdr *)s->base;
}

static inline struct shm_line *shm_line(const struct tpu__shm_coll *s, int r)
{
	return (struct shm_line *)(s->base + SHM_LINE * (1 + (size_t)r));
}

/* Member @r's slot of @call's parity (a large call's data, or grant table). */
static inline unsigned char *shm_slot(const struct tpu__shm_coll *s, int r, uint64_t call)
{
	return s->base + SHM_LINE * (1 + (size_t)s->n) + s->slot * (2 * (size_t)r + (call & 1));
}

/* Member @r's description of @call, in its ring after every member's parity slots. */
static inline struct shm_desc *shm_desc_of(const struct tpu__shm_coll *s, int r, uint64_t call)
{
	return (struct shm_desc *)(s->base + SHM_LINE * (1 + (size_t)s->n) +
				   2 * s->slot * (size_t)s->n) +
	       SHM_RING * (size_t)r + call % SHM_RING;
}

/* Member @r's data of @call through the slots: its small slot, or its parity's. */
static inline unsigned char *shm_data(const struct tpu__shm_coll *s, int r, uint64_t call)
{
	if (!s->small)
		return shm_slot(s, r, call);
	return (unsigned char *)shm_desc_of(s, s->n, 0) +
	       SHM_SMALL * (SHM_RING * (size_t)r + call % SHM_RING);
}

_Static_assert(SHM_RING * sizeof(struct shm_desc) % 64 == 0, "a ring of descriptions ends aligned");

/* coll_shm_seg.c */
/* A segment's size for @n members of @slot bytes, and whether those are valid. */
size_t tpu__shm_seg_size(int n, size_t slot);
bool tpu__shm_seg_args_ok(int n, size_t slot);
/* Write a new segment's header at @region (its creator only, before sealing). */
void tpu__shm_seg_init(void *region, int n, size_t slot);
/* 0 when @fd is a memfd sealed against growing and shrinking, of exactly @size bytes. */
tpu_status tpu__shm_check_fd(int fd, size_t size);
/*
 * Attach the segment mapped at @base (tpu__shm_seg_size() bytes, checked
 * by the caller); detach unmaps it only when @own.
 */
tpu_status tpu__shm_coll_attach_at(void *base, bool own, int n, int rank, size_t slot,
				   const pid_t *pids, struct tpu__shm_coll **out);
/* Publish one more phase (and wake sleepers). */
void tpu__shm_publish(struct tpu__shm_coll *s);
/* Wait until member @r published @target phases; a failure is sticky and aborts the others. */
tpu_status tpu__shm_wait(struct tpu__shm_coll *s, int r, uint32_t target, uint64_t deadline_ns);
/* Publish, then wait for every other member to reach this phase. */
tpu_status tpu__shm_barrier(struct tpu__shm_coll *s, uint64_t deadline_ns);
/* The second half of a barrier: wait for every other member to reach this member's phase. */
tpu_status tpu__shm_wait_all(struct tpu__shm_coll *s, uint64_t deadline_ns);
/* Say that the first @parts parts of this member's slot of call @call are written. */
void tpu__shm_ready(struct tpu__shm_coll *s, uint64_t call, uint32_t parts);
/* Wait until member @r said so for at least @parts parts of call @call (or a later call). */
tpu_status tpu__shm_wait_ready(struct tpu__shm_coll *s, int r, uint64_t call, uint32_t parts,
			       uint64_t deadline_ns);
/* 0, or the status another member failed the segment with. */
tpu_status tpu__shm_aborted(const struct tpu__shm_coll *s);
/* Whether member @r's process exited (or does within @within_ms). */
bool tpu__shm_dead(const struct tpu__shm_coll *s, int r, int within_ms);
/* Fail the segment for every member with @st (the others see @peer_st). */
tpu_status tpu__shm_fail(struct tpu__shm_coll *s, tpu_status st, tpu_status peer_st);
/* Fail it with TPU_E_COLL_MISMATCH, leaving @why in the header for the others. */
tpu_status tpu__shm_mismatch(struct tpu__shm_coll *s, const char *why);
/* The reason a member left with its mismatch, printable, into @buf ("" if none). */
void tpu__shm_why(const struct tpu__shm_coll *s, char *buf, size_t size);
/* Whether member @r's parts word names call @call or a later one (its description is there). */
bool tpu__shm_arrived(const struct tpu__shm_coll *s, int r, uint64_t call);

/* coll_shm_kmod.c */
/*
 * Register this member's buffers of @call with the module and grant them,
 * each to every other member's endpoint with only the access it needs,
 * writing the grant table into this member's slot of @call.  A buffer the
 * module refuses (RLIMIT_MEMLOCK, say) gets no grants: its readers fall
 * back to process_vm_readv for it.
 */
void tpu__shm_kmod_expose(struct tpu__shm_coll *s, uint64_t call, const struct tpu__shm_call *c,
			  size_t es);
/* Release this call's regions, which ends their grants (after the final barrier). */
void tpu__shm_kmod_end(struct tpu__shm_coll *s);
/*
 * Member @r's grant of @call to this member for its out buffer (@out) or
 * its in buffer; 0 when it made none.  Only the kernel's checks back it.
 */
uint32_t tpu__shm_kmod_grant(const struct tpu__shm_coll *s, int r, uint64_t call, bool out);
/* @len bytes at @offset of grant @grant into @buf, or (@write) from it: one TP_IOC_COPY list. */
tpu_status tpu__shm_kmod_copy(struct tpu__shm_coll *s, uint32_t grant, uint64_t offset,
			      void *buf, size_t len, bool write);

/* Tests only: added to every grant id this member publishes (a peer that lies). */
extern uint32_t tpu__shm_kmod_grant_skew;

/* Calls run each way in this process, for tests (SHM_WAY_*). */
enum { SHM_WAY_SLOTS, SHM_WAY_CMA, SHM_WAY_KMOD, SHM_WAY_MIXED, SHM_WAYS };
uint64_t tpu__shm_coll_way_count(int way);
void tpu__shm_coll_count_way(int way);

#endif /* TPU_COLL_SHM_H */
