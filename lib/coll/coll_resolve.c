// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Parameter resolution (TF's CompleteParamsAsync), over the rendezvous
 * like the data: on every run each member sends rank 0 a record of what
 * it knows; rank 0 compares each with its own (and, for an instance run
 * before, with the record of its first run), completes what is left to
 * choose (implementation, subdivisions, source rank) and sends every
 * member the verdict.  A disagreement is a verdict too, so every member
 * fails with the same status and reason instead of waiting for data that
 * will not come, and the rendezvous stays usable.  A member that alone
 * changed an instance's parameters used to be refused alone, from its
 * cache, leaving the others waiting out their timeouts: hence a record on
 * every run, which costs one round trip to rank 0 before the data moves.
 * Resolved instances are cached per tpu_coll (the newest
 * COLL_CACHE_MAX), for tpu_coll_resolved() and the first-run rule.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"

#define COLL_CACHE_MAX	4096

static const char *type_name(int32_t t)
{
	static const char *const names[] = { "reduction", "broadcast", "gather",
					     "reduce-scatter", "all-to-all", "permute" };

	return t >= 0 && t <= TPU_COLL_PERMUTE ? names[t] : "?";
}

/* Why @b (rank @r) disagrees with @a (@whose: "rank 0", "its first run"), or false. */
static bool differs(const struct tpu__coll_record *a, const struct tpu__coll_record *b, int r,
		    const char *whose, char *why, size_t size)
{
#define FIELD(f, what) \
	if (a->f != b->f) { \
		snprintf(why, size, "%s: %s has %lld, rank %d has %lld", what, whose, \
			 (long long)a->f, r, (long long)b->f); \
		return true; \
	}
	FIELD(version, "library version")
	FIELD(group_size, "group size")
	FIELD(devices_hash, "group devices (hash)")
	FIELD(num_tasks, "number of tasks")
	FIELD(type, "collective type")
	FIELD(dtype, "data type")
	FIELD(count, "element count")
	FIELD(ndims, "shape rank")
	for (int i = 0; i < a->ndims; i++)
		FIELD(dims[i], "shape")
	FIELD(op, "merge op")
	FIELD(final_op, "final op")
	FIELD(num_subdivs, "subdivisions")
	FIELD(has_offsets, "subdivision offsets given")
	for (int i = 0; i < TPU_COLL_MAX_SUBDIVS; i++)
		FIELD(subdiv_offsets[i], "subdivision offsets")
	for (int i = 0; i < a->group_size && i < TPU_COLL_MAX_MEMBERS; i++)
		FIELD(permutation[i], "permutation")
#undef FIELD
	if (strcmp(a->impl, b->impl)) {
		snprintf(why, size, "implementation: %s has \"%.31s\", rank %d has \"%.31s\"",
			 whose, a->impl, r, b->impl);
		return true;
	}
	if (strcmp(a->device_type, b->device_type)) {
		snprintf(why, size, "device type: %s has %.31s, rank %d has %.31s",
			 whose, a->device_type, r, b->device_type);
		return true;
	}
	return false;
}

/*
 * Rank 0: check every record (against @first too, the instance's first
 * run here, if any) and complete the parameters.
 */
static void judge(const struct tpu__coll_run *run, const struct tpu__coll_record *recs,
		  const struct tpu__coll_record *first, struct tpu__coll_verdict *v)
{
	const struct tpu__coll_record *me = &recs[0];
	struct tpu_coll_resolved *res = &v->res;
	int sources = 0;
	const char *impl;

	memset(v, 0, sizeof(*v));
	res->source_rank = -1;
	res->num_tasks = me->num_tasks;
	for (int r = 0; r < run->n; r++) {
		if ((r && differs(me, &recs[r], r, "rank 0", v->reason, sizeof(v->reason))) ||
		    (first && differs(first, &recs[r], r, "the instance's first run", v->reason,
				      sizeof(v->reason)))) {
			v->status = TPU_E_COLL_MISMATCH;
			return;
		}
		if (recs[r].is_source) {
			sources++;
			res->source_rank = r;
		}
	}
	if (me->type == TPU_COLL_BROADCAST && sources != 1) {
		snprintf(v->reason, sizeof(v->reason), "broadcast with %d sources, want 1",
			 sources);
		v->status = TPU_E_COLL_MISMATCH;
		return;
	}
	if (me->type != TPU_COLL_BROADCAST)
		res->source_rank = -1;
	impl = me->impl[0] ? me->impl :
	       tpu__coll_impl_choose(me->type, me->count * run->esize, run->n, me->num_tasks);
	if (!tpu__coll_impl_find(me->type, impl)) {
		snprintf(v->reason, sizeof(v->reason), "no %s implementation named \"%s\"",
			 type_name(me->type), impl);
		v->status = -ENOENT;
		return;
	}
	snprintf(res->impl, sizeof(res->impl), "%s", impl);
	res->num_subdivs = 1;
	if (me->type == TPU_COLL_REDUCTION && !strcmp(impl, "ring")) {
		/* Several rings pay off once a ring's chunks are large; members alike choose so. */
		res->num_subdivs = me->num_subdivs ? me->num_subdivs :
				   me->count * run->esize >= (4u << 20) && run->n > 2 ? 2 : 1;
		/* Given offsets, or ring starts spread evenly around the group. */
		for (int d = 0; d < res->num_subdivs; d++)
			res->subdiv_offsets[d] = me->has_offsets ? me->subdiv_offsets[d] :
						 d * run->n / res->num_subdivs;
	}
}

static tpu_status exchange(struct tpu__coll_run *run, const struct tpu__coll_record *mine,
			   const struct tpu__coll_record *first, struct tpu__coll_verdict *v)
{
	struct tpu__coll_record *recs;
	struct tpu__coll_op **ops;
	tpu_status err = 0, e;

	if (run->rank) {
		struct tpu__coll_op *op;

		err = tpu__coll_post_send(run, 0, "res", 0, (uint64_t)run->rank, mine,
					  sizeof(*mine), -1);
		if (!err)
			err = tpu__coll_post_recv(run, 0, "ver", 0, (uint64_t)run->rank, v,
						  sizeof(*v), &op);
		if (!err)
			err = tpu__coll_wait_recv(run, op, sizeof(*v));
		e = tpu__coll_wait_sends(run, 0, -1);
		return err ? err : e;
	}
	recs = calloc((size_t)run->n, sizeof(*recs));
	ops = calloc((size_t)run->n, sizeof(*ops));
	if (!recs || !ops) {
		free(recs);
		free(ops);
		return -ENOMEM;
	}
	recs[0] = *mine;
	for (int r = 1; r < run->n && !err; r++)
		err = tpu__coll_post_recv(run, r, "res", 0, (uint64_t)r, &recs[r], sizeof(recs[r]),
					  &ops[r]);
	for (int r = 1; r < run->n && ops[r]; r++) {
		e = tpu__coll_wait_recv(run, ops[r], sizeof(recs[r]));
		err = err ? err : e;
	}
	if (!err) {
		judge(run, recs, first, v);
		for (int r = 1; r < run->n && !err; r++)
			err = tpu__coll_post_send(run, r, "ver", 0, (uint64_t)r, v, sizeof(*v), -1);
		e = tpu__coll_wait_sends(run, 0, -1);
		err = err ? err : e;
	}
	free(recs);
	free(ops);
	return err;
}

/* Members of one worker may share a tpu_coll: each rank has its own entry (-1: any). */
static struct tpu__coll_cached *find(struct tpu_coll *coll, int32_t gk, int32_t ik, int rank)
{
	for (struct tpu__coll_cached *c = coll->cache; c; c = c->next)
		if (c->rec.group_key == gk && c->rec.instance_key == ik &&
		    (rank < 0 || c->rec.rank == rank))
			return c;
	return NULL;
}

static void forget(struct tpu_coll *coll, struct tpu__coll_cached *gone)
{
	for (struct tpu__coll_cached **p = &coll->cache; *p; p = &(*p)->next)
		if (*p == gone) {
			*p = gone->next;
			free(gone);
			return;
		}
}

/* Keep the newest COLL_CACHE_MAX entries (new ones go in front). */
static void trim(struct tpu_coll *coll)
{
	struct tpu__coll_cached *c = coll->cache, *old;
	size_t n = 0;

	for (; c && ++n < COLL_CACHE_MAX; c = c->next)
		;
	if (!c)
		return;
	while ((old = c->next)) {
		if (old->resolving) {
			c = old;
			continue;
		}
		c->next = old->next;
		free(old);
	}
}

/* Under coll->lock: a new entry for @rec, in front; NULL without memory. */
static struct tpu__coll_cached *cache_add(struct tpu_coll *coll,
					  const struct tpu__coll_record *rec)
{
	struct tpu__coll_cached *c = calloc(1, sizeof(*c));

	if (c) {
		c->rec = *rec;
		c->next = coll->cache;
		coll->cache = c;
		trim(coll);
	}
	return c;
}

tpu_status tpu__coll_resolve(struct tpu__coll_run *run)
{
	struct tpu_coll *coll = run->coll;
	struct tpu__coll_record mine, first;
	struct tpu__coll_verdict v;
	struct tpu__coll_cached *c;
	bool had;
	tpu_status err;

	tpu__coll_record_of(run, &mine);
	pthread_mutex_lock(&coll->lock);
	while ((c = find(coll, mine.group_key, mine.instance_key, mine.rank)) && c->resolving)
		pthread_cond_wait(&coll->cond, &coll->lock);
	had = c != NULL;
	if (c) {
		first = c->rec;
	} else {
		c = cache_add(coll, &mine);
		if (!c) {
			pthread_mutex_unlock(&coll->lock);
			return -ENOMEM;
		}
	}
	c->resolving = true;
	pthread_mutex_unlock(&coll->lock);

	/* Every run asks rank 0, even a cached one: its peers may have changed. */
	err = exchange(run, &mine, had && run->rank == 0 ? &first : NULL, &v);
	if (!err && v.status) {
		err = v.status;
		snprintf(run->reason, sizeof(run->reason), "instance %d of group %d: %s",
			 (int)mine.instance_key, (int)mine.group_key, v.reason);
		tpu__log_debug("collective: %s", run->reason);
	}
	pthread_mutex_lock(&coll->lock);
	c->resolving = false;
	if (err && !had) {
		forget(coll, c);
	} else if (!err) {
		c->res = v.res;
		c->res.default_rank = run->rank;
		run->res = c->res;
	}
	pthread_cond_broadcast(&coll->cond);
	pthread_mutex_unlock(&coll->lock);
	return err;
}

void tpu__coll_note_lanes(struct tpu__coll_run *run, int source_rank)
{
	struct tpu_coll *coll = run->coll;
	struct tpu__coll_record mine;
	struct tpu__coll_cached *c;

	tpu__coll_record_of(run, &mine);
	pthread_mutex_lock(&coll->lock);
	c = find(coll, mine.group_key, mine.instance_key, mine.rank);
	if (!c)
		c = cache_add(coll, &mine);
	/* A run on lanes after one through the rendezvous: the newest answer wins. */
	if (c && !c->resolving) {
		memset(&c->res, 0, sizeof(c->res));
		snprintf(c->res.impl, sizeof(c->res.impl), "lanes");
		c->res.num_subdivs = 1;
		c->res.source_rank = run->inst.type == TPU_COLL_BROADCAST ? source_rank : -1;
		c->res.default_rank = run->rank;
		c->res.num_tasks = run->num_tasks;
	}
	pthread_mutex_unlock(&coll->lock);
}

void tpu__coll_forget_all(struct tpu_coll *coll)
{
	while (coll->cache)
		forget(coll, coll->cache);
}

TPU_API tpu_status tpu_coll_resolved(struct tpu_coll *coll, int32_t group_key,
				     int32_t instance_key, struct tpu_coll_resolved *out)
{
	struct tpu__coll_cached *c;
	tpu_status err = tpu__coll_check(coll);

	if (err)
		return err;
	if (!out)
		return -EINVAL;
	err = -ENOENT;
	pthread_mutex_lock(&coll->lock);
	c = find(coll, group_key, instance_key, -1);
	if (c && !c->resolving) {
		*out = c->res;
		err = 0;
	}
	pthread_mutex_unlock(&coll->lock);
	return err;
}
