// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The wait word of waitword.h: states IDLE -> POSTED, or IDLE -> SLEEPING
 * -> POSTED when the waiter went to sleep first, or IDLE -> AWAY -> IDLE
 * ... -> POSTED when it sleeps elsewhere (an agent's sleep) and wakes now
 * and then to work.  The poster's exchange tells it whether a FUTEX_WAKE
 * (SLEEPING) or a kick (AWAY) is needed.
 *
 * Spin budget: twice the longest recent hand-off that ended while
 * spinning, capped at SPIN_MAX_NS; a hand-off that had to sleep halves it,
 * and below SPIN_MIN_NS the waiter sleeps at once, until a hand-off is seen
 * posted at the first look again.  The budget is per process, shared by all
 * waiters: they meet the same machine load.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "waitword.h"

enum { TPU__WW_IDLE, TPU__WW_POSTED, TPU__WW_SLEEPING, TPU__WW_AWAY };

#define SPIN_MAX_NS	50000u	/* never spin longer than this */
#define SPIN_START_NS	20000u
#define SPIN_MIN_NS	2000u	/* below this, sleep at once */
/*
 * Looks at the word between two calls of the agent's poll: a pause takes
 * up to ~140 cycles, and the agent's poll is one load when nothing changed,
 * so polling often keeps the hand-off short.
 */
#define SPIN_LOOKS	8

static _Atomic uint32_t spin_budget_ns = SPIN_START_NS;

/*
 * Spinning on a busy machine: a gap this long between two looks means the
 * spinner was descheduled, so the peer it waits for competes with it (and
 * with others) for the cores.  Spinning then only delays the peer: every
 * waiter of the process sleeps at once for CONTENDED_NS, and then tries
 * spinning again.
 */
#define CONTENDED_NS	50000000ull
static _Atomic uint64_t contended_until_ns;

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

void tpu__waitword_post(struct tpu__waitword *w)
{
	void (*kick)(void *arg) = w->kick;
	void *kick_arg = w->kick_arg;
	uint32_t was = atomic_load_explicit(word(w), memory_order_relaxed);

	if (was == TPU__WW_SLEEPING || was == TPU__WW_AWAY)
		w->posted_ns = tpu__mono_ns();
	/* After the exchange the waiter may return and @w be gone. */
	was = atomic_exchange(word(w), TPU__WW_POSTED);
	if (was == TPU__WW_SLEEPING)
		syscall(SYS_futex, &w->state, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
	else if (was == TPU__WW_AWAY)
		kick(kick_arg);
}

/* Learn from one hand-off: @spun_ns until posted, @slept when it was not. */
static void budget_update(uint64_t spun_ns, bool slept)
{
	uint32_t b = atomic_load_explicit(&spin_budget_ns, memory_order_relaxed);
	uint64_t want;

	if (slept) {
		b = b / 2 < SPIN_MIN_NS ? 0 : b / 2;
	} else {
		want = spun_ns * 2 < SPIN_MIN_NS ? SPIN_MIN_NS : spun_ns * 2;
		if (want > SPIN_MAX_NS)
			want = SPIN_MAX_NS;
		if (want > b)
			b = (uint32_t)want;
	}
	atomic_store_explicit(&spin_budget_ns, b, memory_order_relaxed);
}

static bool spin(struct tpu__waitword *w, uint64_t deadline_ns, const struct tpu__ww_agent *agent)
{
	uint64_t budget = atomic_load_explicit(&spin_budget_ns, memory_order_relaxed);
	uint64_t start, now, last, floor = agent && agent->spin_ns ? agent->spin_ns(agent->arg) : 0;
	unsigned int i;

	if (atomic_load_explicit(word(w), memory_order_acquire) == TPU__WW_POSTED) {
		budget_update(0, false);
		return true;
	}
	if (floor > budget)
		budget = floor;
	if (!budget)
		return false;
	start = tpu__mono_ns();
	if (tpu__spin_contended(start))
		return false;
	last = start;
	for (;;) {
		for (i = 0; i < SPIN_LOOKS; i++) {
			if (atomic_load_explicit(word(w), memory_order_acquire) == TPU__WW_POSTED) {
				budget_update(tpu__mono_ns() - start, false);
				return true;
			}
			tpu__cpu_relax();
		}
		now = tpu__mono_ns();
		if (now - last > TPU__PREEMPT_GAP_NS) {
			tpu__spin_preempted(now);
			return false;
		}
		/* The agent's own work (a copy, say) is no gap in our looks. */
		if (agent) {
			agent->poll(agent->arg, TPU__WW_SPIN_POLL);
			now = tpu__mono_ns();
		}
		last = now;
		if (now - start >= budget || (deadline_ns && now >= deadline_ns))
			return false;
	}
}

/*
 * More threads runnable on the machine than this process may run on: a
 * spinner then holds a core that a thread it waits for (or any other)
 * needs.  The kernel's count of runnable tasks (the fourth field of
 * /proc/loadavg, the reader included) is read at most every
 * RUNNABLE_CHECK_NS by whichever spinner finds it stale; without /proc the
 * answer is no.
 */
#define RUNNABLE_CHECK_NS	5000000ull
static _Atomic uint64_t runnable_checked_ns;
static _Atomic bool oversubscribed;

static unsigned int usable_cpus(void)
{
	static _Atomic unsigned int cached;
	unsigned int n = atomic_load_explicit(&cached, memory_order_relaxed);
	cpu_set_t set;

	if (!n) {
		n = sched_getaffinity(0, sizeof(set), &set) ? 1 : (unsigned int)CPU_COUNT(&set);
		atomic_store_explicit(&cached, n ? n : 1, memory_order_relaxed);
	}
	return n ? n : 1;
}

static bool read_oversubscribed(void)
{
	char buf[128];
	unsigned long running = 0;
	const char *p;
	ssize_t len;
	int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return false;
	len = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (len <= 0)
		return false;
	buf[len] = '\0';
	/* "0.10 0.20 0.30 R/T last_pid": R runnable of T. */
	p = buf;
	for (int field = 0; field < 3 && p; field++) {
		p = strchr(p, ' ');
		if (p)
			p++;
	}
	if (!p || sscanf(p, "%lu/", &running) != 1)
		return false;
	return running > usable_cpus();
}

static bool cpus_oversubscribed(uint64_t now_ns)
{
	uint64_t last = atomic_load_explicit(&runnable_checked_ns, memory_order_relaxed);

	if (now_ns - last >= RUNNABLE_CHECK_NS &&
	    atomic_compare_exchange_strong(&runnable_checked_ns, &last, now_ns))
		atomic_store_explicit(&oversubscribed, read_oversubscribed(), memory_order_relaxed);
	return atomic_load_explicit(&oversubscribed, memory_order_relaxed);
}

bool tpu__spin_contended(uint64_t now_ns)
{
	return now_ns < atomic_load_explicit(&contended_until_ns, memory_order_relaxed) ||
	       cpus_oversubscribed(now_ns);
}

void tpu__spin_preempted(uint64_t now_ns)
{
	atomic_store_explicit(&contended_until_ns, now_ns + CONTENDED_NS, memory_order_relaxed);
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
	uint64_t took = w->posted_ns > began ? w->posted_ns - began : tpu__mono_ns() - slept;

	budget_update(took, took > SPIN_MAX_NS);
}

/* Sleep on the word itself until posted or @deadline_ns: true when posted. */
static bool sleep_on_word(struct tpu__waitword *w, uint64_t deadline_ns, uint64_t began)
{
	uint32_t expected = TPU__WW_IDLE;
	uint64_t start, now;
	struct timespec ts;

	/* Announce the sleep; a post that came first wins the exchange. */
	if (!atomic_compare_exchange_strong(word(w), &expected, TPU__WW_SLEEPING) &&
	    expected == TPU__WW_POSTED)
		return true;
	start = tpu__mono_ns();
	for (;;) {
		if (atomic_load_explicit(word(w), memory_order_acquire) == TPU__WW_POSTED)
			break;
		now = tpu__mono_ns();
		if (deadline_ns) {
			if (now >= deadline_ns)
				return false;
			ts.tv_sec = (time_t)((deadline_ns - now) / 1000000000ull);
			ts.tv_nsec = (long)((deadline_ns - now) % 1000000000ull);
		}
		syscall(SYS_futex, &w->state, FUTEX_WAIT_PRIVATE, TPU__WW_SLEEPING,
			deadline_ns ? &ts : NULL, NULL, 0);
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
