// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "tap.h"
#include "tpu_user.h"

#define CPU0 "/job:worker/replica:0/task:0/device:CPU:0"
#define GPU1 "/job:worker/replica:0/task:1/device:GPU:1"

static bool same(struct tpu_str a, struct tpu_str b)
{
	return a.len == b.len && !memcmp(a.ptr, b.ptr, a.len);
}

static void round_trip(const char *name, const char *src, uint64_t inc, const char *dst,
		       const char *edge, uint64_t frame, uint64_t iter)
{
	struct tpu_key k = { tpu_str(src), inc, tpu_str(dst), tpu_str(edge), frame, iter }, p;
	char buf[512], again[512];
	size_t len = 0;
	tpu_status st;

	st = tpu_key_build(&k, buf, sizeof(buf), &len);
	CHECK(st == 0 && len == strlen(buf), "key_builds: %s", name);
	st = tpu_key_parse((struct tpu_str){ buf, len }, &p, NULL);
	CHECK(st == 0 && same(p.src_device, k.src_device) && p.src_incarnation == inc &&
	      same(p.dst_device, k.dst_device) && same(p.edge_name, k.edge_name) &&
	      p.frame_id == frame && p.iter_id == iter, "key_parses_back_to_its_parts: %s", name);
	st = tpu_key_build(&p, again, sizeof(again), NULL);
	CHECK(st == 0 && !strcmp(buf, again), "key_rebuilt_from_its_parse_is_identical: %s", name);
}

static void tensorflow_spelling(void)
{
	struct tpu_key k = { tpu_str(CPU0), 0x1f, tpu_str(GPU1), tpu_str("edge_5_MatMul"), 0, 0 };
	const char *want = CPU0 ";000000000000001f;" GPU1 ";edge_5_MatMul;0:0";
	char buf[256];

	CHECK(tpu_key_build(&k, buf, sizeof(buf), NULL) == 0 && !strcmp(buf, want),
	      "key_is_spelled_as_tensorflow_createkey_writes_it");
}

static void lenient_incarnation(void)
{
	struct tpu_key k;

	CHECK(tpu_key_parse(tpu_str(CPU0 ";AbC;" GPU1 ";e;1:2"), &k, NULL) == 0 &&
	      k.src_incarnation == 0xabc, "key_parse_accepts_short_mixed_case_incarnation");
}

struct rejection {
	const char *name;
	const char *key;
	tpu_status status;
	const char *why;
};

static const struct rejection rejections[] = {
	{ "empty_key", "", TPU_E_BAD_KEY, "fewer" },
	{ "four_parts", CPU0 ";1;" GPU1 ";edge", TPU_E_BAD_KEY, "fewer" },
	{ "six_parts", CPU0 ";1;" GPU1 ";edge;0:0;extra", TPU_E_BAD_KEY, "more" },
	{ "semicolon_in_edge", CPU0 ";1;" GPU1 ";ed;ge;0:0", TPU_E_BAD_KEY, "more" },
	{ "bad_source_device", "/job:w/task:0;1;" GPU1 ";edge;0:0", TPU_E_BAD_DEVICE_NAME, "replica" },
	{ "bad_destination_device", CPU0 ";1;/gpu:0;edge;0:0", TPU_E_BAD_DEVICE_NAME, "/job:" },
	{ "empty_incarnation", CPU0 ";;" GPU1 ";edge;0:0", TPU_E_BAD_KEY, "incarnation" },
	{ "seventeen_digit_incarnation", CPU0 ";10000000000000000;" GPU1 ";edge;0:0", TPU_E_BAD_KEY,
	  "incarnation" },
	{ "non_hex_incarnation", CPU0 ";12g4;" GPU1 ";edge;0:0", TPU_E_BAD_KEY, "incarnation" },
	{ "prefixed_incarnation", CPU0 ";0x12;" GPU1 ";edge;0:0", TPU_E_BAD_KEY, "incarnation" },
	{ "empty_edge", CPU0 ";1;" GPU1 ";;0:0", TPU_E_BAD_KEY, "edge" },
	{ "frame_iter_without_colon", CPU0 ";1;" GPU1 ";edge;00", TPU_E_BAD_KEY, "FRAME:ITER" },
	{ "empty_frame_iter", CPU0 ";1;" GPU1 ";edge;", TPU_E_BAD_KEY, "FRAME:ITER" },
	{ "empty_frame", CPU0 ";1;" GPU1 ";edge;:0", TPU_E_BAD_KEY, "FRAME:ITER" },
	{ "empty_iter", CPU0 ";1;" GPU1 ";edge;0:", TPU_E_BAD_KEY, "FRAME:ITER" },
	{ "negative_iter", CPU0 ";1;" GPU1 ";edge;0:-1", TPU_E_BAD_KEY, "FRAME:ITER" },
	{ "leading_zero_frame", CPU0 ";1;" GPU1 ";edge;01:0", TPU_E_BAD_KEY, "FRAME:ITER" },
	{ "frame_overflowing_64_bits", CPU0 ";1;" GPU1 ";edge;18446744073709551616:0", TPU_E_BAD_KEY,
	  "FRAME:ITER" },
	{ "second_colon", CPU0 ";1;" GPU1 ";edge;0:1:2", TPU_E_BAD_KEY, "FRAME:ITER" },
	{ "trailing_space", CPU0 ";1;" GPU1 ";edge;0:0 ", TPU_E_BAD_KEY, "FRAME:ITER" },
};

/*
 * @warm: a valid key of the rejections' own first parts is parsed just
 * before, so that the parse that follows takes its known-prefix path.
 */
static void rejects(const struct rejection *r, bool warm)
{
	struct tpu_key k;
	const char *why = NULL;
	tpu_status st;

	if (warm)
		tpu_key_parse(tpu_str(CPU0 ";1;" GPU1 ";edge;0:0"), &k, NULL);
	st = tpu_key_parse(tpu_str(r->key), &k, &why);
	if (st != r->status || !why || !strstr(why, r->why))
		tap_diag("got %s, why: %s", tpu_status_name(st), why ? why : "(none)");
	CHECK(st == r->status && why && strstr(why, r->why), "key_parse_rejects_%s%s", r->name,
	      warm ? "_after_a_valid_key_of_the_same_first_parts" : "");
}

/* Keys that share their first three parts parse as well as a first one. */
static void same_prefix(void)
{
	static const char nul_edge[] = CPU0 ";1;" GPU1 ";ed\0ge;0:0";
	struct tpu_key k;
	bool ok = true;

	for (uint64_t i = 0; i < 10; i++) {
		char key[256];
		int n = snprintf(key, sizeof(key), CPU0 ";1;" GPU1 ";e%llu;%llu:%llu",
				 (unsigned long long)i, (unsigned long long)i * 3,
				 (unsigned long long)i + 7);
		char edge[16];

		snprintf(edge, sizeof(edge), "e%llu", (unsigned long long)i);
		ok &= tpu_key_parse((struct tpu_str){ key, (size_t)n }, &k, NULL) == 0 &&
		      same(k.src_device, tpu_str(CPU0)) && same(k.dst_device, tpu_str(GPU1)) &&
		      (const char *)k.src_device.ptr == key &&
		      (const char *)k.dst_device.ptr == key + strlen(CPU0 ";1;") &&
		      k.src_incarnation == 1 && same(k.edge_name, tpu_str(edge)) &&
		      k.frame_id == i * 3 && k.iter_id == i + 7;
	}
	CHECK(ok, "key_parse_of_keys_sharing_their_first_parts_gives_each_its_own_parts");
	CHECK(tpu_key_parse((struct tpu_str){ nul_edge, sizeof(nul_edge) - 1 }, &k, NULL) ==
	      TPU_E_BAD_KEY, "key_parse_rejects_nul_byte_in_edge_after_a_key_of_the_same_prefix");
	/* The prefix alone, and a different incarnation, are no match. */
	CHECK(tpu_key_parse(tpu_str(CPU0 ";1;" GPU1 ";"), &k, NULL) == TPU_E_BAD_KEY,
	      "key_parse_rejects_the_known_prefix_alone");
	CHECK(tpu_key_parse(tpu_str(CPU0 ";2;" GPU1 ";e;0:0"), &k, NULL) == 0 &&
	      k.src_incarnation == 2, "key_parse_reads_a_new_incarnation_after_the_known_prefix");
	CHECK(tpu_key_parse(tpu_str(CPU0 ";1;" CPU0 ";e;0:0"), &k, NULL) == 0 &&
	      same(k.dst_device, tpu_str(CPU0)), "key_parse_reads_a_new_destination");
}

static void parse_rejects_nul_in_edge(void)
{
	static const char key[] = CPU0 ";1;" GPU1 ";ed\0ge;0:0";
	struct tpu_key k;

	CHECK(tpu_key_parse((struct tpu_str){ key, sizeof(key) - 1 }, &k, NULL) == TPU_E_BAD_KEY,
	      "key_parse_rejects_nul_byte_in_edge");
}

static void parse_argument_checks(void)
{
	struct tpu_key k;

	CHECK(tpu_key_parse((struct tpu_str){ NULL, 0 }, &k, NULL) == -EINVAL,
	      "key_parse_null_pointer_is_einval");
	CHECK(tpu_key_parse(tpu_str(CPU0 ";1;" GPU1 ";e;0:0"), NULL, NULL) == -EINVAL,
	      "key_parse_null_output_is_einval");
}

static void build_rejections(void)
{
	struct tpu_key k = { tpu_str(CPU0), 1, tpu_str(GPU1), tpu_str("edge"), 0, 0 };
	static const char nul_edge[] = "ed\0ge";
	char buf[256], small[16];
	size_t need = 0, len = 0;

	k.src_device = tpu_str("/cpu:0");
	CHECK(tpu_key_build(&k, buf, sizeof(buf), NULL) == TPU_E_BAD_DEVICE_NAME,
	      "key_build_rejects_a_bad_source_device");
	k.src_device = tpu_str(CPU0);
	k.dst_device = (struct tpu_str){ NULL, 4 };
	CHECK(tpu_key_build(&k, buf, sizeof(buf), NULL) == TPU_E_BAD_DEVICE_NAME,
	      "key_build_rejects_a_null_destination_device");
	k.dst_device = tpu_str(GPU1);
	k.edge_name = tpu_str("a;b");
	CHECK(tpu_key_build(&k, buf, sizeof(buf), NULL) == TPU_E_BAD_KEY,
	      "key_build_rejects_a_semicolon_in_the_edge");
	k.edge_name = tpu_str("");
	CHECK(tpu_key_build(&k, buf, sizeof(buf), NULL) == TPU_E_BAD_KEY,
	      "key_build_rejects_an_empty_edge");
	k.edge_name = (struct tpu_str){ nul_edge, sizeof(nul_edge) - 1 };
	CHECK(tpu_key_build(&k, buf, sizeof(buf), NULL) == TPU_E_BAD_KEY,
	      "key_build_rejects_a_nul_byte_in_the_edge");
	k.edge_name = tpu_str("edge");
	CHECK(tpu_key_build(&k, NULL, 0, &need) == -ENOSPC && need > 0,
	      "key_build_without_buffer_reports_the_length_needed");
	CHECK(tpu_key_build(&k, small, sizeof(small), &len) == -ENOSPC && len == need &&
	      strlen(small) == sizeof(small) - 1, "key_build_into_a_small_buffer_is_enospc_and_truncated");
	CHECK(tpu_key_build(&k, buf, need + 1, &len) == 0 && len == need,
	      "key_build_fits_exactly_with_room_for_the_nul");
	CHECK(tpu_key_build(NULL, buf, sizeof(buf), NULL) == -EINVAL,
	      "key_build_null_key_is_einval");
	CHECK(tpu_key_build(&k, NULL, 5, NULL) == -EINVAL,
	      "key_build_null_buffer_with_size_is_einval");
}

void test_key(void)
{
	size_t i;

	tensorflow_spelling();
	round_trip("typical", CPU0, 0x5eedfacecafe1234ull, GPU1, "edge_12_conv/weights:0", 0, 3);
	round_trip("zero_incarnation_and_ids", CPU0, 0, CPU0, "x", 0, 0);
	round_trip("largest_numbers", CPU0, UINT64_MAX, GPU1, "edge", UINT64_MAX, UINT64_MAX);
	round_trip("edge_with_colons_slashes_spaces", CPU0, 42, GPU1, "a b:c/d:0", 7, 9);
	round_trip("long_edge", CPU0, 1, GPU1,
		   "edge_name_that_is_rather_long_because_tensorflow_graphs_nest_scopes/"
		   "deeply/inside/each/other/and/the/key/gets/long:0", 123456789, 987654321);
	lenient_incarnation();
	for (i = 0; i < sizeof(rejections) / sizeof(rejections[0]); i++)
		rejects(&rejections[i], false);
	for (i = 0; i < sizeof(rejections) / sizeof(rejections[0]); i++)
		rejects(&rejections[i], true);
	same_prefix();
	parse_rejects_nul_in_edge();
	parse_argument_checks();
	build_rejections();
}
