// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The cuda_ipc channel: the reader copies straight out of the writer's
 * device memory, opened through a CUDA IPC handle, and ACKs the tensor;
 * the writer holds its memory until that ACK (like cma for CPU memory).
 *
 * Writer: waits for the work queued on the tensor's stream (an event, not
 * the device), then describes the tensor: its allocation's IPC handle,
 * the offset in it, its device, the writer's pid and the tensor's address
 * (88 bytes).  Reader:
 * opens the handle on its own tensor's device (or device 0 for a CPU
 * destination), copies (device to device, or device to host) after the
 * work queued on its stream, closes the handle, ACKs.  Between two pipes
 * of one process the handle is not opened (the driver refuses a process
 * its own handles): the reader copies from the writer's address.
 *
 * Compatibility descriptor: boot id, pid namespace, uid (one host, one
 * user), and a CUDA driver with a device on this end.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "channel.h"

/* handle, offset (8 bytes), pid (4), device (4), address (8); little-endian */
#define IPC_DESC_LEN	(TPU__CU_IPC_HANDLE_SIZE + 24)

/*
 * Nothing to describe when the export fails: send reports it.  A tensor
 * this end cannot export gets an all-zero handle, which no driver opens.
 */
static void ipc_describe(const struct tpu__chan_xfer *x, uint8_t *d)
{
	tpu__cu_ipc_handle h;
	uint64_t off = 0;

	memset(d, 0, IPC_DESC_LEN);
	tpu__chan_put_le(d + TPU__CU_IPC_HANDLE_SIZE + 8, (uint32_t)getpid(), 4);
	tpu__chan_put_le(d + TPU__CU_IPC_HANDLE_SIZE + 12, x->t->device.index, 4);
	tpu__chan_put_le(d + TPU__CU_IPC_HANDLE_SIZE + 16, (uint64_t)(uintptr_t)x->t->data, 8);
	if (tpu__cuda_ipc_export(x->t->data, x->t->device.index, &h, &off))
		return;
	memcpy(d, &h, TPU__CU_IPC_HANDLE_SIZE);
	tpu__chan_put_le(d + TPU__CU_IPC_HANDLE_SIZE, off, 8);
}

/* The reader reads once the user's work on the tensor is done; then its ACK. */
static tpu_status ipc_send(struct tpu__chan_link *l, struct tpu__chan_xfer *x)
{
	tpu_status st;

	(void)l;
	st = tpu__cuda_stream_done(x->t->device.index, x->t->stream);
	if (st)
		return st;
	x->part_start(x, TPU__PART_ACK);
	return 0;
}

static tpu_status ipc_copy(struct tpu__chan_xfer *x)
{
	const uint8_t *d = x->desc;
	struct tpu_message_tensor *t = x->t;
	tpu__cu_ipc_handle h;
	uint64_t off = tpu__chan_get_le(d + TPU__CU_IPC_HANDLE_SIZE, 8);
	uint32_t pid = (uint32_t)tpu__chan_get_le(d + TPU__CU_IPC_HANDLE_SIZE + 8, 4);
	struct tpu_device src = { TPU_DEVICE_CUDA,
				  (uint32_t)tpu__chan_get_le(d + TPU__CU_IPC_HANDLE_SIZE + 12, 4) };
	uint32_t dev = t->device.type == TPU_DEVICE_CUDA ? t->device.index : 0;
	void *base;
	tpu_status st, st2;

	memcpy(&h, d, TPU__CU_IPC_HANDLE_SIZE);
	if (pid == (uint32_t)getpid()) {
		/* One process: the writer's address is ours (see above). */
		uint64_t addr = tpu__chan_get_le(d + TPU__CU_IPC_HANDLE_SIZE + 16, 8);

		return tpu__cuda_copy(t->data, t->device, (const void *)(uintptr_t)addr, src,
				      t->len, t->stream);
	}
	st = tpu__cuda_ipc_open(&h, dev, &base);
	if (st)
		return st;
	/* The opened memory counts as this end's device for the copy. */
	src.index = dev;
	st = tpu__cuda_copy(t->data, t->device, (char *)base + off, src, t->len, t->stream);
	st2 = tpu__cuda_ipc_close(dev, base);
	return st ? st : st2;
}

static tpu_status ipc_recv(struct tpu__chan_link *l, struct tpu__chan_xfer *x)
{
	(void)l;
	return x->ack(x, ipc_copy(x));
}

static tpu_status ipc_descriptor(struct tpu_context *ctx, char *buf, size_t size)
{
	char boot[64];
	const char *why;
	tpu_status st = tpu__cuda_api(NULL, &why);

	(void)ctx;
	if (st) {
		tpu__log_debug("pipe: no cuda_ipc channel: %s", why);
		return st;
	}
	st = tpu__boot_id(boot, sizeof(boot));
	if (st)
		return st;
	snprintf(buf, size, "cuda_ipc:%s:%llu:%u", boot, (unsigned long long)tpu__cma_pid_ns(),
		 (unsigned int)geteuid());
	return 0;
}

static bool ipc_supports(const struct tpu__xport *x, enum tpu_device_type src,
			 enum tpu_device_type dst)
{
	(void)x;
	(void)dst;
	return src == TPU_DEVICE_CUDA;
}

const struct tpu__chan tpu__chan_cuda_ipc = {
	.name = "cuda_ipc",
	.wire_id = 6,
	.flags = TPU__CHAN_ACKED,
	.desc_len = IPC_DESC_LEN,
	.descriptor = ipc_descriptor,
	.supports = ipc_supports,
	.describe = ipc_describe,
	.send = ipc_send,
	.recv = ipc_recv,
};
