/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * lib/remote: the remote rendezvous, TensorFlow's rendezvous across
 * workers (remote.c: the public calls and the implementation's ops;
 * remote_peer.c: one pipe per pair of workers and its read loop;
 * remote_serve.c: tensors kept here for other workers; remote_fetch.c:
 * receives of tensors kept elsewhere; remote_wire.c: the messages).  Built
 * on lib/rdv (it is an implementation behind the front end) and on the
 * public pipe calls.  Not installed.
 *
 * Keys whose source and destination are on one task are matched in an
 * inner inprocess rendezvous.  Any other key is kept by the worker of its
 * source device, in the outbox, until a REQ for it comes over a pipe; the
 * answer (RESP) carries the tensor straight from the producer's memory as
 * a pipe tensor, which the requester reads into the receive's own memory.
 *
 * Threading: the pipes live on a context of their own (st->pctx), made
 * with the user's context's options, so that every callback on it is this
 * implementation's: the user's context runs only the rendezvous's
 * callbacks.  Pipes are driven from pctx's thread only, or from a thread
 * lent to it (tpu__ctx_lend_begin): a thread blocked in recv_wait does the
 * pipe work itself while it spins (remote_progress), and a thread whose
 * send or receive deferred pipe work does it right after the front end's
 * lock is dropped (remote_issued), so that a hand-off costs no wake-up of
 * pctx's thread; one that stops spinning sleeps, still lent, on pctx's
 * wake descriptor in its thread's place (r_wait_sleep), so the frame that
 * ends its wait wakes it alone.  A user thread's send or receive changes the shared
 * tables under st->lock and defers the pipe work (tpu__remote_defer); no
 * pipe call is made with st->lock held, since on the context thread a pipe
 * may call back at once.  Everything marked "ctx thread" is touched only
 * there (pctx's thread or the thread lent to it) and needs no lock.
 * Ops are completed with tpu__op_complete_unlocked(): a blocked receive's
 * is finished where its tensor arrived, with no trip through a queue.
 *
 * Life: struct remote is freed with its last reference: the rendezvous
 * holds one until its destroy ran, each peer one.  A peer is freed once
 * it left the map and nothing of its pipe is in flight.
 */
#ifndef TPU_REMOTE_H
#define TPU_REMOTE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rdv/rdv.h"

/* "/job:J/replica:R/task:T": the part of a device name that names a worker. */
#define REMOTE_TASK_MAX		256

/* ---- wire (remote_wire.c) ---- */

enum remote_msg {
	REMOTE_HELLO = 1,	/* key: the sender's task; len: REMOTE_HELLO_* flags */
	REMOTE_REQ,		/* id, key, len: the receiver's capacity */
	REMOTE_RESP,		/* id, status, len: the tensor's; the tensor if status is 0 */
	REMOTE_CANCEL,		/* id: withdraw that REQ */
	REMOTE_ABORT,		/* status */
	/* Only on a pipe whose two ends said REMOTE_HELLO_PUSH (the push protocol): */
	REMOTE_PUSH,		/* seq, key, len: a small tensor sent before any REQ */
	REMOTE_CREDIT,		/* seq: that push was taken from the inbox */
	REMOTE_REQ_SEEN,	/* a REQ, and seq: the last push this asker had seen */
};

/*
 * HELLO's flag: the sender (the pipe's opener) also answers REQs on this
 * pipe, so the accepting end may ask on it too.  Sent only with a job
 * secret, and taken only with one (the pipe proved it, so the HELLO's
 * claim is a member's word): one pipe per pair of workers then carries
 * both directions.  A worker that never sets it is asked only on pipes
 * of its own, as before.
 */
#define REMOTE_HELLO_BOTH_WAYS	1u
/*
 * HELLO's flag: the sender speaks the push protocol (below).  The
 * accepting end answers such a HELLO with a HELLO of its own carrying
 * it; an end that never saw the flag from the other is never sent a
 * message of the push protocol, so a worker without it is served by
 * REQ and RESP alone.
 */
#define REMOTE_HELLO_PUSH	2u

/*
 * The push protocol, only with a job secret (every pipe proved it, so a
 * task's pipe is that member's own: no process that merely claims to be
 * a consumer is sent anything it did not ask for).  A send of at most
 * REMOTE_PUSH_MAX bytes whose key no REQ asked for yet goes at once
 * (PUSH, numbered per pipe) on the pipe on which its consumer, a member,
 * asks us, rather than waiting in the outbox for the REQ: a hand-off then costs one message on its way instead of the
 * REQ's and the RESP's.  Receivers still send their REQs (REQ_SEEN, with
 * the number of the last push they had seen), so a send that was not
 * pushed is served as before and no receive waits for a push that never
 * comes.  Each side decides alike which REQ a push answers: the oldest
 * REQ for its key that was sent before the push arrived, the one whose
 * seq is below the push's.  That receive takes the push, and the pusher
 * drops that REQ when it comes.  A push nobody waits for goes into the
 * receiver's inbox, where a later receive takes it without a REQ, and a
 * CREDIT says so.  What the inbox may hold of one pipe is the pusher's
 * window (REMOTE_PUSH_WINDOW pushes, REMOTE_PUSH_WINDOW_BYTES): a push
 * past it ends the pipe.  What one pipe pushed into the inbox goes with
 * it when it ends, as an answer in flight on it would.
 */
#define REMOTE_PUSH_MAX			(64u << 10)
#define REMOTE_PUSH_WINDOW		64u
#define REMOTE_PUSH_WINDOW_BYTES	(1u << 20)
/*
 * A blocking receive (recv_wait) of at most REMOTE_PUSH_MAX bytes, on a
 * pipe that has carried a push already (its other end pushes to us),
 * holds its REQ back while its waiter spins, since the push likely comes
 * first: it is *withheld*, and a push of its key answers it as one that
 * found no REQ (so a CREDIT is owed).  A waiter that stops spinning
 * sleeps at most REMOTE_HOLD_NS with REQs withheld (on one core, or with
 * TPU_SPIN_US=0, the producer runs only then); before it sleeps longer,
 * every REQ withheld goes (REQ_SEEN, as if just posted): a send that was
 * not pushed (its window was full, say) is asked for as before, and no
 * waiter sleeps for long on a REQ never sent.
 * Credits owed go in batches of REMOTE_CREDIT_BATCH (one CREDIT carries
 * them: the first in seq, the others in the key's bytes, 8 each), before
 * a REQ_SEEN on their pipe, or with those withheld REQs; what inbox takes
 * free goes behind the context's queued tasks, so that a burst of takes
 * sends one CREDIT.
 */
#define REMOTE_CREDIT_BATCH		16u
#define REMOTE_HOLD_NS			1000000ull

struct remote_hdr {
	enum remote_msg type;
	uint64_t id;
	tpu_status status;
	uint64_t len;
	uint64_t seq;		/* PUSH, CREDIT, REQ_SEEN only */
	const uint8_t *key;	/* into the message's metadata */
	size_t key_len;
};

/* Encoded size of a header with a key of @key_len bytes (HELLO to ABORT). */
size_t tpu__remote_wire_size(size_t key_len);
/* Encoded size of a message of @type with a key of @key_len bytes. */
size_t tpu__remote_wire_size_of(enum remote_msg type, size_t key_len);
/* Encode @h into @buf (tpu__remote_wire_size_of(h->type, h->key_len) bytes). */
void tpu__remote_wire_put(const struct remote_hdr *h, uint8_t *buf);
/* Decode; -EPROTO when @buf is no message of ours. */
tpu_status tpu__remote_wire_get(const void *buf, size_t len, struct remote_hdr *h);

/* ---- the state ---- */

struct remote_peer;
struct remote_write;

/* For tests: what the push protocol did on this worker (ctx thread). */
struct remote_push_stats {
	unsigned long pushed;		/* sends that went as a PUSH */
	unsigned long reqs_dropped;	/* REQ_SEENs a push of ours had answered */
	unsigned long credits;		/* CREDITs taken */
	unsigned long answered;		/* pushes that answered a REQ of ours */
	unsigned long inboxed;		/* pushes that waited in the inbox */
	unsigned long withheld;		/* receives that held their REQ back */
	unsigned long swept;		/* of those, asked after all (a waiter slept) */
	unsigned long credit_msgs;	/* CREDIT messages written */
};

/*
 * A push whose REQ or CREDIT has not come back yet (the pusher's side, on
 * its peer, ctx thread): what the window counts.
 */
struct remote_pushed {
	struct remote_pushed *next;
	uint64_t seq;
	uint64_t hash;			/* tpu__rdv_key_hash of the key */
	size_t len;			/* the tensor's */
	size_t key_len;
	size_t key_cap;			/* room in key[] (recycled records) */
	uint8_t key[];
};

/*
 * A push nobody waited for (the receiver's side): in st->inbox under
 * st->lock until a receive takes it; then, on the ctx thread, its tensor
 * is given to that receive and a CREDIT goes back on its pipe.
 */
struct remote_inbox {
	struct remote_inbox *next;
	struct tpu__task take;
	struct remote *st;
	struct remote_peer *peer;	/* the pipe it came on (referenced) */
	struct tpu__op *op;		/* the receive that took it */
	uint8_t *data;			/* the tensor (in this record, after the key) */
	uint64_t seq;
	uint64_t hash;
	size_t len;
	bool arriving;			/* its tensor is still being read */
	/*
	 * Counted in its pipe's window (inbox_n, inbox_bytes) and credited
	 * when taken: a push nobody asked for.  False for one kept after it
	 * failed, too long, the receive it answered (its pusher's window
	 * freed it then): at most one per receive of ours that failed so.
	 */
	bool windowed;
	size_t cap;			/* room after the header, for key and tensor */
	size_t key_len;
	uint8_t key[];
};

/*
 * A task of the cluster map.  Workers of a job start in any order, so a
 * pipe to a task that has never answered is retried (REMOTE_CONNECT_NS in
 * all, backing off, or at once when that task's HELLO comes on a pipe it
 * opened to us): its fetches wait, parked, and are asked again on the
 * next pipe.  Once a pipe carried anything, its end is the peer's death.
 */
struct remote_task {
	struct remote_task *next;
	struct remote *st;
	char *task;
	char *url;
	/* ctx thread */
	struct remote_peer *peer;	/* the pipe we opened to its URL, once there is one */
	struct remote_peer *inbound;	/* the accepted pipe whose HELLO named it, if any */
	/*
	 * With a job secret, an inbound pipe whose HELLO said BOTH_WAYS
	 * carries our REQs to the task too, and @peer is opened only if there
	 * is no such pipe.  Two pipes exist only when both workers opened one
	 * before either's HELLO came; then the one opened by the lower task
	 * name carries new REQs, and the other is closed by its opener once
	 * nothing is outstanding on it (tpu__remote_peer_settle).
	 */
	struct remote_fetch *parked;	/* fetches waiting for the next connect */
	struct tpu__timer retry;
	bool retry_on;
	/*
	 * The worker opened a pipe to us (its HELLO named it) while @retry
	 * waited: the timer is being cancelled so that the retry fires now
	 * (retry_hint in remote_peer.c).  early_used: the last retry was such
	 * an early one, so the next waits for its timer.
	 */
	bool retry_early;
	bool early_used;
	unsigned int retries;		/* for tests: connects that failed and were retried */
	unsigned int early_retries;	/* for tests: retries a HELLO brought forward */
	uint64_t first_try_ns;		/* 0: no connect tried since the last success */
	uint64_t backoff_ns;
	bool answered;			/* a pipe to it carried something once: not late but gone */
};

#define REMOTE_CONNECT_NS	(30ull * 1000000000ull)
/*
 * A receive cancelled or timed out sends a CANCEL and waits for the RESP
 * its REQ still gets (a tensor on its way is delivered, not lost), but no
 * longer than this: a peer that is stopped or stuck does not hold the
 * caller past its timeout for ever.  The fetch stays, abandoned, to take
 * that RESP if it comes (read and dropped).
 */
#define REMOTE_CANCEL_GRACE_NS	(1000ull * 1000000ull)
/*
 * Fetches a pipe may keep abandoned (past their grace, for a RESP that
 * still comes: a late RESP frees its record).  A peer answers a CANCEL at
 * once unless it is stopped or hostile; past this many, its pipe ends, so
 * that receives timing out one after the other against a peer that never
 * answers cannot grow this worker's memory without end.
 */
#define REMOTE_ABANDONED_MAX	1024u
/* The back-off between two tries, doubling from the first to the last. */
#define REMOTE_BACKOFF_MIN_NS	10000000ull
#define REMOTE_BACKOFF_MAX_NS	500000000ull

/*
 * REQs a peer may have waiting in the outbox at once (for keys not sent
 * yet): TPU_REMOTE_MAX_REQS, and the bytes of their keys.  Past either, a
 * REQ is answered -ENOBUFS at once, so that a peer asking for keys that
 * never come cannot grow this worker's memory without end.
 */
#define REMOTE_MAX_REQS_DEFAULT	1024u
#define REMOTE_MAX_REQ_BYTES	(16u << 20)

/*
 * A REQ waiting in the outbox for its send; once decided, what to answer
 * (done after st->lock is dropped).
 */
struct remote_req {
	struct remote_req *next;
	struct remote_peer *peer;	/* referenced */
	uint64_t id;
	uint64_t cap;
	struct tpu__op *send;		/* answer with this tensor */
	tpu_status status;		/* else answer with this status (0: no answer) */
	uint64_t len;
};

/* One key of the outbox: its send, or the REQs that came first. */
struct remote_entry {
	struct remote_entry *next;
	struct tpu__op *send;		/* posted, not yet taken */
	struct remote_req *reqs, **reqs_tail;
	bool serve_queued;		/* a serve task for it is deferred */
	struct tpu__task serve;
	struct remote *st;
	uint64_t hash;			/* tpu__rdv_key_hash of the key (op->key_hash for a send) */
	/*
	 * Where the key's destination task is in @key, found by the parse
	 * that made the entry (its send's or its first REQ's, which also
	 * found this task the source): a REQ for these bytes that finds the
	 * entry compares its peer's claim with it and parses nothing.
	 */
	size_t dst_off, dst_len;
	size_t key_len;
	size_t key_cap;			/* room in @key (entries are recycled) */
	uint8_t key[];
};

/*
 * Entries, REQs, fetches, writes, push records and inbox entries freed are
 * kept for the next ones, up to this many of each per rendezvous, so that
 * a round trip once warm allocates nothing; a key gets at least
 * REMOTE_KEY_CAP_MIN bytes, so that one recycled fits a TF key of usual
 * length.  An inbox entry holds its tensor too: only those with room for
 * at most REMOTE_INBOX_KEEP bytes are kept, so that the list holds 1 MiB
 * at most after a burst of large pushes.
 */
#define REMOTE_FREE_MAX		64u
#define REMOTE_KEY_CAP_MIN	256u
#define REMOTE_INBOX_KEEP	(16u * 1024u)

/* A receive of a tensor kept by another worker. */
struct remote_fetch {
	struct remote_fetch *next;	/* its peer's list (ctx thread) */
	struct tpu__task start;
	struct tpu__timer timer;
	struct tpu__timer grace;	/* REMOTE_CANCEL_GRACE_NS from its CANCEL */
	struct remote *st;
	struct remote_task *task;
	struct remote_peer *peer;	/* ctx thread; referenced */
	struct tpu__op *op;		/* NULL once called back (abandoned) */
	uint64_t id;
	uint64_t cap;			/* what its REQ allows: the longest answer taken */
	int refs;			/* ctx thread: list, timer, grace */
	bool timer_on;
	bool grace_on;
	bool read_stall;		/* the grace ran out while reading: st->stall_ns more */
	bool timed_out;
	bool cancel_sent;
	bool parked;			/* in task->parked, not in a peer's list */
	bool abandoned;			/* its receive ended; counted in peer->nabandoned */
	/*
	 * Its RESP's tensor is being read into the op's memory: the op is
	 * completed only when the read is over, whatever ends the fetch
	 * meanwhile (that status is kept in @ended for a read that fails).
	 */
	bool reading;
	tpu_status ended;
	/*
	 * The push protocol: its REQ went as REQ_SEEN with this seq (the
	 * last push seen on its pipe then), so a later push of its key
	 * answers it.  A fetch whose REQ went otherwise is never answered
	 * by a push (asked false).
	 */
	bool asked_seen;
	uint64_t seen_seq;
	bool withheld;			/* listed on its peer, its REQ held back (ctx thread) */
	/* Its key's hash and length, for a push that comes after its op ended. */
	uint64_t key_hash;
	size_t key_len;
};

struct remote {
	struct tpu_context *ctx;	/* the user's: the rendezvous's callbacks */
	struct tpu_context *pctx;	/* ours: the pipes, timers and deferred work */
	atomic_bool hooks_off;		/* destroyed: progress and issued lend no more */
	/*
	 * How long a lent waiter spins at least (remote_spin_ns): pctx's
	 * spin to begin with, halved by each lent wait that spun it all in
	 * vain (the peer is slow, or the cores are busy), doubled back by
	 * each that was answered.
	 */
	_Atomic uint64_t lend_spin_ns;
	/*
	 * r_self_served: whether no peer shares this process's lone core,
	 * and when that was last asked (ns, 0: never, or a pipe came since).
	 */
	_Atomic bool elsewhere;
	_Atomic uint64_t elsewhere_ns;
	/*
	 * Blocked waiters that stopped spinning (remote.c, r_wait_sleep):
	 * the sequence a post by another thread bumps, how many sleep on it,
	 * and whether the lent one sleeps on pctx's wake descriptor.
	 */
	_Atomic uint32_t kick_seq;
	atomic_uint word_sleepers;
	atomic_bool lend_asleep;
	struct tpu_rendezvous *rdv;	/* the front end's; NULL after destroy */
	struct tpu_rendezvous *inner;	/* keys local to this task */
	struct tpu_listener *listener;	/* ctx thread after create */
	char self[REMOTE_TASK_MAX];
	size_t self_len;

	atomic_int refs;
	struct tpu__task abort_task;
	tpu_status abort_status;
	pthread_mutex_t lock;		/* everything below, up to the ctx-thread part */
	struct remote_task *tasks;	/* the cluster map */
	struct remote_entry **outbox;	/* hash of keys kept here */
	struct remote_inbox *inbox, **inbox_tail;	/* pushes not taken yet, oldest first */
	bool push_off;			/* TPU_REMOTE_PUSH=0: never say REMOTE_HELLO_PUSH */
	unsigned int push_peers;	/* peers with push_ok: a small send tries a push */
	size_t nbuckets, nentries;
	uint64_t next_id;
	unsigned int max_reqs;		/* TPU_REMOTE_MAX_REQS, per peer */
	bool one_pipe;			/* pctx has a job secret: pipes carry both directions */
	tpu_status aborted;
	bool closing;
	struct tpu__free_list entry_free;	/* recycled (REMOTE_FREE_MAX) */
	struct tpu__free_list fetch_free;

	/* ctx thread */
	struct remote_peer *peers;	/* every peer alive, mapped or not */
	unsigned int serving;		/* answers with a tensor a peer may still be reading */
	struct tpu__timer drain_timer;	/* bounds destroy's wait for them */
	uint64_t backoff_min_ns;	/* a connect retry's back-off (tests change it) */
	uint64_t stall_ns;		/* REMOTE_STALL_NS (tests change it) */
	uint64_t backoff_max_ns;
	struct tpu__free_list req_free;	/* recycled (REMOTE_FREE_MAX) */
	struct tpu__free_list write_free;
	struct tpu__free_list pushed_free;	/* struct remote_pushed */
	struct tpu__free_list inbox_free;	/* struct remote_inbox, up to REMOTE_INBOX_KEEP */
	struct remote_push_stats push_stats;	/* for tests */
	atomic_uint nwithheld;		/* fetches withheld, every peer (changed on the ctx thread) */
	struct tpu__task flush_task;	/* a sleeping waiter's tpu__remote_withheld_flush */
	atomic_bool flush_queued;
	struct tpu__task hold_task;	/* tpu__remote_hold_ctx (tests) */
	atomic_bool hold_queued;
	uint64_t hold_ns;		/* written before hold_task is queued */
	uint64_t drain_until;		/* the same bound, for a lent thread (no timers) */
	bool drain_expired;
	bool destroyed;
};

/* How long a destroy waits for peers still reading this worker's tensors. */
#define REMOTE_DRAIN_NS		(10ull * 1000000000ull)
/*
 * A send cancelled (its deadline passed) while its tensor is being written
 * cannot end before the write does: the pipe reads the caller's memory.
 * If no such write on a pipe ends within this long (st->stall_ns), its
 * peer stopped reading, and the pipe ends so that the send ends too.  The
 * same bound holds on the receiving side: a cancelled receive whose answer
 * is still being read into the caller's memory when its grace is over
 * gets this long more, then the pipe ends (its peer stopped writing).
 */
#define REMOTE_STALL_NS		REMOTE_DRAIN_NS

/*
 * Defer pipe work to pctx.  Within an issue (tpu__rdv_issuing) on a user
 * thread, without waking pctx's thread: the front end calls ->issued
 * right after, which does the work on this thread or wakes it.
 */
void tpu__remote_defer(struct remote *st, struct tpu__task *t);
/* Complete @op (no lock held): a direct one is finished here. */
void tpu__remote_op_done(struct tpu__op *op, tpu_status status, size_t len);

/*
 * Wake the waiters asleep in r_wait_sleep, so that each looks again (and
 * sends the REQs withheld since it went to sleep).
 */
void tpu__remote_waiters_kick(struct remote *st);
void tpu__remote_get(struct remote *st);
void tpu__remote_put(struct remote *st);
/* The task part of @key's source or destination device; false if it is no TF key. */
bool tpu__remote_key_tasks(const uint8_t *key, size_t key_len, struct tpu_str *src,
		      struct tpu_str *dst);
/* For tests: tpu__remote_key_tasks calls so far (every instance). */
unsigned long tpu__remote_key_parses(void);
bool tpu__remote_is_self(const struct remote *st, struct tpu_str task);
/* A task name this rendezvous accepts ("/job:J/replica:R/task:T"). */
bool tpu__remote_task_ok(const char *task);
/* Under st->lock. */
struct remote_task *tpu__remote_task_find(struct remote *st, const char *task, size_t len);
/* The map's first task; the list only grows at its head, so it can be walked after. */
struct remote_task *tpu__remote_tasks(struct remote *st);

/* ---- peers (remote_peer.c), ctx thread ---- */

struct remote_peer {
	struct remote_peer *next;	/* st->peers */
	struct remote *st;		/* referenced */
	struct tpu_pipe *pipe;		/* NULL once closed */
	struct remote_task *task;	/* the map entry it serves, if any */
	struct remote_fetch *fetches;	/* waiting for their RESP */
	unsigned int nabandoned;	/* of those, abandoned (REMOTE_ABANDONED_MAX) */
	int refs;			/* st->peers, the read loop, each write, each REQ, stall */
	/*
	 * Writes carrying a send's tensor, in flight; stalled: those whose
	 * send was cancelled meanwhile (REMOTE_STALL_NS), stall_done: how many
	 * of those ended, stall_mark: that count when the stall timer started.
	 */
	struct remote_write *sending;
	unsigned int stalled;
	unsigned long stall_done, stall_mark;
	struct tpu__timer stall;
	bool stall_on;
	/*
	 * Roles (remote_peer.c): on a pipe this worker opened to a task's URL
	 * it asks and the other end answers; on an accepted one the other
	 * end says HELLO first, then only asks.  claim: that HELLO's task
	 * (NULL before); member: its map entry, if it is in the map.
	 */
	bool accepted;
	/*
	 * With a job secret (st->one_pipe): ours, the other end asks on it
	 * too (claim is then the map's task); accepted, its HELLO said
	 * BOTH_WAYS, so we may ask on it and take the answers here.
	 */
	bool both_ways;
	char *claim;
	size_t claim_len;
	struct remote_task *member;
	bool dead;
	bool established;		/* something came through: it is not a failed connect */
	unsigned int writes;		/* writes in flight */
	unsigned int nreqs;		/* its REQs waiting in the outbox (under st->lock) */
	size_t req_bytes;		/* and what they hold */
	/*
	 * The push protocol (see REMOTE_HELLO_PUSH).  push_said: we opened
	 * it and said the flag; push: both ends speak it (REQs go as
	 * REQ_SEEN); push_ok: the other end asked here in it, so we may push
	 * here.  seen_seq: the last push that came (we ask here); pushed,
	 * npushed, pushed_bytes: ours not yet answered by a REQ or a CREDIT
	 * (we answer here); push_seq: our last push's number.  All ctx
	 * thread, but inbox_n and inbox_bytes (what the inbox holds of this
	 * pipe), under st->lock.
	 */
	bool push_said;
	bool push;
	bool push_ok;
	uint64_t seen_seq;
	uint64_t push_seq;
	struct remote_pushed *pushed, **pushed_tail;
	unsigned int npushed;
	size_t pushed_bytes;
	unsigned int inbox_n;
	size_t inbox_bytes;
	uint64_t credit_due[REMOTE_CREDIT_BATCH];	/* owed, not written yet (ctx thread) */
	unsigned int ncredit_due;
	struct tpu__task credit_task;	/* flushes what inbox takes owe (holds a ref) */
	bool credit_queued;		/* credit_task is queued (ctx thread) */
	bool cur_owes;			/* the PUSH being read answers a withheld fetch */
	/* the message being read */
	struct remote_hdr cur;
	/* a PUSH's, if the inbox takes it, or keeps it (too long for the fetch it answers) */
	struct remote_inbox *cur_inbox;
	/* a PUSH's heap buffer: for the recv_buffer it answers, or to drop it into */
	struct tpu_buffer *cur_buf;
	uint8_t *cur_meta;
	struct remote_fetch *cur_fetch;
};

/* The pipe tpu__remote_peer_for() would ask @t on now, without connecting; NULL if none. */
struct remote_peer *tpu__remote_peer_current(struct remote *st, struct remote_task *t);
/* The pipe to @t, connected (and HELLO sent) if there is none. */
struct remote_peer *tpu__remote_peer_for(struct remote *st, struct remote_task *t, tpu_status *err);
/*
 * With a job secret, where @t has two pipes: close ours once nothing is
 * outstanding on it if the other one wins (the lower task name's).
 */
void tpu__remote_peer_settle(struct remote_task *t);
/*
 * The pid the kernel proved for the process of worker @task (any thread):
 * that of every live pipe to it (ours, and the one it opened to us), 0
 * where one proves none (tcp) or two disagree.  -EHOSTUNREACH: no such
 * task in the map; -ENOTCONN: no pipe to it yet; -EAGAIN: a pipe still
 * negotiates.  What a tpu_coll group's shared segment is taken from.
 */
tpu_status tpu__remote_peer_pid(struct tpu_rendezvous *rdv, const char *task, pid_t *pid);
/* For tests: live pipes, and how many of them were accepted (any thread). */
tpu_status tpu__remote_pipe_count(struct tpu_rendezvous *rdv, unsigned int *pipes,
				  unsigned int *accepted);
/* For tests: the fetches abandoned on every pipe (REMOTE_ABANDONED_MAX). */
tpu_status tpu__remote_abandoned(struct tpu_rendezvous *rdv, unsigned int *n);
/* For tests: the push protocol's counts (see struct remote_push_stats). */
tpu_status tpu__remote_push_stats(struct tpu_rendezvous *rdv, struct remote_push_stats *out);
/* For tests: the connect retries of @task (see struct remote_task). */
struct remote_retry_stats {
	unsigned int retries;		/* failed connects retried */
	unsigned int early;		/* retries a HELLO brought forward */
	bool pending;			/* a retry waits */
	uint64_t backoff_ns;		/* its back-off */
};
tpu_status tpu__remote_retry_stats(struct tpu_rendezvous *rdv, const char *task,
				   struct remote_retry_stats *out);
/* For tests: each back-off step from now on is within [@min_ns, @max_ns] (doubling). */
tpu_status tpu__remote_set_backoff(struct tpu_rendezvous *rdv, uint64_t min_ns, uint64_t max_ns);
/* Adopt an accepted pipe. */
void tpu__remote_peer_accepted(struct remote *st, struct tpu_pipe *pipe);
/*
 * A REQ's key from @p, parsed: this worker's must be its source, @p's
 * claimed task its destination (found in *@dst).  TPU_E_BAD_KEY, -EXDEV or
 * -EACCES, which is the answer, otherwise.
 */
tpu_status tpu__remote_peer_req_check(const struct remote_peer *p, const struct remote_hdr *h,
				      struct tpu_str *dst);
/* Write a message without tensor; errors end the peer. */
void tpu__remote_peer_send(struct remote_peer *p, const struct remote_hdr *h);
/* Write a RESP carrying @send's tensor; @send completes with the write. */
void tpu__remote_peer_send_tensor(struct remote_peer *p, uint64_t id, struct tpu__op *send);
/* Write PUSH @seq carrying @send's tensor; @send completes with the write. */
void tpu__remote_peer_push(struct remote_peer *p, uint64_t seq, struct tpu__op *send);
void tpu__remote_peer_ref(struct remote_peer *p);
void tpu__remote_peer_unref(struct remote_peer *p);
/* Close the pipe, fail its fetches with @status, drop its REQs. */
void tpu__remote_peer_end(struct remote_peer *p, tpu_status status);
/* Why a pipe's operation failed, as the rendezvous's callers hear it. */
static inline tpu_status tpu__remote_gone(const struct remote *st)
{
	return st->destroyed ? TPU_E_CLOSED : TPU_E_PEER_GONE;
}
/* Write ABORT to every live peer. */
void tpu__remote_peers_abort(struct remote *st, tpu_status status);

/* ---- outbox (remote_serve.c) ---- */

/*
 * Post the send of a remote key whose source is this task.  @dst: the
 * key's destination task, as the caller's parse found it.  NULL: the
 * caller has not parsed the key; the send is posted only if the outbox
 * has an entry for it (a REQ came first and its parse made it), else
 * *@parse is set and nothing done: parse, then call again with @dst.
 */
tpu_status tpu__remote_serve_send(struct remote *st, struct tpu__op *op, const struct tpu_str *dst,
				  bool *parse);
/*
 * ctx thread: a REQ came from @p; its key is checked here (this task the
 * source, @p's claim the destination), answered at once if refused.
 */
void tpu__remote_serve_req(struct remote *st, struct remote_peer *p, const struct remote_hdr *h);
/* ctx thread: CREDIT @h came from @p; -EPROTO for a push we never made (or not out). */
tpu_status tpu__remote_serve_credit(struct remote_peer *p, const struct remote_hdr *h);
/* ctx thread: @p's other end asked in the push protocol: small sends may go as pushes. */
void tpu__remote_serve_push_ok(struct remote_peer *p);
/*
 * ctx thread: @key's sends being written on @p were cancelled: unless one
 * such write ends every st->stall_ns, @p ends (its peer stopped reading).
 */
void tpu__remote_peer_watch_sends(struct remote_peer *p, const uint8_t *key, size_t key_len);
/* For tests: REMOTE_STALL_NS of @rdv's worker becomes @ns. */
tpu_status tpu__remote_set_stall(struct tpu_rendezvous *rdv, uint64_t ns);
/*
 * For tests: the thread that runs @rdv's pipe context (its own, or a waiter
 * lent to it) sleeps @ns at its next task, as a busy or preempted one would,
 * so that work piles up behind it.  One hold at a time: -EBUSY while the
 * last one has not run.
 */
tpu_status tpu__remote_hold_ctx(struct tpu_rendezvous *rdv, uint64_t ns);

/* ctx thread: forget what @p was pushed (it ends). */
void tpu__remote_serve_pushed_free(struct remote_peer *p);
/* ctx thread: @p withdraws REQ @id. */
void tpu__remote_serve_cancel_req(struct remote *st, struct remote_peer *p, uint64_t id);
/* Cancel this member's posted sends of @key; returns how many. */
int tpu__remote_serve_cancel(struct remote *st, const uint8_t *key, size_t key_len);
/* Fail every posted send with @status; REQs waiting are answered on the ctx thread. */
void tpu__remote_serve_fail_all(struct remote *st, tpu_status status);
/* ctx thread: answer every REQ waiting with @status. */
void tpu__remote_serve_answer_all(struct remote *st, tpu_status status);
/* ctx thread: forget the REQs of a dead peer. */
void tpu__remote_serve_drop_peer(struct remote *st, struct remote_peer *p);
/* Free the outbox (the last reference is gone). */
void tpu__remote_serve_free(struct remote *st);
/* Free the fetches kept for reuse (remote_fetch.c) and the writes (remote_peer.c). */
/* Set up st->write_free (its records are remote_peer.c's own). */
void tpu__remote_peer_free_lists_init(struct remote *st);
/* For tests: outbox keys hashed so far (every instance; a send or a REQ hashes once). */
unsigned long tpu__remote_outbox_hashes(void);

/* ---- fetches (remote_fetch.c) ---- */

/*
 * ctx thread: a PUSH's descriptor on @p; set where its tensor goes (the
 * receive its REQ asked for, or a new buffer for the inbox).  -EPROTO for
 * a push @p may not send us: not ours to ask for there, past the window,
 * or too long.
 */
tpu_status tpu__remote_fetch_push_desc(struct remote_peer *p, struct tpu_message *desc);
/* ctx thread: the PUSH is read (@status: the read's). */
void tpu__remote_fetch_push_done(struct remote_peer *p, tpu_status status, struct tpu_message *msg);
/* ctx thread: a CREDIT for push @seq is owed on @p (written behind the tasks queued if @now, else batched). */
void tpu__remote_credit_owe(struct remote_peer *p, uint64_t seq, bool now);
/* ctx thread: write the credits owed on @p. */
void tpu__remote_credit_flush(struct remote_peer *p);
/* ctx thread: send every REQ withheld, and the credits owed (a waiter goes to sleep). */
void tpu__remote_withheld_flush(struct remote *st);
/* ctx thread: @p ends: what it pushed into the inbox goes. */
void tpu__remote_inbox_drop_peer(struct remote *st, struct remote_peer *p);
/* Free the inbox (the last reference is gone; nothing refers to a peer any more). */
void tpu__remote_inbox_free(struct remote *st);
/*
 * Under st->lock: give receive @op the oldest push of its key in the inbox,
 * if there is one (then true: it completes on the ctx thread).
 */
bool tpu__remote_inbox_take(struct remote *st, struct tpu__op *op);
/* ctx thread: @f no longer holds its REQ back; whether it did. */
bool tpu__remote_fetch_unhold(struct remote_fetch *f);
/* ctx thread: drop the reference that a push's read of @f held. */
void tpu__remote_fetch_taken(struct remote_fetch *f);

tpu_status tpu__remote_fetch_recv(struct remote *st, struct tpu__op *op, struct tpu_str src);
/*
 * ctx thread: a RESP's descriptor; set where its tensor goes.  -EPROTO for
 * a tensor nobody asked for or longer than its REQ allowed (nothing is
 * allocated for it: the peer ends).
 */
tpu_status tpu__remote_fetch_resp_desc(struct remote_peer *p, struct tpu_message *desc);
/* ctx thread: the RESP is read (@status: the read's). */
void tpu__remote_fetch_resp_done(struct remote_peer *p, tpu_status status, struct tpu_message *msg);
/* Send CANCEL for this member's fetches of @key; returns how many. */
int tpu__remote_fetch_cancel(struct remote *st, const uint8_t *key, size_t key_len);
/* ctx thread: complete @f's op with @status and forget it. */
void tpu__remote_fetch_end(struct remote_fetch *f, tpu_status status);
/* ctx thread: every fetch of every peer ends with @status. */
void tpu__remote_fetch_fail_all(struct remote *st, tpu_status status);
/* ctx thread: @f waits for the next pipe to its task (its peer's connect failed). */
void tpu__remote_fetch_park(struct remote_fetch *f);
/* ctx thread: ask again for the parked fetches of @t, on @p (NULL: fail them with @status). */
void tpu__remote_fetch_unpark(struct remote_task *t, struct remote_peer *p, tpu_status status);

#endif /* TPU_REMOTE_H */
