// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The collectives' element types and ops, without peers: float16 and
 * bfloat16 against float32 for all 65536 values each, ties rounding to
 * even, and every merge and final op of every type against a loop
 * written here.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "coll/coll.h"
#include "tap.h"

static uint32_t bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static float from_bits(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static void f16_every_value_round_trips(void)
{
	unsigned int bad = 0, bad_ties = 0, first = 0;

	for (uint32_t h = 0; h < 0x10000; h++) {
		float f = tpu__f16_to_f32((uint16_t)h);
		bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);

		if (nan ? !isnan(f) || (tpu__f32_to_f16(f) & 0x7e00) != 0x7e00 ||
			  (tpu__f32_to_f16(f) ^ h) & 0x81ff :
			  tpu__f32_to_f16(f) != h) {
			if (!bad++)
				first = h;
		}
		/* Half-way to the next larger magnitude (exact in float): goes to the even one. */
		if ((h & 0x7fff) < 0x7bff) {
			float a = f, b = tpu__f16_to_f32((uint16_t)(h + 1));
			uint16_t want = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;

			if (tpu__f32_to_f16((a + b) / 2) != want)
				bad_ties++;
			/* A hair above the tie rounds away from h, a hair below back to h. */
			if (tpu__f32_to_f16(from_bits(bits((a + b) / 2) + 1)) != h + 1 ||
			    tpu__f32_to_f16(from_bits(bits((a + b) / 2) - 1)) != h)
				bad_ties++;
		}
	}
	CHECK(bad == 0, "coll_f16_every_value_round_trips_through_float (%u bad, first 0x%04x)",
	      bad, first);
	CHECK(bad_ties == 0, "coll_f16_ties_round_to_even_and_near_ties_to_nearest (%u bad)",
	      bad_ties);
	CHECK(tpu__f32_to_f16(65519.0f) == 0x7bff && tpu__f32_to_f16(65520.0f) == 0x7c00 &&
	      tpu__f32_to_f16(-1e9f) == 0xfc00 && tpu__f32_to_f16(1e-9f) == 0 &&
	      tpu__f32_to_f16(-0.0f) == 0x8000 && tpu__f32_to_f16(5.9604645e-8f) == 1,
	      "coll_f16_overflow_underflow_and_signed_zero");
}

static void bf16_every_value_round_trips(void)
{
	unsigned int bad = 0, bad_ties = 0;

	for (uint32_t h = 0; h < 0x10000; h++) {
		float f = tpu__bf16_to_f32((uint16_t)h);

		if (isnan(f) ? !isnan(tpu__bf16_to_f32(tpu__f32_to_bf16(f))) :
			       tpu__f32_to_bf16(f) != h)
			bad++;
		if ((h & 0x7fff) < 0x7f7f) {
			/* The tie between h and h+1 is h's bits with 0x8000 below. */
			uint16_t want = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;

			if (tpu__f32_to_bf16(from_bits(h << 16 | 0x8000)) != want ||
			    tpu__f32_to_bf16(from_bits(h << 16 | 0x8001)) != h + 1 ||
			    tpu__f32_to_bf16(from_bits(h << 16 | 0x7fff)) != h)
				bad_ties++;
		}
	}
	CHECK(bad == 0, "coll_bf16_every_value_round_trips_through_float (%u bad)", bad);
	CHECK(bad_ties == 0, "coll_bf16_ties_round_to_even_and_near_ties_to_nearest (%u bad)",
	      bad_ties);
	CHECK(tpu__f32_to_bf16(from_bits(0x7f800001)) != 0x7f80 &&
	      isnan(tpu__bf16_to_f32(tpu__f32_to_bf16(from_bits(0x7f800001)))),
	      "coll_bf16_nan_with_low_payload_stays_nan");
}

static double op_ref(enum tpu_reduce_op op, double a, double b)
{
	switch (op) {
	case TPU_OP_SUM: return a + b;
	case TPU_OP_PROD: return a * b;
	case TPU_OP_MIN: return b < a ? b : a;
	case TPU_OP_MAX: return b > a ? b : a;
	}
	return 0;
}

static void put(enum tpu_dtype dt, void *p, size_t i, double v)
{
	switch (dt) {
	case TPU_DT_FLOAT32: ((float *)p)[i] = (float)v; break;
	case TPU_DT_FLOAT64: ((double *)p)[i] = v; break;
	case TPU_DT_FLOAT16: ((uint16_t *)p)[i] = tpu__f32_to_f16((float)v); break;
	case TPU_DT_BFLOAT16: ((uint16_t *)p)[i] = tpu__f32_to_bf16((float)v); break;
	case TPU_DT_INT32: ((int32_t *)p)[i] = (int32_t)v; break;
	case TPU_DT_INT64: ((int64_t *)p)[i] = (int64_t)v; break;
	case TPU_DT_UINT8: ((uint8_t *)p)[i] = (uint8_t)(int)v; break;
	}
}

/* Every type and op over lengths around the vector widths, values whose results are exact. */
static void ops_match_a_plain_loop(void)
{
	static const enum tpu_dtype dts[] = { TPU_DT_FLOAT32, TPU_DT_FLOAT64, TPU_DT_FLOAT16,
					      TPU_DT_BFLOAT16, TPU_DT_INT32, TPU_DT_INT64,
					      TPU_DT_UINT8 };
	static const size_t lens[] = { 0, 1, 7, 31, 33, 257, 1000 };
	static uint8_t a[8000], b[8000], want[8000];
	unsigned int bad = 0;

	for (size_t t = 0; t < sizeof(dts) / sizeof(dts[0]); t++)
		for (int op = TPU_OP_SUM; op <= TPU_OP_MAX; op++)
			for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
				size_t n = lens[l], es = tpu_dtype_size(dts[t]);

				for (size_t i = 0; i < n; i++) {
					double x = (double)(i % 9), y = (double)((i * 5) % 7);

					put(dts[t], a, i, x);
					put(dts[t], b, i, y);
					put(dts[t], want, i, op_ref((enum tpu_reduce_op)op, x, y));
				}
				tpu__coll_reduce(dts[t], (enum tpu_reduce_op)op, a, b, n);
				if (memcmp(a, want, n * es))
					bad++;
				/* The mean's division: 8 exactly divides every sum made above. */
				for (size_t i = 0; i < n; i++) {
					put(dts[t], a, i, 8.0 * (double)(i % 9));
					put(dts[t], want, i, (double)(i % 9));
				}
				tpu__coll_final(dts[t], TPU_FINAL_DIV, a, n, 8);
				if (memcmp(a, want, n * es))
					bad++;
			}
	CHECK(bad == 0, "coll_merge_and_final_ops_of_every_type_match_a_plain_loop (%u bad)", bad);

	/* Signed overflow wraps (no undefined behaviour for UBSan to flag). */
	int32_t i32a[1] = { INT32_MAX }, i32b[1] = { 1 };
	tpu__coll_reduce(TPU_DT_INT32, TPU_OP_SUM, i32a, i32b, 1);
	CHECK(i32a[0] == INT32_MIN, "coll_int32_sum_wraps_on_overflow");
	uint8_t u[1] = { 200 }, v[1] = { 100 };
	tpu__coll_reduce(TPU_DT_UINT8, TPU_OP_SUM, u, v, 1);
	CHECK(u[0] == 44, "coll_uint8_sum_wraps_modulo_256");
	CHECK(tpu_dtype_size(TPU_DT_BFLOAT16) == 2 && tpu_dtype_size((enum tpu_dtype)99) == 0,
	      "coll_dtype_sizes");
}

void test_coll_dtype(void)
{
	f16_every_value_round_trips();
	bf16_every_value_round_trips();
	ops_match_a_plain_loop();
}
