// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Bounds on what a peer may make us hold while it has not yet said
 * anything sensible (see Documentation/security.rst, "Resource bounds"),
 * read from the environment when a listener or server starts, so that a
 * deployment (or a test) can tighten or loosen them without a rebuild.
 */
#include <stdlib.h>
#include <string.h>

#include "base.h"

uint64_t tpu__env_u64(const char *name, uint64_t def, uint64_t min, uint64_t max)
{
	const char *v = getenv(name);
	uint64_t out;

	if (!v || !*v)
		return def;
	if (!tpu__parse_dec((struct tpu_str){ v, strlen(v) }, max, &out) || out < min) {
		tpu__log_debug("%s='%s' is not %llu..%llu; using %llu", name, v,
			       (unsigned long long)min, (unsigned long long)max,
			       (unsigned long long)def);
		return def;
	}
	return out;
}

uint64_t tpu__setup_timeout_ns(void)
{
	return tpu__env_u64("TPU_SETUP_TIMEOUT_MS", TPU__SETUP_TIMEOUT_MS_DEFAULT, 1,
			    3600u * 1000u) * 1000000u;
}

uint64_t tpu__setup_grace_ns(uint64_t timeout_ns)
{
	uint64_t max = TPU__SETUP_GRACE_MAX_MS * 1000000ull;

	return timeout_ns / 10 < max ? timeout_ns / 10 : max;
}

unsigned int tpu__setup_max(void)
{
	return (unsigned int)tpu__env_u64("TPU_SETUP_MAX", TPU__SETUP_MAX_DEFAULT, 1, 1u << 16);
}
