// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Grants and one-sided copies (TP_FEAT_GRANT): TP_IOC_ENDPOINT_INFO,
 * TP_IOC_GRANT, TP_IOC_GRANT_REVOKE and TP_IOC_COPY, by ioctl and as an
 * io_uring command.  Every validation error of the four commands; a list
 * that fails anywhere moves nothing; a process of another user reaches the
 * granter's memory through a grant only (and has no ptrace right to it);
 * a revoke that returned lets no copy land afterwards, however copies race
 * it.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "tp_test_require.h"
#include "tp_test_uring.h"

#define LEN	(1 * TPT_MIB)
#define SEED_G	0x9a4700ULL

static uint64_t ep_id(int fd)
{
	struct tp_endpoint_info i = { 0 };

	return tpt_ioctl(fd, TP_IOC_ENDPOINT_INFO, &i) ? 0 : i.id;
}

static int grant(int fd, uint64_t grantee, uint32_t region, uint64_t off,
		 uint64_t len, uint32_t access, uint32_t *id)
{
	struct tp_grant g = {
		.grantee = grantee, .region = region, .offset = off,
		.len = len, .access = access,
	};
	int ret = tpt_ioctl(fd, TP_IOC_GRANT, &g);

	if (!ret && id)
		*id = g.id;
	return ret;
}

static int grant_revoke(int fd, uint32_t id)
{
	struct tp_grant_revoke r = { .id = id };

	return tpt_ioctl(fd, TP_IOC_GRANT_REVOKE, &r);
}

static int copy(int fd, const struct tp_copy_elem *e, uint32_t n)
{
	struct tp_copy c = { .elems = (uintptr_t)e, .nr_elems = n };

	return tpt_ioctl(fd, TP_IOC_COPY, &c);
}

static struct tp_copy_elem elem(void *addr, uint32_t grant, uint64_t off,
				uint64_t len, uint32_t dir)
{
	struct tp_copy_elem e = {
		.addr = (uintptr_t)addr, .offset = off, .len = len,
		.grant = grant, .flags = dir,
	};
	return e;
}

/*
 * @p: prod grants, cons copies.  @gbuf is prod's READ|WRITE region @greg;
 * @lbuf is cons's plain (unregistered) memory.
 */
FIXTURE(grant)
{
	struct tpt_pair p;
	uint8_t *gbuf;
	uint8_t *lbuf;
	uint32_t greg;
	uint64_t cons_id;
	uint64_t prod_id;
};

FIXTURE_SETUP(grant)
{
	ASSERT_EQ(0, tpt_pair_open(&self->p, LEN));
	self->gbuf = tpt_map(LEN);
	self->lbuf = tpt_map(LEN);
	ASSERT_NE(NULL, self->gbuf);
	ASSERT_NE(NULL, self->lbuf);
	tpt_fill(self->gbuf, LEN, SEED_G);
	ASSERT_EQ(0, tpt_register(self->p.prod, self->gbuf, LEN,
				  TP_ACCESS_READ | TP_ACCESS_WRITE, &self->greg));
	self->cons_id = ep_id(self->p.cons);
	self->prod_id = ep_id(self->p.prod);
}

FIXTURE_TEARDOWN(grant)
{
	tpt_pair_close(&self->p);
	tpt_unmap(self->gbuf, LEN);
	tpt_unmap(self->lbuf, LEN);
}

TEST_F(grant, endpoint_info)
{
	struct tp_endpoint_info i = { 0 };
	int fd;

	TPT_REQUIRE_FEATURES(self->p.info, TP_FEAT_GRANT);
	ASSERT_EQ(0, tpt_ioctl(self->p.cons, TP_IOC_ENDPOINT_INFO, &i));
	EXPECT_EQ(self->p.domain_id, i.domain_id);
	EXPECT_NE(0, i.id);
	EXPECT_NE(self->prod_id, self->cons_id);
	EXPECT_NE(0, self->prod_id);

	fd = tpt_open();
	ASSERT_LE(0, fd);
	memset(&i, 0, sizeof(i));
	ASSERT_EQ(0, tpt_ioctl(fd, TP_IOC_ENDPOINT_INFO, &i));
	EXPECT_EQ(0, i.domain_id);
	/* Never reused: a new endpoint's id is above every earlier one. */
	EXPECT_GT(i.id, self->cons_id);
	i.flags = 1;
	EXPECT_EQ(-EINVAL, tpt_ioctl(fd, TP_IOC_ENDPOINT_INFO, &i));
	i.flags = 0;
	i.reserved0 = 1;
	EXPECT_EQ(-EINVAL, tpt_ioctl(fd, TP_IOC_ENDPOINT_INFO, &i));
	i.reserved0 = 0;
	i.reserved[1] = 1;
	EXPECT_EQ(-EINVAL, tpt_ioctl(fd, TP_IOC_ENDPOINT_INFO, &i));
	close(fd);
}

TEST_F(grant, read_and_write)
{
	const size_t pg = tpt_page_size();
	const uint64_t goff = pg + 3, glen = LEN / 2;
	struct tp_copy_elem e[4];
	uint32_t id;

	TPT_REQUIRE_FEATURES(self->p.info, TP_FEAT_GRANT);
	ASSERT_EQ(0, grant(self->p.prod, self->cons_id, self->greg, goff, glen,
			   TP_ACCESS_READ | TP_ACCESS_WRITE, &id));
	EXPECT_NE(0, id);

	/* Scattered reads, one ending exactly at the grant's end, one empty. */
	e[0] = elem(self->lbuf, id, 0, 100, TP_COPY_READ);
	e[1] = elem(self->lbuf + 100, id, pg - 7, 3 * pg + 11, TP_COPY_READ);
	e[2] = elem(self->lbuf + 200000, id, glen - 5000, 5000, TP_COPY_READ);
	e[3] = elem(self->lbuf + 300000, id, glen, 0, TP_COPY_READ);
	ASSERT_EQ(0, copy(self->p.cons, e, 4));
	EXPECT_EQ(0, memcmp(self->lbuf, self->gbuf + goff, 100));
	EXPECT_EQ(0, memcmp(self->lbuf + 100, self->gbuf + goff + pg - 7,
			    3 * pg + 11));
	EXPECT_EQ(0, memcmp(self->lbuf + 200000, self->gbuf + goff + glen - 5000,
			    5000));

	/* Writes land in the granter's memory, nowhere else. */
	tpt_fill(self->lbuf, LEN, 77);
	e[0] = elem(self->lbuf, id, 0, glen, TP_COPY_WRITE);
	ASSERT_EQ(0, copy(self->p.cons, e, 1));
	EXPECT_EQ(0, memcmp(self->gbuf + goff, self->lbuf, glen));
	EXPECT_TRUE(tpt_check(self->gbuf, goff, SEED_G));
	EXPECT_EQ(0, grant_revoke(self->p.prod, id));
}

TEST_F(grant, grant_errors)
{
	struct tp_grant g = {
		.grantee = self->cons_id, .region = self->greg, .len = 4096,
		.access = TP_ACCESS_READ,
	};
	struct tp_grant bad;
	uint32_t id;
	int fd;

	TPT_REQUIRE_FEATURES(self->p.info, TP_FEAT_GRANT);
	bad = g;
	bad.flags = 1;
	EXPECT_EQ(-EINVAL, tpt_ioctl(self->p.prod, TP_IOC_GRANT, &bad));
	bad = g;
	bad.reserved = 1;
	EXPECT_EQ(-EINVAL, tpt_ioctl(self->p.prod, TP_IOC_GRANT, &bad));
	bad = g;
	bad.id = 5;
	EXPECT_EQ(-EINVAL, tpt_ioctl(self->p.prod, TP_IOC_GRANT, &bad));
	bad = g;
	bad.access = 0;
	EXPECT_EQ(-EINVAL, tpt_ioctl(self->p.prod, TP_IOC_GRANT, &bad));
	bad = g;
	bad.access = 4;
	EXPECT_EQ(-EINVAL, tpt_ioctl(self->p.prod, TP_IOC_GRANT, &bad));
	bad = g;
	bad.len = 0;
	EXPECT_EQ(-EINVAL, tpt_ioctl(self->p.prod, TP_IOC_GRANT, &bad));
	bad = g;
	bad.grantee = 0;
	EXPECT_EQ(-EINVAL, tpt_ioctl(self->p.prod, TP_IOC_GRANT, &bad));
	bad = g;
	bad.region = 9999;
	EXPECT_EQ(-ENOENT, tpt_ioctl(self->p.prod, TP_IOC_GRANT, &bad));
	/* p.src is registered READ only. */
	bad = g;
	bad.region = self->p.src;
	bad.access = TP_ACCESS_WRITE;
	EXPECT_EQ(-EACCES, tpt_ioctl(self->p.prod, TP_IOC_GRANT, &bad));
	bad = g;
	bad.offset = LEN - 4095;
	EXPECT_EQ(-ERANGE, tpt_ioctl(self->p.prod, TP_IOC_GRANT, &bad));
	bad = g;
	bad.offset = UINT64_MAX - 10;
	EXPECT_EQ(-ERANGE, tpt_ioctl(self->p.prod, TP_IOC_GRANT, &bad));
	/* Exactly to the end is fine. */
	bad = g;
	bad.offset = LEN - 4096;
	EXPECT_EQ(0, tpt_ioctl(self->p.prod, TP_IOC_GRANT, &bad));

	fd = tpt_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, tpt_register(fd, self->gbuf, LEN, TP_ACCESS_READ, &id));
	bad = g;
	bad.region = id;
	EXPECT_EQ(-ENOLINK, tpt_ioctl(fd, TP_IOC_GRANT, &bad));
	close(fd);
}

TEST_F(grant, grant_limit)
{
	uint32_t id, i;

	TPT_REQUIRE_FEATURES(self->p.info, TP_FEAT_GRANT);
	for (i = 0; i < TP_GRANTS_MAX; i++)
		ASSERT_EQ(0, grant(self->p.prod, self->cons_id, self->greg, 0,
				   1, TP_ACCESS_READ, &id));
	EXPECT_EQ(-ENOSPC, grant(self->p.prod, self->cons_id, self->greg, 0, 1,
				 TP_ACCESS_READ, &id));
	/* A revoke makes room again. */
	ASSERT_EQ(0, grant_revoke(self->p.prod, id));
	EXPECT_EQ(0, grant(self->p.prod, self->cons_id, self->greg, 0, 1,
			   TP_ACCESS_READ, &id));
}

TEST_F(grant, copy_errors)
{
	static struct tp_copy_elem many[TP_COPY_MAX_ELEMS + 1];
	struct tp_copy_elem e[2];
	struct tp_copy c = { .elems = (uintptr_t)e, .nr_elems = 1 };
	uint32_t rd, wr, other, big, i;
	uint8_t *big_buf;
	int fd;

	TPT_REQUIRE_FEATURES(self->p.info, TP_FEAT_GRANT);
	ASSERT_EQ(0, grant(self->p.prod, self->cons_id, self->greg, 0, 8192,
			   TP_ACCESS_READ, &rd));
	ASSERT_EQ(0, grant(self->p.prod, self->cons_id, self->greg, 0, 8192,
			   TP_ACCESS_WRITE, &wr));
	ASSERT_EQ(0, grant(self->p.prod, self->prod_id, self->greg, 0, 8192,
			   TP_ACCESS_READ | TP_ACCESS_WRITE, &other));
	e[0] = elem(self->lbuf, rd, 0, 16, TP_COPY_READ);

	c.flags = 1;
	EXPECT_EQ(-EINVAL, tpt_ioctl(self->p.cons, TP_IOC_COPY, &c));
	c.flags = 0;
	c.reserved[0] = 1;
	EXPECT_EQ(-EINVAL, tpt_ioctl(self->p.cons, TP_IOC_COPY, &c));
	c.reserved[0] = 0;
	c.nr_elems = 0;
	EXPECT_EQ(-EINVAL, tpt_ioctl(self->p.cons, TP_IOC_COPY, &c));
	c.nr_elems = TP_COPY_MAX_ELEMS + 1;
	c.elems = (uintptr_t)many;
	for (i = 0; i <= TP_COPY_MAX_ELEMS; i++)
		many[i] = elem(self->lbuf, rd, 0, 1, TP_COPY_READ);
	EXPECT_EQ(-E2BIG, tpt_ioctl(self->p.cons, TP_IOC_COPY, &c));
	c.nr_elems = TP_COPY_MAX_ELEMS;
	EXPECT_EQ(0, tpt_ioctl(self->p.cons, TP_IOC_COPY, &c));
	c.elems = 16;	/* unmapped list */
	c.nr_elems = 1;
	EXPECT_EQ(-EFAULT, tpt_ioctl(self->p.cons, TP_IOC_COPY, &c));

	e[0].flags = 0;
	EXPECT_EQ(-EINVAL, copy(self->p.cons, e, 1));
	e[0].flags = TP_COPY_READ | TP_COPY_WRITE;
	EXPECT_EQ(-EINVAL, copy(self->p.cons, e, 1));
	e[0].flags = 4;
	EXPECT_EQ(-EINVAL, copy(self->p.cons, e, 1));
	e[0] = elem((void *)(uintptr_t)(UINT64_MAX - 7), rd, 0, 16,
		    TP_COPY_READ);
	EXPECT_EQ(-EINVAL, copy(self->p.cons, e, 1));
	/* A kernel address as local memory. */
	e[0] = elem((void *)(uintptr_t)0xffff888000000000ULL, rd, 0, 16,
		    TP_COPY_READ);
	EXPECT_EQ(-EFAULT, copy(self->p.cons, e, 1));

	e[0] = elem(self->lbuf, 12345, 0, 16, TP_COPY_READ);
	EXPECT_EQ(-ENOENT, copy(self->p.cons, e, 1));
	/* Granted to prod, not to cons. */
	e[0] = elem(self->lbuf, other, 0, 16, TP_COPY_READ);
	EXPECT_EQ(-EACCES, copy(self->p.cons, e, 1));
	/* Direction the grant does not allow. */
	e[0] = elem(self->lbuf, rd, 0, 16, TP_COPY_WRITE);
	EXPECT_EQ(-EACCES, copy(self->p.cons, e, 1));
	e[0] = elem(self->lbuf, wr, 0, 16, TP_COPY_READ);
	EXPECT_EQ(-EACCES, copy(self->p.cons, e, 1));
	/* One byte past the grant, and a wrapping offset. */
	e[0] = elem(self->lbuf, rd, 8192 - 15, 16, TP_COPY_READ);
	EXPECT_EQ(-ERANGE, copy(self->p.cons, e, 1));
	e[0] = elem(self->lbuf, rd, UINT64_MAX - 4, 16, TP_COPY_READ);
	EXPECT_EQ(-ERANGE, copy(self->p.cons, e, 1));
	e[0] = elem(self->lbuf, rd, 8193, 0, TP_COPY_READ);
	EXPECT_EQ(-ERANGE, copy(self->p.cons, e, 1));

	/* More than TP_COPY_MAX_BYTES in all (overlapping pieces). */
	big_buf = tpt_map(8 * TPT_MIB);
	ASSERT_NE(NULL, big_buf);
	ASSERT_EQ(0, tpt_register(self->p.prod, big_buf, 8 * TPT_MIB,
				  TP_ACCESS_READ, &i));
	ASSERT_EQ(0, grant(self->p.prod, self->cons_id, i, 0, 8 * TPT_MIB,
			   TP_ACCESS_READ, &big));
	for (i = 0; i < TP_COPY_MAX_ELEMS; i++)
		many[i] = elem(big_buf, big, 0, 8 * TPT_MIB, TP_COPY_READ);
	EXPECT_EQ(-E2BIG, copy(self->p.cons, many, TP_COPY_MAX_ELEMS));
	tpt_unmap(big_buf, 8 * TPT_MIB);

	fd = tpt_open();
	ASSERT_LE(0, fd);
	e[0] = elem(self->lbuf, rd, 0, 16, TP_COPY_READ);
	EXPECT_EQ(-ENOLINK, copy(fd, e, 1));
	close(fd);
}

/* A list that fails on its last element moves nothing, either way. */
TEST_F(grant, all_or_nothing)
{
	struct tp_copy_elem e[3];
	uint32_t id;

	TPT_REQUIRE_FEATURES(self->p.info, TP_FEAT_GRANT);
	ASSERT_EQ(0, grant(self->p.prod, self->cons_id, self->greg, 0, 65536,
			   TP_ACCESS_READ | TP_ACCESS_WRITE, &id));
	memset(self->lbuf, 0xab, LEN);
	e[0] = elem(self->lbuf, id, 0, 4096, TP_COPY_READ);
	e[1] = elem(self->lbuf + 8192, id, 4096, 4096, TP_COPY_WRITE);
	e[2] = elem(self->lbuf + 16384, id, 65536 - 10, 11, TP_COPY_READ);
	EXPECT_EQ(-ERANGE, copy(self->p.cons, e, 3));
	EXPECT_TRUE(tpt_all_bytes(self->lbuf, LEN, 0xab));
	EXPECT_TRUE(tpt_check(self->gbuf, LEN, SEED_G));
	e[2].len = 10;
	EXPECT_EQ(0, copy(self->p.cons, e, 3));
	EXPECT_FALSE(tpt_check(self->gbuf, LEN, SEED_G));
}

TEST_F(grant, revoke_ends_grant)
{
	struct tp_grant_revoke r = { 0 };
	struct tp_copy_elem e;
	uint32_t id, id2;

	TPT_REQUIRE_FEATURES(self->p.info, TP_FEAT_GRANT);
	ASSERT_EQ(0, grant(self->p.prod, self->cons_id, self->greg, 0, 4096,
			   TP_ACCESS_READ, &id));
	e = elem(self->lbuf, id, 0, 4096, TP_COPY_READ);
	ASSERT_EQ(0, copy(self->p.cons, &e, 1));
	r.id = id;
	r.flags = 1;
	EXPECT_EQ(-EINVAL, tpt_ioctl(self->p.prod, TP_IOC_GRANT_REVOKE, &r));
	/* Only its granter revokes a grant. */
	EXPECT_EQ(-ENOENT, grant_revoke(self->p.cons, id));
	EXPECT_EQ(0, copy(self->p.cons, &e, 1));
	EXPECT_EQ(0, grant_revoke(self->p.prod, id));
	EXPECT_EQ(-ENOENT, copy(self->p.cons, &e, 1));
	EXPECT_EQ(-ENOENT, grant_revoke(self->p.prod, id));
	EXPECT_EQ(-ENOENT, grant_revoke(self->p.prod, 777777));

	/* A new grant gets a new id, not the revoked one. */
	ASSERT_EQ(0, grant(self->p.prod, self->cons_id, self->greg, 0, 4096,
			   TP_ACCESS_READ, &id2));
	EXPECT_NE(id, id2);
	/* Releasing the region's handle ends its grants. */
	ASSERT_EQ(0, tpt_release(self->p.prod, self->greg));
	e.grant = id2;
	EXPECT_EQ(-ENOENT, copy(self->p.cons, &e, 1));
}

TEST_F(grant, granter_close_ends_grant)
{
	struct tp_copy_elem e;
	uint32_t id;

	TPT_REQUIRE_FEATURES(self->p.info, TP_FEAT_GRANT);
	ASSERT_EQ(0, grant(self->p.prod, self->cons_id, self->greg, 0, 4096,
			   TP_ACCESS_READ, &id));
	e = elem(self->lbuf, id, 0, 4096, TP_COPY_READ);
	ASSERT_EQ(0, copy(self->p.cons, &e, 1));
	close(self->p.prod);
	self->p.prod = -1;
	EXPECT_EQ(-ENOENT, copy(self->p.cons, &e, 1));
}

/* Another domain's endpoint cannot use a grant, whatever id it names. */
TEST_F(grant, other_domain)
{
	struct tp_copy_elem e;
	int fd, dfd;
	uint32_t id;

	TPT_REQUIRE_FEATURES(self->p.info, TP_FEAT_GRANT);
	fd = tpt_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, tpt_domain_create(fd, &dfd, NULL));
	ASSERT_EQ(0, tpt_domain_attach(fd, dfd, NULL));
	ASSERT_EQ(0, grant(self->p.prod, ep_id(fd), self->greg, 0, 4096,
			   TP_ACCESS_READ, &id));
	e = elem(self->lbuf, id, 0, 4096, TP_COPY_READ);
	EXPECT_EQ(-ENOENT, copy(fd, &e, 1));
	close(fd);
	close(dfd);
}

/*
 * Two users: the child becomes nobody, opens its own endpoint and attaches
 * through the inherited domain descriptor.  It cannot read root's memory
 * with process_vm_readv (no ptrace right), nor through a grant made to
 * another endpoint; it can through its own grant, and only until revoked.
 */
TEST_F(grant, across_users)
{
	int up[2], down[2], status;
	uint64_t child_id;
	uint32_t id, other;
	pid_t pid;

	TPT_REQUIRE_FEATURES(self->p.info, TP_FEAT_GRANT);
	if (geteuid() != 0)
		SKIP(return, "needs root to become another user");
	ASSERT_EQ(0, grant(self->p.prod, self->cons_id, self->greg, 0, 4096,
			   TP_ACCESS_READ, &other));
	ASSERT_EQ(0, pipe(up));
	ASSERT_EQ(0, pipe(down));
	pid = tpt_fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct iovec lv = { self->lbuf, 4096 };
		struct iovec rv = { self->gbuf, 4096 };
		struct tp_copy_elem e;
		uint64_t myid;
		int fd, code = 0;

		if (tpt_drop_privileges(TPT_MIB) || getuid() == 0)
			_exit(10);
		fd = tpt_open();
		if (fd < 0 || tpt_domain_attach(fd, self->p.domain_fd, NULL))
			_exit(11);
		myid = ep_id(fd);
		if (tpt_write_all(up[1], &myid, sizeof(myid)) ||
		    tpt_read_all(down[0], &id, sizeof(id), TPT_SAFETY_TIMEOUT_MS))
			_exit(12);
		/* No ptrace right to the granter. */
		if (process_vm_readv(getppid(), &lv, 1, &rv, 1, 0) != -1 ||
		    (errno != EPERM && errno != ESRCH))
			code |= 1;
		e = elem(self->lbuf, other, 0, 4096, TP_COPY_READ);
		if (copy(fd, &e, 1) != -EACCES)
			code |= 2;
		memset(self->lbuf, 0, 4096);
		e = elem(self->lbuf, id, 0, 4096, TP_COPY_READ);
		if (copy(fd, &e, 1) || !tpt_check(self->lbuf, 4096, SEED_G))
			code |= 4;
		/* Past the grant, still refused. */
		e = elem(self->lbuf, id, 1, 4096, TP_COPY_READ);
		if (copy(fd, &e, 1) != -ERANGE)
			code |= 8;
		if (tpt_notify(up[1]) ||
		    tpt_wait_notify(down[0], TPT_SAFETY_TIMEOUT_MS))
			_exit(13);
		e = elem(self->lbuf, id, 0, 4096, TP_COPY_READ);
		if (copy(fd, &e, 1) != -ENOENT)
			code |= 16;
		_exit(code);
	}
	ASSERT_EQ(0, tpt_read_all(up[0], &child_id, sizeof(child_id),
				  TPT_SAFETY_TIMEOUT_MS));
	EXPECT_NE(self->cons_id, child_id);
	ASSERT_EQ(0, grant(self->p.prod, child_id, self->greg, 0, 4096,
			   TP_ACCESS_READ, &id));
	ASSERT_EQ(0, tpt_write_all(down[1], &id, sizeof(id)));
	ASSERT_EQ(0, tpt_wait_notify(up[0], TPT_SAFETY_TIMEOUT_MS));
	ASSERT_EQ(0, grant_revoke(self->p.prod, id));
	ASSERT_EQ(0, tpt_notify(down[1]));
	ASSERT_EQ(0, tpt_wait_child(pid, TPT_SAFETY_TIMEOUT_MS, &status));
	EXPECT_TRUE(WIFEXITED(status));
	EXPECT_EQ(0, WEXITSTATUS(status));
	close(up[0]);
	close(up[1]);
	close(down[0]);
	close(down[1]);
}

/* @len bytes at a 2 MiB boundary, asked to be transparent huge pages. */
static uint8_t *thp_map(size_t len, void **base)
{
	/* Not populated yet: the first touch, after madvise, takes huge pages. */
	uint8_t *m = mmap(NULL, len + 2 * TPT_MIB, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	*base = m == MAP_FAILED ? NULL : m;
	if (m == MAP_FAILED)
		return NULL;
	m = (uint8_t *)(((uintptr_t)m + 2 * TPT_MIB - 1) & ~(uintptr_t)(2 * TPT_MIB - 1));
	madvise(m, len, MADV_HUGEPAGE);
	memset(m, 0, len);
	return m;
}

/*
 * Huge pages on both sides (32 MiB, so that some folios lie next to each
 * other in physical memory): one element crosses from one 2 MiB folio of
 * the granted region into the next, each way.  (A copy must not run across
 * two folios in one go: hardened usercopy stops the kernel there.  That
 * happens only where two folios are physically adjacent, which this test
 * cannot force: tpbench xfer hit it.)
 */
TEST_F(grant, across_huge_pages)
{
	const size_t len = 32 * TPT_MIB;
	struct tp_copy_elem e;
	void *gb, *lb;
	uint8_t *g = thp_map(len, &gb), *l = thp_map(len, &lb);
	uint32_t reg, id;

	TPT_REQUIRE_FEATURES(self->p.info, TP_FEAT_GRANT);
	ASSERT_NE(NULL, g);
	ASSERT_NE(NULL, l);
	tpt_fill(g, len, 31);
	ASSERT_EQ(0, tpt_register(self->p.prod, g, len,
				  TP_ACCESS_READ | TP_ACCESS_WRITE, &reg));
	ASSERT_EQ(0, grant(self->p.prod, self->cons_id, reg, 0, len,
			   TP_ACCESS_READ | TP_ACCESS_WRITE, &id));
	e = elem(l, id, 4096, len - 8192, TP_COPY_READ);
	ASSERT_EQ(0, copy(self->p.cons, &e, 1));
	EXPECT_EQ(0, memcmp(l, g + 4096, len - 8192));
	tpt_fill(l, len, 32);
	e = elem(l + 1, id, 2 * TPT_MIB - 100, 300, TP_COPY_WRITE);
	ASSERT_EQ(0, copy(self->p.cons, &e, 1));
	EXPECT_EQ(0, memcmp(g + 2 * TPT_MIB - 100, l + 1, 300));
	e = elem(l, id, 0, len, TP_COPY_WRITE);
	ASSERT_EQ(0, copy(self->p.cons, &e, 1));
	EXPECT_EQ(0, memcmp(g, l, len));
	tpt_unmap(gb, len + 2 * TPT_MIB);
	tpt_unmap(lb, len + 2 * TPT_MIB);
}

struct racer {
	int fd;
	struct tp_copy_elem e;
	int last;
	long copies;
};

static void *racer_main(void *arg)
{
	struct racer *r = arg;

	do {
		r->last = copy(r->fd, &r->e, 1);
		r->copies++;
	} while (r->last == 0);
	return NULL;
}

/*
 * A thread writes through the grant as fast as it can while the granter
 * revokes.  Once the revoke returned, the granter overwrites its memory;
 * no byte of the racer may land after that, and the racer ends with
 * -ENOENT.
 */
TEST_F(grant, revoke_races_copies)
{
	int round;

	TPT_REQUIRE_FEATURES(self->p.info, TP_FEAT_GRANT);
	tpt_fill(self->lbuf, LEN, 5);
	for (round = 0; round < 20; round++) {
		struct racer r = { .fd = self->p.cons };
		pthread_t t;
		uint32_t id;

		ASSERT_EQ(0, grant(self->p.prod, self->cons_id, self->greg, 0,
				   LEN, TP_ACCESS_WRITE, &id));
		r.e = elem(self->lbuf, id, 0, LEN, TP_COPY_WRITE);
		ASSERT_EQ(0, pthread_create(&t, NULL, racer_main, &r));
		tpt_sleep_ms(round % 5);
		ASSERT_EQ(0, grant_revoke(self->p.prod, id));
		memset(self->gbuf, 0x11, LEN);
		ASSERT_EQ(0, pthread_join(t, NULL));
		EXPECT_EQ(-ENOENT, r.last);
		EXPECT_TRUE(tpt_all_bytes(self->gbuf, LEN, 0x11));
	}
}

TEST_F(grant, uring_copy)
{
	struct io_uring ring, small;
	struct tp_copy_elem e[2];
	struct tp_copy c = { .elems = (uintptr_t)e, .nr_elems = 2 };
	struct tpt_cqe cqe;
	uint32_t id;

	TPT_REQUIRE_FEATURES(self->p.info, TP_FEAT_GRANT | TP_FEAT_URING_CMD);
	ASSERT_EQ(0, tpt_ring_init(&ring, 8, TPT_RING_FLAGS));
	ASSERT_EQ(0, grant(self->p.prod, self->cons_id, self->greg, 0, LEN,
			   TP_ACCESS_READ | TP_ACCESS_WRITE, &id));
	e[0] = elem(self->lbuf, id, 4096, 65536, TP_COPY_READ);
	e[1] = elem(self->lbuf + 65536, id, 0, 10, TP_COPY_READ);
	ASSERT_EQ(0, tpt_uring_cmd(&ring, self->p.cons, TP_IOC_COPY, &c,
				   sizeof(c), 7));
	ASSERT_EQ(0, tpt_uring_wait(&ring, &cqe, TPT_SAFETY_TIMEOUT_MS));
	EXPECT_EQ(7, cqe.user_data);
	EXPECT_EQ(0, cqe.res);
	EXPECT_EQ(0, memcmp(self->lbuf, self->gbuf + 4096, 65536));
	EXPECT_EQ(0, memcmp(self->lbuf + 65536, self->gbuf, 10));

	/* Validation errors come back as the CQE's res. */
	c.nr_elems = 0;
	ASSERT_EQ(0, tpt_uring_cmd(&ring, self->p.cons, TP_IOC_COPY, &c,
				   sizeof(c), 8));
	ASSERT_EQ(0, tpt_uring_wait(&ring, &cqe, TPT_SAFETY_TIMEOUT_MS));
	EXPECT_EQ(-EINVAL, cqe.res);
	c.nr_elems = 1;
	e[0].flags = TP_COPY_WRITE;
	e[0].offset = LEN - 10;
	e[0].len = 11;
	ASSERT_EQ(0, tpt_uring_cmd(&ring, self->p.cons, TP_IOC_COPY, &c,
				   sizeof(c), 9));
	ASSERT_EQ(0, tpt_uring_wait(&ring, &cqe, TPT_SAFETY_TIMEOUT_MS));
	EXPECT_EQ(-ERANGE, cqe.res);
	/* The granter itself is not the grantee. */
	e[0].len = 10;
	ASSERT_EQ(0, tpt_uring_cmd(&ring, self->p.prod, TP_IOC_COPY, &c,
				   sizeof(c), 10));
	ASSERT_EQ(0, tpt_uring_wait(&ring, &cqe, TPT_SAFETY_TIMEOUT_MS));
	EXPECT_EQ(-EACCES, cqe.res);
	EXPECT_TRUE(tpt_check(self->gbuf, LEN, SEED_G));
	io_uring_queue_exit(&ring);

	/* Without SQE128 the struct does not fit. */
	ASSERT_EQ(0, tpt_ring_init(&small, 4, 0));
	ASSERT_EQ(0, tpt_uring_cmd(&small, self->p.cons, TP_IOC_COPY, &c,
				   sizeof(c), 11));
	ASSERT_EQ(0, tpt_uring_wait(&small, &cqe, TPT_SAFETY_TIMEOUT_MS));
	EXPECT_EQ(-EINVAL, cqe.res);
	io_uring_queue_exit(&small);
}

TEST_HARNESS_MAIN
