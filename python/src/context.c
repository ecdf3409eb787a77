// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Context: one library context (its io_uring and completion thread) and
 * the completion queue its operations report to.
 *
 * A context belongs to the process that made it.  The pid is recorded at
 * creation and every call checks it, so that a child forked afterwards
 * gets ForkedError instead of waiting on a thread that does not exist in
 * it; a child's garbage collection leaves the parent's context alone.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include "tpupy.h"

PyTypeObject *tpupy_ContextType;

int tpupy_context_check(tpupy_context *c)
{
	if (c->pid != getpid()) {
		tpupy_raise(TPU_E_FORKED, "this object was created in the parent process");
		return -1;
	}
	if (!c->ctx) {
		tpupy_raise(TPU_E_DESTROYED, "the context is closed");
		return -1;
	}
	return 0;
}

static int context_init(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "no_kmod", "transports", "channels", "dev_path", NULL };
	tpupy_context *c = (tpupy_context *)self;
	struct tpu_context_options o = { 0 };
	const char *transports = NULL, *channels = NULL, *dev = NULL;
	int no_kmod = 0;
	tpu_status st;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|$pzzz:Context", kwlist, &no_kmod,
					 &transports, &channels, &dev))
		return -1;
	if (c->ctx) {
		PyErr_SetString(PyExc_RuntimeError, "Context already initialised");
		return -1;
	}
	o.flags = no_kmod ? TPU_CTX_NO_KMOD : 0;
	o.transports = transports;
	o.channels = channels;
	o.dev_path = dev;
	st = tpupy_queue_init(&c->queue);
	if (st) {
		tpupy_raise(st, "eventfd");
		return -1;
	}
	c->queue_ok = true;
	Py_BEGIN_ALLOW_THREADS
	st = tpu_context_create(&o, &c->ctx);
	Py_END_ALLOW_THREADS
	if (st) {
		c->ctx = NULL;
		tpupy_raise(st, "tpu_context_create");
		return -1;
	}
	c->pid = getpid();
	return 0;
}

static void context_close_now(tpupy_context *c)
{
	struct tpu_context *ctx = c->ctx;

	if (!ctx || c->pid != getpid())
		return;
	c->ctx = NULL;
	/* Every pending callback runs (queueing its op) before this returns. */
	Py_BEGIN_ALLOW_THREADS
	tpu_context_destroy(ctx);
	Py_END_ALLOW_THREADS
	tpupy_queue_kick(&c->queue);
}

static void context_dealloc(PyObject *self)
{
	tpupy_context *c = (tpupy_context *)self;
	PyTypeObject *tp = Py_TYPE(self);

	context_close_now(c);
	if (c->queue_ok && c->pid == getpid())
		tpupy_queue_fini(&c->queue);
	((freefunc)PyType_GetSlot(tp, Py_tp_free))(self);
	Py_DECREF(tp);
}

static PyObject *context_close(PyObject *self, PyObject *unused)
{
	tpupy_context *c = (tpupy_context *)self;

	(void)unused;
	if (c->ctx && c->pid != getpid())
		return tpupy_raise(TPU_E_FORKED, "this context was created in the parent process");
	context_close_now(c);
	Py_RETURN_NONE;
}

static PyObject *context_drain(PyObject *self, PyObject *args)
{
	tpupy_context *c = (tpupy_context *)self;
	PyObject *t = Py_None;

	if (!PyArg_ParseTuple(args, "|O:_drain", &t))
		return NULL;
	if (c->pid != getpid())
		return tpupy_raise(TPU_E_FORKED, "this context was created in the parent process");
	if (!c->queue_ok)
		return PyList_New(0);
	return tpupy_queue_drain(&c->queue, t);
}

static PyObject *context_fileno(PyObject *self, PyObject *unused)
{
	tpupy_context *c = (tpupy_context *)self;

	(void)unused;
	if (!c->queue_ok)
		return tpupy_raise(TPU_E_DESTROYED, "the context is closed");
	/* From now on every completion makes it readable (see tpupy_cop_complete)... */
	if (!__atomic_exchange_n(&c->queue.fd_wanted, true, __ATOMIC_SEQ_CST)) {
		uint64_t one = 1;
		bool pending;

		/* ...and the ones that came before it. */
		pthread_mutex_lock(&c->queue.lock);
		pending = c->queue.head != NULL;
		pthread_mutex_unlock(&c->queue.lock);
		if (pending && write(c->queue.efd, &one, sizeof(one)) < 0)
			(void)0;	/* a full counter still reads as ready */
	}
	return PyLong_FromLong(c->queue.efd);
}

static PyObject *context_set_secret(PyObject *self, PyObject *args)
{
	tpupy_context *c = (tpupy_context *)self;
	Py_buffer b;
	tpu_status st;

	if (!PyArg_ParseTuple(args, "y*:set_secret", &b))
		return NULL;
	if (c->pid != getpid()) {
		PyBuffer_Release(&b);
		return tpupy_raise(TPU_E_FORKED, "this context was created in the parent process");
	}
	st = c->ctx ? tpu_context_set_secret(c->ctx, b.buf, (size_t)b.len) : TPU_E_DESTROYED;
	PyBuffer_Release(&b);
	if (st)
		return tpupy_raise(st, "tpu_context_set_secret");
	Py_RETURN_NONE;
}

static PyObject *context_closed(PyObject *self, void *unused)
{
	(void)unused;
	return PyBool_FromLong(((tpupy_context *)self)->ctx == NULL);
}

static PyObject *context_pid(PyObject *self, void *unused)
{
	(void)unused;
	return PyLong_FromLong(((tpupy_context *)self)->pid);
}

static PyMethodDef context_methods[] = {
	{ "close", context_close, METH_NOARGS,
	  "close(): fail every pending operation (ClosedError), stop the context's thread" },
	{ "_drain", context_drain, METH_VARARGS,
	  "_drain(timeout=None) -> list of finished ops (internal)" },
	{ "fileno", context_fileno, METH_NOARGS,
	  "fileno() -> an eventfd readable when an operation finished" },
	{ "set_secret", context_set_secret, METH_VARARGS,
	  "set_secret(secret: bytes): the job secret (b'' removes it)" },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef context_getset[] = {
	{ "closed", context_closed, NULL, "whether close() ran", NULL },
	{ "pid", context_pid, NULL, "the process that created it", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot context_slots[] = {
	{ Py_tp_init, context_init },
	{ Py_tp_new, PyType_GenericNew },
	{ Py_tp_dealloc, context_dealloc },
	{ Py_tp_methods, context_methods },
	{ Py_tp_getset, context_getset },
	{ Py_tp_doc, "_Context(*, no_kmod=False, transports=None, channels=None, dev_path=None)\n\n"
		     "One library context: an io_uring and a completion thread." },
	{ 0, NULL },
};

static PyType_Spec context_spec = {
	.name = "tpu_user._Context",
	.basicsize = sizeof(tpupy_context),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.slots = context_slots,
};

int tpupy_context_init(PyObject *m)
{
	tpupy_ContextType = (PyTypeObject *)PyType_FromSpec(&context_spec);
	if (!tpupy_ContextType)
		return -1;
	return PyModule_AddObjectRef(m, "_Context", (PyObject *)tpupy_ContextType);
}
