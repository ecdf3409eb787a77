// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The metadata blob of an exported registration.  Little-endian, fixed
 * fields, two length-prefixed URLs, and the first 8 bytes of a SHA-256 of
 * all that, so that a truncated or damaged blob is told from a stale one.
 * The digest is no authentication: a blob is worth nothing until the
 * agent it names confirms it over an authenticated pipe.
 *
 *   0  "TPUXBLOB"   8  version (le16)   10 access (le16)   12 total (le32)
 *   16 agent id (16)   32 reg   40 key   48 addr   56 len (le64 each)
 *   64 pid (le32)   68 boot id (40)   108 shm URL len (le16) and bytes,
 *   then tcp URL len (le16) and bytes, then the digest (8)
 */
#include <errno.h>
#include <string.h>

#include "xfer.h"

#define BLOB_VERSION	1
#define BLOB_FIXED	108
#define BLOB_DIGEST	8
static const char blob_magic[8] = { 'T', 'P', 'U', 'X', 'B', 'L', 'O', 'B' };



static void digest(const uint8_t *b, size_t n, uint8_t out[BLOB_DIGEST])
{
	uint8_t full[TPU__SHA256_LEN];
	struct tpu__sha256 s;

	tpu__sha256_init(&s);
	tpu__sha256_update(&s, b, n);
	tpu__sha256_final(&s, full);
	memcpy(out, full, BLOB_DIGEST);
}

size_t tpu__xfer_blob_put(const struct xfer_blob *b, uint8_t *buf, size_t size)
{
	size_t ls = strnlen(b->url_shm, XFER_URL_MAX - 1), lt = strnlen(b->url_tcp, XFER_URL_MAX - 1);
	size_t n = BLOB_FIXED + 2 + ls + 2 + lt + BLOB_DIGEST;
	uint8_t *p;

	if (!buf || size < n)
		return n;
	memset(buf, 0, n);
	memcpy(buf, blob_magic, 8);
	tpu__put_le16(buf + 8, BLOB_VERSION);
	tpu__put_le16(buf + 10, (uint16_t)b->access);
	tpu__put_le32(buf + 12, (uint32_t)n);
	memcpy(buf + 16, b->agent, XFER_ID_LEN);
	tpu__put_le64(buf + 32, b->reg);
	tpu__put_le64(buf + 40, b->key);
	tpu__put_le64(buf + 48, b->addr);
	tpu__put_le64(buf + 56, b->len);
	tpu__put_le32(buf + 64, b->pid);
	memcpy(buf + 68, b->boot_id, strnlen(b->boot_id, sizeof(b->boot_id) - 1));
	p = buf + BLOB_FIXED;
	tpu__put_le16(p, (uint16_t)ls);
	memcpy(p + 2, b->url_shm, ls);
	p += 2 + ls;
	tpu__put_le16(p, (uint16_t)lt);
	memcpy(p + 2, b->url_tcp, lt);
	p += 2 + lt;
	digest(buf, (size_t)(p - buf), p);
	return n;
}

/* A URL field: at most XFER_URL_MAX - 1 printable bytes, inside the blob. */
static tpu_status get_url(const uint8_t *buf, size_t end, size_t *off, char out[XFER_URL_MAX])
{
	size_t n, i;

	if (*off + 2 > end)
		return TPU_E_BAD_BLOB;
	n = tpu__get_le16(buf + *off);
	if (n >= XFER_URL_MAX || *off + 2 + n > end)
		return TPU_E_BAD_BLOB;
	for (i = 0; i < n; i++)
		if (buf[*off + 2 + i] < 0x21 || buf[*off + 2 + i] > 0x7e)
			return TPU_E_BAD_BLOB;
	memcpy(out, buf + *off + 2, n);
	out[n] = 0;
	*off += 2 + n;
	return 0;
}

tpu_status tpu__xfer_blob_get(const void *blob, size_t len, struct xfer_blob *b)
{
	const uint8_t *buf = blob;
	uint8_t d[BLOB_DIGEST];
	size_t off = BLOB_FIXED, i;

	memset(b, 0, sizeof(*b));
	if (!buf || len < BLOB_FIXED + 4 + BLOB_DIGEST || len > TPU_XFER_BLOB_MAX ||
	    memcmp(buf, blob_magic, 8))
		return TPU_E_BAD_BLOB;
	if (tpu__get_le16(buf + 8) != BLOB_VERSION || tpu__get_le32(buf + 12) != len)
		return TPU_E_BAD_BLOB;
	digest(buf, len - BLOB_DIGEST, d);
	if (!tpu__ct_equal(d, buf + len - BLOB_DIGEST, BLOB_DIGEST))
		return TPU_E_BAD_BLOB;
	b->access = tpu__get_le16(buf + 10);
	if (!b->access || (b->access & ~(TPU_XFER_READ | TPU_XFER_WRITE)))
		return TPU_E_BAD_BLOB;
	memcpy(b->agent, buf + 16, XFER_ID_LEN);
	b->reg = tpu__get_le64(buf + 32);
	b->key = tpu__get_le64(buf + 40);
	b->addr = tpu__get_le64(buf + 48);
	b->len = tpu__get_le64(buf + 56);
	b->pid = tpu__get_le32(buf + 64);
	memcpy(b->boot_id, buf + 68, sizeof(b->boot_id) - 1);
	for (i = 0; i < sizeof(b->boot_id) - 1 && b->boot_id[i]; i++)
		if (b->boot_id[i] < 0x20 || b->boot_id[i] > 0x7e)
			return TPU_E_BAD_BLOB;
	if (get_url(buf, len - BLOB_DIGEST, &off, b->url_shm) ||
	    get_url(buf, len - BLOB_DIGEST, &off, b->url_tcp) || off != len - BLOB_DIGEST)
		return TPU_E_BAD_BLOB;
	if (!b->url_shm[0] && !b->url_tcp[0])
		return TPU_E_BAD_BLOB;
	if ((b->url_shm[0] && strncmp(b->url_shm, "shm://", 6)) ||
	    (b->url_tcp[0] && strncmp(b->url_tcp, "tcp://", 6)))
		return TPU_E_BAD_BLOB;
	return 0;
}
