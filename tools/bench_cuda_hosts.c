// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * tpbench cuda between two hosts: `--listen URL` on one answers pipes,
 * `--connect URL` on the other measures them (tests/vm/pair-xfer.sh runs
 * both in the VM pair).  One pipe per device pair and channel; each round
 * writes one tensor with its round number as a 4-byte payload, and ends
 * when the reader's reply arrives (a message of one payload: its status
 * and the bytes it found wrong), so a round includes that small message's
 * way back.  The reader puts each tensor where the writer suggests (CPU or
 * CUDA device 0) and checks every byte; a message with no tensor and the
 * payload "bye" stops it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_cuda_shared.h"
#include "units.h"

struct reply {
	int32_t st;
	uint32_t bad;
};

static tpu_status wait_for(struct wait1 *w, tpu_status st)
{
	if (st)
		return st;
	sem_wait(&w->sem);
	return w->st;
}

/* ---- the reader ---------------------------------------------------------- */

struct dest {
	uint32_t type;
	size_t len;
	uint8_t *host, *check;
	cu_ptr dev;
};

static void dest_free(struct dest *d)
{
	if (d->dev)
		cu.mem_free(d->dev);
	free(d->host);
	free(d->check);
	memset(d, 0, sizeof(*d));
}

/* Room for a tensor of @len bytes in memory of @type. */
static tpu_status dest_get(struct dest *d, uint32_t type, size_t len)
{
	if (d->type == type && d->len == len && d->check)
		return 0;
	dest_free(d);
	d->type = type;
	d->len = len;
	d->check = malloc(len ? len : 1);
	if (type == TPU_DEVICE_CUDA)
		return !d->check || cuda_open() || cu.mem_alloc(&d->dev, len ? len : 1) ? -ENODEV : 0;
	d->host = malloc(len ? len : 1);
	return d->host && d->check ? 0 : -ENOMEM;
}

/* One pipe: rounds until the writer closes it (0) or says goodbye (1). */
static int serve_pipe(struct tpu_pipe *p, struct dest *d)
{
	struct wait1 w;
	int rc = 0;

	sem_init(&w.sem, 0, 0);
	for (;;) {
		struct tpu_payload reply_pl;
		struct reply rep = { 0 };
		struct tpu_message reply = { .payloads = &reply_pl, .npayloads = 1 };
		struct tpu_message *m;
		uint32_t round = 0;
		char word[4] = "";
		tpu_status st = wait_for(&w, tpu_pipe_read_descriptor(p, done_msg, &w));

		if (st)
			break;		/* the writer closed the pipe */
		m = w.msg;
		if (m->npayloads != 1 || m->payloads[0].len != 4 || m->ntensors > 1) {
			st = -EPROTO;
		} else {
			m->payloads[0].data = m->ntensors ? (void *)&round : word;
			if (m->ntensors) {
				struct tpu_message_tensor *t = &m->tensors[0];

				st = dest_get(d, t->target.type, t->len);
				t->device = (struct tpu_device){ d->type, 0 };
				t->data = d->dev ? (void *)(uintptr_t)d->dev : d->host;
			}
		}
		if (!st)
			st = wait_for(&w, tpu_pipe_read(p, m, done_msg, &w));
		if (!st && !m->ntensors) {
			rc = !memcmp(word, "bye", 4);
			break;
		}
		if (!st) {
			int n = bench_cuda_count_bad(d->host, d->dev, d->check, d->len, round);

			if (n < 0)
				st = n;
			else
				rep.bad = (uint32_t)n;
		}
		rep.st = st;
		reply_pl = (struct tpu_payload){ .data = &rep, .len = sizeof(rep) };
		if (wait_for(&w, tpu_pipe_write(p, &reply, done_msg, &w)) || st)
			break;
	}
	sem_destroy(&w.sem);
	return rc;
}

int bench_cuda_listen(const char *url, const char *xport)
{
	struct tpu_context_options o = { .transports = xport };
	struct tpu_context *ctx = NULL;
	struct tpu_listener *l = NULL;
	struct dest d = { 0 };
	char got[300];
	struct wait1 w;
	tpu_status st;
	int bye = 0;

	sem_init(&w.sem, 0, 0);
	st = tpu_context_create(&o, &ctx);
	if (!st)
		st = tpu_listener_create(ctx, &url, 1, &l);
	if (!st)
		st = tpu_listener_url(l, NULL, got, sizeof(got));
	if (!st) {
		printf("tpbench cuda: listening on %s\n", got);
		fflush(stdout);
	}
	while (!st && !bye) {
		st = wait_for(&w, tpu_listener_accept(l, done_pipe, &w));
		if (!st) {
			bye = serve_pipe(w.pipe, &d);
			tpu_pipe_close(w.pipe);
		}
	}
	if (st)
		fprintf(stderr, "tpbench cuda: serving %s: %s\n", url, tpu_strerror(st));
	dest_free(&d);
	tpu_listener_close(l);
	tpu_context_destroy(ctx);
	sem_destroy(&w.sem);
	return st ? 1 : 0;
}

/* ---- the writer ---------------------------------------------------------- */

struct result bench_cuda_connect(const char *url, const struct run *r)
{
	struct result res = { 0 };
	struct tpu_context_options o = { .transports = r->xport, .channels = r->chan };
	struct tpu_context *ctx = NULL;
	struct tpu_pipe *p = NULL;
	struct wait1 w;
	uint8_t *host = malloc(r->size);
	uint64_t *ns = calloc(r->iters, sizeof(*ns));
	cu_ptr dev = 0;
	tpu_status st = host && ns ? 0 : -ENOMEM;

	sem_init(&w.sem, 0, 0);
	/* Opened whatever the pair, to say which driver the run had. */
	if (!st && cuda_open() && r->pair->src == TPU_DEVICE_CUDA)
		st = -ENODEV;
	if (!st && r->pair->src == TPU_DEVICE_CUDA && cu.mem_alloc(&dev, r->size))
		st = -ENOMEM;
	if (!st)
		st = tpu_context_create(&o, &ctx);
	if (!st)
		st = tpu_pipe_connect(ctx, url, &p);
	for (unsigned int k = 0; !st && k < r->iters; k++) {
		struct tpu_message_tensor t = {
			.data = dev ? (void *)(uintptr_t)dev : host, .len = r->size,
			.device = { r->pair->src, 0 }, .target = { r->pair->dst, 0 },
		};
		uint32_t round = k;
		struct tpu_payload pl = { .data = &round, .len = sizeof(round) };
		struct tpu_message m = { .payloads = &pl, .npayloads = 1, .tensors = &t,
					 .ntensors = 1 };
		struct reply rep = { 0 };
		uint64_t t0;

		st = bench_cuda_fill(host, dev, r->size, k);
		if (st)
			break;
		t0 = now_ns();
		st = wait_for(&w, tpu_pipe_write(p, &m, done_msg, &w));
		if (!st)
			st = wait_for(&w, tpu_pipe_read_descriptor(p, done_msg, &w));
		if (!st && (w.msg->npayloads != 1 || w.msg->payloads[0].len != sizeof(rep) ||
			    w.msg->ntensors))
			st = -EPROTO;
		if (!st) {
			w.msg->payloads[0].data = &rep;
			st = wait_for(&w, tpu_pipe_read(p, w.msg, done_msg, &w));
		}
		ns[k] = now_ns() - t0;
		if (!st)
			st = rep.st;
		res.bad += (int)rep.bad;
	}
	if (p)
		snprintf(res.chan, sizeof(res.chan), "%s",
			 tpu_pipe_channel(p, r->pair->src, r->pair->dst));
	tpu_pipe_close(p);
	tpu_context_destroy(ctx);
	if (!st)
		res.gbps = bench_cuda_median_gbps(ns, r->iters, r->size);
	res.st = st;
	res.standin = cu.standin;
	if (dev)
		cu.mem_free(dev);
	free(host);
	free(ns);
	sem_destroy(&w.sem);
	return res;
}

tpu_status bench_cuda_goodbye(const char *url, const char *xport)
{
	struct tpu_context_options o = { .transports = xport };
	struct tpu_context *ctx = NULL;
	struct tpu_pipe *p = NULL;
	char word[4] = "bye";
	struct tpu_payload pl = { .data = word, .len = sizeof(word) };
	struct tpu_message m = { .payloads = &pl, .npayloads = 1 };
	struct wait1 w;
	tpu_status st;

	sem_init(&w.sem, 0, 0);
	st = tpu_context_create(&o, &ctx);
	if (!st)
		st = tpu_pipe_connect(ctx, url, &p);
	if (!st)
		st = wait_for(&w, tpu_pipe_write(p, &m, done_msg, &w));
	tpu_pipe_close(p);
	tpu_context_destroy(ctx);
	sem_destroy(&w.sem);
	return st;
}
