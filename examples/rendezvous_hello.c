// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Two processes, one key each way: the parent makes a rendezvous and sends
 * "ping", the child joins it through the shared descriptor and answers "pong".
 * The library picks the transport: the module when it is loaded, else
 * process_vm_readv (run with TPU_LOG=debug to see why).
 */
#include <semaphore.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <tpu_user.h>
#include <unistd.h>

/* The callback of a send: the peer has taken the bytes (or status says why not). */
static void sent(void *arg, tpu_status status)
{
	if (status)
		fprintf(stderr, "send failed: %s\n", tpu_strerror(status));
	sem_post(arg);
}

/* Send @msg under @key; its memory must live until the callback, so wait for it. */
static tpu_status send_and_wait(struct tpu_rendezvous *rdv, const char *key, const char *msg)
{
	struct tpu_tensor t = { .data = (void *)msg, .len = strlen(msg) + 1 };
	sem_t done;
	tpu_status st;

	sem_init(&done, 0, 0);
	st = tpu_rendezvous_send(rdv, key, strlen(key), &t, 0, sent, &done);
	if (!st)
		sem_wait(&done);
	return st;
}

/* Receive @key (waiting up to 10 s) and print it. */
static tpu_status receive(struct tpu_rendezvous *rdv, const char *who, const char *key)
{
	char buf[64] = "";
	struct tpu_tensor t = { .data = buf, .len = sizeof(buf) };
	tpu_status st = tpu_rendezvous_recv_wait(rdv, key, strlen(key), &t, 10000000000ull, NULL);

	printf("%s got %s: %s\n", who, key, st ? tpu_strerror(st) : buf);
	return st;
}

int main(void)
{
	struct tpu_context *ctx;
	struct tpu_rendezvous *rdv;
	tpu_status st;
	int fd, status;

	if ((st = tpu_context_create(NULL, &ctx)) ||
	    (st = tpu_rendezvous_create(ctx, TPU_RDV_AUTO, &rdv)) ||
	    (st = tpu_rendezvous_share(rdv, &fd))) {
		fprintf(stderr, "set-up failed: %s\n", tpu_strerror(st));
		return 1;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);	/* the child's lines too, before _exit */
	printf("transport: %s\n", tpu_rdv_impl_name(tpu_rendezvous_impl(rdv)));
	if (fork() == 0) {
		/* A context belongs to its process: the child makes its own. */
		st = tpu_context_create(NULL, &ctx);
		if (!st && !(st = tpu_rendezvous_join(ctx, fd, &rdv)) &&
		    !(st = receive(rdv, "child", "ping")))
			st = send_and_wait(rdv, "pong", "hello from the child");
		tpu_context_destroy(ctx);	/* leaves the rendezvous too */
		_exit(st != 0);
	}
	st = send_and_wait(rdv, "ping", "hello from the parent");
	if (!st)
		st = receive(rdv, "parent", "pong");
	wait(&status);
	tpu_rendezvous_destroy(rdv);
	tpu_context_destroy(ctx);
	return st || status;
}
