// SPDX-License-Identifier: GPL-2.0
/*
 * Endpoints: the file operations of /dev/tensorpipe.  Each open() is an
 * endpoint bound to the opener's mm; ioctl() dispatches the commands, read()
 * and poll() deliver SEND completions, mmap() maps allocated regions.
 */
#include <linux/fs.h>
#include <linux/nospec.h>
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
	put_pid(ep->tgid);
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
	ep->tgid = get_pid(task_tgid(current));
	xa_init_flags(&ep->regions, XA_FLAGS_ALLOC);
	atomic_set(&ep->nr_regions, 0);
	mutex_init(&ep->domain_lock);
	spin_lock_init(&ep->lock);
	INIT_LIST_HEAD(&ep->done);
	INIT_LIST_HEAD(&ep->sends);
	INIT_LIST_HEAD(&ep->urecvs);
	tp_uring_endpoint_init(ep);
	tp_grant_endpoint_init(ep);
	init_waitqueue_head(&ep->wq);
	file->private_data = ep;
	tp_stat_add(TP_STAT_ENDPOINTS, 1);
	return 0;
}

/*
 * Called at every close() of a descriptor of the endpoint.  The one closed
 * by its opener's exit (the fd table of its last thread) reports a member's
 * death; a close() of a live process, an execve() and a forked child's exit
 * are no death of the member.
 */
static int tp_endpoint_flush(struct file *file, fl_owner_t id)
{
	struct tp_endpoint *ep = file->private_data;

	if ((current->flags & PF_EXITING) && task_tgid(current) == ep->tgid)
		tp_domain_member_died(ep);
	return 0;
}

static int tp_endpoint_release(struct inode *inode, struct file *file)
{
	struct tp_endpoint *ep = file->private_data;
	struct tp_slot *slot, *tmp;
	LIST_HEAD(unread);

	/* io_uring commands hold the file: none is pending any more. */
	tp_uring_endpoint_release(ep);
	/* Before the regions go: no copy may reach them afterwards. */
	tp_grant_revoke_all(ep);
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
	if ((info->flags & ~TP_INFO_FLAGS_ALL) ||
	    memchr_inv(info->reserved, 0, sizeof(info->reserved)))
		return -EINVAL;
	info->abi_version = TP_ABI_VERSION;
	info->features = TP_FEAT_REGION_ALLOC | TP_FEAT_DONATE |
			 TP_FEAT_RECV_TIMEOUT | TP_FEAT_LARGE_ALLOC |
			 TP_FEAT_URING_CMD | TP_FEAT_DMABUF |
			 TP_FEAT_MEMBER_DEATH | TP_FEAT_GRANT;
	if (tp_uring_kernel_cancels())
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
	struct tp_region_export exp;
	struct tp_region_import imp;
	struct tp_region_revoke revoke;
	struct tp_endpoint_info epinfo;
	struct tp_grant grant;
	struct tp_grant_revoke grevoke;
	struct tp_copy copy;
};

/*
 * One handler per command, all with one signature so that one table serves
 * both the lookup of a command and its dispatch.  @up is where the struct
 * goes back to user space, for the one command that copies it out itself.
 */
typedef long (*tp_cmd_fn)(struct tp_endpoint *ep, union tp_ioctl_arg *a,
			  void __user *up);

static long tp_cmd_get_info(struct tp_endpoint *ep, union tp_ioctl_arg *a,
			    void __user *up)
{
	return tp_get_info(&a->info);
}

static long tp_cmd_register(struct tp_endpoint *ep, union tp_ioctl_arg *a,
			    void __user *up)
{
	return tp_region_register(ep, &a->reg);
}

static long tp_cmd_alloc(struct tp_endpoint *ep, union tp_ioctl_arg *a,
			 void __user *up)
{
	return tp_region_alloc(ep, &a->alloc);
}

static long tp_cmd_release(struct tp_endpoint *ep, union tp_ioctl_arg *a,
			   void __user *up)
{
	if (a->rel.flags & ~TP_REGION_RELEASE_FLAGS_ALL)
		return -EINVAL;
	return tp_region_release(ep, a->rel.handle);
}

static long tp_cmd_domain_create(struct tp_endpoint *ep, union tp_ioctl_arg *a,
				 void __user *up)
{
	return tp_domain_create(&a->create, up);
}

static long tp_cmd_domain_attach(struct tp_endpoint *ep, union tp_ioctl_arg *a,
				 void __user *up)
{
	return tp_domain_attach(ep, &a->attach);
}

static long tp_cmd_send(struct tp_endpoint *ep, union tp_ioctl_arg *a,
			void __user *up)
{
	return tp_send(ep, &a->send, NULL);
}

static long tp_cmd_recv(struct tp_endpoint *ep, union tp_ioctl_arg *a,
			void __user *up)
{
	return tp_recv(ep, &a->recv);
}

static long tp_cmd_cancel(struct tp_endpoint *ep, union tp_ioctl_arg *a,
			  void __user *up)
{
	return tp_cancel(ep, &a->cancel);
}

static long tp_cmd_abort(struct tp_endpoint *ep, union tp_ioctl_arg *a,
			 void __user *up)
{
	return tp_domain_abort(ep, &a->abort);
}

static long tp_cmd_export(struct tp_endpoint *ep, union tp_ioctl_arg *a,
			  void __user *up)
{
	return tp_region_export(ep, &a->exp, up);
}

static long tp_cmd_import(struct tp_endpoint *ep, union tp_ioctl_arg *a,
			  void __user *up)
{
	return tp_region_import(ep, &a->imp);
}

static long tp_cmd_revoke(struct tp_endpoint *ep, union tp_ioctl_arg *a,
			  void __user *up)
{
	return tp_region_revoke(ep, &a->revoke);
}

static long tp_cmd_endpoint_info(struct tp_endpoint *ep, union tp_ioctl_arg *a,
				 void __user *up)
{
	return tp_endpoint_info(ep, &a->epinfo);
}

static long tp_cmd_grant(struct tp_endpoint *ep, union tp_ioctl_arg *a,
			 void __user *up)
{
	return tp_grant_create(ep, &a->grant);
}

static long tp_cmd_grant_revoke(struct tp_endpoint *ep, union tp_ioctl_arg *a,
				void __user *up)
{
	return tp_grant_revoke(ep, &a->grevoke);
}

static long tp_cmd_copy(struct tp_endpoint *ep, union tp_ioctl_arg *a,
			void __user *up)
{
	return tp_grant_copy(ep, &a->copy);
}

/*
 * Indexed by _IOC_NR(); an entry is a command only if its number matches.
 * @installs_fd: the handler copies its result out before installing a new
 * descriptor, so that a fault cannot leave one the caller was not told of.
 */
static const struct tp_cmd {
	unsigned int cmd;
	tp_cmd_fn fn;
	bool installs_fd;
} tp_cmds[] = {
	[_IOC_NR(TP_IOC_GET_INFO)] = { TP_IOC_GET_INFO, tp_cmd_get_info },
	[_IOC_NR(TP_IOC_REGION_REGISTER)] = { TP_IOC_REGION_REGISTER,
					      tp_cmd_register },
	[_IOC_NR(TP_IOC_REGION_ALLOC)] = { TP_IOC_REGION_ALLOC, tp_cmd_alloc },
	[_IOC_NR(TP_IOC_REGION_RELEASE)] = { TP_IOC_REGION_RELEASE,
					     tp_cmd_release },
	[_IOC_NR(TP_IOC_DOMAIN_CREATE)] = { TP_IOC_DOMAIN_CREATE,
					    tp_cmd_domain_create, true },
	[_IOC_NR(TP_IOC_DOMAIN_ATTACH)] = { TP_IOC_DOMAIN_ATTACH,
					    tp_cmd_domain_attach },
	[_IOC_NR(TP_IOC_SEND)] = { TP_IOC_SEND, tp_cmd_send },
	[_IOC_NR(TP_IOC_RECV)] = { TP_IOC_RECV, tp_cmd_recv },
	[_IOC_NR(TP_IOC_CANCEL)] = { TP_IOC_CANCEL, tp_cmd_cancel },
	[_IOC_NR(TP_IOC_ABORT)] = { TP_IOC_ABORT, tp_cmd_abort },
	[_IOC_NR(TP_IOC_REGION_EXPORT)] = { TP_IOC_REGION_EXPORT,
					    tp_cmd_export, true },
	[_IOC_NR(TP_IOC_REGION_IMPORT)] = { TP_IOC_REGION_IMPORT,
					    tp_cmd_import },
	[_IOC_NR(TP_IOC_REGION_REVOKE)] = { TP_IOC_REGION_REVOKE,
					    tp_cmd_revoke },
	[_IOC_NR(TP_IOC_ENDPOINT_INFO)] = { TP_IOC_ENDPOINT_INFO,
					    tp_cmd_endpoint_info },
	[_IOC_NR(TP_IOC_GRANT)] = { TP_IOC_GRANT, tp_cmd_grant },
	[_IOC_NR(TP_IOC_GRANT_REVOKE)] = { TP_IOC_GRANT_REVOKE,
					   tp_cmd_grant_revoke },
	[_IOC_NR(TP_IOC_COPY)] = { TP_IOC_COPY, tp_cmd_copy },
};

/* The table entry of @cmd, or NULL when it is not one of ours. */
static const struct tp_cmd *tp_cmd_lookup(unsigned int cmd)
{
	unsigned int nr = _IOC_NR(cmd);

	if (_IOC_TYPE(cmd) != TP_IOC_MAGIC || nr >= ARRAY_SIZE(tp_cmds))
		return NULL;
	nr = array_index_nospec(nr, ARRAY_SIZE(tp_cmds));
	if (tp_cmds[nr].cmd != cmd)
		return NULL;
	return &tp_cmds[nr];
}

static long tp_endpoint_ioctl(struct file *file, unsigned int cmd,
			      unsigned long uarg)
{
	struct tp_endpoint *ep = file->private_data;
	void __user *up = (void __user *)uarg;
	unsigned int size = _IOC_SIZE(cmd);
	const struct tp_cmd *c = tp_cmd_lookup(cmd);
	union tp_ioctl_arg a;
	long ret;

	if (!c)
		return -ENOTTY;
	if (current->mm != ep->mm)
		return -EPERM;
	if (copy_from_user(&a, up, size))
		return -EFAULT;
	ret = c->fn(ep, &a, up);
	/* -EMSGSIZE reports the tensor's length back through the struct. */
	if ((_IOC_DIR(cmd) & _IOC_READ) && !c->installs_fd &&
	    (!ret || ret == -EMSGSIZE) && copy_to_user(up, &a, size))
		ret = -EFAULT;
	if (ret < 0)
		tp_stat_error(ret);
	return ret;
}

const struct file_operations tp_endpoint_fops = {
	.owner = THIS_MODULE,
	.open = tp_endpoint_open,
	.flush = tp_endpoint_flush,
	.release = tp_endpoint_release,
	.read = tp_endpoint_read,
	.poll = tp_endpoint_poll,
	.mmap = tp_endpoint_mmap,
	.unlocked_ioctl = tp_endpoint_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.uring_cmd = tp_uring_cmd,
	.llseek = noop_llseek,
};
