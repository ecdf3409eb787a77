// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The pipe wire format (pipe_wire.h): encoders and hostile-input-safe
 * decoders.  No I/O, no allocation.
 *
 * Body layouts.  All integers little-endian, packed, no alignment.
 * blob = u32 len, then len bytes.  A name is a blob of 1..TPU__WIRE_NAME_MAX
 * bytes; [max] is the largest length a field may have.
 *
 *   xport entry	blob name, blob compat [DESC_MAX], blob addr [ADDR_MAX]
 *   chan entry		blob name, u32 src_type, u32 dst_type, blob compat [DESC_MAX]
 *			(types TPU_DEVICE_CPU or TPU_DEVICE_CUDA)
 *
 *   HELLO	u32 version, u32 nxports [ENTRIES_MAX], nxports xport entries,
 *		u32 nchans [ENTRIES_MAX], nchans chan entries
 *		(any version and addr are carried: the pipe layer judges them)
 *   WELCOME	i32 status (0 or -1..-TPU_ERRNO_MAX); when it is 0 only:
 *		xport entry, u64 token, u32 nchans [ENTRIES_MAX], nchans chan
 *		entries whose compatibility descriptor is empty.  A non-zero status is the whole
 *		body (4 bytes); the decoder zeroes the other fields.
 *   JOIN	u64 token
 *   MSG	u64 seq, blob meta [META_MAX], u32 npayloads [PAYLOADS_MAX],
 *		u32 ntensors [TENSORS_MAX], then npayloads payload entries:
 *		  u64 len [LEN_MAX], blob meta [META_MAX]
 *		then ntensors tensor entries:
 *		  u64 len [LEN_MAX], u32 src_type, u32 src_index, u32 dst_type,
 *		  u32 dst_index, u32 channel (< ENTRIES_MAX or TPU__WIRE_INLINE),
 *		  blob meta [META_MAX], blob chan_desc [CHAN_DESC_MAX]
 *   ACK	u64 seq, u32 tensor (< TENSORS_MAX), i32 status (as WELCOME's)
 *
 * A body is at most TPU__WIRE_BODY_MAX bytes.  Every valid body has exactly
 * one encoding, so decode then encode gives back the same bytes.
 *
 * Decoding checks each field as it is read: first that the bytes left hold
 * it (for a count: count times the smallest entry), else -EPROTO; then its
 * value: over a limit is -EMSGSIZE, otherwise invalid (empty name, device
 * type, status, channel, index, WELCOME descriptor) is -EPROTO.  Encoders
 * refuse the same values: -EMSGSIZE over a limit, -EINVAL invalid.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "pipe_wire.h"

/* Smallest encodings, used to bound counts against the bytes left. */
#define BLOB_MIN	4u
#define XPORT_MIN	(3 * BLOB_MIN)
#define CHAN_MIN	(BLOB_MIN + 4 + 4 + BLOB_MIN)
#define PAYLOAD_MIN	(8 + BLOB_MIN)
#define TENSOR_MIN	(8 + 5 * 4 + 2 * BLOB_MIN)
/* Device types are TPU_DEVICE_CPU and TPU_DEVICE_CUDA. */
#define DEVICE_TYPES	2u

/* Little-endian loads and stores, byte by byte: no alignment or aliasing assumed. */
static uint16_t ld16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}

static uint32_t ld32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t ld64(const uint8_t *p)
{
	return (uint64_t)ld32(p) | (uint64_t)ld32(p + 4) << 32;
}

static void st16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void st32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static void st64(uint8_t *p, uint64_t v)
{
	st32(p, (uint32_t)v);
	st32(p + 4, (uint32_t)(v >> 32));
}

static bool status_ok(int32_t st)
{
	return st == 0 || (st < 0 && st >= -TPU_ERRNO_MAX);
}

/* ------------------------------------------------------------------ */
/* Header                                                              */
/* ------------------------------------------------------------------ */

void tpu__wire_hdr_encode(uint8_t out[TPU__WIRE_HDR_LEN], uint16_t type, uint32_t len)
{
	st32(out, TPU__WIRE_MAGIC);
	st16(out + 4, type);
	st16(out + 6, 0);
	st32(out + 8, len);
	st32(out + 12, 0);
}

tpu_status tpu__wire_hdr_decode(const uint8_t in[TPU__WIRE_HDR_LEN], struct tpu__wire_hdr *out)
{
	uint16_t type = ld16(in + 4);
	uint32_t len = ld32(in + 8);

	if (ld32(in) != TPU__WIRE_MAGIC || ld16(in + 6) != 0 || ld32(in + 12) != 0)
		return -EPROTO;
	if (type < TPU__WIRE_HELLO || type > TPU__WIRE_AUTH)
		return -EPROTO;
	if (len > TPU__WIRE_BODY_MAX)
		return -EMSGSIZE;
	out->type = type;
	out->len = len;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Encoding                                                            */
/* ------------------------------------------------------------------ */

/*
 * A writer that keeps counting past the end of its buffer (or without one),
 * so one pass both measures and writes.  pos cannot overflow: every field is
 * bounded before it is written, so a frame stays far below SIZE_MAX.
 */
struct wr {
	uint8_t *buf;
	size_t size;
	size_t pos;
};

static uint8_t *wr_room(struct wr *w, size_t n)
{
	uint8_t *p = NULL;

	if (w->buf && w->pos <= w->size && n <= w->size - w->pos)
		p = w->buf + w->pos;
	w->pos += n;
	return p;
}

static void wr_u32(struct wr *w, uint32_t v)
{
	uint8_t *p = wr_room(w, 4);

	if (p)
		st32(p, v);
}

static void wr_u64(struct wr *w, uint64_t v)
{
	uint8_t *p = wr_room(w, 8);

	if (p)
		st64(p, v);
}

static int wr_blob(struct wr *w, struct tpu__wire_blob b, uint32_t min, uint32_t max)
{
	uint8_t *p;

	if (b.len > max)
		return -EMSGSIZE;
	if (b.len < min || (b.len && !b.data))
		return -EINVAL;
	wr_u32(w, b.len);
	p = wr_room(w, b.len);
	if (p && b.len)
		memcpy(p, b.data, b.len);
	return 0;
}

static int wr_xport(struct wr *w, const struct tpu__wire_xport_entry *e)
{
	int err;

	err = wr_blob(w, e->name, 1, TPU__WIRE_NAME_MAX);
	if (!err)
		err = wr_blob(w, e->compat, 0, TPU__WIRE_DESC_MAX);
	if (!err)
		err = wr_blob(w, e->addr, 0, TPU__WIRE_ADDR_MAX);
	return err;
}

/* compat_max 0: WELCOME, where the descriptor must be empty. */
static int wr_chan(struct wr *w, const struct tpu__wire_chan_entry *e, uint32_t compat_max)
{
	int err;

	if (e->src_type >= DEVICE_TYPES || e->dst_type >= DEVICE_TYPES)
		return -EINVAL;
	if (!compat_max && e->compat.len)
		return -EINVAL;
	err = wr_blob(w, e->name, 1, TPU__WIRE_NAME_MAX);
	if (err)
		return err;
	wr_u32(w, e->src_type);
	wr_u32(w, e->dst_type);
	return wr_blob(w, e->compat, 0, compat_max);
}

static int wr_chans(struct wr *w, uint32_t n, const struct tpu__wire_chan_entry *chans,
		    uint32_t compat_max)
{
	uint32_t i;
	int err;

	if (n > TPU__WIRE_ENTRIES_MAX)
		return -EMSGSIZE;
	wr_u32(w, n);
	for (i = 0; i < n; i++) {
		err = wr_chan(w, &chans[i], compat_max);
		if (err)
			return err;
	}
	return 0;
}

static struct wr wr_start(uint8_t *buf, size_t size)
{
	struct wr w = { .buf = buf, .size = buf ? size : 0, .pos = TPU__WIRE_HDR_LEN };

	return w;
}

/* The header goes in last, once the body's length is known. */
static long wr_finish(struct wr *w, uint16_t type, int err)
{
	size_t body = w->pos - TPU__WIRE_HDR_LEN;

	if (err)
		return err;
	if (body > TPU__WIRE_BODY_MAX)
		return -EMSGSIZE;
	if (!w->buf)
		return (long)w->pos;
	if (w->pos > w->size)
		return -EMSGSIZE;
	tpu__wire_hdr_encode(w->buf, type, (uint32_t)body);
	return (long)w->pos;
}

long tpu__wire_hello_encode(uint8_t *buf, size_t size, const struct tpu__wire_hello *h)
{
	struct wr w = wr_start(buf, size);
	uint32_t i;
	int err = 0;

	if (h->nxports > TPU__WIRE_ENTRIES_MAX)
		return -EMSGSIZE;
	wr_u32(&w, h->version);
	wr_u32(&w, h->nxports);
	for (i = 0; i < h->nxports && !err; i++)
		err = wr_xport(&w, &h->xports[i]);
	if (!err)
		err = wr_chans(&w, h->nchans, h->chans, TPU__WIRE_DESC_MAX);
	return wr_finish(&w, TPU__WIRE_HELLO, err);
}

long tpu__wire_welcome_encode(uint8_t *buf, size_t size, const struct tpu__wire_welcome *we)
{
	struct wr w = wr_start(buf, size);
	int err = 0;

	if (!status_ok(we->status))
		return -EINVAL;
	wr_u32(&w, (uint32_t)we->status);
	if (we->status == 0) {
		err = wr_xport(&w, &we->xport);
		if (!err && we->lanes > TPU__WIRE_LANES_MAX)
			err = -EMSGSIZE;
		if (!err) {
			wr_u64(&w, we->token);
			wr_u32(&w, we->lanes);
			err = wr_chans(&w, we->nchans, we->chans, 0);
		}
	}
	return wr_finish(&w, TPU__WIRE_WELCOME, err);
}

long tpu__wire_join_encode(uint8_t *buf, size_t size, const struct tpu__wire_join *j)
{
	struct wr w = wr_start(buf, size);

	wr_u64(&w, j->token);
	wr_u32(&w, j->lane);
	return wr_finish(&w, TPU__WIRE_JOIN, j->lane > TPU__WIRE_LANES_MAX ? -EMSGSIZE : 0);
}

/*
 * A message frame is encoded in two passes: one checks every field and
 * adds up the length (so that a buffer too small, or none, costs no
 * writing), one writes with no check left to make.  Small frames go on
 * the wire at every write: this keeps a bounds test off every field.
 */

/* Add a blob's bytes (its length word and data) to *len. */
static int blob_len(struct tpu__wire_blob b, uint32_t max, size_t *len)
{
	if (b.len > max)
		return -EMSGSIZE;
	if (b.len && !b.data)
		return -EINVAL;
	*len += 4 + (size_t)b.len;
	return 0;
}

static int tensor_len(const struct tpu__wire_tensor *t, size_t *len)
{
	int err;

	if (t->len > TPU__WIRE_LEN_MAX)
		return -EMSGSIZE;
	if (t->src_type >= DEVICE_TYPES || t->dst_type >= DEVICE_TYPES)
		return -EINVAL;
	if (t->channel >= TPU__WIRE_ENTRIES_MAX && t->channel != TPU__WIRE_INLINE)
		return -EINVAL;
	*len += 8 + 5 * 4;
	err = blob_len(t->meta, TPU__WIRE_META_MAX, len);
	if (!err)
		err = blob_len(t->chan_desc, TPU__WIRE_CHAN_DESC_MAX, len);
	return err;
}

/* The frame's length (header included), or the first field's error. */
static long msg_len(const struct tpu__wire_msg *m)
{
	size_t len = TPU__WIRE_HDR_LEN + 8 + 4 + 4;
	uint32_t i;
	int err;

	if (m->npayloads > TPU__WIRE_PAYLOADS_MAX || m->ntensors > TPU__WIRE_TENSORS_MAX)
		return -EMSGSIZE;
	if ((m->npayloads && !m->payloads) || (m->ntensors && !m->tensors))
		return -EINVAL;
	err = blob_len(m->meta, TPU__WIRE_META_MAX, &len);
	for (i = 0; i < m->npayloads && !err; i++) {
		if (m->payloads[i].len > TPU__WIRE_LEN_MAX)
			return -EMSGSIZE;
		len += 8;
		err = blob_len(m->payloads[i].meta, TPU__WIRE_META_MAX, &len);
	}
	for (i = 0; i < m->ntensors && !err; i++)
		err = tensor_len(&m->tensors[i], &len);
	if (err)
		return err;
	if (len - TPU__WIRE_HDR_LEN > TPU__WIRE_BODY_MAX)
		return -EMSGSIZE;
	return (long)len;
}

/* Write a checked blob at q; returns the byte after it. */
static uint8_t *put_blob(uint8_t *q, struct tpu__wire_blob b)
{
	st32(q, b.len);
	if (b.len)
		memcpy(q + 4, b.data, b.len);
	return q + 4 + b.len;
}

long tpu__wire_msg_encode(uint8_t *buf, size_t size, const struct tpu__wire_msg *m)
{
	long len = msg_len(m);
	uint8_t *q;
	uint32_t i;

	if (len < 0 || !buf)
		return len;
	if ((size_t)len > size)
		return -EMSGSIZE;
	q = buf + TPU__WIRE_HDR_LEN;
	st64(q, m->seq);
	q = put_blob(q + 8, m->meta);
	st32(q, m->npayloads);
	st32(q + 4, m->ntensors);
	q += 8;
	for (i = 0; i < m->npayloads; i++) {
		st64(q, m->payloads[i].len);
		q = put_blob(q + 8, m->payloads[i].meta);
	}
	for (i = 0; i < m->ntensors; i++) {
		const struct tpu__wire_tensor *t = &m->tensors[i];

		st64(q, t->len);
		st32(q + 8, t->src_type);
		st32(q + 12, t->src_index);
		st32(q + 16, t->dst_type);
		st32(q + 20, t->dst_index);
		st32(q + 24, t->channel);
		q = put_blob(q + 28, t->meta);
		q = put_blob(q, t->chan_desc);
	}
	tpu__wire_hdr_encode(buf, TPU__WIRE_MSG, (uint32_t)(len - TPU__WIRE_HDR_LEN));
	return len;
}

long tpu__wire_ack_encode(uint8_t *buf, size_t size, const struct tpu__wire_ack *a)
{
	struct wr w = wr_start(buf, size);

	if (a->tensor >= TPU__WIRE_TENSORS_MAX || !status_ok(a->status))
		return -EINVAL;
	wr_u64(&w, a->seq);
	wr_u32(&w, a->tensor);
	wr_u32(&w, (uint32_t)a->status);
	return wr_finish(&w, TPU__WIRE_ACK, 0);
}

/* ------------------------------------------------------------------ */
/* Decoding                                                            */
/* ------------------------------------------------------------------ */

/* What is left of a body; every read checks left first. */
struct rd {
	const uint8_t *p;
	size_t left;
};

static int rd_u32(struct rd *r, uint32_t *v)
{
	if (r->left < 4)
		return -EPROTO;
	*v = ld32(r->p);
	r->p += 4;
	r->left -= 4;
	return 0;
}

static int rd_u64(struct rd *r, uint64_t *v)
{
	if (r->left < 8)
		return -EPROTO;
	*v = ld64(r->p);
	r->p += 8;
	r->left -= 8;
	return 0;
}

static int rd_blob(struct rd *r, struct tpu__wire_blob *b, uint32_t min, uint32_t max)
{
	uint32_t len;
	int err = rd_u32(r, &len);

	if (err)
		return err;
	if (len > r->left)
		return -EPROTO;
	if (len > max)
		return -EMSGSIZE;
	if (len < min)
		return -EPROTO;
	b->data = r->p;
	b->len = len;
	r->p += len;
	r->left -= len;
	return 0;
}

/* A count of entries at least min_size bytes each, bounded by the bytes left, then by max. */
static int rd_count(struct rd *r, uint32_t *n, size_t min_size, uint32_t max)
{
	int err = rd_u32(r, n);

	if (err)
		return err;
	if ((uint64_t)*n * min_size > r->left)
		return -EPROTO;
	if (*n > max)
		return -EMSGSIZE;
	return 0;
}

static int rd_type(struct rd *r, uint32_t *type)
{
	int err = rd_u32(r, type);

	if (!err && *type >= DEVICE_TYPES)
		err = -EPROTO;
	return err;
}

static int rd_xport(struct rd *r, struct tpu__wire_xport_entry *e)
{
	int err;

	err = rd_blob(r, &e->name, 1, TPU__WIRE_NAME_MAX);
	if (!err)
		err = rd_blob(r, &e->compat, 0, TPU__WIRE_DESC_MAX);
	if (!err)
		err = rd_blob(r, &e->addr, 0, TPU__WIRE_ADDR_MAX);
	return err;
}

static int rd_chans(struct rd *r, uint32_t *n, struct tpu__wire_chan_entry *chans,
		    uint32_t compat_max)
{
	uint32_t i;
	int err;

	err = rd_count(r, n, CHAN_MIN, TPU__WIRE_ENTRIES_MAX);
	for (i = 0; i < *n && !err; i++) {
		struct tpu__wire_chan_entry *e = &chans[i];

		err = rd_blob(r, &e->name, 1, TPU__WIRE_NAME_MAX);
		if (!err)
			err = rd_type(r, &e->src_type);
		if (!err)
			err = rd_type(r, &e->dst_type);
		if (!err)
			err = rd_blob(r, &e->compat, 0, TPU__WIRE_DESC_MAX);
		/* WELCOME: well-formed but not empty is a protocol error, not a size. */
		if (!err && e->compat.len > compat_max)
			err = -EPROTO;
	}
	return err;
}

/* The checks every body decoder starts and ends with. */
static int rd_start(struct rd *r, const uint8_t *body, size_t len)
{
	r->p = body;
	r->left = len;
	if (len > TPU__WIRE_BODY_MAX)
		return -EMSGSIZE;
	if (len && !body)
		return -EINVAL;
	return 0;
}

static int rd_end(const struct rd *r, int err)
{
	if (!err && r->left)
		err = -EPROTO;
	return err;
}

tpu_status tpu__wire_hello_decode(const uint8_t *body, size_t len, struct tpu__wire_hello *out)
{
	struct rd r;
	uint32_t i;
	int err;

	memset(out, 0, sizeof(*out));
	err = rd_start(&r, body, len);
	if (!err)
		err = rd_u32(&r, &out->version);
	if (!err)
		err = rd_count(&r, &out->nxports, XPORT_MIN, TPU__WIRE_ENTRIES_MAX);
	for (i = 0; !err && i < out->nxports; i++)
		err = rd_xport(&r, &out->xports[i]);
	if (!err)
		err = rd_chans(&r, &out->nchans, out->chans, TPU__WIRE_DESC_MAX);
	return rd_end(&r, err);
}

tpu_status tpu__wire_welcome_decode(const uint8_t *body, size_t len,
				    struct tpu__wire_welcome *out)
{
	uint32_t status = 0;
	struct rd r;
	int err;

	memset(out, 0, sizeof(*out));
	err = rd_start(&r, body, len);
	if (!err)
		err = rd_u32(&r, &status);
	if (!err && !status_ok((int32_t)status))
		err = -EPROTO;
	if (err || status)
		goto out;
	err = rd_xport(&r, &out->xport);
	if (!err)
		err = rd_u64(&r, &out->token);
	if (!err)
		err = rd_u32(&r, &out->lanes);
	if (!err)
		err = rd_chans(&r, &out->nchans, out->chans, 0);
out:
	err = rd_end(&r, err);
	if (!err && out->lanes > TPU__WIRE_LANES_MAX)
		err = -EMSGSIZE;
	if (!err)
		out->status = (int32_t)status;
	return err;
}

tpu_status tpu__wire_join_decode(const uint8_t *body, size_t len, struct tpu__wire_join *out)
{
	struct rd r;
	int err;

	memset(out, 0, sizeof(*out));
	err = rd_start(&r, body, len);
	if (!err)
		err = rd_u64(&r, &out->token);
	if (!err)
		err = rd_u32(&r, &out->lane);
	err = rd_end(&r, err);
	return !err && out->lane > TPU__WIRE_LANES_MAX ? -EMSGSIZE : err;
}

tpu_status tpu__wire_ack_decode(const uint8_t *body, size_t len, struct tpu__wire_ack *out)
{
	uint32_t status = 0;
	struct rd r;
	int err;

	memset(out, 0, sizeof(*out));
	err = rd_start(&r, body, len);
	if (!err)
		err = rd_u64(&r, &out->seq);
	if (!err)
		err = rd_u32(&r, &out->tensor);
	if (!err && out->tensor >= TPU__WIRE_TENSORS_MAX)
		err = -EPROTO;
	if (!err)
		err = rd_u32(&r, &status);
	if (!err && !status_ok((int32_t)status))
		err = -EPROTO;
	err = rd_end(&r, err);
	if (!err)
		out->status = (int32_t)status;
	return err;
}

static int rd_len(struct rd *r, uint64_t *len)
{
	int err = rd_u64(r, len);

	if (!err && *len > TPU__WIRE_LEN_MAX)
		err = -EMSGSIZE;
	return err;
}

/*
 * One walk over a MSG body.  With m NULL it only validates (counts());
 * with m it also fills m's fields and the first cap_p / cap_t entries of
 * its arrays (the rest are checked and dropped), so the arrays are never
 * written past what the caller gave, whatever counts the body claims.
 */
static int msg_walk(const uint8_t *body, size_t len, struct tpu__wire_msg *m, uint32_t *np,
		    uint32_t *nt, uint32_t cap_p, uint32_t cap_t)
{
	struct tpu__wire_payload p_tmp;
	struct tpu__wire_tensor t_tmp;
	struct tpu__wire_blob meta;
	uint64_t seq;
	struct rd r;
	uint32_t i;
	int err;

	err = rd_start(&r, body, len);
	if (!err)
		err = rd_u64(&r, &seq);
	if (!err)
		err = rd_blob(&r, &meta, 0, TPU__WIRE_META_MAX);
	/* Both counts come before any entry, so each can only be bounded by the smallest total. */
	if (!err)
		err = rd_count(&r, np, PAYLOAD_MIN, TPU__WIRE_PAYLOADS_MAX);
	if (!err)
		err = rd_count(&r, nt, TENSOR_MIN, TPU__WIRE_TENSORS_MAX);
	if (!err && (uint64_t)*np * PAYLOAD_MIN + (uint64_t)*nt * TENSOR_MIN > r.left)
		err = -EPROTO;
	for (i = 0; !err && i < *np; i++) {
		struct tpu__wire_payload *p = m && i < cap_p ? &m->payloads[i] : &p_tmp;

		err = rd_len(&r, &p->len);
		if (!err)
			err = rd_blob(&r, &p->meta, 0, TPU__WIRE_META_MAX);
	}
	for (i = 0; !err && i < *nt; i++) {
		struct tpu__wire_tensor *t = m && i < cap_t ? &m->tensors[i] : &t_tmp;

		err = rd_len(&r, &t->len);
		if (!err)
			err = rd_type(&r, &t->src_type);
		if (!err)
			err = rd_u32(&r, &t->src_index);
		if (!err)
			err = rd_type(&r, &t->dst_type);
		if (!err)
			err = rd_u32(&r, &t->dst_index);
		if (!err)
			err = rd_u32(&r, &t->channel);
		if (!err && t->channel >= TPU__WIRE_ENTRIES_MAX && t->channel != TPU__WIRE_INLINE)
			err = -EPROTO;
		if (!err)
			err = rd_blob(&r, &t->meta, 0, TPU__WIRE_META_MAX);
		if (!err)
			err = rd_blob(&r, &t->chan_desc, 0, TPU__WIRE_CHAN_DESC_MAX);
	}
	err = rd_end(&r, err);
	if (!err && m) {
		m->seq = seq;
		m->meta = meta;
		m->npayloads = *np;
		m->ntensors = *nt;
	}
	return err;
}

tpu_status tpu__wire_msg_counts(const uint8_t *body, size_t len, uint32_t *npayloads,
				uint32_t *ntensors)
{
	uint32_t np = 0, nt = 0;
	int err = msg_walk(body, len, NULL, &np, &nt, 0, 0);

	*npayloads = err ? 0 : np;
	*ntensors = err ? 0 : nt;
	return err;
}

tpu_status tpu__wire_msg_decode(const uint8_t *body, size_t len, struct tpu__wire_msg *out)
{
	uint32_t np = 0, nt = 0;
	int err = msg_walk(body, len, NULL, &np, &nt, 0, 0);

	if (err)
		return err;
	if ((np && !out->payloads) || (nt && !out->tensors))
		return -EINVAL;
	return msg_walk(body, len, out, &np, &nt, np, nt);
}

tpu_status tpu__wire_msg_decode_cap(const uint8_t *body, size_t len, struct tpu__wire_msg *out,
				    uint32_t cap_p, uint32_t cap_t)
{
	uint32_t np = 0, nt = 0;
	int err;

	if ((cap_p && !out->payloads) || (cap_t && !out->tensors))
		return -EINVAL;
	err = msg_walk(body, len, out, &np, &nt, cap_p, cap_t);
	if (!err && (np > cap_p || nt > cap_t))
		err = -ENOSPC;
	return err;
}

tpu_status tpu__wire_blob_str(struct tpu__wire_blob b, char *buf, size_t size)
{
	if (size)
		buf[0] = '\0';
	if (b.len >= size)
		return -ENAMETOOLONG;
	if (b.len && (!b.data || memchr(b.data, '\0', b.len)))
		return -EINVAL;
	if (b.len)
		memcpy(buf, b.data, b.len);
	buf[b.len] = '\0';
	return 0;
}
