/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Load for benchmarks of busy machines (tpbench --hog N): N processes that
 * burn CPU, started before a measurement and killed after it; and the
 * round trip of a plain blocking ping-pong between two processes (a
 * futex in shared memory, no spinning), the reference a hand-off under
 * load is held against.
 */
#ifndef TOOLS_HOG_H
#define TOOLS_HOG_H

#include <sys/types.h>

#define HOG_MAX 64

struct hogs {
	unsigned int n;
	pid_t pid[HOG_MAX];
};

/* Start @n busy processes (at most HOG_MAX); 0 or -errno (none left running). */
int hogs_start(struct hogs *h, unsigned int n);
/* Kill and reap them. */
void hogs_stop(struct hogs *h);

/*
 * Median round trip in microseconds of @iters futex ping-pongs between
 * this process and a forked child; negative -errno on failure.
 */
double futex_pingpong_us(unsigned int iters, double *p99_us);

#endif
