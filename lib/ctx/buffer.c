// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Buffers: memory a tensor can live in and move without a copy.  With the
 * module, a region allocated on the context's endpoint, which a kmod
 * rendezvous can donate (its pages change owner); without, a memfd mapped
 * shared, so that the fallback's peers can read or map it.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ctx.h"

static atomic_uint_fast64_t next_buffer_id = 1;

static struct tpu_buffer *buffer_new(enum tpu__buffer_kind kind, size_t len)
{
	struct tpu_buffer *buf = calloc(1, sizeof(*buf));

	if (!buf)
		return NULL;
	buf->magic = TPU__MAGIC_BUFFER;
	buf->fork_gen = tpu__fork_gen();
	buf->kind = kind;
	buf->len = len;
	buf->memfd = -1;
	buf->id = atomic_fetch_add(&next_buffer_id, 1);
	return buf;
}

static tpu_status alloc_kmod(struct tpu_context *ctx, struct tpu__ep_ref *ref, size_t len,
			     struct tpu_buffer **out)
{
	struct tpu_buffer *buf = buffer_new(TPU__BUF_KMOD, len);
	tpu_status st;

	(void)ctx;
	if (!buf)
		return -ENOMEM;
	st = tpu_region_alloc_mapped(tpu__ep_ref_get(ref), len, 0, &buf->region, &buf->data);
	if (st) {
		free(buf);
		return st;
	}
	buf->ep = ref;
	*out = buf;
	return 0;
}

static tpu_status alloc_memfd(size_t len, struct tpu_buffer **out)
{
	struct tpu_buffer *buf = buffer_new(TPU__BUF_MEMFD, len);
	tpu_status st;

	if (!buf)
		return -ENOMEM;
	buf->memfd = memfd_create("tpu_buffer", MFD_CLOEXEC);
	if (buf->memfd < 0 || ftruncate(buf->memfd, (off_t)len) < 0)
		goto fail;
	buf->data = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, buf->memfd, 0);
	if (buf->data == MAP_FAILED)
		goto fail;
	*out = buf;
	return 0;
fail:
	st = tpu__errno();
	if (buf->memfd >= 0)
		close(buf->memfd);
	free(buf);
	return st;
}

TPU_API tpu_status tpu_buffer_alloc(struct tpu_context *ctx, size_t len, struct tpu_buffer **out)
{
	struct tpu__ep_ref *ref;
	tpu_status st;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (ctx && tpu__ctx_check(ctx))
		return tpu__ctx_check(ctx);
	if (!ctx || len == 0 || len > (size_t)INT64_MAX)
		return -EINVAL;
	ref = tpu__ctx_endpoint_ref(ctx);
	if (!ref)
		return alloc_memfd(len, out);
	st = alloc_kmod(ctx, ref, len, out);
	if (st)
		tpu__ep_ref_put(ref);
	return st;
}

tpu_status tpu__buffer_wrap_kmod(struct tpu__ep_ref *ep, uint32_t region, void *data, size_t len,
				 struct tpu_buffer **out)
{
	struct tpu_buffer *buf = buffer_new(TPU__BUF_KMOD, len);

	if (!buf)
		return -ENOMEM;
	buf->ep = ep;
	buf->region = region;
	buf->data = data;
	*out = buf;
	return 0;
}

tpu_status tpu__buffer_import_dmabuf(struct tpu__ep_ref *ep, int fd, unsigned int access,
				     void *data, struct tpu_buffer **out)
{
	struct tpu_buffer *buf = buffer_new(TPU__BUF_DMABUF, 0);
	uint64_t len = 0;
	tpu_status st;

	if (!buf)
		return -ENOMEM;
	st = tpu_region_import(tpu__ep_ref_get(ep), fd, access, &buf->region, &len);
	if (st) {
		free(buf);
		return st;
	}
	tpu__ep_ref_hold(ep);
	buf->ep = ep;
	buf->data = data;
	buf->len = (size_t)len;
	*out = buf;
	return 0;
}

tpu_status tpu__buffer_alloc_heap(size_t len, struct tpu_buffer **out)
{
	struct tpu_buffer *buf = buffer_new(TPU__BUF_HEAP, len);

	if (!buf)
		return -ENOMEM;
	/* malloc(0) may return NULL; a zero-length tensor still gets an address. */
	buf->data = malloc(len ? len : 1);
	if (!buf->data) {
		free(buf);
		return -ENOMEM;
	}
	*out = buf;
	return 0;
}

/*
 * A buffer freed already (TPU_E_DESTROYED) or made before this process was
 * forked from its maker (TPU_E_FORKED: a memfd or module region is shared
 * with the parent, whose tensor it may be).
 */
static tpu_status buffer_check(const struct tpu_buffer *buf)
{
	tpu_status st = tpu__magic_check(buf, buf ? &buf->magic : NULL, TPU__MAGIC_BUFFER);

	if (!st && tpu__forked_since(buf->fork_gen))
		st = TPU_E_FORKED;
	return st;
}

TPU_API void *tpu_buffer_data(const struct tpu_buffer *buf)
{
	return buffer_check(buf) ? NULL : buf->data;
}

TPU_API size_t tpu_buffer_size(const struct tpu_buffer *buf)
{
	return buffer_check(buf) ? 0 : buf->len;
}

void tpu__buffer_unmap_for_donate(struct tpu_buffer *buf)
{
	munmap(buf->data, buf->len);
	tpu__ep_ref_put(buf->ep);
	tpu__quarantine(buf, &buf->magic);
}

TPU_API void tpu_buffer_free(struct tpu_buffer *buf)
{
	tpu_status st;

	if (!buf)
		return;
	st = buffer_check(buf);
	if (st == TPU_E_FORKED) {
		/*
		 * The child's copy: its mapping and descriptor go, the module
		 * region (the parent's, on a shared endpoint) stays.
		 */
		if (buf->kind != TPU__BUF_HEAP && buf->kind != TPU__BUF_DMABUF)
			munmap(buf->data, buf->len);
		if (buf->kind == TPU__BUF_MEMFD)
			close(buf->memfd);
		if (buf->kind == TPU__BUF_HEAP)
			free(buf->data);
		tpu__quarantine(buf, &buf->magic);
		return;
	}
	if (st) {
		tpu__log_debug("tpu_buffer_free(%p): %s; ignored", (void *)buf, tpu_strerror(st));
		return;
	}
	switch (buf->kind) {
	case TPU__BUF_KMOD:
		munmap(buf->data, buf->len);
		tpu_region_release(tpu__ep_ref_get(buf->ep), buf->region);
		tpu__ep_ref_put(buf->ep);
		break;
	case TPU__BUF_MEMFD:
		munmap(buf->data, buf->len);
		close(buf->memfd);
		break;
	case TPU__BUF_HEAP:
		free(buf->data);
		break;
	case TPU__BUF_DMABUF:
		tpu_region_release(tpu__ep_ref_get(buf->ep), buf->region);
		tpu__ep_ref_put(buf->ep);
		break;
	}
	tpu__quarantine(buf, &buf->magic);
}
