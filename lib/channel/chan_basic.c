// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The basic channel: tensors go inline in the pipe's own stream, behind
 * the message's descriptor, like payloads.  Every pipe has it; the pipe
 * itself moves the bytes (TPU__CHAN_INLINE), so it has no send or recv.
 */
#include <stdio.h>

#include "channel.h"

static tpu_status basic_descriptor(struct tpu_context *ctx, char *buf, size_t size)
{
	(void)ctx;
	return snprintf(buf, size, "basic") < 0 ? -EIO : 0;
}

static bool basic_supports(const struct tpu__xport *x, enum tpu_device_type src,
			   enum tpu_device_type dst)
{
	(void)x;
	return src == TPU_DEVICE_CPU && dst == TPU_DEVICE_CPU;
}

const struct tpu__chan tpu__chan_basic = {
	.name = "basic",
	.wire_id = 0,			/* never on the wire: inline tensors say so */
	.flags = TPU__CHAN_INLINE,
	.descriptor = basic_descriptor,
	.supports = basic_supports,
};
