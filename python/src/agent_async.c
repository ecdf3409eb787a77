// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * An Agent's operations that complete later: transfers posted as ops (the
 * Python layer wraps them in Futures) and notifications.
 *
 * Transfers: the library's callback (posting or context thread) only
 * completes the op's C half; the request stays with the op until it is
 * freed, or until the agent closes (the library wants every request
 * released before its agent), whichever comes first: the agent keeps its
 * live ops on a list (under the GIL) for that.
 *
 * Notifications: the library hands every one to on_notif() on its context
 * thread, which gives it to the oldest waiting op or queues it here, under
 * the agent's nlock, bounded as the library bounds its own queue.  The
 * Python layer's notifications() and notification ops read this queue, so
 * the order per peer is the library's.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tpupy.h"

/* As lib/xfer bounds the queue nobody polls: in count and in bytes. */
#define NOTIFS_MAX		65536
#define NOTIF_BYTES_MAX		(4U << 20)

struct tpupy_notif {
	struct tpupy_notif *next;
	char peer[TPU_XFER_NAME_MAX];
	size_t len;
	unsigned char msg[];
};

static void notif_complete(struct tpupy_cop *c, const char *peer, const void *msg, size_t len)
{
	snprintf(c->peer, sizeof(c->peer), "%s", peer);
	c->nmsg = malloc(len ? len : 1);
	c->len = len;
	if (!c->nmsg) {
		tpupy_cop_complete(c, -ENOMEM);
		return;
	}
	memcpy(c->nmsg, msg, len);
	tpupy_cop_complete(c, 0);
}

/* Context thread: no Python here. */
static void on_notif(void *arg, const char *peer, const void *msg, size_t len)
{
	tpupy_agent *a = arg;
	struct tpupy_cop *w;
	struct tpupy_notif *n;

	pthread_mutex_lock(&a->nlock);
	w = a->waiters;
	if (w) {
		a->waiters = w->wnext;
		if (!a->waiters)
			a->w_tail = &a->waiters;
		w->wnext = NULL;
		w->agent = NULL;
		/* Completed under nlock: a cancel sees either the waiter or its result. */
		notif_complete(w, peer, msg, len);
		pthread_mutex_unlock(&a->nlock);
		return;
	}
	if (a->nq_n >= NOTIFS_MAX || len > NOTIF_BYTES_MAX - a->nq_bytes) {
		pthread_mutex_unlock(&a->nlock);
		return;		/* dropped, as the library drops what nobody polls */
	}
	n = malloc(sizeof(*n) + len);
	if (n) {
		n->next = NULL;
		snprintf(n->peer, sizeof(n->peer), "%s", peer);
		n->len = len;
		memcpy(n->msg, msg, len);
		*a->nq_tail = n;
		a->nq_tail = &n->next;
		a->nq_n++;
		a->nq_bytes += len;
	}
	pthread_mutex_unlock(&a->nlock);
}

int tpupy_agent_notif_start(tpupy_agent *a)
{
	tpu_status st;

	if (!a->nlock_ok) {
		pthread_mutex_init(&a->nlock, NULL);
		a->nlock_ok = true;
	}
	a->nq = NULL;
	a->nq_tail = &a->nq;
	a->waiters = NULL;
	a->w_tail = &a->waiters;
	st = tpu_agent_set_notif_cb(a->a, on_notif, a);
	if (st) {
		tpupy_raise(st, "tpu_agent_set_notif_cb");
		return -1;
	}
	return 0;
}

void tpupy_agent_ops_release(tpupy_agent *a)
{
	while (a->live) {
		struct tpupy_cop *c = a->live;
		struct tpu_xfer_req *req = c->req;

		a->live = c->lnext;
		if (a->live)
			a->live->lprev = NULL;
		c->lnext = c->lprev = NULL;
		c->req = NULL;
		c->agent = NULL;
		Py_BEGIN_ALLOW_THREADS
		tpu_xfer_release(req);	/* a post in flight finishes -ECANCELED */
		Py_END_ALLOW_THREADS
	}
}

void tpupy_agent_notif_stop(tpupy_agent *a)
{
	struct tpupy_cop *w;
	struct tpupy_notif *n;

	if (!a->nlock_ok)
		return;
	pthread_mutex_lock(&a->nlock);
	w = a->waiters;
	a->waiters = NULL;
	a->w_tail = &a->waiters;
	n = a->nq;
	a->nq = NULL;
	a->nq_tail = &a->nq;
	a->nq_n = a->nq_bytes = 0;
	while (w) {
		struct tpupy_cop *next = w->wnext;

		w->wnext = NULL;
		w->agent = NULL;
		snprintf(w->why, sizeof(w->why), "the agent closed");
		tpupy_cop_complete(w, TPU_E_DESTROYED);
		w = next;
	}
	pthread_mutex_unlock(&a->nlock);
	while (n) {
		struct tpupy_notif *next = n->next;

		free(n);
		n = next;
	}
}

PyObject *tpupy_agent_notif_take(tpupy_agent *a)
{
	struct tpupy_notif *n;
	PyObject *t;

	pthread_mutex_lock(&a->nlock);
	n = a->nq;
	if (n) {
		a->nq = n->next;
		if (!a->nq)
			a->nq_tail = &a->nq;
		a->nq_n--;
		a->nq_bytes -= n->len;
	}
	pthread_mutex_unlock(&a->nlock);
	if (!n)
		Py_RETURN_NONE;
	t = Py_BuildValue("(sy#)", n->peer, (const char *)n->msg, (Py_ssize_t)n->len);
	free(n);
	return t;
}

/* The library's callback: posting or context thread; no Python. */
static void on_xfer_done(void *arg, tpu_status st, struct tpu_xfer_req *req)
{
	(void)req;
	tpupy_cop_complete(arg, st);
}

PyObject *tpupy_agent_post_op(tpupy_agent *a, struct tpu_xfer_req *req, PyObject *keep)
{
	tpupy_op *op = tpupy_op_new(a->ctx, TPUPY_OP_XFER, (PyObject *)a);
	tpu_status st;

	if (!op) {
		tpu_xfer_release(req);
		return NULL;
	}
	op->c.req = req;
	op->c.agent = a;
	op->keep = Py_NewRef(keep);
	op->c.lnext = a->live;
	if (a->live)
		a->live->lprev = &op->c;
	a->live = &op->c;
	/* The queue's reference first: cma completes before the post returns. */
	tpupy_op_submitted(op);
	Py_BEGIN_ALLOW_THREADS
	st = tpu_xfer_post(req, on_xfer_done, &op->c);
	Py_END_ALLOW_THREADS
	if (st) {
		/* Not started: the callback will not come; complete it here instead. */
		snprintf(op->c.why, sizeof(op->c.why), "tpu_xfer_post");
		tpupy_cop_complete(&op->c, st);
	}
	return (PyObject *)op;
}

PyObject *tpupy_agent_notif_op(tpupy_agent *a)
{
	tpupy_op *op = tpupy_op_new(a->ctx, TPUPY_OP_NOTIF, (PyObject *)a->ctx);
	struct tpupy_notif *n;

	if (!op)
		return NULL;
	tpupy_op_submitted(op);
	pthread_mutex_lock(&a->nlock);
	n = a->nq;
	if (n) {
		a->nq = n->next;
		if (!a->nq)
			a->nq_tail = &a->nq;
		a->nq_n--;
		a->nq_bytes -= n->len;
		notif_complete(&op->c, n->peer, n->msg, n->len);
		free(n);
	} else {
		/* Owned by the Context, not the agent: a waiting op does not keep it open. */
		op->c.agent = a;
		op->c.wnext = NULL;
		*a->w_tail = &op->c;
		a->w_tail = &op->c.wnext;
	}
	pthread_mutex_unlock(&a->nlock);
	return (PyObject *)op;
}

PyObject *tpupy_agent_notif_cancel(tpupy_agent *a, PyObject *obj)
{
	tpupy_op *op = (tpupy_op *)obj;
	struct tpupy_cop **pp;
	bool found = false;

	if (!PyObject_TypeCheck(obj, tpupy_OpType) || op->c.kind != TPUPY_OP_NOTIF) {
		PyErr_SetString(PyExc_TypeError, "a notification op");
		return NULL;
	}
	if (!a->nlock_ok)
		Py_RETURN_FALSE;
	pthread_mutex_lock(&a->nlock);
	for (pp = &a->waiters; *pp; pp = &(*pp)->wnext) {
		if (*pp != &op->c)
			continue;
		*pp = op->c.wnext;
		if (!*pp)
			a->w_tail = pp;
		op->c.wnext = NULL;
		op->c.agent = NULL;
		found = true;
		break;
	}
	if (found)
		tpupy_cop_complete(&op->c, -ECANCELED);
	pthread_mutex_unlock(&a->nlock);
	return PyBool_FromLong(found);
}

PyObject *tpupy_agent_op_result(tpupy_op *op)
{
	struct tpupy_cop *c = &op->c;

	if (c->kind == TPUPY_OP_NOTIF)
		return Py_BuildValue("(sy#)", c->peer, (const char *)c->nmsg, (Py_ssize_t)c->len);
	Py_RETURN_NONE;
}

void tpupy_agent_op_free(struct tpupy_cop *c)
{
	if (c->kind == TPUPY_OP_XFER && c->req) {
		tpupy_agent *a = c->agent;

		/* Still on the agent's list (the agent did not close): take it off. */
		if (c->lprev)
			c->lprev->lnext = c->lnext;
		else if (a && a->live == c)
			a->live = c->lnext;
		if (c->lnext)
			c->lnext->lprev = c->lprev;
		Py_BEGIN_ALLOW_THREADS
		tpu_xfer_release(c->req);
		Py_END_ALLOW_THREADS
		c->req = NULL;
	}
	free(c->nmsg);
	c->nmsg = NULL;
}
