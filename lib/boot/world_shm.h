/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The state world_shm.c decides at a world's first collective and
 * world_hier.c runs the two-level collectives on: which ranks share each
 * host (the partition every rank voted for), this host's segment, and
 * whether the world is one segment ("shm") or one per host ("hier").
 */
#ifndef TPU_WORLD_SHM_H
#define TPU_WORLD_SHM_H

#include <stdbool.h>
#include <sys/types.h>

#include "world.h"

enum { WS_NEW, WS_VOTED, WS_MAPPED, WS_ON, WS_OFF, WS_BAD };
/* TPU_COLL_PATH */
enum { WM_AUTO, WM_SHM, WM_HIER, WM_FLAT };
/* TPU_COLL_COPY: how the segment's large tensors are copied */
enum { WC_AUTO, WC_KMOD, WC_CMA };

struct world_shm {
	int state;
	int mode;			/* WM_* */
	bool vote;
	bool hier;			/* on: one segment per host, leaders over the network */
	int fd;				/* the segment's, until every rank of the host mapped it */
	pid_t *pids;			/* per world rank, proven; 0 for this rank and other hosts */
	struct tpu__shm_coll *seg;	/* this host's ranks; NULL when this rank is alone */
	char why[200];			/* why the path is off */

	/* The module path (TPU_COLL_COPY; lib/coll/coll_shm_kmod.c). */
	int copy;			/* WC_* */
	int kfd;			/* this rank's endpoint until the segment takes it, or -1 */
	int dom;			/* the leader's domain, until every rank of the host joined */
	bool kjoined;			/* this rank's endpoint joined the host's domain */
	bool kmod;			/* every rank joined: the segment copies through the module */
	char kwhy[160];			/* why not */

	/* The partition (this host's part from the pipes, the rest from the votes). */
	int nloc, loc;			/* ranks on this host; this rank's index among them */
	int *locals;			/* this host's world ranks, ascending */
	int nhosts, maxloc;		/* hosts; most ranks on one */
	int *host;			/* per world rank: its host (hosts in order of leader) */
	int *local;			/* per world rank: its index on its host */
	int *by_host;			/* world ranks, host by host, ascending within each */
	int *host_start;		/* per host: its first entry in by_host (nhosts + 1) */
};

/* world_hier.c: one collective of a two-level world (@devices: every rank's, @step the call's). */
tpu_status tpu__world_hier_run(struct tpu_world *w, struct world_shm *ws,
			       const struct tpu__shm_call *c, int64_t step,
			       const char *const *devices, char *reason, size_t size);

#endif /* TPU_WORLD_SHM_H */
