// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The one-call collectives and point-to-point transfers of a world.
 *
 * A collective is the TensorFlow model of lib/coll with everything chosen
 * for the caller: the group is the world's ranks under their device names,
 * the instance describes this call, and the step id counts the world's
 * collectives, so successive calls never share a key.  Each call makes
 * its own tpu_coll and resolves its instance afresh: resolution is the
 * check that every rank called the same thing, and a cache per call
 * sequence would only grow.
 *
 * Send and receive by rank are the world's rendezvous under keys of the
 * two ranks' device names, numbered per direction and pair, so that the
 * n-th send from A to B meets B's n-th receive from A.  A number is used
 * up only by a transfer that completed, so a timed-out call can be
 * repeated.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "world.h"
#include "coll/coll.h"

/* A group key of its own, apart from groups a caller forms over the rendezvous. */
#define WORLD_COLL_GROUP	0x576f726c	/* "Worl" */
#define WORLD_COLL_INSTANCE	1
#define WORLD_P2P_EDGE		"tpu_world_p2p"
#define WORLD_DEVICE_MAX	(WORLD_TASK_MAX + 16)
#define WORLD_DEFAULT_NS	60000000000ull

struct world_coll {
	pthread_mutex_t lock;
	bool busy;			/* a collective is running */
	int64_t step;			/* the last step id used */
	char reason[256];		/* of the last failed collective */
	char (*names)[WORLD_DEVICE_MAX];	/* per rank */
	const char **devices;		/* pointers into names, for the group */
	uint64_t *sent, *received;	/* per peer: transfers completed */
	bool *sending, *receiving;	/* per peer: one at a time */
	struct world_shm *shm;		/* world_shm.c's; used while busy */
};

void tpu__world_coll_free(struct world_coll *wc)
{
	if (!wc)
		return;
	pthread_mutex_destroy(&wc->lock);
	tpu__world_shm_free(wc->shm);
	free(wc->names);
	free(wc->devices);
	free(wc->sent);
	free(wc->received);
	free(wc->sending);
	free(wc->receiving);
	free(wc);
}

void tpu__world_coll_drop_shm(struct world_coll *wc)
{
	struct world_shm *ws;

	if (!wc)
		return;
	pthread_mutex_lock(&wc->lock);
	ws = wc->shm;
	wc->shm = NULL;
	pthread_mutex_unlock(&wc->lock);
	tpu__world_shm_free(ws);
}

static void device_of(const struct tpu_world *w, int rank, char *buf, size_t size)
{
	snprintf(buf, size, "/job:%s/replica:0/task:%d/device:CPU:0", w->job, rank);
}

static struct world_coll *coll_new(const struct tpu_world *w)
{
	size_t n = (size_t)w->info.size;
	struct world_coll *wc = calloc(1, sizeof(*wc));

	if (!wc)
		return NULL;
	pthread_mutex_init(&wc->lock, NULL);
	wc->names = calloc(n, sizeof(*wc->names));
	wc->devices = calloc(n, sizeof(*wc->devices));
	wc->sent = calloc(n, sizeof(*wc->sent));
	wc->received = calloc(n, sizeof(*wc->received));
	wc->sending = calloc(n, sizeof(*wc->sending));
	wc->receiving = calloc(n, sizeof(*wc->receiving));
	if (!wc->names || !wc->devices || !wc->sent || !wc->received || !wc->sending ||
	    !wc->receiving) {
		tpu__world_coll_free(wc);
		return NULL;
	}
	for (size_t r = 0; r < n; r++) {
		device_of(w, (int)r, wc->names[r], sizeof(wc->names[r]));
		wc->devices[r] = wc->names[r];
	}
	return wc;
}

/* The world's collective state, made on first use; NULL with *@st set. */
static struct world_coll *coll_of(struct tpu_world *w, tpu_status *st)
{
	struct world_coll *wc;

	/* Inside the world (tpu__world_enter()): its context may still be gone. */
	*st = w->ctx_gone ? TPU_E_DESTROYED : tpu__ctx_check(w->ctx);
	if (!*st && tpu__ctx_on_thread(w->ctx))
		*st = -EDEADLK;
	if (*st)
		return NULL;
	pthread_mutex_lock(&w->lock);
	if (!w->coll)
		w->coll = coll_new(w);
	wc = w->coll;
	pthread_mutex_unlock(&w->lock);
	*st = wc ? 0 : -ENOMEM;
	return wc;
}

/*
 * The shared-memory path where the world takes it (world_shm.c): *@ran
 * false when the call is the rendezvous's.
 */
static tpu_status run_shm(struct tpu_world *w, struct world_coll *wc, int64_t step,
			  const struct tpu_coll_instance *inst, int root, const void *in, void *out,
			  bool *ran)
{
	struct tpu__shm_call c = { .type = inst->type, .dtype = inst->dtype, .op = inst->op,
				   .final_op = inst->final_op, .root = root, .count = inst->count,
				   .in = in, .out = out,
				   .deadline_ns = tpu__deadline_ns(inst->timeout_ns),
				   .cancel = &w->cancel };
	char reason[sizeof(wc->reason)] = "";
	tpu_status st = tpu__world_shm_run(w, &wc->shm, &c, step, wc->devices, reason,
					   sizeof(reason), ran);

	if (st) {
		pthread_mutex_lock(&wc->lock);
		snprintf(wc->reason, sizeof(wc->reason), "%s", reason);
		pthread_mutex_unlock(&wc->lock);
	}
	return st;
}

/* run() inside the world. */
static tpu_status run_in(struct tpu_world *w, const struct tpu_coll_instance *inst, int root,
			 bool source, const void *in, void *out)
{
	struct tpu_coll_group g = { .group_key = WORLD_COLL_GROUP, .device_type = "CPU" };
	struct tpu_coll_member m = { .is_source = source };
	struct tpu_coll *coll = NULL;
	struct tpu_coll_exec *exec = NULL;
	struct world_coll *wc;
	int64_t step;
	tpu_status st;

	wc = coll_of(w, &st);
	if (!wc)
		return st;
	if (w->info.size > TPU_COLL_MAX_MEMBERS)
		return -E2BIG;
	pthread_mutex_lock(&wc->lock);
	if (wc->busy) {
		pthread_mutex_unlock(&wc->lock);
		return -EBUSY;
	}
	wc->busy = true;
	step = ++wc->step;
	pthread_mutex_unlock(&wc->lock);

	{
		bool ran = false;

		st = run_shm(w, wc, step, inst, root, in, out, &ran);
		if (st || ran) {
			pthread_mutex_lock(&wc->lock);
			wc->busy = false;
			pthread_mutex_unlock(&wc->lock);
			return st;
		}
	}

	g.group_size = w->info.size;
	g.devices = wc->devices;
	m.device = wc->devices[w->info.rank];
	st = tpu_coll_create(w->rdv, &coll);
	/* The world chose its path: no choice of lanes on every call. */
	if (!st)
		tpu__coll_no_lanes(coll);
	if (!st)
		st = tpu_coll_exec_create(coll, step, &exec);
	if (!st)
		st = tpu_coll_exec_run(exec, &g, inst, &m, in, out);
	tpu_coll_exec_destroy(exec);

	pthread_mutex_lock(&wc->lock);
	if (st && coll)
		tpu_coll_last_reason(coll, wc->reason, sizeof(wc->reason));
	if (st && !wc->reason[0])
		snprintf(wc->reason, sizeof(wc->reason), "step %lld: %s", (long long)step,
			 tpu_strerror(st));
	wc->busy = false;
	pthread_mutex_unlock(&wc->lock);
	tpu_coll_destroy(coll);
	return st;
}

/* One collective of this world; @in and @out as tpu_coll_exec_run() takes them. */
static tpu_status run(struct tpu_world *w, const struct tpu_coll_instance *inst, int root,
		      bool source, const void *in, void *out)
{
	tpu_status st = tpu__world_enter(w);

	if (st)
		return st;
	return tpu__world_leave(w, run_in(w, inst, root, source, in, out));
}

static struct tpu_coll_instance instance(enum tpu_coll_type type, enum tpu_dtype dtype,
					 uint64_t count, uint64_t timeout_ns)
{
	return (struct tpu_coll_instance){ .instance_key = WORLD_COLL_INSTANCE, .type = type,
					   .dtype = dtype, .count = count,
					   .timeout_ns = timeout_ns ? timeout_ns : WORLD_DEFAULT_NS };
}

static bool reduce_ok(enum tpu_reduce_op op, enum tpu_final_op final_op)
{
	return (unsigned int)op <= TPU_OP_MAX && (unsigned int)final_op <= TPU_FINAL_DIV;
}

TPU_API tpu_status tpu_world_all_reduce(struct tpu_world *w, const void *in, void *out,
					uint64_t count, enum tpu_dtype dtype, enum tpu_reduce_op op,
					enum tpu_final_op final_op, uint64_t timeout_ns)
{
	struct tpu_coll_instance inst = instance(TPU_COLL_REDUCTION, dtype, count, timeout_ns);

	if (!in || !out || !reduce_ok(op, final_op) || !tpu_dtype_size(dtype))
		return -EINVAL;
	inst.op = op;
	inst.final_op = final_op;
	return run(w, &inst, 0, false, in, out);
}

TPU_API tpu_status tpu_world_broadcast(struct tpu_world *w, void *buf, uint64_t count,
				       enum tpu_dtype dtype, int root, uint64_t timeout_ns)
{
	struct tpu_coll_instance inst = instance(TPU_COLL_BROADCAST, dtype, count, timeout_ns);
	const struct tpu_world_info *info = tpu_world_get_info(w);
	bool source;

	if (!info || !buf || root < 0 || root >= info->size || !tpu_dtype_size(dtype))
		return -EINVAL;
	source = root == info->rank;
	return run(w, &inst, root, source, source ? buf : NULL, source ? NULL : buf);
}

TPU_API tpu_status tpu_world_all_gather(struct tpu_world *w, const void *in, void *out,
					uint64_t count, enum tpu_dtype dtype, uint64_t timeout_ns)
{
	struct tpu_coll_instance inst = instance(TPU_COLL_GATHER, dtype, count, timeout_ns);

	if (!in || !out || !tpu_dtype_size(dtype))
		return -EINVAL;
	return run(w, &inst, 0, false, in, out);
}

TPU_API tpu_status tpu_world_reduce_scatter(struct tpu_world *w, const void *in, void *out,
					    uint64_t count, enum tpu_dtype dtype,
					    enum tpu_reduce_op op, enum tpu_final_op final_op,
					    uint64_t timeout_ns)
{
	struct tpu_coll_instance inst = instance(TPU_COLL_REDUCE_SCATTER, dtype, count, timeout_ns);

	if (!in || !out || !reduce_ok(op, final_op) || !tpu_dtype_size(dtype))
		return -EINVAL;
	inst.op = op;
	inst.final_op = final_op;
	return run(w, &inst, 0, false, in, out);
}

TPU_API tpu_status tpu_world_barrier_timeout(struct tpu_world *w, uint64_t timeout_ns)
{
	struct tpu_coll_instance inst = instance(TPU_COLL_REDUCTION, TPU_DT_UINT8, 1, timeout_ns);
	uint8_t in = 1, out = 0;

	inst.op = TPU_OP_MAX;
	return run(w, &inst, 0, false, &in, &out);
}

/* The key of the @seq-th transfer from @src to @dst. */
static tpu_status p2p_key(const struct world_coll *wc, int src, int dst, uint64_t seq,
			  char *buf, size_t size, size_t *len)
{
	struct tpu_key k = { .src_incarnation = 1, .iter_id = seq };

	k.src_device = tpu_str(wc->names[src]);
	k.dst_device = tpu_str(wc->names[dst]);
	k.edge_name = tpu_str(WORLD_P2P_EDGE);
	return tpu_key_build(&k, buf, size, len);
}

/*
 * Claim the pair's direction (@busy[@peer]) and read its count; -EBUSY
 * while another thread has it.
 */
static tpu_status p2p_claim(struct world_coll *wc, bool *busy, const uint64_t *count, int peer,
			    uint64_t *seq)
{
	tpu_status st = 0;

	pthread_mutex_lock(&wc->lock);
	if (busy[peer])
		st = -EBUSY;
	else
		busy[peer] = true;
	*seq = count[peer];
	pthread_mutex_unlock(&wc->lock);
	return st;
}

static void p2p_release(struct world_coll *wc, bool *busy, uint64_t *count, int peer, bool done)
{
	pthread_mutex_lock(&wc->lock);
	if (done)
		count[peer]++;
	busy[peer] = false;
	pthread_mutex_unlock(&wc->lock);
}

/* A peer rank of @w other than this one; *@wc set on success. */
static tpu_status p2p_start(struct tpu_world *w, int peer, struct world_coll **wc)
{
	tpu_status st;

	*wc = coll_of(w, &st);
	if (!*wc)
		return st;
	if (peer < 0 || peer >= w->info.size || peer == w->info.rank)
		return -EINVAL;
	return 0;
}

static tpu_status send_in(struct tpu_world *w, int dst, const void *data, size_t len,
			  uint64_t timeout_ns)
{
	struct tpu_tensor t = { .data = (void *)data, .len = len };
	struct world_coll *wc;
	char key[2 * WORLD_DEVICE_MAX + 64];
	size_t klen;
	uint64_t seq;
	tpu_status st;

	if (!data && len)
		return -EINVAL;
	st = p2p_start(w, dst, &wc);
	if (!st)
		st = p2p_claim(wc, wc->sending, wc->sent, dst, &seq);
	if (st)
		return st;
	st = p2p_key(wc, w->info.rank, dst, seq, key, sizeof(key), &klen);
	if (!st)
		st = tpu_rendezvous_send_wait(w->rdv, key, klen, &t, 0,
					      timeout_ns ? timeout_ns : WORLD_DEFAULT_NS);
	p2p_release(wc, wc->sending, wc->sent, dst, !st);
	return st;
}

static tpu_status recv_in(struct tpu_world *w, int src, void *data, size_t cap, size_t *len,
			  uint64_t timeout_ns)
{
	struct tpu_tensor t = { .data = data, .len = cap };
	struct world_coll *wc;
	char key[2 * WORLD_DEVICE_MAX + 64];
	size_t klen, got = 0;
	uint64_t seq;
	tpu_status st;

	if (!data && cap)
		return -EINVAL;
	st = p2p_start(w, src, &wc);
	if (!st)
		st = p2p_claim(wc, wc->receiving, wc->received, src, &seq);
	if (st)
		return st;
	st = p2p_key(wc, src, w->info.rank, seq, key, sizeof(key), &klen);
	if (!st)
		st = tpu_rendezvous_recv_wait(w->rdv, key, klen, &t,
					      timeout_ns ? timeout_ns : WORLD_DEFAULT_NS, &got);
	p2p_release(wc, wc->receiving, wc->received, src, !st);
	if (len && (!st || st == -EMSGSIZE))
		*len = got;
	return st;
}

TPU_API tpu_status tpu_world_send(struct tpu_world *w, int dst, const void *data, size_t len,
				  uint64_t timeout_ns)
{
	tpu_status st = tpu__world_enter(w);

	if (st)
		return st;
	return tpu__world_leave(w, send_in(w, dst, data, len, timeout_ns));
}

TPU_API tpu_status tpu_world_recv(struct tpu_world *w, int src, void *data, size_t cap,
				  size_t *len, uint64_t timeout_ns)
{
	tpu_status st = tpu__world_enter(w);

	if (st)
		return st;
	return tpu__world_leave(w, recv_in(w, src, data, cap, len, timeout_ns));
}

TPU_API tpu_status tpu_world_device_name(const struct tpu_world *w, int rank, char *buf,
					 size_t size)
{
	const struct tpu_world_info *info = tpu_world_get_info(w);
	char name[WORLD_DEVICE_MAX];

	if (!info || rank < 0 || rank >= info->size || !buf || !size)
		return -EINVAL;
	device_of(w, rank, name, sizeof(name));
	if (strlen(name) >= size)
		return -ENOSPC;
	memcpy(buf, name, strlen(name) + 1);
	return 0;
}

TPU_API void tpu_world_last_reason(struct tpu_world *w, char *buf, size_t size)
{
	struct world_coll *wc = NULL;

	if (!buf || !size)
		return;
	buf[0] = 0;
	if (tpu__world_enter(w))
		return;
	pthread_mutex_lock(&w->lock);
	wc = w->coll;
	pthread_mutex_unlock(&w->lock);
	if (wc) {
		pthread_mutex_lock(&wc->lock);
		snprintf(buf, size, "%s", wc->reason);
		pthread_mutex_unlock(&wc->lock);
	}
	tpu__world_leave(w, 0);
}

TPU_API const char *tpu_world_coll_path(struct tpu_world *w)
{
	struct world_coll *wc = NULL;
	const char *path = "";

	if (tpu__world_enter(w))
		return path;
	pthread_mutex_lock(&w->lock);
	wc = w->coll;
	pthread_mutex_unlock(&w->lock);
	/* The path state is the running collective's (unlocked) while busy. */
	if (wc) {
		pthread_mutex_lock(&wc->lock);
		if (!wc->busy)
			path = tpu__world_shm_path(wc->shm);
		pthread_mutex_unlock(&wc->lock);
	}
	tpu__world_leave(w, 0);
	return path;
}
