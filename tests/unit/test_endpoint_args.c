// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The device layer without a module: every call must answer bad arguments
 * with a status and never crash.  A stand-in endpoint on /dev/null (the
 * library's internal struct, opened by hand) shows that calls whose
 * arguments pass the library's checks reach the kernel and bring its answer
 * back, here -ENOTTY.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>

#include "../../lib/internal.h"
#include "tap.h"

static void open_checks(void)
{
	struct tpu_endpoint *ep = (struct tpu_endpoint *)&ep;
	int before = count_fds();

	CHECK_STATUS(tpu_endpoint_open("/nonexistent/tensorpipe", &ep), TPU_E_NO_DEVICE,
		     "endpoint_open_of_missing_node_is_no_device");
	CHECK(ep == NULL, "endpoint_open_failure_sets_output_to_null");
	CHECK_STATUS(tpu_endpoint_open("/dev/null", &ep), TPU_E_NOT_TENSORPIPE,
		     "endpoint_open_of_another_device_is_not_tensorpipe");
	CHECK_STATUS(tpu_endpoint_open("/", &ep), -EISDIR,
		     "endpoint_open_of_a_directory_passes_the_open_errno");
	CHECK(count_fds() == before, "endpoint_open_failures_leak_no_descriptor");
	CHECK_STATUS(tpu_endpoint_open(NULL, NULL), -EINVAL, "endpoint_open_null_output_is_einval");
	tpu_endpoint_close(NULL);
	CHECK(tpu_endpoint_fd(NULL) == -1, "endpoint_close_and_fd_accept_null");
}

static void null_endpoint(void)
{
	struct tpu_send_args s = { .key = "k", .key_len = 1 };
	struct tpu_recv_args r = { .key = "k", .key_len = 1 };
	struct tpu_completion c;
	struct tpu_info info;
	uint64_t off;
	uint32_t h;
	size_t n;
	void *p;
	int fd;
	char b;

	CHECK_STATUS(tpu_endpoint_info(NULL, &info), -EINVAL, "info_on_null_endpoint_is_einval");
	CHECK_STATUS(tpu_region_register(NULL, &b, 1, TPU_ACCESS_READ, &h), -EINVAL,
		     "region_register_on_null_endpoint_is_einval");
	CHECK_STATUS(tpu_region_alloc(NULL, 4096, &h, &off), -EINVAL,
		     "region_alloc_on_null_endpoint_is_einval");
	CHECK_STATUS(tpu_region_alloc_mapped(NULL, 4096, 0, &h, &p), -EINVAL,
		     "region_alloc_mapped_on_null_endpoint_is_einval");
	CHECK_STATUS(tpu_region_release(NULL, 1), -EINVAL, "region_release_on_null_endpoint_is_einval");
	CHECK_STATUS(tpu_region_mmap(NULL, 0, 4096, 0, &p), -EINVAL,
		     "region_mmap_on_null_endpoint_is_einval");
	CHECK_STATUS(tpu_region_export(NULL, 1, &fd, NULL), -EINVAL,
		     "region_export_on_null_endpoint_is_einval");
	CHECK_STATUS(tpu_region_import(NULL, 0, TPU_ACCESS_READ, &h, NULL), -EINVAL,
		     "region_import_on_null_endpoint_is_einval");
	CHECK_STATUS(tpu_region_revoke(NULL, 1), -EINVAL, "region_revoke_on_null_endpoint_is_einval");
	CHECK_STATUS(tpu_domain_create(NULL, &fd, NULL), -EINVAL,
		     "domain_create_on_null_endpoint_is_einval");
	CHECK_STATUS(tpu_domain_attach(NULL, 0, NULL), -EINVAL,
		     "domain_attach_on_null_endpoint_is_einval");
	CHECK_STATUS(tpu_send(NULL, &s), -EINVAL, "send_on_null_endpoint_is_einval");
	CHECK_STATUS(tpu_recv(NULL, &r), -EINVAL, "recv_on_null_endpoint_is_einval");
	CHECK_STATUS(tpu_cancel(NULL, "k", 1, TPU_CANCEL_SEND, NULL), -EINVAL,
		     "cancel_on_null_endpoint_is_einval");
	CHECK_STATUS(tpu_abort(NULL, -ECANCELED), -EINVAL, "abort_on_null_endpoint_is_einval");
	CHECK_STATUS(tpu_completions_read(NULL, &c, 1, 0, &n), -EINVAL,
		     "completions_read_on_null_endpoint_is_einval");
}

static void null_arguments(struct tpu_endpoint *ep)
{
	struct tpu_completion c;
	uint64_t off;
	uint32_t h;
	size_t n;
	void *p;
	char b;

	CHECK_STATUS(tpu_endpoint_info(ep, NULL), -EINVAL, "info_without_output_is_einval");
	CHECK_STATUS(tpu_region_register(ep, &b, 1, TPU_ACCESS_READ, NULL), -EINVAL,
		     "region_register_without_handle_output_is_einval");
	CHECK_STATUS(tpu_region_alloc(ep, 4096, NULL, &off), -EINVAL,
		     "region_alloc_without_handle_output_is_einval");
	CHECK_STATUS(tpu_region_alloc(ep, 4096, &h, NULL), -EINVAL,
		     "region_alloc_without_offset_output_is_einval");
	CHECK_STATUS(tpu_region_alloc_mapped(ep, 4096, 0, &h, NULL), -EINVAL,
		     "region_alloc_mapped_without_address_output_is_einval");
	CHECK_STATUS(tpu_region_mmap(ep, 0, 4096, 0, NULL), -EINVAL,
		     "region_mmap_without_address_output_is_einval");
	CHECK_STATUS(tpu_region_mmap(ep, 0, 0, 0, &p), -EINVAL, "region_mmap_of_zero_bytes_is_einval");
	CHECK_STATUS(tpu_region_mmap(ep, 0, 4096, 0x80, &p), -EINVAL,
		     "region_mmap_with_unknown_flag_is_einval");
	CHECK_STATUS(tpu_region_mmap(ep, (uint64_t)INT64_MAX + 1, 4096, 0, &p), -EINVAL,
		     "region_mmap_offset_beyond_off_t_is_einval");
	CHECK_STATUS(tpu_region_munmap(NULL, 4096), -EINVAL, "region_munmap_of_null_is_einval");
	CHECK_STATUS(tpu_region_munmap(&b, 0), -EINVAL, "region_munmap_of_zero_bytes_is_einval");
	CHECK_STATUS(tpu_region_export(ep, 1, NULL, NULL), -EINVAL,
		     "region_export_without_fd_output_is_einval");
	CHECK_STATUS(tpu_region_import(ep, 0, TPU_ACCESS_READ, NULL, NULL), -EINVAL,
		     "region_import_without_handle_output_is_einval");
	CHECK_STATUS(tpu_region_import(ep, -1, TPU_ACCESS_READ, &h, NULL), -EINVAL,
		     "region_import_of_a_negative_fd_is_einval");
	CHECK_STATUS(tpu_domain_create(ep, NULL, NULL), -EINVAL,
		     "domain_create_without_fd_output_is_einval");
	CHECK_STATUS(tpu_send(ep, NULL), -EINVAL, "send_without_arguments_is_einval");
	CHECK_STATUS(tpu_recv(ep, NULL), -EINVAL, "recv_without_arguments_is_einval");
	CHECK_STATUS(tpu_completions_read(ep, NULL, 1, 0, &n), -EINVAL,
		     "completions_read_without_buffer_is_einval");
	CHECK_STATUS(tpu_completions_read(ep, &c, 0, 0, &n), -EINVAL,
		     "completions_read_of_zero_records_is_einval");
	CHECK_STATUS(tpu_completions_read(ep, &c, 1, 0, NULL), -EINVAL,
		     "completions_read_without_count_output_is_einval");
	CHECK_STATUS(tpu_completions_read(ep, &c, 1, -2, &n), -EINVAL,
		     "completions_read_with_negative_timeout_other_than_minus_one_is_einval");
}

static void key_arguments(struct tpu_endpoint *ep)
{
	struct tpu_send_args s = { .key = NULL, .key_len = 1 };
	struct tpu_recv_args r = { .key = NULL, .key_len = 1 };

	CHECK_STATUS(tpu_send(ep, &s), -EINVAL, "send_with_null_key_is_einval");
	CHECK_STATUS(tpu_recv(ep, &r), -EINVAL, "recv_with_null_key_is_einval");
	CHECK_STATUS(tpu_cancel(ep, NULL, 1, TPU_CANCEL_SEND, NULL), -EINVAL,
		     "cancel_with_null_key_is_einval");
#if SIZE_MAX > UINT32_MAX
	/* Truncated to 32 bits this length would be 1, a valid key. */
	s.key = r.key = "k";
	s.key_len = r.key_len = ((size_t)1 << 32) + 1;
	CHECK_STATUS(tpu_send(ep, &s), -ENAMETOOLONG, "send_key_length_beyond_32_bits_is_not_truncated");
	CHECK_STATUS(tpu_recv(ep, &r), -ENAMETOOLONG, "recv_key_length_beyond_32_bits_is_not_truncated");
	CHECK_STATUS(tpu_cancel(ep, "k", ((size_t)1 << 32) + 1, TPU_CANCEL_SEND, NULL), -ENAMETOOLONG,
		     "cancel_key_length_beyond_32_bits_is_not_truncated");
#endif
}

/* Arguments the library accepts go to the kernel; /dev/null answers -ENOTTY. */
static void kernel_answers_are_passed_on(struct tpu_endpoint *ep)
{
	struct tpu_send_args s = { .key = "k", .key_len = 1 };
	struct tpu_recv_args r = { .key = "k", .key_len = 1, .len = 77 };
	struct tpu_info info;
	uint64_t off, id = 99;
	uint32_t h = 5, count = 7;
	void *p = &p;
	int fd = -5;
	char b;

	CHECK_STATUS(tpu_endpoint_info(ep, &info), TPU_E_NOT_TENSORPIPE,
		     "info_on_a_foreign_descriptor_is_not_tensorpipe");
	CHECK_STATUS(tpu_region_register(ep, &b, 1, TPU_ACCESS_READ, &h), -ENOTTY,
		     "region_register_passes_the_kernel_error");
	CHECK(h == 5, "region_register_failure_leaves_the_handle_alone");
	CHECK_STATUS(tpu_region_alloc(ep, 4096, &h, &off), -ENOTTY,
		     "region_alloc_passes_the_kernel_error");
	CHECK_STATUS(tpu_region_alloc_mapped(ep, 4096, TPU_MAP_POPULATE, &h, &p), -ENOTTY,
		     "region_alloc_mapped_passes_the_kernel_error");
	CHECK(p == &p && h == 5, "region_alloc_mapped_failure_leaves_outputs_alone");
	CHECK_STATUS(tpu_region_release(ep, 1), -ENOTTY, "region_release_passes_the_kernel_error");
	CHECK_STATUS(tpu_domain_create(ep, &fd, &id), -ENOTTY, "domain_create_passes_the_kernel_error");
	CHECK(fd == -5 && id == 99, "domain_create_failure_leaves_outputs_alone");
	CHECK_STATUS(tpu_domain_attach(ep, 0, &id), -ENOTTY, "domain_attach_passes_the_kernel_error");
	CHECK_STATUS(tpu_send(ep, &s), -ENOTTY, "send_passes_the_kernel_error");
	CHECK_STATUS(tpu_recv(ep, &r), -ENOTTY, "recv_passes_the_kernel_error");
	CHECK(r.len == 77, "recv_failure_other_than_emsgsize_leaves_len_alone");
	CHECK_STATUS(tpu_cancel(ep, "k", 1, TPU_CANCEL_RECV, &count), -ENOTTY,
		     "cancel_passes_the_kernel_error");
	CHECK(count == 7, "cancel_failure_leaves_count_alone");
	CHECK_STATUS(tpu_abort(ep, -ECANCELED), -ENOTTY, "abort_passes_the_kernel_error");
}

void test_endpoint_args(void)
{
	struct tpu_endpoint fake = { .fd = open("/dev/null", O_RDWR | O_CLOEXEC) };

	open_checks();
	null_endpoint();
	if (fake.fd < 0) {
		tap_diag("cannot open /dev/null: %d", errno);
		CHECK(false, "stand_in_endpoint_opens");
		return;
	}
	CHECK(tpu_endpoint_fd(&fake) == fake.fd, "endpoint_fd_returns_the_descriptor");
	null_arguments(&fake);
	key_arguments(&fake);
	kernel_answers_are_passed_on(&fake);
	close(fake.fd);
}
