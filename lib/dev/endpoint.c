// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* Endpoints: opening the device, asking what it implements. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "dev.h"

tpu_status tpu__open_device(const char *dev_path, int *fd)
{
	int f = open(dev_path ? dev_path : TPU_DEVICE_PATH, O_RDWR | O_CLOEXEC);

	if (f >= 0) {
		*fd = f;
		return 0;
	}
	/* A stale node without its driver fails with ENXIO or ENODEV: the module is just as absent. */
	if (errno == ENOENT || errno == ENXIO || errno == ENODEV)
		return TPU_E_NO_DEVICE;
	return tpu__errno();
}

tpu_status tpu__get_info(int fd, struct tpu_info *info)
{
	struct tp_info ti;

	memset(&ti, 0, sizeof(ti));
	if (ioctl(fd, TP_IOC_GET_INFO, &ti) < 0)
		return errno == ENOTTY ? TPU_E_NOT_TENSORPIPE : tpu__errno();
	info->abi_version = ti.abi_version;
	info->features = ti.features;
	info->max_key_len = ti.max_key_len;
	info->max_regions = ti.max_regions;
	info->max_slots = ti.max_slots;
	info->page_size = ti.page_size;
	info->max_region_bytes = ti.max_region_bytes;
	return 0;
}

tpu_status tpu__ioctl(const struct tpu_endpoint *ep, unsigned long cmd, void *arg)
{
	return ioctl(ep->fd, cmd, arg) < 0 ? tpu__errno() : 0;
}

TPU_API tpu_status tpu_endpoint_open(const char *dev_path, struct tpu_endpoint **out)
{
	struct tpu_endpoint *ep;
	struct tpu_info info;
	tpu_status st;

	if (!out)
		return -EINVAL;
	*out = NULL;
	ep = calloc(1, sizeof(*ep));
	if (!ep)
		return -ENOMEM;
	ep->magic = TPU__MAGIC_ENDPOINT;
	st = tpu__open_device(dev_path, &ep->fd);
	if (st) {
		free(ep);
		return st;
	}
	st = tpu__get_info(ep->fd, &info);
	if (!st && info.abi_version != TP_ABI_VERSION)
		st = TPU_E_ABI_MISMATCH;
	if (st) {
		close(ep->fd);
		free(ep);
		return st;
	}
	*out = ep;
	return 0;
}

TPU_API void tpu_endpoint_close(struct tpu_endpoint *ep)
{
	tpu_status st;

	if (!ep)
		return;
	st = tpu__magic_check(ep, &ep->magic, TPU__MAGIC_ENDPOINT);
	if (st) {
		tpu__log_debug("tpu_endpoint_close(%p): %s; ignored", (void *)ep, tpu_strerror(st));
		return;
	}
	/* In a forked child this closes the child's descriptor only. */
	close(ep->fd);
	ep->fd = -1;
	tpu__quarantine(ep, &ep->magic);
}

TPU_API int tpu_endpoint_fd(const struct tpu_endpoint *ep)
{
	return ep ? ep->fd : -1;
}

TPU_API tpu_status tpu_endpoint_info(struct tpu_endpoint *ep, struct tpu_info *info)
{
	if (!ep || !info)
		return -EINVAL;
	return tpu__get_info(ep->fd, info);
}
