// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Selftest helpers: buffers, byte patterns and checksums.
 */
#include "tp_test_util.h"

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void *tpt_map(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

void tpt_unmap(void *addr, size_t len)
{
	if (addr)
		munmap(addr, len);
}

void *tpt_map_region(int fd, uint64_t mmap_offset, size_t len, int prot)
{
	void *p = mmap(NULL, len, prot, MAP_SHARED, fd, (off_t)mmap_offset);

	return p == MAP_FAILED ? NULL : p;
}

size_t tpt_page_size(void)
{
	return (size_t)sysconf(_SC_PAGESIZE);
}

size_t tpt_round_up_page(size_t len)
{
	size_t pg = tpt_page_size();

	return (len + pg - 1) / pg * pg;
}

/* splitmix64: cheap, and every seed gives a different stream. */
static uint64_t next_word(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

void tpt_fill(void *buf, size_t len, uint64_t seed)
{
	uint8_t *p = buf;
	uint64_t state = seed;
	size_t i;

	for (i = 0; i + 8 <= len; i += 8) {
		uint64_t w = next_word(&state);

		memcpy(p + i, &w, 8);
	}
	if (i < len) {
		uint64_t w = next_word(&state);

		memcpy(p + i, &w, len - i);
	}
}

bool tpt_check(const void *buf, size_t len, uint64_t seed)
{
	const uint8_t *p = buf;
	uint64_t state = seed;
	size_t i;

	for (i = 0; i + 8 <= len; i += 8) {
		uint64_t w = next_word(&state);

		if (memcmp(p + i, &w, 8))
			return false;
	}
	if (i < len) {
		uint64_t w = next_word(&state);

		if (memcmp(p + i, &w, len - i))
			return false;
	}
	return true;
}

static uint64_t sum_word(uint64_t h, uint64_t w)
{
	return (h ^ w) * 0x100000001b3ULL;
}

/* Word-wise FNV-style hash; the length is folded in so prefixes differ. */
uint64_t tpt_sum(const void *buf, size_t len)
{
	const uint8_t *p = buf;
	uint64_t h = 0xcbf29ce484222325ULL ^ len;
	size_t i;

	for (i = 0; i + 8 <= len; i += 8) {
		uint64_t w;

		memcpy(&w, p + i, 8);
		h = sum_word(h, w);
	}
	if (i < len) {
		uint64_t w = 0;

		memcpy(&w, p + i, len - i);
		h = sum_word(h, w);
	}
	return h;
}

uint64_t tpt_pattern_sum(size_t len, uint64_t seed)
{
	uint64_t h = 0xcbf29ce484222325ULL ^ len;
	uint64_t state = seed;
	size_t i;

	for (i = 0; i + 8 <= len; i += 8)
		h = sum_word(h, next_word(&state));
	if (i < len) {
		uint64_t g = next_word(&state), w = 0;

		memcpy(&w, &g, len - i);
		h = sum_word(h, w);
	}
	return h;
}

bool tpt_all_bytes(const void *buf, size_t len, uint8_t value)
{
	const uint8_t *p = buf;
	size_t i;

	for (i = 0; i < len; i++)
		if (p[i] != value)
			return false;
	return true;
}
