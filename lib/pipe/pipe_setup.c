// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Setting a pipe up (context thread only).
 *
 *   connector				listener
 *   [with a job secret, on every connection: AUTH both ways first, see
 *    pipe_auth.c]
 *   HELLO (its transports, channels)  ->
 *				       <- WELCOME (status, transport, token,
 *					  channel per device pair)
 *   [if the transport changes: a new connection to WELCOME's address,
 *    JOIN (token, lane 0) as its first frame; the first one is closed]
 *   [mtcp channel: WELCOME's lanes more tcp connections, each starting
 *    with JOIN (token, lane 1..lanes); see pipe_lanes.c]
 *   [the channel's own set-up (->setup): kmod passes its domain's
 *    descriptor over the transport]
 *   messages both ways ...
 *
 * The listener decides: the best transport both ends offer with equal
 * compatibility descriptors and that it listens on, and per device pair the best
 * such channel the transport can carry (->supports: kmod needs descriptor
 * passing, mtcp tcp).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "pipe_internal.h"

static void setup_fail(struct tpu_pipe *p, tpu_status st)
{
	tpu__pipe_fail(p, st);
	/* Nobody holds a listener-side pipe before it is accepted. */
	if (!p->connector && !p->delivered) {
		p->closed = true;
		tpu__pipe_maybe_free(p);
	}
}

static tpu_status setup_write(struct tpu_pipe *p, uint8_t *frame, size_t len, tpu__io_cb cb)
{
	tpu_status st;

	tpu__pipe_io_get(p);
	st = p->conn->ops->write(p->conn, &(struct iovec){ frame, len }, 1, cb, p);
	if (st)
		tpu__pipe_io_cancel(p);
	return st;
}

/* Read a frame header, then its body into p->setup_body; then call @next. */
static void frame_body_done(void *arg, tpu_status st);

static void auth_refused(struct tpu_pipe *p, struct tpu__conn *c, tpu_status st, void *arg);

static void frame_hdr_done(void *arg, tpu_status st)
{
	struct tpu_pipe *p = arg;
	struct tpu__wire_hdr h;

	if (p->state == PIPE_FAILED)
		goto out;
	if (!st)
		st = tpu__wire_hdr_decode(p->hdr, &h);
	/* A peer with a secret, we have none: say so rather than hang it up. */
	if (!st && h.type == TPU__WIRE_AUTH && !p->connector && !p->secret.set) {
		tpu__log_debug("pipe %p: refusing a peer that has a secret (this context has none)",
			       (void *)p);
		st = tpu__pipe_auth_refuse(p, p->conn, h.len, auth_refused, NULL);
		if (!st)
			goto out;
	}
	if (!st && (!h.len || (h.type != TPU__WIRE_HELLO && h.type != TPU__WIRE_WELCOME &&
			       h.type != TPU__WIRE_JOIN)))
		st = -EPROTO;
	/* Nothing big is allocated before the peer has said something sensible. */
	if (!st && h.len > TPU__WIRE_SETUP_MAX)
		st = -EMSGSIZE;
	if (!st) {
		p->in_frame = h;
		free(p->setup_body);
		p->setup_body = malloc(h.len);
		st = p->setup_body ? 0 : -ENOMEM;
	}
	if (!st)
		st = tpu__pipe_conn_read(p, p->setup_body, h.len, frame_body_done);
	if (st)
		setup_fail(p, st);
out:
	tpu__pipe_io_put(p);
}

static tpu_status read_frame(struct tpu_pipe *p)
{
	return tpu__pipe_conn_read(p, p->hdr, TPU__WIRE_HDR_LEN, frame_hdr_done);
}

static void setup_written(void *arg, tpu_status st)
{
	struct tpu_pipe *p = arg;

	if (st && p->state != PIPE_FAILED)
		setup_fail(p, st);
	tpu__pipe_io_put(p);
}

/* Bytes of the whole frame at @f (a header we encoded). */
static size_t frame_len(const uint8_t *f)
{
	struct tpu__wire_hdr h = { 0 };

	tpu__wire_hdr_decode(f, &h);
	return TPU__WIRE_HDR_LEN + h.len;
}

static void auth_refused(struct tpu_pipe *p, struct tpu__conn *c, tpu_status st, void *arg)
{
	(void)c;
	(void)arg;
	if (p->state != PIPE_FAILED)
		setup_fail(p, st);
}

/* ---- the channel's own set-up --------------------------------------- */

/* Start the channel's set-up on the pipe's connection; @done as for ->setup. */
static tpu_status chan_setup(struct tpu_pipe *p, tpu__io_cb done)
{
	tpu_status st;

	if (!p->chan->setup)
		return 0;
	p->link.conn = p->conn;
	tpu__pipe_io_get(p);
	st = p->chan->setup(&p->link, done, p);
	if (st)
		tpu__pipe_io_cancel(p);
	return st;
}

/* Listener side: the channel is set up; hand the pipe over. */
static void acceptor_chan_ready(void *arg, tpu_status st)
{
	struct tpu_pipe *p = arg;

	if (p->state == PIPE_FAILED)
		goto out;
	if (st) {
		setup_fail(p, st);
		goto out;
	}
	tpu__pipe_opened(p);
	tpu__listener_deliver(p->listener, p);
out:
	tpu__pipe_io_put(p);
}

/* Listener side, on the connection the pipe will use: finish and hand over. */
static void acceptor_finish(struct tpu_pipe *p)
{
	tpu_status st;

	if (p->chan->setup) {
		st = chan_setup(p, acceptor_chan_ready);
		if (st)
			setup_fail(p, st);
		return;
	}
	tpu__pipe_opened(p);
	tpu__listener_deliver(p->listener, p);
}

/* ---- connector ---------------------------------------------------------- */

/* The connection of a transport switch proved the secret: JOIN on it. */
static void switch_authed(struct tpu_pipe *p, struct tpu__conn *c, tpu_status st, void *arg)
{
	(void)arg;
	if (p->state == PIPE_FAILED)
		return;
	if (!st && c != p->conn)
		st = -EPROTO;
	if (!st)
		st = setup_write(p, p->setup_frame, frame_len(p->setup_frame), setup_written);
	if (st)
		tpu__pipe_fail(p, st);
	else
		tpu__pipe_connector_step_done(p);
}

static tpu_status connector_welcome(struct tpu_pipe *p, const struct tpu__wire_welcome *w)
{
	char name[TPU__WIRE_NAME_MAX + 1], addr[TPU__WIRE_ADDR_MAX + 1];
	const struct tpu__xport *x;
	const struct tpu__chan *chan = &tpu__chan_basic;
	tpu_status st;

	if (w->status)
		return w->status;
	st = tpu__wire_blob_str(w->xport.name, name, sizeof(name));
	if (st)
		return -EPROTO;
	x = tpu__pipe_xport_by_name(name, strlen(name));
	if (!x || !p->policy.xport_ok[tpu__pipe_xport_index(x)])
		return -EPROTO;
	for (uint32_t i = 0; i < w->nchans; i++) {
		const struct tpu__wire_chan_entry *e = &w->chans[i];
		const struct tpu__chan *c = tpu__chan_by_name((const char *)e->name.data, e->name.len);

		if (!c || !p->policy.chan_ok[tpu__chan_index(c)] ||
		    !c->supports(x, e->src_type, e->dst_type))
			return -EPROTO;
		if (e->src_type == TPU_DEVICE_CPU && e->dst_type == TPU_DEVICE_CPU)
			chan = c;
		else
			p->dchan[e->src_type][e->dst_type] = c;
	}
	if (!chan->supports(x, TPU_DEVICE_CPU, TPU_DEVICE_CPU))
		return -EPROTO;
	for (uint32_t s = 0; s < 2; s++)
		for (uint32_t d = 0; d < 2; d++)
			if (p->dchan[s][d] && !tpu__chan_beside(chan, p->dchan[s][d]))
				return -EPROTO;
	/* Lanes are tcp connections, and only channels that use them ask for them. */
	if (chan->flags & TPU__CHAN_LANES ? !w->lanes || !w->token : w->lanes)
		return -EPROTO;
	p->chan = chan;
	/* Held until the end here; each connection proving the secret holds one more. */
	p->auth_pending = 1;
	if (chan->flags & TPU__CHAN_LANES) {
		const char *lane_addr = p->connect_addr;

		/* Lanes go where the pipe went, unless the pipe moves. */
		if (x != p->xport) {
			st = tpu__wire_blob_str(w->xport.addr, addr, sizeof(addr));
			if (st)
				return -EPROTO;
			lane_addr = addr;
		}
		st = tpu__mtcp_connect(p, lane_addr, w->token, w->lanes);
		if (st)
			return st;
	}
	if (x != p->xport) {
		struct tpu__wire_join join = { .token = w->token, .lane = 0 };
		struct tpu__conn *old = p->conn;
		long len;

		st = tpu__wire_blob_str(w->xport.addr, addr, sizeof(addr));
		if (st)
			return -EPROTO;
		tpu__log_debug("pipe %p: moving from %s to %s://%s", (void *)p, p->xport->name,
			       x->name, addr);
		st = x->connect(p->ctx, addr, &p->conn);
		if (st) {
			p->conn = old;
			return st;
		}
		old->ops->close(old);
		p->xport = x;
		len = tpu__wire_join_encode(NULL, 0, &join);
		free(p->setup_frame);
		p->setup_frame = malloc((size_t)len);
		if (!p->setup_frame)
			return -ENOMEM;
		tpu__wire_join_encode(p->setup_frame, (size_t)len, &join);
		if (p->secret.set) {
			/* JOIN, and anything after it, waits for the proof on the new connection. */
			p->auth_pending++;
			st = tpu__pipe_auth(p, p->conn, true, switch_authed, NULL);
			if (st)
				p->auth_pending--;
		} else {
			st = setup_write(p, p->setup_frame, (size_t)len, setup_written);
		}
		if (st)
			return st;
	}
	tpu__pipe_connector_step_done(p);
	return 0;
}

void tpu__pipe_connector_step_done(struct tpu_pipe *p)
{
	tpu_status st;

	if (p->state == PIPE_FAILED || --p->auth_pending)
		return;
	/* The connector does not wait for the channel: its pipe is open now. */
	st = chan_setup(p, setup_written);
	if (st)
		tpu__pipe_fail(p, st);
	else
		tpu__pipe_opened(p);
}

static void connector_frame(struct tpu_pipe *p)
{
	struct tpu__wire_welcome w;
	tpu_status st = -EPROTO;

	if (p->in_frame.type == TPU__WIRE_WELCOME)
		st = tpu__wire_welcome_decode(p->setup_body, p->in_frame.len, &w);
	if (!st)
		st = connector_welcome(p, &w);
	free(p->setup_body);
	p->setup_body = NULL;
	if (st)
		tpu__pipe_fail(p, st);
}

static tpu_status send_hello(struct tpu_pipe *p)
{
	tpu_status st = setup_write(p, p->setup_frame, frame_len(p->setup_frame), setup_written);

	return st ? st : read_frame(p);
}

static void hello_authed(struct tpu_pipe *p, struct tpu__conn *c, tpu_status st, void *arg)
{
	(void)c;
	(void)arg;
	if (p->state == PIPE_FAILED)
		return;
	if (!st)
		st = send_hello(p);
	if (st)
		tpu__pipe_fail(p, st);
}

tpu_status tpu__pipe_connector_start(struct tpu_pipe *p, const struct tpu__xport *x,
				     const char *addr)
{
	struct tpu__wire_hello h = { .version = TPU__WIRE_VERSION };
	struct tpu__pipe_offer offer;
	long len;
	tpu_status st;

	st = tpu__pipe_offer(p->ctx, &p->policy, &offer);
	if (st)
		return st;
	for (unsigned int i = 0; i < offer.nxports; i++)
		h.xports[h.nxports++] = (struct tpu__wire_xport_entry){
			.name = { (const uint8_t *)offer.xports[i].xport->name,
				  (uint32_t)strlen(offer.xports[i].xport->name) },
			.compat = { (const uint8_t *)offer.xports[i].compat,
				    (uint32_t)strlen(offer.xports[i].compat) },
		};
	/* An entry per channel and device pair it moves over some transport offered. */
	for (unsigned int i = 0; i < offer.nchans; i++) {
		const struct tpu__chan *c = offer.chans[i].chan;

		for (uint32_t pair = 0; pair < 4; pair++) {
			uint32_t src = pair >> 1, dst = pair & 1;
			bool any = false;

			for (unsigned int j = 0; j < offer.nxports; j++)
				any |= c->supports(offer.xports[j].xport, src, dst);
			if (!any || h.nchans == TPU__WIRE_ENTRIES_MAX)
				continue;
			h.chans[h.nchans++] = (struct tpu__wire_chan_entry){
				.name = { (const uint8_t *)c->name, (uint32_t)strlen(c->name) },
				.src_type = src, .dst_type = dst,
				.compat = { (const uint8_t *)offer.chans[i].compat,
					    (uint32_t)strlen(offer.chans[i].compat) },
			};
		}
	}
	len = tpu__wire_hello_encode(NULL, 0, &h);
	if (len < 0)
		return (tpu_status)len;
	p->setup_frame = malloc((size_t)len);
	if (!p->setup_frame)
		return -ENOMEM;
	tpu__wire_hello_encode(p->setup_frame, (size_t)len, &h);
	if (strlen(addr) >= sizeof(p->connect_addr))
		return -EINVAL;
	strcpy(p->connect_addr, addr);
	st = x->connect(p->ctx, addr, &p->conn);
	if (st)
		return st;
	p->xport = x;
	tpu__ctx_secret(p->ctx, &p->secret);
	if (p->secret.set)
		st = tpu__pipe_auth(p, p->conn, true, hello_authed, NULL);
	else
		st = send_hello(p);
	if (st)
		tpu__pipe_fail(p, st);
	return 0;
}

/* ---- listener side ------------------------------------------------------ */

static bool same(struct tpu__wire_blob b, const char *s)
{
	return b.len == strlen(s) && !memcmp(b.data, s, b.len);
}

/*
 * The best channel of @offer the two ends share for one device pair over
 * @x, beside CPU channel @cpu (NULL: choosing that one), or NULL.
 */
static const struct tpu__chan *choose_chan(const struct tpu__wire_hello *h,
					   const struct tpu__pipe_offer *offer,
					   const struct tpu__xport *x, const struct tpu__chan *cpu,
					   uint32_t src, uint32_t dst)
{
	/* Offers list channels best first. */
	for (unsigned int i = 0; i < offer->nchans; i++) {
		const struct tpu__chan *c = offer->chans[i].chan;

		if (!c->supports(x, src, dst) || (cpu && !tpu__chan_beside(cpu, c)))
			continue;
		for (uint32_t j = 0; j < h->nchans; j++)
			if (h->chans[j].src_type == src && h->chans[j].dst_type == dst &&
			    same(h->chans[j].name, c->name) &&
			    same(h->chans[j].compat, offer->chans[i].compat))
				return c;
	}
	return NULL;
}

/* The listener's choice for @h; fills @w (strings point into @offer or static data). */
static void choose(struct tpu_pipe *p, const struct tpu__wire_hello *h,
		   const struct tpu__pipe_offer *offer, struct tpu__wire_welcome *w,
		   const struct tpu__xport **chosen)
{
	const struct tpu__xport *best = NULL;
	const char *best_compat = NULL;
	const struct tpu__chan *chan = &tpu__chan_basic;
	const char *addr;

	memset(w, 0, sizeof(*w));
	*chosen = NULL;
	if (h->version != TPU__WIRE_VERSION) {
		w->status = -EPROTONOSUPPORT;
		return;
	}
	for (unsigned int i = 0; i < offer->nxports; i++) {
		const struct tpu__xport *x = offer->xports[i].xport;

		if (tpu__listener_url_for(p->listener, x, &addr))
			continue;
		if (best && best->priority >= x->priority)
			continue;
		for (uint32_t j = 0; j < h->nxports; j++) {
			if (same(h->xports[j].name, x->name) &&
			    same(h->xports[j].compat, offer->xports[i].compat)) {
				best = x;
				best_compat = offer->xports[i].compat;
			}
		}
	}
	if (!best) {
		w->status = -ENOPROTOOPT;
		return;
	}
	(void)best_compat;
	chan = choose_chan(h, offer, best, NULL, TPU_DEVICE_CPU, TPU_DEVICE_CPU);
	if (!chan)
		chan = &tpu__chan_basic;
	p->chan = chan;
	if (chan->flags & TPU__CHAN_LANES)
		p->link.nlanes = w->lanes = p->policy.mtcp_lanes;
	*chosen = best;
	w->xport.name = (struct tpu__wire_blob){ (const uint8_t *)best->name,
						 (uint32_t)strlen(best->name) };
	if (best != p->xport) {
		tpu__listener_url_for(p->listener, best, &addr);
		w->xport.addr = (struct tpu__wire_blob){ (const uint8_t *)addr,
							 (uint32_t)strlen(addr) };
	}
	w->nchans = 1;
	w->chans[0] = (struct tpu__wire_chan_entry){
		.name = { (const uint8_t *)chan->name, (uint32_t)strlen(chan->name) },
		.src_type = TPU_DEVICE_CPU, .dst_type = TPU_DEVICE_CPU,
	};
	/* CUDA on a side: a channel per pair, or none (such writes then fail). */
	for (uint32_t pair = 1; pair < 4; pair++) {
		uint32_t src = pair >> 1, dst = pair & 1;
		const struct tpu__chan *c = choose_chan(h, offer, best, chan, src, dst);

		p->dchan[src][dst] = c;
		if (c)
			w->chans[w->nchans++] = (struct tpu__wire_chan_entry){
				.name = { (const uint8_t *)c->name, (uint32_t)strlen(c->name) },
				.src_type = src, .dst_type = dst,
			};
	}
}

static void welcome_written(void *arg, tpu_status st)
{
	struct tpu_pipe *p = arg;

	if (p->state == PIPE_FAILED)
		goto out;
	if (st) {
		setup_fail(p, st);
		goto out;
	}
	if (p->error) {
		/* The WELCOME carried a refusal: the connector knows why. */
		setup_fail(p, p->error);
		goto out;
	}
	if (p->token) {
		/* The pipe continues on the connection its JOIN comes on. */
		if (p->await_main) {
			struct tpu__conn *c = p->conn;

			p->conn = NULL;
			c->ops->close(c);
		}
		tpu__listener_await_join(p->listener, p);
		goto out;
	}
	acceptor_finish(p);
out:
	tpu__pipe_io_put(p);
}

static tpu_status acceptor_hello(struct tpu_pipe *p)
{
	struct tpu__wire_hello h;
	struct tpu__wire_welcome w;
	struct tpu__pipe_offer offer;
	const struct tpu__xport *x;
	tpu_status st;
	long len;

	st = tpu__wire_hello_decode(p->setup_body, p->in_frame.len, &h);
	if (st)
		return st;
	st = tpu__pipe_offer(p->ctx, &p->policy, &offer);
	if (st)
		return st;
	choose(p, &h, &offer, &w, &x);
	if (w.status) {
		tpu__log_debug("pipe %p: refusing a peer: %s", (void *)p, tpu_strerror(w.status));
		p->error = w.status;
	} else if (x != p->xport || p->link.nlanes) {
		p->await_main = x != p->xport;
		while (!p->token)
			if (getrandom(&p->token, sizeof(p->token), 0) != sizeof(p->token))
				p->token = ((uint64_t)rand() << 32) ^ (uint64_t)rand();
		w.token = p->token;
	}
	len = tpu__wire_welcome_encode(NULL, 0, &w);
	if (len < 0)
		return (tpu_status)len;
	free(p->setup_frame);
	p->setup_frame = malloc((size_t)len);
	if (!p->setup_frame)
		return -ENOMEM;
	tpu__wire_welcome_encode(p->setup_frame, (size_t)len, &w);
	return setup_write(p, p->setup_frame, (size_t)len, welcome_written);
}

static tpu_status acceptor_join(struct tpu_pipe *p)
{
	struct tpu__wire_join j;
	struct tpu_pipe *q;
	struct tpu__conn *c;
	tpu_status st;

	st = tpu__wire_join_decode(p->setup_body, p->in_frame.len, &j);
	if (st)
		return st;
	q = tpu__listener_find_join(p->listener, j.token);
	if (!q || (!j.lane && !q->await_main))
		return -EPROTO;
	c = p->conn;
	if (j.lane) {
		st = tpu__mtcp_lane_joined(q, j.lane, c);
		if (st)
			return st;
	} else {
		q->await_main = false;
		q->conn = c;
		q->xport = c->xport;
	}
	/* This stand-in pipe gave its connection to the one the JOIN names. */
	p->conn = NULL;
	setup_fail(p, TPU_E_CLOSED);
	if (!q->await_main && q->lanes_joined == q->link.nlanes) {
		q->token = 0;
		acceptor_finish(q);
	}
	return 0;
}

static void frame_body_done(void *arg, tpu_status st)
{
	struct tpu_pipe *p = arg;

	if (p->state == PIPE_FAILED)
		goto out;
	if (st) {
		setup_fail(p, st);
		goto out;
	}
	if (p->connector) {
		connector_frame(p);
		goto out;
	}
	if (p->in_frame.type == TPU__WIRE_HELLO)
		st = acceptor_hello(p);
	else if (p->in_frame.type == TPU__WIRE_JOIN)
		st = acceptor_join(p);
	else
		st = -EPROTO;
	if (st)
		setup_fail(p, st);
out:
	tpu__pipe_io_put(p);
}

static void acceptor_authed(struct tpu_pipe *p, struct tpu__conn *c, tpu_status st, void *arg)
{
	(void)c;
	(void)arg;
	if (p->state == PIPE_FAILED)
		return;
	if (!st)
		st = read_frame(p);
	if (st)
		setup_fail(p, st);
}

void tpu__pipe_acceptor_start(struct tpu_pipe *p, struct tpu__conn *conn)
{
	tpu_status st;

	p->conn = conn;
	p->xport = conn->xport;
	/* With a secret, nothing but AUTH is read before the peer proved it. */
	tpu__ctx_secret(p->ctx, &p->secret);
	if (p->secret.set)
		st = tpu__pipe_auth(p, conn, false, acceptor_authed, NULL);
	else
		st = read_frame(p);
	if (st)
		setup_fail(p, st);
}

void tpu__pipe_setup_abort(struct tpu_pipe *p, tpu_status st)
{
	setup_fail(p, st);
}
