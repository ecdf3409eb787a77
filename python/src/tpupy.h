/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The tpu_user Python extension: declarations shared by its files.
 *
 *   module.c      module init, free functions (keys, version, probe)
 *   errors.c      status -> exception
 *   tensor.c      tensors in (buffer protocol, __dlpack__) and out (Tensor)
 *   header.c      dtype/shape/device header that travels with a tensor
 *   completion.c  Op objects and the context's completion queue
 *   context.c     Context
 *   rendezvous.c  Rendezvous (send, recv, recv_into, cancel, abort)
 *   pipe.c        Listener and Pipe
 *   world.c       World (launcher bootstrap) and collectives
 *   log.c         the library's log lines, on their way to Python's logging
 *   agent.c       Agent, Registration, Remote: one-sided transfers
 *
 * No Python code ever runs on the library's context thread: its callbacks
 * only fill in C structures, queue them on the context's completion queue
 * and wake waiters (a condition variable and an eventfd).  Python threads
 * drain the queue and resolve futures.
 */
#ifndef TPUPY_H
#define TPUPY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlpack/dlpack.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <tpu_user.h>

#define TPUPY_MAX_DIMS		32
/* Tensors up to this many bytes travel inside their header's key. */
#define TPUPY_INLINE_MAX	4096
/* Our bool code; DLPack 0.8 calls it kDLBool. */
#define TPUPY_DL_BOOL		6

/* ---- log.c ---- */
PyObject *tpupy_log_capture(PyObject *self, PyObject *args);
PyObject *tpupy_log_take(PyObject *self, PyObject *unused);

/* ---- errors.c ---- */
extern PyObject *tpupy_Error, *tpupy_TimeoutError, *tpupy_ConnectionError,
	*tpupy_PeerGoneError, *tpupy_ClosedError, *tpupy_CancelledError, *tpupy_ForkedError;
int tpupy_errors_init(PyObject *m);
/* Sets the exception for @st (never 0) and returns NULL. */
PyObject *tpupy_raise(tpu_status st, const char *what);
/* An exception instance for @st, for a future; new reference. */
PyObject *tpupy_exception(tpu_status st, const char *what);

/* ---- header.c ---- */
/*
 * struct tpupy_meta - what a receiver needs to type a tensor.
 * @dtype:	DLPack code, bits, lanes (TPUPY_DL_BOOL for bool).
 * @device:	DLPack device (kDLCPU, 0 for now).
 */
struct tpupy_meta {
	DLDataType dtype;
	DLDevice device;
	int ndim;
	int64_t shape[TPUPY_MAX_DIMS];
	uint64_t nbytes;
};

#define TPUPY_HDR_MAX	(32 + 8 * TPUPY_MAX_DIMS)
/* Writes @m into @buf (TPUPY_HDR_MAX bytes at least); returns the length. */
size_t tpupy_hdr_encode(const struct tpupy_meta *m, bool inline_data, void *buf);
/* Parses a header; 0, or -EBADMSG; *@hdr_len its length, *@inline_data whether bytes follow. */
int tpupy_hdr_decode(const void *buf, size_t len, struct tpupy_meta *m, size_t *hdr_len,
		     bool *inline_data);
/* The key the header travels under: the edge of a TF key + "/tpu.meta", else key + that. */
int tpupy_meta_key(const char *key, size_t key_len, char *out, size_t size, size_t *out_len);
/* dtype name ("float32"); NULL if unknown. */
const char *tpupy_dtype_name(DLDataType dt);
int tpupy_dtype_parse(const char *name, DLDataType *dt);
uint64_t tpupy_meta_count(const struct tpupy_meta *m);

/* ---- tensor.c ---- */
/*
 * struct tpupy_view - a caller's tensor seen as bytes.
 * @keep:	what keeps @data valid (a buffer holder, a DLPack holder or
 *		the object itself); released by tpupy_view_release().
 */
struct tpupy_view {
	void *data;
	struct tpupy_meta meta;
	PyObject *keep;
};

/* @obj: anything with the buffer protocol or __dlpack__; @writable for receives. */
int tpupy_view_get(PyObject *obj, bool writable, struct tpupy_view *v);
void tpupy_view_release(struct tpupy_view *v);

/* The output tensor type. */
extern PyTypeObject *tpupy_TensorType;
int tpupy_tensor_init(PyObject *m);
/* A tensor owning @data (free()d with it), typed by @meta; steals @data even on failure. */
PyObject *tpupy_tensor_new(void *data, const struct tpupy_meta *meta);
/*
 * Memory for tensors: 64-byte aligned, at least 1 byte; from 2 MiB on,
 * anonymous memory advised to transparent huge pages (process_vm_readv and
 * the module pin it by the huge page).  Freed by tpupy_free() with its length.
 */
#define TPUPY_THP_MIN	(2u << 20)
void *tpupy_alloc(size_t len);
void tpupy_free(void *p, size_t len);

/* ---- completion.c ---- */
struct tpupy_context;

enum tpupy_op_kind {
	TPUPY_OP_SEND = 1,
	TPUPY_OP_RECV,		/* a tensor, header first */
	TPUPY_OP_WRITE,
	TPUPY_OP_READ,
	TPUPY_OP_ACCEPT,
	TPUPY_OP_XFER,		/* an Agent's read or write */
	TPUPY_OP_NOTIF,		/* the next notification of an Agent */
};

/*
 * struct tpupy_cop - the C half of an operation: what the library's
 * callback touches.  Embedded in the Python Op object, which the queue
 * keeps alive (an extra reference taken at submission, dropped when a
 * Python thread drains it).
 */
struct tpupy_cop {
	struct tpupy_cop *next;
	struct tpupy_queue *queue;
	int kind;
	int done;		/* set under the queue's lock (release); waiters may spin on it */
	int waiters;		/* threads in op._wait() on it (queue's lock) */
	tpu_status status;
	size_t len;
	char why[160];		/* a failure's detail, "" if none */
	/* receives */
	struct tpu_rendezvous *rdv;
	char *key;		/* malloc'd: the data key */
	size_t key_len;
	uint64_t timeout_ns;
	unsigned char hdr[TPUPY_HDR_MAX + TPUPY_INLINE_MAX];
	struct tpupy_meta meta;
	bool have_meta;
	void *dst;		/* recv_into: the caller's; recv: ours (freed unless taken) */
	size_t dst_cap;
	bool own_dst;
	struct tpupy_meta dst_meta;	/* recv_into: the caller's tensor */
	/* pipes */
	struct tpu_pipe *pipe;
	struct tpu_message *msg;	/* write: ours; read: the pipe's descriptor */
	struct tpu_message_tensor *wtensors;
	void **rdata;			/* read: our allocations per tensor */
	struct tpupy_meta *rmeta;
	size_t nr;
	void *rmetadata;		/* read: the message metadata copied */
	size_t rmetadata_len;
	struct tpupy_view *into;	/* read_into: the caller's tensors */
	size_t ninto;
	struct tpu_pipe *accepted;
	/* agents (agent.c) */
	struct tpu_xfer_req *req;	/* xfer: released with the op or the agent */
	struct tpupy_cop *lnext, *lprev;	/* xfer: the agent's live ops (GIL) */
	struct tpupy_cop *wnext;	/* notif: the agent's waiters (its lock) */
	void *agent;			/* xfer, notif: the tpupy_agent, NULL once it closed */
	char peer[TPU_XFER_NAME_MAX];	/* notif: who sent it */
	void *nmsg;			/* notif: the message (malloc'd), c->len bytes */
};

/* the completion queue of one context */
struct tpupy_queue {
	pthread_mutex_t lock;
	pthread_cond_t cond;	/* threads waiting on an op (op._wait) */
	pthread_cond_t dcond;	/* threads draining (the futures' dispatcher) */
	struct tpupy_cop *head, *tail;
	int efd;
	bool fd_wanted;	/* fileno() was asked for: completions write efd (atomic) */
	bool closed;	/* the context closed: drains stop waiting */
};

int tpupy_queue_init(struct tpupy_queue *q);
void tpupy_queue_fini(struct tpupy_queue *q);
/* Library thread: the op is finished; queue it and wake waiters.  No Python. */
void tpupy_cop_complete(struct tpupy_cop *c, tpu_status st);
PyObject *tpupy_queue_drain(struct tpupy_queue *q, PyObject *timeout);
void tpupy_queue_kick(struct tpupy_queue *q);

typedef struct {
	PyObject_HEAD
	struct tpupy_cop c;
	PyObject *owner;	/* the Context, Rendezvous or Pipe it runs on */
	PyObject *keep;		/* what must stay alive until it finished (the source) */
	PyObject *future;	/* set by the Python layer */
	struct tpupy_view view;	/* send: the source */
	bool has_view;
	bool settled;
	PyObject *outcome;
} tpupy_op;

extern PyTypeObject *tpupy_OpType;
int tpupy_op_init(PyObject *m);
/* A new op of @kind on @ctx; the caller submits it with tpupy_op_submitted(). */
tpupy_op *tpupy_op_new(struct tpupy_context *ctx, int kind, PyObject *owner);
/* After the library took it: the queue's reference. */
void tpupy_op_submitted(tpupy_op *op);

/* ---- context.c ---- */
typedef struct tpupy_context {
	PyObject_HEAD
	struct tpu_context *ctx;
	pid_t pid;
	struct tpupy_queue queue;
	bool queue_ok;
} tpupy_context;

extern PyTypeObject *tpupy_ContextType;
int tpupy_context_init(PyObject *m);
/* 0 when usable; else the exception is set (closed, or forked child). */
int tpupy_context_check(tpupy_context *c);

/* ---- rendezvous.c, pipe.c, world.c ---- */
typedef struct {
	PyObject_HEAD
	tpupy_context *ctx;
	struct tpu_rendezvous *rdv;
	PyObject *owner;	/* the World when borrowed */
} tpupy_rdv;

extern PyTypeObject *tpupy_RdvType, *tpupy_ListenerType, *tpupy_PipeType, *tpupy_WorldType;
int tpupy_rdv_init(PyObject *m);
int tpupy_pipe_init(PyObject *m);
int tpupy_world_init(PyObject *m);
int tpupy_agent_init(PyObject *m);
/* whether a borrowed object's World is still open */
int tpupy_world_alive(PyObject *world);
PyObject *tpupy_listen(tpupy_context *ctx, PyObject *urls);
PyObject *tpupy_connect(tpupy_context *ctx, const char *url);
PyObject *tpupy_rdv_wrap(tpupy_context *ctx, struct tpu_rendezvous *rdv, PyObject *owner);
PyObject *tpupy_pipe_wrap(tpupy_context *ctx, struct tpu_pipe *pipe, PyObject *owner);
/* Op results */
PyObject *tpupy_rdv_op_result(tpupy_op *op);
PyObject *tpupy_pipe_op_result(tpupy_op *op);
void tpupy_pipe_op_free(struct tpupy_cop *c);
void tpupy_rdv_op_free(struct tpupy_cop *c);
PyObject *tpupy_agent_op_result(tpupy_op *op);
void tpupy_agent_op_free(struct tpupy_cop *c);

/* ---- agent.c, agent_async.c ---- */
struct tpupy_notif;

typedef struct {
	PyObject_HEAD
	tpupy_context *ctx;
	struct tpu_agent *a;
	/* Notifications, queued here by the library's callback (agent_async.c). */
	pthread_mutex_t nlock;
	bool nlock_ok;
	struct tpupy_notif *nq, **nq_tail;	/* nlock */
	size_t nq_n, nq_bytes;			/* nlock */
	struct tpupy_cop *waiters, **w_tail;	/* nlock: notification ops */
	struct tpupy_cop *live;			/* GIL: xfer ops holding a request */
} tpupy_agent;

/* Route @a's notifications here (before any peer can send one). */
int tpupy_agent_notif_start(tpupy_agent *a);
/* Before tpu_agent_destroy: release every request (their ops fail -ECANCELED). */
void tpupy_agent_ops_release(tpupy_agent *a);
/* After it: fail the notification waiters with TPU_E_DESTROYED, free the queue. */
void tpupy_agent_notif_stop(tpupy_agent *a);
/* The oldest queued notification as (peer, bytes), or None. */
PyObject *tpupy_agent_notif_take(tpupy_agent *a);
/* Post a prepared @req as an op (owner: @a); the op takes @req and @keep. */
PyObject *tpupy_agent_post_op(tpupy_agent *a, struct tpu_xfer_req *req, PyObject *keep);
PyObject *tpupy_agent_notif_op(tpupy_agent *a);
/* A waiting notification op: finish it -ECANCELED; False when it finished already. */
PyObject *tpupy_agent_notif_cancel(tpupy_agent *a, PyObject *op);

/* key argument: str or bytes; fills @buf/@len (borrowed while @obj lives) */
int tpupy_key_arg(PyObject *obj, const char **buf, Py_ssize_t *len);
/* seconds (None: forever) to nanoseconds, 0 meaning forever */
int tpupy_timeout_arg(PyObject *obj, uint64_t *ns);

#endif
