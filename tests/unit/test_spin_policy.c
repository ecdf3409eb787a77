// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The waiters' spin policy (lib/base/spin_policy.c): decided from this
 * process's own threads.  A busy unrelated process, another thread's
 * preemption or another thread's slow hand-offs must not stop a waiter
 * from spinning, and a thread that backs off does so for a bounded time.
 *
 * Whether a wait spins is seen through an agent whose poll posts the word:
 * the poll runs only while the waiter spins, so a waiter that sleeps at
 * once is not posted and times out.  Each probe runs in a new thread, whose
 * spin state is fresh.
 */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"
#include "waitword.h"

#define PROBE_DEADLINE_NS	20000000ull	/* a waiter that sleeps gives up after this */
#define PROBE_TRIES		10		/* a preempted probe tries again */
#define BACKOFF_MAX_NS		50000000ull	/* TPU_SPIN_BACKOFF_US's default */

static void post_in_poll(void *arg, enum tpu__ww_phase phase)
{
	if (phase == TPU__WW_SPIN_POLL)
		tpu__waitword_post(arg);
}

/* Whether a wait of this thread spins: its poll posts it before the deadline. */
static bool wait_spins(void)
{
	for (int i = 0; i < PROBE_TRIES; i++) {
		struct tpu__waitword w = TPU__WAITWORD_INIT;
		struct tpu__ww_agent agent = { .poll = post_in_poll, .arg = &w };

		if (tpu__waitword_wait_with(&w, tpu__deadline_ns(PROBE_DEADLINE_NS), &agent))
			return true;
	}
	return false;
}

static void *probe_thread(void *arg)
{
	*(bool *)arg = wait_spins();
	return NULL;
}

/* wait_spins() in a new thread. */
static bool fresh_thread_spins(void)
{
	pthread_t t;
	bool spun = false;

	if (pthread_create(&t, NULL, probe_thread, &spun))
		return false;
	pthread_join(t, NULL);
	return spun;
}

static unsigned int cores(void)
{
	cpu_set_t set;

	return sched_getaffinity(0, sizeof(set), &set) ? 1 : (unsigned int)CPU_COUNT(&set);
}

/* More runnable threads on the machine than cores, none of this process. */
static void busy_process_does_not_stop_spinning(void)
{
	unsigned int n = cores() + 1, i;
	pid_t kids[64];
	bool spun;

	for (i = 0; i < n && i < 64; i++) {
		kids[i] = fork();
		if (kids[i] == 0) {
			/* Niced, so that they crowd the run queues but not our probe. */
			if (nice(19) < 0) {}
			for (;;)
				;
		}
	}
	usleep(20000);
	spun = fresh_thread_spins();
	for (i = 0; i < n && i < 64; i++) {
		if (kids[i] > 0) {
			kill(kids[i], SIGKILL);
			waitpid(kids[i], NULL, 0);
		}
	}
	CHECK(spun, "spin_policy: %u busy processes elsewhere do not stop a waiter spinning", n);
}

static void *preempted_thread(void *arg)
{
	uint64_t now = *(uint64_t *)arg;

	tpu__spin_preempted(now);
	*(bool *)((uint64_t *)arg + 1) = tpu__spin_contended(now + 1);
	return NULL;
}

/* One thread's preemption quiets that thread alone, for a short while. */
static void preemption_backs_off_one_thread(void)
{
	uint64_t arg[2] = { tpu__mono_ns(), 0 };
	bool *self_quiet = (bool *)&arg[1], long_quiet = false;
	pthread_t t;

	if (pthread_create(&t, NULL, preempted_thread, arg)) {
		CHECK(false, "spin_policy: pthread_create");
		return;
	}
	pthread_join(t, NULL);
	CHECK(*self_quiet, "spin_policy: a preempted thread stops spinning");
	CHECK(!tpu__spin_contended(arg[0] + 1),
	      "spin_policy: another thread's preemption does not stop this one spinning");
	CHECK(fresh_thread_spins(), "spin_policy: and a new waiter spins right after it");

	/* The first back-off is short; repeated ones grow up to the bound. */
	tpu__spin_preempted(arg[0]);
	CHECK(!tpu__spin_contended(arg[0] + 5000000ull),
	      "spin_policy: one preemption quiets its thread for less than 5 ms");
	for (int i = 0; i < 30; i++) {
		tpu__spin_preempted(arg[0]);
		long_quiet = tpu__spin_contended(arg[0] + BACKOFF_MAX_NS / 2);
	}
	CHECK(long_quiet && !tpu__spin_contended(arg[0] + BACKOFF_MAX_NS + 1),
	      "spin_policy: repeated preemptions quiet it longer, at most TPU_SPIN_BACKOFF_US");
}

struct late {
	struct tpu__waitword *w;
	unsigned int delay_us;
};

static void *post_late(void *arg)
{
	struct late *l = arg;

	usleep(l->delay_us);
	tpu__waitword_post(l->w);
	return NULL;
}

/* Hand-offs of this thread posted long after it began waiting. */
static void *slow_waiter(void *arg)
{
	for (int i = 0; i < 8; i++) {
		struct tpu__waitword w = TPU__WAITWORD_INIT;
		struct late l = { &w, 2000 };
		pthread_t t;

		if (pthread_create(&t, NULL, post_late, &l))
			break;
		tpu__waitword_wait(&w, 0);
		pthread_join(t, NULL);
	}
	/* Its own back-off is bounded: after the longest, it spins again. */
	usleep((useconds_t)(BACKOFF_MAX_NS / 1000 + 10000));
	*(bool *)arg = wait_spins();
	return NULL;
}

static void slow_handoffs_back_off_one_waiter(void)
{
	bool later = false;
	pthread_t t;

	if (pthread_create(&t, NULL, slow_waiter, &later)) {
		CHECK(false, "spin_policy: pthread_create");
		return;
	}
	pthread_join(t, NULL);
	CHECK(fresh_thread_spins(),
	      "spin_policy: another thread's slow hand-offs do not stop a waiter spinning");
	CHECK(later, "spin_policy: a waiter whose hand-offs slept spins again after its back-off");
}

struct core_wait {
	bool quiet;		/* tpu__spin_contended() said so at some point */
};

static void *shares_a_core(void *arg)
{
	struct core_wait *c = arg;
	uint64_t end = tpu__mono_ns() + 200000000ull;

	/* Two busy threads on one core: each waits for it about half the time. */
	while (!c->quiet && tpu__mono_ns() < end)
		c->quiet = tpu__spin_contended(tpu__mono_ns());
	return NULL;
}

/* A thread kept waiting for its core backs off. */
static void waiting_for_a_core_backs_off(void)
{
	struct core_wait c = { 0 };
	pthread_attr_t attr;
	pthread_t t;
	cpu_set_t one;
	pid_t kid;

	CPU_ZERO(&one);
	CPU_SET(0, &one);
	if (sched_getaffinity(0, sizeof(one), &one) || !CPU_ISSET(0, &one)) {
		CHECK(true, "spin_policy: core wait # SKIP cpu 0 not usable");
		return;
	}
	CPU_ZERO(&one);
	CPU_SET(0, &one);
	kid = fork();
	if (kid == 0) {
		sched_setaffinity(0, sizeof(one), &one);
		for (;;)
			;
	}
	pthread_attr_init(&attr);
	pthread_attr_setaffinity_np(&attr, sizeof(one), &one);
	if (kid < 0 || pthread_create(&t, &attr, shares_a_core, &c)) {
		CHECK(false, "spin_policy: fork, pthread_create");
	} else {
		pthread_join(t, NULL);
		CHECK(c.quiet, "spin_policy: a thread that waits for its core stops spinning");
	}
	pthread_attr_destroy(&attr);
	if (kid > 0) {
		kill(kid, SIGKILL);
		waitpid(kid, NULL, 0);
	}
}

void test_spin_policy(void)
{
	if (cores() < 2) {
		CHECK(true, "spin_policy # SKIP one core: nothing spins");
		return;
	}
	busy_process_does_not_stop_spinning();
	preemption_backs_off_one_thread();
	slow_handoffs_back_off_one_waiter();
	waiting_for_a_core_backs_off();
}
