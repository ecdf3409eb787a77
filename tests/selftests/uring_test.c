// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * SEND, RECV and CANCEL submitted as IORING_OP_URING_CMD: validation as CQE
 * results, when each CQE arrives and what it carries (CQE32 length, donated
 * region handle), cancel, abort, timeouts, a ring closed or a task exiting
 * with commands pending, and exactly one CQE per command under races.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "tp_test_require.h"
#include "tp_test_uring.h"

#define LEN		(64 * TPT_KIB)
#define RING_ENTRIES	64
/* A CQE the test expects: generous, for TCG virtual machines. */
#define WAIT_MS		5000
/* How long "no CQE" is watched for. */
#define QUIET_MS	200
/* Commands that go away with their ring or task end within about 100 ms. */
#define GONE_MS		2000

#define REQUIRE_URING(p) TPT_REQUIRE_FEATURES((p)->info, TP_FEAT_URING_CMD)

FIXTURE(uring)
{
	struct tpt_pair p;
	struct io_uring ring;
	bool ring_open;
	struct tpt_params saved;
};

FIXTURE_SETUP(uring)
{
	ASSERT_EQ(0, tpt_pair_open(&self->p, LEN));
	ASSERT_EQ(0, tpt_ring_init(&self->ring, RING_ENTRIES, TPT_RING_FLAGS));
	self->ring_open = true;
}

FIXTURE_TEARDOWN(uring)
{
	tpt_params_restore(&self->saved);
	if (self->ring_open)
		io_uring_queue_exit(&self->ring);
	tpt_pair_close(&self->p);
}

static int usend(struct io_uring *ring, int fd, const char *key,
		 uint32_t region, uint64_t off, uint64_t len, uint32_t flags,
		 uint64_t ud)
{
	struct tp_send s;

	tpt_send_prep(&s, key, strlen(key), region, off, len, ud);
	s.flags = flags;
	return tpt_uring_send(ring, fd, &s, ud);
}

static int urecv(struct io_uring *ring, int fd, const char *key,
		 uint32_t region, uint64_t off, uint64_t cap,
		 uint64_t timeout_ns, uint32_t flags, uint64_t ud)
{
	struct tp_recv r;

	tpt_recv_prep(&r, key, strlen(key), region, off, cap, timeout_ns);
	r.flags = flags;
	return tpt_uring_recv(ring, fd, &r, ud);
}

static int ucancel(struct io_uring *ring, int fd, const char *key,
		   uint32_t flags, uint64_t ud)
{
	struct tp_cancel c;

	tpt_cancel_prep(&c, key, strlen(key), flags);
	return tpt_uring_cancel(ring, fd, &c, ud);
}

/* A lone CQE is expected: wait for it and check nothing follows. */
static int one_cqe(struct io_uring *ring, struct tpt_cqe *c)
{
	struct tpt_cqe extra;
	int ret = tpt_uring_wait(ring, c, WAIT_MS);

	if (ret)
		return ret;
	return tpt_uring_quiet(ring, QUIET_MS, &extra) ? -EEXIST : 0;
}

/* Find the CQE for @ud among @n collected ones. */
static const struct tpt_cqe *cqe_for(const struct tpt_cqe *c, int n,
				     uint64_t ud)
{
	int i;

	for (i = 0; i < n; i++)
		if (c[i].user_data == ud)
			return &c[i];
	return NULL;
}

static bool have_waiters(uint64_t domain_id, int64_t want)
{
	int64_t val;

	if (!tpt_have_debugfs())
		return true;
	return tpt_domain_stat(domain_id, "waiters", &val) == 0 && val == want;
}

/* Reap @pid within @timeout_ms; unlike tpt_wait_child(), never kill it. */
static int wait_exit_ms(pid_t pid, int timeout_ms, int *status)
{
	uint64_t deadline = tpt_now_ns() + timeout_ms * TPT_NSEC_PER_MSEC;

	for (;;) {
		pid_t ret = waitpid(pid, status, WNOHANG);

		if (ret == pid)
			return 0;
		if (ret < 0 && errno != EINTR)
			return -errno;
		if (tpt_now_ns() > deadline)
			return -ETIMEDOUT;
		tpt_sleep_ms(10);
	}
}

/* Wait until the global "endpoints" counter is at most @want. */
static int wait_endpoints_at_most(int64_t want, int timeout_ms)
{
	uint64_t deadline = tpt_now_ns() + timeout_ms * TPT_NSEC_PER_MSEC;
	int64_t val;
	int ret;

	for (;;) {
		ret = tpt_stat("endpoints", &val);
		if (ret)
			return ret;
		if (val <= want)
			return 0;
		if (tpt_now_ns() > deadline)
			return -ETIMEDOUT;
		tpt_sleep_ms(10);
	}
}

/* A third endpoint of the pair's domain, with a source and a sink. */
struct extra_ep {
	int fd;
	uint8_t *buf;
	uint32_t src;
	uint32_t dst;
};

static int extra_ep_open(struct extra_ep *e, const struct tpt_pair *p)
{
	int ret;

	e->buf = tpt_map(2 * LEN);
	if (!e->buf)
		return -ENOMEM;
	tpt_fill(e->buf, LEN, TPT_SEED_SRC);
	e->fd = tpt_open();
	if (e->fd < 0)
		return e->fd;
	ret = tpt_domain_attach(e->fd, p->domain_fd, NULL);
	if (!ret)
		ret = tpt_register(e->fd, e->buf, LEN, TP_ACCESS_READ, &e->src);
	if (!ret)
		ret = tpt_register(e->fd, e->buf + LEN, LEN, TP_ACCESS_WRITE,
				   &e->dst);
	return ret;
}

static void extra_ep_close(struct extra_ep *e)
{
	if (e->fd >= 0)
		close(e->fd);
	tpt_unmap(e->buf, 2 * LEN);
	e->fd = -1;
	e->buf = NULL;
}

/* ---- validation ---------------------------------------------------------- */

TEST_F(uring, ring_without_sqe128_fails_einval)
{
	struct tpt_pair *p = &self->p;
	struct tpt_cqe c[3];
	struct io_uring small;
	int i;

	REQUIRE_URING(p);
	ASSERT_EQ(0, tpt_ring_init(&small, 8, IORING_SETUP_CQE32));
	/* Only the first 16 bytes of each struct fit in a 64-byte SQE. */
	ASSERT_EQ(0, usend(&small, p->prod, "k", p->src, 0, LEN, 0, 1));
	ASSERT_EQ(0, urecv(&small, p->cons, "k", p->dst, 0, LEN, 0, 0, 2));
	ASSERT_EQ(0, ucancel(&small, p->cons, "k", TP_CANCEL_RECV, 3));
	ASSERT_EQ(3, tpt_uring_wait_n(&small, c, 3, WAIT_MS));
	for (i = 0; i < 3; i++)
		EXPECT_EQ(-EINVAL, c[i].res);
	EXPECT_EQ(0, tpt_uring_quiet(&small, QUIET_MS, NULL));
	io_uring_queue_exit(&small);
	/* Nothing was posted and nobody waits. */
	EXPECT_EQ(-EAGAIN, tpt_recv_nonblock(p->cons, "k", p->dst, 0, LEN,
					     NULL));
	EXPECT_TRUE(have_waiters(p->domain_id, 0));
}

TEST_F(uring, unknown_cmd_op_fails_eopnotsupp)
{
	const uint32_t ops[] = {
		TP_IOC_GET_INFO, TP_IOC_REGION_ALLOC, TP_IOC_REGION_RELEASE,
		TP_IOC_DOMAIN_CREATE, TP_IOC_DOMAIN_ATTACH, TP_IOC_ABORT,
		0, _IOWR(TP_IOC_MAGIC, 0x7f, struct tp_send),
	};
	const int n = sizeof(ops) / sizeof(ops[0]);
	struct tpt_pair *p = &self->p;
	struct tp_abort a = { .status = -EPIPE };
	struct tpt_cqe c;
	int i;

	REQUIRE_URING(p);
	for (i = 0; i < n; i++) {
		ASSERT_EQ(0, tpt_uring_cmd(&self->ring, p->prod, ops[i], &a,
					   sizeof(a), i));
		ASSERT_EQ(0, one_cqe(&self->ring, &c));
		EXPECT_EQ((uint64_t)i, c.user_data);
		EXPECT_EQ(-EOPNOTSUPP, c.res) {
			TH_LOG("cmd_op 0x%x", ops[i]);
		}
	}
	/* In particular ABORT did not run: the domain still works. */
	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, LEN, 1));
	EXPECT_EQ(0, tpt_recv_nonblock(p->cons, "k", p->dst, 0, LEN, NULL));
}

TEST_F(uring, recv_with_empty_key_fails_einval_as_cqe_res)
{
	struct tpt_pair *p = &self->p;
	struct tpt_cqe c;

	REQUIRE_URING(p);
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "", p->dst, 0, LEN, 0, 0, 4));
	ASSERT_EQ(0, one_cqe(&self->ring, &c));
	EXPECT_EQ(4ULL, c.user_data);
	EXPECT_EQ(-EINVAL, c.res);
	EXPECT_EQ(0ULL, c.extra1);
	EXPECT_TRUE(have_waiters(p->domain_id, 0));
}

TEST_F(uring, commands_on_unattached_endpoint_fail_enolink_as_cqe_res)
{
	struct tpt_pair *p = &self->p;
	struct tpt_cqe c[3];
	uint32_t h;
	int lone;

	REQUIRE_URING(p);
	lone = tpt_open();
	ASSERT_LE(0, lone);
	ASSERT_EQ(0, tpt_register(lone, p->sbuf, LEN,
				  TP_ACCESS_READ | TP_ACCESS_WRITE, &h));
	ASSERT_EQ(0, usend(&self->ring, lone, "k", h, 0, LEN, 0, 1));
	ASSERT_EQ(0, urecv(&self->ring, lone, "k", h, 0, LEN, 0, 0, 2));
	ASSERT_EQ(0, ucancel(&self->ring, lone, "k", TP_CANCEL_RECV, 3));
	ASSERT_EQ(3, tpt_uring_wait_n(&self->ring, c, 3, WAIT_MS));
	EXPECT_EQ(-ENOLINK, cqe_for(c, 3, 1)->res);
	EXPECT_EQ(-ENOLINK, cqe_for(c, 3, 2)->res);
	EXPECT_EQ(-ENOLINK, cqe_for(c, 3, 3)->res);
	EXPECT_EQ(0, tpt_uring_quiet(&self->ring, QUIET_MS, NULL));
	close(lone);
}

/* One invalid command, tried both as an ioctl and as a uring_cmd. */
struct bad_cmd {
	const char *what;
	int fd;
	uint32_t op;
	union {
		struct tp_send send;
		struct tp_recv recv;
		struct tp_cancel cancel;
	} a;
	int want;
};

static size_t bad_cmd_size(const struct bad_cmd *b)
{
	switch (b->op) {
	case TP_IOC_SEND:
		return sizeof(b->a.send);
	case TP_IOC_RECV:
		return sizeof(b->a.recv);
	default:
		return sizeof(b->a.cancel);
	}
}

TEST_F(uring, each_validation_error_is_the_ioctls_errno_as_cqe_res)
{
	struct tpt_pair *p = &self->p;
	struct bad_cmd b[24];
	uint32_t ro, big_key;
	char *long_key;
	int i, n = 0;

	REQUIRE_URING(p);
	big_key = p->info.max_key_len + 1;
	long_key = malloc(big_key);
	ASSERT_NE(NULL, long_key);
	memset(long_key, 'x', big_key);
	ASSERT_EQ(0, tpt_register(p->cons, p->sbuf, LEN, TP_ACCESS_READ, &ro));

#define BAD_SEND(desc, errno_, ...) do {				\
	struct bad_cmd *x = &b[n++];					\
	x->what = desc;							\
	x->fd = p->prod;						\
	x->op = TP_IOC_SEND;						\
	tpt_send_prep(&x->a.send, "k", 1, p->src, 0, LEN, 0);		\
	__VA_ARGS__;							\
	x->want = errno_;						\
} while (0)
#define BAD_RECV(desc, errno_, ...) do {				\
	struct bad_cmd *x = &b[n++];					\
	x->what = desc;							\
	x->fd = p->cons;						\
	x->op = TP_IOC_RECV;						\
	tpt_recv_prep(&x->a.recv, "k", 1, p->dst, 0, LEN, 0);		\
	x->a.recv.flags = TP_RECV_NONBLOCK;				\
	__VA_ARGS__;							\
	x->want = errno_;						\
} while (0)
#define BAD_CANCEL(desc, errno_, ...) do {				\
	struct bad_cmd *x = &b[n++];					\
	x->what = desc;							\
	x->fd = p->cons;						\
	x->op = TP_IOC_CANCEL;						\
	tpt_cancel_prep(&x->a.cancel, "k", 1, TP_CANCEL_RECV);		\
	__VA_ARGS__;							\
	x->want = errno_;						\
} while (0)

	BAD_SEND("send empty key", -EINVAL, x->a.send.key_len = 0);
	BAD_SEND("send unknown flag", -EINVAL, x->a.send.flags = 0x80);
	BAD_SEND("send reserved0", -EINVAL, x->a.send.reserved0 = 1);
	BAD_SEND("send reserved[1]", -EINVAL, x->a.send.reserved[1] = 1);
	BAD_SEND("send donate registered", -EINVAL,
		 x->a.send.flags = TP_SEND_DONATE);
	BAD_SEND("send key too long", -ENAMETOOLONG,
		 x->a.send.key_ptr = (uintptr_t)long_key;
		 x->a.send.key_len = big_key);
	BAD_SEND("send no such region", -ENOENT, x->a.send.region = 9999);
	BAD_SEND("send range", -ERANGE, x->a.send.offset = 1);
	BAD_RECV("recv empty key", -EINVAL, x->a.recv.key_len = 0);
	BAD_RECV("recv unknown flag", -EINVAL, x->a.recv.flags |= 0x80);
	BAD_RECV("recv reserved[0]", -EINVAL, x->a.recv.reserved[0] = 1);
	BAD_RECV("recv donate with region", -EINVAL,
		 x->a.recv.flags |= TP_RECV_DONATE; x->a.recv.region = 7);
	BAD_RECV("recv no such region", -ENOENT, x->a.recv.region = 9999);
	BAD_RECV("recv read-only region", -EACCES, x->a.recv.region = ro);
	BAD_RECV("recv range", -ERANGE, x->a.recv.len = LEN + 1);
	BAD_RECV("recv key too long", -ENAMETOOLONG,
		 x->a.recv.key_ptr = (uintptr_t)long_key;
		 x->a.recv.key_len = big_key);
	BAD_CANCEL("cancel no flags", -EINVAL, x->a.cancel.flags = 0);
	BAD_CANCEL("cancel unknown flag", -EINVAL, x->a.cancel.flags |= 4);
	BAD_CANCEL("cancel reserved", -EINVAL, x->a.cancel.reserved = 1);
	BAD_CANCEL("cancel nothing pending", -ENOENT, (void)0);
#undef BAD_SEND
#undef BAD_RECV
#undef BAD_CANCEL

	for (i = 0; i < n; i++) {
		struct bad_cmd copy = b[i];
		struct tpt_cqe c;

		EXPECT_EQ(b[i].want, tpt_ioctl(b[i].fd, b[i].op, &copy.a)) {
			TH_LOG("ioctl: %s", b[i].what);
		}
		ASSERT_EQ(0, tpt_uring_cmd(&self->ring, b[i].fd, b[i].op,
					   &b[i].a, bad_cmd_size(&b[i]), i));
		ASSERT_EQ(0, one_cqe(&self->ring, &c));
		EXPECT_EQ((uint64_t)i, c.user_data);
		EXPECT_EQ(b[i].want, c.res) {
			TH_LOG("uring_cmd: %s", b[i].what);
		}
	}
	EXPECT_TRUE(have_waiters(p->domain_id, 0));
	free(long_key);
}

TEST_F(uring, uring_cmd_from_another_process_fails_eperm)
{
	struct tpt_pair *p = &self->p;
	int32_t res[2] = { 1, 1 };
	int pfd[2], status;
	pid_t pid;

	REQUIRE_URING(p);
	ASSERT_EQ(0, pipe2(pfd, O_CLOEXEC));
	pid = tpt_fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct io_uring ring;
		struct tpt_cqe c[2];

		close(pfd[0]);
		if (tpt_ring_init(&ring, 8, TPT_RING_FLAGS) ||
		    usend(&ring, p->prod, "k", p->src, 0, LEN, 0, 1) ||
		    urecv(&ring, p->cons, "k", p->dst, 0, LEN, 0,
			  TP_RECV_NONBLOCK, 2) ||
		    tpt_uring_wait_n(&ring, c, 2, WAIT_MS) != 2)
			_exit(1);
		res[0] = cqe_for(c, 2, 1)->res;
		res[1] = cqe_for(c, 2, 2)->res;
		tpt_write_all(pfd[1], res, sizeof(res));
		_exit(0);
	}
	close(pfd[1]);
	ASSERT_EQ(0, tpt_read_all(pfd[0], res, sizeof(res), WAIT_MS));
	close(pfd[0]);
	ASSERT_EQ(0, tpt_wait_child(pid, WAIT_MS, &status));
	EXPECT_EQ(-EPERM, res[0]);
	EXPECT_EQ(-EPERM, res[1]);
	/* The child's SEND was not posted. */
	EXPECT_EQ(-EAGAIN, tpt_recv_nonblock(p->cons, "k", p->dst, 0, LEN,
					     NULL));
}

TEST_F(uring, struct_and_key_are_read_once_at_submission)
{
	struct tpt_pair *p = &self->p;
	char key[8] = "first";
	struct tp_recv r;
	struct tpt_cqe c;

	REQUIRE_URING(p);
	tpt_recv_prep(&r, key, 5, p->dst, 0, LEN, TPT_SAFETY_TIMEOUT_NS);
	ASSERT_EQ(0, tpt_uring_recv(&self->ring, p->cons, &r, 1));
	memcpy(key, "other", 5);
	memset(&r, 0xff, sizeof(r));
	ASSERT_EQ(0, tpt_send(p->prod, "first", p->src, 0, LEN, 1));
	ASSERT_EQ(0, one_cqe(&self->ring, &c));
	EXPECT_EQ(0, c.res);
	EXPECT_TRUE(tpt_check(p->dbuf, LEN, TPT_SEED_SRC));
}

/* ---- SEND ---------------------------------------------------------------- */

TEST_F(uring, send_cqe_arrives_only_after_consumer_copied)
{
	struct tpt_pair *p = &self->p;
	struct tpt_cqe c;
	uint64_t len = 0;

	REQUIRE_URING(p);
	ASSERT_EQ(0, usend(&self->ring, p->prod, "k", p->src, 0, LEN, 0,
			   0x77));
	/* Posted, not consumed: no CQE, and no read() record either. */
	EXPECT_EQ(0, tpt_uring_quiet(&self->ring, QUIET_MS, NULL));
	EXPECT_EQ(0, tpt_readable_now(p->prod));

	ASSERT_EQ(0, tpt_recv(p->cons, "k", p->dst, 0, LEN,
			      TPT_SAFETY_TIMEOUT_NS, &len));
	EXPECT_EQ(LEN, len);
	EXPECT_TRUE(tpt_check(p->dbuf, LEN, TPT_SEED_SRC));

	ASSERT_EQ(0, one_cqe(&self->ring, &c));
	EXPECT_EQ(0x77ULL, c.user_data);
	EXPECT_EQ(0, c.res);
	EXPECT_EQ(LEN, c.extra1);
	EXPECT_EQ(0, tpt_readable_now(p->prod));
}

TEST_F(uring, commands_complete_without_cqe32)
{
	struct tpt_pair *p = &self->p;
	struct io_uring ring;
	struct tpt_cqe c[2];

	REQUIRE_URING(p);
	ASSERT_EQ(0, tpt_ring_init(&ring, 8, IORING_SETUP_SQE128));
	ASSERT_EQ(0, urecv(&ring, p->cons, "k", p->dst, 0, LEN,
			   TPT_SAFETY_TIMEOUT_NS, 0, 1));
	ASSERT_EQ(0, usend(&ring, p->prod, "k", p->src, 0, LEN, 0, 2));
	ASSERT_EQ(2, tpt_uring_wait_n(&ring, c, 2, WAIT_MS));
	EXPECT_EQ(0, c[0].res);
	EXPECT_EQ(0, c[1].res);
	EXPECT_EQ(0, tpt_uring_quiet(&ring, QUIET_MS, NULL));
	io_uring_queue_exit(&ring);
	EXPECT_TRUE(tpt_check(p->dbuf, LEN, TPT_SEED_SRC));
}

TEST_F(uring, sqpoll_ring_submits_and_completes)
{
	struct tpt_pair *p = &self->p;
	struct io_uring ring;
	struct tpt_cqe c;
	int ret;

	REQUIRE_URING(p);
	ret = tpt_ring_init(&ring, 8, TPT_RING_FLAGS | IORING_SETUP_SQPOLL);
	if (ret)
		SKIP(return, "no SQPOLL ring: %s", strerror(-ret));
	/* Issued by the SQ thread, which shares this process's mm. */
	ASSERT_EQ(0, urecv(&ring, p->cons, "sq", p->dst, 0, LEN,
			   TPT_SAFETY_TIMEOUT_NS, 0, 1));
	ASSERT_EQ(0, tpt_wait_waiters(p->domain_id, 1));
	ASSERT_EQ(0, tpt_send(p->prod, "sq", p->src, 0, LEN, 1));
	ASSERT_EQ(0, one_cqe(&ring, &c));
	EXPECT_EQ(0, c.res);
	EXPECT_EQ(LEN, c.extra1);
	EXPECT_TRUE(tpt_check(p->dbuf, LEN, TPT_SEED_SRC));

	ASSERT_EQ(0, usend(&ring, p->prod, "sq2", p->src, 0, LEN, 0, 2));
	ASSERT_EQ(0, tpt_recv(p->cons, "sq2", p->dst, 0, LEN,
			      TPT_SAFETY_TIMEOUT_NS, NULL));
	ASSERT_EQ(0, one_cqe(&ring, &c));
	EXPECT_EQ(2ULL, c.user_data);
	EXPECT_EQ(0, c.res);

	/* Closing it with a RECV pending still cleans up. */
	ASSERT_EQ(0, urecv(&ring, p->cons, "sq3", p->dst, 0, LEN, 0, 0, 3));
	ASSERT_EQ(0, tpt_wait_waiters(p->domain_id, 1));
	io_uring_queue_exit(&ring);
	if (tpt_have_debugfs())
		EXPECT_EQ(0, tpt_wait_domain_stat(p->domain_id, "waiters", 0,
						  GONE_MS));
}

TEST_F(uring, uring_sends_count_against_max_slots_until_their_cqe)
{
	struct tpt_pair *p = &self->p;
	struct tpt_cqe c[2];
	uint64_t len = 0;

	REQUIRE_URING(p);
	TPT_SET_PARAM(&self->saved, "max_slots", 2);
	ASSERT_EQ(0, usend(&self->ring, p->prod, "a", p->src, 0, 10, 0, 1));
	ASSERT_EQ(0, usend(&self->ring, p->prod, "b", p->src, 0, 20, 0, 2));
	ASSERT_EQ(0, usend(&self->ring, p->prod, "c", p->src, 0, 30, 0, 3));
	ASSERT_EQ(0, one_cqe(&self->ring, c));
	EXPECT_EQ(3ULL, c[0].user_data);
	EXPECT_EQ(-ENOSPC, c[0].res);

	ASSERT_EQ(0, tpt_recv_nonblock(p->cons, "a", p->dst, 0, LEN, &len));
	ASSERT_EQ(0, tpt_recv_nonblock(p->cons, "b", p->dst, 0, LEN, &len));
	ASSERT_EQ(2, tpt_uring_wait_n(&self->ring, c, 2, WAIT_MS));
	EXPECT_EQ(0, c[0].res);
	EXPECT_EQ(0, c[1].res);
	/* Their CQEs were posted: nothing counts as outstanding any more. */
	ASSERT_EQ(0, usend(&self->ring, p->prod, "c", p->src, 0, 30, 0, 4));
	ASSERT_EQ(0, usend(&self->ring, p->prod, "d", p->src, 0, 40, 0, 5));
	EXPECT_EQ(0, tpt_uring_quiet(&self->ring, QUIET_MS, c));
	ASSERT_EQ(0, tpt_cancel(p->prod, "c", TP_CANCEL_SEND, NULL));
	ASSERT_EQ(0, tpt_cancel(p->prod, "d", TP_CANCEL_SEND, NULL));
	ASSERT_EQ(2, tpt_uring_wait_n(&self->ring, c, 2, WAIT_MS));
	EXPECT_EQ(-ECANCELED, c[0].res);
	EXPECT_EQ(-ECANCELED, c[1].res);
}

/* ---- RECV ---------------------------------------------------------------- */

/*
 * A producer in a forked child: its own endpoint, @n keys "<prefix>-<i>"
 * of @len bytes each filled with seed @seed + i, posted when told to go,
 * through io_uring or the ioctl.  It reports how its completions went.
 */
struct tx_args {
	int domain_fd;
	const char *prefix;
	int n;
	uint64_t len;
	uint64_t seed;
	bool uring;
};

struct tx_report {
	int32_t err;		/* first failure, -errno */
	uint32_t done;		/* status 0 and the right length */
	uint32_t bad;		/* duplicated, unknown or failed ones */
	uint32_t extra;		/* any after the last expected one */
};

struct tx_child {
	pid_t pid;
	int go;
	int report;
};

/*
 * Keys "<prefix>-<i>".  Each command reads its key when it is submitted,
 * so a batch prepared before one submit needs one buffer per key.
 */
#define KEY_MAX	32
typedef char key_buf[KEY_MAX];

static key_buf *keys_make(const char *prefix, int n)
{
	key_buf *k = calloc(n, sizeof(*k));
	int i;

	for (i = 0; k && i < n; i++)
		snprintf(k[i], KEY_MAX, "%s-%d", prefix, i);
	return k;
}

static void tx_count(struct tx_report *rep, uint8_t *seen, int n,
		     uint64_t ud, int32_t status, uint64_t len, uint64_t want)
{
	if (ud >= (uint64_t)n || seen[ud] || status || len != want) {
		rep->bad++;
		if (!rep->err)
			rep->err = status ? status : -EPROTO;
		return;
	}
	seen[ud] = 1;
	rep->done++;
}

static void tx_main(const struct tx_args *a, int go, int wfd)
{
	struct tx_report rep = { 0 };
	struct io_uring ring;
	key_buf *keys = keys_make(a->prefix, a->n);
	uint8_t *buf, *seen;
	uint32_t h;
	int fd, i;

	buf = tpt_map(a->n * a->len);
	seen = calloc(a->n, 1);
	fd = tpt_open();
	if (!keys || !buf || !seen || fd < 0)
		_exit(2);
	for (i = 0; i < a->n; i++)
		tpt_fill(buf + i * a->len, a->len, a->seed + i);
	if (tpt_domain_attach(fd, a->domain_fd, NULL) ||
	    tpt_register(fd, buf, a->n * a->len, TP_ACCESS_READ, &h))
		_exit(3);
	if (a->uring && tpt_ring_init(&ring, a->n, TPT_RING_FLAGS))
		_exit(4);
	if (tpt_notify(wfd) || tpt_wait_notify(go, 60000))
		_exit(5);

	for (i = 0; i < a->n; i++) {
		struct tp_send s;
		int ret;

		tpt_send_prep(&s, keys[i], strlen(keys[i]), h, i * a->len,
			      a->len, i);
		if (a->uring)
			ret = tpt_uring_prep(&ring, fd, TP_IOC_SEND, &s,
					     sizeof(s), i, 0);
		else
			ret = tpt_ioctl(fd, TP_IOC_SEND, &s);
		if (ret && !rep.err)
			rep.err = ret;
	}
	if (a->uring && tpt_uring_submit(&ring) != a->n && !rep.err)
		rep.err = -EIO;

	while (!rep.err && rep.done + rep.bad < (uint32_t)a->n) {
		if (a->uring) {
			struct tpt_cqe c;

			if (tpt_uring_wait(&ring, &c, 60000)) {
				rep.err = -ETIMEDOUT;
				break;
			}
			tx_count(&rep, seen, a->n, c.user_data, c.res,
				 c.extra1, a->len);
		} else {
			struct tp_completion c[16];
			int k, got = tpt_read_completions(fd, c, 16, 60000);

			if (got < 0) {
				rep.err = got;
				break;
			}
			for (k = 0; k < got; k++)
				tx_count(&rep, seen, a->n, c[k].user_data,
					 c[k].status, c[k].len, a->len);
		}
	}
	if (a->uring) {
		rep.extra = tpt_uring_quiet(&ring, QUIET_MS, NULL) != 0;
	} else {
		struct tp_completion c;

		rep.extra = tpt_read_completions(fd, &c, 1, QUIET_MS) !=
			    -ETIMEDOUT;
	}
	tpt_write_all(wfd, &rep, sizeof(rep));
	_exit(0);
}

static int tx_start(struct tx_child *tx, const struct tx_args *a)
{
	int gofd[2], repfd[2];

	tx->pid = -1;
	if (pipe2(gofd, O_CLOEXEC))
		return -errno;
	if (pipe2(repfd, O_CLOEXEC)) {
		close(gofd[0]);
		close(gofd[1]);
		return -errno;
	}
	tx->pid = tpt_fork();
	if (tx->pid < 0)
		return -errno;
	if (tx->pid == 0) {
		close(gofd[1]);
		close(repfd[0]);
		tx_main(a, gofd[0], repfd[1]);
	}
	close(gofd[0]);
	close(repfd[1]);
	tx->go = gofd[1];
	tx->report = repfd[0];
	return tpt_wait_notify(tx->report, TPT_SAFETY_TIMEOUT_MS);
}

static int tx_finish(struct tx_child *tx, struct tx_report *rep,
		     int timeout_ms)
{
	int ret, status;

	ret = tpt_read_all(tx->report, rep, sizeof(*rep), timeout_ms);
	close(tx->go);
	close(tx->report);
	if (ret) {
		kill(tx->pid, SIGKILL);
		waitpid(tx->pid, NULL, 0);
		return ret;
	}
	return tpt_wait_child(tx->pid, WAIT_MS, &status);
}

TEST_F(uring, recv_before_send_completes_when_send_arrives)
{
	struct tpt_pair *p = &self->p;
	struct tx_args a = {
		.domain_fd = p->domain_fd, .prefix = "async", .n = 1,
		.len = LEN, .seed = 0xa5a5,
	};
	struct tx_report rep;
	struct tx_child tx;
	struct tpt_cqe c;

	REQUIRE_URING(p);
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "async-0", p->dst, 0, LEN,
			   TPT_SAFETY_TIMEOUT_NS, 0, 5));
	EXPECT_TRUE(have_waiters(p->domain_id, 1));
	EXPECT_EQ(0, tpt_uring_quiet(&self->ring, QUIET_MS, NULL));

	/* The SEND comes from another process while this one waits. */
	ASSERT_EQ(0, tx_start(&tx, &a));
	ASSERT_EQ(0, tpt_notify(tx.go));
	ASSERT_EQ(0, one_cqe(&self->ring, &c));
	EXPECT_EQ(5ULL, c.user_data);
	EXPECT_EQ(0, c.res);
	EXPECT_EQ(LEN, c.extra1);
	EXPECT_TRUE(tpt_check(p->dbuf, LEN, 0xa5a5));
	ASSERT_EQ(0, tx_finish(&tx, &rep, WAIT_MS));
	EXPECT_EQ(0, rep.err);
	EXPECT_EQ(1U, rep.done);
	EXPECT_EQ(0U, rep.extra);
	EXPECT_TRUE(have_waiters(p->domain_id, 0));
}

TEST_F(uring, recv_after_send_completes_at_once)
{
	struct tpt_pair *p = &self->p;
	struct tp_completion done;
	struct tpt_cqe c;

	REQUIRE_URING(p);
	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, LEN, 3));
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "k", p->dst, 0, LEN,
			   TPT_SAFETY_TIMEOUT_NS, 0, 6));
	/* Posted by the submission itself: no need to enter the kernel. */
	ASSERT_EQ(0, tpt_uring_peek(&self->ring, &c));
	EXPECT_EQ(6ULL, c.user_data);
	EXPECT_EQ(0, c.res);
	EXPECT_EQ(LEN, c.extra1);
	EXPECT_TRUE(tpt_check(p->dbuf, LEN, TPT_SEED_SRC));
	EXPECT_EQ(0, tpt_uring_quiet(&self->ring, QUIET_MS, NULL));
	ASSERT_EQ(1, tpt_read_completions(p->prod, &done, 1, WAIT_MS));
	EXPECT_EQ(3ULL, done.user_data);
	EXPECT_EQ(0, done.status);
	EXPECT_TRUE(have_waiters(p->domain_id, 0));
}

TEST_F(uring, recv_cqe32_reports_length)
{
	const uint64_t odd = 12345;
	struct tpt_pair *p = &self->p;
	struct tpt_cqe c;

	REQUIRE_URING(p);
	/* Waiting, then delivered by the SEND. */
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "odd", p->dst, 0, LEN,
			   TPT_SAFETY_TIMEOUT_NS, 0, 1));
	ASSERT_EQ(0, tpt_send(p->prod, "odd", p->src, 0, odd, 1));
	ASSERT_EQ(0, one_cqe(&self->ring, &c));
	EXPECT_EQ(0, c.res);
	EXPECT_EQ(odd, c.extra1);
	EXPECT_TRUE(tpt_check(p->dbuf, odd, TPT_SEED_SRC));
	EXPECT_TRUE(tpt_all_bytes(p->dbuf + odd, LEN - odd, 0));

	/* Already posted, zero bytes. */
	ASSERT_EQ(0, tpt_send(p->prod, "empty", p->src, 0, 0, 2));
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "empty", p->dst, 0, LEN,
			   TPT_SAFETY_TIMEOUT_NS, 0, 2));
	ASSERT_EQ(0, one_cqe(&self->ring, &c));
	EXPECT_EQ(0, c.res);
	EXPECT_EQ(0ULL, c.extra1);
}

TEST_F(uring, recv_too_small_fails_emsgsize_with_length_and_keeps_slot)
{
	struct tpt_pair *p = &self->p;
	struct tp_completion done;
	struct tpt_cqe c;

	REQUIRE_URING(p);
	/* The SEND is there when the RECV is submitted. */
	ASSERT_EQ(0, tpt_send(p->prod, "big", p->src, 0, LEN, 1));
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "big", p->dst, 0, LEN / 2,
			   TPT_SAFETY_TIMEOUT_NS, 0, 1));
	ASSERT_EQ(0, one_cqe(&self->ring, &c));
	EXPECT_EQ(-EMSGSIZE, c.res);
	EXPECT_EQ(LEN, c.extra1);
	EXPECT_TRUE(tpt_all_bytes(p->dbuf, LEN, 0));
	EXPECT_EQ(0, tpt_readable_now(p->prod));
	/* The slot stays for a retry with room enough. */
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "big", p->dst, 0, c.extra1,
			   TPT_SAFETY_TIMEOUT_NS, 0, 2));
	ASSERT_EQ(0, one_cqe(&self->ring, &c));
	EXPECT_EQ(0, c.res);
	EXPECT_TRUE(tpt_check(p->dbuf, LEN, TPT_SEED_SRC));
	ASSERT_EQ(1, tpt_read_completions(p->prod, &done, 1, WAIT_MS));
	EXPECT_EQ(0, done.status);

	/* The RECV waits first and the SEND that wakes it is too long. */
	memset(p->dbuf, 0, LEN);
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "late", p->dst, 0, 100,
			   TPT_SAFETY_TIMEOUT_NS, 0, 3));
	ASSERT_EQ(0, tpt_send(p->prod, "late", p->src, 0, 101, 3));
	ASSERT_EQ(0, one_cqe(&self->ring, &c));
	EXPECT_EQ(3ULL, c.user_data);
	EXPECT_EQ(-EMSGSIZE, c.res);
	EXPECT_EQ(101ULL, c.extra1);
	EXPECT_TRUE(tpt_all_bytes(p->dbuf, LEN, 0));
	EXPECT_TRUE(have_waiters(p->domain_id, 0));
	EXPECT_EQ(0, tpt_recv_nonblock(p->cons, "late", p->dst, 0, LEN, NULL));
	EXPECT_TRUE(tpt_check(p->dbuf, 101, TPT_SEED_SRC));
}

TEST_F(uring, recv_nonblock_absent_key_fails_eagain)
{
	struct tpt_pair *p = &self->p;
	struct tpt_cqe c;

	REQUIRE_URING(p);
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "absent", p->dst, 0, LEN, 0,
			   TP_RECV_NONBLOCK, 1));
	ASSERT_EQ(0, tpt_uring_peek(&self->ring, &c));
	EXPECT_EQ(-EAGAIN, c.res);
	EXPECT_EQ(0ULL, c.extra1);
	EXPECT_EQ(0, tpt_uring_quiet(&self->ring, QUIET_MS, NULL));
	EXPECT_TRUE(have_waiters(p->domain_id, 0));
	/* No waiter was left behind to take a later SEND. */
	ASSERT_EQ(0, tpt_send(p->prod, "absent", p->src, 0, LEN, 1));
	EXPECT_EQ(0, tpt_uring_quiet(&self->ring, QUIET_MS, NULL));
	EXPECT_EQ(0, tpt_recv_nonblock(p->cons, "absent", p->dst, 0, LEN,
				       NULL));
}

TEST_F(uring, recv_timeout_fails_etimedout)
{
	const uint64_t timeout = 200 * TPT_NSEC_PER_MSEC;
	struct tpt_pair *p = &self->p;
	uint64_t start, elapsed;
	struct tpt_cqe c;

	REQUIRE_URING(p);
	TPT_REQUIRE_FEATURES(p->info, TP_FEAT_RECV_TIMEOUT);
	start = tpt_now_ns();
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "absent", p->dst, 0, LEN,
			   timeout, 0, 1));
	ASSERT_EQ(0, tpt_uring_wait(&self->ring, &c, WAIT_MS));
	elapsed = tpt_now_ns() - start;
	EXPECT_EQ(-ETIMEDOUT, c.res);
	EXPECT_EQ(0ULL, c.extra1);
	EXPECT_LE(timeout, elapsed);
	EXPECT_GT(timeout + 3 * TPT_NSEC_PER_SEC, elapsed);
	EXPECT_EQ(0, tpt_uring_quiet(&self->ring, QUIET_MS, NULL));
	EXPECT_TRUE(have_waiters(p->domain_id, 0));
	/* A SEND after the timeout stays for the next consumer. */
	ASSERT_EQ(0, tpt_send(p->prod, "absent", p->src, 0, LEN, 1));
	EXPECT_EQ(0, tpt_recv_nonblock(p->cons, "absent", p->dst, 0, LEN,
				       NULL));
}

TEST_F(uring, recv_issued_from_io_wq_completes)
{
	struct tpt_pair *p = &self->p;
	struct tp_send s;
	struct tp_recv r;
	struct tpt_cqe c;
	uint64_t len = 0;

	REQUIRE_URING(p);
	/* IOSQE_ASYNC: issued by an io-wq worker, not the submitter. */
	ASSERT_EQ(0, tpt_send(p->prod, "posted", p->src, 0, LEN, 1));
	tpt_recv_prep(&r, "posted", 6, p->dst, 0, LEN, TPT_SAFETY_TIMEOUT_NS);
	ASSERT_EQ(0, tpt_uring_prep(&self->ring, p->cons, TP_IOC_RECV, &r,
				    sizeof(r), 1, IOSQE_ASYNC));
	ASSERT_EQ(1, tpt_uring_submit(&self->ring));
	ASSERT_EQ(0, one_cqe(&self->ring, &c));
	EXPECT_EQ(0, c.res);
	EXPECT_EQ(LEN, c.extra1);
	EXPECT_TRUE(tpt_check(p->dbuf, LEN, TPT_SEED_SRC));

	memset(p->dbuf, 0, LEN);
	tpt_recv_prep(&r, "later", 5, p->dst, 0, LEN, TPT_SAFETY_TIMEOUT_NS);
	ASSERT_EQ(0, tpt_uring_prep(&self->ring, p->cons, TP_IOC_RECV, &r,
				    sizeof(r), 2, IOSQE_ASYNC));
	ASSERT_EQ(1, tpt_uring_submit(&self->ring));
	ASSERT_EQ(0, tpt_wait_waiters(p->domain_id, 1));
	ASSERT_EQ(0, tpt_send(p->prod, "later", p->src, 0, LEN, 2));
	ASSERT_EQ(0, one_cqe(&self->ring, &c));
	EXPECT_EQ(2ULL, c.user_data);
	EXPECT_EQ(0, c.res);
	EXPECT_TRUE(tpt_check(p->dbuf, LEN, TPT_SEED_SRC));

	/* A SEND issued from io-wq completes when consumed. */
	tpt_send_prep(&s, "wq-send", 7, p->src, 0, LEN, 3);
	ASSERT_EQ(0, tpt_uring_prep(&self->ring, p->prod, TP_IOC_SEND, &s,
				    sizeof(s), 3, IOSQE_ASYNC));
	ASSERT_EQ(1, tpt_uring_submit(&self->ring));
	ASSERT_EQ(0, tpt_recv(p->cons, "wq-send", p->dst, 0, LEN,
			      TPT_SAFETY_TIMEOUT_NS, &len));
	ASSERT_EQ(0, one_cqe(&self->ring, &c));
	EXPECT_EQ(3ULL, c.user_data);
	EXPECT_EQ(0, c.res);
	EXPECT_EQ(LEN, c.extra1);
}

/* ---- DONATE -------------------------------------------------------------- */

TEST_F(uring, donate_recv_cqe_res_is_new_region_handle)
{
	struct tpt_pair *p = &self->p;
	struct tpt_cqe c;
	uint8_t *m;

	REQUIRE_URING(p);
	TPT_REQUIRE_FEATURES(p->info, TP_FEAT_DONATE | TP_FEAT_REGION_ALLOC);
	/* A copied SEND, already posted, lands in a new region. */
	ASSERT_EQ(0, tpt_send(p->prod, "copy", p->src, 0, LEN, 1));
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "copy", 0, 0, LEN,
			   TPT_SAFETY_TIMEOUT_NS, TP_RECV_DONATE, 1));
	ASSERT_EQ(0, one_cqe(&self->ring, &c));
	ASSERT_LE(0, c.res);
	EXPECT_NE((int32_t)p->dst, c.res);
	EXPECT_EQ(LEN, c.extra1);
	m = tpt_map_region(p->cons, (uint64_t)c.res << TP_MMAP_REGION_SHIFT,
			   LEN, PROT_READ);
	ASSERT_NE(NULL, m);
	EXPECT_TRUE(tpt_check(m, LEN, TPT_SEED_SRC));
	munmap(m, LEN);
	EXPECT_EQ(0, tpt_release(p->cons, c.res));
}

TEST_F(uring, donate_recv_waiting_takes_donated_pages)
{
	struct tpt_pair *p = &self->p;
	struct tp_completion done;
	struct tp_send s;
	uint64_t off;
	struct tpt_cqe c;
	uint32_t h;
	uint8_t *m;

	REQUIRE_URING(p);
	TPT_REQUIRE_FEATURES(p->info, TP_FEAT_DONATE | TP_FEAT_REGION_ALLOC);
	ASSERT_EQ(0, tpt_alloc(p->prod, LEN, &h, &off));
	m = tpt_map_region(p->prod, off, LEN, PROT_READ | PROT_WRITE);
	ASSERT_NE(NULL, m);
	tpt_fill(m, LEN, 0xd0d0);
	munmap(m, LEN);

	ASSERT_EQ(0, urecv(&self->ring, p->cons, "gift", 0, 0, LEN,
			   TPT_SAFETY_TIMEOUT_NS, TP_RECV_DONATE, 2));
	ASSERT_EQ(0, tpt_uring_quiet(&self->ring, QUIET_MS, NULL));
	tpt_send_prep(&s, "gift", 4, h, 0, LEN, 2);
	s.flags = TP_SEND_DONATE;
	ASSERT_EQ(0, tpt_ioctl(p->prod, TP_IOC_SEND, &s));
	ASSERT_EQ(0, one_cqe(&self->ring, &c));
	ASSERT_LE(0, c.res);
	EXPECT_EQ(LEN, c.extra1);
	m = tpt_map_region(p->cons, (uint64_t)c.res << TP_MMAP_REGION_SHIFT,
			   LEN, PROT_READ);
	ASSERT_NE(NULL, m);
	EXPECT_TRUE(tpt_check(m, LEN, 0xd0d0));
	munmap(m, LEN);
	ASSERT_EQ(1, tpt_read_completions(p->prod, &done, 1, WAIT_MS));
	EXPECT_EQ(0, done.status);
}

TEST_F(uring, donate_recv_without_a_free_handle_fails_enospc_and_keeps_slot)
{
	struct tpt_pair *p = &self->p;
	uint64_t old = 0;
	struct tpt_cqe c;
	uint8_t *m;

	REQUIRE_URING(p);
	TPT_REQUIRE_FEATURES(p->info, TP_FEAT_DONATE);
	ASSERT_EQ(0, tpt_param_get("max_regions", &old));
	/* The consumer already holds one region: no room for another. */
	TPT_SET_PARAM(&self->saved, "max_regions", 1);
	ASSERT_EQ(0, tpt_send(p->prod, "full", p->src, 0, LEN, 1));
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "full", 0, 0, LEN,
			   TPT_SAFETY_TIMEOUT_NS, TP_RECV_DONATE, 1));
	ASSERT_EQ(0, one_cqe(&self->ring, &c));
	EXPECT_EQ(-ENOSPC, c.res);
	EXPECT_EQ(0, tpt_readable_now(p->prod));

	TPT_SET_PARAM(&self->saved, "max_regions", old);
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "full", 0, 0, LEN,
			   TPT_SAFETY_TIMEOUT_NS, TP_RECV_DONATE, 2));
	ASSERT_EQ(0, one_cqe(&self->ring, &c));
	ASSERT_LE(0, c.res);
	m = tpt_map_region(p->cons, (uint64_t)c.res << TP_MMAP_REGION_SHIFT,
			   LEN, PROT_READ);
	ASSERT_NE(NULL, m);
	EXPECT_TRUE(tpt_check(m, LEN, TPT_SEED_SRC));
	munmap(m, LEN);
}

/* ---- CANCEL -------------------------------------------------------------- */

TEST_F(uring, cancel_via_ioctl_fails_pending_uring_recv_with_ecanceled)
{
	struct tpt_pair *p = &self->p;
	uint32_t count = 0;
	struct tpt_cqe c;

	REQUIRE_URING(p);
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "k", p->dst, 0, LEN, 0, 0,
			   1));
	EXPECT_TRUE(have_waiters(p->domain_id, 1));
	ASSERT_EQ(0, tpt_cancel(p->cons, "k", TP_CANCEL_RECV, &count));
	EXPECT_EQ(1U, count);
	ASSERT_EQ(0, one_cqe(&self->ring, &c));
	EXPECT_EQ(1ULL, c.user_data);
	EXPECT_EQ(-ECANCELED, c.res);
	EXPECT_EQ(0ULL, c.extra1);
	EXPECT_TRUE(have_waiters(p->domain_id, 0));
	EXPECT_EQ(-ENOENT, tpt_cancel(p->cons, "k", TP_CANCEL_RECV, NULL));
	/* The cancelled RECV took nothing. */
	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, LEN, 1));
	EXPECT_EQ(0, tpt_uring_quiet(&self->ring, QUIET_MS, NULL));
	EXPECT_EQ(0, tpt_recv_nonblock(p->cons, "k", p->dst, 0, LEN, NULL));
}

TEST_F(uring, cancel_as_uring_cmd_returns_count)
{
	struct tpt_pair *p = &self->p;
	struct tpt_cqe c[3];

	REQUIRE_URING(p);
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "k", p->dst, 0, LEN, 0, 0,
			   1));
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "k", p->dst, 0, LEN, 0, 0,
			   2));
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "other", p->dst, 0, LEN, 0,
			   0, 3));
	EXPECT_TRUE(have_waiters(p->domain_id, 3));
	ASSERT_EQ(0, ucancel(&self->ring, p->cons, "k", TP_CANCEL_RECV, 10));
	ASSERT_EQ(3, tpt_uring_wait_n(&self->ring, c, 3, WAIT_MS));
	ASSERT_NE(NULL, cqe_for(c, 3, 10));
	EXPECT_EQ(2, cqe_for(c, 3, 10)->res);
	ASSERT_NE(NULL, cqe_for(c, 3, 1));
	EXPECT_EQ(-ECANCELED, cqe_for(c, 3, 1)->res);
	ASSERT_NE(NULL, cqe_for(c, 3, 2));
	EXPECT_EQ(-ECANCELED, cqe_for(c, 3, 2)->res);
	EXPECT_EQ(0, tpt_uring_quiet(&self->ring, QUIET_MS, NULL));
	EXPECT_TRUE(have_waiters(p->domain_id, 1));

	ASSERT_EQ(0, ucancel(&self->ring, p->cons, "k", TP_CANCEL_RECV, 11));
	ASSERT_EQ(0, one_cqe(&self->ring, c));
	EXPECT_EQ(11ULL, c[0].user_data);
	EXPECT_EQ(-ENOENT, c[0].res);

	ASSERT_EQ(0, ucancel(&self->ring, p->cons, "other",
			     TP_CANCEL_RECV | TP_CANCEL_SEND, 12));
	ASSERT_EQ(2, tpt_uring_wait_n(&self->ring, c, 2, WAIT_MS));
	EXPECT_EQ(1, cqe_for(c, 2, 12)->res);
	EXPECT_EQ(-ECANCELED, cqe_for(c, 2, 3)->res);
	EXPECT_TRUE(have_waiters(p->domain_id, 0));
}

TEST_F(uring, cancel_of_pending_uring_send_completes_its_cqe_ecanceled)
{
	struct tpt_pair *p = &self->p;
	uint32_t count = 0;
	struct tpt_cqe c[2];

	REQUIRE_URING(p);
	/* Cancelled by a uring_cmd CANCEL on the same ring. */
	ASSERT_EQ(0, usend(&self->ring, p->prod, "k", p->src, 0, LEN, 0, 1));
	ASSERT_EQ(0, ucancel(&self->ring, p->prod, "k", TP_CANCEL_SEND, 2));
	ASSERT_EQ(2, tpt_uring_wait_n(&self->ring, c, 2, WAIT_MS));
	ASSERT_NE(NULL, cqe_for(c, 2, 2));
	EXPECT_EQ(1, cqe_for(c, 2, 2)->res);
	ASSERT_NE(NULL, cqe_for(c, 2, 1));
	EXPECT_EQ(-ECANCELED, cqe_for(c, 2, 1)->res);
	EXPECT_EQ(0ULL, cqe_for(c, 2, 1)->extra1);
	EXPECT_EQ(0, tpt_uring_quiet(&self->ring, QUIET_MS, NULL));
	EXPECT_EQ(0, tpt_readable_now(p->prod));
	EXPECT_EQ(-EAGAIN, tpt_recv_nonblock(p->cons, "k", p->dst, 0, LEN,
					     NULL));

	/* Posted again (the key is free), cancelled by the ioctl. */
	ASSERT_EQ(0, usend(&self->ring, p->prod, "k", p->src, 0, LEN, 0, 3));
	ASSERT_EQ(0, tpt_cancel(p->prod, "k", TP_CANCEL_SEND, &count));
	EXPECT_EQ(1U, count);
	ASSERT_EQ(0, one_cqe(&self->ring, c));
	EXPECT_EQ(3ULL, c[0].user_data);
	EXPECT_EQ(-ECANCELED, c[0].res);
	EXPECT_EQ(0, tpt_readable_now(p->prod));
	if (tpt_have_debugfs())
		EXPECT_EQ(0, tpt_wait_domain_stat(p->domain_id,
						  "pending_slots", 0, 1000));
}

/*
 * A CANCEL issued by an io-wq worker (IOSQE_ASYNC) still posts its count:
 * io_uring drops a positive value returned by the handler on that path, so
 * the module must complete the command itself.
 */
TEST_F(uring, cancel_issued_from_io_wq_completes_with_its_count)
{
	struct tpt_pair *p = &self->p;
	struct tp_cancel cn;
	struct tpt_cqe c[2];

	REQUIRE_URING(p);
	ASSERT_EQ(0, tpt_send(p->prod, "wq", p->src, 0, LEN, 1));
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "wq-r", p->dst, 0, LEN, 0, 0,
			   2));
	tpt_cancel_prep(&cn, "wq", 2, TP_CANCEL_SEND);
	ASSERT_EQ(0, tpt_uring_prep(&self->ring, p->prod, TP_IOC_CANCEL, &cn,
				    sizeof(cn), 10, IOSQE_ASYNC));
	ASSERT_EQ(1, tpt_uring_submit(&self->ring));
	ASSERT_EQ(0, one_cqe(&self->ring, c));
	EXPECT_EQ(10ULL, c[0].user_data);
	EXPECT_EQ(1, c[0].res);

	tpt_cancel_prep(&cn, "wq-r", 4, TP_CANCEL_RECV);
	ASSERT_EQ(0, tpt_uring_prep(&self->ring, p->cons, TP_IOC_CANCEL, &cn,
				    sizeof(cn), 11, IOSQE_ASYNC));
	ASSERT_EQ(1, tpt_uring_submit(&self->ring));
	ASSERT_EQ(2, tpt_uring_wait_n(&self->ring, c, 2, WAIT_MS));
	ASSERT_NE(NULL, cqe_for(c, 2, 11));
	EXPECT_EQ(1, cqe_for(c, 2, 11)->res);
	ASSERT_NE(NULL, cqe_for(c, 2, 2));
	EXPECT_EQ(-ECANCELED, cqe_for(c, 2, 2)->res);

	/* Nothing to cancel: the error, also from io-wq. */
	ASSERT_EQ(0, tpt_uring_prep(&self->ring, p->cons, TP_IOC_CANCEL, &cn,
				    sizeof(cn), 12, IOSQE_ASYNC));
	ASSERT_EQ(1, tpt_uring_submit(&self->ring));
	ASSERT_EQ(0, one_cqe(&self->ring, c));
	EXPECT_EQ(-ENOENT, c[0].res);
}

/* A successful CANCEL is a success for its link: the next request runs. */
TEST_F(uring, cancel_in_a_link_lets_the_next_request_run)
{
	struct tpt_pair *p = &self->p;
	struct io_uring_sqe *sqe;
	struct tp_cancel cn;
	struct tp_completion done;
	struct tpt_cqe c[3];
	unsigned int flags;

	REQUIRE_URING(p);
	for (flags = 0; flags <= IOSQE_ASYNC; flags += IOSQE_ASYNC) {
		ASSERT_EQ(0, tpt_send(p->prod, "ln", p->src, 0, LEN, 1));
		tpt_cancel_prep(&cn, "ln", 2, TP_CANCEL_SEND);
		ASSERT_EQ(0, tpt_uring_prep(&self->ring, p->prod,
					    TP_IOC_CANCEL, &cn, sizeof(cn), 20,
					    IOSQE_IO_LINK | flags));
		sqe = io_uring_get_sqe(&self->ring);
		ASSERT_NE(NULL, sqe);
		io_uring_prep_nop(sqe);
		sqe->user_data = 21;
		ASSERT_EQ(2, tpt_uring_submit(&self->ring));
		ASSERT_EQ(2, tpt_uring_wait_n(&self->ring, c, 2, WAIT_MS));
		ASSERT_NE(NULL, cqe_for(c, 2, 20));
		EXPECT_EQ(1, cqe_for(c, 2, 20)->res);
		ASSERT_NE(NULL, cqe_for(c, 2, 21));
		EXPECT_EQ(0, cqe_for(c, 2, 21)->res)
			TH_LOG("the NOP after the CANCEL (flags %#x)", flags);
		EXPECT_EQ(0, tpt_uring_quiet(&self->ring, QUIET_MS, NULL));
		ASSERT_EQ(1, tpt_read_completions(p->prod, &done, 1, WAIT_MS));
		EXPECT_EQ(-ECANCELED, done.status);
	}
}

/*
 * On an SQPOLL ring a CANCEL from io-wq that never completed kept the ring
 * from going away, so its task could not be killed.
 */
TEST_F(uring, cancel_from_io_wq_on_an_sqpoll_ring_lets_its_task_exit)
{
	struct tpt_pair *p = &self->p;
	int pfd[2], status = 0, ret;
	pid_t pid;

	REQUIRE_URING(p);
	ASSERT_EQ(0, pipe2(pfd, O_CLOEXEC));
	pid = tpt_fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct extra_ep e;
		struct io_uring ring;
		struct tp_cancel cn;
		struct tpt_cqe c;
		uint8_t code = 0;

		close(pfd[0]);
		ret = tpt_ring_init(&ring, 8, TPT_RING_FLAGS |
				    IORING_SETUP_SQPOLL);
		if (ret)
			code = 77;
		tpt_cancel_prep(&cn, "sqc", 3, TP_CANCEL_SEND);
		if (!code && (extra_ep_open(&e, p) ||
			      tpt_send(e.fd, "sqc", e.src, 0, LEN, 1) ||
			      tpt_uring_prep(&ring, e.fd, TP_IOC_CANCEL, &cn,
					     sizeof(cn), 1, IOSQE_ASYNC) ||
			      tpt_uring_submit(&ring) != 1))
			code = 1;
		if (!code && (tpt_uring_wait(&ring, &c, WAIT_MS) || c.res != 1))
			code = 2;
		tpt_write_all(pfd[1], &code, 1);
		_exit(0);
	}
	close(pfd[1]);
	ret = wait_exit_ms(pid, TPT_SAFETY_TIMEOUT_MS, &status);
	if (ret) {
		kill(pid, SIGKILL);
		EXPECT_EQ(0, wait_exit_ms(pid, GONE_MS, &status))
			TH_LOG("the task cannot even be killed");
	}
	ASSERT_EQ(0, ret) TH_LOG("the task did not exit");
	{
		uint8_t code = 255;

		ASSERT_EQ(0, tpt_read_all(pfd[0], &code, 1, 1000));
		close(pfd[0]);
		if (code == 77)
			SKIP(return, "no SQPOLL ring");
		EXPECT_EQ(0, code) TH_LOG("child failed at step %u", code);
	}
}

/* Waiting io_uring RECVs hold a key each: they count like pending SENDs. */
TEST_F(uring, waiting_recvs_count_against_max_user_ops_edquot)
{
	struct tpt_pair *p = &self->p;
	struct tpt_cqe c[2];
	uint32_t count;

	REQUIRE_URING(p);
	TPT_SET_PARAM(&self->saved, "max_user_ops", 2);
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "a", p->dst, 0, LEN, 0, 0,
			   1));
	ASSERT_EQ(0, usend(&self->ring, p->prod, "b", p->src, 0, LEN, 0, 2));
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "c", p->dst, 0, LEN, 0, 0,
			   3));
	ASSERT_EQ(0, one_cqe(&self->ring, c));
	EXPECT_EQ(3ULL, c[0].user_data);
	EXPECT_EQ(-EDQUOT, c[0].res);
	EXPECT_EQ(-EDQUOT, tpt_send(p->prod, "d", p->src, 0, LEN, 4));
	/* Ending one makes room for one. */
	ASSERT_EQ(0, tpt_cancel(p->cons, "a", TP_CANCEL_RECV, &count));
	ASSERT_EQ(0, one_cqe(&self->ring, c));
	EXPECT_EQ(-ECANCELED, c[0].res);
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "b", p->dst, 0, LEN, 0, 0,
			   5));
	ASSERT_EQ(2, tpt_uring_wait_n(&self->ring, c, 2, WAIT_MS));
	EXPECT_EQ(0, cqe_for(c, 2, 2)->res);
	EXPECT_EQ(0, cqe_for(c, 2, 5)->res);
}

/* ---- ABORT --------------------------------------------------------------- */

/*
 * The largest status ABORT accepts comes back unchanged, never as something
 * io_uring reads as "completes later" (-EIOCBQUEUED is -529).
 */
TEST_F(uring, commands_of_a_domain_aborted_with_the_largest_errno_fail_with_it)
{
	struct tpt_pair *p = &self->p;
	struct tpt_cqe c[3];

	REQUIRE_URING(p);
	ASSERT_EQ(-EINVAL, tpt_abort(p->prod, -529));
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "r", p->dst, 0, LEN, 0, 0,
			   1));
	ASSERT_EQ(0, tpt_abort(p->prod, -EHWPOISON));
	ASSERT_EQ(0, usend(&self->ring, p->prod, "s", p->src, 0, LEN, 0, 2));
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "t", p->dst, 0, LEN, 0, 0,
			   3));
	ASSERT_EQ(3, tpt_uring_wait_n(&self->ring, c, 3, WAIT_MS));
	EXPECT_EQ(-EHWPOISON, cqe_for(c, 3, 1)->res);
	EXPECT_EQ(-EHWPOISON, cqe_for(c, 3, 2)->res);
	EXPECT_EQ(-EHWPOISON, cqe_for(c, 3, 3)->res);
}

/*
 * -EAGAIN returned by the handler would make io_uring issue the command
 * again; as an abort status it is just the CQE's result, once.
 */
TEST_F(uring, commands_of_a_domain_aborted_with_eagain_complete_once)
{
	struct tpt_pair *p = &self->p;
	struct tpt_cqe c[2];
	struct tp_send s;

	REQUIRE_URING(p);
	ASSERT_EQ(0, tpt_abort(p->prod, -EAGAIN));
	ASSERT_EQ(0, usend(&self->ring, p->prod, "s", p->src, 0, LEN, 0, 1));
	tpt_send_prep(&s, "t", 1, p->src, 0, LEN, 2);
	ASSERT_EQ(0, tpt_uring_prep(&self->ring, p->prod, TP_IOC_SEND, &s,
				    sizeof(s), 2, IOSQE_ASYNC));
	ASSERT_EQ(1, tpt_uring_submit(&self->ring));
	ASSERT_EQ(2, tpt_uring_wait_n(&self->ring, c, 2, WAIT_MS));
	EXPECT_EQ(-EAGAIN, cqe_for(c, 2, 1)->res);
	EXPECT_EQ(-EAGAIN, cqe_for(c, 2, 2)->res);
	EXPECT_EQ(0, tpt_uring_quiet(&self->ring, QUIET_MS, NULL));
}

TEST_F(uring, abort_fails_pending_uring_recv_and_send_with_status)
{
	struct tpt_pair *p = &self->p;
	struct tpt_cqe c[2];

	REQUIRE_URING(p);
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "r", p->dst, 0, LEN, 0, 0,
			   1));
	ASSERT_EQ(0, usend(&self->ring, p->prod, "s", p->src, 0, LEN, 0, 2));
	EXPECT_EQ(0, tpt_uring_quiet(&self->ring, QUIET_MS, NULL));
	ASSERT_EQ(0, tpt_abort(p->prod, -EPIPE));
	ASSERT_EQ(2, tpt_uring_wait_n(&self->ring, c, 2, WAIT_MS));
	ASSERT_NE(NULL, cqe_for(c, 2, 1));
	EXPECT_EQ(-EPIPE, cqe_for(c, 2, 1)->res);
	ASSERT_NE(NULL, cqe_for(c, 2, 2));
	EXPECT_EQ(-EPIPE, cqe_for(c, 2, 2)->res);
	EXPECT_EQ(0, tpt_uring_quiet(&self->ring, QUIET_MS, NULL));
	EXPECT_EQ(0, tpt_readable_now(p->prod));
	EXPECT_TRUE(have_waiters(p->domain_id, 0));

	/* Later commands fail with the status at once. */
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "r2", p->dst, 0, LEN, 0, 0,
			   3));
	ASSERT_EQ(0, usend(&self->ring, p->prod, "s2", p->src, 0, LEN, 0, 4));
	ASSERT_EQ(2, tpt_uring_wait_n(&self->ring, c, 2, WAIT_MS));
	EXPECT_EQ(-EPIPE, cqe_for(c, 2, 3)->res);
	EXPECT_EQ(-EPIPE, cqe_for(c, 2, 4)->res);
	EXPECT_EQ(0, tpt_uring_quiet(&self->ring, QUIET_MS, NULL));
}

/* ---- the ring, the endpoint or the task goes away ----------------------- */

TEST_F(uring, ring_closed_with_pending_recv_completes_and_frees)
{
	struct tpt_pair *p = &self->p;
	struct extra_ep e = { .fd = -1 };
	int64_t endpoints;
	uint64_t start;

	REQUIRE_URING(p);
	TPT_REQUIRE_DEBUGFS();
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "k", p->dst, 0, LEN, 0, 0,
			   1));
	ASSERT_EQ(0, tpt_wait_domain_stat(p->domain_id, "waiters", 1, 1000));
	start = tpt_now_ns();
	io_uring_queue_exit(&self->ring);
	self->ring_open = false;
	EXPECT_GT(TPT_NSEC_PER_SEC, tpt_now_ns() - start);
	EXPECT_EQ(0, tpt_wait_domain_stat(p->domain_id, "waiters", 0,
					  GONE_MS));

	/* The command let go of the endpoint: closing it releases it. */
	ASSERT_EQ(0, tpt_stat("endpoints", &endpoints));
	close(p->cons);
	p->cons = -1;
	EXPECT_EQ(0, wait_endpoints_at_most(endpoints - 1, GONE_MS));

	/* The RECV took nothing: a SEND of the key waits for a consumer. */
	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, LEN, 1));
	ASSERT_EQ(0, extra_ep_open(&e, p));
	EXPECT_EQ(0, tpt_recv_nonblock(e.fd, "k", e.dst, 0, LEN, NULL));
	EXPECT_TRUE(tpt_check(e.buf + LEN, LEN, TPT_SEED_SRC));
	extra_ep_close(&e);
}

TEST_F(uring, recv_of_a_closed_ring_does_not_take_a_later_send)
{
	struct tpt_pair *p = &self->p;
	struct tp_completion done;
	int ret;

	REQUIRE_URING(p);
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "k", p->dst, 0, LEN, 0, 0,
			   1));
	io_uring_queue_exit(&self->ring);
	self->ring_open = false;
	/*
	 * Right away, before the module noticed the ring is gone: nobody can
	 * learn about a delivery to this RECV any more, so it must fail with
	 * -ECANCELED and leave the tensor for the next consumer.
	 */
	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, LEN, 1));
	ret = tpt_recv_nonblock(p->cons, "k", p->dst, 0, LEN, NULL);
	EXPECT_EQ(0, ret) {
		TH_LOG("the RECV of the closed ring consumed the tensor");
	}
	ASSERT_EQ(1, tpt_read_completions(p->prod, &done, 1, WAIT_MS));
	EXPECT_EQ(0, done.status);
	EXPECT_TRUE(have_waiters(p->domain_id, 0));
}

TEST_F(uring, ring_closed_with_pending_send_withdraws_it)
{
	struct tpt_pair *p = &self->p;
	struct extra_ep e = { .fd = -1 };
	int64_t endpoints;

	REQUIRE_URING(p);
	TPT_REQUIRE_DEBUGFS();
	ASSERT_EQ(0, usend(&self->ring, p->prod, "k", p->src, 0, LEN, 0, 1));
	ASSERT_EQ(0, tpt_wait_domain_stat(p->domain_id, "pending_slots", 1,
					  1000));
	io_uring_queue_exit(&self->ring);
	self->ring_open = false;
	EXPECT_EQ(0, tpt_wait_domain_stat(p->domain_id, "pending_slots", 0,
					  GONE_MS));
	/* Withdrawn, not delivered: no read() record either. */
	EXPECT_EQ(0, tpt_readable_now(p->prod));
	EXPECT_EQ(-EAGAIN, tpt_recv_nonblock(p->cons, "k", p->dst, 0, LEN,
					     NULL));
	/* The key is free for another producer. */
	ASSERT_EQ(0, extra_ep_open(&e, p));
	EXPECT_EQ(0, tpt_send(e.fd, "k", e.src, 0, LEN, 2));
	EXPECT_EQ(0, tpt_recv_nonblock(p->cons, "k", p->dst, 0, LEN, NULL));

	ASSERT_EQ(0, tpt_stat("endpoints", &endpoints));
	close(p->prod);
	p->prod = -1;
	EXPECT_EQ(0, wait_endpoints_at_most(endpoints - 1, GONE_MS));
	extra_ep_close(&e);
}

TEST_F(uring, endpoint_fd_closed_with_pending_recv_does_not_hang)
{
	struct tpt_pair *p = &self->p;
	int64_t endpoints = 0;
	struct tpt_cqe c;

	REQUIRE_URING(p);
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "k", p->dst, 0, LEN,
			   TPT_SAFETY_TIMEOUT_NS, 0, 1));
	if (tpt_have_debugfs())
		ASSERT_EQ(0, tpt_stat("endpoints", &endpoints));
	/* The pending command holds the file: the endpoint lives on. */
	close(p->cons);
	p->cons = -1;
	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, LEN, 1));
	ASSERT_EQ(0, one_cqe(&self->ring, &c));
	EXPECT_TRUE(c.res == 0 || c.res == -ECANCELED) {
		TH_LOG("res %d", c.res);
	}
	if (c.res == 0)
		EXPECT_TRUE(tpt_check(p->dbuf, LEN, TPT_SEED_SRC));
	TH_LOG("RECV of a closed endpoint fd completed with %d", c.res);
	if (tpt_have_debugfs())
		EXPECT_EQ(0, wait_endpoints_at_most(endpoints - 1, GONE_MS));
}

TEST_F(uring, closing_one_ring_leaves_another_rings_commands_pending)
{
	struct tpt_pair *p = &self->p;
	struct io_uring other;
	struct tpt_cqe c;

	REQUIRE_URING(p);
	ASSERT_EQ(0, tpt_ring_init(&other, 8, TPT_RING_FLAGS));
	ASSERT_EQ(0, urecv(&other, p->cons, "a", p->dst, 0, LEN, 0, 0, 1));
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "b", p->dst, 0, LEN,
			   TPT_SAFETY_TIMEOUT_NS, 0, 2));
	EXPECT_TRUE(have_waiters(p->domain_id, 2));
	io_uring_queue_exit(&other);
	if (tpt_have_debugfs()) {
		EXPECT_EQ(0, tpt_wait_domain_stat(p->domain_id, "waiters", 1,
						  GONE_MS));
	} else {
		tpt_sleep_ms(GONE_MS / 2);
	}
	/* Past the monitor's period, the other ring's RECV still waits. */
	EXPECT_EQ(0, tpt_uring_quiet(&self->ring, QUIET_MS, &c));
	ASSERT_EQ(0, tpt_send(p->prod, "b", p->src, 0, LEN, 2));
	ASSERT_EQ(0, one_cqe(&self->ring, &c));
	EXPECT_EQ(2ULL, c.user_data);
	EXPECT_EQ(0, c.res);
	EXPECT_TRUE(tpt_check(p->dbuf, LEN, TPT_SEED_SRC));
}

TEST_F(uring, fork_child_exit_does_not_cancel_parents_commands)
{
	struct tpt_pair *p = &self->p;
	int status = 0;
	struct tpt_cqe c;
	pid_t pid;

	REQUIRE_URING(p);
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "k", p->dst, 0, LEN,
			   TPT_SAFETY_TIMEOUT_NS, 0, 1));
	ASSERT_EQ(0, usend(&self->ring, p->prod, "s", p->src, 0, LEN, 0, 2));
	/* The child inherits the ring and both endpoints, then exits. */
	pid = tpt_fork();
	ASSERT_LE(0, pid);
	if (pid == 0)
		_exit(0);
	ASSERT_EQ(0, tpt_wait_child(pid, WAIT_MS, &status));
	tpt_sleep_ms(300);
	EXPECT_EQ(0, tpt_uring_quiet(&self->ring, QUIET_MS, &c)) {
		TH_LOG("CQE ud %llu res %d", (unsigned long long)c.user_data,
		       c.res);
	}
	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, LEN, 1));
	ASSERT_EQ(0, one_cqe(&self->ring, &c));
	EXPECT_EQ(1ULL, c.user_data);
	EXPECT_EQ(0, c.res);
	ASSERT_EQ(0, tpt_recv_nonblock(p->cons, "s", p->dst, 0, LEN, NULL));
	ASSERT_EQ(0, one_cqe(&self->ring, &c));
	EXPECT_EQ(2ULL, c.user_data);
	EXPECT_EQ(0, c.res);
}

/* A child that submits a SEND and a RECV, then exits or is killed. */
static void orphan_child(int domain_fd, int wfd, bool wait_in_kernel)
{
	struct io_uring ring;
	uint8_t *buf = tpt_map(2 * LEN);
	uint32_t src, dst;
	struct tpt_cqe c;
	int fd = tpt_open();

	if (!buf || fd < 0 || tpt_domain_attach(fd, domain_fd, NULL) ||
	    tpt_register(fd, buf, LEN, TP_ACCESS_READ, &src) ||
	    tpt_register(fd, buf + LEN, LEN, TP_ACCESS_WRITE, &dst) ||
	    tpt_ring_init(&ring, 8, TPT_RING_FLAGS) ||
	    usend(&ring, fd, "orphan-send", src, 0, LEN, 0, 1) ||
	    urecv(&ring, fd, "orphan-recv", dst, 0, LEN, 0, 0, 2) ||
	    tpt_uring_peek(&ring, &c) != -EAGAIN)
		_exit(1);
	if (tpt_notify(wfd))
		_exit(1);
	if (wait_in_kernel)
		tpt_uring_wait(&ring, &c, 60000);
	_exit(0);
}

static void check_orphans_gone(struct __test_metadata *_metadata,
			       struct tpt_pair *p, int64_t endpoints)
{
	struct tp_completion done[2];

	EXPECT_EQ(0, tpt_wait_domain_stat(p->domain_id, "waiters", 0,
					  GONE_MS));
	EXPECT_EQ(0, tpt_wait_domain_stat(p->domain_id, "pending_slots", 0,
					  GONE_MS));
	EXPECT_EQ(0, wait_endpoints_at_most(endpoints, GONE_MS));
	/* Both keys are free and neither was consumed by the dead RECV. */
	ASSERT_EQ(0, tpt_send(p->prod, "orphan-send", p->src, 0, LEN, 1));
	EXPECT_EQ(0, tpt_recv_nonblock(p->cons, "orphan-send", p->dst, 0,
				       LEN, NULL));
	ASSERT_EQ(0, tpt_send(p->prod, "orphan-recv", p->src, 0, LEN, 2));
	EXPECT_EQ(0, tpt_recv_nonblock(p->cons, "orphan-recv", p->dst, 0,
				       LEN, NULL));
	EXPECT_EQ(2, tpt_read_completions(p->prod, done, 2, WAIT_MS));
}

TEST_F(uring, task_exit_with_pending_recv_and_send_does_not_hang)
{
	struct tpt_pair *p = &self->p;
	int64_t endpoints;
	int pfd[2], status = 0;
	pid_t pid;

	REQUIRE_URING(p);
	TPT_REQUIRE_DEBUGFS();
	ASSERT_EQ(0, tpt_stat("endpoints", &endpoints));
	ASSERT_EQ(0, pipe2(pfd, O_CLOEXEC));
	pid = tpt_fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		close(pfd[0]);
		orphan_child(p->domain_fd, pfd[1], false);
	}
	close(pfd[1]);
	ASSERT_EQ(0, tpt_wait_notify(pfd[0], TPT_SAFETY_TIMEOUT_MS));
	close(pfd[0]);
	ASSERT_EQ(0, tpt_wait_child(pid, TPT_SAFETY_TIMEOUT_MS, &status));
	EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	check_orphans_gone(_metadata, p, endpoints);
}

TEST_F(uring, task_killed_while_waiting_for_cqe_does_not_hang)
{
	struct tpt_pair *p = &self->p;
	int64_t endpoints;
	int pfd[2], status = 0;
	pid_t pid;

	REQUIRE_URING(p);
	TPT_REQUIRE_DEBUGFS();
	ASSERT_EQ(0, tpt_stat("endpoints", &endpoints));
	ASSERT_EQ(0, pipe2(pfd, O_CLOEXEC));
	pid = tpt_fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		close(pfd[0]);
		orphan_child(p->domain_fd, pfd[1], true);
	}
	close(pfd[1]);
	ASSERT_EQ(0, tpt_wait_notify(pfd[0], TPT_SAFETY_TIMEOUT_MS));
	close(pfd[0]);
	ASSERT_EQ(0, tpt_wait_domain_stat(p->domain_id, "waiters", 1, 1000));
	tpt_sleep_ms(50);	/* into io_uring_enter */
	kill(pid, SIGKILL);
	ASSERT_EQ(0, tpt_wait_child(pid, TPT_SAFETY_TIMEOUT_MS, &status));
	EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	check_orphans_gone(_metadata, p, endpoints);
}

TEST_F(uring, execve_with_pending_recv_and_send_does_not_hang)
{
	struct tpt_pair *p = &self->p;
	int pfd[2], status = 0, ret;
	pid_t pid;

	REQUIRE_URING(p);
	if (access("/bin/true", X_OK))
		SKIP(return, "no /bin/true to exec");
	ASSERT_EQ(0, pipe2(pfd, O_CLOEXEC));
	pid = tpt_fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct io_uring ring;
		uint8_t *buf = tpt_map(2 * LEN);
		uint32_t src, dst;
		int fd = tpt_open();

		close(pfd[0]);
		if (!buf || fd < 0 ||
		    tpt_domain_attach(fd, p->domain_fd, NULL) ||
		    tpt_register(fd, buf, LEN, TP_ACCESS_READ, &src) ||
		    tpt_register(fd, buf + LEN, LEN, TP_ACCESS_WRITE, &dst) ||
		    tpt_ring_init(&ring, 8, TPT_RING_FLAGS) ||
		    usend(&ring, fd, "exec-send", src, 0, LEN, 0, 1) ||
		    urecv(&ring, fd, "exec-recv", dst, 0, LEN, 0, 0, 2) ||
		    tpt_notify(pfd[1]))
			_exit(1);
		execl("/bin/true", "true", (char *)NULL);
		_exit(2);
	}
	close(pfd[1]);
	ASSERT_EQ(0, tpt_wait_notify(pfd[0], TPT_SAFETY_TIMEOUT_MS));
	close(pfd[0]);
	ret = wait_exit_ms(pid, 3000, &status);
	EXPECT_EQ(0, ret) {
		TH_LOG("execve() did not return within 3 s");
	}
	if (ret) {
		/* Is it even killable? */
		kill(pid, SIGKILL);
		ret = wait_exit_ms(pid, 3000, &status);
		TH_LOG("SIGKILL %s the stuck execve()",
		       ret ? "did not end" : "ended");
	}
	if (ret) {
		/* Finishing the commands lets it go on. */
		tpt_send(p->prod, "exec-recv", p->src, 0, LEN, 1);
		tpt_recv_nonblock(p->cons, "exec-send", p->dst, 0, LEN, NULL);
		ret = wait_exit_ms(pid, 3000, &status);
		TH_LOG("finishing its commands %s it",
		       ret ? "did not end" : "ended");
		ASSERT_EQ(0, ret);
	}
	/* Exited from /bin/true, or killed above. */
	EXPECT_TRUE((WIFEXITED(status) && WEXITSTATUS(status) == 0) ||
		    WIFSIGNALED(status));
	if (tpt_have_debugfs()) {
		EXPECT_EQ(0, tpt_wait_domain_stat(p->domain_id, "waiters", 0,
						  GONE_MS));
		EXPECT_EQ(0, tpt_wait_domain_stat(p->domain_id,
						  "pending_slots", 0, GONE_MS));
	}
}

struct thread_cmds {
	struct io_uring *ring;
	struct tpt_pair *p;
	int ret;
};

static void *submit_and_exit(void *arg)
{
	struct thread_cmds *t = arg;

	t->ret = usend(t->ring, t->p->prod, "t-send", t->p->src, 0, LEN, 0, 1);
	if (!t->ret)
		t->ret = urecv(t->ring, t->p->cons, "t-recv", t->p->dst, 0,
			       LEN, 0, 0, 2);
	return NULL;
}

TEST_F(uring, thread_exit_with_pending_commands_completes_them_ecanceled)
{
	struct tpt_pair *p = &self->p;
	struct thread_cmds t = { .ring = &self->ring, .p = p, .ret = 1 };
	struct tpt_cqe c[2];
	pthread_t th;

	REQUIRE_URING(p);
	if (p->info.features & TP_FEAT_URING_KERNEL_CANCEL)
		SKIP(return, "io_uring keeps a thread's commands past its exit here");
	ASSERT_EQ(0, pthread_create(&th, NULL, submit_and_exit, &t));
	ASSERT_EQ(0, pthread_join(th, NULL));
	ASSERT_EQ(0, t.ret);
	/* The ring outlives the submitting thread: the CQEs are seen. */
	ASSERT_EQ(2, tpt_uring_wait_n(&self->ring, c, 2, GONE_MS));
	ASSERT_NE(NULL, cqe_for(c, 2, 1));
	EXPECT_EQ(-ECANCELED, cqe_for(c, 2, 1)->res);
	ASSERT_NE(NULL, cqe_for(c, 2, 2));
	EXPECT_EQ(-ECANCELED, cqe_for(c, 2, 2)->res);
	EXPECT_EQ(0, tpt_uring_quiet(&self->ring, QUIET_MS, NULL));
	EXPECT_EQ(0, tpt_readable_now(p->prod));
	EXPECT_TRUE(have_waiters(p->domain_id, 0));
	/* The SEND was withdrawn, the RECV took nothing. */
	EXPECT_EQ(-EAGAIN, tpt_recv_nonblock(p->cons, "t-send", p->dst, 0,
					     LEN, NULL));
	ASSERT_EQ(0, tpt_send(p->prod, "t-recv", p->src, 0, LEN, 3));
	EXPECT_EQ(0, tpt_recv_nonblock(p->cons, "t-recv", p->dst, 0, LEN,
				       NULL));
}

/*
 * Where io_uring cancels commands itself it does so for the process, not
 * for each thread: a thread's commands outlive it and end as their keys
 * arrive, the SEND consumed normally, the RECV with -ECANCELED and nothing
 * taken (no task is left to copy into).
 */
TEST_F(uring, thread_exit_leaves_its_commands_to_finish_when_kernel_cancels)
{
	struct tpt_pair *p = &self->p;
	struct thread_cmds t = { .ring = &self->ring, .p = p, .ret = 1 };
	struct tpt_cqe c[2];
	pthread_t th;
	uint64_t len;

	REQUIRE_URING(p);
	if (!(p->info.features & TP_FEAT_URING_KERNEL_CANCEL))
		SKIP(return, "the module ends a thread's commands at its exit here");
	ASSERT_EQ(0, pthread_create(&th, NULL, submit_and_exit, &t));
	ASSERT_EQ(0, pthread_join(th, NULL));
	ASSERT_EQ(0, t.ret);
	EXPECT_EQ(0, tpt_uring_quiet(&self->ring, QUIET_MS, NULL));
	EXPECT_TRUE(have_waiters(p->domain_id, 1));
	ASSERT_EQ(0, tpt_recv_nonblock(p->cons, "t-send", p->dst, 0, LEN,
				       &len));
	ASSERT_EQ(0, tpt_send(p->prod, "t-recv", p->src, 0, LEN, 3));
	ASSERT_EQ(2, tpt_uring_wait_n(&self->ring, c, 2, WAIT_MS));
	ASSERT_NE(NULL, cqe_for(c, 2, 1));
	ASSERT_NE(NULL, cqe_for(c, 2, 2));
	EXPECT_TRUE(have_waiters(p->domain_id, 0));
	EXPECT_EQ(0, cqe_for(c, 2, 1)->res);		/* the SEND */
	EXPECT_EQ(-ECANCELED, cqe_for(c, 2, 2)->res);	/* the RECV */
	/* The RECV took nothing: the tensor is still there. */
	EXPECT_EQ(0, tpt_recv_nonblock(p->cons, "t-recv", p->dst, 0, LEN,
				       NULL));
}

/*
 * A consumer child with @n uring RECVs pending ("exit-<i>") exits while the
 * parent posts those keys.  Each key must end up either consumed (one
 * completion, status 0) or still pending for the next consumer: never both,
 * never neither.
 */
static void exit_racer(int domain_fd, int n, int wfd, unsigned int delay_us)
{
	key_buf *keys = keys_make("exit", n);
	uint8_t *buf = tpt_map(n * TPT_KIB);
	struct io_uring ring;
	uint32_t h;
	int fd = tpt_open(), i;

	if (!keys || !buf || fd < 0 || tpt_domain_attach(fd, domain_fd, NULL) ||
	    tpt_register(fd, buf, n * TPT_KIB, TP_ACCESS_WRITE, &h) ||
	    tpt_ring_init(&ring, n, TPT_RING_FLAGS))
		_exit(1);
	for (i = 0; i < n; i++) {
		struct tp_recv r;

		tpt_recv_prep(&r, keys[i], strlen(keys[i]), h, i * TPT_KIB,
			      TPT_KIB, 0);
		if (tpt_uring_prep(&ring, fd, TP_IOC_RECV, &r, sizeof(r), i,
				   0))
			_exit(1);
	}
	if (tpt_uring_submit(&ring) != n || tpt_notify(wfd))
		_exit(1);
	{
		uint64_t end = tpt_now_ns() + delay_us * 1000ULL;

		/* Keep entering the kernel so that deliveries run here. */
		while (tpt_now_ns() < end) {
			struct tpt_cqe c;

			tpt_uring_peek(&ring, &c);
		}
	}
	_exit(0);
}

TEST_F_TIMEOUT(uring, task_exit_racing_sends_loses_no_tensor, 120)
{
	const int n = 64, rounds = 6;
	struct tpt_pair *p = &self->p;
	key_buf *keys = keys_make("exit", n);
	int round;

	REQUIRE_URING(p);
	TPT_REQUIRE_DEBUGFS();
	ASSERT_NE(NULL, keys);
	for (round = 0; round < rounds; round++) {
		struct tp_completion done[64];
		int pfd[2], i, got = 0, consumed = 0, pending = 0, bad = 0;
		int status = 0;
		pid_t pid;

		ASSERT_EQ(0, pipe2(pfd, O_CLOEXEC));
		pid = tpt_fork();
		ASSERT_LE(0, pid);
		if (pid == 0) {
			close(pfd[0]);
			exit_racer(p->domain_fd, n, pfd[1], round * 400);
		}
		close(pfd[1]);
		ASSERT_EQ(0, tpt_wait_notify(pfd[0], TPT_SAFETY_TIMEOUT_MS));
		close(pfd[0]);
		for (i = 0; i < n; i++)
			ASSERT_EQ(0, tpt_send(p->prod, keys[i], p->src,
					      i * TPT_KIB, TPT_KIB, i));
		ASSERT_EQ(0, tpt_wait_child(pid, TPT_SAFETY_TIMEOUT_MS,
					    &status));
		ASSERT_EQ(0, tpt_wait_domain_stat(p->domain_id, "waiters", 0,
						  GONE_MS));
		/* Completions of what the child consumed. */
		for (;;) {
			int k = tpt_read_completions(p->prod, done, 64, 300);

			if (k <= 0)
				break;
			for (i = 0; i < k; i++) {
				got++;
				if (done[i].status || done[i].len != TPT_KIB)
					bad++;
			}
		}
		for (i = 0; i < n; i++) {
			int ret = tpt_recv_nonblock(p->cons, keys[i], p->dst,
						    0, LEN, NULL);

			if (ret == 0)
				pending++;
			else if (ret == -EAGAIN)
				consumed++;
			else
				bad++;
		}
		/* The ones taken here complete too. */
		for (i = 0; i < pending;) {
			int k = tpt_read_completions(p->prod, done, 64,
						     WAIT_MS);

			if (k <= 0)
				break;
			i += k;
		}
		TH_LOG("round %d: %d consumed by the exiting child, %d left",
		       round, consumed, pending);
		EXPECT_EQ(0, bad);
		EXPECT_EQ(consumed, got);
		EXPECT_EQ(n, consumed + pending);
		EXPECT_EQ(pending, i);
		EXPECT_EQ(0, tpt_wait_domain_stat(p->domain_id,
						  "pending_slots", 0, GONE_MS));
	}
	free(keys);
}

struct consume_then_post {
	struct tpt_pair *p;
	int ret;
};

/* Consume the main thread's uring SEND, then post what it waits for. */
static void *consume_then_post(void *arg)
{
	struct consume_then_post *t = arg;

	tpt_sleep_ms(300);
	t->ret = tpt_recv_nonblock(t->p->cons, "tw", t->p->dst, 0, LEN, NULL);
	tpt_sleep_ms(300);
	if (!t->ret)
		t->ret = tpt_send(t->p->prod, "wanted", t->p->src, 0, LEN, 9);
	return NULL;
}

TEST_F(uring, blocking_ioctl_recv_is_not_interrupted_by_uring_completion)
{
	struct tpt_pair *p = &self->p;
	struct consume_then_post t = { .p = p, .ret = 1 };
	struct tpt_cqe c;
	uint8_t *buf;
	uint32_t h;
	pthread_t th;
	int ret;

	REQUIRE_URING(p);
	buf = tpt_map(LEN);
	ASSERT_NE(NULL, buf);
	ASSERT_EQ(0, tpt_register(p->cons, buf, LEN, TP_ACCESS_WRITE, &h));
	ASSERT_EQ(0, usend(&self->ring, p->prod, "tw", p->src, 0, LEN, 0, 1));
	ASSERT_EQ(0, pthread_create(&th, NULL, consume_then_post, &t));
	/*
	 * The SEND's CQE is posted by task work queued to this thread while
	 * it sleeps here; that is no signal, and must not end the RECV.
	 */
	ret = tpt_recv(p->cons, "wanted", h, 0, LEN, TPT_SAFETY_TIMEOUT_NS,
		       NULL);
	ASSERT_EQ(0, pthread_join(th, NULL));
	EXPECT_EQ(0, t.ret);
	EXPECT_EQ(0, ret) {
		TH_LOG("blocking RECV ended with %s", strerror(-ret));
	}
	ASSERT_EQ(0, one_cqe(&self->ring, &c));
	EXPECT_EQ(1ULL, c.user_data);
	EXPECT_EQ(0, c.res);
	if (ret == -EINTR) {
		/* Leave the domain clean for the checks below. */
		EXPECT_EQ(0, tpt_recv(p->cons, "wanted", h, 0, LEN,
				      TPT_SAFETY_TIMEOUT_NS, NULL));
	}
	EXPECT_TRUE(tpt_check(buf, LEN, TPT_SEED_SRC));
	tpt_unmap(buf, LEN);
}

/* ---- exactly one CQE ----------------------------------------------------- */

TEST_F_TIMEOUT(uring, many_async_recvs_each_get_exactly_one_cqe, 180)
{
	const int n = 256;
	const uint64_t chunk = 4 * TPT_KIB;
	struct tpt_pair *p = &self->p;
	struct tx_args a = {
		.domain_fd = p->domain_fd, .prefix = "many", .n = n,
		.len = chunk, .seed = 0x1000, .uring = true,
	};
	struct tpt_cqe *c;
	struct tx_report rep;
	struct tx_child tx;
	key_buf *keys = keys_make("many", n);
	struct io_uring ring;
	uint8_t *buf, *seen;
	uint32_t h;
	int i, got, bad = 0;

	REQUIRE_URING(p);
	buf = tpt_map(n * chunk);
	seen = calloc(n, 1);
	c = calloc(n + 1, sizeof(*c));
	ASSERT_TRUE(keys && buf && seen && c);
	ASSERT_EQ(0, tpt_register(p->cons, buf, n * chunk, TP_ACCESS_WRITE,
				  &h));
	ASSERT_EQ(0, tpt_ring_init(&ring, n, TPT_RING_FLAGS));
	for (i = 0; i < n; i++) {
		struct tp_recv r;

		tpt_recv_prep(&r, keys[i], strlen(keys[i]), h, i * chunk,
			      chunk, 60 * TPT_NSEC_PER_SEC);
		ASSERT_EQ(0, tpt_uring_prep(&ring, p->cons, TP_IOC_RECV, &r,
					    sizeof(r), i, 0));
	}
	ASSERT_EQ(n, tpt_uring_submit(&ring));
	EXPECT_TRUE(have_waiters(p->domain_id, n));
	EXPECT_EQ(0, tpt_uring_quiet(&ring, 0, NULL));

	ASSERT_EQ(0, tx_start(&tx, &a));
	ASSERT_EQ(0, tpt_notify(tx.go));
	got = tpt_uring_wait_n(&ring, c, n, 90000);
	EXPECT_EQ(n, got);
	EXPECT_EQ(0, tpt_uring_quiet(&ring, QUIET_MS, &c[n]));
	for (i = 0; i < got; i++) {
		uint64_t ud = c[i].user_data;

		if (ud >= (uint64_t)n || seen[ud] || c[i].res ||
		    c[i].extra1 != chunk) {
			if (bad++ < 5)
				TH_LOG("CQE ud %llu res %d len %llu%s",
				       (unsigned long long)ud, c[i].res,
				       (unsigned long long)c[i].extra1,
				       ud < (uint64_t)n && seen[ud] ?
				       " (again)" : "");
			continue;
		}
		seen[ud] = 1;
		if (!tpt_check(buf + ud * chunk, chunk, a.seed + ud) &&
		    bad++ < 5)
			TH_LOG("key %llu: wrong data", (unsigned long long)ud);
	}
	EXPECT_EQ(0, bad);
	ASSERT_EQ(0, tx_finish(&tx, &rep, 60000));
	EXPECT_EQ(0, rep.err);
	EXPECT_EQ((uint32_t)n, rep.done);
	EXPECT_EQ(0U, rep.bad);
	EXPECT_EQ(0U, rep.extra);
	EXPECT_TRUE(have_waiters(p->domain_id, 0));
	io_uring_queue_exit(&ring);
	free(keys);
	free(c);
	free(seen);
	tpt_unmap(buf, n * chunk);
}

/*
 * A consumer child with its own ring and a RECV of @key pending.  It reports
 * the CQE when it arrives; told to cancel first, it cancels by ioctl and
 * reports the count and the CQE that follows.
 */
struct urx_report {
	char how;		/* 'D': CQE came by itself; 'C': cancelled */
	int32_t aux;		/* setup failure */
	int32_t cancel_ret;
	uint32_t count;
	int32_t res;
	uint64_t len;
	uint64_t sum;
	uint32_t extra;		/* CQEs after the first */
};

struct urx_child {
	pid_t pid;
	int ctl;
	int report;
};

static void urx_main(int domain_fd, const char *key, int ctl, int wfd)
{
	struct urx_report rep = { .how = 'D' };
	struct io_uring ring;
	uint8_t *buf = tpt_map(LEN);
	struct tpt_cqe c;
	uint32_t h;
	int fd = tpt_open();

	if (!buf || fd < 0 || tpt_domain_attach(fd, domain_fd, NULL) ||
	    tpt_register(fd, buf, LEN, TP_ACCESS_WRITE, &h) ||
	    tpt_ring_init(&ring, 8, TPT_RING_FLAGS) ||
	    urecv(&ring, fd, key, h, 0, LEN, 60 * TPT_NSEC_PER_SEC, 0, 1))
		_exit(1);
	if (tpt_notify(wfd))
		_exit(1);
	for (;;) {
		if (tpt_uring_wait(&ring, &c, 20) == 0)
			break;
		if (tpt_readable_now(ctl) == 1) {
			rep.how = 'C';
			rep.cancel_ret = tpt_cancel(fd, key, TP_CANCEL_RECV,
						    &rep.count);
			if (tpt_uring_wait(&ring, &c, WAIT_MS))
				c.res = 1;
			break;
		}
	}
	rep.res = c.res;
	rep.len = c.extra1;
	if (c.res == 0 && c.extra1 <= LEN)
		rep.sum = tpt_sum(buf, c.extra1);
	rep.extra = tpt_uring_quiet(&ring, QUIET_MS, NULL) != 0;
	tpt_write_all(wfd, &rep, sizeof(rep));
	_exit(0);
}

static int urx_start(struct urx_child *u, int domain_fd, const char *key)
{
	int ctl[2], rep[2];

	if (pipe2(ctl, O_CLOEXEC))
		return -errno;
	if (pipe2(rep, O_CLOEXEC))
		return -errno;
	u->pid = tpt_fork();
	if (u->pid < 0)
		return -errno;
	if (u->pid == 0) {
		close(ctl[1]);
		close(rep[0]);
		urx_main(domain_fd, key, ctl[0], rep[1]);
	}
	close(ctl[0]);
	close(rep[1]);
	u->ctl = ctl[1];
	u->report = rep[0];
	return tpt_wait_notify(u->report, TPT_SAFETY_TIMEOUT_MS);
}

static int urx_finish(struct urx_child *u, struct urx_report *rep)
{
	int ret = tpt_read_all(u->report, rep, sizeof(*rep), WAIT_MS);

	close(u->ctl);
	close(u->report);
	if (ret) {
		kill(u->pid, SIGKILL);
		waitpid(u->pid, NULL, 0);
		return ret;
	}
	return tpt_wait_child(u->pid, WAIT_MS, NULL);
}

TEST_F(uring, two_rings_in_two_processes_recv_one_key_exactly_one_wins)
{
	struct tpt_pair *p = &self->p;
	struct urx_report win, lose;
	struct tp_completion done;
	struct urx_child u[2];
	struct pollfd pfd[2];
	int w;

	REQUIRE_URING(p);
	ASSERT_EQ(0, urx_start(&u[0], p->domain_fd, "shared"));
	ASSERT_EQ(0, urx_start(&u[1], p->domain_fd, "shared"));
	ASSERT_EQ(0, tpt_wait_waiters(p->domain_id, 2));
	ASSERT_EQ(0, tpt_send(p->prod, "shared", p->src, 0, LEN, 1));

	pfd[0] = (struct pollfd){ .fd = u[0].report, .events = POLLIN };
	pfd[1] = (struct pollfd){ .fd = u[1].report, .events = POLLIN };
	ASSERT_LT(0, poll(pfd, 2, WAIT_MS + QUIET_MS));
	w = (pfd[0].revents & POLLIN) ? 0 : 1;
	ASSERT_EQ(0, urx_finish(&u[w], &win));
	EXPECT_EQ('D', win.how);
	EXPECT_EQ(0, win.res);
	EXPECT_EQ(LEN, win.len);
	EXPECT_EQ(tpt_pattern_sum(LEN, TPT_SEED_SRC), win.sum);
	EXPECT_EQ(0U, win.extra);

	/* The other one is still waiting, until it cancels. */
	tpt_sleep_ms(QUIET_MS);
	EXPECT_EQ(0, tpt_readable_now(u[!w].report));
	EXPECT_TRUE(have_waiters(p->domain_id, 1));
	ASSERT_EQ(0, tpt_notify(u[!w].ctl));
	ASSERT_EQ(0, urx_finish(&u[!w], &lose));
	EXPECT_EQ('C', lose.how);
	EXPECT_EQ(0, lose.cancel_ret);
	EXPECT_EQ(1U, lose.count);
	EXPECT_EQ(-ECANCELED, lose.res);
	EXPECT_EQ(0U, lose.extra);

	ASSERT_EQ(1, tpt_read_completions(p->prod, &done, 1, WAIT_MS));
	EXPECT_EQ(0, done.status);
	EXPECT_EQ(0, tpt_readable_now(p->prod));
	EXPECT_TRUE(have_waiters(p->domain_id, 0));
}

TEST_F(uring, two_recvs_of_one_key_on_one_ring_take_two_sends_in_turn)
{
	struct tpt_pair *p = &self->p;
	struct tpt_cqe c;
	uint64_t first;

	REQUIRE_URING(p);
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "k", p->dst, 0, LEN,
			   TPT_SAFETY_TIMEOUT_NS, 0, 1));
	ASSERT_EQ(0, urecv(&self->ring, p->cons, "k", p->dst, 0, LEN,
			   TPT_SAFETY_TIMEOUT_NS, 0, 2));
	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, 100, 1));
	ASSERT_EQ(0, one_cqe(&self->ring, &c));
	EXPECT_EQ(0, c.res);
	EXPECT_EQ(100ULL, c.extra1);
	first = c.user_data;
	EXPECT_TRUE(have_waiters(p->domain_id, 1));
	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, 200, 2));
	ASSERT_EQ(0, one_cqe(&self->ring, &c));
	EXPECT_EQ(0, c.res);
	EXPECT_EQ(200ULL, c.extra1);
	EXPECT_EQ(3ULL, first + c.user_data);
	EXPECT_TRUE(have_waiters(p->domain_id, 0));
}

/*
 * Queue depth test: key i is RECV'd and SENT, RECV first for even keys and
 * SEND first for odd ones; the SEND's user_data is 2i, the RECV's 2i + 1.
 */
struct qd {
	struct tpt_pair *p;
	key_buf *keys;
	uint8_t *sbuf;
	uint8_t *dbuf;
	uint8_t *seen;
	uint32_t src;
	uint32_t dst;
	int n;
};

#define QD_CHUNK	(4 * TPT_KIB)

static uint64_t qd_len(int i)
{
	return QD_CHUNK - (i * 37) % 512;
}

static uint64_t qd_seed(int i)
{
	return 0x2000 + i;
}

/* Queue operation @op (0 .. 2n - 1). */
static int qd_prep(struct io_uring *ring, const struct qd *q, int op)
{
	int i = op / 2;
	bool recv = (op % 2 == 0) == (i % 2 == 0);
	const char *key = q->keys[i];

	if (recv) {
		struct tp_recv r;

		tpt_recv_prep(&r, key, strlen(key), q->dst, i * QD_CHUNK,
			      QD_CHUNK, TPT_SAFETY_TIMEOUT_NS);
		return tpt_uring_prep(ring, q->p->cons, TP_IOC_RECV, &r,
				      sizeof(r), 2 * i + 1, 0);
	} else {
		struct tp_send s;

		tpt_send_prep(&s, key, strlen(key), q->src, i * QD_CHUNK,
			      qd_len(i), 2 * i);
		return tpt_uring_prep(ring, q->p->prod, TP_IOC_SEND, &s,
				      sizeof(s), 2 * i, 0);
	}
}

/* Account one CQE; false (and a log line in @why) when it is wrong. */
static bool qd_check(struct qd *q, const struct tpt_cqe *c, char *why,
		     size_t size)
{
	int i = c->user_data / 2;

	if (c->user_data >= 2ULL * q->n || q->seen[c->user_data]) {
		snprintf(why, size, "unexpected CQE ud %llu",
			 (unsigned long long)c->user_data);
		return false;
	}
	q->seen[c->user_data] = 1;
	if (c->res || c->extra1 != qd_len(i)) {
		snprintf(why, size, "ud %llu: res %d len %llu",
			 (unsigned long long)c->user_data, c->res,
			 (unsigned long long)c->extra1);
		return false;
	}
	if ((c->user_data & 1) &&
	    !tpt_check(q->dbuf + i * QD_CHUNK, qd_len(i), qd_seed(i))) {
		snprintf(why, size, "key %d: wrong data", i);
		return false;
	}
	return true;
}

TEST_F_TIMEOUT(uring, queue_depth_16_mixed_send_recv_verifies_data, 120)
{
	const int depth = 16;
	struct qd q = { .p = &self->p, .n = 128 };
	int i, next = 0, inflight = 0, done = 0, bad = 0;
	size_t bytes = q.n * QD_CHUNK;

	REQUIRE_URING(q.p);
	q.keys = keys_make("qd", q.n);
	q.sbuf = tpt_map(bytes);
	q.dbuf = tpt_map(bytes);
	q.seen = calloc(2 * q.n, 1);
	ASSERT_TRUE(q.keys && q.sbuf && q.dbuf && q.seen);
	for (i = 0; i < q.n; i++)
		tpt_fill(q.sbuf + i * QD_CHUNK, QD_CHUNK, qd_seed(i));
	ASSERT_EQ(0, tpt_register(q.p->prod, q.sbuf, bytes, TP_ACCESS_READ,
				  &q.src));
	ASSERT_EQ(0, tpt_register(q.p->cons, q.dbuf, bytes, TP_ACCESS_WRITE,
				  &q.dst));

	while (done < 2 * q.n) {
		struct tpt_cqe c;
		char why[96];
		int queued = 0;

		for (; inflight < depth && next < 2 * q.n; next++) {
			ASSERT_EQ(0, qd_prep(&self->ring, &q, next));
			inflight++;
			queued++;
		}
		if (queued)
			ASSERT_EQ(queued, tpt_uring_submit(&self->ring));
		ASSERT_EQ(0, tpt_uring_wait(&self->ring, &c, WAIT_MS));
		inflight--;
		done++;
		if (!qd_check(&q, &c, why, sizeof(why)) && bad++ < 5)
			TH_LOG("%s", why);
	}
	EXPECT_EQ(0, bad);
	EXPECT_EQ(0, tpt_uring_quiet(&self->ring, QUIET_MS, NULL));
	EXPECT_TRUE(have_waiters(q.p->domain_id, 0));
	free(q.keys);
	free(q.seen);
	tpt_unmap(q.sbuf, bytes);
	tpt_unmap(q.dbuf, bytes);
}

TEST_F_TIMEOUT(uring, recv_timeout_racing_send_gives_exactly_one_cqe, 120)
{
	const int iters = 200;
	const uint64_t len = 4 * TPT_KIB;
	struct tpt_pair *p = &self->p;
	int delivered = 0, timed_out = 0;

	REQUIRE_URING(p);
	TPT_REQUIRE_FEATURES(p->info, TP_FEAT_RECV_TIMEOUT);
	for (int i = 0; i < iters; i++) {
		uint64_t timeout = 20000 + (i % 25) * 40000;
		struct tp_completion done;
		struct tpt_cqe c, extra;
		char key[32];

		snprintf(key, sizeof(key), "race-%d", i);
		memset(p->dbuf, 0, len);
		ASSERT_EQ(0, urecv(&self->ring, p->cons, key, p->dst, 0, len,
				   timeout, 0, i));
		ASSERT_EQ(0, tpt_send(p->prod, key, p->src, 0, len, i));
		ASSERT_EQ(0, tpt_uring_wait(&self->ring, &c, WAIT_MS));
		ASSERT_EQ((uint64_t)i, c.user_data);
		if (c.res == 0) {
			delivered++;
			EXPECT_EQ(len, c.extra1);
			EXPECT_TRUE(tpt_check(p->dbuf, len, TPT_SEED_SRC));
		} else {
			ASSERT_EQ(-ETIMEDOUT, c.res);
			timed_out++;
			/* The SEND is still there, whole. */
			ASSERT_EQ(0, tpt_recv_nonblock(p->cons, key, p->dst,
						       0, len, NULL));
		}
		ASSERT_EQ(1, tpt_read_completions(p->prod, &done, 1,
						  WAIT_MS));
		EXPECT_EQ(0, done.status);
		ASSERT_EQ(0, tpt_uring_quiet(&self->ring, 0, &extra)) {
			TH_LOG("iteration %d: second CQE ud %llu res %d", i,
			       (unsigned long long)extra.user_data,
			       extra.res);
		}
	}
	TH_LOG("%d delivered, %d timed out", delivered, timed_out);
	EXPECT_EQ(0, tpt_uring_quiet(&self->ring, QUIET_MS, NULL));
	EXPECT_TRUE(have_waiters(p->domain_id, 0));
}

struct send_later {
	int fd;
	uint32_t region;
	const char *key;
	int go;
	int ret;
};

static void spin_us(unsigned int us)
{
	uint64_t end = tpt_now_ns() + us * 1000ULL;

	while (tpt_now_ns() < end)
		;
}

/* Spin until told to go, so that the SEND and the CANCEL start together. */
static void *send_from_thread(void *arg)
{
	struct send_later *s = arg;

	while (!__atomic_load_n(&s->go, __ATOMIC_ACQUIRE))
		;
	s->ret = tpt_send(s->fd, s->key, s->region, 0, 4 * TPT_KIB, 1);
	return NULL;
}

TEST_F_TIMEOUT(uring, cancel_racing_send_gives_exactly_one_outcome, 120)
{
	const int iters = 100;
	const uint64_t len = 4 * TPT_KIB;
	struct tpt_pair *p = &self->p;
	int cancelled = 0, delivered = 0;

	REQUIRE_URING(p);
	for (int i = 0; i < iters; i++) {
		struct send_later s = { .fd = p->prod, .region = p->src };
		struct tp_completion done;
		struct tpt_cqe c, extra;
		uint32_t count = 0;
		pthread_t th;
		char key[32];
		int ret;

		snprintf(key, sizeof(key), "cr-%d", i);
		s.key = key;
		memset(p->dbuf, 0, len);
		ASSERT_EQ(0, urecv(&self->ring, p->cons, key, p->dst, 0, len,
				   TPT_SAFETY_TIMEOUT_NS, 0, i));
		ASSERT_EQ(0, pthread_create(&th, NULL, send_from_thread, &s));
		__atomic_store_n(&s.go, 1, __ATOMIC_RELEASE);
		spin_us((i % 20) * 10);
		ret = tpt_cancel(p->cons, key, TP_CANCEL_RECV, &count);
		ASSERT_EQ(0, pthread_join(th, NULL));
		ASSERT_EQ(0, s.ret);
		ASSERT_EQ(0, tpt_uring_wait(&self->ring, &c, WAIT_MS));
		ASSERT_EQ((uint64_t)i, c.user_data);
		if (ret == 0) {
			cancelled++;
			EXPECT_EQ(1U, count);
			EXPECT_EQ(-ECANCELED, c.res);
			/* Nothing taken: the SEND waits for the next RECV. */
			ASSERT_EQ(0, tpt_recv_nonblock(p->cons, key, p->dst,
						       0, len, NULL));
		} else {
			delivered++;
			EXPECT_EQ(-ENOENT, ret);
			EXPECT_EQ(0, c.res);
			EXPECT_EQ(len, c.extra1);
			EXPECT_TRUE(tpt_check(p->dbuf, len, TPT_SEED_SRC));
		}
		ASSERT_EQ(1, tpt_read_completions(p->prod, &done, 1,
						  WAIT_MS));
		EXPECT_EQ(0, done.status);
		ASSERT_EQ(0, tpt_uring_quiet(&self->ring, 0, &extra)) {
			TH_LOG("iteration %d: second CQE ud %llu res %d", i,
			       (unsigned long long)extra.user_data,
			       extra.res);
		}
	}
	TH_LOG("%d cancelled, %d delivered", cancelled, delivered);
	EXPECT_TRUE(have_waiters(p->domain_id, 0));
}

TEST_HARNESS_MAIN
