// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The shm transport: two byte rings (shm_ring.h) in a memfd that both
 * processes map, one per direction, polled by each side's context thread.
 *
 * Bootstrap, all through the context's io_uring so that its thread never
 * blocks: the connector creates the memfd (two rings of SHM_RING_CAP
 * bytes, sealed against shrinking so that the peer cannot make us fault),
 * connects to the abstract Unix socket "\0tensorpipe-shm/NAME" and sends a
 * HELLO with the memfd and its context's wake eventfd (SCM_RIGHTS); the
 * acceptor checks both, maps the memfd and answers WELCOME with its own
 * wake eventfd.  Either side drops a peer that says anything else.
 * NAME is 1 to 92 characters of [A-Za-z0-9._-]: all that fits in sun_path
 * after the NUL and the prefix.  A peer that connects and never says
 * HELLO holds a socket until the listener closes (no handshake timeout).
 *
 * Afterwards the socket stays open for two things:
 *   - a POLL_ADD(POLLRDHUP) always armed on it sees the peer close or die
 *     (the kernel closes its socket), even when it never wrote anything;
 *   - descriptors (send_fd/recv_fd) travel over it, one byte and one
 *     SCM_RIGHTS descriptor per sendmsg.
 *
 * Order of descriptors and bytes: writes and send_fds of a connection form
 * one queue, handled strictly in order: a send_fd starts once every earlier
 * write was copied into the ring, and later writes wait until the kernel
 * took the descriptor.  Likewise reads and recv_fds form one queue: a
 * recv_fd starts once every earlier read completed.  Two ends that
 * interleave their calls the same way thus see each descriptor at the same
 * place in the byte stream.  Every callback of a queue runs in queue order.
 *
 * Data path: ops wait in their queue; the poller (one per connection)
 * copies into and out of the rings without any system call while both
 * threads are awake.  A write with nothing queued ahead that fits goes
 * into the ring inside ->write (one move of the head); its op waits in
 * the queue only for the poller to call back.  Before the context thread sleeps, ->arm raises
 * "reader asleep" (a read is pending) and "writer waiting" (a write is
 * pending on a full ring) in the rings; the peer wakes us through our
 * eventfd when it sees them after publishing bytes or space.
 *
 * Reading in place (->wait, ->peek, ->take; the pipe's reader uses them):
 * a wait is an op of the read queue that copies nothing and calls back
 * once enough bytes are in; with the queue empty its callback (or any
 * code of the context thread) copies bytes out of the ring without moving
 * its tail, and gives them all back with one take.  The tail is the line
 * the writer reads to find space: a frame and its inline bytes published
 * once instead of once per read.  A take outside a poll leaves the
 * writer's wake-up check (rx_took) to the next poll or the next ->arm.
 *
 * When the peer goes away the bytes it left in the ring are still read;
 * a read that needs more fails with -ECONNRESET, and writes with -EPIPE.
 *
 * Lifetime: a connection is freed once it was closed, every SQE it
 * submitted came back, its deferred task ran and no function of this file
 * that may call back is on the stack (busy); so a callback may close its
 * own connection, or another one in the middle of a poll pass.
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "shm.h"

static const struct tpu__conn_ops shm_conn_ops;

/* ---- names ----------------------------------------------------------- */

static bool name_char_ok(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       ch == '.' || ch == '_' || ch == '-';
}

/* "NAME" to "\0tensorpipe-shm/NAME"; -EINVAL unless 1..SHM_NAME_MAX of [A-Za-z0-9._-]. */
tpu_status tpu__shm_sockaddr(const char *name, struct sockaddr_un *sa, socklen_t *len)
{
	size_t n, i;

	if (!name)
		return -EINVAL;
	n = strnlen(name, SHM_NAME_MAX + 1);
	if (n < 1 || n > SHM_NAME_MAX)
		return -EINVAL;
	for (i = 0; i < n; i++)
		if (!name_char_ok(name[i]))
			return -EINVAL;
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	memcpy(sa->sun_path + 1, SHM_PREFIX, SHM_PREFIX_LEN);
	memcpy(sa->sun_path + 1 + SHM_PREFIX_LEN, name, n);
	*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + SHM_PREFIX_LEN + n);
	return 0;
}

/* ---- small helpers ---------------------------------------------------- */

void tpu__shm_close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static void wake_peer(struct shm_conn *c)
{
	uint64_t one = 1;

	while (write(c->peer_wake, &one, sizeof(one)) < 0 && errno == EINTR)
		;
}

/* Only an eventfd may be written without a chance of blocking the context thread. */
bool tpu__shm_is_eventfd(int fd)
{
	char path[64], link[64];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, link, sizeof(link) - 1);
	if (n < 0) {
		/* No /proc to ask: trust the peer, which shares our kernel and user. */
		tpu__log_debug("shm: cannot check the peer's wake descriptor: %s",
			       tpu_strerror(tpu__errno()));
		return true;
	}
	link[n] = '\0';
	return strcmp(link, "anon_inode:[eventfd]") == 0;
}

void tpu__shm_msg_prepare(struct shm_msg *m, void *data, size_t len, bool control)
{
	memset(m, 0, sizeof(*m));
	m->iov.iov_base = data;
	m->iov.iov_len = len;
	m->msg.msg_iov = &m->iov;
	m->msg.msg_iovlen = 1;
	if (control) {
		m->msg.msg_control = m->cm.buf;
		m->msg.msg_controllen = sizeof(m->cm.buf);
	}
}

/* Attach @n descriptors to an outgoing message. */
void tpu__shm_msg_put_fds(struct shm_msg *m, const int *fds, unsigned int n)
{
	struct cmsghdr *ch;

	m->msg.msg_control = m->cm.buf;
	m->msg.msg_controllen = CMSG_SPACE(n * sizeof(int));
	ch = CMSG_FIRSTHDR(&m->msg);
	ch->cmsg_level = SOL_SOCKET;
	ch->cmsg_type = SCM_RIGHTS;
	ch->cmsg_len = CMSG_LEN(n * sizeof(int));
	memcpy(CMSG_DATA(ch), fds, n * sizeof(int));
}

/* The descriptors a message brought (all of them: the caller closes what it does not keep). */
unsigned int tpu__shm_msg_take_fds(struct shm_msg *m, int *fds, unsigned int max)
{
	struct cmsghdr *ch;
	unsigned int n = 0;

	for (ch = CMSG_FIRSTHDR(&m->msg); ch; ch = CMSG_NXTHDR(&m->msg, ch)) {
		size_t k, cnt;

		if (ch->cmsg_level != SOL_SOCKET || ch->cmsg_type != SCM_RIGHTS ||
		    ch->cmsg_len < CMSG_LEN(0))
			continue;
		cnt = (ch->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (k = 0; k < cnt; k++) {
			int fd;

			memcpy(&fd, CMSG_DATA(ch) + k * sizeof(int), sizeof(int));
			if (n < max)
				fds[n++] = fd;
			else
				close(fd);
		}
	}
	return n;
}

void tpu__shm_close_fds(int *fds, unsigned int n)
{
	while (n)
		close(fds[--n]);
}

/* ---- connection lifetime ---------------------------------------------- */

void tpu__shm_conn_free(struct shm_conn *c)
{
	tpu__log_debug("shm: connection %p freed", (void *)c);
	if (c->map)
		munmap(c->map, c->map_len);
	tpu__shm_close_fd(&c->sock);
	tpu__shm_close_fd(&c->memfd);
	tpu__shm_close_fd(&c->peer_wake);
	tpu__shm_close_fd(&c->tx_fd);
	while (c->free_ops) {
		struct shm_op *op = c->free_ops;

		c->free_ops = op->next;
		free(op);
	}
	free(c);
}

static void conn_maybe_free(struct shm_conn *c)
{
	if (c->closed && !c->inflight && !c->busy && !c->task_queued)
		tpu__shm_conn_free(c);
}

/* The end of a CQE handler: the last use of c in it. */
void tpu__shm_conn_cqe_done(struct shm_conn *c)
{
	c->inflight--;
	conn_maybe_free(c);
}

static bool conn_progress(struct shm_conn *c);

static void conn_task(struct tpu__task *t)
{
	struct shm_conn *c = tpu__container_of(t, struct shm_conn, task);

	c->busy++;
	c->task_queued = false;
	conn_progress(c);
	c->busy--;
	conn_maybe_free(c);
}

/* Make progress soon from a task: for states the poller does not cover. */
static void conn_schedule(struct shm_conn *c)
{
	if (c->task_queued || c->closed)
		return;
	c->task_queued = true;
	c->task.fn = conn_task;
	tpu__ctx_defer(c->ctx, &c->task);
}

/* An SQE whose completion calls fn(c, cqe); counted until its last CQE. */
struct io_uring_sqe *tpu__shm_conn_sqe(struct shm_conn *c, tpu__cqe_fn fn)
{
	struct io_uring_sqe *sqe = tpu__ctx_sqe(c->ctx, fn, c);

	if (sqe)
		c->inflight++;
	return sqe;
}

/*
 * Fail the connection for good: every queued and later op gets @err (reads
 * and writes alike), and the peer sees EOF.
 */
void tpu__shm_conn_fail(struct shm_conn *c, tpu_status err)
{
	if (!c->rerr)
		c->rerr = err;
	if (!c->werr)
		c->werr = err;
	if (c->state != SHM_OPEN)
		c->state = SHM_DEAD;
	if (c->sock >= 0)
		shutdown(c->sock, SHUT_RDWR);
	conn_schedule(c);
}

static struct shm_op *op_pop(struct shm_op **head, struct shm_op ***tail)
{
	struct shm_op *op = *head;

	*head = op->next;
	if (!*head)
		*tail = head;
	return op;
}

/* An op back to the connection's cache, or freed. */
static void op_put(struct shm_conn *c, struct shm_op *op)
{
	if (op->cap_iov == SHM_OP_CACHED_IOV && c->nfree_ops < SHM_OP_CACHE) {
		op->next = c->free_ops;
		c->free_ops = op;
		c->nfree_ops++;
		return;
	}
	free(op);
}

static void op_finish(struct shm_conn *c, struct shm_op *op, tpu_status st)
{
	tpu__io_cb cb = op->cb;
	void *arg = op->arg;

	if (op->kind == OP_SEND_FD && op->fd >= 0)
		close(op->fd);
	op_put(c, op);
	cb(arg, st);
}

/* Fail what the errors say must fail; c->busy is held. */
static bool conn_fail_pending(struct shm_conn *c)
{
	bool any = false;

	while (c->werr && c->tx_head) {
		op_finish(c, op_pop(&c->tx_head, &c->tx_tail), c->closed ? TPU_E_CLOSED : c->werr);
		any = true;
	}
	while (c->rerr && c->rx_head) {
		op_finish(c, op_pop(&c->rx_head, &c->rx_tail), c->closed ? TPU_E_CLOSED : c->rerr);
		any = true;
	}
	return any;
}

/* ---- descriptors ------------------------------------------------------ */

static void on_fd_sent(void *arg, const struct io_uring_cqe *cqe)
{
	struct shm_conn *c = arg;

	c->tx_busy = false;
	tpu__shm_close_fd(&c->tx_fd);
	if (!c->closed && !c->werr) {
		if (cqe->res == 1) {
			c->busy++;
			op_finish(c, op_pop(&c->tx_head, &c->tx_tail), 0);
			c->busy--;
		} else if (cqe->res == -EPIPE || cqe->res == -ECONNRESET || cqe->res >= 0) {
			c->werr = -EPIPE;
		} else {
			tpu__shm_conn_fail(c, cqe->res);
		}
		/* The writes behind it: the poller goes on with them, errors need the task. */
		conn_schedule(c);
	}
	tpu__shm_conn_cqe_done(c);
}

static void start_send_fd(struct shm_conn *c, struct shm_op *op)
{
	struct io_uring_sqe *sqe;

	tpu__shm_msg_prepare(&c->txm, &c->txm.byte, 1, false);
	c->txm.byte = SHM_FD_TAG;
	tpu__shm_msg_put_fds(&c->txm, &op->fd, 1);
	sqe = tpu__shm_conn_sqe(c, on_fd_sent);
	if (!sqe) {
		tpu__shm_conn_fail(c, -ENOMEM);
		return;
	}
	io_uring_prep_sendmsg(sqe, c->sock, &c->txm.msg, MSG_NOSIGNAL);
	/* The kernel resolves the descriptor when it runs the SQE: keep it open till then. */
	c->tx_fd = op->fd;
	op->fd = -1;
	c->tx_busy = true;
	tpu__ctx_submit(c->ctx);
}

static void on_fd_received(void *arg, const struct io_uring_cqe *cqe)
{
	struct shm_conn *c = arg;
	int fds[SHM_MAX_FDS];
	unsigned int n = 0;

	c->rx_busy = false;
	if (cqe->res >= 0)
		n = tpu__shm_msg_take_fds(&c->rxm, fds, SHM_MAX_FDS);
	if (c->closed || c->rerr) {
		tpu__shm_close_fds(fds, n);
	} else if (cqe->res == 0 || cqe->res == -ECONNRESET) {
		c->rerr = -ECONNRESET;
		conn_schedule(c);
	} else if (cqe->res < 0) {
		tpu__shm_conn_fail(c, cqe->res);
	} else if (cqe->res != 1 || c->rxm.byte != SHM_FD_TAG || n != 1 ||
		   (c->rxm.msg.msg_flags & MSG_CTRUNC)) {
		tpu__log_debug("shm: a descriptor message that makes no sense (%d bytes, %u fds)",
			       cqe->res, n);
		tpu__shm_close_fds(fds, n);
		tpu__shm_conn_fail(c, -EPROTO);
	} else {
		struct shm_op *op = op_pop(&c->rx_head, &c->rx_tail);

		*op->fdp = fds[0];
		c->busy++;
		op_finish(c, op, 0);
		c->busy--;
		conn_schedule(c);
	}
	tpu__shm_conn_cqe_done(c);
}

static void start_recv_fd(struct shm_conn *c)
{
	struct io_uring_sqe *sqe;

	tpu__shm_msg_prepare(&c->rxm, &c->rxm.byte, 1, true);
	sqe = tpu__shm_conn_sqe(c, on_fd_received);
	if (!sqe) {
		tpu__shm_conn_fail(c, -ENOMEM);
		return;
	}
	io_uring_prep_recvmsg(sqe, c->sock, &c->rxm.msg, MSG_CMSG_CLOEXEC);
	c->rx_busy = true;
	tpu__ctx_submit(c->ctx);
}

/* ---- data path ---------------------------------------------------------- */

/*
 * The peer's sleep flags are looked at once per pass of conn_progress, not
 * after every copy: each look costs a full fence, and a round trip's pass
 * copies up to four times (header, body, payload in; the reply out).  The
 * look still comes after the last publish and before this thread can sleep,
 * which is all the sleep protocol (shm_ring.h) asks.
 */
static bool tx_progress(struct shm_conn *c, bool *published)
{
	bool any = false;
	struct shm_op *op;

	while (!c->closed && !c->werr && (op = c->tx_head)) {
		if (op->kind == OP_SEND_FD) {
			if (!c->tx_busy)
				start_send_fd(c, op);
			break;
		}
		if (op->done < op->total) {
			size_t n = tpu__shm_ring_write(&c->tx, op->iov, op->niov, op->done);

			if (n) {
				op->done += n;
				any = true;
				*published = true;
			}
			if (op->done < op->total) {
				if (tpu__shm_ring_broken(&c->tx))
					tpu__shm_conn_fail(c, -EPROTO);
				break;
			}
		}
		op_finish(c, op_pop(&c->tx_head, &c->tx_tail), 0);
		any = true;
	}
	return any;
}

static bool rx_progress(struct shm_conn *c, bool *freed)
{
	bool any = false;
	struct shm_op *op;

	while (!c->closed && !c->rerr && (op = c->rx_head)) {
		size_t n;

		if (op->kind == OP_RECV_FD) {
			if (!c->rx_busy)
				start_recv_fd(c);
			break;
		}
		if (op->kind == OP_WAIT) {
			/* Its callback reads in place (shm_peek, shm_take): nothing is copied here. */
			if (tpu__shm_ring_readable(&c->rx) < op->total) {
				if (tpu__shm_ring_broken(&c->rx))
					tpu__shm_conn_fail(c, -EPROTO);
				else if (c->peer_gone &&
					 tpu__shm_ring_readable(&c->rx) < op->total)
					c->rerr = -ECONNRESET;	/* what is left will not do */
				break;
			}
			op_finish(c, op_pop(&c->rx_head, &c->rx_tail), 0);
			any = true;
			continue;
		}
		n = op->total >= TPU__COPY_STREAM_MIN ?
		    tpu__shm_ring_read_stream(&c->rx, (char *)op->buf + op->done,
					      op->total - op->done) :
		    tpu__shm_ring_read(&c->rx, (char *)op->buf + op->done, op->total - op->done);
		if (n) {
			op->done += n;
			any = true;
			*freed = true;
		}
		if (op->done < op->total) {
			if (tpu__shm_ring_broken(&c->rx))
				tpu__shm_conn_fail(c, -EPROTO);
			else if (c->peer_gone && !tpu__shm_ring_readable(&c->rx))
				c->rerr = -ECONNRESET;	/* the peer left no more bytes */
			break;
		}
		op_finish(c, op_pop(&c->rx_head, &c->rx_tail), 0);
		any = true;
	}
	return any;
}

static bool conn_progress(struct shm_conn *c)
{
	bool any = false;

	if (c->closed)
		return false;
	c->busy++;
	if (c->state == SHM_OPEN) {
		bool published = false, freed = false, wake;
		unsigned int pass = 0;
		bool rx;

		/*
		 * A read's callback often writes the answer at once (a reply,
		 * the next frame's read): take it in this pass, not the next
		 * round of the context thread.  Bounded, so that one busy
		 * connection does not starve the context's other work.
		 */
		do {
			any |= tx_progress(c, &published);
			rx = rx_progress(c, &freed);
			any |= rx;
		} while (rx && ++pass < SHM_PROGRESS_PASSES && !c->closed && c->tx_head);
		/* A callback may have closed c: its rings are unmapped then. */
		if (!c->closed) {
			wake = (published || c->tx_put) && tpu__shm_ring_reader_needs_wake(&c->tx);
			c->tx_put = false;
			/* Both flags are taken: each is one sleep to end, one write ends both. */
			if ((freed || c->rx_took) && tpu__shm_ring_writer_needs_wake(&c->rx))
				wake = true;
			c->rx_took = false;
			if (wake)
				wake_peer(c);
		}
	}
	if (!c->closed)
		any |= conn_fail_pending(c);
	c->busy--;
	return any;
}

static bool conn_poll(struct tpu__poller *p)
{
	struct shm_conn *c = tpu__container_of(p, struct shm_conn, poller);
	bool any = conn_progress(c);

	conn_maybe_free(c);
	return any;
}

static bool conn_arm(struct tpu__poller *p)
{
	struct shm_conn *c = tpu__container_of(p, struct shm_conn, poller);
	bool pending = false;

	if (c->closed || c->state != SHM_OPEN)
		return false;
	/* Space a take gave back, bytes a write put in, outside a poll (from a task). */
	if (c->rx_took || c->tx_put) {
		bool wake = c->tx_put && tpu__shm_ring_reader_needs_wake(&c->tx);

		if (c->rx_took && tpu__shm_ring_writer_needs_wake(&c->rx))
			wake = true;
		c->rx_took = false;
		c->tx_put = false;
		if (wake)
			wake_peer(c);
	}
	if (!c->rerr && c->rx_head &&
	    (c->rx_head->kind == OP_READ || c->rx_head->kind == OP_WAIT))
		pending |= tpu__shm_ring_reader_arm(&c->rx);
	if (!c->werr && c->tx_head && c->tx_head->kind == OP_WRITE)
		pending |= tpu__shm_ring_writer_arm(&c->tx);
	return pending;
}

static void conn_disarm(struct tpu__poller *p)
{
	struct shm_conn *c = tpu__container_of(p, struct shm_conn, poller);

	if (c->closed || c->state != SHM_OPEN)
		return;
	tpu__shm_ring_reader_disarm(&c->rx);
	tpu__shm_ring_writer_disarm(&c->tx);
}

/* The peer's socket closed (it closed the connection, or its process died). */
static void on_peer_hup(void *arg, const struct io_uring_cqe *cqe)
{
	struct shm_conn *c = arg;

	if (!c->closed && cqe->res != -ECANCELED) {
		tpu__log_debug("shm: connection %p: the peer is gone (%d)", (void *)c, cqe->res);
		c->peer_gone = true;
		if (!c->werr)
			c->werr = -EPIPE;
		/* Reads drain what the peer left in the ring, then fail. */
		conn_schedule(c);
		if (c->watch_cb) {
			tpu__io_cb cb = c->watch_cb;

			c->watch_cb = NULL;
			cb(c->watch_arg, -ECONNRESET);
		}
	}
	tpu__shm_conn_cqe_done(c);
}

void tpu__shm_conn_open(struct shm_conn *c)
{
	struct io_uring_sqe *sqe;

	c->state = SHM_OPEN;
	c->poller.peer_pid = c->peer_pid;
	tpu__ctx_poller_add(c->ctx, &c->poller);
	c->polling = true;
	sqe = tpu__shm_conn_sqe(c, on_peer_hup);
	if (!sqe) {
		tpu__shm_conn_fail(c, -ENOMEM);
		return;
	}
	io_uring_prep_poll_add(sqe, c->sock, POLLRDHUP);
	tpu__ctx_submit(c->ctx);
	/* Ops queued while connecting: the poller takes them from here. */
	conn_schedule(c);
}

struct shm_conn *tpu__shm_conn_new(struct tpu_context *ctx)
{
	struct shm_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->base.ops = &shm_conn_ops;
	c->base.xport = &tpu__xport_shm;
	c->ctx = ctx;
	c->sock = c->memfd = c->peer_wake = c->tx_fd = -1;
	c->tx_tail = &c->tx_head;
	c->rx_tail = &c->rx_head;
	c->poller.poll = conn_poll;
	c->poller.arm = conn_arm;
	c->poller.disarm = conn_disarm;
	return c;
}

/* Linux 6.5; the value of asm-generic/socket.h, which these architectures use. */
#if !defined(SO_PEERPIDFD) && (defined(__x86_64__) || defined(__aarch64__) || \
			       defined(__i386__) || defined(__riscv))
#define SO_PEERPIDFD 77
#endif

/*
 * SO_PEERCRED names the process that called connect() (seen by the
 * listener's side) or listen() (seen by the connector's side); that process
 * may have handed the socket on and exited, and its pid gone to another
 * process of our user.  SO_PEERPIDFD refers to the same process, not to its
 * number: while that process is alive (a null signal reaches it) its pid
 * names it and nothing else.  Gone: 0, unproven.  Kernels before 6.5 lack
 * it, and then the pid is taken as SO_PEERCRED says (Documentation/
 * security.rst says what that leaves open).
 */
int tpu__shm_sock_peer_pid(int sock)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	int pid;

	if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) || len != sizeof(cred))
		return 0;
	pid = cred.pid > 0 ? cred.pid : 0;
#if defined(SO_PEERPIDFD) && defined(SYS_pidfd_send_signal)
	{
		int pidfd = -1;

		len = sizeof(pidfd);
		if (pid && !getsockopt(sock, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) &&
		    len == sizeof(pidfd) && pidfd >= 0) {
			if (syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) && errno == ESRCH) {
				tpu__log_debug("shm: the peer's process %d is gone: its pid is "
					       "unproven", pid);
				pid = 0;
			}
			close(pidfd);
		}
	}
#endif
	return pid;
}

bool tpu__shm_hs_ok(const struct shm_hs *hs, int res, uint16_t type)
{
	return res == (int)sizeof(*hs) && hs->magic == SHM_HS_MAGIC &&
	       hs->version == SHM_HS_VERSION && hs->type == type && !hs->rsvd;
}

/* The rings of a mapping: [0] connector to acceptor, [1] back. */
tpu_status tpu__shm_map_rings(struct shm_conn *c, uint64_t cap, bool connector)
{
	size_t one = tpu__shm_ring_size(cap);
	uint8_t *base = c->map;
	tpu_status st;

	st = tpu__shm_ring_attach(&c->tx, base + (connector ? 0 : one), cap, true);
	if (!st)
		st = tpu__shm_ring_attach(&c->rx, base + (connector ? one : 0), cap, false);
	return st;
}

/* ---- connection ops -------------------------------------------------------- */

/* A new op with room for @niov iovecs: from the cache when it fits. */
static struct shm_op *op_new(struct shm_conn *c, enum shm_op_kind kind, unsigned int niov,
			     tpu__io_cb cb, void *arg)
{
	unsigned int cap = niov > SHM_OP_CACHED_IOV ? niov : SHM_OP_CACHED_IOV;
	struct shm_op *op = c->free_ops;

	if (op && niov <= SHM_OP_CACHED_IOV) {
		c->free_ops = op->next;
		c->nfree_ops--;
	} else {
		op = malloc(sizeof(*op) + cap * sizeof(struct iovec));
		if (!op)
			return NULL;
	}
	/* Every field in one go (the ones not named zeroed); iov[] is filled before use. */
	*op = (struct shm_op){ .kind = kind, .cb = cb, .arg = arg, .fd = -1, .cap_iov = cap };
	return op;
}

static void queue_tx(struct shm_conn *c, struct shm_op *op)
{
	*c->tx_tail = op;
	c->tx_tail = &op->next;
	if (c->werr)
		conn_schedule(c);
}

static void queue_rx(struct shm_conn *c, struct shm_op *op)
{
	*c->rx_tail = op;
	c->rx_tail = &op->next;
	if (c->rerr || c->peer_gone)
		conn_schedule(c);
}

static tpu_status shm_write(struct tpu__conn *base, const struct iovec *iov, unsigned int n,
			    tpu__io_cb cb, void *arg)
{
	struct shm_conn *c = tpu__container_of(base, struct shm_conn, base);
	struct shm_op *op;
	size_t total = 0;
	unsigned int i;

	if (!cb || n > TPU__XPORT_IOV_MAX || (n && !iov))
		return -EINVAL;
	for (i = 0; i < n; i++) {
		if (iov[i].iov_len > SIZE_MAX - total || (iov[i].iov_len && !iov[i].iov_base))
			return -EINVAL;
		total += iov[i].iov_len;
	}
	/*
	 * Nothing queued ahead and room for it all: into the ring now, with
	 * one move of the head, so that the reader sees the bytes without
	 * waiting for this side's next poll.  The op is queued all the same,
	 * copied already and without the iovecs, for its callback: the poller
	 * runs it, never this call.  The reader's wake-up check waits for the
	 * end of the poll pass (or the arm before this thread sleeps), as
	 * after a take.  Otherwise the poller copies the bytes as they fit.
	 */
	op = op_new(c, OP_WRITE, n, cb, arg);
	if (!op)
		return -ENOMEM;
	op->total = total;
	if (!c->tx_head && !c->closed && !c->werr && c->state == SHM_OPEN &&
	    tpu__shm_ring_write_all(&c->tx, iov, n, total)) {
		op->done = total;
		c->tx_put = true;
	} else {
		if (n)	/* iov may be NULL then, which memcpy may not be given */
			memcpy(op->iov, iov, n * sizeof(*iov));
		op->niov = n;
	}
	queue_tx(c, op);
	return 0;
}

static tpu_status shm_read(struct tpu__conn *base, void *buf, size_t len, tpu__io_cb cb,
			   void *arg)
{
	struct shm_conn *c = tpu__container_of(base, struct shm_conn, base);
	struct shm_op *op;

	if (!cb || !buf || !len)
		return -EINVAL;
	op = op_new(c, OP_READ, 0, cb, arg);
	if (!op)
		return -ENOMEM;
	op->buf = buf;
	op->total = len;
	queue_rx(c, op);
	return 0;
}

static tpu_status shm_wait(struct tpu__conn *base, size_t min, tpu__io_cb cb, void *arg)
{
	struct shm_conn *c = tpu__container_of(base, struct shm_conn, base);
	struct shm_op *op;

	if (!cb || !min || min > TPU__XPORT_WAIT_MAX)
		return -EINVAL;
	op = op_new(c, OP_WAIT, 0, cb, arg);
	if (!op)
		return -ENOMEM;
	op->total = min;
	queue_rx(c, op);
	return 0;
}

/* Reading in place: only with nothing queued ahead, on an open connection. */
static bool rx_in_place(struct shm_conn *c)
{
	return !c->rx_head && !c->closed && !c->rerr && c->state == SHM_OPEN;
}

static bool shm_peek(struct tpu__conn *base, size_t skip, void *buf, size_t len)
{
	struct shm_conn *c = tpu__container_of(base, struct shm_conn, base);

	return rx_in_place(c) && tpu__shm_ring_peek(&c->rx, skip, buf, len);
}

static bool shm_take(struct tpu__conn *base, size_t skip, void *buf, size_t len)
{
	struct shm_conn *c = tpu__container_of(base, struct shm_conn, base);

	if (!rx_in_place(c) || !tpu__shm_ring_take(&c->rx, skip, buf, len))
		return false;
	/* The writer's wake-up waits for the end of this poll, or the arm before a sleep. */
	c->rx_took = true;
	return true;
}

void tpu__shm_tx_counts(struct tpu__conn *base, uint64_t *head_moves, uint64_t *tail_loads)
{
	struct shm_conn *c = tpu__container_of(base, struct shm_conn, base);

	*head_moves = *tail_loads = 0;
	if (base->xport != &tpu__xport_shm || c->state != SHM_OPEN)
		return;
	*head_moves = tpu__shm_ring_head_moves(&c->tx);
	*tail_loads = tpu__shm_ring_tail_loads(&c->tx);
}

uint64_t tpu__shm_rx_moves(struct tpu__conn *base)
{
	struct shm_conn *c = tpu__container_of(base, struct shm_conn, base);

	if (base->xport != &tpu__xport_shm || c->state != SHM_OPEN)
		return 0;
	return tpu__shm_ring_tail_moves(&c->rx);
}

static tpu_status shm_send_fd(struct tpu__conn *base, int fd, tpu__io_cb cb, void *arg)
{
	struct shm_conn *c = tpu__container_of(base, struct shm_conn, base);
	struct shm_op *op;
	tpu_status st;

	if (!cb || fd < 0)
		return -EINVAL;
	op = op_new(c, OP_SEND_FD, 0, cb, arg);
	if (!op)
		return -ENOMEM;
	op->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (op->fd < 0) {
		st = tpu__errno();
		free(op);
		return st;
	}
	queue_tx(c, op);
	return 0;
}

static tpu_status shm_recv_fd(struct tpu__conn *base, int *fd, tpu__io_cb cb, void *arg)
{
	struct shm_conn *c = tpu__container_of(base, struct shm_conn, base);
	struct shm_op *op;

	if (!cb || !fd)
		return -EINVAL;
	op = op_new(c, OP_RECV_FD, 0, cb, arg);
	if (!op)
		return -ENOMEM;
	op->fdp = fd;
	queue_rx(c, op);
	return 0;
}

static int shm_peer_pid(struct tpu__conn *base)
{
	return tpu__container_of(base, struct shm_conn, base)->peer_pid;
}

static void on_cancelled_conn(void *arg, const struct io_uring_cqe *cqe)
{
	(void)cqe;
	tpu__shm_conn_cqe_done(arg);
}

static void shm_watch(struct tpu__conn *base, tpu__io_cb cb, void *arg)
{
	struct shm_conn *c = tpu__container_of(base, struct shm_conn, base);

	c->watch_cb = cb;
	c->watch_arg = arg;
}

void tpu__shm_close(struct tpu__conn *base)
{
	struct shm_conn *c = tpu__container_of(base, struct shm_conn, base);

	c->watch_cb = NULL;
	if (c->closed)
		return;
	tpu__log_debug("shm: connection %p closed", (void *)c);
	c->closed = true;
	c->busy++;
	if (c->polling) {
		tpu__ctx_poller_del(c->ctx, &c->poller);
		c->polling = false;
	}
	if (c->sock >= 0) {
		/* The peer sees EOF now; our own requests on the socket end too. */
		shutdown(c->sock, SHUT_RDWR);
		if (c->inflight) {
			/* A CONNECT waiting for a full backlog does not end with shutdown. */
			struct io_uring_sqe *sqe = tpu__shm_conn_sqe(c, on_cancelled_conn);

			if (sqe) {
				io_uring_prep_cancel_fd(sqe, c->sock, IORING_ASYNC_CANCEL_ALL);
				tpu__ctx_submit(c->ctx);
			}
		}
	}
	if (c->map) {
		munmap(c->map, c->map_len);
		c->map = NULL;
	}
	tpu__shm_close_fd(&c->peer_wake);
	c->rerr = c->werr = TPU_E_CLOSED;
	while (c->tx_head)
		op_finish(c, op_pop(&c->tx_head, &c->tx_tail), TPU_E_CLOSED);
	while (c->rx_head)
		op_finish(c, op_pop(&c->rx_head, &c->rx_tail), TPU_E_CLOSED);
	c->busy--;
	conn_maybe_free(c);
}

static const struct tpu__conn_ops shm_conn_ops = {
	.write = shm_write,
	.read = shm_read,
	.wait = shm_wait,
	.peek = shm_peek,
	.take = shm_take,
	.send_fd = shm_send_fd,
	.recv_fd = shm_recv_fd,
	.peer_pid = shm_peer_pid,
	.watch = shm_watch,
	.close = tpu__shm_close,
};


/* ---- the transport --------------------------------------------------------- */

/* Same boot and same network namespace: the abstract socket is reachable. */
static tpu_status shm_compat_descriptor(char *buf, size_t size)
{
	char boot[64];
	unsigned long ino;
	tpu_status st;
	int n;

	if (!buf)
		return -EINVAL;
	st = tpu__boot_id(boot, sizeof(boot));
	if (st)
		return st;
	ino = tpu__ns_inode("net");
	if (!ino)
		return -ENOENT;
	n = snprintf(buf, size, "shm:%s:%lu", boot, ino);
	if (n < 0 || (size_t)n >= size)
		return -ENOSPC;
	return 0;
}

const struct tpu__xport tpu__xport_shm = {
	.name = "shm",
	.priority = 200,
	.passes_fds = true,
	.proves_peer = true,
	.compat_descriptor = shm_compat_descriptor,
	.listen = tpu__shm_listen,
	.connect = tpu__shm_connect,
};
