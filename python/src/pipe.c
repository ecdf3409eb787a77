// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Listener and Pipe: messages of metadata, payloads and tensors.
 *
 * Each tensor's metadata on the wire is its tpu_user header (header.c),
 * so the reader gets typed tensors; a tensor without one (written by a C
 * program) is read as a flat uint8 tensor.  A read runs on the context's
 * thread from descriptor to data: the descriptor's callback picks the
 * destinations (the caller's tensors of read_into when they match, else
 * fresh allocations) and issues the read at once, all in C.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tpupy.h"

PyTypeObject *tpupy_ListenerType, *tpupy_PipeType;

typedef struct {
	PyObject_HEAD
	tpupy_context *ctx;
	struct tpu_listener *l;
} tpupy_listener;

typedef struct {
	PyObject_HEAD
	tpupy_context *ctx;
	struct tpu_pipe *pipe;
	PyObject *owner;	/* the World when borrowed */
} tpupy_pipe;

/* ---------- Listener ---------- */

static int listener_check(tpupy_listener *l)
{
	if (tpupy_context_check(l->ctx) < 0)
		return -1;
	if (!l->l) {
		tpupy_raise(TPU_E_DESTROYED, "the listener is closed");
		return -1;
	}
	return 0;
}

static void listener_close_now(tpupy_listener *l)
{
	struct tpu_listener *x = l->l;

	l->l = NULL;
	if (!x || l->ctx->pid != getpid() || !l->ctx->ctx)
		return;
	Py_BEGIN_ALLOW_THREADS
	tpu_listener_close(x);
	Py_END_ALLOW_THREADS
}

static void listener_dealloc(PyObject *self)
{
	tpupy_listener *l = (tpupy_listener *)self;
	PyTypeObject *tp = Py_TYPE(self);

	listener_close_now(l);
	Py_CLEAR(l->ctx);
	((freefunc)PyType_GetSlot(tp, Py_tp_free))(self);
	Py_DECREF(tp);
}

PyObject *tpupy_listen(tpupy_context *ctx, PyObject *urls)
{
	const char *u[16];
	Py_ssize_t n = 0;
	tpupy_listener *l;
	struct tpu_listener *x = NULL;
	tpu_status st;

	if (tpupy_context_check(ctx) < 0)
		return NULL;
	if (urls != Py_None) {
		n = PySequence_Size(urls);
		if (n < 0)
			return NULL;
		if (n > 16) {
			PyErr_SetString(PyExc_ValueError, "at most 16 URLs");
			return NULL;
		}
		for (Py_ssize_t i = 0; i < n; i++) {
			PyObject *o = PySequence_GetItem(urls, i);

			if (!o)
				return NULL;
			u[i] = PyUnicode_AsUTF8AndSize(o, NULL);
			Py_DECREF(o);	/* the list keeps the string and its UTF-8 */
			if (!u[i])
				return NULL;
		}
	}
	Py_BEGIN_ALLOW_THREADS
	st = tpu_listener_create(ctx->ctx, n ? u : NULL, (size_t)n, &x);
	Py_END_ALLOW_THREADS
	if (st)
		return tpupy_raise(st, "listen");
	l = (tpupy_listener *)PyType_GenericAlloc(tpupy_ListenerType, 0);
	if (!l) {
		tpu_listener_close(x);
		return NULL;
	}
	l->ctx = (tpupy_context *)Py_NewRef((PyObject *)ctx);
	l->l = x;
	return (PyObject *)l;
}

static PyObject *listener_url(PyObject *self, PyObject *args)
{
	tpupy_listener *l = (tpupy_listener *)self;
	const char *transport = NULL;
	char buf[512];
	tpu_status st;

	if (!PyArg_ParseTuple(args, "|z:url", &transport) || listener_check(l) < 0)
		return NULL;
	st = tpu_listener_url(l->l, transport, buf, sizeof(buf));
	if (st)
		return tpupy_raise(st, "url");
	return PyUnicode_FromString(buf);
}

static void accepted(void *arg, tpu_status st, struct tpu_pipe *pipe)
{
	struct tpupy_cop *c = arg;

	c->accepted = pipe;
	tpupy_cop_complete(c, st);
}

static PyObject *listener_accept_op(PyObject *self, PyObject *unused)
{
	tpupy_listener *l = (tpupy_listener *)self;
	tpupy_op *op;
	tpu_status st;

	(void)unused;
	if (listener_check(l) < 0)
		return NULL;
	op = tpupy_op_new(l->ctx, TPUPY_OP_ACCEPT, self);
	if (!op)
		return NULL;
	st = tpu_listener_accept(l->l, accepted, &op->c);
	if (st) {
		Py_DECREF((PyObject *)op);
		return tpupy_raise(st, "accept");
	}
	tpupy_op_submitted(op);
	return (PyObject *)op;
}

static PyObject *listener_close(PyObject *self, PyObject *unused)
{
	(void)unused;
	listener_close_now((tpupy_listener *)self);
	Py_RETURN_NONE;
}

static PyMethodDef listener_methods[] = {
	{ "url", listener_url, METH_VARARGS,
	  "url(transport=None) -> the URL peers connect to (\"tcp\", \"shm\")" },
	{ "_accept_op", listener_accept_op, METH_NOARGS, "_accept_op() -> _Op" },
	{ "close", listener_close, METH_NOARGS, "close(): stop listening" },
	{ NULL, NULL, 0, NULL },
};

static PyType_Slot listener_slots[] = {
	{ Py_tp_dealloc, listener_dealloc },
	{ Py_tp_methods, listener_methods },
	{ Py_tp_doc, "Accepts pipes on one or more URLs." },
	{ 0, NULL },
};

static PyType_Spec listener_spec = {
	.name = "tpu_user._Listener",
	.basicsize = sizeof(tpupy_listener),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
	.slots = listener_slots,
};

/* ---------- Pipe ---------- */

static int pipe_check(tpupy_pipe *p)
{
	if (tpupy_context_check(p->ctx) < 0)
		return -1;
	if (!p->pipe || (p->owner && !tpupy_world_alive(p->owner))) {
		tpupy_raise(TPU_E_DESTROYED, "the pipe (or its world) is closed");
		return -1;
	}
	return 0;
}

PyObject *tpupy_pipe_wrap(tpupy_context *ctx, struct tpu_pipe *pipe, PyObject *owner)
{
	tpupy_pipe *p = (tpupy_pipe *)PyType_GenericAlloc(tpupy_PipeType, 0);

	if (!p) {
		if (!owner)
			tpu_pipe_close(pipe);
		return NULL;
	}
	p->ctx = (tpupy_context *)Py_NewRef((PyObject *)ctx);
	p->pipe = pipe;
	p->owner = owner ? Py_NewRef(owner) : NULL;
	return (PyObject *)p;
}

static void pipe_close_now(tpupy_pipe *p)
{
	struct tpu_pipe *x = p->pipe;

	p->pipe = NULL;
	if (!x || p->owner || p->ctx->pid != getpid() || !p->ctx->ctx)
		return;
	Py_BEGIN_ALLOW_THREADS
	tpu_pipe_close(x);
	Py_END_ALLOW_THREADS
}

static void pipe_dealloc(PyObject *self)
{
	tpupy_pipe *p = (tpupy_pipe *)self;
	PyTypeObject *tp = Py_TYPE(self);

	pipe_close_now(p);
	Py_CLEAR(p->owner);
	Py_CLEAR(p->ctx);
	((freefunc)PyType_GetSlot(tp, Py_tp_free))(self);
	Py_DECREF(tp);
}

PyObject *tpupy_connect(tpupy_context *ctx, const char *url)
{
	struct tpu_pipe *pipe = NULL;
	tpu_status st;

	if (tpupy_context_check(ctx) < 0)
		return NULL;
	st = tpu_pipe_connect(ctx->ctx, url, &pipe);
	if (st)
		return tpupy_raise(st, "connect");
	return tpupy_pipe_wrap(ctx, pipe, NULL);
}

static void written(void *arg, tpu_status st, struct tpu_message *msg)
{
	(void)msg;
	tpupy_cop_complete(arg, st);
}

/*
 * _write_op(tensors, metadata, payloads): the message's memory (the
 * structure, headers, the tensors' views) lives in the op until it is done.
 */
static PyObject *pipe_write_op(PyObject *self, PyObject *args)
{
	tpupy_pipe *p = (tpupy_pipe *)self;
	PyObject *tensors, *payloads, *seq = NULL, *pseq = NULL;
	Py_buffer meta = { 0 };
	Py_ssize_t n, np;
	struct tpu_message *msg;
	unsigned char *hdrs;
	tpupy_op *op = NULL;
	tpu_status st;

	if (!PyArg_ParseTuple(args, "Oy*O:_write_op", &tensors, &meta, &payloads))
		return NULL;
	if (pipe_check(p) < 0)
		goto fail;
	seq = PySequence_Tuple(tensors);
	pseq = seq ? PySequence_Tuple(payloads) : NULL;
	if (!pseq)
		goto fail;
	n = PyTuple_Size(seq);
	np = PyTuple_Size(pseq);
	if (n > TPU_PIPE_MAX_TENSORS || np > TPU_PIPE_MAX_PAYLOADS ||
	    (size_t)meta.len > TPU_PIPE_MAX_METADATA) {
		PyErr_Format(PyExc_ValueError,
			     "a message holds at most %d tensors, %d payloads and %u bytes of "
			     "metadata", TPU_PIPE_MAX_TENSORS, TPU_PIPE_MAX_PAYLOADS,
			     TPU_PIPE_MAX_METADATA);
		goto fail;
	}
	op = tpupy_op_new(p->ctx, TPUPY_OP_WRITE, self);
	if (!op)
		goto fail;
	op->keep = Py_BuildValue("(OOO)", seq, pseq, meta.obj ? meta.obj : Py_None);
	msg = calloc(1, sizeof(*msg) + (size_t)n * (sizeof(struct tpu_message_tensor) +
						    TPUPY_HDR_MAX) +
			   (size_t)np * sizeof(struct tpu_payload));
	op->c.into = calloc((size_t)(n + np) + 1, sizeof(struct tpupy_view));
	if (!op->keep || !msg || !op->c.into) {
		free(msg);
		PyErr_NoMemory();
		goto fail;
	}
	op->c.msg = msg;
	msg->tensors = (struct tpu_message_tensor *)(msg + 1);
	msg->payloads = (struct tpu_payload *)(msg->tensors + n);
	hdrs = (unsigned char *)(msg->payloads + np);
	msg->ntensors = (size_t)n;
	msg->npayloads = (size_t)np;
	msg->metadata = meta.buf;
	msg->metadata_len = (size_t)meta.len;
	for (Py_ssize_t i = 0; i < n; i++) {
		struct tpupy_view *v = &op->c.into[i];
		struct tpu_message_tensor *t = &msg->tensors[i];

		if (tpupy_view_get(PyTuple_GetItem(seq, i), false, v) < 0)
			goto fail;
		op->c.ninto = (size_t)i + 1;
		t->data = v->meta.nbytes ? v->data : NULL;
		t->len = v->meta.nbytes;
		t->metadata = hdrs + (size_t)i * TPUPY_HDR_MAX;
		t->metadata_len = tpupy_hdr_encode(&v->meta, false, hdrs + (size_t)i * TPUPY_HDR_MAX);
	}
	for (Py_ssize_t i = 0; i < np; i++) {
		struct tpupy_view *v = &op->c.into[n + i];

		if (tpupy_view_get(PyTuple_GetItem(pseq, i), false, v) < 0)
			goto fail;
		op->c.ninto = (size_t)(n + i) + 1;
		msg->payloads[i].data = v->meta.nbytes ? v->data : NULL;
		msg->payloads[i].len = v->meta.nbytes;
	}
	st = tpu_pipe_write(p->pipe, msg, written, &op->c);
	if (st) {
		tpupy_raise(st, "write");
		goto fail;
	}
	PyBuffer_Release(&meta);
	Py_DECREF(seq);
	Py_DECREF(pseq);
	tpupy_op_submitted(op);
	return (PyObject *)op;
fail:
	PyBuffer_Release(&meta);
	Py_XDECREF(seq);
	Py_XDECREF(pseq);
	Py_XDECREF((PyObject *)op);
	return NULL;
}

static void read_done(void *arg, tpu_status st, struct tpu_message *msg)
{
	struct tpupy_cop *c = arg;

	(void)msg;
	c->msg = NULL;	/* the pipe frees the descriptor once this returns */
	tpupy_cop_complete(c, st ? st : c->status);
}

/* Context thread: the descriptor is here; choose destinations, then read. */
static void descriptor_in(void *arg, tpu_status st, struct tpu_message *d)
{
	struct tpupy_cop *c = arg;
	size_t n, np, hlen;
	bool inl;

	if (st) {
		tpupy_cop_complete(c, st);
		return;
	}
	n = d->ntensors;
	np = d->npayloads;
	c->msg = d;
	c->rdata = calloc(n + np + 1, sizeof(void *));
	c->rmeta = calloc(n + np + 1, sizeof(*c->rmeta));
	c->rmetadata = malloc(d->metadata_len + 1);
	if (!c->rdata || !c->rmeta || !c->rmetadata)
		goto nomem;
	c->nr = n;
	c->len = np;
	memcpy(c->rmetadata, d->metadata, d->metadata_len);
	c->rmetadata_len = d->metadata_len;
	if (c->into && c->ninto != n) {
		snprintf(c->why, sizeof(c->why), "the message has %zu tensors, read_into gave %zu; the message was dropped.",
			 n, c->ninto);
		c->status = -EMSGSIZE;
	}
	for (size_t i = 0; i < n; i++) {
		struct tpu_message_tensor *t = &d->tensors[i];
		struct tpupy_meta *m = &c->rmeta[i];

		if (tpupy_hdr_decode(t->metadata, t->metadata_len, m, &hlen, &inl) ||
		    m->nbytes != t->len || inl) {
			/* not ours: raw bytes */
			memset(m, 0, sizeof(*m));
			m->dtype = (DLDataType){ kDLUInt, 8, 1 };
			m->ndim = 1;
			m->shape[0] = (int64_t)t->len;
			m->nbytes = t->len;
		}
		m->device = (DLDevice){ kDLCPU, 0 };
		if (c->into && !c->status && i < c->ninto) {
			const struct tpupy_meta *w = &c->into[i].meta;

			if (w->dtype.code == m->dtype.code && w->dtype.bits == m->dtype.bits &&
			    w->nbytes == m->nbytes) {
				t->data = c->into[i].data;
				continue;
			}
			snprintf(c->why, sizeof(c->why),
				 "tensor %zu is %s of %llu bytes, read_into gave %s of %llu bytes; "
				 "the message was dropped.",
				 i, tpupy_dtype_name(m->dtype), (unsigned long long)m->nbytes,
				 tpupy_dtype_name(w->dtype), (unsigned long long)w->nbytes);
			c->status = -EMSGSIZE;
		}
		c->rdata[i] = tpupy_alloc(t->len);
		if (!c->rdata[i])
			goto nomem;
		t->data = c->rdata[i];
	}
	for (size_t i = 0; i < np; i++) {
		c->rdata[n + i] = malloc(d->payloads[i].len + 1);
		if (!c->rdata[n + i])
			goto nomem;
		d->payloads[i].data = c->rdata[n + i];
		c->rmeta[n + i].nbytes = d->payloads[i].len;
	}
	st = tpu_pipe_read(c->pipe, d, read_done, c);
	if (st)
		tpupy_cop_complete(c, st);
	return;
nomem:
	tpupy_cop_complete(c, -ENOMEM);
}

static PyObject *pipe_read_op(PyObject *self, PyObject *args)
{
	tpupy_pipe *p = (tpupy_pipe *)self;
	PyObject *outs = Py_None, *seq = NULL;
	tpupy_op *op;
	tpu_status st;

	if (!PyArg_ParseTuple(args, "|O:_read_op", &outs) || pipe_check(p) < 0)
		return NULL;
	op = tpupy_op_new(p->ctx, TPUPY_OP_READ, self);
	if (!op)
		return NULL;
	op->c.pipe = p->pipe;
	if (outs != Py_None) {
		Py_ssize_t n;

		seq = PySequence_Tuple(outs);
		if (!seq)
			goto fail;
		n = PyTuple_Size(seq);
		op->keep = seq;
		op->c.into = calloc((size_t)n + 1, sizeof(struct tpupy_view));
		if (!op->c.into) {
			PyErr_NoMemory();
			goto fail;
		}
		for (Py_ssize_t i = 0; i < n; i++) {
			if (tpupy_view_get(PyTuple_GetItem(seq, i), true,
					   &op->c.into[i]) < 0)
				goto fail;
			op->c.ninto = (size_t)i + 1;
		}
		op->c.ninto = (size_t)n;
	}
	st = tpu_pipe_read_descriptor(p->pipe, descriptor_in, &op->c);
	if (st) {
		tpupy_raise(st, "read");
		goto fail;
	}
	tpupy_op_submitted(op);
	return (PyObject *)op;
fail:
	Py_DECREF((PyObject *)op);
	return NULL;
}

static PyObject *bytes_or_empty(const void *p, size_t len)
{
	return PyBytes_FromStringAndSize(len ? p : "", (Py_ssize_t)len);
}

static void release_views(struct tpupy_cop *c)
{
	for (size_t i = 0; c->into && i < c->ninto; i++)
		tpupy_view_release(&c->into[i]);
}

PyObject *tpupy_pipe_op_result(tpupy_op *op)
{
	struct tpupy_cop *c = &op->c;
	PyObject *tensors, *payloads, *r;

	if (c->kind == TPUPY_OP_WRITE) {
		release_views(c);
		Py_RETURN_NONE;
	}
	if (c->kind == TPUPY_OP_ACCEPT) {
		struct tpu_pipe *pipe = c->accepted;

		c->accepted = NULL;
		return tpupy_pipe_wrap(((tpupy_listener *)op->owner)->ctx, pipe, NULL);
	}
	tensors = PyList_New((Py_ssize_t)c->nr);
	payloads = PyList_New((Py_ssize_t)c->len);
	if (!tensors || !payloads)
		goto fail;
	for (size_t i = 0; i < c->nr; i++) {
		PyObject *t;

		if (c->rdata[i]) {
			t = tpupy_tensor_new(c->rdata[i], &c->rmeta[i]);
			c->rdata[i] = NULL;
		} else {
			t = Py_NewRef(PyTuple_GetItem(op->keep, (Py_ssize_t)i));
		}
		if (!t)
			goto fail;
		PyList_SetItem(tensors, (Py_ssize_t)i, t);
	}
	for (size_t i = 0; i < c->len; i++) {
		PyObject *b = bytes_or_empty(c->rdata[c->nr + i], c->rmeta[c->nr + i].nbytes);

		if (!b)
			goto fail;
		PyList_SetItem(payloads, (Py_ssize_t)i, b);
	}
	release_views(c);
	r = Py_BuildValue("(NNN)", bytes_or_empty(c->rmetadata, c->rmetadata_len), tensors,
			  payloads);
	return r;
fail:
	Py_XDECREF(tensors);
	Py_XDECREF(payloads);
	return NULL;
}

void tpupy_pipe_op_free(struct tpupy_cop *c)
{
	if (c->kind == TPUPY_OP_WRITE)
		free(c->msg);
	c->msg = NULL;
	for (size_t i = 0; c->rdata && i < c->nr + c->len; i++) {
		if (i < c->nr)
			tpupy_free(c->rdata[i], c->rmeta[i].nbytes);
		else
			free(c->rdata[i]);	/* payloads */
	}
	free(c->rdata);
	free(c->rmeta);
	free(c->rmetadata);
	release_views(c);
	free(c->into);
	c->rdata = NULL;
	c->rmeta = NULL;
	c->rmetadata = NULL;
	c->into = NULL;
	if (c->accepted)
		tpu_pipe_close(c->accepted);
	c->accepted = NULL;
}

static PyObject *pipe_close(PyObject *self, PyObject *unused)
{
	(void)unused;
	pipe_close_now((tpupy_pipe *)self);
	Py_RETURN_NONE;
}

static PyObject *pipe_transport(PyObject *self, PyObject *unused)
{
	tpupy_pipe *p = (tpupy_pipe *)self;

	(void)unused;
	if (pipe_check(p) < 0)
		return NULL;
	return PyUnicode_FromString(tpu_pipe_transport(p->pipe));
}

static PyObject *pipe_channel(PyObject *self, PyObject *unused)
{
	tpupy_pipe *p = (tpupy_pipe *)self;

	(void)unused;
	if (pipe_check(p) < 0)
		return NULL;
	return PyUnicode_FromString(tpu_pipe_channel(p->pipe, TPU_DEVICE_CPU, TPU_DEVICE_CPU));
}

static PyMethodDef pipe_methods[] = {
	{ "_write_op", pipe_write_op, METH_VARARGS, "_write_op(tensors, metadata, payloads) -> _Op" },
	{ "_read_op", pipe_read_op, METH_VARARGS, "_read_op(out=None) -> _Op" },
	{ "transport", pipe_transport, METH_NOARGS, "transport() -> \"tcp\", \"shm\" or \"\"" },
	{ "channel", pipe_channel, METH_NOARGS,
	  "channel() -> the channel CPU tensors take (\"kmod\", \"cma\", \"basic\"...)" },
	{ "close", pipe_close, METH_NOARGS, "close(): pending operations fail" },
	{ NULL, NULL, 0, NULL },
};

static PyType_Slot pipe_slots[] = {
	{ Py_tp_dealloc, pipe_dealloc },
	{ Py_tp_methods, pipe_methods },
	{ Py_tp_doc, "One end of a pipe." },
	{ 0, NULL },
};

static PyType_Spec pipe_spec = {
	.name = "tpu_user._Pipe",
	.basicsize = sizeof(tpupy_pipe),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
	.slots = pipe_slots,
};

int tpupy_pipe_init(PyObject *m)
{
	tpupy_ListenerType = (PyTypeObject *)PyType_FromSpec(&listener_spec);
	tpupy_PipeType = (PyTypeObject *)PyType_FromSpec(&pipe_spec);
	if (!tpupy_ListenerType || !tpupy_PipeType)
		return -1;
	if (PyModule_AddObjectRef(m, "_Listener", (PyObject *)tpupy_ListenerType) < 0)
		return -1;
	return PyModule_AddObjectRef(m, "_Pipe", (PyObject *)tpupy_PipeType);
}
