// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The pipe's steady path allocates nothing: after a warm-up, ping-pongs of
 * small messages over one shm/basic pipe (both ends on one context, driven
 * from their callbacks, as tpbench pipe --one-context does) make no heap
 * allocation (alloc_count.c counts them).  Write and read blocks, frame
 * buffers and bodies come from the pipe's caches (pipe_write.c,
 * pipe_read.c); the shm transport's ops from the connection's.  Checked
 * for a one-payload message and for one with a small (inline) tensor.
 */
#include <errno.h>
#include <semaphore.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tap.h"
#include "tpu_user.h"

#define WARMUP	200u
#define ROUNDS	1000u
#define LEN	64

struct end {
	struct tpu_pipe *pipe;
	uint8_t in[LEN], out[LEN];
	struct tpu_payload pl;
	struct tpu_message_tensor t;
	struct tpu_message msg;
	bool answers;
};

static struct {
	struct end a, b;
	bool tensor;		/* send the bytes as one tensor instead of a payload */
	unsigned int done;
	unsigned long before, allocs;
	tpu_status err;
	sem_t over;
} run;

static void next(struct end *e);

static void fail(tpu_status st)
{
	if (!run.err) {
		run.err = st;
		sem_post(&run.over);
	}
}

static void written(void *arg, tpu_status st, struct tpu_message *m)
{
	(void)arg;
	(void)m;
	if (st)
		fail(st);
}

static void send_one(struct end *e)
{
	if (run.tensor) {
		e->t = (struct tpu_message_tensor){ .data = e->out, .len = LEN };
		e->msg = (struct tpu_message){ .tensors = &e->t, .ntensors = 1 };
	} else {
		e->pl = (struct tpu_payload){ .data = e->out, .len = LEN };
		e->msg = (struct tpu_message){ .payloads = &e->pl, .npayloads = 1 };
	}
	if (tpu_pipe_write(e->pipe, &e->msg, written, e))
		fail(-EIO);
}

static void read_done(void *arg, tpu_status st, struct tpu_message *m)
{
	struct end *e = arg;

	(void)m;
	if (st) {
		fail(st);
		return;
	}
	if (!e->answers) {
		run.done++;
		if (run.done == WARMUP) {
			run.before = allocs_counted();
		} else if (run.done == WARMUP + ROUNDS) {
			run.allocs = allocs_counted() - run.before;
			sem_post(&run.over);
			return;
		}
	}
	next(e);
	send_one(e);
}

static void desc_done(void *arg, tpu_status st, struct tpu_message *m)
{
	struct end *e = arg;

	if (st) {
		fail(st);
		return;
	}
	if (run.tensor ? m->ntensors != 1 || m->npayloads || m->tensors[0].len != LEN
		       : m->npayloads != 1 || m->ntensors || m->payloads[0].len != LEN) {
		fail(-EPROTO);
		return;
	}
	if (run.tensor)
		m->tensors[0].data = e->in;
	else
		m->payloads[0].data = e->in;
	if (tpu_pipe_read(e->pipe, m, read_done, e))
		fail(-EIO);
}

static void next(struct end *e)
{
	if (tpu_pipe_read_descriptor(e->pipe, desc_done, e))
		fail(-EIO);
}

static void accepted(void *arg, tpu_status st, struct tpu_pipe *p)
{
	(void)arg;
	if (st)
		fail(st);
	else
		run.b.pipe = p;
	sem_post(&run.over);
}

static tpu_status wait_over(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 30;
	while (sem_timedwait(&run.over, &ts))
		if (errno != EINTR)
			return -ETIMEDOUT;
	return run.err;
}

static void ping_pong(bool tensor, const char *what)
{
	struct tpu_context_options o = { .transports = "shm", .channels = "basic",
					 .flags = TPU_CTX_NO_KMOD };
	struct tpu_context *ctx = NULL;
	struct tpu_listener *l = NULL;
	char name[64], url[300];
	const char *u = name;
	tpu_status st;

	memset(&run, 0, sizeof(run));
	run.tensor = tensor;
	run.b.answers = true;
	sem_init(&run.over, 0, 0);
	snprintf(name, sizeof(name), "shm://pipe-alloc-%d-%d", (int)getpid(), (int)tensor);
	st = tpu_context_create(&o, &ctx);
	if (!st)
		st = tpu_listener_create(ctx, &u, 1, &l);
	if (!st)
		st = tpu_listener_url(l, NULL, url, sizeof(url));
	if (!st)
		st = tpu_listener_accept(l, accepted, NULL);
	if (!st)
		st = tpu_pipe_connect(ctx, url, &run.a.pipe);
	if (!st)
		st = wait_over();	/* accepted */
	if (!st) {
		next(&run.b);
		next(&run.a);
		send_one(&run.a);
		st = wait_over();
	}
	tap_diag("pipe_alloc: %s: %lu allocations in %u round trips", what, run.allocs, ROUNDS);
	CHECK(!st && run.allocs == 0,
	      "pipe_alloc: %s round trips over shm allocate nothing in steady state "
	      "(status %d, %lu allocations in %u)", what, st, run.allocs, ROUNDS);
	if (run.a.pipe)
		tpu_pipe_close(run.a.pipe);
	if (run.b.pipe)
		tpu_pipe_close(run.b.pipe);
	if (l)
		tpu_listener_close(l);
	if (ctx)
		tpu_context_destroy(ctx);
	sem_destroy(&run.over);
}

void test_pipe_alloc(void)
{
	ping_pong(false, "one-payload");
	ping_pong(true, "one-tensor");
}
