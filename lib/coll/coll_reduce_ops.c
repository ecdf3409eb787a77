// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The merge ops (sum, prod, min, max) and the final op (divide by the
 * group size), one plain loop per type and op over restrict pointers so
 * that GCC vectorises each; on x86-64 every loop is also built for AVX2
 * and the loader picks the variant the CPU runs (target_clones, an ifunc).
 * Signed integers wrap (computed unsigned: overflow is not undefined), as
 * TensorFlow's kernels do in practice.  float16 and bfloat16 go through
 * float32 in blocks, so the float loop is the vectorised one.
 */
#include <string.h>

#include "coll.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define VECTOR_CLONES __attribute__((target_clones("avx2", "default"), optimize("tree-vectorize")))
#else
#define VECTOR_CLONES
#endif

#define ADD(T, U, x, y)	((T)((U)(x) + (U)(y)))
#define MUL(T, U, x, y)	((T)((U)(x) * (U)(y)))
#define MIN(T, U, x, y)	((y) < (x) ? (y) : (x))
#define MAX(T, U, x, y)	((y) > (x) ? (y) : (x))

#define LOOP(name, T, U, OP) \
	VECTOR_CLONES static void name(T *restrict a, const T *restrict b, size_t n) \
	{ \
		for (size_t i = 0; i < n; i++) \
			a[i] = OP(T, U, a[i], b[i]); \
	}

#define FOUR(T, U, sfx) \
	LOOP(sum_##sfx, T, U, ADD) \
	LOOP(prod_##sfx, T, U, MUL) \
	LOOP(min_##sfx, T, U, MIN) \
	LOOP(max_##sfx, T, U, MAX)

FOUR(float, float, f32)
FOUR(double, double, f64)
FOUR(int32_t, uint32_t, i32)
FOUR(int64_t, uint64_t, i64)
FOUR(uint8_t, unsigned int, u8)

#define PICK(op, sfx, a, b, n, T) do { \
	switch (op) { \
	case TPU_OP_SUM: sum_##sfx((T *)(a), (const T *)(b), (n)); break; \
	case TPU_OP_PROD: prod_##sfx((T *)(a), (const T *)(b), (n)); break; \
	case TPU_OP_MIN: min_##sfx((T *)(a), (const T *)(b), (n)); break; \
	case TPU_OP_MAX: max_##sfx((T *)(a), (const T *)(b), (n)); break; \
	} \
} while (0)

#define BLOCK 256

/* float16/bfloat16: widen a block of each, merge in float32, round back once. */
static void reduce_half(bool bf, enum tpu_reduce_op op, uint16_t *a, const uint16_t *b, size_t n)
{
	float fa[BLOCK], fb[BLOCK];

	for (size_t base = 0; base < n; base += BLOCK) {
		size_t m = n - base < BLOCK ? n - base : BLOCK;

		for (size_t i = 0; i < m; i++) {
			fa[i] = bf ? tpu__bf16_to_f32(a[base + i]) : tpu__f16_to_f32(a[base + i]);
			fb[i] = bf ? tpu__bf16_to_f32(b[base + i]) : tpu__f16_to_f32(b[base + i]);
		}
		PICK(op, f32, fa, fb, m, float);
		for (size_t i = 0; i < m; i++)
			a[base + i] = bf ? tpu__f32_to_bf16(fa[i]) : tpu__f32_to_f16(fa[i]);
	}
}

void tpu__coll_reduce(enum tpu_dtype dtype, enum tpu_reduce_op op, void *a, const void *b,
		      size_t count)
{
	switch (dtype) {
	case TPU_DT_FLOAT32: PICK(op, f32, a, b, count, float); break;
	case TPU_DT_FLOAT64: PICK(op, f64, a, b, count, double); break;
	case TPU_DT_INT32: PICK(op, i32, a, b, count, int32_t); break;
	case TPU_DT_INT64: PICK(op, i64, a, b, count, int64_t); break;
	case TPU_DT_UINT8: PICK(op, u8, a, b, count, uint8_t); break;
	case TPU_DT_FLOAT16: reduce_half(false, op, a, b, count); break;
	case TPU_DT_BFLOAT16: reduce_half(true, op, a, b, count); break;
	}
}

#define DIV_LOOP(name, T, D) \
	VECTOR_CLONES static void name(T *restrict a, size_t n, D d) \
	{ \
		for (size_t i = 0; i < n; i++) \
			a[i] = (T)(a[i] / d); \
	}

DIV_LOOP(div_f32, float, float)
DIV_LOOP(div_f64, double, double)
DIV_LOOP(div_i32, int32_t, int32_t)
DIV_LOOP(div_i64, int64_t, int64_t)
DIV_LOOP(div_u8, uint8_t, unsigned int)

void tpu__coll_final(enum tpu_dtype dtype, enum tpu_final_op op, void *a, size_t count, int n)
{
	uint16_t *h = a;

	if (op != TPU_FINAL_DIV || n <= 1)
		return;
	switch (dtype) {
	case TPU_DT_FLOAT32: div_f32(a, count, (float)n); break;
	case TPU_DT_FLOAT64: div_f64(a, count, (double)n); break;
	case TPU_DT_INT32: div_i32(a, count, n); break;
	case TPU_DT_INT64: div_i64(a, count, n); break;
	case TPU_DT_UINT8: div_u8(a, count, (unsigned int)n); break;
	case TPU_DT_FLOAT16:
		for (size_t i = 0; i < count; i++)
			h[i] = tpu__f32_to_f16(tpu__f16_to_f32(h[i]) / (float)n);
		break;
	case TPU_DT_BFLOAT16:
		for (size_t i = 0; i < count; i++)
			h[i] = tpu__f32_to_bf16(tpu__bf16_to_f32(h[i]) / (float)n);
		break;
	}
}
