// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Regions: pinned user memory, kernel buffers mapped into the process, and
 * dma-bufs in and out.
 */
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "dev.h"

TPU_API tpu_status tpu_region_register(struct tpu_endpoint *ep, const void *addr, size_t len,
				       unsigned int access, uint32_t *handle)
{
	struct tp_region_register rr;
	tpu_status st;

	if (!ep || !handle)
		return -EINVAL;
	memset(&rr, 0, sizeof(rr));
	rr.addr = (uintptr_t)addr;
	rr.len = len;
	rr.access = access;
	st = tpu__ioctl(ep, TP_IOC_REGION_REGISTER, &rr);
	if (!st)
		*handle = rr.handle;
	return st;
}

TPU_API tpu_status tpu_region_alloc(struct tpu_endpoint *ep, size_t len, uint32_t *handle,
				    uint64_t *mmap_offset)
{
	struct tp_region_alloc ra;
	tpu_status st;

	if (!ep || !handle || !mmap_offset)
		return -EINVAL;
	memset(&ra, 0, sizeof(ra));
	ra.len = len;
	st = tpu__ioctl(ep, TP_IOC_REGION_ALLOC, &ra);
	if (!st) {
		*handle = ra.handle;
		*mmap_offset = ra.mmap_offset;
	}
	return st;
}

TPU_API tpu_status tpu_region_release(struct tpu_endpoint *ep, uint32_t handle)
{
	struct tp_region_release rr;

	if (!ep)
		return -EINVAL;
	memset(&rr, 0, sizeof(rr));
	rr.handle = handle;
	return tpu__ioctl(ep, TP_IOC_REGION_RELEASE, &rr);
}

TPU_API tpu_status tpu_region_mmap(struct tpu_endpoint *ep, uint64_t mmap_offset, size_t len,
				   unsigned int flags, void **addr)
{
	int mflags = MAP_SHARED;
	void *p;

	if (!ep || !addr || len == 0 || (flags & ~TPU_MAP_POPULATE) ||
	    mmap_offset > (uint64_t)INT64_MAX)
		return -EINVAL;
	if (flags & TPU_MAP_POPULATE)
		mflags |= MAP_POPULATE;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, mflags, ep->fd, (off_t)mmap_offset);
	if (p == MAP_FAILED)
		return tpu__errno();
	*addr = p;
	return 0;
}

TPU_API tpu_status tpu_region_munmap(void *addr, size_t len)
{
	if (!addr || len == 0)
		return -EINVAL;
	return munmap(addr, len) ? tpu__errno() : 0;
}

TPU_API tpu_status tpu_region_alloc_mapped(struct tpu_endpoint *ep, size_t len, unsigned int flags,
					   uint32_t *handle, void **addr)
{
	uint64_t off;
	uint32_t h;
	tpu_status st;

	if (!ep || !handle || !addr)
		return -EINVAL;
	st = tpu_region_alloc(ep, len, &h, &off);
	if (st)
		return st;
	st = tpu_region_mmap(ep, off, len, flags, addr);
	if (st) {
		tpu_region_release(ep, h);
		return st;
	}
	*handle = h;
	return 0;
}

TPU_API tpu_status tpu_region_export(struct tpu_endpoint *ep, uint32_t handle, int *fd,
				     uint64_t *size)
{
	struct tp_region_export re;
	tpu_status st;

	if (!ep || !fd)
		return -EINVAL;
	memset(&re, 0, sizeof(re));
	re.handle = handle;
	st = tpu__ioctl(ep, TP_IOC_REGION_EXPORT, &re);
	if (st)
		return st;
	*fd = re.fd;
	if (size)
		*size = re.size;
	return 0;
}

TPU_API tpu_status tpu_region_import(struct tpu_endpoint *ep, int fd, unsigned int access,
				     uint32_t *handle, uint64_t *len)
{
	struct tp_region_import ri;
	tpu_status st;

	if (!ep || !handle || fd < 0)
		return -EINVAL;
	memset(&ri, 0, sizeof(ri));
	ri.fd = fd;
	ri.access = access;
	st = tpu__ioctl(ep, TP_IOC_REGION_IMPORT, &ri);
	if (st)
		return st;
	*handle = ri.handle;
	if (len)
		*len = ri.len;
	return 0;
}

TPU_API tpu_status tpu_region_revoke(struct tpu_endpoint *ep, uint32_t handle)
{
	struct tp_region_revoke rr;

	if (!ep)
		return -EINVAL;
	memset(&rr, 0, sizeof(rr));
	rr.handle = handle;
	return tpu__ioctl(ep, TP_IOC_REGION_REVOKE, &rr);
}
