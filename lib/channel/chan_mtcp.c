// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The mtcp channel: every tensor too big to go inline is striped over the
 * pipe's lanes, extra tcp connections set up beside a tcp pipe (the pipe's
 * pipe_lanes.c opens them).  One TCP stream is bounded by one congestion
 * window and, on the receiving host, by the one core that takes its
 * packets; several streams are not.
 *
 * A tensor of len bytes goes over k = tpu__mtcp_stripes(len, n) lanes,
 * stripe i being bytes [len * i / k, len * (i + 1) / k).  Lanes are taken
 * round-robin; the writer does so in write order and the reader in read
 * order, which are the same message order, so each lane carries its
 * stripes in the order the reader asks for them and no stripe needs a
 * header.
 */
#include <stdio.h>
#include <stdlib.h>

#include "channel.h"

struct mtcp_part {
	struct tpu__chan_xfer x;
};

unsigned int tpu__mtcp_stripes(uint64_t len, unsigned int nlanes)
{
	uint64_t k = len / PIPE_MTCP_CHUNK_MIN;

	if (!k)
		k = 1;
	return k < nlanes ? (unsigned int)k : nlanes;
}

void tpu__mtcp_stripe(uint64_t len, unsigned int k, unsigned int i, uint64_t *off, uint64_t *n)
{
	/* len <= TPU_PIPE_MAX_LEN (2^40) and i <= 16: no overflow. */
	*off = len * i / k;
	*n = len * (i + 1) / k - *off;
}

/* The lane the next stripe goes over, advancing @cursor (tx or rx). */
static struct tpu__conn *next_lane(struct tpu__chan_link *l, unsigned int *cursor)
{
	struct tpu__conn *c = l->lanes[*cursor];

	*cursor = (*cursor + 1) % l->nlanes;
	return c;
}

static void stripe_done(void *arg, tpu_status st)
{
	struct mtcp_part *part = arg;
	struct tpu__chan_xfer x = part->x;

	free(part);
	x.part_done(&x, TPU__PART_IO, st);
}

/* Each stripe is a part of the transfer. */
static tpu_status mtcp_move(struct tpu__chan_link *l, struct tpu__chan_xfer *x, bool write)
{
	struct tpu_message_tensor *t = x->t;
	unsigned int k = tpu__mtcp_stripes(t->len, l->nlanes);

	for (unsigned int s = 0; s < k; s++) {
		struct tpu__conn *lane = next_lane(l, write ? &l->tx : &l->rx);
		struct mtcp_part *part = malloc(sizeof(*part));
		uint64_t off, n;
		tpu_status st;

		if (!part)
			return -ENOMEM;
		part->x = *x;
		tpu__mtcp_stripe(t->len, k, s, &off, &n);
		x->part_start(x, TPU__PART_IO);
		if (write)
			st = lane->ops->write(lane, &(struct iovec){ (uint8_t *)t->data + off,
								(size_t)n },
					      1, stripe_done, part);
		else
			st = lane->ops->read(lane, (uint8_t *)t->data + off, (size_t)n, stripe_done,
					     part);
		if (st) {
			x->part_cancel(x, TPU__PART_IO);
			free(part);
			return st;
		}
	}
	return 0;
}

static tpu_status mtcp_send(struct tpu__chan_link *l, struct tpu__chan_xfer *x)
{
	return mtcp_move(l, x, true);
}

static tpu_status mtcp_recv(struct tpu__chan_link *l, struct tpu__chan_xfer *x)
{
	return mtcp_move(l, x, false);
}

/* Any two ends that share a tcp transport. */
static tpu_status mtcp_descriptor(struct tpu_context *ctx, char *buf, size_t size)
{
	(void)ctx;
	return snprintf(buf, size, "mtcp") < 0 ? -EIO : 0;
}

/* Lanes are tcp connections to the listener: only beside a tcp pipe. */
static bool mtcp_supports(const struct tpu__xport *x, enum tpu_device_type src,
			  enum tpu_device_type dst)
{
	return x == &tpu__xport_tcp && src == TPU_DEVICE_CPU && dst == TPU_DEVICE_CPU;
}

const struct tpu__chan tpu__chan_mtcp = {
	.name = "mtcp",
	.wire_id = 1,
	.flags = TPU__CHAN_LANES,
	.descriptor = mtcp_descriptor,
	.supports = mtcp_supports,
	.send = mtcp_send,
	.recv = mtcp_recv,
};
