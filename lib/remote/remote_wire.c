// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The remote rendezvous's messages: a fixed little-endian header and the
 * key (or task name) after it, as a pipe message's metadata.  A RESP with
 * status 0 carries the tensor as the message's one tensor.
 */
#include <string.h>

#include "remote.h"

#define WIRE_MAGIC	0x31565254u	/* "TRV1" */
#define WIRE_HDR	36		/* magic, type, status, id, len, key_len */
#define WIRE_HDR_SEQ	44		/* the push protocol's: seq after key_len */

static size_t hdr_size(uint32_t type)
{
	return type >= REMOTE_PUSH ? WIRE_HDR_SEQ : WIRE_HDR;
}

size_t tpu__remote_wire_size_of(enum remote_msg type, size_t key_len)
{
	return hdr_size(type) + key_len;
}

size_t tpu__remote_wire_size(size_t key_len)
{
	return WIRE_HDR + key_len;
}

void tpu__remote_wire_put(const struct remote_hdr *h, uint8_t *buf)
{
	tpu__put_le32(buf, WIRE_MAGIC);
	tpu__put_le32(buf + 4, (uint32_t)h->type);
	tpu__put_le32(buf + 8, (uint32_t)h->status);
	tpu__put_le64(buf + 12, h->id);
	tpu__put_le64(buf + 20, h->len);
	tpu__put_le64(buf + 28, h->key_len);
	if (h->type >= REMOTE_PUSH)
		tpu__put_le64(buf + WIRE_HDR, h->seq);
	if (h->key_len)
		memcpy(buf + hdr_size(h->type), h->key, h->key_len);
}

tpu_status tpu__remote_wire_get(const void *buf, size_t len, struct remote_hdr *h)
{
	const uint8_t *b = buf;
	uint64_t key_len;
	uint32_t type;
	size_t hs;

	if (!buf || len < WIRE_HDR || tpu__get_le32(b) != WIRE_MAGIC)
		return -EPROTO;
	type = tpu__get_le32(b + 4);
	key_len = tpu__get_le64(b + 28);
	if (type < REMOTE_HELLO || type > REMOTE_REQ_SEEN)
		return -EPROTO;
	hs = hdr_size(type);
	if (len < hs || key_len != len - hs || key_len > TPU__KEY_MAX)
		return -EPROTO;
	h->type = (enum remote_msg)type;
	h->status = (tpu_status)tpu__get_le32(b + 8);
	h->id = tpu__get_le64(b + 12);
	h->len = tpu__get_le64(b + 20);
	h->seq = type >= REMOTE_PUSH ? tpu__get_le64(b + WIRE_HDR) : 0;
	h->key = key_len ? b + hs : NULL;
	h->key_len = key_len;
	/* A status from the wire must be one a callback may see. */
	if (h->status > 0 || (h->status < -TPU_ERRNO_MAX && h->status > -10000))
		return -EPROTO;
	return 0;
}
