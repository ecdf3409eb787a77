// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Agent, Registration and Remote: one-sided transfers (lib/xfer,
 * Documentation/xfer.rst) for NumPy arrays, torch tensors and anything
 * with the buffer protocol or __dlpack__.  read() and write() block with
 * the GIL released; _post() and _notif_op() return ops the Python layer
 * (tpu_user.Agent) wraps in Futures (agent_async.c).  The library's
 * callbacks run no Python.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "tpupy.h"

typedef struct {
	PyObject_HEAD
	tpupy_agent *agent;
	struct tpu_xfer_reg *reg;
	struct tpupy_view view;		/* keeps the tensor alive and mapped */
	bool has_view;
} tpupy_xreg;

typedef struct {
	PyObject_HEAD
	tpupy_agent *agent;
	struct tpu_xfer_remote *rm;
} tpupy_xremote;

static PyTypeObject *AgentType, *RegType, *RemoteType;

static int agent_check(tpupy_agent *a)
{
	if (!a->a) {
		tpupy_raise(TPU_E_DESTROYED, "the agent is closed");
		return -1;
	}
	return tpupy_context_check(a->ctx);
}

static int agent_init(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "context", "name", "backends", NULL };
	tpupy_agent *a = (tpupy_agent *)self;
	struct tpu_agent_options o = { 0 };
	const char *backends = NULL;
	PyObject *ctx;
	tpu_status st;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|zz:Agent", kwlist, &ctx, &o.name, &backends))
		return -1;
	if (PyObject_HasAttrString(ctx, "_c"))	/* the Python Context wraps the C one */
		ctx = PyObject_GetAttrString(ctx, "_c");
	else
		Py_INCREF(ctx);
	if (!ctx)
		return -1;
	if (!PyObject_TypeCheck(ctx, tpupy_ContextType)) {
		Py_DECREF(ctx);
		PyErr_SetString(PyExc_TypeError, "Agent(context): a tpu_user.Context");
		return -1;
	}
	if (backends) {
		if (strstr(backends, "cma"))
			o.backends |= TPU_XFER_BACKEND_CMA;
		if (strstr(backends, "tcp"))
			o.backends |= TPU_XFER_BACKEND_TCP;
		if (strstr(backends, "rdma"))
			o.backends |= TPU_XFER_BACKEND_RDMA;
		if (strstr(backends, "kmod"))
			o.backends |= TPU_XFER_BACKEND_KMOD;
		if (!o.backends) {
			Py_DECREF(ctx);
			PyErr_SetString(PyExc_ValueError,
					"backends: any of \"cma\", \"tcp\", \"rdma\", \"kmod\"");
			return -1;
		}
	}
	a->ctx = (tpupy_context *)ctx;
	if (tpupy_context_check(a->ctx) < 0)
		return -1;
	st = tpu_agent_create(a->ctx->ctx, &o, &a->a);
	if (st) {
		tpupy_raise(st, "tpu_agent_create");
		return -1;
	}
	/* No peer has its blobs yet: no notification can come before this. */
	return tpupy_agent_notif_start(a);
}

static PyObject *agent_close(PyObject *self, PyObject *unused)
{
	tpupy_agent *a = (tpupy_agent *)self;

	(void)unused;
	if (a->a) {
		tpupy_agent_ops_release(a);
		Py_BEGIN_ALLOW_THREADS
		tpu_agent_destroy(a->a);
		Py_END_ALLOW_THREADS
		a->a = NULL;
	}
	tpupy_agent_notif_stop(a);
	Py_RETURN_NONE;
}

static void agent_dealloc(PyObject *self)
{
	tpupy_agent *a = (tpupy_agent *)self;

	/* Registrations, remotes and transfer ops hold the agent: none is left here. */
	if (a->a)
		tpu_agent_destroy(a->a);
	tpupy_agent_notif_stop(a);
	if (a->nlock_ok)
		pthread_mutex_destroy(&a->nlock);
	Py_XDECREF((PyObject *)a->ctx);
	PyObject_Free(self);
}

static PyObject *agent_register(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "tensor", "read", "write", NULL };
	tpupy_agent *a = (tpupy_agent *)self;
	int rd = 1, wr = 0;
	PyObject *obj;
	tpupy_xreg *r;
	tpu_status st;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|pp:register", kwlist, &obj, &rd, &wr))
		return NULL;
	if (agent_check(a) < 0)
		return NULL;
	r = PyObject_New(tpupy_xreg, RegType);
	if (!r)
		return NULL;
	r->agent = NULL;
	r->reg = NULL;
	r->has_view = false;
	/* Writable: local reads land in it, and peers may write it. */
	if (tpupy_view_get(obj, true, &r->view) < 0) {
		Py_DECREF(r);
		return NULL;
	}
	r->has_view = true;
	st = tpu_agent_register(a->a, r->view.data, r->view.meta.nbytes,
				(rd ? TPU_XFER_READ : 0) | (wr ? TPU_XFER_WRITE : 0), &r->reg);
	if (st) {
		Py_DECREF(r);
		return tpupy_raise(st, "tpu_agent_register");
	}
	Py_INCREF(self);
	r->agent = a;
	return (PyObject *)r;
}

static PyObject *agent_load(PyObject *self, PyObject *args)
{
	tpupy_agent *a = (tpupy_agent *)self;
	struct tpu_xfer_remote *rm = NULL;
	tpupy_xremote *r;
	tpu_status st;
	Py_buffer b;

	if (!PyArg_ParseTuple(args, "y*:load", &b))
		return NULL;
	if (agent_check(a) < 0) {
		PyBuffer_Release(&b);
		return NULL;
	}
	Py_BEGIN_ALLOW_THREADS
	st = tpu_agent_load(a->a, b.buf, (size_t)b.len, &rm);
	Py_END_ALLOW_THREADS
	PyBuffer_Release(&b);
	if (st)
		return tpupy_raise(st, "tpu_agent_load");
	r = PyObject_New(tpupy_xremote, RemoteType);
	if (!r) {
		tpu_agent_unload(rm);
		return NULL;
	}
	Py_INCREF(self);
	r->agent = a;
	r->rm = rm;
	return (PyObject *)r;
}

/* A sequence of (handle, offset, length) tuples, or of handles (whole). */
static int elems_arg(tpupy_agent *a, PyObject *list, bool local, void **out, size_t *n)
{
	Py_ssize_t i, len = PySequence_Size(list);
	PyObject *it = NULL;
	void *arr;

	if (len < 0)
		return -1;
	arr = calloc(len ? (size_t)len : 1, local ? sizeof(struct tpu_xfer_local_elem)
						  : sizeof(struct tpu_xfer_remote_elem));
	if (!arr) {
		PyErr_NoMemory();
		return -1;
	}
	for (i = 0; i < len; i++) {
		PyObject *h;
		unsigned long long off = 0, ln = 0;
		bool whole = true;

		it = PySequence_GetItem(list, i);
		if (!it)
			goto bad;
		h = it;
		if (PyTuple_Check(it)) {
			if (!PyArg_ParseTuple(it, "OKK", &h, &off, &ln))
				goto bad;
			whole = false;
		}
		if (local) {
			struct tpu_xfer_local_elem *e = (struct tpu_xfer_local_elem *)arr + i;
			tpupy_xreg *r = (tpupy_xreg *)h;

			if (!PyObject_TypeCheck(h, RegType) || r->agent != a || !r->reg)
				goto type;
			*e = (struct tpu_xfer_local_elem){ r->reg, off,
							   whole ? r->view.meta.nbytes : ln };
		} else {
			struct tpu_xfer_remote_elem *e = (struct tpu_xfer_remote_elem *)arr + i;
			tpupy_xremote *r = (tpupy_xremote *)h;

			if (!PyObject_TypeCheck(h, RemoteType) || r->agent != a || !r->rm)
				goto type;
			*e = (struct tpu_xfer_remote_elem){ r->rm, off,
							    whole ? tpu_xfer_remote_size(r->rm) : ln };
		}
		/* The list keeps the handles alive for the call. */
		Py_DECREF(it);
	}
	*out = arr;
	*n = (size_t)len;
	return 0;
type:
	PyErr_SetString(PyExc_TypeError, local ? "local: Registrations of this agent, or "
						 "(Registration, offset, length)"
					       : "remote: Remotes loaded by this agent, or "
						 "(Remote, offset, length)");
bad:
	Py_XDECREF(it);
	free(arr);
	return -1;
}

/* Parse (local, remote, notif) and prepare the request. */
static int prepare(tpupy_agent *a, PyObject *lo, PyObject *ro, Py_buffer *notif,
		   enum tpu_xfer_op op, struct tpu_xfer_req **req)
{
	void *l = NULL, *r = NULL;
	size_t nl = 0, nr = 0;
	tpu_status st;

	if (agent_check(a) < 0 || elems_arg(a, lo, true, &l, &nl) < 0 ||
	    elems_arg(a, ro, false, &r, &nr) < 0) {
		free(l);
		return -1;
	}
	st = tpu_xfer_prepare(a->a, op, l, nl, r, nr, notif->buf,
			      notif->buf ? (size_t)notif->len : 0, req);
	free(l);
	free(r);
	if (st) {
		tpupy_raise(st, "tpu_xfer_prepare");
		return -1;
	}
	return 0;
}

static PyObject *transfer(PyObject *self, PyObject *args, PyObject *kw, enum tpu_xfer_op op)
{
	static char *kwlist[] = { "local", "remote", "notif", "repeat", NULL };
	tpupy_agent *a = (tpupy_agent *)self;
	PyObject *lo, *ro;
	Py_buffer notif = { 0 };
	struct tpu_xfer_req *req = NULL;
	unsigned int repeat = 1, i;
	tpu_status st = 0;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|z*I", kwlist, &lo, &ro, &notif, &repeat))
		return NULL;
	rc = prepare(a, lo, ro, &notif, op, &req);
	PyBuffer_Release(&notif);
	if (rc < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	for (i = 0; i < repeat && !st; i++) {
		st = tpu_xfer_post(req, NULL, NULL);
		if (!st)
			st = tpu_xfer_wait(req, -1);
	}
	tpu_xfer_release(req);
	Py_END_ALLOW_THREADS
	if (st)
		return tpupy_raise(st, op == TPU_XFER_OP_READ ? "xfer READ" : "xfer WRITE");
	Py_RETURN_NONE;
}

/* _post(write, local, remote, notif=None) -> op: one post, completed later. */
static PyObject *agent_post(PyObject *self, PyObject *args)
{
	tpupy_agent *a = (tpupy_agent *)self;
	PyObject *lo, *ro, *keep, *res;
	Py_buffer notif = { 0 };
	struct tpu_xfer_req *req = NULL;
	int wr, rc;

	if (!PyArg_ParseTuple(args, "pOO|z*:_post", &wr, &lo, &ro, &notif))
		return NULL;
	rc = prepare(a, lo, ro, &notif, wr ? TPU_XFER_OP_WRITE : TPU_XFER_OP_READ, &req);
	PyBuffer_Release(&notif);
	if (rc < 0)
		return NULL;
	/* The lists keep their handles, and so the memory, until the op is done. */
	keep = PyTuple_Pack(2, lo, ro);
	if (!keep) {
		tpu_xfer_release(req);
		return NULL;
	}
	res = tpupy_agent_post_op(a, req, keep);
	Py_DECREF(keep);
	return res;
}

static PyObject *agent_notif_op(PyObject *self, PyObject *unused)
{
	tpupy_agent *a = (tpupy_agent *)self;

	(void)unused;
	if (agent_check(a) < 0)
		return NULL;
	return tpupy_agent_notif_op(a);
}

static PyObject *agent_notif_cancel(PyObject *self, PyObject *op)
{
	return tpupy_agent_notif_cancel((tpupy_agent *)self, op);
}

static PyObject *agent_read(PyObject *self, PyObject *args, PyObject *kw)
{
	return transfer(self, args, kw, TPU_XFER_OP_READ);
}

static PyObject *agent_write(PyObject *self, PyObject *args, PyObject *kw)
{
	return transfer(self, args, kw, TPU_XFER_OP_WRITE);
}

static PyObject *agent_notifications(PyObject *self, PyObject *unused)
{
	tpupy_agent *a = (tpupy_agent *)self;
	PyObject *list, *t;

	(void)unused;
	if (agent_check(a) < 0)
		return NULL;
	list = PyList_New(0);
	while (list && (t = tpupy_agent_notif_take(a)) != Py_None) {
		if (!t || PyList_Append(list, t) < 0) {
			Py_XDECREF(t);
			Py_DECREF(list);
			return NULL;
		}
		Py_DECREF(t);
	}
	if (list)
		Py_DECREF(t);	/* None */
	return list;
}

/* use_domain(fd): join the module domain behind fd (the kmod backend). */
static PyObject *agent_use_domain(PyObject *self, PyObject *arg)
{
	tpupy_agent *a = (tpupy_agent *)self;
	long fd = PyLong_AsLong(arg);
	tpu_status st;

	if (fd == -1 && PyErr_Occurred())
		return NULL;
	if (!a->a) {
		PyErr_SetString(PyExc_ValueError, "the agent is closed");
		return NULL;
	}
	if (fd < 0 || fd > INT_MAX) {
		PyErr_SetString(PyExc_ValueError, "use_domain(fd): a descriptor");
		return NULL;
	}
	st = tpu_agent_use_domain(a->a, (int)fd);
	if (st)
		return tpupy_raise(st, "tpu_agent_use_domain");
	Py_RETURN_NONE;
}

static PyObject *agent_name(PyObject *self, void *unused)
{
	tpupy_agent *a = (tpupy_agent *)self;

	(void)unused;
	return PyUnicode_FromString(a->a ? tpu_agent_name(a->a) : "");
}

static PyMethodDef agent_methods[] = {
	{ "close", agent_close, METH_NOARGS, "close(): destroy the agent" },
	{ "register", (PyCFunction)(void (*)(void))agent_register, METH_VARARGS | METH_KEYWORDS,
	  "register(tensor, read=True, write=False) -> Registration: what peers may do" },
	{ "load", agent_load, METH_VARARGS, "load(blob: bytes) -> Remote" },
	{ "use_domain", agent_use_domain, METH_O,
	  "use_domain(fd): join the module domain behind fd (the kmod backend)" },
	{ "read", (PyCFunction)(void (*)(void))agent_read, METH_VARARGS | METH_KEYWORDS,
	  "read(local, remote, notif=None, repeat=1): remote pieces into local ones; each list "
	  "of handles or (handle, offset, length); blocks" },
	{ "write", (PyCFunction)(void (*)(void))agent_write, METH_VARARGS | METH_KEYWORDS,
	  "write(local, remote, notif=None, repeat=1): local pieces into remote ones; blocks" },
	{ "notifications", agent_notifications, METH_NOARGS,
	  "notifications() -> [(peer, bytes)]: those queued, oldest first" },
	{ "_post", agent_post, METH_VARARGS,
	  "_post(write, local, remote, notif=None) -> op: one post, completed later" },
	{ "_notif_op", agent_notif_op, METH_NOARGS,
	  "_notif_op() -> op: the next notification as (peer, bytes)" },
	{ "_notif_cancel", agent_notif_cancel, METH_O,
	  "_notif_cancel(op) -> bool: give up a waiting notification op (-ECANCELED)" },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef agent_getset[] = {
	{ "name", agent_name, NULL, "the name notifications carry", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot agent_slots[] = {
	{ Py_tp_init, agent_init },
	{ Py_tp_new, PyType_GenericNew },
	{ Py_tp_dealloc, agent_dealloc },
	{ Py_tp_methods, agent_methods },
	{ Py_tp_getset, agent_getset },
	{ Py_tp_doc, "_Agent(context, name=None, backends=None)\n\n"
		     "One-sided transfers (internal: tpu_user.Agent wraps it)." },
	{ 0, NULL },
};

/* ---- Registration ---- */

static PyObject *reg_export(PyObject *self, PyObject *unused)
{
	tpupy_xreg *r = (tpupy_xreg *)self;
	unsigned char blob[TPU_XFER_BLOB_MAX];
	size_t len;
	tpu_status st;

	(void)unused;
	if (!r->reg)
		return tpupy_raise(TPU_E_REVOKED, "deregistered");
	st = tpu_agent_export(r->reg, blob, sizeof(blob), &len);
	if (st)
		return tpupy_raise(st, "tpu_agent_export");
	return PyBytes_FromStringAndSize((const char *)blob, (Py_ssize_t)len);
}

static PyObject *reg_deregister(PyObject *self, PyObject *unused)
{
	tpupy_xreg *r = (tpupy_xreg *)self;
	tpu_status st = 0;

	(void)unused;
	if (r->reg && r->agent && r->agent->a) {
		Py_BEGIN_ALLOW_THREADS
		st = tpu_agent_deregister(r->reg);
		Py_END_ALLOW_THREADS
	}
	r->reg = NULL;
	if (st)
		return tpupy_raise(st, "tpu_agent_deregister");
	Py_RETURN_NONE;
}

static void reg_dealloc(PyObject *self)
{
	tpupy_xreg *r = (tpupy_xreg *)self;

	if (r->reg && r->agent && r->agent->a)
		tpu_agent_deregister(r->reg);
	if (r->has_view)
		tpupy_view_release(&r->view);
	Py_XDECREF((PyObject *)r->agent);
	PyObject_Free(self);
}

static PyObject *reg_nbytes(PyObject *self, void *unused)
{
	(void)unused;
	return PyLong_FromUnsignedLongLong(((tpupy_xreg *)self)->view.meta.nbytes);
}

static PyMethodDef reg_methods[] = {
	{ "export", reg_export, METH_NOARGS, "export() -> bytes: the metadata blob" },
	{ "deregister", reg_deregister, METH_NOARGS,
	  "deregister(): revoke; returns once no peer reaches the memory" },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef reg_getset[] = {
	{ "nbytes", reg_nbytes, NULL, "its length", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot reg_slots[] = {
	{ Py_tp_dealloc, reg_dealloc },
	{ Py_tp_methods, reg_methods },
	{ Py_tp_getset, reg_getset },
	{ Py_tp_doc, "Registration: a tensor registered with an Agent" },
	{ 0, NULL },
};

/* ---- Remote ---- */

static void remote_dealloc(PyObject *self)
{
	tpupy_xremote *r = (tpupy_xremote *)self;

	if (r->agent && r->agent->a)
		tpu_agent_unload(r->rm);
	Py_XDECREF((PyObject *)r->agent);
	PyObject_Free(self);
}

static PyObject *remote_backend(PyObject *self, void *unused)
{
	(void)unused;
	return PyUnicode_FromString(tpu_xfer_remote_backend(((tpupy_xremote *)self)->rm));
}

static PyObject *remote_nbytes(PyObject *self, void *unused)
{
	(void)unused;
	return PyLong_FromUnsignedLongLong(tpu_xfer_remote_size(((tpupy_xremote *)self)->rm));
}

static PyGetSetDef remote_getset[] = {
	{ "backend", remote_backend, NULL, "\"cma\" or \"tcp\"", NULL },
	{ "nbytes", remote_nbytes, NULL, "the remote registration's length", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot remote_slots[] = {
	{ Py_tp_dealloc, remote_dealloc },
	{ Py_tp_getset, remote_getset },
	{ Py_tp_doc, "Remote: a peer's registration, loaded from its blob" },
	{ 0, NULL },
};

static PyType_Spec agent_spec = {
	.name = "tpu_user._Agent",
	.basicsize = sizeof(tpupy_agent),
	.flags = Py_TPFLAGS_DEFAULT,
	.slots = agent_slots,
};
static PyType_Spec reg_spec = {
	.name = "tpu_user.Registration",
	.basicsize = sizeof(tpupy_xreg),
	.flags = Py_TPFLAGS_DEFAULT,
	.slots = reg_slots,
};
static PyType_Spec remote_spec = {
	.name = "tpu_user.Remote",
	.basicsize = sizeof(tpupy_xremote),
	.flags = Py_TPFLAGS_DEFAULT,
	.slots = remote_slots,
};

int tpupy_agent_init(PyObject *m)
{
	AgentType = (PyTypeObject *)PyType_FromSpec(&agent_spec);
	RegType = (PyTypeObject *)PyType_FromSpec(&reg_spec);
	RemoteType = (PyTypeObject *)PyType_FromSpec(&remote_spec);
	if (!AgentType || !RegType || !RemoteType)
		return -1;
	if (PyModule_AddObjectRef(m, "_Agent", (PyObject *)AgentType) < 0 ||
	    PyModule_AddObjectRef(m, "Registration", (PyObject *)RegType) < 0 ||
	    PyModule_AddObjectRef(m, "Remote", (PyObject *)RemoteType) < 0)
		return -1;
	return 0;
}
