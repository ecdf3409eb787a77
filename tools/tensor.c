// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include <string.h>

#include "tensor.h"

void tensor_fill(void *buf, size_t len, uint32_t seed)
{
	size_t n = len / sizeof(float), i;
	float *f = buf;

	for (i = 0; i < n; i++)
		f[i] = (float)((i * 2654435761u + seed) % 100003u) * 0.25f - 1000.0f;
	memset((char *)buf + n * sizeof(float), (int)(seed & 0xff), len - n * sizeof(float));
}

/*
 * Word-at-a-time multiply-xor: fast enough to check 256 MiB in a benchmark,
 * position-dependent so that swapped words are caught too.
 */
uint64_t tensor_checksum(const void *buf, size_t len)
{
	const unsigned char *p = buf;
	uint64_t h = 0xcbf29ce484222325ull ^ len;
	size_t i;

	for (i = 0; i + 8 <= len; i += 8) {
		uint64_t w;

		memcpy(&w, p + i, 8);
		h = (h ^ w) * 0x100000001b3ull;
		h ^= h >> 29;
	}
	for (; i < len; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}
