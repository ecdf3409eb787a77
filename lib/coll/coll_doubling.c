// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Recursive doubling all-reduce, for small tensors where the ring's
 * 2(n-1) latency-bound steps cost more than the bytes: log2(n) exchanges
 * of the whole tensor.  A group that is not a power of two first folds
 * its extra members into the lowest ones and hands them the result at the
 * end.  Every merge is a op b on one side and b op a on the other, which
 * IEEE arithmetic makes equal, so all members end bit-identical.
 */
#include <stdlib.h>
#include <string.h>

#include "coll.h"

/* Send @buf to @peer and take its tensor into @tmp; both complete before the merge. */
static tpu_status swap(struct tpu__coll_run *run, int peer, int step, void *buf, void *tmp,
		       size_t bytes)
{
	struct tpu__coll_op *op;
	tpu_status err, e;

	err = tpu__coll_post_send(run, peer, "rd", 0, (uint64_t)step, buf, bytes, -1);
	if (err)
		return err;
	err = tpu__coll_post_recv(run, peer, "rd", 0, (uint64_t)step, tmp, bytes, &op);
	if (!err)
		err = tpu__coll_wait_recv(run, op, bytes);
	/* The peer's read of @buf must be over before @buf changes. */
	e = tpu__coll_wait_sends(run, 0, -1);
	return err ? err : e;
}

tpu_status tpu__coll_doubling_allreduce(struct tpu__coll_run *run)
{
	const struct tpu_coll_instance *in = &run->inst;
	int n = run->n, r = run->rank, p2 = 1, step = 0;
	size_t bytes = in->count * run->esize;
	struct tpu__coll_op *op;
	char *tmp;
	tpu_status err = 0;

	if (run->in != run->out)
		memcpy(run->out, run->in, bytes);
	while (p2 * 2 <= n)
		p2 *= 2;
	tmp = malloc(bytes ? bytes : 1);
	if (!tmp)
		return -ENOMEM;
	/* Fold: member p2 + i hands its tensor to member i and waits for the result. */
	if (r >= p2) {
		err = tpu__coll_post_send(run, r - p2, "fold", 0, 0, run->out, bytes, -1);
		if (!err)
			err = tpu__coll_wait_sends(run, 0, -1);
		if (!err)
			err = tpu__coll_post_recv(run, r - p2, "unfold", 0, 0, run->out, bytes,
						  &op);
		if (!err)
			err = tpu__coll_wait_recv(run, op, bytes);
		free(tmp);
		return err;
	}
	if (r + p2 < n) {
		err = tpu__coll_post_recv(run, r + p2, "fold", 0, 0, tmp, bytes, &op);
		if (!err)
			err = tpu__coll_wait_recv(run, op, bytes);
		if (!err)
			tpu__coll_reduce(in->dtype, in->op, run->out, tmp, in->count);
	}
	/* Doubling: at distance 1, 2, 4... partners swap what they have merged so far. */
	for (int mask = 1; mask < p2 && !err; mask <<= 1, step++) {
		err = swap(run, r ^ mask, step, run->out, tmp, bytes);
		if (!err)
			tpu__coll_reduce(in->dtype, in->op, run->out, tmp, in->count);
	}
	if (!err)
		tpu__coll_final(in->dtype, in->final_op, run->out, in->count, n);
	/* Unfold: the extra member gets the finished tensor. */
	if (!err && r + p2 < n) {
		err = tpu__coll_post_send(run, r + p2, "unfold", 0, 0, run->out, bytes, -1);
		if (!err)
			err = tpu__coll_wait_sends(run, 0, -1);
	}
	if (err) {
		/* A receive may still be writing into tmp: end it first. */
		tpu_rendezvous_abort(run->coll->rdv, -ECONNABORTED);
		tpu__coll_drain(run, -1);
	}
	free(tmp);
	return err;
}
