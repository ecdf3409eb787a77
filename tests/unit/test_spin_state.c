// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The spin policy's decisions (lib/base/spin_state.c) replayed from made-up
 * histories: hand-off times, preemptions and run delays at given instants.
 * Nothing here reads a clock, so no point can flake on a busy machine.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "spin_state.h"
#include "tap.h"
#include "waitword.h"

#define MS		1000000ull
#define SEC		(1000 * MS)
#define MAX_NS		(50 * MS)	/* TPU_SPIN_BACKOFF_US's default */
#define NO_RQ		NULL
/* A run delay reading: @d ns in all, got a core @n times, preempted @p times. */
#define RQ3(d, n, p)	(&(const struct tpu__spin_rq){ (d), (n), (p) })
/* The same, never preempted. */
#define RQ(d, n)	RQ3(d, n, 0)

/* Whether the state would spin at @now (no run delay given). */
static bool spins_at(struct tpu__spin_state *s, uint64_t now)
{
	return tpu__spin_state_budget(s, now, NO_RQ) != 0;
}

/* The first instant, in ms steps from @from, at which @s spins again. */
static uint64_t quiet_ms(struct tpu__spin_state *s, uint64_t from)
{
	uint64_t t;

	for (t = from; t < from + 2 * MAX_NS; t += MS / 4) {
		if (!tpu__spin_state_contended(s, t, NO_RQ))
			break;
	}
	return (t - from) / MS;
}

static void one_preemption(void)
{
	struct tpu__spin_state s;
	uint64_t q;

	tpu__spin_state_init(&s, MAX_NS);
	CHECK(spins_at(&s, 10 * SEC), "spin_state: a fresh thread spins");
	tpu__spin_state_preempted(&s, 10 * SEC);
	CHECK(!spins_at(&s, 10 * SEC + MS / 2), "spin_state: right after a preemption it sleeps");
	q = quiet_ms(&s, 10 * SEC);
	CHECK(q <= 1, "spin_state: one preemption quiets it for 1 ms (%llu ms)",
	      (unsigned long long)q);
	CHECK(spins_at(&s, 10 * SEC + 2 * MS), "spin_state: and it spins 2 ms later");
}

static void close_preemptions_climb(void)
{
	struct tpu__spin_state s;
	uint64_t t = 5 * SEC, q = 0;
	int i;

	tpu__spin_state_init(&s, MAX_NS);
	/* Each preemption comes as soon as the previous quiet period ends. */
	for (i = 0; i < 10; i++) {
		tpu__spin_state_preempted(&s, t);
		q = quiet_ms(&s, t);
		t += q * MS;
	}
	CHECK(q == 50,
	      "spin_state: preemptions back to back climb to TPU_SPIN_BACKOFF_US (%llu ms)",
	      (unsigned long long)q);
	/* A spin that is answered resets it. */
	tpu__spin_state_answered(&s);
	tpu__spin_state_preempted(&s, t + MS);
	CHECK(quiet_ms(&s, t + MS) <= 1, "spin_state: after an answered spin the next period is 1 ms");
}

/*
 * Preemptions a second apart, with no spin answered in between (its hand-offs
 * were posted before it looked): each is an isolated event and costs 1 ms.
 * Before the decay they doubled to 50 ms after seven.
 */
static void isolated_preemptions_decay(void)
{
	struct tpu__spin_state s;
	uint64_t worst = 0;
	int i;

	tpu__spin_state_init(&s, MAX_NS);
	for (i = 1; i <= 12; i++) {
		uint64_t q;

		tpu__spin_state_preempted(&s, (uint64_t)i * SEC);
		q = quiet_ms(&s, (uint64_t)i * SEC);
		worst = q > worst ? q : worst;
	}
	CHECK(worst <= 1, "spin_state: preemptions a second apart quiet it 1 ms each (worst %llu ms)",
	      (unsigned long long)worst);
}

static void decay_is_gradual(void)
{
	struct tpu__spin_state s;
	uint64_t t = SEC, q;
	int i;

	tpu__spin_state_init(&s, MAX_NS);
	for (i = 0; i < 10; i++) {
		tpu__spin_state_preempted(&s, t);
		t += quiet_ms(&s, t) * MS;
	}
	/* Calm for 60 ms after a 50 ms period: the next one is 25 ms, not 1 ms. */
	tpu__spin_state_preempted(&s, t + 60 * MS);
	q = quiet_ms(&s, t + 60 * MS);
	CHECK(q == 25, "spin_state: a calm spell as long as the next period halves it (%llu ms)",
	      (unsigned long long)q);
}

static void run_delay(void)
{
	struct tpu__spin_state s;
	uint64_t t = SEC;

	tpu__spin_state_init(&s, MAX_NS);
	/* The first reading is a baseline only. */
	CHECK(tpu__spin_state_wants_rq(&s, t), "spin_state: a fresh thread asks for its run delay");
	CHECK(tpu__spin_state_budget(&s, t, RQ(7 * SEC, 1000)) != 0,
	      "spin_state: the first run delay is a baseline");
	CHECK(!tpu__spin_state_wants_rq(&s, t + MS), "spin_state: and it asks again only after 2 ms");
	/* 100 us waiting in 4 ms (1/40): not contended. */
	CHECK(tpu__spin_state_budget(&s, t + 4 * MS, RQ(7 * SEC + 100000, 1001)) != 0,
	      "spin_state: a run delay of 1/40 of the time lets it spin");
	/* 1 ms waiting in the next 4 ms (1/4): oversubscribed. */
	CHECK(tpu__spin_state_budget(&s, t + 8 * MS, RQ(7 * SEC + 1100000, 1002)) == 0,
	      "spin_state: a run delay of 1/4 of the time stops it");
	CHECK(quiet_ms(&s, t + 8 * MS) <= 1, "spin_state: for 1 ms the first time");
	/* Reading the run delay costs system calls: never while quiet. */
	CHECK(!tpu__spin_state_wants_rq(&s, t + 8 * MS + MS / 2),
	      "spin_state: a quiet thread does not ask for its run delay");
	/* Calm again: the run delay stays. */
	CHECK(tpu__spin_state_budget(&s, t + 20 * MS, RQ(7 * SEC + 1100000, 1003)) != 0,
	      "spin_state: with no more run delay it spins again");
}

/*
 * A thread that sleeps waits a little for a core after every wake-up:
 * 400 wake-ups of 10 us each in 4 ms is a run delay of a whole 4 ms, yet
 * no other thread held the core.  Counted as load, that kept two idle
 * threads asleep (8 us round trips instead of 0.8).  The same delay in one
 * wait is another thread's time slice.
 */
static void wake_up_waits(void)
{
	struct tpu__spin_state s;
	uint64_t t = SEC;
	int i;

	tpu__spin_state_init(&s, MAX_NS);
	(void)tpu__spin_state_budget(&s, t, RQ(0, 0));
	CHECK(tpu__spin_state_budget(&s, t + 4 * MS, RQ(4 * MS, 400)) != 0,
	      "spin_state: many short waits after wake-ups (10 us each) let it spin");
	for (i = 2; i <= 10; i++)
		if (!tpu__spin_state_budget(&s, t + 4 * MS * i, RQ(4 * MS * i, 400u * i)))
			break;
	CHECK(i == 11, "spin_state: and keep letting it spin, 40 ms long (stopped at %d)", i);
	/* 1 ms in 2 waits of 500 us: time slices of others. */
	CHECK(tpu__spin_state_budget(&s, t + 44 * MS, RQ(40 * MS + MS, 4002)) == 0,
	      "spin_state: the same share in two long waits (500 us) stops it");
	/* Short waits, but a busy process took the core meanwhile. */
	tpu__spin_state_init(&s, MAX_NS);
	(void)tpu__spin_state_budget(&s, t, RQ3(0, 0, 3));
	CHECK(tpu__spin_state_budget(&s, t + 4 * MS, RQ3(4 * MS, 400, 3)) != 0,
	      "spin_state: short waits, no preemption: it spins");
	CHECK(tpu__spin_state_budget(&s, t + 8 * MS, RQ3(6 * MS, 500, 4)) == 0,
	      "spin_state: short waits with a preemption among them stop it");
	CHECK(tpu__spin_state_budget(&s, t + 12 * MS, RQ3(6 * MS + 100000, 600, 9)) != 0,
	      "spin_state: preemptions with little waiting (1/40 of the time) do not");
	/* On the border: 200 us a wait does not count, 201 does. */
	tpu__spin_state_init(&s, MAX_NS);
	(void)tpu__spin_state_budget(&s, t, RQ(0, 0));
	CHECK(tpu__spin_state_budget(&s, t + 4 * MS, RQ(TPU__SPIN_RQ_WAIT_NS * 5, 5)) != 0,
	      "spin_state: waits of exactly %llu us do not count",
	      (unsigned long long)TPU__SPIN_RQ_WAIT_NS / 1000);
	CHECK(tpu__spin_state_budget(&s, t + 8 * MS,
				     RQ(TPU__SPIN_RQ_WAIT_NS * 5 + (TPU__SPIN_RQ_WAIT_NS + 1) * 5,
					10)) == 0,
	      "spin_state: waits just longer do");
}

/*
 * The run delay of a window that spans a quiet period is the sleeper's
 * (wake-ups, and the wakee preempting its waker): a new baseline only.
 * Judged on it, an idle pair of threads that once backed off stayed
 * asleep.  The window after it, spent spinning, counts.
 */
static void quiet_window_is_a_baseline(void)
{
	struct tpu__spin_state s;
	uint64_t t = SEC;

	tpu__spin_state_init(&s, MAX_NS);
	(void)tpu__spin_state_budget(&s, t, RQ3(0, 0, 0));
	tpu__spin_state_preempted(&s, t + MS);
	CHECK(tpu__spin_state_budget(&s, t + 4 * MS, RQ3(3 * MS, 300, 5)) != 0,
	      "spin_state: the run delay of a window with a quiet period in it stops nothing");
	CHECK(tpu__spin_state_budget(&s, t + 8 * MS, RQ3(5 * MS, 310, 6)) == 0,
	      "spin_state: the next window's, spent spinning, does");
}

static void budget_learning(void)
{
	struct tpu__spin_state s;
	uint64_t t = SEC;
	int i;

	tpu__spin_state_init(&s, MAX_NS);
	CHECK(tpu__spin_state_budget(&s, t, NO_RQ) == TPU__SPIN_START_NS,
	      "spin_state: a fresh thread spins %u ns", TPU__SPIN_START_NS);
	tpu__spin_state_learn(&s, 30000, false, t);
	CHECK(tpu__spin_state_budget(&s, t, NO_RQ) == TPU__SPIN_MAX_NS,
	      "spin_state: a 30 us hand-off that a spin caught lengthens it to the cap");
	/* Hand-offs that keep sleeping halve it, then stop it for a back-off. */
	for (i = 0; i < 6; i++)
		tpu__spin_state_learn(&s, 200000, true, t);
	CHECK(tpu__spin_state_budget(&s, t + MS / 2, NO_RQ) == 0,
	      "spin_state: sleeping hand-offs stop the spin");
	CHECK(tpu__spin_state_budget(&s, t + 2 * MS, NO_RQ) == TPU__SPIN_MIN_NS,
	      "spin_state: after the quiet period it tries %u ns again", TPU__SPIN_MIN_NS);
}

static void knob_zero(void)
{
	struct tpu__spin_state s;

	tpu__spin_state_init(&s, 0);
	tpu__spin_state_preempted(&s, SEC);
	CHECK(spins_at(&s, SEC), "spin_state: TPU_SPIN_BACKOFF_US=0: a preemption stops nothing");
	(void)tpu__spin_state_budget(&s, 2 * SEC, RQ(0, 0));
	CHECK(tpu__spin_state_budget(&s, 2 * SEC + 4 * MS, RQ(4 * MS, 1)) != 0,
	      "spin_state: TPU_SPIN_BACKOFF_US=0: nor does a run delay");
}

/*
 * The same isolated preemptions through the thread's policy
 * (tpu__spin_preempted, tpu__spin_contended), in a new thread so that its
 * state is fresh; the instants are hours away from the real clock's reading
 * of the run delay, which therefore cannot count.
 */
static void *isolated_thread(void *arg)
{
	uint64_t base = 3600 * SEC;
	bool ok = true;

	for (int i = 1; i <= 10; i++) {
		uint64_t t = base + (uint64_t)i * SEC;

		tpu__spin_preempted(t);
		if (tpu__spin_contended(t + 2 * MS))
			ok = false;
	}
	*(bool *)arg = ok;
	return NULL;
}

void test_spin_state(void)
{
	pthread_t th;
	bool ok = false;

	one_preemption();
	close_preemptions_climb();
	isolated_preemptions_decay();
	decay_is_gradual();
	run_delay();
	wake_up_waits();
	quiet_window_is_a_baseline();
	budget_learning();
	knob_zero();
	if (pthread_create(&th, NULL, isolated_thread, &ok)) {
		CHECK(false, "spin_state: pthread_create");
		return;
	}
	pthread_join(th, NULL);
	CHECK(ok, "spin_state: a thread preempted once a second spins 2 ms after each");
}
