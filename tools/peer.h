/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Two processes joined by a Unix socketpair: the parent and one forked
 * child.  The socket carries fixed-size control messages and descriptors;
 * tensors never travel on it.
 */
#ifndef TOOLS_PEER_H
#define TOOLS_PEER_H

#include <stddef.h>
#include <sys/types.h>

struct peer {
	pid_t pid;	/* in the parent: the child; in the child: the parent */
	int sock;
};

/*
 * Fork; the child runs @child(peer, arg) and exits with its return value.
 * Returns 0 in the parent with @p filled in, -errno on failure.
 */
int peer_fork(struct peer *p, int (*child)(struct peer *p, void *arg), void *arg);

/* Exactly @len bytes, or -errno (-EPIPE when the other side has gone). */
int peer_send(const struct peer *p, const void *msg, size_t len);
int peer_recv(const struct peer *p, void *msg, size_t len);

/* Parent: close the socket, reap the child; its exit status, or 128 + signal. */
int peer_wait(struct peer *p);

#endif
