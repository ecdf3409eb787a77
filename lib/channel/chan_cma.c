// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The cma channel: the writer says where the tensor lies (its pid and the
 * address, 12 bytes of per-tensor descriptor), the reader pulls it with
 * process_vm_readv when its read starts and ACKs it, and the writer holds
 * its memory until that ACK.
 *
 * Compatibility descriptor: boot id, pid namespace (pids travel in
 * descriptors), uid.
 *
 * Trust: the pid in a descriptor is only the peer's claim.  The reader
 * pulls from the pid the kernel gave the transport for this connection
 * (SO_PEERCRED, ->peer_pid), so cma goes only beside transports that have
 * one (->proves_peer: shm, not tcp or rdma), and a descriptor naming any
 * other pid is a forgery that fails the read and the pipe.  The address
 * and length stay the peer's word: the length is the reader's own buffer's,
 * and the address is looked up in the peer's own memory, so the worst a
 * peer can make us read is its own bytes.  Documentation/security.rst.
 */
#include <stdio.h>
#include <unistd.h>

#include "channel.h"

#define CMA_DESC_LEN	12	/* pid (4 bytes), address (8), little-endian */

static void cma_describe(const struct tpu__chan_xfer *x, uint8_t *d)
{
	tpu__chan_put_le(d, (uint32_t)getpid(), 4);
	tpu__chan_put_le(d + 4, (uint64_t)(uintptr_t)x->t->data, 8);
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
	int peer = l->conn ? l->conn->ops->peer_pid(l->conn) : 0;
	uint32_t pid = (uint32_t)tpu__chan_get_le(x->desc, 4);
	uint64_t addr = tpu__chan_get_le(x->desc + 4, 8);

	/* The recv's error fails this read and the pipe: the peer broke the protocol. */
	if (peer <= 0 || pid != (uint32_t)peer) {
		tpu__log_debug("pipe: cma: the peer (pid %d, as the kernel says) named pid %u "
			       "for a tensor: refused", peer, pid);
		return -EPERM;
	}
	return x->ack(x, tpu_cma_read((pid_t)peer, addr, x->t->data, x->t->len));
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
	if (src != TPU_DEVICE_CPU || dst != TPU_DEVICE_CPU)
		return false;
	if (!x->proves_peer)
		tpu__log_debug("pipe: no cma channel over %s: it cannot prove the peer's pid",
			       x->name);
	return x->proves_peer;
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
