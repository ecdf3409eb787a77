// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Completions: how a producer learns its buffer is free again, through
 * read(2), poll(2) and epoll on the endpoint.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "tp_test_require.h"

#define LEN	(64 * TPT_KIB)
#define REC	sizeof(struct tp_completion)

FIXTURE(comp)
{
	struct tpt_pair p;
};

FIXTURE_SETUP(comp)
{
	ASSERT_EQ(0, tpt_pair_open(&self->p, LEN));
}

FIXTURE_TEARDOWN(comp)
{
	tpt_pair_close(&self->p);
}

/* Post @n SENDs with user_data 1..n and consume them all. */
static void transfer(struct __test_metadata *_metadata,
		     const struct tpt_pair *p, int n)
{
	char key[16];
	int i;

	for (i = 1; i <= n; i++) {
		snprintf(key, sizeof(key), "key-%d", i);
		ASSERT_EQ(0, tpt_send(p->prod, key, p->src, 0, 10 * i, i));
		ASSERT_EQ(0, tpt_recv_nonblock(p->cons, key, p->dst, 0, LEN,
					       NULL));
	}
}

TEST_F(comp, poll_reports_no_input_while_the_slot_is_pending)
{
	struct tpt_pair *p = &self->p;

	EXPECT_EQ(0, tpt_readable_now(p->prod));
	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, LEN, 1));
	EXPECT_EQ(0, tpt_readable_now(p->prod));
	/* A RECV that fails with -EMSGSIZE consumes nothing either. */
	EXPECT_EQ(-EMSGSIZE, tpt_recv_nonblock(p->cons, "k", p->dst, 0, 1,
					       NULL));
	EXPECT_EQ(0, tpt_readable_now(p->prod));
}

TEST_F(comp, poll_reports_input_once_the_slot_is_consumed)
{
	struct pollfd pfd = { .fd = self->p.prod, .events = POLLIN };

	transfer(_metadata, &self->p, 1);
	ASSERT_EQ(1, poll(&pfd, 1, 5000));
	EXPECT_TRUE(pfd.revents & POLLIN);
}

TEST_F(comp, epoll_reports_input_once_the_slot_is_consumed)
{
	struct epoll_event ev = { .events = EPOLLIN }, out;
	struct tpt_pair *p = &self->p;
	int ep = epoll_create1(EPOLL_CLOEXEC);

	ASSERT_LE(0, ep);
	ev.data.fd = p->prod;
	ASSERT_EQ(0, epoll_ctl(ep, EPOLL_CTL_ADD, p->prod, &ev));
	EXPECT_EQ(0, epoll_wait(ep, &out, 1, 0));
	transfer(_metadata, p, 1);
	ASSERT_EQ(1, epoll_wait(ep, &out, 1, 5000));
	EXPECT_TRUE(out.events & EPOLLIN);
	EXPECT_EQ(p->prod, out.data.fd);
	close(ep);
}

TEST_F(comp, poll_wakes_when_another_process_consumes)
{
	struct tpt_pair *p = &self->p;
	struct tpt_rx_args a = {
		.domain_fd = p->domain_fd, .key = "k", .key_len = 1,
		.cap = LEN, .timeout_ns = TPT_SAFETY_TIMEOUT_NS,
	};
	struct pollfd pfd = { .fd = p->prod, .events = POLLIN };
	struct tpt_rx_result res;
	struct tpt_rx rx;

	ASSERT_EQ(0, tpt_rx_start(&rx, &a));
	ASSERT_EQ(0, tpt_wait_waiters(p->domain_id, 1));
	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, LEN, 1));
	ASSERT_EQ(1, poll(&pfd, 1, TPT_SAFETY_TIMEOUT_MS));
	EXPECT_TRUE(pfd.revents & POLLIN);
	ASSERT_EQ(0, tpt_rx_finish(&rx, TPT_SAFETY_TIMEOUT_MS, &res));
	EXPECT_EQ(0, res.ret);
}

TEST_F(comp, read_returns_the_completion_record)
{
	struct tpt_pair *p = &self->p;
	struct tp_completion c;

	memset(&c, 0xa5, sizeof(c));
	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, 4321, 0x1122334455ULL));
	ASSERT_EQ(0, tpt_recv_nonblock(p->cons, "k", p->dst, 0, LEN, NULL));
	ASSERT_EQ((ssize_t)REC, read(p->prod, &c, REC));
	EXPECT_EQ(0x1122334455ULL, c.user_data);
	EXPECT_EQ(0, c.status);
	EXPECT_EQ((__u32)TP_OP_SEND, c.op);
	EXPECT_EQ(4321ULL, c.len);
	EXPECT_EQ(0ULL, c.reserved);
}

TEST_F(comp, read_returns_as_many_whole_records_as_fit)
{
	struct tpt_pair *p = &self->p;
	struct tp_completion c[3], rest[3];

	transfer(_metadata, p, 3);
	ASSERT_EQ(0, tpt_wait_readable(p->prod, 5000));
	/* Two and a half records of room: two come back, none is split. */
	ASSERT_EQ((ssize_t)(2 * REC), read(p->prod, c, 2 * REC + REC / 2));
	ASSERT_EQ((ssize_t)REC, read(p->prod, rest, sizeof(rest)));
	/* Completions queue in the order the slots were consumed. */
	EXPECT_EQ(1ULL, c[0].user_data);
	EXPECT_EQ(2ULL, c[1].user_data);
	EXPECT_EQ(3ULL, rest[0].user_data);
	EXPECT_EQ(0, tpt_readable_now(p->prod));
}

TEST_F(comp, read_with_buffer_smaller_than_a_record_fails_einval)
{
	struct tpt_pair *p = &self->p;
	struct tp_completion c;

	transfer(_metadata, p, 1);
	errno = 0;
	EXPECT_EQ(-1, read(p->prod, &c, REC - 1));
	EXPECT_EQ(EINVAL, errno);
	errno = 0;
	EXPECT_EQ(-1, read(p->prod, &c, 1));
	EXPECT_EQ(EINVAL, errno);
	/* The record was not lost. */
	EXPECT_EQ((ssize_t)REC, read(p->prod, &c, REC));
	EXPECT_EQ(1ULL, c.user_data);
}

TEST_F(comp, nonblocking_read_without_completion_fails_eagain)
{
	struct tpt_pair *p = &self->p;
	struct tp_completion c;
	int flags = fcntl(p->prod, F_GETFL);

	ASSERT_LE(0, flags);
	ASSERT_EQ(0, fcntl(p->prod, F_SETFL, flags | O_NONBLOCK));
	errno = 0;
	EXPECT_EQ(-1, read(p->prod, &c, REC));
	EXPECT_EQ(EAGAIN, errno);
	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, LEN, 1));
	errno = 0;
	EXPECT_EQ(-1, read(p->prod, &c, REC));
	EXPECT_EQ(EAGAIN, errno);
}

struct blocked_read {
	int fd;
	ssize_t ret;
	struct tp_completion c;
	atomic_bool done;
};

static void *blocked_read_main(void *arg)
{
	struct blocked_read *b = arg;

	b->ret = read(b->fd, &b->c, sizeof(b->c));
	atomic_store(&b->done, true);
	return NULL;
}

TEST_F(comp, blocking_read_waits_until_the_slot_is_consumed)
{
	struct tpt_pair *p = &self->p;
	struct blocked_read b = { .fd = p->prod };
	pthread_t t;
	int i;

	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, LEN, 9));
	ASSERT_EQ(0, pthread_create(&t, NULL, blocked_read_main, &b));
	tpt_sleep_ms(200);
	EXPECT_FALSE(atomic_load(&b.done));
	ASSERT_EQ(0, tpt_recv_nonblock(p->cons, "k", p->dst, 0, LEN, NULL));
	for (i = 0; i < 500 && !atomic_load(&b.done); i++)
		tpt_sleep_ms(10);
	ASSERT_TRUE(atomic_load(&b.done));
	pthread_join(t, NULL);
	EXPECT_EQ((ssize_t)REC, b.ret);
	EXPECT_EQ(9ULL, b.c.user_data);
	EXPECT_EQ(0, b.c.status);
}

TEST_F(comp, each_send_completes_exactly_once)
{
	struct tpt_pair *p = &self->p;
	struct tp_completion c[20];
	uint32_t seen = 0;
	int n = 0, i;

	transfer(_metadata, p, 16);
	while (n < 16) {
		int got = tpt_read_completions(p->prod, c + n, 20 - n, 5000);

		ASSERT_LT(0, got);
		n += got;
	}
	ASSERT_EQ(16, n);
	for (i = 0; i < n; i++) {
		ASSERT_LE(1ULL, c[i].user_data);
		ASSERT_GE(16ULL, c[i].user_data);
		EXPECT_FALSE(seen & (1U << c[i].user_data));
		seen |= 1U << c[i].user_data;
		EXPECT_EQ(0, c[i].status);
		EXPECT_EQ(10ULL * c[i].user_data, c[i].len);
	}
	EXPECT_EQ(0, tpt_readable_now(p->prod));
}

TEST_F(comp, consumer_endpoint_gets_no_completion)
{
	transfer(_metadata, &self->p, 1);
	EXPECT_EQ(1, tpt_readable_now(self->p.prod));
	EXPECT_EQ(0, tpt_readable_now(self->p.cons));
}

TEST_F(comp, read_from_fork_child_with_inherited_fd_fails_eperm)
{
	struct tpt_pair *p = &self->p;
	struct tp_completion c;
	int status = 0;
	pid_t pid;

	transfer(_metadata, p, 1);
	pid = tpt_fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		ssize_t n = read(p->prod, &c, REC);

		_exit(n < 0 && errno == EPERM ? 0 : 1);
	}
	ASSERT_EQ(0, tpt_wait_child(pid, 10000, &status));
	ASSERT_TRUE(WIFEXITED(status));
	EXPECT_EQ(0, WEXITSTATUS(status));
	/* The child took nothing away from the owner. */
	EXPECT_EQ((ssize_t)REC, read(p->prod, &c, REC));
}

TEST_HARNESS_MAIN
