// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Which implementation a rendezvous uses, and why (TPU_LOG=debug says).
 * TPU_RDV_AUTO takes the module when the context may and the device
 * answers, else the cma fallback when process_vm_readv is permitted, else
 * fails with TPU_E_NO_TRANSPORT: "inprocess" is never a silent choice, as a
 * rendezvous made for other processes would then never meet them.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rdv_queue.h"


static tpu_status use(struct tpu_rendezvous *rdv, enum tpu_rdv_impl impl, const char *why)
{
	const struct tpu__rdv_ops *ops = tpu__rdv_impl_ops(impl);
	tpu_status st;

	if (!ops) {
		tpu__log_debug("rendezvous: %s implementation not built into this library",
			       tpu_rdv_impl_name(impl));
		return TPU_E_NO_TRANSPORT;
	}
	rdv->ops = ops;
	st = ops->create(rdv);
	if (st)
		tpu__log_debug("rendezvous: %s failed to start: %s", tpu_rdv_impl_name(impl),
			       tpu_strerror(st));
	else
		tpu__log_debug("rendezvous %p: using %s (%s)", (void *)rdv, tpu_rdv_impl_name(impl),
			       why);
	return st;
}

static tpu_status select_auto(struct tpu_rendezvous *rdv)
{
	struct tpu_probe_result pr;
	bool no_kmod = tpu__ctx_flags(rdv->ctx) & TPU_CTX_NO_KMOD;
	tpu_status st;

	tpu_probe(tpu__ctx_dev_path(rdv->ctx), &pr);
	if (!no_kmod && !pr.kmod_status && tpu__ctx_endpoint(rdv->ctx)) {
		st = use(rdv, TPU_RDV_KMOD, "auto: the device is usable");
		if (!st)
			return 0;
	}
	if (!pr.cma_status && tpu__rdv_impl_ops(TPU_RDV_CMA))
		return use(rdv, TPU_RDV_CMA, no_kmod ? "auto: the context was asked not to use the module" :
			   "auto: the module is not usable, process_vm_readv is permitted");
	tpu__log_debug("rendezvous: no implementation viable: %s%s", pr.detail,
		       tpu__rdv_impl_ops(TPU_RDV_CMA) ? "" : " (cma not built)");
	return TPU_E_NO_TRANSPORT;
}

tpu_status tpu__rdv_select(struct tpu_rendezvous *rdv, enum tpu_rdv_impl impl)
{
	switch (impl) {
	case TPU_RDV_AUTO:
		return select_auto(rdv);
	case TPU_RDV_KMOD:
		if (tpu__ctx_flags(rdv->ctx) & TPU_CTX_NO_KMOD)
			return TPU_E_NO_DEVICE;
		return use(rdv, impl, "asked for");
	default:
		return use(rdv, impl, "asked for");
	}
}

static bool is_domain_fd(int fd)
{
	char path[64], link[64];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, link, sizeof(link) - 1);
	if (n < 0)
		return false;
	link[n] = '\0';
	return strcmp(link, "anon_inode:[tensorpipe-domain]") == 0;
}

static bool is_cma_fd(int fd)
{
	char magic[TPU__CMA_MAGIC_LEN];

	return pread(fd, magic, sizeof(magic), 0) == (ssize_t)sizeof(magic) &&
	       memcmp(magic, TPU__CMA_MAGIC, sizeof(magic)) == 0;
}

tpu_status tpu__rdv_select_join(struct tpu_rendezvous *rdv, int fd)
{
	enum tpu_rdv_impl impl;
	struct stat sb;
	tpu_status st;

	if (fstat(fd, &sb) < 0)
		return tpu__errno();
	if (is_domain_fd(fd))
		impl = TPU_RDV_KMOD;
	else if (is_cma_fd(fd))
		impl = TPU_RDV_CMA;
	else
		return -EINVAL;
	rdv->ops = tpu__rdv_impl_ops(impl);
	if (!rdv->ops)
		return TPU_E_NO_TRANSPORT;
	if (impl == TPU_RDV_KMOD && (tpu__ctx_flags(rdv->ctx) & TPU_CTX_NO_KMOD))
		return TPU_E_NO_DEVICE;
	st = rdv->ops->join(rdv, fd);
	if (!st)
		tpu__log_debug("rendezvous %p: joined a %s rendezvous", (void *)rdv,
			       tpu_rdv_impl_name(impl));
	return st;
}
