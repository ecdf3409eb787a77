// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Loading a blob: the target agent confirms the registration over an
 * authenticated pipe and answers its bounds and access, which are what
 * this side checks requests against (never the blob's own claims); and
 * revocation of what was loaded.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xfer.h"

/* Context thread. */
void tpu__xfer_load_answered(struct xfer_peer *p, const struct xfer_hdr *h)
{
	struct tpu_agent *a = p->a;
	struct xfer_load *l;
	int pid = 0;

	/* The pid the kernel proved when the pipe opened (0 over tcp). */
	tpu_pipe_peer_pid(p->pipe, &pid);
	pthread_mutex_lock(&a->lock);
	if (!p->pid)
		p->pid = pid;
	for (l = p->loads; l; l = l->next)
		if (l->id == h->id && !l->done) {
			l->ans = *h;
			l->done = true;
			break;
		}
	pthread_cond_broadcast(&a->cond);
	pthread_mutex_unlock(&a->lock);
}

/* Context thread: the target deregistered @reg; nothing of ours reaches it after the ack. */
void tpu__xfer_revoke(struct xfer_peer *p, uint64_t reg)
{
	struct xfer_hdr h = { .type = XFER_REVOKE_ACK, .reg = reg };
	struct tpu_xfer_remote *rm;

	pthread_mutex_lock(&p->a->lock);
	for (rm = p->remotes; rm; rm = rm->next)
		if (rm->reg == reg)
			atomic_store(&rm->revoked, true);
	pthread_mutex_unlock(&p->a->lock);
	/* Wait out cma copies that checked the flag before it was set. */
	pthread_rwlock_wrlock(&p->rw);
	pthread_rwlock_unlock(&p->rw);
	tpu__xfer_send(p, &h, NULL, NULL, 0);
}

/* Pick @p's backend once, after its first answer (a->lock held). */
static tpu_status choose_backend(struct tpu_agent *a, struct xfer_peer *p, bool kmod_ok)
{
	tpu_status st = TPU_E_NO_TRANSPORT;

	if (p->be)
		return 0;
	if (kmod_ok) {
		p->be = &tpu__xfer_kmod;
		tpu__log_debug("xfer: kmod to %s", p->url);
		return 0;
	}
	if ((a->backends & TPU_XFER_BACKEND_CMA) && p->pid) {
		st = tpu__xfer_cma.attach(p);
		if (!st) {
			p->be = &tpu__xfer_cma;
			tpu__log_debug("xfer: cma to %s", p->url);
			return 0;
		}
		tpu__log_debug("xfer: no cma to %s: %s", p->url, tpu_strerror(st));
	}
	if ((a->backends & TPU_XFER_BACKEND_RDMA) && p->rdma) {
		st = tpu__xfer_rdma.attach(p);
		if (!st) {
			p->be = &tpu__xfer_rdma;
			return 0;
		}
	}
	if (a->backends & TPU_XFER_BACKEND_TCP) {
		st = tpu__xfer_tcp.attach(p);
		if (!st) {
			p->be = &tpu__xfer_tcp;
			tpu__log_debug("xfer: tcp to %s", p->url);
		}
	}
	return st;
}

TPU_API tpu_status tpu_agent_load(struct tpu_agent *a, const void *blob, size_t len,
				  struct tpu_xfer_remote **out)
{
	struct xfer_load ld = { 0 }, **pp;
	struct tpu_xfer_remote *rm;
	struct xfer_peer *p;
	struct xfer_blob b;
	struct timespec ts;
	uint32_t grant = 0;
	const char *url;
	tpu_status st = tpu__xfer_agent_check(a);

	if (st)
		return st;
	if (!blob || !out)
		return -EINVAL;
	*out = NULL;
	if (tpu__ctx_on_thread(a->ctx))
		return -EDEADLK;
	st = tpu__xfer_blob_get(blob, len, &b);
	if (st)
		return st;
	/* Same machine: its shm name (the kernel then vouches for the pid). */
	url = b.url_shm[0] && a->boot_id[0] && !strcmp(b.boot_id, a->boot_id) ? b.url_shm :
									     b.url_tcp;
	if (!url[0])
		url = b.url_shm;
	st = tpu__xfer_peer_out(a, b.agent, url, &p);
	if (st)
		return st;
	/*
	 * rdma unless cma will do (same machine, allowed): the link is asked
	 * for before the first load, whose answer then carries the rkey.
	 */
	if ((a->backends & TPU_XFER_BACKEND_RDMA) &&
	    !((a->backends & TPU_XFER_BACKEND_CMA) && url == b.url_shm))
		tpu__xfer_rdma_connect(p);
	pthread_mutex_lock(&a->lock);
	ld.id = ++p->next_id;
	ld.next = p->loads;
	p->loads = &ld;
	pthread_mutex_unlock(&a->lock);
	{
		struct xfer_hdr h = { .type = XFER_LOAD, .id = ld.id, .reg = b.reg, .key = b.key,
				      .addr = (a->backends & TPU_XFER_BACKEND_KMOD) ? a->kmod_id : 0 };
		const void *d[1] = { b.agent };
		size_t l[1] = { XFER_ID_LEN };

		st = tpu__xfer_send(p, &h, d, l, 1);
	}
	tpu__xfer_deadline_in(&ts, XFER_LOAD_MS);
	pthread_mutex_lock(&a->lock);
	while (!st && !ld.done && !atomic_load(&p->error))
		if (pthread_cond_timedwait(&a->cond, &a->lock, &ts))
			st = -ETIMEDOUT;
	for (pp = &p->loads; *pp; pp = &(*pp)->next)
		if (*pp == &ld) {
			*pp = ld.next;
			break;
		}
	if (!st && !ld.done)
		st = atomic_load(&p->error);
	if (!st)
		st = ld.ans.status;
	/* The answer's bounds must make sense before anything relies on them. */
	if (!st && (!ld.ans.len || ld.ans.addr + ld.ans.len < ld.ans.addr || !ld.ans.access ||
		    (ld.ans.access & ~(TPU_XFER_READ | TPU_XFER_WRITE))))
		st = -EPROTO;
	if (!st) {
		/* The kernel, not the answer, says whether the grant is ours. */
		bool rkey = ld.ans.flags & XFER_F_RKEY;
		tpu_status kst = rkey ? -ENOENT :
				 tpu__xfer_kmod_check(a, (uint32_t)ld.ans.key, ld.ans.access);

		if (kst && ld.ans.key && !rkey)
			tpu__log_debug("xfer: kmod grant from %s refused: %s", p->url, tpu_strerror(kst));
		if (p->be == &tpu__xfer_kmod && kst)
			st = kst;	/* this peer's requests all go through the module */
		else
			st = choose_backend(a, p, !kst);
		if (!st && p->be == &tpu__xfer_kmod)
			grant = (uint32_t)ld.ans.key;
	}
	/* Memory only the target's own copies reach (CUDA): not for cma, kmod or rdma. */
	if (!st && (ld.ans.flags & XFER_F_SERVED) && p->be != &tpu__xfer_tcp)
		st = -EOPNOTSUPP;
	/* An rdma peer's answer carries the rkey, or the handle is no use. */
	if (!st && p->be == &tpu__xfer_rdma && !(ld.ans.flags & XFER_F_RKEY))
		st = -EPROTO;
	if (st) {
		pthread_mutex_unlock(&a->lock);
		return st;
	}
	rm = calloc(1, sizeof(*rm));
	if (!rm) {
		pthread_mutex_unlock(&a->lock);
		return -ENOMEM;
	}
	rm->magic = XFER_MAGIC_REMOTE;
	rm->peer = p;
	rm->reg = b.reg;
	rm->addr = ld.ans.addr;
	rm->len = ld.ans.len;
	rm->access = ld.ans.access;
	rm->grant = grant;
	rm->rkey = (ld.ans.flags & XFER_F_RKEY) ? (uint32_t)ld.ans.key : 0;
	rm->next = p->remotes;
	p->remotes = rm;
	pthread_mutex_unlock(&a->lock);
	*out = rm;
	return 0;
}

/* a->lock held. */
static void remote_free(struct tpu_xfer_remote *rm)
{
	struct tpu_xfer_remote **pp;

	for (pp = &rm->peer->remotes; *pp; pp = &(*pp)->next)
		if (*pp == rm) {
			*pp = rm->next;
			tpu__quarantine(rm, &rm->magic);
			break;
		}
}

void tpu__xfer_remote_put(struct tpu_xfer_remote *rm)
{
	if (!--rm->users && rm->magic == TPU__MAGIC_DEAD)
		remote_free(rm);
}

TPU_API void tpu_agent_unload(struct tpu_xfer_remote *rm)
{
	struct tpu_agent *a;

	/* Unloaded already, or freed with its agent (the quarantine keeps it a while). */
	if (tpu__magic_check(rm, rm ? &rm->magic : NULL, XFER_MAGIC_REMOTE) ||
	    tpu__xfer_agent_check(rm->peer->a)) {
		tpu__log_debug("tpu_agent_unload(%p): not a loaded handle; ignored", (void *)rm);
		return;
	}
	a = rm->peer->a;
	pthread_mutex_lock(&a->lock);
	if (rm->users) {
		/*
		 * Requests not released yet name it (and one may be in flight):
		 * their later posts fail TPU_E_REVOKED, the last one frees it.
		 */
		fprintf(stderr, "tpu: tpu_agent_unload(%p): %u request(s) using it not released; "
			"their posts fail TPU_E_REVOKED\n", (void *)rm, rm->users);
		atomic_store(&rm->revoked, true);
		/* The caller's handle is gone: calls on it find it destroyed. */
		rm->magic = TPU__MAGIC_DEAD;
	} else {
		remote_free(rm);
	}
	pthread_mutex_unlock(&a->lock);
}

static bool remote_ok(const struct tpu_xfer_remote *rm)
{
	return !tpu__magic_check(rm, rm ? &rm->magic : NULL, XFER_MAGIC_REMOTE);
}

TPU_API const char *tpu_xfer_remote_backend(const struct tpu_xfer_remote *rm)
{
	return remote_ok(rm) && rm->peer->be ? rm->peer->be->name : "";
}

TPU_API uint64_t tpu_xfer_remote_size(const struct tpu_xfer_remote *rm)
{
	return remote_ok(rm) ? rm->len : 0;
}
