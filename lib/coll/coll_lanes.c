// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Whether a tpu_coll group may run on lanes (coll_shm_lanes.c), as far as
 * one member can tell alone: every other member is a device of a task
 * whose worker is another process of this host, one process per member,
 * each pid the kernel's word on this member's pipe to that worker
 * (tpu__remote_peer_pid(): SO_PEERCRED), never a peer's claim.  Members
 * that are devices of one process, a pipe that proves no pid (tcp), a
 * rendezvous that is not a remote one, or TPU_COLL_PATH=rdv (or flat)
 * leave the group on the rendezvous.  That is one member's half: the
 * group takes lanes only where every member's half said yes, which the
 * members settle together at the group's first call that lanes could
 * serve (choose(), below); tpu__coll_lanes_run() then runs its calls there.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "coll.h"
#include "remote/remote.h"

size_t tpu__coll_task_len(const char *dev)
{
	const char *d = strstr(dev, "/device:");

	return d ? (size_t)(d - dev) : strlen(dev);
}

static bool same_task(const char *a, const char *b)
{
	size_t la = tpu__coll_task_len(a);

	return la == tpu__coll_task_len(b) && !memcmp(a, b, la);
}

int tpu__coll_lanes_mode(const char *mode)
{
	/* "shm" and "hier" are the world's musts: a group takes lanes where it can. */
	if (!mode || !*mode || !strcmp(mode, "auto") || !strcmp(mode, "shm") ||
	    !strcmp(mode, "hier"))
		return TPU__LANES_AUTO;
	if (!strcmp(mode, "rdv") || !strcmp(mode, "flat"))
		return TPU__LANES_RDV;
	return -1;
}

/* The pid proven for @task, waiting out a pipe's negotiation until @deadline_ns. */
static tpu_status task_pid(struct tpu_rendezvous *rdv, const char *task, uint64_t deadline_ns,
			   pid_t *pid)
{
	struct timespec ms = { 0, 1000000 };
	tpu_status st;

	while ((st = tpu__remote_peer_pid(rdv, task, pid)) == -EAGAIN &&
	       tpu__coll_now_ns() < deadline_ns)
		nanosleep(&ms, NULL);
	return st;
}

bool tpu__coll_lanes_local(struct tpu_rendezvous *rdv, char *const *devices, int n, int rank,
			   uint64_t deadline_ns, pid_t *pids, char *why, size_t size)
{
	char task[TPU__COLL_DEVICE_MAX];
	int mode = tpu__coll_lanes_mode(getenv("TPU_COLL_PATH"));

	if (mode != TPU__LANES_AUTO) {
		snprintf(why, size, "TPU_COLL_PATH=%.40s", getenv("TPU_COLL_PATH"));
		return false;
	}
	if (n < 2 || n > TPU__SHM_MAX_MEMBERS) {
		snprintf(why, size, "%d members", n);
		return false;
	}
	pids[rank] = getpid();
	for (int r = 0; r < n; r++) {
		size_t len = tpu__coll_task_len(devices[r]);
		tpu_status st;

		if (r == rank)
			continue;
		if (same_task(devices[r], devices[rank])) {
			snprintf(why, size, "members %d and %d are devices of one task", r, rank);
			return false;
		}
		for (int q = 0; q < r; q++)
			if (same_task(devices[q], devices[r])) {
				snprintf(why, size, "members %d and %d are devices of one task", q, r);
				return false;
			}
		memcpy(task, devices[r], len);
		task[len] = 0;
		st = task_pid(rdv, task, deadline_ns, &pids[r]);
		if (st) {
			snprintf(why, size, "no pid for member %d's task: %s", r, tpu_strerror(st));
			return false;
		}
		if (pids[r] <= 0) {
			snprintf(why, size, "the pipe to member %d's task proves no pid", r);
			return false;
		}
		/* Two tasks served by one process (or by this one) share its address space. */
		for (int q = 0; q < r; q++)
			if (pids[q] == pids[r]) {
				snprintf(why, size, "members %d and %d are one process", q, r);
				return false;
			}
	}
	return true;
}

/* ---- the group's choice, made together ---------------------------------- */

/*
 * How many instances of a group run on lanes at once (more wait for a free
 * one), and each lane's slot: n * 4 * 256 KiB of shared memory per group.
 */
#define LANES_K		4
#define LANES_SLOT	TPU__SHM_SLOT

static atomic_ulong lanes_runs, lanes_choices, lanes_kmod_runs;

unsigned long tpu__coll_lanes_kmod_runs(void)
{
	return atomic_load_explicit(&lanes_kmod_runs, memory_order_relaxed);
}

unsigned long tpu__coll_lanes_runs(void)
{
	return atomic_load_explicit(&lanes_runs, memory_order_relaxed);
}

unsigned long tpu__coll_lanes_choices(void)
{
	return atomic_load_explicit(&lanes_choices, memory_order_relaxed);
}

void tpu__coll_no_lanes(struct tpu_coll *coll)
{
	coll->no_lanes = true;
}

/* Rank 0's answer to the votes, and again to the attaches. */
struct lanes_word {
	int32_t on;
	int32_t fd;			/* the lanes' descriptor in rank 0's process */
	int32_t dom;			/* its module domain's there, or -1 */
	int32_t kmod;			/* final: every member copies through the module */
	char why[120];
};

/* A member's answers: bit 0 yes, bit 1 (the second) its lanes joined the domain. */
#define ANSWER_YES	1
#define ANSWER_KMOD	2

static struct tpu__coll_lanes *group_of(struct tpu_coll *coll, int32_t gk)
{
	for (struct tpu__coll_lanes *g = coll->lanes; g; g = g->next)
		if (g->group_key == gk)
			return g;
	return NULL;
}

void tpu__coll_lanes_forget_all(struct tpu_coll *coll)
{
	struct tpu__coll_lanes *g;

	while ((g = coll->lanes)) {
		coll->lanes = g->next;
		tpu__shm_lanes_detach(g->lanes);
		free(g);
	}
}

/* What every member knows alike, so that none of them sends a word: NULL, or why not. */
static const char *ruled_out(const struct tpu__coll_run *run, char *buf, size_t size)
{
	const char *mode = getenv("TPU_COLL_PATH");

	if (tpu__coll_lanes_mode(mode) != TPU__LANES_AUTO) {
		snprintf(buf, size, "TPU_COLL_PATH=%.40s", mode);
		return buf;
	}
	if (tpu_rendezvous_impl(run->coll->rdv) != TPU_RDV_REMOTE)
		return "not a remote rendezvous: its members share a process or a table";
	if (run->n < 2 || run->n > TPU__SHM_MAX_MEMBERS)
		return "fewer than two members, or too many";
	if (strcmp(run->device_type, "CPU"))
		return "not a group of CPU devices";
	/* Such members share this tpu_coll too: one would wait for the other's choice. */
	for (int r = 1; r < run->n; r++)
		for (int q = 0; q < r; q++)
			if (same_task(run->devices[q], run->devices[r])) {
				snprintf(buf, size, "members %d and %d are devices of one task", q, r);
				return buf;
			}
	return NULL;
}

/* Every member to every other: after it, a pipe joins each pair (its pid proven or not). */
static tpu_status hello(struct tpu__coll_run *run)
{
	static const char byte = 1;
	char got[TPU__SHM_MAX_MEMBERS];
	struct tpu__coll_op *ops[TPU__SHM_MAX_MEMBERS] = { 0 };
	tpu_status err = 0, e;

	for (int r = 0; r < run->n && !err; r++)
		if (r != run->rank)
			err = tpu__coll_post_recv(run, r, "hello", 0, 0, &got[r], 1, &ops[r]);
	for (int r = 0; r < run->n && !err; r++)
		if (r != run->rank)
			err = tpu__coll_post_send(run, r, "hello", 0, 0, &byte, 1, -1);
	for (int r = 0; r < run->n; r++) {
		if (!ops[r])
			continue;
		e = tpu__coll_wait_recv(run, ops[r], 1);
		err = err ? err : e;
	}
	e = tpu__coll_wait_sends(run, 0, -1);
	return err ? err : e;
}

/* Rank 0: gather one int32 from every member (@mine its own); *@all whether all are 1. */
static tpu_status gather_yes(struct tpu__coll_run *run, const char *tag, int32_t mine, bool *all,
			     int *no, bool *kmod)
{
	int32_t got[TPU__SHM_MAX_MEMBERS];
	struct tpu__coll_op *ops[TPU__SHM_MAX_MEMBERS] = { 0 };
	tpu_status err = 0, e;

	got[0] = mine;
	for (int r = 1; r < run->n && !err; r++)
		err = tpu__coll_post_recv(run, r, tag, 0, (uint64_t)r, &got[r], sizeof(got[r]),
					  &ops[r]);
	for (int r = 1; r < run->n && ops[r]; r++) {
		e = tpu__coll_wait_recv(run, ops[r], sizeof(got[r]));
		err = err ? err : e;
	}
	*all = !err;
	*kmod = !err;
	for (int r = 0; r < run->n && *all; r++) {
		if (!(got[r] & ANSWER_YES)) {
			*all = false;
			*no = r;
		}
		*kmod = *kmod && (got[r] & ANSWER_KMOD);
	}
	return err;
}

/* Rank 0: the same word to every other member. */
static tpu_status tell_all(struct tpu__coll_run *run, const char *tag, const struct lanes_word *w)
{
	tpu_status err = 0, e;

	for (int r = 1; r < run->n && !err; r++)
		err = tpu__coll_post_send(run, r, tag, 0, (uint64_t)r, w, sizeof(*w), -1);
	e = tpu__coll_wait_sends(run, 0, -1);
	return err ? err : e;
}

/* A member: its int32 to rank 0, then rank 0's word back. */
static tpu_status ask_zero(struct tpu__coll_run *run, const char *tag, const char *answer,
			   int32_t mine, struct lanes_word *w)
{
	struct tpu__coll_op *op;
	tpu_status err, e;

	err = tpu__coll_post_recv(run, 0, answer, 0, (uint64_t)run->rank, w, sizeof(*w), &op);
	if (err)
		return err;
	err = tpu__coll_post_send(run, 0, tag, 0, (uint64_t)run->rank, &mine, sizeof(mine), -1);
	e = tpu__coll_wait_recv(run, op, sizeof(*w));
	err = err ? err : e;
	e = tpu__coll_wait_sends(run, 0, -1);
	w->why[sizeof(w->why) - 1] = 0;
	return err ? err : e;
}

/* TPU_COLL_COPY as the world reads it: anything but cma lets lanes try the module. */
static bool kmod_wanted(void)
{
	const char *copy = getenv("TPU_COLL_COPY");

	return !copy || strcmp(copy, "cma");
}

/* Rank 0: an endpoint and a new module domain for the lanes, or -1s (no module here). */
static void kmod_domain(int *kfd, int *dom)
{
	*kfd = -1;
	*dom = -1;
	if (!kmod_wanted() || tpu__shm_kmod_open(kfd))
		return;
	if (tpu__shm_kmod_domain(*kfd, dom)) {
		close(*kfd);
		*kfd = -1;
	}
}

/* A member: its lanes in rank 0's module domain @dom (a descriptor number there). */
static bool kmod_join(struct tpu__shm_lanes *l, pid_t zero, int dom)
{
	int dfd = -1;
	bool ok;

	if (dom < 0 || !kmod_wanted() || tpu__shm_take_fd(zero, dom, &dfd))
		return false;
	ok = !tpu__shm_lanes_kmod_join(l, dfd);
	close(dfd);
	return ok;
}

/*
 * The choice, on every member: each says whether it can (coll_lanes_local,
 * from the pids its own pipes prove); where all can, rank 0 makes the
 * lanes (and a module domain, where the module is loaded) and the others
 * take its descriptors by its proven pid, map the lanes and join the
 * domain; where all mapped, every member runs on them, through the
 * module's grants where all joined.  Rank 0 decides both times, so every
 * member ends with the same answer; *@out NULL for the rendezvous, with
 * @why.  An error is a member gone or out of step.
 */
static tpu_status choose(struct tpu__coll_run *run, struct tpu__shm_lanes **out, char *why,
			 size_t size)
{
	pid_t pids[TPU__SHM_MAX_MEMBERS] = { 0 };
	struct tpu__shm_lanes *l = NULL;
	struct lanes_word w = { .dom = -1 };
	int fd = -1, kfd = -1, dom = -1, no = 0;
	bool yes, all, kall = false;
	tpu_status err;

	*out = NULL;
	atomic_fetch_add_explicit(&lanes_choices, 1, memory_order_relaxed);
	err = hello(run);
	if (err)
		return err;
	yes = tpu__coll_lanes_local(run->coll->rdv, run->devices, run->n, run->rank,
				    run->deadline_ns, pids, why, size);
	if (run->rank) {
		int32_t answer;

		err = ask_zero(run, "vote", "made", yes, &w);
		if (err || !w.on) {
			if (!err)
				snprintf(why, size, "%s", w.why);
			return err;
		}
		yes = !tpu__shm_take_fd(pids[0], w.fd, &fd) &&
		      !tpu__shm_lanes_attach(fd, run->n, run->rank, LANES_K, LANES_SLOT, pids, &l);
		if (fd >= 0)
			close(fd);
		answer = yes ? ANSWER_YES | (kmod_join(l, pids[0], w.dom) ? ANSWER_KMOD : 0) : 0;
		err = ask_zero(run, "mapped", "final", answer, &w);
		if (err || !w.on) {
			tpu__shm_lanes_detach(l);
			if (!err)
				snprintf(why, size, "%s", w.why);
			return err;
		}
		tpu__shm_lanes_kmod_use(l, w.kmod);
		*out = l;
		return 0;
	}
	err = gather_yes(run, "vote", yes, &all, &no, &kall);
	if (err)
		return err;
	if (!all) {
		if (no)
			snprintf(w.why, sizeof(w.why), "member %d cannot map what the others map", no);
		else
			snprintf(w.why, sizeof(w.why), "%.119s", why);
	} else if ((err = tpu__shm_lanes_create(run->n, LANES_K, LANES_SLOT, &fd)) ||
		   (err = tpu__shm_lanes_attach(fd, run->n, 0, LANES_K, LANES_SLOT, pids, &l))) {
		snprintf(w.why, sizeof(w.why), "rank 0 could not make the lanes: %s",
			 tpu_strerror(err));
		err = 0;
	} else {
		w.on = 1;
		w.fd = fd;
		kmod_domain(&kfd, &dom);
		w.dom = dom >= 0 && !tpu__shm_lanes_kmod_join(l, dom) ? dom : -1;
	}
	err = tell_all(run, "made", &w);
	if (!err && w.on) {
		bool joined = w.dom >= 0;

		/* The others took the descriptors (or failed to) before they answer. */
		err = gather_yes(run, "mapped", ANSWER_YES | (joined ? ANSWER_KMOD : 0), &all, &no,
				 &kall);
		w.on = !err && all;
		w.kmod = w.on && kall && joined;
		if (!err && !all)
			snprintf(w.why, sizeof(w.why), "member %d could not map the lanes", no);
		if (!err)
			err = tell_all(run, "final", &w);
	}
	if (fd >= 0)
		close(fd);
	if (dom >= 0)
		close(dom);
	if (kfd >= 0)
		close(kfd);
	if (err || !w.on) {
		tpu__shm_lanes_detach(l);
		snprintf(why, size, "%s", w.why);
		return err;
	}
	tpu__shm_lanes_kmod_use(l, w.kmod);
	*out = l;
	return 0;
}

/* The group's lanes, choosing them with the others at its first call; NULL: none. */
static tpu_status lanes_of(struct tpu__coll_run *run, struct tpu__shm_lanes **out)
{
	struct tpu_coll *coll = run->coll;
	struct tpu__coll_lanes *g;
	struct tpu__shm_lanes *l = NULL;
	char why[160] = "", rule[80];
	const char *no;
	tpu_status err = 0;

	pthread_mutex_lock(&coll->lock);
	while ((g = group_of(coll, run->group_key)) && g->state == TPU__LANES_DECIDING)
		pthread_cond_wait(&coll->cond, &coll->lock);
	if (g) {
		*out = g->state == TPU__LANES_ON ? g->lanes : NULL;
		pthread_mutex_unlock(&coll->lock);
		return 0;
	}
	g = calloc(1, sizeof(*g));
	if (!g) {
		pthread_mutex_unlock(&coll->lock);
		return -ENOMEM;
	}
	g->group_key = run->group_key;
	g->state = TPU__LANES_DECIDING;
	g->next = coll->lanes;
	coll->lanes = g;
	pthread_mutex_unlock(&coll->lock);

	no = ruled_out(run, rule, sizeof(rule));
	if (no) {
		snprintf(why, sizeof(why), "%s", no);
	} else {
		run->group_keys = true;
		err = choose(run, &l, why, sizeof(why));
		run->group_keys = false;
	}
	if (!err)
		tpu__log_debug("collective group %d: %s%s%s", (int)run->group_key,
			       l ? "lanes of shared memory" : "the rendezvous", l ? "" : ": ",
			       l ? "" : why);

	pthread_mutex_lock(&coll->lock);
	if (err) {
		/* Out of step with the others: the next call tries again, or fails alike. */
		for (struct tpu__coll_lanes **p = &coll->lanes; *p; p = &(*p)->next)
			if (*p == g) {
				*p = g->next;
				break;
			}
		free(g);
	} else {
		g->state = l ? TPU__LANES_ON : TPU__LANES_OFF;
		g->lanes = l;
		snprintf(g->why, sizeof(g->why), "%s", why);
	}
	pthread_cond_broadcast(&coll->cond);
	pthread_mutex_unlock(&coll->lock);
	*out = l;
	return err;
}

/* The group's lanes if it chose them already, without deciding anything: NULL otherwise. */
static struct tpu__shm_lanes *lanes_known(struct tpu__coll_run *run)
{
	struct tpu__coll_lanes *g;
	struct tpu__shm_lanes *l = NULL;

	pthread_mutex_lock(&run->coll->lock);
	g = group_of(run->coll, run->group_key);
	if (g && g->state == TPU__LANES_ON)
		l = g->lanes;
	pthread_mutex_unlock(&run->coll->lock);
	return l;
}

tpu_status tpu__coll_lanes_run(struct tpu__coll_run *run, bool resolved, bool *ran)
{
	uint64_t key[3] = { (uint32_t)run->group_key, (uint32_t)run->inst.instance_key,
			    (uint64_t)run->exec->step_id };
	struct tpu__shm_call c = {
		.type = run->inst.type, .dtype = run->inst.dtype, .op = run->inst.op,
		.final_op = run->inst.final_op,
		.root = run->inst.type == TPU_COLL_BROADCAST ? run->res.source_rank : 0,
		.count = run->inst.count, .in = run->in, .out = run->out,
		.deadline_ns = run->deadline_ns,
	};
	struct tpu__shm_lanes *l;
	struct tpu__shm_coll *lane;
	tpu_status err, e;
	bool kmod;

	*ran = false;
	/* What lanes serve: the four the segment runs, the implementation left to the library. */
	if ((c.type != TPU_COLL_REDUCTION && c.type != TPU_COLL_BROADCAST &&
	     c.type != TPU_COLL_GATHER && c.type != TPU_COLL_REDUCE_SCATTER) || run->impl[0] ||
	    run->coll->no_lanes)
		return 0;
	if (!resolved) {
		/*
		 * On lanes the segment checks that the members' calls agree
		 * (type, dtype, op, count), as it does for the world: a
		 * round trip to rank 0 first would cost more than the call.
		 * A broadcast asks rank 0 which member is its source at the
		 * instance's first run; later runs take it from that answer.
		 */
		struct tpu_coll_resolved res;

		l = lanes_known(run);
		if (!l)
			return 0;
		if (c.type == TPU_COLL_BROADCAST) {
			if (tpu_coll_resolved(run->coll, run->group_key, run->inst.instance_key,
					      &res) || res.source_rank < 0 || res.source_rank >= run->n)
				return 0;
			c.root = res.source_rank;
		}
	} else {
		err = lanes_of(run, &l);
		if (err || !l)
			return err;
	}
	*ran = true;
	err = tpu__shm_lanes_enter(l, key, run->deadline_ns, &lane);
	if (err) {
		char why[96];

		tpu__shm_lanes_why(l, why, sizeof(why));
		snprintf(run->reason, sizeof(run->reason), "instance %d of group %d: %s",
			 (int)run->inst.instance_key, (int)run->group_key,
			 why[0] ? why : tpu_strerror(err));
		return err;
	}
	err = tpu__shm_coll_run(lane, &c, run->reason, sizeof(run->reason));
	/* Read before leaving: another run of this process may take the lane next. */
	kmod = !err && strstr(tpu__shm_coll_last_way(lane), "kmod");
	if (!err)
		tpu__log_debug("collective group %d instance %d: on a lane (%s)",
			       (int)run->group_key, (int)run->inst.instance_key,
			       tpu__shm_coll_last_way(lane));
	e = tpu__shm_lanes_leave(l, lane);
	err = err ? err : e;
	if (!err) {
		atomic_fetch_add_explicit(&lanes_runs, 1, memory_order_relaxed);
		if (kmod)
			atomic_fetch_add_explicit(&lanes_kmod_runs, 1, memory_order_relaxed);
		tpu__coll_note_lanes(run, c.root);
	}
	return err;
}
