// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * tpu_user.h repeats the ABI's constants so that programs need not find the
 * uapi header; this file makes the build fail the day the two disagree.
 * It produces no code.
 */
#include <assert.h>

#include "dev.h"

#define SAME(a, b) static_assert((a) == (b), #a " must equal " #b)

SAME(TPU_FEAT_REGION_ALLOC, TP_FEAT_REGION_ALLOC);
SAME(TPU_FEAT_DONATE, TP_FEAT_DONATE);
SAME(TPU_FEAT_RECV_TIMEOUT, TP_FEAT_RECV_TIMEOUT);
SAME(TPU_FEAT_LARGE_ALLOC, TP_FEAT_LARGE_ALLOC);
SAME(TPU_FEAT_URING_CMD, TP_FEAT_URING_CMD);
SAME(TPU_FEAT_URING_KERNEL_CANCEL, TP_FEAT_URING_KERNEL_CANCEL);
SAME(TPU_FEAT_DMABUF, TP_FEAT_DMABUF);
SAME(TPU_FEAT_MEMBER_DEATH, TP_FEAT_MEMBER_DEATH);
SAME(TPU_FEAT_GRANT, TP_FEAT_GRANT);
SAME(TPU_ACCESS_READ, TP_ACCESS_READ);
SAME(TPU_ACCESS_WRITE, TP_ACCESS_WRITE);
SAME(TPU_SEND_DONATE, TP_SEND_DONATE);
SAME(TPU_RECV_NONBLOCK, TP_RECV_NONBLOCK);
SAME(TPU_RECV_DONATE, TP_RECV_DONATE);
SAME(TPU_CANCEL_SEND, TP_CANCEL_SEND);
SAME(TPU_CANCEL_RECV, TP_CANCEL_RECV);
SAME(TPU_OP_SEND, TP_OP_SEND);

/* Library codes must never be mistaken for an errno or an abort status. */
static_assert(TPU_E_NO_DEVICE < -TPU_ERRNO_MAX, "library codes lie below the errno range");
static_assert(TPU_E_NO_TRANSPORT < -TPU_ERRNO_MAX, "library codes lie below the errno range");
