// SPDX-License-Identifier: GPL-2.0
/*
 * SEND, RECV and CANCEL as IORING_OP_URING_CMD, completed as CQEs.
 *
 * The command struct travels in the SQE128 command area and is copied once
 * before it is validated.  A SEND's CQE is posted when its slot completes
 * (consumed, cancelled or aborted).  A RECV whose key is absent waits as a
 * struct tp_urecv in the domain's waiter table: whatever ends the wait (a
 * SEND of the key, CANCEL, ABORT, the timeout, the task or ring going away)
 * schedules task work, and the copy happens there, in the submitter's task.
 *
 * Exactly one CQE per command: a waiting RECV moves from WAITING to FIRED
 * by cmpxchg, only the winner schedules the task work, and the task work is
 * the only place that completes or re-arms it.
 *
 * Kernels before 6.7 cannot cancel a uring_cmd when its ring is closed or
 * its task exits, and would wait forever for it.  As ublk did there, a
 * delayed work per endpoint polls, while commands are pending, for an
 * exiting task or a dying ring and fails their commands with -ECANCELED.
 */
#include <linux/hrtimer.h>
#include <linux/io_uring.h>
#include <linux/io_uring_types.h>
#include <linux/percpu-refcount.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include "tp_internal.h"

#define TP_URING_MONITOR_PERIOD	(HZ / 10)

enum tp_urecv_state {
	TP_UR_WAITING,
	TP_UR_FIRED,
};

/**
 * struct tp_urecv - an io_uring RECV waiting for its key.
 * @w:		the waiter, in tp_domain.waiters until the CQE is posted.
 * @node:	in tp_endpoint.urecvs; protected by the domain's lock.
 * @cmd:	the command.
 * @ep:		the consumer.
 * @dst:	destination region (a reference), NULL for DONATE.
 * @arg:	the command's struct, copied at issue.
 * @key:	the key bytes.
 * @timer:	fires at the RECV's timeout, when it has one.
 * @state:	TP_UR_WAITING or TP_UR_FIRED (task work scheduled).
 * @timed_out:	the timer fired.
 */
struct tp_urecv {
	struct tp_waiter w;
	struct list_head node;
	struct io_uring_cmd *cmd;
	struct tp_endpoint *ep;
	struct tp_region *dst;
	struct tp_recv arg;
	u8 *key;
	struct hrtimer timer;
	atomic_t state;
	bool timed_out;
};

/* The per-command private area holds a pointer to our state. */
static void tp_pdu_set(struct io_uring_cmd *cmd, void *obj)
{
	BUILD_BUG_ON(sizeof(obj) > sizeof(cmd->pdu));
	memcpy(cmd->pdu, &obj, sizeof(obj));
}

static void *tp_pdu_get(struct io_uring_cmd *cmd)
{
	void *obj;

	memcpy(&obj, cmd->pdu, sizeof(obj));
	return obj;
}

/*
 * The command can never complete normally: its task exits, or execs, or its
 * ring is being closed.  io_uring marks a task in_idle while it cancels the
 * task's requests (exec and exit), and waits there for ours.
 */
static bool tp_uring_orphaned(struct io_uring_cmd *cmd)
{
	struct io_kiocb *req = cmd_to_io_kiocb(cmd);
	struct io_uring_task *tctx = req->task->io_uring;

	return (req->task->flags & PF_EXITING) ||
	       (tctx && atomic_read(&tctx->in_idle)) ||
	       percpu_ref_is_dying(&req->ctx->refs);
}

static void tp_uring_arm_monitor(struct tp_endpoint *ep)
{
	schedule_delayed_work(&ep->monitor, TP_URING_MONITOR_PERIOD);
}

static void tp_usend_task(struct io_uring_cmd *cmd, unsigned int issue_flags)
{
	struct tp_slot *slot = tp_pdu_get(cmd);
	struct tp_endpoint *ep = slot->ep;
	s32 status = slot->cqe.status;
	u64 len = slot->cqe.len;

	spin_lock(&ep->lock);
	ep->outstanding--;
	spin_unlock(&ep->lock);
	tp_slot_free(slot);
	io_uring_cmd_done(cmd, status, len, issue_flags);
}

/**
 * tp_uring_track_send() - prepare a SEND slot to complete as a CQE.
 * @ep:		the producer.
 * @slot:	the slot about to be posted, with @cmd set.
 */
void tp_uring_track_send(struct tp_endpoint *ep, struct tp_slot *slot)
{
	tp_pdu_set(slot->cmd, slot);
	tp_uring_arm_monitor(ep);
}

/**
 * tp_uring_send_done() - post the CQE of a completed io_uring SEND.
 * @slot:	the slot, its cqe filled in; freed by the task work.
 */
void tp_uring_send_done(struct tp_slot *slot)
{
	io_uring_cmd_complete_in_task(slot->cmd, tp_usend_task);
}

static void tp_urecv_task(struct io_uring_cmd *cmd, unsigned int issue_flags);

static void tp_urecv_fire(struct tp_urecv *u)
{
	if (atomic_cmpxchg(&u->state, TP_UR_WAITING, TP_UR_FIRED) ==
	    TP_UR_WAITING)
		io_uring_cmd_complete_in_task(u->cmd, tp_urecv_task);
}

/* Called under the domain's lock by whoever changed the waiter's event. */
static void tp_urecv_wake(struct tp_waiter *w)
{
	tp_urecv_fire(container_of(w, struct tp_urecv, w));
}

static enum hrtimer_restart tp_urecv_timeout(struct hrtimer *timer)
{
	struct tp_urecv *u = container_of(timer, struct tp_urecv, timer);

	/* Seen by the task work when it was already scheduled. */
	WRITE_ONCE(u->timed_out, true);
	tp_urecv_fire(u);
	return HRTIMER_NORESTART;
}

static void tp_urecv_free(struct tp_urecv *u)
{
	tp_region_put(u->dst);
	kfree(u->key);
	kfree(u);
}

/* Post the RECV's CQE: res is 0, the new region's handle, or -errno. */
static void tp_urecv_done(struct tp_urecv *u, int err, unsigned int issue_flags)
{
	struct io_uring_cmd *cmd = u->cmd;
	u64 len = (!err || err == -EMSGSIZE) ? u->arg.len : 0;
	int res = err;

	if (!err && (u->arg.flags & TP_RECV_DONATE))
		res = u->arg.region;
	if (err)
		tp_stat_error(err);
	tp_urecv_free(u);
	io_uring_cmd_done(cmd, res, len, issue_flags);
}

/*
 * Re-arm after a SEND was claimed by another consumer first.  Caller holds
 * the domain's lock.  Return: true when the RECV waits again, false when its
 * timeout passed meanwhile.
 */
static bool tp_urecv_rearm(struct tp_urecv *u)
{
	if (READ_ONCE(u->timed_out))
		return false;
	u->w.event = 0;
	atomic_set(&u->state, TP_UR_WAITING);
	/* Order against the timer: it sets timed_out, then tries to fire. */
	smp_mb__after_atomic();
	if (!READ_ONCE(u->timed_out))
		return true;
	/* The timer lost its cmpxchg to us; whoever wins now finishes. */
	return atomic_cmpxchg(&u->state, TP_UR_WAITING, TP_UR_FIRED) !=
	       TP_UR_WAITING;
}

/* Task work: end the wait, or deliver the tensor, in the submitter's task. */
static void tp_urecv_task(struct io_uring_cmd *cmd, unsigned int issue_flags)
{
	struct tp_urecv *u = tp_pdu_get(cmd);
	struct tp_endpoint *ep = u->ep;
	struct tp_domain *dom = tp_endpoint_domain(ep);
	struct tp_slot *slot = NULL;
	int err;

	mutex_lock(&dom->lock);
	err = u->w.event;
	/*
	 * Nobody would see the CQE (or io_uring runs us from its fallback
	 * worker because the submitter is gone): take nothing.
	 */
	if (err >= 0 && (current != cmd_to_io_kiocb(cmd)->task ||
			 tp_uring_orphaned(cmd)))
		err = -ECANCELED;
	if (err >= 0) {
		err = tp_recv_claim(dom, u->key, u->arg.key_len, u->w.hash,
				    &u->arg, &slot);
		if (err == -EAGAIN) {
			if (tp_urecv_rearm(u)) {
				mutex_unlock(&dom->lock);
				return;
			}
			err = -ETIMEDOUT;
		}
	}
	hash_del(&u->w.node);
	dom->nr_waiters--;
	list_del(&u->node);
	mutex_unlock(&dom->lock);

	hrtimer_cancel(&u->timer);
	if (!err)
		err = tp_recv_deliver(dom, ep, slot, u->dst, &u->arg);
	tp_urecv_done(u, err, issue_flags);
}

static int tp_uring_recv(struct tp_endpoint *ep, struct io_uring_cmd *cmd,
			 const struct tp_recv *arg, unsigned int issue_flags)
{
	struct tp_domain *dom;
	struct tp_slot *slot;
	struct tp_urecv *u;
	int err;

	u = kzalloc(sizeof(*u), GFP_KERNEL_ACCOUNT);
	if (!u)
		return -ENOMEM;
	u->arg = *arg;
	err = tp_recv_check(ep, &u->arg, &u->dst);
	if (err)
		goto free;
	u->key = tp_key_copy(u->arg.key_ptr, u->arg.key_len);
	if (IS_ERR(u->key)) {
		err = PTR_ERR(u->key);
		u->key = NULL;
		goto free;
	}
	u->cmd = cmd;
	u->ep = ep;
	u->w.ep = ep;
	u->w.key = u->key;
	u->w.key_len = u->arg.key_len;
	u->w.hash = tp_key_hash(u->key, u->arg.key_len);
	u->w.wake = tp_urecv_wake;
	hrtimer_init(&u->timer, CLOCK_MONOTONIC, HRTIMER_MODE_REL);
	u->timer.function = tp_urecv_timeout;
	dom = tp_endpoint_domain(ep);

	mutex_lock(&dom->lock);
	err = tp_recv_claim(dom, u->key, u->arg.key_len, u->w.hash, &u->arg,
			    &slot);
	if (err == -EAGAIN && !(u->arg.flags & TP_RECV_NONBLOCK)) {
		tp_pdu_set(cmd, u);
		atomic_set(&u->state, TP_UR_WAITING);
		hash_add(dom->waiters, &u->w.node, u->w.hash);
		dom->nr_waiters++;
		list_add_tail(&u->node, &ep->urecvs);
		if (u->arg.timeout_ns)
			hrtimer_start(&u->timer,
				      ns_to_ktime(min_t(u64, u->arg.timeout_ns,
							KTIME_MAX)),
				      HRTIMER_MODE_REL);
		mutex_unlock(&dom->lock);
		tp_uring_arm_monitor(ep);
		return -EIOCBQUEUED;
	}
	mutex_unlock(&dom->lock);
	if (!err)
		err = tp_recv_deliver(dom, ep, slot, u->dst, &u->arg);
	/* Completed here too, so that the CQE carries the length. */
	tp_urecv_done(u, err, issue_flags);
	return -EIOCBQUEUED;

free:
	tp_urecv_free(u);
	return err;
}

/**
 * tp_uring_cmd() - the .uring_cmd handler of /dev/tensorpipe.
 * @cmd:	the command; cmd_op is TP_IOC_SEND, TP_IOC_RECV or
 *		TP_IOC_CANCEL and the SQE128 command area holds its struct.
 * @issue_flags: io_uring's IO_URING_F_* flags.
 *
 * Return: -EIOCBQUEUED when the CQE is posted later (or was posted here),
 * else the CQE's result: 0, the CANCEL count, or a negative errno.
 */
int tp_uring_cmd(struct io_uring_cmd *cmd, unsigned int issue_flags)
{
	struct tp_endpoint *ep = cmd->file->private_data;
	union {
		struct tp_send send;
		struct tp_recv recv;
		struct tp_cancel cancel;
	} a;
	int err;

	BUILD_BUG_ON(sizeof(a) > 80);
	if (!(issue_flags & IO_URING_F_SQE128))
		return -EINVAL;
	if (current->mm != ep->mm)
		return -EPERM;

	switch (cmd->cmd_op) {
	case TP_IOC_SEND:
		memcpy(&a.send, cmd->cmd, sizeof(a.send));
		err = tp_send(ep, &a.send, cmd);
		break;
	case TP_IOC_RECV:
		memcpy(&a.recv, cmd->cmd, sizeof(a.recv));
		return tp_uring_recv(ep, cmd, &a.recv, issue_flags);
	case TP_IOC_CANCEL:
		memcpy(&a.cancel, cmd->cmd, sizeof(a.cancel));
		err = tp_cancel(ep, &a.cancel);
		if (!err)
			return a.cancel.count;
		break;
	default:
		return -EOPNOTSUPP;
	}
	if (err) {
		tp_stat_error(err);
		return err;
	}
	return -EIOCBQUEUED;
}

/**
 * tp_uring_monitor() - fail io_uring commands whose task or ring went away.
 * @work:	the endpoint's monitor.
 *
 * Re-arms itself while any io_uring command of the endpoint is pending.
 */
void tp_uring_monitor(struct work_struct *work)
{
	struct tp_endpoint *ep = container_of(to_delayed_work(work),
					      struct tp_endpoint, monitor);
	struct tp_domain *dom = tp_endpoint_domain(ep);
	struct tp_slot *slot, *tmp;
	struct tp_urecv *u;
	LIST_HEAD(orphans);
	bool pending = false;

	if (!dom)
		return;
	mutex_lock(&dom->lock);
	list_for_each_entry(u, &ep->urecvs, node) {
		if (tp_uring_orphaned(u->cmd))
			tp_waiter_signal(&u->w, -ECANCELED);
		else
			pending = true;
	}
	list_for_each_entry_safe(slot, tmp, &ep->sends, ep_node) {
		if (!slot->cmd)
			continue;
		if (slot->claimed || !tp_uring_orphaned(slot->cmd)) {
			pending = true;
			continue;
		}
		hash_del(&slot->node);
		list_move_tail(&slot->ep_node, &orphans);
		dom->nr_slots--;
	}
	mutex_unlock(&dom->lock);

	list_for_each_entry_safe(slot, tmp, &orphans, ep_node) {
		list_del_init(&slot->ep_node);
		tp_stat_add(TP_STAT_PENDING_SLOTS, -1);
		tp_slot_complete(slot, -ECANCELED, 0);
	}
	if (pending)
		tp_uring_arm_monitor(ep);
}
