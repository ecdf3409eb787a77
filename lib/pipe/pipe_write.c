// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The write path of a pipe (context thread only).
 *
 * A write is a descriptor frame, then the inline bytes (payloads, and
 * tensors that go inline), on the transport; tensors of other channels
 * travel apart (the channel's ->send).  It is done when every part is:
 * the transport took its bytes, each channel part ended (a kmod SEND
 * completed: the reader took the tensor), the reader ACKed each tensor of
 * a TPU__CHAN_ACKED channel (cma).  Callbacks run in write order: a write
 * done early waits for the ones before it.
 *
 * A part in flight keeps the write (and its user's memory) alive: after a
 * failure the callback still waits until the transport handed every part
 * back, so no byte is read from memory its owner already got back.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipe_internal.h"

#define tensor_chan tpu__pipe_tensor_chan

/* A write block for a message of @ntensors tensors: small ones from the pipe's cache. */
static struct pipe_write *write_alloc(struct tpu_pipe *p, size_t ntensors)
{
	struct pipe_write *w;

	if (ntensors > PIPE_SMALL_TENSORS) {
		w = calloc(1, sizeof(*w));
		if (w)
			w->given = calloc(ntensors, sizeof(*w->given));
		if (w && !w->given) {
			free(w);
			w = NULL;
		}
		return w;
	}
	w = p->write_cache;
	if (w) {
		p->write_cache = w->next;
		p->nwrite_cache--;
		/* The frame buffer is written before it is read: no need to clear it. */
		memset(w, 0, offsetof(struct pipe_write, frame_buf));
	} else {
		w = calloc(1, sizeof(*w));
		if (!w)
			return NULL;
	}
	w->small = true;
	w->given = w->given_buf;
	return w;
}

static void write_free(struct tpu_pipe *p, struct pipe_write *w)
{
	for (size_t i = 0; i < w->msg->ntensors; i++) {
		struct tpu_message_tensor *t = &w->msg->tensors[i];

		/* Given buffers the channel did not take are ours to free. */
		if ((t->flags & TPU_TENSOR_GIVE) && !(w->given && w->given[i]))
			tpu_buffer_free(t->buffer);
	}
	/* Each test spares a call to free(NULL) on the steady path. */
	if (w->stage) {
		for (size_t i = 0; i < w->msg->ntensors; i++)
			tpu__cuda_host_free(w->stage[i]);
		free(w->stage);
	}
	if (w->acked)
		free(w->acked);
	if (w->frame != w->frame_buf)
		free(w->frame);
	if (w->small && p->nwrite_cache < PIPE_BLOCK_CACHE) {
		w->next = p->write_cache;
		p->write_cache = w;
		p->nwrite_cache++;
		return;
	}
	if (w->given != w->given_buf)
		free(w->given);
	free(w);
}

void tpu__pipe_writes_cache_free(struct tpu_pipe *p)
{
	while (p->write_cache) {
		struct pipe_write *w = p->write_cache;

		p->write_cache = w->next;
		free(w);
	}
	p->nwrite_cache = 0;
}

/* Call back the writes at the head that are done, in order. */
static void writes_complete(struct tpu_pipe *p)
{
	while (p->writes && p->writes->waiting == 0 && p->writes->started) {
		struct pipe_write *w = p->writes;

		tpu_write_cb cb = w->cb;
		void *arg = w->arg;
		tpu_status status = w->status;
		struct tpu_message *msg = w->msg;

		p->writes = w->next;
		if (!p->writes)
			p->writes_tail = &p->writes;
		/*
		 * From the callback on the message is the caller's again (it may
		 * free it there), so nothing of it is read afterwards.
		 */
		write_free(p, w);
		cb(arg, status, msg);
	}
}

static void part_done(struct tpu_pipe *p, struct pipe_write *w, tpu_status st)
{
	if (st && !w->status)
		w->status = p->state == PIPE_FAILED ? p->error : st;
	w->waiting--;
	writes_complete(p);
}

static void stream_written(void *arg, tpu_status st)
{
	struct write_part *part = arg;
	struct tpu_pipe *p = part->pipe;
	struct pipe_write *w = part->w;

	if (part->embedded)
		w->part0_busy = false;
	else
		free(part);
	part_done(p, w, st);
	if (st)
		tpu__pipe_fail(p, st);
	tpu__pipe_io_put(p);
}

/* The bookkeeping a channel does through its struct tpu__chan_xfer. */
static void xfer_part_start(struct tpu__chan_xfer *x, enum tpu__chan_part kind)
{
	struct pipe_write *w = x->owner;
	struct tpu_pipe *p = tpu__container_of(x->link, struct tpu_pipe, link);

	w->waiting++;
	if (kind == TPU__PART_IO)
		tpu__pipe_io_get(p);
	else if (kind == TPU__PART_CHAN)
		p->chan_ops++;
}

static void xfer_part_cancel(struct tpu__chan_xfer *x, enum tpu__chan_part kind)
{
	struct pipe_write *w = x->owner;
	struct tpu_pipe *p = tpu__container_of(x->link, struct tpu_pipe, link);

	w->waiting--;
	if (kind == TPU__PART_IO)
		tpu__pipe_io_cancel(p);
	else if (kind == TPU__PART_CHAN)
		p->chan_ops--;
}

static void xfer_part_done(struct tpu__chan_xfer *x, enum tpu__chan_part kind, tpu_status st)
{
	struct pipe_write *w = x->owner;
	struct tpu_pipe *p = tpu__container_of(x->link, struct tpu_pipe, link);

	if (kind == TPU__PART_IO) {
		part_done(p, w, st);
		if (st)
			tpu__pipe_fail(p, st);
		tpu__pipe_io_put(p);
		return;
	}
	p->chan_ops--;
	part_done(p, w, st);
	tpu__pipe_maybe_free(p);
}

/* The write's own part when it is free (one stream write in flight), else a new one. */
static struct write_part *part_new(struct tpu_pipe *p, struct pipe_write *w)
{
	struct write_part *part;

	if (!w->part0_busy) {
		w->part0_busy = true;
		part = &w->part0;
		part->embedded = true;
	} else {
		part = malloc(sizeof(*part));
		if (!part)
			return NULL;
		part->embedded = false;
	}
	part->pipe = p;
	part->w = w;
	return part;
}

static void part_put(struct write_part *part)
{
	if (part->embedded)
		part->w->part0_busy = false;
	else
		free(part);
}

/* Queue the frame and the inline bytes, TPU__XPORT_IOV_MAX at a time. */
static tpu_status write_stream(struct tpu_pipe *p, struct pipe_write *w)
{
	struct tpu_message *m = w->msg;
	struct iovec iov[TPU__XPORT_IOV_MAX];
	unsigned int n = 0;
	size_t np = 0, nt = 0;
	bool frame = true;

	while (frame || np < m->npayloads || nt < m->ntensors) {
		struct write_part *part;
		tpu_status st;

		if (frame) {
			iov[n++] = (struct iovec){ w->frame, w->frame_len };
			frame = false;
		}
		while (n < TPU__XPORT_IOV_MAX && np < m->npayloads) {
			if (m->payloads[np].len)
				iov[n++] = (struct iovec){ m->payloads[np].data, m->payloads[np].len };
			np++;
		}
		while (n < TPU__XPORT_IOV_MAX && np == m->npayloads && nt < m->ntensors) {
			struct tpu_message_tensor *t = &m->tensors[nt++];
			void *data = w->stage && w->stage[nt - 1] ? w->stage[nt - 1] : t->data;

			if (t->len && tpu__pipe_chan_inline(tensor_chan(p, t)))
				iov[n++] = (struct iovec){ data, t->len };
		}
		if (!n)
			break;
		part = part_new(p, w);
		if (!part)
			return -ENOMEM;
		w->waiting++;
		tpu__pipe_io_get(p);
		st = p->conn->ops->write(p->conn, iov, n, stream_written, part);
		if (st) {
			w->waiting--;
			tpu__pipe_io_cancel(p);
			part_put(part);
			return st;
		}
		n = 0;
	}
	return 0;
}

/* Hand tensor @i to the pipe's channel. */
static tpu_status write_chan(struct tpu_pipe *p, struct pipe_write *w, size_t i)
{
	struct tpu__chan_xfer x = {
		.link = &p->link,
		.t = &w->msg->tensors[i],
		.seq = w->seq,
		.idx = (uint32_t)i,
		.owner = w,
		.part_start = xfer_part_start,
		.part_done = xfer_part_done,
		.part_cancel = xfer_part_cancel,
	};
	tpu_status st = tensor_chan(p, x.t)->send(&p->link, &x);

	if (!st && x.given && w->given)
		w->given[i] = true;
	return st;
}

/* Encode the descriptor; a channel's tensors carry the channel's descriptor. */
static tpu_status write_encode(struct tpu_pipe *p, struct pipe_write *w)
{
	struct tpu_message *m = w->msg;
	struct tpu__wire_payload pl[TPU_PIPE_MAX_PAYLOADS];
	/* A small message's arrays live on the stack. */
	struct tpu__wire_tensor wt_small[PIPE_SMALL_TENSORS];
	uint8_t descs_small[PIPE_SMALL_TENSORS * TPU__WIRE_CHAN_DESC_MAX];
	struct tpu__wire_tensor *wt = NULL;
	uint8_t *descs = NULL;
	uint32_t dlen = 0;
	struct tpu__wire_msg wm = {
		.seq = w->seq,
		.meta = { m->metadata, (uint32_t)m->metadata_len },
		.npayloads = (uint32_t)m->npayloads,
		.ntensors = (uint32_t)m->ntensors,
		.payloads = pl,
	};
	tpu_status st = -ENOMEM;
	long len;

	/* Room for the longest descriptor of any tensor's channel. */
	for (size_t i = 0; i < m->ntensors; i++)
		if (tensor_chan(p, &m->tensors[i])->desc_len > dlen)
			dlen = tensor_chan(p, &m->tensors[i])->desc_len;
	if (m->ntensors && m->ntensors <= PIPE_SMALL_TENSORS) {
		wt = wt_small;
		descs = descs_small;
	} else if (m->ntensors) {
		wt = calloc(m->ntensors, sizeof(*wt));
		descs = dlen ? calloc(m->ntensors, dlen) : NULL;
		if (!wt || (dlen && !descs))
			goto out;
	}
	wm.tensors = wt;
	for (size_t i = 0; i < m->npayloads; i++)
		pl[i] = (struct tpu__wire_payload){
			.len = m->payloads[i].len,
			.meta = { m->payloads[i].metadata, (uint32_t)m->payloads[i].metadata_len },
		};
	for (size_t i = 0; i < m->ntensors; i++) {
		const struct tpu_message_tensor *t = &m->tensors[i];
		const struct tpu__chan *c = tensor_chan(p, t);

		wt[i] = (struct tpu__wire_tensor){
			.len = t->len,
			.src_type = t->device.type, .src_index = t->device.index,
			.dst_type = t->target.type, .dst_index = t->target.index,
			.channel = c->flags & TPU__CHAN_INLINE ? TPU__WIRE_INLINE : c->wire_id,
			.meta = { t->metadata, (uint32_t)t->metadata_len },
		};
		if (c->desc_len) {
			uint8_t *d = descs + i * dlen;

			c->describe(&(struct tpu__chan_xfer){ .link = &p->link,
							      .t = (struct tpu_message_tensor *)t,
							      .seq = w->seq, .idx = (uint32_t)i },
				    d);
			wt[i].chan_desc = (struct tpu__wire_blob){ d, c->desc_len };
		}
	}
	/* Straight into the block's own buffer; measured first only when it does not fit. */
	if (w->small) {
		len = tpu__wire_msg_encode(w->frame_buf, sizeof(w->frame_buf), &wm);
		if (len >= 0) {
			w->frame = w->frame_buf;
			w->frame_len = (size_t)len;
			st = 0;
			goto out;
		}
	}
	len = tpu__wire_msg_encode(NULL, 0, &wm);
	if (len < 0) {
		st = (tpu_status)len;
		goto out;
	}
	w->frame = malloc((size_t)len);
	if (!w->frame)
		goto out;
	w->frame_len = (size_t)tpu__wire_msg_encode(w->frame, (size_t)len, &wm);
	st = 0;
out:
	if (wt && wt != wt_small) {
		free(wt);
		free(descs);
	}
	return st;
}

/*
 * Before anything goes on the wire: every tensor has a channel, and CUDA
 * tensors of a staged channel are copied into staging memory (after the
 * work on their streams).
 */
static tpu_status write_prepare(struct tpu_pipe *p, struct pipe_write *w)
{
	struct tpu_message *m = w->msg;
	tpu_status st;

	for (size_t i = 0; i < m->ntensors; i++) {
		struct tpu_message_tensor *t = &m->tensors[i];
		const struct tpu__chan *c = tensor_chan(p, t);

		if (!c) {
			tpu__log_debug("pipe %p: no channel from %s to %s memory", (void *)p,
				       t->device.type ? "CUDA" : "CPU",
				       t->target.type ? "CUDA" : "CPU");
			return tpu__cuda_api(NULL, NULL) ? TPU_E_NO_CUDA : -ENOPROTOOPT;
		}
		if (!(c->flags & TPU__CHAN_STAGED) || t->device.type != TPU_DEVICE_CUDA)
			continue;
		if (!w->stage) {
			w->stage = calloc(m->ntensors, sizeof(*w->stage));
			if (!w->stage)
				return -ENOMEM;
		}
		st = tpu__cuda_host_alloc(t->len, &w->stage[i]);
		if (!st)
			st = tpu__cuda_copy(w->stage[i], (struct tpu_device){ TPU_DEVICE_CPU, 0 },
					    t->data, t->device, t->len, t->stream);
		if (st)
			return st;
	}
	return 0;
}

/* Put one write on the wire (the pipe is open). */
static void write_send(struct tpu_pipe *p, struct pipe_write *w)
{
	struct tpu_message *m = w->msg;
	tpu_status st;

	w->started = true;
	/* A write that cannot start fails alone: nothing of it is on the wire. */
	st = write_prepare(p, w);
	if (st) {
		w->status = st;
		writes_complete(p);
		return;
	}
	w->seq = p->next_write_seq++;
	/* The descriptor's own part: released below, once every part is queued. */
	w->waiting++;
	st = write_encode(p, w);
	if (!st)
		st = write_stream(p, w);
	for (size_t i = 0; !st && i < m->ntensors; i++)
		if (!tpu__pipe_chan_inline(tensor_chan(p, &m->tensors[i])))
			st = write_chan(p, w, i);
	if (st) {
		w->status = st;
		part_done(p, w, st);
		tpu__pipe_fail(p, st);
		return;
	}
	part_done(p, w, 0);
}

void tpu__pipe_write_start(struct tpu_pipe *p, struct pipe_call *c)
{
	struct pipe_write *w;

	if (!c) {
		/*
		 * The pipe just opened: send what was queued while connecting,
		 * in order.  A send may complete (and free) writes, this one
		 * included, or fail the pipe: each round looks again from the
		 * head for the first write not started.
		 */
		for (;;) {
			for (w = p->writes; w && w->started; w = w->next)
				;
			if (!w || p->state != PIPE_OPEN)
				return;
			write_send(p, w);
		}
	}
	w = write_alloc(p, c->msg->ntensors);
	if (!w) {
		c->cb.write(c->arg, -ENOMEM, c->msg);
		tpu__pipe_call_free(p, c);
		return;
	}
	w->msg = c->msg;
	w->cb = c->cb.write;
	w->arg = c->arg;
	tpu__pipe_call_free(p, c);
	*p->writes_tail = w;
	p->writes_tail = &w->next;
	if (p->state == PIPE_FAILED) {
		w->started = true;
		w->status = p->error;
		writes_complete(p);
		return;
	}
	if (p->state == PIPE_OPEN)
		write_send(p, w);
}

void tpu__pipe_writes_fail(struct tpu_pipe *p)
{
	for (struct pipe_write *w = p->writes; w; w = w->next) {
		if (!w->status)
			w->status = p->error;
		/* Unsent writes have no part out; ACKs will never come. */
		w->started = true;
		for (size_t i = 0; i < w->msg->ntensors; i++)
			if (w->frame && tensor_chan(p, &w->msg->tensors[i]) &&
			    (tensor_chan(p, &w->msg->tensors[i])->flags & TPU__CHAN_ACKED) &&
			    !(w->acked && w->acked[i]))
				w->waiting--;
		free(w->acked);
		w->acked = NULL;
	}
	writes_complete(p);
}

void tpu__pipe_ack(struct tpu_pipe *p, const struct tpu__wire_ack *ack)
{
	struct pipe_write *w;

	for (w = p->writes; w; w = w->next)
		if (w->frame && w->seq == ack->seq)
			break;
	if (!w || ack->tensor >= w->msg->ntensors || !tensor_chan(p, &w->msg->tensors[ack->tensor]) ||
	    !(tensor_chan(p, &w->msg->tensors[ack->tensor])->flags & TPU__CHAN_ACKED)) {
		tpu__pipe_fail(p, -EPROTO);
		return;
	}
	if (!w->acked) {
		w->acked = calloc(w->msg->ntensors, sizeof(*w->acked));
		if (!w->acked) {
			tpu__pipe_fail(p, -ENOMEM);
			return;
		}
	}
	if (w->acked[ack->tensor]) {
		tpu__pipe_fail(p, -EPROTO);
		return;
	}
	w->acked[ack->tensor] = true;
	if (tensor_chan(p, &w->msg->tensors[ack->tensor])->acked)
		tensor_chan(p, &w->msg->tensors[ack->tensor])->acked(&p->link, ack->seq, ack->tensor);
	part_done(p, w, ack->status);
}
