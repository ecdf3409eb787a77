/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* tpbench uring: io_uring commands against the ioctls (bench_uring.c). */
#ifndef TP_BENCH_URING_H
#define TP_BENCH_URING_H

/* argv[0] is "uring"; returns the exit status. */
int bench_uring_main(int argc, char **argv);

#endif
