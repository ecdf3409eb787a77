/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * What the two halves of the shm transport share (private to transport/):
 * xport_shm.c runs connections (lifetime, descriptors, the data path, the
 * connection operations) and shm_setup.c sets them up (connector,
 * acceptor, listener).  The design is described at the top of xport_shm.c.
 */
#ifndef TPU_SHM_H
#define TPU_SHM_H

#include <liburing.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "shm_ring.h"
#include "xport.h"

#define SHM_PREFIX		"tensorpipe-shm/"
#define SHM_PREFIX_LEN		(sizeof(SHM_PREFIX) - 1)
/* What fits in sun_path after the leading NUL and the prefix. */
#define SHM_SUN_PATH		sizeof(((struct sockaddr_un *)0)->sun_path)
#define SHM_NAME_MAX		(SHM_SUN_PATH - 1 - SHM_PREFIX_LEN)
#define SHM_RING_CAP		(1u << 20)
#define SHM_BACKLOG		128
/* Out of descriptors: how long the listener waits before it accepts again. */
#define SHM_ACCEPT_RETRY_NS	(100u * 1000000u)

#define SHM_HS_MAGIC		0x314d4853u	/* "SHM1" read as little-endian bytes */
#define SHM_HS_VERSION		1
#define SHM_HS_HELLO		1
#define SHM_HS_WELCOME		2
/* The one byte that carries a descriptor after the handshake. */
#define SHM_FD_TAG		'F'
/* Ops of up to this many iovecs are kept for reuse, at most SHM_OP_CACHE of them. */
#define SHM_OP_CACHED_IOV	4
#define SHM_OP_CACHE		32
/* Passes over one connection's queues per poll while reads call back writes. */
#define SHM_PROGRESS_PASSES	4
/* Room for a few descriptors, so that a peer sending too many is seen (and they are closed). */
#define SHM_MAX_FDS		4


/* Handshake message: fixed size, native byte order (both ends share one kernel). */
struct shm_hs {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint64_t ring_cap;	/* HELLO: bytes of each ring; WELCOME: 0 */
	uint64_t rsvd;		/* 0 */
};

enum shm_state {
	SHM_CONNECTING,		/* connector: connect in flight */
	SHM_HELLO,		/* connector: HELLO going out, WELCOME awaited */
	SHM_ACCEPTING,		/* acceptor: HELLO awaited, WELCOME going out */
	SHM_OPEN,		/* rings mapped, poller registered */
	SHM_DEAD,		/* never opened */
};

enum shm_op_kind { OP_WRITE, OP_READ, OP_WAIT, OP_SEND_FD, OP_RECV_FD };

struct shm_op {
	struct shm_op *next;
	enum shm_op_kind kind;
	tpu__io_cb cb;
	void *arg;
	size_t done, total;	/* OP_WAIT: total is the bytes it waits for */
	void *buf;		/* OP_READ */
	int fd;			/* OP_SEND_FD: our duplicate, until the sendmsg takes it */
	int *fdp;		/* OP_RECV_FD */
	unsigned int niov;	/* OP_WRITE */
	unsigned int cap_iov;	/* room in iov[] */
	struct iovec iov[];
};

/* A socket message in flight, with room for its descriptors. */
struct shm_msg {
	struct msghdr msg;
	struct iovec iov;
	char byte;
	union {
		struct cmsghdr hdr;
		char buf[CMSG_SPACE(SHM_MAX_FDS * sizeof(int))];
	} cm;
};

struct shm_listener;

struct shm_conn {
	struct tpu__conn base;
	struct tpu_context *ctx;
	struct tpu__poller poller;
	struct tpu__task task;
	enum shm_state state;
	int sock;
	int memfd;		/* connector: until the HELLO's CQE */
	int peer_wake;		/* the peer's context eventfd */
	int tx_fd;		/* the descriptor of the SENDMSG in flight */
	void *map;
	size_t map_len;
	struct tpu__shm_ring tx, rx;
	int peer_pid;
	tpu_status rerr, werr;	/* what reads and writes fail with now (0: nothing) */
	bool peer_gone;
	tpu__io_cb watch_cb;	/* told once when the peer goes (see xport.h) */
	void *watch_arg;
	bool closed;
	bool polling;
	bool task_queued;
	bool tx_busy;		/* a send_fd's SENDMSG is in flight */
	bool rx_busy;		/* a recv_fd's RECVMSG is in flight */
	bool rx_took;		/* a take gave bytes back: the writer may need its wake-up */
	bool tx_put;		/* a write went into the ring at once: the reader may need its */
	unsigned int inflight;	/* SQEs whose last CQE is due */
	unsigned int busy;	/* frames on the stack that use c after calling back */
	struct shm_op *tx_head, **tx_tail;
	struct shm_op *rx_head, **rx_tail;
	struct shm_op *free_ops;	/* finished ops kept for reuse (context thread) */
	unsigned int nfree_ops;
	struct shm_listener *listener;	/* acceptor: until handed to the listener's fn */
	struct shm_conn *lnext;
	struct tpu__timer hs_timer;	/* acceptor: the handshake's deadline (an inflight) */
	bool hs_timer_on;
	uint64_t hs_since;		/* acceptor: its accept (tpu__mono_ns) */
	struct sockaddr_un addr;
	socklen_t addr_len;
	struct shm_hs hs_out, hs_in;
	struct shm_msg txm, rxm;
};

struct shm_listener {
	struct tpu__xlistener base;
	struct tpu_context *ctx;
	int fd;
	tpu__accept_fn fn;
	void *arg;
	bool closed;		/* by the user */
	bool stopped;		/* no more accepts (closed, or failed for good) */
	bool accepting;		/* an ACCEPT is in flight */
	bool waiting;		/* out of descriptors: the retry timer runs */
	unsigned int busy;
	uint64_t accept_ud;
	struct shm_conn *pending;	/* connections in their handshake, newest first */
	unsigned int npending;
	unsigned int setup_max;	/* TPU_SETUP_MAX */
	uint64_t setup_ns;	/* TPU_SETUP_TIMEOUT_MS */
	uint64_t grace_ns;	/* the oldest handshake is dropped only after this */
	struct tpu__timer retry;
	char name[SHM_NAME_MAX + 1];
};

/* xport_shm.c: connections. */
void tpu__shm_close(struct tpu__conn *base);
void tpu__shm_close_fd(int *fd);
void tpu__shm_close_fds(int *fds, unsigned int n);
void tpu__shm_conn_cqe_done(struct shm_conn *c);
void tpu__shm_conn_fail(struct shm_conn *c, tpu_status err);
void tpu__shm_conn_free(struct shm_conn *c);
struct shm_conn *tpu__shm_conn_new(struct tpu_context *ctx);
void tpu__shm_conn_open(struct shm_conn *c);
struct io_uring_sqe *tpu__shm_conn_sqe(struct shm_conn *c, tpu__cqe_fn fn);
tpu_status tpu__shm_connect(struct tpu_context *ctx, const char *addr, struct tpu__conn **out);
bool tpu__shm_hs_ok(const struct shm_hs *hs, int res, uint16_t type);
bool tpu__shm_is_eventfd(int fd);
tpu_status tpu__shm_listen(struct tpu_context *ctx, const char *addr, tpu__accept_fn fn,
			     void *arg, struct tpu__xlistener **out);
tpu_status tpu__shm_map_rings(struct shm_conn *c, uint64_t cap, bool connector);
void tpu__shm_msg_prepare(struct shm_msg *m, void *data, size_t len, bool control);
void tpu__shm_msg_put_fds(struct shm_msg *m, const int *fds, unsigned int n);
int tpu__shm_sock_peer_pid(int sock);
tpu_status tpu__shm_sockaddr(const char *name, struct sockaddr_un *sa, socklen_t *len);
unsigned int tpu__shm_msg_take_fds(struct shm_msg *m, int *fds, unsigned int max);

#endif
