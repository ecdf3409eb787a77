// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Selftest helpers: child processes, pipes, descriptor passing and time.
 */
#include "tp_test_util.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

pid_t tpt_fork(void)
{
	pid_t parent = getpid();
	pid_t pid;

	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid == 0) {
		/* A failed test must not leave blocked children behind. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(TPT_CHILD_ORPHANED);
	}
	return pid;
}

int tpt_wait_child(pid_t pid, int timeout_ms, int *status)
{
	uint64_t deadline = tpt_now_ns() + timeout_ms * TPT_NSEC_PER_MSEC;
	int st = 0;
	pid_t ret;

	for (;;) {
		ret = waitpid(pid, &st, WNOHANG);
		if (ret == pid)
			break;
		if (ret < 0 && errno != EINTR)
			return -errno;
		if (tpt_now_ns() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return -ETIMEDOUT;
		}
		tpt_sleep_ms(5);
	}
	if (status)
		*status = st;
	return 0;
}

int tpt_write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= n;
	}
	return 0;
}

int tpt_read_all(int fd, void *buf, size_t len, int timeout_ms)
{
	uint64_t deadline = tpt_now_ns() + timeout_ms * TPT_NSEC_PER_MSEC;
	uint8_t *p = buf;

	while (len) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		uint64_t now = tpt_now_ns();
		ssize_t n;
		int ret;

		if (now >= deadline)
			return -ETIMEDOUT;
		ret = poll(&pfd, 1, (deadline - now) / TPT_NSEC_PER_MSEC + 1);
		if (ret < 0 && errno == EINTR)
			continue;
		if (ret < 0)
			return -errno;
		if (ret == 0)
			return -ETIMEDOUT;
		n = read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EPIPE;
		p += n;
		len -= n;
	}
	return 0;
}

int tpt_notify(int fd)
{
	char c = 1;

	return tpt_write_all(fd, &c, 1);
}

int tpt_wait_notify(int fd, int timeout_ms)
{
	char c;

	return tpt_read_all(fd, &c, 1, timeout_ms);
}

int tpt_send_fd(int sock, int fd)
{
	char data = 'D';
	union {
		struct cmsghdr hdr;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct iovec iov = { .iov_base = &data, .iov_len = 1 };
	struct msghdr msg = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = ctl.buf,
		.msg_controllen = sizeof(ctl.buf),
	};
	struct cmsghdr *cmsg;

	memset(&ctl, 0, sizeof(ctl));
	cmsg = CMSG_FIRSTHDR(&msg);
	cmsg->cmsg_level = SOL_SOCKET;
	cmsg->cmsg_type = SCM_RIGHTS;
	cmsg->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cmsg), &fd, sizeof(int));
	return sendmsg(sock, &msg, 0) == 1 ? 0 : -errno;
}

int tpt_recv_fd(int sock, int timeout_ms)
{
	struct pollfd pfd = { .fd = sock, .events = POLLIN };
	char data;
	union {
		struct cmsghdr hdr;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct iovec iov = { .iov_base = &data, .iov_len = 1 };
	struct msghdr msg = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = ctl.buf,
		.msg_controllen = sizeof(ctl.buf),
	};
	struct cmsghdr *cmsg;
	int ret, fd;

	ret = poll(&pfd, 1, timeout_ms);
	if (ret < 0)
		return -errno;
	if (ret == 0)
		return -ETIMEDOUT;
	if (recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) != 1)
		return -EPROTO;
	cmsg = CMSG_FIRSTHDR(&msg);
	if (!cmsg || cmsg->cmsg_level != SOL_SOCKET ||
	    cmsg->cmsg_type != SCM_RIGHTS ||
	    cmsg->cmsg_len != CMSG_LEN(sizeof(int)))
		return -EPROTO;
	memcpy(&fd, CMSG_DATA(cmsg), sizeof(int));
	return fd;
}

uint64_t tpt_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * TPT_NSEC_PER_SEC + ts.tv_nsec;
}

void tpt_sleep_ms(unsigned int ms)
{
	struct timespec ts = {
		.tv_sec = ms / 1000,
		.tv_nsec = (long)(ms % 1000) * 1000000L,
	};

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}
