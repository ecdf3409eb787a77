// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Careless callers: every public destroy, free and close called twice is
 * harmless (and a call after it says TPU_E_DESTROYED), and every family of
 * objects made before fork() refuses use in the child with TPU_E_FORKED,
 * while destroying it there returns at once.  test_failure.c covers the
 * context, rendezvous, pipe and listener for use after destroy.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "boot_harness.h"
#include "pipe_harness.h"
#include "tap.h"
#include "tpu_user.h"

static struct tpu_context *new_context(void)
{
	struct tpu_context_options o = { .flags = TPU_CTX_NO_KMOD };
	struct tpu_context *ctx = NULL;

	return tpu_context_create(&o, &ctx) ? NULL : ctx;
}

static struct tpu_world *world_of_one(struct tpu_context *ctx)
{
	struct tpu_world_info info = { .rank = 0, .size = 1, .local_rank = -1, .local_size = -1,
				       .store_host = "127.0.0.1", .store_port = boot_free_port() };
	struct tpu_world_options wo = { .info = &info, .job = "misuse", .timeout_ms = 5000 };
	struct tpu_world *w = NULL;

	return tpu_world_create(ctx, &wo, &w) ? NULL : w;
}

/* One group of one member: enough for an executor to exist. */
static const char *const group1_devices[] = { "/job:misuse/replica:0/task:0/device:CPU:0" };
static const struct tpu_coll_group group1 = {
	.group_key = 1, .group_size = 1, .device_type = "CPU", .num_tasks = 1,
	.devices = group1_devices,
};

static void double_destroy(void)
{
	struct tpu_context *ctx = new_context();
	struct tpu_rendezvous *rdv = NULL;
	struct tpu_buffer *buf = NULL;
	struct tpu_coll *coll = NULL;
	struct tpu_coll_exec *exec = NULL;
	struct tpu_world *w;
	struct tpu_endpoint *ep = NULL;

	CHECK(ctx && !tpu_rendezvous_create(ctx, TPU_RDV_INPROCESS, &rdv), "misuse_set_up");
	if (!ctx || !rdv) {
		tpu_context_destroy(ctx);
		return;
	}
	CHECK_STATUS(tpu_buffer_alloc(ctx, 4096, &buf), 0, "misuse_buffer_allocated");
	tpu_buffer_free(buf);
	CHECK(!tpu_buffer_data(buf) && !tpu_buffer_size(buf),
	      "misuse_a_freed_buffer_has_no_data_and_no_size");
	tpu_buffer_free(buf);
	CHECK(true, "misuse_double_free_of_a_buffer_is_harmless");

	CHECK_STATUS(tpu_coll_create(rdv, &coll), 0, "misuse_coll_created");
	CHECK_STATUS(tpu_coll_exec_create(coll, 1, &exec), 0, "misuse_exec_created");
	tpu_coll_exec_destroy(exec);
	CHECK_STATUS(tpu_coll_exec_abort(exec, -ECANCELED), TPU_E_DESTROYED,
		     "misuse_abort_on_a_destroyed_executor_is_destroyed");
	tpu_coll_exec_destroy(exec);
	CHECK(true, "misuse_double_destroy_of_an_executor_is_harmless");
	tpu_coll_destroy(coll);
	exec = NULL;
	CHECK_STATUS(tpu_coll_exec_create(coll, 1, &exec), TPU_E_DESTROYED,
		     "misuse_executor_of_a_destroyed_coll_is_destroyed");
	CHECK(!tpu_coll_rendezvous(coll), "misuse_destroyed_coll_has_no_rendezvous");
	tpu_coll_destroy(coll);
	CHECK(true, "misuse_double_destroy_of_a_coll_is_harmless");

	w = world_of_one(ctx);
	CHECK(w != NULL, "misuse_world_of_one_formed");
	if (w) {
		tpu_world_destroy(w);
		CHECK_STATUS(tpu_world_barrier(w), TPU_E_DESTROYED,
			     "misuse_barrier_on_a_destroyed_world_is_destroyed");
		CHECK(!tpu_world_get_info(w), "misuse_destroyed_world_has_no_info");
		tpu_world_destroy(w);
		CHECK(true, "misuse_double_destroy_of_a_world_is_harmless");
	}

	/* Only where the module is loaded. */
	if (!tpu_endpoint_open(NULL, &ep)) {
		tpu_endpoint_close(ep);
		tpu_endpoint_close(ep);
		CHECK(true, "misuse_double_close_of_an_endpoint_is_harmless");
	}
	tpu_rendezvous_destroy(rdv);
	tpu_context_destroy(ctx);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void on_accept_ignore(void *arg, tpu_status st, struct tpu_pipe *p)
{
	(void)arg;
	(void)st;
	(void)p;
}

static void on_coll_ignore(void *arg, tpu_status st)
{
	(void)arg;
	(void)st;
}

static int forked_child_rc;

/*
 * The child's verdict: bit i set when check i failed.  Each family refuses
 * with TPU_E_FORKED; destroying them all takes well under a second.
 */
static int forked_child(struct pair *pp, struct tpu_rendezvous *rdv, struct tpu_buffer *buf,
			struct tpu_coll *coll, struct tpu_coll_exec *exec, struct tpu_world *w,
			struct tpu_rendezvous *remote)
{
	const char *tr, *ch;
	char url[256];
	struct tpu_coll_instance inst = { .type = TPU_COLL_REDUCTION, .instance_key = 1,
					  .dtype = TPU_DT_FLOAT32, .count = 1,
					  .op = TPU_OP_SUM };
	struct tpu_coll_member mem = { .device = "/job:misuse/replica:0/task:0/device:CPU:0" };
	struct tpu_message m = { 0 };
	struct tpu_coll *c2 = NULL;
	struct tpu_coll_exec *e2 = NULL;
	struct tpu_pipe *p2 = NULL;
	float in = 1, out = 0;
	uint64_t t0;
	int rc = 0;

	alarm(20);
	if (tpu_pipe_write(pp->client, &m, on_write, NULL) != TPU_E_FORKED)
		rc |= 1 << 0;
	if (tpu_listener_accept(pp->l, on_accept_ignore, NULL) != TPU_E_FORKED)
		rc |= 1 << 1;
	if (tpu_pipe_connect(pp->a, "tcp://127.0.0.1:1", &p2) != TPU_E_FORKED)
		rc |= 1 << 2;
	if (tpu_buffer_data(buf) || tpu_buffer_size(buf))
		rc |= 1 << 3;
	if (tpu_coll_create(rdv, &c2) != TPU_E_FORKED || c2)
		rc |= 1 << 4;
	if (tpu_coll_exec_create(coll, 2, &e2) != TPU_E_FORKED || e2)
		rc |= 1 << 5;
	if (tpu_coll_exec_run(exec, &group1, &inst, &mem, &in, &out) != TPU_E_FORKED)
		rc |= 1 << 6;
	if (tpu_coll_exec_start(exec, &group1, &inst, &mem, &in, &out, on_coll_ignore, NULL) !=
	    TPU_E_FORKED)
		rc |= 1 << 7;
	if (tpu_coll_exec_abort(exec, -ECANCELED) != TPU_E_FORKED)
		rc |= 1 << 8;
	if (w && tpu_world_barrier(w) != TPU_E_FORKED)
		rc |= 1 << 9;
	if (w && tpu_world_pipe(w, 0, &p2) != TPU_E_FORKED)
		rc |= 1 << 10;
	if (w && tpu_world_get_info(w))
		rc |= 1 << 11;
	if (tpu_coll_resolved(coll, 1, 1, &(struct tpu_coll_resolved){ 0 }) != TPU_E_FORKED)
		rc |= 1 << 12;
	if (remote && (tpu_rendezvous_url(remote, NULL, url, sizeof(url)) != TPU_E_FORKED ||
		       tpu_rendezvous_add_peer(remote, "/job:m/replica:0/task:1",
					       "tcp://127.0.0.1:1") != TPU_E_FORKED ||
		       tpu_rendezvous_peer_path(remote, "/job:m/replica:0/task:1", &tr, &ch) !=
		       TPU_E_FORKED))
		rc |= 1 << 14;
	t0 = now_ms();
	tpu_world_destroy(w);
	tpu_coll_exec_destroy(exec);
	tpu_coll_destroy(coll);
	tpu_buffer_free(buf);
	tpu_pipe_close(pp->client);
	tpu_listener_close(pp->l);
	tpu_rendezvous_destroy(rdv);
	tpu_rendezvous_destroy(remote);
	tpu_context_destroy(pp->a);
	tpu_context_destroy(pp->b);
	if (now_ms() - t0 > 2000)
		rc |= 1 << 13;
	forked_child_rc = rc;
	return rc;
}

static void fork_every_family(void)
{
	struct pair pp;
	struct tpu_rendezvous *rdv = NULL;
	struct tpu_buffer *buf = NULL;
	struct tpu_coll *coll = NULL;
	struct tpu_coll_exec *exec = NULL;
	struct tpu_world *w = NULL;
	struct tpu_rendezvous *remote = NULL;
	struct tpu_remote_options ro = { .task = "/job:m/replica:0/task:0" };
	bool ok = pair_open(&pp, "tcp://127.0.0.1:0", NULL);
	int ws = 0;
	pid_t pid;

	ok = ok && !tpu_rendezvous_create(pp.a, TPU_RDV_INPROCESS, &rdv) &&
	     !tpu_buffer_alloc(pp.a, 4096, &buf) && !tpu_coll_create(rdv, &coll) &&
	     !tpu_coll_exec_create(coll, 1, &exec) && (w = world_of_one(pp.b)) != NULL &&
	     !tpu_rendezvous_create_remote(pp.a, &ro, &remote);
	CHECK(ok, "fork_families_set_up");
	if (!ok)
		goto out;
	memset(tpu_buffer_data(buf), 0x5a, 4096);
	pid = fork();
	if (pid == 0)
		/* An exit status has 8 bits: the first failed check's number, plus one. */
		_exit(forked_child(&pp, rdv, buf, coll, exec, w, remote) ?
		      __builtin_ctz((unsigned int)forked_child_rc) + 1 : 0);
	CHECK(pid > 0 && waitpid(pid, &ws, 0) == pid && WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
	      "fork_every_family_refuses_use_in_a_child_and_its_destroy_returns "
	      "(status %#x: the exit code is the first failed check's number plus one)", ws);
	/* The parent's objects still work. */
	CHECK(tpu_world_barrier(w) == 0 && tpu_buffer_size(buf) == 4096 &&
	      ((unsigned char *)tpu_buffer_data(buf))[4095] == 0x5a &&
	      tpu_coll_rendezvous(coll) == rdv,
	      "fork_the_parent_keeps_working_after_its_child_destroyed_its_copies");
out:
	tpu_rendezvous_destroy(remote);
	tpu_world_destroy(w);
	tpu_coll_exec_destroy(exec);
	tpu_coll_destroy(coll);
	tpu_buffer_free(buf);
	tpu_rendezvous_destroy(rdv);
	pair_close(&pp);
}

void test_misuse(void)
{
	double_destroy();
	fork_every_family();
}
