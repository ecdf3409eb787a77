// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The target's side, on its context thread: loads (which confirm a blob
 * and record the peer as one to revoke) and, for the tcp backend, the
 * requests themselves.  Every element is checked against the registration
 * it names (that this peer loaded it, its access, its bounds) before any
 * byte of the message moves; one bad element fails the message whole.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "xfer.h"

void tpu__xfer_serve_load(struct xfer_peer *p)
{
	struct tpu_agent *a = p->a;
	struct xfer_hdr ans = { .type = XFER_LOAD_ANS, .id = p->in.h.id };
	struct tpu_xfer_reg *r;

	if (memcmp(p->in.pl[0].data, a->id, XFER_ID_LEN)) {
		ans.status = TPU_E_BAD_BLOB;	/* a blob of another agent */
		goto answer;
	}
	pthread_mutex_lock(&a->lock);
	r = tpu__xfer_reg_find(a, p->in.h.reg);
	/* A failed peer was forgotten (and may be reaped): it is not recorded again. */
	if (!r || atomic_load(&r->revoked) || !r->access || atomic_load(&p->error) ||
	    !tpu__ct_equal(&r->key, &p->in.h.key, sizeof(r->key))) {
		ans.status = TPU_E_REVOKED;
	} else {
		size_t i;

		for (i = 0; i < r->nloaders && r->loaders[i] != p; i++)
			;
		if (i == r->nloaders) {
			if (r->nloaders == r->loaders_cap) {
				size_t cap = r->loaders_cap ? 2 * r->loaders_cap : 4;
				struct xfer_peer **n = realloc(r->loaders, cap * sizeof(*n));

				if (!n)
					ans.status = -ENOMEM;
				else {
					r->loaders = n;
					r->loaders_cap = cap;
				}
			}
			if (!ans.status)
				r->loaders[r->nloaders++] = p;
		}
		ans.addr = (uintptr_t)r->addr;
		ans.len = r->len;
		ans.access = r->access;
		ans.flags = r->dev.type ? XFER_F_SERVED : 0;
		if (ans.status || r->dev.type) {
			/* CUDA memory: neither the module nor an MR of ours reaches it. */
		} else if (p->rdma) {
			/* A peer with an rdma link: this registration's rkey in its own domain. */
			uint32_t rkey;

			ans.status = tpu__xfer_rdma_grant(p, r, &rkey);
			ans.key = rkey;
			ans.flags = ans.status ? 0 : XFER_F_RKEY;
		} else {
			ans.key = tpu__xfer_kmod_grant(a, r, p->in.h.addr);
		}
	}
	pthread_mutex_unlock(&a->lock);
answer:
	tpu__xfer_send(p, &ans, NULL, NULL, 0);
}

struct served {
	struct xfer_peer *p;
	void *buf;
	uint64_t bytes;		/* of a->serve_bytes, given back once sent */
};

static void resp_sent(void *arg, tpu_status st)
{
	struct served *s = arg;

	(void)st;
	free(s->buf);
	tpu__xfer_serve_release(s->p->a, s->bytes);
	tpu__xfer_serve_resume(s->p);
	free(s);
}

/* a->lock held: @p loaded @r (a guessed id names nothing). */
static bool loaded_by(const struct tpu_xfer_reg *r, const struct xfer_peer *p)
{
	size_t i;

	for (i = 0; i < r->nloaders; i++)
		if (r->loaders[i] == p)
			return true;
	return false;
}

/* Check every element; on success each one's registration is held busy. */
static tpu_status check_elems(struct xfer_peer *p, const struct xfer_hdr *h, const uint8_t *el,
			      struct tpu_xfer_reg **regs)
{
	struct tpu_agent *a = p->a;
	unsigned int need = h->op == TPU_XFER_OP_WRITE ? TPU_XFER_WRITE : TPU_XFER_READ;
	struct tpu_xfer_reg *last = NULL;
	uint64_t total = 0;
	tpu_status st = 0;
	uint32_t i;

	pthread_mutex_lock(&a->lock);
	for (i = 0; i < h->n && !st; i++) {
		uint64_t id = tpu__get_le64(el + i * XFER_ELEM_LEN);
		uint64_t off = tpu__get_le64(el + i * XFER_ELEM_LEN + 8);
		uint64_t len = tpu__get_le64(el + i * XFER_ELEM_LEN + 16);
		struct tpu_xfer_reg *r = last && last->id == id ? last : tpu__xfer_reg_find(a, id);

		if (!r || (r != last && !loaded_by(r, p)))
			st = TPU_E_REVOKED;
		else if (atomic_load(&r->revoked))
			st = TPU_E_REVOKED;
		else if (!(r->access & need))
			st = -EACCES;
		else if (off > r->len || len > r->len - off || len > h->len - total)
			st = -EINVAL;
		last = r;
		regs[i] = r;
		total += len;
	}
	if (!st && total != h->len)
		st = -EINVAL;
	if (!st)
		for (i = 0; i < h->n; i++)
			regs[i]->busy++;
	pthread_mutex_unlock(&a->lock);
	return st;
}

void tpu__xfer_serve(struct xfer_peer *p)
{
	struct tpu_agent *a = p->a;
	const struct xfer_hdr *h = &p->in.h;
	struct xfer_hdr ans = { .type = XFER_RESP, .id = h->id, .key = h->key, .n = h->n,
				.flags = h->flags };
	const uint8_t *el = p->in.pl[0].data;
	struct tpu_xfer_reg **regs;
	uint8_t *data = NULL, *q;
	struct served *s = NULL;
	uint32_t i;

	regs = malloc(h->n * sizeof(*regs));
	if (!regs) {
		ans.status = -ENOMEM;
		goto answer;
	}
	ans.status = check_elems(p, h, el, regs);
	if (ans.status)
		goto answer;
	if (h->op == TPU_XFER_OP_READ) {
		data = malloc(h->len ? h->len : 1);
		s = malloc(sizeof(*s));
		if (!data || !s)
			ans.status = -ENOMEM;
	}
	q = h->op == TPU_XFER_OP_READ ? data : p->in.pl[1].data;
	for (i = 0; i < h->n && !ans.status; i++) {
		uint64_t off = tpu__get_le64(el + i * XFER_ELEM_LEN + 8);
		uint64_t len = tpu__get_le64(el + i * XFER_ELEM_LEN + 16);

		if (regs[i]->dev.type)
			ans.status = tpu__xfer_reg_copy(regs[i], off, q, len,
							h->op == TPU_XFER_OP_WRITE);
		else if (h->op == TPU_XFER_OP_READ)
			memcpy(q, regs[i]->addr + off, len);
		else
			memcpy(regs[i]->addr + off, q, len);
		q += len;
	}
	pthread_mutex_lock(&a->lock);
	for (i = 0; i < h->n; i++)
		regs[i]->busy--;
	pthread_cond_broadcast(&a->cond);
	pthread_mutex_unlock(&a->lock);
	if (!ans.status && (h->flags & XFER_F_LAST) && (h->flags & XFER_F_NOTIF))
		tpu__xfer_notif_push(a, p->name, p->in.pl[2].data, p->in.pl[2].len);
answer:
	free(regs);
	if (data && !ans.status) {
		const void *d[1] = { data };
		size_t l[1] = { h->len };

		/* Hold further requests until this one's bytes went out. */
		s->p = p;
		s->buf = data;
		p->serving = 1;
		/* The answer's bytes stay reserved until it went out. */
		s->bytes = p->resp_bytes;
		p->resp_bytes = 0;
		if (tpu__xfer_send_ref(p, &ans, d, l, 1, resp_sent, s)) {
			p->serving = 0;
			p->resp_bytes = s->bytes;
			free(data);
			free(s);
		}
		return;
	}
	free(data);
	free(s);
	{
		const void *d[1] = { NULL };
		size_t l[1] = { 0 };

		tpu__xfer_send(p, &ans, d, l, 1);
	}
}
