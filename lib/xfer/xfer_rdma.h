/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The rdma backend's own header (Documentation/xfer.rst, "rdma").
 * xfer_rdma_dev.c: the agent's device, its completion thread, the links
 * (queue pairs to one peer agent) and their handshake over the agents'
 * authenticated pipe, and the memory regions; xfer_rdma.c: requests
 * (work requests built at preparation, posted in windows, completions).
 *
 * A link is one per pipe.  The requester's ("out") link lives in the
 * agent's protection domain with the local MRs (one per registration); a
 * target's ("in") link has a protection domain of its own, and a
 * registration is registered there only when that peer loads it, so an
 * rkey reaches nothing outside what this peer was granted.
 *
 * Locks: dev->mu (CQ lifetimes against the completion thread), outside
 * l->mu (a link's queues); a->lock guards p->rdma, the MRs and link lists.
 * The completion thread calls back with none of them held.
 */
#ifndef TPU_XFER_RDMA_H
#define TPU_XFER_RDMA_H

#include <infiniband/verbs.h>

#include "xfer.h"

#define XRD_QPS_MAX		8
#define XRD_QPS_DEFAULT		4
#define XRD_SQ_DEPTH		512	/* work requests per queue pair */
#define XRD_WINDOW_MIN		(XRD_SQ_DEPTH / 4)	/* post no smaller a window */
#define XRD_RECVS		64	/* notification buffers of an in link (QP 0) */
#define XRD_STRIPE_MIN		16	/* pairs per queue pair before striping */
#define XRD_STRIPE_BYTES	(256U << 10)	/* and bytes per queue pair */
/* Handshake payload: gid (16), lid (le16), mtu, nqp, then nqp qpns and psns (le32). */
#define XRD_CONN_LEN(n)		(20 + 8 * (size_t)(n))
_Static_assert(XRD_CONN_LEN(XRD_QPS_MAX) == XFER_RDMA_INFO_MAX, "handshake length");
/* ack timeout 4.096 us << 16 = 268 ms, 5 retries: a dead peer fails a post in ~1.6 s */
#define XRD_ACK_TIMEOUT		16
#define XRD_RETRY		5

struct xrd_dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;		/* local MRs and out links */
	struct ibv_comp_channel *cch;
	uint8_t port;
	int gid_index;
	union ibv_gid gid;
	uint16_t lid;
	bool grh;			/* RoCE: addressed by GID */
	enum ibv_mtu mtu;
	uint8_t rd_atom;		/* READs in flight per queue pair, as the device allows */
	pthread_mutex_t mu;
	pthread_t thread;
	int efd;			/* wakes the thread to stop */
	struct xfer_rdma_link *links;	/* mu */
};

/* A window of work requests posted with one doorbell, its last signalled. */
struct xrd_win {
	struct tpu_xfer_req *r;
	uint32_t count;
	bool last;			/* ends its stripe */
};

/* What a post still has to put on one queue pair. */
struct xrd_job {
	struct xrd_job *next;
	struct tpu_xfer_req *r;
	size_t next_wr, end;
};

struct xrd_qp {
	struct ibv_qp *qp;
	uint32_t psn;
	unsigned int sq_free;
	struct xrd_win ring[XRD_SQ_DEPTH];	/* posted windows, in order */
	unsigned int head, count;
	struct xrd_job *jobs, **jobs_tail;
};

struct xrd_mr {
	struct tpu_xfer_reg *reg;
	struct ibv_mr *mr;
};

struct xfer_rdma_link {
	struct xrd_dev *dev;
	struct xfer_peer *p;
	struct xfer_rdma_link *next;	/* dev->links */
	bool out;
	bool up;			/* out: connected (RTS) */
	struct ibv_pd *pd;		/* in: its own */
	struct ibv_cq *cq;
	unsigned int nqp;
	struct xrd_qp qp[XRD_QPS_MAX];
	pthread_mutex_t mu;
	tpu_status err;			/* mu: failed; nothing more is posted */
	/* out: the handshake's answer (a->lock) */
	bool answered;
	tpu_status ans_status;
	uint8_t ans[XRD_CONN_LEN(XRD_QPS_MAX)];
	size_t ans_len;
	/* in: notification buffers and the registrations granted (a->lock) */
	uint8_t *rbuf;
	struct ibv_mr *rmr;
	struct xrd_mr *mrs;
	size_t nmrs, mrs_cap;
};

/* xfer_rdma_dev.c */
/* The agent's device, opened (and its thread started) at the first use. */
tpu_status tpu__xrd_dev_get(struct tpu_agent *a, struct xrd_dev **out);
/* Stop @l (queue pairs to the error state); queued jobs fail. */
void tpu__xrd_link_fail(struct xfer_rdma_link *l, tpu_status st);
/* Work completions of an out link (xfer_rdma.c), dev->mu held. */
void tpu__xrd_out_wc(struct xfer_rdma_link *l, const struct ibv_wc *wc);
/* Post what waits on @q; l->mu held.  An error fails the link. */
void tpu__xrd_pump(struct xfer_rdma_link *l, struct xrd_qp *q);
/* Requests finished by the thread, called back once no lock is held. */
void tpu__xrd_finish(struct tpu_xfer_req *r);
void tpu__xrd_deliver(void);
/* The local MR of @reg in the agent's domain (a->lock held). */
tpu_status tpu__xrd_local_mr(struct xrd_dev *d, struct tpu_xfer_reg *reg, struct ibv_mr **out);

#endif /* TPU_XFER_RDMA_H */
