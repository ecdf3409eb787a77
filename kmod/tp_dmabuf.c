// SPDX-License-Identifier: GPL-2.0
/*
 * dma-buf, both ways: an allocated region exported as a dma-buf (its pages
 * shared, for a NIC, a GPU or another process), and a dma-buf from any
 * exporter imported as a region that slots read from or write to.
 *
 * Export: the dma-buf holds a reference to the region, so the pages and
 * their memory-lock charge live as long as either does.  Attachments get a
 * scatter list of the pages, mapped for their device; the CPU gets them
 * through mmap() and vmap().
 *
 * Export is dynamic (pin and unpin are offered, and nothing ever moves) so
 * that the region's owner can revoke it: TP_IOC_REGION_REVOKE calls
 * move_notify on every dma-buf of the region, which tells dynamic importers
 * to stop using it.
 *
 * Import: the module reaches the bytes through the exporter's kernel
 * mapping (vmap), the same way for every exporter, between
 * begin_cpu_access and end_cpu_access.  The region holds the dma-buf, an
 * attachment for the module's device and the mapping until its last
 * reference goes.  Where the exporter is dynamic the attachment is too,
 * and its move_notify revokes the region for good: it marks the region and
 * waits, through tp_dmabuf_srcu, for the copy chunk that may be running, so
 * no chunk touches the old mapping afterwards.  Readers never block on the
 * revocation, so it cannot deadlock against a copy between two imports.
 */
#include <linux/dma-buf.h>
#include <linux/dma-mapping.h>
#include <linux/dma-resv.h>
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/mm.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/vmalloc.h>
#include <linux/srcu.h>
#include "tp_compat.h"
#include "tp_internal.h"

DEFINE_STATIC_SRCU(tp_dmabuf_srcu);

/**
 * struct tp_export - one dma-buf exported from a region (its priv).
 * @node:	in the region's exports list, under its export_lock.
 * @region:	the region (a reference).
 * @dmabuf:	the dma-buf, which owns this struct.
 */
struct tp_export {
	struct list_head node;
	struct tp_region *region;
	struct dma_buf *dmabuf;
};

static struct sg_table *tp_dmabuf_map(struct dma_buf_attachment *at,
				      enum dma_data_direction dir)
{
	struct tp_export *e = at->dmabuf->priv;
	struct tp_region *r = e->region;
	struct sg_table *sgt;
	int err;

	/* Sized by the region: charged to the task that maps it. */
	sgt = kzalloc(sizeof(*sgt), GFP_KERNEL_ACCOUNT);
	if (!sgt)
		return ERR_PTR(-ENOMEM);
	err = sg_alloc_table_from_pages(sgt, r->pages, r->nr_pages, 0,
					(u64)r->nr_pages << PAGE_SHIFT,
					GFP_KERNEL_ACCOUNT);
	if (err)
		goto free;
	err = dma_map_sgtable(at->dev, sgt, dir, 0);
	if (err)
		goto free_table;
	return sgt;

free_table:
	sg_free_table(sgt);
free:
	kfree(sgt);
	return ERR_PTR(err);
}

static void tp_dmabuf_unmap(struct dma_buf_attachment *at,
			    struct sg_table *sgt, enum dma_data_direction dir)
{
	dma_unmap_sgtable(at->dev, sgt, dir, 0);
	sg_free_table(sgt);
	kfree(sgt);
}

static void tp_dmabuf_release(struct dma_buf *db)
{
	struct tp_export *e = db->priv;
	struct tp_region *r = e->region;

	mutex_lock(&r->export_lock);
	list_del(&e->node);
	mutex_unlock(&r->export_lock);
	kfree(e);
	tp_region_put(r);
}

/* The pages never move, so there is nothing to pin. */
static int tp_dmabuf_pin(struct dma_buf_attachment *at)
{
	return 0;
}

static void tp_dmabuf_unpin(struct dma_buf_attachment *at)
{
}

static int tp_dmabuf_mmap(struct dma_buf *db, struct vm_area_struct *vma)
{
	struct tp_region *r = ((struct tp_export *)db->priv)->region;

	/*
	 * Only shared mappings: a private one would copy a page on its first
	 * write and then silently stop seeing the region.  VM_MAYSHARE without
	 * VM_SHARED is MAP_SHARED of a read-only descriptor, which is fine.
	 */
	if (!(vma->vm_flags & (VM_SHARED | VM_MAYSHARE)))
		return -EINVAL;
	/* dma_buf_mmap_internal() checked the range against the size. */
	kref_get(&r->ref);
	return tp_region_map_vma(r, vma);
}

static int tp_dmabuf_vmap(struct dma_buf *db, struct iosys_map *map)
{
	struct tp_region *r = ((struct tp_export *)db->priv)->region;
	void *vaddr = vm_map_ram(r->pages, r->nr_pages, NUMA_NO_NODE);

	if (!vaddr)
		return -ENOMEM;
	iosys_map_set_vaddr(map, vaddr);
	return 0;
}

static void tp_dmabuf_vunmap(struct dma_buf *db, struct iosys_map *map)
{
	struct tp_region *r = ((struct tp_export *)db->priv)->region;

	vm_unmap_ram(map->vaddr, r->nr_pages);
}

static const struct dma_buf_ops tp_dmabuf_ops = {
	.map_dma_buf = tp_dmabuf_map,
	.unmap_dma_buf = tp_dmabuf_unmap,
	.release = tp_dmabuf_release,
	.pin = tp_dmabuf_pin,
	.unpin = tp_dmabuf_unpin,
	.mmap = tp_dmabuf_mmap,
	.vmap = tp_dmabuf_vmap,
	.vunmap = tp_dmabuf_vunmap,
};

/**
 * tp_region_export() - TP_IOC_REGION_EXPORT: an allocated region as a dma-buf.
 * @ep:		the calling endpoint.
 * @arg:	the command; @fd and @size are set.
 * @uarg:	where the command goes back to user space.
 *
 * The result is copied out before the descriptor is installed, so a fault
 * never leaves the caller with a descriptor it was not told about.
 *
 * Return: 0 or a negative errno as documented in the uapi header.
 */
int tp_region_export(struct tp_endpoint *ep, struct tp_region_export *arg,
		     void __user *uarg)
{
	DEFINE_DMA_BUF_EXPORT_INFO(info);
	struct tp_export *e;
	struct tp_region *r;
	struct dma_buf *db;
	int fd;

	if ((arg->flags & ~TP_REGION_EXPORT_FLAGS_ALL) || arg->reserved)
		return -EINVAL;
	r = tp_region_get(ep, arg->handle);
	if (!r)
		return -ENOENT;
	if (r->kind != TP_REGION_ALLOC || !r->pages) {
		tp_region_put(r);
		return -EINVAL;
	}
	e = kzalloc(sizeof(*e), GFP_KERNEL_ACCOUNT);
	if (!e) {
		tp_region_put(r);
		return -ENOMEM;
	}
	e->region = r;
	info.ops = &tp_dmabuf_ops;
	info.size = (u64)r->nr_pages << PAGE_SHIFT;
	/* The file's mode bounds its mmap() and its imports (tp_region_import). */
	if (arg->flags & TP_REGION_EXPORT_READ_ONLY)
		info.flags = O_RDONLY | O_CLOEXEC;
	else
		info.flags = O_RDWR | O_CLOEXEC;
	info.priv = e;
	db = dma_buf_export(&info);
	if (IS_ERR(db)) {
		kfree(e);
		tp_region_put(r);
		return PTR_ERR(db);
	}
	e->dmabuf = db;
	mutex_lock(&r->export_lock);
	list_add(&e->node, &r->exports);
	mutex_unlock(&r->export_lock);
	/*
	 * From here the dma-buf owns e and our reference to the region:
	 * dma_buf_put() frees both.
	 */
	fd = get_unused_fd_flags(O_CLOEXEC);
	if (fd < 0) {
		dma_buf_put(db);
		return fd;
	}
	arg->fd = fd;
	arg->size = info.size;
	if (copy_to_user(uarg, arg, sizeof(*arg))) {
		put_unused_fd(fd);
		dma_buf_put(db);
		return -EFAULT;
	}
	fd_install(fd, db->file);
	return 0;
}

/*
 * The exporter moved or revoked the buffer (its reservation lock is held):
 * the region is done for.  After synchronize_srcu() no copy chunk that
 * could have missed the mark is still running.
 */
static void tp_import_move_notify(struct dma_buf_attachment *at)
{
	struct tp_region *r = at->importer_priv;

	WRITE_ONCE(r->revoked, true);
	synchronize_srcu(&tp_dmabuf_srcu);
}

/*
 * Grant no access the dma-buf's descriptor does not have, as mmap() and
 * read()/write() would not: a buffer handed out read-only must not be
 * written through the module.  A dma-buf has a single struct file, shared
 * by all its descriptors (dup, SCM_RIGHTS), so its mode is the one the
 * exporter gave the buffer.
 */
static int tp_dmabuf_check_mode(const struct dma_buf *db, u32 access)
{
	fmode_t mode = db->file->f_mode;

	if ((access & TP_ACCESS_READ) && !(mode & FMODE_READ))
		return -EACCES;
	if ((access & TP_ACCESS_WRITE) && !(mode & FMODE_WRITE))
		return -EACCES;
	return 0;
}

static const struct dma_buf_attach_ops tp_import_ops = {
	.allow_peer2peer = false,
	.move_notify = tp_import_move_notify,
};

/**
 * tp_region_import() - TP_IOC_REGION_IMPORT: a dma-buf as a region.
 * @ep:		the calling endpoint.
 * @arg:	the command; @handle and @len are set.
 *
 * Return: 0 or a negative errno as documented in the uapi header.
 */
int tp_region_import(struct tp_endpoint *ep, struct tp_region_import *arg)
{
	struct tp_region *r;
	struct dma_buf *db;
	u32 handle;
	int err;

	if ((arg->flags & ~TP_REGION_IMPORT_FLAGS_ALL) || !arg->access ||
	    (arg->access & ~TP_ACCESS_ALL))
		return -EINVAL;
	db = dma_buf_get(arg->fd);
	if (IS_ERR(db))
		return PTR_ERR(db);
	err = tp_dmabuf_check_mode(db, arg->access);
	if (err)
		goto put_db;
	err = tp_region_check_len(db->size);
	if (err)
		goto put_db;
	err = -ENOMEM;
	r = tp_region_shell(TP_REGION_DMABUF, db->size, 0);
	if (!r)
		goto put_db;
	r->access = arg->access;
	r->dmabuf = db;		/* the region's reference from here on */
	if (dma_buf_is_dynamic(db))
		r->attach = dma_buf_dynamic_attach(db, tp_device(),
						   &tp_import_ops, r);
	else
		r->attach = dma_buf_attach(db, tp_device());
	if (IS_ERR(r->attach)) {
		err = PTR_ERR(r->attach);
		r->attach = NULL;
		goto put_region;
	}
	err = tp_dma_buf_vmap(db, &r->map);
	if (err || r->map.is_iomem) {
		/* No kernel mapping, or I/O memory a memcpy must not touch. */
		if (!err)
			tp_dma_buf_vunmap(db, &r->map);
		iosys_map_clear(&r->map);
		err = -EOPNOTSUPP;
		goto put_region;
	}
	err = tp_region_reserve(ep, &handle);
	if (err)
		goto put_region;
	tp_region_publish(ep, handle, r);
	arg->handle = handle;
	arg->len = db->size;
	return 0;

put_region:
	tp_region_put(r);	/* detaches and drops the dma-buf */
	return err;
put_db:
	dma_buf_put(db);
	return err;
}

/**
 * tp_region_dmabuf_release() - drop what an imported region holds.
 * @r:		a region being destroyed; nothing for other kinds.
 */
void tp_region_dmabuf_release(struct tp_region *r)
{
	if (!r->dmabuf)
		return;
	if (!iosys_map_is_null(&r->map))
		tp_dma_buf_vunmap(r->dmabuf, &r->map);
	if (r->attach)
		dma_buf_detach(r->dmabuf, r->attach);
	dma_buf_put(r->dmabuf);
	r->dmabuf = NULL;
}

/**
 * tp_region_revoke() - TP_IOC_REGION_REVOKE: tell a region's importers to stop.
 * @ep:		the calling endpoint.
 * @arg:	the command.
 *
 * Return: 0 or a negative errno as documented in the uapi header.
 */
int tp_region_revoke(struct tp_endpoint *ep, const struct tp_region_revoke *arg)
{
	struct tp_export *e;
	struct tp_region *r;
	int err = 0;

	if (arg->flags & ~TP_REGION_REVOKE_FLAGS_ALL)
		return -EINVAL;
	r = tp_region_get(ep, arg->handle);
	if (!r)
		return -ENOENT;
	if (r->kind != TP_REGION_ALLOC) {
		err = -EINVAL;
		goto put;
	}
	/* Lock order: export_lock, the dma-buf's reservation, the srcu. */
	mutex_lock(&r->export_lock);
	list_for_each_entry(e, &r->exports, node) {
		dma_resv_lock(e->dmabuf->resv, NULL);
		dma_buf_move_notify(e->dmabuf);
		dma_resv_unlock(e->dmabuf->resv);
	}
	mutex_unlock(&r->export_lock);
put:
	tp_region_put(r);
	return err;
}

/**
 * tp_region_revoked() - whether an imported region's exporter revoked it.
 * @r:		any region.
 *
 * Return: true for a revoked import; read inside tp_dmabuf_read_lock() to
 * be sure no revocation completes while the bytes are touched.
 */
bool tp_region_revoked(const struct tp_region *r)
{
	return READ_ONCE(r->revoked);
}

/**
 * tp_dmabuf_read_lock() - enter a section that touches imported memory.
 *
 * Return: the index for tp_dmabuf_read_unlock().
 */
int tp_dmabuf_read_lock(void)
{
	return srcu_read_lock(&tp_dmabuf_srcu);
}

/**
 * tp_dmabuf_read_unlock() - leave it.
 * @idx:	what tp_dmabuf_read_lock() returned.
 */
void tp_dmabuf_read_unlock(int idx)
{
	srcu_read_unlock(&tp_dmabuf_srcu, idx);
}

/**
 * tp_region_cpu_access() - bracket a CPU copy to or from a region.
 * @r:		the region; only an imported dma-buf needs it.
 * @begin:	true before the copy, false after it.
 *
 * Return: 0, -ENODEV for a revoked import, or the exporter's error from
 * begin_cpu_access.
 */
int tp_region_cpu_access(struct tp_region *r, bool begin)
{
	if (r->kind != TP_REGION_DMABUF)
		return 0;
	if (begin) {
		if (tp_region_revoked(r))
			return -ENODEV;
		return dma_buf_begin_cpu_access(r->dmabuf, DMA_BIDIRECTIONAL);
	}
	return dma_buf_end_cpu_access(r->dmabuf, DMA_BIDIRECTIONAL);
}
