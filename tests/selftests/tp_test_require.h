/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * SKIP conditions shared by the selftests; include after kselftest_harness.h.
 *
 * Use them in test bodies only: the 6.1 harness runs the body even when
 * FIXTURE_SETUP calls SKIP(), so setups never skip.
 */
#ifndef TP_TEST_REQUIRE_H
#define TP_TEST_REQUIRE_H

#include "tp_test_util.h"

#define TPT_REQUIRE_FEATURES(info, bits) do {				\
	if (((info).features & (bits)) != (bits))			\
		SKIP(return, "module lacks feature bits 0x%llx",	\
		     (unsigned long long)((bits) & ~(info).features));	\
} while (0)

#define TPT_REQUIRE_DEBUGFS() do {					\
	if (!tpt_have_debugfs())					\
		SKIP(return, "needs " TPT_DEBUGFS_DIR			\
		     " (root with debugfs mounted)");			\
} while (0)

#define TPT_REQUIRE_PIN(bytes) do {					\
	tpt_raise_memlock();						\
	if (!tpt_can_pin(bytes))					\
		SKIP(return, "RLIMIT_MEMLOCK below %llu bytes; run as root", \
		     (unsigned long long)(bytes));			\
} while (0)

/* Change a module parameter for this test, or skip when not allowed. */
#define TPT_SET_PARAM(params, name, val) do {				\
	int __ret = tpt_params_set((params), (name), (val));		\
	if (__ret)							\
		SKIP(return, "cannot set parameter %s: %s (needs root)", \
		     (name), strerror(-__ret));				\
} while (0)

#endif /* TP_TEST_REQUIRE_H */
