// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * A world formed through the caller's store (tpu_world_create_with_store):
 * threads of this process, each a rank with its own context, share a
 * store kept in memory here, as a torch backend shares the c10d::Store.
 * They form the world, all-reduce through it, meet in the store barrier
 * and open a world pipe; then the argument checks, a store that fails or
 * lies about a value's length, a rank that never comes and ranks that
 * disagree on the size.  And blobs swapped through the store
 * (tpu_world_exchange_blobs): lengths, rounds, room too short, and agents
 * that load each other's exported registrations that way.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tap.h"
#include "tpu_user.h"

#define MS		1000000ull
#define STORE_MAX	256
#define RANKS		3
#define COUNT		1001

struct mem_store {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int n;
	char *key[STORE_MAX];
	char *val[STORE_MAX];
	size_t len[STORE_MAX];
	tpu_status fail_set;	/* returned by every set */
	bool lie;		/* get claims one byte more than fits */
	int sets, gets, adds;
};

static int find(struct mem_store *s, const char *key)
{
	for (int i = 0; i < s->n; i++)
		if (!strcmp(s->key[i], key))
			return i;
	return -1;
}

/* Under the lock: the slot of @key, made when absent; -1 when full. */
static int slot(struct mem_store *s, const char *key)
{
	int i = find(s, key);

	if (i >= 0 || s->n == STORE_MAX)
		return i;
	s->key[s->n] = strdup(key);
	s->val[s->n] = NULL;
	s->len[s->n] = 0;
	return s->n++;
}

static void put(struct mem_store *s, int i, const void *val, size_t len)
{
	free(s->val[i]);
	s->val[i] = malloc(len ? len : 1);
	memcpy(s->val[i], val, len);
	s->len[i] = len;
	pthread_cond_broadcast(&s->cond);
}

static tpu_status ms_set(void *arg, const char *key, const void *val, size_t len)
{
	struct mem_store *s = arg;
	int i;

	pthread_mutex_lock(&s->lock);
	s->sets++;
	if (s->fail_set) {
		pthread_mutex_unlock(&s->lock);
		return s->fail_set;
	}
	i = slot(s, key);
	if (i >= 0)
		put(s, i, val, len);
	pthread_mutex_unlock(&s->lock);
	return i >= 0 ? 0 : -ENOSPC;
}

static tpu_status ms_get(void *arg, const char *key, void *buf, size_t size, size_t *len,
			 uint32_t timeout_ms)
{
	struct mem_store *s = arg;
	struct timespec until;
	tpu_status st = 0;
	int i;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += timeout_ms / 1000;
	until.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (until.tv_nsec >= 1000000000) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&s->lock);
	s->gets++;
	while ((i = find(s, key)) < 0 && !st)
		st = timeout_ms ? -pthread_cond_timedwait(&s->cond, &s->lock, &until) : -ETIMEDOUT;
	if (i >= 0) {
		if (size)
			memcpy(buf, s->val[i], s->len[i] < size ? s->len[i] : size);
		*len = s->lie ? size + 1 : s->len[i];
		st = s->len[i] > size ? -EMSGSIZE : 0;
	}
	pthread_mutex_unlock(&s->lock);
	return st;
}

static tpu_status ms_add(void *arg, const char *key, int64_t delta, int64_t *total)
{
	struct mem_store *s = arg;
	int64_t v = 0;
	char text[32];
	int i, n;

	pthread_mutex_lock(&s->lock);
	s->adds++;
	i = slot(s, key);
	if (i >= 0) {
		if (s->val[i]) {
			n = (int)(s->len[i] < sizeof(text) - 1 ? s->len[i] : sizeof(text) - 1);
			memcpy(text, s->val[i], (size_t)n);
			text[n] = '\0';
			v = strtoll(text, NULL, 10);
		}
		v += delta;
		n = snprintf(text, sizeof(text), "%lld", (long long)v);
		put(s, i, text, (size_t)n);
		*total = v;
	}
	pthread_mutex_unlock(&s->lock);
	return i >= 0 ? 0 : -ENOSPC;
}

static void store_init(struct mem_store *s)
{
	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
}

static void store_fini(struct mem_store *s)
{
	for (int i = 0; i < s->n; i++) {
		free(s->key[i]);
		free(s->val[i]);
	}
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->cond);
}

static struct tpu_world_store callbacks(struct mem_store *s)
{
	return (struct tpu_world_store){ .arg = s, .set = ms_set, .get = ms_get, .add = ms_add };
}

struct rank {
	struct mem_store *store;
	int me, size;
	uint32_t timeout_ms;
	tpu_status formed;	/* tpu_world_create_with_store's */
	bool ok;		/* everything after it checked out */
};

static void *rank_main(void *arg)
{
	struct rank *r = arg;
	struct tpu_world_info info = { .rank = r->me, .size = r->size, .local_rank = -1,
				       .local_size = -1 };
	struct tpu_world_options wo = { .info = &info, .timeout_ms = r->timeout_ms };
	struct tpu_world_store cb = callbacks(r->store);
	struct tpu_context *ctx = NULL;
	struct tpu_world *w = NULL;
	struct tpu_pipe *p = NULL;
	double in[COUNT], out[COUNT];

	if (tpu_context_create(NULL, &ctx)) {
		r->formed = -ENODEV;
		return NULL;
	}
	r->formed = tpu_world_create_with_store(ctx, &wo, &cb, &w);
	if (!r->formed && r->size > 1) {
		for (int i = 0; i < COUNT; i++)
			in[i] = (double)(r->me + 1) * i;
		r->ok = !tpu_world_all_reduce(w, in, out, COUNT, TPU_DT_FLOAT64, TPU_OP_SUM,
					      TPU_FINAL_NONE, 20000 * MS);
		/* 1 + 2 + 3 times i */
		for (int i = 0; r->ok && i < COUNT; i++)
			r->ok = out[i] == 6.0 * i;
		r->ok = r->ok && !tpu_world_pipe(w, (r->me + 1) % r->size, &p) && p;
		/* Destroy does not wait for the others here: meet before it. */
		r->ok = r->ok && !tpu_world_barrier(w);
		r->ok = r->ok && tpu_world_get_info(w)->rank == r->me;
	}
	tpu_world_destroy(w);
	tpu_context_destroy(ctx);
	return NULL;
}

/* @n ranks of which @sizes[i] is the size rank i believes in; stores results in @r. */
static void run_ranks(struct mem_store *s, struct rank *r, int n, const int *sizes,
		      uint32_t timeout_ms)
{
	pthread_t t[RANKS];

	for (int i = 0; i < n; i++) {
		r[i] = (struct rank){ .store = s, .me = i, .size = sizes[i],
				      .timeout_ms = timeout_ms };
		pthread_create(&t[i], NULL, rank_main, &r[i]);
	}
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
}

static void three_ranks_form_and_reduce(void)
{
	static const int sizes[RANKS] = { RANKS, RANKS, RANKS };
	struct mem_store s;
	struct rank r[RANKS];

	store_init(&s);
	run_ranks(&s, r, RANKS, sizes, 20000);
	for (int i = 0; i < RANKS; i++) {
		CHECK_STATUS(r[i].formed, 0, "rank %d formed through the caller's store", i);
		CHECK(r[i].ok, "rank %d: all-reduce, store barrier and pipe", i);
	}
	/* Every rank published its URLs there: the world used no store of its own. */
	CHECK(s.sets >= RANKS && s.adds >= RANKS && s.gets > 0, "the callbacks carried it "
	      "(%d sets, %d gets, %d adds)", s.sets, s.gets, s.adds);
	store_fini(&s);
}

static void bad_arguments(void)
{
	struct tpu_world_info info = { .rank = 0, .size = 1, .local_rank = -1, .local_size = -1 };
	struct tpu_world_options wo = { .info = &info };
	struct tpu_world_options no_info = { 0 };
	struct tpu_context *ctx = NULL;
	struct tpu_world *w = (struct tpu_world *)&wo;
	struct mem_store s;
	struct tpu_world_store cb;

	store_init(&s);
	cb = callbacks(&s);
	if (tpu_context_create(NULL, &ctx)) {
		CHECK(false, "context");
		return;
	}
	CHECK_STATUS(tpu_world_create_with_store(ctx, &wo, NULL, &w), -EINVAL, "no store");
	CHECK(w == NULL, "*out cleared on failure");
	CHECK_STATUS(tpu_world_create_with_store(ctx, &no_info, &cb, &w), -EINVAL, "no info");
	CHECK_STATUS(tpu_world_create_with_store(ctx, NULL, &cb, &w), -EINVAL, "no options");
	cb.get = NULL;
	CHECK_STATUS(tpu_world_create_with_store(ctx, &wo, &cb, &w), -EINVAL, "no get");
	cb = callbacks(&s);
	cb.reserved[2] = 1;
	CHECK_STATUS(tpu_world_create_with_store(ctx, &wo, &cb, &w), -EINVAL, "reserved set");
	cb = callbacks(&s);
	info.rank = 1;
	CHECK_STATUS(tpu_world_create_with_store(ctx, &wo, &cb, &w), -EINVAL, "rank >= size");
	info.rank = 0;
	/* A world of one needs no store address: the info's store fields are not looked at. */
	CHECK_STATUS(tpu_world_create_with_store(ctx, &wo, &cb, &w), 0, "a world of one");
	tpu_world_destroy(w);
	tpu_context_destroy(ctx);
	store_fini(&s);
}

static void failing_and_lying_stores(void)
{
	static const int one[1] = { 1 }, sizes[2] = { 2, 2 };
	struct mem_store s;
	struct rank r[1], two[2];

	store_init(&s);
	s.fail_set = -EIO;
	run_ranks(&s, r, 1, one, 5000);
	CHECK_STATUS(r[0].formed, -EIO, "a store whose set fails fails the world with its error");
	store_fini(&s);

	/* The second rank to come reads the size the first one set, and is lied to. */
	store_init(&s);
	s.lie = true;
	run_ranks(&s, two, 2, sizes, 1000);
	CHECK(two[0].formed == -EPROTO || two[1].formed == -EPROTO,
	      "a get that claims more than fits is refused (%d, %d)", two[0].formed,
	      two[1].formed);
	CHECK(two[0].formed && two[1].formed, "no rank formed on a lying store");
	store_fini(&s);
}

static void missing_rank_and_size_conflict(void)
{
	static const int two[2] = { 2, 2 }, differ[2] = { 2, 3 };
	struct timespec t0, t1;
	struct mem_store s;
	struct rank r[2];
	long ms;

	/* Rank 1 never comes: rank 0 alone, a world of two. */
	store_init(&s);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	run_ranks(&s, r, 1, two, 600);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
	CHECK_STATUS(r[0].formed, -ETIMEDOUT, "a rank that never joins");
	CHECK(ms >= 500 && ms < 5000, "within the world's timeout (%ld ms for 600)", ms);
	store_fini(&s);

	store_init(&s);
	run_ranks(&s, r, 2, differ, 5000);
	CHECK(r[0].formed == -EINVAL || r[1].formed == -EINVAL,
	      "ranks that disagree on the size fail (%d, %d)", r[0].formed, r[1].formed);
	CHECK(r[0].formed && r[1].formed, "both of them");
	store_fini(&s);
}

/* Rank @me's blob of round @round: @len bytes of a pattern of both. */
static void blob_fill(uint8_t *b, size_t len, int me, int round)
{
	for (size_t i = 0; i < len; i++)
		b[i] = (uint8_t)(me * 31 + round * 7 + i);
}

static bool blob_is(const uint8_t *b, size_t len, int me, int round)
{
	uint8_t want[512];

	blob_fill(want, len, me, round);
	return !memcmp(b, want, len);
}

#define BLOB_STRIDE	512

/* Lengths of round @round's blobs: rank 1 sends none in round 0. */
static size_t blob_len(int me, int round)
{
	return round == 0 && me == 1 ? 0 : (size_t)(100 * me + 40 * round + 1);
}

/* Two rounds, one where rank 2's blob does not fit the others' room, then agents. */
static bool blob_rounds(struct tpu_world *w, int me, int size, struct tpu_context *ctx)
{
	uint8_t mine[BLOB_STRIDE], out[RANKS * BLOB_STRIDE], buf[4096], got[64];
	size_t lens[RANKS];
	struct tpu_agent *a = NULL;
	struct tpu_xfer_reg *reg = NULL;
	struct tpu_xfer_remote *rm = NULL;
	struct tpu_xfer_req *req = NULL;
	bool ok = true;
	size_t blen = 0;

	for (int round = 0; ok && round < 2; round++) {
		blob_fill(mine, blob_len(me, round), me, round);
		memset(out, 0xee, sizeof(out));
		ok = !tpu_world_exchange_blobs(w, mine, blob_len(me, round), out, BLOB_STRIDE,
					       lens);
		for (int r = 0; ok && r < size; r++)
			ok = lens[r] == blob_len(r, round) &&
			     blob_is(out + r * BLOB_STRIDE, lens[r], r, round);
	}
	/* Rank 2's 300 bytes do not fit 200 bytes of room: the others still get the rest. */
	if (ok) {
		size_t len = me == 2 ? 300 : 10, stride = me == 2 ? 300 : 200;

		blob_fill(mine, len, me, 9);
		if (me == 2)
			ok = !tpu_world_exchange_blobs(w, mine, len, out, stride, lens);
		else
			ok = tpu_world_exchange_blobs(w, mine, len, out, stride, lens) == -EMSGSIZE &&
			     lens[2] == 300 && lens[0] == 10 && lens[1] == 10 &&
			     blob_is(out + (1 - me) * stride, 10, 1 - me, 9);
	}
	/* What it is for: every rank exports a registration, reads the next rank's. */
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(me + i);
	ok = ok && !tpu_agent_create(ctx, NULL, &a) &&
	     !tpu_agent_register(a, buf, sizeof(buf), TPU_XFER_READ, &reg) &&
	     !tpu_agent_export(reg, mine, sizeof(mine), &blen) &&
	     !tpu_world_exchange_blobs(w, mine, blen, out, BLOB_STRIDE, lens) &&
	     !tpu_agent_load(a, out + ((me + 1) % size) * BLOB_STRIDE, lens[(me + 1) % size],
			     &rm);
	if (ok) {
		struct tpu_xfer_reg *lr = NULL;
		uint8_t dst[64];

		ok = !tpu_agent_register(a, dst, sizeof(dst), 0, &lr);
		if (ok) {
			struct tpu_xfer_local_elem l = { .reg = lr, .offset = 0, .len = sizeof(dst) };
			struct tpu_xfer_remote_elem r = { .remote = rm, .offset = 100,
							  .len = sizeof(dst) };

			ok = !tpu_xfer_prepare(a, TPU_XFER_OP_READ, &l, 1, &r, 1, NULL, 0, &req) &&
			     !tpu_xfer_post(req, NULL, NULL) && !tpu_xfer_wait(req, 10000);
			memcpy(got, dst, sizeof(got));
			for (size_t i = 0; ok && i < sizeof(got); i++)
				ok = got[i] == (uint8_t)((me + 1) % size + 100 + i);
			tpu_xfer_release(req);
			tpu_agent_deregister(lr);
		}
	}
	/* Nobody deregisters before every rank has read. */
	ok = !tpu_world_barrier(w) && ok;
	tpu_agent_unload(rm);
	if (reg)
		tpu_agent_deregister(reg);
	tpu_agent_destroy(a);
	return ok;
}

static void *blob_rank(void *arg)
{
	struct rank *r = arg;
	struct tpu_world_info info = { .rank = r->me, .size = r->size, .local_rank = -1,
				       .local_size = -1 };
	struct tpu_world_options wo = { .info = &info, .timeout_ms = r->timeout_ms };
	struct tpu_world_store cb = callbacks(r->store);
	struct tpu_context *ctx = NULL;
	struct tpu_world *w = NULL;

	if (tpu_context_create(NULL, &ctx)) {
		r->formed = -ENODEV;
		return NULL;
	}
	r->formed = tpu_world_create_with_store(ctx, &wo, &cb, &w);
	if (!r->formed)
		r->ok = blob_rounds(w, r->me, r->size, ctx);
	tpu_world_destroy(w);
	tpu_context_destroy(ctx);
	return NULL;
}

static void blobs_through_the_store(void)
{
	struct mem_store s;
	struct rank r[RANKS];
	pthread_t t[RANKS];

	store_init(&s);
	for (int i = 0; i < RANKS; i++) {
		r[i] = (struct rank){ .store = &s, .me = i, .size = RANKS, .timeout_ms = 20000 };
		pthread_create(&t[i], NULL, blob_rank, &r[i]);
	}
	for (int i = 0; i < RANKS; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < RANKS; i++) {
		CHECK_STATUS(r[i].formed, 0, "blobs: rank %d formed", i);
		CHECK(r[i].ok, "blobs: rank %d got every rank's blob of each round (one empty), "
		      "a blob too long for its room said -EMSGSIZE with its length, and it read "
		      "the next rank's registration through the swapped export", i);
	}
	store_fini(&s);
}

static void blob_arguments(void)
{
	struct tpu_world_info info = { .rank = 0, .size = 1, .local_rank = -1, .local_size = -1 };
	struct tpu_world_options wo = { .info = &info };
	static uint8_t big[TPU_WORLD_BLOB_MAX + 1], out[TPU_WORLD_BLOB_MAX + 1];
	struct tpu_context *ctx = NULL;
	struct tpu_world *w = NULL;
	struct mem_store s;
	struct tpu_world_store cb;
	size_t lens[1] = { 99 };

	store_init(&s);
	cb = callbacks(&s);
	if (tpu_context_create(NULL, &ctx) || tpu_world_create_with_store(ctx, &wo, &cb, &w)) {
		CHECK(false, "blobs: a world of one");
		tpu_context_destroy(ctx);
		store_fini(&s);
		return;
	}
	CHECK_STATUS(tpu_world_exchange_blobs(NULL, big, 1, out, 1, lens), -EINVAL, "no world");
	CHECK_STATUS(tpu_world_exchange_blobs(w, NULL, 1, out, 1, lens), -EINVAL, "no blob");
	CHECK_STATUS(tpu_world_exchange_blobs(w, big, 1, NULL, 1, lens), -EINVAL, "no room");
	CHECK_STATUS(tpu_world_exchange_blobs(w, big, 1, out, 1, NULL), -EINVAL, "no lengths");
	CHECK_STATUS(tpu_world_exchange_blobs(w, big, 2, out, 1, lens), -EINVAL,
		     "a blob longer than its own room");
	CHECK_STATUS(tpu_world_exchange_blobs(w, big, sizeof(big), out, sizeof(out), lens),
		     -EINVAL, "a blob over TPU_WORLD_BLOB_MAX");
	big[0] = 42;
	CHECK_STATUS(tpu_world_exchange_blobs(w, big, TPU_WORLD_BLOB_MAX, out, sizeof(out), lens),
		     0, "a blob of TPU_WORLD_BLOB_MAX in a world of one");
	CHECK(lens[0] == TPU_WORLD_BLOB_MAX && out[0] == 42, "its own blob comes back");
	CHECK_STATUS(tpu_world_exchange_blobs(w, NULL, 0, out, 0, lens), 0, "an empty blob");
	CHECK(lens[0] == 0, "of length 0");
	tpu_world_destroy(w);
	tpu_context_destroy(ctx);
	store_fini(&s);
}

void test_world_store(void)
{
	three_ranks_form_and_reduce();
	bad_arguments();
	failing_and_lying_stores();
	missing_rank_and_size_conflict();
	blobs_through_the_store();
	blob_arguments();
}
