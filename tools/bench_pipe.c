// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * tpbench pipe: what a pipe costs, per transport and channel, with the
 * metrics of TensorPipe's benchmark_pipe so that the two can be compared
 * (tools/bench-peers.sh runs TensorPipe and UCX beside it).
 *
 * The parent connects, a forked child listens and answers.  Both restrict
 * their contexts to one transport and one channel, so the pair measured is
 * the pair named (the line says what the pipe actually negotiated).
 * Between two hosts the two sides are two commands: `--listen URL` answers
 * one pipe (then exits), `--connect URL` measures it (tests/vm/pair-bench.sh
 * runs them in the two VMs of tests/vm/pair.sh, over rdma:// and tcp://).
 *
 *   latency    the parent writes a message with one 64-byte payload, the
 *              child reads it and writes one back: a round trip, measured
 *              by the parent between its write and the reply's read
 *              callback.  Everything runs in callbacks on the context
 *              threads, as a program driving a pipe would.
 *   bandwidth  one CPU tensor of each size per message, answered by a
 *              64-byte reply: GB/s = size / (write -> reply read), the
 *              median of the timed iterations (the reply's own cost is
 *              included, which favours nobody).
 */
#include <errno.h>
#include <inttypes.h>
#include <semaphore.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tpu_user.h>

#include "bench_pipe.h"
#include "host_state.h"
#include "json.h"
#include "peer.h"
#include "pin.h"
#include "units.h"

#define PING_LEN	64
#define NSIZES		BENCH_PIPE_NSIZES
#define WARMUP		20

const size_t bench_pipe_sizes[NSIZES] = { 64u << 10, 1u << 20, 16u << 20, 64u << 20 };
#define bw_sizes bench_pipe_sizes

struct pair {
	const char *xport, *chan;
};

static const struct pair pairs[] = {
	{ "shm", "kmod" }, { "shm", "cma" }, { "shm", "basic" },
	{ "tcp", "cma" }, { "tcp", "mtcp" }, { "tcp", "basic" },
};

struct pipe_opts {
	const char *xport, *chan;	/* NULL: all */
	const char *listen, *connect;	/* two hosts: one side each */
	unsigned int iters;
	unsigned int bw_iters;
	bool json;
	bool rtt_only;			/* bench_pipe_rtt(): no bandwidth */
};

/* ---- the answering side (child) ---------------------------------------- */

struct server {
	struct tpu_pipe *pipe;
	uint8_t *sink;			/* where tensors and payloads land */
	size_t sink_len;
	uint8_t reply[PING_LEN];
	struct tpu_payload reply_pl;
	struct tpu_message reply_msg;
	sem_t done;
	tpu_status error;
};

static void server_next(struct server *s);

static void server_replied(void *arg, tpu_status st, struct tpu_message *msg)
{
	(void)msg;
	if (st)
		((struct server *)arg)->error = st;
}

static void server_read(void *arg, tpu_status st, struct tpu_message *msg)
{
	struct server *s = arg;

	(void)msg;
	if (st) {
		s->error = st;
		sem_post(&s->done);
		return;
	}
	s->reply_pl = (struct tpu_payload){ .data = s->reply, .len = PING_LEN };
	s->reply_msg = (struct tpu_message){ .payloads = &s->reply_pl, .npayloads = 1 };
	/* Ask for the next one first: its descriptor can come while the reply goes. */
	server_next(s);
	if (tpu_pipe_write(s->pipe, &s->reply_msg, server_replied, s))
		sem_post(&s->done);
}

static void server_desc(void *arg, tpu_status st, struct tpu_message *m)
{
	struct server *s = arg;
	size_t off = 0;

	if (st) {
		/* The parent closing its end is how a run ends. */
		s->error = st == -ECONNRESET || st == TPU_E_CLOSED ? 0 : st;
		sem_post(&s->done);
		return;
	}
	for (size_t i = 0; i < m->npayloads; i++, off += m->payloads[i - 1].len)
		m->payloads[i].data = s->sink + off;
	for (size_t i = 0; i < m->ntensors; i++, off += m->tensors[i - 1].len)
		m->tensors[i].data = s->sink + off;
	if (off > s->sink_len || tpu_pipe_read(s->pipe, m, server_read, s)) {
		s->error = -EMSGSIZE;
		sem_post(&s->done);
	}
}

static void server_next(struct server *s)
{
	if (tpu_pipe_read_descriptor(s->pipe, server_desc, s))
		sem_post(&s->done);
}

static void server_accepted(void *arg, tpu_status st, struct tpu_pipe *pipe)
{
	struct server *s = arg;

	if (st) {
		s->error = st;
		sem_post(&s->done);
		return;
	}
	s->pipe = pipe;
	server_next(s);
}

/*
 * Listen on @url (NULL: a name or port of the transport's own on this host),
 * answer one pipe until its peer closes it.  The listener's URL goes to
 * @peer (the forked child) or to stdout (--listen) once it is listening.
 */
static tpu_status serve_one(const struct pair *pr, const char *url_in, struct peer *peer)
{
	struct tpu_context_options o = { .transports = pr->xport, .channels = pr->chan };
	struct tpu_context *ctx = NULL;
	struct tpu_listener *l = NULL;
	struct server s = { .sink_len = (64u << 20) + 4096 };
	char url[300] = "";
	tpu_status st;

	sem_init(&s.done, 0, 0);
	s.sink = malloc(s.sink_len);
	st = s.sink ? tpu_context_create(&o, &ctx) : -ENOMEM;
	if (!st) {
		/* shm listens on a name of its own; tcp on any port of loopback. */
		char shm[64];
		const char *u = url_in ? url_in : shm;

		snprintf(shm, sizeof(shm), "shm://tpbench-%d", (int)getpid());
		if (!url_in && !strcmp(pr->xport, "tcp"))
			u = "tcp://127.0.0.1:0";
		st = tpu_listener_create(ctx, &u, 1, &l);
	}
	if (!st)
		st = tpu_listener_url(l, NULL, url, sizeof(url));
	if (!st)
		st = tpu_listener_accept(l, server_accepted, &s);
	if (peer) {
		peer_send(peer, &st, sizeof(st));
		peer_send(peer, url, sizeof(url));
	} else if (!st) {
		printf("tpbench pipe: listening on %s\n", url);
		fflush(stdout);
	}
	if (!st) {
		sem_wait(&s.done);
		st = s.error;
	}
	tpu_pipe_close(s.pipe);
	tpu_listener_close(l);
	tpu_context_destroy(ctx);
	free(s.sink);
	sem_destroy(&s.done);
	return st;
}

static int server_main(struct peer *peer, void *arg)
{
	return serve_one(arg, NULL, peer) ? 1 : 0;
}

/* ---- the measuring side (parent) --------------------------------------- */

struct client {
	struct tpu_pipe *pipe;
	uint8_t ping[PING_LEN], pong[PING_LEN];
	struct tpu_payload pl;
	struct tpu_message_tensor tensor;
	struct tpu_message msg;
	uint8_t *src;
	size_t size;			/* 0: latency, else the tensor's size */
	unsigned int left, warm;
	uint64_t t0;
	double *samples;
	unsigned int nsamples;
	sem_t done;
	tpu_status error;
};

static void client_send(struct client *c);

static void client_fail(struct client *c, tpu_status st)
{
	c->error = st;
	sem_post(&c->done);
}

static void client_written(void *arg, tpu_status st, struct tpu_message *msg)
{
	(void)msg;
	if (st)
		((struct client *)arg)->error = st;
}

static void client_read(void *arg, tpu_status st, struct tpu_message *msg)
{
	struct client *c = arg;
	uint64_t dt = now_ns() - c->t0;

	(void)msg;
	if (st) {
		client_fail(c, st);
		return;
	}
	if (c->warm)
		c->warm--;
	else
		c->samples[c->nsamples++] = (double)dt;
	if (!--c->left) {
		sem_post(&c->done);
		return;
	}
	client_send(c);
}

static void client_desc(void *arg, tpu_status st, struct tpu_message *m)
{
	struct client *c = arg;

	if (st || m->npayloads != 1 || m->ntensors || m->payloads[0].len != PING_LEN) {
		client_fail(c, st ? st : -EPROTO);
		return;
	}
	m->payloads[0].data = c->pong;
	st = tpu_pipe_read(c->pipe, m, client_read, c);
	if (st)
		client_fail(c, st);
}

static void client_send(struct client *c)
{
	tpu_status st;

	if (c->size) {
		c->tensor = (struct tpu_message_tensor){ .data = c->src, .len = c->size };
		c->msg = (struct tpu_message){ .tensors = &c->tensor, .ntensors = 1 };
	} else {
		c->pl = (struct tpu_payload){ .data = c->ping, .len = PING_LEN };
		c->msg = (struct tpu_message){ .payloads = &c->pl, .npayloads = 1 };
	}
	c->t0 = now_ns();
	st = tpu_pipe_write(c->pipe, &c->msg, client_written, c);
	if (!st)
		st = tpu_pipe_read_descriptor(c->pipe, client_desc, c);
	if (st)
		client_fail(c, st);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Run @n timed iterations after the warm-up; samples sorted, in ns. */
static tpu_status client_run(struct client *c, size_t size, unsigned int n, unsigned int warm)
{
	c->size = size;
	c->warm = warm;
	c->left = n + warm;
	c->nsamples = 0;
	c->error = 0;
	client_send(c);
	sem_wait(&c->done);
	qsort(c->samples, c->nsamples, sizeof(double), cmp_double);
	return c->error;
}


/* Connect to @url and measure: round trip, then bandwidth per size. */
static tpu_status bench_url(const struct pair *pr, const struct pipe_opts *o, const char *url,
			    struct pair_result *r)
{
	struct tpu_context_options co = { .transports = pr->xport, .channels = pr->chan };
	struct tpu_context *ctx = NULL;
	struct client c = { 0 };
	tpu_status st;
	unsigned int cap = o->iters > o->bw_iters ? o->iters : o->bw_iters;

	/* Warm-up transfers are not kept: the samples hold the timed ones only. */

	memset(r, 0, sizeof(*r));
	sem_init(&c.done, 0, 0);
	c.samples = calloc(cap, sizeof(double));
	c.src = malloc(bw_sizes[NSIZES - 1]);
	st = c.samples && c.src ? 0 : -ENOMEM;
	if (!st) {
		memset(c.src, 0x5a, bw_sizes[NSIZES - 1]);
		st = tpu_context_create(&co, &ctx);
	}
	if (!st)
		st = tpu_pipe_connect(ctx, url, &c.pipe);
	if (!st)
		st = client_run(&c, 0, o->iters, WARMUP);
	if (!st) {
		double sum = 0;

		for (unsigned int i = 0; i < c.nsamples; i++)
			sum += c.samples[i];
		r->avg_us = sum / c.nsamples / 1e3;
		r->p50_us = c.samples[c.nsamples / 2] / 1e3;
		r->p90_us = c.samples[c.nsamples * 9 / 10] / 1e3;
		r->p99_us = c.samples[c.nsamples * 99 / 100] / 1e3;
		snprintf(r->xport, sizeof(r->xport), "%s", tpu_pipe_transport(c.pipe));
		snprintf(r->chan, sizeof(r->chan), "%s",
			 tpu_pipe_channel(c.pipe, TPU_DEVICE_CPU, TPU_DEVICE_CPU));
	}
	for (int i = 0; !st && !o->rtt_only && i < NSIZES; i++) {
		/*
		 * Warm up with at least 4 MiB: the first MiB through a new shm
		 * connection goes several times slower (see benchmarks.rst).
		 */
		unsigned int warm = (unsigned int)((4u << 20) / bw_sizes[i]);

		st = client_run(&c, bw_sizes[i], o->bw_iters, warm ? warm : 1);
		if (!st)
			r->gbps[i] = (double)bw_sizes[i] / c.samples[c.nsamples / 2];
	}
	tpu_pipe_close(c.pipe);
	tpu_context_destroy(ctx);
	free(c.samples);
	free(c.src);
	sem_destroy(&c.done);
	return st;
}

static tpu_status bench_pair(const struct pair *pr, const struct pipe_opts *o,
			     struct pair_result *r)
{
	struct peer peer;
	char url[300];
	tpu_status st, child_st = 0;

	memset(r, 0, sizeof(*r));
	if (peer_fork(&peer, server_main, (void *)pr))
		return -ECHILD;
	st = peer_recv(&peer, &child_st, sizeof(child_st));
	if (!st)
		st = peer_recv(&peer, url, sizeof(url));
	if (!st)
		st = child_st;
	if (!st)
		st = bench_url(pr, o, url, r);
	if (peer_wait(&peer) && !st)
		st = -ECHILD;
	return st;
}

tpu_status bench_pipe_ref(const char *xport, const char *chan, unsigned int iters,
			  unsigned int bw_iters, struct pair_result *r)
{
	const struct pair pr = { xport, chan };
	struct pipe_opts o = { .iters = iters, .bw_iters = bw_iters };

	return bench_pair(&pr, &o, r);
}

tpu_status bench_pipe_rtt(const char *xport, const char *chan, unsigned int iters,
			  double *p50_us, double *p99_us, char *negotiated, size_t negotiated_len)
{
	const struct pair pr = { xport, chan };
	struct pipe_opts o = { .iters = iters, .bw_iters = 1, .rtt_only = true };
	struct pair_result r;
	tpu_status st = bench_pair(&pr, &o, &r);

	if (!st) {
		*p50_us = r.p50_us;
		if (p99_us)
			*p99_us = r.p99_us;
		snprintf(negotiated, negotiated_len, "%s/%s", r.xport, r.chan);
	}
	return st;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: tpbench pipe [--transport tcp|shm] [--channel kmod|cma|mtcp|basic]\n"
		   "                    [--iters N] [--bw-iters N] [--json] [--rtt-only]\n"
		   "                    [--pin same|split]\n"
		   "       tpbench pipe --one-context [--iters N] [--json]\n"
		   "       tpbench pipe --listen URL [--transport T] [--channel C]\n"
		   "       tpbench pipe --connect URL [--transport T] [--channel C]\n"
		   "                    [--iters N] [--bw-iters N] [--json]\n");
}

static void print_header(const struct pipe_opts *o)
{
	char sz[16];

	if (o->json)
		return;
	printf("%-10s %-12s %9s %9s %9s", "transport", "channel", "rtt avg", "p50", "p90");
	for (int i = 0; i < NSIZES; i++)
		printf(" %9s", format_size(bw_sizes[i], sz, sizeof(sz)));
	printf("\n%-10s %-12s %9s %9s %9s %9s  (GB/s)\n", "", "(negotiated)", "us", "us", "us",
	       "");
}

static void print_result(const struct pipe_opts *o, const struct pair_result *r)
{
	if (o->json) {
		struct json j;
		char name[32];

		/* One object per line, as each pair finishes. */
		json_init(&j, stdout);
		json_object_begin(&j, NULL);
		json_string(&j, "bench", "pipe");
		json_string(&j, "transport", r->xport);
		json_string(&j, "channel", r->chan);
		json_double(&j, "rtt_avg_us", r->avg_us, 2);
		json_double(&j, "rtt_p50_us", r->p50_us, 2);
		json_double(&j, "rtt_p90_us", r->p90_us, 2);
		for (int i = 0; i < NSIZES; i++) {
			snprintf(name, sizeof(name), "gbps_%zu", bw_sizes[i]);
			json_double(&j, name, r->gbps[i], 3);
		}
		json_object_end(&j);
		json_finish(&j);
	} else {
		printf("%-10s %-12s %9.2f %9.2f %9.2f", r->xport, r->chan, r->avg_us, r->p50_us,
		       r->p90_us);
		for (int i = 0; i < NSIZES; i++)
			printf(" %9.3f", r->gbps[i]);
		printf("\n");
	}
	fflush(stdout);
}

/* The transport of @url: its scheme, as the context option names it. */
static const char *url_transport(const char *url, char *buf, size_t len)
{
	const char *sep = strstr(url, "://");

	if (!sep || sep == url || (size_t)(sep - url) >= len)
		return NULL;
	memcpy(buf, url, (size_t)(sep - url));
	buf[sep - url] = '\0';
	return buf;
}

/* --listen and --connect: one side of a pipe between two hosts. */
static int two_hosts(const struct pipe_opts *o)
{
	const char *url = o->listen ? o->listen : o->connect;
	char scheme[16];
	struct pair pr = { o->xport, o->chan };
	struct pair_result r;
	tpu_status st;

	if (!pr.xport)
		pr.xport = url_transport(url, scheme, sizeof(scheme));
	if (!pr.xport) {
		fprintf(stderr, "tpbench pipe: not a URL (TRANSPORT://ADDRESS): %s\n", url);
		return 2;
	}
	if (o->listen) {
		st = serve_one(&pr, o->listen, NULL);
		if (st)
			fprintf(stderr, "tpbench pipe: serving %s: %s\n", o->listen,
				tpu_strerror(st));
		return st ? 1 : 0;
	}
	st = bench_url(&pr, o, o->connect, &r);
	if (st) {
		fprintf(stderr, "tpbench pipe: %s: %s\n", o->connect, tpu_strerror(st));
		return 1;
	}
	if (strcmp(r.xport, pr.xport) || (pr.chan && strcmp(r.chan, pr.chan))) {
		fprintf(stderr, "tpbench pipe: %s: the pipe negotiated %s/%s, not %s/%s\n",
			o->connect, r.xport, r.chan, pr.xport, pr.chan ? pr.chan : "any");
		return 1;
	}
	print_header(o);
	print_result(o, &r);
	return 0;
}

int bench_pipe_main(int argc, char **argv)
{
	struct pipe_opts o = { .iters = 2000, .bw_iters = 20 };
	struct host_state host[2];
	bool any = false, one_ctx = false;
	const char *pin = NULL;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--transport") && i + 1 < argc) {
			o.xport = argv[++i];
		} else if (!strcmp(argv[i], "--channel") && i + 1 < argc) {
			o.chan = argv[++i];
		} else if (!strcmp(argv[i], "--listen") && i + 1 < argc) {
			o.listen = argv[++i];
		} else if (!strcmp(argv[i], "--connect") && i + 1 < argc) {
			o.connect = argv[++i];
		} else if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
			o.iters = (unsigned int)strtoul(argv[++i], NULL, 10);
		} else if (!strcmp(argv[i], "--bw-iters") && i + 1 < argc) {
			o.bw_iters = (unsigned int)strtoul(argv[++i], NULL, 10);
		} else if (!strcmp(argv[i], "--json")) {
			o.json = true;
		} else if (!strcmp(argv[i], "--rtt-only")) {
			o.rtt_only = true;
		} else if (!strcmp(argv[i], "--one-context")) {
			one_ctx = true;
		} else if (!strcmp(argv[i], "--pin") && i + 1 < argc) {
			pin = argv[++i];
		} else if (!strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (!o.iters || !o.bw_iters || (o.listen && o.connect)) {
		usage(stderr);
		return 2;
	}
	if (one_ctx)
		return bench_pipe_one_context(o.iters, o.json);
	if (o.listen || o.connect)
		return two_hosts(&o);
	host_state_sample(&host[0]);
	if (pin) {
		int err = pin_setup(pin);

		if (err) {
			fprintf(stderr, "tpbench pipe: --pin %s: %s\n", pin,
				err == -EINVAL ? "say same or split" :
				err == -ENODEV ? "split needs two usable CPUs" : strerror(-err));
			return 2;
		}
	}
	print_header(&o);
	for (size_t k = 0; k < sizeof(pairs) / sizeof(pairs[0]); k++) {
		const struct pair *pr = &pairs[k];
		struct pair_result r;
		tpu_status st;

		if ((o.xport && strcmp(o.xport, pr->xport)) || (o.chan && strcmp(o.chan, pr->chan)))
			continue;
		any = true;
		st = bench_pair(pr, &o, &r);
		if (st) {
			/* kmod without the module, say: reported, not fatal. */
			if (o.json)
				printf("{\"bench\":\"pipe\",\"transport\":\"%s\",\"channel\":\"%s\","
				       "\"skipped\":\"%s\"}\n", pr->xport, pr->chan,
				       tpu_strerror(st));
			else
				printf("%-10s %-12s skipped: %s\n", pr->xport, pr->chan,
				       tpu_strerror(st));
			continue;
		}
		if (strcmp(r.xport, pr->xport) || strcmp(r.chan, pr->chan)) {
			/* Not available here (kmod without the module): the pipe fell back. */
			if (o.json)
				printf("{\"bench\":\"pipe\",\"transport\":\"%s\",\"channel\":\"%s\","
				       "\"skipped\":\"negotiated %s/%s\"}\n", pr->xport, pr->chan,
				       r.xport, r.chan);
			else
				printf("%-10s %-12s skipped: not available, the pipe negotiated %s/%s\n",
				       pr->xport, pr->chan, r.xport, r.chan);
			continue;
		}
		print_result(&o, &r);
	}
	if (!any) {
		usage(stderr);
		return 2;
	}
	host_state_sample(&host[1]);
	if (o.json) {
		struct json j;

		json_init(&j, stdout);
		json_object_begin(&j, NULL);
		json_string(&j, "bench", "host");
		json_string(&j, "placement", pin_describe());
		host_state_json(&j, &host[0], &host[1]);
		json_object_end(&j);
		json_finish(&j);
	} else {
		printf("%s\n", pin_describe());
		host_state_print(stdout, &host[0], &host[1]);
	}
	return 0;
}
