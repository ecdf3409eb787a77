// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Pipes: the public calls and a pipe's life.  A call checks what it can
 * check on the caller's thread, then defers itself to the context thread,
 * which owns the pipe (see pipe_internal.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipe_internal.h"

static void pipe_obj_close(struct tpu__ctx_obj *o)
{
	tpu_pipe_close(tpu__container_of(o, struct tpu_pipe, obj));
}

struct tpu_pipe *tpu__pipe_new(struct tpu_context *ctx, bool connector)
{
	struct tpu_pipe *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->magic = TPU__MAGIC_PIPE;
	p->ctx = ctx;
	p->connector = connector;
	p->state = connector ? PIPE_CONNECTING : PIPE_ACCEPTING;
	p->chan = &tpu__chan_basic;
	p->link.ctx = ctx;
	p->link.connector = connector;
	p->link.fd = -1;
	p->writes_tail = &p->writes;
	p->reads_tail = &p->reads;
	pthread_mutex_init(&p->reads_lock, NULL);
	atomic_init(&p->user_closed, false);
	atomic_init(&p->broken, false);
	atomic_init(&p->fail_status, 0);
	atomic_init(&p->ready, false);
	atomic_init(&p->queued, 0);
	p->obj.close = pipe_obj_close;
	p->obj.pass = TPU__CTX_PASS_PIPE;
	p->obj.what = "a pipe";
	return p;
}

static void pipe_free(struct tpu_pipe *p)
{
	tpu__pipe_reads_free(p);
	tpu__pipe_writes_cache_free(p);
	free(p->setup_frame);
	free(p->lane_frames);
	free(p->setup_body);
	free(p->in_body);
	free(p->desc_calls);
	while (p->call_cache) {
		struct pipe_call *c = p->call_cache;

		p->call_cache = (struct pipe_call *)c->task.next;
		free(c);
	}
	if (p->link.fd >= 0)
		close(p->link.fd);
	pthread_mutex_destroy(&p->reads_lock);
	tpu__quarantine(p, &p->magic);
}

void tpu__pipe_maybe_free(struct tpu_pipe *p)
{
	/* Not while a call is queued: it runs first, and frees it after (pipe_call_run). */
	if (p->closed && !p->io && !p->chan_ops && !p->link.state && tpu__gate_close(&p->queued))
		pipe_free(p);
}

void tpu__pipe_io_put(struct tpu_pipe *p)
{
	p->io--;
	tpu__pipe_maybe_free(p);
}

tpu_status tpu__pipe_conn_read(struct tpu_pipe *p, void *buf, size_t len, tpu__io_cb cb)
{
	tpu_status st;

	if (!p->conn)
		return p->state == PIPE_FAILED ? p->error : -EPIPE;
	tpu__pipe_io_get(p);
	st = p->conn->ops->read(p->conn, buf, len, cb, p);
	if (st)
		tpu__pipe_io_cancel(p);
	return st;
}

uint64_t tpu__pipe_rx_moves(struct tpu_pipe *p)
{
	return p->conn ? tpu__shm_rx_moves(p->conn) : 0;
}

void tpu__pipe_tx_counts(struct tpu_pipe *p, uint64_t *head_moves, uint64_t *tail_loads)
{
	*head_moves = *tail_loads = 0;
	if (p->conn)
		tpu__shm_tx_counts(p->conn, head_moves, tail_loads);
}

/* Descriptor requests not served: each gets the error. */
static void pipe_desc_calls_fail(struct tpu_pipe *p, tpu_status err)
{
	while (p->ndesc_calls) {
		struct pipe_call *c = p->desc_calls[0];

		memmove(p->desc_calls, p->desc_calls + 1, --p->ndesc_calls * sizeof(*p->desc_calls));
		c->cb.desc(c->arg, err, NULL);
		tpu__pipe_call_free(p, c);
	}
}

void tpu__pipe_fail(struct tpu_pipe *p, tpu_status err)
{
	struct tpu__conn *conn;

	if (p->state == PIPE_FAILED)
		return;
	tpu__log_debug("pipe %p: %s", (void *)p, tpu_strerror(err));
	p->state = PIPE_FAILED;
	p->error = err;
	/* Before broken: a writer that sees broken reads the first cause. */
	atomic_store(&p->fail_status, err);
	atomic_store(&p->broken, true);
	if (p->listener) {
		tpu__listener_forget(p->listener, p);
		p->listener = NULL;
	}
	/* Closing the transport fails its operations; their callbacks see FAILED. */
	conn = p->conn;
	p->conn = NULL;
	if (conn)
		conn->ops->close(conn);
	p->link.conn = NULL;
	tpu__mtcp_close(p);
	p->link.closed = true;
	if (p->chan->close)
		p->chan->close(&p->link);
	/* Device-pair channels keep what ACKs release (cuda_ipc's exports). */
	for (int s = 0; s < 2; s++)
		for (int d = 0; d < 2; d++)
			if (p->dchan[s][d] && p->dchan[s][d]->close && p->dchan[s][d] != p->chan)
				p->dchan[s][d]->close(&p->link);
	tpu__pipe_writes_fail(p);
	tpu__pipe_reads_fail(p);
	pipe_desc_calls_fail(p, err);
}

/*
 * The peer went away.  A read in flight will drain what it left and fail
 * by itself.  A pipe holding a descriptor reads nothing until the user
 * asks for it: with writes in flight, which may wait for the peer (kmod,
 * cma ACKs) for ever, it fails now; with none, the held message is still
 * the user's, and the reads after it drain the rest and then fail.
 */
static void pipe_peer_gone(void *arg, tpu_status st)
{
	struct tpu_pipe *p = arg;

	if (p->state == PIPE_OPEN && p->in == PIPE_IN_IDLE && !(p->held && !p->writes))
		tpu__pipe_fail(p, st);
}

void tpu__pipe_opened(struct tpu_pipe *p)
{
	snprintf(p->xport_name, sizeof(p->xport_name), "%s", p->xport->name);
	snprintf(p->chan_name, sizeof(p->chan_name), "%s", p->chan->name);
	p->peer_pid = p->xport->proves_peer ? p->conn->ops->peer_pid(p->conn) : 0;
	atomic_store(&p->ready, true);
	p->state = PIPE_OPEN;
	/* Channels without a set-up of their own (rdma) use it too. */
	p->link.conn = p->conn;
	if (p->conn->ops->watch)
		p->conn->ops->watch(p->conn, pipe_peer_gone, p);
	tpu__log_debug("pipe %p: open, transport %s, cpu->cpu channel %s, cpu->cuda %s, "
		       "cuda->cpu %s, cuda->cuda %s", (void *)p, p->xport_name, p->chan_name,
		       p->dchan[0][1] ? p->dchan[0][1]->name : "none",
		       p->dchan[1][0] ? p->dchan[1][0]->name : "none",
		       p->dchan[1][1] ? p->dchan[1][1]->name : "none");
	/* Writes queued while connecting go out now, then reads may begin. */
	tpu__pipe_write_start(p, NULL);
	tpu__pipe_in_pump(p);
}

/* ---- calls, on the context thread ------------------------------------ */

static void pipe_call_handle(struct tpu_pipe *p, struct pipe_call *c);

static void pipe_call_run(struct tpu__task *t)
{
	struct pipe_call *c = (struct pipe_call *)t;
	struct tpu_pipe *p = c->pipe;
	bool deferred = c->deferred, outer = p->in_task;

	/* Counted until the handler returned: the pipe stays until then. */
	if (deferred)
		p->in_task = true;
	pipe_call_handle(p, c);
	if (!deferred)
		return;
	p->in_task = outer;
	/* Only this thread frees the pipe: nobody can between these two lines. */
	if (tpu__gate_leave(&p->queued) && p->closed)
		tpu__pipe_maybe_free(p);
}

static void pipe_call_handle(struct tpu_pipe *p, struct pipe_call *c)
{
	switch (c->kind) {
	case PIPE_CALL_WRITE:
		tpu__pipe_write_start(p, c);
		break;
	case PIPE_CALL_READ_DESC:
		tpu__pipe_read_desc(p, c);
		break;
	case PIPE_CALL_READ:
		tpu__pipe_read_start(p, c);
		break;
	case PIPE_CALL_CLOSE:
		tpu__pipe_call_free(p, c);
		tpu__pipe_fail(p, TPU_E_CLOSED);
		p->closed = true;
		break;
	}
}

/* Calls kept per pipe: a ping-pong has at most a few in flight. */
#define PIPE_CALL_CACHE	8

/*
 * A call is finished on the context thread (or the thread lent to it),
 * which alone drives the pipe: the cache is its own, and no thread-local
 * look (a call to __tls_get_addr in the shared library) is needed to
 * know it.
 */
void tpu__pipe_call_free(struct tpu_pipe *p, struct pipe_call *c)
{
	if (p->ncall_cache < PIPE_CALL_CACHE) {
		c->task.next = (struct tpu__task *)p->call_cache;
		p->call_cache = c;
		p->ncall_cache++;
		return;
	}
	free(c);
}

/*
 * The cache belongs to whoever drives the context (@here: the caller does):
 * other threads allocate.  Not cleared: pipe_call fills every field.
 */
static struct pipe_call *pipe_call_alloc(struct tpu_pipe *p, bool here)
{
	struct pipe_call *c = p->call_cache;

	if (!c || !here)
		return malloc(sizeof(*c));
	p->call_cache = (struct pipe_call *)c->task.next;
	p->ncall_cache--;
	return c;
}

/* @here: tpu__ctx_on_thread(p->ctx), asked once by the public call. */
static tpu_status pipe_call(struct tpu_pipe *p, bool here, enum pipe_call_kind kind,
			    struct tpu_message *msg, void (*cb)(void), void *arg)
{
	struct pipe_call *c = pipe_call_alloc(p, here);

	if (!c)
		return -ENOMEM;
	/* Every field, the ones not named zeroed. */
	*c = (struct pipe_call){
		.task.fn = pipe_call_run,
		.pipe = p,
		.kind = kind,
		.msg = msg,
		.arg = arg,
	};
	switch (kind) {
	case PIPE_CALL_WRITE:
		c->cb.write = (tpu_write_cb)cb;
		break;
	case PIPE_CALL_READ_DESC:
		c->cb.desc = (tpu_descriptor_cb)cb;
		break;
	case PIPE_CALL_READ:
		c->cb.read = (tpu_read_cb)cb;
		break;
	case PIPE_CALL_CLOSE:
		break;
	}
	/*
	 * From a callback, with nothing of this pipe queued before it, run the
	 * call now: a pipe driven from its callbacks (a ping-pong) then costs
	 * no trip through the task queue.  Close always goes through the queue
	 * (the pipe may be freed by it).
	 */
	if (kind != PIPE_CALL_CLOSE && here &&
	    tpu__gate_calls(&p->queued) == (p->in_task ? 1u : 0u)) {
		pipe_call_run(&c->task);
		return 0;
	}
	c->deferred = true;
	if (!tpu__gate_enter(&p->queued)) {
		/* A close on another thread ran to its end after this call's check. */
		free(c);
		return TPU_E_DESTROYED;
	}
	tpu__ctx_defer(p->ctx, &c->task);
	return 0;
}

/* ---- public ------------------------------------------------------------- */

/*
 * At every public entry: NULL or not a pipe (-EINVAL), closed already
 * (TPU_E_DESTROYED: the pipe is the library's from tpu_pipe_close() on),
 * or a context left behind by fork().
 */
static tpu_status pipe_check(const struct tpu_pipe *p)
{
	tpu_status st = tpu__magic_check(p, p ? &p->magic : NULL, TPU__MAGIC_PIPE);

	if (!st && atomic_load(&p->user_closed)) {
		tpu__log_debug("pipe %p: used after tpu_pipe_close()", (const void *)p);
		st = TPU_E_DESTROYED;
	}
	return st ? st : tpu__ctx_check(p->ctx);
}

static bool meta_ok(const void *meta, size_t len)
{
	return len <= TPU_PIPE_MAX_METADATA && (meta || !len);
}

static tpu_status check_message(const struct tpu_message *m)
{
	if (!meta_ok(m->metadata, m->metadata_len))
		return -EINVAL;
	if (m->npayloads > TPU_PIPE_MAX_PAYLOADS || (m->npayloads && !m->payloads))
		return -EINVAL;
	if (m->ntensors > TPU_PIPE_MAX_TENSORS || (m->ntensors && !m->tensors))
		return -EINVAL;
	for (size_t i = 0; i < m->npayloads; i++) {
		const struct tpu_payload *pl = &m->payloads[i];

		if (pl->len > TPU_PIPE_MAX_LEN || (pl->len && !pl->data) ||
		    !meta_ok(pl->metadata, pl->metadata_len))
			return -EINVAL;
	}
	for (size_t i = 0; i < m->ntensors; i++) {
		const struct tpu_message_tensor *t = &m->tensors[i];

		if (t->len > TPU_PIPE_MAX_LEN || (t->len && !t->data) ||
		    !meta_ok(t->metadata, t->metadata_len) || !tpu__reserved_zero(t->reserved))
			return -EINVAL;
		if (t->device.type > TPU_DEVICE_CUDA || t->target.type > TPU_DEVICE_CUDA)
			return -EINVAL;
		if (t->flags & ~TPU_TENSOR_GIVE)
			return -EINVAL;
		if ((t->flags & TPU_TENSOR_GIVE) &&
		    (!t->buffer || t->data != tpu_buffer_data(t->buffer) ||
		     t->len > tpu_buffer_size(t->buffer)))
			return -EINVAL;
		if (t->device.type == TPU_DEVICE_CPU && t->stream)
			return -EINVAL;
		if (t->device.type == TPU_DEVICE_CUDA) {
			/* No driver, no such device, not its memory: said now. */
			tpu_status st = tpu__cuda_check_ptr(t->data, t->len, t->device.index);

			if (st || (t->flags & TPU_TENSOR_GIVE))
				return st ? st : -EINVAL;
		}
	}
	return 0;
}

TPU_API tpu_status tpu_pipe_write(struct tpu_pipe *pipe, struct tpu_message *msg,
				  tpu_write_cb done, void *arg)
{
	tpu_status st = pipe_check(pipe);

	if (st)
		return st;
	if (!msg || !done)
		return -EINVAL;
	st = check_message(msg);
	if (st)
		return st;
	if (atomic_load(&pipe->broken)) {
		st = atomic_load(&pipe->fail_status);
		return st ? st : -EPIPE;
	}
	return pipe_call(pipe, tpu__ctx_on_thread(pipe->ctx), PIPE_CALL_WRITE, msg,
			 (void (*)(void))done, arg);
}

TPU_API tpu_status tpu_pipe_read_descriptor(struct tpu_pipe *pipe, tpu_descriptor_cb done,
					    void *arg)
{
	tpu_status st = pipe_check(pipe);

	if (st)
		return st;
	if (!done)
		return -EINVAL;
	return pipe_call(pipe, tpu__ctx_on_thread(pipe->ctx), PIPE_CALL_READ_DESC, NULL,
			 (void (*)(void))done, arg);
}

/*
 * Whether @msg is a descriptor of @pipe that no read started yet, and the
 * rest of its checks.  @msg is not looked into before it is found among
 * the pipe's descriptors: one read already (or never delivered) may be
 * freed memory.  @here: the caller drives the context.
 */
static tpu_status read_check(struct tpu_pipe *pipe, struct tpu_message *msg, bool here)
{
	/* The context thread is the one that changes the list: it needs no lock. */
	bool lock = !here;
	tpu_status st = -EINVAL;
	struct pipe_read *rd;

	if (lock)
		pthread_mutex_lock(&pipe->reads_lock);
	for (rd = __atomic_load_n(&pipe->reads, __ATOMIC_ACQUIRE); rd;
	     rd = __atomic_load_n(&rd->next, __ATOMIC_ACQUIRE))
		if (&rd->msg == msg && !__atomic_load_n(&rd->started, __ATOMIC_RELAXED))
			break;
	if (!rd) {
		tpu__log_debug("pipe %p: tpu_pipe_read(%p): not a descriptor waiting to be read "
			       "(read already?)", (void *)pipe, (void *)msg);
		goto out;
	}
	for (size_t i = 0; i < msg->npayloads; i++)
		if (msg->payloads[i].len && !msg->payloads[i].data)
			goto out;
	for (size_t i = 0; i < msg->ntensors; i++) {
		const struct tpu_message_tensor *t = &msg->tensors[i];

		if (t->flags & ~TPU_TENSOR_WANT_BUFFER)
			goto out;
		/* A tensor needs room, or asks for a buffer. */
		if (t->flags & TPU_TENSOR_WANT_BUFFER ? t->data != NULL : t->len && !t->data)
			goto out;
		if (t->device.type > TPU_DEVICE_CUDA || (t->device.type == TPU_DEVICE_CPU && t->stream))
			goto out;
		if (t->device.type == TPU_DEVICE_CUDA) {
			tpu_status st2 = tpu__cuda_check_ptr(t->data, t->len, t->device.index);

			if (st2 || (t->flags & TPU_TENSOR_WANT_BUFFER)) {
				st = st2 ? st2 : -EINVAL;
				goto out;
			}
		}
	}
	st = 0;
out:
	if (lock)
		pthread_mutex_unlock(&pipe->reads_lock);
	return st;
}

TPU_API tpu_status tpu_pipe_read(struct tpu_pipe *pipe, struct tpu_message *msg,
				 tpu_read_cb done, void *arg)
{
	tpu_status st = pipe_check(pipe);
	bool here;

	if (st)
		return st;
	if (!msg || !done)
		return -EINVAL;
	here = tpu__ctx_on_thread(pipe->ctx);
	st = read_check(pipe, msg, here);
	if (st)
		return st;
	return pipe_call(pipe, here, PIPE_CALL_READ, msg, (void (*)(void))done, arg);
}

static void pipe_close_now(void *arg)
{
	struct tpu_pipe *p = arg;

	tpu__pipe_fail(p, TPU_E_CLOSED);
	p->closed = true;
	tpu__pipe_maybe_free(p);
}

TPU_API void tpu_pipe_close(struct tpu_pipe *pipe)
{
	tpu_status st;

	if (!pipe)
		return;
	st = tpu__magic_check(pipe, &pipe->magic, TPU__MAGIC_PIPE);
	if (!st)
		st = tpu__ctx_check(pipe->ctx);
	if (st || atomic_exchange(&pipe->user_closed, true)) {
		tpu__log_debug("tpu_pipe_close(%p): %s; ignored", (void *)pipe,
			       st ? tpu_strerror(st) : "closed already");
		return;
	}
	tpu__ctx_del_obj(pipe->ctx, &pipe->obj);
	atomic_store(&pipe->broken, true);
	/*
	 * From a callback the close runs after the calls already queued (they
	 * may name this pipe).  From any other thread, wait until it ran, so
	 * that what the pipe holds (its kmod rendezvous) is released before
	 * the caller goes on, tpu_context_destroy() in particular.
	 */
	if (tpu__ctx_on_thread(pipe->ctx)) {
		/* Without memory for the call the pipe would leak: retry, it is tiny. */
		while (pipe_call(pipe, true, PIPE_CALL_CLOSE, NULL, NULL, NULL))
			;
		return;
	}
	tpu__ctx_run_sync(pipe->ctx, pipe_close_now, pipe);
}

TPU_API const char *tpu_pipe_transport(const struct tpu_pipe *pipe)
{
	if (pipe_check(pipe) || !atomic_load(&((struct tpu_pipe *)pipe)->ready))
		return "";
	return pipe->xport_name;
}

TPU_API const char *tpu_pipe_channel(const struct tpu_pipe *pipe, enum tpu_device_type src,
				     enum tpu_device_type dst)
{
	if (pipe_check(pipe) || !atomic_load(&((struct tpu_pipe *)pipe)->ready))
		return "";
	if (src > TPU_DEVICE_CUDA || dst > TPU_DEVICE_CUDA)
		return "";
	if (src == TPU_DEVICE_CPU && dst == TPU_DEVICE_CPU)
		return pipe->chan_name;
	/* Written before ready was set, never changed after. */
	return pipe->dchan[src][dst] ? pipe->dchan[src][dst]->name : "";
}

TPU_API tpu_status tpu_pipe_peer_pid(const struct tpu_pipe *pipe, int *pid)
{
	tpu_status st = pipe_check(pipe);

	if (!pid)
		return -EINVAL;
	*pid = 0;
	if (st)
		return st;
	if (!atomic_load(&((struct tpu_pipe *)pipe)->ready))
		return -EAGAIN;
	/* Written before ready was set, never changed after. */
	*pid = pipe->peer_pid > 0 ? pipe->peer_pid : 0;
	return 0;
}

const struct tpu__chan *tpu__pipe_chan_by_wire(const struct tpu_pipe *p, uint32_t id)
{
	if (p->chan && p->chan->wire_id == id)
		return p->chan;
	for (int s = 0; s < 2; s++)
		for (int d = 0; d < 2; d++)
			if (p->dchan[s][d] && p->dchan[s][d]->wire_id == id)
				return p->dchan[s][d];
	return NULL;
}

/* ---- connect ------------------------------------------------------------ */

struct connect_call {
	struct tpu_pipe *pipe;
	const struct tpu__xport *xport;
	const char *addr;
	tpu_status status;
};

static void connect_run(void *arg)
{
	struct connect_call *cc = arg;

	cc->status = tpu__pipe_connector_start(cc->pipe, cc->xport, cc->addr);
}

static void pipe_free_run(void *arg)
{
	tpu__pipe_maybe_free(arg);
}

TPU_API tpu_status tpu_pipe_connect(struct tpu_context *ctx, const char *url,
				    struct tpu_pipe **out)
{
	struct connect_call cc = { 0 };
	const char *sep;
	struct tpu_pipe *p;
	tpu_status st;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (ctx && tpu__ctx_check(ctx))
		return tpu__ctx_check(ctx);
	if (!ctx || !url)
		return -EINVAL;
	sep = strstr(url, "://");
	if (!sep || sep == url)
		return -EINVAL;
	cc.xport = tpu__pipe_xport_by_name(url, (size_t)(sep - url));
	if (!cc.xport)
		return TPU_E_URL_SCHEME;
	p = tpu__pipe_new(ctx, true);
	if (!p)
		return -ENOMEM;
	st = tpu__pipe_policy(ctx, &p->policy);
	if (!st && !p->policy.xport_ok[tpu__pipe_xport_index(cc.xport)])
		st = TPU_E_NO_TRANSPORT;
	if (st) {
		free(p);
		return st;
	}
	cc.pipe = p;
	cc.addr = sep + 3;
	tpu__ctx_run_sync(ctx, connect_run, &cc);
	if (cc.status) {
		/* Nothing of it is in flight: the transport refused at once. */
		if (p->conn)
			p->conn->ops->close(p->conn);
		p->conn = NULL;
		p->closed = true;
		tpu__ctx_run_sync(ctx, pipe_free_run, p);
		return cc.status;
	}
	tpu__ctx_add_obj(ctx, &p->obj);
	*out = p;
	return 0;
}
