// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Swapping small blobs through the world's store (tpu_world_exchange_blobs):
 * each rank sets its blob under the call's round and its rank, then reads
 * every other rank's.  The store bounds what it holds; here a value that
 * would not fit the caller's room is refused, whatever a peer set.  Rounds
 * count calls, so every rank makes the same calls in the same order, as
 * with the barrier; a round's keys stay in the store until the world ends.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "world.h"

_Static_assert(TPU_WORLD_BLOB_MAX <= STORE_VALUE_MAX, "a blob is one store value");

static tpu_status exchange(struct tpu_world *w, const void *blob, size_t len, uint8_t *out,
			   size_t stride, size_t *lens)
{
	uint64_t deadline = tpu__store_now_ms() + w->timeout_ms;
	unsigned int round = w->exchanges++;
	int me = w->info.rank;
	tpu_status st, first = 0;
	char key[64];

	tpu__world_store_bound(w, deadline);
	snprintf(key, sizeof(key), "tpu/blobs/%u/%d", round, me);
	st = tpu__world_store_set(w, key, blob, len);
	if (st)
		return st;
	memcpy(out + (size_t)me * stride, blob, len);
	lens[me] = len;
	for (int r = 0; r < w->info.size; r++) {
		size_t got = 0;

		if (r == me)
			continue;
		snprintf(key, sizeof(key), "tpu/blobs/%u/%d", round, r);
		st = tpu__world_wait_key(w, key, out + (size_t)r * stride, stride, &got, deadline);
		if (st == -ETIMEDOUT)
			fprintf(stderr, "tpu: world: rank %d: rank %d did not publish its blob "
				"within %u ms\n", me, r, w->timeout_ms);
		/* Too long for the room: say how long, read on, fail at the end. */
		if (st == -EMSGSIZE) {
			lens[r] = got;
			if (!first)
				first = st;
			continue;
		}
		if (st)
			return st;
		lens[r] = got;
	}
	return first ? first : tpu__world_broken(w);
}

TPU_API tpu_status tpu_world_exchange_blobs(struct tpu_world *w, const void *blob, size_t len,
					    void *out, size_t stride, size_t *lens)
{
	tpu_status st = tpu__world_check(w);

	if (st)
		return st;
	if ((!blob && len) || !out || !lens || len > TPU_WORLD_BLOB_MAX || len > stride ||
	    stride > SIZE_MAX / (size_t)w->info.size)
		return -EINVAL;
	if (tpu__ctx_on_thread(w->ctx))
		return -EDEADLK;
	for (int r = 0; r < w->info.size; r++)
		lens[r] = 0;
	st = tpu__world_enter(w);
	if (st)
		return st;
	pthread_mutex_lock(&w->store_lock);
	st = exchange(w, blob ? blob : "", len, out, stride, lens);
	pthread_mutex_unlock(&w->store_lock);
	return tpu__world_leave(w, st);
}
