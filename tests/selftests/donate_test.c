// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Donation: TP_SEND_DONATE hands the pages of an allocated, unmapped region
 * to the slot; TP_RECV_DONATE turns a slot into a new region of the
 * consumer, moving donated pages and copying anything else.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "tp_test_require.h"

#define LEN		(256 * TPT_KIB)
#define CHILD_SKIP	77

FIXTURE(donate)
{
	struct tpt_pair p;
	struct tpt_params saved;
};

FIXTURE_SETUP(donate)
{
	ASSERT_EQ(0, tpt_pair_open(&self->p, LEN));
}

FIXTURE_TEARDOWN(donate)
{
	tpt_pair_close(&self->p);
	tpt_params_restore(&self->saved);
}

#define REQUIRE_DONATE(p) \
	TPT_REQUIRE_FEATURES((p)->info, TP_FEAT_DONATE | TP_FEAT_REGION_ALLOC)

/* An allocated region on @fd holding pattern @seed, mapped no more. */
static int make_donor(int fd, uint64_t len, uint64_t seed, uint32_t *handle)
{
	uint64_t off;
	void *m;
	int ret;

	ret = tpt_alloc(fd, len, handle, &off);
	if (ret)
		return ret;
	m = tpt_map_region(fd, off, len, PROT_READ | PROT_WRITE);
	if (!m)
		return -errno;
	tpt_fill(m, len, seed);
	return munmap(m, len) ? -errno : 0;
}

static int send_donate(int fd, const char *key, uint32_t handle, uint64_t len,
		       uint64_t user_data)
{
	struct tp_send s;

	tpt_send_prep(&s, key, strlen(key), handle, 0, len, user_data);
	s.flags = TP_SEND_DONATE;
	return tpt_ioctl(fd, TP_IOC_SEND, &s);
}

static int recv_donate(int fd, const char *key, uint64_t cap,
		       struct tp_recv *r)
{
	tpt_recv_prep(r, key, strlen(key), 0, 0, cap, TPT_SAFETY_TIMEOUT_NS);
	r->flags = TP_RECV_DONATE;
	return tpt_ioctl(fd, TP_IOC_RECV, r);
}

TEST_F(donate, donate_send_moves_pages_to_donate_recv)
{
	struct tpt_pair *p = &self->p;
	struct tp_completion c;
	struct tp_recv r;
	uint32_t h;
	void *m;

	REQUIRE_DONATE(p);
	ASSERT_EQ(0, make_donor(p->prod, LEN, 21, &h));
	ASSERT_EQ(0, send_donate(p->prod, "d", h, LEN, 1));
	ASSERT_EQ(0, recv_donate(p->cons, "d", LEN, &r));
	EXPECT_EQ(LEN, r.len);
	EXPECT_EQ((uint64_t)r.region << TP_MMAP_REGION_SHIFT, r.mmap_offset);
	m = tpt_map_region(p->cons, r.mmap_offset, LEN, PROT_READ);
	ASSERT_NE(NULL, m);
	EXPECT_TRUE(tpt_check(m, LEN, 21));
	munmap(m, LEN);
	EXPECT_EQ(0, tpt_release(p->cons, r.region));

	ASSERT_EQ(1, tpt_read_completions(p->prod, &c, 1, 5000));
	EXPECT_EQ(1ULL, c.user_data);
	EXPECT_EQ(0, c.status);
	EXPECT_EQ(LEN, c.len);
}

TEST_F(donate, donate_send_consumes_the_handle_at_once)
{
	struct tpt_pair *p = &self->p;
	uint64_t off;
	uint32_t h;

	REQUIRE_DONATE(p);
	ASSERT_EQ(0, make_donor(p->prod, LEN, 22, &h));
	off = (uint64_t)h << TP_MMAP_REGION_SHIFT;
	ASSERT_EQ(0, send_donate(p->prod, "d", h, LEN, 1));
	EXPECT_EQ(-ENOENT, tpt_release(p->prod, h));
	EXPECT_EQ(-ENOENT, tpt_send(p->prod, "again", h, 0, LEN, 2));
	EXPECT_EQ(NULL, tpt_map_region(p->prod, off, LEN, PROT_READ));
	EXPECT_EQ(EINVAL, errno);
}

TEST_F(donate, donated_region_is_writable_by_its_new_owner)
{
	struct tpt_pair *p = &self->p;
	struct tp_recv r;
	uint8_t *m;
	uint32_t h;

	REQUIRE_DONATE(p);
	ASSERT_EQ(0, make_donor(p->prod, LEN, 23, &h));
	ASSERT_EQ(0, send_donate(p->prod, "d", h, LEN, 1));
	ASSERT_EQ(0, recv_donate(p->cons, "d", LEN, &r));
	m = tpt_map_region(p->cons, r.mmap_offset, LEN, PROT_READ | PROT_WRITE);
	ASSERT_NE(NULL, m);
	EXPECT_TRUE(tpt_check(m, LEN, 23));
	tpt_fill(m, LEN, 24);
	EXPECT_TRUE(tpt_check(m, LEN, 24));
	munmap(m, LEN);
}

TEST_F(donate, donate_recv_of_copy_sent_tensor_returns_new_region_with_bytes)
{
	struct tpt_pair *p = &self->p;
	const uint64_t n = LEN - 100;
	struct tp_completion c;
	struct tp_recv r;
	void *m;

	REQUIRE_DONATE(p);
	ASSERT_EQ(0, tpt_send(p->prod, "c", p->src, 50, n, 1));
	ASSERT_EQ(0, recv_donate(p->cons, "c", LEN, &r));
	EXPECT_EQ(n, r.len);
	m = tpt_map_region(p->cons, r.mmap_offset, n, PROT_READ);
	ASSERT_NE(NULL, m);
	EXPECT_EQ(0, memcmp(m, p->sbuf + 50, n));
	munmap(m, n);
	ASSERT_EQ(1, tpt_read_completions(p->prod, &c, 1, 5000));
	EXPECT_EQ(0, c.status);
	EXPECT_EQ(n, c.len);
}

TEST_F(donate, copy_recv_of_donated_tensor_copies_the_bytes)
{
	struct tpt_pair *p = &self->p;
	uint64_t len = 0;
	uint32_t h;

	REQUIRE_DONATE(p);
	ASSERT_EQ(0, make_donor(p->prod, LEN, 25, &h));
	ASSERT_EQ(0, send_donate(p->prod, "d", h, LEN, 1));
	ASSERT_EQ(0, tpt_recv_nonblock(p->cons, "d", p->dst, 0, LEN, &len));
	EXPECT_EQ(LEN, len);
	EXPECT_TRUE(tpt_check(p->dbuf, LEN, 25));
}

TEST_F(donate, donate_of_mapped_region_fails_ebusy)
{
	struct tpt_pair *p = &self->p;
	uint64_t off;
	uint32_t h;
	void *m;

	REQUIRE_DONATE(p);
	ASSERT_EQ(0, tpt_alloc(p->prod, LEN, &h, &off));
	m = tpt_map_region(p->prod, off, LEN, PROT_READ | PROT_WRITE);
	ASSERT_NE(NULL, m);
	EXPECT_EQ(-EBUSY, send_donate(p->prod, "d", h, LEN, 1));
	EXPECT_EQ(-EAGAIN, tpt_recv_nonblock(p->cons, "d", p->dst, 0, LEN,
					     NULL));
	/* The handle survived the refusal. */
	ASSERT_EQ(0, munmap(m, LEN));
	EXPECT_EQ(0, send_donate(p->prod, "d", h, LEN, 1));
}

TEST_F(donate, donate_needs_every_mapping_of_the_region_gone)
{
	struct tpt_pair *p = &self->p;
	uint64_t off;
	void *a, *b;
	uint32_t h;

	REQUIRE_DONATE(p);
	ASSERT_EQ(0, tpt_alloc(p->prod, LEN, &h, &off));
	a = tpt_map_region(p->prod, off, LEN, PROT_READ | PROT_WRITE);
	b = tpt_map_region(p->prod, off, LEN, PROT_READ);
	ASSERT_NE(NULL, a);
	ASSERT_NE(NULL, b);
	ASSERT_EQ(0, munmap(a, LEN));
	EXPECT_EQ(-EBUSY, send_donate(p->prod, "d", h, LEN, 1));
	ASSERT_EQ(0, munmap(b, LEN));
	EXPECT_EQ(0, send_donate(p->prod, "d", h, LEN, 1));
}

/* Idle means no other user either: a pending SEND still reads it. */
TEST_F(donate, donate_of_region_feeding_a_pending_send_fails_ebusy)
{
	struct tpt_pair *p = &self->p;
	struct tp_completion c;
	uint32_t h;

	REQUIRE_DONATE(p);
	ASSERT_EQ(0, make_donor(p->prod, LEN, 33, &h));
	ASSERT_EQ(0, tpt_send(p->prod, "copy", h, 0, LEN, 1));
	EXPECT_EQ(-EBUSY, send_donate(p->prod, "d", h, LEN, 2));
	ASSERT_EQ(0, tpt_recv_nonblock(p->cons, "copy", p->dst, 0, LEN, NULL));
	EXPECT_TRUE(tpt_check(p->dbuf, LEN, 33));
	ASSERT_EQ(1, tpt_read_completions(p->prod, &c, 1, 5000));
	EXPECT_EQ(0, send_donate(p->prod, "d", h, LEN, 2));
}

TEST_F(donate, donate_of_region_a_recv_waits_to_fill_fails_ebusy)
{
	struct tpt_pair *p = &self->p;
	struct tpt_thread_recv t;
	uint32_t count = 0;
	uint32_t h;

	REQUIRE_DONATE(p);
	ASSERT_EQ(0, make_donor(p->cons, LEN, 34, &h));
	ASSERT_EQ(0, tpt_thread_recv_start(&t, p->cons, "k", h, LEN,
					   TPT_SAFETY_TIMEOUT_NS));
	ASSERT_EQ(0, tpt_wait_waiters(p->domain_id, 1));
	EXPECT_EQ(-EBUSY, send_donate(p->cons, "d", h, LEN, 1));
	ASSERT_EQ(0, tpt_cancel(p->cons, "k", TP_CANCEL_RECV, &count));
	ASSERT_EQ(0, tpt_thread_recv_join(&t, TPT_SAFETY_TIMEOUT_MS));
	EXPECT_EQ(-ECANCELED, t.ret);
	EXPECT_EQ(0, send_donate(p->cons, "d", h, LEN, 1));
}

TEST_F(donate, donate_of_registered_region_fails_einval)
{
	struct tpt_pair *p = &self->p;

	REQUIRE_DONATE(p);
	EXPECT_EQ(-EINVAL, send_donate(p->prod, "d", p->src, LEN, 1));
	/* The registered region is still fine for a copy SEND. */
	EXPECT_EQ(0, tpt_send(p->prod, "d", p->src, 0, LEN, 1));
}

TEST_F(donate, donate_with_nonzero_offset_fails_einval)
{
	struct tpt_pair *p = &self->p;
	struct tp_send s;
	uint32_t h;

	REQUIRE_DONATE(p);
	ASSERT_EQ(0, make_donor(p->prod, LEN, 26, &h));
	tpt_send_prep(&s, "d", 1, h, 4096, 4096, 1);
	s.flags = TP_SEND_DONATE;
	EXPECT_EQ(-EINVAL, tpt_ioctl(p->prod, TP_IOC_SEND, &s));
	/* Not consumed by the failed SEND. */
	EXPECT_EQ(0, tpt_release(p->prod, h));
}

TEST_F(donate, donate_recv_with_nonzero_region_fails_einval)
{
	struct tpt_pair *p = &self->p;
	struct tp_recv r;

	REQUIRE_DONATE(p);
	ASSERT_EQ(0, tpt_send(p->prod, "c", p->src, 0, LEN, 1));
	tpt_recv_prep(&r, "c", 1, p->dst, 0, LEN, TPT_SAFETY_TIMEOUT_NS);
	r.flags = TP_RECV_DONATE;
	EXPECT_EQ(-EINVAL, tpt_ioctl(p->cons, TP_IOC_RECV, &r));
	EXPECT_EQ(0, tpt_recv_nonblock(p->cons, "c", p->dst, 0, LEN, NULL));
}

TEST_F(donate, donate_recv_with_nonzero_offset_fails_einval)
{
	struct tpt_pair *p = &self->p;
	struct tp_recv r;

	REQUIRE_DONATE(p);
	ASSERT_EQ(0, tpt_send(p->prod, "c", p->src, 0, LEN, 1));
	tpt_recv_prep(&r, "c", 1, 0, 8, LEN, TPT_SAFETY_TIMEOUT_NS);
	r.flags = TP_RECV_DONATE;
	EXPECT_EQ(-EINVAL, tpt_ioctl(p->cons, TP_IOC_RECV, &r));
	EXPECT_EQ(0, tpt_recv_nonblock(p->cons, "c", p->dst, 0, LEN, NULL));
}

TEST_F(donate, donate_recv_with_small_len_fails_emsgsize_and_keeps_slot)
{
	struct tpt_pair *p = &self->p;
	struct tp_recv r;
	uint32_t h;
	void *m;

	REQUIRE_DONATE(p);
	ASSERT_EQ(0, make_donor(p->prod, LEN, 27, &h));
	ASSERT_EQ(0, send_donate(p->prod, "d", h, LEN, 1));
	EXPECT_EQ(-EMSGSIZE, recv_donate(p->cons, "d", LEN / 2, &r));
	EXPECT_EQ(LEN, r.len);
	ASSERT_EQ(0, recv_donate(p->cons, "d", r.len, &r));
	m = tpt_map_region(p->cons, r.mmap_offset, LEN, PROT_READ);
	ASSERT_NE(NULL, m);
	EXPECT_TRUE(tpt_check(m, LEN, 27));
}

TEST_F(donate, donate_recv_waiting_before_donate_send_gets_the_pages)
{
	struct tpt_pair *p = &self->p;
	struct tpt_rx_args a = {
		.domain_fd = p->domain_fd, .key = "d", .key_len = 1,
		.flags = TP_RECV_DONATE, .cap = LEN,
		.timeout_ns = TPT_SAFETY_TIMEOUT_NS,
	};
	struct tpt_rx_result res;
	struct tpt_rx rx;
	uint32_t h;

	REQUIRE_DONATE(p);
	ASSERT_EQ(0, make_donor(p->prod, LEN, 28, &h));
	ASSERT_EQ(0, tpt_rx_start(&rx, &a));
	ASSERT_EQ(0, tpt_wait_waiters(p->domain_id, 1));
	ASSERT_EQ(0, send_donate(p->prod, "d", h, LEN, 1));
	ASSERT_EQ(0, tpt_rx_finish(&rx, TPT_SAFETY_TIMEOUT_MS, &res));
	EXPECT_EQ(0, res.ret);
	EXPECT_EQ(0, res.aux);
	EXPECT_EQ(LEN, res.len);
	EXPECT_EQ(tpt_pattern_sum(LEN, 28), res.sum);
}

TEST_F(donate, received_region_can_be_donated_onward)
{
	struct tpt_pair *p = &self->p;
	struct tp_recv r, back;
	uint32_t h;
	void *m;

	REQUIRE_DONATE(p);
	ASSERT_EQ(0, make_donor(p->prod, LEN, 29, &h));
	ASSERT_EQ(0, send_donate(p->prod, "there", h, LEN, 1));
	ASSERT_EQ(0, recv_donate(p->cons, "there", LEN, &r));
	ASSERT_EQ(0, send_donate(p->cons, "back", r.region, LEN, 2));
	ASSERT_EQ(0, recv_donate(p->prod, "back", LEN, &back));
	m = tpt_map_region(p->prod, back.mmap_offset, LEN, PROT_READ);
	ASSERT_NE(NULL, m);
	EXPECT_TRUE(tpt_check(m, LEN, 29));
}

/* RLIMIT_MEMLOCK applies to the new region, so the child drops CAP_IPC_LOCK. */
TEST_F(donate, donate_recv_over_memlock_limit_fails_enomem_and_keeps_slot)
{
	struct tpt_pair *p = &self->p;
	uint64_t len = 0;
	int status = 0;
	pid_t pid;

	REQUIRE_DONATE(p);
	ASSERT_EQ(0, tpt_send(p->prod, "c", p->src, 0, LEN, 1));
	pid = tpt_fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct tp_recv r;
		int fd, ret;

		if (tpt_drop_privileges(64 * TPT_KIB))
			_exit(CHILD_SKIP);
		fd = tpt_open();
		if (fd < 0 || tpt_domain_attach(fd, p->domain_fd, NULL))
			_exit(10);
		ret = recv_donate(fd, "c", LEN, &r);
		_exit(ret == -ENOMEM ? 0 : ret == 0 ? 1 : 2);
	}
	ASSERT_EQ(0, tpt_wait_child(pid, 20000, &status));
	ASSERT_TRUE(WIFEXITED(status));
	if (WEXITSTATUS(status) == CHILD_SKIP)
		SKIP(return, "cannot drop CAP_IPC_LOCK in a child");
	EXPECT_EQ(0, WEXITSTATUS(status));
	ASSERT_EQ(0, tpt_recv_nonblock(p->cons, "c", p->dst, 0, LEN, &len));
	EXPECT_TRUE(tpt_check(p->dbuf, LEN, TPT_SEED_SRC));
}

/* The new region counts against max_regions like any other. */
TEST_F(donate, donate_recv_beyond_max_regions_fails_enospc_and_keeps_slot)
{
	struct tpt_pair *p = &self->p;
	struct tp_recv r;
	uint64_t len = 0;

	REQUIRE_DONATE(p);
	/* The consumer holds one region already: its destination. */
	TPT_SET_PARAM(&self->saved, "max_regions", 1);
	ASSERT_EQ(0, tpt_send(p->prod, "c", p->src, 0, LEN, 1));
	EXPECT_EQ(-ENOSPC, recv_donate(p->cons, "c", LEN, &r));
	ASSERT_EQ(0, tpt_recv_nonblock(p->cons, "c", p->dst, 0, LEN, &len));
	EXPECT_TRUE(tpt_check(p->dbuf, LEN, TPT_SEED_SRC));
}

TEST_F(donate, donated_bytes_are_counted_as_donated_not_copied)
{
	struct tpt_pair *p = &self->p;
	struct tp_recv r;
	int64_t v;
	uint32_t h;

	REQUIRE_DONATE(p);
	TPT_REQUIRE_DEBUGFS();
	ASSERT_EQ(0, make_donor(p->prod, LEN, 30, &h));
	ASSERT_EQ(0, send_donate(p->prod, "d", h, LEN, 1));
	ASSERT_EQ(0, recv_donate(p->cons, "d", LEN, &r));
	ASSERT_EQ(0, tpt_domain_stat(p->domain_id, "bytes_donated", &v));
	EXPECT_EQ((int64_t)LEN, v);
	ASSERT_EQ(0, tpt_domain_stat(p->domain_id, "bytes_copied", &v));
	EXPECT_EQ(0, v);
}

TEST_F(donate, cancelled_donate_send_frees_its_pages)
{
	struct tpt_pair *p = &self->p;
	struct tp_completion c;
	int64_t base;
	uint32_t h;

	REQUIRE_DONATE(p);
	TPT_REQUIRE_DEBUGFS();
	ASSERT_EQ(0, tpt_stat("alloc_pages", &base));
	ASSERT_EQ(0, make_donor(p->prod, LEN, 31, &h));
	ASSERT_EQ(0, send_donate(p->prod, "d", h, LEN, 1));
	ASSERT_EQ(0, tpt_cancel(p->prod, "d", TP_CANCEL_SEND, NULL));
	ASSERT_EQ(1, tpt_read_completions(p->prod, &c, 1, 5000));
	EXPECT_EQ(-ECANCELED, c.status);
	EXPECT_EQ(0, tpt_wait_stat("alloc_pages", base, 5000));
}

TEST_F(donate, closing_producer_frees_pages_of_its_pending_donate)
{
	struct tpt_pair *p = &self->p;
	int64_t base;
	uint32_t h;

	REQUIRE_DONATE(p);
	TPT_REQUIRE_DEBUGFS();
	ASSERT_EQ(0, tpt_stat("alloc_pages", &base));
	ASSERT_EQ(0, make_donor(p->prod, LEN, 32, &h));
	ASSERT_EQ(0, send_donate(p->prod, "d", h, LEN, 1));
	ASSERT_EQ(0, close(p->prod));
	p->prod = -1;
	EXPECT_EQ(0, tpt_wait_stat("alloc_pages", base, 5000));
	EXPECT_EQ(-EAGAIN, tpt_recv_nonblock(p->cons, "d", p->dst, 0, LEN,
					     NULL));
}

TEST_HARNESS_MAIN
