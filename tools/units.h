/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Clock and byte sizes, as the tools read and print them. */
#ifndef TOOLS_UNITS_H
#define TOOLS_UNITS_H

#include <stddef.h>
#include <stdint.h>

/* CLOCK_MONOTONIC in nanoseconds: the same clock in every process, so a
 * producer's and a consumer's durations can be added. */
uint64_t now_ns(void);

/* "4096", "4K", "4k", "4KiB", "16M", "1G": 0 on success, -1 if not a size. */
int parse_size(const char *text, uint64_t *bytes);

/* "4 KiB", "16 MiB", "1000 B": written into @buf, which is returned. */
const char *format_size(uint64_t bytes, char *buf, size_t size);

#endif
