// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* Versions of the library and of the module's ABI, and feature names. */
#include <unistd.h>

#include "dev.h"

#define STR_(x) #x
#define STR(x) STR_(x)

TPU_API uint32_t tpu_version(void)
{
	return TPU_VERSION;
}

TPU_API const char *tpu_version_string(void)
{
	return STR(TPU_VERSION_MAJOR) "." STR(TPU_VERSION_MINOR) "." STR(TPU_VERSION_PATCH);
}

TPU_API uint32_t tpu_abi_version(void)
{
	return TP_ABI_VERSION;
}

TPU_API tpu_status tpu_module_abi_version(const char *dev_path, uint32_t *abi)
{
	struct tpu_info info;
	tpu_status st;
	int fd;

	if (!abi)
		return -EINVAL;
	st = tpu__open_device(dev_path, &fd);
	if (st)
		return st;
	st = tpu__get_info(fd, &info);
	close(fd);
	if (!st)
		*abi = info.abi_version;
	return st;
}

TPU_API const char *tpu_feature_name(uint64_t feature_bit)
{
	switch (feature_bit) {
	case TPU_FEAT_REGION_ALLOC:
		return "region_alloc";
	case TPU_FEAT_DONATE:
		return "donate";
	case TPU_FEAT_RECV_TIMEOUT:
		return "recv_timeout";
	case TPU_FEAT_LARGE_ALLOC:
		return "large_alloc";
	case TPU_FEAT_URING_CMD:
		return "uring_cmd";
	case TPU_FEAT_URING_KERNEL_CANCEL:
		return "uring_kernel_cancel";
	case TPU_FEAT_DMABUF:
		return "dmabuf";
	case TPU_FEAT_MEMBER_DEATH:
		return "member_death";
	case TPU_FEAT_GRANT:
		return "grant";
	default:
		return NULL;
	}
}
