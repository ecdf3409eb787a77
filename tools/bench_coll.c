// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * tpbench coll: all-reduce, broadcast and all-gather between N forked
 * worker processes joined by the remote rendezvous (tpu_coll_create_cluster
 * over shm URLs known in advance), float32, sizes from --min to --max.
 *
 * Each size is one instance run in --iters steps after a warm-up step
 * (which also resolves it): the time per operation is the median over the
 * steps of the slowest member's time, as nccl-tests reports it, and the
 * bus bandwidth follows its convention: all-reduce bytes * 2(n-1)/n,
 * all-gather (output bytes) * (n-1)/n, broadcast bytes, per second.
 * Workers report their times to the parent over a pipe.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tpu_user.h>

#include "bench_coll.h"
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
};

static const struct {
	const char *name;
	enum tpu_coll_type type;
} kinds[] = {
	{ "all-reduce", TPU_COLL_REDUCTION },
	{ "broadcast", TPU_COLL_BROADCAST },
	{ "all-gather", TPU_COLL_GATHER },
};
#define NKINDS (sizeof(kinds) / sizeof(kinds[0]))

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
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
	return 1.0;
}

static int usage(void)
{
	fprintf(stderr, "usage: tpbench coll [--ranks N] [--min SIZE] [--max SIZE] "
			"[--sizes LIST] [--iters N] [--impl ring|doubling] [--lines]\n");
	return 1;
}

int bench_coll_main(int argc, char **argv)
{
	struct coll_opts o = { .ranks = 2, .min = 4, .max = 64u << 20, .iters = 10 };
	int fds[MAX_RANKS], rc = 0;
	pid_t pids[MAX_RANKS];
	char sz[32];

	const char *list = NULL;

	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(argv[i], "--lines")) {
			o.lines = true;
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
	for (int r = 0; r < o.ranks; r++) {
		int p[2];

		if (pipe(p))
			return 1;
		fflush(NULL);
		pids[r] = fork();
		if (pids[r] == 0) {
			close(p[0]);
			_exit(worker(&o, r, p[1]));
		}
		close(p[1]);
		fds[r] = p[0];
	}
	if (!o.lines) {
		printf("# tpbench coll: %d ranks, float32, shm, median of %u steps of the slowest rank\n",
		       o.ranks, o.iters);
		printf("%-11s %10s %12s %12s\n", "collective", "size", "time_us", "busbw_GB/s");
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
				printf("peer=tpu transport=shm coll=%s ranks=%d size=%llu iters=%u "
				       "time_us=%.1f busbw=%.3f\n", kinds[k].name, o.ranks,
				       (unsigned long long)bytes, o.iters, t * 1e6, bw);
			else
				printf("%-11s %10s %12.1f %12.3f\n", kinds[k].name,
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
	return rc;
}
