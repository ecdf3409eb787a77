// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The rdma backend's requests: RDMA READ and WRITE between the local MR of
 * each local registration and the MR the target registered for this link,
 * one work request per pair, built once at preparation (lkeys, rkeys,
 * addresses) and reused by every post.
 *
 * A post is cut into stripes over the link's queue pairs when it is large
 * (at least XRD_STRIPE_MIN pairs and XRD_STRIPE_BYTES bytes per queue
 * pair); each stripe goes as windows of chained work requests, one
 * doorbell (ibv_post_send) each, only the window's last one signalled;
 * the next window goes when the send queue has room.  The notification is
 * a SEND on queue pair 0 after the data: chained behind it when the post
 * is one stripe (fenced behind a READ's data), else posted once every
 * stripe completed.  The target's MR is the bounds check the hardware
 * makes; preparation checked every element against the bounds the
 * target's answer gave, so a request outside them fails whole before a
 * byte moves.  A post fails with the first error: an access error
 * (deregistered, the rkey died) is TPU_E_REVOKED, a target that stopped
 * answering TPU_E_PEER_GONE once the retries ran out (xfer_rdma.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "xfer_rdma.h"

struct xrd_req {
	struct ibv_send_wr *wr;		/* npairs, then the notification's SEND */
	struct ibv_sge *sge;
	struct ibv_mr *nmr;		/* the notification message */
	unsigned int nstripes;
	size_t stripe[XRD_QPS_MAX + 1];
	struct xrd_job job[XRD_QPS_MAX + 1];
	bool notif_inline;		/* one stripe: the SEND ends it */
	/* the post in flight, l->mu */
	unsigned int left;		/* stripes not finished */
	tpu_status err;
	bool notif_due;			/* SEND once every stripe finished */
};

static tpu_status wc_status(enum ibv_wc_status s)
{
	switch (s) {
	case IBV_WC_SUCCESS:
		return 0;
	case IBV_WC_REM_ACCESS_ERR:
	case IBV_WC_LOC_PROT_ERR:
	case IBV_WC_REM_INV_REQ_ERR:
		return TPU_E_REVOKED;
	case IBV_WC_RETRY_EXC_ERR:
	case IBV_WC_RNR_RETRY_EXC_ERR:
	case IBV_WC_REM_ABORT_ERR:
	case IBV_WC_FATAL_ERR:
		return TPU_E_PEER_GONE;
	default:
		return -EIO;
	}
}

static tpu_status rdma_attach(struct xfer_peer *p)
{
	return p->rdma && p->rdma->up ? 0 : TPU_E_NO_DEVICE;
}

static void release(struct tpu_xfer_req *r)
{
	struct xrd_req *x = r->be_data;

	if (!x)
		return;
	if (x->nmr)
		ibv_dereg_mr(x->nmr);
	free(x->wr);
	free(x->sge);
	free(x);
	r->be_data = NULL;
}

/* Cut the pairs into stripes of about equal bytes. */
static void stripes(struct tpu_xfer_req *r, struct xrd_req *x, unsigned int nqp)
{
	uint64_t per, acc = 0;
	unsigned int n = nqp, s = 1;
	size_t i;

	if (!r->npairs) {
		x->nstripes = 0;
		return;
	}
	if (n > r->npairs / XRD_STRIPE_MIN)
		n = (unsigned int)(r->npairs / XRD_STRIPE_MIN);
	if (n > r->total / XRD_STRIPE_BYTES)
		n = (unsigned int)(r->total / XRD_STRIPE_BYTES);
	if (n < 1)
		n = 1;
	per = r->total / n;
	x->stripe[0] = 0;
	for (i = 0; i < r->npairs && s < n; i++) {
		acc += r->liov[i].iov_len;
		if (acc >= per * s && r->npairs - (i + 1) >= n - s)
			x->stripe[s++] = i + 1;
	}
	n = s;
	x->stripe[n] = r->npairs;
	x->nstripes = n;
}

static tpu_status prepare(struct tpu_xfer_req *r)
{
	struct xfer_rdma_link *l = r->peer->rdma;
	struct tpu_agent *a = r->a;
	size_t nw = r->npairs + 1, i, li = 0, ri = 0;
	struct ibv_mr **mrs;
	struct xrd_req *x;
	tpu_status st = 0;

	if (!l || !l->up)
		return TPU_E_NO_DEVICE;
	x = calloc(1, sizeof(*x));
	mrs = calloc(r->nlregs ? r->nlregs : 1, sizeof(*mrs));
	if (!x || !mrs) {
		free(x);
		free(mrs);
		return -ENOMEM;
	}
	r->be_data = x;
	x->wr = calloc(nw, sizeof(*x->wr));
	x->sge = calloc(nw, sizeof(*x->sge));
	if (!x->wr || !x->sge)
		st = -ENOMEM;
	/* Each local registration's MR, registered at its first use with rdma. */
	pthread_mutex_lock(&a->lock);
	for (i = 0; !st && i < r->nlregs; i++)
		st = tpu__xrd_local_mr(l->dev, r->lregs[i], &mrs[i]);
	pthread_mutex_unlock(&a->lock);
	if (!st && r->notif) {
		x->nmr = ibv_reg_mr(l->dev->pd, r->notif, r->notif_len ? r->notif_len : 1, 0);
		if (!x->nmr)
			st = tpu__errno();
	}
	for (i = 0; !st && i < r->npairs; i++) {
		uint8_t *lp = r->liov[i].iov_base;
		uint64_t reg = tpu__get_le64(r->elems + i * XFER_ELEM_LEN);
		struct ibv_send_wr *w = &x->wr[i];

		/* Which registration and handle each pair is of (the last one, most often). */
		if (lp < r->lregs[li]->addr || lp + r->liov[i].iov_len >
						      r->lregs[li]->addr + r->lregs[li]->len)
			for (li = 0; li < r->nlregs; li++)
				if (lp >= r->lregs[li]->addr &&
				    lp + r->liov[i].iov_len <= r->lregs[li]->addr + r->lregs[li]->len)
					break;
		if (r->rms[ri]->reg != reg)
			for (ri = 0; ri < r->nrms && r->rms[ri]->reg != reg; ri++)
				;
		if (li == r->nlregs || ri == r->nrms) {
			st = -EINVAL;	/* cannot happen: preparation built the pairs from them */
			break;
		}
		x->sge[i] = (struct ibv_sge){ .addr = (uintptr_t)lp,
					      .length = (uint32_t)r->liov[i].iov_len,
					      .lkey = mrs[li]->lkey };
		w->wr_id = (uintptr_t)r;
		w->sg_list = &x->sge[i];
		w->num_sge = 1;
		w->opcode = r->op == TPU_XFER_OP_READ ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
		w->wr.rdma.remote_addr = (uintptr_t)r->riov[i].iov_base;
		w->wr.rdma.rkey = r->rms[ri]->rkey;
		w->next = &x->wr[i + 1];
	}
	if (!st) {
		struct ibv_send_wr *w = &x->wr[r->npairs];

		w->wr_id = (uintptr_t)r;
		w->opcode = IBV_WR_SEND;
		/* After a READ, the target's memory is read before it hears of it. */
		w->send_flags = r->op == TPU_XFER_OP_READ ? IBV_SEND_FENCE : 0;
		if (r->notif_len) {
			x->sge[r->npairs] = (struct ibv_sge){ .addr = (uintptr_t)r->notif,
							      .length = (uint32_t)r->notif_len,
							      .lkey = x->nmr->lkey };
			w->sg_list = &x->sge[r->npairs];
			w->num_sge = 1;
		}
		stripes(r, x, l->nqp);
		x->notif_inline = r->notif && x->nstripes <= 1;
	}
	free(mrs);
	if (st)
		release(r);
	return st;
}

/* l->mu held: a stripe of @r finished (@st its first error). */
static void stripe_done(struct xfer_rdma_link *l, struct tpu_xfer_req *r, tpu_status st)
{
	struct xrd_req *x = r->be_data;

	if (st && !x->err)
		x->err = st;
	if (--x->left)
		return;
	if (!x->err && x->notif_due && !l->err) {
		struct xrd_job *j = &x->job[XRD_QPS_MAX];
		struct xrd_qp *q = &l->qp[0];

		x->notif_due = false;
		x->left = 1;
		*j = (struct xrd_job){ .r = r, .next_wr = r->npairs, .end = r->npairs + 1 };
		*q->jobs_tail = j;
		q->jobs_tail = &j->next;
		return;		/* the caller pumps queue pair 0 */
	}
	if (!x->err && x->notif_due)
		x->err = l->err;
	r->status = x->err;
	tpu__xrd_finish(r);
}

static void job_pop(struct xrd_qp *q)
{
	q->jobs = q->jobs->next;
	if (!q->jobs)
		q->jobs_tail = &q->jobs;
}

void tpu__xrd_pump(struct xfer_rdma_link *l, struct xrd_qp *q)
{
	while (q->jobs) {
		struct xrd_job *j = q->jobs;
		struct tpu_xfer_req *r = j->r;
		struct xrd_req *x = r->be_data;
		size_t n = j->end - j->next_wr;
		struct ibv_send_wr *last, *save, *bad;
		unsigned int flags;
		uint64_t id;
		bool ends;
		int rc;

		if (l->err) {
			job_pop(q);
			stripe_done(l, r, l->err);
			continue;
		}
		if (q->count == XRD_SQ_DEPTH)
			break;
		if (n > q->sq_free) {
			if (q->sq_free < XRD_WINDOW_MIN)
				break;
			n = q->sq_free;
		}
		last = &x->wr[j->next_wr + n - 1];
		save = last->next;
		flags = last->send_flags;
		id = last->wr_id;
		last->next = NULL;
		last->send_flags |= IBV_SEND_SIGNALED;
		last->wr_id = (uintptr_t)r | 1;
		rc = ibv_post_send(q->qp, &x->wr[j->next_wr], &bad);
		last->next = save;
		last->send_flags = flags;
		last->wr_id = id;
		if (rc) {
			struct ibv_qp_attr at = { .qp_state = IBV_QPS_ERR };
			unsigned int i;

			tpu__log_debug("xfer: rdma post to %s: %s", l->p->url, strerror(rc));
			l->err = -rc;
			for (i = 0; i < l->nqp; i++)
				ibv_modify_qp(l->qp[i].qp, &at, IBV_QP_STATE);
			continue;
		}
		ends = j->next_wr + n == j->end;
		q->ring[(q->head + q->count) % XRD_SQ_DEPTH] =
			(struct xrd_win){ .r = r, .count = (uint32_t)n, .last = ends };
		q->count++;
		q->sq_free -= (unsigned int)n;
		j->next_wr += n;
		if (ends)
			job_pop(q);
	}
}

void tpu__xrd_out_wc(struct xfer_rdma_link *l, const struct ibv_wc *wc)
{
	tpu_status st = wc_status(wc->status);
	bool failed = false;
	struct xrd_qp *q = NULL;
	unsigned int i;

	pthread_mutex_lock(&l->mu);
	if (st && wc->status != IBV_WC_WR_FLUSH_ERR && !l->err) {
		struct ibv_qp_attr at = { .qp_state = IBV_QPS_ERR };

		tpu__log_debug("xfer: rdma link to %s: %s", l->p->url, ibv_wc_status_str(wc->status));
		l->err = st;
		failed = true;
		for (i = 0; i < l->nqp; i++)
			ibv_modify_qp(l->qp[i].qp, &at, IBV_QP_STATE);
	}
	if (st)
		st = l->err ? l->err : -EIO;
	for (i = 0; i < l->nqp; i++)
		if (l->qp[i].qp->qp_num == wc->qp_num)
			q = &l->qp[i];
	/* Unsignalled work requests complete only with an error: the link's says it all. */
	if (q && (wc->wr_id & 1) && q->count) {
		struct xrd_win w = q->ring[q->head];
		struct xrd_req *x = w.r->be_data;

		q->head = (q->head + 1) % XRD_SQ_DEPTH;
		q->count--;
		q->sq_free += w.count;
		if (st && !x->err)
			x->err = st;
		if (w.last)
			stripe_done(l, w.r, st);
		tpu__xrd_pump(l, q);
		if (q != &l->qp[0])
			tpu__xrd_pump(l, &l->qp[0]);
	}
	pthread_mutex_unlock(&l->mu);
	/* Later loads connect anew: this pipe's link is spent. */
	if (failed)
		tpu__xfer_peer_fail(l->p, l->err);
}

static void post(struct tpu_xfer_req *r)
{
	struct xfer_peer *p = r->peer;
	struct xfer_rdma_link *l = p->rdma;
	struct xrd_req *x = r->be_data;
	struct tpu_agent *a = r->a;
	unsigned int s;
	tpu_status st;

	/* Under local_rw: no local MR is deregistered between the check and the post. */
	pthread_rwlock_rdlock(&a->local_rw);
	st = atomic_load(&p->error);
	if (!st)
		st = tpu__xfer_req_live(r);
	if (!st && !x)
		st = TPU_E_NO_DEVICE;
	if (!st && !r->npairs && !r->notif) {
		pthread_rwlock_unlock(&a->local_rw);
		tpu__xfer_req_complete(r, 0);
		return;
	}
	if (!st) {
		pthread_mutex_lock(&l->mu);
		st = l->err;
		if (!st) {
			x->err = 0;
			x->notif_due = r->notif && !x->notif_inline;
			if (!x->nstripes) {
				x->left = 1;
				x->job[0] = (struct xrd_job){ .r = r, .next_wr = 0, .end = 1 };
				x->job[0].next_wr = r->npairs;
				x->job[0].end = r->npairs + 1;
				x->notif_due = false;
			} else {
				x->left = x->nstripes;
				for (s = 0; s < x->nstripes; s++)
					x->job[s] = (struct xrd_job){
						.r = r, .next_wr = x->stripe[s],
						.end = x->stripe[s + 1] +
						       (x->notif_inline && s == 0 ? 1 : 0) };
			}
			for (s = 0; s < (x->nstripes ? x->nstripes : 1); s++) {
				struct xrd_qp *q = &l->qp[s];

				x->job[s].next = NULL;
				*q->jobs_tail = &x->job[s];
				q->jobs_tail = &x->job[s].next;
				tpu__xrd_pump(l, q);
			}
		}
		pthread_mutex_unlock(&l->mu);
	}
	pthread_rwlock_unlock(&a->local_rw);
	if (st)
		tpu__xfer_req_complete(r, st);
	else
		tpu__xrd_deliver();	/* what a failed post finished */
}

static bool cancel(struct tpu_xfer_req *r)
{
	(void)r;
	return false;	/* posted work requests cannot be taken back; they end, bounded */
}

const struct xfer_backend tpu__xfer_rdma = {
	.name = "rdma",
	.attach = rdma_attach,
	.post = post,
	.cancel = cancel,
	.prepare = prepare,
	.release = release,
};
