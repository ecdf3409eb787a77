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
#include <sys/types.h>

struct tpu__waitword {
	uint32_t state;		/* atomic access only: TPU__WW_* */
	/*
	 * Set before the word can be posted, when the waiter may sleep
	 * somewhere else (struct tpu__ww_agent.sleep): how a poster wakes it
	 * there.  Called only while the waiter is asleep, so what it touches
	 * lives at least until the waiter returns.
	 */
	void (*kick)(void *arg);
	void *kick_arg;
	/*
	 * When a poster found the waiter asleep: the hand-off's own length,
	 * which the waiter's wake-up latency would otherwise hide from the
	 * spin budget.  Written before state; 0 when not known.
	 */
	uint64_t posted_ns;
	/*
	 * Set by the waiter before the word can be posted: its wake-up may
	 * come late (TPU__WW_LATE_BOUND_NS at most), as for a producer told
	 * that its tensor was taken.  See tpu__waitword_post().
	 */
	bool late_ok;
};

#define TPU__WAITWORD_INIT	{ 0, NULL, NULL, 0, false }

/*
 * Mark @w posted and wake its waiter if it sleeps.  Once per word.
 *
 * A sleeping waiter of a @late_ok word that can only run on the poster's
 * own core (every thread of this process that waited is bound to that one
 * core) is not woken at once: waking it there preempts the poster, and
 * the waiter, a producer whose next wait is for the answer the poster has
 * yet to send, finds nothing and sleeps again; a round trip of two threads
 * on one core cost five context switches instead of two.  The poster owes
 * the wake-up and pays it when it next sleeps or sends
 * (tpu__waitword_flush()), by when it has posted what it had to say; the
 * waiter wakes by itself after TPU__WW_LATE_BOUND_NS, should the poster do
 * neither soon.
 */
void tpu__waitword_post(struct tpu__waitword *w);
/* Pay the wake-ups this thread owes (tpu__waitword_post()); before it sleeps. */
void tpu__waitword_flush(void);
/*
 * How late a @late_ok waiter may learn of its post at most.  Beyond the
 * scheduler's next tick (4 ms at 250 Hz): a sleep timed to end before it
 * reprograms the timer twice, and a round trip between two threads on one
 * core took 10 us with 2 ms here, 11.7 with 1 ms, 7.3 with 5 ms.
 */
#define TPU__WW_LATE_BOUND_NS	5000000u
/* Tests: wake-ups owed so far, by any thread; waiters that woke by the bound to find their post. */
uint64_t tpu__waitword_deferred(void);
uint64_t tpu__waitword_late_woken(void);

/*
 * Wait until @w is posted, or until @deadline_ns (CLOCK_MONOTONIC, 0 for
 * none) passes.  True when posted.
 */
bool tpu__waitword_wait(struct tpu__waitword *w, uint64_t deadline_ns);

/* What tpu__waitword_wait_with() tells its agent's @poll. */
enum tpu__ww_phase {
	TPU__WW_SPIN_BEGIN,	/* about to spin */
	TPU__WW_SPIN_POLL,	/* spinning, or woken: do some work if there is any */
	TPU__WW_SPIN_END,	/* done waiting: posted */
	TPU__WW_SPIN_GIVE_UP,	/* done waiting, not posted: sleeps now, or timed out */
};

/*
 * What a waiter may do besides waiting (see the cma rendezvous, whose
 * waiters do its helper thread's work).  @poll is called with SPIN_BEGIN
 * once, then now and then with SPIN_POLL while spinning and after every
 * wake-up, and with SPIN_END once at the end.  With @sleep, a waiter that
 * stops spinning sleeps there instead of on its word: @token reads what
 * @sleep then waits to change (a wake sequence), and the word's @kick
 * must change it.  The waiter then wakes once for the event it waits on
 * and does the work itself, instead of a helper waking first to do it and
 * then waking the waiter.  None of them may block, @sleep apart.
 */
struct tpu__ww_agent {
	void (*poll)(void *arg, enum tpu__ww_phase phase);
	uint32_t (*token)(void *arg);
	void (*sleep)(void *arg, uint32_t token, uint64_t deadline_ns);
	/*
	 * Optional: spin at least this long (ns), whatever the process's
	 * budget says: for an agent whose poll does the poster's work itself
	 * (the remote rendezvous's), so that the hand-offs it makes quick are
	 * not judged by the ones that had to sleep.  Not on a busy machine.
	 */
	uint64_t (*spin_ns)(void *arg);
	/*
	 * Optional: spin at most this long (ns), floor included; 0 sleeps at
	 * once.  For an agent that stands in for a thread whose spin the user
	 * set (TPU_SPIN_US=0 must stop the remote rendezvous's waiters too).
	 */
	uint64_t (*spin_max_ns)(void *arg);
	/*
	 * Optional: true when @poll itself does all the work that posts the
	 * word, the poster being another process (the remote rendezvous's
	 * waiter lent to its context, a cma waiter reading the shared
	 * table), and none of those processes shares this process's lone
	 * core (tpu__spin_peers_elsewhere).  Its spin then needs no other
	 * thread of this process to run, and may take this process's last
	 * usable core (tpu__spin_enter_self_served): a process bound to one
	 * core (mpirun --bind-to core, taskset) still spins for a peer bound
	 * to another.
	 */
	bool (*self_served)(void *arg);
	void *arg;
};

/*
 * tpu__waitword_wait() with an agent (@agent NULL: none).  @w->kick must
 * be set when @agent->sleep is.
 */
bool tpu__waitword_wait_with(struct tpu__waitword *w, uint64_t deadline_ns,
			     const struct tpu__ww_agent *agent);

/*
 * The spin policy (spin_policy.c, Documentation/library.rst "Spinning"):
 * per thread, from this process's own threads only.
 *
 * tpu__spin_contended: this thread is in a quiet period and should not
 * spin.  tpu__spin_preempted: this thread found itself descheduled
 * mid-spin: it alone backs off (1 ms, doubling up to TPU_SPIN_BACKOFF_US).
 */
bool tpu__spin_contended(uint64_t now_ns);
void tpu__spin_preempted(uint64_t now_ns);
/* A gap this long between two looks of a spinner: it was descheduled. */
#define TPU__PREEMPT_GAP_NS	200000u

/* A waiter's spin budget: between these, learned per thread. */
#define TPU__SPIN_MAX_NS	50000u	/* never spin longer than this */
#define TPU__SPIN_START_NS	20000u
#define TPU__SPIN_MIN_NS	2000u	/* below this, sleep at once */

/* How long this thread's next wait may spin (ns); 0: sleep at once. */
uint64_t tpu__spin_budget_ns(uint64_t now_ns);
/*
 * Learn from one hand-off of this thread: posted after @took_ns, @slept
 * when that was too long for a spin to have paid.
 */
void tpu__spin_learn(uint64_t took_ns, bool slept, uint64_t now_ns);
/* A spin of this thread was answered: its next back-off is short again. */
void tpu__spin_answered(void);
/*
 * Take a spinner's place (false: enough of this process's threads spin
 * already to leave no core for the thread they wait for); leave it after.
 */
bool tpu__spin_enter(void);
/*
 * The same for a spinner that needs no other thread of this process
 * (struct tpu__ww_agent.self_served): as many as the usable cores, one on
 * a single core.
 */
bool tpu__spin_enter_self_served(void);
/* This thread may run on one core only (its own CPU affinity). */
bool tpu__spin_lone_core(void);
/* Every thread of this process that waited may run on this thread's one core only. */
bool tpu__spin_one_core_for_all(void);
/*
 * Whether a self-served spinner waiting for the processes @pids may take
 * this process's lone core: none of them may run on it (their CPU
 * affinity, as the kernel says; a pid it cannot tell about counts as
 * sharing).  True when this thread has more than one core.  A system
 * call per pid: callers keep the answer for a while.
 */
bool tpu__spin_peers_elsewhere(const pid_t *pids, size_t n);
/*
 * Tests: self-served spins that took the core a plain spinner leaves free
 * (tpu__spin_enter_self_served beyond tpu__spin_enter's cap); and read
 * the threads' CPU affinity again (each thread reads its own at its first
 * spin and every 100 ms; the process's cores are the union of theirs).
 */
uint64_t tpu__spin_last_core_taken(void);
void tpu__spin_cpus_changed(void);
void tpu__spin_leave(void);

/* What a spinning thread does between two looks: let a sibling thread run. */
static inline void tpu__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* CLOCK_MONOTONIC now, in ns; and now + @ns (0 when @ns is 0). */
uint64_t tpu__mono_ns(void);
uint64_t tpu__deadline_ns(uint64_t ns);

#endif
