// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* What the pipe tests share: see pipe_harness.h. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pipe_harness.h"
#include "tap.h"

void rec_init(struct rec *r)
{
	memset(r, 0, sizeof(*r));
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->cond, NULL);
}

void rec_post(struct tag *t, tpu_status st, struct tpu_message *m)
{
	struct rec *r = t->r;

	pthread_mutex_lock(&r->lock);
	if (r->n < 256) {
		r->order[r->n] = t->id;
		r->st[r->n] = st;
		r->msg[r->n] = m;
		r->thread[r->n] = pthread_self();
	}
	r->n++;
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
}

bool rec_wait(struct rec *r, int n)
{
	return rec_wait_ms(r, n, WAIT_S * 1000);
}

bool rec_wait_ms(struct rec *r, int n, int ms)
{
	struct timespec until;
	bool ok;

	deadline_in(&until, ms);
	pthread_mutex_lock(&r->lock);
	while (r->n < n && pthread_cond_timedwait(&r->cond, &r->lock, &until) == 0)
		;
	ok = r->n >= n;
	pthread_mutex_unlock(&r->lock);
	return ok;
}

void on_write(void *arg, tpu_status st, struct tpu_message *m)
{
	rec_post(arg, st, m);
}

void on_desc(void *arg, tpu_status st, struct tpu_message *d)
{
	rec_post(arg, st, d);
}

void on_accept(void *arg, tpu_status st, struct tpu_pipe *p)
{
	struct tag *t = arg;

	t->r->pipe = p;
	rec_post(t, st, NULL);
}


bool pair_open(struct pair *pp, const char *url, const char *channels)
{
	struct tpu_context_options o = { .channels = channels };
	struct rec r;
	struct tag t = { &r, 0 };
	char got[300];

	memset(pp, 0, sizeof(*pp));
	rec_init(&r);
	if (tpu_context_create(&o, &pp->a) || tpu_context_create(&o, &pp->b) ||
	    tpu_listener_create(pp->a, &url, 1, &pp->l) ||
	    tpu_listener_url(pp->l, NULL, got, sizeof(got)) ||
	    tpu_listener_accept(pp->l, on_accept, &t))
		return false;
	if (!tpu_pipe_connect(pp->b, got, &pp->client) && rec_wait(&r, 1) && !r.st[0]) {
		pp->server = r.pipe;
		return true;
	}
	/*
	 * The accept may still be pending, its callback aimed at this frame's
	 * @r: closing the listener calls it back now, before the frame goes.
	 */
	tpu_listener_close(pp->l);
	pp->l = NULL;
	rec_wait(&r, 1);
	if (r.n > 0 && !r.st[0])
		tpu_pipe_close(r.pipe);
	return false;
}

void pair_close(struct pair *pp)
{
	tpu_pipe_close(pp->client);
	tpu_pipe_close(pp->server);
	tpu_listener_close(pp->l);
	tpu_context_destroy(pp->b);
	tpu_context_destroy(pp->a);
}

static void writer_child(const char *url, const struct tpu_context_options *o, size_t len,
			 bool tensor)
{
	struct tpu_context *ctx;
	struct tpu_pipe *p;
	uint8_t *src = calloc(1, len);
	struct tpu_payload pl = { .data = src, .len = len };
	struct tpu_message_tensor t = { .data = src, .len = len };
	struct tpu_message m = { 0 };
	struct rec w;
	struct tag tw = { &w, 0 };

	if (tensor) {
		m.tensors = &t;
		m.ntensors = 1;
	} else {
		m.payloads = &pl;
		m.npayloads = 1;
	}
	rec_init(&w);
	if (!src || tpu_context_create(o, &ctx) || tpu_pipe_connect(ctx, url, &p) ||
	    tpu_pipe_write(p, &m, on_write, &tw))
		_exit(1);
	rec_wait(&w, 1);
	_exit(0);
}

bool writer_start(struct writer_peer *ww, const char *url, const char *channels, size_t len,
		  bool tensor)
{
	struct tpu_context_options o = { .channels = channels };
	struct tag t = { &ww->r, 0 };
	char got[300];

	memset(ww, 0, sizeof(*ww));
	ww->child = -1;
	rec_init(&ww->r);
	if (tpu_context_create(&o, &ww->ctx) || tpu_listener_create(ww->ctx, &url, 1, &ww->l) ||
	    tpu_listener_url(ww->l, NULL, got, sizeof(got)) ||
	    tpu_listener_accept(ww->l, on_accept, &t))
		return false;
	ww->child = fork();
	if (ww->child == 0)
		writer_child(got, &o, len, tensor);
	if (ww->child < 0 || !rec_wait(&ww->r, 1) || ww->r.st[0])
		return false;
	ww->pipe = ww->r.pipe;
	/* Waited for below, so t outlives the callback. */
	t.id = 1;
	if (tpu_pipe_read_descriptor(ww->pipe, on_desc, &t) || !rec_wait(&ww->r, 2) ||
	    ww->r.st[1])
		return false;
	ww->desc = ww->r.msg[1];
	return true;
}

void writer_kill(struct writer_peer *ww)
{
	if (ww->child > 0) {
		kill(ww->child, SIGKILL);
		waitpid(ww->child, NULL, 0);
		ww->child = -1;
	}
}

void writer_close(struct writer_peer *ww)
{
	writer_kill(ww);
	if (ww->pipe)
		tpu_pipe_close(ww->pipe);
	if (ww->l)
		tpu_listener_close(ww->l);
	if (ww->ctx)
		tpu_context_destroy(ww->ctx);
}
