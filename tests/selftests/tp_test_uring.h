/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * io_uring helpers for the selftests of SEND, RECV and CANCEL submitted as
 * IORING_OP_URING_CMD, implemented in tp_test_uring.c on liburing.
 *
 * liburing 2.3 has no uring_cmd prep helper, so tpt_uring_prep() fills the
 * SQE by hand: the ioctl number in cmd_op and the command struct in the
 * SQE128 command area.  Like tp_test_util.h, nothing here includes the
 * harness; helpers return 0 (or a count) or a negative errno.
 */
#ifndef TP_TEST_URING_H
#define TP_TEST_URING_H

#include <liburing.h>
#include <stddef.h>
#include <stdint.h>

#include "tp_test_util.h"

/* The ring every test uses unless it checks the ring flags themselves. */
#define TPT_RING_FLAGS		(IORING_SETUP_SQE128 | IORING_SETUP_CQE32)

/* Bytes of command area in a 128-byte SQE. */
#define TPT_SQE128_CMD_BYTES	80

/* One CQE, copied out of the ring (extra words are 0 without CQE32). */
struct tpt_cqe {
	uint64_t user_data;
	int32_t res;
	uint32_t flags;
	uint64_t extra1;
	uint64_t extra2;
};

int tpt_ring_init(struct io_uring *ring, unsigned int entries,
		  unsigned int flags);

/*
 * Queue one IORING_OP_URING_CMD: @cmd_op on @fd with @len bytes of @arg
 * in the command area (at most what the ring's SQEs hold), @sqe_flags
 * (IOSQE_*).  Not submitted yet.  Returns 0 or -EBUSY (SQ ring full).
 */
int tpt_uring_prep(struct io_uring *ring, int fd, uint32_t cmd_op,
		   const void *arg, size_t len, uint64_t user_data,
		   uint8_t sqe_flags);
/* Submit what is queued; returns how many were submitted, or -errno. */
int tpt_uring_submit(struct io_uring *ring);

/* Queue and submit one command; returns 0 or -errno. */
int tpt_uring_cmd(struct io_uring *ring, int fd, uint32_t cmd_op,
		  const void *arg, size_t len, uint64_t user_data);
int tpt_uring_send(struct io_uring *ring, int fd, const struct tp_send *s,
		   uint64_t user_data);
int tpt_uring_recv(struct io_uring *ring, int fd, const struct tp_recv *r,
		   uint64_t user_data);
int tpt_uring_cancel(struct io_uring *ring, int fd, const struct tp_cancel *c,
		     uint64_t user_data);

/*
 * Take one CQE: tpt_uring_peek() without entering the kernel (-EAGAIN if
 * none is there), tpt_uring_wait() waiting up to @timeout_ms (-ETIMEDOUT).
 * Entering the kernel also runs pending task work, which is where the
 * module completes most commands.
 */
int tpt_uring_peek(struct io_uring *ring, struct tpt_cqe *out);
int tpt_uring_wait(struct io_uring *ring, struct tpt_cqe *out, int timeout_ms);
/* Collect up to @n CQEs within @timeout_ms in all; returns how many. */
int tpt_uring_wait_n(struct io_uring *ring, struct tpt_cqe *out, int n,
		     int timeout_ms);
/* 0 when no CQE arrives within @ms; 1 (and the CQE in @out) when one does. */
int tpt_uring_quiet(struct io_uring *ring, int ms, struct tpt_cqe *out);

#endif /* TP_TEST_URING_H */
