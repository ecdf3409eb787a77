// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include <dirent.h>
#include <errno.h>
#include <execinfo.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tap.h"

static unsigned int points, failures;
static unsigned int watchdog_s;
static pid_t watchdog_pid;
static char last_point[160];

void tap_point(bool ok, const char *where, const char *expr, const char *fmt, ...)
{
	va_list ap, copy;

	points++;
	printf("%sok %u - ", ok ? "" : "not ", points);
	va_start(ap, fmt);
	va_copy(copy, ap);
	vprintf(fmt, ap);
	/* Kept, cut short if need be, for the watchdog's line. */
	vsnprintf(last_point, sizeof(last_point), fmt, copy);
	va_end(copy);
	va_end(ap);
	printf("\n");
	if (watchdog_s)
		alarm(watchdog_s);
	if (!ok) {
		failures++;
		printf("#   failed at %s: %s\n", where, expr);
	}
	fflush(stdout);
}

/* Every thread's stack on stderr, from gdb where installed (make deps). */
static void print_every_stack(void)
{
	char pid[16];
	pid_t gdb;

	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	gdb = getenv("TAP_NO_GDB") ? -1 : fork();
	if (gdb == 0) {
		dup2(STDERR_FILENO, STDOUT_FILENO);
		/* A gdb that hangs too gets two minutes (the alarm survives exec). */
		alarm(120);
		execlp("gdb", "gdb", "-p", pid, "-batch", "-nx", "-ex", "thread apply all bt",
		       (char *)NULL);
		_exit(127);
	}
	if (gdb > 0)
		waitpid(gdb, NULL, 0);
}

/*
 * The watchdog fired: no point for watchdog_s seconds.  Stdio from a
 * signal handler is not safe in general; this process is ending, and
 * what it prints is all there will be to read about the hang.
 */
static void watchdog_fired(int sig)
{
	/* A forked child's own alarm ends that child, as it would without us. */
	if (getpid() != watchdog_pid) {
		signal(sig, SIG_DFL);
		raise(sig);
		return;
	}
	fflush(stdout);
	fprintf(stderr, "# tap: no test point for %u s; the last was %u (%s); every thread:\n",
		watchdog_s, points, last_point);
	print_every_stack();
	printf("not ok %u - watchdog: no test point for %u s after point %u (%s)\n",
	       points + 1, watchdog_s, points, last_point);
	printf("1..%u\n", points + 1);
	fflush(stdout);
	_exit(3);
}

void tap_restart(void)
{
	points = 0;
	failures = 0;
	last_point[0] = 0;
}

void tap_watchdog(unsigned int seconds)
{
	watchdog_s = seconds;
	watchdog_pid = getpid();
	signal(SIGALRM, watchdog_fired);
	alarm(seconds);
}

/*
 * A fatal signal: say so on stderr with this thread's frames (offsets into
 * the binary: addr2line -e BINARY 0x...) and every thread's stack from gdb
 * where installed, then die of the same signal.  A forked worker that
 * crashes leaves its stack in the log, not only an exit status.
 */
static void crash_report(int sig, siginfo_t *si, void *uc)
{
	void *frames[64];

	(void)uc;
	/* Stdio from a handler, as the watchdog's: this process is ending. */
	fflush(stdout);
	fprintf(stderr, "# tap: pid %d died of %s at address %p; the last point was %u (%s)\n",
		(int)getpid(), strsignal(sig), si->si_addr, points, last_point);
	fflush(stderr);
	backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
	print_every_stack();
	signal(sig, SIG_DFL);
	raise(sig);
}

bool tap_sanitized(void)
{
#if defined(__SANITIZE_ADDRESS__)
	return true;
#else
	return false;
#endif
}

void tap_crash_stacks(void)
{
	static char alt[64 * 1024];
	static const int sigs[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE };
	stack_t ss = { .ss_sp = alt, .ss_size = sizeof(alt) };
	struct sigaction sa;

	/* The sanitizers and valgrind report a crash better themselves. */
	if (tap_sanitized() || under_valgrind())
		return;
	sigaltstack(&ss, NULL);
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = crash_report;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaction(sigs[i], &sa, NULL);
}

void tap_diag(const char *fmt, ...)
{
	va_list ap;

	printf("# ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

int tap_finish(void)
{
	printf("1..%u\n", points);
	if (failures)
		printf("# %u of %u failed\n", failures, points);
	fflush(stdout);
	return failures ? 1 : 0;
}

/*
 * Descriptors open now, less the directory's own and those a waiting thread
 * of the library holds for a moment to read its run delay
 * (/proc/thread-self/schedstat, lib/base/spin_policy.c): another thread
 * spinning at the instant of the count is not a leak.
 */
int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	char target[64];
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d))) {
		ssize_t len;

		if (e->d_name[0] == '.')
			continue;
		len = readlinkat(dirfd(d), e->d_name, target, sizeof(target) - 1);
		if (len > 0) {
			target[len] = '\0';
			if (!strncmp(target, "/proc/", 6) && strstr(target, "/schedstat"))
				continue;
		}
		n++;
	}
	closedir(d);
	return n - 1;	/* the directory's own */
}

bool hung_up(int fd)
{
	char b;
	ssize_t n = recv(fd, &b, 1, MSG_DONTWAIT);

	return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

void deadline_in(struct timespec *until, int ms)
{
	clock_gettime(CLOCK_REALTIME, until);
	until->tv_sec += ms / 1000;
	until->tv_nsec += (long)(ms % 1000) * 1000000;
	if (until->tv_nsec >= 1000000000) {
		until->tv_sec++;
		until->tv_nsec -= 1000000000;
	}
}

unsigned int usable_cpus(void)
{
	cpu_set_t set;

	return sched_getaffinity(0, sizeof(set), &set) ? 1 : (unsigned int)CPU_COUNT(&set);
}

bool under_valgrind(void)
{
	const char *p = getenv("LD_PRELOAD");

	return p && strstr(p, "vgpreload");
}

bool first_two_cpus(int cpus[2])
{
	cpu_set_t set;
	int found = 0;

	if (sched_getaffinity(0, sizeof(set), &set))
		return false;
	for (int c = 0; c < CPU_SETSIZE && found < 2; c++)
		if (CPU_ISSET(c, &set))
			cpus[found++] = c;
	return found == 2;
}

int bind_to_cpu(int cpu)
{
	cpu_set_t one;

	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	return sched_setaffinity(0, sizeof(one), &one) ? -1 : 0;
}
