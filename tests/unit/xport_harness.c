// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* What the transport tests share: see xport_harness.h. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "xport_harness.h"

int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void sleep_ms(int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

bool wait_for(atomic_int *v, int want, int ms)
{
	int64_t end = now_ms() + ms;

	while (atomic_load(v) < want) {
		if (now_ms() > end)
			return false;
		sleep_ms(1);
	}
	return true;
}

/* ---- callback records ---------------------------------------------------- */

static atomic_int seq_counter;
atomic_int reentered_calls;

/* Set on a context thread while op_* is inside the transport's call. */
static _Thread_local bool in_call;

void done_cb(void *arg, tpu_status st)
{
	struct done *d = arg;

	if (in_call) {
		d->reentered = true;
		atomic_fetch_add(&reentered_calls, 1);
	}
	d->status = st;
	d->seq = atomic_fetch_add(&seq_counter, 1);
	atomic_fetch_add(&d->calls, 1);
}

bool wait_done(struct done *d, int n)
{
	int64_t end = now_ms() + WAIT_MS;

	for (int i = 0; i < n; i++) {
		while (atomic_load(&d[i].calls) < 1) {
			if (now_ms() > end)
				return false;
			sleep_ms(1);
		}
	}
	return true;
}

/* ---- ops ----------------------------------------------------------------- */

tpu_status op_writev(struct tpu__conn *c, const struct iovec *iov, unsigned int n,
		     tpu__io_cb cb, void *arg)
{
	bool was = in_call;
	tpu_status st;

	in_call = true;
	st = c->ops->write(c, iov, n, cb, arg);
	in_call = was;
	return st;
}

tpu_status op_read(struct tpu__conn *c, void *buf, size_t len, tpu__io_cb cb, void *arg)
{
	bool was = in_call;
	tpu_status st;

	in_call = true;
	st = c->ops->read(c, buf, len, cb, arg);
	in_call = was;
	return st;
}

struct req {
	const struct tpu__xport *xp;
	struct tpu_context *ctx;
	struct tpu__conn *c;
	const struct iovec *iov;
	unsigned int niov;
	void *buf;
	size_t len;
	int fd;
	int *fdp;
	struct done *d;
	const char *addr;
	tpu_status ret;
};

static void req_write(void *arg)
{
	struct req *r = arg;

	r->ret = op_writev(r->c, r->iov, r->niov, done_cb, r->d);
}

static void req_read(void *arg)
{
	struct req *r = arg;

	r->ret = op_read(r->c, r->buf, r->len, done_cb, r->d);
}

static void req_send_fd(void *arg)
{
	struct req *r = arg;

	in_call = true;
	r->ret = r->c->ops->send_fd(r->c, r->fd, done_cb, r->d);
	in_call = false;
}

static void req_recv_fd(void *arg)
{
	struct req *r = arg;

	in_call = true;
	r->ret = r->c->ops->recv_fd(r->c, r->fdp, done_cb, r->d);
	in_call = false;
}

static void req_close(void *arg)
{
	struct req *r = arg;

	r->c->ops->close(r->c);
}

static void req_connect(void *arg)
{
	struct req *r = arg;

	r->ret = r->xp->connect(r->ctx, r->addr, &r->c);
}

tpu_status x_writev(struct tpu_context *ctx, struct tpu__conn *c, const struct iovec *iov,
		    unsigned int n, struct done *d)
{
	struct req r = { .c = c, .iov = iov, .niov = n, .d = d };

	tpu__ctx_run_sync(ctx, req_write, &r);
	return r.ret;
}

tpu_status x_write(struct tpu_context *ctx, struct tpu__conn *c, const void *buf, size_t len,
		   struct done *d)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };

	return x_writev(ctx, c, &iov, 1, d);
}

tpu_status x_read(struct tpu_context *ctx, struct tpu__conn *c, void *buf, size_t len,
		  struct done *d)
{
	struct req r = { .c = c, .buf = buf, .len = len, .d = d };

	tpu__ctx_run_sync(ctx, req_read, &r);
	return r.ret;
}

tpu_status x_send_fd(struct tpu_context *ctx, struct tpu__conn *c, int fd, struct done *d)
{
	struct req r = { .c = c, .fd = fd, .d = d };

	tpu__ctx_run_sync(ctx, req_send_fd, &r);
	return r.ret;
}

tpu_status x_recv_fd(struct tpu_context *ctx, struct tpu__conn *c, int *fd, struct done *d)
{
	struct req r = { .c = c, .fdp = fd, .d = d };

	tpu__ctx_run_sync(ctx, req_recv_fd, &r);
	return r.ret;
}

void x_close(struct tpu_context *ctx, struct tpu__conn *c)
{
	struct req r = { .c = c };

	if (c)
		tpu__ctx_run_sync(ctx, req_close, &r);
}

tpu_status x_connect(const struct tpu__xport *xp, struct tpu_context *ctx, const char *addr,
		     struct tpu__conn **out)
{
	struct req r = { .xp = xp, .ctx = ctx, .addr = addr };

	tpu__ctx_run_sync(ctx, req_connect, &r);
	*out = r.c;
	return r.ret;
}

/* ---- listeners ----------------------------------------------------------- */

void accept_fn(void *arg, tpu_status st, struct tpu__conn *conn)
{
	struct acceptq *q = arg;
	int i = atomic_load(&q->n);

	if (st) {
		atomic_fetch_add(&q->errs, 1);
		return;
	}
	if (i == ACCEPTQ_MAX) {
		conn->ops->close(conn);
		return;
	}
	q->conns[i] = conn;
	atomic_store(&q->n, i + 1);
}

struct lreq {
	const struct tpu__xport *xp;
	struct tpu_context *ctx;
	const char *addr;
	struct acceptq *q;
	struct tpu__xlistener *l;
	tpu_status ret;
	char laddr[TPU__XPORT_ADDR_MAX];
};

static void req_listen(void *arg)
{
	struct lreq *r = arg;

	r->ret = r->xp->listen(r->ctx, r->addr, accept_fn, r->q, &r->l);
	if (!r->ret)
		snprintf(r->laddr, sizeof(r->laddr), "%s", r->l->ops->addr(r->l));
}

static void req_lclose(void *arg)
{
	struct lreq *r = arg;

	r->l->ops->close(r->l);
}

tpu_status x_listen(const struct tpu__xport *xp, struct tpu_context *ctx, const char *addr,
		    struct acceptq *q, struct tpu__xlistener **out, char *laddr, size_t size)
{
	struct lreq r = { .xp = xp, .ctx = ctx, .addr = addr, .q = q };

	tpu__ctx_run_sync(ctx, req_listen, &r);
	*out = r.l;
	if (laddr)
		snprintf(laddr, size, "%s", r.laddr);
	return r.ret;
}

void x_lclose(struct tpu_context *ctx, struct tpu__xlistener *l)
{
	struct lreq r = { .l = l };

	if (l)
		tpu__ctx_run_sync(ctx, req_lclose, &r);
}

/* ---- sites and pairs ----------------------------------------------------- */

tpu_status site_open(struct site *s, const struct tpu__xport *xp, struct tpu_context *cctx,
		     struct tpu_context *sctx, const char *addr)
{
	s->xp = xp;
	s->cctx = cctx;
	s->sctx = sctx;
	return x_listen(xp, sctx, addr, &s->q, &s->l, s->addr, sizeof(s->addr));
}

void site_close(struct site *s)
{
	x_lclose(s->sctx, s->l);
	s->l = NULL;
}

bool make_pair(struct site *s, struct pair *p)
{
	int before = atomic_load(&s->q.n);

	p->cctx = s->cctx;
	p->sctx = s->sctx;
	p->server = NULL;
	if (x_connect(s->xp, s->cctx, s->addr, &p->client))
		return false;
	if (!wait_for(&s->q.n, before + 1, WAIT_MS)) {
		x_close(s->cctx, p->client);
		return false;
	}
	p->server = s->q.conns[before];
	return true;
}

void close_pair(struct pair *p)
{
	x_close(p->cctx, p->client);
	x_close(p->sctx, p->server);
}

/* ---- patterns, descriptors, threads -------------------------------------- */

void fill(uint8_t *p, size_t n, uint64_t seed)
{
	/* xorshift64, eight bytes a step: 64 MiB is filled quickly even under valgrind. */
	seed |= 1;
	for (size_t i = 0; i < n; i += 8) {
		seed ^= seed << 13;
		seed ^= seed >> 7;
		seed ^= seed << 17;
		memcpy(p + i, &seed, n - i < 8 ? n - i : 8);
	}
}

void get_thread_info(void *arg)
{
	struct thread_info *t = arg;

	pthread_getcpuclockid(pthread_self(), &t->cpu);
	t->tid = (pid_t)syscall(SYS_gettid);
}

int64_t cpu_ns(clockid_t id)
{
	struct timespec ts;

	if (clock_gettime(id, &ts))
		return -1;
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

struct idle_cpu idle_cpu(struct tpu_context *a, struct tpu_context *b)
{
	struct thread_info ta, tb;
	int64_t a0, b0, w0;
	struct idle_cpu r;

	tpu__ctx_run_sync(a, get_thread_info, &ta);
	tpu__ctx_run_sync(b, get_thread_info, &tb);
	sleep_ms(20);
	w0 = now_ms();
	a0 = cpu_ns(ta.cpu);
	b0 = cpu_ns(tb.cpu);
	sleep_ms(300);
	r.a_ms = a0 < 0 ? -1 : (cpu_ns(ta.cpu) - a0) / 1000000;
	r.b_ms = b0 < 0 ? -1 : (cpu_ns(tb.cpu) - b0) / 1000000;
	r.wall_ms = now_ms() - w0;
	return r;
}

/* ---- many ops, closers, ping-pong ---------------------------------------- */

void many_writes(void *arg)
{
	struct many *m = arg;

	for (int i = 0; i < MANY; i++) {
		struct iovec iov = { &m->vals[i], sizeof(m->vals[i]) };

		m->vals[i] = MANY_BASE + (uint64_t)i;
		m->ret |= op_writev(m->c, &iov, 1, done_cb, &m->d[i]);
	}
}

void many_reads(void *arg)
{
	struct many *m = arg;

	for (int i = 0; i < MANY; i++)
		m->ret |= op_read(m->c, &m->vals[i], sizeof(m->vals[i]), done_cb, &m->d[i]);
}

void closer_cb(void *arg, tpu_status st)
{
	struct closer *c = arg;

	if (c->close_own)
		c->conn->ops->close(c->conn);
	if (c->other)
		c->other->ops->close(c->other);
	done_cb(&c->d, st);
}

void queue_closer_read(void *arg)
{
	struct closer *c = arg;

	if (op_read(c->conn, &c->byte, 1, closer_cb, c))
		done_cb(&c->d, -EIO);
}

static void pp_read_cb(void *arg, tpu_status st);

static void pp_write_cb(void *arg, tpu_status st)
{
	struct pp *p = arg;

	if (st && !p->err)
		p->err = st;
}

/* Send what came in, one higher; then, if asked, wait for the answer. */
static void pp_send(struct pp *p, bool then_read)
{
	struct iovec iov = { p->out, sizeof(p->out) };

	memcpy(p->out, p->in, sizeof(p->out));
	p->out[0]++;
	if (p->c->ops->write(p->c, &iov, 1, pp_write_cb, p) ||
	    (then_read && p->c->ops->read(p->c, p->in, sizeof(p->in), pp_read_cb, p))) {
		p->err = -EIO;
		atomic_store(&p->finished, 1);
	}
}

static void pp_read_cb(void *arg, tpu_status st)
{
	struct pp *p = arg;

	if (st) {
		p->err = st;
		atomic_store(&p->finished, 1);
		return;
	}
	if (p->initiator) {
		if (--p->left == 0)
			atomic_store(&p->finished, 1);
		else
			pp_send(p, true);
		return;
	}
	pp_send(p, --p->left > 0);
	if (!p->left)
		atomic_store(&p->finished, 1);
}

void pp_start(void *arg)
{
	struct pp *p = arg;

	if (p->initiator) {
		pp_send(p, true);
	} else if (p->c->ops->read(p->c, p->in, sizeof(p->in), pp_read_cb, p)) {
		p->err = -EIO;
		atomic_store(&p->finished, 1);
	}
}
