/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Copies into memory that will not be read again soon (copy_stream.c).
 * Not installed.
 */
#ifndef TPU_COPY_STREAM_H
#define TPU_COPY_STREAM_H

#include <stddef.h>

/*
 * Destinations at least this large go past the caches anyway: writing
 * them with non-temporal stores saves reading every line first.
 */
#define TPU__COPY_STREAM_MIN	(4u << 20)

/*
 * memcpy(dst, src, n), with non-temporal stores to dst where the CPU has
 * them (x86-64); the stores are fenced before it returns, so they are
 * ordered before any later store of the caller.
 */
void tpu__copy_stream(void *dst, const void *src, size_t n);

#endif /* TPU_COPY_STREAM_H */
