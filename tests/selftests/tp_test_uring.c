// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Selftest helpers: IORING_OP_URING_CMD submission and CQE collection.
 */
#include "tp_test_uring.h"

#include <errno.h>
#include <string.h>

int tpt_ring_init(struct io_uring *ring, unsigned int entries,
		  unsigned int flags)
{
	memset(ring, 0, sizeof(*ring));
	return io_uring_queue_init(entries, ring, flags);
}

int tpt_uring_prep(struct io_uring *ring, int fd, uint32_t cmd_op,
		   const void *arg, size_t len, uint64_t user_data,
		   uint8_t sqe_flags)
{
	bool big = ring->flags & IORING_SETUP_SQE128;
	size_t sqe_size = big ? 2 * sizeof(struct io_uring_sqe) :
			  sizeof(struct io_uring_sqe);
	/* Without SQE128 the command area is the last 16 bytes. */
	size_t room = big ? TPT_SQE128_CMD_BYTES : 16;
	struct io_uring_sqe *sqe;

	if (len > room)
		len = room;
	sqe = io_uring_get_sqe(ring);
	if (!sqe)
		return -EBUSY;
	memset(sqe, 0, sqe_size);
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = fd;
	sqe->flags = sqe_flags;
	sqe->cmd_op = cmd_op;
	sqe->user_data = user_data;
	if (len)
		memcpy(sqe->cmd, arg, len);
	return 0;
}

int tpt_uring_submit(struct io_uring *ring)
{
	int ret;

	do {
		ret = io_uring_submit(ring);
	} while (ret == -EINTR);
	return ret;
}

int tpt_uring_cmd(struct io_uring *ring, int fd, uint32_t cmd_op,
		  const void *arg, size_t len, uint64_t user_data)
{
	int ret = tpt_uring_prep(ring, fd, cmd_op, arg, len, user_data, 0);

	if (ret)
		return ret;
	ret = tpt_uring_submit(ring);
	if (ret < 0)
		return ret;
	return ret == 1 ? 0 : -EIO;
}

int tpt_uring_send(struct io_uring *ring, int fd, const struct tp_send *s,
		   uint64_t user_data)
{
	return tpt_uring_cmd(ring, fd, TP_IOC_SEND, s, sizeof(*s), user_data);
}

int tpt_uring_recv(struct io_uring *ring, int fd, const struct tp_recv *r,
		   uint64_t user_data)
{
	return tpt_uring_cmd(ring, fd, TP_IOC_RECV, r, sizeof(*r), user_data);
}

int tpt_uring_cancel(struct io_uring *ring, int fd, const struct tp_cancel *c,
		     uint64_t user_data)
{
	return tpt_uring_cmd(ring, fd, TP_IOC_CANCEL, c, sizeof(*c),
			     user_data);
}

static void take_cqe(struct io_uring *ring, struct io_uring_cqe *cqe,
		     struct tpt_cqe *out)
{
	memset(out, 0, sizeof(*out));
	out->user_data = cqe->user_data;
	out->res = cqe->res;
	out->flags = cqe->flags;
	if (ring->flags & IORING_SETUP_CQE32) {
		out->extra1 = cqe->big_cqe[0];
		out->extra2 = cqe->big_cqe[1];
	}
	io_uring_cqe_seen(ring, cqe);
}

int tpt_uring_peek(struct io_uring *ring, struct tpt_cqe *out)
{
	struct io_uring_cqe *cqe = NULL;
	int ret = io_uring_peek_cqe(ring, &cqe);

	if (ret)
		return ret;
	take_cqe(ring, cqe, out);
	return 0;
}

int tpt_uring_wait(struct io_uring *ring, struct tpt_cqe *out, int timeout_ms)
{
	uint64_t deadline = tpt_now_ns() + timeout_ms * TPT_NSEC_PER_MSEC;

	for (;;) {
		struct io_uring_cqe *cqe = NULL;
		uint64_t now = tpt_now_ns();
		uint64_t left = now < deadline ? deadline - now : 0;
		struct __kernel_timespec ts = {
			.tv_sec = left / TPT_NSEC_PER_SEC,
			.tv_nsec = left % TPT_NSEC_PER_SEC,
		};
		int ret = io_uring_wait_cqe_timeout(ring, &cqe, &ts);

		if (ret == 0 && cqe) {
			take_cqe(ring, cqe, out);
			return 0;
		}
		if (ret == -ETIME || (ret == 0 && !left))
			return -ETIMEDOUT;
		if (ret && ret != -EINTR && ret != -EAGAIN)
			return ret;
		if (!left)
			return -ETIMEDOUT;
	}
}

int tpt_uring_wait_n(struct io_uring *ring, struct tpt_cqe *out, int n,
		     int timeout_ms)
{
	uint64_t deadline = tpt_now_ns() + timeout_ms * TPT_NSEC_PER_MSEC;
	int got = 0;

	while (got < n) {
		uint64_t now = tpt_now_ns();
		int left_ms = now < deadline ?
			      (int)((deadline - now) / TPT_NSEC_PER_MSEC) : 0;

		if (tpt_uring_wait(ring, &out[got], left_ms))
			break;
		got++;
	}
	return got;
}

int tpt_uring_quiet(struct io_uring *ring, int ms, struct tpt_cqe *out)
{
	struct tpt_cqe tmp;
	int ret = tpt_uring_wait(ring, out ? out : &tmp, ms);

	if (ret == -ETIMEDOUT)
		return 0;
	return ret ? ret : 1;
}
