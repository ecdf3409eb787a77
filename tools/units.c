// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "units.h"

uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int parse_size(const char *text, uint64_t *bytes)
{
	static const char units[] = "KMGT";
	unsigned long long v;
	unsigned int shift = 0;
	char *end;
	int i;

	if (!text || *text < '0' || *text > '9')
		return -1;
	errno = 0;
	v = strtoull(text, &end, 10);
	if (errno)
		return -1;
	for (i = 0; units[i]; i++)
		if (*end == units[i] || *end == units[i] + ('a' - 'A')) {
			shift = 10 * (unsigned int)(i + 1);
			end++;
			break;
		}
	if (shift && (!strcasecmp(end, "iB") || !strcasecmp(end, "B")))
		end += strlen(end);
	if (*end || (shift && v > (UINT64_MAX >> shift)))
		return -1;
	*bytes = (uint64_t)v << shift;
	return 0;
}

const char *format_size(uint64_t bytes, char *buf, size_t size)
{
	static const char *const names[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	unsigned int i = 0;

	while (i < 4 && bytes >= 1024 && bytes % 1024 == 0) {
		bytes /= 1024;
		i++;
	}
	snprintf(buf, size, "%llu %s", (unsigned long long)bytes, names[i]);
	return buf;
}
