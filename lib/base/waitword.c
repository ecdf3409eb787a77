// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The wait word of waitword.h: states IDLE -> POSTED, or IDLE -> SLEEPING
 * -> POSTED when the waiter went to sleep first, or IDLE -> AWAY -> IDLE
 * ... -> POSTED when it sleeps elsewhere (an agent's sleep) and wakes now
 * and then to work.  The poster's exchange tells it whether a FUTEX_WAKE
 * (SLEEPING) or a kick (AWAY) is needed.
 *
 * Spin budget: twice the longest recent hand-off that ended while
 * spinning, capped at TPU__SPIN_MAX_NS; a hand-off that had to sleep halves
 * it, and below TPU__SPIN_MIN_NS the waiter sleeps at once for a while.
 * The budget and the back-offs are the waiting thread's own
 * (spin_policy.c).
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "waitword.h"

enum { TPU__WW_IDLE, TPU__WW_POSTED, TPU__WW_SLEEPING, TPU__WW_AWAY };

/*
 * Looks at the word between two reads of the clock; a waiter with an
 * agent polls it after every look instead.  A pause takes ~25 ns on the
 * EPYC hosts here and up to ~140 cycles on recent Intel cores, and the
 * agent's poll is one load when nothing changed: a cma waiter learns of
 * its tensor only from that poll, and eight looks between polls (300 ns
 * here) were a fifth of a spinning cma round trip.
 */
#define SPIN_LOOKS	8
#define AGENT_LOOKS	1

uint64_t tpu__mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t tpu__deadline_ns(uint64_t ns)
{
	uint64_t now;

	if (!ns)
		return 0;
	now = tpu__mono_ns();
	return ns > UINT64_MAX - now ? UINT64_MAX : now + ns;
}

static _Atomic uint32_t *word(struct tpu__waitword *w)
{
	return (_Atomic uint32_t *)&w->state;
}

/*
 * Wake-ups this thread owes (tpu__waitword_post()): the words' addresses
 * only.  A waiter that woke by itself meanwhile may have returned, and
 * its word gone; a FUTEX_WAKE of that address then wakes nobody or makes
 * a spurious wake-up, which every futex waiter tolerates (the post below
 * has always woken after the exchange that lets the waiter return).
 */
#define OWED_MAX	4
static _Thread_local uint32_t *owed[OWED_MAX];
static _Thread_local unsigned int nowed;
static _Atomic uint64_t deferred, late_woken;

static void futex_wake(uint32_t *addr)
{
	syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

void tpu__waitword_flush(void)
{
	while (nowed)
		futex_wake(owed[--nowed]);
}

uint64_t tpu__waitword_deferred(void)
{
	return atomic_load_explicit(&deferred, memory_order_relaxed);
}

uint64_t tpu__waitword_late_woken(void)
{
	return atomic_load_explicit(&late_woken, memory_order_relaxed);
}

void tpu__waitword_post(struct tpu__waitword *w)
{
	void (*kick)(void *arg) = w->kick;
	void *kick_arg = w->kick_arg;
	bool late_ok = w->late_ok;
	uint32_t was = atomic_load_explicit(word(w), memory_order_relaxed);

	if (was == TPU__WW_SLEEPING || was == TPU__WW_AWAY)
		w->posted_ns = tpu__mono_ns();
	/* After the exchange the waiter may return and @w be gone. */
	was = atomic_exchange(word(w), TPU__WW_POSTED);
	if (was == TPU__WW_SLEEPING) {
		if (late_ok && nowed < OWED_MAX && tpu__spin_one_core_for_all()) {
			owed[nowed++] = &w->state;
			atomic_fetch_add_explicit(&deferred, 1, memory_order_relaxed);
			return;
		}
		futex_wake(&w->state);
	} else if (was == TPU__WW_AWAY) {
		kick(kick_arg);
	}
}

/* Spin on @w within this thread's budget (or the agent's floor): true when posted. */
static bool spin(struct tpu__waitword *w, uint64_t deadline_ns, const struct tpu__ww_agent *agent)
{
	uint64_t budget, start, now, last, floor;
	unsigned int i, looks = agent ? AGENT_LOOKS : SPIN_LOOKS;

	if (atomic_load_explicit(word(w), memory_order_acquire) == TPU__WW_POSTED) {
		tpu__spin_learn(0, false, 0);
		return true;
	}
	start = tpu__mono_ns();
	budget = tpu__spin_budget_ns(start);
	floor = agent && agent->spin_ns ? agent->spin_ns(agent->arg) : 0;
	if (floor > budget && !tpu__spin_contended(start))
		budget = floor;
	if (agent && agent->spin_max_ns) {
		uint64_t max = agent->spin_max_ns(agent->arg);

		budget = budget > max ? max : budget;
	}
	if (!budget)
		return false;
	if (agent && agent->self_served && agent->self_served(agent->arg) ?
	    !tpu__spin_enter_self_served() : !tpu__spin_enter())
		return false;
	last = start;
	for (;;) {
		for (i = 0; i < looks; i++) {
			if (atomic_load_explicit(word(w), memory_order_acquire) == TPU__WW_POSTED) {
				tpu__spin_leave();
				tpu__spin_learn(tpu__mono_ns() - start, false, 0);
				tpu__spin_answered();
				return true;
			}
			tpu__cpu_relax();
		}
		now = tpu__mono_ns();
		if (now - last > TPU__PREEMPT_GAP_NS) {
			tpu__spin_leave();
			tpu__spin_preempted(now);
			return false;
		}
		/* The agent's own work (a copy, say) is no gap in our looks. */
		if (agent) {
			agent->poll(agent->arg, TPU__WW_SPIN_POLL);
			now = tpu__mono_ns();
		}
		last = now;
		if (now - start >= budget || (deadline_ns && now >= deadline_ns)) {
			tpu__spin_leave();
			return false;
		}
	}
}

bool tpu__waitword_wait(struct tpu__waitword *w, uint64_t deadline_ns)
{
	return tpu__waitword_wait_with(w, deadline_ns, NULL);
}

/*
 * A post that came soon after the waiter went to sleep says spinning a
 * little longer would have paid; a long sleep says it would not.  The
 * poster's clock says when it posted; without it our wake-up latency
 * (tens of microseconds for an idle virtual CPU) counts too, and the
 * budget would never recover from one slow hand-off.
 */
static void learn_from_sleep(const struct tpu__waitword *w, uint64_t began, uint64_t slept)
{
	uint64_t now = tpu__mono_ns();
	uint64_t took = w->posted_ns > began ? w->posted_ns - began : now - slept;

	tpu__spin_learn(took, took > TPU__SPIN_MAX_NS, now);
}

/* Sleep on the word itself until posted or @deadline_ns: true when posted. */
static bool sleep_on_word(struct tpu__waitword *w, uint64_t deadline_ns, uint64_t began)
{
	uint32_t expected = TPU__WW_IDLE;
	uint64_t start, now;
	struct timespec ts;
	bool late;

	/*
	 * A poster on our one core may owe us the wake-up: look now and then.
	 * Asked before the sleep is announced, so that the poster's view of
	 * the process's cores has ours.
	 */
	late = w->late_ok && tpu__spin_lone_core();
	tpu__waitword_flush();
	/* Announce the sleep; a post that came first wins the exchange. */
	if (!atomic_compare_exchange_strong(word(w), &expected, TPU__WW_SLEEPING) &&
	    expected == TPU__WW_POSTED)
		return true;
	start = tpu__mono_ns();
	for (;;) {
		uint64_t until = deadline_ns;

		if (atomic_load_explicit(word(w), memory_order_acquire) == TPU__WW_POSTED)
			break;
		now = tpu__mono_ns();
		if (deadline_ns && now >= deadline_ns)
			return false;
		if (late && (!until || until - now > TPU__WW_LATE_BOUND_NS))
			until = now + TPU__WW_LATE_BOUND_NS;
		if (until) {
			ts.tv_sec = (time_t)((until - now) / 1000000000ull);
			ts.tv_nsec = (long)((until - now) % 1000000000ull);
		}
		if (syscall(SYS_futex, &w->state, FUTEX_WAIT_PRIVATE, TPU__WW_SLEEPING,
			    until ? &ts : NULL, NULL, 0) && errno == ETIMEDOUT && late &&
		    atomic_load_explicit(word(w), memory_order_acquire) == TPU__WW_POSTED)
			atomic_fetch_add_explicit(&late_woken, 1, memory_order_relaxed);
	}
	learn_from_sleep(w, began, start);
	return true;
}

/*
 * Sleep in the agent's place until posted or @deadline_ns, working after
 * every wake-up.  The word is AWAY only while asleep, so that the waiter's
 * own work, which may post it, needs no kick.  The token is read before
 * the word says AWAY: a kick after that changes what the sleep waits on.
 */
static bool sleep_away(struct tpu__waitword *w, uint64_t deadline_ns, uint64_t began,
		       const struct tpu__ww_agent *agent)
{
	uint64_t start = tpu__mono_ns();

	for (;;) {
		uint32_t token = agent->token(agent->arg);
		uint32_t expected = TPU__WW_IDLE;

		/* What changed before the token was read is not slept through. */
		agent->poll(agent->arg, TPU__WW_SPIN_POLL);
		if (deadline_ns && tpu__mono_ns() >= deadline_ns &&
		    atomic_load_explicit(word(w), memory_order_acquire) != TPU__WW_POSTED)
			return false;
		if (!atomic_compare_exchange_strong(word(w), &expected, TPU__WW_AWAY))
			break;		/* posted */
		tpu__waitword_flush();
		agent->sleep(agent->arg, token, deadline_ns);
		expected = TPU__WW_AWAY;
		if (!atomic_compare_exchange_strong(word(w), &expected, TPU__WW_IDLE))
			break;		/* posted while asleep */
	}
	learn_from_sleep(w, began, start);
	return true;
}

bool tpu__waitword_wait_with(struct tpu__waitword *w, uint64_t deadline_ns,
			     const struct tpu__ww_agent *agent)
{
	uint64_t began = tpu__mono_ns();
	bool posted;

	if (agent)
		agent->poll(agent->arg, TPU__WW_SPIN_BEGIN);
	posted = spin(w, deadline_ns, agent);
	if (!posted && agent && agent->sleep)
		posted = sleep_away(w, deadline_ns, began, agent);
	if (agent)
		agent->poll(agent->arg, posted ? TPU__WW_SPIN_END : TPU__WW_SPIN_GIVE_UP);
	if (posted || (agent && agent->sleep))
		return posted;
	return sleep_on_word(w, deadline_ns, began);
}
