// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The shm transport's set-up (see xport_shm.c for the design): the
 * connector makes the memfd of rings and says HELLO with it and its wake
 * eventfd; the acceptor checks and maps them and answers WELCOME; the
 * listener accepts on the abstract Unix socket.  All of it through the
 * context's io_uring.
 *
 * Any local user can connect to the abstract socket, so a connection in its
 * handshake is bounded like a pipe's set-up: it must say HELLO within
 * TPU_SETUP_TIMEOUT_MS, and at most TPU_SETUP_MAX are in their handshake
 * per listener (the oldest is dropped for a new one once it had its grace,
 * else the new one is refused; see base.h).  Out of descriptors,
 * the listener drops its oldest handshake and waits a while before it
 * accepts again, rather than spinning or giving up.
 */
#include <fcntl.h>
#include <liburing.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "shm.h"

static const struct tpu__xlistener_ops shm_listener_ops;

/* ---- connector ---------------------------------------------------------- */

/* Connecting failed: EOF or a reset there means the listener would not have us. */
static tpu_status hs_error(int res)
{
	return res == 0 || res == -ECONNRESET || res == -EPIPE ? -ECONNREFUSED : res;
}

static void on_welcome(void *arg, const struct io_uring_cqe *cqe)
{
	struct shm_conn *c = arg;
	int fds[SHM_MAX_FDS];
	unsigned int n = 0;

	if (cqe->res >= 0)
		n = tpu__shm_msg_take_fds(&c->rxm, fds, SHM_MAX_FDS);
	if (c->closed) {
		tpu__shm_close_fds(fds, n);
	} else if (cqe->res <= 0) {
		tpu__shm_conn_fail(c, hs_error(cqe->res));
	} else if (!tpu__shm_hs_ok(&c->hs_in, cqe->res, SHM_HS_WELCOME) || c->hs_in.ring_cap || n != 1 ||
		   (c->rxm.msg.msg_flags & MSG_CTRUNC) || !tpu__shm_is_eventfd(fds[0])) {
		tpu__log_debug("shm: connection %p: the listener's answer makes no sense",
			       (void *)c);
		tpu__shm_close_fds(fds, n);
		tpu__shm_conn_fail(c, -EPROTO);
	} else {
		c->peer_wake = fds[0];
		tpu__log_debug("shm: connection %p open (peer pid %d)", (void *)c, c->peer_pid);
		tpu__shm_conn_open(c);
	}
	tpu__shm_conn_cqe_done(c);
}

static void on_hello_sent(void *arg, const struct io_uring_cqe *cqe)
{
	struct shm_conn *c = arg;
	struct io_uring_sqe *sqe;

	/* The peer has its own reference now (or never will). */
	tpu__shm_close_fd(&c->memfd);
	if (c->closed) {
		tpu__shm_conn_cqe_done(c);
		return;
	}
	if (cqe->res != (int)sizeof(c->hs_out)) {
		tpu__shm_conn_fail(c, hs_error(cqe->res < 0 ? cqe->res : 0));
		tpu__shm_conn_cqe_done(c);
		return;
	}
	tpu__shm_msg_prepare(&c->rxm, &c->hs_in, sizeof(c->hs_in), true);
	sqe = tpu__shm_conn_sqe(c, on_welcome);
	if (!sqe) {
		tpu__shm_conn_fail(c, -ENOMEM);
	} else {
		io_uring_prep_recvmsg(sqe, c->sock, &c->rxm.msg, MSG_CMSG_CLOEXEC);
		tpu__ctx_submit(c->ctx);
	}
	tpu__shm_conn_cqe_done(c);
}

static void on_connected(void *arg, const struct io_uring_cqe *cqe)
{
	struct shm_conn *c = arg;
	struct io_uring_sqe *sqe;
	int fds[2];

	if (c->closed) {
		tpu__shm_conn_cqe_done(c);
		return;
	}
	if (cqe->res < 0) {
		tpu__log_debug("shm: connection %p: connect: %s", (void *)c,
			       tpu_strerror(cqe->res));
		tpu__shm_conn_fail(c, hs_error(cqe->res));
		tpu__shm_conn_cqe_done(c);
		return;
	}
	c->state = SHM_HELLO;
	c->peer_pid = tpu__shm_sock_peer_pid(c->sock);
	c->hs_out = (struct shm_hs){
		.magic = SHM_HS_MAGIC,
		.version = SHM_HS_VERSION,
		.type = SHM_HS_HELLO,
		.ring_cap = SHM_RING_CAP,
	};
	tpu__shm_msg_prepare(&c->txm, &c->hs_out, sizeof(c->hs_out), false);
	fds[0] = c->memfd;
	fds[1] = tpu__ctx_wake_fd(c->ctx);
	tpu__shm_msg_put_fds(&c->txm, fds, 2);
	sqe = tpu__shm_conn_sqe(c, on_hello_sent);
	if (!sqe) {
		tpu__shm_conn_fail(c, -ENOMEM);
	} else {
		io_uring_prep_sendmsg(sqe, c->sock, &c->txm.msg, MSG_NOSIGNAL);
		tpu__ctx_submit(c->ctx);
	}
	tpu__shm_conn_cqe_done(c);
}

/* The connector's memfd: both rings, formatted, sealed against shrinking. */
static tpu_status conn_make_rings(struct shm_conn *c)
{
	size_t one = tpu__shm_ring_size(SHM_RING_CAP);
	tpu_status st;

	c->map_len = 2 * one;
	c->memfd = memfd_create("tensorpipe-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (c->memfd < 0)
		return tpu__errno();
	if (ftruncate(c->memfd, (off_t)c->map_len) ||
	    fcntl(c->memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL))
		return tpu__errno();
	c->map = mmap(NULL, c->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, c->memfd, 0);
	if (c->map == MAP_FAILED) {
		c->map = NULL;
		return tpu__errno();
	}
	st = tpu__shm_ring_init(c->map, SHM_RING_CAP);
	if (!st)
		st = tpu__shm_ring_init((uint8_t *)c->map + one, SHM_RING_CAP);
	if (!st)
		st = tpu__shm_map_rings(c, SHM_RING_CAP, true);
	return st;
}

tpu_status tpu__shm_connect(struct tpu_context *ctx, const char *addr, struct tpu__conn **out)
{
	struct io_uring_sqe *sqe;
	struct shm_conn *c;
	tpu_status st;

	if (!ctx || !out)
		return -EINVAL;
	*out = NULL;
	c = tpu__shm_conn_new(ctx);
	if (!c)
		return -ENOMEM;
	st = tpu__shm_sockaddr(addr, &c->addr, &c->addr_len);
	if (st) {
		tpu__shm_conn_free(c);
		return st;
	}
	c->sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->sock < 0) {
		st = tpu__errno();
		tpu__shm_conn_free(c);
		return st;
	}
	st = conn_make_rings(c);
	if (st) {
		tpu__shm_conn_free(c);
		return st;
	}
	sqe = tpu__shm_conn_sqe(c, on_connected);
	if (!sqe) {
		tpu__shm_conn_free(c);
		return -ENOMEM;
	}
	io_uring_prep_connect(sqe, c->sock, (struct sockaddr *)&c->addr, c->addr_len);
	c->state = SHM_CONNECTING;
	tpu__ctx_submit(ctx);
	tpu__log_debug("shm: connection %p connecting to %s", (void *)c, addr);
	*out = &c->base;
	return 0;
}

/* ---- acceptor ------------------------------------------------------------ */

static void listener_maybe_free(struct shm_listener *l);

static void listener_unlink(struct shm_listener *l, struct shm_conn *c)
{
	struct shm_conn **pp;

	if (c->hs_timer_on) {
		c->hs_timer_on = false;
		tpu__ctx_timer_cancel(c->ctx, &c->hs_timer);
	}
	for (pp = &l->pending; *pp; pp = &(*pp)->lnext) {
		if (*pp == c) {
			*pp = c->lnext;
			l->npending--;
			break;
		}
	}
	c->lnext = NULL;
	c->listener = NULL;
}

/* A connection that failed its handshake: nobody has seen it, drop it. */
static void accept_drop(struct shm_conn *c, const char *why)
{
	tpu__log_debug("shm: dropping an incoming connection: %s", why);
	if (c->listener)
		listener_unlink(c->listener, c);
	tpu__shm_close(&c->base);
}

static void on_welcome_sent(void *arg, const struct io_uring_cqe *cqe)
{
	struct shm_conn *c = arg;
	struct shm_listener *l = c->listener;

	if (c->closed) {
		tpu__shm_conn_cqe_done(c);
		return;
	}
	if (cqe->res != (int)sizeof(c->hs_out)) {
		accept_drop(c, "the connector went away");
		tpu__shm_conn_cqe_done(c);
		return;
	}
	listener_unlink(l, c);
	tpu__log_debug("shm: connection %p accepted (peer pid %d)", (void *)c, c->peer_pid);
	tpu__shm_conn_open(c);
	l->busy++;
	l->fn(l->arg, 0, &c->base);
	l->busy--;
	listener_maybe_free(l);
	tpu__shm_conn_cqe_done(c);
}

/* Check the connector's memfd and map it; the peer is not trusted. */
static const char *accept_map(struct shm_conn *c, int memfd, uint64_t cap)
{
	struct stat stbuf;
	int seals;

	if (cap < TPU__SHM_RING_MIN || cap > TPU__SHM_RING_MAX || (cap & (cap - 1)))
		return "bad ring size";
	c->map_len = 2 * tpu__shm_ring_size(cap);
	if (fstat(memfd, &stbuf) || !S_ISREG(stbuf.st_mode) ||
	    (uint64_t)stbuf.st_size < (uint64_t)c->map_len)
		return "not a memfd of the right size";
	/* Without this seal the peer could shrink it and fault our copies. */
	seals = fcntl(memfd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK))
		return "memfd not sealed against shrinking";
	c->map = mmap(NULL, c->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (c->map == MAP_FAILED) {
		c->map = NULL;
		return "mmap failed";
	}
	if (tpu__shm_map_rings(c, cap, false))
		return "bad ring headers";
	return NULL;
}

static void on_hello(void *arg, const struct io_uring_cqe *cqe)
{
	struct shm_conn *c = arg;
	struct io_uring_sqe *sqe;
	int fds[SHM_MAX_FDS], wake;
	unsigned int n = 0;
	const char *why = NULL;

	if (cqe->res >= 0)
		n = tpu__shm_msg_take_fds(&c->rxm, fds, SHM_MAX_FDS);
	if (c->closed) {
		tpu__shm_close_fds(fds, n);
		tpu__shm_conn_cqe_done(c);
		return;
	}
	if (cqe->res <= 0)
		why = "the connector went away";
	else if (!tpu__shm_hs_ok(&c->hs_in, cqe->res, SHM_HS_HELLO) || n != 2 ||
		 (c->rxm.msg.msg_flags & MSG_CTRUNC))
		why = "not a hello";
	else if (!tpu__shm_is_eventfd(fds[1]))
		why = "the wake descriptor is not an eventfd";
	else
		why = accept_map(c, fds[0], c->hs_in.ring_cap);
	if (why) {
		tpu__shm_close_fds(fds, n);
		accept_drop(c, why);
		tpu__shm_conn_cqe_done(c);
		return;
	}
	close(fds[0]);		/* the mapping keeps the memory */
	c->peer_wake = fds[1];
	c->peer_pid = tpu__shm_sock_peer_pid(c->sock);
	c->hs_out = (struct shm_hs){
		.magic = SHM_HS_MAGIC,
		.version = SHM_HS_VERSION,
		.type = SHM_HS_WELCOME,
	};
	tpu__shm_msg_prepare(&c->txm, &c->hs_out, sizeof(c->hs_out), false);
	wake = tpu__ctx_wake_fd(c->ctx);
	tpu__shm_msg_put_fds(&c->txm, &wake, 1);
	sqe = tpu__shm_conn_sqe(c, on_welcome_sent);
	if (!sqe) {
		accept_drop(c, "out of memory");
	} else {
		io_uring_prep_sendmsg(sqe, c->sock, &c->txm.msg, MSG_NOSIGNAL);
		tpu__ctx_submit(c->ctx);
	}
	tpu__shm_conn_cqe_done(c);
}

static void hs_expired(void *arg, tpu_status st)
{
	struct shm_conn *c = arg;

	/* Cancelled, or the handshake ended as the timer ran out. */
	if (!st && c->hs_timer_on && c->listener) {
		c->hs_timer_on = false;
		accept_drop(c, "no hello in time");
	}
	tpu__shm_conn_cqe_done(c);
}

static void drop_oldest(struct shm_listener *l, const char *why)
{
	struct shm_conn *c = l->pending;

	if (!c)
		return;
	while (c->lnext)
		c = c->lnext;
	accept_drop(c, why);
}

static void accept_start(struct shm_listener *l, int fd)
{
	struct io_uring_sqe *sqe;
	struct shm_conn *c;

	if (l->npending >= l->setup_max) {
		struct shm_conn *old = l->pending;

		while (old->lnext)
			old = old->lnext;
		if (tpu__mono_ns() - old->hs_since < l->grace_ns) {
			tpu__log_debug("shm: listener %s: handshakes all young; refusing a new one",
				       l->name);
			close(fd);
			return;
		}
		accept_drop(old, "too many connections in their handshake");
	}
	c = tpu__shm_conn_new(l->ctx);
	if (!c) {
		close(fd);
		return;
	}
	c->sock = fd;
	c->state = SHM_ACCEPTING;
	c->listener = l;
	c->lnext = l->pending;
	l->pending = c;
	l->npending++;
	c->hs_since = tpu__mono_ns();
	c->hs_timer.fn = hs_expired;
	c->hs_timer.arg = c;
	if (tpu__ctx_timer_start(c->ctx, &c->hs_timer, l->setup_ns)) {
		accept_drop(c, "no timer for its deadline");
		return;
	}
	c->hs_timer_on = true;
	c->inflight++;
	tpu__shm_msg_prepare(&c->rxm, &c->hs_in, sizeof(c->hs_in), true);
	sqe = tpu__shm_conn_sqe(c, on_hello);
	if (!sqe) {
		accept_drop(c, "out of memory");
		return;
	}
	io_uring_prep_recvmsg(sqe, c->sock, &c->rxm.msg, MSG_CMSG_CLOEXEC);
	tpu__ctx_submit(c->ctx);
}

/* ---- listener ------------------------------------------------------------ */

static void listener_maybe_free(struct shm_listener *l)
{
	if (l->closed && !l->accepting && !l->busy && !l->waiting)
		free(l);
}

static void on_accept(void *arg, const struct io_uring_cqe *cqe);

static tpu_status listener_arm(struct shm_listener *l)
{
	struct io_uring_sqe *sqe = tpu__ctx_sqe(l->ctx, on_accept, l);

	if (!sqe)
		return -ENOMEM;
	io_uring_prep_accept(sqe, l->fd, NULL, NULL, SOCK_CLOEXEC);
	l->accept_ud = sqe->user_data;
	l->accepting = true;
	return tpu__ctx_submit(l->ctx);
}

/* Accept errors worth another try at once. */
static bool accept_transient(int err)
{
	return err == -ECONNABORTED || err == -EINTR || err == -EAGAIN;
}

/* Out of descriptors or memory: worth another try later, not at once. */
static bool accept_short(int err)
{
	return err == -EMFILE || err == -ENFILE || err == -ENOBUFS || err == -ENOMEM;
}

/* Accepting ended with @st (0: it did not): stop and tell the user, once. */
static void listener_failed(struct shm_listener *l, tpu_status st)
{
	if (!st || l->stopped)
		return;
	tpu__log_debug("shm: listener %s: accepting failed: %s", l->name, tpu_strerror(st));
	l->stopped = true;
	l->fn(l->arg, st, NULL);
}

static void accept_retry(void *arg, tpu_status status)
{
	struct shm_listener *l = arg;
	tpu_status st = 0;

	(void)status;
	l->waiting = false;
	l->busy++;
	if (!l->stopped)
		st = listener_arm(l);
	listener_failed(l, st);
	l->busy--;
	listener_maybe_free(l);
}

static void on_accept(void *arg, const struct io_uring_cqe *cqe)
{
	struct shm_listener *l = arg;
	tpu_status st = 0;

	l->accepting = false;
	if (l->stopped) {
		if (cqe->res >= 0)
			close(cqe->res);
		listener_maybe_free(l);
		return;
	}
	l->busy++;
	if (cqe->res >= 0) {
		accept_start(l, cqe->res);
	} else if (accept_short(cqe->res)) {
		tpu__log_debug("shm: listener %s: accept: %s; waiting", l->name,
			       tpu_strerror(cqe->res));
		drop_oldest(l, "out of descriptors");
		l->retry.fn = accept_retry;
		l->retry.arg = l;
		if (tpu__ctx_timer_start(l->ctx, &l->retry, SHM_ACCEPT_RETRY_NS))
			st = -ENOMEM;
		else
			l->waiting = true;
	} else if (!accept_transient(cqe->res)) {
		st = cqe->res;
	}
	if (!st && !l->stopped && !l->waiting)
		st = listener_arm(l);
	listener_failed(l, st);
	l->busy--;
	listener_maybe_free(l);
}

static void on_cancelled(void *arg, const struct io_uring_cqe *cqe)
{
	(void)arg;
	(void)cqe;
}

static const char *shm_listener_addr(const struct tpu__xlistener *base)
{
	const struct shm_listener *l = tpu__container_of(base, const struct shm_listener, base);

	return l->name;
}

static void shm_listener_close(struct tpu__xlistener *base)
{
	struct shm_listener *l = tpu__container_of(base, struct shm_listener, base);

	if (l->closed)
		return;
	l->closed = true;
	l->stopped = true;
	if (l->accepting) {
		/* By user_data, not by descriptor: the socket is closed right below. */
		struct io_uring_sqe *sqe = tpu__ctx_sqe(l->ctx, on_cancelled, NULL);

		if (sqe) {
			io_uring_prep_cancel64(sqe, l->accept_ud, 0);
			tpu__ctx_submit(l->ctx);
		}
	}
	if (l->waiting)
		tpu__ctx_timer_cancel(l->ctx, &l->retry);
	/* The name is free once the cancelled ACCEPT let go of the socket too. */
	tpu__shm_close_fd(&l->fd);
	l->busy++;
	while (l->pending) {
		struct shm_conn *c = l->pending;

		listener_unlink(l, c);
		tpu__shm_close(&c->base);
	}
	l->busy--;
	tpu__log_debug("shm: listener %s closed", l->name);
	listener_maybe_free(l);
}

tpu_status tpu__shm_listen(struct tpu_context *ctx, const char *addr, tpu__accept_fn fn,
			     void *arg, struct tpu__xlistener **out)
{
	struct sockaddr_un sa;
	struct shm_listener *l;
	socklen_t len;
	tpu_status st;

	if (!ctx || !fn || !out)
		return -EINVAL;
	*out = NULL;
	st = tpu__shm_sockaddr(addr, &sa, &len);
	if (st)
		return st;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->base.ops = &shm_listener_ops;
	l->base.xport = &tpu__xport_shm;
	l->ctx = ctx;
	l->fn = fn;
	l->arg = arg;
	l->setup_max = tpu__setup_max();
	l->setup_ns = tpu__setup_timeout_ns();
	l->grace_ns = tpu__setup_grace_ns(l->setup_ns);
	strcpy(l->name, addr);
	l->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l->fd < 0 || bind(l->fd, (struct sockaddr *)&sa, len) || listen(l->fd, SHM_BACKLOG)) {
		st = tpu__errno();
		tpu__shm_close_fd(&l->fd);
		free(l);
		return st;
	}
	st = listener_arm(l);
	if (st) {
		tpu__shm_close_fd(&l->fd);
		free(l);
		return st;
	}
	tpu__log_debug("shm: listening on %s", addr);
	*out = &l->base;
	return 0;
}


static const struct tpu__xlistener_ops shm_listener_ops = {
	.addr = shm_listener_addr,
	.close = shm_listener_close,
};
