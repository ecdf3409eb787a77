/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* tpbench rdv --remote: the remote rendezvous against its pipe (bench_remote.c). */
#ifndef TP_BENCH_REMOTE_H
#define TP_BENCH_REMOTE_H

#include <tpu_user.h>

#include "bench_pipe.h"

struct json;

struct remote_opts {
	const char *transport;		/* "shm" or "tcp" */
	unsigned int iters;		/* round trips */
	unsigned int bw_iters;		/* transfers per size */
};

struct remote_result {
	char path[32];			/* the workers' pipe: "transport/channel" */
	double rtt_p50_us, rtt_p90_us, rtt_p99_us;
	double gbps[BENCH_PIPE_NSIZES];
	struct pair_result pipe;	/* the reference, same run */
};

tpu_status bench_remote_run(const struct remote_opts *o, struct remote_result *r);
void bench_remote_print(const struct remote_opts *o, const struct remote_result *r);
/* The result as the member "remote" of the object @j is writing. */
void bench_remote_json(const struct remote_opts *o, const struct remote_result *r,
		       struct json *j);

#endif
