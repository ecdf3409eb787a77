/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * What the transport tests share (xport_harness.c), for any transport:
 * callback records the test thread waits on with a deadline, every
 * transport call run on the context thread (through tpu__ctx_run_sync), an accept
 * queue, and pairs of connections between two contexts through a listener.
 *
 * The op_* functions run on the context thread (inside a task of the
 * test's own); the x_* ones wrap one op each in tpu__ctx_run_sync, for the test
 * thread.  While op_* is inside the transport's call a thread-local flag
 * is set, so that done_cb can tell a callback run inside the call that
 * queued it (which xport.h forbids) from one run later.
 */
#ifndef UNIT_XPORT_HARNESS_H
#define UNIT_XPORT_HARNESS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#include "tpu_user.h"
#include "xport.h"

#define MiB		(1u << 20)
#define WAIT_MS		10000	/* generous: valgrind and sanitizers are slow */

int64_t now_ms(void);
void sleep_ms(int ms);
/* Wait until *v reaches want; false after ms milliseconds. */
bool wait_for(atomic_int *v, int want, int ms);

/* One callback's record: how often it ran, with what, and when (a global sequence). */
struct done {
	atomic_int calls;
	tpu_status status;
	int seq;
	bool reentered;		/* it ran inside the call that queued it */
};

/* Callbacks that ran inside the call that queued them, in all records so far. */
extern atomic_int reentered_calls;

void done_cb(void *arg, tpu_status st);
/* Wait until each of d[0..n) was called back; false after WAIT_MS in all. */
bool wait_done(struct done *d, int n);

/* On the context thread: queue one op (the in-call flag set around it). */
tpu_status op_writev(struct tpu__conn *c, const struct iovec *iov, unsigned int n,
		     tpu__io_cb cb, void *arg);
tpu_status op_read(struct tpu__conn *c, void *buf, size_t len, tpu__io_cb cb, void *arg);

/* From the test thread: one op each, called back into d. */
tpu_status x_writev(struct tpu_context *ctx, struct tpu__conn *c, const struct iovec *iov,
		    unsigned int n, struct done *d);
tpu_status x_write(struct tpu_context *ctx, struct tpu__conn *c, const void *buf, size_t len,
		   struct done *d);
tpu_status x_read(struct tpu_context *ctx, struct tpu__conn *c, void *buf, size_t len,
		  struct done *d);
tpu_status x_send_fd(struct tpu_context *ctx, struct tpu__conn *c, int fd, struct done *d);
tpu_status x_recv_fd(struct tpu_context *ctx, struct tpu__conn *c, int *fd, struct done *d);
/* Close c (nothing if NULL). */
void x_close(struct tpu_context *ctx, struct tpu__conn *c);
tpu_status x_connect(const struct tpu__xport *xp, struct tpu_context *ctx, const char *addr,
		     struct tpu__conn **out);

/* Accepted connections, filled in on the listening context's thread. */
#define ACCEPTQ_MAX	128

struct acceptq {
	atomic_int n;
	atomic_int errs;
	struct tpu__conn *conns[ACCEPTQ_MAX];
};

/* The listener's accept callback, arg a struct acceptq (full: the connection is closed). */
void accept_fn(void *arg, tpu_status st, struct tpu__conn *conn);
/* Listen with accept_fn into q; the resolved address into addr[size] if addr. */
tpu_status x_listen(const struct tpu__xport *xp, struct tpu_context *ctx, const char *addr,
		    struct acceptq *q, struct tpu__xlistener **out, char *laddr, size_t size);
/* Close l (nothing if NULL). */
void x_lclose(struct tpu_context *ctx, struct tpu__xlistener *l);

/* A listener on sctx that cctx connects to, making pairs. */
struct site {
	const struct tpu__xport *xp;
	struct tpu_context *cctx, *sctx;	/* the connecting side, the listening side */
	struct tpu__xlistener *l;
	char addr[TPU__XPORT_ADDR_MAX];		/* what the listener says to connect to */
	struct acceptq q;
};

struct pair {
	struct tpu_context *cctx, *sctx;
	struct tpu__conn *client, *server;	/* on cctx, sctx */
};

tpu_status site_open(struct site *s, const struct tpu__xport *xp, struct tpu_context *cctx,
		     struct tpu_context *sctx, const char *addr);
void site_close(struct site *s);
/* Connect to s->addr and take the connection accepted for it; false after WAIT_MS. */
bool make_pair(struct site *s, struct pair *p);
void close_pair(struct pair *p);

/* A pseudo-random pattern, the same for the same seed. */
void fill(uint8_t *p, size_t n, uint64_t seed);

/* A context thread's CPU clock and thread id: get_thread_info is a task for tpu__ctx_run_sync. */
struct thread_info {
	clockid_t cpu;
	pid_t tid;
};

void get_thread_info(void *arg);
/* The CPU time on clock id in ns, -1 if unknown. */
int64_t cpu_ns(clockid_t id);

/*
 * CPU milliseconds the context threads of @a and @b used over 300 ms of
 * wall time (after 20 ms to settle), for idle tests; a_ms or b_ms is -1
 * when a thread's clock cannot be read.
 */
struct idle_cpu {
	long long a_ms, b_ms, wall_ms;
};

struct idle_cpu idle_cpu(struct tpu_context *a, struct tpu_context *b);

/* Many small ops queued from one task each side: writes of vals[i] = MANY_BASE + i. */
#define MANY		2000
#define MANY_BASE	0x1000000ull

struct many {
	struct tpu__conn *c;
	uint64_t vals[MANY];
	struct done d[MANY];
	tpu_status ret;
};

/* Tasks for tpu__ctx_run_sync (arg a struct many). */
void many_writes(void *arg);
void many_reads(void *arg);

/* Closing from callbacks: a one-byte read whose callback closes conn and/or other. */
struct closer {
	struct tpu__conn *conn;		/* the read is on this one */
	bool close_own;
	struct tpu__conn *other;	/* closed too, if set */
	char byte;
	struct done d;
};

void closer_cb(void *arg, tpu_status st);
/* Task for tpu__ctx_run_sync: queue the closer's read (arg a struct closer). */
void queue_closer_read(void *arg);

/*
 * Ping-pong driven from callbacks, 64 bytes a message: the initiator sends,
 * the other answers with the first byte one higher, left rounds each.
 * pp_start (a task for tpu__ctx_run_sync, the answering side first) starts one end;
 * finished is set when its rounds are done or an op failed (err).
 */
struct pp {
	struct tpu__conn *c;
	bool initiator;
	int left;
	uint8_t in[64], out[64];
	tpu_status err;
	atomic_int finished;
};

void pp_start(void *arg);

#endif
