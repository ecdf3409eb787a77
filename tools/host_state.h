/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The state of the host beside a benchmark: its 1-minute load and the
 * round trip of one cache line between two CPUs this process may use.
 *
 * On a shared or virtual host the cross-CPU round trip moves by an order of
 * magnitude for seconds to minutes (about 60 ns in one mode and 235 to
 * 1800 ns in the other here), and every figure that crosses CPUs moves
 * with it.  Printing it before and after each run says which mode a run
 * was measured in, so that old and new builds are compared only between
 * runs of the same mode.
 */
#ifndef TOOLS_HOST_STATE_H
#define TOOLS_HOST_STATE_H

#include <stdbool.h>
#include <stdio.h>

struct json;

struct host_state {
	double load1;			/* 1-minute load average; < 0 unknown */
	int cpu_a, cpu_b;		/* the two CPUs the line travelled between */
	double line_rtt_ns;		/* median round trip; < 0 when not measured */
	double line_rtt_max_ns;		/* the slowest batch's round trip */
	char why[96];			/* why not measured, when line_rtt_ns < 0 */
};

/*
 * Sample the load and ping one cache line between the first two CPUs of
 * this process's affinity mask (a forked child on one, this thread on the
 * other; both spin).  Bounded by about 200 ms even when the partner never
 * runs.  This thread's affinity is restored before it returns.
 */
void host_state_sample(struct host_state *s);

/* One line: "host: ... before, ... after" (@after may be NULL). */
void host_state_print(FILE *f, const struct host_state *before, const struct host_state *after);

/* Members "host_before" and "host_after" of the current object; "host" alone without @after. */
void host_state_json(struct json *j, const struct host_state *before,
		     const struct host_state *after);

/* "tpbench host": sample and print, nothing else. */
int bench_host_main(int argc, char **argv);

#endif
