// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "peer.h"
#include "pin.h"

int peer_fork(struct peer *p, int (*child)(struct peer *p, void *arg), void *arg)
{
	pid_t parent = getpid();
	int sv[2];
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		return -errno;
	/* Buffered output would be written twice, once by each process. */
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		int err = errno;

		close(sv[0]);
		close(sv[1]);
		return -err;
	}
	if (pid == 0) {
		struct peer me = { parent, sv[1] };

		close(sv[0]);
		pin_child();
		exit(child(&me, arg));
	}
	close(sv[1]);
	p->pid = pid;
	p->sock = sv[0];
	return 0;
}

int peer_send(const struct peer *p, const void *msg, size_t len)
{
	const char *m = msg;

	while (len) {
		ssize_t n = send(p->sock, m, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		m += n;
		len -= (size_t)n;
	}
	return 0;
}

int peer_recv(const struct peer *p, void *msg, size_t len)
{
	char *m = msg;

	while (len) {
		ssize_t n = recv(p->sock, m, len, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EPIPE;
		m += n;
		len -= (size_t)n;
	}
	return 0;
}

int peer_wait(struct peer *p)
{
	int status;

	close(p->sock);
	p->sock = -1;
	while (waitpid(p->pid, &status, 0) < 0)
		if (errno != EINTR)
			return 1;
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}
