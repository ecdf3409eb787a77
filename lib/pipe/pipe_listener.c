// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Listeners: one transport listener per URL, and the pipes being set up on
 * them.  A pipe is handed to the user once it is set up (negotiated, and
 * moved to its final transport); until then the listener owns it.
 *
 * Fields marked "any thread" are read by user calls; everything else
 * belongs to the context thread.
 *
 * A connection in set-up has not proven anything yet, so what it can hold
 * is bounded: it must finish its set-up (HELLO, the JOINs, the channel's
 * own set-up) within TPU_SETUP_TIMEOUT_MS of its accept, and at most
 * TPU_SETUP_MAX of them are in set-up at once per listener.  Past that the
 * oldest is dropped, not the newest, once it had its grace
 * (tpu__setup_grace_ns): a legitimate peer finishes in milliseconds, so a
 * flood of silent connections pushes out its own kind rather than locking
 * everyone out until the deadline.  While every one in set-up is younger
 * than that (a burst of real peers) the newcomer is refused instead.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipe_internal.h"

#define LISTENER_MAX_URLS	8
/* Set-up pipes nobody accepted yet; beyond this new ones are closed. */
#define LISTENER_BACKLOG	128

struct tpu_listener {
	uint32_t magic;			/* TPU__MAGIC_LISTENER; poisoned when freed */
	struct tpu_context *ctx;
	struct tpu__ctx_obj obj;
	struct tpu__pipe_policy policy;
	atomic_bool closed;		/* any thread: tpu_listener_close() was called */
	atomic_bool accept_armed;	/* any thread: an accept waits for a pipe */
	/*
	 * Any thread: accept calls in the task queue, and the FREED bit once
	 * close_run() freed the listener (call_gate.h); a call counted in
	 * before runs first (and ends with TPU_E_CLOSED).
	 */
	atomic_uint queued;
	bool shut;			/* ctx thread: close_run() ran */

	unsigned int n;			/* immutable after create: any thread */
	struct tpu__xlistener *xl[LISTENER_MAX_URLS];
	char urls[LISTENER_MAX_URLS][TPU__XPORT_ADDR_MAX + 16];

	struct tpu_pipe *setup;		/* pipes being set up (join_next), newest first */
	unsigned int nsetup;
	unsigned int setup_max;		/* TPU_SETUP_MAX */
	uint64_t setup_ns;		/* TPU_SETUP_TIMEOUT_MS */
	uint64_t grace_ns;		/* the oldest in set-up is dropped only after this */
	struct tpu_pipe *ready[LISTENER_BACKLOG];
	size_t nready;
	tpu_accept_cb accept_cb;
	void *accept_arg;
	struct tpu__task close_task;	/* tpu_listener_close() from a callback */
};

tpu_status tpu__listener_url_for(const struct tpu_listener *l, const struct tpu__xport *x,
				 const char **addr)
{
	for (unsigned int i = 0; i < l->n; i++) {
		if (l->xl[i]->xport == x) {
			*addr = l->xl[i]->ops->addr(l->xl[i]);
			return 0;
		}
	}
	return TPU_E_NO_TRANSPORT;
}

/* Out of set-up, whichever way: its deadline no longer applies. */
static void setup_unlink(struct tpu_listener *l, struct tpu_pipe *p)
{
	if (p->setup_timer_on) {
		p->setup_timer_on = false;
		tpu__ctx_timer_cancel(l->ctx, &p->setup_timer);
	}
	for (struct tpu_pipe **pp = &l->setup; *pp; pp = &(*pp)->join_next) {
		if (*pp == p) {
			*pp = p->join_next;
			p->join_next = NULL;
			l->nsetup--;
			return;
		}
	}
}

void tpu__listener_forget(struct tpu_listener *l, struct tpu_pipe *p)
{
	setup_unlink(l, p);
}

void tpu__listener_await_join(struct tpu_listener *l, struct tpu_pipe *p)
{
	(void)l;
	(void)p;
	/* Already on the set-up list; its token marks it as waiting. */
}

struct tpu_pipe *tpu__listener_find_join(struct tpu_listener *l, uint64_t token)
{
	for (struct tpu_pipe *p = l->setup; p; p = p->join_next)
		if (p->token && p->token == token)
			return p;
	return NULL;
}

static void hand_over(struct tpu_listener *l, struct tpu_pipe *p)
{
	tpu_accept_cb cb = l->accept_cb;
	void *arg = l->accept_arg;

	l->accept_cb = NULL;
	atomic_store(&l->accept_armed, false);
	tpu__ctx_add_obj(l->ctx, &p->obj);
	cb(arg, 0, p);
}

void tpu__listener_deliver(struct tpu_listener *l, struct tpu_pipe *p)
{
	setup_unlink(l, p);
	p->listener = NULL;
	p->delivered = true;
	if (l->accept_cb) {
		hand_over(l, p);
		return;
	}
	if (l->nready == LISTENER_BACKLOG) {
		tpu__log_debug("listener %p: backlog full, closing a new pipe", (void *)l);
		p->obj.next = NULL;
		tpu_pipe_close(p);
		return;
	}
	l->ready[l->nready++] = p;
}

static void setup_expired(void *arg, tpu_status st)
{
	struct tpu_pipe *p = arg;

	/* Cancelled, or it finished (or failed) as the timer ran out. */
	if (!st && p->setup_timer_on && p->listener) {
		p->setup_timer_on = false;
		tpu__log_debug("pipe %p: set-up not finished in time; dropped", (void *)p);
		tpu__pipe_setup_abort(p, -ETIMEDOUT);
	}
	tpu__pipe_io_put(p);
}

static void accepted(void *arg, tpu_status st, struct tpu__conn *conn)
{
	struct tpu_listener *l = arg;
	struct tpu_pipe *p;

	if (st) {
		tpu__log_debug("listener %p: accepting failed: %s", (void *)l, tpu_strerror(st));
		return;
	}
	if (l->nsetup >= l->setup_max) {
		struct tpu_pipe *old = l->setup;

		while (old->join_next)
			old = old->join_next;
		if (tpu__mono_ns() - old->setup_since < l->grace_ns) {
			tpu__log_debug("listener %p: %u pipes in set-up, all young; refusing a new one",
				       (void *)l, l->nsetup);
			conn->ops->close(conn);
			return;
		}
		tpu__log_debug("listener %p: %u pipes in set-up; dropping the oldest", (void *)l,
			       l->nsetup);
		tpu__pipe_setup_abort(old, -ECONNABORTED);
	}
	p = tpu__pipe_new(l->ctx, false);
	if (!p) {
		conn->ops->close(conn);
		return;
	}
	p->policy = l->policy;
	p->listener = l;
	p->join_next = l->setup;
	l->setup = p;
	l->nsetup++;
	p->setup_since = tpu__mono_ns();
	p->setup_timer.fn = setup_expired;
	p->setup_timer.arg = p;
	if (tpu__ctx_timer_start(l->ctx, &p->setup_timer, l->setup_ns)) {
		/* Without a deadline it could stay for ever: refuse it. */
		p->conn = conn;
		tpu__pipe_setup_abort(p, -ENOMEM);
		return;
	}
	p->setup_timer_on = true;
	tpu__pipe_io_get(p);
	tpu__pipe_acceptor_start(p, conn);
}

/* ---- create ------------------------------------------------------------- */

struct create_call {
	struct tpu_listener *l;
	const char *const *urls;
	size_t nurls;
	tpu_status status;
};

static void listener_shutdown(struct tpu_listener *l)
{
	for (unsigned int i = 0; i < l->n; i++)
		l->xl[i]->ops->close(l->xl[i]);
	l->n = 0;
}

static void create_run(void *arg)
{
	struct create_call *cc = arg;
	struct tpu_listener *l = cc->l;

	for (size_t i = 0; i < cc->nurls; i++) {
		const char *url = cc->urls[i], *sep = strstr(url, "://");
		const struct tpu__xport *x;
		struct tpu__xlistener *xl;
		tpu_status st;

		x = sep ? tpu__pipe_xport_by_name(url, (size_t)(sep - url)) : NULL;
		st = !sep ? -EINVAL : !x ? TPU_E_URL_SCHEME : 0;
		if (!st && !l->policy.xport_ok[tpu__pipe_xport_index(x)])
			st = TPU_E_NO_TRANSPORT;
		if (!st)
			st = x->listen(l->ctx, sep + 3, accepted, l, &xl);
		if (st) {
			tpu__log_debug("listener: %s: %s", url, tpu_strerror(st));
			listener_shutdown(l);
			cc->status = st;
			return;
		}
		l->xl[l->n] = xl;
		snprintf(l->urls[l->n], sizeof(l->urls[0]), "%s://%s", x->name, xl->ops->addr(xl));
		tpu__log_debug("listener %p: on %s", (void *)l, l->urls[l->n]);
		l->n++;
	}
}

static void listener_obj_close(struct tpu__ctx_obj *o)
{
	tpu_listener_close(tpu__container_of(o, struct tpu_listener, obj));
}

TPU_API tpu_status tpu_listener_create(struct tpu_context *ctx, const char *const *urls,
				       size_t nurls, struct tpu_listener **out)
{
	static atomic_uint serial;
	struct create_call cc = { 0 };
	char shm_url[64];
	const char *defaults[2];
	struct tpu_listener *l;
	tpu_status st;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!ctx || (nurls && !urls) || nurls > LISTENER_MAX_URLS)
		return -EINVAL;
	for (size_t i = 0; i < nurls; i++)
		if (!urls[i])
			return -EINVAL;
	st = tpu__ctx_check(ctx);
	if (st)
		return st;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->magic = TPU__MAGIC_LISTENER;
	l->ctx = ctx;
	l->obj.close = listener_obj_close;
	l->obj.pass = TPU__CTX_PASS_PIPE;
	l->obj.what = "a listener";
	atomic_init(&l->closed, false);
	atomic_init(&l->accept_armed, false);
	atomic_init(&l->queued, 0);
	l->setup_max = tpu__setup_max();
	l->setup_ns = tpu__setup_timeout_ns();
	l->grace_ns = tpu__setup_grace_ns(l->setup_ns);
	st = tpu__pipe_policy(ctx, &l->policy);
	if (st) {
		free(l);
		return st;
	}
	if (!nurls) {
		/* Every transport the context allows, on this machine. */
		snprintf(shm_url, sizeof(shm_url), "shm://tpu-%d-%u", (int)getpid(),
			 atomic_fetch_add(&serial, 1));
		if (l->policy.xport_ok[tpu__pipe_xport_index(&tpu__xport_tcp)])
			defaults[nurls++] = "tcp://127.0.0.1:0";
		if (l->policy.xport_ok[tpu__pipe_xport_index(&tpu__xport_shm)])
			defaults[nurls++] = shm_url;
		if (!nurls) {
			free(l);
			return TPU_E_NO_TRANSPORT;
		}
		urls = defaults;
	}
	cc.l = l;
	cc.urls = urls;
	cc.nurls = nurls;
	tpu__ctx_run_sync(ctx, create_run, &cc);
	if (cc.status) {
		free(l);
		return cc.status;
	}
	tpu__ctx_add_obj(ctx, &l->obj);
	*out = l;
	return 0;
}

TPU_API tpu_status tpu_listener_url(const struct tpu_listener *l, const char *transport, char *buf,
				    size_t size)
{
	tpu_status st = tpu__magic_check(l, l ? &l->magic : NULL, TPU__MAGIC_LISTENER);

	if (st)
		return st;
	if (!buf)
		return -EINVAL;
	for (unsigned int i = 0; i < l->n; i++) {
		size_t len = strlen(l->urls[i]);

		if (transport && strcmp(l->xl[i]->xport->name, transport))
			continue;
		if (len >= size)
			return -ENOSPC;
		memcpy(buf, l->urls[i], len + 1);
		return 0;
	}
	return TPU_E_NO_TRANSPORT;
}

/* ---- accept and close --------------------------------------------------- */

/* Ctx thread, once shut: freed unless an accept call is still queued (it frees it). */
static void listener_release(struct tpu_listener *l)
{
	if (tpu__gate_close(&l->queued))
		tpu__quarantine(l, &l->magic);
}

struct accept_call {
	struct tpu__task task;
	struct tpu_listener *l;
	tpu_accept_cb cb;
	void *arg;
};

static void accept_run(struct tpu__task *t)
{
	struct accept_call *ac = (struct accept_call *)t;
	struct tpu_listener *l = ac->l;
	tpu_accept_cb cb = ac->cb;
	void *arg = ac->arg;

	free(ac);
	if (l->shut) {
		/* Queued before a close on another thread ran: called back all the same. */
		cb(arg, TPU_E_CLOSED, NULL);
	} else {
		l->accept_cb = cb;
		l->accept_arg = arg;
		if (l->nready) {
			struct tpu_pipe *p = l->ready[0];

			memmove(l->ready, l->ready + 1, --l->nready * sizeof(l->ready[0]));
			hand_over(l, p);
		}
	}
	/* Only this thread frees the listener: nobody can between these two lines. */
	if (tpu__gate_leave(&l->queued) && l->shut)
		listener_release(l);
}

TPU_API tpu_status tpu_listener_accept(struct tpu_listener *l, tpu_accept_cb done, void *arg)
{
	struct accept_call *ac;
	tpu_status st = tpu__magic_check(l, l ? &l->magic : NULL, TPU__MAGIC_LISTENER);

	if (!st)
		st = tpu__ctx_check(l->ctx);
	if (st)
		return st;
	if (!done)
		return -EINVAL;
	if (atomic_load(&l->closed))
		return TPU_E_CLOSED;
	if (atomic_exchange(&l->accept_armed, true))
		return -EBUSY;
	ac = calloc(1, sizeof(*ac));
	if (!ac) {
		atomic_store(&l->accept_armed, false);
		return -ENOMEM;
	}
	ac->task.fn = accept_run;
	ac->l = l;
	ac->cb = done;
	ac->arg = arg;
	if (!tpu__gate_enter(&l->queued)) {
		/* A close on another thread ran to its end after the check above. */
		free(ac);
		return TPU_E_CLOSED;
	}
	tpu__ctx_defer(l->ctx, &ac->task);
	return 0;
}

static void close_run(void *arg)
{
	struct tpu_listener *l = arg;

	listener_shutdown(l);
	while (l->setup) {
		struct tpu_pipe *p = l->setup;

		/* Failing it unlinks it (tpu__listener_forget) and frees it. */
		tpu__pipe_fail(p, TPU_E_CLOSED);
		if (l->setup == p)
			setup_unlink(l, p);
		p->closed = true;
		tpu__pipe_maybe_free(p);
	}
	for (size_t i = 0; i < l->nready; i++) {
		tpu__ctx_add_obj(l->ctx, &l->ready[i]->obj);
		tpu_pipe_close(l->ready[i]);
	}
	l->nready = 0;
	if (l->accept_cb) {
		tpu_accept_cb cb = l->accept_cb;

		l->accept_cb = NULL;
		cb(l->accept_arg, TPU_E_CLOSED, NULL);
	}
	l->shut = true;
	listener_release(l);
}

static void close_task(struct tpu__task *t)
{
	close_run(tpu__container_of(t, struct tpu_listener, close_task));
}

TPU_API void tpu_listener_close(struct tpu_listener *l)
{
	tpu_status st;

	if (!l)
		return;
	st = tpu__magic_check(l, &l->magic, TPU__MAGIC_LISTENER);
	if (!st)
		st = tpu__ctx_check(l->ctx);
	if (st || atomic_exchange(&l->closed, true)) {
		tpu__log_debug("tpu_listener_close(%p): %s; ignored", (void *)l,
			       st ? tpu_strerror(st) : "closed already");
		return;
	}
	tpu__ctx_del_obj(l->ctx, &l->obj);
	/* From a callback, after the accept calls already queued (they name l). */
	if (tpu__ctx_on_thread(l->ctx)) {
		l->close_task.fn = close_task;
		tpu__ctx_defer(l->ctx, &l->close_task);
		return;
	}
	tpu__ctx_run_sync(l->ctx, close_run, l);
}
