// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The rendezvous's fast path allocates nothing in steady state: after a
 * warm-up, round trips of the benchmark's shape (A sends "ping/i" and waits
 * for "pong/i", B answers; every key used once) through the inprocess and
 * the cma rendezvous make no heap allocation (alloc_count.c counts them).
 * Ops, key copies, key FIFOs and the implementations' slots come from the
 * rendezvous's free lists.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"
#include "tpu_user.h"

#define WARMUP		200
#define ROUNDS		1000
#define MSG		64
#define WAIT_NS		10000000000ull

struct side {
	struct tpu_rendezvous *rdv;
	unsigned long allocs;	/* during the counted rounds */
	tpu_status st;
};

static tpu_status send_key(struct tpu_rendezvous *rdv, const char *what, unsigned int i,
			   uint8_t *buf)
{
	struct tpu_tensor t = { .data = buf, .len = MSG };
	char key[32];

	snprintf(key, sizeof(key), "%s/%u", what, i);
	return tpu_rendezvous_send_wait(rdv, key, strlen(key), &t, 0, WAIT_NS);
}

static tpu_status recv_key(struct tpu_rendezvous *rdv, const char *what, unsigned int i,
			   uint8_t *buf)
{
	struct tpu_tensor t = { .data = buf, .len = MSG };
	char key[32];

	snprintf(key, sizeof(key), "%s/%u", what, i);
	return tpu_rendezvous_recv_wait(rdv, key, strlen(key), &t, WAIT_NS, NULL);
}

/* A's loop: the allocations of its process during the counted rounds. */
static void *side_a(void *arg)
{
	struct side *s = arg;
	uint8_t buf[MSG] = { 1 };
	unsigned long before = 0;

	for (unsigned int i = 0; i < WARMUP + ROUNDS && !s->st; i++) {
		if (i == WARMUP)
			before = allocs_counted();
		s->st = send_key(s->rdv, "ping", i, buf);
		if (!s->st)
			s->st = recv_key(s->rdv, "pong", i, buf);
	}
	s->allocs = allocs_counted() - before;
	return NULL;
}

static void *side_b(void *arg)
{
	struct side *s = arg;
	uint8_t buf[MSG];
	unsigned long before = 0;

	for (unsigned int i = 0; i < WARMUP + ROUNDS && !s->st; i++) {
		if (i == WARMUP)
			before = allocs_counted();
		s->st = recv_key(s->rdv, "ping", i, buf);
		if (!s->st)
			s->st = send_key(s->rdv, "pong", i, buf);
	}
	s->allocs = allocs_counted() - before;
	return NULL;
}

static struct tpu_context *new_context(void)
{
	struct tpu_context_options o = { .flags = TPU_CTX_NO_KMOD };
	struct tpu_context *ctx = NULL;

	return tpu_context_create(&o, &ctx) ? NULL : ctx;
}

static void inprocess_allocates_nothing(void)
{
	struct tpu_context *ctx = new_context();
	struct side a = { 0 }, b = { 0 };
	pthread_t tb;

	if (!ctx || tpu_rendezvous_create(ctx, TPU_RDV_INPROCESS, &a.rdv)) {
		CHECK(false, "rdv_alloc: inprocess rendezvous created");
		goto out;
	}
	b.rdv = a.rdv;
	if (pthread_create(&tb, NULL, side_b, &b)) {
		CHECK(false, "rdv_alloc: pthread_create");
		goto out;
	}
	side_a(&a);
	pthread_join(tb, NULL);
	/* Both threads' allocations are in A's count (one process). */
	tap_diag("inprocess: %lu allocations in %u round trips", a.allocs, ROUNDS);
	CHECK(!a.st && !b.st && a.allocs == 0,
	      "rdv_alloc: inprocess round trips allocate nothing in steady state (%lu in %u)",
	      a.allocs, ROUNDS);
out:
	if (a.rdv)
		tpu_rendezvous_destroy(a.rdv);
	if (ctx)
		tpu_context_destroy(ctx);
}

static void cma_allocates_nothing(void)
{
	struct tpu_context *ctx = new_context();
	struct side a = { 0 };
	int fd = -1, ws = 0;
	pid_t pid;

	if (!ctx || tpu_rendezvous_create(ctx, TPU_RDV_CMA, &a.rdv) ||
	    tpu_rendezvous_share(a.rdv, &fd)) {
		CHECK(true, "rdv_alloc: cma # SKIP no cma rendezvous here");
		goto out;
	}
	pid = fork();
	if (pid == 0) {
		struct tpu_context *cctx = new_context();
		struct side b = { 0 };

		if (!cctx || tpu_rendezvous_join(cctx, fd, &b.rdv))
			_exit(100);
		side_b(&b);
		tpu_rendezvous_destroy(b.rdv);
		tpu_context_destroy(cctx);
		/* Its own count, as the exit status: 0 is none. */
		_exit(b.st ? 101 : b.allocs > 99 ? 99 : (int)b.allocs);
	}
	side_a(&a);
	if (pid < 0 || waitpid(pid, &ws, 0) != pid)
		ws = -1;
	tap_diag("cma: %lu allocations in %u round trips (the peer: exit %d)", a.allocs, ROUNDS,
		 WIFEXITED(ws) ? WEXITSTATUS(ws) : -1);
	CHECK(!a.st && a.allocs == 0,
	      "rdv_alloc: cma round trips allocate nothing in steady state (%lu in %u)", a.allocs,
	      ROUNDS);
	CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
	      "rdv_alloc: nor do the peer's (a joined member)");
out:
	if (fd >= 0)
		close(fd);
	if (a.rdv)
		tpu_rendezvous_destroy(a.rdv);
	if (ctx)
		tpu_context_destroy(ctx);
}

void test_rdv_alloc(void)
{
	inprocess_allocates_nothing();
	cma_allocates_nothing();
}
