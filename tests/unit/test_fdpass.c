// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tap.h"
#include "tpu_user.h"

static bool same_file(int a, int b)
{
	struct stat sa, sb;

	return !fstat(a, &sa) && !fstat(b, &sb) && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

static void round_trip(void)
{
	int sv[2], fd = open("/dev/null", O_RDONLY | O_CLOEXEC), got = -1;

	if (fd < 0 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
		CHECK(false, "fd_pass_set_up");
		return;
	}
	CHECK_STATUS(tpu_fd_send(sv[0], fd), 0, "fd_send_over_a_socketpair_succeeds");
	CHECK_STATUS(tpu_fd_recv(sv[1], &got), 0, "fd_recv_gets_the_descriptor");
	CHECK(got >= 0 && got != fd && same_file(got, fd), "fd_received_refers_to_the_same_file");
	CHECK(got >= 0 && (fcntl(got, F_GETFD) & FD_CLOEXEC), "fd_received_is_close_on_exec");
	if (got >= 0)
		close(got);

	/* A plain byte where a descriptor was expected. */
	CHECK(send(sv[0], "x", 1, 0) == 1 && tpu_fd_recv(sv[1], &got) == -EBADMSG,
	      "fd_recv_of_a_message_without_descriptor_is_ebadmsg");
	close(sv[0]);
	CHECK_STATUS(tpu_fd_recv(sv[1], &got), -EPIPE, "fd_recv_after_the_peer_closed_is_epipe");
	close(sv[1]);
	close(fd);
}

void test_fdpass(void)
{
	int fd;

	round_trip();
	CHECK_STATUS(tpu_fd_send(-1, 0), -EBADF, "fd_send_on_a_negative_socket_is_ebadf");
	CHECK_STATUS(tpu_fd_send(0, -1), -EBADF, "fd_send_of_a_negative_descriptor_is_ebadf");
	CHECK_STATUS(tpu_fd_recv(-1, &fd), -EBADF, "fd_recv_on_a_negative_socket_is_ebadf");
	CHECK_STATUS(tpu_fd_recv(0, NULL), -EINVAL, "fd_recv_without_output_is_einval");
}
