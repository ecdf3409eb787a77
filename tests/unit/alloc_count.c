// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Counting the heap allocations of the library: the unit binaries are
 * linked with --wrap=malloc,calloc,realloc (Makefile), so every such call
 * in the library's objects (and the tests') lands here first.  Calls made
 * inside libc itself are not seen.
 */
#include <stdatomic.h>
#include <stddef.h>

#include "tap.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);

static _Atomic unsigned long allocs;

void *__wrap_malloc(size_t n)
{
	atomic_fetch_add_explicit(&allocs, 1, memory_order_relaxed);
	return __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
	atomic_fetch_add_explicit(&allocs, 1, memory_order_relaxed);
	return __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n)
{
	atomic_fetch_add_explicit(&allocs, 1, memory_order_relaxed);
	return __real_realloc(p, n);
}

unsigned long allocs_counted(void)
{
	return atomic_load_explicit(&allocs, memory_order_relaxed);
}
