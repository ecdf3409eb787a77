// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The waiters' spin policy (lib/base/spin_policy.c): decided from this
 * process's own threads.  A busy unrelated process, another thread's
 * preemption or another thread's slow hand-offs must not stop a waiter
 * from spinning, and a thread that backs off does so for a bounded time.
 *
 * Whether a wait spins is seen through an agent whose poll posts the word:
 * the poll runs only while the waiter spins, so a waiter that sleeps at
 * once is not posted and times out.  Each probe runs in a new thread, whose
 * spin state is fresh.
 */
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctx/ctx.h"
#include "pipe_harness.h"
#include "tap.h"
#include "waitword.h"

#define PROBE_DEADLINE_NS	20000000ull	/* a waiter that sleeps gives up after this */
#define PROBE_TRIES		10		/* a preempted probe tries again */
#define BACKOFF_MAX_NS		50000000ull	/* TPU_SPIN_BACKOFF_US's default */

static void post_in_poll(void *arg, enum tpu__ww_phase phase)
{
	if (phase == TPU__WW_SPIN_POLL)
		tpu__waitword_post(arg);
}

/* Whether a wait of this thread spins: its poll posts it before the deadline. */
static bool wait_spins(void)
{
	for (int i = 0; i < PROBE_TRIES; i++) {
		struct tpu__waitword w = TPU__WAITWORD_INIT;
		struct tpu__ww_agent agent = { .poll = post_in_poll, .arg = &w };

		if (tpu__waitword_wait_with(&w, tpu__deadline_ns(PROBE_DEADLINE_NS), &agent))
			return true;
	}
	return false;
}

static void *probe_thread(void *arg)
{
	*(bool *)arg = wait_spins();
	return NULL;
}

/* wait_spins() in a new thread. */
static bool fresh_thread_spins(void)
{
	pthread_t t;
	bool spun = false;

	if (pthread_create(&t, NULL, probe_thread, &spun))
		return false;
	pthread_join(t, NULL);
	return spun;
}

/*
 * More runnable threads on the machine than cores, none of this process,
 * all on one core (the last we may use): the probe runs on another.
 */
static void busy_process_does_not_stop_spinning(void)
{
	unsigned int n = usable_cpus() + 1, i;
	cpu_set_t set, last;
	pid_t kids[64];
	bool spun;
	int cpu;

	/* valgrind runs one thread at a time, and slowly: the probe sees itself preempted. */
	if (under_valgrind()) {
		CHECK(true, "spin_policy: busy processes elsewhere # SKIP under valgrind");
		return;
	}
	CPU_ZERO(&last);
	if (!sched_getaffinity(0, sizeof(set), &set)) {
		for (cpu = CPU_SETSIZE - 1; cpu >= 0 && !CPU_ISSET(cpu, &set); cpu--)
			;
		if (cpu >= 0)
			CPU_SET(cpu, &last);
	}
	for (i = 0; i < n && i < 64; i++) {
		kids[i] = fork();
		if (kids[i] == 0) {
			sched_setaffinity(0, sizeof(last), &last);
			if (nice(19) < 0) {}
			for (;;)
				;
		}
	}
	usleep(20000);
	spun = fresh_thread_spins();
	for (i = 0; i < n && i < 64; i++) {
		if (kids[i] > 0) {
			kill(kids[i], SIGKILL);
			waitpid(kids[i], NULL, 0);
		}
	}
	CHECK(spun, "spin_policy: %u busy processes elsewhere do not stop a waiter spinning", n);
}

/*
 * Each look below runs in a new thread, whose first look at its own run
 * delay only records it: what is checked is the back-off alone, not the
 * load of the machine that runs the test.  Times are made up (@now plus
 * some), as the policy takes them from its caller.
 */
struct looks {
	uint64_t now;
	bool preempted_quiet;	/* the preempted thread, right after */
	bool other_quiet;	/* another thread, at the same time */
	bool one_short;		/* one preemption: free again 5 ms later */
	bool many_long;		/* 30 preemptions: still quiet half the bound later */
	bool many_bounded;	/* and free again after the bound */
};

static void *preempted_look(void *arg)
{
	struct looks *l = arg;

	tpu__spin_preempted(l->now);
	l->preempted_quiet = tpu__spin_contended(l->now + 1);
	return NULL;
}

static void *other_look(void *arg)
{
	struct looks *l = arg;

	l->other_quiet = tpu__spin_contended(l->now + 1);
	return NULL;
}

static void *one_preemption(void *arg)
{
	struct looks *l = arg;

	tpu__spin_preempted(l->now);
	l->one_short = !tpu__spin_contended(l->now + 5000000ull);
	return NULL;
}

static void *many_preemptions(void *arg)
{
	struct looks *l = arg;

	for (int i = 0; i < 30; i++)
		tpu__spin_preempted(l->now);
	l->many_bounded = !tpu__spin_contended(l->now + BACKOFF_MAX_NS + 1);
	l->many_long = tpu__spin_contended(l->now + BACKOFF_MAX_NS / 2);
	return NULL;
}

static bool in_thread(void *(*fn)(void *), struct looks *l)
{
	pthread_t t;

	if (pthread_create(&t, NULL, fn, l))
		return false;
	pthread_join(t, NULL);
	return true;
}

/* One thread's preemption quiets that thread alone, for a short while. */
static void preemption_backs_off_one_thread(void)
{
	struct looks l = { .now = tpu__mono_ns() };

	if (!in_thread(preempted_look, &l) || !in_thread(other_look, &l) ||
	    !in_thread(one_preemption, &l) || !in_thread(many_preemptions, &l)) {
		CHECK(false, "spin_policy: pthread_create");
		return;
	}
	CHECK(l.preempted_quiet, "spin_policy: a preempted thread stops spinning");
	CHECK(!l.other_quiet,
	      "spin_policy: another thread's preemption does not stop this one spinning");
	CHECK(fresh_thread_spins(), "spin_policy: and a new waiter spins right after it");
	CHECK(l.one_short, "spin_policy: one preemption quiets its thread for less than 5 ms");
	CHECK(l.many_long && l.many_bounded,
	      "spin_policy: repeated preemptions quiet it longer, at most TPU_SPIN_BACKOFF_US");
}

struct late {
	struct tpu__waitword *w;
	unsigned int delay_us;
};

static void *post_late(void *arg)
{
	struct late *l = arg;

	usleep(l->delay_us);
	tpu__waitword_post(l->w);
	return NULL;
}

/* Hand-offs of this thread posted long after it began waiting. */
static void *slow_waiter(void *arg)
{
	for (int i = 0; i < 8; i++) {
		struct tpu__waitword w = TPU__WAITWORD_INIT;
		struct late l = { &w, 2000 };
		pthread_t t;

		if (pthread_create(&t, NULL, post_late, &l))
			break;
		tpu__waitword_wait(&w, 0);
		pthread_join(t, NULL);
	}
	/* Its own back-off is bounded: after the longest, it spins again. */
	usleep((useconds_t)(BACKOFF_MAX_NS / 1000 + 10000));
	*(bool *)arg = wait_spins();
	return NULL;
}

static void slow_handoffs_back_off_one_waiter(void)
{
	bool later = false;
	pthread_t t;

	if (pthread_create(&t, NULL, slow_waiter, &later)) {
		CHECK(false, "spin_policy: pthread_create");
		return;
	}
	pthread_join(t, NULL);
	CHECK(fresh_thread_spins(),
	      "spin_policy: another thread's slow hand-offs do not stop a waiter spinning");
	CHECK(later, "spin_policy: a waiter whose hand-offs slept spins again after its back-off");
}

struct core_wait {
	bool quiet;		/* tpu__spin_contended() said so at some point */
};

static void *shares_a_core(void *arg)
{
	struct core_wait *c = arg;
	uint64_t end = tpu__mono_ns() + 200000000ull;

	/* Two busy threads on one core: each waits for it about half the time. */
	while (!c->quiet && tpu__mono_ns() < end)
		c->quiet = tpu__spin_contended(tpu__mono_ns());
	return NULL;
}

/* A thread kept waiting for its core backs off. */
static void waiting_for_a_core_backs_off(void)
{
	struct core_wait c = { 0 };
	pthread_attr_t attr;
	pthread_t t;
	cpu_set_t one;
	pid_t kid;

	CPU_ZERO(&one);
	CPU_SET(0, &one);
	if (sched_getaffinity(0, sizeof(one), &one) || !CPU_ISSET(0, &one)) {
		CHECK(true, "spin_policy: core wait # SKIP cpu 0 not usable");
		return;
	}
	CPU_ZERO(&one);
	CPU_SET(0, &one);
	kid = fork();
	if (kid == 0) {
		sched_setaffinity(0, sizeof(one), &one);
		for (;;)
			;
	}
	pthread_attr_init(&attr);
	pthread_attr_setaffinity_np(&attr, sizeof(one), &one);
	if (kid < 0 || pthread_create(&t, &attr, shares_a_core, &c)) {
		CHECK(false, "spin_policy: fork, pthread_create");
	} else {
		pthread_join(t, NULL);
		CHECK(c.quiet, "spin_policy: a thread that waits for its core stops spinning");
	}
	pthread_attr_destroy(&attr);
	if (kid > 0) {
		kill(kid, SIGKILL);
		waitpid(kid, NULL, 0);
	}
}

/*
 * The list "spin_knob", run only by knob_bounds_back_off() in a fresh
 * process with TPU_SPIN_BACKOFF_US set (the knob is read once per process):
 * repeated preemptions quiet the thread for at most what SPIN_KNOB_WANT_US
 * says, and for about that long.
 */
void test_spin_knob(void)
{
	const char *want = getenv("SPIN_KNOB_WANT_US");
	uint64_t now = tpu__mono_ns(), max;

	if (!want || !getenv("TPU_SPIN_BACKOFF_US")) {
		CHECK(true, "spin_knob # SKIP run by the spin_policy list");
		return;
	}
	max = strtoull(want, NULL, 10) * 1000u;
	for (int i = 0; i < 30; i++)
		tpu__spin_preempted(now);
	if (!max)
		CHECK(!tpu__spin_contended(now + 1), "spin_knob: no back-off at all");
	else
		CHECK(tpu__spin_contended(now + max - max / 10) && !tpu__spin_contended(now + max + 1),
		      "spin_knob: the longest back-off is %s us", want);
}

/* This binary again, list spin_knob, with TPU_SPIN_BACKOFF_US=@value: its exit status. */
static int run_knob(const char *value, const char *want_us)
{
	char self[4096];
	/* Its path, not /proc/self/exe: under valgrind that names valgrind. */
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	pid_t pid;
	int ws;

	if (n <= 0)
		return -1;
	self[n] = '\0';
	pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		/* Its TAP lines would mix with ours. */
		if (null >= 0) {
			dup2(null, STDOUT_FILENO);
			dup2(null, STDERR_FILENO);
		}
		setenv("UNIT_ONLY", "spin_knob", 1);
		setenv("TPU_SPIN_BACKOFF_US", value, 1);
		setenv("SPIN_KNOB_WANT_US", want_us, 1);
		execl(self, "unit_tests", (char *)NULL);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &ws, 0) != pid || !WIFEXITED(ws))
		return -1;
	return WEXITSTATUS(ws);
}

static void knob_bounds_back_off(void)
{
	CHECK(run_knob("3000", "3000") == 0,
	      "spin_policy: TPU_SPIN_BACKOFF_US=3000 bounds the back-off at 3 ms");
	CHECK(run_knob("0", "0") == 0, "spin_policy: TPU_SPIN_BACKOFF_US=0 turns it off");
	CHECK(run_knob("soon", "50000") == 0,
	      "spin_policy: a TPU_SPIN_BACKOFF_US that is no number leaves the default, 50 ms");
}

/* While every core but one has a spinner of this process, no waiter spins. */
static void spinners_leave_a_core(void)
{
	unsigned int n = usable_cpus() - 1, held = 0;
	bool spun_full, spun_after;

	while (held < n && tpu__spin_enter())
		held++;
	spun_full = fresh_thread_spins();
	while (held) {
		tpu__spin_leave();
		held--;
	}
	spun_after = fresh_thread_spins();
	CHECK(!spun_full && spun_after,
	      "spin_policy: with %u spinners on %u cores no other waiter spins, and then it does",
	      n, n + 1);
}

static uint64_t agent_floor_ns, agent_max_ns;

static uint64_t floor_ns(void *arg)
{
	(void)arg;
	return agent_floor_ns;
}

static uint64_t max_ns(void *arg)
{
	(void)arg;
	return agent_max_ns;
}

/* wait_spins() with an agent that gives a floor and a cap, in a new thread. */
static void *capped_probe(void *arg)
{
	bool spun = false;

	for (int i = 0; i < PROBE_TRIES && !spun; i++) {
		struct tpu__waitword w = TPU__WAITWORD_INIT;
		struct tpu__ww_agent agent = {
			.poll = post_in_poll, .spin_ns = floor_ns, .spin_max_ns = max_ns, .arg = &w,
		};

		spun = tpu__waitword_wait_with(&w, tpu__deadline_ns(PROBE_DEADLINE_NS), &agent);
	}
	*(bool *)arg = spun;
	return NULL;
}

static bool capped_thread_spins(uint64_t floor, uint64_t max)
{
	pthread_t t;
	bool spun = false;

	agent_floor_ns = floor;
	agent_max_ns = max;
	if (pthread_create(&t, NULL, capped_probe, &spun))
		return false;
	pthread_join(t, NULL);
	return spun;
}

/*
 * An agent's cap bounds the spin, its floor included: a cap of 0 (the
 * remote rendezvous's waiter under TPU_SPIN_US=0) sleeps at once.
 */
static void agent_cap_bounds_the_spin(void)
{
	CHECK(!capped_thread_spins(0, 0), "spin_policy: an agent's cap of 0 stops the spin");
	CHECK(!capped_thread_spins(100000, 0),
	      "spin_policy: an agent's cap of 0 stops the spin its floor asks for");
	CHECK(capped_thread_spins(100000, 3000),
	      "spin_policy: a cap above 0 leaves a spin, floor and all");
	CHECK(capped_thread_spins(0, UINT64_MAX), "spin_policy: no cap, the thread's own budget");
}

static bool self_served_yes(void *arg)
{
	(void)arg;
	return true;
}

/* wait_spins() with an agent that says it serves itself, or not, in a new thread. */
static void *served_probe(void *arg)
{
	bool *io = arg, spun = false;

	for (int i = 0; i < PROBE_TRIES && !spun; i++) {
		struct tpu__waitword w = TPU__WAITWORD_INIT;
		struct tpu__ww_agent agent = {
			.poll = post_in_poll,
			.self_served = *io ? self_served_yes : NULL,
			.arg = &w,
		};

		spun = tpu__waitword_wait_with(&w, tpu__deadline_ns(PROBE_DEADLINE_NS), &agent);
	}
	*io = spun;
	return NULL;
}

static bool served_thread_spins(bool self_served)
{
	pthread_t t;
	bool io = self_served;

	if (pthread_create(&t, NULL, served_probe, &io))
		return false;
	pthread_join(t, NULL);
	return io;
}

/*
 * A spinner that does its poster's work itself may take the core a plain
 * spinner leaves for the thread it waits for, and only that one.
 */
static void self_served_takes_the_last_core(void)
{
	unsigned int n = usable_cpus() - 1, held = 0;
	uint64_t taken = tpu__spin_last_core_taken();
	bool plain, served, served_full;

	while (held < n && tpu__spin_enter())
		held++;
	plain = served_thread_spins(false);
	served = served_thread_spins(true);
	if (tpu__spin_enter_self_served())
		held++;
	served_full = served_thread_spins(true);
	while (held) {
		tpu__spin_leave();
		held--;
	}
	CHECK(!plain && served,
	      "spin_policy: with %u spinners on %u cores a self-served waiter still spins, "
	      "a plain one not", n, n + 1);
	CHECK(tpu__spin_last_core_taken() > taken, "spin_policy: and that spin is counted");
	CHECK(!served_full, "spin_policy: with every core spun on, not even a self-served one");
}

/* Bound to @cpu, and the spin policy told. */
static int pin_to(int cpu)
{
	if (bind_to_cpu(cpu))
		return -1;
	tpu__spin_cpus_changed();
	return 0;
}

/* A process that waits to be killed, bound to @cpu before this returns. */
static pid_t parked_on(int cpu)
{
	pid_t pid = fork();
	cpu_set_t one;

	if (pid == 0) {
		for (;;)
			pause();
	}
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	if (pid > 0 && sched_setaffinity(pid, sizeof(one), &one)) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return -1;
	}
	return pid;
}

/*
 * In a process bound to core @a (mpirun --bind-to core): the peers' cores
 * as the kernel says.  Bit k of the exit status is check k failed.
 */
static int lone_core_checks(int a, int b)
{
	pid_t there = parked_on(b), here = parked_on(a), gone = fork();
	int fails = 0;

	if (gone == 0)
		_exit(0);
	waitpid(gone, NULL, 0);
	if (there < 0 || here < 0 || pin_to(a) || !tpu__spin_lone_core())
		fails |= 1;
	if (!tpu__spin_peers_elsewhere(&there, 1))
		fails |= 2;
	if (tpu__spin_peers_elsewhere(&here, 1))
		fails |= 4;
	if (tpu__spin_peers_elsewhere((pid_t[]){ there, here }, 2))
		fails |= 8;
	if (tpu__spin_peers_elsewhere(&gone, 1) || tpu__spin_peers_elsewhere((pid_t[]){ 0 }, 1))
		fails |= 16;
	/* Alone on its core, a plain waiter leaves it; a self-served one spins. */
	if (served_thread_spins(false) || !served_thread_spins(true))
		fails |= 32;
	/* Never kill(-1): a fork that failed left -1 here. */
	for (int i = 0; i < 2; i++) {
		pid_t p = i ? here : there;

		if (p > 0) {
			kill(p, SIGKILL);
			waitpid(p, NULL, 0);
		}
	}
	return fails;
}

static void lone_core_peers(void)
{
	int cpus[2], ws = 0, fails;
	pid_t pid;

	if (!first_two_cpus(cpus)) {
		CHECK(true, "spin_policy: lone core # SKIP fewer than two usable cores");
		return;
	}
	CHECK(tpu__spin_peers_elsewhere((pid_t[]){ 0 }, 1),
	      "spin_policy: with more than one core, nobody shares ours");
	pid = fork();
	if (pid == 0)
		_exit(lone_core_checks(cpus[0], cpus[1]));
	fails = pid > 0 && waitpid(pid, &ws, 0) == pid && WIFEXITED(ws) ? WEXITSTATUS(ws) : 255;
	CHECK(!(fails & 1), "spin_policy: bound to one core, the process knows it");
	CHECK(!(fails & 2), "spin_policy: a peer bound to another core does not share ours");
	CHECK(!(fails & 4), "spin_policy: a peer bound to our core shares it");
	CHECK(!(fails & 8), "spin_policy: one peer sharing it among others is enough");
	CHECK(!(fails & 16), "spin_policy: a peer that is gone, or no pid, counts as sharing");
	if (under_valgrind())
		CHECK(true, "spin_policy: lone core spin # SKIP under valgrind");
	else
		CHECK(!(fails & 32),
		      "spin_policy: on a lone core a self-served waiter spins, a plain one not");
}

static void *lone_on(void *arg)
{
	int *cpu_then_lone = arg;

	*cpu_then_lone = !bind_to_cpu(*cpu_then_lone) && tpu__spin_lone_core();
	return NULL;
}

static void *on_both(void *arg)
{
	const int *cpus = arg;
	cpu_set_t two;
	bool *lone = (bool *)(cpus + 2);

	CPU_ZERO(&two);
	CPU_SET(cpus[0], &two);
	CPU_SET(cpus[1], &two);
	*lone = sched_setaffinity(0, sizeof(two), &two) || tpu__spin_lone_core();
	return NULL;
}

/*
 * In a child: this thread bound to cpus[0], and threads bound elsewhere
 * in turn.  Bit k of the exit status is check k failed.
 */
static int bound_apart_checks(const int cpus[2])
{
	int there = cpus[1], fails = 0;
	struct {
		int cpus[2];
		bool lone;
	} both = { { cpus[0], cpus[1] }, true };
	pthread_t t;

	if (pin_to(cpus[0]) || !tpu__spin_lone_core())
		return 1;
	/* Every thread on one core: a plain waiter leaves it. */
	if (fresh_thread_spins())
		fails |= 2;
	if (pthread_create(&t, NULL, lone_on, &there))
		return fails | 4;
	pthread_join(t, NULL);
	/* A thread of ours on another core: one waiter may spin for it. */
	if (!there || !fresh_thread_spins())
		fails |= 4;
	if (pthread_create(&t, NULL, on_both, &both))
		return fails | 8;
	pthread_join(t, NULL);
	/* Each thread's lone core is its own affinity, not the first asker's. */
	if (both.lone || !tpu__spin_lone_core())
		fails |= 8;
	/* Told the affinities changed, the process forgets the other cores. */
	tpu__spin_cpus_changed();
	if (fresh_thread_spins())
		fails |= 16;
	return fails;
}

/*
 * Threads of one process bound to different cores: the process's cores
 * are the union of its threads' affinities, so a waiter spins for a
 * thread on another core (an inprocess rendezvous between threads bound
 * apart took 30 us a round trip asleep, 1.5 us spinning).
 */
static void threads_bound_apart(void)
{
	int cpus[2], ws = 0, fails;
	pid_t pid;

	if (!first_two_cpus(cpus) || under_valgrind()) {
		CHECK(true, "spin_policy: threads bound apart # SKIP fewer than two usable cores, "
		      "or valgrind");
		return;
	}
	pid = fork();
	if (pid == 0)
		_exit(bound_apart_checks(cpus));
	fails = pid > 0 && waitpid(pid, &ws, 0) == pid && WIFEXITED(ws) ? WEXITSTATUS(ws) : 255;
	CHECK(!(fails & 1), "spin_policy: a thread bound to one core knows it");
	CHECK(!(fails & 2), "spin_policy: with every thread on that core, a waiter does not spin");
	CHECK(!(fails & 4), "spin_policy: with a thread bound to another core, a waiter spins");
	CHECK(!(fails & 8), "spin_policy: a thread on two cores is not on a lone core, "
	      "whoever asked first");
	CHECK(!(fails & 16), "spin_policy: told the affinities changed, the other core is forgotten");
}

#define PIPE_ROUNDS	50

/*
 * PIPE_ROUNDS messages of 64 bytes over a shm pipe between two contexts of
 * this process, each read before the next is written: the spins the two
 * context threads began meanwhile in *@spins, or (@all) since they were
 * made.  False if a step failed.
 */
static bool pipe_rounds(uint64_t *spins, bool all)
{
	static char out[64], in[64];
	struct tpu_payload pl = { .data = out, .len = sizeof(out) };
	struct tpu_message m = { .payloads = &pl, .npayloads = 1 };
	char url[64];
	struct pair pp;
	uint64_t before;
	bool ok;

	snprintf(url, sizeof(url), "shm://spinpolicy-%d", (int)getpid());
	ok = pair_open(&pp, url, "basic");
	before = ok && !all ? tpu__ctx_spins_begun(pp.a) + tpu__ctx_spins_begun(pp.b) : 0;
	for (int i = 0; ok && i < PIPE_ROUNDS; i++) {
		struct rec r;
		struct tag tw = { &r, 0 }, td = { &r, 1 }, tr = { &r, 2 };
		struct tpu_message *d;

		rec_init(&r);
		ok = !tpu_pipe_write(pp.client, &m, on_write, &tw) &&
		     !tpu_pipe_read_descriptor(pp.server, on_desc, &td) && rec_wait(&r, 2);
		d = NULL;
		for (int k = 0; ok && k < r.n; k++)
			if (r.order[k] == 1 && !r.st[k])
				d = r.msg[k];
		ok = ok && d && d->npayloads == 1 && d->payloads[0].len == sizeof(in);
		if (ok) {
			d->payloads[0].data = in;
			ok = !tpu_pipe_read(pp.server, d, on_write, &tr) && rec_wait(&r, 3);
		}
	}
	if (ok)
		*spins = tpu__ctx_spins_begun(pp.a) + tpu__ctx_spins_begun(pp.b) - before;
	pair_close(&pp);
	return ok;
}

/*
 * A context thread on a lone core does not spin for a peer that may need
 * that core: here both ends of the pipe are this very process.  With more
 * cores it does.
 */
static void context_thread_on_a_lone_core(void)
{
	bool vg = under_valgrind(), ok;
	uint64_t spins = 0;
	int ws = 0, rc;
	pid_t pid;

	if (usable_cpus() < 2 || vg) {
		CHECK(true, "spin_policy: context threads spin # SKIP %s",
		      vg ? "under valgrind" : "one core");
	} else {
		/* Counted from the start: a loaded host may quiet them after a preemption. */
		ok = pipe_rounds(&spins, true);
		CHECK(ok && spins > 0,
		      "spin_policy: on two cores the context threads spin for their peer (%llu)",
		      (unsigned long long)spins);
	}
	pid = fork();
	if (pid == 0) {
		int cpus[2];

		if (!first_two_cpus(cpus) || pin_to(cpus[0]))
			_exit(2);
		_exit(!pipe_rounds(&spins, false) ? 3 : spins ? 1 : 0);
	}
	rc = pid > 0 && waitpid(pid, &ws, 0) == pid && WIFEXITED(ws) ? WEXITSTATUS(ws) : 255;
	CHECK(rc == 0,
	      "spin_policy: bound to one core with its peer, a context thread does not spin (exit %d)",
	      rc);
}

void test_spin_policy(void)
{
	if (usable_cpus() < 2) {
		CHECK(true, "spin_policy # SKIP one core: nothing spins");
		return;
	}
	busy_process_does_not_stop_spinning();
	preemption_backs_off_one_thread();
	slow_handoffs_back_off_one_waiter();
	waiting_for_a_core_backs_off();
	knob_bounds_back_off();
	spinners_leave_a_core();
	agent_cap_bounds_the_spin();
	self_served_takes_the_last_core();
	lone_core_peers();
	threads_bound_apart();
	context_thread_on_a_lone_core();
}
