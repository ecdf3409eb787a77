// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * libFuzzer target for the pipe wire format (lib/pipe/pipe_wire.c).
 *
 * Input: one selector byte, then the bytes under test.
 *   selector % 7 == 0	a whole frame: header, then (if the header decodes
 *			and the rest is exactly its len) the body of its type
 *   1 .. 5		a body of that TPU__WIRE_* type
 *   6			tpu__wire_blob_str() of the rest, into a buffer of
 *			the next byte's value
 *
 * Whatever decodes must lie inside its body, encode again to exactly the
 * same bytes (the encoding is canonical), and decode from those to the
 * same values; an encoder given one byte too little must say -EMSGSIZE
 * without writing past it.  Any mismatch aborts.  Inputs are copied to
 * exact-size allocations so ASan sees any read past the end.
 *
 * With -DFUZZ_REPLAY it is a plain program instead: each argument (a file,
 * or a directory of files) is run through LLVMFuzzerTestOneInput, e.g.
 * under valgrind.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipe_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define HDR TPU__WIRE_HDR_LEN

static void fail(const char *what)
{
	fprintf(stderr, "fuzz_pipe_wire: %s\n", what);
	abort();
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p)
		fail("out of memory");
	return p;
}

/* The decoded structure of any type. */
union frame {
	struct tpu__wire_hello hello;
	struct tpu__wire_welcome welcome;
	struct tpu__wire_join join;
	struct tpu__wire_msg msg;
	struct tpu__wire_ack ack;
};

static const uint8_t *lo, *hi;	/* the body being decoded */

static void inside(struct tpu__wire_blob b)
{
	if (b.len && (!b.data || b.data < lo || b.data > hi || (size_t)(hi - b.data) < b.len))
		fail("decoded blob outside the body");
}

static bool blob_eq(struct tpu__wire_blob a, struct tpu__wire_blob b)
{
	return a.len == b.len && (!a.len || !memcmp(a.data, b.data, a.len));
}

static bool xport_eq(const struct tpu__wire_xport_entry *a, const struct tpu__wire_xport_entry *b)
{
	inside(a->name);
	inside(a->compat);
	inside(a->addr);
	return blob_eq(a->name, b->name) && blob_eq(a->compat, b->compat) &&
	       blob_eq(a->addr, b->addr);
}

static bool chan_eq(const struct tpu__wire_chan_entry *a, const struct tpu__wire_chan_entry *b)
{
	inside(a->name);
	inside(a->compat);
	return blob_eq(a->name, b->name) && a->src_type == b->src_type &&
	       a->dst_type == b->dst_type && blob_eq(a->compat, b->compat);
}

/* a was decoded from the input (its blobs are checked to lie inside it); b from a's encoding. */
static bool frame_eq(uint16_t type, const union frame *a, const union frame *b)
{
	uint32_t i;

	switch (type) {
	case TPU__WIRE_HELLO:
		if (a->hello.version != b->hello.version || a->hello.nxports != b->hello.nxports ||
		    a->hello.nchans != b->hello.nchans)
			return false;
		for (i = 0; i < a->hello.nxports; i++)
			if (!xport_eq(&a->hello.xports[i], &b->hello.xports[i]))
				return false;
		for (i = 0; i < a->hello.nchans; i++)
			if (!chan_eq(&a->hello.chans[i], &b->hello.chans[i]))
				return false;
		return true;
	case TPU__WIRE_WELCOME:
		if (a->welcome.status != b->welcome.status)
			return false;
		if (a->welcome.status)
			return true;
		if (!xport_eq(&a->welcome.xport, &b->welcome.xport) ||
		    a->welcome.token != b->welcome.token || a->welcome.lanes != b->welcome.lanes ||
		    a->welcome.nchans != b->welcome.nchans)
			return false;
		for (i = 0; i < a->welcome.nchans; i++)
			if (!chan_eq(&a->welcome.chans[i], &b->welcome.chans[i]))
				return false;
		return true;
	case TPU__WIRE_JOIN:
		return a->join.token == b->join.token && a->join.lane == b->join.lane;
	case TPU__WIRE_ACK:
		return a->ack.seq == b->ack.seq && a->ack.tensor == b->ack.tensor &&
		       a->ack.status == b->ack.status;
	case TPU__WIRE_MSG:
		inside(a->msg.meta);
		if (a->msg.seq != b->msg.seq || !blob_eq(a->msg.meta, b->msg.meta) ||
		    a->msg.npayloads != b->msg.npayloads || a->msg.ntensors != b->msg.ntensors)
			return false;
		for (i = 0; i < a->msg.npayloads; i++) {
			const struct tpu__wire_payload *x = &a->msg.payloads[i];
			const struct tpu__wire_payload *y = &b->msg.payloads[i];

			inside(x->meta);
			if (x->len != y->len || !blob_eq(x->meta, y->meta))
				return false;
		}
		for (i = 0; i < a->msg.ntensors; i++) {
			const struct tpu__wire_tensor *x = &a->msg.tensors[i];
			const struct tpu__wire_tensor *y = &b->msg.tensors[i];

			inside(x->meta);
			inside(x->chan_desc);
			if (x->len != y->len || x->src_type != y->src_type ||
			    x->src_index != y->src_index || x->dst_type != y->dst_type ||
			    x->dst_index != y->dst_index || x->channel != y->channel ||
			    !blob_eq(x->meta, y->meta) || !blob_eq(x->chan_desc, y->chan_desc))
				return false;
		}
		return true;
	}
	return false;
}

/* Decode a body; a MSG gets arrays of exactly the counts (free with release()). */
static tpu_status decode(uint16_t type, const uint8_t *body, size_t len, union frame *f)
{
	uint32_t np = 0, nt = 0;
	tpu_status st;

	switch (type) {
	case TPU__WIRE_HELLO:
		return tpu__wire_hello_decode(body, len, &f->hello);
	case TPU__WIRE_WELCOME:
		return tpu__wire_welcome_decode(body, len, &f->welcome);
	case TPU__WIRE_JOIN:
		return tpu__wire_join_decode(body, len, &f->join);
	case TPU__WIRE_ACK:
		return tpu__wire_ack_decode(body, len, &f->ack);
	case TPU__WIRE_MSG:
		memset(&f->msg, 0, sizeof(f->msg));
		st = tpu__wire_msg_counts(body, len, &np, &nt);
		if (st) {
			if (np || nt)
				fail("msg_counts failed but returned counts");
			/* decode() must refuse it too, before touching its (absent) arrays. */
			if (tpu__wire_msg_decode(body, len, &f->msg) != st)
				fail("msg_decode disagrees with msg_counts");
			return st;
		}
		if (np > TPU__WIRE_PAYLOADS_MAX || nt > TPU__WIRE_TENSORS_MAX)
			fail("msg_counts over the limits");
		/* Exact sizes, so that ASan catches decode() writing past them. */
		f->msg.payloads = np ? xmalloc(np * sizeof(*f->msg.payloads)) : NULL;
		f->msg.tensors = nt ? xmalloc(nt * sizeof(*f->msg.tensors)) : NULL;
		st = tpu__wire_msg_decode(body, len, &f->msg);
		if (st)
			fail("msg_decode refused what msg_counts accepted");
		if (f->msg.npayloads != np || f->msg.ntensors != nt)
			fail("msg_decode counts differ from msg_counts");
		return 0;
	}
	return -EINVAL;
}

static void release(uint16_t type, union frame *f)
{
	if (type == TPU__WIRE_MSG) {
		free(f->msg.payloads);
		free(f->msg.tensors);
	}
}

static long encode(uint16_t type, uint8_t *buf, size_t size, const union frame *f)
{
	switch (type) {
	case TPU__WIRE_HELLO:
		return tpu__wire_hello_encode(buf, size, &f->hello);
	case TPU__WIRE_WELCOME:
		return tpu__wire_welcome_encode(buf, size, &f->welcome);
	case TPU__WIRE_JOIN:
		return tpu__wire_join_encode(buf, size, &f->join);
	case TPU__WIRE_MSG:
		return tpu__wire_msg_encode(buf, size, &f->msg);
	case TPU__WIRE_ACK:
		return tpu__wire_ack_encode(buf, size, &f->ack);
	}
	return -EINVAL;
}

static void body(uint16_t type, const uint8_t *data, size_t len)
{
	union frame *a = xmalloc(sizeof(*a)), *b = xmalloc(sizeof(*b));
	uint8_t *in = xmalloc(len), *out = NULL;
	struct tpu__wire_hdr hdr;
	tpu_status st;
	long n, m;

	if (len)
		memcpy(in, data, len);
	st = decode(type, in, len, a);
	if (st) {
		if (st != -EPROTO && st != -EMSGSIZE)
			fail("decoder returned neither -EPROTO nor -EMSGSIZE");
		goto done;
	}
	lo = in;
	hi = in + len;

	n = encode(type, NULL, 0, a);
	if (n != (long)(HDR + len))
		fail("decoded frame does not measure as its input");
	/* One byte short, exactly allocated: refused, and nothing written past it. */
	out = xmalloc((size_t)n - 1);
	if (encode(type, out, (size_t)n - 1, a) != -EMSGSIZE)
		fail("encoder accepted a buffer one byte short");
	free(out);
	out = xmalloc((size_t)n);
	m = encode(type, out, (size_t)n, a);
	if (m != n)
		fail("encoder wrote a different length than it measured");
	if (tpu__wire_hdr_decode(out, &hdr) || hdr.type != type || hdr.len != len)
		fail("encoded header does not decode to its type and len");
	if (memcmp(out + HDR, in, len))
		fail("re-encoding differs from the input");

	if (decode(type, out + HDR, len, b))
		fail("re-encoding does not decode");
	if (!frame_eq(type, a, b))
		fail("re-encoding decodes to different values");
	release(type, b);
done:
	release(type, a);
	free(out);
	free(in);
	free(a);
	free(b);
}

static void whole_frame(const uint8_t *data, size_t size)
{
	uint8_t hdr_in[HDR], hdr_out[HDR];
	struct tpu__wire_hdr hdr;
	tpu_status st;

	if (size < HDR)
		return;
	memcpy(hdr_in, data, HDR);
	st = tpu__wire_hdr_decode(hdr_in, &hdr);
	if (st) {
		if (st != -EPROTO && st != -EMSGSIZE)
			fail("header decoder returned neither -EPROTO nor -EMSGSIZE");
		return;
	}
	if (hdr.type < TPU__WIRE_HELLO || hdr.type > TPU__WIRE_AUTH || hdr.len > TPU__WIRE_BODY_MAX)
		fail("header decoder accepted a bad type or len");
	tpu__wire_hdr_encode(hdr_out, hdr.type, hdr.len);
	if (memcmp(hdr_in, hdr_out, HDR))
		fail("header re-encodes differently");
	/* AUTH bodies are fixed-size bytes that pipe_auth.c checks itself: no decoder here. */
	if (size - HDR == hdr.len && hdr.type != TPU__WIRE_AUTH)
		body(hdr.type, data + HDR, hdr.len);
}

static void blob_str(const uint8_t *data, size_t size)
{
	struct tpu__wire_blob b;
	size_t room, i;
	char *buf;
	tpu_status st;

	if (!size)
		return;
	room = data[0];
	b.data = data + 1;
	b.len = (uint32_t)(size - 1);
	buf = room ? xmalloc(room) : NULL;
	st = tpu__wire_blob_str(b, buf, room);
	if (st == 0) {
		if (b.len >= room || buf[b.len] || (b.len && memcmp(buf, b.data, b.len)))
			fail("blob_str copied wrongly");
		for (i = 0; i < b.len; i++)
			if (!b.data[i])
				fail("blob_str accepted an embedded NUL");
	} else if (st == -ENAMETOOLONG) {
		if (b.len < room)
			fail("blob_str refused a blob that fits");
	} else if (st != -EINVAL || !memchr(b.data, 0, b.len)) {
		fail("blob_str returned an unexpected status");
	}
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned int sel;

	if (!size)
		return 0;
	sel = data[0] % 7;
	data++;
	size--;
	if (sel == 0)
		whole_frame(data, size);
	else if (sel == 6)
		blob_str(data, size);
	else if (size <= TPU__WIRE_BODY_MAX + 1)
		body((uint16_t)sel, data, size);
	return 0;
}

#ifdef FUZZ_REPLAY
#include <dirent.h>
#include <sys/stat.h>

static int replay_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *data;
	long size;

	if (!f || fseek(f, 0, SEEK_END) || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
		perror(path);
		if (f)
			fclose(f);
		return 1;
	}
	data = xmalloc((size_t)size);
	if (fread(data, 1, (size_t)size, f) != (size_t)size) {
		perror(path);
		fclose(f);
		free(data);
		return 1;
	}
	fclose(f);
	LLVMFuzzerTestOneInput(data, (size_t)size);
	free(data);
	return 0;
}

int main(int argc, char **argv)
{
	int i, err = 0, runs = 0;

	for (i = 1; i < argc; i++) {
		struct stat st;
		struct dirent *e;
		DIR *d;

		if (stat(argv[i], &st)) {
			perror(argv[i]);
			err = 1;
			continue;
		}
		if (!S_ISDIR(st.st_mode)) {
			err |= replay_file(argv[i]);
			runs++;
			continue;
		}
		d = opendir(argv[i]);
		while (d && (e = readdir(d))) {
			char path[4096];

			if (e->d_name[0] == '.')
				continue;
			snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
			err |= replay_file(path);
			runs++;
		}
		if (d)
			closedir(d);
	}
	printf("fuzz_pipe_wire replay: %d inputs%s\n", runs, err ? ", some unreadable" : "");
	return err;
}
#endif
