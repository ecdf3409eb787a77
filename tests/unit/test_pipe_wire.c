// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The pipe wire format (lib/pipe_wire.c): known bytes, round trips, every
 * limit at and one past it on both sides, and hostile bodies (truncated,
 * padded, bit-flipped, lying counts).  Bodies under test are copied into
 * allocations of exactly their length, so that ASan and valgrind see any
 * read past the end.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipe_wire.h"
#include "tap.h"
#include "tpu_user.h"

#define HDR	TPU__WIRE_HDR_LEN
#define INLINE	TPU__WIRE_INLINE

/* Filler for blobs of any length up to the largest limit (and one past). */
static uint8_t fill[TPU__WIRE_META_MAX + 2];

static struct tpu__wire_blob blob_n(uint32_t len)
{
	return (struct tpu__wire_blob){ fill, len };
}

static struct tpu__wire_blob blob_s(const char *s)
{
	return (struct tpu__wire_blob){ (const uint8_t *)s, (uint32_t)strlen(s) };
}

static bool blob_eq(struct tpu__wire_blob a, struct tpu__wire_blob b)
{
	return a.len == b.len && (!a.len || !memcmp(a.data, b.data, a.len));
}

/* ------------------------------------------------------------------ */
/* An independent body builder, so the layout is checked, not assumed. */
/* ------------------------------------------------------------------ */

struct bb {
	uint8_t *p;
	size_t n, cap;
};

static void bb_put(struct bb *b, const void *src, size_t n)
{
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? b->cap : 256;

		while (cap < b->n + n)
			cap *= 2;
		b->p = realloc(b->p, cap);
		if (!b->p)
			abort();
		b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->n, src, n);
	b->n += n;
}

static void bb_u32(struct bb *b, uint32_t v)
{
	uint8_t le[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24) };

	bb_put(b, le, 4);
}

static void bb_u64(struct bb *b, uint64_t v)
{
	bb_u32(b, (uint32_t)v);
	bb_u32(b, (uint32_t)(v >> 32));
}

static void bb_blob(struct bb *b, uint32_t len)
{
	bb_u32(b, len);
	bb_put(b, fill, len);
}

static void bb_free(struct bb *b)
{
	free(b->p);
	*b = (struct bb){ 0 };
}

/* ------------------------------------------------------------------ */
/* Type-generic decode and re-encode                                   */
/* ------------------------------------------------------------------ */

#define CAP	2
/*
 * tpu__wire_msg_decode_cap() with room for CAP entries of each kind (and a
 * guard entry behind each array) against counts(), which gave @st, @np,
 * @nt: the same error, or -ENOSPC with the counts when more entries came,
 * or the same entries as decode(); the guards untouched.
 */
static bool cap_agrees(const uint8_t *body, size_t len, tpu_status st, uint32_t np, uint32_t nt)
{
	struct tpu__wire_payload cp[CAP + 1], dp[CAP];
	struct tpu__wire_tensor ct[CAP + 1], dt[CAP];
	struct tpu__wire_msg c = { .payloads = cp, .tensors = ct };
	struct tpu__wire_msg d = { .payloads = dp, .tensors = dt };
	tpu_status cst;
	bool ok;

	/* Padding too: both sides start from the same bytes, so memcmp compares entries. */
	memset(cp, 0xa5, sizeof(cp));
	memset(ct, 0xa5, sizeof(ct));
	memset(dp, 0xa5, sizeof(dp));
	memset(dt, 0xa5, sizeof(dt));
	cst = tpu__wire_msg_decode_cap(body, len, &c, CAP, CAP);
	if (st)
		ok = cst == st;
	else if (np > CAP || nt > CAP)
		ok = cst == -ENOSPC && c.npayloads == np && c.ntensors == nt;
	else
		ok = !cst && !tpu__wire_msg_decode(body, len, &d) && c.seq == d.seq &&
		     c.npayloads == np && c.ntensors == nt && c.meta.len == d.meta.len &&
		     !memcmp(cp, dp, np * sizeof(*cp)) && !memcmp(ct, dt, nt * sizeof(*ct));
	for (size_t k = 0; k < sizeof(cp[CAP]); k++)
		ok = ok && ((uint8_t *)&cp[CAP])[k] == 0xa5;
	for (size_t k = 0; k < sizeof(ct[CAP]); k++)
		ok = ok && ((uint8_t *)&ct[CAP])[k] == 0xa5;
	return ok;
}

/*
 * Decode a body of type; when it decodes, encode the result again and set
 * *same to whether that gives back exactly the frame (header and body).
 */
static tpu_status decode_body(uint16_t type, const uint8_t *body, size_t len, bool *same)
{
	struct tpu__wire_hello h;
	struct tpu__wire_welcome w;
	struct tpu__wire_join j;
	struct tpu__wire_ack a;
	struct tpu__wire_msg m = { 0 };
	uint32_t np = 0, nt = 0;
	uint8_t *re = NULL;
	long n = -1, n2 = -2;
	tpu_status st;

	*same = false;
	switch (type) {
	case TPU__WIRE_HELLO:
		st = tpu__wire_hello_decode(body, len, &h);
		if (!st && (n = tpu__wire_hello_encode(NULL, 0, &h)) > 0 && (re = malloc(n)))
			n2 = tpu__wire_hello_encode(re, n, &h);
		break;
	case TPU__WIRE_WELCOME:
		st = tpu__wire_welcome_decode(body, len, &w);
		if (!st && (n = tpu__wire_welcome_encode(NULL, 0, &w)) > 0 && (re = malloc(n)))
			n2 = tpu__wire_welcome_encode(re, n, &w);
		break;
	case TPU__WIRE_JOIN:
		st = tpu__wire_join_decode(body, len, &j);
		if (!st && (n = tpu__wire_join_encode(NULL, 0, &j)) > 0 && (re = malloc(n)))
			n2 = tpu__wire_join_encode(re, n, &j);
		break;
	case TPU__WIRE_ACK:
		st = tpu__wire_ack_decode(body, len, &a);
		if (!st && (n = tpu__wire_ack_encode(NULL, 0, &a)) > 0 && (re = malloc(n)))
			n2 = tpu__wire_ack_encode(re, n, &a);
		break;
	case TPU__WIRE_MSG:
		st = tpu__wire_msg_counts(body, len, &np, &nt);
		/* The one-walk decoder agrees, and never writes past its capacity. */
		if (!cap_agrees(body, len, st, np, nt))
			st = -EBADMSG;
		if (st)
			break;
		m.payloads = calloc(np ? np : 1, sizeof(*m.payloads));
		m.tensors = calloc(nt ? nt : 1, sizeof(*m.tensors));
		if (!m.payloads || !m.tensors)
			abort();
		st = tpu__wire_msg_decode(body, len, &m);
		if (!st && (m.npayloads != np || m.ntensors != nt))
			st = -EBADMSG;	/* counts() and decode() disagree: a bug */
		if (!st && (n = tpu__wire_msg_encode(NULL, 0, &m)) > 0 && (re = malloc(n)))
			n2 = tpu__wire_msg_encode(re, n, &m);
		free(m.payloads);
		free(m.tensors);
		break;
	default:
		return -EINVAL;
	}
	if (re) {
		struct tpu__wire_hdr hdr;

		*same = n2 == n && (size_t)n == HDR + len && !tpu__wire_hdr_decode(re, &hdr) &&
			hdr.type == type && hdr.len == len && !memcmp(re + HDR, body, len);
		free(re);
	}
	return st;
}

/* decode_body() on an exact-size heap copy of body[0..len). */
static tpu_status decode_copy(uint16_t type, const uint8_t *body, size_t len, bool *same)
{
	uint8_t *copy = malloc(len ? len : 1);
	tpu_status st;

	if (!copy)
		abort();
	if (len)
		memcpy(copy, body, len);
	st = decode_body(type, copy, len, same);
	free(copy);
	return st;
}

/*
 * The checks every valid frame gets: its header, decode and re-encode to
 * the same bytes, a buffer one byte short, every truncation, a trailing
 * byte, and (when flips) every single-bit flip.
 */
static void frame_checks(const char *name, uint16_t type, const uint8_t *frame, long n,
			 bool flips)
{
	const uint8_t *body = frame + HDR;
	size_t len = (size_t)n - HDR, k, bit, bad = 0, decoded = 0;
	struct tpu__wire_hdr hdr;
	tpu_status st;
	uint8_t *buf;
	bool same;

	st = tpu__wire_hdr_decode(frame, &hdr);
	CHECK(st == 0 && hdr.type == type && hdr.len == len, "wire_%s_header_names_type_and_len",
	      name);
	st = decode_copy(type, body, len, &same);
	CHECK_STATUS(st, 0, "wire_%s_body_decodes", name);
	CHECK(same, "wire_%s_reencodes_to_the_same_bytes", name);

	/*
	 * Exact-size copies let ASan and valgrind see an over-read; past 16 KiB
	 * only a sample of offsets is copied (the copies would dominate), the
	 * rest decode in place.
	 */
	for (k = 0; k < len; k++) {
		if (len <= 16384 || k < 1024 || len - k < 1024 || k % 61 == 0)
			st = decode_copy(type, body, k, &same);
		else
			st = decode_body(type, body, k, &same);
		if (st != -EPROTO) {
			if (!bad++)
				tap_diag("%s truncated to %zu of %zu bytes: %d", name, k, len, st);
		}
	}
	CHECK(!bad, "wire_%s_every_truncation_is_eproto", name);

	buf = malloc(len + 1);
	if (!buf)
		abort();
	memcpy(buf, body, len);
	buf[len] = 0;
	CHECK_STATUS(decode_body(type, buf, len + 1, &same), -EPROTO,
		     "wire_%s_trailing_byte_is_eproto", name);
	free(buf);

	if (!flips)
		return;
	buf = malloc(len ? len : 1);
	if (!buf)
		abort();
	bad = 0;
	for (bit = 0; bit < len * 8; bit++) {
		memcpy(buf, body, len);
		buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		st = decode_body(type, buf, len, &same);
		if (st == 0) {
			decoded++;
			if (!same && !bad++)
				tap_diag("%s bit %zu: re-encoded differently", name, bit);
		} else if (st != -EPROTO && st != -EMSGSIZE) {
			if (!bad++)
				tap_diag("%s bit %zu: status %d", name, bit, st);
		}
	}
	free(buf);
	CHECK(!bad, "wire_%s_bit_flips_decode_canonically_or_are_refused (%zu of %zu decode)",
	      name, decoded, len * 8);
}

/* ------------------------------------------------------------------ */
/* Header                                                              */
/* ------------------------------------------------------------------ */

static void header(void)
{
	static const uint8_t want[HDR] = { 'T', 'P', 'W', '1', 4, 0, 0, 0, 4, 3, 2, 1, 0, 0, 0, 0 };
	struct tpu__wire_hdr h;
	uint8_t b[HDR], c[HDR];
	unsigned int i, bad;
	uint16_t t;

	tpu__wire_hdr_encode(b, TPU__WIRE_MSG, 0x01020304);
	CHECK(!memcmp(b, want, HDR), "wire_header_bytes_are_magic_type_flags_len_rsvd_le");

	bad = 0;
	for (t = TPU__WIRE_HELLO; t <= TPU__WIRE_ACK; t++) {
		tpu__wire_hdr_encode(b, t, TPU__WIRE_BODY_MAX);
		if (tpu__wire_hdr_decode(b, &h) || h.type != t || h.len != TPU__WIRE_BODY_MAX)
			bad++;
		tpu__wire_hdr_encode(b, t, 0);
		if (tpu__wire_hdr_decode(b, &h) || h.type != t || h.len != 0)
			bad++;
	}
	CHECK(!bad, "wire_header_round_trips_every_type_at_len_0_and_body_max");

	tpu__wire_hdr_encode(b, TPU__WIRE_HELLO, TPU__WIRE_BODY_MAX + 1);
	CHECK_STATUS(tpu__wire_hdr_decode(b, &h), -EMSGSIZE, "wire_header_len_over_body_max");
	tpu__wire_hdr_encode(b, TPU__WIRE_HELLO, UINT32_MAX);
	CHECK_STATUS(tpu__wire_hdr_decode(b, &h), -EMSGSIZE, "wire_header_len_u32_max");

	tpu__wire_hdr_encode(b, 0, 0);
	CHECK_STATUS(tpu__wire_hdr_decode(b, &h), -EPROTO, "wire_header_type_0_is_eproto");
	tpu__wire_hdr_encode(b, TPU__WIRE_AUTH + 1, 0);
	CHECK_STATUS(tpu__wire_hdr_decode(b, &h), -EPROTO, "wire_header_type_after_auth_is_eproto");
	tpu__wire_hdr_encode(b, UINT16_MAX, 0);
	CHECK_STATUS(tpu__wire_hdr_decode(b, &h), -EPROTO, "wire_header_type_ffff_is_eproto");

	/* Any one bit of magic (0..31), flags (48..63) or rsvd (96..127) wrong. */
	tpu__wire_hdr_encode(b, TPU__WIRE_JOIN, 8);
	bad = 0;
	for (i = 0; i < HDR * 8; i++) {
		if ((i >= 32 && i < 48) || (i >= 64 && i < 96))
			continue;
		memcpy(c, b, HDR);
		c[i / 8] ^= (uint8_t)(1u << (i % 8));
		if (tpu__wire_hdr_decode(c, &h) != -EPROTO)
			bad++;
	}
	CHECK(!bad, "wire_header_any_bit_of_magic_flags_or_rsvd_is_eproto");
}

/* ------------------------------------------------------------------ */
/* Known bytes                                                         */
/* ------------------------------------------------------------------ */

static bool frame_is(const uint8_t *got, long n, uint16_t type, const uint8_t *body, size_t len)
{
	uint8_t h[HDR];

	tpu__wire_hdr_encode(h, type, (uint32_t)len);
	return n == (long)(HDR + len) && !memcmp(got, h, HDR) && !memcmp(got + HDR, body, len);
}

static void known_bytes(void)
{
	static const uint8_t join[] = { 8, 7, 6, 5, 4, 3, 2, 1, 9, 0, 0, 0 };
	static const uint8_t ack[] = { 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0xfb, 0xff, 0xff, 0xff };
	static const uint8_t hello[] = {
		1, 0, 0, 0,				/* version */
		1, 0, 0, 0,				/* nxports */
		3, 0, 0, 0, 't', 'c', 'p',		/* name */
		0, 0, 0, 0,				/* descriptor */
		2, 0, 0, 0, 'a', 'b',			/* addr */
		1, 0, 0, 0,				/* nchans */
		3, 0, 0, 0, 'c', 'm', 'a',		/* name */
		0, 0, 0, 0, 1, 0, 0, 0,			/* src_type, dst_type */
		1, 0, 0, 0, 'x',			/* descriptor */
	};
	static const uint8_t welcome_err[] = { 0xa4, 0xff, 0xff, 0xff };	/* -92 */
	static const uint8_t welcome[] = {
		0, 0, 0, 0,				/* status */
		3, 0, 0, 0, 's', 'h', 'm',		/* xport: name */
		1, 0, 0, 0, 'd',			/* descriptor */
		1, 0, 0, 0, 'a',			/* addr */
		0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01,	/* token */
		4, 0, 0, 0,				/* lanes */
		1, 0, 0, 0,				/* nchans */
		5, 0, 0, 0, 'b', 'a', 's', 'i', 'c', 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	};
	static const uint8_t msg[] = {
		2, 0, 0, 0, 0, 0, 0, 0,			/* seq */
		1, 0, 0, 0, 'm',			/* meta */
		1, 0, 0, 0, 1, 0, 0, 0,			/* npayloads, ntensors */
		3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,	/* payload: len, meta */
		4, 0, 0, 0, 0xff, 0, 0, 0,		/* tensor: len 0xff00000004 */
		0, 0, 0, 0, 5, 0, 0, 0,			/* src_type, src_index */
		1, 0, 0, 0, 6, 0, 0, 0,			/* dst_type, dst_index */
		0xff, 0xff, 0xff, 0xff,			/* channel: inline */
		0, 0, 0, 0, 1, 0, 0, 0, 'd',		/* meta, chan_desc */
	};
	struct tpu__wire_hello h = { .version = 1, .nxports = 1, .nchans = 1 };
	struct tpu__wire_welcome w = { .token = 0x0123456789abcdefull, .lanes = 4, .nchans = 1 };
	struct tpu__wire_payload p = { .len = 3 };
	struct tpu__wire_tensor t = { .len = 0xff00000004ull, .src_index = 5, .dst_type = 1,
				      .dst_index = 6, .channel = INLINE };
	struct tpu__wire_msg m = { .seq = 2, .npayloads = 1, .ntensors = 1, .payloads = &p,
				   .tensors = &t };
	uint8_t b[256];
	long n;

	n = tpu__wire_join_encode(b, sizeof(b), &(struct tpu__wire_join){ 0x0102030405060708ull, 9 });
	CHECK(frame_is(b, n, TPU__WIRE_JOIN, join, sizeof(join)), "wire_join_known_bytes");
	n = tpu__wire_ack_encode(b, sizeof(b), &(struct tpu__wire_ack){ 1, 2, -5 });
	CHECK(frame_is(b, n, TPU__WIRE_ACK, ack, sizeof(ack)), "wire_ack_known_bytes");

	h.xports[0] = (struct tpu__wire_xport_entry){ blob_s("tcp"), blob_s(""), blob_s("ab") };
	h.chans[0] = (struct tpu__wire_chan_entry){ blob_s("cma"), 0, 1, blob_s("x") };
	n = tpu__wire_hello_encode(b, sizeof(b), &h);
	CHECK(frame_is(b, n, TPU__WIRE_HELLO, hello, sizeof(hello)), "wire_hello_known_bytes");

	w.xport = (struct tpu__wire_xport_entry){ blob_s("shm"), blob_s("d"), blob_s("a") };
	w.chans[0] = (struct tpu__wire_chan_entry){ blob_s("basic"), 1, 0, blob_s("") };
	n = tpu__wire_welcome_encode(b, sizeof(b), &w);
	CHECK(frame_is(b, n, TPU__WIRE_WELCOME, welcome, sizeof(welcome)),
	      "wire_welcome_known_bytes");
	/* An error WELCOME is its status alone, whatever else the structure holds. */
	w.status = -92;
	n = tpu__wire_welcome_encode(b, sizeof(b), &w);
	CHECK(frame_is(b, n, TPU__WIRE_WELCOME, welcome_err, sizeof(welcome_err)),
	      "wire_welcome_error_known_bytes_status_only");

	m.meta = blob_s("m");
	t.chan_desc = blob_s("d");
	n = tpu__wire_msg_encode(b, sizeof(b), &m);
	CHECK(frame_is(b, n, TPU__WIRE_MSG, msg, sizeof(msg)), "wire_msg_known_bytes");
}

/* ------------------------------------------------------------------ */
/* Round trips                                                         */
/* ------------------------------------------------------------------ */

static bool xport_eq(const struct tpu__wire_xport_entry *a, const struct tpu__wire_xport_entry *b)
{
	return blob_eq(a->name, b->name) && blob_eq(a->compat, b->compat) &&
	       blob_eq(a->addr, b->addr);
}

static bool chan_eq(const struct tpu__wire_chan_entry *a, const struct tpu__wire_chan_entry *b)
{
	return blob_eq(a->name, b->name) && a->src_type == b->src_type &&
	       a->dst_type == b->dst_type && blob_eq(a->compat, b->compat);
}

static bool hello_eq(const struct tpu__wire_hello *a, const struct tpu__wire_hello *b)
{
	uint32_t i;

	if (a->version != b->version || a->nxports != b->nxports || a->nchans != b->nchans)
		return false;
	for (i = 0; i < a->nxports; i++)
		if (!xport_eq(&a->xports[i], &b->xports[i]))
			return false;
	for (i = 0; i < a->nchans; i++)
		if (!chan_eq(&a->chans[i], &b->chans[i]))
			return false;
	return true;
}

static bool welcome_eq(const struct tpu__wire_welcome *a, const struct tpu__wire_welcome *b)
{
	uint32_t i;

	if (a->status != b->status)
		return false;
	if (a->status)
		return true;
	if (!xport_eq(&a->xport, &b->xport) || a->token != b->token || a->lanes != b->lanes ||
	    a->nchans != b->nchans)
		return false;
	for (i = 0; i < a->nchans; i++)
		if (!chan_eq(&a->chans[i], &b->chans[i]))
			return false;
	return true;
}

static bool msg_eq(const struct tpu__wire_msg *a, const struct tpu__wire_msg *b)
{
	uint32_t i;

	if (a->seq != b->seq || !blob_eq(a->meta, b->meta) || a->npayloads != b->npayloads ||
	    a->ntensors != b->ntensors)
		return false;
	for (i = 0; i < a->npayloads; i++)
		if (a->payloads[i].len != b->payloads[i].len ||
		    !blob_eq(a->payloads[i].meta, b->payloads[i].meta))
			return false;
	for (i = 0; i < a->ntensors; i++) {
		const struct tpu__wire_tensor *x = &a->tensors[i], *y = &b->tensors[i];

		if (x->len != y->len || x->src_type != y->src_type ||
		    x->src_index != y->src_index || x->dst_type != y->dst_type ||
		    x->dst_index != y->dst_index || x->channel != y->channel ||
		    !blob_eq(x->meta, y->meta) || !blob_eq(x->chan_desc, y->chan_desc))
			return false;
	}
	return true;
}

/* The encoders behind one type, for encode_checked(). */
typedef long (*encode_fn)(uint8_t *buf, size_t size, const void *frame);

static long enc_hello(uint8_t *buf, size_t size, const void *frame)
{
	return tpu__wire_hello_encode(buf, size, frame);
}

static long enc_welcome(uint8_t *buf, size_t size, const void *frame)
{
	return tpu__wire_welcome_encode(buf, size, frame);
}

static long enc_join(uint8_t *buf, size_t size, const void *frame)
{
	return tpu__wire_join_encode(buf, size, frame);
}

static long enc_msg(uint8_t *buf, size_t size, const void *frame)
{
	return tpu__wire_msg_encode(buf, size, frame);
}

static long enc_ack(uint8_t *buf, size_t size, const void *frame)
{
	return tpu__wire_ack_encode(buf, size, frame);
}

/*
 * Encode into an exact-size buffer after measuring, and check that one
 * byte less (and a buffer of size 0) is -EMSGSIZE; returns the frame
 * (free it) and its length in *n.
 */
static uint8_t *encode_checked(const char *name, encode_fn fn, const void *frame, long *n)
{
	long len = fn(NULL, 0, frame);
	uint8_t *f = malloc(len > 0 ? (size_t)len : 1);

	if (!f)
		abort();
	CHECK(len > HDR && fn(f, (size_t)len, frame) == len,
	      "wire_%s_measure_equals_written_length", name);
	CHECK(len > HDR && fn(f, (size_t)len - 1, frame) == -EMSGSIZE &&
	      fn(f, 0, frame) == -EMSGSIZE, "wire_%s_buffer_one_byte_short_is_emsgsize", name);
	*n = len;
	return f;
}

static void hello_round_trip(const char *name, const struct tpu__wire_hello *h, bool flips)
{
	struct tpu__wire_hello d;
	uint8_t *f;
	long n;

	f = encode_checked(name, enc_hello, h, &n);
	CHECK(n > HDR && !tpu__wire_hello_decode(f + HDR, n - HDR, &d) && hello_eq(h, &d),
	      "wire_%s_decodes_to_what_was_encoded", name);
	if (n > HDR)
		frame_checks(name, TPU__WIRE_HELLO, f, n, flips);
	free(f);
}

static void welcome_round_trip(const char *name, const struct tpu__wire_welcome *w)
{
	struct tpu__wire_welcome d;
	uint8_t *f;
	long n;

	f = encode_checked(name, enc_welcome, w, &n);
	CHECK(n > HDR && !tpu__wire_welcome_decode(f + HDR, n - HDR, &d) && welcome_eq(w, &d),
	      "wire_%s_decodes_to_what_was_encoded", name);
	if (n > HDR)
		frame_checks(name, TPU__WIRE_WELCOME, f, n, true);
	free(f);
}

static void msg_round_trip(const char *name, const struct tpu__wire_msg *m, bool flips)
{
	struct tpu__wire_msg d = { 0 };
	uint32_t np = 99, nt = 99;
	uint8_t *f;
	long n;

	f = encode_checked(name, enc_msg, m, &n);
	CHECK(n > HDR && !tpu__wire_msg_counts(f + HDR, n - HDR, &np, &nt) &&
	      np == m->npayloads && nt == m->ntensors, "wire_%s_counts", name);
	d.payloads = calloc(np + 1, sizeof(*d.payloads));
	d.tensors = calloc(nt + 1, sizeof(*d.tensors));
	if (!d.payloads || !d.tensors)
		abort();
	CHECK(n > HDR && !tpu__wire_msg_decode(f + HDR, n - HDR, &d) && msg_eq(m, &d),
	      "wire_%s_decodes_to_what_was_encoded", name);
	free(d.payloads);
	free(d.tensors);
	if (n > HDR)
		frame_checks(name, TPU__WIRE_MSG, f, n, flips);
	free(f);
}

static void round_trips(void)
{
	struct tpu__wire_hello h = { .version = TPU__WIRE_VERSION };
	struct tpu__wire_welcome w = { 0 };
	struct tpu__wire_payload p[3];
	struct tpu__wire_tensor t[4];
	struct tpu__wire_msg m = { 0 };
	struct tpu__wire_join j;
	struct tpu__wire_ack a, ad;
	uint8_t *f;
	long n;
	int i;

	hello_round_trip("hello_empty", &h, true);
	h.nxports = 2;
	h.xports[0] = (struct tpu__wire_xport_entry){ blob_s("tcp"), blob_s(""), blob_s("") };
	h.xports[1] = (struct tpu__wire_xport_entry){ blob_s("shm"), blob_s("boot:1f2e"),
						      blob_s("ignored") };
	h.nchans = 3;
	h.chans[0] = (struct tpu__wire_chan_entry){ blob_s("basic"), 0, 0, blob_s("") };
	h.chans[1] = (struct tpu__wire_chan_entry){ blob_s("cma"), 0, 0, blob_s("host=a;uid=0") };
	h.chans[2] = (struct tpu__wire_chan_entry){ blob_s("kmod"), 1, 0, blob_s("k") };
	hello_round_trip("hello_two_xports_three_chans", &h, true);
	h.version = UINT32_MAX;
	h.nxports = TPU__WIRE_ENTRIES_MAX;
	h.nchans = TPU__WIRE_ENTRIES_MAX;
	for (i = 0; i < TPU__WIRE_ENTRIES_MAX; i++) {
		h.xports[i] = (struct tpu__wire_xport_entry){ blob_n(1 + i), blob_n(i * 16),
							      blob_n(255 - i) };
		h.chans[i] = (struct tpu__wire_chan_entry){ blob_n(32 - i), i & 1, (i >> 1) & 1,
							    blob_n(i * 7) };
	}
	hello_round_trip("hello_full", &h, false);

	w.xport = (struct tpu__wire_xport_entry){ blob_s("tcp"), blob_s(""),
						  blob_s("127.0.0.1:40000") };
	w.token = 0x0123456789abcdefull;
	w.nchans = 2;
	w.chans[0] = (struct tpu__wire_chan_entry){ blob_s("cma"), 0, 0, blob_s("") };
	w.chans[1] = (struct tpu__wire_chan_entry){ blob_s("basic"), 1, 1, blob_s("") };
	welcome_round_trip("welcome_ok", &w);
	w.xport.addr = blob_s("");
	w.token = UINT64_MAX;
	w.nchans = 0;
	welcome_round_trip("welcome_ok_same_transport", &w);
	w.status = -ENOPROTOOPT;
	welcome_round_trip("welcome_enoprotoopt", &w);
	w.status = -TPU_ERRNO_MAX;
	welcome_round_trip("welcome_errno_max", &w);

	j = (struct tpu__wire_join){ 0x8000000000000001ull, TPU__WIRE_LANES_MAX };
	f = encode_checked("join", enc_join, &j, &n);
	CHECK(n == HDR + 12, "wire_join_is_12_bytes_of_body");
	frame_checks("join", TPU__WIRE_JOIN, f, n, true);
	{
		struct tpu__wire_join jd;

		CHECK(!tpu__wire_join_decode(f + HDR, 12, &jd) && jd.token == j.token &&
		      jd.lane == j.lane, "wire_join_decodes_to_what_was_encoded");
		/* One lane past the limit: well-formed, so -EMSGSIZE both ways. */
		f[HDR + 8] = TPU__WIRE_LANES_MAX + 1;
		CHECK_STATUS(tpu__wire_join_decode(f + HDR, 12, &jd), -EMSGSIZE,
			     "wire_join_lane_over_max_decodes_emsgsize");
		j.lane = TPU__WIRE_LANES_MAX + 1;
		CHECK_STATUS((tpu_status)tpu__wire_join_encode(NULL, 0, &j), -EMSGSIZE,
			     "wire_join_lane_over_max_encodes_emsgsize");
	}
	free(f);

	a = (struct tpu__wire_ack){ UINT64_MAX, TPU__WIRE_TENSORS_MAX - 1, -EIO };
	f = encode_checked("ack", enc_ack, &a, &n);
	CHECK(n == HDR + 16 && !tpu__wire_ack_decode(f + HDR, 16, &ad) && ad.seq == a.seq &&
	      ad.tensor == a.tensor && ad.status == a.status,
	      "wire_ack_decodes_to_what_was_encoded");
	frame_checks("ack", TPU__WIRE_ACK, f, n, true);
	free(f);

	msg_round_trip("msg_empty", &m, true);
	m.seq = UINT64_MAX;
	m.meta = blob_s("message meta");
	m.npayloads = 3;
	m.payloads = p;
	p[0] = (struct tpu__wire_payload){ 0, blob_s("") };
	p[1] = (struct tpu__wire_payload){ 1, blob_s("pm") };
	p[2] = (struct tpu__wire_payload){ TPU__WIRE_LEN_MAX, blob_n(9) };
	m.ntensors = 4;
	m.tensors = t;
	t[0] = (struct tpu__wire_tensor){ 100, 0, 0, 0, 0, INLINE, blob_s("t0"), blob_s("") };
	t[1] = (struct tpu__wire_tensor){ TPU__WIRE_LEN_MAX, 0, 3, 1, UINT32_MAX, 0, blob_s(""),
					  blob_s("pid=42,addr=0x7f00") };
	t[2] = (struct tpu__wire_tensor){ 0, 1, 1, 0, 0, TPU__WIRE_ENTRIES_MAX - 1, blob_n(3),
					  blob_n(TPU__WIRE_CHAN_DESC_MAX) };
	t[3] = (struct tpu__wire_tensor){ 1ull << 33, 1, 0, 1, 7, 1, blob_n(1), blob_n(1) };
	msg_round_trip("msg_mixed", &m, true);
	m.meta = blob_n(TPU__WIRE_META_MAX);
	t[0].meta = blob_n(TPU__WIRE_META_MAX);
	msg_round_trip("msg_big_metadata", &m, false);
}

/* ------------------------------------------------------------------ */
/* Limits: at the limit accepted, one past refused, on both sides      */
/* ------------------------------------------------------------------ */

/* Frames made of uniform entries, built by the test's builder and by the encoder. */
struct hspec {
	uint32_t nx, name, dom, addr, nc, cname, src, dst, cdom;
};

static void hello_build(struct bb *b, const struct hspec *s)
{
	uint32_t i;

	bb_u32(b, TPU__WIRE_VERSION);
	bb_u32(b, s->nx);
	for (i = 0; i < s->nx; i++) {
		bb_blob(b, s->name);
		bb_blob(b, s->dom);
		bb_blob(b, s->addr);
	}
	bb_u32(b, s->nc);
	for (i = 0; i < s->nc; i++) {
		bb_blob(b, s->cname);
		bb_u32(b, s->src);
		bb_u32(b, s->dst);
		bb_blob(b, s->cdom);
	}
}

static void hello_fill(struct tpu__wire_hello *h, const struct hspec *s)
{
	uint32_t i;

	*h = (struct tpu__wire_hello){ .version = TPU__WIRE_VERSION, .nxports = s->nx,
				       .nchans = s->nc };
	for (i = 0; i < TPU__WIRE_ENTRIES_MAX; i++) {
		h->xports[i] = (struct tpu__wire_xport_entry){ blob_n(s->name), blob_n(s->dom),
							       blob_n(s->addr) };
		h->chans[i] = (struct tpu__wire_chan_entry){ blob_n(s->cname), s->src, s->dst,
							     blob_n(s->cdom) };
	}
}

struct wspec {
	int32_t status;
	uint32_t name, dom, addr, nc, cname, src, dst, cdom, lanes;
};

static void welcome_build(struct bb *b, const struct wspec *s)
{
	uint32_t i;

	bb_u32(b, (uint32_t)s->status);
	if (s->status)
		return;
	bb_blob(b, s->name);
	bb_blob(b, s->dom);
	bb_blob(b, s->addr);
	bb_u64(b, 77);
	bb_u32(b, s->lanes);
	bb_u32(b, s->nc);
	for (i = 0; i < s->nc; i++) {
		bb_blob(b, s->cname);
		bb_u32(b, s->src);
		bb_u32(b, s->dst);
		bb_blob(b, s->cdom);
	}
}

static void welcome_fill(struct tpu__wire_welcome *w, const struct wspec *s)
{
	uint32_t i;

	*w = (struct tpu__wire_welcome){ .status = s->status, .token = 77, .lanes = s->lanes,
					 .nchans = s->nc };
	w->xport = (struct tpu__wire_xport_entry){ blob_n(s->name), blob_n(s->dom),
						   blob_n(s->addr) };
	for (i = 0; i < TPU__WIRE_ENTRIES_MAX; i++)
		w->chans[i] = (struct tpu__wire_chan_entry){ blob_n(s->cname), s->src, s->dst,
							     blob_n(s->cdom) };
}

struct mspec {
	uint32_t meta, np, nt;
	uint64_t plen;
	uint32_t pmeta;
	uint64_t tlen;
	uint32_t src, dst, chan, tmeta, cdesc;
};

static void msg_build(struct bb *b, const struct mspec *s)
{
	uint32_t i;

	bb_u64(b, 5);
	bb_blob(b, s->meta);
	bb_u32(b, s->np);
	bb_u32(b, s->nt);
	for (i = 0; i < s->np; i++) {
		bb_u64(b, s->plen);
		bb_blob(b, s->pmeta);
	}
	for (i = 0; i < s->nt; i++) {
		bb_u64(b, s->tlen);
		bb_u32(b, s->src);
		bb_u32(b, i);
		bb_u32(b, s->dst);
		bb_u32(b, 2 * i);
		bb_u32(b, s->chan);
		bb_blob(b, s->tmeta);
		bb_blob(b, s->cdesc);
	}
}

/* Fills m, allocating its arrays (free them). */
static void msg_fill(struct tpu__wire_msg *m, const struct mspec *s)
{
	uint32_t i;

	*m = (struct tpu__wire_msg){ .seq = 5, .meta = blob_n(s->meta), .npayloads = s->np,
				     .ntensors = s->nt };
	m->payloads = calloc(s->np + 1, sizeof(*m->payloads));
	m->tensors = calloc(s->nt + 1, sizeof(*m->tensors));
	if (!m->payloads || !m->tensors)
		abort();
	for (i = 0; i < s->np; i++)
		m->payloads[i] = (struct tpu__wire_payload){ s->plen, blob_n(s->pmeta) };
	for (i = 0; i < s->nt; i++)
		m->tensors[i] = (struct tpu__wire_tensor){ s->tlen, s->src, i, s->dst, 2 * i,
							   s->chan, blob_n(s->tmeta),
							   blob_n(s->cdesc) };
}

/*
 * One limit case: the builder's body decodes with want_dec, the encoder
 * gives want_enc; when both accept, the encoder's body is the builder's.
 */
static void limit_case(const char *expr, uint16_t type, struct bb *b, long n, const uint8_t *f,
		       tpu_status want_dec, tpu_status want_enc)
{
	tpu_status st;
	char name[96];
	size_t i = 0;
	bool same;

	/* "msg_nt_TPU__WIRE_TENSORS_MAX + 1" -> "msg_nt_TPU__WIRE_TENSORS_MAX_plus_1" */
	for (; *expr && i + 7 < sizeof(name); expr++) {
		const char *w = *expr == '+' ? "plus" : *expr == '-' ? "minus" : NULL;

		if (w) {
			memcpy(name + i, w, strlen(w));
			i += strlen(w);
		} else {
			name[i++] = *expr == ' ' ? '_' : *expr;
		}
	}
	name[i] = '\0';
	st = decode_copy(type, b->p, b->n, &same);

	if (st != want_dec)
		tap_diag("%s: decode got %d, want %d", name, st, want_dec);
	if (!want_enc && n != (long)(HDR + b->n))
		tap_diag("%s: encode got %ld, want %zu", name, n, HDR + b->n);
	else if (want_enc && n != want_enc)
		tap_diag("%s: encode got %ld, want %d", name, n, want_enc);
	CHECK(st == want_dec && (want_dec || same) &&
	      (want_enc ? n == want_enc :
	       n == (long)(HDR + b->n) && !memcmp(f + HDR, b->p, b->n)),
	      "wire_limit_%s", name);
}

static void hello_limit(const char *name, struct hspec s, tpu_status want_dec,
			tpu_status want_enc)
{
	struct tpu__wire_hello h;
	struct bb b = { 0 };
	static uint8_t f[64 << 10];

	hello_build(&b, &s);
	hello_fill(&h, &s);
	limit_case(name, TPU__WIRE_HELLO, &b, tpu__wire_hello_encode(f, sizeof(f), &h), f,
		   want_dec, want_enc);
	bb_free(&b);
}

static void welcome_limit(const char *name, struct wspec s, tpu_status want_dec,
			  tpu_status want_enc)
{
	struct tpu__wire_welcome w;
	struct bb b = { 0 };
	static uint8_t f[64 << 10];

	welcome_build(&b, &s);
	welcome_fill(&w, &s);
	limit_case(name, TPU__WIRE_WELCOME, &b, tpu__wire_welcome_encode(f, sizeof(f), &w), f,
		   want_dec, want_enc);
	bb_free(&b);
}

static void msg_limit(const char *name, struct mspec s, tpu_status want_dec,
		      tpu_status want_enc)
{
	struct tpu__wire_msg m;
	struct bb b = { 0 };
	uint8_t *f;
	long n;

	msg_build(&b, &s);
	msg_fill(&m, &s);
	n = tpu__wire_msg_encode(NULL, 0, &m);
	f = malloc(n > 0 ? (size_t)n : 1);
	if (!f)
		abort();
	if (n > 0)
		n = tpu__wire_msg_encode(f, n, &m);
	limit_case(name, TPU__WIRE_MSG, &b, n, f, want_dec, want_enc);
	free(f);
	free(m.payloads);
	free(m.tensors);
	bb_free(&b);
}

static void ack_limit(const char *name, uint32_t tensor, int32_t status, tpu_status want_dec,
		      tpu_status want_enc)
{
	struct tpu__wire_ack a = { 9, tensor, status };
	struct bb b = { 0 };
	uint8_t f[64];

	bb_u64(&b, 9);
	bb_u32(&b, tensor);
	bb_u32(&b, (uint32_t)status);
	limit_case(name, TPU__WIRE_ACK, &b, tpu__wire_ack_encode(f, sizeof(f), &a), f, want_dec,
		   want_enc);
	bb_free(&b);
}

static void limits(void)
{
	const struct hspec h0 = { 1, 3, 0, 0, 1, 5, 0, 0, 0 };
	const struct wspec w0 = { 0, 3, 0, 5, 1, 3, 0, 0, 0, 0 };
	const struct mspec m0 = { 3, 2, 2, 100, 2, 200, 0, 1, INLINE, 1, 4 };
	const uint32_t name = TPU__WIRE_NAME_MAX, desc = TPU__WIRE_DESC_MAX;
	const uint32_t addr = TPU__WIRE_ADDR_MAX, ents = TPU__WIRE_ENTRIES_MAX;
	const uint32_t meta = TPU__WIRE_META_MAX, cdesc = TPU__WIRE_CHAN_DESC_MAX;
	const uint64_t len = TPU__WIRE_LEN_MAX;
	struct hspec hs;
	struct wspec ws;
	struct mspec ms;

#define H(field, v, dec, enc) (hs = h0, hs.field = (v), hello_limit("hello_" #field "_" #v, hs, \
								      dec, enc))
	H(nx, 0, 0, 0);
	H(nx, ents, 0, 0);
	H(nx, ents + 1, -EMSGSIZE, -EMSGSIZE);
	H(name, name, 0, 0);
	H(name, name + 1, -EMSGSIZE, -EMSGSIZE);
	H(name, 0, -EPROTO, -EINVAL);
	H(dom, desc, 0, 0);
	H(dom, desc + 1, -EMSGSIZE, -EMSGSIZE);
	H(addr, addr, 0, 0);
	H(addr, addr + 1, -EMSGSIZE, -EMSGSIZE);
	H(nc, 0, 0, 0);
	H(nc, ents, 0, 0);
	H(nc, ents + 1, -EMSGSIZE, -EMSGSIZE);
	H(cname, name, 0, 0);
	H(cname, name + 1, -EMSGSIZE, -EMSGSIZE);
	H(cname, 0, -EPROTO, -EINVAL);
	H(cdom, desc, 0, 0);
	H(cdom, desc + 1, -EMSGSIZE, -EMSGSIZE);
	H(src, TPU_DEVICE_CUDA, 0, 0);
	H(src, TPU_DEVICE_CUDA + 1, -EPROTO, -EINVAL);
	H(dst, TPU_DEVICE_CUDA, 0, 0);
	H(dst, TPU_DEVICE_CUDA + 1, -EPROTO, -EINVAL);
	H(dst, UINT32_MAX, -EPROTO, -EINVAL);
	hs = (struct hspec){ ents, name, desc, addr, ents, name, 1, 1, desc };
	hello_limit("hello_everything_at_its_limit", hs, 0, 0);
#undef H

#define W(field, v, dec, enc) (ws = w0, ws.field = (v), \
			       welcome_limit("welcome_" #field "_" #v, ws, dec, enc))
	W(status, -1, 0, 0);
	W(status, -TPU_ERRNO_MAX, 0, 0);
	W(status, -TPU_ERRNO_MAX - 1, -EPROTO, -EINVAL);
	W(status, 1, -EPROTO, -EINVAL);
	W(status, INT32_MIN, -EPROTO, -EINVAL);
	W(status, INT32_MAX, -EPROTO, -EINVAL);
	W(name, name, 0, 0);
	W(name, name + 1, -EMSGSIZE, -EMSGSIZE);
	W(name, 0, -EPROTO, -EINVAL);
	W(dom, desc, 0, 0);
	W(dom, desc + 1, -EMSGSIZE, -EMSGSIZE);
	W(addr, 0, 0, 0);
	W(addr, addr, 0, 0);
	W(addr, addr + 1, -EMSGSIZE, -EMSGSIZE);
	W(nc, ents, 0, 0);
	W(nc, ents + 1, -EMSGSIZE, -EMSGSIZE);
	W(cname, name, 0, 0);
	W(cname, name + 1, -EMSGSIZE, -EMSGSIZE);
	W(cname, 0, -EPROTO, -EINVAL);
	/* WELCOME's channel entries carry no descriptor. */
	W(cdom, 1, -EPROTO, -EINVAL);
	W(src, TPU_DEVICE_CUDA + 1, -EPROTO, -EINVAL);
	W(dst, TPU_DEVICE_CUDA + 1, -EPROTO, -EINVAL);
	W(lanes, TPU__WIRE_LANES_MAX, 0, 0);
	W(lanes, TPU__WIRE_LANES_MAX + 1, -EMSGSIZE, -EMSGSIZE);
	W(lanes, UINT32_MAX, -EMSGSIZE, -EMSGSIZE);
#undef W

#define M(field, v, dec, enc) (ms = m0, ms.field = (v), msg_limit("msg_" #field "_" #v, ms, \
								  dec, enc))
	M(meta, meta, 0, 0);
	M(meta, meta + 1, -EMSGSIZE, -EMSGSIZE);
	M(np, 0, 0, 0);
	M(np, TPU__WIRE_PAYLOADS_MAX, 0, 0);
	M(np, TPU__WIRE_PAYLOADS_MAX + 1, -EMSGSIZE, -EMSGSIZE);
	M(nt, 0, 0, 0);
	M(nt, TPU__WIRE_TENSORS_MAX, 0, 0);
	M(nt, TPU__WIRE_TENSORS_MAX + 1, -EMSGSIZE, -EMSGSIZE);
	M(plen, len, 0, 0);
	M(plen, len + 1, -EMSGSIZE, -EMSGSIZE);
	M(plen, UINT64_MAX, -EMSGSIZE, -EMSGSIZE);
	M(pmeta, meta, 0, 0);
	M(pmeta, meta + 1, -EMSGSIZE, -EMSGSIZE);
	M(tlen, len, 0, 0);
	M(tlen, len + 1, -EMSGSIZE, -EMSGSIZE);
	M(tmeta, meta, 0, 0);
	M(tmeta, meta + 1, -EMSGSIZE, -EMSGSIZE);
	M(cdesc, cdesc, 0, 0);
	M(cdesc, cdesc + 1, -EMSGSIZE, -EMSGSIZE);
	M(src, TPU_DEVICE_CUDA, 0, 0);
	M(src, TPU_DEVICE_CUDA + 1, -EPROTO, -EINVAL);
	M(dst, TPU_DEVICE_CUDA + 1, -EPROTO, -EINVAL);
	M(chan, 0, 0, 0);
	M(chan, ents - 1, 0, 0);
	M(chan, ents, -EPROTO, -EINVAL);
	M(chan, INLINE - 1, -EPROTO, -EINVAL);
#undef M

	ack_limit("ack_tensor_max", TPU__WIRE_TENSORS_MAX - 1, 0, 0, 0);
	ack_limit("ack_tensor_over", TPU__WIRE_TENSORS_MAX, 0, -EPROTO, -EINVAL);
	ack_limit("ack_status_errno_max", 0, -TPU_ERRNO_MAX, 0, 0);
	ack_limit("ack_status_past_errno_max", 0, -TPU_ERRNO_MAX - 1, -EPROTO, -EINVAL);
	ack_limit("ack_status_positive", 0, 1, -EPROTO, -EINVAL);
}

/* A MSG whose body is exactly TPU__WIRE_BODY_MAX, then one byte more. */
static void body_max(void)
{
	const uint32_t np = 15, pmeta = TPU__WIRE_META_MAX;
	const uint64_t fixed = 8 + 4 + 4 + 4 + (uint64_t)np * (8 + 4 + pmeta);
	struct mspec s = { 0, np, 0, 1, pmeta, 0, 0, 0, 0, 0, 0 };
	uint8_t *big;
	bool same;

	CHECK(fixed < TPU__WIRE_BODY_MAX && TPU__WIRE_BODY_MAX - fixed <= TPU__WIRE_META_MAX,
	      "wire_body_max_case_is_constructible");
	s.meta = (uint32_t)(TPU__WIRE_BODY_MAX - fixed);
	msg_limit("msg_body_exactly_body_max", s, 0, 0);
	s.meta++;
	msg_limit("msg_body_one_past_body_max", s, -EMSGSIZE, -EMSGSIZE);

	/* Any decoder refuses a longer body before looking at it. */
	big = calloc(TPU__WIRE_BODY_MAX + 1, 1);
	if (!big)
		abort();
	CHECK(decode_body(TPU__WIRE_HELLO, big, TPU__WIRE_BODY_MAX + 1, &same) == -EMSGSIZE &&
	      decode_body(TPU__WIRE_WELCOME, big, TPU__WIRE_BODY_MAX + 1, &same) == -EMSGSIZE &&
	      decode_body(TPU__WIRE_JOIN, big, TPU__WIRE_BODY_MAX + 1, &same) == -EMSGSIZE &&
	      decode_body(TPU__WIRE_MSG, big, TPU__WIRE_BODY_MAX + 1, &same) == -EMSGSIZE &&
	      decode_body(TPU__WIRE_ACK, big, TPU__WIRE_BODY_MAX + 1, &same) == -EMSGSIZE,
	      "wire_every_decoder_refuses_a_body_over_body_max");
	free(big);
}

/* ------------------------------------------------------------------ */
/* Lying counts and other hostile bodies                               */
/* ------------------------------------------------------------------ */

static void lying_counts(void)
{
	struct tpu__wire_msg m = { 0 };
	uint32_t np = 7, nt = 7;
	struct bb b = { 0 };
	bool same;

	/* HELLO claiming 4G transports in 8 bytes. */
	bb_u32(&b, 1);
	bb_u32(&b, UINT32_MAX);
	bb_u32(&b, 0);
	CHECK_STATUS(decode_copy(TPU__WIRE_HELLO, b.p, b.n, &same), -EPROTO,
		     "wire_hello_huge_xport_count_short_body");
	bb_free(&b);
	bb_u32(&b, 1);
	bb_u32(&b, 0);
	bb_u32(&b, 0x40000000);
	CHECK_STATUS(decode_copy(TPU__WIRE_HELLO, b.p, b.n, &same), -EPROTO,
		     "wire_hello_huge_chan_count_short_body");
	bb_free(&b);

	/* MSG claiming 4G payloads and tensors: counts() refuses, decode() never writes. */
	bb_u64(&b, 0);
	bb_blob(&b, 0);
	bb_u32(&b, UINT32_MAX);
	bb_u32(&b, UINT32_MAX);
	CHECK(tpu__wire_msg_counts(b.p, b.n, &np, &nt) == -EPROTO && np == 0 && nt == 0,
	      "wire_msg_huge_counts_short_body_refused_by_counts");
	CHECK_STATUS(tpu__wire_msg_decode(b.p, b.n, &m), -EPROTO,
		     "wire_msg_huge_counts_refused_by_decode_before_touching_arrays");
	CHECK(cap_agrees(b.p, b.n, -EPROTO, 0, 0),
	      "wire_msg_huge_counts_refused_by_decode_cap_within_its_arrays");
	bb_free(&b);

	/* Three well-formed payloads for arrays of two: -ENOSPC and the counts. */
	bb_u64(&b, 5);
	bb_blob(&b, 0);
	bb_u32(&b, 3);
	bb_u32(&b, 0);
	for (int k = 0; k < 3; k++) {
		bb_u64(&b, 1);
		bb_blob(&b, 0);
	}
	{
		struct tpu__wire_payload two[CAP + 1];
		struct tpu__wire_msg c = { .payloads = two };

		memset(two, 0xa5, sizeof(two));
		CHECK(tpu__wire_msg_decode_cap(b.p, b.n, &c, CAP, 0) == -ENOSPC &&
		      c.npayloads == 3 && c.ntensors == 0 && two[CAP].len == 0xa5a5a5a5a5a5a5a5ull,
		      "wire_msg_decode_cap_more_entries_than_room_is_enospc_with_counts");
		CHECK(cap_agrees(b.p, b.n, 0, 3, 0), "wire_msg_decode_cap_agrees_on_enospc");
		CHECK_STATUS(tpu__wire_msg_decode_cap(b.p, b.n, &(struct tpu__wire_msg){ 0 }, 1, 0),
			     -EINVAL, "wire_msg_decode_cap_without_arrays_is_einval");
	}
	bb_free(&b);

	/* Counts each within reach of the bytes, but not both together. */
	bb_u64(&b, 0);
	bb_blob(&b, 0);
	bb_u32(&b, 2);
	bb_u32(&b, 1);
	bb_put(&b, fill, 2 * 12 + 36 - 12);
	CHECK_STATUS(tpu__wire_msg_counts(b.p, b.n, &np, &nt), -EPROTO,
		     "wire_msg_counts_bounded_together_by_the_body");
	bb_free(&b);

	/* A count over its limit, with bytes enough to be believed, is a size error. */
	bb_u64(&b, 0);
	bb_blob(&b, 0);
	bb_u32(&b, 0);
	bb_u32(&b, TPU__WIRE_TENSORS_MAX + 1);
	bb_put(&b, fill, (TPU__WIRE_TENSORS_MAX + 1) * 36);
	CHECK_STATUS(tpu__wire_msg_counts(b.p, b.n, &np, &nt), -EMSGSIZE,
		     "wire_msg_tensor_count_over_limit_with_bytes_is_emsgsize");
	bb_free(&b);

	/* A blob length past the end of the body. */
	bb_u64(&b, 0);
	bb_u32(&b, 100);
	bb_put(&b, fill, 50);
	CHECK_STATUS(tpu__wire_msg_counts(b.p, b.n, &np, &nt), -EPROTO,
		     "wire_msg_blob_longer_than_the_body");
	bb_free(&b);
	bb_u64(&b, 0);
	bb_u32(&b, UINT32_MAX);
	CHECK_STATUS(tpu__wire_msg_counts(b.p, b.n, &np, &nt), -EPROTO,
		     "wire_msg_blob_length_u32_max");
	bb_free(&b);

	/* decode() with no arrays for a message that has entries. */
	bb_u64(&b, 0);
	bb_blob(&b, 0);
	bb_u32(&b, 1);
	bb_u32(&b, 0);
	bb_u64(&b, 1);
	bb_blob(&b, 0);
	CHECK_STATUS(tpu__wire_msg_decode(b.p, b.n, &m), -EINVAL,
		     "wire_msg_decode_without_arrays_is_einval");
	bb_free(&b);

	/* Empty and NULL bodies. */
	CHECK(decode_body(TPU__WIRE_HELLO, NULL, 0, &same) == -EPROTO &&
	      decode_body(TPU__WIRE_WELCOME, NULL, 0, &same) == -EPROTO &&
	      decode_body(TPU__WIRE_JOIN, NULL, 0, &same) == -EPROTO &&
	      decode_body(TPU__WIRE_MSG, NULL, 0, &same) == -EPROTO &&
	      decode_body(TPU__WIRE_ACK, NULL, 0, &same) == -EPROTO,
	      "wire_every_decoder_refuses_an_empty_body");

	/* An error WELCOME with anything after its status. */
	bb_u32(&b, (uint32_t)-ENOPROTOOPT);
	bb_u32(&b, 0);
	CHECK_STATUS(decode_copy(TPU__WIRE_WELCOME, b.p, b.n, &same), -EPROTO,
		     "wire_welcome_error_with_more_body_is_eproto");
	bb_free(&b);
}

static void encoder_refusals(void)
{
	struct tpu__wire_hello h = { .nxports = 1 };
	struct tpu__wire_msg m = { .npayloads = 1 };
	struct tpu__wire_tensor t = { .channel = INLINE };
	uint8_t buf[256];

	/* A blob claiming bytes it does not point to. */
	h.xports[0] = (struct tpu__wire_xport_entry){ blob_s("tcp"), { NULL, 3 }, blob_s("") };
	CHECK_STATUS((int)tpu__wire_hello_encode(buf, sizeof(buf), &h), -EINVAL,
		     "wire_encode_blob_null_data_with_length_is_einval");
	CHECK_STATUS((int)tpu__wire_msg_encode(buf, sizeof(buf), &m), -EINVAL,
		     "wire_encode_msg_null_payloads_is_einval");
	m = (struct tpu__wire_msg){ .ntensors = 1 };
	CHECK_STATUS((int)tpu__wire_msg_encode(NULL, 0, &m), -EINVAL,
		     "wire_measure_msg_null_tensors_is_einval");
	m.tensors = &t;
	CHECK(tpu__wire_msg_encode(NULL, 0, &m) == HDR + 8 + 4 + 8 + 36,
	      "wire_measure_without_buffer_ignores_size");
	CHECK(tpu__wire_msg_encode(NULL, 3, &m) == HDR + 8 + 4 + 8 + 36,
	      "wire_measure_with_null_buffer_and_a_size");
	/* One byte short: refused before any byte is written. */
	memset(buf, 0xa5, sizeof(buf));
	CHECK(tpu__wire_msg_encode(buf, HDR + 8 + 4 + 8 + 36 - 1, &m) == -EMSGSIZE &&
	      buf[0] == 0xa5 && buf[HDR + 8 + 4 + 8 + 36 - 2] == 0xa5,
	      "wire_encode_msg_one_byte_short_is_emsgsize_and_writes_nothing");
	/* The exact size: the layout of pipe_wire.h, field by field, little-endian. */
	m.seq = 0x0102030405060708ull;
	t = (struct tpu__wire_tensor){ .len = 9, .src_type = 1, .src_index = 2, .dst_type = 0,
				       .dst_index = 3, .channel = INLINE, .meta = blob_s("ab") };
	{
		static const uint8_t body[] = {
			8, 7, 6, 5, 4, 3, 2, 1,		/* seq */
			0, 0, 0, 0,			/* metadata: empty */
			0, 0, 0, 0, 1, 0, 0, 0,		/* 0 payloads, 1 tensor */
			9, 0, 0, 0, 0, 0, 0, 0,		/* len */
			1, 0, 0, 0, 2, 0, 0, 0,		/* src type, index */
			0, 0, 0, 0, 3, 0, 0, 0,		/* dst type, index */
			0xff, 0xff, 0xff, 0xff,		/* channel: inline */
			2, 0, 0, 0, 'a', 'b',		/* metadata */
			0, 0, 0, 0,			/* channel descriptor: none */
		};
		long n = tpu__wire_msg_encode(buf, sizeof(buf), &m);

		CHECK(n == (long)(HDR + sizeof(body)) && !memcmp(buf + HDR, body, sizeof(body)) &&
		      buf[8] == sizeof(body) && buf[9] == 0 && buf[4] == TPU__WIRE_MSG,
		      "wire_encode_msg_writes_the_documented_layout");
	}
}

static void blob_str(void)
{
	char buf[8];

	CHECK(tpu__wire_blob_str(blob_s("tcp"), buf, sizeof(buf)) == 0 && !strcmp(buf, "tcp"),
	      "wire_blob_str_copies_and_terminates");
	CHECK(tpu__wire_blob_str(blob_s("1234567"), buf, sizeof(buf)) == 0 &&
	      !strcmp(buf, "1234567"), "wire_blob_str_exactly_fits");
	CHECK_STATUS(tpu__wire_blob_str(blob_s("12345678"), buf, sizeof(buf)), -ENAMETOOLONG,
		     "wire_blob_str_one_too_long");
	CHECK(buf[0] == '\0', "wire_blob_str_leaves_an_empty_string_on_error");
	CHECK(tpu__wire_blob_str(blob_s(""), buf, 1) == 0 && buf[0] == '\0',
	      "wire_blob_str_empty_blob");
	CHECK_STATUS(tpu__wire_blob_str(blob_s(""), NULL, 0), -ENAMETOOLONG,
		     "wire_blob_str_no_room_for_the_nul");
	CHECK_STATUS(tpu__wire_blob_str((struct tpu__wire_blob){ (const uint8_t *)"a\0b", 3 },
					buf, sizeof(buf)), -EINVAL,
		     "wire_blob_str_refuses_an_embedded_nul");
}

/* ------------------------------------------------------------------ */
/* Random valid frames and random garbage                              */
/* ------------------------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static uint32_t rnd_below(uint32_t n)
{
	return (uint32_t)(rnd() % n);
}

static struct tpu__wire_blob rnd_blob(uint32_t min, uint32_t max)
{
	return (struct tpu__wire_blob){ fill + rnd_below(64), min + rnd_below(max - min + 1) };
}

static void random_frames(void)
{
	static struct tpu__wire_tensor t[TPU__WIRE_TENSORS_MAX];
	struct tpu__wire_payload p[TPU__WIRE_PAYLOADS_MAX];
	struct tpu__wire_hello h;
	struct tpu__wire_msg m;
	static uint8_t frame[1 << 17];
	unsigned int i, k, bad = 0, garbage_bad = 0, garbage_ok = 0;
	uint8_t junk[96];
	uint32_t j;
	bool same;
	long n;

	for (i = 0; i < 300; i++) {
		h = (struct tpu__wire_hello){ .version = (uint32_t)rnd(),
					      .nxports = rnd_below(TPU__WIRE_ENTRIES_MAX + 1),
					      .nchans = rnd_below(TPU__WIRE_ENTRIES_MAX + 1) };
		for (j = 0; j < h.nxports; j++)
			h.xports[j] = (struct tpu__wire_xport_entry){ rnd_blob(1, 32),
				rnd_blob(0, 256), rnd_blob(0, 256) };
		for (j = 0; j < h.nchans; j++)
			h.chans[j] = (struct tpu__wire_chan_entry){ rnd_blob(1, 32), rnd_below(2),
				rnd_below(2), rnd_blob(0, 256) };
		n = tpu__wire_hello_encode(frame, sizeof(frame), &h);
		if (n < HDR || decode_body(TPU__WIRE_HELLO, frame + HDR, n - HDR, &same) || !same)
			bad++;

		m = (struct tpu__wire_msg){ .seq = rnd(), .meta = rnd_blob(0, 300),
					    .npayloads = rnd_below(TPU__WIRE_PAYLOADS_MAX + 1),
					    .ntensors = rnd_below(100), .payloads = p,
					    .tensors = t };
		for (j = 0; j < m.npayloads; j++)
			p[j] = (struct tpu__wire_payload){ rnd() % (TPU__WIRE_LEN_MAX + 1),
							   rnd_blob(0, 100) };
		for (j = 0; j < m.ntensors; j++)
			t[j] = (struct tpu__wire_tensor){
				rnd() >> 24, rnd_below(2), (uint32_t)rnd(), rnd_below(2),
				(uint32_t)rnd(),
				rnd_below(3) ? rnd_below(TPU__WIRE_ENTRIES_MAX) : INLINE,
				rnd_blob(0, 64), rnd_blob(0, 256) };
		n = tpu__wire_msg_encode(frame, sizeof(frame), &m);
		if (n < HDR || decode_body(TPU__WIRE_MSG, frame + HDR, n - HDR, &same) || !same)
			bad++;
	}
	CHECK(!bad, "wire_random_valid_hellos_and_msgs_round_trip_byte_for_byte");

	/* Small garbage, mostly small integers so that counts and lengths are believable. */
	for (i = 0; i < 20000; i++) {
		size_t len = rnd_below(sizeof(junk) + 1);
		uint16_t type = (uint16_t)(TPU__WIRE_HELLO + rnd_below(5));
		tpu_status st;

		for (k = 0; k < len; k++)
			junk[k] = rnd_below(4) ? (uint8_t)rnd_below(3) : (uint8_t)rnd();
		st = decode_copy(type, junk, len, &same);
		if (st == 0)
			garbage_ok++;
		if ((st == 0 && !same) || (st && st != -EPROTO && st != -EMSGSIZE))
			garbage_bad++;
	}
	CHECK(!garbage_bad, "wire_random_garbage_is_refused_or_decodes_canonically (%u decoded)",
	      garbage_ok);
}

void test_pipe_wire(void)
{
	memset(fill, 'f', sizeof(fill));
	header();
	known_bytes();
	round_trips();
	limits();
	body_max();
	lying_counts();
	encoder_refusals();
	blob_str();
	random_frames();
}
