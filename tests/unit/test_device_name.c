// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "tap.h"
#include "tpu_user.h"

static bool slice_is(struct tpu_str s, const char *want)
{
	return s.len == strlen(want) && !memcmp(s.ptr, want, s.len);
}

static void parses(const char *name, const char *job, uint32_t replica, uint32_t task,
		   const char *type, uint32_t id)
{
	struct tpu_device_name d;
	const char *why = NULL;
	char back[128];
	size_t len = 0;
	tpu_status st = tpu_device_name_parse(tpu_str(name), &d, &why);

	CHECK(st == 0 && slice_is(d.job, job) && d.replica == replica && d.task == task &&
	      slice_is(d.type, type) && d.id == id, "device_name_parses: %s", name);
	st = tpu_device_name_build(&d, back, sizeof(back), &len);
	CHECK(st == 0 && !strcmp(back, name) && len == strlen(name),
	      "device_name_builds_back_identically: %s", name);
}

struct rejection {
	const char *name;	/* test name */
	const char *input;
	const char *why;	/* a word the explanation must contain */
};

static const struct rejection rejections[] = {
	{ "empty", "", "/job:" },
	{ "missing_job_prefix", "/replica:0/task:0/device:CPU:0", "/job:" },
	{ "legacy_short_form", "/cpu:0", "/job:" },
	{ "empty_job", "/job:/replica:0/task:0/device:CPU:0", "job name" },
	{ "job_starting_with_digit", "/job:1worker/replica:0/task:0/device:CPU:0", "job name" },
	{ "job_with_dash", "/job:my-job/replica:0/task:0/device:CPU:0", "job name" },
	{ "job_with_underscore_first", "/job:_w/replica:0/task:0/device:CPU:0", "job name" },
	{ "partial_name_job_only", "/job:worker", "/replica:" },
	{ "components_out_of_order", "/job:w/task:0/replica:0/device:CPU:0", "/replica:" },
	{ "empty_replica", "/job:w/replica:/task:0/device:CPU:0", "replica" },
	{ "replica_leading_zero", "/job:w/replica:01/task:0/device:CPU:0", "replica" },
	{ "replica_negative", "/job:w/replica:-1/task:0/device:CPU:0", "replica" },
	{ "replica_above_int_max", "/job:w/replica:2147483648/task:0/device:CPU:0", "replica" },
	{ "replica_wildcard", "/job:w/replica:*/task:0/device:CPU:0", "replica" },
	{ "missing_task", "/job:w/replica:0/device:CPU:0", "/task:" },
	{ "task_not_a_number", "/job:w/replica:0/task:one/device:CPU:0", "task" },
	{ "task_with_plus_sign", "/job:w/replica:0/task:+1/device:CPU:0", "task" },
	{ "missing_device", "/job:w/replica:0/task:0", "/device:" },
	{ "legacy_device_component", "/job:w/replica:0/task:0/cpu:0", "/device:" },
	{ "empty_device_type", "/job:w/replica:0/task:0/device::0", "device type" },
	{ "device_type_starting_with_digit", "/job:w/replica:0/task:0/device:9PU:0", "device type" },
	{ "device_type_with_dash", "/job:w/replica:0/task:0/device:X-PU:0", "device type" },
	{ "missing_device_id", "/job:w/replica:0/task:0/device:CPU", "device id" },
	{ "empty_device_id", "/job:w/replica:0/task:0/device:CPU:", "device id" },
	{ "device_id_with_trailing_text", "/job:w/replica:0/task:0/device:CPU:0x", "device id" },
	{ "trailing_slash", "/job:w/replica:0/task:0/device:CPU:0/", "device id" },
	{ "device_id_leading_zero", "/job:w/replica:0/task:0/device:CPU:00", "device id" },
};

static void rejects(const struct rejection *r)
{
	struct tpu_device_name d;
	const char *why = NULL;
	tpu_status st = tpu_device_name_parse(tpu_str(r->input), &d, &why);

	if (why && !strstr(why, r->why))
		tap_diag("why: %s", why);
	CHECK(st == TPU_E_BAD_DEVICE_NAME && why && strstr(why, r->why),
	      "device_name_rejects_%s", r->name);
}

static void embedded_nul_is_rejected(void)
{
	static const char name[] = "/job:w/replica:0/task:0/device:CPU:0\0junk";
	struct tpu_str s = { name, sizeof(name) - 1 };
	struct tpu_device_name d;

	CHECK(tpu_device_name_parse(s, &d, NULL) == TPU_E_BAD_DEVICE_NAME,
	      "device_name_rejects_bytes_after_an_embedded_nul");
}

static void build_checks(void)
{
	struct tpu_device_name d = { tpu_str("worker"), 0, 1, tpu_str("GPU"), 2 };
	const char *want = "/job:worker/replica:0/task:1/device:GPU:2";
	char buf[64], tiny[8];
	size_t len = 0, n = strlen(want);

	CHECK(tpu_device_name_build(&d, buf, n + 1, &len) == 0 && len == n && !strcmp(buf, want),
	      "device_name_build_fits_exactly_with_room_for_the_nul");
	CHECK(tpu_device_name_build(&d, buf, n, &len) == -ENOSPC && len == n &&
	      strlen(buf) == n - 1, "device_name_build_one_byte_short_is_enospc_and_truncated");
	CHECK(tpu_device_name_build(&d, NULL, 0, &len) == -ENOSPC && len == n,
	      "device_name_build_with_no_buffer_reports_the_length_needed");
	CHECK(tpu_device_name_build(&d, tiny, sizeof(tiny), NULL) == -ENOSPC &&
	      tiny[sizeof(tiny) - 1] == '\0', "device_name_build_truncation_stays_nul_terminated");
	CHECK(tpu_device_name_build(&d, NULL, 10, &len) == -EINVAL,
	      "device_name_build_null_buffer_with_size_is_einval");
	CHECK(tpu_device_name_build(NULL, buf, sizeof(buf), &len) == -EINVAL,
	      "device_name_build_null_name_is_einval");
	d.job = tpu_str("bad job");
	CHECK(tpu_device_name_build(&d, buf, sizeof(buf), &len) == TPU_E_BAD_DEVICE_NAME,
	      "device_name_build_rejects_an_invalid_job");
	d.job = tpu_str("worker");
	d.type = tpu_str("");
	CHECK(tpu_device_name_build(&d, buf, sizeof(buf), &len) == TPU_E_BAD_DEVICE_NAME,
	      "device_name_build_rejects_an_empty_type");
	d.type = tpu_str("CPU");
	d.task = TPU_DEVICE_NUMBER_MAX + 1u;
	CHECK(tpu_device_name_build(&d, buf, sizeof(buf), &len) == TPU_E_BAD_DEVICE_NAME,
	      "device_name_build_rejects_a_task_above_int_max");
}

/*
 * Names this thread parsed lately are answered from a memo: only the same
 * bytes may be, with slices into the name given now, never a stale answer.
 */
static void memo_answers_only_the_same_bytes(void)
{
	static const char name[] = "/job:worker/replica:0/task:1/device:CPU:0";
	char a[sizeof(name)], b[sizeof(name)], many[8][64], longname[160];
	struct tpu_device_name d;
	bool all = true;
	size_t n;

	memcpy(a, name, sizeof(name));
	memcpy(b, name, sizeof(name));
	CHECK(!tpu_device_name_parse(tpu_str(a), &d, NULL) &&
	      !tpu_device_name_parse(tpu_str(b), &d, NULL) &&
	      d.job.ptr == b + 5 && d.job.len == 6 && d.type.ptr == b + 36 && d.type.len == 3 &&
	      d.task == 1, "device_name_memo: the same name elsewhere has its slices there");
	b[27] = '2';
	CHECK(!tpu_device_name_parse(tpu_str(b), &d, NULL) && d.task == 2,
	      "device_name_memo: a name changed in place parses as it reads now");
	b[40] = 'x';
	CHECK(tpu_device_name_parse(tpu_str(b), &d, NULL) == TPU_E_BAD_DEVICE_NAME,
	      "device_name_memo: one byte off a parsed name is still refused");
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < 8; i++) {
			snprintf(many[i], sizeof(many[i]), "/job:w/replica:0/task:%d/device:GPU:%d", i,
				 7 - i);
			all = all && !tpu_device_name_parse(tpu_str(many[i]), &d, NULL) &&
			      d.task == (uint32_t)i && d.id == (uint32_t)(7 - i) &&
			      d.job.ptr == many[i] + 5;
		}
	}
	CHECK(all, "device_name_memo: eight names in turn, three times, each parses as itself");
	n = (size_t)snprintf(longname, sizeof(longname), "/job:%s/replica:3/task:4/device:CPU:5",
			     "a_job_name_long_enough_that_the_whole_name_passes_ninety_six_bytes_x");
	CHECK(n > 96 && !tpu_device_name_parse(tpu_str(longname), &d, NULL) &&
	      !tpu_device_name_parse(tpu_str(longname), &d, NULL) && d.task == 4 && d.id == 5,
	      "device_name_memo: a name too long for the memo parses, twice");
}

void test_device_name(void)
{
	struct tpu_device_name d;
	struct tpu_str null_slice = { NULL, 3 };
	size_t i;

	parses("/job:worker/replica:0/task:1/device:CPU:0", "worker", 0, 1, "CPU", 0);
	parses("/job:ps/replica:3/task:12/device:GPU:7", "ps", 3, 12, "GPU", 7);
	parses("/job:Trainer_2/replica:2147483647/task:2147483647/device:_XLA_TPU:2147483647",
	       "Trainer_2", 2147483647u, 2147483647u, "_XLA_TPU", 2147483647u);
	parses("/job:localhost/replica:0/task:0/device:cpu:0", "localhost", 0, 0, "cpu", 0);
	for (i = 0; i < sizeof(rejections) / sizeof(rejections[0]); i++)
		rejects(&rejections[i]);
	embedded_nul_is_rejected();
	CHECK(tpu_device_name_parse(null_slice, &d, NULL) == -EINVAL,
	      "device_name_parse_null_pointer_with_length_is_einval");
	CHECK(tpu_device_name_parse(tpu_str("/job:w/replica:0/task:0/device:CPU:0"), NULL, NULL) ==
	      -EINVAL, "device_name_parse_null_output_is_einval");
	CHECK(tpu_str(NULL).len == 0 && tpu_str(NULL).ptr != NULL, "tpu_str_of_null_is_empty");
	build_checks();
	memo_answers_only_the_same_bytes();
}
