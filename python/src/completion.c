// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Operations and the context's completion queue.
 *
 * An Op is a Python object with its C half (struct tpupy_cop) inside.
 * Submitting it takes a reference that the queue owns: the library's
 * callback, on the context's thread, only fills in the C half, appends it
 * to the queue, signals the condition variable and the eventfd — it never
 * touches a Python object, not even a reference count.  A Python thread
 * (one waiting on an op, the dispatcher thread of the futures, or an
 * event loop's reader of the eventfd) drains the queue, under the GIL, and
 * drops that reference once it settled the op.
 *
 * An op that a thread waits on (op._wait, with Future.result() and every
 * blocking call) wakes that thread only: the waiter drains the queue itself
 * when its wait ends, so the dispatcher, which sleeps on a condition of its
 * own, is not woken too (one thread wake-up and one GIL hand-off fewer per
 * operation).  A waiter that gives up just as its op completes finds it
 * done when it leaves (under the lock) and drains it the same way.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include "tpupy.h"

PyTypeObject *tpupy_OpType;

int tpupy_queue_init(struct tpupy_queue *q)
{
	pthread_condattr_t a;

	memset(q, 0, sizeof(*q));
	q->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (q->efd < 0)
		return -errno;
	pthread_mutex_init(&q->lock, NULL);
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&q->cond, &a);
	pthread_cond_init(&q->dcond, &a);
	pthread_condattr_destroy(&a);
	return 0;
}

void tpupy_queue_fini(struct tpupy_queue *q)
{
	if (q->efd >= 0)
		close(q->efd);
	q->efd = -1;
	pthread_mutex_destroy(&q->lock);
	pthread_cond_destroy(&q->cond);
	pthread_cond_destroy(&q->dcond);
}

void tpupy_cop_complete(struct tpupy_cop *c, tpu_status st)
{
	struct tpupy_queue *q = c->queue;
	uint64_t one = 1;
	ssize_t n;

	pthread_mutex_lock(&q->lock);
	c->status = st;
	/* Release: a waiter spinning on done (op_wait) then sees the status. */
	__atomic_store_n(&c->done, 1, __ATOMIC_RELEASE);
	c->next = NULL;
	if (q->tail)
		q->tail->next = c;
	else
		q->head = c;
	q->tail = c;
	if (c->waiters)
		pthread_cond_broadcast(&q->cond);
	else
		pthread_cond_broadcast(&q->dcond);
	pthread_mutex_unlock(&q->lock);
	/*
	 * Only for someone who polls the descriptor (fileno(): an event loop's
	 * reader): a waiter on the op or the queue needs no system call here.
	 */
	if (__atomic_load_n(&q->fd_wanted, __ATOMIC_SEQ_CST)) {
		n = write(q->efd, &one, sizeof(one));
		(void)n;	/* a full counter still reads as ready */
	}
}

/* How long op_wait spins before it sleeps: TPU_SPIN_US as the library reads it (GIL held). */
#define OP_SPIN_DEFAULT_NS	100000.0
#define OP_SPIN_MAX_NS		10000000.0

static double op_spin_ns(void)
{
	static double ns = -1;
	const char *s;
	char *end;
	double v;

	if (ns >= 0)
		return ns;
	s = getenv("TPU_SPIN_US");
	v = OP_SPIN_DEFAULT_NS;
	if (s && *s) {
		double us = strtod(s, &end);

		if (!*end && us >= 0 && us * 1000.0 <= OP_SPIN_MAX_NS)
			v = us * 1000.0;
	}
	ns = v;
	return ns;
}

static double mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/*
 * GIL released: look at the op for a while before sleeping on the queue's
 * condition.  A round trip shorter than the spin then costs this thread no
 * sleep and the library's thread no futex wake-up.
 */
static bool op_spin(struct tpupy_cop *c, double timeout, double budget)
{
	double start, now;
	unsigned int i = 0;

	if (timeout >= 0 && timeout * 1e9 < budget)
		budget = timeout * 1e9;
	if (budget <= 0)
		return false;
	start = mono_ns();
	for (;;) {
		if (__atomic_load_n(&c->done, __ATOMIC_ACQUIRE))
			return true;
		if (++i % 64)
			continue;
		now = mono_ns();
		if (now - start >= budget)
			return false;
	}
}

static void deadline_after(struct timespec *ts, double seconds)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += (time_t)seconds;
	ts->tv_nsec += (long)((seconds - (double)(time_t)seconds) * 1e9);
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

/* Waits on @cond (GIL released by the caller, q->lock held) until @pred; false on timeout. */
static bool queue_wait_locked(struct tpupy_queue *q, pthread_cond_t *cond, double timeout,
			      bool (*pred)(void *), void *arg)
{
	struct timespec ts;
	bool ok;

	if (timeout >= 0)
		deadline_after(&ts, timeout);
	while (!(ok = pred(arg))) {
		if (timeout < 0)
			pthread_cond_wait(cond, &q->lock);
		else if (pthread_cond_timedwait(cond, &q->lock, &ts) == ETIMEDOUT)
			break;
	}
	return pred(arg);
}

static bool op_is_done(void *arg)
{
	return ((struct tpupy_cop *)arg)->done;
}

static bool queue_nonempty(void *arg)
{
	struct tpupy_queue *q = arg;

	return q->head != NULL || q->closed;
}

tpupy_op *tpupy_op_new(struct tpupy_context *ctx, int kind, PyObject *owner)
{
	tpupy_op *op = (tpupy_op *)PyType_GenericAlloc(tpupy_OpType, 0);

	if (!op)
		return NULL;
	op->c.kind = kind;
	op->c.queue = &ctx->queue;
	op->owner = Py_NewRef(owner);
	return op;
}

void tpupy_op_submitted(tpupy_op *op)
{
	Py_INCREF((PyObject *)op);	/* the queue's; dropped by whoever drains it */
}

static void op_dealloc(PyObject *self)
{
	tpupy_op *op = (tpupy_op *)self;
	PyTypeObject *tp = Py_TYPE(self);

	if (op->c.kind == TPUPY_OP_SEND || op->c.kind == TPUPY_OP_RECV)
		tpupy_rdv_op_free(&op->c);
	else if (op->c.kind == TPUPY_OP_XFER || op->c.kind == TPUPY_OP_NOTIF)
		tpupy_agent_op_free(&op->c);
	else
		tpupy_pipe_op_free(&op->c);
	tpupy_view_release(&op->view);
	Py_CLEAR(op->keep);
	Py_CLEAR(op->future);
	Py_CLEAR(op->outcome);
	Py_CLEAR(op->owner);
	((freefunc)PyType_GetSlot(tp, Py_tp_free))(self);
	Py_DECREF(tp);
}

static int timeout_seconds(PyObject *obj, double *t)
{
	if (obj == Py_None) {
		*t = -1;
		return 0;
	}
	*t = PyFloat_AsDouble(obj);
	if (*t == -1 && PyErr_Occurred())
		return -1;
	if (*t < 0)
		*t = 0;
	return 0;
}

static PyObject *op_wait(PyObject *self, PyObject *args)
{
	tpupy_op *op = (tpupy_op *)self;
	PyObject *tobj = Py_None;
	double t, spin = op_spin_ns();
	bool ok;

	if (!PyArg_ParseTuple(args, "|O:_wait", &tobj) || timeout_seconds(tobj, &t) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	{
		struct tpupy_queue *q = op->c.queue;

		/* Counted before the op can be seen done: its completion then wakes us, not the dispatcher. */
		pthread_mutex_lock(&q->lock);
		op->c.waiters++;
		pthread_mutex_unlock(&q->lock);
		ok = op_spin(&op->c, t, spin);
		pthread_mutex_lock(&q->lock);
		if (!ok)
			queue_wait_locked(q, &q->cond, t, op_is_done, &op->c);
		op->c.waiters--;
		/* Done now means our caller drains it, even when the wait itself timed out. */
		ok = op->c.done;
		pthread_mutex_unlock(&q->lock);
	}
	Py_END_ALLOW_THREADS
	return PyBool_FromLong(ok);
}

static PyObject *op_done(PyObject *self, PyObject *unused)
{
	tpupy_op *op = (tpupy_op *)self;
	int done;

	(void)unused;
	pthread_mutex_lock(&op->c.queue->lock);
	done = op->c.done;
	pthread_mutex_unlock(&op->c.queue->lock);
	return PyBool_FromLong(done);
}

/*
 * (True, result) or (False, exception): computed once, when the op is
 * done; releases what the op kept alive (the source of a send).
 */
static PyObject *op_outcome(PyObject *self, PyObject *unused)
{
	tpupy_op *op = (tpupy_op *)self;
	PyObject *val;

	(void)unused;
	if (!op->c.done) {
		PyErr_SetString(PyExc_RuntimeError, "operation not finished");
		return NULL;
	}
	if (!op->settled) {
		if (op->c.status) {
			val = tpupy_exception(op->c.status, op->c.why);
			if (!val)
				return NULL;
			op->outcome = Py_BuildValue("(ON)", Py_False, val);
		} else {
			if (op->c.kind == TPUPY_OP_SEND || op->c.kind == TPUPY_OP_RECV)
				val = tpupy_rdv_op_result(op);
			else if (op->c.kind == TPUPY_OP_XFER || op->c.kind == TPUPY_OP_NOTIF)
				val = tpupy_agent_op_result(op);
			else
				val = tpupy_pipe_op_result(op);
			if (!val)
				return NULL;
			op->outcome = Py_BuildValue("(ON)", Py_True, val);
		}
		if (!op->outcome)
			return NULL;
		op->settled = true;
		tpupy_view_release(&op->view);
		Py_CLEAR(op->keep);
	}
	return Py_NewRef(op->outcome);
}

static PyObject *op_get_future(PyObject *self, void *c)
{
	tpupy_op *op = (tpupy_op *)self;

	(void)c;
	return Py_NewRef(op->future ? op->future : Py_None);
}

static int op_set_future(PyObject *self, PyObject *val, void *c)
{
	tpupy_op *op = (tpupy_op *)self;
	PyObject *old = op->future;

	(void)c;
	op->future = val ? Py_NewRef(val) : NULL;
	Py_XDECREF(old);
	return 0;
}

/* Context._drain(timeout): the ops finished so far (waiting for one first). */
PyObject *tpupy_queue_drain(struct tpupy_queue *q, PyObject *tobj)
{
	struct tpupy_cop *c;
	PyObject *list;
	double t;

	if (timeout_seconds(tobj, &t) < 0)
		return NULL;
	if (t != 0) {
		Py_BEGIN_ALLOW_THREADS
		pthread_mutex_lock(&q->lock);
		queue_wait_locked(q, &q->dcond, t, queue_nonempty, q);
		pthread_mutex_unlock(&q->lock);
		Py_END_ALLOW_THREADS
	}
	list = PyList_New(0);
	if (!list)
		return NULL;
	/*
	 * The descriptor is emptied before the queue is taken: an op that
	 * completes in between leaves it readable, so an event loop's reader
	 * comes back for it (the other order could lose that op's wake-up).
	 */
	{
		uint64_t v;
		ssize_t n = read(q->efd, &v, sizeof(v));

		(void)n;
	}
	pthread_mutex_lock(&q->lock);
	c = q->head;
	q->head = q->tail = NULL;
	pthread_mutex_unlock(&q->lock);
	while (c) {
		struct tpupy_cop *next = c->next;
		tpupy_op *op = (tpupy_op *)((char *)c - offsetof(tpupy_op, c));

		/* The queue's reference moves into the list. */
		if (PyList_Append(list, (PyObject *)op) < 0)
			PyErr_Clear();
		Py_DECREF((PyObject *)op);
		c = next;
	}
	return list;
}

/* The context closed: wake every waiter, and let drains return at once from now on. */
void tpupy_queue_kick(struct tpupy_queue *q)
{
	pthread_mutex_lock(&q->lock);
	q->closed = true;
	pthread_cond_broadcast(&q->cond);
	pthread_cond_broadcast(&q->dcond);
	pthread_mutex_unlock(&q->lock);
}

static PyMethodDef op_methods[] = {
	{ "_wait", op_wait, METH_VARARGS,
	  "_wait(timeout=None) -> bool: wait, without the GIL, until it finished" },
	{ "done", op_done, METH_NOARGS, "done() -> whether it finished" },
	{ "_outcome", op_outcome, METH_NOARGS,
	  "_outcome() -> (True, result) or (False, exception), once finished" },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef op_getset[] = {
	{ "future", op_get_future, op_set_future, "the future it resolves, or None", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot op_slots[] = {
	{ Py_tp_dealloc, op_dealloc },
	{ Py_tp_methods, op_methods },
	{ Py_tp_getset, op_getset },
	{ Py_tp_doc, "An operation in flight (internal: the Python layer wraps it in a Future)." },
	{ 0, NULL },
};

static PyType_Spec op_spec = {
	.name = "tpu_user._Op",
	.basicsize = sizeof(tpupy_op),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
	.slots = op_slots,
};

int tpupy_op_init(PyObject *m)
{
	tpupy_OpType = (PyTypeObject *)PyType_FromSpec(&op_spec);
	if (!tpupy_OpType)
		return -1;
	return PyModule_AddObjectRef(m, "_Op", (PyObject *)tpupy_OpType);
}
