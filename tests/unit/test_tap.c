// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The TAP producer's watchdog (tap.c): a run that stops making progress
 * fails by itself, naming the last point, instead of holding its VM or CI
 * until an outer timeout says nothing about where it stopped.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"

/* Runs in a child with stdout on @fd: one point, then a hang. */
static void hang_after_one_point(int fd)
{
	dup2(fd, STDOUT_FILENO);
	setenv("TAP_NO_GDB", "1", 1);
	tap_restart();
	tap_watchdog(1);
	tap_point(true, "here", "true", "the point before the hang");
	for (;;)
		pause();
}

/* Runs in a child: points 0.3 s apart for 1.5 s, then a normal end. */
static void steady_points(int fd)
{
	int i;

	dup2(fd, STDOUT_FILENO);
	setenv("TAP_NO_GDB", "1", 1);
	tap_restart();
	tap_watchdog(1);
	for (i = 0; i < 5; i++) {
		usleep(300000);
		tap_point(true, "here", "true", "steady %d", i);
	}
	_exit(tap_finish());
}

/* Runs in a child with stdout and stderr on @fd: one point, then a read through NULL. */
static void crash_after_one_point(int fd)
{
	volatile int *nowhere = NULL;

	dup2(fd, STDOUT_FILENO);
	dup2(fd, STDERR_FILENO);
	setenv("TAP_NO_GDB", "1", 1);
	tap_restart();
	tap_crash_stacks();
	tap_point(true, "here", "true", "the point before the crash");
	fflush(stdout);
	printf("%d\n", *nowhere);
}

static int run_child(void (*fn)(int), char *out, size_t size)
{
	int p[2], status = -1;
	size_t len = 0;
	ssize_t n;
	pid_t pid;

	if (pipe(p))
		return -1;
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		close(p[0]);
		fn(p[1]);
		_exit(99);
	}
	close(p[1]);
	while (len + 1 < size && (n = read(p[0], out + len, size - 1 - len)) > 0)
		len += (size_t)n;
	out[len] = 0;
	close(p[0]);
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return -1;
	return status;
}

void test_tap(void)
{
	char out[8192];
	int status;

	status = run_child(hang_after_one_point, out, sizeof(out));
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 3,
	      "tap: a run with no point for its watchdog's time exits 3 (status 0x%x)", status);
	CHECK(strstr(out, "ok 1 - the point before the hang\n") != NULL &&
	      strstr(out, "not ok 2 - watchdog: no test point for 1 s after point 1 "
		     "(the point before the hang)\n") != NULL && strstr(out, "\n1..2\n") != NULL,
	      "tap: it prints a failing point naming the last one, and the plan");
	if (!strstr(out, "not ok 2"))
		tap_diag("the child printed: %s", out);

	status = run_child(crash_after_one_point, out, sizeof(out));
	if (under_valgrind() || tap_sanitized()) {
		CHECK(WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status)),
		      "tap: a crash ends the run (status 0x%x; its report is the sanitizer's or "
		      "valgrind's)", status);
	} else {
		CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV,
		      "tap: a crash still ends the process with its signal (status 0x%x)", status);
		CHECK(strstr(out, "died of Segmentation fault at address (nil); the last point "
			     "was 1 (the point before the crash)") != NULL &&
		      strstr(out, "unit_tests") != NULL,
		      "tap: it prints the signal, the address, the last point and the frames");
		if (!strstr(out, "died of"))
			tap_diag("the child printed: %s", out);
	}

	status = run_child(steady_points, out, sizeof(out));
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0 && !strstr(out, "watchdog") &&
	      strstr(out, "ok 5 - steady 4\n1..5\n") != NULL,
	      "tap: points closer together than the watchdog's time keep it quiet (status 0x%x)",
	      status);
}
