/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* tpbench coll: collectives between forked workers (bench_coll.c). */
#ifndef TP_BENCH_COLL_H
#define TP_BENCH_COLL_H

int bench_coll_main(int argc, char **argv);

#endif
