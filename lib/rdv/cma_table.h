/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The key table of a cma rendezvous: shared memory (a sealed memfd) that
 * every member maps, holding who posted which key where.  Data never enters
 * the table: a consumer pulls it from the producer with process_vm_readv.
 * rdv_cma.c drives operations on top of it; this file pair knows nothing of
 * operations, callbacks or threads, so the tests can exercise it directly.
 *
 * Layout of the memfd (fixed for TPU__CMA_VERSION, checked on open):
 *   header   magic "TPUCMA01", version, sizes, the table lock, the wake
 *            word, the abort status;
 *   members  TPU__CMA_MEMBERS slots, one per joined rendezvous object;
 *   slots    TPU__CMA_SLOTS entries {state, key hash, producer, consumer,
 *            address, length, sequence number, inline flag};
 *   inline   TPU__CMA_INLINE_MAX bytes per slot: the bytes of a small
 *            tensor (sparse too: a page costs memory once used);
 *   keys     TPU__CMA_MAX_KEY bytes per slot, apart from the slots so that
 *            a scan touches only the small entries (the memfd is sparse:
 *            a key's page costs memory only once a slot holding it is used;
 *            16 MiB of address space per table).
 *
 * Slot life: FREE -> POSTED (producer) -> CLAIMED (a consumer pulls) ->
 * DONE (pulled) -> FREE (the producer saw it).  A failed pull puts CLAIMED
 * back to POSTED, so a tensor is never lost.  An inline tensor copied out
 * under the lock (tpu__cma_claim_into) goes from POSTED to DONE at once.
 *
 * Liveness: every member keeps a process-shared robust mutex locked for as
 * long as it is joined (its helper thread holds it).  When the process
 * dies, the kernel marks that mutex's owner dead, and the next trylock says
 * EOWNERDEAD; that is how a peer's death is seen, without trusting a pid
 * that may have been reused.  Slots of a dead producer are dropped, slots
 * claimed by a dead consumer go back to POSTED.
 *
 * The table lock is also robust: a member dying while holding it leaves
 * the counters to be recomputed (every slot update stores the state last,
 * so a half-written slot is still FREE).
 *
 * Wakeups: one 32-bit futex word, bumped after every change and woken with
 * FUTEX_WAKE (a shared futex, not FUTEX_PRIVATE), which every member's
 * helper thread waits on.  A slot's DONE only bumps it (tpu__cma_wake_lazy):
 * the consumer's next wake carries it, most often the post of its answer,
 * so that a producer whose next wait is a receive is woken once, not for
 * the DONE and then for the answer.  The consumer wakes before it sleeps,
 * and a producer with a send pending sleeps TPU__CMA_DONE_BOUND_NS at most:
 * a DONE is never later than that.
 *
 * The members trust one another (any of them may write the table), but no
 * value read from it is used as an index or length without a range check.
 */
#ifndef TPU_CMA_TABLE_H
#define TPU_CMA_TABLE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "rdv.h"	/* TPU__CMA_MAGIC, TPU__KEY_MAX */

/*
 * 5: a consumer's DONE bumps the wake word without waking sleepers
 * (tpu__cma_wake_lazy), so members of version 4, whose producers sleep
 * without a bound, must not share a table with it: refused on open.
 */
#define TPU__CMA_VERSION	5
#define TPU__CMA_SLOTS		4096	/* tensors posted and not yet reaped */
/* Every key the front end accepts; a slot's key then fills one page. */
#define TPU__CMA_MAX_KEY	TPU__KEY_MAX
#define TPU__CMA_MEMBERS	256	/* rendezvous objects joined at once */
/*
 * Tensors up to this many bytes travel in the table (the inline slot
 * area): a process_vm_readv and a second trip through the table lock cost
 * more than copying them twice.
 */
#define TPU__CMA_INLINE_MAX	256

enum tpu__cma_state {
	TPU__CMA_FREE = 0,
	TPU__CMA_POSTED,
	TPU__CMA_CLAIMED,
	TPU__CMA_DONE,
};

/* A member: its slot in the member array and that slot's generation. */
struct tpu__cma_who {
	uint32_t idx;
	uint32_t gen;
};

struct tpu__cma_header;
struct tpu__cma_member;
struct tpu__cma_slot;

/* One process's view of a table. */
struct tpu__cma_table {
	int fd;				/* O_CLOEXEC, owned */
	size_t size;
	struct tpu__cma_header *hdr;	/* the mapping starts here */
	struct tpu__cma_member *members;
	struct tpu__cma_slot *slots;
	uint8_t *keys;
	uint8_t *inl;			/* TPU__CMA_INLINE_MAX bytes per slot */
};

/* A claimed slot: where to pull from and how to report back. */
struct tpu__cma_claim {
	uint32_t idx;
	uint64_t seq;
	pid_t pid;
	uint64_t addr;
	uint64_t len;
	bool inl;		/* the bytes are in the table: tpu__cma_inline_bytes() */
	bool done;		/* tpu__cma_claim_into() copied them: the slot is DONE */
};

/* A posted slot, as its producer refers to it. */
struct tpu__cma_ref {
	uint32_t idx;
	uint64_t seq;
};

/* --- the table as a whole; no lock needed ------------------------------ */

/* A new table in a new memfd.  @pid_ns: an id of the creator's pid namespace. */
tpu_status tpu__cma_table_create(struct tpu__cma_table *t, uint64_t pid_ns);
/*
 * Map the table behind @fd (which stays the caller's).  -EINVAL when @fd is
 * not a table of this version and layout.
 */
tpu_status tpu__cma_table_open(struct tpu__cma_table *t, int fd);
void tpu__cma_table_close(struct tpu__cma_table *t);
/* Whether @fd starts with the magic (read with pread; the offset stays). */
bool tpu__cma_fd_is_table(int fd);
/* The pid namespace id the creator recorded. */
uint64_t tpu__cma_table_pid_ns(const struct tpu__cma_table *t);

/* The wake word, read before looking at the table, then passed to wait. */
uint32_t tpu__cma_wake_seq(const struct tpu__cma_table *t);
/*
 * Bump the wake word and wake every waiter of every process; the system
 * call is skipped while nobody sleeps in tpu__cma_wait() (a thread spinning
 * on the word sees the bump).  A process killed while it sleeps there
 * leaves the count one too high: wakes then always make the call.
 */
void tpu__cma_wake(struct tpu__cma_table *t);
/*
 * Sleep until the wake word differs from @seen, or @timeout_ns passes
 * (-1: no limit).  0 when woken (or it had changed already), -ETIMEDOUT,
 * -EINTR.  Spurious returns are possible: callers re-check.
 */
tpu_status tpu__cma_wait(struct tpu__cma_table *t, uint32_t seen, int64_t timeout_ns);
/*
 * Bump the wake word only: threads spinning on it or about to sleep see
 * the change, sleepers are not woken (see "Wakeups" above).
 */
void tpu__cma_wake_lazy(struct tpu__cma_table *t);
/*
 * The longest a producer with a send pending sleeps: the bound on a lazy
 * DONE.  Beyond the scheduler's tick (4 ms at 250 Hz), as waitword.h's
 * TPU__WW_LATE_BOUND_NS: a sleep timed to end before the tick reprograms
 * the timer when it starts and when it ends early, and with 500 us a
 * round trip of two processes bound to one core took 21.6 to 26.7 us (4.2
 * to 4.6x a futex ping-pong) against 10.4 to 10.5 us with 5 ms.
 */
#define TPU__CMA_DONE_BOUND_NS	5000000
/* For tests: FUTEX_WAKE calls made on this table so far, by every member. */
uint32_t tpu__cma_futex_wakes(const struct tpu__cma_table *t);

/* --- under the table lock ---------------------------------------------- */

/* Take the lock, repairing the table if its last holder died. */
tpu_status tpu__cma_lock(struct tpu__cma_table *t);
void tpu__cma_unlock(struct tpu__cma_table *t);

/*
 * Join as a member: take a free member slot and lock its liveness mutex on
 * the calling thread, which must stay alive while the member is (its exit
 * without tpu__cma_member_leave() reads as the member's death).  Takes the
 * table lock itself.  @probe_addr: the address of TPU__CMA_PROBE_WORD in this
 * process, for a joiner to test its pull.  -EUSERS when all member slots
 * are taken.
 */
tpu_status tpu__cma_member_join(struct tpu__cma_table *t, uint64_t probe_addr,
				struct tpu__cma_who *me);
/* Leave, on the thread that joined; takes the table lock itself. */
void tpu__cma_member_leave(struct tpu__cma_table *t, struct tpu__cma_who me);
/*
 * Whether a member is still joined and its process alive.  Lock held.  A
 * member found dead (joined, never left) counts in tpu__cma_deaths() and
 * wakes every helper.
 */
bool tpu__cma_member_alive(struct tpu__cma_table *t, struct tpu__cma_who who);
/* Member slot @idx: false when nobody lives there, else who and its pid.  Lock held. */
bool tpu__cma_member_pid(struct tpu__cma_table *t, uint32_t idx, struct tpu__cma_who *who,
			 pid_t *pid);
/* Counters, no lock needed: members found dead, members that joined. */
uint32_t tpu__cma_deaths(const struct tpu__cma_table *t);
uint32_t tpu__cma_joins(const struct tpu__cma_table *t);
/* Member slots from here on were never used: a scan of members stops here. */
uint32_t tpu__cma_member_end(const struct tpu__cma_table *t);
/*
 * No lock: true when every joined member's liveness mutex reads as held by
 * a live owner, so that no death waits to be noticed (false: look with
 * tpu__cma_member_alive() under the lock; always false where the mutex
 * cannot be read that way).
 */
bool tpu__cma_members_look_alive(const struct tpu__cma_table *t);
/*
 * The live members other than @self (all when @self is NULL), for the
 * joiner's pull test: up to @max of them, pid and probe address.  Lock held.
 */
size_t tpu__cma_members(struct tpu__cma_table *t, const struct tpu__cma_who *self, pid_t *pids,
			uint64_t *probe_addrs, size_t max);

/*
 * Post a tensor.  Fails with the abort status, -ENAMETOOLONG, -EEXIST (the
 * key is POSTED or CLAIMED by a live producer; a dead one's slot is
 * dropped), -ENOSPC (every slot is in use).
 */
tpu_status tpu__cma_post(struct tpu__cma_table *t, struct tpu__cma_who me, pid_t pid,
			 const uint8_t *key, size_t key_len, uint64_t addr, uint64_t len,
			 struct tpu__cma_ref *ref);
/*
 * tpu__cma_post() of a small tensor (@len up to TPU__CMA_INLINE_MAX, else
 * -EINVAL): its bytes are copied into the slot, so the producer's memory
 * is free again on return; the slot still reaches DONE only once consumed.
 */
tpu_status tpu__cma_post_inline(struct tpu__cma_table *t, struct tpu__cma_who me, pid_t pid,
				const uint8_t *key, size_t key_len, const void *data,
				uint64_t len, struct tpu__cma_ref *ref);
/*
 * Claim the tensor of @key if it fits @capacity: 0 (now CLAIMED by @me),
 * -EAGAIN (none posted), -EMSGSIZE (too long: @out->len is its length, the
 * slot stays POSTED), TPU_E_PEER_GONE (none posted but one of @key whose
 * producer died, dropped now: nobody else will post it).  Slots of dead
 * producers are dropped on the way and slots claimed by dead consumers
 * taken over.
 */
tpu_status tpu__cma_claim(struct tpu__cma_table *t, struct tpu__cma_who me, const uint8_t *key,
			  size_t key_len, uint64_t capacity, struct tpu__cma_claim *out);
/*
 * tpu__cma_claim(), and when the tensor is inline and @dst is not NULL
 * (@capacity bytes), its bytes are copied to @dst and the slot is DONE at
 * once (@out->done): no pull, no tpu__cma_finish().
 */
tpu_status tpu__cma_claim_into(struct tpu__cma_table *t, struct tpu__cma_who me,
			       const uint8_t *key, size_t key_len, uint64_t capacity, void *dst,
			       struct tpu__cma_claim *out);
/*
 * The bytes of an inline tensor @c claimed (CLAIMED by the caller, so
 * nobody else touches them until tpu__cma_finish()); no lock needed.
 */
const void *tpu__cma_inline_bytes(const struct tpu__cma_table *t, const struct tpu__cma_claim *c);
/*
 * End a claim after the pull returned @pull_status: 0 when the slot is now
 * DONE; -ESRCH when its producer is gone (the slot is dropped: wait for the
 * key again); otherwise @pull_status, with the slot back to POSTED.
 */
tpu_status tpu__cma_finish(struct tpu__cma_table *t, struct tpu__cma_who me,
			   const struct tpu__cma_claim *c, tpu_status pull_status);
/*
 * The state of a producer's slot: TPU__CMA_FREE when it is no longer its
 * own (it was dropped), else POSTED, CLAIMED or DONE.  A claim by a dead
 * consumer is undone first (the slot reads POSTED again).
 */
enum tpu__cma_state tpu__cma_state_of(struct tpu__cma_table *t, struct tpu__cma_ref ref);
/*
 * Looks without the lock, for a member deciding whether a scan under the
 * lock is worth it; the answers may be stale (a wake of the table follows
 * every change, so a look after the next wake sees it).  Whether a slot
 * POSTED or CLAIMED may hold @key (false: none did when last changed);
 * the state of a producer's slot as tpu__cma_state_of() would find it,
 * without undoing a dead consumer's claim.
 */
bool tpu__cma_peek_key(const struct tpu__cma_table *t, const uint8_t *key, size_t key_len);
enum tpu__cma_state tpu__cma_peek_state(const struct tpu__cma_table *t, struct tpu__cma_ref ref);
/* Free a producer's slot (after DONE, or to withdraw a POSTED one). */
void tpu__cma_release(struct tpu__cma_table *t, struct tpu__cma_ref ref);

/* 0, or the status the table was aborted with. */
tpu_status tpu__cma_abort_status(struct tpu__cma_table *t);
/* Set the abort status once: 0, or -EALREADY.  Lock held; wake after. */
tpu_status tpu__cma_abort(struct tpu__cma_table *t, tpu_status status);

/* Slots in use (any state but FREE). */
uint32_t tpu__cma_used(struct tpu__cma_table *t);

#endif /* TPU_CMA_TABLE_H */
