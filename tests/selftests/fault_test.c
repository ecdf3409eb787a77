// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Fault injection: every command of the module run again and again while
 * failslab and fail_page_alloc make the kernel's allocations fail for this
 * task (probability and interval varied from a seed).  A failed command
 * must fail cleanly: an errno back, nothing half done (a failed SEND posts
 * nothing, a failed RECV takes nothing), and once everything is closed the
 * module's counters are back where they started.  The VM runner then
 * unloads the module, which fails if anything is still held.
 *
 * Needs a kernel with CONFIG_FAILSLAB, CONFIG_FAIL_PAGE_ALLOC and
 * CONFIG_FAULT_INJECTION_DEBUG_FS (make check-debug builds one) and root;
 * skips elsewhere.  TP_FAULT_ITERS (default 600) and TP_FAULT_SEED (default
 * 1) choose the run; it stops early, saying so, after TP_FAULT_SECONDS
 * (default 1200) so that it ends within its time limit.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "tp_test_require.h"
#include "tp_test_uring.h"

#define FAILSLAB	"/sys/kernel/debug/failslab"
#define FAIL_PAGE	"/sys/kernel/debug/fail_page_alloc"
#define LEN		(64 * TPT_KIB)
/* Enough that "times" counts every failure injected in one run. */
#define TIMES		100000000L
#define SETTLE_MS	10000

static const char *const counters[] = {
	"pinned_pages", "alloc_pages", "pending_slots", "regions",
	"endpoints", "domains",
};

static int knob_write(const char *dir, const char *name, const char *val)
{
	char path[128];
	int fd, ret = 0;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (write(fd, val, strlen(val)) < 0)
		ret = -errno;
	close(fd);
	return ret;
}

static int knob_writel(const char *dir, const char *name, long val)
{
	char buf[32];

	snprintf(buf, sizeof(buf), "%ld", val);
	return knob_write(dir, name, buf);
}

static long knob_read(const char *dir, const char *name)
{
	char path[128], buf[32] = "";
	long val = -1;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "re");
	if (!f)
		return -1;
	if (fgets(buf, sizeof(buf), f))
		val = strtol(buf, NULL, 0);
	fclose(f);
	return val;
}

/* Failures aimed at tasks with make-it-fail set; the caller picks odds. */
static int knobs_arm(const char *dir, bool page_alloc)
{
	int ret = knob_write(dir, "task-filter", "Y");

	if (!ret)
		ret = knob_write(dir, "verbose", "0");
	if (!ret)
		ret = knob_writel(dir, "times", TIMES);
	if (!ret)
		ret = knob_writel(dir, "space", 0);
	/* Sleeping allocations too: they are most of the module's. */
	if (!ret)
		ret = knob_write(dir, "ignore-gfp-wait", "N");
	if (!ret && page_alloc)
		ret = knob_write(dir, "ignore-gfp-highmem", "N");
	return ret;
}

static void knobs_odds(const char *dir, int probability, int interval)
{
	knob_writel(dir, "probability", probability);
	knob_writel(dir, "interval", interval);
}

static void knobs_disarm(const char *dir)
{
	knob_writel(dir, "probability", 0);
	knob_write(dir, "task-filter", "N");
	knob_writel(dir, "times", 1);
}

/* Injection applies to this task only while make-it-fail is 1. */
static int inject_fd = -1;

static void inject(bool on)
{
	if (pwrite(inject_fd, on ? "1" : "0", 1, 0) != 1)
		abort();	/* cannot stop injecting: nothing else is safe */
}

/* Per-run tallies: which errno the injected failures came back as. */
struct tally {
	unsigned long calls;
	unsigned long failed;
	unsigned long by_errno[256];
	char bad[256];		/* first inconsistency seen, if any */
};

static void note_bad(struct tally *t, const char *what, int ret)
{
	if (!t->bad[0])
		snprintf(t->bad, sizeof(t->bad), "%s: %d (%s)", what, ret,
			 ret < 0 ? strerror(-ret) : "");
}

/* One call with injection on; its result tallied. */
static int faulty(struct tally *t, int fd, unsigned long cmd, void *arg)
{
	int ret;

	inject(true);
	ret = ioctl(fd, cmd, arg) ? -errno : 0;
	inject(false);
	t->calls++;
	if (ret) {
		t->failed++;
		t->by_errno[-ret & 255]++;
	}
	return ret;
}

static int faulty_open(struct tally *t)
{
	int fd;

	inject(true);
	fd = open(TP_DEVICE_PATH, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		fd = -errno;
	inject(false);
	t->calls++;
	if (fd < 0) {
		t->failed++;
		t->by_errno[-fd & 255]++;
	}
	return fd;
}

struct world {
	int prod, cons, domain;
	uint8_t *sbuf, *dbuf;
	uint32_t src, dst;
	bool have_src, have_dst;
};

static void world_close(struct world *w)
{
	if (w->prod >= 0)
		close(w->prod);
	if (w->cons >= 0)
		close(w->cons);
	if (w->domain >= 0)
		close(w->domain);
	w->prod = w->cons = w->domain = -1;
}

/*
 * A SEND that failed posted nothing, a RECV that failed took nothing: check
 * with a non-blocking RECV, injection off, whether the key is there.
 */
static bool key_present(struct world *w, const char *key)
{
	uint64_t len = 0;

	return tpt_recv_nonblock(w->cons, key, w->dst, 0, LEN, &len) == 0;
}

/* Everything a producer and a consumer do, each step under injection. */
static void scenario(struct tally *t, struct world *w, struct io_uring *ring)
{
	struct tp_domain_create dc = { 0 };
	struct tp_domain_attach da = { 0 };
	struct tp_region_register rr = { 0 };
	struct tp_region_alloc ra = { .len = LEN };
	struct tp_send s;
	struct tp_recv r;
	struct tp_cancel c;
	struct tpt_cqe cqe;
	int ret;

	w->prod = faulty_open(t);
	w->cons = faulty_open(t);
	if (w->prod < 0 || w->cons < 0)
		return;
	if (faulty(t, w->prod, TP_IOC_DOMAIN_CREATE, &dc))
		return;
	w->domain = dc.fd;
	da.fd = w->domain;
	if (faulty(t, w->prod, TP_IOC_DOMAIN_ATTACH, &da) ||
	    faulty(t, w->cons, TP_IOC_DOMAIN_ATTACH, &da))
		return;

	rr.addr = (uintptr_t)w->sbuf;
	rr.len = LEN;
	rr.access = TP_ACCESS_READ;
	w->have_src = !faulty(t, w->prod, TP_IOC_REGION_REGISTER, &rr);
	w->src = rr.handle;
	rr.addr = (uintptr_t)w->dbuf;
	rr.access = TP_ACCESS_WRITE;
	w->have_dst = !faulty(t, w->cons, TP_IOC_REGION_REGISTER, &rr);
	w->dst = rr.handle;
	if (!w->have_src || !w->have_dst)
		return;

	/* SEND then RECV: a failed SEND leaves no key behind. */
	tpt_send_prep(&s, "a", 1, w->src, 0, LEN, 1);
	ret = faulty(t, w->prod, TP_IOC_SEND, &s);
	if (ret) {
		if (key_present(w, "a"))
			note_bad(t, "failed SEND left its key", ret);
	} else {
		memset(w->dbuf, 0, LEN);
		tpt_recv_prep(&r, "a", 1, w->dst, 0, LEN, 0);
		r.flags = TP_RECV_NONBLOCK;
		ret = faulty(t, w->cons, TP_IOC_RECV, &r);
		if (ret && !key_present(w, "a"))
			note_bad(t, "failed RECV lost the tensor", ret);
		if (!tpt_check(w->dbuf, LEN, TPT_SEED_SRC))
			note_bad(t, "RECV delivered wrong bytes", ret);
	}

	/* DONATE RECV: a new region for the consumer, or nothing taken. */
	tpt_send_prep(&s, "d", 1, w->src, 0, LEN, 2);
	if (!faulty(t, w->prod, TP_IOC_SEND, &s)) {
		tpt_recv_prep(&r, "d", 1, 0, 0, LEN, 0);
		r.flags = TP_RECV_DONATE | TP_RECV_NONBLOCK;
		ret = faulty(t, w->cons, TP_IOC_RECV, &r);
		if (ret && !key_present(w, "d"))
			note_bad(t, "failed DONATE RECV lost the tensor", ret);
	}

	/* An allocated region donated by the producer. */
	if (!faulty(t, w->prod, TP_IOC_REGION_ALLOC, &ra)) {
		tpt_send_prep(&s, "g", 1, ra.handle, 0, LEN, 3);
		s.flags = TP_SEND_DONATE;
		ret = faulty(t, w->prod, TP_IOC_SEND, &s);
		if (!ret) {
			tpt_recv_prep(&r, "g", 1, 0, 0, LEN, 0);
			r.flags = TP_RECV_DONATE | TP_RECV_NONBLOCK;
			ret = faulty(t, w->cons, TP_IOC_RECV, &r);
			if (ret && !key_present(w, "g"))
				note_bad(t, "failed donation lost the pages", ret);
		}
	}

	/* io_uring: a waiting RECV, then its SEND, then CANCEL and ABORT. */
	if (ring) {
		tpt_recv_prep(&r, "u", 1, w->dst, 0, LEN, TPT_SAFETY_TIMEOUT_NS);
		inject(true);
		ret = tpt_uring_recv(ring, w->cons, &r, 7);
		inject(false);
		t->calls++;
		/* An SQE that io_uring_enter() could not take stays queued. */
		if (ret < 0)
			ret = tpt_uring_submit(ring) == 1 ? 0 : -EIO;
		if (ret >= 0) {
			tpt_send_prep(&s, "u", 1, w->src, 0, LEN, 8);
			if (faulty(t, w->prod, TP_IOC_SEND, &s)) {
				tpt_cancel_prep(&c, "u", 1, TP_CANCEL_RECV);
				tpt_ioctl(w->cons, TP_IOC_CANCEL, &c);
			}
			ret = tpt_uring_wait(ring, &cqe, 20000);
			if (ret)
				note_bad(t, "io_uring RECV never completed", ret);
		}
	}
	tpt_send_prep(&s, "c", 1, w->src, 0, LEN, 9);
	if (!faulty(t, w->prod, TP_IOC_SEND, &s)) {
		tpt_cancel_prep(&c, "c", 1, TP_CANCEL_SEND);
		faulty(t, w->prod, TP_IOC_CANCEL, &c);
	}
	faulty(t, w->prod, TP_IOC_ABORT, &(struct tp_abort){ .status = -EPIPE });
}

static unsigned int next_rand(unsigned int *state)
{
	*state = *state * 1103515245u + 12345u;
	return *state >> 16;
}

static long env_long(const char *name, long def)
{
	const char *v = getenv(name);

	return v && *v ? strtol(v, NULL, 0) : def;
}

/* No state of its own: the fixture is there for the longer time limit. */
FIXTURE(fault)
{
	int unused;
};

FIXTURE_SETUP(fault)
{
	self->unused = 0;
}

FIXTURE_TEARDOWN(fault)
{
}

/*
 * A debug kernel under emulation runs a round in about 0.1 s; the harness's
 * default of 30 s would cut a few thousand rounds short.
 */
TEST_F_TIMEOUT(fault, commands_fail_cleanly_under_injected_allocation_failures, 1800)
{
	static const int probability[] = { 2, 5, 10, 25, 50 };
	static const int interval[] = { 1, 1, 2, 3, 7 };
	long iters = env_long("TP_FAULT_ITERS", 600);
	uint64_t stop = tpt_now_ns() + env_long("TP_FAULT_SECONDS", 1200) * TPT_NSEC_PER_SEC;
	unsigned int seed = env_long("TP_FAULT_SEED", 1), state;
	int64_t base[ARRAY_SIZE(counters)];
	long slab_left, page_left, injected;
	struct io_uring ring;
	bool have_ring;
	struct tally *t;
	long i;
	size_t k;

	if (access(FAILSLAB, W_OK) || access(FAIL_PAGE, W_OK))
		SKIP(return, "no failslab/fail_page_alloc in debugfs (needs root and CONFIG_FAILSLAB, CONFIG_FAIL_PAGE_ALLOC, CONFIG_FAULT_INJECTION_DEBUG_FS)");
	TPT_REQUIRE_DEBUGFS();
	TPT_REQUIRE_PIN(4 * LEN);
	t = calloc(1, sizeof(*t));
	ASSERT_NE(NULL, t);
	inject_fd = open("/proc/thread-self/make-it-fail", O_WRONLY | O_CLOEXEC);
	ASSERT_LE(0, inject_fd);
	for (k = 0; k < ARRAY_SIZE(counters); k++) {
		ASSERT_EQ(0, tpt_stat(counters[k], &base[k]));
	}
	have_ring = !tpt_ring_init(&ring, 8, TPT_RING_FLAGS);
	ASSERT_EQ(0, knobs_arm(FAILSLAB, false));
	ASSERT_EQ(0, knobs_arm(FAIL_PAGE, true));

	state = seed;
	for (i = 0; i < iters && !t->bad[0] && tpt_now_ns() < stop; i++) {
		struct world w = { .prod = -1, .cons = -1, .domain = -1 };
		int p = probability[next_rand(&state) % ARRAY_SIZE(probability)];
		int n = interval[next_rand(&state) % ARRAY_SIZE(interval)];
		int q = probability[next_rand(&state) % ARRAY_SIZE(probability)];

		knobs_odds(FAILSLAB, p, n);
		knobs_odds(FAIL_PAGE, q, n);
		w.sbuf = tpt_map(LEN);
		w.dbuf = tpt_map(LEN);
		ASSERT_TRUE(w.sbuf && w.dbuf);
		tpt_fill(w.sbuf, LEN, TPT_SEED_SRC);
		scenario(t, &w, have_ring ? &ring : NULL);
		world_close(&w);
		tpt_unmap(w.sbuf, LEN);
		tpt_unmap(w.dbuf, LEN);
	}
	knobs_odds(FAILSLAB, 0, 1);
	knobs_odds(FAIL_PAGE, 0, 1);
	slab_left = knob_read(FAILSLAB, "times");
	page_left = knob_read(FAIL_PAGE, "times");
	knobs_disarm(FAILSLAB);
	knobs_disarm(FAIL_PAGE);
	close(inject_fd);
	if (have_ring)
		io_uring_queue_exit(&ring);

	injected = (TIMES - slab_left) + (TIMES - page_left);
	if (i < iters && !t->bad[0])
		TH_LOG("stopped after %ld of %ld rounds: TP_FAULT_SECONDS ran out", i, iters);
	TH_LOG("seed %u, %ld iterations: %lu calls, %lu failed, %ld failures injected (%ld slab, %ld page)",
	       seed, i, t->calls, t->failed, injected, TIMES - slab_left,
	       TIMES - page_left);
	for (k = 0; k < ARRAY_SIZE(t->by_errno); k++) {
		if (t->by_errno[k])
			TH_LOG("  %s: %lu", strerror(k), t->by_errno[k]);
	}
	EXPECT_EQ('\0', t->bad[0]) TH_LOG("inconsistent after a failure: %s",
					  t->bad);
	/* Each failed command came back as an errno, and it was injected. */
	EXPECT_LT(0, injected);
	EXPECT_LT(0UL, t->failed);
	for (k = 0; k < ARRAY_SIZE(counters); k++) {
		EXPECT_EQ(0, tpt_wait_stat(counters[k], base[k], SETTLE_MS))
			TH_LOG("%s did not return to %lld", counters[k],
			       (long long)base[k]);
	}
	free(t);
}

TEST_HARNESS_MAIN
