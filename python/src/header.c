// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The header that travels with a tensor: dtype, shape, device and length.
 *
 * On a pipe it is the tensor's metadata; on a rendezvous it is sent under
 * a second key beside the tensor's (tpupy_meta_key()), and a tensor of at
 * most TPUPY_INLINE_MAX bytes rides in that same key, after the header,
 * so that a small tensor costs one key.  Layout, little endian as the
 * hosts this library runs on:
 *
 *   0  u32 magic "TPUT"   4 u8 version   5 u8 flags (1: data follows)
 *   6  u8 dtype code      7 u8 bits      8 u16 lanes   10 u8 ndim
 *  11  u8 device type    12 u32 device id
 *  16  u64 nbytes        24 i64 shape[ndim]
 */
#include <errno.h>
#include <string.h>
#include "tpupy.h"

#define HDR_MAGIC	0x54505554u
#define HDR_VERSION	1
#define HDR_FIXED	24

static const struct {
	const char *name;
	uint8_t code, bits;
} dtypes[] = {
	{ "bool", TPUPY_DL_BOOL, 8 },
	{ "int8", kDLInt, 8 },		{ "int16", kDLInt, 16 },
	{ "int32", kDLInt, 32 },	{ "int64", kDLInt, 64 },
	{ "uint8", kDLUInt, 8 },	{ "uint16", kDLUInt, 16 },
	{ "uint32", kDLUInt, 32 },	{ "uint64", kDLUInt, 64 },
	{ "float16", kDLFloat, 16 },	{ "float32", kDLFloat, 32 },
	{ "float64", kDLFloat, 64 },	{ "bfloat16", kDLBfloat, 16 },
	{ "complex64", kDLComplex, 64 }, { "complex128", kDLComplex, 128 },
};

const char *tpupy_dtype_name(DLDataType dt)
{
	if (dt.lanes != 1)
		return NULL;
	for (size_t i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++)
		if (dtypes[i].code == dt.code && dtypes[i].bits == dt.bits)
			return dtypes[i].name;
	return NULL;
}

int tpupy_dtype_parse(const char *name, DLDataType *dt)
{
	for (size_t i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++)
		if (!strcmp(dtypes[i].name, name)) {
			*dt = (DLDataType){ .code = dtypes[i].code, .bits = dtypes[i].bits,
					    .lanes = 1 };
			return 0;
		}
	return -EINVAL;
}

uint64_t tpupy_meta_count(const struct tpupy_meta *m)
{
	uint64_t n = 1;

	for (int i = 0; i < m->ndim; i++)
		n *= (uint64_t)m->shape[i];
	return n;
}

size_t tpupy_hdr_encode(const struct tpupy_meta *m, bool inline_data, void *buf)
{
	unsigned char *p = buf;
	uint32_t magic = HDR_MAGIC, dev_id = (uint32_t)m->device.device_id;
	uint16_t lanes = m->dtype.lanes;

	memcpy(p, &magic, 4);
	p[4] = HDR_VERSION;
	p[5] = inline_data ? 1 : 0;
	p[6] = m->dtype.code;
	p[7] = m->dtype.bits;
	memcpy(p + 8, &lanes, 2);
	p[10] = (unsigned char)m->ndim;
	p[11] = (unsigned char)m->device.device_type;
	memcpy(p + 12, &dev_id, 4);
	memcpy(p + 16, &m->nbytes, 8);
	memcpy(p + HDR_FIXED, m->shape, 8 * (size_t)m->ndim);
	return HDR_FIXED + 8 * (size_t)m->ndim;
}

int tpupy_hdr_decode(const void *buf, size_t len, struct tpupy_meta *m, size_t *hdr_len,
		     bool *inline_data)
{
	const unsigned char *p = buf;
	uint32_t magic, dev_id;
	uint16_t lanes;
	uint64_t count, elem;

	if (len < HDR_FIXED)
		return -EBADMSG;
	memcpy(&magic, p, 4);
	if (magic != HDR_MAGIC || p[4] != HDR_VERSION || p[5] > 1 || p[10] > TPUPY_MAX_DIMS)
		return -EBADMSG;
	memset(m, 0, sizeof(*m));
	m->dtype.code = p[6];
	m->dtype.bits = p[7];
	memcpy(&lanes, p + 8, 2);
	m->dtype.lanes = lanes;
	m->ndim = p[10];
	m->device.device_type = p[11];
	memcpy(&dev_id, p + 12, 4);
	m->device.device_id = (int32_t)dev_id;
	memcpy(&m->nbytes, p + 16, 8);
	if (len < HDR_FIXED + 8 * (size_t)m->ndim)
		return -EBADMSG;
	memcpy(m->shape, p + HDR_FIXED, 8 * (size_t)m->ndim);
	count = 1;
	for (int i = 0; i < m->ndim; i++) {
		if (m->shape[i] < 0)
			return -EBADMSG;
		if (m->shape[i] && count > UINT64_MAX / (uint64_t)m->shape[i])
			return -EBADMSG;
		count *= (uint64_t)m->shape[i];
	}
	elem = (uint64_t)m->dtype.bits * m->dtype.lanes / 8;
	if (!tpupy_dtype_name(m->dtype) || (elem && count > UINT64_MAX / elem) ||
	    count * elem != m->nbytes)
		return -EBADMSG;
	*hdr_len = HDR_FIXED + 8 * (size_t)m->ndim;
	*inline_data = p[5];
	if (*inline_data && len != *hdr_len + m->nbytes)
		return -EBADMSG;
	return 0;
}

#define META_SUFFIX	"/tpu.meta"

int tpupy_meta_key(const char *key, size_t key_len, char *out, size_t size, size_t *out_len)
{
	struct tpu_key k;
	char edge[4200];
	tpu_status st;

	if (!tpu_key_parse((struct tpu_str){ key, key_len }, &k, NULL)) {
		/* A TF key stays one: the remote rendezvous routes by its devices. */
		if (k.edge_name.len + sizeof(META_SUFFIX) > sizeof(edge))
			return -ENAMETOOLONG;
		memcpy(edge, k.edge_name.ptr, k.edge_name.len);
		memcpy(edge + k.edge_name.len, META_SUFFIX, sizeof(META_SUFFIX));
		k.edge_name = tpu_str(edge);
		st = tpu_key_build(&k, out, size, out_len);
		return st == -ENOSPC ? -ENAMETOOLONG : st;
	}
	if (key_len + sizeof(META_SUFFIX) > size)
		return -ENAMETOOLONG;
	memcpy(out, key, key_len);
	memcpy(out + key_len, META_SUFFIX, sizeof(META_SUFFIX));
	*out_len = key_len + sizeof(META_SUFFIX) - 1;
	return 0;
}
