// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Cross-memory attach: the consumer pulls the producer's bytes with
 * process_vm_readv.  This is the path used when the module is absent; the
 * kernel pins the source pages on every call, which is what the module's
 * pre-registered regions avoid.
 */
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/uio.h>

#include "dev.h"

TPU_API tpu_status tpu_cma_read(pid_t pid, uint64_t remote_addr, void *dst, size_t len)
{
	char *d = dst;
	size_t done = 0;

	if (pid <= 0 || (!dst && len) || remote_addr > UINTPTR_MAX - len)
		return -EINVAL;
	while (done < len) {
		struct iovec local = { .iov_base = d + done, .iov_len = len - done };
		struct iovec remote = {
			.iov_base = (void *)(uintptr_t)(remote_addr + done),
			.iov_len = len - done,
		};
		ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return tpu__errno();
		}
		/* A short read ends where the remote range stops being mapped. */
		if (n == 0)
			return -EFAULT;
		done += (size_t)n;
	}
	return 0;
}

TPU_API tpu_status tpu_cma_allow(pid_t consumer)
{
	if (consumer <= 0)
		return -EINVAL;
	if (prctl(PR_SET_PTRACER, (unsigned long)consumer, 0, 0, 0) == 0)
		return 0;
	/* Without Yama PR_SET_PTRACER does not exist, and nothing needs allowing. */
	return errno == EINVAL ? 0 : tpu__errno();
}
