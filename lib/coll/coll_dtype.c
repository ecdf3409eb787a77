// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Element types: sizes, and the two 16-bit floats, which are reduced in
 * float32 and rounded back to nearest, ties to even (what hardware
 * conversions do, so results match a framework's own arithmetic).
 */
#include <string.h>

#include "coll.h"

static uint32_t bits_of(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static float float_of(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

TPU_API size_t tpu_dtype_size(enum tpu_dtype dtype)
{
	switch (dtype) {
	case TPU_DT_FLOAT64:
	case TPU_DT_INT64:
		return 8;
	case TPU_DT_FLOAT32:
	case TPU_DT_INT32:
		return 4;
	case TPU_DT_FLOAT16:
	case TPU_DT_BFLOAT16:
		return 2;
	case TPU_DT_UINT8:
		return 1;
	}
	return 0;
}

bool tpu__dtype_valid(enum tpu_dtype dtype)
{
	return tpu_dtype_size(dtype) != 0;
}

float tpu__f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;

	if (exp == 0x1f)	/* infinity, or NaN with its payload kept */
		return float_of(sign | 0x7f800000 | man << 13);
	if (exp == 0) {		/* zero or subnormal: man * 2^-24, exact in float */
		float v = (float)man * (1.0f / 16777216.0f);

		return sign ? -v : v;
	}
	return float_of(sign | (exp + 127 - 15) << 23 | man << 13);
}

uint16_t tpu__f32_to_f16(float f)
{
	uint32_t u = bits_of(f), sign = (u >> 16) & 0x8000, a = u & 0x7fffffff;

	if (a > 0x7f800000)	/* NaN: keep the top payload bits, and keep it a NaN */
		return (uint16_t)(sign | 0x7c00 | 0x200 | ((a >> 13) & 0x3ff));
	/* 65520 is half-way between the largest half (65504) and 2^16: ties go to even, up. */
	if (a >= 0x477ff000)
		return (uint16_t)(sign | 0x7c00);
	if (a < 0x38800000) {
		/*
		 * Below 2^-14 the result is subnormal: adding 0.5 puts the bits
		 * of 2^-24 at the float's last place, so the FPU's own rounding
		 * (nearest even) does the work; the low bits are the half.
		 */
		float r = float_of(a) + 0.5f;

		return (uint16_t)(sign | (bits_of(r) - 0x3f000000));
	}
	/* Normal: rebias the exponent; add just under half an ulp, plus the odd bit for ties. */
	a += ((uint32_t)(15 - 127) << 23) + 0xfff + ((a >> 13) & 1);
	return (uint16_t)(sign | (a >> 13));
}

float tpu__bf16_to_f32(uint16_t h)
{
	return float_of((uint32_t)h << 16);
}

uint16_t tpu__f32_to_bf16(float f)
{
	uint32_t u = bits_of(f);

	if ((u & 0x7fffffff) > 0x7f800000)	/* NaN stays NaN even if its payload was low */
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fff + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}
