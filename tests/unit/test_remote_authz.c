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
#include <string.h>

#include "remote_harness.h"
#include "tap.h"

/* B sends @edge to A, A receives it: both fine and the bytes B's. */
static bool b_to_a(struct rh_pair *w, const char *edge)
{
	char key[RH_KEY_MAX], got[16] = "";
	size_t klen = rh_key(key, RH_TASK(1), RH_TASK(0), edge, 1, 0), len = 0;
	struct tpu_tensor src = { .data = (void *)"REAL", .len = 4 }, dst = { .data = got, .len = 16 };

	return !tpu_rendezvous_send(w->b.rdv, key, klen, &src, 0, NULL, NULL) &&
	       !tpu_rendezvous_recv_wait(w->a.rdv, key, klen, &dst, 10 * RH_SEC, &len) &&
	       len == 4 && !memcmp(got, "REAL", 4);
}

/* A (task 0) and B (task 1) know each other; A's map also has task 2 (never up). */
static bool workers_up(struct rh_pair *w)
{
	return rh_pair_up(w, NULL) &&
	       !tpu_rendezvous_add_peer(w->a.rdv, RH_TASK(2), "tcp://127.0.0.1:1");
}

/* ABORT from a pipe that never said who it is, and from a task not in the map. */
static void anonymous_abort(void)
{
	static struct rh_att x1, x2, x6;
	struct rh_pair w;

	if (!workers_up(&w)) {
		CHECK(false, "remote_authz_setup");
		goto out;
	}
	CHECK(rh_att_open(&x1, w.a.url, NULL), "anon_open");
	rh_att_send(&x1, REMOTE_ABORT, 0, -ECANCELED, 0, NULL, NULL);
	CHECK(rh_att_closed(&x1, 5000), "anonymous_abort_closes_the_pipe");
	CHECK(rh_att_open(&x2, w.a.url, NULL), "stranger_open");
	rh_att_send(&x2, REMOTE_HELLO, 0, 0, 0, RH_TASK(7), NULL);
	rh_att_send(&x2, REMOTE_ABORT, 0, -ECANCELED, 0, NULL, NULL);
	CHECK(rh_att_closed(&x2, 5000), "abort_from_a_task_not_in_the_map_closes_the_pipe");
	/* A REQ before any HELLO: closed too. */
	CHECK(rh_att_open(&x6, w.a.url, NULL), "nohello_open");
	rh_att_send(&x6, REMOTE_REQ, 1, 0, 64, "k", NULL);
	CHECK(rh_att_closed(&x6, 5000), "request_before_hello_closes_the_pipe");
	CHECK(b_to_a(&w, "after-abort"), "anonymous_abort_did_not_abort_the_worker");
out:
	rh_att_close(&x1);
	rh_att_close(&x2);
	rh_att_close(&x6);
	rh_pair_down(&w);
}

/* A HELLO claiming B, to answer A's receives from B with forged bytes. */
static void forged_answer(void)
{
	static struct rh_att x3;
	struct rh_done d = RH_DONE_INIT;
	char key[RH_KEY_MAX], got[16] = "";
	struct remote_hdr h;
	uint8_t buf[64];
	bool saw_req = false;
	struct rh_pair w;
	size_t klen;
	tpu_status st;

	if (!workers_up(&w)) {
		CHECK(false, "remote_authz_setup");
		goto out;
	}
	CHECK(rh_att_open(&x3, w.a.url, NULL), "forger_open");
	rh_att_send(&x3, REMOTE_HELLO, 0, 0, 0, RH_TASK(1), NULL);
	/* Answered at once: A read the HELLO. */
	rh_att_send(&x3, REMOTE_REQ, 1, 0, 0, NULL, NULL);
	CHECK(rh_att_next(&x3, &h, buf, sizeof(buf), 5000) == 0 && h.type == REMOTE_RESP,
	      "forger_synced");
	klen = rh_key(key, RH_TASK(1), RH_TASK(0), "forged", 1, 0);
	CHECK(tpu_rendezvous_recv(w.a.rdv, key, klen,
				  &(struct tpu_tensor){ .data = got, .len = 16 }, 10 * RH_SEC,
				  rh_on_recv, &d) == 0, "victim_receive_posted");
	st = rh_att_next(&x3, &h, buf, sizeof(buf), 1500);
	if (!st && h.type == REMOTE_REQ) {
		saw_req = true;
		rh_att_send(&x3, REMOTE_RESP, h.id, 0, 4, NULL, "EVIL");
	}
	CHECK(!saw_req, "forged_hello_draws_no_request");
	CHECK(tpu_rendezvous_send(w.b.rdv, key, klen,
				  &(struct tpu_tensor){ .data = (void *)"REAL", .len = 4 }, 0, NULL,
				  NULL) == 0, "producer_sends");
	CHECK(rh_done_wait(&d, 1, 10) && d.st == 0 && !memcmp(got, "REAL", 4),
	      "answer_taken_only_from_the_producer (got %.4s)", got);
	CHECK(b_to_a(&w, "after-forgery"), "legitimate_workers_served_after_forgery");
out:
	rh_att_close(&x3);
	rh_pair_down(&w);
}

/* A member asks for a key that B consumes; then a second claim of B. */
static void stolen_key(void)
{
	static struct rh_att x4, x5;
	struct rh_done s = RH_DONE_INIT;
	char key[RH_KEY_MAX], got[16] = "";
	struct remote_hdr h = { 0 };
	uint8_t buf[64] = { 0 };
	struct rh_pair w;
	size_t klen, len = 0;
	tpu_status st;

	if (!workers_up(&w)) {
		CHECK(false, "remote_authz_setup");
		goto out;
	}
	klen = rh_key(key, RH_TASK(0), RH_TASK(1), "stolen", 1, 0);
	CHECK(tpu_rendezvous_send(w.a.rdv, key, klen,
				  &(struct tpu_tensor){ .data = (void *)"SECRET", .len = 6 }, 0,
				  rh_on_send, &s) == 0, "victim_sends");
	CHECK(rh_att_open(&x5, w.a.url, NULL), "thief_open");
	rh_att_send(&x5, REMOTE_HELLO, 0, 0, 0, RH_TASK(2), NULL);
	rh_att_send(&x5, REMOTE_REQ, 42, 0, 64, key, NULL);
	st = rh_att_next(&x5, &h, buf, sizeof(buf), 5000);
	CHECK(st == 0 && h.type == REMOTE_RESP && h.status == -EACCES && h.len == 0 &&
	      memcmp(buf, "SECRET", 6), "stolen_key_refused (status %d, tensor %d)", h.status,
	      (int)h.len);
	CHECK(tpu_rendezvous_recv_wait(w.b.rdv, key, klen,
				       &(struct tpu_tensor){ .data = got, .len = 16 }, 10 * RH_SEC,
				       &len) == 0 && len == 6 && !memcmp(got, "SECRET", 6),
	      "consumer_still_served_after_theft_attempt");
	CHECK(rh_done_wait(&s, 1, 10) && s.st == 0, "victim_send_completed");

	/* B has its pipe to A now: a second claim of task 1 is refused. */
	CHECK(rh_att_open(&x4, w.a.url, NULL), "second_claim_open");
	rh_att_send(&x4, REMOTE_HELLO, 0, 0, 0, RH_TASK(1), NULL);
	CHECK(rh_att_closed(&x4, 5000), "second_claim_of_a_connected_task_refused");
	CHECK(b_to_a(&w, "after-all"), "legitimate_workers_served_after_every_attack");
out:
	rh_att_close(&x4);
	rh_att_close(&x5);
	rh_pair_down(&w);
}

/*
 * A key whose REQ came first: the outbox entry that REQ made keeps what
 * its parse found, and a REQ from another task for the same bytes is
 * checked against it (no parse of its own) and refused.
 */
static void stolen_waiting_key(void)
{
	static struct rh_att x7, x8;
	char key[RH_KEY_MAX], got[16] = "";
	struct remote_hdr h = { 0 };
	struct rh_pair w;
	tpu_status st;
	size_t klen;

	if (!workers_up(&w)) {
		CHECK(false, "remote_authz_setup");
		goto out;
	}
	klen = rh_key(key, RH_TASK(0), RH_TASK(2), "waiting", 1, 0);
	/* Task 2 (in A's map) asks first; a REQ with no key, refused at once, syncs. */
	CHECK(rh_att_open(&x7, w.a.url, NULL), "consumer_open");
	rh_att_send(&x7, REMOTE_HELLO, 0, 0, 0, RH_TASK(2), NULL);
	rh_att_send(&x7, REMOTE_REQ, 7, 0, 16, key, NULL);
	rh_att_send(&x7, REMOTE_REQ, 8, 0, 0, NULL, NULL);
	st = rh_att_next(&x7, &h, got, sizeof(got), 5000);
	CHECK(st == 0 && h.type == REMOTE_RESP && h.id == 8 && h.status == TPU_E_BAD_KEY,
	      "request_of_the_consumer_waits (id %llu, status %d)", (unsigned long long)h.id,
	      h.status);
	/* Task 3 (not in the map, may ask for what it consumes) asks for task 2's key. */
	CHECK(rh_att_open(&x8, w.a.url, NULL), "thief_open");
	rh_att_send(&x8, REMOTE_HELLO, 0, 0, 0, RH_TASK(3), NULL);
	rh_att_send(&x8, REMOTE_REQ, 9, 0, 16, key, NULL);
	st = rh_att_next(&x8, &h, got, sizeof(got), 5000);
	CHECK(st == 0 && h.type == REMOTE_RESP && h.id == 9 && h.status == -EACCES && h.len == 0,
	      "waiting_key_refused_to_another_task (status %d, tensor %d)", h.status, (int)h.len);
	CHECK(tpu_rendezvous_send(w.a.rdv, key, klen,
				  &(struct tpu_tensor){ .data = (void *)"MINE", .len = 4 }, 0, NULL,
				  NULL) == 0, "producer_sends_the_waiting_key");
	st = rh_att_next(&x7, &h, got, sizeof(got), 5000);
	CHECK(st == 0 && h.type == REMOTE_RESP && h.id == 7 && h.status == 0 && h.len == 1 &&
	      !memcmp(got, "MINE", 4), "waiting_request_answered_with_the_tensor (status %d)",
	      h.status);
	CHECK(b_to_a(&w, "after-waiting"), "legitimate_workers_served_after_waiting_theft");
out:
	rh_att_close(&x7);
	rh_att_close(&x8);
	rh_pair_down(&w);
}

void test_remote_authz(void)
{
	anonymous_abort();
	forged_answer();
	stolen_key();
	stolen_waiting_key();
}
