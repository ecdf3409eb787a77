// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Two workers of a cluster exchange tensors through the remote rendezvous,
 * as TensorFlow's workers do: task 0 sends "weights" to task 1, which
 * answers with "grads".  The keys name the devices, and so the workers; a
 * receive fetches the tensor from the worker that sent it.
 *
 *   ./remote_workers                 both workers on this machine (forked),
 *                                    on loopback tcp with ports the system
 *                                    picks; they swap URLs over a socketpair
 *   ./remote_workers TASK LISTEN PEER_URL
 *                                    one worker of two on separate hosts:
 *                                    ./remote_workers 0 tcp://hostA:7000 tcp://hostB:7000
 *                                    ./remote_workers 1 tcp://hostB:7000 tcp://hostA:7000
 *                                    (each listens on the address the other
 *                                    dials, not on every interface; set
 *                                    TPU_JOB_SECRET alike on both, see
 *                                    Documentation/security.rst)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <tpu_user.h>
#include <unistd.h>

#define SECOND	1000000000ull
#define N	1024	/* floats per tensor */

static void task_of(int i, char *buf, size_t size)
{
	snprintf(buf, size, "/job:worker/replica:0/task:%d", i);
}

/* The TensorFlow key of @edge from task @src's CPU to task @dst's. */
static size_t key_of(char *buf, int src, int dst, const char *edge)
{
	char s[64], d[64];
	struct tpu_key k = { .src_incarnation = 1 };
	size_t len = 0;

	snprintf(s, sizeof(s), "/job:worker/replica:0/task:%d/device:CPU:0", src);
	snprintf(d, sizeof(d), "/job:worker/replica:0/task:%d/device:CPU:0", dst);
	k.src_device = (struct tpu_str){ s, strlen(s) };
	k.dst_device = (struct tpu_str){ d, strlen(d) };
	k.edge_name = (struct tpu_str){ edge, strlen(edge) };
	tpu_key_build(&k, buf, 256, &len);
	return len;
}

/*
 * Task 0 sends weights and waits for grads; task 1 the opposite.  A send
 * stays in its worker's memory until the other fetches it, so neither may
 * leave before the other has what it needs: task 1 tells task 0 "done"
 * once it has the weights, and task 0 takes "done" only after the grads.
 */
static tpu_status exchange(struct tpu_rendezvous *rdv, int me)
{
	static float out[N], in[N];
	struct tpu_tensor t_out = { .data = out, .len = sizeof(out) };
	struct tpu_tensor t_in = { .data = in, .len = sizeof(in) };
	struct tpu_tensor t_done = { .data = in, .len = 0 };
	const char *tr = "?", *ch = "?";
	char key[256], peer[64];
	size_t klen, len = 0;
	tpu_status st;

	for (int i = 0; i < N; i++)
		out[i] = me ? -0.5f * (float)i : (float)i;
	klen = key_of(key, me, !me, me ? "grads" : "weights");
	st = tpu_rendezvous_send(rdv, key, klen, &t_out, 0, NULL, NULL);
	if (st)
		return st;
	klen = key_of(key, !me, me, me ? "weights" : "grads");
	st = tpu_rendezvous_recv_wait(rdv, key, klen, &t_in, 30 * SECOND, &len);
	if (st)
		return st;
	task_of(!me, peer, sizeof(peer));
	tpu_rendezvous_peer_path(rdv, peer, &tr, &ch);
	printf("task %d got %s: %zu bytes, [1] = %g (over %s, channel %s)\n", me,
	       me ? "weights" : "grads", len, (double)in[1], tr, ch);
	klen = key_of(key, 1, 0, "done");
	if (me)
		return tpu_rendezvous_send_wait(rdv, key, klen, &t_done, 0, 30 * SECOND);
	return tpu_rendezvous_recv_wait(rdv, key, klen, &t_done, 30 * SECOND, NULL);
}

/*
 * One worker: listen on @listen, learn the peer's URL (given, or through
 * @sock when the demo forked both), exchange.
 */
static int worker(int me, const char *listen, const char *peer_url, int sock)
{
	char self[64], other[64], url[256] = { 0 };
	struct tpu_remote_options o = { .task = self, .listen_urls = &listen, .nlisten = 1 };
	struct tpu_context *ctx = NULL;
	struct tpu_rendezvous *rdv = NULL;
	tpu_status st;

	task_of(me, self, sizeof(self));
	task_of(!me, other, sizeof(other));
	st = tpu_context_create(NULL, &ctx);
	if (!st)
		st = tpu_rendezvous_create_remote(ctx, &o, &rdv);
	if (!st && sock >= 0) {
		st = tpu_rendezvous_url(rdv, "tcp", url, sizeof(url));
		if (!st && (write(sock, url, sizeof(url)) != sizeof(url) ||
			    read(sock, url, sizeof(url)) != sizeof(url)))
			st = TPU_E_PEER_GONE;
		peer_url = url;
	}
	if (!st)
		st = tpu_rendezvous_add_peer(rdv, other, peer_url);
	if (!st)
		st = exchange(rdv, me);
	if (st)
		fprintf(stderr, "task %d: %s\n", me, tpu_strerror(st));
	tpu_context_destroy(ctx);	/* destroys the rendezvous too */
	return st != 0;
}

/* The demo: both workers here, each its own process, as on two hosts. */
static int demo(void)
{
	int sv[2][2], status, rc = 0;
	char url[256];
	pid_t pid[2];

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv[0]) || socketpair(AF_UNIX, SOCK_STREAM, 0, sv[1]))
		return 1;
	for (int i = 0; i < 2; i++) {
		pid[i] = fork();
		if (pid[i] == 0)
			_exit(worker(i, "tcp://127.0.0.1:0", NULL, sv[i][1]));
	}
	/* Swap the URLs: what a launcher does between hosts. */
	if (read(sv[0][0], url, sizeof(url)) != sizeof(url) ||
	    write(sv[1][0], url, sizeof(url)) != sizeof(url) ||
	    read(sv[1][0], url, sizeof(url)) != sizeof(url) ||
	    write(sv[0][0], url, sizeof(url)) != sizeof(url))
		rc = 1;
	close(sv[0][0]);
	close(sv[1][0]);
	for (int i = 0; i < 2; i++)
		if (waitpid(pid[i], &status, 0) != pid[i] || !WIFEXITED(status) ||
		    WEXITSTATUS(status))
			rc = 1;
	return rc;
}

int main(int argc, char **argv)
{
	if (argc == 1)
		return demo();
	if (argc != 4 || (strcmp(argv[1], "0") && strcmp(argv[1], "1"))) {
		fprintf(stderr, "usage: %s [TASK(0|1) LISTEN_URL PEER_URL]\n", argv[0]);
		return 2;
	}
	return worker(atoi(argv[1]), argv[2], argv[3], -1);
}
