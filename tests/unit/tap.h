/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * A small TAP producer.  Every check prints its own "ok N - name" line at
 * once; the plan "1..N" comes last, which TAP allows, so a run that dies
 * half-way is seen as incomplete instead of passing what it printed.
 */
#ifndef UNIT_TAP_H
#define UNIT_TAP_H

#include <stdbool.h>

void tap_point(bool ok, const char *where, const char *expr, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
void tap_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/*
 * A run that stops making progress fails by itself: when no point comes
 * for @seconds, print every thread's stack (gdb, where installed) and a
 * "not ok" naming the last point, and exit.  Uses SIGALRM and alarm():
 * not for lists whose own cases use them.
 */
void tap_watchdog(unsigned int seconds);
/*
 * A crash (SIGSEGV, SIGBUS, SIGILL, SIGFPE) prints its signal, address and
 * stack, and every thread's from gdb where installed, on stderr, then ends
 * the process with that signal as before; forked children inherit it.
 * Not under the sanitizers or valgrind, which report crashes themselves.
 */
void tap_crash_stacks(void);
/* Whether this binary is built with AddressSanitizer. */
bool tap_sanitized(void);
/* A forked child with a TAP stream of its own: count from 1 again, no failures. */
void tap_restart(void);
/* Print the plan; the exit status for main(): 0 when every point passed. */
int tap_finish(void);
/* The descriptors this process has open (-1 if /proc says nothing), for leak checks. */
int count_fds(void);
/*
 * Heap allocations (malloc, calloc, realloc) made so far by the library and
 * the tests, every thread of this process (alloc_count.c).
 */
unsigned long allocs_counted(void);
/* The far end hung up on socket @fd (EOF or a reset), without waiting. */
bool hung_up(int fd);
struct timespec;
/* The CLOCK_REALTIME time @ms from now, for pthread_cond_timedwait. */
void deadline_in(struct timespec *until, int ms);
/* The CPUs this process may run on (1 when it cannot tell). */
unsigned int usable_cpus(void);
/* Whether this process runs under valgrind (its preload is in LD_PRELOAD). */
bool under_valgrind(void);
/* The first two of them into @cpus: false when there are fewer. */
bool first_two_cpus(int cpus[2]);
/* Bind this thread (and the threads and processes it starts) to @cpu: 0 or -1. */
int bind_to_cpu(int cpu);

#define TAP_STR2(x) #x
#define TAP_STR(x) TAP_STR2(x)

/* CHECK(condition, "name with %d formats", ...): one test point. */
#define CHECK(cond, ...) \
	tap_point((cond), __FILE__ ":" TAP_STR(__LINE__), #cond, __VA_ARGS__)

/* A point comparing two statuses, printing both by name when they differ. */
/* What came instead follows the failing point: CI's list of failures shows those lines. */
#define CHECK_STATUS(got, want, ...) do { \
	int got_ = (got), want_ = (want); \
	CHECK(got_ == want_, __VA_ARGS__); \
	if (got_ != want_) \
		tap_diag("%s: got %d (%s), want %d (%s)", #got, got_, \
			 tpu_status_name(got_), want_, tpu_status_name(want_)); \
} while (0)

/* The test lists, one per library concept. */
void test_status(void);
void test_log(void);
void test_failure(void);
void test_misuse(void);
void test_version(void);
void test_abi(void);
void test_device_name(void);
void test_key(void);
void test_spin_policy(void);
void test_wake_late(void);
void test_spin_state(void);
void test_free_list(void);
void test_tap(void);
void test_spin_knob(void);
void test_rdv_alloc(void);
void test_pipe_alloc(void);
void test_endpoint_args(void);
void test_fdpass(void);
void test_pipe_wire(void);
void test_shm_ring(void);
void test_shm_lanes(void);
void test_xport_tcp(void);
void test_xport_shm(void);
void test_xport_rdma(void);
void test_rdma_port(void);
void test_pipe_core(void);
void test_pipe_mtcp(void);
void test_pipe_rdma(void);
/* The peer process of test_pipe_rdma.c (this binary run again); its exit status. */
int pipe_rdma_writer(const char *url);
void test_copy_stream(void);
void test_cuda(void);
void test_cuda_dmabuf(void);
/* The peer processes of test_cuda.c (this binary run again); their exit status. */
int cuda_writer(const char *url);
int cuda_reader(const char *url);
int cuda_absent(void);
void test_cma(void);
void test_probe(void);
void test_rendezvous(void);
void test_ctx_lend(void);
void test_cma_table(void);
void test_cma_viability(void);
void test_cma_trust(void);
void test_rdv_cma(void);
void test_boot_env(void);
void test_store(void);
void test_auth(void);
void test_remote_authz(void);
void test_remote_onepipe(void);
void test_remote_push(void);
void test_remote_wake(void);
void test_remote_cost(void);
void test_world(void);
void test_world_coll(void);
void test_world_store(void);
void test_world_shm(void);
void test_world_destroy(void);
void test_world_hier(void);
/* One rank of a launcher-formed world ("check" or "dies"); tests/vm/pair-xfer.sh. */
int world_hier_rank(const char *mode);
void test_xfer(void);
void test_xfer_trust(void);
void test_xfer_dmabuf(void);
void test_xfer_cuda(void);
void test_xfer_kmod(void);
void test_xfer_rdma(void);
int xfer_pair_target(const char *hostport);
int xfer_pair_requester(const char *hostport);
void test_xfer_hostile(void);
void test_bounds_pipe(void);
void test_bounds_remote(void);
void test_bounds_store(void);
void test_coll_dtype(void);
void test_coll(void);

#endif
