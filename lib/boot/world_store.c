// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The store a world talks to: the library's own (rank 0's store server,
 * reached over TCP) or one the caller supplies as three callbacks
 * (tpu_world_create_with_store(), e.g. the c10d::Store torch hands a
 * process group).  Everything else in lib/boot goes through these four
 * calls and does not care which.
 *
 * A caller's store is trusted as much as the caller trusts it, but its
 * answers are still checked for size here: a get that claims more bytes
 * than fit is -EMSGSIZE, whatever status the callback gave.
 */
#include <string.h>

#include "world.h"

tpu_status tpu__world_store_set(struct tpu_world *w, const char *key, const void *val,
				size_t len)
{
	if (w->ext_store)
		return w->ext.set(w->ext.arg, key, val, len);
	return tpu__store_set(w->store, key, val, len);
}

tpu_status tpu__world_store_get(struct tpu_world *w, const char *key, void *buf, size_t size,
				size_t *len, uint32_t timeout_ms)
{
	size_t got = 0;
	tpu_status st;

	if (!w->ext_store)
		return tpu__store_get(w->store, key, buf, size, len, timeout_ms);
	st = w->ext.get(w->ext.arg, key, buf, size, &got, timeout_ms);
	if (st > 0 || st < -4095)
		st = -EPROTO;
	if ((!st || st == -EMSGSIZE) && got > size)
		st = -EMSGSIZE;
	*len = got;
	return st;
}

tpu_status tpu__world_store_add(struct tpu_world *w, const char *key, int64_t delta,
				int64_t *total)
{
	if (w->ext_store)
		return w->ext.add(w->ext.arg, key, delta, total);
	return tpu__store_add(w->store, key, delta, total);
}

void tpu__world_store_bound(struct tpu_world *w, uint64_t deadline)
{
	/* A caller's get takes its timeout per call; set and add are its own affair. */
	if (!w->ext_store)
		tpu__store_client_bound(w->store, deadline);
}

bool tpu__world_store_lost(const struct tpu_world *w)
{
	return !w->ext_store && tpu__store_client_fd(w->store) < 0;
}
