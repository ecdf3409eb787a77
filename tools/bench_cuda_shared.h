/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * What tpbench cuda's two files share: one host (bench_cuda.c) and two
 * (bench_cuda_hosts.c).
 */
#ifndef TOOLS_BENCH_CUDA_SHARED_H
#define TOOLS_BENCH_CUDA_SHARED_H

#include <semaphore.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpu_user.h"

typedef unsigned long long cu_ptr;

/* The driver calls used here (their prototypes as in the driver API). */
struct bench_cu {
	int (*init)(unsigned int);
	int (*device_get)(int *, int);
	int (*primary_retain)(void **, int);
	int (*ctx_set_current)(void *);
	int (*mem_alloc)(cu_ptr *, size_t);
	int (*mem_free)(cu_ptr);
	int (*htod)(cu_ptr, const void *, size_t);
	int (*dtoh)(void *, cu_ptr, size_t);
	bool standin;
};
extern struct bench_cu cu;

/* Load TPU_CUDA_DRIVER (else libcuda.so.1), make device 0 current: 0 or -errno. */
int cuda_open(void);
/* Round @round's tensor of @len bytes into @host, and onto @dev when not 0. */
int bench_cuda_fill(uint8_t *host, cu_ptr dev, size_t len, unsigned int round);
/*
 * Bytes of round @round's tensor wrong in @host, or on @dev when not 0
 * (read back through @check); -EIO when the driver cannot read it.
 */
int bench_cuda_count_bad(const uint8_t *host, cu_ptr dev, uint8_t *check, size_t len,
			 unsigned int round);

struct bpair {
	const char *name;
	uint32_t src, dst;
};

struct run {
	const struct bpair *pair;
	const char *chan;		/* the context's channel list */
	const char *xport;
	size_t size;
	unsigned int iters;
};

struct result {
	tpu_status st;
	char chan[32];
	double gbps;		/* median round */
	int bad;		/* bytes the reader found wrong */
	bool standin;		/* the driver was the tests' stand-in */
};

struct wait1 {
	sem_t sem;
	tpu_status st;
	struct tpu_message *msg;
	struct tpu_pipe *pipe;
};

void done_msg(void *arg, tpu_status st, struct tpu_message *m);
void done_pipe(void *arg, tpu_status st, struct tpu_pipe *p);
/* The median of @n round times (sorted in place), as GB/s for @size bytes. */
double bench_cuda_median_gbps(uint64_t *ns, unsigned int n, size_t size);

/*
 * Two hosts (bench_cuda_hosts.c): answer pipes at @url until a writer says
 * goodbye, reading each tensor where its writer suggests and checking it;
 * or measure run @r against such a reader at @url.
 */
int bench_cuda_listen(const char *url, const char *xport);
struct result bench_cuda_connect(const char *url, const struct run *r);
/* Tell the reader at @url to stop. */
tpu_status bench_cuda_goodbye(const char *url, const char *xport);

#endif
