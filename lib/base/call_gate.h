/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Calls queued to an object's context thread from any thread, against
 * the object's free on that thread: a count of the calls queued, with a
 * FREED bit.  A caller counts its call in before it queues it, and backs
 * off when the bit was set (the memory stays readable: tpu__quarantine);
 * the context thread frees the object only by setting the bit on a count
 * of 0, so a call counted in first runs on a live object, and the last
 * such call to end does the free instead.  The pipe's calls and the
 * listener's accepts use it.
 */
#ifndef TPU_CALL_GATE_H
#define TPU_CALL_GATE_H

#include <stdatomic.h>
#include <stdbool.h>

#define TPU__GATE_FREED		0x80000000u
#define TPU__GATE_COUNT		(TPU__GATE_FREED - 1)

/* Any thread: count a call in; false when the object is freed (queue nothing). */
static inline bool tpu__gate_enter(atomic_uint *gate)
{
	return !(atomic_fetch_add(gate, 1) & TPU__GATE_FREED);
}

/* Context thread: a counted call ended; true when it was the last one queued. */
static inline bool tpu__gate_leave(atomic_uint *gate)
{
	return atomic_fetch_sub(gate, 1) == 1;
}

/* Context thread: calls queued and not ended. */
static inline unsigned int tpu__gate_calls(atomic_uint *gate)
{
	return atomic_load(gate) & TPU__GATE_COUNT;
}

/* Context thread: true when no call is queued, and the object is now marked freed. */
static inline bool tpu__gate_close(atomic_uint *gate)
{
	unsigned int none = 0;

	return atomic_compare_exchange_strong(gate, &none, TPU__GATE_FREED);
}

#endif /* TPU_CALL_GATE_H */
