// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "tap.h"
#include "tpu_user.h"

/* The fallback is judged, not assumed: containers may forbid it. */
static void fallback_is_consistent(const struct tpu_probe_result *r, tpu_status st,
				   const char *what)
{
	if (r->cma_status == 0)
		CHECK(st == 0 && r->path == TPU_PATH_CMA && strstr(r->detail, "Fallback: process_vm_readv"),
		      "probe_of_%s_reports_the_process_vm_readv_fallback", what);
	else
		CHECK(st == TPU_E_NO_TRANSPORT && r->path == TPU_PATH_NONE &&
		      strstr(r->detail, "No fallback"),
		      "probe_of_%s_reports_no_transport_when_process_vm_readv_is_blocked", what);
}

void test_probe(void)
{
	struct tpu_probe_result r;
	tpu_status st;

	memset(&r, 0x5a, sizeof(r));
	st = tpu_probe("/nonexistent/tensorpipe", &r);
	CHECK_STATUS(r.kmod_status, TPU_E_NO_DEVICE, "probe_reports_an_absent_module_as_no_device");
	CHECK(r.module_abi == 0 && r.module_features == 0,
	      "probe_of_an_absent_module_reports_no_abi_or_features");
	CHECK(strstr(r.detail, "/nonexistent/tensorpipe is not usable") != NULL,
	      "probe_detail_names_the_device_and_says_it_is_unusable");
	if (access("/sys/module/tensorpipe", F_OK))
		CHECK(strstr(r.detail, "not loaded") != NULL, "probe_detail_says_the_module_is_not_loaded");
	else
		CHECK(strstr(r.detail, "node is missing") != NULL,
		      "probe_detail_says_the_node_is_missing_while_the_module_is_loaded");
	fallback_is_consistent(&r, st, "an_absent_device");
	if (access("/proc/sys/kernel/yama/ptrace_scope", F_OK))
		CHECK(r.yama_ptrace_scope == -1, "probe_reports_yama_scope_minus_one_without_yama");
	else
		CHECK(r.yama_ptrace_scope >= 0 && r.yama_ptrace_scope <= 3,
		      "probe_reports_the_yama_scope");

	st = tpu_probe("/dev/null", &r);
	CHECK_STATUS(r.kmod_status, TPU_E_NOT_TENSORPIPE, "probe_of_another_device_is_not_tensorpipe");
	fallback_is_consistent(&r, st, "another_device");

	CHECK_STATUS(tpu_probe(NULL, NULL), -EINVAL, "probe_without_result_is_einval");
	CHECK(!strcmp(tpu_path_name(TPU_PATH_KMOD), "kmod") &&
	      !strcmp(tpu_path_name(TPU_PATH_CMA), "process_vm_readv") &&
	      !strcmp(tpu_path_name(TPU_PATH_NONE), "none") &&
	      !strcmp(tpu_path_name((enum tpu_path)42), "none"), "path_names_are_stable");
}
