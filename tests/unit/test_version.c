// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <linux/tensorpipe.h>

#include "tap.h"
#include "tpu_user.h"

static void feature_names(void)
{
	static const unsigned long long bits[] = {
		TP_FEAT_REGION_ALLOC, TP_FEAT_DONATE, TP_FEAT_RECV_TIMEOUT, TP_FEAT_LARGE_ALLOC,
		TP_FEAT_URING_CMD, TP_FEAT_URING_KERNEL_CANCEL, TP_FEAT_DMABUF, TP_FEAT_MEMBER_DEATH,
		TP_FEAT_GRANT,
	};
	bool named = true;
	size_t i;

	for (i = 0; i < sizeof(bits) / sizeof(bits[0]); i++)
		named &= tpu_feature_name(bits[i]) != NULL;
	CHECK(named, "every_abi_feature_bit_has_a_name");
	CHECK(!strcmp(tpu_feature_name(TPU_FEAT_DMABUF), "dmabuf"), "dmabuf_feature_is_named_dmabuf");
	CHECK(!strcmp(tpu_feature_name(TPU_FEAT_DONATE), "donate"), "donate_feature_is_named_donate");
	CHECK(tpu_feature_name(1ULL << 63) == NULL && tpu_feature_name(0) == NULL &&
	      tpu_feature_name(TPU_FEAT_DONATE | TPU_FEAT_REGION_ALLOC) == NULL,
	      "unknown_or_combined_feature_bits_have_no_name");
}

void test_version(void)
{
	char expect[32];
	uint32_t abi = 12345;

	CHECK(tpu_version() == TPU_VERSION, "linked_library_version_matches_header");
	snprintf(expect, sizeof(expect), "%u.%u.%u", TPU_VERSION_MAJOR, TPU_VERSION_MINOR,
		 TPU_VERSION_PATCH);
	CHECK(!strcmp(tpu_version_string(), expect), "version_string_is_%s", expect);
	CHECK(tpu_abi_version() == TP_ABI_VERSION, "library_is_built_for_abi_%d", TP_ABI_VERSION);
	feature_names();
	CHECK_STATUS(tpu_module_abi_version("/nonexistent/tensorpipe", &abi), TPU_E_NO_DEVICE,
		     "module_abi_query_reports_absent_device");
	CHECK(abi == 12345, "module_abi_query_leaves_output_alone_on_failure");
	CHECK_STATUS(tpu_module_abi_version("/dev/null", &abi), TPU_E_NOT_TENSORPIPE,
		     "module_abi_query_rejects_a_device_that_is_not_tensorpipe");
	CHECK_STATUS(tpu_module_abi_version(NULL, NULL), -EINVAL,
		     "module_abi_query_with_null_output_is_einval");
}
