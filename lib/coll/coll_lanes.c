// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Whether a tpu_coll group may run on lanes (coll_shm_lanes.c), as far as
 * one member can tell alone: every other member is a device of a task
 * whose worker is another process of this host, one process per member,
 * each pid the kernel's word on this member's pipe to that worker
 * (tpu__remote_peer_pid(): SO_PEERCRED), never a peer's claim.  Members
 * that are devices of one process, a pipe that proves no pid (tcp), a
 * rendezvous that is not a remote one, or TPU_COLL_PATH=rdv (or flat)
 * leave the group on the rendezvous.  This is one member's half: the
 * group takes lanes only where every member's half said yes, which needs
 * an exchange among them (not done here: see collectives.rst).
 */
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
