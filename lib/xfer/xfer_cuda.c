// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * CUDA registrations: device memory has no host address another process
 * (cma) or this one (memcpy) could use, so only the target agent's own
 * copies reach it, through the CUDA driver (lib/cuda).  Its load answer
 * says so (XFER_F_SERVED): a loader whose backend copies by itself (cma)
 * refuses the handle, tcp's target serves its elements with the driver's
 * copies, and it cannot be the local side of a request (yet).
 */
#include <errno.h>

#include "xfer.h"
#include "cuda/cuda.h"

TPU_API tpu_status tpu_agent_register_cuda(struct tpu_agent *a, uint32_t device, void *dptr,
					   size_t len, unsigned int access,
					   struct tpu_xfer_reg **out)
{
	tpu_status st = tpu__xfer_agent_check(a);

	if (st)
		return st;
	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!dptr || !len || (uintptr_t)dptr + len < (uintptr_t)dptr ||
	    (access & ~(TPU_XFER_READ | TPU_XFER_WRITE)))
		return -EINVAL;
	/* The whole range in one allocation of that device, as the driver says. */
	st = tpu__cuda_check_ptr(dptr, len, device);
	if (st)
		return st;
	st = tpu__xfer_register(a, dptr, len, access, NULL, 0, out);
	if (!st)
		(*out)->dev = (struct tpu_device){ .type = TPU_DEVICE_CUDA, .index = device };
	return st;
}

tpu_status tpu__xfer_reg_copy(struct tpu_xfer_reg *r, uint64_t off, void *host, uint64_t len,
			      bool in)
{
	static const struct tpu_device cpu = { .type = TPU_DEVICE_CPU };

	if (!len)
		return 0;
	if (in)
		return tpu__cuda_copy(r->addr + off, r->dev, host, cpu, len, NULL);
	return tpu__cuda_copy(host, cpu, r->addr + off, r->dev, len, NULL);
}
