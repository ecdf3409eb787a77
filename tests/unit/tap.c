// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tap.h"

static unsigned int points, failures;

void tap_point(bool ok, const char *where, const char *expr, const char *fmt, ...)
{
	va_list ap;

	points++;
	printf("%sok %u - ", ok ? "" : "not ", points);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	if (!ok) {
		failures++;
		printf("#   failed at %s: %s\n", where, expr);
	}
	fflush(stdout);
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
