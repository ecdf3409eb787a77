// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The control messages: a fixed header as the pipe message's metadata, and
 * per type the payloads it may carry, checked on the descriptor before any
 * byte of them is read (what a peer can make us allocate is bounded here).
 */
#include <errno.h>
#include <string.h>

#include "xfer.h"

#define HDR_MAGIC	0x46585054U	/* "TPXF" */





void tpu__xfer_hdr_put(const struct xfer_hdr *h, uint8_t buf[XFER_HDR_LEN])
{
	tpu__put_le32(buf, HDR_MAGIC);
	tpu__put_le32(buf + 4, h->type);
	tpu__put_le32(buf + 8, h->flags);
	tpu__put_le32(buf + 12, h->n);
	tpu__put_le64(buf + 16, h->id);
	tpu__put_le64(buf + 24, h->reg);
	tpu__put_le64(buf + 32, h->key);
	tpu__put_le64(buf + 40, h->addr);
	tpu__put_le64(buf + 48, h->len);
	tpu__put_le32(buf + 56, (uint32_t)h->status);
	tpu__put_le32(buf + 60, h->op | h->access << 8);
}

tpu_status tpu__xfer_hdr_get(const void *buf, size_t len, struct xfer_hdr *h)
{
	const uint8_t *b = buf;
	uint32_t w;

	if (len != XFER_HDR_LEN || tpu__get_le32(b) != HDR_MAGIC)
		return -EPROTO;
	h->type = tpu__get_le32(b + 4);
	h->flags = tpu__get_le32(b + 8);
	h->n = tpu__get_le32(b + 12);
	h->id = tpu__get_le64(b + 16);
	h->reg = tpu__get_le64(b + 24);
	h->key = tpu__get_le64(b + 32);
	h->addr = tpu__get_le64(b + 40);
	h->len = tpu__get_le64(b + 48);
	h->status = (int32_t)tpu__get_le32(b + 56);
	w = tpu__get_le32(b + 60);
	h->op = w & 0xff;
	h->access = (w >> 8) & 0xff;
	if (h->type < XFER_HELLO || h->type > XFER_RDMA_ACCEPT || (w >> 16))
		return -EPROTO;
	return 0;
}

/* Payload @i of @desc is at most @max bytes (and exists). */
static bool pl_ok(const struct tpu_message *desc, size_t i, uint64_t max)
{
	return i < desc->npayloads && desc->payloads[i].len <= max;
}

tpu_status tpu__xfer_in_check(struct xfer_peer *p, const struct xfer_hdr *h,
			      const struct tpu_message *desc)
{
	size_t np = desc->npayloads;

	/* Which side may send what: an in peer requests, an out peer answers. */
	switch (h->type) {
	case XFER_HELLO:
		return !p->out && np == 1 && pl_ok(desc, 0, TPU_XFER_NAME_MAX - 1) ? 0 : -EPROTO;
	case XFER_LOAD:
		return !p->out && np == 1 && desc->payloads[0].len == XFER_ID_LEN ? 0 : -EPROTO;
	case XFER_NOTIF:
		return !p->out && np == 1 && pl_ok(desc, 0, TPU_XFER_NOTIF_MAX) ? 0 : -EPROTO;
	case XFER_REVOKE_ACK:
		return !p->out && np == 0 ? 0 : -EPROTO;
	case XFER_RDMA_CONN:		/* its fields are checked by xfer_rdma_dev.c */
		return !p->out && np == 1 && pl_ok(desc, 0, XFER_RDMA_INFO_MAX) ? 0 : -EPROTO;
	case XFER_RDMA_ACCEPT:
		return p->out && np == 1 && pl_ok(desc, 0, XFER_RDMA_INFO_MAX) ? 0 : -EPROTO;
	case XFER_REQ:
		if (p->out || np != 3 || !h->n || h->n > XFER_CHUNK_ELEMS ||
		    desc->payloads[0].len != (uint64_t)h->n * XFER_ELEM_LEN ||
		    !pl_ok(desc, 1, XFER_CHUNK_BYTES) || !pl_ok(desc, 2, TPU_XFER_NOTIF_MAX) ||
		    h->op > TPU_XFER_OP_WRITE || h->len > XFER_CHUNK_BYTES)
			return -EPROTO;
		/* READ carries no data, WRITE exactly what it claims. */
		if (desc->payloads[1].len != (h->op == TPU_XFER_OP_WRITE ? h->len : 0))
			return -EPROTO;
		return 0;
	case XFER_LOAD_ANS:
	case XFER_REVOKE:
		return p->out && np == 0 ? 0 : -EPROTO;
	case XFER_RESP:
		return p->out && np == 1 && pl_ok(desc, 0, XFER_CHUNK_BYTES) ? 0 : -EPROTO;
	}
	return -EPROTO;
}

void tpu__xfer_in_dispatch(struct xfer_peer *p)
{
	const struct xfer_hdr *h = &p->in.h;

	switch (h->type) {
	case XFER_HELLO: {
		size_t n = p->in.pl[0].len, i;

		memcpy(p->name, p->in.pl[0].data, n);
		p->name[n] = 0;
		for (i = 0; i < n; i++)		/* a claim, shown to users: printable only */
			if ((unsigned char)p->name[i] < 0x20 || (unsigned char)p->name[i] > 0x7e)
				p->name[i] = '?';
		break;
	}
	case XFER_LOAD:
		tpu__xfer_serve_load(p);
		break;
	case XFER_NOTIF:
		tpu__xfer_notif_push(p->a, p->name, p->in.pl[0].data, p->in.pl[0].len);
		break;
	case XFER_REVOKE_ACK:
		tpu__xfer_revoke_acked(p, h->reg);
		break;
	case XFER_REQ:
		tpu__xfer_serve(p);
		break;
	case XFER_LOAD_ANS:
		tpu__xfer_load_answered(p, h);
		break;
	case XFER_REVOKE:
		tpu__xfer_revoke(p, h->reg);
		break;
	case XFER_RESP:
		tpu__xfer_tcp_resp(p);
		break;
	case XFER_RDMA_CONN:
		tpu__xfer_rdma_conn(p);
		break;
	case XFER_RDMA_ACCEPT:
		tpu__xfer_rdma_accept(p);
		break;
	}
}
