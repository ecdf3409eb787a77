// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Domains: TP_IOC_DOMAIN_CREATE and TP_IOC_DOMAIN_ATTACH, the descriptor as
 * the capability (passed over a Unix socket or inherited), attach errors,
 * isolation between domains, lifetime and the per-domain debugfs file.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "tp_test_require.h"

#define LEN	(64 * TPT_KIB)

FIXTURE(domain)
{
	int fd;
	struct tp_info info;
};

FIXTURE_SETUP(domain)
{
	tpt_raise_memlock();
	self->fd = tpt_open();
	ASSERT_LE(0, self->fd);
	ASSERT_EQ(0, tpt_get_info(self->fd, &self->info));
}

FIXTURE_TEARDOWN(domain)
{
	close(self->fd);
}

TEST_F(domain, create_returns_cloexec_descriptor_and_leaves_caller_detached)
{
	struct tp_domain_create c = { .fd = -1 };
	int flags;

	ASSERT_EQ(0, tpt_ioctl(self->fd, TP_IOC_DOMAIN_CREATE, &c));
	ASSERT_LE(0, c.fd);
	flags = fcntl(c.fd, F_GETFD);
	ASSERT_LE(0, flags);
	EXPECT_TRUE(flags & FD_CLOEXEC);
	/* Creating is not joining. */
	EXPECT_EQ(-ENOLINK, tpt_abort(self->fd, -EIO));
	close(c.fd);
}

TEST_F(domain, create_gives_each_domain_its_own_id)
{
	uint64_t a, b;
	int da, db;

	ASSERT_EQ(0, tpt_domain_create(self->fd, &da, &a));
	ASSERT_EQ(0, tpt_domain_create(self->fd, &db, &b));
	EXPECT_NE(a, b);
	EXPECT_NE(da, db);
	close(da);
	close(db);
}

TEST_F(domain, attach_reports_the_created_domain_id)
{
	uint64_t created, attached = 0;
	int dfd;

	ASSERT_EQ(0, tpt_domain_create(self->fd, &dfd, &created));
	ASSERT_EQ(0, tpt_domain_attach(self->fd, dfd, &attached));
	EXPECT_EQ(created, attached);
	close(dfd);
}

TEST_F(domain, create_with_nonzero_flags_fails_einval)
{
	struct tp_domain_create c = { .flags = 1, .fd = -1 };

	EXPECT_EQ(-EINVAL, tpt_ioctl(self->fd, TP_IOC_DOMAIN_CREATE, &c));
	c.flags = 1U << 31;
	EXPECT_EQ(-EINVAL, tpt_ioctl(self->fd, TP_IOC_DOMAIN_CREATE, &c));
}

TEST_F(domain, create_without_free_descriptor_fails_emfile)
{
	struct rlimit rl = { .rlim_cur = 64, .rlim_max = 64 };
	struct rlimit old;
	int dfd, last = -1;

	ASSERT_EQ(0, getrlimit(RLIMIT_NOFILE, &old));
	if (old.rlim_max < 64)
		SKIP(return, "RLIMIT_NOFILE hard limit below 64");
	rl.rlim_max = old.rlim_max;
	ASSERT_EQ(0, setrlimit(RLIMIT_NOFILE, &rl));
	for (;;) {
		int fd = dup(self->fd);

		if (fd < 0) {
			ASSERT_EQ(EMFILE, errno);
			break;
		}
		last = fd;
	}
	ASSERT_LE(0, last);
	EXPECT_EQ(-EMFILE, tpt_domain_create(self->fd, &dfd, NULL));
	close(last);
	EXPECT_EQ(0, tpt_domain_create(self->fd, &dfd, NULL));
}

TEST_F(domain, attach_with_unknown_flags_fails_einval)
{
	struct tp_domain_attach a = { .flags = ~TP_DOMAIN_ATTACH_FLAGS_ALL };
	int dfd;

	ASSERT_EQ(0, tpt_domain_create(self->fd, &dfd, NULL));
	a.fd = dfd;
	EXPECT_EQ(-EINVAL, tpt_ioctl(self->fd, TP_IOC_DOMAIN_ATTACH, &a));
	/* Still detached, so a correct attach works. */
	EXPECT_EQ(0, tpt_domain_attach(self->fd, dfd, NULL));
	close(dfd);
}

TEST_F(domain, attach_with_non_domain_descriptor_fails_einval)
{
	int pfd[2], null_fd, other;

	ASSERT_EQ(0, pipe(pfd));
	null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, null_fd);
	other = tpt_open();
	ASSERT_LE(0, other);
	EXPECT_EQ(-EINVAL, tpt_domain_attach(self->fd, pfd[0], NULL));
	EXPECT_EQ(-EINVAL, tpt_domain_attach(self->fd, null_fd, NULL));
	/* An endpoint is not a domain, not even the caller itself. */
	EXPECT_EQ(-EINVAL, tpt_domain_attach(self->fd, other, NULL));
	EXPECT_EQ(-EINVAL, tpt_domain_attach(self->fd, self->fd, NULL));
	close(other);
	close(null_fd);
}

TEST_F(domain, attach_with_closed_descriptor_fails_ebadf)
{
	int dfd;

	ASSERT_EQ(0, tpt_domain_create(self->fd, &dfd, NULL));
	ASSERT_EQ(0, close(dfd));
	EXPECT_EQ(-EBADF, tpt_domain_attach(self->fd, dfd, NULL));
	EXPECT_EQ(-EBADF, tpt_domain_attach(self->fd, -1, NULL));
	EXPECT_EQ(-EBADF, tpt_domain_attach(self->fd, INT32_MAX, NULL));
}

TEST_F(domain, attach_twice_fails_ebusy_and_keeps_first_domain)
{
	uint64_t first, id = 0;
	int da, db, peer;
	void *buf = tpt_map(LEN);
	uint32_t h;

	ASSERT_NE(NULL, buf);
	ASSERT_EQ(0, tpt_domain_create(self->fd, &da, &first));
	ASSERT_EQ(0, tpt_domain_create(self->fd, &db, NULL));
	ASSERT_EQ(0, tpt_domain_attach(self->fd, da, NULL));
	EXPECT_EQ(-EBUSY, tpt_domain_attach(self->fd, da, NULL));
	EXPECT_EQ(-EBUSY, tpt_domain_attach(self->fd, db, NULL));
	/* A SEND from the endpoint still lands in the first domain. */
	ASSERT_EQ(0, tpt_register(self->fd, buf, LEN, TP_ACCESS_READ, &h));
	ASSERT_EQ(0, tpt_send(self->fd, "k", h, 0, 0, 1));
	peer = tpt_open();
	ASSERT_LE(0, peer);
	ASSERT_EQ(0, tpt_domain_attach(peer, da, &id));
	EXPECT_EQ(first, id);
	ASSERT_EQ(0, tpt_register(peer, buf, LEN, TP_ACCESS_WRITE, &h));
	EXPECT_EQ(0, tpt_recv_nonblock(peer, "k", h, 0, LEN, NULL));
	close(peer);
	close(da);
	close(db);
}

/* Two domains with a producer and a consumer each. */
FIXTURE(two_domains)
{
	struct tpt_pair a;
	struct tpt_pair b;
};

FIXTURE_SETUP(two_domains)
{
	ASSERT_EQ(0, tpt_pair_open(&self->a, LEN));
	ASSERT_EQ(0, tpt_pair_open(&self->b, LEN));
	/* Different data on each side tells the domains apart. */
	tpt_fill(self->b.sbuf, LEN, 2);
}

FIXTURE_TEARDOWN(two_domains)
{
	tpt_pair_close(&self->a);
	tpt_pair_close(&self->b);
}

TEST_F(two_domains, key_sent_in_one_domain_is_invisible_in_another)
{
	struct tpt_pair *a = &self->a, *b = &self->b;
	uint64_t len = 0;

	ASSERT_EQ(0, tpt_send(a->prod, "shared", a->src, 0, LEN, 1));
	EXPECT_EQ(-EAGAIN, tpt_recv_nonblock(b->cons, "shared", b->dst, 0, LEN,
					     NULL));
	/* Nor does it collide with the same key there. */
	ASSERT_EQ(0, tpt_send(b->prod, "shared", b->src, 0, LEN, 2));
	ASSERT_EQ(0, tpt_recv_nonblock(b->cons, "shared", b->dst, 0, LEN,
				       &len));
	EXPECT_EQ(LEN, len);
	EXPECT_TRUE(tpt_check(b->dbuf, LEN, 2));
	ASSERT_EQ(0, tpt_recv_nonblock(a->cons, "shared", a->dst, 0, LEN,
				       &len));
	EXPECT_EQ(LEN, len);
	EXPECT_TRUE(tpt_check(a->dbuf, LEN, TPT_SEED_SRC));
}

TEST_F(two_domains, waiting_recv_is_not_woken_by_send_in_another_domain)
{
	struct tpt_pair *a = &self->a, *b = &self->b;
	struct tpt_rx_args args = {
		.domain_fd = b->domain_fd, .key = "k", .key_len = 1,
		.cap = LEN, .timeout_ns = 2 * TPT_NSEC_PER_SEC,
	};
	struct tpt_rx_result res;
	struct tpt_rx rx;

	TPT_REQUIRE_FEATURES(a->info, TP_FEAT_RECV_TIMEOUT);
	ASSERT_EQ(0, tpt_rx_start(&rx, &args));
	ASSERT_EQ(0, tpt_wait_waiters(b->domain_id, 1));
	ASSERT_EQ(0, tpt_send(a->prod, "k", a->src, 0, LEN, 1));
	ASSERT_EQ(0, tpt_rx_finish(&rx, TPT_SAFETY_TIMEOUT_MS, &res));
	EXPECT_EQ(-ETIMEDOUT, res.ret);
	/* The slot is still pending in its own domain. */
	EXPECT_EQ(0, tpt_recv_nonblock(a->cons, "k", a->dst, 0, LEN, NULL));
}

TEST_F(two_domains, abort_is_confined_to_its_domain)
{
	struct tpt_pair *a = &self->a, *b = &self->b;
	uint64_t len = 0;

	ASSERT_EQ(0, tpt_abort(a->prod, -ECONNRESET));
	EXPECT_EQ(-ECONNRESET, tpt_send(a->prod, "k", a->src, 0, LEN, 1));
	ASSERT_EQ(0, tpt_send(b->prod, "k", b->src, 0, LEN, 1));
	ASSERT_EQ(0, tpt_recv_nonblock(b->cons, "k", b->dst, 0, LEN, &len));
	EXPECT_TRUE(tpt_check(b->dbuf, LEN, 2));
}

/*
 * The child is forked before the domain exists, so the descriptor it
 * attaches with can only have come through the socket.
 */
static void socket_child(int sock)
{
	struct tpt_rx_result res = { 0 };
	uint8_t *buf = tpt_map(LEN);
	int fd = tpt_open(), dfd;
	uint32_t h;

	if (fd < 0 || !buf) {
		res.aux = -ENOMEM;
		goto out;
	}
	dfd = tpt_recv_fd(sock, TPT_SAFETY_TIMEOUT_MS);
	if (dfd < 0) {
		res.aux = dfd;
		goto out;
	}
	res.aux = tpt_domain_attach(fd, dfd, NULL);
	if (res.aux)
		goto out;
	close(dfd);
	res.aux = tpt_register(fd, buf, LEN, TP_ACCESS_WRITE, &h);
	if (res.aux)
		goto out;
	res.ret = tpt_recv(fd, "over-socket", h, 0, LEN, TPT_SAFETY_TIMEOUT_NS,
			   &res.len);
	if (!res.ret && res.len <= LEN)
		res.sum = tpt_sum(buf, res.len);
out:
	tpt_write_all(sock, &res, sizeof(res));
	_exit(0);
}

TEST_F(domain, descriptor_passed_over_unix_socket_grants_access)
{
	uint8_t *buf = tpt_map(LEN);
	struct tpt_rx_result res;
	struct tp_completion c;
	int sv[2], dfd, status;
	uint32_t h;
	pid_t pid;

	ASSERT_NE(NULL, buf);
	ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	pid = tpt_fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		close(sv[0]);
		socket_child(sv[1]);
	}
	close(sv[1]);
	tpt_fill(buf, LEN, 31);
	ASSERT_EQ(0, tpt_domain_create(self->fd, &dfd, NULL));
	ASSERT_EQ(0, tpt_domain_attach(self->fd, dfd, NULL));
	ASSERT_EQ(0, tpt_register(self->fd, buf, LEN, TP_ACCESS_READ, &h));
	ASSERT_EQ(0, tpt_send_fd(sv[0], dfd));
	close(dfd);
	ASSERT_EQ(0, tpt_send(self->fd, "over-socket", h, 0, LEN, 31));
	ASSERT_EQ(0, tpt_read_all(sv[0], &res, sizeof(res),
				  TPT_SAFETY_TIMEOUT_MS + 5000));
	EXPECT_EQ(0, res.aux);
	EXPECT_EQ(0, res.ret);
	EXPECT_EQ(LEN, res.len);
	EXPECT_EQ(tpt_pattern_sum(LEN, 31), res.sum);
	ASSERT_EQ(1, tpt_read_completions(self->fd, &c, 1, 5000));
	EXPECT_EQ(31ULL, c.user_data);
	EXPECT_EQ(0, c.status);
	ASSERT_EQ(0, tpt_wait_child(pid, 5000, &status));
}

TEST_F(domain, inherited_descriptor_grants_access)
{
	struct tpt_rx_args args = { .key = "inherited", .key_len = 9,
				    .cap = LEN,
				    .timeout_ns = TPT_SAFETY_TIMEOUT_NS };
	uint8_t *buf = tpt_map(LEN);
	struct tpt_rx_result res;
	struct tpt_rx rx;
	uint32_t h;
	int dfd;

	ASSERT_NE(NULL, buf);
	tpt_fill(buf, LEN, 32);
	ASSERT_EQ(0, tpt_domain_create(self->fd, &dfd, NULL));
	ASSERT_EQ(0, tpt_domain_attach(self->fd, dfd, NULL));
	ASSERT_EQ(0, tpt_register(self->fd, buf, LEN, TP_ACCESS_READ, &h));
	args.domain_fd = dfd;
	ASSERT_EQ(0, tpt_rx_start(&rx, &args));
	ASSERT_EQ(0, tpt_send(self->fd, "inherited", h, 0, LEN, 1));
	ASSERT_EQ(0, tpt_rx_finish(&rx, TPT_SAFETY_TIMEOUT_MS + 5000, &res));
	EXPECT_EQ(0, res.ret);
	EXPECT_EQ(LEN, res.len);
	EXPECT_EQ(tpt_pattern_sum(LEN, 32), res.sum);
	close(dfd);
}

TEST_F(domain, domain_outlives_its_descriptor_while_endpoints_are_attached)
{
	uint8_t *src = tpt_map(LEN), *dst = tpt_map(LEN);
	uint32_t hs, hd;
	uint64_t len = 0;
	int dfd, cons;

	ASSERT_NE(NULL, src);
	ASSERT_NE(NULL, dst);
	tpt_fill(src, LEN, 3);
	cons = tpt_open();
	ASSERT_LE(0, cons);
	ASSERT_EQ(0, tpt_domain_create(self->fd, &dfd, NULL));
	ASSERT_EQ(0, tpt_domain_attach(self->fd, dfd, NULL));
	ASSERT_EQ(0, tpt_domain_attach(cons, dfd, NULL));
	ASSERT_EQ(0, close(dfd));
	ASSERT_EQ(0, tpt_register(self->fd, src, LEN, TP_ACCESS_READ, &hs));
	ASSERT_EQ(0, tpt_register(cons, dst, LEN, TP_ACCESS_WRITE, &hd));
	ASSERT_EQ(0, tpt_send(self->fd, "k", hs, 0, LEN, 1));
	ASSERT_EQ(0, tpt_recv_nonblock(cons, "k", hd, 0, LEN, &len));
	EXPECT_EQ(LEN, len);
	EXPECT_TRUE(tpt_check(dst, LEN, 3));
	close(cons);
}

TEST_F(domain, debugfs_domain_file_counts_slots_and_bytes)
{
	struct tpt_pair p;
	int64_t v;

	TPT_REQUIRE_DEBUGFS();
	ASSERT_EQ(0, tpt_pair_open(&p, LEN));
	ASSERT_EQ(0, tpt_domain_stat(p.domain_id, "pending_slots", &v));
	EXPECT_EQ(0, v);
	ASSERT_EQ(0, tpt_send(p.prod, "one", p.src, 0, 1000, 1));
	ASSERT_EQ(0, tpt_send(p.prod, "two", p.src, 0, 2000, 2));
	ASSERT_EQ(0, tpt_domain_stat(p.domain_id, "pending_slots", &v));
	EXPECT_EQ(2, v);
	ASSERT_EQ(0, tpt_recv_nonblock(p.cons, "two", p.dst, 0, LEN, NULL));
	ASSERT_EQ(0, tpt_domain_stat(p.domain_id, "pending_slots", &v));
	EXPECT_EQ(1, v);
	ASSERT_EQ(0, tpt_domain_stat(p.domain_id, "sends", &v));
	EXPECT_EQ(2, v);
	ASSERT_EQ(0, tpt_domain_stat(p.domain_id, "recvs", &v));
	EXPECT_EQ(1, v);
	ASSERT_EQ(0, tpt_domain_stat(p.domain_id, "bytes_copied", &v));
	EXPECT_EQ(2000, v);
	ASSERT_EQ(0, tpt_domain_stat(p.domain_id, "bytes_donated", &v));
	EXPECT_EQ(0, v);
	ASSERT_EQ(0, tpt_domain_stat(p.domain_id, "waiters", &v));
	EXPECT_EQ(0, v);
	ASSERT_EQ(0, tpt_domain_stat(p.domain_id, "abort_status", &v));
	EXPECT_EQ(0, v);
	tpt_pair_close(&p);
}

/* The whole keys-<id> file, or "" when it cannot be read. */
static void read_keys(uint64_t id, char *buf, size_t size)
{
	char path[96];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), TPT_DEBUGFS_DIR "/keys-%llu",
		 (unsigned long long)id);
	buf[0] = '\0';
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read(fd, buf, size - 1);
	buf[n > 0 ? n : 0] = '\0';
	close(fd);
}

/*
 * A RECV that never matches because its key differs by one byte from the
 * SEND's is the usual rendezvous bug: keys-<id> shows both sides, with
 * unprintable bytes escaped.
 */
TEST_F(domain, debugfs_keys_file_lists_pending_sends_and_waiting_recvs)
{
	static const char odd[] = { 'w', '0', 0x01 };
	struct tpt_thread_recv t;
	struct tp_send s;
	struct tpt_pair p;
	char buf[1024];

	TPT_REQUIRE_DEBUGFS();
	ASSERT_EQ(0, tpt_pair_open(&p, LEN));
	ASSERT_EQ(0, tpt_send(p.prod, "step1/w0", p.src, 0, 100, 1));
	tpt_send_prep(&s, odd, sizeof(odd), p.src, 0, 100, 2);
	ASSERT_EQ(0, tpt_ioctl(p.prod, TP_IOC_SEND, &s));
	ASSERT_EQ(0, tpt_thread_recv_start(&t, p.cons, "step1/w1", p.dst, LEN,
					   TPT_SAFETY_TIMEOUT_NS));
	ASSERT_EQ(0, tpt_wait_waiters(p.domain_id, 1));
	read_keys(p.domain_id, buf, sizeof(buf));
	EXPECT_NE(NULL, strstr(buf, "send 8 step1/w0\n")) TH_LOG("%s", buf);
	EXPECT_NE(NULL, strstr(buf, "send 3 w0\\001\n")) TH_LOG("%s", buf);
	EXPECT_NE(NULL, strstr(buf, "recv 8 step1/w1\n")) TH_LOG("%s", buf);
	/* What is taken or ends leaves the list. */
	ASSERT_EQ(0, tpt_send(p.prod, "step1/w1", p.src, 0, 100, 3));
	ASSERT_EQ(0, tpt_thread_recv_join(&t, TPT_SAFETY_TIMEOUT_MS));
	EXPECT_EQ(0, t.ret);
	read_keys(p.domain_id, buf, sizeof(buf));
	EXPECT_EQ(NULL, strstr(buf, "step1/w1")) TH_LOG("%s", buf);
	EXPECT_NE(NULL, strstr(buf, "send 8 step1/w0\n")) TH_LOG("%s", buf);
	tpt_pair_close(&p);
}

/* The last of the descriptor and the attached endpoints frees the domain. */
TEST_F(domain, domain_is_freed_with_its_last_reference)
{
	int64_t base, v;
	uint64_t id;
	int dfd, other;

	TPT_REQUIRE_DEBUGFS();
	ASSERT_EQ(0, tpt_stat("domains", &base));
	other = tpt_open();
	ASSERT_LE(0, other);
	ASSERT_EQ(0, tpt_domain_create(self->fd, &dfd, &id));
	ASSERT_EQ(0, tpt_domain_attach(other, dfd, NULL));
	ASSERT_EQ(0, tpt_stat("domains", &v));
	EXPECT_EQ(base + 1, v);
	ASSERT_EQ(0, tpt_domain_stat(id, "pending_slots", &v));
	close(dfd);
	ASSERT_EQ(0, tpt_stat("domains", &v));
	EXPECT_EQ(base + 1, v);
	close(other);
	EXPECT_EQ(0, tpt_wait_stat("domains", base, 5000));
	EXPECT_NE(0, tpt_domain_stat(id, "pending_slots", &v));
}

TEST_HARNESS_MAIN
