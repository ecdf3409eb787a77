// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * PostToPeer and RecvFromPeer: every byte of a collective is a rendezvous
 * send or receive.  The key is a TF key from one member's device to the
 * other's, its edge "coll/GROUP/INSTANCE/TAG/SUBDIV/INDEX" and its frame
 * the step id, so the remote rendezvous routes it to the sender's worker
 * and two steps or instances never meet.  Operations are asynchronous; a
 * run waits for the ones it needs, and never returns while one still
 * reads or writes its buffers (tpu__coll_drain).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coll.h"

static tpu_status build_key(struct tpu__coll_run *run, struct tpu__coll_op *op, int src, int dst,
			    const char *tag, int subdiv, uint64_t index)
{
	char edge[128];
	struct tpu_key k = { .src_incarnation = 1, .frame_id = (uint64_t)run->exec->step_id };

	/* A group's own messages: whichever instance and step a member decides in. */
	if (run->group_keys) {
		k.frame_id = 0;
		snprintf(edge, sizeof(edge), "coll/%d/group/%s/%d/%llu", (int)run->group_key, tag,
			 subdiv, (unsigned long long)index);
	} else {
		snprintf(edge, sizeof(edge), "coll/%d/%d/%s/%d/%llu", (int)run->group_key,
			 (int)run->inst.instance_key, tag, subdiv, (unsigned long long)index);
	}
	k.src_device = tpu_str(run->devices[src]);
	k.dst_device = tpu_str(run->devices[dst]);
	k.edge_name = tpu_str(edge);
	return tpu_key_build(&k, op->key, sizeof(op->key), &op->key_len);
}

static struct tpu__coll_op *op_new(struct tpu__coll_run *run, bool is_send, int subdiv, int chunk)
{
	struct tpu__coll_op *op = calloc(1, sizeof(*op));

	if (op) {
		op->run = run;
		op->is_send = is_send;
		op->subdiv = subdiv;
		op->chunk = chunk;
	}
	return op;
}

static void op_list(struct tpu__coll_run *run, struct tpu__coll_op *op)
{
	pthread_mutex_lock(&run->lock);
	op->next = run->ops;
	run->ops = op;
	pthread_mutex_unlock(&run->lock);
}

static void op_unlist(struct tpu__coll_run *run, struct tpu__coll_op *op)
{
	pthread_mutex_lock(&run->lock);
	for (struct tpu__coll_op **p = &run->ops; *p; p = &(*p)->next)
		if (*p == op) {
			*p = op->next;
			break;
		}
	pthread_mutex_unlock(&run->lock);
	free(op);
}

static void op_complete(struct tpu__coll_op *op, tpu_status status, size_t len)
{
	struct tpu__coll_run *run = op->run;

	pthread_mutex_lock(&run->lock);
	op->status = status;
	op->len = len;
	op->done = true;
	pthread_cond_broadcast(&run->cond);
	pthread_mutex_unlock(&run->lock);
}

static void send_done(void *arg, tpu_status status)
{
	op_complete(arg, status, 0);
}

static void recv_done(void *arg, tpu_status status, size_t len)
{
	op_complete(arg, status, len);
}

/* Time left before the run's deadline, at least 1 ns; 0 once it passed. */
static uint64_t time_left(const struct tpu__coll_run *run)
{
	uint64_t now = tpu__coll_now_ns();

	return now >= run->deadline_ns ? 0 : run->deadline_ns - now;
}

tpu_status tpu__coll_post_send(struct tpu__coll_run *run, int peer, const char *tag, int subdiv,
			       uint64_t index, const void *buf, size_t len, int chunk)
{
	struct tpu__coll_op *op = op_new(run, true, subdiv, chunk);
	struct tpu_tensor t = { .data = (void *)buf, .len = len };
	tpu_status err;

	if (!op)
		return -ENOMEM;
	err = build_key(run, op, run->rank, peer, tag, subdiv, index);
	if (err) {
		free(op);
		return err;
	}
	op_list(run, op);
	err = tpu_rendezvous_send(run->coll->rdv, op->key, op->key_len, &t, 0, send_done, op);
	if (err)
		op_unlist(run, op);
	return err;
}

tpu_status tpu__coll_post_recv(struct tpu__coll_run *run, int peer, const char *tag, int subdiv,
			       uint64_t index, void *buf, size_t len, struct tpu__coll_op **out)
{
	struct tpu__coll_op *op = op_new(run, false, subdiv, -1);
	struct tpu_tensor t = { .data = buf, .len = len };
	uint64_t left = time_left(run);
	tpu_status err;

	if (!op)
		return -ENOMEM;
	if (!left) {
		free(op);
		return -ETIMEDOUT;
	}
	err = build_key(run, op, peer, run->rank, tag, subdiv, index);
	if (err) {
		free(op);
		return err;
	}
	op_list(run, op);
	err = tpu_rendezvous_recv(run->coll->rdv, op->key, op->key_len, &t, left, recv_done, op);
	if (err) {
		op_unlist(run, op);
		return err;
	}
	*out = op;
	return 0;
}

/*
 * Wait for @op until the deadline; past it, withdraw the operation (its
 * callback then still runs, with -ECANCELED or its real result) and call
 * it a timeout.  Called with run->lock held.
 */
static tpu_status wait_op(struct tpu__coll_run *run, struct tpu__coll_op *op)
{
	while (!op->done) {
		uint64_t left = time_left(run);
		struct timespec ts;

		if (!left) {
			pthread_mutex_unlock(&run->lock);
			tpu_rendezvous_cancel(run->coll->rdv, op->key, op->key_len);
			pthread_mutex_lock(&run->lock);
			while (!op->done)
				pthread_cond_wait(&run->cond, &run->lock);
			return op->status == -ECANCELED ? -ETIMEDOUT : op->status;
		}
		clock_gettime(CLOCK_MONOTONIC, &ts);
		left = left > 100000000ull ? 100000000ull : left;
		ts.tv_sec += (time_t)(left / 1000000000ull);
		ts.tv_nsec += (long)(left % 1000000000ull);
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&run->cond, &run->lock, &ts);
	}
	return op->status;
}

tpu_status tpu__coll_wait_recv(struct tpu__coll_run *run, struct tpu__coll_op *op, size_t len)
{
	tpu_status err;

	pthread_mutex_lock(&run->lock);
	err = wait_op(run, op);
	pthread_mutex_unlock(&run->lock);
	/* Resolution agreed on the sizes; another length is a peer out of step. */
	if (!err && op->len != len)
		err = -EPROTO;
	op_unlist(run, op);
	return err;
}

tpu_status tpu__coll_wait_sends(struct tpu__coll_run *run, int subdiv, int chunk)
{
	tpu_status err = 0;

	pthread_mutex_lock(&run->lock);
	for (struct tpu__coll_op **p = &run->ops; *p && !err; ) {
		struct tpu__coll_op *op = *p;

		if (!op->is_send || (subdiv >= 0 && op->subdiv != subdiv) ||
		    (chunk >= 0 && op->chunk != chunk)) {
			p = &op->next;
			continue;
		}
		err = wait_op(run, op);
		/* The list may have changed while the lock was dropped: unlink by search. */
		for (p = &run->ops; *p != op; p = &(*p)->next)
			;
		*p = op->next;
		free(op);
	}
	pthread_mutex_unlock(&run->lock);
	return err;
}

void tpu__coll_drain(struct tpu__coll_run *run, int subdiv)
{
	pthread_mutex_lock(&run->lock);
	for (struct tpu__coll_op **p = &run->ops; *p; ) {
		struct tpu__coll_op *op = *p;

		if (subdiv >= 0 && op->subdiv != subdiv) {
			p = &op->next;
			continue;
		}
		while (!op->done)
			pthread_cond_wait(&run->cond, &run->lock);
		/* Other subdivisions may have listed operations meanwhile: unlink by search. */
		for (p = &run->ops; *p != op; p = &(*p)->next)
			;
		*p = op->next;
		free(op);
	}
	pthread_mutex_unlock(&run->lock);
}
