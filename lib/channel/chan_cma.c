// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The cma channel: the writer says where the tensor lies (its pid and the
 * address, 12 bytes of per-tensor descriptor), the reader pulls it with
 * process_vm_readv when its read starts and ACKs it, and the writer holds
 * its memory until that ACK.
 *
 * Compatibility descriptor: boot id, pid namespace (pids travel in
 * descriptors), uid.
 */
#include <stdio.h>
#include <unistd.h>

#include "channel.h"

#define CMA_DESC_LEN	12	/* pid (4 bytes), address (8), little-endian */

static void cma_describe(const struct tpu__chan_xfer *x, uint8_t *d)
{
	uint32_t pid = (uint32_t)getpid();
	uint64_t addr = (uint64_t)(uintptr_t)x->t->data;

	for (int b = 0; b < 4; b++)
		d[b] = (uint8_t)(pid >> (8 * b));
	for (int b = 0; b < 8; b++)
		d[4 + b] = (uint8_t)(addr >> (8 * b));
}

/* Nothing to send: the writer waits for the reader's ACK. */
static tpu_status cma_send(struct tpu__chan_link *l, struct tpu__chan_xfer *x)
{
	(void)l;
	x->part_start(x, TPU__PART_ACK);
	return 0;
}

/* Pull the tensor now and tell the writer its memory is free again. */
static tpu_status cma_recv(struct tpu__chan_link *l, struct tpu__chan_xfer *x)
{
	uint32_t pid = 0;
	uint64_t addr = 0;

	(void)l;
	for (int b = 0; b < 4; b++)
		pid |= (uint32_t)x->desc[b] << (8 * b);
	for (int b = 0; b < 8; b++)
		addr |= (uint64_t)x->desc[4 + b] << (8 * b);
	return x->ack(x, tpu_cma_read((pid_t)pid, addr, x->t->data, x->t->len));
}

static tpu_status cma_descriptor(struct tpu_context *ctx, char *buf, size_t size)
{
	char boot[64], why[160];
	tpu_status st = tpu__cma_viable(why, sizeof(why));

	(void)ctx;
	if (st) {
		tpu__log_debug("pipe: no cma channel: %s", why);
		return st;
	}
	st = tpu__boot_id(boot, sizeof(boot));
	if (st)
		return st;
	snprintf(buf, size, "cma:%s:%llu:%u", boot, (unsigned long long)tpu__cma_pid_ns(),
		 (unsigned int)geteuid());
	return 0;
}

static bool cma_supports(const struct tpu__xport *x, enum tpu_device_type src,
			 enum tpu_device_type dst)
{
	(void)x;
	return src == TPU_DEVICE_CPU && dst == TPU_DEVICE_CPU;
}

const struct tpu__chan tpu__chan_cma = {
	.name = "cma",
	.wire_id = 2,
	.flags = TPU__CHAN_ACKED,
	.desc_len = CMA_DESC_LEN,
	.descriptor = cma_descriptor,
	.supports = cma_supports,
	.describe = cma_describe,
	.send = cma_send,
	.recv = cma_recv,
};
