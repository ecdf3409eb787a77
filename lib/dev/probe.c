// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The probe: is /dev/tensorpipe usable, and if not, why, and can
 * process_vm_readv take its place?  Everything it finds goes into the result
 * so that a tool can print one clear paragraph instead of an errno.
 */
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "dev.h"

/* Bit of CAP_SYS_PTRACE in /proc/PID/status CapEff (linux/capability.h). */
#define CAP_SYS_PTRACE_BIT 19

TPU_API const char *tpu_path_name(enum tpu_path path)
{
	switch (path) {
	case TPU_PATH_KMOD:
		return "kmod";
	case TPU_PATH_CMA:
		return "process_vm_readv";
	default:
		return "none";
	}
}

static int yama_scope(void)
{
	FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "re");
	int scope = -1;

	if (!f)
		return -1;
	if (fscanf(f, "%d", &scope) != 1)
		scope = -1;
	fclose(f);
	return scope;
}

static bool has_cap_sys_ptrace(void)
{
	FILE *f = fopen("/proc/self/status", "re");
	unsigned long long caps = 0;
	char line[256];
	bool found = false;

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		found = sscanf(line, "CapEff: %llx", &caps) == 1;
	fclose(f);
	return found && (caps >> CAP_SYS_PTRACE_BIT) & 1;
}

static bool module_loaded(void)
{
	return access("/sys/module/tensorpipe", F_OK) == 0;
}

static void probe_kmod(const char *dev_path, struct tpu_probe_result *r)
{
	struct tpu_info info;
	int fd;

	r->kmod_status = tpu__open_device(dev_path, &fd);
	if (r->kmod_status)
		return;
	r->kmod_status = tpu__get_info(fd, &info);
	close(fd);
	if (r->kmod_status)
		return;
	r->module_abi = info.abi_version;
	r->module_features = info.features;
	if (info.abi_version != TP_ABI_VERSION)
		r->kmod_status = TPU_E_ABI_MISMATCH;
}

/*
 * Reading our own memory proves the system call exists and is not blocked
 * by seccomp; Yama's scope then decides what other processes allow.
 */
static void probe_cma(struct tpu_probe_result *r)
{
	int src = 0x7470, dst = 0;
	struct iovec l = { .iov_base = &dst, .iov_len = sizeof(dst) };
	struct iovec rm = { .iov_base = &src, .iov_len = sizeof(src) };

	if (process_vm_readv(getpid(), &l, 1, &rm, 1, 0) != (ssize_t)sizeof(dst))
		r->cma_status = tpu__errno();
	else if (dst != src)
		r->cma_status = -EIO;
	else if (r->yama_ptrace_scope >= 3 ||
		 (r->yama_ptrace_scope == 2 && !has_cap_sys_ptrace()))
		r->cma_status = -EPERM;
}

static const char *kmod_reason(const struct tpu_probe_result *r)
{
	switch (r->kmod_status) {
	case TPU_E_NO_DEVICE:
		return module_loaded() ?
			"the module is loaded but the device node is missing (is devtmpfs mounted?)" :
			"the tensorpipe module is not loaded (insmod kmod/tensorpipe.ko)";
	case -EACCES:
	case -EPERM:
		return "permission denied on the device node";
	default:
		return tpu_strerror(r->kmod_status);
	}
}

static const char *cma_note(const struct tpu_probe_result *r)
{
	if (r->cma_status)
		return "";
	if (r->yama_ptrace_scope == 1)
		return " (Yama ptrace_scope 1: the consumer must be an ancestor of the producer,"
		       " or be named by it with tpu_cma_allow())";
	if (r->yama_ptrace_scope == 2)
		return " (Yama ptrace_scope 2: only with CAP_SYS_PTRACE, which this process has)";
	return "";
}

static void describe(const char *dev_path, struct tpu_probe_result *r)
{
	const char *dev = dev_path ? dev_path : TPU_DEVICE_PATH;

	if (r->path == TPU_PATH_KMOD) {
		snprintf(r->detail, sizeof(r->detail),
			 "%s is usable (module ABI %u); transfers go through the module.",
			 dev, r->module_abi);
	} else if (r->kmod_status == TPU_E_ABI_MISMATCH) {
		snprintf(r->detail, sizeof(r->detail),
			 "%s speaks ABI %u but this library was built for ABI %u. Fallback: %s%s.",
			 dev, r->module_abi, TP_ABI_VERSION,
			 r->path == TPU_PATH_CMA ? "process_vm_readv" : "none",
			 cma_note(r));
	} else if (r->path == TPU_PATH_CMA) {
		snprintf(r->detail, sizeof(r->detail),
			 "%s is not usable: %s. Fallback: process_vm_readv (one copy, pins pages on every call)%s.",
			 dev, kmod_reason(r), cma_note(r));
	} else {
		snprintf(r->detail, sizeof(r->detail),
			 "%s is not usable: %s. No fallback: process_vm_readv fails here (%s).",
			 dev, kmod_reason(r), tpu_strerror(r->cma_status));
	}
}

TPU_API tpu_status tpu_probe(const char *dev_path, struct tpu_probe_result *out)
{
	if (!out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	out->yama_ptrace_scope = yama_scope();
	probe_kmod(dev_path, out);
	probe_cma(out);
	if (!out->kmod_status)
		out->path = TPU_PATH_KMOD;
	else if (!out->cma_status)
		out->path = TPU_PATH_CMA;
	else
		out->path = TPU_PATH_NONE;
	describe(dev_path, out);
	return out->path == TPU_PATH_NONE ? TPU_E_NO_TRANSPORT : 0;
}
