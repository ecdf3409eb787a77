// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * tpbench coll: all-reduce, broadcast, all-gather and reduce-scatter between
 * N forked worker processes joined by the remote rendezvous
 * (tpu_coll_create_cluster over shm URLs known in advance) or, with
 * --world, formed into a world (tpu_world_create, its store on a free
 * loopback port) whose one-call collectives take the shared segment where
 * TPU_COLL_PATH allows; float32, sizes from --min to --max.
 *
 * Each size is one instance run in --iters steps after a warm-up step
 * (which also resolves it): the time per operation is the median over the
 * steps of the slowest member's time, as nccl-tests reports it, and the
 * bus bandwidth follows its convention: all-reduce bytes * 2(n-1)/n,
 * all-gather (output bytes) * (n-1)/n, broadcast bytes, reduce-scatter
 * bytes * (n-1)/n, per second.
 * Workers report their times to the parent over a pipe.
 *
 * --env: no workers; this process is one rank of a world formed from the
 * launcher's variables (torchrun's, mpirun's; ranks on several hosts), and
 * the ranks take the slowest rank's time per step with a max all-reduce
 * after each size; rank 0 prints, naming the path the world took
 * (tpu_world_coll_path(): "hier", "shm" or "rdv", as TPU_COLL_PATH lets
 * it).  tests/vm/pair-bench.sh runs it across two VMs.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tpu_user.h>

#include "bench_coll.h"
#include "host_state.h"
#include "units.h"

#define MAX_RANKS	8
#define MAX_ITERS	200
#define MAX_SIZES	32

struct coll_opts {
	int ranks;
	uint64_t min, max;
	unsigned int iters;
	const char *impl;
	uint64_t sizes[MAX_SIZES];	/* from --sizes, or --min to --max by 4 */
	int nsizes;
	bool lines;			/* peer=tpu lines for tools/bench-peers.sh */
	bool world;			/* tpu_world_* calls instead of a cluster */
	bool env;			/* this process: one rank of a launcher's world */
	bool no_bind;			/* leave the workers where the scheduler puts them */
	uint16_t port;			/* --world: the store's */
};

static const struct {
	const char *name;
	enum tpu_coll_type type;
} kinds[] = {
	{ "all-reduce", TPU_COLL_REDUCTION },
	{ "broadcast", TPU_COLL_BROADCAST },
	{ "all-gather", TPU_COLL_GATHER },
	{ "reduce-scatter", TPU_COLL_REDUCE_SCATTER },
};
#define NKINDS (sizeof(kinds) / sizeof(kinds[0]))

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* One world collective of @bytes; broadcast from rank 0. */
static tpu_status world_op(struct tpu_world *w, enum tpu_coll_type type, void *in, void *out,
			   uint64_t bytes)
{
	switch (type) {
	case TPU_COLL_REDUCTION:
		return tpu_world_all_reduce(w, in, out, bytes / 4, TPU_DT_FLOAT32, TPU_OP_SUM,
					    TPU_FINAL_NONE, 0);
	case TPU_COLL_BROADCAST:
		return tpu_world_broadcast(w, in, bytes / 4, TPU_DT_FLOAT32, 0, 0);
	case TPU_COLL_GATHER:
		return tpu_world_all_gather(w, in, out, bytes / 4, TPU_DT_FLOAT32, 0);
	default:
		return tpu_world_reduce_scatter(w, in, out, bytes / 4, TPU_DT_FLOAT32, TPU_OP_SUM,
						TPU_FINAL_NONE, 0);
	}
}

/* --world: the same steps over tpu_world_*. */
static int world_worker(const struct coll_opts *o, int me, int fd)
{
	struct tpu_world_info info = { .rank = me, .size = o->ranks, .local_rank = me,
				       .local_size = o->ranks, .store_host = "127.0.0.1",
				       .store_port = o->port };
	struct tpu_world_options wo = { .info = &info, .timeout_ms = 60000 };
	struct tpu_context *ctx = NULL;
	struct tpu_world *w = NULL;
	char *in = calloc(1, o->max + 1), *out = calloc((size_t)o->ranks, o->max + 1);
	tpu_status st = in && out ? tpu_context_create(NULL, &ctx) : -ENOMEM;

	if (!st)
		st = tpu_world_create(ctx, &wo, &w);
	/*
	 * Every page touched, as Open MPI's and Gloo's benches do: an input
	 * left as calloc() gave it reads one shared zero page, always in cache.
	 */
	if (!st) {
		memset(in, 1, o->max + 1);
		memset(out, 0, (size_t)o->ranks * (o->max + 1));
	}
	for (size_t k = 0; k < NKINDS && !st; k++)
		for (int si = 0; si < o->nsizes && !st; si++) {
			uint64_t times[MAX_ITERS + 1];
			size_t len = o->iters * sizeof(times[0]);

			for (unsigned int it = 0; it <= o->iters && !st; it++) {
				uint64_t t0 = now_ns();

				st = world_op(w, kinds[k].type, in, out, o->sizes[si]);
				times[it] = now_ns() - t0;
			}
			/*
			 * Reported once the size is done: a write per step would
			 * wake the parent amid the steps, on the cores they share.
			 * Step 0 sets the path up: a warm-up, not reported.
			 */
			if (!st && write(fd, times + 1, len) != (ssize_t)len)
				st = -EPIPE;
		}
	if (st)
		fprintf(stderr, "tpbench coll: worker %d: %s\n", me, tpu_strerror(st));
	tpu_world_destroy(w);
	tpu_context_destroy(ctx);
	free(in);
	free(out);
	return st ? 1 : 0;
}

static double bus_factor(enum tpu_coll_type type, int n);

/* --env: this process is one rank; rank 0 prints. */
static int env_rank(const struct coll_opts *o)
{
	struct tpu_world_options wo = { .timeout_ms = 60000 };
	struct tpu_context *ctx = NULL;
	struct tpu_world *w = NULL;
	char *in = NULL, *out = NULL, sz[32];
	int me = 0, n = 1;
	tpu_status st = tpu_context_create(NULL, &ctx);

	if (!st)
		st = tpu_world_create(ctx, &wo, &w);
	if (!st) {
		me = tpu_world_get_info(w)->rank;
		n = tpu_world_get_info(w)->size;
		in = calloc(1, o->max + 1);
		out = calloc((size_t)n, o->max + 1);
		st = in && out ? 0 : -ENOMEM;
	}
	/* The first collective decides the path: then it can be named. */
	if (!st)
		st = tpu_world_barrier_timeout(w, 0);
	if (!st && !me)
		printf("# tpbench coll --env: %d ranks, float32, path %s, median of %u steps of "
		       "the slowest rank\n%-14s %10s %12s %12s\n", n, tpu_world_coll_path(w),
		       o->iters, "collective", "size", "time_us", "busbw_GB/s");
	for (size_t k = 0; k < NKINDS && !st; k++)
		for (int si = 0; si < o->nsizes && !st; si++) {
			int64_t times[MAX_ITERS + 1];
			uint64_t bytes = o->sizes[si] - o->sizes[si] % 4;
			double t;

			for (unsigned int it = 0; it <= o->iters && !st; it++) {
				uint64_t t0 = now_ns();

				st = world_op(w, kinds[k].type, in, out, bytes);
				times[it] = (int64_t)(now_ns() - t0);
			}
			/* Step 0 is the warm-up; the slowest rank's time of each other. */
			if (!st)
				st = tpu_world_all_reduce(w, times + 1, times + 1, o->iters,
							  TPU_DT_INT64, TPU_OP_MAX, TPU_FINAL_NONE, 0);
			if (st || me)
				continue;
			qsort(times + 1, o->iters, sizeof(times[0]), cmp_u64);
			t = (double)times[1 + o->iters / 2] / 1e9;
			if (o->lines)
				printf("peer=tpu transport=%s coll=%s ranks=%d size=%llu iters=%u "
				       "time_us=%.1f busbw=%.3f\n", tpu_world_coll_path(w),
				       kinds[k].name, n, (unsigned long long)bytes, o->iters, t * 1e6,
				       (double)bytes * bus_factor(kinds[k].type, n) / t / 1e9);
			else
				printf("%-14s %10s %12.1f %12.3f\n", kinds[k].name,
				       format_size(bytes, sz, sizeof(sz)), t * 1e6,
				       (double)bytes * bus_factor(kinds[k].type, n) / t / 1e9);
			fflush(stdout);
		}
	if (st)
		fprintf(stderr, "tpbench coll: rank %d: %s\n", me, tpu_strerror(st));
	tpu_world_destroy(w);
	tpu_context_destroy(ctx);
	free(in);
	free(out);
	return st ? 1 : 0;
}

/*
 * Worker @r on the r-th CPU this process may use (mod their number), as
 * mpirun binds its ranks by default: measured unbound, two workers on a
 * busy 2-core host often share one core for a whole run.
 */
static void bind_worker(int r)
{
	cpu_set_t all, one;
	int k = 0, want;

	if (sched_getaffinity(0, sizeof(all), &all) || !CPU_COUNT(&all))
		return;
	want = r % CPU_COUNT(&all);
	CPU_ZERO(&one);
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &all) && k++ == want) {
			CPU_SET(c, &one);
			break;
		}
	sched_setaffinity(0, sizeof(one), &one);
}

/* A loopback port nothing listens on just now (the store's, for --world). */
static uint16_t free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int s = socket(AF_INET, SOCK_STREAM, 0);
	uint16_t port = 0;

	if (s >= 0 && !bind(s, (struct sockaddr *)&a, sizeof(a)) &&
	    !getsockname(s, (struct sockaddr *)&a, &len))
		port = ntohs(a.sin_port);
	if (s >= 0)
		close(s);
	return port;
}

/* One worker: every kind and size; its times go to @fd, one uint64_t per step. */
static int worker(const struct coll_opts *o, int me, int fd)
{
	char urls[MAX_RANKS][96], tasks[MAX_RANKS][64], devs[MAX_RANKS][64], self[64];
	const char *dp[MAX_RANKS], *lu;
	struct tpu_remote_task peers[MAX_RANKS];
	struct tpu_remote_options ro = { .task = self, .listen_urls = &lu, .nlisten = 1,
					 .peers = peers, .npeers = (size_t)o->ranks };
	struct tpu_context_options co = { .transports = "shm" };
	struct tpu_coll_group g = { .group_key = 1, .group_size = o->ranks, .device_type = "CPU",
				    .devices = dp };
	struct tpu_context *ctx = NULL;
	struct tpu_coll *coll = NULL;
	struct tpu_coll_member m;
	char *in, *out;
	int64_t step = 0;
	int32_t key = 0;
	tpu_status st;

	for (int i = 0; i < o->ranks; i++) {
		snprintf(tasks[i], sizeof(tasks[i]), "/job:bench/replica:0/task:%d", i);
		snprintf(urls[i], sizeof(urls[i]), "shm://tpbench-coll-%d-%d", (int)getppid(), i);
		snprintf(devs[i], sizeof(devs[i]), "%s/device:CPU:0", tasks[i]);
		dp[i] = devs[i];
		peers[i] = (struct tpu_remote_task){ tasks[i], urls[i] };
	}
	snprintf(self, sizeof(self), "%s", tasks[me]);
	lu = urls[me];
	m = (struct tpu_coll_member){ .device = devs[me], .is_source = me == 0 };
	in = calloc(1, o->max + 1);
	out = calloc((size_t)o->ranks, o->max + 1);
	st = in && out ? tpu_context_create(&co, &ctx) : -ENOMEM;
	if (!st)
		st = tpu_coll_create_cluster(ctx, &ro, &coll);
	for (size_t k = 0; k < NKINDS && !st; k++)
		for (int si = 0; si < o->nsizes && !st; si++) {
			uint64_t bytes = o->sizes[si];
			struct tpu_coll_instance inst = { .instance_key = key++,
							  .type = kinds[k].type,
							  .dtype = TPU_DT_FLOAT32, .count = bytes / 4,
							  .impl = kinds[k].type == TPU_COLL_REDUCTION ?
								  o->impl : NULL };

			for (unsigned int it = 0; it <= o->iters && !st; it++) {
				struct tpu_coll_exec *exec;
				uint64_t t0;

				st = tpu_coll_exec_create(coll, step++, &exec);
				if (st)
					break;
				t0 = now_ns();
				st = tpu_coll_exec_run(exec, &g, &inst, &m, in, out);
				t0 = now_ns() - t0;
				tpu_coll_exec_destroy(exec);
				/* Step 0 resolves the instance: a warm-up, not reported. */
				if (it && write(fd, &t0, sizeof(t0)) != sizeof(t0))
					st = -EPIPE;
			}
		}
	if (st)
		fprintf(stderr, "tpbench coll: worker %d: %s\n", me, tpu_strerror(st));
	tpu_coll_destroy(coll);
	tpu_context_destroy(ctx);
	free(in);
	free(out);
	return st ? 1 : 0;
}

static double bus_factor(enum tpu_coll_type type, int n)
{
	if (type == TPU_COLL_REDUCTION)
		return 2.0 * (n - 1) / n;
	if (type == TPU_COLL_GATHER)
		return (double)(n - 1);		/* output bytes n*size, times (n-1)/n */
	if (type == TPU_COLL_REDUCE_SCATTER)
		return (double)(n - 1) / n;
	return 1.0;
}

static int usage(void)
{
	fprintf(stderr, "usage: tpbench coll [--ranks N] [--min SIZE] [--max SIZE] "
			"[--sizes LIST] [--iters N] [--impl ring|doubling] [--world] [--no-bind] "
			"[--lines] [--env]\n");
	return 1;
}

int bench_coll_main(int argc, char **argv)
{
	struct coll_opts o = { .ranks = 2, .min = 4, .max = 64u << 20, .iters = 10 };
	int fds[MAX_RANKS], rc = 0;
	pid_t pids[MAX_RANKS];
	struct host_state host[2];
	char sz[32];

	const char *list = NULL;

	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(argv[i], "--env")) {
			o.env = true;
			continue;
		}
		if (!strcmp(argv[i], "--lines") || !strcmp(argv[i], "--world") ||
		    !strcmp(argv[i], "--no-bind")) {
			o.lines = o.lines || argv[i][2] == 'l';
			o.world = o.world || argv[i][2] == 'w';
			o.no_bind = o.no_bind || argv[i][2] == 'n';
			continue;
		}
		if (!v)
			return usage();
		if (!strcmp(argv[i], "--ranks"))
			o.ranks = atoi(v);
		else if (!strcmp(argv[i], "--iters"))
			o.iters = (unsigned int)atoi(v);
		else if (!strcmp(argv[i], "--impl"))
			o.impl = v;
		else if (!strcmp(argv[i], "--sizes"))
			list = v;
		else if (!strcmp(argv[i], "--min") ? parse_size(v, &o.min) :
			 !strcmp(argv[i], "--max") ? parse_size(v, &o.max) : 1)
			return usage();
		i++;
	}
	if (o.ranks < 1 || o.ranks > MAX_RANKS || o.iters < 1 || o.iters > MAX_ITERS ||
	    o.min < 4 || o.min > o.max || o.max > (1ull << 30))
		return usage();
	if (list) {
		/* "4,64K,1M": each at least 4 B (one float32), at most 1 GiB. */
		char buf[512], *tok, *save = NULL;

		if (strlen(list) >= sizeof(buf))
			return usage();
		strcpy(buf, list);
		o.max = 0;
		for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
			if (o.nsizes == MAX_SIZES || parse_size(tok, &o.sizes[o.nsizes]) ||
			    o.sizes[o.nsizes] < 4 || o.sizes[o.nsizes] > (1ull << 30))
				return usage();
			if (o.sizes[o.nsizes] > o.max)
				o.max = o.sizes[o.nsizes];
			o.nsizes++;
		}
		if (!o.nsizes)
			return usage();
	} else {
		for (uint64_t b = o.min; b <= o.max && o.nsizes < MAX_SIZES; b *= 4) {
			o.sizes[o.nsizes++] = b;
			if (b > o.max / 4)
				break;
		}
	}
	if (o.env)
		return env_rank(&o);
	if (o.world && !(o.port = free_port()))
		return 1;
	host_state_sample(&host[0]);
	for (int r = 0; r < o.ranks; r++) {
		int p[2];

		if (pipe(p))
			return 1;
		fflush(NULL);
		pids[r] = fork();
		if (pids[r] == 0) {
			close(p[0]);
			if (!o.no_bind)
				bind_worker(r);
			_exit(o.world ? world_worker(&o, r, p[1]) : worker(&o, r, p[1]));
		}
		close(p[1]);
		fds[r] = p[0];
	}
	if (!o.lines) {
		printf("# tpbench coll: %d ranks, float32, %s, median of %u steps of the slowest "
		       "rank\n", o.ranks, o.world ? "world (TPU_COLL_PATH decides)" : "shm cluster",
		       o.iters);
		printf("%-14s %10s %12s %12s\n", "collective", "size", "time_us", "busbw_GB/s");
	}
	for (size_t k = 0; k < NKINDS && !rc; k++)
		for (int si = 0; si < o.nsizes && !rc; si++) {
			uint64_t slowest[MAX_ITERS] = { 0 }, bytes = o.sizes[si] - o.sizes[si] % 4;
			double t, bw;

			for (unsigned int it = 0; it < o.iters && !rc; it++)
				for (int r = 0; r < o.ranks; r++) {
					uint64_t ns;

					if (read(fds[r], &ns, sizeof(ns)) != sizeof(ns)) {
						rc = 1;
						break;
					}
					if (ns > slowest[it])
						slowest[it] = ns;
				}
			if (rc)
				break;
			qsort(slowest, o.iters, sizeof(slowest[0]), cmp_u64);
			t = (double)slowest[o.iters / 2] / 1e9;
			bw = (double)bytes * bus_factor(kinds[k].type, o.ranks) / t / 1e9;
			if (o.lines)
				printf("peer=tpu transport=%s coll=%s ranks=%d size=%llu iters=%u "
				       "time_us=%.1f busbw=%.3f\n", o.world ? "world" : "shm",
				       kinds[k].name, o.ranks,
				       (unsigned long long)bytes, o.iters, t * 1e6, bw);
			else
				printf("%-14s %10s %12.1f %12.3f\n", kinds[k].name,
				       format_size(bytes, sz, sizeof(sz)), t * 1e6, bw);
			fflush(stdout);
		}
	for (int r = 0; r < o.ranks; r++) {
		int status;

		close(fds[r]);
		if (waitpid(pids[r], &status, 0) != pids[r] || !WIFEXITED(status) ||
		    WEXITSTATUS(status))
			rc = 1;
	}
	host_state_sample(&host[1]);
	if (o.lines)
		printf("# ");
	host_state_print(stdout, &host[0], &host[1]);
	return rc;
}
