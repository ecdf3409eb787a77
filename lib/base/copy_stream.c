// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Non-temporal copies (copy_stream.h).  glibc's memcpy streams on its own
 * only for one call larger than most of the last-level cache; a consumer
 * draining a ring into a large buffer calls it a ring's worth at a time
 * and never gets there.
 */
#include <stdint.h>
#include <string.h>

#include "copy_stream.h"

#if defined(__x86_64__)
#include <emmintrin.h>

void tpu__copy_stream(void *dst, const void *src, size_t n)
{
	uint8_t *d = dst;
	const uint8_t *s = src;
	size_t head = (16 - ((uintptr_t)d & 15)) & 15;

	if (n < 256) {
		memcpy(d, s, n);
		return;
	}
	/* _mm_stream_si128 needs a 16-byte aligned destination. */
	memcpy(d, s, head);
	d += head;
	s += head;
	n -= head;
	for (; n >= 64; n -= 64, d += 64, s += 64) {
		__m128i a = _mm_loadu_si128((const __m128i *)s);
		__m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
		__m128i e = _mm_loadu_si128((const __m128i *)(s + 48));

		_mm_stream_si128((__m128i *)d, a);
		_mm_stream_si128((__m128i *)(d + 16), b);
		_mm_stream_si128((__m128i *)(d + 32), c);
		_mm_stream_si128((__m128i *)(d + 48), e);
	}
	_mm_sfence();
	memcpy(d, s, n);
}
#else
void tpu__copy_stream(void *dst, const void *src, size_t n)
{
	memcpy(dst, src, n);
}
#endif
