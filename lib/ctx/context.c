// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The context: one io_uring and the one thread that waits on it.
 *
 * The thread sleeps in poll() on the ring's descriptor and two eventfds,
 * and wakes for four reasons: a CQE of some operation, an op finished by
 * another thread (tpu__ctx_complete), an SQE another thread queued, or a
 * peer's frame (the wake descriptor, written by peers whose poller we
 * armed).  The middle two write the kick descriptor, but only when the
 * thread said it is about to sleep, so that a busy context costs its
 * producers no system call.  After a lender's recent use the thread does
 * not listen to the wake descriptor: a lender sleeps on it in its place.
 *
 * Why poll and not io_uring_enter(GETEVENTS) with a READ armed on the
 * eventfd: the same wake-ups, one fewer SQE per wake, and valgrind (3.19)
 * treats io_uring_enter as a call that never blocks, so a thread asleep in
 * it would stop every other thread of a program run under valgrind.  The
 * module's task work (a RECV's copy) interrupts poll like a signal and
 * runs before it returns, as it would in io_uring_enter.
 *
 * Only this thread enters the ring (see tpu__ctx_sqe in ctx.h):
 * the module runs a RECV's copy as task work of the submitting task, and
 * this is the one task sure to outlive the ring's commands.
 */
#include <liburing.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "ctx.h"

#define CTX_DEFAULT_ENTRIES	256
#define CTX_DEFAULT_SPIN_NS	100000
#define CTX_MAX_SPIN_NS		10000000
/* The adaptive spin grows up to this (2 ms), never past the base's own maximum. */
#define CTX_MAX_ADAPT_NS	2000000
/*
 * After a lent thread gave the context back, the thread sleeps at most
 * this long (unarmed pollers), until that long went by without a lender.
 */
#define LEND_GRACE_NS		500000
/* Idle spinning passes between two looks at the clock. */
#define CTX_SPIN_PASSES		8

/* What a CQE's user_data points to; recycled (rec_free) once its last CQE came. */
struct ctx_rec {
	tpu__cqe_fn fn;
	void *arg;
	struct ctx_rec *next;		/* in rec_free */
};

/* Records kept for reuse: a transport with this many requests in flight allocates none. */
#define CTX_REC_FREE_MAX	64

/* An SQE that found the ring full, kept until the context thread has room. */
struct ctx_spill {
	struct ctx_spill *next;
	struct io_uring_sqe sqe[2];	/* SQE128 */
};

struct tpu__ep_ref {
	struct tpu_endpoint *ep;
	atomic_uint refs;
};

struct tpu_context {
	uint32_t magic;			/* TPU__MAGIC_CONTEXT; poisoned by destroy */
	unsigned int fork_gen;		/* tpu__fork_gen at create: a child sees another */
	struct io_uring ring;
	pthread_t thread;
	unsigned int flags;
	char *dev_path;
	char *transports;		/* pipes: allowed transports, NULL for all */
	char *channels;

	/*
	 * wake_fd: written by peers (armed pollers, a duplicate in their
	 * hands); kick_fd: by this process's threads (ctx_kick).  Apart so
	 * that a thread lent to the context may sleep on the peers' writes in
	 * the thread's place (tpu__ctx_lend_sleep) while the thread, asleep
	 * after a lender's recent use, waits for kicks and CQEs only: one
	 * wake-up per frame, not one for each of them.
	 */
	int wake_fd;
	int kick_fd;
	atomic_bool asleep;

	pthread_mutex_t sq_lock;	/* the ring's SQ side and what follows */
	struct tpu__free_list rec_free;	/* struct ctx_rec */
	struct ctx_rec *cur_rec;	/* between tpu__ctx_sqe and tpu__ctx_submit */
	struct io_uring_sqe *cur_sqe;
	struct ctx_spill *cur_spill;
	struct ctx_spill *spill_head, **spill_tail;
	unsigned int unsubmitted;
	size_t inflight;		/* records whose CQE is due */

	/*
	 * Hints for the spinning thread, so that an idle round takes no lock:
	 * non-zero when the SQ side, or the done and task lists, may hold
	 * something.  Set after the item is queued, cleared before looking.
	 */
	atomic_uint sq_hint, done_hint;

	pthread_mutex_t done_lock;	/* the finished ops and the deferred tasks */
	struct tpu__task *done_head, **done_tail;
	struct tpu__task *task_head, **task_tail;
	/*
	 * How many each list holds: changed under done_lock, read without it
	 * to pass an empty list by (most looks, two or three per hand-off).
	 * A stale 0 misses an entry just queued, whose done_hint comes next.
	 */
	atomic_uint ndone, ntasks;

	/* Context thread only. */
	struct tpu__poller *pollers;
	struct tpu__poller *poll_cursor;	/* the next one a pass visits */
	unsigned int spinners;		/* tpu__ctx_spinner_get() minus put() */
	uint64_t spin_ns;		/* TPU_SPIN_US: the base */
	uint64_t spin_cur;		/* adapted to how fast peers answer */
	/*
	 * ctx_core_shared(): its answer, when it was asked (ns, 0: never) and
	 * at which pollers_gen (bumped when a poller comes or goes).
	 */
	bool core_shared;
	uint64_t core_asked_ns;
	unsigned int core_gen, pollers_gen;

	/*
	 * Held by whichever thread does the context thread's work: the thread
	 * itself, except while it sleeps in poll(), or a thread lent to it
	 * meanwhile (tpu__ctx_lend_begin).  lend_want: lenders waiting for it,
	 * which the thread's spin gives way to.
	 */
	pthread_mutex_t drive;
	atomic_uint lend_want;
	/*
	 * When a lent thread last gave the context back; and whether the
	 * thread sleeps with a timeout (LEND_GRACE_NS) because one did
	 * lately: a lender then leaves the pollers disarmed (peers write no
	 * eventfd, nobody is woken for a frame the lender comes back for),
	 * and the thread looks at them itself when the time is up.
	 */
	_Atomic uint64_t lend_last_ns;
	atomic_bool timed_sleep;
	atomic_uint npollers;		/* for tpu__ctx_lendable(), any thread */
	/*
	 * Statistics for tests: the thread's wake-ups, a lender's sleeps in
	 * its place, the thread's spins that found work, and those begun.
	 */
	_Atomic uint64_t wakes, deaf_wakes, lend_sleeps, spins_answered, spins_begun;

	pthread_mutex_t progress_lock;
	pthread_cond_t progress;
	uint64_t generation;
	bool stopping;			/* under progress_lock */

	pthread_mutex_t lock;		/* endpoint and rendezvous list, secret */
	struct tpu__secret secret;	/* the job's (TPU_JOB_SECRET*, tpu_context_set_secret) */
	struct tpu__ep_ref *ep;
	bool ep_tried;
	bool ep_claimed;
	struct tpu__ctx_obj *objs;	/* pipes and listeners */
};

static _Thread_local const struct tpu_context *this_thread_ctx;
/* The context whose own thread this is (this_thread_ctx may be lent). */
static _Thread_local const struct tpu_context *own_thread_ctx;

bool tpu__ctx_on_thread(const struct tpu_context *ctx)
{
	return ctx && this_thread_ctx == ctx;
}

/* Only the context's own thread enters the ring (see tpu__ctx_sqe in ctx.h). */
static bool ctx_own_thread(const struct tpu_context *ctx)
{
	return own_thread_ctx == ctx;
}

const char *tpu__ctx_dev_path(const struct tpu_context *ctx)
{
	return ctx->dev_path;
}

unsigned int tpu__ctx_flags(const struct tpu_context *ctx)
{
	return ctx->flags;
}

const char *tpu__ctx_transports(const struct tpu_context *ctx)
{
	return ctx->transports;
}

const char *tpu__ctx_channels(const struct tpu_context *ctx)
{
	return ctx->channels;
}

/* Wake the thread if it is asleep or about to be; cheap when it is busy. */
static void ctx_kick(struct tpu_context *ctx)
{
	uint64_t one = 1;

	if (!atomic_exchange(&ctx->asleep, false))
		return;
	while (write(ctx->kick_fd, &one, sizeof(one)) < 0 && errno == EINTR)
		;
}

/* Both descriptors are non-blocking: whoever reads second finds nothing. */
static void ctx_drain_fd(int fd)
{
	uint64_t n;

	while (read(fd, &n, sizeof(n)) < 0 && errno == EINTR)
		;
}

/* ---- submission ---------------------------------------------------- */

struct io_uring_sqe *tpu__ctx_sqe(struct tpu_context *ctx, tpu__cqe_fn fn, void *arg)
{
	struct io_uring_sqe *sqe;
	struct ctx_rec *rec;

	pthread_mutex_lock(&ctx->sq_lock);
	rec = tpu__free_list_get(&ctx->rec_free, 0, 0, sizeof(*rec), 0);
	if (!rec) {
		pthread_mutex_unlock(&ctx->sq_lock);
		return NULL;
	}
	rec->fn = fn;
	rec->arg = arg;
	ctx->cur_spill = NULL;
	sqe = ctx->spill_head ? NULL : io_uring_get_sqe(&ctx->ring);
	if (!sqe && ctx_own_thread(ctx) && !ctx->spill_head) {
		io_uring_submit(&ctx->ring);
		sqe = io_uring_get_sqe(&ctx->ring);
	}
	if (!sqe) {
		/* Keep the order of submission: once spilling, spill until drained. */
		ctx->cur_spill = calloc(1, sizeof(*ctx->cur_spill));
		if (!ctx->cur_spill) {
			tpu__free_list_put(&ctx->rec_free, rec);
			pthread_mutex_unlock(&ctx->sq_lock);
			return NULL;
		}
		sqe = ctx->cur_spill->sqe;
	}
	memset(sqe, 0, 2 * sizeof(*sqe));
	io_uring_sqe_set_data(sqe, rec);
	ctx->cur_rec = rec;
	ctx->cur_sqe = sqe;
	return sqe;
}

/* Context thread, sq_lock held: move spilled SQEs into the ring. */
static void ctx_unspill(struct tpu_context *ctx)
{
	while (ctx->spill_head) {
		struct ctx_spill *s = ctx->spill_head;
		struct io_uring_sqe *sqe = io_uring_get_sqe(&ctx->ring);

		if (!sqe) {
			io_uring_submit(&ctx->ring);
			sqe = io_uring_get_sqe(&ctx->ring);
			if (!sqe)
				return;
		}
		memcpy(sqe, s->sqe, sizeof(s->sqe));
		ctx->unsubmitted++;
		ctx->spill_head = s->next;
		if (!ctx->spill_head)
			ctx->spill_tail = &ctx->spill_head;
		free(s);
	}
}

/* Context thread, sq_lock held. */
static void ctx_flush(struct tpu_context *ctx)
{
	int ret;

	ctx_unspill(ctx);
	if (ctx->spill_head)
		atomic_store(&ctx->sq_hint, 1);
	if (!ctx->unsubmitted)
		return;
	do {
		ret = io_uring_submit(&ctx->ring);
	} while (ret == -EINTR);
	/* -EBUSY/-EAGAIN: CQEs must be reaped first; what was not taken stays queued. */
	ctx->unsubmitted = io_uring_sq_ready(&ctx->ring);
	if (ctx->unsubmitted || ctx->spill_head)
		atomic_store(&ctx->sq_hint, 1);
}

tpu_status tpu__ctx_submit(struct tpu_context *ctx)
{
	bool here = ctx_own_thread(ctx);

	io_uring_sqe_set_data(ctx->cur_sqe, ctx->cur_rec);
	ctx->inflight++;
	if (ctx->cur_spill) {
		*ctx->spill_tail = ctx->cur_spill;
		ctx->spill_tail = &ctx->cur_spill->next;
		ctx->cur_spill = NULL;
	} else {
		ctx->unsubmitted++;
	}
	if (here)
		ctx_flush(ctx);
	else
		atomic_store(&ctx->sq_hint, 1);
	pthread_mutex_unlock(&ctx->sq_lock);
	/* A lent thread leaves the ring to the context's own: kicked when it gives back. */
	if (!here && !tpu__ctx_on_thread(ctx))
		ctx_kick(ctx);
	return 0;
}

/* ---- completion ---------------------------------------------------- */

void tpu__ctx_complete(struct tpu_context *ctx, struct tpu__task *t)
{
	t->next = NULL;
	pthread_mutex_lock(&ctx->done_lock);
	*ctx->done_tail = t;
	ctx->done_tail = &t->next;
	atomic_fetch_add_explicit(&ctx->ndone, 1, memory_order_relaxed);
	pthread_mutex_unlock(&ctx->done_lock);
	atomic_store(&ctx->done_hint, 1);
	if (!tpu__ctx_on_thread(ctx))
		ctx_kick(ctx);
}

void tpu__ctx_defer(struct tpu_context *ctx, struct tpu__task *t)
{
	t->next = NULL;
	pthread_mutex_lock(&ctx->done_lock);
	*ctx->task_tail = t;
	ctx->task_tail = &t->next;
	atomic_fetch_add_explicit(&ctx->ntasks, 1, memory_order_relaxed);
	pthread_mutex_unlock(&ctx->done_lock);
	atomic_store(&ctx->done_hint, 1);
	if (!tpu__ctx_on_thread(ctx))
		ctx_kick(ctx);
}

void tpu__ctx_defer_quiet(struct tpu_context *ctx, struct tpu__task *t)
{
	t->next = NULL;
	pthread_mutex_lock(&ctx->done_lock);
	*ctx->task_tail = t;
	ctx->task_tail = &t->next;
	atomic_fetch_add_explicit(&ctx->ntasks, 1, memory_order_relaxed);
	pthread_mutex_unlock(&ctx->done_lock);
	atomic_store(&ctx->done_hint, 1);
}

void tpu__ctx_kick(struct tpu_context *ctx)
{
	ctx_kick(ctx);
}

/* Run deferred tasks, one at a time for the same reason as the ops below. */
static bool ctx_run_tasks(struct tpu_context *ctx)
{
	bool any = false;

	for (;;) {
		struct tpu__task *t;

		if (!atomic_load_explicit(&ctx->ntasks, memory_order_relaxed))
			return any;
		pthread_mutex_lock(&ctx->done_lock);
		t = ctx->task_head;
		if (t) {
			ctx->task_head = t->next;
			if (!ctx->task_head)
				ctx->task_tail = &ctx->task_head;
			atomic_fetch_sub_explicit(&ctx->ntasks, 1, memory_order_relaxed);
		}
		pthread_mutex_unlock(&ctx->done_lock);
		if (!t)
			return any;
		t->fn(t);
		any = true;
	}
}

/* ---- pollers --------------------------------------------------------- */

void tpu__ctx_poller_add(struct tpu_context *ctx, struct tpu__poller *p)
{
	p->next = ctx->pollers;
	ctx->pollers = p;
	ctx->pollers_gen++;
	atomic_fetch_add(&ctx->npollers, 1);
}

void tpu__ctx_poller_del(struct tpu_context *ctx, struct tpu__poller *p)
{
	struct tpu__poller **pp;

	for (pp = &ctx->pollers; *pp; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			ctx->pollers_gen++;
			atomic_fetch_sub(&ctx->npollers, 1);
			break;
		}
	}
	/* A pass in progress goes on with the one after it. */
	if (ctx->poll_cursor == p)
		ctx->poll_cursor = p->next;
}

void tpu__ctx_spinner_get(struct tpu_context *ctx)
{
	ctx->spinners++;
}

void tpu__ctx_spinner_put(struct tpu_context *ctx)
{
	ctx->spinners--;
}

/* The ring defers completion work until this thread enters the kernel. */
static bool ctx_coop(const struct tpu_context *ctx)
{
	return ctx->ring.flags & IORING_SETUP_COOP_TASKRUN;
}

/* Whether the thread spins before it sleeps. */
static bool ctx_spins(struct tpu_context *ctx)
{
	/* A thread waiting to be lent does this work better: it waits anyway. */
	if (atomic_load_explicit(&ctx->lend_want, memory_order_relaxed))
		return false;
	return ctx->spin_ns && (ctx->pollers || (ctx->spinners && ctx_coop(ctx)));
}

int tpu__ctx_wake_fd(const struct tpu_context *ctx)
{
	return ctx->wake_fd;
}

uint64_t tpu__ctx_spin_ns(const struct tpu_context *ctx)
{
	return ctx->spin_ns;
}

static bool ctx_poll_all(struct tpu_context *ctx)
{
	bool any = false;

	ctx->poll_cursor = ctx->pollers;
	while (ctx->poll_cursor) {
		struct tpu__poller *p = ctx->poll_cursor;

		ctx->poll_cursor = p->next;
		any |= p->poll(p);
	}
	return any;
}

/* True if a poller saw something arrive after all: do not sleep. */
static bool ctx_arm_all(struct tpu_context *ctx)
{
	struct tpu__poller *p;
	bool pending = false;

	for (p = ctx->pollers; p; p = p->next)
		pending |= p->arm(p);
	return pending;
}

static void ctx_disarm_all(struct tpu_context *ctx)
{
	struct tpu__poller *p;

	for (p = ctx->pollers; p; p = p->next)
		p->disarm(p);
}

static uint64_t ctx_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * Run the callbacks of finished ops; true if there were any.  One op at a
 * time off the shared list, so that a callback waiting in tpu__ctx_wait()
 * (destroying a rendezvous) finds the ops after its own still there.
 */
static bool ctx_run_done(struct tpu_context *ctx)
{
	bool any = false;

	for (;;) {
		struct tpu__task *t;

		if (!atomic_load_explicit(&ctx->ndone, memory_order_relaxed))
			return any;
		pthread_mutex_lock(&ctx->done_lock);
		t = ctx->done_head;
		if (t) {
			ctx->done_head = t->next;
			if (!ctx->done_head)
				ctx->done_tail = &ctx->done_head;
			atomic_fetch_sub_explicit(&ctx->ndone, 1, memory_order_relaxed);
		}
		pthread_mutex_unlock(&ctx->done_lock);
		if (!t)
			return any;
		t->fn(t);
		any = true;
	}
}

static bool ctx_has_work(struct tpu_context *ctx)
{
	bool work;

	/*
	 * Sequentially consistent: a sleeper stores ->asleep and then looks
	 * here, a poster queues, sets done_hint and then reads ->asleep
	 * (ctx_kick); one of the two sees the other's store.
	 */
	if (atomic_load(&ctx->done_hint) || atomic_load(&ctx->ndone) || atomic_load(&ctx->ntasks))
		return true;
	pthread_mutex_lock(&ctx->sq_lock);
	work = ctx->unsubmitted || ctx->spill_head;
	pthread_mutex_unlock(&ctx->sq_lock);
	return work;
}

static void ctx_dispatch(struct tpu_context *ctx, const struct io_uring_cqe *cqe)
{
	struct ctx_rec *rec = io_uring_cqe_get_data(cqe);
	tpu__cqe_fn fn = rec->fn;
	void *arg = rec->arg;

	/* More CQEs will come for this request: keep its record. */
	if (cqe->flags & IORING_CQE_F_MORE) {
		fn(arg, cqe);
		return;
	}
	pthread_mutex_lock(&ctx->sq_lock);
	ctx->inflight--;
	tpu__free_list_put(&ctx->rec_free, rec);
	pthread_mutex_unlock(&ctx->sq_lock);
	fn(arg, cqe);
}

/* Take every CQE there is. */
static void ctx_reap(struct tpu_context *ctx)
{
	/* A CQE32 copied out, so that handlers may re-enter the loop. */
	union {
		struct io_uring_cqe cqe;
		uint8_t raw[32];
	} copy;
	struct io_uring_cqe *cqe;

	while (io_uring_peek_cqe(&ctx->ring, &cqe) == 0) {
		memcpy(&copy, cqe, sizeof(copy));
		io_uring_cqe_seen(&ctx->ring, cqe);
		ctx_dispatch(ctx, &copy.cqe);
	}
}

static void ctx_progress(struct tpu_context *ctx)
{
	pthread_mutex_lock(&ctx->progress_lock);
	ctx->generation++;
	pthread_cond_broadcast(&ctx->progress);
	pthread_mutex_unlock(&ctx->progress_lock);
}

/*
 * Sleep until a CQE is there or a kick came, or (@timed false) a peer wrote
 * the wake descriptor.  Timed, a lender used the context lately and the
 * pollers are not armed: a lender asleep in our place (tpu__ctx_lend_sleep)
 * takes the peers' writes, and we look at the pollers when the time is up.
 * Descriptors are read only once the context is ours again, so that what
 * a lender sleeps on is never taken from under it.
 */
static void ctx_sleep(struct tpu_context *ctx, bool timed)
{
	struct pollfd p[3] = {
		{ .fd = ctx->ring.ring_fd, .events = POLLIN },
		{ .fd = ctx->kick_fd, .events = POLLIN },
		{ .fd = ctx->wake_fd, .events = POLLIN },
	};
	const struct timespec grace = { 0, LEND_GRACE_NS };
	int ret;

	if (io_uring_cq_ready(&ctx->ring))
		return;
	/* A callback of ours may have posted a waiter on our core late (waitword.h). */
	tpu__waitword_flush();
	atomic_store(&ctx->timed_sleep, timed);
	/* Asleep, the work may be done by a thread lent to the context. */
	pthread_mutex_unlock(&ctx->drive);
	for (;;) {
		/* EINTR is the module's task work having run: look at the ring again. */
		ret = ppoll(p, timed ? 2 : 3, timed ? &grace : NULL, NULL);
		if (ret == 0) {
			/* Time to look at the unarmed pollers, unless a lender does. */
			if (!pthread_mutex_trylock(&ctx->drive))
				break;
			continue;
		}
		if (ret < 0 || ((p[0].revents | p[1].revents) & POLLIN) ||
		    !pthread_mutex_trylock(&ctx->drive)) {
			if (ret < 0 || ((p[0].revents | p[1].revents) & POLLIN))
				pthread_mutex_lock(&ctx->drive);
			break;
		}
		/*
		 * Only a peer's write, while a lender holds the context: it
		 * sleeps on that descriptor in our place and takes the frame.
		 * Sleep on without listening to peers until it gives the
		 * context back (a kick then if it will not be back soon), or
		 * the grace is over.
		 */
		atomic_fetch_add_explicit(&ctx->deaf_wakes, 1, memory_order_relaxed);
		timed = true;
		atomic_store(&ctx->timed_sleep, true);
	}
	if (ret > 0)
		atomic_fetch_add_explicit(&ctx->wakes, 1, memory_order_relaxed);
	if (ret > 0 && (p[1].revents & POLLIN))
		ctx_drain_fd(ctx->kick_fd);
	if (ret > 0 && (p[2].revents & POLLIN))
		ctx_drain_fd(ctx->wake_fd);
	atomic_store(&ctx->timed_sleep, false);
}

/* Clear a hint that is set; what it hints at is looked at after this. */
static bool hint_take(atomic_uint *hint)
{
	return atomic_load_explicit(hint, memory_order_relaxed) && atomic_exchange(hint, 0);
}

/* Submit, take CQEs, run callbacks, tasks and pollers; true if anything ran. */
static bool ctx_work(struct tpu_context *ctx)
{
	bool any = false;

	/*
	 * A plain load first: an idle spinning pass then takes no locked
	 * instruction and keeps the hint's cache line shared with the threads
	 * that set it.
	 */
	if (hint_take(&ctx->sq_hint)) {
		pthread_mutex_lock(&ctx->sq_lock);
		ctx_flush(ctx);
		pthread_mutex_unlock(&ctx->sq_lock);
	}
	/* Completion work the kernel holds until this thread enters it. */
	if (ctx_coop(ctx) && (IO_URING_READ_ONCE(*ctx->ring.sq.kflags) & IORING_SQ_TASKRUN))
		io_uring_get_events(&ctx->ring);
	if (io_uring_cq_ready(&ctx->ring)) {
		any = true;
		ctx_reap(ctx);
	}
	if (hint_take(&ctx->done_hint)) {
		any |= ctx_run_done(ctx);
		any |= ctx_run_tasks(ctx);
	}
	if (ctx->pollers)
		any |= ctx_poll_all(ctx);
	return any;
}

/* Peers asked about at most; more pollers than that are not looked at. */
#define CORE_PEERS_MAX		64
/* How long ctx_core_shared trusts what it learnt. */
#define CORE_ASK_NS		100000000ull

/*
 * On a lone core (the process bound to one) a spin for a peer that may
 * run only there holds the core the peer needs: with both ends of a shm
 * pipe bound to one core the thread spun out its time slice (round trips
 * of 35 us on average against 7 asleep, p99 about 1 ms).  Peers the
 * transport proved no pid for (tcp, rdma) do not stop the spin.
 */
static bool ctx_core_shared(struct tpu_context *ctx, uint64_t now)
{
	pid_t pids[CORE_PEERS_MAX];
	size_t n = 0;

	if (!tpu__spin_lone_core())
		return false;
	if (ctx->core_asked_ns && ctx->core_gen == ctx->pollers_gen &&
	    now - ctx->core_asked_ns < CORE_ASK_NS)
		return ctx->core_shared;
	for (struct tpu__poller *p = ctx->pollers; p && n < CORE_PEERS_MAX; p = p->next)
		if (p->peer_pid > 0)
			pids[n++] = p->peer_pid;
	ctx->core_shared = n && !tpu__spin_peers_elsewhere(pids, n);
	ctx->core_gen = ctx->pollers_gen;
	ctx->core_asked_ns = now ? now : 1;
	return ctx->core_shared;
}

/*
 * With pollers or spinners, keep looking for a while before sleeping: a
 * peer that answers within the spin costs neither side a wake-up.
 */
static bool ctx_spin(struct tpu_context *ctx)
{
	uint64_t now, last, until;

	if (!ctx_spins(ctx))
		return false;
	now = ctx_now_ns();
	/* Descheduled mid-spin lately: the peer needs the core more than we need to spin. */
	if (tpu__spin_contended(now) || ctx_core_shared(ctx, now))
		return false;
	atomic_fetch_add_explicit(&ctx->spins_begun, 1, memory_order_relaxed);
	until = now + ctx->spin_cur;
	do {
		unsigned int i;

		/*
		 * The clock only every few idle passes: reading it costs as much
		 * as a pass, and a peer's bytes that land meanwhile wait for it.
		 * A few passes take well under TPU__PREEMPT_GAP_NS.
		 */
		last = now;
		for (i = 0; i < CTX_SPIN_PASSES; i++) {
			if (ctx_work(ctx)) {
				/*
				 * The round looked once before the spin: this
				 * work came while we spun, so our next back-off
				 * after a preemption is short again, as a
				 * waiter's is (spin_policy.c).
				 */
				tpu__spin_answered();
				atomic_fetch_add_explicit(&ctx->spins_answered, 1,
							  memory_order_relaxed);
				return true;
			}
		}
		now = ctx_now_ns();
		if (now - last > TPU__PREEMPT_GAP_NS) {
			tpu__spin_preempted(now);
			ctx->spin_cur = ctx->spin_ns;
			return false;
		}
	} while (ctx_spins(ctx) && now < until);
	return false;
}

/* One round of the loop: submit, call back, else sleep for a CQE. */
/* A lent thread gave the context back lately: it will likely come back. */
static bool ctx_lent_lately(struct tpu_context *ctx)
{
	uint64_t last = atomic_load_explicit(&ctx->lend_last_ns, memory_order_relaxed);

	return last && ctx_now_ns() - last < LEND_GRACE_NS;
}

static void ctx_round(struct tpu_context *ctx)
{
	bool lent = ctx_lent_lately(ctx);

	/* Lent lately: the lender polls better than a spin of ours beside it. */
	if (ctx_work(ctx) || (!lent && ctx_spin(ctx))) {
		ctx_progress(ctx);
		return;
	}
	/* Announce the sleep, then look again: a kick now writes the eventfd. */
	atomic_store(&ctx->asleep, true);
	if (ctx_has_work(ctx) || (!lent && ctx_arm_all(ctx))) {
		atomic_store(&ctx->asleep, false);
		ctx_disarm_all(ctx);
		return;
	}
	if (lent) {
		ctx_sleep(ctx, true);
	} else if (ctx_spins(ctx)) {
		uint64_t t0 = ctx_now_ns(), slept;

		ctx_sleep(ctx, false);
		slept = ctx_now_ns() - t0;
		/*
		 * Woken soon after giving up: the peer answers more slowly than
		 * we spin (its own wake-up included), and two ends that both
		 * sleep every time stay that slow.  Spin longer next time, up to
		 * CTX_MAX_ADAPT_NS; a long sleep means idleness: back to the base.
		 */
		if (tpu__spin_contended(t0 + slept))
			ctx->spin_cur = ctx->spin_ns;
		else if (slept < CTX_MAX_ADAPT_NS)
			ctx->spin_cur = ctx->spin_cur * 2 > CTX_MAX_ADAPT_NS ?
					CTX_MAX_ADAPT_NS : ctx->spin_cur * 2;
		else
			ctx->spin_cur = ctx->spin_ns;
	} else {
		ctx_sleep(ctx, false);
	}
	atomic_store(&ctx->asleep, false);
	ctx_disarm_all(ctx);
	ctx_work(ctx);
	ctx_progress(ctx);
}

static bool ctx_finished(struct tpu_context *ctx)
{
	bool stop, idle;

	pthread_mutex_lock(&ctx->progress_lock);
	stop = ctx->stopping;
	pthread_mutex_unlock(&ctx->progress_lock);
	if (!stop)
		return false;
	pthread_mutex_lock(&ctx->sq_lock);
	idle = !ctx->inflight && !ctx->unsubmitted && !ctx->spill_head;
	pthread_mutex_unlock(&ctx->sq_lock);
	pthread_mutex_lock(&ctx->done_lock);
	idle = idle && !ctx->done_head && !ctx->task_head;
	pthread_mutex_unlock(&ctx->done_lock);
	return idle;
}

static void *ctx_main(void *arg)
{
	struct tpu_context *ctx = arg;

	this_thread_ctx = ctx;
	own_thread_ctx = ctx;
	pthread_mutex_lock(&ctx->drive);
	while (!ctx_finished(ctx))
		ctx_round(ctx);
	pthread_mutex_unlock(&ctx->drive);
	ctx_progress(ctx);
	return NULL;
}

void tpu__ctx_wait(struct tpu_context *ctx, bool (*done)(void *arg), void *arg)
{
	uint64_t gen;

	if (tpu__ctx_on_thread(ctx) && !ctx_own_thread(ctx)) {
		/* Lent: the context's thread waits for us, so we must not sleep. */
		while (!done(arg))
			tpu__ctx_lend_work(ctx);
		return;
	}
	if (tpu__ctx_on_thread(ctx)) {
		while (!done(arg))
			ctx_round(ctx);
		return;
	}
	for (;;) {
		pthread_mutex_lock(&ctx->progress_lock);
		gen = ctx->generation;
		pthread_mutex_unlock(&ctx->progress_lock);
		if (done(arg))
			return;
		pthread_mutex_lock(&ctx->progress_lock);
		while (ctx->generation == gen)
			pthread_cond_wait(&ctx->progress, &ctx->progress_lock);
		pthread_mutex_unlock(&ctx->progress_lock);
	}
}

/* ---- lending a waiting thread ---------------------------------------- */

bool tpu__ctx_lend_begin(struct tpu_context *ctx)
{

	/* Never twice, nor to a second context: its work could wait for ours. */
	if (this_thread_ctx || pthread_mutex_trylock(&ctx->drive))
		return false;
	this_thread_ctx = ctx;
	/*
	 * The thread went to sleep with its pollers armed (peers write its
	 * eventfd for every frame): we look at them now, so that nobody wakes
	 * it for what we take.
	 */
	ctx_disarm_all(ctx);
	return true;
}

bool tpu__ctx_lend_work(struct tpu_context *ctx)
{
	bool any = false;

	if (hint_take(&ctx->done_hint)) {
		any |= ctx_run_done(ctx);
		any |= ctx_run_tasks(ctx);
	}
	if (ctx->pollers)
		any |= ctx_poll_all(ctx);
	return any;
}

void tpu__ctx_lend_end(struct tpu_context *ctx, bool back_soon)
{
	bool timed, kick;

	/*
	 * The thread sleeps on: arm its pollers again, and wake it for what
	 * is left (our deferred work and SQEs, which it was not kicked for,
	 * or a frame that came meanwhile).  Kicked before the unlock: once
	 * it has the context back it may be destroyed at once.
	 */
	atomic_store_explicit(&ctx->lend_last_ns, back_soon ? ctx_now_ns() : 0,
			      memory_order_relaxed);
	timed = atomic_load(&ctx->timed_sleep);
	kick = !(back_soon && timed) && ctx_arm_all(ctx);
	/* Timed, the thread does not listen to peers: not coming back, have it listen again. */
	if (kick || (timed && !back_soon) || ctx_has_work(ctx))
		ctx_kick(ctx);
	/* For threads in tpu__ctx_wait() (a run_sync whose task we ran). */
	ctx_progress(ctx);
	this_thread_ctx = NULL;
	pthread_mutex_unlock(&ctx->drive);
}

bool tpu__ctx_lend_sleep(struct tpu_context *ctx, uint64_t deadline_ns)
{
	struct pollfd p[3] = {
		{ .fd = ctx->wake_fd, .events = POLLIN },
		{ .fd = ctx->ring.ring_fd, .events = POLLIN },
		{ .fd = ctx->kick_fd, .events = POLLIN },
	};
	struct timespec ts;
	uint64_t now;
	bool own;
	int ret;

	if (tpu__ctx_lend_blocked(ctx))
		return true;
	/* Peers write the wake descriptor from now on; what came first is taken now. */
	if (ctx_arm_all(ctx) || atomic_load(&ctx->done_hint)) {
		ctx_disarm_all(ctx);
		return false;
	}
	if (deadline_ns) {
		now = ctx_now_ns();
		if (now >= deadline_ns) {
			ctx_disarm_all(ctx);
			return false;
		}
		ts.tv_sec = (time_t)((deadline_ns - now) / 1000000000ull);
		ts.tv_nsec = (long)((deadline_ns - now) % 1000000000ull);
	}
	atomic_fetch_add_explicit(&ctx->lend_sleeps, 1, memory_order_relaxed);
	ret = ppoll(p, 3, deadline_ns ? &ts : NULL, NULL);
	if (ret > 0 && (p[0].revents & POLLIN))
		ctx_drain_fd(ctx->wake_fd);
	ctx_disarm_all(ctx);
	/* A CQE, or a kick (SQEs, another thread's deferred work): the thread's own. */
	own = ret > 0 && ((p[1].revents & POLLIN) || (p[2].revents & POLLIN));
	return own || tpu__ctx_lend_blocked(ctx);
}

uint64_t tpu__ctx_lend_sleeps(const struct tpu_context *ctx)
{
	return atomic_load_explicit(&ctx->lend_sleeps, memory_order_relaxed);
}

uint64_t tpu__ctx_spins_answered(const struct tpu_context *ctx)
{
	return atomic_load_explicit(&ctx->spins_answered, memory_order_relaxed);
}

uint64_t tpu__ctx_spins_begun(const struct tpu_context *ctx)
{
	return atomic_load_explicit(&ctx->spins_begun, memory_order_relaxed);
}

uint64_t tpu__ctx_wakes(const struct tpu_context *ctx)
{
	return atomic_load_explicit(&ctx->wakes, memory_order_relaxed) +
	       atomic_load_explicit(&ctx->deaf_wakes, memory_order_relaxed);
}

void tpu__ctx_lend_wake(struct tpu_context *ctx)
{
	uint64_t one = 1;

	while (write(ctx->wake_fd, &one, sizeof(one)) < 0 && errno == EINTR)
		;
}

void tpu__ctx_lend_forget(struct tpu_context *ctx)
{
	if (!atomic_load_explicit(&ctx->lend_last_ns, memory_order_relaxed))
		return;
	atomic_store(&ctx->lend_last_ns, 0);
	/* Asleep with unarmed pollers: it must arm them now. */
	if (atomic_load(&ctx->timed_sleep))
		ctx_kick(ctx);
}

bool tpu__ctx_lend_blocked(struct tpu_context *ctx)
{
	return atomic_load(&ctx->sq_hint) || io_uring_cq_ready(&ctx->ring);
}

bool tpu__ctx_lendable(struct tpu_context *ctx)
{
	return atomic_load_explicit(&ctx->npollers, memory_order_relaxed) != 0;
}

void tpu__ctx_lend_want(struct tpu_context *ctx, bool want)
{
	if (want)
		atomic_fetch_add(&ctx->lend_want, 1);
	else
		atomic_fetch_sub(&ctx->lend_want, 1);
}

/* ---- endpoint and rendezvous bookkeeping ---------------------------- */

struct tpu_endpoint *tpu__ep_ref_get(struct tpu__ep_ref *ref)
{
	return ref ? ref->ep : NULL;
}

struct tpu__ep_ref *tpu__ep_ref_new(struct tpu_endpoint *ep)
{
	struct tpu__ep_ref *ref = calloc(1, sizeof(*ref));

	if (!ref)
		return NULL;
	ref->ep = ep;
	atomic_init(&ref->refs, 1);
	return ref;
}

void tpu__ep_ref_hold(struct tpu__ep_ref *ref)
{
	atomic_fetch_add(&ref->refs, 1);
}

void tpu__ep_ref_put(struct tpu__ep_ref *ref)
{
	if (ref && atomic_fetch_sub(&ref->refs, 1) == 1) {
		tpu_endpoint_close(ref->ep);
		free(ref);
	}
}

/* ctx->lock held. */
static struct tpu__ep_ref *ctx_ep_locked(struct tpu_context *ctx)
{
	struct tpu_endpoint *ep;

	if (ctx->ep_tried || (ctx->flags & TPU_CTX_NO_KMOD))
		return ctx->ep;
	ctx->ep_tried = true;
	if (tpu_endpoint_open(ctx->dev_path, &ep))
		return NULL;
	ctx->ep = tpu__ep_ref_new(ep);
	if (!ctx->ep)
		tpu_endpoint_close(ep);
	return ctx->ep;
}

struct tpu_endpoint *tpu__ctx_endpoint(struct tpu_context *ctx)
{
	struct tpu__ep_ref *ref;

	pthread_mutex_lock(&ctx->lock);
	ref = ctx_ep_locked(ctx);
	pthread_mutex_unlock(&ctx->lock);
	return tpu__ep_ref_get(ref);
}

struct tpu__ep_ref *tpu__ctx_endpoint_ref(struct tpu_context *ctx)
{
	struct tpu__ep_ref *ref;

	pthread_mutex_lock(&ctx->lock);
	ref = ctx_ep_locked(ctx);
	if (ref)
		tpu__ep_ref_hold(ref);
	pthread_mutex_unlock(&ctx->lock);
	return ref;
}

bool tpu__ctx_claim_endpoint(struct tpu_context *ctx)
{
	bool mine;

	pthread_mutex_lock(&ctx->lock);
	mine = ctx_ep_locked(ctx) && !ctx->ep_claimed;
	if (mine)
		ctx->ep_claimed = true;
	pthread_mutex_unlock(&ctx->lock);
	return mine;
}

/* ---- running on the context thread, synchronously --------------------- */

struct sync_call {
	struct tpu__task task;
	void (*fn)(void *arg);
	void *arg;
	atomic_bool done;
};

static void sync_run(struct tpu__task *t)
{
	struct sync_call *sc = tpu__container_of(t, struct sync_call, task);

	sc->fn(sc->arg);
	atomic_store(&sc->done, true);
}

static bool sync_done(void *arg)
{
	return atomic_load(&((struct sync_call *)arg)->done);
}

void tpu__ctx_run_sync(struct tpu_context *ctx, void (*fn)(void *arg), void *arg)
{
	struct sync_call sc = { .task.fn = sync_run, .fn = fn, .arg = arg };

	if (tpu__ctx_on_thread(ctx)) {
		fn(arg);
		return;
	}
	atomic_init(&sc.done, false);
	tpu__ctx_defer(ctx, &sc.task);
	tpu__ctx_wait(ctx, sync_done, &sc);
}

/* ---- objects left open ------------------------------------------------- */

void tpu__ctx_add_obj(struct tpu_context *ctx, struct tpu__ctx_obj *o)
{
	pthread_mutex_lock(&ctx->lock);
	o->next = ctx->objs;
	ctx->objs = o;
	pthread_mutex_unlock(&ctx->lock);
}

void tpu__ctx_del_obj(struct tpu_context *ctx, struct tpu__ctx_obj *o)
{
	struct tpu__ctx_obj **p;

	pthread_mutex_lock(&ctx->lock);
	for (p = &ctx->objs; *p; p = &(*p)->next) {
		if (*p == o) {
			*p = o->next;
			break;
		}
	}
	pthread_mutex_unlock(&ctx->lock);
}

/* ---- create and destroy ---------------------------------------------- */

static void ctx_free(struct tpu_context *ctx)
{
	if (ctx->wake_fd >= 0)
		close(ctx->wake_fd);
	if (ctx->kick_fd >= 0)
		close(ctx->kick_fd);
	tpu__ep_ref_put(ctx->ep);
	tpu__free_list_drain(&ctx->rec_free);
	pthread_mutex_destroy(&ctx->sq_lock);
	pthread_mutex_destroy(&ctx->done_lock);
	pthread_mutex_destroy(&ctx->progress_lock);
	pthread_mutex_destroy(&ctx->drive);
	pthread_cond_destroy(&ctx->progress);
	pthread_mutex_destroy(&ctx->lock);
	free(ctx->dev_path);
	free(ctx->transports);
	free(ctx->channels);
	memset(&ctx->secret, 0, sizeof(ctx->secret));
	tpu__quarantine(ctx, &ctx->magic);
}

tpu_status tpu__ctx_check(const struct tpu_context *ctx)
{
	tpu_status st = tpu__magic_check(ctx, ctx ? &ctx->magic : NULL, TPU__MAGIC_CONTEXT);

	if (st)
		return st;
	if (tpu__forked_since(ctx->fork_gen)) {
		tpu__log_debug("context %p: used in a child forked after its creation; "
			       "its thread and ring stayed in the parent", (const void *)ctx);
		return TPU_E_FORKED;
	}
	return 0;
}

/* TPU_SPIN_US: how long the thread polls shared memory before it sleeps. */
static uint64_t ctx_spin_ns_from_env(void)
{
	const char *s = getenv("TPU_SPIN_US");
	char *end;
	unsigned long long us;

	if (!s || !*s)
		return CTX_DEFAULT_SPIN_NS;
	errno = 0;
	us = strtoull(s, &end, 10);
	if (errno || *end || us * 1000 > CTX_MAX_SPIN_NS) {
		tpu__log_debug("context: ignoring TPU_SPIN_US=%s (0 to %d)", s,
			       CTX_MAX_SPIN_NS / 1000);
		return CTX_DEFAULT_SPIN_NS;
	}
	return us * 1000;
}

/* The thread must not take the program's signals: it would only delay them. */
static tpu_status ctx_start_thread(struct tpu_context *ctx)
{
	sigset_t all, old;
	int err;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&ctx->thread, NULL, ctx_main, ctx);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return -err;
}

tpu_status tpu__ctx_create(const struct tpu_context_options *opts, struct tpu_context **out)
{
	struct io_uring_params p;
	struct tpu_context *ctx;
	unsigned int entries;
	tpu_status st;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (opts && ((opts->flags & ~TPU_CTX_NO_KMOD) || !tpu__reserved_zero(opts->reserved)))
		return -EINVAL;
	entries = opts && opts->entries ? opts->entries : CTX_DEFAULT_ENTRIES;
	if (entries > 32768)
		return -EINVAL;
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	ctx->magic = TPU__MAGIC_CONTEXT;
	ctx->fork_gen = tpu__fork_gen();
	ctx->wake_fd = -1;
	ctx->kick_fd = -1;
	pthread_mutex_init(&ctx->sq_lock, NULL);
	tpu__free_list_init(&ctx->rec_free, offsetof(struct ctx_rec, next), TPU__FREE_NO_ROOM,
			    CTX_REC_FREE_MAX, NULL);
	pthread_mutex_init(&ctx->done_lock, NULL);
	pthread_mutex_init(&ctx->progress_lock, NULL);
	pthread_mutex_init(&ctx->drive, NULL);
	atomic_init(&ctx->lend_want, 0);
	atomic_init(&ctx->lend_last_ns, 0);
	atomic_init(&ctx->timed_sleep, false);
	atomic_init(&ctx->npollers, 0);
	pthread_cond_init(&ctx->progress, NULL);
	pthread_mutex_init(&ctx->lock, NULL);
	ctx->done_tail = &ctx->done_head;
	ctx->spill_tail = &ctx->spill_head;
	ctx->task_tail = &ctx->task_head;
	atomic_init(&ctx->ndone, 0);
	atomic_init(&ctx->ntasks, 0);
	ctx->spin_ns = ctx_spin_ns_from_env();
	ctx->spin_cur = ctx->spin_ns;
	atomic_init(&ctx->asleep, false);
	ctx->flags = opts ? opts->flags : 0;
	/* A secret file others may read is refused rather than used or ignored. */
	st = tpu__secret_from_env(&ctx->secret);
	if (st) {
		ctx_free(ctx);
		return st;
	}
	if (opts && opts->dev_path && !(ctx->dev_path = strdup(opts->dev_path))) {
		ctx_free(ctx);
		return -ENOMEM;
	}
	if (opts && ((opts->transports && !(ctx->transports = strdup(opts->transports))) ||
		     (opts->channels && !(ctx->channels = strdup(opts->channels))))) {
		ctx_free(ctx);
		return -ENOMEM;
	}
	ctx->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ctx->kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (ctx->wake_fd < 0 || ctx->kick_fd < 0) {
		st = tpu__errno();
		ctx_free(ctx);
		return st;
	}
	memset(&p, 0, sizeof(p));
	/*
	 * COOP_TASKRUN: completion work waits for this thread to enter the
	 * kernel instead of interrupting it, which a spinning thread does
	 * when TASKRUN_FLAG says there is some (kernels before 5.19 refuse).
	 */
	p.flags = IORING_SETUP_SQE128 | IORING_SETUP_CQE32 | IORING_SETUP_COOP_TASKRUN |
		  IORING_SETUP_TASKRUN_FLAG;
	st = io_uring_queue_init_params(entries, &ctx->ring, &p);
	if (st == -EINVAL) {
		memset(&p, 0, sizeof(p));
		p.flags = IORING_SETUP_SQE128 | IORING_SETUP_CQE32;
		st = io_uring_queue_init_params(entries, &ctx->ring, &p);
	}
	if (st) {
		tpu__log_debug("context: io_uring_setup failed: %s", tpu_strerror(st));
		ctx_free(ctx);
		return st;
	}
	st = ctx_start_thread(ctx);
	if (st) {
		io_uring_queue_exit(&ctx->ring);
		ctx_free(ctx);
		return st;
	}
	*out = ctx;
	return 0;
}

void tpu__ctx_secret(struct tpu_context *ctx, struct tpu__secret *out)
{
	pthread_mutex_lock(&ctx->lock);
	*out = ctx->secret;
	pthread_mutex_unlock(&ctx->lock);
}

void tpu__ctx_set_secret(struct tpu_context *ctx, const struct tpu__secret *s)
{
	pthread_mutex_lock(&ctx->lock);
	ctx->secret = *s;
	pthread_mutex_unlock(&ctx->lock);
}

TPU_API tpu_status tpu_context_set_secret(struct tpu_context *ctx, const void *secret, size_t len)
{
	struct tpu__secret s;
	tpu_status st = tpu__ctx_check(ctx);

	if (st)
		return st;
	if ((!secret && len) || len > TPU__SECRET_MAX)
		return -EINVAL;
	tpu__secret_from_bytes(&s, secret, len);
	tpu__ctx_set_secret(ctx, &s);
	memset(&s, 0, sizeof(s));
	return 0;
}

TPU_API void tpu_context_destroy(struct tpu_context *ctx)
{
	tpu_status st;

	if (!ctx)
		return;
	st = tpu__ctx_check(ctx);
	if (st) {
		/*
		 * Destroyed already: nothing to do.  In a forked child the thread
		 * and the ring are the parent's: the copy is left alone (leaked).
		 */
		tpu__log_debug("tpu_context_destroy(%p): %s; ignored", (void *)ctx,
			       tpu_strerror(st));
		return;
	}
	/*
	 * Objects left open are closed, pipes and listeners first, then the
	 * rendezvous: their callbacks all run.
	 */
	for (int pass = 0; pass < TPU__CTX_PASSES; pass++) {
		for (;;) {
			struct tpu__ctx_obj *o;

			pthread_mutex_lock(&ctx->lock);
			for (o = ctx->objs; o && (int)o->pass != pass; o = o->next)
				;
			pthread_mutex_unlock(&ctx->lock);
			if (!o)
				break;
			tpu__log_debug("context: closing %s the program left open", o->what);
			o->close(o);
		}
	}
	/* From here on a second destroy, or any use, sees TPU_E_DESTROYED. */
	ctx->magic = TPU__MAGIC_DEAD;
	pthread_mutex_lock(&ctx->progress_lock);
	ctx->stopping = true;
	pthread_mutex_unlock(&ctx->progress_lock);
	atomic_store(&ctx->asleep, true);
	ctx_kick(ctx);
	pthread_join(ctx->thread, NULL);
	io_uring_queue_exit(&ctx->ring);
	while (ctx->spill_head) {
		struct ctx_spill *s = ctx->spill_head;

		ctx->spill_head = s->next;
		free(s);
	}
	ctx_free(ctx);
}
