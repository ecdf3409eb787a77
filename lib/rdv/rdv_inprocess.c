// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The in-process rendezvous: threads of one process meet in the front
 * end's table of keys, under its lock (rdv->lock): ->send, ->recv and
 * ->cancel are called with it held, and the timers, abort and destroy
 * take it.  A key's send and receive are kept in its FIFO (tpu__keyq).  A
 * table and a lock of its own, beside the front end's, were three more
 * cache lines to move between two threads' cores at every hand-off.  A
 * send leaves its op in the slot; the receive that finds it copies into
 * its destination (the API gave it one) or, for recv_buffer of a given
 * buffer, takes the buffer itself.  No system call unless a receive has a
 * timeout (a timer on the context's ring) or the context thread sleeps
 * and must be woken to call back.
 *
 * The front end hands over at most one RECV per key (the oldest), and this
 * member is the only one, so a key has at most one send and one receive.
 */
#include <stdlib.h>
#include <string.h>

#include "rdv_queue.h"

/* A receive waiting with a timeout; freed by its timer's last call. */
struct ip_wait {
	struct tpu__timer timer;
	struct ip_state *ip;
	struct tpu__op *op;		/* NULL once the receive ended otherwise */
};

/* A key's send and receive, kept in its front end FIFO (tpu__keyq.impl). */
struct ip_slot {
	struct tpu__op *send;
	struct tpu__op *recv;
	struct ip_wait *wait;		/* the receive's timer, if any */
};
_Static_assert(sizeof(struct ip_slot) <= sizeof(((struct tpu__keyq *)0)->impl),
	       "an ip_slot fits a keyq's impl");

struct ip_state {
	struct tpu_rendezvous *rdv;	/* its lock protects everything below */
	size_t timers;			/* started, not yet called back */
	tpu_status aborted;
};

/* The slot of a key whose FIFO is @kq (zeroed with it). */
static struct ip_slot *slot_of(struct tpu__keyq *kq)
{
	return (struct ip_slot *)kq->impl;
}

static void finish(struct tpu__op *op, tpu_status status, size_t len)
{
	op->status = status;
	op->len = len;
	/* A given buffer nobody took is the implementation's to free. */
	if (op->kind == TPU__OP_SEND && (op->flags & TPU_SEND_GIVE) && op->tensor.buffer) {
		tpu_buffer_free(op->tensor.buffer);
		op->tensor.buffer = NULL;
	}
	tpu__op_complete(op);
}

/* The receive of @s stops waiting: its timer, if any, is told to go. */
static void end_wait(struct ip_state *ip, struct ip_slot *s)
{
	if (s->wait) {
		s->wait->op = NULL;
		tpu__ctx_timer_cancel(ip->rdv->ctx, &s->wait->timer);
		s->wait = NULL;
	}
	s->recv = NULL;
}

/*
 * Move the tensor of @send into @recv.  Returns false when it does not fit:
 * the receive then fails with -EMSGSIZE and the send stays.
 */
static bool deliver(struct tpu__op *send, struct tpu__op *recv)
{
	size_t len = send->tensor.len;
	struct tpu_buffer *buf;

	if (len > recv->tensor.len) {
		recv->len = len;
		return false;
	}
	if (recv->kind == TPU__OP_RECV) {
		if (len)
			memcpy(recv->tensor.data, send->tensor.data, len);
	} else if (send->flags & TPU_SEND_GIVE) {
		recv->out_buffer = send->tensor.buffer;
		send->tensor.buffer = NULL;
	} else {
		if (tpu__buffer_alloc_heap(len, &buf)) {
			recv->len = 0;
			recv->status = -ENOMEM;
			return false;
		}
		if (len)
			memcpy(buf->data, send->tensor.data, len);
		recv->out_buffer = buf;
	}
	recv->len = len;
	return true;
}

static tpu_status ip_send(struct tpu_rendezvous *rdv, struct tpu__op *op)
{
	struct ip_state *ip = rdv->impl_state;
	struct ip_slot *s;
	struct tpu__op *recv;
	tpu_status st = 0;
	size_t len;

	if (ip->aborted) {
		st = ip->aborted;
		goto out;
	}
	s = slot_of(op->keyq);
	if (s->send) {
		st = -EEXIST;
		goto out;
	}
	recv = s->recv;
	if (!recv) {
		s->send = op;
		goto out;
	}
	end_wait(ip, s);
	if (!deliver(op, recv)) {
		/* Too small (or no memory): the receive fails, the tensor stays. */
		if (!recv->status)
			recv->status = -EMSGSIZE;
		s->send = op;
		tpu__op_complete(recv);
		goto out;
	}
	recv->status = 0;
	len = recv->len;
	/* The receive was issued first: it is called back first (and may be gone). */
	tpu__op_complete(recv);
	/* A given buffer copied from (not taken) is freed there. */
	finish(op, 0, len);
out:
	return st;
}

static void ip_timeout(void *arg, tpu_status status)
{
	struct ip_wait *w = arg;
	struct ip_state *ip = w->ip;
	struct ip_slot *s;

	pthread_mutex_lock(&ip->rdv->lock);
	/* Expired while still waiting: time out.  Otherwise it was cancelled. */
	if (!status && w->op) {
		/* Still waiting: its FIFO is there, and its slot names it. */
		s = slot_of(w->op->keyq);
		if (s->wait == w) {
			s->wait = NULL;
			s->recv = NULL;
			w->op->status = -ETIMEDOUT;
			w->op->len = 0;
			tpu__op_complete(w->op);
		}
	}
	ip->timers--;
	pthread_mutex_unlock(&ip->rdv->lock);
	free(w);
}

static tpu_status ip_wait_start(struct ip_state *ip, struct ip_slot *s, struct tpu__op *op)
{
	struct ip_wait *w;
	tpu_status st;

	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->ip = ip;
	w->op = op;
	w->timer.fn = ip_timeout;
	w->timer.arg = w;
	st = tpu__ctx_timer_start(ip->rdv->ctx, &w->timer, op->timeout_ns);
	if (st) {
		free(w);
		return st;
	}
	ip->timers++;
	s->wait = w;
	return 0;
}

static tpu_status ip_recv(struct tpu_rendezvous *rdv, struct tpu__op *op)
{
	struct ip_state *ip = rdv->impl_state;
	struct tpu__op *send;
	struct ip_slot *s;
	tpu_status st = 0;

	if (ip->aborted) {
		st = ip->aborted;
		goto out;
	}
	s = slot_of(op->keyq);
	send = s->send;
	if (!send) {
		if (op->timeout_ns)
			st = ip_wait_start(ip, s, op);
		if (!st)
			s->recv = op;
		goto out;
	}
	op->status = 0;
	if (!deliver(send, op)) {
		if (!op->status)
			op->status = -EMSGSIZE;
		tpu__op_complete(op);
		goto out;
	}
	s->send = NULL;
	finish(send, 0, op->len);
	tpu__op_complete(op);
out:
	return st;
}

/* Fail the ops of @s with @status; its FIFO may go once they are called back. */
static int fail_slot(struct ip_state *ip, struct ip_slot *s, tpu_status status)
{
	struct tpu__op *send = s->send, *recv = s->recv;
	int n = 0;

	if (recv) {
		end_wait(ip, s);
		finish(recv, status, 0);
		n++;
	}
	if (send) {
		s->send = NULL;
		finish(send, status, 0);
		n++;
	}
	return n;
}

/* Under rdv->lock, outside an issue: the ops complete through the context. */
static void fail_all(struct ip_state *ip, tpu_status status)
{
	struct tpu_rendezvous *rdv = ip->rdv;
	struct tpu__keyq *kq, *next;
	size_t i;

	for (i = 0; i < rdv->nbuckets; i++) {
		for (kq = rdv->buckets[i]; kq; kq = next) {
			next = kq->next;
			fail_slot(ip, slot_of(kq), status);
		}
	}
}

static int ip_cancel(struct tpu_rendezvous *rdv, const uint8_t *key, size_t key_len)
{
	struct tpu__keyq *kq = tpu__keyq_find(rdv, key, key_len, false);

	return kq ? fail_slot(rdv->impl_state, slot_of(kq), -ECANCELED) : -ENOENT;
}

static tpu_status ip_abort(struct tpu_rendezvous *rdv, tpu_status status)
{
	struct ip_state *ip = rdv->impl_state;
	tpu_status st = 0;

	pthread_mutex_lock(&ip->rdv->lock);
	if (ip->aborted)
		st = -EALREADY;
	else
		ip->aborted = status;
	if (!st)
		fail_all(ip, status);
	pthread_mutex_unlock(&ip->rdv->lock);
	return st;
}

static tpu_status ip_create(struct tpu_rendezvous *rdv)
{
	struct ip_state *ip = calloc(1, sizeof(*ip));

	if (!ip)
		return -ENOMEM;
	ip->rdv = rdv;
	rdv->impl_state = ip;
	return 0;
}

static tpu_status ip_join(struct tpu_rendezvous *rdv, int fd)
{
	(void)rdv;
	(void)fd;
	return -ENOTSUP;
}

static tpu_status ip_share(struct tpu_rendezvous *rdv, int *fd)
{
	(void)rdv;
	(void)fd;
	return -ENOTSUP;
}

static bool ip_timers_done(void *arg)
{
	struct ip_state *ip = arg;
	bool done;

	pthread_mutex_lock(&ip->rdv->lock);
	done = ip->timers == 0;
	pthread_mutex_unlock(&ip->rdv->lock);
	return done;
}

static void ip_destroy(struct tpu_rendezvous *rdv)
{
	struct ip_state *ip = rdv->impl_state;

	pthread_mutex_lock(&ip->rdv->lock);
	fail_all(ip, TPU_E_CLOSED);
	pthread_mutex_unlock(&ip->rdv->lock);
	/* Cancelled timers still call back into this state. */
	tpu__ctx_wait(ip->rdv->ctx, ip_timers_done, ip);
}

/* Once no thread is inside: a cancel or abort met the destroy with this state in hand. */
static void ip_release(struct tpu_rendezvous *rdv)
{
	free(rdv->impl_state);
	rdv->impl_state = NULL;
}

const struct tpu__rdv_ops tpu__rdv_inprocess = {
	.impl = TPU_RDV_INPROCESS,
	.create = ip_create,
	.join = ip_join,
	.share = ip_share,
	.destroy = ip_destroy,
	.send = ip_send,
	.recv = ip_recv,
	.cancel = ip_cancel,
	.abort = ip_abort,
	.release = ip_release,
};
