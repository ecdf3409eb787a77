// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The world's two-level collectives (lib/boot/world_hier.c) in fork()ed
 * worlds on this host made to look like several hosts: each rank salts its
 * host identity (tpu__world_host_salt, the tests' own override), so ranks
 * of one "host" reach each other over shm and the others over tcp.
 *
 * Four ranks as two hosts of two, interleaved (ranks 0 and 2 on one, 1
 * and 3 on the other, so that rank order and host order differ): every
 * collective, type, op and length (0, 1, odd, past the segment's slots)
 * checked element by element against a reference; the same for three
 * ranks as hosts of two and one; the path reported ("hier") and the
 * segment mapped; a rank killed on one host failing every other rank on
 * both within a bound, and so does a mismatch found on one host; a rank
 * whose vote misstates its host making every rank take the flat path, and
 * one that is no vote at all refused; TPU_COLL_PATH=flat keeping the rendezvous (right
 * results, no segment); =hier refused on one host and =shm across hosts.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "boot_harness.h"
#include "coll.h"
#include "tap.h"
#include "tpu_user.h"
#include "world.h"

#define MS		1000000ull
#define SECOND		1000000000ull
#define LARGE		(300 * 1000 + 7)	/* elements: past the slot for every type */

/*
 * What every wait and bound of a rank here is multiplied by: 1, but
 * TPU_TEST_TIME_SCALE for world_hier_rank() (the debug kernel's VM pair,
 * under emulation on a shared machine, takes minutes for what takes
 * seconds on a host).
 */
static uint64_t slow = 1;

/* A failed call's status and the world's reason, for the rank's log. */
static void say_why(struct tpu_world *w, int me, const char *what, tpu_status st)
{
	char why[256];

	if (!st)
		return;
	tpu_world_last_reason(w, why, sizeof(why));
	fprintf(stderr, "# rank %d: %s: %s (%s)\n", me, what, tpu_status_name(st), why);
}

struct job {
	uint16_t port;
	int scenario;
	int hosts;		/* rank r sits on host r % hosts; 0: all on one */
	const char *path;	/* TPU_COLL_PATH, or NULL */
};

static int world_up(int me, int n, const struct job *j, uint32_t timeout_ms,
		    struct tpu_context **ctx, struct tpu_world **w)
{
	struct tpu_world_info info = { .rank = me, .size = n, .local_rank = -1, .local_size = -1,
				       .store_host = "127.0.0.1", .store_port = j->port };
	struct tpu_world_options wo = { .info = &info, .timeout_ms = timeout_ms };

	boot_env_clear();
	if (j->path)
		setenv("TPU_COLL_PATH", j->path, 1);
	else
		unsetenv("TPU_COLL_PATH");
	if (j->hosts)
		snprintf(tpu__world_host_salt, sizeof(tpu__world_host_salt), "host%d",
			 me % j->hosts);
	R_CHECK(tpu_context_create(NULL, ctx) == 0);
	R_CHECK(tpu_world_create(*ctx, &wo, w) == 0);
	return 0;
}

static bool segment_mapped(void)
{
	char line[512];
	bool found = false;
	FILE *f = fopen("/proc/self/maps", "r");

	while (f && fgets(line, sizeof(line), f))
		found = found || strstr(line, "memfd:tpu-coll");
	if (f)
		fclose(f);
	return found;
}

/* ---- elements: small integers, exact in every type -------------------- */

static void put(enum tpu_dtype dt, void *buf, size_t i, double v)
{
	switch (dt) {
	case TPU_DT_FLOAT32: ((float *)buf)[i] = (float)v; break;
	case TPU_DT_FLOAT64: ((double *)buf)[i] = v; break;
	case TPU_DT_FLOAT16: ((uint16_t *)buf)[i] = tpu__f32_to_f16((float)v); break;
	case TPU_DT_BFLOAT16: ((uint16_t *)buf)[i] = tpu__f32_to_bf16((float)v); break;
	case TPU_DT_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
	case TPU_DT_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
	default: ((uint8_t *)buf)[i] = (uint8_t)v; break;
	}
}

static double get(enum tpu_dtype dt, const void *buf, size_t i)
{
	switch (dt) {
	case TPU_DT_FLOAT32: return ((const float *)buf)[i];
	case TPU_DT_FLOAT64: return ((const double *)buf)[i];
	case TPU_DT_FLOAT16: return tpu__f16_to_f32(((const uint16_t *)buf)[i]);
	case TPU_DT_BFLOAT16: return tpu__bf16_to_f32(((const uint16_t *)buf)[i]);
	case TPU_DT_INT32: return ((const int32_t *)buf)[i];
	case TPU_DT_INT64: return (double)((const int64_t *)buf)[i];
	default: return ((const uint8_t *)buf)[i];
	}
}

static double val(enum tpu_dtype dt, int r, size_t i)
{
	double v = (double)((r * 5 + i * 3) % 7 % 4);

	return dt == TPU_DT_UINT8 ? v : v - 1;
}

static double reduce(enum tpu_dtype dt, enum tpu_reduce_op op, int n, size_t i)
{
	double acc = val(dt, 0, i);

	for (int r = 1; r < n; r++) {
		double v = val(dt, r, i);

		acc = op == TPU_OP_SUM ? acc + v : op == TPU_OP_PROD ? acc * v :
		      op == TPU_OP_MIN ? (v < acc ? v : acc) : (v > acc ? v : acc);
	}
	return acc;
}

static int reductions(struct tpu_world *w, int me, int n, enum tpu_dtype dt,
		      enum tpu_reduce_op op, size_t count)
{
	size_t es = tpu_dtype_size(dt), off, len;
	char *in = malloc(count * es + 1), *out = malloc(count * es + 1);
	tpu_status st;

	R_CHECK(in && out);
	for (size_t i = 0; i < count; i++)
		put(dt, in, i, val(dt, me, i));
	memset(out, 0x5a, count * es);
	st = tpu_world_all_reduce(w, in, out, count, dt, op, TPU_FINAL_NONE, 30 * SECOND * slow);
	say_why(w, me, "all-reduce", st);
	R_CHECK(st == 0);
	for (size_t i = 0; i < count; i++)
		R_CHECK(get(dt, out, i) == reduce(dt, op, n, i));
	/* In place, and the mean: divided once, by the world's size. */
	if (op == TPU_OP_SUM && dt != TPU_DT_UINT8) {
		for (size_t i = 0; i < count; i++)
			put(dt, in, i, (double)(n * ((i % 3) + me)));
		R_CHECK(tpu_world_all_reduce(w, in, in, count, dt, op, TPU_FINAL_DIV,
					     30 * SECOND * slow) == 0);
		for (size_t i = 0; i < count; i++)
			R_CHECK(get(dt, in, i) == (double)(n * (i % 3)) + n * (n - 1) / 2.0);
		for (size_t i = 0; i < count; i++)
			put(dt, in, i, val(dt, me, i));
	}
	off = tpu_coll_chunk(count, n, me, &len);
	memset(out, 0x5a, count * es);
	R_CHECK(tpu_world_reduce_scatter(w, in, out, count, dt, op, TPU_FINAL_NONE,
					 30 * SECOND * slow) == 0);
	for (size_t i = 0; i < len; i++)
		R_CHECK(get(dt, out, i) == reduce(dt, op, n, off + i));
	/* Past this rank's chunk: untouched. */
	for (size_t i = len * es; i < count * es; i++)
		R_CHECK(out[i] == 0x5a);
	free(in);
	free(out);
	return 0;
}

static int broadcast_and_gather(struct tpu_world *w, int me, int n, enum tpu_dtype dt,
				size_t count)
{
	size_t es = tpu_dtype_size(dt);
	char *buf = malloc(count * es + 1), *out = malloc(count * es * (size_t)n + 1);

	R_CHECK(buf && out);
	for (int root = 0; root < n; root++) {
		for (size_t i = 0; i < count; i++)
			put(dt, buf, i, me == root ? val(dt, root, i) : 99);
		R_CHECK(tpu_world_broadcast(w, buf, count, dt, root, 30 * SECOND * slow) == 0);
		for (size_t i = 0; i < count; i++)
			R_CHECK(get(dt, buf, i) == val(dt, root, i));
	}
	for (size_t i = 0; i < count; i++)
		put(dt, buf, i, val(dt, me, i));
	memset(out, 0x5a, count * es * (size_t)n);
	R_CHECK(tpu_world_all_gather(w, buf, out, count, dt, 30 * SECOND * slow) == 0);
	for (int r = 0; r < n; r++)
		for (size_t i = 0; i < count; i++)
			R_CHECK(get(dt, out + (size_t)r * count * es, i) == val(dt, r, i));
	free(buf);
	free(out);
	return 0;
}

static const size_t counts[] = { 0, 1, 7, 1001, LARGE };

/* @all: every type and op at every length; else two types, the sum and the max. */
static int collectives(struct tpu_world *w, int me, int n, bool all)
{
	for (enum tpu_dtype dt = TPU_DT_FLOAT32; dt <= TPU_DT_UINT8; dt++) {
		if (!all && dt != TPU_DT_FLOAT32 && dt != TPU_DT_INT64)
			continue;
		for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
			for (int op = TPU_OP_SUM; op <= TPU_OP_MAX; op++) {
				/* Large ones: every op of one float and one integer type. */
				if (counts[k] == LARGE && op != TPU_OP_SUM &&
				    dt != TPU_DT_BFLOAT16 && dt != TPU_DT_INT32)
					continue;
				if (!all && op != TPU_OP_SUM && op != TPU_OP_MAX)
					continue;
				if (reductions(w, me, n, dt, (enum tpu_reduce_op)op, counts[k]))
					return __LINE__;
			}
			if (broadcast_and_gather(w, me, n, dt, counts[k]))
				return __LINE__;
		}
	}
	return 0;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * SECOND + (uint64_t)ts.tv_nsec;
}

/*
 * The last rank (on the second host, with rank 1) exits before an
 * all-reduce: every other rank, on both hosts, fails it within 3 s of a
 * 30 s timeout, and fails the next call at once.
 */
static int member_dies(struct tpu_world *w, int me, int n)
{
	float a[4] = { 1, 2, 3, 4 };
	uint64_t t0;
	tpu_status st;

	st = tpu_world_barrier_timeout(w, 20 * SECOND * slow);
	say_why(w, me, "the first barrier", st);
	R_CHECK(st == 0);
	R_CHECK(tpu_world_all_reduce(w, a, a, 4, TPU_DT_FLOAT32, TPU_OP_SUM, TPU_FINAL_NONE,
				     20 * SECOND * slow) == 0);
	if (me == n - 1) {
		usleep(200 * 1000);
		_exit(0);
	}
	t0 = now_ns();
	st = tpu_world_all_reduce(w, a, a, 4, TPU_DT_FLOAT32, TPU_OP_SUM, TPU_FINAL_NONE,
				  30 * SECOND * slow);
	fprintf(stderr, "# rank %d: %s after %llu ms\n", me, tpu_status_name(st),
		(unsigned long long)((now_ns() - t0) / MS));
	R_CHECK(st == TPU_E_PEER_GONE || st == -ECONNABORTED);
	R_CHECK(now_ns() - t0 < 3 * SECOND * slow);
	t0 = now_ns();
	st = tpu_world_all_reduce(w, a, a, 4, TPU_DT_FLOAT32, TPU_OP_SUM, TPU_FINAL_NONE,
				  30 * SECOND * slow);
	R_CHECK(st && now_ns() - t0 < 500 * MS * slow);
	return 0;
}

/*
 * Rank 3 calls a longer all-reduce than the others: its host finds the
 * mismatch in its segment, and the other host, whose leader would wait in
 * the leaders' step, fails too, within 3 s of a 30 s timeout.
 */
static int mismatch_fails_both_hosts(struct tpu_world *w, int me, int n)
{
	float a[4] = { 1, 2, 3, 4 }, b[4];
	char why[256];
	uint64_t t0;
	tpu_status st;

	R_CHECK(tpu_world_barrier_timeout(w, 20 * SECOND) == 0);
	t0 = now_ns();
	st = tpu_world_all_reduce(w, a, b, me == n - 1 ? 4 : 3, TPU_DT_FLOAT32, TPU_OP_SUM,
				  TPU_FINAL_NONE, 30 * SECOND);
	tpu_world_last_reason(w, why, sizeof(why));
	if (st != TPU_E_COLL_MISMATCH && st != -ECONNABORTED)
		fprintf(stderr, "# rank %d: %s (%s)\n", me, tpu_status_name(st), why);
	/* Rank 3's host: the segment's own reason; the other: the abort passed on. */
	if (me % 2 == (n - 1) % 2)
		R_CHECK(st == TPU_E_COLL_MISMATCH && strstr(why, "count"));
	else
		R_CHECK(st == -ECONNABORTED);
	R_CHECK(now_ns() - t0 < 3 * SECOND);
	return 0;
}

/*
 * Rank 3 lies in its vote before the others read it: alone on a host of
 * its own, while rank 1 reaches it over shm.  Its host's ranks must see
 * the claim does not match, and every rank take the flat rendezvous
 * (right results, path "rdv") rather than two levels on a partition that
 * is not one.  Rank 3 joins the collective (its own, true vote then
 * replacing the lie) only once rank 0 said whether it mapped its segment,
 * i.e. read every vote.
 */
static int lying_vote_means_flat(struct tpu_world *w, int me, int n)
{
	int32_t in = me + 1, out = 0;

	if (me == n - 1) {
		char ok[8];
		size_t len;

		R_CHECK(tpu__world_store_set(w, "tpu/coll-shm/vote/3", "1 0 3 1", 7) == 0);
		R_CHECK(tpu__world_store_get(w, "tpu/coll-shm/ok/0", ok, sizeof(ok), &len,
					     20000) == 0);
	}
	R_CHECK(tpu_world_all_reduce(w, &in, &out, 1, TPU_DT_INT32, TPU_OP_SUM, TPU_FINAL_NONE,
				     30 * SECOND) == 0);
	R_CHECK(out == n * (n + 1) / 2);
	R_CHECK(!strcmp(tpu_world_coll_path(w), "rdv"));
	return 0;
}

/*
 * Rank 3's vote is not one ("1" and then no numbers): the others' first
 * collective fails with -EPROTO instead of acting on it.  Rank 3 calls no
 * collective (its own vote would replace the bad one).
 */
static int garbled_vote_refused(struct tpu_world *w, int me, int n)
{
	int32_t in = 1, out = 0;
	char why[256];

	if (me == n - 1)
		return tpu__world_store_set(w, "tpu/coll-shm/vote/3", "1 x y z", 7) ? __LINE__ : 0;
	R_CHECK(tpu_world_all_reduce(w, &in, &out, 1, TPU_DT_INT32, TPU_OP_SUM, TPU_FINAL_NONE,
				     20 * SECOND) == -EPROTO);
	tpu_world_last_reason(w, why, sizeof(why));
	R_CHECK(strstr(why, "setting up"));
	return 0;
}

enum { SC_TYPES, SC_UNEVEN, SC_DIES, SC_FLAT, SC_HIER_ONE_HOST, SC_SHM_TWO_HOSTS,
       SC_MISMATCH, SC_LYING_VOTE, SC_GARBLED_VOTE };

static int rank_main(int me, int n, void *arg)
{
	const struct job *j = arg;
	struct tpu_context *ctx;
	struct tpu_world *w;
	float a[3] = { 1, 2, 3 }, b[3];
	char why[256];
	int line = world_up(me, n, j, j->scenario == SC_DIES ? 8000 : 20000, &ctx, &w);

	if (line)
		return line;
	switch (j->scenario) {
	case SC_TYPES:
	case SC_UNEVEN:
		R_CHECK(!strcmp(tpu_world_coll_path(w), ""));
		line = collectives(w, me, n, j->scenario == SC_TYPES);
		R_CHECK(!strcmp(tpu_world_coll_path(w), "hier"));
		/* A rank alone on its host has no segment to map. */
		R_CHECK(segment_mapped() == (j->scenario == SC_TYPES || me % j->hosts == 0));
		break;
	case SC_DIES:
		line = member_dies(w, me, n);
		break;
	case SC_MISMATCH:
		line = mismatch_fails_both_hosts(w, me, n);
		break;
	case SC_LYING_VOTE:
		line = lying_vote_means_flat(w, me, n);
		break;
	case SC_GARBLED_VOTE:
		line = garbled_vote_refused(w, me, n);
		break;
	case SC_FLAT:
		line = collectives(w, me, n, false);
		R_CHECK(!strcmp(tpu_world_coll_path(w), "rdv"));
		R_CHECK(!segment_mapped());
		break;
	case SC_HIER_ONE_HOST:
	case SC_SHM_TWO_HOSTS:
		R_CHECK(tpu_world_all_reduce(w, a, b, 3, TPU_DT_FLOAT32, TPU_OP_SUM,
					     TPU_FINAL_NONE, 20 * SECOND) == -EOPNOTSUPP);
		tpu_world_last_reason(w, why, sizeof(why));
		R_CHECK(j->scenario == SC_HIER_ONE_HOST ?
			strstr(why, "TPU_COLL_PATH=hier") && strstr(why, "one host") :
			strstr(why, "TPU_COLL_PATH=shm") && strstr(why, "not reached over shm"));
		break;
	}
	if (line)
		return line;
	tpu_world_destroy(w);
	R_CHECK(!segment_mapped());
	tpu_context_destroy(ctx);
	return 0;
}

void test_world_hier(void)
{
	static const struct {
		const char *name;
		int n, hosts;
		const char *path;
		unsigned int limit_s;
	} cases[] = {
		[SC_TYPES] = { "4_ranks_on_2_hosts_every_type_op_and_length", 4, 2, NULL, 400 },
		[SC_UNEVEN] = { "3_ranks_on_hosts_of_2_and_1", 3, 2, NULL, 200 },
		[SC_DIES] = { "a_rank_killed_fails_every_rank_on_both_hosts", 4, 2, NULL, 60 },
		[SC_FLAT] = { "TPU_COLL_PATH_flat_keeps_the_rendezvous", 4, 2, "flat", 200 },
		[SC_HIER_ONE_HOST] = { "TPU_COLL_PATH_hier_refused_on_one_host", 2, 0, "hier", 60 },
		[SC_SHM_TWO_HOSTS] = { "TPU_COLL_PATH_shm_refused_across_hosts", 4, 2, "shm", 60 },
		[SC_MISMATCH] = { "a_mismatch_on_one_host_fails_both_hosts_promptly", 4, 2, NULL, 60 },
		[SC_LYING_VOTE] = { "a_vote_that_breaks_the_partition_means_flat", 4, 2, NULL, 60 },
		[SC_GARBLED_VOTE] = { "a_vote_that_is_not_one_is_refused", 4, 2, NULL, 60 },
	};

	for (int k = 0; k < (int)(sizeof(cases) / sizeof(cases[0])); k++) {
		struct job j = { .port = boot_free_port(), .scenario = k,
				 .hosts = cases[k].hosts, .path = cases[k].path };

		CHECK(j.port > 1 && boot_run_ranks(cases[k].n, rank_main, &j, cases[k].limit_s),
		      "hier_world_%s", cases[k].name);
	}
	unsetenv("TPU_COLL_PATH");
	boot_env_clear();
}

/*
 * One rank of a world formed from the launcher's variables, for
 * tests/vm/pair-xfer.sh (two VMs, two ranks on each): @mode "check" runs
 * the collectives (two types, the sum and the max, every length) and
 * wants the two-level path; "dies" is member_dies() (the last rank exits,
 * every other must fail within the bound).  0 when this rank's part held.
 */
int world_hier_rank(const char *mode)
{
	struct tpu_world_options wo = { .timeout_ms = 60000 };
	bool dies = !strcmp(mode, "dies");
	struct tpu_context *ctx = NULL;
	struct tpu_world *w = NULL;
	const char *scale = getenv("TPU_TEST_TIME_SCALE");
	int me, n, line, k = scale ? atoi(scale) : 1;
	tpu_status st;

	if (k > 1 && k <= 100)
		slow = (uint64_t)k;
	/*
	 * Forming the world and setting up its two levels (pipes, segments,
	 * the leaders' link) are bounded by this; so is the farewell.
	 */
	if (dies)
		wo.timeout_ms = 8000;
	wo.timeout_ms *= (uint32_t)slow;
	/* To try this mode on one machine: ranks with different salts look like two hosts. */
	if (getenv("TPU_TEST_HOST_SALT"))
		snprintf(tpu__world_host_salt, sizeof(tpu__world_host_salt), "%s",
			 getenv("TPU_TEST_HOST_SALT"));
	st = tpu_context_create(NULL, &ctx);
	if (!st)
		st = tpu_world_create(ctx, &wo, &w);
	if (st) {
		fprintf(stderr, "# forming the world: %s\n", tpu_status_name(st));
		return 1;
	}
	me = tpu_world_get_info(w)->rank;
	n = tpu_world_get_info(w)->size;
	if (dies) {
		line = member_dies(w, me, n);
	} else {
		line = collectives(w, me, n, false);
		if (!line && strcmp(tpu_world_coll_path(w), "hier"))
			line = __LINE__;
	}
	printf("# rank %d of %d: %s over \"%s\": %s (line %d)\n", me, n, mode,
	       tpu_world_coll_path(w), line ? "failed" : "held", line);
	fflush(stdout);
	if (line)
		return 1;
	/* A world with a dead rank: no farewell barrier to wait out. */
	if (!dies) {
		tpu_world_destroy(w);
		tpu_context_destroy(ctx);
	}
	return 0;
}
