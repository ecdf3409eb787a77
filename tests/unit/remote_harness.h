/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * What the remote rendezvous tests share (remote_harness.c):
 *
 *   - rh_key: the TF key of an edge between two tasks' CPUs;
 *   - struct rh_done: the result of receives or sends, for the test thread
 *     to wait on (rh_on_recv, rh_on_send, rh_done_wait);
 *   - rh_ctx, struct rh_worker: a context, and a worker (a context and its
 *     remote rendezvous, listening on loopback unless told otherwise);
 *   - struct rh_pair: two workers of job w, tasks 0 and 1, that know each
 *     other over tcp on loopback;
 *   - struct rh_att: a member that speaks the rendezvous's wire format
 *     itself on a raw pipe to a worker (a hostile peer, or one that claims
 *     to be a task), sending what the test says and reading what comes.
 */
#ifndef UNIT_REMOTE_HARNESS_H
#define UNIT_REMOTE_HARNESS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "remote/remote.h"
#include "tpu_user.h"

#define RH_TASK(i)	"/job:w/replica:0/task:" #i
#define RH_SEC		1000000000ull
/* Room for any key rh_key builds. */
#define RH_KEY_MAX	512

/*
 * The key of @edge from @src's CPU to @dst's (task names), with source
 * incarnation @inc and iteration @iter, into @buf of RH_KEY_MAX bytes: its
 * length, 0 if it could not be built.
 */
size_t rh_key(char *buf, const char *src, const char *dst, const char *edge, uint64_t inc,
	      uint64_t iter);

struct rh_done {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int n, bad;		/* completions, and those that failed */
	tpu_status st;		/* the last one's */
	size_t len;		/* the last receive's length */
};

#define RH_DONE_INIT	{ PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0 }

/* Completion callbacks of a receive and a send; @arg is a struct rh_done. */
void rh_on_recv(void *arg, tpu_status st, size_t len);
void rh_on_send(void *arg, tpu_status st);
/* Wait until @d saw @n completions, at most @s seconds; false on timeout. */
bool rh_done_wait(struct rh_done *d, int n, int s);

/*
 * A context with @o (NULL: tcp only) and the job secret @secret: NULL
 * leaves the one the environment gave, "" sets none, else that string.
 */
struct tpu_context *rh_ctx(const struct tpu_context_options *o, const char *secret);

struct rh_worker {
	struct tpu_context *ctx;
	struct tpu_rendezvous *rdv;
	char url[300];		/* its first listening URL */
};

/*
 * A worker: rh_ctx(@o, @secret) and a remote rendezvous with @ro, on
 * tcp://127.0.0.1:0 when @ro names no listening URL.  False if any step
 * failed; rh_worker_close frees what was made in any case.
 */
bool rh_worker_open(struct rh_worker *w, const struct tpu_context_options *o, const char *secret,
		    const struct tpu_remote_options *ro);
/* A worker over shm alone (no kmod) with job secret @secret (NULL: none), listening on
 * shm://@name-<pid>-@tag. */
bool rh_shm_worker_open(struct rh_worker *w, const char *task, const char *name, const char *tag,
			const char *secret);
void rh_worker_close(struct rh_worker *w);

/* Worker a is task 0 of job w, b task 1, each in the other's map. */
struct rh_pair {
	struct rh_worker a, b;
};

/* Both with @secret (as rh_ctx's); false if any step failed (rh_pair_down in any case). */
bool rh_pair_up(struct rh_pair *p, const char *secret);
void rh_pair_down(struct rh_pair *p);

/* The member's end of its pipe; the struct must outlive the pipe (static in a test). */
struct rh_att {
	struct tpu_context *ctx;
	struct tpu_pipe *p;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int ndesc, nread;	/* descriptors and reads the pipe completed */
	int taken;		/* descriptors rh_att_next() handled */
	tpu_status desc_st, read_st;
	struct tpu_message *desc;
	uint8_t meta[512];	/* the last descriptor's metadata, copied in its callback */
	size_t meta_len;
	uint8_t hdr[512];	/* the one rh_att_next() parsed: where its header's key points */
	/* What rh_att_send() wrote, kept until the write is surely done. */
	uint8_t out_meta[8][512];
	struct tpu_message out[8];
	struct tpu_message_tensor out_t[8];
	int slot;
	int nwritten;		/* of those, the writes done */
};

/*
 * Connect @a to the worker at @url from a context of its own (tcp, secret
 * @secret as rh_ctx's), and start reading what the worker sends.  False if
 * that failed; rh_att_close in any case (also on a zeroed, never opened one).
 */
bool rh_att_open(struct rh_att *a, const char *url, const char *secret);
void rh_att_close(struct rh_att *a);
/* Write one message of the wire format: header fields, a tensor of @len bytes if @data. */
void rh_att_send(struct rh_att *a, enum remote_msg type, uint64_t id, tpu_status status,
		 uint64_t len, const char *key, const void *data);
/* The same with the push protocol's @seq (PUSH, CREDIT, REQ_SEEN); no status. */
void rh_att_send_seq(struct rh_att *a, enum remote_msg type, uint64_t id, uint64_t seq,
		     uint64_t len, const char *key, const void *data);
/*
 * The next message the worker sends on @a, within @ms: 0 and its header in
 * @h, -ETIMEDOUT, or the pipe's error (the worker closed it).  A tensor is
 * read into @buf of @cap bytes (-EPROTO if @buf is NULL, -EMSGSIZE if it
 * does not fit), and h->len is then the number of tensors that came (0 or
 * 1).  h->key points into @a, valid until the next call.
 */
tpu_status rh_att_next(struct rh_att *a, struct remote_hdr *h, void *buf, size_t cap, int ms);
/* Whether the worker closed @a's pipe within @ms (what comes before is read and dropped). */
bool rh_att_closed(struct rh_att *a, int ms);

#endif
