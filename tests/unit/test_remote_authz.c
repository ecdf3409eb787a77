// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Who may do what to a worker of the remote rendezvous, without a job
 * secret (Documentation/security.rst): two workers of this process, A
 * (task 0) and B (task 1), over tcp on loopback, and hostile clients that
 * open pipes to A and speak the rendezvous's wire format: an ABORT from
 * no one, a HELLO that claims B so as to answer A's requests with forged
 * bytes, a request for a key another task consumes (sent, or asked for
 * first by its consumer), a second claim of a connected task.  After each, the legitimate workers must still be served.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "remote/remote.h"
#include "tap.h"

#define TASK(i)	"/job:w/replica:0/task:" #i
#define SEC	1000000000ull

struct att {
	struct tpu_context *ctx;
	struct tpu_pipe *p;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int ndesc, nread;
	int taken;			/* descriptors att_next() handled */
	tpu_status desc_st, read_st;
	struct tpu_message *desc;
	uint8_t meta[512];
	size_t meta_len;
};

static void att_desc(void *arg, tpu_status st, struct tpu_message *d)
{
	struct att *a = arg;

	pthread_mutex_lock(&a->lock);
	a->desc_st = st;
	a->desc = d;
	a->meta_len = 0;
	if (!st && d->metadata_len <= sizeof(a->meta)) {
		memcpy(a->meta, d->metadata, d->metadata_len);
		a->meta_len = d->metadata_len;
	}
	a->ndesc++;
	pthread_cond_broadcast(&a->cond);
	pthread_mutex_unlock(&a->lock);
}

static void att_read(void *arg, tpu_status st, struct tpu_message *m)
{
	struct att *a = arg;

	(void)m;
	pthread_mutex_lock(&a->lock);
	a->read_st = st;
	a->nread++;
	pthread_cond_broadcast(&a->cond);
	pthread_mutex_unlock(&a->lock);
}

static void att_written(void *arg, tpu_status st, struct tpu_message *m)
{
	(void)arg;
	(void)st;
	(void)m;
}

/* Wait until *@count reaches @n, at most @ms; false on timeout. */
static bool att_wait(struct att *a, const int *count, int n, int ms)
{
	struct timespec until;
	bool ok;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += ms / 1000;
	until.tv_nsec += (long)(ms % 1000) * 1000000;
	if (until.tv_nsec >= 1000000000) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&a->lock);
	while (*count < n && pthread_cond_timedwait(&a->cond, &a->lock, &until) == 0)
		;
	ok = *count >= n;
	pthread_mutex_unlock(&a->lock);
	return ok;
}

static bool att_open(struct att *a, const char *url)
{
	struct tpu_context_options o = { .transports = "tcp" };

	memset(a, 0, sizeof(*a));
	pthread_mutex_init(&a->lock, NULL);
	pthread_cond_init(&a->cond, NULL);
	return !tpu_context_create(&o, &a->ctx) && !tpu_pipe_connect(a->ctx, url, &a->p) &&
	       !tpu_pipe_read_descriptor(a->p, att_desc, a);
}

static void att_close(struct att *a)
{
	tpu_pipe_close(a->p);
	tpu_context_destroy(a->ctx);
	pthread_mutex_destroy(&a->lock);
	pthread_cond_destroy(&a->cond);
}

/* Write one message of the rendezvous's wire format, with a tensor if @data. */
static void att_send(struct att *a, enum remote_msg type, uint64_t id, tpu_status status,
		     uint64_t len, const char *key, const void *data)
{
	static uint8_t meta[8][512];
	static struct tpu_message msg[8];
	static struct tpu_message_tensor t[8];
	static int slot;
	struct remote_hdr h = { .type = type, .id = id, .status = status, .len = len,
				.key = (const uint8_t *)key, .key_len = key ? strlen(key) : 0 };
	int i = slot++ % 8;

	tpu__remote_wire_put(&h, meta[i]);
	msg[i] = (struct tpu_message){ .metadata = meta[i],
				       .metadata_len = tpu__remote_wire_size(h.key_len) };
	if (data) {
		t[i] = (struct tpu_message_tensor){ .data = (void *)data, .len = len };
		msg[i].tensors = &t[i];
		msg[i].ntensors = 1;
	}
	tpu_pipe_write(a->p, &msg[i], att_written, NULL);
}

/*
 * The next message A sends this client, within @ms: 0 and its header (a
 * tensor read into @buf), -ETIMEDOUT, or the pipe's error (A closed it).
 */
static tpu_status att_next(struct att *a, struct remote_hdr *h, void *buf, size_t cap, int ms)
{
	int want = a->taken + 1, reads = a->nread + 1;
	struct tpu_message *d;
	tpu_status st;

	if (!att_wait(a, &a->ndesc, want, ms))
		return -ETIMEDOUT;
	a->taken = want;
	if (a->desc_st)
		return a->desc_st;
	d = a->desc;
	st = tpu__remote_wire_get(a->meta, a->meta_len, h);
	if (st)
		return st;
	if (d->ntensors == 1) {
		if (d->tensors[0].len > cap)
			return -EMSGSIZE;
		d->tensors[0].data = buf;
	}
	/* Here: whether a tensor came (the descriptor is the pipe's again once read). */
	h->len = d->ntensors;
	if (tpu_pipe_read(a->p, d, att_read, a) || !att_wait(a, &a->nread, reads, ms))
		return -EIO;
	tpu_pipe_read_descriptor(a->p, att_desc, a);
	return a->read_st;
}

/* The pipe was closed by A within @ms. */
static bool att_closed(struct att *a, int ms)
{
	struct remote_hdr h;
	uint8_t buf[64];
	tpu_status st;

	do
		st = att_next(a, &h, buf, sizeof(buf), ms);
	while (!st);
	return st != -ETIMEDOUT;
}

static size_t key_of(char *buf, int src, int dst, const char *edge)
{
	char s[64], d[64];
	struct tpu_key k = { .src_incarnation = 1 };
	size_t len = 0;

	snprintf(s, sizeof(s), "/job:w/replica:0/task:%d/device:CPU:0", src);
	snprintf(d, sizeof(d), "/job:w/replica:0/task:%d/device:CPU:0", dst);
	k.src_device = (struct tpu_str){ s, strlen(s) };
	k.dst_device = (struct tpu_str){ d, strlen(d) };
	k.edge_name = (struct tpu_str){ edge, strlen(edge) };
	tpu_key_build(&k, buf, 256, &len);
	return len;
}

struct done {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int n;
	tpu_status st;
};

static void on_recv(void *arg, tpu_status st, size_t len)
{
	struct done *d = arg;

	(void)len;
	pthread_mutex_lock(&d->lock);
	d->st = st;
	d->n++;
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->lock);
}

static void on_send(void *arg, tpu_status st)
{
	on_recv(arg, st, 0);
}

static bool done_wait(struct done *d, int s)
{
	struct timespec until;
	bool ok;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += s;
	pthread_mutex_lock(&d->lock);
	while (!d->n && pthread_cond_timedwait(&d->cond, &d->lock, &until) == 0)
		;
	ok = d->n > 0;
	pthread_mutex_unlock(&d->lock);
	return ok;
}

static struct tpu_rendezvous *worker(struct tpu_context **ctx, const char *task)
{
	struct tpu_context_options o = { .transports = "tcp" };
	const char *lu = "tcp://127.0.0.1:0";
	struct tpu_remote_options ro = { .task = task, .listen_urls = &lu, .nlisten = 1 };
	struct tpu_rendezvous *r = NULL;

	if (tpu_context_create(&o, ctx) || tpu_rendezvous_create_remote(*ctx, &ro, &r))
		return NULL;
	return r;
}

/* B sends @edge to A, A receives it: both fine and the bytes B's. */
static bool b_to_a(struct tpu_rendezvous *a, struct tpu_rendezvous *b, const char *edge)
{
	char key[256], got[16] = "";
	size_t klen = key_of(key, 1, 0, edge), len = 0;
	struct tpu_tensor src = { .data = (void *)"REAL", .len = 4 }, dst = { .data = got, .len = 16 };

	return !tpu_rendezvous_send(b, key, klen, &src, 0, NULL, NULL) &&
	       !tpu_rendezvous_recv_wait(a, key, klen, &dst, 10 * SEC, &len) && len == 4 &&
	       !memcmp(got, "REAL", 4);
}

struct workers {
	struct tpu_context *ca, *cb;
	struct tpu_rendezvous *a, *b;
	char ua[300], ub[300];
};

/* A (task 0) and B (task 1) know each other; A's map also has task 2 (never up). */
static bool workers_up(struct workers *w)
{
	memset(w, 0, sizeof(*w));
	w->a = worker(&w->ca, TASK(0));
	w->b = worker(&w->cb, TASK(1));
	return w->a && w->b && !tpu_rendezvous_url(w->a, "tcp", w->ua, sizeof(w->ua)) &&
	       !tpu_rendezvous_url(w->b, "tcp", w->ub, sizeof(w->ub)) &&
	       !tpu_rendezvous_add_peer(w->a, TASK(1), w->ub) &&
	       !tpu_rendezvous_add_peer(w->b, TASK(0), w->ua) &&
	       !tpu_rendezvous_add_peer(w->a, TASK(2), "tcp://127.0.0.1:1");
}

static void workers_down(struct workers *w)
{
	tpu_rendezvous_destroy(w->a);
	tpu_rendezvous_destroy(w->b);
	tpu_context_destroy(w->ca);
	tpu_context_destroy(w->cb);
}

/* ABORT from a pipe that never said who it is, and from a task not in the map. */
static void anonymous_abort(void)
{
	static struct att x1, x2, x6;
	struct workers w;

	if (!workers_up(&w)) {
		CHECK(false, "remote_authz_setup");
		goto out;
	}
	CHECK(att_open(&x1, w.ua), "anon_open");
	att_send(&x1, REMOTE_ABORT, 0, -ECANCELED, 0, NULL, NULL);
	CHECK(att_closed(&x1, 5000), "anonymous_abort_closes_the_pipe");
	CHECK(att_open(&x2, w.ua), "stranger_open");
	att_send(&x2, REMOTE_HELLO, 0, 0, 0, TASK(7), NULL);
	att_send(&x2, REMOTE_ABORT, 0, -ECANCELED, 0, NULL, NULL);
	CHECK(att_closed(&x2, 5000), "abort_from_a_task_not_in_the_map_closes_the_pipe");
	/* A REQ before any HELLO: closed too. */
	CHECK(att_open(&x6, w.ua), "nohello_open");
	att_send(&x6, REMOTE_REQ, 1, 0, 64, "k", NULL);
	CHECK(att_closed(&x6, 5000), "request_before_hello_closes_the_pipe");
	CHECK(b_to_a(w.a, w.b, "after-abort"), "anonymous_abort_did_not_abort_the_worker");
out:
	att_close(&x1);
	att_close(&x2);
	att_close(&x6);
	workers_down(&w);
}

/* A HELLO claiming B, to answer A's receives from B with forged bytes. */
static void forged_answer(void)
{
	static struct att x3;
	struct done d = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0 };
	char key[256], got[16] = "";
	struct remote_hdr h;
	uint8_t buf[64];
	bool saw_req = false;
	struct workers w;
	size_t klen;
	tpu_status st;

	if (!workers_up(&w)) {
		CHECK(false, "remote_authz_setup");
		goto out;
	}
	CHECK(att_open(&x3, w.ua), "forger_open");
	att_send(&x3, REMOTE_HELLO, 0, 0, 0, TASK(1), NULL);
	att_send(&x3, REMOTE_REQ, 1, 0, 0, NULL, NULL);	/* answered at once: A read the HELLO */
	CHECK(att_next(&x3, &h, buf, sizeof(buf), 5000) == 0 && h.type == REMOTE_RESP,
	      "forger_synced");
	klen = key_of(key, 1, 0, "forged");
	CHECK(tpu_rendezvous_recv(w.a, key, klen, &(struct tpu_tensor){ .data = got, .len = 16 },
				  10 * SEC, on_recv, &d) == 0, "victim_receive_posted");
	st = att_next(&x3, &h, buf, sizeof(buf), 1500);
	if (!st && h.type == REMOTE_REQ) {
		saw_req = true;
		att_send(&x3, REMOTE_RESP, h.id, 0, 4, NULL, "EVIL");
	}
	CHECK(!saw_req, "forged_hello_draws_no_request");
	CHECK(tpu_rendezvous_send(w.b, key, klen, &(struct tpu_tensor){ .data = (void *)"REAL",
									 .len = 4 }, 0, NULL, NULL) == 0,
	      "producer_sends");
	CHECK(done_wait(&d, 10) && d.st == 0 && !memcmp(got, "REAL", 4),
	      "answer_taken_only_from_the_producer (got %.4s)", got);
	CHECK(b_to_a(w.a, w.b, "after-forgery"), "legitimate_workers_served_after_forgery");
out:
	att_close(&x3);
	workers_down(&w);
}

/* A member asks for a key that B consumes; then a second claim of B. */
static void stolen_key(void)
{
	static struct att x4, x5;
	struct done s = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0 };
	char key[256], got[16] = "";
	struct remote_hdr h = { 0 };
	uint8_t buf[64] = { 0 };
	struct workers w;
	size_t klen, len = 0;
	tpu_status st;

	if (!workers_up(&w)) {
		CHECK(false, "remote_authz_setup");
		goto out;
	}
	klen = key_of(key, 0, 1, "stolen");
	CHECK(tpu_rendezvous_send(w.a, key, klen, &(struct tpu_tensor){ .data = (void *)"SECRET",
									 .len = 6 }, 0, on_send, &s) == 0,
	      "victim_sends");
	CHECK(att_open(&x5, w.ua), "thief_open");
	att_send(&x5, REMOTE_HELLO, 0, 0, 0, TASK(2), NULL);
	att_send(&x5, REMOTE_REQ, 42, 0, 64, key, NULL);
	st = att_next(&x5, &h, buf, sizeof(buf), 5000);
	CHECK(st == 0 && h.type == REMOTE_RESP && h.status == -EACCES && h.len == 0 &&
	      memcmp(buf, "SECRET", 6), "stolen_key_refused (status %d, tensor %d)", h.status,
	      (int)h.len);
	CHECK(tpu_rendezvous_recv_wait(w.b, key, klen, &(struct tpu_tensor){ .data = got, .len = 16 },
				       10 * SEC, &len) == 0 && len == 6 && !memcmp(got, "SECRET", 6),
	      "consumer_still_served_after_theft_attempt");
	CHECK(done_wait(&s, 10) && s.st == 0, "victim_send_completed");

	/* B has its pipe to A now: a second claim of task 1 is refused. */
	CHECK(att_open(&x4, w.ua), "second_claim_open");
	att_send(&x4, REMOTE_HELLO, 0, 0, 0, TASK(1), NULL);
	CHECK(att_closed(&x4, 5000), "second_claim_of_a_connected_task_refused");
	CHECK(b_to_a(w.a, w.b, "after-all"), "legitimate_workers_served_after_every_attack");
out:
	att_close(&x4);
	att_close(&x5);
	workers_down(&w);
}

/*
 * A key whose REQ came first: the outbox entry that REQ made keeps what
 * its parse found, and a REQ from another task for the same bytes is
 * checked against it (no parse of its own) and refused.
 */
static void stolen_waiting_key(void)
{
	static struct att x7, x8;
	char key[256], got[16] = "";
	struct remote_hdr h = { 0 };
	struct workers w;
	tpu_status st;
	size_t klen;

	if (!workers_up(&w)) {
		CHECK(false, "remote_authz_setup");
		goto out;
	}
	klen = key_of(key, 0, 2, "waiting");
	/* Task 2 (in A's map) asks first; a REQ with no key, refused at once, syncs. */
	CHECK(att_open(&x7, w.ua), "consumer_open");
	att_send(&x7, REMOTE_HELLO, 0, 0, 0, TASK(2), NULL);
	att_send(&x7, REMOTE_REQ, 7, 0, 16, key, NULL);
	att_send(&x7, REMOTE_REQ, 8, 0, 0, NULL, NULL);
	st = att_next(&x7, &h, got, sizeof(got), 5000);
	CHECK(st == 0 && h.type == REMOTE_RESP && h.id == 8 && h.status == TPU_E_BAD_KEY,
	      "request_of_the_consumer_waits (id %llu, status %d)", (unsigned long long)h.id,
	      h.status);
	/* Task 3 (not in the map, may ask for what it consumes) asks for task 2's key. */
	CHECK(att_open(&x8, w.ua), "thief_open");
	att_send(&x8, REMOTE_HELLO, 0, 0, 0, TASK(3), NULL);
	att_send(&x8, REMOTE_REQ, 9, 0, 16, key, NULL);
	st = att_next(&x8, &h, got, sizeof(got), 5000);
	CHECK(st == 0 && h.type == REMOTE_RESP && h.id == 9 && h.status == -EACCES && h.len == 0,
	      "waiting_key_refused_to_another_task (status %d, tensor %d)", h.status, (int)h.len);
	CHECK(tpu_rendezvous_send(w.a, key, klen, &(struct tpu_tensor){ .data = (void *)"MINE",
									 .len = 4 }, 0, NULL, NULL) == 0,
	      "producer_sends_the_waiting_key");
	st = att_next(&x7, &h, got, sizeof(got), 5000);
	CHECK(st == 0 && h.type == REMOTE_RESP && h.id == 7 && h.status == 0 && h.len == 1 &&
	      !memcmp(got, "MINE", 4), "waiting_request_answered_with_the_tensor (status %d)",
	      h.status);
	CHECK(b_to_a(w.a, w.b, "after-waiting"), "legitimate_workers_served_after_waiting_theft");
out:
	att_close(&x7);
	att_close(&x8);
	workers_down(&w);
}

void test_remote_authz(void)
{
	anonymous_abort();
	forged_answer();
	stolen_key();
	stolen_waiting_key();
}
