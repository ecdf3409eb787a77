// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* tpu_log_set_handler(): the log's lines go to the handler, and stop going there. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "tap.h"
#include "tpu_user.h"

struct captured {
	pthread_mutex_t lock;
	int lines;
	bool prefixed;
	char first[256];
};

static void capture(void *arg, const char *line)
{
	struct captured *c = arg;

	pthread_mutex_lock(&c->lock);
	if (!c->lines++)
		snprintf(c->first, sizeof(c->first), "%s", line);
	c->prefixed |= !strncmp(line, "tpu: ", 5) || strchr(line, '\n') != NULL;
	pthread_mutex_unlock(&c->lock);
}

static int make_rendezvous(void)
{
	struct tpu_context *ctx = NULL;
	struct tpu_rendezvous *rdv = NULL;
	tpu_status st = tpu_context_create(NULL, &ctx);

	if (!st)
		st = tpu_rendezvous_create(ctx, TPU_RDV_INPROCESS, &rdv);
	tpu_rendezvous_destroy(rdv);
	tpu_context_destroy(ctx);
	return st;
}

void test_log(void)
{
	struct captured c = { .lock = PTHREAD_MUTEX_INITIALIZER };
	int before;

	tpu_log_set_handler(capture, &c, true);
	CHECK_STATUS(make_rendezvous(), 0, "log_rendezvous_created_with_a_handler");
	CHECK(c.lines > 0, "log_handler_gets_the_debug_lines_without_TPU_LOG (%d lines)", c.lines);
	CHECK(!c.prefixed, "log_handler_lines_carry_neither_prefix_nor_newline (first: %s)", c.first);
	tpu_log_set_handler(NULL, NULL, false);
	before = c.lines;
	CHECK_STATUS(make_rendezvous(), 0, "log_rendezvous_created_after_the_handler_went");
	CHECK(c.lines == before, "log_handler_not_called_once_removed");
}
