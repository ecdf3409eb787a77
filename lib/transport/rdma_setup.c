// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The rdma transport's set-up (xport_rdma.c has the design): rdma_cm
 * resolves the address, then the route, and the device, port and GID are
 * the ones that route goes through; nothing is chosen here.  Then one RC
 * queue pair per connection, connect or accept, and rdma_cm's later events
 * (a peer that disconnects, a device removed).  A listener's accepted ids
 * move to an event channel of their own (rdma_migrate_id), so that each
 * connection is watched and freed on its own.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <liburing.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdma.h"

struct rdma_listener {
	struct tpu__xlistener base;
	struct tpu_context *ctx;
	struct rdma_event_channel *ech;
	struct rdma_cm_id *id;
	tpu__accept_fn fn;
	void *arg;
	bool closed, failed;
	bool in_event;			/* inside on_listener_event: it frees a closed l */
	unsigned int inflight;
	char addr[TPU__XPORT_ADDR_MAX];
};

/* The IB CM's reject reason for a service id nobody listens on. */
#define RDMA_REJ_NO_LISTENER	8

static tpu_status set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return tpu__errno();
	return 0;
}

/* An event channel whose descriptor never blocks; NULL and errno set if none. */
static struct rdma_event_channel *event_channel(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();

	if (ch && set_nonblock(ch->fd)) {
		int e = errno;

		rdma_destroy_event_channel(ch);
		errno = e;
		return NULL;
	}
	return ch;
}

/* No rdma_cm device node or no device: say so as the library does. */
static tpu_status cm_errno(void)
{
	return errno == ENODEV || errno == ENOENT ? TPU_E_NO_DEVICE : tpu__errno();
}

tpu_status tpu__rdma_viable(char *why, size_t size)
{
	struct rdma_event_channel *ch;
	int n = 0;
	struct ibv_device **devs = ibv_get_device_list(&n);

	if (devs)
		ibv_free_device_list(devs);
	if (!devs || n <= 0) {
		snprintf(why, size, "no RDMA device");
		return TPU_E_NO_DEVICE;
	}
	ch = rdma_create_event_channel();
	if (!ch) {
		snprintf(why, size, "no rdma_cm (/dev/infiniband/rdma_cm: %s; load rdma_ucm)",
			 strerror(errno));
		return TPU_E_NO_DEVICE;
	}
	rdma_destroy_event_channel(ch);
	return 0;
}

/* ---- queue pair ------------------------------------------------------------ */

tpu_status tpu__rdma_setup_qp(struct rdma_conn *c)
{
	struct rdma_cm_id *id = c->id;
	size_t slab = (size_t)(RDMA_RECVS + RDMA_SENDS) * RDMA_MSG;
	uint8_t timeout = RDMA_ACK_TIMEOUT;
	struct ibv_qp_init_attr qa = {
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 1,
		.cap = {
			.max_send_wr = RDMA_SENDS + RDMA_READS + 1,	/* + the keepalive probe */
			.max_recv_wr = RDMA_RECVS,
			.max_send_sge = 1,
			.max_recv_sge = 1,
			.max_inline_data = RDMA_INLINE,
		},
	};
	tpu_status st;

	if (!id->verbs)
		return -ENODEV;
	c->pd = ibv_alloc_pd(id->verbs);
	c->cch = c->pd ? ibv_create_comp_channel(id->verbs) : NULL;
	if (!c->cch)
		return tpu__errno();
	st = set_nonblock(c->cch->fd);
	if (st)
		return st;
	c->cq = ibv_create_cq(id->verbs, RDMA_RECVS + RDMA_SENDS + RDMA_READS, c, c->cch, 0);
	if (!c->cq)
		return tpu__errno();
	c->slab = aligned_alloc(4096, slab);
	if (!c->slab)
		return -ENOMEM;
	c->mr = ibv_reg_mr(c->pd, c->slab, slab, IBV_ACCESS_LOCAL_WRITE);
	if (!c->mr)
		return tpu__errno();
	qa.send_cq = qa.recv_cq = c->cq;
	if (rdma_create_qp(id, c->pd, &qa)) {
		/* Some devices take no inline data at all: go without. */
		qa.cap.max_inline_data = 0;
		if (rdma_create_qp(id, c->pd, &qa))
			return tpu__errno();
	}
	c->qp = true;
	c->max_inline = qa.cap.max_inline_data;
	for (unsigned int i = 0; i < RDMA_RECVS; i++) {
		st = tpu__rdma_post_recv(c, i);
		if (st)
			return st;
	}
	if (ibv_req_notify_cq(c->cq, 0))
		return tpu__errno();
	/* Explicit, so that a dead peer is found within the bound of xport_rdma.c. */
	if (rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout,
			    sizeof(timeout)))
		tpu__log_debug("rdma: cannot set the ack timeout (%s): the route's applies",
			       strerror(errno));
	return tpu__rdma_watch(c, c->cch->fd, tpu__rdma_on_cq_event, &c->cch_watch);
}

static void conn_param(struct rdma_conn *c, struct rdma_conn_param *p)
{
	struct ibv_device_attr da;
	uint8_t rd = 1;

	/* Room for RDMA READs both ways, as the device allows (a channel may use them). */
	if (!ibv_query_device(c->id->verbs, &da)) {
		int m = da.max_qp_rd_atom < da.max_qp_init_rd_atom ? da.max_qp_rd_atom :
								      da.max_qp_init_rd_atom;

		rd = (uint8_t)(m > 16 ? 16 : m < 1 ? 1 : m);
	}
	*p = (struct rdma_conn_param){
		.responder_resources = rd,
		.initiator_depth = rd,
		.retry_count = RDMA_RETRY,
		.rnr_retry_count = RDMA_RNR_RETRY,
	};
	c->rd_depth = rd;
}

void tpu__rdma_conn_destroy(struct rdma_conn *c)
{
	tpu__rdma_async_del(c);
	if (c->qp)
		rdma_destroy_qp(c->id);
	if (c->mr)
		ibv_dereg_mr(c->mr);
	free(c->slab);
	if (c->cq)
		ibv_destroy_cq(c->cq);
	if (c->cch)
		ibv_destroy_comp_channel(c->cch);
	if (c->pd)
		ibv_dealloc_pd(c->pd);
	if (c->id)
		rdma_destroy_id(c->id);
	if (c->ech)
		rdma_destroy_event_channel(c->ech);
	tpu__free_list_drain(&c->rd_free);
	tpu__free_list_drain(&c->wr_free);
	free(c);
}

/* ---- rdma_cm events of a connection ------------------------------------------- */

static tpu_status route_resolved(struct rdma_conn *c)
{
	struct rdma_conn_param p;
	tpu_status st = tpu__rdma_setup_qp(c);

	if (st)
		return st;
	conn_param(c, &p);
	if (rdma_connect(c->id, &p))
		return tpu__errno();
	c->state = C_CONNECTING;
	return 0;
}

static void cm_event(struct rdma_conn *c, enum rdma_cm_event_type type, int status)
{
	tpu_status st;

	switch (type) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (rdma_resolve_route(c->id, RDMA_RESOLVE_MS))
			tpu__rdma_conn_fail(c, tpu__errno(), "resolving the route");
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		st = route_resolved(c);
		if (st)
			tpu__rdma_conn_fail(c, st, "connecting");
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		tpu__rdma_conn_established(c);
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
		tpu__rdma_conn_fail(c, status < 0 ? status : -EHOSTUNREACH, rdma_event_str(type));
		break;
	case RDMA_CM_EVENT_UNREACHABLE:
		tpu__rdma_conn_fail(c, -EHOSTUNREACH, rdma_event_str(type));
		break;
	case RDMA_CM_EVENT_REJECTED:
		/*
		 * A port nobody listens on is rejected by the peer's rdma_cm
		 * (IB reject reason 8, invalid service id).  Any other reason:
		 * a listener accepted (its user may close the connection before
		 * it is established), so the peer went away.
		 */
		tpu__log_debug("rdma conn %p: rejected, reason %d", (void *)c, status);
		if (status == RDMA_REJ_NO_LISTENER)
			tpu__rdma_conn_fail(c, -ECONNREFUSED, rdma_event_str(type));
		else
			tpu__rdma_conn_down(c, -ECONNRESET, -EPIPE);
		break;
	case RDMA_CM_EVENT_CONNECT_ERROR:
		tpu__rdma_conn_fail(c, -ECONNREFUSED, rdma_event_str(type));
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		/* What arrived before the peer left is still read. */
		tpu__rdma_poll_cq(c);
		if (c->state != C_DOWN && !c->closed)
			tpu__log_debug("rdma conn %p: the peer disconnected", (void *)c);
		tpu__rdma_conn_down(c, -ECONNRESET, -EPIPE);
		break;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		tpu__rdma_conn_fail(c, -ENODEV, rdma_event_str(type));
		break;
	default:
		break;
	}
}

static void on_cm_event(void *arg, const struct io_uring_cqe *cqe)
{
	struct rdma_conn *c = arg;
	struct rdma_cm_event *ev;

	(void)cqe;
	c->inflight--;
	c->ech_watch = 0;
	if (c->releasing) {
		tpu__rdma_conn_check_release(c);
		return;
	}
	c->depth++;
	while (!rdma_get_cm_event(c->ech, &ev)) {
		enum rdma_cm_event_type type = ev->event;
		int status = ev->status;

		rdma_ack_cm_event(ev);
		tpu__log_debug("rdma conn %p: %s (%d)", (void *)c, rdma_event_str(type), status);
		cm_event(c, type, status);
	}
	c->depth--;
	tpu__rdma_watch_cm(c);
	tpu__rdma_conn_progress(c);
}

void tpu__rdma_watch_cm(struct rdma_conn *c)
{
	if (c->releasing || c->ech_watch)
		return;
	if (tpu__rdma_watch(c, c->ech->fd, on_cm_event, &c->ech_watch))
		tpu__rdma_conn_fail(c, -ENOMEM, "watching rdma_cm");
}

tpu_status tpu__rdma_connect(struct tpu_context *ctx, const char *addr, struct tpu__conn **out)
{
	struct addrinfo *ai;
	struct rdma_conn *c;
	tpu_status st;

	*out = NULL;
	st = tpu__xport_resolve(addr, false, &ai);
	if (st)
		return st;
	c = tpu__rdma_conn_new(ctx);
	if (!c) {
		freeaddrinfo(ai);
		return -ENOMEM;
	}
	c->ech = event_channel();
	if (!c->ech || rdma_create_id(c->ech, &c->id, c, RDMA_PS_TCP) ||
	    rdma_resolve_addr(c->id, NULL, ai->ai_addr, RDMA_RESOLVE_MS)) {
		st = cm_errno();
		freeaddrinfo(ai);
		tpu__rdma_conn_destroy(c);
		return st;
	}
	freeaddrinfo(ai);
	if (tpu__rdma_watch(c, c->ech->fd, on_cm_event, &c->ech_watch)) {
		tpu__rdma_conn_destroy(c);
		return -ENOMEM;
	}
	*out = &c->base;
	return 0;
}

/* ---- listener ------------------------------------------------------------------- */

static void listener_free(struct rdma_listener *l)
{
	if (l->id)
		rdma_destroy_id(l->id);
	if (l->ech)
		rdma_destroy_event_channel(l->ech);
	free(l);
}

/* A connection request: its own event channel, a queue pair, accept. */
static void accept_one(struct rdma_listener *l, struct rdma_cm_id *id)
{
	struct rdma_conn *c = tpu__rdma_conn_new(l->ctx);
	struct rdma_conn_param p;
	tpu_status st = -ENOMEM;

	if (c)
		c->ech = event_channel();
	if (!c || !c->ech || rdma_migrate_id(id, c->ech)) {
		if (c) {
			st = tpu__errno();
			if (c->ech)
				rdma_destroy_event_channel(c->ech);
			free(c);
		}
		tpu__log_debug("rdma listener %p: refusing a connection: %s", (void *)l,
			       tpu_strerror(st));
		rdma_reject(id, NULL, 0);
		rdma_destroy_id(id);
		return;
	}
	/* From here c owns id: tpu__rdma_conn_destroy() frees both. */
	c->id = id;
	id->context = c;
	st = tpu__rdma_setup_qp(c);
	if (!st)
		st = tpu__rdma_watch(c, c->ech->fd, on_cm_event, &c->ech_watch);
	if (!st) {
		conn_param(c, &p);
		if (rdma_accept(id, &p))
			st = tpu__errno();
	}
	if (st) {
		tpu__log_debug("rdma listener %p: accepting: %s", (void *)l, tpu_strerror(st));
		rdma_reject(id, NULL, 0);
		/* Freed once the watches already started have ended. */
		c->closed = true;
		c->state = C_DOWN;
		tpu__rdma_conn_check_release(c);
		return;
	}
	c->state = C_CONNECTING;
	/* Operations queued now wait for ESTABLISHED, as a connector's do. */
	l->fn(l->arg, 0, &c->base);
}

static tpu_status listener_watch(struct rdma_listener *l);

static void on_listener_event(void *arg, const struct io_uring_cqe *cqe)
{
	struct rdma_listener *l = arg;
	struct rdma_cm_event *ev;
	tpu_status st;

	(void)cqe;
	l->inflight--;
	l->in_event = true;
	while (!l->closed && !rdma_get_cm_event(l->ech, &ev)) {
		enum rdma_cm_event_type type = ev->event;
		struct rdma_cm_id *id = ev->id;

		/* Acked first: rdma_migrate_id waits until the id's events are. */
		rdma_ack_cm_event(ev);
		if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
			accept_one(l, id);
		} else if (type == RDMA_CM_EVENT_DEVICE_REMOVAL && id == l->id) {
			l->failed = true;
			l->fn(l->arg, -ENODEV, NULL);
			break;
		}
	}
	l->in_event = false;
	if (l->closed) {
		if (!l->inflight)
			listener_free(l);
		return;
	}
	if (l->failed)
		return;
	st = listener_watch(l);
	if (st) {
		l->failed = true;
		l->fn(l->arg, st, NULL);
	}
}

static tpu_status listener_watch(struct rdma_listener *l)
{
	struct io_uring_sqe *sqe = tpu__ctx_sqe(l->ctx, on_listener_event, l);

	if (!sqe)
		return -ENOMEM;
	io_uring_prep_poll_add(sqe, l->ech->fd, POLLIN);
	l->inflight++;
	tpu__ctx_submit(l->ctx);
	return 0;
}

static void listener_cancelled(void *arg, const struct io_uring_cqe *cqe)
{
	struct rdma_listener *l = arg;

	(void)cqe;
	if (!--l->inflight)
		listener_free(l);
}

static const char *listener_addr(const struct tpu__xlistener *base)
{
	return ((const struct rdma_listener *)base)->addr;
}

static void listener_close(struct tpu__xlistener *base)
{
	struct rdma_listener *l = (struct rdma_listener *)base;
	struct io_uring_sqe *sqe;

	l->closed = true;
	if (l->in_event)
		return;
	if (!l->inflight) {
		listener_free(l);
		return;
	}
	sqe = tpu__ctx_sqe(l->ctx, listener_cancelled, l);
	if (!sqe)
		return;		/* the POLL_ADD frees l when it fires */
	io_uring_prep_cancel_fd(sqe, l->ech->fd, IORING_ASYNC_CANCEL_ALL);
	l->inflight++;
	tpu__ctx_submit(l->ctx);
}

static const struct tpu__xlistener_ops rdma_listener_ops = {
	.addr = listener_addr,
	.close = listener_close,
};

tpu_status tpu__rdma_listen(struct tpu_context *ctx, const char *addr, tpu__accept_fn fn,
			    void *arg, struct tpu__xlistener **out)
{
	struct rdma_listener *l;
	struct addrinfo *ai;
	tpu_status st;

	*out = NULL;
	st = tpu__xport_resolve(addr, true, &ai);
	if (st)
		return st;
	l = calloc(1, sizeof(*l));
	if (!l) {
		freeaddrinfo(ai);
		return -ENOMEM;
	}
	l->base.ops = &rdma_listener_ops;
	l->base.xport = &tpu__xport_rdma;
	l->ctx = ctx;
	l->fn = fn;
	l->arg = arg;
	l->ech = event_channel();
	if (!l->ech || rdma_create_id(l->ech, &l->id, l, RDMA_PS_TCP) ||
	    rdma_bind_addr(l->id, ai->ai_addr) || rdma_listen(l->id, RDMA_BACKLOG)) {
		st = cm_errno();
		freeaddrinfo(ai);
		listener_free(l);
		return st;
	}
	freeaddrinfo(ai);
	/* The bound address, its port resolved: the listener's rdma_cm id holds it in full. */
	tpu__xport_format_addr(rdma_get_local_addr(l->id), sizeof(struct sockaddr_storage),
			       l->addr, sizeof(l->addr));
	st = listener_watch(l);
	if (st) {
		listener_free(l);
		return st;
	}
	*out = &l->base;
	return 0;
}
