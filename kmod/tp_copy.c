// SPDX-License-Identifier: GPL-2.0
/*
 * The copy engine: one memcpy from the producer's pinned pages into the
 * consumer's pages, both already resolved to struct page, so no page-table
 * walk or fault happens while copying.
 *
 * Without highmem every page has a permanent kernel address and physically
 * consecutive pages are virtually consecutive too, so runs of consecutive
 * pages (common: allocated regions come in 2 MiB chunks, and THP-backed
 * user memory) are copied with one memcpy each.  An imported dma-buf is
 * reached through the one kernel mapping its exporter gave.
 */
#include <linux/highmem.h>
#include <linux/mm.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/sizes.h>
#include "tp_internal.h"

/* Work between two checks for rescheduling and fatal signals. */
#define TP_COPY_CHUNK	SZ_1M

/* Bytes from (@idx, @pofs) that are contiguous in the kernel's mapping. */
static size_t tp_contig_bytes(const struct tp_region *r, unsigned long idx,
			      unsigned int pofs, size_t max)
{
	size_t bytes = PAGE_SIZE - pofs;
	unsigned long pfn;

	if (IS_ENABLED(CONFIG_HIGHMEM))
		return min(bytes, max);
	pfn = page_to_pfn(r->pages[idx]);
	while (bytes < max && idx + 1 < r->nr_pages &&
	       page_to_pfn(r->pages[idx + 1]) == pfn + 1) {
		idx++;
		pfn++;
		bytes += PAGE_SIZE;
	}
	return min(bytes, max);
}

/*
 * Kernel address of byte @off of @r, and in *@n (at most its value on
 * entry) how many bytes from there are contiguous.  An imported dma-buf is
 * one mapping; pages are mapped one at a time only with highmem.
 */
static void *tp_span_map(const struct tp_region *r, u64 off, size_t *n)
{
	unsigned long idx;
	unsigned int pofs;

	if (r->kind == TP_REGION_DMABUF)
		return r->map.vaddr + off;
	off += r->first;
	idx = off >> PAGE_SHIFT;
	pofs = offset_in_page(off);
	*n = tp_contig_bytes(r, idx, pofs, *n);
	if (IS_ENABLED(CONFIG_HIGHMEM))
		return kmap_local_page(r->pages[idx]) + pofs;
	return page_address(r->pages[idx]) + pofs;
}

static void tp_span_unmap(const struct tp_region *r, void *addr, bool written)
{
	if (r->kind == TP_REGION_DMABUF || !IS_ENABLED(CONFIG_HIGHMEM))
		return;
	if (written)
		flush_dcache_page(kmap_to_page(addr));
	kunmap_local(addr);
}

static int tp_copy_spans(struct tp_region *dst, u64 dst_off,
			 struct tp_region *src, u64 src_off, u64 len)
{
	u64 done = 0;

	while (done < len) {
		size_t n = min_t(u64, len - done, TP_COPY_CHUNK);
		void *s, *d;
		int idx;

		/* A revocation waits for this chunk, then no chunk starts. */
		idx = tp_dmabuf_read_lock();
		if (tp_region_revoked(src) || tp_region_revoked(dst)) {
			tp_dmabuf_read_unlock(idx);
			return -ENODEV;
		}
		s = tp_span_map(src, src_off + done, &n);
		d = tp_span_map(dst, dst_off + done, &n);
		memcpy(d, s, n);
		tp_span_unmap(dst, d, true);
		tp_span_unmap(src, s, false);
		tp_dmabuf_read_unlock(idx);
		done += n;
		if (done < len && (done & (TP_COPY_CHUNK - 1)) < n) {
			if (fatal_signal_pending(current))
				return -EINTR;
			cond_resched();
		}
	}
	return 0;
}

/**
 * tp_copy_pages() - copy bytes between two regions.
 * @dst:	destination region (holds pages or a dma-buf mapping).
 * @dst_off:	byte offset in @dst; @dst_off + @len is within @dst.
 * @src:	source region (holds pages or a dma-buf mapping).
 * @src_off:	byte offset in @src; @src_off + @len is within @src.
 * @len:	bytes to copy.
 *
 * An imported dma-buf is read or written between the exporter's
 * begin_cpu_access and end_cpu_access.
 *
 * Context: process context; may sleep between chunks.
 * Return: 0, -EINTR when a fatal signal stopped the copy part way, -ENODEV
 * when an imported region was revoked, or the exporter's error from
 * begin_cpu_access.
 */
int tp_copy_pages(struct tp_region *dst, u64 dst_off,
		  struct tp_region *src, u64 src_off, u64 len)
{
	int err;

	err = tp_region_cpu_access(src, true);
	if (err)
		return err;
	err = tp_region_cpu_access(dst, true);
	if (!err) {
		err = tp_copy_spans(dst, dst_off, src, src_off, len);
		tp_region_cpu_access(dst, false);
	}
	tp_region_cpu_access(src, false);
	return err;
}
