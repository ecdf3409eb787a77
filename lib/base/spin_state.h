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
/* Waiting for a core more than 1/16 of that time: the cores are oversubscribed. */
#define TPU__SPIN_RQ_SHARE		16u

struct tpu__spin_state {
	uint64_t backoff_max_ns;	/* TPU_SPIN_BACKOFF_US; 0: never quiet */
	uint32_t budget_ns;		/* the next spin; 0: sleep at once */
	uint64_t quiet_until_ns;	/* no spinning before this */
	uint64_t backoff_ns;		/* the next quiet period, before decay */
	uint64_t rq_checked_ns;		/* when the run delay was last given; 0: never */
	uint64_t rq_delay_ns;		/* what it was then */
};

void tpu__spin_state_init(struct tpu__spin_state *s, uint64_t backoff_max_ns);
/*
 * Whether the caller should read its run delay now and pass it to
 * _contended: at most every 2 ms, and not during a quiet period.
 */
bool tpu__spin_state_wants_rq(const struct tpu__spin_state *s, uint64_t now_ns);
/*
 * Whether the thread should not spin now.  @rq_delay_ns: its run delay
 * (total ns spent runnable but not running) when _wants_rq said so,
 * UINT64_MAX otherwise or when the kernel does not tell.
 */
bool tpu__spin_state_contended(struct tpu__spin_state *s, uint64_t now_ns,
			       uint64_t rq_delay_ns);
/* The thread found itself descheduled mid-spin. */
void tpu__spin_state_preempted(struct tpu__spin_state *s, uint64_t now_ns);
/* How long the next wait may spin (ns); 0: sleep at once. */
uint64_t tpu__spin_state_budget(struct tpu__spin_state *s, uint64_t now_ns,
				uint64_t rq_delay_ns);
/* One hand-off: posted after @took_ns; @slept when it came too late for a spin. */
void tpu__spin_state_learn(struct tpu__spin_state *s, uint64_t took_ns, bool slept,
			   uint64_t now_ns);
/* A spin was answered: the next quiet period is the shortest again. */
void tpu__spin_state_answered(struct tpu__spin_state *s);

#endif
