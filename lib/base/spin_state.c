// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The spin policy's decisions for one thread (spin_state.h), from its own
 * history only.  Quiet periods decay: each calm spell as long as the next
 * quiet period halves it, so isolated preemptions (one now, one in a
 * second) each cost the shortest period instead of climbing to the longest
 * one; only preemptions that follow each other closely lengthen it.
 */
#include "spin_state.h"
#include "waitword.h"

void tpu__spin_state_init(struct tpu__spin_state *s, uint64_t backoff_max_ns)
{
	*s = (struct tpu__spin_state){
		.backoff_max_ns = backoff_max_ns,
		.budget_ns = TPU__SPIN_START_NS,
		.backoff_ns = TPU__SPIN_BACKOFF_MIN_NS,
	};
}

/* The next quiet period at @now_ns: halved for each calm spell of its length. */
static uint64_t decayed_backoff(const struct tpu__spin_state *s, uint64_t now_ns)
{
	uint64_t len = s->backoff_ns;
	uint64_t calm = now_ns > s->quiet_until_ns ? now_ns - s->quiet_until_ns : 0;

	if (!s->quiet_until_ns)
		return len;
	while (len > TPU__SPIN_BACKOFF_MIN_NS && calm >= len) {
		calm -= len;
		len /= 2;
	}
	return len < TPU__SPIN_BACKOFF_MIN_NS ? TPU__SPIN_BACKOFF_MIN_NS : len;
}

/* Quiet for the next (decayed) period, and double the one after. */
static void back_off(struct tpu__spin_state *s, uint64_t now_ns)
{
	uint64_t max = s->backoff_max_ns, len = decayed_backoff(s, now_ns);

	if (len > max)
		len = max;
	if (!len)
		return;
	s->quiet_until_ns = now_ns + len;
	s->backoff_ns = len * 2 < max ? len * 2 : max;
}

bool tpu__spin_state_wants_rq(const struct tpu__spin_state *s, uint64_t now_ns)
{
	/* Not while quiet: the answer is known, and the reading costs system calls. */
	if (now_ns < s->quiet_until_ns)
		return false;
	return !s->rq_checked_ns || now_ns - s->rq_checked_ns >= TPU__SPIN_RQ_CHECK_NS;
}

/*
 * Whether the thread waited for a core for much of the time since it last
 * told, and was preempted meanwhile or waited long each time.  A window
 * that spans a quiet period is a new baseline only: while quiet the thread
 * slept, and what it waited after each wake-up says nothing about whether
 * spinning would be answered now; judged on it, a pair of idle threads
 * that once backed off stayed asleep.
 */
static bool waited_for_core(struct tpu__spin_state *s, uint64_t now_ns,
			    const struct tpu__spin_rq *rq)
{
	uint64_t since = now_ns - s->rq_checked_ns, before = s->rq_delay_ns, waited, runs;
	bool baseline = !s->rq_checked_ns || s->rq_checked_ns <= s->quiet_until_ns;
	bool preempted;

	if (!rq || !tpu__spin_state_wants_rq(s, now_ns))
		return false;
	waited = rq->delay_ns > before ? rq->delay_ns - before : 0;
	runs = rq->slices > s->rq_slices ? rq->slices - s->rq_slices : 0;
	preempted = rq->preempted != s->rq_preempted;
	s->rq_checked_ns = now_ns ? now_ns : 1;
	s->rq_delay_ns = rq->delay_ns;
	s->rq_slices = rq->slices;
	s->rq_preempted = rq->preempted;
	return !baseline && waited * TPU__SPIN_RQ_SHARE > since &&
	       (preempted || waited > runs * TPU__SPIN_RQ_WAIT_NS);
}

bool tpu__spin_state_contended(struct tpu__spin_state *s, uint64_t now_ns,
			       const struct tpu__spin_rq *rq)
{
	if (now_ns < s->quiet_until_ns)
		return true;
	if (waited_for_core(s, now_ns, rq)) {
		back_off(s, now_ns);
		return s->backoff_max_ns != 0;
	}
	return false;
}

void tpu__spin_state_preempted(struct tpu__spin_state *s, uint64_t now_ns)
{
	back_off(s, now_ns);
}

uint64_t tpu__spin_state_budget(struct tpu__spin_state *s, uint64_t now_ns,
				const struct tpu__spin_rq *rq)
{
	if (tpu__spin_state_contended(s, now_ns, rq))
		return 0;
	/* A quiet period after a collapse is over: try a short spin again. */
	if (!s->budget_ns)
		s->budget_ns = TPU__SPIN_MIN_NS;
	return s->budget_ns;
}

void tpu__spin_state_learn(struct tpu__spin_state *s, uint64_t took_ns, bool slept,
			   uint64_t now_ns)
{
	uint64_t want;

	if (slept) {
		if (s->budget_ns / 2 < TPU__SPIN_MIN_NS) {
			/* Sleeping every time: stop trying for a while. */
			if (s->budget_ns)
				back_off(s, now_ns);
			s->budget_ns = 0;
		} else {
			s->budget_ns /= 2;
		}
		return;
	}
	want = took_ns * 2 < TPU__SPIN_MIN_NS ? TPU__SPIN_MIN_NS : took_ns * 2;
	if (want > TPU__SPIN_MAX_NS)
		want = TPU__SPIN_MAX_NS;
	if (want > s->budget_ns)
		s->budget_ns = (uint32_t)want;
}

void tpu__spin_state_answered(struct tpu__spin_state *s)
{
	s->backoff_ns = TPU__SPIN_BACKOFF_MIN_NS;
}
