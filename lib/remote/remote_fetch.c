// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Receives of tensors that another worker keeps: a REQ with the receive's
 * capacity goes to the source's worker, and its one RESP decides the
 * result.  The RESP's tensor is read straight into the receive's memory
 * (or a new buffer for recv_buffer).  Cancel and timeout send a CANCEL and
 * still wait for the RESP, so that a tensor already on its way is
 * delivered rather than lost, for at most REMOTE_CANCEL_GRACE_NS (the
 * receive then ends and its fetch is abandoned: a peer that does not
 * answer cannot hold the caller).  Abort, destroy and the pipe's end complete
 * the receive at once, unless its RESP's tensor is being read into its
 * memory (then when the read is over); the fetch is then abandoned and a
 * RESP that still comes is read into a scratch buffer and dropped.  A
 * fetch whose worker does not answer yet waits, parked on its map entry,
 * for the next connect.
 *
 * A fetch is created on the caller's thread and lives on the context
 * thread from its start task on.
 */
#include <stdlib.h>
#include <string.h>

#include "remote.h"

static void fetch_unref(struct remote_fetch *f)
{
	struct remote *st = f->st;

	if (--f->refs)
		return;
	/* Kept for the next receive (its caller's thread takes it under the lock). */
	pthread_mutex_lock(&st->lock);
	tpu__free_list_put(&st->fetch_free, f);
	pthread_mutex_unlock(&st->lock);
	tpu__remote_put(st);
}

/* Under st->lock: a zeroed fetch, recycled if one is kept. */
static struct remote_fetch *fetch_get(struct remote *st)
{
	struct remote_fetch *f = tpu__free_list_take(&st->fetch_free, 0);

	if (!f)
		return calloc(1, sizeof(*f));
	memset(f, 0, sizeof(*f));
	return f;
}

void tpu__remote_fetch_taken(struct remote_fetch *f)
{
	fetch_unref(f);
}

/*
 * ctx thread: a push of @f's key waits in the inbox: its op takes that,
 * and @f, which asked nothing yet, goes (true).  Looked at again here,
 * not only when the receive was posted: a push that came in between is
 * answered by no REQ of ours, and would wait there for ever.
 */
static bool fetch_from_inbox(struct remote_fetch *f)
{
	struct remote *st = f->st;
	bool taken;

	pthread_mutex_lock(&st->lock);
	taken = st->inbox && tpu__remote_inbox_take(st, f->op);
	pthread_mutex_unlock(&st->lock);
	if (!taken)
		return false;
	f->op = NULL;
	if (f->timer_on)
		tpu__ctx_timer_cancel(st->pctx, &f->timer);
	fetch_unref(f);
	return true;
}

static void op_end(struct tpu__op *op, tpu_status status, size_t len)
{
	tpu__remote_op_done(op, status, len);
}

/* Take @f out of @head's list. */
static void unlink_from(struct remote_fetch **head, struct remote_fetch *f)
{
	struct remote_fetch **pp;

	for (pp = head; *pp; pp = &(*pp)->next) {
		if (*pp == f) {
			*pp = f->next;
			break;
		}
	}
}

bool tpu__remote_fetch_unhold(struct remote_fetch *f)
{
	if (!f->withheld)
		return false;
	f->withheld = false;
	atomic_fetch_sub_explicit(&f->st->nwithheld, 1, memory_order_relaxed);
	return true;
}

void tpu__remote_fetch_end(struct remote_fetch *f, tpu_status status)
{
	struct remote_peer *p = f->peer;
	struct remote_fetch **pp;

	tpu__remote_fetch_unhold(f);
	if (f->op && f->reading) {
		/* The pipe writes into the op's memory: resp_done completes it. */
		if (!f->ended)
			f->ended = status;
	} else if (f->op) {
		op_end(f->op, status, 0);
		f->op = NULL;
	}
	if (f->timer_on)
		tpu__ctx_timer_cancel(f->st->pctx, &f->timer);
	if (f->grace_on)
		tpu__ctx_timer_cancel(f->st->pctx, &f->grace);
	if (f->parked) {
		unlink_from(&f->task->parked, f);
		f->parked = false;
		fetch_unref(f);	/* the list's */
		return;
	}
	if (!p)
		return;
	for (pp = &p->fetches; *pp; pp = &(*pp)->next) {
		if (*pp == f) {
			*pp = f->next;
			break;
		}
	}
	if (f->abandoned) {
		f->abandoned = false;
		p->nabandoned--;
	}
	f->peer = NULL;
	tpu__remote_peer_unref(p);
	fetch_unref(f);	/* the list's */
}

static void fetch_grace_over(void *arg, tpu_status status);

/* ctx thread: (re)start @f's grace timer for @ns; false if it could not. */
static bool fetch_grace_start(struct remote_fetch *f, uint64_t ns)
{
	f->grace.fn = fetch_grace_over;
	f->grace.arg = f;
	if (tpu__ctx_timer_start(f->st->pctx, &f->grace, ns))
		return false;
	f->grace_on = true;
	f->refs++;
	return true;
}

/*
 * ctx thread: @f's RESP is still being read into its receive's memory
 * when the grace is over.  The receive cannot end while the pipe writes
 * there; a peer that sends part of a tensor and stops would hold it for
 * ever.  So the read gets st->stall_ns more, and then the pipe ends,
 * which ends the read and the receive (-ETIMEDOUT or -ECANCELED).
 */
static void fetch_read_stalled(struct remote_fetch *f)
{
	struct remote_peer *p = f->peer;

	if (!p || p->dead)
		return;
	if (!f->read_stall) {
		f->read_stall = true;
		if (fetch_grace_start(f, f->st->stall_ns))
			return;
	}
	tpu__log_debug("remote rendezvous %s: an answer still being read %llu ms after its "
		       "receive's grace: the peer stopped writing; ending its pipe", f->st->self,
		       (unsigned long long)(f->st->stall_ns / 1000000ull));
	/* Kept by the fetch's end: the other receives on that pipe hear it gone. */
	if (!f->ended)
		f->ended = f->timed_out ? -ETIMEDOUT : -ECANCELED;
	tpu__remote_peer_end(p, tpu__remote_gone(f->st));
}

/*
 * ctx thread: @f's receive ended without its RESP, and @f stays on its
 * pipe for that RESP.  Past REMOTE_ABANDONED_MAX of them the pipe ends.
 */
static void fetch_abandon(struct remote_fetch *f)
{
	struct remote_peer *p = f->peer;

	if (!p || p->dead)
		return;
	f->abandoned = true;
	if (++p->nabandoned <= REMOTE_ABANDONED_MAX)
		return;
	tpu__log_debug("remote rendezvous %s: %u receives ended with their CANCELs unanswered "
		       "on one pipe: ending it", f->st->self, p->nabandoned);
	tpu__remote_peer_end(p, tpu__remote_gone(f->st));
}

/*
 * ctx thread: no RESP came within the grace after @f's CANCEL: its
 * receive ends, and @f stays on its pipe, abandoned, for a RESP that
 * still comes.  One being read ends when the read does, or when its pipe
 * ends for a stalled read (fetch_read_stalled).
 */
static void fetch_grace_over(void *arg, tpu_status status)
{
	struct remote_fetch *f = arg;

	f->grace_on = false;
	if (!status && f->op && f->reading) {
		fetch_read_stalled(f);
	} else if (!status && f->op) {
		tpu__log_debug("remote rendezvous %s: no answer to a CANCEL within %llu ms: the "
			       "receive ends", f->st->self, REMOTE_CANCEL_GRACE_NS / 1000000ull);
		if (f->parked) {
			tpu__remote_fetch_end(f, f->timed_out ? -ETIMEDOUT : -ECANCELED);
		} else {
			op_end(f->op, f->timed_out ? -ETIMEDOUT : -ECANCELED, 0);
			f->op = NULL;
			fetch_abandon(f);
		}
	}
	fetch_unref(f);
}

/* ctx thread: send @f's CANCEL on its pipe, and bound the wait for the RESP. */
static void fetch_cancel_send(struct remote_fetch *f)
{
	struct remote_hdr h = { .type = REMOTE_CANCEL, .id = f->id };
	struct remote_peer *p = f->peer;

	f->cancel_sent = true;
	if (!f->grace_on)
		fetch_grace_start(f, REMOTE_CANCEL_GRACE_NS);
	tpu__remote_peer_send(p, &h);
}

static void fetch_timeout(void *arg, tpu_status status)
{
	struct remote_fetch *f = arg;

	f->timer_on = false;
	if (!status && f->op && (f->parked || f->withheld)) {
		/* No REQ is out: nothing can be on its way. */
		tpu__remote_fetch_end(f, -ETIMEDOUT);
	} else if (!status && f->op && f->peer) {
		f->timed_out = true;
		if (!f->cancel_sent)
			fetch_cancel_send(f);
	}
	fetch_unref(f);
}

/* Send @f's REQ on its pipe @p (REQ_SEEN in the push protocol, after the credits owed). */
static void fetch_req(struct remote_fetch *f, struct remote_peer *p)
{
	struct remote_hdr h = { .type = REMOTE_REQ, .id = f->id, .len = f->cap,
				.key = f->op->key, .key_len = f->op->key_len };

	if (p->push) {
		h.type = REMOTE_REQ_SEEN;
		h.seq = p->seen_seq;
		f->asked_seen = true;
		f->seen_seq = p->seen_seq;
		tpu__remote_credit_flush(p);
	}
	tpu__remote_peer_send(p, &h);
}

/*
 * Whether @f holds its REQ back on @p (REMOTE_CREDIT_BATCH in remote.h):
 * a waiter spins for it (a direct op: recv_wait), @p's other end pushed
 * to us before, the receive is small enough to be pushed, and its window
 * is far from full as far as we can tell.
 */
static bool fetch_withholds(const struct remote_fetch *f, const struct remote_peer *p)
{
	return f->op->direct && p->push && p->seen_seq && f->cap <= REMOTE_PUSH_MAX &&
	       p->inbox_n + p->ncredit_due < REMOTE_PUSH_WINDOW / 2 && !f->st->destroyed;
}

/* Hang @f on @p and send its REQ, or hold it back. */
static void fetch_ask(struct remote_fetch *f, struct remote_peer *p)
{
	struct remote *st = f->st;

	tpu__remote_peer_ref(p);
	f->peer = p;
	f->next = p->fetches;
	p->fetches = f;
	f->key_hash = f->op->key_hash;
	f->key_len = f->op->key_len;
	f->cap = f->op->tensor.len;
	if (fetch_withholds(f, p)) {
		f->withheld = true;
		atomic_fetch_add_explicit(&st->nwithheld, 1, memory_order_relaxed);
		st->push_stats.withheld++;
		/*
		 * Its waiter may have gone to sleep before this ran (on pctx's
		 * thread): woken, it sleeps again through r_wait_sleep, which
		 * sends this REQ.
		 */
		tpu__remote_waiters_kick(st);
		return;
	}
	fetch_req(f, p);
}

void tpu__remote_withheld_flush(struct remote *st)
{
	struct remote_peer *p, *pnext;
	struct remote_fetch *f, *fnext;

	if (st->destroyed)
		return;
	for (p = st->peers; p; p = pnext) {
		tpu__remote_peer_ref(p);
		tpu__remote_credit_flush(p);
		for (f = p->fetches; f && !p->dead; f = fnext) {
			fnext = f->next;
			if (f->reading || !tpu__remote_fetch_unhold(f))
				continue;
			st->push_stats.swept++;
			fetch_req(f, p);
		}
		pnext = p->next;
		tpu__remote_peer_unref(p);
	}
}

void tpu__remote_fetch_park(struct remote_fetch *f)
{
	struct remote_peer *p = f->peer;

	tpu__remote_fetch_unhold(f);
	unlink_from(&p->fetches, f);
	f->peer = NULL;
	tpu__remote_peer_unref(p);
	f->parked = true;
	f->next = f->task->parked;
	f->task->parked = f;
}

void tpu__remote_fetch_unpark(struct remote_task *t, struct remote_peer *p, tpu_status status)
{
	struct remote_fetch *list = t->parked, *f;

	t->parked = NULL;
	while ((f = list)) {
		list = f->next;
		f->parked = false;
		if (fetch_from_inbox(f))
			continue;
		if (p && !p->dead) {
			fetch_ask(f, p);
			continue;
		}
		/* Not asked again: it ends here, as tpu__remote_fetch_end() would. */
		op_end(f->op, status, 0);
		f->op = NULL;
		if (f->timer_on)
			tpu__ctx_timer_cancel(f->st->pctx, &f->timer);
		fetch_unref(f);
	}
}

static void fetch_timer_start(struct remote_fetch *f)
{
	if (!f->op->timeout_ns)
		return;
	f->timer.fn = fetch_timeout;
	f->timer.arg = f;
	if (!tpu__ctx_timer_start(f->st->pctx, &f->timer, f->op->timeout_ns)) {
		f->timer_on = true;
		f->refs++;
	}
}

static void fetch_start(struct tpu__task *t)
{
	struct remote_fetch *f = tpu__container_of(t, struct remote_fetch, start);
	struct remote *st = f->st;
	struct remote_peer *p = NULL;
	tpu_status err = 0;

	if (fetch_from_inbox(f))
		return;
	pthread_mutex_lock(&st->lock);
	if (st->aborted || st->closing)
		err = st->aborted ? st->aborted : TPU_E_CLOSED;
	pthread_mutex_unlock(&st->lock);
	if (!err && !f->task->retry_on)
		p = tpu__remote_peer_for(st, f->task, &err);
	if (!p && f->task->retry_on && (!err || err == TPU_E_PEER_GONE)) {
		/* The worker does not answer yet: wait for the next try with the others. */
		f->parked = true;
		f->next = f->task->parked;
		f->task->parked = f;
		fetch_timer_start(f);
		return;
	}
	if (!p) {
		tpu__log_debug("remote rendezvous %s: no pipe to %s: %s", st->self, f->task->task,
			       tpu_strerror(err));
		/* The abort status and TPU_E_CLOSED as they are; a failed connect is a peer gone. */
		if (err != -ENOMEM && err >= -TPU_ERRNO_MAX && err != st->abort_status)
			err = TPU_E_PEER_GONE;
		op_end(f->op, err, 0);
		f->op = NULL;
		fetch_unref(f);
		return;
	}
	fetch_timer_start(f);
	fetch_ask(f, p);
}

tpu_status tpu__remote_fetch_recv(struct remote *st, struct tpu__op *op, struct tpu_str src)
{
	struct remote_fetch *f = NULL;
	struct remote_task *t;
	tpu_status err = 0;
	bool taken = false;

	pthread_mutex_lock(&st->lock);
	t = tpu__remote_task_find(st, src.ptr, src.len);
	if (st->aborted || st->closing)
		err = st->aborted ? st->aborted : TPU_E_CLOSED;
	else if (!t)
		err = -EHOSTUNREACH;
	else if (st->inbox && tpu__remote_inbox_take(st, op))
		taken = true;
	else if (!(f = fetch_get(st)))
		err = -ENOMEM;
	else
		f->id = ++st->next_id;
	pthread_mutex_unlock(&st->lock);
	if (err) {
		if (err == -EHOSTUNREACH)
			tpu__log_debug("remote rendezvous %s: %.*s is not in the cluster map",
				       st->self, (int)src.len, src.ptr);
		return err;
	}
	if (taken)
		return 0;
	f->st = st;
	tpu__remote_get(st);
	f->task = t;
	f->op = op;
	f->refs = 1;
	f->start.fn = fetch_start;
	tpu__remote_defer(st, &f->start);
	return 0;
}

static struct remote_fetch *fetch_find(struct remote_peer *p, uint64_t id)
{
	struct remote_fetch *f;

	for (f = p->fetches; f; f = f->next)
		if (f->id == id)
			return f;
	return NULL;
}

tpu_status tpu__remote_fetch_resp_desc(struct remote_peer *p, struct tpu_message *desc)
{
	static uint8_t empty[1];
	struct remote_fetch *f = fetch_find(p, p->cur.id);
	struct tpu_message_tensor *t;
	struct tpu__op *op;

	p->cur_fetch = f;
	if (f) {
		/* Until resp_done: the fetch may end meanwhile, its op may not. */
		f->reading = true;
		f->refs++;
	}
	if (desc->ntensors != 1)
		return 0;
	t = &desc->tensors[0];
	/*
	 * Only an answer to a REQ of ours, with a tensor no longer than that
	 * REQ allowed, is read: anything else would make us take memory of
	 * the peer's choosing (a fetch abandoned by abort or destroy is no
	 * longer known, and its late answer ends the pipe too).
	 */
	if (!f || p->cur.status || t->len > f->cap) {
		tpu__log_debug("remote rendezvous %s: refusing an answer of %llu bytes %s",
			       p->st->self, (unsigned long long)t->len,
			       !f ? "to no request" : p->cur.status ? "with an error" :
			       "over its request's length");
		if (f && !f->ended)
			f->ended = -EPROTO;
		return -EPROTO;
	}
	op = f->op;
	if (op && op->kind == TPU__OP_RECV) {
		t->data = t->len ? op->tensor.data : empty;
		return 0;
	}
	/* recv_buffer (at most the length it stated), or abandoned: a new buffer. */
	t->data = NULL;
	t->flags = TPU_TENSOR_WANT_BUFFER;
	return 0;
}

void tpu__remote_fetch_resp_done(struct remote_peer *p, tpu_status status, struct tpu_message *msg)
{
	struct remote_fetch *f = p->cur_fetch;
	struct tpu_buffer *buf = NULL;
	struct tpu__op *op;
	tpu_status res = p->cur.status;
	size_t len = p->cur.len;

	p->cur_fetch = NULL;
	if (msg && msg->ntensors == 1 && (msg->tensors[0].flags & TPU_TENSOR_WANT_BUFFER))
		buf = msg->tensors[0].buffer;
	if (!f) {
		/* Nobody asked (abandoned): drop what came. */
		tpu_buffer_free(buf);
		return;
	}
	f->reading = false;
	op = f->op;
	if (!op) {
		/* Abandoned: its late RESP, dropped, frees it (as any RESP does). */
		tpu_buffer_free(buf);
		if (f->peer == p)
			tpu__remote_fetch_end(f, 0);
		fetch_unref(f);
		return;
	}
	if (status) {
		/* The read failed; the pipe is ending (or what ended the fetch says why). */
		res = f->ended ? f->ended : tpu__remote_gone(p->st);
	} else if (res == TPU_E_CLOSED) {
		/* The producer's rendezvous closed before it could answer: to us it is gone. */
		res = TPU_E_PEER_GONE;
	} else if (!res && (!msg || msg->ntensors != 1)) {
		res = -EPROTO;
	}
	if (!res && op->kind == TPU__OP_RECV_BUFFER) {
		op->out_buffer = buf;
		buf = NULL;
	} else if (!res && buf) {
		/* Bigger than the capacity the REQ gave: the peer broke the protocol. */
		res = -EPROTO;
	}
	tpu_buffer_free(buf);
	if (res == -ECANCELED && f->timed_out)
		res = -ETIMEDOUT;
	if (res && res != -EMSGSIZE)
		len = 0;
	op_end(op, res, len);
	f->op = NULL;
	/* Still on the peer's list unless something ended it during the read. */
	if (f->peer == p)
		tpu__remote_fetch_end(f, 0);
	fetch_unref(f);	/* the read's */
}

struct cancel_task {
	struct tpu__task task;
	struct remote *st;
	size_t key_len;
	uint8_t key[];
};

static void cancel_run(struct tpu__task *t)
{
	struct cancel_task *c = tpu__container_of(t, struct cancel_task, task);
	struct remote *st = c->st;
	struct remote_peer *p, *pnext;
	struct remote_fetch *f, *fnext;

	for (p = st->peers; p; p = pnext) {
		tpu__remote_peer_ref(p);
		tpu__remote_peer_watch_sends(p, c->key, c->key_len);
		for (f = p->fetches; f; f = fnext) {
			fnext = f->next;
			if (!f->op || f->cancel_sent || f->op->key_len != c->key_len ||
			    memcmp(f->op->key, c->key, c->key_len))
				continue;
			if (f->withheld) {
				/* No REQ is out: nothing can be on its way. */
				tpu__remote_fetch_end(f, -ECANCELED);
				continue;
			}
			fetch_cancel_send(f);
			/* A failed write ended the peer and every fetch with it. */
			if (p->dead)
				break;
		}
		pnext = p->next;
		tpu__remote_peer_unref(p);
	}
	/* Parked ones have no REQ out: they end here. */
	for (struct remote_task *task = tpu__remote_tasks(st); task; task = task->next) {
		for (f = task->parked; f; f = fnext) {
			fnext = f->next;
			if (f->op->key_len == c->key_len && !memcmp(f->op->key, c->key, c->key_len))
				tpu__remote_fetch_end(f, -ECANCELED);
		}
	}
	free(c);
	tpu__remote_put(st);
}

int tpu__remote_fetch_cancel(struct remote *st, const uint8_t *key, size_t key_len)
{
	struct cancel_task *c = malloc(sizeof(*c) + key_len);

	if (!c)
		return -ENOMEM;
	c->task.fn = cancel_run;
	c->st = st;
	tpu__remote_get(st);
	c->key_len = key_len;
	memcpy(c->key, key, key_len);
	tpu__ctx_defer(st->pctx, &c->task);
	return 1;
}

void tpu__remote_fetch_fail_all(struct remote *st, tpu_status status)
{
	struct remote_peer *p;
	struct remote_task *t;

	for (p = st->peers; p; p = p->next)
		while (p->fetches)
			tpu__remote_fetch_end(p->fetches, status);
	for (t = tpu__remote_tasks(st); t; t = t->next)
		while (t->parked)
			tpu__remote_fetch_end(t->parked, status);
}
