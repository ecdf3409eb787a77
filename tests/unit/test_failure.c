// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Failure behaviour a new user meets on the module-free paths: a read
 * rejected from its descriptor's callback leaves the pipe cleanly failed
 * (it crashed the library), a pipe to nobody reports ECONNREFUSED (not a
 * later EPIPE) everywhere, and cheap misuse is caught: use after destroy
 * and double destroy of contexts, rendezvous, pipes and listeners, and a
 * context used in a forked child.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pipe_harness.h"
#include "tap.h"
#include "tpu_user.h"

static struct tpu_context *new_context(void)
{
	struct tpu_context_options o = { .flags = TPU_CTX_NO_KMOD };
	struct tpu_context *ctx = NULL;

	return tpu_context_create(&o, &ctx) ? NULL : ctx;
}

/* The reader asks for another length than the descriptor's, from the descriptor's callback. */
struct bad_reader {
	struct tpu_pipe *pipe;
	struct tag tag;
	uint8_t room[256];
	tpu_status read_ret;
};

static void bad_reader_desc(void *arg, tpu_status st, struct tpu_message *d)
{
	struct bad_reader *br = arg;

	if (st) {
		rec_post(&br->tag, st, NULL);
		return;
	}
	d->payloads[0].data = br->room;
	d->payloads[0].len = 100;	/* the descriptor says 64 */
	br->read_ret = tpu_pipe_read(br->pipe, d, on_write, &br->tag);
}

static void read_rejected_in_callback(const char *url, const char *name)
{
	static uint8_t bytes[64];
	struct tpu_payload pl = { .data = bytes, .len = sizeof(bytes) };
	struct tpu_message m = { .payloads = &pl, .npayloads = 1 };
	struct bad_reader br = { 0 };
	struct rec w, r, r2;
	struct tag tw = { &w, 0 }, t2 = { &r2, 0 };
	struct pair pp;
	bool ok = pair_open(&pp, url, NULL);

	rec_init(&w);
	rec_init(&r);
	rec_init(&r2);
	br.pipe = pp.server;
	br.tag = (struct tag){ &r, 0 };
	ok = ok && !tpu_pipe_write(pp.client, &m, on_write, &tw) &&
	     !tpu_pipe_read_descriptor(pp.server, bad_reader_desc, &br);
	ok = ok && rec_wait(&r, 1);
	CHECK(ok && br.read_ret == 0 && r.st[0] == -EINVAL,
	      "pipe_%s_read_of_a_wrong_length_from_the_descriptor_callback_fails_einval", name);
	/* The pipe is failed, not a crash: later calls answer with its error. */
	ok = ok && !tpu_pipe_read_descriptor(pp.server, on_desc, &t2) && rec_wait(&r2, 1);
	CHECK(ok && r2.st[0] == -EINVAL, "pipe_%s_after_a_rejected_read_the_pipe_is_cleanly_failed",
	      name);
	CHECK(rec_wait(&w, 1), "pipe_%s_writer_of_a_rejected_read_is_called_back", name);
	pair_close(&pp);
}

/* A loopback tcp port nobody listens on: bound, then closed. */
static int free_tcp_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -1;

	if (fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof(a)) &&
	    !getsockname(fd, (struct sockaddr *)&a, &alen))
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/*
 * Connecting where nobody listens: the queued write and descriptor request
 * fail with ECONNREFUSED, and so does every later write, synchronously;
 * EPIPE would hide the cause.
 */
static void refused_is_the_first_cause(const char *url, const char *name)
{
	static uint8_t bytes[8];
	struct tpu_payload pl = { .data = bytes, .len = sizeof(bytes) };
	struct tpu_message m = { .payloads = &pl, .npayloads = 1 };
	struct tpu_context *ctx = new_context();
	struct tpu_pipe *p = NULL;
	struct rec w, d;
	struct tag tw = { &w, 0 }, td = { &d, 0 };
	tpu_status wst = -1;
	bool ok;

	rec_init(&w);
	rec_init(&d);
	ok = ctx && !tpu_pipe_connect(ctx, url, &p);
	/* The refusal may already be known (shm's is immediate): then it is returned. */
	if (ok)
		wst = tpu_pipe_write(p, &m, on_write, &tw);
	ok = ok && !tpu_pipe_read_descriptor(p, on_desc, &td);
	CHECK(ok && (wst == -ECONNREFUSED || (!wst && rec_wait(&w, 1) && w.st[0] == -ECONNREFUSED)),
	      "pipe_%s_to_nobody_fails_its_first_write_econnrefused (%s)", name,
	      tpu_status_name(wst ? wst : w.st[0]));
	CHECK(ok && rec_wait(&d, 1) && d.st[0] == -ECONNREFUSED,
	      "pipe_%s_to_nobody_fails_its_descriptor_request_econnrefused", name);
	CHECK_STATUS(ok ? tpu_pipe_write(p, &m, on_write, &tw) : -1, -ECONNREFUSED,
		     "pipe_%s_to_nobody_refuses_later_writes_with_the_first_cause", name);
	tpu_pipe_close(p);
	tpu_context_destroy(ctx);
}

static void on_accept_ignore(void *arg, tpu_status st, struct tpu_pipe *p)
{
	(void)arg;
	(void)st;
	(void)p;
}

static void misuse(void)
{
	struct tpu_context *ctx = new_context(), *dead;
	struct tpu_rendezvous *rdv = NULL;
	struct tpu_listener *l = NULL;
	struct tpu_pipe *p = NULL;
	struct tpu_tensor t = { .data = "x", .len = 1 };
	char url[128];

	CHECK(ctx != NULL, "misuse_context_created");
	if (!ctx)
		return;
	CHECK_STATUS(tpu_rendezvous_create(ctx, TPU_RDV_INPROCESS, &rdv), 0, "misuse_rdv_created");
	tpu_rendezvous_destroy(rdv);
	CHECK_STATUS(tpu_rendezvous_send(rdv, "k", 1, &t, 0, NULL, NULL), TPU_E_DESTROYED,
		     "misuse_send_on_a_destroyed_rendezvous_is_destroyed");
	CHECK_STATUS(tpu_rendezvous_cancel(rdv, "k", 1), TPU_E_DESTROYED,
		     "misuse_cancel_on_a_destroyed_rendezvous_is_destroyed");
	tpu_rendezvous_destroy(rdv);
	CHECK(true, "misuse_double_destroy_of_a_rendezvous_is_harmless");

	CHECK_STATUS(tpu_listener_create(ctx, (const char *[]){ "tcp://127.0.0.1:0" }, 1, &l), 0,
		     "misuse_listener_created");
	if (l && !tpu_listener_url(l, "tcp", url, sizeof(url)))
		CHECK_STATUS(tpu_pipe_connect(ctx, url, &p), 0, "misuse_pipe_connected");
	tpu_pipe_close(p);
	CHECK_STATUS(tpu_pipe_read_descriptor(p, on_desc, NULL), TPU_E_DESTROYED,
		     "misuse_read_on_a_closed_pipe_is_destroyed");
	tpu_pipe_close(p);
	CHECK(true, "misuse_double_close_of_a_pipe_is_harmless");
	tpu_listener_close(l);
	CHECK_STATUS(tpu_listener_accept(l, on_accept_ignore, NULL), TPU_E_DESTROYED,
		     "misuse_accept_on_a_closed_listener_is_destroyed");
	tpu_listener_close(l);
	CHECK(true, "misuse_double_close_of_a_listener_is_harmless");

	dead = ctx;
	tpu_context_destroy(ctx);
	CHECK_STATUS(tpu_rendezvous_create(dead, TPU_RDV_INPROCESS, &rdv), TPU_E_DESTROYED,
		     "misuse_rendezvous_on_a_destroyed_context_is_destroyed");
	CHECK_STATUS(tpu_pipe_connect(dead, "tcp://127.0.0.1:1", &p), TPU_E_DESTROYED,
		     "misuse_connect_on_a_destroyed_context_is_destroyed");
	tpu_context_destroy(dead);
	CHECK(true, "misuse_double_destroy_of_a_context_is_harmless");
}

/* A context made before fork() answers TPU_E_FORKED in the child, at once. */
static void forked_child(void)
{
	struct tpu_context *ctx = new_context();
	struct tpu_rendezvous *rdv = NULL;
	int ws = 0;
	pid_t pid;

	if (!ctx || tpu_rendezvous_create(ctx, TPU_RDV_INPROCESS, &rdv)) {
		CHECK(false, "fork_set_up");
		tpu_context_destroy(ctx);
		return;
	}
	pid = fork();
	if (pid == 0) {
		struct tpu_rendezvous *r2 = NULL;
		struct tpu_tensor t = { .data = "x", .len = 1 };
		char got[4];
		struct tpu_tensor dst = { .data = got, .len = sizeof(got) };
		int rc = 0;

		alarm(10);
		if (tpu_rendezvous_create(ctx, TPU_RDV_INPROCESS, &r2) != TPU_E_FORKED)
			rc |= 1;
		if (tpu_rendezvous_send(rdv, "k", 1, &t, 0, NULL, NULL) != TPU_E_FORKED)
			rc |= 2;
		if (tpu_rendezvous_recv_wait(rdv, "k", 1, &dst, 0, NULL) != TPU_E_FORKED)
			rc |= 4;
		/* Neither hangs on the parent's thread. */
		tpu_rendezvous_destroy(rdv);
		tpu_context_destroy(ctx);
		_exit(rc);
	}
	CHECK(pid > 0 && waitpid(pid, &ws, 0) == pid && WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
	      "fork_context_in_a_child_is_forked_not_a_hang (status %#x)", ws);
	tpu_rendezvous_destroy(rdv);
	tpu_context_destroy(ctx);
}

void test_failure(void)
{
	char shm[64], url[64];

	snprintf(shm, sizeof(shm), "shm://failure-%d", (int)getpid());
	read_rejected_in_callback("tcp://127.0.0.1:0", "tcp");
	read_rejected_in_callback(shm, "shm");
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", free_tcp_port());
	refused_is_the_first_cause(url, "tcp");
	snprintf(url, sizeof(url), "shm://nobody-%d", (int)getpid());
	refused_is_the_first_cause(url, "shm");
	misuse();
	forked_child();
}
