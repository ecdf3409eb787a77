// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The bounded free lists the rendezvous recycle their records through
 * (lib/base/free_list.c): what is kept, what is released, and which
 * record a taker with a given need gets.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "tap.h"
#include "free_list.h"

struct rec {
	int id;
	struct rec *link;
	size_t room;
};

static int released[16];
static int nreleased;

static void count_release(void *p)
{
	struct rec *r = p;

	if (nreleased < 16)
		released[nreleased] = r->id;
	nreleased++;
	free(r);
}

static struct rec *rec_new(int id, size_t room)
{
	struct rec *r = calloc(1, sizeof(*r));

	if (r) {
		r->id = id;
		r->room = room;
	}
	return r;
}

static void init(struct tpu__free_list *l, unsigned int max, bool with_room)
{
	nreleased = 0;
	tpu__free_list_init(l, offsetof(struct rec, link),
			    with_room ? offsetof(struct rec, room) : TPU__FREE_NO_ROOM, max,
			    count_release);
}

static void keeps_up_to_its_bound(void)
{
	struct tpu__free_list l;
	struct rec *r;
	int i;

	init(&l, 3, false);
	CHECK(tpu__free_list_take(&l, 0) == NULL, "free_list: an empty list gives nothing");
	for (i = 1; i <= 5; i++)
		tpu__free_list_put(&l, rec_new(i, 0));
	tpu__free_list_put(&l, NULL);
	CHECK(l.count == 3, "free_list: keeps 3 of 5 (count %u)", l.count);
	CHECK(nreleased == 2 && released[0] == 4 && released[1] == 5,
	      "free_list: the records beyond the bound are released at once (%d)", nreleased);
	r = tpu__free_list_take(&l, 0);
	CHECK(r && r->id == 3 && l.count == 2, "free_list: the last kept comes first");
	free(r);
	tpu__free_list_drain(&l);
	CHECK(l.count == 0 && l.head == NULL && nreleased == 4,
	      "free_list: drain releases the rest (%d)", nreleased);
}

static void a_taker_gets_one_with_room(void)
{
	struct tpu__free_list l;
	struct rec *r;

	init(&l, 8, true);
	tpu__free_list_put(&l, rec_new(1, 200));
	tpu__free_list_put(&l, rec_new(2, 64));
	tpu__free_list_put(&l, rec_new(3, 32));
	r = tpu__free_list_take(&l, 100);
	CHECK(r && r->id == 1, "free_list: a need of 100 skips the records of 32 and 64");
	free(r);
	CHECK(tpu__free_list_take(&l, 100) == NULL && l.count == 2,
	      "free_list: none left with room for 100, and nothing taken");
	r = tpu__free_list_take(&l, 64);
	CHECK(r && r->id == 2 && l.count == 1, "free_list: exactly enough room fits");
	free(r);
	tpu__free_list_drain(&l);
	CHECK(nreleased == 1 && released[0] == 3, "free_list: drain releases the record left");
}

static void no_room_field_takes_the_head(void)
{
	struct tpu__free_list l;
	struct rec *r;

	init(&l, 4, false);
	tpu__free_list_put(&l, rec_new(1, 0));
	r = tpu__free_list_take(&l, 4096);
	CHECK(r && r->id == 1, "free_list: without a room field any record fits any need");
	free(r);
}

static void bound_zero_keeps_none(void)
{
	struct tpu__free_list l;

	init(&l, 0, true);
	tpu__free_list_put(&l, rec_new(7, 64));
	CHECK(l.count == 0 && nreleased == 1 && released[0] == 7,
	      "free_list: a bound of 0 releases every record put");
}

/* get: a kept record that fits, else a new one with its room set (lists with a room field). */
static void get_takes_or_makes(void)
{
	struct tpu__free_list l;
	struct rec *r, *kept;

	init(&l, 4, true);
	r = tpu__free_list_get(&l, 3, 8, sizeof(*r), 16);
	CHECK(r && r->room == 8, "free_list: get makes a record with room for its minimum");
	kept = r;
	if (r)
		r->id = 5;
	tpu__free_list_put(&l, r);
	r = tpu__free_list_get(&l, 8, 8, sizeof(*r), 16);
	CHECK(r == kept && r->id == 5, "free_list: get takes a kept record that fits");
	tpu__free_list_put(&l, r);
	r = tpu__free_list_get(&l, 20, 8, sizeof(*r), 16);
	CHECK(r && r != kept && r->room == 20 && l.count == 1,
	      "free_list: get makes a bigger one when none kept fits");
	free(r);
	tpu__free_list_drain(&l);
	init(&l, 4, false);
	r = tpu__free_list_get(&l, 0, 0, sizeof(*r), 0);
	CHECK(r != NULL, "free_list: get makes a fixed-size record for a list without room");
	free(r);
	CHECK(tpu__free_list_get(&l, SIZE_MAX / 2, 0, sizeof(*r), 16) == NULL,
	      "free_list: get refuses a size that overflows");
}

void test_free_list(void)
{
	keeps_up_to_its_bound();
	a_taker_gets_one_with_room();
	no_room_field_takes_the_head();
	bound_zero_keeps_none();
	get_takes_or_makes();
}
