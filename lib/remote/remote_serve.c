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

/* Keys hashed here (tests: a REQ hashes its key once; a send has the front end's hash). */
static atomic_ulong outbox_hashes;

unsigned long tpu__remote_outbox_hashes(void)
{
	return atomic_load_explicit(&outbox_hashes, memory_order_relaxed);
}

/*
 * The front end's hash (tpu__rdv_key_hash), so that a send uses the one
 * its op carries (op->key_hash) and only a REQ's key from the wire or a
 * cancel is hashed here.  Kept in the entry: a key is 100 bytes or more,
 * and hashing it for every lookup, insert and unlink was a tenth of a
 * round trip's instructions.
 */
static uint64_t key_hash(const uint8_t *key, size_t len)
{
	atomic_fetch_add_explicit(&outbox_hashes, 1, memory_order_relaxed);
	return tpu__rdv_key_hash(key, len);
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

/* Under st->lock: @key's entry (@hash: tpu__rdv_key_hash of it), if any. */
static struct remote_entry *entry_find(struct remote *st, const uint8_t *key, size_t len,
				       uint64_t hash)
{
	struct remote_entry *e;

	if (!st->nbuckets)
		return NULL;
	for (e = *bucket(st, hash); e; e = e->next)
		if (e->hash == hash && e->key_len == len && memcmp(e->key, key, len) == 0)
			return e;
	return NULL;
}

/*
 * Under st->lock: a new entry for @key, whose parse found its destination
 * task at @dst (a span of @key).  Taken from the free list when one there
 * has room (a warm round trip allocates nothing).
 */
static struct remote_entry *entry_new(struct remote *st, const uint8_t *key, size_t len,
				      uint64_t hash, struct tpu_str dst)
{
	struct remote_entry *e, **b;
	size_t cap = tpu__free_list_room(len, REMOTE_KEY_CAP_MIN);

	if (st->nentries >= st->nbuckets)
		grow(st);
	if (!st->nbuckets)
		return NULL;
	e = tpu__free_list_take(&st->entry_free, len);
	if (e) {
		cap = e->key_cap;
		memset(e, 0, sizeof(*e));
	} else {
		e = calloc(1, sizeof(*e) + cap);
		if (!e)
			return NULL;
	}
	e->key_cap = cap;
	memcpy(e->key, key, len);
	e->key_len = len;
	e->hash = hash;
	e->dst_off = (size_t)((const uint8_t *)dst.ptr - key);
	e->dst_len = dst.len;
	e->st = st;
	e->reqs_tail = &e->reqs;
	e->serve.fn = serve_task;
	b = bucket(st, hash);
	e->next = *b;
	*b = e;
	st->nentries++;
	return e;
}

/* Under st->lock: free @e if nothing uses it (to the free list while it is short). */
static void entry_drop_if_empty(struct remote *st, struct remote_entry *e)
{
	struct remote_entry **pp;

	if (e->send || e->reqs || e->serve_queued)
		return;
	for (pp = bucket(st, e->hash); *pp; pp = &(*pp)->next) {
		if (*pp == e) {
			*pp = e->next;
			st->nentries--;
			tpu__free_list_put(&st->entry_free, e);
			return;
		}
	}
}

/* Whether @p's claim is the task that consumes @e's key (checked by the parse that made @e). */
static bool entry_for_peer(const struct remote_entry *e, const struct remote_peer *p)
{
	return e->dst_len == p->claim_len && !memcmp(e->key + e->dst_off, p->claim, e->dst_len);
}

/* ctx thread: a REQ record, from the free list if one is there. */
static struct remote_req *req_get(struct remote *st)
{
	struct remote_req *r = tpu__free_list_take(&st->req_free, 0);

	if (!r)
		return calloc(1, sizeof(*r));
	memset(r, 0, sizeof(*r));
	return r;
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
static void answer(struct remote *st, struct remote_req *list)
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
		tpu__free_list_put(&st->req_free, r);
	}
}

/* ---- pushes (the push protocol, REMOTE_HELLO_PUSH in remote.h) ---- */

/* Whether @len bytes may go as a PUSH at all. */
static bool push_size(size_t len)
{
	return len <= REMOTE_PUSH_MAX;
}

/*
 * ctx thread, under st->lock: the pipe on which @e's consumer, a member,
 * asks us (the one we would ask it on: of two, the one that stays), if
 * it asked there in the push protocol and its window has room for @len
 * more bytes.
 */
static struct remote_peer *push_pipe(struct remote *st, const struct remote_entry *e, size_t len)
{
	struct remote_task *t = tpu__remote_task_find(st, (const char *)e->key + e->dst_off,
						      e->dst_len);
	struct remote_peer *p = t ? tpu__remote_peer_current(st, t) : NULL;

	/*
	 * Not while two pipes to the task are up (both workers connected at
	 * once): the consumer may close the one it opened as soon as nothing
	 * it knows of is outstanding on it, and a push still on its way there
	 * would be lost.  A pipe we opened is closed by us only once every
	 * push on it was answered (tpu__remote_peer_settle).
	 */
	if (t && t->peer && !t->peer->dead && t->inbound && !t->inbound->dead)
		return NULL;
	if (p && p->push_ok && p->pipe && p->claim && entry_for_peer(e, p) &&
	    p->npushed < REMOTE_PUSH_WINDOW && p->pushed_bytes + len <= REMOTE_PUSH_WINDOW_BYTES)
		return p;
	return NULL;
}

static void pushed_unlink(struct remote_peer *p, struct remote_pushed **pp)
{
	struct remote_pushed *r = *pp;

	*pp = r->next;
	if (!*pp)
		p->pushed_tail = pp;
	p->npushed--;
	p->pushed_bytes -= r->len;
	tpu__free_list_put(&p->st->pushed_free, r);
}

/*
 * ctx thread: REQ_SEEN @h of @p is the one our push of its key answered
 * (the oldest such push made after the last push it had seen): dropped.
 */
static bool pushed_answers(struct remote_peer *p, const struct remote_hdr *h, uint64_t hash)
{
	struct remote_pushed **pp;

	for (pp = &p->pushed; *pp; pp = &(*pp)->next) {
		const struct remote_pushed *r = *pp;

		if (r->seq > h->seq && r->hash == hash && r->key_len == h->key_len &&
		    !memcmp(r->key, h->key, h->key_len)) {
			pushed_unlink(p, pp);
			p->st->push_stats.reqs_dropped++;
			return true;
		}
	}
	return false;
}

static tpu_status credit_one(struct remote_peer *p, uint64_t seq)
{
	struct remote_pushed **pp;

	for (pp = &p->pushed; *pp; pp = &(*pp)->next) {
		if ((*pp)->seq == seq) {
			pushed_unlink(p, pp);
			p->st->push_stats.credits++;
			return 0;
		}
	}
	tpu__log_debug("remote rendezvous %s: a credit for push %llu, which is not out: refused",
		       p->st->self, (unsigned long long)seq);
	return -EPROTO;
}

tpu_status tpu__remote_serve_credit(struct remote_peer *p, const struct remote_hdr *h)
{
	tpu_status err;
	size_t i;

	if (h->key_len % 8 || h->key_len > 8 * (REMOTE_CREDIT_BATCH - 1))
		return -EPROTO;
	err = credit_one(p, h->seq);
	for (i = 0; !err && i < h->key_len; i += 8)
		err = credit_one(p, tpu__get_le64(h->key + i));
	return err;
}

void tpu__remote_serve_pushed_free(struct remote_peer *p)
{
	struct remote *st = p->st;

	while (p->pushed)
		pushed_unlink(p, &p->pushed);
	if (p->push_ok) {
		p->push_ok = false;
		pthread_mutex_lock(&st->lock);
		st->push_peers--;
		pthread_mutex_unlock(&st->lock);
	}
}

void tpu__remote_serve_push_ok(struct remote_peer *p)
{
	struct remote *st = p->st;

	if (p->push_ok || st->push_off || p->dead)
		return;
	p->push_ok = true;
	pthread_mutex_lock(&st->lock);
	st->push_peers++;
	pthread_mutex_unlock(&st->lock);
}

/* ctx thread: a push record with room for a key of @key_len bytes. */
static struct remote_pushed *pushed_get(struct remote *st, size_t key_len)
{
	struct remote_pushed *r = tpu__free_list_take(&st->pushed_free, key_len);
	size_t cap = tpu__free_list_room(key_len, REMOTE_KEY_CAP_MIN);

	if (r)
		return r;
	r = malloc(sizeof(*r) + cap);
	if (r)
		r->key_cap = cap;
	return r;
}

/*
 * Under st->lock: push @e's send if a pipe of its consumer's takes it;
 * the pipe and the record in *@to and *@rec (the caller writes it).
 */
static struct tpu__op *push_take(struct remote *st, struct remote_entry *e,
				 struct remote_peer **to, struct remote_pushed **rec)
{
	struct tpu__op *op = e->send;
	struct remote_peer *p;
	struct remote_pushed *r;

	if (!op || e->reqs || !push_size(op->tensor.len) || st->aborted || st->closing)
		return NULL;
	p = push_pipe(st, e, op->tensor.len);
	if (!p)
		return NULL;
	r = pushed_get(st, e->key_len);
	if (!r)
		return NULL;
	r->next = NULL;
	r->seq = ++p->push_seq;
	r->hash = e->hash;
	r->len = op->tensor.len;
	r->key_len = e->key_len;
	memcpy(r->key, e->key, e->key_len);
	if (!p->pushed_tail)
		p->pushed_tail = &p->pushed;
	*p->pushed_tail = r;
	p->pushed_tail = &r->next;
	p->npushed++;
	p->pushed_bytes += r->len;
	e->send = NULL;
	*to = p;
	*rec = r;
	return op;
}

static void serve_task(struct tpu__task *t)
{
	struct remote_entry *e = tpu__container_of(t, struct remote_entry, serve);
	struct remote *st = e->st;
	struct remote_req *out = NULL;
	struct remote_pushed *rec = NULL;
	struct remote_peer *to = NULL;
	struct tpu__op *push;

	pthread_mutex_lock(&st->lock);
	e->serve_queued = false;
	serve_entry(e, &out);
	push = push_take(st, e, &to, &rec);
	entry_drop_if_empty(st, e);
	pthread_mutex_unlock(&st->lock);
	answer(st, out);
	if (push) {
		st->push_stats.pushed++;
		tpu__remote_peer_push(to, rec->seq, push);
	}
	tpu__remote_put(st);
}

tpu_status tpu__remote_serve_send(struct remote *st, struct tpu__op *op, const struct tpu_str *dst,
				  bool *parse)
{
	struct remote_entry *e = NULL;
	tpu_status err = 0;

	pthread_mutex_lock(&st->lock);
	/* Unparsed, it only goes where a REQ's parse went: else the caller's parse decides. */
	if (!dst && (st->aborted || st->closing ||
		     !(e = entry_find(st, op->key, op->key_len, op->key_hash)))) {
		*parse = true;
		goto out;
	}
	if (st->aborted || st->closing) {
		err = st->aborted ? st->aborted : TPU_E_CLOSED;
		goto out;
	}
	if (!e)
		e = entry_find(st, op->key, op->key_len, op->key_hash);
	if (!e)
		e = entry_new(st, op->key, op->key_len, op->key_hash, *dst);
	if (!e) {
		err = -ENOMEM;
		goto out;
	}
	if (e->send) {
		err = -EEXIST;
		goto out;
	}
	e->send = op;
	/*
	 * A REQ came first: answer it on the context thread, which owns the
	 * pipes; or a small one may go there as a push.
	 */
	if ((e->reqs || (st->push_peers && push_size(op->tensor.len))) && !e->serve_queued) {
		e->serve_queued = true;
		tpu__remote_get(st);
		tpu__remote_defer(st, &e->serve);
	}
out:
	pthread_mutex_unlock(&st->lock);
	return err;
}

/* ctx thread: answer REQ @id of @p with @status at once. */
static void refuse(struct remote_peer *p, uint64_t id, tpu_status status)
{
	struct remote_hdr no = { .type = REMOTE_RESP, .id = id, .status = status };

	tpu__remote_peer_send(p, &no);
}

void tpu__remote_serve_req(struct remote *st, struct remote_peer *p, const struct remote_hdr *h)
{
	struct remote_req *r, *out = NULL;
	struct remote_entry *e = NULL;
	struct tpu_str dst = { 0 };
	tpu_status err = 0;
	uint64_t hash;

	if (!h->key_len) {
		refuse(p, h->id, TPU_E_BAD_KEY);
		return;
	}
	hash = key_hash(h->key, h->key_len);
	/* Answered by a push already: its receiver took that, and waits for nothing more. */
	if (h->type == REMOTE_REQ_SEEN && p->pushed && pushed_answers(p, h, hash))
		return;
	pthread_mutex_lock(&st->lock);
	/*
	 * An entry for these very bytes was made by a parse (of its send or
	 * of an earlier REQ) that found this task the source and kept the
	 * destination: only the claim is left to check.  Otherwise the key
	 * is parsed here, without the lock.
	 */
	e = entry_find(st, h->key, h->key_len, hash);
	if (e && !entry_for_peer(e, p)) {
		err = -EACCES;
		tpu__log_debug("remote rendezvous %s: %s asked for a key it does not consume: "
			       "refused", st->self, p->claim);
	} else if (!e) {
		pthread_mutex_unlock(&st->lock);
		err = tpu__remote_peer_req_check(p, h, &dst);
		pthread_mutex_lock(&st->lock);
		if (!err)
			e = entry_find(st, h->key, h->key_len, hash);
	}
	if (err) {
		pthread_mutex_unlock(&st->lock);
		refuse(p, h->id, err);
		return;
	}
	r = req_get(st);
	if (!r) {
		pthread_mutex_unlock(&st->lock);
		refuse(p, h->id, -ENOMEM);
		return;
	}
	tpu__remote_peer_ref(p);
	r->peer = p;
	r->id = h->id;
	r->cap = h->len;
	if (st->aborted || st->closing) {
		r->status = st->aborted ? st->aborted : TPU_E_CLOSED;
		e = NULL;
	} else if ((!e || !e->send) &&
		   (p->nreqs >= st->max_reqs ||
		    p->req_bytes + sizeof(*r) + h->key_len > REMOTE_MAX_REQ_BYTES)) {
		/* One that would wait counts against the peer's bound. */
		tpu__log_debug("remote rendezvous %s: a peer has %u requests waiting; "
			       "refusing more", st->self, p->nreqs);
		r->status = -ENOBUFS;
		e = NULL;
	} else if (!e && !(e = entry_new(st, h->key, h->key_len, hash, dst))) {
		r->status = -ENOMEM;
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
	answer(st, out);
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
	answer(st, out);
}

void tpu__remote_serve_drop_peer(struct remote *st, struct remote_peer *p)
{
	struct remote_req *out = NULL;

	pthread_mutex_lock(&st->lock);
	pick_reqs(st, of_peer, p, 0, &out);
	pthread_mutex_unlock(&st->lock);
	answer(st, out);
}

void tpu__remote_serve_answer_all(struct remote *st, tpu_status status)
{
	struct remote_req *out = NULL;

	pthread_mutex_lock(&st->lock);
	pick_reqs(st, any_req, NULL, status, &out);
	pthread_mutex_unlock(&st->lock);
	answer(st, out);
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
	e = entry_find(st, key, key_len, hash);
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
