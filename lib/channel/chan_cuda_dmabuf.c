// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The cuda_dmabuf channel: CUDA memory moved by the module, on one host.
 * It rides the kmod channel's rendezvous (TPU__CHAN_ON_KMOD) and its keys.
 * A side whose tensor is device memory exports the tensor's pages as a
 * dma-buf (cuMemGetHandleForAddressRange), imports that into the
 * rendezvous's endpoint as a region (TP_IOC_REGION_IMPORT), and names the
 * region in its SEND or RECV; the module copies between the two sides with
 * the CPU, through the exporter's kernel mapping.  The region goes when the
 * operation ends.  A side whose tensor is CPU memory does what kmod does.
 *
 * Ordering: the writer posts after the work queued on its tensor's stream
 * (NULL: the legacy default stream); the reader receives after the work
 * queued on its own, and the bytes are in place when its RECV completes.
 *
 * Only exporters whose buffers the CPU can map work (udmabuf, dma-buf
 * heaps; not NVIDIA's GPU memory today, whose dma-bufs offer no vmap, so
 * such a GPU uses cuda_ipc or cuda_staged): the descriptor probes once per
 * process by exporting a page of device 0 and importing it.
 *
 * Compatibility descriptor: the kmod channel's (the same module instance),
 * when that probe succeeds.
 */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "channel.h"

/*
 * @t's device memory as the rendezvous sees it, once the work queued on
 * its stream is done: a buffer naming its import into the rendezvous's
 * endpoint (none for an empty tensor, which has no pages: the rendezvous
 * moves it from nowhere).
 */
static tpu_status dmabuf_tensor(struct tpu__chan_link *l, const struct tpu_message_tensor *t,
				unsigned int access, struct tpu_tensor *out)
{
	struct tpu__ep_ref *ep = tpu__rdv_kmod_endpoint(l->state);
	struct tpu_buffer *buf = NULL;
	uint64_t off;
	tpu_status st;
	int fd;

	*out = (struct tpu_tensor){ .data = t->data, .len = t->len };
	if (!ep)
		return TPU_E_CLOSED;
	st = tpu__cuda_stream_done(t->device.index, t->stream);
	if (!st && t->len) {
		st = tpu__cuda_dmabuf_export(t->data, t->len, t->device.index, &fd, &off);
		if (st)
			return st;
		st = tpu__buffer_import_dmabuf(ep, fd, access, (uint8_t *)t->data - off, &buf);
		/* The region holds its own reference to the dma-buf. */
		close(fd);
	}
	out->buffer = buf;
	return st;
}

static tpu_status dmabuf_send(struct tpu__chan_link *l, struct tpu__chan_xfer *x)
{
	struct tpu_tensor src;
	tpu_status st;

	if (x->t->device.type != TPU_DEVICE_CUDA)
		return tpu__chan_kmod.send(l, x);
	st = dmabuf_tensor(l, x->t, TPU_ACCESS_READ, &src);
	if (!st)
		st = tpu__chan_kmod_post(l, x, &src, 0, src.buffer);
	if (st)
		tpu_buffer_free(src.buffer);
	return st;
}

static tpu_status dmabuf_recv(struct tpu__chan_link *l, struct tpu__chan_xfer *x)
{
	struct tpu_tensor dst;
	tpu_status st;

	if (x->t->device.type != TPU_DEVICE_CUDA)
		return tpu__chan_kmod.recv(l, x);
	st = dmabuf_tensor(l, x->t, TPU_ACCESS_WRITE, &dst);
	if (!st)
		st = tpu__chan_kmod_take(l, x, &dst, dst.buffer);
	if (st)
		tpu_buffer_free(dst.buffer);
	return st;
}

/* ---- viability -------------------------------------------------------- */

static pthread_mutex_t probe_lock = PTHREAD_MUTEX_INITIALIZER;
static bool probed;
static tpu_status probe_status;

/* Whether a page of device 0 survives export and import into @ep; why not, once. */
static tpu_status dmabuf_probe(struct tpu_endpoint *ep)
{
	const struct tpu__cuda_api *cu;
	tpu__cu_ptr d = 0;
	uint32_t region;
	uint64_t off;
	int fd = -1;
	tpu_status st;

	pthread_mutex_lock(&probe_lock);
	if (probed)
		goto out;
	st = tpu__cuda_api(&cu, NULL);
	if (!st)
		st = tpu__cuda_enter(0);
	if (!st)
		st = tpu__cuda_check(cu->mem_alloc(&d, (size_t)sysconf(_SC_PAGESIZE)),
				     "cuMemAlloc");
	if (!st) {
		st = tpu__cuda_dmabuf_export((void *)(uintptr_t)d, 1, 0, &fd, &off);
		if (st)
			tpu__log_debug("pipe: no cuda_dmabuf channel: device 0 cannot export dma-bufs (%s)",
				      tpu_status_name(st));
	}
	if (!st) {
		st = tpu_region_import(ep, fd, TPU_ACCESS_READ | TPU_ACCESS_WRITE, &region, NULL);
		if (st)
			tpu__log_debug("pipe: no cuda_dmabuf channel: the module cannot import the driver's dma-bufs (%s)",
				      tpu_status_name(st));
		else
			tpu_region_release(ep, region);
	}
	if (fd >= 0)
		close(fd);
	if (d)
		cu->mem_free(d);
	probe_status = st;
	probed = true;
out:
	st = probe_status;
	pthread_mutex_unlock(&probe_lock);
	return st;
}

static tpu_status dmabuf_descriptor(struct tpu_context *ctx, char *buf, size_t size)
{
	struct tpu_endpoint *ep = tpu__ctx_endpoint(ctx);
	struct tpu_info info;
	char kmod[256];
	tpu_status st = tpu__cuda_api(NULL, NULL);

	if (!st)
		st = tpu__chan_kmod.descriptor(ctx, kmod, sizeof(kmod));
	if (!st)
		st = tpu_endpoint_info(ep, &info);
	if (!st && !(info.features & TPU_FEAT_DMABUF))
		st = -EOPNOTSUPP;
	if (!st)
		st = dmabuf_probe(ep);
	if (st)
		return st;
	snprintf(buf, size, "cuda_dmabuf:%s", kmod);
	return 0;
}

static bool dmabuf_supports(const struct tpu__xport *x, enum tpu_device_type src,
			    enum tpu_device_type dst)
{
	return x->passes_fds && (src == TPU_DEVICE_CUDA || dst == TPU_DEVICE_CUDA);
}

const struct tpu__chan tpu__chan_cuda_dmabuf = {
	.name = "cuda_dmabuf",
	.wire_id = 7,
	.flags = TPU__CHAN_MODULE | TPU__CHAN_BUFFERS | TPU__CHAN_ON_KMOD,
	.descriptor = dmabuf_descriptor,
	.supports = dmabuf_supports,
	.send = dmabuf_send,
	.recv = dmabuf_recv,
};
