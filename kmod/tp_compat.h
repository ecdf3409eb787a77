/* SPDX-License-Identifier: GPL-2.0 */
/*
 * One spelling for kernel APIs that changed between the kernels the module
 * builds for (Debian's 6.1 and 6.12 and what lies between).  Which spelling
 * a kernel has is decided by kmod/conftest.sh, which compiles a probe per
 * API against the target's headers: no version numbers, so distribution
 * backports are handled.  Only this file looks at TP_HAVE_*.
 */
#ifndef _TP_COMPAT_H
#define _TP_COMPAT_H

#include <linux/dma-buf.h>
#include <linux/file.h>
#include <linux/mm.h>
#include <linux/mmzone.h>
#include "tp_conftest.h"

#ifdef TP_HAVE_IO_URING_CMD_H
#include <linux/io_uring/cmd.h>
#else
#include <linux/io_uring.h>
#endif

/* The largest page order alloc_pages() accepts. */
#ifdef TP_HAVE_MAX_PAGE_ORDER
#define TP_MAX_PAGE_ORDER	MAX_PAGE_ORDER
#else
#define TP_MAX_PAGE_ORDER	(MAX_ORDER - 1)
#endif

static inline void tp_vm_flags_set(struct vm_area_struct *vma,
				   vm_flags_t flags)
{
#ifdef TP_HAVE_VM_FLAGS_SET
	vm_flags_set(vma, flags);
#else
	vma->vm_flags |= flags;
#endif
}

static inline struct file *tp_fd_file(struct fd f)
{
#ifdef TP_HAVE_FD_FILE
	return fd_file(f);
#else
	return f.file;
#endif
}

/* A kernel mapping of a dma-buf, taking the reservation lock as needed. */
static inline int tp_dma_buf_vmap(struct dma_buf *db, struct iosys_map *map)
{
#ifdef TP_HAVE_DMA_BUF_VMAP_UNLOCKED
	return dma_buf_vmap_unlocked(db, map);
#else
	return dma_buf_vmap(db, map);
#endif
}

static inline void tp_dma_buf_vunmap(struct dma_buf *db, struct iosys_map *map)
{
#ifdef TP_HAVE_DMA_BUF_VMAP_UNLOCKED
	dma_buf_vunmap_unlocked(db, map);
#else
	dma_buf_vunmap(db, map);
#endif
}

/* The command area of a uring_cmd's SQE. */
static inline const void *tp_uring_cmd_payload(struct io_uring_cmd *cmd)
{
#ifdef TP_HAVE_IO_URING_SQE_CMD
	return io_uring_sqe_cmd(cmd->sqe);
#else
	return cmd->cmd;
#endif
}

/*
 * Where the kernel cancels uring_cmds itself (IO_URING_F_CANCEL), the
 * module marks its waiting commands cancelable; elsewhere a monitor polls
 * for an exiting task or a dying ring (tp_uring.c).
 */
#ifdef TP_HAVE_URING_CMD_CANCELABLE
#define TP_URING_KERNEL_CANCELS	1
#endif

static inline bool tp_uring_kernel_cancels(void)
{
#ifdef TP_URING_KERNEL_CANCELS
	return true;
#else
	return false;
#endif
}

#endif /* _TP_COMPAT_H */
