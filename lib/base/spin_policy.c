// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * When a waiting thread may spin (waitword.h): decided from this process's
 * own threads, never from the machine's load, so that a busy unrelated
 * process or one preemption of another of our threads does not stop a
 * spinner whose peer answers in a microsecond.
 *
 *  - Each thread learns its own spin budget from its own hand-offs (what a
 *    waiter waits for differs between threads: a peer on another core, a
 *    peer that sleeps).
 *  - A thread that finds itself descheduled mid-spin, or whose budget
 *    collapsed because its hand-offs kept ending in sleep, stops spinning
 *    for a quiet period: 1 ms at first, doubled at each further back-off up
 *    to TPU_SPIN_BACKOFF_US (50 ms; 0: never back off), back to 1 ms once a
 *    spin of that thread is answered.  Only that thread backs off.
 *  - A thread that waited for a core (runnable, not running: the run delay
 *    of /proc/thread-self/schedstat) for more than 1/16 of the time since
 *    it last looked, at most every 2 ms, backs off too: on oversubscribed
 *    cores its spin would hold a core that the thread it waits for needs.
 *    That is this thread's own experience of the load, not the machine's:
 *    busy processes on cores it does not use do not count.
 *  - At most one spinner fewer than the cores this process may run on spin
 *    at once, so that the thread they wait for (often one of ours) finds a
 *    core; on a single core nothing spins.
 */
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

#include "base.h"
#include "waitword.h"

#define BACKOFF_MIN_NS		1000000ull
#define BACKOFF_MAX_US_DEFAULT	50000u
#define RQ_CHECK_NS		2000000ull	/* a thread reads its run delay at most this often */
#define RQ_SHARE		16		/* waiting more than 1/16 of the time: contended */

struct spin_thread {
	bool init;
	uint32_t budget_ns;		/* this thread's spin; 0: sleep at once */
	uint64_t quiet_until_ns;	/* no spinning before this */
	uint64_t backoff_ns;		/* the next quiet period */
	bool rq_unknown;		/* no schedstat: the run delay is not looked at */
	uint64_t rq_checked_ns;		/* when the run delay was last read; 0: never */
	uint64_t rq_delay_ns;		/* what it read then */
};

static _Thread_local struct spin_thread me;
/* This process's threads spinning now (tpu__spin_enter minus leave). */
static _Atomic unsigned int spinning;

static uint64_t backoff_max_ns(void)
{
	/* UINT64_MAX: not read yet; the environment is read once. */
	static _Atomic uint64_t max = UINT64_MAX;
	uint64_t v = atomic_load_explicit(&max, memory_order_relaxed);

	if (v == UINT64_MAX) {
		v = tpu__env_u64("TPU_SPIN_BACKOFF_US", BACKOFF_MAX_US_DEFAULT, 0,
				 3600u * 1000000u) * 1000u;
		atomic_store_explicit(&max, v, memory_order_relaxed);
	}
	return v;
}

static struct spin_thread *self(void)
{
	if (!me.init) {
		me.init = true;
		me.budget_ns = TPU__SPIN_START_NS;
		me.backoff_ns = BACKOFF_MIN_NS;
	}
	return &me;
}

/* Quiet for this thread's next back-off period, and double the one after. */
static void back_off(struct spin_thread *t, uint64_t now_ns)
{
	uint64_t max = backoff_max_ns(), len = t->backoff_ns < max ? t->backoff_ns : max;

	t->quiet_until_ns = now_ns + len;
	t->backoff_ns = len * 2 < max ? len * 2 : max;
}

/* This thread's run delay so far (ns); false when the kernel does not say. */
static bool read_run_delay(uint64_t *out)
{
	char buf[96];
	unsigned long long run, wait;
	ssize_t len;
	int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return false;
	len = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (len <= 0)
		return false;
	buf[len] = '\0';
	/* "run_ns wait_ns timeslices" */
	if (sscanf(buf, "%llu %llu", &run, &wait) != 2)
		return false;
	*out = wait;
	return true;
}

/* Whether this thread waited for a core for much of the time since its last look. */
static bool waited_for_core(struct spin_thread *t, uint64_t now_ns)
{
	uint64_t delay, since = now_ns - t->rq_checked_ns, before = t->rq_delay_ns;
	bool first = !t->rq_checked_ns;

	if (t->rq_unknown || (!first && since < RQ_CHECK_NS))
		return false;
	if (!read_run_delay(&delay)) {
		t->rq_unknown = true;
		return false;
	}
	t->rq_checked_ns = now_ns;
	t->rq_delay_ns = delay;
	return !first && delay > before && (delay - before) * RQ_SHARE > since;
}

bool tpu__spin_contended(uint64_t now_ns)
{
	struct spin_thread *t = self();

	if (now_ns < t->quiet_until_ns)
		return true;
	if (waited_for_core(t, now_ns)) {
		back_off(t, now_ns);
		return true;
	}
	return false;
}

void tpu__spin_preempted(uint64_t now_ns)
{
	back_off(self(), now_ns);
}

uint64_t tpu__spin_budget_ns(uint64_t now_ns)
{
	struct spin_thread *t = self();

	if (tpu__spin_contended(now_ns))
		return 0;
	/* A quiet period after a collapse is over: try a short spin again. */
	if (!t->budget_ns)
		t->budget_ns = TPU__SPIN_MIN_NS;
	return t->budget_ns;
}

void tpu__spin_learn(uint64_t took_ns, bool slept, uint64_t now_ns)
{
	struct spin_thread *t = self();
	uint64_t want;

	if (slept) {
		if (t->budget_ns / 2 < TPU__SPIN_MIN_NS) {
			/* Sleeping every time: stop trying for a while. */
			if (t->budget_ns)
				back_off(t, now_ns);
			t->budget_ns = 0;
		} else {
			t->budget_ns /= 2;
		}
		return;
	}
	want = took_ns * 2 < TPU__SPIN_MIN_NS ? TPU__SPIN_MIN_NS : took_ns * 2;
	if (want > TPU__SPIN_MAX_NS)
		want = TPU__SPIN_MAX_NS;
	if (want > t->budget_ns)
		t->budget_ns = (uint32_t)want;
}

void tpu__spin_answered(void)
{
	self()->backoff_ns = BACKOFF_MIN_NS;
}

static unsigned int usable_cpus(void)
{
	static _Atomic unsigned int cached;
	unsigned int n = atomic_load_explicit(&cached, memory_order_relaxed);
	cpu_set_t set;

	if (!n) {
		n = sched_getaffinity(0, sizeof(set), &set) ? 1 : (unsigned int)CPU_COUNT(&set);
		n = n ? n : 1;
		atomic_store_explicit(&cached, n, memory_order_relaxed);
	}
	return n;
}

bool tpu__spin_enter(void)
{
	unsigned int cap = usable_cpus() - 1;
	unsigned int n = atomic_load_explicit(&spinning, memory_order_relaxed);

	do {
		if (n >= cap)
			return false;
	} while (!atomic_compare_exchange_weak_explicit(&spinning, &n, n + 1,
							memory_order_relaxed,
							memory_order_relaxed));
	return true;
}

void tpu__spin_leave(void)
{
	atomic_fetch_sub_explicit(&spinning, 1, memory_order_relaxed);
}
