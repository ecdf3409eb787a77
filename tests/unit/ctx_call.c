// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* Running a function on a context's thread: see ctx_call.h. */
#include <stdatomic.h>
#include <stdbool.h>

#include "ctx_call.h"
#include "rdv_internal.h"

struct call {
	struct tpu__task task;
	void (*fn)(void *arg);
	void *arg;
	atomic_bool done;
};

static void call_task(struct tpu__task *t)
{
	struct call *c = (struct call *)t;

	c->fn(c->arg);
	atomic_store(&c->done, true);
}

static bool call_done(void *arg)
{
	return atomic_load(&((struct call *)arg)->done);
}

void on_ctx(struct tpu_context *ctx, void (*fn)(void *arg), void *arg)
{
	struct call c = { .fn = fn, .arg = arg };

	c.task.fn = call_task;
	atomic_init(&c.done, false);
	tpu__ctx_defer(ctx, &c.task);
	tpu__ctx_wait(ctx, call_done, &c);
}
