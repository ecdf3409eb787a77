// SPDX-License-Identifier: GPL-2.0
/*
 * Per-user limits.  An endpoint outlives the process image that opened it
 * (kept across execve(), inherited, passed over a Unix socket), so limits
 * charged to a process or an mm can be escaped by starting a new image.
 * Everything that pins memory or waits in the kernel is therefore charged
 * to the opener's user, as io_uring charges its registered buffers:
 *
 * - pinned and allocated pages to user_struct.locked_vm, bounded by
 *   RLIMIT_MEMLOCK of the task that charges (CAP_IPC_LOCK exempts);
 * - pending SENDs and waiting io_uring RECVs, each holding a key of up to
 *   max_key_len bytes, to tp_user.ops, bounded by max_user_ops.
 */
#include <linux/capability.h>
#include <linux/cred.h>
#include <linux/hashtable.h>
#include <linux/sched/signal.h>
#include <linux/sched/user.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include "tp_internal.h"

#define TP_USER_HASH_BITS	6

/* tp_users and every tp_user.node; held for lookups and the last put. */
static DEFINE_SPINLOCK(tp_users_lock);
static DEFINE_HASHTABLE(tp_users, TP_USER_HASH_BITS);

/**
 * tp_user_get_current() - the accounting object of the calling task's user.
 *
 * Return: a reference, or NULL when out of memory.
 */
struct tp_user *tp_user_get_current(void)
{
	kuid_t uid = current_uid();
	u32 hash = __kuid_val(uid);
	struct tp_user *u, *fresh;

	fresh = kzalloc(sizeof(*fresh), GFP_KERNEL_ACCOUNT);
	if (!fresh)
		return NULL;
	spin_lock(&tp_users_lock);
	hash_for_each_possible(tp_users, u, node, hash) {
		if (uid_eq(u->uid, uid)) {
			refcount_inc(&u->ref);
			spin_unlock(&tp_users_lock);
			kfree(fresh);
			return u;
		}
	}
	fresh->uid = uid;
	fresh->user = get_uid(current_user());
	refcount_set(&fresh->ref, 1);
	atomic_set(&fresh->ops, 0);
	hash_add(tp_users, &fresh->node, hash);
	spin_unlock(&tp_users_lock);
	return fresh;
}

/**
 * tp_user_get() - take another reference.
 * @u:		accounting object.
 */
void tp_user_get(struct tp_user *u)
{
	refcount_inc(&u->ref);
}

/**
 * tp_user_put() - drop a reference; the last one frees the object.
 * @u:		accounting object, may be NULL.
 */
void tp_user_put(struct tp_user *u)
{
	if (!u || !refcount_dec_and_lock(&u->ref, &tp_users_lock))
		return;
	hash_del(&u->node);
	spin_unlock(&tp_users_lock);
	/* Every charge holds a reference, so nothing can be charged now. */
	WARN_ON_ONCE(atomic_read(&u->ops));
	free_uid(u->user);
	kfree(u);
}

/**
 * tp_user_lock_pages() - charge pages to the user's locked_vm.
 * @u:		accounting object.
 * @npages:	pages about to be pinned or allocated.
 *
 * Context: the task whose RLIMIT_MEMLOCK applies.
 * Return: the pages charged (0 under CAP_IPC_LOCK, which is not charged),
 * or -ENOMEM past RLIMIT_MEMLOCK.
 */
long tp_user_lock_pages(struct tp_user *u, unsigned long npages)
{
	unsigned long limit = rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT;
	unsigned long cur, next;

	if (capable(CAP_IPC_LOCK))
		return 0;
	cur = atomic_long_read(&u->user->locked_vm);
	do {
		next = cur + npages;
		if (next > limit || next < cur) {
			tp_stat_add(TP_STAT_ERR_MEMLOCK, 1);
			return -ENOMEM;
		}
	} while (!atomic_long_try_cmpxchg(&u->user->locked_vm, &cur, next));
	return npages;
}

/**
 * tp_user_unlock_pages() - give back what tp_user_lock_pages() charged.
 * @u:		accounting object.
 * @npages:	the charge it returned.
 */
void tp_user_unlock_pages(struct tp_user *u, unsigned long npages)
{
	atomic_long_sub(npages, &u->user->locked_vm);
}

/**
 * tp_user_op_get() - count one more pending operation of the user.
 * @u:		accounting object.
 *
 * Return: 0, or -EDQUOT when the user has max_user_ops pending.
 */
int tp_user_op_get(struct tp_user *u)
{
	if (atomic_inc_return(&u->ops) > READ_ONCE(tp_max_user_ops)) {
		atomic_dec(&u->ops);
		return -EDQUOT;
	}
	return 0;
}

/**
 * tp_user_op_put() - the operation counted by tp_user_op_get() ended.
 * @u:		accounting object.
 */
void tp_user_op_put(struct tp_user *u)
{
	atomic_dec(&u->ops);
}
