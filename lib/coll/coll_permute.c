// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Permute, directly: rank r sends its whole input to rank permutation[r]
 * and receives its output from the one rank that names it.  A member that
 * names itself copies.  In place (input and output overlapping) the input
 * is copied first, since the tensor received lands where it is being sent
 * from.
 */
#include <stdlib.h>
#include <string.h>

#include "coll.h"

tpu_status tpu__coll_direct_permute(struct tpu__coll_run *run)
{
	int r = run->rank, to = run->perm[r], from = -1;
	size_t bytes = run->inst.count * run->esize;
	const char *in = run->in;
	char *out = run->out, *copy = NULL;
	struct tpu__coll_op *op = NULL;
	tpu_status err;

	for (int j = 0; j < run->n; j++)
		if (run->perm[j] == r)
			from = j;
	/* Resolution checked the permutation on every member: someone names this one. */
	if (from < 0)
		return -EPROTO;
	if (to == r) {
		memmove(out, in, bytes);
		return 0;
	}
	if (in < out + bytes && out < in + bytes && bytes) {
		copy = malloc(bytes);
		if (!copy)
			return -ENOMEM;
		memcpy(copy, in, bytes);
		in = copy;
	}
	err = tpu__coll_post_recv(run, from, "perm", 0, 0, out, bytes, &op);
	if (!err)
		err = tpu__coll_post_send(run, to, "perm", 0, 0, in, bytes, -1);
	if (!err)
		err = tpu__coll_wait_recv(run, op, bytes);
	if (!err)
		err = tpu__coll_wait_sends(run, -1, -1);
	if (err) {
		/* The receive may still write, the send still read the copy: end them first. */
		tpu_rendezvous_abort(run->coll->rdv, -ECONNABORTED);
		tpu__coll_drain(run, -1);
	}
	free(copy);
	return err;
}
