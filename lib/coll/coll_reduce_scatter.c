// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Ring reduce-scatter: the first half of the ring all-reduce on its own.
 * Chunks are numbered so that member r ends holding chunk r complete,
 * which is its output (tpu_coll_chunk() says where it lies).  The input
 * stays untouched: the merging happens in a copy.
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

static tpu_status scatter(struct tpu__coll_run *run, char *work, char *tmp,
			  struct tpu__coll_op **ops)
{
	const struct tpu_coll_instance *in = &run->inst;
	int n = run->n, r = run->rank, next = (r + 1) % n, prev = (r + n - 1) % n;
	size_t es = run->esize;
	tpu_status err = 0;

	/* Step 0 sends chunk r-1, so that the chunk finished at step n-2 is chunk r. */
	for (int s = -1; s < n - 1 && !err; s++) {
		/* Send what step s finished (for s = -1: the input's chunk r-1). */
		int c = ((r - s - 2) % n + n) % n;
		size_t off = tpu__coll_chunk_start(in->count, n, c) * es;
		size_t bytes = tpu__coll_chunk_len(in->count, n, c) * es;
		size_t pieces = (bytes + TPU__COLL_PIECE - 1) / TPU__COLL_PIECE;

		for (size_t k = 0; k < pieces && !err && s >= 0; k++)
			err = tpu__coll_post_recv(run, prev, "rsc", 0, index_of(s, k),
						  tmp + k * TPU__COLL_PIECE, piece_len(bytes, k),
						  &ops[k]);
		for (size_t k = 0; k < pieces && !err; k++) {
			size_t at = k * TPU__COLL_PIECE, len = piece_len(bytes, k);
			char *piece = work + off + at;

			if (s >= 0) {
				/* Step s: chunk r-s-2 arrives, is merged, and goes on. */
				err = tpu__coll_wait_recv(run, ops[k], len);
				ops[k] = NULL;
				if (err)
					break;
				tpu__coll_reduce(in->dtype, in->op, piece, tmp + at, len / es);
			}
			if (s < n - 2)
				err = tpu__coll_post_send(run, next, "rsc", 0, index_of(s + 1, k),
							  piece, piece_len(bytes, k), c);
		}
	}
	if (!err)
		err = tpu__coll_wait_sends(run, -1, -1);
	return err;
}

tpu_status tpu__coll_ring_reduce_scatter(struct tpu__coll_run *run)
{
	const struct tpu_coll_instance *in = &run->inst;
	size_t es = run->esize, len, start = tpu_coll_chunk(in->count, run->n, run->rank, &len);
	size_t biggest = tpu__coll_chunk_len(in->count, run->n, 0) * es;
	char *work = malloc(in->count * es + 1), *tmp = malloc(biggest + 1);
	struct tpu__coll_op **ops = calloc(biggest / TPU__COLL_PIECE + 2, sizeof(*ops));
	tpu_status err = work && tmp && ops ? 0 : -ENOMEM;

	if (!err) {
		memcpy(work, run->in, in->count * es);
		if (run->n > 1)
			err = scatter(run, work, tmp, ops);
	}
	if (!err) {
		tpu__coll_final(in->dtype, in->final_op, work + start * es, len, run->n);
		memmove(run->out, work + start * es, len * es);
	} else {
		/* Receives may still be writing into tmp and sends reading work: end them first. */
		tpu_rendezvous_abort(run->coll->rdv, -ECONNABORTED);
		tpu__coll_drain(run, -1);
	}
	free(work);
	free(tmp);
	free(ops);
	return err;
}
