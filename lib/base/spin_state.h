/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The spin policy's decisions as a pure function of what one thread saw
 * (spin_policy.c feeds it the clock and the thread's run delay): no clock,
 * no system call, no global state here, so that a test can replay a
 * history of hand-offs, preemptions and run delays and check each answer.
 */
#ifndef TPU_BASE_SPIN_STATE_H
#define TPU_BASE_SPIN_STATE_H

#include <stdbool.h>
#include <stdint.h>

/* The first quiet period after a calm spell. */
#define TPU__SPIN_BACKOFF_MIN_NS	1000000ull
/* A thread compares its run delay with the time passed at most this often. */
#define TPU__SPIN_RQ_CHECK_NS		2000000ull
/*
 * Waiting for a core more than 1/16 of that time: the cores are
 * oversubscribed, if another thread took the core from this one meanwhile
 * (an involuntary context switch) or the waits were long (more than this
 * on average each time the thread got a core).  A thread that sleeps
 * waits a little after every wake-up (5 to 40 us on a virtual CPU), and
 * those waits, many and short, are the price of sleeping, not a sign of
 * busy cores: counted as such, they kept a pair of idle threads asleep
 * (8 us round trips instead of 0.8).  A busy process preempts a spinner,
 * and a thread preempted waits that process's time slice.
 */
#define TPU__SPIN_RQ_SHARE		16u
#define TPU__SPIN_RQ_WAIT_NS		200000ull

/* A thread's run delay as the kernel counts it. */
struct tpu__spin_rq {
	uint64_t delay_ns;		/* total time runnable, not running (schedstat) */
	uint64_t slices;		/* times it got a core (schedstat) */
	uint64_t preempted;		/* involuntary context switches (getrusage) */
};

struct tpu__spin_state {
	uint64_t backoff_max_ns;	/* TPU_SPIN_BACKOFF_US; 0: never quiet */
	uint32_t budget_ns;		/* the next spin; 0: sleep at once */
	uint64_t quiet_until_ns;	/* no spinning before this */
	uint64_t backoff_ns;		/* the next quiet period, before decay */
	uint64_t rq_checked_ns;		/* when the run delay was last given; 0: never */
	uint64_t rq_delay_ns;		/* what it was then */
	uint64_t rq_slices;		/* and the times it had got a core */
	uint64_t rq_preempted;		/* and been preempted */
};

void tpu__spin_state_init(struct tpu__spin_state *s, uint64_t backoff_max_ns);
/*
 * Whether the caller should read its run delay now and pass it to
 * _contended: at most every 2 ms, and not during a quiet period.
 */
bool tpu__spin_state_wants_rq(const struct tpu__spin_state *s, uint64_t now_ns);
/*
 * Whether the thread should not spin now.  @rq: its run delay when
 * _wants_rq said so, NULL otherwise or when the kernel does not tell.
 */
bool tpu__spin_state_contended(struct tpu__spin_state *s, uint64_t now_ns,
			       const struct tpu__spin_rq *rq);
/* The thread found itself descheduled mid-spin. */
void tpu__spin_state_preempted(struct tpu__spin_state *s, uint64_t now_ns);
/* How long the next wait may spin (ns); 0: sleep at once. */
uint64_t tpu__spin_state_budget(struct tpu__spin_state *s, uint64_t now_ns,
				const struct tpu__spin_rq *rq);
/* One hand-off: posted after @took_ns; @slept when it came too late for a spin. */
void tpu__spin_state_learn(struct tpu__spin_state *s, uint64_t took_ns, bool slept,
			   uint64_t now_ns);
/* A spin was answered: the next quiet period is the shortest again. */
void tpu__spin_state_answered(struct tpu__spin_state *s);

#endif
