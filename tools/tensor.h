/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Test tensors: float32 contents that differ per tensor, and a checksum. */
#ifndef TOOLS_TENSOR_H
#define TOOLS_TENSOR_H

#include <stddef.h>
#include <stdint.h>

/* Fill @len bytes (a multiple of 4 is a float32 array) with values seeded by @seed. */
void tensor_fill(void *buf, size_t len, uint32_t seed);

/* A 64-bit checksum of @len bytes; any single changed byte changes it. */
uint64_t tensor_checksum(const void *buf, size_t len);

#endif
