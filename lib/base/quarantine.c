// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Use after destroy and double destroy of the public objects (contexts,
 * rendezvous, pipes, listeners), caught cheaply.  Every object starts
 * with a magic word that its public calls check on entry.  When the object
 * goes away its magic is poisoned and, instead of being freed, its memory
 * waits here while the next TPU__QUARANTINE objects go away; only then is
 * it freed.  A call on an object destroyed recently therefore reads its own
 * live (poisoned) memory and fails with TPU_E_DESTROYED, and neither
 * AddressSanitizer nor valgrind sees a read of freed memory.  An object
 * destroyed longer ago than that is freed memory again: the check then is
 * as good as luck, like any use after free.
 */
#include <pthread.h>
#include <stdlib.h>

#include "base.h"

#define TPU__QUARANTINE	256

static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static void *q_ring[TPU__QUARANTINE];
static size_t q_next;

void tpu__quarantine(void *obj, uint32_t *magic)
{
	void *old;

	if (!obj)
		return;
	__atomic_store_n(magic, TPU__MAGIC_DEAD, __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&q_lock);
	old = q_ring[q_next];
	q_ring[q_next] = obj;
	q_next = (q_next + 1) % TPU__QUARANTINE;
	pthread_mutex_unlock(&q_lock);
	free(old);
}

tpu_status tpu__magic_check(const void *obj, const uint32_t *magic, uint32_t want)
{
	uint32_t m;

	if (!obj)
		return -EINVAL;
	m = __atomic_load_n(magic, __ATOMIC_SEQ_CST);
	if (m == want)
		return 0;
	if (m == TPU__MAGIC_DEAD) {
		tpu__log_debug("object %p used after it was destroyed or closed", obj);
		return TPU_E_DESTROYED;
	}
	tpu__log_debug("object %p is not what the call expects (bad pointer?)", obj);
	return -EINVAL;
}
