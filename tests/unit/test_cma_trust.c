// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Hostile peers against the cma channel.  A forked process speaks the pipe
 * protocol itself, over the real transports (tcp on loopback, shm), with
 * pipe_wire.h's frames: it offers cma with a valid compatibility
 * descriptor, then sends a message whose cma descriptor names memory that
 * is not its own: this process's secret (the victim's), or the secret of a
 * third process of the same user.  The victim must never end up with those
 * bytes: cma is not negotiated (tcp), or the read fails (shm).  A
 * legitimate peer, another process using the library, is served by the
 * same listener afterwards (over cma on shm).
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "channel/channel.h"
#include "cma_viability.h"
#include "pipe_harness.h"
#include "pipe_wire.h"
#include "tap.h"

/* Over TPU_PIPE_INLINE_MAX, so that the tensor may take the channel. */
#define SECRET_LEN	(64u << 10)
#define LEGIT_LEN	(256u << 10)

/* The same address in every process forked from this one. */
static uint8_t secret[SECRET_LEN];

static void pattern(uint8_t *p, size_t n, uint8_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(seed + i * 7 + (i >> 8));
}

/* ---- the hostile peer's transport calls, made synchronous ----------------- */

struct io_wait {
	atomic_int done;
	tpu_status st;
};

struct io_req {
	struct tpu__conn *c;
	bool write;
	void *buf;
	size_t len;
	struct io_wait *w;
	tpu_status ret;
};

static void io_cb(void *arg, tpu_status st)
{
	struct io_wait *w = arg;

	w->st = st;
	atomic_store(&w->done, 1);
}

/* On the context thread, as xport.h wants. */
static void io_task(void *arg)
{
	struct io_req *r = arg;

	if (r->write)
		r->ret = r->c->ops->write(r->c, &(struct iovec){ r->buf, r->len }, 1, io_cb, r->w);
	else
		r->ret = r->c->ops->read(r->c, r->buf, r->len, io_cb, r->w);
}

static tpu_status hostile_io(struct tpu_context *ctx, struct tpu__conn *c, bool write,
			     void *buf, size_t len)
{
	struct io_wait w = { 0 };
	struct io_req r = { .c = c, .write = write, .buf = buf, .len = len, .w = &w };

	tpu__ctx_run_sync(ctx, io_task, &r);
	if (r.ret)
		return r.ret;
	for (int ms = 0; !atomic_load(&w.done); ms++) {
		if (ms > WAIT_S * 1000)
			return -ETIMEDOUT;
		usleep(1000);
	}
	return w.st;
}

static struct tpu__wire_blob blob(const char *s)
{
	return (struct tpu__wire_blob){ (const uint8_t *)s, (uint32_t)strlen(s) };
}

struct connect_req {
	struct tpu_context *ctx;
	const struct tpu__xport *xp;
	const char *addr;
	struct tpu__conn *c;
	tpu_status ret;
};

static void connect_task(void *arg)
{
	struct connect_req *r = arg;

	r->ret = r->xp->connect(r->ctx, r->addr, &r->c);
}

/*
 * The hostile peer: HELLO offering cma (and basic), the WELCOME, then one
 * message of one SECRET_LEN tensor whose cma descriptor names @pid and
 * @addr.  Writes 'C' to @report when cma was chosen, 'N' when not, then
 * waits for the parent to close @report.
 */
static int hostile(const struct tpu__xport *xp, const char *addr, pid_t pid, uint64_t target,
		   int report)
{
	char xcompat[TPU__XPORT_COMPAT_MAX], ccompat[256], bcompat[256], name[64];
	const struct tpu__chan *cma = tpu__chan_by_name("cma", 3);
	const struct tpu__chan *basic = tpu__chan_by_name("basic", 5);
	struct tpu__wire_hello h = { .version = TPU__WIRE_VERSION, .nxports = 1, .nchans = 2 };
	struct tpu__wire_welcome w;
	struct tpu__wire_hdr hdr;
	struct connect_req cr = { .xp = xp, .addr = addr };
	uint8_t hbuf[TPU__WIRE_HDR_LEN], desc[12], *frame, *body;
	long len;
	char verdict;

	if (tpu_context_create(NULL, &cr.ctx) || xp->compat_descriptor(xcompat, sizeof(xcompat)) ||
	    cma->descriptor(cr.ctx, ccompat, sizeof(ccompat)) ||
	    basic->descriptor(cr.ctx, bcompat, sizeof(bcompat)))
		return 2;
	h.xports[0] = (struct tpu__wire_xport_entry){ blob(xp->name), blob(xcompat), { 0 } };
	h.chans[0] = (struct tpu__wire_chan_entry){ blob("cma"), 0, 0, blob(ccompat) };
	h.chans[1] = (struct tpu__wire_chan_entry){ blob("basic"), 0, 0, blob(bcompat) };
	len = tpu__wire_hello_encode(NULL, 0, &h);
	frame = malloc((size_t)len);
	tpu__wire_hello_encode(frame, (size_t)len, &h);
	tpu__ctx_run_sync(cr.ctx, connect_task, &cr);
	if (cr.ret || hostile_io(cr.ctx, cr.c, true, frame, (size_t)len) ||
	    hostile_io(cr.ctx, cr.c, false, hbuf, sizeof(hbuf)) ||
	    tpu__wire_hdr_decode(hbuf, &hdr) || hdr.type != TPU__WIRE_WELCOME)
		return 3;
	free(frame);
	body = malloc(hdr.len);
	if (hostile_io(cr.ctx, cr.c, false, body, hdr.len) ||
	    tpu__wire_welcome_decode(body, hdr.len, &w) || w.status || !w.nchans ||
	    tpu__wire_blob_str(w.chans[0].name, name, sizeof(name)))
		return 4;
	verdict = strcmp(name, "cma") ? 'N' : 'C';
	free(body);

	/* Sent whatever was chosen: a peer that does not follow the rules. */
	tpu__chan_put_le(desc, (uint32_t)pid, 4);
	tpu__chan_put_le(desc + 4, target, 8);
	{
		struct tpu__wire_tensor t = {
			.len = SECRET_LEN, .channel = cma->wire_id,
			.chan_desc = { desc, sizeof(desc) },
		};
		struct tpu__wire_msg m = { .seq = 0, .ntensors = 1, .tensors = &t };

		len = tpu__wire_msg_encode(NULL, 0, &m);
		frame = malloc((size_t)len);
		tpu__wire_msg_encode(frame, (size_t)len, &m);
		if (hostile_io(cr.ctx, cr.c, true, frame, (size_t)len))
			verdict = 'E';
		free(frame);
	}
	if (write(report, &verdict, 1) != 1)
		return 5;
	/* Until the parent is done (EOF). */
	while (read(report, &verdict, 1) > 0)
		;
	_exit(0);
}

/* A third process of the same user: its own secret at the same address. */
static void third(int report)
{
	char b = 'R';

	pattern(secret, SECRET_LEN, 0x55);
	if (write(report, &b, 1) != 1)
		_exit(1);
	while (read(report, &b, 1) > 0)
		;
	_exit(0);
}

/* A legitimate writer: one LEGIT_LEN tensor through the library, then wait for EOF. */
static void legit(const char *url, int report)
{
	struct tpu_context *ctx;
	struct tpu_pipe *p;
	uint8_t *src = malloc(LEGIT_LEN);
	struct tpu_message_tensor t = { .data = src, .len = LEGIT_LEN };
	struct tpu_message m = { .tensors = &t, .ntensors = 1 };
	struct rec w;
	struct tag tw = { &w, 0 };
	char b = 'W';

	rec_init(&w);
	if (!src)
		_exit(1);
	pattern(src, LEGIT_LEN, 0x21);
	if (tpu_context_create(NULL, &ctx) || tpu_pipe_connect(ctx, url, &p) ||
	    tpu_pipe_write(p, &m, on_write, &tw) || !rec_wait(&w, 1) || w.st[0])
		b = 'E';
	if (write(report, &b, 1) != 1)
		_exit(1);
	while (read(report, &b, 1) > 0)
		;
	_exit(0);
}

static void reap(pid_t pid, int fd)
{
	if (fd >= 0)
		close(fd);
	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
}

static char wait_byte(int fd)
{
	struct timeval tv = { .tv_sec = WAIT_S };
	char b = 0;

	ssize_t n;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	do
		n = read(fd, &b, 1);
	while (n < 0 && errno == EINTR);
	if (n != 1)
		tap_diag("cma_trust: no word from a child: %s", n ? strerror(errno) : "EOF");
	return n == 1 ? b : 0;
}

/* What a forked child does; fd is its end of a socket pair with this process. */
struct child_args {
	int kind;		/* 0 third, 1 hostile, 2 legit */
	const struct tpu__xport *xp;
	const char *addr, *url;
	pid_t pid;
	int fd;
};

static void child_main(void *arg)
{
	struct child_args *a = arg;

	if (a->kind == 0)
		third(a->fd);
	else if (a->kind == 1) {
		/* A failure before the verdict is told as its code, for the diagnostics. */
		char code = (char)('0' + hostile(a->xp, a->addr, a->pid,
					      (uint64_t)(uintptr_t)secret, a->fd));

		if (write(a->fd, &code, 1) != 1)
			_exit(1);
		_exit(0);
	} else {
		legit(a->url, a->fd);
	}
}

static pid_t spawn_child(struct child_args *a, int *fd)
{
	int sv[2];
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		return -1;
	pid = fork();
	if (pid == 0) {
		close(sv[0]);
		a->fd = sv[1];
		child_main(a);
		_exit(1);
	}
	close(sv[1]);
	if (pid < 0) {
		close(sv[0]);
		return -1;
	}
	*fd = sv[0];
	return pid;
}

/*
 * One attack on a listener on @url: the hostile peer names the victim's
 * secret (@third false) or a third process's; then a legitimate peer.
 */
static void attack(const char *url, bool use_third)
{
	const char *xname = strncmp(url, "shm", 3) ? "tcp" : "shm";
	const struct tpu__xport *xp = strcmp(xname, "shm") ? &tpu__xport_tcp : &tpu__xport_shm;
	const char *who = use_third ? "a third process" : "the victim";
	uint8_t *want = malloc(SECRET_LEN), *got = calloc(1, SECRET_LEN), *lgot = calloc(1, LEGIT_LEN);
	uint8_t *lwant = malloc(LEGIT_LEN);
	struct tpu_context *ctx = NULL;
	struct tpu_listener *l = NULL;
	struct rec r, rl;
	struct tag ta = { &r, 0 }, td = { &r, 1 }, trd = { &r, 2 };
	struct tag la = { &rl, 0 }, ld = { &rl, 1 }, lrd = { &rl, 2 };
	struct child_args ta_args = { .kind = 0 }, h_args = { .kind = 1 }, l_args = { .kind = 2 };
	pid_t tpid = -1, hpid = -1, lpid = -1;
	int tfd = -1, hfd = -1, lfd = -1;
	char laddr[300], verdict = 0;
	tpu_status read_st = 1;
	bool ok;

	rec_init(&r);
	rec_init(&rl);
	pattern(secret, SECRET_LEN, 0xa3);
	if (want)
		pattern(want, SECRET_LEN, use_third ? 0x55 : 0xa3);
	if (lwant)
		pattern(lwant, LEGIT_LEN, 0x21);
	ok = want && got && lgot && lwant && !tpu_context_create(NULL, &ctx) &&
	     !tpu_listener_create(ctx, &url, 1, &l) &&
	     !tpu_listener_url(l, NULL, laddr, sizeof(laddr)) &&
	     !tpu_listener_accept(l, on_accept, &ta);
	if (ok && use_third) {
		tpid = spawn_child(&ta_args, &tfd);
		ok = tpid > 0 && wait_byte(tfd) == 'R';
	}
	if (ok) {
		h_args.xp = xp;
		h_args.addr = strstr(laddr, "://") + 3;
		h_args.pid = use_third ? tpid : getpid();
		hpid = spawn_child(&h_args, &hfd);
		ok = hpid > 0 && rec_wait(&r, 1);
		verdict = ok ? wait_byte(hfd) : 0;
	}
	/* The pipe may be refused or fail; what matters is what a read would return. */
	if (ok && !r.st[0] && !tpu_pipe_read_descriptor(r.pipe, on_desc, &td) && rec_wait(&r, 2) &&
	    !r.st[1]) {
		struct tpu_message *d = r.msg[1];

		if (d->ntensors == 1 && d->tensors[0].len == SECRET_LEN) {
			d->tensors[0].data = got;
			if (!tpu_pipe_read(r.pipe, d, on_write, &trd) && rec_wait(&r, 3))
				read_st = r.st[2];
		}
	}
	if (read_st != -EPERM && verdict != 'N')
		tap_diag("cma_trust: accept %s, descriptor %s, read %s",
			 tpu_status_name(r.n > 0 ? r.st[0] : 0),
			 tpu_status_name(r.n > 1 ? r.st[1] : 0),
			 tpu_status_name(r.n > 2 ? r.st[2] : 0));
	if (verdict != 'N' && verdict != 'C') {
		int ws = 0;
		pid_t gone = hpid > 0 ? waitpid(hpid, &ws, WNOHANG) : 0;

		tap_diag("cma_trust: the hostile peer stopped early (%c; %s, status 0x%x)",
			 verdict ? verdict : '-', gone > 0 ? "exited" : "running", ws);
		if (gone > 0)
			hpid = -1;
	}
	CHECK(ok && (verdict == 'N' || verdict == 'C') && memcmp(got, want, SECRET_LEN) &&
	      (verdict == 'N' || read_st == -EPERM),
	      "cma_trust_%s_peer_naming_%s_memory_gets_nothing (cma %s, read %s)", xname,
	      use_third ? "third_process" : "victim",
	      verdict == 'C' ? "negotiated" : verdict == 'N' ? "not negotiated" : "?",
	      read_st == 1 ? "not done" : tpu_status_name(read_st));
	if (!strcmp(xname, "tcp"))
		CHECK(ok && verdict == 'N',
		      "cma_trust_tcp_never_negotiates_cma (the kernel proves no pid; against %s)",
		      who);
	if (r.n > 0 && !r.st[0])
		tpu_pipe_close(r.pipe);
	reap(hpid, hfd);
	reap(tpid, tfd);

	/* The same listener serves a legitimate peer, over cma where it is proven. */
	if (ok) {
		l_args.url = laddr;
		ok = !tpu_listener_accept(l, on_accept, &la) &&
		     (lpid = spawn_child(&l_args, &lfd)) > 0 && rec_wait(&rl, 1) && !rl.st[0] &&
		     !tpu_pipe_read_descriptor(rl.pipe, on_desc, &ld) && rec_wait(&rl, 2) &&
		     !rl.st[1] && rl.msg[1]->ntensors == 1 &&
		     rl.msg[1]->tensors[0].len == LEGIT_LEN;
		if (ok) {
			rl.msg[1]->tensors[0].data = lgot;
			ok = !tpu_pipe_read(rl.pipe, rl.msg[1], on_write, &lrd) &&
			     rec_wait(&rl, 3) && !rl.st[2];
		}
	}
	CHECK(ok && !memcmp(lgot, lwant, LEGIT_LEN) &&
	      (strcmp(xname, "shm") ||
	       !strcmp(tpu_pipe_channel(rl.pipe, TPU_DEVICE_CPU, TPU_DEVICE_CPU), "cma")),
	      "cma_trust_%s_listener_still_serves_a_legitimate_peer_after_an_attack_on_%s (%s)",
	      xname, use_third ? "a_third_process" : "the_victim", ok ? tpu_pipe_channel(rl.pipe, TPU_DEVICE_CPU, TPU_DEVICE_CPU) : "-");
	if (rl.n > 0 && !rl.st[0])
		tpu_pipe_close(rl.pipe);
	reap(lpid, lfd);
	tpu_listener_close(l);
	if (ctx)
		tpu_context_destroy(ctx);
	free(want);
	free(got);
	free(lgot);
	free(lwant);
}

void test_cma_trust(void)
{
	char shm[64];
	char why[160];

	if (tpu__cma_viable(why, sizeof(why))) {
		tap_diag("cma_trust: no cma here (%s): skipped", why);
		return;
	}
	attack("tcp://127.0.0.1:0", false);
	attack("tcp://127.0.0.1:0", true);
	snprintf(shm, sizeof(shm), "shm://tpu-unit-cma-trust-%d", (int)getpid());
	attack(shm, false);
	attack(shm, true);
}
