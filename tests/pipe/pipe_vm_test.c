// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Pipes between two processes with the module loaded: the negotiation
 * moves a tcp:// pipe to shm and the kmod channel, tensors cross through
 * /dev/tensorpipe byte for byte, a given buffer's pages reach a reader
 * that asks for a buffer, and a writer whose peer dies gets its callbacks.
 * Runs in the VM (tests/vm/run.sh -m kmod/tensorpipe.ko -- tests/pipe/
 * pipe_vm_test) and on bare metal after insmod; without the module the
 * kmod cases are skipped, the others still run.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <tpu_user.h>

#include "tap.h"

#define WAIT_S		60	/* the VM is emulated */
#define BIG		(4u << 20)

struct waiter {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int count;
	tpu_status status;		/* last status seen */
	struct tpu_message *desc;
	struct tpu_pipe *pipe;
	/* What a read's callback saw: the descriptor is gone once it returns. */
	size_t npl, nt;
	struct tpu_payload pl[8];
	struct tpu_message_tensor t[8];
};

static void waiter_init(struct waiter *w)
{
	memset(w, 0, sizeof(*w));
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
}

static void waiter_post(struct waiter *w, tpu_status st)
{
	pthread_mutex_lock(&w->lock);
	w->count++;
	w->status = st;
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

/* Wait until @n posts came; false on timeout. */
static bool waiter_wait(struct waiter *w, int n)
{
	struct timespec until;
	bool ok = true;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += WAIT_S;
	pthread_mutex_lock(&w->lock);
	while (w->count < n && ok)
		ok = pthread_cond_timedwait(&w->cond, &w->lock, &until) == 0;
	ok = w->count >= n;
	pthread_mutex_unlock(&w->lock);
	return ok;
}

static void on_accept(void *arg, tpu_status st, struct tpu_pipe *p)
{
	struct waiter *w = arg;

	w->pipe = p;
	waiter_post(w, st);
}

static void on_write(void *arg, tpu_status st, struct tpu_message *m)
{
	(void)m;
	waiter_post(arg, st);
}

static void on_desc(void *arg, tpu_status st, struct tpu_message *m)
{
	struct waiter *w = arg;

	w->desc = m;
	waiter_post(w, st);
}

static void on_read(void *arg, tpu_status st, struct tpu_message *m)
{
	struct waiter *w = arg;

	w->npl = m->npayloads < 8 ? m->npayloads : 8;
	w->nt = m->ntensors < 8 ? m->ntensors : 8;
	for (size_t i = 0; i < w->npl; i++)
		w->pl[i] = (struct tpu_payload){ .data = m->payloads[i].data,
						.len = m->payloads[i].len };
	for (size_t i = 0; i < w->nt; i++)
		w->t[i] = (struct tpu_message_tensor){ .data = m->tensors[i].data,
						       .len = m->tensors[i].len,
						       .buffer = m->tensors[i].buffer };
	waiter_post(w, st);
}

static bool have_module(void)
{
	return access(TPU_DEVICE_PATH, R_OK | W_OK) == 0;
}

static void fill(uint8_t *p, size_t n, unsigned int seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 131 + seed);
}

static bool check(const uint8_t *p, size_t n, unsigned int seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (uint8_t)(i * 131 + seed))
			return false;
	return true;
}

/*
 * The child: listen on tcp and shm, accept one pipe, then echo: each
 * message read (tensors into buffers when asked to via metadata "buf"),
 * then written back with the same bytes.  Exits when the pipe closes.
 */
static int child_echo(int sock)
{
	struct tpu_context *ctx;
	struct tpu_listener *l;
	struct waiter acc, w;
	char shm[64], url[300];
	const char *urls[2];
	int rc = 1;

	snprintf(shm, sizeof(shm), "shm://pipe-vm-%d", (int)getpid());
	urls[0] = "tcp://127.0.0.1:0";
	urls[1] = shm;
	waiter_init(&acc);
	if (tpu_context_create(NULL, &ctx))
		return 1;
	if (tpu_listener_create(ctx, urls, 2, &l) ||
	    tpu_listener_url(l, "tcp", url, sizeof(url)) ||
	    tpu_listener_accept(l, on_accept, &acc))
		goto out;
	if (write(sock, url, sizeof(url)) != (ssize_t)sizeof(url))
		goto out;
	if (!waiter_wait(&acc, 1) || acc.status)
		goto out;
	for (int n = 0;; n++) {
		struct tpu_message *m, out;
		uint8_t *mem[TPU_PIPE_MAX_PAYLOADS + 8] = { 0 };
		size_t k = 0;
		bool want_buf, die;

		waiter_init(&w);
		if (tpu_pipe_read_descriptor(acc.pipe, on_desc, &w) || !waiter_wait(&w, 1))
			goto out;
		if (w.status) {
			rc = 0;		/* the parent closed: done */
			goto out;
		}
		m = w.desc;
		want_buf = m->metadata_len == 3 && !memcmp(m->metadata, "buf", 3);
		die = m->metadata_len == 3 && !memcmp(m->metadata, "die", 3);
		for (size_t i = 0; i < m->npayloads; i++)
			m->payloads[i].data = mem[k++] = malloc(m->payloads[i].len + 1);
		for (size_t i = 0; i < m->ntensors; i++) {
			if (want_buf)
				m->tensors[i].flags = TPU_TENSOR_WANT_BUFFER;
			else
				m->tensors[i].data = mem[k++] = malloc(m->tensors[i].len + 1);
		}
		if (tpu_pipe_read(acc.pipe, m, on_read, &w) || !waiter_wait(&w, 2) || w.status)
			goto out;
		/* Echo: the same payloads and tensors back, as plain memory. */
		out = (struct tpu_message){ .payloads = w.pl, .npayloads = w.npl, .tensors = w.t,
					    .ntensors = w.nt };
		if (tpu_pipe_write(acc.pipe, &out, on_write, &w) || !waiter_wait(&w, 3) || w.status)
			goto out;
		/* "die": answer, then read nothing more, until killed. */
		if (die)
			for (;;)
				pause();
		for (size_t i = 0; i < w.nt; i++)
			tpu_buffer_free(w.t[i].buffer);
		for (size_t i = 0; i < k; i++)
			free(mem[i]);
		(void)n;
	}
out:
	tpu_pipe_close(acc.pipe);
	tpu_listener_close(l);
	tpu_context_destroy(ctx);
	return rc;
}

struct session {
	pid_t child;
	struct tpu_context *ctx;
	struct tpu_pipe *pipe;
};

static bool session_start(struct session *s)
{
	int sv[2];
	char url[300];

	memset(s, 0, sizeof(*s));
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		return false;
	s->child = fork();
	if (s->child == 0) {
		close(sv[0]);
		_exit(child_echo(sv[1]));
	}
	close(sv[1]);
	if (s->child < 0 || read(sv[0], url, sizeof(url)) != (ssize_t)sizeof(url)) {
		close(sv[0]);
		return false;
	}
	close(sv[0]);
	return !tpu_context_create(NULL, &s->ctx) && !tpu_pipe_connect(s->ctx, url, &s->pipe);
}

static int session_end(struct session *s)
{
	int status = -1;

	tpu_pipe_close(s->pipe);
	tpu_context_destroy(s->ctx);
	if (s->child > 0)
		waitpid(s->child, &status, 0);
	return status;
}

/* Write @m, then read the echo into @back (same shapes); statuses in @st. */
static bool round_trip(struct session *s, struct tpu_message *m, uint8_t **back, bool want_buf,
		       tpu_status *st)
{
	struct waiter w;
	struct tpu_message *d;
	size_t k = 0;

	waiter_init(&w);
	*st = tpu_pipe_write(s->pipe, m, on_write, &w);
	if (*st || !waiter_wait(&w, 1) || (*st = w.status))
		return false;
	*st = tpu_pipe_read_descriptor(s->pipe, on_desc, &w);
	if (*st || !waiter_wait(&w, 2) || (*st = w.status))
		return false;
	d = w.desc;
	if (d->npayloads != m->npayloads || d->ntensors != m->ntensors)
		return false;
	for (size_t i = 0; i < d->npayloads; i++)
		d->payloads[i].data = back[k++];
	for (size_t i = 0; i < d->ntensors; i++) {
		if (want_buf)
			d->tensors[i].flags = TPU_TENSOR_WANT_BUFFER;
		else
			d->tensors[i].data = back[k++];
	}
	*st = tpu_pipe_read(s->pipe, d, on_read, &w);
	if (*st || !waiter_wait(&w, 3) || (*st = w.status))
		return false;
	if (want_buf)
		for (size_t i = 0; i < w.nt; i++) {
			memcpy(back[k++], w.t[i].data, w.t[i].len);
			tpu_buffer_free(w.t[i].buffer);
		}
	return true;
}

static void test_negotiated(void)
{
	struct session s;
	bool up = session_start(&s);
	uint8_t ping[64] = "ping", pong[64];
	struct tpu_payload pl = { .data = ping, .len = sizeof(ping) };
	struct tpu_message m = { .payloads = &pl, .npayloads = 1 };
	uint8_t *back[1] = { pong };
	tpu_status st = -1;

	CHECK(up, "pipe_vm: connect over tcp to a listener on tcp and shm");
	bool ok = up && round_trip(&s, &m, back, false, &st) && !memcmp(ping, pong, 64);

	CHECK(ok, "pipe_vm: a payload round trip (status %d)", st);
	CHECK(!strcmp(tpu_pipe_transport(s.pipe), "shm"),
	      "pipe_vm: tcp:// between two processes of one machine moved to shm (got '%s')",
	      tpu_pipe_transport(s.pipe));
	if (have_module())
		CHECK(!strcmp(tpu_pipe_channel(s.pipe, TPU_DEVICE_CPU, TPU_DEVICE_CPU), "kmod"),
		      "pipe_vm: the kmod channel was chosen (got '%s')",
		      tpu_pipe_channel(s.pipe, TPU_DEVICE_CPU, TPU_DEVICE_CPU));
	else
		CHECK(!strcmp(tpu_pipe_channel(s.pipe, TPU_DEVICE_CPU, TPU_DEVICE_CPU), "cma"),
		      "pipe_vm: no module: the cma channel was chosen (got '%s')",
		      tpu_pipe_channel(s.pipe, TPU_DEVICE_CPU, TPU_DEVICE_CPU));
	CHECK(session_end(&s) == 0, "pipe_vm: the echoing child exited cleanly");
}

static void test_big_tensors(void)
{
	struct session s;
	bool up = session_start(&s);
	uint8_t *src[3], *dst[5];
	uint8_t pl_src[100], pl_dst[100];
	struct tpu_payload pl = { .data = pl_src, .len = sizeof(pl_src) };
	struct tpu_message_tensor t[3];
	struct tpu_message m = { .payloads = &pl, .npayloads = 1, .tensors = t, .ntensors = 3 };
	size_t len[3] = { BIG, 1000, BIG + 4097 };
	tpu_status st = -1;
	bool ok;

	fill(pl_src, sizeof(pl_src), 7);
	dst[0] = pl_dst;
	for (int i = 0; i < 3; i++) {
		src[i] = malloc(len[i]);
		dst[i + 1] = malloc(len[i]);
		fill(src[i], len[i], (unsigned int)i);
		t[i] = (struct tpu_message_tensor){ .data = src[i], .len = len[i] };
	}
	ok = up && round_trip(&s, &m, dst, false, &st);
	CHECK(ok, "pipe_vm: a message with two large tensors and a small one (status %d)", st);
	ok = ok && check(pl_dst, sizeof(pl_dst), 7);
	for (int i = 0; i < 3; i++)
		ok = ok && check(dst[i + 1], len[i], (unsigned int)i);
	CHECK(ok, "pipe_vm: every byte came back over %s", tpu_pipe_channel(s.pipe, 0, 0));
	CHECK(session_end(&s) == 0, "pipe_vm: the echoing child exited cleanly");
	for (int i = 0; i < 3; i++) {
		free(src[i]);
		free(dst[i + 1]);
	}
}

static void test_give_want_buffer(void)
{
	struct session s;
	bool up = session_start(&s);
	struct tpu_buffer *buf = NULL;
	struct tpu_message_tensor t;
	struct tpu_message m = { .metadata = "buf", .metadata_len = 3, .tensors = &t,
				 .ntensors = 1 };
	uint8_t *back = malloc(BIG);
	tpu_status st = -1;
	bool ok;

	if (!up || tpu_buffer_alloc(s.ctx, BIG, &buf)) {
		CHECK(false, "pipe_vm: set-up for a given buffer");
		session_end(&s);
		free(back);
		return;
	}
	fill(tpu_buffer_data(buf), BIG, 3);
	t = (struct tpu_message_tensor){ .data = tpu_buffer_data(buf), .len = BIG, .buffer = buf,
					 .flags = TPU_TENSOR_GIVE };
	/* The child reads it into a buffer of its own (metadata "buf"). */
	ok = round_trip(&s, &m, &back, true, &st) && check(back, BIG, 3);
	CHECK(ok, "pipe_vm: a given buffer read into a buffer, and back into one (status %d)", st);
	CHECK(session_end(&s) == 0, "pipe_vm: the echoing child exited cleanly");
	free(back);
}

static void test_order(void)
{
	enum { N = 40 };
	struct session s;
	bool up = session_start(&s), ok = up;
	size_t len = TPU_PIPE_INLINE_MAX + 1;
	uint8_t *src = malloc(len), *dst = malloc(len);
	tpu_status st = -1;

	for (unsigned int i = 0; ok && i < N; i++) {
		struct tpu_message_tensor t = { .data = src, .len = len };
		struct tpu_message m = { .tensors = &t, .ntensors = 1 };

		fill(src, len, i);
		ok = round_trip(&s, &m, &dst, false, &st) && check(dst, len, i);
	}
	CHECK(ok, "pipe_vm: %d messages just over the inline limit, in order (status %d)", N, st);
	CHECK(session_end(&s) == 0, "pipe_vm: the echoing child exited cleanly");
	free(src);
	free(dst);
}

/* The peer dies while a channel write waits for it: the callback still comes. */
static void test_peer_death(void)
{
	struct session s;
	bool up = session_start(&s);
	uint8_t *src = malloc(BIG);
	struct tpu_message_tensor t = { .data = src, .len = BIG };
	struct tpu_message m = { .tensors = &t, .ntensors = 1 };
	struct waiter w, d;
	tpu_status st;
	bool ok;

	waiter_init(&w);
	waiter_init(&d);
	/* Stop the child first, so that it cannot read what is written. */
	if (up)
		kill(s.child, SIGSTOP);
	st = up ? tpu_pipe_write(s.pipe, &m, on_write, &w) : -1;
	if (!st)
		st = tpu_pipe_read_descriptor(s.pipe, on_desc, &d);
	if (up)
		kill(s.child, SIGKILL);
	ok = !st && waiter_wait(&w, 1) && w.status != 0;
	CHECK(ok, "pipe_vm: a write pending when the peer died fails (%s)",
	      tpu_status_name(w.status));
	ok = waiter_wait(&d, 1) && d.status != 0;
	CHECK(ok, "pipe_vm: a descriptor request pending when the peer died fails (%s)",
	      tpu_status_name(d.status));
	session_end(&s);
	free(src);
}

/*
 * The peer dies while this end holds its message unread (so nothing is
 * being read from the transport) and a channel write waits for the peer.
 */
static void test_peer_death_while_holding(void)
{
	struct session s;
	bool up = session_start(&s), ok;
	uint8_t small[8] = "die", *src = malloc(BIG);
	struct tpu_payload pl = { .data = small, .len = sizeof(small) };
	struct tpu_message die = { .metadata = "die", .metadata_len = 3, .payloads = &pl,
				   .npayloads = 1 };
	struct tpu_message_tensor t = { .data = src, .len = BIG };
	struct tpu_message m = { .tensors = &t, .ntensors = 1 };
	struct waiter w1, w2;
	tpu_status st = -1;

	waiter_init(&w1);
	waiter_init(&w2);
	if (up)
		st = tpu_pipe_write(s.pipe, &die, on_write, &w1);
	ok = !st && waiter_wait(&w1, 1) && !w1.status;
	/* The child's answer arrives and is held: nobody asked for it. */
	usleep(300 * 1000);
	st = ok ? tpu_pipe_write(s.pipe, &m, on_write, &w2) : -1;
	usleep(100 * 1000);
	if (up)
		kill(s.child, SIGKILL);
	ok = ok && !st && waiter_wait(&w2, 1) && w2.status != 0;
	CHECK(ok, "pipe_vm: a channel write fails when the peer dies while this end holds its "
		  "unread message (%s)", tpu_status_name(w2.status));
	session_end(&s);
	free(src);
}

/* Counts the library's log lines that say a context closed a rendezvous left open. */
static void count_left_open(void *arg, const char *line)
{
	if (strstr(line, "rendezvous the program left open"))
		atomic_fetch_add((atomic_int *)arg, 1);
}

/* Descriptors of this process open on the module's device. */
static int device_fds(void)
{
	char path[64], target[64];
	int n = 0;

	for (int fd = 0; fd < 1024; fd++) {
		ssize_t len;

		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		len = readlink(path, target, sizeof(target) - 1);
		if (len <= 0)
			continue;
		target[len] = 0;
		n += !strcmp(target, TPU_DEVICE_PATH);
	}
	return n;
}

struct closer {
	struct waiter w;
	struct tpu_pipe *pipe;
};

/* A write's callback closes its pipe (queued behind it) and holds the thread. */
static void on_write_close(void *arg, tpu_status st, struct tpu_message *m)
{
	struct closer *c = arg;

	(void)m;
	tpu_pipe_close(c->pipe);
	waiter_post(&c->w, st);
	usleep(300 * 1000);
}

/*
 * A pipe closed from a callback is closed later, on the context's thread,
 * and its kmod link destroys its rendezvous then.  A context destroy on
 * the user's thread meanwhile must leave that rendezvous to the link: it
 * destroyed it too once, and two destroys at once crashed a worker.
 */
static void test_close_from_callback_then_destroy(void)
{
	int fds_before = device_fds();
	struct session s;
	bool up = session_start(&s);
	uint8_t ping[64] = "ping";
	struct tpu_payload pl = { .data = ping, .len = sizeof(ping) };
	struct tpu_message m = { .payloads = &pl, .npayloads = 1 };
	struct closer c;
	atomic_int left_open = 0;
	tpu_status st = -1;

	waiter_init(&c.w);
	c.pipe = s.pipe;
	tpu_log_set_handler(count_left_open, &left_open, true);
	if (up)
		st = tpu_pipe_write(s.pipe, &m, on_write_close, &c);
	CHECK(!st && waiter_wait(&c.w, 1) && !c.w.status,
	      "pipe_vm: a write's callback closes its pipe (%s)", tpu_status_name(st));
	/* The close is queued behind the callback, which still runs. */
	tpu_context_destroy(s.ctx);
	s.ctx = NULL;
	s.pipe = NULL;
	tpu_log_set_handler(NULL, NULL, false);
	CHECK(atomic_load(&left_open) == 0,
	      "pipe_vm: the context's destroy leaves the pipe's %s rendezvous to the pipe's "
	      "close (%d closed as left open)", have_module() ? "kmod" : "(no module: no)",
	      atomic_load(&left_open));
	CHECK(device_fds() == fds_before,
	      "pipe_vm: and that close destroyed it: no descriptor of %s is left (%d, %d before)",
	      TPU_DEVICE_PATH, device_fds(), fds_before);
	/* The child's echo may find the pipe closed: only reap it. */
	session_end(&s);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	/* A hang fails by itself, with the stacks, long before the VM's timeout. */
	tap_watchdog(getenv("TP_TEST_EMULATED") ? 600 : 180);
	tap_crash_stacks();
	if (!have_module())
		tap_diag("no %s: the kmod cases run as cma", TPU_DEVICE_PATH);
	test_negotiated();
	test_big_tensors();
	test_give_want_buffer();
	test_order();
	test_peer_death();
	test_peer_death_while_holding();
	test_close_from_callback_then_destroy();
	return tap_finish();
}
