// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Cases across processes: the parent creates the rendezvous, passes its
 * descriptor to a forked child with tpu_fd_send(), and they exchange
 * tensors both ways.  The child has a context of its own (a context, like
 * an endpoint, belongs to the process that made it) and reports through
 * its exit status, which the parent turns into TAP points.
 */
#include <errno.h>
#include <signal.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rdv_cases.h"
#include "tap.h"

#define SEC 1000000000ull
#define XLEN (1 << 20)

/* Child exit codes: which step failed. */
enum { XS_OK, XS_FD, XS_CTX, XS_JOIN, XS_RECV, XS_DATA, XS_SEND, XS_ABORT };

static const char *const x_step[] = {
	"ok", "receiving the descriptor", "creating a context", "joining",
	"receiving", "checking the bytes", "sending back", "seeing the abort",
};

static void sent(void *arg, tpu_status st)
{
	*(volatile tpu_status *)arg = st;
}

/* The checksum of what the parent sends: rdv_fill() with seed 0. */
static uint64_t expected_sum(void)
{
	uint8_t *p = malloc(XLEN);
	uint64_t sum = 0;

	if (p) {
		rdv_fill(p, XLEN, 0);
		sum = rdv_checksum(p, XLEN);
		free(p);
	}
	return sum;
}

static int child(const struct rdv_impl *impl, int sock)
{
	struct tpu_context_options o = { .flags = impl->ctx_flags };
	struct tpu_context *ctx;
	struct tpu_rendezvous *rdv;
	uint8_t *buf = malloc(XLEN);
	struct tpu_tensor t = { .data = buf, .len = XLEN };
	volatile tpu_status send_st = 1;
	char small[8];
	size_t len = 0;
	int fd, code = XS_OK;

	if (!buf || tpu_fd_recv(sock, &fd))
		return XS_FD;
	if (tpu_context_create(&o, &ctx))
		return XS_CTX;
	if (tpu_rendezvous_join(ctx, fd, &rdv)) {
		tpu_context_destroy(ctx);
		return XS_JOIN;
	}
	close(fd);
	if (tpu_rendezvous_recv_wait(rdv, "p2c", 3, &t, 30 * SEC, &len))
		code = XS_RECV;
	else if (len != XLEN || rdv_checksum(buf, XLEN) != expected_sum())
		code = XS_DATA;
	if (!code) {
		/* Send the bytes back, as received: the parent checks them again. */
		if (tpu_rendezvous_send(rdv, "c2p", 3, &t, 0, sent, (void *)&send_st))
			code = XS_SEND;
	}
	/* The parent takes c2p, then aborts: this receive must see the status. */
	if (!code) {
		struct tpu_tensor s = { .data = small, .len = sizeof(small) };
		tpu_status st = tpu_rendezvous_recv_wait(rdv, "never", 5, &s, 30 * SEC, NULL);

		if (st != -ESHUTDOWN)
			code = XS_ABORT;
	}
	/* Do not leave before our send is done: its source is this process's memory. */
	while (!code && send_st == 1)
		usleep(1000);
	if (!code && send_st != 0)
		code = XS_SEND;
	tpu_rendezvous_destroy(rdv);
	tpu_context_destroy(ctx);
	free(buf);
	return code;
}

void rdv_xproc_run(const struct rdv_impl *impl)
{
	struct tpu_context_options o = { .flags = impl->ctx_flags };
	struct tpu_context *ctx;
	struct tpu_rendezvous *rdv;
	uint8_t *src = malloc(XLEN), *back = malloc(XLEN);
	struct tpu_tensor s = { .data = src, .len = XLEN }, b = { .data = back, .len = XLEN };
	volatile tpu_status send_st = 1;
	int sv[2], fd = -1, status = 0;
	size_t len = 0;
	pid_t pid;

	tap_diag("cross-process cases over %s", impl->name);
	if (!src || !back || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
		CHECK(false, "%s_xproc_set_up", impl->name);
		goto out;
	}
	if (tpu_context_create(&o, &ctx) || tpu_rendezvous_create(ctx, impl->impl, &rdv)) {
		CHECK(false, "%s_xproc_rendezvous_created", impl->name);
		goto out;
	}
	CHECK_STATUS(tpu_rendezvous_share(rdv, &fd), 0, "%s_share_gives_a_descriptor", impl->name);
	rdv_fill(src, XLEN, 0);
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		close(sv[0]);
		_exit(child(impl, sv[1]));
	}
	close(sv[1]);
	CHECK_STATUS(tpu_fd_send(sv[0], fd), 0, "%s_descriptor_passed_to_the_child", impl->name);
	close(fd);
	CHECK_STATUS(tpu_rendezvous_send(rdv, "p2c", 3, &s, 0, sent, (void *)&send_st), 0,
		     "%s_parent_sends_1MiB", impl->name);
	CHECK_STATUS(tpu_rendezvous_recv_wait(rdv, "c2p", 3, &b, 60 * SEC, &len), 0,
		     "%s_parent_receives_the_childs_tensor", impl->name);
	CHECK(len == XLEN && rdv_checksum(back, XLEN) == rdv_checksum(src, XLEN),
	      "%s_tensor_crosses_two_processes_both_ways_intact", impl->name);
	/*
	 * The child took p2c before it sent c2p, but the send's completion may
	 * come after c2p's (cma tells the producer lazily, within 5 ms).
	 */
	for (int i = 0; i < 10000 && send_st == 1; i++)
		usleep(1000);
	CHECK(send_st == 0, "%s_parent_send_callback_ok_after_the_child_took_it", impl->name);
	CHECK_STATUS(tpu_rendezvous_abort(rdv, -ESHUTDOWN), 0, "%s_parent_aborts_the_shared_rendezvous", impl->name);
	waitpid(pid, &status, 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		tap_diag("child failed at: %s", WIFEXITED(status) && WEXITSTATUS(status) <= XS_ABORT ?
			 x_step[WEXITSTATUS(status)] : "a signal");
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == XS_OK,
	      "%s_child_joins_receives_sends_and_sees_the_abort", impl->name);
	tpu_rendezvous_destroy(rdv);
	tpu_context_destroy(ctx);
	close(sv[0]);
out:
	free(src);
	free(back);
}

/* ---- a member that dies ------------------------------------------------ */

struct death_rec {
	volatile int calls;
	volatile tpu_status status;
};

static void death_cb(void *arg, tpu_status st)
{
	struct death_rec *r = arg;

	r->status = st;
	__atomic_add_fetch(&r->calls, 1, __ATOMIC_SEQ_CST);
}

static void death_recv_cb(void *arg, tpu_status st, size_t len)
{
	(void)len;
	death_cb(arg, st);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * SEC + (uint64_t)ts.tv_nsec;
}

/* Up to @ns for @r's callback; true when it came. */
static bool death_wait(struct death_rec *r, uint64_t ns)
{
	uint64_t end = now_ns() + ns;

	while (!__atomic_load_n(&r->calls, __ATOMIC_SEQ_CST) && now_ns() < end)
		usleep(1000);
	return r->calls == 1;
}

/*
 * The member in the child: joins, says so, waits for the word, then dies
 * with the rendezvous still open: killed, or exiting without destroy.
 */
static int death_child(const struct rdv_impl *impl, int sock, bool killed)
{
	struct tpu_context_options o = { .flags = impl->ctx_flags };
	struct tpu_context *ctx;
	struct tpu_rendezvous *rdv;
	char c = 0;
	int fd;

	if (tpu_fd_recv(sock, &fd))
		return XS_FD;
	if (tpu_context_create(&o, &ctx))
		return XS_CTX;
	if (tpu_rendezvous_join(ctx, fd, &rdv))
		return XS_JOIN;
	if (write(sock, "j", 1) != 1 || read(sock, &c, 1) != 1)
		return XS_FD;
	if (killed)
		raise(SIGKILL);
	return XS_OK;		/* _exit() with rdv and ctx never destroyed */
}

/*
 * A receive with no timeout and a send posted while a member lives end
 * with TPU_E_PEER_GONE, promptly, when that member dies; a member's orderly
 * leave is tested by the cases above (the child destroys and exits).
 */
static void death_run(const struct rdv_impl *impl, bool killed)
{
	const char *how = killed ? "killed" : "exits_without_destroy";
	struct tpu_context_options o = { .flags = impl->ctx_flags };
	struct tpu_context *ctx;
	struct tpu_rendezvous *rdv;
	uint8_t src[64] = { 1 }, dst[64];
	struct tpu_tensor s = { .data = src, .len = sizeof(src) };
	struct tpu_tensor d = { .data = dst, .len = sizeof(dst) };
	struct death_rec rr = { 0, 1 }, sr = { 0, 1 };
	int sv[2], fd = -1, status = 0;
	uint64_t t0;
	char c = 0;
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
		CHECK(false, "%s_death_set_up", impl->name);
		return;
	}
	if (tpu_context_create(&o, &ctx) || tpu_rendezvous_create(ctx, impl->impl, &rdv) ||
	    tpu_rendezvous_share(rdv, &fd)) {
		CHECK(false, "%s_death_rendezvous_created", impl->name);
		return;
	}
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		close(sv[0]);
		_exit(death_child(impl, sv[1], killed));
	}
	close(sv[1]);
	if (tpu_fd_send(sv[0], fd) || read(sv[0], &c, 1) != 1) {
		CHECK(false, "%s_member_joined_before_it_%s", impl->name, how);
		kill(pid, SIGKILL);
		goto out;
	}
	CHECK_STATUS(tpu_rendezvous_recv(rdv, "from-the-dead", 13, &d, 0, death_recv_cb, &rr), 0,
		     "%s_recv_without_timeout_posted_before_a_member_%s", impl->name, how);
	CHECK_STATUS(tpu_rendezvous_send(rdv, "to-the-dead", 11, &s, 0, death_cb, &sr), 0,
		     "%s_send_posted_before_a_member_%s", impl->name, how);
	/* Let both reach the implementation (a ring's SQE, the key table). */
	usleep(300 * 1000);
	CHECK(rr.calls == 0 && sr.calls == 0, "%s_both_wait_while_the_member_lives", impl->name);
	t0 = now_ns();
	if (write(sv[0], "d", 1) != 1)
		kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	CHECK(killed ? WIFSIGNALED(status) : WIFEXITED(status) && WEXITSTATUS(status) == XS_OK,
	      "%s_member_%s", impl->name, how);
	CHECK(death_wait(&rr, 20 * SEC) && rr.status == TPU_E_PEER_GONE,
	      "%s_recv_ends_peer_gone_when_a_member_%s (status %d)", impl->name, how, rr.status);
	CHECK(death_wait(&sr, 20 * SEC) && sr.status == TPU_E_PEER_GONE,
	      "%s_send_ends_peer_gone_before_destroy_when_a_member_%s (status %d)",
	      impl->name, how, sr.status);
	tap_diag("%s: both ended %.1f ms after the member was told to go", impl->name,
		 (double)(now_ns() - t0) / 1e6);
	/* Life goes on: a new pair of operations on the same rendezvous. */
	CHECK_STATUS(tpu_rendezvous_send(rdv, "after", 5, &s, 0, NULL, NULL), 0,
		     "%s_send_after_the_death_accepted", impl->name);
	CHECK_STATUS(tpu_rendezvous_recv_wait(rdv, "after", 5, &d, 20 * SEC, NULL), 0,
		     "%s_recv_after_the_death_delivers", impl->name);
out:
	close(fd);
	close(sv[0]);
	tpu_rendezvous_destroy(rdv);
	tpu_context_destroy(ctx);
}

/* ---- a member that dies in the middle of a large pull ------------------ */

#define BIG_LEN (128u << 20)
#define BIG_SEEN (8u << 20)	/* bytes landed before the kill: the pull is on */

/* Untouched anonymous memory in small pages, so its filling can be watched. */
static void *big_map(void)
{
	void *p = mmap(NULL, BIG_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	madvise(p, BIG_LEN, MADV_NOHUGEPAGE);
	return p;
}

/* The checksum of rdv_fill(@seed) over @len bytes. */
static uint64_t fill_sum(size_t len, uint64_t seed)
{
	uint8_t *p = malloc(len);
	uint64_t sum = 0;

	if (p) {
		rdv_fill(p, len, seed);
		sum = rdv_checksum(p, len);
		free(p);
	}
	return sum;
}

/* Resident bytes of process @pid. */
static uint64_t rss_of(pid_t pid)
{
	char path[64];
	unsigned long size = 0, res = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/statm", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	if (fscanf(f, "%lu %lu", &size, &res) != 2)
		res = 0;
	fclose(f);
	return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* Bytes of @p (BIG_LEN long) that are resident in this process. */
static uint64_t resident_in(void *p)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), n = BIG_LEN / pg, k = 0;
	unsigned char *v = malloc(n);

	if (v && !mincore(p, BIG_LEN, v))
		for (size_t i = 0; i < n; i++)
			k += v[i] & 1;
	free(v);
	return (uint64_t)k * pg;
}

/* The child: joins; a consumer receives BIG_LEN, a producer sends it and waits to die. */
static int pull_child(const struct rdv_impl *impl, int sock, bool producer)
{
	struct tpu_context_options o = { .flags = impl->ctx_flags };
	struct tpu_context *ctx;
	struct tpu_rendezvous *rdv;
	uint8_t *buf = big_map();
	struct tpu_tensor t = { .data = buf, .len = BIG_LEN };
	char c = 0;
	int fd;

	if (!buf || tpu_fd_recv(sock, &fd))
		return XS_FD;
	if (tpu_context_create(&o, &ctx))
		return XS_CTX;
	if (tpu_rendezvous_join(ctx, fd, &rdv))
		return XS_JOIN;
	if (producer) {
		rdv_fill(buf, BIG_LEN, 7);
		if (tpu_rendezvous_send(rdv, "big", 3, &t, 0, NULL, NULL))
			return XS_SEND;
	}
	if (write(sock, "j", 1) != 1)
		return XS_FD;
	if (producer) {
		while (read(sock, &c, 1) == 1)
			;		/* killed here */
		return XS_OK;
	}
	return tpu_rendezvous_recv_wait(rdv, "big", 3, &t, 60 * SEC, NULL) ? XS_RECV : XS_OK;
}

struct pull_killer {
	pid_t pid;
	void *dst;		/* the parent's destination, or NULL to watch the child */
	uint64_t base;
	uint64_t seen;		/* bytes landed when the kill went out; 0: never sent */
};

static void *pull_killer_main(void *arg)
{
	struct pull_killer *k = arg;
	uint64_t end = now_ns() + 20 * SEC;

	while (now_ns() < end) {
		uint64_t rss = k->dst ? 0 : rss_of(k->pid);
		uint64_t got = k->dst ? resident_in(k->dst) : rss > k->base ? rss - k->base : 0;

		if (got >= BIG_SEEN && got < BIG_LEN) {
			kill(k->pid, SIGKILL);
			k->seen = got;
			break;
		}
		if (!k->dst && rss == 0)
			break;		/* the child is gone */
		usleep(50);
	}
	return NULL;
}

/*
 * Killed in the middle of a BIG_LEN pull (its first BIG_SEEN bytes landed):
 * the consumer, and the parent's send ends TPU_E_PEER_GONE; or the producer,
 * and the parent's receive ends with the whole tensor (the copy may finish
 * from memory the kernel still holds) or TPU_E_PEER_GONE.  Never a hang.
 */
static void pull_death_run(const struct rdv_impl *impl, bool producer_dies)
{
	const char *who = producer_dies ? "producer" : "consumer";
	struct tpu_context_options o = { .flags = impl->ctx_flags };
	struct tpu_context *ctx;
	struct tpu_rendezvous *rdv;
	uint8_t *buf = big_map();
	struct tpu_tensor t = { .data = buf, .len = BIG_LEN };
	struct death_rec sr = { 0, 1 };
	struct pull_killer k = { 0 };
	pthread_t th;
	int sv[2], fd = -1, status = 0;
	tpu_status st;
	uint64_t t0;
	char c = 0;
	pid_t pid;

	if (!buf || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
		CHECK(false, "%s_pull_death_set_up", impl->name);
		return;
	}
	if (tpu_context_create(&o, &ctx) || tpu_rendezvous_create(ctx, impl->impl, &rdv) ||
	    tpu_rendezvous_share(rdv, &fd)) {
		CHECK(false, "%s_pull_death_rendezvous_created", impl->name);
		return;
	}
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		close(sv[0]);
		_exit(pull_child(impl, sv[1], producer_dies));
	}
	close(sv[1]);
	if (tpu_fd_send(sv[0], fd) || read(sv[0], &c, 1) != 1) {
		CHECK(false, "%s_pull_death_member_joined", impl->name);
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		goto out;
	}
	k.pid = pid;
	k.dst = producer_dies ? buf : NULL;
	k.base = rss_of(pid);
	if (!producer_dies) {
		rdv_fill(buf, BIG_LEN, 7);
		k.base = rss_of(pid);
		if (tpu_rendezvous_send(rdv, "big", 3, &t, 0, death_cb, &sr)) {
			CHECK(false, "%s_pull_death_send_posted", impl->name);
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			goto out;
		}
	}
	t0 = now_ns();
	if (pthread_create(&th, NULL, pull_killer_main, &k)) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		goto out;
	}
	if (producer_dies) {
		st = tpu_rendezvous_recv_wait(rdv, "big", 3, &t, 30 * SEC, NULL);
		CHECK(st == TPU_E_PEER_GONE ||
		      (st == 0 && rdv_checksum(buf, BIG_LEN) == fill_sum(BIG_LEN, 7)),
		      "%s_recv_ends_whole_or_peer_gone_when_the_producer_dies_mid_pull (%s)",
		      impl->name, tpu_status_name(st));
	} else {
		bool ended = death_wait(&sr, 30 * SEC);

		CHECK(ended && (sr.status == TPU_E_PEER_GONE || !k.seen),
		      "%s_send_ends_peer_gone_when_the_consumer_dies_mid_pull (%s)", impl->name,
		      ended ? tpu_status_name(sr.status) : "no callback");
	}
	pthread_join(th, NULL);
	if (!k.seen)
		kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	tap_diag("%s: the %s was killed with %llu of %u MiB landed; ended %.1f ms after the start",
		 impl->name, who, (unsigned long long)(k.seen >> 20), BIG_LEN >> 20,
		 (double)(now_ns() - t0) / 1e6);
	CHECK(k.seen != 0, "%s_the_%s_was_killed_mid_pull", impl->name, who);
out:
	close(fd);
	close(sv[0]);
	tpu_rendezvous_destroy(rdv);
	tpu_context_destroy(ctx);
	munmap(buf, BIG_LEN);
}

/*
 * A member posts a tensor (large, then small: pulled and inline) and dies
 * before anyone asked for it; a receive of that key started afterwards,
 * without a timeout, ends TPU_E_PEER_GONE at once (it waited for ever).
 */
static int orphan_child(const struct rdv_impl *impl, int sock)
{
	static uint8_t big[1 << 16], small[8];
	struct tpu_tensor tb = { .data = big, .len = sizeof(big) };
	struct tpu_tensor ts = { .data = small, .len = sizeof(small) };
	struct tpu_context_options o = { .flags = impl->ctx_flags };
	struct death_rec mark = { 0, 1 };
	struct tpu_context *ctx;
	struct tpu_rendezvous *rdv;
	int fd;

	if (tpu_fd_recv(sock, &fd))
		return XS_FD;
	if (tpu_context_create(&o, &ctx))
		return XS_CTX;
	if (tpu_rendezvous_join(ctx, fd, &rdv))
		return XS_JOIN;
	if (tpu_rendezvous_send(rdv, "orphan-big", 10, &tb, 0, NULL, NULL) ||
	    tpu_rendezvous_send(rdv, "orphan-small", 12, &ts, 0, NULL, NULL) ||
	    tpu_rendezvous_send(rdv, "orphan-mark", 11, &ts, 0, death_cb, &mark))
		return XS_SEND;
	/*
	 * Both are in the table once the parent has taken the mark: cma's
	 * sends are there before the call returns, kmod's reach the module
	 * in the order they were posted, through one ring (a sleep instead
	 * was too short once in an emulated VM, and nothing failed).
	 */
	if (!death_wait(&mark, 60 * SEC) || mark.status)
		return XS_SEND;
	if (write(sock, "p", 1) != 1)
		return XS_FD;
	raise(SIGKILL);
	return XS_OK;
}

static void orphan_run(const struct rdv_impl *impl)
{
	static const char *const keys[] = { "orphan-big", "orphan-small" };
	struct tpu_context_options o = { .flags = impl->ctx_flags };
	struct tpu_context *ctx;
	struct tpu_rendezvous *rdv;
	uint8_t dst[1 << 16];
	struct tpu_tensor d = { .data = dst, .len = sizeof(dst) };
	int sv[2], fd = -1, status = 0;
	char c = 0;
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) ||
	    tpu_context_create(&o, &ctx)) {
		CHECK(false, "%s_orphan_set_up", impl->name);
		return;
	}
	if (tpu_rendezvous_create(ctx, impl->impl, &rdv) || tpu_rendezvous_share(rdv, &fd)) {
		CHECK(false, "%s_orphan_rendezvous_created", impl->name);
		tpu_context_destroy(ctx);
		return;
	}
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		close(sv[0]);
		_exit(orphan_child(impl, sv[1]));
	}
	close(sv[1]);
	{
		uint8_t m[8];
		struct tpu_tensor mt = { .data = m, .len = sizeof(m) };

		if (tpu_fd_send(sv[0], fd) ||
		    tpu_rendezvous_recv_wait(rdv, "orphan-mark", 11, &mt, 60 * SEC, NULL) ||
		    read(sv[0], &c, 1) != 1)
			kill(pid, SIGKILL);
	}
	waitpid(pid, &status, 0);
	CHECK(c == 'p' && WIFSIGNALED(status), "%s_producer_posted_then_was_killed", impl->name);
	/* kmod: give the module time to release the dead member's endpoint. */
	if (impl->impl == TPU_RDV_KMOD)
		usleep(1000 * 1000);
	for (int i = 0; i < 2; i++) {
		struct death_rec rr = { 0, 1 };
		uint64_t t0 = now_ns();
		bool came;

		CHECK_STATUS(tpu_rendezvous_recv(rdv, keys[i], strlen(keys[i]), &d, 0,
						 death_recv_cb, &rr), 0,
			     "%s_recv_of_a_dead_producers_key_posted (%s)", impl->name, keys[i]);
		came = death_wait(&rr, 5 * SEC);
		if (!came)
			tpu_rendezvous_cancel(rdv, keys[i], strlen(keys[i]));
		/*
		 * kmod: until the dead member's endpoint is released (its
		 * io_uring lets go of it a little after the exit) the SEND is
		 * still there and its pinned pages are delivered; after, the
		 * module remembers the key.  Either way, no wait.
		 */
		CHECK(came && (rr.status == TPU_E_PEER_GONE ||
			       (impl->impl == TPU_RDV_KMOD && rr.status == 0)),
		      "%s_recv_started_after_its_producer_died_is_peer_gone_at_once (%s: %s, "
		      "%.1f ms)", impl->name, keys[i], came ? tpu_status_name(rr.status) : "waits",
		      (double)(now_ns() - t0) / 1e6);
		death_wait(&rr, 5 * SEC);
	}
	/* The key is free again: a live member's tensor of it goes through. */
	{
		uint8_t src[8] = { 7 };
		struct tpu_tensor s1 = { .data = src, .len = sizeof(src) };
		struct tpu_tensor d1 = { .data = dst, .len = sizeof(src) };

		CHECK(!tpu_rendezvous_send(rdv, "orphan-small", 12, &s1, 0, NULL, NULL) &&
		      !tpu_rendezvous_recv_wait(rdv, "orphan-small", 12, &d1, 20 * SEC, NULL) &&
		      dst[0] == 7, "%s_a_dead_producers_key_can_be_sent_again", impl->name);
	}
	close(fd);
	close(sv[0]);
	tpu_rendezvous_destroy(rdv);
	tpu_context_destroy(ctx);
}

void rdv_xproc_death_run(const struct rdv_impl *impl)
{
	tap_diag("members that die, over %s", impl->name);
	death_run(impl, true);
	death_run(impl, false);
	orphan_run(impl);
	/*
	 * A cma pull lands page by page in untouched memory, which is what the
	 * killer watches.  kmod pins the destination, faulting it all in before
	 * the copy starts, so resident memory says nothing about the copy
	 * there; the module's selftests kill its copies midway instead
	 * (stress_test: consumer_ and producer_killed_mid_copy_*).
	 */
	if (impl->impl == TPU_RDV_CMA) {
		pull_death_run(impl, false);
		pull_death_run(impl, true);
	}
}
