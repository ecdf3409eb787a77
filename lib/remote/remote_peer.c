// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The pipes between workers.  A worker asks another for tensors only over
 * a pipe it opened itself to that task's URL in the map, and says HELLO
 * with its task first; the other end only answers on it.  So an answer is
 * taken only from the worker the key names as the producer (as far as the
 * map's URL, and with a job secret the pipe's proof, say who that is), and
 * a process that connects and claims to be a task cannot draw our requests
 * to it.  On an accepted pipe, HELLO must come first and once; its task
 * must be a valid name other than ours, and one task has one accepted pipe
 * at a time (a second claim is refused while the first lives).  Only the
 * task that HELLO named gets the tensors whose key names it as the
 * consumer, and only members (tasks in the map) may abort us.  Each pipe
 * has one read loop (descriptor, read, dispatch, next descriptor) for as
 * long as it lives.  Context thread only.
 *
 * With a job secret every pipe proved it, so an accepted pipe's HELLO is
 * a member's word, and one pipe per pair carries both directions: the
 * opener says so in its HELLO (REMOTE_HELLO_BOTH_WAYS) and then also
 * answers REQs on it; the accepting end asks that task on it instead of
 * opening a pipe of its own, and takes an answer there only for a REQ it
 * sent there (tpu__remote_fetch_resp_desc looks in this pipe's fetches).
 */
#include <stdlib.h>
#include <string.h>

#include "remote.h"

struct remote_write {
	struct remote_write *next;	/* st->write_free */
	struct remote_write *snext;	/* its peer's sending list, if it carries a send */
	bool cancelled;			/* that send was cancelled while it was written */
	struct tpu_message msg;
	struct tpu_message_tensor tensor;
	struct remote_peer *peer;
	struct tpu__op *send;		/* a RESP's send, completed with the write */
	size_t cap;			/* room in @meta */
	uint8_t meta[];
};

/* Room a write gets at least: a header and a TF key of usual length (recycled ones fit). */
#define WRITE_META_MIN	(REMOTE_KEY_CAP_MIN + 64u)

/* A zeroed write with @size bytes of metadata, recycled if one kept has room. */
static struct remote_write *write_get(struct remote *st, size_t size)
{
	struct remote_write *w = tpu__free_list_take(&st->write_free, size);
	size_t cap = size < WRITE_META_MIN ? WRITE_META_MIN : size;

	if (!w) {
		w = calloc(1, sizeof(*w) + cap);
		if (w)
			w->cap = cap;
		return w;
	}
	cap = w->cap;
	memset(w, 0, sizeof(*w));
	w->cap = cap;
	return w;
}

void tpu__remote_peer_free_lists_init(struct remote *st)
{
	tpu__free_list_init(&st->write_free, offsetof(struct remote_write, next),
			    offsetof(struct remote_write, cap), REMOTE_FREE_MAX, NULL);
}

static void read_next(struct remote_peer *p);

void tpu__remote_peer_ref(struct remote_peer *p)
{
	p->refs++;
}

void tpu__remote_peer_unref(struct remote_peer *p)
{
	struct remote *st = p->st;

	if (--p->refs)
		return;
	free(p->claim);
	free(p->cur_meta);
	free(p);
	tpu__remote_put(st);
}

/* Something came through @p: a failed connect no more. */
static void peer_established(struct remote_peer *p)
{
	p->established = true;
	if (p->task && p->task->peer == p) {
		p->task->first_try_ns = 0;
		p->task->answered = true;
	}
}

/*
 * The retry's timer ran out, or was cancelled: by a destroy, or by
 * retry_hint so that it fires now (then it is tried as if the time was up).
 */
static void retry_fire(void *arg, tpu_status status)
{
	struct remote_task *t = arg;
	struct remote *st = t->st;
	struct remote_peer *p = NULL;
	tpu_status err = TPU_E_CLOSED;
	bool early = t->retry_early;

	t->retry_on = false;
	t->retry_early = false;
	t->early_used = early;
	if ((!status || early) && !st->destroyed)
		p = tpu__remote_peer_for(st, t, &err);
	tpu__remote_fetch_unpark(t, p, err == -ENOMEM || err < -TPU_ERRNO_MAX ? err : TPU_E_PEER_GONE);
	tpu__remote_put(st);
}

/*
 * A connect to @t that never carried anything failed: the worker may not
 * have started yet.  Try again later, within REMOTE_CONNECT_NS of the first
 * try, unless the rendezvous is going away or @t answered before.
 */
static bool retry_later(struct remote *st, struct remote_task *t)
{
	uint64_t now = tpu__mono_ns();
	bool aborted;

	pthread_mutex_lock(&st->lock);
	aborted = st->aborted || st->closing;
	pthread_mutex_unlock(&st->lock);
	/*
	 * A worker that answered once and now refuses died: a receive asked
	 * of it after its death fails at once, like one that was waiting.
	 */
	if (aborted || st->destroyed || t->answered || !t->first_try_ns ||
	    now - t->first_try_ns > REMOTE_CONNECT_NS)
		return false;
	if (t->retry_on)
		return true;
	t->backoff_ns *= 2;
	if (t->backoff_ns < st->backoff_min_ns)
		t->backoff_ns = st->backoff_min_ns;
	if (t->backoff_ns > st->backoff_max_ns)
		t->backoff_ns = st->backoff_max_ns;
	t->retry.fn = retry_fire;
	t->retry.arg = t;
	tpu__remote_get(st);
	if (tpu__ctx_timer_start(st->pctx, &t->retry, t->backoff_ns)) {
		tpu__remote_put(st);
		return false;
	}
	t->retry_on = true;
	t->retries++;
	return true;
}

/*
 * An accepted pipe's HELLO named @t, whose connect waits out its back-off:
 * the worker is up now, so the retry fires at once rather than up to
 * REMOTE_BACKOFF_MAX_NS later (its fetches are parked meanwhile).  The
 * HELLO is only a hint (without a secret anyone may claim any task): the
 * retry is the one that was due anyway, to the map's URL (or, with a
 * secret, on the pipe the HELLO came on if it said BOTH_WAYS, as any
 * retry would use it), and the REMOTE_CONNECT_NS bound stays.  Only a
 * pending retry is brought forward, and not one that follows an early
 * one that failed: HELLOs, however many, at most double the tries the
 * timers would have made, with nothing more held.  The cancel (on this
 * thread, as every timer call here) ends in retry_fire, which drops the
 * reference retry_later took for the timer, as when the time is up.
 */
static void retry_hint(struct remote *st, struct remote_task *t)
{
	if (!t->retry_on || t->retry_early || t->early_used || st->destroyed ||
	    (t->peer && !t->peer->dead))
		return;
	tpu__log_debug("remote rendezvous %s: %s opened a pipe to us; retrying our connect now",
		       st->self, t->task);
	t->retry_early = true;
	t->early_retries++;
	tpu__ctx_timer_cancel(st->pctx, &t->retry);
}

void tpu__remote_peer_end(struct remote_peer *p, tpu_status status)
{
	struct remote *st = p->st;
	struct remote_task *t = p->task && p->task->peer == p ? p->task : NULL;
	struct remote_peer **pp;

	if (p->dead)
		return;
	p->dead = true;
	if (t)
		t->peer = NULL;
	if (p->member && p->member->inbound == p)
		p->member->inbound = NULL;
	if (t && !p->established && status == TPU_E_PEER_GONE && retry_later(st, t)) {
		tpu__log_debug("remote rendezvous %s: %s at %s does not answer yet; trying again",
			       st->self, t->task, t->url);
		while (p->fetches) {
			struct remote_fetch *f = p->fetches;

			/*
			 * Withdrawn already: no REQ got through this pipe, so no
			 * tensor can be on its way and it ends now.
			 */
			if (f->cancel_sent)
				tpu__remote_fetch_end(f, f->timed_out ? -ETIMEDOUT : -ECANCELED);
			else
				tpu__remote_fetch_park(f);
		}
	}
	tpu__log_debug("remote rendezvous %s: pipe %s %s ends: %s", st->self,
		       p->accepted ? "from" : "to",
		       p->task ? p->task->task : p->claim ? p->claim : "an unnamed peer",
		       tpu_strerror(status));
	while (p->fetches)
		tpu__remote_fetch_end(p->fetches, status);
	tpu__remote_serve_drop_peer(st, p);
	tpu__remote_serve_pushed_free(p);
	tpu__remote_inbox_drop_peer(st, p);
	if (p->stall_on)
		tpu__ctx_timer_cancel(st->pctx, &p->stall);
	if (p->pipe) {
		tpu_pipe_close(p->pipe);
		p->pipe = NULL;
	}
	for (pp = &st->peers; *pp; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	}
	tpu__remote_peer_unref(p);	/* st->peers' */
}

/* ctx thread: take @w, which carries a send, out of @p's sending list. */
static void sending_unlink(struct remote_peer *p, struct remote_write *w)
{
	struct remote_write **pp;

	for (pp = &p->sending; *pp; pp = &(*pp)->snext) {
		if (*pp == w) {
			*pp = w->snext;
			break;
		}
	}
	if (w->cancelled) {
		p->stalled--;
		p->stall_done++;
	}
}

static void stall_over(void *arg, tpu_status status);

/* ctx thread: a stall period starts from the cancelled writes ended so far; false if not. */
static bool stall_start(struct remote_peer *p)
{
	p->stall_mark = p->stall_done;
	p->stall.fn = stall_over;
	p->stall.arg = p;
	p->stall_on = !tpu__ctx_timer_start(p->st->pctx, &p->stall, p->st->stall_ns);
	return p->stall_on;
}

static void stall_over(void *arg, tpu_status status)
{
	struct remote_peer *p = arg;
	struct remote *st = p->st;

	p->stall_on = false;
	if (!status && p->stalled && !p->dead) {
		/* One ended meanwhile: the peer reads, slowly (the reference goes with the timer). */
		if (p->stall_done != p->stall_mark && stall_start(p))
			return;
		tpu__log_debug("remote rendezvous %s: %u cancelled sends still being written after "
			       "%llu ms: the peer stopped reading; ending its pipe", st->self,
			       p->stalled, (unsigned long long)(st->stall_ns / 1000000ull));
		tpu__remote_peer_end(p, tpu__remote_gone(st));
	}
	tpu__remote_peer_unref(p);
}

void tpu__remote_peer_watch_sends(struct remote_peer *p, const uint8_t *key, size_t key_len)
{
	struct remote_write *w;

	for (w = p->sending; w; w = w->snext) {
		if (w->cancelled || w->send->key_len != key_len || memcmp(w->send->key, key, key_len))
			continue;
		w->cancelled = true;
		p->stalled++;
	}
	if (p->stalled && !p->stall_on && !p->dead && stall_start(p))
		tpu__remote_peer_ref(p);
}

static void write_done(void *arg, tpu_status status, struct tpu_message *msg)
{
	struct remote_write *w = arg;
	struct remote_peer *p = w->peer;
	struct remote *st = p->st;
	struct tpu__op *send = w->send;

	(void)msg;
	p->writes--;
	if (!status)
		peer_established(p);
	if (send) {
		sending_unlink(p, w);
		p->st->serving--;
		if ((send->flags & TPU_SEND_GIVE) && send->tensor.buffer) {
			tpu_buffer_free(send->tensor.buffer);
			send->tensor.buffer = NULL;
		}
		tpu__remote_op_done(send, status ? tpu__remote_gone(p->st) : 0,
				    status ? 0 : send->tensor.len);
	}
	if (status)
		tpu__remote_peer_end(p, tpu__remote_gone(p->st));
	else if (st->one_pipe && p->task)
		tpu__remote_peer_settle(p->task);
	tpu__free_list_put(&st->write_free, w);
	tpu__remote_peer_unref(p);
}

static void peer_write(struct remote_peer *p, const struct remote_hdr *h, struct tpu__op *send)
{
	size_t size = tpu__remote_wire_size_of(h->type, h->key_len);
	struct remote *owner = p->st;	/* the caller holds @p; the compiler cannot tell */
	struct remote_write *w = write_get(owner, size);
	tpu_status st = -ENOMEM;

	if (w && p->pipe && !p->dead) {
		tpu__remote_wire_put(h, w->meta);
		w->msg.metadata = w->meta;
		w->msg.metadata_len = size;
		w->peer = p;
		w->send = send;
		if (send) {
			w->tensor.data = send->tensor.data;
			w->tensor.len = send->tensor.len;
			w->tensor.buffer = send->tensor.buffer;
			w->msg.tensors = &w->tensor;
			w->msg.ntensors = 1;
		}
		tpu__remote_peer_ref(p);
		p->writes++;
		if (send) {
			/* Before the write: its callback may come first. */
			p->st->serving++;
			w->snext = p->sending;
			p->sending = w;
		}
		st = tpu_pipe_write(p->pipe, &w->msg, write_done, w);
		if (!st)
			return;
		if (send) {
			p->st->serving--;
			sending_unlink(p, w);
		}
		p->writes--;
		tpu__remote_peer_unref(p);
	} else if (w) {
		st = tpu__remote_gone(p->st);
	}
	tpu__free_list_put(&owner->write_free, w);
	if (send) {
		if ((send->flags & TPU_SEND_GIVE) && send->tensor.buffer) {
			tpu_buffer_free(send->tensor.buffer);
			send->tensor.buffer = NULL;
		}
		tpu__remote_op_done(send, tpu__remote_gone(p->st), 0);
	}
	tpu__remote_peer_end(p, st == -ENOMEM ? st : tpu__remote_gone(p->st));
}

void tpu__remote_peer_send(struct remote_peer *p, const struct remote_hdr *h)
{
	peer_write(p, h, NULL);
}

void tpu__remote_peer_send_tensor(struct remote_peer *p, uint64_t id, struct tpu__op *send)
{
	struct remote_hdr h = { .type = REMOTE_RESP, .id = id, .len = send->tensor.len };

	peer_write(p, &h, send);
}

void tpu__remote_peer_push(struct remote_peer *p, uint64_t seq, struct tpu__op *send)
{
	struct remote_hdr h = { .type = REMOTE_PUSH, .seq = seq, .len = send->tensor.len,
				.key = send->key, .key_len = send->key_len };

	peer_write(p, &h, send);
}

void tpu__remote_peers_abort(struct remote *st, tpu_status status)
{
	struct remote_hdr h = { .type = REMOTE_ABORT, .status = status };
	struct remote_peer *p, *next;

	for (p = st->peers; p; p = next) {
		next = p->next;	/* a failed write ends (unlinks) p */
		tpu__remote_peer_send(p, &h);
	}
}

/* ---- the read loop ---- */

/* The answer to a HELLO that said REMOTE_HELLO_PUSH, on the pipe we accepted. */
static void hello_push_reply(struct remote_peer *p)
{
	struct remote *st = p->st;
	struct remote_hdr h = { .type = REMOTE_HELLO, .len = REMOTE_HELLO_PUSH,
				.key = (const uint8_t *)st->self, .key_len = st->self_len };

	p->push = true;
	tpu__remote_peer_send(p, &h);
}

static tpu_status on_hello(struct remote_peer *p)
{
	struct remote *st = p->st;
	const struct remote_hdr *h = &p->cur;
	char task[REMOTE_TASK_MAX];
	struct remote_task *t;

	if (!p->accepted) {
		/* On a pipe we opened, only the answer to our REMOTE_HELLO_PUSH, once. */
		if (!p->push_said || p->push || !(h->len & REMOTE_HELLO_PUSH))
			return -EPROTO;
		p->push = true;
		return 0;
	}
	if (p->claim || !h->key_len || h->key_len >= sizeof(task))
		return -EPROTO;
	memcpy(task, h->key, h->key_len);
	task[h->key_len] = 0;
	if (strlen(task) != h->key_len || !tpu__remote_task_ok(task) ||
	    tpu__remote_is_self(st, (struct tpu_str){ task, h->key_len })) {
		tpu__log_debug("remote rendezvous %s: refusing a hello that names %s", st->self,
			       tpu__remote_task_ok(task) ? "this worker" : "no task");
		return -EACCES;
	}
	pthread_mutex_lock(&st->lock);
	t = tpu__remote_task_find(st, task, h->key_len);
	pthread_mutex_unlock(&st->lock);
	if (t && t->inbound && !t->inbound->dead) {
		tpu__log_debug("remote rendezvous %s: a second pipe claims %s while its first is up: "
			       "refused", st->self, task);
		return -EACCES;
	}
	p->claim = strdup(task);
	if (!p->claim)
		return -ENOMEM;
	p->claim_len = h->key_len;
	/* Its claim is proven only with a secret: else we never ask on it. */
	p->both_ways = st->one_pipe && (h->len & REMOTE_HELLO_BOTH_WAYS);
	if (t) {
		p->member = t;
		t->inbound = p;
		/* A new peer process: ask again whether it shares our core. */
		atomic_store(&st->elsewhere_ns, 0);
		retry_hint(st, t);
	} else {
		tpu__log_debug("remote rendezvous %s: hello from %s, not in the map (served the keys "
			       "it consumes, not a member)", st->self, task);
	}
	if ((h->len & REMOTE_HELLO_PUSH) && p->both_ways && !st->push_off)
		hello_push_reply(p);
	return 0;
}

/*
 * Whether accepted @p is a member: its HELLO named a task of the map.  The
 * map may have grown since (workers add each other as they learn of
 * them), so a claim not found then is looked up again.
 */
static bool peer_member(struct remote_peer *p)
{
	struct remote *st = p->st;
	struct remote_task *t;

	if (p->member || !p->claim)
		return p->member;
	pthread_mutex_lock(&st->lock);
	t = tpu__remote_task_find(st, p->claim, p->claim_len);
	pthread_mutex_unlock(&st->lock);
	if (t && t->inbound && t->inbound != p && !t->inbound->dead)
		return false;	/* another pipe holds that task's place */
	if (t) {
		p->member = t;
		t->inbound = p;
		atomic_store(&st->elsewhere_ns, 0);
	}
	return p->member;
}

/* An accepted peer's REQ: for a key this worker produces and that peer consumes. */
tpu_status tpu__remote_peer_req_check(const struct remote_peer *p, const struct remote_hdr *h,
				      struct tpu_str *dst)
{
	struct tpu_str src;

	if (!h->key_len || !tpu__remote_key_tasks(h->key, h->key_len, &src, dst))
		return TPU_E_BAD_KEY;
	if (!tpu__remote_is_self(p->st, src))
		return -EXDEV;
	if (dst->len != p->claim_len || memcmp(dst->ptr, p->claim, dst->len)) {
		tpu__log_debug("remote rendezvous %s: %s asked for a key consumed by %.*s: refused",
			       p->st->self, p->claim, (int)dst->len, dst->ptr);
		return -EACCES;
	}
	return 0;
}

/*
 * Whether @p may send a message of @type: HELLO first and only on an
 * accepted pipe, then REQ, CANCEL, ABORT; answers (RESP) and ABORT only
 * on a pipe we opened.  With a job secret a pipe carries both ways: REQ
 * and CANCEL also on a pipe we opened (we said BOTH_WAYS), RESP also on
 * an accepted one whose HELLO said it (and only for a REQ of ours on it,
 * which the RESP's own check sees to).  -EPROTO ends the pipe.
 */
static tpu_status msg_allowed(const struct remote_peer *p, enum remote_msg type)
{
	bool ask = type == REMOTE_REQ || type == REMOTE_CANCEL || type == REMOTE_REQ_SEEN ||
		   type == REMOTE_CREDIT;
	bool answer = type == REMOTE_RESP || type == REMOTE_PUSH;

	/* The push protocol's messages only where both ends said they speak it. */
	if ((type == REMOTE_REQ_SEEN || type == REMOTE_CREDIT || type == REMOTE_PUSH) && !p->push)
		return -EPROTO;
	if (!p->accepted)
		return answer || type == REMOTE_ABORT || type == REMOTE_HELLO ||
		       (ask && p->both_ways) ? 0 : -EPROTO;
	if (!p->claim)
		return type == REMOTE_HELLO ? 0 : -EPROTO;
	return ask || type == REMOTE_ABORT || (answer && p->both_ways) ? 0 : -EPROTO;
}

static tpu_status dispatch(struct remote_peer *p)
{
	struct remote *st = p->st;
	const struct remote_hdr *h = &p->cur;

	switch (h->type) {
	case REMOTE_HELLO:
		return on_hello(p);
	case REMOTE_REQ_SEEN:
		/* It takes pushes here: a small send for it may go without its REQ. */
		tpu__remote_serve_push_ok(p);
		if (h->seq > p->push_seq)
			return -EPROTO;	/* it saw a push we never sent */
		tpu__remote_serve_req(st, p, h);
		break;
	case REMOTE_REQ:
		tpu__remote_serve_req(st, p, h);
		break;
	case REMOTE_CREDIT:
		return tpu__remote_serve_credit(p, h);
	case REMOTE_RESP:
	case REMOTE_PUSH:
		break;	/* read_done delivered it */
	case REMOTE_CANCEL:
		tpu__remote_serve_cancel_req(st, p, h->id);
		break;
	case REMOTE_ABORT:
		/* Members only: the task we connected to, or an accepted one in the map. */
		if (p->accepted && !peer_member(p)) {
			tpu__log_debug("remote rendezvous %s: ABORT from %s, not a member: refused",
				       st->self, p->claim);
			return -EACCES;
		}
		tpu__log_debug("remote rendezvous %s: aborted by %s: %s", st->self,
			       p->accepted ? p->claim : p->task->task, tpu_strerror(h->status));
		if (!st->destroyed && st->rdv && h->status < 0 && h->status >= -EHWPOISON)
			tpu_rendezvous_abort(st->rdv, h->status);
		break;
	}
	return 0;
}

static void read_done(void *arg, tpu_status status, struct tpu_message *msg)
{
	struct remote_peer *p = arg;

	/* A tensor that arrived is delivered even if the pipe ended meanwhile. */
	if (p->cur.type == REMOTE_RESP)
		tpu__remote_fetch_resp_done(p, status, msg);
	else if (p->cur.type == REMOTE_PUSH)
		tpu__remote_fetch_push_done(p, status, msg);
	if (status)
		tpu__remote_peer_end(p, tpu__remote_gone(p->st));
	else if (!p->dead && (status = dispatch(p)) != 0)
		tpu__remote_peer_end(p, status);
	if (!p->dead)
		read_next(p);
	/* An answer ended a fetch on our losing pipe, or the winner's HELLO came. */
	if (p->st->one_pipe && (p->task || p->member))
		tpu__remote_peer_settle(p->task ? p->task : p->member);
	tpu__remote_peer_unref(p);	/* the read loop's */
}

static void desc_done(void *arg, tpu_status status, struct tpu_message *desc)
{
	struct remote_peer *p = arg;
	tpu_status st = status;

	if (!st && !p->dead) {
		st = tpu__remote_wire_get(desc->metadata, desc->metadata_len, &p->cur);
		p->cur_fetch = NULL;
		p->cur_inbox = NULL;
		/* Before anything is made for it: an answer we did not ask this pipe for is refused. */
		if (!st)
			st = msg_allowed(p, p->cur.type);
		if (!st)
			peer_established(p);
		if (!st && p->cur.type == REMOTE_RESP)
			st = tpu__remote_fetch_resp_desc(p, desc);
		else if (!st && p->cur.type == REMOTE_PUSH)
			st = tpu__remote_fetch_push_desc(p, desc);
		else if (!st && desc->ntensors)
			st = -EPROTO;
		if (!st && p->pipe)
			st = tpu_pipe_read(p->pipe, desc, read_done, p);
		if (!st)
			return;	/* the read loop's reference goes with the read */
		if (p->cur.type == REMOTE_PUSH)
			tpu__remote_fetch_push_done(p, st ? st : -EPROTO, NULL);
		else if (p->cur_fetch)
			tpu__remote_fetch_resp_done(p, st, NULL);	/* no read: let its fetch go */
		if (st == -EPROTO)
			tpu__log_debug("remote rendezvous %s: a peer sent what is no message of ours",
				       p->st->self);
	}
	tpu__remote_peer_end(p, st == -EPROTO ? -EPROTO : tpu__remote_gone(p->st));
	tpu__remote_peer_unref(p);
}

static void read_next(struct remote_peer *p)
{
	tpu__remote_peer_ref(p);
	if (tpu_pipe_read_descriptor(p->pipe, desc_done, p)) {
		tpu__remote_peer_end(p, tpu__remote_gone(p->st));
		tpu__remote_peer_unref(p);
	}
}

static struct remote_peer *peer_new(struct remote *st, struct tpu_pipe *pipe)
{
	struct remote_peer *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->st = st;
	tpu__remote_get(st);
	p->pipe = pipe;
	p->refs = 1;	/* st->peers' */
	p->pushed_tail = &p->pushed;
	p->next = st->peers;
	st->peers = p;
	return p;
}

/* @t's accepted pipe, if we may ask on it (a secret, and its HELLO said BOTH_WAYS). */
static struct remote_peer *inbound_both_ways(const struct remote_task *t)
{
	struct remote_peer *in = t->inbound;

	return in && in->both_ways && !in->dead && in->pipe ? in : NULL;
}

/* Of two pipes to @t, the one the lower task name opened carries new REQs. */
static bool inbound_wins(const struct remote *st, const struct remote_task *t)
{
	return strcmp(t->task, st->self) < 0;
}

void tpu__remote_peer_settle(struct remote_task *t)
{
	struct remote_peer *p = t->peer;
	struct remote *st = t->st;
	unsigned int nreqs, held;

	if (!p || p->dead || p->fetches || p->writes || st->destroyed || !inbound_both_ways(t) ||
	    !inbound_wins(st, t))
		return;
	pthread_mutex_lock(&st->lock);
	nreqs = p->nreqs;
	/* Pushes it brought wait in the inbox: they go with it. */
	held = p->inbox_n;
	pthread_mutex_unlock(&st->lock);
	if (nreqs || held || p->npushed)
		return;	/* asked on it before the other end saw ours win: answer first */
	tpu__log_debug("remote rendezvous %s: %s opened a pipe to us too; closing ours", st->self,
		       t->task);
	/* Not a death: the task stays reachable on the winner. */
	t->peer = NULL;
	tpu__remote_peer_end(p, TPU_E_CLOSED);
}

struct remote_peer *tpu__remote_peer_current(struct remote *st, struct remote_task *t)
{
	struct remote_peer *in = st->one_pipe ? inbound_both_ways(t) : NULL;

	if (in && (!t->peer || t->peer->dead || inbound_wins(st, t)))
		return in;
	return t->peer && !t->peer->dead ? t->peer : NULL;
}

struct remote_peer *tpu__remote_peer_for(struct remote *st, struct remote_task *t, tpu_status *err)
{
	struct remote_hdr h = { .type = REMOTE_HELLO };
	struct remote_peer *in = st->one_pipe ? inbound_both_ways(t) : NULL;
	struct tpu_pipe *pipe;
	struct remote_peer *p;

	if (in && (!t->peer || t->peer->dead || inbound_wins(st, t)))
		return in;
	if (t->peer && !t->peer->dead)
		return t->peer;
	if (!t->first_try_ns)
		t->first_try_ns = tpu__mono_ns();
	*err = tpu_pipe_connect(st->pctx, t->url, &pipe);
	if (*err)
		return NULL;
	p = peer_new(st, pipe);
	if (!p) {
		tpu_pipe_close(pipe);
		*err = -ENOMEM;
		return NULL;
	}
	p->task = t;
	t->peer = p;
	atomic_store(&st->elsewhere_ns, 0);
	if (st->one_pipe) {
		/* The pipe proves the map's URL and the secret: its other end is @t. */
		p->claim = strdup(t->task);
		if (!p->claim) {
			tpu__remote_peer_end(p, -ENOMEM);
			*err = -ENOMEM;
			return NULL;
		}
		p->claim_len = strlen(t->task);
		p->both_ways = true;
		h.len = REMOTE_HELLO_BOTH_WAYS;
	}
	if (st->one_pipe && !st->push_off) {
		p->push_said = true;
		h.len |= REMOTE_HELLO_PUSH;
	}
	tpu__log_debug("remote rendezvous %s: connecting to %s at %s", st->self, t->task, t->url);
	h.key = (const uint8_t *)st->self;
	h.key_len = st->self_len;
	tpu__remote_peer_ref(p);	/* held while we use it here */
	tpu__remote_peer_send(p, &h);
	if (!p->dead)
		read_next(p);
	if (p->dead) {
		*err = tpu__remote_gone(st);
		tpu__remote_peer_unref(p);
		return NULL;
	}
	tpu__remote_peer_unref(p);
	return p;
}

void tpu__remote_peer_accepted(struct remote *st, struct tpu_pipe *pipe)
{
	struct remote_peer *p = peer_new(st, pipe);

	if (!p) {
		tpu_pipe_close(pipe);
		return;
	}
	p->accepted = true;
	read_next(p);
}
