// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The cma rendezvous's viability probe (lib/cma_viability.c): the verdict
 * for every combination of seccomp, Yama and capabilities, and the checks
 * that do run here (the self pull, the pull of a peer's probe word).
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cma_table.h"
#include "cma_viability.h"
#include "tap.h"
#include "tpu_user.h"

static tpu_status judge(tpu_status self_read, int yama, bool cap, int seccomp, char *why,
			size_t size)
{
	struct tpu__cma_facts f = {
		.self_read = self_read, .yama_scope = yama,
		.cap_sys_ptrace = cap, .seccomp = seccomp,
	};

	why[0] = 0;
	return tpu__cma_judge(&f, why, size);
}

static void verdicts(void)
{
	char why[320];

	CHECK_STATUS(judge(0, -1, false, 0, why, sizeof(why)), 0,
		     "cma_viable_without_yama_or_seccomp");
	CHECK_STATUS(judge(0, 0, false, 2, why, sizeof(why)), 0,
		     "cma_viable_under_a_filter_that_allows_it");
	CHECK_STATUS(judge(0, 1, false, 0, why, sizeof(why)), 0, "cma_viable_under_yama_scope_1");
	CHECK(strstr(why, "ptrace_scope 1") != NULL, "cma_yama_scope_1_is_named_in_the_reason");
	CHECK_STATUS(judge(0, 2, false, 0, why, sizeof(why)), TPU_E_NO_TRANSPORT,
		     "cma_not_viable_under_yama_scope_2_without_cap_sys_ptrace");
	CHECK(strstr(why, "CAP_SYS_PTRACE") != NULL,
	      "cma_yama_scope_2_reason_names_the_capability");
	CHECK_STATUS(judge(0, 2, true, 0, why, sizeof(why)), 0,
		     "cma_viable_under_yama_scope_2_with_cap_sys_ptrace");
	CHECK_STATUS(judge(0, 3, true, 0, why, sizeof(why)), TPU_E_NO_TRANSPORT,
		     "cma_not_viable_under_yama_scope_3");
	CHECK(strstr(why, "ptrace_scope is 3") != NULL, "cma_yama_scope_3_is_named_in_the_reason");
	CHECK_STATUS(judge(-EPERM, 0, false, 2, why, sizeof(why)), TPU_E_NO_TRANSPORT,
		     "cma_not_viable_when_seccomp_refuses_the_call");
	CHECK(strstr(why, "seccomp") != NULL, "cma_seccomp_is_named_in_the_reason");
	CHECK_STATUS(judge(-ENOSYS, -1, false, 0, why, sizeof(why)), TPU_E_NO_TRANSPORT,
		     "cma_not_viable_without_the_system_call");
	CHECK(strstr(why, "CONFIG_CROSS_MEMORY_ATTACH") != NULL,
	      "cma_missing_system_call_names_the_kernel_option");
	CHECK_STATUS(judge(-EPERM, 0, false, 0, why, sizeof(why)), TPU_E_NO_TRANSPORT,
		     "cma_not_viable_when_the_self_pull_fails");
	CHECK_STATUS(judge(0, 3, true, 0, why, 8), TPU_E_NO_TRANSPORT,
		     "cma_reason_is_cut_to_a_small_buffer");
	CHECK(strlen(why) == 7, "cma_cut_reason_is_terminated");
}

static void this_machine(void)
{
	struct tpu_probe_result probe;
	struct tpu__cma_facts f;
	char why[320];
	uint64_t ns = tpu__cma_pid_ns();
	int ws = 0;
	pid_t pid;

	tpu__cma_facts_gather(&f);
	tpu_probe(NULL, &probe);
	CHECK(f.yama_scope == probe.yama_ptrace_scope,
	      "cma_facts_read_yama_as_the_probe_does");
	CHECK(probe.cma_status != 0 || f.self_read == 0,
	      "cma_facts_self_pull_agrees_with_the_probe");
	CHECK((tpu__cma_viable(why, sizeof(why)) == 0) == (probe.cma_status == 0),
	      "cma_viability_agrees_with_the_probe (%s)", why);
	CHECK(why[0] != 0, "cma_viability_always_gives_a_reason");

	CHECK(ns != 0, "cma_pid_namespace_id_is_known");
	pid = fork();
	if (pid == 0)
		_exit(tpu__cma_pid_ns() == ns ? 0 : 1);
	CHECK(pid > 0 && waitpid(pid, &ws, 0) == pid && WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
	      "cma_child_shares_the_pid_namespace_id");
}

static void peers(void)
{
	static const uint64_t good = TPU__CMA_PROBE_WORD, bad = 42;
	char why[320];
	pid_t pid;

	CHECK_STATUS(tpu__cma_check_peer(getpid(), (uintptr_t)&good, why, sizeof(why)), 0,
		     "cma_peer_with_the_probe_word_passes");
	CHECK_STATUS(tpu__cma_check_peer(getpid(), (uintptr_t)&bad, why, sizeof(why)),
		     TPU_E_NO_TRANSPORT, "cma_peer_with_a_wrong_probe_word_fails");
	CHECK(strstr(why, "probe word") != NULL, "cma_wrong_probe_word_is_explained");
	CHECK_STATUS(tpu__cma_check_peer(getpid(), 0, why, sizeof(why)), TPU_E_NO_TRANSPORT,
		     "cma_peer_whose_probe_address_faults_fails");
	pid = fork();
	if (pid == 0)
		_exit(0);
	waitpid(pid, NULL, 0);
	CHECK_STATUS(tpu__cma_check_peer(pid, (uintptr_t)&good, why, sizeof(why)), 0,
		     "cma_peer_that_is_gone_is_no_obstacle");
}

void test_cma_viability(void)
{
	verdicts();
	this_machine();
	peers();
}
