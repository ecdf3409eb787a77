// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * One pipe per pair of workers with a job secret (lib/remote/remote_peer.c,
 * REMOTE_HELLO_BOTH_WAYS): two workers of this process, A (task 0) and B
 * (task 1), over tcp on loopback, that both receive from each other.
 * With a secret they keep one pipe between them, also when both connect at
 * once (the one the lower task opened stays); without one, two as before.
 * A member that says BOTH_WAYS is asked on its own pipe, and an answer
 * there is taken only for a request made there: one for a request made on
 * another pipe ends the pipe.  Without a secret that HELLO draws nothing.
 *
 * A worker that starts late (retry_hint in remote_peer.c): A's receive
 * from B waits, parked, while A's connect to B is retried; once B is up
 * and opens its own pipe to A, B's HELLO makes A retry at once instead of
 * at the end of its back-off (set to a minute here, so that only the
 * HELLO can have done it).  The HELLO is only a hint: one naming a task
 * nobody waits for, or a task whose early retry just failed, brings
 * nothing forward.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "remote_harness.h"
#include "tap.h"

#define SECRET	"one-pipe-test-secret"

/* Worker @task of job w, with the job secret or explicitly none. */
static bool worker(struct rh_worker *w, const char *task, bool secret)
{
	return rh_worker_open(w, NULL, secret ? SECRET : "",
			      &(struct tpu_remote_options){ .task = task });
}

/* @from sends iteration @n of @edge to @to (tasks @src, @dst); @to receives it: bytes checked. */
static bool pass(struct tpu_rendezvous *from, struct tpu_rendezvous *to, int src, int dst,
		 const char *edge, int n)
{
	static const char *const task[] = { RH_TASK(0), RH_TASK(1) };
	char key[RH_KEY_MAX], want[32] = "", got[16] = "";
	size_t klen = rh_key(key, task[src], task[dst], edge, 1, n), len = 0;
	struct tpu_tensor s = { .data = want, .len = 16 }, d = { .data = got, .len = 16 };

	snprintf(want, sizeof(want), "%d>%d #%d", src, dst, n);
	return !tpu_rendezvous_send(from, key, klen, &s, 0, NULL, NULL) &&
	       !tpu_rendezvous_recv_wait(to, key, klen, &d, 10 * RH_SEC, &len) && len == 16 &&
	       !memcmp(got, want, 16);
}

/* Whether @r has @pipes live pipes, @acc of them accepted, within @ms. */
static bool pipes_are(struct tpu_rendezvous *r, unsigned int pipes, unsigned int acc, int ms,
		      unsigned int *got)
{
	unsigned int n = 0, a = 0;

	for (;;) {
		if (tpu__remote_pipe_count(r, &n, &a))
			return false;
		*got = n * 100 + a;
		if ((n == pipes && a == acc) || ms <= 0)
			return n == pipes && a == acc;
		usleep(10000);
		ms -= 10;
	}
}

/* Round trips both ways, @n of each; false at the first that fails. */
static bool both_ways(struct rh_pair *w, const char *edge, int n)
{
	for (int i = 0; i < n; i++)
		if (!pass(w->b.rdv, w->a.rdv, 1, 0, edge, i) ||
		    !pass(w->a.rdv, w->b.rdv, 0, 1, edge, i))
			return false;
	return true;
}

/* One after the other: A asks B first (A opens), then B asks A. */
static void sequential(bool secret)
{
	unsigned int got = 0;
	struct rh_pair w;

	if (!rh_pair_up(&w, secret ? SECRET : "")) {
		CHECK(false, "onepipe_setup");
		goto out;
	}
	CHECK(pass(w.b.rdv, w.a.rdv, 1, 0, "first", 0), "b_to_a_first (secret %d)", secret);
	CHECK(pass(w.a.rdv, w.b.rdv, 0, 1, "second", 0), "a_to_b_then (secret %d)", secret);
	CHECK(both_ways(&w, "seq", 20), "round_trips_both_ways (secret %d)", secret);
	if (secret) {
		bool ok = pipes_are(w.a.rdv, 1, 0, 0, &got);

		CHECK(ok, "with_secret_a_keeps_its_one_pipe (pipes*100+accepted %u)", got);
		ok = pipes_are(w.b.rdv, 1, 1, 0, &got);
		CHECK(ok, "with_secret_b_asks_on_the_pipe_a_opened (%u)", got);
	} else {
		bool ok = pipes_are(w.a.rdv, 2, 1, 0, &got);

		CHECK(ok, "without_secret_a_has_two_pipes (%u)", got);
		ok = pipes_are(w.b.rdv, 2, 1, 0, &got);
		CHECK(ok, "without_secret_b_has_two_pipes (%u)", got);
	}
out:
	rh_pair_down(&w);
}

#define RACE_KEYS	16

/*
 * Both post receives from the other before any pipe exists, so both
 * connect at once; every receive completes, then one pipe is left (the
 * one A, the lower task, opened) and carries round trips both ways.
 */
static void simultaneous(void)
{
	static char ga[RACE_KEYS][16], gb[RACE_KEYS][16], sa[RACE_KEYS][16], sb[RACE_KEYS][16];
	struct rh_done da = RH_DONE_INIT, db = RH_DONE_INIT;
	char key[RH_KEY_MAX], want[32] = "";
	unsigned int got = 0;
	bool ok = true;
	struct rh_pair w;
	size_t klen;
	int i;

	if (!rh_pair_up(&w, SECRET)) {
		CHECK(false, "onepipe_race_setup");
		goto out;
	}
	for (i = 0; i < RACE_KEYS; i++) {
		klen = rh_key(key, RH_TASK(1), RH_TASK(0), "race", 1, i);
		ok &= !tpu_rendezvous_recv(w.a.rdv, key, klen,
					   &(struct tpu_tensor){ .data = ga[i], .len = 16 },
					   10 * RH_SEC, rh_on_recv, &da);
		klen = rh_key(key, RH_TASK(0), RH_TASK(1), "race", 1, i);
		ok &= !tpu_rendezvous_recv(w.b.rdv, key, klen,
					   &(struct tpu_tensor){ .data = gb[i], .len = 16 },
					   10 * RH_SEC, rh_on_recv, &db);
	}
	CHECK(ok, "race_receives_posted");
	/* A send keeps its memory until it completes: one buffer per key. */
	for (i = 0; i < RACE_KEYS; i++) {
		snprintf(want, sizeof(want), "1>0 #%d", i);
		memcpy(sb[i], want, 16);
		klen = rh_key(key, RH_TASK(1), RH_TASK(0), "race", 1, i);
		ok &= !tpu_rendezvous_send(w.b.rdv, key, klen,
					   &(struct tpu_tensor){ .data = sb[i], .len = 16 }, 0,
					   NULL, NULL);
		snprintf(want, sizeof(want), "0>1 #%d", i);
		memcpy(sa[i], want, 16);
		klen = rh_key(key, RH_TASK(0), RH_TASK(1), "race", 1, i);
		ok &= !tpu_rendezvous_send(w.a.rdv, key, klen,
					   &(struct tpu_tensor){ .data = sa[i], .len = 16 }, 0,
					   NULL, NULL);
	}
	CHECK(ok, "race_sends_posted");
	ok = rh_done_wait(&da, RACE_KEYS, 10) && rh_done_wait(&db, RACE_KEYS, 10) && !da.bad &&
	     !db.bad;
	CHECK(ok, "no_request_lost_in_the_race (a %d/%d bad %d, b %d/%d bad %d)", da.n,
	      RACE_KEYS, da.bad, db.n, RACE_KEYS, db.bad);
	for (i = 0, ok = true; i < RACE_KEYS; i++) {
		snprintf(want, sizeof(want), "1>0 #%d", i);
		ok &= !memcmp(ga[i], want, 16);
		snprintf(want, sizeof(want), "0>1 #%d", i);
		ok &= !memcmp(gb[i], want, 16);
	}
	CHECK(ok, "race_bytes_right");
	ok = pipes_are(w.a.rdv, 1, 0, 5000, &got);
	CHECK(ok, "race_leaves_a_one_pipe_its_own (pipes*100+accepted %u)", got);
	ok = pipes_are(w.b.rdv, 1, 1, 5000, &got);
	CHECK(ok, "race_leaves_b_one_pipe_a_opened (%u)", got);
	CHECK(both_ways(&w, "after-race", 20), "round_trips_after_the_race");
	ok = pipes_are(w.a.rdv, 1, 0, 0, &got) && pipes_are(w.b.rdv, 1, 1, 0, &got);
	CHECK(ok, "still_one_pipe_after_round_trips (%u)", got);
out:
	rh_pair_down(&w);
}

/* ---- a member that speaks the wire format itself ---- */

/*
 * A's map has tasks 1 and 2 at URLs nobody listens on; members X and Y
 * (they hold the secret) open pipes to A, claim them and say BOTH_WAYS.
 * A asks each on its own pipe; X answers Y's request: A ends X's pipe and
 * X's receive fails, while Y's answer is still taken.  Without a secret
 * the same HELLO draws no request.
 */
static void shared_pipe_answers(bool secret)
{
	struct rh_done d1 = RH_DONE_INIT, d2 = RH_DONE_INIT;
	static struct rh_att x, y;
	char key1[RH_KEY_MAX], key2[RH_KEY_MAX], g1[16] = "", g2[16] = "";
	const char *sec = secret ? SECRET : "";
	struct rh_worker a;
	struct remote_hdr h1 = { 0 }, h2 = { 0 }, h;
	size_t k1 = rh_key(key1, RH_TASK(1), RH_TASK(0), "shared", 1, 0);
	size_t k2 = rh_key(key2, RH_TASK(2), RH_TASK(0), "shared", 1, 0);
	tpu_status s1, s2;
	bool asked1, asked2;

	memset(&x, 0, sizeof(x));
	memset(&y, 0, sizeof(y));
	if (!worker(&a, RH_TASK(0), secret) ||
	    tpu_rendezvous_add_peer(a.rdv, RH_TASK(1), "tcp://127.0.0.1:1") ||
	    tpu_rendezvous_add_peer(a.rdv, RH_TASK(2), "tcp://127.0.0.1:1") ||
	    !rh_att_open(&x, a.url, sec) || !rh_att_open(&y, a.url, sec)) {
		CHECK(false, "shared_setup");
		goto out;
	}
	rh_att_send(&x, REMOTE_HELLO, 0, 0, REMOTE_HELLO_BOTH_WAYS, RH_TASK(1), NULL);
	rh_att_send(&y, REMOTE_HELLO, 0, 0, REMOTE_HELLO_BOTH_WAYS, RH_TASK(2), NULL);
	/* A REQ A cannot serve is answered at once: A has read the HELLO by then. */
	rh_att_send(&x, REMOTE_REQ, 77, 0, 0, NULL, NULL);
	rh_att_send(&y, REMOTE_REQ, 78, 0, 0, NULL, NULL);
	CHECK(!rh_att_next(&x, &h, NULL, 0, 5000) && h.type == REMOTE_RESP &&
	      !rh_att_next(&y, &h, NULL, 0, 5000) && h.type == REMOTE_RESP,
	      "hellos_read (secret %d)", secret);
	CHECK(!tpu_rendezvous_recv(a.rdv, key1, k1, &(struct tpu_tensor){ .data = g1, .len = 16 },
				   10 * RH_SEC, rh_on_recv, &d1) &&
	      !tpu_rendezvous_recv(a.rdv, key2, k2, &(struct tpu_tensor){ .data = g2, .len = 16 },
				   10 * RH_SEC, rh_on_recv, &d2), "receives_posted");
	/* A header's key points into its member's struct: compared before its next read. */
	s1 = rh_att_next(&x, &h1, NULL, 0, 1500);
	asked1 = !s1 && h1.type == REMOTE_REQ && h1.key_len == k1 && !memcmp(h1.key, key1, k1);
	s2 = rh_att_next(&y, &h2, NULL, 0, 1500);
	asked2 = !s2 && h2.type == REMOTE_REQ && h2.key_len == k2 && !memcmp(h2.key, key2, k2);
	if (!secret) {
		CHECK(s1 == -ETIMEDOUT && s2 == -ETIMEDOUT,
		      "without_secret_both_ways_hello_draws_no_request (%d %d)", s1, s2);
		goto out;
	}
	CHECK(asked1, "member_asked_on_its_own_pipe (%d, type %d)", s1, h1.type);
	CHECK(asked2, "second_member_asked_on_its_own_pipe (%d, type %d)", s2, h2.type);
	if (!asked1 || !asked2)
		goto out;
	/* X answers the request A made on Y's pipe. */
	rh_att_send(&x, REMOTE_RESP, h2.id, 0, 16, NULL, "FORGED-BY-X-----");
	CHECK(rh_att_next(&x, &h, NULL, 0, 5000) != -ETIMEDOUT,
	      "answer_to_another_pipes_request_ends_the_pipe");
	CHECK(rh_done_wait(&d1, 1, 10) && d1.st != 0 && memcmp(g1, "FORGED", 6),
	      "receive_on_that_pipe_fails (%d)", d1.st);
	CHECK(d2.n == 0, "other_receive_untouched");
	rh_att_send(&y, REMOTE_RESP, h2.id, 0, 16, NULL, "FROM-Y----------");
	CHECK(rh_done_wait(&d2, 1, 10) && d2.st == 0 && !memcmp(g2, "FROM-Y", 6),
	      "answer_on_the_pipe_asked_is_taken (%d, %.6s)", d2.st, g2);
out:
	rh_att_close(&x);
	rh_att_close(&y);
	rh_worker_close(&a);
}

/* ---- a worker that starts late ---- */

#define MS	1000000ull

/*
 * A loopback port bound but not listening (connects to it are refused),
 * held until closed, so that a late worker can listen on it then: its
 * descriptor, and its URL in @url.
 */
static int port_hold(char *url, size_t size)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    getsockname(fd, (struct sockaddr *)&sa, &len)) {
		close(fd);
		return -1;
	}
	snprintf(url, size, "tcp://127.0.0.1:%u", (unsigned int)ntohs(sa.sin_port));
	return fd;
}

/* Wait (at most @ms) until @r's retries of @task satisfy @ok; its stats in *@s. */
static bool retry_wait(struct tpu_rendezvous *r, const char *task, struct remote_retry_stats *s,
		       bool (*ok)(const struct remote_retry_stats *, const void *), const void *arg,
		       int ms)
{
	for (;;) {
		memset(s, 0, sizeof(*s));
		if (tpu__remote_retry_stats(r, task, s))
			return false;
		if (ok(s, arg) || ms <= 0)
			return ok(s, arg);
		usleep(5000);
		ms -= 5;
	}
}

/* At least *@arg retries, one pending. */
static bool retried(const struct remote_retry_stats *s, const void *arg)
{
	return s->retries >= *(const unsigned int *)arg && s->pending;
}

/* A pending retry a minute away, after at least *@arg. */
static bool minute_away(const struct remote_retry_stats *s, const void *arg)
{
	return retried(s, arg) && s->backoff_ns == 60000 * MS;
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/*
 * A posts a receive from B before B exists: A's connect is refused and
 * retried, 10 ms apart, three times; then the next retry is set a minute
 * away.  B starts on the URL A has for it, posts a receive from A (so B
 * opens a pipe to A and says HELLO) and sends A's tensor.  A's receive
 * (20 s timeout) completes: only the HELLO can have brought the retry
 * forward.  With a secret A asks on B's pipe and opens none of its own.
 */
static void late_worker_hello(bool secret)
{
	struct rh_done da = RH_DONE_INIT, db = RH_DONE_INIT;
	struct rh_worker wa = { 0 }, wb = { 0 };
	struct tpu_rendezvous *a = NULL, *b = NULL;
	struct remote_retry_stats s;
	char ub[300], ka[RH_KEY_MAX], kb[RH_KEY_MAX], ga[16] = "", gb[16] = "";
	const char *lub = ub;
	static char sa[16] = "to-B-from-A-----", sb[16] = "to-A-from-B-late";
	size_t la = rh_key(ka, RH_TASK(1), RH_TASK(0), "late", 1, 0);
	size_t lb = rh_key(kb, RH_TASK(0), RH_TASK(1), "hello", 1, 0);
	unsigned int three = 3, four = 4, got = 0;
	int fd = port_hold(ub, sizeof(ub));
	uint64_t t0;
	bool ok;

	ok = worker(&wa, RH_TASK(0), secret);
	a = wa.rdv;
	if (fd < 0 || !ok || tpu_rendezvous_add_peer(a, RH_TASK(1), ub) ||
	    tpu__remote_set_backoff(a, 10 * MS, 10 * MS) ||
	    tpu_rendezvous_recv(a, ka, la, &(struct tpu_tensor){ .data = ga, .len = 16 },
				20000 * MS, rh_on_recv, &da)) {
		CHECK(false, "late_setup (secret %d)", secret);
		goto out;
	}
	ok = retry_wait(a, RH_TASK(1), &s, retried, &three, 10000);
	CHECK(ok, "late_worker_connect_retried (secret %d, %u retries)", secret, s.retries);
	if (!ok || tpu__remote_set_backoff(a, 60000 * MS, 60000 * MS))
		goto out;
	ok = retry_wait(a, RH_TASK(1), &s, minute_away, &four, 10000);
	CHECK(ok, "late_worker_next_retry_a_minute_away (secret %d, %u retries, %llu ms)", secret,
	      s.retries, (unsigned long long)(s.backoff_ns / MS));
	if (!ok)
		goto out;
	/* B takes the port A has for it. */
	close(fd);
	fd = -1;
	t0 = mono_ms();
	ok = rh_worker_open(&wb, NULL, secret ? SECRET : "",
			    &(struct tpu_remote_options){ .task = RH_TASK(1), .listen_urls = &lub,
							  .nlisten = 1 });
	b = wb.rdv;
	if (!ok || tpu_rendezvous_add_peer(b, RH_TASK(0), wa.url) ||
	    tpu_rendezvous_recv(b, kb, lb, &(struct tpu_tensor){ .data = gb, .len = 16 },
				20000 * MS, rh_on_recv, &db) ||
	    tpu_rendezvous_send(b, ka, la, &(struct tpu_tensor){ .data = sb, .len = 16 }, 0, NULL,
				NULL) ||
	    tpu_rendezvous_send(a, kb, lb, &(struct tpu_tensor){ .data = sa, .len = 16 }, 0, NULL,
				NULL)) {
		CHECK(false, "late_b_setup (secret %d)", secret);
		goto out;
	}
	ok = rh_done_wait(&da, 1, 30) && da.st == 0 && !memcmp(ga, sb, 16);
	CHECK(ok, "late_worker_hello_brings_the_retry_forward (secret %d, %d after %llu ms)",
	      secret, da.st, (unsigned long long)(mono_ms() - t0));
	ok = !tpu__remote_retry_stats(a, RH_TASK(1), &s) && s.early == 1 && !s.pending;
	CHECK(ok, "late_worker_one_early_retry (secret %d, early %u, pending %d)", secret, s.early,
	      s.pending);
	ok = rh_done_wait(&db, 1, 30) && db.st == 0 && !memcmp(gb, sa, 16);
	CHECK(ok, "late_worker_served_back (secret %d, %d)", secret, db.st);
	if (secret)
		ok = pipes_are(a, 1, 1, 0, &got);
	else
		ok = pipes_are(a, 2, 1, 5000, &got);
	CHECK(ok, "late_worker_pipes (secret %d, pipes*100+accepted %u)", secret, got);
out:
	if (fd >= 0)
		close(fd);
	tpu_rendezvous_destroy(a);
	tpu_rendezvous_destroy(b);
	/* A receive still waiting ended with the destroy. */
	if (a)
		rh_done_wait(&da, 1, 10);
	if (b && db.n == 0)
		rh_done_wait(&db, 1, 10);
	tpu_context_destroy(wa.ctx);
	tpu_context_destroy(wb.ctx);
}

/* Hostile client @x says HELLO naming @task; true once A read it (answered a REQ after it). */
static bool hello_from(struct rh_att *x, const char *url, const char *task)
{
	struct remote_hdr h;

	if (!rh_att_open(x, url, ""))
		return false;
	rh_att_send(x, REMOTE_HELLO, 0, 0, 0, task, NULL);
	rh_att_send(x, REMOTE_REQ, 77, 0, 0, NULL, NULL);
	return !rh_att_next(x, &h, NULL, 0, 5000) && h.type == REMOTE_RESP && h.id == 77;
}

/*
 * Without a secret a HELLO is a claim: it brings forward only a retry A
 * waits for anyway, at most once per back-off step, and none right after
 * an early one failed.  A waits for task 1 (a port that refuses, retries
 * a minute apart); hostile clients say HELLO.
 */
static void hello_hint_bounds(void)
{
	static struct rh_att v, x, y, z;
	struct rh_done d = RH_DONE_INIT;
	struct rh_worker wa = { 0 };
	struct tpu_rendezvous *a = NULL;
	struct remote_retry_stats s;
	char ub[300], key[RH_KEY_MAX], g[16];
	size_t klen = rh_key(key, RH_TASK(1), RH_TASK(0), "bounds", 1, 0);
	unsigned int one = 1, two = 2;
	int fd = port_hold(ub, sizeof(ub));
	struct remote_hdr h;
	tpu_status st;
	bool ok;

	memset(&v, 0, sizeof(v));
	memset(&x, 0, sizeof(x));
	memset(&y, 0, sizeof(y));
	memset(&z, 0, sizeof(z));
	ok = worker(&wa, RH_TASK(0), false);
	a = wa.rdv;
	if (fd < 0 || !ok || tpu_rendezvous_add_peer(a, RH_TASK(1), ub) ||
	    tpu__remote_set_backoff(a, 60000 * MS, 60000 * MS)) {
		CHECK(false, "hint_setup");
		goto out;
	}
	/* Nothing waits for task 1 yet: its HELLO tries nothing. */
	ok = hello_from(&v, wa.url, RH_TASK(1)) && !tpu__remote_retry_stats(a, RH_TASK(1), &s) &&
	     !s.early && !s.retries && !s.pending;
	CHECK(ok, "hello_with_no_retry_pending_tries_nothing (early %u, retries %u)", s.early,
	      s.retries);
	rh_att_close(&v);
	memset(&v, 0, sizeof(v));
	if (tpu_rendezvous_recv(a, key, klen, &(struct tpu_tensor){ .data = g, .len = 16 },
				20000 * MS, rh_on_recv, &d)) {
		CHECK(false, "hint_recv_posted");
		goto out;
	}
	ok = retry_wait(a, RH_TASK(1), &s, retried, &one, 10000);
	CHECK(ok, "hint_connect_refused_and_retry_pending (%u retries)", s.retries);
	if (!ok)
		goto out;
	/* A task not in the map. */
	ok = hello_from(&x, wa.url, RH_TASK(5)) && !tpu__remote_retry_stats(a, RH_TASK(1), &s) &&
	     !s.early && s.retries == 1 && s.pending;
	CHECK(ok, "hello_of_unknown_task_brings_no_retry (early %u, retries %u)", s.early,
	      s.retries);
	/* The waited-for task: one retry now, to the map's URL (refused again). */
	ok = hello_from(&y, wa.url, RH_TASK(1));
	ok = ok && retry_wait(a, RH_TASK(1), &s, retried, &two, 10000) && s.early == 1 &&
	     s.retries == 2;
	CHECK(ok, "hello_of_waited_for_task_retries_at_once (early %u, retries %u)", s.early,
	      s.retries);
	/* Its second HELLO ends its pipe; another pipe's claim of it then: no second retry. */
	rh_att_send(&y, REMOTE_HELLO, 0, 0, 0, RH_TASK(1), NULL);
	st = rh_att_next(&y, &h, NULL, 0, 5000);
	CHECK(st && st != -ETIMEDOUT, "second_hello_ends_the_pipe (%d)", st);
	ok = hello_from(&z, wa.url, RH_TASK(1)) && !tpu__remote_retry_stats(a, RH_TASK(1), &s) &&
	     s.early == 1 && s.retries == 2 && s.pending;
	CHECK(ok, "repeated_hellos_bring_no_second_retry (early %u, retries %u)", s.early,
	      s.retries);
	CHECK(d.n == 0, "hint_receive_still_waits");
out:
	rh_att_close(&v);
	rh_att_close(&x);
	rh_att_close(&y);
	rh_att_close(&z);
	if (fd >= 0)
		close(fd);
	tpu_rendezvous_destroy(a);
	if (a)
		rh_done_wait(&d, 1, 10);
	tpu_context_destroy(wa.ctx);
}

/* tpu__remote_peer_pid() of @r's pipes to @task, once none negotiates (within 10 s). */
static tpu_status peer_pid(struct tpu_rendezvous *r, const char *task, pid_t *pid)
{
	tpu_status st;

	for (int ms = 0; (st = tpu__remote_peer_pid(r, task, pid)) == -EAGAIN && ms < 10000;
	     ms += 10)
		usleep(10000);
	return st;
}

/*
 * The pid a worker's pipes prove for another (what a tpu_coll group's
 * segment is taken from): none over tcp, this process's own over shm
 * between two workers of it, and no answer for a task not in the map.
 */
static void peer_pids(void)
{
	struct rh_pair w;
	struct rh_worker a = { 0 }, b = { 0 };
	pid_t pid = -1;
	tpu_status st;
	bool ok;

	if (rh_pair_up(&w, "") && pass(w.b.rdv, w.a.rdv, 1, 0, "pid", 0)) {
		st = peer_pid(w.a.rdv, RH_TASK(1), &pid);
		CHECK(!st && pid == 0, "peer_pid_over_tcp_proves_none (%s, %d)",
		      tpu_status_name(st), (int)pid);
		CHECK(tpu__remote_peer_pid(w.a.rdv, "/job:w/replica:0/task:9", &pid) ==
		      -EHOSTUNREACH && pid == 0, "peer_pid_of_unknown_task");
	} else {
		CHECK(false, "peer_pid_tcp_setup");
	}
	rh_pair_down(&w);
	ok = rh_shm_worker_open(&a, RH_TASK(0), "peerpid", "a", NULL) &&
	     rh_shm_worker_open(&b, RH_TASK(1), "peerpid", "b", NULL) &&
	     !tpu_rendezvous_add_peer(a.rdv, RH_TASK(1), b.url) &&
	     !tpu_rendezvous_add_peer(b.rdv, RH_TASK(0), a.url) &&
	     pass(b.rdv, a.rdv, 1, 0, "pid", 0) && pass(a.rdv, b.rdv, 0, 1, "pid", 0);
	CHECK(ok, "peer_pid_shm_setup");
	if (ok) {
		st = peer_pid(a.rdv, RH_TASK(1), &pid);
		CHECK(!st && pid == getpid(), "peer_pid_over_shm_is_proven (%s, %d)",
		      tpu_status_name(st), (int)pid);
		st = peer_pid(b.rdv, RH_TASK(0), &pid);
		CHECK(!st && pid == getpid(), "peer_pid_over_shm_both_ways (%s, %d)",
		      tpu_status_name(st), (int)pid);
	}
	rh_worker_close(&b);
	rh_worker_close(&a);
}

void test_remote_onepipe(void)
{
	sequential(true);
	sequential(false);
	simultaneous();
	shared_pipe_answers(true);
	shared_pipe_answers(false);
	late_worker_hello(false);
	late_worker_hello(true);
	hello_hint_bounds();
	peer_pids();
}
