// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The rendezvous on the host: bad arguments to every call (a clear status,
 * never a crash), then the shared case list (tests/rdv/rdv_cases.c) over
 * the implementations that need no module: inprocess, and cma when it is
 * built and permitted here.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../rdv/rdv_cases.h"
#include "tap.h"
#include "tpu_user.h"

static void ignore_send(void *arg, tpu_status st)
{
	(void)arg;
	(void)st;
}

static void ignore_recv(void *arg, tpu_status st, size_t len)
{
	(void)arg;
	(void)st;
	(void)len;
}

static void context_args(void)
{
	struct tpu_context_options bad = { .flags = 1u << 30 };
	struct tpu_context *ctx = (struct tpu_context *)&bad;
	struct tpu_buffer *buf = (struct tpu_buffer *)&bad;

	CHECK_STATUS(tpu_context_create(NULL, NULL), -EINVAL, "context_create_without_output_is_einval");
	CHECK_STATUS(tpu_context_create(&bad, &ctx), -EINVAL, "context_create_with_unknown_flags_is_einval");
	CHECK(ctx == NULL, "context_create_failure_clears_the_output");
	tpu_context_destroy(NULL);
	CHECK_STATUS(tpu_buffer_alloc(NULL, 10, &buf), -EINVAL, "buffer_alloc_without_context_is_einval");
	CHECK(buf == NULL, "buffer_alloc_failure_clears_the_output");
	CHECK(tpu_buffer_data(NULL) == NULL && tpu_buffer_size(NULL) == 0, "buffer_getters_accept_null");
	tpu_buffer_free(NULL);
	CHECK(strcmp(tpu_rdv_impl_name(TPU_RDV_KMOD), "kmod") == 0 &&
	      strcmp(tpu_rdv_impl_name(TPU_RDV_INPROCESS), "inprocess") == 0 &&
	      strcmp(tpu_rdv_impl_name((enum tpu_rdv_impl)42), "unknown") == 0,
	      "rdv_impl_names");
}

static void rendezvous_args(void)
{
	struct tpu_context_options o = { .flags = TPU_CTX_NO_KMOD };
	struct tpu_context *ctx = NULL;
	struct tpu_rendezvous *rdv = NULL, *r2 = (struct tpu_rendezvous *)&o;
	struct tpu_buffer *buf = NULL;
	char data[8] = "abcdefg", big[5000];
	struct tpu_tensor t = { .data = data, .len = sizeof(data) };
	struct tpu_tensor bad = { .data = NULL, .len = 4 };
	int fd = -1, devnull;

	if (tpu_context_create(&o, &ctx) || tpu_rendezvous_create(ctx, TPU_RDV_INPROCESS, &rdv)) {
		CHECK(false, "inprocess_rendezvous_for_argument_tests");
		tpu_context_destroy(ctx);
		return;
	}
	memset(big, 'k', sizeof(big));
	CHECK_STATUS(tpu_rendezvous_create(NULL, TPU_RDV_INPROCESS, &r2), -EINVAL, "create_without_context_is_einval");
	CHECK(r2 == NULL, "create_failure_clears_the_output");
	CHECK_STATUS(tpu_rendezvous_create(ctx, (enum tpu_rdv_impl)9, &r2), -EINVAL, "create_of_unknown_impl_is_einval");
	CHECK_STATUS(tpu_rendezvous_create(ctx, TPU_RDV_KMOD, &r2), TPU_E_NO_DEVICE,
		     "create_kmod_in_a_no_kmod_context_is_no_device");
	CHECK_STATUS(tpu_rendezvous_create(ctx, TPU_RDV_INPROCESS, NULL), -EINVAL, "create_without_output_is_einval");
	CHECK_STATUS(tpu_rendezvous_share(rdv, &fd), -ENOTSUP, "share_of_inprocess_is_enotsup");
	CHECK_STATUS(tpu_rendezvous_share(NULL, &fd), -EINVAL, "share_without_rendezvous_is_einval");
	CHECK_STATUS(tpu_rendezvous_join(ctx, -1, &r2), -EBADF, "join_of_a_negative_fd_is_ebadf");
	devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	CHECK_STATUS(tpu_rendezvous_join(ctx, devnull, &r2), -EINVAL, "join_of_a_foreign_fd_is_einval");
	close(devnull);
	CHECK_STATUS(tpu_rendezvous_join(NULL, 0, &r2), -EINVAL, "join_without_context_is_einval");
	CHECK(tpu_rendezvous_impl(rdv) == TPU_RDV_INPROCESS, "impl_query_names_inprocess");
	CHECK(tpu_rendezvous_impl(NULL) == TPU_RDV_AUTO, "impl_query_of_null_is_auto");

	CHECK_STATUS(tpu_rendezvous_send(NULL, "k", 1, &t, 0, ignore_send, NULL), -EINVAL, "send_without_rendezvous_is_einval");
	CHECK_STATUS(tpu_rendezvous_send(rdv, NULL, 1, &t, 0, ignore_send, NULL), -EINVAL, "send_without_key_is_einval");
	CHECK_STATUS(tpu_rendezvous_send(rdv, "k", 0, &t, 0, ignore_send, NULL), -EINVAL, "send_with_empty_key_is_einval");
	CHECK_STATUS(tpu_rendezvous_send(rdv, big, sizeof(big), &t, 0, ignore_send, NULL), -ENAMETOOLONG,
		     "send_with_a_key_over_4096_bytes_is_enametoolong");
	CHECK_STATUS(tpu_rendezvous_send(rdv, "k", 1, NULL, 0, ignore_send, NULL), -EINVAL, "send_without_tensor_is_einval");
	CHECK_STATUS(tpu_rendezvous_send(rdv, "k", 1, &bad, 0, ignore_send, NULL), -EINVAL,
		     "send_of_null_data_with_length_is_einval");
	CHECK_STATUS(tpu_rendezvous_send(rdv, "k", 1, &t, 1u << 7, ignore_send, NULL), -EINVAL,
		     "send_with_unknown_flags_is_einval");
	CHECK_STATUS(tpu_rendezvous_send(rdv, "k", 1, &t, TPU_SEND_GIVE, ignore_send, NULL), -EINVAL,
		     "give_without_a_buffer_is_einval");
	if (!tpu_buffer_alloc(ctx, 64, &buf)) {
		struct tpu_tensor outside = { .data = data, .len = 4, .buffer = buf };
		struct tpu_tensor inner = { .data = (char *)tpu_buffer_data(buf) + 8, .len = 8, .buffer = buf };
		struct tpu_tensor past = { .data = tpu_buffer_data(buf), .len = 65, .buffer = buf };

		CHECK_STATUS(tpu_rendezvous_send(rdv, "k", 1, &outside, 0, ignore_send, NULL), -EINVAL,
			     "send_of_data_outside_its_buffer_is_einval");
		CHECK_STATUS(tpu_rendezvous_send(rdv, "k", 1, &past, 0, ignore_send, NULL), -EINVAL,
			     "send_past_the_end_of_its_buffer_is_einval");
		CHECK_STATUS(tpu_rendezvous_send(rdv, "k", 1, &inner, TPU_SEND_GIVE, ignore_send, NULL), -EINVAL,
			     "give_of_part_of_a_buffer_is_einval");
		tpu_buffer_free(buf);
	}
	CHECK_STATUS(tpu_rendezvous_recv(rdv, "k", 1, &t, 0, NULL, NULL), -EINVAL, "recv_without_callback_is_einval");
	CHECK_STATUS(tpu_rendezvous_recv(rdv, "k", 1, NULL, 0, ignore_recv, NULL), -EINVAL, "recv_without_tensor_is_einval");
	CHECK_STATUS(tpu_rendezvous_recv(rdv, NULL, 1, &t, 0, ignore_recv, NULL), -EINVAL, "recv_without_key_is_einval");
	CHECK_STATUS(tpu_rendezvous_recv_buffer(rdv, "k", 1, 10, 0, NULL, NULL), -EINVAL,
		     "recv_buffer_without_callback_is_einval");
	CHECK_STATUS(tpu_rendezvous_recv_wait(NULL, "k", 1, &t, 0, NULL), -EINVAL, "recv_wait_without_rendezvous_is_einval");
	CHECK_STATUS(tpu_rendezvous_recv_wait(rdv, "k", 0, &t, 0, NULL), -EINVAL, "recv_wait_with_empty_key_is_einval");
	CHECK_STATUS(tpu_rendezvous_cancel(NULL, "k", 1), -EINVAL, "cancel_without_rendezvous_is_einval");
	CHECK_STATUS(tpu_rendezvous_cancel(rdv, NULL, 1), -EINVAL, "cancel_without_key_is_einval");
	CHECK_STATUS(tpu_rendezvous_abort(rdv, 0), -EINVAL, "abort_with_status_0_is_einval");
	CHECK_STATUS(tpu_rendezvous_abort(rdv, 5), -EINVAL, "abort_with_positive_status_is_einval");
	CHECK_STATUS(tpu_rendezvous_abort(rdv, -4096), -EINVAL, "abort_below_minus_4095_is_einval");
	CHECK_STATUS(tpu_rendezvous_abort(rdv, -EHWPOISON - 1), -EINVAL, "abort_with_no_errno_value_is_einval");
	CHECK_STATUS(tpu_rendezvous_abort(rdv, -529), -EINVAL, "abort_with_a_kernel_internal_code_is_einval");
	CHECK_STATUS(tpu_rendezvous_abort(NULL, -EIO), -EINVAL, "abort_without_rendezvous_is_einval");
	tpu_rendezvous_destroy(NULL);
	tpu_rendezvous_destroy(rdv);
	tpu_context_destroy(ctx);
}

/*
 * The child of pending_keys_are_logged: a fresh image, so that TPU_LOG is
 * read at its first use; a send and a receive one byte apart, the receive
 * timing out.
 */
__attribute__((constructor)) static void keylog_child(void)
{
	struct tpu_context *ctx;
	struct tpu_rendezvous *rdv;
	char b[8];
	struct tpu_tensor s = { .data = "x", .len = 1 }, r = { .data = b, .len = sizeof(b) };

	if (!getenv("TPU_UNIT_KEYLOG_CHILD"))
		return;
	if (tpu_context_create(NULL, &ctx) ||
	    tpu_rendezvous_create(ctx, TPU_RDV_INPROCESS, &rdv))
		_exit(1);
	tpu_rendezvous_send(rdv, "step1/w0\x01", 9, &s, 0, NULL, NULL);
	tpu_rendezvous_recv_wait(rdv, "step1/w0", 8, &r, 20 * 1000 * 1000, NULL);
	tpu_rendezvous_destroy(rdv);
	tpu_context_destroy(ctx);
	_exit(0);
}

/* With TPU_LOG=debug a receive that times out lists both sides' keys. */
static void pending_keys_are_logged(void)
{
	char out[8192] = "", self[4096];
	size_t got = 0;
	int fds[2], status = 1;
	ssize_t n;
	pid_t pid;

	/*
	 * The path, not /proc/self/exe itself: under valgrind the latter is
	 * valgrind's own binary, while readlink() of it names this program.
	 */
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0 || pipe(fds)) {
		CHECK(false, "pending_keys_log_pipe");
		return;
	}
	self[n] = '\0';
	pid = fork();
	if (pid == 0) {
		dup2(fds[1], STDERR_FILENO);
		setenv("TPU_LOG", "debug", 1);
		setenv("TPU_UNIT_KEYLOG_CHILD", "1", 1);
		execl(self, "unit_tests", (char *)NULL);
		_exit(2);
	}
	close(fds[1]);
	while (got < sizeof(out) - 1 && (n = read(fds[0], out + got, sizeof(out) - 1 - got)) > 0)
		got += (size_t)n;
	close(fds[0]);
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "pending_keys_child_ran");
	CHECK(strstr(out, "a receive of \"step1/w0\" timed out") != NULL,
	      "timed_out_receive_is_logged_with_its_key");
	CHECK(strstr(out, "pending 1 send, 0 recvs of \"step1/w0\\x01\" (9 bytes)") != NULL,
	      "the_send_one_byte_apart_is_listed_beside_it_escaped");
	CHECK(strstr(out, "destroyed with: pending 1 send") != NULL,
	      "destroy_with_pending_ops_lists_them");
}

void test_rendezvous(void)
{
	static const struct rdv_impl inprocess = { TPU_RDV_INPROCESS, 0, "inprocess" };
	static const struct rdv_impl cma = { TPU_RDV_CMA, TPU_CTX_NO_KMOD, "cma" };
	const char *why;

	context_args();
	rendezvous_args();
	pending_keys_are_logged();
	rdv_cases_run(&inprocess);
	if (rdv_impl_available(&cma, &why)) {
		rdv_cases_run(&cma);
		/* Pipes between processes of this host use cma when it is permitted. */
		rdv_remote_run("shm", TPU_CTX_NO_KMOD, "cma");
	} else {
		tap_diag("cma rendezvous not available here (%s): its cases are skipped", why);
		rdv_remote_run("shm", TPU_CTX_NO_KMOD, NULL);
	}
	rdv_remote_run("tcp", TPU_CTX_NO_KMOD, NULL);
}
