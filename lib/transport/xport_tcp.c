// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The tcp transport: sockets driven through the context's io_uring
 * (xport.h).  Everything runs on the context thread.
 *
 * Reads.  One RECV is in flight per connection at most, for the read at
 * the head of the queue, which keeps reads in order.  A small head read
 * (under TCP_STAGE_MIN) receives into a per-connection staging buffer
 * instead, as much as the socket has up to TCP_STAGE_CAP: a pipe frame's
 * header, descriptor and small payloads then cost one RECV, where exact
 * reads would cost one each.  Staged bytes are copied out to the queued
 * reads in order; a large read takes what is staged first, then receives
 * the rest straight into the caller's memory (MSG_WAITALL: one CQE for all
 * of it).  A RECV that follows one which emptied the socket polls first
 * (IORING_RECVSEND_POLL_FIRST) instead of trying a receive bound to fail.
 *
 * Writes.  One send is in flight at most; it gathers the iovecs of the
 * writes queued behind each other (TPU__XPORT_IOV_MAX at most), and a
 * partial send goes on where it stopped.  With TPU_TCP_ZEROCOPY=1 (read
 * when a connection is made) a write of TCP_ZC_MIN bytes or more goes out
 * alone with SENDMSG_ZC: its pages are the kernel's until the notification
 * CQE (IORING_CQE_F_NOTIF) of every zero-copy send it made came, and its
 * callback waits for them.  A kernel or socket that refuses (-EOPNOTSUPP,
 * -EINVAL) is asked once; the process then sends plainly.  Over loopback
 * the kernel copies zero-copy pages anyway, which is why it is opt-in.
 *
 * Callbacks never run inside the call that queued their operation: reads
 * and writes start their I/O at once when nothing is ahead of them, and
 * whatever must call back (bytes already staged, an error, a write done)
 * goes through the connection's deferred task.
 *
 * Close fails every pending operation with TPU_E_CLOSED, shuts the socket
 * down (the peer sees EOF), cancels what is in flight and closes the
 * descriptor at once.  A zero-copy send's notification waits for its pages
 * to leave the send queue, which a peer that stopped reading keeps full:
 * with notifications due, close is abortive (SO_LINGER 0: the send queue is
 * dropped and the peer gets a reset), so that their writes' callbacks come.
 */
#include <liburing.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "xport.h"

/*
 * Valgrind cannot see the kernel fill a buffer through io_uring: say so
 * for every RECV, or each byte read would count as uninitialised.
 */
#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define TCP_MARK_DEFINED(p, n) VALGRIND_MAKE_MEM_DEFINED((p), (n))
#endif
#endif
#ifndef TCP_MARK_DEFINED
#define TCP_MARK_DEFINED(p, n) ((void)(p), (void)(n))
#endif

#define TCP_ZC_MIN	(64u << 10)
#define TCP_BACKLOG	128
/* Head reads smaller than this go through the staging buffer of TCP_STAGE_CAP. */
#define TCP_STAGE_MIN	(16u << 10)
#define TCP_STAGE_CAP	(64u << 10)
/* The most one RECV asks for (its length is 32 bits, its result an int). */
#define TCP_RECV_MAX	(1u << 30)
/*
 * A RECV or send of this many bytes or more keeps the socket busy long
 * enough that spinning for it only takes a core from the kernel's copy.
 */
#define TCP_BULK_MIN	(64u << 10)
/* Accepting failed for want of descriptors or memory: try again after this. */
#define TCP_ACCEPT_RETRY_NS	(10u * 1000 * 1000)

/* Cleared for good by the first kernel that refuses a zero-copy send. */
static atomic_bool tcp_zc_ok = true;

/*
 * What the transport did, for the unit tests (tpu__xport_tcp_counter):
 * they check that the paths they mean to exercise were taken.
 */
enum {
	TCP_CNT_RECV,		/* RECVs completed */
	TCP_CNT_RECV_STAGED,	/* of those, into the staging buffer */
	TCP_CNT_SEND,		/* sends completed (plain and zero-copy) */
	TCP_CNT_SEND_SHORT,	/* of those, that took fewer bytes than asked */
	TCP_CNT_SEND_ZC,	/* zero-copy sends completed */
	TCP_CNT_ZC_NOTIF,	/* zero-copy notifications */
	TCP_CNT_N
};
static const char *const tcp_cnt_names[TCP_CNT_N] = {
	"recv", "recv_staged", "send", "send_short", "send_zc", "zc_notif",
};
static atomic_ulong tcp_cnt[TCP_CNT_N];

uint64_t tpu__xport_tcp_counter(const char *name);

uint64_t tpu__xport_tcp_counter(const char *name)
{
	for (int i = 0; i < TCP_CNT_N; i++)
		if (!strcmp(name, tcp_cnt_names[i]))
			return atomic_load_explicit(&tcp_cnt[i], memory_order_relaxed);
	return 0;
}

static inline void tcp_count(int i)
{
	atomic_fetch_add_explicit(&tcp_cnt[i], 1, memory_order_relaxed);
}

static bool tcp_zc_wanted(void)
{
	const char *e = getenv("TPU_TCP_ZEROCOPY");

	return e && !strcmp(e, "1") && atomic_load(&tcp_zc_ok);
}

struct tcp_conn;

/*
 * Each connection keeps up to this many finished reads and writes for
 * reuse (writes with room for up to TCP_WR_IOV_MIN iovecs, or more if a
 * bigger one was kept), so that a steady stream allocates nothing.
 */
#define TCP_OP_CACHE		32
#define TCP_WR_IOV_MIN		8

struct tcp_rd {
	struct tcp_rd *next;
	tpu__io_cb cb;
	void *arg;
	uint8_t *buf;
	size_t len, done;
};

struct tcp_wr {
	struct tcp_wr *next;
	struct tcp_conn *conn;
	tpu__io_cb cb;
	void *arg;
	tpu_status status;
	unsigned int niov, cur;		/* iov[cur..niov) is left; iov[cur] advanced in place */
	unsigned int notifs;		/* zero-copy notifications still due */
	bool sent;			/* nothing left to hand to the kernel (or failed) */
	size_t cap_iov;			/* room in iov[] */
	struct iovec iov[];
};

struct tcp_conn {
	struct tpu__conn base;
	struct tpu_context *ctx;
	int fd;
	bool connected;
	bool closed;
	bool zc;			/* zero-copy sends wanted on this connection */
	bool spinning;			/* holds the context as a spinner (conn_spin) */
	bool recv_bulk, send_bulk;	/* a RECV or send of TCP_BULK_MIN or more in flight */
	tpu_status error;		/* first error; every operation after it fails */
	unsigned int inflight;		/* requests whose last CQE is due */
	unsigned int depth;		/* conn_progress running: do not free */
	/* reads */
	struct tcp_rd *rq, **rq_tail;
	bool recv_busy;
	bool recv_staged;		/* the RECV in flight fills the stage */
	bool recv_drained;		/* the last RECV emptied the socket */
	size_t recv_asked;
	uint8_t *stage;			/* TCP_STAGE_CAP bytes, from the first small read */
	size_t stage_len, stage_off;	/* bytes received, bytes handed out */
	/* writes */
	struct tcp_wr *wq, **wq_tail;	/* every write not called back yet, in order */
	struct tcp_wr *wsend;		/* the first one with bytes left to send */
	bool send_busy;
	bool send_zc;			/* the send in flight is a zero-copy one */
	size_t send_asked;
	struct msghdr msg;		/* of the send in flight */
	struct iovec siov[TPU__XPORT_IOV_MAX];
	/* finished ops kept for reuse (TCP_OP_CACHE; the context thread's, as the queues are) */
	struct tpu__free_list rd_free;	/* struct tcp_rd */
	struct tpu__free_list wr_free;	/* struct tcp_wr, by cap_iov */
	/* connecting */
	struct addrinfo *ai, *ai_cur;
	struct tpu__task task;		/* runs callbacks that may not run where they arose */
	bool task_queued;
};

struct tcp_listener {
	struct tpu__xlistener base;
	struct tpu_context *ctx;
	int fd;
	bool closed;
	bool accepting;			/* an ACCEPT is in flight */
	bool waiting;			/* the retry timer is running */
	unsigned int in_cb;		/* inside fn */
	tpu__accept_fn fn;
	void *arg;
	struct tpu__timer retry;
	char addr[TPU__XPORT_ADDR_MAX];
};

static const struct tpu__conn_ops tcp_conn_ops;
static const struct tpu__xlistener_ops tcp_listener_ops;

/* ---- addresses ---------------------------------------------------------- */

static tpu_status tcp_compat_descriptor(char *buf, size_t size)
{
	return snprintf(buf, size, "tcp") < (int)size ? 0 : -ENOSPC;
}

/* ---- connections --------------------------------------------------------- */

static void conn_progress(struct tcp_conn *c);

/*
 * The context spins for a connection whose peer may answer any moment:
 * open, and with no bulk transfer in flight.
 */
static void conn_spin(struct tcp_conn *c)
{
	bool want = !c->closed && !c->recv_bulk && !c->send_bulk;

	if (want == c->spinning)
		return;
	c->spinning = want;
	if (want)
		tpu__ctx_spinner_get(c->ctx);
	else
		tpu__ctx_spinner_put(c->ctx);
}

static void conn_maybe_free(struct tcp_conn *c)
{
	if (!c->closed || c->depth || c->inflight || c->rq || c->wq || c->task_queued)
		return;
	if (c->fd >= 0)
		close(c->fd);
	if (c->ai)
		freeaddrinfo(c->ai);
	conn_spin(c);
	tpu__free_list_drain(&c->rd_free);
	tpu__free_list_drain(&c->wr_free);
	free(c->stage);
	free(c);
}

/* The status a failed operation gets now. */
static tpu_status conn_status(const struct tcp_conn *c)
{
	return c->closed ? TPU_E_CLOSED : c->error;
}

static void conn_task(struct tpu__task *t)
{
	struct tcp_conn *c = tpu__container_of(t, struct tcp_conn, task);

	c->task_queued = false;
	conn_progress(c);
}

/* Run conn_progress from the context loop (unless it runs already). */
static void conn_defer(struct tcp_conn *c)
{
	if (c->task_queued || c->depth)
		return;
	c->task_queued = true;
	c->task.fn = conn_task;
	tpu__ctx_defer(c->ctx, &c->task);
}

/*
 * The first error.  Requests in flight are ended (the peer sees EOF), so
 * that the operations behind them fail too instead of waiting for a peer
 * that may never answer.
 */
static void conn_fail(struct tcp_conn *c, tpu_status st)
{
	if (c->error)
		return;
	c->error = st;
	if (c->fd >= 0 && c->connected && (c->recv_busy || c->send_busy))
		shutdown(c->fd, SHUT_RDWR);
}

static bool wr_zc(const struct tcp_conn *c, const struct tcp_wr *op)
{
	size_t left = 0;

	if (!c->zc || !atomic_load(&tcp_zc_ok))
		return false;
	for (unsigned int i = op->cur; i < op->niov && left < TCP_ZC_MIN; i++)
		left += op->iov[i].iov_len;
	return left >= TCP_ZC_MIN;
}

/* The send in flight took n bytes: mark the writes it finished. */
static void writes_advance(struct tcp_conn *c, size_t n)
{
	struct tcp_wr *op = c->wsend;

	while (op) {
		while (op->cur < op->niov) {
			struct iovec *v = &op->iov[op->cur];

			if (n < v->iov_len) {
				v->iov_base = (uint8_t *)v->iov_base + n;
				v->iov_len -= n;
				n = 0;
				break;
			}
			n -= v->iov_len;
			op->cur++;
		}
		if (op->cur < op->niov)
			break;
		op->sent = true;
		op = op->next;
		/* Writes of nothing are done once those before them are. */
		if (!n && op && op->cur < op->niov)
			break;
	}
	c->wsend = op;
}

static void send_done(void *arg, const struct io_uring_cqe *cqe)
{
	struct tcp_conn *c = arg;

	c->inflight--;
	c->send_busy = false;
	c->send_bulk = false;
	conn_spin(c);
	tcp_count(TCP_CNT_SEND);
	if (cqe->res < 0) {
		conn_fail(c, cqe->res == -ECONNRESET ? -EPIPE : cqe->res);
	} else {
		if ((size_t)cqe->res < c->send_asked)
			tcp_count(TCP_CNT_SEND_SHORT);
		writes_advance(c, (size_t)cqe->res);
	}
	conn_progress(c);
}

static void send_zc_done(void *arg, const struct io_uring_cqe *cqe)
{
	struct tcp_wr *op = arg;
	struct tcp_conn *c = op->conn;

	if (cqe->flags & IORING_CQE_F_NOTIF) {
		/* The kernel let go of a zero-copy send's pages: its last CQE. */
		tcp_count(TCP_CNT_ZC_NOTIF);
		op->notifs--;
		c->inflight--;
		conn_progress(c);
		return;
	}
	/* F_MORE: a notification follows, and the request lives until then. */
	if (cqe->flags & IORING_CQE_F_MORE)
		op->notifs++;
	else
		c->inflight--;
	c->send_busy = false;
	c->send_zc = false;
	c->send_bulk = false;
	conn_spin(c);
	if (cqe->res == -EOPNOTSUPP || cqe->res == -EINVAL) {
		/* This kernel or socket cannot: plain sends from now on, these bytes too. */
		atomic_store(&tcp_zc_ok, false);
		c->zc = false;
		tpu__log_debug("tcp: zero-copy send refused (%d), using plain sends", cqe->res);
	} else if (cqe->res < 0) {
		conn_fail(c, cqe->res == -ECONNRESET ? -EPIPE : cqe->res);
	} else {
		tcp_count(TCP_CNT_SEND);
		tcp_count(TCP_CNT_SEND_ZC);
		if ((size_t)cqe->res < c->send_asked)
			tcp_count(TCP_CNT_SEND_SHORT);
		writes_advance(c, (size_t)cqe->res);
	}
	conn_progress(c);
}

static void start_send(struct tcp_conn *c)
{
	struct tcp_wr *op = c->wsend;
	struct io_uring_sqe *sqe;
	unsigned int n = 0;
	size_t asked = 0;
	bool zc = wr_zc(c, op);

	if (zc) {
		/* Alone: its notifications are counted on it. */
		sqe = tpu__ctx_sqe(c->ctx, send_zc_done, op);
		if (!sqe)
			goto nomem;
		for (unsigned int i = op->cur; i < op->niov; i++)
			asked += op->iov[i].iov_len;
		memset(&c->msg, 0, sizeof(c->msg));
		c->msg.msg_iov = &op->iov[op->cur];
		c->msg.msg_iovlen = op->niov - op->cur;
		io_uring_prep_sendmsg_zc(sqe, c->fd, &c->msg, MSG_NOSIGNAL);
		op->conn = c;
	} else {
		/* Gather the writes queued behind it, up to one that goes zero-copy. */
		for (struct tcp_wr *w = op; w && n < TPU__XPORT_IOV_MAX; w = w->next) {
			if (w != op && wr_zc(c, w))
				break;
			for (unsigned int i = w->cur; i < w->niov && n < TPU__XPORT_IOV_MAX; i++) {
				c->siov[n++] = w->iov[i];
				asked += w->iov[i].iov_len;
			}
		}
		sqe = tpu__ctx_sqe(c->ctx, send_done, c);
		if (!sqe)
			goto nomem;
		memset(&c->msg, 0, sizeof(c->msg));
		c->msg.msg_iov = c->siov;
		c->msg.msg_iovlen = n;
		io_uring_prep_sendmsg(sqe, c->fd, &c->msg, MSG_NOSIGNAL);
	}
	c->send_asked = asked;
	c->send_zc = zc;
	c->send_busy = true;
	c->send_bulk = asked >= TCP_BULK_MIN;
	conn_spin(c);
	c->inflight++;
	tpu__ctx_submit(c->ctx);
	return;
nomem:
	conn_fail(c, -ENOMEM);
}

static void recv_done(void *arg, const struct io_uring_cqe *cqe)
{
	struct tcp_conn *c = arg;

	c->inflight--;
	c->recv_busy = false;
	c->recv_bulk = false;
	conn_spin(c);
	tcp_count(TCP_CNT_RECV);
	if (cqe->res > 0) {
		size_t n = (size_t)cqe->res;

		c->recv_drained = n < c->recv_asked;
		if (c->recv_staged) {
			tcp_count(TCP_CNT_RECV_STAGED);
			TCP_MARK_DEFINED(c->stage, n);
			c->stage_len = n;
			c->stage_off = 0;
		} else {
			struct tcp_rd *op = c->rq;

			TCP_MARK_DEFINED(op->buf + op->done, n);
			op->done += n;
		}
	} else {
		/* EOF: the peer closed, in the middle of this read or before it. */
		conn_fail(c, cqe->res == 0 || cqe->res == -EPIPE ? -ECONNRESET : cqe->res);
	}
	c->recv_staged = false;
	conn_progress(c);
}

static void start_recv(struct tcp_conn *c)
{
	struct tcp_rd *op = c->rq;
	size_t need = op->len - op->done;
	struct io_uring_sqe *sqe;

	if (need < TCP_STAGE_MIN && !c->stage && !(c->stage = malloc(TCP_STAGE_CAP))) {
		conn_fail(c, -ENOMEM);
		return;
	}
	sqe = tpu__ctx_sqe(c->ctx, recv_done, c);
	if (!sqe) {
		conn_fail(c, -ENOMEM);
		return;
	}
	if (need < TCP_STAGE_MIN) {
		io_uring_prep_recv(sqe, c->fd, c->stage, TCP_STAGE_CAP, 0);
		c->recv_asked = TCP_STAGE_CAP;
		c->recv_staged = true;
	} else {
		if (need > TCP_RECV_MAX)
			need = TCP_RECV_MAX;
		io_uring_prep_recv(sqe, c->fd, op->buf + op->done, need, MSG_WAITALL);
		c->recv_asked = need;
		c->recv_bulk = need >= TCP_BULK_MIN;
	}
	/* The socket was empty a moment ago: wait for data instead of trying first. */
	if (c->recv_drained)
		sqe->ioprio |= IORING_RECVSEND_POLL_FIRST;
	c->recv_busy = true;
	c->inflight++;
	conn_spin(c);
	tpu__ctx_submit(c->ctx);
}

/*
 * Start the RECV and the send that can start.  Never calls back: what
 * cannot start (bytes already staged for the head read, an error) is left
 * to conn_progress.
 */
static void conn_pump(struct tcp_conn *c)
{
	if (!c->connected || c->error || c->closed)
		return;
	/* A head read already complete is called back first (reads_progress). */
	if (c->rq && c->rq->done < c->rq->len && !c->recv_busy && c->stage_off == c->stage_len)
		start_recv(c);
	/* Writes of nothing at the head are done without a system call. */
	if (c->wsend && !c->send_busy && c->wsend->cur == c->wsend->niov)
		writes_advance(c, 0);
	if (c->wsend && !c->send_busy && !c->error)
		start_send(c);
}

/*
 * Call back the reads that are done or cannot be, hand staged bytes out;
 * true if anything changed (then conn_pump may have a RECV to start).
 */
static bool reads_progress(struct tcp_conn *c)
{
	bool any = false;

	while (c->rq) {
		struct tcp_rd *op = c->rq;
		tpu_status st = 0;

		if (op->done < op->len) {
			/* A RECV into the caller's memory: the read is the kernel's until it ends. */
			if (c->recv_busy && !c->recv_staged)
				break;
			if (c->closed) {
				st = TPU_E_CLOSED;
			} else if (c->error) {
				st = c->error;
			} else if (c->stage_off < c->stage_len) {
				size_t n = op->len - op->done;

				if (n > c->stage_len - c->stage_off)
					n = c->stage_len - c->stage_off;
				memcpy(op->buf + op->done, c->stage + c->stage_off, n);
				op->done += n;
				c->stage_off += n;
				any = true;
				if (op->done < op->len)
					break;
			} else {
				break;
			}
		}
		c->rq = op->next;
		if (!c->rq)
			c->rq_tail = &c->rq;
		op->cb(op->arg, st);
		tpu__free_list_put(&c->rd_free, op);
		any = true;
	}
	return any;
}

/* Call back the writes at the head that are done; true if any was. */
static bool writes_progress(struct tcp_conn *c)
{
	bool any = false;

	/* After an error, nothing more is sent: what is left fails. */
	if ((c->error || c->closed) && !c->send_busy) {
		for (struct tcp_wr *op = c->wsend; op; op = op->next) {
			if (!op->sent) {
				op->sent = true;
				op->status = conn_status(c);
			}
		}
		c->wsend = NULL;
	}
	while (c->wq && c->wq->sent && !c->wq->notifs) {
		struct tcp_wr *op = c->wq;

		c->wq = op->next;
		if (!c->wq)
			c->wq_tail = &c->wq;
		op->cb(op->arg, c->closed ? TPU_E_CLOSED : op->status);
		tpu__free_list_put(&c->wr_free, op);
		any = true;
	}
	return any;
}

/* Start what can start, call back what is done or failed; free once closed and idle. */
static void conn_progress(struct tcp_conn *c)
{
	c->depth++;
	do {
		conn_pump(c);
	} while (reads_progress(c) | writes_progress(c));
	c->depth--;
	conn_maybe_free(c);
}

static tpu_status tcp_write(struct tpu__conn *conn, const struct iovec *iov, unsigned int n,
			    tpu__io_cb cb, void *arg)
{
	struct tcp_conn *c = (struct tcp_conn *)conn;
	struct tcp_wr *op;
	unsigned int k = 0;
	size_t cap;

	if (n > TPU__XPORT_IOV_MAX || (n && !iov) || !cb)
		return -EINVAL;
	op = tpu__free_list_get(&c->wr_free, n, TCP_WR_IOV_MIN, sizeof(*op), sizeof(op->iov[0]));
	if (!op)
		return -ENOMEM;
	cap = op->cap_iov;
	/* The iovecs below fill iov[] as far as they go. */
	*op = (struct tcp_wr){ .cap_iov = cap };
	for (unsigned int i = 0; i < n; i++)
		if (iov[i].iov_len)
			op->iov[k++] = iov[i];
	op->niov = k;
	op->cb = cb;
	op->arg = arg;
	op->conn = c;
	*c->wq_tail = op;
	c->wq_tail = &op->next;
	if (!c->wsend)
		c->wsend = op;
	conn_pump(c);
	/* Done already (a write of nothing), or failed: call back from the loop. */
	if (c->error || c->closed || (c->wq->sent && !c->wq->notifs))
		conn_defer(c);
	return 0;
}

static tpu_status tcp_read(struct tpu__conn *conn, void *buf, size_t len, tpu__io_cb cb, void *arg)
{
	struct tcp_conn *c = (struct tcp_conn *)conn;
	struct tcp_rd *op;

	if (!len || !buf || !cb)
		return -EINVAL;
	op = tpu__free_list_get(&c->rd_free, 0, 0, sizeof(*op), 0);
	if (!op)
		return -ENOMEM;
	*op = (struct tcp_rd){ .cb = cb, .arg = arg, .buf = buf, .len = len };
	*c->rq_tail = op;
	c->rq_tail = &op->next;
	conn_pump(c);
	/* Staged bytes for it, or an error: call back from the loop. */
	if (c->error || c->closed || (c->connected && !c->recv_busy))
		conn_defer(c);
	return 0;
}

static int tcp_peer_pid(struct tpu__conn *conn)
{
	(void)conn;
	return 0;
}

static void cancel_done(void *arg, const struct io_uring_cqe *cqe)
{
	struct tcp_conn *c = arg;

	(void)cqe;
	c->inflight--;
	conn_maybe_free(c);
}

static void tcp_close(struct tpu__conn *conn)
{
	struct tcp_conn *c = (struct tcp_conn *)conn;
	struct io_uring_sqe *sqe;
	bool notifs = c->send_zc;

	if (c->closed)
		return;
	c->closed = true;
	conn_spin(c);
	if (!c->error)
		c->error = TPU_E_CLOSED;
	for (struct tcp_wr *op = c->wq; op && !notifs; op = op->next)
		notifs = op->notifs > 0;
	if (c->fd >= 0) {
		if (notifs) {
			struct linger lg = { .l_onoff = 1, .l_linger = 0 };

			setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		}
		/* The peer sees EOF; RECVs and sends in flight end. */
		shutdown(c->fd, SHUT_RDWR);
		if (c->recv_busy || c->send_busy || c->ai) {
			sqe = tpu__ctx_sqe(c->ctx, cancel_done, c);
			if (sqe) {
				io_uring_prep_cancel_fd(sqe, c->fd, IORING_ASYNC_CANCEL_ALL);
				c->inflight++;
				tpu__ctx_submit(c->ctx);
			}
		}
		/*
		 * Requests in flight hold their own reference: the socket goes
		 * once they are done, without waiting for the last CQE here.
		 */
		close(c->fd);
		c->fd = -1;
	}
	if (c->depth)
		return;
	if (c->rq || c->wq)
		conn_defer(c);
	else
		conn_maybe_free(c);
}

static const struct tpu__conn_ops tcp_conn_ops = {
	.write = tcp_write,
	.read = tcp_read,
	.peer_pid = tcp_peer_pid,
	.close = tcp_close,
};

static struct tcp_conn *conn_new(struct tpu_context *ctx, int fd)
{
	struct tcp_conn *c = calloc(1, sizeof(*c));
	int one = 1;

	if (!c)
		return NULL;
	c->base.ops = &tcp_conn_ops;
	c->base.xport = &tpu__xport_tcp;
	c->ctx = ctx;
	c->fd = fd;
	c->zc = tcp_zc_wanted();
	c->rq_tail = &c->rq;
	c->wq_tail = &c->wq;
	tpu__free_list_init(&c->rd_free, offsetof(struct tcp_rd, next), TPU__FREE_NO_ROOM,
			    TCP_OP_CACHE, NULL);
	tpu__free_list_init(&c->wr_free, offsetof(struct tcp_wr, next),
			    offsetof(struct tcp_wr, cap_iov), TCP_OP_CACHE, NULL);
	conn_spin(c);
	if (fd >= 0)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return c;
}

static void connect_done(void *arg, const struct io_uring_cqe *cqe);

/* Connect to c->ai_cur, or the addresses after it that a socket can be made for. */
static tpu_status connect_next(struct tcp_conn *c)
{
	struct io_uring_sqe *sqe;
	tpu_status st = -EINVAL;
	int one = 1;

	for (; c->ai_cur; c->ai_cur = c->ai_cur->ai_next) {
		c->fd = socket(c->ai_cur->ai_family, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP);
		if (c->fd >= 0)
			break;
		st = tpu__errno();
	}
	if (!c->ai_cur)
		return st;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	sqe = tpu__ctx_sqe(c->ctx, connect_done, c);
	if (!sqe) {
		close(c->fd);
		c->fd = -1;
		return -ENOMEM;
	}
	io_uring_prep_connect(sqe, c->fd, c->ai_cur->ai_addr, c->ai_cur->ai_addrlen);
	c->inflight++;
	tpu__ctx_submit(c->ctx);
	return 0;
}

static void connect_done(void *arg, const struct io_uring_cqe *cqe)
{
	struct tcp_conn *c = arg;
	tpu_status st = cqe->res;

	c->inflight--;
	if (!st) {
		c->connected = true;
	} else if (!c->closed && c->ai_cur->ai_next) {
		/* The host has more addresses (localhost: ::1, then 127.0.0.1). */
		close(c->fd);
		c->fd = -1;
		c->ai_cur = c->ai_cur->ai_next;
		if (!connect_next(c))
			return;
		conn_fail(c, st);
	} else {
		conn_fail(c, st);
	}
	freeaddrinfo(c->ai);
	c->ai = c->ai_cur = NULL;
	conn_progress(c);
}

static tpu_status tcp_connect(struct tpu_context *ctx, const char *addr, struct tpu__conn **out)
{
	struct tcp_conn *c;
	tpu_status st;

	c = conn_new(ctx, -1);
	if (!c)
		return -ENOMEM;
	st = tpu__xport_resolve(addr, false, &c->ai);
	if (!st) {
		c->ai_cur = c->ai;
		st = connect_next(c);
	}
	if (st) {
		if (c->ai)
			freeaddrinfo(c->ai);
		c->closed = true;
		conn_spin(c);
		free(c);
		return st;
	}
	*out = &c->base;
	return 0;
}

/* ---- listeners ---------------------------------------------------------- */

static void arm_accept(struct tcp_listener *l);

static void listener_maybe_free(struct tcp_listener *l)
{
	if (l->closed && !l->accepting && !l->waiting && !l->in_cb) {
		close(l->fd);
		free(l);
	}
}

/* fn may close the listener: it is freed once fn returned. */
static void listener_call(struct tcp_listener *l, tpu_status st, struct tpu__conn *conn)
{
	l->in_cb++;
	l->fn(l->arg, st, conn);
	l->in_cb--;
}

static void accept_retry(void *arg, tpu_status st)
{
	struct tcp_listener *l = arg;

	(void)st;
	l->waiting = false;
	if (!l->closed)
		arm_accept(l);
	listener_maybe_free(l);
}

static void accept_done(void *arg, const struct io_uring_cqe *cqe)
{
	struct tcp_listener *l = arg;
	struct tcp_conn *c;
	int res = cqe->res;

	l->accepting = false;
	if (l->closed) {
		if (res >= 0)
			close(res);
	} else if (res == -EMFILE || res == -ENFILE || res == -ENOBUFS || res == -ENOMEM) {
		/* Out of descriptors or memory: try again in a while. */
		tpu__log_debug("tcp: accept: %s", tpu_strerror(res));
		if (!tpu__ctx_timer_start(l->ctx, &l->retry, TCP_ACCEPT_RETRY_NS))
			l->waiting = true;
		else
			listener_call(l, -ENOMEM, NULL);
	} else if (res == -ECONNABORTED || res == -EINTR || res == -EAGAIN) {
		/* That one connection is gone: the next one. */
		arm_accept(l);
	} else if (res < 0) {
		/* Final: the listener stays closed. */
		listener_call(l, res, NULL);
	} else {
		c = conn_new(l->ctx, res);
		if (!c) {
			close(res);
		} else {
			c->connected = true;
			listener_call(l, 0, &c->base);
		}
		if (!l->closed)
			arm_accept(l);
	}
	listener_maybe_free(l);
}

static void arm_accept(struct tcp_listener *l)
{
	struct io_uring_sqe *sqe = tpu__ctx_sqe(l->ctx, accept_done, l);

	if (!sqe) {
		listener_call(l, -ENOMEM, NULL);
		return;
	}
	io_uring_prep_accept(sqe, l->fd, NULL, NULL, SOCK_CLOEXEC);
	l->accepting = true;
	tpu__ctx_submit(l->ctx);
}

static const char *tcp_listener_addr(const struct tpu__xlistener *xl)
{
	return ((const struct tcp_listener *)xl)->addr;
}

/* The listener may be gone by now: nothing to do. */
static void listener_cancelled(void *arg, const struct io_uring_cqe *cqe)
{
	(void)arg;
	(void)cqe;
}

static void tcp_listener_close(struct tpu__xlistener *xl)
{
	struct tcp_listener *l = (struct tcp_listener *)xl;
	struct io_uring_sqe *sqe;

	if (l->closed)
		return;
	l->closed = true;
	if (l->accepting) {
		/* The ACCEPT in flight ends with an error; its CQE frees the listener. */
		shutdown(l->fd, SHUT_RDWR);
		sqe = tpu__ctx_sqe(l->ctx, listener_cancelled, NULL);
		if (sqe) {
			io_uring_prep_cancel_fd(sqe, l->fd, IORING_ASYNC_CANCEL_ALL);
			tpu__ctx_submit(l->ctx);
		}
	}
	if (l->waiting)
		tpu__ctx_timer_cancel(l->ctx, &l->retry);
	listener_maybe_free(l);
}

static const struct tpu__xlistener_ops tcp_listener_ops = {
	.addr = tcp_listener_addr,
	.close = tcp_listener_close,
};

static tpu_status tcp_listen(struct tpu_context *ctx, const char *addr, tpu__accept_fn fn,
			     void *arg, struct tpu__xlistener **out)
{
	struct sockaddr_storage sa;
	socklen_t salen = sizeof(sa);
	struct addrinfo *ai;
	struct tcp_listener *l;
	struct io_uring_sqe *sqe;
	tpu_status st;
	int one = 1;

	if (!fn)
		return -EINVAL;
	st = tpu__xport_resolve(addr, true, &ai);
	if (st)
		return st;
	l = calloc(1, sizeof(*l));
	if (!l) {
		freeaddrinfo(ai);
		return -ENOMEM;
	}
	l->base.ops = &tcp_listener_ops;
	l->base.xport = &tpu__xport_tcp;
	l->ctx = ctx;
	l->fn = fn;
	l->arg = arg;
	l->retry.fn = accept_retry;
	l->retry.arg = l;
	l->fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP);
	if (l->fd < 0) {
		st = tpu__errno();
		goto fail;
	}
	setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(l->fd, ai->ai_addr, ai->ai_addrlen) || listen(l->fd, TCP_BACKLOG) ||
	    getsockname(l->fd, (struct sockaddr *)&sa, &salen)) {
		st = tpu__errno();
		goto fail;
	}
	tpu__xport_format_addr((struct sockaddr *)&sa, salen, l->addr, sizeof(l->addr));
	/* Armed here, so that a lack of memory is this call's error, not fn's. */
	sqe = tpu__ctx_sqe(ctx, accept_done, l);
	if (!sqe) {
		st = -ENOMEM;
		goto fail;
	}
	io_uring_prep_accept(sqe, l->fd, NULL, NULL, SOCK_CLOEXEC);
	l->accepting = true;
	tpu__ctx_submit(ctx);
	freeaddrinfo(ai);
	*out = &l->base;
	return 0;
fail:
	if (l->fd >= 0)
		close(l->fd);
	free(l);
	freeaddrinfo(ai);
	return st;
}

const struct tpu__xport tpu__xport_tcp = {
	.name = "tcp",
	.priority = 10,
	.compat_descriptor = tcp_compat_descriptor,
	.listen = tcp_listen,
	.connect = tcp_connect,
};
