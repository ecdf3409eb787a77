/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * A bounded stack of records kept for reuse instead of being freed.
 *
 * The rendezvous hot paths recycle their records (ops, key FIFOs, outbox
 * entries, requests, writes, fetches) so that a warm round trip allocates
 * nothing; the bound gives a burst's memory back.  A record links through
 * a pointer member of its own (@link_off), and may carry a size_t telling
 * how much room it has for a variable part (@room_off), so that a taker
 * gets one that fits.  No lock of its own: its owner's lock or thread
 * guards it, as it guards the records.
 */
#ifndef TPU_FREE_LIST_H
#define TPU_FREE_LIST_H

#include <stddef.h>
#include <stdint.h>

/* @room_off of a list whose records have no variable part. */
#define TPU__FREE_NO_ROOM	SIZE_MAX

struct tpu__free_list {
	void *head;			/* the record kept last */
	unsigned int count;		/* records kept */
	unsigned int max;		/* keep at most this many */
	size_t link_off;		/* offsetof the record's link pointer */
	size_t room_off;		/* offsetof its size_t room, or TPU__FREE_NO_ROOM */
	void (*release)(void *rec);	/* frees a record; NULL: free() */
};

/* An empty list keeping at most @max records (0: keeps none). */
void tpu__free_list_init(struct tpu__free_list *l, size_t link_off, size_t room_off,
			 unsigned int max, void (*release)(void *rec));
/*
 * The most recently kept record with room for @need bytes (any record when
 * the list has no room field), or NULL.  Its contents are as they were put.
 */
void *tpu__free_list_take(struct tpu__free_list *l, size_t need);
/*
 * tpu__free_list_take(@need), or else a new record of @fixed bytes and
 * room for max(@need, @min) items of @unit bytes each, its room field set
 * if the list has one (0, 0, 0 for records without a variable part); the
 * other fields are the caller's to set.  NULL without memory.
 */
void *tpu__free_list_get(struct tpu__free_list *l, size_t need, size_t min, size_t fixed,
			 size_t unit);
/* Keep @rec (NULL is ignored), or release it when the list is full. */
void tpu__free_list_put(struct tpu__free_list *l, void *rec);
/* Release every record kept. */
void tpu__free_list_drain(struct tpu__free_list *l);

/*
 * The room to give a new record that must hold @need bytes: at least @min,
 * and above it @need rounded up to 64 bytes, so that a later key a few
 * bytes longer (a step counter gaining a digit) still fits a recycled one.
 */
static inline size_t tpu__free_list_room(size_t need, size_t min)
{
	if (need <= min)
		return min;
	return need > SIZE_MAX - 63 ? need : (need + 63) & ~(size_t)63;
}

#endif /* TPU_FREE_LIST_H */
