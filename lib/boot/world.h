/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The world object, shared by world.c (forming it, the rendezvous, the
 * barrier) and world_pipe.c (pipes on demand).
 *
 * Life: the world is freed with its last reference.  tpu_world_destroy()
 * drops the caller's; a pending accept of the pipe listener and each pipe
 * whose first message (who is calling) is still being read hold one, since
 * their callbacks may come after the destroy returned.
 *
 * Calls on other threads: every public call that uses more than the
 * world's fixed fields is counted in @users (tpu__world_enter()).  The
 * destroy claims the magic first, so that no call starts after it; then,
 * if calls are in flight, it sets @cancel, which ends them (the shared
 * segment's waits and the store's look at it, tpu_world_pipe() wakes, the
 * rendezvous goes at once), and it frees nothing they use before @users
 * is back to 0; then it clears @cancel, for its own barrier.
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
/* This host's identity: a boot id, a namespace inode and a test's salt. */
#define WORLD_HOST_MAX		96
/* The first message on a world pipe: this text and the caller's rank. */
#define WORLD_HELLO		"tpu-world-hello "

struct world_hello;
struct world_coll;

struct tpu_world {
	uint32_t magic;			/* WORLD_MAGIC; TPU__MAGIC_DEAD once destroyed */
	unsigned int fork_gen;		/* tpu__fork_gen() at creation */
	atomic_int refs;
	struct tpu_context *ctx;
	struct tpu_world_info info;
	char job[64];
	uint32_t timeout_ms;
	char host[WORLD_HOST_MAX];	/* host_id() */

	struct store_server *server;	/* rank 0 */
	pthread_mutex_t store_lock;	/* one request at a time on the store socket */
	struct store_client *store;
	bool ext_store;			/* the caller's store (ext), not store/server */
	struct tpu_world_store ext;
	unsigned int barriers;		/* under store_lock */
	bool barrier_cut;		/* under store_lock: the last one ended by a destroy */
	unsigned int exchanges;		/* under store_lock: tpu_world_exchange_blobs() rounds */

	struct tpu_rendezvous *rdv;	/* NULL once ctx_gone */
	struct tpu_listener *listener;	/* pipes */
	/* On the context's list of objects left open once formed (world.c). */
	struct tpu__ctx_obj obj;
	bool ctx_gone;			/* the world's part of its context closed */
	char (*rdv_url)[WORLD_URL_MAX];	/* per rank */
	char (*pipe_url)[WORLD_URL_MAX];

	atomic_int users;		/* public calls inside; decremented under lock */
	atomic_bool cancel;		/* a destroy ends the calls inside: see above */
	pthread_mutex_t lock;		/* pipes, closing, users reaching 0 */
	pthread_cond_t cond;		/* a pipe arrived, closing, cancel, users 0 */
	struct tpu_pipe **pipes;	/* per rank, once made */
	bool closing;
	/* ctx thread */
	struct world_hello *hellos;	/* accepted pipes whose hello is being read */
	struct world_coll *coll;	/* world_coll.c's, made on first use (under lock) */
};

/*
 * Tests only: appended to this process's host identity, so that ranks of
 * one machine look as if they were on different hosts.
 */
extern char tpu__world_host_salt[16];

/* -EINVAL (NULL, not a world), TPU_E_DESTROYED, or TPU_E_FORKED (a child forked since). */
tpu_status tpu__world_check(const struct tpu_world *w);
void tpu__world_ref(struct tpu_world *w);
void tpu__world_unref(struct tpu_world *w);
/*
 * A public call begins: tpu__world_check()'s errors, or 0 with the call
 * counted until tpu__world_leave(), which returns @st (TPU_E_CLOSED for a
 * failure of a call that a destroy ended).
 */
tpu_status tpu__world_enter(struct tpu_world *w);
tpu_status tpu__world_leave(struct tpu_world *w, tpu_status st);

/* world_member.c: the store's record of who joined; see there. */
/* Check the size against the first rank's and claim this rank. */
tpu_status tpu__world_join(struct tpu_world *w, uint64_t deadline);
/*
 * Rank 0 whose store port is taken: if a rank 0 of this world already
 * claimed it there, join as the second one, which breaks the world for
 * all (-EEXIST); else -EADDRINUSE.  Sets w->store when it joins, after
 * proving @secret when one is set.
 */
tpu_status tpu__world_rank0_again(struct tpu_world *w, const struct tpu__secret *secret,
				  uint64_t deadline);
/* Mark the world broken for every rank (and say why on stderr); returns @st. */
tpu_status tpu__world_break(struct tpu_world *w, tpu_status st, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* 0, or the status the world was broken with. */
tpu_status tpu__world_broken(struct tpu_world *w);
/* tpu__store_get() until @deadline, failing early if the world broke. */
tpu_status tpu__world_wait_key(struct tpu_world *w, const char *key, void *buf, size_t size,
			       size_t *len, uint64_t deadline);

/* world_store.c: the world's store, the library's or the caller's. */
tpu_status tpu__world_store_set(struct tpu_world *w, const char *key, const void *val,
				size_t len);
/* Wait up to @timeout_ms for @key; -ETIMEDOUT, -EMSGSIZE (*@len the length). */
tpu_status tpu__world_store_get(struct tpu_world *w, const char *key, void *buf, size_t size,
				size_t *len, uint32_t timeout_ms);
tpu_status tpu__world_store_add(struct tpu_world *w, const char *key, int64_t delta,
				int64_t *total);
/* Bound later requests to @deadline (the library's store only). */
void tpu__world_store_bound(struct tpu_world *w, uint64_t deadline);
/* The library's store connection closed (a reply that never came). */
bool tpu__world_store_lost(const struct tpu_world *w);

/* world_pipe.c */
tpu_status tpu__world_pipes_start(struct tpu_world *w);
/* ctx thread: stop accepting, close every pipe. */
void tpu__world_pipes_close(struct tpu_world *w);

/* world_coll.c */
void tpu__world_coll_free(struct world_coll *wc);
/* The collectives' segment and its module regions, now (tpu_world_destroy). */
void tpu__world_coll_drop_shm(struct world_coll *wc);

/* world_shm.c: the shared-memory path of the collectives (made on first use in *@ws). */
struct world_shm;
struct tpu__shm_call;
void tpu__world_shm_free(struct world_shm *ws);
/*
 * Run @c over the shared segment, or the segments of each host and the
 * network between them, if this world's collectives take them (*@ran then
 * true); 0 with *@ran false: take the rendezvous.  @step is the call's
 * step id and @devices every rank's device name (for the leaders' part).
 * @reason says why a call failed.
 */
tpu_status tpu__world_shm_run(struct tpu_world *w, struct world_shm **ws,
			      const struct tpu__shm_call *c, int64_t step,
			      const char *const *devices, char *reason, size_t size, bool *ran);
bool tpu__world_shm_on(const struct world_shm *ws);
/* "shm", "hier", "rdv" once decided, "" before (or where the set-up failed). */
const char *tpu__world_shm_path(const struct world_shm *ws);

#endif /* TPU_WORLD_H */
