// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Selftest helpers: debugfs counters, module parameters, RLIMIT_MEMLOCK and
 * privileges.
 */
#include "tp_test_util.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define NOBODY_ID		65534
#define CAP_IPC_LOCK_BIT	14

bool tpt_have_debugfs(void)
{
	return access(TPT_DEBUGFS_DIR "/stats", R_OK) == 0;
}

/* Lines are "name value"; a colon after the name is tolerated. */
static int read_named_value(const char *path, const char *name, int64_t *val)
{
	size_t nlen = strlen(name);
	char line[256];
	int ret = -ENODATA;
	FILE *f;

	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		char *p = line, *end;

		while (*p == ' ' || *p == '\t')
			p++;
		if (strncmp(p, name, nlen))
			continue;
		p += nlen;
		if (*p == ':')
			p++;
		if (*p != ' ' && *p != '\t')
			continue;
		errno = 0;
		*val = strtoll(p, &end, 0);
		if (errno || end == p)
			ret = -EPROTO;
		else
			ret = 0;
		break;
	}
	fclose(f);
	return ret;
}

int tpt_stat(const char *name, int64_t *val)
{
	return read_named_value(TPT_DEBUGFS_DIR "/stats", name, val);
}

static void domain_path(char *buf, size_t size, uint64_t id)
{
	snprintf(buf, size, TPT_DEBUGFS_DIR "/domain-%" PRIu64, id);
}

int tpt_domain_stat(uint64_t id, const char *name, int64_t *val)
{
	char path[128];

	domain_path(path, sizeof(path), id);
	return read_named_value(path, name, val);
}

static int wait_value(const char *path, const char *name, int64_t want,
		      int timeout_ms)
{
	uint64_t deadline = tpt_now_ns() + timeout_ms * TPT_NSEC_PER_MSEC;
	int64_t val;
	int ret;

	for (;;) {
		ret = read_named_value(path, name, &val);
		if (ret)
			return ret;
		if (val == want)
			return 0;
		if (tpt_now_ns() > deadline)
			return -ETIMEDOUT;
		tpt_sleep_ms(10);
	}
}

int tpt_wait_stat(const char *name, int64_t want, int timeout_ms)
{
	return wait_value(TPT_DEBUGFS_DIR "/stats", name, want, timeout_ms);
}

int tpt_wait_domain_stat(uint64_t id, const char *name, int64_t want,
			 int timeout_ms)
{
	char path[128];

	domain_path(path, sizeof(path), id);
	return wait_value(path, name, want, timeout_ms);
}

int tpt_wait_waiters(uint64_t domain_id, int64_t n)
{
	char path[128];

	domain_path(path, sizeof(path), domain_id);
	if (access(path, R_OK) == 0)
		return wait_value(path, "waiters", n, 10000);
	tpt_sleep_ms(300);
	return 0;
}

static int param_path(char *buf, size_t size, const char *name)
{
	int n = snprintf(buf, size, TPT_PARAM_DIR "/%s", name);

	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

int tpt_param_get(const char *name, uint64_t *val)
{
	unsigned long long v;
	char path[256];
	FILE *f;
	int ret;

	ret = param_path(path, sizeof(path), name);
	if (ret)
		return ret;
	f = fopen(path, "re");
	if (!f)
		return -errno;
	ret = fscanf(f, "%llu", &v) == 1 ? 0 : -EPROTO;
	fclose(f);
	if (!ret)
		*val = v;
	return ret;
}

int tpt_param_set(const char *name, uint64_t val)
{
	char path[256], text[32];
	int fd, len, ret;

	ret = param_path(path, sizeof(path), name);
	if (ret)
		return ret;
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	len = snprintf(text, sizeof(text), "%" PRIu64 "\n", val);
	ret = write(fd, text, len) == len ? 0 : -errno;
	if (close(fd) && !ret)
		ret = -errno;
	return ret;
}

int tpt_params_set(struct tpt_params *s, const char *name, uint64_t val)
{
	uint64_t old;
	int i, ret;

	for (i = 0; i < s->n; i++)
		if (!strcmp(s->saved[i].name, name))
			return tpt_param_set(name, val);
	if (s->n == TPT_MAX_SAVED_PARAMS ||
	    strlen(name) >= sizeof(s->saved[0].name))
		return -E2BIG;
	ret = tpt_param_get(name, &old);
	if (ret)
		return ret;
	ret = tpt_param_set(name, val);
	if (ret)
		return ret;
	strcpy(s->saved[s->n].name, name);
	s->saved[s->n].old = old;
	s->n++;
	return 0;
}

void tpt_params_restore(struct tpt_params *s)
{
	while (s->n > 0) {
		s->n--;
		tpt_param_set(s->saved[s->n].name, s->saved[s->n].old);
	}
}

void tpt_raise_memlock(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_MEMLOCK, &rl);
	}
}

static bool have_cap_ipc_lock(void)
{
	unsigned long long caps = 0;
	char line[256];
	bool found = false;
	FILE *f;

	f = fopen("/proc/self/status", "re");
	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "CapEff: %llx", &caps) == 1) {
			found = true;
			break;
		}
	fclose(f);
	return found && (caps & (1ULL << CAP_IPC_LOCK_BIT));
}

/*
 * @bytes is what one process of a test pins at most; headroom covers the
 * test's second endpoint and page rounding.
 */
bool tpt_can_pin(uint64_t bytes)
{
	struct rlimit rl;

	if (have_cap_ipc_lock())
		return true;
	if (getrlimit(RLIMIT_MEMLOCK, &rl))
		return false;
	return rl.rlim_cur == RLIM_INFINITY ||
	       rl.rlim_cur >= bytes + 64 * TPT_KIB;
}

int tpt_drop_privileges(uint64_t memlock_bytes)
{
	struct rlimit rl = { .rlim_cur = memlock_bytes,
			     .rlim_max = memlock_bytes };

	if (setrlimit(RLIMIT_MEMLOCK, &rl))
		return -errno;
	if (geteuid() == 0) {
		if (setgroups(0, NULL) || setgid(NOBODY_ID) ||
		    setuid(NOBODY_ID))
			return -errno;
	}
	/* CAP_IPC_LOCK would bypass the limit this child is about to test. */
	return have_cap_ipc_lock() ? -EPERM : 0;
}

long tpt_vmpin_kb(void)
{
	char line[256];
	long kb = -ENODATA;
	FILE *f;

	f = fopen("/proc/self/status", "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmPin: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}
