// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Library statuses as Python exceptions.
 *
 * tpu_user.Error derives from OSError: .errno is the errno of a status
 * that is one (None for the library's own TPU_E_*), .status the raw
 * status and .status_name its symbol ("ETIMEDOUT", "TPU_E_PEER_GONE").
 * Subclasses join the built-in ones where they fit, so that
 * `except TimeoutError` and `except ConnectionError` catch them.
 */
#include <errno.h>
#include <string.h>
#include "tpupy.h"

PyObject *tpupy_Error, *tpupy_TimeoutError, *tpupy_ConnectionError, *tpupy_PeerGoneError,
	*tpupy_ClosedError, *tpupy_CancelledError, *tpupy_ForkedError;

static PyObject *new_exc(PyObject *m, const char *name, const char *doc, PyObject *bases)
{
	char full[64];
	PyObject *e;

	snprintf(full, sizeof(full), "tpu_user.%s", name);
	e = PyErr_NewExceptionWithDoc(full, doc, bases, NULL);
	Py_XDECREF(bases);
	if (!e)
		return NULL;
	if (PyModule_AddObjectRef(m, name, e) < 0) {
		Py_DECREF(e);
		return NULL;
	}
	return e;
}

int tpupy_errors_init(PyObject *m)
{
	tpupy_Error = new_exc(m, "Error",
			      "A tpu_user call failed: .status, .status_name, .errno.",
			      Py_BuildValue("(O)", PyExc_OSError));
	if (!tpupy_Error)
		return -1;
	tpupy_TimeoutError = new_exc(m, "TimeoutError", "The operation timed out (ETIMEDOUT).",
				     Py_BuildValue("(OO)", tpupy_Error, PyExc_TimeoutError));
	tpupy_ConnectionError = new_exc(m, "ConnectionError",
					"The peer or the connection failed.",
					Py_BuildValue("(OO)", tpupy_Error, PyExc_ConnectionError));
	if (!tpupy_TimeoutError || !tpupy_ConnectionError)
		return -1;
	tpupy_PeerGoneError = new_exc(m, "PeerGoneError", "The process at the other end died.",
				      Py_BuildValue("(O)", tpupy_ConnectionError));
	tpupy_ClosedError = new_exc(m, "ClosedError",
				    "The object (or its context) was closed first.",
				    Py_BuildValue("(O)", tpupy_Error));
	tpupy_CancelledError = new_exc(m, "CancelledError", "The operation was cancelled.",
				       Py_BuildValue("(O)", tpupy_Error));
	tpupy_ForkedError = new_exc(m, "ForkedError",
				    "An object used in a child forked after its creation.",
				    Py_BuildValue("(O)", tpupy_Error));
	if (!tpupy_PeerGoneError || !tpupy_ClosedError || !tpupy_CancelledError ||
	    !tpupy_ForkedError)
		return -1;
	return 0;
}

static PyObject *class_of(tpu_status st)
{
	switch (st) {
	case -ETIMEDOUT:
		return tpupy_TimeoutError;
	case TPU_E_PEER_GONE:
		return tpupy_PeerGoneError;
	case -ECONNRESET:
	case -ECONNREFUSED:
	case -ECONNABORTED:
	case -EPIPE:
	case -ENOTCONN:
	case -EHOSTUNREACH:
		return tpupy_ConnectionError;
	case TPU_E_CLOSED:
	case TPU_E_DESTROYED:
		return tpupy_ClosedError;
	case -ECANCELED:
		return tpupy_CancelledError;
	case TPU_E_FORKED:
		return tpupy_ForkedError;
	default:
		return tpupy_Error;
	}
}

/*
 * @what: the operation ("send"), prefixed to the library's sentence; or a
 * whole sentence of our own, ending with '.', that replaces it.
 */
PyObject *tpupy_exception(tpu_status st, const char *what)
{
	PyObject *cls = class_of(st), *exc, *msg, *val;
	int is_errno = st < 0 && st >= -TPU_ERRNO_MAX;

	if (what && *what && what[strlen(what) - 1] == '.')	/* says it all */
		msg = PyUnicode_FromFormat("%s (%s)", what, tpu_status_name(st));
	else
		msg = PyUnicode_FromFormat("%s%s%s (%s)", what && *what ? what : "",
					   what && *what ? ": " : "", tpu_strerror(st),
					   tpu_status_name(st));
	if (!msg)
		return NULL;
	if (is_errno)
		exc = PyObject_CallFunction(cls, "iO", -st, msg);
	else
		exc = PyObject_CallFunction(cls, "OO", Py_None, msg);
	Py_DECREF(msg);
	if (!exc)
		return NULL;
	val = PyLong_FromLong(st);
	if (!val || PyObject_SetAttrString(exc, "status", val) < 0)
		goto fail;
	Py_DECREF(val);
	val = PyUnicode_FromString(tpu_status_name(st));
	if (!val || PyObject_SetAttrString(exc, "status_name", val) < 0)
		goto fail;
	Py_DECREF(val);
	return exc;
fail:
	Py_XDECREF(val);
	Py_DECREF(exc);
	return NULL;
}

PyObject *tpupy_raise(tpu_status st, const char *what)
{
	PyObject *exc = tpupy_exception(st, what);

	if (exc) {
		PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
		Py_DECREF(exc);
	}
	return NULL;
}
