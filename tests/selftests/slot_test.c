// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Rendezvous semantics of TP_IOC_SEND and TP_IOC_RECV: both orders, exactly
 * once delivery, -EEXIST, -EMSGSIZE with retry, timeouts, NONBLOCK, cancel,
 * abort, producer close, signals, and where exactly the bytes land.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "tp_test_require.h"

#define LEN	(256 * TPT_KIB)

FIXTURE(slot)
{
	struct tpt_pair p;
};

FIXTURE_SETUP(slot)
{
	ASSERT_EQ(0, tpt_pair_open(&self->p, LEN));
}

FIXTURE_TEARDOWN(slot)
{
	tpt_pair_close(&self->p);
}

static struct tpt_rx_args rx_args(const struct tpt_pair *p, const char *key,
				  uint64_t timeout_ns)
{
	struct tpt_rx_args a = {
		.domain_fd = p->domain_fd,
		.key = key,
		.key_len = strlen(key),
		.cap = p->len,
		.timeout_ns = timeout_ns,
	};

	return a;
}

TEST_F(slot, send_before_recv_delivers_once)
{
	struct tpt_pair *p = &self->p;
	struct tp_completion c[2];
	struct tp_recv r;

	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, LEN, 7));
	tpt_recv_prep(&r, "k", 1, p->dst, 0, LEN, TPT_SAFETY_TIMEOUT_NS);
	r.user_data = 0xfeedULL;
	ASSERT_EQ(0, tpt_ioctl(p->cons, TP_IOC_RECV, &r));
	EXPECT_EQ(LEN, r.len);
	EXPECT_EQ(0xfeedULL, r.user_data);
	EXPECT_TRUE(tpt_check(p->dbuf, LEN, TPT_SEED_SRC));

	ASSERT_EQ(1, tpt_read_completions(p->prod, c, 2, 5000));
	EXPECT_EQ(7ULL, c[0].user_data);
	EXPECT_EQ(0, c[0].status);
	EXPECT_EQ((__u32)TP_OP_SEND, c[0].op);
	EXPECT_EQ(LEN, c[0].len);
	EXPECT_EQ(0ULL, c[0].reserved);

	EXPECT_EQ(-EAGAIN, tpt_recv_nonblock(p->cons, "k", p->dst, 0, LEN,
					     NULL));
	EXPECT_EQ(0, tpt_readable_now(p->prod));
}

TEST_F(slot, recv_before_send_delivers_once)
{
	struct tpt_pair *p = &self->p;
	struct tpt_rx_args a = rx_args(p, "k", TPT_SAFETY_TIMEOUT_NS);
	struct tpt_rx_result res;
	struct tp_completion c;
	struct tpt_rx rx;

	ASSERT_EQ(0, tpt_rx_start(&rx, &a));
	ASSERT_EQ(0, tpt_wait_waiters(p->domain_id, 1));
	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, LEN, 8));
	ASSERT_EQ(0, tpt_rx_finish(&rx, TPT_SAFETY_TIMEOUT_MS, &res));
	EXPECT_EQ(0, res.ret);
	EXPECT_EQ(LEN, res.len);
	EXPECT_EQ(tpt_pattern_sum(LEN, TPT_SEED_SRC), res.sum);
	ASSERT_EQ(1, tpt_read_completions(p->prod, &c, 1, 5000));
	EXPECT_EQ(8ULL, c.user_data);
	EXPECT_EQ(0, c.status);
	EXPECT_EQ(-EAGAIN, tpt_recv_nonblock(p->cons, "k", p->dst, 0, LEN,
					     NULL));
}

TEST_F(slot, two_waiting_consumers_of_a_key_get_it_exactly_once)
{
	struct tpt_pair *p = &self->p;
	struct tpt_rx_args a = rx_args(p, "k", 2 * TPT_NSEC_PER_SEC);
	struct tpt_rx_result r1, r2;
	struct tp_completion c;
	struct tpt_rx x1, x2;
	int winners;

	TPT_REQUIRE_FEATURES(p->info, TP_FEAT_RECV_TIMEOUT);
	ASSERT_EQ(0, tpt_rx_start(&x1, &a));
	ASSERT_EQ(0, tpt_rx_start(&x2, &a));
	ASSERT_EQ(0, tpt_wait_waiters(p->domain_id, 2));
	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, LEN, 1));
	ASSERT_EQ(0, tpt_rx_finish(&x1, TPT_SAFETY_TIMEOUT_MS, &r1));
	ASSERT_EQ(0, tpt_rx_finish(&x2, TPT_SAFETY_TIMEOUT_MS, &r2));
	winners = (r1.ret == 0) + (r2.ret == 0);
	EXPECT_EQ(1, winners);
	EXPECT_EQ(-ETIMEDOUT, r1.ret == 0 ? r2.ret : r1.ret);
	EXPECT_EQ(tpt_pattern_sum(LEN, TPT_SEED_SRC),
		  r1.ret == 0 ? r1.sum : r2.sum);
	ASSERT_EQ(1, tpt_read_completions(p->prod, &c, 1, 5000));
	EXPECT_EQ(0, tpt_readable_now(p->prod));
}

TEST_F(slot, endpoint_receives_its_own_send)
{
	struct tpt_pair *p = &self->p;
	uint8_t *buf = tpt_map(LEN);
	uint64_t len = 0;
	uint32_t h;

	ASSERT_NE(NULL, buf);
	ASSERT_EQ(0, tpt_register(p->prod, buf, LEN, TP_ACCESS_WRITE, &h));
	ASSERT_EQ(0, tpt_send(p->prod, "self", p->src, 0, LEN, 1));
	ASSERT_EQ(0, tpt_recv_nonblock(p->prod, "self", h, 0, LEN, &len));
	EXPECT_TRUE(tpt_check(buf, LEN, TPT_SEED_SRC));
}

TEST_F(slot, delivered_key_can_be_sent_again)
{
	struct tpt_pair *p = &self->p;
	struct tp_completion c[2];
	uint64_t len = 0;

	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, 100, 1));
	ASSERT_EQ(0, tpt_recv_nonblock(p->cons, "k", p->dst, 0, LEN, &len));
	EXPECT_EQ(100ULL, len);
	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, 200, 2));
	ASSERT_EQ(0, tpt_recv_nonblock(p->cons, "k", p->dst, 0, LEN, &len));
	EXPECT_EQ(200ULL, len);
	ASSERT_EQ(2, tpt_read_completions(p->prod, c, 2, 5000));
}

TEST_F(slot, second_pending_send_of_a_key_fails_eexist)
{
	struct tpt_pair *p = &self->p;
	struct tp_completion c[2];
	uint64_t len = 0;

	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, 100, 1));
	EXPECT_EQ(-EEXIST, tpt_send(p->prod, "k", p->src, 0, 200, 2));
	/* The first SEND is untouched and is the one delivered. */
	ASSERT_EQ(0, tpt_recv_nonblock(p->cons, "k", p->dst, 0, LEN, &len));
	EXPECT_EQ(100ULL, len);
	ASSERT_EQ(1, tpt_read_completions(p->prod, c, 2, 5000));
	EXPECT_EQ(1ULL, c[0].user_data);
	EXPECT_EQ(0, tpt_readable_now(p->prod));
}

TEST_F(slot, send_of_a_key_pending_from_another_endpoint_fails_eexist)
{
	struct tpt_pair *p = &self->p;
	uint32_t h;
	int other;

	other = tpt_open();
	ASSERT_LE(0, other);
	ASSERT_EQ(0, tpt_domain_attach(other, p->domain_fd, NULL));
	ASSERT_EQ(0, tpt_register(other, p->sbuf, LEN, TP_ACCESS_READ, &h));
	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, 100, 1));
	EXPECT_EQ(-EEXIST, tpt_send(other, "k", h, 0, 100, 2));
	close(other);
}

TEST_F(slot, recv_into_small_buffer_fails_emsgsize_and_retry_delivers)
{
	struct tpt_pair *p = &self->p;
	struct tp_completion c;
	struct tp_recv r;

	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, LEN, 3));
	tpt_recv_prep(&r, "k", 1, p->dst, 0, LEN / 2, TPT_SAFETY_TIMEOUT_NS);
	EXPECT_EQ(-EMSGSIZE, tpt_ioctl(p->cons, TP_IOC_RECV, &r));
	EXPECT_EQ(LEN, r.len);
	/* Nothing was delivered: no bytes, no completion. */
	EXPECT_TRUE(tpt_all_bytes(p->dbuf, LEN, 0));
	EXPECT_EQ(0, tpt_readable_now(p->prod));

	tpt_recv_prep(&r, "k", 1, p->dst, 0, r.len, TPT_SAFETY_TIMEOUT_NS);
	ASSERT_EQ(0, tpt_ioctl(p->cons, TP_IOC_RECV, &r));
	EXPECT_EQ(LEN, r.len);
	EXPECT_TRUE(tpt_check(p->dbuf, LEN, TPT_SEED_SRC));
	ASSERT_EQ(1, tpt_read_completions(p->prod, &c, 1, 5000));
	EXPECT_EQ(3ULL, c.user_data);
	EXPECT_EQ(0, c.status);
	EXPECT_EQ(LEN, c.len);
}

TEST_F(slot, recv_with_timeout_fails_etimedout_after_the_timeout)
{
	const uint64_t timeout = 200 * TPT_NSEC_PER_MSEC;
	struct tpt_pair *p = &self->p;
	uint64_t start, elapsed;

	TPT_REQUIRE_FEATURES(p->info, TP_FEAT_RECV_TIMEOUT);
	start = tpt_now_ns();
	EXPECT_EQ(-ETIMEDOUT, tpt_recv(p->cons, "absent", p->dst, 0, LEN,
				       timeout, NULL));
	elapsed = tpt_now_ns() - start;
	EXPECT_LE(timeout, elapsed);
	EXPECT_GT(timeout + 5 * TPT_NSEC_PER_SEC, elapsed);
}

TEST_F(slot, recv_nonblock_without_send_fails_eagain_at_once)
{
	struct tpt_pair *p = &self->p;
	uint64_t start = tpt_now_ns();
	struct tp_recv r;

	tpt_recv_prep(&r, "absent", 6, p->dst, 0, LEN, 0);
	r.flags = TP_RECV_NONBLOCK;
	EXPECT_EQ(-EAGAIN, tpt_ioctl(p->cons, TP_IOC_RECV, &r));
	EXPECT_GT(TPT_NSEC_PER_SEC, tpt_now_ns() - start);
	/* Not even a waiter was left behind. */
	ASSERT_EQ(0, tpt_send(p->prod, "absent", p->src, 0, LEN, 1));
	EXPECT_EQ(0, tpt_recv_nonblock(p->cons, "absent", p->dst, 0, LEN,
				       NULL));
}

TEST_F(slot, cancel_send_withdraws_slot_and_completes_ecanceled)
{
	struct tpt_pair *p = &self->p;
	struct tp_completion c;
	uint32_t count = 0;

	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, LEN, 5));
	ASSERT_EQ(0, tpt_cancel(p->prod, "k", TP_CANCEL_SEND, &count));
	EXPECT_EQ(1U, count);
	ASSERT_EQ(1, tpt_read_completions(p->prod, &c, 1, 5000));
	EXPECT_EQ(5ULL, c.user_data);
	EXPECT_EQ(-ECANCELED, c.status);
	EXPECT_EQ(0ULL, c.len);
	EXPECT_EQ(-EAGAIN, tpt_recv_nonblock(p->cons, "k", p->dst, 0, LEN,
					     NULL));
	EXPECT_EQ(-ENOENT, tpt_cancel(p->prod, "k", TP_CANCEL_SEND, NULL));
	/* The key is free for a new SEND. */
	EXPECT_EQ(0, tpt_send(p->prod, "k", p->src, 0, LEN, 6));
}

TEST_F(slot, cancel_with_both_flags_cancels_the_pending_send)
{
	struct tpt_pair *p = &self->p;
	uint32_t count = 0;

	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, LEN, 5));
	ASSERT_EQ(0, tpt_cancel(p->prod, "k", TP_CANCEL_SEND | TP_CANCEL_RECV,
				&count));
	EXPECT_EQ(1U, count);
	EXPECT_EQ(-EAGAIN, tpt_recv_nonblock(p->cons, "k", p->dst, 0, LEN,
					     NULL));
}

TEST_F(slot, cancel_send_of_another_endpoint_fails_enoent)
{
	struct tpt_pair *p = &self->p;

	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, LEN, 5));
	EXPECT_EQ(-ENOENT, tpt_cancel(p->cons, "k", TP_CANCEL_SEND, NULL));
	EXPECT_EQ(0, tpt_recv_nonblock(p->cons, "k", p->dst, 0, LEN, NULL));
}

TEST_F(slot, cancel_of_a_delivered_send_fails_enoent)
{
	struct tpt_pair *p = &self->p;

	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, LEN, 5));
	ASSERT_EQ(0, tpt_recv_nonblock(p->cons, "k", p->dst, 0, LEN, NULL));
	EXPECT_EQ(-ENOENT, tpt_cancel(p->prod, "k", TP_CANCEL_SEND, NULL));
}

/*
 * CANCEL_RECV acts on this endpoint's own waiting RECVs, so the waiter is a
 * thread of this process.  Until the thread is waiting, CANCEL finds nothing
 * (-ENOENT), hence the retry loop.
 */
static int cancel_recv_until(int fd, const char *key, uint32_t want)
{
	uint64_t deadline = tpt_now_ns() + TPT_SAFETY_TIMEOUT_NS;
	uint32_t total = 0, count;
	int ret;

	while (total < want) {
		count = 0;
		ret = tpt_cancel(fd, key, TP_CANCEL_RECV, &count);
		if (ret && ret != -ENOENT)
			return ret;
		total += ret ? 0 : count;
		if (total >= want)
			break;
		if (tpt_now_ns() > deadline)
			return -ETIMEDOUT;
		tpt_sleep_ms(20);
	}
	return total == want ? 0 : -E2BIG;
}

TEST_F(slot, cancel_recv_wakes_waiting_recv_with_ecanceled)
{
	struct tpt_pair *p = &self->p;
	struct tpt_thread_recv t;
	uint64_t len = 0;

	ASSERT_EQ(0, tpt_thread_recv_start(&t, p->cons, "k", p->dst, LEN,
					   TPT_SAFETY_TIMEOUT_NS));
	EXPECT_EQ(0, cancel_recv_until(p->cons, "k", 1));
	ASSERT_EQ(0, tpt_thread_recv_join(&t, TPT_SAFETY_TIMEOUT_MS));
	EXPECT_EQ(-ECANCELED, t.ret);
	/* Cancelling a RECV leaves the key usable. */
	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, LEN, 1));
	EXPECT_EQ(0, tpt_recv_nonblock(p->cons, "k", p->dst, 0, LEN, &len));
}

TEST_F(slot, cancel_recv_wakes_every_waiting_recv_of_the_endpoint)
{
	struct tpt_pair *p = &self->p;
	struct tpt_thread_recv t1, t2;

	ASSERT_EQ(0, tpt_thread_recv_start(&t1, p->cons, "k", p->dst, LEN,
					   TPT_SAFETY_TIMEOUT_NS));
	ASSERT_EQ(0, tpt_thread_recv_start(&t2, p->cons, "k", p->dst, LEN,
					   TPT_SAFETY_TIMEOUT_NS));
	if (tpt_have_debugfs()) {
		ASSERT_EQ(0, tpt_wait_waiters(p->domain_id, 2));
	}
	EXPECT_EQ(0, cancel_recv_until(p->cons, "k", 2));
	ASSERT_EQ(0, tpt_thread_recv_join(&t1, TPT_SAFETY_TIMEOUT_MS));
	ASSERT_EQ(0, tpt_thread_recv_join(&t2, TPT_SAFETY_TIMEOUT_MS));
	EXPECT_EQ(-ECANCELED, t1.ret);
	EXPECT_EQ(-ECANCELED, t2.ret);
}

TEST_F(slot, cancel_recv_leaves_other_endpoints_waiters_waiting)
{
	struct tpt_pair *p = &self->p;
	struct tpt_rx_args a = rx_args(p, "k", TPT_SAFETY_TIMEOUT_NS);
	struct tpt_rx_result res;
	struct tpt_rx rx;

	ASSERT_EQ(0, tpt_rx_start(&rx, &a));
	ASSERT_EQ(0, tpt_wait_waiters(p->domain_id, 1));
	EXPECT_EQ(-ENOENT, tpt_cancel(p->cons, "k", TP_CANCEL_RECV, NULL));
	EXPECT_EQ(0, tpt_rx_ready(&rx));
	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, LEN, 1));
	ASSERT_EQ(0, tpt_rx_finish(&rx, TPT_SAFETY_TIMEOUT_MS, &res));
	EXPECT_EQ(0, res.ret);
	EXPECT_EQ(tpt_pattern_sum(LEN, TPT_SEED_SRC), res.sum);
}

TEST_F(slot, abort_completes_pending_sends_with_its_status)
{
	struct tpt_pair *p = &self->p;
	struct tp_completion c[3];
	int n, i, seen = 0;

	ASSERT_EQ(0, tpt_send(p->prod, "one", p->src, 0, LEN, 1));
	ASSERT_EQ(0, tpt_send(p->prod, "two", p->src, 0, LEN, 2));
	ASSERT_EQ(0, tpt_abort(p->cons, -ECONNRESET));
	for (n = 0; n < 2;) {
		int got = tpt_read_completions(p->prod, c + n, 3 - n, 5000);

		ASSERT_LT(0, got);
		n += got;
	}
	ASSERT_EQ(2, n);
	for (i = 0; i < n; i++) {
		EXPECT_EQ(-ECONNRESET, c[i].status);
		EXPECT_EQ(0ULL, c[i].len);
		if (c[i].user_data < 8)
			seen |= 1 << c[i].user_data;
	}
	EXPECT_EQ(6, seen);
}

TEST_F(slot, abort_wakes_waiting_recv_with_its_status)
{
	struct tpt_pair *p = &self->p;
	struct tpt_rx_args a = rx_args(p, "k", TPT_SAFETY_TIMEOUT_NS);
	struct tpt_rx_result res;
	struct tpt_rx rx;

	ASSERT_EQ(0, tpt_rx_start(&rx, &a));
	ASSERT_EQ(0, tpt_wait_waiters(p->domain_id, 1));
	ASSERT_EQ(0, tpt_abort(p->prod, -ECONNRESET));
	ASSERT_EQ(0, tpt_rx_finish(&rx, TPT_SAFETY_TIMEOUT_MS, &res));
	EXPECT_EQ(-ECONNRESET, res.ret);
}

TEST_F(slot, abort_fails_later_send_and_recv_with_its_status)
{
	struct tpt_pair *p = &self->p;
	uint64_t start;
	uint32_t h;

	/* Every endpoint of the domain sees the abort, not just its caller. */
	ASSERT_EQ(0, tpt_register(p->cons, p->sbuf, LEN, TP_ACCESS_READ, &h));
	ASSERT_EQ(0, tpt_abort(p->prod, -ECONNRESET));
	EXPECT_EQ(-ECONNRESET, tpt_send(p->prod, "k", p->src, 0, LEN, 1));
	EXPECT_EQ(-ECONNRESET, tpt_send(p->cons, "k", h, 0, LEN, 1));
	EXPECT_EQ(-ECONNRESET, tpt_recv_nonblock(p->cons, "k", p->dst, 0, LEN,
						 NULL));
	/* A blocking RECV does not wait at all. */
	start = tpt_now_ns();
	EXPECT_EQ(-ECONNRESET, tpt_recv(p->cons, "k", p->dst, 0, LEN,
					TPT_SAFETY_TIMEOUT_NS, NULL));
	EXPECT_GT(2 * TPT_NSEC_PER_SEC, tpt_now_ns() - start);
}

TEST_F(slot, second_abort_fails_ealready_and_keeps_first_status)
{
	struct tpt_pair *p = &self->p;
	int64_t v;

	ASSERT_EQ(0, tpt_abort(p->prod, -ECONNRESET));
	EXPECT_EQ(-EALREADY, tpt_abort(p->prod, -EPIPE));
	EXPECT_EQ(-EALREADY, tpt_abort(p->cons, -EPIPE));
	EXPECT_EQ(-ECONNRESET, tpt_send(p->prod, "k", p->src, 0, LEN, 1));
	if (tpt_have_debugfs()) {
		ASSERT_EQ(0, tpt_domain_stat(p->domain_id, "abort_status", &v));
		EXPECT_EQ(-ECONNRESET, v);
	}
}

TEST_F(slot, closing_producer_withdraws_its_pending_send)
{
	struct tpt_pair *p = &self->p;
	int64_t v;

	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, LEN, 1));
	ASSERT_EQ(0, close(p->prod));
	p->prod = -1;
	EXPECT_EQ(-EAGAIN, tpt_recv_nonblock(p->cons, "k", p->dst, 0, LEN,
					     NULL));
	if (p->info.features & TP_FEAT_RECV_TIMEOUT) {
		EXPECT_EQ(-ETIMEDOUT, tpt_recv(p->cons, "k", p->dst, 0, LEN,
					       300 * TPT_NSEC_PER_MSEC, NULL));
	}
	if (tpt_have_debugfs()) {
		ASSERT_EQ(0, tpt_domain_stat(p->domain_id, "pending_slots", &v));
		EXPECT_EQ(0, v);
	}
}

/* The consumer never reads freed memory: it waits for the next producer. */
TEST_F(slot, recv_keeps_waiting_after_producer_of_its_key_closes)
{
	struct tpt_pair *p = &self->p;
	struct tpt_rx_args a = rx_args(p, "k", TPT_SAFETY_TIMEOUT_NS);
	uint8_t *buf = tpt_map(LEN);
	struct tpt_rx_result res;
	struct tpt_rx rx;
	uint32_t h;
	int prod2;

	ASSERT_NE(NULL, buf);
	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, LEN, 1));
	ASSERT_EQ(0, close(p->prod));
	p->prod = -1;
	ASSERT_EQ(0, tpt_rx_start(&rx, &a));
	ASSERT_EQ(0, tpt_wait_waiters(p->domain_id, 1));
	tpt_sleep_ms(200);
	EXPECT_EQ(0, tpt_rx_ready(&rx));

	prod2 = tpt_open();
	ASSERT_LE(0, prod2);
	ASSERT_EQ(0, tpt_domain_attach(prod2, p->domain_fd, NULL));
	tpt_fill(buf, LEN, 8);
	ASSERT_EQ(0, tpt_register(prod2, buf, LEN, TP_ACCESS_READ, &h));
	ASSERT_EQ(0, tpt_send(prod2, "k", h, 0, LEN, 2));
	ASSERT_EQ(0, tpt_rx_finish(&rx, TPT_SAFETY_TIMEOUT_MS, &res));
	EXPECT_EQ(0, res.ret);
	EXPECT_EQ(tpt_pattern_sum(LEN, 8), res.sum);
	close(prod2);
}

/* Keep signalling: one landing before the RECV sleeps wakes nothing. */
static int interrupt_until_done(struct tpt_rx *rx)
{
	uint64_t deadline = tpt_now_ns() + 5 * TPT_NSEC_PER_SEC;

	while (tpt_rx_ready(rx) == 0 && tpt_now_ns() < deadline) {
		if (kill(rx->pid, SIGUSR1))
			return -errno;
		tpt_sleep_ms(100);
	}
	return 0;
}

static void check_eintr(struct __test_metadata *_metadata,
			struct tpt_pair *p, bool sa_restart)
{
	struct tpt_rx_args a = rx_args(p, "k", TPT_SAFETY_TIMEOUT_NS);
	struct tpt_rx_result res;
	struct tpt_rx rx;

	a.interruptible = true;
	a.sa_restart = sa_restart;
	ASSERT_EQ(0, tpt_rx_start(&rx, &a));
	ASSERT_EQ(0, tpt_wait_waiters(p->domain_id, 1));
	ASSERT_EQ(0, interrupt_until_done(&rx));
	ASSERT_EQ(0, tpt_rx_finish(&rx, TPT_SAFETY_TIMEOUT_MS, &res));
	EXPECT_EQ(-EINTR, res.ret);
	if (tpt_have_debugfs()) {
		EXPECT_EQ(0, tpt_wait_domain_stat(p->domain_id, "waiters", 0,
						  5000));
	}
	/* Nothing was taken and the key works. */
	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, LEN, 1));
	EXPECT_EQ(0, tpt_recv_nonblock(p->cons, "k", p->dst, 0, LEN, NULL));
}

TEST_F(slot, signal_interrupts_waiting_recv_with_eintr)
{
	check_eintr(_metadata, &self->p, false);
}

/* A restarted RECV would start its timeout over: it fails instead. */
TEST_F(slot, signal_interrupts_waiting_recv_with_eintr_despite_sa_restart)
{
	check_eintr(_metadata, &self->p, true);
}

TEST_F(slot, zero_length_tensor_is_delivered)
{
	struct tpt_pair *p = &self->p;
	struct tp_completion c;
	uint64_t len = 99;

	ASSERT_EQ(0, tpt_send(p->prod, "empty", p->src, 0, 0, 4));
	ASSERT_EQ(0, tpt_recv_nonblock(p->cons, "empty", p->dst, 0, LEN, &len));
	EXPECT_EQ(0ULL, len);
	EXPECT_TRUE(tpt_all_bytes(p->dbuf, LEN, 0));
	ASSERT_EQ(1, tpt_read_completions(p->prod, &c, 1, 5000));
	EXPECT_EQ(0, c.status);
	EXPECT_EQ(0ULL, c.len);
}

TEST_F(slot, recv_writes_only_the_tensor_bytes_at_its_offset)
{
	struct tpt_pair *p = &self->p;
	const uint64_t soff = 4096 + 5, doff = 777, n = 10000;
	uint64_t len = 0;

	memset(p->dbuf, 0xee, LEN);
	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, soff, n, 1));
	ASSERT_EQ(0, tpt_recv_nonblock(p->cons, "k", p->dst, doff, 2 * n,
				       &len));
	EXPECT_EQ(n, len);
	EXPECT_EQ(0, memcmp(p->dbuf + doff, p->sbuf + soff, n));
	EXPECT_TRUE(tpt_all_bytes(p->dbuf, doff, 0xee));
	EXPECT_TRUE(tpt_all_bytes(p->dbuf + doff + n, LEN - doff - n, 0xee));
}

TEST_F(slot, unaligned_regions_copy_exact_bytes)
{
	struct tpt_pair *p = &self->p;
	const uint64_t n = LEN - 4099;
	uint8_t *dst = tpt_map(LEN);
	uint64_t len = 0;
	uint32_t hs, hd;

	ASSERT_NE(NULL, dst);
	ASSERT_EQ(0, tpt_register(p->prod, p->sbuf + 3, LEN - 3,
				  TP_ACCESS_READ, &hs));
	ASSERT_EQ(0, tpt_register(p->cons, dst + 4091, LEN - 4091,
				  TP_ACCESS_WRITE, &hd));
	ASSERT_EQ(0, tpt_send(p->prod, "odd", hs, 1, n, 1));
	ASSERT_EQ(0, tpt_recv_nonblock(p->cons, "odd", hd, 2, n, &len));
	EXPECT_EQ(n, len);
	EXPECT_EQ(0, memcmp(dst + 4091 + 2, p->sbuf + 3 + 1, n));
	EXPECT_TRUE(tpt_all_bytes(dst, 4091 + 2, 0));
	EXPECT_TRUE(tpt_all_bytes(dst + 4091 + 2 + n, LEN - 4091 - 2 - n, 0));
}

TEST_F(slot, released_source_region_still_feeds_pending_send)
{
	struct tpt_pair *p = &self->p;
	struct tp_completion c;
	uint64_t len = 0;

	ASSERT_EQ(0, tpt_send(p->prod, "k", p->src, 0, LEN, 1));
	ASSERT_EQ(0, tpt_release(p->prod, p->src));
	ASSERT_EQ(0, tpt_recv_nonblock(p->cons, "k", p->dst, 0, LEN, &len));
	EXPECT_EQ(LEN, len);
	EXPECT_TRUE(tpt_check(p->dbuf, LEN, TPT_SEED_SRC));
	ASSERT_EQ(1, tpt_read_completions(p->prod, &c, 1, 5000));
	EXPECT_EQ(0, c.status);
}

static int send_bytes(int fd, const void *key, uint32_t key_len,
		      uint32_t region, uint64_t len, uint64_t user_data)
{
	struct tp_send s;

	tpt_send_prep(&s, key, key_len, region, 0, len, user_data);
	return tpt_ioctl(fd, TP_IOC_SEND, &s);
}

static int recv_bytes(int fd, const void *key, uint32_t key_len,
		      uint32_t region, uint64_t cap, uint64_t *len)
{
	struct tp_recv r;
	int ret;

	tpt_recv_prep(&r, key, key_len, region, 0, cap, 0);
	r.flags = TP_RECV_NONBLOCK;
	ret = tpt_ioctl(fd, TP_IOC_RECV, &r);
	*len = r.len;
	return ret;
}

TEST_F(slot, keys_are_compared_as_whole_byte_strings)
{
	struct tpt_pair *p = &self->p;
	static const char nul_b[3] = { 'a', 0, 'b' };
	static const char nul_c[3] = { 'a', 0, 'c' };
	static const char nul[2] = { 'a', 0 };
	uint64_t len = 0;

	ASSERT_EQ(0, send_bytes(p->prod, nul_b, 3, p->src, 30, 1));
	ASSERT_EQ(0, send_bytes(p->prod, "a", 1, p->src, 10, 2));
	EXPECT_EQ(-EAGAIN, recv_bytes(p->cons, nul, 2, p->dst, LEN, &len));
	EXPECT_EQ(-EAGAIN, recv_bytes(p->cons, nul_c, 3, p->dst, LEN, &len));
	EXPECT_EQ(-EAGAIN, recv_bytes(p->cons, "A", 1, p->dst, LEN, &len));
	ASSERT_EQ(0, recv_bytes(p->cons, nul_b, 3, p->dst, LEN, &len));
	EXPECT_EQ(30ULL, len);
	ASSERT_EQ(0, recv_bytes(p->cons, "a", 1, p->dst, LEN, &len));
	EXPECT_EQ(10ULL, len);
}

TEST_F(slot, key_of_max_key_len_is_delivered)
{
	struct tpt_pair *p = &self->p;
	uint32_t klen = p->info.max_key_len, i;
	uint8_t key[TP_KEY_MAX_ABI], near[TP_KEY_MAX_ABI];
	uint64_t len = 0;

	ASSERT_GE((uint32_t)TP_KEY_MAX_ABI, klen);
	for (i = 0; i < klen; i++)
		key[i] = (uint8_t)(i * 7);
	memcpy(near, key, klen);
	near[klen - 1] ^= 1;
	ASSERT_EQ(0, send_bytes(p->prod, key, klen, p->src, 1234, 1));
	EXPECT_EQ(-EAGAIN, recv_bytes(p->cons, near, klen, p->dst, LEN, &len));
	EXPECT_EQ(-EAGAIN, recv_bytes(p->cons, key, klen - 1, p->dst, LEN,
				      &len));
	ASSERT_EQ(0, recv_bytes(p->cons, key, klen, p->dst, LEN, &len));
	EXPECT_EQ(1234ULL, len);
}

TEST_HARNESS_MAIN
