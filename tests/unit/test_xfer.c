// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * One-sided transfers (lib/xfer, Documentation/xfer.rst) on both host
 * backends: two agents of this process on two contexts (cma to our own
 * pid, which the kernel vouches for over the shm connection, and tcp),
 * checked against a reference copy; then what a peer must not get:
 * elements past an export (refused whole, by the target for tcp even when
 * the requester lies), WRITE to a read-only export, damaged and foreign
 * blobs, revoked registrations (racing posts included), a killed peer,
 * a peer without the job secret.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dev/dev.h"
#include "tap.h"
#include "xfer/xfer.h"

#define REG	(1U << 20)

struct pair {
	struct tpu_context *ca, *cb;
	struct tpu_agent *a, *b;	/* a posts, b is the target */
	uint8_t *mem_a, *mem_b;
	struct tpu_xfer_reg *ra, *rb;
	struct tpu_xfer_remote *rm;	/* rb as a sees it */
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static tpu_status export_load(struct tpu_xfer_reg *r, struct tpu_agent *into,
			      struct tpu_xfer_remote **out)
{
	uint8_t blob[TPU_XFER_BLOB_MAX];
	size_t len;
	tpu_status st = tpu_agent_export(r, blob, sizeof(blob), &len);

	return st ? st : tpu_agent_load(into, blob, len, out);
}

static bool pair_open(struct pair *p, unsigned int backends, unsigned int access)
{
	struct tpu_agent_options o = { .backends = backends };
	tpu_status st;

	memset(p, 0, sizeof(*p));
	p->mem_a = malloc(REG);
	p->mem_b = malloc(REG);
	if (tpu_context_create(NULL, &p->ca) || tpu_context_create(NULL, &p->cb))
		return false;
	o.name = "A";
	if (tpu_agent_create(p->ca, &o, &p->a))
		return false;
	o.name = "B";
	if (tpu_agent_create(p->cb, &o, &p->b))
		return false;
	if (tpu_agent_register(p->a, p->mem_a, REG, 0, &p->ra) ||
	    tpu_agent_register(p->b, p->mem_b, REG, access, &p->rb))
		return false;
	st = export_load(p->rb, p->a, &p->rm);
	if (st)
		tap_diag("load: %s", tpu_status_name(st));
	return !st;
}

static void pair_close(struct pair *p)
{
	tpu_agent_destroy(p->a);
	tpu_agent_destroy(p->b);
	tpu_context_destroy(p->ca);
	tpu_context_destroy(p->cb);
	free(p->mem_a);
	free(p->mem_b);
}

static void fill(uint8_t *m, size_t n, unsigned int seed)
{
	size_t i;

	for (i = 0; i < n; i++)
		m[i] = (uint8_t)(seed * 131 + i * 7 + (i >> 9));
}

/* @n random non-overlapping pieces of each side totalling the same; returns the total. */
static uint64_t random_lists(struct pair *p, unsigned int seed, size_t nl, size_t nr,
			     struct tpu_xfer_local_elem *l, struct tpu_xfer_remote_elem *r)
{
	uint64_t total = 0, lo = 0, ro = 0, left;
	size_t i;

	srand(seed);
	for (i = 0; i < nl; i++) {
		uint64_t len = (uint64_t)(rand() % 64);	/* zero-length ones included */

		l[i] = (struct tpu_xfer_local_elem){ p->ra, lo + (uint64_t)(rand() % 8), len };
		lo = l[i].offset + len;
		total += len;
	}
	left = total;
	for (i = 0; i < nr; i++) {
		uint64_t len = i + 1 == nr ? left : (uint64_t)(rand() % 64);

		if (len > left)
			len = left;
		r[i] = (struct tpu_xfer_remote_elem){ p->rm, ro + (uint64_t)(rand() % 8), len };
		ro = r[i].offset + len;
		left -= len;
	}
	return total;
}

/* What the lists should do, done with memcpy on copies. */
static void reference(enum tpu_xfer_op op, uint8_t *la, uint8_t *rb,
		      const struct tpu_xfer_local_elem *l, size_t nl,
		      const struct tpu_xfer_remote_elem *r, size_t nr)
{
	size_t i = 0, j = 0;
	uint64_t lo = 0, ro = 0;

	while (i < nl && j < nr) {
		uint64_t n = l[i].len - lo < r[j].len - ro ? l[i].len - lo : r[j].len - ro;

		if (l[i].len == lo) { i++; lo = 0; continue; }
		if (r[j].len == ro) { j++; ro = 0; continue; }
		if (op == TPU_XFER_OP_READ)
			memcpy(la + l[i].offset + lo, rb + r[j].offset + ro, n);
		else
			memcpy(rb + r[j].offset + ro, la + l[i].offset + lo, n);
		lo += n;
		ro += n;
	}
}

static void scatter_gather(struct pair *p, const char *be, enum tpu_xfer_op op, size_t nl,
			   size_t nr, unsigned int seed)
{
	struct tpu_xfer_local_elem *l = calloc(nl, sizeof(*l));
	struct tpu_xfer_remote_elem *r = calloc(nr, sizeof(*r));
	uint8_t *ra = malloc(REG), *rb = malloc(REG);
	struct tpu_xfer_req *req = NULL;
	tpu_status st;

	fill(p->mem_a, REG, seed);
	fill(p->mem_b, REG, seed + 1);
	memcpy(ra, p->mem_a, REG);
	memcpy(rb, p->mem_b, REG);
	random_lists(p, seed, nl, nr, l, r);
	reference(op, ra, rb, l, nl, r, nr);
	st = tpu_xfer_prepare(p->a, op, l, nl, r, nr, NULL, 0, &req);
	CHECK_STATUS(st, 0, "%s %s %zu x %zu: prepared", be, op ? "WRITE" : "READ", nl, nr);
	if (!st) {
		CHECK_STATUS(tpu_xfer_post(req, NULL, NULL), 0, "%s: posted", be);
		CHECK_STATUS(tpu_xfer_wait(req, 10000), 0, "%s: done", be);
	}
	CHECK(!memcmp(p->mem_a, ra, REG) && !memcmp(p->mem_b, rb, REG),
	      "%s %s %zu x %zu: both sides as the reference", be, op ? "WRITE" : "READ", nl, nr);
	tpu_xfer_release(req);
	free(l);
	free(r);
	free(ra);
	free(rb);
}

static void counting_cb(void *arg, tpu_status st, struct tpu_xfer_req *req)
{
	(void)req;
	if (st)
		atomic_fetch_add((atomic_int *)arg, 1000000);
	else
		atomic_fetch_add((atomic_int *)arg, 1);
}

static void bounds_and_repeats(struct pair *p, const char *be)
{
	struct tpu_xfer_local_elem l = { p->ra, 0, 16 };
	struct tpu_xfer_remote_elem r = { p->rm, REG - 16, 16 };
	struct tpu_xfer_req *req = NULL;
	atomic_int count = 0;
	tpu_status st = 0;
	int i;

	/* An element ending exactly at the registration's end. */
	fill(p->mem_a, 16, 9);
	CHECK_STATUS(tpu_xfer_prepare(p->a, TPU_XFER_OP_WRITE, &l, 1, &r, 1, NULL, 0, &req), 0,
		     "%s: element ending at the end: prepared", be);
	CHECK_STATUS(tpu_xfer_post(req, NULL, NULL), 0, "%s: posted", be);
	CHECK_STATUS(tpu_xfer_wait(req, 10000), 0, "%s: done", be);
	CHECK(!memcmp(p->mem_b + REG - 16, p->mem_a, 16), "%s: bytes at the end landed", be);

	/* Prepared once, posted 1000 times. */
	for (i = 0; i < 1000 && !st; i++) {
		st = tpu_xfer_post(req, counting_cb, &count);
		if (!st)
			st = tpu_xfer_wait(req, 10000);
	}
	CHECK_STATUS(st, 0, "%s: 1000 posts of one request", be);
	CHECK(atomic_load(&count) == 1000, "%s: 1000 callbacks, all ok (%d)", be,
	      atomic_load(&count));
	tpu_xfer_release(req);

	/* One byte past: refused, whichever element it is. */
	{
		struct tpu_xfer_local_elem l2[2] = { { p->ra, 0, 8 }, { p->ra, 8, 17 } };
		struct tpu_xfer_remote_elem r2[2] = { { p->rm, 0, 8 }, { p->rm, REG - 16, 17 } };

		req = NULL;
		CHECK_STATUS(tpu_xfer_prepare(p->a, TPU_XFER_OP_WRITE, l2, 2, r2, 2, NULL, 0, &req),
			     -EINVAL, "%s: an element one byte past the end is refused", be);
		CHECK(!req, "%s: no request", be);
		r2[1].len = 16;
		CHECK_STATUS(tpu_xfer_prepare(p->a, TPU_XFER_OP_WRITE, l2, 2, r2, 2, NULL, 0, &req),
			     -EINVAL, "%s: totals that differ are refused", be);
		l2[1] = (struct tpu_xfer_local_elem){ p->ra, REG - 8, 9 };
		r2[1].len = 9;
		CHECK_STATUS(tpu_xfer_prepare(p->a, TPU_XFER_OP_WRITE, l2, 2, r2, 2, NULL, 0, &req),
			     -EINVAL, "%s: a local element one byte past is refused", be);
	}
}

/* The target enforces bounds and access itself (tcp): a requester that lies. */
static void target_enforces(struct pair *p)
{
	struct tpu_xfer_local_elem l[2] = { { p->ra, 0, 64 }, { p->ra, 64, 17 } };
	struct tpu_xfer_remote_elem r[2] = { { p->rm, 0, 64 }, { p->rm, REG - 16, 17 } };
	struct tpu_xfer_req *req = NULL;
	uint8_t *before = malloc(REG);

	fill(p->mem_a, REG, 3);
	fill(p->mem_b, REG, 4);
	memcpy(before, p->mem_b, REG);
	p->rm->len = REG + 1;		/* as if the load had answered more */
	CHECK_STATUS(tpu_xfer_prepare(p->a, TPU_XFER_OP_WRITE, l, 2, r, 2, NULL, 0, &req), 0,
		     "tcp: a request past the export passes the requester's (lying) check");
	if (req) {
		tpu_xfer_post(req, NULL, NULL);
		CHECK_STATUS(tpu_xfer_wait(req, 10000), -EINVAL,
			     "tcp: the target refuses an element one byte past its registration");
		CHECK(!memcmp(before, p->mem_b, REG),
		      "tcp: nothing moved, not even the request's valid first element");
		tpu_xfer_release(req);
	}
	p->rm->len = REG;
	/* A registration this peer never loaded, named by a guessed id. */
	{
		uint8_t other[256];
		struct tpu_xfer_reg *r2 = NULL;
		uint64_t real = p->rm->reg;
		struct tpu_xfer_local_elem l1 = { p->ra, 0, 64 };
		struct tpu_xfer_remote_elem r1 = { p->rm, 0, 64 };

		memset(other, 0x77, sizeof(other));
		tpu_agent_register(p->b, other, sizeof(other), TPU_XFER_READ | TPU_XFER_WRITE, &r2);
		p->rm->reg = r2 ? r2->id : 0;
		req = NULL;
		tpu_xfer_prepare(p->a, TPU_XFER_OP_WRITE, &l1, 1, &r1, 1, NULL, 0, &req);
		if (req) {
			tpu_xfer_post(req, NULL, NULL);
			CHECK_STATUS(tpu_xfer_wait(req, 10000), TPU_E_REVOKED,
				     "tcp: the target refuses a registration the peer did not load");
			CHECK(other[0] == 0x77 && other[63] == 0x77, "tcp: nothing landed there");
			tpu_xfer_release(req);
		}
		p->rm->reg = real;
		tpu_agent_deregister(r2);
	}
	free(before);
}

struct notes {
	pthread_mutex_t lock;
	int n, bad;
};

static void notif_cb(void *arg, const char *peer, const void *msg, size_t len)
{
	struct notes *nt = arg;
	int v;

	pthread_mutex_lock(&nt->lock);
	if (len != sizeof(v) || strcmp(peer, "A"))
		nt->bad++;
	memcpy(&v, msg, sizeof(v));
	if (v != nt->n)
		nt->bad++;
	nt->n++;
	pthread_mutex_unlock(&nt->lock);
}

static void notifications(struct pair *p, const char *be)
{
	struct tpu_xfer_local_elem l = { p->ra, 0, 4096 };
	struct tpu_xfer_remote_elem r = { p->rm, 4096, 4096 };
	struct notes nt = { .lock = PTHREAD_MUTEX_INITIALIZER };
	char peer[TPU_XFER_NAME_MAX], msg[16];
	struct tpu_xfer_req *req[100];
	uint64_t t0;
	size_t len;
	int i, ok = 1;

	for (i = 0; i < 100; i++) {
		req[i] = NULL;
		if (tpu_xfer_prepare(p->a, TPU_XFER_OP_WRITE, &l, 1, &r, 1, &i, sizeof(i), &req[i]))
			ok = 0;
	}
	CHECK(ok, "%s: 100 requests with notifications prepared", be);
	/* Queued first: polled in order. */
	for (i = 0; i < 10 && ok; i++)
		ok = !tpu_xfer_post(req[i], NULL, NULL) && !tpu_xfer_wait(req[i], 10000);
	t0 = now_ms();
	for (i = 0; i < 10 && ok;) {
		tpu_status st = tpu_agent_notif_poll(p->b, peer, sizeof(peer), msg, sizeof(msg), &len);
		int v;

		if (st == -EAGAIN && now_ms() - t0 < 10000) {
			usleep(1000);
			continue;
		}
		memcpy(&v, msg, sizeof(v));
		ok = !st && len == sizeof(int) && v == i && !strcmp(peer, "A");
		i++;
	}
	CHECK(ok, "%s: 10 notifications polled in order, named A", be);
	CHECK_STATUS(tpu_agent_notif_poll(p->b, peer, sizeof(peer), msg, sizeof(msg), &len), -EAGAIN,
		     "%s: then none", be);
	nt.n = 10;
	tpu_agent_set_notif_cb(p->b, notif_cb, &nt);
	for (i = 10; i < 100; i++)
		tpu_xfer_post(req[i], NULL, NULL);
	for (i = 10; i < 100; i++)
		tpu_xfer_wait(req[i], 10000);
	t0 = now_ms();
	while (now_ms() - t0 < 10000) {
		pthread_mutex_lock(&nt.lock);
		ok = nt.n == 100;
		pthread_mutex_unlock(&nt.lock);
		if (ok)
			break;
		usleep(1000);
	}
	CHECK(nt.n == 100 && !nt.bad, "%s: 90 more to the callback, in order (%d, %d bad)", be,
	      nt.n, nt.bad);
	tpu_agent_set_notif_cb(p->b, NULL, NULL);
	for (i = 0; i < 100; i++)
		tpu_xfer_release(req[i]);
}

struct racer {
	struct pair *p;
	struct tpu_xfer_req *req;
	atomic_bool stop;
	atomic_int ok, revoked, other;
};

static void *race(void *arg)
{
	struct racer *rc = arg;

	while (!atomic_load(&rc->stop)) {
		tpu_status st = tpu_xfer_post(rc->req, NULL, NULL);

		if (!st)
			st = tpu_xfer_wait(rc->req, 10000);
		if (!st)
			rc->ok++;
		else if (st == TPU_E_REVOKED)
			rc->revoked++;
		else
			rc->other++;
	}
	return NULL;
}

static void deregister_races(struct pair *p, const char *be)
{
	struct tpu_xfer_local_elem l = { p->ra, 0, 65536 };
	struct tpu_xfer_remote_elem r = { p->rm, 0, 65536 };
	struct racer rc = { .p = p };
	uint64_t t0;
	pthread_t t;
	int i;

	memset(p->mem_a, 0xab, 65536);
	if (tpu_xfer_prepare(p->a, TPU_XFER_OP_WRITE, &l, 1, &r, 1, NULL, 0, &rc.req)) {
		CHECK(0, "%s: racing request prepared", be);
		return;
	}
	pthread_create(&t, NULL, race, &rc);
	/* Posts are landing (a loaded machine may take a while to run the thread). */
	t0 = now_ms();
	while (atomic_load(&rc.ok) < 10 && now_ms() - t0 < 10000)
		usleep(1000);
	CHECK_STATUS(tpu_agent_deregister(p->rb), 0, "%s: deregistered while posts run", be);
	/* From here nothing of A may land there. */
	memset(p->mem_b, 0x11, 65536);
	t0 = now_ms();
	while (atomic_load(&rc.revoked) < 10 && now_ms() - t0 < 10000)
		usleep(1000);
	atomic_store(&rc.stop, true);
	pthread_join(t, NULL);
	for (i = 0; i < 65536 && p->mem_b[i] == 0x11; i++)
		;
	CHECK(i == 65536, "%s: no byte landed after deregistration returned", be);
	CHECK(atomic_load(&rc.ok) >= 10 && atomic_load(&rc.revoked) >= 10 &&
	      atomic_load(&rc.other) == 0,
	      "%s: posts failed TPU_E_REVOKED afterwards (%d ok, %d revoked, %d other)", be,
	      atomic_load(&rc.ok), atomic_load(&rc.revoked), atomic_load(&rc.other));
	tpu_xfer_release(rc.req);
	p->rb = NULL;
	CHECK_STATUS(export_load(p->ra, p->a, &p->rm), -EINVAL,
		     "%s: a registration exported for nothing has no blob", be);
}

static void run_backend(unsigned int backend, const char *be)
{
	struct pair p;
	size_t sizes[][2] = { { 1, 1 }, { 7, 13 }, { 300, 200 }, { 10000, 10000 }, { 10000, 3 } };
	size_t i;

	if (!pair_open(&p, backend, TPU_XFER_READ | TPU_XFER_WRITE)) {
		CHECK(0, "%s: two agents, a registration loaded", be);
		pair_close(&p);
		return;
	}
	CHECK(!strcmp(tpu_xfer_remote_backend(p.rm), be), "%s: backend is %s", be,
	      tpu_xfer_remote_backend(p.rm));
	CHECK(tpu_xfer_remote_size(p.rm) == REG, "%s: remote size", be);
	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		scatter_gather(&p, be, TPU_XFER_OP_READ, sizes[i][0], sizes[i][1], (unsigned)i);
		scatter_gather(&p, be, TPU_XFER_OP_WRITE, sizes[i][1], sizes[i][0], (unsigned)i + 50);
	}
	bounds_and_repeats(&p, be);
	if (backend == TPU_XFER_BACKEND_TCP)
		target_enforces(&p);
	notifications(&p, be);
	deregister_races(&p, be);
	pair_close(&p);
}

/* ---- trust ---- */

static void read_only_export(void)
{
	struct pair p;
	struct tpu_xfer_local_elem l = { NULL, 0, 8 };
	struct tpu_xfer_remote_elem r = { NULL, 0, 8 };
	struct tpu_xfer_req *req = NULL;

	if (!pair_open(&p, TPU_XFER_BACKEND_TCP, TPU_XFER_READ)) {
		CHECK(0, "read-only export loaded");
		pair_close(&p);
		return;
	}
	l.reg = p.ra;
	r.remote = p.rm;
	CHECK_STATUS(tpu_xfer_prepare(p.a, TPU_XFER_OP_WRITE, &l, 1, &r, 1, NULL, 0, &req), -EACCES,
		     "WRITE to a read-only export refused at prepare");
	memset(p.mem_b, 0x5a, 8);
	memset(p.mem_a, 0x33, 8);
	p.rm->access |= TPU_XFER_WRITE;	/* a requester that lies */
	CHECK_STATUS(tpu_xfer_prepare(p.a, TPU_XFER_OP_WRITE, &l, 1, &r, 1, NULL, 0, &req), 0,
		     "a lying requester prepares it");
	if (req) {
		tpu_xfer_post(req, NULL, NULL);
		CHECK_STATUS(tpu_xfer_wait(req, 10000), -EACCES, "the target refuses the WRITE");
		CHECK(p.mem_b[0] == 0x5a && p.mem_b[7] == 0x5a, "nothing landed");
		tpu_xfer_release(req);
	}
	pair_close(&p);
}

static void bad_blobs(void)
{
	struct pair p;
	uint8_t blob[TPU_XFER_BLOB_MAX], copy[TPU_XFER_BLOB_MAX];
	struct tpu_xfer_remote *rm = NULL;
	struct xfer_blob b;
	size_t len, i;
	int refused = 0;

	if (!pair_open(&p, 0, TPU_XFER_READ)) {
		CHECK(0, "agents for the blob cases");
		pair_close(&p);
		return;
	}
	CHECK_STATUS(tpu_agent_export(p.rb, blob, 10, &len), -ENOSPC, "export into 10 bytes: ENOSPC");
	CHECK_STATUS(tpu_agent_export(p.rb, blob, sizeof(blob), &len), 0, "exported");
	CHECK_STATUS(tpu_agent_load(p.a, blob, len - 1, &rm), TPU_E_BAD_BLOB, "truncated blob");
	CHECK_STATUS(tpu_agent_load(p.a, "hello", 5, &rm), TPU_E_BAD_BLOB, "not a blob");
	for (i = 0; i < len; i++) {
		memcpy(copy, blob, len);
		copy[i] ^= 0x40;
		refused += tpu_agent_load(p.a, copy, len, &rm) == TPU_E_BAD_BLOB;
	}
	CHECK(refused == (int)len, "every flipped byte of %zu refused (%d)", len, refused);
	/* Well formed, but of an agent that does not serve this address. */
	CHECK_STATUS(tpu__xfer_blob_get(blob, len, &b), 0, "decoded");
	b.agent[0] ^= 1;
	len = tpu__xfer_blob_put(&b, copy, sizeof(copy));
	CHECK_STATUS(tpu_agent_load(p.a, copy, len, &rm), TPU_E_BAD_BLOB,
		     "a blob of another agent at that address");
	b.agent[0] ^= 1;
	b.key ^= 1;
	len = tpu__xfer_blob_put(&b, copy, sizeof(copy));
	CHECK_STATUS(tpu_agent_load(p.a, copy, len, &rm), TPU_E_REVOKED, "a wrong key");
	b.key ^= 1;
	b.reg += 1ULL << 32;		/* a guessed id of another generation */
	len = tpu__xfer_blob_put(&b, copy, sizeof(copy));
	CHECK_STATUS(tpu_agent_load(p.a, copy, len, &rm), TPU_E_REVOKED, "another registration id");
	tpu_agent_export(p.rb, blob, sizeof(blob), &len);
	tpu_agent_deregister(p.rb);
	CHECK_STATUS(tpu_agent_load(p.a, blob, len, &rm), TPU_E_REVOKED,
		     "the blob of a deregistered registration");
	pair_close(&p);
}

static void no_secret(void)
{
	struct tpu_context *ca = NULL, *cb = NULL;
	struct tpu_agent *a = NULL, *b = NULL;
	struct tpu_xfer_remote *rm = NULL;
	struct tpu_xfer_reg *rb = NULL;
	static uint8_t mem[4096];

	tpu_context_create(NULL, &ca);
	tpu_context_create(NULL, &cb);
	tpu_context_set_secret(cb, "job secret", 10);
	tpu_agent_create(ca, NULL, &a);
	tpu_agent_create(cb, NULL, &b);
	tpu_agent_register(b, mem, sizeof(mem), TPU_XFER_READ | TPU_XFER_WRITE, &rb);
	CHECK_STATUS(export_load(rb, a, &rm), -EACCES,
		     "an agent without the job secret cannot load a blob");
	tpu_context_set_secret(ca, "other secret", 12);
	tpu_agent_destroy(a);
	a = NULL;
	tpu_agent_create(ca, NULL, &a);
	CHECK_STATUS(export_load(rb, a, &rm), -EACCES, "nor one with another secret");
	tpu_context_set_secret(ca, "job secret", 10);
	tpu_agent_destroy(a);
	a = NULL;
	tpu_agent_create(ca, NULL, &a);
	CHECK_STATUS(export_load(rb, a, &rm), 0, "the same secret loads it");
	tpu_agent_destroy(a);
	tpu_agent_destroy(b);
	tpu_context_destroy(ca);
	tpu_context_destroy(cb);
}

/* The target process dies during a batch: the requester fails within a bound. */
static void peer_killed(unsigned int backend, const char *be)
{
	const size_t big = 64U << 20;
	int fds[2];
	pid_t child;
	uint8_t blob[TPU_XFER_BLOB_MAX];
	ssize_t len;

	if (pipe(fds))
		return;
	child = fork();
	if (child == 0) {
		struct tpu_context *c;
		struct tpu_agent *b;
		struct tpu_xfer_reg *r;
		uint8_t *m = calloc(1, big);
		size_t n;

		close(fds[0]);
		if (tpu_context_create(NULL, &c) || tpu_agent_create(c, NULL, &b) ||
		    tpu_agent_register(b, m, big, TPU_XFER_READ, &r) ||
		    tpu_agent_export(r, blob, sizeof(blob), &n) ||
		    write(fds[1], blob, n) != (ssize_t)n)
			_exit(1);
		pause();
		_exit(0);
	}
	close(fds[1]);
	len = read(fds[0], blob, sizeof(blob));
	close(fds[0]);
	{
		struct tpu_agent_options o = { .backends = backend };
		struct tpu_context *c = NULL;
		struct tpu_agent *a = NULL;
		struct tpu_xfer_remote *rm = NULL;
		struct tpu_xfer_reg *r = NULL;
		struct tpu_xfer_req *req = NULL;
		uint8_t *m = malloc(big);
		struct tpu_xfer_local_elem l = { NULL, 0, big };
		struct tpu_xfer_remote_elem re = { NULL, 0, big };
		tpu_status st = 0;
		uint64_t t0 = 0;
		int i;

		tpu_context_create(NULL, &c);
		tpu_agent_create(c, &o, &a);
		tpu_agent_register(a, m, big, 0, &r);
		CHECK_STATUS(len > 0 ? tpu_agent_load(a, blob, (size_t)len, &rm) : -EIO, 0,
			     "%s: loaded the child's blob", be);
		l.reg = r;
		re.remote = rm;
		if (rm && !tpu_xfer_prepare(a, TPU_XFER_OP_READ, &l, 1, &re, 1, NULL, 0, &req)) {
			for (i = 0; i < 100000 && !st; i++) {
				if (i == 2) {
					kill(child, SIGKILL);
					t0 = now_ms();
				}
				st = tpu_xfer_post(req, NULL, NULL);
				if (!st)
					st = tpu_xfer_wait(req, 20000);
			}
			CHECK(st && st != -ETIMEDOUT && now_ms() - t0 < 5000,
			      "%s: a batch fails within 5 s of the peer's death (%s after %llu ms)",
			      be, tpu_status_name(st), (unsigned long long)(now_ms() - t0));
			tpu_xfer_release(req);
		} else {
			kill(child, SIGKILL);
		}
		waitpid(child, NULL, 0);
		tpu_agent_destroy(a);
		tpu_context_destroy(c);
		free(m);
	}
}

static void huge_pages(void)
{
	size_t len = 2U << 20;
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB,
		       -1, 0);
	struct tpu_context *c = NULL;
	struct tpu_agent *a = NULL;
	struct tpu_xfer_reg *r = NULL;

	tpu_context_create(NULL, &c);
	tpu_agent_create(c, NULL, &a);
	if (m == MAP_FAILED) {
		/* No hugetlb pages reserved here: transparent huge pages instead. */
		m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		madvise(m, len, MADV_HUGEPAGE);
	}
	CHECK_STATUS(tpu_agent_register(a, m, len, TPU_XFER_READ, &r), 0, "huge-page memory registers");
	CHECK_STATUS(tpu_agent_deregister(r), 0, "and deregisters");
	munmap(m, len);
	m = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap((uint8_t *)m + 4096, 4096);
	CHECK_STATUS(tpu_agent_register(a, m, 3 * 4096, TPU_XFER_READ, &r), -EFAULT,
		     "a range with a hole is refused");
	CHECK_STATUS(tpu_agent_register(a, m, 0, TPU_XFER_READ, &r), -EINVAL, "length 0 refused");
	CHECK_STATUS(tpu_agent_register(a, m, 4096, 4, &r), -EINVAL, "unknown access bits refused");
	munmap(m, 3 * 4096);
	tpu_agent_destroy(a);
	tpu_context_destroy(c);
}

void test_xfer(void)
{
	char why[128];
	bool cma = !tpu__cma_viable(why, sizeof(why));

	/* cma needs process_vm_readv between these processes (ptrace rules). */
	if (cma)
		run_backend(TPU_XFER_BACKEND_CMA, "cma");
	else
		tap_diag("cma cases skipped: %s", why);
	run_backend(TPU_XFER_BACKEND_TCP, "tcp");
	if (cma)
		peer_killed(TPU_XFER_BACKEND_CMA, "cma");
	peer_killed(TPU_XFER_BACKEND_TCP, "tcp");
	huge_pages();
}


/* ---- a hostile peer: a raw pipe speaking the wire (xfer_msg.c) ---- */

struct raw {
	struct tpu_context *ctx;
	struct tpu_pipe *pipe;
	atomic_int out;		/* writes not yet called back */
};

static void raw_written(void *arg, tpu_status st, struct tpu_message *msg)
{
	struct raw *w = arg;

	(void)st;
	free((void *)msg->metadata);
	free(msg->payloads);
	free(msg);
	atomic_fetch_sub(&w->out, 1);
}

static bool raw_open(struct raw *w, const char *url)
{
	memset(w, 0, sizeof(*w));
	return !tpu_context_create(NULL, &w->ctx) && !tpu_pipe_connect(w->ctx, url, &w->pipe);
}

/* Send @h with payloads @d/@l (copied pointers: the caller keeps the bytes). */
static tpu_status raw_send(struct raw *w, const struct xfer_hdr *h, const void *const *d,
			   const size_t *l, size_t n)
{
	struct tpu_message *m = calloc(1, sizeof(*m));
	struct tpu_payload *pl = calloc(n ? n : 1, sizeof(*pl));
	uint8_t *hb = malloc(XFER_HDR_LEN);
	static uint8_t empty;
	tpu_status st;
	size_t i;

	tpu__xfer_hdr_put(h, hb);
	m->metadata = hb;
	m->metadata_len = XFER_HDR_LEN;
	m->payloads = pl;
	m->npayloads = n;
	for (i = 0; i < n; i++) {
		pl[i].data = l[i] ? (void *)d[i] : &empty;
		pl[i].len = l[i];
	}
	atomic_fetch_add(&w->out, 1);
	st = tpu_pipe_write(w->pipe, m, raw_written, w);
	if (st) {
		atomic_fetch_sub(&w->out, 1);
		free(hb);
		free(pl);
		free(m);
	}
	return st;
}

static void raw_drain(struct raw *w, int ms)
{
	uint64_t t0 = now_ms();

	while (atomic_load(&w->out) && now_ms() - t0 < (uint64_t)ms)
		usleep(1000);
}

static void raw_close(struct raw *w)
{
	tpu_pipe_close(w->pipe);
	tpu_context_destroy(w->ctx);
}

/* a->nnotifs once it stopped changing for 300 ms (or 20 s went by). */
static size_t settled_notifs(struct tpu_agent *a)
{
	uint64_t t0 = now_ms(), since = now_ms();
	size_t last = (size_t)-1, n;

	for (;;) {
		pthread_mutex_lock(&a->lock);
		n = a->nnotifs;
		pthread_mutex_unlock(&a->lock);
		if (n != last) {
			last = n;
			since = now_ms();
		} else if (now_ms() - since >= 300 || now_ms() - t0 > 20000) {
			return n;
		}
		usleep(5000);
	}
}

/*
 * A peer floods notifications nobody polls: the queue holds at most
 * XFER_NOTIF_BYTES_MAX of them (65536 of 4 KiB would be 256 MiB).
 */
static void notif_flood(void)
{
	struct tpu_context *cb = NULL;
	struct tpu_agent *b = NULL;
	struct raw w;
	static uint8_t msg[TPU_XFER_NOTIF_MAX];
	size_t n = XFER_NOTIF_BYTES_MAX / TPU_XFER_NOTIF_MAX + 64, i, held, polled = 0, len;
	struct xfer_hdr hello = { .type = XFER_HELLO }, nh = { .type = XFER_NOTIF };
	const void *d[1] = { "flood" };
	size_t l[1] = { 5 };
	char peer[TPU_XFER_NAME_MAX];
	bool ok;

	ok = !tpu_context_create(NULL, &cb) && !tpu_agent_create(cb, NULL, &b) &&
	     raw_open(&w, b->url_tcp);
	CHECK(ok, "notif flood: agent and raw peer");
	if (!ok)
		goto out;
	ok = !raw_send(&w, &hello, d, l, 1);
	d[0] = msg;
	l[0] = sizeof(msg);
	for (i = 0; i < n && ok; i++) {
		memset(msg, (int)i, sizeof(msg));
		ok = !raw_send(&w, &nh, d, l, 1);
		if (atomic_load(&w.out) > 64)
			raw_drain(&w, 10000);
	}
	raw_drain(&w, 20000);
	CHECK(ok, "notif flood: %zu notifications of 4 KiB sent", n);
	held = settled_notifs(b);
	CHECK(held && (held + 1) * TPU_XFER_NOTIF_MAX <= XFER_NOTIF_BYTES_MAX + TPU_XFER_NOTIF_MAX &&
	      held < n, "notif flood: the agent queued %zu of %zu (at most %u bytes of them)", held,
	      n, XFER_NOTIF_BYTES_MAX);
	while (!tpu_agent_notif_poll(b, peer, sizeof(peer), msg, sizeof(msg), &len))
		polled++;
	CHECK(polled == held, "notif flood: all %zu polled back (%zu)", held, polled);
	raw_close(&w);
out:
	tpu_agent_destroy(b);
	tpu_context_destroy(cb);
}

/* A hostile reader: loads, asks for a READ of 16 MiB, and takes the answer only when told. */
struct reader {
	struct raw w;
	atomic_int loaded, answered, done;
	atomic_bool take;
	struct tpu_message *resp;	/* the answer's descriptor, not yet read */
	pthread_mutex_t lock;
	void *buf;
};

static void reader_desc(void *arg, tpu_status st, struct tpu_message *desc);

static void reader_read(void *arg, tpu_status st, struct tpu_message *msg)
{
	struct reader *rd = arg;

	(void)msg;
	if (!st && atomic_load(&rd->answered))
		atomic_store(&rd->done, 1);
	if (!st)
		tpu_pipe_read_descriptor(rd->w.pipe, reader_desc, rd);
}

static void reader_take(struct reader *rd)
{
	struct tpu_message *m;

	pthread_mutex_lock(&rd->lock);
	m = rd->resp;
	rd->resp = NULL;
	pthread_mutex_unlock(&rd->lock);
	if (!m)
		return;
	rd->buf = malloc(m->payloads[0].len);
	m->payloads[0].data = rd->buf;
	tpu_pipe_read(rd->w.pipe, m, reader_read, rd);
}

static void reader_desc(void *arg, tpu_status st, struct tpu_message *desc)
{
	struct reader *rd = arg;
	struct xfer_hdr h;

	if (st || tpu__xfer_hdr_get(desc->metadata, desc->metadata_len, &h))
		return;
	if (h.type == XFER_LOAD_ANS) {
		atomic_store(&rd->loaded, h.status ? -1 : 1);
		tpu_pipe_read(rd->w.pipe, desc, reader_read, rd);
		return;
	}
	atomic_store(&rd->answered, h.status ? -1 : 1);
	pthread_mutex_lock(&rd->lock);
	rd->resp = desc;
	pthread_mutex_unlock(&rd->lock);
	if (atomic_load(&rd->take))
		reader_take(rd);
}

static int count_set(struct reader *rd, int n, size_t field, int want)
{
	int i, c = 0;

	for (i = 0; i < n; i++)
		c += atomic_load((atomic_int *)((char *)&rd[i] + field)) == want;
	return c;
}

/* Wait up to @ms for @want readers to have @field at 1; how many do. */
static int wait_set(struct reader *rd, int n, size_t field, int want, int ms)
{
	uint64_t t0 = now_ms();
	int c;

	while ((c = count_set(rd, n, field, 1)) < want && now_ms() - t0 < (uint64_t)ms)
		usleep(2000);
	return c;
}

/*
 * Peers that ask for READs of 16 MiB and do not take the answers: what the
 * target holds for them is XFER_SERVE_BYTES_MAX at most (1024 such peers
 * were 16 GiB); the others wait, and are served once bytes come back.
 */
static void serve_budget(void)
{
	enum { K = 6, BIG = XFER_CHUNK_BYTES };
	struct tpu_context *cb = NULL;
	struct tpu_agent *b = NULL;
	struct tpu_xfer_reg *rb = NULL;
	uint8_t *mem = calloc(1, BIG), el[XFER_ELEM_LEN];
	struct reader *rd = calloc(K, sizeof(*rd));
	struct xfer_hdr hello = { .type = XFER_HELLO };
	int i, served, fits = (int)(XFER_SERVE_BYTES_MAX / (BIG + XFER_ELEM_LEN));
	bool ok;

	ok = mem && rd && !tpu_context_create(NULL, &cb) && !tpu_agent_create(cb, NULL, &b) &&
	     !tpu_agent_register(b, mem, BIG, TPU_XFER_READ, &rb);
	for (i = 0; i < K && ok; i++) {
		struct xfer_hdr ld = { .type = XFER_LOAD, .id = 1, .reg = rb->id, .key = rb->key };
		const void *d[1] = { "reader" };
		size_t l[1] = { 6 };

		pthread_mutex_init(&rd[i].lock, NULL);
		ok = raw_open(&rd[i].w, b->url_tcp) && !raw_send(&rd[i].w, &hello, d, l, 1);
		d[0] = b->id;
		l[0] = XFER_ID_LEN;
		ok = ok && !raw_send(&rd[i].w, &ld, d, l, 1) &&
		     !tpu_pipe_read_descriptor(rd[i].w.pipe, reader_desc, &rd[i]);
	}
	CHECK(ok && wait_set(rd, K, offsetof(struct reader, loaded), K, 10000) == K,
	      "serve budget: %d raw peers loaded a 16 MiB registration", K);
	if (!ok)
		goto out;
	tpu__xfer_put64(el, rb->id);
	tpu__xfer_put64(el + 8, 0);
	tpu__xfer_put64(el + 16, BIG);
	for (i = 0; i < K; i++) {
		struct xfer_hdr rq = { .type = XFER_REQ, .id = 1, .n = 1, .op = TPU_XFER_OP_READ,
				       .len = BIG, .flags = XFER_F_LAST };
		const void *d[3] = { el, NULL, NULL };
		size_t l[3] = { XFER_ELEM_LEN, 0, 0 };

		raw_send(&rd[i].w, &rq, d, l, 3);
	}
	served = wait_set(rd, K, offsetof(struct reader, answered), K, 3000);
	CHECK(served >= 1 && served <= fits,
	      "serve budget: %d of %d answers in service at once (at most %d fit %u bytes)",
	      served, K, fits, XFER_SERVE_BYTES_MAX);
	/* Taking the answers gives bytes back: the others are served in turn. */
	for (i = 0; i < K; i++) {
		atomic_store(&rd[i].take, true);
		reader_take(&rd[i]);
	}
	CHECK(wait_set(rd, K, offsetof(struct reader, done), K, 30000) == K,
	      "serve budget: then all %d answered", K);
	{
		uint64_t t0 = now_ms(), held;
		bool parked;

		/* The target hears its last answer went out a moment after the reader has it. */
		do {
			usleep(2000);
			pthread_mutex_lock(&b->lock);
			held = b->serve_bytes;
			parked = b->parked;
			pthread_mutex_unlock(&b->lock);
		} while ((held || parked) && now_ms() - t0 < 10000);
		CHECK(!held && !parked, "serve budget: nothing held after (%llu)",
		      (unsigned long long)held);
	}
out:
	for (i = 0; rd && i < K; i++) {
		if (rd[i].w.ctx)
			raw_close(&rd[i].w);
		free(rd[i].buf);
	}
	tpu_agent_destroy(b);
	tpu_context_destroy(cb);
	free(rd);
	free(mem);
}

/*
 * Peers that connect and go, more than XFER_PEERS_MAX of them: their slots
 * come back, so a real peer still gets in (a dead peer was kept to the end,
 * and 1024 of them locked every later one out).
 */
static void peer_churn(void)
{
	struct tpu_context *ca = NULL, *cb = NULL, *cr = NULL;
	struct tpu_agent *a = NULL, *b = NULL;
	struct tpu_xfer_reg *rb = NULL;
	struct tpu_xfer_remote *rm = NULL;
	static uint8_t mem[4096];
	struct xfer_hdr hello = { .type = XFER_HELLO };
	const void *d[1] = { "churn" };
	size_t l[1] = { 5 }, held;
	int i, sent = 0;
	bool ok;

	ok = !tpu_context_create(NULL, &ca) && !tpu_context_create(NULL, &cb) &&
	     !tpu_context_create(NULL, &cr) && !tpu_agent_create(ca, NULL, &a) &&
	     !tpu_agent_create(cb, NULL, &b) &&
	     !tpu_agent_register(b, mem, sizeof(mem), TPU_XFER_READ, &rb);
	CHECK(ok, "churn: agents");
	if (!ok)
		goto out;
	for (i = 0; i < XFER_PEERS_MAX + 16; i++) {
		struct raw w = { .ctx = cr };

		if (tpu_pipe_connect(cr, b->url_tcp, &w.pipe))
			continue;
		if (!raw_send(&w, &hello, d, l, 1)) {
			raw_drain(&w, 5000);
			sent++;
		}
		tpu_pipe_close(w.pipe);
	}
	CHECK(sent == XFER_PEERS_MAX + 16, "churn: %d raw peers said hello and went", sent);
	usleep(200000);
	CHECK_STATUS(export_load(rb, a, &rm), 0, "churn: a real peer still loads a blob");
	pthread_mutex_lock(&b->lock);
	held = b->npeers;
	pthread_mutex_unlock(&b->lock);
	/* Some that went may not be seen gone yet on a loaded machine: far fewer than all. */
	CHECK(held < XFER_PEERS_MAX / 2, "churn: the target holds %zu peers, not the ones gone",
	      held);
out:
	tpu_agent_destroy(a);
	tpu_agent_destroy(b);
	tpu_context_destroy(ca);
	tpu_context_destroy(cb);
	tpu_context_destroy(cr);
}

/* The target's in peer for a raw pipe that said hello as @name (its io then). */
static unsigned int in_io(struct tpu_agent *b, const char *name)
{
	struct xfer_peer *q;
	unsigned int io = 0;

	pthread_mutex_lock(&b->lock);
	for (q = b->peers; q; q = q->next)
		if (!q->out && !strcmp(q->name, name) && q->io > io)
			io = q->io;
	pthread_mutex_unlock(&b->lock);
	return io;
}

/*
 * A peer sends loads and never reads the answers: once its socket is full
 * the answers queue up on the target, XFER_PEER_WRITES_MAX at most (then
 * the target stops reading that peer); they were unbounded.
 */
static void unread_answers(void)
{
	struct tpu_context *cb = NULL;
	struct tpu_agent *b = NULL;
	struct tpu_xfer_reg *rb = NULL;
	static uint8_t mem[4096];
	struct xfer_hdr hello = { .type = XFER_HELLO };
	const void *d[1] = { "mute" };
	size_t l[1] = { 4 };
	unsigned int most = 0, io;
	int sent = 0;
	struct raw w;
	bool ok;

	ok = !tpu_context_create(NULL, &cb) && !tpu_agent_create(cb, NULL, &b) &&
	     !tpu_agent_register(b, mem, sizeof(mem), TPU_XFER_READ, &rb) &&
	     raw_open(&w, b->url_tcp) && !raw_send(&w, &hello, d, l, 1);
	CHECK(ok, "mute peer: agent and raw peer");
	if (!ok)
		goto out;
	d[0] = b->id;
	l[0] = XFER_ID_LEN;
	/* Until the target stops reading us, or holds far more than the bound. */
	while (sent < 400000 && most <= 4 * XFER_PEER_WRITES_MAX) {
		struct xfer_hdr ld = { .type = XFER_LOAD, .id = 1, .reg = rb->id, .key = rb->key };
		int i;

		for (i = 0; i < 512; i++, sent++)
			raw_send(&w, &ld, d, l, 1);
		raw_drain(&w, 300);
		io = in_io(b, "mute");
		most = io > most ? io : most;
		if (atomic_load(&w.out))
			break;		/* our writes no longer go: the target stopped reading */
	}
	usleep(100000);
	io = in_io(b, "mute");
	most = io > most ? io : most;
	CHECK(most <= XFER_PEER_WRITES_MAX,
	      "mute peer: %d loads sent, at most %u answers queued on the target (bound %d)", sent,
	      most, XFER_PEER_WRITES_MAX);
	raw_close(&w);
out:
	tpu_agent_destroy(b);
	tpu_context_destroy(cb);
}

/*
 * A hostile target: answers loads, and the first chunk of every READ
 * twice (never the second): the requester must not take that for the
 * whole post (it completed with success, its second chunk never written).
 */
struct fake_target {
	struct tpu_context *ctx;
	struct tpu_listener *l;
	struct tpu_pipe *pipe;
	struct raw w;		/* w.pipe is the accepted pipe */
	uint8_t *data;
	void *in[3];
};

static void ft_desc(void *arg, tpu_status st, struct tpu_message *desc);

static void ft_read(void *arg, tpu_status st, struct tpu_message *msg)
{
	struct fake_target *t = arg;
	struct xfer_hdr h;
	int i;

	if (st || tpu__xfer_hdr_get(msg->metadata, msg->metadata_len, &h))
		return;
	if (h.type == XFER_LOAD) {
		struct xfer_hdr a = { .type = XFER_LOAD_ANS, .id = h.id, .addr = 4096,
				      .len = 2 * XFER_CHUNK_BYTES, .access = TPU_XFER_READ };

		raw_send(&t->w, &a, NULL, NULL, 0);
	} else if (h.type == XFER_REQ && h.key == 0) {
		struct xfer_hdr a = { .type = XFER_RESP, .id = h.id, .key = 0, .n = h.n };
		const void *d[1] = { t->data };
		size_t l[1] = { h.len };

		raw_send(&t->w, &a, d, l, 1);
		raw_send(&t->w, &a, d, l, 1);	/* chunk 0 again, for chunk 1 */
	}
	for (i = 0; i < 3; i++) {
		free(t->in[i]);
		t->in[i] = NULL;
	}
	tpu_pipe_read_descriptor(t->w.pipe, ft_desc, t);
}

static void ft_desc(void *arg, tpu_status st, struct tpu_message *desc)
{
	struct fake_target *t = arg;
	static uint8_t empty;
	size_t i;

	if (st)
		return;
	for (i = 0; i < desc->npayloads && i < 3; i++) {
		t->in[i] = desc->payloads[i].len ? malloc(desc->payloads[i].len) : NULL;
		desc->payloads[i].data = t->in[i] ? t->in[i] : (void *)&empty;
	}
	tpu_pipe_read(t->w.pipe, desc, ft_read, t);
}

static void ft_accept(void *arg, tpu_status st, struct tpu_pipe *pipe)
{
	struct fake_target *t = arg;

	if (st)
		return;
	t->w.pipe = pipe;
	tpu_pipe_read_descriptor(pipe, ft_desc, t);
}

static void duplicate_answers(void)
{
	struct fake_target t = { 0 };
	struct tpu_context *ca = NULL;
	struct tpu_agent *a = NULL;
	struct tpu_agent_options o = { .backends = TPU_XFER_BACKEND_TCP };
	struct tpu_xfer_reg *ra = NULL;
	struct tpu_xfer_remote *rm = NULL;
	struct tpu_xfer_req *req = NULL;
	const char *urls[1] = { "tcp://127.0.0.1:0" };
	struct xfer_blob bl = { .access = TPU_XFER_READ, .reg = 1, .key = 2, .addr = 4096,
				.len = 2 * XFER_CHUNK_BYTES };
	uint8_t blob[TPU_XFER_BLOB_MAX];
	size_t len, n = XFER_CHUNK_BYTES + 4096;
	uint8_t *mem = calloc(1, n);
	tpu_status st;
	bool ok;

	t.data = malloc(XFER_CHUNK_BYTES);
	ok = mem && t.data && !tpu_context_create(NULL, &t.ctx) &&
	     !tpu_listener_create(t.ctx, urls, 1, &t.l) &&
	     !tpu_listener_url(t.l, "tcp", bl.url_tcp, sizeof(bl.url_tcp)) &&
	     !tpu_listener_accept(t.l, ft_accept, &t) && !tpu_context_create(NULL, &ca) &&
	     !tpu_agent_create(ca, &o, &a) && !tpu_agent_register(a, mem, n, 0, &ra);
	CHECK(ok, "duplicate answers: a fake target listens");
	if (!ok)
		goto out;
	memset(t.data, 0x5a, XFER_CHUNK_BYTES);
	memset(bl.agent, 0x42, sizeof(bl.agent));
	len = tpu__xfer_blob_put(&bl, blob, sizeof(blob));
	st = tpu_agent_load(a, blob, len, &rm);
	CHECK_STATUS(st, 0, "duplicate answers: its blob loads");
	if (!st) {
		struct tpu_xfer_local_elem l = { ra, 0, n };
		struct tpu_xfer_remote_elem r = { rm, 0, n };

		tpu_xfer_prepare(a, TPU_XFER_OP_READ, &l, 1, &r, 1, NULL, 0, &req);
		CHECK(req && req->nchunks == 2, "duplicate answers: a READ of two chunks");
		if (req && !tpu_xfer_post(req, NULL, NULL)) {
			st = tpu_xfer_wait(req, 20000);
			CHECK_STATUS(st, -EPROTO,
				     "duplicate answers: chunk 0 answered twice fails the READ "
				     "(its last bytes: %02x)", mem[n - 1]);
		}
		tpu_xfer_release(req);
	}
out:
	tpu_agent_destroy(a);
	tpu_context_destroy(ca);
	tpu_listener_close(t.l);
	tpu_pipe_close(t.w.pipe);
	tpu_context_destroy(t.ctx);
	free(t.data);
	free(mem);
}

void test_xfer_trust(void)
{
	notif_flood();
	serve_budget();
	peer_churn();
	unread_answers();
	duplicate_answers();
	read_only_export();
	bad_blobs();
	no_secret();
}
