// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The one-call collectives of a world (tpu_world_all_reduce and the rest),
 * in fork()ed worlds of 2 and 3 ranks over loopback tcp: every element of
 * every result checked against what the ranks' inputs make it, several
 * data types and ops, mismatched calls failing on every rank with the
 * world still usable afterwards, send and receive by rank in order, and
 * the timeouts bounding the calls.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "boot_harness.h"
#include "coll/coll.h"
#include "tap.h"
#include "tpu_user.h"

#define MS		1000000ull
#define SECOND		1000000000ull
#define COUNT		1001	/* not a multiple of the world's size */

struct job {
	uint16_t port;
	int scenario;
};

/* A world of @n ranks on loopback tcp, its store on @port. */
static int world_up(int me, int n, uint16_t port, struct tpu_context **ctx, struct tpu_world **w)
{
	static const char *const urls[] = { "tcp://127.0.0.1:0" };
	struct tpu_world_info info = { .rank = me, .size = n, .local_rank = -1, .local_size = -1,
				       .store_host = "127.0.0.1", .store_port = port };
	struct tpu_world_options wo = { .info = &info, .listen_urls = urls, .nlisten = 1,
					.timeout_ms = 20000 };

	boot_env_clear();
	R_CHECK(tpu_context_create(NULL, ctx) == 0);
	R_CHECK(tpu_world_create(*ctx, &wo, w) == 0);
	return 0;
}

static double in_f(int r, int i)
{
	return (double)((r + 1) * 3 + i % 17) * 0.5;
}

static int all_reduces(struct tpu_world *w, int me, int n)
{
	static float f32[COUNT], f32o[COUNT];
	static double f64[COUNT], f64o[COUNT];
	static int32_t i32[COUNT], i32o[COUNT];
	static int64_t i64[COUNT], i64o[COUNT];
	static uint8_t u8[COUNT], u8o[COUNT];

	for (int i = 0; i < COUNT; i++) {
		f32[i] = (float)in_f(me, i);
		f64[i] = in_f(me, i) * (me == 1 ? -1 : 1);
		i32[i] = (int32_t)(i * (me + 1)) - 500;
		i64[i] = (int64_t)(i % 5 + 1) * (me + 2);
		u8[i] = (uint8_t)(i + 100 * me);
	}
	R_CHECK(tpu_world_all_reduce(w, f32, f32o, COUNT, TPU_DT_FLOAT32, TPU_OP_SUM,
				     TPU_FINAL_NONE, 10 * SECOND) == 0);
	R_CHECK(tpu_world_all_reduce(w, f64, f64o, COUNT, TPU_DT_FLOAT64, TPU_OP_MAX,
				     TPU_FINAL_NONE, 10 * SECOND) == 0);
	R_CHECK(tpu_world_all_reduce(w, i32, i32o, COUNT, TPU_DT_INT32, TPU_OP_MIN,
				     TPU_FINAL_NONE, 10 * SECOND) == 0);
	R_CHECK(tpu_world_all_reduce(w, i64, i64o, COUNT, TPU_DT_INT64, TPU_OP_PROD,
				     TPU_FINAL_NONE, 10 * SECOND) == 0);
	R_CHECK(tpu_world_all_reduce(w, u8, u8o, COUNT, TPU_DT_UINT8, TPU_OP_SUM,
				     TPU_FINAL_NONE, 10 * SECOND) == 0);
	for (int i = 0; i < COUNT; i++) {
		double sum = 0, max = -1e300;
		int32_t min = INT32_MAX;
		int64_t prod = 1;
		unsigned int usum = 0;

		for (int r = 0; r < n; r++) {
			double v = in_f(r, i) * (r == 1 ? -1 : 1);

			sum += (float)in_f(r, i);
			max = v > max ? v : max;
			min = (int32_t)(i * (r + 1)) - 500 < min ? (int32_t)(i * (r + 1)) - 500 : min;
			prod *= (int64_t)(i % 5 + 1) * (r + 2);
			usum += (uint8_t)(i + 100 * r);
		}
		R_CHECK(f32o[i] == (float)sum);
		R_CHECK(f64o[i] == max);
		R_CHECK(i32o[i] == min);
		R_CHECK(i64o[i] == prod);
		R_CHECK(u8o[i] == (uint8_t)usum);
	}
	/* In place, and the mean. */
	for (int i = 0; i < COUNT; i++)
		f32[i] = (float)(me * 2 + i);
	R_CHECK(tpu_world_all_reduce(w, f32, f32, COUNT, TPU_DT_FLOAT32, TPU_OP_SUM,
				     TPU_FINAL_DIV, 0) == 0);
	for (int i = 0; i < COUNT; i++)
		R_CHECK(f32[i] == (float)(n - 1 + i));
	/* The world's own groups (a tpu_coll per call) never choose lanes. */
	R_CHECK(tpu__coll_lanes_choices() == 0);
	return 0;
}

static int broadcasts_gathers_scatters(struct tpu_world *w, int me, int n)
{
	static int64_t b[COUNT];
	static float g_in[37], g_out[3 * 37], rs_in[100], rs_out[100];
	size_t off, len;

	for (int root = 0; root < n; root++) {
		for (int i = 0; i < COUNT; i++)
			b[i] = me == root ? (int64_t)i * 1000 + root : -1;
		R_CHECK(tpu_world_broadcast(w, b, COUNT, TPU_DT_INT64, root, 10 * SECOND) == 0);
		for (int i = 0; i < COUNT; i++)
			R_CHECK(b[i] == (int64_t)i * 1000 + root);
	}
	for (int i = 0; i < 37; i++)
		g_in[i] = (float)(me * 100 + i);
	memset(g_out, 0, sizeof(g_out));
	R_CHECK(tpu_world_all_gather(w, g_in, g_out, 37, TPU_DT_FLOAT32, 10 * SECOND) == 0);
	for (int r = 0; r < n; r++)
		for (int i = 0; i < 37; i++)
			R_CHECK(g_out[r * 37 + i] == (float)(r * 100 + i));
	for (int i = 0; i < 100; i++)
		rs_in[i] = (float)(i + me);
	memset(rs_out, 0, sizeof(rs_out));
	R_CHECK(tpu_world_reduce_scatter(w, rs_in, rs_out, 100, TPU_DT_FLOAT32, TPU_OP_SUM,
					 TPU_FINAL_NONE, 10 * SECOND) == 0);
	off = tpu_coll_chunk(100, n, me, &len);
	for (size_t i = 0; i < len; i++)
		R_CHECK(rs_out[i] == (float)((int)(off + i) * n + n * (n - 1) / 2));
	R_CHECK(tpu_world_barrier_timeout(w, 10 * SECOND) == 0);
	return 0;
}

/* Mismatches fail on every rank, say what differs, and leave the world usable. */
static int mismatches(struct tpu_world *w, int me, int n)
{
	static float a[64], o[3 * 64];
	char why[256];

	for (int i = 0; i < 64; i++)
		a[i] = 1;
	R_CHECK(tpu_world_all_reduce(w, a, o, me == n - 1 ? 63 : 64, TPU_DT_FLOAT32, TPU_OP_SUM,
				     TPU_FINAL_NONE, 10 * SECOND) == TPU_E_COLL_MISMATCH);
	tpu_world_last_reason(w, why, sizeof(why));
	R_CHECK(strstr(why, "count") != NULL);
	/* Different collectives: rank 0 gathers, the others reduce. */
	R_CHECK((me == 0 ? tpu_world_all_gather(w, a, o, 64, TPU_DT_FLOAT32, 10 * SECOND)
			 : tpu_world_all_reduce(w, a, o, 64, TPU_DT_FLOAT32, TPU_OP_SUM,
						TPU_FINAL_NONE, 10 * SECOND)) == TPU_E_COLL_MISMATCH);
	R_CHECK(tpu_world_all_reduce(w, a, o, 64, me ? TPU_DT_FLOAT32 : TPU_DT_INT32, TPU_OP_SUM,
				     TPU_FINAL_NONE, 10 * SECOND) == TPU_E_COLL_MISMATCH);
	R_CHECK(tpu_world_all_reduce(w, a, o, 64, TPU_DT_FLOAT32, me ? TPU_OP_SUM : TPU_OP_MAX,
				     TPU_FINAL_NONE, 10 * SECOND) == TPU_E_COLL_MISMATCH);
	/* Every rank a root of its own: several sources. */
	R_CHECK(tpu_world_broadcast(w, a, 64, TPU_DT_FLOAT32, me, 10 * SECOND) ==
		TPU_E_COLL_MISMATCH);
	/* Still usable. */
	R_CHECK(tpu_world_all_reduce(w, a, o, 64, TPU_DT_FLOAT32, TPU_OP_SUM, TPU_FINAL_NONE,
				     10 * SECOND) == 0);
	for (int i = 0; i < 64; i++)
		R_CHECK(o[i] == (float)n);
	return 0;
}

/* Send and receive around the ring: rank 0 sends first, the others receive first. */
static int ring(struct tpu_world *w, int me, int n)
{
	char out[2][64], in[64], small[4];
	int next = (me + 1) % n, prev = (me + n - 1) % n;
	size_t len = 0;

	for (int k = 0; k < 2; k++)
		snprintf(out[k], sizeof(out[k]), "message %d from rank %d", k, me);
	if (me != 0) {
		/* Too small: nothing consumed, the same message comes next. */
		R_CHECK(tpu_world_recv(w, prev, small, sizeof(small), &len, 10 * SECOND) == -EMSGSIZE);
		R_CHECK(len == strlen(out[0]) + 1);
		for (int k = 0; k < 2; k++) {
			R_CHECK(tpu_world_recv(w, prev, in, sizeof(in), &len, 10 * SECOND) == 0);
			snprintf(out[k], sizeof(out[k]), "message %d from rank %d", k, prev);
			R_CHECK(len == strlen(out[k]) + 1 && !strcmp(in, out[k]));
			snprintf(out[k], sizeof(out[k]), "message %d from rank %d", k, me);
		}
	}
	for (int k = 0; k < 2; k++)
		R_CHECK(tpu_world_send(w, next, out[k], strlen(out[k]) + 1, 10 * SECOND) == 0);
	if (me == 0) {
		R_CHECK(tpu_world_recv(w, prev, small, sizeof(small), &len, 10 * SECOND) == -EMSGSIZE);
		for (int k = 0; k < 2; k++) {
			char want[64];

			snprintf(want, sizeof(want), "message %d from rank %d", k, prev);
			R_CHECK(tpu_world_recv(w, prev, in, sizeof(in), &len, 10 * SECOND) == 0);
			R_CHECK(len == strlen(want) + 1 && !strcmp(in, want));
		}
	}
	return 0;
}

/* A child forked from a rank cannot stand in for it: every call says so. */
static int forked_child_refused(struct tpu_world *w, int me, int n)
{
	float a[4] = { 0 };
	int status = -1;
	pid_t pid = fork();

	R_CHECK(pid >= 0);
	if (pid == 0) {
		bool ok = tpu_world_all_reduce(w, a, a, 4, TPU_DT_FLOAT32, TPU_OP_SUM,
					       TPU_FINAL_NONE, SECOND) == TPU_E_FORKED &&
			  tpu_world_barrier_timeout(w, SECOND) == TPU_E_FORKED &&
			  tpu_world_send(w, (me + 1) % n, a, sizeof(a), SECOND) == TPU_E_FORKED &&
			  tpu_world_recv(w, (me + 1) % n, a, sizeof(a), NULL, SECOND) ==
			  TPU_E_FORKED;

		_exit(ok ? 0 : 1);
	}
	R_CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
	return 0;
}

static int bad_calls(struct tpu_world *w, int me, int n)
{
	char name[128], tiny[8], want[64];
	float a[4] = { 0 };

	R_CHECK(tpu_world_all_reduce(NULL, a, a, 4, TPU_DT_FLOAT32, TPU_OP_SUM, TPU_FINAL_NONE,
				     0) == -EINVAL);
	R_CHECK(tpu_world_all_reduce(w, NULL, a, 4, TPU_DT_FLOAT32, TPU_OP_SUM, TPU_FINAL_NONE,
				     0) == -EINVAL);
	R_CHECK(tpu_world_all_reduce(w, a, a, 4, (enum tpu_dtype)0, TPU_OP_SUM, TPU_FINAL_NONE,
				     0) == -EINVAL);
	R_CHECK(tpu_world_all_reduce(w, a, a, 4, TPU_DT_FLOAT32, (enum tpu_reduce_op)9,
				     TPU_FINAL_NONE, 0) == -EINVAL);
	R_CHECK(tpu_world_broadcast(w, a, 4, TPU_DT_FLOAT32, n, 0) == -EINVAL);
	R_CHECK(tpu_world_broadcast(w, a, 4, TPU_DT_FLOAT32, -1, 0) == -EINVAL);
	R_CHECK(tpu_world_send(w, me, a, sizeof(a), 0) == -EINVAL);
	R_CHECK(tpu_world_send(w, n, a, sizeof(a), 0) == -EINVAL);
	R_CHECK(tpu_world_recv(w, -1, a, sizeof(a), NULL, 0) == -EINVAL);
	R_CHECK(tpu_world_send(w, (me + 1) % n, NULL, 4, 0) == -EINVAL);
	snprintf(want, sizeof(want), "/job:worker/replica:0/task:%d/device:CPU:0", n - 1);
	R_CHECK(tpu_world_device_name(w, n - 1, name, sizeof(name)) == 0 && !strcmp(name, want));
	R_CHECK(tpu_world_device_name(w, 0, tiny, sizeof(tiny)) == -ENOSPC);
	R_CHECK(tpu_world_device_name(w, n, name, sizeof(name)) == -EINVAL);
	return forked_child_refused(w, me, n);
}

static int (*const scenarios[])(struct tpu_world *w, int me, int n) = {
	bad_calls, all_reduces, broadcasts_gathers_scatters, mismatches, ring,
};
static const char *const scenario_names[] = {
	"bad_arguments_device_names_and_a_forked_child_are_refused",
	"all_reduce_of_five_dtypes_four_ops_in_place_and_mean_every_element",
	"broadcast_from_each_root_all_gather_reduce_scatter_barrier_every_element",
	"mismatched_count_type_dtype_op_root_fail_every_rank_then_all_reduce_works",
	"send_recv_around_the_ring_in_order_emsgsize_consumes_nothing",
};

/* One world per scenario, so that a failure names what failed. */
static int main_rank(int me, int n, void *arg)
{
	const struct job *j = arg;
	struct tpu_context *ctx = NULL;
	struct tpu_world *w = NULL;
	int rc = world_up(me, n, j->port, &ctx, &w);

	if (!rc)
		rc = scenarios[j->scenario](w, me, n);
	if (!rc)
		R_CHECK(tpu_world_barrier_timeout(w, 10 * SECOND) == 0);
	tpu_world_destroy(w);
	tpu_context_destroy(ctx);
	return rc;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * SECOND + (uint64_t)ts.tv_nsec;
}

struct sender {
	struct tpu_world *w;
	tpu_status st;
};

static void *send_thread(void *arg)
{
	struct sender *s = arg;
	static const char text[] = "late";

	s->st = tpu_world_send(s->w, 1, text, sizeof(text), 10 * SECOND);
	return NULL;
}

/*
 * World of 2: a receive with nothing sent times out within its bound and
 * consumes nothing; a second send to the same rank meanwhile is -EBUSY;
 * then a collective rank 1 never joins times out on rank 0.
 */
static int timeout_rank(int me, int n, void *arg)
{
	const struct job *j = arg;
	struct tpu_context *ctx = NULL;
	struct tpu_world *w = NULL;
	char buf[16];
	float a[8] = { 0 };
	size_t len = 0;
	uint64_t t0, dt;
	int rc = world_up(me, n, j->port, &ctx, &w);

	if (rc)
		return rc;
	if (me == 1) {
		t0 = now_ns();
		R_CHECK(tpu_world_recv(w, 0, buf, sizeof(buf), &len, 300 * MS) == -ETIMEDOUT);
		dt = now_ns() - t0;
		R_CHECK(dt >= 290 * MS && dt < 3 * SECOND);
		R_CHECK(tpu_world_barrier(w) == 0);	/* 1: rank 0 may send now */
		usleep(300 * 1000);			/* while rank 0 tries a second send */
		R_CHECK(tpu_world_recv(w, 0, buf, sizeof(buf), &len, 10 * SECOND) == 0);
		R_CHECK(len == 5 && !strcmp(buf, "late"));
		/* Rank 0's all-reduce is not joined: wait until it timed out. */
		R_CHECK(tpu_world_barrier(w) == 0);	/* 2 */
	} else {
		struct sender s = { w, -1 };
		pthread_t t;

		R_CHECK(tpu_world_barrier(w) == 0);	/* 1 */
		R_CHECK(pthread_create(&t, NULL, send_thread, &s) == 0);
		usleep(100 * 1000);
		R_CHECK(tpu_world_send(w, 1, "x", 2, SECOND) == -EBUSY);
		pthread_join(t, NULL);
		R_CHECK(s.st == 0);
		t0 = now_ns();
		R_CHECK(tpu_world_all_reduce(w, a, a, 8, TPU_DT_FLOAT32, TPU_OP_SUM, TPU_FINAL_NONE,
					     500 * MS) == -ETIMEDOUT);
		dt = now_ns() - t0;
		R_CHECK(dt >= 490 * MS && dt < 5 * SECOND);
		R_CHECK(tpu_world_barrier(w) == 0);	/* 2 */
	}
	tpu_world_destroy(w);
	tpu_context_destroy(ctx);
	return 0;
}

void test_world_coll(void)
{
	for (int n = 2; n <= 3; n++)
		for (int k = 0; k < (int)(sizeof(scenarios) / sizeof(scenarios[0])); k++) {
			struct job j = { .port = boot_free_port(), .scenario = k };

			CHECK(j.port > 1 && boot_run_ranks(n, main_rank, &j, 120),
			      "world_of_%d_%s", n, scenario_names[k]);
		}
	{
		struct job j = { .port = boot_free_port() };

		CHECK(j.port > 1 && boot_run_ranks(2, timeout_rank, &j, 60),
		      "world_of_2_recv_and_collective_timeouts_bound_the_calls_and_send_is_ebusy");
	}
	boot_env_clear();
}
