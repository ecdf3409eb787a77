// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * lib/xfer against hostile peers built here on raw pipes that speak the
 * wire (xfer_msg.c): what they can make an agent hold is bounded all
 * together (queued notifications, bytes in service, unread answers, dead
 * pipes), and a requester does not take a fake target's repeated answer
 * for the chunk it skipped.  Part of the list xfer_trust.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tap.h"
#include "xfer/xfer.h"

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
	tpu__put_le64(el, rb->id);
	tpu__put_le64(el + 8, 0);
	tpu__put_le64(el + 16, BIG);
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

void test_xfer_hostile(void)
{
	notif_flood();
	serve_budget();
	peer_churn();
	unread_answers();
	duplicate_answers();
}
