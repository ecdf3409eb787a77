/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * What the pipe tests share (pipe_harness.c): a record of callbacks that the
 * test thread waits on with a deadline, and a pair of pipes between two
 * contexts of this process through a listener.
 */
#ifndef UNIT_PIPE_HARNESS_H
#define UNIT_PIPE_HARNESS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "tpu_user.h"

/* How long a test waits for any one thing before calling it a hang. */
#define WAIT_S	20

struct rec {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int n;				/* callbacks seen */
	int order[256];			/* their tags, in the order they ran */
	tpu_status st[256];
	struct tpu_message *msg[256];
	pthread_t thread[256];
	struct tpu_pipe *pipe;
};

struct tag {
	struct rec *r;
	int id;
};

struct pair {
	struct tpu_context *a, *b;
	struct tpu_listener *l;
	struct tpu_pipe *client, *server;
};

void rec_init(struct rec *r);
void rec_post(struct tag *t, tpu_status st, struct tpu_message *m);
/* Wait until @n callbacks were recorded; false after WAIT_S seconds. */
bool rec_wait(struct rec *r, int n);
/* The same with a deadline of @ms milliseconds. */
bool rec_wait_ms(struct rec *r, int n, int ms);
/* Callbacks that record into the struct tag their arg points to. */
void on_write(void *arg, tpu_status st, struct tpu_message *m);
void on_desc(void *arg, tpu_status st, struct tpu_message *d);
void on_accept(void *arg, tpu_status st, struct tpu_pipe *p);
/* Contexts a (listening) and b (connecting), both with @channels (NULL: all). */
bool pair_open(struct pair *pp, const char *url, const char *channels);
void pair_close(struct pair *pp);

/*
 * A writer in another process: a context (with @channels) listening on
 * @url here, and a fork()ed child that connects and writes one message of
 * @len bytes, a payload or a tensor, then waits.  writer_start returns
 * once this side accepted the pipe (ww->pipe) and read its descriptor
 * (ww->desc), or false.
 */
struct writer_peer {
	struct tpu_context *ctx;
	struct tpu_listener *l;
	struct tpu_pipe *pipe;
	struct tpu_message *desc;
	pid_t child;
	struct rec r;
};
bool writer_start(struct writer_peer *ww, const char *url, const char *channels, size_t len,
		  bool tensor);
/* SIGKILL the child and reap it. */
void writer_kill(struct writer_peer *ww);
void writer_close(struct writer_peer *ww);

/*
 * test_pipe_alloc.c: ping-pongs of small messages over one pipe on
 * @xports, listening on @listen_url, both ends on one context; checks that
 * once warm they allocate nothing.
 */
void pipe_alloc_round_trips(const char *xports, const char *listen_url);

#endif
