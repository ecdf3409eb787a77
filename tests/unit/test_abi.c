// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The ABI policy of Documentation/abi.rst as the library applies it: the
 * public structures that may grow end in reserved words, every entry point
 * refuses a structure whose reserved words are not zero (so the room stays
 * usable for later fields), and their sizes are what the baseline says on
 * this platform (a change here is a change of lib/abi/libtpu_user.abi too).
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "pipe_harness.h"
#include "tap.h"
#include "tpu_user.h"

#define SECOND	1000000000ull

static void layouts(void)
{
#if defined(__x86_64__) || defined(__aarch64__)
	CHECK(sizeof(struct tpu_tensor) == 64 &&
	      offsetof(struct tpu_tensor, reserved) == 40,
	      "tensor_is_64_bytes_with_24_reserved_at_its_end");
	CHECK(sizeof(struct tpu_message_tensor) == 96 &&
	      offsetof(struct tpu_message_tensor, reserved) == 72,
	      "message_tensor_is_96_bytes_with_24_reserved_at_its_end");
	CHECK(sizeof(struct tpu_recv_item) == 96, "recv_item_holds_the_64_byte_tensor");
	CHECK(sizeof(struct tpu_context_options) == 64 && sizeof(struct tpu_remote_options) == 72 &&
	      sizeof(struct tpu_world_options) == 72 && sizeof(struct tpu_coll_instance) == 120,
	      "options_and_instance_end_in_32_reserved_bytes");
#endif
	CHECK(TPU_VERSION_MAJOR == 1 && (tpu_version() >> 16) == TPU_VERSION_MAJOR,
	      "major_version_1_is_the_soname_libtpu_user_so_1");
}

static void tensors(struct tpu_context *ctx)
{
	static char data[64];
	struct tpu_rendezvous *rdv = NULL;
	struct tpu_tensor t = { .data = data, .len = sizeof(data) };
	size_t len = 0;

	CHECK(tpu_rendezvous_create(ctx, TPU_RDV_INPROCESS, &rdv) == 0, "abi_rendezvous_created");
	for (int i = 0; i < 3; i++) {
		t.reserved[i] = 1;
		CHECK_STATUS(tpu_rendezvous_send(rdv, "k", 1, &t, 0, NULL, NULL), -EINVAL,
			     "send_with_tensor_reserved[%d]_set_is_einval", i);
		CHECK_STATUS(tpu_rendezvous_recv_wait(rdv, "k", 1, &t, SECOND, &len), -EINVAL,
			     "recv_with_tensor_reserved[%d]_set_is_einval", i);
		t.reserved[i] = 0;
	}
	/* A device tensor is refused for the same reason before any driver is asked. */
	t.device.type = TPU_DEVICE_CUDA;
	t.reserved[2] = 1;
	CHECK_STATUS(tpu_rendezvous_send(rdv, "k", 1, &t, 0, NULL, NULL), -EINVAL,
		     "send_of_a_device_tensor_with_reserved_set_is_einval");
	t = (struct tpu_tensor){ .data = data, .len = sizeof(data) };
	/* Zeroed reserved words: the same calls work. */
	CHECK(tpu_rendezvous_send(rdv, "k", 1, &t, 0, NULL, NULL) == 0 &&
	      tpu_rendezvous_recv_wait(rdv, "k", 1, &t, 5 * SECOND, &len) == 0 &&
	      len == sizeof(data), "zeroed_tensor_still_goes_through");
	tpu_rendezvous_destroy(rdv);
}

static void options(struct tpu_context *ctx)
{
	struct tpu_context_options co = { .reserved = { 0, 0, 0, 1 } };
	struct tpu_remote_options ro = { .task = "/job:a/replica:0/task:0", .reserved = { 1 } };
	struct tpu_world_info info = { .rank = 0, .size = 1, .local_rank = -1, .local_size = -1,
				       .store_host = "127.0.0.1", .store_port = 1 };
	struct tpu_world_options wo = { .info = &info, .reserved = { 0, 1 } };
	struct tpu_context *c2 = NULL;
	struct tpu_rendezvous *rdv = NULL;
	struct tpu_world *w = NULL;

	CHECK_STATUS(tpu_context_create(&co, &c2), -EINVAL, "context_options_with_reserved_set_is_einval");
	CHECK(!c2, "no_context_made");
	CHECK_STATUS(tpu_rendezvous_create_remote(ctx, &ro, &rdv), -EINVAL,
		     "remote_options_with_reserved_set_is_einval");
	CHECK_STATUS(tpu_world_create(ctx, &wo, &w), -EINVAL,
		     "world_options_with_reserved_set_is_einval");
	CHECK(!rdv && !w, "nothing_made_from_bad_options");
}

static void coll_instance(struct tpu_context *ctx)
{
	static const char *const devs[] = { "/job:a/replica:0/task:0/device:CPU:0" };
	struct tpu_coll_group g = { .group_key = 1, .group_size = 1, .device_type = "CPU",
				    .devices = devs };
	struct tpu_coll_instance in = { .instance_key = 1, .type = TPU_COLL_REDUCTION,
					.dtype = TPU_DT_FLOAT32, .count = 4, .reserved = { 0, 0, 1 } };
	struct tpu_coll_member m = { .device = devs[0] };
	float a[4] = { 1, 2, 3, 4 }, b[4];
	struct tpu_rendezvous *rdv = NULL;
	struct tpu_coll *coll = NULL;
	struct tpu_coll_exec *exec = NULL;

	if (tpu_rendezvous_create(ctx, TPU_RDV_INPROCESS, &rdv) || tpu_coll_create(rdv, &coll) ||
	    tpu_coll_exec_create(coll, 1, &exec)) {
		CHECK(false, "coll_instance_set_up");
	} else {
		CHECK_STATUS(tpu_coll_exec_run(exec, &g, &in, &m, a, b), -EINVAL,
			     "coll_instance_with_reserved_set_is_einval");
	}
	tpu_coll_exec_destroy(exec);
	tpu_coll_destroy(coll);
	tpu_rendezvous_destroy(rdv);
}

static void message_tensor(void)
{
	static char data[16];
	struct tpu_message_tensor t = { .data = data, .len = sizeof(data), .reserved = { 0, 1 } };
	struct tpu_message msg = { .tensors = &t, .ntensors = 1 };
	struct pair pp;
	struct rec r;
	struct tag tag = { &r, 0 };
	bool up = pair_open(&pp, "tcp://127.0.0.1:0", NULL);

	rec_init(&r);
	CHECK(up, "abi_pipe_pair_opens");
	if (up)
		CHECK_STATUS(tpu_pipe_write(pp.client, &msg, on_write, &tag), -EINVAL,
			     "pipe_write_of_a_tensor_with_reserved_set_is_einval");
	pair_close(&pp);
}

void test_abi(void)
{
	struct tpu_context *ctx = NULL;

	layouts();
	CHECK(tpu_context_create(NULL, &ctx) == 0, "abi_context_created");
	if (!ctx)
		return;
	tensors(ctx);
	options(ctx);
	coll_instance(ctx);
	message_tensor();
	tpu_context_destroy(ctx);
}
