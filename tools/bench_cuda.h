/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* tpbench cuda: CUDA tensors through pipes, per device pair and channel. */
#ifndef TOOLS_BENCH_CUDA_H
#define TOOLS_BENCH_CUDA_H

int bench_cuda_main(int argc, char **argv);

#endif
