/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * lib/pipe, the top layer: the public calls (pipe.c), the write and read
 * paths (pipe_write.c, pipe_read.c), connection set-up and negotiation
 * (pipe_setup.c, pipe_listener.c, pipe_policy.c, pipe_lanes.c) and the wire
 * format (pipe_wire.c).  Built on lib/channel and everything below it.
 * Not installed.
 *
 * Threading: a public call validates its arguments, packs them into a
 * struct pipe_call and defers it to the context thread (tpu__ctx_defer), in
 * the order the calls were made.  Everything else, every field of struct
 * tpu_pipe below included, is touched only on the context thread, so no
 * lock guards it.  The exceptions are the atomics marked as such.
 *
 * Life: a pipe is freed once the user closed it (or the context did) and
 * nothing of it is in flight any more: no transport operation (io) and no
 * channel operation (chan_ops).  Calls made before tpu_pipe_close() run
 * before its own deferred call (the context runs tasks in order), and no
 * call may follow it, so no deferred call can find the pipe freed.
 */
#ifndef TPU_PIPE_INTERNAL_H
#define TPU_PIPE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "channel/channel.h"
#include "pipe_wire.h"

_Static_assert(TPU__CHAN_LANES_MAX == TPU__WIRE_LANES_MAX, "a lane per JOIN number");

/* Transports a pipe may use: tcp, shm, rdma (pipe_policy.c's table). */
#define TPU__PIPE_XPORTS	3

/* What a context lets its pipes use (context options and environment). */
struct tpu__pipe_policy {
	bool xport_ok[TPU__PIPE_XPORTS];	/* per entry of the table, in its order */
	bool chan_ok[TPU__CHAN_MAX];	/* per entry of tpu__chans */
	unsigned int mtcp_lanes;	/* TPU_MTCP_LANES: lanes a listener asks for */
};
/* From the context's options, narrowed by TPU_TRANSPORTS / TPU_CHANNELS. */
tpu_status tpu__pipe_policy(struct tpu_context *ctx, struct tpu__pipe_policy *out);
const struct tpu__xport *tpu__pipe_xport_by_name(const char *name, size_t len);
int tpu__pipe_xport_index(const struct tpu__xport *x);

/* What one end offers (pipe_policy.c), kept as text for the HELLO. */
struct tpu__pipe_offer {
	unsigned int nxports;
	struct {
		const struct tpu__xport *xport;
		char compat[TPU__WIRE_DESC_MAX];
	} xports[TPU__PIPE_XPORTS];
	unsigned int nchans;
	struct {
		const struct tpu__chan *chan;
		char compat[TPU__WIRE_DESC_MAX];
	} chans[TPU__CHAN_MAX];
};
tpu_status tpu__pipe_offer(struct tpu_context *ctx, const struct tpu__pipe_policy *pol,
			   struct tpu__pipe_offer *out);

struct tpu_pipe;

/* A public call on its way to the context thread. */
enum pipe_call_kind {
	PIPE_CALL_WRITE,
	PIPE_CALL_READ_DESC,
	PIPE_CALL_READ,
	PIPE_CALL_CLOSE,
};

/*
 * Small messages (the steady path of a ping-pong) take no trip to malloc:
 * writes and reads come from per-pipe caches of fixed-size blocks with room
 * for this many payloads and tensors and a frame of this many bytes; a
 * bigger message gets blocks of its own size, freed when it is done.
 */
#define PIPE_SMALL_PAYLOADS	4
#define PIPE_SMALL_TENSORS	4
#define PIPE_SMALL_FRAME	512
/* Inline parts up to this size are peeked, up to this much in all (pipe_read.c). */
#define PIPE_PEEK_PART		4096
#define PIPE_OWED_MAX		16384
#define PIPE_BLOCK_CACHE	32	/* blocks kept per pipe and kind */

struct pipe_write;

/* A stream write of the transport on behalf of a pipe write. */
struct write_part {
	struct tpu_pipe *pipe;
	struct pipe_write *w;
	bool embedded;			/* pipe_write's own part0, not allocated */
};

/* One write in flight. */
struct pipe_write {
	struct pipe_write *next;
	struct tpu_message *msg;
	tpu_write_cb cb;
	void *arg;
	uint64_t seq;
	uint8_t *frame;			/* header + descriptor */
	size_t frame_len;
	unsigned int waiting;		/* parts not done: stream writes, channel tensors */
	tpu_status status;		/* first error */
	bool started;			/* on the wire, or failed: done once waiting is 0 */
	bool *given;			/* per tensor: the channel took its buffer */
	bool *acked;			/* per tensor: the reader ACKed it (TPU__CHAN_ACKED) */
	void **stage;			/* per tensor: its staging copy (TPU__CHAN_STAGED), or NULL */
	bool small;			/* a cached block: given and frame point inside it */
	bool part0_busy;		/* part0 is queued on the transport */
	struct write_part part0;	/* the first stream part (a small message's only one) */
	bool given_buf[PIPE_SMALL_TENSORS];
	_Alignas(8) uint8_t frame_buf[PIPE_SMALL_FRAME];
};

struct pipe_rd_tensor {
	uint32_t chan;			/* TPU__WIRE_INLINE or the channel's wire_id */
	uint32_t src_type;		/* where it lies at the writer */
	const struct tpu__chan *c;	/* its channel (basic for inline ones) */
	const uint8_t *desc;		/* the channel's descriptor of it (in the body) */
	uint64_t len;
	void *stage;			/* TPU__CHAN_STAGED into CUDA memory: staging memory */
};

/* One read in flight (a descriptor handed out, then read). */
struct pipe_read {
	struct pipe_read *next;
	struct tpu_message msg;		/* what the user sees */
	struct tpu_payload *payloads;
	struct tpu_message_tensor *tensors;
	struct pipe_rd_tensor *tinfo;	/* per tensor: what the descriptor said */
	uint64_t *payload_len;		/* per payload: what the descriptor said */
	uint8_t *body;			/* the descriptor frame's body (msg points into it) */
	uint64_t seq;
	tpu_read_cb cb;
	void *arg;
	unsigned int waiting;		/* inline parts and channel tensors not done */
	tpu_status status;
	bool delivered;			/* the descriptor went to the user */
	bool started;			/* tpu_pipe_read() came */
	bool small;			/* a cached block: arrays and body lie in it (pipe_read.c) */
	bool body_inside;		/* the body lies in rd's own allocation (not freed apart) */
};

struct pipe_call {
	struct tpu__task task;
	struct tpu_pipe *pipe;
	enum pipe_call_kind kind;
	struct tpu_message *msg;
	union {
		tpu_write_cb write;
		tpu_descriptor_cb desc;
		tpu_read_cb read;
	} cb;
	void *arg;
	bool deferred;			/* went through the task queue */
};

/* Where the inbound side of a pipe is. */
enum pipe_in_state {
	PIPE_IN_IDLE,		/* nothing asked of the transport */
	PIPE_IN_HDR,		/* reading a frame header */
	PIPE_IN_BODY,		/* reading a frame body */
	PIPE_IN_HOLD,		/* a descriptor waits for the user (back-pressure) */
	PIPE_IN_INLINE,		/* reading a message's inline bytes into the user's memory */
};

enum pipe_state {
	PIPE_CONNECTING,	/* connector: HELLO sent, waiting for WELCOME / JOIN done */
	PIPE_ACCEPTING,		/* listener side: set up not finished */
	PIPE_OPEN,
	PIPE_FAILED,		/* error: everything fails with pipe->error */
};

struct tpu_listener;

struct tpu_pipe {
	uint32_t magic;			/* TPU__MAGIC_PIPE; poisoned when freed */
	struct tpu_context *ctx;
	struct tpu__ctx_obj obj;	/* the context's list, for context_destroy */
	atomic_bool user_closed;	/* any thread: tpu_pipe_close() was called */
	atomic_bool broken;		/* any thread: failed or closing (writes are refused) */
	atomic_int fail_status;		/* any thread: what failed it, 0 if none (writes return it) */
	/*
	 * Any thread: calls in the task queue, each counted until its handler
	 * returned, and the FREED bit once the pipe is freed, which only a
	 * count of 0 allows (call_gate.h; tpu__pipe_maybe_free()): a call
	 * counted in before that runs on a live pipe; one that finds the bit
	 * set backs off without touching it.
	 */
	atomic_uint queued;
	bool in_task;			/* a queued call's handler runs (its count is in) */

	enum pipe_state state;
	tpu_status error;
	bool closed;			/* the close call ran */
	bool delivered;			/* listener side: handed to the user */
	bool connector;			/* this end connected (names its keys "c") */
	unsigned int io;		/* transport operations in flight */
	unsigned int chan_ops;		/* channel operations in flight */

	struct tpu__conn *conn;		/* the transport carrying frames */
	const struct tpu__xport *xport;
	const struct tpu__chan *chan;	/* CPU -> CPU channel, both directions */
	/*
	 * Per (writer's device type, suggested target type) with CUDA on a
	 * side: the channel, both directions; NULL if the ends have none.
	 */
	const struct tpu__chan *dchan[2][2];
	/*
	 * What the channel shares with the pipe; link.lanes[0..nlanes) are the
	 * lanes (nlanes from WELCOME, 0 for a channel without TPU__CHAN_LANES).
	 */
	struct tpu__chan_link link;
	unsigned int lanes_joined;	/* listener side: lanes whose JOIN came */
	bool await_main;		/* listener side: the pipe's own connection is to JOIN */
	uint8_t *lane_frames;		/* connector: the lanes' JOIN frames */
	char connect_addr[TPU__XPORT_ADDR_MAX];	/* connector: where lanes connect to */
	struct tpu__pipe_policy policy;

	/* Set-up (pipe_setup.c). */
	uint8_t hdr[TPU__WIRE_HDR_LEN];
	uint8_t *setup_frame;		/* HELLO or WELCOME being written */
	uint8_t *setup_body;
	uint64_t token;			/* listener: JOIN token of this pipe */
	struct tpu__secret secret;	/* the context's when set-up began (pipe_auth.c) */
	unsigned int auth_pending;	/* connector: connections proving it, before JOIN */
	struct tpu_listener *listener;	/* listener side, until accepted */
	struct tpu_pipe *join_next;	/* listener's pipes waiting for their JOIN */
	/* Listener side: the set-up deadline (holds an io reference while on). */
	struct tpu__timer setup_timer;
	bool setup_timer_on;
	uint64_t setup_since;		/* listener side: its accept (tpu__mono_ns) */

	/* Outbound. */
	uint64_t next_write_seq;
	struct pipe_write *writes, **writes_tail;	/* issue order, until called back */
	/* Inbound. */
	enum pipe_in_state in;
	uint8_t in_hdr[TPU__WIRE_HDR_LEN];
	struct tpu__wire_hdr in_frame;
	uint8_t *in_body;
	uint64_t next_read_seq;
	struct pipe_read *held;		/* descriptor read ahead, not asked for yet */
	struct pipe_read *reads, **reads_tail;	/* handed out, until called back */
	/*
	 * Lets tpu_pipe_read() tell on the caller's thread whether its message
	 * is a descriptor still waiting to be read before it looks inside it
	 * (a message read already is freed memory).  Only the context thread
	 * changes the reads list and a read's started flag; the lock keeps it
	 * from taking a read off the list (reads_complete, which may free it)
	 * while another thread walks the list (read_check), and that is the
	 * one place the context thread takes it, once per message.  The rest
	 * goes without: a read is appended (deliver) with a release store of
	 * the pointer to it, after it is complete and its next is NULL, and
	 * the walker loads the pointers with acquire; started is stored and
	 * loaded atomically, and read_start checks it again on the context
	 * thread, so a walker that saw it false just before cannot start a
	 * read twice.  The context thread itself walks without the lock.
	 */
	pthread_mutex_t reads_lock;
	/* Bytes read in place (->peek) and not yet taken from the transport (pipe_read.c). */
	size_t in_owed;
	unsigned int inline_next;	/* PIPE_IN_INLINE: index of the next inline part */
	struct pipe_read *inline_rd;
	/* read_descriptor calls not served yet, in order. */
	struct pipe_call **desc_calls;
	size_t ndesc_calls, desc_calls_cap;
	/* Small write and read blocks kept for reuse (context thread). */
	struct pipe_write *write_cache;
	unsigned int nwrite_cache;
	struct pipe_read *read_cache;
	unsigned int nread_cache;
	struct pipe_read *in_rd;	/* PIPE_IN_BODY into a small read block's body */
	/* Finished calls kept for reuse by calls made on the context thread. */
	struct pipe_call *call_cache;
	unsigned int ncall_cache;

	char xport_name[8];		/* for tpu_pipe_transport(), written once */
	char chan_name[8];
	atomic_bool ready;		/* any thread: the two names are final */
	int peer_pid;			/* the kernel's word (->proves_peer), else 0; before ready */
};

/* pipe.c */
struct tpu_pipe *tpu__pipe_new(struct tpu_context *ctx, bool connector);
/* Fail everything pending with @err (once), close the transport and channels. */
void tpu__pipe_fail(struct tpu_pipe *p, tpu_status err);
/* Negotiation done: the pipe carries messages now. */
void tpu__pipe_opened(struct tpu_pipe *p);
/* A finished call (context thread only): kept for reuse while the cache has room, else freed. */
void tpu__pipe_call_free(struct tpu_pipe *p, struct pipe_call *c);
/* Free the pipe if it is closed and idle. */
void tpu__pipe_maybe_free(struct tpu_pipe *p);
/* Take a transport operation's reference, and give it back. */
static inline void tpu__pipe_io_get(struct tpu_pipe *p)
{
	p->io++;
}

void tpu__pipe_io_put(struct tpu_pipe *p);
/* The reference of an operation that was never queued (the pipe stays). */
static inline void tpu__pipe_io_cancel(struct tpu_pipe *p)
{
	p->io--;
}

/*
 * For tests, on the context thread: how many times the pipe's shm
 * connection gave read bytes back to the writer (0 on other transports).
 */
uint64_t tpu__pipe_rx_moves(struct tpu_pipe *p);
/* The same for the write side: head moves, and loads of the reader's tail. */
void tpu__pipe_tx_counts(struct tpu_pipe *p, uint64_t *head_moves, uint64_t *tail_loads);
/* Queue a read of @len bytes on the pipe's connection, holding an io reference. */
tpu_status tpu__pipe_conn_read(struct tpu_pipe *p, void *buf, size_t len, tpu__io_cb cb);
/*
 * The channel of a writer's tensor: for CPU memory bound for CPU memory the
 * pipe's, or basic (inline) when it is small; with CUDA on a side, the
 * channel of that device pair (NULL: none).
 */
static inline const struct tpu__chan *tpu__pipe_tensor_chan(const struct tpu_pipe *p,
							     const struct tpu_message_tensor *t)
{
	if (t->device.type == TPU_DEVICE_CPU && t->target.type == TPU_DEVICE_CPU)
		return t->len <= TPU_PIPE_INLINE_MAX ? &tpu__chan_basic : p->chan;
	return p->dchan[t->device.type & 1][t->target.type & 1];
}

/* Bytes that follow the descriptor in the pipe's stream (basic, cuda_staged). */
static inline bool tpu__pipe_chan_inline(const struct tpu__chan *c)
{
	return c->flags & (TPU__CHAN_INLINE | TPU__CHAN_STAGED);
}

/* The channel whose wire_id is @id among the pipe's, or NULL. */
const struct tpu__chan *tpu__pipe_chan_by_wire(const struct tpu_pipe *p, uint32_t id);

/* pipe_write.c, pipe_read.c (context thread) */
void tpu__pipe_write_start(struct tpu_pipe *p, struct pipe_call *c);
void tpu__pipe_writes_fail(struct tpu_pipe *p);
void tpu__pipe_ack(struct tpu_pipe *p, const struct tpu__wire_ack *ack);
void tpu__pipe_read_desc(struct tpu_pipe *p, struct pipe_call *c);
void tpu__pipe_read_start(struct tpu_pipe *p, struct pipe_call *c);
void tpu__pipe_in_pump(struct tpu_pipe *p);
void tpu__pipe_reads_fail(struct tpu_pipe *p);
/* Free reads nobody will call back (the pipe is being freed), and the block caches. */
void tpu__pipe_reads_free(struct tpu_pipe *p);
void tpu__pipe_writes_cache_free(struct tpu_pipe *p);

/* pipe_setup.c */
tpu_status tpu__pipe_connector_start(struct tpu_pipe *p, const struct tpu__xport *x,
				     const char *addr);
void tpu__pipe_acceptor_start(struct tpu_pipe *p, struct tpu__conn *conn);
/* Listener side: give up setting @p up (deadline, or the listener is full). */
void tpu__pipe_setup_abort(struct tpu_pipe *p, tpu_status st);

/*
 * pipe_auth.c: prove p->secret on @c, a connection of @p (@connector: the
 * end that connected), and check the peer's proof; then @done(p, c, 0,
 * arg), or an error (-EACCES: the peer has another secret or none).  One
 * transport operation of @c in flight at a time, each with an io
 * reference of @p.  Errors returned: nothing was queued, @done is not called.
 */
typedef void (*tpu__pipe_auth_fn)(struct tpu_pipe *p, struct tpu__conn *c, tpu_status st,
				  void *arg);
tpu_status tpu__pipe_auth(struct tpu_pipe *p, struct tpu__conn *c, bool connector,
			  tpu__pipe_auth_fn done, void *arg);
/*
 * Listener without a secret, AUTH came (@body_len bytes follow the header):
 * drop them, answer WELCOME -EACCES; then @done(.., -EACCES, ..).
 */
tpu_status tpu__pipe_auth_refuse(struct tpu_pipe *p, struct tpu__conn *c, uint32_t body_len,
				 tpu__pipe_auth_fn done, void *arg);
/* pipe_setup.c: a connection of the connector proved it and sent JOIN; the last one opens. */
void tpu__pipe_connector_step_done(struct tpu_pipe *p);

/* pipe_lanes.c: the lanes of channels with TPU__CHAN_LANES (mtcp) */
#define PIPE_MTCP_LANES_DEFAULT	4
/* TPU_MTCP_LANES (1..TPU__WIRE_LANES_MAX), else the default; -EINVAL if malformed. */
tpu_status tpu__mtcp_lanes_policy(unsigned int *lanes);
/* Connector: open @n lanes to @addr, each starting with JOIN (token, lane). */
tpu_status tpu__mtcp_connect(struct tpu_pipe *p, const char *addr, uint64_t token, unsigned int n);
/* Listener: @conn came with JOIN (token, @lane >= 1) for @p. */
tpu_status tpu__mtcp_lane_joined(struct tpu_pipe *p, uint32_t lane, struct tpu__conn *conn);
/* Close every lane (pending operations fail with TPU_E_CLOSED). */
void tpu__mtcp_close(struct tpu_pipe *p);

/* pipe_listener.c */
tpu_status tpu__listener_url_for(const struct tpu_listener *l, const struct tpu__xport *x,
				 const char **addr);
void tpu__listener_await_join(struct tpu_listener *l, struct tpu_pipe *p);
/* The pipe in set-up whose JOIN token is @token (non-zero); NULL if none. */
struct tpu_pipe *tpu__listener_find_join(struct tpu_listener *l, uint64_t token);
void tpu__listener_forget(struct tpu_listener *l, struct tpu_pipe *p);
/* The pipe is set up: hand it to an accept, or queue it. */
void tpu__listener_deliver(struct tpu_listener *l, struct tpu_pipe *p);

#endif /* TPU_PIPE_INTERNAL_H */
