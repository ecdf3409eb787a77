// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* Data patterns, checksums and the availability check of the rendezvous tests. */
#include <string.h>
#include <time.h>

#include "rdv_cases.h"

uint64_t rdv_checksum(const void *data, size_t len)
{
	const uint8_t *p = data;
	uint64_t h = 0xcbf29ce484222325ull;
	size_t i;

	for (i = 0; i < len; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

/* A pattern no two seeds share, so a tensor delivered to the wrong key shows. */
void rdv_fill(void *data, size_t len, uint64_t seed)
{
	uint8_t *p = data;
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
	size_t i;

	for (i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (uint8_t)x;
	}
}

uint64_t rdv_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

bool rdv_impl_available(const struct rdv_impl *impl, const char **why)
{
	struct tpu_context_options o = { .flags = impl->ctx_flags };
	struct tpu_context *ctx;
	struct tpu_rendezvous *rdv;
	tpu_status st;

	st = tpu_context_create(&o, &ctx);
	if (st) {
		*why = tpu_strerror(st);
		return false;
	}
	st = tpu_rendezvous_create(ctx, impl->impl, &rdv);
	if (!st)
		tpu_rendezvous_destroy(rdv);
	tpu_context_destroy(ctx);
	*why = tpu_strerror(st);
	return st == 0;
}
