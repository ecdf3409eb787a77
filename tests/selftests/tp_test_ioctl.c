// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Selftest helpers: ioctl wrappers and completion reading.
 */
#include "tp_test_util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

int tpt_open(void)
{
	int fd = open(TP_DEVICE_PATH, O_RDWR | O_CLOEXEC);

	return fd < 0 ? -errno : fd;
}

int tpt_ioctl(int fd, unsigned long cmd, void *arg)
{
	return ioctl(fd, cmd, arg) ? -errno : 0;
}

int tpt_get_info(int fd, struct tp_info *info)
{
	memset(info, 0, sizeof(*info));
	return tpt_ioctl(fd, TP_IOC_GET_INFO, info);
}

int tpt_domain_create(int fd, int *domain_fd, uint64_t *id)
{
	struct tp_domain_create c = { 0 };
	int ret = tpt_ioctl(fd, TP_IOC_DOMAIN_CREATE, &c);

	if (ret)
		return ret;
	*domain_fd = c.fd;
	if (id)
		*id = c.id;
	return 0;
}

int tpt_domain_attach(int fd, int domain_fd, uint64_t *id)
{
	return tpt_domain_attach_flags(fd, domain_fd, 0, id);
}

int tpt_domain_attach_flags(int fd, int domain_fd, uint32_t flags, uint64_t *id)
{
	struct tp_domain_attach a = { .fd = domain_fd, .flags = flags };
	int ret = tpt_ioctl(fd, TP_IOC_DOMAIN_ATTACH, &a);

	if (!ret && id)
		*id = a.id;
	return ret;
}

int tpt_register(int fd, const void *addr, uint64_t len, uint32_t access,
		 uint32_t *handle)
{
	struct tp_region_register r = {
		.addr = (uintptr_t)addr,
		.len = len,
		.access = access,
	};
	int ret = tpt_ioctl(fd, TP_IOC_REGION_REGISTER, &r);

	if (!ret && handle)
		*handle = r.handle;
	return ret;
}

int tpt_alloc(int fd, uint64_t len, uint32_t *handle, uint64_t *mmap_offset)
{
	struct tp_region_alloc a = { .len = len };
	int ret = tpt_ioctl(fd, TP_IOC_REGION_ALLOC, &a);

	if (ret)
		return ret;
	if (handle)
		*handle = a.handle;
	if (mmap_offset)
		*mmap_offset = a.mmap_offset;
	return 0;
}

int tpt_release(int fd, uint32_t handle)
{
	struct tp_region_release r = { .handle = handle };

	return tpt_ioctl(fd, TP_IOC_REGION_RELEASE, &r);
}

void tpt_send_prep(struct tp_send *s, const void *key, uint32_t key_len,
		   uint32_t region, uint64_t offset, uint64_t len,
		   uint64_t user_data)
{
	memset(s, 0, sizeof(*s));
	s->key_ptr = (uintptr_t)key;
	s->key_len = key_len;
	s->region = region;
	s->offset = offset;
	s->len = len;
	s->user_data = user_data;
}

void tpt_recv_prep(struct tp_recv *r, const void *key, uint32_t key_len,
		   uint32_t region, uint64_t offset, uint64_t len,
		   uint64_t timeout_ns)
{
	memset(r, 0, sizeof(*r));
	r->key_ptr = (uintptr_t)key;
	r->key_len = key_len;
	r->region = region;
	r->offset = offset;
	r->len = len;
	r->timeout_ns = timeout_ns;
}

void tpt_cancel_prep(struct tp_cancel *c, const void *key, uint32_t key_len,
		     uint32_t flags)
{
	memset(c, 0, sizeof(*c));
	c->key_ptr = (uintptr_t)key;
	c->key_len = key_len;
	c->flags = flags;
}

int tpt_send(int fd, const char *key, uint32_t region, uint64_t offset,
	     uint64_t len, uint64_t user_data)
{
	struct tp_send s;

	tpt_send_prep(&s, key, strlen(key), region, offset, len, user_data);
	return tpt_ioctl(fd, TP_IOC_SEND, &s);
}

int tpt_recv(int fd, const char *key, uint32_t region, uint64_t offset,
	     uint64_t cap, uint64_t timeout_ns, uint64_t *len)
{
	struct tp_recv r;
	int ret;

	tpt_recv_prep(&r, key, strlen(key), region, offset, cap, timeout_ns);
	ret = tpt_ioctl(fd, TP_IOC_RECV, &r);
	if (len)
		*len = r.len;
	return ret;
}

int tpt_recv_nonblock(int fd, const char *key, uint32_t region,
		      uint64_t offset, uint64_t cap, uint64_t *len)
{
	struct tp_recv r;
	int ret;

	tpt_recv_prep(&r, key, strlen(key), region, offset, cap, 0);
	r.flags = TP_RECV_NONBLOCK;
	ret = tpt_ioctl(fd, TP_IOC_RECV, &r);
	if (len)
		*len = r.len;
	return ret;
}

int tpt_cancel(int fd, const char *key, uint32_t flags, uint32_t *count)
{
	struct tp_cancel c;
	int ret;

	tpt_cancel_prep(&c, key, strlen(key), flags);
	ret = tpt_ioctl(fd, TP_IOC_CANCEL, &c);
	if (!ret && count)
		*count = c.count;
	return ret;
}

int tpt_abort(int fd, int32_t status)
{
	struct tp_abort a = { .status = status };

	return tpt_ioctl(fd, TP_IOC_ABORT, &a);
}

int tpt_read_completions(int fd, struct tp_completion *out, size_t max,
			 int timeout_ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	ssize_t n;
	int ret;

	do {
		ret = poll(&pfd, 1, timeout_ms);
	} while (ret < 0 && errno == EINTR);
	if (ret < 0)
		return -errno;
	if (ret == 0)
		return -ETIMEDOUT;
	n = read(fd, out, max * sizeof(*out));
	if (n < 0)
		return -errno;
	if (n % sizeof(*out))
		return -EPROTO;
	return n / sizeof(*out);
}

int tpt_readable_now(int fd)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	int ret = poll(&pfd, 1, 0);

	if (ret < 0)
		return -errno;
	return ret > 0 && (pfd.revents & POLLIN);
}

int tpt_wait_readable(int fd, int timeout_ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	int ret;

	do {
		ret = poll(&pfd, 1, timeout_ms);
	} while (ret < 0 && errno == EINTR);
	if (ret < 0)
		return -errno;
	return ret > 0 && (pfd.revents & POLLIN) ? 0 : -ETIMEDOUT;
}
