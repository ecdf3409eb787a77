// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Memory cgroups: the pages of allocated regions are charged to the
 * allocating task's cgroup v2 memory controller.  A forked child moves
 * itself into a fresh cgroup with a small memory.max, allocates, and
 * reports memory.current at each step; the parent checks the figures and
 * that the child was refused (-ENOMEM), not killed, beyond the limit.
 *
 * Needs root and a writable cgroup2 hierarchy whose root offers the memory
 * controller (run.sh mounts cgroup2 when nothing has); skips otherwise.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "tp_test_require.h"

#define LIMIT		(32 * TPT_MIB)
#define REGION		(8 * TPT_MIB)
#define STEP		(4 * TPT_MIB)
#define BIG		(64 * TPT_MIB)
/* What the child's own faults and slabs may add between two readings. */
#define SLACK		(2 * TPT_MIB)
#define CHILD_MS	60000

/* Find the cgroup2 mount point in @dir; 0 or -ENOENT. */
static int cgroup2_root(char *dir, size_t size)
{
	char line[4096], mnt[1000], type[64];
	FILE *f = fopen("/proc/self/mounts", "re");
	int ret = -ENOENT;

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%*s %999s %63s", mnt, type) == 2 &&
		    !strcmp(type, "cgroup2")) {
			snprintf(dir, size, "%s", mnt);
			ret = 0;
			break;
		}
	fclose(f);
	return ret;
}

static int read_text(const char *dir, const char *file, char *buf,
		     size_t size)
{
	char path[PATH_MAX];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, size - 1);
	if (n < 0)
		n = -errno;
	close(fd);
	if (n < 0)
		return n;
	buf[n] = '\0';
	return 0;
}

static int write_text(const char *dir, const char *file, const char *text)
{
	char path[PATH_MAX];
	int fd, ret = 0;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (write(fd, text, strlen(text)) < 0)
		ret = -errno;
	close(fd);
	return ret;
}

static long long read_current(const char *dir)
{
	char buf[64];
	int ret = read_text(dir, "memory.current", buf, sizeof(buf));

	return ret ? ret : atoll(buf);
}

/* Whether the word @word is in the space-separated list @list. */
static bool has_word(const char *list, const char *word)
{
	size_t n = strlen(word);
	const char *p = list;

	while ((p = strstr(p, word))) {
		if ((p == list || p[-1] == ' ') &&
		    (p[n] == '\0' || p[n] == ' ' || p[n] == '\n'))
			return true;
		p += n;
	}
	return false;
}

/* What the child saw, step by step. */
struct memcg_report {
	int step;		/* the last step reached; 0 when all passed */
	int err;		/* -errno of a step that failed unexpectedly */
	long long before;	/* memory.current before anything */
	long long with_region;	/* after allocating REGION */
	int big_ret;		/* allocating BIG: expected -ENOMEM */
	long long after_big;	/* after that refusal */
	long long released;	/* after releasing REGION */
	int steps;		/* STEP-sized regions until refused */
	int step_ret;		/* what refused the last of them */
	long long exported;	/* REGION exported, its handle released */
	long long closed;	/* ... and the dma-buf closed */
	int dmabuf;		/* 1 when the module exports dma-bufs */
};

/* The child: join @cg, allocate, report.  Returns the exit status. */
static int memcg_child(const char *cg, struct memcg_report *r)
{
	struct tp_region_export e = { 0 };
	struct tp_info info;
	uint32_t h, hs[LIMIT / STEP + 8];
	char pid[32];
	int fd, i;

	r->step = 1;
	snprintf(pid, sizeof(pid), "%d", getpid());
	r->err = write_text(cg, "cgroup.procs", pid);
	if (r->err)
		return 1;
	r->step = 2;
	fd = tpt_open();
	if (fd < 0 || tpt_get_info(fd, &info)) {
		r->err = fd < 0 ? fd : -EIO;
		return 1;
	}
	r->dmabuf = !!(info.features & TP_FEAT_DMABUF);
	r->before = read_current(cg);
	r->step = 3;
	r->err = tpt_alloc(fd, REGION, &h, NULL);
	if (r->err)
		return 1;
	r->with_region = read_current(cg);
	/* Beyond memory.max; with the OOM killer this child would die here. */
	r->step = 4;
	r->big_ret = tpt_alloc(fd, BIG, NULL, NULL);
	r->after_big = read_current(cg);
	r->step = 5;
	r->err = tpt_release(fd, h);
	if (r->err)
		return 1;
	r->released = read_current(cg);
	/* Many small ones: the limit bounds their sum too. */
	r->step = 6;
	for (i = 0; i < (int)(sizeof(hs) / sizeof(hs[0])); i++) {
		r->step_ret = tpt_alloc(fd, STEP, &hs[i], NULL);
		if (r->step_ret)
			break;
	}
	r->steps = i;
	while (i--)
		tpt_release(fd, hs[i]);
	/* An exported region keeps its pages, and their charge, until closed. */
	if (r->dmabuf) {
		r->step = 7;
		r->err = tpt_alloc(fd, REGION, &e.handle, NULL);
		if (!r->err)
			r->err = tpt_ioctl(fd, TP_IOC_REGION_EXPORT, &e);
		if (!r->err)
			r->err = tpt_release(fd, e.handle);
		if (r->err)
			return 1;
		r->exported = read_current(cg);
		close(e.fd);
		r->closed = read_current(cg);
	}
	close(fd);
	r->step = 0;
	return 0;
}

FIXTURE(memcg)
{
	char root[1024];
	char cg[PATH_MAX];
	bool made;
	bool enabled_memory;
};

FIXTURE_SETUP(memcg)
{
	self->made = false;
	self->enabled_memory = false;
}

FIXTURE_TEARDOWN(memcg)
{
	int i;

	/* The child is gone; its cgroup may take a moment to empty. */
	for (i = 0; self->made && i < 100; i++) {
		if (!rmdir(self->cg) || errno == ENOENT)
			break;
		tpt_sleep_ms(20);
	}
	if (self->enabled_memory)
		write_text(self->root, "cgroup.subtree_control", "-memory");
}

/* Make the test's cgroup with memory.max = LIMIT, or say why not. */
static const char *memcg_make(FIXTURE_DATA(memcg) *self)
{
	char buf[512];
	int ret;

	if (geteuid() != 0)
		return "needs root to create a cgroup";
	if (cgroup2_root(self->root, sizeof(self->root)))
		return "no cgroup2 hierarchy mounted";
	if (!read_text("/proc", "cmdline", buf, sizeof(buf)) &&
	    strstr(buf, "cgroup.memory=nokmem"))
		return "kernel memory accounting is off (cgroup.memory=nokmem)";
	if (read_text(self->root, "cgroup.controllers", buf, sizeof(buf)) ||
	    !has_word(buf, "memory"))
		return "the cgroup2 root offers no memory controller";
	if (read_text(self->root, "cgroup.subtree_control", buf, sizeof(buf)))
		return "cannot read cgroup.subtree_control";
	if (!has_word(buf, "memory")) {
		if (write_text(self->root, "cgroup.subtree_control", "+memory"))
			return "cannot enable the memory controller below the cgroup2 root";
		self->enabled_memory = true;
	}
	snprintf(self->cg, sizeof(self->cg), "%s/tp-memcg-%d", self->root,
		 getpid());
	if (mkdir(self->cg, 0755))
		return "cannot create a cgroup (read-only or delegated hierarchy)";
	self->made = true;
	snprintf(buf, sizeof(buf), "%llu", LIMIT);
	ret = write_text(self->cg, "memory.max", buf);
	if (ret)
		return "cannot set memory.max";
	return NULL;
}

TEST_F(memcg, allocated_regions_are_charged_and_bounded_by_memory_max)
{
	struct memcg_report r = { .step = -1 };
	const char *why;
	int pfd[2], status = 0;
	pid_t pid;

	why = memcg_make(self);
	if (why)
		SKIP(return, "%s", why);
	tpt_raise_memlock();
	if (!tpt_can_pin(BIG))
		SKIP(return, "RLIMIT_MEMLOCK below %llu bytes; run as root", BIG);
	ASSERT_EQ(0, pipe2(pfd, O_CLOEXEC));
	pid = tpt_fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		int rc;

		close(pfd[0]);
		rc = memcg_child(self->cg, &r);
		tpt_write_all(pfd[1], &r, sizeof(r));
		_exit(rc);
	}
	close(pfd[1]);
	memset(&r, 0, sizeof(r));
	r.step = -1;
	tpt_read_all(pfd[0], &r, sizeof(r), CHILD_MS);
	close(pfd[0]);
	ASSERT_EQ(0, tpt_wait_child(pid, CHILD_MS, &status));
	ASSERT_FALSE(WIFSIGNALED(status)) {
		TH_LOG("the child was killed by signal %d at step %d: the OOM killer, when an allocation beyond memory.max is not refused",
		       WTERMSIG(status), r.step);
	}
	ASSERT_EQ(0, r.step) TH_LOG("step %d failed: %s", r.step, strerror(-r.err));
	ASSERT_EQ(0, WEXITSTATUS(status));
	TH_LOG("memory.current: %lld before, %lld with %llu MiB, %lld after the refusal, %lld released; %d regions of %llu MiB",
	       r.before, r.with_region, REGION / TPT_MIB, r.after_big,
	       r.released, r.steps, STEP / TPT_MIB);

	/* The region's pages are in the cgroup's memory. */
	EXPECT_LE(r.before + (long long)REGION, r.with_region);
	EXPECT_GE(r.before + (long long)(REGION + SLACK), r.with_region);
	/* Beyond the limit the ioctl fails; its partial work is undone. */
	EXPECT_EQ(-ENOMEM, r.big_ret);
	EXPECT_GE(r.with_region + (long long)SLACK, r.after_big);
	/* Freed pages leave the cgroup. */
	EXPECT_GE(r.with_region - (long long)REGION + (long long)SLACK,
		  r.released);
	/* The limit bounds the sum of many regions. */
	EXPECT_EQ(-ENOMEM, r.step_ret);
	EXPECT_GE((int)(LIMIT / STEP), r.steps);
	EXPECT_LE(1, r.steps);
	if (r.dmabuf) {
		/* The dma-buf holds the pages and so their charge... */
		EXPECT_LE(r.released + (long long)REGION, r.exported + (long long)SLACK);
		/* ...until its last descriptor is closed. */
		EXPECT_LE(r.closed + (long long)REGION, r.exported + (long long)SLACK);
	}
}

TEST_HARNESS_MAIN
