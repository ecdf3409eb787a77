// SPDX-License-Identifier: GPL-2.0
/*
 * Regions: pinned user memory and module-allocated buffers, their handles,
 * RLIMIT_MEMLOCK accounting and mmap.
 *
 * Pinned and allocated pages are charged to the locked_vm of the endpoint
 * opener's user, against RLIMIT_MEMLOCK (see tp_user.c: a per-process charge
 * could be escaped by exec), and shown in mm->pinned_vm of the process that
 * created the region, as "VmPin" in /proc/PID/status.
 *
 * Allocated pages and every array sized by the user are also charged
 * to the memory cgroup of the allocating task (__GFP_ACCOUNT), so that a
 * container's memory.max bounds them and its OOM killer counts them.  The
 * charge stays with the pages, wherever they are donated or exported.
 * These allocations may fail (__GFP_RETRY_MAYFAIL) rather than wake the
 * OOM killer: an ioctl asking for more than is left gets -ENOMEM, and
 * quietly (__GFP_NOWARN), as the size is the caller's.
 */
#include <linux/gfp.h>
#include <linux/mm.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include "tp_compat.h"
#include "tp_internal.h"

/* Bits of an mmap page offset that address pages inside one region. */
#define TP_MMAP_PGOFF_MASK	(BIT(TP_MMAP_REGION_SHIFT - PAGE_SHIFT) - 1)
/* Largest handle whose mmap offset still fits in a positive loff_t. */
#define TP_HANDLE_MAX		((u32)BIT(63 - TP_MMAP_REGION_SHIFT) - 1)
/* pin_user_pages_fast() takes an int count; pin in bounded batches. */
#define TP_PIN_BATCH		BIT(16)
/* 2 MiB chunks: one allocation per huge page worth of memory. */
#define TP_ALLOC_MAX_ORDER	min_t(unsigned int, 9, TP_MAX_PAGE_ORDER)
/* Memory whose size the caller chose: charged, may fail, no warning. */
#define TP_GFP_USER_SIZED	(__GFP_ACCOUNT | __GFP_RETRY_MAYFAIL | __GFP_NOWARN)

/* The array of a region's @n page pointers, charged like the pages. */
static struct page **tp_region_page_array(unsigned long n)
{
	return kvcalloc(n, sizeof(struct page *), GFP_KERNEL | TP_GFP_USER_SIZED);
}

static void tp_region_uncharge(struct tp_region *r)
{
	if (!r->charged_user)
		return;
	tp_user_unlock_pages(r->charged_user, r->locked);
	tp_user_put(r->charged_user);
	atomic64_sub(r->nr_pages, &r->charged_mm->pinned_vm);
	mmdrop(r->charged_mm);
	r->charged_user = NULL;
	r->charged_mm = NULL;
	r->locked = 0;
}

/* Charge a region's pages to @ep's user: 0, or -ENOMEM past RLIMIT_MEMLOCK. */
static int tp_region_charge(struct tp_region *r, struct tp_endpoint *ep)
{
	long locked = tp_user_lock_pages(ep->owner, r->nr_pages);

	if (locked < 0)
		return locked;
	tp_user_get(ep->owner);
	r->charged_user = ep->owner;
	r->locked = locked;
	atomic64_add(r->nr_pages, &ep->mm->pinned_vm);
	mmgrab(ep->mm);
	r->charged_mm = ep->mm;
	return 0;
}

/**
 * tp_region_shell() - a new region without pages and without a charge.
 * @kind:	where its memory will come from.
 * @len:	length in bytes.
 * @first:	byte offset of the start in the first page.
 *
 * Return: the region (one reference) or NULL.
 */
struct tp_region *tp_region_shell(enum tp_region_kind kind, u64 len,
				  unsigned int first)
{
	struct tp_region *r = kzalloc(sizeof(*r), GFP_KERNEL_ACCOUNT);

	if (!r)
		return NULL;
	kref_init(&r->ref);
	mutex_init(&r->export_lock);
	INIT_LIST_HEAD(&r->exports);
	r->kind = kind;
	r->len = len;
	r->first = first;
	r->nr_pages = DIV_ROUND_UP((u64)first + len, PAGE_SIZE);
	if (kind == TP_REGION_ALLOC)
		r->access = TP_ACCESS_READ | TP_ACCESS_WRITE;
	tp_stat_add(TP_STAT_REGIONS, 1);
	return r;
}

static void tp_region_free_pages(struct tp_region *r)
{
	unsigned long i;

	if (!r->pages)
		return;
	if (r->kind == TP_REGION_USER) {
		unpin_user_pages_dirty_lock(r->pages, r->nr_pages,
					    r->access & TP_ACCESS_WRITE);
		tp_stat_add(TP_STAT_PINNED_PAGES, -(s64)r->nr_pages);
	} else {
		/* A page may outlive us while someone else still pins it. */
		for (i = 0; i < r->nr_pages; i++)
			put_page(r->pages[i]);
		tp_stat_add(TP_STAT_ALLOC_PAGES, -(s64)r->nr_pages);
	}
	kvfree(r->pages);
	r->pages = NULL;
}

static void tp_region_destroy(struct kref *ref)
{
	struct tp_region *r = container_of(ref, struct tp_region, ref);

	tp_region_free_pages(r);
	tp_region_dmabuf_release(r);
	tp_region_uncharge(r);
	mutex_destroy(&r->export_lock);
	tp_stat_add(TP_STAT_REGIONS, -1);
	kfree(r);
}

/**
 * tp_region_put() - drop a reference; the last one unpins or frees the pages.
 * @r:	region, may be NULL.
 *
 * Context: process context, no spinlock held (unpinning may sleep).
 */
void tp_region_put(struct tp_region *r)
{
	if (r)
		kref_put(&r->ref, tp_region_destroy);
}

static int tp_region_pin(struct tp_region *r, unsigned long start)
{
	unsigned int gup = FOLL_LONGTERM;
	unsigned long done = 0;
	int n;

	if (r->access & TP_ACCESS_WRITE)
		gup |= FOLL_WRITE;
	while (done < r->nr_pages) {
		n = pin_user_pages_fast(start + done * PAGE_SIZE,
					min(r->nr_pages - done, TP_PIN_BATCH),
					gup, r->pages + done);
		if (n <= 0) {
			if (done)
				unpin_user_pages(r->pages, done);
			return n ? n : -EFAULT;
		}
		done += n;
		if (fatal_signal_pending(current)) {
			unpin_user_pages(r->pages, done);
			return -EINTR;
		}
	}
	return 0;
}

/* Fill an allocated region with zeroed pages, high-order chunks when possible. */
static int tp_region_alloc_pages(struct tp_region *r)
{
	const gfp_t gfp = GFP_HIGHUSER | __GFP_ZERO | TP_GFP_USER_SIZED;
	unsigned long done = 0, i;
	unsigned int order;
	struct page *page;

	r->pages = tp_region_page_array(r->nr_pages);
	if (!r->pages)
		return -ENOMEM;
	while (done < r->nr_pages) {
		order = min_t(unsigned int, TP_ALLOC_MAX_ORDER,
			      ilog2(r->nr_pages - done));
		for (;;) {
			/* Large chunks are a bonus: give up on them early. */
			gfp_t g = order ? (gfp & ~__GFP_RETRY_MAYFAIL) |
					  __GFP_NORETRY : gfp;

			page = alloc_pages(g, order);
			if (page || !order)
				break;
			order--;
		}
		if (!page)
			goto fail;
		/* Independent order-0 pages: mappable and refcounted one by one. */
		split_page(page, order);
		for (i = 0; i < (1UL << order); i++)
			r->pages[done + i] = page + i;
		done += 1UL << order;
		if (fatal_signal_pending(current))
			goto fail;
		cond_resched();
	}
	tp_stat_add(TP_STAT_ALLOC_PAGES, r->nr_pages);
	return 0;
fail:
	for (i = 0; i < done; i++)
		put_page(r->pages[i]);
	kvfree(r->pages);
	r->pages = NULL;
	return fatal_signal_pending(current) ? -EINTR : -ENOMEM;
}

/**
 * tp_region_reserve() - reserve a handle on @ep for a region installed later.
 * @ep:		endpoint.
 * @handle:	out: the reserved handle.
 *
 * Return: 0, -ENOSPC (max_regions reached) or -ENOMEM.
 */
int tp_region_reserve(struct tp_endpoint *ep, u32 *handle)
{
	int err;

	if (atomic_inc_return(&ep->nr_regions) > READ_ONCE(tp_max_regions)) {
		atomic_dec(&ep->nr_regions);
		return -ENOSPC;
	}
	err = xa_alloc_cyclic(&ep->regions, handle, NULL,
			      XA_LIMIT(1, TP_HANDLE_MAX), &ep->next_handle,
			      GFP_KERNEL_ACCOUNT);
	if (err < 0) {
		atomic_dec(&ep->nr_regions);
		return err == -EBUSY ? -ENOSPC : err;
	}
	return 0;
}

/**
 * tp_region_unreserve() - give back a handle from tp_region_reserve().
 * @ep:		endpoint.
 * @handle:	the reserved handle, never published.
 */
void tp_region_unreserve(struct tp_endpoint *ep, u32 handle)
{
	xa_release(&ep->regions, handle);
	atomic_dec(&ep->nr_regions);
}

/**
 * tp_region_publish() - make a region visible under a reserved handle.
 * @ep:		endpoint.
 * @handle:	handle from tp_region_reserve().
 * @r:		region; the handle table takes over the caller's reference.
 */
void tp_region_publish(struct tp_endpoint *ep, u32 handle, struct tp_region *r)
{
	/* The slot exists already, so storing into it allocates nothing. */
	WARN_ON_ONCE(xa_err(xa_store(&ep->regions, handle, r, GFP_KERNEL)));
}

/**
 * tp_region_check_len() - validate a region length against the limit.
 * @len:	length in bytes.
 *
 * Return: 0, -EINVAL (0) or -E2BIG.
 */
int tp_region_check_len(u64 len)
{
	if (!len)
		return -EINVAL;
	if (len > tp_region_bytes_limit())
		return -E2BIG;
	return 0;
}

/**
 * tp_region_register() - TP_IOC_REGION_REGISTER: pin user memory.
 * @ep:		the calling endpoint.
 * @arg:	the command, already copied from user space; @handle is set.
 *
 * Return: 0 or a negative errno as documented in the uapi header.
 */
int tp_region_register(struct tp_endpoint *ep, struct tp_region_register *arg)
{
	unsigned long start;
	struct tp_region *r;
	u32 handle;
	int err;

	if ((arg->flags & ~TP_REGION_REGISTER_FLAGS_ALL) || arg->reserved ||
	    !arg->access || (arg->access & ~TP_ACCESS_ALL))
		return -EINVAL;
	err = tp_region_check_len(arg->len);
	if (err)
		return err;
	if (arg->addr + arg->len < arg->addr)
		return -EINVAL;
	if (!access_ok(u64_to_user_ptr(arg->addr), arg->len))
		return -EFAULT;

	start = arg->addr & PAGE_MASK;
	r = tp_region_shell(TP_REGION_USER, arg->len, offset_in_page(arg->addr));
	if (!r)
		return -ENOMEM;
	r->access = arg->access;
	err = tp_region_reserve(ep, &handle);
	if (err)
		goto put;
	err = tp_region_charge(r, ep);
	if (err)
		goto unreserve;
	r->pages = tp_region_page_array(r->nr_pages);
	if (!r->pages) {
		err = -ENOMEM;
		goto unreserve;
	}
	err = tp_region_pin(r, start);
	if (err) {
		kvfree(r->pages);
		r->pages = NULL;
		goto unreserve;
	}
	tp_stat_add(TP_STAT_PINNED_PAGES, r->nr_pages);
	tp_region_publish(ep, handle, r);
	arg->handle = handle;
	return 0;

unreserve:
	tp_region_unreserve(ep, handle);
put:
	/* Drops the charge, if any; the shell has no pages. */
	tp_region_put(r);
	return err;
}

/**
 * tp_region_new_alloc() - a new, charged, unpublished allocated region.
 * @len:	length in bytes, already validated.
 * @ep:		the endpoint whose user is charged, in its process.
 *
 * Return: the region (one reference) or an ERR_PTR().
 */
struct tp_region *tp_region_new_alloc(u64 len, struct tp_endpoint *ep)
{
	struct tp_region *r = tp_region_shell(TP_REGION_ALLOC, len, 0);
	int err;

	if (!r)
		return ERR_PTR(-ENOMEM);
	err = tp_region_charge(r, ep);
	if (!err)
		err = tp_region_alloc_pages(r);
	if (err) {
		tp_region_put(r);
		return ERR_PTR(err);
	}
	return r;
}

/**
 * tp_region_new_donated() - a new region that takes over a donor's pages.
 * @donor:	a donated allocated region that nobody maps or uses any more.
 * @ep:		the receiving endpoint, in its process; its user is charged.
 *
 * On success the donor keeps no pages and no charge.
 *
 * Return: the region (one reference) or an ERR_PTR().
 */
struct tp_region *tp_region_new_donated(struct tp_region *donor,
					struct tp_endpoint *ep)
{
	struct tp_region *r = tp_region_shell(TP_REGION_ALLOC, donor->len, 0);
	int err;

	if (!r)
		return ERR_PTR(-ENOMEM);
	err = tp_region_charge(r, ep);
	if (err) {
		tp_region_put(r);
		return ERR_PTR(err);
	}
	tp_region_uncharge(donor);
	r->pages = donor->pages;
	donor->pages = NULL;
	return r;
}

/**
 * tp_region_alloc() - TP_IOC_REGION_ALLOC: allocate a buffer to mmap.
 * @ep:		the calling endpoint.
 * @arg:	the command; @handle and @mmap_offset are set.
 *
 * Return: 0 or a negative errno as documented in the uapi header.
 */
int tp_region_alloc(struct tp_endpoint *ep, struct tp_region_alloc *arg)
{
	struct tp_region *r;
	u32 handle;
	int err;

	if ((arg->flags & ~TP_REGION_ALLOC_FLAGS_ALL) || arg->reserved)
		return -EINVAL;
	err = tp_region_check_len(arg->len);
	if (err)
		return err;
	err = tp_region_reserve(ep, &handle);
	if (err)
		return err;
	r = tp_region_new_alloc(arg->len, ep);
	if (IS_ERR(r)) {
		tp_region_unreserve(ep, handle);
		return PTR_ERR(r);
	}
	tp_region_publish(ep, handle, r);
	arg->handle = handle;
	arg->mmap_offset = (u64)handle << TP_MMAP_REGION_SHIFT;
	return 0;
}

/**
 * tp_region_get() - look up a handle of @ep and take a reference.
 * @ep:		endpoint.
 * @handle:	region handle.
 *
 * Return: the region, or NULL when @ep has no such handle.
 */
struct tp_region *tp_region_get(struct tp_endpoint *ep, u32 handle)
{
	struct tp_region *r;

	xa_lock(&ep->regions);
	r = xa_load(&ep->regions, handle);
	if (r)
		kref_get(&r->ref);
	xa_unlock(&ep->regions);
	return r;
}

/**
 * tp_region_detach() - remove a region about to be donated from @ep's table.
 * @ep:		endpoint.
 * @handle:	its handle.
 * @r:		the region the caller looked up under @handle.
 *
 * Donating moves the page array to another region, so nobody else may be
 * using it: the only references must be the table's and the caller's.  A
 * mapping, a pending SEND or a RECV in progress each hold one more.  Every
 * new reference is taken through the table under the xarray lock, so once
 * the entry is gone none can appear.  The table's reference passes to the
 * caller.
 *
 * Return: 0, -ENOENT (released meanwhile) or -EBUSY (in use).
 */
int tp_region_detach(struct tp_endpoint *ep, u32 handle, struct tp_region *r)
{
	int err = 0;

	xa_lock(&ep->regions);
	if (xa_load(&ep->regions, handle) != r)
		err = -ENOENT;
	else if (kref_read(&r->ref) != 2)
		err = -EBUSY;
	else
		__xa_erase(&ep->regions, handle);
	xa_unlock(&ep->regions);
	if (!err)
		atomic_dec(&ep->nr_regions);
	return err;
}

/**
 * tp_region_release() - TP_IOC_REGION_RELEASE: drop a handle.
 * @ep:		the calling endpoint.
 * @handle:	region handle.
 *
 * The region's grants end with the handle (TP_IOC_GRANT).
 *
 * Return: 0 or -ENOENT.
 */
int tp_region_release(struct tp_endpoint *ep, u32 handle)
{
	struct tp_region *r = xa_erase(&ep->regions, handle);

	if (!r)
		return -ENOENT;
	atomic_dec(&ep->nr_regions);
	tp_grant_revoke_region(ep, r);
	tp_region_put(r);
	return 0;
}

/**
 * tp_region_release_all() - drop every handle of a closing endpoint.
 * @ep:		endpoint being released.
 */
void tp_region_release_all(struct tp_endpoint *ep)
{
	struct tp_region *r;
	unsigned long idx;

	xa_for_each(&ep->regions, idx, r) {
		xa_erase(&ep->regions, idx);
		tp_region_put(r);
	}
	xa_destroy(&ep->regions);
	atomic_set(&ep->nr_regions, 0);
}

static void tp_vma_open(struct vm_area_struct *vma)
{
	struct tp_region *r = vma->vm_private_data;

	kref_get(&r->ref);
}

static void tp_vma_close(struct vm_area_struct *vma)
{
	struct tp_region *r = vma->vm_private_data;

	tp_region_put(r);
}

static vm_fault_t tp_vma_fault(struct vm_fault *vmf)
{
	struct tp_region *r = vmf->vma->vm_private_data;
	unsigned long idx = vmf->pgoff & TP_MMAP_PGOFF_MASK;

	/* A mapped region is never donated, so its pages stay. */
	if (idx >= r->nr_pages || !r->pages)
		return VM_FAULT_SIGBUS;
	vmf->page = r->pages[idx];
	get_page(vmf->page);
	return 0;
}

static const struct vm_operations_struct tp_vm_ops = {
	.open = tp_vma_open,
	.close = tp_vma_close,
	.fault = tp_vma_fault,
};

/**
 * tp_region_mmap() - map an allocated region of @ep.
 * @ep:		the endpoint the file belongs to.
 * @vma:	the new mapping; vm_pgoff encodes handle and page offset.
 *
 * Only shared mappings (VM_SHARED, or VM_MAYSHARE alone for MAP_SHARED of
 * a descriptor opened read-only, which mmap() already keeps from writing):
 * a private one would copy a page at its first write and then silently
 * stop following the region.  The region's dma-bufs follow the same rule.
 *
 * Return: 0 or -EINVAL (private mapping, unknown or registered region,
 * range past the region's end).
 */
int tp_region_mmap(struct tp_endpoint *ep, struct vm_area_struct *vma)
{
	unsigned long handle = vma->vm_pgoff >> (TP_MMAP_REGION_SHIFT - PAGE_SHIFT);
	unsigned long first = vma->vm_pgoff & TP_MMAP_PGOFF_MASK;
	struct tp_region *r;
	int err = -EINVAL;

	if (!(vma->vm_flags & (VM_SHARED | VM_MAYSHARE)) ||
	    handle > TP_HANDLE_MAX)
		return -EINVAL;
	xa_lock(&ep->regions);
	r = xa_load(&ep->regions, handle);
	if (r && r->kind == TP_REGION_ALLOC && r->pages &&
	    first < r->nr_pages && vma_pages(vma) <= r->nr_pages - first) {
		kref_get(&r->ref);
		err = 0;
	}
	xa_unlock(&ep->regions);
	if (err)
		return err;
	return tp_region_map_vma(r, vma);
}

/**
 * tp_region_map_vma() - make a new mapping show an allocated region's pages.
 * @r:		the region; the mapping takes over the caller's reference.
 * @vma:	the mapping; page offsets within the region are vm_pgoff's low
 *		bits (TP_MMAP_REGION_SHIFT).
 *
 * Return: 0.
 */
int tp_region_map_vma(struct tp_region *r, struct vm_area_struct *vma)
{
	/* Children would keep pages that may later be donated away. */
	tp_vm_flags_set(vma, VM_DONTCOPY | VM_DONTEXPAND | VM_DONTDUMP);
	vma->vm_ops = &tp_vm_ops;
	vma->vm_private_data = r;
	return 0;
}
