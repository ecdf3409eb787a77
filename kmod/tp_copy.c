// SPDX-License-Identifier: GPL-2.0
/*
 * The copy engine: one memcpy from the producer's pinned pages into the
 * consumer's pages, both already resolved to struct page, so no page-table
 * walk or fault happens while copying.
 *
 * Without highmem every page has a permanent kernel address and physically
 * consecutive pages are virtually consecutive too, so runs of consecutive
 * pages (common: allocated regions come in 2 MiB chunks, and THP-backed
 * user memory) are copied with one memcpy each.
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

static void tp_copy_run(struct page *dpage, unsigned int dofs,
			struct page *spage, unsigned int sofs, size_t n)
{
	void *d, *s;

	if (!IS_ENABLED(CONFIG_HIGHMEM)) {
		memcpy(page_address(dpage) + dofs, page_address(spage) + sofs, n);
		return;
	}
	d = kmap_local_page(dpage);
	s = kmap_local_page(spage);
	memcpy(d + dofs, s + sofs, n);
	kunmap_local(s);
	kunmap_local(d);
	flush_dcache_page(dpage);
}

/**
 * tp_copy_pages() - copy bytes between two regions.
 * @dst:	destination region (holds pages).
 * @dst_off:	byte offset in @dst; @dst_off + @len is within @dst.
 * @src:	source region (holds pages).
 * @src_off:	byte offset in @src; @src_off + @len is within @src.
 * @len:	bytes to copy.
 *
 * Context: process context; may sleep between chunks.
 * Return: 0, or -EINTR when a fatal signal stopped the copy part way.
 */
int tp_copy_pages(struct tp_region *dst, u64 dst_off,
		  struct tp_region *src, u64 src_off, u64 len)
{
	u64 done = 0;

	while (done < len) {
		u64 s = src->first + src_off + done;
		u64 d = dst->first + dst_off + done;
		unsigned long si = s >> PAGE_SHIFT, di = d >> PAGE_SHIFT;
		unsigned int so = offset_in_page(s), dof = offset_in_page(d);
		size_t n = min_t(u64, len - done, TP_COPY_CHUNK);

		n = tp_contig_bytes(src, si, so, n);
		n = tp_contig_bytes(dst, di, dof, n);
		tp_copy_run(dst->pages[di], dof, src->pages[si], so, n);
		done += n;
		if (done < len && (done & (TP_COPY_CHUNK - 1)) < n) {
			if (fatal_signal_pending(current))
				return -EINTR;
			cond_resched();
		}
	}
	return 0;
}
