/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Helpers shared by the tensorpipe selftests, implemented in tp_test_ioctl.c,
 * tp_test_data.c, tp_test_system.c, tp_test_process.c and tp_test_peers.c.
 *
 * Nothing here includes kselftest_harness.h: the harness defines global
 * symbols, so it may appear in one translation unit per binary only.  Every
 * helper returns 0 (or a count) on success and a negative errno on failure,
 * which lets both the harness-driven parent and plain forked children use it.
 */
#ifndef TP_TEST_UTIL_H
#define TP_TEST_UTIL_H

#include <linux/tensorpipe.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define TPT_KIB			1024ULL
#define TPT_MIB			(1024ULL * 1024ULL)
#define TPT_NSEC_PER_MSEC	1000000ULL
#define TPT_NSEC_PER_SEC	1000000000ULL

/*
 * Bound for RECVs that the test expects to be woken by something else: if
 * the module never wakes them, they fail with -ETIMEDOUT well before the
 * harness kills the test, so the failure names the broken step.
 */
#define TPT_SAFETY_TIMEOUT_NS	(10 * TPT_NSEC_PER_SEC)
#define TPT_SAFETY_TIMEOUT_MS	15000

#define TPT_DEBUGFS_DIR		"/sys/kernel/debug/tensorpipe"
#define TPT_PARAM_DIR		"/sys/module/tensorpipe/parameters"

/* Exit code of a child whose parent died before it could set PDEATHSIG. */
#define TPT_CHILD_ORPHANED	99

/* ioctl wrappers. */
int tpt_open(void);
int tpt_ioctl(int fd, unsigned long cmd, void *arg);
int tpt_get_info(int fd, struct tp_info *info);
int tpt_domain_create(int fd, int *domain_fd, uint64_t *id);
int tpt_domain_attach(int fd, int domain_fd, uint64_t *id);
int tpt_domain_attach_flags(int fd, int domain_fd, uint32_t flags, uint64_t *id);
int tpt_register(int fd, const void *addr, uint64_t len, uint32_t access,
		 uint32_t *handle);
int tpt_alloc(int fd, uint64_t len, uint32_t *handle, uint64_t *mmap_offset);
int tpt_release(int fd, uint32_t handle);

void tpt_send_prep(struct tp_send *s, const void *key, uint32_t key_len,
		   uint32_t region, uint64_t offset, uint64_t len,
		   uint64_t user_data);
void tpt_recv_prep(struct tp_recv *r, const void *key, uint32_t key_len,
		   uint32_t region, uint64_t offset, uint64_t len,
		   uint64_t timeout_ns);
void tpt_cancel_prep(struct tp_cancel *c, const void *key, uint32_t key_len,
		     uint32_t flags);

/* Shorthands for NUL-terminated keys (the NUL is not part of the key). */
int tpt_send(int fd, const char *key, uint32_t region, uint64_t offset,
	     uint64_t len, uint64_t user_data);
int tpt_recv(int fd, const char *key, uint32_t region, uint64_t offset,
	     uint64_t cap, uint64_t timeout_ns, uint64_t *len);
int tpt_recv_nonblock(int fd, const char *key, uint32_t region,
		      uint64_t offset, uint64_t cap, uint64_t *len);
int tpt_cancel(int fd, const char *key, uint32_t flags, uint32_t *count);
int tpt_abort(int fd, int32_t status);

/*
 * Wait up to @timeout_ms for completions, then read at most @max records.
 * Returns the number of records read, -ETIMEDOUT, or another -errno.
 */
int tpt_read_completions(int fd, struct tp_completion *out, size_t max,
			 int timeout_ms);
/* 1 if poll() reports POLLIN right now, 0 if not, -errno on error. */
int tpt_readable_now(int fd);
/* 0 once poll() reports POLLIN, -ETIMEDOUT after @timeout_ms. */
int tpt_wait_readable(int fd, int timeout_ms);

/* Memory. */
void *tpt_map(size_t len);
void tpt_unmap(void *addr, size_t len);
void *tpt_map_region(int fd, uint64_t mmap_offset, size_t len, int prot);
size_t tpt_page_size(void);
size_t tpt_round_up_page(size_t len);

/* Deterministic byte patterns and checksums. */
void tpt_fill(void *buf, size_t len, uint64_t seed);
bool tpt_check(const void *buf, size_t len, uint64_t seed);
uint64_t tpt_sum(const void *buf, size_t len);
uint64_t tpt_pattern_sum(size_t len, uint64_t seed);
bool tpt_all_bytes(const void *buf, size_t len, uint8_t value);

/* debugfs (needs root and a mounted debugfs; -ENOENT/-EACCES otherwise). */
bool tpt_have_debugfs(void);
int tpt_stat(const char *name, int64_t *val);
int tpt_domain_stat(uint64_t id, const char *name, int64_t *val);
int tpt_wait_stat(const char *name, int64_t want, int timeout_ms);
int tpt_wait_domain_stat(uint64_t id, const char *name, int64_t want,
			 int timeout_ms);
/*
 * Let a blocking RECV in another task start waiting: confirmed through the
 * domain's debugfs "waiters" line when available, else a short sleep.
 * Returns 0, or -ETIMEDOUT when debugfs never showed @n waiters.
 */
int tpt_wait_waiters(uint64_t domain_id, int64_t n);

/* Module parameters (writing needs root). */
int tpt_param_get(const char *name, uint64_t *val);
int tpt_param_set(const char *name, uint64_t val);

/*
 * Parameters a test changed, restored by its teardown.  run.sh restores all
 * of them again after each binary, in case a test was killed by its timeout.
 */
#define TPT_MAX_SAVED_PARAMS	4

struct tpt_params {
	int n;
	struct {
		char name[32];
		uint64_t old;
	} saved[TPT_MAX_SAVED_PARAMS];
};

int tpt_params_set(struct tpt_params *s, const char *name, uint64_t val);
void tpt_params_restore(struct tpt_params *s);

/* RLIMIT_MEMLOCK and privileges. */
void tpt_raise_memlock(void);
bool tpt_can_pin(uint64_t bytes);
int tpt_drop_privileges(uint64_t memlock_bytes);
long tpt_vmpin_kb(void);

/* Processes and synchronisation. */
pid_t tpt_fork(void);
int tpt_wait_child(pid_t pid, int timeout_ms, int *status);
int tpt_notify(int fd);
int tpt_wait_notify(int fd, int timeout_ms);
int tpt_write_all(int fd, const void *buf, size_t len);
int tpt_read_all(int fd, void *buf, size_t len, int timeout_ms);
int tpt_send_fd(int sock, int fd);
int tpt_recv_fd(int sock, int timeout_ms);
uint64_t tpt_now_ns(void);
void tpt_sleep_ms(unsigned int ms);

/*
 * Two endpoints of one process attached to one domain, with a registered
 * source (READ, pattern-filled with TPT_SEED_SRC) on @prod and a registered
 * destination (WRITE, zeroed) on @cons, both @len bytes.
 */
#define TPT_SEED_SRC	0x5eed50aaULL

struct tpt_pair {
	struct tp_info info;
	int domain_fd;
	uint64_t domain_id;
	int prod;
	int cons;
	uint8_t *sbuf;
	uint8_t *dbuf;
	uint64_t len;
	uint32_t src;
	uint32_t dst;
};

int tpt_pair_open(struct tpt_pair *p, uint64_t len);
/* The same, both endpoints attached with TP_DOMAIN_ATTACH_* @flags. */
int tpt_pair_open_flags(struct tpt_pair *p, uint64_t len, uint32_t flags);
void tpt_pair_close(struct tpt_pair *p);

/*
 * A consumer in a forked child: it opens its own endpoint, attaches through
 * the inherited domain fd, reports ready, then issues one RECV and reports
 * struct tpt_rx_result.  With TP_RECV_DONATE it maps the new region to
 * checksum it.
 */
struct tpt_rx_args {
	int domain_fd;
	const void *key;
	uint32_t key_len;
	uint32_t flags;
	uint64_t cap;
	uint64_t timeout_ns;
	bool interruptible;	/* install a SIGUSR1 handler */
	bool sa_restart;	/* ... with SA_RESTART */
};

struct tpt_rx_result {
	int32_t ret;		/* RECV: 0 or -errno */
	int32_t aux;		/* -errno of the setup step or mmap that failed */
	uint64_t len;		/* tp_recv.len after the RECV */
	uint64_t sum;		/* tpt_sum() of the received bytes */
};

struct tpt_rx {
	pid_t pid;
	int fd;			/* read end of the child's report pipe */
};

int tpt_rx_start(struct tpt_rx *rx, const struct tpt_rx_args *args);
int tpt_rx_ready(struct tpt_rx *rx);
int tpt_rx_finish(struct tpt_rx *rx, int timeout_ms, struct tpt_rx_result *res);
void tpt_rx_kill(struct tpt_rx *rx);

/* A blocking RECV in a thread of this process (same mm, same endpoint). */
struct tpt_thread_recv {
	pthread_t thread;
	int fd;
	struct tp_recv req;
	int ret;
	bool started;
};

int tpt_thread_recv_start(struct tpt_thread_recv *t, int fd, const char *key,
			  uint32_t region, uint64_t cap, uint64_t timeout_ns);
int tpt_thread_recv_join(struct tpt_thread_recv *t, int timeout_ms);

#endif /* TP_TEST_UTIL_H */
