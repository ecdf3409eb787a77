// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The cma backend: the requester copies with process_vm_readv/writev,
 * XFER_IOV_BATCH pairs a call, on the posting thread.  The pid is the one
 * the kernel gave the agents' shm connection (SO_PEERCRED), never one a
 * peer wrote; a pidfd opened on it then tells when that process is gone,
 * so a recycled pid is not written to.  Bounds and access were checked at
 * preparation against what the target answered at load; each post checks
 * that nothing was revoked, under the locks revocation takes.
 */
#include <errno.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "xfer.h"
#include "dev/dev.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

/* a->lock held. */
static tpu_status cma_attach(struct xfer_peer *p)
{
	char why[128];
	tpu_status st = tpu__cma_viable(why, sizeof(why));

	if (st)
		return st;
	p->pidfd = (int)syscall(SYS_pidfd_open, p->pid, 0);
	if (p->pidfd < 0 && errno != ENOSYS)
		return -errno;
	return 0;
}

static bool gone(const struct xfer_peer *p)
{
	struct pollfd pfd = { .fd = p->pidfd, .events = POLLIN };

	return p->pidfd >= 0 && poll(&pfd, 1, 0) > 0;
}

static void cma_post(struct tpu_xfer_req *r)
{
	struct xfer_peer *p = r->peer;
	struct tpu_agent *a = r->a;
	tpu_status st;
	size_t b;

	pthread_rwlock_rdlock(&a->local_rw);
	pthread_rwlock_rdlock(&p->rw);
	st = atomic_load(&p->error);
	if (!st)
		st = tpu__xfer_req_live(r);
	if (!st && gone(p))
		st = TPU_E_PEER_GONE;
	for (b = 0; !st && b < r->nbatches; b++) {
		size_t i = b * XFER_IOV_BATCH, n = r->npairs - i;
		ssize_t got;

		if (n > XFER_IOV_BATCH)
			n = XFER_IOV_BATCH;
		if (r->op == TPU_XFER_OP_READ)
			got = process_vm_readv(p->pid, r->liov + i, n, r->riov + i, n, 0);
		else
			got = process_vm_writev(p->pid, r->liov + i, n, r->riov + i, n, 0);
		if (got < 0)
			st = errno == ESRCH ? TPU_E_PEER_GONE : -errno;
		else if ((uint64_t)got != r->batch_bytes[b])
			st = -EFAULT;
	}
	pthread_rwlock_unlock(&p->rw);
	pthread_rwlock_unlock(&a->local_rw);
	if (!st && r->notif)
		st = tpu__xfer_send_notif(p, r);
	tpu__xfer_req_complete(r, st);
}

static bool cma_cancel(struct tpu_xfer_req *r)
{
	(void)r;
	return false;		/* a post is over when it returns */
}

const struct xfer_backend tpu__xfer_cma = {
	.name = "cma",
	.attach = cma_attach,
	.post = cma_post,
	.cancel = cma_cancel,
};
