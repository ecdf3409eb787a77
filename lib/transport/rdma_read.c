// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * RDMA READs on an rdma transport connection, for the rdma channel
 * (xport.h: tpu__rdma_read).  They share the queue pair with the
 * connection's SENDs; at most RDMA_READS (and the initiator depth agreed
 * at connect) are posted at once, the rest wait in order, so that a SEND
 * queued behind them waits for a few READs, not for a whole tensor (the
 * channel asks for one chunk at a time).  Completions come in posting
 * order on an RC queue pair: the posted list's head is the one a READ
 * completion is for, checked by its sequence number.
 */
#include <stdlib.h>

#include "rdma.h"

struct rdma_rdop {
	struct rdma_rdop *next;
	void *laddr;
	uint64_t raddr;
	uint32_t lkey, rkey, len;
	uint32_t seq;
	tpu__io_cb cb;
	void *arg;
};

struct ibv_pd *tpu__rdma_pd(struct tpu__conn *base)
{
	struct rdma_conn *c = (struct rdma_conn *)base;

	return base->xport == &tpu__xport_rdma && c->state == C_OPEN ? c->pd : NULL;
}

tpu_status tpu__rdma_read(struct tpu__conn *base, void *laddr, uint32_t lkey, uint64_t raddr,
			  uint32_t rkey, uint32_t len, tpu__io_cb cb, void *arg)
{
	struct rdma_conn *c = (struct rdma_conn *)base;
	struct rdma_rdop *op;

	if (base->xport != &tpu__xport_rdma || !cb || !len)
		return -EINVAL;
	if (c->closed)
		return TPU_E_CLOSED;
	op = malloc(sizeof(*op));
	if (!op)
		return -ENOMEM;
	*op = (struct rdma_rdop){ .laddr = laddr, .raddr = raddr, .lkey = lkey, .rkey = rkey,
				  .len = len, .cb = cb, .arg = arg };
	*c->rdq_tail = op;
	c->rdq_tail = &op->next;
	tpu__rdma_schedule(c);
	return 0;
}

static void call(struct rdma_conn *c, struct rdma_rdop *op, tpu_status st)
{
	c->depth++;
	op->cb(op->arg, st);
	c->depth--;
	free(op);
}

static struct rdma_rdop *pop(struct rdma_rdop **head, struct rdma_rdop ***tail)
{
	struct rdma_rdop *op = *head;

	*head = op->next;
	if (!*head)
		*tail = head;
	return op;
}

static tpu_status post(struct rdma_conn *c, struct rdma_rdop *op)
{
	struct ibv_sge sge = { .addr = (uintptr_t)op->laddr, .length = op->len, .lkey = op->lkey };
	struct ibv_send_wr wr = {
		.wr_id = TPU__RDMA_WR_READ | op->seq,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_RDMA_READ,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { .remote_addr = op->raddr, .rkey = op->rkey },
	};
	struct ibv_send_wr *bad;
	int err = ibv_post_send(c->id->qp, &wr, &bad);

	return err ? -err : 0;
}

bool tpu__rdma_read_progress(struct rdma_conn *c)
{
	unsigned int most = c->rd_depth < RDMA_READS ? c->rd_depth : RDMA_READS;
	bool any = false;

	if (c->state == C_DOWN || c->closed) {
		tpu_status st = c->closed ? TPU_E_CLOSED : -ECONNRESET;

		while (c->rdq) {
			call(c, pop(&c->rdq, &c->rdq_tail), st);
			any = true;
		}
		return any;
	}
	while (c->state == C_OPEN && c->rdq && c->reads_out < (most ? most : 1)) {
		struct rdma_rdop *op = pop(&c->rdq, &c->rdq_tail);
		tpu_status st;

		op->seq = c->rd_seq++;
		st = post(c, op);
		if (st) {
			call(c, op, st);
			tpu__rdma_conn_fail(c, st, "posting an RDMA READ");
			return true;
		}
		op->next = NULL;
		*c->rdp_tail = op;
		c->rdp_tail = &op->next;
		c->reads_out++;
	}
	return any;
}

void tpu__rdma_read_wc(struct rdma_conn *c, const struct ibv_wc *wc)
{
	struct rdma_rdop *op = c->rdp;

	/* Failed at close already: the queue pair only flushes it now. */
	if (!op || op->seq != (uint32_t)(wc->wr_id & 0xffffffffu))
		return;
	pop(&c->rdp, &c->rdp_tail);
	c->reads_out--;
	if (wc->status == IBV_WC_SUCCESS) {
		RDMA_MARK_DEFINED(op->laddr, op->len);
		call(c, op, 0);
		return;
	}
	if (c->state != C_DOWN && !c->closed)
		tpu__log_debug("rdma conn %p: RDMA READ: %s", (void *)c,
			       ibv_wc_status_str(wc->status));
	call(c, op, c->closed ? TPU_E_CLOSED : -ECONNRESET);
	tpu__rdma_conn_down(c, -ECONNRESET, -EPIPE);
}

/*
 * Close: READs posted would still write into memory their callers get
 * back with the failure, so the queue pair stops first (rdma_disconnect
 * moves it to the error state before it returns).  Their callbacks run
 * later, from the connection's task, like those of a failure: the caller
 * of close may be in the middle of taking its own state apart.
 */
void tpu__rdma_read_close(struct rdma_conn *c)
{
	if (!c->rdp)
		return;
	if (c->state == C_OPEN) {
		rdma_disconnect(c->id);
		c->state = C_DOWN;
	}
	/* Ahead of those never posted, in order; their flushed CQEs are ignored. */
	*c->rdp_tail = c->rdq;
	if (!c->rdq)
		c->rdq_tail = c->rdp_tail;
	c->rdq = c->rdp;
	c->rdp = NULL;
	c->rdp_tail = &c->rdp;
	c->reads_out = 0;
	tpu__rdma_schedule(c);
}
