// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The cuda_staged channel: tensors with CUDA memory on either side go
 * inline in the pipe's own stream, through page-locked host memory
 * (TPU__CHAN_STAGED: the pipe stages them, see pipe_write.c and
 * pipe_read.c).  The writer copies device memory into staging memory
 * (tpu__cuda_copy: on the library's stream, after the user's stream's
 * work, in chunks) before the frame goes out; the reader reads the bytes
 * into staging memory and copies them to the device.  A side whose tensor
 * is in CPU memory neither stages nor needs a driver.  It works over every
 * transport, between hosts too: the fallback for device memory.
 *
 * Compatibility descriptor: its name (any two ends can use it).
 */
#include <stdio.h>

#include "channel.h"

static tpu_status staged_descriptor(struct tpu_context *ctx, char *buf, size_t size)
{
	(void)ctx;
	return snprintf(buf, size, "cuda_staged") < 0 ? -EIO : 0;
}

static bool staged_supports(const struct tpu__xport *x, enum tpu_device_type src,
			    enum tpu_device_type dst)
{
	(void)x;
	return src == TPU_DEVICE_CUDA || dst == TPU_DEVICE_CUDA;
}

const struct tpu__chan tpu__chan_cuda_staged = {
	.name = "cuda_staged",
	.wire_id = 5,
	.flags = TPU__CHAN_STAGED,
	.descriptor = staged_descriptor,
	.supports = staged_supports,
};
