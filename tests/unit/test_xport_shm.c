// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The shm transport (lib/xport_shm.c), between two contexts of this
 * process and with fork()ed peers: names, bootstrap and refusal, data both
 * ways and through a ring much smaller than the transfer, order of many
 * queued ops and of descriptors among bytes, the peer closing or dying,
 * close with pending ops and from callbacks, reading in place (wait, peek,
 * take), hostile handshakes, and an
 * idle connection letting its context sleep.
 *
 * Every transport call runs on the context thread (a deferred task); the
 * test thread waits for callbacks with a deadline, so a bug fails a check
 * instead of hanging the run.  That harness is shared with the tcp tests
 * (xport_harness.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

#include "ctx/ctx.h"
#include "shm_ring.h"
#include "tap.h"
#include "tpu_user.h"
#include "xport.h"
#include "xport_harness.h"

#define XP	(&tpu__xport_shm)

static struct tpu_context *ctx_a, *ctx_b;	/* the connecting side, the listening side */

/* The shared listener, on ctx_b, that ctx_a connects to. */
static struct site site;

/* ---- tests ------------------------------------------------------------------ */

static void test_names(void)
{
	char max[128], over[128], addr[TPU__XPORT_ADDR_MAX];
	static const char *const bad[] = { "", "a b", "a/b", "x\n", "caf\xc3\xa9", "a:b", "a\\b" };
	struct tpu__xlistener *l = NULL;
	struct tpu__conn *c = NULL;
	struct acceptq q = { 0 };
	bool all = true;
	unsigned int i;

	memset(max, 'x', sizeof(max));
	memset(over, 'y', sizeof(over));
	max[92] = '\0';
	over[93] = '\0';
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		all &= x_connect(XP, ctx_a, bad[i], &c) == -EINVAL && !c;
		all &= x_listen(XP, ctx_b, bad[i], &q, &l, NULL, 0) == -EINVAL && !l;
	}
	CHECK(all, "shm: names outside [A-Za-z0-9._-] are -EINVAL for connect and listen");
	CHECK_STATUS(x_connect(XP, ctx_a, over, &c), -EINVAL,
		     "shm: a 93-character name is -EINVAL");
	CHECK_STATUS(x_listen(XP, ctx_b, over, &q, &l, NULL, 0), -EINVAL,
		     "shm: listening on a 93-character name is -EINVAL");
	CHECK_STATUS(x_connect(XP, ctx_a, NULL, &c), -EINVAL, "shm: connecting to NULL is -EINVAL");
	CHECK_STATUS(x_listen(XP, ctx_b, max, &q, &l, addr, sizeof(addr)), 0,
		     "shm: a 92-character name is fine");
	CHECK(!strcmp(addr, max), "shm: addr() is the name");
	x_lclose(ctx_b, l);
}

static void test_compat_descriptor(void)
{
	char a[TPU__XPORT_COMPAT_MAX], b[TPU__XPORT_COMPAT_MAX], small[8];
	tpu_status st = tpu__xport_shm.compat_descriptor(a, sizeof(a));
	const char *colon;

	CHECK_STATUS(st, 0, "shm: compatibility descriptor");
	CHECK(!strncmp(a, "shm:", 4) && (colon = strchr(a + 4, ':')) && colon[1] &&
	      strspn(colon + 1, "0123456789") == strlen(colon + 1),
	      "shm: the descriptor is shm:BOOT:NETNS (%s)", a);
	CHECK(!tpu__xport_shm.compat_descriptor(b, sizeof(b)) && !strcmp(a, b),
	      "shm: the descriptor is stable");
	CHECK_STATUS(tpu__xport_shm.compat_descriptor(small, sizeof(small)), -ENOSPC,
		     "shm: a small buffer is -ENOSPC");
	CHECK(!strcmp(tpu__xport_shm.name, "shm"), "shm: the transport is called shm");
}

static void test_addr_in_use(void)
{
	char name[64];
	struct tpu__xlistener *l1 = NULL, *l2 = NULL;
	struct acceptq q = { 0 };

	snprintf(name, sizeof(name), "tpu-test-inuse-%d", (int)getpid());
	CHECK_STATUS(x_listen(XP, ctx_b, name, &q, &l1, NULL, 0), 0, "shm: listen");
	CHECK_STATUS(x_listen(XP, ctx_a, name, &q, &l2, NULL, 0), -EADDRINUSE,
		     "shm: a second listener on the name is -EADDRINUSE");
	x_lclose(ctx_b, l1);
	l2 = NULL;
	CHECK_STATUS(x_listen(XP, ctx_a, name, &q, &l2, NULL, 0), 0,
		     "shm: the name is free again as soon as the listener closed");
	x_lclose(ctx_a, l2);
}

static void test_refused(void)
{
	char name[64], buf[4];
	struct tpu__conn *c = NULL;
	struct done r = { 0 }, w = { 0 };
	bool ok;

	snprintf(name, sizeof(name), "tpu-test-nobody-%d", (int)getpid());
	CHECK_STATUS(x_connect(XP, ctx_a, name, &c), 0, "shm: connect returns at once");
	x_read(ctx_a, c, buf, sizeof(buf), &r);
	x_write(ctx_a, c, "ping", 4, &w);
	ok = wait_for(&r.calls, 1, WAIT_MS) && wait_for(&w.calls, 1, WAIT_MS);
	CHECK(ok, "shm: ops queued on a refused connection are called back");
	CHECK_STATUS(r.status, -ECONNREFUSED, "shm: a read on a refused connection");
	CHECK_STATUS(w.status, -ECONNREFUSED, "shm: a write on a refused connection");
	x_close(ctx_a, c);
	CHECK(atomic_load(&r.calls) == 1 && atomic_load(&w.calls) == 1,
	      "shm: each called back once, close adds nothing");
}

static void test_basic(struct pair *p)
{
	char in[16] = { 0 }, back[8] = { 0 };
	struct iovec iov[3] = { { "hel", 3 }, { "lo ", 3 }, { "world", 5 } };
	struct done w = { 0 }, r = { 0 }, w2 = { 0 }, r2 = { 0 };

	CHECK(p->client->ops->peer_pid(p->client) == getpid() &&
	      p->server->ops->peer_pid(p->server) == getpid(),
	      "shm: peer_pid is this process on both ends");
	CHECK(p->client->xport == &tpu__xport_shm && p->server->xport == &tpu__xport_shm,
	      "shm: connections name their transport");
	CHECK_STATUS(x_writev(ctx_a, p->client, iov, 3, &w), 0, "shm: writev of three pieces");
	CHECK_STATUS(x_read(ctx_b, p->server, in, 11, &r), 0, "shm: read queued");
	CHECK(wait_for(&w.calls, 1, WAIT_MS) && wait_for(&r.calls, 1, WAIT_MS) && !w.status &&
	      !r.status, "shm: write and read complete");
	CHECK(!strcmp(in, "hello world"), "shm: the bytes arrive (%s)", in);
	x_read(ctx_a, p->client, back, 4, &r2);
	x_write(ctx_b, p->server, "pong", 4, &w2);
	CHECK(wait_for(&r2.calls, 1, WAIT_MS) && !r2.status && !strcmp(back, "pong"),
	      "shm: and back the other way");
	CHECK(wait_for(&w2.calls, 1, WAIT_MS) && !w2.status, "shm: that write completes too");
	CHECK_STATUS(x_read(ctx_a, p->client, back, 0, &r2), -EINVAL,
		     "shm: a read of 0 is -EINVAL");
	CHECK_STATUS(x_writev(ctx_a, p->client, iov, TPU__XPORT_IOV_MAX + 1, &w), -EINVAL,
		     "shm: more than TPU__XPORT_IOV_MAX iovecs is -EINVAL");
	CHECK(atomic_load(&w.calls) == 1 && atomic_load(&r2.calls) == 1,
	      "shm: refused ops are not called back");
}

/* 16 MiB one way and 4 MiB the other at once, through rings of 1 MiB. */
static void test_large(struct pair *p)
{
	const size_t big = 16 * MiB, small = 4 * MiB;
	uint8_t *src = malloc(big), *dst = malloc(big);
	uint8_t *src2 = malloc(small), *dst2 = malloc(small);
	struct iovec iov[3];
	struct done w = { 0 }, w2 = { 0 }, rd[40], rd2 = { 0 };
	size_t off = 0, chunk;
	int nreads = 0, i;
	bool ok = true;
	int64_t t0;

	memset(rd, 0, sizeof(rd));
	if (!src || !dst || !src2 || !dst2) {
		CHECK(false, "shm: memory for the large transfer");
		goto out;
	}
	fill(src, big, 1);
	fill(src2, small, 2);
	memset(dst, 0, big);
	memset(dst2, 0, small);
	t0 = now_ms();
	/* Reads of odd sizes, so that they straddle the writer's pieces and the ring's end. */
	for (chunk = MiB + 12345; off < big; off += chunk, nreads++) {
		if (chunk > big - off)
			chunk = big - off;
		x_read(ctx_b, p->server, dst + off, chunk, &rd[nreads]);
	}
	iov[0] = (struct iovec){ src, 5 * MiB + 3 };
	iov[1] = (struct iovec){ src + 5 * MiB + 3, 7 * MiB };
	iov[2] = (struct iovec){ src + 12 * MiB + 3, 4 * MiB - 3 };
	x_writev(ctx_a, p->client, iov, 3, &w);
	x_read(ctx_a, p->client, dst2, small, &rd2);
	x_write(ctx_b, p->server, src2, small, &w2);
	ok &= wait_for(&w.calls, 1, 4 * WAIT_MS) && !w.status;
	for (i = 0; i < nreads; i++)
		ok &= wait_for(&rd[i].calls, 1, WAIT_MS) && !rd[i].status;
	ok &= wait_for(&rd2.calls, 1, WAIT_MS) && !rd2.status;
	ok &= wait_for(&w2.calls, 1, WAIT_MS) && !w2.status;
	t0 = now_ms() - t0;
	CHECK(ok, "shm: 16 MiB and 4 MiB cross through 1 MiB rings (%d reads, %lld ms)", nreads,
	      (long long)t0);
	for (i = 1; i < nreads; i++)
		ok &= rd[i].seq > rd[i - 1].seq;
	CHECK(ok, "shm: the reads complete in order");
	CHECK(!memcmp(src, dst, big), "shm: 16 MiB arrive intact");
	CHECK(!memcmp(src2, dst2, small), "shm: 4 MiB arrive intact the other way");
out:
	free(src);
	free(dst);
	free(src2);
	free(dst2);
}

/* Many small ops queued at once, from one task each side (xport_harness.h). */
static void test_many(struct pair *p)
{
	struct many *w = calloc(1, sizeof(*w)), *r = calloc(1, sizeof(*r));
	bool ok = true, order = true, vals = true;
	int i;

	if (!w || !r) {
		CHECK(false, "shm: memory for many ops");
		goto out;
	}
	w->c = p->client;
	r->c = p->server;
	tpu__ctx_run_sync(ctx_b, many_reads, r);
	tpu__ctx_run_sync(ctx_a, many_writes, w);
	CHECK(!w->ret && !r->ret, "shm: %d writes and %d reads queued", MANY, MANY);
	for (i = 0; i < MANY; i++) {
		ok &= wait_for(&w->d[i].calls, 1, WAIT_MS) && !w->d[i].status;
		ok &= wait_for(&r->d[i].calls, 1, WAIT_MS) && !r->d[i].status;
		vals &= r->vals[i] == 0x1000000ull + (uint64_t)i;
		if (i) {
			order &= w->d[i].seq > w->d[i - 1].seq;
			order &= r->d[i].seq > r->d[i - 1].seq;
		}
	}
	CHECK(ok, "shm: every queued op completes");
	CHECK(order, "shm: writes complete in order, and so do reads");
	CHECK(vals, "shm: each read gets its own write's bytes");
out:
	free(w);
	free(r);
}

static int memfd_with(const char *text)
{
	int fd = memfd_create("tpu-test", MFD_CLOEXEC);

	if (fd >= 0 && write(fd, text, strlen(text)) != (ssize_t)strlen(text)) {
		close(fd);
		fd = -1;
	}
	return fd;
}

static bool fd_says(int fd, const char *text)
{
	char buf[32] = { 0 };

	return fd >= 0 && pread(fd, buf, sizeof(buf) - 1, 0) == (ssize_t)strlen(text) &&
	       !strcmp(buf, text);
}

/* Descriptors among bytes: each lands where the writer put it. */
static void test_fds(struct pair *p)
{
	static const char *const names[3] = { "one", "two", "three" };
	int src[3], got[3] = { -1, -1, -1 }, i;
	char a[3] = { 0 }, b[3] = { 0 }, c[3] = { 0 };
	struct done wd[6], rd[6];
	bool ok = true;

	memset(wd, 0, sizeof(wd));
	memset(rd, 0, sizeof(rd));
	for (i = 0; i < 3; i++)
		src[i] = memfd_with(names[i]);
	/* The reader first: its recv_fd must wait for the read before it. */
	x_read(ctx_b, p->server, a, 2, &rd[0]);
	x_recv_fd(ctx_b, p->server, &got[0], &rd[1]);
	x_read(ctx_b, p->server, b, 2, &rd[2]);
	x_recv_fd(ctx_b, p->server, &got[1], &rd[3]);
	x_recv_fd(ctx_b, p->server, &got[2], &rd[4]);
	x_read(ctx_b, p->server, c, 2, &rd[5]);
	x_write(ctx_a, p->client, "A1", 2, &wd[0]);
	x_send_fd(ctx_a, p->client, src[0], &wd[1]);
	x_write(ctx_a, p->client, "B2", 2, &wd[2]);
	x_send_fd(ctx_a, p->client, src[1], &wd[3]);
	x_send_fd(ctx_a, p->client, src[2], &wd[4]);
	x_write(ctx_a, p->client, "C3", 2, &wd[5]);
	for (i = 0; i < 3; i++)
		close(src[i]);	/* send_fd took its own duplicate */
	for (i = 0; i < 6; i++) {
		ok &= wait_for(&wd[i].calls, 1, WAIT_MS) && !wd[i].status;
		ok &= wait_for(&rd[i].calls, 1, WAIT_MS) && !rd[i].status;
		if (i)
			ok &= wd[i].seq > wd[i - 1].seq && rd[i].seq > rd[i - 1].seq;
	}
	CHECK(ok, "shm: writes and send_fds, reads and recv_fds, complete in order");
	CHECK(!memcmp(a, "A1", 2) && !memcmp(b, "B2", 2) && !memcmp(c, "C3", 2),
	      "shm: the bytes around the descriptors are right");
	CHECK(fd_says(got[0], "one") && fd_says(got[1], "two") && fd_says(got[2], "three"),
	      "shm: each descriptor arrives in its place");
	CHECK(got[0] >= 0 && (fcntl(got[0], F_GETFD) & FD_CLOEXEC),
	      "shm: received descriptors are close-on-exec");
	CHECK_STATUS(x_send_fd(ctx_a, p->client, -1, &wd[0]), -EINVAL,
		     "shm: send_fd of -1 is -EINVAL");
	for (i = 0; i < 3; i++)
		if (got[i] >= 0)
			close(got[i]);
}

/* A write larger than the ring waits asleep; a late reader wakes it. */
static void test_idle_writer(struct pair *p)
{
	uint8_t *src = malloc(3 * MiB), *dst = malloc(3 * MiB);
	struct done w = { 0 }, r = { 0 };

	if (!src || !dst) {
		CHECK(false, "shm: memory for the sleeping writer");
		goto out;
	}
	fill(src, 3 * MiB, 7);
	x_write(ctx_a, p->client, src, 3 * MiB, &w);
	sleep_ms(100);		/* the writer filled the ring and went to sleep */
	CHECK(!atomic_load(&w.calls), "shm: a write larger than the ring waits");
	x_read(ctx_b, p->server, dst, 3 * MiB, &r);
	CHECK(wait_for(&w.calls, 1, 2000) && !w.status && wait_for(&r.calls, 1, 2000) &&
	      !r.status && !memcmp(src, dst, 3 * MiB),
	      "shm: a writer asleep on a full ring is woken as the reader drains it");
out:
	free(src);
	free(dst);
}

/* An idle connection (a read pending each way) lets both contexts sleep. */
static void test_idle(struct pair *p)
{
	struct done ra = { 0 }, rb = { 0 }, wa = { 0 }, wb = { 0 };
	struct idle_cpu u;
	char x = 0, y = 0;

	x_read(ctx_a, p->client, &x, 1, &ra);
	x_read(ctx_b, p->server, &y, 1, &rb);
	u = idle_cpu(ctx_a, ctx_b);
	CHECK(u.a_ms >= 0 && u.b_ms >= 0, "shm: context threads' CPU clocks");
	CHECK(u.a_ms < u.wall_ms / 2 && u.b_ms < u.wall_ms / 2,
	      "shm: idle connection: contexts used %lld and %lld ms of CPU in %lld ms",
	      u.a_ms, u.b_ms, u.wall_ms);
	CHECK(!atomic_load(&ra.calls) && !atomic_load(&rb.calls),
	      "shm: the reads are still pending");
	/*
	 * Wake each sleeper through the ring alone: nothing else happens on
	 * the reading context meanwhile.
	 */
	x_write(ctx_a, p->client, "X", 1, &wa);
	CHECK(wait_for(&rb.calls, 1, 2000) && y == 'X',
	      "shm: a sleeping reader wakes up for a byte from the peer");
	sleep_ms(50);
	x_write(ctx_b, p->server, "Y", 1, &wb);
	CHECK(wait_for(&ra.calls, 1, 2000) && x == 'Y', "shm: and the other way");
	wait_for(&wa.calls, 1, WAIT_MS);
	wait_for(&wb.calls, 1, WAIT_MS);
	/* The other half of the protocol: a writer asleep on a full ring. */
	test_idle_writer(p);
}

/*
 * Ping-pong driven from callbacks.  Across two context threads, how often
 * they sleep depends on the machine (a thread woken later than TPU_SPIN_US
 * makes its peer give up spinning too), so that count is only printed;
 * with both ends on one context it is checked.
 */
#define PP_ROUNDS	2000

static long switches(pid_t tid)
{
	char path[64], line[128];
	long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%d/status", (int)tid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1)
			break;
	fclose(f);
	return v;
}

/*
 * A voluntary switch is counted when the thread blocks again, after the
 * wake-up it handled: wait for that, up to @ms, instead of racing it.
 */
static bool switched_since(pid_t tid, long before, int ms)
{
	for (int i = 0; i < ms; i++) {
		if (before >= 0 && switches(tid) > before)
			return true;
		sleep_ms(1);
	}
	return false;
}

static void test_pingpong(struct pair *p)
{
	struct pp *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
	struct thread_info ta;
	long s0, s1;
	uint64_t answered0, answered;
	int64_t t0, took;
	bool ok;

	if (!a || !b) {
		CHECK(false, "shm: memory for the ping-pong");
		goto out;
	}
	a->c = p->client;
	a->initiator = true;
	a->left = PP_ROUNDS;
	b->c = p->server;
	b->left = PP_ROUNDS;
	tpu__ctx_run_sync(ctx_a, get_thread_info, &ta);
	s0 = switches(ta.tid);
	answered0 = tpu__ctx_spins_answered(ctx_a) + tpu__ctx_spins_answered(ctx_b);
	t0 = now_ms();
	tpu__ctx_run_sync(ctx_b, pp_start, b);
	tpu__ctx_run_sync(ctx_a, pp_start, a);
	ok = wait_for(&a->finished, 1, 4 * WAIT_MS) && wait_for(&b->finished, 1, WAIT_MS);
	took = now_ms() - t0;
	s1 = switches(ta.tid);
	CHECK(ok && !a->err && !b->err && a->in[0] == (uint8_t)(2 * PP_ROUNDS),
	      "shm: %d round trips of 64 bytes (%lld ms)", PP_ROUNDS, (long long)took);
	tap_diag("ping-pong: the connecting context slept %ld times in %d round trips", s1 - s0,
		 PP_ROUNDS);
	answered = tpu__ctx_spins_answered(ctx_a) + tpu__ctx_spins_answered(ctx_b) - answered0;
	/*
	 * The spin policy hears of them (a preemption's next back-off is
	 * short again).  Under valgrind threads take turns, and on one CPU
	 * nothing spins.
	 */
	if (RUNNING_ON_VALGRIND || usable_cpus() < 2)
		CHECK(true, "shm: the context threads report answered spins # SKIP %s",
		      RUNNING_ON_VALGRIND ? "valgrind" : "one CPU");
	else
		CHECK(answered > 0, "shm: the context threads report answered spins (%llu in %d round trips)",
		      (unsigned long long)answered, PP_ROUNDS);
out:
	free(a);
	free(b);
}

/*
 * After the spinning fast path ran (a ping-pong), each end goes to sleep
 * again and must still be woken by one byte from the peer: the fast path
 * takes no system call while the peer spins, never when it sleeps.
 */
static void test_wake_after_pingpong(struct pair *p)
{
	struct thread_info tb, ta;

	tpu__ctx_run_sync(ctx_b, get_thread_info, &tb);
	tpu__ctx_run_sync(ctx_a, get_thread_info, &ta);
	for (int i = 0; i < 3; i++) {
		struct done ra = { 0 }, rb = { 0 }, wa = { 0 }, wb = { 0 };
		char x = 0, y = 0;
		long sa, sb;

		x_read(ctx_b, p->server, &y, 1, &rb);
		x_read(ctx_a, p->client, &x, 1, &ra);
		sleep_ms(30);		/* past any spin (at most 2 ms): both threads sleep */
		sb = switches(tb.tid);
		x_write(ctx_a, p->client, "P", 1, &wa);
		CHECK(wait_for(&rb.calls, 1, 2000) && !rb.status && y == 'P',
		      "shm: after the ping-pong, a sleeping reader is woken by one byte (%d)", i);
		CHECK(switched_since(tb.tid, sb, 2000),
		      "shm: the reader's context slept and woke for it (%d)", i);
		sleep_ms(30);
		sa = switches(ta.tid);
		x_write(ctx_b, p->server, "Q", 1, &wb);
		CHECK(wait_for(&ra.calls, 1, 2000) && !ra.status && x == 'Q',
		      "shm: and the other way (%d)", i);
		CHECK(switched_since(ta.tid, sa, 2000),
		      "shm: the other context slept and woke for it (%d)", i);
		wait_for(&wa.calls, 1, WAIT_MS);
		wait_for(&wb.calls, 1, WAIT_MS);
	}
}

/* Both ends on one context: a busy pipe never lets its thread sleep (no system call to wait). */
static void test_pingpong_one_ctx(void)
{
	struct pp *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
	struct tpu__xlistener *l = NULL;
	struct acceptq q = { 0 };
	struct tpu__conn *c = NULL;
	struct thread_info ta;
	char name[64];
	long s0, s1;
	bool ok;

	snprintf(name, sizeof(name), "tpu-test-one-%d", (int)getpid());
	if (!a || !b || x_listen(XP, ctx_a, name, &q, &l, NULL, 0) ||
	    x_connect(XP, ctx_a, name, &c) ||
	    !wait_for(&q.n, 1, WAIT_MS)) {
		CHECK(false, "shm: a pair on one context");
		goto out;
	}
	a->c = c;
	a->initiator = true;
	a->left = PP_ROUNDS;
	b->c = q.conns[0];
	b->left = PP_ROUNDS;
	tpu__ctx_run_sync(ctx_a, get_thread_info, &ta);
	s0 = switches(ta.tid);
	tpu__ctx_run_sync(ctx_a, pp_start, b);
	tpu__ctx_run_sync(ctx_a, pp_start, a);
	ok = wait_for(&a->finished, 1, 4 * WAIT_MS) && wait_for(&b->finished, 1, WAIT_MS);
	s1 = switches(ta.tid);
	CHECK(ok && !a->err && !b->err && a->in[0] == (uint8_t)(2 * PP_ROUNDS),
	      "shm: %d round trips with both ends on one context", PP_ROUNDS);
	CHECK(s0 >= 0 && s1 - s0 < PP_ROUNDS / 20,
	      "shm: the busy context slept %ld times in %d round trips", s1 - s0, PP_ROUNDS);
out:
	x_close(ctx_a, c);
	if (atomic_load(&q.n))
		x_close(ctx_a, q.conns[0]);
	x_lclose(ctx_a, l);
	free(a);
	free(b);
}

/* Ops queued right after connect, before the handshake is done, wait for it. */
struct early {
	const char *name;
	struct tpu__conn *c;
	char in[8];
	struct done w, r;
	tpu_status ret;
};

static void early_connect(void *arg)
{
	struct early *e = arg;
	struct iovec iov = { "early", 5 };

	e->ret = tpu__xport_shm.connect(ctx_a, e->name, &e->c);
	if (!e->ret)
		e->ret = e->c->ops->write(e->c, &iov, 1, done_cb, &e->w) |
			 e->c->ops->read(e->c, e->in, 4, done_cb, &e->r);
}

static void test_early_ops(void)
{
	struct early e = { .name = site.addr };
	int before = atomic_load(&site.q.n);
	struct done r = { 0 }, w = { 0 };
	char buf[8] = { 0 };

	tpu__ctx_run_sync(ctx_a, early_connect, &e);
	CHECK_STATUS(e.ret, 0, "shm: connect, write and read in one go");
	if (e.ret)
		return;
	CHECK(wait_for(&site.q.n, before + 1, WAIT_MS), "shm: accepted");
	if (atomic_load(&site.q.n) > before) {
		x_read(ctx_b, site.q.conns[before], buf, 5, &r);
		x_write(ctx_b, site.q.conns[before], "late", 4, &w);
		CHECK(wait_for(&r.calls, 1, WAIT_MS) && !r.status && !strcmp(buf, "early") &&
		      wait_for(&e.w.calls, 1, WAIT_MS) && !e.w.status,
		      "shm: a write queued before the handshake arrives");
		CHECK(wait_for(&e.r.calls, 1, WAIT_MS) && !e.r.status && !memcmp(e.in, "late", 4),
		      "shm: a read queued before the handshake completes");
		wait_for(&w.calls, 1, WAIT_MS);
		x_close(ctx_b, site.q.conns[before]);
	}
	x_close(ctx_a, e.c);
}

/* Close with ops pending on both queues: each fails once with TPU_E_CLOSED. */
static void test_close_pending(void)
{
	struct pair p;
	uint8_t *big = malloc(4 * MiB);
	char buf[3][8];
	int fd = -1, i;
	struct done r[3], w = { 0 }, rf = { 0 }, pr = { 0 }, pw = { 0 };
	bool ok = true;

	memset(r, 0, sizeof(r));
	if (!big || !make_pair(&site, &p)) {
		CHECK(false, "shm: a pair for close with pending ops");
		free(big);
		return;
	}
	memset(big, 1, 4 * MiB);
	x_read(ctx_a, p.client, buf[0], 8, &r[0]);
	x_recv_fd(ctx_a, p.client, &fd, &rf);
	x_read(ctx_a, p.client, buf[1], 8, &r[1]);
	x_read(ctx_a, p.client, buf[2], 8, &r[2]);
	/* More than the ring, and the server reads only one byte: stays pending. */
	x_write(ctx_a, p.client, big, 4 * MiB, &w);
	x_read(ctx_b, p.server, buf[0], 1, &pr);
	wait_for(&pr.calls, 1, WAIT_MS);
	sleep_ms(20);
	CHECK(!atomic_load(&r[0].calls) && !atomic_load(&w.calls) && atomic_load(&pr.calls) == 1 &&
	      !pr.status, "shm: the ops are pending (the server read one byte of the write)");
	x_close(ctx_a, p.client);
	for (i = 0; i < 3; i++)
		ok &= wait_for(&r[i].calls, 1, WAIT_MS) && r[i].status == TPU_E_CLOSED;
	ok &= wait_for(&rf.calls, 1, WAIT_MS) && rf.status == TPU_E_CLOSED;
	ok &= wait_for(&w.calls, 1, WAIT_MS) && w.status == TPU_E_CLOSED;
	CHECK(ok, "shm: close fails every pending op with TPU_E_CLOSED");
	CHECK(fd == -1, "shm: a failed recv_fd stores no descriptor");
	/* The server drains what made it into the ring, then sees the close. */
	memset(&pr, 0, sizeof(pr));
	x_read(ctx_b, p.server, big, 2 * MiB, &pr);
	CHECK(wait_for(&pr.calls, 1, WAIT_MS) && pr.status == -ECONNRESET,
	      "shm: the peer's read past the bytes left fails with -ECONNRESET");
	x_write(ctx_b, p.server, "x", 1, &pw);
	CHECK(wait_for(&pw.calls, 1, WAIT_MS) && pw.status == -EPIPE,
	      "shm: the peer's write fails with -EPIPE");
	sleep_ms(50);
	ok = atomic_load(&w.calls) == 1 && atomic_load(&rf.calls) == 1 &&
	     atomic_load(&pr.calls) == 1 && atomic_load(&pw.calls) == 1;
	for (i = 0; i < 3; i++)
		ok &= atomic_load(&r[i].calls) == 1;
	CHECK(ok, "shm: every callback ran exactly once");
	x_close(ctx_b, p.server);
	free(big);
}

/* ---- reading in place (->wait, ->peek, ->take) ---------------------------- */

struct in_place {
	struct tpu__conn *c;
	size_t min;
	tpu_status queued;	/* what ->wait returned */
	struct done d;
	char hdr[5], body[8];
	bool hdr_ok, long_refused, took, drained;
	uint64_t moves;		/* tail moves of the take alone */
};

static void in_place_cb(void *arg, tpu_status st)
{
	struct in_place *ip = arg;

	if (!st) {
		struct tpu__conn *c = ip->c;
		uint64_t before = tpu__shm_rx_moves(c);

		ip->hdr_ok = c->ops->peek(c, 0, ip->hdr, 4) && !memcmp(ip->hdr, "HDR!", 4);
		/* Four bytes of the body are there, not eight. */
		ip->long_refused = !c->ops->peek(c, 4, ip->body, 8) &&
				   !c->ops->take(c, 4, ip->body, 8);
		ip->took = c->ops->take(c, 4, ip->body, 4) && !memcmp(ip->body, "body", 4);
		ip->moves = tpu__shm_rx_moves(c) - before;
		ip->drained = !c->ops->peek(c, 0, ip->hdr, 1);
	}
	done_cb(&ip->d, st);
}

static void req_wait(void *arg)
{
	struct in_place *ip = arg;

	ip->queued = ip->c->ops->wait(ip->c, ip->min, in_place_cb, ip);
}

static void req_peek_queued(void *arg)
{
	struct in_place *ip = arg;

	/* A read is queued: nothing may be read past it. */
	ip->long_refused = !ip->c->ops->peek(ip->c, 0, ip->hdr, 1) &&
			   !ip->c->ops->take(ip->c, 0, ip->hdr, 1);
}

/*
 * A wait calls back once its bytes are in; peek copies without giving
 * anything back, a peek or take past what is there is refused, a take of
 * header and body moves the tail once; bad sizes are -EINVAL; nothing is
 * read in place past a queued read; a wait the peer leaves short fails
 * with -ECONNRESET.
 */
static void test_in_place(void)
{
	struct pair p;
	struct in_place ip = { 0 }, bad = { 0 };
	struct done w = { 0 }, r = { 0 };
	char buf[4];

	if (!make_pair(&site, &p)) {
		CHECK(false, "shm: a pair for reading in place");
		return;
	}
	ip.c = bad.c = p.server;
	ip.min = 6;
	tpu__ctx_run_sync(ctx_b, req_wait, &ip);
	CHECK(!ip.queued, "shm: a wait for 6 bytes is queued");
	x_write(ctx_a, p.client, "HDR!", 4, &w);
	sleep_ms(20);
	CHECK(atomic_load(&ip.d.calls) == 0, "shm: 4 bytes do not end a wait for 6");
	x_write(ctx_a, p.client, "body", 4, &w);
	CHECK(wait_for(&ip.d.calls, 1, WAIT_MS) && !ip.d.status, "shm: 8 bytes end it");
	CHECK(ip.hdr_ok, "shm: peek copies the first bytes");
	CHECK(ip.long_refused, "shm: a peek or take past the bytes in is refused");
	CHECK(ip.took && ip.moves == 1 && ip.drained,
	      "shm: a take of header and body gives them back in one move (%llu)",
	      (unsigned long long)ip.moves);
	bad.min = 0;
	tpu__ctx_run_sync(ctx_b, req_wait, &bad);
	CHECK_STATUS(bad.queued, -EINVAL, "shm: a wait for 0 bytes");
	bad.min = TPU__XPORT_WAIT_MAX + 1;
	tpu__ctx_run_sync(ctx_b, req_wait, &bad);
	CHECK_STATUS(bad.queued, -EINVAL, "shm: a wait for more than TPU__XPORT_WAIT_MAX");
	x_read(ctx_b, p.server, buf, 4, &r);
	x_write(ctx_a, p.client, "x", 1, &w);
	sleep_ms(20);
	tpu__ctx_run_sync(ctx_b, req_peek_queued, &bad);
	CHECK(bad.long_refused, "shm: nothing is peeked or taken while a read is queued");
	x_write(ctx_a, p.client, "yzw", 3, &w);
	CHECK(wait_for(&r.calls, 1, WAIT_MS) && !r.status && !memcmp(buf, "xyzw", 4),
	      "shm: the queued read gets its bytes");
	/* The peer leaves 2 bytes and goes: a wait for 4 cannot end well. */
	memset(&ip, 0, sizeof(ip));
	ip.c = p.server;
	ip.min = 4;
	x_write(ctx_a, p.client, "ab", 2, &w);
	x_close(ctx_a, p.client);
	tpu__ctx_run_sync(ctx_b, req_wait, &ip);
	CHECK(wait_for(&ip.d.calls, 1, WAIT_MS) && ip.d.status == -ECONNRESET,
	      "shm: a wait the peer left short fails with -ECONNRESET (%d)", ip.d.status);
	x_close(ctx_b, p.server);
}

/* The peer writes and closes: its bytes are still read, then -ECONNRESET. */
static void test_eof_after_data(void)
{
	struct pair p;
	char buf[16] = { 0 };
	struct done w = { 0 }, r1 = { 0 }, r2 = { 0 }, r3 = { 0 };

	if (!make_pair(&site, &p)) {
		CHECK(false, "shm: a pair for EOF");
		return;
	}
	x_write(ctx_a, p.client, "last words", 10, &w);
	wait_for(&w.calls, 1, WAIT_MS);
	x_close(ctx_a, p.client);
	sleep_ms(20);
	x_read(ctx_b, p.server, buf, 4, &r1);
	x_read(ctx_b, p.server, buf + 4, 6, &r2);
	x_read(ctx_b, p.server, buf + 10, 1, &r3);
	CHECK(wait_for(&r2.calls, 1, WAIT_MS) && !r1.status && !r2.status &&
	      !strcmp(buf, "last words"), "shm: bytes written before the close are read");
	CHECK(wait_for(&r3.calls, 1, WAIT_MS) && r3.status == -ECONNRESET,
	      "shm: the read after them fails with -ECONNRESET");
	memset(&r3, 0, sizeof(r3));
	x_read(ctx_b, p.server, buf, 1, &r3);
	CHECK(wait_for(&r3.calls, 1, WAIT_MS) && r3.status == -ECONNRESET,
	      "shm: and so does every later read");
	x_close(ctx_b, p.server);
}

/* Closing from callbacks: its own connection, and another one (struct closer). */
static void test_close_in_callbacks(void)
{
	struct pair p1, p2, p3;
	struct closer own = { 0 }, other = { 0 };
	struct done r1 = { 0 }, r3 = { 0 }, w1 = { 0 }, w = { 0 }, w2 = { 0 };
	char b1[4], b3[4];
	int fd1 = -1;

	if (!make_pair(&site, &p1) || !make_pair(&site, &p2) || !make_pair(&site, &p3)) {
		CHECK(false, "shm: pairs for closing in callbacks");
		return;
	}
	/* p1: the first read's callback closes its own connection. */
	own.conn = p1.client;
	own.close_own = true;
	tpu__ctx_run_sync(ctx_a, queue_closer_read, &own);
	x_read(ctx_a, p1.client, b1, 4, &r1);
	x_recv_fd(ctx_a, p1.client, &fd1, &w1);
	/* p2's read callback closes p3's client, whose read is pending (same poll pass). */
	x_read(ctx_a, p3.client, b3, 4, &r3);
	other.conn = p2.client;
	other.other = p3.client;
	tpu__ctx_run_sync(ctx_a, queue_closer_read, &other);
	x_write(ctx_b, p1.server, "a", 1, &w);
	x_write(ctx_b, p2.server, "b", 1, &w2);
	CHECK(wait_for(&own.d.calls, 1, WAIT_MS) && !own.d.status && own.byte == 'a',
	      "shm: a read callback that closes its own connection");
	CHECK(wait_for(&r1.calls, 1, WAIT_MS) && r1.status == TPU_E_CLOSED &&
	      wait_for(&w1.calls, 1, WAIT_MS) && w1.status == TPU_E_CLOSED,
	      "shm: the ops behind it fail with TPU_E_CLOSED");
	CHECK(wait_for(&other.d.calls, 1, WAIT_MS) && !other.d.status && other.byte == 'b' &&
	      wait_for(&r3.calls, 1, WAIT_MS) && r3.status == TPU_E_CLOSED,
	      "shm: a callback closing another connection fails that one's read");
	sleep_ms(20);
	CHECK(atomic_load(&own.d.calls) == 1 && atomic_load(&r1.calls) == 1 &&
	      atomic_load(&w1.calls) == 1 && atomic_load(&r3.calls) == 1 &&
	      atomic_load(&other.d.calls) == 1, "shm: each called back once");
	wait_for(&w.calls, 1, WAIT_MS);
	wait_for(&w2.calls, 1, WAIT_MS);
	x_close(ctx_a, p2.client);
	x_close(ctx_b, p1.server);
	x_close(ctx_b, p2.server);
	x_close(ctx_b, p3.server);
}

/* ---- hostile or broken peers ---------------------------------------------------- */

struct raw_hs {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint64_t ring_cap;
	uint64_t rsvd;
};

#define RAW_MAGIC	0x314d4853u

static int raw_connect(const char *name)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t n = strlen(name);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	memcpy(sa.sun_path + 1, "tensorpipe-shm/", 15);
	memcpy(sa.sun_path + 16, name, n);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa,
			       (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 16 + n))) {
		close(fd);
		return -1;
	}
	return fd;
}

static bool raw_send(int sock, const void *buf, size_t len, const int *fds, unsigned int nfds)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(4 * sizeof(int))];
	} cm;
	struct iovec iov = { (void *)buf, len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };

	memset(&cm, 0, sizeof(cm));
	if (nfds) {
		struct cmsghdr *c;

		msg.msg_control = cm.b;
		msg.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
	}
	return sendmsg(sock, &msg, MSG_NOSIGNAL) == (ssize_t)len;
}

/* The listener hung up on us within ms. */
static bool raw_dropped(int sock, int ms)
{
	struct pollfd p = { .fd = sock, .events = POLLIN };
	char b[64];
	ssize_t n;

	if (poll(&p, 1, ms) != 1)
		return false;
	n = recv(sock, b, sizeof(b), MSG_DONTWAIT);
	return n == 0 || (n < 0 && errno == ECONNRESET);
}

/* A memfd as a connector makes it: two formatted rings of cap bytes, sealed unless asked. */
static int raw_memfd(uint64_t cap, bool seal, bool format)
{
	size_t len = 2 * tpu__shm_ring_size(cap);
	int fd = memfd_create("tpu-test-raw", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	void *m;

	if (fd < 0 || ftruncate(fd, (off_t)len))
		goto fail;
	if (format) {
		m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (m == MAP_FAILED)
			goto fail;
		tpu__shm_ring_init(m, cap);
		tpu__shm_ring_init((char *)m + tpu__shm_ring_size(cap), cap);
		munmap(m, len);
	}
	if (seal && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK))
		goto fail;
	return fd;
fail:
	if (fd >= 0)
		close(fd);
	return -1;
}

enum raw_case { RAW_GARBAGE, RAW_BAD_MAGIC, RAW_NO_FDS, RAW_UNSEALED, RAW_UNFORMATTED,
		RAW_PIPE_WAKE, RAW_BIG_CAP, RAW_SILENT_CLOSE, RAW_GOOD };

/* Speak the handshake by hand, wrong in one way; true if the listener hung up on us. */
static bool raw_try(enum raw_case what, bool *welcomed)
{
	struct raw_hs hs = { RAW_MAGIC, 1, 1, 4096, 0 };
	int sock = raw_connect(site.addr), fds[2] = { -1, -1 }, pp[2] = { -1, -1 };
	unsigned int nfds = 2;
	char junk[64];
	bool dropped = false;

	*welcomed = false;
	if (sock < 0)
		return false;
	fds[0] = raw_memfd(4096, what != RAW_UNSEALED, what != RAW_UNFORMATTED);
	fds[1] = eventfd(0, EFD_CLOEXEC);
	switch (what) {
	case RAW_GARBAGE:
		memset(junk, 0xa5, sizeof(junk));
		raw_send(sock, junk, sizeof(junk), NULL, 0);
		break;
	case RAW_BAD_MAGIC:
		hs.magic ^= 0x01010101;
		raw_send(sock, &hs, sizeof(hs), fds, nfds);
		break;
	case RAW_NO_FDS:
		raw_send(sock, &hs, sizeof(hs), NULL, 0);
		break;
	case RAW_PIPE_WAKE:
		if (!pipe2(pp, O_CLOEXEC)) {
			close(fds[1]);
			fds[1] = pp[1];
			pp[1] = -1;
		}
		raw_send(sock, &hs, sizeof(hs), fds, nfds);
		break;
	case RAW_BIG_CAP:
		hs.ring_cap = 1ull << 40;
		raw_send(sock, &hs, sizeof(hs), fds, nfds);
		break;
	case RAW_SILENT_CLOSE:
		break;
	default:
		raw_send(sock, &hs, sizeof(hs), fds, nfds);
		break;
	}
	if (what == RAW_GOOD) {
		struct raw_hs w = { 0 };
		union {
			struct cmsghdr h;
			char b[CMSG_SPACE(4 * sizeof(int))];
		} cm;
		struct iovec iov = { &w, sizeof(w) };
		struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b,
				      .msg_controllen = sizeof(cm.b) };
		struct pollfd pfd = { .fd = sock, .events = POLLIN };
		struct cmsghdr *c;

		if (poll(&pfd, 1, WAIT_MS) == 1 &&
		    recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) == (ssize_t)sizeof(w) &&
		    w.magic == RAW_MAGIC && w.type == 2 && (c = CMSG_FIRSTHDR(&msg)) &&
		    c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof(int))) {
			int wake;

			memcpy(&wake, CMSG_DATA(c), sizeof(int));
			close(wake);
			*welcomed = true;
		}
	} else if (what != RAW_SILENT_CLOSE) {
		dropped = raw_dropped(sock, WAIT_MS);
	}
	close(sock);
	close(fds[0]);
	close(fds[1]);
	if (pp[0] >= 0)
		close(pp[0]);
	return dropped;
}

static void test_hostile(void)
{
	static const char *const what[] = {
		"64 bytes of garbage", "a bad magic", "a hello without descriptors",
		"an unsealed memfd", "rings without headers", "a pipe for the wake descriptor",
		"a ring of 1 TiB",
	};
	int before = atomic_load(&site.q.n), i;
	bool welcomed;
	struct pair p;

	for (i = RAW_GARBAGE; i <= RAW_BIG_CAP; i++)
		CHECK(raw_try((enum raw_case)i, &welcomed), "shm: the listener drops %s", what[i]);
	raw_try(RAW_SILENT_CLOSE, &welcomed);
	sleep_ms(20);
	CHECK(atomic_load(&site.q.n) == before && !atomic_load(&site.q.errs),
	      "shm: no bad handshake reaches the accept callback");
	raw_try(RAW_GOOD, &welcomed);
	CHECK(welcomed, "shm: a correct hand-made hello is welcomed (the cases above were real)");
	CHECK(wait_for(&site.q.n, before + 1, WAIT_MS), "shm: and accepted");
	if (atomic_load(&site.q.n) > before) {
		struct done r = { 0 };
		char b;

		/* That peer is gone already: a read says so. */
		x_read(ctx_b, site.q.conns[before], &b, 1, &r);
		CHECK(wait_for(&r.calls, 1, WAIT_MS) && r.status == -ECONNRESET,
		      "shm: its connection sees the raw peer gone");
		x_close(ctx_b, site.q.conns[before]);
	}
	if (make_pair(&site, &p)) {
		struct done w = { 0 }, r = { 0 };
		char b = 0;

		x_write(ctx_a, p.client, "k", 1, &w);
		x_read(ctx_b, p.server, &b, 1, &r);
		CHECK(wait_for(&r.calls, 1, WAIT_MS) && b == 'k',
		      "shm: the listener still works after all that");
		wait_for(&w.calls, 1, WAIT_MS);
		close_pair(&p);
	} else {
		CHECK(false, "shm: the listener still works after all that");
	}
}

/* ---- peers that die --------------------------------------------------------------- */

static struct tpu_context *child_ctx;	/* reachable, for valgrind's leak check in the child */

/* The child: connect, write (or not), then exit or wait to be killed. */
static void child_main(bool write_then_wait, int ready_fd)
{
	struct tpu__conn *c;
	struct done d = { 0 };

	if (tpu_context_create(NULL, &child_ctx) || x_connect(XP, child_ctx, site.addr, &c))
		_exit(2);
	/* A write of nothing completes once connected: the handshake is done, no byte sent. */
	if (write_then_wait)
		x_write(child_ctx, c, "abc", 3, &d);
	else
		x_writev(child_ctx, c, NULL, 0, &d);
	if (!wait_for(&d.calls, 1, WAIT_MS) || d.status)
		_exit(3);
	if (!write_then_wait)
		_exit(0);
	if (write(ready_fd, "r", 1) != 1)
		_exit(4);
	for (;;)
		pause();
}

static void test_peer_exits(void)
{
	int before = atomic_load(&site.q.n), ws;
	struct done r = { 0 };
	pid_t pid;
	char b;
	int64_t t0;
	bool ok;

	pid = fork();
	if (pid == 0)
		child_main(false, -1);
	CHECK(pid > 0, "shm: fork");
	if (pid < 0)
		return;
	CHECK(wait_for(&site.q.n, before + 1, WAIT_MS), "shm: the child connects");
	if (atomic_load(&site.q.n) > before) {
		struct tpu__conn *s = site.q.conns[before];

		CHECK(s->ops->peer_pid(s) == pid, "shm: peer_pid is the child's pid");
		t0 = now_ms();
		x_read(ctx_b, s, &b, 1, &r);
		ok = wait_for(&r.calls, 1, WAIT_MS) && r.status == -ECONNRESET;
		t0 = now_ms() - t0;
		CHECK(ok, "shm: a child exits without writing: its read fails, -ECONNRESET (%lld ms)",
		      (long long)t0);
		x_close(ctx_b, s);
	}
	waitpid(pid, &ws, 0);
	CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "shm: the child connected and exited");
}

static void test_peer_killed(void)
{
	int before = atomic_load(&site.q.n), ready[2], ws;
	struct done r0 = { 0 }, r = { 0 }, w = { 0 };
	uint8_t *big = malloc(4 * MiB);
	struct pollfd pfd;
	char buf[16] = { 0 };
	int64_t t0, took;
	pid_t pid;

	if (!big || pipe2(ready, O_CLOEXEC)) {
		CHECK(false, "shm: setup for a killed peer");
		free(big);
		return;
	}
	memset(big, 3, 4 * MiB);
	pid = fork();
	if (pid == 0) {
		close(ready[0]);
		child_main(true, ready[1]);
	}
	close(ready[1]);
	pfd = (struct pollfd){ .fd = ready[0], .events = POLLIN };
	CHECK(pid > 0 && wait_for(&site.q.n, before + 1, WAIT_MS) && poll(&pfd, 1, WAIT_MS) == 1,
	      "shm: the child connects and writes");
	if (pid > 0 && atomic_load(&site.q.n) > before) {
		struct tpu__conn *s = site.q.conns[before];

		x_read(ctx_b, s, buf, 3, &r0);
		CHECK(wait_for(&r0.calls, 1, WAIT_MS) && !r0.status && !strcmp(buf, "abc"),
		      "shm: the child's bytes arrive");
		x_read(ctx_b, s, buf, 10, &r);
		/* More than the ring: waits for the child, which never reads. */
		x_write(ctx_b, s, big, 4 * MiB, &w);
		sleep_ms(50);
		CHECK(!atomic_load(&r.calls) && !atomic_load(&w.calls),
		      "shm: a read and a write wait for the live child");
		t0 = now_ms();
		kill(pid, SIGKILL);
		wait_for(&r.calls, 1, WAIT_MS);
		wait_for(&w.calls, 1, WAIT_MS);
		took = now_ms() - t0;
		CHECK_STATUS(r.status, -ECONNRESET, "shm: SIGKILLed peer: the pending read fails");
		CHECK_STATUS(w.status, -EPIPE, "shm: SIGKILLed peer: the pending write fails");
		CHECK(took < 2000, "shm: promptly (%lld ms)", (long long)took);
		x_close(ctx_b, s);
	}
	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &ws, 0);
	}
	close(ready[0]);
	free(big);
}

/* ---- the list ----------------------------------------------------------------------- */

void test_xport_shm(void)
{
	struct tpu_context_options o = { .flags = TPU_CTX_NO_KMOD };
	int fds0 = count_fds();
	struct pair p;
	char name[64];

	if (tpu_context_create(&o, &ctx_a) || tpu_context_create(&o, &ctx_b)) {
		CHECK(false, "shm: two contexts");
		tpu_context_destroy(ctx_a);
		return;
	}
	snprintf(name, sizeof(name), "tpu-test-shm-%d", (int)getpid());
	CHECK_STATUS(site_open(&site, XP, ctx_a, ctx_b, name), 0, "shm: listen on %s", name);
	test_names();
	test_compat_descriptor();
	test_addr_in_use();
	test_refused();
	if (site.l && make_pair(&site, &p)) {
		CHECK(true, "shm: connect and accept");
		test_basic(&p);
		test_large(&p);
		test_many(&p);
		test_fds(&p);
		test_idle(&p);
		test_pingpong(&p);
		test_wake_after_pingpong(&p);
		close_pair(&p);
	} else {
		CHECK(false, "shm: connect and accept");
	}
	if (site.l) {
		test_pingpong_one_ctx();
		test_early_ops();
		test_close_pending();
		test_eof_after_data();
		test_in_place();
		test_close_in_callbacks();
		test_hostile();
		test_peer_exits();
		test_peer_killed();
	}
	site_close(&site);
	CHECK(!atomic_load(&site.q.errs), "shm: the listener never reported an error");
	tpu_context_destroy(ctx_a);
	tpu_context_destroy(ctx_b);
	CHECK(count_fds() == fds0, "shm: no descriptor leaked (%d before, %d after)", fds0,
	      count_fds());
}
