// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Regions: TP_IOC_REGION_REGISTER, TP_IOC_REGION_ALLOC, TP_IOC_REGION_RELEASE
 * and mmap of allocated buffers, with every validation error, the
 * RLIMIT_MEMLOCK charge, and what fork() does (and does not) hand to a child.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "tp_test_require.h"

#define SMALL		(64 * TPT_KIB)
#define PAIR_LEN	(256 * TPT_KIB)
#define MEMLOCK_LIMIT	(256 * TPT_KIB)

/* Exit code of a limited child that could not drop its privileges. */
#define CHILD_SKIP	77

FIXTURE(region)
{
	int fd;
	struct tp_info info;
	size_t page;
};

FIXTURE_SETUP(region)
{
	tpt_raise_memlock();
	self->page = tpt_page_size();
	self->fd = tpt_open();
	ASSERT_LE(0, self->fd);
	ASSERT_EQ(0, tpt_get_info(self->fd, &self->info));
}

FIXTURE_TEARDOWN(region)
{
	close(self->fd);
}

static int register_raw(int fd, struct tp_region_register *r)
{
	return tpt_ioctl(fd, TP_IOC_REGION_REGISTER, r);
}

static int alloc_raw(int fd, struct tp_region_alloc *a)
{
	return tpt_ioctl(fd, TP_IOC_REGION_ALLOC, a);
}

TEST_F(region, register_returns_handle_that_release_accepts)
{
	void *buf = tpt_map(SMALL);
	uint32_t h;

	ASSERT_NE(NULL, buf);
	ASSERT_EQ(0, tpt_register(self->fd, buf, SMALL,
				  TP_ACCESS_READ | TP_ACCESS_WRITE, &h));
	EXPECT_EQ(0, tpt_release(self->fd, h));
	tpt_unmap(buf, SMALL);
}

TEST_F(region, register_gives_distinct_handles_for_each_region)
{
	uint8_t *buf = tpt_map(SMALL);
	uint32_t a, b;

	ASSERT_NE(NULL, buf);
	ASSERT_EQ(0, tpt_register(self->fd, buf, 4096, TP_ACCESS_READ, &a));
	ASSERT_EQ(0, tpt_register(self->fd, buf + 8192, 4096,
				  TP_ACCESS_WRITE, &b));
	EXPECT_NE(a, b);
	EXPECT_EQ(0, tpt_release(self->fd, a));
	EXPECT_EQ(0, tpt_release(self->fd, b));
}

TEST_F(region, register_accepts_unaligned_start_and_length)
{
	uint8_t *buf = tpt_map(SMALL);
	uint32_t h;

	ASSERT_NE(NULL, buf);
	ASSERT_EQ(0, tpt_register(self->fd, buf + 3, 5001,
				  TP_ACCESS_READ | TP_ACCESS_WRITE, &h));
	EXPECT_EQ(0, tpt_release(self->fd, h));
}

TEST_F(region, register_of_populated_read_only_memory_for_read_succeeds)
{
	uint8_t *buf = tpt_map(SMALL);
	uint32_t h;

	ASSERT_NE(NULL, buf);
	tpt_fill(buf, SMALL, 1);
	ASSERT_EQ(0, mprotect(buf, SMALL, PROT_READ));
	ASSERT_EQ(0, tpt_register(self->fd, buf, SMALL, TP_ACCESS_READ, &h));
	EXPECT_EQ(0, tpt_release(self->fd, h));
}

TEST_F(region, register_without_access_bits_fails_einval)
{
	void *buf = tpt_map(SMALL);

	ASSERT_NE(NULL, buf);
	EXPECT_EQ(-EINVAL, tpt_register(self->fd, buf, SMALL, 0, NULL));
}

TEST_F(region, register_with_unknown_access_bit_fails_einval)
{
	void *buf = tpt_map(SMALL);

	ASSERT_NE(NULL, buf);
	EXPECT_EQ(-EINVAL, tpt_register(self->fd, buf, SMALL,
					TP_ACCESS_READ | (1U << 2), NULL));
	EXPECT_EQ(-EINVAL, tpt_register(self->fd, buf, SMALL,
					TP_ACCESS_WRITE | (1U << 31), NULL));
}

TEST_F(region, register_with_nonzero_flags_fails_einval)
{
	void *buf = tpt_map(SMALL);
	struct tp_region_register r = {
		.len = SMALL, .access = TP_ACCESS_READ, .flags = 1,
	};

	ASSERT_NE(NULL, buf);
	r.addr = (uintptr_t)buf;
	EXPECT_EQ(-EINVAL, register_raw(self->fd, &r));
}

TEST_F(region, register_with_nonzero_reserved_fails_einval)
{
	void *buf = tpt_map(SMALL);
	struct tp_region_register r = {
		.len = SMALL, .access = TP_ACCESS_READ, .reserved = 1,
	};

	ASSERT_NE(NULL, buf);
	r.addr = (uintptr_t)buf;
	EXPECT_EQ(-EINVAL, register_raw(self->fd, &r));
}

TEST_F(region, register_of_zero_length_fails_einval)
{
	void *buf = tpt_map(SMALL);

	ASSERT_NE(NULL, buf);
	EXPECT_EQ(-EINVAL, tpt_register(self->fd, buf, 0, TP_ACCESS_READ,
					NULL));
}

TEST_F(region, register_of_wrapping_range_fails_einval)
{
	struct tp_region_register r = {
		.addr = UINT64_MAX - self->page + 1,
		.len = 2 * self->page,
		.access = TP_ACCESS_READ,
	};

	EXPECT_EQ(-EINVAL, register_raw(self->fd, &r));
}

TEST_F(region, register_above_max_region_bytes_fails_e2big)
{
	void *buf = tpt_map(SMALL);

	ASSERT_NE(NULL, buf);
	EXPECT_EQ(-E2BIG, tpt_register(self->fd, buf,
				       self->info.max_region_bytes + 1,
				       TP_ACCESS_READ, NULL));
}

TEST_F(region, register_of_unmapped_range_fails_efault)
{
	uint8_t *buf = tpt_map(2 * self->page);

	ASSERT_NE(NULL, buf);
	/* The second page goes away: a partly mapped range is refused too. */
	ASSERT_EQ(0, munmap(buf + self->page, self->page));
	EXPECT_EQ(-EFAULT, tpt_register(self->fd, buf, 2 * self->page,
					TP_ACCESS_READ, NULL));
	ASSERT_EQ(0, munmap(buf, self->page));
	EXPECT_EQ(-EFAULT, tpt_register(self->fd, buf, self->page,
					TP_ACCESS_READ, NULL));
}

TEST_F(region, register_of_read_only_memory_for_write_fails_efault)
{
	void *buf = tpt_map(SMALL);

	ASSERT_NE(NULL, buf);
	ASSERT_EQ(0, mprotect(buf, SMALL, PROT_READ));
	EXPECT_EQ(-EFAULT, tpt_register(self->fd, buf, SMALL,
					TP_ACCESS_WRITE, NULL));
}

TEST_F(region, register_charges_vmpin_until_release)
{
	const uint64_t len = 1 * TPT_MIB;
	void *buf = tpt_map(len);
	long before, during, after;
	uint32_t h;

	ASSERT_NE(NULL, buf);
	TPT_REQUIRE_PIN(len);
	before = tpt_vmpin_kb();
	if (before < 0)
		SKIP(return, "no VmPin in /proc/self/status");
	ASSERT_EQ(0, tpt_register(self->fd, buf, len, TP_ACCESS_READ, &h));
	during = tpt_vmpin_kb();
	ASSERT_EQ(0, tpt_release(self->fd, h));
	after = tpt_vmpin_kb();
	EXPECT_EQ((long)(len / TPT_KIB), during - before);
	EXPECT_EQ(before, after);
}

TEST_F(region, release_of_unknown_handle_fails_enoent)
{
	void *buf = tpt_map(SMALL);
	uint32_t h;

	ASSERT_NE(NULL, buf);
	ASSERT_EQ(0, tpt_register(self->fd, buf, SMALL, TP_ACCESS_READ, &h));
	EXPECT_EQ(-ENOENT, tpt_release(self->fd, h + 1000));
	EXPECT_EQ(-ENOENT, tpt_release(self->fd, UINT32_MAX));
}

TEST_F(region, release_twice_fails_enoent)
{
	void *buf = tpt_map(SMALL);
	uint32_t h;

	ASSERT_NE(NULL, buf);
	ASSERT_EQ(0, tpt_register(self->fd, buf, SMALL, TP_ACCESS_READ, &h));
	ASSERT_EQ(0, tpt_release(self->fd, h));
	EXPECT_EQ(-ENOENT, tpt_release(self->fd, h));
}

TEST_F(region, release_with_nonzero_flags_fails_einval_and_keeps_handle)
{
	void *buf = tpt_map(SMALL);
	struct tp_region_release r = { .flags = 1 };

	ASSERT_NE(NULL, buf);
	ASSERT_EQ(0, tpt_register(self->fd, buf, SMALL, TP_ACCESS_READ,
				  &r.handle));
	EXPECT_EQ(-EINVAL, tpt_ioctl(self->fd, TP_IOC_REGION_RELEASE, &r));
	EXPECT_EQ(0, tpt_release(self->fd, r.handle));
}

TEST_F(region, region_handle_is_unknown_on_another_endpoint)
{
	void *buf = tpt_map(SMALL);
	uint64_t off;
	uint32_t h, a;
	int other;

	TPT_REQUIRE_FEATURES(self->info, TP_FEAT_REGION_ALLOC);
	ASSERT_NE(NULL, buf);
	other = tpt_open();
	ASSERT_LE(0, other);
	ASSERT_EQ(0, tpt_register(self->fd, buf, SMALL, TP_ACCESS_READ, &h));
	ASSERT_EQ(0, tpt_alloc(self->fd, SMALL, &a, &off));
	EXPECT_EQ(-ENOENT, tpt_release(other, h));
	EXPECT_EQ(-ENOENT, tpt_release(other, a));
	EXPECT_EQ(NULL, tpt_map_region(other, off, SMALL,
				       PROT_READ | PROT_WRITE));
	EXPECT_EQ(EINVAL, errno);
	/* Still valid where they were made. */
	EXPECT_EQ(0, tpt_release(self->fd, h));
	EXPECT_EQ(0, tpt_release(self->fd, a));
	close(other);
}

TEST_F(region, alloc_returns_zeroed_buffer_mappable_shared)
{
	const size_t len = 3 * self->page;
	uint64_t off;
	uint8_t *m;
	uint32_t h;

	TPT_REQUIRE_FEATURES(self->info, TP_FEAT_REGION_ALLOC);
	ASSERT_EQ(0, tpt_alloc(self->fd, len, &h, &off));
	m = tpt_map_region(self->fd, off, len, PROT_READ | PROT_WRITE);
	ASSERT_NE(NULL, m);
	EXPECT_TRUE(tpt_all_bytes(m, len, 0));
	tpt_fill(m, len, 42);
	EXPECT_TRUE(tpt_check(m, len, 42));
	EXPECT_EQ(0, munmap(m, len));
	EXPECT_EQ(0, tpt_release(self->fd, h));
}

TEST_F(region, alloc_mmap_offset_is_handle_shifted_by_region_shift)
{
	uint64_t off;
	uint32_t h;

	TPT_REQUIRE_FEATURES(self->info, TP_FEAT_REGION_ALLOC);
	ASSERT_EQ(0, tpt_alloc(self->fd, self->page, &h, &off));
	EXPECT_EQ((uint64_t)h << TP_MMAP_REGION_SHIFT, off);
}

TEST_F(region, alloc_of_zero_length_fails_einval)
{
	TPT_REQUIRE_FEATURES(self->info, TP_FEAT_REGION_ALLOC);
	EXPECT_EQ(-EINVAL, tpt_alloc(self->fd, 0, NULL, NULL));
}

TEST_F(region, alloc_with_nonzero_flags_fails_einval)
{
	struct tp_region_alloc a = { .len = self->page, .flags = 1 };

	TPT_REQUIRE_FEATURES(self->info, TP_FEAT_REGION_ALLOC);
	EXPECT_EQ(-EINVAL, alloc_raw(self->fd, &a));
}

TEST_F(region, alloc_with_nonzero_reserved_fails_einval)
{
	struct tp_region_alloc a = { .len = self->page, .reserved = 1 };

	TPT_REQUIRE_FEATURES(self->info, TP_FEAT_REGION_ALLOC);
	EXPECT_EQ(-EINVAL, alloc_raw(self->fd, &a));
}

TEST_F(region, alloc_above_max_region_bytes_fails_e2big)
{
	TPT_REQUIRE_FEATURES(self->info, TP_FEAT_REGION_ALLOC);
	EXPECT_EQ(-E2BIG, tpt_alloc(self->fd, self->info.max_region_bytes + 1,
				    NULL, NULL));
}

TEST_F(region, alloc_charges_vmpin_until_release)
{
	const uint64_t len = 1 * TPT_MIB;
	long before, during;
	uint32_t h;

	TPT_REQUIRE_FEATURES(self->info, TP_FEAT_REGION_ALLOC);
	TPT_REQUIRE_PIN(len);
	before = tpt_vmpin_kb();
	if (before < 0)
		SKIP(return, "no VmPin in /proc/self/status");
	ASSERT_EQ(0, tpt_alloc(self->fd, len, &h, NULL));
	during = tpt_vmpin_kb();
	ASSERT_EQ(0, tpt_release(self->fd, h));
	EXPECT_EQ((long)(len / TPT_KIB), during - before);
	EXPECT_EQ(before, tpt_vmpin_kb());
}

TEST_F(region, alloc_rounds_length_up_to_whole_pages)
{
	uint64_t off;
	uint8_t *m;
	uint32_t h;

	TPT_REQUIRE_FEATURES(self->info, TP_FEAT_REGION_ALLOC);
	ASSERT_EQ(0, tpt_alloc(self->fd, 100, &h, &off));
	m = tpt_map_region(self->fd, off, self->page, PROT_READ | PROT_WRITE);
	ASSERT_NE(NULL, m);
	EXPECT_TRUE(tpt_all_bytes(m, self->page, 0));
	m[self->page - 1] = 7;
	EXPECT_EQ(7, m[self->page - 1]);
	munmap(m, self->page);
	EXPECT_EQ(NULL, tpt_map_region(self->fd, off, 2 * self->page,
				       PROT_READ | PROT_WRITE));
	EXPECT_EQ(EINVAL, errno);
}

TEST_F(region, mmap_private_fails_einval)
{
	uint64_t off;
	void *m;

	TPT_REQUIRE_FEATURES(self->info, TP_FEAT_REGION_ALLOC);
	ASSERT_EQ(0, tpt_alloc(self->fd, self->page, NULL, &off));
	m = mmap(NULL, self->page, PROT_READ | PROT_WRITE, MAP_PRIVATE,
		 self->fd, (off_t)off);
	EXPECT_EQ(MAP_FAILED, m);
	EXPECT_EQ(EINVAL, errno);
}

/*
 * MAP_SHARED of a descriptor opened read-only leaves the mapping VM_MAYSHARE
 * but not VM_SHARED: it is still shared, maps for reading, and mmap() itself
 * refuses PROT_WRITE (and mprotect() cannot add it later).
 */
TEST_F(region, read_only_endpoint_maps_shared_for_reading_only)
{
	uint64_t off;
	uint8_t *ro;
	int fd;

	TPT_REQUIRE_FEATURES(self->info, TP_FEAT_REGION_ALLOC);
	fd = open(TP_DEVICE_PATH, O_RDONLY | O_CLOEXEC);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, tpt_alloc(fd, self->page, NULL, &off));
	ro = tpt_map_region(fd, off, self->page, PROT_READ);
	ASSERT_NE(NULL, ro) TH_LOG("MAP_SHARED, PROT_READ: %s", strerror(errno));
	EXPECT_EQ(NULL, tpt_map_region(fd, off, self->page,
				       PROT_READ | PROT_WRITE));
	EXPECT_EQ(EACCES, errno);
	EXPECT_EQ(-1, mprotect(ro, self->page, PROT_READ | PROT_WRITE));
	EXPECT_EQ(EACCES, errno);
	EXPECT_EQ(MAP_FAILED, mmap(NULL, self->page, PROT_READ, MAP_PRIVATE,
				   fd, (off_t)off));
	EXPECT_EQ(EINVAL, errno);
	EXPECT_TRUE(tpt_all_bytes(ro, self->page, 0));
	munmap(ro, self->page);
	close(fd);
}

TEST_F(region, mmap_of_unknown_region_fails_einval)
{
	uint64_t off;
	uint32_t h;

	TPT_REQUIRE_FEATURES(self->info, TP_FEAT_REGION_ALLOC);
	ASSERT_EQ(0, tpt_alloc(self->fd, self->page, &h, &off));
	EXPECT_EQ(NULL, tpt_map_region(self->fd,
				       (uint64_t)(h + 1000) << TP_MMAP_REGION_SHIFT,
				       self->page, PROT_READ));
	EXPECT_EQ(EINVAL, errno);
}

TEST_F(region, mmap_of_registered_region_fails_einval)
{
	void *buf = tpt_map(SMALL);
	uint32_t h;

	ASSERT_NE(NULL, buf);
	ASSERT_EQ(0, tpt_register(self->fd, buf, SMALL, TP_ACCESS_READ, &h));
	EXPECT_EQ(NULL, tpt_map_region(self->fd,
				       (uint64_t)h << TP_MMAP_REGION_SHIFT,
				       self->page, PROT_READ));
	EXPECT_EQ(EINVAL, errno);
}

TEST_F(region, mmap_past_region_end_fails_einval)
{
	uint64_t off;

	TPT_REQUIRE_FEATURES(self->info, TP_FEAT_REGION_ALLOC);
	ASSERT_EQ(0, tpt_alloc(self->fd, 2 * self->page, NULL, &off));
	EXPECT_EQ(NULL, tpt_map_region(self->fd, off, 3 * self->page,
				       PROT_READ));
	EXPECT_EQ(EINVAL, errno);
	EXPECT_EQ(NULL, tpt_map_region(self->fd, off + 2 * self->page,
				       self->page, PROT_READ));
	EXPECT_EQ(EINVAL, errno);
}

TEST_F(region, mmap_of_released_region_fails_einval)
{
	uint64_t off;
	uint32_t h;

	TPT_REQUIRE_FEATURES(self->info, TP_FEAT_REGION_ALLOC);
	ASSERT_EQ(0, tpt_alloc(self->fd, self->page, &h, &off));
	ASSERT_EQ(0, tpt_release(self->fd, h));
	EXPECT_EQ(NULL, tpt_map_region(self->fd, off, self->page, PROT_READ));
	EXPECT_EQ(EINVAL, errno);
}

TEST_F(region, two_mappings_of_a_region_share_pages)
{
	const size_t len = 2 * self->page;
	uint8_t *a, *b;
	uint64_t off;

	TPT_REQUIRE_FEATURES(self->info, TP_FEAT_REGION_ALLOC);
	ASSERT_EQ(0, tpt_alloc(self->fd, len, NULL, &off));
	a = tpt_map_region(self->fd, off, len, PROT_READ | PROT_WRITE);
	b = tpt_map_region(self->fd, off, len, PROT_READ | PROT_WRITE);
	ASSERT_NE(NULL, a);
	ASSERT_NE(NULL, b);
	ASSERT_NE(a, b);
	tpt_fill(a, len, 9);
	EXPECT_TRUE(tpt_check(b, len, 9));
}

TEST_F(region, released_region_stays_mapped_and_charged_until_munmap)
{
	const size_t len = 64 * self->page;
	long before, mapped;
	uint64_t off;
	uint8_t *m;
	uint32_t h;

	TPT_REQUIRE_FEATURES(self->info, TP_FEAT_REGION_ALLOC);
	before = tpt_vmpin_kb();
	ASSERT_EQ(0, tpt_alloc(self->fd, len, &h, &off));
	m = tpt_map_region(self->fd, off, len, PROT_READ | PROT_WRITE);
	ASSERT_NE(NULL, m);
	tpt_fill(m, len, 5);
	mapped = tpt_vmpin_kb();
	ASSERT_EQ(0, tpt_release(self->fd, h));
	EXPECT_TRUE(tpt_check(m, len, 5));
	tpt_fill(m, len, 6);
	EXPECT_TRUE(tpt_check(m, len, 6));
	if (before >= 0) {
		EXPECT_EQ(mapped, tpt_vmpin_kb());
		ASSERT_EQ(0, munmap(m, len));
		EXPECT_EQ(before, tpt_vmpin_kb());
	}
}

/* VM_DONTCOPY: the child has no mapping at that address at all. */
TEST_F(region, alloc_mapping_is_not_inherited_by_fork_child)
{
	const size_t len = 4 * self->page;
	int status = 0;
	uint64_t off;
	uint8_t *m;
	pid_t pid;

	TPT_REQUIRE_FEATURES(self->info, TP_FEAT_REGION_ALLOC);
	ASSERT_EQ(0, tpt_alloc(self->fd, len, NULL, &off));
	m = tpt_map_region(self->fd, off, len, PROT_READ | PROT_WRITE);
	ASSERT_NE(NULL, m);
	tpt_fill(m, len, 11);
	pid = tpt_fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		if (msync(m, len, MS_ASYNC) == 0)
			_exit(1);
		_exit(errno == ENOMEM ? 0 : 2);
	}
	ASSERT_EQ(0, tpt_wait_child(pid, 10000, &status));
	ASSERT_TRUE(WIFEXITED(status));
	EXPECT_EQ(0, WEXITSTATUS(status))
		TH_LOG("child %s", WEXITSTATUS(status) == 1 ?
		       "inherited the mapping" : "saw an unexpected error");
	EXPECT_TRUE(tpt_check(m, len, 11));
}

TEST_F(region, mmap_from_fork_child_with_inherited_fd_fails_eperm)
{
	int status = 0;
	uint64_t off;
	pid_t pid;

	TPT_REQUIRE_FEATURES(self->info, TP_FEAT_REGION_ALLOC);
	ASSERT_EQ(0, tpt_alloc(self->fd, self->page, NULL, &off));
	pid = tpt_fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		if (tpt_map_region(self->fd, off, self->page, PROT_READ))
			_exit(1);
		_exit(errno == EPERM ? 0 : 2);
	}
	ASSERT_EQ(0, tpt_wait_child(pid, 10000, &status));
	ASSERT_TRUE(WIFEXITED(status));
	EXPECT_EQ(0, WEXITSTATUS(status));
}

TEST_F(region, register_from_fork_child_with_inherited_fd_fails_eperm)
{
	int status = 0;
	pid_t pid;

	pid = tpt_fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		void *buf = tpt_map(SMALL);
		int ret = buf ? tpt_register(self->fd, buf, SMALL,
					     TP_ACCESS_READ, NULL) : -ENOMEM;

		_exit(ret == -EPERM ? 0 : 1);
	}
	ASSERT_EQ(0, tpt_wait_child(pid, 10000, &status));
	ASSERT_TRUE(WIFEXITED(status));
	EXPECT_EQ(0, WEXITSTATUS(status));
}

TEST_F(region, closing_endpoint_returns_vmpin_to_baseline)
{
	void *buf = tpt_map(1 * TPT_MIB);
	long before;
	int fd;

	ASSERT_NE(NULL, buf);
	TPT_REQUIRE_PIN(2 * TPT_MIB);
	before = tpt_vmpin_kb();
	if (before < 0)
		SKIP(return, "no VmPin in /proc/self/status");
	fd = tpt_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, tpt_register(fd, buf, 1 * TPT_MIB, TP_ACCESS_READ, NULL));
	if (self->info.features & TP_FEAT_REGION_ALLOC) {
		ASSERT_EQ(0, tpt_alloc(fd, 1 * TPT_MIB, NULL, NULL));
	}
	EXPECT_LT(before, tpt_vmpin_kb());
	close(fd);
	EXPECT_EQ(before, tpt_vmpin_kb());
}

TEST_F(region, closing_endpoint_returns_pinned_and_alloc_pages_to_baseline)
{
	int64_t pinned, allocated, regions;
	void *buf = tpt_map(1 * TPT_MIB);
	int fd;

	ASSERT_NE(NULL, buf);
	TPT_REQUIRE_DEBUGFS();
	ASSERT_EQ(0, tpt_stat("pinned_pages", &pinned));
	ASSERT_EQ(0, tpt_stat("alloc_pages", &allocated));
	ASSERT_EQ(0, tpt_stat("regions", &regions));
	fd = tpt_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, tpt_register(fd, buf, 1 * TPT_MIB, TP_ACCESS_READ, NULL));
	if (self->info.features & TP_FEAT_REGION_ALLOC) {
		ASSERT_EQ(0, tpt_alloc(fd, 1 * TPT_MIB, NULL, NULL));
	}
	close(fd);
	EXPECT_EQ(0, tpt_wait_stat("pinned_pages", pinned, 5000));
	EXPECT_EQ(0, tpt_wait_stat("alloc_pages", allocated, 5000));
	EXPECT_EQ(0, tpt_wait_stat("regions", regions, 5000));
}

/*
 * Pages pinned before fork() stay the parent's: what the child writes to
 * its copy never reaches the region, and what the parent writes afterwards
 * is what a SEND delivers and what a RECV lands in.
 */
FIXTURE(forked)
{
	struct tpt_pair p;
};

FIXTURE_SETUP(forked)
{
	ASSERT_EQ(0, tpt_pair_open(&self->p, PAIR_LEN));
}

FIXTURE_TEARDOWN(forked)
{
	tpt_pair_close(&self->p);
}

TEST_F(forked, child_writes_do_not_reach_parent_registered_region)
{
	struct tpt_pair *p = &self->p;
	uint64_t len = 0;
	int status = 0;
	pid_t pid;

	pid = tpt_fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		memset(p->dbuf, 0xaa, p->len);
		memset(p->sbuf, 0xbb, p->len);
		_exit(0);
	}
	ASSERT_EQ(0, tpt_wait_child(pid, 10000, &status));
	EXPECT_TRUE(tpt_all_bytes(p->dbuf, p->len, 0));
	EXPECT_TRUE(tpt_check(p->sbuf, p->len, TPT_SEED_SRC));
	/* And the parent's regions still move its data. */
	ASSERT_EQ(0, tpt_send(p->prod, "after-fork", p->src, 0, p->len, 1));
	ASSERT_EQ(0, tpt_recv(p->cons, "after-fork", p->dst, 0, p->len,
			      TPT_SAFETY_TIMEOUT_NS, &len));
	EXPECT_EQ(p->len, len);
	EXPECT_TRUE(tpt_check(p->dbuf, p->len, TPT_SEED_SRC));
}

TEST_F(forked, parent_writes_after_fork_are_sent_and_received_in_place)
{
	struct tpt_pair *p = &self->p;
	uint64_t len = 0;
	int status = 0;
	pid_t pid;

	pid = tpt_fork();
	ASSERT_LE(0, pid);
	if (pid == 0)
		_exit(0);
	/* Writing while the child still shares the pages tests COW too. */
	tpt_fill(p->sbuf, p->len, 77);
	ASSERT_EQ(0, tpt_wait_child(pid, 10000, &status));
	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, p->len, 1));
	ASSERT_EQ(0, tpt_recv(p->cons, "k", p->dst, 0, p->len,
			      TPT_SAFETY_TIMEOUT_NS, &len));
	EXPECT_EQ(p->len, len);
	EXPECT_TRUE(tpt_check(p->dbuf, p->len, 77));
}

TEST_F(forked, child_exit_does_not_disturb_parent_pending_send)
{
	struct tpt_pair *p = &self->p;
	uint64_t len = 0;
	int status = 0;
	pid_t pid;

	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, p->len, 1));
	pid = tpt_fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		close(p->prod);
		close(p->cons);
		_exit(0);
	}
	ASSERT_EQ(0, tpt_wait_child(pid, 10000, &status));
	ASSERT_EQ(0, tpt_recv_nonblock(p->cons, "k", p->dst, 0, p->len, &len));
	EXPECT_TRUE(tpt_check(p->dbuf, p->len, TPT_SEED_SRC));
}

/*
 * RLIMIT_MEMLOCK: CAP_IPC_LOCK bypasses it, so these run in a child that
 * lowers the limit and, when root, becomes nobody first.
 */
static void child_log(const char *what, int ret)
{
	fprintf(stderr, "#   child: %s returned %d (%s)\n", what, ret,
		ret < 0 ? strerror(-ret) : "ok");
}

static int limited_register_over_limit(void)
{
	void *buf = tpt_map(1 * TPT_MIB);
	int fd = tpt_open(), ret;

	if (fd < 0 || !buf)
		return 10;
	ret = tpt_register(fd, buf, 1 * TPT_MIB, TP_ACCESS_READ, NULL);
	if (ret != -ENOMEM) {
		child_log("register of 1 MiB", ret);
		return 1;
	}
	return 0;
}

static int limited_alloc_over_limit(void)
{
	int fd = tpt_open(), ret;

	if (fd < 0)
		return 10;
	ret = tpt_alloc(fd, 1 * TPT_MIB, NULL, NULL);
	if (ret != -ENOMEM) {
		child_log("alloc of 1 MiB", ret);
		return 1;
	}
	return 0;
}

static int limited_release_returns_charge(void)
{
	uint8_t *a = tpt_map(192 * TPT_KIB), *b = tpt_map(128 * TPT_KIB);
	int fd = tpt_open(), ret;
	uint32_t h;

	if (fd < 0 || !a || !b)
		return 10;
	ret = tpt_register(fd, a, 192 * TPT_KIB, TP_ACCESS_READ, &h);
	if (ret) {
		child_log("register of 192 KiB", ret);
		return 1;
	}
	ret = tpt_register(fd, b, 128 * TPT_KIB, TP_ACCESS_READ, NULL);
	if (ret != -ENOMEM) {
		child_log("register of 128 KiB more", ret);
		return 2;
	}
	ret = tpt_release(fd, h);
	if (ret) {
		child_log("release", ret);
		return 3;
	}
	ret = tpt_register(fd, b, 128 * TPT_KIB, TP_ACCESS_READ, NULL);
	if (ret) {
		child_log("register of 128 KiB after release", ret);
		return 4;
	}
	return 0;
}

/*
 * The charge belongs to the user, not to the process image that pinned:
 * pages of an endpoint that outlives its pinning process (passed over a
 * Unix socket, or kept across execve()) still count against the user's
 * RLIMIT_MEMLOCK until the endpoint is closed.
 */
#define HELD		(192 * TPT_KIB)
#define MORE		(128 * TPT_KIB)

/* Register MORE bytes on a new endpoint: what the limit says, then again
 * after @held is closed.  Returns 0, or the failing step from @step.
 */
static int register_more_until_held_closes(int held, int step)
{
	uint8_t *b = tpt_map(MORE);
	int fd = tpt_open(), ret;

	if (fd < 0 || !b)
		return 10;
	ret = tpt_register(fd, b, MORE, TP_ACCESS_READ, NULL);
	if (ret != -ENOMEM) {
		child_log("register beyond what the held endpoint pins", ret);
		return step;
	}
	close(held);
	ret = tpt_register(fd, b, MORE, TP_ACCESS_READ, NULL);
	if (ret) {
		child_log("register after closing the held endpoint", ret);
		return step + 1;
	}
	return 0;
}

static int limited_charge_follows_a_passed_endpoint(void)
{
	int sv[2], held, status = 0;
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		return 10;
	pid = fork();
	if (pid < 0)
		return 10;
	if (pid == 0) {
		uint8_t *a = tpt_map(HELD);
		int fd = tpt_open();

		if (fd < 0 || !a ||
		    tpt_register(fd, a, HELD, TP_ACCESS_READ, NULL) ||
		    tpt_send_fd(sv[1], fd))
			_exit(1);
		_exit(0);
	}
	held = tpt_recv_fd(sv[0], 10000);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status) || held < 0) {
		child_log("pinning in a process that passes its endpoint", held);
		return 1;
	}
	/* The pinning process is gone; its pages are still pinned. */
	return register_more_until_held_closes(held, 2);
}

#define EXEC_ENV	"TPT_REGION_TEST_HELD_FD"

static int limited_charge_survives_execve(void)
{
	uint8_t *a = tpt_map(HELD);
	int fd = tpt_open();
	char num[16];

	if (fd < 0 || !a || tpt_register(fd, a, HELD, TP_ACCESS_READ, NULL) ||
	    fcntl(fd, F_SETFD, 0))
		return 1;
	snprintf(num, sizeof(num), "%d", fd);
	if (setenv(EXEC_ENV, num, 1))
		return 1;
	execl("/proc/self/exe", "region_test", (char *)NULL);
	return 2;
}

/* The image execve() started: checks the limit before the harness runs. */
__attribute__((constructor)) static void after_execve(void)
{
	const char *held = getenv(EXEC_ENV);

	if (held)
		_exit(register_more_until_held_closes(atoi(held), 3));
}

static int run_limited(int (*fn)(void))
{
	int status = 0, ret;
	pid_t pid;

	pid = tpt_fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		ret = tpt_drop_privileges(MEMLOCK_LIMIT);
		if (ret) {
			child_log("dropping privileges", ret);
			_exit(CHILD_SKIP);
		}
		_exit(fn());
	}
	ret = tpt_wait_child(pid, 20000, &status);
	if (ret)
		return ret;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

#define RUN_LIMITED(fn) do {						\
	int __code = run_limited(fn);					\
	if (__code == CHILD_SKIP)					\
		SKIP(return, "cannot drop CAP_IPC_LOCK in a child");	\
	EXPECT_EQ(0, __code) TH_LOG("limited child failed at step %d", \
				    __code);				\
} while (0)

TEST(register_over_memlock_limit_fails_enomem)
{
	RUN_LIMITED(limited_register_over_limit);
}

TEST(alloc_over_memlock_limit_fails_enomem)
{
	struct tp_info info;
	int fd = tpt_open();

	ASSERT_LE(0, fd);
	ASSERT_EQ(0, tpt_get_info(fd, &info));
	TPT_REQUIRE_FEATURES(info, TP_FEAT_REGION_ALLOC);
	RUN_LIMITED(limited_alloc_over_limit);
}

TEST(release_returns_the_memlock_charge)
{
	RUN_LIMITED(limited_release_returns_charge);
}

TEST(memlock_charge_stays_with_the_user_when_the_endpoint_is_passed_on)
{
	RUN_LIMITED(limited_charge_follows_a_passed_endpoint);
}

TEST(memlock_charge_stays_with_the_user_across_execve)
{
	if (access("/proc/self/exe", R_OK))
		SKIP(return, "no /proc/self/exe to exec");
	RUN_LIMITED(limited_charge_survives_execve);
}

/* max_regions is lowered for these; the teardown puts it back. */
FIXTURE(limits)
{
	int fd;
	struct tp_info info;
	struct tpt_params saved;
};

FIXTURE_SETUP(limits)
{
	self->fd = tpt_open();
	ASSERT_LE(0, self->fd);
	ASSERT_EQ(0, tpt_get_info(self->fd, &self->info));
}

FIXTURE_TEARDOWN(limits)
{
	close(self->fd);
	tpt_params_restore(&self->saved);
}

TEST_F(limits, register_beyond_max_regions_fails_enospc)
{
	size_t page = tpt_page_size();
	uint8_t *buf = tpt_map(5 * page);
	uint32_t h[4];
	int i, other;

	ASSERT_NE(NULL, buf);
	TPT_SET_PARAM(&self->saved, "max_regions", 4);
	for (i = 0; i < 4; i++) {
		ASSERT_EQ(0, tpt_register(self->fd, buf + i * page, page,
					  TP_ACCESS_READ, &h[i]));
	}
	EXPECT_EQ(-ENOSPC, tpt_register(self->fd, buf + 4 * page, page,
					TP_ACCESS_READ, NULL));
	/* The limit is per endpoint, and a release makes room again. */
	other = tpt_open();
	ASSERT_LE(0, other);
	EXPECT_EQ(0, tpt_register(other, buf + 4 * page, page, TP_ACCESS_READ,
				  NULL));
	ASSERT_EQ(0, tpt_release(self->fd, h[2]));
	EXPECT_EQ(0, tpt_register(self->fd, buf + 4 * page, page,
				  TP_ACCESS_READ, NULL));
	close(other);
}

TEST_F(limits, alloc_beyond_max_regions_fails_enospc)
{
	size_t page = tpt_page_size();
	uint32_t h[4];
	int i;

	TPT_REQUIRE_FEATURES(self->info, TP_FEAT_REGION_ALLOC);
	TPT_SET_PARAM(&self->saved, "max_regions", 4);
	for (i = 0; i < 4; i++) {
		ASSERT_EQ(0, tpt_alloc(self->fd, page, &h[i], NULL));
	}
	EXPECT_EQ(-ENOSPC, tpt_alloc(self->fd, page, NULL, NULL));
	ASSERT_EQ(0, tpt_release(self->fd, h[0]));
	EXPECT_EQ(0, tpt_alloc(self->fd, page, NULL, NULL));
}

TEST_F(limits, max_region_mb_parameter_bounds_region_length)
{
	void *buf = tpt_map(2 * TPT_MIB);
	struct tp_info info;

	ASSERT_NE(NULL, buf);
	TPT_REQUIRE_PIN(2 * TPT_MIB);
	TPT_SET_PARAM(&self->saved, "max_region_mb", 1);
	ASSERT_EQ(0, tpt_get_info(self->fd, &info));
	ASSERT_EQ(1 * TPT_MIB, info.max_region_bytes);
	EXPECT_EQ(-E2BIG, tpt_register(self->fd, buf, 1 * TPT_MIB + 1,
				       TP_ACCESS_READ, NULL));
	EXPECT_EQ(0, tpt_register(self->fd, buf, 1 * TPT_MIB, TP_ACCESS_READ,
				  NULL));
	if (info.features & TP_FEAT_REGION_ALLOC) {
		EXPECT_EQ(-E2BIG, tpt_alloc(self->fd, 1 * TPT_MIB + 1, NULL,
					    NULL));
		EXPECT_EQ(0, tpt_alloc(self->fd, 1 * TPT_MIB, NULL, NULL));
	}
}

TEST_HARNESS_MAIN
