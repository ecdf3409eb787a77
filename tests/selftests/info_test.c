// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The ioctl interface as a whole: structure layout, TP_IOC_GET_INFO, unknown
 * commands, module parameters, and the checks every command shares
 * (-EFAULT for an unreadable argument, -EPERM from another process).
 */
#include <linux/tensorpipe.h>	/* first: the uapi header must stand alone */

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "tp_test_require.h"

#define KNOWN_FEATURES	(TP_FEAT_REGION_ALLOC | TP_FEAT_DONATE | \
			 TP_FEAT_RECV_TIMEOUT | TP_FEAT_LARGE_ALLOC | \
			 TP_FEAT_URING_CMD | TP_FEAT_URING_KERNEL_CANCEL | \
			 TP_FEAT_DMABUF | TP_FEAT_MEMBER_DEATH | TP_FEAT_GRANT)

/* 32-bit and 64-bit processes must see one layout (compat_ioctl). */
TEST(uapi_structs_have_fixed_sizes_multiple_of_8)
{
	EXPECT_EQ(72UL, sizeof(struct tp_info));
	EXPECT_EQ(32UL, sizeof(struct tp_region_register));
	EXPECT_EQ(32UL, sizeof(struct tp_region_alloc));
	EXPECT_EQ(8UL, sizeof(struct tp_region_release));
	EXPECT_EQ(16UL, sizeof(struct tp_domain_create));
	EXPECT_EQ(16UL, sizeof(struct tp_domain_attach));
	EXPECT_EQ(64UL, sizeof(struct tp_send));
	EXPECT_EQ(80UL, sizeof(struct tp_recv));
	EXPECT_EQ(24UL, sizeof(struct tp_cancel));
	EXPECT_EQ(8UL, sizeof(struct tp_abort));
	EXPECT_EQ(24UL, sizeof(struct tp_region_export));
	EXPECT_EQ(24UL, sizeof(struct tp_region_import));
	EXPECT_EQ(8UL, sizeof(struct tp_region_revoke));
	EXPECT_EQ(32UL, sizeof(struct tp_completion));
	EXPECT_EQ((unsigned long)_IOC_SIZE(TP_IOC_RECV), sizeof(struct tp_recv));
}

TEST(get_info_reports_abi_version_1)
{
	struct tp_info info;
	int fd = tpt_open();

	ASSERT_LE(0, fd);
	ASSERT_EQ(0, tpt_get_info(fd, &info));
	EXPECT_EQ(1, TP_ABI_VERSION);
	EXPECT_EQ((__u32)TP_ABI_VERSION, info.abi_version);
	close(fd);
}

TEST(get_info_reports_the_kernel_page_size)
{
	struct tp_info info;
	int fd = tpt_open();

	ASSERT_LE(0, fd);
	ASSERT_EQ(0, tpt_get_info(fd, &info));
	EXPECT_EQ((__u32)tpt_page_size(), info.page_size);
	close(fd);
}

TEST(get_info_limits_are_within_documented_bounds)
{
	struct tp_info info;
	int fd = tpt_open();

	ASSERT_LE(0, fd);
	ASSERT_EQ(0, tpt_get_info(fd, &info));
	EXPECT_LE(256U, info.max_key_len);
	EXPECT_GE((__u32)TP_KEY_MAX_ABI, info.max_key_len);
	EXPECT_LT(0U, info.max_regions);
	EXPECT_LT(0U, info.max_slots);
	EXPECT_LT(0ULL, info.max_region_bytes);
	EXPECT_GE(1ULL << TP_MMAP_REGION_SHIFT, info.max_region_bytes);
	close(fd);
}

TEST(get_info_reports_only_known_feature_bits)
{
	struct tp_info info;
	int fd = tpt_open();

	ASSERT_LE(0, fd);
	ASSERT_EQ(0, tpt_get_info(fd, &info));
	EXPECT_EQ(0ULL, info.features & ~(__u64)KNOWN_FEATURES);
	close(fd);
}

TEST(get_info_returns_zero_flags_and_reserved)
{
	struct tp_info info;
	int fd = tpt_open();
	int i;

	ASSERT_LE(0, fd);
	ASSERT_EQ(0, tpt_get_info(fd, &info));
	EXPECT_EQ(0U, info.flags);
	for (i = 0; i < 4; i++) {
		EXPECT_EQ(0ULL, info.reserved[i]);
	}
	close(fd);
}

TEST(get_info_with_nonzero_flags_fails_einval)
{
	struct tp_info info = { .flags = 1 };
	int fd = tpt_open();

	ASSERT_LE(0, fd);
	EXPECT_EQ(-EINVAL, tpt_ioctl(fd, TP_IOC_GET_INFO, &info));
	info.flags = 1U << 31;
	EXPECT_EQ(-EINVAL, tpt_ioctl(fd, TP_IOC_GET_INFO, &info));
	close(fd);
}

TEST(get_info_with_nonzero_reserved_fails_einval)
{
	int fd = tpt_open();
	int i;

	ASSERT_LE(0, fd);
	for (i = 0; i < 4; i++) {
		struct tp_info info = { 0 };

		info.reserved[i] = 1ULL << (i * 9);
		EXPECT_EQ(-EINVAL, tpt_ioctl(fd, TP_IOC_GET_INFO, &info))
			TH_LOG("reserved[%d] was accepted", i);
	}
	close(fd);
}

TEST(get_info_limits_match_module_parameters)
{
	uint64_t slots, regions, key_len, region_mb;
	struct tp_info info;
	int fd = tpt_open();

	ASSERT_LE(0, fd);
	if (tpt_param_get("max_slots", &slots) ||
	    tpt_param_get("max_regions", &regions) ||
	    tpt_param_get("max_key_len", &key_len) ||
	    tpt_param_get("max_region_mb", &region_mb))
		SKIP(return, "cannot read " TPT_PARAM_DIR);
	ASSERT_EQ(0, tpt_get_info(fd, &info));
	EXPECT_EQ(slots, info.max_slots);
	EXPECT_EQ(regions, info.max_regions);
	if (key_len >= 256 && key_len <= TP_KEY_MAX_ABI) {
		EXPECT_EQ(key_len, info.max_key_len);
	}
	if (region_mb << 20 <= 1ULL << TP_MMAP_REGION_SHIFT) {
		EXPECT_EQ(region_mb << 20, info.max_region_bytes);
	}
	close(fd);
}

TEST(unknown_command_number_fails_enotty)
{
	unsigned char arg[256] = { 0 };
	int fd = tpt_open();

	ASSERT_LE(0, fd);
	EXPECT_EQ(-ENOTTY, tpt_ioctl(fd, _IO(TP_IOC_MAGIC, 0x0a), arg));
	EXPECT_EQ(-ENOTTY, tpt_ioctl(fd, _IOWR(TP_IOC_MAGIC, 0x7f,
					       struct tp_info), arg));
	EXPECT_EQ(-ENOTTY, tpt_ioctl(fd, _IOWR(TP_IOC_MAGIC, 0xff,
					       struct tp_send), arg));
	close(fd);
}

TEST(command_with_foreign_type_byte_fails_enotty)
{
	unsigned char arg[256] = { 0 };
	int fd = tpt_open();

	ASSERT_LE(0, fd);
	EXPECT_EQ(-ENOTTY, tpt_ioctl(fd, _IOWR(TP_IOC_MAGIC + 1, 0x00,
					       struct tp_info), arg));
	EXPECT_EQ(-ENOTTY, tpt_ioctl(fd, TCGETS, arg));
	close(fd);
}

/* The size is part of the command: a mismatch is a different command. */
TEST(known_number_with_wrong_size_fails_enotty)
{
	unsigned char arg[256] = { 0 };
	int fd = tpt_open();

	ASSERT_LE(0, fd);
	EXPECT_EQ(-ENOTTY, tpt_ioctl(fd, _IOWR(TP_IOC_MAGIC, 0x00, __u64),
				     arg));
	EXPECT_EQ(-ENOTTY, tpt_ioctl(fd, _IOWR(TP_IOC_MAGIC, 0x06,
					       struct tp_recv), arg));
	close(fd);
}

TEST(known_number_with_wrong_direction_fails_enotty)
{
	unsigned char arg[256] = { 0 };
	int fd = tpt_open();

	ASSERT_LE(0, fd);
	EXPECT_EQ(-ENOTTY, tpt_ioctl(fd, _IOR(TP_IOC_MAGIC, 0x00,
					      struct tp_info), arg));
	EXPECT_EQ(-ENOTTY, tpt_ioctl(fd, _IOW(TP_IOC_MAGIC, 0x00,
					      struct tp_info), arg));
	close(fd);
}

/* One variant per command: the checks every command shares. */
FIXTURE(command)
{
	int fd;
	int domain_fd;
};

FIXTURE_VARIANT(command)
{
	unsigned long cmd;
};

FIXTURE_VARIANT_ADD(command, get_info) { .cmd = TP_IOC_GET_INFO };
FIXTURE_VARIANT_ADD(command, region_register) { .cmd = TP_IOC_REGION_REGISTER };
FIXTURE_VARIANT_ADD(command, region_alloc) { .cmd = TP_IOC_REGION_ALLOC };
FIXTURE_VARIANT_ADD(command, region_release) { .cmd = TP_IOC_REGION_RELEASE };
FIXTURE_VARIANT_ADD(command, domain_create) { .cmd = TP_IOC_DOMAIN_CREATE };
FIXTURE_VARIANT_ADD(command, domain_attach) { .cmd = TP_IOC_DOMAIN_ATTACH };
FIXTURE_VARIANT_ADD(command, send) { .cmd = TP_IOC_SEND };
FIXTURE_VARIANT_ADD(command, recv) { .cmd = TP_IOC_RECV };
FIXTURE_VARIANT_ADD(command, cancel) { .cmd = TP_IOC_CANCEL };
FIXTURE_VARIANT_ADD(command, abort) { .cmd = TP_IOC_ABORT };

/* Attached, so that no command can fail for lack of a domain first. */
FIXTURE_SETUP(command)
{
	self->fd = tpt_open();
	ASSERT_LE(0, self->fd);
	ASSERT_EQ(0, tpt_domain_create(self->fd, &self->domain_fd, NULL));
	ASSERT_EQ(0, tpt_domain_attach(self->fd, self->domain_fd, NULL));
}

FIXTURE_TEARDOWN(command)
{
	close(self->fd);
	close(self->domain_fd);
}

TEST_F(command, unreadable_argument_fails_efault)
{
	EXPECT_EQ(-EFAULT, tpt_ioctl(self->fd, variant->cmd, NULL));
}

/*
 * The endpoint belongs to the opener's mm: a fork child holding the
 * inherited descriptor gets -EPERM before any argument is looked at.
 */
TEST_F(command, call_from_fork_child_with_inherited_fd_fails_eperm)
{
	int status = 0;
	pid_t pid;

	pid = tpt_fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		unsigned char arg[256] = { 0 };
		int ret = tpt_ioctl(self->fd, variant->cmd, arg);

		_exit(ret == -EPERM ? 0 : ret == 0 ? 200 : -ret & 0xff);
	}
	ASSERT_EQ(0, tpt_wait_child(pid, 10000, &status));
	ASSERT_TRUE(WIFEXITED(status));
	EXPECT_EQ(0, WEXITSTATUS(status))
		TH_LOG("child got %s instead of EPERM",
		       WEXITSTATUS(status) == 200 ? "success" :
		       strerror(WEXITSTATUS(status)));
}

/* Parameters are global: each test restores what it changed. */
FIXTURE(params)
{
	int fd;
	struct tpt_params saved;
};

FIXTURE_SETUP(params)
{
	self->fd = tpt_open();
	ASSERT_LE(0, self->fd);
}

FIXTURE_TEARDOWN(params)
{
	tpt_params_restore(&self->saved);
	close(self->fd);
}

TEST_F(params, get_info_follows_changed_module_parameters)
{
	struct tp_info info;

	TPT_SET_PARAM(&self->saved, "max_slots", 123);
	TPT_SET_PARAM(&self->saved, "max_regions", 77);
	TPT_SET_PARAM(&self->saved, "max_key_len", 300);
	TPT_SET_PARAM(&self->saved, "max_region_mb", 3);
	ASSERT_EQ(0, tpt_get_info(self->fd, &info));
	EXPECT_EQ(123U, info.max_slots);
	EXPECT_EQ(77U, info.max_regions);
	EXPECT_EQ(300U, info.max_key_len);
	EXPECT_EQ(3ULL << 20, info.max_region_bytes);
}

TEST_F(params, max_key_len_parameter_is_clamped_to_256_and_4096)
{
	static const uint64_t values[] = { 1, 255, 4097, 100000 };
	static const __u32 clamped[] = { 256, 256, 4096, 4096 };
	struct tp_info info;
	unsigned int i;
	int ret;

	for (i = 0; i < ARRAY_SIZE(values); i++) {
		ret = tpt_params_set(&self->saved, "max_key_len", values[i]);
		if (ret == -EACCES || ret == -EPERM || ret == -ENOENT)
			SKIP(return, "cannot set max_key_len (needs root)");
		ASSERT_EQ(0, tpt_get_info(self->fd, &info));
		if (ret == 0) {
			EXPECT_EQ(clamped[i], info.max_key_len)
				TH_LOG("max_key_len=%llu",
				       (unsigned long long)values[i]);
		} else {
			/* Rejecting the write also keeps the bounds. */
			EXPECT_LE(256U, info.max_key_len);
			EXPECT_GE(4096U, info.max_key_len);
		}
	}
}

TEST_HARNESS_MAIN
