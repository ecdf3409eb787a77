/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The pipe wire format: what two pipe ends say to each other over a
 * transport.  Encoding and decoding only (pipe_wire.c); no I/O.  Not
 * installed.
 *
 * Every frame is a 16-byte header followed by len bytes of body:
 *
 *   u32 magic	TPU__WIRE_MAGIC
 *   u16 type	TPU__WIRE_*
 *   u16 flags	0 (reserved: a peer sending anything else is refused)
 *   u32 len	body bytes, at most TPU__WIRE_BODY_MAX
 *   u32 rsvd	0
 *
 * All integers little-endian, no padding, no alignment assumed.  Strings
 * and byte blobs are a u32 length followed by the bytes (no NUL).
 *
 * The decoder takes hostile input: every length is checked against what is
 * left of the body and against the limits below before it is used, counts
 * are bounded before anything is allocated, and a body with bytes left
 * over is refused.  It returns -EPROTO for anything malformed, -EMSGSIZE
 * for a well-formed frame over a limit, and never reads outside the body.
 * Decoded strings and blobs point into the body (no copies): the body must
 * outlive the decoded structure.
 */
#ifndef TPU_PIPE_WIRE_H
#define TPU_PIPE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "tpu_user.h"

#define TPU__WIRE_MAGIC		0x31575054u	/* "TPW1" read as little-endian bytes */
#define TPU__WIRE_HDR_LEN	16
#define TPU__WIRE_VERSION	1

/* Frame types. */
enum {
	TPU__WIRE_HELLO = 1,	/* connector -> listener: what it has */
	TPU__WIRE_WELCOME = 2,	/* listener -> connector: what was chosen */
	TPU__WIRE_JOIN = 3,	/* connector -> listener, on the chosen transport */
	TPU__WIRE_MSG = 4,	/* a message descriptor (inline bytes follow) */
	TPU__WIRE_ACK = 5,	/* the reader is done with a tensor (cma channel) */
	TPU__WIRE_AUTH = 6,	/* either way, before HELLO or JOIN: proving the job secret
				 * (pipe_auth.c; only with a secret) */
};

/* Limits (also in tpu_user.h for users: TPU_PIPE_MAX_*). */
#define TPU__WIRE_BODY_MAX	(1u << 20)	/* one frame body */
#define TPU__WIRE_NAME_MAX	32		/* transport and channel names */
#define TPU__WIRE_DESC_MAX	256		/* compatibility descriptors */
#define TPU__WIRE_ADDR_MAX	256		/* addresses */
#define TPU__WIRE_ENTRIES_MAX	16		/* transports, channels in HELLO/WELCOME */
#define TPU__WIRE_META_MAX	(64u << 10)	/* any one metadata blob */
#define TPU__WIRE_CHAN_DESC_MAX	256		/* a tensor's channel descriptor */
#define TPU__WIRE_PAYLOADS_MAX	TPU_PIPE_MAX_PAYLOADS
#define TPU__WIRE_TENSORS_MAX	TPU_PIPE_MAX_TENSORS
#define TPU__WIRE_LEN_MAX	TPU_PIPE_MAX_LEN	/* one payload or tensor */
#define TPU__WIRE_LANES_MAX	16		/* extra connections of the mtcp channel */
/*
 * Set-up frames (HELLO, WELCOME, JOIN) are small: the largest well-formed
 * HELLO (every entry at its limits) is under 14 KiB.  A listener reads
 * nothing longer before the peer is known, so that a peer that never
 * finishes its frame holds no more than this.
 */
#define TPU__WIRE_SETUP_MAX	(16u << 10)
#define TPU__WIRE_HELLO_MAX	(8u + TPU__WIRE_ENTRIES_MAX * (12u + TPU__WIRE_NAME_MAX + \
			 TPU__WIRE_DESC_MAX + TPU__WIRE_ADDR_MAX) + 4u + \
			 TPU__WIRE_ENTRIES_MAX * (16u + TPU__WIRE_NAME_MAX + TPU__WIRE_DESC_MAX))
_Static_assert(TPU__WIRE_HELLO_MAX <= TPU__WIRE_SETUP_MAX, "a HELLO fits the set-up limit");

struct tpu__wire_hdr {
	uint16_t type;
	uint32_t len;
};

/* A counted view of bytes inside a body (not NUL-terminated). */
struct tpu__wire_blob {
	const uint8_t *data;
	uint32_t len;
};

/* HELLO: protocol version, then what the connector can use. */
struct tpu__wire_xport_entry {
	struct tpu__wire_blob name;	/* "tcp", "shm" */
	struct tpu__wire_blob compat;	/* the transport's compatibility descriptor */
	struct tpu__wire_blob addr;	/* unused in HELLO; WELCOME: where to JOIN */
};

struct tpu__wire_chan_entry {
	struct tpu__wire_blob name;	/* "basic", "cma", "kmod", "mtcp" */
	uint32_t src_type;		/* TPU_DEVICE_*: the writer's device type */
	uint32_t dst_type;		/* the reader's */
	struct tpu__wire_blob compat;	/* the channel's compatibility descriptor */
};

struct tpu__wire_hello {
	uint32_t version;
	uint32_t nxports;
	struct tpu__wire_xport_entry xports[TPU__WIRE_ENTRIES_MAX];
	uint32_t nchans;
	struct tpu__wire_chan_entry chans[TPU__WIRE_ENTRIES_MAX];
};

/*
 * WELCOME: status 0 and the choice, or a negative errno (no common
 * transport: -ENOPROTOOPT) and nothing else meaningful.  When the chosen
 * transport is not the one this connection uses, the connector opens a new
 * connection to xport.addr and sends JOIN with token as its first frame.
 * chans lists the channel chosen per device pair (same entry layout as in
 * HELLO, descriptor empty).  lanes is how many extra tcp connections the mtcp
 * channel stripes tensors over (0 when it was not chosen): the connector
 * opens them to the listener and sends JOIN (token, lane 1..lanes) on each.
 */
struct tpu__wire_welcome {
	int32_t status;
	struct tpu__wire_xport_entry xport;
	uint64_t token;
	uint32_t lanes;			/* <= TPU__WIRE_LANES_MAX */
	uint32_t nchans;
	struct tpu__wire_chan_entry chans[TPU__WIRE_ENTRIES_MAX];
};

/* JOIN: lane 0 is the pipe's own connection, 1..TPU__WIRE_LANES_MAX an mtcp lane. */
struct tpu__wire_join {
	uint64_t token;
	uint32_t lane;
};

/* MSG: one message's descriptor.  Inline bytes follow the frame. */
struct tpu__wire_payload {
	uint64_t len;
	struct tpu__wire_blob meta;
};

struct tpu__wire_tensor {
	uint64_t len;
	uint32_t src_type, src_index;	/* where it lies at the writer */
	uint32_t dst_type, dst_index;	/* where the writer suggests it go */
	uint32_t channel;		/* index into WELCOME's chans (< TPU__WIRE_ENTRIES_MAX),
					 * or TPU__WIRE_INLINE */
	struct tpu__wire_blob meta;
	struct tpu__wire_blob chan_desc;	/* the channel's own words (cma: pid, address) */
};

/* channel value of a tensor sent inline after the descriptor. */
#define TPU__WIRE_INLINE	0xffffffffu

struct tpu__wire_msg {
	uint64_t seq;			/* 0, 1, 2, ... per direction of a pipe */
	struct tpu__wire_blob meta;
	uint32_t npayloads;
	uint32_t ntensors;
	/* Arrays the caller provides, of the counts in the frame (see decode). */
	struct tpu__wire_payload *payloads;
	struct tpu__wire_tensor *tensors;
};

/* ACK: the reader finished tensor index of message seq. */
struct tpu__wire_ack {
	uint64_t seq;
	uint32_t tensor;		/* < TPU__WIRE_TENSORS_MAX */
	int32_t status;			/* 0, or the reader's negative errno */
};

/*
 * Header: encode into 16 bytes; decode checks magic, type (one of the
 * above), flags, rsvd (-EPROTO) and len (-EMSGSIZE).
 */
void tpu__wire_hdr_encode(uint8_t out[TPU__WIRE_HDR_LEN], uint16_t type, uint32_t len);
tpu_status tpu__wire_hdr_decode(const uint8_t in[TPU__WIRE_HDR_LEN], struct tpu__wire_hdr *out);

/*
 * Encoders write a whole frame (header and body) into buf and return its
 * length, or -EMSGSIZE if the frame exceeds size or a limit (buf may then
 * hold garbage), or -EINVAL for a value the decoder would refuse as
 * malformed (empty name, device type, status, channel or tensor index out
 * of range, a WELCOME channel descriptor, NULL data with a length or count).
 * Passing buf NULL (size is then ignored) measures.
 */
long tpu__wire_hello_encode(uint8_t *buf, size_t size, const struct tpu__wire_hello *h);
long tpu__wire_welcome_encode(uint8_t *buf, size_t size, const struct tpu__wire_welcome *w);
long tpu__wire_join_encode(uint8_t *buf, size_t size, const struct tpu__wire_join *j);
long tpu__wire_msg_encode(uint8_t *buf, size_t size, const struct tpu__wire_msg *m);
long tpu__wire_ack_encode(uint8_t *buf, size_t size, const struct tpu__wire_ack *a);

/* Decoders take a body (without its header); on error *out is unspecified. */
tpu_status tpu__wire_hello_decode(const uint8_t *body, size_t len, struct tpu__wire_hello *out);
tpu_status tpu__wire_welcome_decode(const uint8_t *body, size_t len, struct tpu__wire_welcome *out);
tpu_status tpu__wire_join_decode(const uint8_t *body, size_t len, struct tpu__wire_join *out);
tpu_status tpu__wire_ack_decode(const uint8_t *body, size_t len, struct tpu__wire_ack *out);
/*
 * MSG in two steps, so that the arrays are sized from checked counts:
 * counts() validates the whole body and returns npayloads and ntensors;
 * decode() then fills out->payloads and out->tensors, which the caller
 * allocated with those counts (-EINVAL if an array is NULL with a count).
 */
tpu_status tpu__wire_msg_counts(const uint8_t *body, size_t len, uint32_t *npayloads,
				uint32_t *ntensors);
tpu_status tpu__wire_msg_decode(const uint8_t *body, size_t len, struct tpu__wire_msg *out);
/*
 * MSG in one walk, for a caller with arrays of cap_p payloads and cap_t
 * tensors already at hand (a small message): the same checks as decode();
 * -ENOSPC (out->npayloads and out->ntensors then say how many) when the
 * well-formed body holds more entries than fit; the arrays are never
 * written past their capacities.
 */
tpu_status tpu__wire_msg_decode_cap(const uint8_t *body, size_t len, struct tpu__wire_msg *out,
				    uint32_t cap_p, uint32_t cap_t);

/*
 * The blob as a NUL-terminated copy into buf; -ENAMETOOLONG if it does not
 * fit, -EINVAL if it holds a NUL (the string would silently be shorter).
 */
tpu_status tpu__wire_blob_str(struct tpu__wire_blob b, char *buf, size_t size);

#endif /* TPU_PIPE_WIRE_H */
