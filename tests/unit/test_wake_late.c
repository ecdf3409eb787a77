// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Late wake-ups between threads bound to one core (lib/base/waitword.h):
 * a consumer that takes the tensor of a producer asleep in
 * tpu_rendezvous_send_wait (inprocess) owes it the wake-up until it next
 * sleeps or sends, so that the producer, woken there, finds the answer
 * instead of preempting the consumer to find nothing.  The producer still
 * learns within TPU__WW_LATE_BOUND_NS whatever the consumer does, and at
 * once after an asynchronous receive.
 *
 * Each case runs in a child bound to one CPU, so that the binding leaves
 * the other lists alone; bit k of the child's exit status is check k
 * failed.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <tpu_user.h>

#include "tap.h"
#include "waitword.h"

#define ROUNDS		500
#define WAIT_NS		5000000000ull
/* What the slowest check allows past the bound: a loaded machine's delays. */
#define SLACK_NS	150000000ull

struct pair {
	struct tpu_context *ctx;
	struct tpu_rendezvous *rdv;
};

static int pair_open(struct pair *p)
{
	memset(p, 0, sizeof(*p));
	if (tpu_context_create(NULL, &p->ctx))
		return -1;
	if (tpu_rendezvous_create(p->ctx, TPU_RDV_INPROCESS, &p->rdv)) {
		tpu_context_destroy(p->ctx);
		return -1;
	}
	return 0;
}

static void pair_close(struct pair *p)
{
	tpu_rendezvous_destroy(p->rdv);
	tpu_context_destroy(p->ctx);
}

/* This thread's context switches so far, voluntary and not. */
static uint64_t switches(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_THREAD, &ru))
		return UINT64_MAX / 4;
	return (uint64_t)ru.ru_nvcsw + (uint64_t)ru.ru_nivcsw;
}

static tpu_status send_u32(struct pair *p, const char *key, uint32_t v)
{
	struct tpu_tensor t = { .data = &v, .len = sizeof(v) };

	return tpu_rendezvous_send_wait(p->rdv, key, strlen(key), &t, 0, WAIT_NS);
}

static tpu_status recv_u32(struct pair *p, const char *key, uint32_t *v)
{
	struct tpu_tensor t = { .data = v, .len = sizeof(*v) };

	return tpu_rendezvous_recv_wait(p->rdv, key, strlen(key), &t, WAIT_NS, NULL);
}

struct answerer {
	struct pair *p;
	bool bad;
	uint64_t switches;
};

/* B: answer ping i with i + 1 under pong i. */
static void *answer(void *arg)
{
	struct answerer *a = arg;
	uint64_t before = switches();
	char key[32];

	for (uint32_t i = 0; i < ROUNDS && !a->bad; i++) {
		uint32_t v = 0;

		snprintf(key, sizeof(key), "ping/%u", i);
		a->bad = recv_u32(a->p, key, &v) || v != i;
		snprintf(key, sizeof(key), "pong/%u", i);
		if (!a->bad)
			a->bad = send_u32(a->p, key, i + 1) != 0;
	}
	a->switches = switches() - before;
	return NULL;
}

/*
 * ROUNDS round trips of blocking sends and receives between two threads
 * of the one core: every answer right, some wake-ups owed, and at most
 * two context switches per round trip on the producer's side (a futex
 * ping-pong takes one; each woken producer preempting its consumer took
 * 2.7).
 */
static int ping_pong_checks(void)
{
	struct pair p;
	struct answerer a = { .p = &p };
	uint64_t owed = tpu__waitword_deferred(), mine;
	pthread_t t;
	char key[32];
	int fails = 0;
	bool bad = false;

	if (pair_open(&p))
		return 1;
	if (pthread_create(&t, NULL, answer, &a)) {
		pair_close(&p);
		return 1;
	}
	mine = switches();
	for (uint32_t i = 0; i < ROUNDS && !bad; i++) {
		uint32_t v = 0;

		snprintf(key, sizeof(key), "ping/%u", i);
		bad = send_u32(&p, key, i) != 0;
		snprintf(key, sizeof(key), "pong/%u", i);
		if (!bad)
			bad = recv_u32(&p, key, &v) || v != i + 1;
	}
	mine = switches() - mine;
	pthread_join(t, NULL);
	pair_close(&p);
	if (bad || a.bad)
		fails |= 1;
	if (tpu__waitword_deferred() == owed)
		fails |= 2;
	if (mine > 2 * ROUNDS)
		fails |= 4;
	if (fails & 4)
		fprintf(stderr, "# wake_late: %llu switches of the producer, %llu of the consumer "
			"in %u round trips\n", (unsigned long long)mine,
			(unsigned long long)a.switches, ROUNDS);
	return fails;
}

struct producer {
	struct pair *p;
	tpu_status st;
	_Atomic uint64_t done_ns;
};

static void *produce(void *arg)
{
	struct producer *pr = arg;

	pr->st = send_u32(pr->p, "late", 7);
	atomic_store(&pr->done_ns, tpu__mono_ns());
	return NULL;
}

static void recv_cb(void *arg, tpu_status st, size_t len)
{
	(void)len;
	*(_Atomic tpu_status *)arg = st ? st : 1;
}

/*
 * The producer asleep in send_wait, the consumer takes the tensor and
 * then sleeps outside the library (nanosleep): with a blocking receive
 * the producer wakes by the bound (and says so); with an asynchronous
 * one at once.
 */
static int bound_checks(bool async)
{
	struct pair p;
	struct producer pr = { .p = &p };
	uint64_t late = tpu__waitword_late_woken(), took, done;
	_Atomic tpu_status got = 0;
	const struct timespec nap = { 0, 20000000 }, away = { 0, 300000000 };
	uint32_t v = 0;
	pthread_t t;
	int fails = 0;

	if (pair_open(&p))
		return 1;
	if (pthread_create(&t, NULL, produce, &pr)) {
		pair_close(&p);
		return 1;
	}
	/* Long enough for the producer to post and fall asleep. */
	nanosleep(&nap, NULL);
	if (async) {
		struct tpu_tensor dst = { .data = &v, .len = sizeof(v) };

		if (tpu_rendezvous_recv(p.rdv, "late", 4, &dst, WAIT_NS, recv_cb, (void *)&got))
			fails |= 1;
	} else if (recv_u32(&p, "late", &v) || v != 7) {
		fails |= 1;
	}
	took = tpu__mono_ns();
	nanosleep(&away, NULL);
	pthread_join(t, NULL);
	done = atomic_load(&pr.done_ns);
	if (pr.st)
		fails |= 1;
	/* The producer returned while the consumer was away (or before it looked), not after. */
	if (!done || (done > took && done - took > TPU__WW_LATE_BOUND_NS + SLACK_NS))
		fails |= 2;
	if (async ? tpu__waitword_late_woken() != late : tpu__waitword_late_woken() == late)
		fails |= 4;
	while (async && !atomic_load(&got))
		nanosleep(&nap, NULL);
	pair_close(&p);
	return fails;
}

static int in_child(int cpu, int (*fn)(bool), bool arg)
{
	int ws = 0;
	pid_t pid = fork();

	if (pid == 0) {
		if (bind_to_cpu(cpu))
			_exit(64);
		tpu__spin_cpus_changed();
		_exit(fn(arg));
	}
	return pid > 0 && waitpid(pid, &ws, 0) == pid && WIFEXITED(ws) ? WEXITSTATUS(ws) : 255;
}

static int ping_pong(bool unused)
{
	(void)unused;
	return ping_pong_checks();
}

void test_wake_late(void)
{
	int cpus[2], fails;

	if (!first_two_cpus(cpus))
		cpus[0] = sched_getcpu();
	if (cpus[0] < 0) {
		CHECK(true, "wake_late # SKIP no CPU to bind to");
		return;
	}
	if (under_valgrind()) {
		CHECK(true, "wake_late # SKIP under valgrind (its threads take turns)");
		return;
	}
	fails = in_child(cpus[0], ping_pong, false);
	CHECK(!(fails & 1), "wake_late: %u round trips between two threads on one core, all "
	      "answered right (exit %d)", ROUNDS, fails);
	CHECK(!(fails & 2), "wake_late: consumers owed producers their wake-ups");
	CHECK(!(fails & 4), "wake_late: at most two switches per round trip on the producer's "
	      "side");
	fails = in_child(cpus[0], bound_checks, false);
	CHECK(!(fails & 1), "wake_late: a tensor taken by a blocking receive (exit %d)", fails);
	CHECK(!(fails & 2), "wake_late: its producer returns within the bound while the consumer "
	      "sleeps elsewhere");
	CHECK(!(fails & 4), "wake_late: and it woke by the bound");
	fails = in_child(cpus[0], bound_checks, true);
	CHECK(!(fails & 1), "wake_late: a tensor taken by an asynchronous receive (exit %d)",
	      fails);
	CHECK(!(fails & 2), "wake_late: its producer returns while the consumer sleeps elsewhere");
	CHECK(!(fails & 4), "wake_late: woken at once, not by the bound");
}
