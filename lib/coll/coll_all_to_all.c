// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Pairwise all-to-all: block j of member r's input goes to member j, as
 * block r of its output.  Every member posts all its receives and sends at
 * once, starting with the member after it so that not everyone asks
 * member 0 first.  In place (input and output overlapping), the input is
 * copied first, since the blocks it sends are the ones being received.
 */
#include <stdlib.h>
#include <string.h>

#include "coll.h"

tpu_status tpu__coll_pairwise_all_to_all(struct tpu__coll_run *run)
{
	int n = run->n, r = run->rank;
	size_t bytes = run->inst.count * run->esize, total = bytes * (size_t)n;
	const char *in = run->in;
	char *out = run->out, *copy = NULL;
	struct tpu__coll_op **ops;
	tpu_status err = 0, e;

	if (in < out + total && out < in + total && total) {
		copy = malloc(total);
		if (!copy)
			return -ENOMEM;
		memcpy(copy, in, total);
		in = copy;
	}
	memmove(out + (size_t)r * bytes, in + (size_t)r * bytes, bytes);
	ops = calloc((size_t)n, sizeof(*ops));
	if (!ops) {
		free(copy);
		return -ENOMEM;
	}
	for (int i = 1; i < n && !err; i++) {
		int j = (r + i) % n;

		err = tpu__coll_post_recv(run, j, "a2a", 0, 0, out + (size_t)j * bytes, bytes,
					  &ops[j]);
		if (!err)
			err = tpu__coll_post_send(run, j, "a2a", 0, 0, in + (size_t)j * bytes,
						  bytes, -1);
	}
	for (int i = 1; i < n; i++) {
		int j = (r + i) % n;

		if (!ops[j])
			continue;
		e = tpu__coll_wait_recv(run, ops[j], bytes);
		err = err ? err : e;
	}
	if (!err)
		err = tpu__coll_wait_sends(run, -1, -1);
	if (err) {
		/* Sends may still read the copy: end them before it goes. */
		tpu_rendezvous_abort(run->coll->rdv, -ECONNABORTED);
		tpu__coll_drain(run, -1);
	}
	free(copy);
	free(ops);
	return err;
}
