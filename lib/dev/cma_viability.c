// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The cma rendezvous's viability probe.  A failure must read as a reason a
 * person can act on ("Yama ptrace_scope is 3"), not as a bare EPERM from
 * the first transfer, so every limit is looked at before a table is used.
 */
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "cma_viability.h"
#include "dev.h"

#define CAP_SYS_PTRACE_BIT 19	/* linux/capability.h */

static int read_int_file(const char *path, int fallback)
{
	FILE *f = fopen(path, "re");
	int v = fallback;

	if (!f)
		return fallback;
	if (fscanf(f, "%d", &v) != 1)
		v = fallback;
	fclose(f);
	return v;
}

static void read_status(struct tpu__cma_facts *f)
{
	FILE *fp = fopen("/proc/self/status", "re");
	unsigned long long caps;
	char line[256];
	int mode;

	f->cap_sys_ptrace = false;
	f->seccomp = -1;
	if (!fp)
		return;
	while (fgets(line, sizeof(line), fp)) {
		if (sscanf(line, "CapEff: %llx", &caps) == 1)
			f->cap_sys_ptrace = (caps >> CAP_SYS_PTRACE_BIT) & 1;
		else if (sscanf(line, "Seccomp: %d", &mode) == 1)
			f->seccomp = mode;
	}
	fclose(fp);
}

void tpu__cma_facts_gather(struct tpu__cma_facts *f)
{
	uint64_t src = TPU__CMA_PROBE_WORD, dst = 0;
	struct iovec l = { .iov_base = &dst, .iov_len = sizeof(dst) };
	struct iovec r = { .iov_base = &src, .iov_len = sizeof(src) };

	/* The call itself, on ourselves, is what seccomp and the kernel judge. */
	if (process_vm_readv(getpid(), &l, 1, &r, 1, 0) != (ssize_t)sizeof(dst))
		f->self_read = tpu__errno();
	else
		f->self_read = dst == src ? 0 : -EIO;
	f->yama_scope = read_int_file("/proc/sys/kernel/yama/ptrace_scope", -1);
	read_status(f);
}

tpu_status tpu__cma_judge(const struct tpu__cma_facts *f, char *why, size_t size)
{
	if (f->self_read == -ENOSYS && f->seccomp != 2) {
		snprintf(why, size, "process_vm_readv is not in this kernel "
			 "(CONFIG_CROSS_MEMORY_ATTACH is off)");
	} else if (f->self_read && f->seccomp == 2) {
		snprintf(why, size, "process_vm_readv is refused (%s), and a seccomp filter is "
			 "active: the filter (a container's default profile?) forbids it",
			 tpu_status_name(f->self_read));
	} else if (f->self_read) {
		snprintf(why, size, "process_vm_readv fails even on this process: %s",
			 tpu_strerror(f->self_read));
	} else if (f->yama_scope >= 3) {
		snprintf(why, size, "Yama ptrace_scope is %d: no process may pull from another "
			 "(only a reboot lowers it)", f->yama_scope);
	} else if (f->yama_scope == 2 && !f->cap_sys_ptrace) {
		snprintf(why, size, "Yama ptrace_scope is 2: only a process with CAP_SYS_PTRACE "
			 "may pull from another, and this one lacks it");
	} else {
		snprintf(why, size, "process_vm_readv works here%s",
			 f->yama_scope == 1 ? " (Yama ptrace_scope 1: each member lets any "
					      "process of its user pull from it)" :
			 f->yama_scope == 2 ? " (Yama ptrace_scope 2: every member needs "
					      "CAP_SYS_PTRACE, as this one has)" : "");
		return 0;
	}
	return TPU_E_NO_TRANSPORT;
}

tpu_status tpu__cma_viable(char *why, size_t size)
{
	struct tpu__cma_facts f;
	tpu_status st;

	tpu__cma_facts_gather(&f);
	st = tpu__cma_judge(&f, why, size);
	/*
	 * Scope 1 lets only ancestors pull; members are unrelated processes
	 * that come and go, so name all of them at once.  The credentials
	 * check (same user) still applies.
	 */
	if (!st && f.yama_scope == 1 &&
	    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0)) {
		snprintf(why, size, "Yama ptrace_scope is 1 and PR_SET_PTRACER failed: %s",
			 tpu_strerror(tpu__errno()));
		return TPU_E_NO_TRANSPORT;
	}
	return st;
}

uint64_t tpu__cma_pid_ns(void)
{
	struct stat sb;

	if (stat("/proc/self/ns/pid", &sb))
		return 0;
	return ((uint64_t)sb.st_dev << 32) ^ (uint64_t)sb.st_ino;
}

tpu_status tpu__cma_check_peer(pid_t pid, uint64_t probe_addr, char *why, size_t size)
{
	uint64_t word = 0;
	tpu_status st = tpu_cma_read(pid, probe_addr, &word, sizeof(word));

	if (st == -ESRCH || (!st && word == TPU__CMA_PROBE_WORD))
		return 0;
	if (st == -EPERM)
		snprintf(why, size, "process_vm_readv from member process %d is denied (EPERM): "
			 "it runs as another user, is not dumpable, or Yama or another "
			 "security module forbids it", (int)pid);
	else if (st)
		snprintf(why, size, "process_vm_readv from member process %d fails: %s",
			 (int)pid, tpu_strerror(st));
	else
		snprintf(why, size, "member process %d answers with the wrong probe word "
			 "(not the process that joined, or another pid namespace)", (int)pid);
	return TPU_E_NO_TRANSPORT;
}
