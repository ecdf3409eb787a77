// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Implementations by name (TF's CollectiveRegistry), one table: adding an
 * algorithm is one file and one line here.  Rank 0 chooses when the
 * instance names none, and its choice travels in the verdict, so members
 * never choose differently.
 */
#include <string.h>

#include "coll.h"

static const struct tpu__coll_impl impls[] = {
	{ "ring", TPU_COLL_REDUCTION, tpu__coll_ring_allreduce },
	{ "doubling", TPU_COLL_REDUCTION, tpu__coll_doubling_allreduce },
	{ "tree", TPU_COLL_BROADCAST, tpu__coll_tree_broadcast },
	{ "ring", TPU_COLL_GATHER, tpu__coll_ring_gather },
	{ "ring", TPU_COLL_REDUCE_SCATTER, tpu__coll_ring_reduce_scatter },
	{ "pairwise", TPU_COLL_ALL_TO_ALL, tpu__coll_pairwise_all_to_all },
	{ "direct", TPU_COLL_PERMUTE, tpu__coll_direct_permute },
};

/*
 * Below this a reduction is latency-bound: log2(n) exchanges beat 2(n-1) ring
 * steps.  Two members send as many bytes either way (the whole tensor once,
 * or two halves one after the other), so doubling stays ahead for longer,
 * until the ring's pieces overlap merging with moving (tpbench coll, 2 and
 * 4 ranks on one host).
 */
#define SMALL_REDUCTION		(64u << 10)
#define SMALL_REDUCTION_PAIR	(1u << 20)

const struct tpu__coll_impl *tpu__coll_impl_find(enum tpu_coll_type type, const char *name)
{
	for (size_t i = 0; i < sizeof(impls) / sizeof(impls[0]); i++)
		if (impls[i].type == type && !strcmp(impls[i].name, name))
			return &impls[i];
	return NULL;
}

const char *tpu__coll_impl_choose(enum tpu_coll_type type, size_t bytes, int n, int num_tasks)
{
	(void)num_tasks;
	switch (type) {
	case TPU_COLL_REDUCTION:
		if (n == 2)
			return bytes <= SMALL_REDUCTION_PAIR ? "doubling" : "ring";
		return bytes <= SMALL_REDUCTION && n > 2 ? "doubling" : "ring";
	case TPU_COLL_BROADCAST:
		return "tree";
	case TPU_COLL_GATHER:
	case TPU_COLL_REDUCE_SCATTER:
		return "ring";
	case TPU_COLL_ALL_TO_ALL:
		return "pairwise";
	case TPU_COLL_PERMUTE:
		return "direct";
	}
	return "";
}

TPU_API const char *tpu_coll_impl_name(size_t i, enum tpu_coll_type *type)
{
	if (i >= sizeof(impls) / sizeof(impls[0]))
		return NULL;
	if (type)
		*type = impls[i].type;
	return impls[i].name;
}
