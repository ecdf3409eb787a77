// SPDX-License-Identifier: GPL-2.0
/*
 * Endpoints: the file operations of /dev/tensorpipe.  Each open() is an
 * endpoint bound to the opener's mm; ioctl() dispatches the commands, read()
 * and poll() deliver SEND completions, mmap() maps allocated regions.
 */
#include <linux/fs.h>
#include <linux/poll.h>
#include <linux/sched/mm.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include "tp_compat.h"
#include "tp_internal.h"

static void tp_endpoint_destroy(struct kref *ref)
{
	struct tp_endpoint *ep = container_of(ref, struct tp_endpoint, ref);

	mmdrop(ep->mm);
	tp_user_put(ep->owner);
	mutex_destroy(&ep->domain_lock);
	tp_stat_add(TP_STAT_ENDPOINTS, -1);
	kfree(ep);
}

/**
 * tp_endpoint_put() - drop a reference to an endpoint.
 * @ep:		endpoint.
 */
void tp_endpoint_put(struct tp_endpoint *ep)
{
	kref_put(&ep->ref, tp_endpoint_destroy);
}

static int tp_endpoint_open(struct inode *inode, struct file *file)
{
	struct tp_endpoint *ep;

	if (!current->mm)
		return -EPERM;
	ep = kzalloc(sizeof(*ep), GFP_KERNEL_ACCOUNT);
	if (!ep)
		return -ENOMEM;
	ep->owner = tp_user_get_current();
	if (!ep->owner) {
		kfree(ep);
		return -ENOMEM;
	}
	kref_init(&ep->ref);
	ep->mm = current->mm;
	mmgrab(ep->mm);
	xa_init_flags(&ep->regions, XA_FLAGS_ALLOC);
	atomic_set(&ep->nr_regions, 0);
	mutex_init(&ep->domain_lock);
	spin_lock_init(&ep->lock);
	INIT_LIST_HEAD(&ep->done);
	INIT_LIST_HEAD(&ep->sends);
	INIT_LIST_HEAD(&ep->urecvs);
	tp_uring_endpoint_init(ep);
	init_waitqueue_head(&ep->wq);
	file->private_data = ep;
	tp_stat_add(TP_STAT_ENDPOINTS, 1);
	return 0;
}

static int tp_endpoint_release(struct inode *inode, struct file *file)
{
	struct tp_endpoint *ep = file->private_data;
	struct tp_slot *slot, *tmp;
	LIST_HEAD(unread);

	/* io_uring commands hold the file: none is pending any more. */
	tp_uring_endpoint_release(ep);
	tp_slot_withdraw_all(ep);
	spin_lock(&ep->lock);
	ep->dead = true;
	list_splice_init(&ep->done, &unread);
	spin_unlock(&ep->lock);
	list_for_each_entry_safe(slot, tmp, &unread, ep_node) {
		list_del(&slot->ep_node);
		tp_slot_free(slot);
	}
	tp_region_release_all(ep);
	tp_domain_put(ep->domain);
	tp_endpoint_put(ep);
	return 0;
}

/* Move up to @max completions from @ep->done to @out; return how many. */
static size_t tp_completions_take(struct tp_endpoint *ep, struct list_head *out,
				  size_t max)
{
	struct tp_slot *slot, *tmp;
	size_t n = 0;

	spin_lock(&ep->lock);
	list_for_each_entry_safe(slot, tmp, &ep->done, ep_node) {
		if (n == max)
			break;
		list_move_tail(&slot->ep_node, out);
		n++;
	}
	spin_unlock(&ep->lock);
	return n;
}

static ssize_t tp_endpoint_read(struct file *file, char __user *buf,
				size_t count, loff_t *ppos)
{
	const size_t rec = sizeof(struct tp_completion);
	struct tp_endpoint *ep = file->private_data;
	struct tp_slot *slot, *tmp;
	LIST_HEAD(batch);
	size_t n, copied = 0;
	int err;

	if (current->mm != ep->mm)
		return -EPERM;
	if (count < rec)
		return -EINVAL;
	for (;;) {
		n = tp_completions_take(ep, &batch, count / rec);
		if (n)
			break;
		if (file->f_flags & O_NONBLOCK)
			return -EAGAIN;
		err = wait_event_interruptible(ep->wq, !list_empty(&ep->done));
		if (err)
			return err;
	}
	list_for_each_entry_safe(slot, tmp, &batch, ep_node) {
		if (copy_to_user(buf + copied, &slot->cqe, rec))
			break;
		list_del(&slot->ep_node);
		copied += rec;
		tp_slot_free(slot);
	}
	n = copied / rec;
	spin_lock(&ep->lock);
	ep->outstanding -= n;
	/* Records that could not be copied stay first in line. */
	list_splice(&batch, &ep->done);
	spin_unlock(&ep->lock);
	return copied ? copied : -EFAULT;
}

static __poll_t tp_endpoint_poll(struct file *file, poll_table *wait)
{
	struct tp_endpoint *ep = file->private_data;
	__poll_t mask = 0;

	poll_wait(file, &ep->wq, wait);
	spin_lock(&ep->lock);
	if (!list_empty(&ep->done))
		mask = EPOLLIN | EPOLLRDNORM;
	spin_unlock(&ep->lock);
	return mask;
}

static int tp_endpoint_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct tp_endpoint *ep = file->private_data;

	if (current->mm != ep->mm)
		return -EPERM;
	return tp_region_mmap(ep, vma);
}

static int tp_get_info(struct tp_info *info)
{
	if (info->flags || memchr_inv(info->reserved, 0, sizeof(info->reserved)))
		return -EINVAL;
	info->abi_version = TP_ABI_VERSION;
	info->features = TP_FEAT_REGION_ALLOC | TP_FEAT_DONATE |
			 TP_FEAT_RECV_TIMEOUT | TP_FEAT_LARGE_ALLOC |
			 TP_FEAT_URING_CMD;
	if (IS_ENABLED(TP_URING_KERNEL_CANCELS))
		info->features |= TP_FEAT_URING_KERNEL_CANCEL;
	info->max_key_len = tp_key_len_limit();
	info->max_regions = READ_ONCE(tp_max_regions);
	info->max_slots = READ_ONCE(tp_max_slots);
	info->page_size = PAGE_SIZE;
	info->max_region_bytes = tp_region_bytes_limit();
	return 0;
}

/* The largest command argument; every command's struct fits in it. */
union tp_ioctl_arg {
	struct tp_info info;
	struct tp_region_register reg;
	struct tp_region_alloc alloc;
	struct tp_region_release rel;
	struct tp_domain_create create;
	struct tp_domain_attach attach;
	struct tp_send send;
	struct tp_recv recv;
	struct tp_cancel cancel;
	struct tp_abort abort;
};

static long tp_dispatch(struct tp_endpoint *ep, unsigned int cmd,
			union tp_ioctl_arg *a, void __user *up)
{
	switch (cmd) {
	case TP_IOC_GET_INFO:
		return tp_get_info(&a->info);
	case TP_IOC_REGION_REGISTER:
		return tp_region_register(ep, &a->reg);
	case TP_IOC_REGION_ALLOC:
		return tp_region_alloc(ep, &a->alloc);
	case TP_IOC_REGION_RELEASE:
		if (a->rel.flags)
			return -EINVAL;
		return tp_region_release(ep, a->rel.handle);
	case TP_IOC_DOMAIN_CREATE:
		return tp_domain_create(&a->create, up);
	case TP_IOC_DOMAIN_ATTACH:
		return tp_domain_attach(ep, &a->attach);
	case TP_IOC_SEND:
		return tp_send(ep, &a->send, NULL);
	case TP_IOC_RECV:
		return tp_recv(ep, &a->recv);
	case TP_IOC_CANCEL:
		return tp_cancel(ep, &a->cancel);
	case TP_IOC_ABORT:
		return tp_domain_abort(ep, &a->abort);
	}
	return -ENOTTY;
}

static bool tp_cmd_known(unsigned int cmd)
{
	switch (cmd) {
	case TP_IOC_GET_INFO:
	case TP_IOC_REGION_REGISTER:
	case TP_IOC_REGION_ALLOC:
	case TP_IOC_REGION_RELEASE:
	case TP_IOC_DOMAIN_CREATE:
	case TP_IOC_DOMAIN_ATTACH:
	case TP_IOC_SEND:
	case TP_IOC_RECV:
	case TP_IOC_CANCEL:
	case TP_IOC_ABORT:
		return true;
	}
	return false;
}

static long tp_endpoint_ioctl(struct file *file, unsigned int cmd,
			      unsigned long uarg)
{
	struct tp_endpoint *ep = file->private_data;
	void __user *up = (void __user *)uarg;
	unsigned int size = _IOC_SIZE(cmd);
	union tp_ioctl_arg a;
	long ret;

	if (!tp_cmd_known(cmd))
		return -ENOTTY;
	if (current->mm != ep->mm)
		return -EPERM;
	if (copy_from_user(&a, up, size))
		return -EFAULT;
	ret = tp_dispatch(ep, cmd, &a, up);
	/*
	 * -EMSGSIZE reports the tensor's length back through the struct.
	 * DOMAIN_CREATE copied its result out itself, before installing the fd.
	 */
	if ((_IOC_DIR(cmd) & _IOC_READ) && cmd != TP_IOC_DOMAIN_CREATE &&
	    (!ret || ret == -EMSGSIZE) && copy_to_user(up, &a, size))
		ret = -EFAULT;
	if (ret < 0)
		tp_stat_error(ret);
	return ret;
}

const struct file_operations tp_endpoint_fops = {
	.owner = THIS_MODULE,
	.open = tp_endpoint_open,
	.release = tp_endpoint_release,
	.read = tp_endpoint_read,
	.poll = tp_endpoint_poll,
	.mmap = tp_endpoint_mmap,
	.unlocked_ioctl = tp_endpoint_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.uring_cmd = tp_uring_cmd,
	.llseek = noop_llseek,
};
