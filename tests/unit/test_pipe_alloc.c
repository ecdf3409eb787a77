// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The pipe's steady path allocates nothing: after a warm-up, ping-pongs of
 * small messages over one shm/basic pipe (both ends on one context, driven
 * from their callbacks, as tpbench pipe --one-context does) make no heap
 * allocation (alloc_count.c counts them).  Write and read blocks, frame
 * buffers and bodies come from the pipe's caches (pipe_write.c,
 * pipe_read.c); the shm transport's ops from the connection's.  Checked
 * for a one-payload message and for one with a small (inline) tensor.
 * Messages too big for the small blocks still arrive intact (shapes()).
 *
 * Reading in place (pipe_read.c): each of those messages gives its bytes
 * back to the writer's ring in one move of the tail (header, body and
 * inline bytes alike), and a flood of messages of odd sizes through a full
 * ring, whose frames the writer splits wherever the ring is full or wraps,
 * arrives intact (flood()).
 *
 * Writing (xport_shm.c, shm_ring.c): each small message written from a
 * callback is in the ring, with one move of the head, when tpu_pipe_write
 * returns, and the writer loads the reader's tail (a line the reader just
 * stored to) only when the space it last saw is too small, not per write.
 */
#include <errno.h>
#include <semaphore.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pipe_harness.h"
#include "tap.h"
#include "tpu_user.h"

/* pipe_internal.h: the read side's ring tail moves (context thread). */
uint64_t tpu__pipe_rx_moves(struct tpu_pipe *p);
/* pipe_internal.h: the write side's head moves and loads of the reader's tail. */
void tpu__pipe_tx_counts(struct tpu_pipe *p, uint64_t *head_moves, uint64_t *tail_loads);

#define WARMUP	200u
#define ROUNDS	1000u
#define LEN	64

struct end {
	struct tpu_pipe *pipe;
	uint8_t in[LEN], out[LEN];
	struct tpu_payload pl;
	struct tpu_message_tensor t;
	struct tpu_message msg;
	bool answers;
};

static struct {
	struct end a, b;
	bool tensor;		/* send the bytes as one tensor instead of a payload */
	const char *xports;	/* a transport and a URL to listen on, instead of shm */
	const char *url;
	unsigned int done;
	unsigned long before, allocs;
	uint64_t moves0, moves;	/* the reading side's tail moves over the rounds */
	/* a's writes over the rounds: head moves, tail loads, and writes in the ring on return */
	uint64_t heads0, heads, loads0, loads;
	unsigned int put_now;
	tpu_status err;
	sem_t over;
} run;

static void next(struct end *e);

static void fail(tpu_status st)
{
	if (!run.err) {
		run.err = st;
		sem_post(&run.over);
	}
}

static void written(void *arg, tpu_status st, struct tpu_message *m)
{
	(void)arg;
	(void)m;
	if (st)
		fail(st);
}

static void send_one(struct end *e)
{
	if (run.tensor) {
		e->t = (struct tpu_message_tensor){ .data = e->out, .len = LEN };
		e->msg = (struct tpu_message){ .tensors = &e->t, .ntensors = 1 };
	} else {
		e->pl = (struct tpu_payload){ .data = e->out, .len = LEN };
		e->msg = (struct tpu_message){ .payloads = &e->pl, .npayloads = 1 };
	}
	uint64_t h0 = 0, h1 = 0, l = 0;
	/* Sent from a callback of the rounds: on the context thread. */
	bool count = e == &run.a && run.done > WARMUP && run.done < WARMUP + ROUNDS;

	if (count)
		tpu__pipe_tx_counts(e->pipe, &h0, &l);
	if (tpu_pipe_write(e->pipe, &e->msg, written, e))
		fail(-EIO);
	if (count) {
		tpu__pipe_tx_counts(e->pipe, &h1, &l);
		run.put_now += h1 - h0 == 1;
	}
}

static void read_done(void *arg, tpu_status st, struct tpu_message *m)
{
	struct end *e = arg;

	(void)m;
	if (st) {
		fail(st);
		return;
	}
	if (!e->answers) {
		run.done++;
		if (run.done == WARMUP) {
			run.before = allocs_counted();
			run.moves0 = tpu__pipe_rx_moves(e->pipe);
			tpu__pipe_tx_counts(e->pipe, &run.heads0, &run.loads0);
		} else if (run.done == WARMUP + ROUNDS) {
			run.allocs = allocs_counted() - run.before;
			run.moves = tpu__pipe_rx_moves(e->pipe) - run.moves0;
			tpu__pipe_tx_counts(e->pipe, &run.heads, &run.loads);
			run.heads -= run.heads0;
			run.loads -= run.loads0;
			sem_post(&run.over);
			return;
		}
	}
	next(e);
	send_one(e);
}

static void desc_done(void *arg, tpu_status st, struct tpu_message *m)
{
	struct end *e = arg;

	if (st) {
		fail(st);
		return;
	}
	if (run.tensor ? m->ntensors != 1 || m->npayloads || m->tensors[0].len != LEN
		       : m->npayloads != 1 || m->ntensors || m->payloads[0].len != LEN) {
		fail(-EPROTO);
		return;
	}
	if (run.tensor)
		m->tensors[0].data = e->in;
	else
		m->payloads[0].data = e->in;
	if (tpu_pipe_read(e->pipe, m, read_done, e))
		fail(-EIO);
}

static void next(struct end *e)
{
	if (tpu_pipe_read_descriptor(e->pipe, desc_done, e))
		fail(-EIO);
}

static void accepted(void *arg, tpu_status st, struct tpu_pipe *p)
{
	(void)arg;
	if (st)
		fail(st);
	else
		run.b.pipe = p;
	sem_post(&run.over);
}

static tpu_status wait_over(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 30;
	while (sem_timedwait(&run.over, &ts))
		if (errno != EINTR)
			return -ETIMEDOUT;
	return run.err;
}

/*
 * A context on shm (run.xports if set), a listener of its own (tagged
 * @tag; on run.url if set) and a pipe to it: the connecting end in *@a,
 * the accepted one in run.b.pipe.
 */
static tpu_status open_pair(const char *tag, struct tpu_context **ctx, struct tpu_listener **l,
			    struct tpu_pipe **a)
{
	struct tpu_context_options o = { .transports = run.xports ?: "shm",
					 .channels = "basic", .flags = TPU_CTX_NO_KMOD };
	char name[128], url[300];
	const char *u = name;
	tpu_status st;

	if (run.url)
		snprintf(name, sizeof(name), "%s", run.url);
	else
		snprintf(name, sizeof(name), "shm://pipe-alloc-%d-%s", (int)getpid(), tag);
	st = tpu_context_create(&o, ctx);
	if (!st)
		st = tpu_listener_create(*ctx, &u, 1, l);
	if (!st)
		st = tpu_listener_url(*l, NULL, url, sizeof(url));
	if (!st)
		st = tpu_listener_accept(*l, accepted, NULL);
	if (!st)
		st = tpu_pipe_connect(*ctx, url, a);
	if (!st)
		st = wait_over();	/* accepted */
	return st;
}

static void close_pair(struct tpu_context *ctx, struct tpu_listener *l, struct tpu_pipe *a)
{
	if (a)
		tpu_pipe_close(a);
	if (run.b.pipe)
		tpu_pipe_close(run.b.pipe);
	if (l)
		tpu_listener_close(l);
	if (ctx)
		tpu_context_destroy(ctx);
}

static void ping_pong(bool tensor, const char *what)
{
	struct tpu_context *ctx = NULL;
	struct tpu_listener *l = NULL;
	tpu_status st;

	memset(&run, 0, sizeof(run));
	run.tensor = tensor;
	run.b.answers = true;
	sem_init(&run.over, 0, 0);
	st = open_pair(tensor ? "tensor" : "payload", &ctx, &l, &run.a.pipe);
	if (!st) {
		next(&run.b);
		next(&run.a);
		send_one(&run.a);
		st = wait_over();
	}
	tap_diag("pipe_alloc: %s: %lu allocations in %u round trips", what, run.allocs, ROUNDS);
	CHECK(!st && run.allocs == 0,
	      "pipe_alloc: %s round trips over shm allocate nothing in steady state "
	      "(status %d, %lu allocations in %u)", what, st, run.allocs, ROUNDS);
	tap_diag("pipe_alloc: %s: %llu ring tail moves in %u messages read", what,
		 (unsigned long long)run.moves, ROUNDS);
	CHECK(!st && run.moves == ROUNDS,
	      "pipe_alloc: %s: each small message read moves the ring's tail once "
	      "(%llu moves in %u messages)", what, (unsigned long long)run.moves, ROUNDS);
	tap_diag("pipe_alloc: %s: %llu head moves, %llu tail loads in %u messages written, "
		 "%u of %u in the ring when the write returned", what,
		 (unsigned long long)run.heads, (unsigned long long)run.loads, ROUNDS,
		 run.put_now, ROUNDS - 1);
	CHECK(!st && run.heads == ROUNDS,
	      "pipe_alloc: %s: each small message written moves the ring's head once "
	      "(%llu moves in %u messages)", what, (unsigned long long)run.heads, ROUNDS);
	CHECK(!st && run.put_now == ROUNDS - 1,
	      "pipe_alloc: %s: a small message written from a callback is in the ring, in one "
	      "head move, when tpu_pipe_write returns (%u of %u)", what, run.put_now,
	      ROUNDS - 1);
	/* The reader keeps up: the writer's cached tail needs a reload about once per lap. */
	CHECK(!st && run.loads * 8 <= ROUNDS,
	      "pipe_alloc: %s: the writer loads the reader's tail only when its last look "
	      "leaves too little room (%llu loads in %u messages)", what,
	      (unsigned long long)run.loads, ROUNDS);
	close_pair(ctx, l, run.a.pipe);
	sem_destroy(&run.over);
}

/*
 * Messages of the other shapes through the same pipe, interleaved with
 * small ones so that cached blocks are reused across shapes: more entries
 * than a small block holds with a small descriptor (decoded again into
 * exact arrays), and a descriptor bigger than a small block's body (its
 * own allocation).  Every byte and metadata blob must arrive intact.
 */
#define SH_NP	5
#define SH_NT	6
#define SH_META	2000

static struct {
	uint8_t src[SH_NP + SH_NT][8], dst[SH_NP + SH_NT][8];
	uint8_t meta[SH_META];
	unsigned int np, nt;
	size_t meta_len;
	bool ok;
	sem_t got;
} sh;

static void sh_read(void *arg, tpu_status st, struct tpu_message *m)
{
	bool ok = !st && m->metadata_len == sh.meta_len &&
		  (!sh.meta_len || !memcmp(m->metadata, sh.meta, sh.meta_len));

	(void)arg;
	for (unsigned int i = 0; i < sh.np + sh.nt; i++)
		ok = ok && !memcmp(sh.src[i], sh.dst[i], 8);
	sh.ok = ok;
	sem_post(&sh.got);
}

static void sh_desc(void *arg, tpu_status st, struct tpu_message *m)
{
	if (st || m->npayloads != sh.np || m->ntensors != sh.nt) {
		sh.ok = false;
		sem_post(&sh.got);
		return;
	}
	for (unsigned int i = 0; i < sh.np; i++)
		m->payloads[i].data = sh.dst[i];
	for (unsigned int i = 0; i < sh.nt; i++)
		m->tensors[i].data = sh.dst[sh.np + i];
	if (tpu_pipe_read((struct tpu_pipe *)arg, m, sh_read, NULL)) {
		sh.ok = false;
		sem_post(&sh.got);
	}
}

static void sh_written(void *arg, tpu_status st, struct tpu_message *m)
{
	(void)arg;
	(void)m;
	if (st)
		sh.ok = false;
}

static bool sh_one(struct tpu_pipe *a, struct tpu_pipe *b, unsigned int np, unsigned int nt,
		   size_t meta_len, unsigned int round)
{
	struct tpu_payload pl[SH_NP];
	struct tpu_message_tensor t[SH_NT];
	struct tpu_message m = { .metadata = meta_len ? sh.meta : NULL, .metadata_len = meta_len,
				 .payloads = np ? pl : NULL, .npayloads = np,
				 .tensors = nt ? t : NULL, .ntensors = nt };
	struct timespec ts;

	sh.np = np;
	sh.nt = nt;
	sh.meta_len = meta_len;
	memset(sh.dst, 0, sizeof(sh.dst));
	for (unsigned int i = 0; i < np + nt; i++)
		memset(sh.src[i], (int)(round * 16 + i + 1), 8);
	for (unsigned int i = 0; i < np; i++)
		pl[i] = (struct tpu_payload){ .data = sh.src[i], .len = 8 };
	for (unsigned int i = 0; i < nt; i++)
		t[i] = (struct tpu_message_tensor){ .data = sh.src[np + i], .len = 8 };
	sh.ok = true;
	if (tpu_pipe_read_descriptor(b, sh_desc, b) || tpu_pipe_write(a, &m, sh_written, NULL))
		return false;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 10;
	while (sem_timedwait(&sh.got, &ts))
		if (errno != EINTR)
			return false;
	/* The write's callback may come after the read's: wait for a quiet pipe. */
	usleep(1000);
	return sh.ok;
}

static void shapes(void)
{
	struct tpu_context *ctx = NULL;
	struct tpu_listener *l = NULL;
	struct tpu_pipe *a = NULL;
	tpu_status st;
	bool ok = true;

	memset(&run, 0, sizeof(run));
	sem_init(&run.over, 0, 0);
	sem_init(&sh.got, 0, 0);
	for (size_t i = 0; i < SH_META; i++)
		sh.meta[i] = (uint8_t)(i * 7 + 3);
	st = open_pair("shapes", &ctx, &l, &a);
	for (unsigned int r = 0; !st && ok && r < 20; r++) {
		ok = ok && sh_one(a, run.b.pipe, 1, 0, 0, r);
		ok = ok && sh_one(a, run.b.pipe, SH_NP, SH_NT, 0, r);
		ok = ok && sh_one(a, run.b.pipe, 0, 1, 0, r);
		ok = ok && sh_one(a, run.b.pipe, 2, 2, SH_META, r);
		ok = ok && sh_one(a, run.b.pipe, 4, 4, 16, r);
	}
	CHECK(!st && ok, "pipe_alloc: messages with more entries than a small block, or a "
	      "bigger descriptor, arrive intact between small ones (status %d)", st);
	close_pair(ctx, l, a);
	sem_destroy(&run.over);
	sem_destroy(&sh.got);
}

/*
 * A flood: FL_N messages of odd sizes (metadata, two payloads, one inline
 * tensor; some parts empty) queued at once, so that the writer fills the
 * ring and splits frames wherever it is full or wraps, and only then read:
 * the reader meets headers without their bodies, bodies and inline bytes
 * across the end of the ring, and must still get every byte right.
 */
#define FL_N	3000u
#define FL_SRC	8192u

static struct {
	uint8_t src[FL_SRC];
	struct tpu_message msg[FL_N];
	struct tpu_payload pl[FL_N][2];
	struct tpu_message_tensor t[FL_N];
	uint8_t dst[3][4096];
	unsigned int got, written;
	tpu_status err;
	struct tpu_pipe *rd;
	sem_t over;
} fl;

static size_t fl_len(unsigned int i, unsigned int part)
{
	static const unsigned int mul[4] = { 13, 37, 11, 7 }, mod[4] = { 200, 3001, 700, 300 };

	return (size_t)(i * mul[part] + part) % mod[part];
}

static void fl_end(tpu_status st)
{
	if (!fl.err && st)
		fl.err = st;
	sem_post(&fl.over);
}

static void fl_written(void *arg, tpu_status st, struct tpu_message *m)
{
	(void)arg;
	(void)m;
	__atomic_add_fetch(&fl.written, 1, __ATOMIC_RELAXED);
	if (st)
		fl_end(st);
}

static void fl_next(void);

static void fl_read(void *arg, tpu_status st, struct tpu_message *m)
{
	unsigned int i = fl.got;
	bool ok = !st;

	(void)arg;
	for (unsigned int k = 0; ok && k < 3; k++)
		ok = !memcmp(fl.dst[k], fl.src + (i + k) % 256, fl_len(i, k + 1));
	ok = ok && m->metadata_len == fl_len(i, 0) &&
	     !memcmp(m->metadata, fl.src + (i * 3) % 256, m->metadata_len);
	if (!ok) {
		fl_end(st ? st : -EBADMSG);
		return;
	}
	if (++fl.got == FL_N) {
		fl_end(0);
		return;
	}
	fl_next();
}

static void fl_desc(void *arg, tpu_status st, struct tpu_message *m)
{
	unsigned int i = fl.got;

	(void)arg;
	if (!st && (m->npayloads != 2 || m->ntensors != 1 || m->payloads[0].len != fl_len(i, 1) ||
		    m->payloads[1].len != fl_len(i, 2) || m->tensors[0].len != fl_len(i, 3)))
		st = -EBADMSG;
	if (st) {
		fl_end(st);
		return;
	}
	memset(fl.dst, 0, sizeof(fl.dst));
	m->payloads[0].data = fl.dst[0];
	m->payloads[1].data = fl.dst[1];
	m->tensors[0].data = fl.dst[2];
	st = tpu_pipe_read(fl.rd, m, fl_read, NULL);
	if (st)
		fl_end(st);
}

static void fl_next(void)
{
	tpu_status st = tpu_pipe_read_descriptor(fl.rd, fl_desc, NULL);

	if (st)
		fl_end(st);
}

static void flood(void)
{
	struct tpu_context *ctx = NULL;
	struct tpu_listener *l = NULL;
	struct tpu_pipe *a = NULL;
	tpu_status st;
	struct timespec ts;

	memset(&run, 0, sizeof(run));
	memset(&fl, 0, sizeof(fl));
	sem_init(&run.over, 0, 0);
	sem_init(&fl.over, 0, 0);
	for (size_t i = 0; i < FL_SRC; i++)
		fl.src[i] = (uint8_t)(i * 2654435761u >> 11);
	st = open_pair("flood", &ctx, &l, &a);
	fl.rd = run.b.pipe;
	for (unsigned int i = 0; !st && i < FL_N; i++) {
		for (unsigned int k = 0; k < 2; k++)
			fl.pl[i][k] = (struct tpu_payload){ .data = fl.src + (i + k) % 256,
							    .len = fl_len(i, k + 1) };
		fl.t[i] = (struct tpu_message_tensor){ .data = fl.src + (i + 2) % 256,
						       .len = fl_len(i, 3) };
		fl.msg[i] = (struct tpu_message){ .metadata = fl.src + (i * 3) % 256,
						  .metadata_len = fl_len(i, 0),
						  .payloads = fl.pl[i], .npayloads = 2,
						  .tensors = &fl.t[i], .ntensors = 1 };
		st = tpu_pipe_write(a, &fl.msg[i], fl_written, NULL);
	}
	/* Let the writer fill the ring before the reader starts. */
	usleep(50 * 1000);
	tap_diag("pipe_alloc: flood: %u of %u messages in the ring before reading",
		 __atomic_load_n(&fl.written, __ATOMIC_RELAXED), FL_N);
	if (!st) {
		fl_next();
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 60;
		while (sem_timedwait(&fl.over, &ts))
			if (errno != EINTR) {
				st = -ETIMEDOUT;
				break;
			}
	}
	if (!st)
		st = fl.err;
	CHECK(!st && fl.got == FL_N,
	      "pipe_alloc: a flood of odd-sized messages through a full ring arrives intact "
	      "(status %d, %u of %u)", st, fl.got, FL_N);
	close_pair(ctx, l, a);
	sem_destroy(&run.over);
	sem_destroy(&fl.over);
}

/*
 * Over tcp (and rdma, from test_pipe_rdma.c): the transport's reads and
 * writes are recycled too (xport_tcp.c, xport_rdma.c), and so are the
 * records of tcp's io_uring requests (lib/ctx).  The library before made
 * one allocation for each of them: twelve per round trip over tcp.
 */
void pipe_alloc_round_trips(const char *xports, const char *listen_url)
{
	struct tpu_context *ctx = NULL;
	struct tpu_listener *l = NULL;
	tpu_status st;

	memset(&run, 0, sizeof(run));
	run.xports = xports;
	run.url = listen_url;
	run.b.answers = true;
	sem_init(&run.over, 0, 0);
	st = open_pair(xports, &ctx, &l, &run.a.pipe);
	if (!st) {
		next(&run.b);
		next(&run.a);
		send_one(&run.a);
		st = wait_over();
	}
	CHECK(!st && run.allocs == 0,
	      "pipe_alloc: one-payload round trips over %s allocate nothing in steady state "
	      "(status %d, %lu allocations in %u)", xports, st, run.allocs, ROUNDS);
	close_pair(ctx, l, run.a.pipe);
	sem_destroy(&run.over);
}

void test_pipe_alloc(void)
{
	ping_pong(false, "one-payload");
	ping_pong(true, "one-tensor");
	pipe_alloc_round_trips("tcp", "tcp://127.0.0.1:0");
	shapes();
	flood();
}
