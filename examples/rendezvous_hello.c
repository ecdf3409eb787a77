// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Two processes, one key each way: the parent makes a rendezvous and sends
 * "ping", the child joins it through the shared descriptor and answers
 * "pong".  The library picks the transport: the module when it is loaded,
 * else process_vm_readv (run with TPU_LOG=debug to see why).
 */
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <tpu_user.h>
#include <unistd.h>

#define SECOND 1000000000ull

/* Send @msg under @key and wait until the peer took it (or 10 s passed). */
static tpu_status send(struct tpu_rendezvous *rdv, const char *key, const char *msg)
{
	struct tpu_tensor t = { .data = (void *)msg, .len = strlen(msg) + 1 };

	return tpu_rendezvous_send_wait(rdv, key, strlen(key), &t, 0, 10 * SECOND);
}

/* Receive @key (waiting up to 10 s) and print it. */
static tpu_status receive(struct tpu_rendezvous *rdv, const char *who, const char *key)
{
	char buf[64] = "";
	struct tpu_tensor t = { .data = buf, .len = sizeof(buf) };
	tpu_status st = tpu_rendezvous_recv_wait(rdv, key, strlen(key), &t, 10 * SECOND, NULL);

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
			st = send(rdv, "pong", "hello from the child");
		tpu_context_destroy(ctx);	/* leaves the rendezvous too */
		_exit(st != 0);
	}
	st = send(rdv, "ping", "hello from the parent");
	if (!st)
		st = receive(rdv, "parent", "pong");
	wait(&status);
	tpu_rendezvous_destroy(rdv);
	tpu_context_destroy(ctx);
	return st || status;
}
