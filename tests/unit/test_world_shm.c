// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The world's collectives over the shared segment (lib/coll/coll_shm.c,
 * lib/boot/world_shm.c), in fork()ed worlds of 2, 3 and 4 ranks on this
 * host: every type, op and length (0, 1, odd, through the slots and large
 * enough for process_vm_readv) checked element by element; the path
 * proven taken (the segment mapped, its own mismatch reason, sticky); a
 * broadcast's root running ahead of a late member (SHM_RING - 1 small
 * calls, one large one) and blocking at the next; a late reader's mismatch failing the root's next call with
 * the reader's reason; every member its own root found by one; a
 * single-copy call against a slot call found promptly; a member
 * that dies failing the others within the bound, whether they spin or
 * sleep; a member's timeout failing the others at once; TPU_COLL_PATH
 * forcing either path and refusing other values; and the segment's own
 * checks (a memfd not sealed, a wrong size or header, bad arguments);
 * no member keeps the segment mapped once its world is destroyed; and
 * with more members than cores, a long wait sleeps instead of yielding;
 * a reduce-scatter copies into its slot only the chunks others read; a
 * large broadcast of 2 or 4 members is copied by every member.  The module path: large
 * calls of every type go through the module's grants where it is loaded
 * (in the VM) and by process_vm_readv where not (counted per way),
 * TPU_COLL_COPY forcing either or refused, false grant ids failing the
 * call, and a member the module will not pin for read by cma.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "boot_harness.h"
#include "coll.h"
#include "coll_shm.h"
#include "tap.h"
#include "tpu_user.h"

#define MS		1000000ull
#define SECOND		1000000000ull
#define LARGE		(300 * 1000 + 7)	/* elements: past the slot for every type */
#define MID		20011		/* elements: 2 to 10 parts of 16 KiB, in a slot for every type */

struct job {
	uint16_t port;
	int scenario;
	const char *path;	/* TPU_COLL_PATH, or NULL */
	const char *copy;	/* TPU_COLL_COPY, or NULL */
	bool tcp;		/* tcp only: no shm between the ranks */
};

static int world_up(int me, int n, const struct job *j, uint32_t timeout_ms,
		    struct tpu_context **ctx, struct tpu_world **w)
{
	static const char *const tcp[] = { "tcp://127.0.0.1:0" };
	struct tpu_world_info info = { .rank = me, .size = n, .local_rank = -1, .local_size = -1,
				       .store_host = "127.0.0.1", .store_port = j->port };
	struct tpu_world_options wo = { .info = &info, .timeout_ms = timeout_ms };

	boot_env_clear();
	if (j->path)
		setenv("TPU_COLL_PATH", j->path, 1);
	else
		unsetenv("TPU_COLL_PATH");
	if (j->copy)
		setenv("TPU_COLL_COPY", j->copy, 1);
	else
		unsetenv("TPU_COLL_COPY");
	if (j->tcp) {
		wo.listen_urls = tcp;
		wo.nlisten = 1;
	}
	R_CHECK(tpu_context_create(NULL, ctx) == 0);
	R_CHECK(tpu_world_create(*ctx, &wo, w) == 0);
	return 0;
}

/* Whether this process maps a collective segment (memfd "tpu-coll"). */
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

/* ---- element values --------------------------------------------------- */

static uint16_t f16_of(double v)
{
	/* Small integers only: exact in binary16. */
	uint16_t sign = v < 0 ? 0x8000 : 0;
	double a = v < 0 ? -v : v;
	int e = 0;

	if (a == 0)
		return sign;
	while (a >= 2) {
		a /= 2;
		e++;
	}
	return (uint16_t)(sign | (uint16_t)((e + 15) << 10) | (uint16_t)((a - 1) * 1024));
}

static double f16_val(uint16_t h)
{
	int e = (h >> 10) & 31;
	double m = (h & 1023) / 1024.0;
	double v = e ? (1 + m) * (double)(1u << e) / 32768.0 : m / 16384.0;

	return h & 0x8000 ? -v : v;
}

static void put(enum tpu_dtype dt, void *buf, size_t i, double v)
{
	float f = (float)v;
	uint32_t u;

	switch (dt) {
	case TPU_DT_FLOAT32: ((float *)buf)[i] = f; break;
	case TPU_DT_FLOAT64: ((double *)buf)[i] = v; break;
	case TPU_DT_FLOAT16: ((uint16_t *)buf)[i] = f16_of(v); break;
	case TPU_DT_BFLOAT16: memcpy(&u, &f, 4); ((uint16_t *)buf)[i] = (uint16_t)(u >> 16); break;
	case TPU_DT_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
	case TPU_DT_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
	default: ((uint8_t *)buf)[i] = (uint8_t)v; break;
	}
}

static double get(enum tpu_dtype dt, const void *buf, size_t i)
{
	uint32_t u;
	float f;

	switch (dt) {
	case TPU_DT_FLOAT32: return ((const float *)buf)[i];
	case TPU_DT_FLOAT64: return ((const double *)buf)[i];
	case TPU_DT_FLOAT16: return f16_val(((const uint16_t *)buf)[i]);
	case TPU_DT_BFLOAT16:
		u = (uint32_t)((const uint16_t *)buf)[i] << 16;
		memcpy(&f, &u, 4);
		return f;
	case TPU_DT_INT32: return ((const int32_t *)buf)[i];
	case TPU_DT_INT64: return (double)((const int64_t *)buf)[i];
	default: return ((const uint8_t *)buf)[i];
	}
}

/* Rank @r's element @i: small integers, exact in every type (signed where it can be). */
static double val(enum tpu_dtype dt, int r, size_t i)
{
	double v = (double)((r * 7 + i * 3) % 5);

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

/* MID: several parts of a slot for every type, and chunks that end inside a part. */
static const size_t counts[] = { 0, 1, 7, 1001, MID, LARGE };

static int all_reduce_and_scatter(struct tpu_world *w, int me, int n, enum tpu_dtype dt,
				  enum tpu_reduce_op op, size_t count)
{
	size_t es = tpu_dtype_size(dt), off, len;
	char *in = malloc(count * es + 1), *out = malloc(count * es + 1);

	R_CHECK(in && out);
	for (size_t i = 0; i < count; i++)
		put(dt, in, i, val(dt, me, i));
	memset(out, 0x5a, count * es);
	{
		tpu_status st = tpu_world_all_reduce(w, in, out, count, dt, op, TPU_FINAL_NONE,
						     20 * SECOND);
		char why[256];

		tpu_world_last_reason(w, why, sizeof(why));
		if (st)
			fprintf(stderr, "# rank %d: all-reduce: %s (%s)\n", me, tpu_status_name(st),
				why);
		R_CHECK(st == 0);
	}
	for (size_t i = 0; i < count; i++)
		R_CHECK(get(dt, out, i) == reduce(dt, op, n, i));
	/* In place, and the mean (sums of n ranks divided by n). */
	if (op == TPU_OP_SUM && dt != TPU_DT_UINT8) {
		for (size_t i = 0; i < count; i++)
			put(dt, in, i, (double)(n * ((i % 3) + me)));
		R_CHECK(tpu_world_all_reduce(w, in, in, count, dt, op, TPU_FINAL_DIV,
					     20 * SECOND) == 0);
		for (size_t i = 0; i < count; i++)
			R_CHECK(get(dt, in, i) == (double)(n * (i % 3)) + n * (n - 1) / 2.0);
		for (size_t i = 0; i < count; i++)
			put(dt, in, i, val(dt, me, i));
	}
	off = tpu_coll_chunk(count, n, me, &len);
	memset(out, 0x5a, count * es);
	R_CHECK(tpu_world_reduce_scatter(w, in, out, count, dt, op, TPU_FINAL_NONE,
					 20 * SECOND) == 0);
	for (size_t i = 0; i < len; i++)
		R_CHECK(get(dt, out, i) == reduce(dt, op, n, off + i));
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
		R_CHECK(tpu_world_broadcast(w, buf, count, dt, root, 20 * SECOND) == 0);
		for (size_t i = 0; i < count; i++)
			R_CHECK(get(dt, buf, i) == val(dt, root, i));
	}
	for (size_t i = 0; i < count; i++)
		put(dt, buf, i, val(dt, me, i));
	memset(out, 0x5a, count * es * (size_t)n);
	R_CHECK(tpu_world_all_gather(w, buf, out, count, dt, 20 * SECOND) == 0);
	for (int r = 0; r < n; r++)
		for (size_t i = 0; i < count; i++)
			R_CHECK(get(dt, out + (size_t)r * count * es, i) == val(dt, r, i));
	free(buf);
	free(out);
	return 0;
}

static int every_type(struct tpu_world *w, int me, int n)
{
	for (enum tpu_dtype dt = TPU_DT_FLOAT32; dt <= TPU_DT_UINT8; dt++)
		for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
			for (int op = TPU_OP_SUM; op <= TPU_OP_MAX; op++) {
				/* Large ones: every op of one float and one integer type. */
				if (counts[k] == LARGE && op != TPU_OP_SUM &&
				    dt != TPU_DT_BFLOAT16 && dt != TPU_DT_INT32)
					continue;
				if (all_reduce_and_scatter(w, me, n, dt, (enum tpu_reduce_op)op,
							   counts[k]))
					return __LINE__;
			}
			if (broadcast_and_gather(w, me, n, dt, counts[k]))
				return __LINE__;
		}
	return 0;
}

/*
 * The shm path ran: the segment is mapped, and a mismatch is its own; it
 * fails the segment, later calls with the same reason.
 */
static int path_taken(struct tpu_world *w, int me, int n)
{
	float a[8] = { 1 }, b[8];
	char why[256], again[256];
	int pid = 0, pids[8] = { 0 }, mine = (int)getpid();
	struct tpu_pipe *p = NULL;

	R_CHECK(!strcmp(tpu_world_coll_path(w), ""));	/* not decided yet */
	R_CHECK(!strcmp(tpu_world_coll_path(NULL), ""));
	R_CHECK(tpu_world_barrier_timeout(w, 20 * SECOND) == 0);
	R_CHECK(segment_mapped());
	R_CHECK(!strcmp(tpu_world_coll_path(w), "shm"));
	/* The pid a pipe proves is the peer's own. */
	R_CHECK(tpu_world_all_gather(w, &mine, pids, 1, TPU_DT_INT32, 20 * SECOND) == 0);
	for (int r = 0; r < n; r++) {
		if (r == me)
			continue;
		R_CHECK(tpu_world_pipe(w, r, &p) == 0);
		R_CHECK(tpu_pipe_peer_pid(p, &pid) == 0 && pid == pids[r]);
	}
	R_CHECK(tpu_pipe_peer_pid(p, NULL) == -EINVAL);
	R_CHECK(tpu_pipe_peer_pid(NULL, &pid) == -EINVAL && pid == 0);
	R_CHECK(tpu_world_all_reduce(w, a, b, me == 1 ? 3 : 2, TPU_DT_FLOAT32, TPU_OP_SUM,
				     TPU_FINAL_NONE, 20 * SECOND) == TPU_E_COLL_MISMATCH);
	tpu_world_last_reason(w, why, sizeof(why));
	R_CHECK(!strncmp(why, "shm: ", 5) && strstr(why, "count"));
	/* Sticky: the members may be out of step (a broadcast's root returns early). */
	R_CHECK(tpu_world_all_gather(w, &mine, pids, 1, TPU_DT_INT32, 20 * SECOND) ==
		TPU_E_COLL_MISMATCH);
	tpu_world_last_reason(w, again, sizeof(again));
	R_CHECK(!strncmp(again, "shm: ", 5) && strstr(again, "count"));
	return 0;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * SECOND + (uint64_t)ts.tv_nsec;
}

struct dying {
	struct tpu_world *w;
	float *a;
	size_t count;
};

static void *dying_call(void *arg)
{
	struct dying *d = arg;

	tpu_world_all_reduce(d->w, d->a, d->a, d->count, TPU_DT_FLOAT32, TPU_OP_SUM,
			     TPU_FINAL_NONE, 30 * SECOND);
	return NULL;
}

/*
 * The last rank dies (its process exits): before the call while the others
 * spin or sleep in it, or, with @inside, in the middle of a large one.
 */
static int member_dies(struct tpu_world *w, int me, int n, bool sleeping, bool inside,
		       size_t count)
{
	/* Not from malloc: the dying rank leaves it behind, in use by its call. */
	float *a = mmap(NULL, count * sizeof(float), PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint64_t t0;
	tpu_status st;

	R_CHECK(a != MAP_FAILED);
	R_CHECK(tpu_world_barrier_timeout(w, 20 * SECOND) == 0);
	if (me == n - 1) {
		struct dying d = { w, a, count };
		pthread_t t;

		if (inside)
			R_CHECK(pthread_create(&t, NULL, dying_call, &d) == 0);
		/* Let the others reach the call first (and sleep, with @sleeping). */
		usleep(sleeping ? 300 * 1000 : inside ? 20 * 1000 : 1000);
		_exit(0);
	}
	st = tpu_world_all_reduce(w, a, a, count, TPU_DT_FLOAT32, TPU_OP_SUM, TPU_FINAL_NONE,
				  30 * SECOND);
	if (st != TPU_E_PEER_GONE)
		fprintf(stderr, "# rank %d: %s\n", me, tpu_status_name(st));
	/*
	 * valgrind runs one thread at a time: the victim's call may run to its
	 * end within its 20 ms and the collective complete before it exits.
	 * The next call still has to see the death.
	 */
	R_CHECK(st == TPU_E_PEER_GONE || (inside && !st && under_valgrind()));
	/* Within the bound: from the death, TPU__SHM_LIVENESS_NS and a wake-up. */
	t0 = now_ns();
	st = tpu_world_all_reduce(w, a, a, count, TPU_DT_FLOAT32, TPU_OP_SUM, TPU_FINAL_NONE,
				  30 * SECOND);
	R_CHECK(st == TPU_E_PEER_GONE && now_ns() - t0 < 100 * MS);
	munmap(a, count * sizeof(float));
	return 0;
}

/* Rank 1 times out alone; rank 0, calling later, fails at once, and later calls too. */
static int timeout_aborts(struct tpu_world *w, int me)
{
	float a[4] = { 0 };
	uint64_t t0;

	R_CHECK(tpu_world_barrier_timeout(w, 20 * SECOND) == 0);
	t0 = now_ns();
	if (me == 1) {
		R_CHECK(tpu_world_all_reduce(w, a, a, 4, TPU_DT_FLOAT32, TPU_OP_SUM,
					     TPU_FINAL_NONE, 300 * MS) == -ETIMEDOUT);
		R_CHECK(now_ns() - t0 >= 290 * MS && now_ns() - t0 < 3 * SECOND);
	} else {
		usleep(800 * 1000);
		t0 = now_ns();
		R_CHECK(tpu_world_all_reduce(w, a, a, 4, TPU_DT_FLOAT32, TPU_OP_SUM,
					     TPU_FINAL_NONE, 20 * SECOND) == -ECONNABORTED);
		R_CHECK(now_ns() - t0 < 500 * MS);
	}
	R_CHECK(tpu_world_all_reduce(w, a, a, 4, TPU_DT_FLOAT32, TPU_OP_SUM, TPU_FINAL_NONE,
				     20 * SECOND) == (me == 1 ? -ETIMEDOUT : -ECONNABORTED));
	return 0;
}

#define HOLD_MS	800

/*
 * Rank 0 broadcasts SHM_RING small tensors while rank n - 1 is held back
 * HOLD_MS before it enters the first: the first SHM_RING - 1 return
 * without it (each through another small slot), the last waits until it
 * entered the first call (so finished the calls before: the reuse rule);
 * every member gets every broadcast's bytes.  Then the same with tensors
 * for the two parity slots: the second waits.
 */
static int root_runs_ahead(struct tpu_world *w, int me, int n)
{
	enum { K = SHM_RING, BIG = SHM_SMALL / 4 + 1 };
	static int32_t v[K][BIG];
	uint64_t t0, took[K];

	for (int big = 0; big < 2; big++) {
		int calls = big ? 2 : K, count = big ? BIG : 5;

		R_CHECK(tpu_world_barrier_timeout(w, 20 * SECOND) == 0);
		t0 = now_ns();
		if (me == n - 1)
			usleep(HOLD_MS * 1000);
		for (int k = 0; k < calls; k++) {
			for (int i = 0; i < count; i++)
				v[k][i] = me ? -1 : 100 * k + i;
			R_CHECK(tpu_world_broadcast(w, v[k], (size_t)count, TPU_DT_INT32, 0,
						    20 * SECOND) == 0);
			took[k] = now_ns() - t0;
		}
		for (int k = 0; k < calls; k++)
			for (int i = 0; i < count; i++)
				R_CHECK(v[k][i] == 100 * k + i);
		if (!me) {
			R_CHECK(took[calls - 2] < HOLD_MS / 2 * MS);
			R_CHECK(took[calls - 1] >= (HOLD_MS - 50) * MS);
		}
	}
	R_CHECK(tpu_world_barrier_timeout(w, 20 * SECOND) == 0);
	return 0;
}

/*
 * Rank 1, late, calls rank 0's broadcast with another count: it fails
 * with the mismatch; rank 0 returned already, and fails its next call
 * with rank 1's very reason.
 */
static int reader_finds_mismatch(struct tpu_world *w, int me)
{
	float a[8] = { 0 };
	char why[256] = "", peer[96] = "";
	size_t len = 0;

	R_CHECK(tpu_world_barrier_timeout(w, 20 * SECOND) == 0);
	if (me == 1) {
		usleep(200 * 1000);
		R_CHECK(tpu_world_broadcast(w, a, 5, TPU_DT_FLOAT32, 0, 20 * SECOND) ==
			TPU_E_COLL_MISMATCH);
		tpu_world_last_reason(w, why, sizeof(why));
		R_CHECK(strstr(why, "element count") && strlen(why) < sizeof(peer));
		R_CHECK(tpu_world_send(w, 0, why, strlen(why) + 1, 20 * SECOND) == 0);
	} else {
		R_CHECK(tpu_world_broadcast(w, a, 4, TPU_DT_FLOAT32, 0, 20 * SECOND) == 0);
		R_CHECK(tpu_world_recv(w, 1, peer, sizeof(peer), &len, 20 * SECOND) == 0);
		R_CHECK(len > 1 && peer[len - 1] == 0);
	}
	R_CHECK(tpu_world_all_reduce(w, a, a, 4, TPU_DT_FLOAT32, TPU_OP_SUM, TPU_FINAL_NONE,
				     20 * SECOND) == TPU_E_COLL_MISMATCH);
	if (!me) {
		tpu_world_last_reason(w, why, sizeof(why));
		R_CHECK(!strcmp(why, peer));
	}
	return 0;
}

/*
 * Rank 1, late, calls rank 0's small broadcast with a count that goes
 * single-copy: it finds the difference once rank 0 arrived, promptly,
 * though rank 0 went through the slots and published no phase for it.
 */
static int ways_differ(struct tpu_world *w, int me)
{
	static float a[16 << 10];	/* 64 KiB: read with process_vm_readv */
	int32_t st, got = 0;
	size_t len = 0;
	uint64_t t0;

	R_CHECK(tpu_world_barrier_timeout(w, 20 * SECOND) == 0);
	t0 = now_ns();
	if (me == 1) {
		usleep(100 * 1000);
		st = tpu_world_broadcast(w, a, 16 << 10, TPU_DT_FLOAT32, 0, 20 * SECOND);
		R_CHECK(st == TPU_E_COLL_MISMATCH && now_ns() - t0 < 5 * SECOND);
		R_CHECK(tpu_world_send(w, 0, &st, sizeof(st), 20 * SECOND) == 0);
	} else {
		st = tpu_world_broadcast(w, a, 4, TPU_DT_FLOAT32, 0, 20 * SECOND);
		R_CHECK(st == 0 || st == TPU_E_COLL_MISMATCH);
		R_CHECK(tpu_world_recv(w, 1, &got, sizeof(got), &len, 20 * SECOND) == 0 &&
			got == TPU_E_COLL_MISMATCH);
	}
	R_CHECK(tpu_world_all_reduce(w, a, a, 4, TPU_DT_FLOAT32, TPU_OP_SUM, TPU_FINAL_NONE,
				     20 * SECOND) == TPU_E_COLL_MISMATCH);
	return 0;
}

/*
 * Every member a broadcast's root of its own: no one reads another's
 * slot, yet of each two one compares the other's description at its end,
 * so at least one fails, and every member's next call does.
 */
static int roots_of_their_own(struct tpu_world *w, int me, int n)
{
	float a[4] = { 0 };
	int32_t mine, all[8];
	tpu_status st;

	R_CHECK(n <= 8);
	R_CHECK(tpu_world_barrier_timeout(w, 20 * SECOND) == 0);
	st = tpu_world_broadcast(w, a, 4, TPU_DT_FLOAT32, me, 20 * SECOND);
	R_CHECK(st == 0 || st == TPU_E_COLL_MISMATCH);
	mine = st;
	/* Every status to rank 0 through the pipes, which a mismatch leaves usable. */
	if (me) {
		R_CHECK(tpu_world_send(w, 0, &mine, sizeof(mine), 20 * SECOND) == 0);
	} else {
		int failed = mine == TPU_E_COLL_MISMATCH;

		for (int r = 1; r < n; r++) {
			size_t len = 0;

			R_CHECK(tpu_world_recv(w, r, &all[r], sizeof(all[r]), &len, 20 * SECOND) ==
				0 && len == sizeof(all[r]));
			failed += all[r] == TPU_E_COLL_MISMATCH;
		}
		R_CHECK(failed >= 1);
	}
	R_CHECK(tpu_world_all_reduce(w, a, a, 4, TPU_DT_FLOAT32, TPU_OP_SUM, TPU_FINAL_NONE,
				     20 * SECOND) == TPU_E_COLL_MISMATCH);
	return 0;
}

/*
 * A reduce-scatter of one element among n members: only rank 0's chunk
 * has an element, and the others read no one's slot, so they wait for no
 * one.  Ranks 1 .. n - 1 finish SHM_RING - 1 such calls before rank 0
 * enters the first (they tell it so through the pipes; waiting for rank
 * 0 they would time out instead), then the last, which may wait for it
 * (the reuse rule); rank 0 gets every sum, the others' outputs stay as
 * they were.  Then the others return from one more while rank 0 has not
 * called it; rank 0 calls it with another op, finds the mismatch, and
 * every member's next call fails with it.
 */
static int scatter_of_one_waits_for_no_one(struct tpu_world *w, int me, int n)
{
	enum { K = SHM_RING };
	float in[K + 1], out[K + 1];
	char done = 1;
	size_t len = 0;

	R_CHECK(tpu_world_barrier_timeout(w, 20 * SECOND) == 0);
	for (int k = 0; k <= K; k++) {
		in[k] = (float)(10 * k + me + 1);
		out[k] = -1;
	}
	if (!me)
		for (int r = 1; r < n; r++)
			R_CHECK(tpu_world_recv(w, r, &done, 1, &len, 20 * SECOND) == 0 && len == 1);
	for (int k = 0; k < K; k++) {
		if (me && k == K - 1)
			R_CHECK(tpu_world_send(w, 0, &done, 1, 20 * SECOND) == 0);
		R_CHECK(tpu_world_reduce_scatter(w, &in[k], &out[k], 1, TPU_DT_FLOAT32, TPU_OP_SUM,
						 TPU_FINAL_NONE, 10 * SECOND) == 0);
	}
	R_CHECK(!strcmp(tpu_world_coll_path(w), "shm"));
	for (int k = 0; k < K; k++)
		R_CHECK(out[k] == (me ? -1.0f : (float)(10 * k * n + n * (n + 1) / 2)));

	R_CHECK(tpu_world_barrier_timeout(w, 20 * SECOND) == 0);
	if (me) {
		R_CHECK(tpu_world_reduce_scatter(w, &in[K], &out[K], 1, TPU_DT_FLOAT32, TPU_OP_SUM,
						 TPU_FINAL_NONE, 10 * SECOND) == 0);
		R_CHECK(tpu_world_send(w, 0, &done, 1, 20 * SECOND) == 0);
	} else {
		for (int r = 1; r < n; r++)
			R_CHECK(tpu_world_recv(w, r, &done, 1, &len, 20 * SECOND) == 0 && len == 1);
		R_CHECK(tpu_world_reduce_scatter(w, &in[K], &out[K], 1, TPU_DT_FLOAT32, TPU_OP_MAX,
						 TPU_FINAL_NONE, 10 * SECOND) ==
			TPU_E_COLL_MISMATCH);
	}
	R_CHECK(tpu_world_all_reduce(w, in, out, 1, TPU_DT_FLOAT32, TPU_OP_SUM, TPU_FINAL_NONE,
				     20 * SECOND) == TPU_E_COLL_MISMATCH);
	return 0;
}

/* Member @r's control line in this process's mapping of the segment. */
static struct shm_line *seg_line(int r)
{
	char line[512];
	unsigned long start = 0;
	FILE *f = fopen("/proc/self/maps", "r");

	while (f && fgets(line, sizeof(line), f))
		if (strstr(line, "memfd:tpu-coll"))
			start = strtoul(line, NULL, 16);
	if (f)
		fclose(f);
	return start ? (struct shm_line *)(start + SHM_LINE * (1 + (size_t)r)) : NULL;
}

/*
 * More members than cores (all on one CPU): a member that waits long
 * sleeps on the futex after a short while (CROWD_SLEEP_NS, 50 us) instead
 * of yielding its core for YIELD_NS (20 ms).  Rank 0 comes late and
 * watches its own line: once every other member published the call's
 * phase, all must be asleep on rank 0's word well within 20 ms.
 */
static int crowd_sleeps(struct tpu_world *w, int me, int n)
{
	float a[4] = { 0 };
	struct shm_line *mine;
	uint32_t phase;
	uint64_t t0, t1, t2;
	/* Under TCG (tests/vm/run.sh) only that they sleep at all, not how soon. */
	uint64_t bound = getenv("TP_TEST_EMULATED") ? 2 * SECOND : 15 * MS;

	R_CHECK(tpu_world_all_reduce(w, a, a, 4, TPU_DT_FLOAT32, TPU_OP_SUM, TPU_FINAL_NONE,
				     20 * SECOND) == 0);
	if (me == 0) {
		mine = seg_line(0);
		R_CHECK(mine);
		phase = atomic_load(&mine->seq) + 1;
		t0 = now_ns();
		for (int r = 1; r < n; r++)
			while (atomic_load(&seg_line(r)->seq) != phase && now_ns() - t0 < 5 * SECOND)
				usleep(50);
		t1 = now_ns();
		while (atomic_load(&mine->waiters) != (uint32_t)(n - 1) && now_ns() - t1 < SECOND)
			usleep(50);
		t2 = now_ns();
		if (t2 - t1 >= bound)
			fprintf(stderr, "# rank 0: the others slept %llu us after they called\n",
				(unsigned long long)((t2 - t1) / 1000));
		R_CHECK(t2 - t1 < bound || under_valgrind());
	}
	R_CHECK(tpu_world_all_reduce(w, a, a, 4, TPU_DT_FLOAT32, TPU_OP_SUM, TPU_FINAL_NONE,
				     20 * SECOND) == 0);
	return 0;
}

/* Member @r's slot @parity in this process's mapping of the segment of @n members. */
static const float *seg_slot(int n, int r, int parity)
{
	return (const float *)((const unsigned char *)seg_line(0) - SHM_LINE +
			       SHM_LINE * (1 + (size_t)n) +
			       (size_t)TPU__SHM_SLOT * (2 * (size_t)r + (size_t)parity));
}

/*
 * A reduce-scatter through the slots copies into a member's slot only the
 * chunks the other members read: this member's own chunk of the input
 * (values no call wrote before) is in neither of its slots, every other
 * chunk is in one of them.  Then in place (in == out) through the slots:
 * rank 0's chunk is its output's first bytes.
 */
static int scatter_fills_only_others(struct tpu_world *w, int me, int n)
{
	size_t count = MID, len, off = tpu_coll_chunk(count, n, me, &len);
	float *in = malloc(count * sizeof(float)), *out = malloc(count * sizeof(float));

	R_CHECK(in && out);
	for (size_t i = 0; i < count; i++)
		in[i] = (float)(1000000 + me * 100000 + (int)(i % 50000));
	R_CHECK(tpu_world_reduce_scatter(w, in, out, count, TPU_DT_FLOAT32, TPU_OP_SUM,
					 TPU_FINAL_NONE, 20 * SECOND) == 0);
	R_CHECK(!strcmp(tpu_world_coll_path(w), "shm") && seg_line(0));
	for (int parity = 0; parity < 2; parity++)
		R_CHECK(memcmp(seg_slot(n, me, parity) + off, in + off, len * sizeof(float)));
	for (int r = 0; r < n; r++) {
		size_t rlen, roff = tpu_coll_chunk(count, n, r, &rlen);

		if (r != me)
			R_CHECK(!memcmp(seg_slot(n, me, 0) + roff, in + roff, rlen * sizeof(float)) ||
				!memcmp(seg_slot(n, me, 1) + roff, in + roff, rlen * sizeof(float)));
	}
	for (size_t i = 0; i < len; i++) {
		double want = 0;

		for (int r = 0; r < n; r++)
			want += 1000000 + r * 100000 + (int)((off + i) % 50000);
		R_CHECK(out[i] == (float)want);
	}
	for (size_t i = 0; i < count; i++)
		in[i] = (float)(me + (int)(i % 7));
	R_CHECK(tpu_world_reduce_scatter(w, in, in, count, TPU_DT_FLOAT32, TPU_OP_SUM,
					 TPU_FINAL_NONE, 20 * SECOND) == 0);
	for (size_t i = 0; i < len; i++)
		R_CHECK(in[i] == (float)(n * (n - 1) / 2 + n * (int)((off + i) % 7)));
	free(in);
	free(out);
	return 0;
}

/*
 * A large broadcast is copied by every member: receiver r reads all but
 * its share (chunk r) from the root, the root writes that share into r's
 * output.  Seen from a receiver: its output pages, fresh and small (no
 * huge pages), fault in its own thread only for the (n - 1) / n it copies
 * (a fault taken for the root's process_vm_writev is not counted to the
 * receiver); before, with more than two members, it faulted every page.
 * An odd length and the last rank as root: shares that end mid-page and
 * mid-cache-line, a receiver's share first, in the middle and last.
 */
static int broadcast_copied_by_all(struct tpu_world *w, int me, int n)
{
	size_t bytes = (4u << 20) + 13, pages = (bytes + 4095) / 4096;
	size_t map = pages * 4096, most = pages * (size_t)(n - 1) / (size_t)n + pages / 10;
	char *buf = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int root = n - 1;
	struct rusage before, after;
	long faults;

#ifdef __SANITIZE_ADDRESS__
	/* ASan's check of what process_vm_readv wrote faults in its shadow: 1 page in 8. */
	most += pages / 8;
#endif
	/* So does memcheck's (871 faults, the bound 870, at 4 members). */
	if (under_valgrind())
		most += pages / 8;
	R_CHECK(buf != MAP_FAILED);
	madvise(buf, map, MADV_NOHUGEPAGE);
	if (me == root)
		for (size_t i = 0; i < bytes; i++)
			buf[i] = (char)(i * 7 + 3);
	R_CHECK(getrusage(RUSAGE_THREAD, &before) == 0);
	R_CHECK(tpu_world_broadcast(w, buf, bytes, TPU_DT_UINT8, root, 20 * SECOND) == 0);
	R_CHECK(getrusage(RUSAGE_THREAD, &after) == 0);
	for (size_t i = 0; i < bytes; i++)
		R_CHECK(buf[i] == (char)(i * 7 + 3));
	/* Nothing written past the broadcast's bytes. */
	for (size_t i = bytes; i < map; i++)
		R_CHECK(buf[i] == 0);
	faults = after.ru_minflt - before.ru_minflt;
	if (me != root && faults >= (long)most)
		fprintf(stderr, "# rank %d: %ld faults for %zu pages\n", me, faults, pages);
	R_CHECK(me == root || faults < (long)most);
	munmap(buf, map);
	return 0;
}

/* Whether /dev/tensorpipe is here with grants (in the VM with the module; not on the host). */
static bool kmod_here(void)
{
	int fd = -1;

	if (tpu__shm_kmod_open(&fd))
		return false;
	close(fd);
	return true;
}

/*
 * Large tensors of every type of call (all single-copy: past the slot)
 * right, and taken the way the module's presence (or @copy) says: through
 * the module's grants where it is loaded, else process_vm_readv.
 */
static int large_way(struct tpu_world *w, int me, int n, const char *copy)
{
	bool kmod = kmod_here() && !(copy && !strcmp(copy, "cma"));
	uint64_t k0 = tpu__shm_coll_way_count(SHM_WAY_KMOD);
	uint64_t c0 = tpu__shm_coll_way_count(SHM_WAY_CMA);
	uint64_t m0 = tpu__shm_coll_way_count(SHM_WAY_MIXED);
	uint64_t k, c;

	if (all_reduce_and_scatter(w, me, n, TPU_DT_FLOAT32, TPU_OP_SUM, LARGE) ||
	    all_reduce_and_scatter(w, me, n, TPU_DT_INT32, TPU_OP_MAX, LARGE) ||
	    broadcast_and_gather(w, me, n, TPU_DT_FLOAT32, LARGE) ||
	    broadcast_and_gather(w, me, n, TPU_DT_UINT8, 4u << 20))
		return __LINE__;
	k = tpu__shm_coll_way_count(SHM_WAY_KMOD) - k0;
	c = tpu__shm_coll_way_count(SHM_WAY_CMA) - c0;
	if (me == 0)
		fprintf(stderr, "# rank 0: module %s: %llu calls through the module, %llu with "
			"process_vm_readv\n", kmod ? "here" : "absent", (unsigned long long)k,
			(unsigned long long)c);
	/*
	 * 3 all-reduces (one in place), 2 reduce-scatters, and twice n
	 * broadcasts and an all-gather: every one single-copy.
	 */
	R_CHECK((kmod ? k : c) == (uint64_t)(5 + 2 * (n + 1)));
	R_CHECK((kmod ? c : k) == 0);
	R_CHECK(tpu__shm_coll_way_count(SHM_WAY_MIXED) == m0);
	R_CHECK(!strcmp(tpu_world_coll_path(w), "shm"));
	return 0;
}

/*
 * A member publishes grant ids that are not its grants: the kernel
 * refuses the copy (-ENOENT) and every member's call fails with a status;
 * nothing crashes.  Without the module: no grants, the call succeeds.
 */
static int lying_grants(struct tpu_world *w, int me, int n)
{
	size_t count = LARGE;
	float *in = calloc(count, sizeof(float)), *out = calloc(count * (size_t)n, sizeof(float));
	char why[256];
	tpu_status st;

	R_CHECK(in && out);
	if (me == 1)
		tpu__shm_kmod_grant_skew = 7919;
	st = tpu_world_all_gather(w, in, out, count, TPU_DT_FLOAT32, 20 * SECOND);
	tpu_world_last_reason(w, why, sizeof(why));
	if (kmod_here()) {
		R_CHECK(st != 0);
		/* Rank 0 read through rank 1's false ids; rank 1 heard of it. */
		R_CHECK(me != 0 || st == -ENOENT);
		R_CHECK(!strncmp(why, "shm: ", 5));
	} else {
		R_CHECK(st == 0);
	}
	tpu__shm_kmod_grant_skew = 0;
	free(in);
	free(out);
	return 0;
}

/*
 * A member the module will not pin for (rank 1: no CAP_IPC_LOCK, a
 * memlock limit of 0) grants nothing: rank 0 reads its buffer with
 * process_vm_readv ("kmod+cma"), rank 1 still reads rank 0's through the
 * module, and the results are right.  Without the module: cma.
 */
static int memlock_falls_back(struct tpu_world *w, int me, int n)
{
	size_t count = LARGE;
	float *in = malloc(count * sizeof(float)), *out = malloc(count * (size_t)n * sizeof(float));
	bool kmod = kmod_here();
	uint64_t k0 = tpu__shm_coll_way_count(SHM_WAY_KMOD);
	uint64_t m0 = tpu__shm_coll_way_count(SHM_WAY_MIXED);
	uint64_t c0 = tpu__shm_coll_way_count(SHM_WAY_CMA);

	R_CHECK(in && out);
	if (me == 1 && kmod) {
		struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
		struct __user_cap_data_struct d[2];
		struct rlimit none = { 0, 0 };

		R_CHECK(syscall(SYS_capget, &h, d) == 0);
		d[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
		R_CHECK(syscall(SYS_capset, &h, d) == 0);
		R_CHECK(setrlimit(RLIMIT_MEMLOCK, &none) == 0);
	}
	for (size_t i = 0; i < count; i++)
		in[i] = (float)(me * 1000 + (int)(i % 977));
	R_CHECK(tpu_world_all_gather(w, in, out, count, TPU_DT_FLOAT32, 20 * SECOND) == 0);
	for (int r = 0; r < n; r++)
		for (size_t i = 0; i < count; i++)
			R_CHECK(out[(size_t)r * count + i] == (float)(r * 1000 + (int)(i % 977)));
	if (!kmod)
		R_CHECK(tpu__shm_coll_way_count(SHM_WAY_CMA) == c0 + 1);
	else if (me == 0)
		R_CHECK(tpu__shm_coll_way_count(SHM_WAY_MIXED) == m0 + 1);
	else
		R_CHECK(tpu__shm_coll_way_count(SHM_WAY_KMOD) == k0 + 1);
	free(in);
	free(out);
	return 0;
}

enum { SC_TYPES, SC_PATH, SC_DIES_SPINNING, SC_DIES_SLEEPING, SC_DIES_LARGE, SC_TIMEOUT,
       SC_RDV, SC_SHM_NO_SHM, SC_BAD_PATH, SC_CROWD, SC_SCATTER, SC_BCAST, SC_WAY,
       SC_WAY_CMA, SC_WAY_KMOD, SC_BAD_COPY, SC_LYING, SC_MEMLOCK, SC_AHEAD, SC_LATE_MISMATCH,
       SC_OWN_ROOTS, SC_WAYS_DIFFER, SC_SCATTER_OF_ONE };

static int rank_main(int me, int n, void *arg)
{
	const struct job *j = arg;
	struct tpu_context *ctx;
	struct tpu_world *w;
	bool dies = j->scenario >= SC_DIES_SPINNING && j->scenario <= SC_DIES_LARGE;
	float a[3] = { 1, 2, 3 }, b[3];
	char why[256];
	int line;

	if (j->scenario == SC_CROWD) {
		cpu_set_t all, one;
		int c = 0;

		/* Every member on the first CPU allowed: more members than cores. */
		R_CHECK(sched_getaffinity(0, sizeof(all), &all) == 0);
		while (!CPU_ISSET(c, &all))
			c++;
		CPU_ZERO(&one);
		CPU_SET(c, &one);
		R_CHECK(sched_setaffinity(0, sizeof(one), &one) == 0);
	}
	/* A world with a dead rank: its destroy waits this long for it. */
	line = world_up(me, n, j, dies ? 8000 : 20000, &ctx, &w);

	if (line)
		return line;
	switch (j->scenario) {
	case SC_TYPES:
		line = every_type(w, me, n);
		R_CHECK(segment_mapped());
		break;
	case SC_PATH:
		line = path_taken(w, me, n);
		break;
	case SC_DIES_SPINNING:
	case SC_DIES_SLEEPING:
	case SC_DIES_LARGE:
		line = member_dies(w, me, n, j->scenario == SC_DIES_SLEEPING,
				   j->scenario == SC_DIES_LARGE, j->scenario == SC_DIES_LARGE ?
				   16u << 20 : 4);
		break;
	case SC_TIMEOUT:
		line = timeout_aborts(w, me);
		break;
	case SC_RDV:
		/* Forced rendezvous: right results, no segment. */
		line = broadcast_and_gather(w, me, n, TPU_DT_INT32, 1001);
		R_CHECK(!segment_mapped());
		R_CHECK(!strcmp(tpu_world_coll_path(w), "rdv"));
		break;
	case SC_SHM_NO_SHM:
		R_CHECK(tpu_world_all_reduce(w, a, b, 3, TPU_DT_FLOAT32, TPU_OP_SUM,
					     TPU_FINAL_NONE, 20 * SECOND) == -EOPNOTSUPP);
		tpu_world_last_reason(w, why, sizeof(why));
		R_CHECK(strstr(why, "TPU_COLL_PATH=shm") && strstr(why, "not reached over shm"));
		{
			/* tcp proves no pid: 0, once the pipe is open. */
			struct tpu_pipe *p;
			int pid = -1;
			tpu_status st;

			R_CHECK(tpu_world_pipe(w, 1 - me, &p) == 0);
			while ((st = tpu_pipe_peer_pid(p, &pid)) == -EAGAIN)
				usleep(1000);
			R_CHECK(st == 0 && pid == 0);
		}
		break;
	case SC_CROWD:
		line = crowd_sleeps(w, me, n);
		break;
	case SC_SCATTER:
		line = scatter_fills_only_others(w, me, n);
		break;
	case SC_BCAST:
		line = broadcast_copied_by_all(w, me, n);
		break;
	case SC_BAD_PATH:
		R_CHECK(tpu_world_all_reduce(w, a, b, 3, TPU_DT_FLOAT32, TPU_OP_SUM,
					     TPU_FINAL_NONE, 20 * SECOND) == -EINVAL);
		tpu_world_last_reason(w, why, sizeof(why));
		R_CHECK(strstr(why, "TPU_COLL_PATH=fast"));
		break;
	case SC_WAY:
	case SC_WAY_CMA:
		line = large_way(w, me, n, j->copy);
		break;
	case SC_WAY_KMOD:
		/* Forced: the module's path where it is here, a clear refusal where not. */
		if (kmod_here()) {
			line = large_way(w, me, n, j->copy);
			break;
		}
		R_CHECK(tpu_world_all_reduce(w, a, b, 3, TPU_DT_FLOAT32, TPU_OP_SUM,
					     TPU_FINAL_NONE, 20 * SECOND) == -EOPNOTSUPP);
		tpu_world_last_reason(w, why, sizeof(why));
		R_CHECK(strstr(why, "TPU_COLL_COPY=kmod") && strstr(why, "tensorpipe"));
		break;
	case SC_BAD_COPY:
		R_CHECK(tpu_world_all_reduce(w, a, b, 3, TPU_DT_FLOAT32, TPU_OP_SUM,
					     TPU_FINAL_NONE, 20 * SECOND) == -EINVAL);
		tpu_world_last_reason(w, why, sizeof(why));
		R_CHECK(strstr(why, "TPU_COLL_COPY=fast"));
		break;
	case SC_LYING:
		line = lying_grants(w, me, n);
		break;
	case SC_MEMLOCK:
		line = memlock_falls_back(w, me, n);
		break;
	case SC_AHEAD:
		line = root_runs_ahead(w, me, n);
		break;
	case SC_LATE_MISMATCH:
		line = reader_finds_mismatch(w, me);
		break;
	case SC_OWN_ROOTS:
		line = roots_of_their_own(w, me, n);
		break;
	case SC_WAYS_DIFFER:
		line = ways_differ(w, me);
		break;
	case SC_SCATTER_OF_ONE:
		line = scatter_of_one_waits_for_no_one(w, me, n);
		break;
	}
	if (line)
		return line;
	tpu_world_destroy(w);
	/* This member's mapping goes with the world (the segment with the last one). */
	R_CHECK(!segment_mapped());
	tpu_context_destroy(ctx);
	return 0;
}

/* The segment's own checks, in one process. */
static void segment_checks(void)
{
	pid_t pids[2] = { getpid(), getpid() };
	struct tpu__shm_coll *s = NULL;
	struct tpu__shm_call c = { .type = TPU_COLL_REDUCTION, .dtype = TPU_DT_FLOAT32 };
	int fd = -1, raw = memfd_create("plain", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	char why[128];

	CHECK(tpu__shm_coll_create(0, 4096, &fd) == -EINVAL &&
	      tpu__shm_coll_create(TPU__SHM_MAX_MEMBERS + 1, 4096, &fd) == -EINVAL &&
	      tpu__shm_coll_create(2, 100, &fd) == -EINVAL &&
	      tpu__shm_coll_create(2, (size_t)SHM_PART * SHM_REDUCED, &fd) == -EINVAL &&
	      tpu__shm_coll_attach(0, 2, 0, (size_t)SHM_PART * SHM_REDUCED, pids, &s) == -EINVAL,
	      "shm_segment_create_refuses_bad_sizes");
	CHECK(tpu__shm_coll_create(2, 4096, &fd) == 0 && fd >= 0 &&
	      ftruncate(fd, 1) == -1 && errno == EPERM, "shm_segment_is_sealed_against_shrinking");
	CHECK(tpu__shm_coll_attach(fd, 2, 2, 4096, pids, &s) == -EINVAL &&
	      tpu__shm_coll_attach(fd, 2, 0, 4096, NULL, &s) == -EINVAL,
	      "shm_attach_refuses_bad_arguments");
	CHECK(tpu__shm_coll_attach(fd, 3, 0, 4096, pids, &s) == -EPROTO &&
	      tpu__shm_coll_attach(fd, 2, 0, 8192, pids, &s) == -EPROTO,
	      "shm_attach_refuses_a_segment_of_another_size");
	CHECK(raw >= 0 && ftruncate(raw, 128 * 3 + 2 * 2 * 4096) == 0 &&
	      tpu__shm_coll_attach(raw, 2, 0, 4096, pids, &s) == -EPERM,
	      "shm_attach_refuses_a_memfd_not_sealed");
	CHECK(raw >= 0 && fcntl(raw, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0 &&
	      tpu__shm_coll_attach(raw, 2, 0, 4096, pids, &s) == -EPROTO,
	      "shm_attach_refuses_a_sealed_memfd_without_the_header");
	pids[1] = 0;
	CHECK(tpu__shm_coll_attach(fd, 2, 0, 4096, pids, &s) == -EINVAL,
	      "shm_attach_refuses_a_member_without_a_proven_pid");
	pids[1] = getpid();
	CHECK(tpu__shm_coll_attach(fd, 2, 0, 4096, pids, &s) == 0 && s, "shm_attach_maps_it");
	c.root = 2;
	CHECK(tpu__shm_coll_run(s, &c, why, sizeof(why)) == -EINVAL, "shm_run_refuses_a_bad_root");
	c.root = 0;
	c.type = TPU_COLL_ALL_TO_ALL;
	CHECK(tpu__shm_coll_run(s, &c, why, sizeof(why)) == -EINVAL, "shm_run_refuses_other_types");
	c.type = TPU_COLL_REDUCTION;
	c.dtype = (enum tpu_dtype)99;
	CHECK(tpu__shm_coll_run(s, &c, why, sizeof(why)) == -EINVAL, "shm_run_refuses_a_bad_dtype");
	c.dtype = TPU_DT_FLOAT64;
	c.count = SIZE_MAX / 8;
	CHECK(tpu__shm_coll_run(s, &c, why, sizeof(why)) == -EINVAL,
	      "shm_run_refuses_a_count_whose_bytes_overflow");
	tpu__shm_coll_detach(s);
	if (fd >= 0)
		close(fd);
	if (raw >= 0)
		close(raw);
}

void test_world_shm(void)
{
	static const char *const names[] = { "every_type_op_and_length", "path_taken",
					     "member_dies_while_others_spin",
					     "member_dies_while_others_sleep",
					     "member_dies_inside_a_large_one", "timeout_aborts_the_others",
					     "forced_rendezvous", "forced_shm_without_shm",
					     "bad_TPU_COLL_PATH", "crowd_sleeps_on_the_futex",
					     "reduce_scatter_fills_only_the_chunks_others_read",
					     "broadcast_copied_by_every_member",
					     "large_ones_take_the_module_where_loaded_else_cma",
					     "TPU_COLL_COPY_cma_keeps_process_vm_readv",
					     "TPU_COLL_COPY_kmod_takes_the_module_or_refuses",
					     "bad_TPU_COLL_COPY", "false_grant_ids_fail_the_call",
					     "a_member_the_module_will_not_pin_for_is_read_by_cma",
					     "broadcast_root_runs_ahead_of_a_late_member_until_a_slot_is_reused",
					     "a_reader_finds_a_mismatch_the_root_fails_its_next_call",
					     "every_member_its_own_root_one_finds_it",
					     "a_single_copy_call_against_a_slot_call_fails_promptly",
					     "reduce_scatter_of_one_element_others_wait_for_no_one" };

	segment_checks();
	for (int n = 2; n <= 4; n++) {
		struct job j = { .port = boot_free_port(), .scenario = SC_TYPES };

		CHECK(j.port > 1 && boot_run_ranks(n, rank_main, &j, 240), "shm_world_of_%d_%s", n,
		      names[SC_TYPES]);
	}
	for (int k = SC_PATH; k <= SC_SCATTER_OF_ONE; k++) {
		int n = k == SC_AHEAD || k == SC_OWN_ROOTS || k == SC_SCATTER_OF_ONE ? 4 :
			k == SC_DIES_SPINNING || k == SC_DIES_LARGE || k == SC_CROWD ||
			k == SC_SCATTER ? 3 : 2;
		struct job j = { .port = boot_free_port(), .scenario = k,
				 .path = k == SC_RDV ? "rdv" : k == SC_SHM_NO_SHM ? "shm" :
					 k == SC_BAD_PATH ? "fast" : NULL,
				 /* The halves' fault count is process_vm_writev's (the module pins). */
				 .copy = k == SC_WAY_CMA || k == SC_BCAST ? "cma" : k == SC_WAY_KMOD ? "kmod" :
					 k == SC_BAD_COPY ? "fast" : NULL,
				 .tcp = k == SC_SHM_NO_SHM };

		CHECK(j.port > 1 && boot_run_ranks(n, rank_main, &j, 120), "shm_world_of_%d_%s", n,
		      names[k]);
	}
	/* Four members: three shares written by the root, the rest read. */
	{
		struct job j = { .port = boot_free_port(), .scenario = SC_BCAST, .copy = "cma" };

		CHECK(j.port > 1 && boot_run_ranks(4, rank_main, &j, 120), "shm_world_of_4_%s",
		      names[SC_BCAST]);
	}
	/* Three members: every one reads two peers' grants. */
	{
		struct job j = { .port = boot_free_port(), .scenario = SC_WAY };

		CHECK(j.port > 1 && boot_run_ranks(3, rank_main, &j, 120), "shm_world_of_3_%s",
		      names[SC_WAY]);
	}
	unsetenv("TPU_COLL_PATH");
	unsetenv("TPU_COLL_COPY");
	boot_env_clear();
}
