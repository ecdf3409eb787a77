// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The remote rendezvous's public calls and the operations the rendezvous
 * front end calls (per-key order, blocking waits and batches are the front
 * end's).  A key's two device names decide where it goes: both on one
 * task, the inner inprocess rendezvous; otherwise the outbox of the
 * source's worker, fetched by the receiver over a pipe.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "remote.h"

extern const struct tpu__rdv_ops tpu__remote_ops;

void tpu__remote_get(struct remote *st)
{
	atomic_fetch_add(&st->refs, 1);
}

void tpu__remote_put(struct remote *st)
{
	struct remote_task *t;

	if (atomic_fetch_sub(&st->refs, 1) != 1)
		return;
	while ((t = st->tasks)) {
		st->tasks = t->next;
		free(t->task);
		free(t->url);
		free(t);
	}
	tpu__remote_serve_free(st);
	tpu__remote_inbox_free(st);
	tpu__free_list_drain(&st->entry_free);
	tpu__free_list_drain(&st->req_free);
	tpu__free_list_drain(&st->fetch_free);
	tpu__free_list_drain(&st->write_free);
	tpu__free_list_drain(&st->pushed_free);
	tpu__free_list_drain(&st->inbox_free);
	pthread_mutex_destroy(&st->lock);
	free(st);
}

/*
 * The "/job:J/replica:R/task:T" part of a full device name: up to the
 * first "/device:".  Only a '/' can begin it, so only those are compared
 * (memcmp at every byte was half of a key's parse, three per round trip).
 */
static struct tpu_str task_of(struct tpu_str dev)
{
	static const char marker[] = "/device:";
	const size_t mlen = sizeof(marker) - 1;
	const char *p = dev.ptr, *end = dev.ptr + dev.len;
	const char *last = memrchr(dev.ptr, '/', dev.len);

	/* A parsed name's last component is its device: look there first. */
	if (last && (size_t)(end - last) >= mlen && memcmp(last, marker, mlen) == 0)
		return (struct tpu_str){ dev.ptr, (size_t)(last - dev.ptr) };
	while (end - p >= (ptrdiff_t)mlen && (p = memchr(p, '/', (size_t)(end - p) - mlen + 1))) {
		if (memcmp(p, marker, mlen) == 0)
			return (struct tpu_str){ dev.ptr, (size_t)(p - dev.ptr) };
		p++;
	}
	return dev;
}

/* Keys parsed (tests: at most one parse per key and task per round trip). */
static atomic_ulong key_parses;

unsigned long tpu__remote_key_parses(void)
{
	return atomic_load_explicit(&key_parses, memory_order_relaxed);
}

bool tpu__remote_key_tasks(const uint8_t *key, size_t key_len, struct tpu_str *src,
		      struct tpu_str *dst)
{
	struct tpu_key k;

	atomic_fetch_add_explicit(&key_parses, 1, memory_order_relaxed);
	if (tpu_key_parse((struct tpu_str){ (const char *)key, key_len }, &k, NULL))
		return false;
	*src = task_of(k.src_device);
	*dst = task_of(k.dst_device);
	return true;
}

static bool str_eq(struct tpu_str a, struct tpu_str b)
{
	return a.len == b.len && memcmp(a.ptr, b.ptr, a.len) == 0;
}

bool tpu__remote_is_self(const struct remote *st, struct tpu_str task)
{
	return str_eq(task, (struct tpu_str){ st->self, st->self_len });
}

/* A task name: a full device name once "/device:CPU:0" is added. */
bool tpu__remote_task_ok(const char *task)
{
	char dev[REMOTE_TASK_MAX + 16];
	struct tpu_device_name dn;
	int n;

	if (!task || strstr(task, "/device:"))
		return false;
	n = snprintf(dev, sizeof(dev), "%s/device:CPU:0", task);
	if (n < 0 || (size_t)n >= sizeof(dev) || strlen(task) >= REMOTE_TASK_MAX)
		return false;
	return !tpu_device_name_parse((struct tpu_str){ dev, (size_t)n }, &dn, NULL);
}

struct remote_task *tpu__remote_task_find(struct remote *st, const char *task, size_t len)
{
	struct remote_task *t;

	for (t = st->tasks; t; t = t->next)
		if (strlen(t->task) == len && memcmp(t->task, task, len) == 0)
			return t;
	return NULL;
}

/*
 * "SCHEME://ADDRESS" with a scheme of tpu_pipe_connect() (a peer we could
 * dial), so that a typo fails here and not at the first receive from it.
 */
static bool url_ok(const char *url)
{
	static const char *const schemes[] = { "tcp://", "shm://", "rdma://" };

	for (size_t i = 0; url && i < sizeof(schemes) / sizeof(schemes[0]); i++)
		if (!strncmp(url, schemes[i], strlen(schemes[i])))
			return url[strlen(schemes[i])] != '\0';
	return false;
}

/* Under st->lock. */
static tpu_status task_add(struct remote *st, const char *task, const char *url)
{
	struct remote_task *t;

	if (!tpu__remote_task_ok(task) || !url_ok(url))
		return -EINVAL;
	if (strcmp(task, st->self) == 0)
		return 0;
	t = tpu__remote_task_find(st, task, strlen(task));
	if (t)
		return strcmp(t->url, url) ? -EEXIST : 0;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->task = strdup(task);
	t->url = strdup(url);
	if (!t->task || !t->url) {
		free(t->task);
		free(t->url);
		free(t);
		return -ENOMEM;
	}
	t->st = st;
	t->next = st->tasks;
	st->tasks = t;
	return 0;
}

struct remote_task *tpu__remote_tasks(struct remote *st)
{
	struct remote_task *t;

	pthread_mutex_lock(&st->lock);
	t = st->tasks;
	pthread_mutex_unlock(&st->lock);
	return t;
}

/* ---- keys of this task: the inner rendezvous ---- */

/* ---- pipe work on the user's threads ---- */

/* This thread deferred work to that rendezvous's pctx without waking it. */
static _Thread_local struct remote *quiet_owed;
/* The thread lent to pctx in a blocking wait (remote_progress), and whether it waits to be. */
static _Thread_local struct remote *lent_to;
static _Thread_local struct remote *wants;
/* Gave pctx back mid-wait for its own thread's work: not again in this wait. */
static _Thread_local struct remote *stood_down;
/*
 * A waiter that goes to sleep with REQs withheld keeps them back until
 * hold_until (REMOTE_HOLD_NS after its first sleep of this wait) for the
 * rendezvous hold_for; NULL between waits.
 */
static _Thread_local struct remote *hold_for;
static _Thread_local uint64_t hold_until;

void tpu__remote_defer(struct remote *st, struct tpu__task *t)
{
	if (st->rdv && tpu__rdv_issuing(st->rdv) && !tpu__ctx_on_thread(st->pctx) &&
	    (!quiet_owed || quiet_owed == st)) {
		tpu__ctx_defer_quiet(st->pctx, t);
		quiet_owed = st;
		return;
	}
	tpu__ctx_defer(st->pctx, t);
}

void tpu__remote_op_done(struct tpu__op *op, tpu_status status, size_t len)
{
	op->status = status;
	op->len = len;
	tpu__op_complete_unlocked(op);
}

/* Right after an issue, the front end's lock dropped: the work it deferred. */
static void r_issued(struct tpu_rendezvous *rdv)
{
	struct remote *st = rdv->impl_state;

	if (!st || quiet_owed != st)
		return;
	quiet_owed = NULL;
	if (!atomic_load(&st->hooks_off) && tpu__ctx_lendable(st->pctx) &&
	    tpu__ctx_lend_begin(st->pctx)) {
		tpu__ctx_lend_work(st->pctx);
		/*
		 * Back soon in a wait, likely: a waiter lends itself whether it
		 * spins or not (it sleeps in the thread's place).
		 */
		tpu__ctx_lend_end(st->pctx, true);
	} else {
		tpu__ctx_kick(st->pctx);
	}
}

/* Below this a lent waiter spins no longer than any waiter (the waitword's budget). */
#define LEND_SPIN_MIN_NS	5000u

static void lend_spin_learn(struct remote *st, bool answered)
{
	uint64_t base = tpu__ctx_spin_ns(st->pctx), cur = atomic_load(&st->lend_spin_ns);

	if (answered)
		cur = cur < LEND_SPIN_MIN_NS ? LEND_SPIN_MIN_NS : cur * 2;
	else
		cur = cur / 2 < LEND_SPIN_MIN_NS ? 0 : cur / 2;
	atomic_store(&st->lend_spin_ns, cur > base ? base : cur);
}

static void want(struct remote *st, bool on)
{
	if (on == (wants == st))
		return;
	wants = on ? st : NULL;
	tpu__ctx_lend_want(st->pctx, on);
}

/*
 * A thread blocked in recv_wait or send_wait: while it spins it stands in
 * for pctx's thread, which then sleeps (or, awake, stops spinning to let
 * it): the tensor that ends the wait is read, and its op finished, right
 * here.  Given back before the waiter sleeps.
 */
static void r_progress(struct tpu_rendezvous *rdv, enum tpu__ww_phase phase)
{
	struct remote *st = rdv->impl_state;

	if (!st)
		return;
	if (phase != TPU__WW_SPIN_POLL)
		hold_for = NULL;	/* a wait begins or ends */
	if (phase == TPU__WW_SPIN_END || phase == TPU__WW_SPIN_GIVE_UP ||
	    atomic_load(&st->hooks_off)) {
		if (lent_to == st) {
			lent_to = NULL;
			/* Posted: the thread goes on, likely to issue again soon. */
			tpu__ctx_lend_end(st->pctx, phase == TPU__WW_SPIN_END);
			lend_spin_learn(st, phase == TPU__WW_SPIN_END);
		}
		want(st, false);
		stood_down = NULL;
		return;
	}
	/*
	 * A thread that backs off from spinning lends itself all the same: it
	 * does not spin (r_spin_ns gives no floor then), but it sleeps in pctx
	 * thread's place (r_wait_sleep), which saves the thread's wake-up.
	 */
	if (lent_to != st) {
		/* Nothing to poll (tcp): the context's thread is better at it. */
		if (!tpu__ctx_lendable(st->pctx) || stood_down == st)
			return;
		if (lent_to || !tpu__ctx_lend_begin(st->pctx)) {
			want(st, !lent_to);
			return;
		}
		lent_to = st;
		want(st, false);
	}
	tpu__ctx_lend_work(st->pctx);
	if (tpu__ctx_lend_blocked(st->pctx)) {
		/* A kmod RECV to submit, say: only pctx's own thread may. */
		lent_to = NULL;
		stood_down = st;
		tpu__ctx_lend_end(st->pctx, false);
	}
}

/*
 * Whether lent or not, a waiter waits for what pctx's thread would poll
 * for: it spins no longer than that thread may (TPU_SPIN_US; 0: never).
 */
static uint64_t r_spin_max_ns(struct tpu_rendezvous *rdv)
{
	struct remote *st = rdv->impl_state;

	return st ? tpu__ctx_spin_ns(st->pctx) : UINT64_MAX;
}

/*
 * A waiter lent to pctx (since SPIN_BEGIN) spins about as long as pctx's
 * thread would have: it does that thread's work.  One that is not lent
 * only waits, and spins no longer than any waiter.
 */
static uint64_t r_spin_ns(struct tpu_rendezvous *rdv)
{
	struct remote *st = rdv->impl_state;

	return st && lent_to == st ? atomic_load(&st->lend_spin_ns) : 0;
}

/* How long r_self_served trusts what it learnt of the peers' cores. */
#define ELSEWHERE_NS	100000000ull
/* Peers asked about at most; beyond them a lone core is assumed shared. */
#define ELSEWHERE_MAX	64

/*
 * Whether no peer process may run on this process's lone core: 1 yes, 0
 * no, -1 not known yet (a pipe still negotiating, or none).  Lent to pctx,
 * so its pipes are ours to look at.  A pipe that proves no pid (tcp)
 * counts as sharing.
 */
static int peers_elsewhere(struct remote *st)
{
	pid_t pids[ELSEWHERE_MAX];
	size_t n = 0;

	for (struct remote_task *t = tpu__remote_tasks(st); t; t = t->next) {
		struct remote_peer *ends[2] = { t->peer, t->inbound };

		for (int i = 0; i < 2; i++) {
			int pid = 0;
			tpu_status err;

			if (!ends[i] || !ends[i]->pipe)
				continue;
			if (n == ELSEWHERE_MAX)
				return 0;
			err = tpu_pipe_peer_pid(ends[i]->pipe, &pid);
			if (err == -EAGAIN)
				return -1;
			if (err)
				return 0;
			pids[n++] = pid;
		}
	}
	return n ? tpu__spin_peers_elsewhere(pids, n) : -1;
}

/*
 * A waiter lent to pctx reads the peers' frames itself: what ends its wait
 * comes from another process, and its spin needs no thread of ours, nor,
 * on a lone core, a core another peer may need.  What peers_elsewhere()
 * found is kept for ELSEWHERE_NS, or until a pipe to a peer is added
 * (remote_peer.c clears st->elsewhere_ns); what it could not tell yet is
 * asked again at the next wait.
 */
static bool r_self_served(struct tpu_rendezvous *rdv)
{
	struct remote *st = rdv->impl_state;
	uint64_t now, then;
	int yes;

	if (!st || lent_to != st)
		return false;
	if (!tpu__spin_lone_core())
		return true;
	now = tpu__mono_ns();
	then = atomic_load_explicit(&st->elsewhere_ns, memory_order_relaxed);
	if (then && now - then < ELSEWHERE_NS)
		return atomic_load_explicit(&st->elsewhere, memory_order_relaxed);
	yes = peers_elsewhere(st);
	if (yes < 0)
		return false;
	atomic_store_explicit(&st->elsewhere, yes, memory_order_relaxed);
	atomic_store_explicit(&st->elsewhere_ns, now, memory_order_relaxed);
	return yes;
}

/*
 * A waiter done spinning sleeps where pctx's thread would: lent to pctx,
 * on its wake descriptor, with the pollers armed, so that the frame which
 * ends the wait wakes the waiter itself, which reads it and finishes its
 * own op (one wake-up per hand-off, not pctx's thread's and then the
 * waiter's).  A waiter not lent (pctx's thread was awake, or the work is
 * the thread's own) sleeps on st->kick_seq.  The token is kick_seq: a
 * word posted by another thread (pctx's, a cancel, the inner rendezvous)
 * changes it and wakes either sleep.
 */
static uint32_t r_wait_token(struct tpu_rendezvous *rdv)
{
	struct remote *st = rdv->impl_state;

	return st ? atomic_load(&st->kick_seq) : 0;
}

/* Give pctx back in the middle of a wait: its own thread has work only it can do. */
static void stand_down(struct remote *st)
{
	lent_to = NULL;
	stood_down = st;
	tpu__ctx_lend_end(st->pctx, false);
}

static void flush_run(struct tpu__task *t)
{
	struct remote *st = tpu__container_of(t, struct remote, flush_task);

	atomic_store(&st->flush_queued, false);
	tpu__remote_withheld_flush(st);
	tpu__remote_put(st);
}

/*
 * A waiter about to sleep: the REQs held back while it spun go now (on
 * this thread if it is lent to pctx, else pctx's thread is asked to).
 */
static void withheld_go(struct remote *st)
{
	if (!atomic_load_explicit(&st->nwithheld, memory_order_relaxed))
		return;
	if (lent_to == st) {
		tpu__remote_withheld_flush(st);
		return;
	}
	if (atomic_exchange(&st->flush_queued, true))
		return;
	st->flush_task.fn = flush_run;
	tpu__remote_get(st);
	tpu__ctx_defer(st->pctx, &st->flush_task);
}

static void r_wait_sleep(struct tpu_rendezvous *rdv, uint32_t token, uint64_t deadline_ns)
{
	struct remote *st = rdv->impl_state;
	struct timespec ts, *tsp = NULL;
	uint64_t now;

	if (!st)
		return;
	/*
	 * REQs withheld: sleep at most REMOTE_HOLD_NS first (the push that
	 * answers them wakes this thread, as any post), then send them.
	 */
	if (atomic_load_explicit(&st->nwithheld, memory_order_relaxed) &&
	    !atomic_load(&st->hooks_off)) {
		now = tpu__mono_ns();
		if (hold_for != st) {
			hold_for = st;
			hold_until = now + REMOTE_HOLD_NS;
		}
		if (now >= hold_until)
			withheld_go(st);
		else if (!deadline_ns || deadline_ns > hold_until)
			deadline_ns = hold_until;
	}
	if (lent_to == st && atomic_load(&st->hooks_off))
		stand_down(st);
	if (lent_to == st) {
		bool own = false;

		atomic_store(&st->lend_asleep, true);
		if (atomic_load(&st->kick_seq) == token)
			own = tpu__ctx_lend_sleep(st->pctx, deadline_ns);
		atomic_store(&st->lend_asleep, false);
		if (own)
			stand_down(st);
		return;
	}
	if (deadline_ns) {
		now = tpu__mono_ns();
		if (now >= deadline_ns)
			return;
		ts.tv_sec = (time_t)((deadline_ns - now) / 1000000000ull);
		ts.tv_nsec = (long)((deadline_ns - now) % 1000000000ull);
		tsp = &ts;
	}
	atomic_fetch_add(&st->word_sleepers, 1);
	syscall(SYS_futex, &st->kick_seq, FUTEX_WAIT_PRIVATE, token, tsp, NULL, 0);
	atomic_fetch_sub(&st->word_sleepers, 1);
}

/* A sleeping waiter's word posted by another thread. */
void tpu__remote_waiters_kick(struct remote *st)
{
	atomic_fetch_add(&st->kick_seq, 1);
	if (atomic_load(&st->word_sleepers))
		syscall(SYS_futex, &st->kick_seq, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
	if (atomic_load(&st->lend_asleep))
		tpu__ctx_lend_wake(st->pctx);
}

static void r_wait_kick(struct tpu_rendezvous *rdv)
{
	struct remote *st = rdv->impl_state;

	if (st)
		tpu__remote_waiters_kick(st);
}

static void local_send_done(void *arg, tpu_status status)
{
	struct tpu__op *op = arg;

	tpu__remote_op_done(op, status, status ? 0 : op->tensor.len);
}

static void local_recv_done(void *arg, tpu_status status, size_t len)
{
	struct tpu__op *op = arg;

	tpu__remote_op_done(op, status, len);
}

static void local_recv_buffer_done(void *arg, tpu_status status, struct tpu_buffer *buf,
				   size_t len)
{
	struct tpu__op *op = arg;

	op->out_buffer = buf;
	local_recv_done(op, status, len);
}

/* ---- the operations ---- */

static tpu_status r_send(struct tpu_rendezvous *rdv, struct tpu__op *op)
{
	struct remote *st = rdv->impl_state;
	struct tpu_str src, dst;
	bool parse = false;
	tpu_status err;

	/* A REQ for it came first: its parse is in the outbox's entry. */
	err = tpu__remote_serve_send(st, op, NULL, &parse);
	if (!parse)
		return err;
	if (!tpu__remote_key_tasks(op->key, op->key_len, &src, &dst))
		return TPU_E_BAD_KEY;
	if (str_eq(src, dst))
		return tpu_rendezvous_send(st->inner, op->key, op->key_len, &op->tensor, op->flags,
					   local_send_done, op);
	if (!tpu__remote_is_self(st, src)) {
		tpu__log_debug("remote rendezvous %s: a send of a key whose source is %.*s",
			       st->self, (int)src.len, src.ptr);
		return -EXDEV;
	}
	return tpu__remote_serve_send(st, op, &dst, &parse);
}

static tpu_status r_recv(struct tpu_rendezvous *rdv, struct tpu__op *op)
{
	struct remote *st = rdv->impl_state;
	struct tpu_str src, dst;

	if (!tpu__remote_key_tasks(op->key, op->key_len, &src, &dst))
		return TPU_E_BAD_KEY;
	if (str_eq(src, dst)) {
		if (op->kind == TPU__OP_RECV_BUFFER)
			return tpu_rendezvous_recv_buffer(st->inner, op->key, op->key_len,
							  op->tensor.len, op->timeout_ns,
							  local_recv_buffer_done, op);
		return tpu_rendezvous_recv(st->inner, op->key, op->key_len, &op->tensor,
					   op->timeout_ns, local_recv_done, op);
	}
	if (tpu__remote_is_self(st, src)) {
		tpu__log_debug("remote rendezvous %s: a receive of a key this worker sends to %.*s",
			       st->self, (int)dst.len, dst.ptr);
		return -EXDEV;
	}
	return tpu__remote_fetch_recv(st, op, src);
}

static int r_cancel(struct tpu_rendezvous *rdv, const uint8_t *key, size_t key_len)
{
	struct remote *st = rdv->impl_state;
	struct tpu_str src, dst;
	size_t started;
	int n;

	if (!tpu__remote_key_tasks(key, key_len, &src, &dst))
		return -ENOENT;
	/* Called while a destroy runs on another thread: the inner one may be gone. */
	pthread_mutex_lock(&st->lock);
	n = st->closing ? -ENOENT : 0;
	pthread_mutex_unlock(&st->lock);
	if (n)
		return n;
	if (str_eq(src, dst))
		return tpu_rendezvous_cancel(st->inner, key, key_len) ? 0 : 1;
	started = tpu__rdv_started(rdv, key, key_len);
	n = tpu__remote_serve_cancel(st, key, key_len);
	/*
	 * What is left are receives (their CANCEL goes out on the context
	 * thread) and sends being written (watched there: REMOTE_STALL_NS).
	 */
	if ((size_t)n < started && tpu__remote_fetch_cancel(st, key, key_len) > 0)
		n++;
	return n;
}

static void abort_run(struct tpu__task *t)
{
	struct remote *st = tpu__container_of(t, struct remote, abort_task);

	if (!st->destroyed) {
		/*
		 * ABORT first: on each pipe it then reaches the peer before the
		 * answers that carry the status, so the peer aborts with this
		 * status, not with what a failure of its own would choose
		 * (collectives abort with -ECONNABORTED when a run fails).
		 */
		tpu__remote_peers_abort(st, st->abort_status);
		tpu__remote_serve_answer_all(st, st->abort_status);
		tpu__remote_fetch_fail_all(st, st->abort_status);
	}
	tpu__remote_put(st);
}

static tpu_status r_abort(struct tpu_rendezvous *rdv, tpu_status status)
{
	struct remote *st = rdv->impl_state;
	tpu_status err;

	pthread_mutex_lock(&st->lock);
	err = st->aborted ? -EALREADY : st->closing ? TPU_E_CLOSED : 0;
	if (err) {
		pthread_mutex_unlock(&st->lock);
		return err;
	}
	st->aborted = status;
	st->abort_status = status;
	/* Under the lock: a destroy on another thread takes the inner one once closing. */
	tpu_rendezvous_abort(st->inner, status);
	pthread_mutex_unlock(&st->lock);
	tpu__log_debug("remote rendezvous %s: aborted: %s; telling the peers", st->self,
		       tpu_strerror(status));
	tpu__remote_serve_fail_all(st, status);
	st->abort_task.fn = abort_run;
	tpu__remote_get(st);
	tpu__ctx_defer(st->pctx, &st->abort_task);
	return 0;
}

static void drain_timeout(void *arg, tpu_status status)
{
	struct remote *st = arg;

	if (!status)
		st->drain_expired = true;
	tpu__remote_put(st);
}

static bool drained(void *arg)
{
	const struct remote *st = arg;

	return !st->serving || st->drain_expired || tpu__mono_ns() >= st->drain_until;
}

/*
 * A peer reading one of our tensors reads this process's memory until its
 * channel is done; closing the pipe would call the send back at once and
 * hand that memory back to its owner while it is still being read.  Wait
 * for those answers (bounded: a peer that stopped reading is not waited
 * for beyond REMOTE_DRAIN_NS).
 */
static void drain_answers(struct remote *st)
{
	if (!st->serving)
		return;
	st->drain_timer.fn = drain_timeout;
	st->drain_timer.arg = st;
	st->drain_until = tpu__mono_ns() + REMOTE_DRAIN_NS;
	tpu__remote_get(st);
	if (tpu__ctx_timer_start(st->pctx, &st->drain_timer, REMOTE_DRAIN_NS)) {
		tpu__remote_put(st);
		return;
	}
	tpu__ctx_wait(st->pctx, drained, st);
	if (!st->drain_expired)
		tpu__ctx_timer_cancel(st->pctx, &st->drain_timer);
	else
		tpu__log_debug("remote rendezvous %s: destroyed with %u answers still being read",
			       st->self, st->serving);
}

static void destroy_on_ctx(void *arg)
{
	struct remote *st = arg;

	st->destroyed = true;
	tpu__remote_serve_fail_all(st, TPU_E_CLOSED);
	tpu__remote_fetch_fail_all(st, TPU_E_CLOSED);
	tpu_listener_close(st->listener);
	st->listener = NULL;
	drain_answers(st);
	while (st->peers)
		tpu__remote_peer_end(st->peers, TPU_E_CLOSED);
	for (struct remote_task *t = tpu__remote_tasks(st); t; t = t->next)
		if (t->retry_on)
			tpu__ctx_timer_cancel(st->pctx, &t->retry);
}

static void r_destroy(struct tpu_rendezvous *rdv)
{
	struct remote *st = rdv->impl_state;

	pthread_mutex_lock(&st->lock);
	st->closing = true;
	pthread_mutex_unlock(&st->lock);
	/*
	 * On the caller's thread (its callbacks, which complete our local
	 * ops, run on the user's context, perhaps this thread): once closing,
	 * neither a peer's ABORT (r_abort) nor an op reaches it any more.
	 */
	tpu_rendezvous_destroy(st->inner);
	st->inner = NULL;
	/* Lent threads give pctx back: its own thread runs what follows. */
	atomic_store(&st->hooks_off, true);
	tpu__ctx_run_sync(st->pctx, destroy_on_ctx, st);
}

/* No thread is in the front end any more: nothing lends itself to pctx. */
static void r_release(struct tpu_rendezvous *rdv)
{
	struct remote *st = rdv->impl_state;

	tpu_context_destroy(st->pctx);
	st->pctx = NULL;
	st->rdv = NULL;
	rdv->impl_state = NULL;
	tpu__remote_put(st);
}

static tpu_status r_share(struct tpu_rendezvous *rdv, int *fd)
{
	(void)rdv;
	(void)fd;
	return -ENOTSUP;
}

static tpu_status r_create(struct tpu_rendezvous *rdv)
{
	(void)rdv;
	return -EINVAL;	/* only through tpu_rendezvous_create_remote() */
}

static tpu_status r_join(struct tpu_rendezvous *rdv, int fd)
{
	(void)rdv;
	(void)fd;
	return -EINVAL;
}

const struct tpu__rdv_ops tpu__remote_ops = {
	.impl = TPU_RDV_REMOTE,
	.create = r_create,
	.join = r_join,
	.share = r_share,
	.destroy = r_destroy,
	.send = r_send,
	.recv = r_recv,
	.cancel = r_cancel,
	.abort = r_abort,
	.progress = r_progress,
	.spin_ns = r_spin_ns,
	.spin_max_ns = r_spin_max_ns,
	.self_served = r_self_served,
	.wait_token = r_wait_token,
	.wait_sleep = r_wait_sleep,
	.wait_kick = r_wait_kick,
	.issued = r_issued,
	.release = r_release,
	.owns_pipes = true,
};

/* ---- public ---- */

static void accepted(void *arg, tpu_status status, struct tpu_pipe *pipe)
{
	struct remote *st = arg;

	if (status || st->destroyed) {
		tpu_pipe_close(pipe);
		/* A failed accept (other than our close) ends accepting too. */
		if (status && status != TPU_E_CLOSED)
			tpu__log_debug("remote rendezvous %s: accept failed: %s", st->self,
				       tpu_strerror(status));
		tpu__remote_put(st);
		return;
	}
	tpu__remote_peer_accepted(st, pipe);
	if (tpu_listener_accept(st->listener, accepted, st))
		tpu__remote_put(st);
}

static void listen_on_ctx(void *arg)
{
	struct remote *st = arg;

	tpu__remote_get(st);
	if (tpu_listener_accept(st->listener, accepted, st))
		tpu__remote_put(st);
}

TPU_API tpu_status tpu_rendezvous_create_remote(struct tpu_context *ctx,
						const struct tpu_remote_options *opts,
						struct tpu_rendezvous **out)
{
	struct tpu_context_options po = { 0 };
	struct tpu_rendezvous *rdv = NULL;
	struct remote *st;
	tpu_status err;
	size_t i;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!ctx || !opts || !tpu__remote_task_ok(opts->task) || (opts->npeers && !opts->peers) ||
	    (opts->nlisten && !opts->listen_urls) || !tpu__reserved_zero(opts->reserved))
		return -EINVAL;
	err = tpu__ctx_check(ctx);
	if (err)
		return err;
	st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	atomic_init(&st->refs, 1);
	atomic_init(&st->hooks_off, false);
	atomic_init(&st->kick_seq, 0);
	atomic_init(&st->word_sleepers, 0);
	atomic_init(&st->lend_asleep, false);
	pthread_mutex_init(&st->lock, NULL);
	tpu__free_list_init(&st->entry_free, offsetof(struct remote_entry, next),
			    offsetof(struct remote_entry, key_cap), REMOTE_FREE_MAX, NULL);
	tpu__free_list_init(&st->req_free, offsetof(struct remote_req, next), TPU__FREE_NO_ROOM,
			    REMOTE_FREE_MAX, NULL);
	tpu__free_list_init(&st->fetch_free, offsetof(struct remote_fetch, next), TPU__FREE_NO_ROOM,
			    REMOTE_FREE_MAX, NULL);
	tpu__free_list_init(&st->pushed_free, offsetof(struct remote_pushed, next),
			    offsetof(struct remote_pushed, key_cap), REMOTE_FREE_MAX, NULL);
	tpu__free_list_init(&st->inbox_free, offsetof(struct remote_inbox, next),
			    offsetof(struct remote_inbox, cap), REMOTE_FREE_MAX, NULL);
	tpu__remote_peer_free_lists_init(st);
	st->ctx = ctx;
	st->backoff_min_ns = REMOTE_BACKOFF_MIN_NS;
	st->stall_ns = REMOTE_STALL_NS;
	st->backoff_max_ns = REMOTE_BACKOFF_MAX_NS;
	st->max_reqs = (unsigned int)tpu__env_u64("TPU_REMOTE_MAX_REQS", REMOTE_MAX_REQS_DEFAULT, 1,
						  1u << 20);
	st->push_off = !tpu__env_u64("TPU_REMOTE_PUSH", 1, 0, 1);
	atomic_init(&st->nwithheld, 0);
	atomic_init(&st->flush_queued, false);
	atomic_init(&st->hold_queued, false);
	st->inbox_tail = &st->inbox;
	/* The pipes' own context, restricted as the user's is. */
	po.dev_path = tpu__ctx_dev_path(ctx);
	po.flags = tpu__ctx_flags(ctx);
	po.transports = tpu__ctx_transports(ctx);
	po.channels = tpu__ctx_channels(ctx);
	st->self_len = strlen(opts->task);
	memcpy(st->self, opts->task, st->self_len + 1);
	for (i = 0, err = 0; i < opts->npeers && !err; i++) {
		err = task_add(st, opts->peers[i].task, opts->peers[i].url);
		/* A list that names a task twice is a bad argument, not a late conflict. */
		if (err == -EEXIST)
			err = -EINVAL;
	}
	if (!err)
		err = tpu_context_create(&po, &st->pctx);
	if (!err) {
		/* Our pipes prove the secret of the user's context. */
		struct tpu__secret sec;

		tpu__ctx_secret(ctx, &sec);
		tpu__ctx_set_secret(st->pctx, &sec);
		/* Every pipe of pctx proves it from now on: one per pair carries both ways. */
		st->one_pipe = sec.set;
		memset(&sec, 0, sizeof(sec));
	}
	if (!err)
		atomic_init(&st->lend_spin_ns, tpu__ctx_spin_ns(st->pctx));
	if (!err)
		err = tpu_rendezvous_create(ctx, TPU_RDV_INPROCESS, &st->inner);
	if (!err)
		err = tpu_listener_create(st->pctx, opts->listen_urls, opts->nlisten,
					  &st->listener);
	if (!err)
		err = tpu__rdv_create_with(ctx, &tpu__remote_ops, st, &rdv);
	if (err) {
		tpu_listener_close(st->listener);
		tpu_rendezvous_destroy(st->inner);
		tpu_context_destroy(st->pctx);
		tpu__remote_put(st);
		return err;
	}
	st->rdv = rdv;
	tpu__ctx_run_sync(st->pctx, listen_on_ctx, st);
	tpu__log_debug("rendezvous %p: remote, worker %s", (void *)rdv, st->self);
	*out = rdv;
	return 0;
}

/*
 * A live remote rendezvous entered (tpu__rdv_enter: its state stays until
 * remote_leave), and its state in *@st; else its check's status
 * (TPU_E_FORKED...), or -EINVAL for another kind.
 */
static tpu_status remote_enter(const struct tpu_rendezvous *rdv, struct remote **st)
{
	struct tpu_rendezvous *r = (struct tpu_rendezvous *)rdv;	/* its users count */
	tpu_status err = tpu__rdv_check(rdv);

	if (!err && !tpu__rdv_is(rdv, &tpu__remote_ops))
		err = -EINVAL;
	if (!err)
		err = tpu__rdv_enter(r);
	*st = err ? NULL : r->impl_state;
	return err;
}

static void remote_leave(const struct tpu_rendezvous *rdv)
{
	tpu__rdv_leave((struct tpu_rendezvous *)rdv);
}

TPU_API tpu_status tpu_rendezvous_add_peer(struct tpu_rendezvous *rdv, const char *task,
					   const char *url)
{
	struct remote *st;
	tpu_status err = remote_enter(rdv, &st);

	if (err)
		return err;
	pthread_mutex_lock(&st->lock);
	err = task_add(st, task, url);
	pthread_mutex_unlock(&st->lock);
	remote_leave(rdv);
	return err;
}

TPU_API tpu_status tpu_rendezvous_url(const struct tpu_rendezvous *rdv, const char *transport,
				      char *buf, size_t size)
{
	struct remote *st;
	tpu_status err;

	if (!buf)
		return tpu__rdv_check(rdv) ?: -EINVAL;
	err = remote_enter(rdv, &st);
	if (err)
		return err;
	err = tpu_listener_url(st->listener, transport, buf, size);
	remote_leave(rdv);
	return err;
}

/* For the test queries, on the context thread: the map's task called @task. */
static struct remote_task *task_named(struct remote *st, const char *task)
{
	struct remote_task *t;

	pthread_mutex_lock(&st->lock);
	t = tpu__remote_task_find(st, task, strlen(task));
	pthread_mutex_unlock(&st->lock);
	return t;
}

struct path_query {
	struct remote *st;
	const char *task;
	tpu_status err;
	const char *transport, *channel;
};

static void path_on_ctx(void *arg)
{
	struct path_query *q = arg;
	struct remote_task *t;

	t = task_named(q->st, q->task);
	if (!t) {
		q->err = -EHOSTUNREACH;
	} else {
		/* Ours to it, else the one it opened to us. */
		struct remote_peer *p = t->peer && !t->peer->dead && t->peer->pipe ? t->peer
					: t->inbound && !t->inbound->dead ? t->inbound : NULL;

		if (!p || !p->pipe) {
			q->err = -ENOTCONN;
		} else {
			q->transport = tpu_pipe_transport(p->pipe);
			q->channel = tpu_pipe_channel(p->pipe, TPU_DEVICE_CPU, TPU_DEVICE_CPU);
		}
	}
}

/*
 * @fn(@q) on @rdv's pipe context, whose thread owns the peers and tasks,
 * with *@st (a member of @q) set to the remote state first.
 */
static tpu_status run_on_pctx(struct tpu_rendezvous *rdv, void (*fn)(void *arg), void *q,
			      struct remote **st)
{
	tpu_status err = remote_enter(rdv, st);

	if (err)
		return err;
	tpu__ctx_run_sync((*st)->pctx, fn, q);
	remote_leave(rdv);
	return 0;
}

TPU_API tpu_status tpu_rendezvous_peer_path(struct tpu_rendezvous *rdv, const char *task,
					    const char **transport, const char **channel)
{
	struct path_query q = { .task = task };
	tpu_status err = tpu__rdv_check(rdv);

	if (err)
		return err;
	if (!task || !transport || !channel)
		return -EINVAL;
	err = run_on_pctx(rdv, path_on_ctx, &q, &q.st);
	if (err)
		return err;
	if (!q.err) {
		*transport = q.transport;
		*channel = q.channel;
	}
	return q.err;
}

struct pid_query {
	struct remote *st;
	const char *task;
	tpu_status err;
	pid_t pid;
};

/* Every live pipe to the task must prove the same pid: one that proves none makes it 0. */
static void pid_on_ctx(void *arg)
{
	struct pid_query *q = arg;
	struct remote_task *t = task_named(q->st, q->task);
	bool any = false;

	if (!t) {
		q->err = -EHOSTUNREACH;
		return;
	}
	q->pid = -1;
	for (int i = 0; i < 2 && !q->err; i++) {
		struct remote_peer *p = i ? t->inbound : t->peer;
		int v = 0;

		if (!p || p->dead || !p->pipe)
			continue;
		q->err = tpu_pipe_peer_pid(p->pipe, &v);
		if (!q->err)
			q->pid = any && q->pid != v ? 0 : v;
		any = true;
	}
	if (!any)
		q->err = -ENOTCONN;
}

tpu_status tpu__remote_peer_pid(struct tpu_rendezvous *rdv, const char *task, pid_t *pid)
{
	struct pid_query q = { .task = task };
	tpu_status err = tpu__rdv_check(rdv);

	if (!pid)
		return -EINVAL;
	*pid = 0;
	if (err)
		return err;
	if (!task)
		return -EINVAL;
	err = run_on_pctx(rdv, pid_on_ctx, &q, &q.st);
	if (err)
		return err;
	if (!q.err)
		*pid = q.pid > 0 ? q.pid : 0;
	return q.err;
}

struct count_query {
	struct remote *st;
	unsigned int pipes, accepted, abandoned;
};

static void count_on_ctx(void *arg)
{
	struct count_query *q = arg;
	struct remote_peer *p;

	for (p = q->st->peers; p; p = p->next) {
		q->abandoned += p->nabandoned;
		if (p->dead || !p->pipe)
			continue;
		q->pipes++;
		q->accepted += p->accepted;
	}
}

tpu_status tpu__remote_pipe_count(struct tpu_rendezvous *rdv, unsigned int *pipes,
				  unsigned int *accepted)
{
	struct count_query q = { 0 };
	tpu_status err = run_on_pctx(rdv, count_on_ctx, &q, &q.st);

	if (err)
		return err;
	*pipes = q.pipes;
	*accepted = q.accepted;
	return 0;
}

tpu_status tpu__remote_abandoned(struct tpu_rendezvous *rdv, unsigned int *n)
{
	struct count_query q = { 0 };
	tpu_status err = run_on_pctx(rdv, count_on_ctx, &q, &q.st);

	if (!err)
		*n = q.abandoned;
	return err;
}

struct push_query {
	struct remote *st;
	struct remote_push_stats *out;
};

static void push_stats_on_ctx(void *arg)
{
	struct push_query *q = arg;

	*q->out = q->st->push_stats;
}

tpu_status tpu__remote_push_stats(struct tpu_rendezvous *rdv, struct remote_push_stats *out)
{
	struct push_query q = { .out = out };

	return run_on_pctx(rdv, push_stats_on_ctx, &q, &q.st);
}

struct retry_query {
	struct remote *st;
	const char *task;
	struct remote_retry_stats *out;
	uint64_t min_ns, max_ns, stall_ns;
	tpu_status err;
};

static void retry_stats_on_ctx(void *arg)
{
	struct retry_query *q = arg;
	struct remote_task *t;

	t = task_named(q->st, q->task);
	if (!t) {
		q->err = -EHOSTUNREACH;
		return;
	}
	q->out->retries = t->retries;
	q->out->early = t->early_retries;
	q->out->pending = t->retry_on;
	q->out->backoff_ns = t->backoff_ns;
}

tpu_status tpu__remote_retry_stats(struct tpu_rendezvous *rdv, const char *task,
				   struct remote_retry_stats *out)
{
	struct retry_query q = { .task = task, .out = out };
	tpu_status err = tpu__rdv_check(rdv);

	if (err)
		return err;
	if (!task || !out)
		return -EINVAL;
	/* The tasks' retry state is the context thread's. */
	err = run_on_pctx(rdv, retry_stats_on_ctx, &q, &q.st);
	return err ? err : q.err;
}

static void backoff_on_ctx(void *arg)
{
	struct retry_query *q = arg;

	q->st->backoff_min_ns = q->min_ns;
	q->st->backoff_max_ns = q->max_ns;
}

tpu_status tpu__remote_set_backoff(struct tpu_rendezvous *rdv, uint64_t min_ns, uint64_t max_ns)
{
	struct retry_query q = { .min_ns = min_ns, .max_ns = max_ns };
	tpu_status err = tpu__rdv_check(rdv);

	if (err)
		return err;
	if (!min_ns || min_ns > max_ns || max_ns > 3600ull * 1000000000ull)
		return -EINVAL;
	return run_on_pctx(rdv, backoff_on_ctx, &q, &q.st);
}

static void stall_on_ctx(void *arg)
{
	struct retry_query *q = arg;

	q->st->stall_ns = q->stall_ns;
}

tpu_status tpu__remote_set_stall(struct tpu_rendezvous *rdv, uint64_t ns)
{
	struct retry_query q = { .stall_ns = ns };
	tpu_status err = tpu__rdv_check(rdv);

	if (err)
		return err;
	if (!ns || ns > 3600ull * 1000000000ull)
		return -EINVAL;
	return run_on_pctx(rdv, stall_on_ctx, &q, &q.st);
}

static void hold_run(struct tpu__task *t)
{
	struct remote *st = tpu__container_of(t, struct remote, hold_task);
	struct timespec ts = {
		.tv_sec = (time_t)(st->hold_ns / 1000000000ull),
		.tv_nsec = (long)(st->hold_ns % 1000000000ull),
	};

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
	atomic_store(&st->hold_queued, false);
}

tpu_status tpu__remote_hold_ctx(struct tpu_rendezvous *rdv, uint64_t ns)
{
	struct remote *st;
	tpu_status err;

	if (!ns || ns > 10ull * 1000000000ull)
		return -EINVAL;
	err = remote_enter(rdv, &st);
	if (err)
		return err;
	if (atomic_exchange(&st->hold_queued, true)) {
		remote_leave(rdv);
		return -EBUSY;
	}
	st->hold_ns = ns;
	st->hold_task.fn = hold_run;
	tpu__ctx_defer(st->pctx, &st->hold_task);
	remote_leave(rdv);
	return 0;
}
