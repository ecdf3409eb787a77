// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * tpu_world_destroy() while another thread of the rank is inside a call on
 * the same world, in fork()ed worlds of 2 ranks: the call ends with
 * TPU_E_CLOSED at once (not at its timeout), the process lives (the
 * shared segment is not unmapped under a collective still reading it),
 * both ranks' destroys return soon, and the world refuses calls after.
 * A caller's store barrier that the destroy cut short still counts: the
 * destroy's barrier meets the other rank's.  And the context destroyed
 * before the world.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "boot_harness.h"
#include "tap.h"
#include "tpu_user.h"

#define MS		1000000ull
#define SECOND		1000000000ull
#define COUNT		4096
/* The others' time to be inside their call before the destroy. */
#define INSIDE_MS	100

enum call { ALL_REDUCE, BROADCAST, RECV, SEND, FIRST_COLLECTIVE, BARRIER, NCALLS };

static const char *const call_names[NCALLS] = {
	"all_reduce", "broadcast", "recv", "send", "first_collective", "store_barrier",
};

struct job {
	uint16_t port;
	enum call call;
	const char *path;	/* TPU_COLL_PATH */
};

struct inside {
	struct tpu_world *w;
	enum call call;
	atomic_bool calling;
	tpu_status st;
	uint64_t took_ns;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * SECOND + (uint64_t)ts.tv_nsec;
}

/* One call that rank 1 never meets; its timeout far beyond the test's bounds. */
static void *call_inside(void *arg)
{
	static float buf[COUNT];
	struct inside *in = arg;
	uint64_t t0 = now_ns();
	char small[64] = "";

	atomic_store(&in->calling, true);
	switch (in->call) {
	case ALL_REDUCE:
	case FIRST_COLLECTIVE:
		in->st = tpu_world_all_reduce(in->w, buf, buf, COUNT, TPU_DT_FLOAT32, TPU_OP_SUM,
					      TPU_FINAL_NONE, 60 * SECOND);
		break;
	case BROADCAST:
		in->st = tpu_world_broadcast(in->w, buf, COUNT, TPU_DT_FLOAT32, 1, 60 * SECOND);
		break;
	case RECV:
		in->st = tpu_world_recv(in->w, 1, small, sizeof(small), NULL, 60 * SECOND);
		break;
	case SEND:
		in->st = tpu_world_send(in->w, 1, small, sizeof(small), 60 * SECOND);
		break;
	case BARRIER:
	default:
		in->st = tpu_world_barrier(in->w);
		break;
	}
	in->took_ns = now_ns() - t0;
	return NULL;
}

static int rank_main(int me, int n, void *arg)
{
	const struct job *j = arg;
	struct tpu_world_info info = { .rank = me, .size = n, .local_rank = -1, .local_size = -1,
				       .store_host = "127.0.0.1", .store_port = j->port };
	/* Longer than every bound below: a destroy that waited for it is caught. */
	struct tpu_world_options wo = { .info = &info, .timeout_ms = 20000 };
	struct inside in = { .call = j->call };
	struct tpu_context *ctx;
	struct tpu_world *w;
	float one = 1;
	uint64_t t0, took;
	pthread_t t;
	char reason[64];

	boot_env_clear();
	if (j->path)
		setenv("TPU_COLL_PATH", j->path, 1);
	R_CHECK(tpu_context_create(NULL, &ctx) == 0);
	R_CHECK(tpu_world_create(ctx, &wo, &w) == 0);
	in.w = w;
	/* The path chosen (and the segment mapped) before the call that is cut. */
	if (j->call == ALL_REDUCE || j->call == BROADCAST)
		R_CHECK(tpu_world_all_reduce(w, &one, &one, 1, TPU_DT_FLOAT32, TPU_OP_SUM,
					     TPU_FINAL_NONE, 10 * SECOND) == 0 && one == 2);
	if (me == 0) {
		R_CHECK(pthread_create(&t, NULL, call_inside, &in) == 0);
		while (!atomic_load(&in.calling))
			usleep(1000);
		usleep(INSIDE_MS * 1000);
	} else {
		/* Rank 1 never makes the call; it leaves well after rank 0 for a barrier. */
		usleep((j->call == BARRIER ? 10 : 1) * INSIDE_MS * 1000);
	}
	t0 = now_ns();
	tpu_world_destroy(w);
	took = now_ns() - t0;
	if (me == 0) {
		R_CHECK(pthread_join(t, NULL) == 0);
		if (in.st != TPU_E_CLOSED || in.took_ns > 5 * SECOND || took > 5 * SECOND)
			fprintf(stderr, "# rank 0: the call ended with %s after %llu ms, the "
				"destroy took %llu ms\n", tpu_status_name(in.st),
				(unsigned long long)(in.took_ns / MS),
				(unsigned long long)(took / MS));
		R_CHECK(in.st == TPU_E_CLOSED);
		/* Inside for INSIDE_MS, then ended by the destroy: not by its 60 s timeout. */
		R_CHECK(in.took_ns >= INSIDE_MS * MS / 2 && in.took_ns < 5 * SECOND);
	}
	/* Neither waited for the world's 20 s: the destroy's barrier met the other's. */
	R_CHECK(took < 5 * SECOND);
	R_CHECK(tpu_world_all_reduce(w, &one, &one, 1, TPU_DT_FLOAT32, TPU_OP_SUM,
				     TPU_FINAL_NONE, SECOND) == TPU_E_DESTROYED);
	R_CHECK(tpu_world_barrier(w) == TPU_E_DESTROYED);
	tpu_world_last_reason(w, reason, sizeof(reason));
	R_CHECK(reason[0] == '\0');
	tpu_context_destroy(ctx);
	return 0;
}

/*
 * The context destroyed before its world: the world's pipes and
 * rendezvous close with it, its calls fail, and its destroy (barrier,
 * store, segment) returns; it had waited for the context's thread for
 * ever.
 */
static int context_first(int me, int n, void *arg)
{
	const struct job *j = arg;
	struct tpu_world_info info = { .rank = me, .size = n, .local_rank = -1, .local_size = -1,
				       .store_host = "127.0.0.1", .store_port = j->port };
	struct tpu_world_options wo = { .info = &info, .timeout_ms = 20000 };
	struct tpu_context *ctx;
	struct tpu_world *w;
	struct tpu_pipe *p;
	float one = 1;
	uint64_t t0;

	boot_env_clear();
	R_CHECK(tpu_context_create(NULL, &ctx) == 0);
	R_CHECK(tpu_world_create(ctx, &wo, &w) == 0);
	R_CHECK(tpu_world_all_reduce(w, &one, &one, 1, TPU_DT_FLOAT32, TPU_OP_SUM,
				     TPU_FINAL_NONE, 10 * SECOND) == 0 && one == 2);
	R_CHECK(tpu_world_pipe(w, 1 - me, &p) == 0);
	tpu_context_destroy(ctx);
	R_CHECK(tpu_world_all_reduce(w, &one, &one, 1, TPU_DT_FLOAT32, TPU_OP_SUM,
				     TPU_FINAL_NONE, SECOND) == TPU_E_DESTROYED);
	R_CHECK(tpu_world_rendezvous(w) == NULL);
	t0 = now_ns();
	tpu_world_destroy(w);
	R_CHECK(now_ns() - t0 < 5 * SECOND);
	R_CHECK(tpu_world_barrier(w) == TPU_E_DESTROYED);
	return 0;
}

void test_world_destroy(void)
{
	static const char *const paths[] = { "shm", "rdv" };

	for (int c = 0; c < NCALLS; c++)
		for (int p = 0; p < 2; p++) {
			struct job j = { .port = boot_free_port(), .call = (enum call)c,
					 .path = paths[p] };
			bool collective = c == ALL_REDUCE || c == BROADCAST || c == FIRST_COLLECTIVE;

			/* The path matters to collectives only. */
			if (!collective && p)
				continue;
			CHECK(j.port > 1 && boot_run_ranks(2, rank_main, &j, 60),
			      "a world destroyed while another thread is inside %s%s%s ends it "
			      "with TPU_E_CLOSED at once; both destroys return soon",
			      call_names[c], collective ? " over " : "", collective ? paths[p] : "");
		}
	{
		struct job j = { .port = boot_free_port() };

		CHECK(j.port > 1 && boot_run_ranks(2, context_first, &j, 60),
		      "a world whose context is destroyed first: its calls fail TPU_E_DESTROYED "
		      "and its destroy returns");
	}
	boot_env_clear();
}
