// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * tpu_user._tpu_user: the module, and its free functions (keys, version,
 * probe, the constructors the Python layer calls).
 */
#include <errno.h>
#include <string.h>
#include "tpupy.h"

static PyObject *mod_make_key(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "src_device", "src_incarnation", "dst_device", "edge_name",
				  "frame_id", "iter_id", NULL };
	const char *src, *dst, *edge;
	unsigned long long inc, frame = 0, iter = 0;
	struct tpu_key k;
	char buf[4300];
	size_t len = 0;
	tpu_status st;

	(void)self;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "sKss|KK:make_key", kwlist, &src, &inc, &dst,
					 &edge, &frame, &iter))
		return NULL;
	k = (struct tpu_key){ .src_device = tpu_str(src), .src_incarnation = inc,
			      .dst_device = tpu_str(dst), .edge_name = tpu_str(edge),
			      .frame_id = frame, .iter_id = iter };
	st = tpu_key_build(&k, buf, sizeof(buf), &len);
	if (st == TPU_E_BAD_KEY || st == TPU_E_BAD_DEVICE_NAME) {
		PyErr_Format(PyExc_ValueError, "not a rendezvous key: %s", tpu_strerror(st));
		return NULL;
	}
	if (st)
		return tpupy_raise(st, "make_key");
	return PyUnicode_FromStringAndSize(buf, (Py_ssize_t)len);
}

static PyObject *slice(struct tpu_str s)
{
	return PyUnicode_FromStringAndSize(s.ptr, (Py_ssize_t)s.len);
}

static PyObject *mod_parse_key(PyObject *self, PyObject *arg)
{
	const char *key, *why = NULL;
	Py_ssize_t len;
	struct tpu_key k;

	(void)self;
	if (tpupy_key_arg(arg, &key, &len) < 0)
		return NULL;
	if (tpu_key_parse((struct tpu_str){ key, (size_t)len }, &k, &why)) {
		PyErr_Format(PyExc_ValueError, "not a rendezvous key: %s", why ? why : "malformed");
		return NULL;
	}
	return Py_BuildValue("{s:N,s:K,s:N,s:N,s:K,s:K}", "src_device", slice(k.src_device),
			     "src_incarnation", (unsigned long long)k.src_incarnation,
			     "dst_device", slice(k.dst_device), "edge_name", slice(k.edge_name),
			     "frame_id", (unsigned long long)k.frame_id,
			     "iter_id", (unsigned long long)k.iter_id);
}

static int ctx_arg(PyObject *obj, tpupy_context **c)
{
	if (!PyObject_TypeCheck(obj, tpupy_ContextType)) {
		PyErr_SetString(PyExc_TypeError, "expected a Context");
		return -1;
	}
	*c = (tpupy_context *)obj;
	return tpupy_context_check(*c);
}

static const char *const impl_names[] = { "auto", "inprocess", "kmod", "cma" };

static PyObject *mod_rendezvous(PyObject *self, PyObject *args)
{
	PyObject *cobj;
	const char *impl = "auto";
	tpupy_context *c;
	struct tpu_rendezvous *rdv = NULL;
	tpu_status st;
	int i;

	(void)self;
	if (!PyArg_ParseTuple(args, "O|s:_rendezvous", &cobj, &impl) || ctx_arg(cobj, &c) < 0)
		return NULL;
	for (i = 0; i < 4 && strcmp(impl, impl_names[i]); i++)
		;
	if (i == 4) {
		PyErr_Format(PyExc_ValueError, "impl is auto, inprocess, kmod or cma, not %s", impl);
		return NULL;
	}
	Py_BEGIN_ALLOW_THREADS
	st = tpu_rendezvous_create(c->ctx, (enum tpu_rdv_impl)i, &rdv);
	Py_END_ALLOW_THREADS
	if (st)
		return tpupy_raise(st, "rendezvous");
	return tpupy_rdv_wrap(c, rdv, NULL);
}

static PyObject *mod_join(PyObject *self, PyObject *args)
{
	PyObject *cobj;
	tpupy_context *c;
	struct tpu_rendezvous *rdv = NULL;
	tpu_status st;
	int fd;

	(void)self;
	if (!PyArg_ParseTuple(args, "Oi:_join", &cobj, &fd) || ctx_arg(cobj, &c) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	st = tpu_rendezvous_join(c->ctx, fd, &rdv);
	Py_END_ALLOW_THREADS
	if (st)
		return tpupy_raise(st, "join");
	return tpupy_rdv_wrap(c, rdv, NULL);
}

/* _remote(ctx, task, listen_urls or None, {task: url}) */
static PyObject *mod_remote(PyObject *self, PyObject *args)
{
	PyObject *cobj, *urls, *peers, *items = NULL;
	const char *task, *lu[16];
	struct tpu_remote_task pt[256];
	struct tpu_remote_options o = { 0 };
	struct tpu_rendezvous *rdv = NULL;
	Py_ssize_t nl = 0, np;
	tpupy_context *c;
	tpu_status st;

	(void)self;
	if (!PyArg_ParseTuple(args, "OsOO!:_remote", &cobj, &task, &urls, &PyDict_Type, &peers) ||
	    ctx_arg(cobj, &c) < 0)
		return NULL;
	if (urls != Py_None) {
		nl = PySequence_Size(urls);
		if (nl < 0)
			return NULL;
		if (nl > 16) {
			PyErr_SetString(PyExc_ValueError, "at most 16 listen URLs");
			return NULL;
		}
		for (Py_ssize_t i = 0; i < nl; i++) {
			PyObject *u = PySequence_GetItem(urls, i);

			if (!u)
				return NULL;
			lu[i] = PyUnicode_AsUTF8AndSize(u, NULL);
			Py_DECREF(u);
			if (!lu[i])
				return NULL;
		}
	}
	items = PyDict_Items(peers);
	if (!items)
		return NULL;
	np = PyList_Size(items);
	if (np > 256) {
		Py_DECREF(items);
		PyErr_SetString(PyExc_ValueError, "at most 256 peers here; add more with add_peer()");
		return NULL;
	}
	for (Py_ssize_t i = 0; i < np; i++) {
		PyObject *it = PyList_GetItem(items, i);

		if (!PyArg_ParseTuple(it, "ss", &pt[i].task, &pt[i].url)) {
			Py_DECREF(items);
			return NULL;
		}
	}
	o.task = task;
	o.listen_urls = nl ? lu : NULL;
	o.nlisten = (size_t)nl;
	o.peers = pt;
	o.npeers = (size_t)np;
	Py_BEGIN_ALLOW_THREADS
	st = tpu_rendezvous_create_remote(c->ctx, &o, &rdv);
	Py_END_ALLOW_THREADS
	Py_DECREF(items);
	if (st)
		return tpupy_raise(st, "remote rendezvous");
	return tpupy_rdv_wrap(c, rdv, NULL);
}

static PyObject *mod_listen(PyObject *self, PyObject *args)
{
	PyObject *cobj, *urls = Py_None;
	tpupy_context *c;

	(void)self;
	if (!PyArg_ParseTuple(args, "O|O:_listen", &cobj, &urls) || ctx_arg(cobj, &c) < 0)
		return NULL;
	return tpupy_listen(c, urls);
}

static PyObject *mod_connect(PyObject *self, PyObject *args)
{
	PyObject *cobj;
	const char *url;
	tpupy_context *c;

	(void)self;
	if (!PyArg_ParseTuple(args, "Os:_connect", &cobj, &url) || ctx_arg(cobj, &c) < 0)
		return NULL;
	return tpupy_connect(c, url);
}

static PyObject *mod_version(PyObject *self, PyObject *unused)
{
	(void)self;
	(void)unused;
	return PyUnicode_FromString(tpu_version_string());
}

static PyObject *mod_probe(PyObject *self, PyObject *unused)
{
	struct tpu_probe_result r;

	(void)self;
	(void)unused;
	tpu_probe(NULL, &r);
	return Py_BuildValue("{s:s,s:s,s:s,s:s}", "path", tpu_path_name(r.path),
			     "kmod", tpu_status_name(r.kmod_status), "cma",
			     tpu_status_name(r.cma_status), "detail", r.detail);
}

static PyObject *mod_status_name(PyObject *self, PyObject *arg)
{
	long st = PyLong_AsLong(arg);

	(void)self;
	if (st == -1 && PyErr_Occurred())
		return NULL;
	return PyUnicode_FromString(tpu_status_name((tpu_status)st));
}

static PyObject *mod_dtypes(PyObject *self, PyObject *unused)
{
	static const char *const names[] = { "bool", "int8", "int16", "int32", "int64", "uint8",
		"uint16", "uint32", "uint64", "float16", "float32", "float64", "bfloat16",
		"complex64", "complex128" };
	PyObject *t = PyTuple_New(15);

	(void)self;
	(void)unused;
	for (int i = 0; t && i < 15; i++)
		PyTuple_SetItem(t, i, PyUnicode_FromString(names[i]));
	return t;
}

/* empty(shape, dtype="float32") -> Tensor: the fast path's destinations and sources */
static PyObject *mod_empty(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "shape", "dtype", NULL };
	const char *dtype = "float32";
	struct tpupy_meta m = { .device = { kDLCPU, 0 } };
	PyObject *shape, *seq;
	uint64_t count = 1, elem;
	void *data;

	(void)self;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|s:empty", kwlist, &shape, &dtype))
		return NULL;
	if (tpupy_dtype_parse(dtype, &m.dtype)) {
		PyErr_Format(PyExc_ValueError, "unknown dtype %s", dtype);
		return NULL;
	}
	seq = PyLong_Check(shape) ? Py_BuildValue("(O)", shape) : PySequence_Tuple(shape);
	if (!seq)
		return NULL;
	m.ndim = (int)PyTuple_Size(seq);
	if (m.ndim > TPUPY_MAX_DIMS) {
		Py_DECREF(seq);
		PyErr_Format(PyExc_ValueError, "more than %d dimensions", TPUPY_MAX_DIMS);
		return NULL;
	}
	for (int i = 0; i < m.ndim; i++) {
		long long d = PyLong_AsLongLong(PyTuple_GetItem(seq, i));

		if (d == -1 && PyErr_Occurred()) {
			Py_DECREF(seq);
			return NULL;
		}
		if (d < 0 || (d && count > (UINT64_C(1) << 40) / (uint64_t)d)) {
			Py_DECREF(seq);
			PyErr_SetString(PyExc_ValueError, "dimensions must be >= 0, at most 2^40 elements");
			return NULL;
		}
		m.shape[i] = d;
		count *= (uint64_t)d;
	}
	Py_DECREF(seq);
	elem = m.dtype.bits / 8;
	m.nbytes = count * elem;
	data = tpupy_alloc(m.nbytes);
	if (!data)
		return PyErr_NoMemory();
	return tpupy_tensor_new(data, &m);
}

/* create_domain() -> fd: a new module domain; its descriptor is the right to join it. */
static PyObject *mod_create_domain(PyObject *self, PyObject *unused)
{
	struct tpu_endpoint *ep = NULL;
	int fd = -1;
	tpu_status st;

	(void)self;
	(void)unused;
	st = tpu_endpoint_open(NULL, &ep);
	if (!st)
		st = tpu_domain_create(ep, &fd, NULL);
	tpu_endpoint_close(ep);	/* the domain lives as long as its descriptor */
	if (st)
		return tpupy_raise(st, "tpu_domain_create");
	return PyLong_FromLong(fd);
}

static PyMethodDef mod_methods[] = {
	{ "create_domain", mod_create_domain, METH_NOARGS,
	  "create_domain() -> fd: a new module domain (close the fd when done)" },
	{ "make_key", (PyCFunction)(void (*)(void))mod_make_key, METH_VARARGS | METH_KEYWORDS,
	  "make_key(src_device, src_incarnation, dst_device, edge_name, frame_id=0, iter_id=0)"
	  " -> str: a TensorFlow rendezvous key" },
	{ "parse_key", mod_parse_key, METH_O, "parse_key(key) -> dict of its parts" },
	{ "_rendezvous", mod_rendezvous, METH_VARARGS, NULL },
	{ "_join", mod_join, METH_VARARGS, NULL },
	{ "_remote", mod_remote, METH_VARARGS, NULL },
	{ "_listen", mod_listen, METH_VARARGS, NULL },
	{ "_connect", mod_connect, METH_VARARGS, NULL },
	{ "library_version", mod_version, METH_NOARGS, "library_version() -> \"MAJOR.MINOR.PATCH\"" },
	{ "probe", mod_probe, METH_NOARGS,
	  "probe() -> dict: which path moves tensors between processes here, and why" },
	{ "status_name", mod_status_name, METH_O, "status_name(status) -> its symbol" },
	{ "empty", (PyCFunction)(void (*)(void))mod_empty, METH_VARARGS | METH_KEYWORDS,
	  "empty(shape, dtype='float32') -> Tensor: uninitialised memory (from 2 MiB on,\n"
	  "advised to huge pages), to receive into or send from; torch.from_dlpack()\n"
	  "or numpy.asarray() use it in place" },
	{ "_log_capture", tpupy_log_capture, METH_VARARGS,
	  "_log_capture(enable=True, debug=True): keep the library's log lines for _log_take()" },
	{ "_log_take", tpupy_log_take, METH_NOARGS, "_log_take() -> the lines kept so far" },
	{ "dtypes", mod_dtypes, METH_NOARGS, "dtypes() -> the element types a tensor may have" },
	{ NULL, NULL, 0, NULL },
};

static struct PyModuleDef moddef = {
	PyModuleDef_HEAD_INIT,
	.m_name = "tpu_user._tpu_user",
	.m_doc = "C half of tpu_user: bindings of libtpu_user.",
	.m_size = -1,
	.m_methods = mod_methods,
};

PyMODINIT_FUNC PyInit__tpu_user(void)
{
	PyObject *m = PyModule_Create(&moddef);

	if (!m)
		return NULL;
	if (tpupy_errors_init(m) < 0 || tpupy_tensor_init(m) < 0 || tpupy_op_init(m) < 0 ||
	    tpupy_context_init(m) < 0 || tpupy_rdv_init(m) < 0 || tpupy_pipe_init(m) < 0 ||
	    tpupy_world_init(m) < 0 || tpupy_agent_init(m) < 0 ||
	    PyModule_AddIntConstant(m, "INLINE_MAX", TPUPY_INLINE_MAX) < 0 ||
	    PyModule_AddIntConstant(m, "MAX_DIMS", TPUPY_MAX_DIMS) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
