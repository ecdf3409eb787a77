/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * lib/dev: one call per /dev/tensorpipe ioctl (endpoint, region, domain,
 * slot, completion), the probe, the module's version, the ABI check, the
 * process_vm_readv pull (cma_read.c) and whether it can work here
 * (cma_viability.c).  Built on lib/base only.  Not installed.
 */
#ifndef TPU_DEV_H
#define TPU_DEV_H

#include "base/base.h"

#include "cma_viability.h"

/* Grows with the rendezvous context (io_uring, completion thread). */
struct tpu_endpoint {
	uint32_t magic;			/* TPU__MAGIC_ENDPOINT; poisoned by close */
	int fd;
};

/*
 * ioctl(2) on the endpoint, as a status.  EINTR is returned, not retried:
 * for a RECV it means a signal arrived and the caller may want to see it.
 */
tpu_status tpu__ioctl(const struct tpu_endpoint *ep, unsigned long cmd, void *arg);

/* GET_INFO on a bare descriptor, for open and for the probe. */
tpu_status tpu__get_info(int fd, struct tpu_info *info);

/* Open the device node as a status, mapping a missing node to TPU_E_NO_DEVICE. */
tpu_status tpu__open_device(const char *dev_path, int *fd);

/* tpu_domain_attach() with TP_DOMAIN_ATTACH_* @flags (domain.c). */
tpu_status tpu__domain_attach(struct tpu_endpoint *ep, int domain_fd, uint32_t flags, uint64_t *id);

#endif /* TPU_DEV_H */
