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
 * A command whose task exits or execs, or whose ring is closed, must end,
 * or io_uring waits for it forever.  Where the kernel cancels uring_cmds
 * itself (6.7 and later, found by conftest.sh), waiting SENDs and RECVs are
 * marked cancelable and io_uring calls the handler with IO_URING_F_CANCEL.
 * Elsewhere, as ublk did there, a delayed work per endpoint polls, while
 * commands are pending, for an exiting task or a dying ring.  Either way
 * the command ends with -ECANCELED and its SEND is withdrawn.
 */
#include <linux/hrtimer.h>
#include <linux/io_uring_types.h>
#include <linux/percpu-refcount.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include "tp_compat.h"
#include "tp_internal.h"

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
 * Whether @task, the submitter of a command of @ep being ended, is its
 * member's process dying: its commands end before the descriptor table
 * goes, so before tp_domain_member_died() sets @ep->died.  A thread that
 * leaves a live process, or an exec, is no death.
 */
static bool tp_uring_member_dying(struct tp_endpoint *ep,
				  struct task_struct *task)
{
	if (ep->died)
		return true;
	return ep->member && (task->flags & PF_EXITING) &&
	       task_tgid(task) == ep->tgid &&
	       ((task->signal->flags & SIGNAL_GROUP_EXIT) ||
		thread_group_empty(task));
}

#ifdef TP_URING_KERNEL_CANCELS
static void tp_uring_watch(struct tp_endpoint *ep, struct io_uring_cmd *cmd,
			   unsigned int issue_flags)
{
	/* Before the command is visible: io_uring's lock nests outside ours. */
	io_uring_cmd_mark_cancelable(cmd, issue_flags);
}

static void tp_uring_arm_monitor(struct tp_endpoint *ep)
{
}

/* Task work for a task that is gone takes nothing: nobody sees its CQE. */
static bool tp_uring_task_gone(struct io_uring_cmd *cmd,
			       unsigned int issue_flags)
{
#ifdef TP_HAVE_URING_F_TASK_DEAD
	return issue_flags & IO_URING_F_TASK_DEAD;
#else
	return current->flags & (PF_EXITING | PF_KTHREAD);
#endif
}
#else
/*
 * The command can never complete normally: its task exits, or execs, or its
 * ring is being closed.  io_uring marks a task in_idle while it cancels the
 * task's requests (exec and exit), and waits there for ours.  Without the
 * kernel's cancellation there is no other way to know than to look.
 */
static bool tp_uring_orphaned(struct io_uring_cmd *cmd)
{
	struct io_kiocb *req = cmd_to_io_kiocb(cmd);
	struct io_uring_task *tctx = req->task->io_uring;

#ifdef TP_HAVE_TCTX_IN_CANCEL
	if (tctx && atomic_read(&tctx->in_cancel))
		return true;
#else
	if (tctx && atomic_read(&tctx->in_idle))
		return true;
#endif
	return (req->task->flags & PF_EXITING) ||
	       percpu_ref_is_dying(&req->ctx->refs);
}

static void tp_uring_watch(struct tp_endpoint *ep, struct io_uring_cmd *cmd,
			   unsigned int issue_flags)
{
}

#define TP_URING_MONITOR_PERIOD	(HZ / 10)

static void tp_uring_arm_monitor(struct tp_endpoint *ep)
{
	schedule_delayed_work(&ep->monitor, TP_URING_MONITOR_PERIOD);
}

/*
 * io_uring runs the task work from its fallback worker when the submitter
 * is gone.
 */
static bool tp_uring_task_gone(struct io_uring_cmd *cmd,
			       unsigned int issue_flags)
{
	return current != cmd_to_io_kiocb(cmd)->task ||
	       tp_uring_orphaned(cmd);
}
#endif

/*
 * Every CQE of the module is posted here.  A result is 0, a count or handle,
 * or an errno of <errno.h>: the kernel's internal codes (from 512 up) mean
 * something else to io_uring and must never reach it.
 */
static void tp_uring_complete(struct io_uring_cmd *cmd, int res, u64 res2,
			      unsigned int issue_flags)
{
	if (WARN_ON_ONCE(res < -TP_ERRNO_MAX))
		res = -EIO;
	if (res < 0)
		tp_stat_error(res);
	io_uring_cmd_done(cmd, res, res2, issue_flags);
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
	tp_uring_complete(cmd, status, len, issue_flags);
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
	tp_user_op_put(u->ep->owner);
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
	tp_urecv_free(u);
	tp_uring_complete(cmd, res, len, issue_flags);
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
	if (err >= 0 && tp_uring_task_gone(cmd, issue_flags))
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

	err = tp_user_op_get(ep->owner);
	if (err)
		return err;
	u = kzalloc(sizeof(*u), GFP_KERNEL_ACCOUNT);
	if (!u) {
		tp_user_op_put(ep->owner);
		return -ENOMEM;
	}
	u->ep = ep;
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

/*
 * Issue one command.  Return: -EIOCBQUEUED when its CQE is posted later (or
 * was posted here), else the CQE's result.
 */
static int tp_uring_issue(struct io_uring_cmd *cmd, unsigned int issue_flags)
{
	struct tp_endpoint *ep = cmd->file->private_data;
	union {
		struct tp_send send;
		struct tp_recv recv;
		struct tp_cancel cancel;
		struct tp_copy copy;
	} a;
	int err;

	BUILD_BUG_ON(sizeof(a) > 80);
	if (!(issue_flags & IO_URING_F_SQE128))
		return -EINVAL;
	if (current->mm != ep->mm)
		return -EPERM;

	switch (cmd->cmd_op) {
	case TP_IOC_SEND:
		memcpy(&a.send, tp_uring_cmd_payload(cmd), sizeof(a.send));
		tp_uring_watch(ep, cmd, issue_flags);
		err = tp_send(ep, &a.send, cmd);
		return err ? err : -EIOCBQUEUED;
	case TP_IOC_RECV:
		memcpy(&a.recv, tp_uring_cmd_payload(cmd), sizeof(a.recv));
		tp_uring_watch(ep, cmd, issue_flags);
		return tp_uring_recv(ep, cmd, &a.recv, issue_flags);
	case TP_IOC_CANCEL:
		memcpy(&a.cancel, tp_uring_cmd_payload(cmd), sizeof(a.cancel));
		err = tp_cancel(ep, &a.cancel);
		return err ? err : a.cancel.count;
	case TP_IOC_COPY:
		/* Copied here and now, in the submitter's context. */
		memcpy(&a.copy, tp_uring_cmd_payload(cmd), sizeof(a.copy));
		return tp_grant_copy(ep, &a.copy);
	}
	return -EOPNOTSUPP;
}

#ifdef TP_URING_KERNEL_CANCELS
/*
 * IO_URING_F_CANCEL: io_uring asks, holding its ring lock, that a command
 * end because its task exits or execs or its ring closes.  It asks again
 * until the CQE is posted, so this only starts the end: a waiting RECV is
 * signalled as CANCEL does it, a pending SEND is withdrawn, and their task
 * work posts the CQE.  A SEND being delivered ends when the delivery does.
 */
static void tp_uring_cancel(struct io_uring_cmd *cmd)
{
	struct tp_endpoint *ep = cmd->file->private_data;
	struct tp_domain *dom = tp_endpoint_domain(ep);
	struct tp_slot *slot, *gone = NULL;
	struct tp_urecv *u;

	if (!dom)
		return;
	mutex_lock(&dom->lock);
	list_for_each_entry(u, &ep->urecvs, node) {
		if (u->cmd == cmd)
			tp_waiter_signal(&u->w, -ECANCELED);
	}
	list_for_each_entry(slot, &ep->sends, ep_node) {
		if (slot->cmd == cmd && !slot->claimed) {
			if (tp_uring_member_dying(ep, current))
				tp_domain_orphan_add(dom, slot->key,
						     slot->key_len, slot->hash);
			tp_slot_unpublish(dom, slot, NULL);
			gone = slot;
			break;
		}
	}
	mutex_unlock(&dom->lock);
	if (gone)
		tp_slot_complete(gone, -ECANCELED, 0);
}

/**
 * tp_uring_endpoint_init() - io_uring state of a new endpoint.
 * @ep:		the endpoint.
 */
void tp_uring_endpoint_init(struct tp_endpoint *ep)
{
}

/**
 * tp_uring_endpoint_release() - the endpoint's file is released.
 * @ep:		the endpoint; no io_uring command of it is pending, as each
 *		holds the file.
 */
void tp_uring_endpoint_release(struct tp_endpoint *ep)
{
}
#else
/*
 * tp_uring_monitor() - fail io_uring commands whose task or ring went away.
 * @work:	the endpoint's monitor.
 *
 * Re-arms itself while any io_uring command of the endpoint is pending.
 */
static void tp_uring_monitor(struct work_struct *work)
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
		if (tp_uring_member_dying(ep,
					  cmd_to_io_kiocb(slot->cmd)->task))
			tp_domain_orphan_add(dom, slot->key, slot->key_len,
					     slot->hash);
		tp_slot_unpublish(dom, slot, &orphans);
	}
	mutex_unlock(&dom->lock);

	list_for_each_entry_safe(slot, tmp, &orphans, ep_node) {
		list_del_init(&slot->ep_node);
		tp_slot_complete(slot, -ECANCELED, 0);
	}
	if (pending)
		tp_uring_arm_monitor(ep);
}

void tp_uring_endpoint_init(struct tp_endpoint *ep)
{
	INIT_DELAYED_WORK(&ep->monitor, tp_uring_monitor);
}

void tp_uring_endpoint_release(struct tp_endpoint *ep)
{
	cancel_delayed_work_sync(&ep->monitor);
}
#endif

/**
 * tp_uring_cmd() - the .uring_cmd handler of /dev/tensorpipe.
 * @cmd:	the command; cmd_op is TP_IOC_SEND, TP_IOC_RECV or
 *		TP_IOC_CANCEL and the SQE128 command area holds its struct.
 * @issue_flags: io_uring's IO_URING_F_* flags; with IO_URING_F_CANCEL, a
 *		request to end a command issued earlier.
 *
 * Every command completes through io_uring_cmd_done(), here or later, and
 * the handler always returns -EIOCBQUEUED.  What io_uring does with any
 * other return value depends on the path that issued the command: a
 * positive one (a CANCEL count) is dropped when an io-wq worker issued it,
 * so the request would never complete, and inline it fails the next request
 * of a link; -EAGAIN makes io_uring issue the command again.
 *
 * Return: -EIOCBQUEUED.
 */
int tp_uring_cmd(struct io_uring_cmd *cmd, unsigned int issue_flags)
{
	int res;

#ifdef TP_URING_KERNEL_CANCELS
	if (issue_flags & IO_URING_F_CANCEL) {
		tp_uring_cancel(cmd);
		return -EIOCBQUEUED;
	}
#endif
	res = tp_uring_issue(cmd, issue_flags);
	if (res != -EIOCBQUEUED)
		tp_uring_complete(cmd, res, 0, issue_flags);
	return -EIOCBQUEUED;
}

