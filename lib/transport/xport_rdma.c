// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The rdma transport (rdma://HOST:PORT): one RC queue pair per connection,
 * set up with rdma_cm (rdma_setup.c), control bytes carried by SEND/RECV
 * (xport.h).  This file is the data path; the rdma channel's RDMA READs
 * share the queue pair (rdma_read.c), the devices' asynchronous events
 * have rdma_async.c.  Everything runs on the context thread.
 *
 * Waiting.  Each connection has its own rdma_cm event channel and its own
 * completion channel; both descriptors are non-blocking and watched by a
 * POLL_ADD on the context's io_uring, so no thread waits for a connection.
 * An open connection is also a poller of the context (ctx.h): the thread
 * polls the CQ for a short while after progress, then asks for a
 * completion event and sleeps.
 *
 * Flow control.  Each end posts RDMA_RECVS receive buffers of RDMA_MSG
 * bytes and never more: RDMA_CREDITS for data messages, RDMA_SPARE for
 * credit-only ones.  A writer has at most RDMA_CREDITS data messages the
 * reader has not consumed.  The reader returns credits in the immediate
 * data of its own messages, or in a zero-length message once half the
 * window is owed, one such message in flight at most.  Each of those
 * returns at least half the window and the peer cannot spend credits it
 * has not seen, so at most two wait at the reader: RDMA_SPARE.  Memory per
 * connection is fixed: (RDMA_RECVS + RDMA_SENDS) * RDMA_MSG, about 1.2 MiB.
 *
 * Writes are copied into registered send buffers, small writes gathered
 * into one message, sent inline when the device takes that size; a write's
 * callback comes once its bytes are in a posted message.  Reads copy out of
 * the receive buffers in order.  Bulk bytes belong on a channel.
 *
 * Failure bounds.  The QP's ack timeout is RDMA_ACK_TIMEOUT (4.096 us <<
 * 16, 268 ms), a send is retried RDMA_RETRY (5) times and an RNR NAK
 * RDMA_RNR_RETRY (5) times, never 7 (which means forever): a peer that
 * stopped answering fails the connection about (1 + 5) * 268 ms = 1.6 s
 * after the send it did not acknowledge (the specification lets a device
 * take up to four times the nominal timeout).  An idle connection learns
 * of a dead peer at its next send, of a local port going down at once
 * (rdma_async.c), of a peer that disconnects through rdma_cm.
 *
 * Close fails the queued operations with TPU_E_CLOSED, lets messages
 * already posted finish (bounded as above), disconnects and frees; with
 * RDMA READs in flight it stops the queue pair at once (rdma_read.c).
 */
#include <arpa/inet.h>
#include <liburing.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdma.h"

/* A work request's wr_id: its kind in the high bits, a slot below. */
#define WR_RECV			(1ull << 32)
#define WR_SEND			(2ull << 32)
#define WR_PROBE		(4ull << 32)
#define WR_KIND(id)		((id) & ~0xffffffffull)
#define WR_SLOT(id)		((unsigned int)((id) & 0xffffffffull))

struct rdma_rd {
	struct rdma_rd *next;
	tpu__io_cb cb;
	void *arg;
	uint8_t *buf;
	size_t len, done;
};

struct rdma_wr {
	struct rdma_wr *next;
	tpu__io_cb cb;
	void *arg;
	unsigned int niov, cur;		/* iov[cur..niov) left; iov[cur] advanced in place */
	size_t cap_iov;			/* room in iov[] */
	struct iovec iov[];
};

/*
 * Each connection keeps up to this many finished reads and writes (these
 * with room for RDMA_WR_IOV_MIN iovecs or more), so that a steady stream
 * allocates nothing.
 */
#define RDMA_OP_CACHE		32
#define RDMA_WR_IOV_MIN		8

static uint8_t *rx_buf(struct rdma_conn *c, unsigned int slot)
{
	return c->slab + (size_t)slot * RDMA_MSG;
}

static uint8_t *tx_buf(struct rdma_conn *c, unsigned int slot)
{
	return c->slab + (size_t)(RDMA_RECVS + slot) * RDMA_MSG;
}

/* ---- io_uring watches ---------------------------------------------------- */

tpu_status tpu__rdma_watch(struct rdma_conn *c, int fd, tpu__cqe_fn fn, uint64_t *ud)
{
	struct io_uring_sqe *sqe = tpu__ctx_sqe(c->ctx, fn, c);

	if (!sqe)
		return -ENOMEM;
	io_uring_prep_poll_add(sqe, fd, POLLIN);
	*ud = sqe->user_data;
	c->inflight++;
	tpu__ctx_submit(c->ctx);
	return 0;
}

static void cancel_done(void *arg, const struct io_uring_cqe *cqe)
{
	struct rdma_conn *c = arg;

	(void)cqe;
	c->inflight--;
	tpu__rdma_conn_check_release(c);
}

/* By user_data: the async descriptor is shared by every connection of a device. */
static void cancel_watch(struct rdma_conn *c, uint64_t ud)
{
	struct io_uring_sqe *sqe;

	if (!ud)
		return;
	sqe = tpu__ctx_sqe(c->ctx, cancel_done, c);
	/* Out of memory: the POLL_ADD stays until its descriptor fires. */
	if (!sqe)
		return;
	io_uring_prep_cancel64(sqe, ud, 0);
	c->inflight++;
	tpu__ctx_submit(c->ctx);
}

static void task_fn(struct tpu__task *t)
{
	struct rdma_conn *c = tpu__container_of(t, struct rdma_conn, task);

	c->task_queued = false;
	tpu__rdma_conn_progress(c);
}

/* Progress later, from the context loop: callbacks never run inside the call that queued. */
void tpu__rdma_schedule(struct rdma_conn *c)
{
	if (c->task_queued)
		return;
	c->task_queued = true;
	tpu__ctx_defer(c->ctx, &c->task);
}

/* ---- failing ------------------------------------------------------------- */

static void call_read(struct rdma_conn *c, struct rdma_rd *r, tpu_status st)
{
	c->depth++;
	r->cb(r->arg, st);
	c->depth--;
	tpu__free_list_put(&c->rd_free, r);
}

static void call_write(struct rdma_conn *c, struct rdma_wr *w, tpu_status st)
{
	c->depth++;
	w->cb(w->arg, st);
	c->depth--;
	tpu__free_list_put(&c->wr_free, w);
}

static void fail_writes(struct rdma_conn *c)
{
	c->wsend = NULL;
	while (c->wq) {
		struct rdma_wr *w = c->wq;

		c->wq = w->next;
		if (!c->wq)
			c->wq_tail = &c->wq;
		call_write(c, w, c->werr);
	}
}

static void fail_reads(struct rdma_conn *c)
{
	while (c->rq) {
		struct rdma_rd *r = c->rq;

		c->rq = r->next;
		if (!c->rq)
			c->rq_tail = &c->rq;
		call_read(c, r, c->rerr);
	}
}

/*
 * The connection is down: reads fail with @rerr once the bytes already
 * received are read, writes at once with @werr.
 */
void tpu__rdma_conn_down(struct rdma_conn *c, tpu_status rerr, tpu_status werr)
{
	if (!c->rerr)
		c->rerr = rerr;
	if (!c->werr)
		c->werr = werr;
	c->state = C_DOWN;
	tpu__rdma_schedule(c);
}

void tpu__rdma_conn_fail(struct rdma_conn *c, tpu_status st, const char *what)
{
	if (c->state != C_DOWN && !c->closed)
		tpu__log_debug("rdma conn %p: %s: %s", (void *)c, what, tpu_strerror(st));
	tpu__rdma_conn_down(c, st, st);
}

/* ---- verbs ---------------------------------------------------------------- */

tpu_status tpu__rdma_post_recv(struct rdma_conn *c, unsigned int slot)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)rx_buf(c, slot), .length = RDMA_MSG, .lkey = c->mr->lkey,
	};
	struct ibv_recv_wr wr = { .wr_id = WR_RECV | slot, .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *bad;
	int err = ibv_post_recv(c->id->qp, &wr, &bad);

	return err ? -err : 0;
}

/* A SEND of @len bytes of send buffer @slot, returning the credits owed. */
static tpu_status post_send(struct rdma_conn *c, unsigned int slot, size_t len)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)tx_buf(c, slot), .length = (uint32_t)len, .lkey = c->mr->lkey,
	};
	struct ibv_send_wr wr = {
		.wr_id = WR_SEND | slot,
		.sg_list = &sge,
		.num_sge = len ? 1 : 0,
		.opcode = IBV_WR_SEND_WITH_IMM,
		.send_flags = IBV_SEND_SIGNALED | (len <= c->max_inline ? IBV_SEND_INLINE : 0),
		.imm_data = htonl(c->owed),
	};
	struct ibv_send_wr *bad;
	int err = ibv_post_send(c->id->qp, &wr, &bad);

	if (err)
		return -err;
	c->owed = 0;
	c->sends_out++;
	return 0;
}

/* ---- completions ---------------------------------------------------------- */

static void on_wc(struct rdma_conn *c, const struct ibv_wc *wc)
{
	unsigned int slot = WR_SLOT(wc->wr_id);
	bool recv = WR_KIND(wc->wr_id) == WR_RECV;

	if (WR_KIND(wc->wr_id) == TPU__RDMA_WR_READ) {
		tpu__rdma_read_wc(c, wc);
		return;
	}
	if (WR_KIND(wc->wr_id) == WR_PROBE) {
		c->probe_out = false;
		if (wc->status != IBV_WC_SUCCESS && c->state != C_DOWN && !c->closed) {
			tpu__log_debug("rdma conn %p: keepalive: %s", (void *)c,
				       ibv_wc_status_str(wc->status));
			tpu__rdma_conn_down(c, -ECONNRESET, -EPIPE);
		}
		return;
	}
	if (!recv) {
		c->sends_out--;
		if (slot == RDMA_CREDIT_SLOT)
			c->credit_busy = false;
		else
			c->tx_free |= 1u << slot;
	}
	if (wc->status != IBV_WC_SUCCESS) {
		/* After a disconnect or close the queue pair flushes what it holds. */
		if (c->state == C_DOWN || c->closed)
			return;
		tpu__log_debug("rdma conn %p: %s", (void *)c, ibv_wc_status_str(wc->status));
		tpu__rdma_conn_down(c, -ECONNRESET, -EPIPE);
		return;
	}
	if (!recv)
		return;
	if (wc->wc_flags & IBV_WC_WITH_IMM)
		c->credits += ntohl(wc->imm_data);
	if (!wc->byte_len) {
		/* Credits alone: the buffer goes straight back. */
		if (tpu__rdma_post_recv(c, slot))
			tpu__rdma_conn_fail(c, -EIO, "reposting a receive");
		return;
	}
	RDMA_MARK_DEFINED(rx_buf(c, slot), wc->byte_len);
	c->rx_slot[(c->rx_head + c->rx_count) % RDMA_RECVS] = slot;
	c->rx_len[(c->rx_head + c->rx_count) % RDMA_RECVS] = wc->byte_len;
	c->rx_count++;
}

bool tpu__rdma_poll_cq(struct rdma_conn *c)
{
	struct ibv_wc wc[16];
	bool any = false;
	int n;

	if (!c->cq)
		return false;
	while ((n = ibv_poll_cq(c->cq, 16, wc)) > 0) {
		any = true;
		for (int i = 0; i < n; i++)
			on_wc(c, &wc[i]);
	}
	if (n < 0)
		tpu__rdma_conn_fail(c, -EIO, "polling the CQ");
	return any;
}

static bool conn_poll(struct tpu__poller *p)
{
	struct rdma_conn *c = tpu__container_of(p, struct rdma_conn, poller);
	bool any = tpu__rdma_poll_cq(c);

	if (atomic_load_explicit(&c->async_err, memory_order_acquire) && c->state != C_DOWN) {
		tpu__log_debug("rdma conn %p: the device reported a fatal event", (void *)c);
		tpu__rdma_conn_down(c, -ECONNRESET, -EPIPE);
		any = true;
	}
	if (any)
		tpu__rdma_conn_progress(c);
	return any;
}

/* About to sleep: ask for a completion event, then look once more for what raced it. */
static bool conn_arm(struct tpu__poller *p)
{
	struct rdma_conn *c = tpu__container_of(p, struct rdma_conn, poller);

	ibv_req_notify_cq(c->cq, 0);
	return conn_poll(p);
}

static void conn_disarm(struct tpu__poller *p)
{
	(void)p;
}

void tpu__rdma_on_cq_event(void *arg, const struct io_uring_cqe *cqe)
{
	struct rdma_conn *c = arg;
	struct ibv_cq *cq;
	void *cq_ctx;

	(void)cqe;
	c->inflight--;
	c->cch_watch = 0;
	if (c->releasing) {
		tpu__rdma_conn_check_release(c);
		return;
	}
	while (!ibv_get_cq_event(c->cch, &cq, &cq_ctx))
		ibv_ack_cq_events(cq, 1);
	ibv_req_notify_cq(c->cq, 0);
	if (tpu__rdma_watch(c, c->cch->fd, tpu__rdma_on_cq_event, &c->cch_watch))
		tpu__rdma_conn_fail(c, -ENOMEM, "watching the completion channel");
	tpu__rdma_conn_progress(c);
}

static void on_async_event(void *arg, const struct io_uring_cqe *cqe)
{
	struct rdma_conn *c = arg;

	(void)cqe;
	c->inflight--;
	c->async_watch = 0;
	if (c->releasing) {
		tpu__rdma_conn_check_release(c);
		return;
	}
	tpu__rdma_async_read(c);
	if (tpu__rdma_watch(c, c->id->verbs->async_fd, on_async_event, &c->async_watch))
		tpu__rdma_conn_fail(c, -ENOMEM, "watching the device's events");
	conn_poll(&c->poller);
}

/* ---- keepalive -------------------------------------------------------------- */

static void keepalive_arm(struct rdma_conn *c);

/*
 * A zero-length RDMA WRITE needs no memory and no rkey at the peer (a
 * zero-byte RDMA operation carries none), consumes none of its receive
 * buffers and wakes none of its software: its device acknowledges it, or
 * the retry budget runs out and the completion fails the connection.
 */
static void keepalive_probe(struct rdma_conn *c)
{
	struct ibv_send_wr wr = {
		.wr_id = WR_PROBE,
		.opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED,
	};
	struct ibv_send_wr *bad;
	int err = ibv_post_send(c->id->qp, &wr, &bad);

	if (err)
		tpu__rdma_conn_fail(c, -err, "posting a keepalive probe");
	else
		c->probe_out = true;
}

static void keepalive_fired(void *arg, tpu_status status)
{
	struct rdma_conn *c = arg;

	c->ka_armed = false;
	c->inflight--;
	if (status || c->closed || c->releasing || c->state != C_OPEN) {
		tpu__rdma_conn_check_release(c);
		return;
	}
	/* Anything outstanding finds a dead peer by itself. */
	if (!c->probe_out && !c->sends_out && !c->reads_out)
		keepalive_probe(c);
	keepalive_arm(c);
	tpu__rdma_schedule(c);
}

static void keepalive_arm(struct rdma_conn *c)
{
	if (c->state != C_OPEN || c->closed)
		return;
	c->ka.fn = keepalive_fired;
	c->ka.arg = c;
	c->inflight++;
	if (tpu__ctx_timer_start(c->ctx, &c->ka, (uint64_t)RDMA_KEEPALIVE_MS * 1000000)) {
		c->inflight--;
		tpu__rdma_conn_fail(c, -ENOMEM, "starting the keepalive timer");
		return;
	}
	c->ka_armed = true;
}

void tpu__rdma_conn_established(struct rdma_conn *c)
{
	c->state = C_OPEN;
	c->credits = RDMA_CREDITS;
	c->tx_free = (1u << RDMA_CREDITS) - 1;
	tpu__ctx_poller_add(c->ctx, &c->poller);
	c->polling = true;
	tpu__rdma_async_add(c);
	if (tpu__rdma_watch(c, c->id->verbs->async_fd, on_async_event, &c->async_watch))
		tpu__rdma_conn_fail(c, -ENOMEM, "watching the device's events");
	keepalive_arm(c);
}

/* ---- progress -------------------------------------------------------------- */

static bool rx_progress(struct rdma_conn *c)
{
	bool any = false;

	while (c->rq && c->rx_count) {
		struct rdma_rd *r = c->rq;
		unsigned int slot = c->rx_slot[c->rx_head];
		size_t k = c->rx_len[c->rx_head] - c->rx_off;

		if (k > r->len - r->done)
			k = r->len - r->done;
		memcpy(r->buf + r->done, rx_buf(c, slot) + c->rx_off, k);
		r->done += k;
		c->rx_off += k;
		if (c->rx_off == c->rx_len[c->rx_head]) {
			c->rx_head = (c->rx_head + 1) % RDMA_RECVS;
			c->rx_count--;
			c->rx_off = 0;
			if (c->state == C_OPEN && !c->closed) {
				if (tpu__rdma_post_recv(c, slot))
					tpu__rdma_conn_fail(c, -EIO, "reposting a receive");
				else
					c->owed++;
			}
		}
		if (r->done == r->len) {
			c->rq = r->next;
			if (!c->rq)
				c->rq_tail = &c->rq;
			call_read(c, r, 0);
			any = true;
		}
	}
	if (c->rq && c->rerr && !c->rx_count) {
		fail_reads(c);
		any = true;
	}
	return any;
}

/* Skip the empty iovecs at w's cursor; true if nothing is left. */
static bool wr_taken(struct rdma_wr *w)
{
	while (w->cur < w->niov && !w->iov[w->cur].iov_len)
		w->cur++;
	return w->cur == w->niov;
}

/* Fill send buffer @slot from the writes at wsend on; the bytes taken. */
static size_t tx_fill(struct rdma_conn *c, unsigned int slot)
{
	uint8_t *b = tx_buf(c, slot);
	size_t n = 0;

	while (c->wsend && n < RDMA_MSG) {
		struct rdma_wr *w = c->wsend;
		struct iovec *v;
		size_t k;

		if (wr_taken(w)) {
			c->wsend = w->next;
			continue;
		}
		v = &w->iov[w->cur];
		k = v->iov_len < RDMA_MSG - n ? v->iov_len : RDMA_MSG - n;
		memcpy(b + n, v->iov_base, k);
		n += k;
		v->iov_base = (uint8_t *)v->iov_base + k;
		v->iov_len -= k;
	}
	if (c->wsend && wr_taken(c->wsend))
		c->wsend = c->wsend->next;
	return n;
}

static bool tx_progress(struct rdma_conn *c)
{
	bool any = false;

	if (c->werr) {
		any = c->wq != NULL;
		fail_writes(c);
		return any;
	}
	while (c->state == C_OPEN && c->wsend && c->credits && c->tx_free) {
		unsigned int slot = (unsigned int)__builtin_ctz(c->tx_free);
		size_t n = tx_fill(c, slot);
		tpu_status st;

		if (!n)
			break;
		st = post_send(c, slot, n);
		if (st) {
			tpu__rdma_conn_fail(c, st, "posting a send");
			fail_writes(c);
			return true;
		}
		c->tx_free &= ~(1u << slot);
		c->credits--;
	}
	/* Every write before wsend is in a posted message (or was empty). */
	while (c->wq && c->wq != c->wsend && c->state == C_OPEN) {
		struct rdma_wr *w = c->wq;

		c->wq = w->next;
		if (!c->wq)
			c->wq_tail = &c->wq;
		call_write(c, w, 0);
		any = true;
	}
	/* Half the window owed and nothing to carry it: a message of its own. */
	if (c->state == C_OPEN && !c->closed && !c->credit_busy && c->owed >= RDMA_CREDITS / 2) {
		if (post_send(c, RDMA_CREDIT_SLOT, 0))
			tpu__rdma_conn_fail(c, -EIO, "returning credits");
		else
			c->credit_busy = true;
	}
	return any;
}

void tpu__rdma_conn_progress(struct rdma_conn *c)
{
	bool again;

	c->depth++;
	do {
		again = false;
		if (c->state == C_OPEN || c->state == C_DOWN)
			again |= tpu__rdma_poll_cq(c);
		again |= rx_progress(c);
		again |= tx_progress(c);
		again |= tpu__rdma_read_progress(c);
	} while (again);
	c->depth--;
	tpu__rdma_conn_check_release(c);
}

/* ---- release ---------------------------------------------------------------- */

/*
 * Once closed and idle: let the SENDs already posted finish (they carry
 * bytes whose writes were called back), disconnect, stop watching, and
 * free once the last CQE came.
 */
void tpu__rdma_conn_check_release(struct rdma_conn *c)
{
	if (!c->closed || c->depth || c->task_queued || c->rq || c->wq || c->rdq)
		return;
	if (!c->releasing) {
		if (c->state == C_OPEN && c->sends_out)
			return;
		c->releasing = true;
		if (c->state == C_OPEN)
			rdma_disconnect(c->id);
		if (c->polling) {
			tpu__ctx_poller_del(c->ctx, &c->poller);
			c->polling = false;
		}
		cancel_watch(c, c->ech_watch);
		cancel_watch(c, c->cch_watch);
		cancel_watch(c, c->async_watch);
		if (c->ka_armed)
			tpu__ctx_timer_cancel(c->ctx, &c->ka);
	}
	if (!c->inflight)
		tpu__rdma_conn_destroy(c);
}

/* ---- connection ops ------------------------------------------------------------- */

static tpu_status conn_write(struct tpu__conn *base, const struct iovec *iov, unsigned int n,
			     tpu__io_cb cb, void *arg)
{
	struct rdma_conn *c = (struct rdma_conn *)base;
	struct rdma_wr *w;
	size_t cap;

	if (!cb || n > TPU__XPORT_IOV_MAX || (n && !iov))
		return -EINVAL;
	if (c->closed)
		return TPU_E_CLOSED;
	w = tpu__free_list_get(&c->wr_free, n, RDMA_WR_IOV_MIN, sizeof(*w), sizeof(*iov));
	if (!w)
		return -ENOMEM;
	cap = w->cap_iov;
	*w = (struct rdma_wr){ .cb = cb, .arg = arg, .niov = n, .cap_iov = cap };
	if (n)
		memcpy(w->iov, iov, n * sizeof(*iov));
	*c->wq_tail = w;
	c->wq_tail = &w->next;
	if (!c->wsend)
		c->wsend = w;
	tpu__rdma_schedule(c);
	return 0;
}

static tpu_status conn_read(struct tpu__conn *base, void *buf, size_t len, tpu__io_cb cb,
			    void *arg)
{
	struct rdma_conn *c = (struct rdma_conn *)base;
	struct rdma_rd *r;

	if (!cb || !buf || !len)
		return -EINVAL;
	if (c->closed)
		return TPU_E_CLOSED;
	r = tpu__free_list_get(&c->rd_free, 0, 0, sizeof(*r), 0);
	if (!r)
		return -ENOMEM;
	*r = (struct rdma_rd){ .cb = cb, .arg = arg, .buf = buf, .len = len };
	*c->rq_tail = r;
	c->rq_tail = &r->next;
	tpu__rdma_schedule(c);
	return 0;
}

static int conn_peer_pid(struct tpu__conn *base)
{
	(void)base;
	return 0;
}

static void conn_close(struct tpu__conn *base)
{
	struct rdma_conn *c = (struct rdma_conn *)base;

	if (c->closed)
		return;
	c->closed = true;
	if (!c->rerr)
		c->rerr = TPU_E_CLOSED;
	if (!c->werr)
		c->werr = TPU_E_CLOSED;
	c->depth++;
	tpu__rdma_read_close(c);
	fail_reads(c);
	fail_writes(c);
	c->depth--;
	tpu__rdma_conn_check_release(c);
}

static const struct tpu__conn_ops rdma_conn_ops = {
	.write = conn_write,
	.read = conn_read,
	.peer_pid = conn_peer_pid,
	.close = conn_close,
};

struct rdma_conn *tpu__rdma_conn_new(struct tpu_context *ctx)
{
	struct rdma_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->base.ops = &rdma_conn_ops;
	c->base.xport = &tpu__xport_rdma;
	c->ctx = ctx;
	c->rq_tail = &c->rq;
	c->wq_tail = &c->wq;
	c->rdq_tail = &c->rdq;
	c->rdp_tail = &c->rdp;
	tpu__free_list_init(&c->rd_free, offsetof(struct rdma_rd, next), TPU__FREE_NO_ROOM,
			    RDMA_OP_CACHE, NULL);
	tpu__free_list_init(&c->wr_free, offsetof(struct rdma_wr, next),
			    offsetof(struct rdma_wr, cap_iov), RDMA_OP_CACHE, NULL);
	c->poller.poll = conn_poll;
	c->poller.arm = conn_arm;
	c->poller.disarm = conn_disarm;
	c->task.fn = task_fn;
	atomic_init(&c->async_err, 0);
	return c;
}

/*
 * Viable iff this machine has an RDMA device and rdma_cm: whether the
 * route to a given peer crosses one is for the connect to find out.
 */
static tpu_status rdma_compat_descriptor(char *buf, size_t size)
{
	char why[128];
	tpu_status st = tpu__rdma_viable(why, sizeof(why));

	if (st) {
		tpu__log_debug("rdma transport: %s", why);
		return st;
	}
	return snprintf(buf, size, "rdma") < (int)size ? 0 : -ENOSPC;
}

const struct tpu__xport tpu__xport_rdma = {
	.name = "rdma",
	.priority = 100,
	.passes_fds = false,
	.compat_descriptor = rdma_compat_descriptor,
	.listen = tpu__rdma_listen,
	.connect = tpu__rdma_connect,
};
