// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Registrations: the table a target checks every element against, their
 * export as blobs, and deregistration, which returns only once no peer
 * can reach the memory any more.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "xfer.h"

#define SLOT_MASK	0xffffffffULL

struct tpu_xfer_reg *tpu__xfer_reg_find(struct tpu_agent *a, uint64_t id)
{
	uint64_t slot = id & SLOT_MASK;
	struct tpu_xfer_reg *r;

	if (slot >= XFER_REGS_MAX)
		return NULL;
	r = a->slots[slot];
	return r && r->id == id ? r : NULL;
}

static void unmap(struct tpu_xfer_reg *r)
{
	if (r->map)
		munmap(r->map, r->map_len);
	r->map = NULL;
}

/* The whole range is mapped (mincore fails ENOMEM on a hole). */
static tpu_status range_mapped(const void *addr, size_t len)
{
	long pg = sysconf(_SC_PAGESIZE);
	uintptr_t start = (uintptr_t)addr & ~((uintptr_t)pg - 1);
	uintptr_t end = (uintptr_t)addr + len;
	unsigned char vec[4096];

	while (start < end) {
		size_t n = (end - start + (size_t)pg - 1) / (size_t)pg;

		if (n > sizeof(vec))
			n = sizeof(vec);
		if (mincore((void *)start, n * (size_t)pg, vec))
			return errno == ENOMEM ? -EFAULT : -errno;
		start += n * (size_t)pg;
	}
	return 0;
}

TPU_API tpu_status tpu_agent_register(struct tpu_agent *a, void *addr, size_t len,
				      unsigned int access, struct tpu_xfer_reg **out)
{
	tpu_status st = tpu__xfer_agent_check(a);

	if (!st && out && addr && len && (uintptr_t)addr + len >= (uintptr_t)addr) {
		*out = NULL;
		st = range_mapped(addr, len);
	}
	return st ? st : tpu__xfer_register(a, addr, len, access, NULL, 0, out);
}

tpu_status tpu__xfer_register(struct tpu_agent *a, void *addr, size_t len, unsigned int access,
			      void *map, size_t map_len, struct tpu_xfer_reg **out)
{
	uint8_t nonce[TPU__AUTH_NONCE];
	struct tpu_xfer_reg *r;
	tpu_status st = tpu__xfer_agent_check(a);
	uint32_t slot;

	if (st)
		return st;
	if (!out || !addr || !len || (uintptr_t)addr + len < (uintptr_t)addr ||
	    (access & ~(TPU_XFER_READ | TPU_XFER_WRITE)))
		return -EINVAL;
	*out = NULL;
	st = tpu__auth_nonce(nonce);
	if (st)
		return st;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->magic = XFER_MAGIC_REG;
	r->a = a;
	r->addr = addr;
	r->len = len;
	r->access = access;
	r->map = map;
	r->map_len = map_len;
	memcpy(&r->key, nonce, sizeof(r->key));
	pthread_mutex_lock(&a->lock);
	if (a->nregs >= XFER_REGS_MAX) {
		pthread_mutex_unlock(&a->lock);
		free(r);
		return -ENOSPC;
	}
	for (slot = 0; a->slots[slot]; slot++)
		;
	/* A new generation each time, so an old blob never names a new registration. */
	r->id = (uint64_t)a->next_gen++ << 32 | slot;
	a->slots[slot] = r;
	a->nregs++;
	r->next = a->regs;
	a->regs = r;
	pthread_mutex_unlock(&a->lock);
	*out = r;
	return 0;
}

TPU_API tpu_status tpu_agent_export(const struct tpu_xfer_reg *reg, void *buf, size_t size,
				    size_t *len)
{
	struct xfer_blob b;
	struct tpu_agent *a;
	size_t n;

	/* Deregistered, or freed with its agent, as before: -EINVAL. */
	if (tpu__magic_check(reg, reg ? &reg->magic : NULL, XFER_MAGIC_REG) || !len ||
	    tpu__xfer_agent_check(reg->a) || !reg->access || atomic_load(&reg->revoked))
		return -EINVAL;
	a = reg->a;
	memset(&b, 0, sizeof(b));
	b.access = reg->access;
	memcpy(b.agent, a->id, XFER_ID_LEN);
	b.reg = reg->id;
	b.key = reg->key;
	b.addr = (uintptr_t)reg->addr;
	b.len = reg->len;
	b.pid = (uint32_t)getpid();
	memcpy(b.boot_id, a->boot_id, sizeof(b.boot_id));
	memcpy(b.url_shm, a->url_shm, sizeof(b.url_shm));
	memcpy(b.url_tcp, a->url_tcp, sizeof(b.url_tcp));
	n = tpu__xfer_blob_put(&b, NULL, 0);
	*len = n;
	if (!buf || size < n)
		return -ENOSPC;
	tpu__xfer_blob_put(&b, buf, size);
	return 0;
}

/* a->lock held. */
static void loader_del(struct tpu_xfer_reg *r, struct xfer_peer *p)
{
	size_t i;

	for (i = 0; i < r->nloaders; i++)
		if (r->loaders[i] == p) {
			r->loaders[i] = r->loaders[--r->nloaders];
			return;
		}
}

void tpu__xfer_reg_forget_peer(struct tpu_agent *a, struct xfer_peer *p)
{
	struct tpu_xfer_reg *r;

	for (r = a->regs; r; r = r->next)
		loader_del(r, p);
}

void tpu__xfer_revoke_acked(struct xfer_peer *p, uint64_t reg)
{
	struct tpu_agent *a = p->a;
	struct tpu_xfer_reg *r;

	pthread_mutex_lock(&a->lock);
	for (r = a->regs; r; r = r->next)
		if (r->id == reg)
			loader_del(r, p);
	pthread_cond_broadcast(&a->cond);
	pthread_mutex_unlock(&a->lock);
}

static void reg_unlink(struct tpu_agent *a, struct tpu_xfer_reg *r)
{
	struct tpu_xfer_reg **pp;

	for (pp = &a->regs; *pp; pp = &(*pp)->next)
		if (*pp == r) {
			*pp = r->next;
			break;
		}
}

TPU_API tpu_status tpu_agent_deregister(struct tpu_xfer_reg *r)
{
	tpu_status st = tpu__magic_check(r, r ? &r->magic : NULL, XFER_MAGIC_REG);
	struct xfer_peer **tell;
	struct tpu_agent *a;
	struct timespec ts;
	size_t i, n;

	/* Deregistered already, or freed with its agent (the quarantine keeps it a while). */
	if (st)
		return st;
	if (tpu__xfer_agent_check(r->a))
		return -EINVAL;
	a = r->a;
	if (tpu__ctx_on_thread(a->ctx))
		return -EDEADLK;
	pthread_mutex_lock(&a->lock);
	if (a->slots[r->id & SLOT_MASK] != r) {
		pthread_mutex_unlock(&a->lock);
		return -EINVAL;
	}
	/* The caller's handle is gone from here: a second call finds it destroyed. */
	r->magic = TPU__MAGIC_DEAD;
	a->deregs++;		/* no peer it names is reaped meanwhile (agent.c) */
	/* From here no new element is served on it and no load finds it. */
	atomic_store(&r->revoked, true);
	/* The module ends its grants now, whatever the loaders answer. */
	tpu__xfer_kmod_unpin(a, r);
	a->slots[r->id & SLOT_MASK] = NULL;
	a->nregs--;
	/* rdma: its MRs in peers' domains go first; their rkeys die with them. */
	tpu__xfer_rdma_reg_drop_remote(a, r);
	/* Sends take the lock: tell the loaders from a copy of the list. */
	n = r->nloaders;
	tell = n ? malloc(n * sizeof(*tell)) : NULL;
	if (tell)
		memcpy(tell, r->loaders, n * sizeof(*tell));
	else
		n = 0;		/* no memory: they are cut off below instead */
	pthread_mutex_unlock(&a->lock);
	for (i = 0; i < n; i++) {
		struct xfer_hdr h = { .type = XFER_REVOKE, .reg = r->id };

		tpu__xfer_send(tell[i], &h, NULL, NULL, 0);
	}
	free(tell);
	pthread_mutex_lock(&a->lock);
	tpu__xfer_deadline_in(&ts, XFER_REVOKE_MS);
	while (r->nloaders && pthread_cond_timedwait(&a->cond, &a->lock, &ts) == 0)
		;
	/*
	 * A loader that did not acknowledge may still be copying: cut it off
	 * (its cma copies stop with its pipe, see xfer_cma.c).
	 */
	while (r->nloaders) {
		struct xfer_peer *p = r->loaders[0];

		loader_del(r, p);
		pthread_mutex_unlock(&a->lock);
		tpu__log_debug("xfer: peer %s did not acknowledge a revocation: closing it", p->name);
		tpu__xfer_peer_fail(p, TPU_E_REVOKED);
		tpu__xfer_peer_close(p);
		pthread_mutex_lock(&a->lock);
	}
	while (r->busy)
		pthread_cond_wait(&a->cond, &a->lock);
	a->deregs--;
	reg_unlink(a, r);
	pthread_mutex_unlock(&a->lock);
	/* Local requests that use it: none is between its check and its copy. */
	pthread_rwlock_wrlock(&a->local_rw);
	pthread_rwlock_unlock(&a->local_rw);
	pthread_mutex_lock(&a->lock);
	tpu__xfer_rdma_reg_drop_local(r);
	r->gone = true;
	free(r->loaders);
	r->loaders = NULL;
	/* Revoked, and no local copy between its check and its copy: nothing reaches it. */
	unmap(r);
	if (!r->refs)
		tpu__quarantine(r, &r->magic);
	pthread_mutex_unlock(&a->lock);
	return 0;
}

void tpu__xfer_reg_put(struct tpu_xfer_reg *r)
{
	if (!--r->refs && r->gone)
		tpu__quarantine(r, &r->magic);
}

void tpu__xfer_regs_free(struct tpu_agent *a)
{
	struct tpu_xfer_reg *r, *n;

	for (r = a->regs; r; r = n) {
		n = r->next;
		tpu__xfer_kmod_unpin(a, r);	/* an application's region keeps no grant of ours */
		tpu__xfer_rdma_reg_drop_local(r);
		free(r->loaders);
		unmap(r);
		tpu__quarantine(r, &r->magic);
	}
	a->regs = NULL;
}
