// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * tpu__copy_stream (lib/copy_stream.c): the same bytes as memcpy for every
 * length around the vector width and every alignment of both ends, and
 * nothing written outside the destination.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "copy_stream.h"
#include "tap.h"

void test_copy_stream(void)
{
	enum { MAX = 4096 + 300, GUARD = 64 };
	uint8_t *src = malloc(MAX + 64), *dst = malloc(MAX + 64 + 2 * GUARD);
	size_t big = 9u << 20;
	uint8_t *bsrc = malloc(big), *bdst = malloc(big + 1);
	bool ok = src && dst, guard = true;

	for (size_t i = 0; ok && i < MAX + 64; i++)
		src[i] = (uint8_t)(i * 131 + 7);
	for (size_t so = 0; ok && so < 16; so += 3) {
		for (size_t d_o = 0; ok && d_o < 16; d_o += 5) {
			for (size_t n = 0; ok && n <= MAX; n += n < 300 ? 1 : 509) {
				uint8_t *d = dst + GUARD + d_o;

				memset(dst, 0xee, MAX + 64 + 2 * GUARD);
				tpu__copy_stream(d, src + so, n);
				ok = !memcmp(d, src + so, n);
				for (size_t g = 0; g < GUARD + d_o; g++)
					guard &= dst[g] == 0xee;
				for (size_t g = 0; g < GUARD; g++)
					guard &= d[n + g] == 0xee;
			}
		}
	}
	CHECK(ok, "copy_stream_copies_every_length_and_alignment");
	CHECK(guard, "copy_stream_writes_nothing_outside_the_destination");
	ok = bsrc && bdst;
	if (ok) {
		for (size_t i = 0; i < big; i++)
			bsrc[i] = (uint8_t)(i ^ (i >> 11));
		tpu__copy_stream(bdst + 1, bsrc, big);
		ok = !memcmp(bdst + 1, bsrc, big);
	}
	CHECK(ok, "copy_stream_copies_9_MiB_to_an_odd_address");
	free(src);
	free(dst);
	free(bsrc);
	free(bdst);
}
