// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The library's only log: TPU_LOG=debug in the environment turns on one
 * line per decision worth explaining (which rendezvous implementation was
 * chosen and why).  Read once, so a program cannot pay for getenv per call.
 * tpu_log_set_handler() sends the lines elsewhere (a binding's own log) and
 * can turn them on without the variable.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static bool log_debug;
/* tpu_log_set_handler(): the handler, under the lock (lines are rare). */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static tpu_log_fn log_fn;
static void *log_arg;
static bool log_forced;

static void log_init(void)
{
	const char *v = getenv("TPU_LOG");

	log_debug = v && strcmp(v, "debug") == 0;
}

bool tpu__log_debug_enabled(void)
{
	pthread_once(&log_once, log_init);
	return log_debug || __atomic_load_n(&log_forced, __ATOMIC_RELAXED);
}

void tpu_log_set_handler(tpu_log_fn fn, void *arg, bool debug)
{
	pthread_mutex_lock(&log_lock);
	log_fn = fn;
	log_arg = arg;
	__atomic_store_n(&log_forced, fn && debug, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&log_lock);
}

static void log_line(const char *fmt, va_list ap)
{
	char line[512];

	vsnprintf(line, sizeof(line), fmt, ap);
	pthread_mutex_lock(&log_lock);
	if (log_fn)
		log_fn(log_arg, line);
	else	/* one fprintf per line, so lines of several threads do not interleave */
		fprintf(stderr, "tpu: %s\n", line);
	pthread_mutex_unlock(&log_lock);
}

void tpu__log_debug(const char *fmt, ...)
{
	va_list ap;

	if (!tpu__log_debug_enabled())
		return;
	va_start(ap, fmt);
	log_line(fmt, ap);
	va_end(ap);
}

void tpu__log_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_line(fmt, ap);
	va_end(ap);
}
