// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Members of a domain that die (TP_DOMAIN_ATTACH_MEMBER,
 * TP_FEAT_MEMBER_DEATH): a forked child attaches its own endpoint as a
 * member through the inherited domain descriptor and dies with it open;
 * what the parent's member endpoints had pending ends at once with
 * -EOWNERDEAD.  An orderly close, the exit of a child that only inherited
 * the parent's endpoints, and the death of an endpoint attached without the
 * flag are no deaths; endpoints attached without it hear of none.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "tp_test_require.h"

#define LEN	(64 * TPT_KIB)

/* How the child leaves after attaching and, if asked, seeing a waiter. */
enum member_end { DIE_KILLED, DIE_EXIT, CLOSE_THEN_LIVE, NON_MEMBER_DIES };

FIXTURE(member)
{
	struct tpt_pair p;
	int ready[2];		/* child -> parent: attached (and done) */
	int go[2];		/* parent -> child: leave now */
};

/* The parent's pair: members, or not. */
FIXTURE_VARIANT(member)
{
	uint32_t pair_flags;
};

FIXTURE_VARIANT_ADD(member, members)
{
	.pair_flags = TP_DOMAIN_ATTACH_MEMBER,
};

FIXTURE_SETUP(member)
{
	ASSERT_EQ(0, tpt_pair_open_flags(&self->p, LEN, variant->pair_flags));
	ASSERT_EQ(0, pipe(self->ready));
	ASSERT_EQ(0, pipe(self->go));
}

FIXTURE_TEARDOWN(member)
{
	tpt_pair_close(&self->p);
	close(self->ready[0]);
	close(self->ready[1]);
	close(self->go[0]);
	close(self->go[1]);
}

/*
 * A member in a child: its own endpoint, attached; reports ready, waits
 * for the parent's word, then ends as @end says.  Never returns.
 */
static void member_child(FIXTURE_DATA(member) *self, enum member_end end)
{
	uint32_t flags = end == NON_MEMBER_DIES ? 0 : TP_DOMAIN_ATTACH_MEMBER;
	int ep = tpt_open();

	if (ep < 0 || tpt_domain_attach_flags(ep, self->p.domain_fd, flags, NULL))
		_exit(1);
	if (end == CLOSE_THEN_LIVE)
		close(ep);
	if (tpt_notify(self->ready[1]) || tpt_wait_notify(self->go[0], TPT_SAFETY_TIMEOUT_MS))
		_exit(2);
	if (end == DIE_KILLED || end == NON_MEMBER_DIES)
		raise(SIGKILL);
	if (end == CLOSE_THEN_LIVE) {
		/* Alive, detached, until the parent says so. */
		tpt_notify(self->ready[1]);
		tpt_wait_notify(self->go[0], TPT_SAFETY_TIMEOUT_MS);
	}
	_exit(0);	/* with @ep still open unless closed above */
}

static pid_t start_member(FIXTURE_DATA(member) *self, enum member_end end)
{
	pid_t pid = tpt_fork();

	if (pid == 0)
		member_child(self, end);
	return pid;
}

/* A child that tells the member to go once the parent's RECV waits. */
static pid_t release_when_waiting(FIXTURE_DATA(member) *self)
{
	pid_t pid = tpt_fork();

	if (pid == 0) {
		if (tpt_wait_waiters(self->p.domain_id, 1))
			_exit(1);
		_exit(tpt_notify(self->go[1]) ? 2 : 0);
	}
	return pid;
}

TEST_F(member, module_reports_member_death_feature)
{
	EXPECT_TRUE(self->p.info.features & TP_FEAT_MEMBER_DEATH);
}

TEST_F(member, waiting_recv_fails_eownerdead_when_a_member_is_killed)
{
	uint64_t t0, len = 0;
	pid_t pid, helper;
	int st;

	TPT_REQUIRE_FEATURES(self->p.info, TP_FEAT_MEMBER_DEATH);
	pid = start_member(self, DIE_KILLED);
	ASSERT_LT(0, pid);
	ASSERT_EQ(0, tpt_wait_notify(self->ready[0], TPT_SAFETY_TIMEOUT_MS));
	helper = release_when_waiting(self);
	ASSERT_LT(0, helper);
	t0 = tpt_now_ns();
	EXPECT_EQ(-EOWNERDEAD, tpt_recv(self->p.cons, "never-sent", self->p.dst, 0, LEN,
					TPT_SAFETY_TIMEOUT_NS, &len));
	/* Woken by the death, well before the safety timeout. */
	EXPECT_GT(TPT_SAFETY_TIMEOUT_NS / 2, tpt_now_ns() - t0);
	ASSERT_EQ(0, tpt_wait_child(pid, TPT_SAFETY_TIMEOUT_MS, &st));
	EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	ASSERT_EQ(0, tpt_wait_child(helper, TPT_SAFETY_TIMEOUT_MS, &st));
	EXPECT_EQ(0, st);
}

TEST_F(member, waiting_recv_with_no_timeout_fails_eownerdead_when_a_member_exits)
{
	uint64_t len = 0;
	pid_t pid, helper;
	int st;

	TPT_REQUIRE_FEATURES(self->p.info, TP_FEAT_MEMBER_DEATH);
	pid = start_member(self, DIE_EXIT);
	ASSERT_LT(0, pid);
	ASSERT_EQ(0, tpt_wait_notify(self->ready[0], TPT_SAFETY_TIMEOUT_MS));
	helper = release_when_waiting(self);
	ASSERT_LT(0, helper);
	/* timeout_ns 0 waits for ever: only the death can end it. */
	EXPECT_EQ(-EOWNERDEAD, tpt_recv(self->p.cons, "never-sent", self->p.dst, 0, LEN, 0, &len));
	ASSERT_EQ(0, tpt_wait_child(pid, TPT_SAFETY_TIMEOUT_MS, &st));
	EXPECT_EQ(0, st);
	ASSERT_EQ(0, tpt_wait_child(helper, TPT_SAFETY_TIMEOUT_MS, &st));
}

TEST_F(member, pending_send_completes_eownerdead_when_a_member_dies)
{
	struct tp_completion c[2];
	pid_t pid;
	int st;

	TPT_REQUIRE_FEATURES(self->p.info, TP_FEAT_MEMBER_DEATH);
	ASSERT_EQ(0, tpt_send(self->p.prod, "for-the-dead", self->p.src, 0, LEN, 77));
	pid = start_member(self, DIE_EXIT);
	ASSERT_LT(0, pid);
	ASSERT_EQ(0, tpt_wait_notify(self->ready[0], TPT_SAFETY_TIMEOUT_MS));
	EXPECT_EQ(0, tpt_readable_now(self->p.prod));
	ASSERT_EQ(0, tpt_notify(self->go[1]));
	ASSERT_EQ(0, tpt_wait_child(pid, TPT_SAFETY_TIMEOUT_MS, &st));
	ASSERT_EQ(1, tpt_read_completions(self->p.prod, c, 2, TPT_SAFETY_TIMEOUT_MS));
	EXPECT_EQ(77, c[0].user_data);
	EXPECT_EQ(-EOWNERDEAD, c[0].status);
	EXPECT_EQ(0, c[0].len);
	/* The key is free again: the same SEND is accepted. */
	EXPECT_EQ(0, tpt_send(self->p.prod, "for-the-dead", self->p.src, 0, LEN, 78));
}

TEST_F(member, operations_after_a_death_behave_as_usual)
{
	struct tp_completion c;
	uint64_t len = 0;
	pid_t pid;
	int st;

	TPT_REQUIRE_FEATURES(self->p.info, TP_FEAT_MEMBER_DEATH);
	pid = start_member(self, DIE_EXIT);
	ASSERT_LT(0, pid);
	ASSERT_EQ(0, tpt_wait_notify(self->ready[0], TPT_SAFETY_TIMEOUT_MS));
	ASSERT_EQ(0, tpt_notify(self->go[1]));
	ASSERT_EQ(0, tpt_wait_child(pid, TPT_SAFETY_TIMEOUT_MS, &st));

	ASSERT_EQ(0, tpt_send(self->p.prod, "after", self->p.src, 0, LEN, 5));
	ASSERT_EQ(0, tpt_recv(self->p.cons, "after", self->p.dst, 0, LEN,
			      TPT_SAFETY_TIMEOUT_NS, &len));
	EXPECT_EQ(LEN, len);
	EXPECT_TRUE(tpt_check(self->p.dbuf, LEN, TPT_SEED_SRC));
	ASSERT_EQ(1, tpt_read_completions(self->p.prod, &c, 1, TPT_SAFETY_TIMEOUT_MS));
	EXPECT_EQ(0, c.status);
}

/*
 * A member posts a SEND and dies before anyone took it: the module
 * remembers the key, so the first RECV of it afterwards fails with
 * -EOWNERDEAD at once (it waited), the next one waits as for any key,
 * and a live member's SEND of the key goes through.
 */
TEST_F(member, recv_of_a_dead_members_unclaimed_send_fails_eownerdead_at_once)
{
	uint64_t t0, len = 0;
	uint32_t h;
	pid_t pid;
	int st;

	TPT_REQUIRE_FEATURES(self->p.info, TP_FEAT_MEMBER_DEATH);
	pid = tpt_fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		int ep = tpt_open();

		if (ep < 0 || tpt_domain_attach_flags(ep, self->p.domain_fd,
						      TP_DOMAIN_ATTACH_MEMBER, NULL) ||
		    tpt_alloc(ep, LEN, &h, NULL) || tpt_send(ep, "orphan", h, 0, LEN, 1))
			_exit(1);
		if (tpt_notify(self->ready[1]) ||
		    tpt_wait_notify(self->go[0], TPT_SAFETY_TIMEOUT_MS))
			_exit(2);
		raise(SIGKILL);
		_exit(3);
	}
	ASSERT_EQ(0, tpt_wait_notify(self->ready[0], TPT_SAFETY_TIMEOUT_MS));
	ASSERT_EQ(0, tpt_notify(self->go[1]));
	ASSERT_EQ(0, tpt_wait_child(pid, TPT_SAFETY_TIMEOUT_MS, &st));
	ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	t0 = tpt_now_ns();
	EXPECT_EQ(-EOWNERDEAD, tpt_recv(self->p.cons, "orphan", self->p.dst, 0, LEN,
					TPT_SAFETY_TIMEOUT_NS, &len));
	EXPECT_GT(TPT_SAFETY_TIMEOUT_NS / 2, tpt_now_ns() - t0);
	/* Told once: the key is forgotten. */
	EXPECT_EQ(-ETIMEDOUT, tpt_recv(self->p.cons, "orphan", self->p.dst, 0, LEN,
				       50 * 1000 * 1000, &len));
	ASSERT_EQ(0, tpt_send(self->p.prod, "orphan", self->p.src, 0, LEN, 5));
	ASSERT_EQ(0, tpt_recv(self->p.cons, "orphan", self->p.dst, 0, LEN,
			      TPT_SAFETY_TIMEOUT_NS, &len));
	EXPECT_EQ(LEN, len);
}

TEST_F(member, a_member_that_closed_its_endpoint_first_left_in_order)
{
	uint64_t len = 0;
	pid_t pid;
	int st;

	TPT_REQUIRE_FEATURES(self->p.info, TP_FEAT_MEMBER_DEATH);
	pid = start_member(self, CLOSE_THEN_LIVE);
	ASSERT_LT(0, pid);
	ASSERT_EQ(0, tpt_wait_notify(self->ready[0], TPT_SAFETY_TIMEOUT_MS));
	ASSERT_EQ(0, tpt_send(self->p.prod, "kept", self->p.src, 0, LEN, 9));
	ASSERT_EQ(0, tpt_notify(self->go[1]));
	ASSERT_EQ(0, tpt_wait_notify(self->ready[0], TPT_SAFETY_TIMEOUT_MS));
	/* Closed, alive: a RECV runs into its own timeout. */
	EXPECT_EQ(-ETIMEDOUT, tpt_recv(self->p.cons, "nobody", self->p.dst, 0, LEN,
				       200 * TPT_NSEC_PER_MSEC, &len));
	ASSERT_EQ(0, tpt_notify(self->go[1]));
	ASSERT_EQ(0, tpt_wait_child(pid, TPT_SAFETY_TIMEOUT_MS, &st));
	EXPECT_EQ(0, st);
	/* Its exit without the endpoint ends nothing. */
	EXPECT_EQ(0, tpt_readable_now(self->p.prod));
	ASSERT_EQ(0, tpt_recv(self->p.cons, "kept", self->p.dst, 0, LEN,
			      TPT_SAFETY_TIMEOUT_NS, &len));
	EXPECT_TRUE(tpt_check(self->p.dbuf, LEN, TPT_SEED_SRC));
}

TEST_F(member, exit_of_a_child_that_inherited_the_endpoint_is_no_death)
{
	uint32_t count = 0;
	pid_t pid;
	int st;

	TPT_REQUIRE_FEATURES(self->p.info, TP_FEAT_MEMBER_DEATH);
	ASSERT_EQ(0, tpt_send(self->p.prod, "mine", self->p.src, 0, LEN, 3));
	pid = tpt_fork();
	ASSERT_LE(0, pid);
	if (pid == 0)
		_exit(0);	/* holds self->p.prod and cons, opened by the parent */
	ASSERT_EQ(0, tpt_wait_child(pid, TPT_SAFETY_TIMEOUT_MS, &st));
	EXPECT_EQ(0, tpt_readable_now(self->p.prod));
	EXPECT_EQ(0, tpt_cancel(self->p.prod, "mine", TP_CANCEL_SEND, &count));
	EXPECT_EQ(1, count);
}

TEST_F(member, debugfs_counts_what_a_death_ended)
{
	struct tp_completion c;
	int64_t before = 0, after = 0;
	pid_t pid;
	int st;

	TPT_REQUIRE_FEATURES(self->p.info, TP_FEAT_MEMBER_DEATH);
	TPT_REQUIRE_DEBUGFS();
	ASSERT_EQ(0, tpt_stat("err_member_died", &before));
	ASSERT_EQ(0, tpt_send(self->p.prod, "counted", self->p.src, 0, LEN, 1));
	pid = start_member(self, DIE_KILLED);
	ASSERT_LT(0, pid);
	ASSERT_EQ(0, tpt_wait_notify(self->ready[0], TPT_SAFETY_TIMEOUT_MS));
	ASSERT_EQ(0, tpt_notify(self->go[1]));
	ASSERT_EQ(0, tpt_wait_child(pid, TPT_SAFETY_TIMEOUT_MS, &st));
	ASSERT_EQ(1, tpt_read_completions(self->p.prod, &c, 1, TPT_SAFETY_TIMEOUT_MS));
	EXPECT_EQ(-EOWNERDEAD, c.status);
	ASSERT_EQ(0, tpt_stat("err_member_died", &after));
	EXPECT_EQ(before + 1, after);
}

TEST_F(member, death_of_an_endpoint_attached_without_the_flag_ends_nothing)
{
	uint64_t len = 0;
	pid_t pid;
	int st;

	TPT_REQUIRE_FEATURES(self->p.info, TP_FEAT_MEMBER_DEATH);
	ASSERT_EQ(0, tpt_send(self->p.prod, "kept", self->p.src, 0, LEN, 4));
	pid = start_member(self, NON_MEMBER_DIES);
	ASSERT_LT(0, pid);
	ASSERT_EQ(0, tpt_wait_notify(self->ready[0], TPT_SAFETY_TIMEOUT_MS));
	ASSERT_EQ(0, tpt_notify(self->go[1]));
	ASSERT_EQ(0, tpt_wait_child(pid, TPT_SAFETY_TIMEOUT_MS, &st));
	EXPECT_TRUE(WIFSIGNALED(st));
	EXPECT_EQ(0, tpt_readable_now(self->p.prod));
	ASSERT_EQ(0, tpt_recv(self->p.cons, "kept", self->p.dst, 0, LEN,
			      TPT_SAFETY_TIMEOUT_NS, &len));
	EXPECT_TRUE(tpt_check(self->p.dbuf, LEN, TPT_SEED_SRC));
}

TEST_F(member, unknown_attach_flag_fails_einval_and_leaves_the_endpoint_detached)
{
	int ep = tpt_open();

	ASSERT_LE(0, ep);
	EXPECT_EQ(-EINVAL, tpt_domain_attach_flags(ep, self->p.domain_fd,
						   TP_DOMAIN_ATTACH_MEMBER << 1, NULL));
	EXPECT_EQ(0, tpt_domain_attach_flags(ep, self->p.domain_fd, TP_DOMAIN_ATTACH_MEMBER, NULL));
	close(ep);
}

/* The same deaths, heard by endpoints that did not attach as members. */
FIXTURE(bystander)
{
	struct tpt_pair p;
	int ready[2];
	int go[2];
};

FIXTURE_SETUP(bystander)
{
	ASSERT_EQ(0, tpt_pair_open(&self->p, LEN));
	ASSERT_EQ(0, pipe(self->ready));
	ASSERT_EQ(0, pipe(self->go));
}

FIXTURE_TEARDOWN(bystander)
{
	tpt_pair_close(&self->p);
	close(self->ready[0]);
	close(self->ready[1]);
	close(self->go[0]);
	close(self->go[1]);
}

TEST_F(bystander, endpoints_attached_without_the_flag_hear_of_no_death)
{
	uint64_t len = 0;
	pid_t pid;
	int st;

	TPT_REQUIRE_FEATURES(self->p.info, TP_FEAT_MEMBER_DEATH);
	ASSERT_EQ(0, tpt_send(self->p.prod, "not-for-the-dead", self->p.src, 0, LEN, 6));
	pid = tpt_fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		int ep = tpt_open();

		if (ep < 0 || tpt_domain_attach_flags(ep, self->p.domain_fd,
						      TP_DOMAIN_ATTACH_MEMBER, NULL))
			_exit(1);
		raise(SIGKILL);
	}
	ASSERT_EQ(0, tpt_wait_child(pid, TPT_SAFETY_TIMEOUT_MS, &st));
	EXPECT_TRUE(WIFSIGNALED(st));
	/* A member died; these endpoints are none: the SEND stays, a RECV times out. */
	EXPECT_EQ(0, tpt_readable_now(self->p.prod));
	EXPECT_EQ(-ETIMEDOUT, tpt_recv(self->p.cons, "nobody", self->p.dst, 0, LEN,
				       200 * TPT_NSEC_PER_MSEC, &len));
	ASSERT_EQ(0, tpt_recv(self->p.cons, "not-for-the-dead", self->p.dst, 0, LEN,
			      TPT_SAFETY_TIMEOUT_NS, &len));
	EXPECT_TRUE(tpt_check(self->p.dbuf, LEN, TPT_SEED_SRC));
}

TEST_HARNESS_MAIN
