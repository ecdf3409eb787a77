// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The rdma channel, beside the rdma transport: the writer registers the
 * tensor for remote reads and says where it lies (address and rkey, 12
 * bytes of per-tensor descriptor); the reader registers its destination,
 * pulls the tensor with RDMA READs on the pipe's own queue pair, CHUNK
 * bytes at a time and CHUNKS_IN_FLIGHT at once, so that the pipe's other
 * traffic interleaves with a large tensor, then ACKs it; the writer holds
 * its memory, and its registration, until that ACK.  No bounce copy on
 * either side.
 *
 * Registration policy: a writer's tensor that names its tpu_buffer
 * (t->buffer, the tensor inside it) is registered once per pipe, the whole
 * buffer, and kept in the pipe's cache keyed on the buffer's id, which the
 * process never reuses: a buffer freed and another allocated at the same
 * address have different ids, so a stale registration is never matched.
 * The cache holds CACHE_ENTRIES registrations and CACHE_BYTES at most,
 * evicts the least recently used one no transfer holds, and goes with the
 * pipe (a freed buffer's pages stay pinned until then, within those
 * bounds).  Every other tensor, any raw user pointer, and every reader's
 * destination is registered for its one transfer and deregistered when it
 * ends (the writer's at the ACK or when the pipe closes, the reader's when
 * its READs are done): the library cannot know when the program frees or
 * reuses such memory, so it never guesses by address.
 *
 * Compatibility descriptor: "rdma" where an RDMA device and rdma_cm exist;
 * the transport it goes beside proves the two ends reach each other.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "channel.h"

#define RDMA_DESC_LEN		12	/* address (8 bytes), rkey (4), little-endian */
#define CHUNK			(1u << 20)
#define CHUNKS_IN_FLIGHT	2
#define CACHE_ENTRIES		16
#define CACHE_BYTES		(256ull << 20)

/* A tpu_buffer's registration, kept by the pipe (see the policy above). */
struct creg {
	uint64_t id;			/* the buffer's; 0: a free slot */
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	unsigned int users;		/* writer transfers holding it */
	uint64_t used;			/* the cache's clock at its last use */
};

/* Registrations made and taken from the cache, for the tests (any thread). */
atomic_ulong tpu__chan_rdma_regs, tpu__chan_rdma_cache_hits;

/* A writer's registration, until the reader's ACK. */
struct wreg {
	struct wreg *next;
	uint64_t seq;
	uint32_t idx;
	struct ibv_mr *mr;		/* NULL: registering failed (err), or an empty tensor */
	struct creg *cached;		/* mr is this cache entry's, not ours */
	tpu_status err;
};

/* The channel's state on one pipe (link->state). */
struct rdma_chan {
	struct wreg *regs;
	struct creg cache[CACHE_ENTRIES];
	uint64_t clock;
	uint64_t cache_bytes;
	unsigned int reads;		/* reader transfers not finished */
	bool closed;
};

/* One tensor being pulled. */
struct pull {
	struct tpu__chan_xfer x;
	struct rdma_chan *ch;
	struct ibv_mr *mr;
	uint64_t raddr;
	uint32_t rkey;
	uint64_t off;			/* bytes asked for so far */
	unsigned int inflight;
	tpu_status status;
};

static struct rdma_chan *chan_state(struct tpu__chan_link *l)
{
	if (!l->state && !l->closed)
		l->state = calloc(1, sizeof(struct rdma_chan));
	return l->state;
}

static void chan_free_if_done(struct rdma_chan *ch)
{
	if (ch->closed && !ch->reads)
		free(ch);
}

static void cache_drop(struct rdma_chan *ch, struct creg *e)
{
	ch->cache_bytes -= e->mr->length;
	ibv_dereg_mr(e->mr);
	*e = (struct creg){ 0 };
}

/* Make room for @len bytes: evict the least recently used entries no transfer holds. */
static struct creg *cache_slot(struct rdma_chan *ch, uint64_t len)
{
	for (;;) {
		struct creg *free_slot = NULL, *lru = NULL;

		for (int i = 0; i < CACHE_ENTRIES; i++) {
			struct creg *e = &ch->cache[i];

			if (!e->id)
				free_slot = free_slot ? free_slot : e;
			else if (!e->users && (!lru || e->used < lru->used))
				lru = e;
		}
		if (free_slot && ch->cache_bytes + len <= CACHE_BYTES)
			return free_slot;
		if (!lru)
			return NULL;
		cache_drop(ch, lru);
	}
}

/*
 * The registration of tensor @t's whole buffer on @pd, from the cache or
 * made now; NULL when the tensor names no buffer, lies outside it, or the
 * cache has no room (the caller registers the tensor alone then).
 */
static struct creg *cache_get(struct rdma_chan *ch, struct ibv_pd *pd,
			      const struct tpu_message_tensor *t)
{
	const struct tpu_buffer *b = t->buffer;
	uintptr_t lo, hi;
	struct creg *e;

	if (!b || !pd || b->len > CACHE_BYTES)
		return NULL;
	lo = (uintptr_t)b->data;
	hi = lo + b->len;
	if ((uintptr_t)t->data < lo || (uintptr_t)t->data > hi || t->len > hi - (uintptr_t)t->data)
		return NULL;
	for (int i = 0; i < CACHE_ENTRIES; i++) {
		e = &ch->cache[i];
		if (e->id == b->id && e->pd == pd) {
			e->used = ++ch->clock;
			atomic_fetch_add_explicit(&tpu__chan_rdma_cache_hits, 1,
						  memory_order_relaxed);
			return e;
		}
	}
	e = cache_slot(ch, b->len);
	if (!e)
		return NULL;
	e->mr = ibv_reg_mr(pd, b->data, b->len, IBV_ACCESS_REMOTE_READ);
	if (!e->mr)
		return NULL;
	atomic_fetch_add_explicit(&tpu__chan_rdma_regs, 1, memory_order_relaxed);
	e->id = b->id;
	e->pd = pd;
	e->used = ++ch->clock;
	ch->cache_bytes += b->len;
	return e;
}

/* ---- writer ----------------------------------------------------------------- */

/* Register the tensor now (describe cannot fail): send reports a failure. */
static void rdma_describe(const struct tpu__chan_xfer *x, uint8_t *d)
{
	struct rdma_chan *ch = chan_state(x->link);
	struct ibv_pd *pd = tpu__rdma_pd(x->link->conn);
	struct wreg *r = calloc(1, sizeof(*r));

	memset(d, 0, RDMA_DESC_LEN);
	if (!ch || !r) {
		free(r);
		return;			/* send finds no registration: -ENOMEM */
	}
	*r = (struct wreg){ .seq = x->seq, .idx = x->idx };
	if (x->t->len) {
		r->cached = cache_get(ch, pd, x->t);
		if (r->cached) {
			r->cached->users++;
			r->mr = r->cached->mr;
		} else {
			r->mr = pd ? ibv_reg_mr(pd, x->t->data, x->t->len, IBV_ACCESS_REMOTE_READ) :
				     NULL;
			if (r->mr)
				atomic_fetch_add_explicit(&tpu__chan_rdma_regs, 1,
							  memory_order_relaxed);
		}
		if (!r->mr)
			r->err = pd ? tpu__errno() : -EPIPE;	/* the connection is down */
	}
	if (r->mr) {
		tpu__chan_put_le(d, (uint64_t)(uintptr_t)x->t->data, 8);
		tpu__chan_put_le(d + 8, r->mr->rkey, 4);
	}
	r->next = ch->regs;
	ch->regs = r;
}

static struct wreg *find_reg(struct rdma_chan *ch, uint64_t seq, uint32_t idx, bool unlink)
{
	for (struct wreg **pp = &ch->regs; *pp; pp = &(*pp)->next) {
		struct wreg *r = *pp;

		if (r->seq == seq && r->idx == idx) {
			if (unlink)
				*pp = r->next;
			return r;
		}
	}
	return NULL;
}

static void reg_free(struct wreg *r)
{
	if (r->cached)
		r->cached->users--;
	else if (r->mr)
		ibv_dereg_mr(r->mr);
	free(r);
}

/* Nothing to send: the reader pulls, the writer waits for its ACK. */
static tpu_status rdma_send(struct tpu__chan_link *l, struct tpu__chan_xfer *x)
{
	struct rdma_chan *ch = l->state;
	struct wreg *r = ch ? find_reg(ch, x->seq, x->idx, false) : NULL;

	if (!r)
		return -ENOMEM;
	if (r->err) {
		tpu_status st = r->err;

		find_reg(ch, x->seq, x->idx, true);
		reg_free(r);
		tpu__log_debug("rdma channel: registering %zu bytes: %s", (size_t)x->t->len,
			       tpu_strerror(st));
		return st;
	}
	x->part_start(x, TPU__PART_ACK);
	return 0;
}

static void rdma_acked(struct tpu__chan_link *l, uint64_t seq, uint32_t idx)
{
	struct rdma_chan *ch = l->state;
	struct wreg *r = ch ? find_reg(ch, seq, idx, true) : NULL;

	if (r)
		reg_free(r);
}

/* ---- reader ----------------------------------------------------------------- */

static void pull_more(struct pull *p);

static void pull_finish(struct pull *p)
{
	tpu_status st = p->status;

	if (p->mr)
		ibv_dereg_mr(p->mr);
	/* The ACK first: it keeps the read open while its frame goes out. */
	if (!p->x.link->closed && p->x.link->conn)
		p->x.ack(&p->x, st);
	p->x.part_done(&p->x, TPU__PART_CHAN, st);
	p->ch->reads--;
	chan_free_if_done(p->ch);
	free(p);
}

static void chunk_done(void *arg, tpu_status st)
{
	struct pull *p = arg;

	p->inflight--;
	if (st && !p->status)
		p->status = st;
	if (!p->status && p->off < p->x.t->len)
		pull_more(p);
	if (!p->inflight)
		pull_finish(p);
}

static void pull_more(struct pull *p)
{
	while (!p->status && p->off < p->x.t->len && p->inflight < CHUNKS_IN_FLIGHT) {
		uint64_t n = p->x.t->len - p->off;
		tpu_status st;

		if (n > CHUNK)
			n = CHUNK;
		st = tpu__rdma_read(p->x.link->conn, (uint8_t *)p->x.t->data + p->off, p->mr->lkey,
				    p->raddr + p->off, p->rkey, (uint32_t)n, chunk_done, p);
		if (st) {
			p->status = st;
			break;
		}
		p->off += n;
		p->inflight++;
	}
}

static tpu_status rdma_recv(struct tpu__chan_link *l, struct tpu__chan_xfer *x)
{
	struct rdma_chan *ch = chan_state(l);
	struct ibv_pd *pd = tpu__rdma_pd(l->conn);
	struct pull *p;

	if (!x->t->len)
		return x->ack(x, 0);
	/* The pipe is open, so its connection was: it went down since. */
	if (!pd)
		return x->ack(x, -ECONNRESET);
	p = ch ? calloc(1, sizeof(*p)) : NULL;
	if (!p)
		return -ENOMEM;
	*p = (struct pull){ .x = *x, .ch = ch, .raddr = tpu__chan_get_le(x->desc, 8),
			    .rkey = (uint32_t)tpu__chan_get_le(x->desc + 8, 4) };
	p->mr = ibv_reg_mr(pd, x->t->data, x->t->len, IBV_ACCESS_LOCAL_WRITE);
	if (!p->mr || !p->raddr) {
		/* The writer could not register (a zero address), or this side cannot. */
		tpu_status st = p->mr ? -EREMOTEIO : tpu__errno();

		if (p->mr)
			ibv_dereg_mr(p->mr);
		free(p);
		return x->ack(x, st);
	}
	ch->reads++;
	x->part_start(x, TPU__PART_CHAN);
	p->status = tpu__rdma_read(l->conn, x->t->data, p->mr->lkey, p->raddr, p->rkey,
				   (uint32_t)(x->t->len < CHUNK ? x->t->len : CHUNK), chunk_done, p);
	if (p->status) {
		/* Nothing in flight: end the part unreported, as the interface asks. */
		tpu_status st = p->status;

		x->part_cancel(x, TPU__PART_CHAN);
		ibv_dereg_mr(p->mr);
		ch->reads--;
		free(p);
		return x->ack(x, st);
	}
	p->off = x->t->len < CHUNK ? x->t->len : CHUNK;
	p->inflight = 1;
	pull_more(p);
	return 0;
}

/* ---- pipe ------------------------------------------------------------------ */

/* The pipe failed or closed: the ACKs will not come; pulls end through the transport. */
static void rdma_close(struct tpu__chan_link *l)
{
	struct rdma_chan *ch = l->state;

	if (!ch)
		return;
	while (ch->regs) {
		struct wreg *r = ch->regs;

		ch->regs = r->next;
		reg_free(r);
	}
	for (int i = 0; i < CACHE_ENTRIES; i++)
		if (ch->cache[i].id)
			cache_drop(ch, &ch->cache[i]);
	ch->closed = true;
	l->state = NULL;
	chan_free_if_done(ch);
}

static tpu_status rdma_descriptor(struct tpu_context *ctx, char *buf, size_t size)
{
	(void)ctx;
	return tpu__xport_rdma.compat_descriptor(buf, size);
}

static bool rdma_supports(const struct tpu__xport *x, enum tpu_device_type src,
			  enum tpu_device_type dst)
{
	return x == &tpu__xport_rdma && src == TPU_DEVICE_CPU && dst == TPU_DEVICE_CPU;
}

const struct tpu__chan tpu__chan_rdma = {
	.name = "rdma",
	.wire_id = 4,
	.flags = TPU__CHAN_ACKED,
	.desc_len = RDMA_DESC_LEN,
	.descriptor = rdma_descriptor,
	.supports = rdma_supports,
	.describe = rdma_describe,
	.send = rdma_send,
	.recv = rdma_recv,
	.acked = rdma_acked,
	.close = rdma_close,
};
