// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* What the remote rendezvous tests share: see remote_harness.h. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "remote_harness.h"
#include "tap.h"

size_t rh_key(char *buf, const char *src, const char *dst, const char *edge, uint64_t inc,
	      uint64_t iter)
{
	char s[96], d[96];
	struct tpu_key k = { .src_incarnation = inc, .iter_id = iter };
	size_t len = 0;

	snprintf(s, sizeof(s), "%s/device:CPU:0", src);
	snprintf(d, sizeof(d), "%s/device:CPU:0", dst);
	k.src_device = (struct tpu_str){ s, strlen(s) };
	k.dst_device = (struct tpu_str){ d, strlen(d) };
	k.edge_name = (struct tpu_str){ edge, strlen(edge) };
	if (tpu_key_build(&k, buf, RH_KEY_MAX, &len))
		return 0;
	return len;
}

/* Wait on @cond until *@count reaches @n, at most @ms; false on timeout. */
static bool count_wait(pthread_mutex_t *lock, pthread_cond_t *cond, const int *count, int n,
		       int ms)
{
	struct timespec until;
	bool ok;

	deadline_in(&until, ms);
	pthread_mutex_lock(lock);
	while (*count < n && pthread_cond_timedwait(cond, lock, &until) == 0)
		;
	ok = *count >= n;
	pthread_mutex_unlock(lock);
	return ok;
}

void rh_on_recv(void *arg, tpu_status st, size_t len)
{
	struct rh_done *d = arg;

	pthread_mutex_lock(&d->lock);
	d->st = st;
	d->len = len;
	d->bad += st != 0;
	d->n++;
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->lock);
}

void rh_on_send(void *arg, tpu_status st)
{
	rh_on_recv(arg, st, 0);
}

bool rh_done_wait(struct rh_done *d, int n, int s)
{
	return count_wait(&d->lock, &d->cond, &d->n, n, s * 1000);
}

struct tpu_context *rh_ctx(const struct tpu_context_options *o, const char *secret)
{
	struct tpu_context_options tcp = { .transports = "tcp" };
	struct tpu_context *c = NULL;

	if (tpu_context_create(o ? o : &tcp, &c))
		return NULL;
	if (secret)
		tpu_context_set_secret(c, secret, strlen(secret));
	return c;
}

bool rh_worker_open(struct rh_worker *w, const struct tpu_context_options *o, const char *secret,
		    const struct tpu_remote_options *ro)
{
	const char *lu = "tcp://127.0.0.1:0";
	struct tpu_remote_options r = *ro;

	memset(w, 0, sizeof(*w));
	if (!r.nlisten) {
		r.listen_urls = &lu;
		r.nlisten = 1;
	}
	w->ctx = rh_ctx(o, secret);
	return w->ctx && !tpu_rendezvous_create_remote(w->ctx, &r, &w->rdv) &&
	       !tpu_rendezvous_url(w->rdv, NULL, w->url, sizeof(w->url));
}

bool rh_shm_worker_open(struct rh_worker *w, const char *task, const char *name, const char *tag,
			const char *secret)
{
	struct tpu_context_options o = { .transports = "shm", .flags = TPU_CTX_NO_KMOD };
	char listen[96];
	const char *lu = listen;

	snprintf(listen, sizeof(listen), "shm://%s-%d-%s", name, (int)getpid(), tag);
	return rh_worker_open(w, &o, secret, &(struct tpu_remote_options){
				      .task = task, .listen_urls = &lu, .nlisten = 1 });
}

void rh_worker_close(struct rh_worker *w)
{
	tpu_rendezvous_destroy(w->rdv);
	tpu_context_destroy(w->ctx);
}

bool rh_pair_up(struct rh_pair *p, const char *secret)
{
	bool a = rh_worker_open(&p->a, NULL, secret, &(struct tpu_remote_options){
					.task = RH_TASK(0) });
	bool b = rh_worker_open(&p->b, NULL, secret, &(struct tpu_remote_options){
					.task = RH_TASK(1) });

	return a && b && !tpu_rendezvous_add_peer(p->a.rdv, RH_TASK(1), p->b.url) &&
	       !tpu_rendezvous_add_peer(p->b.rdv, RH_TASK(0), p->a.url);
}

void rh_pair_down(struct rh_pair *p)
{
	tpu_rendezvous_destroy(p->a.rdv);
	tpu_rendezvous_destroy(p->b.rdv);
	tpu_context_destroy(p->a.ctx);
	tpu_context_destroy(p->b.ctx);
}

/* ---- a member that speaks the wire format itself ---- */

static void att_desc(void *arg, tpu_status st, struct tpu_message *d)
{
	struct rh_att *a = arg;

	pthread_mutex_lock(&a->lock);
	a->desc_st = st;
	a->desc = d;
	a->meta_len = 0;
	if (!st && d->metadata_len <= sizeof(a->meta)) {
		memcpy(a->meta, d->metadata, d->metadata_len);
		a->meta_len = d->metadata_len;
	}
	a->ndesc++;
	pthread_cond_broadcast(&a->cond);
	pthread_mutex_unlock(&a->lock);
}

static void att_read(void *arg, tpu_status st, struct tpu_message *m)
{
	struct rh_att *a = arg;

	(void)m;
	pthread_mutex_lock(&a->lock);
	a->read_st = st;
	a->nread++;
	pthread_cond_broadcast(&a->cond);
	pthread_mutex_unlock(&a->lock);
}

static void att_written(void *arg, tpu_status st, struct tpu_message *m)
{
	struct rh_att *a = arg;

	(void)st;
	(void)m;
	pthread_mutex_lock(&a->lock);
	a->nwritten++;
	pthread_cond_broadcast(&a->cond);
	pthread_mutex_unlock(&a->lock);
}

bool rh_att_open(struct rh_att *a, const char *url, const char *secret)
{
	memset(a, 0, sizeof(*a));
	pthread_mutex_init(&a->lock, NULL);
	pthread_cond_init(&a->cond, NULL);
	a->ctx = rh_ctx(NULL, secret);
	return a->ctx && !tpu_pipe_connect(a->ctx, url, &a->p) &&
	       !tpu_pipe_read_descriptor(a->p, att_desc, a);
}

void rh_att_close(struct rh_att *a)
{
	if (a->p)
		tpu_pipe_close(a->p);
	if (a->ctx)
		tpu_context_destroy(a->ctx);
	pthread_mutex_destroy(&a->lock);
	pthread_cond_destroy(&a->cond);
}

static void att_send(struct rh_att *a, enum remote_msg type, uint64_t id, tpu_status status,
		     uint64_t seq, uint64_t len, const char *key, const void *data)
{
	struct remote_hdr h = { .type = type, .id = id, .status = status, .seq = seq, .len = len,
				.key = (const uint8_t *)key, .key_len = key ? strlen(key) : 0 };
	int i = a->slot % 8;

	/* A slot is written again only once its last write is done. */
	if (a->slot >= 8)
		count_wait(&a->lock, &a->cond, &a->nwritten, a->slot - 7, 5000);
	a->slot++;
	tpu__remote_wire_put(&h, a->out_meta[i]);
	a->out[i] = (struct tpu_message){ .metadata = a->out_meta[i],
					  .metadata_len = tpu__remote_wire_size_of(type, h.key_len) };
	if (data) {
		a->out_t[i] = (struct tpu_message_tensor){ .data = (void *)data, .len = len };
		a->out[i].tensors = &a->out_t[i];
		a->out[i].ntensors = 1;
	}
	tpu_pipe_write(a->p, &a->out[i], att_written, a);
}

void rh_att_send(struct rh_att *a, enum remote_msg type, uint64_t id, tpu_status status,
		 uint64_t len, const char *key, const void *data)
{
	att_send(a, type, id, status, 0, len, key, data);
}

void rh_att_send_seq(struct rh_att *a, enum remote_msg type, uint64_t id, uint64_t seq,
		     uint64_t len, const char *key, const void *data)
{
	att_send(a, type, id, 0, seq, len, key, data);
}

tpu_status rh_att_next(struct rh_att *a, struct remote_hdr *h, void *buf, size_t cap, int ms)
{
	int want = a->taken + 1, reads = a->nread + 1;
	struct tpu_message *d;
	tpu_status st;

	if (!count_wait(&a->lock, &a->cond, &a->ndesc, want, ms))
		return -ETIMEDOUT;
	a->taken = want;
	if (a->desc_st)
		return a->desc_st;
	d = a->desc;
	/* The next descriptor's callback may overwrite a->meta: the header keeps its own copy. */
	memcpy(a->hdr, a->meta, a->meta_len);
	st = tpu__remote_wire_get(a->hdr, a->meta_len, h);
	if (st)
		return st;
	if (d->ntensors == 1) {
		if (!buf)
			return -EPROTO;
		if (d->tensors[0].len > cap)
			return -EMSGSIZE;
		d->tensors[0].data = buf;
	}
	/* Here: whether a tensor came (the descriptor is the pipe's again once read). */
	h->len = d->ntensors;
	if (tpu_pipe_read(a->p, d, att_read, a) ||
	    !count_wait(&a->lock, &a->cond, &a->nread, reads, ms))
		return -EIO;
	tpu_pipe_read_descriptor(a->p, att_desc, a);
	return a->read_st;
}

bool rh_att_closed(struct rh_att *a, int ms)
{
	struct remote_hdr h;
	uint8_t buf[64];
	tpu_status st;

	do
		st = rh_att_next(a, &h, buf, sizeof(buf), ms);
	while (!st);
	return st != -ETIMEDOUT;
}
