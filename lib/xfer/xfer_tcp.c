// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The tcp backend (any pipe transport): a post goes as chunks of at most
 * XFER_CHUNK_ELEMS elements and XFER_CHUNK_BYTES bytes, a WRITE's data
 * gathered into each chunk, and the target serves them (xfer_serve.c) in
 * order; a READ's answer is scattered here.  The post completes with the
 * last answer, failed with the first error any chunk had (an answer out of
 * order or repeated is one).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "xfer.h"


static tpu_status tcp_attach(struct xfer_peer *p)
{
	(void)p;
	return 0;
}

struct chunk_out {
	struct tpu_xfer_req *r;
	void *stage;
};

static void chunk_sent(void *arg, tpu_status st)
{
	struct chunk_out *o = arg;
	struct tpu_agent *a = o->r->a;

	(void)st;		/* a failed pipe fails the post through its pending list */
	free(o->stage);
	pthread_mutex_lock(&a->lock);
	o->r->writes_out--;
	pthread_cond_broadcast(&a->cond);
	pthread_mutex_unlock(&a->lock);
	free(o);
}

/* a->lock held: take @r off @p's pending list; false if it was not on it. */
static bool unpend(struct xfer_peer *p, struct tpu_xfer_req *r)
{
	struct tpu_xfer_req **pp;

	for (pp = &p->pending; *pp; pp = &(*pp)->pend_next)
		if (*pp == r) {
			*pp = r->pend_next;
			return true;
		}
	return false;
}

static void fail_post(struct tpu_xfer_req *r, tpu_status st)
{
	bool mine;

	pthread_mutex_lock(&r->a->lock);
	mine = unpend(r->peer, r);
	pthread_mutex_unlock(&r->a->lock);
	if (mine)
		tpu__xfer_req_complete(r, st);
}

static void tcp_post(struct tpu_xfer_req *r)
{
	struct xfer_peer *p = r->peer;
	struct tpu_agent *a = r->a;
	tpu_status st;
	size_t c;

	pthread_rwlock_rdlock(&a->local_rw);
	st = atomic_load(&p->error);
	if (!st)
		st = tpu__xfer_req_live(r);
	if (st || !r->nchunks) {
		pthread_rwlock_unlock(&a->local_rw);
		if (!st && r->notif)
			st = tpu__xfer_send_notif(p, r);
		tpu__xfer_req_complete(r, st);
		return;
	}
	pthread_mutex_lock(&a->lock);
	r->serial = ++p->next_id;
	r->chunks_left = r->nchunks;
	r->first_err = 0;
	r->pend_next = p->pending;
	p->pending = r;
	pthread_mutex_unlock(&a->lock);
	for (c = 0; c < r->nchunks && !st; c++) {
		size_t first = r->chunk_start[c], n = r->chunk_start[c + 1] - first, i;
		uint64_t bytes = tpu__xfer_chunk_bytes(r, c);
		bool last = c + 1 == r->nchunks;
		struct xfer_hdr h = {
			.type = XFER_REQ, .id = r->serial, .key = c, .n = (uint32_t)n,
			.op = r->op, .len = bytes,
			.flags = (last ? XFER_F_LAST : 0) | (last && r->notif ? XFER_F_NOTIF : 0),
		};
		struct chunk_out *o = calloc(1, sizeof(*o));
		const void *d[3];
		size_t l[3];

		if (!o) {
			st = -ENOMEM;
			break;
		}
		o->r = r;
		if (r->op == TPU_XFER_OP_WRITE) {
			uint8_t *q = o->stage = malloc(bytes ? bytes : 1);

			if (!q) {
				free(o);
				st = -ENOMEM;
				break;
			}
			for (i = first; i < first + n; i++) {
				memcpy(q, r->liov[i].iov_base, r->liov[i].iov_len);
				q += r->liov[i].iov_len;
			}
		}
		d[0] = r->elems + first * XFER_ELEM_LEN;
		l[0] = n * XFER_ELEM_LEN;
		d[1] = o->stage;
		l[1] = r->op == TPU_XFER_OP_WRITE ? bytes : 0;
		d[2] = last && r->notif ? r->notif : NULL;
		l[2] = last && r->notif ? r->notif_len : 0;
		pthread_mutex_lock(&a->lock);
		r->writes_out++;
		pthread_mutex_unlock(&a->lock);
		st = tpu__xfer_send_ref(p, &h, d, l, 3, chunk_sent, o);
		if (st) {
			pthread_mutex_lock(&a->lock);
			r->writes_out--;
			pthread_mutex_unlock(&a->lock);
			free(o->stage);
			free(o);
		}
	}
	pthread_rwlock_unlock(&a->local_rw);
	if (st)
		fail_post(r, st);
}

/*
 * Context thread: the answer to one chunk.  Handled under a->lock, so that
 * a cancel and release on another thread wait for it.
 */
void tpu__xfer_tcp_resp(struct xfer_peer *p)
{
	const struct xfer_hdr *h = &p->in.h;
	struct tpu_agent *a = p->a;
	struct tpu_xfer_req *r;
	tpu_status st = h->status;
	bool done = false;

	pthread_rwlock_rdlock(&a->local_rw);
	pthread_mutex_lock(&a->lock);
	for (r = p->pending; r && r->serial != h->id; r = r->pend_next)
		;
	if (!r)
		goto out;	/* cancelled */
	/*
	 * The target answers a post's chunks in order, each once: another
	 * (a repeat, one skipped) must not pass for the missing one.
	 */
	if (h->key != r->nchunks - r->chunks_left) {
		st = -EPROTO;
	} else if (!st && r->op == TPU_XFER_OP_READ) {
		size_t c = h->key, i;
		const uint8_t *q = p->in.pl[0].data;

		if (p->in.pl[0].len != tpu__xfer_chunk_bytes(r, c))
			st = -EPROTO;
		else
			st = tpu__xfer_req_live(r);
		for (i = r->chunk_start[c]; !st && i < r->chunk_start[c + 1]; i++) {
			memcpy(r->liov[i].iov_base, q, r->liov[i].iov_len);
			q += r->liov[i].iov_len;
		}
	}
	if (st && !r->first_err)
		r->first_err = st;
	if (!--r->chunks_left)
		done = unpend(p, r);
	st = r->first_err;
out:
	pthread_mutex_unlock(&a->lock);
	pthread_rwlock_unlock(&a->local_rw);
	if (done)
		tpu__xfer_req_complete(r, st);
}

void tpu__xfer_tcp_fail_pending(struct xfer_peer *p, tpu_status st)
{
	struct tpu_xfer_req *r;

	for (;;) {
		pthread_mutex_lock(&p->a->lock);
		r = p->pending;
		if (r)
			p->pending = r->pend_next;
		pthread_mutex_unlock(&p->a->lock);
		if (!r)
			return;
		tpu__xfer_req_complete(r, st);
	}
}

static bool tcp_cancel(struct tpu_xfer_req *r)
{
	bool mine;

	pthread_mutex_lock(&r->a->lock);
	mine = unpend(r->peer, r);
	pthread_mutex_unlock(&r->a->lock);
	return mine;
}

const struct xfer_backend tpu__xfer_tcp = {
	.name = "tcp",
	.attach = tcp_attach,
	.post = tcp_post,
	.cancel = tcp_cancel,
};
