// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Validation errors of TP_IOC_SEND, TP_IOC_RECV, TP_IOC_CANCEL and
 * TP_IOC_ABORT, one test per cause.  Each test also proves the failed call
 * changed nothing: no slot appears, a pending slot stays, a domain is not
 * aborted.  Errors that need more than a bad argument (-EEXIST, -EMSGSIZE,
 * -EAGAIN, -ETIMEDOUT, -EINTR, -ECANCELED, -EALREADY) are in slot_test,
 * the DONATE ones in donate_test, -ENOSPC and -ENOBUFS in stress_test.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "tp_test_require.h"

#define LEN		(64 * TPT_KIB)
#define TENSOR		100
#define GUARD_NS	(1 * TPT_NSEC_PER_SEC)

FIXTURE(errors)
{
	struct tpt_pair p;
	uint8_t *long_key;	/* TP_KEY_MAX_ABI + 1 readable bytes */
	void *no_access;	/* a PROT_NONE page */
};

FIXTURE_SETUP(errors)
{
	ASSERT_EQ(0, tpt_pair_open(&self->p, LEN));
	self->long_key = tpt_map(TP_KEY_MAX_ABI + 1);
	ASSERT_NE(NULL, self->long_key);
	memset(self->long_key, 'x', TP_KEY_MAX_ABI + 1);
	self->no_access = mmap(NULL, tpt_page_size(), PROT_NONE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, self->no_access);
}

FIXTURE_TEARDOWN(errors)
{
	tpt_pair_close(&self->p);
}

static void send_prep_valid(const struct tpt_pair *p, struct tp_send *s)
{
	tpt_send_prep(s, "k", 1, p->src, 0, TENSOR, 1);
}

static int do_send(const struct tpt_pair *p, struct tp_send *s)
{
	return tpt_ioctl(p->prod, TP_IOC_SEND, s);
}

/* A refused SEND must not have left a slot behind. */
static void expect_no_slot(struct __test_metadata *_metadata,
			   const struct tpt_pair *p)
{
	EXPECT_EQ(-EAGAIN, tpt_recv_nonblock(p->cons, "k", p->dst, 0, LEN,
					     NULL));
}

TEST_F(errors, send_with_unknown_flag_fails_einval)
{
	struct tp_send s;

	send_prep_valid(&self->p, &s);
	s.flags = 1U << 1;
	EXPECT_EQ(-EINVAL, do_send(&self->p, &s));
	s.flags = 1U << 31;
	EXPECT_EQ(-EINVAL, do_send(&self->p, &s));
	expect_no_slot(_metadata, &self->p);
}

TEST_F(errors, send_with_nonzero_reserved0_fails_einval)
{
	struct tp_send s;

	send_prep_valid(&self->p, &s);
	s.reserved0 = 1;
	EXPECT_EQ(-EINVAL, do_send(&self->p, &s));
	expect_no_slot(_metadata, &self->p);
}

TEST_F(errors, send_with_nonzero_reserved_fails_einval)
{
	struct tp_send s;
	int i;

	for (i = 0; i < 2; i++) {
		send_prep_valid(&self->p, &s);
		s.reserved[i] = 1ULL << 63;
		EXPECT_EQ(-EINVAL, do_send(&self->p, &s))
			TH_LOG("reserved[%d] was accepted", i);
	}
	expect_no_slot(_metadata, &self->p);
}

TEST_F(errors, send_with_empty_key_fails_einval)
{
	struct tp_send s;

	send_prep_valid(&self->p, &s);
	s.key_len = 0;
	EXPECT_EQ(-EINVAL, do_send(&self->p, &s));
}

TEST_F(errors, send_with_key_longer_than_max_fails_enametoolong)
{
	struct tp_send s;

	send_prep_valid(&self->p, &s);
	s.key_ptr = (uintptr_t)self->long_key;
	s.key_len = self->p.info.max_key_len + 1;
	EXPECT_EQ(-ENAMETOOLONG, do_send(&self->p, &s));
	s.key_len = TP_KEY_MAX_ABI + 1;
	EXPECT_EQ(-ENAMETOOLONG, do_send(&self->p, &s));
	/* Checked before the key is read: no 4 GiB copy. */
	s.key_len = UINT32_MAX;
	EXPECT_EQ(-ENAMETOOLONG, do_send(&self->p, &s));
}

TEST_F(errors, send_on_unattached_endpoint_fails_enolink)
{
	struct tp_send s;
	uint32_t h;
	int fd;

	fd = tpt_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, tpt_register(fd, self->p.sbuf, LEN, TP_ACCESS_READ, &h));
	tpt_send_prep(&s, "k", 1, h, 0, TENSOR, 1);
	EXPECT_EQ(-ENOLINK, tpt_ioctl(fd, TP_IOC_SEND, &s));
	close(fd);
}

TEST_F(errors, send_from_unknown_region_fails_enoent)
{
	struct tp_send s;

	send_prep_valid(&self->p, &s);
	s.region = self->p.src + 1000;
	EXPECT_EQ(-ENOENT, do_send(&self->p, &s));
	ASSERT_EQ(0, tpt_release(self->p.prod, self->p.src));
	s.region = self->p.src;
	EXPECT_EQ(-ENOENT, do_send(&self->p, &s));
	expect_no_slot(_metadata, &self->p);
}

TEST_F(errors, send_from_region_without_read_access_fails_eacces)
{
	struct tp_send s;
	uint32_t h;

	ASSERT_EQ(0, tpt_register(self->p.prod, self->p.sbuf, LEN,
				  TP_ACCESS_WRITE, &h));
	send_prep_valid(&self->p, &s);
	s.region = h;
	EXPECT_EQ(-EACCES, do_send(&self->p, &s));
	expect_no_slot(_metadata, &self->p);
}

TEST_F(errors, send_past_region_end_fails_erange)
{
	struct tp_send s;

	send_prep_valid(&self->p, &s);
	s.offset = LEN - 10;
	s.len = 11;
	EXPECT_EQ(-ERANGE, do_send(&self->p, &s));
	s.offset = 0;
	s.len = LEN + 1;
	EXPECT_EQ(-ERANGE, do_send(&self->p, &s));
	s.offset = LEN + 1;
	s.len = 0;
	EXPECT_EQ(-ERANGE, do_send(&self->p, &s));
	expect_no_slot(_metadata, &self->p);
	/* The last byte is still inside. */
	s.offset = LEN - 10;
	s.len = 10;
	EXPECT_EQ(0, do_send(&self->p, &s));
}

/* An allocated region's range is its length, not its last page's end. */
TEST_F(errors, send_past_alloc_length_fails_erange_inside_its_page)
{
	struct tp_send s;
	uint32_t h;

	TPT_REQUIRE_FEATURES(self->p.info, TP_FEAT_REGION_ALLOC);
	ASSERT_EQ(0, tpt_alloc(self->p.prod, 100, &h, NULL));
	tpt_send_prep(&s, "k", 1, h, 0, 101, 1);
	EXPECT_EQ(-ERANGE, do_send(&self->p, &s));
	s.offset = 100;
	s.len = 1;
	EXPECT_EQ(-ERANGE, do_send(&self->p, &s));
	expect_no_slot(_metadata, &self->p);
	s.offset = 0;
	s.len = 100;
	EXPECT_EQ(0, do_send(&self->p, &s));
}

TEST_F(errors, send_with_wrapping_offset_fails_erange)
{
	struct tp_send s;

	send_prep_valid(&self->p, &s);
	s.offset = UINT64_MAX;
	s.len = 2;
	EXPECT_EQ(-ERANGE, do_send(&self->p, &s));
	s.offset = 2;
	s.len = UINT64_MAX;
	EXPECT_EQ(-ERANGE, do_send(&self->p, &s));
	expect_no_slot(_metadata, &self->p);
}

TEST_F(errors, send_with_unreadable_key_fails_efault)
{
	struct tp_send s;

	send_prep_valid(&self->p, &s);
	s.key_ptr = (uintptr_t)self->no_access;
	s.key_len = 8;
	EXPECT_EQ(-EFAULT, do_send(&self->p, &s));
}

/*
 * RECV errors are tried with the key's SEND already pending, so a check
 * done too late would take the slot; the slot must still be there after.
 */
static void recv_prep_valid(const struct tpt_pair *p, struct tp_recv *r)
{
	tpt_recv_prep(r, "k", 1, p->dst, 0, LEN, GUARD_NS);
}

static int do_recv(const struct tpt_pair *p, struct tp_recv *r)
{
	return tpt_ioctl(p->cons, TP_IOC_RECV, r);
}

static void post_slot(struct __test_metadata *_metadata,
		      const struct tpt_pair *p)
{
	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, TENSOR, 1));
}

static void expect_slot_kept(struct __test_metadata *_metadata,
			     const struct tpt_pair *p)
{
	uint64_t len = 0;

	EXPECT_EQ(0, tpt_recv_nonblock(p->cons, "k", p->dst, 0, LEN, &len));
	EXPECT_EQ((uint64_t)TENSOR, len);
	EXPECT_EQ(1, tpt_readable_now(p->prod));
}

TEST_F(errors, recv_with_unknown_flag_fails_einval)
{
	struct tp_recv r;

	post_slot(_metadata, &self->p);
	recv_prep_valid(&self->p, &r);
	r.flags = 1U << 2;
	EXPECT_EQ(-EINVAL, do_recv(&self->p, &r));
	r.flags = TP_RECV_NONBLOCK | (1U << 31);
	EXPECT_EQ(-EINVAL, do_recv(&self->p, &r));
	expect_slot_kept(_metadata, &self->p);
}

TEST_F(errors, recv_with_nonzero_reserved0_fails_einval)
{
	struct tp_recv r;

	post_slot(_metadata, &self->p);
	recv_prep_valid(&self->p, &r);
	r.reserved0 = 1;
	EXPECT_EQ(-EINVAL, do_recv(&self->p, &r));
	expect_slot_kept(_metadata, &self->p);
}

TEST_F(errors, recv_with_nonzero_reserved_fails_einval)
{
	struct tp_recv r;
	int i;

	post_slot(_metadata, &self->p);
	for (i = 0; i < 2; i++) {
		recv_prep_valid(&self->p, &r);
		r.reserved[i] = 1;
		EXPECT_EQ(-EINVAL, do_recv(&self->p, &r))
			TH_LOG("reserved[%d] was accepted", i);
	}
	expect_slot_kept(_metadata, &self->p);
}

TEST_F(errors, recv_with_empty_key_fails_einval)
{
	struct tp_recv r;

	post_slot(_metadata, &self->p);
	recv_prep_valid(&self->p, &r);
	r.key_len = 0;
	EXPECT_EQ(-EINVAL, do_recv(&self->p, &r));
	expect_slot_kept(_metadata, &self->p);
}

TEST_F(errors, recv_with_key_longer_than_max_fails_enametoolong)
{
	struct tp_recv r;

	post_slot(_metadata, &self->p);
	recv_prep_valid(&self->p, &r);
	r.key_ptr = (uintptr_t)self->long_key;
	r.key_len = self->p.info.max_key_len + 1;
	EXPECT_EQ(-ENAMETOOLONG, do_recv(&self->p, &r));
	r.key_len = UINT32_MAX;
	EXPECT_EQ(-ENAMETOOLONG, do_recv(&self->p, &r));
	expect_slot_kept(_metadata, &self->p);
}

TEST_F(errors, recv_on_unattached_endpoint_fails_enolink)
{
	struct tp_recv r;
	uint32_t h;
	int fd;

	post_slot(_metadata, &self->p);
	fd = tpt_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, tpt_register(fd, self->p.dbuf, LEN, TP_ACCESS_WRITE, &h));
	tpt_recv_prep(&r, "k", 1, h, 0, LEN, GUARD_NS);
	EXPECT_EQ(-ENOLINK, tpt_ioctl(fd, TP_IOC_RECV, &r));
	close(fd);
	expect_slot_kept(_metadata, &self->p);
}

TEST_F(errors, recv_into_unknown_region_fails_enoent)
{
	struct tp_recv r;

	post_slot(_metadata, &self->p);
	recv_prep_valid(&self->p, &r);
	r.region = self->p.dst + 1000;
	EXPECT_EQ(-ENOENT, do_recv(&self->p, &r));
	expect_slot_kept(_metadata, &self->p);
}

TEST_F(errors, recv_into_region_without_write_access_fails_eacces)
{
	struct tp_recv r;
	uint32_t h;

	post_slot(_metadata, &self->p);
	ASSERT_EQ(0, tpt_register(self->p.cons, self->p.dbuf, LEN,
				  TP_ACCESS_READ, &h));
	recv_prep_valid(&self->p, &r);
	r.region = h;
	EXPECT_EQ(-EACCES, do_recv(&self->p, &r));
	expect_slot_kept(_metadata, &self->p);
}

TEST_F(errors, recv_past_region_end_fails_erange)
{
	struct tp_recv r;

	post_slot(_metadata, &self->p);
	recv_prep_valid(&self->p, &r);
	r.offset = LEN - TENSOR + 1;
	r.len = TENSOR;
	EXPECT_EQ(-ERANGE, do_recv(&self->p, &r));
	r.offset = 0;
	r.len = LEN + 1;
	EXPECT_EQ(-ERANGE, do_recv(&self->p, &r));
	expect_slot_kept(_metadata, &self->p);
}

TEST_F(errors, recv_past_alloc_length_fails_erange_inside_its_page)
{
	struct tp_recv r;
	uint32_t h;

	TPT_REQUIRE_FEATURES(self->p.info, TP_FEAT_REGION_ALLOC);
	post_slot(_metadata, &self->p);
	ASSERT_EQ(0, tpt_alloc(self->p.cons, 100, &h, NULL));
	recv_prep_valid(&self->p, &r);
	r.region = h;
	r.len = 101;
	EXPECT_EQ(-ERANGE, do_recv(&self->p, &r));
	r.offset = 1;
	r.len = TENSOR;
	EXPECT_EQ(-ERANGE, do_recv(&self->p, &r));
	expect_slot_kept(_metadata, &self->p);
}

TEST_F(errors, recv_with_wrapping_offset_fails_erange)
{
	struct tp_recv r;

	post_slot(_metadata, &self->p);
	recv_prep_valid(&self->p, &r);
	r.offset = UINT64_MAX - 10;
	r.len = TENSOR;
	EXPECT_EQ(-ERANGE, do_recv(&self->p, &r));
	r.offset = 1;
	r.len = UINT64_MAX;
	EXPECT_EQ(-ERANGE, do_recv(&self->p, &r));
	expect_slot_kept(_metadata, &self->p);
}

TEST_F(errors, recv_with_unreadable_key_fails_efault)
{
	struct tp_recv r;

	post_slot(_metadata, &self->p);
	recv_prep_valid(&self->p, &r);
	r.key_ptr = (uintptr_t)self->no_access;
	r.key_len = 8;
	EXPECT_EQ(-EFAULT, do_recv(&self->p, &r));
	expect_slot_kept(_metadata, &self->p);
}

/* CANCEL errors, with a SEND of the key pending that must survive. */
static int do_cancel(int fd, struct tp_cancel *c)
{
	return tpt_ioctl(fd, TP_IOC_CANCEL, c);
}

TEST_F(errors, cancel_without_flags_fails_einval)
{
	struct tp_cancel c;

	post_slot(_metadata, &self->p);
	tpt_cancel_prep(&c, "k", 1, 0);
	EXPECT_EQ(-EINVAL, do_cancel(self->p.prod, &c));
	expect_slot_kept(_metadata, &self->p);
}

TEST_F(errors, cancel_with_unknown_flag_fails_einval)
{
	struct tp_cancel c;

	post_slot(_metadata, &self->p);
	tpt_cancel_prep(&c, "k", 1, TP_CANCEL_SEND | (1U << 2));
	EXPECT_EQ(-EINVAL, do_cancel(self->p.prod, &c));
	tpt_cancel_prep(&c, "k", 1, TP_CANCEL_SEND | (1U << 31));
	EXPECT_EQ(-EINVAL, do_cancel(self->p.prod, &c));
	expect_slot_kept(_metadata, &self->p);
}

TEST_F(errors, cancel_with_nonzero_reserved_fails_einval)
{
	struct tp_cancel c;

	post_slot(_metadata, &self->p);
	tpt_cancel_prep(&c, "k", 1, TP_CANCEL_SEND);
	c.reserved = 1;
	EXPECT_EQ(-EINVAL, do_cancel(self->p.prod, &c));
	expect_slot_kept(_metadata, &self->p);
}

TEST_F(errors, cancel_with_empty_key_fails_einval)
{
	struct tp_cancel c;

	post_slot(_metadata, &self->p);
	tpt_cancel_prep(&c, "k", 0, TP_CANCEL_SEND);
	EXPECT_EQ(-EINVAL, do_cancel(self->p.prod, &c));
	expect_slot_kept(_metadata, &self->p);
}

TEST_F(errors, cancel_with_key_longer_than_max_fails_enametoolong)
{
	struct tp_cancel c;

	tpt_cancel_prep(&c, self->long_key, self->p.info.max_key_len + 1,
			TP_CANCEL_SEND);
	EXPECT_EQ(-ENAMETOOLONG, do_cancel(self->p.prod, &c));
	c.key_len = UINT32_MAX;
	EXPECT_EQ(-ENAMETOOLONG, do_cancel(self->p.prod, &c));
}

TEST_F(errors, cancel_on_unattached_endpoint_fails_enolink)
{
	struct tp_cancel c;
	int fd;

	fd = tpt_open();
	ASSERT_LE(0, fd);
	tpt_cancel_prep(&c, "k", 1, TP_CANCEL_SEND | TP_CANCEL_RECV);
	EXPECT_EQ(-ENOLINK, do_cancel(fd, &c));
	close(fd);
}

TEST_F(errors, cancel_with_nothing_pending_fails_enoent)
{
	struct tp_cancel c;

	tpt_cancel_prep(&c, "k", 1, TP_CANCEL_SEND);
	EXPECT_EQ(-ENOENT, do_cancel(self->p.prod, &c));
	tpt_cancel_prep(&c, "k", 1, TP_CANCEL_RECV);
	EXPECT_EQ(-ENOENT, do_cancel(self->p.cons, &c));
	tpt_cancel_prep(&c, "k", 1, TP_CANCEL_SEND | TP_CANCEL_RECV);
	EXPECT_EQ(-ENOENT, do_cancel(self->p.cons, &c));
}

TEST_F(errors, cancel_with_unreadable_key_fails_efault)
{
	struct tp_cancel c;

	tpt_cancel_prep(&c, self->no_access, 8, TP_CANCEL_SEND);
	EXPECT_EQ(-EFAULT, do_cancel(self->p.prod, &c));
}

/* ABORT errors: the domain must stay usable afterwards. */
static void expect_not_aborted(struct __test_metadata *_metadata,
			       const struct tpt_pair *p)
{
	EXPECT_EQ(0, tpt_send(p->prod, "alive", p->src, 0, TENSOR, 2));
	EXPECT_EQ(0, tpt_recv_nonblock(p->cons, "alive", p->dst, 0, LEN,
				       NULL));
}

static int do_abort(int fd, int32_t status, uint32_t flags)
{
	struct tp_abort a = { .status = status, .flags = flags };

	return tpt_ioctl(fd, TP_IOC_ABORT, &a);
}

TEST_F(errors, abort_with_nonzero_flags_fails_einval)
{
	EXPECT_EQ(-EINVAL, do_abort(self->p.prod, -EIO, 1));
	expect_not_aborted(_metadata, &self->p);
}

TEST_F(errors, abort_with_status_zero_fails_einval)
{
	EXPECT_EQ(-EINVAL, do_abort(self->p.prod, 0, 0));
	expect_not_aborted(_metadata, &self->p);
}

TEST_F(errors, abort_with_positive_status_fails_einval)
{
	EXPECT_EQ(-EINVAL, do_abort(self->p.prod, EIO, 0));
	EXPECT_EQ(-EINVAL, do_abort(self->p.prod, INT32_MAX, 0));
	expect_not_aborted(_metadata, &self->p);
}

TEST_F(errors, abort_with_a_status_that_is_no_errno_value_fails_einval)
{
	EXPECT_EQ(-EINVAL, do_abort(self->p.prod, -EHWPOISON - 1, 0));
	EXPECT_EQ(-EINVAL, do_abort(self->p.prod, -4095, 0));
	EXPECT_EQ(-EINVAL, do_abort(self->p.prod, -4096, 0));
	EXPECT_EQ(-EINVAL, do_abort(self->p.prod, INT32_MIN, 0));
	expect_not_aborted(_metadata, &self->p);
}

/* 512 and up are the kernel's own codes: -529 is -EIOCBQUEUED. */
TEST_F(errors, abort_with_a_kernel_internal_code_fails_einval)
{
	EXPECT_EQ(-EINVAL, do_abort(self->p.prod, -512, 0));
	EXPECT_EQ(-EINVAL, do_abort(self->p.prod, -517, 0));
	EXPECT_EQ(-EINVAL, do_abort(self->p.prod, -529, 0));
	expect_not_aborted(_metadata, &self->p);
}

TEST_F(errors, abort_on_unattached_endpoint_fails_enolink)
{
	int fd = tpt_open();

	ASSERT_LE(0, fd);
	EXPECT_EQ(-ENOLINK, do_abort(fd, -EIO, 0));
	close(fd);
}

TEST_F(errors, abort_accepts_both_ends_of_the_status_range)
{
	struct tpt_pair q;

	ASSERT_EQ(0, do_abort(self->p.prod, -1, 0));
	EXPECT_EQ(-1, tpt_send(self->p.prod, "k", self->p.src, 0, TENSOR, 1));
	ASSERT_EQ(0, tpt_pair_open(&q, LEN));
	ASSERT_EQ(0, do_abort(q.prod, -EHWPOISON, 0));
	EXPECT_EQ(-EHWPOISON, tpt_send(q.prod, "k", q.src, 0, TENSOR, 1));
	tpt_pair_close(&q);
}

TEST_HARNESS_MAIN
