// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * A pipe to any peer, made on first use.  One pipe serves each pair of
 * ranks; the store decides which of the two dials it (the first to add
 * one to "tpu/pipe/LO-HI"), so two ranks asking at once agree without a
 * race.  The dialer's first message says its rank; the other end's world
 * reads that message on the context thread and keeps the pipe until its
 * user asks for it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "world.h"

struct world_hello {
	struct world_hello *next;
	struct tpu_world *w;		/* referenced */
	struct tpu_pipe *pipe;
	int rank;
	bool closed;			/* tpu__world_pipes_close() closed the pipe */
};

/* The dialer's first message; freed by its write's callback. */
struct hello_msg {
	struct tpu_message msg;
	char text[sizeof(WORLD_HELLO) + 12];
};

static void hello_written(void *arg, tpu_status status, struct tpu_message *msg)
{
	(void)arg;
	(void)status;		/* a pipe that failed fails its user's calls too */
	free(tpu__container_of(msg, struct hello_msg, msg));
}

static void hello_unlink(struct world_hello *h)
{
	struct world_hello **pp;

	for (pp = &h->w->hellos; *pp; pp = &(*pp)->next)
		if (*pp == h) {
			*pp = h->next;
			break;
		}
}

static void hello_end(struct world_hello *h, bool keep)
{
	struct tpu_world *w = h->w;

	hello_unlink(h);
	if (!h->closed && !keep)
		tpu_pipe_close(h->pipe);
	tpu__world_unref(w);
	free(h);
}

static void hello_read(void *arg, tpu_status status, struct tpu_message *msg)
{
	struct world_hello *h = arg;
	struct tpu_world *w = h->w;
	bool keep = false;

	(void)msg;
	pthread_mutex_lock(&w->lock);
	if (!status && !h->closed && !w->closing && !w->pipes[h->rank]) {
		w->pipes[h->rank] = h->pipe;
		keep = true;
		pthread_cond_broadcast(&w->cond);
	}
	pthread_mutex_unlock(&w->lock);
	if (!keep && !status)
		tpu__log_debug("world: a second pipe from rank %d is closed", h->rank);
	hello_end(h, keep);
}

/* "tpu-world-hello RANK", from another rank of this world, and nothing else. */
static int hello_rank(const struct tpu_world *w, const struct tpu_message *d)
{
	const size_t n = sizeof(WORLD_HELLO) - 1;
	uint64_t r;

	if (d->npayloads || d->ntensors || d->metadata_len <= n || d->metadata_len > n + 10 ||
	    memcmp(d->metadata, WORLD_HELLO, n) ||
	    !tpu__parse_dec((struct tpu_str){ (const char *)d->metadata + n, d->metadata_len - n },
			    (uint64_t)w->info.size - 1, &r) ||
	    r >= (uint64_t)w->info.size || (int)r == w->info.rank)
		return -1;
	return (int)r;
}

static void hello_desc(void *arg, tpu_status status, struct tpu_message *desc)
{
	struct world_hello *h = arg;

	if (status || h->closed || h->w->closing || (h->rank = hello_rank(h->w, desc)) < 0) {
		if (!status)
			tpu__log_debug("world: a pipe that did not say its rank is closed");
		hello_end(h, false);
		return;
	}
	if (tpu_pipe_read(h->pipe, desc, hello_read, h))
		hello_end(h, false);
}

static void accepted(void *arg, tpu_status status, struct tpu_pipe *pipe)
{
	struct tpu_world *w = arg;
	struct world_hello *h;

	if (status || w->closing) {
		tpu_pipe_close(pipe);
		tpu__world_unref(w);		/* the accept's */
		return;
	}
	h = calloc(1, sizeof(*h));
	if (h) {
		h->w = w;
		h->pipe = pipe;
		tpu__world_ref(w);
		h->next = w->hellos;
		w->hellos = h;
		if (tpu_pipe_read_descriptor(pipe, hello_desc, h))
			hello_end(h, false);
	} else {
		tpu_pipe_close(pipe);
	}
	if (tpu_listener_accept(w->listener, accepted, w))
		tpu__world_unref(w);
}

tpu_status tpu__world_pipes_start(struct tpu_world *w)
{
	tpu_status st;

	tpu__world_ref(w);
	st = tpu_listener_accept(w->listener, accepted, w);
	if (st)
		tpu__world_unref(w);
	return st;
}

void tpu__world_pipes_close(struct tpu_world *w)
{
	struct world_hello *h;

	pthread_mutex_lock(&w->lock);
	w->closing = true;
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
	/* Their callbacks run later, with TPU_E_CLOSED, and drop their references. */
	tpu_listener_close(w->listener);
	w->listener = NULL;
	for (h = w->hellos; h; h = h->next)
		if (!h->closed) {
			h->closed = true;
			tpu_pipe_close(h->pipe);
		}
	for (int r = 0; w->pipes && r < w->info.size; r++) {
		tpu_pipe_close(w->pipes[r]);
		w->pipes[r] = NULL;
	}
}

/* Dial @rank and say who is calling; the pipe is the pair's from now on. */
static tpu_status dial(struct tpu_world *w, int rank, struct tpu_pipe **out)
{
	struct hello_msg *m = calloc(1, sizeof(*m));
	struct tpu_pipe *p;
	tpu_status st;
	int n;

	if (!m)
		return -ENOMEM;
	n = snprintf(m->text, sizeof(m->text), WORLD_HELLO "%d", w->info.rank);
	m->msg.metadata = m->text;
	m->msg.metadata_len = (size_t)n;
	st = tpu_pipe_connect(w->ctx, w->pipe_url[rank], &p);
	if (st) {
		free(m);
		return st;
	}
	/* Written before the user can write: the hello is the pipe's first message. */
	st = tpu_pipe_write(p, &m->msg, hello_written, NULL);
	if (st) {
		free(m);
		tpu_pipe_close(p);
		return st;
	}
	*out = p;
	return 0;
}

/* tpu_world_pipe() inside the world (tpu__world_enter()). */
static tpu_status pipe_of(struct tpu_world *w, int rank, struct tpu_pipe **out)
{
	int lo, hi;
	struct timespec until;
	struct tpu_pipe *p = NULL;
	char key[48];
	int64_t n = 0;
	tpu_status st = 0;

	pthread_mutex_lock(&w->lock);
	p = w->pipes[rank];
	pthread_mutex_unlock(&w->lock);
	if (p) {
		*out = p;
		return 0;
	}
	lo = rank < w->info.rank ? rank : w->info.rank;
	hi = rank < w->info.rank ? w->info.rank : rank;
	snprintf(key, sizeof(key), "tpu/pipe/%d-%d", lo, hi);
	pthread_mutex_lock(&w->store_lock);
	tpu__world_store_bound(w, tpu__store_now_ms() + w->timeout_ms);
	st = tpu__world_store_add(w, key, 1, &n);
	pthread_mutex_unlock(&w->store_lock);
	if (st)
		return st;
	if (n == 1) {
		st = dial(w, rank, &p);
		if (st)
			return st;
		pthread_mutex_lock(&w->lock);
		w->pipes[rank] = p;
		pthread_cond_broadcast(&w->cond);
		pthread_mutex_unlock(&w->lock);
		*out = p;
		return 0;
	}
	/* The other rank (or another thread here) dials: wait for that pipe. */
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += (time_t)(w->timeout_ms / 1000);
	until.tv_nsec += (long)(w->timeout_ms % 1000) * 1000000;
	if (until.tv_nsec >= 1000000000) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&w->lock);
	while (!w->pipes[rank] && !w->closing && !atomic_load(&w->cancel) && !st)
		st = -pthread_cond_timedwait(&w->cond, &w->lock, &until);
	p = w->pipes[rank];
	pthread_mutex_unlock(&w->lock);
	if (p) {
		*out = p;
		return 0;
	}
	return st ? st : TPU_E_CLOSED;
}

TPU_API tpu_status tpu_world_pipe(struct tpu_world *w, int rank, struct tpu_pipe **out)
{
	tpu_status st;

	if (!out)
		return -EINVAL;
	*out = NULL;
	st = tpu__world_check(w);
	if (st)
		return st;
	if (rank < 0 || rank >= w->info.size || rank == w->info.rank)
		return -EINVAL;
	if (tpu__ctx_on_thread(w->ctx))
		return -EDEADLK;
	st = tpu__world_enter(w);
	if (st)
		return st;
	st = pipe_of(w, rank, out);
	if (!st && atomic_load(&w->cancel)) {
		/* The destroy closes it. */
		*out = NULL;
		st = TPU_E_CLOSED;
	}
	return tpu__world_leave(w, st);
}
