// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * tpbench cuda: tensors between CUDA device memory and host memory of two
 * processes of one host (two hosts: bench_cuda_hosts.c), per device pair
 * and channel (cuda_ipc,
 * cuda_staged; cuda_dmabuf when asked for, beside kmod).  A forked reader process listens; this process connects
 * and writes one tensor per round, and a round ends when the reader says
 * (over the peers' socket) that it read the tensor.  The reader checks
 * every byte of every round through the driver (the writer's pattern
 * changes each round), so a run is a correctness check as well; with the
 * tests' stand-in driver (TPU_CUDA_DRIVER=.../libcuda_standin.so) it is
 * only that, and says so.
 *
 * Device memory is allocated here through the driver, dlopen()ed like the
 * library does (TPU_CUDA_DRIVER, else libcuda.so.1), with the few calls
 * needed; the reader forks before either side touches CUDA.
 */
#include <dlfcn.h>
#include <errno.h>
#include <semaphore.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_cuda.h"
#include "bench_cuda_shared.h"
#include "json.h"
#include "peer.h"
#include "units.h"
#include "tpu_user.h"

struct bench_cu cu;

/* Once per process: the answer is kept. */
static int cuda_load(void)
{
	const char *path = getenv("TPU_CUDA_DRIVER");
	void *h = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	void *ctx = NULL;
	int dev = 0;

	if (!h)
		return -ENOENT;
#define LOAD(field, name) do { \
		*(void **)&cu.field = dlsym(h, name); \
		if (!cu.field) \
			return -ENOENT; \
	} while (0)
	LOAD(init, "cuInit");
	LOAD(device_get, "cuDeviceGet");
	LOAD(primary_retain, "cuDevicePrimaryCtxRetain");
	LOAD(ctx_set_current, "cuCtxSetCurrent");
	LOAD(mem_alloc, "cuMemAlloc_v2");
	LOAD(mem_free, "cuMemFree_v2");
	LOAD(htod, "cuMemcpyHtoD_v2");
	LOAD(dtoh, "cuMemcpyDtoH_v2");
#undef LOAD
	cu.standin = dlsym(h, "tpu_cuda_standin_counts") != NULL;
	if (cu.init(0) || cu.device_get(&dev, 0) || cu.primary_retain(&ctx, dev) ||
	    cu.ctx_set_current(ctx))
		return -ENODEV;
	return 0;
}

int cuda_open(void)
{
	static int st = 1;

	if (st > 0)
		st = cuda_load();
	return st;
}

static uint8_t pattern(size_t i, unsigned int round)
{
	return (uint8_t)(i * 251 + round * 17 + (i >> 12));
}

int bench_cuda_fill(uint8_t *host, cu_ptr dev, size_t len, unsigned int round)
{
	for (size_t i = 0; i < len; i++)
		host[i] = pattern(i, round);
	return dev && cu.htod(dev, host, len) ? -EIO : 0;
}

int bench_cuda_count_bad(const uint8_t *host, cu_ptr dev, uint8_t *check, size_t len,
			 unsigned int round)
{
	int bad = 0;

	if (dev) {
		if (cu.dtoh(check, dev, len))
			return -EIO;
		host = check;
	}
	for (size_t i = 0; i < len; i++)
		bad += host[i] != pattern(i, round);
	return bad;
}

static const struct bpair bpairs[] = {
	{ "cpu-cuda", TPU_DEVICE_CPU, TPU_DEVICE_CUDA },
	{ "cuda-cpu", TPU_DEVICE_CUDA, TPU_DEVICE_CPU },
	{ "cuda-cuda", TPU_DEVICE_CUDA, TPU_DEVICE_CUDA },
};

void done_msg(void *arg, tpu_status st, struct tpu_message *m)
{
	struct wait1 *w = arg;

	w->st = st;
	w->msg = m;
	sem_post(&w->sem);
}

void done_pipe(void *arg, tpu_status st, struct tpu_pipe *p)
{
	struct wait1 *w = arg;

	w->st = st;
	w->pipe = p;
	sem_post(&w->sem);
}

/* ---- the reader (child) ------------------------------------------------ */

static int reader_main(struct peer *peer, void *arg)
{
	const struct run *r = arg;
	struct tpu_context_options o = { .transports = r->xport, .channels = r->chan };
	struct tpu_context *ctx = NULL;
	struct tpu_listener *l = NULL;
	struct wait1 w;
	char url[300] = "", shm[64];
	const char *u = shm;
	uint8_t *host = malloc(r->size), *check = malloc(r->size);
	cu_ptr dev = 0;
	int bad = 0;
	tpu_status st;

	sem_init(&w.sem, 0, 0);
	st = host && check ? 0 : -ENOMEM;
	if (!st && r->pair->dst == TPU_DEVICE_CUDA)
		st = cuda_open() || cu.mem_alloc(&dev, r->size) ? -ENODEV : 0;
	if (!st)
		st = tpu_context_create(&o, &ctx);
	snprintf(shm, sizeof(shm), "shm://tpbench-cuda-%d", (int)getpid());
	if (!strcmp(r->xport, "tcp"))
		u = "tcp://127.0.0.1:0";
	if (!st)
		st = tpu_listener_create(ctx, &u, 1, &l);
	if (!st)
		st = tpu_listener_url(l, NULL, url, sizeof(url));
	if (!st)
		st = tpu_listener_accept(l, done_pipe, &w);
	peer_send(peer, &st, sizeof(st));
	peer_send(peer, url, sizeof(url));
	if (!st) {
		sem_wait(&w.sem);
		st = w.st;
	}
	for (unsigned int k = 0; !st && k < r->iters; k++) {
		struct tpu_pipe *p = w.pipe;
		struct tpu_message_tensor *t;

		st = tpu_pipe_read_descriptor(p, done_msg, &w);
		if (!st) {
			sem_wait(&w.sem);
			st = w.st;
		}
		if (!st && (w.msg->ntensors != 1 || w.msg->tensors[0].len != r->size))
			st = -EPROTO;
		if (!st) {
			t = &w.msg->tensors[0];
			t->device = (struct tpu_device){ r->pair->dst, 0 };
			t->data = dev ? (void *)(uintptr_t)dev : host;
			st = tpu_pipe_read(p, w.msg, done_msg, &w);
		}
		if (!st) {
			sem_wait(&w.sem);
			st = w.st;
		}
		/* The round ends here for the writer; the check is not timed. */
		peer_send(peer, &st, sizeof(st));
		if (!st) {
			int n = bench_cuda_count_bad(host, dev, check, r->size, k);

			if (n < 0)
				st = n;
			else
				bad += n;
		}
	}
	peer_send(peer, &bad, sizeof(bad));
	tpu_pipe_close(w.pipe);
	tpu_listener_close(l);
	tpu_context_destroy(ctx);
	if (dev)
		cu.mem_free(dev);
	free(host);
	free(check);
	return st || bad ? 1 : 0;
}

/* ---- the writer (this process) ----------------------------------------- */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

double bench_cuda_median_gbps(uint64_t *ns, unsigned int n, size_t size)
{
	qsort(ns, n, sizeof(*ns), cmp_u64);
	return (double)size / (double)ns[n / 2];
}

static struct result run_one(const struct run *r)
{
	struct result res = { 0 };
	struct tpu_context_options o = { .transports = r->xport, .channels = r->chan };
	struct tpu_context *ctx = NULL;
	struct tpu_pipe *p = NULL;
	struct peer peer;
	struct wait1 w;
	char url[300];
	uint8_t *host = malloc(r->size);
	uint64_t *ns = calloc(r->iters, sizeof(*ns));
	cu_ptr dev = 0;
	tpu_status st, rst;

	sem_init(&w.sem, 0, 0);
	/* The reader forks before this process touches CUDA. */
	st = host && ns ? peer_fork(&peer, reader_main, (void *)r) : -ENOMEM;
	if (st) {
		res.st = st;
		goto out;
	}
	if (peer_recv(&peer, &rst, sizeof(rst)) || peer_recv(&peer, url, sizeof(url)))
		rst = -EPIPE;
	st = rst;
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
		struct tpu_message m = { .tensors = &t, .ntensors = 1 };
		uint64_t t0;

		st = bench_cuda_fill(host, dev, r->size, k);
		if (st)
			break;
		t0 = now_ns();
		st = tpu_pipe_write(p, &m, done_msg, &w);
		if (!st) {
			sem_wait(&w.sem);
			st = w.st;
		}
		if (!st && (peer_recv(&peer, &rst, sizeof(rst)) || rst))
			st = rst ? rst : -EPIPE;
		ns[k] = now_ns() - t0;
	}
	if (p)
		snprintf(res.chan, sizeof(res.chan), "%s",
			 tpu_pipe_channel(p, r->pair->src, r->pair->dst));
	if (!st && peer_recv(&peer, &res.bad, sizeof(res.bad)))
		st = -EPIPE;
	tpu_pipe_close(p);
	tpu_context_destroy(ctx);
	/* A reader waiting for a pipe never made (no driver here, say) would wait for ever. */
	if (!p && peer.pid > 0)
		kill(peer.pid, SIGTERM);
	if (peer_wait(&peer) && !st && !res.bad)
		st = -EIO;
	if (!st)
		res.gbps = bench_cuda_median_gbps(ns, r->iters, r->size);
	res.st = st;
	res.standin = cu.standin;
out:
	if (dev)
		cu.mem_free(dev);
	free(host);
	free(ns);
	return res;
}

/*
 * Each run in a process of its own, which forks its reader before it opens
 * the driver: neither CUDA nor the library's CUDA state survives a fork.
 */
static int runner_main(struct peer *peer, void *arg)
{
	struct result res = run_one(arg);

	return peer_send(peer, &res, sizeof(res)) ? 1 : 0;
}

static struct result run_isolated(struct run *r)
{
	struct result res = { .st = -EPIPE };
	struct peer peer;
	int st = peer_fork(&peer, runner_main, r);

	if (st) {
		res.st = st;
		return res;
	}
	if (peer_recv(&peer, &res, sizeof(res)))
		res = (struct result){ .st = -EPIPE };
	peer_wait(&peer);
	return res;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: tpbench cuda [--pair cpu-cuda|cuda-cpu|cuda-cuda] "
		   "[--channel cuda_ipc|cuda_staged|cuda_dmabuf]\n"
		   "                    [--transport shm|tcp|rdma] [--size BYTES] [--iters N] [--json]\n"
		   "       tpbench cuda --listen URL [--transport T]\n"
		   "       tpbench cuda --connect URL [--pair P] [--channel C] [--transport T] ...\n"
		   "One tensor per round from this process to a forked reader on this host,\n"
		   "per device pair and channel (default: every pair, cuda_ipc and cuda_staged\n"
		   "where they move it; cuda_dmabuf needs the module and --channel); every\n"
		   "byte of every round is checked.  Between two hosts, --listen on one\n"
		   "answers and --connect on the other measures (cuda_staged unless\n"
		   "--channel names another), then tells the listener to stop.  The driver\n"
		   "is TPU_CUDA_DRIVER, else libcuda.so.1.\n");
}

int bench_cuda_main(int argc, char **argv)
{
	const char *pair = NULL, *chan = NULL, *xport = NULL, *listen = NULL, *connect = NULL;
	static const char *const chans[] = { "cuda_ipc", "cuda_staged", "cuda_dmabuf" };
	/* What each asks of the context: cuda_dmabuf rides kmod's rendezvous. */
	static const char *const ctx_chans[] = { "cuda_ipc", "cuda_staged", "kmod,cuda_dmabuf" };
	uint64_t size = 64u << 20;
	unsigned int iters = 10;
	bool json = false, failed = false, standin = false;
	struct json j;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		char *end;

		if (!strcmp(a, "--json")) {
			json = true;
		} else if (!strcmp(a, "--pair") && v) {
			pair = v;
			i++;
		} else if (!strcmp(a, "--channel") && v &&
			   (!strcmp(v, "cuda_ipc") || !strcmp(v, "cuda_staged") ||
			    !strcmp(v, "cuda_dmabuf"))) {
			chan = v;
			i++;
		} else if (!strcmp(a, "--transport") && v &&
			   (!strcmp(v, "shm") || !strcmp(v, "tcp") || !strcmp(v, "rdma"))) {
			xport = v;
			i++;
		} else if (!strcmp(a, "--listen") && v && !connect) {
			listen = v;
			i++;
		} else if (!strcmp(a, "--connect") && v && !listen) {
			connect = v;
			i++;
		} else if (!strcmp(a, "--size") && v && !parse_size(v, &size) && size &&
			   size <= (1ull << 32)) {
			i++;
		} else if (!strcmp(a, "--iters") && v && (iters = (unsigned int)strtoul(v, &end, 0)) &&
			   !*end && iters <= 100000) {
			i++;
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (pair && strcmp(pair, "cpu-cuda") && strcmp(pair, "cuda-cpu") && strcmp(pair, "cuda-cuda")) {
		usage(stderr);
		return 2;
	}
	/* One host: the forked reader listens on shm or on tcp's loopback. */
	if (!listen && !connect && xport && !strcmp(xport, "rdma")) {
		usage(stderr);
		return 2;
	}
	if (listen)
		return bench_cuda_listen(listen, xport);
	/* Between hosts: staging unless asked for another channel. */
	if (connect && !chan)
		chan = "cuda_staged";
	if (!xport)
		xport = connect ? NULL : "shm";
	if (!json) {
		printf("# tpbench cuda: %llu bytes, %u rounds, over %s%s%s\n",
		       (unsigned long long)size, iters, xport ? xport : "the URL's transport",
		       connect ? " to " : "", connect ? connect : "");
		printf("%-10s %-12s %-12s %10s  %s\n", "pair", "channel", "negotiated", "GB/s",
		       "bytes checked");
	}
	for (size_t pi = 0; pi < sizeof(bpairs) / sizeof(bpairs[0]); pi++) {
		if (pair && strcmp(pair, bpairs[pi].name))
			continue;
		for (size_t ci = 0; ci < 3; ci++) {
			struct run r = { &bpairs[pi], ctx_chans[ci], xport, (size_t)size, iters };
			struct result res;

			if (chan ? strcmp(chan, chans[ci]) != 0 : ci == 2)
				continue;
			/* IPC reads the writer's device memory: not from CPU memory. */
			if (bpairs[pi].src == TPU_DEVICE_CPU && ci == 0)
				continue;
			/*
			 * Nor over a transport on which the kernel proves no peer pid
			 * (tcp): the library does not offer it there (security.rst).
			 */
			if (ci == 0 && !chan && !connect && strcmp(xport, "shm"))
				continue;
			res = connect ? bench_cuda_connect(connect, &r) : run_isolated(&r);
			failed |= res.st || res.bad;
			standin |= res.standin;
			if (json) {
				/* One object per line, like tpbench pipe. */
				json_init(&j, stdout);
				json_object_begin(&j, NULL);
				json_string(&j, "bench", "cuda");
				json_string(&j, "pair", bpairs[pi].name);
				json_string(&j, "channel", chans[ci]);
				json_string(&j, "negotiated", res.chan);
				json_string(&j, "status", tpu_status_name(res.st));
				json_u64(&j, "size", size);
				json_double(&j, "gbps", res.gbps, 3);
				json_u64(&j, "bad_bytes", (uint64_t)res.bad);
				json_bool(&j, "standin", res.standin);
				json_object_end(&j);
				json_finish(&j);
			} else if (res.st) {
				printf("%-10s %-12s %-12s %10s  %s\n", bpairs[pi].name, chans[ci],
				       res.chan[0] ? res.chan : "-", "-", tpu_strerror(res.st));
			} else {
				printf("%-10s %-12s %-12s %10.2f  %s\n", bpairs[pi].name, chans[ci],
				       res.chan, res.gbps, res.bad ? "WRONG BYTES" : "all correct");
			}
		}
	}
	if (connect && bench_cuda_goodbye(connect, xport))
		failed = true;
	if (!json && !chan && !connect && strcmp(xport, "shm"))
		printf("# cuda_ipc runs over shm only: over %s the kernel proves no peer pid\n", xport);
	if (!json && standin)
		printf("# the stand-in driver: a correctness check, not GPU figures\n");
	return failed ? 1 : 0;
}
