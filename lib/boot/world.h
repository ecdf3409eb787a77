/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The world object, shared by world.c (forming it, the rendezvous, the
 * barrier) and world_pipe.c (pipes on demand).
 *
 * Life: the world is freed with its last reference.  tpu_world_destroy()
 * drops the caller's; a pending accept of the pipe listener and each pipe
 * whose first message (who is calling) is still being read hold one, since
 * their callbacks may come after the destroy returned.
 */
#ifndef TPU_WORLD_H
#define TPU_WORLD_H

#include <pthread.h>
#include <stdatomic.h>

#include "boot.h"
#include "ctx/ctx.h"

#define WORLD_MAGIC		0x3011d0beU
#define WORLD_URL_MAX		300
#define WORLD_TASK_MAX		128	/* "/job:JOB/replica:0/task:RANK" */
#define WORLD_DEFAULT_MS	30000u
/* The first message on a world pipe: this text and the caller's rank. */
#define WORLD_HELLO		"tpu-world-hello "

struct world_hello;

struct tpu_world {
	uint32_t magic;			/* WORLD_MAGIC; TPU__MAGIC_DEAD once destroyed */
	unsigned int fork_gen;		/* tpu__fork_gen() at creation */
	atomic_int refs;
	struct tpu_context *ctx;
	struct tpu_world_info info;
	char job[64];
	uint32_t timeout_ms;

	struct store_server *server;	/* rank 0 */
	pthread_mutex_t store_lock;	/* one request at a time on the store socket */
	struct store_client *store;
	unsigned int barriers;		/* under store_lock */

	struct tpu_rendezvous *rdv;
	struct tpu_listener *listener;	/* pipes */
	char (*rdv_url)[WORLD_URL_MAX];	/* per rank */
	char (*pipe_url)[WORLD_URL_MAX];

	pthread_mutex_t lock;		/* pipes, closing */
	pthread_cond_t cond;		/* a pipe arrived, or closing */
	struct tpu_pipe **pipes;	/* per rank, once made */
	bool closing;
	/* ctx thread */
	struct world_hello *hellos;	/* accepted pipes whose hello is being read */
};

/* -EINVAL (NULL, not a world), TPU_E_DESTROYED, or TPU_E_FORKED (a child forked since). */
tpu_status tpu__world_check(const struct tpu_world *w);
void tpu__world_ref(struct tpu_world *w);
void tpu__world_unref(struct tpu_world *w);

/* world_pipe.c */
tpu_status tpu__world_pipes_start(struct tpu_world *w);
/* ctx thread: stop accepting, close every pipe. */
void tpu__world_pipes_close(struct tpu_world *w);

#endif /* TPU_WORLD_H */
