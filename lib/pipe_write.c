// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The write path of a pipe (context thread only).
 *
 * A write is a descriptor frame, then the inline bytes (payloads, and
 * tensors that go inline), on the transport; tensors of the cma, kmod and
 * mtcp channels travel apart.  It is done when every part is: the transport took
 * its bytes, the kmod SEND completed (the reader took the tensor), the
 * reader ACKed each cma tensor it pulled.  Callbacks run in write order:
 * a write done early waits for the ones before it.
 *
 * A part in flight keeps the write (and its user's memory) alive: after a
 * failure the callback still waits until the transport handed every part
 * back, so no byte is read from memory its owner already got back.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipe_internal.h"

struct write_part {
	struct tpu_pipe *pipe;
	struct pipe_write *w;
};

static enum pipe_chan tensor_chan(const struct tpu_pipe *p, const struct tpu_message_tensor *t)
{
	if (t->len <= TPU_PIPE_INLINE_MAX)
		return PIPE_CHAN_BASIC;
	return p->chan_cpu;
}

size_t tpu__pipe_kmod_key(char *buf, size_t size, bool by_connector, uint64_t seq, uint32_t idx)
{
	int n = snprintf(buf, size, "%c/%llu/%u", by_connector ? 'c' : 'l',
			 (unsigned long long)seq, idx);

	return n < 0 ? 0 : (size_t)n;
}

static void write_free(struct pipe_write *w)
{
	for (size_t i = 0; i < w->msg->ntensors; i++) {
		struct tpu_message_tensor *t = &w->msg->tensors[i];

		/* Given buffers the kmod channel did not take are ours to free. */
		if ((t->flags & TPU_TENSOR_GIVE) && !(w->given && w->given[i]))
			tpu_buffer_free(t->buffer);
	}
	free(w->given);
	free(w->frame);
	free(w);
}

/* Call back the writes at the head that are done, in order. */
static void writes_complete(struct tpu_pipe *p)
{
	while (p->writes && p->writes->waiting == 0 && p->writes->started) {
		struct pipe_write *w = p->writes;

		p->writes = w->next;
		if (!p->writes)
			p->writes_tail = &p->writes;
		w->cb(w->arg, w->status, w->msg);
		write_free(w);
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

	free(part);
	part_done(p, w, st);
	if (st)
		tpu__pipe_fail(p, st);
	tpu__pipe_io_put(p);
}

static void kmod_sent(void *arg, tpu_status st)
{
	struct write_part *part = arg;
	struct tpu_pipe *p = part->pipe;
	struct pipe_write *w = part->w;

	free(part);
	p->chan_ops--;
	part_done(p, w, st);
	tpu__pipe_maybe_free(p);
}

static struct write_part *part_new(struct tpu_pipe *p, struct pipe_write *w)
{
	struct write_part *part = malloc(sizeof(*part));

	if (part) {
		part->pipe = p;
		part->w = w;
	}
	return part;
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

			if (t->len && tensor_chan(p, t) == PIPE_CHAN_BASIC)
				iov[n++] = (struct iovec){ t->data, t->len };
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
			p->io--;
			free(part);
			return st;
		}
		n = 0;
	}
	return 0;
}

/* Stripe tensor @i over the mtcp lanes; each stripe is a part of the write. */
static tpu_status write_mtcp(struct tpu_pipe *p, struct pipe_write *w, size_t i)
{
	const struct tpu_message_tensor *t = &w->msg->tensors[i];
	unsigned int k = tpu__mtcp_stripes(t->len, p->nlanes);

	for (unsigned int s = 0; s < k; s++) {
		struct tpu__conn *lane = tpu__mtcp_next_lane(p, &p->mtcp_tx);
		struct write_part *part = part_new(p, w);
		uint64_t off, n;
		tpu_status st;

		if (!part)
			return -ENOMEM;
		tpu__mtcp_stripe(t->len, k, s, &off, &n);
		w->waiting++;
		tpu__pipe_io_get(p);
		st = lane->ops->write(lane, &(struct iovec){ (uint8_t *)t->data + off, (size_t)n },
				      1, stream_written, part);
		if (st) {
			w->waiting--;
			p->io--;
			free(part);
			return st;
		}
	}
	return 0;
}

static tpu_status write_kmod(struct tpu_pipe *p, struct pipe_write *w, size_t i)
{
	struct tpu_message_tensor *t = &w->msg->tensors[i];
	struct tpu_tensor src = { .data = t->data, .len = t->len, .buffer = t->buffer };
	unsigned int flags = t->flags & TPU_TENSOR_GIVE ? TPU_SEND_GIVE : 0;
	struct write_part *part = part_new(p, w);
	char key[64];
	size_t key_len = tpu__pipe_kmod_key(key, sizeof(key), p->connector, w->seq, (uint32_t)i);
	tpu_status st;

	if (!part)
		return -ENOMEM;
	w->waiting++;
	p->chan_ops++;
	st = tpu_rendezvous_send(p->kmod, key, key_len, &src, flags, kmod_sent, part);
	if (st) {
		w->waiting--;
		p->chan_ops--;
		free(part);
		return st;
	}
	if (flags && w->given)
		w->given[i] = true;
	return 0;
}

/* Encode the descriptor; cma tensors say where the reader pulls from. */
static tpu_status write_encode(struct tpu_pipe *p, struct pipe_write *w)
{
	struct tpu_message *m = w->msg;
	struct tpu__wire_payload pl[TPU_PIPE_MAX_PAYLOADS];
	struct tpu__wire_tensor *wt = NULL;
	uint8_t (*cma)[12] = NULL;
	struct tpu__wire_msg wm = {
		.seq = w->seq,
		.meta = { m->metadata, (uint32_t)m->metadata_len },
		.npayloads = (uint32_t)m->npayloads,
		.ntensors = (uint32_t)m->ntensors,
		.payloads = pl,
	};
	uint32_t pid = 0;
	tpu_status st = -ENOMEM;
	long len;

	if (m->ntensors) {
		wt = calloc(m->ntensors, sizeof(*wt));
		cma = calloc(m->ntensors, sizeof(*cma));
		if (!wt || !cma)
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
		enum pipe_chan c = tensor_chan(p, t);
		uint64_t addr = (uint64_t)(uintptr_t)t->data;

		wt[i] = (struct tpu__wire_tensor){
			.len = t->len,
			.src_type = t->device.type, .src_index = t->device.index,
			.dst_type = t->target.type, .dst_index = t->target.index,
			.channel = c == PIPE_CHAN_BASIC ? TPU__WIRE_INLINE : (uint32_t)c,
			.meta = { t->metadata, (uint32_t)t->metadata_len },
		};
		if (c == PIPE_CHAN_CMA) {
			if (!pid)
				pid = (uint32_t)getpid();
			for (int b = 0; b < 4; b++)
				cma[i][b] = (uint8_t)(pid >> (8 * b));
			for (int b = 0; b < 8; b++)
				cma[i][4 + b] = (uint8_t)(addr >> (8 * b));
			wt[i].chan_desc = (struct tpu__wire_blob){ cma[i], 12 };
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
	free(wt);
	free(cma);
	return st;
}

/* Put one write on the wire (the pipe is open). */
static void write_send(struct tpu_pipe *p, struct pipe_write *w)
{
	struct tpu_message *m = w->msg;
	tpu_status st;

	w->started = true;
	w->seq = p->next_write_seq++;
	/* The descriptor's own part: released below, once every part is queued. */
	w->waiting++;
	st = write_encode(p, w);
	if (!st)
		st = write_stream(p, w);
	for (size_t i = 0; !st && i < m->ntensors; i++) {
		switch (tensor_chan(p, &m->tensors[i])) {
		case PIPE_CHAN_KMOD:
			st = write_kmod(p, w, i);
			break;
		case PIPE_CHAN_MTCP:
			st = write_mtcp(p, w, i);
			break;
		case PIPE_CHAN_CMA:
			w->waiting++;	/* until the reader's ACK */
			break;
		default:
			break;
		}
	}
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
		/* The pipe just opened: send what was queued while connecting. */
		for (w = p->writes; w; w = w->next)
			if (!w->started && p->state == PIPE_OPEN)
				write_send(p, w);
		return;
	}
	w = calloc(1, sizeof(*w));
	if (w && c->msg->ntensors)
		w->given = calloc(c->msg->ntensors, sizeof(*w->given));
	if (!w || (c->msg->ntensors && !w->given)) {
		if (w)
			free(w);
		c->cb.write(c->arg, -ENOMEM, c->msg);
		free(c);
		return;
	}
	w->msg = c->msg;
	w->cb = c->cb.write;
	w->arg = c->arg;
	free(c);
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
		/* Unsent writes have no part out; cma ACKs will never come. */
		w->started = true;
		for (size_t i = 0; i < w->msg->ntensors; i++)
			if (w->frame && tensor_chan(p, &w->msg->tensors[i]) == PIPE_CHAN_CMA &&
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
	if (!w || ack->tensor >= w->msg->ntensors ||
	    tensor_chan(p, &w->msg->tensors[ack->tensor]) != PIPE_CHAN_CMA) {
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
	part_done(p, w, ack->status);
}
