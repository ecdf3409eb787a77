// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Cases across processes: the parent creates the rendezvous, passes its
 * descriptor to a forked child with tpu_fd_send(), and they exchange
 * tensors both ways.  The child has a context of its own (a context, like
 * an endpoint, belongs to the process that made it) and reports through
 * its exit status, which the parent turns into TAP points.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rdv_cases.h"
#include "tap.h"

#define SEC 1000000000ull
#define XLEN (1 << 20)

/* Child exit codes: which step failed. */
enum { XS_OK, XS_FD, XS_CTX, XS_JOIN, XS_RECV, XS_DATA, XS_SEND, XS_ABORT };

static const char *const x_step[] = {
	"ok", "receiving the descriptor", "creating a context", "joining",
	"receiving", "checking the bytes", "sending back", "seeing the abort",
};

static void sent(void *arg, tpu_status st)
{
	*(volatile tpu_status *)arg = st;
}

/* The checksum of what the parent sends: rdv_fill() with seed 0. */
static uint64_t expected_sum(void)
{
	uint8_t *p = malloc(XLEN);
	uint64_t sum = 0;

	if (p) {
		rdv_fill(p, XLEN, 0);
		sum = rdv_checksum(p, XLEN);
		free(p);
	}
	return sum;
}

static int child(const struct rdv_impl *impl, int sock)
{
	struct tpu_context_options o = { .flags = impl->ctx_flags };
	struct tpu_context *ctx;
	struct tpu_rendezvous *rdv;
	uint8_t *buf = malloc(XLEN);
	struct tpu_tensor t = { .data = buf, .len = XLEN };
	volatile tpu_status send_st = 1;
	char small[8];
	size_t len = 0;
	int fd, code = XS_OK;

	if (!buf || tpu_fd_recv(sock, &fd))
		return XS_FD;
	if (tpu_context_create(&o, &ctx))
		return XS_CTX;
	if (tpu_rendezvous_join(ctx, fd, &rdv)) {
		tpu_context_destroy(ctx);
		return XS_JOIN;
	}
	close(fd);
	if (tpu_rendezvous_recv_wait(rdv, "p2c", 3, &t, 30 * SEC, &len))
		code = XS_RECV;
	else if (len != XLEN || rdv_checksum(buf, XLEN) != expected_sum())
		code = XS_DATA;
	if (!code) {
		/* Send the bytes back, as received: the parent checks them again. */
		if (tpu_rendezvous_send(rdv, "c2p", 3, &t, 0, sent, (void *)&send_st))
			code = XS_SEND;
	}
	/* The parent takes c2p, then aborts: this receive must see the status. */
	if (!code) {
		struct tpu_tensor s = { .data = small, .len = sizeof(small) };
		tpu_status st = tpu_rendezvous_recv_wait(rdv, "never", 5, &s, 30 * SEC, NULL);

		if (st != -ESHUTDOWN)
			code = XS_ABORT;
	}
	/* Do not leave before our send is done: its source is this process's memory. */
	while (!code && send_st == 1)
		usleep(1000);
	if (!code && send_st != 0)
		code = XS_SEND;
	tpu_rendezvous_destroy(rdv);
	tpu_context_destroy(ctx);
	free(buf);
	return code;
}

void rdv_xproc_run(const struct rdv_impl *impl)
{
	struct tpu_context_options o = { .flags = impl->ctx_flags };
	struct tpu_context *ctx;
	struct tpu_rendezvous *rdv;
	uint8_t *src = malloc(XLEN), *back = malloc(XLEN);
	struct tpu_tensor s = { .data = src, .len = XLEN }, b = { .data = back, .len = XLEN };
	volatile tpu_status send_st = 1;
	int sv[2], fd = -1, status = 0;
	size_t len = 0;
	pid_t pid;

	tap_diag("cross-process cases over %s", impl->name);
	if (!src || !back || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
		CHECK(false, "%s_xproc_set_up", impl->name);
		goto out;
	}
	if (tpu_context_create(&o, &ctx) || tpu_rendezvous_create(ctx, impl->impl, &rdv)) {
		CHECK(false, "%s_xproc_rendezvous_created", impl->name);
		goto out;
	}
	CHECK_STATUS(tpu_rendezvous_share(rdv, &fd), 0, "%s_share_gives_a_descriptor", impl->name);
	rdv_fill(src, XLEN, 0);
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		close(sv[0]);
		_exit(child(impl, sv[1]));
	}
	close(sv[1]);
	CHECK_STATUS(tpu_fd_send(sv[0], fd), 0, "%s_descriptor_passed_to_the_child", impl->name);
	close(fd);
	CHECK_STATUS(tpu_rendezvous_send(rdv, "p2c", 3, &s, 0, sent, (void *)&send_st), 0,
		     "%s_parent_sends_1MiB", impl->name);
	CHECK_STATUS(tpu_rendezvous_recv_wait(rdv, "c2p", 3, &b, 60 * SEC, &len), 0,
		     "%s_parent_receives_the_childs_tensor", impl->name);
	CHECK(len == XLEN && rdv_checksum(back, XLEN) == rdv_checksum(src, XLEN),
	      "%s_tensor_crosses_two_processes_both_ways_intact", impl->name);
	CHECK(send_st == 0, "%s_parent_send_callback_ok_after_the_child_took_it", impl->name);
	CHECK_STATUS(tpu_rendezvous_abort(rdv, -ESHUTDOWN), 0, "%s_parent_aborts_the_shared_rendezvous", impl->name);
	waitpid(pid, &status, 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		tap_diag("child failed at: %s", WIFEXITED(status) && WEXITSTATUS(status) <= XS_ABORT ?
			 x_step[WEXITSTATUS(status)] : "a signal");
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == XS_OK,
	      "%s_child_joins_receives_sends_and_sees_the_abort", impl->name);
	tpu_rendezvous_destroy(rdv);
	tpu_context_destroy(ctx);
	close(sv[0]);
out:
	free(src);
	free(back);
}
