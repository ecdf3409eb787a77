// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The kmod channel: the two ends share a kmod rendezvous.  At set-up the
 * connector creates it and passes its domain's descriptor over the
 * transport (which must pass descriptors), the listener side joins it.
 * Tensor @idx of message @seq travels under the key "c/seq/idx" when the
 * connector wrote it, "l/seq/idx" otherwise; a given buffer is donated.
 *
 * Compatibility descriptor: boot id, module ABI and the device number of
 * the node (the same module instance), mount namespace of the node's path.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "channel.h"

struct kmod_part {
	struct tpu__chan_xfer x;
	struct tpu_buffer *hold;	/* freed when the part ends (cuda_dmabuf's import) */
};

static size_t kmod_key(char *buf, size_t size, bool by_connector, uint64_t seq, uint32_t idx)
{
	int n = snprintf(buf, size, "%c/%llu/%u", by_connector ? 'c' : 'l',
			 (unsigned long long)seq, idx);

	return n < 0 ? 0 : (size_t)n;
}

static void kmod_sent(void *arg, tpu_status st)
{
	struct kmod_part *part = arg;
	struct tpu__chan_xfer x = part->x;

	tpu_buffer_free(part->hold);
	free(part);
	x.part_done(&x, TPU__PART_CHAN, st);
}

tpu_status tpu__chan_kmod_post(struct tpu__chan_link *l, struct tpu__chan_xfer *x,
				const struct tpu_tensor *src, unsigned int flags,
				struct tpu_buffer *hold)
{
	struct kmod_part *part = malloc(sizeof(*part));
	char key[64];
	size_t key_len = kmod_key(key, sizeof(key), l->connector, x->seq, x->idx);
	tpu_status st;

	if (!part)
		return -ENOMEM;
	part->x = *x;
	part->hold = hold;
	x->part_start(x, TPU__PART_CHAN);
	st = tpu_rendezvous_send(l->state, key, key_len, src, flags, kmod_sent, part);
	if (st) {
		x->part_cancel(x, TPU__PART_CHAN);
		free(part);
		return st;
	}
	if (flags)
		x->given = true;
	return 0;
}

static tpu_status kmod_send(struct tpu__chan_link *l, struct tpu__chan_xfer *x)
{
	struct tpu_message_tensor *t = x->t;
	struct tpu_tensor src = { .data = t->data, .len = t->len, .buffer = t->buffer };

	return tpu__chan_kmod_post(l, x, &src, t->flags & TPU_TENSOR_GIVE ? TPU_SEND_GIVE : 0,
				   NULL);
}

static void kmod_received(void *arg, tpu_status st, size_t len)
{
	struct kmod_part *part = arg;
	struct tpu__chan_xfer x = part->x;

	tpu_buffer_free(part->hold);
	free(part);
	if (!st && len != x.t->len)
		st = -EPROTO;
	x.part_done(&x, TPU__PART_CHAN, st);
}

static void kmod_received_buffer(void *arg, tpu_status st, struct tpu_buffer *buf, size_t len)
{
	struct kmod_part *part = arg;

	if (buf) {
		part->x.t->buffer = buf;
		part->x.t->data = tpu_buffer_data(buf);
	}
	kmod_received(arg, st, len);
}

tpu_status tpu__chan_kmod_take(struct tpu__chan_link *l, struct tpu__chan_xfer *x,
				const struct tpu_tensor *dst, struct tpu_buffer *hold)
{
	struct tpu_message_tensor *t = x->t;
	struct kmod_part *part = malloc(sizeof(*part));
	char key[64];
	size_t key_len = kmod_key(key, sizeof(key), !l->connector, x->seq, x->idx);
	tpu_status st;

	if (!part)
		return -ENOMEM;
	part->x = *x;
	part->hold = hold;
	x->part_start(x, TPU__PART_CHAN);
	if (!dst)
		st = tpu_rendezvous_recv_buffer(l->state, key, key_len, t->len, 0,
						kmod_received_buffer, part);
	else
		st = tpu_rendezvous_recv(l->state, key, key_len, dst, 0, kmod_received, part);
	if (st) {
		x->part_cancel(x, TPU__PART_CHAN);
		free(part);
	}
	return st;
}

static tpu_status kmod_recv(struct tpu__chan_link *l, struct tpu__chan_xfer *x)
{
	struct tpu_message_tensor *t = x->t;
	struct tpu_tensor dst = { .data = t->data, .len = t->len, .buffer = t->buffer };

	return tpu__chan_kmod_take(l, x, t->flags & TPU_TENSOR_WANT_BUFFER ? NULL : &dst, NULL);
}

/* Listener side: the connector's domain arrived (or did not). */
static void kmod_fd_received(void *arg, tpu_status st)
{
	struct tpu__chan_link *l = arg;
	struct tpu_rendezvous *r;

	if (!st && l->closed)
		st = TPU_E_CLOSED;
	if (!st) {
		st = tpu_rendezvous_join(l->ctx, l->fd, &r);
		/*
		 * join takes a cma table too, whose members name pids that we
		 * would pull from: only a module domain copies between the
		 * two ends' own memory (Documentation/security.rst).
		 */
		if (!st && tpu_rendezvous_impl(r) != TPU_RDV_KMOD) {
			tpu__log_debug("pipe: kmod: the peer passed a %s rendezvous, not a "
				       "module domain: refused",
				       tpu_rendezvous_impl(r) == TPU_RDV_CMA ? "cma" : "non-kmod");
			tpu_rendezvous_destroy(r);
			st = -EPROTO;
		}
		if (!st) {
			tpu__rdv_owned(r);
			l->state = r;
		}
	}
	if (l->fd >= 0)
		close(l->fd);
	l->fd = -1;
	l->setup_done(l->setup_arg, st);
}

static tpu_status kmod_setup(struct tpu__chan_link *l, tpu__io_cb done, void *arg)
{
	struct tpu_rendezvous *r;
	tpu_status st;
	int fd;

	if (!l->conn->ops->send_fd)
		return -EPROTO;
	if (!l->connector) {
		l->setup_done = done;
		l->setup_arg = arg;
		return l->conn->ops->recv_fd(l->conn, &l->fd, kmod_fd_received, l);
	}
	st = tpu_rendezvous_create(l->ctx, TPU_RDV_KMOD, &r);
	if (st)
		return st;
	/* The link destroys it (kmod_close), on the context's thread. */
	tpu__rdv_owned(r);
	l->state = r;
	st = tpu_rendezvous_share(r, &fd);
	if (st)
		return st;
	st = l->conn->ops->send_fd(l->conn, fd, done, arg);
	close(fd);
	return st;
}

static void kmod_close(struct tpu__chan_link *l)
{
	struct tpu_rendezvous *r = l->state;

	if (r) {
		/* Pending tensors complete with TPU_E_CLOSED, on this thread. */
		tpu__rdv_destroy_owned(r);
		l->state = NULL;
	}
}

static tpu_status kmod_descriptor(struct tpu_context *ctx, char *buf, size_t size)
{
	struct tpu_endpoint *ep = tpu__ctx_endpoint(ctx);
	const char *dev = tpu__ctx_dev_path(ctx) ? tpu__ctx_dev_path(ctx) : TPU_DEVICE_PATH;
	struct tpu_info info;
	char boot[64];
	struct stat sb;
	tpu_status st;

	if (!ep)
		return TPU_E_NO_DEVICE;
	st = tpu_endpoint_info(ep, &info);
	if (!st && !(info.features & TPU_FEAT_URING_CMD))
		st = -EOPNOTSUPP;
	if (!st && fstat(tpu_endpoint_fd(ep), &sb))
		st = tpu__errno();
	if (!st)
		st = tpu__boot_id(boot, sizeof(boot));
	if (st)
		return st;
	snprintf(buf, size, "kmod:%s:%u:%llx:%lu:%s", boot, info.abi_version,
		 (unsigned long long)sb.st_rdev, tpu__ns_inode("mnt"), dev);
	return 0;
}

/* The domain's descriptor has to be passed over the transport. */
static bool kmod_supports(const struct tpu__xport *x, enum tpu_device_type src,
			  enum tpu_device_type dst)
{
	return x->passes_fds && src == TPU_DEVICE_CPU && dst == TPU_DEVICE_CPU;
}

const struct tpu__chan tpu__chan_kmod = {
	.name = "kmod",
	.wire_id = 3,
	.flags = TPU__CHAN_MODULE | TPU__CHAN_BUFFERS,
	.descriptor = kmod_descriptor,
	.supports = kmod_supports,
	.setup = kmod_setup,
	.send = kmod_send,
	.recv = kmod_recv,
	.close = kmod_close,
};
