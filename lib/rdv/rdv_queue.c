// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Per-key FIFOs and the callback side of the front end: a receive's result
 * may arrive out of order (the module completes commands as it pleases), so
 * each receive waits in its FIFO, DONE, until every older receive of its
 * key has been called back.  Sends are called back as soon as they are
 * done: a key holds one pending send, so the only send that could finish
 * before an older one is a duplicate failing with -EEXIST.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdv_queue.h"

#define KEYQ_MIN_BUCKETS 64
/*
 * Free lists: at most this many finished ops and emptied key FIFOs are
 * kept per rendezvous (about 40 KiB of ops with their 256-byte key buffers
 * and 20 KiB of FIFOs, for keys of usual length), so that a steady stream
 * of operations allocates nothing while a burst gives the rest of its
 * memory back.
 */
#define OP_FREE_MAX	64
#define KEYQ_FREE_MAX	64
/* A key buffer is at least this long, so that a TF key (100 bytes or more) fits a reused one. */
#define KEY_CAP_MIN	256

/*
 * Eight bytes a step: a TF key is 100 bytes or more, and byte-wise FNV-1a
 * cost six instructions a byte, three keys per remote round trip.  Each
 * step folds the high half back, since the tables index by the low bits
 * and a product's low bits see only its factors' low bits.  In-process
 * tables only: the value never leaves the process.
 */
uint64_t tpu__rdv_key_hash(const uint8_t *key, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ull ^ len, w;
	size_t i;

	for (i = 0; i + 8 <= len; i += 8) {
		memcpy(&w, key + i, 8);
		h = (h ^ w) * 0x9e3779b97f4a7c15ull;
		h ^= h >> 32;
	}
	if (i < len) {
		w = 0;
		memcpy(&w, key + i, len - i);
		h = (h ^ w) * 0x9e3779b97f4a7c15ull;
		h ^= h >> 32;
	}
	h ^= h >> 29;
	h *= 0xbf58476d1ce4e5b9ull;
	return h ^ (h >> 32);
}

static void keyq_grow(struct tpu_rendezvous *rdv)
{
	size_t n = rdv->nbuckets ? rdv->nbuckets * 2 : KEYQ_MIN_BUCKETS;
	struct tpu__keyq **b = calloc(n, sizeof(*b));
	size_t i;

	/* Without memory the chains just get longer. */
	if (!b)
		return;
	for (i = 0; i < rdv->nbuckets; i++) {
		while (rdv->buckets[i]) {
			struct tpu__keyq *kq = rdv->buckets[i];

			rdv->buckets[i] = kq->next;
			kq->next = b[kq->hash & (n - 1)];
			b[kq->hash & (n - 1)] = kq;
		}
	}
	free(rdv->buckets);
	rdv->buckets = b;
	rdv->nbuckets = n;
}

/* A FIFO for a key of @key_len bytes: a free one that fits, else a new one. */
static struct tpu__keyq *keyq_get(struct tpu_rendezvous *rdv, size_t key_len)
{
	struct tpu__keyq *kq = tpu__free_list_take(&rdv->keyq_free, key_len);
	size_t cap = tpu__free_list_room(key_len, KEY_CAP_MIN);

	if (kq) {
		cap = kq->key_cap;
		memset(kq, 0, sizeof(*kq));
	} else {
		kq = calloc(1, sizeof(*kq) + cap);
		if (!kq)
			return NULL;
	}
	kq->key_cap = cap;
	return kq;
}

struct tpu__keyq *tpu__keyq_find(struct tpu_rendezvous *rdv, const uint8_t *key, size_t key_len,
				 bool create)
{
	return tpu__keyq_find_hashed(rdv, key, key_len, tpu__rdv_key_hash(key, key_len), create);
}

struct tpu__keyq *tpu__keyq_find_hashed(struct tpu_rendezvous *rdv, const uint8_t *key,
					size_t key_len, uint64_t h, bool create)
{
	struct tpu__keyq *kq;

	if (rdv->nbuckets) {
		for (kq = rdv->buckets[h & (rdv->nbuckets - 1)]; kq; kq = kq->next)
			if (kq->hash == h && kq->key_len == key_len &&
			    memcmp(kq->key, key, key_len) == 0)
				return kq;
	}
	if (!create)
		return NULL;
	if (rdv->nkeys >= rdv->nbuckets)
		keyq_grow(rdv);
	if (!rdv->nbuckets)
		return NULL;
	kq = keyq_get(rdv, key_len);
	if (!kq)
		return NULL;
	kq->hash = h;
	kq->key_len = key_len;
	memcpy(kq->key, key, key_len);
	kq->next = rdv->buckets[h & (rdv->nbuckets - 1)];
	rdv->buckets[h & (rdv->nbuckets - 1)] = kq;
	rdv->nkeys++;
	return kq;
}

static struct tpu__fifo *fifo_of(struct tpu__keyq *kq, const struct tpu__op *op)
{
	return op->kind == TPU__OP_SEND ? &kq->sends : &kq->recvs;
}

void tpu__keyq_append(struct tpu__keyq *kq, struct tpu__op *op)
{
	struct tpu__fifo *f = fifo_of(kq, op);

	op->key_next = NULL;
	if (f->tail)
		f->tail->key_next = op;
	else
		f->head = op;
	f->tail = op;
}

static void keyq_release_if_empty(struct tpu_rendezvous *rdv, struct tpu__keyq *kq)
{
	struct tpu__keyq **p;

	if (kq->sends.head || kq->recvs.head)
		return;
	for (p = &rdv->buckets[kq->hash & (rdv->nbuckets - 1)]; *p; p = &(*p)->next) {
		if (*p == kq) {
			*p = kq->next;
			rdv->nkeys--;
			tpu__free_list_put(&rdv->keyq_free, kq);
			return;
		}
	}
}

static void fifo_unlink(struct tpu__fifo *f, struct tpu__op *op)
{
	struct tpu__op **p, *prev = NULL;

	for (p = &f->head; *p; prev = *p, p = &(*p)->key_next) {
		if (*p == op) {
			*p = op->key_next;
			if (f->tail == op)
				f->tail = prev;
			return;
		}
	}
}

void tpu__keyq_remove(struct tpu_rendezvous *rdv, struct tpu__op *op)
{
	fifo_unlink(fifo_of(op->keyq, op), op);
	keyq_release_if_empty(rdv, op->keyq);
}

bool tpu__keyq_recv_busy(const struct tpu__keyq *kq, const struct tpu__op *op)
{
	const struct tpu__op *o;

	for (o = kq->recvs.head; o && o != op; o = o->key_next)
		if (o->stage == TPU__STAGE_STARTED)
			return true;
	return false;
}

static size_t fail_queued(struct tpu__keyq *kq, tpu_status status)
{
	struct tpu__op *o;
	size_t n = 0;

	for (o = kq->recvs.head; o; o = o->key_next) {
		if (o->stage != TPU__STAGE_QUEUED)
			continue;
		o->stage = TPU__STAGE_STARTED;
		o->status = status;
		o->len = 0;
		tpu__op_complete(o);
		n++;
	}
	return n;
}

size_t tpu__keyq_fail_queued(struct tpu_rendezvous *rdv, struct tpu__keyq *kq, tpu_status status)
{
	size_t i, n = 0;

	if (kq)
		return fail_queued(kq, status);
	for (i = 0; i < rdv->nbuckets; i++)
		for (kq = rdv->buckets[i]; kq; kq = kq->next)
			n += fail_queued(kq, status);
	return n;
}

/* Hand the oldest queued RECV of the key to the implementation. */
static void start_next_recv(struct tpu_rendezvous *rdv, struct tpu__keyq *kq)
{
	struct tpu__op *o;
	tpu_status st;

	for (o = kq->recvs.head; o; o = o->key_next) {
		if (o->stage == TPU__STAGE_STARTED)
			return;
		if (o->stage == TPU__STAGE_QUEUED)
			break;
	}
	if (!o)
		return;
	o->stage = TPU__STAGE_STARTED;
	st = rdv->ops->recv(rdv, o);
	if (st) {
		o->status = st;
		o->len = 0;
		tpu__op_complete(o);
	}
}

void tpu__op_free(struct tpu__op *op)
{
	free(op->key);
	free(op);
}

static void op_release(void *op)
{
	tpu__op_free(op);
}

void tpu__rdv_free_lists_init(struct tpu_rendezvous *rdv)
{
	tpu__free_list_init(&rdv->op_free, offsetof(struct tpu__op, key_next),
			    offsetof(struct tpu__op, key_cap), OP_FREE_MAX, op_release);
	tpu__free_list_init(&rdv->keyq_free, offsetof(struct tpu__keyq, next),
			    offsetof(struct tpu__keyq, key_cap), KEYQ_FREE_MAX, NULL);
}

struct tpu__op *tpu__op_get(struct tpu_rendezvous *rdv, size_t key_len)
{
	struct tpu__op *op = tpu__free_list_take(&rdv->op_free, key_len);
	size_t cap;

	if (op)
		return op;
	cap = tpu__free_list_room(key_len, KEY_CAP_MIN);
	op = malloc(sizeof(*op));
	if (!op)
		return NULL;
	op->key = malloc(cap);
	if (!op->key) {
		free(op);
		return NULL;
	}
	op->key_cap = cap;
	return op;
}

void tpu__op_recycle(struct tpu_rendezvous *rdv, struct tpu__op *op)
{
	tpu__free_list_put(&rdv->op_free, op);
}

void tpu__keyq_free_all(struct tpu_rendezvous *rdv)
{
	size_t i;

	for (i = 0; i < rdv->nbuckets; i++) {
		while (rdv->buckets[i]) {
			struct tpu__keyq *kq = rdv->buckets[i];

			rdv->buckets[i] = kq->next;
			free(kq);
		}
	}
	free(rdv->buckets);
	rdv->buckets = NULL;
	rdv->nbuckets = 0;
	rdv->nkeys = 0;
	tpu__free_list_drain(&rdv->keyq_free);
	tpu__free_list_drain(&rdv->op_free);
}

void tpu__rdv_free(struct tpu_rendezvous *rdv)
{
	tpu__keyq_free_all(rdv);
	pthread_mutex_destroy(&rdv->lock);
	tpu__quarantine(rdv, &rdv->magic);
}

static void call_back(struct tpu__op *op)
{
	switch (op->kind) {
	case TPU__OP_SEND:
		if (op->cb.send)
			op->cb.send(op->cb_arg, op->status);
		break;
	case TPU__OP_RECV:
		op->cb.recv(op->cb_arg, op->status, op->len);
		break;
	case TPU__OP_RECV_BUFFER:
		if (op->status && op->out_buffer) {
			tpu_buffer_free(op->out_buffer);
			op->out_buffer = NULL;
		}
		op->cb.recv_buffer(op->cb_arg, op->status, op->status ? NULL : op->out_buffer,
				   op->len);
		break;
	}
}

/* Pop the DONE ops at the head of @f onto @ready. */
static size_t take_ready(struct tpu__fifo *f, struct tpu__op ***ready)
{
	size_t n = 0;

	while (f->head && f->head->stage == TPU__STAGE_DONE) {
		struct tpu__op *o = f->head;

		f->head = o->key_next;
		if (!f->head)
			f->tail = NULL;
		o->key_next = NULL;
		**ready = o;
		*ready = &o->key_next;
		n++;
	}
	return n;
}

static void op_done_task(struct tpu__task *t)
{
	tpu__rdv_op_done(tpu__container_of(t, struct tpu__op, done));
}

/* The rendezvous whose lock this thread holds while in its implementation. */
static _Thread_local struct tpu_rendezvous *impl_caller;

bool tpu__rdv_issuing(const struct tpu_rendezvous *rdv)
{
	return rdv && impl_caller == rdv;
}

tpu_status tpu__rdv_call_impl(struct tpu_rendezvous *rdv, struct tpu__op *op)
{
	struct tpu_rendezvous *outer = impl_caller;
	tpu_status st;

	impl_caller = rdv;
	st = op->kind == TPU__OP_SEND ? rdv->ops->send(rdv, op) : rdv->ops->recv(rdv, op);
	impl_caller = outer;
	return st;
}

/*
 * Whether @op can be finished on the spot (rdv->lock held by this thread):
 * a receive must be its key's only one, so that nothing waits to be
 * started or called back behind it; a send must not leave a queued
 * receive to start.
 */
static bool can_finish_here(const struct tpu__op *op)
{
	const struct tpu__keyq *kq = op->keyq;
	const struct tpu__op *head = kq->recvs.head;

	if (!op->direct || op->rdv->closing)
		return false;
	if (op->kind == TPU__OP_SEND)
		return !head || head->stage != TPU__STAGE_QUEUED;
	return head == op && !op->key_next;
}

/* Finish @op under rdv->lock: what tpu__rdv_op_done() does, for one op. */
static void finish_here(struct tpu__op *op)
{
	struct tpu_rendezvous *rdv = op->rdv;
	struct tpu__keyq *kq = op->keyq;

	if (op->kind == TPU__OP_SEND) {
		fifo_unlink(&kq->sends, op);
	} else {
		kq->recvs.head = NULL;
		kq->recvs.tail = NULL;
	}
	op->stage = TPU__STAGE_DONE;
	op->key_next = NULL;
	keyq_release_if_empty(rdv, kq);
	call_back(op);
	tpu__op_recycle(rdv, op);
	rdv->live--;
}

void tpu__op_complete(struct tpu__op *op)
{
	if (impl_caller == op->rdv && can_finish_here(op)) {
		finish_here(op);
		return;
	}
	op->done.fn = op_done_task;
	tpu__ctx_complete(op->rdv->ctx, &op->done);
}

void tpu__op_complete_unlocked(struct tpu__op *op)
{
	struct tpu_rendezvous *rdv = op->rdv;
	bool finished = false;

	if (op->direct) {
		pthread_mutex_lock(&rdv->lock);
		finished = can_finish_here(op);
		if (finished)
			finish_here(op);
		pthread_mutex_unlock(&rdv->lock);
	}
	if (!finished) {
		op->done.fn = op_done_task;
		tpu__ctx_complete(rdv->ctx, &op->done);
	}
}

/* @key as printable text, other bytes as \xHH, cut with "..." to fit. */
static void key_text(const uint8_t *key, size_t len, char *buf, size_t size)
{
	size_t o = 0, i;

	for (i = 0; i < len; i++) {
		bool plain = key[i] >= 0x20 && key[i] < 0x7f && key[i] != '\\';

		if (o + (plain ? 1 : 4) + 4 > size)	/* room for "..." and the NUL */
			break;
		if (plain)
			buf[o++] = (char)key[i];
		else
			o += (size_t)snprintf(buf + o, size - o, "\\x%02x", key[i]);
	}
	if (i < len) {
		memcpy(buf + o, "...", 3);
		o += 3;
	}
	buf[o] = '\0';
}

/*
 * With TPU_LOG=debug: every key this member has pending, sends and receives,
 * so that a receive that never matches its send (a key one byte apart) can
 * be seen next to it.  Caller holds rdv->lock.
 */
void tpu__keyq_log_pending(struct tpu_rendezvous *rdv, const char *why)
{
	char text[160];
	size_t n = 0;

	if (!tpu__log_debug_enabled())
		return;
	for (size_t b = 0; b < rdv->nbuckets; b++) {
		for (struct tpu__keyq *kq = rdv->buckets[b]; kq; kq = kq->next) {
			size_t sends = 0, recvs = 0;

			for (struct tpu__op *o = kq->sends.head; o; o = o->key_next)
				sends++;
			for (struct tpu__op *o = kq->recvs.head; o; o = o->key_next)
				recvs++;
			if (!sends && !recvs)
				continue;
			key_text(kq->key, kq->key_len, text, sizeof(text));
			tpu__log_debug("rendezvous %p: %s: pending %zu send%s, %zu recv%s of \"%s\" (%zu bytes)",
				       (void *)rdv, why, sends, sends == 1 ? "" : "s", recvs,
				       recvs == 1 ? "" : "s", text, kq->key_len);
			n++;
		}
	}
	if (!n)
		tpu__log_debug("rendezvous %p: %s: nothing pending", (void *)rdv, why);
}

/* With TPU_LOG=debug: a receive timed out, and what was pending then.  Caller holds rdv->lock. */
static void log_timeout(struct tpu_rendezvous *rdv, const uint8_t *key, size_t key_len)
{
	char text[160];

	if (!tpu__log_debug_enabled())
		return;
	key_text(key, key_len, text, sizeof(text));
	tpu__log_debug("rendezvous %p: a receive of \"%s\" timed out", (void *)rdv, text);
	tpu__keyq_log_pending(rdv, "at that time");
}

void tpu__rdv_log_timeout(struct tpu_rendezvous *rdv, const void *key, size_t key_len)
{
	pthread_mutex_lock(&rdv->lock);
	log_timeout(rdv, key, key_len);
	pthread_mutex_unlock(&rdv->lock);
}

void tpu__rdv_op_done(struct tpu__op *op)
{
	struct tpu_rendezvous *rdv = op->rdv;
	struct tpu__keyq *kq = op->keyq;
	struct tpu__op *ready = NULL, **tail = &ready;
	size_t n;
	bool last;

	pthread_mutex_lock(&rdv->lock);
	if (op->status == -ETIMEDOUT)
		log_timeout(rdv, op->key, op->key_len);
	op->stage = TPU__STAGE_DONE;
	if (op->kind == TPU__OP_SEND) {
		/* A send waits for no other: a duplicate's -EEXIST must not sit behind the original. */
		fifo_unlink(&kq->sends, op);
		op->key_next = NULL;
		ready = op;
		n = 1;
	} else {
		n = take_ready(&kq->recvs, &tail);
	}
	/* Counted as running, so that a callback destroying the rendezvous
	 * does not wait for itself (see tpu_rendezvous_destroy). */
	rdv->in_callback += n;
	if (!rdv->closing)
		start_next_recv(rdv, kq);
	keyq_release_if_empty(rdv, kq);
	pthread_mutex_unlock(&rdv->lock);

	while (ready) {
		struct tpu__op *o = ready;

		ready = o->key_next;
		call_back(o);
		pthread_mutex_lock(&rdv->lock);
		tpu__op_recycle(rdv, o);
		rdv->live--;
		rdv->in_callback--;
		last = rdv->ops == NULL && rdv->in_callback == 0;
		pthread_mutex_unlock(&rdv->lock);
		if (last)
			tpu__rdv_free(rdv);
	}
}

size_t tpu__rdv_started(struct tpu_rendezvous *rdv, const uint8_t *key, size_t key_len)
{
	struct tpu__keyq *kq = tpu__keyq_find(rdv, key, key_len, false);
	const struct tpu__op *o;
	size_t n = 0;

	if (!kq)
		return 0;
	for (o = kq->sends.head; o; o = o->key_next)
		n += o->stage == TPU__STAGE_STARTED;
	for (o = kq->recvs.head; o; o = o->key_next)
		n += o->stage == TPU__STAGE_STARTED;
	return n;
}
