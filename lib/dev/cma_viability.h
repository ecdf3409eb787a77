/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Can this process take part in a cma rendezvous?  process_vm_readv must
 * exist and pass seccomp, Yama must let peers pull, and the peers must share
 * our pid namespace (pids travel through the table).  The facts are
 * gathered apart from the verdict so that the verdict can be tested for
 * every combination, not only for this machine's.
 */
#ifndef TPU_CMA_VIABILITY_H
#define TPU_CMA_VIABILITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "tpu_user.h"

struct tpu__cma_facts {
	tpu_status self_read;	/* a process_vm_readv of this process */
	int yama_scope;		/* /proc/sys/kernel/yama/ptrace_scope, -1 without Yama */
	bool cap_sys_ptrace;	/* in the effective set */
	int seccomp;		/* "Seccomp:" of /proc/self/status, -1 unknown */
};

/* The value every member's probe word holds (see tpu__cma_check_peer). */
#define TPU__CMA_PROBE_WORD	0x7470636d61707262ULL

void tpu__cma_facts_gather(struct tpu__cma_facts *f);
/*
 * 0 when a cma rendezvous can work here, else TPU_E_NO_TRANSPORT; @why
 * gets one sentence either way (what limits it, or why it cannot work).
 */
tpu_status tpu__cma_judge(const struct tpu__cma_facts *f, char *why, size_t size);
/*
 * Gather and judge; under Yama scope 1 also let any process pull from this
 * one (PR_SET_PTRACER_ANY), since the consumers are not known in advance.
 */
tpu_status tpu__cma_viable(char *why, size_t size);
/* An id of this process's pid namespace; 0 when /proc cannot say. */
uint64_t tpu__cma_pid_ns(void);
/*
 * Pull @pid's probe word (at @probe_addr, holding TPU__CMA_PROBE_WORD):
 * 0 when it arrives or the process is gone, else TPU_E_NO_TRANSPORT with
 * the reason in @why.
 */
tpu_status tpu__cma_check_peer(pid_t pid, uint64_t probe_addr, char *why, size_t size);

#endif /* TPU_CMA_VIABILITY_H */
