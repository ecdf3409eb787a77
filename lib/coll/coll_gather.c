// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Ring all-gather (TF's RingGatherer): member r's input is block r of
 * every output.  Blocks go round the ring, each member passing on what it
 * received the step before; the blocks land in distinct places, so every
 * receive of every step is posted at the start and each piece is
 * forwarded the moment it arrives.
 */
#include <stdlib.h>
#include <string.h>

#include "coll.h"

static size_t piece_len(size_t bytes, size_t k)
{
	size_t off = k * TPU__COLL_PIECE;

	return bytes - off < TPU__COLL_PIECE ? bytes - off : TPU__COLL_PIECE;
}

static uint64_t index_of(int step, size_t piece)
{
	return (uint64_t)step << 32 | piece;
}

tpu_status tpu__coll_ring_gather(struct tpu__coll_run *run)
{
	int n = run->n, r = run->rank, next = (r + 1) % n, prev = (r + n - 1) % n;
	size_t bytes = run->inst.count * run->esize;
	size_t pieces = (bytes + TPU__COLL_PIECE - 1) / TPU__COLL_PIECE;
	char *out = run->out;
	struct tpu__coll_op **ops;
	tpu_status err = 0;

	if (out + (size_t)r * bytes != run->in)
		memmove(out + (size_t)r * bytes, run->in, bytes);
	if (n == 1)
		return 0;
	ops = calloc((size_t)(n - 1) * pieces + 1, sizeof(*ops));
	if (!ops)
		return -ENOMEM;
	/* Step s brings block r-s-1 from the previous member. */
	for (int s = 0; s < n - 1 && !err; s++) {
		char *blk = out + (size_t)((r - s - 1 + n) % n) * bytes;

		for (size_t k = 0; k < pieces && !err; k++)
			err = tpu__coll_post_recv(run, prev, "ag", 0, index_of(s, k),
						  blk + k * TPU__COLL_PIECE, piece_len(bytes, k),
						  &ops[(size_t)s * pieces + k]);
	}
	/* Step 0 sends this member's own block. */
	for (size_t k = 0; k < pieces && !err; k++)
		err = tpu__coll_post_send(run, next, "ag", 0, index_of(0, k),
					  out + (size_t)r * bytes + k * TPU__COLL_PIECE,
					  piece_len(bytes, k), -1);
	for (int s = 0; s < n - 1 && !err; s++) {
		char *blk = out + (size_t)((r - s - 1 + n) % n) * bytes;

		for (size_t k = 0; k < pieces && !err; k++) {
			struct tpu__coll_op **op = &ops[(size_t)s * pieces + k];

			err = tpu__coll_wait_recv(run, *op, piece_len(bytes, k));
			*op = NULL;
			/* Pass it on, except to the member it started from. */
			if (!err && s < n - 2)
				err = tpu__coll_post_send(run, next, "ag", 0, index_of(s + 1, k),
							  blk + k * TPU__COLL_PIECE,
							  piece_len(bytes, k), -1);
		}
	}
	if (!err)
		err = tpu__coll_wait_sends(run, -1, -1);
	free(ops);
	return err;
}
