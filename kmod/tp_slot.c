// SPDX-License-Identifier: GPL-2.0
/*
 * Slots: SEND posts a tensor under a key without blocking; RECV, before or
 * after, claims it, copies (or takes the donated pages) in the consumer's
 * context, and queues the completion for the producer.
 *
 * A claimed slot stays in the domain's hash until its delivery ends, so the
 * key stays taken (-EEXIST for a second SEND) and a delivery interrupted by
 * a fatal signal can put the slot back for the next consumer: nothing is
 * lost when a consumer dies.
 */
#include <linux/hrtimer.h>
#include <linux/poll.h>
#include <linux/ktime.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/uaccess.h>
#include <linux/wait.h>
#include "tp_internal.h"

/* Caller holds dom->lock. */
static struct tp_slot *tp_slot_find(struct tp_domain *dom, const u8 *key,
				    u32 len, u32 hash)
{
	struct tp_slot *slot;

	hash_for_each_possible(dom->slots, slot, node, hash)
		if (slot->hash == hash &&
		    tp_key_eq(slot->key, slot->key_len, key, len))
			return slot;
	return NULL;
}

/* Caller holds dom->lock. */
static void tp_waiters_wake_key(struct tp_domain *dom, const u8 *key, u32 len,
				u32 hash)
{
	struct tp_waiter *w;

	hash_for_each_possible(dom->waiters, w, node, hash) {
		if (w->hash == hash && tp_key_eq(w->key, w->key_len, key, len))
			tp_waiter_signal(w, 1);
	}
}

/**
 * tp_waiter_signal() - record an event for a waiter and wake it.
 * @w:		waiter; caller holds the domain's lock.
 * @event:	1 (look again) or a negative errno (end the wait with it).
 *
 * An ending event already recorded is kept: a cancelled RECV stays
 * cancelled even if a SEND or an abort follows before it runs.
 */
void tp_waiter_signal(struct tp_waiter *w, int event)
{
	if (w->event >= 0)
		w->event = event;
	w->wake(w);
}

/**
 * tp_waiters_wake_all() - wake every RECV waiting in a domain.
 * @dom:	domain; caller holds its lock.
 * @event:	value stored in each waiter's event.
 */
void tp_waiters_wake_all(struct tp_domain *dom, int event)
{
	struct tp_waiter *w;
	int bkt;

	hash_for_each(dom->waiters, bkt, w, node)
		tp_waiter_signal(w, event);
}

/**
 * tp_slot_unpublish() - take a pending slot out of its domain.
 * @dom:	the domain; caller holds its lock.
 * @slot:	a slot in @dom's table and on its producer's sends list.
 * @to:		list to move the slot to (through its ep_node), or NULL for
 *		none.
 *
 * The key is free again once the lock is dropped; the caller completes or
 * frees the slot.
 */
void tp_slot_unpublish(struct tp_domain *dom, struct tp_slot *slot,
		       struct list_head *to)
{
	lockdep_assert_held(&dom->lock);
	hash_del(&slot->node);
	if (to)
		list_move_tail(&slot->ep_node, to);
	else
		list_del_init(&slot->ep_node);
	dom->nr_slots--;
	tp_stat_add(TP_STAT_PENDING_SLOTS, -1);
}

/**
 * tp_slot_free() - free a slot whose completion is done with.
 * @slot:	slot, on no list, holding no region.
 */
void tp_slot_free(struct tp_slot *slot)
{
	tp_user_op_put(slot->ep->owner);
	tp_endpoint_put(slot->ep);
	kfree(slot);
}

/**
 * tp_slot_complete() - finish a slot and queue its completion for read().
 * @slot:	a slot removed from the domain and from its producer's list.
 * @status:	0, or a negative errno.
 * @len:	bytes delivered.
 *
 * Context: process context, no lock held.
 */
void tp_slot_complete(struct tp_slot *slot, int status, u64 len)
{
	struct tp_endpoint *ep = slot->ep;
	bool dead;

	tp_region_put(slot->region);
	slot->region = NULL;
	slot->cqe.status = status;
	slot->cqe.len = status ? 0 : len;
	if (slot->cmd) {
		tp_uring_send_done(slot);
		return;
	}

	spin_lock(&ep->lock);
	dead = ep->dead;
	if (!dead)
		list_add_tail(&slot->ep_node, &ep->done);
	spin_unlock(&ep->lock);
	if (dead) {
		tp_slot_free(slot);
		return;
	}
	wake_up_interruptible_poll(&ep->wq, EPOLLIN | EPOLLRDNORM);
}

/**
 * tp_send() - TP_IOC_SEND: post a tensor under a key; never blocks.
 * @ep:		the calling endpoint.
 * @arg:	the command, copied from user space.
 * @cmd:	the io_uring command to complete instead of queueing a
 *		completion for read(), or NULL.
 *
 * Return: 0 or a negative errno as documented in the uapi header.
 */
int tp_send(struct tp_endpoint *ep, const struct tp_send *arg,
	    struct io_uring_cmd *cmd)
{
	struct tp_domain *dom = tp_endpoint_domain(ep);
	bool donate = arg->flags & TP_SEND_DONATE;
	struct tp_region *r;
	struct tp_slot *slot;
	int err;

	if ((arg->flags & ~TP_SEND_FLAGS_ALL) || arg->reserved0 ||
	    arg->reserved[0] || arg->reserved[1])
		return -EINVAL;
	if (donate && arg->offset)
		return -EINVAL;
	err = tp_key_check(arg->key_len);
	if (err)
		return err;
	if (!dom)
		return -ENOLINK;
	r = tp_region_get(ep, arg->region);
	if (!r)
		return -ENOENT;
	err = -EINVAL;
	if (donate && r->kind != TP_REGION_ALLOC)
		goto put_region;
	err = -EACCES;
	if (!(r->access & TP_ACCESS_READ))
		goto put_region;
	err = -ENODEV;
	if (tp_region_revoked(r))
		goto put_region;
	err = -ERANGE;
	if (arg->offset > r->len || arg->len > r->len - arg->offset)
		goto put_region;

	err = tp_user_op_get(ep->owner);
	if (err)
		goto put_region;
	err = -ENOMEM;
	slot = kzalloc(struct_size(slot, key, arg->key_len), GFP_KERNEL_ACCOUNT);
	if (!slot)
		goto put_op;
	err = -EFAULT;
	if (copy_from_user(slot->key, u64_to_user_ptr(arg->key_ptr),
			   arg->key_len))
		goto free_slot;
	slot->key_len = arg->key_len;
	slot->hash = tp_key_hash(slot->key, slot->key_len);
	slot->region = r;
	slot->offset = arg->offset;
	slot->len = arg->len;
	slot->flags = arg->flags;
	slot->cqe.user_data = arg->user_data;
	slot->cqe.op = TP_OP_SEND;
	INIT_LIST_HEAD(&slot->ep_node);

	mutex_lock(&dom->lock);
	if (dom->abort_status)
		err = dom->abort_status;
	else if (tp_slot_find(dom, slot->key, slot->key_len, slot->hash))
		err = -EEXIST;
	else if (dom->nr_slots >= READ_ONCE(tp_max_slots))
		err = -ENOSPC;
	else if (READ_ONCE(ep->outstanding) >= READ_ONCE(tp_max_slots))
		err = -ENOBUFS;
	else
		err = donate ? tp_region_detach(ep, arg->region, r) : 0;
	if (err) {
		mutex_unlock(&dom->lock);
		goto free_slot;
	}
	spin_lock(&ep->lock);
	ep->outstanding++;
	spin_unlock(&ep->lock);
	kref_get(&ep->ref);
	slot->ep = ep;
	slot->cmd = cmd;
	if (cmd)
		tp_uring_track_send(ep, slot);
	/* A live producer's SEND of the key: its dead one is history. */
	tp_domain_orphan_take(dom, slot->key, slot->key_len, slot->hash);
	hash_add(dom->slots, &slot->node, slot->hash);
	list_add_tail(&slot->ep_node, &ep->sends);
	dom->nr_slots++;
	dom->stats.sends++;
	tp_stat_add(TP_STAT_PENDING_SLOTS, 1);
	tp_waiters_wake_key(dom, slot->key, slot->key_len, slot->hash);
	mutex_unlock(&dom->lock);

	if (donate)
		tp_region_put(r);	/* the handle table's reference */
	tp_stat_add(TP_STAT_SENDS, 1);
	return 0;

free_slot:
	kfree(slot);
put_op:
	tp_user_op_put(ep->owner);
put_region:
	tp_region_put(r);
	return err;
}

/*
 * Remove a claimed slot once its delivery is over, and complete it.
 * @moved: the pages changed owner (donated), rather than being copied.
 */
static void tp_slot_finish(struct tp_domain *dom, struct tp_slot *slot,
			   int status, u64 len, bool moved)
{
	mutex_lock(&dom->lock);
	tp_slot_unpublish(dom, slot, NULL);
	if (!status) {
		dom->stats.recvs++;
		if (moved)
			dom->stats.bytes_donated += len;
		else
			dom->stats.bytes_copied += len;
	}
	mutex_unlock(&dom->lock);
	if (!status) {
		tp_stat_add(TP_STAT_RECVS, 1);
		tp_stat_add(moved ? TP_STAT_BYTES_DONATED : TP_STAT_BYTES_COPIED,
			    len);
	}
	tp_slot_complete(slot, status, len);
}

/*
 * A delivery failed in the consumer: the slot is pending again, unless the
 * domain was aborted meanwhile (it fails like its peers did), its producer
 * closed meanwhile (it ends: the producer's withdrawal has run and would
 * never see it again) or its source is an import that was revoked (it ends
 * with -ENODEV).  This is the one place a slot returns to the table.
 */
static void tp_slot_unclaim(struct tp_domain *dom, struct tp_slot *slot)
{
	int status;

	mutex_lock(&dom->lock);
	status = dom->abort_status;
	if (status)
		tp_stat_add(TP_STAT_ERR_ABORTED, 1);
	else if (slot->ep->withdrawn)
		status = -ECANCELED;
	else if (tp_region_revoked(slot->region))
		status = -ENODEV;	/* no consumer could ever copy it */
	else
		slot->claimed = false;
	if (!status)
		tp_waiters_wake_key(dom, slot->key, slot->key_len, slot->hash);
	mutex_unlock(&dom->lock);
	if (status)
		tp_slot_finish(dom, slot, status, 0, false);
}

/* Deliver into a new region of the consumer's (TP_RECV_DONATE). */
static int tp_deliver_new_region(struct tp_endpoint *ep, struct tp_slot *slot,
				 struct tp_recv *arg)
{
	struct tp_region *src = slot->region, *r;
	u32 handle;
	int err;

	err = tp_region_reserve(ep, &handle);
	if (err)
		return err;
	if (slot->flags & TP_SEND_DONATE)
		r = tp_region_new_donated(src, ep);
	else
		r = tp_region_new_alloc(max_t(u64, slot->len, 1), ep);
	if (IS_ERR(r)) {
		tp_region_unreserve(ep, handle);
		return PTR_ERR(r);
	}
	if (!(slot->flags & TP_SEND_DONATE)) {
		err = tp_copy_pages(r, 0, src, slot->offset, slot->len);
		if (err) {
			tp_region_put(r);
			tp_region_unreserve(ep, handle);
			return err;
		}
	}
	tp_region_publish(ep, handle, r);
	arg->region = handle;
	arg->mmap_offset = (u64)handle << TP_MMAP_REGION_SHIFT;
	return 0;
}

/**
 * tp_recv_deliver() - deliver a claimed slot to a RECV and finish it.
 * @dom:	the domain.
 * @ep:		the consumer.
 * @slot:	the slot, claimed by tp_recv_claim().
 * @dst:	destination region, or NULL for TP_RECV_DONATE.
 * @arg:	the RECV; @len, and for DONATE @region and @mmap_offset, are set.
 *
 * On failure the slot is pending again (or failed, if the domain was
 * aborted meanwhile): a failed delivery loses nothing.
 *
 * Context: process context, no lock held.
 * Return: 0, or -EINTR (fatal signal), -ENOSPC or -ENOMEM.
 */
int tp_recv_deliver(struct tp_domain *dom, struct tp_endpoint *ep,
		    struct tp_slot *slot, struct tp_region *dst,
		    struct tp_recv *arg)
{
	bool moved = (slot->flags & TP_SEND_DONATE) &&
		     (arg->flags & TP_RECV_DONATE);
	int err;

	if (arg->flags & TP_RECV_DONATE)
		err = tp_deliver_new_region(ep, slot, arg);
	else
		err = tp_copy_pages(dst, arg->offset, slot->region,
				    slot->offset, slot->len);
	if (err) {
		tp_slot_unclaim(dom, slot);
		return err;
	}
	arg->len = slot->len;
	tp_slot_finish(dom, slot, 0, slot->len, moved);
	return 0;
}

/**
 * tp_recv_claim() - claim the key's slot if it is pending.
 * @dom:	the domain; caller holds its lock.
 * @key:	key bytes.
 * @key_len:	key length.
 * @hash:	tp_key_hash() of the key.
 * @arg:	the RECV; on -EMSGSIZE its @len is set to the tensor's.
 * @slotp:	out: the claimed slot.
 *
 * Return: 0 with *@slotp claimed, -EAGAIN if absent, -EOWNERDEAD if absent
 * because its producer died with it unclaimed (once: the key is forgotten),
 * -EMSGSIZE, or the domain's abort status.
 */
int tp_recv_claim(struct tp_domain *dom, const u8 *key, u32 key_len,
		  u32 hash, struct tp_recv *arg, struct tp_slot **slotp)
{
	struct tp_slot *slot;

	if (dom->abort_status)
		return dom->abort_status;
	slot = tp_slot_find(dom, key, key_len, hash);
	/* Its producer posted it and died: nobody else will. */
	if (!slot && tp_domain_orphan_take(dom, key, key_len, hash))
		return -EOWNERDEAD;
	if (!slot || slot->claimed)
		return -EAGAIN;
	if (slot->len > arg->len) {
		arg->len = slot->len;
		return -EMSGSIZE;
	}
	slot->claimed = true;
	*slotp = slot;
	return 0;
}

static void tp_waiter_wake_task(struct tp_waiter *w)
{
	wake_up(&w->wq);
}

/* Sleep until woken, timed out or signalled.  Return: 0 when woken. */
static int tp_recv_sleep(struct tp_waiter *w, u64 timeout_ns, ktime_t deadline)
{
	long ret;

	if (!timeout_ns) {
		ret = wait_event_interruptible(w->wq, READ_ONCE(w->event));
	} else {
		ktime_t left = ktime_sub(deadline, ktime_get());

		if (ktime_to_ns(left) <= 0)
			return -ETIMEDOUT;
		ret = wait_event_interruptible_hrtimeout(w->wq,
							 READ_ONCE(w->event),
							 left);
	}
	if (ret == -ETIME)
		return -ETIMEDOUT;
	/*
	 * Restarted when no handler ran (io_uring task work also wakes us),
	 * -EINTR when one did, whatever SA_RESTART says: a RECV that was
	 * interrupted has taken nothing and the caller may want to know.
	 */
	return ret ? -ERESTARTNOHAND : 0;
}

static int tp_recv_wait_claim(struct tp_domain *dom, struct tp_endpoint *ep,
			      const u8 *key, u32 key_len, struct tp_recv *arg,
			      struct tp_slot **slotp)
{
	u64 timeout_ns = arg->timeout_ns;
	ktime_t deadline = ktime_add_safe(ktime_get(),
					  ns_to_ktime(min_t(u64, timeout_ns,
							    KTIME_MAX)));
	struct tp_waiter w = {
		.ep = ep,
		.hash = tp_key_hash(key, key_len),
		.key_len = key_len,
		.key = key,
		.wake = tp_waiter_wake_task,
	};
	bool waiting = false;
	int err, sleep_err = 0;

	init_waitqueue_head(&w.wq);
	mutex_lock(&dom->lock);
	/* Registered until the end, so that CANCEL always finds the RECV. */
	for (;;) {
		err = w.event < 0 ? w.event :
		      tp_recv_claim(dom, key, key_len, w.hash, arg, slotp);
		if (err != -EAGAIN || (arg->flags & TP_RECV_NONBLOCK))
			break;
		/* A SEND that raced with a timeout or signal still wins. */
		if (sleep_err) {
			err = sleep_err;
			break;
		}
		w.event = 0;
		if (!waiting) {
			hash_add(dom->waiters, &w.node, w.hash);
			dom->nr_waiters++;
			waiting = true;
		}
		mutex_unlock(&dom->lock);
		sleep_err = tp_recv_sleep(&w, timeout_ns, deadline);
		mutex_lock(&dom->lock);
	}
	if (waiting) {
		hash_del(&w.node);
		dom->nr_waiters--;
	}
	mutex_unlock(&dom->lock);
	return err;
}

/**
 * tp_recv_check() - validate a RECV and look up its destination.
 * @ep:		the calling endpoint.
 * @arg:	the command.
 * @dstp:	out: the destination region (a reference), NULL for DONATE.
 *
 * Return: 0 or a negative errno as documented in the uapi header.
 */
int tp_recv_check(struct tp_endpoint *ep, struct tp_recv *arg,
		  struct tp_region **dstp)
{
	struct tp_region *dst;
	int err;

	*dstp = NULL;
	if ((arg->flags & ~TP_RECV_FLAGS_ALL) || arg->reserved0 ||
	    arg->reserved[0] || arg->reserved[1])
		return -EINVAL;
	if ((arg->flags & TP_RECV_DONATE) && (arg->region || arg->offset))
		return -EINVAL;
	err = tp_key_check(arg->key_len);
	if (err)
		return err;
	if (!tp_endpoint_domain(ep))
		return -ENOLINK;
	if (arg->flags & TP_RECV_DONATE)
		return 0;
	dst = tp_region_get(ep, arg->region);
	if (!dst)
		return -ENOENT;
	err = -EACCES;
	if (!(dst->access & TP_ACCESS_WRITE))
		goto put_dst;
	err = -ENODEV;
	if (tp_region_revoked(dst))
		goto put_dst;
	err = -ERANGE;
	if (arg->offset > dst->len || arg->len > dst->len - arg->offset)
		goto put_dst;
	*dstp = dst;
	return 0;

put_dst:
	tp_region_put(dst);
	return err;
}

/**
 * tp_recv() - TP_IOC_RECV: take the tensor posted under a key.
 * @ep:		the calling endpoint.
 * @arg:	the command; @len, and for DONATE @region and @mmap_offset,
 *		are set.
 *
 * Return: 0 or a negative errno as documented in the uapi header.
 */
int tp_recv(struct tp_endpoint *ep, struct tp_recv *arg)
{
	struct tp_domain *dom = tp_endpoint_domain(ep);
	struct tp_region *dst;
	struct tp_slot *slot;
	u8 *key;
	int err;

	err = tp_recv_check(ep, arg, &dst);
	if (err)
		return err;
	key = tp_key_copy(arg->key_ptr, arg->key_len);
	if (IS_ERR(key)) {
		err = PTR_ERR(key);
		goto put_dst;
	}
	err = tp_recv_wait_claim(dom, ep, key, arg->key_len, arg, &slot);
	if (!err)
		err = tp_recv_deliver(dom, ep, slot, dst, arg);
	kfree(key);
put_dst:
	tp_region_put(dst);
	return err;
}

/**
 * tp_cancel() - TP_IOC_CANCEL: cancel this endpoint's operations on a key.
 * @ep:		the calling endpoint.
 * @arg:	the command; @count is set.
 *
 * Return: 0 or a negative errno as documented in the uapi header.
 */
int tp_cancel(struct tp_endpoint *ep, struct tp_cancel *arg)
{
	struct tp_domain *dom = tp_endpoint_domain(ep);
	struct tp_slot *slot = NULL;
	struct tp_waiter *w;
	u32 hash, count = 0;
	u8 *key;
	int err;

	if (!arg->flags || (arg->flags & ~TP_CANCEL_FLAGS_ALL) || arg->reserved)
		return -EINVAL;
	err = tp_key_check(arg->key_len);
	if (err)
		return err;
	if (!dom)
		return -ENOLINK;
	key = tp_key_copy(arg->key_ptr, arg->key_len);
	if (IS_ERR(key))
		return PTR_ERR(key);
	hash = tp_key_hash(key, arg->key_len);

	mutex_lock(&dom->lock);
	if (arg->flags & TP_CANCEL_SEND) {
		slot = tp_slot_find(dom, key, arg->key_len, hash);
		if (slot && slot->ep == ep && !slot->claimed) {
			tp_slot_unpublish(dom, slot, NULL);
			count++;
		} else {
			slot = NULL;
		}
	}
	if (arg->flags & TP_CANCEL_RECV) {
		hash_for_each_possible(dom->waiters, w, node, hash) {
			if (w->ep != ep || w->event < 0 ||
			    !tp_key_eq(w->key, w->key_len, key, arg->key_len))
				continue;
			tp_waiter_signal(w, -ECANCELED);
			count++;
		}
	}
	mutex_unlock(&dom->lock);
	kfree(key);

	if (slot)
		tp_slot_complete(slot, -ECANCELED, 0);
	arg->count = count;
	return count ? 0 : -ENOENT;
}

/**
 * tp_slot_withdraw_all() - withdraw a closing endpoint's pending SENDs.
 * @ep:		endpoint being released; no completion will be read.
 *
 * Claimed slots stay: their consumer finishes them, or ends them if the
 * delivery fails (see tp_slot_unclaim()), and, seeing the endpoint dead,
 * frees them.
 */
void tp_slot_withdraw_all(struct tp_endpoint *ep)
{
	struct tp_domain *dom = ep->domain;
	struct tp_slot *slot, *tmp;
	LIST_HEAD(gone);

	if (!dom)
		return;
	mutex_lock(&dom->lock);
	ep->withdrawn = true;
	list_for_each_entry_safe(slot, tmp, &ep->sends, ep_node) {
		if (slot->claimed)
			continue;
		/* A member that died: a RECV of the key must not wait for it. */
		if (ep->died)
			tp_domain_orphan_add(dom, slot->key, slot->key_len,
					     slot->hash);
		tp_slot_unpublish(dom, slot, &gone);
	}
	mutex_unlock(&dom->lock);

	list_for_each_entry_safe(slot, tmp, &gone, ep_node) {
		list_del(&slot->ep_node);
		tp_region_put(slot->region);
		tp_slot_free(slot);
	}
}
