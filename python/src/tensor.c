// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Tensors in and out, without copies.
 *
 * In: tpupy_view_get() takes our own Tensor as it is, any object with the
 * buffer protocol (NumPy arrays, bytearray, memoryview) through a buffer
 * it holds until released, else an object with __dlpack__ (PyTorch)
 * through its "dltensor" capsule, renamed "used_dltensor" as DLPack asks
 * of a consumer; the producer's deleter runs when the view is released.
 * Only C-contiguous CPU memory is taken: anything else is a ValueError
 * that says to call .contiguous() / numpy.ascontiguousarray() first.
 *
 * Out: Tensor owns memory the extension allocated and exports it through
 * the buffer protocol and __dlpack__ / __dlpack_device__, so
 * numpy.asarray(), numpy.from_dlpack() and torch.from_dlpack() wrap it
 * without a copy; the memory lives until the last of them lets go.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "tpupy.h"

PyTypeObject *tpupy_TensorType;

typedef struct {
	PyObject_HEAD
	void *data;
	struct tpupy_meta meta;
	Py_ssize_t shape[TPUPY_MAX_DIMS];
	Py_ssize_t strides[TPUPY_MAX_DIMS];
} tpupy_tensor;

void *tpupy_alloc(size_t len)
{
	void *p = NULL;

	if (len >= TPUPY_THP_MIN) {
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return NULL;
		madvise(p, len, MADV_HUGEPAGE);
		return p;
	}

	/* 64 bytes: a cache line, and what NumPy and PyTorch like to see. */
	if (posix_memalign(&p, 64, len ? len : 1))
		return NULL;
	return p;
}

void tpupy_free(void *p, size_t len)
{
	if (p && len >= TPUPY_THP_MIN)
		munmap(p, len);
	else
		free(p);
}

/* ---------- in ---------- */

static void buffer_holder_free(PyObject *cap)
{
	Py_buffer *b = PyCapsule_GetPointer(cap, "tpu_user.buffer");

	if (b) {
		PyBuffer_Release(b);
		free(b);
	}
}

static void dlpack_holder_free(PyObject *cap)
{
	DLManagedTensor *t = PyCapsule_GetPointer(cap, "tpu_user.dlpack");

	if (t && t->deleter)
		t->deleter(t);
}

static int format_dtype(const char *fmt, Py_ssize_t itemsize, DLDataType *dt)
{
	bool complex = false;
	char c;

	if (!fmt)
		fmt = "B";
	if (*fmt == '<' || *fmt == '@' || *fmt == '=')
		fmt++;
	if (*fmt == 'Z') {
		complex = true;
		fmt++;
	}
	c = *fmt;
	if (!c || fmt[1])
		return -1;
	dt->lanes = 1;
	dt->bits = (uint8_t)(itemsize * 8);
	if (complex) {
		dt->code = kDLComplex;
		return c == 'f' || c == 'd' ? 0 : -1;
	}
	switch (c) {
	case '?':
		dt->code = TPUPY_DL_BOOL;
		return itemsize == 1 ? 0 : -1;
	case 'b': case 'h': case 'i': case 'l': case 'q': case 'n':
		dt->code = kDLInt;
		return 0;
	case 'B': case 'H': case 'I': case 'L': case 'Q': case 'N': case 'c':
		dt->code = kDLUInt;
		return 0;
	case 'e': case 'f': case 'd':
		dt->code = kDLFloat;
		return 0;
	default:
		return -1;
	}
}

static int not_contiguous(PyObject *obj)
{
	PyErr_Format(PyExc_ValueError,
		     "%S is not C-contiguous: tpu_user moves tensors without copying them; "
		     "pass tensor.contiguous() or numpy.ascontiguousarray(array)",
		     (PyObject *)Py_TYPE(obj));
	return -1;
}

static int view_from_buffer(PyObject *obj, bool writable, struct tpupy_view *v)
{
	Py_buffer *b = calloc(1, sizeof(*b));
	PyObject *cap;

	if (!b) {
		PyErr_NoMemory();
		return -1;
	}
	if (PyObject_GetBuffer(obj, b, writable ? PyBUF_RECORDS : PyBUF_RECORDS_RO) < 0) {
		free(b);
		/* bytes, a read-only memoryview, a read-only array: say what is wanted. */
		if (writable && PyErr_ExceptionMatches(PyExc_BufferError)) {
			PyErr_Clear();
			PyErr_Format(PyExc_TypeError,
				     "the destination must be a writable buffer (bytearray, a "
				     "writable NumPy array or memoryview), not the read-only %S",
				     (PyObject *)Py_TYPE(obj));
		}
		return -1;
	}
	cap = PyCapsule_New(b, "tpu_user.buffer", buffer_holder_free);
	if (!cap) {
		PyBuffer_Release(b);
		free(b);
		return -1;
	}
	v->keep = cap;
	if (!PyBuffer_IsContiguous(b, 'C'))
		return not_contiguous(obj);
	if (b->ndim > TPUPY_MAX_DIMS) {
		PyErr_Format(PyExc_ValueError, "more than %d dimensions", TPUPY_MAX_DIMS);
		return -1;
	}
	if (format_dtype(b->format, b->itemsize, &v->meta.dtype) < 0 ||
	    !tpupy_dtype_name(v->meta.dtype)) {
		PyErr_Format(PyExc_TypeError, "unsupported buffer format '%s' (itemsize %zd)",
			     b->format ? b->format : "B", b->itemsize);
		return -1;
	}
	v->data = b->buf;
	v->meta.ndim = b->ndim;
	if (b->ndim == 0 && b->len != b->itemsize) {
		v->meta.ndim = 1;	/* a bare byte buffer */
		v->meta.shape[0] = b->len / b->itemsize;
	}
	for (int i = 0; i < b->ndim; i++)
		v->meta.shape[i] = b->shape ? b->shape[i] : b->len / b->itemsize;
	v->meta.nbytes = (uint64_t)b->len;
	v->meta.device = (DLDevice){ kDLCPU, 0 };
	return 0;
}

/* Takes @cap, a "dltensor" capsule @obj exported (new reference, stolen). */
static int view_from_capsule(PyObject *obj, PyObject *cap, struct tpupy_view *v)
{
	PyObject *holder;
	DLManagedTensor *mt;
	DLTensor *t;
	int64_t expect = 1;
	uint64_t count = 1;

	mt = PyCapsule_GetPointer(cap, "dltensor");
	if (!mt) {
		Py_DECREF(cap);
		return -1;
	}
	/* From here the deleter is ours to call: the holder calls it. */
	if (PyCapsule_SetName(cap, "used_dltensor") < 0) {
		Py_DECREF(cap);
		return -1;
	}
	Py_DECREF(cap);
	holder = PyCapsule_New(mt, "tpu_user.dlpack", dlpack_holder_free);
	if (!holder) {
		if (mt->deleter)
			mt->deleter(mt);
		return -1;
	}
	v->keep = holder;
	t = &mt->dl_tensor;
	if (t->device.device_type != kDLCPU) {
		PyErr_Format(PyExc_ValueError,
			     "only CPU tensors can move (DLPack device type %d); no channel moves "
			     "GPU memory yet", (int)t->device.device_type);
		return -1;
	}
	if (t->ndim < 0 || t->ndim > TPUPY_MAX_DIMS) {
		PyErr_Format(PyExc_ValueError, "more than %d dimensions", TPUPY_MAX_DIMS);
		return -1;
	}
	if (!tpupy_dtype_name(t->dtype)) {
		PyErr_Format(PyExc_TypeError, "unsupported DLPack dtype (code %u, %u bits, %u lanes)",
			     t->dtype.code, t->dtype.bits, t->dtype.lanes);
		return -1;
	}
	for (int i = 0; i < t->ndim; i++)
		count *= (uint64_t)t->shape[i];
	for (int i = t->ndim - 1; t->strides && count && i >= 0; i--) {
		if (t->shape[i] != 1 && t->strides[i] != expect)
			return not_contiguous(obj);
		expect *= t->shape[i];
	}
	v->data = (char *)t->data + t->byte_offset;
	v->meta.dtype = t->dtype;
	v->meta.device = t->device;
	v->meta.ndim = t->ndim;
	memcpy(v->meta.shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
	v->meta.nbytes = count * t->dtype.bits * t->dtype.lanes / 8;
	return 0;
}

static int view_from_dlpack(PyObject *obj, struct tpupy_view *v)
{
	PyObject *cap = PyObject_CallMethod(obj, "__dlpack__", NULL);

	if (!cap)
		return -1;
	return view_from_capsule(obj, cap, v);
}

/*
 * A plain torch.Tensor without Tensor.__dlpack__'s Python wrapper (about
 * half of a call's cost to take a tensor): the same refusals are read
 * here (requires_grad, the conjugate bit, a layout other than strided)
 * and torch.to_dlpack exports it.  1: not taken here (another type,
 * a refusal, bool, torch not imported): the caller goes the usual way,
 * which raises what it always raised.
 */
static struct {
	PyObject *tensor_type, *to_dlpack, *strided, *tbool, *uint8;
	PyObject *s_requires_grad, *s_is_conj, *s_layout, *s_dtype, *s_view;
} tp;

static int view_from_torch_fast(PyObject *obj, struct tpupy_view *v)
{
	PyObject *cap, *a;
	int refuse, rc;
	bool is_bool;

	if (!tp.tensor_type) {
		PyObject *name = PyUnicode_FromString("torch"), *torch;

		if (!name)
			goto no;
		torch = PyImport_GetModule(name);
		Py_DECREF(name);
		if (!torch)
			goto no;	/* not imported: no torch tensor can be here */
		/* The public name of what Tensor.__dlpack__ calls in the end. */
		tp.to_dlpack = PyObject_GetAttrString(torch, "to_dlpack");
		tp.strided = PyObject_GetAttrString(torch, "strided");
		tp.tbool = PyObject_GetAttrString(torch, "bool");
		tp.uint8 = PyObject_GetAttrString(torch, "uint8");
		tp.tensor_type = PyObject_GetAttrString(torch, "Tensor");
		Py_DECREF(torch);
		tp.s_requires_grad = PyUnicode_InternFromString("requires_grad");
		tp.s_is_conj = PyUnicode_InternFromString("is_conj");
		tp.s_layout = PyUnicode_InternFromString("layout");
		tp.s_dtype = PyUnicode_InternFromString("dtype");
		tp.s_view = PyUnicode_InternFromString("view");
		if (!tp.to_dlpack || !tp.strided || !tp.tensor_type || !tp.s_requires_grad ||
		    !tp.s_is_conj || !tp.s_layout || !tp.tbool || !tp.uint8 || !tp.s_dtype ||
		    !tp.s_view) {
			Py_CLEAR(tp.to_dlpack);
			Py_CLEAR(tp.strided);
			Py_CLEAR(tp.tbool);
			Py_CLEAR(tp.uint8);
			Py_CLEAR(tp.tensor_type);
			goto no;
		}
	}
	if ((PyObject *)Py_TYPE(obj) != tp.tensor_type)
		return 1;	/* subclasses may override __dlpack__ or __torch_function__ */
	a = PyObject_GetAttr(obj, tp.s_requires_grad);
	refuse = !a || a != Py_False;
	Py_XDECREF(a);
	if (!refuse) {
		a = PyObject_CallMethodObjArgs(obj, tp.s_is_conj, NULL);
		refuse = !a || a != Py_False;
		Py_XDECREF(a);
	}
	if (!refuse) {
		a = PyObject_GetAttr(obj, tp.s_layout);
		refuse = a != tp.strided;
		Py_XDECREF(a);
	}
	if (refuse)
		goto no;
	a = PyObject_GetAttr(obj, tp.s_dtype);
	if (!a)
		goto no;
	is_bool = a == tp.tbool;
	Py_DECREF(a);
	if (is_bool) {
		/*
		 * DLPack 0.6 has no bool: its bytes as uint8 (a view), called
		 * bool again; torch's refusal to export bool would cost an
		 * exception, with a C++ backtrace, per call.
		 */
		PyObject *u = PyObject_CallMethodObjArgs(obj, tp.s_view, tp.uint8, NULL);

		if (!u)
			goto no;
		cap = PyObject_CallFunctionObjArgs(tp.to_dlpack, u, NULL);
		rc = cap ? view_from_capsule(u, cap, v) : 1;
		Py_DECREF(u);
		if (rc > 0)
			goto no;
		if (!rc)
			v->meta.dtype.code = TPUPY_DL_BOOL;
		return rc;
	}
	cap = PyObject_CallFunctionObjArgs(tp.to_dlpack, obj, NULL);
	if (!cap)
		goto no;	/* the usual way raises what it always raised */
	return view_from_capsule(obj, cap, v);
no:
	PyErr_Clear();
	return 1;
}

/*
 * PyTorch 1.13 will not export bool through DLPack 0.6: take its bytes as
 * uint8 (a view, no copy) and call them bool again.
 */
static int view_from_torch_bool(PyObject *obj, struct tpupy_view *v)
{
	PyObject *dtype = PyObject_GetAttrString(obj, "dtype"), *s = NULL, *torch = NULL,
		 *u8 = NULL, *u = NULL;
	int rc = 1;

	if (!dtype)
		goto out;
	s = PyObject_Str(dtype);
	if (!s || PyUnicode_CompareWithASCIIString(s, "torch.bool"))
		goto out;
	torch = PyImport_ImportModule("torch");
	u8 = torch ? PyObject_GetAttrString(torch, "uint8") : NULL;
	u = u8 ? PyObject_CallMethod(obj, "view", "O", u8) : NULL;
	if (!u) {
		rc = -1;
		goto out;
	}
	rc = view_from_dlpack(u, v);
	if (!rc)
		v->meta.dtype.code = TPUPY_DL_BOOL;
out:
	if (rc > 0)
		PyErr_Clear();
	Py_XDECREF(dtype);
	Py_XDECREF(s);
	Py_XDECREF(torch);
	Py_XDECREF(u8);
	Py_XDECREF(u);
	return rc;
}

int tpupy_view_get(PyObject *obj, bool writable, struct tpupy_view *v)
{
	memset(v, 0, sizeof(*v));
	if (Py_IS_TYPE(obj, tpupy_TensorType)) {
		tpupy_tensor *t = (tpupy_tensor *)obj;

		v->data = t->data;
		v->meta = t->meta;
		v->keep = Py_NewRef(obj);
		return 0;
	}
	if (PyObject_CheckBuffer(obj)) {
		if (view_from_buffer(obj, writable, v) < 0)
			goto fail;
		return 0;
	}
	switch (view_from_torch_fast(obj, v)) {
	case 0:
		return 0;
	case 1:
		break;
	default:
		goto fail;
	}
	if (PyObject_HasAttrString(obj, "__dlpack__")) {
		int rc;

		if (!view_from_dlpack(obj, v))
			return 0;
		if (!PyErr_ExceptionMatches(PyExc_RuntimeError))
			goto fail;
		tpupy_view_release(v);
		{
			PyObject *et, *ev, *tb;

			PyErr_Fetch(&et, &ev, &tb);
			rc = view_from_torch_bool(obj, v);
			if (rc > 0) {
				PyErr_Restore(et, ev, tb);	/* not a bool: the first error stands */
				goto fail;
			}
			Py_XDECREF(et);
			Py_XDECREF(ev);
			Py_XDECREF(tb);
		}
		if (rc < 0)
			goto fail;
		return 0;
	}
	PyErr_Format(PyExc_TypeError,
		     "expected a tensor (buffer protocol or __dlpack__), got %S",
		     (PyObject *)Py_TYPE(obj));
fail:
	tpupy_view_release(v);
	return -1;
}

void tpupy_view_release(struct tpupy_view *v)
{
	Py_CLEAR(v->keep);
	v->data = NULL;
}

/* ---------- out ---------- */

PyObject *tpupy_tensor_new(void *data, const struct tpupy_meta *meta)
{
	tpupy_tensor *t;
	Py_ssize_t stride;

	t = (tpupy_tensor *)PyType_GenericAlloc(tpupy_TensorType, 0);
	if (!t) {
		tpupy_free(data, meta->nbytes);
		return NULL;
	}
	t->data = data;
	t->meta = *meta;
	stride = meta->dtype.bits * meta->dtype.lanes / 8;
	for (int i = meta->ndim - 1; i >= 0; i--) {
		t->shape[i] = (Py_ssize_t)meta->shape[i];
		t->strides[i] = stride;
		stride *= t->shape[i] ? t->shape[i] : 1;
	}
	return (PyObject *)t;
}

static void tensor_dealloc(PyObject *self)
{
	tpupy_tensor *t = (tpupy_tensor *)self;
	PyTypeObject *tp = Py_TYPE(self);

	tpupy_free(t->data, t->meta.nbytes);
	((freefunc)PyType_GetSlot(tp, Py_tp_free))(self);
	Py_DECREF(tp);
}

static const char *buffer_format(DLDataType dt)
{
	switch (dt.code) {
	case TPUPY_DL_BOOL:
		return "?";
	case kDLInt:
		return dt.bits == 8 ? "b" : dt.bits == 16 ? "h" : dt.bits == 32 ? "i" : "q";
	case kDLUInt:
		return dt.bits == 8 ? "B" : dt.bits == 16 ? "H" : dt.bits == 32 ? "I" : "Q";
	case kDLFloat:
		return dt.bits == 16 ? "e" : dt.bits == 32 ? "f" : "d";
	case kDLBfloat:
		return "H";	/* no struct format: the raw bits */
	case kDLComplex:
		return dt.bits == 64 ? "Zf" : "Zd";
	default:
		return "B";
	}
}

static int tensor_getbuffer(PyObject *self, Py_buffer *view, int flags)
{
	tpupy_tensor *t = (tpupy_tensor *)self;

	(void)flags;	/* C-contiguous, writable, with format and strides: fits every request */
	view->obj = Py_NewRef(self);
	view->buf = t->data;
	view->len = (Py_ssize_t)t->meta.nbytes;
	view->readonly = 0;
	view->itemsize = t->meta.dtype.bits * t->meta.dtype.lanes / 8;
	view->format = (char *)buffer_format(t->meta.dtype);
	view->ndim = t->meta.ndim;
	view->shape = t->shape;
	view->strides = t->strides;
	view->suboffsets = NULL;
	view->internal = NULL;
	return 0;
}

static void tensor_releasebuffer(PyObject *self, Py_buffer *view)
{
	(void)self;
	(void)view;
}

struct dl_export {
	DLManagedTensor mt;
	int64_t shape[TPUPY_MAX_DIMS];
};

static void dl_export_delete(DLManagedTensor *mt)
{
	/* The consumer may call this from any thread: take the GIL. */
	PyGILState_STATE g = PyGILState_Ensure();

	Py_DECREF((PyObject *)mt->manager_ctx);
	free(mt);
	PyGILState_Release(g);
}

static void dl_capsule_free(PyObject *cap)
{
	DLManagedTensor *mt;

	if (!PyCapsule_IsValid(cap, "dltensor"))
		return;		/* consumed: the consumer calls the deleter */
	mt = PyCapsule_GetPointer(cap, "dltensor");
	if (mt && mt->deleter)
		mt->deleter(mt);
}

static PyObject *tensor_dlpack(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "stream", NULL };
	tpupy_tensor *t = (tpupy_tensor *)self;
	PyObject *stream = Py_None, *cap;
	struct dl_export *e;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|$O:__dlpack__", kwlist, &stream))
		return NULL;
	if (stream != Py_None) {
		PyErr_SetString(PyExc_BufferError, "CPU tensors take stream=None");
		return NULL;
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		return PyErr_NoMemory();
	memcpy(e->shape, t->meta.shape, sizeof(int64_t) * (size_t)t->meta.ndim);
	e->mt.dl_tensor = (DLTensor){
		.data = t->data, .device = { kDLCPU, 0 }, .ndim = t->meta.ndim,
		.dtype = t->meta.dtype, .shape = e->shape, .strides = NULL, .byte_offset = 0,
	};
	if (t->meta.dtype.code == TPUPY_DL_BOOL)	/* DLPack 0.6 has no bool */
		e->mt.dl_tensor.dtype.code = kDLUInt;
	e->mt.manager_ctx = Py_NewRef(self);
	e->mt.deleter = dl_export_delete;
	cap = PyCapsule_New(&e->mt, "dltensor", dl_capsule_free);
	if (!cap) {
		Py_DECREF(self);
		free(e);
	}
	return cap;
}

static PyObject *tensor_dlpack_device(PyObject *self, PyObject *unused)
{
	(void)self;
	(void)unused;
	return Py_BuildValue("(ii)", kDLCPU, 0);
}

static PyObject *tensor_get_dtype(PyObject *self, void *c)
{
	(void)c;
	return PyUnicode_FromString(tpupy_dtype_name(((tpupy_tensor *)self)->meta.dtype));
}

static PyObject *tensor_get_shape(PyObject *self, void *c)
{
	tpupy_tensor *t = (tpupy_tensor *)self;
	PyObject *s = PyTuple_New(t->meta.ndim);

	(void)c;
	for (int i = 0; s && i < t->meta.ndim; i++) {
		PyObject *d = PyLong_FromLongLong(t->meta.shape[i]);

		if (!d || PyTuple_SetItem(s, i, d) < 0) {
			Py_CLEAR(s);
			break;
		}
	}
	return s;
}

static PyObject *tensor_get_nbytes(PyObject *self, void *c)
{
	(void)c;
	return PyLong_FromUnsignedLongLong(((tpupy_tensor *)self)->meta.nbytes);
}

static PyObject *tensor_get_device(PyObject *self, void *c)
{
	(void)self;
	(void)c;
	return PyUnicode_FromString("cpu");
}

static PyObject *tensor_repr(PyObject *self)
{
	PyObject *shape = tensor_get_shape(self, NULL), *r;

	if (!shape)
		return NULL;
	r = PyUnicode_FromFormat("<tpu_user.Tensor dtype=%s shape=%R>",
				 tpupy_dtype_name(((tpupy_tensor *)self)->meta.dtype), shape);
	Py_DECREF(shape);
	return r;
}

static PyObject *tensor_len(PyObject *self, PyObject *unused)
{
	(void)unused;
	return PyLong_FromUnsignedLongLong(tpupy_meta_count(&((tpupy_tensor *)self)->meta));
}

static PyMethodDef tensor_methods[] = {
	{ "__dlpack__", (PyCFunction)(void (*)(void))tensor_dlpack, METH_VARARGS | METH_KEYWORDS,
	  "__dlpack__(stream=None) -> a DLPack 0.6 \"dltensor\" capsule sharing this memory" },
	{ "__dlpack_device__", tensor_dlpack_device, METH_NOARGS,
	  "__dlpack_device__() -> (kDLCPU, 0)" },
	{ "numel", tensor_len, METH_NOARGS, "numel() -> number of elements" },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef tensor_getset[] = {
	{ "dtype", tensor_get_dtype, NULL, "element type, as NumPy names it (\"float32\")", NULL },
	{ "shape", tensor_get_shape, NULL, "the shape, a tuple of ints", NULL },
	{ "nbytes", tensor_get_nbytes, NULL, "length in bytes", NULL },
	{ "device", tensor_get_device, NULL, "where it lies: \"cpu\"", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot tensor_slots[] = {
	{ Py_tp_dealloc, tensor_dealloc },
	{ Py_tp_repr, tensor_repr },
	{ Py_tp_methods, tensor_methods },
	{ Py_tp_getset, tensor_getset },
	{ Py_bf_getbuffer, tensor_getbuffer },
	{ Py_bf_releasebuffer, tensor_releasebuffer },
	{ Py_tp_doc, "A received tensor: memory the extension owns, typed (dtype, shape).\n\n"
		     "Wrap it without a copy: numpy.asarray(t), numpy.from_dlpack(t),\n"
		     "torch.from_dlpack(t), memoryview(t)." },
	{ 0, NULL },
};

static PyType_Spec tensor_spec = {
	.name = "tpu_user.Tensor",
	.basicsize = sizeof(tpupy_tensor),
	.flags = Py_TPFLAGS_DEFAULT,
	.slots = tensor_slots,
};

int tpupy_tensor_init(PyObject *m)
{
	tpupy_TensorType = (PyTypeObject *)PyType_FromSpec(&tensor_spec);
	if (!tpupy_TensorType)
		return -1;
	return PyModule_AddObjectRef(m, "Tensor", (PyObject *)tpupy_TensorType);
}
