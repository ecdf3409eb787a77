// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The tcp transport: sockets driven through the context's io_uring
 * (xport.h).  Everything runs on the context thread.
 *
 * One RECV and one SENDMSG are in flight per connection at most, which is
 * what keeps reads and writes in order without sequence numbers.  With
 * TPU_TCP_ZEROCOPY=1, writes of 64 KiB or more go out with SENDMSG_ZC where
 * the kernel has it: the pages
 * are then the kernel's until a notification CQE comes, so a write's
 * callback waits for the notifications of every zero-copy send it made.  A
 * kernel without it answers -EINVAL or -EOPNOTSUPP once; the process then
 * stops asking.
 *
 * Callbacks never run inside the call that queued their operation: errors
 * found there are reported from a deferred task, so callers need not
 * expect re-entry.
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
/*
 * Large reads ask for every byte at once (MSG_WAITALL: io_uring retries
 * inside the kernel) instead of one CQE per socket-buffer's worth.
 */
#define TCP_WAITALL_MIN	(64u << 10)
/*
 * Reads smaller than this go through a staging buffer: one RECV takes a
 * frame header, its descriptor and small payloads together, where exact
 * reads would cost one RECV each.
 */
#define TCP_STAGE_MIN	(16u << 10)
#define TCP_STAGE_CAP	(64u << 10)

/* Cleared for good by the first kernel that refuses a zero-copy send. */
static atomic_bool tcp_zc_ok = true;

/*
 * Zero-copy sends are opt-in (TPU_TCP_ZEROCOPY=1) for now: closing a
 * connection whose peer stopped reading left a SEND_ZC's notification
 * pending, and with it the write's callback (tests/unit/test_pipe_core.c,
 * close_fails_pending, catches it).
 */
static bool tcp_zc_wanted(void)
{
	static atomic_int wanted = -1;

	if (wanted < 0) {
		const char *e = getenv("TPU_TCP_ZEROCOPY");

		wanted = e && !strcmp(e, "1");
	}
	return wanted;
}

struct tcp_op {
	struct tcp_op *next;
	tpu__io_cb cb;
	void *arg;
	/* read */
	uint8_t *buf;
	size_t len, done;
	/* write */
	struct iovec iov[TPU__XPORT_IOV_MAX];
	unsigned int niov, cur;		/* iov[cur] is partly sent, at offset done */
	unsigned int notifs;		/* zero-copy notifications still due */
	bool sent;			/* every byte went out */
	bool zc;			/* the send in flight is a zero-copy one */
	struct tcp_conn *conn;
	tpu_status status;
};

struct tcp_conn {
	struct tpu__conn base;
	struct tpu_context *ctx;
	int fd;
	bool connected;
	bool closed;
	tpu_status error;		/* first error; later operations get it */
	unsigned int inflight;		/* SQEs whose last CQE is due */
	bool recv_busy, send_busy;
	struct tcp_op *rq, **rq_tail;	/* reads, the head one in flight */
	struct tcp_op *wq, **wq_tail;	/* writes, not yet called back */
	struct tcp_op *wsend;		/* the write being sent */
	struct msghdr msg;
	struct sockaddr_storage sa;	/* connect target */
	socklen_t salen;
	uint8_t *stage;			/* TCP_STAGE_CAP bytes, once a small read came */
	size_t stage_len, stage_off;	/* bytes received, bytes handed out */
	bool recv_staged;		/* the RECV in flight fills the stage */
	struct tpu__task task;		/* reports errors and closes */
	bool task_queued;
};

struct tcp_listener {
	struct tpu__xlistener base;
	struct tpu_context *ctx;
	int fd;
	bool closed;
	bool accepting;			/* an ACCEPT is in flight */
	tpu__accept_fn fn;
	void *arg;
	char addr[TPU__XPORT_ADDR_MAX];
};

static const struct tpu__conn_ops tcp_conn_ops;
static const struct tpu__xlistener_ops tcp_listener_ops;

/* ---- addresses ---------------------------------------------------------- */

/* "HOST:PORT" or "[V6]:PORT" into host and port strings. */
static tpu_status split_addr(const char *addr, char *host, size_t hsize, char *port, size_t psize)
{
	const char *colon, *h = addr;
	size_t hlen;

	if (addr[0] == '[') {
		const char *end = strchr(addr, ']');

		if (!end || end[1] != ':')
			return -EINVAL;
		h = addr + 1;
		hlen = (size_t)(end - h);
		colon = end + 1;
	} else {
		colon = strrchr(addr, ':');
		if (!colon || memchr(addr, ':', (size_t)(colon - addr)))
			return -EINVAL;
		hlen = (size_t)(colon - addr);
	}
	if (!hlen || hlen >= hsize || !colon[1] || strlen(colon + 1) >= psize)
		return -EINVAL;
	for (const char *c = colon + 1; *c; c++)
		if (*c < '0' || *c > '9')
			return -EINVAL;
	if (strtoul(colon + 1, NULL, 10) > 65535)
		return -EINVAL;
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	strcpy(port, colon + 1);
	return 0;
}

static tpu_status resolve(const char *addr, bool passive, struct sockaddr_storage *sa,
			  socklen_t *salen)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
	struct addrinfo *res;
	char host[TPU__XPORT_ADDR_MAX], port[8];
	tpu_status st = split_addr(addr, host, sizeof(host), port, sizeof(port));
	int err;

	if (st)
		return st;
	if (passive)
		hints.ai_flags |= AI_PASSIVE;
	err = getaddrinfo(host, port, &hints, &res);
	if (err)
		return err == EAI_SYSTEM ? tpu__errno() : -EINVAL;
	memcpy(sa, res->ai_addr, res->ai_addrlen);
	*salen = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

static void format_addr(const struct sockaddr_storage *sa, char *buf, size_t size)
{
	char host[64] = "?";

	if (sa->ss_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const void *)sa;

		getnameinfo((const void *)sa, sizeof(*s6), host, sizeof(host), NULL, 0,
			    NI_NUMERICHOST);
		snprintf(buf, size, "[%s]:%u", host, ntohs(s6->sin6_port));
	} else {
		const struct sockaddr_in *s4 = (const void *)sa;

		getnameinfo((const void *)sa, sizeof(*s4), host, sizeof(host), NULL, 0,
			    NI_NUMERICHOST);
		snprintf(buf, size, "%s:%u", host, ntohs(s4->sin_port));
	}
}

static tpu_status tcp_domain(char *buf, size_t size)
{
	return snprintf(buf, size, "tcp") < (int)size ? 0 : -ENOSPC;
}

/* ---- connections --------------------------------------------------------- */

static void conn_kick(struct tcp_conn *c);

static void conn_maybe_free(struct tcp_conn *c)
{
	if (c->closed && !c->inflight && !c->rq && !c->wq && !c->task_queued) {
		if (c->fd >= 0)
			close(c->fd);
		free(c->stage);
		free(c);
	}
}

static void conn_error(struct tcp_conn *c, tpu_status st)
{
	if (!c->error)
		c->error = st;
}

/* Call back the writes at the head that are finished (sent and notified). */
static void writes_finish(struct tcp_conn *c)
{
	while (c->wq && c->wq->sent && !c->wq->notifs && c->wq != c->wsend) {
		struct tcp_op *op = c->wq;

		c->wq = op->next;
		if (!c->wq)
			c->wq_tail = &c->wq;
		op->cb(op->arg, op->status);
		free(op);
	}
}

/* With an error: fail what is not in flight. */
static void conn_flush_errors(struct tcp_conn *c)
{
	if (!c->error)
		return;
	while (c->rq && !(c->recv_busy && c->rq)) {
		struct tcp_op *op = c->rq;

		c->rq = op->next;
		if (!c->rq)
			c->rq_tail = &c->rq;
		op->cb(op->arg, c->error);
		free(op);
	}
	for (struct tcp_op *op = c->wq; op; op = op->next) {
		if (!op->sent && op != c->wsend) {
			op->sent = true;
			op->status = c->error;
		}
	}
	writes_finish(c);
}

static void conn_task(struct tpu__task *t)
{
	struct tcp_conn *c = (struct tcp_conn *)((char *)t - offsetof(struct tcp_conn, task));

	c->task_queued = false;
	conn_kick(c);
	conn_maybe_free(c);
}

static void conn_defer(struct tcp_conn *c)
{
	if (c->task_queued)
		return;
	c->task_queued = true;
	c->task.fn = conn_task;
	tpu__ctx_defer(c->ctx, &c->task);
}

static void recv_done(void *arg, const struct io_uring_cqe *cqe)
{
	struct tcp_conn *c = arg;
	struct tcp_op *op = c->rq;

	c->inflight--;
	c->recv_busy = false;
	if (c->recv_staged) {
		c->recv_staged = false;
		if (cqe->res > 0) {
			/* conn_kick hands the bytes to the reads. */
			TCP_MARK_DEFINED(c->stage, (size_t)cqe->res);
			c->stage_len = (size_t)cqe->res;
			c->stage_off = 0;
			conn_kick(c);
			conn_maybe_free(c);
			return;
		}
	}
	if (cqe->res > 0) {
		TCP_MARK_DEFINED(op->buf + op->done, (size_t)cqe->res);
		op->done += (size_t)cqe->res;
		if (op->done == op->len) {
			c->rq = op->next;
			if (!c->rq)
				c->rq_tail = &c->rq;
			op->cb(op->arg, 0);
			free(op);
		}
	} else {
		conn_error(c, c->closed ? TPU_E_CLOSED :
			   cqe->res == 0 || cqe->res == -EPIPE ? -ECONNRESET : cqe->res);
		c->rq = op->next;
		if (!c->rq)
			c->rq_tail = &c->rq;
		op->cb(op->arg, c->error);
		free(op);
	}
	conn_kick(c);
	conn_maybe_free(c);
}

static void send_done(void *arg, const struct io_uring_cqe *cqe)
{
	struct tcp_op *op = arg;
	struct tcp_conn *c = op->conn;

	if (cqe->flags & IORING_CQE_F_NOTIF) {
		/* The kernel let go of a zero-copy send's pages. */
		op->notifs--;
		c->inflight--;
		writes_finish(c);
		conn_maybe_free(c);
		return;
	}
	if (cqe->flags & IORING_CQE_F_MORE)
		op->notifs++;		/* its notification is the request's last CQE */
	else
		c->inflight--;
	c->send_busy = false;
	c->wsend = NULL;
	if (op->zc && (cqe->res == -EOPNOTSUPP || cqe->res == -EINVAL)) {
		/* This kernel or socket cannot: plain sends from now on. */
		atomic_store(&tcp_zc_ok, false);
		tpu__log_debug("tcp: zero-copy send refused (%d), using plain sends", cqe->res);
	} else if (cqe->res < 0) {
		conn_error(c, c->closed ? TPU_E_CLOSED : cqe->res);
		op->sent = true;
		op->status = c->error;
	} else {
		size_t n = (size_t)cqe->res;

		while (n && op->cur < op->niov) {
			size_t left = op->iov[op->cur].iov_len - op->done;

			if (n < left) {
				op->done += n;
				n = 0;
			} else {
				n -= left;
				op->done = 0;
				op->cur++;
			}
		}
		if (op->cur == op->niov)
			op->sent = true;
	}
	writes_finish(c);
	conn_kick(c);
	conn_maybe_free(c);
}

static void connect_done(void *arg, const struct io_uring_cqe *cqe)
{
	struct tcp_conn *c = arg;
	int one = 1;

	c->inflight--;
	c->send_busy = false;
	c->recv_busy = false;
	if (cqe->res < 0) {
		conn_error(c, c->closed ? TPU_E_CLOSED : cqe->res);
	} else {
		c->connected = true;
		setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	conn_kick(c);
	conn_maybe_free(c);
}

static void start_recv(struct tcp_conn *c)
{
	struct tcp_op *op = c->rq;
	size_t need = op->len - op->done;
	struct io_uring_sqe *sqe;

	if (need < TCP_STAGE_MIN && !c->stage && !(c->stage = malloc(TCP_STAGE_CAP))) {
		conn_error(c, -ENOMEM);
		return;
	}
	sqe = tpu__ctx_sqe(c->ctx, recv_done, c);
	if (!sqe) {
		conn_error(c, -ENOMEM);
		return;
	}
	if (need < TCP_STAGE_MIN) {
		io_uring_prep_recv(sqe, c->fd, c->stage, TCP_STAGE_CAP, 0);
		c->recv_staged = true;
	} else {
		io_uring_prep_recv(sqe, c->fd, op->buf + op->done, need,
				   need >= TCP_WAITALL_MIN ? MSG_WAITALL : 0);
	}
	c->recv_busy = true;
	c->inflight++;
	tpu__ctx_submit(c->ctx);
}

static void start_send(struct tcp_conn *c, struct tcp_op *op)
{
	struct io_uring_sqe *sqe;
	size_t left = 0;
	bool zc;

	for (unsigned int i = op->cur; i < op->niov; i++)
		left += op->iov[i].iov_len - (i == op->cur ? op->done : 0);
	zc = left >= TCP_ZC_MIN && atomic_load(&tcp_zc_ok) && tcp_zc_wanted();
	sqe = tpu__ctx_sqe(c->ctx, send_done, op);
	if (!sqe) {
		conn_error(c, -ENOMEM);
		return;
	}
	/* The message's iovecs start at the partly sent one. */
	op->iov[op->cur].iov_base = (uint8_t *)op->iov[op->cur].iov_base + op->done;
	op->iov[op->cur].iov_len -= op->done;
	op->done = 0;
	memset(&c->msg, 0, sizeof(c->msg));
	c->msg.msg_iov = &op->iov[op->cur];
	c->msg.msg_iovlen = op->niov - op->cur;
	if (zc)
		io_uring_prep_sendmsg_zc(sqe, c->fd, &c->msg, MSG_NOSIGNAL);
	else
		io_uring_prep_sendmsg(sqe, c->fd, &c->msg, MSG_NOSIGNAL);
	op->conn = c;
	op->zc = zc;
	c->wsend = op;
	c->send_busy = true;
	c->inflight++;
	tpu__ctx_submit(c->ctx);
}

/* Hand staged bytes to the reads at the head, in order (calls them back). */
static void serve_stage(struct tcp_conn *c)
{
	while (c->rq && c->stage_off < c->stage_len && !c->error) {
		struct tcp_op *op = c->rq;
		size_t n = op->len - op->done;

		if (n > c->stage_len - c->stage_off)
			n = c->stage_len - c->stage_off;
		memcpy(op->buf + op->done, c->stage + c->stage_off, n);
		op->done += n;
		c->stage_off += n;
		if (op->done < op->len)
			break;
		c->rq = op->next;
		if (!c->rq)
			c->rq_tail = &c->rq;
		op->cb(op->arg, 0);
		free(op);
	}
}

/* Start what can start; fail what cannot. */
static void conn_kick(struct tcp_conn *c)
{
	if (c->error) {
		conn_flush_errors(c);
		return;
	}
	if (!c->connected)
		return;
	if (c->rq && !c->recv_busy) {
		serve_stage(c);
		if (c->error) {
			conn_flush_errors(c);
			return;
		}
		if (c->rq && !c->recv_busy)
			start_recv(c);
	}
	if (!c->send_busy) {
		struct tcp_op *op;

		for (op = c->wq; op && op->sent; op = op->next)
			;
		if (op)
			start_send(c, op);
	}
	if (c->error)
		conn_flush_errors(c);
}

static tpu_status tcp_write(struct tpu__conn *conn, const struct iovec *iov, unsigned int n,
			    tpu__io_cb cb, void *arg)
{
	struct tcp_conn *c = (struct tcp_conn *)conn;
	struct tcp_op *op;
	unsigned int k = 0;

	if (!n || n > TPU__XPORT_IOV_MAX)
		return -EINVAL;
	op = calloc(1, sizeof(*op));
	if (!op)
		return -ENOMEM;
	for (unsigned int i = 0; i < n; i++)
		if (iov[i].iov_len)
			op->iov[k++] = iov[i];
	op->niov = k;
	op->cb = cb;
	op->arg = arg;
	op->sent = k == 0;
	*c->wq_tail = op;
	c->wq_tail = &op->next;
	conn_defer(c);
	return 0;
}

static tpu_status tcp_read(struct tpu__conn *conn, void *buf, size_t len, tpu__io_cb cb, void *arg)
{
	struct tcp_conn *c = (struct tcp_conn *)conn;
	struct tcp_op *op;

	if (!len || !buf)
		return -EINVAL;
	op = calloc(1, sizeof(*op));
	if (!op)
		return -ENOMEM;
	op->buf = buf;
	op->len = len;
	op->cb = cb;
	op->arg = arg;
	*c->rq_tail = op;
	c->rq_tail = &op->next;
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

	c->closed = true;
	conn_error(c, TPU_E_CLOSED);
	if (c->fd >= 0) {
		/* In-flight requests end at once; the peer sees EOF. */
		shutdown(c->fd, SHUT_RDWR);
		sqe = tpu__ctx_sqe(c->ctx, cancel_done, c);
		if (sqe) {
			io_uring_prep_cancel_fd(sqe, c->fd, IORING_ASYNC_CANCEL_ALL);
			c->inflight++;
			tpu__ctx_submit(c->ctx);
		}
		/*
		 * Close the socket now, not once the last CQE came: a zero-copy
		 * send's notification waits for its pages to leave the send
		 * queue, which a peer that stopped reading keeps full until the
		 * socket is gone.  Requests in flight hold their own reference.
		 */
		close(c->fd);
		c->fd = -1;
	}
	conn_defer(c);
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

	if (!c)
		return NULL;
	c->base.ops = &tcp_conn_ops;
	c->base.xport = &tpu__xport_tcp;
	c->ctx = ctx;
	c->fd = fd;
	c->rq_tail = &c->rq;
	c->wq_tail = &c->wq;
	return c;
}

static tpu_status tcp_connect(struct tpu_context *ctx, const char *addr, struct tpu__conn **out)
{
	struct io_uring_sqe *sqe;
	struct tcp_conn *c;
	tpu_status st;
	int fd;

	c = conn_new(ctx, -1);
	if (!c)
		return -ENOMEM;
	st = resolve(addr, false, &c->sa, &c->salen);
	if (st) {
		free(c);
		return st;
	}
	fd = socket(c->sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		st = tpu__errno();
		free(c);
		return st;
	}
	c->fd = fd;
	sqe = tpu__ctx_sqe(ctx, connect_done, c);
	if (!sqe) {
		close(fd);
		free(c);
		return -ENOMEM;
	}
	io_uring_prep_connect(sqe, fd, (struct sockaddr *)&c->sa, c->salen);
	c->inflight++;
	c->send_busy = true;	/* nothing goes before the connection */
	c->recv_busy = true;
	tpu__ctx_submit(ctx);
	*out = &c->base;
	return 0;
}

/* ---- listeners ---------------------------------------------------------- */

static void arm_accept(struct tcp_listener *l);

static void accept_done(void *arg, const struct io_uring_cqe *cqe)
{
	struct tcp_listener *l = arg;
	struct tcp_conn *c;
	int one = 1;

	l->accepting = false;
	if (l->closed) {
		if (cqe->res >= 0)
			close(cqe->res);
		close(l->fd);
		free(l);
		return;
	}
	if (cqe->res < 0) {
		/* Out of descriptors and the like: try again; the rest is final. */
		if (cqe->res == -EMFILE || cqe->res == -ENFILE || cqe->res == -ENOBUFS ||
		    cqe->res == -ENOMEM || cqe->res == -ECONNABORTED || cqe->res == -EINTR) {
			tpu__log_debug("tcp: accept: %s", tpu_strerror(cqe->res));
			arm_accept(l);
			return;
		}
		l->fn(l->arg, cqe->res, NULL);
		return;
	}
	setsockopt(cqe->res, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c = conn_new(l->ctx, cqe->res);
	if (!c) {
		close(cqe->res);
	} else {
		c->connected = true;
		l->fn(l->arg, 0, &c->base);
	}
	if (!l->closed)
		arm_accept(l);
	else if (!l->accepting) {
		close(l->fd);
		free(l);
	}
}

static void arm_accept(struct tcp_listener *l)
{
	struct io_uring_sqe *sqe = tpu__ctx_sqe(l->ctx, accept_done, l);

	if (!sqe) {
		l->fn(l->arg, -ENOMEM, NULL);
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

	l->closed = true;
	if (!l->accepting) {
		close(l->fd);
		free(l);
		return;
	}
	/* The ACCEPT in flight ends with an error; its CQE frees the listener. */
	shutdown(l->fd, SHUT_RDWR);
	sqe = tpu__ctx_sqe(l->ctx, listener_cancelled, NULL);
	if (sqe) {
		io_uring_prep_cancel_fd(sqe, l->fd, 0);
		tpu__ctx_submit(l->ctx);
	}
}

static const struct tpu__xlistener_ops tcp_listener_ops = {
	.addr = tcp_listener_addr,
	.close = tcp_listener_close,
};

static tpu_status tcp_listen(struct tpu_context *ctx, const char *addr, tpu__accept_fn fn,
			     void *arg, struct tpu__xlistener **out)
{
	struct sockaddr_storage sa;
	socklen_t salen;
	struct tcp_listener *l;
	tpu_status st;
	int one = 1;

	st = resolve(addr, true, &sa, &salen);
	if (st)
		return st;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->base.ops = &tcp_listener_ops;
	l->base.xport = &tpu__xport_tcp;
	l->ctx = ctx;
	l->fn = fn;
	l->arg = arg;
	l->fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l->fd < 0) {
		st = tpu__errno();
		free(l);
		return st;
	}
	setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(l->fd, (struct sockaddr *)&sa, salen) || listen(l->fd, TCP_BACKLOG)) {
		st = tpu__errno();
		close(l->fd);
		free(l);
		return st;
	}
	salen = sizeof(sa);
	getsockname(l->fd, (struct sockaddr *)&sa, &salen);
	format_addr(&sa, l->addr, sizeof(l->addr));
	arm_accept(l);
	*out = &l->base;
	return 0;
}

const struct tpu__xport tpu__xport_tcp = {
	.name = "tcp",
	.priority = 10,
	.domain_descriptor = tcp_domain,
	.listen = tcp_listen,
	.connect = tcp_connect,
};
