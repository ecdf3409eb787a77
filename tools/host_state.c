// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "host_state.h"
#include "json.h"

#define BATCH		64		/* round trips timed together */
#define BATCHES		33		/* odd, so the median is one batch */
#define WARM_NS		2000000ull	/* round trips before the timed ones */
#define BOUND_NS	200000000ull	/* the whole probe, partner or not */
#define STOP		UINT32_MAX

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/*
 * Spin until *@w holds @want, reading the clock only every 256 turns; false
 * once @deadline passed.
 */
static bool spin_for(_Atomic uint32_t *w, uint32_t want, uint64_t deadline)
{
	unsigned int turns = 0;

	while (atomic_load_explicit(w, memory_order_acquire) != want) {
		relax();
		if (++turns % 256 == 0 && now_ns() > deadline)
			return false;
	}
	return true;
}

/* The partner: pinned to @cpu, answers every odd value with the next even one. */
static void __attribute__((noreturn)) partner(_Atomic uint32_t *w, int cpu)
{
	cpu_set_t set;
	uint32_t v;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		_exit(1);
	atomic_store_explicit(w, 2, memory_order_release);	/* pinned and ready */
	for (;;) {
		v = atomic_load_explicit(w, memory_order_acquire);
		if (v == STOP)
			_exit(0);
		if (v & 1)
			atomic_store_explicit(w, v + 1, memory_order_release);
		else
			relax();
	}
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Two CPUs of @set, or false. */
static bool two_cpus(const cpu_set_t *set, int *a, int *b)
{
	int cpu, found = 0;

	for (cpu = 0; cpu < CPU_SETSIZE && found < 2; cpu++) {
		if (!CPU_ISSET(cpu, set))
			continue;
		if (found++ == 0)
			*a = cpu;
		else
			*b = cpu;
	}
	return found == 2;
}

/* One round trip: hand the line over with an odd value, wait for it back. */
static bool round_trip(struct host_state *s, _Atomic uint32_t *w, uint32_t *v, uint64_t deadline)
{
	atomic_store_explicit(w, *v + 1, memory_order_release);
	*v += 2;
	if (spin_for(w, *v, deadline))
		return true;
	snprintf(s->why, sizeof(s->why), "its partner on CPU %d stopped answering (not running?)",
		 s->cpu_b);
	return false;
}

static void measure(struct host_state *s, _Atomic uint32_t *w, uint64_t deadline)
{
	double batch_ns[BATCHES];
	uint64_t warm_until;
	uint32_t v = 2;
	unsigned int i, k;

	if (!spin_for(w, 2, deadline)) {
		snprintf(s->why, sizeof(s->why), "its partner on CPU %d did not start within %llu ms",
			 s->cpu_b, BOUND_NS / 1000000ull);
		return;
	}
	/*
	 * An idle virtual CPU takes a while to be running for real; the mode
	 * of the host is what stays once both are.
	 */
	warm_until = now_ns() + WARM_NS;
	while (now_ns() < warm_until)
		if (!round_trip(s, w, &v, deadline))
			return;
	for (i = 0; i < BATCHES; i++) {
		uint64_t t0 = now_ns();

		for (k = 0; k < BATCH; k++)
			if (!round_trip(s, w, &v, deadline))
				return;
		batch_ns[i] = (double)(now_ns() - t0) / BATCH;
	}
	qsort(batch_ns, BATCHES, sizeof(batch_ns[0]), cmp_double);
	s->line_rtt_ns = batch_ns[BATCHES / 2];
	s->line_rtt_max_ns = batch_ns[BATCHES - 1];
}

void host_state_sample(struct host_state *s)
{
	cpu_set_t mine, one;
	_Atomic uint32_t *w;
	pid_t pid;

	memset(s, 0, sizeof(*s));
	s->line_rtt_ns = s->line_rtt_max_ns = -1;
	s->cpu_a = s->cpu_b = -1;
	if (getloadavg(&s->load1, 1) != 1)
		s->load1 = -1;
	if (sched_getaffinity(0, sizeof(mine), &mine)) {
		snprintf(s->why, sizeof(s->why), "sched_getaffinity: %s", strerror(errno));
		return;
	}
	if (!two_cpus(&mine, &s->cpu_a, &s->cpu_b)) {
		snprintf(s->why, sizeof(s->why), "this process may run on one CPU only");
		return;
	}
	w = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (w == MAP_FAILED) {
		snprintf(s->why, sizeof(s->why), "mmap: %s", strerror(errno));
		return;
	}
	atomic_store(w, 0);
	pid = fork();
	if (pid == 0)
		partner(w, s->cpu_b);
	if (pid < 0) {
		snprintf(s->why, sizeof(s->why), "fork: %s", strerror(errno));
		munmap((void *)w, 4096);
		return;
	}
	CPU_ZERO(&one);
	CPU_SET(s->cpu_a, &one);
	if (sched_setaffinity(0, sizeof(one), &one))
		snprintf(s->why, sizeof(s->why), "sched_setaffinity: %s", strerror(errno));
	else
		measure(s, w, now_ns() + BOUND_NS);
	atomic_store(w, STOP);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	sched_setaffinity(0, sizeof(mine), &mine);
	munmap((void *)w, 4096);
}

static void print_one(FILE *f, const struct host_state *s)
{
	if (s->line_rtt_ns < 0)
		fprintf(f, "not measured (%s)", s->why);
	else
		fprintf(f, "%.0f ns (slowest batch %.0f)", s->line_rtt_ns, s->line_rtt_max_ns);
	fprintf(f, ", load %.2f", s->load1);
}

void host_state_print(FILE *f, const struct host_state *before, const struct host_state *after)
{
	const struct host_state *any = before->line_rtt_ns >= 0 || !after ? before : after;

	fprintf(f, "host: cache-line round trip between CPUs %d and %d: ", any->cpu_a, any->cpu_b);
	print_one(f, before);
	if (after) {
		fprintf(f, " before the run; ");
		print_one(f, after);
		fprintf(f, " after");
	}
	fprintf(f, "\n");
}

static void json_one(struct json *j, const char *key, const struct host_state *s)
{
	json_object_begin(j, key);
	json_double(j, "loadavg_1min", s->load1, 2);
	json_i64(j, "cpu_a", s->cpu_a);
	json_i64(j, "cpu_b", s->cpu_b);
	if (s->line_rtt_ns < 0) {
		json_null(j, "line_rtt_ns");
		json_string(j, "why", s->why);
	} else {
		json_double(j, "line_rtt_ns", s->line_rtt_ns, 1);
		json_double(j, "line_rtt_max_ns", s->line_rtt_max_ns, 1);
	}
	json_object_end(j);
}

void host_state_json(struct json *j, const struct host_state *before,
		     const struct host_state *after)
{
	json_one(j, after ? "host_before" : "host", before);
	if (after)
		json_one(j, "host_after", after);
}

int bench_host_main(int argc, char **argv)
{
	struct host_state s;
	struct json j;
	bool as_json = argc > 1 && !strcmp(argv[1], "--json");

	if (argc > 1 && !as_json) {
		fprintf(stderr, "usage: tpbench host [--json]\n");
		return 1;
	}
	host_state_sample(&s);
	if (as_json) {
		json_init(&j, stdout);
		json_object_begin(&j, NULL);
		host_state_json(&j, &s, NULL);
		json_object_end(&j);
		json_finish(&j);
	} else {
		host_state_print(stdout, &s, NULL);
	}
	return s.line_rtt_ns < 0 ? 2 : 0;
}
