// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Rendezvous: send, recv, recv_into, cancel, abort, share/join, remote.
 *
 * A tensor goes under two keys: its header (dtype, shape, device; see
 * header.c) under tpupy_meta_key(key), and its bytes under key itself —
 * except that a tensor of at most TPUPY_INLINE_MAX bytes rides in the
 * header's key, so a small tensor costs one key.  The blocking calls use
 * the library's blocking waits with the GIL released; the asynchronous
 * ones return an Op whose receive is chained on the context's thread
 * (header, then bytes), all in C.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "tpupy.h"

PyTypeObject *tpupy_RdvType;

#define KEY_MAX	4300

int tpupy_key_arg(PyObject *obj, const char **buf, Py_ssize_t *len)
{
	if (PyUnicode_Check(obj)) {
		*buf = PyUnicode_AsUTF8AndSize(obj, len);
		if (!*buf)
			return -1;
	} else if (PyBytes_Check(obj)) {
		char *b;

		if (PyBytes_AsStringAndSize(obj, &b, len) < 0)
			return -1;
		*buf = b;
	} else {
		PyErr_Format(PyExc_TypeError, "a key is str or bytes, not %S",
			     (PyObject *)Py_TYPE(obj));
		return -1;
	}
	/* As the library: an empty key names nothing (its meta key would not be empty). */
	if (!*len) {
		tpupy_raise(-EINVAL, "an empty key names nothing: give a non-empty str or bytes.");
		return -1;
	}
	return 0;
}

int tpupy_timeout_arg(PyObject *obj, uint64_t *ns)
{
	double s;

	if (!obj || obj == Py_None) {
		*ns = 0;
		return 0;
	}
	s = PyFloat_AsDouble(obj);
	if (s == -1 && PyErr_Occurred())
		return -1;
	if (!(s > 0) || s > 1e9) {
		PyErr_SetString(PyExc_ValueError, "timeout must be None or seconds > 0");
		return -1;
	}
	*ns = (uint64_t)(s * 1e9);
	if (!*ns)
		*ns = 1;
	return 0;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* What is left of @timeout_ns started at @t0; 0 stays "forever", an expired one 1 ns. */
static uint64_t remaining(uint64_t timeout_ns, uint64_t t0)
{
	uint64_t spent;

	if (!timeout_ns)
		return 0;
	spent = now_ns() - t0;
	return spent < timeout_ns ? timeout_ns - spent : 1;
}

static int rdv_check(tpupy_rdv *r)
{
	if (tpupy_context_check(r->ctx) < 0)
		return -1;
	if (!r->rdv || (r->owner && !tpupy_world_alive(r->owner))) {
		tpupy_raise(TPU_E_DESTROYED, "the rendezvous (or its world) is closed");
		return -1;
	}
	return 0;
}

PyObject *tpupy_rdv_wrap(tpupy_context *ctx, struct tpu_rendezvous *rdv, PyObject *owner)
{
	tpupy_rdv *r = (tpupy_rdv *)PyType_GenericAlloc(tpupy_RdvType, 0);

	if (!r) {
		if (!owner) {
			Py_BEGIN_ALLOW_THREADS
			tpu_rendezvous_destroy(rdv);
			Py_END_ALLOW_THREADS
		}
		return NULL;
	}
	r->ctx = (tpupy_context *)Py_NewRef((PyObject *)ctx);
	r->rdv = rdv;
	r->owner = owner ? Py_NewRef(owner) : NULL;
	return (PyObject *)r;
}

static void rdv_close_now(tpupy_rdv *r)
{
	struct tpu_rendezvous *rdv = r->rdv;

	r->rdv = NULL;
	if (!rdv || r->owner || r->ctx->pid != getpid() || !r->ctx->ctx)
		return;
	Py_BEGIN_ALLOW_THREADS
	tpu_rendezvous_destroy(rdv);
	Py_END_ALLOW_THREADS
}

static void rdv_dealloc(PyObject *self)
{
	tpupy_rdv *r = (tpupy_rdv *)self;
	PyTypeObject *tp = Py_TYPE(self);

	rdv_close_now(r);
	Py_CLEAR(r->owner);
	Py_CLEAR(r->ctx);
	((freefunc)PyType_GetSlot(tp, Py_tp_free))(self);
	Py_DECREF(tp);
}

static PyObject *rdv_close(PyObject *self, PyObject *unused)
{
	tpupy_rdv *r = (tpupy_rdv *)self;

	(void)unused;
	if (r->rdv && r->ctx->pid != getpid())
		return tpupy_raise(TPU_E_FORKED, "this rendezvous was created in the parent process");
	rdv_close_now(r);
	Py_RETURN_NONE;
}

static void free_arg(void *arg, tpu_status st)
{
	(void)st;
	free(arg);
}

/*
 * Posts the header (with the bytes when small) under the meta key; @done
 * NULL: blocking, until taken.  Returns 0 or a status; *@inlined says
 * whether the bytes went along.
 */
static tpu_status post_header(struct tpu_rendezvous *rdv, const char *mkey, size_t mlen,
			      const struct tpupy_view *v, uint64_t timeout_ns, bool wait,
			      bool *inlined)
{
	bool small = v->meta.nbytes <= TPUPY_INLINE_MAX;
	unsigned char *buf = malloc(TPUPY_HDR_MAX + (small ? v->meta.nbytes : 0));
	struct tpu_tensor t;
	size_t n;
	tpu_status st;

	if (!buf)
		return -ENOMEM;
	n = tpupy_hdr_encode(&v->meta, small, buf);
	if (small && v->meta.nbytes)
		memcpy(buf + n, v->data, v->meta.nbytes);
	t = (struct tpu_tensor){ .data = buf, .len = n + (small ? v->meta.nbytes : 0) };
	*inlined = small;
	if (small && wait) {
		st = tpu_rendezvous_send_wait(rdv, mkey, mlen, &t, 0, timeout_ns);
		free(buf);
		return st;
	}
	/* From here the header buffer is the send's: free_arg frees it. */
	st = tpu_rendezvous_send(rdv, mkey, mlen, &t, 0, free_arg, buf);
	if (st)
		free(buf);
	return st;
}

static PyObject *rdv_send(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "key", "tensor", "timeout", NULL };
	tpupy_rdv *r = (tpupy_rdv *)self;
	PyObject *kobj, *tobj, *tmo = Py_None;
	char mkey[KEY_MAX];
	size_t mlen;
	const char *key;
	Py_ssize_t klen;
	struct tpupy_view v;
	uint64_t timeout;
	tpu_status st;
	bool inlined;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:send", kwlist, &kobj, &tobj, &tmo) ||
	    rdv_check(r) < 0 || tpupy_key_arg(kobj, &key, &klen) < 0 ||
	    tpupy_timeout_arg(tmo, &timeout) < 0)
		return NULL;
	st = tpupy_meta_key(key, (size_t)klen, mkey, sizeof(mkey), &mlen);
	if (st)
		return tpupy_raise(st, "send");
	if (tpupy_view_get(tobj, false, &v) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	{
		uint64_t t0 = now_ns();

		st = post_header(r->rdv, mkey, mlen, &v, timeout, true, &inlined);
		if (!st && !inlined) {
			struct tpu_tensor t = { .data = v.data, .len = v.meta.nbytes };

			st = tpu_rendezvous_send_wait(r->rdv, key, (size_t)klen, &t, 0,
						      remaining(timeout, t0));
			if (st)	/* withdraw the header too, so the key can be sent again */
				tpu_rendezvous_cancel(r->rdv, mkey, mlen);
		}
	}
	Py_END_ALLOW_THREADS
	tpupy_view_release(&v);
	if (st)
		return tpupy_raise(st, "send");
	Py_RETURN_NONE;
}

static void data_sent(void *arg, tpu_status st)
{
	tpupy_cop_complete(arg, st);
}

static PyObject *rdv_send_op(PyObject *self, PyObject *args)
{
	tpupy_rdv *r = (tpupy_rdv *)self;
	PyObject *kobj, *tobj;
	char mkey[KEY_MAX];
	size_t mlen;
	const char *key;
	Py_ssize_t klen;
	tpupy_op *op;
	tpu_status st;
	bool inlined;

	if (!PyArg_ParseTuple(args, "OO:_send_op", &kobj, &tobj) || rdv_check(r) < 0 ||
	    tpupy_key_arg(kobj, &key, &klen) < 0)
		return NULL;
	st = tpupy_meta_key(key, (size_t)klen, mkey, sizeof(mkey), &mlen);
	if (st)
		return tpupy_raise(st, "send");
	op = tpupy_op_new(r->ctx, TPUPY_OP_SEND, self);
	if (!op)
		return NULL;
	if (tpupy_view_get(tobj, false, &op->view) < 0) {
		Py_DECREF((PyObject *)op);
		return NULL;
	}
	op->keep = Py_NewRef(tobj);
	if (op->view.meta.nbytes <= TPUPY_INLINE_MAX) {
		/* The header's key carries a copy: the op is done when it is taken. */
		struct tpupy_view *v = &op->view;
		unsigned char *buf = malloc(TPUPY_HDR_MAX + v->meta.nbytes);
		struct tpu_tensor t;
		size_t n;

		if (!buf) {
			Py_DECREF((PyObject *)op);
			return PyErr_NoMemory();
		}
		n = tpupy_hdr_encode(&v->meta, true, buf);
		if (v->meta.nbytes)
			memcpy(buf + n, v->data, v->meta.nbytes);
		t = (struct tpu_tensor){ .data = buf, .len = n + v->meta.nbytes };
		op->c.dst = buf;	/* freed with the op */
		op->c.own_dst = true;
		st = tpu_rendezvous_send(r->rdv, mkey, mlen, &t, 0, data_sent, &op->c);
	} else {
		struct tpu_tensor t = { .data = op->view.data, .len = op->view.meta.nbytes };

		st = post_header(r->rdv, mkey, mlen, &op->view, 0, false, &inlined);
		if (!st) {
			st = tpu_rendezvous_send(r->rdv, key, (size_t)klen, &t, 0, data_sent,
						 &op->c);
			if (st)
				tpu_rendezvous_cancel(r->rdv, mkey, mlen);
		}
	}
	if (st) {
		Py_DECREF((PyObject *)op);
		return tpupy_raise(st, "send");
	}
	tpupy_op_submitted(op);
	return (PyObject *)op;
}

static int check_into(const struct tpupy_meta *got, const struct tpupy_meta *into, char *why,
		      size_t size)
{
	if (got->dtype.code == into->dtype.code && got->dtype.bits == into->dtype.bits &&
	    got->nbytes == into->nbytes)
		return 0;
	snprintf(why, size, "the tensor is %s of %llu bytes, the destination %s of %llu bytes; "
		 "it was dropped.",
		 tpupy_dtype_name(got->dtype), (unsigned long long)got->nbytes,
		 tpupy_dtype_name(into->dtype), (unsigned long long)into->nbytes);
	return -EMSGSIZE;
}

/*
 * recv_into of a tensor too large to ride in its header's key, from a
 * remote rendezvous: the header's receive is posted first,
 * asynchronously, and the caller's thread then waits for the bytes itself
 * (tpu_rendezvous_recv_wait), so that their request leaves without waiting
 * a network round trip for the header.
 *
 * Everywhere else (inprocess, cma, kmod) recv_blocking() takes the header
 * and then the bytes, both on the caller's thread: the sender posted both
 * keys back to back, so the header is there when the caller wakes, and
 * the transfer involves no other thread of this process.  Posting the
 * header's receive asynchronously there cost two thread wake-ups per
 * tensor (the cma helper that takes it, the context's thread that runs its
 * callback), both competing for the cores with the pull of the bytes,
 * and often a third for this thread waiting for that callback.
 *
 * The header's callback checks it against the destination; when no key
 * of bytes will come (they came inline, or the header is not ours) and
 * the caller still waits, it withdraws the bytes' receive.  It does so under the lock the caller takes when its
 * wait returned: a cancel withdraws every operation of this member on the
 * key, and in one process the sender is this member too, so it must not
 * run once the receive is over.  Whatever the sender posted is then taken
 * into scratch memory and dropped, as recv_blocking() does.
 */
struct overlap {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool header_done, data_returned;
	tpu_status header_st, bad;
	struct tpu_rendezvous *rdv;
	const char *key;
	size_t klen;
	const struct tpupy_meta *into;
	struct tpupy_meta m;
	size_t hlen;
	bool inl;
	char why[160];
	unsigned char hdr[TPUPY_HDR_MAX + TPUPY_INLINE_MAX];
};

static void overlap_header(void *arg, tpu_status st, size_t len)
{
	struct overlap *o = arg;

	if (!st) {
		if (tpupy_hdr_decode(o->hdr, len, &o->m, &o->hlen, &o->inl)) {
			snprintf(o->why, sizeof(o->why), "the key carries no tpu_user tensor header.");
			o->bad = -EBADMSG;
		} else if (check_into(&o->m, o->into, o->why, sizeof(o->why))) {
			o->bad = -EMSGSIZE;
		} else if (o->inl) {
			snprintf(o->why, sizeof(o->why), "the tensor came inline, not as its own key.");
			o->bad = -EBADMSG;
		}
	}
	pthread_mutex_lock(&o->lock);
	/*
	 * Only when no key of bytes will come: a tensor of another dtype or
	 * length still arrives (or fails -EMSGSIZE) by itself, and withdrawing
	 * it could withdraw this process's own send of it.
	 */
	if ((st || o->inl || o->bad == -EBADMSG) && !o->data_returned)
		tpu_rendezvous_cancel(o->rdv, o->key, o->klen);
	o->header_st = st;
	o->header_done = true;
	pthread_cond_broadcast(&o->cond);
	pthread_mutex_unlock(&o->lock);
}

static tpu_status recv_into_overlapped(struct tpu_rendezvous *rdv, const char *key, size_t klen,
				       const char *mkey, size_t mlen, uint64_t timeout,
				       const struct tpupy_view *into, struct tpupy_meta *m,
				       char *why, size_t why_size)
{
	struct overlap *o = calloc(1, sizeof(*o));
	struct tpu_tensor t;
	tpu_status st, ret;
	void *scratch;

	if (!o)
		return -ENOMEM;
	pthread_mutex_init(&o->lock, NULL);
	pthread_cond_init(&o->cond, NULL);
	o->rdv = rdv;
	o->key = key;
	o->klen = klen;
	o->into = &into->meta;
	t = (struct tpu_tensor){ .data = o->hdr, .len = sizeof(o->hdr) };
	st = tpu_rendezvous_recv(rdv, mkey, mlen, &t, timeout, overlap_header, o);
	if (st)
		goto out;
	t = (struct tpu_tensor){ .data = into->data, .len = into->meta.nbytes };
	st = tpu_rendezvous_recv_wait(rdv, key, klen, &t, timeout, NULL);
	pthread_mutex_lock(&o->lock);
	o->data_returned = true;
	if (st && !o->header_done) {
		/* no bytes: the header's receive goes too */
		pthread_mutex_unlock(&o->lock);
		tpu_rendezvous_cancel(rdv, mkey, mlen);
		pthread_mutex_lock(&o->lock);
	}
	while (!o->header_done)
		pthread_cond_wait(&o->cond, &o->lock);
	pthread_mutex_unlock(&o->lock);
	*m = o->m;
	snprintf(why, why_size, "%s", o->why);
	if (o->header_st) {
		ret = o->header_st;
	} else if (o->bad) {
		ret = o->bad;
		if (!o->inl && (st == -ECANCELED || st == -EMSGSIZE)) {
			/* the sender's bytes are still posted: take them and drop them */
			scratch = tpupy_alloc(o->m.nbytes);
			if (scratch) {
				t = (struct tpu_tensor){ .data = scratch, .len = o->m.nbytes };
				tpu_rendezvous_recv_wait(rdv, key, klen, &t, timeout, NULL);
				tpupy_free(scratch, o->m.nbytes);
			}
		}
	} else {
		ret = st;
	}
	st = ret;
out:
	pthread_mutex_destroy(&o->lock);
	pthread_cond_destroy(&o->cond);
	free(o);
	return st;
}

/*
 * Blocking receive: header then bytes.  @into NULL: into a new Tensor.
 * Runs without the GIL; *@data gets our allocation.
 */
static tpu_status recv_blocking(struct tpu_rendezvous *rdv, const char *key, size_t klen,
				const char *mkey, size_t mlen, uint64_t timeout,
				const struct tpupy_view *into, void **data, struct tpupy_meta *m,
				char *why, size_t why_size)
{
	unsigned char hdr[TPUPY_HDR_MAX + TPUPY_INLINE_MAX];
	struct tpu_tensor t = { .data = hdr, .len = sizeof(hdr) };
	uint64_t t0 = now_ns();
	size_t len = 0, hlen;
	bool inl, ours;
	tpu_status st, bad;
	void *dst;

	st = tpu_rendezvous_recv_wait(rdv, mkey, mlen, &t, timeout, &len);
	if (st)
		return st;
	if (tpupy_hdr_decode(hdr, len, m, &hlen, &inl)) {
		snprintf(why, why_size, "key %.*s carries no tpu_user tensor header.", (int)mlen, mkey);
		return -EBADMSG;
	}
	bad = into ? check_into(m, &into->meta, why, why_size) : 0;
	ours = !into || bad;	/* a mismatch's bytes land in ours, then dropped */
	dst = ours ? tpupy_alloc(m->nbytes) : into->data;
	if (!dst)
		return -ENOMEM;
	if (inl) {
		memcpy(dst, hdr + hlen, m->nbytes);
	} else {
		t = (struct tpu_tensor){ .data = dst, .len = m->nbytes };
		st = tpu_rendezvous_recv_wait(rdv, key, klen, &t, remaining(timeout, t0), &len);
	}
	if (ours) {
		if (st || bad) {
			tpupy_free(dst, m->nbytes);
			dst = NULL;
		}
		*data = dst;
	}
	return st ? st : bad;
}

static PyObject *rdv_recv_common(tpupy_rdv *r, PyObject *kobj, PyObject *out, PyObject *tmo)
{
	char mkey[KEY_MAX], why[160] = "";
	size_t mlen;
	const char *key;
	Py_ssize_t klen;
	struct tpupy_view v = { 0 };
	struct tpupy_meta m;
	uint64_t timeout;
	void *data = NULL;
	tpu_status st;

	if (rdv_check(r) < 0 || tpupy_key_arg(kobj, &key, &klen) < 0 ||
	    tpupy_timeout_arg(tmo, &timeout) < 0)
		return NULL;
	st = tpupy_meta_key(key, (size_t)klen, mkey, sizeof(mkey), &mlen);
	if (st)
		return tpupy_raise(st, "recv");
	if (out && tpupy_view_get(out, true, &v) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	if (out && v.meta.nbytes > TPUPY_INLINE_MAX &&
	    tpu_rendezvous_impl(r->rdv) == TPU_RDV_REMOTE)
		st = recv_into_overlapped(r->rdv, key, (size_t)klen, mkey, mlen, timeout, &v, &m,
					  why, sizeof(why));
	else
		st = recv_blocking(r->rdv, key, (size_t)klen, mkey, mlen, timeout,
				   out ? &v : NULL, &data, &m, why, sizeof(why));
	Py_END_ALLOW_THREADS
	tpupy_view_release(&v);
	if (st)
		return tpupy_raise(st, why);
	if (out)
		return Py_NewRef(out);
	return tpupy_tensor_new(data, &m);
}

static PyObject *rdv_recv(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "key", "timeout", NULL };
	PyObject *kobj, *tmo = Py_None;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:recv", kwlist, &kobj, &tmo))
		return NULL;
	return rdv_recv_common((tpupy_rdv *)self, kobj, NULL, tmo);
}

static PyObject *rdv_recv_into(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "key", "out", "timeout", NULL };
	PyObject *kobj, *out, *tmo = Py_None;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:recv_into", kwlist, &kobj, &out, &tmo))
		return NULL;
	return rdv_recv_common((tpupy_rdv *)self, kobj, out, tmo);
}

/* ---- asynchronous receive, chained on the context's thread ---- */

static void data_received(void *arg, tpu_status st, size_t len)
{
	struct tpupy_cop *c = arg;

	(void)len;
	tpupy_cop_complete(c, st ? st : c->status);
}

static void header_received(void *arg, tpu_status st, size_t len)
{
	struct tpupy_cop *c = arg;
	struct tpu_tensor t;
	size_t hlen;
	bool inl;
	tpu_status bad = 0;
	void *dst;

	if (st) {
		tpupy_cop_complete(c, st);
		return;
	}
	if (tpupy_hdr_decode(c->hdr, len, &c->meta, &hlen, &inl)) {
		snprintf(c->why, sizeof(c->why), "the key carries no tpu_user tensor header.");
		tpupy_cop_complete(c, -EBADMSG);
		return;
	}
	c->have_meta = true;
	if (!c->own_dst)
		bad = check_into(&c->meta, &c->dst_meta, c->why, sizeof(c->why));
	if (c->own_dst || bad) {
		dst = tpupy_alloc(c->meta.nbytes);
		if (!dst) {
			tpupy_cop_complete(c, -ENOMEM);
			return;
		}
		if (!c->own_dst) {
			c->own_dst = true;	/* the mismatch's bytes land here, dropped */
			c->status = bad;
		}
		c->dst = dst;
	}
	if (inl) {
		memcpy(c->dst, c->hdr + hlen, c->meta.nbytes);
		tpupy_cop_complete(c, bad);
		return;
	}
	t = (struct tpu_tensor){ .data = c->dst, .len = c->meta.nbytes };
	st = tpu_rendezvous_recv(c->rdv, c->key, c->key_len, &t, c->timeout_ns, data_received, c);
	if (st)
		tpupy_cop_complete(c, st);
}

static PyObject *rdv_recv_op(PyObject *self, PyObject *args)
{
	tpupy_rdv *r = (tpupy_rdv *)self;
	PyObject *kobj, *out = Py_None, *tmo = Py_None;
	char mkey[KEY_MAX];
	size_t mlen;
	const char *key;
	Py_ssize_t klen;
	struct tpu_tensor t;
	tpupy_op *op;
	tpu_status st;

	if (!PyArg_ParseTuple(args, "O|OO:_recv_op", &kobj, &out, &tmo) || rdv_check(r) < 0 ||
	    tpupy_key_arg(kobj, &key, &klen) < 0)
		return NULL;
	st = tpupy_meta_key(key, (size_t)klen, mkey, sizeof(mkey), &mlen);
	if (st)
		return tpupy_raise(st, "recv");
	op = tpupy_op_new(r->ctx, TPUPY_OP_RECV, self);
	if (!op)
		return NULL;
	if (tpupy_timeout_arg(tmo, &op->c.timeout_ns) < 0)
		goto fail;
	op->c.rdv = r->rdv;
	op->c.key = malloc((size_t)klen + 1);
	if (!op->c.key) {
		PyErr_NoMemory();
		goto fail;
	}
	memcpy(op->c.key, key, (size_t)klen);
	op->c.key_len = (size_t)klen;
	if (out != Py_None) {
		if (tpupy_view_get(out, true, &op->view) < 0)
			goto fail;
		op->keep = Py_NewRef(out);
		op->c.dst = op->view.data;
		op->c.dst_meta = op->view.meta;
	} else {
		op->c.own_dst = true;
	}
	t = (struct tpu_tensor){ .data = op->c.hdr, .len = sizeof(op->c.hdr) };
	st = tpu_rendezvous_recv(r->rdv, mkey, mlen, &t, op->c.timeout_ns, header_received,
				 &op->c);
	if (st) {
		tpupy_raise(st, "recv");
		goto fail;
	}
	tpupy_op_submitted(op);
	return (PyObject *)op;
fail:
	Py_DECREF((PyObject *)op);
	return NULL;
}

PyObject *tpupy_rdv_op_result(tpupy_op *op)
{
	void *data;

	if (op->c.kind == TPUPY_OP_SEND)
		Py_RETURN_NONE;
	if (!op->c.own_dst)
		return Py_NewRef(op->keep);
	/* The tensor takes our allocation. */
	data = op->c.dst;
	op->c.dst = NULL;
	op->c.own_dst = false;
	return tpupy_tensor_new(data, &op->c.meta);
}

void tpupy_rdv_op_free(struct tpupy_cop *c)
{
	if (c->own_dst && c->kind == TPUPY_OP_RECV)
		tpupy_free(c->dst, c->meta.nbytes);
	else if (c->own_dst)
		free(c->dst);	/* a send's header and inline bytes */
	c->dst = NULL;
	free(c->key);
	c->key = NULL;
}

/* ---- the rest ---- */

static PyObject *rdv_cancel(PyObject *self, PyObject *args)
{
	tpupy_rdv *r = (tpupy_rdv *)self;
	PyObject *kobj;
	char mkey[KEY_MAX];
	size_t mlen;
	const char *key;
	Py_ssize_t klen;
	tpu_status a, b;

	if (!PyArg_ParseTuple(args, "O:cancel", &kobj) || rdv_check(r) < 0 ||
	    tpupy_key_arg(kobj, &key, &klen) < 0)
		return NULL;
	a = tpupy_meta_key(key, (size_t)klen, mkey, sizeof(mkey), &mlen);
	if (a)
		return tpupy_raise(a, "cancel");
	a = tpu_rendezvous_cancel(r->rdv, mkey, mlen);
	b = tpu_rendezvous_cancel(r->rdv, key, (size_t)klen);
	if (a && a != -ENOENT)
		return tpupy_raise(a, "cancel");
	if (b && b != -ENOENT)
		return tpupy_raise(b, "cancel");
	return PyBool_FromLong(!a || !b);
}

static PyObject *rdv_abort(PyObject *self, PyObject *args)
{
	tpupy_rdv *r = (tpupy_rdv *)self;
	int err = ECONNABORTED;
	tpu_status st;

	if (!PyArg_ParseTuple(args, "|i:abort", &err) || rdv_check(r) < 0)
		return NULL;
	if (err <= 0 || err > 4095) {
		PyErr_SetString(PyExc_ValueError, "abort takes a positive errno value");
		return NULL;
	}
	st = tpu_rendezvous_abort(r->rdv, -err);
	if (st)
		return tpupy_raise(st, "abort");
	Py_RETURN_NONE;
}

static PyObject *rdv_share(PyObject *self, PyObject *unused)
{
	tpupy_rdv *r = (tpupy_rdv *)self;
	tpu_status st;
	int fd = -1;

	(void)unused;
	if (rdv_check(r) < 0)
		return NULL;
	st = tpu_rendezvous_share(r->rdv, &fd);
	if (st)
		return tpupy_raise(st, "share");
	return PyLong_FromLong(fd);
}

static PyObject *rdv_url(PyObject *self, PyObject *args)
{
	tpupy_rdv *r = (tpupy_rdv *)self;
	const char *transport = NULL;
	char buf[512];
	tpu_status st;

	if (!PyArg_ParseTuple(args, "|z:url", &transport) || rdv_check(r) < 0)
		return NULL;
	st = tpu_rendezvous_url(r->rdv, transport, buf, sizeof(buf));
	if (st)
		return tpupy_raise(st, "url");
	return PyUnicode_FromString(buf);
}

static PyObject *rdv_add_peer(PyObject *self, PyObject *args)
{
	tpupy_rdv *r = (tpupy_rdv *)self;
	const char *task, *url;
	tpu_status st;

	if (!PyArg_ParseTuple(args, "ss:add_peer", &task, &url) || rdv_check(r) < 0)
		return NULL;
	st = tpu_rendezvous_add_peer(r->rdv, task, url);
	if (st)
		return tpupy_raise(st, "add_peer");
	Py_RETURN_NONE;
}

static PyObject *rdv_impl(PyObject *self, void *unused)
{
	tpupy_rdv *r = (tpupy_rdv *)self;

	(void)unused;
	if (!r->rdv)
		Py_RETURN_NONE;
	return PyUnicode_FromString(tpu_rdv_impl_name(tpu_rendezvous_impl(r->rdv)));
}

static PyMethodDef rdv_methods[] = {
	{ "send", (PyCFunction)(void (*)(void))rdv_send, METH_VARARGS | METH_KEYWORDS,
	  "send(key, tensor, timeout=None): post the tensor; returns once a receiver took it" },
	{ "recv", (PyCFunction)(void (*)(void))rdv_recv, METH_VARARGS | METH_KEYWORDS,
	  "recv(key, timeout=None) -> Tensor" },
	{ "recv_into", (PyCFunction)(void (*)(void))rdv_recv_into, METH_VARARGS | METH_KEYWORDS,
	  "recv_into(key, out, timeout=None) -> out: receive into a preallocated tensor" },
	{ "_send_op", rdv_send_op, METH_VARARGS, "_send_op(key, tensor) -> _Op" },
	{ "_recv_op", rdv_recv_op, METH_VARARGS, "_recv_op(key, out=None, timeout=None) -> _Op" },
	{ "cancel", rdv_cancel, METH_VARARGS,
	  "cancel(key) -> bool: withdraw this member's operations on key" },
	{ "abort", rdv_abort, METH_VARARGS,
	  "abort(errno=ECONNABORTED): fail every pending and later operation of every member" },
	{ "share", rdv_share, METH_NOARGS, "share() -> fd another process joins with" },
	{ "url", rdv_url, METH_VARARGS, "url(transport=None) -> where peers reach a remote one" },
	{ "add_peer", rdv_add_peer, METH_VARARGS, "add_peer(task, url): extend the cluster map" },
	{ "close", rdv_close, METH_NOARGS, "close(): leave; pending operations fail" },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef rdv_getset[] = {
	{ "impl", rdv_impl, NULL, "the implementation: inprocess, kmod, cma or remote", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot rdv_slots[] = {
	{ Py_tp_dealloc, rdv_dealloc },
	{ Py_tp_methods, rdv_methods },
	{ Py_tp_getset, rdv_getset },
	{ Py_tp_doc, "A rendezvous: tensors posted and taken by key." },
	{ 0, NULL },
};

static PyType_Spec rdv_spec = {
	.name = "tpu_user._Rendezvous",
	.basicsize = sizeof(tpupy_rdv),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
	.slots = rdv_slots,
};

int tpupy_rdv_init(PyObject *m)
{
	tpupy_RdvType = (PyTypeObject *)PyType_FromSpec(&rdv_spec);
	if (!tpupy_RdvType)
		return -1;
	return PyModule_AddObjectRef(m, "_Rendezvous", (PyObject *)tpupy_RdvType);
}
