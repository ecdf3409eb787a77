// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Lending a waiting thread to a context (lib/ctx, tpu__ctx_lend_*), which
 * the remote rendezvous's blocked receives do: only while the context's
 * thread sleeps, one thread at a time, the lent thread runs the deferred
 * work and passes as the context's thread; what needs the ring (a timer)
 * waits for the context's own thread, which is woken when the lender gives
 * the context back; a run_sync whose task a lender ran returns.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <unistd.h>

#include <tpu_user.h>

#include "ctx/ctx.h"
#include "tap.h"

#define SECOND_US	1000000

struct probe {
	struct tpu__task task;
	struct tpu_context *ctx;
	pthread_t ran_on;
	atomic_bool ran;
	bool on_thread;		/* tpu__ctx_on_thread() where it ran */
};

static void probe_run(struct tpu__task *t)
{
	struct probe *p = tpu__container_of(t, struct probe, task);

	p->ran_on = pthread_self();
	p->on_thread = tpu__ctx_on_thread(p->ctx);
	atomic_store(&p->ran, true);
}

static void probe_init(struct probe *p, struct tpu_context *ctx)
{
	p->task.fn = probe_run;
	p->ctx = ctx;
	p->on_thread = false;
	atomic_init(&p->ran, false);
}

/* Poll @flag for up to a second. */
static bool wait_flag(atomic_bool *flag)
{
	for (int i = 0; i < SECOND_US / 1000 && !atomic_load(flag); i++)
		usleep(1000);
	return atomic_load(flag);
}

/* Lend this thread as soon as the context's thread sleeps (within a second). */
static bool lend(struct tpu_context *ctx)
{
	for (int i = 0; i < SECOND_US / 1000; i++) {
		if (tpu__ctx_lend_begin(ctx))
			return true;
		usleep(1000);
	}
	return false;
}

struct other {
	struct tpu_context *ctx;
	bool lent;
	atomic_bool synced;
};

static void *try_lend(void *arg)
{
	struct other *o = arg;

	o->lent = tpu__ctx_lend_begin(o->ctx);
	if (o->lent)
		tpu__ctx_lend_end(o->ctx, false);
	return NULL;
}

struct timer_probe {
	struct tpu__timer timer;
	pthread_t fired_on;
	tpu_status status;
	atomic_bool fired;
};

static void timer_fired(void *arg, tpu_status status)
{
	struct timer_probe *tp = arg;

	tp->fired_on = pthread_self();
	tp->status = status;
	atomic_store(&tp->fired, true);
}

static void mark(void *arg)
{
	atomic_store((atomic_bool *)arg, true);
}

static void *run_sync_thread(void *arg)
{
	struct other *o = arg;
	atomic_bool ran;

	atomic_init(&ran, false);
	tpu__ctx_run_sync(o->ctx, mark, &ran);
	o->lent = atomic_load(&ran);
	atomic_store(&o->synced, true);
	return NULL;
}

void test_ctx_lend(void)
{
	struct tpu_context_options co = { .flags = TPU_CTX_NO_KMOD };
	struct tpu_context *ctx = NULL;
	struct timer_probe tp = { .timer = { .fn = timer_fired, .arg = &tp } };
	struct other o = { 0 };
	struct probe p;
	pthread_t th;
	bool got;

	CHECK_STATUS(tpu_context_create(&co, &ctx), 0, "ctx lend: a context");
	if (!ctx)
		return;
	atomic_init(&tp.fired, false);
	probe_init(&p, ctx);

	got = lend(ctx);
	CHECK(got, "ctx lend: a thread is lent to a context whose thread sleeps");
	if (!got) {
		tpu_context_destroy(ctx);
		return;
	}
	CHECK(tpu__ctx_on_thread(ctx), "ctx lend: the lent thread passes as the context's");
	CHECK(!tpu__ctx_lend_begin(ctx), "ctx lend: not twice on one thread");
	o.ctx = ctx;
	pthread_create(&th, NULL, try_lend, &o);
	pthread_join(th, NULL);
	CHECK(!o.lent, "ctx lend: a second thread is refused while one is lent");

	/* Deferred work runs on the lent thread, unannounced. */
	tpu__ctx_defer_quiet(ctx, &p.task);
	CHECK(tpu__ctx_lend_work(ctx) && atomic_load(&p.ran), "ctx lend: lend_work runs deferred work");
	CHECK(pthread_equal(p.ran_on, pthread_self()) && p.on_thread,
	      "ctx lend: on the lent thread, which is the context's meanwhile");

	/* A timer needs the ring: it waits for the context's own thread. */
	CHECK_STATUS(tpu__ctx_timer_start(ctx, &tp.timer, 1000000), 0,
		     "ctx lend: a timer started on the lent thread");
	usleep(20000);
	tpu__ctx_lend_work(ctx);
	CHECK(!atomic_load(&tp.fired), "ctx lend: its SQE waits for the context's thread");
	tpu__ctx_lend_end(ctx, false);
	CHECK(!tpu__ctx_on_thread(ctx), "ctx lend: given back, the thread is its own again");
	CHECK(wait_flag(&tp.fired) && tp.status == 0 && !pthread_equal(tp.fired_on, pthread_self()),
	      "ctx lend: the timer fires on the context's thread once given back");

	/* Given back expecting to come back: quiet work still runs once kicked. */
	got = lend(ctx);
	CHECK(got, "ctx lend: lent again");
	if (got)
		tpu__ctx_lend_end(ctx, true);
	probe_init(&p, ctx);
	tpu__ctx_defer_quiet(ctx, &p.task);
	tpu__ctx_kick(ctx);
	CHECK(wait_flag(&p.ran) && !pthread_equal(p.ran_on, pthread_self()) && p.on_thread,
	      "ctx lend: a quiet deferral runs on the context's thread when kicked");

	/* run_sync from another thread while lent: the lender runs it, the caller returns. */
	got = lend(ctx);
	CHECK(got, "ctx lend: lent for a run_sync");
	if (got) {
		atomic_init(&o.synced, false);
		o.lent = false;
		pthread_create(&th, NULL, run_sync_thread, &o);
		for (int i = 0; i < SECOND_US / 1000; i++) {
			tpu__ctx_lend_work(ctx);
			usleep(1000);
		}
		tpu__ctx_lend_end(ctx, false);
		CHECK(wait_flag(&o.synced) && o.lent,
		      "ctx lend: a run_sync whose task the lender ran returns");
		pthread_join(th, NULL);
	}
	tpu_context_destroy(ctx);
}
