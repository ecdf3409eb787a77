/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * lib/ctx: the context (context.c): its completion thread and io_uring,
 * deferred work, completions handed over from other threads, timers
 * (ctx_timer.c), pollers and spinners, the context's own endpoint and its
 * references, and buffers (buffer.c).  Built on lib/dev and lib/base; it
 * knows nothing of the rendezvous, transports, channels or pipes above it:
 * they reach it through function pointers they own (a task's fn, an
 * object's close).  Not installed.
 */
#ifndef TPU_CTX_H
#define TPU_CTX_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dev/dev.h"

struct io_uring;
struct io_uring_sqe;
struct io_uring_cqe;


/* The context's io_uring, for implementations that submit to it. */
typedef void (*tpu__cqe_fn)(void *arg, const struct io_uring_cqe *cqe);
/*
 * Get a zeroed SQE (SQE128 ring) whose completion calls fn(arg, cqe) on the
 * context thread (the CQE is a CQE32: cqe->big_cqe[0] is the extra word).
 * A request that posts several CQEs (multishot, SEND_ZC's notification)
 * calls fn for each; the last one is the CQE without IORING_CQE_F_MORE.
 * Thread-safe.  On success the submission lock is held: fill the SQE (not
 * its user_data) and call tpu__ctx_submit() at once, on the same thread.
 * Returns NULL (lock not held) only when out of memory.
 *
 * Every io_uring_enter() happens on the context thread, so that the module
 * runs a RECV's copy (task work) in a thread that lives as long as the
 * ring: another thread's SQE is queued and the context thread woken.  When
 * the ring is full the SQE is built in memory and copied in later.
 */
struct io_uring_sqe *tpu__ctx_sqe(struct tpu_context *ctx, tpu__cqe_fn fn, void *arg);
tpu_status tpu__ctx_submit(struct tpu_context *ctx);

/* True on the context's completion thread (in a callback, say). */
bool tpu__ctx_on_thread(const struct tpu_context *ctx);

/*
 * Wait until done(arg) is true, re-checking after each round of completions.
 * On the context thread it runs the rounds itself instead of sleeping, so
 * that a callback may wait for other operations to finish.
 */
void tpu__ctx_wait(struct tpu_context *ctx, bool (*done)(void *arg), void *arg);
/* Run fn(arg) on the context thread and wait for it to return. */
void tpu__ctx_run_sync(struct tpu_context *ctx, void (*fn)(void *arg), void *arg);

/*
 * One-shot timers on the context thread (IORING_OP_TIMEOUT): fn(arg, 0)
 * when the time is up, fn(arg, -ECANCELED) after tpu__ctx_timer_cancel().
 * Exactly one call either way; the timer's memory is the caller's until
 * then.  Thread-safe.
 */
struct tpu__timer {
	void (*fn)(void *arg, tpu_status status);
	void *arg;
	int64_t ts[2];			/* struct __kernel_timespec, read at submission */
	uint64_t user_data;		/* the TIMEOUT's, for the cancel */
};
tpu_status tpu__ctx_timer_start(struct tpu_context *ctx, struct tpu__timer *t, uint64_t ns);
void tpu__ctx_timer_cancel(struct tpu_context *ctx, struct tpu__timer *t);

/*
 * Deferred work: t->fn(t) runs on the context thread, after the work
 * deferred before it.  Thread-safe; the task's memory is the caller's until
 * its fn runs (embed it in the object it works on).  Pipes use this to run
 * every state change of a pipe on the one thread that owns it.
 */
struct tpu__task {
	struct tpu__task *next;
	void (*fn)(struct tpu__task *t);
};
void tpu__ctx_defer(struct tpu_context *ctx, struct tpu__task *t);
/*
 * tpu__ctx_defer() without waking the thread: the caller does the work
 * itself right after (tpu__ctx_lend_begin), or calls tpu__ctx_kick().
 */
void tpu__ctx_defer_quiet(struct tpu_context *ctx, struct tpu__task *t);
/* Wake the thread if it sleeps. */
void tpu__ctx_kick(struct tpu_context *ctx);
/*
 * A finished operation, handed to the context thread from any thread:
 * t->fn(t) runs there, after the completions handed over before it.  The
 * rendezvous completes its operations this way (tpu__op_complete); the
 * queue is apart from tpu__ctx_defer's so that completions keep their
 * order among themselves.
 */
void tpu__ctx_complete(struct tpu_context *ctx, struct tpu__task *t);

/*
 * Lending a thread that waits anyway (a blocked receive of the remote
 * rendezvous) to a context whose thread sleeps: the waiter does the
 * thread's work itself while it spins, so that a hand-off through shared
 * memory costs no wake-up of a second thread on each side.  Only for a
 * context whose callbacks are all the library's own (the remote
 * rendezvous's private pipe context): the public promise that callbacks
 * run on the context's thread does not hold for the lent thread.
 *
 *   lend_begin	if the context's thread sleeps (or has not started), stand in
 *		for it: tpu__ctx_on_thread() is true here until lend_end;
 *		false if it is awake, or this thread is on a context already;
 *   lend_work	one round of its work: finished ops, deferred tasks, pollers
 *		(never the ring: SQEs wait for the thread, kicked at lend_end);
 *		true if anything ran;
 *   lend_end	give it back (the thread is woken if work is left for it);
 *   lend_want	a waiter would like to stand in (true) or no longer does
 *		(false): the thread stops spinning meanwhile, so that it
 *		sleeps and the waiter can.
 *
 * The lent thread must not block: the context's thread waits for it.
 */
bool tpu__ctx_lend_begin(struct tpu_context *ctx);
bool tpu__ctx_lend_work(struct tpu_context *ctx);
void tpu__ctx_lend_end(struct tpu_context *ctx, bool back_soon);
void tpu__ctx_lend_want(struct tpu_context *ctx, bool want);
/*
 * Whether lending pays: the context polls shared memory (shm pipes).  What
 * comes through its ring (tcp) needs its own thread, which a lender would
 * only keep from it.
 */
bool tpu__ctx_lendable(struct tpu_context *ctx);
/*
 * Lent: the work waits for the context's own thread (SQEs to submit, such
 * as the kmod channel's RECV, or completions to reap): give it back now.
 */
bool tpu__ctx_lend_blocked(struct tpu_context *ctx);
/*
 * Lent, and the lender's wait goes on: sleep in the thread's place until a
 * peer writes the wake descriptor (the pollers armed meanwhile), a kick
 * or a CQE comes, tpu__ctx_lend_wake() is called, or @deadline_ns
 * (CLOCK_MONOTONIC; 0: none).  The caller then runs lend_work.  True when
 * the work is the context's own thread's (a CQE, a kick, SQEs): give the
 * context back now.  The thread, asleep meanwhile, is not woken for what
 * wakes the lender.
 */
bool tpu__ctx_lend_sleep(struct tpu_context *ctx, uint64_t deadline_ns);
/* Wake a lender asleep in tpu__ctx_lend_sleep (any thread). */
void tpu__ctx_lend_wake(struct tpu_context *ctx);
/* For tests: the thread's wake-ups from sleep, and lenders' sleeps in its place. */
uint64_t tpu__ctx_wakes(const struct tpu_context *ctx);
uint64_t tpu__ctx_lend_sleeps(const struct tpu_context *ctx);
/* For tests: the thread's spins that found work (reported to spin_policy.c). */
uint64_t tpu__ctx_spins_answered(const struct tpu_context *ctx);
/* For tests: the thread's spins begun. */
uint64_t tpu__ctx_spins_begun(const struct tpu_context *ctx);
/*
 * The lender that gave the context back expecting to come back does not
 * (it waits without lending): the thread arms its pollers now rather than
 * when its grace is up.
 */
void tpu__ctx_lend_forget(struct tpu_context *ctx);

/*
 * Pollers: transports that share memory with a peer (shm rings) are polled
 * by the context thread instead of waking it through the kernel for every
 * frame.  While any poller is registered the thread spins for a short while
 * (TPU_SPIN_US, default 100 us) after its last progress before it sleeps, so
 * that a busy pipe costs no system call and an idle one costs no CPU.
 *
 *   poll	make progress; return true if anything happened;
 *   arm	the thread is about to sleep: tell the peer (a flag in shared
 *		memory) to write tpu__ctx_wake_fd() when it produces something,
 *		then return true if something arrived meanwhile (no sleep);
 *   disarm	the thread woke up: clear that flag.
 *
 * Add and delete only on the context thread (a poller may delete itself or
 * another one from within poll).
 */
struct tpu__poller {
	struct tpu__poller *next;
	bool (*poll)(struct tpu__poller *p);
	bool (*arm)(struct tpu__poller *p);
	void (*disarm)(struct tpu__poller *p);
	/*
	 * The process at the other end as the kernel proved it (shm:
	 * SO_PEERCRED), 0 if not known: on a lone core the thread does not
	 * spin while such a peer may need that core (ctx_core_shared).
	 */
	int peer_pid;
};
void tpu__ctx_poller_add(struct tpu_context *ctx, struct tpu__poller *p);
void tpu__ctx_poller_del(struct tpu_context *ctx, struct tpu__poller *p);
/* The eventfd that wakes the context thread; a peer may hold a duplicate. */
int tpu__ctx_wake_fd(const struct tpu_context *ctx);
/*
 * TPU_SPIN_US in ns (0: never spin): how long a thread that polls for its
 * peer (the context thread, a kmod rendezvous waiter) spins at first.
 */
uint64_t tpu__ctx_spin_ns(const struct tpu_context *ctx);
/*
 * Spinners: sockets whose peer answers within microseconds (tcp pipes).
 * While any is held the thread spins after its progress as it does for
 * pollers, entering the kernel only when io_uring has completion work
 * for it (IORING_SQ_TASKRUN): a wake-up from sleep costs more than the
 * round trip itself.  Context thread only.
 */
void tpu__ctx_spinner_get(struct tpu_context *ctx);
void tpu__ctx_spinner_put(struct tpu_context *ctx);

/*
 * The context's own endpoint on /dev/tensorpipe, opened on first use, or
 * NULL when the context does not use the module.  Buffers are allocated on
 * it.  The first kmod rendezvous of the context attaches it to its domain
 * (tpu__ctx_claim_endpoint() returns true once), so that buffers can be
 * given without a copy; later ones open their own endpoint and copy from
 * buffers (registering their memory).
 */
struct tpu_endpoint *tpu__ctx_endpoint(struct tpu_context *ctx);
bool tpu__ctx_claim_endpoint(struct tpu_context *ctx);
/* How the context was created. */
const char *tpu__ctx_dev_path(const struct tpu_context *ctx);
unsigned int tpu__ctx_flags(const struct tpu_context *ctx);
/*
 * tpu_context_create() without checking opts->transports and ->channels:
 * the public call (pipe_policy.c) checks them against the tables of the
 * layers that own the names, then calls this.
 */
tpu_status tpu__ctx_create(const struct tpu_context_options *opts, struct tpu_context **out);
/*
 * At a public call's entry: 0; -EINVAL (NULL or not a context);
 * TPU_E_DESTROYED (destroyed); TPU_E_FORKED (a child forked after the
 * context was made: its thread and ring stayed in the parent).
 */
tpu_status tpu__ctx_check(const struct tpu_context *ctx);
/*
 * The job secret (a copy; !set: none), any thread.  Connections set up
 * after a change use the new one; those already up stay.
 */
void tpu__ctx_secret(struct tpu_context *ctx, struct tpu__secret *out);
void tpu__ctx_set_secret(struct tpu_context *ctx, const struct tpu__secret *s);
/* Pipes: the context options' transport and channel lists (NULL: all). */
const char *tpu__ctx_transports(const struct tpu_context *ctx);
const char *tpu__ctx_channels(const struct tpu_context *ctx);

/* A reference-counted endpoint, so that buffers may outlive nothing they need. */
struct tpu__ep_ref;
struct tpu__ep_ref *tpu__ctx_endpoint_ref(struct tpu_context *ctx);
/* A new reference owning @ep (closed with the last put). */
struct tpu__ep_ref *tpu__ep_ref_new(struct tpu_endpoint *ep);
void tpu__ep_ref_hold(struct tpu__ep_ref *ref);
struct tpu_endpoint *tpu__ep_ref_get(struct tpu__ep_ref *ref);
void tpu__ep_ref_put(struct tpu__ep_ref *ref);

/*
 * Objects the program may leave open (pipes, listeners, rendezvous):
 * tpu_context_destroy() calls close for each (which must unlink it with
 * tpu__ctx_del_obj) before it stops the thread, pass by pass: objects that
 * own pipes first (they close their pipes themselves), then every object
 * of pass TPU__CTX_PASS_PIPE, then those of TPU__CTX_PASS_RDV, so that a
 * pipe closes the rendezvous it uses itself.
 */
enum tpu__ctx_pass {
	TPU__CTX_PASS_OWNER,	/* objects that own pipes (the remote rendezvous) */
	TPU__CTX_PASS_PIPE,	/* pipes and listeners */
	TPU__CTX_PASS_RDV,	/* rendezvous */
	TPU__CTX_PASSES,
};

struct tpu__ctx_obj {
	struct tpu__ctx_obj *next;
	void (*close)(struct tpu__ctx_obj *o);
	enum tpu__ctx_pass pass;
	const char *what;		/* for the debug log: "a pipe or listener" */
};
void tpu__ctx_add_obj(struct tpu_context *ctx, struct tpu__ctx_obj *o);
void tpu__ctx_del_obj(struct tpu_context *ctx, struct tpu__ctx_obj *o);


/* Buffers (buffer.c). */
enum tpu__buffer_kind {
	TPU__BUF_KMOD,		/* a module region mapped from the endpoint */
	TPU__BUF_MEMFD,		/* a memfd mapped MAP_SHARED */
	TPU__BUF_HEAP,		/* malloc, for copies that never leave the process */
	/*
	 * An imported dma-buf region of the endpoint, not mapped: @data is the
	 * exporter's address of its first byte (device memory, which the CPU
	 * must never touch), only for the kmod rendezvous's offsets.
	 */
	TPU__BUF_DMABUF,
};

struct tpu_buffer {
	uint32_t magic;			/* TPU__MAGIC_BUFFER; poisoned when freed */
	unsigned int fork_gen;		/* tpu__fork_gen() at creation */
	void *data;
	size_t len;
	enum tpu__buffer_kind kind;
	uint64_t id;			/* unique per process: a cache key that is never reused */
	int memfd;			/* TPU__BUF_MEMFD */
	struct tpu__ep_ref *ep;		/* TPU__BUF_KMOD, TPU__BUF_DMABUF */
	uint32_t region;		/* TPU__BUF_KMOD, TPU__BUF_DMABUF: handle on ep */
};

/* A buffer wrapping memory already mapped: a region received by DONATE. */
tpu_status tpu__buffer_wrap_kmod(struct tpu__ep_ref *ep, uint32_t region, void *data, size_t len,
				 struct tpu_buffer **out);
tpu_status tpu__buffer_alloc_heap(size_t len, struct tpu_buffer **out);
/*
 * A buffer naming dma-buf @fd imported into @ep (a reference taken) with
 * @access; @data is the address the exporter knows its first byte by.
 * @fd stays the caller's.
 */
tpu_status tpu__buffer_import_dmabuf(struct tpu__ep_ref *ep, int fd, unsigned int access,
				     void *data, struct tpu_buffer **out);
/* Unmap a module buffer and free the struct, keeping its region for a DONATE. */
void tpu__buffer_unmap_for_donate(struct tpu_buffer *buf);


#endif /* TPU_CTX_H */
