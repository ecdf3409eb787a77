/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Running a function on a context's thread from a test (ctx_call.c), as
 * the transports require of every call.
 */
#ifndef UNIT_CTX_CALL_H
#define UNIT_CTX_CALL_H

#include "tpu_user.h"

/* fn(arg) on @ctx's thread, as a deferred task; returns once it ran. */
void on_ctx(struct tpu_context *ctx, void (*fn)(void *arg), void *arg);

#endif
