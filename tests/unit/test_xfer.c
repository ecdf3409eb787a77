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
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <sys/socket.h>

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
	struct tpu_endpoint *ep;	/* kmod: made the agents' domain */
	int domain_fd;
};

/* kmod: both agents join one new module domain; false without the module. */
static bool join_domain(struct pair *p)
{
	tpu_status st = tpu_endpoint_open(NULL, &p->ep);

	if (!st)
		st = tpu_domain_create(p->ep, &p->domain_fd, NULL);
	if (!st)
		st = tpu_agent_use_domain(p->a, p->domain_fd);
	if (!st)
		st = tpu_agent_use_domain(p->b, p->domain_fd);
	if (st)
		tap_diag("kmod domain: %s", tpu_status_name(st));
	return !st;
}

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
	p->domain_fd = -1;
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
	if ((backends & TPU_XFER_BACKEND_KMOD) && !join_domain(p))
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
	if (p->domain_fd >= 0)
		close(p->domain_fd);
	tpu_endpoint_close(p->ep);
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
		/*
		 * A pause after every post: without one this loop can keep
		 * valgrind's one running thread (cma posts never block), and the
		 * test's main thread, which deregisters and stops it, starves.
		 */
		usleep(200);
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

static void status_cb(void *arg, tpu_status st, struct tpu_xfer_req *req)
{
	struct { atomic_int calls; tpu_status st; } *c = arg;

	(void)req;
	c->st = st;
	atomic_fetch_add(&c->calls, 1);
}

/*
 * A caller that frees out of order: a remote handle unloaded while a
 * request still names it, an agent destroyed with its requests (one in
 * flight) not released.  Nothing is read after it is freed (ASan,
 * valgrind), the later posts fail, and each post is called back once.
 */
static void released_out_of_order(unsigned int backend, const char *be)
{
	struct tpu_xfer_local_elem l = { NULL, 0, 4096 };
	struct tpu_xfer_remote_elem r = { NULL, 0, 4096 };
	struct { atomic_int calls; tpu_status st; } c = { 0 };
	struct tpu_xfer_req *q1 = NULL, *q2 = NULL;
	struct tpu_xfer_remote *rm2 = NULL;
	struct pair p;

	if (!pair_open(&p, backend, TPU_XFER_READ | TPU_XFER_WRITE)) {
		CHECK(0, "%s: out of order: two agents, a registration loaded", be);
		pair_close(&p);
		return;
	}
	l.reg = p.ra;
	r.remote = p.rm;
	CHECK_STATUS(tpu_xfer_prepare(p.a, TPU_XFER_OP_READ, &l, 1, &r, 1, NULL, 0, &q1), 0,
		     "%s: out of order: a request", be);
	tpu_agent_unload(p.rm);
	CHECK(tpu_xfer_post(q1, NULL, NULL) == 0 && tpu_xfer_wait(q1, 10000) == TPU_E_REVOKED,
	      "%s: a request whose remote handle was unloaded before it fails TPU_E_REVOKED", be);
	CHECK(tpu_xfer_remote_size(p.rm) == 0 && !tpu_xfer_remote_backend(p.rm)[0] &&
	      tpu_xfer_prepare(p.a, TPU_XFER_OP_READ, &l, 1, &r, 1, NULL, 0, &q2) ==
	      TPU_E_DESTROYED && !q2,
	      "%s: an unloaded handle is refused (size 0, no backend, prepare TPU_E_DESTROYED)",
	      be);
	tpu_agent_unload(p.rm);
	/* The last request naming it frees the handle (no leak, no double free). */
	tpu_xfer_release(q1);
	r.remote = NULL;
	CHECK(export_load(p.rb, p.a, &rm2) == 0, "%s: out of order: loaded again", be);
	r.remote = rm2;
	CHECK(rm2 && tpu_xfer_prepare(p.a, TPU_XFER_OP_READ, &l, 1, &r, 1, NULL, 0, &q2) == 0 &&
	      tpu_xfer_post(q2, NULL, NULL) == 0 && tpu_xfer_wait(q2, 10000) == 0,
	      "%s: out of order: the new handle moves bytes", be);
	CHECK(q2 && tpu_xfer_post(q2, status_cb, &c) == 0,
	      "%s: out of order: posted just before its agent is destroyed", be);
	tpu_agent_destroy(p.a);
	CHECK(atomic_load(&c.calls) == 1 && (c.st == 0 || c.st == TPU_E_CLOSED),
	      "%s: an agent destroyed with a request in flight, not released, calls it back once "
	      "(%d calls, %s)", be, atomic_load(&c.calls), tpu_status_name(c.st));
	CHECK_STATUS(tpu_xfer_post(q2, status_cb, &c), TPU_E_DESTROYED,
		     "%s: a request its agent's destroy released refuses posts", be);
	CHECK(atomic_load(&c.calls) == 1, "%s: ... and calls nothing back", be);
	tpu_xfer_release(q2);
	/* Its registrations and handles went with it: calls on them are refused. */
	CHECK_STATUS(tpu_agent_deregister(p.ra), TPU_E_DESTROYED,
		     "%s: a registration freed with its agent: deregister is TPU_E_DESTROYED", be);
	tpu_agent_unload(rm2);
	CHECK(tpu_xfer_remote_size(rm2) == 0,
	      "%s: a remote handle freed with its agent: unload ignored, size 0", be);
	pair_close(&p);
}

/*
 * The context destroyed before its agent (with a registration loaded by
 * a peer and a request prepared): the agent's pipes close with it, and
 * deregistering, releasing and destroying it afterwards return (they had
 * waited for the context's thread for ever).
 */
static void context_first(unsigned int backend, const char *be)
{
	struct tpu_xfer_local_elem l = { NULL, 0, 4096 };
	struct tpu_xfer_remote_elem r = { NULL, 0, 4096 };
	struct tpu_xfer_reg *own = NULL;
	struct tpu_xfer_req *q = NULL;
	struct pair p;
	tpu_status st;

	if (!pair_open(&p, backend, TPU_XFER_READ | TPU_XFER_WRITE)) {
		CHECK(0, "%s: context first: two agents, a registration loaded", be);
		pair_close(&p);
		return;
	}
	l.reg = p.ra;
	r.remote = p.rm;
	CHECK(tpu_xfer_prepare(p.a, TPU_XFER_OP_READ, &l, 1, &r, 1, NULL, 0, &q) == 0 &&
	      tpu_agent_register(p.a, p.mem_a + 8192, 4096, TPU_XFER_READ, &own) == 0,
	      "%s: context first: a request and a registration", be);
	tpu_context_destroy(p.ca);
	st = q ? tpu_xfer_post(q, NULL, NULL) : -EINVAL;
	if (!st)
		st = tpu_xfer_wait(q, 10000);
	CHECK(st && st != -ETIMEDOUT,
	      "%s: an agent whose context is destroyed first moves nothing (%s)", be,
	      tpu_status_name(st));
	CHECK_STATUS(tpu_agent_deregister(own), 0,
		     "%s: ... deregisters without its context", be);
	CHECK_STATUS(tpu_agent_deregister(own), TPU_E_DESTROYED,
		     "%s: a registration deregistered twice: TPU_E_DESTROYED", be);
	tpu_xfer_release(q);
	tpu_agent_destroy(p.a);
	CHECK(!tpu_agent_name(p.a)[0], "%s: ... and is destroyed (a later call finds it gone)",
	      be);
	pair_close(&p);
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
	released_out_of_order(backend, be);
	context_first(backend, be);
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

/*
 * The target process dies during a batch: the requester fails within a
 * bound.  kmod: both agents join the domain behind @domain_fd (else -1).
 */
static void peer_killed_in(unsigned int backend, const char *be, int domain_fd)
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
		    (domain_fd >= 0 && tpu_agent_use_domain(b, domain_fd)) ||
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
		if (domain_fd >= 0)
			CHECK_STATUS(tpu_agent_use_domain(a, domain_fd), 0, "%s: joined the domain", be);
		tpu_agent_register(a, m, big, 0, &r);
		CHECK_STATUS(len > 0 ? tpu_agent_load(a, blob, (size_t)len, &rm) : -EIO, 0,
			     "%s: loaded the child's blob", be);
		CHECK(rm && !strcmp(tpu_xfer_remote_backend(rm), be), "%s: the pair uses %s",
		      be, rm ? tpu_xfer_remote_backend(rm) : "-");
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

static void peer_killed(unsigned int backend, const char *be)
{
	peer_killed_in(backend, be, -1);
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

/* Post a one-pair request @op of @len bytes; its status. */
static tpu_status one_pair(struct tpu_agent *a, enum tpu_xfer_op op, struct tpu_xfer_reg *l,
			   uint64_t loff, struct tpu_xfer_remote *rm, uint64_t roff, uint64_t len)
{
	struct tpu_xfer_local_elem le = { l, loff, len };
	struct tpu_xfer_remote_elem re = { rm, roff, len };
	struct tpu_xfer_req *req = NULL;
	tpu_status st = tpu_xfer_prepare(a, op, &le, 1, &re, 1, NULL, 0, &req);

	if (!st)
		st = tpu_xfer_post(req, NULL, NULL);
	if (!st)
		st = tpu_xfer_wait(req, 10000);
	tpu_xfer_release(req);
	return st;
}

/*
 * A module region of the application's own endpoint, registered as is:
 * kmod loaders are granted that region (no second pin), others reach its
 * mapping; deregistration ends the grants and leaves the region the
 * application's; and every refusal.
 */
static void module_region(void)
{
	const uint64_t off = 4096, len = 65536;
	struct tpu_endpoint *other = NULL;
	struct tpu_agent *outside = NULL;
	struct tpu_xfer_reg *r = NULL, *bad = NULL;
	struct tpu_xfer_remote *rm = NULL, *rm2 = NULL;
	struct tpu_xfer_req *req = NULL;
	struct tpu_xfer_local_elem le;
	struct tpu_xfer_remote_elem re;
	uint32_t h = 0, h2 = 0, h3 = 0;
	uint8_t *m = NULL, *ro = aligned_alloc(4096, 4096);
	struct pair p;
	size_t i;
	bool ok;

	if (!pair_open(&p, TPU_XFER_BACKEND_KMOD, TPU_XFER_READ) ||
	    tpu_domain_attach(p.ep, p.domain_fd, NULL) ||
	    tpu_region_alloc_mapped(p.ep, REG, TPU_MAP_POPULATE, &h, (void **)&m)) {
		CHECK(0, "module region: a region of an endpoint in the agents' domain");
		goto out;
	}
	for (i = 0; i < REG; i++)
		m[i] = (uint8_t)(i * 13 + 5);
	CHECK_STATUS(tpu_agent_register_region(p.b, p.ep, h, off, len, m + off,
					       TPU_XFER_READ | TPU_XFER_WRITE, &r), 0,
		     "module region: registers");
	if (!r)
		goto out;
	CHECK_STATUS(export_load(r, p.a, &rm), 0, "module region: A loads its blob");
	CHECK(rm && !strcmp(tpu_xfer_remote_backend(rm), "kmod"), "module region: through kmod (%s)",
	      rm ? tpu_xfer_remote_backend(rm) : "-");
	CHECK(!r->kmod_pinned && r->nkmod_grants == 1,
	      "module region: granted through the application's endpoint, not pinned again");
	memset(p.mem_a, 0, REG);
	CHECK_STATUS(one_pair(p.a, TPU_XFER_OP_READ, p.ra, 0, rm, 0, len), 0, "module region: read");
	CHECK(!memcmp(p.mem_a, m + off, len), "module region: the region's bytes arrived");
	memset(p.mem_a, 0xa5, 100);
	CHECK_STATUS(one_pair(p.a, TPU_XFER_OP_WRITE, p.ra, 0, rm, len - 100, 100), 0,
		     "module region: write ending at its end");
	for (i = 0, ok = true; i < 100; i++)
		ok = ok && m[off + len - 100 + i] == 0xa5;
	CHECK(ok && m[off + len] == (uint8_t)((off + len) * 13 + 5),
	      "module region: landed in the region, nothing past it");
	CHECK(one_pair(p.a, TPU_XFER_OP_READ, p.ra, 0, rm, len - 100, 101) != 0,
	      "module region: one byte past refused");

	/* An agent outside the domain reaches the mapping (cma or tcp). */
	if (!tpu_agent_create(p.ca, NULL, &outside) && !export_load(r, outside, &rm2)) {
		struct tpu_xfer_reg *lr = NULL;

		memset(p.mem_a + len, 0, len);
		tpu_agent_register(outside, p.mem_a + len, len, 0, &lr);
		CHECK(strcmp(tpu_xfer_remote_backend(rm2), "kmod") &&
		      !one_pair(outside, TPU_XFER_OP_READ, lr, 0, rm2, 0, len) &&
		      !memcmp(p.mem_a + len, m + off, len - 100),
		      "module region: an agent outside the domain reads its mapping (%s)",
		      tpu_xfer_remote_backend(rm2));
	} else {
		CHECK(0, "module region: loaded outside the domain");
	}

	le = (struct tpu_xfer_local_elem){ p.ra, 0, 4096 };
	re = (struct tpu_xfer_remote_elem){ rm, 0, 4096 };
	tpu_xfer_prepare(p.a, TPU_XFER_OP_READ, &le, 1, &re, 1, NULL, 0, &req);
	CHECK_STATUS(tpu_agent_deregister(r), 0, "module region: deregisters");
	CHECK(req && (tpu_xfer_post(req, NULL, NULL) ? 1 : tpu_xfer_wait(req, 10000)) == TPU_E_REVOKED,
	      "module region: a post after deregistration fails revoked");
	/* The kernel ended the grant, whatever the library tracks. */
	{
		struct tp_copy_elem e = { .addr = (uintptr_t)p.mem_a, .len = 1,
					  .grant = rm->grant, .flags = TP_COPY_READ };
		struct tp_copy c = { .elems = (uintptr_t)&e, .nr_elems = 1 };

		CHECK(ioctl(p.a->kmod_fd, TP_IOC_COPY, &c) < 0 && errno == ENOENT,
		      "module region: its grant is gone in the module");
	}
	tpu_xfer_release(req);

	/* Refusals. */
	CHECK_STATUS(tpu_agent_register_region(p.b, p.ep, h + 1000, 0, 4096, m, TPU_XFER_READ, &bad),
		     -ENOENT, "module region: no such handle");
	CHECK_STATUS(tpu_agent_register_region(p.b, p.ep, h, REG - 4096, 4097, m + REG - 4096,
					       TPU_XFER_READ, &bad), -ERANGE,
		     "module region: past its end");
	CHECK_STATUS(tpu_agent_register_region(p.b, p.ep, h, 0, 4096, NULL, TPU_XFER_READ, &bad),
		     -EINVAL, "module region: no mapping");
	CHECK_STATUS(tpu_agent_register_region(p.b, NULL, h, 0, 4096, m, TPU_XFER_READ, &bad),
		     -EINVAL, "module region: no endpoint");
	CHECK_STATUS(tpu_agent_register_region(p.b, p.ep, h, 0, 4096, m, 4, &bad), -EINVAL,
		     "module region: unknown access");
	CHECK_STATUS(tpu_agent_register_region(outside, p.ep, h, 0, 4096, m, TPU_XFER_READ, &bad),
		     -EXDEV, "module region: an agent without a domain");
	if (!tpu_endpoint_open(NULL, &other) && !tpu_region_register(other, ro, 4096, TPU_ACCESS_READ, &h2))
		CHECK_STATUS(tpu_agent_register_region(p.b, other, h2, 0, 4096, ro, TPU_XFER_READ, &bad),
			     -EXDEV, "module region: an endpoint outside the agent's domain");
	else
		CHECK(0, "module region: a second endpoint");
	if (!tpu_region_register(p.ep, ro, 4096, TPU_ACCESS_READ, &h3)) {
		CHECK_STATUS(tpu_agent_register_region(p.b, p.ep, h3, 0, 4096, ro, TPU_XFER_WRITE, &bad),
			     -EACCES, "module region: access the region lacks");
		tpu_region_release(p.ep, h3);
	}
	CHECK_STATUS(tpu_region_release(p.ep, h), 0, "module region: still the application's");
	h = 0;
out:
	tpu_agent_destroy(outside);
	if (m)
		tpu_region_munmap(m, REG);
	if (h)
		tpu_region_release(p.ep, h);
	pair_close(&p);
	tpu_endpoint_close(other);
	free(ro);
}

/* What the other user's child saw (two_users). */
struct two_users_result {
	int joined, kmod_load, kmod_read, kmod_write, cma_load, cma_read;
	char kmod_be[8], cma_be[8];
	int read_ok, cma_untouched;
};

/* The child, now user nobody: kmod reaches the export, cma is refused. */
static void two_users_child(int domain_fd, const uint8_t *blob, size_t len,
			    struct two_users_result *res)
{
	struct tpu_agent_options ko = { .name = "K", .backends = TPU_XFER_BACKEND_KMOD };
	struct tpu_agent_options co = { .name = "C", .backends = TPU_XFER_BACKEND_CMA };
	struct tpu_context *c = NULL;
	struct tpu_agent *ka = NULL, *ca = NULL;
	struct tpu_xfer_reg *lr = NULL, *cr = NULL;
	struct tpu_xfer_remote *rm = NULL;
	struct tpu_xfer_req *req = NULL;
	uint8_t *m = calloc(1, 3 * 4096);
	struct tpu_xfer_local_elem l = { NULL, 0, 4096 };
	struct tpu_xfer_remote_elem re = { NULL, 0, 4096 };
	size_t i;

	res->joined = tpu_context_create(NULL, &c);
	if (!res->joined)
		res->joined = tpu_agent_create(c, &ko, &ka);
	if (!res->joined)
		res->joined = tpu_agent_create(c, &co, &ca);
	if (!res->joined)
		res->joined = tpu_agent_use_domain(ka, domain_fd);
	if (res->joined || tpu_agent_register(ka, m, 2 * 4096, 0, &lr) ||
	    tpu_agent_register(ca, m + 2 * 4096, 4096, 0, &cr))
		return;
	res->kmod_load = tpu_agent_load(ka, blob, len, &rm);
	if (!res->kmod_load) {
		snprintf(res->kmod_be, sizeof(res->kmod_be), "%s", tpu_xfer_remote_backend(rm));
		l.reg = lr;
		re.remote = rm;
		res->kmod_read = tpu_xfer_prepare(ka, TPU_XFER_OP_READ, &l, 1, &re, 1, NULL, 0, &req);
		if (!res->kmod_read && !(res->kmod_read = tpu_xfer_post(req, NULL, NULL)))
			res->kmod_read = tpu_xfer_wait(req, 10000);
		tpu_xfer_release(req);
		req = NULL;
		for (i = 0, res->read_ok = 1; i < 4096; i++)
			res->read_ok &= m[i] == (uint8_t)(i * 7 + 1);
		/* Our word goes back into the parent's memory at 8 KiB. */
		memset(m + 4096, 0x5a, 4096);
		l.offset = 4096;
		re.offset = 8192;
		res->kmod_write = tpu_xfer_prepare(ka, TPU_XFER_OP_WRITE, &l, 1, &re, 1, NULL, 0, &req);
		if (!res->kmod_write && !(res->kmod_write = tpu_xfer_post(req, NULL, NULL)))
			res->kmod_write = tpu_xfer_wait(req, 10000);
		tpu_xfer_release(req);
		req = NULL;
	}
	res->cma_load = tpu_agent_load(ca, blob, len, &rm);
	if (!res->cma_load) {
		snprintf(res->cma_be, sizeof(res->cma_be), "%s", tpu_xfer_remote_backend(rm));
		l.reg = cr;
		l.offset = 0;
		re.remote = rm;
		re.offset = 0;
		res->cma_read = tpu_xfer_prepare(ca, TPU_XFER_OP_READ, &l, 1, &re, 1, NULL, 0, &req);
		if (!res->cma_read && !(res->cma_read = tpu_xfer_post(req, NULL, NULL)))
			res->cma_read = tpu_xfer_wait(req, 10000);
		tpu_xfer_release(req);
		for (i = 0, res->cma_untouched = 1; i < 4096; i++)
			res->cma_untouched &= m[2 * 4096 + i] == 0;
	}
	tpu_agent_destroy(ka);
	tpu_agent_destroy(ca);
	tpu_context_destroy(c);
}

/*
 * Two users that must not see each other's memory: a child that dropped
 * to user nobody, holding the domain's descriptor, reads and writes the
 * export through the module, while cma between the two is refused by the
 * kernel (no ptrace right over another user's process).
 */
static void two_users(void)
{
	struct tpu_endpoint *ep = NULL;
	struct tpu_context *c = NULL;
	struct tpu_agent *a = NULL;
	struct tpu_xfer_reg *r = NULL;
	struct two_users_result res;
	uint8_t blob[TPU_XFER_BLOB_MAX];
	uint8_t *m = mmap(NULL, 4 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int domain_fd = -1, fds[2] = { -1, -1 };
	size_t len = 0, i;
	pid_t child;
	bool ok;

	if (getuid() != 0) {
		tap_diag("two users skipped: not root, cannot become nobody");
		munmap(m, 4 * 4096);
		return;
	}
	memset(&res, 0, sizeof(res));
	for (i = 0; i < 4 * 4096; i++)
		m[i] = (uint8_t)(i * 7 + 1);
	ok = !tpu_endpoint_open(NULL, &ep) && !tpu_domain_create(ep, &domain_fd, NULL) &&
	     !tpu_context_create(NULL, &c) && !tpu_agent_create(c, NULL, &a) &&
	     !tpu_agent_use_domain(a, domain_fd) &&
	     !tpu_agent_register(a, m, 4 * 4096, TPU_XFER_READ | TPU_XFER_WRITE, &r) &&
	     !tpu_agent_export(r, blob, sizeof(blob), &len) && !pipe(fds);
	CHECK(ok, "two users: the parent's export through its domain");
	if (!ok)
		goto out;
	child = fork();
	if (child == 0) {
		close(fds[0]);
		if (setgroups(0, NULL) || setgid(65534) || setuid(65534))
			res.joined = -EPERM;
		else
			two_users_child(domain_fd, blob, len, &res);
		if (write(fds[1], &res, sizeof(res)) != (ssize_t)sizeof(res))
			_exit(2);
		_exit(0);
	}
	close(fds[1]);
	fds[1] = -1;
	ok = read(fds[0], &res, sizeof(res)) == (ssize_t)sizeof(res);
	waitpid(child, NULL, 0);
	CHECK(ok && !res.joined, "two users: nobody joins the domain (%s)", tpu_status_name(res.joined));
	CHECK(ok && !res.kmod_load && !strcmp(res.kmod_be, "kmod"),
	      "two users: nobody loads root's export through kmod (%s, %s)",
	      tpu_status_name(res.kmod_load), res.kmod_be);
	CHECK(ok && !res.kmod_read && res.read_ok, "two users: and reads it (%s)",
	      tpu_status_name(res.kmod_read));
	for (i = 0, ok = ok && !res.kmod_write; ok && i < 4096; i++)
		ok = m[8192 + i] == 0x5a;
	CHECK(ok, "two users: and writes it (%s)", tpu_status_name(res.kmod_write));
	CHECK(!res.cma_load && !strcmp(res.cma_be, "cma") && res.cma_read == -EPERM &&
	      res.cma_untouched,
	      "two users: cma between them is refused by the kernel (load %s on %s, read %s)",
	      tpu_status_name(res.cma_load), res.cma_be, tpu_status_name(res.cma_read));
out:
	if (fds[0] >= 0)
		close(fds[0]);
	if (fds[1] >= 0)
		close(fds[1]);
	tpu_agent_destroy(a);
	tpu_context_destroy(c);
	if (domain_fd >= 0)
		close(domain_fd);
	tpu_endpoint_close(ep);
	munmap(m, 4 * 4096);
}

/*
 * kmod (needs the module, so run in the VM): the same cases through the
 * module's grants; an agent outside the domain falls back to cma or tcp;
 * a grant is usable by the loader's endpoint only, and deregistration
 * ends it in the kernel before the loader acknowledges anything.
 */
void test_xfer_kmod(void)
{
	struct tpu_endpoint *probe = NULL;
	struct pair p;

	if (tpu_endpoint_open(NULL, &probe)) {
		tap_diag("xfer_kmod skipped: no /dev/tensorpipe");
		CHECK(1, "xfer_kmod: nothing to test without the module");
		return;
	}
	tpu_endpoint_close(probe);
	run_backend(TPU_XFER_BACKEND_KMOD, "kmod");
	memset(&p, 0, sizeof(p));
	if (!tpu_endpoint_open(NULL, &p.ep) && !tpu_domain_create(p.ep, &p.domain_fd, NULL)) {
		peer_killed_in(TPU_XFER_BACKEND_KMOD, "kmod", p.domain_fd);
		close(p.domain_fd);
	} else {
		CHECK(0, "kmod: a domain for the killed peer");
	}
	tpu_endpoint_close(p.ep);
	two_users();
	module_region();

	/* B outside the domain: no grant, so cma or tcp carries the requests. */
	if (pair_open(&p, 0, TPU_XFER_READ)) {
		CHECK(strcmp(tpu_xfer_remote_backend(p.rm), "kmod") != 0,
		      "kmod: agents without a domain fall back (%s)", tpu_xfer_remote_backend(p.rm));
	} else {
		CHECK(0, "kmod: fallback pair opened");
	}
	pair_close(&p);

	/* Only A's domain: B has none, so A cannot use the module either. */
	memset(&p, 0, sizeof(p));
	p.domain_fd = -1;
	p.mem_a = malloc(REG);
	p.mem_b = malloc(REG);
	if (!tpu_context_create(NULL, &p.ca) && !tpu_context_create(NULL, &p.cb) &&
	    !tpu_agent_create(p.ca, NULL, &p.a) && !tpu_agent_create(p.cb, NULL, &p.b) &&
	    !tpu_endpoint_open(NULL, &p.ep) && !tpu_domain_create(p.ep, &p.domain_fd, NULL)) {
		CHECK_STATUS(tpu_agent_use_domain(p.a, p.domain_fd), 0, "kmod: A joins the domain");
		CHECK_STATUS(tpu_agent_use_domain(p.a, p.domain_fd), -EBUSY, "kmod: only once");
		CHECK_STATUS(tpu_agent_use_domain(p.b, -1), -EBADF, "kmod: no descriptor");
		CHECK_STATUS(tpu_agent_use_domain(p.b, p.ep->fd), -EINVAL, "kmod: an endpoint is no domain");
		tpu_agent_register(p.b, p.mem_b, REG, TPU_XFER_READ, &p.rb);
		CHECK_STATUS(export_load(p.rb, p.a, &p.rm), 0, "kmod: A loads B's blob");
		CHECK(p.rm && strcmp(tpu_xfer_remote_backend(p.rm), "kmod") != 0,
		      "kmod: B without the module: %s", p.rm ? tpu_xfer_remote_backend(p.rm) : "-");
	} else {
		CHECK(0, "kmod: one-sided domain pair opened");
	}
	pair_close(&p);
}

void test_xfer_trust(void)
{
	test_xfer_hostile();
	read_only_export();
	bad_blobs();
	no_secret();
}

/* ---- rdma (in the VM: tests/vm/rdma-single.sh, both agents on one rxe device) ---- */

static bool rdma_device(void)
{
	int n = 0;
	struct ibv_device **d = ibv_get_device_list(&n);

	if (d)
		ibv_free_device_list(d);
	return d && n > 0;
}

/* Large posts stripe over the queue pairs; the notification follows every stripe. */
static void rdma_striped(struct pair *p)
{
	enum { N = 64, B = 16384 };
	struct tpu_xfer_local_elem l[N];
	struct tpu_xfer_remote_elem r[N];
	struct tpu_xfer_req *w = NULL, *rd = NULL;
	char peer[TPU_XFER_NAME_MAX];
	int i, k, ok = 1, notes = 0, msg = 0;
	size_t len;
	uint64_t t0;

	/* Local piece i goes to remote piece N-1-i: the order matters. */
	for (i = 0; i < N; i++) {
		l[i] = (struct tpu_xfer_local_elem){ p->ra, (uint64_t)i * B, B };
		r[i] = (struct tpu_xfer_remote_elem){ p->rm, (uint64_t)(N - 1 - i) * B, B };
	}
	CHECK_STATUS(tpu_xfer_prepare(p->a, TPU_XFER_OP_WRITE, l, N, r, N, &msg, sizeof(msg), &w), 0,
		     "rdma: 64 x 16 KiB WRITE with a notification prepared");
	for (i = 0; i < N; i++)
		l[i].offset = (uint64_t)(N - 1 - i) * B;	/* read back reversed again */
	CHECK_STATUS(tpu_xfer_prepare(p->a, TPU_XFER_OP_READ, l, N, r, N, NULL, 0, &rd), 0,
		     "rdma: and the READ back");
	if (!w || !rd)
		goto out;
	for (k = 0; k < 20 && ok; k++) {
		fill(p->mem_a, REG, 100 + k);
		memset(p->mem_b, 0, REG);
		ok = !tpu_xfer_post(w, NULL, NULL) && !tpu_xfer_wait(w, 10000);
		for (i = 0; ok && i < N; i++)
			ok = !memcmp(p->mem_b + (size_t)(N - 1 - i) * B, p->mem_a + (size_t)i * B, B);
		/* The notification came after all of it. */
		t0 = now_ms();
		while (ok && tpu_agent_notif_poll(p->b, peer, sizeof(peer), &msg, sizeof(msg), &len) ==
				     -EAGAIN && now_ms() - t0 < 10000)
			usleep(500);
		notes += ok && len == sizeof(msg);
		memset(p->mem_a, 0, REG);
		ok = ok && !tpu_xfer_post(rd, NULL, NULL) && !tpu_xfer_wait(rd, 10000);
		for (i = 0; ok && i < N; i++)
			ok = !memcmp(p->mem_a + (size_t)(N - 1 - i) * B, p->mem_b + (size_t)(N - 1 - i) * B, B);
	}
	CHECK(ok && notes == 20, "rdma: 20 striped WRITEs and READs as the reference, 20 notifications (%d)",
	      notes);
out:
	tpu_xfer_release(w);
	tpu_xfer_release(rd);
}

/*
 * A requester that lies about the bounds: the MR the target registered for
 * this peer refuses (the hardware check), nothing lands, and the link is
 * spent: a later load connects anew.
 */
static void rdma_mr_enforces(void)
{
	struct pair p;
	struct tpu_xfer_local_elem l = { NULL, 0, 32 };
	struct tpu_xfer_remote_elem r = { NULL, REG - 16, 32 };
	struct tpu_xfer_req *req = NULL;
	tpu_status st;

	if (!pair_open(&p, TPU_XFER_BACKEND_RDMA, TPU_XFER_READ | TPU_XFER_WRITE)) {
		CHECK(0, "rdma: agents for the MR case");
		pair_close(&p);
		return;
	}
	l.reg = p.ra;
	r.remote = p.rm;
	fill(p.mem_a, REG, 5);
	memset(p.mem_b, 0x5a, REG);
	CHECK_STATUS(tpu_xfer_prepare(p.a, TPU_XFER_OP_WRITE, &l, 1, &r, 1, NULL, 0, &req), -EINVAL,
		     "rdma: an element 16 bytes past the export is refused at preparation");
	p.rm->len = REG + 4096;		/* as if the load had answered more */
	CHECK_STATUS(tpu_xfer_prepare(p.a, TPU_XFER_OP_WRITE, &l, 1, &r, 1, NULL, 0, &req), 0,
		     "rdma: a lying requester prepares it");
	if (req) {
		tpu_xfer_post(req, NULL, NULL);
		st = tpu_xfer_wait(req, 10000);
		CHECK_STATUS(st, TPU_E_REVOKED, "rdma: the target's MR refuses it");
		CHECK(p.mem_b[REG - 16] == 0x5a && p.mem_b[REG - 1] == 0x5a,
		      "rdma: nothing landed at the end of the registration");
		CHECK_STATUS(tpu_xfer_post(req, NULL, NULL) ?: tpu_xfer_wait(req, 10000),
			     TPU_E_REVOKED, "rdma: the spent link fails later posts");
		tpu_xfer_release(req);
	}
	p.rm->len = REG;
	{
		struct tpu_xfer_remote *rm2 = NULL;
		struct tpu_xfer_local_elem l2 = { p.ra, 0, 64 };
		struct tpu_xfer_remote_elem r2 = { NULL, 0, 64 };

		CHECK_STATUS(export_load(p.rb, p.a, &rm2), 0, "rdma: loaded again, a new link");
		r2.remote = rm2;
		req = NULL;
		st = rm2 ? tpu_xfer_prepare(p.a, TPU_XFER_OP_WRITE, &l2, 1, &r2, 1, NULL, 0, &req) :
			   -EINVAL;
		if (!st) {
			tpu_xfer_post(req, NULL, NULL);
			st = tpu_xfer_wait(req, 10000);
		}
		CHECK_STATUS(st, 0, "rdma: which moves bytes");
		CHECK(!memcmp(p.mem_b, p.mem_a, 64), "rdma: as the reference");
		CHECK(rm2 && !strcmp(tpu_xfer_remote_backend(rm2), "rdma"), "rdma: on rdma");
		tpu_xfer_release(req);
	}
	pair_close(&p);
}

/*
 * Deregistration kills the rkey itself: a requester that ignores the
 * revocation (clears its handle's flag and posts the request it had
 * prepared) reaches nothing; the MR refuses.
 */
static void rdma_revoke_hw(void)
{
	struct pair p;
	struct tpu_xfer_local_elem l = { NULL, 0, 64 };
	struct tpu_xfer_remote_elem r = { NULL, 0, 64 };
	struct tpu_xfer_req *req = NULL;
	tpu_status st;
	int i;

	if (!pair_open(&p, TPU_XFER_BACKEND_RDMA, TPU_XFER_READ | TPU_XFER_WRITE)) {
		CHECK(0, "rdma: agents for the revocation case");
		pair_close(&p);
		return;
	}
	l.reg = p.ra;
	r.remote = p.rm;
	memset(p.mem_a, 0xee, 64);
	st = tpu_xfer_prepare(p.a, TPU_XFER_OP_WRITE, &l, 1, &r, 1, NULL, 0, &req);
	if (!st)
		st = tpu_xfer_post(req, NULL, NULL) ?: tpu_xfer_wait(req, 10000);
	CHECK_STATUS(st, 0, "rdma: a WRITE lands before the deregistration");
	CHECK_STATUS(tpu_agent_deregister(p.rb), 0, "rdma: deregistered");
	p.rb = NULL;
	memset(p.mem_b, 0x11, 64);
	atomic_store(&p.rm->revoked, false);	/* a requester that ignores it */
	st = req ? tpu_xfer_post(req, NULL, NULL) ?: tpu_xfer_wait(req, 10000) : -EINVAL;
	CHECK_STATUS(st, TPU_E_REVOKED, "rdma: its rkey is dead: the MR refuses the next post");
	for (i = 0; i < 64 && p.mem_b[i] == 0x11; i++)
		;
	CHECK(i == 64, "rdma: nothing landed after deregistration returned");
	tpu_xfer_release(req);
	pair_close(&p);
}

/* Without a device: rdma alone cannot load; with tcp allowed too, tcp carries it. */
static void rdma_absent(void)
{
	struct pair p;
	bool ok;

	ok = pair_open(&p, TPU_XFER_BACKEND_RDMA | TPU_XFER_BACKEND_TCP, TPU_XFER_READ);
	CHECK(ok && !strcmp(tpu_xfer_remote_backend(p.rm), "tcp"),
	      "no rdma device: rdma|tcp falls back to tcp (%s)", ok ? tpu_xfer_remote_backend(p.rm) : "");
	pair_close(&p);
	ok = pair_open(&p, TPU_XFER_BACKEND_RDMA, TPU_XFER_READ);
	CHECK(!ok && !p.rm, "no rdma device: rdma alone does not load");
	pair_close(&p);
}

void test_xfer_rdma(void)
{
	struct pair p;

	if (!rdma_device()) {
		tap_diag("no RDMA device here: the rdma cases run in the VM (tests/vm/rdma-single.sh)");
		rdma_absent();
		return;
	}
	run_backend(TPU_XFER_BACKEND_RDMA, "rdma");
	if (pair_open(&p, TPU_XFER_BACKEND_RDMA, TPU_XFER_READ | TPU_XFER_WRITE))
		rdma_striped(&p);
	else
		CHECK(0, "rdma: agents for the striped case");
	pair_close(&p);
	rdma_mr_enforces();
	rdma_revoke_hw();
	peer_killed(TPU_XFER_BACKEND_RDMA, "rdma");
}

/* ---- across two hosts (tests/vm/pair-xfer.sh): rdma between the VMs ---- */

#define PAIR_MEM	(4U << 20)
#define PAIR_NOTES	10

/* "ADDR:PORT" into a TCP socket address; listen or connect. */
static int pair_socket(const char *hostport, bool listen_on)
{
	char host[64];
	const char *c = strrchr(hostport, ':');
	struct sockaddr_in sa = { .sin_family = AF_INET };
	int fd, one = 1;

	if (!c || (size_t)(c - hostport) >= sizeof(host))
		return -1;
	memcpy(host, hostport, (size_t)(c - hostport));
	host[c - hostport] = 0;
	sa.sin_port = htons((uint16_t)atoi(c + 1));
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
		return -1;
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (listen_on) {
		int s;

		if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 1)) {
			close(fd);
			return -1;
		}
		s = accept(fd, NULL, NULL);
		close(fd);
		return s;
	}
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		close(fd);
		return -1;
	}
	return fd;
}

/* TPU_TEST_TIME_SCALE (the debug kernel's VM pair sets 4): 1 to 100. */
static int pair_time_scale(void)
{
	const char *v = getenv("TPU_TEST_TIME_SCALE");
	int k = v ? atoi(v) : 1;

	return k >= 1 && k <= 100 ? k : 1;
}

/*
 * The target (VM a): a registration of PAIR_MEM bytes, its blob to the one
 * requester over a plain socket; once that closes, the second half must be
 * what the requester wrote, and PAIR_NOTES notifications must have come.
 */
int xfer_pair_target(const char *hostport)
{
	uint8_t blob[TPU_XFER_BLOB_MAX], *m = malloc(PAIR_MEM), *want = malloc(PAIR_MEM), c;
	struct tpu_context *ctx = NULL;
	struct tpu_agent *a = NULL;
	struct tpu_xfer_reg *r = NULL;
	char peer[TPU_XFER_NAME_MAX];
	int fd, notes = 0, v;
	size_t len, n;
	uint64_t t0;

	fill(m, PAIR_MEM, 7);
	fill(want + PAIR_MEM / 2, PAIR_MEM / 2, 8);
	if (tpu_context_create(NULL, &ctx) || tpu_agent_create(ctx, NULL, &a) ||
	    tpu_agent_register(a, m, PAIR_MEM, TPU_XFER_READ | TPU_XFER_WRITE, &r) ||
	    tpu_agent_export(r, blob, sizeof(blob), &len)) {
		fprintf(stderr, "xfer target: no agent\n");
		return 1;
	}
	fd = pair_socket(hostport, true);
	n = len;
	if (fd < 0 || write(fd, &n, sizeof(n)) != sizeof(n) || write(fd, blob, len) != (ssize_t)len) {
		fprintf(stderr, "xfer target: no requester\n");
		return 1;
	}
	while (read(fd, &c, 1) > 0)
		;
	close(fd);
	t0 = now_ms();
	while (notes < PAIR_NOTES && now_ms() - t0 < 10000u * (uint64_t)pair_time_scale()) {
		if (tpu_agent_notif_poll(a, peer, sizeof(peer), &v, sizeof(v), &n))
			usleep(1000);
		else
			notes += v == notes;
	}
	v = memcmp(m + PAIR_MEM / 2, want + PAIR_MEM / 2, PAIR_MEM / 2) || notes != PAIR_NOTES;
	fprintf(stderr, "xfer target: %d notifications, second half %s\n", notes,
		memcmp(m + PAIR_MEM / 2, want + PAIR_MEM / 2, PAIR_MEM / 2) ? "wrong" : "as written");
	tpu_agent_destroy(a);
	tpu_context_destroy(ctx);
	free(m);
	free(want);
	return v;
}

/* The requester (VM b): READ random lists of the first half, WRITE the second, striped. */
int xfer_pair_requester(const char *hostport)
{
	struct tpu_agent_options o = { .name = "B", .backends = TPU_XFER_BACKEND_RDMA };
	uint8_t blob[TPU_XFER_BLOB_MAX], *m = malloc(PAIR_MEM), *ref = malloc(PAIR_MEM);
	struct tpu_xfer_local_elem *l = calloc(10000, sizeof(*l));
	struct tpu_xfer_remote_elem *re = calloc(10000, sizeof(*re));
	struct tpu_xfer_req *req = NULL;
	struct pair p = { 0 };
	size_t len = 0, i;
	int fd = -1, tries, k, ok;
	/*
	 * Under TCG (a debug kernel's rxe above all, on a shared host) 10000
	 * READs have taken more than 30 s: the bound catches a hang, not a
	 * slow emulator.
	 */
	int pair_wait_ms = (getenv("TP_TEST_EMULATED") ? 120000 : 30000) * pair_time_scale();
	tpu_status st;

	for (tries = 0; tries < 60 && fd < 0; tries++) {
		fd = pair_socket(hostport, false);
		if (fd < 0)
			sleep(1);
	}
	if (fd < 0 || read(fd, &len, sizeof(len)) != sizeof(len) || len > sizeof(blob) ||
	    read(fd, blob, len) != (ssize_t)len) {
		CHECK(0, "two hosts: the target's blob");
		return tap_finish();
	}
	tpu_context_create(NULL, &p.ca);
	st = tpu_agent_create(p.ca, &o, &p.a);
	if (!st)
		st = tpu_agent_register(p.a, m, PAIR_MEM, 0, &p.ra);
	if (!st)
		st = tpu_agent_load(p.a, blob, len, &p.rm);
	CHECK_STATUS(st, 0, "two hosts: the other host's blob loads");
	CHECK(p.rm && !strcmp(tpu_xfer_remote_backend(p.rm), "rdma"),
	      "two hosts: on the rdma backend (%s)", p.rm ? tpu_xfer_remote_backend(p.rm) : "");
	if (st)
		goto out;
	/* READ: 10000 random pieces of the first half against the target's fill. */
	fill(ref, PAIR_MEM, 7);
	memset(m, 0, PAIR_MEM);
	random_lists(&p, 77, 10000, 10000, l, re);
	for (i = 0, ok = 1; i < 10000; i++)
		ok &= re[i].offset + re[i].len <= PAIR_MEM / 2;
	st = tpu_xfer_prepare(p.a, TPU_XFER_OP_READ, l, 10000, re, 10000, NULL, 0, &req);
	if (!st) {
		tpu_xfer_post(req, NULL, NULL);
		st = tpu_xfer_wait(req, pair_wait_ms);
	}
	CHECK_STATUS(st, 0, "two hosts: READ of 10000 random pieces");
	{
		uint8_t *want = calloc(1, PAIR_MEM);

		reference(TPU_XFER_OP_READ, want, ref, l, 10000, re, 10000);
		CHECK(ok && want && !memcmp(m, want, PAIR_MEM), "two hosts: every byte as the reference");
		free(want);
	}
	tpu_xfer_release(req);
	req = NULL;
	/* WRITE the second half: 64 pieces of 32 KiB (striped), a notification each time. */
	fill(m, PAIR_MEM, 8);
	for (i = 0; i < 64; i++) {
		l[i] = (struct tpu_xfer_local_elem){ p.ra, PAIR_MEM / 2 + i * 32768, 32768 };
		re[i] = (struct tpu_xfer_remote_elem){ p.rm, PAIR_MEM / 2 + i * 32768, 32768 };
	}
	k = 0;
	st = tpu_xfer_prepare(p.a, TPU_XFER_OP_WRITE, l, 64, re, 64, &k, sizeof(k), &req);
	for (k = 0; !st && k < PAIR_NOTES; k++) {
		/* Each post's message is its number: the request copied it, so prepare anew. */
		tpu_xfer_release(req);
		req = NULL;
		st = tpu_xfer_prepare(p.a, TPU_XFER_OP_WRITE, l, 64, re, 64, &k, sizeof(k), &req);
		if (!st)
			st = tpu_xfer_post(req, NULL, NULL) ?: tpu_xfer_wait(req, pair_wait_ms);
	}
	CHECK_STATUS(st, 0, "two hosts: %d striped WRITEs of 2 MiB with notifications", PAIR_NOTES);
	tpu_xfer_release(req);
out:
	if (fd >= 0)
		close(fd);	/* the target checks what landed */
	tpu_agent_destroy(p.a);
	tpu_context_destroy(p.ca);
	free(m);
	free(ref);
	free(l);
	free(re);
	return tap_finish();
}
