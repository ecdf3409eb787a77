// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * World: ranks formed from the launcher's variables (torchrun's RANK,
 * WORLD_SIZE, MASTER_ADDR, MASTER_PORT; Open MPI's), and collectives over
 * the world's rendezvous: all_reduce, broadcast, all_gather.
 *
 * Every rank calls the collectives in the same order.  Each call is one
 * step (its id counts up) and an instance of its own (its key from the
 * step), so that every rank picks the same keys without talking whatever
 * it passes: the library's resolution then compares what the ranks pass
 * on every call, and a mismatch (sizes, dtypes, op, source, collective)
 * fails every rank at once with the reason, leaving the world usable.
 * (Keys per distinct parameters, as before, let ranks that disagree wait
 * on different instances until the timeout aborted the world.)
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tpupy.h"

PyTypeObject *tpupy_WorldType;

typedef struct {
	PyObject_HEAD
	tpupy_context *ctx;
	struct tpu_world *w;
	char job[64];
} tpupy_world;

int tpupy_world_alive(PyObject *obj)
{
	return Py_IS_TYPE(obj, tpupy_WorldType) && ((tpupy_world *)obj)->w != NULL;
}

static int world_check(tpupy_world *w)
{
	if (tpupy_context_check(w->ctx) < 0)
		return -1;
	if (!w->w) {
		tpupy_raise(TPU_E_DESTROYED, "the world is closed");
		return -1;
	}
	return 0;
}

static void world_close_now(tpupy_world *w)
{
	struct tpu_world *x = w->w;

	w->w = NULL;
	if (!x || w->ctx->pid != getpid() || !w->ctx->ctx)
		return;
	Py_BEGIN_ALLOW_THREADS
	tpu_world_destroy(x);
	Py_END_ALLOW_THREADS
}

static void world_dealloc(PyObject *self)
{
	tpupy_world *w = (tpupy_world *)self;
	PyTypeObject *tp = Py_TYPE(self);

	world_close_now(w);
	Py_CLEAR(w->ctx);
	((freefunc)PyType_GetSlot(tp, Py_tp_free))(self);
	Py_DECREF(tp);
}

/* _World(ctx, job=None, timeout=None) */
static int world_init(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "context", "job", "timeout", NULL };
	tpupy_world *w = (tpupy_world *)self;
	struct tpu_world_options o = { 0 };
	PyObject *ctx, *tmo = Py_None;
	const char *job = NULL;
	uint64_t tns;
	tpu_status st;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|zO:World", kwlist, tpupy_ContextType, &ctx,
					 &job, &tmo) ||
	    tpupy_timeout_arg(tmo, &tns) < 0)
		return -1;
	if (w->w) {
		PyErr_SetString(PyExc_RuntimeError, "World already initialised");
		return -1;
	}
	Py_XDECREF((PyObject *)w->ctx);
	w->ctx = (tpupy_context *)Py_NewRef(ctx);
	if (tpupy_context_check(w->ctx) < 0)
		return -1;
	snprintf(w->job, sizeof(w->job), "%s", job ? job : "worker");
	o.job = w->job;
	o.timeout_ms = (uint32_t)(tns / 1000000u);
	Py_BEGIN_ALLOW_THREADS
	st = tpu_world_create(w->ctx->ctx, &o, &w->w);
	Py_END_ALLOW_THREADS
	if (st) {
		w->w = NULL;
		tpupy_raise(st, "world (see the launcher's variables: RANK, WORLD_SIZE, "
				"MASTER_ADDR, MASTER_PORT)");
		return -1;
	}
	return 0;
}

static PyObject *world_info(PyObject *self, PyObject *unused)
{
	tpupy_world *w = (tpupy_world *)self;
	const struct tpu_world_info *i;

	(void)unused;
	if (world_check(w) < 0)
		return NULL;
	i = tpu_world_get_info(w->w);
	return Py_BuildValue("{s:i,s:i,s:i,s:i,s:s,s:s,s:i,s:s}", "rank", i->rank, "size", i->size,
			     "local_rank", i->local_rank, "local_size", i->local_size,
			     "convention", i->convention, "store_host", i->store_host,
			     "store_port", (int)i->store_port, "store_from", i->store_from);
}

static PyObject *world_rendezvous(PyObject *self, PyObject *unused)
{
	tpupy_world *w = (tpupy_world *)self;

	(void)unused;
	if (world_check(w) < 0)
		return NULL;
	return tpupy_rdv_wrap(w->ctx, tpu_world_rendezvous(w->w), self);
}

static PyObject *world_pipe(PyObject *self, PyObject *args)
{
	tpupy_world *w = (tpupy_world *)self;
	struct tpu_pipe *pipe = NULL;
	tpu_status st;
	int rank;

	if (!PyArg_ParseTuple(args, "i:pipe", &rank) || world_check(w) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	st = tpu_world_pipe(w->w, rank, &pipe);
	Py_END_ALLOW_THREADS
	if (st)
		return tpupy_raise(st, "pipe");
	return tpupy_pipe_wrap(w->ctx, pipe, self);
}

static PyObject *world_barrier(PyObject *self, PyObject *unused)
{
	tpupy_world *w = (tpupy_world *)self;
	tpu_status st;

	(void)unused;
	if (world_check(w) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	st = tpu_world_barrier(w->w);
	Py_END_ALLOW_THREADS
	if (st)
		return tpupy_raise(st, "barrier");
	Py_RETURN_NONE;
}

/* exchange_blobs(blob) -> [bytes]: every rank's blob (tpu_world_exchange_blobs). */
static PyObject *world_exchange_blobs(PyObject *self, PyObject *args)
{
	tpupy_world *w = (tpupy_world *)self;
	size_t n, *lens = NULL;
	PyObject *list = NULL;
	unsigned char *out;
	tpu_status st;
	Py_buffer b;

	if (!PyArg_ParseTuple(args, "y*:exchange_blobs", &b))
		return NULL;
	if (world_check(w) < 0) {
		PyBuffer_Release(&b);
		return NULL;
	}
	/* Room for the longest blob any rank may send: freed before returning. */
	n = (size_t)tpu_world_get_info(w->w)->size;
	out = malloc(n * TPU_WORLD_BLOB_MAX);
	lens = calloc(n, sizeof(*lens));
	if (!out || !lens) {
		PyBuffer_Release(&b);
		free(out);
		free(lens);
		return PyErr_NoMemory();
	}
	Py_BEGIN_ALLOW_THREADS
	st = tpu_world_exchange_blobs(w->w, b.buf, (size_t)b.len, out, TPU_WORLD_BLOB_MAX, lens);
	Py_END_ALLOW_THREADS
	PyBuffer_Release(&b);
	if (st) {
		tpupy_raise(st, "exchange_blobs");
		goto out;
	}
	list = PyList_New((Py_ssize_t)n);
	for (size_t r = 0; list && r < n; r++) {
		PyObject *o = PyBytes_FromStringAndSize((const char *)out + r * TPU_WORLD_BLOB_MAX,
						      (Py_ssize_t)lens[r]);

		if (!o || PyList_SetItem(list, (Py_ssize_t)r, o) < 0)
			Py_CLEAR(list);
	}
out:
	free(out);
	free(lens);
	return list;
}

static int coll_dtype(DLDataType dt)
{
	switch (dt.code) {
	case kDLFloat:
		return dt.bits == 32 ? TPU_DT_FLOAT32 : dt.bits == 64 ? TPU_DT_FLOAT64 :
		       dt.bits == 16 ? TPU_DT_FLOAT16 : -1;
	case kDLBfloat:
		return dt.bits == 16 ? TPU_DT_BFLOAT16 : -1;
	case kDLInt:
		return dt.bits == 32 ? TPU_DT_INT32 : dt.bits == 64 ? TPU_DT_INT64 : -1;
	case kDLUInt:
		return dt.bits == 8 ? TPU_DT_UINT8 : -1;
	default:
		return -1;
	}
}

static int reduce_op(const char *name, int *op, int *final)
{
	static const char *const names[] = { "sum", "prod", "min", "max" };

	*final = TPU_FINAL_NONE;
	if (!strcmp(name, "mean")) {
		*op = TPU_OP_SUM;
		*final = TPU_FINAL_DIV;
		return 0;
	}
	for (int i = 0; i < 4; i++)
		if (!strcmp(name, names[i])) {
			*op = i;
			return 0;
		}
	PyErr_Format(PyExc_ValueError, "op is sum, prod, min, max or mean, not %s", name);
	return -1;
}

/*
 * The world's collectives (tpu_world_all_reduce and the rest): over the
 * shared segment where every rank is on this host, as the C API's.
 */
static PyObject *world_raise(tpupy_world *w, tpu_status st, const char *what)
{
	char why[256] = "";

	tpu_world_last_reason(w->w, why, sizeof(why));
	return tpupy_raise(st, why[0] ? why : what);
}

static int reduce_dtype(const struct tpupy_view *v)
{
	int dt = coll_dtype(v->meta.dtype);

	if (dt < 0)
		PyErr_Format(PyExc_TypeError, "collectives take float32, float64, float16, bfloat16, "
			     "int32, int64 or uint8, not %s", tpupy_dtype_name(v->meta.dtype));
	return dt;
}

/* What only copies takes any dtype: its bytes, where the dtype is not one reductions know. */
static enum tpu_dtype copy_dtype(const struct tpupy_view *v, uint64_t *count)
{
	int dt = coll_dtype(v->meta.dtype);

	*count = dt < 0 ? v->meta.nbytes : tpupy_meta_count(&v->meta);
	return dt < 0 ? TPU_DT_UINT8 : (enum tpu_dtype)dt;
}

static PyObject *world_all_reduce(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "tensor", "op", "timeout", NULL };
	tpupy_world *w = (tpupy_world *)self;
	const char *opname = "sum";
	struct tpupy_view v;
	PyObject *t, *tmo = Py_None;
	uint64_t tns;
	int op, final, dt;
	tpu_status st;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|sO:all_reduce", kwlist, &t, &opname, &tmo) ||
	    tpupy_timeout_arg(tmo, &tns) < 0 ||
	    world_check(w) < 0 || reduce_op(opname, &op, &final) < 0 ||
	    tpupy_view_get(t, true, &v) < 0)
		return NULL;
	dt = reduce_dtype(&v);
	if (dt < 0) {
		tpupy_view_release(&v);
		return NULL;
	}
	Py_BEGIN_ALLOW_THREADS
	st = tpu_world_all_reduce(w->w, v.data, v.data, tpupy_meta_count(&v.meta),
				  (enum tpu_dtype)dt, (enum tpu_reduce_op)op,
				  (enum tpu_final_op)final, tns);
	Py_END_ALLOW_THREADS
	tpupy_view_release(&v);
	if (st)
		return world_raise(w, st, "all_reduce");
	return Py_NewRef(t);
}

static PyObject *world_broadcast(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "tensor", "src", "timeout", NULL };
	tpupy_world *w = (tpupy_world *)self;
	struct tpupy_view v;
	PyObject *t, *tmo = Py_None;
	enum tpu_dtype dt;
	uint64_t tns, count;
	tpu_status st;
	int src = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|iO:broadcast", kwlist, &t, &src, &tmo) ||
	    tpupy_timeout_arg(tmo, &tns) < 0 || world_check(w) < 0)
		return NULL;
	if (src < 0 || src >= tpu_world_get_info(w->w)->size) {
		PyErr_Format(PyExc_ValueError, "src %d is not a rank of this world", src);
		return NULL;
	}
	if (tpupy_view_get(t, true, &v) < 0)
		return NULL;
	dt = copy_dtype(&v, &count);
	Py_BEGIN_ALLOW_THREADS
	st = tpu_world_broadcast(w->w, v.data, count, dt, src, tns);
	Py_END_ALLOW_THREADS
	tpupy_view_release(&v);
	if (st)
		return world_raise(w, st, "broadcast");
	return Py_NewRef(t);
}

static PyObject *world_all_gather(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "tensor", "timeout", NULL };
	tpupy_world *w = (tpupy_world *)self;
	struct tpupy_view v;
	struct tpupy_meta m;
	PyObject *t, *tmo = Py_None;
	enum tpu_dtype dt;
	uint64_t tns, count;
	tpu_status st;
	int n;
	void *out;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:all_gather", kwlist, &t, &tmo) ||
	    tpupy_timeout_arg(tmo, &tns) < 0 ||
	    world_check(w) < 0 || tpupy_view_get(t, false, &v) < 0)
		return NULL;
	n = tpu_world_get_info(w->w)->size;
	if (v.meta.ndim >= TPUPY_MAX_DIMS) {
		tpupy_view_release(&v);
		PyErr_SetString(PyExc_ValueError, "too many dimensions");
		return NULL;
	}
	m = v.meta;
	m.ndim = v.meta.ndim + 1;
	m.shape[0] = n;
	memcpy(m.shape + 1, v.meta.shape, sizeof(int64_t) * (size_t)v.meta.ndim);
	m.nbytes = v.meta.nbytes * (uint64_t)n;
	out = tpupy_alloc(m.nbytes);
	if (!out) {
		tpupy_view_release(&v);
		return PyErr_NoMemory();
	}
	dt = copy_dtype(&v, &count);
	Py_BEGIN_ALLOW_THREADS
	st = tpu_world_all_gather(w->w, v.data, out, count, dt, tns);
	Py_END_ALLOW_THREADS
	tpupy_view_release(&v);
	if (st) {
		tpupy_free(out, m.nbytes);
		return world_raise(w, st, "all_gather");
	}
	return tpupy_tensor_new(out, &m);
}

static PyObject *world_reduce_scatter(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "tensor", "op", "timeout", NULL };
	tpupy_world *w = (tpupy_world *)self;
	const char *opname = "sum";
	PyObject *t, *tmo = Py_None;
	const struct tpu_world_info *info;
	struct tpupy_view v;
	struct tpupy_meta m;
	uint64_t ns;
	size_t len, esize;
	int op, final, dt;
	tpu_status st;
	void *out;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|sO:reduce_scatter", kwlist, &t, &opname,
					 &tmo) ||
	    world_check(w) < 0 || reduce_op(opname, &op, &final) < 0 ||
	    tpupy_timeout_arg(tmo, &ns) < 0 || tpupy_view_get(t, false, &v) < 0)
		return NULL;
	dt = reduce_dtype(&v);
	if (dt < 0) {
		tpupy_view_release(&v);
		return NULL;
	}
	info = tpu_world_get_info(w->w);
	tpu_coll_chunk(tpupy_meta_count(&v.meta), info->size, info->rank, &len);
	esize = tpu_dtype_size((enum tpu_dtype)dt);
	m = v.meta;
	m.ndim = 1;
	m.shape[0] = (int64_t)len;
	m.nbytes = len * esize;
	out = tpupy_alloc(m.nbytes ? m.nbytes : 1);
	if (!out) {
		tpupy_view_release(&v);
		return PyErr_NoMemory();
	}
	Py_BEGIN_ALLOW_THREADS
	st = tpu_world_reduce_scatter(w->w, v.data, out, tpupy_meta_count(&v.meta),
				      (enum tpu_dtype)dt, (enum tpu_reduce_op)op,
				      (enum tpu_final_op)final, ns);
	Py_END_ALLOW_THREADS
	tpupy_view_release(&v);
	if (st) {
		tpupy_free(out, m.nbytes ? m.nbytes : 1);
		return world_raise(w, st, "reduce_scatter");
	}
	return tpupy_tensor_new(out, &m);
}

static PyObject *world_send(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "tensor", "dst", "timeout", NULL };
	tpupy_world *w = (tpupy_world *)self;
	PyObject *t, *tmo = Py_None;
	struct tpupy_view v;
	uint64_t ns;
	tpu_status st;
	int dst;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "Oi|O:send", kwlist, &t, &dst, &tmo) ||
	    world_check(w) < 0 || tpupy_timeout_arg(tmo, &ns) < 0 ||
	    tpupy_view_get(t, false, &v) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	st = tpu_world_send(w->w, dst, v.data, v.meta.nbytes, ns);
	Py_END_ALLOW_THREADS
	tpupy_view_release(&v);
	if (st)
		return world_raise(w, st, "send");
	Py_RETURN_NONE;
}

static PyObject *world_recv(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "tensor", "src", "timeout", NULL };
	tpupy_world *w = (tpupy_world *)self;
	PyObject *t, *tmo = Py_None;
	struct tpupy_view v;
	size_t len = 0;
	uint64_t ns;
	tpu_status st;
	int src;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "Oi|O:recv", kwlist, &t, &src, &tmo) ||
	    world_check(w) < 0 || tpupy_timeout_arg(tmo, &ns) < 0 ||
	    tpupy_view_get(t, true, &v) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	st = tpu_world_recv(w->w, src, v.data, v.meta.nbytes, &len, ns);
	Py_END_ALLOW_THREADS
	tpupy_view_release(&v);
	if (st)
		return world_raise(w, st, "recv");
	return PyLong_FromSize_t(len);
}

static PyObject *world_barrier_timeout(PyObject *self, PyObject *args)
{
	tpupy_world *w = (tpupy_world *)self;
	PyObject *tmo = Py_None;
	uint64_t ns;
	tpu_status st;

	if (!PyArg_ParseTuple(args, "|O:barrier_timeout", &tmo) || world_check(w) < 0 ||
	    tpupy_timeout_arg(tmo, &ns) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	st = tpu_world_barrier_timeout(w->w, ns);
	Py_END_ALLOW_THREADS
	if (st)
		return world_raise(w, st, "barrier");
	Py_RETURN_NONE;
}

static PyObject *world_device_name(PyObject *self, PyObject *args)
{
	tpupy_world *w = (tpupy_world *)self;
	char name[160];
	tpu_status st;
	int rank;

	if (!PyArg_ParseTuple(args, "i:device_name", &rank) || world_check(w) < 0)
		return NULL;
	st = tpu_world_device_name(w->w, rank, name, sizeof(name));
	if (st)
		return tpupy_raise(st, "device_name");
	return PyUnicode_FromString(name);
}

static PyObject *world_coll_path(PyObject *self, PyObject *unused)
{
	tpupy_world *w = (tpupy_world *)self;

	(void)unused;
	if (world_check(w) < 0)
		return NULL;
	return PyUnicode_FromString(tpu_world_coll_path(w->w));
}

static PyObject *world_close(PyObject *self, PyObject *unused)
{
	(void)unused;
	world_close_now((tpupy_world *)self);
	Py_RETURN_NONE;
}

static PyMethodDef world_methods[] = {
	{ "info", world_info, METH_NOARGS, "info() -> dict: rank, size, local_rank, ..." },
	{ "rendezvous", world_rendezvous, METH_NOARGS,
	  "rendezvous() -> the world's remote rendezvous (owned by the world)" },
	{ "pipe", world_pipe, METH_VARARGS, "pipe(rank) -> the pipe to rank (owned by the world)" },
	{ "barrier", world_barrier, METH_NOARGS, "barrier(): wait for every rank" },
	{ "exchange_blobs", world_exchange_blobs, METH_VARARGS,
	  "exchange_blobs(blob) -> [bytes]: every rank's blob, by rank, through the store" },
	{ "all_reduce", (PyCFunction)(void (*)(void))world_all_reduce,
	  METH_VARARGS | METH_KEYWORDS,
	  "all_reduce(tensor, op='sum', timeout=None) -> tensor, reduced in place (sum, prod, min, "
	  "max, mean)" },
	{ "broadcast", (PyCFunction)(void (*)(void))world_broadcast, METH_VARARGS | METH_KEYWORDS,
	  "broadcast(tensor, src=0, timeout=None) -> tensor, src's values in place" },
	{ "all_gather", (PyCFunction)(void (*)(void))world_all_gather,
	  METH_VARARGS | METH_KEYWORDS,
	  "all_gather(tensor, timeout=None) -> Tensor of shape (size, *tensor.shape)" },
	{ "reduce_scatter", (PyCFunction)(void (*)(void))world_reduce_scatter,
	  METH_VARARGS | METH_KEYWORDS,
	  "reduce_scatter(tensor, op='sum', timeout=None) -> this rank's chunk of the reduction" },
	{ "send", (PyCFunction)(void (*)(void))world_send, METH_VARARGS | METH_KEYWORDS,
	  "send(tensor, dst, timeout=None): the tensor's bytes to rank dst, once received" },
	{ "recv", (PyCFunction)(void (*)(void))world_recv, METH_VARARGS | METH_KEYWORDS,
	  "recv(tensor, src, timeout=None) -> bytes received from rank src into tensor" },
	{ "barrier_timeout", world_barrier_timeout, METH_VARARGS,
	  "barrier_timeout(timeout=None): every rank, through the world's rendezvous" },
	{ "device_name", world_device_name, METH_VARARGS,
	  "device_name(rank) -> '/job:worker/replica:0/task:RANK/device:CPU:0'" },
	{ "coll_path", world_coll_path, METH_NOARGS,
	  "coll_path() -> str: \"shm\", \"hier\", \"rdv\", or \"\" before the first collective" },
	{ "close", world_close, METH_NOARGS, "close(): leave (waits for every rank to leave)" },
	{ NULL, NULL, 0, NULL },
};

static PyType_Slot world_slots[] = {
	{ Py_tp_init, world_init },
	{ Py_tp_new, PyType_GenericNew },
	{ Py_tp_dealloc, world_dealloc },
	{ Py_tp_methods, world_methods },
	{ Py_tp_doc, "_World(context, job=None, timeout=None): ranks from the launcher's variables." },
	{ 0, NULL },
};

static PyType_Spec world_spec = {
	.name = "tpu_user._World",
	.basicsize = sizeof(tpupy_world),
	.flags = Py_TPFLAGS_DEFAULT,
	.slots = world_slots,
};

int tpupy_world_init(PyObject *m)
{
	tpupy_WorldType = (PyTypeObject *)PyType_FromSpec(&world_spec);
	if (!tpupy_WorldType)
		return -1;
	return PyModule_AddObjectRef(m, "_World", (PyObject *)tpupy_WorldType);
}
