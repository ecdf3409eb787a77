// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The kmod rendezvous: a /dev/tensorpipe domain per rendezvous, one
 * endpoint per member, and SEND, RECV and CANCEL as io_uring commands on
 * the context's ring, so that no thread waits per operation: each CQE
 * becomes the op's result.  The module copies once, from the producer's
 * pinned pages into the consumer's; a given buffer of the context's own
 * endpoint is donated instead (its pages change owner), and recv_buffer
 * receives a donated region and maps it.  Tensors of at most KM_SMALL bytes
 * in memory the module does not know go through a slot of a region the
 * rendezvous allocated once (a memcpy each side), not through a
 * registration and a release per operation.
 *
 * Peer death comes from the module (TP_FEAT_MEMBER_DEATH): every member
 * attaches with TP_DOMAIN_ATTACH_MEMBER, and when a member process dies
 * with its endpoint open, what the others had pending ends with
 * -EOWNERDEAD, reported as TPU_E_PEER_GONE, as the cma rendezvous does.
 */
#include <fcntl.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rdv_kmod.h"

struct km_state {
	struct tpu_context *ctx;
	struct tpu__ep_ref *ep;
	int domain_fd;
	pthread_mutex_t lock;		/* what follows */
	struct km_cmd *cmds;		/* commands whose CQE is due */
	bool closing;
	struct km_regcache cache;
	uint64_t features;		/* the module's TPU_FEAT_* */
	bool have_zero;
	uint32_t zero_region;		/* for empty tensors, which cannot be registered */
	bool have_small;
	uint32_t small_region;		/* KM_SMALL_SLOTS slots of KM_SMALL bytes, mapped at small */
	uint8_t *small;
	uint64_t small_free;		/* bit i: slot i is free */
};

/*
 * Small tensors in memory the module does not know travel through slots of
 * a region allocated once per rendezvous: a memcpy of at most KM_SMALL
 * bytes costs far less than pinning and releasing a page per operation.
 */
#define KM_SMALL	4096u
#define KM_SMALL_SLOTS	64u
#define KM_NO_SLOT	UINT32_MAX

/* One io_uring command: an op's SEND or RECV, or a CANCEL (op NULL). */
struct km_cmd {
	struct km_cmd *next, *prev;
	struct km_state *km;
	struct tpu__op *op;
	bool temp;			/* temp_region registered for this op only */
	uint32_t temp_region;
	bool donated;			/* SEND DONATE of donated_region */
	uint32_t donated_region;
	struct tpu_buffer *give;	/* a given buffer copied from: freed at the end */
	uint8_t *cancel_key;
	size_t cancel_len;
	uint32_t slot;			/* a small slot, or KM_NO_SLOT */
};

static int km_fd(const struct km_state *km)
{
	return tpu_endpoint_fd(tpu__ep_ref_get(km->ep));
}

static void km_link(struct km_state *km, struct km_cmd *c)
{
	c->prev = NULL;
	c->next = km->cmds;
	if (km->cmds)
		km->cmds->prev = c;
	km->cmds = c;
}

static void km_unlink(struct km_state *km, struct km_cmd *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		km->cmds = c->next;
	if (c->next)
		c->next->prev = c->prev;
}

/* Free what the command holds that is not the op's. */
static void km_cmd_free(struct km_state *km, struct km_cmd *c)
{
	struct tpu_endpoint *ep = tpu__ep_ref_get(km->ep);

	if (c->slot != KM_NO_SLOT) {
		pthread_mutex_lock(&km->lock);
		km->small_free |= 1ull << c->slot;
		pthread_mutex_unlock(&km->lock);
	}
	if (c->temp)
		tpu_region_release(ep, c->temp_region);
	if (c->give)
		tpu_buffer_free(c->give);
	free(c->cancel_key);
	free(c);
}

/* ---- where the bytes are ---------------------------------------------- */

/* km->lock held. */
static tpu_status km_zero_region(struct km_state *km, uint32_t *handle)
{
	uint64_t off;
	tpu_status st;

	if (!km->have_zero) {
		st = tpu_region_alloc(tpu__ep_ref_get(km->ep), 1, &km->zero_region, &off);
		if (st)
			return st;
		km->have_zero = true;
	}
	*handle = km->zero_region;
	return 0;
}

/* A free small slot for @c, its region and offset; km->lock held. */
static bool km_small_slot(struct km_state *km, struct km_cmd *c, uint32_t *region, uint64_t *offset)
{
	struct tpu_endpoint *ep = tpu__ep_ref_get(km->ep);
	uint64_t off;
	void *addr;

	if (!km->have_small) {
		if (tpu_region_alloc(ep, KM_SMALL * KM_SMALL_SLOTS, &km->small_region, &off))
			return false;
		if (tpu_region_mmap(ep, off, KM_SMALL * KM_SMALL_SLOTS, 0, &addr)) {
			tpu_region_release(ep, km->small_region);
			return false;
		}
		km->small = addr;
		km->small_free = KM_SMALL_SLOTS == 64 ? UINT64_MAX : (1ull << KM_SMALL_SLOTS) - 1;
		km->have_small = true;
	}
	if (!km->small_free)
		return false;
	c->slot = (uint32_t)__builtin_ctzll(km->small_free);
	km->small_free &= ~(1ull << c->slot);
	*region = km->small_region;
	*offset = (uint64_t)c->slot * KM_SMALL;
	return true;
}

/*
 * The region and offset of @t for @access: the buffer's own region when it
 * lives on this endpoint, a cached registration for other buffers, else a
 * registration for this command only.  km->lock held.
 */
static tpu_status km_locate(struct km_state *km, struct km_cmd *c, const struct tpu_tensor *t,
			    unsigned int access, uint32_t *region, uint64_t *offset)
{
	struct tpu_endpoint *ep = tpu__ep_ref_get(km->ep);
	const struct tpu_buffer *buf = t->buffer;
	tpu_status st;

	*offset = 0;
	if (t->len == 0)
		return km_zero_region(km, region);
	if (buf && (buf->kind == TPU__BUF_KMOD || buf->kind == TPU__BUF_DMABUF) &&
	    buf->ep == km->ep) {
		*region = buf->region;
		*offset = (uint64_t)((const uint8_t *)t->data - (const uint8_t *)buf->data);
		return 0;
	}
	/* Device memory behind an import: no other way to reach it. */
	if (buf && buf->kind == TPU__BUF_DMABUF)
		return -EXDEV;
	if (buf && buf->kind != TPU__BUF_HEAP) {
		st = tpu__km_reg_get(&km->cache, ep, buf, access, region);
		if (!st)
			*offset = (uint64_t)((const uint8_t *)t->data -
					     (const uint8_t *)buf->data);
		return st;
	}
	if (t->len <= KM_SMALL && km_small_slot(km, c, region, offset)) {
		if (access == TPU_ACCESS_READ)
			memcpy(km->small + *offset, t->data, t->len);
		return 0;
	}
	st = tpu_region_register(ep, t->data, t->len, access, region);
	if (!st) {
		c->temp = true;
		c->temp_region = *region;
	}
	return st;
}

/* ---- completions ------------------------------------------------------ */

/* A received donated region, mapped into a buffer. */
static tpu_status km_map_received(struct km_state *km, uint32_t region, size_t len,
				  struct tpu_buffer **out)
{
	struct tpu_endpoint *ep = tpu__ep_ref_get(km->ep);
	void *addr;
	tpu_status st;

	/* An empty tensor has no pages to map. */
	if (len == 0) {
		tpu_region_release(ep, region);
		return tpu__buffer_alloc_heap(0, out);
	}
	st = tpu_region_mmap(ep, (uint64_t)region << TP_MMAP_REGION_SHIFT, len, 0, &addr);
	if (st) {
		tpu_region_release(ep, region);
		return st;
	}
	tpu__ep_ref_hold(km->ep);
	st = tpu__buffer_wrap_kmod(km->ep, region, addr, len, out);
	if (st) {
		munmap(addr, len);
		tpu_region_release(ep, region);
		tpu__ep_ref_put(km->ep);
	}
	return st;
}

static void km_result(struct km_state *km, struct km_cmd *c, int res, uint64_t len)
{
	struct tpu__op *op = c->op;

	op->status = res < 0 ? res : 0;
	op->len = (res >= 0 || res == -EMSGSIZE) ? (size_t)len : 0;
	switch (op->kind) {
	case TPU__OP_SEND:
		/*
		 * A DONATE that failed before it was posted still owns its
		 * handle; one that failed later consumed it, and handles are
		 * allocated cyclically, so releasing a dead one cannot hit
		 * another region.
		 */
		if (res < 0 && c->donated)
			tpu_region_release(tpu__ep_ref_get(km->ep), c->donated_region);
		if (res < 0)
			op->len = 0;
		break;
	case TPU__OP_RECV:
		/* Into a small slot: now into the caller's memory. */
		if (res >= 0 && c->slot != KM_NO_SLOT)
			memcpy(op->tensor.data, km->small + (uint64_t)c->slot * KM_SMALL, op->len);
		break;
	case TPU__OP_RECV_BUFFER:
		if (res >= 0)
			op->status = km_map_received(km, (uint32_t)res, (size_t)len,
						     &op->out_buffer);
		break;
	}
	if (op->status == -ECANCELED && km->closing)
		op->status = TPU_E_CLOSED;
	/* The module's word for another member of the domain that died. */
	if (op->status == -EOWNERDEAD)
		op->status = TPU_E_PEER_GONE;
}

static void km_cqe(void *arg, const struct io_uring_cqe *cqe)
{
	struct km_cmd *c = arg;
	struct km_state *km = c->km;
	struct tpu__op *op = c->op;

	if (op)
		km_result(km, c, cqe->res, cqe->big_cqe[0]);
	pthread_mutex_lock(&km->lock);
	km_unlink(km, c);
	pthread_mutex_unlock(&km->lock);
	km_cmd_free(km, c);
	if (op)
		tpu__op_complete(op);
}

/* ---- submission ------------------------------------------------------- */

/* Queue the command on the ring; km->lock held. */
static tpu_status km_submit(struct km_state *km, struct km_cmd *c, unsigned int cmd_op,
			    const void *arg, size_t arg_len)
{
	struct io_uring_sqe *sqe = tpu__ctx_sqe(km->ctx, km_cqe, c);

	if (!sqe)
		return -ENOMEM;
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = km_fd(km);
	sqe->cmd_op = cmd_op;
	memcpy(sqe->cmd, arg, arg_len);
	km_link(km, c);
	return tpu__ctx_submit(km->ctx);
}

static struct km_cmd *km_cmd_new(struct km_state *km, struct tpu__op *op)
{
	struct km_cmd *c = calloc(1, sizeof(*c));

	if (c) {
		c->km = km;
		c->op = op;
		c->slot = KM_NO_SLOT;
	}
	return c;
}

static bool km_can_donate(const struct km_state *km, const struct tpu__op *op)
{
	const struct tpu_buffer *buf = op->tensor.buffer;

	/* The context's buffers, or ones received here: on this endpoint either way. */
	return (op->flags & TPU_SEND_GIVE) && buf->kind == TPU__BUF_KMOD && buf->ep == km->ep;
}

static tpu_status km_send(struct tpu_rendezvous *rdv, struct tpu__op *op)
{
	struct km_state *km = rdv->impl_state;
	struct km_cmd *c = km_cmd_new(km, op);
	struct tp_send s;
	uint64_t offset = 0;
	tpu_status st;

	if (!c)
		return -ENOMEM;
	memset(&s, 0, sizeof(s));
	s.key_ptr = (uintptr_t)op->key;
	s.key_len = (uint32_t)op->key_len;
	s.len = op->tensor.len;
	pthread_mutex_lock(&km->lock);
	if (km_can_donate(km, op)) {
		s.flags = TP_SEND_DONATE;
		s.region = op->tensor.buffer->region;
	} else {
		st = km_locate(km, c, &op->tensor, TPU_ACCESS_READ, &s.region, &offset);
		if (st)
			goto fail;
		s.offset = offset;
	}
	/*
	 * The module refuses to donate a mapped region, and on the context
	 * thread the SEND reaches it within km_submit: unmap first (nobody
	 * maps it again).  The buffer is ours from here (see tpu__rdv_ops).
	 */
	if (s.flags & TP_SEND_DONATE) {
		c->donated = true;
		c->donated_region = s.region;
		tpu__buffer_unmap_for_donate(op->tensor.buffer);
		op->tensor.buffer = NULL;
	}
	st = km_submit(km, c, TP_IOC_SEND, &s, sizeof(s));
	if (st && (s.flags & TP_SEND_DONATE)) {
		/* Too late to give the buffer back: fail the op through its callback. */
		tpu_region_release(tpu__ep_ref_get(km->ep), s.region);
		pthread_mutex_unlock(&km->lock);
		km_cmd_free(km, c);
		op->status = st;
		tpu__op_complete(op);
		return 0;
	}
	if (st)
		goto fail;
	if (op->flags & TPU_SEND_GIVE && !(s.flags & TP_SEND_DONATE)) {
		c->give = op->tensor.buffer;
	}
	pthread_mutex_unlock(&km->lock);
	return 0;
fail:
	pthread_mutex_unlock(&km->lock);
	km_cmd_free(km, c);
	return st;
}

static tpu_status km_recv(struct tpu_rendezvous *rdv, struct tpu__op *op)
{
	struct km_state *km = rdv->impl_state;
	struct km_cmd *c = km_cmd_new(km, op);
	struct tp_recv r;
	uint64_t offset = 0;
	tpu_status st = 0;

	if (!c)
		return -ENOMEM;
	memset(&r, 0, sizeof(r));
	r.key_ptr = (uintptr_t)op->key;
	r.key_len = (uint32_t)op->key_len;
	r.len = op->tensor.len;
	r.timeout_ns = op->timeout_ns;
	pthread_mutex_lock(&km->lock);
	if (op->kind == TPU__OP_RECV_BUFFER)
		r.flags = TP_RECV_DONATE;
	else
		st = km_locate(km, c, &op->tensor, TPU_ACCESS_WRITE, &r.region, &offset);
	r.offset = offset;
	if (!st)
		st = km_submit(km, c, TP_IOC_RECV, &r, sizeof(r));
	pthread_mutex_unlock(&km->lock);
	if (st)
		km_cmd_free(km, c);
	return st;
}

/* CANCEL through the ring, so that it comes after the commands it targets. */
static tpu_status km_cancel_key(struct km_state *km, const uint8_t *key, size_t key_len)
{
	struct km_cmd *c = km_cmd_new(km, NULL);
	struct tp_cancel tc;
	tpu_status st;

	if (!c)
		return -ENOMEM;
	c->cancel_key = malloc(key_len);
	if (!c->cancel_key) {
		free(c);
		return -ENOMEM;
	}
	memcpy(c->cancel_key, key, key_len);
	c->cancel_len = key_len;
	memset(&tc, 0, sizeof(tc));
	tc.key_ptr = (uintptr_t)c->cancel_key;
	tc.key_len = (uint32_t)key_len;
	tc.flags = TP_CANCEL_SEND | TP_CANCEL_RECV;
	st = km_submit(km, c, TP_IOC_CANCEL, &tc, sizeof(tc));
	if (st)
		km_cmd_free(km, c);
	return st;
}

static bool same_key(const struct km_cmd *c, const uint8_t *key, size_t key_len)
{
	return c->op && c->op->key_len == key_len && memcmp(c->op->key, key, key_len) == 0;
}

static int km_cancel(struct tpu_rendezvous *rdv, const uint8_t *key, size_t key_len)
{
	struct km_state *km = rdv->impl_state;
	struct km_cmd *c;
	int n = 0;
	tpu_status st;

	pthread_mutex_lock(&km->lock);
	for (c = km->cmds; c; c = c->next)
		n += same_key(c, key, key_len);
	st = n ? km_cancel_key(km, key, key_len) : 0;
	pthread_mutex_unlock(&km->lock);
	if (st)
		return st;
	return n ? n : -ENOENT;
}

static tpu_status km_abort(struct tpu_rendezvous *rdv, tpu_status status)
{
	struct km_state *km = rdv->impl_state;

	return tpu_abort(tpu__ep_ref_get(km->ep), status);
}

/* ---- life ------------------------------------------------------------- */

static tpu_status km_endpoint(struct km_state *km)
{
	struct tpu_endpoint *ep;
	struct tpu_info info;
	tpu_status st;

	if (tpu__ctx_claim_endpoint(km->ctx)) {
		km->ep = tpu__ctx_endpoint_ref(km->ctx);
	}
	if (!km->ep) {
		st = tpu_endpoint_open(tpu__ctx_dev_path(km->ctx), &ep);
		if (st)
			return st;
		km->ep = tpu__ep_ref_new(ep);
		if (!km->ep) {
			tpu_endpoint_close(ep);
			return -ENOMEM;
		}
	}
	st = tpu_endpoint_info(tpu__ep_ref_get(km->ep), &info);
	if (!st && !(info.features & TPU_FEAT_URING_CMD))
		st = -EOPNOTSUPP;
	km->features = info.features;
	return st;
}

static void km_free(struct km_state *km)
{
	struct tpu_endpoint *ep = tpu__ep_ref_get(km->ep);

	if (ep) {
		tpu__km_reg_release_all(&km->cache, ep);
		if (km->have_zero)
			tpu_region_release(ep, km->zero_region);
		if (km->have_small) {
			munmap(km->small, KM_SMALL * KM_SMALL_SLOTS);
			tpu_region_release(ep, km->small_region);
		}
	}
	if (km->domain_fd >= 0)
		close(km->domain_fd);
	tpu__ep_ref_put(km->ep);
	pthread_mutex_destroy(&km->lock);
	free(km);
}

static tpu_status km_start(struct tpu_rendezvous *rdv, int join_fd)
{
	struct km_state *km = calloc(1, sizeof(*km));
	tpu_status st;

	if (!km)
		return -ENOMEM;
	km->ctx = rdv->ctx;
	km->domain_fd = -1;
	pthread_mutex_init(&km->lock, NULL);
	st = km_endpoint(km);
	if (!st && join_fd < 0)
		st = tpu_domain_create(tpu__ep_ref_get(km->ep), &km->domain_fd, NULL);
	if (!st && join_fd >= 0) {
		km->domain_fd = fcntl(join_fd, F_DUPFD_CLOEXEC, 0);
		if (km->domain_fd < 0)
			st = tpu__errno();
	}
	if (!st)
		/* As a member, so that a dead peer's ops end (TP_FEAT_MEMBER_DEATH). */
		st = tpu__domain_attach(tpu__ep_ref_get(km->ep), km->domain_fd,
					(km->features & TPU_FEAT_MEMBER_DEATH) ?
					TP_DOMAIN_ATTACH_MEMBER : 0, NULL);
	if (st) {
		km_free(km);
		return st;
	}
	rdv->impl_state = km;
	return 0;
}

static tpu_status km_create(struct tpu_rendezvous *rdv)
{
	return km_start(rdv, -1);
}

static tpu_status km_join(struct tpu_rendezvous *rdv, int fd)
{
	return km_start(rdv, fd);
}

static tpu_status km_share(struct tpu_rendezvous *rdv, int *fd)
{
	struct km_state *km = rdv->impl_state;

	*fd = fcntl(km->domain_fd, F_DUPFD_CLOEXEC, 0);
	return *fd < 0 ? tpu__errno() : 0;
}

static bool km_idle(void *arg)
{
	struct km_state *km = arg;
	bool idle;

	pthread_mutex_lock(&km->lock);
	idle = km->cmds == NULL;
	pthread_mutex_unlock(&km->lock);
	return idle;
}

static void km_destroy(struct tpu_rendezvous *rdv)
{
	struct km_state *km = rdv->impl_state;
	struct km_cmd *c, *d;

	pthread_mutex_lock(&km->lock);
	km->closing = true;
	/* One CANCEL per key still out; the module completes each command once. */
	for (c = km->cmds; c; c = c->next) {
		if (!c->op)
			continue;
		for (d = km->cmds; d != c; d = d->next)
			if (same_key(d, c->op->key, c->op->key_len))
				break;
		if (d == c)
			km_cancel_key(km, c->op->key, c->op->key_len);
	}
	pthread_mutex_unlock(&km->lock);
	tpu__ctx_wait(km->ctx, km_idle, km);
	km_free(km);
	rdv->impl_state = NULL;
}

struct tpu__ep_ref *tpu__rdv_kmod_endpoint(struct tpu_rendezvous *rdv)
{
	struct km_state *km = rdv->impl_state;

	return rdv->ops == &tpu__rdv_kmod && km ? km->ep : NULL;
}

const struct tpu__rdv_ops tpu__rdv_kmod = {
	.impl = TPU_RDV_KMOD,
	.create = km_create,
	.join = km_join,
	.share = km_share,
	.destroy = km_destroy,
	.send = km_send,
	.recv = km_recv,
	.cancel = km_cancel,
	.abort = km_abort,
};
