// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Lanes on one segment (lib/coll/coll_shm_lanes.c): fork()ed groups of 2
 * and 3 processes run more instances than there are lanes, each on its
 * own thread, started in a different order on each member, and check
 * every result against a reference; a member killed while the others
 * wait in their lanes makes them fail with TPU_E_PEER_GONE, not a timeout;
 * the memfd's checks refuse what is not a lanes segment of the group;
 * lanes taken out of their creator's process by its pid attach.  A
 * member's half of a group's choice of lanes (lib/coll/coll_lanes.c):
 * yes for a task served by a child process over shm, no for two workers
 * of one process, two devices of one task, tcp, an unknown task, and
 * TPU_COLL_PATH=rdv.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "remote_harness.h"
#include "tap.h"
#include "tpu_user.h"
#include "coll.h"
#include "coll_shm.h"

#define LANES	3
#define INSTS	9
#define SLOT	(64u << 10)
#define MAXN	3

static const uint64_t counts[] = { 0, 1, 7, 1000, 20000, 100000 };

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct run {
	struct tpu__shm_lanes *l;
	int me, n, inst;
	bool in_place;
	tpu_status st;
	bool ok;
};

static float val(int r, int inst, uint64_t i)
{
	return (float)((r + 1) * 3 + inst * 5 + (int)(i % 97));
}

/* Instance @inst: its type, count and root follow from the number alone, alike on every member. */
static void *one_run(void *arg)
{
	struct run *ru = arg;
	int n = ru->n, inst = ru->inst, root = inst % n;
	enum tpu_coll_type type = inst % 3 == 0 ? TPU_COLL_REDUCTION :
				  inst % 3 == 1 ? TPU_COLL_BROADCAST : TPU_COLL_GATHER;
	uint64_t count = counts[inst % (sizeof(counts) / sizeof(counts[0]))];
	uint64_t key[3] = { 77, (uint64_t)inst, 5 };
	size_t outn = type == TPU_COLL_GATHER ? count * (size_t)n : count;
	float *in = calloc(count + 1, sizeof(float)), *out = calloc(outn + 1, sizeof(float));
	struct tpu__shm_coll *lane = NULL;
	const float *res;
	char why[160] = "";
	struct tpu__shm_call c = { .type = type, .dtype = TPU_DT_FLOAT32, .op = TPU_OP_SUM,
				   .final_op = TPU_FINAL_NONE, .root = root, .count = count,
				   .deadline_ns = mono_ns() + 30000000000ull };

	ru->ok = false;
	if (!in || !out)
		goto out;
	for (uint64_t i = 0; i < count; i++)
		in[i] = val(ru->me, inst, i);
	if (ru->in_place && type != TPU_COLL_GATHER) {
		memcpy(out, in, count * sizeof(float));
		c.in = out;
	} else {
		c.in = in;
	}
	c.out = out;
	ru->st = tpu__shm_lanes_enter(ru->l, key, c.deadline_ns, &lane);
	if (ru->st)
		goto out;
	ru->st = tpu__shm_coll_run(lane, &c, why, sizeof(why));
	if (ru->st)
		tap_diag("rank %d inst %d: %s", ru->me, inst, why);
	{
		tpu_status st = tpu__shm_lanes_leave(ru->l, lane);

		if (!ru->st)
			ru->st = st;
	}
	if (ru->st)
		goto out;
	ru->ok = true;
	/* A broadcast's root keeps its data where it was (in place: its out buffer). */
	res = type == TPU_COLL_BROADCAST && ru->me == root ? c.in : out;
	for (uint64_t i = 0; i < outn && ru->ok; i++) {
		float want;

		if (type == TPU_COLL_REDUCTION) {
			want = 0;
			for (int r = 0; r < n; r++)
				want += val(r, inst, i);
		} else if (type == TPU_COLL_BROADCAST) {
			want = val(root, inst, i);
		} else {
			want = val((int)(i / count), inst, i % count);
		}
		if (res[i] != want) {
			tap_diag("rank %d inst %d: [%llu] %g, want %g", ru->me, inst,
				 (unsigned long long)i, (double)res[i], (double)want);
			ru->ok = false;
		}
	}
out:
	free(in);
	free(out);
	return NULL;
}

/* Every instance on its own thread, started in this member's own order. */
static int out_of_order(struct tpu__shm_lanes *l, int me, int n, bool in_place)
{
	struct run runs[INSTS];
	pthread_t th[INSTS];
	int bad = 0;

	for (int k = 0; k < INSTS; k++) {
		/* Rank 0 forward, rank 1 backward, rank 2 from the middle. */
		int inst = me == 0 ? k : me == 1 ? INSTS - 1 - k : (k + INSTS / 2) % INSTS;

		runs[k] = (struct run){ .l = l, .me = me, .n = n, .inst = inst,
					.in_place = in_place };
		if (pthread_create(&th[k], NULL, one_run, &runs[k]))
			return 1;
	}
	for (int k = 0; k < INSTS; k++) {
		pthread_join(th[k], NULL);
		if (!runs[k].ok) {
			tap_diag("rank %d inst %d failed: %s", me, runs[k].inst,
				 tpu_status_name(runs[k].st));
			bad++;
		}
	}
	return bad;
}

/* The last member sleeps in place of its run; the others wait in their lane until it is killed. */
static int member_killed(struct tpu__shm_lanes *l, int me, int n)
{
	uint64_t key[3] = { 77, 1000, 5 };
	struct tpu__shm_coll *lane;
	float v = 1, out = 0;
	struct tpu__shm_call c = { .type = TPU_COLL_REDUCTION, .dtype = TPU_DT_FLOAT32,
				   .op = TPU_OP_SUM, .final_op = TPU_FINAL_NONE, .count = 1,
				   .in = &v, .out = &out,
				   .deadline_ns = mono_ns() + 60000000000ull };
	uint64_t t0 = mono_ns();
	tpu_status st;

	if (me == n - 1) {
		for (;;)
			pause();
	}
	st = tpu__shm_lanes_enter(l, key, c.deadline_ns, &lane);
	if (!st) {
		st = tpu__shm_coll_run(lane, &c, NULL, 0);
		tpu__shm_lanes_leave(l, lane);
	}
	if (st != TPU_E_PEER_GONE || mono_ns() - t0 > 20000000000ull) {
		tap_diag("rank %d: %s after %llu ms", me, tpu_status_name(st),
			 (unsigned long long)((mono_ns() - t0) / 1000000));
		return 1;
	}
	/* Later entries fail at once: the group is out of step. */
	st = tpu__shm_lanes_enter(l, (uint64_t[3]){ 77, 1001, 5 }, c.deadline_ns, &lane);
	return st == TPU_E_PEER_GONE ? 0 : 1;
}

enum { CASE_ORDER, CASE_KILLED };

static int member(int fd, int me, int n, const pid_t *pids, int which)
{
	struct tpu__shm_lanes *l;
	tpu_status st = tpu__shm_lanes_attach(fd, n, me, LANES, SLOT, pids, &l);
	int bad;

	if (st) {
		tap_diag("rank %d: attach %s", me, tpu_status_name(st));
		return 1;
	}
	if (which == CASE_KILLED) {
		bad = member_killed(l, me, n);
	} else {
		uint64_t until = mono_ns() + 20000000000ull;

		bad = out_of_order(l, me, n, false) + out_of_order(l, me, n, true);
		/* Once every member left its last lane (it may lag), no lane stays claimed. */
		while (tpu__shm_lanes_busy(l) && mono_ns() < until)
			usleep(1000);
		bad += tpu__shm_lanes_busy(l) != 0;
		/* Both ways ran inside the lanes: through the slots, and single-copy. */
		if (!tpu__shm_coll_way_count(SHM_WAY_SLOTS) ||
		    !(tpu__shm_coll_way_count(SHM_WAY_CMA) + tpu__shm_coll_way_count(SHM_WAY_KMOD) +
		      tpu__shm_coll_way_count(SHM_WAY_MIXED))) {
			tap_diag("rank %d: a way did not run", me);
			bad++;
		}
	}
	tpu__shm_lanes_detach(l);
	return bad ? 1 : 0;
}

/* Fork @n members over one lanes segment; each learns every pid from the parent. */
static bool group(int n, int which)
{
	pid_t pids[MAXN] = { 0 };
	int go[MAXN][2], fd, codes[MAXN];
	bool ok = true;

	if (tpu__shm_lanes_create(n, LANES, SLOT, &fd))
		return false;
	for (int r = 0; r < n; r++) {
		if (pipe(go[r]))
			return false;
		pids[r] = fork();
		if (pids[r] < 0)
			return false;
		if (!pids[r]) {
			pid_t all[MAXN];

			tap_restart();
			close(go[r][1]);
			if (read(go[r][0], all, sizeof(all)) != (ssize_t)sizeof(all))
				_exit(2);
			codes[r] = member(fd, r, n, all, which);
			fflush(NULL);
			_exit(codes[r]);
		}
		close(go[r][0]);
	}
	for (int r = 0; r < n; r++) {
		if (write(go[r][1], pids, sizeof(pids)) != (ssize_t)sizeof(pids))
			ok = false;
		close(go[r][1]);
	}
	close(fd);
	if (which == CASE_KILLED) {
		/* Once the others are in their lane (or soon after: either way they must fail). */
		usleep(300000);
		kill(pids[n - 1], SIGKILL);
	}
	for (int r = 0; r < n; r++) {
		int wst;

		codes[r] = waitpid(pids[r], &wst, 0) == pids[r] && WIFEXITED(wst) ?
			   WEXITSTATUS(wst) : -1;
		if (which == CASE_KILLED && r == n - 1)
			continue;
		if (codes[r]) {
			tap_diag("member %d of %d: %d", r, n, codes[r]);
			ok = false;
		}
	}
	return ok;
}

static void checks(void)
{
	pid_t pids[2] = { getpid(), getpid() };
	struct tpu__shm_lanes *l = NULL, *l1 = NULL;
	int fd, raw;

	CHECK(tpu__shm_lanes_create(2, 0, SLOT, &fd) == -EINVAL &&
	      tpu__shm_lanes_create(2, TPU__SHM_MAX_LANES + 1, SLOT, &fd) == -EINVAL &&
	      tpu__shm_lanes_create(2, 2, 100, &fd) == -EINVAL, "lanes_create_checks_args");
	if (tpu__shm_lanes_create(2, 2, SLOT, &fd))
		return;
	CHECK(tpu__shm_lanes_attach(fd, 3, 0, 2, SLOT, (pid_t[3]){ 1, 1, 1 }, &l) == -EPROTO &&
	      tpu__shm_lanes_attach(fd, 2, 0, 3, SLOT, pids, &l) == -EPROTO &&
	      tpu__shm_lanes_attach(fd, 2, 0, 2, SLOT * 2, pids, &l) == -EPROTO,
	      "lanes_attach_refuses_another_shape");
	/* A segment, not lanes: the same checks as any memfd, then the header's magic. */
	raw = memfd_create("not-lanes", MFD_CLOEXEC);
	CHECK(raw >= 0 && tpu__shm_lanes_attach(raw, 2, 0, 2, SLOT, pids, &l) == -EPERM,
	      "lanes_attach_refuses_an_unsealed_file");
	if (raw >= 0)
		close(raw);
	CHECK(tpu__shm_lanes_attach(fd, 2, 0, 2, SLOT, pids, &l) == 0 &&
	      tpu__shm_lanes_attach(fd, 2, 1, 2, SLOT, pids, &l1) == 0, "lanes_attach_maps_it");
	if (l && l1) {
		struct tpu__shm_coll *a, *b, *c, *d;
		uint64_t k1[3] = { 1, 2, 3 }, k2[3] = { 1, 2, 4 }, k3[3] = { 9, 9, 9 };

		/* Both members here (one process, two mappings): the other's entry joins. */
		CHECK(!tpu__shm_lanes_enter(l, k1, 0, &a) && !tpu__shm_lanes_enter(l1, k1, 0, &b) &&
		      tpu__shm_lanes_busy(l) == 1, "lanes_same_key_joins");
		/* A member's second run of a key is a new claim, not a second join of its first. */
		CHECK(!tpu__shm_lanes_enter(l, k1, 0, &c) && c != a && tpu__shm_lanes_busy(l) == 2,
		      "lanes_same_member_same_key_claims_anew");
		/* Full: another key waits until its deadline. */
		CHECK(tpu__shm_lanes_enter(l1, k2, mono_ns() + 50000000, &d) == -ETIMEDOUT,
		      "lanes_full_waits_within_deadline");
		tpu__shm_lanes_leave(l, a);
		CHECK(tpu__shm_lanes_busy(l) == 2, "lanes_stays_until_last_leaves");
		tpu__shm_lanes_leave(l1, b);
		CHECK(tpu__shm_lanes_busy(l) == 1 && !tpu__shm_lanes_enter(l1, k3, 0, &d),
		      "lanes_freed_by_last_leaver");
		/* The other member's run of k1 joins the older claim's successor, not k3's lane. */
		CHECK(!tpu__shm_lanes_enter(l1, k1, 0, &b) && tpu__shm_lanes_busy(l) == 2,
		      "lanes_second_run_joins_second_claim");
		tpu__shm_lanes_leave(l, c);
		tpu__shm_lanes_leave(l1, b);
		tpu__shm_lanes_leave(l1, d);
		CHECK(tpu__shm_lanes_busy(l) == 1, "lanes_claim_needs_every_member_to_leave");
	}
	tpu__shm_lanes_detach(l1);
	tpu__shm_lanes_detach(l);
	close(fd);
}

/*
 * How a member that did not create the lanes gets them: a child creates
 * them (and an unsealed memfd), says the descriptor numbers, and this
 * process takes both out of it by its pid; the lanes attach, the other
 * file is refused, and a pid that is gone says so.
 */
static void taken(void)
{
	int ctl[2], back[2], nums[2] = { -1, -1 }, fd = -1, raw = -1;
	pid_t pids[2] = { getpid(), 0 };
	struct tpu__shm_lanes *l = NULL;
	char c = 0;
	tpu_status st;
	int wst;

	if (pipe(ctl) || pipe(back))
		return;
	pids[1] = fork();
	if (pids[1] < 0)
		return;
	if (!pids[1]) {
		close(ctl[0]);
		close(back[1]);
		if (tpu__shm_lanes_create(2, 2, SLOT, &nums[0]))
			_exit(2);
		nums[1] = memfd_create("not-sealed", MFD_CLOEXEC);
		if (write(ctl[1], nums, sizeof(nums)) != (ssize_t)sizeof(nums))
			_exit(2);
		/* Alive until the parent took what it wanted. */
		if (read(back[0], &c, 1) < 0)
			_exit(2);
		_exit(0);
	}
	close(ctl[1]);
	close(back[0]);
	if (read(ctl[0], nums, sizeof(nums)) != (ssize_t)sizeof(nums))
		nums[0] = nums[1] = -1;
	CHECK(nums[0] >= 0 && !tpu__shm_take_fd(pids[1], nums[0], &fd) &&
	      !tpu__shm_lanes_attach(fd, 2, 0, 2, SLOT, pids, &l), "lanes_taken_from_creator_attach");
	CHECK(nums[1] >= 0 && !tpu__shm_take_fd(pids[1], nums[1], &raw) &&
	      tpu__shm_lanes_attach(raw, 2, 0, 2, SLOT, pids, &l) == -EPERM,
	      "lanes_taken_unsealed_file_refused");
	if (raw >= 0)
		close(raw);
	/* -ENOENT: through /proc, where pidfd_getfd is missing (valgrind). */
	st = tpu__shm_take_fd(pids[1], 1 << 20, &raw);
	CHECK((st == -EBADF || st == -ENOENT) && raw == -1,
	      "lanes_take_of_no_descriptor_fails");
	if (write(back[1], &c, 1) != 1)
		kill(pids[1], SIGKILL);
	close(back[1]);
	close(ctl[0]);
	waitpid(pids[1], &wst, 0);
	st = tpu__shm_take_fd(pids[1], nums[0] >= 0 ? nums[0] : 3, &raw);
	CHECK((st == TPU_E_PEER_GONE || st == -ENOENT) && raw == -1,
	      "lanes_take_from_gone_pid_fails");
	tpu__shm_lanes_detach(l);
	if (fd >= 0)
		close(fd);
}

static char *const two_tasks[] = { RH_TASK(0) "/device:CPU:0", RH_TASK(1) "/device:CPU:0" };

/* One message from @from (task @src) to @to (task @dst): a pipe between them, negotiated. */
static bool one_msg(struct tpu_rendezvous *from, struct tpu_rendezvous *to, int src, int dst)
{
	static const char *const task[] = { RH_TASK(0), RH_TASK(1) };
	/* A send without a callback keeps the caller's bytes until a receiver takes them. */
	static char sent[8] = "lanes";
	char key[RH_KEY_MAX], got[8];
	size_t klen = rh_key(key, task[src], task[dst], "decide", 1, 0), len = 0;
	struct tpu_tensor out = { .data = sent, .len = sizeof(sent) };
	struct tpu_tensor in = { .data = got, .len = sizeof(got) };

	if (from && tpu_rendezvous_send(from, key, klen, &out, 0, NULL, NULL))
		return false;
	return !to || !tpu_rendezvous_recv_wait(to, key, klen, &in, 20 * RH_SEC, &len);
}

/* Worker of task 1 in a child: this process's worker (task 0) reaches it over shm. */
static bool decide_across(void)
{
	int up[2], down[2], wst;
	char url[300] = "";
	struct rh_worker a = { 0 };
	pid_t pids[2] = { 0 }, child;
	char why[160] = "";
	bool yes = false;

	if (pipe(up) || pipe(down))
		return false;
	child = fork();
	if (child < 0)
		return false;
	if (!child) {
		struct rh_worker b = { 0 };
		char aurl[300] = "";
		bool ok;

		tap_restart();
		ok = rh_shm_worker_open(&b, RH_TASK(1), "lanesdecide", "b", NULL) &&
		     write(up[1], b.url, sizeof(b.url)) == (ssize_t)sizeof(b.url) &&
		     read(down[0], aurl, sizeof(aurl)) == (ssize_t)sizeof(aurl) &&
		     !tpu_rendezvous_add_peer(b.rdv, RH_TASK(0), aurl) &&
		     one_msg(NULL, b.rdv, 0, 1) && one_msg(b.rdv, NULL, 1, 0);
		/* Until the parent decided: its pipe to this worker must stay. */
		if (read(down[0], aurl, 1) < 0)
			ok = false;
		rh_worker_close(&b);
		_exit(ok ? 0 : 1);
	}
	if (rh_shm_worker_open(&a, RH_TASK(0), "lanesdecide", "a", NULL) &&
	    read(up[0], url, sizeof(url)) == (ssize_t)sizeof(url) &&
	    write(down[1], a.url, sizeof(a.url)) == (ssize_t)sizeof(a.url) &&
	    !tpu_rendezvous_add_peer(a.rdv, RH_TASK(1), url) && one_msg(a.rdv, NULL, 0, 1) &&
	    one_msg(NULL, a.rdv, 1, 0)) {
		yes = tpu__coll_lanes_local(a.rdv, two_tasks, 2, 0, mono_ns() + 20 * RH_SEC, pids,
					    why, sizeof(why));
		if (!yes || pids[0] != getpid() || pids[1] != child)
			tap_diag("across: %d (%s), pids %d %d, child %d", yes, why, (int)pids[0],
				 (int)pids[1], (int)child);
		yes = yes && pids[0] == getpid() && pids[1] == child;
	}
	if (write(down[1], "x", 1) != 1)
		kill(child, SIGKILL);
	close(down[1]);
	if (waitpid(child, &wst, 0) != child || !WIFEXITED(wst) || WEXITSTATUS(wst))
		yes = false;
	rh_worker_close(&a);
	return yes;
}

/*
 * A member's half of a group's choice of lanes (coll_lanes.c): yes only
 * where every other member is a task served by another process whose pid
 * the pipe proves; no, with the reason, for two workers of one process,
 * two devices of one task, a tcp pipe, a task not in the map, and
 * TPU_COLL_PATH=rdv.
 */
static void decide(void)
{
	char *const one_task[] = { RH_TASK(0) "/device:CPU:0", RH_TASK(0) "/device:CPU:1" };
	char *const unknown[] = { RH_TASK(0) "/device:CPU:0", RH_TASK(7) "/device:CPU:0" };
	struct rh_worker a = { 0 }, b = { 0 };
	pid_t pids[2];
	char why[160] = "";
	uint64_t soon = mono_ns() + 20 * RH_SEC;
	struct rh_pair w;
	bool ok;

	ok = rh_shm_worker_open(&a, RH_TASK(0), "lanesdecide", "a1", NULL) &&
	     rh_shm_worker_open(&b, RH_TASK(1), "lanesdecide", "b1", NULL) &&
	     !tpu_rendezvous_add_peer(a.rdv, RH_TASK(1), b.url) &&
	     !tpu_rendezvous_add_peer(b.rdv, RH_TASK(0), a.url) && one_msg(a.rdv, b.rdv, 0, 1) &&
	     one_msg(b.rdv, a.rdv, 1, 0);
	CHECK(ok, "lanes_decide_setup");
	if (ok) {
		CHECK(!tpu__coll_lanes_local(a.rdv, two_tasks, 2, 0, soon, pids, why, sizeof(why)) &&
		      strstr(why, "one process"), "lanes_decide_no_for_one_process (%s)", why);
		CHECK(!tpu__coll_lanes_local(a.rdv, one_task, 2, 0, soon, pids, why, sizeof(why)) &&
		      strstr(why, "one task"), "lanes_decide_no_for_one_task (%s)", why);
		CHECK(!tpu__coll_lanes_local(a.rdv, unknown, 2, 0, soon, pids, why, sizeof(why)) &&
		      strstr(why, "no pid"), "lanes_decide_no_for_unknown_task (%s)", why);
		setenv("TPU_COLL_PATH", "rdv", 1);
		CHECK(!tpu__coll_lanes_local(a.rdv, two_tasks, 2, 0, soon, pids, why, sizeof(why)) &&
		      strstr(why, "TPU_COLL_PATH=rdv"), "lanes_decide_no_when_forced (%s)", why);
		unsetenv("TPU_COLL_PATH");
	}
	rh_worker_close(&b);
	rh_worker_close(&a);
	ok = rh_pair_up(&w, "") && one_msg(w.a.rdv, w.b.rdv, 0, 1);
	CHECK(ok && !tpu__coll_lanes_local(w.a.rdv, two_tasks, 2, 0, soon, pids, why, sizeof(why)) &&
	      strstr(why, "proves no pid"), "lanes_decide_no_over_tcp (%s)", why);
	rh_pair_down(&w);
	CHECK(decide_across(), "lanes_decide_yes_for_another_process");
}

void test_shm_lanes(void)
{
	checks();
	taken();
	decide();
	CHECK(group(2, CASE_ORDER), "lanes_2_members_out_of_order");
	CHECK(group(3, CASE_ORDER), "lanes_3_members_out_of_order");
	CHECK(group(2, CASE_KILLED), "lanes_2_member_killed_fails_others");
	CHECK(group(3, CASE_KILLED), "lanes_3_member_killed_fails_others");
}
