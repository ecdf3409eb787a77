// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The agent: its listener, its peers' pipes and their read loops, and the
 * notification queue.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "xfer.h"
#include "pipe/pipe_internal.h"

tpu_status tpu__xfer_agent_check(const struct tpu_agent *a)
{
	if (!a)
		return -EINVAL;
	if (a->magic == TPU__MAGIC_DEAD)
		return TPU_E_DESTROYED;
	return a->magic == XFER_MAGIC_AGENT ? 0 : -EINVAL;
}

/* ---- writes ---- */

static void peer_read_next(struct xfer_peer *p);

struct xfer_out {
	struct tpu_message msg;
	struct tpu_payload pl[3];
	uint8_t hdr[XFER_HDR_LEN];
	struct xfer_peer *p;
	void (*done)(void *arg, tpu_status st);
	void *arg;
	void *own[3];
};

static void out_done(void *arg, tpu_status st, struct tpu_message *msg)
{
	struct xfer_out *o = arg;
	struct xfer_peer *p = o->p;
	bool resume;
	size_t i;

	(void)msg;
	if (st)
		tpu__xfer_peer_fail(p, st);
	if (o->done)
		o->done(o->arg, st);
	for (i = 0; i < 3; i++)
		free(o->own[i]);
	free(o);
	pthread_mutex_lock(&p->a->lock);
	resume = p->stalled && p->io - 1 <= XFER_PEER_WRITES_MAX / 2;
	if (resume)
		p->stalled = false;
	pthread_mutex_unlock(&p->a->lock);
	/* Still counted in p->io: @p is not reaped under us. */
	if (resume)
		peer_read_next(p);
	pthread_mutex_lock(&p->a->lock);
	p->io--;
	pthread_cond_broadcast(&p->a->cond);
	pthread_mutex_unlock(&p->a->lock);
}

static tpu_status send_msg(struct xfer_peer *p, const struct xfer_hdr *h, const void *const *data,
			   const size_t *len, size_t n, bool copy,
			   void (*done)(void *arg, tpu_status st), void *arg)
{
	static uint8_t empty;
	struct xfer_out *o;
	tpu_status st;
	size_t i;

	if (atomic_load(&p->error))
		return atomic_load(&p->error);
	o = calloc(1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	o->p = p;
	o->done = done;
	o->arg = arg;
	tpu__xfer_hdr_put(h, o->hdr);
	o->msg.metadata = o->hdr;
	o->msg.metadata_len = XFER_HDR_LEN;
	o->msg.payloads = o->pl;
	o->msg.npayloads = n;
	for (i = 0; i < n; i++) {
		void *d = (void *)data[i];

		if (!len[i]) {
			d = &empty;
		} else if (copy) {
			o->own[i] = malloc(len[i]);
			if (!o->own[i])
				goto nomem;
			memcpy(o->own[i], data[i], len[i]);
			d = o->own[i];
		}
		o->pl[i].data = d;
		o->pl[i].len = len[i];
	}
	pthread_mutex_lock(&p->a->lock);
	p->io++;
	pthread_mutex_unlock(&p->a->lock);
	st = tpu_pipe_write(p->pipe, &o->msg, out_done, o);
	if (st) {
		pthread_mutex_lock(&p->a->lock);
		p->io--;
		pthread_cond_broadcast(&p->a->cond);
		pthread_mutex_unlock(&p->a->lock);
		for (i = 0; i < n; i++)
			free(o->own[i]);
		free(o);
		tpu__xfer_peer_fail(p, st);
	}
	return st;
nomem:
	for (i = 0; i < n; i++)
		free(o->own[i]);
	free(o);
	return -ENOMEM;
}

/* A request's notification, as its last message to @p (cma, and tcp with no chunk). */
tpu_status tpu__xfer_send_notif(struct xfer_peer *p, const struct tpu_xfer_req *r)
{
	struct xfer_hdr h = { .type = XFER_NOTIF };
	const void *d[1] = { r->notif };
	size_t l[1] = { r->notif_len };

	return tpu__xfer_send(p, &h, d, l, 1);
}

void tpu__xfer_deadline_in(struct timespec *ts, int ms)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts->tv_nsec >= 1000000000) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000;
	}
}

tpu_status tpu__xfer_send(struct xfer_peer *p, const struct xfer_hdr *h, const void *const *data,
			  const size_t *len, size_t n)
{
	return send_msg(p, h, data, len, n, true, NULL, NULL);
}

tpu_status tpu__xfer_send_ref(struct xfer_peer *p, const struct xfer_hdr *h,
			      const void *const *data, const size_t *len, size_t n,
			      void (*done)(void *arg, tpu_status st), void *arg)
{
	return send_msg(p, h, data, len, n, false, done, arg);
}

/* ---- peers ---- */

void tpu__xfer_peer_fail(struct xfer_peer *p, tpu_status st)
{
	struct tpu_agent *a = p->a;
	int zero = 0;

	if (!st)
		st = TPU_E_PEER_GONE;
	if (!atomic_compare_exchange_strong(&p->error, &zero, st))
		return;
	tpu__log_debug("xfer: peer %s failed: %s", p->out ? p->url : p->name, tpu_strerror(st));
	pthread_mutex_lock(&a->lock);
	tpu__xfer_reg_forget_peer(a, p);
	pthread_cond_broadcast(&a->cond);
	pthread_mutex_unlock(&a->lock);
	if (p->out)
		tpu__xfer_tcp_fail_pending(p, st);
	tpu__xfer_rdma_peer_fail(p, st);
}

static void peer_read_next(struct xfer_peer *p);

void tpu__xfer_peer_close(struct xfer_peer *p)
{
	bool was;

	pthread_mutex_lock(&p->a->lock);
	was = p->closed;
	p->closed = true;
	pthread_mutex_unlock(&p->a->lock);
	if (!was)
		tpu_pipe_close(p->pipe);
}

/*
 * Context thread: the read side of an in peer ended with an error; close
 * its pipe, after which only its writes (p->io) still name it, and it is
 * reaped (reap_dead()).
 */
static void in_dead(struct xfer_peer *p)
{
	if (p->out)
		return;
	tpu__xfer_peer_close(p);
	pthread_mutex_lock(&p->a->lock);
	p->rdone = true;
	pthread_mutex_unlock(&p->a->lock);
}

static void in_free(struct xfer_in *in)
{
	size_t i;

	for (i = 0; i < 3; i++) {
		free(in->buf[i]);
		in->buf[i] = NULL;
	}
}

/* The message read (or failed): its buffers and what it held of a->serve_bytes go. */
static void in_done(struct xfer_peer *p)
{
	uint64_t bytes = p->in_bytes + p->resp_bytes;

	in_free(&p->in);
	p->in_bytes = 0;
	p->resp_bytes = 0;
	if (bytes)
		tpu__xfer_serve_release(p->a, bytes);
}

/*
 * Context thread: read the next message, unless the answers queued to
 * this peer (which need not read them) reached XFER_PEER_WRITES_MAX; then
 * out_done() reads on once half of them went.
 */
static void read_on(struct xfer_peer *p)
{
	bool full;

	pthread_mutex_lock(&p->a->lock);
	full = p->io >= XFER_PEER_WRITES_MAX;
	p->stalled = full;
	pthread_mutex_unlock(&p->a->lock);
	if (!full)
		peer_read_next(p);
}

static void on_read(void *arg, tpu_status st, struct tpu_message *msg)
{
	struct xfer_peer *p = arg;

	(void)msg;
	if (st) {
		in_done(p);
		tpu__xfer_peer_fail(p, st);
		in_dead(p);
		return;
	}
	tpu__xfer_in_dispatch(p);
	in_done(p);
	/* A response still going out: its callback reads on (serving 2). */
	if (p->serving)
		p->serving = 2;
	else
		read_on(p);
}

/* Read the message of @desc, whose bytes are reserved. */
static void in_start(struct xfer_peer *p, struct tpu_message *desc)
{
	static uint8_t empty;
	tpu_status st = 0;
	size_t i;

	for (i = 0; !st && i < desc->npayloads; i++) {
		if (!desc->payloads[i].len) {
			desc->payloads[i].data = &empty;
			continue;
		}
		p->in.buf[i] = malloc(desc->payloads[i].len);
		if (!p->in.buf[i])
			st = -ENOMEM;
		desc->payloads[i].data = p->in.buf[i];
	}
	if (st) {
		in_done(p);
		tpu__xfer_peer_fail(p, st);
		in_dead(p);
		return;
	}
	p->in.pl = desc->payloads;
	p->in.npl = desc->npayloads;
	st = tpu_pipe_read(p->pipe, desc, on_read, p);
	if (st) {
		in_done(p);
		tpu__xfer_peer_fail(p, st);
		in_dead(p);
	}
}

/*
 * a->lock held: reserve what reading @desc and answering it will hold, or
 * false (the peer then waits, in order, for others to give bytes back).
 * One message alone always fits: a chunk is bounded on its descriptor.
 */
static bool reserve(struct tpu_agent *a, struct xfer_peer *p, const struct tpu_message *desc)
{
	uint64_t in = 0, resp = 0;
	size_t i;

	for (i = 0; i < desc->npayloads; i++)
		in += desc->payloads[i].len;
	if (p->in.h.type == XFER_REQ && p->in.h.op == TPU_XFER_OP_READ)
		resp = p->in.h.len;
	if (a->serve_bytes && (a->serve_bytes >= XFER_SERVE_BYTES_MAX ||
			       in + resp > XFER_SERVE_BYTES_MAX - a->serve_bytes))
		return false;
	a->serve_bytes += in + resp;
	p->in_bytes = in;
	p->resp_bytes = resp;
	return true;
}

void tpu__xfer_serve_release(struct tpu_agent *a, uint64_t bytes)
{
	struct xfer_peer *p;

	pthread_mutex_lock(&a->lock);
	a->serve_bytes -= bytes;
	while ((p = a->parked)) {
		bool dead = p->closed || atomic_load(&p->error);

		if (!dead && !reserve(a, p, p->desc))
			break;
		a->parked = p->park_next;
		if (!a->parked)
			a->parked_tail = &a->parked;
		p->park_next = NULL;
		p->parked = false;
		pthread_mutex_unlock(&a->lock);
		if (dead)
			in_dead(p);	/* its pipe frees the descriptor */
		else
			in_start(p, p->desc);
		pthread_mutex_lock(&a->lock);
	}
	pthread_mutex_unlock(&a->lock);
}

static void on_desc(void *arg, tpu_status st, struct tpu_message *desc)
{
	struct xfer_peer *p = arg;
	struct tpu_agent *a = p->a;

	if (st) {
		tpu__xfer_peer_fail(p, st);
		in_dead(p);
		return;
	}
	st = tpu__xfer_hdr_get(desc->metadata, desc->metadata_len, &p->in.h);
	if (!st)
		st = tpu__xfer_in_check(p, &p->in.h, desc);
	if (!st && desc->ntensors)
		st = -EPROTO;
	if (st) {
		/* A peer that breaks the protocol loses its pipe. */
		tpu__log_debug("xfer: bad message from a peer: %s", tpu_strerror(st));
		tpu__xfer_peer_fail(p, st);
		in_dead(p);
		return;
	}
	/* What all peers together make us hold while we read and answer is bounded. */
	pthread_mutex_lock(&a->lock);
	if (a->parked || !reserve(a, p, desc)) {
		if (!a->serve_bytes) {
			reserve(a, p, desc);	/* nothing held: nothing would wake it */
		} else {
			unsigned long long held = a->serve_bytes;

			p->desc = desc;
			p->parked = true;
			*a->parked_tail = p;
			a->parked_tail = &p->park_next;
			pthread_mutex_unlock(&a->lock);
			tpu__log_debug("xfer: peer %s waits: %llu bytes in service", p->name, held);
			return;
		}
	}
	pthread_mutex_unlock(&a->lock);
	in_start(p, desc);
}

static void peer_read_next(struct xfer_peer *p)
{
	tpu_status st;

	if (atomic_load(&p->error)) {
		in_dead(p);	/* failed by a write meanwhile: no read names it any more */
		return;
	}
	st = tpu_pipe_read_descriptor(p->pipe, on_desc, p);
	if (st) {
		tpu__xfer_peer_fail(p, st);
		in_dead(p);
	}
}

void tpu__xfer_serve_resume(struct xfer_peer *p)
{
	unsigned int was = p->serving;

	p->serving = 0;
	if (was == 2)
		read_on(p);
}

/*
 * Writers first: a thread that keeps posting must not starve a revocation
 * or a deregistration (glibc's default lets readers overtake a writer).
 */
static void rwlock_init_writer_first(pthread_rwlock_t *l)
{
	pthread_rwlockattr_t at;

	pthread_rwlockattr_init(&at);
	pthread_rwlockattr_setkind_np(&at, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(l, &at);
	pthread_rwlockattr_destroy(&at);
}

static struct xfer_peer *peer_new(struct tpu_agent *a, bool out)
{
	struct xfer_peer *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->a = a;
	p->out = out;
	p->pidfd = -1;
	rwlock_init_writer_first(&p->rw);
	return p;
}

static void peer_free(struct xfer_peer *p)
{
	struct tpu_xfer_remote *rm, *rn;

	tpu__xfer_rdma_peer_free(p);
	for (rm = p->remotes; rm; rm = rn) {
		rn = rm->next;
		tpu__quarantine(rm, &rm->magic);
	}
	if (p->pidfd >= 0)
		close(p->pidfd);
	pthread_rwlock_destroy(&p->rw);
	free(p);
}

/*
 * a->lock held, context thread: unlink the in peers that are over (reads
 * ended, pipe closed, nothing written or waiting, no deregistration
 * naming them) and return them to be freed: peers that come and go must
 * not use up XFER_PEERS_MAX, nor memory.
 */
static struct xfer_peer *reap_dead(struct tpu_agent *a)
{
	struct xfer_peer **pp = &a->peers, *p, *dead = NULL;

	if (a->deregs || a->closing)
		return NULL;
	while ((p = *pp)) {
		if (!p->out && p->rdone && p->closed && !p->io && !p->serving && !p->parked) {
			*pp = p->next;
			a->npeers--;
			p->next = dead;
			dead = p;
		} else {
			pp = &p->next;
		}
	}
	return dead;
}

static void on_accept(void *arg, tpu_status st, struct tpu_pipe *pipe)
{
	struct tpu_agent *a = arg;
	struct xfer_peer *p, *dead;

	if (st)
		return;		/* the listener closed, or one set-up failed */
	pthread_mutex_lock(&a->lock);
	dead = reap_dead(a);
	pthread_mutex_unlock(&a->lock);
	while ((p = dead)) {
		dead = p->next;
		peer_free(p);
	}
	pthread_mutex_lock(&a->lock);
	if (a->closing || a->npeers >= XFER_PEERS_MAX) {
		pthread_mutex_unlock(&a->lock);
		tpu_pipe_close(pipe);
		goto again;
	}
	p = peer_new(a, false);
	if (!p) {
		pthread_mutex_unlock(&a->lock);
		tpu_pipe_close(pipe);
		goto again;
	}
	p->pipe = pipe;
	snprintf(p->name, sizeof(p->name), "?");
	p->next = a->peers;
	a->peers = p;
	a->npeers++;
	pthread_mutex_unlock(&a->lock);
	peer_read_next(p);
again:
	if (tpu_listener_accept(a->listener, on_accept, a))
		tpu__log_debug("xfer: agent %s stops accepting", a->name);
}

static struct xfer_peer *peer_find_out(struct tpu_agent *a, const uint8_t id[XFER_ID_LEN],
				       const char *url)
{
	struct xfer_peer *p;

	for (p = a->peers; p; p = p->next)
		if (p->out && !atomic_load(&p->error) && !memcmp(p->id, id, XFER_ID_LEN) &&
		    !strcmp(p->url, url))
			return p;
	return NULL;
}

tpu_status tpu__xfer_peer_out(struct tpu_agent *a, const uint8_t id[XFER_ID_LEN],
			      const char *url, struct xfer_peer **out)
{
	struct xfer_peer *p, *q;
	tpu_status st;
	struct xfer_hdr h = { .type = XFER_HELLO };
	const void *d[1] = { a->name };
	size_t l[1] = { strlen(a->name) };

	pthread_mutex_lock(&a->lock);
	p = peer_find_out(a, id, url);
	pthread_mutex_unlock(&a->lock);
	if (p) {
		*out = p;
		return 0;
	}
	p = peer_new(a, true);
	if (!p)
		return -ENOMEM;
	memcpy(p->id, id, XFER_ID_LEN);
	snprintf(p->url, sizeof(p->url), "%s", url);
	/*
	 * Not under a->lock: the connect waits for the context thread, which
	 * may need the lock to fail another peer first.
	 */
	st = tpu_pipe_connect(a->ctx, url, &p->pipe);
	if (st) {
		peer_free(p);
		return st;
	}
	pthread_mutex_lock(&a->lock);
	q = peer_find_out(a, id, url);
	if (q || a->npeers >= XFER_PEERS_MAX || a->closing) {
		/* Another thread connected first, or no room: drop ours. */
		pthread_mutex_unlock(&a->lock);
		tpu_pipe_close(p->pipe);
		peer_free(p);
		if (!q)
			return a->closing ? TPU_E_CLOSED : -ENOSPC;
		*out = q;
		return 0;
	}
	p->next = a->peers;
	a->peers = p;
	a->npeers++;
	pthread_mutex_unlock(&a->lock);
	st = tpu__xfer_send(p, &h, d, l, 1);
	if (!st)
		peer_read_next(p);
	*out = p;
	return st;
}

/* ---- notifications ---- */

void tpu__xfer_notif_push(struct tpu_agent *a, const char *peer, const void *msg, size_t len)
{
	struct xfer_notif *n;

	pthread_mutex_lock(&a->lock);
	if (a->notif_cb) {
		tpu_notif_cb cb = a->notif_cb;
		void *arg = a->notif_arg;

		pthread_mutex_unlock(&a->lock);
		cb(arg, peer, msg, len);
		return;
	}
	/* Nobody polls: bound what peers can make us hold, in count and in bytes. */
	if (a->nnotifs >= XFER_NOTIFS_MAX || len > XFER_NOTIF_BYTES_MAX - a->nq_bytes) {
		size_t queued = a->nnotifs, bytes = a->nq_bytes;

		pthread_mutex_unlock(&a->lock);
		tpu__log_debug("xfer: agent %s drops a notification of %s: %zu (%zu bytes) queued",
			       a->name, peer, queued, bytes);
		return;
	}
	n = malloc(sizeof(*n) + len);
	if (!n) {
		pthread_mutex_unlock(&a->lock);
		return;
	}
	snprintf(n->peer, sizeof(n->peer), "%s", peer);
	n->len = len;
	memcpy(n->msg, msg, len);
	n->next = NULL;
	*a->nq_tail = n;
	a->nq_tail = &n->next;
	a->nnotifs++;
	a->nq_bytes += len;
	pthread_mutex_unlock(&a->lock);
}

TPU_API tpu_status tpu_agent_notif_poll(struct tpu_agent *a, char *peer, size_t peer_size,
					void *msg, size_t size, size_t *len)
{
	struct xfer_notif *n;
	tpu_status st = tpu__xfer_agent_check(a);

	if (st)
		return st;
	if ((!msg && size) || !len)
		return -EINVAL;
	pthread_mutex_lock(&a->lock);
	n = a->nq;
	if (!n) {
		pthread_mutex_unlock(&a->lock);
		return -EAGAIN;
	}
	*len = n->len;
	if (n->len > size) {
		pthread_mutex_unlock(&a->lock);
		return -ENOSPC;
	}
	a->nq = n->next;
	if (!a->nq)
		a->nq_tail = &a->nq;
	a->nnotifs--;
	a->nq_bytes -= n->len;
	pthread_mutex_unlock(&a->lock);
	if (n->len)
		memcpy(msg, n->msg, n->len);
	if (peer && peer_size)
		snprintf(peer, peer_size, "%s", n->peer);
	free(n);
	return 0;
}

TPU_API tpu_status tpu_agent_set_notif_cb(struct tpu_agent *a, tpu_notif_cb cb, void *arg)
{
	tpu_status st = tpu__xfer_agent_check(a);

	if (st)
		return st;
	pthread_mutex_lock(&a->lock);
	a->notif_cb = cb;
	a->notif_arg = arg;
	pthread_mutex_unlock(&a->lock);
	return 0;
}

/* ---- create, destroy ---- */

static bool transport_allowed(struct tpu_context *ctx, const char *name)
{
	const char *t = tpu__ctx_transports(ctx);
	const char *env = getenv("TPU_TRANSPORTS");
	size_t n = strlen(name);
	const char *lists[2] = { t, env };
	int i;

	for (i = 0; i < 2; i++) {
		const char *s = lists[i];
		bool found = false;

		if (!s || !*s)
			continue;
		while (*s) {
			const char *e = strchr(s, ',');
			size_t k = e ? (size_t)(e - s) : strlen(s);

			if (k == n && !strncmp(s, name, n))
				found = true;
			s += k + (e ? 1 : 0);
		}
		if (!found)
			return false;
	}
	return true;
}

static void close_pipes(void *arg)
{
	struct tpu_agent *a = arg;
	struct xfer_peer *p;

	for (p = a->peers; p; p = p->next) {
		tpu__xfer_peer_fail(p, TPU_E_CLOSED);
		tpu__xfer_peer_close(p);
	}
}

static void barrier(void *arg)
{
	(void)arg;
}

/*
 * The agent's part of its context: the listener, the peers' pipes, and
 * the writes in flight on them (their callbacks run on its thread); once.
 */
static void ctx_part_close(struct tpu_agent *a)
{
	struct xfer_peer *p;

	if (a->ctx_gone)
		return;
	a->ctx_gone = true;
	tpu__ctx_del_obj(a->ctx, &a->obj);
	pthread_mutex_lock(&a->lock);
	a->closing = true;
	pthread_mutex_unlock(&a->lock);
	tpu_listener_close(a->listener);
	tpu__ctx_run_sync(a->ctx, close_pipes, a);
	/* Callbacks of the closed pipes run as tasks queued before this one. */
	tpu__ctx_run_sync(a->ctx, barrier, a);
	pthread_mutex_lock(&a->lock);
	while (1) {
		unsigned int io = 0;

		for (p = a->peers; p; p = p->next)
			io += p->io;
		if (!io)
			break;
		pthread_mutex_unlock(&a->lock);
		tpu__ctx_run_sync(a->ctx, barrier, a);
		usleep(1000);
		pthread_mutex_lock(&a->lock);
	}
	pthread_mutex_unlock(&a->lock);
}

/*
 * tpu_context_destroy() of the agent's context before the agent: its pipes
 * close now, while the context's thread runs; tpu_agent_destroy() later
 * frees the rest.  Its requests fail from then on.
 */
static void agent_obj_close(struct tpu__ctx_obj *o)
{
	struct tpu_agent *a = tpu__container_of(o, struct tpu_agent, obj);

	fprintf(stderr, "tpu: xfer agent %s: its context is destroyed before it; its pipes "
		"close now, tpu_agent_destroy() frees the rest\n", a->name);
	ctx_part_close(a);
}

TPU_API tpu_status tpu_agent_create(struct tpu_context *ctx, const struct tpu_agent_options *opts,
				    struct tpu_agent **out)
{
	static const struct tpu_agent_options none;
	const char *urls[2];
	char shm[64], tcp[96];
	size_t nurls = 0, i;
	struct tpu_agent *a;
	tpu_status st;

	if (!out)
		return -EINVAL;
	*out = NULL;
	st = tpu__ctx_check(ctx);
	if (st)
		return st;
	if (!opts)
		opts = &none;
	for (i = 0; i < 4; i++)
		if (opts->reserved[i])
			return -EINVAL;
	if (opts->pad ||
	    (opts->backends & ~(TPU_XFER_BACKEND_CMA | TPU_XFER_BACKEND_TCP | TPU_XFER_BACKEND_KMOD |
				 TPU_XFER_BACKEND_RDMA)) ||
	    (opts->name && (!*opts->name || strlen(opts->name) >= TPU_XFER_NAME_MAX)))
		return -EINVAL;
	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->slots = calloc(XFER_REGS_MAX, sizeof(*a->slots));
	if (!a->slots) {
		free(a);
		return -ENOMEM;
	}
	a->ctx = ctx;
	a->backends = opts->backends ? opts->backends :
				       TPU_XFER_BACKEND_CMA | TPU_XFER_BACKEND_TCP | TPU_XFER_BACKEND_KMOD |
				       TPU_XFER_BACKEND_RDMA;
	if (opts->name)
		snprintf(a->name, sizeof(a->name), "%s", opts->name);
	else
		snprintf(a->name, sizeof(a->name), "pid:%d", (int)getpid());
	pthread_mutex_init(&a->lock, NULL);
	pthread_cond_init(&a->cond, NULL);
	rwlock_init_writer_first(&a->local_rw);
	a->nq_tail = &a->nq;
	a->parked_tail = &a->parked;
	a->next_gen = 1;
	{
		uint8_t nonce[TPU__AUTH_NONCE];

		st = tpu__auth_nonce(nonce);
		memcpy(a->id, nonce, XFER_ID_LEN);
	}
	if (!st && tpu__boot_id(a->boot_id, sizeof(a->boot_id)))
		a->boot_id[0] = 0;
	snprintf(shm, sizeof(shm), "shm://tpu-xfer-%d-%02x%02x%02x%02x", (int)getpid(), a->id[0],
		 a->id[1], a->id[2], a->id[3]);
	if (transport_allowed(ctx, "shm"))
		urls[nurls++] = shm;
	/* Loopback unless TPU_XFER_ADDR names the address peers on other hosts reach. */
	{
		const char *host = getenv("TPU_XFER_ADDR");

		if (!host || !*host || strlen(host) > 63 || strpbrk(host, " /[]"))
			host = "127.0.0.1";
		snprintf(tcp, sizeof(tcp), strchr(host, ':') ? "tcp://[%s]:0" : "tcp://%s:0", host);
	}
	if (transport_allowed(ctx, "tcp"))
		urls[nurls++] = tcp;
	if (!st && !nurls)
		st = TPU_E_NO_TRANSPORT;
	if (!st)
		st = tpu_listener_create(ctx, urls, nurls, &a->listener);
	if (st)
		goto fail;
	if (tpu_listener_url(a->listener, "shm", a->url_shm, sizeof(a->url_shm)))
		a->url_shm[0] = 0;
	if (tpu_listener_url(a->listener, "tcp", a->url_tcp, sizeof(a->url_tcp)))
		a->url_tcp[0] = 0;
	a->magic = XFER_MAGIC_AGENT;
	st = tpu_listener_accept(a->listener, on_accept, a);
	if (st)
		goto fail;
	/* Before its pipes and listener, should the context be destroyed first. */
	a->obj = (struct tpu__ctx_obj){ .close = agent_obj_close, .pass = TPU__CTX_PASS_OWNER,
					.what = "an xfer agent" };
	tpu__ctx_add_obj(ctx, &a->obj);
	*out = a;
	return 0;
fail:
	tpu_listener_close(a->listener);
	pthread_rwlock_destroy(&a->local_rw);
	pthread_cond_destroy(&a->cond);
	pthread_mutex_destroy(&a->lock);
	free(a->slots);
	free(a);
	return st;
}

TPU_API const char *tpu_agent_name(const struct tpu_agent *a)
{
	return tpu__xfer_agent_check(a) ? "" : a->name;
}

TPU_API void tpu_agent_destroy(struct tpu_agent *a)
{
	struct xfer_peer *p, *pn;
	struct xfer_notif *n, *nn;
	size_t left;

	if (tpu__xfer_agent_check(a))
		return;
	ctx_part_close(a);
	left = tpu__xfer_reqs_release(a);
	if (left)
		fprintf(stderr, "tpu: tpu_agent_destroy(%p): %zu request(s) not released; "
			"released now (calls on them fail TPU_E_DESTROYED)\n", (void *)a, left);
	tpu__xfer_regs_free(a);
	tpu__xfer_kmod_close(a);
	for (p = a->peers; p; p = pn) {
		pn = p->next;
		peer_free(p);
	}
	tpu__xfer_rdma_agent_free(a);
	for (n = a->nq; n; n = nn) {
		nn = n->next;
		free(n);
	}
	pthread_rwlock_destroy(&a->local_rw);
	pthread_cond_destroy(&a->cond);
	pthread_mutex_destroy(&a->lock);
	free(a->slots);
	tpu__quarantine(a, &a->magic);
}
