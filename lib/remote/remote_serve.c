// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The outbox: tensors this worker keeps for receivers on other workers.  A
 * send waits here (never blocking its caller) until a REQ for its key
 * comes; a REQ that comes first waits for the send.  The answer carries
 * the producer's own memory as the pipe's tensor, and the send completes
 * when the pipe is done with it.  A REQ whose capacity is too small is
 * answered -EMSGSIZE and the tensor stays.
 *
 * The tables are under st->lock (user threads send and cancel); the REQs,
 * which hold peers, change on the context thread only; answers are written
 * after the lock is dropped.
 */
#include <stdlib.h>
#include <string.h>

#include "remote.h"

#define OUTBOX_MIN_BUCKETS 64

/* Keys hashed for the outbox (tests: a send or a REQ hashes its key once). */
static atomic_ulong outbox_hashes;

unsigned long tpu__remote_outbox_hashes(void)
{
	return atomic_load_explicit(&outbox_hashes, memory_order_relaxed);
}

/*
 * FNV-1a.  Computed once per send, REQ or cancel and kept in the entry:
 * a key is 100 bytes or more, and hashing it byte by byte for every
 * lookup, insert and unlink was a tenth of a round trip's instructions.
 */
static uint64_t key_hash(const uint8_t *key, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ull;
	size_t i;

	atomic_fetch_add_explicit(&outbox_hashes, 1, memory_order_relaxed);
	for (i = 0; i < len; i++)
		h = (h ^ key[i]) * 0x100000001b3ull;
	return h;
}

static struct remote_entry **bucket(struct remote *st, uint64_t hash)
{
	return &st->outbox[hash & (st->nbuckets - 1)];
}

static void grow(struct remote *st)
{
	size_t n = st->nbuckets ? st->nbuckets * 2 : OUTBOX_MIN_BUCKETS, i;
	struct remote_entry **b = calloc(n, sizeof(*b)), *e;

	if (!b)
		return;
	for (i = 0; i < st->nbuckets; i++) {
		while ((e = st->outbox[i])) {
			st->outbox[i] = e->next;
			e->next = b[e->hash & (n - 1)];
			b[e->hash & (n - 1)] = e;
		}
	}
	free(st->outbox);
	st->outbox = b;
	st->nbuckets = n;
}

static void serve_task(struct tpu__task *t);

/* Under st->lock: @key's entry (@hash: key_hash of it), made if @create. */
static struct remote_entry *entry_find(struct remote *st, const uint8_t *key, size_t len,
				       uint64_t hash, bool create)
{
	struct remote_entry *e, **b;

	if (st->nbuckets) {
		for (e = *bucket(st, hash); e; e = e->next)
			if (e->hash == hash && e->key_len == len && memcmp(e->key, key, len) == 0)
				return e;
	}
	if (!create)
		return NULL;
	if (st->nentries >= st->nbuckets)
		grow(st);
	if (!st->nbuckets)
		return NULL;
	e = calloc(1, sizeof(*e) + len);
	if (!e)
		return NULL;
	memcpy(e->key, key, len);
	e->key_len = len;
	e->hash = hash;
	e->st = st;
	e->reqs_tail = &e->reqs;
	e->serve.fn = serve_task;
	b = bucket(st, hash);
	e->next = *b;
	*b = e;
	st->nentries++;
	return e;
}

/* Under st->lock: free @e if nothing uses it. */
static void entry_drop_if_empty(struct remote *st, struct remote_entry *e)
{
	struct remote_entry **pp;

	if (e->send || e->reqs || e->serve_queued)
		return;
	for (pp = bucket(st, e->hash); *pp; pp = &(*pp)->next) {
		if (*pp == e) {
			*pp = e->next;
			st->nentries--;
			free(e);
			return;
		}
	}
}

/* What a waiting REQ holds against its peer's bound. */
static size_t req_cost(const struct remote_entry *e)
{
	return sizeof(struct remote_req) + e->key_len;
}

static struct remote_req *req_unlink(struct remote_entry *e, struct remote_req **pp)
{
	struct remote_req *r = *pp;

	*pp = r->next;
	if (!*pp)
		e->reqs_tail = pp;
	r->next = NULL;
	r->peer->nreqs--;
	r->peer->req_bytes -= req_cost(e);
	return r;
}

/*
 * Under st->lock: match the send of @e with its REQs, oldest first; the
 * answers decided go to @out.  A REQ of a dead peer is dropped.
 */
static void serve_entry(struct remote_entry *e, struct remote_req **out)
{
	struct remote_req *r;

	while (e->send && e->reqs) {
		r = req_unlink(e, &e->reqs);
		if (r->peer->dead) {
			r->status = 0;
		} else if (e->send->tensor.len > r->cap) {
			r->status = -EMSGSIZE;
			r->len = e->send->tensor.len;
		} else {
			r->send = e->send;
			e->send = NULL;
		}
		r->next = *out;
		*out = r;
	}
}

/* Write the answers (no lock held) and free them; oldest first. */
static void answer(struct remote_req *list)
{
	struct remote_req *r, *rev = NULL;

	while (list) {
		r = list;
		list = r->next;
		r->next = rev;
		rev = r;
	}
	while ((r = rev)) {
		rev = r->next;
		if (r->send) {
			tpu__remote_peer_send_tensor(r->peer, r->id, r->send);
		} else if (r->status) {
			struct remote_hdr h = { .type = REMOTE_RESP, .id = r->id,
						.status = r->status, .len = r->len };

			tpu__remote_peer_send(r->peer, &h);
		}
		tpu__remote_peer_unref(r->peer);
		free(r);
	}
}

static void serve_task(struct tpu__task *t)
{
	struct remote_entry *e = tpu__container_of(t, struct remote_entry, serve);
	struct remote *st = e->st;
	struct remote_req *out = NULL;

	pthread_mutex_lock(&st->lock);
	e->serve_queued = false;
	serve_entry(e, &out);
	entry_drop_if_empty(st, e);
	pthread_mutex_unlock(&st->lock);
	answer(out);
	tpu__remote_put(st);
}

tpu_status tpu__remote_serve_send(struct remote *st, struct tpu__op *op)
{
	uint64_t hash = key_hash(op->key, op->key_len);
	struct remote_entry *e;
	tpu_status err = 0;

	pthread_mutex_lock(&st->lock);
	if (st->aborted || st->closing) {
		err = st->aborted ? st->aborted : TPU_E_CLOSED;
		goto out;
	}
	e = entry_find(st, op->key, op->key_len, hash, true);
	if (!e) {
		err = -ENOMEM;
		goto out;
	}
	if (e->send) {
		err = -EEXIST;
		goto out;
	}
	e->send = op;
	/* A REQ came first: answer it on the context thread, which owns the pipes. */
	if (e->reqs && !e->serve_queued) {
		e->serve_queued = true;
		tpu__remote_get(st);
		tpu__remote_defer(st, &e->serve);
	}
out:
	pthread_mutex_unlock(&st->lock);
	return err;
}

void tpu__remote_serve_req(struct remote *st, struct remote_peer *p, const struct remote_hdr *h)
{
	struct remote_req *r = calloc(1, sizeof(*r)), *out = NULL;
	struct remote_entry *e = NULL;
	uint64_t hash;

	if (!r) {
		struct remote_hdr nomem = { .type = REMOTE_RESP, .id = h->id, .status = -ENOMEM };

		tpu__remote_peer_send(p, &nomem);
		return;
	}
	tpu__remote_peer_ref(p);
	r->peer = p;
	r->id = h->id;
	r->cap = h->len;
	hash = key_hash(h->key, h->key_len);
	pthread_mutex_lock(&st->lock);
	if (st->aborted || st->closing) {
		r->status = st->aborted ? st->aborted : TPU_E_CLOSED;
	} else if (!h->key_len) {
		r->status = -EINVAL;
	} else {
		e = entry_find(st, h->key, h->key_len, hash, false);
		/* One that would wait counts against the peer's bound. */
		if ((!e || !e->send) &&
		    (p->nreqs >= st->max_reqs ||
		     p->req_bytes + sizeof(*r) + h->key_len > REMOTE_MAX_REQ_BYTES)) {
			tpu__log_debug("remote rendezvous %s: a peer has %u requests waiting; "
				       "refusing more", st->self, p->nreqs);
			r->status = -ENOBUFS;
			e = NULL;
		} else if (!e && !(e = entry_find(st, h->key, h->key_len, hash, true))) {
			r->status = -ENOMEM;
		}
	}
	if (e) {
		*e->reqs_tail = r;
		e->reqs_tail = &r->next;
		p->nreqs++;
		p->req_bytes += req_cost(e);
		serve_entry(e, &out);
		entry_drop_if_empty(st, e);
	} else {
		out = r;
	}
	pthread_mutex_unlock(&st->lock);
	answer(out);
}

/* Under st->lock: unlink the REQs that @match picks, onto @out with @status. */
static void pick_reqs(struct remote *st, bool (*match)(const struct remote_req *, const void *),
		      const void *arg, tpu_status status, struct remote_req **out)
{
	struct remote_entry *e, *next;
	struct remote_req **pp, *r;
	size_t i;

	for (i = 0; i < st->nbuckets; i++) {
		for (e = st->outbox[i]; e; e = next) {
			next = e->next;
			for (pp = &e->reqs; *pp;) {
				if (!match(*pp, arg)) {
					pp = &(*pp)->next;
					continue;
				}
				r = req_unlink(e, pp);
				r->status = status;
				r->next = *out;
				*out = r;
			}
			entry_drop_if_empty(st, e);
		}
	}
}

struct req_id {
	const struct remote_peer *peer;
	uint64_t id;
};

static bool is_req(const struct remote_req *r, const void *arg)
{
	const struct req_id *want = arg;

	return r->peer == want->peer && r->id == want->id;
}

static bool of_peer(const struct remote_req *r, const void *arg)
{
	return r->peer == arg;
}

static bool any_req(const struct remote_req *r, const void *arg)
{
	(void)r;
	(void)arg;
	return true;
}

void tpu__remote_serve_cancel_req(struct remote *st, struct remote_peer *p, uint64_t id)
{
	struct req_id want = { .peer = p, .id = id };
	struct remote_req *out = NULL;

	/* Not found: already answered, and that answer is the result. */
	pthread_mutex_lock(&st->lock);
	pick_reqs(st, is_req, &want, -ECANCELED, &out);
	pthread_mutex_unlock(&st->lock);
	answer(out);
}

void tpu__remote_serve_drop_peer(struct remote *st, struct remote_peer *p)
{
	struct remote_req *out = NULL;

	pthread_mutex_lock(&st->lock);
	pick_reqs(st, of_peer, p, 0, &out);
	pthread_mutex_unlock(&st->lock);
	answer(out);
}

void tpu__remote_serve_answer_all(struct remote *st, tpu_status status)
{
	struct remote_req *out = NULL;

	pthread_mutex_lock(&st->lock);
	pick_reqs(st, any_req, NULL, status, &out);
	pthread_mutex_unlock(&st->lock);
	answer(out);
}

static void send_end(struct tpu__op *op, tpu_status status)
{
	if ((op->flags & TPU_SEND_GIVE) && op->tensor.buffer) {
		tpu_buffer_free(op->tensor.buffer);
		op->tensor.buffer = NULL;
	}
	op->status = status;
	op->len = 0;
	tpu__op_complete(op);
}

int tpu__remote_serve_cancel(struct remote *st, const uint8_t *key, size_t key_len)
{
	struct tpu__op *op = NULL;
	uint64_t hash = key_hash(key, key_len);
	struct remote_entry *e;

	pthread_mutex_lock(&st->lock);
	e = entry_find(st, key, key_len, hash, false);
	if (e && e->send) {
		op = e->send;
		e->send = NULL;
		entry_drop_if_empty(st, e);
	}
	pthread_mutex_unlock(&st->lock);
	if (!op)
		return 0;
	send_end(op, -ECANCELED);
	return 1;
}

void tpu__remote_serve_fail_all(struct remote *st, tpu_status status)
{
	struct tpu__op *list = NULL, *op;
	struct remote_entry *e, *next;
	size_t i;

	pthread_mutex_lock(&st->lock);
	for (i = 0; i < st->nbuckets; i++) {
		for (e = st->outbox[i]; e; e = next) {
			next = e->next;
			if (!e->send)
				continue;
			/* key_next is the front end's; impl is ours to chain with. */
			e->send->impl = list;
			list = e->send;
			e->send = NULL;
			entry_drop_if_empty(st, e);
		}
	}
	pthread_mutex_unlock(&st->lock);
	while ((op = list)) {
		list = op->impl;
		op->impl = NULL;
		send_end(op, status);
	}
}

void tpu__remote_serve_free(struct remote *st)
{
	struct remote_entry *e;
	size_t i;

	for (i = 0; i < st->nbuckets; i++) {
		while ((e = st->outbox[i])) {
			st->outbox[i] = e->next;
			free(e);
		}
	}
	free(st->outbox);
	st->outbox = NULL;
}
