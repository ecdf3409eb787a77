// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The rdma backend's device, completion thread, links and memory regions
 * (xfer_rdma.h has the design).
 *
 * Device: TPU_XFER_RDMA_DEVICE names one, else the first with an active
 * port; on RoCE the GID is the port's RoCE v2 entry of an IPv4 address
 * when there is one (what routes between hosts), else entry 0.
 *
 * Handshake: the requester creates its queue pairs, sends XFER_RDMA_CONN
 * on the agents' pipe (authenticated by the job secret before any frame of
 * ours is read), the target creates its own, brings them to RTS and
 * answers XFER_RDMA_ACCEPT; the requester then brings its own up.  Rkeys
 * travel only in the target's answers to loads on that same pipe.
 *
 * One thread per agent waits on the device's completion channel for every
 * link's CQ; it finishes requests and delivers notifications once it has
 * let go of its locks.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "xfer_rdma.h"

/* ---- device ---- */

static bool gid_v4_roce2(struct ibv_context *ctx, uint8_t port, int idx, union ibv_gid *gid)
{
	static const uint8_t v4[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	struct ibv_gid_entry e;

	if (ibv_query_gid_ex(ctx, port, (uint32_t)idx, &e, 0))
		return false;
	if (e.gid_type != IBV_GID_TYPE_ROCE_V2 || memcmp(e.gid.raw, v4, sizeof(v4)))
		return false;
	*gid = e.gid;
	return true;
}

static tpu_status dev_open(struct xrd_dev *d)
{
	const char *want = getenv("TPU_XFER_RDMA_DEVICE");
	struct ibv_device **list;
	struct ibv_port_attr pa;
	struct ibv_device_attr da;
	int n = 0, i;

	list = ibv_get_device_list(&n);
	if (!list || n <= 0) {
		if (list)
			ibv_free_device_list(list);
		return TPU_E_NO_DEVICE;
	}
	for (i = 0; i < n && !d->ctx; i++) {
		if (want && *want && strcmp(ibv_get_device_name(list[i]), want))
			continue;
		d->ctx = ibv_open_device(list[i]);
		if (!d->ctx)
			continue;
		if (ibv_query_port(d->ctx, 1, &pa) || pa.state != IBV_PORT_ACTIVE) {
			ibv_close_device(d->ctx);
			d->ctx = NULL;
		}
	}
	ibv_free_device_list(list);
	if (!d->ctx)
		return TPU_E_NO_DEVICE;
	d->port = 1;
	d->lid = pa.lid;
	d->mtu = pa.active_mtu;
	d->grh = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
	d->gid_index = 0;
	if (d->grh) {
		for (i = 0; i < pa.gid_tbl_len; i++)
			if (gid_v4_roce2(d->ctx, d->port, i, &d->gid)) {
				d->gid_index = i;
				break;
			}
		if (i == pa.gid_tbl_len && ibv_query_gid(d->ctx, d->port, 0, &d->gid))
			return TPU_E_NO_DEVICE;
	}
	d->rd_atom = 1;
	if (!ibv_query_device(d->ctx, &da)) {
		int m = da.max_qp_rd_atom < da.max_qp_init_rd_atom ? da.max_qp_rd_atom :
								      da.max_qp_init_rd_atom;

		d->rd_atom = (uint8_t)(m > 16 ? 16 : m < 1 ? 1 : m);
	}
	d->pd = ibv_alloc_pd(d->ctx);
	d->cch = d->pd ? ibv_create_comp_channel(d->ctx) : NULL;
	if (!d->cch)
		return tpu__errno();
	if (fcntl(d->cch->fd, F_SETFL, fcntl(d->cch->fd, F_GETFL) | O_NONBLOCK))
		return tpu__errno();
	d->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (d->efd < 0)
		return tpu__errno();
	return 0;
}

static void dev_close(struct xrd_dev *d)
{
	if (d->efd > 0)
		close(d->efd);
	if (d->cch)
		ibv_destroy_comp_channel(d->cch);
	if (d->pd)
		ibv_dealloc_pd(d->pd);
	if (d->ctx)
		ibv_close_device(d->ctx);
	pthread_mutex_destroy(&d->mu);
	free(d);
}

/* ---- completion thread ---- */

struct xrd_note {
	struct xrd_note *next;
	struct tpu_agent *a;
	char peer[TPU_XFER_NAME_MAX];
	size_t len;
	uint8_t msg[];
};

/* Requests finished meanwhile (thread-local list through the request's data). */
static _Thread_local struct tpu_xfer_req **done_list;
static _Thread_local size_t done_n, done_cap;
static _Thread_local struct xrd_note *notes, **notes_tail;
static _Thread_local bool in_thread;

void tpu__xrd_finish(struct tpu_xfer_req *r)
{
	if (done_n == done_cap) {
		size_t cap = done_cap ? 2 * done_cap : 64;
		struct tpu_xfer_req **n = realloc(done_list, cap * sizeof(*n));

		if (!n) {
			/* No memory: call back now (the caller's locks are the thread's). */
			tpu__xfer_req_complete(r, r->status);
			return;
		}
		done_list = n;
		done_cap = cap;
	}
	done_list[done_n++] = r;
}

/* In link: notifications on QP 0; the buffer goes back at once. */
static void in_wc(struct xfer_rdma_link *l, const struct ibv_wc *wc)
{
	unsigned int slot = (unsigned int)wc->wr_id;
	struct ibv_recv_wr rw = { .wr_id = slot, .num_sge = 1 }, *bad;
	struct ibv_sge sge;
	struct xrd_note *n;

	if (wc->status != IBV_WC_SUCCESS || wc->opcode != IBV_WC_RECV || slot >= XRD_RECVS) {
		if (wc->status != IBV_WC_WR_FLUSH_ERR)
			tpu__log_debug("xfer: rdma link of %s: %s", l->p->name,
				       ibv_wc_status_str(wc->status));
		return;
	}
	n = malloc(sizeof(*n) + wc->byte_len);
	if (n) {
		n->a = l->p->a;
		memcpy(n->peer, l->p->name, sizeof(n->peer));
		n->len = wc->byte_len;
		memcpy(n->msg, l->rbuf + (size_t)slot * TPU_XFER_NOTIF_MAX, wc->byte_len);
		n->next = NULL;
		*notes_tail = n;
		notes_tail = &n->next;
	}
	sge = (struct ibv_sge){ .addr = (uintptr_t)(l->rbuf + (size_t)slot * TPU_XFER_NOTIF_MAX),
				.length = TPU_XFER_NOTIF_MAX, .lkey = l->rmr->lkey };
	rw.sg_list = &sge;
	if (ibv_post_recv(l->qp[0].qp, &rw, &bad))
		tpu__log_debug("xfer: rdma link of %s: cannot repost a receive", l->p->name);
}

static void drain_cq(struct xfer_rdma_link *l)
{
	struct ibv_wc wc[32];
	int n, i;

	while ((n = ibv_poll_cq(l->cq, 32, wc)) > 0)
		for (i = 0; i < n; i++) {
			if (l->out)
				tpu__xrd_out_wc(l, &wc[i]);
			else
				in_wc(l, &wc[i]);
		}
}

/* Call back what finished; a callback may post and finish more (nested). */
void tpu__xrd_deliver(void)
{
	struct tpu_xfer_req **list = done_list;
	struct xrd_note *nt, *nl = notes;
	size_t i, n = done_n;

	done_list = NULL;
	done_n = done_cap = 0;
	notes = NULL;
	notes_tail = &notes;
	for (i = 0; i < n; i++)
		tpu__xfer_req_complete(list[i], list[i]->status);
	free(list);
	while ((nt = nl)) {
		nl = nt->next;
		tpu__xfer_notif_push(nt->a, nt->peer, nt->msg, nt->len);
		free(nt);
	}
}

static void *thread_main(void *arg)
{
	struct xrd_dev *d = arg;
	struct pollfd pf[2] = { { .fd = d->cch->fd, .events = POLLIN },
				{ .fd = d->efd, .events = POLLIN } };

	notes = NULL;
	notes_tail = &notes;
	in_thread = true;
	for (;;) {
		struct ibv_cq *cq;
		void *ctx;

		if (poll(pf, 2, -1) < 0 && errno != EINTR)
			break;
		if (pf[1].revents)
			break;
		pthread_mutex_lock(&d->mu);
		while (!ibv_get_cq_event(d->cch, &cq, &ctx)) {
			struct xfer_rdma_link *l = ctx;

			ibv_ack_cq_events(cq, 1);
			ibv_req_notify_cq(cq, 0);
			drain_cq(l);
		}
		pthread_mutex_unlock(&d->mu);
		tpu__xrd_deliver();
	}
	return NULL;
}

tpu_status tpu__xrd_dev_get(struct tpu_agent *a, struct xrd_dev **out)
{
	struct xrd_dev *d;
	tpu_status st;

	pthread_mutex_lock(&a->lock);
	d = a->rdma;
	pthread_mutex_unlock(&a->lock);
	if (d) {
		*out = d;
		return 0;
	}
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->efd = -1;
	pthread_mutex_init(&d->mu, NULL);
	st = dev_open(d);
	if (!st && pthread_create(&d->thread, NULL, thread_main, d))
		st = -EAGAIN;
	if (st) {
		dev_close(d);
		return st;
	}
	pthread_mutex_lock(&a->lock);
	if (!a->rdma) {
		a->rdma = d;
		d = NULL;
	}
	*out = a->rdma;
	pthread_mutex_unlock(&a->lock);
	if (d) {		/* another thread opened it first */
		uint64_t one = 1;

		if (write(d->efd, &one, sizeof(one)) != sizeof(one))
			tpu__log_debug("xfer: rdma: cannot stop a thread");
		pthread_join(d->thread, NULL);
		dev_close(d);
	}
	return 0;
}

void tpu__xfer_rdma_agent_free(struct tpu_agent *a)
{
	struct xrd_dev *d = a->rdma;
	uint64_t one = 1;

	if (!d)
		return;
	if (write(d->efd, &one, sizeof(one)) != sizeof(one))
		tpu__log_debug("xfer: rdma: cannot stop the thread");
	pthread_join(d->thread, NULL);
	a->rdma = NULL;
	dev_close(d);
}

/* ---- links ---- */

static void info_put(const struct xfer_rdma_link *l, uint8_t *b)
{
	unsigned int i;

	memcpy(b, l->dev->gid.raw, 16);
	tpu__put_le16(b + 16, l->dev->lid);
	b[18] = (uint8_t)l->dev->mtu;
	b[19] = (uint8_t)l->nqp;
	for (i = 0; i < l->nqp; i++) {
		tpu__put_le32(b + 20 + 4 * i, l->qp[i].qp->qp_num);
		tpu__put_le32(b + 20 + 4 * l->nqp + 4 * i, l->qp[i].psn);
	}
}

/* A peer's half of the handshake, checked: @nqp must match when nonzero. */
static tpu_status info_check(const uint8_t *b, size_t len, unsigned int nqp)
{
	if (len < XRD_CONN_LEN(1) || !b[19] || b[19] > XRD_QPS_MAX ||
	    len != XRD_CONN_LEN(b[19]) || (nqp && b[19] != nqp) || b[18] < IBV_MTU_256 ||
	    b[18] > IBV_MTU_4096)
		return -EPROTO;
	return 0;
}

static tpu_status qp_init(struct xfer_rdma_link *l, struct xrd_qp *q, bool recv)
{
	struct ibv_qp_init_attr qa = {
		.send_cq = l->cq,
		.recv_cq = l->cq,
		.qp_type = IBV_QPT_RC,
		.cap = {
			.max_send_wr = l->out ? XRD_SQ_DEPTH : 1,
			.max_recv_wr = recv ? XRD_RECVS : 1,
			.max_send_sge = 1,
			.max_recv_sge = 1,
		},
	};
	struct ibv_qp_attr at = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = l->dev->port,
		.qp_access_flags = l->out ? 0 : IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE,
	};
	uint32_t psn;

	q->qp = ibv_create_qp(l->pd, &qa);
	if (!q->qp)
		return tpu__errno();
	if (ibv_modify_qp(q->qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					  IBV_QP_ACCESS_FLAGS))
		return tpu__errno();
	{
		uint8_t nonce[TPU__AUTH_NONCE];

		if (tpu__auth_nonce(nonce))
			return -EIO;
		memcpy(&psn, nonce, sizeof(psn));
	}
	q->psn = psn & 0xffffff;
	q->sq_free = XRD_SQ_DEPTH;
	q->jobs_tail = &q->jobs;
	return 0;
}

/* RTR then RTS, towards the peer's half @b (checked). */
static tpu_status qp_connect(struct xfer_rdma_link *l, struct xrd_qp *q, const uint8_t *b,
			     unsigned int i)
{
	unsigned int nqp = b[19];
	enum ibv_mtu mtu = (enum ibv_mtu)b[18] < l->dev->mtu ? (enum ibv_mtu)b[18] : l->dev->mtu;
	struct ibv_qp_attr at = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = mtu,
		.dest_qp_num = tpu__get_le32(b + 20 + 4 * i),
		.rq_psn = tpu__get_le32(b + 20 + 4 * nqp + 4 * i) & 0xffffff,
		.max_dest_rd_atomic = l->dev->rd_atom,
		.min_rnr_timer = 12,
		.ah_attr = {
			.dlid = tpu__get_le16(b + 16),
			.port_num = l->dev->port,
		},
	};

	if (l->dev->grh) {
		at.ah_attr.is_global = 1;
		memcpy(at.ah_attr.grh.dgid.raw, b, 16);
		at.ah_attr.grh.sgid_index = (uint8_t)l->dev->gid_index;
		at.ah_attr.grh.hop_limit = 64;
	}
	if (ibv_modify_qp(q->qp, &at, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return tpu__errno();
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTS;
	at.timeout = XRD_ACK_TIMEOUT;
	at.retry_cnt = XRD_RETRY;
	at.rnr_retry = 7;	/* the target reposts at once; a dead one still times out */
	at.sq_psn = q->psn;
	at.max_rd_atomic = l->dev->rd_atom;
	if (ibv_modify_qp(q->qp, &at, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		return tpu__errno();
	return 0;
}

static void link_destroy(struct xfer_rdma_link *l)
{
	struct xfer_rdma_link **pp;
	unsigned int i;
	size_t k;

	/*
	 * Under dev->mu: the completion thread is not in this link (it reposts
	 * receives on its queue pair 0) and acked every event of its CQ.
	 */
	pthread_mutex_lock(&l->dev->mu);
	for (pp = &l->dev->links; *pp; pp = &(*pp)->next)
		if (*pp == l) {
			*pp = l->next;
			break;
		}
	for (i = 0; i < l->nqp; i++)
		if (l->qp[i].qp)
			ibv_destroy_qp(l->qp[i].qp);
	if (l->cq)
		ibv_destroy_cq(l->cq);
	pthread_mutex_unlock(&l->dev->mu);
	for (k = 0; k < l->nmrs; k++)
		ibv_dereg_mr(l->mrs[k].mr);
	free(l->mrs);
	if (l->rmr)
		ibv_dereg_mr(l->rmr);
	free(l->rbuf);
	if (!l->out && l->pd)
		ibv_dealloc_pd(l->pd);
	pthread_mutex_destroy(&l->mu);
	free(l);
}

static tpu_status link_new(struct xrd_dev *d, struct xfer_peer *p, bool out, unsigned int nqp,
			   struct xfer_rdma_link **outl)
{
	struct xfer_rdma_link *l = calloc(1, sizeof(*l));
	tpu_status st = 0;
	unsigned int i;

	if (!l)
		return -ENOMEM;
	l->dev = d;
	l->p = p;
	l->out = out;
	l->nqp = nqp;
	pthread_mutex_init(&l->mu, NULL);
	l->pd = out ? d->pd : ibv_alloc_pd(d->ctx);
	if (!l->pd) {
		st = tpu__errno();
		goto fail;
	}
	l->cq = ibv_create_cq(d->ctx, out ? (int)nqp * XRD_SQ_DEPTH + 16 : XRD_RECVS + 16, l,
			      d->cch, 0);
	if (!l->cq) {
		st = tpu__errno();
		goto fail;
	}
	for (i = 0; i < nqp && !st; i++)
		st = qp_init(l, &l->qp[i], !out && i == 0);
	if (!st && !out) {
		l->rbuf = calloc(XRD_RECVS, TPU_XFER_NOTIF_MAX);
		l->rmr = l->rbuf ? ibv_reg_mr(l->pd, l->rbuf, (size_t)XRD_RECVS * TPU_XFER_NOTIF_MAX,
					      IBV_ACCESS_LOCAL_WRITE) : NULL;
		if (!l->rmr)
			st = l->rbuf ? tpu__errno() : -ENOMEM;
		for (i = 0; !st && i < XRD_RECVS; i++) {
			struct ibv_sge sge = {
				.addr = (uintptr_t)(l->rbuf + (size_t)i * TPU_XFER_NOTIF_MAX),
				.length = TPU_XFER_NOTIF_MAX, .lkey = l->rmr->lkey };
			struct ibv_recv_wr rw = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;

			if (ibv_post_recv(l->qp[0].qp, &rw, &bad))
				st = tpu__errno();
		}
	}
	if (!st && ibv_req_notify_cq(l->cq, 0))
		st = tpu__errno();
	if (st)
		goto fail;
	pthread_mutex_lock(&d->mu);
	l->next = d->links;
	d->links = l;
	pthread_mutex_unlock(&d->mu);
	*outl = l;
	return 0;
fail:
	link_destroy(l);
	return st;
}

static unsigned int qps_wanted(void)
{
	const char *s = getenv("TPU_XFER_RDMA_QPS");
	long n = s && *s ? strtol(s, NULL, 10) : XRD_QPS_DEFAULT;

	return n < 1 ? 1 : n > XRD_QPS_MAX ? XRD_QPS_MAX : (unsigned int)n;
}

tpu_status tpu__xfer_rdma_connect(struct xfer_peer *p)
{
	struct tpu_agent *a = p->a;
	uint8_t info[XRD_CONN_LEN(XRD_QPS_MAX)];
	struct xfer_hdr h = { .type = XFER_RDMA_CONN };
	struct xfer_rdma_link *l;
	struct xrd_dev *d;
	struct timespec ts;
	tpu_status st;
	unsigned int i;
	const void *dd[1] = { info };
	size_t ll[1];

	pthread_mutex_lock(&a->lock);
	if (p->rdma_tried) {
		pthread_mutex_unlock(&a->lock);
		return p->rdma && p->rdma->up ? 0 : TPU_E_NO_DEVICE;
	}
	p->rdma_tried = true;
	pthread_mutex_unlock(&a->lock);
	st = tpu__xrd_dev_get(a, &d);
	if (!st)
		st = link_new(d, p, true, qps_wanted(), &l);
	if (st)
		return st;
	pthread_mutex_lock(&a->lock);
	p->rdma = l;
	pthread_mutex_unlock(&a->lock);
	info_put(l, info);
	ll[0] = XRD_CONN_LEN(l->nqp);
	st = tpu__xfer_send(p, &h, dd, ll, 1);
	tpu__xfer_deadline_in(&ts, XFER_LOAD_MS);
	pthread_mutex_lock(&a->lock);
	while (!st && !l->answered && !atomic_load(&p->error))
		if (pthread_cond_timedwait(&a->cond, &a->lock, &ts))
			st = -ETIMEDOUT;
	if (!st && !l->answered)
		st = atomic_load(&p->error);
	if (!st)
		st = l->ans_status;
	if (!st)
		st = info_check(l->ans, l->ans_len, l->nqp);
	pthread_mutex_unlock(&a->lock);
	for (i = 0; !st && i < l->nqp; i++)
		st = qp_connect(l, &l->qp[i], l->ans, i);
	if (!st) {
		l->up = true;
		return 0;
	}
	tpu__log_debug("xfer: no rdma link to %s: %s", p->url, tpu_strerror(st));
	pthread_mutex_lock(&a->lock);
	p->rdma = NULL;
	pthread_mutex_unlock(&a->lock);
	link_destroy(l);
	return st;
}

void tpu__xfer_rdma_accept(struct xfer_peer *p)
{
	struct tpu_agent *a = p->a;
	struct xfer_rdma_link *l;

	pthread_mutex_lock(&a->lock);
	l = p->rdma;
	if (l && !l->answered) {
		l->ans_status = p->in.h.status;
		l->ans_len = p->in.pl[0].len;
		if (l->ans_len <= sizeof(l->ans))
			memcpy(l->ans, p->in.pl[0].data, l->ans_len);
		else
			l->ans_status = -EPROTO;
		l->answered = true;
	}
	pthread_cond_broadcast(&a->cond);
	pthread_mutex_unlock(&a->lock);
}

void tpu__xfer_rdma_conn(struct xfer_peer *p)
{
	struct tpu_agent *a = p->a;
	const uint8_t *b = p->in.pl[0].data;
	uint8_t info[XRD_CONN_LEN(XRD_QPS_MAX)];
	struct xfer_hdr h = { .type = XFER_RDMA_ACCEPT };
	struct xfer_rdma_link *l = NULL;
	struct xrd_dev *d;
	const void *dd[1] = { info };
	size_t ll[1] = { 0 };
	tpu_status st = info_check(b, p->in.pl[0].len, 0);
	unsigned int i;

	pthread_mutex_lock(&a->lock);
	if (!st && (p->rdma || !(a->backends & TPU_XFER_BACKEND_RDMA)))
		st = p->rdma ? -EALREADY : TPU_E_NO_TRANSPORT;
	pthread_mutex_unlock(&a->lock);
	if (!st)
		st = tpu__xrd_dev_get(a, &d);
	if (!st)
		st = link_new(d, p, false, b[19], &l);
	for (i = 0; !st && i < l->nqp; i++)
		st = qp_connect(l, &l->qp[i], b, i);
	if (!st) {
		pthread_mutex_lock(&a->lock);
		if (atomic_load(&p->error) || p->rdma)
			st = TPU_E_PEER_GONE;
		else
			p->rdma = l;
		pthread_mutex_unlock(&a->lock);
	}
	if (st) {
		if (l)
			link_destroy(l);
		h.status = st;
	} else {
		info_put(l, info);
		ll[0] = XRD_CONN_LEN(l->nqp);
	}
	tpu__xfer_send(p, &h, dd, ll, 1);
}

/* ---- failure, freeing ---- */

static void qps_error(struct xfer_rdma_link *l)
{
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_ERR };
	unsigned int i;

	for (i = 0; i < l->nqp; i++)
		if (l->qp[i].qp)
			ibv_modify_qp(l->qp[i].qp, &at, IBV_QP_STATE);
}

void tpu__xrd_link_fail(struct xfer_rdma_link *l, tpu_status st)
{
	unsigned int i;

	pthread_mutex_lock(&l->mu);
	if (!l->err)
		l->err = st ? st : TPU_E_PEER_GONE;
	qps_error(l);
	/* Jobs not posted yet finish with the error; posted ones flush. */
	for (i = 0; i < l->nqp; i++)
		tpu__xrd_pump(l, &l->qp[i]);
	pthread_mutex_unlock(&l->mu);
}

void tpu__xfer_rdma_peer_fail(struct xfer_peer *p, tpu_status st)
{
	struct xfer_rdma_link *l;

	pthread_mutex_lock(&p->a->lock);
	l = p->rdma;
	pthread_mutex_unlock(&p->a->lock);
	if (!l)
		return;
	tpu__xrd_link_fail(l, st);
	/* The completion thread calls back once it let go of its locks. */
	if (!in_thread)
		tpu__xrd_deliver();
}

/*
 * @p is freed: flushed work requests still due on its CQ are polled here
 * (bounded), so that no post is left waiting; then the link goes.
 */
void tpu__xfer_rdma_peer_free(struct xfer_peer *p)
{
	struct xfer_rdma_link *l = p->rdma;
	unsigned int i, due = 0, tries;

	if (!l)
		return;
	tpu__xrd_link_fail(l, TPU_E_CLOSED);
	for (tries = 0; l->out && tries < 2000; tries++) {
		pthread_mutex_lock(&l->dev->mu);
		drain_cq(l);
		pthread_mutex_unlock(&l->dev->mu);
		tpu__xrd_deliver();
		pthread_mutex_lock(&l->mu);
		for (due = 0, i = 0; i < l->nqp; i++)
			due += l->qp[i].count;
		pthread_mutex_unlock(&l->mu);
		if (!due)
			break;
		usleep(1000);
	}
	if (due)
		tpu__log_debug("xfer: rdma link to %s: %u windows never flushed", p->url, due);
	p->rdma = NULL;
	link_destroy(l);
}

/* ---- memory regions ---- */

tpu_status tpu__xrd_local_mr(struct xrd_dev *d, struct tpu_xfer_reg *reg, struct ibv_mr **out)
{
	struct ibv_mr *mr = reg->rdma_mr;

	if (atomic_load(&reg->revoked))
		return TPU_E_REVOKED;
	if (!mr) {
		mr = ibv_reg_mr(d->pd, reg->addr, reg->len, IBV_ACCESS_LOCAL_WRITE);
		if (!mr)	/* read-only memory: good for WRITEs from it */
			mr = ibv_reg_mr(d->pd, reg->addr, reg->len, 0);
		if (!mr)
			return tpu__errno();
		reg->rdma_mr = mr;
	}
	*out = mr;
	return 0;
}

tpu_status tpu__xfer_rdma_grant(struct xfer_peer *p, struct tpu_xfer_reg *r, uint32_t *rkey)
{
	struct xfer_rdma_link *l = p->rdma;
	int acc = 0;
	struct ibv_mr *mr;
	size_t k;

	for (k = 0; k < l->nmrs; k++)
		if (l->mrs[k].reg == r) {
			*rkey = l->mrs[k].mr->rkey;
			return 0;
		}
	if (r->access & TPU_XFER_READ)
		acc |= IBV_ACCESS_REMOTE_READ;
	if (r->access & TPU_XFER_WRITE)
		acc |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
	if (l->nmrs == l->mrs_cap) {
		size_t cap = l->mrs_cap ? 2 * l->mrs_cap : 8;
		struct xrd_mr *n = realloc(l->mrs, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		l->mrs = n;
		l->mrs_cap = cap;
	}
	mr = ibv_reg_mr(l->pd, r->addr, r->len, acc);
	if (!mr)
		return tpu__errno();
	l->mrs[l->nmrs++] = (struct xrd_mr){ r, mr };
	*rkey = mr->rkey;
	return 0;
}

void tpu__xfer_rdma_reg_drop_remote(struct tpu_agent *a, struct tpu_xfer_reg *r)
{
	struct xfer_peer *p;
	size_t k;

	for (p = a->peers; p; p = p->next) {
		struct xfer_rdma_link *l = p->rdma;

		if (p->out || !l)
			continue;
		for (k = 0; k < l->nmrs; k++) {
			if (l->mrs[k].reg != r)
				continue;
			if (ibv_dereg_mr(l->mrs[k].mr)) {
				/* Its rkey would live on: cut this peer off, then again. */
				qps_error(l);
				if (ibv_dereg_mr(l->mrs[k].mr))
					tpu__log_debug("xfer: rdma: an MR of %s stays", p->name);
			}
			l->mrs[k] = l->mrs[--l->nmrs];
			break;
		}
	}
}

void tpu__xfer_rdma_reg_drop_local(struct tpu_xfer_reg *r)
{
	if (r->rdma_mr && !ibv_dereg_mr(r->rdma_mr))
		r->rdma_mr = NULL;
}
