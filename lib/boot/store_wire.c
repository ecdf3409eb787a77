// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The store's frames, little endian whatever the host, and the limits a
 * request header must meet before the server allocates anything for it.
 */
#include <string.h>

#include "boot.h"



void tpu__store_wire_req_put(const struct store_req *r, uint8_t hdr[STORE_REQ_HDR])
{
	memset(hdr, 0, STORE_REQ_HDR);
	hdr[0] = (uint8_t)r->op;
	tpu__put_le32(hdr + 4, r->key_len);
	tpu__put_le32(hdr + 8, r->val_len);
	tpu__put_le32(hdr + 12, r->arg);
}

tpu_status tpu__store_wire_req_get(const uint8_t hdr[STORE_REQ_HDR], struct store_req *r)
{
	r->op = (enum store_op)hdr[0];
	r->key_len = tpu__get_le32(hdr + 4);
	r->val_len = tpu__get_le32(hdr + 8);
	r->arg = tpu__get_le32(hdr + 12);
	/* Reserved bytes stay zero, so that they can carry something later. */
	if (hdr[1] || hdr[2] || hdr[3])
		return -EPROTO;
	if (r->key_len < 1 || r->key_len > STORE_KEY_MAX || r->val_len > STORE_VALUE_MAX)
		return -EPROTO;
	switch (r->op) {
	case STORE_SET:
		return r->arg ? -EPROTO : 0;
	case STORE_GET:
		return r->val_len || r->arg > STORE_GET_MAX_MS ? -EPROTO : 0;
	case STORE_ADD:
		return r->val_len != 8 || r->arg ? -EPROTO : 0;
	case STORE_AUTH:
		return r->key_len != STORE_AUTH_LEN || r->val_len || (r->arg != 1 && r->arg != 2)
		       ? -EPROTO : 0;
	}
	return -EPROTO;
}

void tpu__store_wire_reply_put(tpu_status status, uint32_t val_len, uint8_t hdr[STORE_REPLY_HDR])
{
	tpu__put_le32(hdr, (uint32_t)status);
	tpu__put_le32(hdr + 4, val_len);
}

tpu_status tpu__store_wire_reply_get(const uint8_t hdr[STORE_REPLY_HDR], tpu_status *status,
				uint32_t *val_len)
{
	*status = (tpu_status)tpu__get_le32(hdr);
	*val_len = tpu__get_le32(hdr + 4);
	return *val_len > STORE_VALUE_MAX || *status > 0 ? -EPROTO : 0;
}

void tpu__store_wire_put_i64(int64_t v, uint8_t out[8])
{
	tpu__put_le32(out, (uint32_t)((uint64_t)v & 0xffffffffu));
	tpu__put_le32(out + 4, (uint32_t)((uint64_t)v >> 32));
}

int64_t tpu__store_wire_get_i64(const uint8_t in[8])
{
	return (int64_t)((uint64_t)tpu__get_le32(in) | (uint64_t)tpu__get_le32(in + 4) << 32);
}
