// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Tensors in CUDA memory on the rendezvous, whatever the implementation:
 * they go through a host buffer of the rendezvous's context (a module
 * region where the module is, so kmod moves it without a registration).
 * A send copies the device bytes into a new buffer, after the work queued
 * on the tensor's stream, and gives that buffer to the rendezvous (a
 * blocking send frees it on return): the device memory is free again when
 * the call returns.  A receive takes the
 * tensor into a buffer and copies it to the device before the caller's
 * callback runs (or before the blocking call returns), ordered before the
 * work queued on the tensor's stream afterwards.  -EMSGSIZE and every
 * other status pass through unchanged; nothing is copied then.
 */
#include <stdlib.h>

#include "cuda/cuda.h"
#include "rdv.h"

static const struct tpu_device host = { TPU_DEVICE_CPU, 0 };

/* A CUDA tensor the rendezvous can take: 0, or why not. */
static tpu_status device_check(const struct tpu_tensor *t)
{
	if (t->device.type != TPU_DEVICE_CUDA || t->buffer || !tpu__reserved_zero(t->reserved))
		return -EINVAL;
	return tpu__cuda_check_ptr(t->data, t->len, t->device.index);
}

/* The device bytes of @t in a new buffer of @rdv's context. */
static tpu_status stage_out(struct tpu_rendezvous *rdv, const struct tpu_tensor *t,
			    struct tpu_tensor *out)
{
	struct tpu_buffer *buf;
	tpu_status st = device_check(t);

	if (!st)
		st = tpu_buffer_alloc(rdv->ctx, t->len ? t->len : 1, &buf);
	if (st)
		return st;
	st = tpu__cuda_copy(tpu_buffer_data(buf), host, t->data, t->device, t->len, t->stream);
	if (st) {
		tpu_buffer_free(buf);
		return st;
	}
	*out = (struct tpu_tensor){ .data = tpu_buffer_data(buf), .len = t->len, .buffer = buf };
	return 0;
}

tpu_status tpu__rdv_device_send(struct tpu_rendezvous *rdv, const void *key, size_t key_len,
				const struct tpu_tensor *t, unsigned int flags, tpu_send_cb done,
				void *arg, uint64_t wait_timeout_ns, bool wait)
{
	struct tpu_tensor staged;
	tpu_status st;

	/* A given buffer is host memory by definition. */
	if (flags)
		return -EINVAL;
	st = stage_out(rdv, t, &staged);
	if (st)
		return st;
	if (wait) {
		/* The source is free again when the blocking send returns. */
		st = tpu_rendezvous_send_wait(rdv, key, key_len, &staged, 0, wait_timeout_ns);
		tpu_buffer_free(staged.buffer);
		return st;
	}
	st = tpu_rendezvous_send(rdv, key, key_len, &staged, TPU_SEND_GIVE, done, arg);
	/* Refused at once: the buffer is still ours. */
	if (st)
		tpu_buffer_free(staged.buffer);
	return st;
}

/* The device destination of one receive, until its host buffer is copied. */
struct staged_recv {
	struct tpu_tensor dst;
	struct tpu_buffer *buf;
	tpu_recv_cb done;
	void *arg;
};

/* The bytes of @buf (@len of them) onto the device, if the receive got them. */
static tpu_status stage_in(const struct tpu_tensor *dst, struct tpu_buffer *buf, tpu_status st,
			   size_t len)
{
	if (!st)
		st = tpu__cuda_copy(dst->data, dst->device, tpu_buffer_data(buf), host, len,
				    dst->stream);
	tpu_buffer_free(buf);
	return st;
}

static void staged_received(void *arg, tpu_status st, size_t len)
{
	struct staged_recv *sr = arg;

	st = stage_in(&sr->dst, sr->buf, st, len);
	sr->done(sr->arg, st, len);
	free(sr);
}

tpu_status tpu__rdv_device_recv(struct tpu_rendezvous *rdv, const void *key, size_t key_len,
				const struct tpu_tensor *dst, uint64_t timeout_ns,
				tpu_recv_cb done, void *arg, size_t *wait_len, bool wait)
{
	struct staged_recv *sr;
	struct tpu_buffer *buf;
	struct tpu_tensor in;
	size_t len = 0;
	tpu_status st = device_check(dst);

	if (!st && !wait && !done)
		st = -EINVAL;
	if (!st)
		st = tpu_buffer_alloc(rdv->ctx, dst->len ? dst->len : 1, &buf);
	if (st)
		return st;
	in = (struct tpu_tensor){ .data = tpu_buffer_data(buf), .len = dst->len, .buffer = buf };
	if (wait) {
		st = tpu_rendezvous_recv_wait(rdv, key, key_len, &in, timeout_ns, &len);
		st = stage_in(dst, buf, st, len);
		if (wait_len)
			*wait_len = len;
		return st;
	}
	sr = malloc(sizeof(*sr));
	if (!sr) {
		tpu_buffer_free(buf);
		return -ENOMEM;
	}
	*sr = (struct staged_recv){ .dst = *dst, .buf = buf, .done = done, .arg = arg };
	st = tpu_rendezvous_recv(rdv, key, key_len, &in, timeout_ns, staged_received, sr);
	if (st) {
		tpu_buffer_free(buf);
		free(sr);
	}
	return st;
}
