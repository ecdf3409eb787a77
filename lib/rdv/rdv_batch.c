// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Receiving a batch of keys: one receive per item through the public call,
 * so per-key order, timeouts and cancel are those of tpu_rendezvous_recv(),
 * and one callback when the last of them is done.  Every argument is
 * checked before the first receive is issued: once one is out, the batch's
 * callback must run, so a later issue failure becomes that item's status.
 */
#include <stdatomic.h>
#include <stdlib.h>

#include "rdv_queue.h"

struct batch {
	struct tpu_recv_item *items;
	size_t n;
	atomic_size_t left;
	tpu_recv_batch_cb done;
	void *arg;
};

struct batch_slot {
	struct batch *b;
	size_t i;
};

static void batch_finish(struct batch *b)
{
	tpu_status first = 0;
	size_t i;

	for (i = 0; i < b->n && !first; i++)
		first = b->items[i].status;
	b->done(b->arg, first, b->items, b->n);
	free(b);
}

static void item_done(void *arg, tpu_status status, size_t len)
{
	struct batch_slot *s = arg;
	struct batch *b = s->b;

	b->items[s->i].status = status;
	b->items[s->i].len = len;
	free(s);
	if (atomic_fetch_sub(&b->left, 1) == 1)
		batch_finish(b);
}

static tpu_status check_items(const struct tpu_recv_item *items, size_t n)
{
	size_t i;

	if (!items || n == 0 || n > TPU_RDV_BATCH_MAX)
		return -EINVAL;
	for (i = 0; i < n; i++) {
		if (!items[i].key || items[i].key_len == 0)
			return -EINVAL;
		if (items[i].key_len > TPU__KEY_MAX)
			return -ENAMETOOLONG;
		if (!items[i].dst.data && items[i].dst.len)
			return -EINVAL;
	}
	return 0;
}

TPU_API tpu_status tpu_rendezvous_recv_batch(struct tpu_rendezvous *rdv,
					     struct tpu_recv_item *items, size_t n,
					     uint64_t timeout_ns, tpu_recv_batch_cb done,
					     void *arg)
{
	struct batch_slot **slots;
	struct batch *b;
	tpu_status st;
	size_t i;

	st = tpu__magic_check(rdv, rdv ? &rdv->magic : NULL, TPU__MAGIC_RDV);
	if (!st)
		st = tpu__ctx_check(rdv->ctx);
	if (!st && !done)
		st = -EINVAL;
	if (!st)
		st = check_items(items, n);
	if (st)
		return st;
	b = calloc(1, sizeof(*b));
	slots = calloc(n, sizeof(*slots));
	if (!b || !slots)
		goto nomem;
	for (i = 0; i < n; i++) {
		slots[i] = malloc(sizeof(**slots));
		if (!slots[i])
			goto nomem;
		*slots[i] = (struct batch_slot){ .b = b, .i = i };
		items[i].status = 0;
		items[i].len = 0;
	}
	b->items = items;
	b->n = n;
	b->done = done;
	b->arg = arg;
	/* One extra count, dropped below, so no item can finish the batch early. */
	atomic_init(&b->left, n + 1);
	for (i = 0; i < n; i++) {
		st = tpu_rendezvous_recv(rdv, items[i].key, items[i].key_len, &items[i].dst,
					 timeout_ns, item_done, slots[i]);
		if (st && i == 0) {
			/* Nothing issued yet: the caller hears of it, not the callback. */
			for (; i < n; i++)
				free(slots[i]);
			free(slots);
			free(b);
			return st;
		}
		if (st)
			item_done(slots[i], st, 0);
	}
	free(slots);
	if (atomic_fetch_sub(&b->left, 1) == 1)
		batch_finish(b);
	return 0;
nomem:
	if (slots)
		for (i = 0; i < n; i++)
			free(slots[i]);
	free(slots);
	free(b);
	return -ENOMEM;
}

struct batch_waiter {
	struct tpu__waitword word;
	tpu_status status;
};

static void batch_woken(void *arg, tpu_status status, struct tpu_recv_item *items, size_t n)
{
	struct batch_waiter *w = arg;

	(void)items;
	(void)n;
	w->status = status;
	tpu__waitword_post(&w->word);	/* last: the waiter may return at once */
}

TPU_API tpu_status tpu_rendezvous_recv_batch_wait(struct tpu_rendezvous *rdv,
						  struct tpu_recv_item *items, size_t n,
						  uint64_t timeout_ns)
{
	struct batch_waiter w = { .word = TPU__WAITWORD_INIT };
	tpu_status st;

	st = tpu__magic_check(rdv, rdv ? &rdv->magic : NULL, TPU__MAGIC_RDV);
	if (!st)
		st = tpu__ctx_check(rdv->ctx);
	if (st)
		return st;
	if (tpu__ctx_on_thread(rdv->ctx))
		return -EDEADLK;
	st = tpu_rendezvous_recv_batch(rdv, items, n, timeout_ns, batch_woken, &w);
	if (st)
		return st;
	tpu__waitword_wait(&w.word, 0);
	return w.status;
}
