// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Whether a world's collectives take the shared-memory path
 * (lib/coll/coll_shm.c), one segment for the world or one per host with
 * the leaders over the network (world_hier.c), decided once, at the
 * first collective, the same way on every rank:
 *
 * - TPU_COLL_PATH: "rdv" or "flat" rules both out, "shm" makes one
 *   segment a must and "hier" two levels (a collective fails with
 *   -EOPNOTSUPP where they cannot be had), unset or "auto" takes either
 *   where it can be had; anything else is -EINVAL.
 * - This rank's host is this rank and the ranks it reaches over shm (same
 *   boot id and network namespace, choose() in world.c; the pipe's
 *   handshake checks them again).  With "shm", a rank that is not there
 *   rules the path out at once: every rank tells the same, no exchange.
 * - Each rank takes the pid of every peer of its host from the world's
 *   pipe to it, as the kernel proved it (tpu_pipe_peer_pid():
 *   SO_PEERCRED), and votes, naming its host's leader (lowest rank) and
 *   size.  The leader makes the host's segment (a sealed memfd) and says
 *   its descriptor number; the others copy the descriptor out of the
 *   leader's process (pidfd_getfd() on a pidfd of the proven pid: the
 *   kernel checks the right to, as for process_vm_readv), check it is
 *   sealed and sized as expected, and map it.  Every rank reads every
 *   vote: the claims must form one partition that matches what this rank
 *   reaches over shm (partition()), else it says no in the second round,
 *   which confirms every rank mapped its segment; only then the path is
 *   on.  Where any rank says no, all take the rendezvous.  A segment goes
 *   with its last mapping (the last member to leave or die).
 * - TPU_COLL_COPY: how the segment copies large tensors.  Unless it is
 *   "cma", each rank opens /dev/tensorpipe (it must have TP_FEAT_GRANT)
 *   and the leader also creates a module domain, whose descriptor it
 *   names in its vote; the others take it out of the leader's process as
 *   they take the segment, attach their endpoints and write the endpoint
 *   ids in their lines (coll_shm_kmod.c).  Each says in its second-round
 *   word whether it joined; every rank reads every word, so all copy
 *   through the module's grants or all with process_vm_readv.  "kmod"
 *   makes the module a must (a collective fails with -EOPNOTSUPP where it
 *   cannot be had), unset or "auto" takes it where it can be had, and
 *   anything else is -EINVAL.
 *
 * A set-up cut short by the call's timeout resumes at the next call.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "world.h"
#include "world_shm.h"
#include "coll/coll.h"

void tpu__world_shm_free(struct world_shm *ws)
{
	if (!ws)
		return;
	tpu__shm_coll_detach(ws->seg);
	if (ws->fd >= 0)
		close(ws->fd);
	if (ws->kfd >= 0)
		close(ws->kfd);
	if (ws->dom >= 0)
		close(ws->dom);
	free(ws->pids);
	free(ws->locals);
	free(ws->host);
	free(ws->local);
	free(ws->by_host);
	free(ws->host_start);
	free(ws);
}

static void off(struct world_shm *ws, const char *fmt, int a, const char *b)
{
	ws->state = WS_OFF;
	snprintf(ws->why, sizeof(ws->why), fmt, a, b);
}

/* The pid the kernel proved for the pipe to @r; 0 if none. */
static tpu_status proven_pid(struct tpu_world *w, int r, uint64_t deadline, pid_t *pid)
{
	struct tpu_pipe *p;
	int v = 0;
	tpu_status st = tpu_world_pipe(w, r, &p);

	/* A pipe is handed out before its two ends agreed on a transport. */
	while (!st && (st = tpu_pipe_peer_pid(p, &v)) == -EAGAIN) {
		struct timespec ms = { 0, 1000000 };

		if (tpu__store_now_ms() >= deadline)
			return -ETIMEDOUT;
		if (atomic_load(&w->cancel))
			return TPU_E_CLOSED;
		nanosleep(&ms, NULL);
		st = 0;
	}
	*pid = v;
	return st;
}

static tpu_status put(struct tpu_world *w, const char *what, const char *val, uint64_t deadline)
{
	char key[64];
	tpu_status st;

	snprintf(key, sizeof(key), "tpu/coll-shm/%s/%d", what, w->info.rank);
	pthread_mutex_lock(&w->store_lock);
	tpu__world_store_bound(w, deadline);
	st = tpu__world_store_set(w, key, val, strlen(val));
	pthread_mutex_unlock(&w->store_lock);
	return st;
}

/* Rank @r's word under @what: "1 ..." or "0"; *@yes, and the rest in @rest. */
static tpu_status get(struct tpu_world *w, const char *what, int r, bool *yes, char *rest,
		      size_t size, uint64_t deadline)
{
	char key[64], val[48];
	size_t len = 0;
	tpu_status st;

	snprintf(key, sizeof(key), "tpu/coll-shm/%s/%d", what, r);
	pthread_mutex_lock(&w->store_lock);
	tpu__world_store_bound(w, deadline);
	st = tpu__world_wait_key(w, key, val, sizeof(val) - 1, &len, deadline);
	pthread_mutex_unlock(&w->store_lock);
	if (st)
		return st == -EMSGSIZE ? -EPROTO : st;
	val[len] = 0;
	*yes = val[0] == '1';
	if (rest)
		snprintf(rest, size, "%s", len > 2 ? val + 2 : "");
	return 0;
}

static int mode_of(const char *mode)
{
	if (!mode || !*mode || !strcmp(mode, "auto"))
		return WM_AUTO;
	if (!strcmp(mode, "shm"))
		return WM_SHM;
	if (!strcmp(mode, "hier"))
		return WM_HIER;
	if (!strcmp(mode, "rdv") || !strcmp(mode, "flat"))
		return WM_FLAT;
	return -1;
}

static int copy_of(const char *copy)
{
	if (!copy || !*copy || !strcmp(copy, "auto"))
		return WC_AUTO;
	if (!strcmp(copy, "kmod"))
		return WC_KMOD;
	if (!strcmp(copy, "cma"))
		return WC_CMA;
	return -1;
}

/*
 * This rank's endpoint of the module (and, on the host's leader, the
 * host's domain), unless TPU_COLL_COPY=cma; a rank without them says so
 * in its vote of the second round, and the segment stays on cma.
 */
static void kmod_open(struct world_shm *ws)
{
	tpu_status st = 0;

	if (ws->copy == WC_CMA || ws->nloc < 2) {
		snprintf(ws->kwhy, sizeof(ws->kwhy), "%s", ws->copy == WC_CMA ?
			 "TPU_COLL_COPY=cma" : "no other rank on this host");
		return;
	}
	if (ws->kfd < 0)
		st = tpu__shm_kmod_open(&ws->kfd);
	if (!st && ws->loc == 0 && ws->dom < 0)
		st = tpu__shm_kmod_domain(ws->kfd, &ws->dom);
	if (st)
		snprintf(ws->kwhy, sizeof(ws->kwhy), "no /dev/tensorpipe with grants here (%s)",
			 tpu_strerror(st));
}

/* This host's ranks: this one and those its pipes reach over shm (proven when they open). */
static void local_ranks(struct tpu_world *w, struct world_shm *ws)
{
	ws->nloc = 0;
	for (int r = 0; r < w->info.size; r++) {
		if (r == w->info.rank)
			ws->loc = ws->nloc;
		if (r == w->info.rank || !strncmp(w->pipe_url[r], "shm://", 6))
			ws->locals[ws->nloc++] = r;
	}
}

/*
 * The vote: "1 FD LEADER NLOC DOM" (FD the segment's descriptor on the
 * leader, the lowest rank of this host, which makes it; DOM one more than
 * its module domain's descriptor, 0 for none) or "0".
 */
static tpu_status vote(struct tpu_world *w, struct world_shm *ws, uint64_t deadline)
{
	int n = w->info.size, me = w->info.rank;
	char val[48] = "0";
	const char *mode = getenv("TPU_COLL_PATH"), *copy = getenv("TPU_COLL_COPY");
	tpu_status st;

	ws->copy = copy_of(copy);
	if (ws->copy < 0) {
		ws->state = WS_BAD;
		snprintf(ws->why, sizeof(ws->why), "TPU_COLL_COPY=%.40s: not kmod, cma or auto",
			 copy);
		return -EINVAL;
	}
	ws->mode = mode_of(mode);
	if (ws->mode < 0) {
		ws->state = WS_BAD;
		snprintf(ws->why, sizeof(ws->why),
			 "TPU_COLL_PATH=%.40s: not shm, hier, rdv, flat or auto", mode);
		return -EINVAL;
	}
	if (n < 2) {
		off(ws, "%d ranks: the shared segment serves 2 to 64", n, "");
		return 0;
	}
	local_ranks(w, ws);
	/* One segment for the world, or nothing: no exchange needed to tell. */
	if (ws->mode == WM_SHM && ws->nloc != n) {
		for (int r = 0; r < n; r++)
			if (r != me && strncmp(w->pipe_url[r], "shm://", 6)) {
				off(ws, "rank %d is not reached over shm (%s)", r, w->pipe_url[r]);
				return 0;
			}
	}
	ws->vote = ws->mode != WM_FLAT;
	if (!ws->vote)
		snprintf(ws->why, sizeof(ws->why), "TPU_COLL_PATH=%s", mode);
	if (ws->vote && ws->nloc > TPU__SHM_MAX_MEMBERS) {
		ws->vote = false;
		snprintf(ws->why, sizeof(ws->why), "%d ranks on this host: a segment serves 64",
			 ws->nloc);
	}
	for (int k = 0; k < ws->nloc && ws->vote; k++) {
		int r = ws->locals[k];

		if (r == me)
			continue;
		st = proven_pid(w, r, deadline, &ws->pids[r]);
		if (st)
			return st;
		if (ws->pids[r] <= 0) {
			ws->vote = false;
			snprintf(ws->why, sizeof(ws->why), "the pipe to rank %d proves no pid", r);
		}
	}
	/* A set-up cut short by a timeout comes here again: one segment. */
	if (ws->vote && ws->loc == 0 && ws->nloc > 1 && ws->fd < 0) {
		st = tpu__shm_coll_create(ws->nloc, TPU__SHM_SLOT, &ws->fd);
		if (st) {
			ws->vote = false;
			snprintf(ws->why, sizeof(ws->why), "no segment: %s", tpu_strerror(st));
		}
	}
	if (ws->vote)
		kmod_open(ws);
	if (ws->vote)
		snprintf(val, sizeof(val), "1 %d %d %d %d", ws->loc == 0 && ws->fd >= 0 ? ws->fd : 0,
			 ws->locals[0], ws->nloc, ws->loc == 0 && ws->dom >= 0 ? ws->dom + 1 : 0);
	st = put(w, "vote", val, deadline);
	if (!st)
		ws->state = WS_VOTED;
	return st;
}

/* Rank 0's descriptor @num, out of its process (the pid the kernel proved). */
static tpu_status fetch_fd(pid_t pid, const char *num, int *fd)
{
	char *end;
	long v = strtol(num, &end, 10);

	if (end == num || *end || v < 0 || v > 1 << 24)
		return -EPROTO;
	return tpu__shm_take_fd(pid, (int)v, fd);
}

/* "FD LEADER NLOC [DOM]" of a vote (no DOM: no domain); false if it is not one. */
static bool parse_vote(const char *rest, int n, long v[4])
{
	const char *p = rest;

	v[3] = 0;
	for (int i = 0; i < 4 && (i < 3 || *p); i++) {
		char *end;

		v[i] = strtol(p, &end, 10);
		if (end == p || (*end && *end != ' ') || v[i] < 0)
			return false;
		p = end;
	}
	return !*p && v[0] <= 1 << 24 && v[1] < n && v[2] >= 1 && v[2] <= n && v[3] <= 1 << 24;
}

/*
 * The partition the votes describe (@leader: each rank's claim), checked
 * against this host's own: the ranks claiming this host's leader must be
 * exactly the ones this rank reaches over shm, with the count it counted,
 * and every leader must claim itself.  Every rank checks its own host, so
 * when all say yes the hosts are one partition.
 */
static bool partition(struct tpu_world *w, struct world_shm *ws, const long *leader,
		      const long *nloc)
{
	int n = w->info.size, k = 0, h = 0;

	for (int r = 0; r < n; r++) {
		bool mine = k < ws->nloc && ws->locals[k] == r;

		if (mine)
			k++;
		if ((leader[r] == ws->locals[0]) != mine || leader[leader[r]] != leader[r] ||
		    nloc[r] != nloc[leader[r]])
			return false;
	}
	ws->nhosts = 0;
	ws->maxloc = 0;
	for (int r = 0; r < n; r++)
		if (leader[r] == r) {
			ws->nhosts++;
			if (nloc[r] > ws->maxloc)
				ws->maxloc = (int)nloc[r];
		}
	/* Hosts in the order of their leaders; ranks in order within each. */
	for (int r = 0, at = 0; r < n; r++) {
		if (leader[r] != r)
			continue;
		ws->host_start[h] = at;
		for (int q = r, i = 0; q < n; q++)
			if (leader[q] == r) {
				ws->host[q] = h;
				ws->local[q] = i++;
				ws->by_host[at++] = q;
			}
		h++;
	}
	ws->host_start[ws->nhosts] = n;
	for (h = 0; h < ws->nhosts; h++)
		if (ws->host_start[h + 1] - ws->host_start[h] != nloc[ws->by_host[ws->host_start[h]]])
			return false;
	return true;
}

/* Which path the (consistent) partition makes: WS_ON with ws->hier, or WS_OFF. */
static void path_of(struct world_shm *ws, int n)
{
	if (ws->nhosts == 1) {
		if (ws->mode == WM_HIER)
			off(ws, "%d ranks on one host: no two levels%s", n, "");
		return;
	}
	if (ws->mode == WM_SHM)
		off(ws, "the ranks are on %d hosts%s", ws->nhosts, "");
	else if (ws->mode == WM_AUTO && ws->maxloc == 1)
		off(ws, "every rank on a host of its own (%d)%s", n, "");
	else
		ws->hier = true;
}

/*
 * This rank's endpoint into the domain the host's leader voted (@dom: its
 * descriptor + 1 in the leader's process, 0 for none), taken out of the
 * leader's process as the segment is; the endpoint's id then stands in
 * this rank's line of the segment.
 */
static void kmod_join(struct world_shm *ws, long dom)
{
	char num[24];
	int dfd = -1;
	tpu_status st = 0;

	if (ws->kjoined || ws->kfd < 0)
		return;
	if (!dom) {
		snprintf(ws->kwhy, sizeof(ws->kwhy), "rank %d (the host's leader) has no module domain",
			 ws->locals[0]);
		return;
	}
	snprintf(num, sizeof(num), "%ld", dom - 1);
	if (ws->loc)
		st = fetch_fd(ws->pids[ws->locals[0]], num, &dfd);
	if (!st) {
		st = tpu__shm_kmod_join(ws->seg, ws->kfd, ws->loc ? dfd : ws->dom);
		ws->kfd = -1;	/* the segment's now */
	}
	if (dfd >= 0)
		close(dfd);
	ws->kjoined = !st;
	if (st)
		snprintf(ws->kwhy, sizeof(ws->kwhy), "cannot join the host's module domain (%s)",
			 tpu_strerror(st));
}

static tpu_status map(struct tpu_world *w, struct world_shm *ws, uint64_t deadline)
{
	int n = w->info.size, me = w->info.rank, fd = -1;
	char rest[48] = "";
	bool all = true, yes = false, ok = true;
	long v[4], *fds = calloc((size_t)n * 4, sizeof(long));
	long *leader = fds ? fds + n : NULL, *nloc = fds ? fds + 2 * n : NULL;
	long *dom = fds ? fds + 3 * n : NULL;
	tpu_status st = fds ? 0 : -ENOMEM;

	for (int r = 0; r < n && !st; r++) {
		st = get(w, "vote", r, &yes, rest, sizeof(rest), deadline);
		if (st)
			break;
		if (yes && !parse_vote(rest, n, v)) {
			st = -EPROTO;
			break;
		}
		/* This rank's own reason stays when it voted against. */
		if (!yes && all && ws->vote)
			off(ws, "rank %d voted against it%s", r, "");
		all = all && yes;
		if (yes) {
			fds[r] = v[0];
			leader[r] = v[1];
			nloc[r] = v[2];
			dom[r] = v[3];
		}
	}
	if (st || !all) {
		if (!st) {
			ws->state = WS_OFF;
			if (ws->fd >= 0)
				close(ws->fd);
			ws->fd = -1;
		}
		free(fds);
		return st;
	}
	ok = partition(w, ws, leader, nloc);
	if (!ok) {
		tpu__log_debug("world: rank %d: the ranks disagree on who shares a host", me);
		snprintf(ws->why, sizeof(ws->why), "the ranks disagree on who shares a host");
	}
	if (ok)
		path_of(ws, n);
	if (ws->state == WS_OFF) {
		/* Every rank read the same votes: all come to the same. */
		if (ws->fd >= 0)
			close(ws->fd);
		ws->fd = -1;
		free(fds);
		return 0;
	}
	st = 0;
	if (ok && ws->nloc > 1 && !ws->seg) {
		pid_t *lp = calloc((size_t)ws->nloc, sizeof(*lp));
		char num[24];

		snprintf(num, sizeof(num), "%ld", fds[ws->locals[0]]);
		st = lp ? 0 : -ENOMEM;
		for (int k = 0; k < ws->nloc && lp; k++)
			lp[k] = ws->pids[ws->locals[k]];
		if (!st && ws->loc)
			st = fetch_fd(ws->pids[ws->locals[0]], num, &fd);
		if (!st)
			st = tpu__shm_coll_attach(ws->loc ? fd : ws->fd, ws->nloc, ws->loc,
						  TPU__SHM_SLOT, lp, &ws->seg);
		free(lp);
	}
	if (!st && ok && ws->seg)
		kmod_join(ws, dom[ws->locals[0]]);
	free(fds);
	if (fd >= 0)
		close(fd);
	if (st)
		tpu__log_debug("world: rank %d cannot map its host's collective segment: %s", me,
			       tpu_strerror(st));
	if (ok)
		snprintf(ws->why, sizeof(ws->why), "rank %d could not map the segment", me);
	/* "1 K": K whether this rank takes the module path (a rank alone: unless it refuses it). */
	st = put(w, "ok", st || !ok ? "0" : ws->kjoined || (!ws->seg && ws->copy != WC_CMA) ?
		 "1 1" : "1 0", deadline);
	if (!st)
		ws->state = WS_MAPPED;
	return st;
}

static tpu_status confirm(struct tpu_world *w, struct world_shm *ws, uint64_t deadline)
{
	bool yes = false, all = true, kall = true;
	char rest[8];
	tpu_status st;

	for (int r = 0; r < w->info.size && all; r++) {
		st = get(w, "ok", r, &yes, rest, sizeof(rest), deadline);
		if (st)
			return st;
		if (!yes) {
			all = false;
			off(ws, "rank %d could not map the segment%s", r, "");
		}
		/* Every rank reads the same words: all take the module path or none does. */
		if (yes && kall && strcmp(rest, "1")) {
			kall = false;
			if (ws->kjoined || !ws->kwhy[0])
				snprintf(ws->kwhy, sizeof(ws->kwhy), "rank %d cannot use the module",
					 r);
		}
	}
	if (ws->fd >= 0) {
		close(ws->fd);
		ws->fd = -1;
	}
	if (ws->dom >= 0) {
		close(ws->dom);
		ws->dom = -1;
	}
	if (ws->kfd >= 0) {
		close(ws->kfd);
		ws->kfd = -1;
	}
	if (all) {
		ws->kmod = kall;
		tpu__shm_kmod_use(ws->seg, kall);
		tpu__log_debug("world: rank %d: the segment copies large tensors %s%s%s",
			       w->info.rank, kall ? "through the module's grants" :
			       "with process_vm_readv", kall ? "" : ": ", kall ? "" : ws->kwhy);
		ws->state = WS_ON;
		if (ws->hier)
			tpu__shm_coll_yield(ws->seg);
	} else {
		ws->hier = false;
		tpu__shm_coll_detach(ws->seg);
		ws->seg = NULL;
	}
	return 0;
}

static tpu_status decide(struct tpu_world *w, struct world_shm *ws, uint64_t deadline)
{
	tpu_status st = 0;

	if (ws->state == WS_NEW)
		st = vote(w, ws, deadline);
	if (!st && ws->state == WS_VOTED)
		st = map(w, ws, deadline);
	if (!st && ws->state == WS_MAPPED)
		st = confirm(w, ws, deadline);
	if (!st && ws->state == WS_OFF && ws->dom >= 0) {
		close(ws->dom);
		ws->dom = -1;
	}
	if (!st && ws->state == WS_OFF && ws->kfd >= 0) {
		close(ws->kfd);
		ws->kfd = -1;
	}
	if (!st && (ws->state == WS_ON || ws->state == WS_OFF))
		tpu__log_debug("world: rank %d: collectives over %s%s%s", w->info.rank,
			       ws->state == WS_OFF ? "the rendezvous" : ws->hier ?
			       "two levels (a segment per host, its leader over the network)" :
			       "the shared segment",
			       ws->state == WS_ON ? "" : ": ", ws->state == WS_ON ? "" : ws->why);
	return st;
}

tpu_status tpu__world_shm_run(struct tpu_world *w, struct world_shm **wsp,
			      const struct tpu__shm_call *c, int64_t step,
			      const char *const *devices, char *reason, size_t size, bool *ran)
{
	size_t n = (size_t)w->info.size;
	struct world_shm *ws = *wsp;
	uint64_t now = tpu__mono_ns(), left = c->deadline_ns > now ? c->deadline_ns - now : 0;
	uint64_t deadline = tpu__store_now_ms() + left / 1000000;
	tpu_status st;

	*ran = false;
	if (!ws) {
		ws = calloc(1, sizeof(*ws));
		if (!ws)
			return -ENOMEM;
		ws->fd = -1;
		ws->kfd = -1;
		ws->dom = -1;
		ws->pids = calloc(n, sizeof(*ws->pids));
		ws->locals = calloc(n, sizeof(*ws->locals));
		ws->host = calloc(n, sizeof(*ws->host));
		ws->local = calloc(n, sizeof(*ws->local));
		ws->by_host = calloc(n, sizeof(*ws->by_host));
		ws->host_start = calloc(n + 1, sizeof(*ws->host_start));
		if (!ws->pids || !ws->locals || !ws->host || !ws->local || !ws->by_host ||
		    !ws->host_start) {
			tpu__world_shm_free(ws);
			return -ENOMEM;
		}
		*wsp = ws;
	}
	if (deadline > tpu__store_now_ms() + w->timeout_ms)
		deadline = tpu__store_now_ms() + w->timeout_ms;
	if (ws->state == WS_BAD) {
		snprintf(reason, size, "%s", ws->why);
		return -EINVAL;
	}
	if (ws->state != WS_ON && ws->state != WS_OFF) {
		st = decide(w, ws, deadline);
		if (st) {
			snprintf(reason, size, "%s", ws->state == WS_BAD ? ws->why :
				 "setting up the shared-memory collectives");
			return st;
		}
	}
	if (ws->state == WS_OFF) {
		if (ws->mode != WM_SHM && ws->mode != WM_HIER)
			return 0;
		snprintf(reason, size, "TPU_COLL_PATH=%s, but %s",
			 ws->mode == WM_SHM ? "shm" : "hier", ws->why);
		return -EOPNOTSUPP;
	}
	if (ws->copy == WC_KMOD && !ws->kmod) {
		snprintf(reason, size, "TPU_COLL_COPY=kmod, but %s", ws->kwhy);
		return -EOPNOTSUPP;
	}
	*ran = true;
	if (ws->hier)
		return tpu__world_hier_run(w, ws, c, step, devices, reason, size);
	st = tpu__shm_coll_run(ws->seg, c, reason, size);
	tpu__log_debug("world: rank %d: %s of %llu elements over the shared segment (%s): %s",
		       w->info.rank, c->type == TPU_COLL_REDUCTION ? "all-reduce" :
		       c->type == TPU_COLL_BROADCAST ? "broadcast" :
		       c->type == TPU_COLL_GATHER ? "all-gather" : "reduce-scatter",
		       (unsigned long long)c->count, tpu__shm_coll_last_way(ws->seg),
		       st ? tpu_status_name(st) : "done");
	return st;
}

bool tpu__world_shm_on(const struct world_shm *ws)
{
	return ws && ws->state == WS_ON;
}

const char *tpu__world_shm_path(const struct world_shm *ws)
{
	if (!ws)
		return "";
	if (ws->state == WS_ON)
		return ws->hier ? "hier" : "shm";
	return ws->state == WS_OFF ? "rdv" : "";
}
