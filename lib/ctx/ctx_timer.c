// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Timers for implementations that must time out a wait themselves (the
 * module times out its own RECVs): an IORING_OP_TIMEOUT on the context's
 * ring, so that no thread sleeps per timer.
 */
#include <liburing.h>
#include <stdint.h>

#include "ctx.h"

static void timer_fired(void *arg, const struct io_uring_cqe *cqe)
{
	struct tpu__timer *t = arg;

	/* -ETIME is the normal expiry of a pure timeout. */
	t->fn(t->arg, cqe->res == -ETIME ? 0 : -ECANCELED);
}

static void timer_removed(void *arg, const struct io_uring_cqe *cqe)
{
	(void)arg;
	(void)cqe;
}

tpu_status tpu__ctx_timer_start(struct tpu_context *ctx, struct tpu__timer *t, uint64_t ns)
{
	struct io_uring_sqe *sqe;

	t->ts[0] = (int64_t)(ns / 1000000000u);
	t->ts[1] = (int64_t)(ns % 1000000000u);
	sqe = tpu__ctx_sqe(ctx, timer_fired, t);
	if (!sqe)
		return -ENOMEM;
	io_uring_prep_timeout(sqe, (struct __kernel_timespec *)t->ts, 0, 0);
	t->user_data = sqe->user_data;
	return tpu__ctx_submit(ctx);
}

void tpu__ctx_timer_cancel(struct tpu_context *ctx, struct tpu__timer *t)
{
	struct io_uring_sqe *sqe = tpu__ctx_sqe(ctx, timer_removed, NULL);

	/* Without memory the timer simply runs out; its handler copes with that. */
	if (!sqe)
		return;
	io_uring_prep_timeout_remove(sqe, t->user_data, 0);
	tpu__ctx_submit(ctx);
}
