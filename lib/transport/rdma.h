/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The rdma transport's own header: the connection, shared by its data path
 * (xport_rdma.c), its set-up through rdma_cm (rdma_setup.c) and the
 * devices' asynchronous events (rdma_async.c).  See xport_rdma.c for the
 * design.  Context thread only, except where said.
 */
#ifndef TPU_RDMA_H
#define TPU_RDMA_H

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <stdatomic.h>

#include "xport.h"

/*
 * Valgrind cannot see the device write a receive buffer or a READ's
 * destination: say so, or each byte received would count as uninitialised.
 */
#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define RDMA_MARK_DEFINED(p, n) VALGRIND_MAKE_MEM_DEFINED((p), (n))
#endif
#endif
#ifndef RDMA_MARK_DEFINED
#define RDMA_MARK_DEFINED(p, n) ((void)(p), (void)(n))
#endif

/* Bytes of one message, and of each receive and send buffer. */
#define RDMA_MSG		(64u << 10)
/* Data messages in flight to the peer: the receive window. */
#define RDMA_CREDITS		8
/* Receive buffers for credit-only messages (see xport_rdma.c). */
#define RDMA_SPARE		2
#define RDMA_RECVS		(RDMA_CREDITS + RDMA_SPARE)
/* Send buffers: one per credit, the last one for credit-only messages. */
#define RDMA_SENDS		(RDMA_CREDITS + 1)
#define RDMA_CREDIT_SLOT	RDMA_CREDITS
/* Inline data asked of the device; it may grant less or none. */
#define RDMA_INLINE		256
/* Ack timeout 4.096 us << 16 = 268 ms, retried 5 times: never 7 (forever). */
#define RDMA_ACK_TIMEOUT	16
#define RDMA_RETRY		5
#define RDMA_RNR_RETRY		5
/*
 * An open connection with no work request outstanding probes its peer this
 * often (a zero-length RDMA WRITE, acknowledged by the peer's device alone):
 * a peer that vanished is then found within this plus the retry budget
 * above, even by an end that only waits.
 */
#define RDMA_KEEPALIVE_MS	1000
/* Address resolution, then route resolution, each gives up after this. */
#define RDMA_RESOLVE_MS		2000
#define RDMA_BACKLOG		64
/* RDMA READs in flight per connection (the rdma channel's), at most. */
#define RDMA_READS		4
/* The kind of an RDMA READ's wr_id (xport_rdma.c has the others), its sequence below. */
#define TPU__RDMA_WR_READ	(3ull << 32)

enum rdma_state {
	C_RESOLVING,		/* address, then route */
	C_CONNECTING,		/* connect or accept sent */
	C_OPEN,
	C_DOWN,			/* failed or disconnected */
};

struct rdma_rd;
struct rdma_wr;
struct rdma_rdop;

struct rdma_conn {
	struct tpu__conn base;
	struct tpu_context *ctx;
	struct rdma_event_channel *ech;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_comp_channel *cch;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint8_t *slab;			/* RDMA_RECVS receive buffers, then RDMA_SENDS send buffers */
	enum rdma_state state;
	bool qp;			/* rdma_create_qp succeeded */
	bool closed;
	bool releasing;
	bool polling;			/* a poller of the context */
	tpu_status rerr, werr;		/* first error of reads and of writes */
	unsigned int inflight;		/* SQEs whose CQE is due */
	unsigned int depth;		/* inside progress or a callback: do not free */
	unsigned int max_inline;
	/* POLL_ADDs in flight (their user_data, for the cancel; 0: none) */
	uint64_t ech_watch, cch_watch, async_watch;
	/* reads */
	struct rdma_rd *rq, **rq_tail;
	unsigned int rx_slot[RDMA_RECVS], rx_len[RDMA_RECVS];
	unsigned int rx_head, rx_count;	/* filled buffers in arrival order */
	size_t rx_off;			/* bytes taken from the head buffer */
	unsigned int owed;		/* buffers consumed and reposted: credits for the peer */
	/* writes */
	struct rdma_wr *wq, **wq_tail;	/* not called back yet, in order */
	struct rdma_wr *wsend;		/* the first with bytes not yet in a message */
	/* finished reads and writes kept for reuse (RDMA_OP_CACHE each) */
	struct tpu__free_list rd_free, wr_free;
	unsigned int credits;		/* data messages the peer can take */
	uint32_t tx_free;		/* free data send buffers, one bit each */
	bool credit_busy;		/* the credit-only message is in flight */
	unsigned int sends_out;		/* posted SENDs not completed */
	/* RDMA READs (tpu__rdma_read): queued, then posted, both in order */
	struct rdma_rdop *rdq, **rdq_tail;
	struct rdma_rdop *rdp, **rdp_tail;
	unsigned int reads_out, rd_depth;
	uint32_t rd_seq;
	/* keepalive: the timer (counted in inflight while armed), the probe in flight */
	struct tpu__timer ka;
	bool ka_armed, probe_out;
	struct tpu__poller poller;
	struct tpu__task task;
	bool task_queued;
	/* asynchronous events (rdma_async.c) */
	struct rdma_conn *async_next;
	bool async_listed;
	atomic_int async_err;		/* set by any thread: the device said this QP or port failed */
};

/* xport_rdma.c */
struct rdma_conn *tpu__rdma_conn_new(struct tpu_context *ctx);
void tpu__rdma_conn_fail(struct rdma_conn *c, tpu_status st, const char *what);
void tpu__rdma_conn_down(struct rdma_conn *c, tpu_status rerr, tpu_status werr);
void tpu__rdma_conn_progress(struct rdma_conn *c);
void tpu__rdma_conn_check_release(struct rdma_conn *c);
bool tpu__rdma_poll_cq(struct rdma_conn *c);
tpu_status tpu__rdma_post_recv(struct rdma_conn *c, unsigned int slot);
/* Watch @fd for POLLIN; fn's CQE ends it (*ud is 0 again then). */
tpu_status tpu__rdma_watch(struct rdma_conn *c, int fd, tpu__cqe_fn fn, uint64_t *ud);
/* The completion channel fired (a tpu__cqe_fn). */
void tpu__rdma_on_cq_event(void *arg, const struct io_uring_cqe *cqe);
/* Established: flow control starts, the context polls the CQ. */
void tpu__rdma_conn_established(struct rdma_conn *c);
/* Progress from the context loop soon (never inside the caller). */
void tpu__rdma_schedule(struct rdma_conn *c);

/* rdma_read.c: post what waits, or fail it once down; true if anything was called back. */
bool tpu__rdma_read_progress(struct rdma_conn *c);
void tpu__rdma_read_wc(struct rdma_conn *c, const struct ibv_wc *wc);
void tpu__rdma_read_close(struct rdma_conn *c);

/* rdma_setup.c */
tpu_status tpu__rdma_viable(char *why, size_t size);
/* Queue pair, CQ, buffers, and the completion channel watched (both sides). */
tpu_status tpu__rdma_setup_qp(struct rdma_conn *c);
void tpu__rdma_watch_cm(struct rdma_conn *c);
/* Frees what c holds and c itself: no watch may be in flight. */
void tpu__rdma_conn_destroy(struct rdma_conn *c);
tpu_status tpu__rdma_connect(struct tpu_context *ctx, const char *addr, struct tpu__conn **out);
tpu_status tpu__rdma_listen(struct tpu_context *ctx, const char *addr, tpu__accept_fn fn,
			    void *arg, struct tpu__xlistener **out);

/*
 * rdma_async.c: every open connection is listed with its device; whichever
 * context thread finds the device's async descriptor readable reads the
 * events and marks the connections they concern (async_err), waking their
 * contexts.  add and del from the connection's context thread.
 */
void tpu__rdma_async_add(struct rdma_conn *c);
void tpu__rdma_async_del(struct rdma_conn *c);
/* Read the events of c's device that are there (never blocks). */
void tpu__rdma_async_read(struct rdma_conn *c);

#endif /* TPU_RDMA_H */
