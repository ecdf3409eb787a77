/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * lib/rdv: the rendezvous, its generic front end (rendezvous.c,
 * rdv_queue.c, rdv_select.c) and the implementations behind it
 * (rdv_inprocess.c, rdv_kmod.c with its registration cache
 * rdv_kmod_reg.c, rdv_cma.c with its shared key table cma_table.c), listed
 * in rdv_impls.c.  Built on lib/ctx.  Not installed.
 *
 * Life of an operation:
 *   1. rendezvous.c validates the call, takes a struct tpu__op (from the
 *      rendezvous's free list in steady state: no allocation), and
 *      queues it behind earlier operations on the same key (per-key FIFO:
 *      only the head RECV of a key is handed to the implementation, so
 *      callbacks per key run in issue order);
 *   2. the implementation's ->send/->recv starts it without blocking;
 *   3. whoever finishes it, on any thread, calls tpu__op_complete(), which
 *      hands the op to the context thread (tpu__ctx_complete); that thread
 *      runs the op's own done.fn, tpu__rdv_op_done(): the user's callback,
 *      then the next queued op of the key starts, and the op goes back to
 *      the free list (tpu__op_recycle).
 *      The fast path: an op whose "callback" only wakes a thread blocked in
 *      recv_wait or send_wait (op->direct) and that completes inside the
 *      front end's call into the implementation (a send meeting a waiting
 *      receive, or the reverse) is finished right there, under the front
 *      end's lock, when nothing else of its key waits to be started or
 *      called back: the blocked thread wakes with no context thread, no
 *      lock of its own and, while it spins, no system call.
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
#ifndef TPU_RDV_H
#define TPU_RDV_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctx/ctx.h"

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

/* Bytes of per-op state an implementation finds in the op itself. */
#define TPU__OP_IMPL_SPACE	128

/* One pending operation. */
struct tpu__op {
	struct tpu__task done;		/* the context's completion queue (tpu__op_complete) */
	struct tpu__op *key_next;	/* the front end's per-key FIFO */
	struct tpu__keyq *keyq;		/* the FIFO it is in */
	enum tpu__op_stage stage;	/* front end only */
	struct tpu_rendezvous *rdv;
	enum tpu__op_kind kind;
	unsigned int flags;		/* TPU_SEND_* */
	uint8_t *key;			/* owned copy, key_cap bytes, kept with the op when recycled */
	size_t key_len;
	size_t key_cap;
	uint64_t key_hash;		/* tpu__rdv_key_hash(), computed once at issue */
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
	bool direct;			/* cb only posts a waiter's word: any thread may call it */
	/*
	 * Room for the implementation's per-op state (op->impl may point
	 * here), so that starting an op allocates nothing.  Not zeroed at
	 * issue (the implementation sets what it uses): writing all of a
	 * recycled op moved two more cache lines between the cores.
	 */
	_Alignas(16) unsigned char impl_space[TPU__OP_IMPL_SPACE];
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
	 * them); impl_state stays for ->release.  Called from a user thread,
	 * or from a callback on the context thread: wait with tpu__ctx_wait().
	 * A thread that entered before the destroy (a cancel, an abort, a
	 * waiter's poll) may still call in meanwhile. */
	void (*destroy)(struct tpu_rendezvous *rdv);
	/* Start an op; never block.  A non-zero return means the op was not
	 * started and tpu__op_complete() must not be called for it. */
	tpu_status (*send)(struct tpu_rendezvous *rdv, struct tpu__op *op);
	tpu_status (*recv)(struct tpu_rendezvous *rdv, struct tpu__op *op);
	/* Cancel this member's pending ops on a key: each completes with
	 * -ECANCELED.  Return the number cancelled, or a negative status. */
	int (*cancel)(struct tpu_rendezvous *rdv, const uint8_t *key, size_t key_len);
	tpu_status (*abort)(struct tpu_rendezvous *rdv, tpu_status status);
	/* Optional: move this member's ops along on the calling thread, which
	 * holds no lock and waits in recv_wait or send_wait (@phase: see
	 * struct tpu__ww_agent); never blocks. */
	void (*progress)(struct tpu_rendezvous *rdv, enum tpu__ww_phase phase);
	/* Optional, with progress: where such a waiter sleeps once it stops
	 * spinning, and how a poster of its word wakes it there (struct
	 * tpu__ww_agent's token and sleep, struct tpu__waitword's kick). */
	uint32_t (*wait_token)(struct tpu_rendezvous *rdv);
	void (*wait_sleep)(struct tpu_rendezvous *rdv, uint32_t token, uint64_t deadline_ns);
	void (*wait_kick)(struct tpu_rendezvous *rdv);
	/* Optional, with progress: a waiter spins at least this long (struct tpu__ww_agent). */
	uint64_t (*spin_ns)(struct tpu_rendezvous *rdv);
	/* Optional, with progress: and at most this long (struct tpu__ww_agent). */
	uint64_t (*spin_max_ns)(struct tpu_rendezvous *rdv);
	/* Optional, with progress: its progress alone posts a waiter (struct tpu__ww_agent). */
	bool (*self_served)(struct tpu_rendezvous *rdv);
	/*
	 * Optional: called by the front end on the thread that issued an op,
	 * once ->send or ->recv returned and rdv->lock is released, so that
	 * work the implementation deferred there (tpu__rdv_issuing) can be
	 * done without the lock.  Never blocks.
	 */
	void (*issued)(struct tpu_rendezvous *rdv);
	/*
	 * The last step of a destroy, once ->destroy returned and no thread
	 * is in a front-end call of this rendezvous any more (a waiter whose
	 * op ->destroy completed may still call ->progress until then): frees
	 * impl_state and what those calls use.  Optional (nothing to free).
	 */
	void (*release)(struct tpu_rendezvous *rdv);
	/* The implementation owns pipes: the context closes it before them. */
	bool owns_pipes;
};

extern const struct tpu__rdv_ops tpu__rdv_inprocess;
extern const struct tpu__rdv_ops tpu__rdv_kmod;
extern const struct tpu__rdv_ops tpu__rdv_cma;

/*
 * The implementations built into this library (rdv_impls.c): cma is listed
 * always built now.  NULL for an unknown one.
 */
const struct tpu__rdv_ops *tpu__rdv_impl_ops(enum tpu_rdv_impl impl);

#define TPU__RDV_USER_LINES	4

struct tpu_rendezvous {
	uint32_t magic;			/* TPU__MAGIC_RDV; destroy claims it (rdv_claim) */
	struct tpu_context *ctx;
	const struct tpu__rdv_ops *ops;
	void *impl_state;
	_Alignas(64) pthread_mutex_t lock;	/* everything below */
	struct tpu__keyq **buckets;	/* per-key FIFOs of ops not yet called back */
	size_t nbuckets;
	size_t nkeys;
	size_t live;			/* ops whose callback has not returned */
	/* Free lists (rdv_queue.c): finished ops and emptied key FIFOs, kept for reuse. */
	struct tpu__free_list op_free;
	struct tpu__free_list keyq_free;
	size_t in_callback;		/* of those, callbacks running now */
	/*
	 * Threads in an issue or a blocking wait (no lock held), counted on
	 * TPU__RDV_USER_LINES cache lines, each thread always on the same one
	 * (rendezvous.c: users_enter, users_leave, users_any): two threads
	 * handing tensors to each other then each write a line of their own,
	 * where one counter crossed between their cores four times a round
	 * trip.
	 */
	struct {
		_Alignas(64) atomic_uint n;
	} users[TPU__RDV_USER_LINES];
	bool closing;			/* destroy began: start nothing more */
	struct tpu__ctx_obj obj;	/* the context's objects, closed by context_destroy */
};

/*
 * Hand a finished op to the context thread; callable from any thread.  A
 * direct op completed inside tpu__rdv_call_impl() may be finished on the
 * spot instead (see above).
 */
void tpu__op_complete(struct tpu__op *op);

/*
 * tpu__op_complete() for a caller that holds no rendezvous or
 * implementation lock (an implementation's own thread): a direct op is
 * finished on the spot whenever its key allows.
 */
void tpu__op_complete_unlocked(struct tpu__op *op);

/*
 * The front end's calls into the implementation's ->send and ->recv, with
 * rdv->lock held: lets tpu__op_complete() know that this thread holds it.
 */
tpu_status tpu__rdv_call_impl(struct tpu_rendezvous *rdv, struct tpu__op *op);
/*
 * In ->send or ->recv: true when called from tpu__rdv_call_impl(), that is
 * on the thread that issued the op, before the issuing call returned (a
 * direct op's waiter is then this very thread, and ops->issued will be
 * called here right after); false when a queued RECV is started later, on
 * whichever thread finished the one before it.
 */
bool tpu__rdv_issuing(const struct tpu_rendezvous *rdv);

/* The hash every key table of the rendezvous uses (word-wise), as op->key_hash. */
uint64_t tpu__rdv_key_hash(const uint8_t *key, size_t len);

/* Front end, on the context thread: the op's result is in; call back in key order. */
void tpu__rdv_op_done(struct tpu__op *op);

/*
 * For implementations built in a layer above (the remote rendezvous): a
 * rendezvous with @ops and @impl_state (ops->create is not called), and a
 * check that a public handle is one of them.
 */
tpu_status tpu__rdv_create_with(struct tpu_context *ctx, const struct tpu__rdv_ops *ops,
				void *impl_state, struct tpu_rendezvous **out);
bool tpu__rdv_is(const struct tpu_rendezvous *rdv, const struct tpu__rdv_ops *ops);
/*
 * @rdv belongs to a library object that destroys it (a pipe's kmod link):
 * it leaves its context's list of objects left open, so that a context
 * destroy on the user's thread cannot destroy it while the owner, on the
 * context's thread, does too.  The owner destroys it with
 * tpu__rdv_destroy_owned().
 */
void tpu__rdv_owned(struct tpu_rendezvous *rdv);
/*
 * The owner's destroy of such a rendezvous: also while its context is
 * being destroyed (from the context's thread, which drains its tasks
 * before it stops), when tpu_rendezvous_destroy() refuses.
 */
void tpu__rdv_destroy_owned(struct tpu_rendezvous *rdv);
/*
 * With rdv->lock held (in ->cancel): how many of this member's ops on @key
 * the implementation has and has not finished yet.
 */
size_t tpu__rdv_started(struct tpu_rendezvous *rdv, const uint8_t *key, size_t key_len);

/*
 * The endpoint a kmod rendezvous's commands go through (rdv_kmod.c): a
 * region that its SENDs and RECVs name (TPU__BUF_DMABUF) must live there.
 * NULL for a rendezvous of another implementation.
 */
struct tpu__ep_ref *tpu__rdv_kmod_endpoint(struct tpu_rendezvous *rdv);

/*
 * rdv_device.c: a send or receive of CUDA memory, through a host buffer
 * of the rendezvous's context; @wait picks the blocking form (the
 * callback is then unused, and *wait_len gets the length).
 */
tpu_status tpu__rdv_device_send(struct tpu_rendezvous *rdv, const void *key, size_t key_len,
				const struct tpu_tensor *t, unsigned int flags, tpu_send_cb done,
				void *arg, uint64_t wait_timeout_ns, bool wait);
tpu_status tpu__rdv_device_recv(struct tpu_rendezvous *rdv, const void *key, size_t key_len,
				const struct tpu_tensor *dst, uint64_t timeout_ns,
				tpu_recv_cb done, void *arg, size_t *wait_len, bool wait);

/*
 * What every public call checks first: NULL or not a rendezvous (-EINVAL),
 * destroyed (TPU_E_DESTROYED), or in a child forked since (TPU_E_FORKED).
 */
tpu_status tpu__rdv_check(const struct tpu_rendezvous *rdv);

/*
 * Around a call that reads the implementation (rdv->ops, rdv->impl_state),
 * after tpu__rdv_check(): counted among the rendezvous's users, then its
 * magic read again.  A destroy that claimed it in between either shows
 * here (TPU_E_DESTROYED, nothing to leave) or waits for this thread's
 * tpu__rdv_leave() before the implementation's state goes.
 */
tpu_status tpu__rdv_enter(struct tpu_rendezvous *rdv);
void tpu__rdv_leave(struct tpu_rendezvous *rdv);

#endif /* TPU_RDV_H */
