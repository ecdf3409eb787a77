// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Prepared requests.  Preparation checks every element against its local
 * registration and against the remote registration's bounds and access as
 * the target answered them, and builds what every post reuses: the pairs
 * of equal length (local piece, remote piece) the two lists fall into,
 * as iovecs (cma) and wire elements (tcp), cut into batches.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xfer.h"

static tpu_status req_check(const struct tpu_xfer_req *r)
{
	if (!r)
		return -EINVAL;
	return r->magic == XFER_MAGIC_REQ ? 0 : r->magic == TPU__MAGIC_DEAD ? TPU_E_DESTROYED : -EINVAL;
}

tpu_status tpu__xfer_req_live(const struct tpu_xfer_req *r)
{
	size_t i;

	for (i = 0; i < r->nlregs; i++)
		if (atomic_load(&r->lregs[i]->revoked))
			return TPU_E_REVOKED;
	for (i = 0; i < r->nrms; i++)
		if (atomic_load(&r->rms[i]->revoked))
			return TPU_E_REVOKED;
	return 0;
}

void tpu__xfer_req_complete(struct tpu_xfer_req *r, tpu_status st)
{
	struct tpu_agent *a = r->a;
	tpu_xfer_cb cb;
	void *arg;

	pthread_mutex_lock(&a->lock);
	cb = r->cb;
	arg = r->arg;
	r->status = st;
	/* Waiters return once the callback did (it may post again). */
	r->in_cb += cb != NULL;
	atomic_store(&r->state, XFER_IDLE);
	if (!cb)
		pthread_cond_broadcast(&a->cond);
	pthread_mutex_unlock(&a->lock);
	if (!cb)
		return;
	cb(arg, st, r);
	pthread_mutex_lock(&a->lock);
	r->in_cb--;
	pthread_cond_broadcast(&a->cond);
	pthread_mutex_unlock(&a->lock);
}

static void req_free(struct tpu_xfer_req *r)
{
	size_t i;

	if (r->be_data && r->peer->be->release)
		r->peer->be->release(r);
	pthread_mutex_lock(&r->a->lock);
	for (i = 0; r->lregs && i < r->nlregs; i++)
		tpu__xfer_reg_put(r->lregs[i]);
	for (i = 0; r->rms && i < r->nrms; i++)
		tpu__xfer_remote_put(r->rms[i]);
	if (r->pprev) {
		*r->pprev = r->next;
		if (r->next)
			r->next->pprev = r->pprev;
	}
	pthread_mutex_unlock(&r->a->lock);
	free(r->liov);
	free(r->riov);
	free(r->elems);
	free(r->batch_bytes);
	free(r->chunk_start);
	free(r->lregs);
	free(r->rms);
	free(r->notif);
	tpu__quarantine(r, &r->magic);
}

static tpu_status check_lists(struct tpu_agent *a, enum tpu_xfer_op op,
			      const struct tpu_xfer_local_elem *local, size_t nlocal,
			      const struct tpu_xfer_remote_elem *remote, size_t nremote,
			      uint64_t *total)
{
	unsigned int need = op == TPU_XFER_OP_WRITE ? TPU_XFER_WRITE : TPU_XFER_READ;
	struct xfer_peer *p;
	uint64_t lt = 0, rt = 0;
	tpu_status st;
	size_t i;

	/* Handles unloaded or deregistered already: TPU_E_DESTROYED, before any look inside. */
	for (i = 0; i < nremote; i++) {
		st = tpu__magic_check(remote[i].remote, remote[i].remote ? &remote[i].remote->magic :
				      NULL, XFER_MAGIC_REMOTE);
		if (st)
			return st;
	}
	for (i = 0; i < nlocal; i++) {
		st = tpu__magic_check(local[i].reg, local[i].reg ? &local[i].reg->magic : NULL,
				      XFER_MAGIC_REG);
		if (st)
			return st;
	}
	p = remote[0].remote->peer;
	if (p->a != a)
		return -EINVAL;
	for (i = 0; i < nlocal; i++) {
		const struct tpu_xfer_local_elem *e = &local[i];

		if (e->reg->a != a)
			return -EINVAL;
		if (e->reg->dev.type)
			return -EOPNOTSUPP;	/* CUDA memory: a peer's to reach, not ours to copy */
		if (atomic_load(&e->reg->revoked))
			return TPU_E_REVOKED;
		if (e->offset > e->reg->len || e->len > e->reg->len - e->offset || lt + e->len < lt)
			return -EINVAL;
		lt += e->len;
	}
	for (i = 0; i < nremote; i++) {
		const struct tpu_xfer_remote_elem *e = &remote[i];

		if (e->remote->peer != p)
			return -EINVAL;
		if (atomic_load(&e->remote->revoked))
			return TPU_E_REVOKED;
		if (!(e->remote->access & need))
			return -EACCES;
		if (e->offset > e->remote->len || e->len > e->remote->len - e->offset ||
		    rt + e->len < rt)
			return -EINVAL;
		rt += e->len;
	}
	if (lt != rt)
		return -EINVAL;
	*total = lt;
	return 0;
}

/* Each registration and handle once (a stamp per prepare; a repeat is harmless). */
static tpu_status list_once(struct tpu_xfer_req *r, const struct tpu_xfer_local_elem *local,
			    size_t nlocal, const struct tpu_xfer_remote_elem *remote, size_t nremote)
{
	unsigned int serial = atomic_fetch_add(&r->a->serial, 1) + 1;
	size_t i;

	r->lregs = malloc(nlocal * sizeof(*r->lregs));
	r->rms = malloc(nremote * sizeof(*r->rms));
	if (!r->lregs || !r->rms)
		return -ENOMEM;
	for (i = 0; i < nlocal; i++)
		if (atomic_exchange(&local[i].reg->stamp, serial) != serial)
			r->lregs[r->nlregs++] = local[i].reg;
	for (i = 0; i < nremote; i++)
		if (atomic_exchange(&remote[i].remote->stamp, serial) != serial)
			r->rms[r->nrms++] = remote[i].remote;
	pthread_mutex_lock(&r->a->lock);
	for (i = 0; i < r->nlregs; i++)
		r->lregs[i]->refs++;
	for (i = 0; i < r->nrms; i++)
		r->rms[i]->users++;
	pthread_mutex_unlock(&r->a->lock);
	return 0;
}

static tpu_status build_pairs(struct tpu_xfer_req *r, const struct tpu_xfer_local_elem *local,
			      size_t nlocal, const struct tpu_xfer_remote_elem *remote,
			      size_t nremote)
{
	size_t cap = nlocal + nremote + r->total / XFER_CHUNK_BYTES + 1;
	size_t i = 0, j = 0, n = 0, b, c;
	uint64_t lo = 0, ro = 0, bytes = 0;

	r->liov = malloc(cap * sizeof(*r->liov));
	r->riov = malloc(cap * sizeof(*r->riov));
	r->elems = malloc(cap * XFER_ELEM_LEN);
	if (!r->liov || !r->riov || !r->elems)
		return -ENOMEM;
	while (i < nlocal && j < nremote) {
		uint64_t lrem = local[i].len - lo, rrem = remote[j].len - ro, len;
		const struct tpu_xfer_remote *rm = remote[j].remote;

		if (!lrem) {
			i++;
			lo = 0;
			continue;
		}
		if (!rrem) {
			j++;
			ro = 0;
			continue;
		}
		len = lrem < rrem ? lrem : rrem;
		if (len > XFER_CHUNK_BYTES)
			len = XFER_CHUNK_BYTES;
		r->liov[n].iov_base = local[i].reg->addr + local[i].offset + lo;
		r->liov[n].iov_len = len;
		r->riov[n].iov_base = (void *)(uintptr_t)(rm->addr + remote[j].offset + ro);
		r->riov[n].iov_len = len;
		tpu__put_le64(r->elems + n * XFER_ELEM_LEN, rm->reg);
		tpu__put_le64(r->elems + n * XFER_ELEM_LEN + 8, remote[j].offset + ro);
		tpu__put_le64(r->elems + n * XFER_ELEM_LEN + 16, len);
		lo += len;
		ro += len;
		n++;
	}
	r->npairs = n;
	/* cma: batches of XFER_IOV_BATCH pairs; tcp: chunks bounded in pairs and bytes. */
	r->nbatches = (n + XFER_IOV_BATCH - 1) / XFER_IOV_BATCH;
	r->batch_bytes = calloc(r->nbatches + n + 1, sizeof(*r->batch_bytes));
	r->chunk_start = calloc(n + 2, sizeof(*r->chunk_start));
	if (!r->batch_bytes || !r->chunk_start)
		return -ENOMEM;
	for (b = 0; b < n; b++)
		r->batch_bytes[b / XFER_IOV_BATCH] += r->liov[b].iov_len;
	for (b = 0, c = 0; b < n; b++) {
		if (b == 0 || b - r->chunk_start[c - 1] >= XFER_CHUNK_ELEMS ||
		    bytes + r->liov[b].iov_len > XFER_CHUNK_BYTES) {
			r->chunk_start[c++] = b;
			bytes = 0;
		}
		bytes += r->liov[b].iov_len;
	}
	r->nchunks = c;
	r->chunk_start[c] = n;
	return 0;
}

uint64_t tpu__xfer_chunk_bytes(const struct tpu_xfer_req *r, size_t c)
{
	uint64_t s = 0;
	size_t i;

	for (i = r->chunk_start[c]; i < r->chunk_start[c + 1]; i++)
		s += r->liov[i].iov_len;
	return s;
}

TPU_API tpu_status tpu_xfer_prepare(struct tpu_agent *a, enum tpu_xfer_op op,
				    const struct tpu_xfer_local_elem *local, size_t nlocal,
				    const struct tpu_xfer_remote_elem *remote, size_t nremote,
				    const void *notif, size_t notif_len, struct tpu_xfer_req **out)
{
	struct tpu_xfer_req *r;
	uint64_t total = 0;
	tpu_status st = tpu__xfer_agent_check(a);

	if (st)
		return st;
	if (!out || !local || !remote || !nlocal || !nremote || nlocal > TPU_XFER_MAX_ELEMS ||
	    nremote > TPU_XFER_MAX_ELEMS || (op != TPU_XFER_OP_READ && op != TPU_XFER_OP_WRITE) ||
	    (!notif && notif_len) || notif_len > TPU_XFER_NOTIF_MAX)
		return -EINVAL;
	*out = NULL;
	st = check_lists(a, op, local, nlocal, remote, nremote, &total);
	if (st)
		return st;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->magic = XFER_MAGIC_REQ;
	r->a = a;
	r->peer = remote[0].remote->peer;
	r->op = op;
	r->total = total;
	if (notif) {
		r->notif = malloc(notif_len ? notif_len : 1);
		if (!r->notif) {
			st = -ENOMEM;
			goto fail;
		}
		memcpy(r->notif, notif, notif_len);
		r->notif_len = notif_len;
	}
	st = list_once(r, local, nlocal, remote, nremote);
	if (!st)
		st = build_pairs(r, local, nlocal, remote, nremote);
	if (!st && r->peer->be && r->peer->be->prepare)
		st = r->peer->be->prepare(r);
	if (st)
		goto fail;
	pthread_mutex_lock(&a->lock);
	r->next = a->reqs;
	if (r->next)
		r->next->pprev = &r->next;
	r->pprev = &a->reqs;
	a->reqs = r;
	pthread_mutex_unlock(&a->lock);
	*out = r;
	return 0;
fail:
	req_free(r);
	return st;
}

TPU_API tpu_status tpu_xfer_post(struct tpu_xfer_req *r, tpu_xfer_cb done, void *arg)
{
	int idle = XFER_IDLE;
	tpu_status st = req_check(r);

	if (st)
		return st;
	if (!atomic_compare_exchange_strong(&r->state, &idle, XFER_POSTED))
		return -EBUSY;
	r->cb = done;
	r->arg = arg;
	r->peer->be->post(r);
	return 0;
}

TPU_API tpu_status tpu_xfer_poll(const struct tpu_xfer_req *r)
{
	tpu_status st = req_check(r);

	if (st)
		return st;
	if (atomic_load(&((struct tpu_xfer_req *)r)->state) == XFER_POSTED)
		return -EINPROGRESS;
	return r->status;
}

TPU_API tpu_status tpu_xfer_wait(struct tpu_xfer_req *r, int timeout_ms)
{
	struct timespec ts;
	tpu_status st = req_check(r);

	if (st)
		return st;
	if (timeout_ms >= 0) {
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += timeout_ms / 1000;
		ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
	}
	pthread_mutex_lock(&r->a->lock);
	while (atomic_load(&r->state) == XFER_POSTED || r->in_cb) {
		if (timeout_ms < 0)
			pthread_cond_wait(&r->a->cond, &r->a->lock);
		else if (pthread_cond_timedwait(&r->a->cond, &r->a->lock, &ts))
			break;
	}
	st = atomic_load(&r->state) == XFER_POSTED || r->in_cb ? -ETIMEDOUT : r->status;
	pthread_mutex_unlock(&r->a->lock);
	return st;
}

TPU_API tpu_status tpu_xfer_cancel(struct tpu_xfer_req *r)
{
	tpu_status st = req_check(r);

	if (st)
		return st;
	if (atomic_load(&r->state) != XFER_POSTED || !r->peer->be->cancel(r))
		return -EALREADY;
	tpu__xfer_req_complete(r, -ECANCELED);
	return 0;
}

/* A checked request: cancel its post in flight, wait for its callback, free it. */
static void req_release(struct tpu_xfer_req *r)
{
	if (atomic_load(&r->state) == XFER_POSTED)
		tpu_xfer_cancel(r);
	tpu_xfer_wait(r, -1);
	/* Its elements may still be in a pipe write: they are this request's memory. */
	pthread_mutex_lock(&r->a->lock);
	while (r->writes_out)
		pthread_cond_wait(&r->a->cond, &r->a->lock);
	pthread_mutex_unlock(&r->a->lock);
	req_free(r);
}

TPU_API void tpu_xfer_release(struct tpu_xfer_req *r)
{
	if (!req_check(r))
		req_release(r);
}

size_t tpu__xfer_reqs_release(struct tpu_agent *a)
{
	struct tpu_xfer_req *r;
	size_t n = 0;

	for (;;) {
		pthread_mutex_lock(&a->lock);
		r = a->reqs;
		pthread_mutex_unlock(&a->lock);
		if (!r)
			return n;
		req_release(r);
		n++;
	}
}
