// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * What a hostile peer can make a worker of the remote rendezvous hold
 * (Documentation/security.rst, "Resource bounds"), with the peer a plain
 * pipe of this process that speaks the rendezvous's messages itself:
 *
 *   - a flood of REQs for keys never sent: past TPU_REMOTE_MAX_REQS the
 *     excess is answered -ENOBUFS at once, the REQs within the bound are
 *     still served when their keys come, and another worker is served
 *     meanwhile;
 *   - an answer nobody asked for, carrying a large tensor: the worker ends
 *     that pipe at the descriptor instead of taking a buffer for it;
 *   - an answer to a real request with a tensor longer than the request
 *     allowed: the receive fails -EPROTO and the tensor is not read;
 *   - no answer to a CANCEL (a peer stopped or stuck): a receive that timed
 *     out or was cancelled ends within REMOTE_CANCEL_GRACE_NS anyway, and
 *     the answers that come later are dropped on a pipe that stays up,
 *     each freeing its record; past REMOTE_ABANDONED_MAX records left
 *     waiting, the pipe ends;
 *   - a peer that asks for a large tensor and stops reading it: the send's
 *     deadline passes, and within REMOTE_STALL_NS more its pipe ends and
 *     send_wait returns.
 *
 * Contexts allow only the basic channel, so that every tensor crosses the
 * pipe's own stream (no cma read on this side's behalf).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "pipe_harness.h"
#include "remote/remote.h"
#include "remote_harness.h"
#include "tap.h"
#include "tpu_user.h"

#define TASK_A		"/job:worker/replica:0/task:0"
#define TASK_B		"/job:worker/replica:0/task:1"
#define TASK_H		"/job:worker/replica:0/task:9"
#define MAX_REQS	16
#define FLOOD		40
#define BIG		(64u << 20)
#define INC		7	/* the source incarnation of the keys */

/* Write one rendezvous message on @p (a tensor if @len); the write's status, 1 if none came. */
static tpu_status h_write(struct tpu_pipe *p, const struct remote_hdr *h, const void *data,
			  size_t len, unsigned int wait_ms)
{
	uint8_t meta[1024];
	struct tpu_message_tensor t = { .data = (void *)data, .len = len };
	struct tpu_message m = { .metadata = meta };
	struct rec r;
	struct tag tg = { &r, 0 };
	tpu_status st;

	if (tpu__remote_wire_size(h->key_len) > sizeof(meta))
		return -EINVAL;
	tpu__remote_wire_put(h, meta);
	m.metadata_len = tpu__remote_wire_size(h->key_len);
	if (len) {
		m.tensors = &t;
		m.ntensors = 1;
	}
	rec_init(&r);
	st = tpu_pipe_write(p, &m, on_write, &tg);
	if (st)
		return st;
	/* The message must outlive the write: wait for it in any case. */
	if (!rec_wait_ms(&r, 1, wait_ms) && !rec_wait(&r, 1))
		return 1;
	return r.st[0];
}

/*
 * Read the next rendezvous message from @p within @ms: its header into @h
 * (the key is not kept); a tensor is read into @buf of @size.  0, or what failed.
 */
static tpu_status h_read(struct tpu_pipe *p, struct remote_hdr *h, void *buf, size_t size,
			 unsigned int ms)
{
	struct rec r;
	struct tag tg = { &r, 0 };
	struct tpu_message *d;
	tpu_status st;

	rec_init(&r);
	st = tpu_pipe_read_descriptor(p, on_desc, &tg);
	if (st)
		return st;
	if (!rec_wait_ms(&r, 1, ms))
		return -ETIMEDOUT;
	if (r.st[0])
		return r.st[0];
	d = r.msg[0];
	st = tpu__remote_wire_get(d->metadata, d->metadata_len, h);
	h->key = NULL;
	if (st || d->ntensors > 1 || (d->ntensors && d->tensors[0].len > size))
		return -EPROTO;
	if (d->ntensors)
		d->tensors[0].data = buf;
	st = tpu_pipe_read(p, d, on_write, &tg);
	if (st)
		return st;
	if (!rec_wait_ms(&r, 2, ms))
		return -ETIMEDOUT;
	return r.st[1];
}

/* A worker whose context has @xports (NULL: tcp). */
static bool worker_open_on(struct rh_worker *w, const char *task, const char *peer_url,
			   const char *xports)
{
	struct tpu_context_options o = { .channels = "basic", .transports = xports ?: "tcp" };
	struct tpu_remote_task peer = { TASK_A, peer_url };
	struct tpu_remote_options ro = {
		.task = task, .peers = peer_url ? &peer : NULL, .npeers = peer_url ? 1 : 0,
	};

	return rh_worker_open(w, &o, NULL, &ro);
}

static bool worker_open(struct rh_worker *w, const char *task, const char *peer_url)
{
	return worker_open_on(w, task, peer_url, NULL);
}

/* The hostile peer: a context and a pipe to @url, HELLO sent as task @task. */
struct hostile {
	struct tpu_context *ctx;
	struct tpu_pipe *pipe;
};

static bool hostile_open(struct hostile *h, const char *url)
{
	struct tpu_context_options o = { .channels = "basic", .transports = "tcp" };
	struct remote_hdr hello = { .type = REMOTE_HELLO, .key = (const uint8_t *)TASK_H,
				    .key_len = strlen(TASK_H) };

	memset(h, 0, sizeof(*h));
	return !tpu_context_create(&o, &h->ctx) && !tpu_pipe_connect(h->ctx, url, &h->pipe) &&
	       h_write(h->pipe, &hello, NULL, 0, 5000) == 0;
}

static void hostile_close(struct hostile *h)
{
	tpu_pipe_close(h->pipe);
	tpu_context_destroy(h->ctx);
}

static void req_flood(void)
{
	struct rh_worker a = { 0 }, b = { 0 };
	struct hostile h = { 0 };
	char key[RH_KEY_MAX], v[8];
	size_t klen, len = 0;
	int refused = 0, first_refused = 0, other = 0;
	bool up, sent = true;
	struct remote_hdr got;
	uint64_t payload = 0x1122334455667788ull, back = 0;
	struct tpu_tensor t = { .data = &payload, .len = sizeof(payload) };
	struct tpu_tensor dst = { .data = v, .len = sizeof(v) };

	snprintf(v, sizeof(v), "%d", MAX_REQS);
	setenv("TPU_REMOTE_MAX_REQS", v, 1);
	up = worker_open(&a, TASK_A, NULL) && hostile_open(&h, a.url);
	for (int i = 1; up && i <= FLOOD; i++) {
		char edge[32];
		struct remote_hdr req = { .type = REMOTE_REQ, .id = (uint64_t)i, .len = 8 };

		snprintf(edge, sizeof(edge), "never-%d", i);
		klen = rh_key(key, TASK_A, TASK_H, edge, INC, 0);
		req.key = (const uint8_t *)key;
		req.key_len = klen;
		sent &= klen && h_write(h.pipe, &req, NULL, 0, 5000) == 0;
	}
	while (up && sent && refused + other < FLOOD - MAX_REQS) {
		if (h_read(h.pipe, &got, NULL, 0, 5000))
			break;
		if (got.type == REMOTE_RESP && got.status == -ENOBUFS) {
			if (!refused)
				first_refused = (int)got.id;
			refused++;
		} else {
			other++;
		}
	}
	CHECK(up && sent && refused == FLOOD - MAX_REQS && !other && first_refused == MAX_REQS + 1,
	      "bounds_remote_reqs_past_the_bound_are_answered_enobufs "
	      "(%d of %d, first id %d, %d other)", refused, FLOOD - MAX_REQS, first_refused, other);

	/* A REQ within the bound is still served once its key is sent. */
	klen = rh_key(key, TASK_A, TASK_H, "never-1", INC, 0);
	CHECK(up && !tpu_rendezvous_send(a.rdv, key, klen, &t, 0, NULL, NULL) &&
	      !h_read(h.pipe, &got, &back, sizeof(back), 5000) && got.type == REMOTE_RESP &&
	      got.id == 1 && !got.status && back == payload,
	      "bounds_remote_a_parked_req_within_the_bound_is_still_served");

	/* Another worker is served while the flooding peer holds its bound. */
	up = up && worker_open(&b, TASK_B, a.url);
	klen = rh_key(key, TASK_A, TASK_B, "legit", INC, 0);
	CHECK(up && !tpu_rendezvous_send(a.rdv, key, klen, &t, 0, NULL, NULL) &&
	      !tpu_rendezvous_recv_wait(b.rdv, key, klen, &dst, 10ull * 1000000000ull, &len) &&
	      len == sizeof(payload) && !memcmp(v, &payload, sizeof(v)),
	      "bounds_remote_another_worker_is_served_during_the_flood");
	rh_worker_close(&b);
	hostile_close(&h);
	rh_worker_close(&a);
	unsetenv("TPU_REMOTE_MAX_REQS");
}

/* Large zero-filled memory that costs nothing until read (the zero page). */
static void *big_zeros(void)
{
	void *p = mmap(NULL, BIG, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

static void unsolicited_answer(void)
{
	struct rh_worker a = { 0 };
	struct hostile h = { 0 };
	struct remote_hdr resp = { .type = REMOTE_RESP, .id = 4242, .len = BIG };
	struct remote_hdr got;
	void *zeros = big_zeros();
	tpu_status wst = 1, rst = 1;
	bool up = zeros && worker_open(&a, TASK_A, NULL) && hostile_open(&h, a.url);

	/* The worker must hang up at the descriptor: the 64 MiB never cross. */
	if (up) {
		wst = h_write(h.pipe, &resp, zeros, BIG, 5000);
		rst = h_read(h.pipe, &got, NULL, 0, 5000);
	}
	CHECK(up && wst != 0 && wst != 1 && rst != 0 && rst != -ETIMEDOUT,
	      "bounds_remote_an_answer_to_no_request_ends_its_pipe_unread (write %s, read %s)",
	      tpu_status_name(wst), tpu_status_name(rst));
	hostile_close(&h);
	/* The worker still serves a well-behaved peer. */
	memset(&h, 0, sizeof(h));
	if (up && hostile_open(&h, a.url)) {
		char key[RH_KEY_MAX];
		size_t klen = rh_key(key, TASK_A, TASK_H, "after", INC, 0);
		uint64_t payload = 7, back = 0;
		struct tpu_tensor t = { .data = &payload, .len = sizeof(payload) };
		struct remote_hdr req = { .type = REMOTE_REQ, .id = 1, .len = 8,
					  .key = (const uint8_t *)key, .key_len = klen };

		CHECK(!tpu_rendezvous_send(a.rdv, key, klen, &t, 0, NULL, NULL) &&
		      !h_write(h.pipe, &req, NULL, 0, 5000) &&
		      !h_read(h.pipe, &got, &back, sizeof(back), 5000) && got.id == 1 && back == 7,
		      "bounds_remote_the_worker_serves_a_new_peer_after_an_unsolicited_answer");
		hostile_close(&h);
	} else {
		hostile_close(&h);
		CHECK(false,
		      "bounds_remote_the_worker_serves_a_new_peer_after_an_unsolicited_answer");
	}
	rh_worker_close(&a);
	if (zeros)
		munmap(zeros, BIG);
}

/* A receive's result, for the test thread to wait on. */
struct recv_rec {
	struct rec r;
	struct tag t;
	size_t len;
};

static void on_recv(void *arg, tpu_status st, size_t len)
{
	struct recv_rec *rr = arg;

	rr->len = len;
	rec_post(&rr->t, st, NULL);
}

/*
 * The producer task TASK_H as a listener of this process in worker A's
 * map: A's first receive from it opens the pipe that asked_peer_pipe()
 * gives (its HELLO read).
 */
struct asked_peer {
	struct tpu_context *ctx;
	struct tpu_listener *l;
	struct rec acc;
	struct tag at;
};

/* Over @xport: "tcp" (A's context has tcp only) or "shm" (A's has both). */
static bool asked_peer_open_on(struct asked_peer *h, struct rh_worker *a, const char *xport)
{
	struct tpu_context_options o = { .channels = "basic", .transports = xport };
	bool shm = !strcmp(xport, "shm");
	char url[300], shm_url[64];
	const char *lurl = "tcp://127.0.0.1:0";

	memset(h, 0, sizeof(*h));
	rec_init(&h->acc);
	h->at = (struct tag){ &h->acc, 0 };
	snprintf(shm_url, sizeof(shm_url), "shm://tpu-unit-asked-%d", (int)getpid());
	if (shm)
		lurl = shm_url;
	return worker_open_on(a, TASK_A, NULL, shm ? "tcp,shm" : NULL) &&
	       !tpu_context_create(&o, &h->ctx) &&
	       !tpu_listener_create(h->ctx, &lurl, 1, &h->l) &&
	       !tpu_listener_url(h->l, xport, url, sizeof(url)) &&
	       !tpu_rendezvous_add_peer(a->rdv, TASK_H, url) &&
	       !tpu_listener_accept(h->l, on_accept, &h->at);
}

static bool asked_peer_open(struct asked_peer *h, struct rh_worker *a)
{
	return asked_peer_open_on(h, a, "tcp");
}

static struct tpu_pipe *asked_peer_pipe(struct asked_peer *h)
{
	struct remote_hdr hello;

	if (!rec_wait(&h->acc, 1) || h->acc.st[0])
		return NULL;
	return !h_read(h->acc.pipe, &hello, NULL, 0, 5000) && hello.type == REMOTE_HELLO ?
	       h->acc.pipe : NULL;
}

static void asked_peer_close(struct asked_peer *h)
{
	tpu_listener_close(h->l);
	tpu_context_destroy(h->ctx);
}

static void oversized_answer(void)
{
	struct asked_peer h;
	struct recv_rec rr;
	struct rh_worker a = { 0 };
	struct remote_hdr got, resp = { .type = REMOTE_RESP, .len = BIG };
	void *zeros = big_zeros();
	char key[RH_KEY_MAX], dst_buf[16];
	size_t klen = rh_key(key, TASK_H, TASK_A, "oversized", INC, 0);
	struct tpu_tensor dst = { .data = dst_buf, .len = sizeof(dst_buf) };
	struct tpu_pipe *p = NULL;
	tpu_status wst = 1;
	bool up, answered;

	rec_init(&rr.r);
	rr.t = (struct tag){ &rr.r, 0 };
	up = zeros && asked_peer_open(&h, &a) &&
	     /* The worker's receive asks this peer for at most 16 bytes. */
	     !tpu_rendezvous_recv(a.rdv, key, klen, &dst, 10ull * 1000000000ull, on_recv, &rr);
	p = up ? asked_peer_pipe(&h) : NULL;
	up = p && !h_read(p, &got, NULL, 0, 5000) && got.type == REMOTE_REQ && got.len == 16;
	if (up) {
		resp.id = got.id;
		wst = h_write(p, &resp, zeros, BIG, 5000);
	}
	answered = up && rec_wait_ms(&rr.r, 1, 5000);
	CHECK(answered && rr.r.st[0] == -EPROTO,
	      "bounds_remote_a_receive_answered_past_its_length_fails_eproto (%s)",
	      tpu_status_name(answered ? rr.r.st[0] : 0));
	CHECK(up && wst != 0 && wst != 1,
	      "bounds_remote_an_answer_longer_than_its_request_is_not_read (write %s)",
	      tpu_status_name(wst));
	tpu_pipe_close(p);
	rh_worker_close(&a);
	rec_wait_ms(&rr.r, 1, 5000);
	asked_peer_close(&h);
	if (zeros)
		munmap(zeros, BIG);
}

/* Milliseconds since @t0 (CLOCK_MONOTONIC). */
static long ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

/* Worker @a's fetches abandoned on their pipes (UINT_MAX if it cannot tell). */
static unsigned int abandoned(struct rh_worker *a)
{
	unsigned int n = UINT_MAX;

	return tpu__remote_abandoned(a->rdv, &n) ? UINT_MAX : n;
}

/* Post worker @a's receive of iteration @i of "silent" into @buf (16 bytes); its key in @key. */
static bool post_silent(struct rh_worker *a, unsigned int i, uint64_t timeout_ns,
			struct recv_rec *rr, char *buf, char *key, size_t *klen)
{
	rec_init(&rr->r);
	rr->t = (struct tag){ &rr->r, 0 };
	*klen = rh_key(key, TASK_H, TASK_A, "silent", INC, i);
	return !tpu_rendezvous_recv(a->rdv, key, *klen, &(struct tpu_tensor){ .data = buf, .len = 16 },
				    timeout_ns, on_recv, rr);
}

/*
 * A peer that reads the CANCELs and never answers: the receive that timed
 * out (200 ms) and the one cancelled end within the grace, not when (or
 * if) the peer answers; the answers it sends later are read and dropped,
 * and the pipe serves the next receive.  The library before waited for
 * those answers for ever.
 */
static void silent_after_cancel(void)
{
	struct asked_peer h;
	struct recv_rec timed, cancelled, next;
	struct rh_worker a = { 0 };
	struct remote_hdr req1 = { 0 }, req2 = { 0 }, req3 = { 0 }, c1 = { 0 }, c2 = { 0 };
	struct remote_hdr resp = { .type = REMOTE_RESP };
	char key[RH_KEY_MAX], b1[16], b2[16], b3[16] = "";
	struct tpu_pipe *p = NULL;
	struct timespec t0;
	size_t klen;
	long took1 = -1, took2 = -1;
	bool up, ok1 = false, ok2 = false, ok3 = false;

	up = asked_peer_open(&h, &a);
	/* A receive that times out after 200 ms: its CANCEL is read, and not answered. */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	up = up && post_silent(&a, 1, 200ull * 1000000ull, &timed, b1, key, &klen);
	p = up ? asked_peer_pipe(&h) : NULL;
	up = p && !h_read(p, &req1, NULL, 0, 5000) && req1.type == REMOTE_REQ &&
	     !h_read(p, &c1, NULL, 0, 5000) && c1.type == REMOTE_CANCEL && c1.id == req1.id;
	if (up) {
		ok1 = rec_wait_ms(&timed.r, 1, 5000);
		took1 = ms_since(&t0);
	}
	CHECK(ok1 && timed.r.st[0] == -ETIMEDOUT && took1 < 200 + 3000,
	      "bounds_remote_a_timed_out_receive_ends_though_its_cancel_is_not_answered (%s after "
	      "%ld ms)", tpu_status_name(ok1 ? timed.r.st[0] : 0), took1);
	/* One cancelled by the caller: the same. */
	up = up && post_silent(&a, 2, 60ull * 1000000000ull, &cancelled, b2, key, &klen) &&
	     !h_read(p, &req2, NULL, 0, 5000) && req2.type == REMOTE_REQ;
	if (up) {
		clock_gettime(CLOCK_MONOTONIC, &t0);
		up = !tpu_rendezvous_cancel(a.rdv, key, klen) &&
		     !h_read(p, &c2, NULL, 0, 5000) && c2.type == REMOTE_CANCEL && c2.id == req2.id;
	}
	if (up) {
		ok2 = rec_wait_ms(&cancelled.r, 1, 5000);
		took2 = ms_since(&t0);
	}
	CHECK(ok2 && cancelled.r.st[0] == -ECANCELED && took2 < 3000,
	      "bounds_remote_a_cancelled_receive_ends_though_its_cancel_is_not_answered (%s after "
	      "%ld ms)", tpu_status_name(ok2 ? cancelled.r.st[0] : 0), took2);
	CHECK(up && abandoned(&a) == 2,
	      "bounds_remote_both_stay_on_their_pipe_for_their_answers (%u)", abandoned(&a));
	/* The late answers (a tensor for the first, the cancel's status for the second). */
	if (up) {
		resp.id = req1.id;
		resp.len = 16;
		up = !h_write(p, &resp, "late-first-reply", 16, 5000);
		resp.id = req2.id;
		resp.len = 0;
		resp.status = -ECANCELED;
		up = up && !h_write(p, &resp, NULL, 0, 5000);
	}
	/* The pipe still serves the next receive. */
	up = up && post_silent(&a, 3, 10ull * 1000000000ull, &next, b3, key, &klen) &&
	     !h_read(p, &req3, NULL, 0, 5000) && req3.type == REMOTE_REQ;
	if (up) {
		resp.id = req3.id;
		resp.len = 16;
		resp.status = 0;
		up = !h_write(p, &resp, "the-third-reply!", 16, 5000);
	}
	ok3 = up && rec_wait_ms(&next.r, 1, 5000) && !next.r.st[0] && next.len == 16 &&
	      !memcmp(b3, "the-third-reply!", 16);
	CHECK(ok3, "bounds_remote_late_answers_are_dropped_and_the_pipe_serves_the_next_receive");
	/* Read in order, before the third's: each freed its record. */
	CHECK(ok3 && abandoned(&a) == 0, "bounds_remote_a_late_answer_frees_its_record (%u left)",
	      abandoned(&a));
	tpu_pipe_close(p);
	rh_worker_close(&a);
	asked_peer_close(&h);
}

/*
 * Read @n messages on @p; how many came.  Then, if @end, one more: the
 * status that ended the pipe (a read that times out stays posted, so it
 * is only asked for where the pipe must end).
 */
static unsigned int drain(struct tpu_pipe *p, unsigned int n, tpu_status *end)
{
	struct remote_hdr h;
	unsigned int got = 0;

	while (got < n && !h_read(p, &h, NULL, 0, 5000))
		got++;
	if (end)
		*end = h_read(p, &h, NULL, 0, 5000);
	return got;
}

/*
 * A peer that never answers, and receives that time out one after the
 * other: each stays on the pipe, abandoned, for its answer.  At
 * REMOTE_ABANDONED_MAX of them the pipe is still up; one more ends it (the
 * peer reads it closed after the REQs and CANCELs), and the records go
 * with it.  The library before kept them until the pipe ended otherwise.
 */
static void abandoned_bound(void)
{
	static struct recv_rec rr[REMOTE_ABANDONED_MAX + 1];
	static char bufs[REMOTE_ABANDONED_MAX + 1][16];
	unsigned int i, n, ended = 0, read1 = 0, read2 = 0;
	struct tpu_pipe *p = NULL;
	struct asked_peer h;
	struct rh_worker a = { 0 };
	char key[RH_KEY_MAX];
	tpu_status end2 = 0;
	unsigned int pipes = 0, acc = 0;
	size_t klen;
	bool up;

	up = asked_peer_open(&h, &a);
	for (i = 0; up && i < REMOTE_ABANDONED_MAX; i++)
		up = post_silent(&a, 100 + i, 50ull * 1000000ull, &rr[i], bufs[i], key, &klen);
	p = up ? asked_peer_pipe(&h) : NULL;
	for (i = 0; p && i < REMOTE_ABANDONED_MAX; i++)
		ended += rec_wait_ms(&rr[i].r, 1, 10000) && rr[i].r.st[0] == -ETIMEDOUT;
	n = abandoned(&a);
	CHECK(p && ended == REMOTE_ABANDONED_MAX && n == REMOTE_ABANDONED_MAX,
	      "bounds_remote_%u_receives_time_out_with_their_cancels_unanswered (%u ended, %u "
	      "abandoned)", REMOTE_ABANDONED_MAX, ended, n);
	if (p)
		read1 = drain(p, 2 * REMOTE_ABANDONED_MAX, NULL);
	tpu__remote_pipe_count(a.rdv, &pipes, &acc);
	CHECK(p && read1 == 2 * REMOTE_ABANDONED_MAX && pipes == 1,
	      "bounds_remote_at_the_bound_the_pipe_stays_up (%u REQs and CANCELs read, %u pipes)",
	      read1, pipes);
	up = p && post_silent(&a, 99, 50ull * 1000000ull, &rr[REMOTE_ABANDONED_MAX],
			      bufs[REMOTE_ABANDONED_MAX], key, &klen);
	up = up && rec_wait_ms(&rr[REMOTE_ABANDONED_MAX].r, 1, 10000) &&
	     rr[REMOTE_ABANDONED_MAX].r.st[0] == -ETIMEDOUT;
	if (up)
		read2 = drain(p, 2, &end2);
	n = abandoned(&a);
	tpu__remote_pipe_count(a.rdv, &pipes, &acc);
	CHECK(up && read2 == 2 && end2 && end2 != -ETIMEDOUT && n == 0 && pipes == 0,
	      "bounds_remote_one_more_ends_the_pipe_and_frees_them (%u messages, then %s; %u left, "
	      "%u pipes)", read2, tpu_status_name(end2), n, pipes);
	tpu_pipe_close(p);
	rh_worker_close(&a);
	asked_peer_close(&h);
}

struct stalled_send {
	struct rh_worker *a;
	const char *key;
	size_t klen;
	void *data;
	tpu_status st;
	_Atomic long ms;	/* -1 until send_wait returned */
};

static void *stalled_send_thread(void *arg)
{
	struct stalled_send *s = arg;
	struct timespec t0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	s->st = tpu_rendezvous_send_wait(s->a->rdv, s->key, s->klen,
					 &(struct tpu_tensor){ .data = s->data, .len = BIG }, 0,
					 500ull * 1000000ull);
	s->ms = ms_since(&t0);
	return NULL;
}

/*
 * The peer asks for 64 MiB and never reads them: the write fills the
 * socket and stops, and the send, being written, cannot be withdrawn at
 * its deadline (500 ms).  Its pipe ends when no such write ended for
 * REMOTE_STALL_NS (300 ms here), and send_wait returns.  The library
 * before returned when the peer closed the pipe, if ever.
 */
static void stalled_reader(void)
{
	struct rh_worker a = { 0 };
	struct hostile h = { 0 };
	char key[RH_KEY_MAX];
	size_t klen = rh_key(key, TASK_A, TASK_H, "stalled", INC, 0);
	struct remote_hdr req = { .type = REMOTE_REQ, .id = 1, .len = BIG };
	struct stalled_send s = { &a, key, klen, big_zeros(), 1, -1 };
	pthread_t th;
	bool up, started = false;
	long took;

	up = s.data && worker_open(&a, TASK_A, NULL) &&
	     !tpu__remote_set_stall(a.rdv, 300ull * 1000000ull) && hostile_open(&h, a.url);
	req.key = (const uint8_t *)key;
	req.key_len = klen;
	up = up && !h_write(h.pipe, &req, NULL, 0, 5000);
	if (up)
		started = !pthread_create(&th, NULL, stalled_send_thread, &s);
	for (int i = 0; started && i < 100 && atomic_load(&s.ms) < 0; i++)
		usleep(50000);
	took = atomic_load(&s.ms);
	CHECK(started && took >= 0 && took < 500 + 3000 && s.st == TPU_E_PEER_GONE,
	      "bounds_remote_a_send_whose_reader_stalls_ends_after_its_deadline (%s after %ld ms)",
	      tpu_status_name(took >= 0 ? s.st : 0), took);
	hostile_close(&h);
	if (started)
		pthread_join(th, NULL);
	rh_worker_close(&a);
	if (s.data)
		munmap(s.data, BIG);
}

/*
 * Memory whose reading stops half-way: its first STALL_AT bytes read as
 * STALL_BYTE; past them, pages never touched are registered with a
 * userfaultfd that nobody serves, so a thread copying from them waits
 * (signals or none) until the descriptor closes, then reads zeros.
 */
#define STALL_AT	(4u << 20)
#define STALL_BYTE	0x5a

struct stall_mem {
	char *base;
	int uffd;
};

/* NULL if userfaultfd is not to be had here (the reason in @why). */
static char *stall_mem_open(struct stall_mem *sm, const char **why)
{
	struct uffdio_api api = { .api = UFFD_API };
	struct uffdio_register reg = { .mode = UFFDIO_REGISTER_MODE_MISSING };
	char *p;

	sm->base = NULL;
	sm->uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
	if (sm->uffd < 0)
		sm->uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC);
	if (sm->uffd < 0 || ioctl(sm->uffd, UFFDIO_API, &api)) {
		*why = "no userfaultfd here";
		goto fail;
	}
	p = mmap(NULL, BIG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		 -1, 0);
	if (p == MAP_FAILED) {
		*why = "no memory";
		goto fail;
	}
	memset(p, STALL_BYTE, STALL_AT);
	reg.range.start = (uintptr_t)(p + STALL_AT);
	reg.range.len = BIG - STALL_AT;
	if (ioctl(sm->uffd, UFFDIO_REGISTER, &reg)) {
		munmap(p, BIG);
		*why = "userfaultfd refuses anonymous memory";
		goto fail;
	}
	sm->base = p;
	return p;
fail:
	if (sm->uffd >= 0)
		close(sm->uffd);
	sm->uffd = -1;
	return NULL;
}

/* Let the thread waiting on @sm's memory go. */
static void stall_mem_release(struct stall_mem *sm)
{
	if (sm->uffd >= 0)
		close(sm->uffd);
	sm->uffd = -1;
}

static void stall_mem_close(struct stall_mem *sm)
{
	stall_mem_release(sm);
	if (sm->base)
		munmap(sm->base, BIG);
}

/*
 * The peer answers a 64 MiB receive and stops writing after 4 MiB: over
 * shm, whose ring its context's thread fills from a tensor that stops
 * reading there.  The receive times out (200 ms) with its tensor being
 * read into its memory, so it cannot end then; after the grace (1 s) and
 * the stall bound (300 ms here) its pipe ends and the receive ends
 * ETIMEDOUT.  The library before held it until the peer closed the pipe,
 * if ever.
 */
static void stalled_answer(void)
{
	struct asked_peer h;
	struct recv_rec rr, wr;
	struct rh_worker a = { 0 };
	struct remote_hdr got, resp = { .type = REMOTE_RESP, .len = BIG };
	struct stall_mem sm;
	const char *why = NULL;
	void *src, *dst;
	uint8_t meta[1024];
	struct tpu_message_tensor t = { .len = BIG };
	struct tpu_message m = { .metadata = meta, .tensors = &t, .ntensors = 1 };
	char key[RH_KEY_MAX];
	size_t klen = rh_key(key, TASK_H, TASK_A, "stalled-answer", INC, 0);
	struct tpu_pipe *p = NULL;
	struct timespec t0;
	bool up, ended = false;
	long took = -1;

	/* A thread stopped in a page fault would stop every thread under valgrind. */
	if (under_valgrind()) {
		CHECK(true, "bounds_remote_stalled_answer # SKIP under valgrind");
		return;
	}
	src = stall_mem_open(&sm, &why);
	if (!src) {
		CHECK(true, "bounds_remote_stalled_answer # SKIP %s", why);
		return;
	}
	t.data = src;
	dst = mmap(NULL, BIG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		   -1, 0);
	if (dst == MAP_FAILED)
		dst = NULL;
	rec_init(&rr.r);
	rr.t = (struct tag){ &rr.r, 0 };
	rec_init(&wr.r);
	wr.t = (struct tag){ &wr.r, 0 };
	up = dst && asked_peer_open_on(&h, &a, "shm") &&
	     !tpu__remote_set_stall(a.rdv, 300ull * 1000000ull);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	up = up && !tpu_rendezvous_recv(a.rdv, key, klen,
					&(struct tpu_tensor){ .data = dst, .len = BIG },
					200ull * 1000000ull, on_recv, &rr);
	p = up ? asked_peer_pipe(&h) : NULL;
	up = p && !h_read(p, &got, NULL, 0, 5000) && got.type == REMOTE_REQ && got.len == BIG;
	if (up) {
		resp.id = got.id;
		tpu__remote_wire_put(&resp, meta);
		m.metadata_len = tpu__remote_wire_size(0);
		up = !tpu_pipe_write(p, &m, on_write, &wr.t);
	}
	if (up) {
		ended = rec_wait_ms(&rr.r, 1, 10000);
		took = ms_since(&t0);
	}
	CHECK(ended && rr.r.st[0] == -ETIMEDOUT && took >= 200 + 1000 + 300 &&
	      took < 200 + 1000 + 300 + 3000,
	      "bounds_remote_a_receive_whose_answer_stalls_ends_after_its_grace_and_the_stall_bound "
	      "(%s after %ld ms)", tpu_status_name(ended ? rr.r.st[0] : 0), took);
	/* All but what the writer had in hand when it stopped (at most the 1 MiB ring's worth). */
	CHECK(ended && !memcmp(dst, src, STALL_AT / 2),
	      "bounds_remote_the_stalled_answer_was_being_read (its first %u bytes arrived)",
	      STALL_AT / 2);
	stall_mem_release(&sm);
	if (up)
		rec_wait_ms(&wr.r, 1, 10000);
	tpu_pipe_close(p);
	rh_worker_close(&a);
	rec_wait_ms(&rr.r, 1, 5000);
	asked_peer_close(&h);
	CHECK(up && rr.r.n == 1, "bounds_remote_a_stalled_answer_calls_its_receive_back_once (%d)",
	      rr.r.n);
	stall_mem_close(&sm);
	if (dst)
		munmap(dst, BIG);
}

void test_bounds_remote(void)
{
	req_flood();
	unsolicited_answer();
	oversized_answer();
	silent_after_cancel();
	abandoned_bound();
	stalled_reader();
	stalled_answer();
}
