// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* Completions: the producer learns its source buffer is free again. */
#include <poll.h>
#include <unistd.h>

#include "dev.h"

/* Records read per read(2); a stack array keeps the call allocation-free. */
#define BATCH 64

/*
 * The descriptor stays blocking (RECV has its own NONBLOCK flag, and other
 * users of the fd may expect blocking reads), so waiting is done by poll()
 * and read() only follows readiness.
 */
static tpu_status wait_readable(int fd, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int n = poll(&p, 1, timeout_ms);

	if (n < 0)
		return tpu__errno();
	if (n == 0)
		return timeout_ms == 0 ? -EAGAIN : -ETIMEDOUT;
	return 0;
}

TPU_API tpu_status tpu_completions_read(struct tpu_endpoint *ep, struct tpu_completion *out,
					size_t max, int timeout_ms, size_t *count)
{
	struct tp_completion buf[BATCH];
	size_t want, i, got;
	ssize_t n;
	tpu_status st;

	if (!ep || !out || !count || max == 0 || timeout_ms < -1)
		return -EINVAL;
	*count = 0;
	st = wait_readable(ep->fd, timeout_ms);
	if (st)
		return st;
	want = max < BATCH ? max : BATCH;
	n = read(ep->fd, buf, want * sizeof(buf[0]));
	if (n < 0)
		return tpu__errno();
	got = (size_t)n / sizeof(buf[0]);
	for (i = 0; i < got; i++) {
		out[i].user_data = buf[i].user_data;
		out[i].status = buf[i].status;
		out[i].op = buf[i].op;
		out[i].len = buf[i].len;
	}
	*count = got;
	return got ? 0 : -EIO;
}
