// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * A pipe echo server and its client.  The server accepts pipes and sends
 * every message back as it came: metadata and tensors.  The client writes
 * messages with a tensor each (1 KiB to 4 MiB) and checks every echoed byte.
 *
 *   pipe_echo serve [URL]      listen (default: loopback tcp and shm), print
 *                              the tcp URL, serve until killed
 *   pipe_echo ping URL [N]     send N messages (default 16) and check them
 *   pipe_echo                  both: a forked server and the client
 *
 * The two ends negotiate what they share: on one machine a tcp:// pipe moves
 * to shm and to the kmod channel when the module is loaded, cma otherwise
 * (TPU_LOG=debug tells why).  Callbacks run on the context's thread; the
 * client waits for them with a semaphore.
 */
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <tpu_user.h>
#include <unistd.h>

/* ---- server ------------------------------------------------------------- */

/* One message on its way back: the echo owns copies of everything. */
struct echo {
	struct tpu_pipe *pipe;
	struct tpu_message msg;
	struct tpu_message_tensor tensors[TPU_PIPE_MAX_TENSORS];
	char metadata[TPU_PIPE_MAX_METADATA];
};

static void serve_next(struct tpu_pipe *pipe);

static void echoed(void *arg, tpu_status status, struct tpu_message *msg)
{
	struct echo *e = arg;
	size_t i;

	(void)msg;
	if (status)
		fprintf(stderr, "pipe_echo: echo failed: %s\n", tpu_strerror(status));
	for (i = 0; i < e->msg.ntensors; i++)
		free(e->tensors[i].data);
	free(e);
}

/* The message is in: send it back, then wait for the next one. */
static void arrived(void *arg, tpu_status status, struct tpu_message *msg)
{
	struct echo *e = arg;
	size_t i;

	if (status) {
		/* The client went away (or broke the protocol): drop the pipe. */
		for (i = 0; i < msg->ntensors; i++)
			free(msg->tensors[i].data);
		tpu_pipe_close(e->pipe);
		free(e);
		return;
	}
	/* The descriptor is the pipe's and goes when we return: copy it. */
	memcpy(e->metadata, msg->metadata, msg->metadata_len);
	e->msg.metadata = e->metadata;
	e->msg.metadata_len = msg->metadata_len;
	e->msg.ntensors = msg->ntensors;
	e->msg.tensors = e->tensors;
	for (i = 0; i < msg->ntensors; i++)
		e->tensors[i] = (struct tpu_message_tensor){
			.data = msg->tensors[i].data, .len = msg->tensors[i].len,
			.device = msg->tensors[i].device,
		};
	serve_next(e->pipe);
	status = tpu_pipe_write(e->pipe, &e->msg, echoed, e);
	if (status)
		echoed(e, status, NULL);
}

/* A descriptor: give each tensor memory of its size and read the message. */
static void described(void *arg, tpu_status status, struct tpu_message *desc)
{
	struct tpu_pipe *pipe = arg;
	struct echo *e;
	size_t i;

	if (status) {
		tpu_pipe_close(pipe);	/* the peer closed: done with this pipe */
		return;
	}
	e = calloc(1, sizeof(*e));
	if (!e) {
		tpu_pipe_close(pipe);
		return;
	}
	e->pipe = pipe;
	for (i = 0; i < desc->ntensors; i++)
		desc->tensors[i].data = malloc(desc->tensors[i].len ? desc->tensors[i].len : 1);
	status = tpu_pipe_read(pipe, desc, arrived, e);
	if (status)
		arrived(e, status, desc);
}

static void serve_next(struct tpu_pipe *pipe)
{
	if (tpu_pipe_read_descriptor(pipe, described, pipe))
		tpu_pipe_close(pipe);
}

static void accepted(void *arg, tpu_status status, struct tpu_pipe *pipe)
{
	struct tpu_listener *l = arg;

	if (status)
		return;		/* the listener closed */
	tpu_listener_accept(l, accepted, l);
	serve_next(pipe);
}

/* Serve until killed; the URL goes to @url_fd (a pipe to a parent) or stdout. */
static int serve(const char *url, int url_fd)
{
	struct tpu_context *ctx;
	struct tpu_listener *l;
	char where[256];
	tpu_status st;

	st = tpu_context_create(NULL, &ctx);
	if (!st)
		st = tpu_listener_create(ctx, url ? &url : NULL, url ? 1 : 0, &l);
	if (!st)
		st = tpu_listener_url(l, url ? NULL : "tcp", where, sizeof(where));
	if (!st)
		st = tpu_listener_accept(l, accepted, l);
	if (st) {
		fprintf(stderr, "pipe_echo: cannot serve: %s\n", tpu_strerror(st));
		return 1;
	}
	dprintf(url_fd, "%s\n", where);
	for (;;)
		pause();
}

/* ---- client ------------------------------------------------------------- */

struct waiter {
	sem_t done;
	tpu_status status;
	struct tpu_message *desc;
};

static void write_done(void *arg, tpu_status status, struct tpu_message *msg)
{
	struct waiter *w = arg;

	(void)msg;
	w->status = status;
	sem_post(&w->done);
}

static void desc_done(void *arg, tpu_status status, struct tpu_message *desc)
{
	struct waiter *w = arg;

	w->status = status;
	w->desc = desc;
	sem_post(&w->done);
}

static void read_done(void *arg, tpu_status status, struct tpu_message *msg)
{
	struct waiter *w = arg;

	(void)msg;
	w->status = status;
	sem_post(&w->done);
}

static tpu_status wait_for(struct waiter *w, tpu_status started)
{
	if (started)
		return started;
	sem_wait(&w->done);
	return w->status;
}

static void fill(unsigned char *p, size_t len, unsigned int seed)
{
	size_t i;

	for (i = 0; i < len; i++)
		p[i] = (unsigned char)(seed * 31 + i * 7 + (i >> 10));
}

/* Send @n messages and check each echo; 0 when every byte came back. */
static int ping(const char *url, int n)
{
	struct tpu_context *ctx;
	struct tpu_pipe *pipe;
	struct waiter w;
	tpu_status st;
	int i, bad = 0;

	sem_init(&w.done, 0, 0);
	st = tpu_context_create(NULL, &ctx);
	if (!st)
		st = tpu_pipe_connect(ctx, url, &pipe);
	if (st) {
		fprintf(stderr, "pipe_echo: cannot connect to %s: %s\n", url, tpu_strerror(st));
		return 1;
	}
	for (i = 0; i < n && !bad; i++) {
		size_t len = (size_t)1024 << (i % 13);	/* 1 KiB .. 4 MiB */
		unsigned char *out = malloc(len), *back = malloc(len);
		char meta[32];
		struct tpu_message_tensor t = { .data = out, .len = len };
		struct tpu_message msg = { .metadata = meta, .tensors = &t, .ntensors = 1 };

		msg.metadata_len = (size_t)snprintf(meta, sizeof(meta), "message %d", i);
		fill(out, len, (unsigned int)i);
		st = wait_for(&w, tpu_pipe_write(pipe, &msg, write_done, &w));
		if (!st)
			st = wait_for(&w, tpu_pipe_read_descriptor(pipe, desc_done, &w));
		if (!st) {
			bad = w.desc->ntensors != 1 || w.desc->tensors[0].len != len ||
			      w.desc->metadata_len != msg.metadata_len ||
			      memcmp(w.desc->metadata, meta, msg.metadata_len);
			w.desc->tensors[0].data = back;
			st = wait_for(&w, tpu_pipe_read(pipe, w.desc, read_done, &w));
		}
		if (st) {
			fprintf(stderr, "pipe_echo: message %d: %s\n", i, tpu_strerror(st));
			bad = 1;
		} else if (bad || memcmp(out, back, len)) {
			fprintf(stderr, "pipe_echo: message %d came back different\n", i);
			bad = 1;
		}
		free(out);
		free(back);
	}
	if (!bad)
		printf("pipe_echo: %d messages echoed intact over %s, channel %s\n", n,
		       tpu_pipe_transport(pipe),
		       tpu_pipe_channel(pipe, TPU_DEVICE_CPU, TPU_DEVICE_CPU));
	tpu_pipe_close(pipe);
	tpu_context_destroy(ctx);
	sem_destroy(&w.done);
	return bad;
}

int main(int argc, char **argv)
{
	char url[256] = "";
	int fds[2], status = 1, ret;
	FILE *from_server;
	pid_t server;

	if (argc >= 2 && !strcmp(argv[1], "serve"))
		return serve(argc >= 3 ? argv[2] : NULL, STDOUT_FILENO);
	if (argc >= 3 && !strcmp(argv[1], "ping"))
		return ping(argv[2], argc >= 4 ? atoi(argv[3]) : 16);
	if (argc != 1) {
		fprintf(stderr, "usage: pipe_echo [serve [URL] | ping URL [N]]\n");
		return 2;
	}
	/* Both ends: a forked server hands its URL back through a pipe. */
	if (pipe(fds))
		return 1;
	server = fork();
	if (server == 0) {
		close(fds[0]);
		_exit(serve(NULL, fds[1]));
	}
	close(fds[1]);
	from_server = fdopen(fds[0], "r");
	if (!from_server || !fgets(url, sizeof(url), from_server)) {
		fprintf(stderr, "pipe_echo: the server did not start\n");
		kill(server, SIGKILL);
		waitpid(server, NULL, 0);
		return 1;
	}
	url[strcspn(url, "\n")] = '\0';
	ret = ping(url, 16);
	kill(server, SIGTERM);
	waitpid(server, &status, 0);
	fclose(from_server);
	return ret;
}
