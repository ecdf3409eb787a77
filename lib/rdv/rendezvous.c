// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The rendezvous API: argument checks, the per-key FIFOs (rdv_queue.c) in
 * front of whichever implementation was chosen (rdv_select.c), the blocking
 * receive, and leaving a rendezvous with every callback called.
 */
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "rdv_queue.h"

TPU_API const char *tpu_rdv_impl_name(enum tpu_rdv_impl impl)
{
	switch (impl) {
	case TPU_RDV_AUTO:
		return "auto";
	case TPU_RDV_INPROCESS:
		return "inprocess";
	case TPU_RDV_KMOD:
		return "kmod";
	case TPU_RDV_CMA:
		return "cma";
	case TPU_RDV_REMOTE:
		return "remote";
	}
	return "unknown";
}

/* At every public entry: NULL, destroyed (TPU_E_DESTROYED), or in a forked child. */
tpu_status tpu__rdv_check(const struct tpu_rendezvous *rdv)
{
	tpu_status st = tpu__magic_check(rdv, rdv ? &rdv->magic : NULL, TPU__MAGIC_RDV);

	return st ? st : tpu__ctx_check(rdv->ctx);
}

#define RDV_CHECK(rdv)                                  \
	do {                                            \
		tpu_status check_ = tpu__rdv_check(rdv);     \
		if (check_)                             \
			return check_;                  \
	} while (0)

/*
 * rdv->users: this thread's line, picked at its first call (threads that
 * start one after the other get different lines), and the sum.
 */
static _Thread_local unsigned int user_line = UINT_MAX;
static atomic_uint next_user_line;

static atomic_uint *users_mine(struct tpu_rendezvous *rdv)
{
	if (user_line == UINT_MAX)
		user_line = atomic_fetch_add_explicit(&next_user_line, 1, memory_order_relaxed) %
			    TPU__RDV_USER_LINES;
	return &rdv->users[user_line].n;
}

static void users_enter(struct tpu_rendezvous *rdv)
{
	atomic_fetch_add(users_mine(rdv), 1);
}

static void users_leave(struct tpu_rendezvous *rdv)
{
	atomic_fetch_sub(users_mine(rdv), 1);
}

/*
 * Sequentially consistent against rdv_claim() and users_any(): a thread
 * that finds the magic live was counted before destroy looked for users.
 */
tpu_status tpu__rdv_enter(struct tpu_rendezvous *rdv)
{
	users_enter(rdv);
	if (__atomic_load_n(&rdv->magic, __ATOMIC_SEQ_CST) == TPU__MAGIC_RDV)
		return 0;
	users_leave(rdv);
	return TPU_E_DESTROYED;
}

void tpu__rdv_leave(struct tpu_rendezvous *rdv)
{
	users_leave(rdv);
}

/* A thread inside: each line is nonzero while a thread of its own is. */
static bool users_any(struct tpu_rendezvous *rdv)
{
	unsigned int i, n = 0;

	for (i = 0; i < TPU__RDV_USER_LINES; i++)
		n |= atomic_load(&rdv->users[i].n);
	return n != 0;
}

static struct tpu_rendezvous *rdv_new(struct tpu_context *ctx)
{
	/* Its lock and its counters of users each start a cache line (rdv.h). */
	struct tpu_rendezvous *rdv = aligned_alloc(_Alignof(struct tpu_rendezvous),
						   sizeof(*rdv));

	if (!rdv)
		return NULL;
	memset(rdv, 0, sizeof(*rdv));
	rdv->magic = TPU__MAGIC_RDV;
	rdv->ctx = ctx;
	pthread_mutex_init(&rdv->lock, NULL);
	tpu__rdv_free_lists_init(rdv);
	return rdv;
}

static void rdv_obj_close(struct tpu__ctx_obj *o)
{
	tpu_rendezvous_destroy(tpu__container_of(o, struct tpu_rendezvous, obj));
}

static tpu_status rdv_publish(struct tpu_rendezvous *rdv, tpu_status st,
			      struct tpu_rendezvous **out)
{
	if (st) {
		tpu__rdv_free(rdv);
		return st;
	}
	/* One that owns pipes closes before them, so that it fails its own ops. */
	rdv->obj = (struct tpu__ctx_obj){ .close = rdv_obj_close,
					  .pass = rdv->ops->owns_pipes ? TPU__CTX_PASS_OWNER :
									 TPU__CTX_PASS_RDV,
					  .what = "a rendezvous" };
	tpu__ctx_add_obj(rdv->ctx, &rdv->obj);
	*out = rdv;
	return 0;
}

TPU_API tpu_status tpu_rendezvous_create(struct tpu_context *ctx, enum tpu_rdv_impl impl,
					 struct tpu_rendezvous **out)
{
	struct tpu_rendezvous *rdv;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!ctx || impl < TPU_RDV_AUTO || impl > TPU_RDV_CMA)
		return -EINVAL;
	if (tpu__ctx_check(ctx))
		return tpu__ctx_check(ctx);
	rdv = rdv_new(ctx);
	if (!rdv)
		return -ENOMEM;
	return rdv_publish(rdv, tpu__rdv_select(rdv, impl), out);
}

tpu_status tpu__rdv_create_with(struct tpu_context *ctx, const struct tpu__rdv_ops *ops,
				void *impl_state, struct tpu_rendezvous **out)
{
	struct tpu_rendezvous *rdv = rdv_new(ctx);

	*out = NULL;
	if (!rdv)
		return -ENOMEM;
	rdv->ops = ops;
	rdv->impl_state = impl_state;
	return rdv_publish(rdv, 0, out);
}

void tpu__rdv_owned(struct tpu_rendezvous *rdv)
{
	tpu__ctx_del_obj(rdv->ctx, &rdv->obj);
}

bool tpu__rdv_is(const struct tpu_rendezvous *rdv, const struct tpu__rdv_ops *ops)
{
	return !tpu__rdv_check(rdv) && rdv->ops == ops;
}

TPU_API tpu_status tpu_rendezvous_join(struct tpu_context *ctx, int fd,
				       struct tpu_rendezvous **out)
{
	struct tpu_rendezvous *rdv;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!ctx)
		return -EINVAL;
	if (tpu__ctx_check(ctx))
		return tpu__ctx_check(ctx);
	if (fd < 0)
		return -EBADF;
	rdv = rdv_new(ctx);
	if (!rdv)
		return -ENOMEM;
	return rdv_publish(rdv, tpu__rdv_select_join(rdv, fd), out);
}

TPU_API tpu_status tpu_rendezvous_share(struct tpu_rendezvous *rdv, int *fd)
{
	tpu_status st;

	RDV_CHECK(rdv);
	if (!fd)
		return -EINVAL;
	*fd = -1;
	st = tpu__rdv_enter(rdv);
	if (st)
		return st;
	st = rdv->ops->share(rdv, fd);
	tpu__rdv_leave(rdv);
	return st;
}

TPU_API enum tpu_rdv_impl tpu_rendezvous_impl(const struct tpu_rendezvous *rdv)
{
	const struct tpu__rdv_ops *ops;

	if (tpu__rdv_check(rdv))
		return TPU_RDV_AUTO;
	/* NULL once a destroy running meanwhile has released it. */
	ops = __atomic_load_n(&rdv->ops, __ATOMIC_ACQUIRE);
	return ops ? ops->impl : TPU_RDV_AUTO;
}

struct idle_wait {
	struct tpu_rendezvous *rdv;
	bool on_ctx_thread;		/* the destroy runs on the context's thread */
};

static bool rdv_idle(void *arg)
{
	const struct idle_wait *w = arg;
	struct tpu_rendezvous *rdv = w->rdv;
	bool idle;

	pthread_mutex_lock(&rdv->lock);
	/*
	 * Every op called back.  On the context's thread (a destroy from a
	 * callback) the callbacks being delivered right now are on this
	 * stack and are not waited for.  From any other thread they are: one
	 * still running may call into the implementation (a blocked
	 * waiter's wake-up), whose state ->release frees.
	 */
	idle = rdv->live == rdv->in_callback && (w->on_ctx_thread || !rdv->in_callback);
	pthread_mutex_unlock(&rdv->lock);
	return idle;
}

/* Destroy @rdv, whose magic this thread turned from live to dead. */
static void rdv_destroy(struct tpu_rendezvous *rdv)
{
	struct idle_wait w = { rdv, tpu__ctx_on_thread(rdv->ctx) };
	bool zombie;

	tpu__ctx_del_obj(rdv->ctx, &rdv->obj);
	pthread_mutex_lock(&rdv->lock);
	rdv->closing = true;
	if (rdv->live)
		tpu__keyq_log_pending(rdv, "destroyed with");
	tpu__keyq_fail_queued(rdv, NULL, TPU_E_CLOSED);
	pthread_mutex_unlock(&rdv->lock);
	rdv->ops->destroy(rdv);
	tpu__ctx_wait(rdv->ctx, rdv_idle, &w);
	/*
	 * Every op is called back; a thread whose blocking wait ended may
	 * still be on its way out of the front end (its last ->progress).
	 */
	while (users_any(rdv))
		sched_yield();
	if (rdv->ops->release)
		rdv->ops->release(rdv);
	pthread_mutex_lock(&rdv->lock);
	/* ops == NULL marks it dead: the last callback running frees it. */
	__atomic_store_n(&rdv->ops, NULL, __ATOMIC_RELEASE);
	zombie = rdv->in_callback > 0;
	pthread_mutex_unlock(&rdv->lock);
	if (!zombie)
		tpu__rdv_free(rdv);
}

/* Two destroys at once (a caller's bug): one wins, the other returns. */
static bool rdv_claim(struct tpu_rendezvous *rdv)
{
	uint32_t live = TPU__MAGIC_RDV;

	if (__atomic_compare_exchange_n(&rdv->magic, &live, TPU__MAGIC_DEAD, false,
					__ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		return true;
	tpu__log_debug("tpu_rendezvous_destroy(%p): destroyed by another thread; ignored",
		       (void *)rdv);
	return false;
}

TPU_API void tpu_rendezvous_destroy(struct tpu_rendezvous *rdv)
{
	tpu_status st;

	if (!rdv)
		return;
	st = tpu__rdv_check(rdv);
	if (st) {
		/* Twice destroyed, or in a forked child (the parent's context would hang). */
		tpu__log_debug("tpu_rendezvous_destroy(%p): %s; ignored", (void *)rdv,
			       tpu_strerror(st));
		return;
	}
	if (rdv_claim(rdv))
		rdv_destroy(rdv);
}

void tpu__rdv_destroy_owned(struct tpu_rendezvous *rdv)
{
	/* Its context may be on its way out already: its thread still runs this. */
	if (rdv && !tpu__magic_check(rdv, &rdv->magic, TPU__MAGIC_RDV) && rdv_claim(rdv))
		rdv_destroy(rdv);
}

/* ---- operations ---------------------------------------------------- */

static tpu_status check_key(const void *key, size_t key_len)
{
	if (!key || key_len == 0)
		return -EINVAL;
	if (key_len > TPU__KEY_MAX)
		return -ENAMETOOLONG;
	return 0;
}

static tpu_status check_tensor(const struct tpu_tensor *t)
{
	const uint8_t *b, *d;

	if (!t || (!t->data && t->len) || !tpu__reserved_zero(t->reserved))
		return -EINVAL;
	/* Device memory is rdv_device.c's; here, host memory only. */
	if (t->device.type != TPU_DEVICE_CPU || t->device.index || t->stream)
		return -EINVAL;
	if (!t->buffer)
		return 0;
	/* The tensor must lie inside the buffer it names. */
	b = t->buffer->data;
	d = t->data;
	if (d < b || d > b + t->buffer->len || t->len > t->buffer->len - (size_t)(d - b))
		return -EINVAL;
	return 0;
}

/*
 * Take an op of the rendezvous (the free list's, in steady state) for
 * @want, with a copy of its key; with rdv->lock held.  NULL without memory.
 */
static struct tpu__op *op_take(struct tpu_rendezvous *rdv, const struct tpu__op *want,
			       const void *key, size_t key_len, uint64_t hash)
{
	struct tpu__op *op = tpu__op_get(rdv, key_len);
	uint8_t *buf;
	size_t cap;

	if (!op)
		return NULL;
	buf = op->key;
	cap = op->key_cap;
	/* All but impl_space, which the implementation sets up itself. */
	memcpy(op, want, offsetof(struct tpu__op, impl_space));
	op->key = buf;
	op->key_cap = cap;
	memcpy(op->key, key, key_len);
	op->key_len = key_len;
	op->key_hash = hash;
	op->rdv = rdv;
	return op;
}

/*
 * Issue what @want describes (its kind, tensor, callback and flags; the
 * rest zero) on @key: queue it behind its key and start it unless an older
 * RECV is still out.
 */
static tpu_status op_issue(struct tpu_rendezvous *rdv, const struct tpu__op *want,
			   const void *key, size_t key_len)
{
	const struct tpu__rdv_ops *ops = NULL;
	uint64_t hash = tpu__rdv_key_hash(key, key_len);
	struct tpu__op *op = NULL;
	tpu_status st = tpu__rdv_enter(rdv);

	if (st)
		return st;
	pthread_mutex_lock(&rdv->lock);
	if (rdv->closing) {
		st = TPU_E_CLOSED;
		goto out;
	}
	op = op_take(rdv, want, key, key_len, hash);
	if (op)
		op->keyq = tpu__keyq_find_hashed(rdv, op->key, key_len, hash, true);
	if (!op || !op->keyq) {
		st = -ENOMEM;
		goto out;
	}
	tpu__keyq_append(op->keyq, op);
	/* Counted first: the op may be finished, and freed, within the call. */
	rdv->live++;
	if (op->kind != TPU__OP_SEND && tpu__keyq_recv_busy(op->keyq, op)) {
		op->stage = TPU__STAGE_QUEUED;
	} else {
		op->stage = TPU__STAGE_STARTED;
		st = tpu__rdv_call_impl(rdv, op);
		if (st) {
			rdv->live--;
			tpu__keyq_remove(rdv, op);
		}
		ops = rdv->ops;
	}
out:
	if (st && op)
		tpu__op_recycle(rdv, op);
	pthread_mutex_unlock(&rdv->lock);
	if (ops && ops->issued)
		ops->issued(rdv);
	users_leave(rdv);
	return st;
}

static tpu_status send_issue(struct tpu_rendezvous *rdv, const void *key, size_t key_len,
			     const struct tpu_tensor *tensor, unsigned int flags,
			     tpu_send_cb done, void *arg, bool direct)
{
	struct tpu__op op;
	tpu_status st;

	if (flags & ~TPU_SEND_GIVE)
		return -EINVAL;
	st = check_key(key, key_len);
	if (!st)
		st = check_tensor(tensor);
	if (st)
		return st;
	/* GIVE hands over a whole buffer, so the tensor must start it. */
	if ((flags & TPU_SEND_GIVE) &&
	    (!tensor->buffer || tensor->data != tensor->buffer->data))
		return -EINVAL;
	op = (struct tpu__op){
		.kind = TPU__OP_SEND,
		.flags = flags,
		.tensor = *tensor,
		.cb.send = done,
		.cb_arg = arg,
		/* Without a callback there is nothing to call: any thread may finish it. */
		.direct = direct || !done,
	};
	st = op_issue(rdv, &op, key, key_len);
	/*
	 * A producer we owe a wake-up (waitword.h) finds our answer posted
	 * now.  Not after a receive: the producer woken then would find
	 * nothing yet to take, and sleep again.
	 */
	tpu__waitword_flush();
	return st;
}

TPU_API tpu_status tpu_rendezvous_send(struct tpu_rendezvous *rdv, const void *key, size_t key_len,
				       const struct tpu_tensor *tensor, unsigned int flags,
				       tpu_send_cb done, void *arg)
{
	RDV_CHECK(rdv);
	if (tensor && tensor->device.type != TPU_DEVICE_CPU)
		return tpu__rdv_device_send(rdv, key, key_len, tensor, flags, done, arg, 0, false);
	return send_issue(rdv, key, key_len, tensor, flags, done, arg, false);
}

static tpu_status recv_issue(struct tpu_rendezvous *rdv, const void *key, size_t key_len,
			     const struct tpu_tensor *dst, uint64_t timeout_ns,
			     tpu_recv_cb done, void *arg, bool direct)
{
	struct tpu__op op;
	tpu_status st;

	if (!done)
		return -EINVAL;
	st = check_key(key, key_len);
	if (!st)
		st = check_tensor(dst);
	if (st)
		return st;
	op = (struct tpu__op){
		.kind = TPU__OP_RECV,
		.tensor = *dst,
		.timeout_ns = timeout_ns,
		.cb.recv = done,
		.cb_arg = arg,
		.direct = direct,
	};
	st = op_issue(rdv, &op, key, key_len);
	/*
	 * An asynchronous receive returns to a caller that may not come back
	 * soon: a producer whose tensor it took must not wait for us.  A
	 * blocking one that took its tensor at once is about to answer.
	 */
	if (!direct)
		tpu__waitword_flush();
	return st;
}

TPU_API tpu_status tpu_rendezvous_recv(struct tpu_rendezvous *rdv, const void *key, size_t key_len,
				       const struct tpu_tensor *dst, uint64_t timeout_ns,
				       tpu_recv_cb done, void *arg)
{
	RDV_CHECK(rdv);
	if (dst && dst->device.type != TPU_DEVICE_CPU)
		return tpu__rdv_device_recv(rdv, key, key_len, dst, timeout_ns, done, arg, NULL,
					    false);
	return recv_issue(rdv, key, key_len, dst, timeout_ns, done, arg, false);
}

TPU_API tpu_status tpu_rendezvous_recv_buffer(struct tpu_rendezvous *rdv, const void *key,
					      size_t key_len, size_t max_len, uint64_t timeout_ns,
					      tpu_recv_buffer_cb done, void *arg)
{
	struct tpu__op op;
	tpu_status st;

	RDV_CHECK(rdv);
	if (!done || max_len > (size_t)INT64_MAX)
		return -EINVAL;
	st = check_key(key, key_len);
	if (st)
		return st;
	op = (struct tpu__op){
		.kind = TPU__OP_RECV_BUFFER,
		.tensor.len = max_len,
		.timeout_ns = timeout_ns,
		.cb.recv_buffer = done,
		.cb_arg = arg,
	};
	st = op_issue(rdv, &op, key, key_len);
	tpu__waitword_flush();	/* as an asynchronous recv_issue() */
	return st;
}

TPU_API tpu_status tpu_rendezvous_cancel(struct tpu_rendezvous *rdv, const void *key,
					 size_t key_len)
{
	struct tpu__keyq *kq;
	size_t queued;
	int started;
	tpu_status st;

	RDV_CHECK(rdv);
	st = check_key(key, key_len);
	if (!st)
		st = tpu__rdv_enter(rdv);
	if (st)
		return st;
	pthread_mutex_lock(&rdv->lock);
	kq = tpu__keyq_find(rdv, key, key_len, false);
	if (!kq) {
		pthread_mutex_unlock(&rdv->lock);
		tpu__rdv_leave(rdv);
		return -ENOENT;
	}
	/* The queued ones first, so that the cancelled head starts none of them. */
	queued = tpu__keyq_fail_queued(rdv, kq, -ECANCELED);
	started = rdv->ops->cancel(rdv, key, key_len);
	pthread_mutex_unlock(&rdv->lock);
	tpu__rdv_leave(rdv);
	if (started < 0 && started != -ENOENT)
		return started;
	return queued || started > 0 ? 0 : -ENOENT;
}

TPU_API tpu_status tpu_rendezvous_abort(struct tpu_rendezvous *rdv, tpu_status status)
{
	tpu_status st;

	RDV_CHECK(rdv);
	if (status >= 0 || status < -EHWPOISON)
		return -EINVAL;
	st = tpu__rdv_enter(rdv);
	if (st)
		return st;
	st = rdv->ops->abort(rdv, status);
	tpu__rdv_leave(rdv);
	return st;
}

/* ---- blocking receive and send ------------------------------------ */

/*
 * One blocked caller: the op's callback stores the result and posts the
 * word (waitword.c), and nothing else, so it may run on any thread, even
 * under the front end's lock: the op is marked direct.
 */
struct waiter {
	struct tpu__waitword word;
	tpu_status status;
	size_t len;
};

static void recv_woken(void *arg, tpu_status status, size_t len)
{
	struct waiter *w = arg;

	w->status = status;
	w->len = len;
	tpu__waitword_post(&w->word);	/* last: the waiter may return at once */
}

static void send_woken(void *arg, tpu_status status)
{
	recv_woken(arg, status, 0);
}

/*
 * Wait for @w until @deadline_ns (0: for ever); if it passes, cancel the
 * key (the implementation then completes the op, with -ECANCELED or with
 * the result that beat the cancel) and wait for that.  Returns true when
 * the time ran out and the op was cancelled.
 */
static void agent_poll(void *arg, enum tpu__ww_phase phase)
{
	struct tpu_rendezvous *rdv = arg;

	rdv->ops->progress(rdv, phase);
}

static uint32_t agent_token(void *arg)
{
	struct tpu_rendezvous *rdv = arg;

	return rdv->ops->wait_token(rdv);
}

static void agent_sleep(void *arg, uint32_t token, uint64_t deadline_ns)
{
	struct tpu_rendezvous *rdv = arg;

	rdv->ops->wait_sleep(rdv, token, deadline_ns);
}

static uint64_t agent_spin_ns(void *arg)
{
	struct tpu_rendezvous *rdv = arg;

	return rdv->ops->spin_ns(rdv);
}

static uint64_t agent_spin_max_ns(void *arg)
{
	struct tpu_rendezvous *rdv = arg;

	return rdv->ops->spin_max_ns(rdv);
}

static bool agent_self_served(void *arg)
{
	struct tpu_rendezvous *rdv = arg;

	return rdv->ops->self_served(rdv);
}

static void agent_kick(void *arg)
{
	struct tpu_rendezvous *rdv = arg;

	rdv->ops->wait_kick(rdv);
}

/* A waiter's word, before its op is issued: the kick must be there first. */
static void waiter_init(struct tpu_rendezvous *rdv, struct waiter *w)
{
	*w = (struct waiter){ .word = TPU__WAITWORD_INIT };
	if (rdv->ops->wait_sleep) {
		w->word.kick = agent_kick;
		w->word.kick_arg = rdv;
	}
}

static bool wait_or_cancel(struct tpu_rendezvous *rdv, const void *key, size_t key_len,
			   struct waiter *w, uint64_t deadline_ns)
{
	const struct tpu__ww_agent agent = {
		.poll = agent_poll,
		.token = rdv->ops->wait_sleep ? agent_token : NULL,
		.sleep = rdv->ops->wait_sleep ? agent_sleep : NULL,
		.spin_ns = rdv->ops->spin_ns ? agent_spin_ns : NULL,
		.spin_max_ns = rdv->ops->spin_max_ns ? agent_spin_max_ns : NULL,
		.self_served = rdv->ops->self_served ? agent_self_served : NULL,
		.arg = rdv,
	};

	if (tpu__waitword_wait_with(&w->word, deadline_ns, rdv->ops->progress ? &agent : NULL))
		return false;
	tpu_rendezvous_cancel(rdv, key, key_len);
	/*
	 * With the agent again: the op's end may still be the waiter's own
	 * work to collect (a kmod SEND's completion, read by its waiter).
	 */
	tpu__waitword_wait_with(&w->word, 0, rdv->ops->progress ? &agent : NULL);
	return true;
}

TPU_API tpu_status tpu_rendezvous_recv_wait(struct tpu_rendezvous *rdv, const void *key,
					    size_t key_len, const struct tpu_tensor *dst,
					    uint64_t timeout_ns, size_t *len)
{
	uint64_t deadline = tpu__deadline_ns(timeout_ns);
	struct waiter w;
	tpu_status st;

	RDV_CHECK(rdv);
	if (dst && dst->device.type != TPU_DEVICE_CPU)
		return tpu__rdv_device_recv(rdv, key, key_len, dst, timeout_ns, NULL, NULL, len,
					    true);
	/* The callback that would wake us may run on this very thread. */
	if (tpu__ctx_on_thread(rdv->ctx))
		return -EDEADLK;
	st = tpu__rdv_enter(rdv);
	if (st)
		return st;
	waiter_init(rdv, &w);
	/*
	 * The deadline is ours, not the implementation's: a timer per receive
	 * would cost the context's ring two submissions on the fast path.
	 */
	st = recv_issue(rdv, key, key_len, dst, 0, recv_woken, &w, true);
	if (st) {
		users_leave(rdv);
		return st;
	}
	if (wait_or_cancel(rdv, key, key_len, &w, deadline) && w.status == -ECANCELED) {
		w.status = -ETIMEDOUT;
		tpu__rdv_log_timeout(rdv, key, key_len);
	}
	users_leave(rdv);
	if (len)
		*len = w.len;
	return w.status;
}

TPU_API tpu_status tpu_rendezvous_send_wait(struct tpu_rendezvous *rdv, const void *key,
					    size_t key_len, const struct tpu_tensor *tensor,
					    unsigned int flags, uint64_t timeout_ns)
{
	uint64_t deadline = tpu__deadline_ns(timeout_ns);
	struct waiter w;
	tpu_status st;

	RDV_CHECK(rdv);
	if (tensor && tensor->device.type != TPU_DEVICE_CPU)
		return tpu__rdv_device_send(rdv, key, key_len, tensor, flags, NULL, NULL, timeout_ns,
					    true);
	if (tpu__ctx_on_thread(rdv->ctx))
		return -EDEADLK;
	st = tpu__rdv_enter(rdv);
	if (st)
		return st;
	waiter_init(rdv, &w);
	/*
	 * Between threads of one process bound to one core, the consumer that
	 * took the tensor wakes us when it next sleeps, having posted its
	 * answer by then (waitword.h); the other implementations' consumers
	 * are other processes, or their posts come from the context's thread.
	 */
	w.word.late_ok = rdv->ops->impl == TPU_RDV_INPROCESS;
	st = send_issue(rdv, key, key_len, tensor, flags, send_woken, &w, true);
	if (st) {
		users_leave(rdv);
		return st;
	}
	/* Nobody took it in time: withdrawn, but the source is in use until the callback. */
	if (wait_or_cancel(rdv, key, key_len, &w, deadline) && w.status == -ECANCELED)
		w.status = -ETIMEDOUT;
	users_leave(rdv);
	return w.status;
}
