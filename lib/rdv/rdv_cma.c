// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The cma rendezvous: what replaces /dev/tensorpipe when the module is
 * absent.  Processes share a key table (cma_table.c, a memfd passed with
 * tpu_rendezvous_share()); a producer posts where its tensor lies, and the
 * consumer pulls it with process_vm_readv, one copy.  A tensor of up to
 * TPU__CMA_INLINE_MAX bytes is copied into its slot instead, and the
 * consumer copies it out in the same hold of the table lock that finds
 * it, marking it DONE there: no system call and no second trip through
 * the lock, where a pull costs both.  Its send still completes only once
 * taken (DONE), as a pulled one does and as kmod and inprocess do.
 *
 * Each joined rendezvous object is a member of the table and has one
 * helper thread, not one per operation.  The helper sleeps on the table's
 * shared futex word (with a timeout for the nearest receive deadline) and,
 * whenever any member changes the table, looks at its own pending
 * operations again:
 *   - a RECV waiting for its key claims the slot, pulls (on the helper,
 *     never on the caller: a large pull takes time), marks it DONE;
 *   - a SEND whose slot reached DONE is over: the slot is freed and the
 *     callback runs; a slot CLAIMED by a consumer that died goes back to
 *     POSTED;
 *   - deadlines, the abort status and destroy fail what is left.
 * Sending and starting a receive only touch the table and the member's
 * list, so neither blocks.  Idle costs nothing: the helper polls (every
 * DEATH_POLL_NS) only while a consumer is pulling one of its tensors, to
 * notice that consumer's death.
 *
 * The fast path: a thread blocked in recv_wait or send_wait spins for a
 * while and, as it spins, does the helper's work itself (cma_progress,
 * whenever the table's wake word moved); when it stops spinning it sleeps
 * on the table's wake word in the helper's place (cma_wait_sleep) and goes
 * on doing that work after each wake-up, so a hand-off to a sleeping
 * waiter costs one wake-up, not the helper's and then the waiter's.  While
 * it does and every pending op is such a wait, the helper parks on a word
 * of its own (helper_park), so it is not among the table's sleepers; a
 * wake of the table makes a system call only for sleepers, and a round
 * trip between two spinning members makes none.  Starting a blocked
 * receive wakes nobody (its waiter scans at once), and a spinning waiter
 * looks at its keys' slots without the table lock (quick_pass) and takes
 * the lock only when one of them changed: the lock is then held by one
 * member at a time, not fought over on every wake of the table.  A send
 * seen DONE that way completes without the lock; its slot is freed at the
 * member's next hold of it (reap_slots).
 *
 * Peer death, shown by the table's liveness mutexes (robust: the kernel
 * marks a dead owner's mutex) and noticed at once by a second thread per
 * member, the watcher, which sleeps in poll() on a pidfd of every other
 * member's process: when a member dies, every operation pending in the
 * other members at that moment ends with TPU_E_PEER_GONE (a RECV waiting,
 * a SEND posted, a SEND whose consumer died while pulling, a RECV whose
 * producer died while it pulled), apart from pulls by and from live
 * members, which complete.  Operations started later behave as usual: a
 * dead producer's slots are dropped, a dead consumer's claim is undone;
 * a receive that finds its key only in a dead producer's slot ends with
 * TPU_E_PEER_GONE there and then (nobody else will post it).
 * Without pidfds (before Linux 5.3) the death is noticed when the table is
 * next looked at.
 *
 * Viability (cma_viability.c), on create and on join: process_vm_readv
 * must pass seccomp, Yama must allow it (scope 1: every member calls
 * PR_SET_PTRACER_ANY, as the consumers are unknown in advance; scope 2
 * needs CAP_SYS_PTRACE; scope 3 never works), the joiner must be in the
 * creator's pid namespace and must manage a test pull from every member
 * already there.  Otherwise TPU_E_NO_TRANSPORT, with the reason logged.
 *
 * Limits: TPU__CMA_SLOTS tensors posted at once (then -ENOSPC), keys of up
 * to TPU__KEY_MAX bytes, TPU__CMA_MEMBERS members (then -EUSERS on join).
 * A RECV still waiting can be cancelled, timed out, aborted or closed; one
 * being pulled completes.  A SEND whose tensor is being pulled is waited
 * for, even by destroy, since the consumer is reading its memory.  After
 * an abort, pulls already under way complete normally.
 *
 * Lock order: member lock, then table lock.  Callbacks are handed to the
 * context (tpu__op_complete) with neither held.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cma_table.h"
#include "rdv.h"

#define DEATH_POLL_NS	20000000LL	/* 20 ms, only while a claim is under way */
#define REAP_MAX	32		/* DONE slots a member frees at its next hold of the lock */
#define WHY_SIZE	320

/* Read by joiners to prove they can pull from this process. */
static const uint64_t probe_word = TPU__CMA_PROBE_WORD;

/* The member's record of one pending operation (op->impl). */
struct cma_op {
	struct cma_op *next;
	struct tpu__op *op;
	uint64_t deadline;		/* CLOCK_MONOTONIC ns; 0: none */
	struct tpu__cma_ref ref;	/* SEND: its slot */
	struct tpu__cma_claim claim;	/* RECV: the slot being pulled */
	bool claimed;			/* SEND: a consumer is pulling it now */
	uint32_t deaths;		/* tpu__cma_deaths() when it started */
};

struct cma_member {
	struct tpu__cma_table table;
	struct tpu_rendezvous *rdv;
	pthread_t helper;
	pthread_mutex_t lock;		/* everything below */
	pthread_cond_t started;
	bool start_done;
	tpu_status start_status;
	bool closing;
	struct tpu__cma_who me;
	pid_t pid;			/* getpid(), a system call each time */
	struct cma_op *ops;		/* RECVs waiting, SENDs posted */
	/* SENDs seen DONE without the table lock: their slots, to free under it. */
	struct tpu__cma_ref reap[REAP_MAX];
	uint32_t nreap;
	uint32_t joins_seen;		/* helper: tpu__cma_joins() last told the watcher */
	uint32_t progress_seen;		/* cma_progress: the table's wake sequence it last scanned at */
	uint32_t spinners;		/* threads spinning in cma_progress; atomic access */
	uint32_t parked;		/* 1 while the helper is parked (a private futex word) */
	uint32_t unparks;		/* helper_unpark() calls; atomic (see helper_park) */
	uint32_t owed;			/* a DONE of ours woke nobody yet (done_wake); atomic */
	/* cma_self_served's answer, when it was asked (ns) and at which joins; atomic access. */
	bool elsewhere;
	uint64_t elsewhere_ns;
	uint32_t elsewhere_joins;
	/* The watcher: evfd tells it to look at the members again, or to stop. */
	pthread_t watcher;
	int evfd;			/* -1: no watcher */
	atomic_bool stop;
	/* The watcher's poll set (here, not on its stack: a forked child still sees them). */
	struct pollfd watch_pfd[1 + TPU__CMA_MEMBERS];
	struct tpu__cma_who watch_who[1 + TPU__CMA_MEMBERS];
};

/* An op's cma state lives in the op itself: no allocation per op. */
_Static_assert(sizeof(struct cma_op) <= TPU__OP_IMPL_SPACE, "cma_op fits an op's impl_space");

static struct cma_op *cop_of(struct tpu__op *op)
{
	struct cma_op *cop = (struct cma_op *)op->impl_space;

	memset(cop, 0, sizeof(*cop));
	cop->op = op;
	return cop;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static bool is_recv(const struct tpu__op *op)
{
	return op->kind == TPU__OP_RECV || op->kind == TPU__OP_RECV_BUFFER;
}

/* Move @cop from its list (at @link) to the completion list with @status. */
static void finish(struct cma_op **link, struct cma_op *cop, tpu_status status,
		   struct cma_op **done)
{
	*link = cop->next;
	cop->op->status = status;
	cop->next = *done;
	*done = cop;
}

/* Run callbacks, no lock held; @unlocked on the helper, which holds no rendezvous lock either. */
static void complete_all(struct cma_op *done, bool unlocked)
{
	while (done) {
		struct cma_op *cop = done;
		struct tpu__op *op = cop->op;

		done = cop->next;
		op->impl = NULL;
		if (op->kind == TPU__OP_SEND) {
			op->len = op->tensor.len;
			/* A given buffer is ours whatever happened: the caller let go of it. */
			if ((op->flags & TPU_SEND_GIVE) && op->tensor.buffer) {
				tpu_buffer_free(op->tensor.buffer);
				op->tensor.buffer = NULL;
			}
		}
		if (unlocked)
			tpu__op_complete_unlocked(op);
		else
			tpu__op_complete(op);
	}
}

/* --- the helper's scan (member lock held) -------------------------------- */

/* Free the slots of sends completed without the table lock.  Both locks held. */
static void reap_slots(struct cma_member *m)
{
	for (uint32_t i = 0; i < m->nreap; i++)
		tpu__cma_release(&m->table, m->reap[i]);
	m->nreap = 0;
}

/* Where a RECV's bytes may go straight from the table (an inline tensor): NULL for none. */
static void *recv_dst(struct tpu__op *op)
{
	static uint8_t nothing;

	if (op->kind != TPU__OP_RECV)
		return NULL;	/* a RECV_BUFFER allocates outside the locks first */
	return op->tensor.data ? op->tensor.data : &nothing;
}

/* @took: set when an inline tensor was taken (DONE now: its producer must hear of it). */
static void scan_recv(struct cma_member *m, struct cma_op **link, tpu_status abort_st,
		      uint64_t now, struct cma_op **done, struct cma_op **pulls, bool *took)
{
	struct cma_op *cop = *link;
	struct tpu__op *op = cop->op;
	tpu_status st;

	if (m->closing) {
		finish(link, cop, TPU_E_CLOSED, done);
		return;
	}
	if (abort_st) {
		finish(link, cop, abort_st, done);
		return;
	}
	if (cop->deaths != tpu__cma_deaths(&m->table)) {
		finish(link, cop, TPU_E_PEER_GONE, done);
		return;
	}
	st = tpu__cma_claim_into(&m->table, m->me, op->key, op->key_len, op->tensor.len,
				 recv_dst(op), &cop->claim);
	if (st == -EAGAIN) {
		if (cop->deadline && now >= cop->deadline)
			finish(link, cop, -ETIMEDOUT, done);
		return;
	}
	if (st == -EMSGSIZE)
		op->len = cop->claim.len;
	if (st) {
		finish(link, cop, st, done);
		return;
	}
	if (cop->claim.done) {
		/* An inline tensor, copied out already: no pull, no finish. */
		op->len = (size_t)cop->claim.len;
		*took = true;
		finish(link, cop, 0, done);
		return;
	}
	/* Claimed: the pull happens without locks, off the pending list. */
	*link = cop->next;
	cop->next = *pulls;
	*pulls = cop;
}

static void scan_send(struct cma_member *m, struct cma_op **link, tpu_status abort_st,
		      struct cma_op **done)
{
	struct cma_op *cop = *link;

	switch (tpu__cma_state_of(&m->table, cop->ref)) {
	case TPU__CMA_DONE:
		tpu__cma_release(&m->table, cop->ref);
		finish(link, cop, 0, done);
		return;
	case TPU__CMA_FREE:
		/* Only a member taken for dead loses its slot; we are not. */
		finish(link, cop, -EIO, done);
		return;
	case TPU__CMA_CLAIMED:
		cop->claimed = true;
		return;
	case TPU__CMA_POSTED:
		cop->claimed = false;
		if (m->closing || abort_st) {
			tpu__cma_release(&m->table, cop->ref);
			finish(link, cop, m->closing ? TPU_E_CLOSED : abort_st, done);
		} else if (cop->deaths != tpu__cma_deaths(&m->table)) {
			/* A member died since it was posted (its consumer, perhaps, mid-pull). */
			tpu__cma_release(&m->table, cop->ref);
			finish(link, cop, TPU_E_PEER_GONE, done);
		}
		return;
	}
}

/*
 * One look at every pending op; claimed RECVs come back in @pulls.  True
 * when it made a slot DONE (an inline tensor taken): wake the table.
 */
static bool scan(struct cma_member *m, struct cma_op **done, struct cma_op **pulls)
{
	tpu_status abort_st = tpu__cma_abort_status(&m->table);
	tpu_status st = tpu__cma_lock(&m->table);
	uint64_t now = now_ns();
	struct cma_op **link = &m->ops;
	bool took = false;

	if (!st)
		reap_slots(m);
	while (*link) {
		struct cma_op *cop = *link;

		if (st)
			finish(link, cop, st, done);
		else if (is_recv(cop->op))
			scan_recv(m, link, abort_st, now, done, pulls, &took);
		else
			scan_send(m, link, abort_st, done);
		if (*link == cop)
			link = &cop->next;
	}
	if (!st)
		tpu__cma_unlock(&m->table);
	return took;
}

/* --- pulls (no lock held) ----------------------------------------------- */

/* 0, TPU_E_PEER_GONE when the producer died while we pulled, or an error. */
static tpu_status pull_one(struct cma_member *m, struct cma_op *cop)
{
	struct tpu__op *op = cop->op;
	const struct tpu__cma_claim *c = &cop->claim;
	struct tpu_buffer *buf = NULL;
	void *dst = op->tensor.data;
	tpu_status st = 0, lock_st;

	if (op->kind == TPU__OP_RECV_BUFFER) {
		st = tpu_buffer_alloc(m->rdv->ctx, c->len ? (size_t)c->len : 1, &buf);
		dst = st ? NULL : tpu_buffer_data(buf);
	}
	if (!st && c->inl) {
		/* Ours while CLAIMED: nobody else writes those bytes. */
		const void *src = tpu__cma_inline_bytes(&m->table, c);

		if (!src)
			st = -EIO;
		else if (c->len)
			memcpy(dst, src, (size_t)c->len);
	} else if (!st) {
		st = tpu_cma_read(c->pid, c->addr, dst, (size_t)c->len);
	}
	lock_st = tpu__cma_lock(&m->table);
	if (!lock_st) {
		st = tpu__cma_finish(&m->table, m->me, c, st);
		tpu__cma_unlock(&m->table);
	} else {
		st = lock_st;
	}
	if (st) {
		tpu_buffer_free(buf);
		return st == -ESRCH ? TPU_E_PEER_GONE : st;
	}
	op->len = (size_t)c->len;
	op->out_buffer = buf;
	return 0;
}

static void pull_all(struct cma_member *m, struct cma_op *pulls, struct cma_op **done)
{
	while (pulls) {
		struct cma_op *cop = pulls;
		tpu_status st = pull_one(m, cop);

		pulls = cop->next;
		cop->next = *done;
		*done = cop;
		cop->op->status = st;
	}
}

/* Tell the watcher something: look at the members again (1), or stop. */
static void watcher_poke(struct cma_member *m)
{
	uint64_t one = 1;

	if (m->evfd >= 0 && write(m->evfd, &one, sizeof(one)) < 0) {
		/* A full counter (never in practice) still wakes it. */
	}
}

/* How long the helper may sleep: -1 for ever. */
static int64_t sleep_ns(const struct cma_member *m)
{
	const struct cma_op *cop;
	uint64_t now = now_ns();
	int64_t best = -1;

	for (cop = m->ops; cop; cop = cop->next) {
		int64_t t = -1;

		if (cop->claimed)
			t = DEATH_POLL_NS;
		else if (cop->deadline)
			t = cop->deadline > now ? (int64_t)(cop->deadline - now) : 0;
		/* Its DONE may come without a wake-up (done_wake): look again by then. */
		if (!is_recv(cop->op) && (t < 0 || t > TPU__CMA_DONE_BOUND_NS))
			t = TPU__CMA_DONE_BOUND_NS;
		if (t >= 0 && (best < 0 || t < best))
			best = t;
	}
	return best;
}

/* Every pending op has a thread blocked in recv_wait or send_wait; m->lock held. */
static bool all_direct(const struct cma_member *m)
{
	const struct cma_op *cop;

	for (cop = m->ops; cop; cop = cop->next)
		if (!cop->op->direct)
			return false;
	return true;
}

/* Wake the helper if it is parked, or keep it from parking (see helper_park). */
static void helper_unpark(struct cma_member *m)
{
	__atomic_add_fetch(&m->unparks, 1, __ATOMIC_SEQ_CST);
	if (__atomic_exchange_n(&m->parked, 0, __ATOMIC_SEQ_CST))
		syscall(SYS_futex, &m->parked, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/*
 * While a thread of this member spins in recv_wait or send_wait it does
 * the helper's work (cma_progress), and when every pending op is such a
 * wait there is nothing left for the helper: it parks on a word of its own
 * instead of the table's, so that members posting make no system call to
 * wake it.  The spinner unparks it when it stops spinning with ops left, a
 * new op with a callback unparks it at once, and so does the destroy.
 * Called without m->lock; @unparks is m->unparks read under it, when the
 * helper decided to park: an unpark since then (the destroy's, between
 * that decision and the store below) must not be lost.
 */
static void helper_park(struct cma_member *m, uint32_t unparks)
{
	__atomic_store_n(&m->parked, 1, __ATOMIC_SEQ_CST);
	/* A spinner that stopped, or an unpark that came, before the store saw nothing to wake. */
	if (!__atomic_load_n(&m->spinners, __ATOMIC_SEQ_CST) ||
	    __atomic_load_n(&m->unparks, __ATOMIC_SEQ_CST) != unparks) {
		__atomic_store_n(&m->parked, 0, __ATOMIC_SEQ_CST);
		return;
	}
	while (__atomic_load_n(&m->parked, __ATOMIC_SEQ_CST))
		syscall(SYS_futex, &m->parked, FUTEX_WAIT_PRIVATE, 1, NULL, NULL, 0);
}

/* New members: the watcher must watch their processes too.  m->lock held. */
static void note_joins(struct cma_member *m, uint32_t joins)
{
	if (joins != m->joins_seen) {
		m->joins_seen = joins;
		watcher_poke(m);
	}
}

/*
 * Slots of ours went DONE (or back to POSTED after a failed pull): bump the
 * wake word without waking anybody.  The producer, if it waits for this
 * DONE, is most often woken by what we do next anyway (our answer's post),
 * and sees the DONE then: one wake-up per hand-off.  Owed until then: a
 * thread of ours about to sleep wakes first (member_flush), and the
 * producer sleeps TPU__CMA_DONE_BOUND_NS at most while a send is pending.
 */
static void done_wake(struct cma_member *m)
{
	tpu__cma_wake_lazy(&m->table);
	__atomic_store_n(&m->owed, 1, __ATOMIC_SEQ_CST);
}

/* A wake of the table, which carries any DONE still owed. */
static void member_wake(struct cma_member *m)
{
	__atomic_store_n(&m->owed, 0, __ATOMIC_SEQ_CST);
	tpu__cma_wake(&m->table);
}

/* Before a thread of this member sleeps: wake for a DONE still owed. */
static void member_flush(struct cma_member *m)
{
	if (__atomic_exchange_n(&m->owed, 0, __ATOMIC_SEQ_CST))
		tpu__cma_wake(&m->table);
}

static void helper_loop(struct cma_member *m)
{
	pthread_mutex_lock(&m->lock);
	for (;;) {
		uint32_t seen = tpu__cma_wake_seq(&m->table);
		uint32_t joins = tpu__cma_joins(&m->table);
		struct cma_op *done = NULL, *pulls = NULL;
		int64_t timeout;
		uint32_t unparks;
		bool park, took;

		note_joins(m, joins);
		took = scan(m, &done, &pulls);
		if (pulls || done) {
			pthread_mutex_unlock(&m->lock);
			pull_all(m, pulls, &done);
			/* Producers wait for DONE; a failed pull made a slot POSTED again. */
			if (pulls || took)
				done_wake(m);
			complete_all(done, true);
			pthread_mutex_lock(&m->lock);
			continue;
		}
		if (m->closing && !m->ops)
			break;
		unparks = __atomic_load_n(&m->unparks, __ATOMIC_SEQ_CST);
		park = !m->closing && __atomic_load_n(&m->spinners, __ATOMIC_SEQ_CST) &&
		       all_direct(m);
		timeout = sleep_ns(m);
		pthread_mutex_unlock(&m->lock);
		member_flush(m);
		if (park)
			helper_park(m, unparks);
		else
			tpu__cma_wait(&m->table, seen, timeout);
		pthread_mutex_lock(&m->lock);
	}
	pthread_mutex_unlock(&m->lock);
}

static void *helper_main(void *arg)
{
	struct cma_member *m = arg;
	tpu_status st;

	/* This thread holds the member's liveness mutex for the member's life. */
	st = tpu__cma_member_join(&m->table, (uintptr_t)&probe_word, &m->me);
	pthread_mutex_lock(&m->lock);
	m->start_status = st;
	m->start_done = true;
	pthread_cond_broadcast(&m->started);
	pthread_mutex_unlock(&m->lock);
	if (st)
		return NULL;
	helper_loop(m);
	tpu__cma_member_leave(&m->table, m->me);
	return NULL;
}

/* --- the watcher ---------------------------------------------------------- */

static int pidfd_open_(pid_t pid)
{
#ifdef SYS_pidfd_open
	return (int)syscall(SYS_pidfd_open, pid, 0);
#else
	(void)pid;
	errno = ENOSYS;
	return -1;
#endif
}

/*
 * Sleep in poll() on a pidfd of every other member's process; when one
 * exits, look at its member (tpu__cma_member_alive counts a death and
 * wakes every helper; a member that left first is no death).  The helper
 * pokes evfd when members joined.
 */
static void *watcher_main(void *arg)
{
	struct cma_member *m = arg;
	struct pollfd *pfd = m->watch_pfd;
	struct tpu__cma_who *who = m->watch_who;
	pid_t self = getpid();
	nfds_t n = 0;

	while (!atomic_load(&m->stop)) {
		uint64_t v;
		int rc;

		for (nfds_t i = 1; i < n; i++)
			close(pfd[i].fd);
		pfd[0] = (struct pollfd){ .fd = m->evfd, .events = POLLIN };
		n = 1;
		if (!tpu__cma_lock(&m->table)) {
			uint32_t end = tpu__cma_member_end(&m->table);

			for (uint32_t idx = 0; idx < end; idx++) {
				struct tpu__cma_who w;
				pid_t pid;
				int fd;

				if (idx == m->me.idx || !tpu__cma_member_pid(&m->table, idx, &w, &pid) ||
				    pid == self)
					continue;
				fd = pidfd_open_(pid);
				if (fd < 0)
					continue;
				/* Still alive after the open: the pidfd is that member's process. */
				if (!tpu__cma_member_alive(&m->table, w)) {
					close(fd);
					continue;
				}
				pfd[n] = (struct pollfd){ .fd = fd, .events = POLLIN };
				who[n++] = w;
			}
			tpu__cma_unlock(&m->table);
		}
		rc = poll(pfd, n, -1);
		if (rc < 0)
			continue;
		if (pfd[0].revents & POLLIN) {
			if (read(m->evfd, &v, sizeof(v)) < 0) {
				/* Counted down already: nothing to do. */
			}
			continue;
		}
		if (tpu__cma_lock(&m->table))
			continue;
		for (nfds_t i = 1; i < n; i++)
			if (pfd[i].revents)
				tpu__cma_member_alive(&m->table, who[i]);
		tpu__cma_unlock(&m->table);
	}
	for (nfds_t i = 1; i < n; i++)
		close(pfd[i].fd);
	return NULL;
}

static void watcher_start(struct cma_member *m)
{
	m->evfd = eventfd(0, EFD_CLOEXEC);
	if (m->evfd < 0)
		return;
	if (pthread_create(&m->watcher, NULL, watcher_main, m)) {
		close(m->evfd);
		m->evfd = -1;
	}
}

static void watcher_stop(struct cma_member *m)
{
	if (m->evfd < 0)
		return;
	atomic_store(&m->stop, true);
	watcher_poke(m);
	pthread_join(m->watcher, NULL);
	close(m->evfd);
	m->evfd = -1;
}

/*
 * Find members that died and nobody noticed yet, then say how many died:
 * an operation starting now is not one pending at those deaths.  Lock held.
 */
static uint32_t deaths_now(struct cma_member *m)
{
	uint32_t end = tpu__cma_member_end(&m->table);

	for (uint32_t idx = 0; idx < end; idx++) {
		struct tpu__cma_who w;
		pid_t pid;

		tpu__cma_member_pid(&m->table, idx, &w, &pid);
	}
	return tpu__cma_deaths(&m->table);
}

/* --- creating, joining, leaving ------------------------------------------ */

static void member_free(struct cma_member *m)
{
	tpu__cma_table_close(&m->table);
	pthread_cond_destroy(&m->started);
	pthread_mutex_destroy(&m->lock);
	free(m);
}

/* Start the helper; on success the member is in the table. */
static tpu_status member_start(struct tpu_rendezvous *rdv, struct cma_member *m)
{
	tpu_status st;
	int rc;

	rc = pthread_create(&m->helper, NULL, helper_main, m);
	if (rc)
		return -rc;
	pthread_mutex_lock(&m->lock);
	while (!m->start_done)
		pthread_cond_wait(&m->started, &m->lock);
	st = m->start_status;
	pthread_mutex_unlock(&m->lock);
	if (st) {
		pthread_join(m->helper, NULL);
		return st;
	}
	watcher_start(m);
	rdv->impl_state = m;
	return 0;
}

static tpu_status member_new(struct tpu_rendezvous *rdv, struct cma_member **out)
{
	struct cma_member *m = calloc(1, sizeof(*m));
	char why[WHY_SIZE];
	tpu_status st;

	if (!m)
		return -ENOMEM;
	st = tpu__cma_viable(why, sizeof(why));
	tpu__log_debug("rendezvous: cma %s: %s", st ? "not viable" : "viable", why);
	if (st) {
		free(m);
		return st;
	}
	m->rdv = rdv;
	m->pid = getpid();
	m->table.fd = -1;
	m->evfd = -1;
	atomic_init(&m->stop, false);
	pthread_mutex_init(&m->lock, NULL);
	pthread_cond_init(&m->started, NULL);
	*out = m;
	return 0;
}

static tpu_status cma_create(struct tpu_rendezvous *rdv)
{
	struct cma_member *m;
	tpu_status st = member_new(rdv, &m);

	if (st)
		return st;
	st = tpu__cma_table_create(&m->table, tpu__cma_pid_ns());
	if (!st)
		st = member_start(rdv, m);
	if (st)
		member_free(m);
	return st;
}

/* A joiner that cannot pull from the members already there must say so now. */
static tpu_status check_peers(struct cma_member *m)
{
	pid_t pids[TPU__CMA_MEMBERS];
	uint64_t addrs[TPU__CMA_MEMBERS];
	uint64_t ns = tpu__cma_pid_ns(), their_ns = tpu__cma_table_pid_ns(&m->table);
	char why[WHY_SIZE];
	size_t i, n;
	tpu_status st;

	if (ns && their_ns && ns != their_ns) {
		tpu__log_debug("rendezvous: cma not viable: the rendezvous was created in "
			       "another pid namespace, whose pids mean nothing here");
		return TPU_E_NO_TRANSPORT;
	}
	st = tpu__cma_lock(&m->table);
	if (st)
		return st;
	n = tpu__cma_members(&m->table, NULL, pids, addrs, TPU__CMA_MEMBERS);
	tpu__cma_unlock(&m->table);
	for (i = 0; i < n; i++) {
		st = tpu__cma_check_peer(pids[i], addrs[i], why, sizeof(why));
		if (st) {
			tpu__log_debug("rendezvous: cma not viable: %s", why);
			return st;
		}
	}
	return 0;
}

static tpu_status cma_join(struct tpu_rendezvous *rdv, int fd)
{
	struct cma_member *m;
	tpu_status st = member_new(rdv, &m);

	if (st)
		return st;
	st = tpu__cma_table_open(&m->table, fd);
	if (!st)
		st = check_peers(m);
	if (!st)
		st = member_start(rdv, m);
	if (st)
		member_free(m);
	return st;
}

static tpu_status cma_share(struct tpu_rendezvous *rdv, int *fd)
{
	struct cma_member *m = rdv->impl_state;
	int nfd = fcntl(m->table.fd, F_DUPFD_CLOEXEC, 0);

	if (nfd < 0)
		return tpu__errno();
	*fd = nfd;
	return 0;
}

static void cma_destroy(struct tpu_rendezvous *rdv)
{
	struct cma_member *m = rdv->impl_state;

	if (!m)
		return;
	/* The helper fails what it can and waits out pulls under way, then leaves. */
	pthread_mutex_lock(&m->lock);
	m->closing = true;
	pthread_mutex_unlock(&m->lock);
	tpu__cma_wake(&m->table);
	helper_unpark(m);
	pthread_join(m->helper, NULL);
	watcher_stop(m);
}

/* Once no thread is inside: a waiter's last poll or a cancel still reads the table. */
static void cma_release(struct tpu_rendezvous *rdv)
{
	struct cma_member *m = rdv->impl_state;

	rdv->impl_state = NULL;
	if (m)
		member_free(m);
}

/* --- operations ------------------------------------------------------------ */

/* Queue @cop on the member unless it is closing. */
static tpu_status enqueue(struct cma_member *m, struct cma_op *cop)
{
	pthread_mutex_lock(&m->lock);
	if (m->closing) {
		pthread_mutex_unlock(&m->lock);
		return TPU_E_CLOSED;
	}
	cop->next = m->ops;
	m->ops = cop;
	/* A waiter's next cma_progress scans even if the table has not moved. */
	__atomic_store_n(&m->progress_seen, tpu__cma_wake_seq(&m->table) - 1, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&m->lock);
	return 0;
}

static tpu_status cma_send(struct tpu_rendezvous *rdv, struct tpu__op *op)
{
	struct cma_member *m = rdv->impl_state;
	const void *src = op->tensor.data;
	struct cma_op *cop;
	tpu_status st;

	if (!src && op->tensor.buffer)
		src = tpu_buffer_data(op->tensor.buffer);
	cop = cop_of(op);
	/* Member lock across the post, so the helper cannot see DONE before the op. */
	pthread_mutex_lock(&m->lock);
	st = m->closing ? TPU_E_CLOSED : tpu__cma_lock(&m->table);
	if (!st) {
		reap_slots(m);
		cop->deaths = tpu__cma_members_look_alive(&m->table) ? tpu__cma_deaths(&m->table) :
									deaths_now(m);
		if (op->tensor.len <= TPU__CMA_INLINE_MAX)
			st = tpu__cma_post_inline(&m->table, m->me, m->pid, op->key, op->key_len,
						  src, op->tensor.len, &cop->ref);
		else
			st = tpu__cma_post(&m->table, m->me, m->pid, op->key, op->key_len,
					   (uintptr_t)src, op->tensor.len, &cop->ref);
		tpu__cma_unlock(&m->table);
	}
	if (!st) {
		op->impl = cop;
		cop->next = m->ops;
		m->ops = cop;
	}
	pthread_mutex_unlock(&m->lock);
	if (st)
		return st;
	member_wake(m);
	if (!op->direct)
		helper_unpark(m);
	return 0;
}

static tpu_status cma_recv(struct tpu_rendezvous *rdv, struct tpu__op *op)
{
	struct cma_member *m = rdv->impl_state;
	struct cma_op *cop;
	tpu_status st;

	if (op->key_len > TPU__CMA_MAX_KEY)
		return -ENAMETOOLONG;
	cop = cop_of(op);
	if (op->timeout_ns)
		cop->deadline = now_ns() + op->timeout_ns;
	/* Without the lock when no member's death waits to be noticed (the usual case). */
	if (tpu__cma_members_look_alive(&m->table)) {
		cop->deaths = tpu__cma_deaths(&m->table);
	} else {
		st = tpu__cma_lock(&m->table);
		if (st)
			return st;
		cop->deaths = deaths_now(m);
		tpu__cma_unlock(&m->table);
	}
	op->impl = cop;
	st = enqueue(m, cop);
	if (st) {
		op->impl = NULL;
		return st;
	}
	/*
	 * The helper does the claim and the pull; this only wakes it.  A
	 * recv_wait starting its own op does them itself once it waits
	 * (cma_progress, which enqueue told to look): waking every member's
	 * sleepers would only cost them a wake-up each, a producer waiting
	 * for its DONE among them.  But a queued recv_wait started later by
	 * another thread (the key's older RECV completing) has a waiter that
	 * may sleep on the table already: while any thread of this member
	 * waits (m->spinners), wake.  A waiter counted after this load looks
	 * at progress_seen after that count, so it sees enqueue's store.
	 */
	if (op->direct && !__atomic_load_n(&m->spinners, __ATOMIC_SEQ_CST))
		return 0;
	member_wake(m);
	if (!op->direct)
		helper_unpark(m);
	return 0;
}

static bool same_key(const struct tpu__op *op, const uint8_t *key, size_t key_len)
{
	return op->key_len == key_len && !memcmp(op->key, key, key_len);
}

static int cma_cancel(struct tpu_rendezvous *rdv, const uint8_t *key, size_t key_len)
{
	struct cma_member *m = rdv->impl_state;
	struct cma_op **link, *done = NULL;
	tpu_status st;
	int n = 0;

	pthread_mutex_lock(&m->lock);
	st = tpu__cma_lock(&m->table);
	if (st) {
		pthread_mutex_unlock(&m->lock);
		return st;
	}
	reap_slots(m);
	link = &m->ops;
	while (*link) {
		struct cma_op *cop = *link;

		if (!same_key(cop->op, key, key_len)) {
			link = &cop->next;
			continue;
		}
		/* A SEND being pulled, or pulled already, is past cancelling. */
		if (!is_recv(cop->op)) {
			if (tpu__cma_state_of(&m->table, cop->ref) != TPU__CMA_POSTED) {
				link = &cop->next;
				continue;
			}
			tpu__cma_release(&m->table, cop->ref);
		}
		finish(link, cop, -ECANCELED, &done);
		n++;
	}
	tpu__cma_unlock(&m->table);
	pthread_mutex_unlock(&m->lock);
	complete_all(done, false);
	return n;
}

static tpu_status cma_abort(struct tpu_rendezvous *rdv, tpu_status status)
{
	struct cma_member *m = rdv->impl_state;
	tpu_status st;

	if (status >= 0 || status < -EHWPOISON)
		return -EINVAL;
	st = tpu__cma_lock(&m->table);
	if (st)
		return st;
	st = tpu__cma_abort(&m->table, status);
	tpu__cma_unlock(&m->table);
	if (!st)
		tpu__cma_wake(&m->table);
	return st;
}

/*
 * A look at the pending ops without the table lock, for a waiter: a SEND
 * whose slot reads DONE is over (its slot is freed at this member's next
 * hold of the lock, off the path of the next hand-off), and true comes
 * back when a scan under the lock has work: a RECV whose key is in the
 * table or whose deadline passed, a SEND no longer POSTED, an abort, a
 * death.  A spinning waiter then leaves the lock to the member that
 * changed the table (the other side of the hand-off, often).  The helper
 * always scans: it is the one that notices a dead consumer's claim
 * without a watcher.  m->lock held.
 */
static bool quick_pass(struct cma_member *m, struct cma_op **done)
{
	uint32_t deaths = tpu__cma_deaths(&m->table);
	struct cma_op **link = &m->ops;
	uint64_t now = 0;
	bool scan_needed = tpu__cma_abort_status(&m->table) != 0;

	while (*link) {
		struct cma_op *cop = *link;
		const struct tpu__op *op = cop->op;

		if (!is_recv(op)) {
			enum tpu__cma_state st = tpu__cma_peek_state(&m->table, cop->ref);

			if (st == TPU__CMA_DONE && m->nreap < REAP_MAX) {
				m->reap[m->nreap++] = cop->ref;
				finish(link, cop, 0, done);
				continue;
			}
			if (st != TPU__CMA_POSTED)
				scan_needed = true;
		} else if (cop->deadline) {
			if (!now)
				now = now_ns();
			if (now >= cop->deadline)
				scan_needed = true;
		}
		if (cop->deaths != deaths ||
		    (is_recv(op) && tpu__cma_peek_key(&m->table, op->key, op->key_len)))
			scan_needed = true;
		link = &cop->next;
	}
	return scan_needed;
}

/*
 * The helper's work, on a thread spinning in recv_wait or send_wait, when
 * the table changed since this member last looked: the waiter claims and
 * pulls, or sees its send taken, without waiting for the helper to wake.
 */
static void cma_progress(struct tpu_rendezvous *rdv, enum tpu__ww_phase phase)
{
	struct cma_member *m = rdv->impl_state;
	struct cma_op *done = NULL, *pulls = NULL;
	bool took = false;
	uint32_t seq;

	if (phase == TPU__WW_SPIN_BEGIN) {
		__atomic_add_fetch(&m->spinners, 1, __ATOMIC_SEQ_CST);
		return;
	}
	if (phase == TPU__WW_SPIN_END || phase == TPU__WW_SPIN_GIVE_UP) {
		/* Going to sleep, or done: whatever is left is the helper's again. */
		if (__atomic_sub_fetch(&m->spinners, 1, __ATOMIC_SEQ_CST) == 0 &&
		    __atomic_load_n(&m->parked, __ATOMIC_SEQ_CST)) {
			bool left;

			pthread_mutex_lock(&m->lock);
			left = m->ops != NULL;
			pthread_mutex_unlock(&m->lock);
			if (left)
				helper_unpark(m);
		}
		return;
	}
	seq = tpu__cma_wake_seq(&m->table);
	if (seq == __atomic_load_n(&m->progress_seen, __ATOMIC_SEQ_CST))
		return;
	if (pthread_mutex_trylock(&m->lock))
		return;		/* the helper is at it */
	__atomic_store_n(&m->progress_seen, seq, __ATOMIC_RELAXED);
	/* The helper may stay parked for the whole wait: do its every duty. */
	note_joins(m, tpu__cma_joins(&m->table));
	if (!m->closing && quick_pass(m, &done))
		took = scan(m, &done, &pulls);
	pthread_mutex_unlock(&m->lock);
	if (!pulls && !done)
		return;
	pull_all(m, pulls, &done);
	if (pulls || took)
		done_wake(m);
	complete_all(done, true);
}

/*
 * A waiter done spinning sleeps where the parked helper would have: on the
 * table's wake word, with the helper's timeout, and then scans itself
 * (cma_progress).  One wake-up per hand-off instead of two (the helper's,
 * then the waiter's own word).  It stays counted in m->spinners, so the
 * helper stays parked while every pending op has such a waiter.
 */
static uint32_t cma_wait_token(struct tpu_rendezvous *rdv)
{
	struct cma_member *m = rdv->impl_state;

	return tpu__cma_wake_seq(&m->table);
}

static void cma_wait_sleep(struct tpu_rendezvous *rdv, uint32_t token, uint64_t deadline_ns)
{
	struct cma_member *m = rdv->impl_state;
	int64_t timeout = DEATH_POLL_NS;
	uint64_t now;

	if (!pthread_mutex_trylock(&m->lock)) {
		timeout = sleep_ns(m);
		pthread_mutex_unlock(&m->lock);
	}
	if (deadline_ns) {
		now = now_ns();
		if (now >= deadline_ns)
			return;
		if (timeout < 0 || deadline_ns - now < (uint64_t)timeout)
			timeout = (int64_t)(deadline_ns - now);
	}
	member_flush(m);
	tpu__cma_wait(&m->table, token, timeout);
}

/* A waiter's word posted by anyone but the waiter itself (cancel, the context). */
static void cma_wait_kick(struct tpu_rendezvous *rdv)
{
	struct cma_member *m = rdv->impl_state;

	tpu__cma_wake(&m->table);
}

/* How long cma_self_served trusts what it learnt of the members' cores. */
#define ELSEWHERE_NS	100000000ull

/*
 * A spinning waiter parks the helper and does its every duty: what ends
 * the wait is another member's write to the table, or its pull.  On a lone
 * core that holds only while no other member may run there: asked again
 * when a member joined, or after ELSEWHERE_NS.
 */
static bool cma_self_served(struct tpu_rendezvous *rdv)
{
	struct cma_member *m = rdv->impl_state;
	pid_t pids[TPU__CMA_MEMBERS];
	uint64_t addrs[TPU__CMA_MEMBERS], now, then;
	uint32_t joins;
	size_t n;
	bool yes;

	if (!tpu__spin_lone_core())
		return true;
	now = now_ns();
	joins = tpu__cma_joins(&m->table);
	then = __atomic_load_n(&m->elsewhere_ns, __ATOMIC_RELAXED);
	if (then && now - then < ELSEWHERE_NS &&
	    __atomic_load_n(&m->elsewhere_joins, __ATOMIC_RELAXED) == joins)
		return __atomic_load_n(&m->elsewhere, __ATOMIC_RELAXED);
	if (tpu__cma_lock(&m->table))
		return false;
	n = tpu__cma_members(&m->table, &m->me, pids, addrs, TPU__CMA_MEMBERS);
	tpu__cma_unlock(&m->table);
	/* The pids are the members' word: they steer a spin, nothing else. */
	yes = n && tpu__spin_peers_elsewhere(pids, n);
	__atomic_store_n(&m->elsewhere, yes, __ATOMIC_RELAXED);
	__atomic_store_n(&m->elsewhere_joins, joins, __ATOMIC_RELAXED);
	__atomic_store_n(&m->elsewhere_ns, now, __ATOMIC_RELAXED);
	return yes;
}

const struct tpu__rdv_ops tpu__rdv_cma = {
	.impl = TPU_RDV_CMA,
	.create = cma_create,
	.join = cma_join,
	.share = cma_share,
	.destroy = cma_destroy,
	.release = cma_release,
	.send = cma_send,
	.recv = cma_recv,
	.cancel = cma_cancel,
	.abort = cma_abort,
	.progress = cma_progress,
	.wait_token = cma_wait_token,
	.wait_sleep = cma_wait_sleep,
	.wait_kick = cma_wait_kick,
	.self_served = cma_self_served,
};
