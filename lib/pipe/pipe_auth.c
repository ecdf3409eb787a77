// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Proving the job secret on a connection of a pipe (context thread only),
 * before HELLO, WELCOME or JOIN: on every connection a pipe makes or
 * accepts, over every transport (the pipe's own, a transport switch's,
 * each mtcp lane).  Only when the context has a secret; without one the
 * wire is as it was.
 *
 *   connector				listener
 *   AUTH 1 (nonce_c)		      ->
 *				      <- AUTH 2 (nonce_l, proof_l)
 *   [checks proof_l]
 *   AUTH 3 (proof_c)		      ->
 *   HELLO or JOIN ...		         [checks proof_c, then reads HELLO/JOIN]
 *
 * proof_l = HMAC(key, "tensorpipe pipe v1 listener" NUL nonce_c nonce_l),
 * proof_c the same with "connector" (base/auth.c).  Each end's proof
 * covers the other's fresh nonce, so neither can be replayed; the role in
 * the label keeps a proof from being reflected back.
 *
 * A mismatch fails clearly, never hangs: a listener with a secret answers
 * a HELLO with a WELCOME refusing -EACCES, one without answers AUTH the
 * same way (pipe_setup.c), and a wrong proof closes the connection (the
 * connector then fails -EACCES, and so does its peer's check).  What the
 * peer sent is read only into fixed buffers here: nothing is allocated
 * for an end that has not proved the secret.
 */
#include <stdlib.h>
#include <string.h>

#include "pipe_internal.h"

#define AUTH_BODY	(4 + TPU__AUTH_NONCE + TPU__SHA256_LEN)
#define AUTH_FRAME	(TPU__WIRE_HDR_LEN + AUTH_BODY)
/* A WELCOME that refuses is small; anything longer is not one. */
#define REFUSAL_MAX	256
/*
 * A refused peer's frame is read and dropped first (so that closing does
 * not reset the refusal away), up to this much; a longer one is not.
 */
#define DRAIN_MAX	(64u << 10)

static const char label_listener[] = "tensorpipe pipe v1 listener";
static const char label_connector[] = "tensorpipe pipe v1 connector";

struct pipe_auth {
	struct tpu_pipe *p;
	struct tpu__conn *c;
	bool connector;
	tpu__pipe_auth_fn done;
	void *arg;
	struct tpu__wire_hdr h;
	uint32_t drain;			/* bytes of a refused frame still to drop */
	uint8_t nonce_c[TPU__AUTH_NONCE], nonce_l[TPU__AUTH_NONCE];
	uint8_t out[REFUSAL_MAX];	/* the frame being written */
	uint8_t in[REFUSAL_MAX];	/* the frame being read */
};



/* An AUTH frame of @step into a->out. */
static void auth_frame(struct pipe_auth *a, uint32_t step, const uint8_t *nonce, const uint8_t *proof)
{
	uint8_t *b = a->out + TPU__WIRE_HDR_LEN;

	tpu__wire_hdr_encode(a->out, TPU__WIRE_AUTH, AUTH_BODY);
	memset(b, 0, AUTH_BODY);
	tpu__put_le32(b, step);
	if (nonce)
		memcpy(b + 4, nonce, TPU__AUTH_NONCE);
	if (proof)
		memcpy(b + 4 + TPU__AUTH_NONCE, proof, TPU__SHA256_LEN);
}

static void finish(struct pipe_auth *a, tpu_status st)
{
	struct tpu_pipe *p = a->p;

	if (st && p->state != PIPE_FAILED)
		tpu__log_debug("pipe %p: %s: authentication failed: %s", (void *)p,
			       a->connector ? "connecting" : "refusing a peer", tpu_strerror(st));
	a->done(p, a->c, st, a->arg);
	memset(a, 0, sizeof(*a));
	free(a);
}

static tpu_status auth_write(struct pipe_auth *a, size_t len, tpu__io_cb cb)
{
	tpu_status st;

	tpu__pipe_io_get(a->p);
	st = a->c->ops->write(a->c, &(struct iovec){ a->out, len }, 1, cb, a);
	if (st)
		tpu__pipe_io_cancel(a->p);
	return st;
}

static tpu_status auth_read(struct pipe_auth *a, void *buf, size_t len, tpu__io_cb cb)
{
	tpu_status st;

	tpu__pipe_io_get(a->p);
	st = a->c->ops->read(a->c, buf, len, cb, a);
	if (st)
		tpu__pipe_io_cancel(a->p);
	return st;
}

/* The io reference of the operation that called back; true if @a goes on. */
static bool step_ok(struct pipe_auth *a, tpu_status *st)
{
	tpu__pipe_io_put(a->p);
	if (!*st && a->p->state == PIPE_FAILED)
		*st = a->p->error ? a->p->error : TPU_E_CLOSED;
	return !*st;
}

/* The body of an AUTH frame of @step in a->in; its nonce and proof. */
static tpu_status auth_body(const struct pipe_auth *a, uint32_t step, const uint8_t **nonce,
			    const uint8_t **proof)
{
	if (a->h.type != TPU__WIRE_AUTH || a->h.len != AUTH_BODY || tpu__get_le32(a->in) != step)
		return -EPROTO;
	*nonce = a->in + 4;
	*proof = a->in + 4 + TPU__AUTH_NONCE;
	return 0;
}

/* ---- connector ---------------------------------------------------------- */

static void conn_last_written(void *arg, tpu_status st)
{
	struct pipe_auth *a = arg;

	step_ok(a, &st);
	finish(a, st);
}

static void conn_body_read(void *arg, tpu_status st)
{
	struct pipe_auth *a = arg;
	uint8_t want[TPU__SHA256_LEN], proof_c[TPU__SHA256_LEN];
	const uint8_t *nonce, *proof;
	struct tpu__wire_welcome w;

	if (!step_ok(a, &st))
		goto fail;
	if (a->h.type == TPU__WIRE_WELCOME) {
		/* The listener refuses: it has no secret, or sent why. */
		st = tpu__wire_welcome_decode(a->in, a->h.len, &w);
		st = !st && w.status ? w.status : -EPROTO;
		goto fail;
	}
	st = auth_body(a, 2, &nonce, &proof);
	if (st)
		goto fail;
	memcpy(a->nonce_l, nonce, TPU__AUTH_NONCE);
	tpu__auth_proof(&a->p->secret, label_listener, a->nonce_c, a->nonce_l, want);
	if (!tpu__ct_equal(want, proof, sizeof(want))) {
		st = -EACCES;	/* another secret: our proof is not sent */
		goto fail;
	}
	tpu__auth_proof(&a->p->secret, label_connector, a->nonce_c, a->nonce_l, proof_c);
	auth_frame(a, 3, NULL, proof_c);
	st = auth_write(a, AUTH_FRAME, conn_last_written);
	if (!st)
		return;
fail:
	finish(a, st);
}

static void conn_hdr_read(void *arg, tpu_status st)
{
	struct pipe_auth *a = arg;

	if (!step_ok(a, &st))
		goto fail;
	st = tpu__wire_hdr_decode(a->in, &a->h);
	if (!st && !(a->h.type == TPU__WIRE_AUTH && a->h.len == AUTH_BODY) &&
	    !(a->h.type == TPU__WIRE_WELCOME && a->h.len && a->h.len <= REFUSAL_MAX))
		st = -EPROTO;
	if (!st)
		st = auth_read(a, a->in, a->h.len, conn_body_read);
	if (!st)
		return;
fail:
	finish(a, st);
}

static void conn_first_written(void *arg, tpu_status st)
{
	struct pipe_auth *a = arg;

	/* One operation at a time: the read starts once the write is done. */
	if (step_ok(a, &st))
		st = auth_read(a, a->in, TPU__WIRE_HDR_LEN, conn_hdr_read);
	if (st)
		finish(a, st);
}

/* ---- listener ----------------------------------------------------------- */

static void lis_refused(void *arg, tpu_status st)
{
	struct pipe_auth *a = arg;

	step_ok(a, &st);
	finish(a, -EACCES);
}

/* Answer with a WELCOME refusing -EACCES, then fail. */
static void refuse(struct pipe_auth *a)
{
	struct tpu__wire_welcome w = { .status = -EACCES };
	long len = tpu__wire_welcome_encode(a->out, sizeof(a->out), &w);

	if (len < 0 || auth_write(a, (size_t)len, lis_refused))
		finish(a, -EACCES);
}

/* Drop what is left of the refused frame (into a fixed buffer), then refuse. */
static void drained(void *arg, tpu_status st)
{
	struct pipe_auth *a = arg;
	uint32_t n = a->drain < sizeof(a->in) ? a->drain : (uint32_t)sizeof(a->in);

	if (!step_ok(a, &st)) {
		finish(a, -EACCES);
		return;
	}
	if (!a->drain) {
		refuse(a);
		return;
	}
	a->drain -= n;
	if (auth_read(a, a->in, n, drained))
		finish(a, -EACCES);
}

static void refuse_frame(struct pipe_auth *a, uint32_t body_len)
{
	if (body_len > DRAIN_MAX) {
		finish(a, -EACCES);
		return;
	}
	a->drain = body_len;
	tpu__pipe_io_get(a->p);	/* drained() gives back the reference of a read */
	drained(a, 0);
}

static void lis_last_read(void *arg, tpu_status st)
{
	struct pipe_auth *a = arg;
	uint8_t want[TPU__SHA256_LEN];
	const uint8_t *nonce, *proof;

	if (!step_ok(a, &st))
		goto out;
	st = tpu__wire_hdr_decode(a->in, &a->h);
	if (!st) {
		memmove(a->in, a->in + TPU__WIRE_HDR_LEN, AUTH_BODY);
		st = auth_body(a, 3, &nonce, &proof);
	}
	if (!st) {
		tpu__auth_proof(&a->p->secret, label_connector, a->nonce_c, a->nonce_l, want);
		if (!tpu__ct_equal(want, proof, sizeof(want))) {
			st = -EACCES;
			refuse(a);
			return;
		}
	}
out:
	finish(a, st);
}

static void lis_second_written(void *arg, tpu_status st)
{
	struct pipe_auth *a = arg;

	if (step_ok(a, &st))
		st = auth_read(a, a->in, AUTH_FRAME, lis_last_read);
	if (st)
		finish(a, st);
}

static void lis_body_read(void *arg, tpu_status st)
{
	struct pipe_auth *a = arg;
	uint8_t proof_l[TPU__SHA256_LEN];
	const uint8_t *nonce, *proof;

	if (!step_ok(a, &st))
		goto fail;
	st = auth_body(a, 1, &nonce, &proof);
	if (!st) {
		memcpy(a->nonce_c, nonce, TPU__AUTH_NONCE);
		st = tpu__auth_nonce(a->nonce_l);
	}
	if (st)
		goto fail;
	tpu__auth_proof(&a->p->secret, label_listener, a->nonce_c, a->nonce_l, proof_l);
	auth_frame(a, 2, a->nonce_l, proof_l);
	st = auth_write(a, AUTH_FRAME, lis_second_written);
	if (!st)
		return;
fail:
	finish(a, st);
}

static void lis_hdr_read(void *arg, tpu_status st)
{
	struct pipe_auth *a = arg;

	if (!step_ok(a, &st))
		goto fail;
	st = tpu__wire_hdr_decode(a->in, &a->h);
	if (!st && (a->h.type == TPU__WIRE_HELLO || a->h.type == TPU__WIRE_JOIN)) {
		/* A peer without a secret: tell it why, then close. */
		refuse_frame(a, a->h.len);
		return;
	}
	if (!st && (a->h.type != TPU__WIRE_AUTH || a->h.len != AUTH_BODY))
		st = -EPROTO;
	if (!st)
		st = auth_read(a, a->in, AUTH_BODY, lis_body_read);
	if (!st)
		return;
fail:
	finish(a, st);
}

/* ---- entry points ------------------------------------------------------ */

tpu_status tpu__pipe_auth(struct tpu_pipe *p, struct tpu__conn *c, bool connector,
			  tpu__pipe_auth_fn done, void *arg)
{
	struct pipe_auth *a = calloc(1, sizeof(*a));
	tpu_status st;

	if (!a)
		return -ENOMEM;
	*a = (struct pipe_auth){ .p = p, .c = c, .connector = connector, .done = done, .arg = arg };
	if (connector) {
		st = tpu__auth_nonce(a->nonce_c);
		if (!st) {
			auth_frame(a, 1, a->nonce_c, NULL);
			st = auth_write(a, AUTH_FRAME, conn_first_written);
		}
	} else {
		st = auth_read(a, a->in, TPU__WIRE_HDR_LEN, lis_hdr_read);
	}
	/* Nothing queued: nothing will call back. */
	if (st)
		free(a);
	return st;
}

tpu_status tpu__pipe_auth_refuse(struct tpu_pipe *p, struct tpu__conn *c, uint32_t body_len,
				 tpu__pipe_auth_fn done, void *arg)
{
	struct pipe_auth *a = calloc(1, sizeof(*a));

	if (!a)
		return -ENOMEM;
	*a = (struct pipe_auth){ .p = p, .c = c, .done = done, .arg = arg };
	refuse_frame(a, body_len);
	return 0;
}
