// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Ring all-reduce (TF's RingReducer): the tensor is cut into one part per
 * subdivision and each part into one chunk per member; every subdivision
 * is a ring of its own, starting at its offset (odd ones turning the other
 * way, so two rings load both directions of every link), on a thread of
 * its own.  Chunks move in pieces: a piece is reduced and sent on as soon
 * as it arrived, so reducing one overlaps moving the next.
 */
#include <stdlib.h>
#include <string.h>

#include "coll.h"

struct ring {
	struct tpu__coll_run *run;
	int subdiv;
	char *buf;		/* this part of the output */
	size_t count;		/* its elements */
	int pos;		/* this member's place on the ring */
	int next, prev;		/* the ranks after and before it */
	tpu_status err;
};

static int mod(int a, int n)
{
	return ((a % n) + n) % n;
}

static size_t pieces_of(size_t bytes)
{
	return (bytes + TPU__COLL_PIECE - 1) / TPU__COLL_PIECE;
}

static size_t piece_len(size_t bytes, size_t k)
{
	size_t off = k * TPU__COLL_PIECE;

	return bytes - off < TPU__COLL_PIECE ? bytes - off : TPU__COLL_PIECE;
}

static uint64_t index_of(int step, size_t piece)
{
	return (uint64_t)step << 32 | piece;
}

/* Send every piece of chunk @c of this ring under @tag at @step. */
static tpu_status send_chunk(struct ring *g, const char *tag, int step, int c)
{
	struct tpu__coll_run *run = g->run;
	size_t es = run->esize, off = tpu__coll_chunk_start(g->count, run->n, c) * es;
	size_t bytes = tpu__coll_chunk_len(g->count, run->n, c) * es;
	tpu_status err = 0;

	for (size_t k = 0; k < pieces_of(bytes) && !err; k++)
		err = tpu__coll_post_send(run, g->next, tag, g->subdiv, index_of(step, k),
					  g->buf + off + k * TPU__COLL_PIECE, piece_len(bytes, k),
					  c);
	return err;
}

static tpu_status post_recvs(struct ring *g, const char *tag, int step, char *dst, size_t bytes,
			     struct tpu__coll_op **ops)
{
	tpu_status err = 0;

	for (size_t k = 0; k < pieces_of(bytes) && !err; k++)
		err = tpu__coll_post_recv(g->run, g->prev, tag, g->subdiv, index_of(step, k),
					  dst + k * TPU__COLL_PIECE, piece_len(bytes, k), &ops[k]);
	return err;
}

static tpu_status ring_part(struct ring *g, char *tmp, struct tpu__coll_op **ops)
{
	struct tpu__coll_run *run = g->run;
	const struct tpu_coll_instance *in = &run->inst;
	int n = run->n;
	size_t es = run->esize;
	tpu_status err;

	/* Reduce-scatter, step 0: this member's own chunk starts around the ring. */
	err = send_chunk(g, "rs", 0, g->pos);
	for (int s = 0; s < n - 1 && !err; s++) {
		/* Step s: the chunk two behind arrives and is merged, then goes on. */
		int c = mod(g->pos - s - 1, n);
		size_t off = tpu__coll_chunk_start(g->count, n, c) * es;
		size_t bytes = tpu__coll_chunk_len(g->count, n, c) * es;
		bool last = s == n - 2;

		err = post_recvs(g, "rs", s, tmp, bytes, ops);
		for (size_t k = 0; k < pieces_of(bytes) && !err; k++) {
			char *piece = g->buf + off + k * TPU__COLL_PIECE;
			size_t len = piece_len(bytes, k);

			err = tpu__coll_wait_recv(run, ops[k], len);
			ops[k] = NULL;
			if (err)
				break;
			tpu__coll_reduce(in->dtype, in->op, piece, tmp + k * TPU__COLL_PIECE,
					 len / es);
			/* After the last step this chunk is complete here: finish it once. */
			if (last)
				tpu__coll_final(in->dtype, in->final_op, piece, len / es, n);
			err = tpu__coll_post_send(run, g->next, last ? "ag" : "rs", g->subdiv,
						  index_of(last ? 0 : s + 1, k), piece, len, c);
		}
	}
	/* All-gather: the complete chunks go round once more, each overwriting the stale copy. */
	for (int s = 0; s < n - 1 && !err; s++) {
		int c = mod(g->pos - s, n);
		size_t off = tpu__coll_chunk_start(g->count, n, c) * es;
		size_t bytes = tpu__coll_chunk_len(g->count, n, c) * es;

		/* The reduce-scatter sent this chunk at step s: read it before replacing it. */
		err = tpu__coll_wait_sends(run, g->subdiv, c);
		if (!err)
			err = post_recvs(g, "ag", s, g->buf + off, bytes, ops);
		for (size_t k = 0; k < pieces_of(bytes) && !err; k++) {
			err = tpu__coll_wait_recv(run, ops[k], piece_len(bytes, k));
			ops[k] = NULL;
			if (!err && s < n - 2)
				err = tpu__coll_post_send(run, g->next, "ag", g->subdiv,
							  index_of(s + 1, k),
							  g->buf + off + k * TPU__COLL_PIECE,
							  piece_len(bytes, k), c);
		}
	}
	if (!err)
		err = tpu__coll_wait_sends(run, g->subdiv, -1);
	return err;
}

static void *ring_thread(void *arg)
{
	struct ring *g = arg;
	struct tpu__coll_run *run = g->run;
	size_t chunk = tpu__coll_chunk_len(g->count, run->n, 0) * run->esize;
	char *tmp = malloc(chunk ? chunk : 1);
	struct tpu__coll_op **ops = calloc(pieces_of(chunk) + 1, sizeof(*ops));

	g->err = tmp && ops ? ring_part(g, tmp, ops) : -ENOMEM;
	/* A ring that failed leaves the others waiting on it: end the step now. */
	if (g->err)
		tpu_rendezvous_abort(run->coll->rdv, -ECONNABORTED);
	/* Receives still posted write into tmp: it lives until they are done. */
	tpu__coll_drain(run, g->subdiv);
	free(tmp);
	free(ops);
	return NULL;
}

tpu_status tpu__coll_ring_allreduce(struct tpu__coll_run *run)
{
	const struct tpu_coll_instance *in = &run->inst;
	int n = run->n, nsub = run->res.num_subdivs;
	struct ring rings[TPU_COLL_MAX_SUBDIVS];
	pthread_t tids[TPU_COLL_MAX_SUBDIVS];
	bool started[TPU_COLL_MAX_SUBDIVS] = { false };
	tpu_status err = 0;

	if (run->in != run->out)
		memcpy(run->out, run->in, in->count * run->esize);
	if (n == 1) {
		tpu__coll_final(in->dtype, in->final_op, run->out, in->count, 1);
		return 0;
	}
	for (int d = 0; d < nsub; d++) {
		struct ring *g = &rings[d];
		int o = run->res.subdiv_offsets[d];
		size_t start = tpu__coll_chunk_start(in->count, nsub, d);

		/* Subdivision d's ring: ranks from its offset, every other one reversed. */
		memset(g, 0, sizeof(*g));
		g->run = run;
		g->subdiv = d;
		g->buf = (char *)run->out + start * run->esize;
		g->count = tpu__coll_chunk_len(in->count, nsub, d);
		g->pos = d % 2 ? mod(o - run->rank, n) : mod(run->rank - o, n);
		g->next = d % 2 ? mod(o - g->pos - 1, n) : mod(o + g->pos + 1, n);
		g->prev = d % 2 ? mod(o - g->pos + 1, n) : mod(o + g->pos - 1, n);
	}
	for (int d = 1; d < nsub; d++) {
		started[d] = !pthread_create(&tids[d], NULL, ring_thread, &rings[d]);
		/* A ring that cannot run would leave the others waiting for it. */
		if (!started[d])
			tpu_rendezvous_abort(run->coll->rdv, -ECONNABORTED);
	}
	ring_thread(&rings[0]);
	for (int d = 0; d < nsub; d++) {
		if (d && started[d])
			pthread_join(tids[d], NULL);
		else if (d)
			rings[d].err = -EAGAIN;
		/* The ring that saw the cause beats those the resulting abort stopped. */
		if (!err || (err == -ECONNABORTED && rings[d].err))
			err = rings[d].err;
	}
	return err;
}
