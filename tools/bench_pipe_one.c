// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * tpbench pipe --one-context: both ends of one shm pipe on a single
 * context, driven from their callbacks, so one thread runs the whole round
 * trip (write, descriptor, read, reply) with nothing to wait for.  The
 * context thread's CPU time per round trip is then what the library's
 * software costs, whatever else runs on the machine: a figure that a busy
 * host does not blur, unlike the round trip between two processes.
 */
#include <errno.h>
#include <semaphore.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <tpu_user.h>

#include "bench_pipe.h"

#define ONE_LEN		64
#define ONE_WARMUP	1000u

struct one_end {
	struct tpu_pipe *pipe;
	uint8_t in[ONE_LEN], out[ONE_LEN];
	struct tpu_payload pl;
	struct tpu_message msg;
	bool answers;
};

struct one_run {
	struct one_end a, b;
	unsigned int left, done;
	struct timespec cpu0, cpu1, wall0, wall1;
	tpu_status err;
	sem_t over;
};

static struct one_run one;	/* one run at a time: tpbench is single-threaded */

static void one_next(struct one_end *e);

static void one_fail(tpu_status st)
{
	if (!one.err)
		one.err = st;
	sem_post(&one.over);
}

static void one_written(void *arg, tpu_status st, struct tpu_message *m)
{
	(void)arg;
	(void)m;
	if (st)
		one_fail(st);
}

static void one_send(struct one_end *e)
{
	e->pl = (struct tpu_payload){ .data = e->out, .len = ONE_LEN };
	e->msg = (struct tpu_message){ .payloads = &e->pl, .npayloads = 1 };
	if (tpu_pipe_write(e->pipe, &e->msg, one_written, e))
		one_fail(-EIO);
}

static void one_read(void *arg, tpu_status st, struct tpu_message *m)
{
	struct one_end *e = arg;
	struct one_run *r = &one;

	(void)m;
	if (st) {
		one_fail(st);
		return;
	}
	if (!e->answers) {
		r->done++;
		if (r->done == ONE_WARMUP) {
			clock_gettime(CLOCK_THREAD_CPUTIME_ID, &r->cpu0);
			clock_gettime(CLOCK_MONOTONIC, &r->wall0);
		} else if (r->done == ONE_WARMUP + r->left) {
			clock_gettime(CLOCK_THREAD_CPUTIME_ID, &r->cpu1);
			clock_gettime(CLOCK_MONOTONIC, &r->wall1);
			sem_post(&r->over);
			return;
		}
	}
	one_next(e);
	one_send(e);
}

static void one_desc(void *arg, tpu_status st, struct tpu_message *m)
{
	struct one_end *e = arg;

	if (st) {
		one_fail(st);
		return;
	}
	if (m->npayloads != 1 || m->ntensors || m->payloads[0].len != ONE_LEN) {
		one_fail(-EPROTO);
		return;
	}
	m->payloads[0].data = e->in;
	if (tpu_pipe_read(e->pipe, m, one_read, e))
		one_fail(-EIO);
}

static void one_next(struct one_end *e)
{
	if (tpu_pipe_read_descriptor(e->pipe, one_desc, e))
		one_fail(-EIO);
}

static void one_accepted(void *arg, tpu_status st, struct tpu_pipe *p)
{
	(void)arg;
	if (st) {
		one_fail(st);
		return;
	}
	one.b.pipe = p;
	sem_post(&one.over);
}

static double ns_between(const struct timespec *a, const struct timespec *b)
{
	return (double)(b->tv_sec - a->tv_sec) * 1e9 + (double)(b->tv_nsec - a->tv_nsec);
}

int bench_pipe_one_context(unsigned int iters, bool json)
{
	struct tpu_context_options o = { .transports = "shm", .channels = "basic" };
	struct tpu_context *ctx = NULL;
	struct tpu_listener *l = NULL;
	char name[64], url[300];
	const char *u = name;
	tpu_status st;

	memset(&one, 0, sizeof(one));
	one.left = iters;
	one.b.answers = true;
	sem_init(&one.over, 0, 0);
	snprintf(name, sizeof(name), "shm://tpbench-one-%d", (int)getpid());
	st = tpu_context_create(&o, &ctx);
	if (!st)
		st = tpu_listener_create(ctx, &u, 1, &l);
	if (!st)
		st = tpu_listener_url(l, NULL, url, sizeof(url));
	if (!st)
		st = tpu_listener_accept(l, one_accepted, NULL);
	if (!st)
		st = tpu_pipe_connect(ctx, url, &one.a.pipe);
	if (!st) {
		sem_wait(&one.over);	/* accepted */
		st = one.err;
	}
	if (!st) {
		one_next(&one.b);
		one_next(&one.a);
		one_send(&one.a);
		sem_wait(&one.over);
		st = one.err;
	}
	if (!st) {
		double cpu = ns_between(&one.cpu0, &one.cpu1) / iters;
		double wall = ns_between(&one.wall0, &one.wall1) / iters;

		if (json)
			printf("{\"bench\":\"pipe_one_context\",\"transport\":\"shm\",\"channel\":"
			       "\"basic\",\"iters\":%u,\"cpu_ns_per_rtt\":%.1f,"
			       "\"wall_ns_per_rtt\":%.1f}\n", iters, cpu, wall);
		else
			printf("shm/basic, both ends on one context: %.1f ns of CPU and %.1f ns of "
			       "wall clock per 64-byte round trip (%u round trips)\n", cpu, wall,
			       iters);
	} else {
		fprintf(stderr, "tpbench pipe --one-context: %s\n", tpu_strerror(st));
	}
	tpu_pipe_close(one.a.pipe);
	tpu_pipe_close(one.b.pipe);
	tpu_listener_close(l);
	tpu_context_destroy(ctx);
	sem_destroy(&one.over);
	return st ? 1 : 0;
}
