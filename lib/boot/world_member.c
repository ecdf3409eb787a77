// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Who is in the world.  The launcher's numbers are claims, so every rank
 * checks them against the store before it publishes anything:
 *
 * - the size: the first rank to add one to "tpu/world/size-claim" sets
 *   "tpu/world/size" to "SIZE RANK"; every later rank compares its own;
 * - the rank: each rank adds one to "tpu/world/claim/RANK", so exactly one
 *   process owns each rank's entry, however many were started with it.
 *
 * A rank that finds a conflict sets "tpu/world/broken" to "STATUS TEXT".
 * Every wait of the world (for a rank's URLs, the size, a barrier) waits
 * in slices and looks at that key between them, so the other ranks fail
 * with the same status and text soon after, instead of at their timeout.
 * Only the store's existing SET, GET and ADD are used.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "world.h"

#define BROKEN_KEY	"tpu/world/broken"
/* How often a waiting rank looks whether the world broke. */
#define SLICE_MS	200u
/* How long a second rank 0 looks for the first one's claim. */
#define RANK0_PROBE_MS	2000u

/* Printable ASCII only: the text came through the store, from anyone. */
static void sanitize(char *s)
{
	for (; *s; s++)
		if (*s < 0x20 || *s > 0x7e)
			*s = '?';
}

tpu_status tpu__world_break(struct tpu_world *w, tpu_status st, const char *fmt, ...)
{
	char text[200], val[220];
	va_list ap;
	int n;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	fprintf(stderr, "tpu: world: rank %d: %s\n", w->info.rank, text);
	tpu__log_debug("world: rank %d breaks the world: %s", w->info.rank, text);
	n = snprintf(val, sizeof(val), "%d %s", (int)st, text);
	/* Best effort: the others still time out if this does not arrive. */
	if (tpu__world_store_set(w, BROKEN_KEY, val, (size_t)n))
		tpu__log_debug("world: could not tell the other ranks");
	return st;
}

/*
 * 0 if nobody broke the world, else the status it was broken with (only
 * those this file sets are believed; anything else is -EPROTO).
 */
tpu_status tpu__world_broken(struct tpu_world *w)
{
	char val[256];
	size_t len = 0;
	tpu_status st;
	long code;
	char *end;

	st = tpu__world_store_get(w, BROKEN_KEY, val, sizeof(val) - 1, &len, 0);
	if (st == -ETIMEDOUT)
		return 0;		/* not set */
	if (st && st != -EMSGSIZE)
		return st;
	val[len < sizeof(val) ? len : sizeof(val) - 1] = '\0';
	code = strtol(val, &end, 10);
	st = (code == -EEXIST || code == -EINVAL) && *end == ' ' ? (tpu_status)code : -EPROTO;
	sanitize(val);
	fprintf(stderr, "tpu: world: rank %d: the world is broken: %s\n", w->info.rank,
		st == -EPROTO ? val : end + 1);
	return st;
}

tpu_status tpu__world_wait_key(struct tpu_world *w, const char *key, void *buf, size_t size,
			       size_t *len, uint64_t deadline)
{
	for (;;) {
		uint64_t now = tpu__store_now_ms();
		uint64_t slice = deadline > now ? deadline - now : 0;
		tpu_status st;

		if (slice > SLICE_MS)
			slice = SLICE_MS;
		st = tpu__world_store_get(w, key, buf, size, len, (uint32_t)slice);
		/* A reply that never came closed the stream: that is the timeout too. */
		if (st != -ETIMEDOUT || tpu__world_store_lost(w))
			return st;
		st = tpu__world_broken(w);
		if (st)
			return st;
		/* A destroy on another thread ends this call (world.h). */
		if (atomic_load(&w->cancel))
			return TPU_E_CLOSED;
		if (tpu__store_now_ms() >= deadline)
			return -ETIMEDOUT;
	}
}

/* Every rank of the world has this size, or the first rank to come says otherwise. */
static tpu_status check_size(struct tpu_world *w, uint64_t deadline)
{
	char val[32];
	size_t len = 0;
	int64_t n = 0;
	unsigned int size, rank;
	tpu_status st;
	int k;

	st = tpu__world_store_add(w, "tpu/world/size-claim", 1, &n);
	if (st)
		return st;
	if (n == 1) {
		k = snprintf(val, sizeof(val), "%d %d", w->info.size, w->info.rank);
		return tpu__world_store_set(w, "tpu/world/size", val, (size_t)k);
	}
	st = tpu__world_wait_key(w, "tpu/world/size", val, sizeof(val) - 1, &len, deadline);
	if (st)
		return st == -EMSGSIZE ? -EPROTO : st;
	val[len] = '\0';
	if (sscanf(val, "%u %u", &size, &rank) != 2)
		return -EPROTO;
	if (size == (unsigned int)w->info.size)
		return 0;
	return tpu__world_break(w, -EINVAL, "the ranks disagree on the world's size: rank %d was "
				"started with %d ranks, rank %u (the first to join) with %u",
				w->info.rank, w->info.size, rank, size);
}

tpu_status tpu__world_join(struct tpu_world *w, uint64_t deadline)
{
	char key[48];
	int64_t n = 0;
	tpu_status st;

	st = check_size(w, deadline);
	if (st)
		return st;
	snprintf(key, sizeof(key), "tpu/world/claim/%d", w->info.rank);
	st = tpu__world_store_add(w, key, 1, &n);
	if (st)
		return st;
	if (n != 1)
		return tpu__world_break(w, -EEXIST, "rank %d joined twice: another process of this "
					"job was started as rank %d too", w->info.rank,
					w->info.rank);
	return tpu__world_broken(w);
}

tpu_status tpu__world_rank0_again(struct tpu_world *w, const struct tpu__secret *secret,
				  uint64_t deadline)
{
	uint64_t now = tpu__store_now_ms();
	uint64_t until = deadline < now + RANK0_PROBE_MS ? deadline : now + RANK0_PROBE_MS;
	char why[256], val[32];
	size_t len = 0;
	tpu_status st;

	if (until <= now ||
	    tpu__store_client_connect(w->info.store_host, w->info.store_port,
				      (uint32_t)(until - now), &w->store, why, sizeof(why)))
		return -EADDRINUSE;
	/* Only a store whose rank 0 has claimed its rank is this world's. */
	tpu__world_store_bound(w, until);
	st = secret->set ? tpu__store_client_auth(w->store, secret, why, sizeof(why)) : 0;
	if (!st)
		st = tpu__world_store_get(w, "tpu/world/claim/0", val, sizeof(val), &len,
			    (uint32_t)(until - now));
	if (st) {
		tpu__store_client_close(w->store);
		w->store = NULL;
		return -EADDRINUSE;
	}
	tpu__world_store_bound(w, deadline);
	st = tpu__world_join(w, deadline);
	return st ? st : -EADDRINUSE;
}
