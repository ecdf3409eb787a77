// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * tpbench rdv: what the public rendezvous API costs, per implementation.
 *
 * Side A (the measuring side) and side B (the responder) share one
 * rendezvous: two threads with one inprocess rendezvous, or, for kmod and
 * cma, the parent (A, creates and shares) and a forked child (B, joins the
 * descriptor it got over a socketpair).  Everything between A and B goes
 * through the rendezvous; each key is used once.
 *
 *   latency    A sends a 64-byte "ping/i", B receives it and sends
 *              "pong/i" back, A's wait for it returns: one round trip.
 *   bandwidth  A sends one tensor of each size; B's blocking receive
 *              returns, B stamps CLOCK_MONOTONIC (one clock for both
 *              processes) and sends the stamp back as a small "ack"; the
 *              time is from before A's send to that stamp.  The first
 *              iteration of each size is a warm-up whose bytes B checks.
 *   reference  the same transfers the plain way, in the same run: memcpy
 *              (inprocess), B's process_vm_readv of A's memory (cma), or
 *              the module's own SEND and RECV ioctls between two
 *              endpoints of a domain of their own (kmod): the raw copy
 *              the rendezvous wraps, timed as the rendezvous is.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <tpu_user.h>

#include "bench_pipe.h"
#include "bench_rdv.h"
#include "bench_remote.h"
#include "hog.h"
#include "pin.h"
#include "host_state.h"
#include "json.h"
#include "peer.h"
#include "units.h"

#define MSG_LEN		64
#define NSIZES		4
#define WARMUP		10
#define WAIT_NS		30000000000ull	/* 30 s: the VM is emulated */

static const size_t bw_sizes[NSIZES] = { 64u << 10, 1u << 20, 16u << 20, 64u << 20 };

/* A pipe's round trip in the same run: what the rendezvous is held against. */
struct pipe_ref {
	const char *chan;		/* asked for: cma, kmod */
	bool ran;
	char got[32];			/* negotiated transport/channel, or why not */
	double p50_us, p99_us;
};

struct rdv_opts {
	bool want[4];		/* by enum tpu_rdv_impl */
	unsigned int iters;	/* round trips */
	unsigned int bw_iters;	/* timed transfers per size */
	bool json;
	struct pipe_ref pipes[2];	/* shm with cma, shm with kmod */
	unsigned int hogs;		/* --hog N */
	const char *pin;		/* --pin same|split, or NULL */
	bool remote;			/* --remote */
	const char *transport;		/* --transport, with --remote */
	double futex_us, futex_p99_us;	/* the blocking reference's round trip */
	double loadavg;			/* 1-minute load when the run began */
	struct host_state host[2];	/* before the hogs start, after they stop */
};

struct rdv_result {
	enum tpu_rdv_impl impl;
	tpu_status skipped;	/* why not run, 0 when it ran */
	char why[360];
	bool failed;
	double rtt_p50_us, rtt_p90_us, rtt_p99_us;
	double idle_cpu_pct;	/* this process's CPU while the rendezvous idles */
	double gbps[NSIZES];
	const char *ref_name;	/* the same-run reference: memcpy, process_vm_readv, kmod */
	double ref_gbps[NSIZES];
};

/* A asks B for one raw process_vm_readv of its memory (cma's reference). */
struct raw_req {
	uint64_t addr;
	uint64_t len;
};

struct raw_ack {
	uint64_t ns;
	int32_t status;
	int32_t pad;
};

/* What B sends back after each bandwidth transfer. */
struct ack {
	uint64_t t_done;
	int32_t data_ok;
	int32_t status;
};

/* The two sides of one run. */
struct side {
	const struct rdv_opts *o;
	struct tpu_rendezvous *rdv;
	struct tpu_buffer *buf;	/* kmod: room for the largest tensor, registered */
	uint8_t *mem;		/* the tensors' memory: buf's, or plain memory */
	enum tpu_rdv_impl impl;
	/* kmod's reference: an endpoint in a domain of its own, and its memory. */
	struct tpu_endpoint *ref_ep;
	int ref_domain;		/* A: the domain's descriptor, passed to B */
	uint8_t *ref_mem;
	uint32_t ref_region;
};

#define MEM_LEN	(64u << 20)	/* the largest of bw_sizes */

/*
 * kmod moves tensors between buffers of its endpoint; the others take any
 * memory, and get what tpbench's raw memcpy and process_vm_readv figures
 * use (anonymous, transparent huge pages), so that the ratios compare the
 * rendezvous, not the memory.
 */
static tpu_status side_mem_alloc(struct side *s, struct tpu_context *ctx, enum tpu_rdv_impl impl)
{
	tpu_status st;
	void *p;

	if (impl == TPU_RDV_KMOD) {
		st = tpu_buffer_alloc(ctx, MEM_LEN, &s->buf);
		if (!st)
			s->mem = tpu_buffer_data(s->buf);
		return st;
	}
	p = mmap(NULL, MEM_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	madvise(p, MEM_LEN, MADV_HUGEPAGE);
	s->mem = p;
	return 0;
}

/*
 * kmod's reference: A creates a domain (@join < 0), B joins it; each
 * allocates MEM_LEN bytes of the module's memory on its endpoint once,
 * the kind of memory the rendezvous moves here (a tpu_buffer's).
 */
static tpu_status side_ref_open(struct side *s, int join)
{
	bool a = join < 0;
	tpu_status st;
	void *p = NULL;

	s->ref_domain = -1;
	st = tpu_endpoint_open(NULL, &s->ref_ep);
	if (!st && a)
		st = tpu_domain_create(s->ref_ep, &s->ref_domain, NULL);
	if (!st)
		st = tpu_domain_attach(s->ref_ep, a ? s->ref_domain : join, NULL);
	if (!st)
		st = tpu_region_alloc_mapped(s->ref_ep, MEM_LEN, TPU_MAP_POPULATE, &s->ref_region, &p);
	if (!st) {
		s->ref_mem = p;
		memset(p, 0x5a, MEM_LEN);
	}
	return st;
}

static void side_ref_close(struct side *s)
{
	if (!s->ref_ep)
		return;
	if (s->ref_mem)
		tpu_region_munmap(s->ref_mem, MEM_LEN);
	s->ref_mem = NULL;
	tpu_endpoint_close(s->ref_ep);
	s->ref_ep = NULL;
	if (s->ref_domain >= 0)
		close(s->ref_domain);
	s->ref_domain = -1;
}

static void side_mem_free(struct side *s)
{
	if (s->buf)
		tpu_buffer_free(s->buf);
	else if (s->mem)
		munmap(s->mem, MEM_LEN);
	s->buf = NULL;
	s->mem = NULL;
}

/* The bandwidth test's send completes while A already waits for the ack. */
struct send_done {
	sem_t sem;
	tpu_status status;
};

static void on_sent(void *arg, tpu_status status)
{
	struct send_done *d = arg;

	d->status = status;
	sem_post(&d->sem);
}

/* Post @len bytes of @data under @key and wait until the source is free. */
static tpu_status send_sync(struct side *s, const char *key, void *data, size_t len)
{
	struct tpu_tensor t = { .data = data, .len = len,
				.buffer = s->buf && data == s->mem ? s->buf : NULL };

	return tpu_rendezvous_send_wait(s->rdv, key, strlen(key), &t, 0, WAIT_NS);
}

static tpu_status recv_sync(struct side *s, const char *key, void *data, size_t cap,
			    struct tpu_buffer *buf)
{
	struct tpu_tensor t = { .data = data, .len = cap, .buffer = buf };

	return tpu_rendezvous_recv_wait(s->rdv, key, strlen(key), &t, WAIT_NS, NULL);
}

static uint8_t pattern(size_t i, size_t size)
{
	return (uint8_t)(i * 7 + (i >> 12) + size / 4096 + 1);
}

/*
 * B, cma only: time process_vm_readv of A's memory, as asked, straight
 * into the memory the rendezvous received into: the reference its
 * bandwidth is compared with in the same run.
 */
static tpu_status raw_pulls(struct side *s)
{
	unsigned int i, si;
	char key[64];
	tpu_status st;

	for (si = 0; si < NSIZES; si++) {
		for (i = 0; i <= s->o->bw_iters; i++) {
			struct raw_req q;
			struct raw_ack a = { 0 };
			uint64_t t0;

			snprintf(key, sizeof(key), "raw/%zu/%u", bw_sizes[si], i);
			st = recv_sync(s, key, &q, sizeof(q), NULL);
			if (st)
				return st;
			t0 = now_ns();
			a.status = tpu_cma_read(getppid(), q.addr, s->mem, (size_t)q.len);
			a.ns = now_ns() - t0;
			snprintf(key, sizeof(key), "rawack/%zu/%u", bw_sizes[si], i);
			st = send_sync(s, key, &a, sizeof(a));
			if (st)
				return st;
		}
	}
	return 0;
}

/*
 * B, kmod only: for each request, one blocking RECV of A's raw SEND on the
 * reference's own endpoint, stamped when it returns, as the rendezvous's
 * transfers are.
 */
static tpu_status raw_recvs(struct side *s)
{
	unsigned int i, si;
	char key[64];
	tpu_status st;

	for (si = 0; si < NSIZES; si++) {
		for (i = 0; i <= s->o->bw_iters; i++) {
			struct raw_req q;
			struct raw_ack a = { 0 };
			struct tpu_recv_args rv = { .key = key, .region = s->ref_region,
						    .timeout_ns = WAIT_NS };

			snprintf(key, sizeof(key), "raw/%zu/%u", bw_sizes[si], i);
			st = recv_sync(s, key, &q, sizeof(q), NULL);
			if (st)
				return st;
			snprintf(key, sizeof(key), "kraw/%zu/%u", bw_sizes[si], i);
			rv.key_len = strlen(key);
			rv.len = q.len;
			a.status = tpu_recv(s->ref_ep, &rv);
			a.ns = now_ns();
			snprintf(key, sizeof(key), "rawack/%zu/%u", bw_sizes[si], i);
			st = send_sync(s, key, &a, sizeof(a));
			if (st)
				return st;
		}
	}
	return 0;
}

/* B: answer every ping, then receive every tensor and acknowledge it. */
static tpu_status responder(struct side *s)
{
	unsigned int i, si;
	char key[64], msg[MSG_LEN];
	uint8_t *dst = s->mem;
	tpu_status st;

	for (i = 0; i < WARMUP + s->o->iters; i++) {
		snprintf(key, sizeof(key), "ping/%u", i);
		st = recv_sync(s, key, msg, sizeof(msg), NULL);
		snprintf(key, sizeof(key), "pong/%u", i);
		if (!st)
			st = send_sync(s, key, msg, sizeof(msg));
		if (st)
			return st;
	}
	for (si = 0; si < NSIZES; si++) {
		for (i = 0; i <= s->o->bw_iters; i++) {
			struct ack a = { 0 };
			size_t k;

			snprintf(key, sizeof(key), "bw/%zu/%u", bw_sizes[si], i);
			a.status = recv_sync(s, key, dst, bw_sizes[si], s->buf);
			a.t_done = now_ns();
			a.data_ok = 1;
			for (k = 0; i == 0 && !a.status && k < bw_sizes[si]; k++) {
				if (dst[k] != pattern(k, bw_sizes[si])) {
					a.data_ok = 0;
					break;
				}
			}
			snprintf(key, sizeof(key), "ack/%zu/%u", bw_sizes[si], i);
			st = send_sync(s, key, &a, sizeof(a));
			if (st || a.status)
				return st ? st : a.status;
		}
	}
	if (s->impl == TPU_RDV_KMOD)
		return raw_recvs(s);
	return s->impl == TPU_RDV_CMA ? raw_pulls(s) : 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint64_t quantile(uint64_t *v, unsigned int n, unsigned int pct)
{
	unsigned int k = (unsigned int)(((uint64_t)n * pct) / 100);

	qsort(v, n, sizeof(*v), cmp_u64);
	return v[k < n ? k : n - 1];
}

/*
 * A, kmod: ask B for a raw RECV, then time from before the raw SEND on the
 * reference's endpoint to B's stamp when its RECV returned (into @a->ns),
 * and collect the SEND's completion before the next.
 */
static tpu_status raw_send(struct side *s, size_t size, unsigned int i, struct raw_ack *a)
{
	struct raw_req q = { 0, size };
	struct tpu_send_args sa = { .region = s->ref_region, .len = size, .user_data = i };
	struct tpu_completion c;
	char key[64], kkey[64];
	size_t n = 0;
	uint64_t t0;
	tpu_status st;

	snprintf(key, sizeof(key), "raw/%zu/%u", size, i);
	st = send_sync(s, key, &q, sizeof(q));
	if (st)
		return st;
	snprintf(kkey, sizeof(kkey), "kraw/%zu/%u", size, i);
	sa.key = kkey;
	sa.key_len = strlen(kkey);
	t0 = now_ns();
	st = tpu_send(s->ref_ep, &sa);
	snprintf(key, sizeof(key), "rawack/%zu/%u", size, i);
	if (!st)
		st = recv_sync(s, key, a, sizeof(*a), NULL);
	if (!st)
		st = a->status;
	if (!st)
		st = tpu_completions_read(s->ref_ep, &c, 1, 30000, &n);
	if (!st)
		st = c.status;
	a->ns -= t0;
	return st;
}

/*
 * A, after the rendezvous figures: the same sizes moved the plain way, in
 * the same run and the same kind of memory: memcpy for inprocess, B's
 * process_vm_readv of A's memory for cma, the module's raw SEND and RECV
 * for kmod (raw_send).  @t has room for bw_iters.
 */
static tpu_status measure_reference(struct side *s, struct rdv_result *r, uint64_t *t)
{
	unsigned int i, si;
	uint8_t *dst = NULL;
	char key[64];
	tpu_status st = 0;

	if (s->impl == TPU_RDV_INPROCESS) {
		dst = mmap(NULL, MEM_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (dst == MAP_FAILED)
			return -errno;
		madvise(dst, MEM_LEN, MADV_HUGEPAGE);
		r->ref_name = "memcpy";
	} else if (s->impl == TPU_RDV_CMA) {
		r->ref_name = "pvm_readv";
	} else if (s->impl == TPU_RDV_KMOD && s->ref_ep) {
		r->ref_name = "kmod_ioctl";
	} else {
		return 0;
	}
	for (si = 0; !st && si < NSIZES; si++) {
		size_t size = bw_sizes[si];

		for (i = 0; !st && i <= s->o->bw_iters; i++) {
			struct raw_req q = { (uintptr_t)s->mem, size };
			struct raw_ack a = { 0 };
			uint64_t t0 = now_ns();

			if (dst) {
				memcpy(dst, s->mem, size);
				a.ns = now_ns() - t0;
			} else if (s->impl == TPU_RDV_KMOD) {
				st = raw_send(s, size, i, &a);
			} else {
				snprintf(key, sizeof(key), "raw/%zu/%u", size, i);
				st = send_sync(s, key, &q, sizeof(q));
				snprintf(key, sizeof(key), "rawack/%zu/%u", size, i);
				if (!st)
					st = recv_sync(s, key, &a, sizeof(a), NULL);
				if (!st)
					st = a.status;
			}
			if (i > 0)
				t[i - 1] = a.ns;
		}
		if (!st)
			r->ref_gbps[si] = (double)size / (double)quantile(t, s->o->bw_iters, 50);
	}
	if (dst)
		munmap(dst, MEM_LEN);
	return st;
}

/* A: time the round trips and the transfers into @r. */
static tpu_status measure(struct side *s, struct rdv_result *r)
{
	unsigned int n = s->o->iters > s->o->bw_iters ? s->o->iters : s->o->bw_iters;
	uint64_t *t = calloc(n, sizeof(*t));
	uint8_t *src = s->mem;
	char key[64], msg[MSG_LEN];
	unsigned int i, si;
	tpu_status st = 0;

	if (!t)
		return -ENOMEM;
	memset(msg, 0x42, sizeof(msg));
	for (i = 0; !st && i < WARMUP + s->o->iters; i++) {
		uint64_t t0 = now_ns();

		snprintf(key, sizeof(key), "ping/%u", i);
		st = send_sync(s, key, msg, sizeof(msg));
		snprintf(key, sizeof(key), "pong/%u", i);
		if (!st)
			st = recv_sync(s, key, msg, sizeof(msg), NULL);
		if (i >= WARMUP)
			t[i - WARMUP] = now_ns() - t0;
	}
	if (!st) {
		r->rtt_p50_us = (double)quantile(t, s->o->iters, 50) / 1e3;
		r->rtt_p90_us = (double)quantile(t, s->o->iters, 90) / 1e3;
		r->rtt_p99_us = (double)quantile(t, s->o->iters, 99) / 1e3;
	}
	for (si = 0; !st && si < NSIZES; si++) {
		size_t k, size = bw_sizes[si];

		for (k = 0; k < size; k++)
			src[k] = pattern(k, size);
		for (i = 0; !st && i <= s->o->bw_iters; i++) {
			struct ack a = { 0 };
			struct tpu_tensor tt = { .data = src, .len = size, .buffer = s->buf };
			struct send_done d = { .status = 0 };
			uint64_t t0;

			sem_init(&d.sem, 0, 0);
			snprintf(key, sizeof(key), "bw/%zu/%u", size, i);
			t0 = now_ns();
			st = tpu_rendezvous_send(s->rdv, key, strlen(key), &tt, 0, on_sent, &d);
			snprintf(key, sizeof(key), "ack/%zu/%u", size, i);
			if (!st) {
				st = recv_sync(s, key, &a, sizeof(a), NULL);
				while (sem_wait(&d.sem) && errno == EINTR)
					;
				if (!st)
					st = d.status ? d.status : a.status;
			}
			sem_destroy(&d.sem);
			if (!st && !a.data_ok) {
				fprintf(stderr, "tpbench rdv: %s: %zu-byte tensor arrived corrupted\n",
					tpu_rdv_impl_name(r->impl), size);
				st = -EIO;
			}
			if (i > 0)
				t[i - 1] = a.t_done - t0;
		}
		if (!st)
			r->gbps[si] = (double)size / (double)quantile(t, s->o->bw_iters, 50);
	}
	if (!st)
		st = measure_reference(s, r, t);
	free(t);
	return st;
}

static void *responder_thread(void *arg)
{
	/* B's thread goes where a forked B would (--pin split). */
	pin_child();
	return (void *)(intptr_t)responder(arg);
}

static int child_main(struct peer *p, void *arg)
{
	struct side s = { .o = arg };
	struct tpu_context_options co = { 0 };
	struct tpu_context *ctx = NULL;
	enum tpu_rdv_impl impl = TPU_RDV_AUTO;
	int fd = -1;
	tpu_status st;

	st = peer_recv(p, &impl, sizeof(impl));
	if (!st)
		st = tpu_fd_recv(p->sock, &fd);
	if (impl != TPU_RDV_KMOD)
		co.flags = TPU_CTX_NO_KMOD;
	if (!st)
		st = tpu_context_create(&co, &ctx);
	if (!st)
		st = tpu_rendezvous_join(ctx, fd, &s.rdv);
	if (fd >= 0)
		close(fd);
	fd = -1;
	if (!st && impl == TPU_RDV_KMOD)
		st = tpu_fd_recv(p->sock, &fd);
	if (!st && impl == TPU_RDV_KMOD)
		st = side_ref_open(&s, fd);
	if (fd >= 0)
		close(fd);
	s.impl = impl;
	if (!st)
		st = side_mem_alloc(&s, ctx, impl);
	if (!st)
		st = responder(&s);
	if (st)
		fprintf(stderr, "tpbench rdv: responder: %s (%s)\n", tpu_strerror(st),
			tpu_status_name(st));
	side_mem_free(&s);
	side_ref_close(&s);
	tpu_rendezvous_destroy(s.rdv);
	tpu_context_destroy(ctx);
	return st ? 1 : 0;
}

/* Start B: a thread for inprocess, a child process otherwise. */
static tpu_status run_pair(struct side *a, struct rdv_result *r, struct tpu_context *ctx)
{
	struct side b = { .o = a->o, .rdv = a->rdv, .impl = a->impl };
	struct peer p = { -1, -1 };
	pthread_t th;
	void *ret = NULL;
	tpu_status st, bst = 0;
	int fd = -1;

	if (r->impl == TPU_RDV_INPROCESS) {
		st = side_mem_alloc(&b, ctx, r->impl);
		if (st)
			return st;
		st = -pthread_create(&th, NULL, responder_thread, &b);
		if (!st) {
			st = measure(a, r);
			if (st)
				tpu_rendezvous_abort(a->rdv, -ECANCELED);
			pthread_join(th, &ret);
			bst = (tpu_status)(intptr_t)ret;
		}
		side_mem_free(&b);
		return st ? st : bst;
	}
	st = tpu_rendezvous_share(a->rdv, &fd);
	/* Before the fork, so that a failure leaves no child waiting for it. */
	if (!st && r->impl == TPU_RDV_KMOD)
		st = side_ref_open(a, -1);
	if (!st)
		st = peer_fork(&p, child_main, (void *)a->o);
	if (!st)
		st = peer_send(&p, &r->impl, sizeof(r->impl));
	if (!st)
		st = tpu_fd_send(p.sock, fd);
	if (!st && r->impl == TPU_RDV_KMOD)
		st = tpu_fd_send(p.sock, a->ref_domain);
	if (fd >= 0)
		close(fd);
	if (!st)
		st = measure(a, r);
	if (st)
		tpu_rendezvous_abort(a->rdv, -ECANCELED);
	if (p.sock >= 0 && peer_wait(&p) && !st)
		st = -ECHILD;
	return st;
}

static uint64_t cpu_ns(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000ull +
	       (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000ull;
}

/*
 * The CPU this process uses (every thread: the caller, the context's, an
 * implementation's helpers) over @ms while its rendezvous has nothing
 * pending, as a percentage of one core.
 */
static double idle_cpu_pct(unsigned int ms)
{
	uint64_t c0 = cpu_ns(), t0 = now_ns();

	usleep(ms * 1000u);
	return 100.0 * (double)(cpu_ns() - c0) / (double)(now_ns() - t0);
}

/* Run one implementation, or say why it cannot run here. */
static void run_impl(const struct rdv_opts *o, struct rdv_result *r)
{
	struct tpu_context_options co = { 0 };
	struct tpu_context *ctx = NULL;
	struct side a = { .o = o, .impl = r->impl };
	tpu_status st;

	if (r->impl != TPU_RDV_KMOD)
		co.flags = TPU_CTX_NO_KMOD;
	st = tpu_context_create(&co, &ctx);
	if (!st)
		st = tpu_rendezvous_create(ctx, r->impl, &a.rdv);
	if (st) {
		struct tpu_probe_result pr;

		r->skipped = st;
		tpu_probe(NULL, &pr);
		snprintf(r->why, sizeof(r->why), "%s (%s); %s", tpu_strerror(st),
			 tpu_status_name(st), pr.detail);
		tpu_context_destroy(ctx);
		return;
	}
	st = side_mem_alloc(&a, ctx, r->impl);
	if (!st)
		st = run_pair(&a, r, ctx);
	if (!st)
		r->idle_cpu_pct = idle_cpu_pct(500);
	if (st) {
		r->failed = true;
		snprintf(r->why, sizeof(r->why), "%s (%s)", tpu_strerror(st), tpu_status_name(st));
	}
	side_mem_free(&a);
	side_ref_close(&a);
	tpu_rendezvous_destroy(a.rdv);
	tpu_context_destroy(ctx);
}

/* The pipe reference of @impl's round trip, or NULL. */
static const struct pipe_ref *pipe_ref_of(const struct rdv_opts *o, enum tpu_rdv_impl impl)
{
	const struct pipe_ref *p = &o->pipes[impl == TPU_RDV_KMOD ? 1 : 0];

	return p->chan && p->ran ? p : NULL;
}

static void print_table(const struct rdv_result *res, unsigned int n, const struct rdv_opts *o)
{
	char sz[32];
	unsigned int i, si;

	printf("rendezvous: round trip of a %d-byte tensor (median, p90, p99 over %u; us) and\n"
	       "one tensor from send to the receiver's completion (median over %u; GB/s)\n\n",
	       MSG_LEN, o->iters, o->bw_iters);
	printf("%-10s %9s %9s %9s", "impl", "rtt p50", "rtt p90", "rtt p99");
	for (si = 0; si < NSIZES; si++)
		printf(" %9s", format_size(bw_sizes[si], sz, sizeof(sz)));
	printf("\n");
	for (i = 0; i < n; i++) {
		const struct rdv_result *r = &res[i];

		printf("%-10s", tpu_rdv_impl_name(r->impl));
		if (r->skipped || r->failed) {
			printf(" %s: %s\n", r->skipped ? "skipped" : "FAILED", r->why);
			continue;
		}
		printf(" %9.1f %9.1f %9.1f", r->rtt_p50_us, r->rtt_p90_us, r->rtt_p99_us);
		for (si = 0; si < NSIZES; si++)
			printf(" %9.2f", r->gbps[si]);
		printf("\n");
		if (!r->ref_name)
			continue;
		printf("  %-18s %19s", r->ref_name, "");
		for (si = 0; si < NSIZES; si++)
			printf(" %9.2f", r->ref_gbps[si]);
		printf("\n  %-18s %19s", "ratio", "");
		for (si = 0; si < NSIZES; si++)
			printf(" %8.2fx", r->ref_gbps[si] > 0 ? r->gbps[si] / r->ref_gbps[si] : 0.0);
		printf("\n");
	}
	printf("\nload: %u busy processes started for the run (--hog); 1-minute load %.2f before\n",
	       o->hogs, o->loadavg);
	printf("%s\n", pin_describe());
	host_state_print(stdout, &o->host[0], &o->host[1]);
	printf("idle (nothing pending, 0.5 s), CPU of the whole process:");
	for (i = 0; i < n; i++) {
		if (!res[i].skipped && !res[i].failed)
			printf("  %s %.2f%%", tpu_rdv_impl_name(res[i].impl), res[i].idle_cpu_pct);
	}
	printf(" of a core\n");
	printf("round trip of a blocking futex ping-pong between two processes: p50 %.1f us,"
	       " p99 %.1f us;\n  rendezvous/futex p50 (p99):", o->futex_us, o->futex_p99_us);
	for (i = 0; i < n; i++) {
		if (!res[i].skipped && !res[i].failed && o->futex_us > 0 && o->futex_p99_us > 0)
			printf("  %s %.2fx (%.2fx)", tpu_rdv_impl_name(res[i].impl),
			       res[i].rtt_p50_us / o->futex_us, res[i].rtt_p99_us / o->futex_p99_us);
	}
	for (i = 0; i < 2; i++) {
		const struct pipe_ref *p = &o->pipes[i];

		if (p->chan && p->ran && o->futex_us > 0 && o->futex_p99_us > 0)
			printf("  pipe %s %.2fx (%.2fx)", p->got, p->p50_us / o->futex_us,
			       p->p99_us / o->futex_p99_us);
	}
	printf("\nround trip against a pipe between two processes, same run, p50 (p99):\n");
	for (i = 0; i < 2; i++) {
		const struct pipe_ref *p = &o->pipes[i];

		if (!p->chan)
			continue;
		if (!p->ran) {
			printf("  pipe shm/%s: not run: %s\n", p->chan, p->got);
			continue;
		}
		printf("  pipe %-12s %9.1f us (%.1f us):", p->got, p->p50_us, p->p99_us);
		for (unsigned int k = 0; k < n; k++) {
			if (pipe_ref_of(o, res[k].impl) != p || res[k].skipped || res[k].failed)
				continue;
			printf("  %s %.2fx (%.2fx)", tpu_rdv_impl_name(res[k].impl),
			       res[k].rtt_p50_us / p->p50_us, res[k].rtt_p99_us / p->p99_us);
		}
		printf("\n");
	}
}

static void print_json(const struct rdv_result *res, unsigned int n, const struct rdv_opts *o)
{
	struct json j;
	unsigned int i, si;
	char size[24];

	json_init(&j, stdout);
	json_object_begin(&j, NULL);
	json_string(&j, "bench", "rdv");
	json_u64(&j, "msg_bytes", MSG_LEN);
	json_u64(&j, "iters", o->iters);
	json_u64(&j, "bw_iters", o->bw_iters);
	json_u64(&j, "hogs", o->hogs);
	json_double(&j, "loadavg_1min", o->loadavg, 2);
	json_string(&j, "placement", pin_describe());
	host_state_json(&j, &o->host[0], &o->host[1]);
	json_double(&j, "futex_pingpong_rtt_us", o->futex_us, 2);
	json_double(&j, "futex_pingpong_rtt_p99_us", o->futex_p99_us, 2);
	json_array_begin(&j, "results");
	for (i = 0; i < n; i++) {
		const struct rdv_result *r = &res[i];

		json_object_begin(&j, NULL);
		json_string(&j, "impl", tpu_rdv_impl_name(r->impl));
		if (r->skipped || r->failed) {
			json_string(&j, r->skipped ? "skipped" : "failed", r->why);
		} else {
			json_object_begin(&j, "rtt_us");
			json_double(&j, "median", r->rtt_p50_us, 2);
			json_double(&j, "p90", r->rtt_p90_us, 2);
			json_double(&j, "p99", r->rtt_p99_us, 2);
			json_object_end(&j);
			json_double(&j, "idle_cpu_pct", r->idle_cpu_pct, 3);
			json_object_begin(&j, "gbps");
			for (si = 0; si < NSIZES; si++) {
				snprintf(size, sizeof(size), "%zu", bw_sizes[si]);
				json_double(&j, size, r->gbps[si], 3);
			}
			json_object_end(&j);
			if (pipe_ref_of(o, r->impl)) {
				json_object_begin(&j, "pipe_reference");
				json_string(&j, "pipe", pipe_ref_of(o, r->impl)->got);
				json_double(&j, "rtt_p50_us", pipe_ref_of(o, r->impl)->p50_us, 2);
				json_double(&j, "rtt_p99_us", pipe_ref_of(o, r->impl)->p99_us, 2);
				json_object_end(&j);
			}
			if (r->ref_name) {
				json_object_begin(&j, "reference");
				json_string(&j, "name", r->ref_name);
				json_object_begin(&j, "gbps");
				for (si = 0; si < NSIZES; si++) {
					snprintf(size, sizeof(size), "%zu", bw_sizes[si]);
					json_double(&j, size, r->ref_gbps[si], 3);
				}
				json_object_end(&j);
				json_object_end(&j);
			}
		}
		json_object_end(&j);
	}
	json_array_end(&j);
	json_object_end(&j);
	json_finish(&j);
}

static void usage(FILE *f)
{
	fprintf(f,
"usage: tpbench rdv [--impl inprocess|kmod|cma|all] [--iters N] [--hog N] [--pin same|split]\n"
"                   [--json]\n"
"       tpbench rdv --remote [--transport shm|tcp] [--iters N] [--hog N] [--pin same|split]\n"
"                   [--json]\n"
"--impl LIST  comma-separated implementations (default all); one that cannot\n"
"             run here is skipped with the library's reason\n"
"--iters N    round trips of the 64-byte latency test (default 100); each\n"
"             bandwidth size runs N/10 timed transfers (3 to 20) after one\n"
"             checked warm-up\n"
"--hog N      N busy processes run during the measurements (a loaded machine);\n"
"             a plain blocking futex ping-pong is measured as the reference\n"
"--json       print the results as JSON instead of a table\n"
"--remote     the remote rendezvous between two worker processes (task 0 and\n"
"             task 1) against a pipe between two processes, same run\n"
"--transport T  with --remote: the workers' transport, shm (default) or tcp\n"
"--pin same|split  place A and B (and the references' two sides) on this\n"
"             process's first usable CPU (same) or on its first and second\n"
"             (split), so that every ratio of the run compares one placement;\n"
"             by default the scheduler places each side\n");
}

static int parse_impls(char *list, bool *want)
{
	char *tok, *save = NULL;

	memset(want, 0, 4 * sizeof(*want));
	for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (!strcmp(tok, "all"))
			want[TPU_RDV_INPROCESS] = want[TPU_RDV_KMOD] = want[TPU_RDV_CMA] = true;
		else if (!strcmp(tok, "inprocess"))
			want[TPU_RDV_INPROCESS] = true;
		else if (!strcmp(tok, "kmod"))
			want[TPU_RDV_KMOD] = true;
		else if (!strcmp(tok, "cma"))
			want[TPU_RDV_CMA] = true;
		else
			return -1;
	}
	return 0;
}

/*
 * The shm pipe's round trip, with the cma channel (the reference of
 * inprocess and cma) and, where kmod ran, with the kmod channel.
 */
static void measure_pipes(struct rdv_opts *o, const struct rdv_result *res, unsigned int n)
{
	bool kmod_ran = false;
	unsigned int i;

	for (i = 0; i < n; i++)
		kmod_ran |= res[i].impl == TPU_RDV_KMOD && !res[i].skipped && !res[i].failed;
	o->pipes[0].chan = "cma";
	o->pipes[1].chan = kmod_ran ? "kmod" : NULL;
	for (i = 0; i < 2; i++) {
		struct pipe_ref *p = &o->pipes[i];
		tpu_status st;

		if (!p->chan)
			continue;
		st = bench_pipe_rtt("shm", p->chan, o->iters, &p->p50_us, &p->p99_us,
				    p->got, sizeof(p->got));
		p->ran = !st;
		if (st)
			snprintf(p->got, sizeof(p->got), "%s", tpu_status_name(st));
	}
}

/* --remote: the remote rendezvous against its pipe (bench_remote.c). */
static int run_remote(struct rdv_opts *o, struct hogs *hogs)
{
	struct remote_opts ro = { .transport = o->transport ? o->transport : "shm",
				  .iters = o->iters, .bw_iters = o->bw_iters };
	struct remote_result r;
	tpu_status st = bench_remote_run(&ro, &r);

	hogs_stop(hogs);
	host_state_sample(&o->host[1]);
	if (st) {
		fprintf(stderr, "tpbench rdv --remote: %s\n", tpu_strerror(st));
		return 1;
	}
	if (o->json) {
		struct json j;

		json_init(&j, stdout);
		json_object_begin(&j, NULL);
		json_string(&j, "bench", "rdv");
		json_u64(&j, "hogs", o->hogs);
		json_double(&j, "loadavg_1min", o->loadavg, 2);
		json_string(&j, "placement", pin_describe());
		host_state_json(&j, &o->host[0], &o->host[1]);
		json_double(&j, "futex_pingpong_rtt_us", o->futex_us, 2);
		bench_remote_json(&ro, &r, &j);
		json_object_end(&j);
		json_finish(&j);
		return 0;
	}
	bench_remote_print(&ro, &r);
	printf("load: %u busy processes started for the run (--hog); 1-minute load %.2f before\n",
	       o->hogs, o->loadavg);
	printf("%s\n", pin_describe());
	host_state_print(stdout, &o->host[0], &o->host[1]);
	printf("round trip of a blocking futex ping-pong between two processes: %.1f us; "
	       "remote/futex %.2fx\n", o->futex_us, r.rtt_p50_us / o->futex_us);
	return 0;
}

int bench_rdv_main(int argc, char **argv)
{
	static const enum tpu_rdv_impl order[] = { TPU_RDV_INPROCESS, TPU_RDV_KMOD, TPU_RDV_CMA };
	struct rdv_opts o = { .want = { false, true, true, true }, .iters = 100 };
	struct rdv_result res[3];
	struct hogs hogs = { 0 };
	unsigned int i, n = 0;
	int rc = 0;

	for (i = 1; i < (unsigned int)argc; i++) {
		const char *a = argv[i], *v = i + 1 < (unsigned int)argc ? argv[i + 1] : NULL;
		uint64_t num;

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(a, "--json")) {
			o.json = true;
		} else if (!strcmp(a, "--remote")) {
			o.remote = true;
		} else if (v && !strcmp(a, "--transport") && (!strcmp(v, "shm") || !strcmp(v, "tcp"))) {
			o.transport = v;
			i++;
		} else if (v && !strcmp(a, "--hog") && !parse_size(v, &num) && num <= HOG_MAX) {
			o.hogs = (unsigned int)num;
			i++;
		} else if (v && !strcmp(a, "--impl") && !parse_impls(argv[i + 1], o.want)) {
			i++;
		} else if (v && !strcmp(a, "--pin")) {
			o.pin = v;
			i++;
		} else if (v && !strcmp(a, "--iters") && !parse_size(v, &num) && num >= 1 &&
			   num <= 1000000) {
			o.iters = (unsigned int)num;
			i++;
		} else {
			fprintf(stderr, "tpbench rdv: bad argument: %s\n", a);
			usage(stderr);
			return 1;
		}
	}
	o.bw_iters = o.iters / 10 < 3 ? 3 : o.iters / 10 > 20 ? 20 : o.iters / 10;
	host_state_sample(&o.host[0]);
	o.loadavg = o.host[0].load1;
	if (o.pin) {
		int err = pin_setup(o.pin);

		if (err) {
			fprintf(stderr, "tpbench rdv: --pin %s: %s\n", o.pin,
				err == -EINVAL ? "say same or split" :
				err == -ENODEV ? "split needs two usable CPUs" : strerror(-err));
			return 1;
		}
	}
	if (o.hogs && hogs_start(&hogs, o.hogs)) {
		fprintf(stderr, "tpbench rdv: cannot start %u busy processes\n", o.hogs);
		return 1;
	}
	o.futex_us = futex_pingpong_us(o.iters, &o.futex_p99_us);
	if (o.remote) {
		return run_remote(&o, &hogs);
	}
	for (i = 0; i < 3; i++) {
		if (!o.want[order[i]])
			continue;
		memset(&res[n], 0, sizeof(res[n]));
		res[n].impl = order[i];
		run_impl(&o, &res[n]);
		if (res[n].failed)
			rc = 1;
		n++;
	}
	measure_pipes(&o, res, n);
	hogs_stop(&hogs);
	host_state_sample(&o.host[1]);
	if (o.json)
		print_json(res, n, &o);
	else
		print_table(res, n, &o);
	return rc;
}
