/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* tpbench pipe: pipes per transport and channel (bench_pipe.c). */
#ifndef TP_BENCH_PIPE_H
#define TP_BENCH_PIPE_H

#include <stddef.h>

#include <tpu_user.h>

/* argv[0] is "pipe"; returns the exit status. */
int bench_pipe_main(int argc, char **argv);

/*
 * The 64-byte round trip of one pipe between two processes (median, us),
 * for tpbench rdv's same-run reference; @negotiated gets "transport/channel".
 */
tpu_status bench_pipe_rtt(const char *xport, const char *chan, unsigned int iters,
			  double *p50_us, char *negotiated, size_t negotiated_len);

#endif
