// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The library's only log: TPU_LOG=debug in the environment turns on one
 * line per decision worth explaining (which rendezvous implementation was
 * chosen and why).  Read once, so a program cannot pay for getenv per call.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static bool log_debug;

static void log_init(void)
{
	const char *v = getenv("TPU_LOG");

	log_debug = v && strcmp(v, "debug") == 0;
}

bool tpu__log_debug_enabled(void)
{
	pthread_once(&log_once, log_init);
	return log_debug;
}

void tpu__log_debug(const char *fmt, ...)
{
	char line[512];
	va_list ap;

	if (!tpu__log_debug_enabled())
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	/* One fprintf per line, so lines of several threads do not interleave. */
	fprintf(stderr, "tpu: %s\n", line);
}
