// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* Bounded free lists of recycled records (free_list.h). */
#include <stdlib.h>

#include "base.h"

static void **link_of(const struct tpu__free_list *l, void *rec)
{
	return (void **)((char *)rec + l->link_off);
}

static size_t room_of(const struct tpu__free_list *l, const void *rec)
{
	return *(const size_t *)((const char *)rec + l->room_off);
}

static void release(const struct tpu__free_list *l, void *rec)
{
	if (l->release)
		l->release(rec);
	else
		free(rec);
}

void tpu__free_list_init(struct tpu__free_list *l, size_t link_off, size_t room_off,
			 unsigned int max, void (*rel)(void *rec))
{
	*l = (struct tpu__free_list){
		.max = max, .link_off = link_off, .room_off = room_off, .release = rel,
	};
}

void *tpu__free_list_take(struct tpu__free_list *l, size_t need)
{
	void **pp = &l->head;
	void *rec;

	/* At most @max records to look at; most takers fit the first. */
	if (l->room_off != TPU__FREE_NO_ROOM)
		while (*pp && room_of(l, *pp) < need)
			pp = link_of(l, *pp);
	rec = *pp;
	if (!rec)
		return NULL;
	*pp = *link_of(l, rec);
	l->count--;
	return rec;
}

void *tpu__free_list_get(struct tpu__free_list *l, size_t need, size_t min, size_t fixed,
			 size_t unit)
{
	void *rec = tpu__free_list_take(l, need);
	size_t room = need < min ? min : need;

	if (rec)
		return rec;
	if (unit && room > (SIZE_MAX - fixed) / unit)
		return NULL;
	rec = malloc(fixed + room * unit);
	if (rec && l->room_off != TPU__FREE_NO_ROOM)
		*(size_t *)((char *)rec + l->room_off) = room;
	return rec;
}

void tpu__free_list_put(struct tpu__free_list *l, void *rec)
{
	if (!rec)
		return;
	if (l->count >= l->max) {
		release(l, rec);
		return;
	}
	*link_of(l, rec) = l->head;
	l->head = rec;
	l->count++;
}

void tpu__free_list_drain(struct tpu__free_list *l)
{
	void *rec;

	while ((rec = l->head)) {
		l->head = *link_of(l, rec);
		release(l, rec);
	}
	l->count = 0;
}
