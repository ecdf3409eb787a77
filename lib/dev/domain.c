// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* Domains: the rendezvous namespace, held as a descriptor. */
#include <string.h>

#include "dev.h"

TPU_API tpu_status tpu_domain_create(struct tpu_endpoint *ep, int *domain_fd, uint64_t *id)
{
	struct tp_domain_create dc;
	tpu_status st;

	if (!ep || !domain_fd)
		return -EINVAL;
	memset(&dc, 0, sizeof(dc));
	st = tpu__ioctl(ep, TP_IOC_DOMAIN_CREATE, &dc);
	if (st)
		return st;
	*domain_fd = dc.fd;
	if (id)
		*id = dc.id;
	return 0;
}

TPU_API tpu_status tpu_domain_attach(struct tpu_endpoint *ep, int domain_fd, uint64_t *id)
{
	return tpu__domain_attach(ep, domain_fd, 0, id);
}

tpu_status tpu__domain_attach(struct tpu_endpoint *ep, int domain_fd, uint32_t flags, uint64_t *id)
{
	struct tp_domain_attach da;
	tpu_status st;

	if (!ep)
		return -EINVAL;
	memset(&da, 0, sizeof(da));
	da.fd = domain_fd;
	da.flags = flags;
	st = tpu__ioctl(ep, TP_IOC_DOMAIN_ATTACH, &da);
	if (!st && id)
		*id = da.id;
	return st;
}
