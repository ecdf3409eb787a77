// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The tcp transport (lib/xport_tcp.c) between two contexts of this
 * process, through the transport harness (xport_harness.h): addresses and
 * refusal, argument checks, bytes both ways (32 MiB, many and empty
 * iovecs, reads of every size), the staging buffer serving small reads
 * from few RECVs, writes gathered into few sends, order, callbacks never
 * run inside the call that queued them, an idle connection letting its
 * contexts sleep, close with pending ops, from callbacks and while
 * connecting, EOF after data, a peer that stops reading or resets,
 * zero-copy sends, and listeners closed with an accept in flight.
 *
 * tpu__xport_tcp_counter() says which paths the transport took.  Its
 * counters are global, so they are read around steps in which only the
 * connection under test moves bytes, and every "fewer than" check also
 * wants the counter to have moved (a broken hook must not pass them).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tap.h"
#include "tpu_user.h"
#include "xport.h"
#include "xport_harness.h"

#define XP		(&tpu__xport_tcp)
#define PAT_LEN		(64 * MiB)

/* The transport's test hook (lib/xport_tcp.c). */
uint64_t tpu__xport_tcp_counter(const char *name);

static struct tpu_context *ctx_a, *ctx_b;	/* the connecting side, the listening side */
static struct site site;			/* on ctx_b, at 127.0.0.1:<port> */
static uint8_t *pat;				/* PAT_LEN bytes of pattern: what is sent */

enum { C_RECV, C_STAGED, C_SEND, C_SHORT, C_ZC, C_NOTIF, C_N };
static const char *const cnt_names[C_N] = {
	"recv", "recv_staged", "send", "send_short", "send_zc", "zc_notif",
};

struct counts {
	uint64_t v[C_N];
};

static void counts_take(struct counts *c)
{
	for (int i = 0; i < C_N; i++)
		c->v[i] = tpu__xport_tcp_counter(cnt_names[i]);
}

/* How far counter i moved since c was taken. */
static unsigned long long moved(const struct counts *c, int i)
{
	return (unsigned long long)(tpu__xport_tcp_counter(cnt_names[i]) - c->v[i]);
}

static void nop(void *arg)
{
	(void)arg;
}

/* Let CQEs already due (a listener's cancelled ACCEPT) run. */
static void settle(void)
{
	sleep_ms(20);
	tpu__ctx_run_sync(ctx_a, nop, NULL);
	tpu__ctx_run_sync(ctx_b, nop, NULL);
}

/* ---- ops queued from one task, so that none completes between them ------- */

struct batch {
	struct tpu__conn *c;
	int n;
	uint8_t *buf;		/* op i: buf + len[0] + ... + len[i - 1], len[i] bytes */
	const size_t *len;
	struct done *d;
	tpu_status ret;
};

static void batch_writes(void *arg)
{
	struct batch *b = arg;
	size_t off = 0;

	for (int i = 0; i < b->n; i++) {
		struct iovec iov = { b->buf + off, b->len[i] };

		b->ret |= op_writev(b->c, &iov, 1, done_cb, &b->d[i]);
		off += b->len[i];
	}
}

static void batch_reads(void *arg)
{
	struct batch *b = arg;
	size_t off = 0;

	for (int i = 0; i < b->n; i++) {
		b->ret |= op_read(b->c, b->buf + off, b->len[i], done_cb, &b->d[i]);
		off += b->len[i];
	}
}

static tpu_status queue_batch(struct tpu_context *ctx, struct tpu__conn *c, bool write,
			      uint8_t *buf, const size_t *len, int n, struct done *d)
{
	struct batch b = { .c = c, .n = n, .buf = buf, .len = len, .d = d };

	tpu__ctx_run_sync(ctx, write ? batch_writes : batch_reads, &b);
	return b.ret;
}

/* d[0..n) all called back, with status 0 and in the order queued. */
static bool all_ok_in_order(struct done *d, int n)
{
	bool ok = wait_done(d, n);

	for (int i = 0; ok && i < n; i++)
		ok = !d[i].status && atomic_load(&d[i].calls) == 1 &&
		     (!i || d[i].seq > d[i - 1].seq);
	return ok;
}

/*
 * Read what is left of a connection whose peer closed, 1 MiB at a time,
 * until a read fails; its status.  *got: the bytes read; *same: they are
 * expect's first ones (if expect).
 */
static tpu_status drain(struct tpu_context *ctx, struct tpu__conn *c, const uint8_t *expect,
			size_t max, size_t *got, bool *same)
{
	/* Static: a read that timed out may still be called back, into these. */
	static struct done d;
	static uint8_t *buf;
	tpu_status st = -ETIMEDOUT;

	*got = 0;
	*same = true;
	if (!buf && !(buf = malloc(MiB)))
		return -ENOMEM;
	for (size_t i = 0; i <= max / MiB + 1; i++) {
		memset(&d, 0, sizeof(d));
		if (x_read(ctx, c, buf, MiB, &d) || !wait_done(&d, 1))
			return st;	/* buf stays the read's */
		if (d.status) {
			st = d.status;
			break;
		}
		if (expect)
			*same &= *got + MiB <= max && !memcmp(buf, expect + *got, MiB);
		*got += MiB;
	}
	free(buf);
	buf = NULL;
	return st;
}

/* ---- names and addresses ------------------------------------------------- */

static void test_names(void)
{
	char d[TPU__XPORT_COMPAT_MAX], small[3];

	CHECK(!strcmp(XP->name, "tcp"), "tcp: the transport is called tcp");
	CHECK(!XP->compat_descriptor(d, sizeof(d)) && !strcmp(d, "tcp"),
	      "tcp: the compatibility descriptor is the constant \"tcp\"");
	CHECK_STATUS(XP->compat_descriptor(small, sizeof(small)), -ENOSPC,
		     "tcp: a compatibility descriptor buffer too small is -ENOSPC");
	CHECK(tpu__xport_tcp_counter("no such counter") == 0,
	      "tcp: the test hook knows its counters' names");
}

static void test_bad_addresses(void)
{
	/* A missing port is named as such; everything else is -EINVAL. */
	static const char *const no_port[] = { "127.0.0.1", "127.0.0.1:", "localhost" };
	static const char *const bad[] = {
		"127.0.0.1:65536",	/* port out of range */
		"127.0.0.1:123456789",	/* too long a port */
		"127.0.0.1:8x",		/* not digits */
		"127.0.0.1:-1",
		"127.0.0.1:+80",
		"[::1",			/* no ']' */
		"[::1:80",
		"[::1]80",		/* no ':' after ']' */
		"[]:80",		/* empty host */
		":80",
		"a:b:80",		/* an IPv6 address needs brackets */
		"",
		NULL,
	};

	for (size_t i = 0; i < sizeof(no_port) / sizeof(no_port[0]); i++) {
		struct tpu__xlistener *l = NULL;
		struct tpu__conn *c = NULL;
		struct acceptq q = { 0 };
		tpu_status cs = x_connect(XP, ctx_a, no_port[i], &c);
		tpu_status ls = x_listen(XP, ctx_b, no_port[i], &q, &l, NULL, 0);

		CHECK(cs == TPU_E_URL_PORT && !c && ls == TPU_E_URL_PORT && !l,
		      "tcp: \"%s\" is TPU_E_URL_PORT for connect (%s) and listen (%s)",
		      no_port[i], tpu_status_name(cs), tpu_status_name(ls));
		x_close(ctx_a, c);
		x_lclose(ctx_b, l);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct tpu__xlistener *l = NULL;
		struct tpu__conn *c = NULL;
		struct acceptq q = { 0 };
		tpu_status cs = x_connect(XP, ctx_a, bad[i], &c);
		tpu_status ls = x_listen(XP, ctx_b, bad[i], &q, &l, NULL, 0);

		CHECK(cs == -EINVAL && !c && ls == -EINVAL && !l,
		      "tcp: \"%s\" is -EINVAL for connect (%s) and listen (%s)",
		      bad[i] ? bad[i] : "(null)", tpu_status_name(cs), tpu_status_name(ls));
		x_close(ctx_a, c);
		x_lclose(ctx_b, l);
	}
}

static void test_addresses(void)
{
	struct tpu__xlistener *l = NULL;
	struct tpu__conn *c = NULL;
	struct acceptq q = { 0 };
	unsigned long port = 0;
	char *end = NULL;
	tpu_status st;

	st = site_open(&site, XP, ctx_a, ctx_b, "127.0.0.1:0");
	if (!st && !strncmp(site.addr, "127.0.0.1:", 10))
		port = strtoul(site.addr + 10, &end, 10);
	CHECK(!st && end && !*end && port > 0 && port <= 65535,
	      "tcp: listening on 127.0.0.1:0 reports the port chosen (%s)", site.addr);
	if (st)
		return;
	st = x_listen(XP, ctx_b, site.addr, &q, &l, NULL, 0);
	CHECK(st == -EADDRINUSE && !l, "tcp: a second listener on %s is -EADDRINUSE (%s)",
	      site.addr, tpu_status_name(st));
	x_lclose(ctx_b, l);
	l = NULL;
	/* The parser's upper bound is a port, not an error (nothing need listen there). */
	st = x_connect(XP, ctx_a, "127.0.0.1:65535", &c);
	CHECK_STATUS(st, 0, "tcp: port 65535 is a valid address");
	x_close(ctx_a, c);
	test_bad_addresses();
}

/* A host name, and IPv6, reach a listener too. */
static void test_other_hosts(void)
{
	struct site s6 = { 0 };
	char addr[TPU__XPORT_ADDR_MAX];
	int before = atomic_load(&site.q.n);
	struct tpu__conn *c = NULL;
	struct pair p;
	tpu_status st;
	char b[2] = { 0 };
	struct done w = { 0 }, r = { 0 };

	snprintf(addr, sizeof(addr), "localhost:%s", strrchr(site.addr, ':') + 1);
	st = x_connect(XP, ctx_a, addr, &c);
	if (!st && wait_for(&site.q.n, before + 1, WAIT_MS)) {
		x_write(ctx_a, c, "lh", 2, &w);
		x_read(ctx_b, site.q.conns[before], b, 2, &r);
		wait_done(&w, 1);
		wait_done(&r, 1);
		x_close(ctx_b, site.q.conns[before]);
	}
	CHECK(!st && !w.status && !r.status && !memcmp(b, "lh", 2),
	      "tcp: connecting to %s (a name, maybe ::1 first) reaches 127.0.0.1", addr);
	x_close(ctx_a, c);

	st = site_open(&s6, XP, ctx_a, ctx_b, "[::1]:0");
	if (st == -EADDRNOTAVAIL || st == -EAFNOSUPPORT) {
		tap_diag("tcp: no IPv6 loopback here (%s): [::1] skipped", tpu_status_name(st));
		return;
	}
	CHECK(!st && !strncmp(s6.addr, "[::1]:", 6) && strcmp(s6.addr, "[::1]:0"),
	      "tcp: listening on [::1]:0 reports [::1]:<port> (%s)", s6.addr);
	memset(&w, 0, sizeof(w));
	memset(&r, 0, sizeof(r));
	if (!st && make_pair(&s6, &p)) {
		x_write(ctx_a, p.client, "v6", 2, &w);
		x_read(ctx_b, p.server, b, 2, &r);
		wait_done(&w, 1);
		wait_done(&r, 1);
		close_pair(&p);
	}
	CHECK(!st && atomic_load(&r.calls) && !r.status && !memcmp(b, "v6", 2),
	      "tcp: bytes cross an IPv6 connection");
	site_close(&s6);
}

/* Nobody listens: connect succeeds, the ops queued on it fail. */
static void test_refused(void)
{
	struct site gone = { 0 };
	struct tpu__conn *c = NULL;
	struct done r = { 0 }, w = { 0 }, later = { 0 };
	uint8_t b[8];
	tpu_status st;
	bool ok;

	/* A port that was free a moment ago. */
	if (site_open(&gone, XP, ctx_a, ctx_b, "127.0.0.1:0")) {
		CHECK(false, "tcp: a listener to close for the refusal");
		return;
	}
	site_close(&gone);
	settle();
	st = x_connect(XP, ctx_a, gone.addr, &c);
	CHECK_STATUS(st, 0, "tcp: connect to a closed port returns at once");
	if (st)
		return;
	x_read(ctx_a, c, b, sizeof(b), &r);
	x_write(ctx_a, c, "ping", 4, &w);
	ok = wait_done(&r, 1) && wait_done(&w, 1);
	CHECK(ok && r.status == -ECONNREFUSED,
	      "tcp: a read queued on a refused connection fails with ECONNREFUSED (%s)",
	      tpu_status_name(r.status));
	CHECK(ok && w.status == -ECONNREFUSED, "tcp: so does a write (%s)",
	      tpu_status_name(w.status));
	x_read(ctx_a, c, b, sizeof(b), &later);
	ok = wait_done(&later, 1);
	CHECK(ok && later.status == -ECONNREFUSED && !later.reentered,
	      "tcp: a read queued after the error fails too, called back later (%s)",
	      tpu_status_name(later.status));
	x_close(ctx_a, c);
	sleep_ms(10);
	CHECK(atomic_load(&r.calls) == 1 && atomic_load(&w.calls) == 1 &&
	      atomic_load(&later.calls) == 1 && !atomic_load(&gone.q.n),
	      "tcp: each called back once, close adds nothing");
}

/* ---- listeners closed ---------------------------------------------------- */

struct lclose {
	struct acceptq q;
	struct tpu__xlistener *l;
	char addr[TPU__XPORT_ADDR_MAX];
	tpu_status ret;
};

/* Listen and close at once: the ACCEPT armed by listen is still in flight. */
static void listen_and_close(void *arg)
{
	struct lclose *lc = arg;

	lc->ret = XP->listen(ctx_b, "127.0.0.1:0", accept_fn, &lc->q, &lc->l);
	if (lc->ret)
		return;
	snprintf(lc->addr, sizeof(lc->addr), "%s", lc->l->ops->addr(lc->l));
	lc->l->ops->close(lc->l);
}

/* An accept callback that closes its listener. */
static void accept_then_close(void *arg, tpu_status st, struct tpu__conn *conn)
{
	struct lclose *lc = arg;

	accept_fn(&lc->q, st, conn);
	lc->l->ops->close(lc->l);
}

static void listen_closing(void *arg)
{
	struct lclose *lc = arg;

	lc->ret = XP->listen(ctx_b, "127.0.0.1:0", accept_then_close, lc, &lc->l);
	if (!lc->ret)
		snprintf(lc->addr, sizeof(lc->addr), "%s", lc->l->ops->addr(lc->l));
}

/* A connection to addr is refused (nobody accepts it). */
static tpu_status try_connect(const char *addr)
{
	struct tpu__conn *c = NULL;
	struct done r = { 0 };
	uint8_t b;

	if (x_connect(XP, ctx_a, addr, &c))
		return -EINVAL;
	x_read(ctx_a, c, &b, 1, &r);
	if (!wait_done(&r, 1))
		r.status = -ETIMEDOUT;
	x_close(ctx_a, c);
	return r.status;
}

static void test_listener_close(void)
{
	struct lclose *lc = calloc(1, sizeof(*lc)), *lc2 = calloc(1, sizeof(*lc2));
	struct tpu__conn *c = NULL;
	tpu_status st;

	if (!lc || !lc2) {
		CHECK(false, "tcp: memory for the listener tests");
		goto out;
	}
	tpu__ctx_run_sync(ctx_b, listen_and_close, lc);
	CHECK_STATUS(lc->ret, 0, "tcp: listen, then close with its ACCEPT in flight");
	if (!lc->ret) {
		settle();
		st = try_connect(lc->addr);
		CHECK(st == -ECONNREFUSED && !atomic_load(&lc->q.n) && !atomic_load(&lc->q.errs),
		      "tcp: a closed listener accepts nothing, connecting is refused (%s)",
		      tpu_status_name(st));
	}

	/* Closed by its own accept callback: that one connection, no more. */
	tpu__ctx_run_sync(ctx_b, listen_closing, lc2);
	if (lc2->ret || x_connect(XP, ctx_a, lc2->addr, &c)) {
		CHECK(false, "tcp: a listener closing itself in its callback");
		goto out;
	}
	CHECK(wait_for(&lc2->q.n, 1, WAIT_MS), "tcp: an accept callback may close its listener");
	settle();
	st = try_connect(lc2->addr);
	CHECK(st == -ECONNREFUSED && atomic_load(&lc2->q.n) == 1 && !atomic_load(&lc2->q.errs),
	      "tcp: after that nothing is accepted, connecting is refused (%s)",
	      tpu_status_name(st));
	x_close(ctx_a, c);
	if (atomic_load(&lc2->q.n))
		x_close(ctx_b, lc2->q.conns[0]);
out:
	free(lc);
	free(lc2);
}

/* ---- one connection, many uses ------------------------------------------- */

static void test_basic(struct pair *p)
{
	struct iovec iov[3] = { { "hel", 3 }, { "lo ", 3 }, { "world", 5 } };
	struct done w = { 0 }, r = { 0 }, w2 = { 0 }, r2 = { 0 };
	char in[16] = { 0 }, back[8] = { 0 };

	CHECK(p->client->xport == XP && p->server->xport == XP,
	      "tcp: connections name their transport");
	CHECK(!p->client->ops->peer_pid(p->client) && !p->server->ops->peer_pid(p->server) &&
	      !p->client->ops->send_fd && !p->client->ops->recv_fd && !p->client->ops->watch,
	      "tcp: no peer pid, descriptor passing or watch");
	x_writev(ctx_a, p->client, iov, 3, &w);
	x_read(ctx_b, p->server, in, 11, &r);
	CHECK(wait_done(&w, 1) && wait_done(&r, 1) && !w.status && !r.status &&
	      !strcmp(in, "hello world"), "tcp: a writev of three pieces arrives (%s)", in);
	x_read(ctx_a, p->client, back, 4, &r2);
	x_write(ctx_b, p->server, "pong", 4, &w2);
	CHECK(wait_done(&r2, 1) && wait_done(&w2, 1) && !r2.status && !w2.status &&
	      !strcmp(back, "pong"), "tcp: and back the other way");
}

static void test_arguments(struct pair *p)
{
	struct iovec iov[TPU__XPORT_IOV_MAX + 1];
	struct done d[4];
	uint8_t b[4];
	tpu_status st;

	memset(d, 0, sizeof(d));
	for (int i = 0; i <= TPU__XPORT_IOV_MAX; i++)
		iov[i] = (struct iovec){ b, 1 };
	st = x_writev(ctx_a, p->client, iov, TPU__XPORT_IOV_MAX + 1, &d[0]);
	CHECK_STATUS(st, -EINVAL, "tcp: a write of TPU__XPORT_IOV_MAX + 1 iovecs is -EINVAL");
	st = x_read(ctx_a, p->client, b, 0, &d[1]);
	CHECK_STATUS(st, -EINVAL, "tcp: a read of 0 bytes is -EINVAL");
	st = x_read(ctx_a, p->client, NULL, 4, &d[2]);
	CHECK_STATUS(st, -EINVAL, "tcp: a read into NULL is -EINVAL");
	/* A write of nothing has no system call to wait for: it still calls back later. */
	st = x_writev(ctx_a, p->client, NULL, 0, &d[3]);
	CHECK(!st && wait_done(&d[3], 1) && !d[3].status && !d[3].reentered,
	      "tcp: a write of no iovecs succeeds, called back after the call");
	sleep_ms(10);
	CHECK(!atomic_load(&d[0].calls) && !atomic_load(&d[1].calls) && !atomic_load(&d[2].calls),
	      "tcp: refused ops are never called back");
}

struct iov_writes {
	struct tpu__conn *c;
	struct iovec iov[3][TPU__XPORT_IOV_MAX];
	struct iovec none[3];
	struct done d[4];
	tpu_status ret;
};

static void queue_iov_writes(void *arg)
{
	struct iov_writes *w = arg;

	w->ret |= op_writev(w->c, w->iov[0], TPU__XPORT_IOV_MAX, done_cb, &w->d[0]);
	w->ret |= op_writev(w->c, w->none, 3, done_cb, &w->d[1]);
	w->ret |= op_writev(w->c, w->iov[1], TPU__XPORT_IOV_MAX, done_cb, &w->d[2]);
	w->ret |= op_writev(w->c, w->iov[2], TPU__XPORT_IOV_MAX, done_cb, &w->d[3]);
}

/*
 * Writes of TPU__XPORT_IOV_MAX iovecs of odd lengths, some empty (first
 * and last too), and a write of empty iovecs among them, queued at once:
 * a gathered send then ends inside a write.
 */
static void test_iovecs(struct pair *p)
{
	struct iov_writes *w = calloc(1, sizeof(*w));
	struct done r = { 0 };
	uint8_t *dst = NULL;
	size_t off = 0;

	if (!w) {
		CHECK(false, "tcp: memory for the iovec test");
		return;
	}
	w->c = p->client;
	for (int i = 0; i < 3; i++) {
		for (int k = 0; k < TPU__XPORT_IOV_MAX; k++) {
			size_t len = k % 5 == 0 || k == TPU__XPORT_IOV_MAX - 1 ?
				     0 : 1 + (size_t)(i * 131 + k * 977) % 3000;

			w->iov[i][k] = (struct iovec){ len ? pat + off : NULL, len };
			off += len;
		}
	}
	dst = malloc(off);
	if (!dst) {
		CHECK(false, "tcp: memory for the iovec test");
		goto out;
	}
	tpu__ctx_run_sync(ctx_a, queue_iov_writes, w);
	x_read(ctx_b, p->server, dst, off, &r);
	CHECK(!w->ret && all_ok_in_order(w->d, 4),
	      "tcp: writes of %d iovecs (some empty) and one of only empty ones complete in order",
	      TPU__XPORT_IOV_MAX);
	CHECK(wait_done(&r, 1) && !r.status && !memcmp(dst, pat, off),
	      "tcp: their %zu bytes arrive in order, nothing for the empty iovecs", off);
out:
	free(dst);
	free(w);
}

/* 32 MiB each way at once, byte for byte. */
static void test_bulk(struct pair *p)
{
	const size_t n = 32 * MiB;
	uint8_t *ra = malloc(n), *rb = malloc(n);
	struct done d[4];
	struct counts c0;
	int64_t t0;
	bool ok;

	memset(d, 0, sizeof(d));
	if (!ra || !rb) {
		CHECK(false, "tcp: memory for 32 MiB");
		goto out;
	}
	counts_take(&c0);
	t0 = now_ms();
	ok = !x_read(ctx_b, p->server, ra, n, &d[0]) && !x_read(ctx_a, p->client, rb, n, &d[1]) &&
	     !x_write(ctx_a, p->client, pat, n, &d[2]) &&
	     !x_write(ctx_b, p->server, pat + n, n, &d[3]) && wait_done(d, 4);
	for (int i = 0; ok && i < 4; i++)
		ok = !d[i].status;
	CHECK(ok, "tcp: 32 MiB each way at once complete (%lld ms)", (long long)(now_ms() - t0));
	CHECK(ok && !memcmp(ra, pat, n), "tcp: 32 MiB arrive intact one way");
	CHECK(ok && !memcmp(rb, pat + n, n), "tcp: and the other way");
	tap_diag("tcp bulk: %llu RECVs, %llu sends (%llu short)", moved(&c0, C_RECV),
		 moved(&c0, C_SEND), moved(&c0, C_SHORT));
out:
	free(ra);
	free(rb);
}

/*
 * One 4 MiB write, read in pieces of every size around the staging
 * thresholds, all queued at once: small reads staged, large ones taking
 * what is staged and receiving the rest in place.
 */
static void test_read_sizes(struct pair *p)
{
	static const size_t sizes[] = { 1, 15, 16, 31, 4096, 16383, 16384, 16385, 65535,
					65536, 65537, 100000, 7, 300000 };
	const size_t total = 4 * MiB;
	size_t len[512], off = 0;
	struct done *r = calloc(512, sizeof(*r)), w = { 0 };
	uint8_t *dst = malloc(total);
	int n = 0;

	if (!r || !dst) {
		CHECK(false, "tcp: memory for the read sizes");
		goto out;
	}
	while (off < total && n < 512) {
		len[n] = sizes[n % (sizeof(sizes) / sizeof(sizes[0]))];
		if (len[n] > total - off)
			len[n] = total - off;
		off += len[n++];
	}
	queue_batch(ctx_b, p->server, false, dst, len, n, r);
	x_write(ctx_a, p->client, pat + 7, total, &w);
	CHECK(all_ok_in_order(r, n) && wait_done(&w, 1) && !w.status,
	      "tcp: %d reads of 1 to 300000 bytes complete in order", n);
	CHECK(!memcmp(dst, pat + 7, total), "tcp: and get the 4 MiB in order");
out:
	free(r);
	free(dst);
}

/*
 * Frame headers: 1000 writes of 16 and 32 bytes queued at once leave in
 * few sends; read as 1000 reads once they all arrived, they take few
 * RECVs (the staging buffer).
 */
static void test_staging(struct pair *p)
{
	enum { N = 1000 };
	size_t len[N], total = 0;
	struct done *w = calloc(N, sizeof(*w)), *r = calloc(N, sizeof(*r));
	uint8_t *dst = malloc(N * 32);
	struct counts c0, c1;
	bool ok;

	if (!w || !r || !dst) {
		CHECK(false, "tcp: memory for the staging test");
		goto out;
	}
	for (int i = 0; i < N; i++)
		total += len[i] = i % 2 ? 32 : 16;
	counts_take(&c0);
	ok = !queue_batch(ctx_a, p->client, true, pat + 100, len, N, w) && all_ok_in_order(w, N);
	CHECK(ok && moved(&c0, C_SEND) > 0 && moved(&c0, C_SEND) < N / 4,
	      "tcp: %d writes of 16 and 32 bytes queued at once left in %llu sends", N,
	      moved(&c0, C_SEND));
	sleep_ms(20);		/* every byte in the reader's socket */
	counts_take(&c1);
	ok = !queue_batch(ctx_b, p->server, false, dst, len, N, r) && all_ok_in_order(r, N);
	CHECK(ok && !memcmp(dst, pat + 100, total), "tcp: read as %d reads, in order, intact", N);
	CHECK(ok && moved(&c1, C_STAGED) > 0 && moved(&c1, C_RECV) < N / 10,
	      "tcp: those %d reads took %llu RECVs (%llu into the staging buffer)", N,
	      moved(&c1, C_RECV), moved(&c1, C_STAGED));
out:
	free(w);
	free(r);
	free(dst);
}

/*
 * A small read, then a large one: the first RECV stages up to 64 KiB, so
 * the large read starts with staged bytes and receives the rest in place.
 */
static void test_staged_then_large(struct pair *p)
{
	const size_t big = 256u << 10;
	size_t len[2] = { 16, big };
	uint8_t *dst = malloc(16 + big);
	struct done w = { 0 }, r[2];
	struct counts c0;

	memset(r, 0, sizeof(r));
	if (!dst) {
		CHECK(false, "tcp: memory for staged then large");
		return;
	}
	x_write(ctx_a, p->client, pat + 3, 16 + big, &w);
	sleep_ms(20);		/* more than the stage holds is waiting in the socket */
	counts_take(&c0);
	queue_batch(ctx_b, p->server, false, dst, len, 2, r);
	CHECK(all_ok_in_order(r, 2) && wait_done(&w, 1) && !w.status &&
	      !memcmp(dst, pat + 3, 16 + big),
	      "tcp: 16 bytes, then %zu KiB spanning staged and unstaged bytes, intact", big >> 10);
	CHECK(moved(&c0, C_STAGED) == 1, "tcp: the small read staged once (%llu RECVs in all)",
	      moved(&c0, C_RECV));
	free(dst);
}

/* A read of bytes already staged needs no RECV, and still calls back later. */
static void test_from_stage(struct pair *p)
{
	uint8_t a[16], b[16], rest[2][16];
	struct done w = { 0 }, r1 = { 0 }, r2 = { 0 }, r3[2];
	unsigned long long recvs;
	struct counts c0;
	bool ok;

	memset(r3, 0, sizeof(r3));
	x_write(ctx_a, p->client, pat + 11, 64, &w);
	wait_done(&w, 1);
	sleep_ms(10);
	x_read(ctx_b, p->server, a, 16, &r1);
	wait_done(&r1, 1);
	counts_take(&c0);
	x_read(ctx_b, p->server, b, 16, &r2);
	ok = wait_done(&r2, 1);
	recvs = moved(&c0, C_RECV);
	CHECK(ok && !r2.status && !memcmp(a, pat + 11, 16) && !memcmp(b, pat + 27, 16) && !recvs,
	      "tcp: a read of staged bytes takes no RECV (%llu)", recvs);
	CHECK(!r1.reentered && !r2.reentered, "tcp: and is called back after the call");
	x_read(ctx_b, p->server, rest[0], 16, &r3[0]);
	x_read(ctx_b, p->server, rest[1], 16, &r3[1]);
	CHECK(all_ok_in_order(r3, 2) && !memcmp(rest, pat + 43, 32),
	      "tcp: the reads after it get the rest of the stage");
}

/* 2000 writes and reads of 8 bytes, each side queued from one task. */
static void test_many(struct pair *p)
{
	struct many *w = calloc(1, sizeof(*w)), *r = calloc(1, sizeof(*r));
	bool vals = true;
	struct counts c0;

	if (!w || !r) {
		CHECK(false, "tcp: memory for many ops");
		goto out;
	}
	w->c = p->client;
	r->c = p->server;
	counts_take(&c0);
	tpu__ctx_run_sync(ctx_b, many_reads, r);
	tpu__ctx_run_sync(ctx_a, many_writes, w);
	CHECK(!w->ret && !r->ret && all_ok_in_order(w->d, MANY),
	      "tcp: %d writes queued at once complete once each, in order", MANY);
	CHECK(all_ok_in_order(r->d, MANY), "tcp: %d reads likewise", MANY);
	for (int i = 0; i < MANY; i++)
		vals &= r->vals[i] == MANY_BASE + (uint64_t)i;
	CHECK(vals, "tcp: each read gets its own write's bytes");
	CHECK(moved(&c0, C_SEND) > 0 && moved(&c0, C_SEND) < MANY / 10,
	      "tcp: the %d writes left in %llu sends", MANY, moved(&c0, C_SEND));
out:
	free(w);
	free(r);
}

/* Writes and reads of very different sizes still call back in the order queued. */
static void test_order_mixed(struct pair *p)
{
	static const size_t len[] = { MiB, 8, 0, 3 * MiB, 1, 70000, 0, 16 };
	enum { N = sizeof(len) / sizeof(len[0]) };
	size_t rlen[N], total = 0;
	struct done w[N], r[N];
	uint8_t *dst;
	int nr = 0;

	memset(w, 0, sizeof(w));
	memset(r, 0, sizeof(r));
	for (int i = 0; i < N; i++) {
		total += len[i];
		if (len[i])
			rlen[nr++] = len[i];
	}
	dst = malloc(total);
	if (!dst) {
		CHECK(false, "tcp: memory for mixed order");
		return;
	}
	queue_batch(ctx_a, p->client, true, pat + 5, len, N, w);
	queue_batch(ctx_b, p->server, false, dst, rlen, nr, r);
	CHECK(all_ok_in_order(w, N), "tcp: writes of 1 MiB, 8, 0, 3 MiB, ... complete in order");
	CHECK(all_ok_in_order(r, nr) && !memcmp(dst, pat + 5, total),
	      "tcp: reads of those sizes complete in order, intact");
	free(dst);
}

/*
 * An idle connection with a read pending each way lets both contexts
 * sleep (the spin before sleeping is bounded); a byte wakes each reader.
 */
static void test_idle(struct pair *p)
{
	struct done ra = { 0 }, rb = { 0 }, wa = { 0 }, wb = { 0 };
	struct idle_cpu u;
	char x = 0, y = 0;

	x_read(ctx_a, p->client, &x, 1, &ra);
	x_read(ctx_b, p->server, &y, 1, &rb);
	u = idle_cpu(ctx_a, ctx_b);
	CHECK(u.a_ms >= 0 && u.b_ms >= 0 && u.a_ms < u.wall_ms / 2 && u.b_ms < u.wall_ms / 2 &&
	      !atomic_load(&ra.calls) && !atomic_load(&rb.calls),
	      "tcp: idle connection, reads pending: contexts used %lld and %lld ms of CPU "
	      "in %lld ms", u.a_ms, u.b_ms, u.wall_ms);
	x_write(ctx_a, p->client, "X", 1, &wa);
	x_write(ctx_b, p->server, "Y", 1, &wb);
	CHECK(wait_done(&ra, 1) && wait_done(&rb, 1) && !ra.status && !rb.status && x == 'Y' &&
	      y == 'X' && wait_done(&wa, 1) && wait_done(&wb, 1),
	      "tcp: a byte from the peer wakes each sleeping reader");
}

/* Round trips driven from callbacks: ops queued inside callbacks of the same connection. */
static void test_pingpong(struct pair *p)
{
	enum { ROUNDS = 1000 };
	struct pp *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
	int64_t t0;
	bool ok;

	if (!a || !b) {
		CHECK(false, "tcp: memory for the ping-pong");
		goto out;
	}
	a->c = p->client;
	a->initiator = true;
	a->left = ROUNDS;
	b->c = p->server;
	b->left = ROUNDS;
	t0 = now_ms();
	tpu__ctx_run_sync(ctx_b, pp_start, b);
	tpu__ctx_run_sync(ctx_a, pp_start, a);
	ok = wait_for(&a->finished, 1, WAIT_MS) && wait_for(&b->finished, 1, WAIT_MS);
	t0 = now_ms() - t0;
	CHECK(ok && !a->err && !b->err && a->in[0] == (uint8_t)(2 * ROUNDS),
	      "tcp: %d round trips of 64 bytes driven from callbacks (%lld ms)", ROUNDS,
	      (long long)t0);
	/* The answering side's last write may still be calling back. */
	sleep_ms(10);
out:
	free(a);
	free(b);
}

/* ---- closing ------------------------------------------------------------- */

struct early {
	const char *addr;
	struct tpu__conn *c;
	uint8_t b[8];
	struct done r, w;
	tpu_status ret;
};

/* Connect, write and read in one task: the ops wait for the connection. */
static void connect_and_queue(void *arg)
{
	struct early *e = arg;
	struct iovec iov = { "early", 5 };

	e->ret = XP->connect(ctx_a, e->addr, &e->c);
	if (!e->ret)
		e->ret = op_writev(e->c, &iov, 1, done_cb, &e->w) |
			 op_read(e->c, e->b, 4, done_cb, &e->r);
}

static void test_early_ops(void)
{
	struct early e = { .addr = site.addr };
	int before = atomic_load(&site.q.n);
	struct done r = { 0 }, w = { 0 };
	char buf[8] = { 0 };
	bool ok;

	tpu__ctx_run_sync(ctx_a, connect_and_queue, &e);
	if (e.ret || !wait_for(&site.q.n, before + 1, WAIT_MS)) {
		CHECK(false, "tcp: connect, write and read in one go (%s)", tpu_status_name(e.ret));
		x_close(ctx_a, e.c);
		return;
	}
	x_read(ctx_b, site.q.conns[before], buf, 5, &r);
	x_write(ctx_b, site.q.conns[before], "late", 4, &w);
	ok = wait_done(&r, 1) && wait_done(&e.w, 1) && wait_done(&e.r, 1) && wait_done(&w, 1);
	CHECK(ok && !r.status && !strcmp(buf, "early") && !e.w.status,
	      "tcp: a write queued before the connection is made arrives");
	CHECK(ok && !e.r.status && !memcmp(e.b, "late", 4),
	      "tcp: a read queued before the connection is made completes");
	x_close(ctx_a, e.c);
	x_close(ctx_b, site.q.conns[before]);
}

/* Connect, queue, close, all before the connection is made. */
static void connect_and_close(void *arg)
{
	struct early *e = arg;
	struct iovec iov = { "x", 1 };

	e->ret = XP->connect(ctx_a, e->addr, &e->c);
	if (e->ret)
		return;
	e->ret = op_read(e->c, e->b, sizeof(e->b), done_cb, &e->r) |
		 op_writev(e->c, &iov, 1, done_cb, &e->w);
	e->c->ops->close(e->c);
}

static void test_close_connecting(void)
{
	struct site s = { 0 };
	struct early e = { 0 };

	/* Its own listener: whatever it accepts must not be taken for a pair's server. */
	if (site_open(&s, XP, ctx_a, ctx_b, "127.0.0.1:0")) {
		CHECK(false, "tcp: a listener for closing while connecting");
		return;
	}
	e.addr = s.addr;
	tpu__ctx_run_sync(ctx_a, connect_and_close, &e);
	CHECK(!e.ret && wait_done(&e.r, 1) && wait_done(&e.w, 1) && e.r.status == TPU_E_CLOSED &&
	      e.w.status == TPU_E_CLOSED,
	      "tcp: close while connecting fails the queued read and write with TPU_E_CLOSED");
	sleep_ms(20);
	for (int i = 0; i < atomic_load(&s.q.n); i++)
		x_close(ctx_b, s.q.conns[i]);
	site_close(&s);
}

/* A peer that does not read holds writes back; once it reads, they complete. */
static void test_stalled_reader(void)
{
	const size_t n = 16 * MiB;
	uint8_t *dst = malloc(n);
	struct done w = { 0 }, r = { 0 };
	struct pair p;

	if (!dst || !make_pair(&site, &p)) {
		CHECK(false, "tcp: a pair for a stalled reader");
		free(dst);
		return;
	}
	x_write(ctx_a, p.client, pat, n, &w);
	sleep_ms(100);
	CHECK(!atomic_load(&w.calls), "tcp: a 16 MiB write to a peer not reading waits");
	x_read(ctx_b, p.server, dst, n, &r);
	CHECK(wait_done(&w, 1) && wait_done(&r, 1) && !w.status && !r.status &&
	      !memcmp(dst, pat, n), "tcp: once the peer reads, it completes, intact");
	close_pair(&p);
	free(dst);
}

/*
 * Close with reads nobody answers (the first a RECV into its own memory)
 * and 64 MiB of writes a peer does not read: every callback once,
 * TPU_E_CLOSED, promptly; the peer reads what made it out, then
 * ECONNRESET.
 */
static void test_close_pending(void)
{
	size_t len[4] = { 16 * MiB, 16 * MiB, 16 * MiB, 16 * MiB }, rlen[2] = { MiB, 64 };
	struct done w[4], r[2];
	uint8_t *b = malloc(MiB + 64);
	struct counts c0;
	struct pair p;
	int64_t t0, took;
	size_t got;
	bool ok = true, once = true, same;
	tpu_status st;

	memset(w, 0, sizeof(w));
	memset(r, 0, sizeof(r));
	if (!b || !make_pair(&site, &p)) {
		CHECK(false, "tcp: a pair for close with pending ops");
		free(b);
		return;
	}
	counts_take(&c0);
	queue_batch(ctx_a, p.client, false, b, rlen, 2, r);
	queue_batch(ctx_a, p.client, true, pat, len, 4, w);
	sleep_ms(100);
	CHECK(!atomic_load(&w[3].calls) && !atomic_load(&r[0].calls),
	      "tcp: 64 MiB of writes to a peer not reading do not all complete");
	CHECK(moved(&c0, C_SHORT) > 0, "tcp: the kernel took a send in part (%llu short sends)",
	      moved(&c0, C_SHORT));
	t0 = now_ms();
	x_close(ctx_a, p.client);
	ok = wait_done(r, 2) && wait_done(w, 4);
	took = now_ms() - t0;
	for (int i = 0; ok && i < 2; i++)
		ok = r[i].status == TPU_E_CLOSED;
	/* The first writes may have left whole before the close; the ones after them did not. */
	for (int i = 0; ok && i < 4; i++)
		ok = w[i].status == TPU_E_CLOSED || (!w[i].status && (!i || !w[i - 1].status));
	CHECK(ok && w[3].status == TPU_E_CLOSED,
	      "tcp: close fails the pending reads and writes with TPU_E_CLOSED (%lld ms)",
	      (long long)took);
	sleep_ms(20);
	for (int i = 0; i < 4; i++)
		once &= atomic_load(&w[i].calls) == 1 && (i >= 2 || atomic_load(&r[i].calls) == 1);
	CHECK(once, "tcp: each pending callback ran exactly once");
	st = drain(ctx_b, p.server, pat, 64 * MiB, &got, &same);
	CHECK(st == -ECONNRESET && same,
	      "tcp: the peer reads the %zu MiB that left, intact, then ECONNRESET (%s)",
	      got / MiB, tpu_status_name(st));
	x_close(ctx_b, p.server);
	free(b);
}

/* Writing to a peer that closed fails with EPIPE. */
static void test_peer_gone_write(void)
{
	struct done w = { 0 }, r = { 0 };
	struct pair p;
	uint8_t b;
	int tries = 0;
	bool ok;

	if (!make_pair(&site, &p)) {
		CHECK(false, "tcp: a pair for writing to a closed peer");
		return;
	}
	x_close(ctx_a, p.client);
	/* The first bytes may still be taken: the peer's reset comes back for them. */
	for (; tries < 100; tries++) {
		memset(&w, 0, sizeof(w));
		if (x_write(ctx_b, p.server, "z", 1, &w) || !wait_done(&w, 1) || w.status)
			break;
		sleep_ms(1);
	}
	CHECK(w.status == -EPIPE,
	      "tcp: writing to a closed peer fails with EPIPE after %d writes (%s)", tries,
	      tpu_status_name(w.status));
	x_read(ctx_b, p.server, &b, 1, &r);
	ok = wait_done(&r, 1);
	CHECK(ok && r.status < 0 && !r.reentered, "tcp: after that error a read fails too (%s)",
	      tpu_status_name(r.status));
	x_close(ctx_b, p.server);
}

/* A plain socket as the peer, connected to the shared listener; -1 on failure. */
static int raw_peer(struct tpu__conn **server)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	int before = atomic_load(&site.q.n);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa.sin_port = htons((uint16_t)atoi(strrchr(site.addr, ':') + 1));
	if (fd >= 0 && (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
			!wait_for(&site.q.n, before + 1, WAIT_MS))) {
		close(fd);
		fd = -1;
	}
	*server = fd >= 0 ? site.q.conns[before] : NULL;
	return fd;
}

/* Close with SO_LINGER 0: the peer gets a reset, not an EOF. */
static void raw_reset(int fd)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };

	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(fd);
}

/* A peer that resets the connection: a pending read fails ECONNRESET, a write EPIPE. */
static void test_peer_reset(void)
{
	struct tpu__conn *s1 = NULL, *s2 = NULL;
	int f1 = raw_peer(&s1), f2 = raw_peer(&s2);
	struct done r = { 0 }, w = { 0 };
	uint8_t b[4];
	bool ok;

	if (f1 < 0 || f2 < 0) {
		CHECK(false, "tcp: plain sockets as peers");
		goto out;
	}
	x_read(ctx_b, s1, b, sizeof(b), &r);
	raw_reset(f1);
	f1 = -1;
	ok = wait_done(&r, 1);
	CHECK(ok && r.status == -ECONNRESET,
	      "tcp: a peer's reset fails a pending read, ECONNRESET (%s)",
	      tpu_status_name(r.status));
	raw_reset(f2);
	f2 = -1;
	sleep_ms(20);		/* the reset arrived: the send itself is refused */
	x_write(ctx_b, s2, "late", 4, &w);
	ok = wait_done(&w, 1);
	CHECK(ok && w.status == -EPIPE, "tcp: a write after the peer's reset fails with EPIPE (%s)",
	      tpu_status_name(w.status));
out:
	if (f1 >= 0)
		close(f1);
	if (f2 >= 0)
		close(f2);
	x_close(ctx_b, s1);
	x_close(ctx_b, s2);
}

static void test_eof_after_data(void)
{
	static const char last[] = "bytes written before the close";
	char got[32] = { 0 }, part[8] = { 0 };
	struct done w = { 0 }, r[3], pr = { 0 };
	struct pair p, q;
	bool ok;

	memset(r, 0, sizeof(r));
	if (!make_pair(&site, &p) || !make_pair(&site, &q)) {
		CHECK(false, "tcp: pairs for EOF");
		return;
	}
	x_write(ctx_a, p.client, last, sizeof(last), &w);
	wait_done(&w, 1);
	x_close(ctx_a, p.client);
	x_read(ctx_b, p.server, got, 4, &r[0]);
	x_read(ctx_b, p.server, got + 4, sizeof(last) - 4, &r[1]);
	x_read(ctx_b, p.server, got, 1, &r[2]);
	CHECK(all_ok_in_order(r, 2) && !memcmp(got, last, sizeof(last)),
	      "tcp: bytes written before a close are read");
	ok = wait_done(&r[2], 1);
	CHECK(ok && r[2].status == -ECONNRESET,
	      "tcp: the read after them fails with ECONNRESET (%s)", tpu_status_name(r[2].status));
	memset(&r[2], 0, sizeof(r[2]));
	x_read(ctx_b, p.server, got, 1, &r[2]);
	CHECK(wait_done(&r[2], 1) && r[2].status == -ECONNRESET,
	      "tcp: and so does every later read");
	x_close(ctx_b, p.server);

	/* A read pending when the peer closes, half satisfied. */
	x_read(ctx_b, q.server, part, 8, &pr);
	memset(&w, 0, sizeof(w));
	x_write(ctx_a, q.client, "abc", 3, &w);
	wait_done(&w, 1);
	x_close(ctx_a, q.client);
	ok = wait_done(&pr, 1);
	CHECK(ok && pr.status == -ECONNRESET,
	      "tcp: EOF in the middle of a pending read is ECONNRESET (%s)",
	      tpu_status_name(pr.status));
	x_close(ctx_b, q.server);
}

/* A write whose callback closes its own connection, with more queued behind it. */
struct wcloser {
	struct tpu__conn *c;
	uint8_t b[2][8];
	struct done own, w2, r[2];
	tpu_status ret;
};

static void wcloser_cb(void *arg, tpu_status st)
{
	struct wcloser *x = arg;

	x->c->ops->close(x->c);
	done_cb(&x->own, st);
}

static void queue_wcloser(void *arg)
{
	struct wcloser *x = arg;
	struct iovec a = { "first", 5 }, b = { "second", 6 };

	x->ret = op_read(x->c, x->b[0], 8, done_cb, &x->r[0]) |
		 op_read(x->c, x->b[1], 8, done_cb, &x->r[1]) |
		 op_writev(x->c, &a, 1, wcloser_cb, x) | op_writev(x->c, &b, 1, done_cb, &x->w2);
}

static void test_close_in_callbacks(void)
{
	struct pair p[6];
	struct closer own = { 0 }, other = { 0 }, during = { 0 };
	struct wcloser wc = { 0 };
	struct done r1 = { 0 }, w1 = { 0 }, r3 = { 0 }, r6 = { 0 }, wa = { 0 }, wb = { 0 };
	uint8_t b1[4], b3[4], b6[4];
	bool once;
	int made = 0;

	while (made < 6 && make_pair(&site, &p[made]))
		made++;
	if (made < 6) {
		CHECK(false, "tcp: pairs for closing in callbacks");
		while (made--)
			close_pair(&p[made]);
		return;
	}
	/* p0: a read callback closes its own connection; a read and a write wait behind it. */
	own.conn = p[0].client;
	own.close_own = true;
	tpu__ctx_run_sync(ctx_a, queue_closer_read, &own);
	x_read(ctx_a, p[0].client, b1, 4, &r1);
	x_write(ctx_a, p[0].client, pat, 32 * MiB, &w1);
	/* p1: a read callback closes p2's client, whose read is pending. */
	x_read(ctx_a, p[2].client, b3, 4, &r3);
	other.conn = p[1].client;
	other.other = p[2].client;
	tpu__ctx_run_sync(ctx_a, queue_closer_read, &other);
	x_write(ctx_b, p[0].server, "a", 1, &wa);
	x_write(ctx_b, p[1].server, "b", 1, &wb);
	CHECK(wait_done(&own.d, 1) && !own.d.status && own.byte == 'a',
	      "tcp: a read callback that closes its own connection");
	CHECK(wait_done(&r1, 1) && r1.status == TPU_E_CLOSED && wait_done(&w1, 1) &&
	      w1.status == TPU_E_CLOSED,
	      "tcp: the read and 32 MiB write behind it fail, TPU_E_CLOSED");
	CHECK(wait_done(&other.d, 1) && !other.d.status && other.byte == 'b' &&
	      wait_done(&r3, 1) && r3.status == TPU_E_CLOSED,
	      "tcp: a callback closing another connection fails that one's read");

	/* p3: a write callback closes its connection, with reads and a write pending. */
	wc.c = p[3].client;
	tpu__ctx_run_sync(ctx_a, queue_wcloser, &wc);
	CHECK(!wc.ret && wait_done(&wc.own, 1) && !wc.own.status && wait_done(&wc.w2, 1) &&
	      wc.w2.status == TPU_E_CLOSED && wait_done(wc.r, 2) &&
	      wc.r[0].status == TPU_E_CLOSED && wc.r[1].status == TPU_E_CLOSED,
	      "tcp: a write callback that closes its connection fails the ops behind it");

	/* p4: close calls a read back with TPU_E_CLOSED; that callback closes p5's client. */
	x_read(ctx_a, p[5].client, b6, 4, &r6);
	during.conn = p[4].client;
	during.other = p[5].client;
	tpu__ctx_run_sync(ctx_a, queue_closer_read, &during);
	x_close(ctx_a, p[4].client);
	CHECK(wait_done(&during.d, 1) && during.d.status == TPU_E_CLOSED && wait_done(&r6, 1) &&
	      r6.status == TPU_E_CLOSED,
	      "tcp: a callback run by close may close another connection");

	sleep_ms(20);
	once = atomic_load(&own.d.calls) == 1 && atomic_load(&r1.calls) == 1 &&
	       atomic_load(&w1.calls) == 1 && atomic_load(&other.d.calls) == 1 &&
	       atomic_load(&r3.calls) == 1 && atomic_load(&wc.own.calls) == 1 &&
	       atomic_load(&wc.w2.calls) == 1 && atomic_load(&wc.r[0].calls) == 1 &&
	       atomic_load(&wc.r[1].calls) == 1 && atomic_load(&during.d.calls) == 1 &&
	       atomic_load(&r6.calls) == 1;
	CHECK(once, "tcp: each called back once");
	wait_done(&wa, 1);
	wait_done(&wb, 1);
	x_close(ctx_a, p[1].client);
	for (int i = 0; i < 6; i++)
		x_close(ctx_b, p[i].server);
}

/* ---- zero-copy ----------------------------------------------------------- */

/* A write's callback that notes the zero-copy counters as it runs. */
struct zc_write {
	struct tpu__conn *c;
	const void *buf;
	size_t len;
	uint64_t zc, notif;	/* at the callback */
	struct done d;
	tpu_status ret;
};

static void zc_write_cb(void *arg, tpu_status st)
{
	struct zc_write *z = arg;

	z->zc = tpu__xport_tcp_counter("send_zc");
	z->notif = tpu__xport_tcp_counter("zc_notif");
	done_cb(&z->d, st);
}

static void queue_zc_write(void *arg)
{
	struct zc_write *z = arg;
	struct iovec iov = { (void *)z->buf, z->len };

	z->ret = op_writev(z->c, &iov, 1, zc_write_cb, z);
}

static void test_zerocopy(void)
{
	const size_t n = 4 * MiB;
	static const size_t mix[] = { 100, MiB, 100, 256u << 10, 0, 70000 };
	enum { NMIX = sizeof(mix) / sizeof(mix[0]) };
	size_t total = 0;
	uint8_t *dst = malloc(n);
	struct done w = { 0 }, r = { 0 }, mw[NMIX];
	struct zc_write zw = { 0 };
	struct counts c0;
	unsigned long long zc, notif;
	struct pair p, q;
	bool ok, same;
	size_t got;
	int64_t t0;
	tpu_status st;

	memset(mw, 0, sizeof(mw));
	if (!dst) {
		CHECK(false, "tcp: memory for zero-copy");
		return;
	}
	/* Read when a connection is made: both ends of these pairs send zero-copy. */
	setenv("TPU_TCP_ZEROCOPY", "1", 1);
	if (!make_pair(&site, &p)) {
		CHECK(false, "tcp: a zero-copy pair");
		goto out;
	}
	counts_take(&c0);
	zw.c = p.client;
	zw.buf = pat + 1;
	zw.len = n;
	x_read(ctx_b, p.server, dst, n, &r);
	tpu__ctx_run_sync(ctx_a, queue_zc_write, &zw);
	ok = !zw.ret && wait_done(&zw.d, 1) && wait_done(&r, 1) && !zw.d.status && !r.status &&
	     !memcmp(dst, pat + 1, n);
	zc = moved(&c0, C_ZC);
	notif = moved(&c0, C_NOTIF);
	if (zc)
		tap_diag("tcp zero-copy: %llu zero-copy sends, %llu notifications", zc, notif);
	else
		tap_diag("tcp zero-copy: no zero-copy send completed (the kernel refused): "
			 "the bytes went by plain sends");
	CHECK(ok, "tcp: a 4 MiB zero-copy write arrives intact (%s)",
	      zc ? "sent zero-copy" : "kernel refused, plain sends");
	/* The pages are the caller's again only once the kernel let go of them. */
	CHECK(ok && zw.notif - c0.v[C_NOTIF] >= zw.zc - c0.v[C_ZC],
	      "tcp: its callback came after every notification (%llu of %llu sends notified)",
	      (unsigned long long)(zw.notif - c0.v[C_NOTIF]),
	      (unsigned long long)(zw.zc - c0.v[C_ZC]));

	/* Writes to send zero-copy among small ones: in order, intact. */
	for (int i = 0; i < NMIX; i++)
		total += mix[i];
	memset(&r, 0, sizeof(r));
	queue_batch(ctx_a, p.client, true, pat + 9, mix, NMIX, mw);
	x_read(ctx_b, p.server, dst, total, &r);
	CHECK(all_ok_in_order(mw, NMIX) && wait_done(&r, 1) && !r.status &&
	      !memcmp(dst, pat + 9, total),
	      "tcp: zero-copy writes among small ones complete in order, intact");
	close_pair(&p);

	/* Pending to a peer not reading, then closed: its callback still comes. */
	if (!make_pair(&site, &q)) {
		CHECK(false, "tcp: a second zero-copy pair");
		goto out;
	}
	memset(&w, 0, sizeof(w));
	x_write(ctx_a, q.client, pat, 32 * MiB, &w);
	sleep_ms(100);
	CHECK(!atomic_load(&w.calls), "tcp: a 32 MiB zero-copy write to a peer not reading waits");
	t0 = now_ms();
	x_close(ctx_a, q.client);
	ok = wait_done(&w, 1);
	t0 = now_ms() - t0;
	CHECK(ok && w.status == TPU_E_CLOSED,
	      "tcp: closing calls it back, TPU_E_CLOSED (%s, %lld ms)", tpu_status_name(w.status),
	      (long long)t0);
	st = drain(ctx_b, q.server, pat, 32 * MiB, &got, &same);
	CHECK(st == -ECONNRESET && same, "tcp: the peer reads %zu MiB intact, then ECONNRESET (%s)",
	      got / MiB, tpu_status_name(st));
	x_close(ctx_b, q.server);
out:
	unsetenv("TPU_TCP_ZEROCOPY");
	/* Without the variable, connections made now send plainly. */
	memset(&w, 0, sizeof(w));
	memset(&r, 0, sizeof(r));
	if (make_pair(&site, &p)) {
		counts_take(&c0);
		x_write(ctx_a, p.client, pat, MiB, &w);
		x_read(ctx_b, p.server, dst, MiB, &r);
		CHECK(wait_done(&w, 1) && wait_done(&r, 1) && !w.status && !r.status &&
		      !moved(&c0, C_ZC), "tcp: without TPU_TCP_ZEROCOPY no send is zero-copy");
		close_pair(&p);
	} else {
		CHECK(false, "tcp: a pair without zero-copy");
	}
	free(dst);
}

/* ---- the list ------------------------------------------------------------ */

void test_xport_tcp(void)
{
	struct tpu_context_options o = { .flags = TPU_CTX_NO_KMOD };
	int fds0 = count_fds(), reentered0 = atomic_load(&reentered_calls);
	struct pair p;

	pat = malloc(PAT_LEN);
	if (!pat || tpu_context_create(&o, &ctx_a) || tpu_context_create(&o, &ctx_b)) {
		CHECK(false, "tcp: two contexts and a pattern");
		tpu_context_destroy(ctx_a);
		free(pat);
		return;
	}
	fill(pat, PAT_LEN, 0x7c9);
	test_names();
	test_addresses();
	if (site.l)
		test_other_hosts();
	test_refused();
	test_listener_close();
	if (site.l && make_pair(&site, &p)) {
		test_basic(&p);
		test_arguments(&p);
		test_iovecs(&p);
		test_bulk(&p);
		test_read_sizes(&p);
		test_staging(&p);
		test_staged_then_large(&p);
		test_from_stage(&p);
		test_many(&p);
		test_order_mixed(&p);
		test_idle(&p);
		test_pingpong(&p);
		close_pair(&p);
	} else {
		CHECK(false, "tcp: a connected pair");
	}
	if (site.l) {
		test_early_ops();
		test_close_connecting();
		test_stalled_reader();
		test_close_pending();
		test_peer_gone_write();
		test_peer_reset();
		test_eof_after_data();
		test_close_in_callbacks();
		test_zerocopy();
	}
	site_close(&site);
	CHECK(!atomic_load(&site.q.errs), "tcp: the listener never reported an error");
	CHECK(atomic_load(&reentered_calls) == reentered0,
	      "tcp: no callback ran inside the call that queued it (%d did)",
	      atomic_load(&reentered_calls) - reentered0);
	settle();
	tpu_context_destroy(ctx_a);
	tpu_context_destroy(ctx_b);
	CHECK(count_fds() == fds0, "tcp: no descriptor leaked (%d before, %d after)", fds0,
	      count_fds());
	free(pat);
}
