// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Host unit tests of libtpu_user: everything that needs no module.
 * UNIT_ONLY=name[,name...] runs only the named lists (names as below,
 * without "test_"), for working on one of them.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif

#include "tap.h"

static const struct {
	const char *name;
	void (*fn)(void);
} lists[] = {
	{ "status", test_status },
	{ "log", test_log },
	{ "version", test_version },
	{ "abi", test_abi },
	{ "device_name", test_device_name },
	{ "key", test_key },
	{ "spin_policy", test_spin_policy },
	{ "wake_late", test_wake_late },
	{ "spin_state", test_spin_state },
	{ "free_list", test_free_list },
	{ "tap", test_tap },
	{ "spin_knob", test_spin_knob },
	{ "endpoint_args", test_endpoint_args },
	{ "fdpass", test_fdpass },
	{ "cma", test_cma },
	{ "probe", test_probe },
	{ "ctx_lend", test_ctx_lend },
	{ "rendezvous", test_rendezvous },
	{ "cma_table", test_cma_table },
	{ "cma_viability", test_cma_viability },
	{ "rdv_cma", test_rdv_cma },
	{ "rdv_alloc", test_rdv_alloc },
	{ "pipe_alloc", test_pipe_alloc },
	{ "pipe_wire", test_pipe_wire },
	{ "copy_stream", test_copy_stream },
	{ "shm_ring", test_shm_ring },
	{ "shm_lanes", test_shm_lanes },
	{ "xport_tcp", test_xport_tcp },
	{ "xport_shm", test_xport_shm },
	{ "xport_rdma", test_xport_rdma },
	{ "pipe_core", test_pipe_core },
	{ "cma_trust", test_cma_trust },
	{ "pipe_mtcp", test_pipe_mtcp },
	{ "pipe_rdma", test_pipe_rdma },
	{ "failure", test_failure },
	{ "misuse", test_misuse },
	{ "boot_env", test_boot_env },
	{ "store", test_store },
	{ "auth", test_auth },
	{ "remote_authz", test_remote_authz },
	{ "remote_wake", test_remote_wake },
	{ "remote_cost", test_remote_cost },
	{ "remote_onepipe", test_remote_onepipe },
	{ "remote_push", test_remote_push },
	{ "world", test_world },
	{ "world_coll", test_world_coll },
	{ "world_store", test_world_store },
	{ "world_shm", test_world_shm },
	{ "world_hier", test_world_hier },
	{ "world_destroy", test_world_destroy },
	{ "xfer", test_xfer },
	{ "xfer_trust", test_xfer_trust },
	{ "xfer_dmabuf", test_xfer_dmabuf },
	{ "xfer_cuda", test_xfer_cuda },
	{ "xfer_kmod", test_xfer_kmod },
	{ "xfer_rdma", test_xfer_rdma },
	{ "bounds_pipe", test_bounds_pipe },
	{ "bounds_remote", test_bounds_remote },
	{ "bounds_store", test_bounds_store },
	{ "coll_dtype", test_coll_dtype },
	{ "coll", test_coll },
	{ "cuda", test_cuda },
	{ "cuda_dmabuf", test_cuda_dmabuf },
	/* Last: it takes the RDMA device's port down (only where asked to). */
	{ "rdma_port", test_rdma_port },
};

static int wanted(const char *only, const char *name)
{
	size_t n = strlen(name);

	if (!only || !*only)
		return 1;
	for (const char *p = only; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
		if (!strncmp(p, name, n) && (p[n] == ',' || !p[n]))
			return 1;
	return 0;
}

#ifdef VALGRIND_CLO_CHANGE
/*
 * A forked test child holds a copy of its parent's heap but none of the
 * parent's other threads: what only such a thread pointed to at the fork
 * (an op a context or cma helper thread was completing) looks definitely
 * lost when the child exits, though the parent frees it.  Leak reports
 * from children are noise, then, as LeakSanitizer judges too (it does not
 * check forked processes): valgrind checks the parent, which frees all.
 */
static void child_skips_leak_check(void)
{
	if (RUNNING_ON_VALGRIND)
		VALGRIND_CLO_CHANGE("--leak-check=no");
}
#endif

int main(void)
{
	const char *only = getenv("UNIT_ONLY");

#ifdef VALGRIND_CLO_CHANGE
	pthread_atfork(NULL, NULL, child_skips_leak_check);
#endif

	/* Started again by test_pipe_rdma.c as a peer process: no lists then. */
	if (getenv("TPU_TEST_RDMA_WRITER"))
		return pipe_rdma_writer(getenv("TPU_TEST_RDMA_WRITER"));
	/* Run by tests/vm/pair-xfer.sh: one rank of a world across two VMs. */
	if (getenv("TPU_TEST_WORLD_HIER"))
		return world_hier_rank(getenv("TPU_TEST_WORLD_HIER"));
	/* Started again by test_cuda.c. */
	if (getenv("TPU_TEST_CUDA_WRITER"))
		return cuda_writer(getenv("TPU_TEST_CUDA_WRITER"));
	/* Run by tests/vm/pair-xfer.sh: the reader of another host's writer. */
	if (getenv("TPU_TEST_CUDA_READER"))
		return cuda_reader(getenv("TPU_TEST_CUDA_READER"));
	/* Run by tests/vm/pair-xfer.sh: one-sided transfers over rdma between the hosts. */
	if (getenv("TPU_TEST_XFER_TARGET"))
		return xfer_pair_target(getenv("TPU_TEST_XFER_TARGET"));
	if (getenv("TPU_TEST_XFER_REQUESTER"))
		return xfer_pair_requester(getenv("TPU_TEST_XFER_REQUESTER"));
	if (getenv("TPU_TEST_CUDA_ABSENT"))
		return cuda_absent();

	tap_crash_stacks();
	for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++)
		if (wanted(only, lists[i].name))
			lists[i].fn();
	return tap_finish();
}
