/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* tpbench rdv: the rendezvous API, per implementation (bench_rdv.c). */
#ifndef TP_BENCH_RDV_H
#define TP_BENCH_RDV_H

/* argv[0] is "rdv"; returns the exit status. */
int bench_rdv_main(int argc, char **argv);

#endif
