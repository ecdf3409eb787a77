// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Passing a descriptor over a Unix socket (SCM_RIGHTS): how a domain, whose
 * descriptor is the capability to it, reaches another process.
 */
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base.h"

/* One byte of payload: a stream socket cannot carry ancillary data alone. */
static const char fd_tag = 'F';

union fd_cmsg {
	struct cmsghdr hdr;
	char buf[CMSG_SPACE(sizeof(int))];
};

TPU_API tpu_status tpu_fd_send(int sock, int fd)
{
	union fd_cmsg cm;
	struct iovec iov = { .iov_base = (void *)&fd_tag, .iov_len = 1 };
	struct msghdr msg = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = cm.buf,
		.msg_controllen = sizeof(cm.buf),
	};
	struct cmsghdr *c;

	if (sock < 0 || fd < 0)
		return -EBADF;
	memset(&cm, 0, sizeof(cm));
	c = CMSG_FIRSTHDR(&msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	for (;;) {
		if (sendmsg(sock, &msg, MSG_NOSIGNAL) == 1)
			return 0;
		if (errno != EINTR)
			return tpu__errno();
	}
}

TPU_API tpu_status tpu_fd_recv(int sock, int *fd)
{
	union fd_cmsg cm;
	char tag;
	struct iovec iov = { .iov_base = &tag, .iov_len = 1 };
	struct msghdr msg = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = cm.buf,
		.msg_controllen = sizeof(cm.buf),
	};
	struct cmsghdr *c;
	ssize_t n;

	if (!fd)
		return -EINVAL;
	if (sock < 0)
		return -EBADF;
	do
		n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return tpu__errno();
	if (n == 0)
		return -EPIPE;
	c = CMSG_FIRSTHDR(&msg);
	if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
	    c->cmsg_len == CMSG_LEN(sizeof(int))) {
		int got;

		memcpy(&got, CMSG_DATA(c), sizeof(int));
		if (tag == fd_tag) {
			*fd = got;
			return 0;
		}
		/* A descriptor that came with a foreign message must not leak. */
		close(got);
	}
	return -EBADMSG;
}
