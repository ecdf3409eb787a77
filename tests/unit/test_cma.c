// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"
#include "tpu_user.h"

#define CHILD_BYTES (3 * 1024 * 1024 + 5)

static void from_self(void)
{
	static const char src[] = "tensor bytes in this process";
	char dst[sizeof(src)] = { 0 };

	CHECK(tpu_cma_read(getpid(), (uintptr_t)src, dst, sizeof(src)) == 0 &&
	      !memcmp(src, dst, sizeof(src)), "cma_read_copies_from_this_process");
	CHECK_STATUS(tpu_cma_read(getpid(), (uintptr_t)src, dst, 0), 0,
		     "cma_read_of_zero_bytes_succeeds");
}

/*
 * The child fills a buffer and reports where it is; the parent pulls it, as
 * a consumer pulls from a producer.  The buffer is not page aligned and
 * spans many pages, to cover the library's loop over partial transfers.
 */
static void from_child(void)
{
	size_t slack = 2 * (size_t)sysconf(_SC_PAGESIZE);
	int sv[2];
	uintptr_t where = 0;
	pid_t pid;
	char *got;
	size_t i;
	bool same = true;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
		CHECK(false, "cma_child_set_up");
		return;
	}
	pid = fork();
	if (pid == 0) {
		size_t page = (size_t)sysconf(_SC_PAGESIZE);
		size_t len = (CHILD_BYTES + 1 + page - 1) / page * page;
		char *buf = mmap(NULL, len + page, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		char done;

		/* A hole right after the tensor, so that reading past it must fault. */
		if (buf == MAP_FAILED || munmap(buf + len, page))
			_exit(1);
		for (i = 0; i < CHILD_BYTES; i++)
			buf[i + 1] = (char)(i * 7 + 3);
		where = (uintptr_t)buf + 1;
		tpu_cma_allow(getppid());
		if (write(sv[1], &where, sizeof(where)) != sizeof(where))
			_exit(1);
		/* Stay alive until the parent has read. */
		if (read(sv[1], &done, 1) < 0)
			_exit(1);
		_exit(0);
	}
	/* Room for a read that runs past the tensor into the hole. */
	got = malloc(CHILD_BYTES + slack);
	if (pid < 0 || !got || read(sv[0], &where, sizeof(where)) != sizeof(where)) {
		CHECK(false, "cma_child_set_up");
	} else {
		CHECK_STATUS(tpu_cma_read(pid, where, got, CHILD_BYTES), 0,
			     "cma_read_pulls_a_multi_page_unaligned_tensor_from_a_child");
		for (i = 0; i < CHILD_BYTES && same; i++)
			same = got[i] == (char)(i * 7 + 3);
		CHECK(same, "cma_read_delivers_the_child_bytes_intact");
		CHECK_STATUS(tpu_cma_read(pid, where, got, CHILD_BYTES + slack), -EFAULT,
			     "cma_read_running_into_a_hole_in_the_child_is_efault");
	}
	if (write(sv[0], "x", 1) < 0)
		tap_diag("could not release the child");
	close(sv[0]);
	close(sv[1]);
	if (pid > 0)
		waitpid(pid, NULL, 0);
	free(got);
}

static void gone_child(void)
{
	char dst[8];
	pid_t pid = fork();

	if (pid == 0)
		_exit(0);
	waitpid(pid, NULL, 0);
	CHECK_STATUS(tpu_cma_read(pid, (uintptr_t)dst, dst, sizeof(dst)), -ESRCH,
		     "cma_read_from_a_reaped_process_is_esrch");
}

void test_cma(void)
{
	char dst[8];

	from_self();
	from_child();
	gone_child();
	CHECK_STATUS(tpu_cma_read(0, 4096, dst, sizeof(dst)), -EINVAL, "cma_read_from_pid_0_is_einval");
	CHECK_STATUS(tpu_cma_read(getpid(), 4096, NULL, 8), -EINVAL,
		     "cma_read_into_null_is_einval");
	CHECK_STATUS(tpu_cma_read(getpid(), UINTPTR_MAX - 2, dst, sizeof(dst)), -EINVAL,
		     "cma_read_of_a_wrapping_range_is_einval");
	CHECK_STATUS(tpu_cma_read(getpid(), 0, dst, sizeof(dst)), -EFAULT,
		     "cma_read_of_unmapped_memory_is_efault");
	CHECK_STATUS(tpu_cma_allow(getpid()), 0, "cma_allow_succeeds_with_or_without_yama");
	CHECK_STATUS(tpu_cma_allow(0), -EINVAL, "cma_allow_of_pid_0_is_einval");
}
