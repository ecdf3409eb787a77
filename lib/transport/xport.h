/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Transports: ordered, reliable byte streams between two contexts, on which
 * pipes carry their frames (pipe_wire.h) and small payloads.  Not installed.
 *
 *   tcp (xport_tcp.c)	sockets driven through the context's io_uring;
 *   shm (xport_shm.c)	two rings in a memfd shared by the two processes,
 *			polled by the context thread (tpu__poller), with a
 *			Unix socket kept open for descriptor passing and to
 *			see the peer die;
 *   rdma (xport_rdma.c, rdma_setup.c, rdma_async.c)
 *			an RC queue pair set up with rdma_cm, SEND/RECV with
 *			credits; viable only where an RDMA device exists.
 *
 * Threading: every function here, and every callback, runs on the context
 * thread.  No locks are needed inside a transport (but for the list of
 * rdma connections that a device's asynchronous events concern, which
 * every context shares: rdma_async.c).
 *
 * Callbacks: each queued read, write or descriptor operation gets exactly
 * one callback, with 0 or a negative status.  Reads complete in the order
 * they were queued, and so do writes.  After an error every queued and
 * every later operation of the connection fails with an error.  Errors:
 *   -ECONNRESET	the peer closed or died (EOF in the middle of a read
 *			included; EOF with no read pending is reported to the
 *			next read);
 *   -EPIPE		writing to a peer that is gone;
 *   TPU_E_CLOSED	this side closed the connection;
 *   other -errno	what the system said.
 */
#ifndef TPU_XPORT_H
#define TPU_XPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "ctx/ctx.h"

/* Longest address after the scheme ("127.0.0.1:5000", an shm name). */
#define TPU__XPORT_ADDR_MAX	256
/* Longest compatibility descriptor (see ->compat_descriptor). */
#define TPU__XPORT_COMPAT_MAX	256
/* Most bytes one ->wait may ask for (the smallest ring a transport has). */
#define TPU__XPORT_WAIT_MAX	4096
/* Most iovecs in one write. */
#define TPU__XPORT_IOV_MAX	64

typedef void (*tpu__io_cb)(void *arg, tpu_status status);

struct tpu__conn;
struct addrinfo;

struct tpu__conn_ops {
	/*
	 * Queue a write of iov[0..n) (n <= TPU__XPORT_IOV_MAX; the array is
	 * copied, the bytes are not: they must stay valid until cb).  cb runs
	 * once every byte was taken by the transport: for tcp, by the kernel
	 * (or, for a zero-copy send, once the kernel let go of the pages); for
	 * shm, copied into the ring.
	 */
	tpu_status (*write)(struct tpu__conn *c, const struct iovec *iov, unsigned int n,
			    tpu__io_cb cb, void *arg);
	/* Queue a read of exactly len bytes (len >= 1) into buf. */
	tpu_status (*read)(struct tpu__conn *c, void *buf, size_t len, tpu__io_cb cb, void *arg);
	/*
	 * Reading in place, optional (shm; NULL where the transport has no
	 * ring to look into).  wait queues, in order with the reads, a wait
	 * for at least @min bytes (1 to TPU__XPORT_WAIT_MAX): cb(arg, 0) once
	 * they are readable, or the error a read of @min bytes would get.
	 * With no read or wait queued (from a wait's callback, say), peek and
	 * take copy the @len bytes that follow the first @skip readable ones
	 * into buf and return true, or return false and change nothing when
	 * fewer than @skip + @len are readable (or the connection failed:
	 * the next read or wait says how).  peek leaves the bytes in the
	 * stream; take removes the first @skip + @len, in one step (shm: one
	 * store to the ring's tail per frame instead of one per read).
	 */
	tpu_status (*wait)(struct tpu__conn *c, size_t min, tpu__io_cb cb, void *arg);
	bool (*peek)(struct tpu__conn *c, size_t skip, void *buf, size_t len);
	bool (*take)(struct tpu__conn *c, size_t skip, void *buf, size_t len);
	/*
	 * Pass a descriptor to the peer, in order with the writes (the peer's
	 * recv_fd gets it in order with its reads).  NULL where the transport
	 * cannot (tcp).  send_fd duplicates fd; recv_fd stores a new one in
	 * *fd (O_CLOEXEC) before cb(arg, 0), the caller then owns it.
	 */
	tpu_status (*send_fd)(struct tpu__conn *c, int fd, tpu__io_cb cb, void *arg);
	tpu_status (*recv_fd)(struct tpu__conn *c, int *fd, tpu__io_cb cb, void *arg);
	/*
	 * Process id of the peer as seen by this process, or 0 when unknown
	 * (tcp, rdma).  Where the transport sets proves_peer the kernel
	 * vouches for it (SO_PEERCRED); channels that act on a pid (cma,
	 * cuda_ipc) use only this one, never a pid the peer wrote.
	 */
	int (*peer_pid)(struct tpu__conn *c);
	/*
	 * Optional (NULL in tcp): cb(arg, -ECONNRESET) once, when the peer
	 * goes away, even with no operation pending (bytes it left may still
	 * be read).  Never called after close; one watch per connection.
	 */
	void (*watch)(struct tpu__conn *c, tpu__io_cb cb, void *arg);
	/*
	 * Close: every pending operation fails with TPU_E_CLOSED (its callback
	 * may run before close returns, or later on the context thread), the
	 * peer sees EOF, and the transport frees the connection once the last
	 * callback ran.  The caller must not touch c after calling close.
	 */
	void (*close)(struct tpu__conn *c);
};

/* Every connection starts with this (the transport's own state follows). */
struct tpu__conn {
	const struct tpu__conn_ops *ops;
	const struct tpu__xport *xport;
};

/* Accepted connections: conn on success (status 0), else NULL. */
typedef void (*tpu__accept_fn)(void *arg, tpu_status status, struct tpu__conn *conn);

struct tpu__xlistener;

struct tpu__xlistener_ops {
	/* The address peers connect to (port 0 resolved), NUL-terminated. */
	const char *(*addr)(const struct tpu__xlistener *l);
	/* Stop accepting; fn is not called once close returned.  Frees l. */
	void (*close)(struct tpu__xlistener *l);
};

struct tpu__xlistener {
	const struct tpu__xlistener_ops *ops;
	const struct tpu__xport *xport;
};

struct tpu__xport {
	const char *name;		/* "tcp", "shm": the URL scheme too */
	int priority;			/* higher is preferred when both sides have it */
	bool passes_fds;		/* its connections have send_fd and recv_fd */
	bool proves_peer;		/* ->peer_pid is the kernel's word, not the peer's */
	/*
	 * Two contexts can use this transport iff their descriptors are
	 * equal: shm writes the boot id and network namespace (the Unix
	 * socket is abstract), tcp a constant.  NUL-terminated.
	 */
	tpu_status (*compat_descriptor)(char *buf, size_t size);
	/*
	 * Listen on addr (the URL without "name://").  fn(arg, 0, conn) for
	 * every connection accepted until close, fn(arg, err, NULL) if
	 * accepting failed for good (the listener then stays closed).
	 */
	tpu_status (*listen)(struct tpu_context *ctx, const char *addr, tpu__accept_fn fn,
			     void *arg, struct tpu__xlistener **out);
	/*
	 * Start connecting to addr; the connection may be used at once (its
	 * operations wait for the connection, and fail with its error).
	 * Bad addresses fail here with -EINVAL.
	 */
	tpu_status (*connect)(struct tpu_context *ctx, const char *addr, struct tpu__conn **out);
};

extern const struct tpu__xport tpu__xport_tcp;
extern const struct tpu__xport tpu__xport_shm;
extern const struct tpu__xport tpu__xport_rdma;

/* For tests: how many times an shm connection gave read bytes back to its peer (0: not shm). */
uint64_t tpu__shm_rx_moves(struct tpu__conn *c);
/* For tests: an shm connection's head moves and loads of the peer's tail (0: not shm). */
void tpu__shm_tx_counts(struct tpu__conn *c, uint64_t *head_moves, uint64_t *tail_loads);

/*
 * What the rdma channel (chan_rdma.c) uses of a connection of
 * tpu__xport_rdma, once it is established: its protection domain, for
 * registering memory, and RDMA READs on its queue pair.  A READ of @len
 * bytes at the peer's @raddr (key @rkey) into @laddr (key @lkey) calls
 * cb(arg, 0) once the bytes are there, or an error as a read would; never
 * inside the call.  Closing the connection with READs in flight stops its
 * queue pair at once (the HCA writes no more), then fails them with
 * TPU_E_CLOSED, after close returned.
 */
struct ibv_pd;
struct ibv_pd *tpu__rdma_pd(struct tpu__conn *c);
tpu_status tpu__rdma_read(struct tpu__conn *c, void *laddr, uint32_t lkey, uint64_t raddr,
			  uint32_t rkey, uint32_t len, tpu__io_cb cb, void *arg);

/*
 * "HOST:PORT" or "[V6]:PORT" (xport_addr.c) into NUL-terminated host and
 * port strings: -EINVAL if malformed or too long, TPU_E_URL_PORT if the
 * port is missing.
 */
tpu_status tpu__xport_split_addr(const char *addr, char *host, size_t hsize, char *port,
				 size_t psize);
/* Every address @addr names (getaddrinfo's list, to free with freeaddrinfo). */
tpu_status tpu__xport_resolve(const char *addr, bool passive, struct addrinfo **res);
/* @sa as "HOST:PORT" or "[V6]:PORT", numeric. */
void tpu__xport_format_addr(const struct sockaddr *sa, socklen_t salen, char *buf, size_t size);

#endif /* TPU_XPORT_H */
