// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The receiving side of the push protocol (REMOTE_HELLO_PUSH in remote.h).
 * A PUSH answers the oldest REQ_SEEN of its key that was asked on its pipe
 * before it came, as its pusher decides too; with none, it waits in the
 * inbox for a receive, which takes it without a REQ and sends a CREDIT
 * back.  Context thread, but for the inbox list and each pipe's counts
 * (st->lock), which a receive looks at on its caller's thread first.
 */
#include <stdlib.h>
#include <string.h>

#include "remote.h"

static uint8_t no_bytes[1];

/* The task we ask on @p: the only one whose pushes it may carry. */
static struct remote_task *push_source(const struct remote_peer *p)
{
	if (!p->accepted)
		return p->task;
	return p->both_ways ? p->member : NULL;
}

/* Whether @f asked for @key (by its hash and length once its op ended). */
static bool fetch_wants(const struct remote_fetch *f, const uint8_t *key, size_t len,
			uint64_t hash)
{
	if (f->op)
		return f->op->key_len == len && !memcmp(f->op->key, key, len);
	return f->key_hash == hash && f->key_len == len;
}

/*
 * The fetch on @p that a push of @key answers: the oldest whose REQ_SEEN
 * went (its pusher drops that REQ), else the oldest withheld one (which
 * owes a CREDIT).
 */
static struct remote_fetch *push_answers(struct remote_peer *p, const uint8_t *key, size_t len,
					 uint64_t hash)
{
	struct remote_fetch *f, *asked = NULL, *held = NULL;

	/* Newest first: the last one found is the oldest. */
	for (f = p->fetches; f; f = f->next) {
		if (f->reading || !fetch_wants(f, key, len, hash))
			continue;
		if (f->asked_seen)
			asked = f;
		else if (f->withheld)
			held = f;
	}
	return asked ? asked : held;
}

void tpu__remote_credit_flush(struct remote_peer *p)
{
	struct remote_hdr h = { .type = REMOTE_CREDIT };
	uint8_t rest[8 * (REMOTE_CREDIT_BATCH - 1)];
	unsigned int i, n = p->ncredit_due;

	if (!n)
		return;
	p->ncredit_due = 0;
	if (p->dead || !p->pipe)
		return;
	h.seq = p->credit_due[0];
	for (i = 1; i < n; i++)
		tpu__put_le64(rest + 8 * (i - 1), p->credit_due[i]);
	h.key = n > 1 ? rest : NULL;
	h.key_len = 8 * (n - 1);
	p->st->push_stats.credit_msgs++;
	tpu__remote_peer_send(p, &h);
}

static void credit_flush_run(struct tpu__task *t)
{
	struct remote_peer *p = tpu__container_of(t, struct remote_peer, credit_task);

	p->credit_queued = false;
	tpu__remote_credit_flush(p);
	tpu__remote_peer_unref(p);
}

void tpu__remote_credit_owe(struct remote_peer *p, uint64_t seq, bool now)
{
	if (p->dead)
		return;
	p->credit_due[p->ncredit_due++] = seq;
	if (p->ncredit_due == REMOTE_CREDIT_BATCH) {
		tpu__remote_credit_flush(p);
	} else if (now && !p->credit_queued) {
		/*
		 * Behind the tasks queued already (a burst's inbox takes, run
		 * in this same pass): one CREDIT for all of them, not one
		 * message, and one write in flight, each.
		 */
		p->credit_queued = true;
		tpu__remote_peer_ref(p);
		p->credit_task.fn = credit_flush_run;
		tpu__ctx_defer_quiet(p->st->pctx, &p->credit_task);
	}
}

/* Where an inbox entry's tensor starts: after its key, 16-aligned. */
static size_t inbox_data_off(size_t key_len)
{
	return (key_len + 15) & ~(size_t)15;
}

/*
 * ctx thread: an inbox entry with room for @key_len bytes of key and
 * @len of tensor, recycled if one fits (a pushed tensor is read into its
 * entry, not into a buffer of its own: no memfd per push).
 */
static struct remote_inbox *inbox_get(struct remote *st, size_t key_len, size_t len)
{
	size_t need = inbox_data_off(key_len) + len, cap;
	struct remote_inbox *e = tpu__free_list_take(&st->inbox_free, need);

	if (e) {
		cap = e->cap;
	} else {
		cap = tpu__free_list_room(need, REMOTE_KEY_CAP_MIN);
		/* Not calloc: the tensor's room (up to 64 KiB) is written by the read. */
		e = malloc(sizeof(*e) + cap);
		if (!e)
			return NULL;
	}
	memset(e, 0, sizeof(*e));
	e->cap = cap;
	e->data = e->key + inbox_data_off(key_len);
	return e;
}

/* ctx thread: @e holds the PUSH @h of @p now being read (@hash: its key's), referencing @p. */
static void inbox_fill(struct remote_inbox *e, struct remote_peer *p, const struct remote_hdr *h,
		       uint64_t hash, bool windowed)
{
	e->st = p->st;
	e->peer = p;
	e->seq = h->seq;
	e->hash = hash;
	e->len = h->len;
	e->arriving = true;
	e->windowed = windowed;
	e->key_len = h->key_len;
	memcpy(e->key, h->key, h->key_len);
	tpu__remote_peer_ref(p);
}

/* ctx thread: @e is done with; kept for the next push if it is small. */
static void inbox_put(struct remote *st, struct remote_inbox *e)
{
	if (e->cap > REMOTE_INBOX_KEEP)
		free(e);
	else
		tpu__free_list_put(&st->inbox_free, e);
}

tpu_status tpu__remote_fetch_push_desc(struct remote_peer *p, struct tpu_message *desc)
{
	struct remote *st = p->st;
	const struct remote_hdr *h = &p->cur;
	struct remote_task *src = push_source(p);
	struct tpu_message_tensor *t;
	struct remote_fetch *f;
	struct remote_inbox *e;
	struct tpu_str ks, kd;
	uint64_t hash;

	/* Numbered one by one on its pipe: the count both sides keep of the window. */
	if (!src || desc->ntensors != 1 || !h->key_len || h->seq != p->seen_seq + 1)
		return -EPROTO;
	t = &desc->tensors[0];
	if (t->len != h->len || t->len > REMOTE_PUSH_MAX)
		return -EPROTO;
	p->seen_seq = h->seq;
	hash = tpu__rdv_key_hash(h->key, h->key_len);
	f = push_answers(p, h->key, h->key_len, hash);
	if (f) {
		st->push_stats.answered++;
		p->cur_fetch = f;
		/* Withheld, it answers no REQ of ours: its pusher waits for a CREDIT. */
		p->cur_owes = tpu__remote_fetch_unhold(f);
		f->reading = true;
		f->refs++;
		if (f->op && f->op->kind == TPU__OP_RECV && t->len <= f->cap) {
			t->data = t->len ? f->op->tensor.data : no_bytes;
			return 0;
		}
		/*
		 * Too long for that receive, which fails: the tensor is kept for
		 * another, as a pull leaves it at its producer (outside the
		 * window: the pusher freed it when this push answered).
		 */
		e = f->op && t->len > f->cap ? inbox_get(st, h->key_len, t->len) : NULL;
		if (e) {
			inbox_fill(e, p, h, hash, false);
			p->cur_inbox = e;
			t->data = e->data;
			return 0;
		}
		/*
		 * recv_buffer; or its op ended (or no memory to keep it): read,
		 * then dropped.  A heap buffer, as the inprocess rendezvous
		 * gives (64 KiB at most): the pipe's would be a memfd, five
		 * system calls to make and free.
		 */
		if (tpu__buffer_alloc_heap(t->len, &p->cur_buf))
			return -ENOMEM;
		t->data = tpu_buffer_data(p->cur_buf);
		return 0;
	}
	/* Nobody asked here yet: the inbox, for a key of its task's to us, within the window. */
	if (!tpu__remote_key_tasks(h->key, h->key_len, &ks, &kd) ||
	    ks.len != strlen(src->task) || memcmp(ks.ptr, src->task, ks.len) ||
	    !tpu__remote_is_self(st, kd)) {
		tpu__log_debug("remote rendezvous %s: refusing a push of a key %s does not send us",
			       st->self, src->task);
		return -EPROTO;
	}
	e = inbox_get(st, h->key_len, t->len);
	if (!e)
		return -ENOMEM;
	pthread_mutex_lock(&st->lock);
	if (p->inbox_n >= REMOTE_PUSH_WINDOW ||
	    p->inbox_bytes + t->len > REMOTE_PUSH_WINDOW_BYTES) {
		pthread_mutex_unlock(&st->lock);
		inbox_put(st, e);
		tpu__log_debug("remote rendezvous %s: %s pushed past its window (%u pushes, %zu bytes "
			       "held)", st->self, src->task, p->inbox_n, p->inbox_bytes);
		return -EPROTO;
	}
	p->inbox_n++;
	p->inbox_bytes += t->len;
	inbox_fill(e, p, h, hash, true);
	*st->inbox_tail = e;
	st->inbox_tail = &e->next;
	pthread_mutex_unlock(&st->lock);
	st->push_stats.inboxed++;
	p->cur_inbox = e;
	t->data = e->data;
	return 0;
}

/* Under st->lock: take @e out of the inbox. */
static void inbox_unlink(struct remote *st, struct remote_inbox *e)
{
	struct remote_inbox **pp;

	for (pp = &st->inbox; *pp; pp = &(*pp)->next) {
		if (*pp == e) {
			*pp = e->next;
			if (!*pp)
				st->inbox_tail = pp;
			e->next = NULL;
			return;
		}
	}
}

/*
 * ctx thread: @e leaves this pipe's window if it was in it (a CREDIT says
 * so if the pipe lives), and is freed.
 */
static void inbox_release(struct remote_inbox *e)
{
	struct remote *st = e->st;
	struct remote_peer *p = e->peer;

	if (e->windowed) {
		pthread_mutex_lock(&st->lock);
		p->inbox_n--;
		p->inbox_bytes -= e->len;
		pthread_mutex_unlock(&st->lock);
		tpu__remote_credit_owe(p, e->seq, true);
	}
	tpu__remote_peer_unref(p);
	inbox_put(st, e);
}

/* Under st->lock: @e, out of the inbox, goes back at its head (for another receive). */
static void inbox_put_back(struct remote *st, struct remote_inbox *e)
{
	e->next = st->inbox;
	st->inbox = e;
	if (!e->next)
		st->inbox_tail = &e->next;
}

/*
 * Complete receive @op with @e's tensor (a recv_buffer gets a heap buffer
 * of its own, as the inprocess rendezvous gives); -ENOMEM, and @op is
 * left as it was, when there is no memory for that.
 */
static tpu_status deliver(struct tpu__op *op, const struct remote_inbox *e)
{
	struct tpu_buffer *buf;

	if (op->kind == TPU__OP_RECV) {
		if (e->len)
			memcpy(op->tensor.data, e->data, e->len);
	} else {
		if (tpu__buffer_alloc_heap(e->len, &buf))
			return -ENOMEM;
		if (e->len)
			memcpy(tpu_buffer_data(buf), e->data, e->len);
		op->out_buffer = buf;
	}
	tpu__remote_op_done(op, 0, e->len);
	return 0;
}

/* ctx thread: give @e to the receive that took it. */
static void inbox_give(struct remote_inbox *e)
{
	struct remote *st = e->st;
	struct tpu__op *op = e->op;
	tpu_status err;

	e->op = NULL;
	err = e->len > op->tensor.len ? -EMSGSIZE : deliver(op, e);
	if (err) {
		/* As a REQ too small is answered: the tensor stays for another receive. */
		tpu__remote_op_done(op, err, err == -EMSGSIZE ? e->len : 0);
		if (!e->peer->dead) {
			pthread_mutex_lock(&st->lock);
			inbox_put_back(st, e);
			pthread_mutex_unlock(&st->lock);
			return;
		}
	}
	inbox_release(e);
}

static void inbox_take_run(struct tpu__task *t)
{
	struct remote_inbox *e = tpu__container_of(t, struct remote_inbox, take);
	struct remote *st = e->st;

	inbox_give(e);
	tpu__remote_put(st);
}

bool tpu__remote_inbox_take(struct remote *st, struct tpu__op *op)
{
	struct remote_inbox *e;

	for (e = st->inbox; e; e = e->next)
		if (e->hash == op->key_hash && e->key_len == op->key_len &&
		    !memcmp(e->key, op->key, e->key_len))
			break;
	if (!e)
		return false;
	inbox_unlink(st, e);
	e->op = op;
	/* One still being read is given when it is in. */
	if (!e->arriving) {
		e->take.fn = inbox_take_run;
		tpu__remote_get(st);
		tpu__remote_defer(st, &e->take);
	}
	return true;
}

/*
 * A fetch on another pipe of @p's task that asked for @e's key (two pipes
 * to one task, for a moment): it can only be answered by a send of that
 * key, which this push was.
 */
static struct remote_fetch *other_pipe_fetch(struct remote_peer *p, const struct remote_inbox *e)
{
	struct remote_task *t = push_source(p);
	struct remote_peer *q;
	struct remote_fetch *f;

	for (q = p->st->peers; q; q = q->next) {
		if (q == p || q->dead || push_source(q) != t)
			continue;
		for (f = q->fetches; f; f = f->next)
			if (f->op && !f->reading && e->len <= f->cap && fetch_wants(f, e->key, e->key_len, e->hash))
				return f;
	}
	return NULL;
}

/* ctx thread: @e's tensor is in; give it, or leave it in the inbox. */
static void inbox_arrived(struct remote_peer *p, struct remote_inbox *e, tpu_status status)
{
	struct remote *st = p->st;
	struct remote_hdr cancel = { .type = REMOTE_CANCEL };
	struct remote_fetch *f;
	struct tpu__op *op;

	pthread_mutex_lock(&st->lock);
	e->arriving = false;
	op = e->op;
	if ((status || p->dead) && !op)
		inbox_unlink(st, e);
	pthread_mutex_unlock(&st->lock);
	if (status || (p->dead && !op)) {
		if (op) {
			e->op = NULL;
			tpu__remote_op_done(op, tpu__remote_gone(st), 0);
		}
		inbox_release(e);
		return;
	}
	if (op) {
		inbox_give(e);
		return;
	}
	f = other_pipe_fetch(p, e);
	if (!f)
		return;
	/* Given to that receive; its REQ is withdrawn, and the answer to it dropped. */
	pthread_mutex_lock(&st->lock);
	inbox_unlink(st, e);
	pthread_mutex_unlock(&st->lock);
	if (deliver(f->op, e)) {
		/* No memory for its buffer: the tensor stays for another receive, f waits. */
		pthread_mutex_lock(&st->lock);
		inbox_put_back(st, e);
		pthread_mutex_unlock(&st->lock);
		return;
	}
	f->op = NULL;
	if (f->withheld) {
		/* No REQ went: nothing to withdraw. */
		tpu__remote_fetch_end(f, 0);
	} else if (!f->cancel_sent) {
		f->cancel_sent = true;
		cancel.id = f->id;
		tpu__remote_peer_send(f->peer, &cancel);
	}
	inbox_release(e);
}

void tpu__remote_inbox_drop_peer(struct remote *st, struct remote_peer *p)
{
	struct remote_inbox **pp, *e, *gone = NULL;

	pthread_mutex_lock(&st->lock);
	for (pp = &st->inbox; (e = *pp);) {
		/* One still being read goes when its read ends (inbox_arrived). */
		if (e->peer != p || e->arriving) {
			pp = &e->next;
			continue;
		}
		*pp = e->next;
		e->next = gone;
		gone = e;
	}
	st->inbox_tail = &st->inbox;
	while (*st->inbox_tail)
		st->inbox_tail = &(*st->inbox_tail)->next;
	pthread_mutex_unlock(&st->lock);
	while ((e = gone)) {
		gone = e->next;
		inbox_release(e);
	}
}

void tpu__remote_inbox_free(struct remote *st)
{
	struct remote_inbox *e;

	while ((e = st->inbox)) {
		st->inbox = e->next;
		free(e);
	}
	st->inbox_tail = &st->inbox;
}

/*
 * ctx thread: a push answered fetch @f, or came after its op ended (then
 * dropped); @keep, if not NULL, holds it when it is too long for @f.
 */
static void push_to_fetch(struct remote_peer *p, struct remote_fetch *f, tpu_status status,
			  struct tpu_buffer *buf, struct remote_inbox *keep)
{
	struct tpu__op *op = f->op;
	struct remote *st = p->st;
	size_t len = p->cur.len;
	tpu_status res = 0;

	f->reading = false;
	if (!op) {
		tpu_buffer_free(buf);
	} else {
		if (status) {
			res = f->ended ? f->ended : tpu__remote_gone(st);
			len = 0;
		} else if (len > f->cap) {
			/* In the inbox before the receive hears of it: a retry finds it. */
			res = -EMSGSIZE;
			if (keep && !p->dead) {
				keep->arriving = false;
				pthread_mutex_lock(&st->lock);
				inbox_put_back(st, keep);
				pthread_mutex_unlock(&st->lock);
				keep = NULL;
			}
		} else if (op->kind == TPU__OP_RECV_BUFFER) {
			op->out_buffer = buf;
			buf = NULL;
		}
		tpu_buffer_free(buf);
		tpu__remote_op_done(op, res, len);
		f->op = NULL;
	}
	if (keep)
		inbox_release(keep);
	if (f->peer == p)
		tpu__remote_fetch_end(f, 0);
	tpu__remote_fetch_taken(f);
}

void tpu__remote_fetch_push_done(struct remote_peer *p, tpu_status status, struct tpu_message *msg)
{
	struct remote_fetch *f = p->cur_fetch;
	struct remote_inbox *e = p->cur_inbox;
	struct tpu_buffer *buf = NULL;

	p->cur_fetch = NULL;
	p->cur_inbox = NULL;
	if (f && p->cur_owes)
		tpu__remote_credit_owe(p, p->cur.seq, false);
	p->cur_owes = false;
	/* The tensor went into memory of ours (no buffer of the pipe's). */
	(void)msg;
	buf = p->cur_buf;
	p->cur_buf = NULL;
	if (f) {
		push_to_fetch(p, f, status, buf, e);
		return;
	}
	/* An inbox entry was read into (a buffer is made only for a fetch). */
	tpu_buffer_free(buf);
	if (e)
		inbox_arrived(p, e, status);
}
