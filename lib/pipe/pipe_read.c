// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The read path of a pipe (context thread only).
 *
 * The inbound side reads frames one at a time.  ACKs are handled as they
 * come; a message descriptor is read ahead and held.  While a descriptor
 * is held nothing more is read: it goes to the next read_descriptor call,
 * then its inline bytes are read straight into the memory the user gives
 * to tpu_pipe_read(), and only then does the next frame get read.  So at
 * most one descriptor waits in memory whatever the writer does: that is the
 * back-pressure, the writer's transport fills up and its writes stall.
 *
 * Tensors of other channels than basic are fetched when the read starts
 * (the channel's ->recv); a channel with TPU__CHAN_ACKED (cma) ACKs each
 * tensor to the writer, which holds its memory until then.
 *
 * Reading in place (transports with ->wait, ->peek and ->take: shm): the
 * pipe waits for a header's worth of bytes instead of reading them, then
 * copies the header and, when it is all there, the body of a small frame
 * straight out of the ring into the block its read will use, and small
 * inline parts straight into the user's memory, leaving every byte in the
 * stream (p->in_owed counts them) until the message is done: the ring's
 * tail then moves once per message, where three reads moved it three
 * times.  Whatever is not there yet is read as above, after the bytes
 * owed are taken (a queued read must start after them).  The copies are
 * decoded, never the ring, which the peer may rewrite meanwhile.
 */
#include <stdlib.h>
#include <string.h>

#include "pipe_internal.h"

/* take_msg packs these arrays one after the other. */
_Static_assert(sizeof(struct tpu_payload) % 8 == 0 && sizeof(struct tpu_message_tensor) % 8 == 0 &&
	       sizeof(struct pipe_rd_tensor) % 8 == 0 && sizeof(struct tpu__wire_payload) % 8 == 0 &&
	       sizeof(struct tpu__wire_tensor) % 8 == 0 && sizeof(struct pipe_read) % 8 == 0,
	       "array sizes keep 8-byte alignment");

/*
 * A small read block: the read, arrays for PIPE_SMALL_PAYLOADS payloads
 * and PIPE_SMALL_TENSORS tensors (the user's view, what the descriptor
 * said, the decoder's), then a body of up to PIPE_SMALL_FRAME bytes.
 */
#define RD_ARRAYS(np, nt)                                                                     \
	((size_t)(np) * (sizeof(struct tpu_payload) + sizeof(uint64_t) +                     \
			 sizeof(struct tpu__wire_payload)) +                                  \
	 (size_t)(nt) * (sizeof(struct tpu_message_tensor) + sizeof(struct pipe_rd_tensor) + \
			 sizeof(struct tpu__wire_tensor)))
#define RD_SMALL_SIZE	\
	(sizeof(struct pipe_read) + RD_ARRAYS(PIPE_SMALL_PAYLOADS, PIPE_SMALL_TENSORS) + \
	 PIPE_SMALL_FRAME)

/* Point rd's arrays into its block, sized for np payloads and nt tensors. */
static void rd_layout(struct pipe_read *rd, uint32_t np, uint32_t nt, struct tpu__wire_msg *wm)
{
	rd->payloads = (struct tpu_payload *)(rd + 1);
	rd->payload_len = (uint64_t *)(rd->payloads + np);
	rd->tensors = (struct tpu_message_tensor *)(rd->payload_len + np);
	rd->tinfo = (struct pipe_rd_tensor *)(rd->tensors + nt);
	wm->payloads = (struct tpu__wire_payload *)(rd->tinfo + nt);
	wm->tensors = (struct tpu__wire_tensor *)(wm->payloads + np);
}

static uint8_t *rd_small_body(struct pipe_read *rd)
{
	return (uint8_t *)rd + RD_SMALL_SIZE - PIPE_SMALL_FRAME;
}

/* A cleared small block, from the pipe's cache when it has one. */
static struct pipe_read *rd_small_get(struct tpu_pipe *p)
{
	struct pipe_read *rd = p->read_cache;

	if (rd) {
		p->read_cache = rd->next;
		p->nread_cache--;
		/* Only the read itself: the arrays are written before they are read. */
		memset(rd, 0, sizeof(*rd));
	} else {
		rd = calloc(1, RD_SMALL_SIZE);
		if (!rd)
			return NULL;
	}
	rd->small = true;
	return rd;
}

static void rd_free(struct tpu_pipe *p, struct pipe_read *rd)
{
	for (size_t i = 0; i < rd->msg.ntensors; i++)
		tpu__cuda_host_free(rd->tinfo[i].stage);
	if (rd->small) {
		/* Its arrays and body live in the block. */
		if (p->nread_cache < PIPE_BLOCK_CACHE) {
			rd->next = p->read_cache;
			p->read_cache = rd;
			p->nread_cache++;
			return;
		}
		free(rd);
		return;
	}
	/* The arrays live in rd's own allocation (take_msg), and the body may. */
	if (!rd->body_inside)
		free(rd->body);
	free(rd);
}

/* Call back the reads at the head that are done, in order. */
static void reads_complete(struct tpu_pipe *p)
{
	while (p->reads && p->reads->started && p->reads->waiting == 0) {
		struct pipe_read *rd = p->reads;

		/* The one lock a message takes: rd may be freed below (pipe_internal.h). */
		pthread_mutex_lock(&p->reads_lock);
		p->reads = rd->next;
		if (!p->reads)
			p->reads_tail = &p->reads;
		pthread_mutex_unlock(&p->reads_lock);
		if (rd->status) {
			/* Buffers the pipe made for the reader go back with the failure. */
			for (size_t i = 0; i < rd->msg.ntensors; i++) {
				struct tpu_message_tensor *t = &rd->msg.tensors[i];

				if (t->flags & TPU_TENSOR_WANT_BUFFER) {
					tpu_buffer_free(t->buffer);
					t->buffer = NULL;
					t->data = NULL;
				}
			}
		}
		rd->cb(rd->arg, rd->status, &rd->msg);
		rd_free(p, rd);
	}
}

static void rd_part_done(struct tpu_pipe *p, struct pipe_read *rd, tpu_status st)
{
	if (st && !rd->status)
		rd->status = p->state == PIPE_FAILED ? p->error : st;
	rd->waiting--;
	reads_complete(p);
}

/* Hand the held descriptor to the oldest read_descriptor call. */
static void deliver(struct tpu_pipe *p)
{
	struct pipe_read *rd = p->held;
	struct pipe_call *c;

	if (!rd || rd->delivered || !p->ndesc_calls)
		return;
	c = p->desc_calls[0];
	memmove(p->desc_calls, p->desc_calls + 1, --p->ndesc_calls * sizeof(*p->desc_calls));
	rd->delivered = true;
	/* Appended without the lock: rd is complete before it is seen (pipe_internal.h). */
	rd->next = NULL;
	__atomic_store_n(p->reads_tail, rd, __ATOMIC_RELEASE);
	p->reads_tail = &rd->next;
	c->cb.desc(c->arg, 0, &rd->msg);
	tpu__pipe_call_free(p, c);
}

#define in_read tpu__pipe_conn_read

static void body_done(void *arg, tpu_status st);

/* A frame body read for nothing: its small block back to the cache, or the body freed. */
static void in_body_free(struct tpu_pipe *p, struct pipe_read *blk, uint8_t *body)
{
	if (blk)
		rd_free(p, blk);
	else
		free(body);
}

/* The header in p->in_hdr, checked into p->in_frame. */
static tpu_status hdr_check(struct tpu_pipe *p)
{
	tpu_status st = tpu__wire_hdr_decode(p->in_hdr, &p->in_frame);

	if (st)
		tpu__log_debug("pipe %p: bad frame header %02x%02x%02x%02x %02x%02x%02x%02x",
			       (void *)p, p->in_hdr[0], p->in_hdr[1], p->in_hdr[2], p->in_hdr[3],
			       p->in_hdr[4], p->in_hdr[5], p->in_hdr[6], p->in_hdr[7]);
	if (!st && p->in_frame.type != TPU__WIRE_MSG && p->in_frame.type != TPU__WIRE_ACK)
		st = -EPROTO;
	if (!st && !p->in_frame.len)
		st = -EPROTO;
	return st;
}

/* Where the body goes: a small frame straight into the block its read will use. */
static tpu_status body_dest(struct tpu_pipe *p)
{
	if (p->in_frame.len <= PIPE_SMALL_FRAME) {
		p->in_rd = rd_small_get(p);
		p->in_body = p->in_rd ? rd_small_body(p->in_rd) : NULL;
	} else {
		p->in_body = malloc(p->in_frame.len);
	}
	return p->in_body ? 0 : -ENOMEM;
}

static void body_drop(struct tpu_pipe *p)
{
	in_body_free(p, p->in_rd, p->in_body);
	p->in_rd = NULL;
	p->in_body = NULL;
}

/* Queue the read of the body (its header was read). */
static tpu_status body_read(struct tpu_pipe *p)
{
	tpu_status st = body_dest(p);

	if (st)
		return st;
	p->in = PIPE_IN_BODY;
	st = in_read(p, p->in_body, p->in_frame.len, body_done);
	if (st) {
		p->in = PIPE_IN_IDLE;
		body_drop(p);
	}
	return st;
}

static void hdr_done(void *arg, tpu_status st)
{
	struct tpu_pipe *p = arg;

	p->in = PIPE_IN_IDLE;
	if (p->state != PIPE_OPEN)
		goto out;
	if (!st)
		st = hdr_check(p);
	if (!st)
		st = body_read(p);
	if (st)
		tpu__pipe_fail(p, st);
out:
	tpu__pipe_io_put(p);
}

/*
 * Give the transport back the bytes read in place (p->in_owed): once a
 * message is done, and before any read is queued, which must start after
 * them.
 */
static tpu_status in_settle(struct tpu_pipe *p)
{
	size_t n = p->in_owed;

	if (!n)
		return 0;
	p->in_owed = 0;
	if (!p->conn || !p->conn->ops->take(p->conn, n, NULL, 0))
		return p->state == PIPE_FAILED ? p->error : -EPROTO;
	return 0;
}

/*
 * Inline bytes into @dst in place, if they are all there: small parts are
 * peeked (owed until the message is done, so that it moves the ring's tail
 * once), bigger ones taken together with the bytes owed before them.
 */
static bool in_place(struct tpu_pipe *p, void *dst, size_t len)
{
	struct tpu__conn *conn = p->conn;

	if (!conn || !conn->ops->peek)
		return false;
	if (len <= PIPE_PEEK_PART && p->in_owed + len <= PIPE_OWED_MAX) {
		if (!conn->ops->peek(conn, p->in_owed, dst, len))
			return false;
		p->in_owed += len;
		return true;
	}
	if (!conn->ops->take(conn, p->in_owed, dst, len))
		return false;
	p->in_owed = 0;
	return true;
}

static tpu_status frame_take(struct tpu_pipe *p);

/*
 * A header's worth of bytes is in the transport (->wait): copy the header
 * out and, for a small frame that is all there, the body too; both stay
 * owed.  A body still on its way is read as it comes, after the header.
 */
static void frame_ready(void *arg, tpu_status st)
{
	struct tpu_pipe *p = arg;
	struct tpu__conn *conn = p->conn;

	p->in = PIPE_IN_IDLE;
	if (p->state != PIPE_OPEN)
		goto out;
	/* The wait said they are there, and nothing is queued after it. */
	if (!st && !conn->ops->peek(conn, 0, p->in_hdr, TPU__WIRE_HDR_LEN))
		st = -EPROTO;
	if (!st)
		st = hdr_check(p);
	if (!st && p->in_frame.len <= PIPE_SMALL_FRAME) {
		st = body_dest(p);
		if (!st && conn->ops->peek(conn, TPU__WIRE_HDR_LEN, p->in_body, p->in_frame.len)) {
			p->in_owed = TPU__WIRE_HDR_LEN + p->in_frame.len;
			st = frame_take(p);
			if (!st)
				tpu__pipe_in_pump(p);
			goto done;
		}
		if (!st)
			body_drop(p);
	}
	if (!st && !conn->ops->take(conn, TPU__WIRE_HDR_LEN, NULL, 0))
		st = -EPROTO;
	if (!st)
		st = body_read(p);
done:
	if (st)
		tpu__pipe_fail(p, st);
out:
	tpu__pipe_io_put(p);
}

/*
 * A read for the MSG body: a small message decodes in one walk into the
 * small block @blk its body was read into; a bigger one (or a body that
 * came without a block) gets a block of its own, sized from checked counts.
 * On success *@wmp has the decoded frame; on failure nothing is left
 * allocated but @blk and @body, which are the caller's.
 */
static struct pipe_read *rd_for_msg(struct pipe_read *blk, uint8_t *body, uint32_t len,
				    struct tpu__wire_msg *wm, tpu_status *stp)
{
	struct pipe_read *rd;
	uint32_t np, nt;
	tpu_status st;

	if (blk) {
		rd_layout(blk, PIPE_SMALL_PAYLOADS, PIPE_SMALL_TENSORS, wm);
		st = tpu__wire_msg_decode_cap(body, len, wm, PIPE_SMALL_PAYLOADS,
					      PIPE_SMALL_TENSORS);
		if (st != -ENOSPC) {
			*stp = st;
			if (st)
				return NULL;
			blk->body = body;
			return blk;
		}
	}
	st = tpu__wire_msg_counts(body, len, &np, &nt);
	if (st) {
		*stp = st;
		return NULL;
	}
	/*
	 * One allocation for the read and all its arrays (every element size
	 * is a multiple of 8, so each array starts aligned), and for the body
	 * when it came in a small block.  The decoder's own arrays come last.
	 */
	rd = calloc(1, sizeof(*rd) + RD_ARRAYS(np, nt) + (blk ? len : 0));
	if (!rd) {
		*stp = -ENOMEM;
		return NULL;
	}
	rd_layout(rd, np, nt, wm);
	if (blk) {
		rd->body = (uint8_t *)(wm->tensors + nt);
		rd->body_inside = true;
		memcpy(rd->body, body, len);
	}
	st = tpu__wire_msg_decode(blk ? rd->body : body, len, wm);
	if (st) {
		free(rd);
		*stp = st;
		return NULL;
	}
	*stp = 0;
	return rd;
}

/*
 * A MSG body: a held read with the user's view of the descriptor.  Takes
 * @blk (the small block the body lies in, or NULL) and @body in every case.
 */
static tpu_status take_msg(struct tpu_pipe *p, struct pipe_read *blk, uint8_t *body, uint32_t len)
{
	struct tpu__wire_payload *wp;
	struct tpu__wire_tensor *wt;
	struct tpu__wire_msg wm = { 0 };
	struct pipe_read *rd;
	uint32_t np, nt;
	tpu_status st;

	rd = rd_for_msg(blk, body, len, &wm, &st);
	if (!rd) {
		in_body_free(p, blk, body);
		return st;
	}
	if (rd != blk) {
		/* The body was copied into rd (blk goes back), or is rd's own now. */
		if (blk)
			rd_free(p, blk);
		else
			rd->body = body;
	}
	np = wm.npayloads;
	nt = wm.ntensors;
	wp = wm.payloads;
	wt = wm.tensors;
	st = -EPROTO;
	if (wm.seq != p->next_read_seq)
		goto fail;
	for (uint32_t i = 0; i < nt; i++) {
		struct pipe_rd_tensor *ti = &rd->tinfo[i];
		bool cpu = wt[i].src_type == TPU_DEVICE_CPU && wt[i].dst_type == TPU_DEVICE_CPU;

		ti->chan = wt[i].channel;
		ti->len = wt[i].len;
		ti->stage = NULL;	/* a cached block holds the last message's */
		ti->src_type = wt[i].src_type;
		ti->c = ti->chan == TPU__WIRE_INLINE ? &tpu__chan_basic
						     : tpu__pipe_chan_by_wire(p, ti->chan);
		/*
		 * Only what this pipe negotiated for the tensor's device pair:
		 * inline for CPU memory only, the CPU channel only for tensors
		 * too big to go inline.
		 */
		if (ti->chan == TPU__WIRE_INLINE ? !cpu
		    : !ti->c || (cpu ? ti->c != p->chan || (ti->c->flags & TPU__CHAN_INLINE) ||
				       ti->len <= TPU_PIPE_INLINE_MAX
				 : ti->c != p->dchan[wt[i].src_type][wt[i].dst_type]))
			goto fail;
		if (wt[i].chan_desc.len != ti->c->desc_len)
			goto fail;
		ti->desc = wt[i].chan_desc.data;
		rd->tensors[i] = (struct tpu_message_tensor){
			.len = (size_t)wt[i].len,
			.device = { TPU_DEVICE_CPU, 0 },
			.target = { wt[i].dst_type, wt[i].dst_index },
			.metadata = wt[i].meta.data,
			.metadata_len = wt[i].meta.len,
		};
	}
	for (uint32_t i = 0; i < np; i++) {
		rd->payload_len[i] = wp[i].len;
		rd->payloads[i] = (struct tpu_payload){
			.len = (size_t)wp[i].len,
			.metadata = wp[i].meta.data,
			.metadata_len = wp[i].meta.len,
		};
	}
	rd->seq = wm.seq;
	rd->msg = (struct tpu_message){
		.metadata = wm.meta.data,
		.metadata_len = wm.meta.len,
		.payloads = np ? rd->payloads : NULL,
		.npayloads = np,
		.tensors = nt ? rd->tensors : NULL,
		.ntensors = nt,
	};
	p->next_read_seq++;
	p->held = rd;
	return 0;
fail:
	rd->msg.ntensors = 0;	/* no staging memory yet */
	rd_free(p, rd);
	return st;
}

/* The body of the frame in p->in_frame is in p->in_body: act on it. */
static tpu_status frame_take(struct tpu_pipe *p)
{
	uint8_t *body = p->in_body;
	struct pipe_read *blk = p->in_rd;
	tpu_status st;

	p->in_body = NULL;
	p->in_rd = NULL;
	if (p->in_frame.type == TPU__WIRE_ACK) {
		struct tpu__wire_ack ack;

		st = tpu__wire_ack_decode(body, p->in_frame.len, &ack);
		in_body_free(p, blk, body);
		if (!st)
			tpu__pipe_ack(p, &ack);
		return st;
	}
	return take_msg(p, blk, body, p->in_frame.len);
}

static void body_done(void *arg, tpu_status st)
{
	struct tpu_pipe *p = arg;

	p->in = PIPE_IN_IDLE;
	if (p->state != PIPE_OPEN) {
		body_drop(p);
		goto out;
	}
	if (st)
		body_drop(p);
	else
		st = frame_take(p);
	if (st)
		tpu__pipe_fail(p, st);
	else
		tpu__pipe_in_pump(p);
out:
	tpu__pipe_io_put(p);
}

void tpu__pipe_in_pump(struct tpu_pipe *p)
{
	tpu_status st;

	if (p->state != PIPE_OPEN)
		return;
	deliver(p);
	/*
	 * The descriptor's callback may have started a read that failed the
	 * pipe (a length that is not the descriptor's): nothing more to read.
	 */
	if (p->state != PIPE_OPEN || p->in != PIPE_IN_IDLE || p->held)
		return;
	/* An ACK read in place is owed still. */
	st = in_settle(p);
	if (st) {
		tpu__pipe_fail(p, st);
		return;
	}
	p->in = PIPE_IN_HDR;
	if (p->conn->ops->wait) {
		/* Always queued, never read here: frames already in do not nest callbacks. */
		tpu__pipe_io_get(p);
		st = p->conn->ops->wait(p->conn, TPU__WIRE_HDR_LEN, frame_ready, p);
		if (st)
			tpu__pipe_io_cancel(p);
	} else {
		st = in_read(p, p->in_hdr, TPU__WIRE_HDR_LEN, hdr_done);
	}
	if (st) {
		p->in = PIPE_IN_IDLE;
		tpu__pipe_fail(p, st);
	}
}

void tpu__pipe_read_desc(struct tpu_pipe *p, struct pipe_call *c)
{
	struct pipe_call **grown;

	if (p->state == PIPE_FAILED) {
		c->cb.desc(c->arg, p->error, NULL);
		tpu__pipe_call_free(p, c);
		return;
	}
	if (p->ndesc_calls == p->desc_calls_cap) {
		size_t cap = p->desc_calls_cap ? 2 * p->desc_calls_cap : 4;

		grown = realloc(p->desc_calls, cap * sizeof(*grown));
		if (!grown) {
			c->cb.desc(c->arg, -ENOMEM, NULL);
			tpu__pipe_call_free(p, c);
			return;
		}
		p->desc_calls = grown;
		p->desc_calls_cap = cap;
	}
	p->desc_calls[p->ndesc_calls++] = c;
	tpu__pipe_in_pump(p);
}

/* ---- inline bytes ------------------------------------------------------- */

static void inline_next(struct tpu_pipe *p);

/* Inline part p->inline_next of @rd is in: staged bytes go on to the device. */
static void inline_part_done(struct tpu_pipe *p, struct pipe_read *rd)
{
	if (p->inline_next >= rd->msg.npayloads) {
		size_t i = p->inline_next - rd->msg.npayloads;
		struct tpu_message_tensor *t = &rd->msg.tensors[i];

		/* The stream stays in step either way. */
		if (rd->tinfo[i].stage) {
			tpu_status st = tpu__cuda_copy(t->data, t->device, rd->tinfo[i].stage,
						       (struct tpu_device){ TPU_DEVICE_CPU, 0 },
						       t->len, t->stream);

			if (st && !rd->status)
				rd->status = st;
		}
	}
	p->inline_next++;
}

static void inline_done(void *arg, tpu_status st)
{
	struct tpu_pipe *p = arg;
	struct pipe_read *rd = p->inline_rd;

	if (st || p->state != PIPE_OPEN) {
		/* The stream is gone; so is this read's inline part. */
		p->in = PIPE_IN_IDLE;
		p->inline_rd = NULL;
		if (p->held == rd)
			p->held = NULL;
		if (st)
			tpu__pipe_fail(p, st);
		rd_part_done(p, rd, st ? st : p->error);
		tpu__pipe_io_put(p);
		return;
	}
	inline_part_done(p, rd);
	inline_next(p);
	tpu__pipe_io_put(p);
}

/* The inline stream of p->inline_rd failed with @st: so does the pipe. */
static void inline_fail(struct tpu_pipe *p, struct pipe_read *rd, tpu_status st)
{
	tpu__pipe_fail(p, st);
	p->in = PIPE_IN_IDLE;
	p->inline_rd = NULL;
	p->held = NULL;
	rd_part_done(p, rd, st);
}

/* Read the next inline part of p->inline_rd, or finish the inline stream. */
static void inline_next(struct tpu_pipe *p)
{
	struct pipe_read *rd = p->inline_rd;
	size_t np = rd->msg.npayloads;
	tpu_status st;

	while (p->inline_next < np + rd->msg.ntensors) {
		size_t k = p->inline_next;
		void *dst;
		size_t len;

		if (k < np) {
			dst = rd->msg.payloads[k].data;
			len = rd->payload_len[k];
		} else {
			struct pipe_rd_tensor *ti = &rd->tinfo[k - np];

			if (!tpu__pipe_chan_inline(ti->c)) {
				p->inline_next++;
				continue;
			}
			dst = ti->stage ? ti->stage : rd->msg.tensors[k - np].data;
			len = ti->len;
		}
		if (!len) {
			p->inline_next++;
			continue;
		}
		if (in_place(p, dst, len)) {
			inline_part_done(p, rd);
			continue;
		}
		st = in_settle(p);
		if (!st)
			st = in_read(p, dst, len, inline_done);
		if (st)
			inline_fail(p, rd, st);
		return;
	}
	st = in_settle(p);
	if (st) {
		inline_fail(p, rd, st);
		return;
	}
	p->in = PIPE_IN_IDLE;
	p->inline_rd = NULL;
	p->held = NULL;
	rd_part_done(p, rd, 0);
	tpu__pipe_in_pump(p);
}

/* ---- channels ----------------------------------------------------------- */

/* The bookkeeping a channel does through its struct tpu__chan_xfer. */
static void xfer_part_start(struct tpu__chan_xfer *x, enum tpu__chan_part kind)
{
	struct pipe_read *rd = x->owner;
	struct tpu_pipe *p = tpu__container_of(x->link, struct tpu_pipe, link);

	rd->waiting++;
	if (kind == TPU__PART_IO)
		tpu__pipe_io_get(p);
	else if (kind == TPU__PART_CHAN)
		p->chan_ops++;
}

static void xfer_part_cancel(struct tpu__chan_xfer *x, enum tpu__chan_part kind)
{
	struct pipe_read *rd = x->owner;
	struct tpu_pipe *p = tpu__container_of(x->link, struct tpu_pipe, link);

	rd->waiting--;
	if (kind == TPU__PART_IO)
		tpu__pipe_io_cancel(p);
	else if (kind == TPU__PART_CHAN)
		p->chan_ops--;
}

/*
 * A part of one tensor's read is done: a channel operation, or a transport
 * operation (an mtcp stripe read, an ACK written).  The read of an ACKed
 * tensor ends when its ACK is on the transport, so that a reader closing
 * the pipe right after its callback does not drop the ACK its writer
 * waits for.
 */
static void xfer_part_done(struct tpu__chan_xfer *x, enum tpu__chan_part kind, tpu_status st)
{
	struct pipe_read *rd = x->owner;
	struct tpu_pipe *p = tpu__container_of(x->link, struct tpu_pipe, link);

	if (kind == TPU__PART_IO) {
		if (st)
			tpu__pipe_fail(p, st);
		rd_part_done(p, rd, st);
		tpu__pipe_io_put(p);
		return;
	}
	p->chan_ops--;
	rd_part_done(p, rd, st);
	tpu__pipe_maybe_free(p);
}

struct ack_part {
	struct tpu__chan_xfer x;
	uint8_t frame[];
};

static void ack_written(void *arg, tpu_status st)
{
	struct ack_part *part = arg;
	struct tpu__chan_xfer x = part->x;

	free(part);
	xfer_part_done(&x, TPU__PART_IO, st);
}

/* Tell the writer that tensor x->idx of the message is taken (TPU__CHAN_ACKED). */
static tpu_status xfer_ack(struct tpu__chan_xfer *x, tpu_status status)
{
	struct pipe_read *rd = x->owner;
	struct tpu_pipe *p = tpu__container_of(x->link, struct tpu_pipe, link);
	struct tpu__wire_ack ack = { .seq = x->seq, .tensor = x->idx, .status = status };
	struct ack_part *part;
	long len;
	tpu_status st;

	if (status && !rd->status)
		rd->status = status;
	len = tpu__wire_ack_encode(NULL, 0, &ack);
	if (len < 0)
		return (tpu_status)len;
	/* The frame rides behind the part, for the callback to free both. */
	part = malloc(sizeof(*part) + (size_t)len);
	if (!part)
		return -ENOMEM;
	part->x = *x;
	tpu__wire_ack_encode(part->frame, (size_t)len, &ack);
	xfer_part_start(x, TPU__PART_IO);
	st = p->conn->ops->write(p->conn, &(struct iovec){ part->frame, (size_t)len }, 1,
				 ack_written, part);
	if (st) {
		xfer_part_cancel(x, TPU__PART_IO);
		free(part);
	}
	return st;
}

/* Hand tensor @i to the pipe's channel. */
static tpu_status read_chan(struct tpu_pipe *p, struct pipe_read *rd, size_t i)
{
	struct tpu__chan_xfer x = {
		.link = &p->link,
		.t = &rd->msg.tensors[i],
		.seq = rd->seq,
		.idx = (uint32_t)i,
		.desc = rd->tinfo[i].desc,
		.owner = rd,
		.part_start = xfer_part_start,
		.part_done = xfer_part_done,
		.part_cancel = xfer_part_cancel,
		.ack = xfer_ack,
	};

	return rd->tinfo[i].c->recv(&p->link, &x);
}

void tpu__pipe_read_start(struct tpu_pipe *p, struct pipe_call *c)
{
	struct pipe_read *rd;
	tpu_status st = 0;

	for (rd = p->reads; rd; rd = rd->next)
		if (&rd->msg == c->msg && !rd->started)
			break;
	if (!rd) {
		c->cb.read(c->arg, -EINVAL, c->msg);
		tpu__pipe_call_free(p, c);
		return;
	}
	rd->cb = c->cb.read;
	rd->arg = c->arg;
	tpu__pipe_call_free(p, c);
	/* Only this thread writes it; tpu_pipe_read() may look (pipe_internal.h). */
	__atomic_store_n(&rd->started, true, __ATOMIC_RELAXED);
	if (p->state != PIPE_OPEN) {
		rd->status = p->error;
		if (p->held == rd)
			p->held = NULL;
		reads_complete(p);
		return;
	}
	/* Lengths are the descriptor's; the reader only says where. */
	for (size_t i = 0; i < rd->msg.npayloads; i++)
		if (rd->msg.payloads[i].len != rd->payload_len[i])
			st = -EINVAL;
	for (size_t i = 0; !st && i < rd->msg.ntensors; i++) {
		struct tpu_message_tensor *t = &rd->msg.tensors[i];
		struct pipe_rd_tensor *ti = &rd->tinfo[i];

		if (t->len != ti->len)
			st = -EINVAL;
		else if (t->device.type != TPU_DEVICE_CPU &&
			 !ti->c->supports(p->xport, ti->src_type, t->device.type))
			st = -EINVAL;	/* CUDA memory, a CPU-only channel */
		else if ((ti->c->flags & TPU__CHAN_STAGED) && t->device.type == TPU_DEVICE_CUDA)
			st = tpu__cuda_host_alloc(t->len, &ti->stage);
		else if ((t->flags & TPU_TENSOR_WANT_BUFFER) &&
			 (ti->chan == TPU__WIRE_INLINE || !(ti->c->flags & TPU__CHAN_BUFFERS))) {
			t->buffer = NULL;
			st = tpu_buffer_alloc(p->ctx, t->len ? t->len : 1, &t->buffer);
			if (!st)
				t->data = tpu_buffer_data(t->buffer);
		}
	}
	/* The inline stream is one part; each channel tensor another. */
	rd->waiting++;
	for (size_t i = 0; !st && i < rd->msg.ntensors; i++) {
		if (!tpu__pipe_chan_inline(rd->tinfo[i].c))
			st = read_chan(p, rd, i);
	}
	if (st) {
		/* The stream is out of step with this message now: the pipe is done. */
		rd->status = st;
		p->held = NULL;
		tpu__pipe_fail(p, st);
		rd_part_done(p, rd, st);
		return;
	}
	p->inline_rd = rd;
	p->inline_next = 0;
	p->in = PIPE_IN_INLINE;
	inline_next(p);
}

void tpu__pipe_reads_fail(struct tpu_pipe *p)
{
	struct pipe_read *rd;

	/* A descriptor nobody asked for yet is simply dropped. */
	if (p->held && !p->held->delivered) {
		rd_free(p, p->held);
		p->held = NULL;
	}
	p->in_owed = 0;	/* the connection is closed */
	for (rd = p->reads; rd; rd = rd->next)
		if (!rd->status)
			rd->status = p->error;
	reads_complete(p);
}

void tpu__pipe_reads_free(struct tpu_pipe *p)
{
	/*
	 * A delivered descriptor is in p->reads as well, so this is decided
	 * before the loop frees it (a pipe closed after read_descriptor and
	 * before read).
	 */
	if (p->held && !p->held->delivered)
		rd_free(p, p->held);
	p->held = NULL;
	while (p->reads) {
		struct pipe_read *rd = p->reads;

		p->reads = rd->next;
		rd_free(p, rd);
	}
	if (p->in_rd) {
		rd_free(p, p->in_rd);	/* a body read in flight when the pipe went */
		p->in_rd = NULL;
		p->in_body = NULL;
	}
	while (p->read_cache) {
		struct pipe_read *rd = p->read_cache;

		p->read_cache = rd->next;
		free(rd);
	}
	p->nread_cache = 0;
}
