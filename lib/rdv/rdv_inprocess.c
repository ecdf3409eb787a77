// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The in-process rendezvous: threads of one process meet in a hash table
 * under the front end's lock (rdv->lock): ->send, ->recv and ->cancel are
 * called with it held, and the timers, abort and destroy take it (a lock
 * of its own, taken inside that one, was one more cache line to move
 * between two threads' cores at every hand-off).  A send leaves its op in
 * the table; the receive that finds it copies into its destination (the
 * API gave it one) or, for recv_buffer of a given buffer, takes the buffer
 * itself.  No system call unless a receive has a timeout (a timer on the
 * context's ring) or the context thread sleeps and must be woken to call
 * back.
 *
 * The front end hands over at most one RECV per key (the oldest), and this
 * member is the only one, so a key has at most one send and one receive.
 */
#include <stdlib.h>
#include <string.h>

#include "rdv.h"

#define IP_MIN_BUCKETS 64
/* Emptied slots kept for reuse, so that a steady stream allocates none. */
#define IP_FREE_SLOTS 64

/* A receive waiting with a timeout; freed by its timer's last call. */
struct ip_wait {
	struct tpu__timer timer;
	struct ip_state *ip;
	struct tpu__op *op;		/* NULL once the receive ended otherwise */
};

struct ip_slot {
	struct ip_slot *next;
	uint64_t hash;
	struct tpu__op *send;
	struct tpu__op *recv;
	struct ip_wait *wait;		/* the receive's timer, if any */
};

struct ip_state {
	struct tpu_rendezvous *rdv;	/* its lock protects everything below */
	struct ip_slot **buckets;
	size_t nbuckets;
	size_t nslots;
	struct ip_slot *free_slots;	/* emptied, for reuse */
	size_t nfree;
	size_t timers;			/* started, not yet called back */
	tpu_status aborted;
	struct tpu_context *ctx;
};

static const struct tpu__op *slot_op(const struct ip_slot *s)
{
	return s->send ? s->send : s->recv;
}

static bool slot_is(const struct ip_slot *s, uint64_t h, const uint8_t *key, size_t len)
{
	const struct tpu__op *o = slot_op(s);

	return o && s->hash == h && o->key_len == len && memcmp(o->key, key, len) == 0;
}

static void ip_grow(struct ip_state *ip)
{
	size_t n = ip->nbuckets * 2, i;
	struct ip_slot **b = calloc(n, sizeof(*b));

	if (!b)
		return;
	for (i = 0; i < ip->nbuckets; i++) {
		while (ip->buckets[i]) {
			struct ip_slot *s = ip->buckets[i];

			ip->buckets[i] = s->next;
			s->next = b[s->hash & (n - 1)];
			b[s->hash & (n - 1)] = s;
		}
	}
	free(ip->buckets);
	ip->buckets = b;
	ip->nbuckets = n;
}

/* The slot of @op's key; created empty if @create. */
static struct ip_slot *ip_slot(struct ip_state *ip, const struct tpu__op *op, bool create)
{
	uint64_t h = op->key_hash;	/* the front end hashed the key once */
	struct ip_slot *s;

	for (s = ip->buckets[h & (ip->nbuckets - 1)]; s; s = s->next)
		if (slot_is(s, h, op->key, op->key_len))
			return s;
	if (!create)
		return NULL;
	if (ip->nslots >= ip->nbuckets)
		ip_grow(ip);
	s = ip->free_slots;
	if (s) {
		ip->free_slots = s->next;
		ip->nfree--;
		memset(s, 0, sizeof(*s));
	} else {
		s = calloc(1, sizeof(*s));
		if (!s)
			return NULL;
	}
	s->hash = h;
	s->next = ip->buckets[h & (ip->nbuckets - 1)];
	ip->buckets[h & (ip->nbuckets - 1)] = s;
	ip->nslots++;
	return s;
}

static void ip_slot_drop_if_empty(struct ip_state *ip, struct ip_slot *s)
{
	struct ip_slot **p;

	if (s->send || s->recv)
		return;
	for (p = &ip->buckets[s->hash & (ip->nbuckets - 1)]; *p; p = &(*p)->next) {
		if (*p == s) {
			*p = s->next;
			ip->nslots--;
			if (ip->nfree < IP_FREE_SLOTS) {
				s->next = ip->free_slots;
				ip->free_slots = s;
				ip->nfree++;
			} else {
				free(s);
			}
			return;
		}
	}
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
		tpu__ctx_timer_cancel(ip->ctx, &s->wait->timer);
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
	s = ip_slot(ip, op, true);
	if (!s) {
		st = -ENOMEM;
		goto out;
	}
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
	ip_slot_drop_if_empty(ip, s);
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
		s = ip_slot(ip, w->op, false);
		if (s && s->wait == w) {
			s->wait = NULL;
			s->recv = NULL;
			ip_slot_drop_if_empty(ip, s);
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
	st = tpu__ctx_timer_start(ip->ctx, &w->timer, op->timeout_ns);
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
	s = ip_slot(ip, op, true);
	if (!s) {
		st = -ENOMEM;
		goto out;
	}
	send = s->send;
	if (!send) {
		if (op->timeout_ns)
			st = ip_wait_start(ip, s, op);
		if (!st)
			s->recv = op;
		ip_slot_drop_if_empty(ip, s);
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
	ip_slot_drop_if_empty(ip, s);
	finish(send, 0, op->len);
	tpu__op_complete(op);
out:
	return st;
}

/* Fail the ops of @s with @status; @s may be freed. */
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
	ip_slot_drop_if_empty(ip, s);
	return n;
}

static void fail_all(struct ip_state *ip, tpu_status status)
{
	size_t i;

	for (i = 0; i < ip->nbuckets; i++)
		while (ip->buckets[i])
			fail_slot(ip, ip->buckets[i], status);
}

static int ip_cancel(struct tpu_rendezvous *rdv, const uint8_t *key, size_t key_len)
{
	struct ip_state *ip = rdv->impl_state;
	struct tpu__op probe = { .key = (uint8_t *)key, .key_len = key_len,
				 .key_hash = tpu__rdv_key_hash(key, key_len) };
	struct ip_slot *s;
	int n = -ENOENT;

	s = ip_slot(ip, &probe, false);
	if (s)
		n = fail_slot(ip, s, -ECANCELED);
	return n;
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
	ip->buckets = calloc(IP_MIN_BUCKETS, sizeof(*ip->buckets));
	if (!ip->buckets) {
		free(ip);
		return -ENOMEM;
	}
	ip->nbuckets = IP_MIN_BUCKETS;
	ip->ctx = rdv->ctx;
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
	tpu__ctx_wait(ip->ctx, ip_timers_done, ip);
	while (ip->free_slots) {
		struct ip_slot *s = ip->free_slots;

		ip->free_slots = s->next;
		free(s);
	}
	free(ip->buckets);
	free(ip);
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
};
