// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * dma-buf registrations: the buffer is mapped into this process (udmabuf
 * and most exporters of system memory allow it) and the mapping is
 * registered as host memory, owned by the registration and unmapped once
 * nothing reaches it.  Both backends then work as for host memory: tcp's
 * target reads and writes the mapping; cma peers reach it with
 * process_vm_readv/writev, which needs pages the kernel can pin.  A
 * mapping of raw page frames cannot be pinned: it is refused here
 * (-EOPNOTSUPP), since the target cannot choose which backend its loaders
 * take.  A buffer that does not map at all is -ENODEV.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "xfer.h"

/* What a cma peer does to it: process_vm_readv() of its first byte, on ourselves. */
static bool pinnable(const void *addr)
{
	char c;
	struct iovec l = { &c, 1 }, r = { (void *)addr, 1 };

	/* Only EFAULT says the pages cannot be pinned; cma's own limits are not ours. */
	return process_vm_readv(getpid(), &l, 1, &r, 1, 0) == 1 || errno != EFAULT;
}

TPU_API tpu_status tpu_agent_register_dmabuf(struct tpu_agent *a, int fd, uint64_t offset,
					     size_t len, unsigned int access,
					     struct tpu_xfer_reg **out)
{
	long pg = sysconf(_SC_PAGESIZE);
	uint64_t start = offset & ~((uint64_t)pg - 1);
	tpu_status st = tpu__xfer_agent_check(a);
	struct stat sb;
	size_t maplen;
	void *map;

	if (st)
		return st;
	if (!out)
		return -EINVAL;
	*out = NULL;
	if (fd < 0 || !len || offset + len < offset || (access & ~(TPU_XFER_READ | TPU_XFER_WRITE)))
		return -EINVAL;
	if (fstat(fd, &sb))
		return -errno;
	/* A dma-buf's size is its inode's; beyond it nothing maps. */
	if (sb.st_size <= 0 || offset + len > (uint64_t)sb.st_size)
		return -ERANGE;
	maplen = (size_t)(offset - start) + len;
	/* Writable either way: a local READ lands in it. */
	map = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)start);
	if (map == MAP_FAILED) {
		st = errno == EACCES ? -EACCES : -ENODEV;	/* EACCES: not open for writing */
		tpu__log_debug("xfer: dma-buf fd %d does not map: %s", fd, strerror(errno));
		return st;
	}
	if (!pinnable(map)) {
		tpu__log_debug("xfer: dma-buf fd %d maps raw page frames: cma peers could not "
			       "reach it", fd);
		munmap(map, maplen);
		return -EOPNOTSUPP;
	}
	st = tpu__xfer_register(a, (uint8_t *)map + (offset - start), len, access, map, maplen,
				out);
	if (st)
		munmap(map, maplen);	/* owned by the registration only once it exists */
	return st;
}
