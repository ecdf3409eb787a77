/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* tpbench pipe: pipes per transport and channel (bench_pipe.c). */
#ifndef TP_BENCH_PIPE_H
#define TP_BENCH_PIPE_H

#include <stdbool.h>
#include <stddef.h>

#include <tpu_user.h>

/* argv[0] is "pipe"; returns the exit status. */
int bench_pipe_main(int argc, char **argv);
/* --one-context (bench_pipe_one.c): shm/basic with both ends on one context thread. */
int bench_pipe_one_context(unsigned int iters, bool json);

/* The tensor sizes of the bandwidth runs. */
#define BENCH_PIPE_NSIZES	4
extern const size_t bench_pipe_sizes[BENCH_PIPE_NSIZES];

/* One pipe's figures: what it negotiated, its round trip, GB/s per size. */
struct pair_result {
	char xport[8], chan[8];
	double avg_us, p50_us, p90_us, p99_us;
	double gbps[BENCH_PIPE_NSIZES];
};

/*
 * A pipe between two processes over @xport (@chan: the channel, NULL for
 * any), measured as `tpbench pipe` does: the reference of another
 * benchmark's same run.
 */
tpu_status bench_pipe_ref(const char *xport, const char *chan, unsigned int iters,
			  unsigned int bw_iters, struct pair_result *r);

/*
 * The 64-byte round trip of one pipe between two processes (median and
 * 99th percentile, us; @p99_us may be NULL), for tpbench rdv's same-run
 * reference; @negotiated gets "transport/channel".
 */
tpu_status bench_pipe_rtt(const char *xport, const char *chan, unsigned int iters,
			  double *p50_us, double *p99_us, char *negotiated, size_t negotiated_len);

#endif
