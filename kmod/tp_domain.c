// SPDX-License-Identifier: GPL-2.0
/*
 * Domains: rendezvous tables whose file descriptor is the capability to use
 * them.  An endpoint can only reach the keys of the one domain it attached
 * to, and attaching needs the domain's descriptor.
 */
#include <linux/anon_inodes.h>
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include "tp_compat.h"
#include "tp_internal.h"

static atomic64_t tp_domain_ids = ATOMIC64_INIT(0);

static void tp_domain_destroy(struct kref *ref)
{
	struct tp_domain *dom = container_of(ref, struct tp_domain, ref);

	/* Every slot holds its producer, and every producer the domain. */
	WARN_ON_ONCE(dom->nr_slots || dom->nr_waiters);
	tp_domain_orphans_free(dom);
	/* Every grant was revoked when its endpoint, which holds us, went. */
	WARN_ON_ONCE(!xa_empty(&dom->grants));
	xa_destroy(&dom->grants);
	tp_debugfs_remove_domain(dom);
	mutex_destroy(&dom->lock);
	tp_stat_add(TP_STAT_DOMAINS, -1);
	kfree(dom);
}

/**
 * tp_domain_put() - drop a reference to a domain.
 * @dom:	domain, may be NULL.
 */
void tp_domain_put(struct tp_domain *dom)
{
	if (dom)
		kref_put(&dom->ref, tp_domain_destroy);
}

static int tp_domain_file_release(struct inode *inode, struct file *file)
{
	tp_domain_put(file->private_data);
	return 0;
}

static const struct file_operations tp_domain_fops = {
	.owner = THIS_MODULE,
	.release = tp_domain_file_release,
	.llseek = noop_llseek,
};

/**
 * tp_domain_create() - TP_IOC_DOMAIN_CREATE: a new domain and its descriptor.
 * @arg:	the command; @fd and @id are set.
 * @uarg:	where the command goes back to user space.
 *
 * The result is copied out before the descriptor is installed, so a fault
 * never leaves the caller with a descriptor it was not told about.
 *
 * Return: 0 or a negative errno as documented in the uapi header.
 */
int tp_domain_create(struct tp_domain_create *arg, void __user *uarg)
{
	struct tp_domain *dom;
	struct file *file;
	int fd, err;

	if (arg->flags & ~TP_DOMAIN_CREATE_FLAGS_ALL)
		return -EINVAL;
	dom = kzalloc(sizeof(*dom), GFP_KERNEL_ACCOUNT);
	if (!dom)
		return -ENOMEM;
	kref_init(&dom->ref);
	mutex_init(&dom->lock);
	hash_init(dom->slots);
	hash_init(dom->waiters);
	INIT_LIST_HEAD(&dom->orphans);
	tp_grant_domain_init(dom);
	dom->id = atomic64_inc_return(&tp_domain_ids);
	tp_stat_add(TP_STAT_DOMAINS, 1);
	tp_debugfs_add_domain(dom);

	fd = get_unused_fd_flags(O_CLOEXEC);
	if (fd < 0) {
		err = fd;
		goto put_dom;
	}
	file = anon_inode_getfile("[tensorpipe-domain]", &tp_domain_fops, dom,
				  O_RDWR);
	if (IS_ERR(file)) {
		err = PTR_ERR(file);
		goto put_fd;
	}
	arg->fd = fd;
	arg->id = dom->id;
	if (copy_to_user(uarg, arg, sizeof(*arg))) {
		fput(file);	/* its release drops the domain */
		put_unused_fd(fd);
		return -EFAULT;
	}
	fd_install(fd, file);
	return 0;

put_fd:
	put_unused_fd(fd);
put_dom:
	tp_domain_put(dom);
	return err;
}

/**
 * tp_domain_attach() - TP_IOC_DOMAIN_ATTACH: join the domain behind an fd.
 * @ep:		the calling endpoint.
 * @arg:	the command; @id is set.
 *
 * Return: 0 or a negative errno as documented in the uapi header.
 */
int tp_domain_attach(struct tp_endpoint *ep, struct tp_domain_attach *arg)
{
	struct tp_domain *dom;
	struct file *file;
	struct fd f;
	int err = 0;

	if (arg->flags & ~TP_DOMAIN_ATTACH_FLAGS_ALL)
		return -EINVAL;
	f = fdget(arg->fd);
	file = tp_fd_file(f);
	if (!file)
		return -EBADF;
	if (file->f_op != &tp_domain_fops) {
		err = -EINVAL;
		goto out;
	}
	dom = file->private_data;
	mutex_lock(&ep->domain_lock);
	if (ep->domain) {
		err = -EBUSY;
	} else {
		kref_get(&dom->ref);
		ep->member = arg->flags & TP_DOMAIN_ATTACH_MEMBER;
		/* Pairs with tp_endpoint_domain(): readers see a whole domain. */
		smp_store_release(&ep->domain, dom);
		arg->id = dom->id;
	}
	mutex_unlock(&ep->domain_lock);
out:
	fdput(f);
	return err;
}

/**
 * tp_domain_abort() - TP_IOC_ABORT: fail everything pending in the domain.
 * @ep:		the calling endpoint.
 * @arg:	the command.
 *
 * Pending (unclaimed) SENDs complete with the status, waiting RECVs wake up
 * and see it.  SENDs being delivered right now finish normally.
 *
 * Return: 0 or a negative errno as documented in the uapi header.
 */
int tp_domain_abort(struct tp_endpoint *ep, const struct tp_abort *arg)
{
	struct tp_domain *dom = tp_endpoint_domain(ep);
	struct tp_slot *slot, *tmp;
	struct hlist_node *n;
	LIST_HEAD(failed);
	int bkt;

	/* Real errno values only: an internal code would leak to io_uring. */
	if ((arg->flags & ~TP_ABORT_FLAGS_ALL) || arg->status >= 0 ||
	    arg->status < -EHWPOISON)
		return -EINVAL;
	if (!dom)
		return -ENOLINK;

	mutex_lock(&dom->lock);
	if (dom->abort_status) {
		mutex_unlock(&dom->lock);
		return -EALREADY;
	}
	dom->abort_status = arg->status;
	hash_for_each_safe(dom->slots, bkt, n, slot, node) {
		if (!slot->claimed)
			tp_slot_unpublish(dom, slot, &failed);
	}
	tp_waiters_wake_all(dom, 1);
	mutex_unlock(&dom->lock);

	list_for_each_entry_safe(slot, tmp, &failed, ep_node) {
		list_del(&slot->ep_node);
		tp_stat_add(TP_STAT_ERR_ABORTED, 1);
		tp_slot_complete(slot, arg->status, 0);
	}
	return 0;
}

/**
 * tp_domain_member_died() - end what the other members wait for.
 * @ep:		an endpoint whose opener is exiting with it open.
 *
 * When @ep is a member, every RECV of another member's endpoint waiting in
 * the domain returns -EOWNERDEAD, every unclaimed SEND of another member's
 * endpoint completes with it: the dead member may have been the producer
 * or the consumer they waited for, and nobody can tell which.  SENDs being
 * delivered finish normally; the dead member's own operations end with its
 * endpoint.  Endpoints that are no members are left alone.  Only once per
 * endpoint.
 */
void tp_domain_member_died(struct tp_endpoint *ep)
{
	struct tp_domain *dom = tp_endpoint_domain(ep);
	struct tp_slot *slot, *tmp;
	struct hlist_node *n;
	struct tp_waiter *w;
	LIST_HEAD(failed);
	int bkt, woken = 0;

	if (!dom || !ep->member)
		return;
	mutex_lock(&dom->lock);
	if (ep->died) {
		mutex_unlock(&dom->lock);
		return;
	}
	ep->died = true;
	hash_for_each_safe(dom->slots, bkt, n, slot, node) {
		if (slot->ep != ep && slot->ep->member && !slot->claimed)
			tp_slot_unpublish(dom, slot, &failed);
	}
	hash_for_each(dom->waiters, bkt, w, node) {
		if (w->ep != ep && w->ep->member && w->event >= 0) {
			tp_waiter_signal(w, -EOWNERDEAD);
			woken++;
		}
	}
	mutex_unlock(&dom->lock);
	tp_stat_add(TP_STAT_ERR_MEMBER_DIED, woken);

	list_for_each_entry_safe(slot, tmp, &failed, ep_node) {
		list_del(&slot->ep_node);
		tp_stat_add(TP_STAT_ERR_MEMBER_DIED, 1);
		tp_slot_complete(slot, -EOWNERDEAD, 0);
	}
}

/**
 * tp_domain_orphan_add() - remember the key of a dead producer's SEND.
 * @dom:	the domain; caller holds its lock.
 * @key:	the key.
 * @key_len:	its length.
 * @hash:	tp_key_hash() of the key.
 *
 * Without memory the key is not remembered: its RECV then waits, as it
 * did before keys were remembered at all.
 */
void tp_domain_orphan_add(struct tp_domain *dom, const u8 *key, u32 key_len,
			  u32 hash)
{
	struct tp_orphan *o;

	lockdep_assert_held(&dom->lock);
	if (dom->nr_orphans >= TP_DOMAIN_ORPHANS) {
		o = list_first_entry(&dom->orphans, struct tp_orphan, node);
		list_del(&o->node);
		dom->nr_orphans--;
		kfree(o);
	}
	o = kmalloc(struct_size(o, key, key_len), GFP_KERNEL_ACCOUNT);
	if (!o)
		return;
	o->hash = hash;
	o->key_len = key_len;
	memcpy(o->key, key, key_len);
	list_add_tail(&o->node, &dom->orphans);
	dom->nr_orphans++;
}

/**
 * tp_domain_orphan_take() - forget a remembered key.
 * @dom:	the domain; caller holds its lock.
 * @key:	the key.
 * @key_len:	its length.
 * @hash:	tp_key_hash() of the key.
 *
 * Return: true if @key was remembered (its producer died).
 */
bool tp_domain_orphan_take(struct tp_domain *dom, const u8 *key, u32 key_len,
			   u32 hash)
{
	struct tp_orphan *o;

	lockdep_assert_held(&dom->lock);
	list_for_each_entry(o, &dom->orphans, node) {
		if (o->hash != hash || !tp_key_eq(o->key, o->key_len, key, key_len))
			continue;
		list_del(&o->node);
		dom->nr_orphans--;
		kfree(o);
		return true;
	}
	return false;
}

/**
 * tp_domain_orphans_free() - forget every remembered key.
 * @dom:	a domain nobody else can reach any more.
 */
void tp_domain_orphans_free(struct tp_domain *dom)
{
	struct tp_orphan *o, *tmp;

	list_for_each_entry_safe(o, tmp, &dom->orphans, node)
		kfree(o);
	INIT_LIST_HEAD(&dom->orphans);
	dom->nr_orphans = 0;
}
