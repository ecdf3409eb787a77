// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * A member's view of a group and an instance, checked and ranked before
 * anything is exchanged: what one member can see wrong alone (a bad name,
 * itself not in the group) fails here, on this member only; what needs
 * the others is left to resolution.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coll.h"

uint64_t tpu__coll_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* TF's default rank order: device names sorted, numbers as numbers (task:2 < task:10). */
static int by_name(const void *a, const void *b)
{
	return strverscmp(*(char *const *)a, *(char *const *)b);
}

static int count_tasks(char **devs, int n)
{
	int tasks = 0;

	for (int i = 0; i < n; i++) {
		bool seen = false;

		for (int j = 0; j < i && !seen; j++)
			seen = tpu__coll_task_len(devs[j]) == tpu__coll_task_len(devs[i]) &&
			       !memcmp(devs[j], devs[i], tpu__coll_task_len(devs[i]));
		tasks += !seen;
	}
	return tasks;
}

static tpu_status check_instance(const struct tpu_coll_instance *in)
{
	uint64_t product = 1;

	if ((unsigned int)in->type > TPU_COLL_PERMUTE)
		return -EINVAL;
	if (in->type == TPU_COLL_PERMUTE && !in->permutation)
		return -EINVAL;
	if (!tpu__dtype_valid(in->dtype) || in->count > SIZE_MAX / 8 / TPU_COLL_MAX_MEMBERS)
		return -EINVAL;
	if ((in->type == TPU_COLL_REDUCTION || in->type == TPU_COLL_REDUCE_SCATTER) &&
	    ((unsigned int)in->op > TPU_OP_MAX || (unsigned int)in->final_op > TPU_FINAL_DIV))
		return -EINVAL;
	if (in->ndims < 0 || in->ndims > TPU_COLL_MAX_DIMS || (in->ndims && !in->dims))
		return -EINVAL;
	for (int i = 0; i < in->ndims; i++) {
		if (in->dims[i] < 0)
			return -EINVAL;
		product *= (uint64_t)in->dims[i];
	}
	if (in->ndims && product != in->count)
		return -EINVAL;
	if (in->num_subdivs < 0 || in->num_subdivs > TPU_COLL_MAX_SUBDIVS ||
	    (in->subdiv_offsets && !in->num_subdivs))
		return -EINVAL;
	if (in->impl && strlen(in->impl) >= 32)
		return -EINVAL;
	if (!tpu__reserved_zero(in->reserved))
		return -EINVAL;
	return 0;
}

tpu_status tpu__coll_run_init(struct tpu__coll_run *run, const struct tpu_coll_group *group,
			      const struct tpu_coll_instance *instance,
			      const struct tpu_coll_member *member)
{
	int n;
	tpu_status err;

	if (!group || !instance || !member || !member->device || !group->devices)
		return -EINVAL;
	n = group->group_size;
	if (n < 1 || n > TPU_COLL_MAX_MEMBERS || group->num_tasks < 0 ||
	    !group->device_type || strlen(group->device_type) >= sizeof(run->device_type))
		return -EINVAL;
	err = check_instance(instance);
	if (err)
		return err;
	for (int i = 0; i < instance->num_subdivs && instance->subdiv_offsets; i++)
		if (instance->subdiv_offsets[i] < 0 || instance->subdiv_offsets[i] >= n)
			return -EINVAL;
	if (instance->type == TPU_COLL_PERMUTE) {
		/* Every rank exactly once: each member sends one tensor and receives one. */
		bool named[TPU_COLL_MAX_MEMBERS] = { false };

		for (int i = 0; i < n; i++) {
			int32_t to = instance->permutation[i];

			if (to < 0 || to >= n || named[to])
				return -EINVAL;
			named[to] = true;
			run->perm[i] = to;
		}
	}
	run->devices = calloc((size_t)n, sizeof(*run->devices));
	if (!run->devices)
		return -ENOMEM;
	run->n = n;
	run->rank = -1;
	run->group_key = group->group_key;
	for (int i = 0; i < n; i++) {
		const char *d = group->devices[i];
		struct tpu_device_name dn;

		if (!d || strlen(d) >= TPU__COLL_DEVICE_MAX)
			return -EINVAL;
		if (tpu_device_name_parse(tpu_str(d), &dn, NULL) ||
		    dn.type.len != strlen(group->device_type) ||
		    memcmp(dn.type.ptr, group->device_type, dn.type.len))
			return -EINVAL;
		run->devices[i] = strdup(d);
		if (!run->devices[i])
			return -ENOMEM;
	}
	qsort(run->devices, (size_t)n, sizeof(*run->devices), by_name);
	for (int i = 0; i < n; i++) {
		if (i && !strcmp(run->devices[i - 1], run->devices[i]))
			return -EINVAL;		/* a device twice */
		if (!strcmp(run->devices[i], member->device))
			run->rank = i;
	}
	if (run->rank < 0)
		return -EINVAL;
	run->num_tasks = count_tasks(run->devices, n);
	if (group->num_tasks && group->num_tasks != run->num_tasks)
		return -EINVAL;
	strcpy(run->device_type, group->device_type);
	run->inst = *instance;
	if (instance->ndims)
		memcpy(run->dims, instance->dims, sizeof(int64_t) * (size_t)instance->ndims);
	run->inst.dims = run->dims;
	if (instance->subdiv_offsets)
		memcpy(run->offsets, instance->subdiv_offsets,
		       sizeof(int32_t) * (size_t)instance->num_subdivs);
	run->inst.subdiv_offsets = instance->subdiv_offsets ? run->offsets : NULL;
	run->inst.permutation = instance->type == TPU_COLL_PERMUTE ? run->perm : NULL;
	if (instance->impl)
		strcpy(run->impl, instance->impl);
	run->inst.impl = run->impl;
	run->is_source = member->is_source;
	run->esize = tpu_dtype_size(instance->dtype);
	run->inst.timeout_ns = instance->timeout_ns ? instance->timeout_ns : 60000000000ull;
	return 0;
}

void tpu__coll_run_fini(struct tpu__coll_run *run)
{
	for (int i = 0; run->devices && i < run->n; i++)
		free(run->devices[i]);
	free(run->devices);
	run->devices = NULL;
}

/* FNV-1a over the ranked names: members compare their device lists by this. */
static uint64_t hash_devices(char **devs, int n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (int i = 0; i < n; i++)
		for (const char *p = devs[i]; ; p++) {
			h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
			if (!*p)
				break;
		}
	return h;
}

void tpu__coll_record_of(const struct tpu__coll_run *run, struct tpu__coll_record *rec)
{
	const struct tpu_coll_instance *in = &run->inst;

	memset(rec, 0, sizeof(*rec));
	rec->version = TPU__COLL_VERSION;
	rec->group_key = run->group_key;
	rec->group_size = run->n;
	rec->num_tasks = run->num_tasks;
	rec->instance_key = in->instance_key;
	rec->type = (int32_t)in->type;
	rec->dtype = (int32_t)in->dtype;
	if (in->type == TPU_COLL_REDUCTION || in->type == TPU_COLL_REDUCE_SCATTER) {
		rec->op = (int32_t)in->op;
		rec->final_op = (int32_t)in->final_op;
	}
	if (in->type == TPU_COLL_REDUCTION) {
		rec->num_subdivs = in->num_subdivs;
		rec->has_offsets = in->subdiv_offsets != NULL;
		if (in->subdiv_offsets)
			memcpy(rec->subdiv_offsets, in->subdiv_offsets,
			       sizeof(int32_t) * (size_t)in->num_subdivs);
	}
	if (in->type == TPU_COLL_PERMUTE)
		memcpy(rec->permutation, run->perm, sizeof(int32_t) * (size_t)run->n);
	rec->ndims = in->ndims;
	memcpy(rec->dims, run->dims, sizeof(rec->dims));
	rec->is_source = run->is_source;
	rec->rank = run->rank;
	rec->count = in->count;
	rec->devices_hash = hash_devices(run->devices, run->n);
	strcpy(rec->impl, run->impl);
	strcpy(rec->device_type, run->device_type);
}

TPU_API size_t tpu_coll_chunk(uint64_t count, int n, int rank, size_t *len)
{
	if (n < 1 || rank < 0 || rank >= n) {
		if (len)
			*len = 0;
		return 0;
	}
	if (len)
		*len = tpu__coll_chunk_len((size_t)count, n, rank);
	return tpu__coll_chunk_start((size_t)count, n, rank);
}
