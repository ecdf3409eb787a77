/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* tpbench pipe: pipes per transport and channel (bench_pipe.c). */
#ifndef TP_BENCH_PIPE_H
#define TP_BENCH_PIPE_H

/* argv[0] is "pipe"; returns the exit status. */
int bench_pipe_main(int argc, char **argv);

#endif
