// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The collectives of a world whose ranks sit on several hosts, in two
 * levels (world_shm.c decided the hosts and mapped this host's segment):
 * the ranks of each host meet in their shared segment (lib/coll/coll_shm.c),
 * and one leader per host, its lowest rank, meets the other leaders over
 * the world's rendezvous (lib/coll's ring, tree or doubling, over whichever
 * transport the world's pipes across hosts use: rdma or tcp).
 *
 * - all-reduce: all-reduce on each host, all-reduce among the leaders,
 *   the final op once (by the leader), broadcast on each host;
 * - reduce-scatter: that all-reduce into a scratch tensor, then this
 *   rank's chunk of it;
 * - broadcast: on the root's host from the root, among the leaders from
 *   the root's host's, on the other hosts from their leader;
 * - all-gather: all-gather on each host, all-gather among the leaders of
 *   their hosts' blocks (padded to the largest host), which each leader
 *   puts in rank order, then broadcast of the whole on each host.
 *
 * Every rank gets the leader's bits, so all agree.  A failure at either
 * level ends the world's collectives on every host: the rank aborts the
 * world's rendezvous (passed on to every rank it has a pipe with: the
 * leaders fail their network part at once) and fails its host's segment
 * (its other ranks fail their part at once); a rank that dies is seen on
 * its host by the segment's liveness check and on other hosts by the
 * abort its host's leader passes on, or by its broken pipe.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "world_shm.h"
#include "coll/coll.h"

/* The leaders' group key, apart from the world's flat group (world_coll.c). */
#define WORLD_HIER_GROUP	0x48696572	/* "Hier" */

struct hier {
	struct tpu_world *w;
	struct world_shm *ws;
	const struct tpu__shm_call *c;
	int64_t step;
	const char *const *devices;
	char *reason;
	size_t size;
	size_t es;
	bool leader;
};

/*
 * A step on this host: @type over the segment, or, for a rank alone on
 * its host, what it makes of one member (a copy unless in place).
 */
static tpu_status on_host(struct hier *h, enum tpu_coll_type type, int root, const void *in,
			  void *out, uint64_t count)
{
	struct tpu__shm_call c = *h->c;

	if (!h->ws->seg) {
		if (type != TPU_COLL_BROADCAST && in != out && count)
			memmove(out, in, count * h->es);
		return 0;
	}
	c.type = type;
	c.root = root;
	c.in = in;
	c.out = out;
	c.count = count;
	c.final_op = TPU_FINAL_NONE;
	return tpu__shm_coll_run(h->ws->seg, &c, h->reason, h->size);
}

/* A step among the leaders (this rank is one), over the world's rendezvous. */
static tpu_status among_leaders(struct hier *h, enum tpu_coll_type type, int root_host,
				const void *in, void *out, uint64_t count)
{
	const struct world_shm *ws = h->ws;
	const char *devs[TPU_COLL_MAX_MEMBERS];
	int me = ws->host[h->w->info.rank];
	uint64_t now = tpu__mono_ns();
	struct tpu_coll_group g = { .group_key = WORLD_HIER_GROUP, .group_size = ws->nhosts,
				    .device_type = "CPU", .devices = devs };
	struct tpu_coll_instance inst = {
		.instance_key = 1, .type = type, .dtype = h->c->dtype, .count = count,
		.op = h->c->op, .final_op = TPU_FINAL_NONE,
		.timeout_ns = h->c->deadline_ns > now ? h->c->deadline_ns - now : 1 };
	struct tpu_coll_member m = { .is_source = type == TPU_COLL_BROADCAST && me == root_host };
	struct tpu_coll *coll = NULL;
	struct tpu_coll_exec *exec = NULL;
	tpu_status st;

	for (int k = 0; k < ws->nhosts; k++)
		devs[k] = h->devices[ws->by_host[ws->host_start[k]]];
	m.device = devs[me];
	st = tpu_coll_create(h->w->rdv, &coll);
	/* The world chose its path: no choice of lanes on every call. */
	if (!st)
		tpu__coll_no_lanes(coll);
	if (!st)
		st = tpu_coll_exec_create(coll, h->step, &exec);
	if (!st)
		st = tpu_coll_exec_run(exec, &g, &inst, &m, in, out);
	tpu_coll_exec_destroy(exec);
	/* This host's other ranks wait for the result in the segment: fail them now. */
	if (st)
		tpu__shm_coll_fail(h->ws->seg, st);
	if (st && coll && h->reason && h->size && !h->reason[0]) {
		char why[200] = "";

		tpu_coll_last_reason(coll, why, sizeof(why));
		snprintf(h->reason, h->size, "hier: among the %d hosts' leaders: %s", ws->nhosts,
			 why[0] ? why : tpu_status_name(st));
	}
	tpu_coll_destroy(coll);
	return st;
}

/* Host all-reduce, leaders' all-reduce, the final op, host broadcast: into @out. */
static tpu_status all_reduce(struct hier *h, const void *in, void *out, uint64_t count)
{
	tpu_status st = on_host(h, TPU_COLL_REDUCTION, 0, in, out, count);

	if (!st && h->leader)
		st = among_leaders(h, TPU_COLL_REDUCTION, 0, out, out, count);
	if (!st && h->leader)
		tpu__coll_final(h->c->dtype, h->c->final_op, out, count, h->w->info.size);
	if (!st)
		st = on_host(h, TPU_COLL_BROADCAST, 0, h->leader ? out : NULL,
			     h->leader ? NULL : out, count);
	return st;
}

static tpu_status reduce_scatter(struct hier *h)
{
	const struct tpu__shm_call *c = h->c;
	size_t len, off = tpu_coll_chunk(c->count, h->w->info.size, h->w->info.rank, &len);
	char *all = malloc(c->count * h->es + 1);
	tpu_status st;

	if (!all)
		return -ENOMEM;
	st = all_reduce(h, c->in, all, c->count);
	if (!st && len)
		memcpy(c->out, all + off * h->es, len * h->es);
	free(all);
	return st;
}

static tpu_status broadcast(struct hier *h)
{
	const struct world_shm *ws = h->ws;
	const struct tpu__shm_call *c = h->c;
	int me = h->w->info.rank, rh = ws->host[c->root];
	bool home = ws->host[me] == rh, root = me == c->root;
	void *buf = root ? (void *)c->in : c->out;
	tpu_status st = 0;

	if (home)
		st = on_host(h, TPU_COLL_BROADCAST, ws->local[c->root], root ? buf : NULL,
			     root ? NULL : buf, c->count);
	if (!st && h->leader)
		st = among_leaders(h, TPU_COLL_BROADCAST, rh, home ? buf : NULL,
				   home ? NULL : buf, c->count);
	if (!st && !home)
		st = on_host(h, TPU_COLL_BROADCAST, 0, h->leader ? buf : NULL,
			     h->leader ? NULL : buf, c->count);
	return st;
}

static tpu_status all_gather(struct hier *h)
{
	const struct world_shm *ws = h->ws;
	const struct tpu__shm_call *c = h->c;
	size_t block = c->count * h->es, m = (size_t)ws->maxloc, hosts = (size_t)ws->nhosts;
	char *mine = NULL, *all = NULL;
	tpu_status st;

	if (block && block > SIZE_MAX / m / hosts)
		return -EINVAL;
	/* This host's blocks, padded to the largest host's number for the leaders. */
	mine = calloc(1, m * block + 1);
	if (h->leader)
		all = malloc(hosts * m * block + 1);
	if (!mine || (h->leader && !all)) {
		free(mine);
		return -ENOMEM;
	}
	st = on_host(h, TPU_COLL_GATHER, 0, c->in, mine, c->count);
	if (!st && h->leader)
		st = among_leaders(h, TPU_COLL_GATHER, 0, mine, all, m * c->count);
	for (int k = 0; !st && h->leader && k < ws->nhosts; k++)
		for (int i = ws->host_start[k]; i < ws->host_start[k + 1]; i++)
			memcpy((char *)c->out + (size_t)ws->by_host[i] * block,
			       all + ((size_t)k * m + (size_t)(i - ws->host_start[k])) * block,
			       block);
	if (!st)
		st = on_host(h, TPU_COLL_BROADCAST, 0, h->leader ? c->out : NULL,
			     h->leader ? NULL : c->out, c->count * (uint64_t)h->w->info.size);
	free(mine);
	free(all);
	return st;
}

tpu_status tpu__world_hier_run(struct tpu_world *w, struct world_shm *ws,
			       const struct tpu__shm_call *c, int64_t step,
			       const char *const *devices, char *reason, size_t size)
{
	struct hier h = { .w = w, .ws = ws, .c = c, .step = step, .devices = devices,
			  .reason = reason, .size = size, .es = tpu_dtype_size(c->dtype),
			  .leader = ws->loc == 0 };
	tpu_status st;

	if (!h.es || c->count > SIZE_MAX / h.es / (size_t)w->info.size)
		return -EINVAL;
	switch (c->type) {
	case TPU_COLL_REDUCTION:
		st = all_reduce(&h, c->in, c->out, c->count);
		break;
	case TPU_COLL_REDUCE_SCATTER:
		st = reduce_scatter(&h);
		break;
	case TPU_COLL_BROADCAST:
		st = broadcast(&h);
		break;
	case TPU_COLL_GATHER:
		st = all_gather(&h);
		break;
	default:
		return -EINVAL;
	}
	if (st) {
		/*
		 * The others, on this host and beyond, are out of step: fail
		 * them now.  A mismatch on this host every rank here found
		 * itself (failing the segment would race their finding it);
		 * one among the leaders failed the segment already.
		 */
		if (st != TPU_E_COLL_MISMATCH)
			tpu__shm_coll_fail(ws->seg, st);
		tpu_rendezvous_abort(w->rdv, -ECONNABORTED);
	}
	tpu__log_debug("world: rank %d: %s of %llu elements in two levels (%d hosts%s): %s",
		       w->info.rank, c->type == TPU_COLL_REDUCTION ? "all-reduce" :
		       c->type == TPU_COLL_BROADCAST ? "broadcast" :
		       c->type == TPU_COLL_GATHER ? "all-gather" : "reduce-scatter",
		       (unsigned long long)c->count, ws->nhosts, h.leader ? ", leader" : "",
		       st ? tpu_status_name(st) : "done");
	return st;
}
