/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Inside the rendezvous: the context (context.c, ctx_timer.c), buffers
 * (buffer.c), the generic front end (rendezvous.c, rdv_queue.c,
 * rdv_select.c) and the implementations behind it (rdv_inprocess.c,
 * rdv_kmod.c, rdv_cma.c).  Not installed.
 *
 * Life of an operation:
 *   1. rendezvous.c validates the call, allocates a struct tpu__op, and
 *      queues it behind earlier operations on the same key (per-key FIFO:
 *      only the head RECV of a key is handed to the implementation, so
 *      callbacks per key run in issue order);
 *   2. the implementation's ->send/->recv starts it without blocking;
 *   3. whoever finishes it, on any thread, calls tpu__op_complete(), which
 *      hands the op to the context thread; that thread runs the user's
 *      callback, lets the next queued op of the key start, and frees it.
 *
 * Locks, outermost first: tpu_rendezvous.lock (the front end holds it while
 * it calls ->send, ->recv and ->cancel), then an implementation's own
 * locks, then the context's (taken by tpu__ctx_sqe and tpu__op_complete).
 * An implementation therefore never calls the front end with its own lock
 * held, except tpu__op_complete(), which takes no rendezvous lock.
 *
 * Telling implementations apart from a shared descriptor (join): a
 * tensorpipe domain descriptor reads "anon_inode:[tensorpipe-domain]" in
 * /proc/self/fd; the cma implementation shares a memfd whose first 8 bytes
 * are the magic TPU__CMA_MAGIC.  Anything else is refused with -EINVAL.
 */
#ifndef TPU_RDV_INTERNAL_H
#define TPU_RDV_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

struct io_uring;
struct io_uring_sqe;
struct io_uring_cqe;

/* First bytes of the memfd the cma implementation shares (see above). */
#define TPU__CMA_MAGIC		"TPUCMA01"
#define TPU__CMA_MAGIC_LEN	8

/* Longest key any implementation accepts (the module may accept less). */
#define TPU__KEY_MAX		TP_KEY_MAX_ABI

enum tpu__op_kind {
	TPU__OP_SEND,
	TPU__OP_RECV,		/* into op->tensor */
	TPU__OP_RECV_BUFFER,	/* into a new tpu_buffer of at most op->tensor.len */
};

/* Where an op is, as the front end sees it (rdv_queue.c). */
enum tpu__op_stage {
	TPU__STAGE_QUEUED,	/* a RECV behind another RECV of its key */
	TPU__STAGE_STARTED,	/* handed to the implementation, or completing */
	TPU__STAGE_DONE,	/* completed; its callback waits for earlier ops of the key */
};

/* One pending operation. */
struct tpu__op {
	struct tpu__op *next;		/* the context's completion list */
	struct tpu__op *key_next;	/* the front end's per-key FIFO */
	struct tpu__keyq *keyq;		/* the FIFO it is in */
	enum tpu__op_stage stage;	/* front end only */
	struct tpu_rendezvous *rdv;
	enum tpu__op_kind kind;
	unsigned int flags;		/* TPU_SEND_* */
	uint8_t *key;			/* owned copy */
	size_t key_len;
	struct tpu_tensor tensor;
	uint64_t timeout_ns;
	union {
		tpu_send_cb send;
		tpu_recv_cb recv;
		tpu_recv_buffer_cb recv_buffer;
	} cb;
	void *cb_arg;
	/* Results, set by the implementation before tpu__op_complete(). */
	tpu_status status;
	size_t len;
	struct tpu_buffer *out_buffer;	/* TPU__OP_RECV_BUFFER; freed by the front end on error */
	void *impl;			/* the implementation's own state */
};

/*
 * What an implementation provides.
 *
 * Ownership with TPU_SEND_GIVE: once ->send returned 0 the implementation
 * owns op->tensor.buffer and must hand it to the consumer or free it
 * (tpu_buffer_free), whatever the outcome.  When ->send fails the buffer
 * is still the caller's.
 */
struct tpu__rdv_ops {
	enum tpu_rdv_impl impl;
	/* Fill rdv->impl_state for a new rendezvous, or for one joined from @fd. */
	tpu_status (*create)(struct tpu_rendezvous *rdv);
	tpu_status (*join)(struct tpu_rendezvous *rdv, int fd);
	tpu_status (*share)(struct tpu_rendezvous *rdv, int *fd);
	/* Fail every pending op of this member with TPU_E_CLOSED (completing
	 * them), then free impl_state.  Called from a user thread, or from a
	 * callback on the context thread: wait with tpu__ctx_wait(). */
	void (*destroy)(struct tpu_rendezvous *rdv);
	/* Start an op; never block.  A non-zero return means the op was not
	 * started and tpu__op_complete() must not be called for it. */
	tpu_status (*send)(struct tpu_rendezvous *rdv, struct tpu__op *op);
	tpu_status (*recv)(struct tpu_rendezvous *rdv, struct tpu__op *op);
	/* Cancel this member's pending ops on a key: each completes with
	 * -ECANCELED.  Return the number cancelled, or a negative status. */
	int (*cancel)(struct tpu_rendezvous *rdv, const uint8_t *key, size_t key_len);
	tpu_status (*abort)(struct tpu_rendezvous *rdv, tpu_status status);
};

extern const struct tpu__rdv_ops tpu__rdv_inprocess;
extern const struct tpu__rdv_ops tpu__rdv_kmod;
extern const struct tpu__rdv_ops tpu__rdv_cma;

/*
 * The implementations built into this library (rdv_impls.c): cma is listed
 * only when lib/rdv_cma.c was present at build time.  NULL if not built.
 */
const struct tpu__rdv_ops *tpu__rdv_impl_ops(enum tpu_rdv_impl impl);

struct tpu_rendezvous {
	struct tpu_context *ctx;
	const struct tpu__rdv_ops *ops;
	void *impl_state;
	pthread_mutex_t lock;		/* everything below */
	struct tpu__keyq **buckets;	/* per-key FIFOs of ops not yet called back */
	size_t nbuckets;
	size_t nkeys;
	size_t live;			/* ops whose callback has not returned */
	size_t in_callback;		/* of those, callbacks running now */
	bool closing;			/* destroy began: start nothing more */
	struct tpu_rendezvous *ctx_next;	/* the context's list (context.c) */
};

/* Hand a finished op to the context thread; callable from any thread. */
void tpu__op_complete(struct tpu__op *op);

/* Front end, on the context thread: the op's result is in; call back in key order. */
void tpu__rdv_op_done(struct tpu__op *op);

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
/* Run fn(arg) on the context thread and wait for it to return (pipe.c). */
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
};
void tpu__ctx_poller_add(struct tpu_context *ctx, struct tpu__poller *p);
void tpu__ctx_poller_del(struct tpu_context *ctx, struct tpu__poller *p);
/* The eventfd that wakes the context thread; a peer may hold a duplicate. */
int tpu__ctx_wake_fd(const struct tpu_context *ctx);
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
/* Pipes: the context options' transport and channel lists (NULL: all). */
const char *tpu__ctx_transports(const struct tpu_context *ctx);
const char *tpu__ctx_channels(const struct tpu_context *ctx);
/* -EINVAL when a list names an unknown transport or channel (pipe_offer.c). */
tpu_status tpu__pipe_policy_check(const char *transports, const char *channels);

/* A reference-counted endpoint, so that buffers may outlive nothing they need. */
struct tpu__ep_ref;
struct tpu__ep_ref *tpu__ctx_endpoint_ref(struct tpu_context *ctx);
/* A new reference owning @ep (closed with the last put). */
struct tpu__ep_ref *tpu__ep_ref_new(struct tpu_endpoint *ep);
void tpu__ep_ref_hold(struct tpu__ep_ref *ref);
struct tpu_endpoint *tpu__ep_ref_get(struct tpu__ep_ref *ref);
void tpu__ep_ref_put(struct tpu__ep_ref *ref);

/*
 * Pipes and listeners the program may leave open: tpu_context_destroy()
 * calls close for each (which must unlink it with tpu__ctx_del_obj) before
 * it stops the thread.
 */
struct tpu__ctx_obj {
	struct tpu__ctx_obj *next;
	void (*close)(struct tpu__ctx_obj *o);
};
void tpu__ctx_add_obj(struct tpu_context *ctx, struct tpu__ctx_obj *o);
void tpu__ctx_del_obj(struct tpu_context *ctx, struct tpu__ctx_obj *o);

/* Register/unregister a rendezvous with its context (context_destroy frees leftovers). */
void tpu__ctx_add_rdv(struct tpu_context *ctx, struct tpu_rendezvous *rdv);
void tpu__ctx_del_rdv(struct tpu_context *ctx, struct tpu_rendezvous *rdv);

/* Buffers (buffer.c). */
enum tpu__buffer_kind {
	TPU__BUF_KMOD,		/* a module region mapped from the endpoint */
	TPU__BUF_MEMFD,		/* a memfd mapped MAP_SHARED */
	TPU__BUF_HEAP,		/* malloc, for copies that never leave the process */
};

struct tpu_buffer {
	void *data;
	size_t len;
	enum tpu__buffer_kind kind;
	uint64_t id;			/* unique per process: a cache key that is never reused */
	int memfd;			/* TPU__BUF_MEMFD */
	struct tpu__ep_ref *ep;		/* TPU__BUF_KMOD */
	uint32_t region;		/* TPU__BUF_KMOD: handle on ep */
};

/* A buffer wrapping memory already mapped: a region received by DONATE. */
tpu_status tpu__buffer_wrap_kmod(struct tpu__ep_ref *ep, uint32_t region, void *data, size_t len,
				 struct tpu_buffer **out);
tpu_status tpu__buffer_alloc_heap(size_t len, struct tpu_buffer **out);
/* Unmap a module buffer and free the struct, keeping its region for a DONATE. */
void tpu__buffer_unmap_for_donate(struct tpu_buffer *buf);

/* Debug log (TPU_LOG=debug), one line, on stderr. */
void tpu__log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
bool tpu__log_debug_enabled(void);

#endif /* TPU_RDV_INTERNAL_H */
