/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * A one-shot hand-off between two threads of a process: one thread waits
 * for the word to be posted, another posts it once.  The waiter spins for
 * a while (what pays when the poster runs on another core and posts soon)
 * and then sleeps on a futex; the poster makes a system call only when the
 * waiter sleeps.  The spin is bounded by what hand-offs took recently and
 * is skipped while they kept ending in sleep, so a busy machine, where the
 * poster may not even be running, costs a plain futex wake-up and not a
 * spinning core.
 */
#ifndef TPU_BASE_WAITWORD_H
#define TPU_BASE_WAITWORD_H

#include <stdbool.h>
#include <stdint.h>

struct tpu__waitword {
	uint32_t state;		/* atomic access only: TPU__WW_* */
	/*
	 * When a poster found the waiter asleep: the hand-off's own length,
	 * which the waiter's wake-up latency would otherwise hide from the
	 * spin budget.  Written before state; 0 when not known.
	 */
	uint64_t posted_ns;
};

#define TPU__WAITWORD_INIT	{ 0, 0 }

/* Mark @w posted and wake its waiter if it sleeps.  Once per word. */
void tpu__waitword_post(struct tpu__waitword *w);

/*
 * Wait until @w is posted, or until @deadline_ns (CLOCK_MONOTONIC, 0 for
 * none) passes.  True when posted.
 */
bool tpu__waitword_wait(struct tpu__waitword *w, uint64_t deadline_ns);

/* What tpu__waitword_wait_poll() tells its @poll. */
enum tpu__ww_phase {
	TPU__WW_SPIN_BEGIN,	/* about to spin */
	TPU__WW_SPIN_POLL,	/* spinning: do some work if there is any */
	TPU__WW_SPIN_END,	/* done spinning (posted, or going to sleep) */
};

/*
 * tpu__waitword_wait() that, while it spins, calls @poll(@arg,
 * TPU__WW_SPIN_POLL) now and then, between one call with SPIN_BEGIN and one
 * with SPIN_END: the waiter may do the work it waits for itself (see the
 * cma rendezvous).  @poll must not block.
 */
bool tpu__waitword_wait_poll(struct tpu__waitword *w, uint64_t deadline_ns,
			     void (*poll)(void *arg, enum tpu__ww_phase phase), void *arg);

/*
 * The process's spinners share one view of the machine's load: a spinner
 * that finds itself descheduled mid-spin (tpu__spin_preempted) makes every
 * spinner of the process sleep at once for a while (tpu__spin_contended),
 * since spinning on oversubscribed cores only delays the peer.
 */
bool tpu__spin_contended(uint64_t now_ns);
void tpu__spin_preempted(uint64_t now_ns);
/* A gap this long between two looks of a spinner: it was descheduled. */
#define TPU__PREEMPT_GAP_NS	200000u

/* CLOCK_MONOTONIC now, in ns; and now + @ns (0 when @ns is 0). */
uint64_t tpu__mono_ns(void);
uint64_t tpu__deadline_ns(uint64_t ns);

#endif
