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
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "channel/channel.h"
#include "cuda_harness.h"
#include "cma_viability.h"
#include "pipe_wire.h"
#include "remote/remote.h"
#include "shm.h"
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

static void close_task(void *arg)
{
	struct tpu__conn *c = arg;

	c->ops->close(c);
}

/* A hostile peer's end of a pipe: its context, its connection, its next MSG's seq. */
struct hostile {
	struct tpu_context *ctx;
	struct tpu__conn *c;
	const struct tpu__chan *chan;	/* the channel it offers (besides basic) */
	uint32_t src, dst;		/* for this device pair */
	uint64_t seq;
};

/*
 * Connect over @xp to @addr and set a pipe up as a connector would: HELLO
 * offering channel @chan for device pair @src -> @dst (with a valid
 * compatibility descriptor) and basic, then the WELCOME.  0 and whether
 * @chan was chosen for that pair, or a nonzero code.
 */
static int hostile_open_chan(struct hostile *hp, const struct tpu__xport *xp, const char *addr,
			     const char *chan, uint32_t src, uint32_t dst, bool *chosen)
{
	char xcompat[TPU__XPORT_COMPAT_MAX], ccompat[256], bcompat[256], name[64];
	const struct tpu__chan *basic = tpu__chan_by_name("basic", 5);
	struct tpu__wire_hello h = { .version = TPU__WIRE_VERSION, .nxports = 1, .nchans = 2 };
	struct tpu__wire_welcome w;
	struct tpu__wire_hdr hdr;
	struct connect_req cr = { .xp = xp, .addr = addr };
	uint8_t hbuf[TPU__WIRE_HDR_LEN], *frame, *body;
	long len;

	memset(hp, 0, sizeof(*hp));
	hp->chan = tpu__chan_by_name(chan, strlen(chan));
	hp->src = src;
	hp->dst = dst;
	if (tpu_context_create(NULL, &cr.ctx) || xp->compat_descriptor(xcompat, sizeof(xcompat)) ||
	    hp->chan->descriptor(cr.ctx, ccompat, sizeof(ccompat)) ||
	    basic->descriptor(cr.ctx, bcompat, sizeof(bcompat)))
		return 2;
	hp->ctx = cr.ctx;
	h.xports[0] = (struct tpu__wire_xport_entry){ blob(xp->name), blob(xcompat), { 0 } };
	h.chans[0] = (struct tpu__wire_chan_entry){ blob(chan), src, dst, blob(ccompat) };
	h.chans[1] = (struct tpu__wire_chan_entry){ blob("basic"), 0, 0, blob(bcompat) };
	len = tpu__wire_hello_encode(NULL, 0, &h);
	frame = malloc((size_t)len);
	tpu__wire_hello_encode(frame, (size_t)len, &h);
	tpu__ctx_run_sync(cr.ctx, connect_task, &cr);
	hp->c = cr.c;
	if (cr.ret || hostile_io(cr.ctx, cr.c, true, frame, (size_t)len) ||
	    hostile_io(cr.ctx, cr.c, false, hbuf, sizeof(hbuf)) ||
	    tpu__wire_hdr_decode(hbuf, &hdr) || hdr.type != TPU__WIRE_WELCOME)
		return 3;
	free(frame);
	body = malloc(hdr.len);
	if (hostile_io(cr.ctx, cr.c, false, body, hdr.len) ||
	    tpu__wire_welcome_decode(body, hdr.len, &w) || w.status)
		return 4;
	*chosen = false;
	for (uint32_t i = 0; i < w.nchans; i++)
		if (w.chans[i].src_type == src && w.chans[i].dst_type == dst &&
		    !tpu__wire_blob_str(w.chans[i].name, name, sizeof(name)) && !strcmp(name, chan))
			*chosen = true;
	free(body);
	return 0;
}

/* The same with cma for CPU tensors. */
static int hostile_open(struct hostile *hp, const struct tpu__xport *xp, const char *addr,
			bool *cma_chosen)
{
	return hostile_open_chan(hp, xp, addr, "cma", TPU_DEVICE_CPU, TPU_DEVICE_CPU, cma_chosen);
}

/*
 * A MSG with @meta and, if @len, one tensor of @len bytes on the hostile's
 * channel with descriptor @desc (sent whatever channel was chosen: a peer
 * that does not follow the rules).
 */
static tpu_status hostile_send_desc(struct hostile *hp, const void *meta, size_t meta_len,
				    uint64_t len, const uint8_t *desc, uint32_t desc_len)
{
	struct tpu__wire_tensor t = {
		.len = len, .src_type = hp->src, .dst_type = hp->dst,
		.channel = hp->chan->wire_id, .chan_desc = { desc, desc_len },
	};
	struct tpu__wire_msg m = {
		.seq = hp->seq++, .meta = { meta, (uint32_t)meta_len },
		.ntensors = len ? 1 : 0, .tensors = len ? &t : NULL,
	};
	uint8_t *frame;
	long n;
	tpu_status st;

	n = tpu__wire_msg_encode(NULL, 0, &m);
	if (n < 0)
		return (tpu_status)n;
	frame = malloc((size_t)n);
	if (!frame)
		return -ENOMEM;
	tpu__wire_msg_encode(frame, (size_t)n, &m);
	st = hostile_io(hp->ctx, hp->c, true, frame, (size_t)n);
	free(frame);
	return st;
}

/* The same with a cma descriptor naming @pid and @target. */
static tpu_status hostile_send(struct hostile *hp, const void *meta, size_t meta_len,
			       uint64_t len, pid_t pid, uint64_t target)
{
	uint8_t desc[12];

	tpu__chan_put_le(desc, (uint32_t)pid, 4);
	tpu__chan_put_le(desc + 4, target, 8);
	return hostile_send_desc(hp, meta, meta_len, len, desc, sizeof(desc));
}

/*
 * The next MSG from the victim that carries no payload or tensor: its
 * body in *body (the caller frees it), its metadata in *meta.
 */
static tpu_status hostile_recv(struct hostile *hp, uint8_t **body, struct tpu__wire_blob *meta)
{
	uint8_t hbuf[TPU__WIRE_HDR_LEN];
	struct tpu__wire_hdr hdr;
	struct tpu__wire_msg m = { 0 };
	uint32_t np, nt;
	tpu_status st;

	*body = NULL;
	st = hostile_io(hp->ctx, hp->c, false, hbuf, sizeof(hbuf));
	if (!st)
		st = tpu__wire_hdr_decode(hbuf, &hdr);
	if (!st && hdr.type != TPU__WIRE_MSG)
		st = -EPROTO;
	if (!st) {
		*body = malloc(hdr.len);
		st = *body ? hostile_io(hp->ctx, hp->c, false, *body, hdr.len) : -ENOMEM;
	}
	if (!st)
		st = tpu__wire_msg_counts(*body, hdr.len, &np, &nt);
	if (!st && (np || nt))
		st = -EPROTO;
	if (!st)
		st = tpu__wire_msg_decode(*body, hdr.len, &m);
	*meta = m.meta;
	return st;
}

/* Tell the parent @verdict, then wait until it is done (EOF). */
static void hostile_wait(int report, char verdict)
{
	if (write(report, &verdict, 1) != 1)
		_exit(1);
	while (read(report, &verdict, 1) > 0)
		;
	_exit(0);
}

/*
 * The hostile pipe peer: one message of one SECRET_LEN tensor whose cma
 * descriptor names @pid and @target.  Tells 'C' when cma was chosen, 'N'
 * when not.
 */
static int hostile(const struct tpu__xport *xp, const char *addr, pid_t pid, uint64_t target,
		   int report)
{
	struct hostile hp;
	bool cma_chosen = false;
	int rc = hostile_open(&hp, xp, addr, &cma_chosen);

	if (rc)
		return rc;
	if (hostile_send(&hp, NULL, 0, SECRET_LEN, pid, target))
		return 5;
	hostile_wait(report, cma_chosen ? 'C' : 'N');
	return 0;
}

/*
 * The hostile worker of a remote rendezvous: it connects to the victim's
 * rendezvous, says HELLO as task @task, waits for the victim's REQ and
 * answers it with a tensor whose cma descriptor names the victim's
 * secret.  Tells 'H' after its HELLO, then 'A' after its answer.
 */
static int hostile_worker(const char *addr, const char *task, pid_t victim, int report)
{
	uint8_t hello[512], resp[64], *body;
	struct remote_hdr h = { .type = REMOTE_HELLO, .key = (const uint8_t *)task,
				.key_len = strlen(task) };
	struct tpu__wire_blob meta;
	struct hostile hp;
	bool cma_chosen = false;
	int rc = hostile_open(&hp, &tpu__xport_shm, addr, &cma_chosen);
	char b = 'H';

	if (rc)
		return rc;
	if (!cma_chosen)
		return 6;
	tpu__remote_wire_put(&h, hello);
	if (hostile_send(&hp, hello, tpu__remote_wire_size(h.key_len), 0, 0, 0) ||
	    write(report, &b, 1) != 1)
		return 7;
	for (;;) {
		if (hostile_recv(&hp, &body, &meta) || tpu__remote_wire_get(meta.data, meta.len, &h))
			return 8;
		free(body);
		if (h.type == REMOTE_REQ)
			break;
	}
	h = (struct remote_hdr){ .type = REMOTE_RESP, .id = h.id, .len = SECRET_LEN };
	tpu__remote_wire_put(&h, resp);
	if (hostile_send(&hp, resp, tpu__remote_wire_size(0), SECRET_LEN, victim,
			 (uint64_t)(uintptr_t)secret))
		return 9;
	hostile_wait(report, 'A');
	return 0;
}

/*
 * cuda_ipc's descriptor (chan_cuda_ipc.c): IPC handle (64 bytes), offset,
 * pid, device, address, kind (0: an IPC handle), descriptor, mapping size.
 */
#define IPC_D_PID	72
#define IPC_D_ADDRESS	80
#define IPC_DESC_LEN	104
#define CUDA_LEN	4096

/*
 * The hostile cuda_ipc peer: one message of one CUDA_LEN tensor from CUDA
 * memory whose descriptor names @pid and device address @target.  Tells
 * 'C' when cuda_ipc was chosen, 'N' when not.
 */
static int hostile_cuda(const struct tpu__xport *xp, const char *addr, pid_t pid,
			uint64_t target, int report)
{
	uint8_t desc[IPC_DESC_LEN] = { 0 };
	struct hostile hp;
	bool chosen = false;
	int rc = hostile_open_chan(&hp, xp, addr, "cuda_ipc", TPU_DEVICE_CUDA, TPU_DEVICE_CPU,
				   &chosen);

	if (rc)
		return rc;
	tpu__chan_put_le(desc + IPC_D_PID, (uint32_t)pid, 4);
	tpu__chan_put_le(desc + IPC_D_ADDRESS, target, 8);
	if (hostile_send_desc(&hp, NULL, 0, CUDA_LEN, desc, sizeof(desc)))
		return 5;
	hostile_wait(report, chosen ? 'C' : 'N');
	return 0;
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
	int kind;		/* 0 third, 1 hostile, 2 legit, 3 hostile worker, 4 cuda */
	uint64_t target;	/* 4: the device address */
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
	} else if (a->kind == 4) {
		char code = (char)('0' + hostile_cuda(a->xp, a->addr, a->pid, a->target, a->fd));

		if (write(a->fd, &code, 1) != 1)
			_exit(1);
		_exit(0);
	} else if (a->kind == 3) {
		char code = (char)('0' + hostile_worker(a->addr, a->url, a->pid, a->fd));

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

static void recv_done(void *arg, tpu_status st, size_t len)
{
	struct tag *t = arg;

	(void)len;
	rec_post(t, st, NULL);
}

/*
 * The remote rendezvous: a hostile process joins as a worker of the map
 * (its HELLO), and answers this worker's receive with a tensor whose cma
 * descriptor names this process's secret.  The receive must not complete
 * with those bytes.
 */
static void remote_forged_answer(void)
{
	static const char me[] = "/job:trust/replica:0/task:0";
	static const char them[] = "/job:trust/replica:0/task:1";
	char url[96], nobody[96], laddr[300], key[512];
	const char *urls[1] = { url };
	struct tpu_remote_task peers[1] = { { them, nobody } };
	struct tpu_remote_options o = { .task = me, .listen_urls = urls, .nlisten = 1,
					.peers = peers, .npeers = 1 };
	char s[96], d[96];
	struct tpu_key k = { .src_incarnation = 1,
			     .src_device = { s, 0 }, .dst_device = { d, 0 },
			     .edge_name = { "forged", 6 } };
	uint8_t *got = calloc(1, SECRET_LEN), *want = malloc(SECRET_LEN);
	struct tpu_tensor dst = { .data = got, .len = SECRET_LEN };
	struct child_args h_args = { .kind = 3 };
	struct tpu_context *ctx = NULL;
	struct tpu_rendezvous *rdv = NULL;
	const char *tr = "", *ch = "";
	struct rec r;
	struct tag tr_tag = { &r, 0 };
	size_t klen = 0;
	pid_t hpid = -1;
	int hfd = -1;
	char said = 0, answered = 0;
	bool ok;

	rec_init(&r);
	snprintf(url, sizeof(url), "shm://tpu-unit-cma-trust-rv-%d", (int)getpid());
	snprintf(nobody, sizeof(nobody), "shm://tpu-unit-cma-trust-nobody-%d", (int)getpid());
	snprintf(s, sizeof(s), "%s/device:CPU:0", them);
	snprintf(d, sizeof(d), "%s/device:CPU:0", me);
	k.src_device.len = strlen(s);
	k.dst_device.len = strlen(d);
	pattern(secret, SECRET_LEN, 0xa3);
	if (want)
		pattern(want, SECRET_LEN, 0xa3);
	ok = got && want && !tpu_key_build(&k, key, sizeof(key), &klen) &&
	     !tpu_context_create(NULL, &ctx) && !tpu_rendezvous_create_remote(ctx, &o, &rdv) &&
	     !tpu_rendezvous_url(rdv, "shm", laddr, sizeof(laddr));
	if (ok) {
		h_args.addr = strstr(laddr, "://") + 3;
		h_args.url = them;
		h_args.pid = getpid();
		hpid = spawn_child(&h_args, &hfd);
		ok = hpid > 0 && (said = wait_byte(hfd)) == 'H';
	}
	/* Its pipe is adopted for requests to its task once its HELLO was read. */
	for (int ms = 0; ok && ms < WAIT_S * 1000; ms += 5) {
		if (!tpu_rendezvous_peer_path(rdv, them, &tr, &ch) && !strcmp(ch, "cma"))
			break;
		usleep(5000);
	}
	ok = ok && !strcmp(ch, "cma");
	/*
	 * Since the remote rendezvous asks only over pipes it dialled itself
	 * (to the map's URL for the task, where nobody listens here), the
	 * hostile worker's pipe never carries the request: it cannot answer at
	 * all, and the receive ends at its timeout with nothing written.
	 */
	if (ok)
		ok = !tpu_rendezvous_recv(rdv, key, klen, &dst, 1000000000ull, recv_done,
					  &tr_tag);
	if (ok)
		ok = rec_wait(&r, 1);
	CHECK(ok && r.st[0] && memcmp(got, want, SECRET_LEN),
	      "cma_trust_remote_forged_answer_naming_the_receivers_memory_fails (hostile %c%c, "
	      "channel %s, receive %s)", said ? said : '-', answered ? answered : '-', ch,
	      r.n ? tpu_status_name(r.st[0]) : "not done");
	reap(hpid, hfd);
	tpu_rendezvous_destroy(rdv);
	if (ctx)
		tpu_context_destroy(ctx);
	free(got);
	free(want);
}

/*
 * cuda_ipc: a hostile peer names this process's pid and a device address of
 * its own memory (the copy between two pipes of one process), over tcp
 * and over shm.  The reader must not end up with those bytes.
 */
static void cuda_ipc_attack(const char *url)
{
	const char *xname = strncmp(url, "shm", 3) ? "tcp" : "shm";
	const struct tpu__xport *xp = strcmp(xname, "shm") ? &tpu__xport_tcp : &tpu__xport_shm;
	tpu__cu_ptr d = dev_filled(0, CUDA_LEN, 77);
	uint8_t *got = calloc(1, CUDA_LEN);
	struct child_args h_args = { .kind = 4 };
	struct tpu_context *ctx = NULL;
	struct tpu_listener *l = NULL;
	struct rec r;
	struct tag ta = { &r, 0 }, td = { &r, 1 }, trd = { &r, 2 };
	tpu_status read_st = 1;
	char laddr[300], verdict = 0;
	pid_t hpid = -1;
	int hfd = -1;
	bool ok;

	rec_init(&r);
	ok = d && got && !tpu_context_create(NULL, &ctx) &&
	     !tpu_listener_create(ctx, &url, 1, &l) &&
	     !tpu_listener_url(l, NULL, laddr, sizeof(laddr)) &&
	     !tpu_listener_accept(l, on_accept, &ta);
	if (ok) {
		h_args.xp = xp;
		h_args.addr = strstr(laddr, "://") + 3;
		h_args.pid = getpid();
		h_args.target = (uint64_t)d;
		hpid = spawn_child(&h_args, &hfd);
		ok = hpid > 0 && rec_wait(&r, 1);
		verdict = ok ? wait_byte(hfd) : 0;
	}
	if (ok && !r.st[0] && !tpu_pipe_read_descriptor(r.pipe, on_desc, &td) && rec_wait(&r, 2) &&
	    !r.st[1]) {
		struct tpu_message *m = r.msg[1];

		if (m->ntensors == 1 && m->tensors[0].len == CUDA_LEN) {
			m->tensors[0].data = got;
			if (!tpu_pipe_read(r.pipe, m, on_write, &trd) && rec_wait(&r, 3))
				read_st = r.st[2];
		}
	}
	CHECK(ok && (verdict == 'N' || verdict == 'C') && !pat_holds(got, CUDA_LEN, 77) &&
	      (verdict == 'N' || read_st == -EPERM),
	      "cma_trust_cuda_ipc_%s_peer_naming_the_readers_device_memory_gets_nothing "
	      "(cuda_ipc %s, read %s)", xname,
	      verdict == 'C' ? "negotiated" : verdict == 'N' ? "not negotiated" : "?",
	      read_st == 1 ? "not done" : tpu_status_name(read_st));
	if (!strcmp(xname, "tcp"))
		CHECK(ok && verdict == 'N', "cma_trust_cuda_ipc_never_negotiated_over_tcp");
	if (r.n > 0 && !r.st[0])
		tpu_pipe_close(r.pipe);
	reap(hpid, hfd);
	tpu_listener_close(l);
	if (ctx)
		tpu_context_destroy(ctx);
	if (d) {
		tpu__cuda_enter(0);
		cu->mem_free(d);
	}
	free(got);
}

struct peer_pid_req {
	struct tpu__conn *c;
	int pid;
};

static void peer_pid_task(void *arg)
{
	struct peer_pid_req *r = arg;

	r->pid = r->c->ops->peer_pid(r->c);
}

/*
 * The shm listener's end in process B, which answers the handshake by hand;
 * the listening socket was made by B's parent A, which then exited.
 */
static void handed_on_b(int l, int report)
{
	struct shm_hs hs, w = { .magic = SHM_HS_MAGIC, .version = SHM_HS_VERSION,
				.type = SHM_HS_WELCOME };
	struct shm_msg m;
	int s = accept(l, NULL, NULL), fds[SHM_MAX_FDS], e = eventfd(0, EFD_CLOEXEC);
	unsigned int n;
	char b = 'W';

	tpu__shm_msg_prepare(&m, &hs, sizeof(hs), true);
	if (s < 0 || e < 0 || recvmsg(s, &m.msg, MSG_CMSG_CLOEXEC) != (ssize_t)sizeof(hs))
		_exit(1);
	n = tpu__shm_msg_take_fds(&m, fds, SHM_MAX_FDS);
	tpu__shm_close_fds(fds, n);
	tpu__shm_msg_prepare(&m, &w, sizeof(w), false);
	tpu__shm_msg_put_fds(&m, &e, 1);
	if (sendmsg(s, &m.msg, MSG_NOSIGNAL) != (ssize_t)sizeof(w))
		_exit(2);
	if (write(report, &b, 1) != 1)
		_exit(3);
	while (read(report, &b, 1) > 0)
		;
	_exit(0);
}

/* Whether this kernel (and valgrind, if under it) has SO_PEERPIDFD and pidfd_send_signal. */
static bool have_peer_pidfd(void)
{
#if defined(SYS_pidfd_send_signal)
	int sv[2], pidfd = -1;
	socklen_t len = sizeof(pidfd);
	bool ok;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		return false;
	ok = !getsockopt(sv[0], SOL_SOCKET, 77 /* SO_PEERPIDFD */, &pidfd, &len) &&
	     pidfd >= 0 && !syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0);
	if (pidfd >= 0)
		close(pidfd);
	close(sv[0]);
	close(sv[1]);
	return ok;
#else
	return false;
#endif
}

/*
 * SO_PEERCRED gives the connector the pid of the process that called
 * listen().  When that process is gone (its socket handed on), the pid
 * may belong to anyone of our user by now: the connection must not name it.
 */
static void handed_on_listener(void)
{
	char name[64];
	struct sockaddr_un sa;
	struct connect_req cr = { .xp = &tpu__xport_shm, .addr = name };
	struct peer_pid_req pr = { 0 };
	socklen_t len;
	int sv[2] = { -1, -1 }, status = 0;
	pid_t a = -1, b = -1;
	bool ok;

	if (!have_peer_pidfd()) {
		tap_diag("cma_trust: no SO_PEERPIDFD or pidfd_send_signal here (Linux < 6.5, or "
			 "valgrind): the handed-on listener case skipped");
		return;
	}
	snprintf(name, sizeof(name), "tpu-unit-cma-trust-ho-%d", (int)getpid());
	ok = !tpu__shm_sockaddr(name, &sa, &len) &&
	     !socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv);
	if (ok) {
		a = fork();
		if (a == 0) {
			int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

			close(sv[0]);
			if (l < 0 || bind(l, (struct sockaddr *)&sa, len) || listen(l, 4))
				_exit(1);
			b = fork();
			if (b == 0)
				handed_on_b(l, sv[1]);
			/* B's pid, for the parent to reap it. */
			if (write(sv[1], &b, sizeof(b)) != (ssize_t)sizeof(b))
				_exit(2);
			_exit(0);
		}
		close(sv[1]);
		sv[1] = -1;
		ok = a > 0 && waitpid(a, &status, 0) == a && WIFEXITED(status) &&
		     !WEXITSTATUS(status) && read(sv[0], &b, sizeof(b)) == (ssize_t)sizeof(b);
	}
	ok = ok && !tpu_context_create(NULL, &cr.ctx);
	if (ok) {
		tpu__ctx_run_sync(cr.ctx, connect_task, &cr);
		ok = !cr.ret && wait_byte(sv[0]) == 'W';
	}
	if (ok) {
		/* The connector took the credentials when its connect completed, before B answered. */
		pr.c = cr.c;
		tpu__ctx_run_sync(cr.ctx, peer_pid_task, &pr);
	}
	CHECK(ok && pr.pid == 0,
	      "cma_trust_shm_connector_does_not_name_a_listener_that_exited (listen()ed by %d, "
	      "now %d)", (int)a, pr.pid);
	if (cr.c)
		tpu__ctx_run_sync(cr.ctx, close_task, cr.c);
	if (cr.ctx)
		tpu_context_destroy(cr.ctx);
	if (sv[0] >= 0)
		close(sv[0]);
	if (b > 0) {
		kill(b, SIGKILL);
		waitpid(b, NULL, 0);
	}
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
	handed_on_listener();
	remote_forged_answer();
	if (cuda_harness_open("cma_trust")) {
		snprintf(shm, sizeof(shm), "shm://tpu-unit-cma-trust-cu-%d", (int)getpid());
		cuda_ipc_attack("tcp://127.0.0.1:0");
		cuda_ipc_attack(shm);
		cuda_harness_close();
	}
}
