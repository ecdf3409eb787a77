/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Little-endian integers at any alignment in a byte buffer: every wire
 * format of the library (pipe frames, the store, the remote rendezvous,
 * agents and their blobs) is little-endian on the wire whatever the host.
 */
#ifndef TPU_BASE_LE_BYTES_H
#define TPU_BASE_LE_BYTES_H

#include <stdint.h>

static inline void tpu__put_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void tpu__put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void tpu__put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t tpu__get_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t tpu__get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t tpu__get_le64(const uint8_t *p)
{
	return (uint64_t)tpu__get_le32(p) | (uint64_t)tpu__get_le32(p + 4) << 32;
}

#endif
