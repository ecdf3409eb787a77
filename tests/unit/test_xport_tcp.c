// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The tcp transport (lib/xport_tcp.c) between two contexts of this
 * process: addresses, refusal, bytes both ways, the staging buffer serving
 * many small reads from few RECVs, writes gathered into few sends, order,
 * callbacks never run inside the call that queued them, argument checks,
 * close with pending operations, and EOF after data.
 *
 * Transport calls run on the context thread (a deferred task); the test
 * thread waits for callbacks with a deadline.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctx_call.h"
#include "tap.h"
#include "tpu_user.h"
#include "xport.h"

#define WAIT_MS	10000
#define SMALL_N	1000

uint64_t tpu__xport_tcp_counter(const char *name);

static struct tpu_context *ctx_a, *ctx_b;

/* ---- callback records ------------------------------------------------------ */

static atomic_int seq;
static atomic_bool in_call;	/* a transport call of the test is running */

struct done {
	atomic_int calls;
	tpu_status status;
	int seq;
	bool reentered;		/* ran inside the call that queued it */
};

static void done_cb(void *arg, tpu_status st)
{
	struct done *d = arg;

	d->reentered |= atomic_load(&in_call);
	d->status = st;
	d->seq = atomic_fetch_add(&seq, 1);
	atomic_fetch_add(&d->calls, 1);
}

static bool wait_calls(struct done *d, int n)
{
	for (int ms = 0; ms < WAIT_MS; ms++) {
		bool all = true;

		for (int i = 0; i < n; i++)
			all &= atomic_load(&d[i].calls) > 0;
		if (all)
			return true;
		usleep(1000);
	}
	return false;
}

/* ---- requests ---------------------------------------------------------------- */

struct req {
	struct tpu_context *ctx;
	struct tpu__conn *c;
	struct tpu__xlistener *l;
	const char *addr;
	struct iovec *iov;
	unsigned int niov;
	void *buf;
	size_t len;
	struct done *d;
	int count;		/* how many reads or writes of len bytes from buf */
	tpu_status ret;
	char laddr[TPU__XPORT_ADDR_MAX];
};

static void req_connect(void *arg)
{
	struct req *r = arg;

	r->ret = tpu__xport_tcp.connect(r->ctx, r->addr, &r->c);
}

static struct tpu__conn *accepted;
static atomic_int naccepted;

static void accept_fn(void *arg, tpu_status st, struct tpu__conn *conn)
{
	(void)arg;
	if (!st) {
		accepted = conn;
		atomic_fetch_add(&naccepted, 1);
	}
}

static void req_listen(void *arg)
{
	struct req *r = arg;

	r->ret = tpu__xport_tcp.listen(r->ctx, r->addr, accept_fn, NULL, &r->l);
	if (!r->ret)
		snprintf(r->laddr, sizeof(r->laddr), "%s", r->l->ops->addr(r->l));
}

static void req_lclose(void *arg)
{
	struct req *r = arg;

	r->l->ops->close(r->l);
}

static void req_close(void *arg)
{
	struct req *r = arg;

	r->c->ops->close(r->c);
}

/* r->count writes of r->iov (or one of buf/len), each with its own record. */
static void req_writes(void *arg)
{
	struct req *r = arg;
	struct iovec one = { r->buf, r->len };

	atomic_store(&in_call, true);
	for (int i = 0; i < r->count && !r->ret; i++)
		r->ret = r->c->ops->write(r->c, r->iov ? r->iov : &one, r->iov ? r->niov : 1,
					  done_cb, &r->d[i]);
	atomic_store(&in_call, false);
}

/* r->count reads of len bytes into consecutive parts of buf. */
static void req_reads(void *arg)
{
	struct req *r = arg;

	atomic_store(&in_call, true);
	for (int i = 0; i < r->count && !r->ret; i++)
		r->ret = r->c->ops->read(r->c, (uint8_t *)r->buf + (size_t)i * r->len, r->len,
					 done_cb, &r->d[i]);
	atomic_store(&in_call, false);
}

static tpu_status x_write(struct tpu_context *ctx, struct tpu__conn *c, void *buf, size_t len,
			  int count, struct done *d)
{
	struct req r = { .c = c, .buf = buf, .len = len, .count = count, .d = d };

	on_ctx(ctx, req_writes, &r);
	return r.ret;
}

static tpu_status x_read(struct tpu_context *ctx, struct tpu__conn *c, void *buf, size_t len,
			 int count, struct done *d)
{
	struct req r = { .c = c, .buf = buf, .len = len, .count = count, .d = d };

	on_ctx(ctx, req_reads, &r);
	return r.ret;
}

static void x_close(struct tpu_context *ctx, struct tpu__conn *c)
{
	struct req r = { .c = c };

	on_ctx(ctx, req_close, &r);
}

/* ---- pairs -------------------------------------------------------------------- */

static struct tpu__xlistener *lst;
static char laddr[TPU__XPORT_ADDR_MAX];

struct pair {
	struct tpu__conn *client, *server;	/* on ctx_a, ctx_b */
};

static bool pair_make(struct pair *p)
{
	struct req r = { .ctx = ctx_a, .addr = laddr };
	int before = atomic_load(&naccepted);

	on_ctx(ctx_a, req_connect, &r);
	if (r.ret)
		return false;
	p->client = r.c;
	for (int ms = 0; ms < WAIT_MS && atomic_load(&naccepted) == before; ms++)
		usleep(1000);
	if (atomic_load(&naccepted) == before) {
		x_close(ctx_a, p->client);
		return false;
	}
	p->server = accepted;
	return true;
}

static void pair_close(struct pair *p)
{
	x_close(ctx_a, p->client);
	x_close(ctx_b, p->server);
}

static void fill(uint8_t *p, size_t n, uint32_t s)
{
	for (size_t i = 0; i < n; i++) {
		s = s * 1664525u + 1013904223u;
		p[i] = (uint8_t)(s >> 24);
	}
}

/* ---- tests --------------------------------------------------------------------- */

static void addresses(void)
{
	static const char *const bad[] = { "127.0.0.1", "127.0.0.1:65536", "127.0.0.1:8x",
					   "[::1:80", ":80", "127.0.0.1:", "a:b:80" };
	struct req r = { .ctx = ctx_b };
	int einval = 0;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct req c = { .ctx = ctx_a, .addr = bad[i] };

		r.addr = bad[i];
		on_ctx(ctx_b, req_listen, &r);
		on_ctx(ctx_a, req_connect, &c);
		einval += r.ret == -EINVAL && c.ret == -EINVAL;
	}
	CHECK(einval == (int)(sizeof(bad) / sizeof(bad[0])),
	      "tcp: malformed addresses are -EINVAL for listen and connect (%d of %zu)", einval,
	      sizeof(bad) / sizeof(bad[0]));

	r.addr = "127.0.0.1:0";
	on_ctx(ctx_b, req_listen, &r);
	CHECK(!r.ret && strncmp(r.laddr, "127.0.0.1:", 10) == 0 && strcmp(r.laddr, "127.0.0.1:0"),
	      "tcp: listening on port 0 reports the port chosen (%s)", r.laddr);
	lst = r.l;
	snprintf(laddr, sizeof(laddr), "%s", r.laddr);
	r.addr = laddr;
	r.l = NULL;
	on_ctx(ctx_b, req_listen, &r);
	CHECK_STATUS(r.ret, -EADDRINUSE, "tcp: a second listener on that port is -EADDRINUSE");
	if (!r.ret)
		on_ctx(ctx_b, req_lclose, &r);
}

static void refused(void)
{
	struct req lr = { .ctx = ctx_b, .addr = "127.0.0.1:0" }, c = { .ctx = ctx_a };
	struct done d = { 0 };
	uint8_t b[8];
	bool ok;

	/* A port that was just free: listen, note it, close. */
	on_ctx(ctx_b, req_listen, &lr);
	if (lr.ret) {
		CHECK(false, "tcp: refused (no port)");
		return;
	}
	on_ctx(ctx_b, req_lclose, &lr);
	c.addr = lr.laddr;
	on_ctx(ctx_a, req_connect, &c);
	if (c.ret) {
		CHECK_STATUS(c.ret, -ECONNREFUSED, "tcp: connecting to a closed port fails");
		return;
	}
	ok = !x_read(ctx_a, c.c, b, sizeof(b), 1, &d) && wait_calls(&d, 1);
	CHECK(ok && d.status == -ECONNREFUSED,
	      "tcp: a read on a refused connection fails with ECONNREFUSED (%s)",
	      tpu_status_name(d.status));
	x_close(ctx_a, c.c);
}

static void arguments(struct pair *p)
{
	struct iovec iov[TPU__XPORT_IOV_MAX + 1] = { 0 };
	struct req r = { .c = p->client, .iov = iov, .niov = TPU__XPORT_IOV_MAX + 1, .count = 1 };
	struct done d[2] = { 0 };
	uint8_t b[4];

	r.d = d;
	on_ctx(ctx_a, req_writes, &r);
	CHECK_STATUS(r.ret, -EINVAL, "tcp: a write of more than TPU__XPORT_IOV_MAX iovecs");
	CHECK(x_read(ctx_a, p->client, b, 0, 1, d) == -EINVAL &&
	      x_read(ctx_a, p->client, NULL, 4, 1, d) == -EINVAL && !atomic_load(&d[0].calls),
	      "tcp: reads of nothing or into NULL are -EINVAL, with no callback");
}

/* 32 MiB each way at once, byte for byte. */
static void bulk(struct pair *p)
{
	const size_t n = 32u << 20;
	uint8_t *a = malloc(n), *b = malloc(n), *ra = calloc(1, n), *rb = calloc(1, n);
	struct done d[4] = { 0 };
	bool ok = a && b && ra && rb;

	if (ok) {
		fill(a, n, 1);
		fill(b, n, 2);
		ok = !x_read(ctx_b, p->server, ra, n, 1, &d[0]) &&
		     !x_read(ctx_a, p->client, rb, n, 1, &d[1]) &&
		     !x_write(ctx_a, p->client, a, n, 1, &d[2]) &&
		     !x_write(ctx_b, p->server, b, n, 1, &d[3]) && wait_calls(d, 4);
	}
	for (int i = 0; ok && i < 4; i++)
		ok = !d[i].status;
	CHECK(ok && !memcmp(a, ra, n) && !memcmp(b, rb, n),
	      "tcp: 32 MiB both ways at once arrive intact");
	free(a);
	free(b);
	free(ra);
	free(rb);
}

/*
 * Frame-sized writes and reads: 1000 reads of 16 bytes are served from
 * far fewer RECVs (the staging buffer); every byte in order.
 */
static void small_ones(struct pair *p)
{
	uint8_t *src = malloc(SMALL_N * 16), *dst = calloc(SMALL_N, 16);
	struct done *w = calloc(SMALL_N, sizeof(*w)), *r = calloc(SMALL_N, sizeof(*r));
	uint64_t recvs = tpu__xport_tcp_counter("recv");
	uint64_t staged = tpu__xport_tcp_counter("recv_staged");
	bool ok = src && dst && w && r, ordered = true, inside = false;
	struct req wr = { .c = p->client, .count = SMALL_N, .d = w };

	if (ok) {
		struct iovec *iov = malloc(sizeof(*iov));

		fill(src, SMALL_N * 16, 3);
		/* Each write its own 16 bytes: queue them from one task. */
		ok = iov != NULL;
		for (int i = 0; ok && i < SMALL_N; i++) {
			*iov = (struct iovec){ src + 16 * (size_t)i, 16 };
			wr.iov = iov;
			wr.niov = 1;
			wr.count = 1;
			wr.d = &w[i];
			on_ctx(ctx_a, req_writes, &wr);
			ok = !wr.ret;
		}
		free(iov);
		ok = ok && wait_calls(w, SMALL_N) &&
		     !x_read(ctx_b, p->server, dst, 16, SMALL_N, r) && wait_calls(r, SMALL_N);
	}
	for (int i = 0; ok && i < SMALL_N; i++) {
		ok = !w[i].status && !r[i].status;
		ordered &= i == 0 || (w[i].seq > w[i - 1].seq && r[i].seq > r[i - 1].seq);
		inside |= w[i].reentered || r[i].reentered;
	}
	CHECK(ok && !memcmp(src, dst, SMALL_N * 16), "tcp: 1000 small writes read as 1000 reads");
	CHECK(ok && ordered, "tcp: writes and reads call back in the order queued");
	CHECK(ok && !inside, "tcp: no callback runs inside the call that queued it");
	recvs = tpu__xport_tcp_counter("recv") - recvs;
	staged = tpu__xport_tcp_counter("recv_staged") - staged;
	CHECK(ok && recvs < SMALL_N / 10 && staged > 0,
	      "tcp: 1000 small reads took %llu RECVs (%llu staged)", (unsigned long long)recvs,
	      (unsigned long long)staged);
	free(src);
	free(dst);
	free(w);
	free(r);
}

/* Writes queued behind one in flight leave together. */
static void gathering(struct pair *p)
{
	enum { N = 200 };
	static uint8_t src[N][100], dst[N * 100];
	struct done w[N] = { 0 }, r = { 0 };
	uint64_t sends = tpu__xport_tcp_counter("send");
	struct req wr = { .c = p->client, .count = N, .d = w };
	struct iovec iov = { src, sizeof(src[0]) };
	bool ok;

	fill(&src[0][0], sizeof(src), 4);
	/* One task queues all N at once: the first goes out, the rest wait together. */
	wr.iov = &iov;
	wr.niov = 1;
	on_ctx(ctx_a, req_writes, &wr);
	ok = !wr.ret && wait_calls(w, N) && !x_read(ctx_b, p->server, dst, sizeof(dst), 1, &r) &&
	     wait_calls(&r, 1) && !r.status;
	sends = tpu__xport_tcp_counter("send") - sends;
	for (int i = 0; ok && i < N; i++)
		ok = !memcmp(dst + 100 * (size_t)i, src[0], 100);
	CHECK(ok && sends < N / 2, "tcp: %d writes queued together left in %llu sends", N,
	      (unsigned long long)sends);
}

static void close_pending(void)
{
	struct pair p;
	uint8_t b[64], *big = malloc(64u << 20);
	struct done rd[2] = { 0 }, wr[2] = { 0 }, peer = { 0 };
	bool once = true;

	if (!big || !pair_make(&p)) {
		CHECK(false, "tcp: close_pending pair");
		free(big);
		return;
	}
	memset(big, 7, 64u << 20);
	/* Two reads nobody writes for, two writes of 64 MiB nobody reads. */
	x_read(ctx_a, p.client, b, sizeof(b), 2, rd);
	x_write(ctx_a, p.client, big, 64u << 20, 2, wr);
	usleep(50 * 1000);
	x_close(ctx_a, p.client);
	CHECK(wait_calls(rd, 2) && wait_calls(wr, 2) && rd[0].status == TPU_E_CLOSED &&
	      rd[1].status == TPU_E_CLOSED && wr[1].status == TPU_E_CLOSED,
	      "tcp: close fails pending reads and writes with TPU_E_CLOSED");
	usleep(20 * 1000);
	for (int i = 0; i < 2; i++)
		once &= atomic_load(&rd[i].calls) == 1 && atomic_load(&wr[i].calls) == 1;
	CHECK(once, "tcp: each pending callback ran exactly once");
	/* The peer drains what arrived, then sees the connection end. */
	for (int i = 0; i < 200 && !atomic_load(&peer.calls); i++) {
		struct done one = { 0 };

		x_read(ctx_b, p.server, big, 1u << 20, 1, &one);
		if (!wait_calls(&one, 1) || one.status) {
			peer = one;
			break;
		}
	}
	CHECK(peer.status == -ECONNRESET, "tcp: the peer of a closed connection gets ECONNRESET (%s)",
	      tpu_status_name(peer.status));
	x_close(ctx_b, p.server);
	free(big);
}

static void eof_after_data(void)
{
	struct pair p;
	uint8_t b[32] = "bytes written before the close", got[32] = { 0 };
	struct done w = { 0 }, r[2] = { 0 };
	bool ok;

	if (!pair_make(&p)) {
		CHECK(false, "tcp: eof pair");
		return;
	}
	x_write(ctx_a, p.client, b, sizeof(b), 1, &w);
	wait_calls(&w, 1);
	x_close(ctx_a, p.client);
	x_read(ctx_b, p.server, got, sizeof(got), 1, &r[0]);
	x_read(ctx_b, p.server, got, 1, 1, &r[1]);
	ok = wait_calls(r, 2);
	CHECK(ok && !r[0].status && !memcmp(b, got, sizeof(b)) &&
	      r[1].status == -ECONNRESET,
	      "tcp: bytes written before a close are read, then ECONNRESET (%s)",
	      tpu_status_name(r[1].status));
	x_close(ctx_b, p.server);
}

void test_xport_tcp(void)
{
	struct pair p;
	struct req lr;

	if (tpu_context_create(NULL, &ctx_a) || tpu_context_create(NULL, &ctx_b)) {
		CHECK(false, "tcp: two contexts");
		return;
	}
	addresses();
	refused();
	if (lst && pair_make(&p)) {
		arguments(&p);
		bulk(&p);
		small_ones(&p);
		gathering(&p);
		pair_close(&p);
	} else {
		CHECK(false, "tcp: a connected pair");
	}
	close_pending();
	eof_after_data();
	if (lst) {
		lr = (struct req){ .l = lst };
		on_ctx(ctx_b, req_lclose, &lr);
	}
	tpu_context_destroy(ctx_a);
	tpu_context_destroy(ctx_b);
}
