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
 *    spin of that thread is answered, and halved for each calm spell as
 *    long as itself (spin_state.c), so that isolated preemptions never add
 *    up to the longest period.  Only that thread backs off.
 *  - A thread that waited for a core (runnable, not running: the run delay
 *    of /proc/thread-self/schedstat) for more than 1/16 of the time since
 *    it last looked, at most every 2 ms, and was preempted meanwhile or
 *    waited more than 200 us a time on average (not only the short wait
 *    after each wake-up that every sleeper pays), backs off too: on oversubscribed
 *    cores its spin would hold a core that the thread it waits for needs.
 *    That is this thread's own experience of the load, not the machine's:
 *    busy processes on cores it does not use do not count.
 *  - At most one spinner fewer than the cores this process's threads may
 *    run on (the union of their CPU affinities) spin at once, so that the
 *    thread they wait for (often one of ours) finds a core; on a single
 *    core nothing spins.  A spinner that does its poster's work itself,
 *    the poster being another process, needs no thread of ours: it may
 *    take the last core, so that a process bound to one core (mpirun
 *    --bind-to core) still spins for a peer bound to another (38-45 us a
 *    sleeping round trip here, against 1-3 us).
 */
#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

#include "base.h"
#include "spin_state.h"
#include "waitword.h"

#define BACKOFF_MAX_US_DEFAULT	50000u

/* This thread's history; the decisions are spin_state.c's. */
static _Thread_local struct tpu__spin_state me;
static _Thread_local bool me_init, rq_unknown;
/*
 * This process's threads spinning now (tpu__spin_enter minus leave),
 * alone on its cache line: every wait writes it twice, and the fork
 * generation every call reads sat beside it.
 */
static struct {
	_Alignas(64) _Atomic unsigned int n;
	char pad[64 - sizeof(unsigned int)];
} spinning;

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

static struct tpu__spin_state *self(void)
{
	if (!me_init) {
		me_init = true;
		tpu__spin_state_init(&me, backoff_max_ns());
	}
	return &me;
}

/* This thread's run delay so far; false when the kernel does not say. */
static bool read_run_delay(struct tpu__spin_rq *out)
{
	char buf[96];
	unsigned long long run, wait, slices;
	struct rusage ru;
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
	if (sscanf(buf, "%llu %llu %llu", &run, &wait, &slices) != 3)
		return false;
	out->delay_ns = wait;
	out->slices = slices;
	/* Without the count, every run counts as a preemption (as before). */
	out->preempted = getrusage(RUSAGE_THREAD, &ru) ? slices : (uint64_t)ru.ru_nivcsw;
	return true;
}

/* The run delay when the state asks for it (at most every 2 ms), else NULL. */
static const struct tpu__spin_rq *run_delay(const struct tpu__spin_state *t, uint64_t now_ns,
					    struct tpu__spin_rq *rq)
{
	if (rq_unknown || !tpu__spin_state_wants_rq(t, now_ns))
		return NULL;
	if (!read_run_delay(rq)) {
		rq_unknown = true;
		return NULL;
	}
	return rq;
}

bool tpu__spin_contended(uint64_t now_ns)
{
	struct tpu__spin_state *t = self();
	struct tpu__spin_rq rq;

	return tpu__spin_state_contended(t, now_ns, run_delay(t, now_ns, &rq));
}

void tpu__spin_preempted(uint64_t now_ns)
{
	tpu__spin_state_preempted(self(), now_ns);
}

uint64_t tpu__spin_budget_ns(uint64_t now_ns)
{
	struct tpu__spin_state *t = self();
	struct tpu__spin_rq rq;

	return tpu__spin_state_budget(t, now_ns, run_delay(t, now_ns, &rq));
}

void tpu__spin_learn(uint64_t took_ns, bool slept, uint64_t now_ns)
{
	tpu__spin_state_learn(self(), took_ns, slept, now_ns);
}

void tpu__spin_answered(void)
{
	tpu__spin_state_answered(self());
}

/*
 * CPU affinity differs between threads (a benchmark or a runtime binds
 * each thread to a core of its own), so each thread reads its own, and
 * the process's count is the union of what every thread that asked may
 * run on: two threads bound to two cores may have one spinner between
 * them, where the first thread's single core alone said none.  The union
 * only grows until tpu__spin_cpus_changed() empties it (a thread that
 * rebinds itself says so there); a thread rereads its own then, or after
 * AFFINITY_NS (looked at every AFFINITY_CALLS calls).
 */
#define AFFINITY_WORDS	(CPU_SETSIZE / 64)
#define AFFINITY_NS	100000000ull
#define AFFINITY_CALLS	64u

static _Atomic uint64_t seen_cpus[AFFINITY_WORDS];
/*
 * Bumped whenever seen_cpus changes (a new CPU, or emptied): a thread
 * counts the union again only then, not at every spin (sixteen words,
 * counted in software without -mpopcnt: 500 instructions an inprocess
 * round trip).
 */
static _Atomic unsigned int seen_version;
/* Bumped by tpu__spin_cpus_changed(); a thread with another rereads. */
static _Atomic unsigned int affinity_gen = 1;
/* Spins that took the core a plain spinner must leave (tests). */
static _Atomic uint64_t last_core_taken;

/* This thread's affinity: its count, its one CPU when that is 1 (else -1). */
static _Thread_local struct {
	unsigned int gen, n, calls;
	int cpu;
	uint64_t read_ns;
	/* seen_cpus counted at that version (0: empty, as the union starts) */
	unsigned int union_n, union_version;
} mine;

static void read_my_cpus(void)
{
	unsigned int gen = atomic_load_explicit(&affinity_gen, memory_order_acquire);
	uint64_t now;
	cpu_set_t set;

	/* The clock only every AFFINITY_CALLS calls: a context thread asks at every spin. */
	if (mine.gen == gen && ++mine.calls % AFFINITY_CALLS)
		return;
	now = tpu__mono_ns();
	if (mine.gen == gen && now - mine.read_ns < AFFINITY_NS)
		return;
	mine.gen = gen;
	mine.read_ns = now;
	mine.cpu = -1;
	if (sched_getaffinity(0, sizeof(set), &set)) {
		mine.n = 1;
		return;
	}
	mine.n = (unsigned int)CPU_COUNT(&set);
	for (int c = 0; c < CPU_SETSIZE; c++) {
		if (!CPU_ISSET(c, &set))
			continue;
		if (mine.n == 1)
			mine.cpu = c;
		if (!(atomic_fetch_or_explicit(&seen_cpus[c / 64], 1ull << (c % 64),
					       memory_order_relaxed) & (1ull << (c % 64))))
			atomic_fetch_add_explicit(&seen_version, 1, memory_order_release);
	}
	mine.n = mine.n ? mine.n : 1;
}

/* The cores this process's asking threads may run on, this one's included. */
static unsigned int usable_cpus(void)
{
	unsigned int n = 0, version;

	read_my_cpus();
	/* Read before the words: a change after it is counted at the next call. */
	version = atomic_load_explicit(&seen_version, memory_order_acquire);
	if (mine.union_version == version) {
		n = mine.union_n;
	} else {
		for (int i = 0; i < AFFINITY_WORDS; i++)
			n += (unsigned int)__builtin_popcountll(
				atomic_load_explicit(&seen_cpus[i], memory_order_relaxed));
		mine.union_n = n;
		mine.union_version = version;
	}
	return n > mine.n ? n : mine.n;
}

static bool enter(unsigned int cap)
{
	unsigned int n = atomic_load_explicit(&spinning.n, memory_order_relaxed);

	do {
		if (n >= cap)
			return false;
	} while (!atomic_compare_exchange_weak_explicit(&spinning.n, &n, n + 1,
							memory_order_relaxed,
							memory_order_relaxed));
	return true;
}

bool tpu__spin_enter(void)
{
	return enter(usable_cpus() - 1);
}

bool tpu__spin_enter_self_served(void)
{
	unsigned int cap = usable_cpus();

	if (!enter(cap))
		return false;
	if (atomic_load_explicit(&spinning.n, memory_order_relaxed) >= cap)
		atomic_fetch_add_explicit(&last_core_taken, 1, memory_order_relaxed);
	return true;
}

uint64_t tpu__spin_last_core_taken(void)
{
	return atomic_load_explicit(&last_core_taken, memory_order_relaxed);
}

void tpu__spin_cpus_changed(void)
{
	for (int i = 0; i < AFFINITY_WORDS; i++)
		atomic_store_explicit(&seen_cpus[i], 0, memory_order_relaxed);
	atomic_fetch_add_explicit(&seen_version, 1, memory_order_release);
	atomic_fetch_add_explicit(&affinity_gen, 1, memory_order_release);
}

bool tpu__spin_lone_core(void)
{
	read_my_cpus();
	return mine.n == 1;
}

bool tpu__spin_one_core_for_all(void)
{
	return usable_cpus() == 1;
}

bool tpu__spin_peers_elsewhere(const pid_t *pids, size_t n)
{
	int c;

	if (!tpu__spin_lone_core())
		return true;
	c = mine.cpu;
	if (c < 0)
		return false;
	for (size_t i = 0; i < n; i++) {
		cpu_set_t set;

		/* One we cannot ask about may share our core. */
		if (pids[i] <= 0 || sched_getaffinity(pids[i], sizeof(set), &set) ||
		    CPU_ISSET(c, &set))
			return false;
	}
	return true;
}

void tpu__spin_leave(void)
{
	atomic_fetch_sub_explicit(&spinning.n, 1, memory_order_relaxed);
}
