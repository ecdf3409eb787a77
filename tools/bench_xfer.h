/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* tpbench xfer: one-sided batched transfers against raw process_vm_readv/writev and memcpy. */
#ifndef TP_BENCH_XFER_H
#define TP_BENCH_XFER_H

int bench_xfer_main(int argc, char **argv);

#endif
