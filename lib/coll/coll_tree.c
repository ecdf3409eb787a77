// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Tree broadcast (TF's HierarchicalTreeBroadcaster, one level): a binary
 * tree rooted at the source rank, members numbered from the source.  Every
 * piece a member receives goes on to its children at once, so the tensor
 * streams down the tree instead of waiting at each level.
 */
#include <stdlib.h>
#include <string.h>

#include "coll.h"

static size_t piece_len(size_t bytes, size_t k)
{
	size_t off = k * TPU__COLL_PIECE;

	return bytes - off < TPU__COLL_PIECE ? bytes - off : TPU__COLL_PIECE;
}

tpu_status tpu__coll_tree_broadcast(struct tpu__coll_run *run)
{
	int n = run->n, src = run->res.source_rank;
	int v = (run->rank - src + n) % n;		/* place in the tree, source at 0 */
	int kids[2] = { 2 * v + 1, 2 * v + 2 };
	size_t bytes = run->inst.count * run->esize;
	size_t pieces = (bytes + TPU__COLL_PIECE - 1) / TPU__COLL_PIECE;
	const char *buf = v ? run->out : run->in;
	struct tpu__coll_op **ops = NULL;
	tpu_status err = 0;

	if (!v && run->out && run->out != run->in)
		memcpy(run->out, run->in, bytes);
	if (v) {
		/* Every piece's receive is posted at once: they stream in as earlier ones go on. */
		ops = calloc(pieces + 1, sizeof(*ops));
		if (!ops)
			return -ENOMEM;
		for (size_t k = 0; k < pieces && !err; k++)
			err = tpu__coll_post_recv(run, ((v - 1) / 2 + src) % n, "bc", 0, k,
						  run->out + k * TPU__COLL_PIECE,
						  piece_len(bytes, k), &ops[k]);
	}
	for (size_t k = 0; k < pieces && !err; k++) {
		if (v) {
			err = tpu__coll_wait_recv(run, ops[k], piece_len(bytes, k));
			ops[k] = NULL;
		}
		for (int c = 0; c < 2 && !err; c++)
			if (kids[c] < n)
				err = tpu__coll_post_send(run, (kids[c] + src) % n, "bc", 0, k,
							  buf + k * TPU__COLL_PIECE,
							  piece_len(bytes, k), -1);
	}
	if (!err)
		err = tpu__coll_wait_sends(run, -1, -1);
	free(ops);
	return err;
}
