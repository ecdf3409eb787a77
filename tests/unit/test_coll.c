// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Collectives between forked worker processes over the remote rendezvous
 * (shm transport; the pipes pick cma on the host, kmod in the VM).  Each
 * case forks its workers, which know every URL in advance (shm names)
 * and build their tpu_coll from that cluster map; a worker's exit status
 * is its verdict: 0 passed, 1..249 the line of the first failed check
 * (also printed), and the failure cases' own codes below for the outcome
 * they saw.  Results are compared byte for byte with a reference the
 * worker computes: the inputs are small integers (products: powers of
 * two), so every order of reduction gives the exact same result.
 */
#include <errno.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "coll/coll.h"
#include "tap.h"

#define MAX_W		8
#define CPU_FMT		"/job:worker/replica:0/task:%d/device:CPU:0"
#define TASK_FMT	"/job:worker/replica:0/task:%d"

/* Exit codes of the failure cases, beside 0 and the line numbers. */
#define SAW_PEER_GONE	251
#define SAW_ABORTED	252

struct worker {
	int n, me, sock;
	char devs[MAX_W][64];
	const char *dev_ptrs[MAX_W];
	struct tpu_coll_group group;
	struct tpu_context *ctx;
	struct tpu_coll *coll;
};

#define W_CHECK(cond) do { \
	if (!(cond)) { \
		fprintf(stderr, "# coll worker %d: %s:%d: %s failed\n", w->me, __FILE__, \
			__LINE__, #cond); \
		_exit(__LINE__ % 249 + 1); \
	} \
} while (0)

/*
 * A worker's watchdog only catches a hang: the eight-member matrix takes
 * seconds on the host, over a minute in a VM under TCG, and far longer under
 * valgrind (tests/vm/run.sh sets TP_TEST_EMULATED under TCG).
 */
static unsigned int worker_watchdog_s(void)
{
	if (under_valgrind())
		return 900;
	if (getenv("TP_TEST_EMULATED"))
		return 600;
	return 120;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Every worker reaches this before any goes on (the test process relays). */
static void barrier(struct worker *w)
{
	char c = 'b';

	W_CHECK(write(w->sock, &c, 1) == 1);
	W_CHECK(read(w->sock, &c, 1) == 1);
}

/* "shm": URLs known in advance; "tcp": port 0, the URLs relayed through the test process. */
static const char *transport = "shm";
/* The implementation of killed()'s collective: "ring" (the rendezvous) or NULL (lanes). */
static const char *kill_impl = "ring";
#define URL_LEN		256

/* Tell the test process this worker's URL and learn everyone's. */
static void swap_urls(struct worker *w)
{
	char url[URL_LEN] = { 0 }, task[64];
	struct tpu_rendezvous *rdv = tpu_coll_rendezvous(w->coll);

	W_CHECK(tpu_rendezvous_url(rdv, NULL, url, sizeof(url)) == 0);
	W_CHECK(write(w->sock, url, sizeof(url)) == sizeof(url));
	for (int i = 0; i < w->n; i++) {
		W_CHECK(read(w->sock, url, sizeof(url)) == sizeof(url));
		snprintf(task, sizeof(task), TASK_FMT, i);
		W_CHECK(tpu_rendezvous_add_peer(rdv, task, url) == 0);
	}
}

static void worker_start(struct worker *w, int serial)
{
	bool tcp = !strcmp(transport, "tcp");
	struct tpu_context_options co = { .transports = transport };
	char urls[MAX_W][96], tasks[MAX_W][64], self[64];
	struct tpu_remote_task peers[MAX_W];
	const char *lu;
	struct tpu_remote_options ro = { .task = self, .listen_urls = &lu, .nlisten = 1,
					 .peers = peers, .npeers = (size_t)w->n };

	for (int i = 0; i < w->n; i++) {
		snprintf(tasks[i], sizeof(tasks[i]), TASK_FMT, i);
		snprintf(urls[i], sizeof(urls[i]), "shm://coll-%d-%d-%d", (int)getppid(), serial, i);
		peers[i] = (struct tpu_remote_task){ tasks[i], urls[i] };
		snprintf(w->devs[i], sizeof(w->devs[i]), CPU_FMT, i);
	}
	/* Ranks follow the sorted names, not this order: list them backwards to show it. */
	for (int i = 0; i < w->n; i++)
		w->dev_ptrs[i] = w->devs[w->n - 1 - i];
	w->group = (struct tpu_coll_group){ .group_key = 1, .group_size = w->n,
					    .device_type = "CPU", .devices = w->dev_ptrs };
	snprintf(self, sizeof(self), TASK_FMT, w->me);
	lu = tcp ? "tcp://127.0.0.1:0" : urls[w->me];
	if (tcp)
		ro.npeers = 0;
	W_CHECK(tpu_context_create(&co, &w->ctx) == 0);
	W_CHECK(tpu_coll_create_cluster(w->ctx, &ro, &w->coll) == 0);
	if (tcp)
		swap_urls(w);
}

static void worker_end(struct worker *w)
{
	barrier(w);
	tpu_coll_destroy(w->coll);
	tpu_context_destroy(w->ctx);
}

/* ---- inputs and references ---- */

static const enum tpu_dtype dtypes[] = { TPU_DT_FLOAT32, TPU_DT_FLOAT64, TPU_DT_FLOAT16,
					 TPU_DT_BFLOAT16, TPU_DT_INT32, TPU_DT_INT64,
					 TPU_DT_UINT8 };
#define NDTYPES (sizeof(dtypes) / sizeof(dtypes[0]))

static bool is_float(enum tpu_dtype dt)
{
	return dt == TPU_DT_FLOAT32 || dt == TPU_DT_FLOAT64 || dt == TPU_DT_FLOAT16 ||
	       dt == TPU_DT_BFLOAT16;
}

/* Rank r's element i: small integers; powers of two for products, so nothing rounds. */
static double value(enum tpu_dtype dt, enum tpu_reduce_op op, int r, size_t i)
{
	static const double pf[] = { 1, -1, 2, 0.5, -2 }, pi[] = { 1, -1, 2, -2, 3 };
	unsigned int k = (unsigned int)(r * 7 + (int)(i % 1000) * 3 + 1);

	if (op == TPU_OP_PROD)
		return dt == TPU_DT_UINT8 ? (double)(k % 7 + 1) :
		       is_float(dt) ? pf[k % 5] : pi[k % 5];
	return dt == TPU_DT_UINT8 ? (double)(k % 9) : (double)(k % 9) - 4;
}

static void put(enum tpu_dtype dt, void *p, size_t i, double v)
{
	switch (dt) {
	case TPU_DT_FLOAT32: ((float *)p)[i] = (float)v; break;
	case TPU_DT_FLOAT64: ((double *)p)[i] = v; break;
	case TPU_DT_FLOAT16: ((uint16_t *)p)[i] = tpu__f32_to_f16((float)v); break;
	case TPU_DT_BFLOAT16: ((uint16_t *)p)[i] = tpu__f32_to_bf16((float)v); break;
	case TPU_DT_INT32: ((int32_t *)p)[i] = (int32_t)v; break;
	case TPU_DT_INT64: ((int64_t *)p)[i] = (int64_t)v; break;
	/* Wrapped as the merge wraps: modulo 256. */
	case TPU_DT_UINT8: ((uint8_t *)p)[i] = (uint8_t)((int64_t)v & 0xff); break;
	}
}

static void fill(enum tpu_dtype dt, enum tpu_reduce_op op, int r, void *p, size_t count)
{
	for (size_t i = 0; i < count; i++)
		put(dt, p, i, value(dt, op, r, i));
}

/* The all-reduce's expected bytes: merged in double (exact here), stored, then finished. */
static void reference(enum tpu_dtype dt, enum tpu_reduce_op op, enum tpu_final_op fin, int n,
		      void *p, size_t count)
{
	for (size_t i = 0; i < count; i++) {
		double acc = value(dt, op, 0, i);

		for (int r = 1; r < n; r++) {
			double v = value(dt, op, r, i);

			acc = op == TPU_OP_SUM ? acc + v : op == TPU_OP_PROD ? acc * v :
			      op == TPU_OP_MIN ? (v < acc ? v : acc) : (v > acc ? v : acc);
		}
		put(dt, p, i, acc);
	}
	tpu__coll_final(dt, fin, p, count, n);
}

/* ---- the matrix: every collective x type x op x length, in and out of place ---- */

static int next_key = 100;

/*
 * Every length with every implementation; under valgrind every type and
 * op with one length and implementation each, turning through them.
 */
static void allreduce_matrix(struct worker *w, struct tpu_coll_exec *exec, bool small)
{
	const size_t counts[] = { 0, 1, (size_t)w->n + 1, 1003 };
	const char *impls[] = { NULL, "ring", "doubling" };
	static uint8_t in[1003 * 8], out[1003 * 8], want[1003 * 8];
	struct tpu_coll_member me = { .device = w->devs[w->me] };
	unsigned int turn = 0;

	for (size_t t = 0; t < NDTYPES; t++)
		for (int op = TPU_OP_SUM; op <= TPU_OP_MAX; op++)
			for (size_t j = 0; j < (small ? 1u : 12u); j++, turn++) {
				size_t c = small ? turn % 4 : j % 4, m = small ? turn % 3 : j / 4;
				enum tpu_dtype dt = dtypes[t];
				enum tpu_final_op fin = op == TPU_OP_SUM && (c + t) % 2 ?
							TPU_FINAL_DIV : TPU_FINAL_NONE;
				struct tpu_coll_instance inst = {
					.instance_key = next_key++, .type = TPU_COLL_REDUCTION,
					.dtype = dt, .count = counts[c], .op = (enum tpu_reduce_op)op,
					.final_op = fin, .impl = impls[m] };
				bool in_place = (turn / 3) % 2;
				size_t bytes = counts[c] * tpu_dtype_size(dt);
				tpu_status st;

				fill(dt, inst.op, w->me, in, counts[c]);
				reference(dt, inst.op, fin, w->n, want, counts[c]);
				if (in_place)
					memcpy(out, in, bytes);
				st = tpu_coll_exec_run(exec, &w->group, &inst, &me, in_place ? out : in,
						       out);
				if (st || memcmp(out, want, bytes))
					fprintf(stderr, "# coll worker %d: all-reduce n=%d dtype %d op %d "
						"count %zu impl %s %s: %s\n", w->me, w->n, dt, op,
						counts[c], impls[m] ? impls[m] : "auto",
						in_place ? "in place" : "out of place",
						tpu_status_name(st));
				W_CHECK(st == 0 && !memcmp(out, want, bytes));
			}
}

static void broadcast_matrix(struct worker *w, struct tpu_coll_exec *exec, bool small)
{
	const size_t counts[] = { 0, 1, (size_t)w->n + 1, 1003 };
	static uint8_t buf[1003 * 8], want[1003 * 8];

	for (size_t t = 0; t < NDTYPES; t++)
		for (size_t c = small ? t % 4 : 0; c < (small ? t % 4 + 1 : 4u); c++) {
			enum tpu_dtype dt = dtypes[t];
			int src = (int)((t + c) % (size_t)w->n);
			struct tpu_coll_member me = { .device = w->devs[w->me],
						      .is_source = w->me == src };
			struct tpu_coll_instance inst = { .instance_key = next_key++,
							  .type = TPU_COLL_BROADCAST, .dtype = dt,
							  .count = counts[c] };
			size_t bytes = counts[c] * tpu_dtype_size(dt);
			tpu_status st;

			fill(dt, TPU_OP_SUM, src, want, counts[c]);
			memset(buf, 0xee, bytes);
			if (me.is_source)
				memcpy(buf, want, bytes);
			/* The source alternates: in place, out of place, no output at all. */
			st = tpu_coll_exec_run(exec, &w->group, &inst, &me, me.is_source ? buf : NULL,
					       me.is_source && c % 3 == 2 ? NULL : buf);
			W_CHECK(st == 0 && !memcmp(buf, want, bytes));
		}
}

static void gather_matrix(struct worker *w, struct tpu_coll_exec *exec, bool small)
{
	const size_t counts[] = { 0, 1, 3, 1003 };
	static uint8_t in[1003 * 8], out[MAX_W * 1003 * 8], want[MAX_W * 1003 * 8];
	struct tpu_coll_member me = { .device = w->devs[w->me] };

	for (size_t t = 0; t < NDTYPES; t++)
		for (size_t c = small ? t % 4 : 0; c < (small ? t % 4 + 1 : 4u); c++) {
			enum tpu_dtype dt = dtypes[t];
			struct tpu_coll_instance inst = { .instance_key = next_key++,
							  .type = TPU_COLL_GATHER, .dtype = dt,
							  .count = counts[c] };
			size_t bytes = counts[c] * tpu_dtype_size(dt);
			bool in_place = c % 2;
			tpu_status st;

			for (int r = 0; r < w->n; r++)
				fill(dt, TPU_OP_SUM, r, want + (size_t)r * bytes, counts[c]);
			memset(out, 0xee, (size_t)w->n * bytes);
			fill(dt, TPU_OP_SUM, w->me, in_place ? out + (size_t)w->me * bytes : in,
			     counts[c]);
			st = tpu_coll_exec_run(exec, &w->group, &inst, &me,
					       in_place ? out + (size_t)w->me * bytes : in, out);
			W_CHECK(st == 0 && !memcmp(out, want, (size_t)w->n * bytes));
		}
}

/* Member r gets chunk r of the reduction; every type and op, lengths turning. */
static void reduce_scatter_matrix(struct worker *w, struct tpu_coll_exec *exec, bool small)
{
	const size_t counts[] = { 0, 1, (size_t)w->n + 1, 1003 };
	static uint8_t in[1003 * 8], out[1003 * 8], want[1003 * 8];
	struct tpu_coll_member me = { .device = w->devs[w->me] };
	unsigned int turn = 0;

	for (size_t t = 0; t < NDTYPES; t++)
		for (int op = TPU_OP_SUM; op <= TPU_OP_MAX; op++)
			for (size_t j = 0; j < (small ? 1u : 4u); j++, turn++) {
				size_t c = small ? turn % 4 : j, len;
				enum tpu_dtype dt = dtypes[t];
				enum tpu_final_op fin = op == TPU_OP_SUM && c % 2 ? TPU_FINAL_DIV :
							TPU_FINAL_NONE;
				struct tpu_coll_instance inst = {
					.instance_key = next_key++, .type = TPU_COLL_REDUCE_SCATTER,
					.dtype = dt, .count = counts[c], .op = (enum tpu_reduce_op)op,
					.final_op = fin };
				size_t es = tpu_dtype_size(dt);
				size_t start = tpu_coll_chunk(counts[c], w->n, w->me, &len);
				bool in_place = turn % 2;
				tpu_status st;

				fill(dt, inst.op, w->me, in, counts[c]);
				reference(dt, inst.op, fin, w->n, want, counts[c]);
				memset(out, 0xee, sizeof(out));
				if (in_place)
					memcpy(out, in, counts[c] * es);
				st = tpu_coll_exec_run(exec, &w->group, &inst, &me, in_place ? out : in,
						       out);
				W_CHECK(st == 0 && !memcmp(out, want + start * es, len * es));
			}
}

/* Block j of member r goes to member j as block r: in place and out of place. */
static void all_to_all_matrix(struct worker *w, struct tpu_coll_exec *exec, bool small)
{
	const size_t counts[] = { 0, 1, 3, 301 };
	static uint8_t in[MAX_W * 301 * 8], out[MAX_W * 301 * 8], want[MAX_W * 301 * 8];
	struct tpu_coll_member me = { .device = w->devs[w->me] };

	for (size_t t = 0; t < NDTYPES; t++)
		for (size_t c = small ? t % 4 : 0; c < (small ? t % 4 + 1 : 4u); c++) {
			enum tpu_dtype dt = dtypes[t];
			struct tpu_coll_instance inst = { .instance_key = next_key++,
							  .type = TPU_COLL_ALL_TO_ALL, .dtype = dt,
							  .count = counts[c] };
			size_t bytes = counts[c] * tpu_dtype_size(dt);
			bool in_place = (t + c) % 2;
			tpu_status st;

			/* Member r's block j holds values seeded by r * MAX_W + j. */
			for (int j = 0; j < w->n; j++) {
				fill(dt, TPU_OP_SUM, w->me * MAX_W + j, in + (size_t)j * bytes, counts[c]);
				fill(dt, TPU_OP_SUM, j * MAX_W + w->me, want + (size_t)j * bytes,
				     counts[c]);
			}
			if (in_place)
				memcpy(out, in, (size_t)w->n * bytes);
			st = tpu_coll_exec_run(exec, &w->group, &inst, &me, in_place ? out : in, out);
			W_CHECK(st == 0 && !memcmp(out, want, (size_t)w->n * bytes));
		}
}

/* Large enough for several pieces per chunk, and for two rings chosen or given. */
static void large_allreduce(struct worker *w, struct tpu_coll_exec *exec)
{
	const size_t count = 1500 * 1000;
	float *in = malloc(count * sizeof(float)), *out = malloc(count * sizeof(float));
	float *want = malloc(count * sizeof(float));
	const int32_t offsets[3] = { 0, w->n - 1, w->n / 2 };
	struct tpu_coll_member me = { .device = w->devs[w->me] };
	struct tpu_coll_resolved res;

	W_CHECK(in && out && want);
	fill(TPU_DT_FLOAT32, TPU_OP_SUM, w->me, in, count);
	reference(TPU_DT_FLOAT32, TPU_OP_SUM, TPU_FINAL_NONE, w->n, want, count);
	for (int variant = 0; variant < 2; variant++) {
		/* The ring named: lanes would take an all-reduce left to the library. */
		struct tpu_coll_instance inst = { .instance_key = next_key++,
						  .type = TPU_COLL_REDUCTION,
						  .dtype = TPU_DT_FLOAT32, .count = count,
						  .impl = "ring" };

		if (variant) {
			inst.num_subdivs = 3;
			inst.subdiv_offsets = offsets;
		}
		memset(out, 0, count * sizeof(float));
		W_CHECK(tpu_coll_exec_run(exec, &w->group, &inst, &me, in, out) == 0);
		W_CHECK(!memcmp(out, want, count * sizeof(float)));
		W_CHECK(tpu_coll_resolved(w->coll, 1, inst.instance_key, &res) == 0);
		W_CHECK(!strcmp(res.impl, "ring") && res.default_rank == w->me);
		W_CHECK(res.num_subdivs == (variant ? 3 : w->n > 2 ? 2 : 1));
	}
	free(in);
	free(out);
	free(want);
}

/*
 * Permutations of the group: the identity, a shift by one, the reverse and
 * swapped neighbours (the last member staying put when n is odd); every
 * type, lengths turning, in and out of place.  Then what each member can
 * see wrong alone: a rank twice, one out of range, none given.
 */
static void permute_matrix(struct worker *w, struct tpu_coll_exec *exec, bool small)
{
	const size_t counts[] = { 0, 1, 3, 1003 };
	static uint8_t in[1003 * 8], out[1003 * 8], want[1003 * 8];
	struct tpu_coll_member me = { .device = w->devs[w->me] };
	int32_t perm[MAX_W];
	int n = w->n;

	for (int kind = 0; kind < 4; kind++) {
		for (int r = 0; r < n; r++)
			perm[r] = kind == 0 ? r : kind == 1 ? (r + 1) % n : kind == 2 ? n - 1 - r :
				  (r ^ 1) < n ? r ^ 1 : r;
		for (size_t t = 0; t < NDTYPES; t++)
			for (size_t c = small ? (t + (size_t)kind) % 4 : 0;
			     c < (small ? (t + (size_t)kind) % 4 + 1 : 4u); c++) {
				enum tpu_dtype dt = dtypes[t];
				struct tpu_coll_instance inst = { .instance_key = next_key++,
								  .type = TPU_COLL_PERMUTE,
								  .dtype = dt, .count = counts[c],
								  .permutation = perm };
				size_t bytes = counts[c] * tpu_dtype_size(dt);
				bool in_place = (t + c) % 2;
				int from = -1;
				tpu_status st;

				for (int r = 0; r < n; r++)
					if (perm[r] == w->me)
						from = r;
				W_CHECK(from >= 0);
				fill(dt, TPU_OP_SUM, from * 5 + kind, want, counts[c]);
				memset(out, 0xee, sizeof(out));
				fill(dt, TPU_OP_SUM, w->me * 5 + kind, in_place ? out : in, counts[c]);
				st = tpu_coll_exec_run(exec, &w->group, &inst, &me,
						       in_place ? out : in, out);
				W_CHECK(st == 0 && !memcmp(out, want, bytes));
				/* Nothing past the tensor was written. */
				W_CHECK(bytes == sizeof(out) || out[bytes] == 0xee);
			}
	}
	for (int bad = 0; bad < 3; bad++) {
		struct tpu_coll_instance inst = { .instance_key = next_key++,
						  .type = TPU_COLL_PERMUTE,
						  .dtype = TPU_DT_INT32, .count = 1,
						  .permutation = bad == 2 ? NULL : perm };

		for (int r = 0; r < n; r++)
			perm[r] = r;
		perm[n - 1] = bad == 0 ? 0 : n;
		if (bad == 0 && n == 1)
			continue;	/* one member: rank 0 twice needs two entries */
		W_CHECK(tpu_coll_exec_run(exec, &w->group, &inst, &me, in, out) == -EINVAL);
	}
}

static const char *want_channel(void);

/*
 * Past the slots: each collective lanes serve, with 200003 floats a member
 * (the single-copy reads, through the module where it is loaded).
 */
static void large_on_lanes(struct worker *w, struct tpu_coll_exec *exec)
{
	const size_t count = 200003, bytes = count * sizeof(float);
	float *in = malloc(bytes), *out = malloc(bytes * (size_t)w->n);
	float *want = malloc(bytes * (size_t)w->n);
	struct tpu_coll_member me = { .device = w->devs[w->me], .is_source = w->me == 0 };
	static const enum tpu_coll_type types[] = { TPU_COLL_REDUCTION, TPU_COLL_BROADCAST,
						    TPU_COLL_GATHER, TPU_COLL_REDUCE_SCATTER };

	W_CHECK(in && out && want);
	for (size_t t = 0; t < 4; t++) {
		struct tpu_coll_instance inst = { .instance_key = next_key++, .type = types[t],
						  .dtype = TPU_DT_FLOAT32, .count = count,
						  .op = TPU_OP_SUM };
		size_t len, start = tpu_coll_chunk(count, w->n, w->me, &len), cmp = bytes;
		const float *got = out;

		fill(TPU_DT_FLOAT32, TPU_OP_SUM, w->me, in, count);
		memset(out, 0xee, bytes * (size_t)w->n);
		if (types[t] == TPU_COLL_BROADCAST) {
			fill(TPU_DT_FLOAT32, TPU_OP_SUM, 0, want, count);
		} else if (types[t] == TPU_COLL_GATHER) {
			for (int r = 0; r < w->n; r++)
				fill(TPU_DT_FLOAT32, TPU_OP_SUM, r, want + (size_t)r * count, count);
			cmp = bytes * (size_t)w->n;
		} else {
			reference(TPU_DT_FLOAT32, TPU_OP_SUM, TPU_FINAL_NONE, w->n, want, count);
		}
		if (types[t] == TPU_COLL_REDUCE_SCATTER) {
			memmove(want, want + start, len * sizeof(float));
			cmp = len * sizeof(float);
		}
		W_CHECK(tpu_coll_exec_run(exec, &w->group, &inst, &me, in, out) == 0);
		if (types[t] == TPU_COLL_BROADCAST && w->me == 0)
			continue;
		W_CHECK(!memcmp(got, want, cmp));
	}
	free(in);
	free(out);
	free(want);
}

static void matrix(struct worker *w)
{
	struct tpu_coll_exec *exec;
	bool small = under_valgrind();

	W_CHECK(tpu_coll_exec_create(w->coll, 1, &exec) == 0);
	allreduce_matrix(w, exec, small);
	broadcast_matrix(w, exec, small);
	gather_matrix(w, exec, small);
	reduce_scatter_matrix(w, exec, small);
	all_to_all_matrix(w, exec, small);
	permute_matrix(w, exec, small);
	if (!under_valgrind() && w->n >= 2) {
		large_allreduce(w, exec);
		large_on_lanes(w, exec);
	}
	tpu_coll_exec_destroy(exec);
	/*
	 * Members that are processes of one host, their pids proven by shm
	 * pipes, ran on lanes what lanes serve; over tcp, or told not to, none.
	 */
	if (w->n >= 2 && !strcmp(transport, "shm") && !getenv("TPU_COLL_PATH"))
		W_CHECK(tpu__coll_lanes_runs() > 0);
	else
		W_CHECK(tpu__coll_lanes_runs() == 0);
	/* Where the module is loaded (the VM) it copied the large ones; elsewhere never. */
	if (!strcmp(want_channel(), "kmod") && tpu__coll_lanes_runs() && !under_valgrind())
		W_CHECK(tpu__coll_lanes_kmod_runs() > 0);
	else if (strcmp(want_channel(), "kmod"))
		W_CHECK(tpu__coll_lanes_kmod_runs() == 0);
}

/* The matrix with TPU_COLL_PATH=rdv: every call through the rendezvous. */
static void matrix_forced_rdv(struct worker *w)
{
	setenv("TPU_COLL_PATH", "rdv", 1);
	matrix(w);
}

/*
 * Which way the members' tensors went: after an all-to-all every member
 * has a pipe to every other, and on one host those pipes carry CPU tensors
 * over the kmod channel when the module is there (the VM), else over cma.
 */
static const char *want_channel(void)
{
	return access(TPU_DEVICE_PATH, R_OK | W_OK) ? "cma" : "kmod";
}

static void paths(struct worker *w)
{
	struct tpu_rendezvous *rdv = tpu_coll_rendezvous(w->coll);
	struct tpu_coll_member me = { .device = w->devs[w->me] };
	struct tpu_coll_exec *exec;
	int32_t in[MAX_W], out[MAX_W];
	struct tpu_coll_instance inst = { .instance_key = next_key++, .type = TPU_COLL_ALL_TO_ALL,
					  .dtype = TPU_DT_INT32, .count = 1 };

	for (int j = 0; j < w->n; j++)
		in[j] = w->me * 100 + j;
	W_CHECK(tpu_coll_exec_create(w->coll, 1, &exec) == 0);
	W_CHECK(tpu_coll_exec_run(exec, &w->group, &inst, &me, in, out) == 0);
	tpu_coll_exec_destroy(exec);
	for (int j = 0; j < w->n; j++)
		W_CHECK(out[j] == j * 100 + w->me);
	for (int j = 0; j < w->n; j++) {
		const char *tr = NULL, *ch = NULL;
		char task[64];

		if (j == w->me)
			continue;
		snprintf(task, sizeof(task), TASK_FMT, j);
		W_CHECK(tpu_rendezvous_peer_path(rdv, task, &tr, &ch) == 0);
		fprintf(stderr, "# coll worker %d reaches worker %d over %s, channel %s\n", w->me,
			j, tr, ch);
		W_CHECK(!strcmp(tr, transport));
		W_CHECK(strcmp(transport, "shm") || !strcmp(ch, want_channel()));
	}
}

/* ---- concurrency and the cache ---- */

struct pending {
	tpu_status status;
	bool done;
	pthread_mutex_t *lock;
	pthread_cond_t *cond;
};

static void pending_done(void *arg, tpu_status status)
{
	struct pending *p = arg;

	pthread_mutex_lock(p->lock);
	p->status = status;
	p->done = true;
	pthread_cond_broadcast(p->cond);
	pthread_mutex_unlock(p->lock);
}

/*
 * Six instances in flight at once, each member starting them in its own
 * order; then the first three again in the next step, from the cache.
 */
static void out_of_order(struct worker *w)
{
	enum { K = 6, C = 5000 };
	static int32_t in[K][C], out[K][C], want[C];
	pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
	struct pending p[K];
	struct tpu_coll_member me = { .device = w->devs[w->me] };

	for (int step = 1; step <= 2; step++) {
		struct tpu_coll_exec *exec;
		int k_max = step == 1 ? K : 3;

		W_CHECK(tpu_coll_exec_create(w->coll, step, &exec) == 0);
		for (int j = 0; j < k_max; j++) {
			int k = (j + w->me * 2) % k_max;	/* a different order on each member */
			struct tpu_coll_instance inst = { .instance_key = 10 + k,
							  .type = TPU_COLL_REDUCTION,
							  .dtype = TPU_DT_INT32, .count = C,
							  .impl = k % 2 ? "ring" : NULL };

			fill(TPU_DT_INT32, TPU_OP_SUM, w->me + k, in[k], C);
			p[k] = (struct pending){ .lock = &lock, .cond = &cond };
			W_CHECK(tpu_coll_exec_start(exec, &w->group, &inst, &me, in[k], out[k],
						    pending_done, &p[k]) == 0);
		}
		for (int k = 0; k < k_max; k++) {
			pthread_mutex_lock(&lock);
			while (!p[k].done)
				pthread_cond_wait(&cond, &lock);
			pthread_mutex_unlock(&lock);
			W_CHECK(p[k].status == 0);
			for (int i = 0; i < C; i++) {
				int32_t s = 0;

				for (int r = 0; r < w->n; r++)
					s += (int32_t)value(TPU_DT_INT32, TPU_OP_SUM, r + k, (size_t)i);
				want[i] = s;
			}
			W_CHECK(!memcmp(out[k], want, sizeof(want)));
		}
		tpu_coll_exec_destroy(exec);
	}
}

/* ---- two members per worker ---- */

struct local_member {
	struct worker *w;
	int dev;		/* device id within the task */
	const char **devs;
	bool ok;
};

/* One member thread: its worker's tpu_coll, shared with the other member of the task. */
static void *local_member_run(void *arg)
{
	struct local_member *lm = arg;
	struct worker *w = lm->w;
	int rank = w->me * 2 + lm->dev;		/* names sort task first, then device */
	struct tpu_coll_group g = { .group_key = 2, .group_size = 4, .device_type = "CPU",
				    .devices = lm->devs };
	char self[64];
	struct tpu_coll_member me = { .device = self, .is_source = rank == 3 };
	struct tpu_coll_exec *exec;
	int64_t in[257], out[257 * 4];
	bool ok = true;

	snprintf(self, sizeof(self), TASK_FMT "/device:CPU:%d", w->me, lm->dev);
	if (tpu_coll_exec_create(w->coll, 1, &exec))
		return NULL;
	for (int k = 0; k < 5; k++) {
		static const char *const impls[] = { "ring", "doubling", NULL };
		struct tpu_coll_instance inst = { .instance_key = k, .dtype = TPU_DT_INT64,
						  .count = 257, .op = TPU_OP_SUM,
						  .type = k < 3 ? TPU_COLL_REDUCTION :
							  k == 3 ? TPU_COLL_BROADCAST : TPU_COLL_GATHER,
						  .impl = k < 3 ? impls[k] : NULL };

		for (int i = 0; i < 257; i++)
			in[i] = i * 10 + rank;
		tpu_status st = tpu_coll_exec_run(exec, &g, &inst, &me, in, out);
		bool same = true;

		for (int i = 0; i < 257 * (k == 4 ? 4 : 1) && !st; i++)
			same &= out[i] == (k < 3 ? 4 * i * 10 + 6 : k == 3 ? i * 10 + 3 :
					   (i % 257) * 10 + i / 257);
		if (st || !same)
			fprintf(stderr, "# coll rank %d: instance %d: %s%s\n", rank, k,
				tpu_status_name(st), same ? "" : ", wrong result");
		ok &= !st && same;
	}
	tpu_coll_exec_destroy(exec);
	lm->ok = ok;
	return NULL;
}

/* Two workers, two devices each: same-task keys meet inside a worker, the rest across. */
static void two_per_task(struct worker *w)
{
	char names[4][64];
	const char *devs[4];
	struct local_member lm[2];
	pthread_t tids[2];
	struct tpu_coll_resolved res;

	for (int i = 0; i < 4; i++) {
		snprintf(names[i], sizeof(names[i]), TASK_FMT "/device:CPU:%d", i / 2, i % 2);
		devs[3 - i] = names[i];
	}
	for (int d = 0; d < 2; d++) {
		lm[d] = (struct local_member){ .w = w, .dev = d, .devs = devs };
		W_CHECK(pthread_create(&tids[d], NULL, local_member_run, &lm[d]) == 0);
	}
	for (int d = 0; d < 2; d++) {
		pthread_join(tids[d], NULL);
		W_CHECK(lm[d].ok);
	}
	W_CHECK(tpu_coll_resolved(w->coll, 2, 0, &res) == 0 && res.num_tasks == 2);
}

/* ---- failures ---- */

static tpu_status run_one(struct worker *w, int64_t step, struct tpu_coll_instance *inst,
			  bool is_source, void *in, void *out)
{
	struct tpu_coll_exec *exec;
	struct tpu_coll_member me = { .device = w->devs[w->me], .is_source = is_source };
	tpu_status st;

	W_CHECK(tpu_coll_exec_create(w->coll, step, &exec) == 0);
	st = tpu_coll_exec_run(exec, &w->group, inst, &me, in, out);
	tpu_coll_exec_destroy(exec);
	return st;
}

/*
 * Disagreements fail every member with one status and reason, promptly,
 * and leave the rendezvous usable: a correct instance runs right after.
 */
/*
 * Resolution's verdicts, so through the rendezvous (TPU_COLL_PATH=rdv):
 * on lanes the segment finds a mismatch instead (mismatch_on_lanes).
 */
static void mismatch(struct worker *w)
{
	static float in[64], out[64];
	struct tpu_coll_instance inst = { .instance_key = 1, .type = TPU_COLL_REDUCTION,
					  .dtype = TPU_DT_FLOAT32, .count = 16 };
	char why[320];
	uint64_t t0 = now_ns();

	setenv("TPU_COLL_PATH", "rdv", 1);

	/* The last member has a longer tensor. */
	if (w->me == w->n - 1)
		inst.count = 17;
	W_CHECK(run_one(w, 1, &inst, false, in, out) == TPU_E_COLL_MISMATCH);
	tpu_coll_last_reason(w->coll, why, sizeof(why));
	W_CHECK(strstr(why, "element count") != NULL);
	/* Another data type on member 0 only. */
	inst = (struct tpu_coll_instance){ .instance_key = 2, .type = TPU_COLL_REDUCTION,
					   .dtype = w->me ? TPU_DT_FLOAT32 : TPU_DT_INT32,
					   .count = 16 };
	W_CHECK(run_one(w, 1, &inst, false, in, out) == TPU_E_COLL_MISMATCH);
	tpu_coll_last_reason(w->coll, why, sizeof(why));
	W_CHECK(strstr(why, "data type") != NULL);
	/* A broadcast whose every member thinks itself the source. */
	inst = (struct tpu_coll_instance){ .instance_key = 3, .type = TPU_COLL_BROADCAST,
					   .dtype = TPU_DT_FLOAT32, .count = 16 };
	W_CHECK(run_one(w, 1, &inst, true, in, out) == TPU_E_COLL_MISMATCH);
	/* A collective type only one member runs. */
	inst = (struct tpu_coll_instance){ .instance_key = 4,
					   .type = w->me == 1 ? TPU_COLL_GATHER :
							       TPU_COLL_REDUCTION,
					   .dtype = TPU_DT_FLOAT32, .count = 4 };
	W_CHECK(run_one(w, 1, &inst, false, in, out) == TPU_E_COLL_MISMATCH);
	/* An implementation nobody registered. */
	inst = (struct tpu_coll_instance){ .instance_key = 5, .type = TPU_COLL_REDUCTION,
					   .dtype = TPU_DT_FLOAT32, .count = 16, .impl = "nope" };
	W_CHECK(run_one(w, 1, &inst, false, in, out) == -ENOENT);
	/* A permutation the last member has the other way round. */
	int32_t perm[MAX_W];

	for (int r = 0; r < w->n; r++)
		perm[r] = w->me == w->n - 1 ? (r + 1) % w->n : (r + w->n - 1) % w->n;
	inst = (struct tpu_coll_instance){ .instance_key = 7, .type = TPU_COLL_PERMUTE,
					   .dtype = TPU_DT_FLOAT32, .count = 16,
					   .permutation = perm };
	W_CHECK(run_one(w, 1, &inst, false, in, out) == TPU_E_COLL_MISMATCH);
	tpu_coll_last_reason(w->coll, why, sizeof(why));
	W_CHECK(strstr(why, "permutation") != NULL);
	W_CHECK(now_ns() - t0 < 20000000000ull);
	/* Nothing was aborted: a correct instance still runs. */
	inst = (struct tpu_coll_instance){ .instance_key = 6, .type = TPU_COLL_REDUCTION,
					   .dtype = TPU_DT_FLOAT32, .count = 16 };
	fill(TPU_DT_FLOAT32, TPU_OP_SUM, w->me, in, 16);
	W_CHECK(run_one(w, 1, &inst, false, in, out) == 0);
	/*
	 * One member runs it again with other parameters, the others as
	 * before: every member hears of it at once, with the reason (the
	 * others waited out their timeouts, then the world was aborted).
	 */
	t0 = now_ns();
	inst.count = w->me == w->n - 1 ? 8 : 16;
	W_CHECK(run_one(w, 2, &inst, false, in, out) == TPU_E_COLL_MISMATCH);
	tpu_coll_last_reason(w->coll, why, sizeof(why));
	W_CHECK(strstr(why, "element count") != NULL);
	/* All of them changing it is refused too (an instance's parameters are its first run's). */
	inst.count = 8;
	W_CHECK(run_one(w, 3, &inst, false, in, out) == TPU_E_COLL_MISMATCH);
	tpu_coll_last_reason(w->coll, why, sizeof(why));
	W_CHECK(strstr(why, "element count") != NULL && strstr(why, "first run") != NULL);
	W_CHECK(now_ns() - t0 < 5000000000ull);
	/* And the instance, as it was, still runs. */
	inst.count = 16;
	W_CHECK(run_one(w, 4, &inst, false, in, out) == 0);
	/* Bad arguments are refused before anything is sent. */
	struct tpu_coll_exec *exec;
	struct tpu_coll_member stranger = { .device = "/job:worker/replica:0/task:99/device:CPU:0" };

	W_CHECK(tpu_coll_exec_create(w->coll, 3, &exec) == 0);
	W_CHECK(tpu_coll_exec_run(exec, &w->group, &inst, &stranger, in, out) == -EINVAL);
	inst.dtype = (enum tpu_dtype)42;
	stranger.device = w->devs[w->me];
	W_CHECK(tpu_coll_exec_run(exec, &w->group, &inst, &stranger, in, out) == -EINVAL);
	tpu_coll_exec_destroy(exec);
}

/*
 * On lanes: one member's other element count fails every member's call
 * with TPU_E_COLL_MISMATCH and the reason, promptly, and (as on the
 * world's segment) every later call of the group.
 */
static void mismatch_on_lanes(struct worker *w)
{
	static float in[64], out[64];
	struct tpu_coll_instance inst = { .instance_key = 1, .type = TPU_COLL_REDUCTION,
					  .dtype = TPU_DT_FLOAT32, .count = 16 };
	unsigned long ran = tpu__coll_lanes_runs();
	char why[320];
	uint64_t t0;

	W_CHECK(run_one(w, 1, &inst, false, in, out) == 0);
	W_CHECK(tpu__coll_lanes_runs() == ran + 1);
	t0 = now_ns();
	inst.count = w->me == w->n - 1 ? 8 : 16;
	W_CHECK(run_one(w, 2, &inst, false, in, out) == TPU_E_COLL_MISMATCH);
	tpu_coll_last_reason(w->coll, why, sizeof(why));
	W_CHECK(strstr(why, "element count") != NULL);
	W_CHECK(now_ns() - t0 < 5000000000ull);
	inst.count = 16;
	inst.instance_key = 2;
	W_CHECK(run_one(w, 3, &inst, false, in, out) != 0);
	W_CHECK(tpu__coll_lanes_runs() == ran + 1);
}

/* Wait for one run and say how it ended; the tensor is large so it is mid-way when it fails. */
static tpu_status big_run(struct worker *w, int64_t step, int key, uint64_t timeout_ns,
			  uint64_t *elapsed)
{
	const size_t count = 4u << 20;
	float *in = calloc(count, sizeof(float)), *out = calloc(count, sizeof(float));
	struct tpu_coll_instance inst = { .instance_key = key, .type = TPU_COLL_REDUCTION,
					  .dtype = TPU_DT_FLOAT32, .count = count,
					  .impl = kill_impl, .timeout_ns = timeout_ns };
	uint64_t t0 = now_ns();
	tpu_status st;

	W_CHECK(in && out);
	st = run_one(w, step, &inst, false, in, out);
	*elapsed = now_ns() - t0;
	free(in);
	free(out);
	return st;
}

static void warm_up(struct worker *w)
{
	static float in[8], out[8];
	struct tpu_coll_instance inst = { .instance_key = 1, .type = TPU_COLL_REDUCTION,
					  .dtype = TPU_DT_FLOAT32, .count = 8, .impl = "ring" };

	W_CHECK(run_one(w, 1, &inst, false, in, out) == 0);
}

/* Member 1 aborts the step while the others are in a collective it never joins. */
static void abort_one(struct worker *w)
{
	uint64_t elapsed;
	tpu_status st;

	warm_up(w);		/* every pair of members has its pipe now */
	barrier(w);
	if (w->me == 1) {
		struct tpu_coll_exec *exec;

		usleep(200000);
		W_CHECK(tpu_coll_exec_create(w->coll, 2, &exec) == 0);
		W_CHECK(tpu_coll_exec_abort(exec, -ECANCELED) == 0);
		W_CHECK(tpu_coll_exec_abort(exec, -ECANCELED) == -EALREADY);
		tpu_coll_exec_destroy(exec);
		st = -ECANCELED;
	} else {
		st = big_run(w, 2, 2, 0, &elapsed);
		W_CHECK(elapsed < 10000000000ull);
	}
	W_CHECK(st == -ECANCELED);
	/* Later runs of the step fail at once, with the abort status. */
	static float x[4];
	struct tpu_coll_instance inst = { .instance_key = 3, .type = TPU_COLL_REDUCTION,
					  .dtype = TPU_DT_FLOAT32, .count = 4 };
	st = run_one(w, 2, &inst, false, x, x);
	if (st != -ECANCELED)
		fprintf(stderr, "# coll worker %d: the later run ended %s\n", w->me, tpu_status_name(st));
	W_CHECK(st == -ECANCELED);
}

static void ignore(void *arg, tpu_status status)
{
	(void)arg;
	(void)status;
}

/* The last member dies in the middle of a large all-reduce. */
static void killed(struct worker *w)
{
	uint64_t elapsed;
	tpu_status st;

	warm_up(w);
	if (!kill_impl) {
		/* The group takes its lanes here, before anyone dies. */
		static float in[8], out[8];
		struct tpu_coll_instance inst = { .instance_key = 3, .type = TPU_COLL_REDUCTION,
						  .dtype = TPU_DT_FLOAT32, .count = 8 };
		unsigned long ran = tpu__coll_lanes_runs();

		W_CHECK(run_one(w, 1, &inst, false, in, out) == 0);
		W_CHECK(tpu__coll_lanes_runs() == ran + 1);
	}
	barrier(w);
	if (w->me == w->n - 1 && !kill_impl) {
		/* On lanes the others wait for it there (no resolution first): it never comes. */
		usleep(20000);
		raise(SIGKILL);
	}
	if (w->me == w->n - 1) {
		/* It starts its part, and is gone once the data starts to move. */
		const size_t count = 4u << 20;
		float *buf = calloc(count, sizeof(float));
		struct tpu_coll_instance inst = { .instance_key = 2, .type = TPU_COLL_REDUCTION,
						  .dtype = TPU_DT_FLOAT32, .count = count,
						  .impl = kill_impl };
		struct tpu_coll_member me = { .device = w->devs[w->me] };
		struct tpu_coll_exec *exec;

		W_CHECK(buf && tpu_coll_exec_create(w->coll, 2, &exec) == 0);
		struct tpu_coll_resolved res;

		W_CHECK(tpu_coll_exec_start(exec, &w->group, &inst, &me, buf, buf, ignore,
					    NULL) == 0);
		/* Resolved: the data has just started moving, and needs this member to go on. */
		while (tpu_coll_resolved(w->coll, 1, 2, &res))
			usleep(100);
		raise(SIGKILL);
	}
	st = big_run(w, 2, 2, 0, &elapsed);
	fprintf(stderr, "# coll worker %d: after a peer's death: %s in %.2f s\n", w->me,
		tpu_status_name(st), (double)elapsed / 1e9);
	W_CHECK(elapsed < 15000000000ull);
	W_CHECK(st == TPU_E_PEER_GONE || st == -ECONNABORTED);
	tpu_coll_destroy(w->coll);
	tpu_context_destroy(w->ctx);
	_exit(st == TPU_E_PEER_GONE ? SAW_PEER_GONE : SAW_ABORTED);
}

/* Member 0 runs a collective the others never start: it times out, on time. */
static void timeout(struct worker *w)
{
	static float x[4];
	struct tpu_coll_instance inst = { .instance_key = 7, .type = TPU_COLL_REDUCTION,
					  .dtype = TPU_DT_FLOAT32, .count = 4,
					  .timeout_ns = 300000000 };
	uint64_t t0 = now_ns();

	if (w->me == 0) {
		W_CHECK(run_one(w, 1, &inst, false, x, x) == -ETIMEDOUT);
		W_CHECK(now_ns() - t0 < 5000000000ull);
	}
}

/* ---- threads of one process over the inprocess rendezvous ---- */

#define NTHR 4

struct thr {
	struct tpu_rendezvous *rdv;
	int me;
	bool ok;
};

static void *thread_member(void *arg)
{
	struct thr *t = arg;
	char names[NTHR][64];
	const char *devs[NTHR];
	int64_t in[1001], out[1001 * NTHR];
	struct tpu_coll_group g = { .group_key = 9, .group_size = NTHR, .device_type = "CPU",
				    .devices = devs };
	struct tpu_coll_member me;
	struct tpu_coll *coll;
	struct tpu_coll_exec *exec;
	bool ok = true;

	for (int i = 0; i < NTHR; i++) {
		snprintf(names[i], sizeof(names[i]), "/job:localhost/replica:0/task:0/device:CPU:%d",
			 i);
		devs[i] = names[i];
	}
	me = (struct tpu_coll_member){ .device = names[t->me], .is_source = t->me == 2 };
	if (tpu_coll_create(t->rdv, &coll) || tpu_coll_exec_create(coll, 5, &exec))
		return NULL;
	for (int k = 0; k < 3; k++) {
		struct tpu_coll_instance inst = { .instance_key = k, .dtype = TPU_DT_INT64,
						  .count = 1001, .type = TPU_COLL_REDUCTION,
						  .op = TPU_OP_MAX, .impl = k == 1 ? "ring" : NULL };

		if (k == 2)
			inst.type = TPU_COLL_GATHER;
		for (int i = 0; i < 1001; i++)
			in[i] = (int64_t)(i * NTHR + t->me);
		ok &= tpu_coll_exec_run(exec, &g, &inst, &me, in, out) == 0;
		for (int i = 0; i < 1001 * (k == 2 ? NTHR : 1); i++)
			ok &= out[i] == (k == 2 ? (int64_t)((i % 1001) * NTHR + i / 1001) :
					 (int64_t)(i * NTHR + NTHR - 1));
	}
	tpu_coll_exec_destroy(exec);
	tpu_coll_destroy(coll);
	t->ok = ok;
	return NULL;
}

static void threads_over_inprocess(void)
{
	struct tpu_context *ctx;
	struct tpu_rendezvous *rdv;
	struct thr thr[NTHR];
	pthread_t tids[NTHR];
	bool ok = true;

	if (tpu_context_create(NULL, &ctx) || tpu_rendezvous_create(ctx, TPU_RDV_INPROCESS, &rdv)) {
		CHECK(false, "coll_threads_over_the_inprocess_rendezvous: set-up");
		return;
	}
	for (int i = 0; i < NTHR; i++) {
		thr[i] = (struct thr){ .rdv = rdv, .me = i };
		pthread_create(&tids[i], NULL, thread_member, &thr[i]);
	}
	for (int i = 0; i < NTHR; i++) {
		pthread_join(tids[i], NULL);
		ok &= thr[i].ok;
	}
	CHECK(ok, "coll_threads_over_the_inprocess_rendezvous_reduce_and_gather");
	tpu_rendezvous_destroy(rdv);
	tpu_context_destroy(ctx);
}

static void api_arguments(void)
{
	struct tpu_coll *coll = NULL;
	struct tpu_coll_exec *exec = NULL;
	struct tpu_coll_resolved res;
	enum tpu_coll_type type;
	char why[8] = "x";
	int found = 0;

	CHECK_STATUS(tpu_coll_create(NULL, &coll), -EINVAL, "coll_create_refuses_a_null_rendezvous");
	CHECK_STATUS(tpu_coll_exec_create(NULL, 1, &exec), -EINVAL,
		     "coll_exec_create_refuses_a_null_coll");
	CHECK_STATUS(tpu_coll_resolved(NULL, 1, 1, &res), -EINVAL,
		     "coll_resolved_refuses_a_null_coll");
	CHECK_STATUS(tpu_coll_exec_abort(NULL, -ECANCELED), -EINVAL,
		     "coll_exec_abort_refuses_a_null_executor");
	CHECK_STATUS(tpu_coll_exec_start(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL), -EINVAL,
		     "coll_exec_start_refuses_nulls");
	tpu_coll_last_reason(NULL, why, sizeof(why));
	CHECK(why[0] == 0, "coll_last_reason_of_nothing_is_empty");
	tpu_coll_destroy(NULL);
	tpu_coll_exec_destroy(NULL);
	for (size_t i = 0; tpu_coll_impl_name(i, &type); i++)
		found += (!strcmp(tpu_coll_impl_name(i, NULL), "ring") && type == TPU_COLL_REDUCTION) +
			 (!strcmp(tpu_coll_impl_name(i, NULL), "doubling")) +
			 (!strcmp(tpu_coll_impl_name(i, NULL), "tree") && type == TPU_COLL_BROADCAST) +
			 (!strcmp(tpu_coll_impl_name(i, NULL), "ring") && type == TPU_COLL_GATHER) +
			 (!strcmp(tpu_coll_impl_name(i, NULL), "direct") && type == TPU_COLL_PERMUTE);
	CHECK(found == 5, "coll_registry_lists_ring_doubling_tree_ring_gather_and_direct_permute");
	CHECK(!strcmp(tpu_status_name(TPU_E_COLL_MISMATCH), "TPU_E_COLL_MISMATCH"),
	      "coll_mismatch_status_has_a_name");
}

struct started {
	atomic_int calls;
	tpu_status status;
};

static void started_done(void *arg, tpu_status status)
{
	struct started *s = arg;

	s->status = status;
	atomic_fetch_add(&s->calls, 1);
}

/*
 * A tpu_coll destroyed before its executors, with a run in flight: the
 * run goes on to its own end (a timeout: its peer never comes), calls on
 * the object and new runs fail with TPU_E_DESTROYED, and the last
 * executor's destroy frees it (ASan and valgrind see no use after free).
 */
static void destroyed_before_its_executors(void)
{
	static const char *const devs[] = { "/job:localhost/replica:0/task:0/device:CPU:0",
					     "/job:localhost/replica:0/task:0/device:CPU:1" };
	struct tpu_coll_group g = { .group_key = 11, .group_size = 2, .device_type = "CPU",
				    .devices = devs };
	struct tpu_coll_instance inst = { .instance_key = 1, .type = TPU_COLL_REDUCTION,
					  .dtype = TPU_DT_FLOAT32, .count = 64,
					  .op = TPU_OP_SUM, .timeout_ns = 300000000ull };
	struct tpu_coll_member m0 = { .device = devs[0] }, m1 = { .device = devs[1] };
	struct started run = { 0 };
	struct tpu_context *ctx;
	struct tpu_rendezvous *rdv;
	struct tpu_coll *coll;
	struct tpu_coll_exec *e0, *e1, *e2 = NULL;
	static float in[64], out[64];
	tpu_status st;

	if (tpu_context_create(NULL, &ctx) || tpu_rendezvous_create(ctx, TPU_RDV_INPROCESS, &rdv) ||
	    tpu_coll_create(rdv, &coll) || tpu_coll_exec_create(coll, 1, &e0) ||
	    tpu_coll_exec_create(coll, 1, &e1)) {
		CHECK(false, "coll_destroyed_before_its_executors: set-up");
		return;
	}
	st = tpu_coll_exec_start(e0, &g, &inst, &m0, in, out, started_done, &run);
	CHECK_STATUS(st, 0, "coll_destroyed_before_its_executors: a run starts");
	usleep(50 * 1000);
	tpu_coll_destroy(coll);
	CHECK(tpu_coll_rendezvous(coll) == NULL && tpu_coll_exec_create(coll, 2, &e2) ==
	      TPU_E_DESTROYED && !e2,
	      "coll_destroyed_before_its_executors_refuses_calls_and_new_executors");
	CHECK_STATUS(tpu_coll_exec_run(e1, &g, &inst, &m1, in, out), TPU_E_DESTROYED,
		     "coll_destroyed_before_its_executors_refuses_new_runs_on_them");
	/* The run in flight, on memory the destroy kept: its own timeout ends it. */
	tpu_coll_exec_destroy(e0);
	CHECK(atomic_load(&run.calls) == 1 && run.status == -ETIMEDOUT,
	      "coll_destroyed_before_its_executors_lets_a_run_in_flight_end_on_its_own "
	      "(%d calls, %s)", atomic_load(&run.calls), tpu_status_name(run.status));
	tpu_coll_exec_destroy(e1);
	tpu_coll_destroy(coll);
	tpu_rendezvous_destroy(rdv);
	tpu_context_destroy(ctx);
}

/* ---- running a case ---- */

struct scenario {
	const char *name;
	void (*fn)(struct worker *w);
	int dies;		/* the worker killed on purpose, or -1 */
};

/* Relay barriers until every worker closed its socket. */
static void relay(int *socks, int n)
{
	char urls[MAX_W][URL_LEN];
	int open = n;
	char c;

	for (int i = 0; i < n && !strcmp(transport, "tcp"); i++)
		if (read(socks[i], urls[i], URL_LEN) != URL_LEN)
			return;
	for (int i = 0; i < n && !strcmp(transport, "tcp"); i++)
		for (int j = 0; j < n; j++)
			if (write(socks[i], urls[j], URL_LEN) != URL_LEN)
				return;

	while (open > 0) {
		int arrived = 0;

		for (int i = 0; i < n; i++) {
			if (socks[i] < 0)
				continue;
			if (read(socks[i], &c, 1) != 1) {
				close(socks[i]);
				socks[i] = -1;
				open--;
				continue;
			}
			arrived++;
		}
		for (int i = 0; i < n && arrived; i++)
			if (socks[i] >= 0 && write(socks[i], "g", 1) != 1)
				return;
	}
}

static void run_case(const struct scenario *sc, int n, int serial, int *codes)
{
	pid_t pids[MAX_W];
	int socks[MAX_W], status;

	for (int i = 0; i < n; i++) {
		int sv[2];

		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
			codes[i] = -1;
			continue;
		}
		fflush(NULL);
		pids[i] = fork();
		if (pids[i] == 0) {
			struct worker wk = { .n = n, .me = i, .sock = sv[1] }, *w = &wk;

			for (int j = 0; j < i; j++)
				close(socks[j]);
			close(sv[0]);
			alarm(worker_watchdog_s());
			worker_start(w, serial);
			sc->fn(w);
			worker_end(w);
			_exit(0);
		}
		close(sv[1]);
		socks[i] = sv[0];
	}
	relay(socks, n);
	for (int i = 0; i < n; i++) {
		if (socks[i] >= 0)
			close(socks[i]);
		if (waitpid(pids[i], &status, 0) != pids[i])
			codes[i] = -1;
		else if (WIFSIGNALED(status))
			codes[i] = 1000 + WTERMSIG(status);
		else
			codes[i] = WEXITSTATUS(status);
	}
}

static void expect_all_pass(const char *what, int n, const int *codes)
{
	int bad = -1;

	for (int i = 0; i < n; i++)
		if (codes[i] != 0)
			bad = i;
	if (bad >= 0)
		tap_diag("%s: worker %d ended with %d", what, bad, codes[bad]);
	CHECK(bad < 0, "%s, %d members", what, n);
}

void test_coll(void)
{
	static const struct scenario matrix_case = { "matrix", matrix, -1 };
	static const struct scenario cases[] = {
		{ "several_instances_in_flight_out_of_order_then_cached", out_of_order, -1 },
		{ "mismatched_params_fail_every_member_with_a_reason", mismatch, -1 },
		{ "mismatched_params_on_lanes_fail_every_member_and_the_lanes", mismatch_on_lanes,
		  -1 },
		{ "abort_from_one_member_fails_every_member", abort_one, -1 },
		{ "timeout_fails_a_collective_whose_peers_never_come", timeout, -1 },
	};
	static const struct scenario kill_case = { "killed", killed, 2 };
	static const struct scenario pair_case = { "two_members_per_worker", two_per_task, -1 };
	static const struct scenario path_case = { "paths", paths, -1 };
	static const struct scenario forced_case = { "forced_rdv", matrix_forced_rdv, -1 };
	int codes[MAX_W], serial = 0, peer_gone = 0, others_ok = 1;
	bool small = under_valgrind();

	tap_diag("collectives between forked workers over the remote rendezvous (shm)%s",
		 small ? ", valgrind: smaller matrix" : "");
	for (int n = 1; n <= MAX_W; n++) {
		char what[160];

		if (getenv("COLL_N") && atoi(getenv("COLL_N")) != n)
			continue;

		if (small && n > 5)
			continue;
		run_case(&matrix_case, n, serial++, codes);
		snprintf(what, sizeof(what), "coll_every_collective_dtype_op_and_length_matches_"
			 "the_reference%s", small ? " (valgrind: one length per type and op)" : "");
		expect_all_pass(what, n, codes);
	}
	run_case(&path_case, 3, serial++, codes);
	expect_all_pass(!strcmp(want_channel(), "kmod") ?
			"coll_members_pipes_use_the_kmod_channel_the_module_offers" :
			"coll_members_pipes_use_the_cma_channel_without_the_module", 3, codes);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]) && !getenv("COLL_N"); i++) {
		char what[160];

		run_case(&cases[i], 3, serial++, codes);
		snprintf(what, sizeof(what), "coll_%s", cases[i].name);
		expect_all_pass(what, 3, codes);
	}
	run_case(&pair_case, 2, serial++, codes);
	expect_all_pass("coll_two_members_per_worker_share_its_coll_and_meet_inside_it", 2, codes);
	if (!getenv("COLL_N")) {
		run_case(&forced_case, 3, serial++, codes);
		expect_all_pass("coll_every_collective_matches_the_reference_with_TPU_COLL_PATH=rdv_"
				"and_no_call_on_lanes", 3, codes);
	}
	for (int lanes = 0; lanes < 2; lanes++) {
		kill_impl = lanes ? NULL : "ring";
		peer_gone = 0;
		others_ok = 1;
		run_case(&kill_case, 3, serial++, codes);
		for (int i = 0; i < 2; i++) {
			peer_gone += codes[i] == SAW_PEER_GONE;
			others_ok &= codes[i] == SAW_PEER_GONE || codes[i] == SAW_ABORTED;
		}
		if (!others_ok || !peer_gone)
			tap_diag("killed: survivors ended with %d and %d, victim %d", codes[0],
				 codes[1], codes[2]);
		CHECK(others_ok && peer_gone && codes[2] == 1000 + SIGKILL,
		      "coll_member_killed_mid_collective_fails_the_others_promptly_with_peer_gone%s",
		      lanes ? "_on_lanes" : "");
	}
	kill_impl = "ring";
	/* The same over tcp on loopback, for a few group sizes and the death of a member. */
	transport = "tcp";
	for (int n = 2; n <= 4 && !getenv("COLL_N"); n++) {
		run_case(&matrix_case, n, serial++, codes);
		expect_all_pass("coll_every_collective_dtype_op_and_length_matches_the_reference_"
				"over_tcp", n, codes);
	}
	run_case(&kill_case, 3, serial++, codes);
	CHECK((codes[0] == SAW_PEER_GONE || codes[1] == SAW_PEER_GONE) &&
	      codes[2] == 1000 + SIGKILL,
	      "coll_member_killed_mid_collective_fails_the_others_with_peer_gone_over_tcp "
	      "(%d, %d)", codes[0], codes[1]);
	transport = "shm";
	threads_over_inprocess();
	api_arguments();
	destroyed_before_its_executors();
}
