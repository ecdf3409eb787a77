// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * mpi_coll_bench: Open MPI's all-reduce, broadcast, all-gather and
 * reduce-scatter, measured
 * the way tools/bench_coll.c (tpbench coll) measures ours, so that the two
 * can be put side by side.
 *
 *   mpirun -np N mpi_coll_bench [--sizes LIST] [--iters N]
 *
 * float32 sums; broadcast from rank 0; all-gather of SIZE bytes per rank
 * into N * SIZE; reduce-scatter of SIZE bytes, rank r keeping chunk r (the
 * first SIZE/4 % N ranks one element more, as tpu_coll_chunk() cuts it).  For every collective and size: one warm-up operation, then
 * --iters operations back to back, each timed by every rank on its own; an
 * operation's time is the slowest rank's, and the figure printed is the
 * median over the operations.  Bus bandwidth follows nccl-tests: all-reduce
 * SIZE * 2(N-1)/N, broadcast SIZE, all-gather N * SIZE * (N-1)/N,
 * reduce-scatter SIZE * (N-1)/N, per second
 * (GB/s = 10^9 bytes per second).
 *
 * Output, one line per collective and size, from rank 0:
 *   peer=mpi coll=all-reduce ranks=2 size=1048576 iters=10 time_us=.. busbw=..
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SIZES	32
#define MAX_ITERS	1000

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* "4096", "64K", "16M", "1G": 0 on success. */
static int parse_size(const char *s, unsigned long long *out)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	if (end == s)
		return -1;
	if (*end == 'K' || *end == 'k')
		v <<= 10, end++;
	else if (*end == 'M' || *end == 'm')
		v <<= 20, end++;
	else if (*end == 'G' || *end == 'g')
		v <<= 30, end++;
	if (*end || v < 4 || v > (1ull << 30))
		return -1;
	*out = v;
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static const char *const names[] = { "all-reduce", "broadcast", "all-gather",
				     "reduce-scatter" };
#define NKINDS	4
#define MAX_RANKS	256

static void one_op(int kind, float *in, float *out, int count, int n)
{
	static int chunks[MAX_RANKS];

	if (kind == 0) {
		MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
	} else if (kind == 1) {
		MPI_Bcast(out, count, MPI_FLOAT, 0, MPI_COMM_WORLD);
	} else if (kind == 2) {
		MPI_Allgather(in, count, MPI_FLOAT, out, count, MPI_FLOAT, MPI_COMM_WORLD);
	} else {
		for (int r = 0; r < n; r++)
			chunks[r] = count / n + (r < count % n);
		MPI_Reduce_scatter(in, out, chunks, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
	}
}

int main(int argc, char **argv)
{
	unsigned long long sizes[MAX_SIZES] = { 4, 65536, 1 << 20, 16 << 20, 64 << 20 };
	int nsizes = 5, iters = 10, rank, n;
	unsigned long long max = 0;
	static double mine[MAX_ITERS], slowest[MAX_ITERS];
	float *in, *out;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	if (n > MAX_RANKS)
		MPI_Abort(MPI_COMM_WORLD, 2);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
			iters = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
			char *list = argv[++i], *tok, *save = NULL;

			nsizes = 0;
			for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
				if (nsizes == MAX_SIZES || parse_size(tok, &sizes[nsizes++]))
					nsizes = -1;
		} else {
			nsizes = -1;
		}
		if (nsizes < 0)
			break;
	}
	if (nsizes <= 0 || iters < 1 || iters > MAX_ITERS) {
		if (!rank)
			fprintf(stderr, "usage: mpirun -np N mpi_coll_bench [--sizes 4,64K,1M] "
					"[--iters 1..%d]\n", MAX_ITERS);
		MPI_Finalize();
		return 2;
	}
	for (int s = 0; s < nsizes; s++)
		if (sizes[s] > max)
			max = sizes[s];
	in = malloc(max);
	out = malloc(max * (unsigned long long)n);
	if (!in || !out) {
		fprintf(stderr, "mpi_coll_bench: rank %d: out of memory\n", rank);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	/* Touch every page, as the others' buffers are before they are timed. */
	memset(in, 1, max);
	memset(out, 0, max * (unsigned long long)n);

	for (int kind = 0; kind < NKINDS; kind++)
		for (int s = 0; s < nsizes; s++) {
			int count = (int)(sizes[s] / 4);
			double t, bus;

			one_op(kind, in, out, count, n);		/* warm-up */
			for (int it = 0; it < iters; it++) {
				double t0 = now_s();

				one_op(kind, in, out, count, n);
				mine[it] = now_s() - t0;
			}
			MPI_Reduce(mine, slowest, iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
			if (rank)
				continue;
			qsort(slowest, (size_t)iters, sizeof(slowest[0]), cmp_double);
			t = slowest[iters / 2];
			bus = kind == 0 ? 2.0 * (n - 1) / n : kind == 1 ? 1.0 : kind == 2 ? (double)(n - 1) :
			      (double)(n - 1) / n;
			printf("peer=mpi coll=%s ranks=%d size=%llu iters=%d time_us=%.1f busbw=%.3f\n",
			       names[kind], n, (unsigned long long)count * 4, iters, t * 1e6,
			       (double)count * 4 * bus / t / 1e9);
			fflush(stdout);
		}
	free(in);
	free(out);
	MPI_Finalize();
	return 0;
}
