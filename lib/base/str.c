// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* String slices and the small formatting and parsing they need. */
#include <string.h>

#include "base.h"

TPU_API struct tpu_str tpu_str(const char *s)
{
	struct tpu_str r = { s ? s : "", s ? strlen(s) : 0 };

	return r;
}

void tpu__put(struct tpu__writer *w, const char *s, size_t n)
{
	/* One byte of the buffer is kept for the NUL. */
	if (w->size && w->len < w->size - 1) {
		size_t room = w->size - 1 - w->len;

		memcpy(w->buf + w->len, s, n < room ? n : room);
	}
	w->len += n;
}

void tpu__put_str(struct tpu__writer *w, struct tpu_str s)
{
	tpu__put(w, s.ptr, s.len);
}

void tpu__put_dec(struct tpu__writer *w, uint64_t v)
{
	char digits[20];
	size_t i = sizeof(digits);

	do {
		digits[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	tpu__put(w, digits + i, sizeof(digits) - i);
}

void tpu__put_hex16(struct tpu__writer *w, uint64_t v)
{
	static const char hex[] = "0123456789abcdef";
	char digits[16];
	int i;

	for (i = 15; i >= 0; i--, v >>= 4)
		digits[i] = hex[v & 0xf];
	tpu__put(w, digits, sizeof(digits));
}

tpu_status tpu__finish(struct tpu__writer *w, size_t *len)
{
	if (len)
		*len = w->len;
	if (w->size == 0)
		return -ENOSPC;
	w->buf[w->len < w->size ? w->len : w->size - 1] = '\0';
	return w->len < w->size ? 0 : -ENOSPC;
}

bool tpu__parse_dec(struct tpu_str s, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;
	size_t i;

	if (s.len == 0 || (s.len > 1 && s.ptr[0] == '0'))
		return false;
	for (i = 0; i < s.len; i++) {
		unsigned int d = (unsigned char)s.ptr[i] - '0';

		/* d > max first: max - d would wrap for a max below 9. */
		if (d > 9 || d > max || v > (max - d) / 10)
			return false;
		v = v * 10 + d;
	}
	*out = v;
	return true;
}
