// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * tpbench rdv --remote: the remote rendezvous between two worker
 * processes, against the pipe it rides on, measured in the same run.
 *
 * The parent is task 0, a forked child task 1; each makes its own context
 * (restricted to the transport asked for) and remote rendezvous, and they
 * swap URLs over the peer socket.  Every key is used once.
 *
 *   latency    0 sends a 64-byte "ping" (task 0 -> 1), 1's blocking
 *              receive returns and it sends "pong" back, 0's blocking
 *              receive of it returns: one round trip, timed by 0.
 *   bandwidth  0 sends one tensor of each size (as a posted send, from
 *              the same memory each time), 1 receives it into its own
 *              memory and answers with a 64-byte ack: GB/s = size / (send
 *              -> ack received), the median, as `tpbench pipe` measures
 *              its bandwidth (ack included).
 *
 * The reference is a pipe between two processes over the same transport,
 * with the channel it negotiates, run by bench_pipe_ref() just before.
 *
 * Both run with a job secret, as the workers of a real job do (and as the
 * remote rendezvous's push of small tensors needs): TPU_JOB_SECRET if the
 * environment has one, else one made here for this run.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <tpu_user.h>

#include "bench_pipe.h"
#include "bench_remote.h"
#include "json.h"
#include "peer.h"
#include "units.h"

#define MSG_LEN		64
#define WARMUP		20
#define WAIT_NS		(30ull * 1000000000ull)
#define NSIZES		BENCH_PIPE_NSIZES
#define URL_LEN		256

struct side {
	const struct remote_opts *o;
	struct tpu_context *ctx;
	struct tpu_rendezvous *rdv;
	int me;
	uint8_t *mem;		/* the largest tensor: source (0) or destination (1) */
};

/*
 * The key of one tensor, built for each post and receive as TensorFlow
 * does; the two device names are constants (formatting them with
 * snprintf for every key was a sixth of a round trip's instructions,
 * which the pipe's figure has no counterpart of).
 */
static size_t key(char *buf, int src, const char *edge, unsigned int step, unsigned int iter)
{
	static const char *const dev[2] = {
		"/job:worker/replica:0/task:0/device:CPU:0",
		"/job:worker/replica:0/task:1/device:CPU:0",
	};
	struct tpu_key k = { .src_incarnation = 1, .frame_id = step, .iter_id = iter };
	size_t len = 0;

	k.src_device = (struct tpu_str){ dev[!!src], strlen(dev[!!src]) };
	k.dst_device = (struct tpu_str){ dev[!src], strlen(dev[!src]) };
	k.edge_name = (struct tpu_str){ edge, strlen(edge) };
	tpu_key_build(&k, buf, 256, &len);
	return len;
}

static tpu_status post(struct side *s, const char *edge, unsigned int step, unsigned int i,
		       void *data, size_t len)
{
	struct tpu_tensor t = { .data = data, .len = len };
	char k[256];
	size_t kl = key(k, s->me, edge, step, i);

	return tpu_rendezvous_send(s->rdv, k, kl, &t, 0, NULL, NULL);
}

static tpu_status take(struct side *s, const char *edge, unsigned int step, unsigned int i,
		       void *data, size_t cap)
{
	struct tpu_tensor t = { .data = data, .len = cap };
	char k[256];
	size_t kl = key(k, !s->me, edge, step, i);

	return tpu_rendezvous_recv_wait(s->rdv, k, kl, &t, WAIT_NS, NULL);
}

/* Make this worker's context and rendezvous and learn the other's URL. */
static tpu_status side_start(struct side *s, struct peer *p)
{
	struct tpu_context_options co = { .transports = s->o->transport };
	char self[64], other[64], listen[96], url[URL_LEN] = { 0 };
	const char *lu = listen;
	struct tpu_remote_options ro = { .task = self, .listen_urls = &lu, .nlisten = 1 };
	tpu_status st;

	snprintf(self, sizeof(self), "/job:worker/replica:0/task:%d", s->me);
	snprintf(other, sizeof(other), "/job:worker/replica:0/task:%d", !s->me);
	if (!strcmp(s->o->transport, "tcp"))
		snprintf(listen, sizeof(listen), "tcp://127.0.0.1:0");
	else
		snprintf(listen, sizeof(listen), "shm://tpbench-remote-%d-%d",
			 (int)(s->me ? getppid() : getpid()), s->me);
	st = tpu_context_create(&co, &s->ctx);
	if (!st)
		st = tpu_rendezvous_create_remote(s->ctx, &ro, &s->rdv);
	if (!st)
		st = tpu_rendezvous_url(s->rdv, NULL, url, sizeof(url));
	if (!st)
		st = peer_send(p, url, sizeof(url));
	if (!st)
		st = peer_recv(p, url, sizeof(url));
	if (!st)
		st = tpu_rendezvous_add_peer(s->rdv, other, url);
	return st;
}

static void side_end(struct side *s)
{
	tpu_rendezvous_destroy(s->rdv);
	tpu_context_destroy(s->ctx);
}

static void *tensor_memory(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	/* Huge pages where the system allows them, as tpbench's raw figures use. */
	madvise(p, len, MADV_HUGEPAGE);
	memset(p, 0x5a, len);
	return p;
}

/* Task 1: answer every ping, then every tensor. */
static int responder(struct peer *p, void *arg)
{
	struct side s = { .o = arg, .me = 1 };
	const unsigned int rtts = WARMUP + s.o->iters;
	uint8_t msg[MSG_LEN];
	tpu_status st;
	unsigned int i, si;

	s.mem = tensor_memory(bench_pipe_sizes[NSIZES - 1]);
	st = s.mem ? side_start(&s, p) : -ENOMEM;
	for (i = 0; !st && i < rtts; i++) {
		st = take(&s, "ping", 0, i, msg, sizeof(msg));
		if (!st)
			st = post(&s, "pong", 0, i, msg, sizeof(msg));
	}
	for (si = 0; !st && si < NSIZES; si++) {
		for (i = 0; !st && i < WARMUP / 4 + s.o->bw_iters; i++) {
			st = take(&s, "bw", 1 + si, i, s.mem, bench_pipe_sizes[si]);
			if (!st)
				st = post(&s, "ack", 1 + si, i, msg, sizeof(msg));
		}
	}
	/* Stay until the measuring side is done reading from us. */
	if (!st)
		st = peer_recv(p, msg, 1);
	if (st)
		fprintf(stderr, "tpbench rdv --remote: task 1: %s\n", tpu_strerror(st));
	side_end(&s);
	return st ? 1 : 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Task 0: time the round trips and the transfers. */
static tpu_status measure(struct side *s, struct remote_result *r)
{
	unsigned int n = s->o->iters > s->o->bw_iters ? s->o->iters : s->o->bw_iters;
	uint64_t *t = calloc(n, sizeof(*t)), t0;
	uint8_t msg[MSG_LEN] = { 0 };
	tpu_status st = t ? 0 : -ENOMEM;
	unsigned int i, si, warm = WARMUP / 4;

	for (i = 0; !st && i < WARMUP + s->o->iters; i++) {
		t0 = now_ns();
		st = post(s, "ping", 0, i, msg, sizeof(msg));
		if (!st)
			st = take(s, "pong", 0, i, msg, sizeof(msg));
		if (i >= WARMUP)
			t[i - WARMUP] = now_ns() - t0;
	}
	if (!st) {
		qsort(t, s->o->iters, sizeof(*t), cmp_u64);
		r->rtt_p50_us = (double)t[s->o->iters / 2] / 1e3;
		r->rtt_p90_us = (double)t[s->o->iters * 9 / 10] / 1e3;
		r->rtt_p99_us = (double)t[s->o->iters * 99 / 100] / 1e3;
	}
	for (si = 0; !st && si < NSIZES; si++) {
		for (i = 0; !st && i < warm + s->o->bw_iters; i++) {
			t0 = now_ns();
			st = post(s, "bw", 1 + si, i, s->mem, bench_pipe_sizes[si]);
			if (!st)
				st = take(s, "ack", 1 + si, i, msg, sizeof(msg));
			if (i >= warm)
				t[i - warm] = now_ns() - t0;
		}
		if (!st) {
			qsort(t, s->o->bw_iters, sizeof(*t), cmp_u64);
			r->gbps[si] = (double)bench_pipe_sizes[si] / (double)t[s->o->bw_iters / 2];
		}
	}
	if (!st) {
		const char *tr, *ch;

		if (!tpu_rendezvous_peer_path(s->rdv, "/job:worker/replica:0/task:1", &tr, &ch))
			snprintf(r->path, sizeof(r->path), "%s/%s", tr, ch);
	}
	free(t);
	return st;
}

tpu_status bench_remote_run(const struct remote_opts *o, struct remote_result *r)
{
	struct side s = { .o = o, .me = 0 };
	struct peer p;
	tpu_status st;
	char bye = 0;

	memset(r, 0, sizeof(*r));
	if (!getenv("TPU_JOB_SECRET") || !*getenv("TPU_JOB_SECRET")) {
		char secret[48];

		snprintf(secret, sizeof(secret), "tpbench-%d-%lld", (int)getpid(),
			 (long long)time(NULL));
		setenv("TPU_JOB_SECRET", secret, 1);
	}
	/* The pipe first, alone on the machine, then the rendezvous on it. */
	st = bench_pipe_ref(o->transport, NULL, o->iters, o->bw_iters, &r->pipe);
	if (st)
		return st;
	s.mem = tensor_memory(bench_pipe_sizes[NSIZES - 1]);
	if (!s.mem)
		return -ENOMEM;
	if (peer_fork(&p, responder, (void *)o)) {
		munmap(s.mem, bench_pipe_sizes[NSIZES - 1]);
		return -ECHILD;
	}
	st = side_start(&s, &p);
	if (!st)
		st = measure(&s, r);
	if (!st)
		st = peer_send(&p, &bye, 1);
	side_end(&s);
	if (peer_wait(&p) && !st)
		st = -ECHILD;
	munmap(s.mem, bench_pipe_sizes[NSIZES - 1]);
	return st;
}

void bench_remote_print(const struct remote_opts *o, const struct remote_result *r)
{
	char sz[16];
	int i;

	printf("remote rendezvous between two workers over %s (path %s), against a pipe between\n"
	       "two processes over the same transport (%s/%s), same run\n\n", o->transport,
	       r->path[0] ? r->path : "?", r->pipe.xport, r->pipe.chan);
	printf("%-10s %9s %9s %9s", "", "rtt p50", "rtt p90", "rtt p99");
	for (i = 0; i < NSIZES; i++)
		printf(" %9s", format_size(bench_pipe_sizes[i], sz, sizeof(sz)));
	printf("\n%-10s %9s %9s %9s %9s  (GB/s)\n", "", "us", "us", "us", "");
	printf("%-10s %9.1f %9.1f %9.1f", "remote", r->rtt_p50_us, r->rtt_p90_us, r->rtt_p99_us);
	for (i = 0; i < NSIZES; i++)
		printf(" %9.2f", r->gbps[i]);
	printf("\n%-10s %9.1f %9.1f %9.1f", "pipe", r->pipe.p50_us, r->pipe.p90_us,
	       r->pipe.p99_us);
	for (i = 0; i < NSIZES; i++)
		printf(" %9.2f", r->pipe.gbps[i]);
	printf("\n%-10s %8.2fx %9s %8.2fx", "ratio", r->rtt_p50_us / r->pipe.p50_us, "",
	       r->rtt_p99_us / r->pipe.p99_us);
	for (i = 0; i < NSIZES; i++)
		printf(" %8.2fx", r->gbps[i] / r->pipe.gbps[i]);
	printf("\n\ngoals: round trip at most 1.2x the pipe's, bandwidth at least 0.9x from 1 MiB\n");
}

void bench_remote_json(const struct remote_opts *o, const struct remote_result *r,
		       struct json *j)
{
	char name[32];
	int i;

	json_object_begin(j, "remote");
	json_string(j, "transport", o->transport);
	json_string(j, "path", r->path);
	json_double(j, "rtt_p50_us", r->rtt_p50_us, 2);
	json_double(j, "rtt_p90_us", r->rtt_p90_us, 2);
	json_double(j, "rtt_p99_us", r->rtt_p99_us, 2);
	for (i = 0; i < NSIZES; i++) {
		snprintf(name, sizeof(name), "gbps_%zu", bench_pipe_sizes[i]);
		json_double(j, name, r->gbps[i], 3);
	}
	json_object_begin(j, "pipe");
	json_string(j, "transport", r->pipe.xport);
	json_string(j, "channel", r->pipe.chan);
	json_double(j, "rtt_p50_us", r->pipe.p50_us, 2);
	json_double(j, "rtt_p99_us", r->pipe.p99_us, 2);
	for (i = 0; i < NSIZES; i++) {
		snprintf(name, sizeof(name), "gbps_%zu", bench_pipe_sizes[i]);
		json_double(j, name, r->pipe.gbps[i], 3);
	}
	json_object_end(j);
	json_object_end(j);
}
