// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Lanes: one sealed memfd holding K complete segments (coll_shm_seg.c's
 * layout, each at its own page-aligned offset of one mapping) and a table
 * saying which instance holds which lane.  The world's segment is one
 * ordered stream of calls; a tpu_coll group's instances run in any order
 * on each member, each on its own thread, so each instance takes a lane
 * of its own for its one call.
 *
 * A run enters with its key (group key, instance key, step id): under the
 * table's lock it joins the lane already holding that key if another
 * member claimed it first, else claims a free lane; the last member to
 * leave frees it.  A run never waits to join, only for a free lane; every
 * lane in use holds an instance every member will start (each on its own
 * thread, so none waits behind another), so that wait ends, and is still
 * bounded by the run's deadline and the members' liveness.
 *
 * Why each lane's call counters (struct tpu__shm_coll's calls, seq, and
 * the parts words) stay in step on every member: a lane is freed only when
 * all n members left it, and each member joins a given claim once (its
 * bit in the claim's joined mask) and runs exactly one call in it; so the
 * m-th claim of a lane is the m-th call on that lane for every member,
 * whatever order the instances ran in, and no
 * member can join the (m+1)-th claim before every member left the m-th.
 * A member's thread that failed inside a lane leaves it failed (its abort
 * word is sticky), and from then on the whole table fails: the members are
 * out of step.
 *
 * The table is written by every member and read as hostile: a lane index
 * is bounded by K, a count by n; a member that writes nonsense there can
 * only make the group's own runs fail or time out, which it could anyway.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "coll_shm.h"

#define LANES_MAGIC	0x736c616eU	/* "slan" */
#define LANES_PAGE	4096u
#define LANES_SEALS	(F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

struct lanes_hdr {
	uint32_t magic;
	uint32_t n;
	uint32_t lanes;
	uint32_t pad;
	uint64_t slot;
	_Atomic uint32_t lock;		/* 0, or 1 + its holder's rank (for liveness) */
	_Atomic int32_t abort;		/* 0, or the status every later entry fails with */
	uint64_t claims;		/* claims made so far (under the lock) */
};

struct lanes_ent {
	_Atomic uint32_t busy;		/* written under the lock; tpu__shm_lanes_busy() */
	uint32_t left;			/* members that left this claim */
	uint64_t joined;		/* bit r: member r joined this claim */
	uint64_t order;			/* when it was claimed (the header's claims then) */
	uint64_t key[3];
};

_Static_assert(sizeof(struct lanes_hdr) <= SHM_LINE, "lanes header too long");
_Static_assert(sizeof(struct lanes_ent) <= SHM_LINE, "lane entry too long");

struct tpu__shm_lanes {
	int n, rank, k;
	size_t size;
	unsigned char *base;
	struct tpu__shm_coll **lane;
};

static size_t round_page(size_t v)
{
	return (v + LANES_PAGE - 1) / LANES_PAGE * LANES_PAGE;
}

static size_t lanes_first(int k)
{
	return round_page(SHM_LINE * (1 + (size_t)k));
}

static size_t lane_stride(int n, size_t slot)
{
	return round_page(tpu__shm_seg_size(n, slot));
}

static size_t lanes_size(int n, int k, size_t slot)
{
	return lanes_first(k) + (size_t)k * lane_stride(n, slot);
}

static bool lanes_args_ok(int n, int k, size_t slot)
{
	return tpu__shm_seg_args_ok(n, slot) && k >= 1 && k <= TPU__SHM_MAX_LANES;
}

static struct lanes_hdr *hdr_of(const struct tpu__shm_lanes *l)
{
	return (struct lanes_hdr *)l->base;
}

static struct lanes_ent *ent_of(const struct tpu__shm_lanes *l, int j)
{
	return (struct lanes_ent *)(l->base + SHM_LINE * (1 + (size_t)j));
}

tpu_status tpu__shm_lanes_create(int n, int k, size_t slot, int *fd)
{
	size_t size;
	unsigned char *m;
	struct lanes_hdr *h;
	tpu_status st;
	int f;

	if (!lanes_args_ok(n, k, slot) || !fd)
		return -EINVAL;
	size = lanes_size(n, k, slot);
	f = memfd_create("tpu-coll-lanes", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (f < 0)
		return -errno;
	if (ftruncate(f, (off_t)size))
		goto fail;
	m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
	if (m == MAP_FAILED)
		goto fail;
	h = (struct lanes_hdr *)m;
	h->magic = LANES_MAGIC;
	h->n = (uint32_t)n;
	h->lanes = (uint32_t)k;
	h->slot = slot;
	for (int j = 0; j < k; j++)
		tpu__shm_seg_init(m + lanes_first(k) + (size_t)j * lane_stride(n, slot), n, slot);
	munmap(m, size);
	if (fcntl(f, F_ADD_SEALS, LANES_SEALS))
		goto fail;
	*fd = f;
	return 0;
fail:
	st = -errno;
	close(f);
	return st;
}

tpu_status tpu__shm_lanes_attach(int fd, int n, int rank, int k, size_t slot, const pid_t *pids,
				 struct tpu__shm_lanes **out)
{
	struct tpu__shm_lanes *l;
	const struct lanes_hdr *h;
	tpu_status st;

	if (!lanes_args_ok(n, k, slot) || rank < 0 || rank >= n || !pids || !out)
		return -EINVAL;
	st = tpu__shm_check_fd(fd, lanes_size(n, k, slot));
	if (st)
		return st;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->n = n;
	l->rank = rank;
	l->k = k;
	l->size = lanes_size(n, k, slot);
	l->lane = calloc((size_t)k, sizeof(*l->lane));
	l->base = mmap(NULL, l->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (!l->lane || l->base == MAP_FAILED) {
		st = l->base == MAP_FAILED ? -errno : -ENOMEM;
		if (l->base == MAP_FAILED)
			l->base = NULL;
		goto fail;
	}
	madvise(l->base, l->size, MADV_DONTFORK);
	h = hdr_of(l);
	if (h->magic != LANES_MAGIC || h->n != (uint32_t)n || h->lanes != (uint32_t)k ||
	    h->slot != slot) {
		st = -EPROTO;
		goto fail;
	}
	for (int j = 0; j < k; j++) {
		st = tpu__shm_coll_attach_at(l->base + lanes_first(k) + (size_t)j * lane_stride(n, slot),
					     false, n, rank, slot, pids, &l->lane[j]);
		if (st)
			goto fail;
	}
	*out = l;
	return 0;
fail:
	tpu__shm_lanes_detach(l);
	return st;
}

void tpu__shm_lanes_detach(struct tpu__shm_lanes *l)
{
	if (!l)
		return;
	for (int j = 0; l->lane && j < l->k; j++)
		tpu__shm_coll_detach(l->lane[j]);
	free(l->lane);
	if (l->base)
		munmap(l->base, l->size);
	free(l);
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void nap(unsigned int tries)
{
	struct timespec ts = { 0, 20000 };

	if (tries < 64)
		sched_yield();
	else
		nanosleep(&ts, NULL);
}

/* Fail every later entry of every member with @st (the first failure wins). */
static tpu_status lanes_fail(struct tpu__shm_lanes *l, tpu_status st)
{
	int32_t zero = 0;

	atomic_compare_exchange_strong(&hdr_of(l)->abort, &zero, (int32_t)st);
	return (tpu_status)atomic_load(&hdr_of(l)->abort);
}

static tpu_status lanes_aborted(const struct tpu__shm_lanes *l)
{
	int32_t a = atomic_load_explicit(&hdr_of(l)->abort, memory_order_acquire);

	/* Another member's word: only the statuses a member writes there. */
	if (!a)
		return 0;
	if (a == TPU_E_PEER_GONE || a == TPU_E_COLL_MISMATCH)
		return a;
	return -ECONNABORTED;
}

/* A member's process exited: every run of this group fails. */
static tpu_status someone_dead(struct tpu__shm_lanes *l)
{
	for (int r = 0; r < l->n; r++)
		if (r != l->rank && tpu__shm_dead(l->lane[0], r, 0))
			return lanes_fail(l, TPU_E_PEER_GONE);
	return 0;
}

static tpu_status lock_table(struct tpu__shm_lanes *l, uint64_t deadline_ns)
{
	_Atomic uint32_t *w = &hdr_of(l)->lock;

	for (unsigned int tries = 0;; tries++) {
		uint32_t zero = 0;
		uint32_t holder;
		tpu_status st;

		if (atomic_compare_exchange_weak_explicit(w, &zero, (uint32_t)l->rank + 1,
							  memory_order_acquire, memory_order_relaxed))
			return 0;
		nap(tries);
		if (tries % 64 != 63)
			continue;
		holder = atomic_load_explicit(w, memory_order_relaxed);
		/* A holder that died never unlocks; its pidfd says so. */
		if (holder && holder - 1 < (uint32_t)l->n && (int)holder - 1 != l->rank &&
		    tpu__shm_dead(l->lane[0], (int)holder - 1, 0))
			return lanes_fail(l, TPU_E_PEER_GONE);
		st = lanes_aborted(l);
		if (st)
			return st;
		if (deadline_ns && mono_ns() >= deadline_ns)
			return -ETIMEDOUT;
	}
}

static void unlock_table(struct tpu__shm_lanes *l)
{
	atomic_store_explicit(&hdr_of(l)->lock, 0, memory_order_release);
}

/*
 * Join the oldest claim of @key this member has not joined, or claim a
 * free lane: its index, or -1.  Oldest first: a key run again before every
 * member finished its earlier run (a broadcast's root returns before the
 * others arrive) pairs each member's i-th run of it with the others' i-th.
 */
static int join_or_claim(struct tpu__shm_lanes *l, const uint64_t key[3])
{
	struct lanes_hdr *h = hdr_of(l);
	uint64_t me = 1ull << l->rank;
	int free_lane = -1, join = -1;

	for (int j = 0; j < l->k; j++) {
		struct lanes_ent *e = ent_of(l, j);

		if (!atomic_load_explicit(&e->busy, memory_order_relaxed)) {
			if (free_lane < 0)
				free_lane = j;
			continue;
		}
		if (!(e->joined & me) && !memcmp(e->key, key, sizeof(e->key)) &&
		    (join < 0 || e->order < ent_of(l, join)->order))
			join = j;
	}
	if (join >= 0) {
		ent_of(l, join)->joined |= me;
		return join;
	}
	if (free_lane >= 0) {
		struct lanes_ent *e = ent_of(l, free_lane);

		memcpy(e->key, key, sizeof(e->key));
		e->joined = me;
		e->left = 0;
		e->order = h->claims++;
		atomic_store_explicit(&e->busy, 1, memory_order_relaxed);
	}
	return free_lane;
}

tpu_status tpu__shm_lanes_enter(struct tpu__shm_lanes *l, const uint64_t key[3],
				uint64_t deadline_ns, struct tpu__shm_coll **lane)
{
	if (!l || !key || !lane)
		return -EINVAL;
	for (unsigned int tries = 0;; tries++) {
		tpu_status st = lanes_aborted(l);
		int j;

		if (st)
			return st;
		st = lock_table(l, deadline_ns);
		if (st)
			return st;
		j = join_or_claim(l, key);
		unlock_table(l);
		if (j >= 0) {
			*lane = l->lane[j];
			return 0;
		}
		/* Every lane is busy with instances the members will all start: wait for one. */
		nap(tries);
		if (tries % 64 != 63)
			continue;
		st = someone_dead(l);
		if (st)
			return st;
		if (deadline_ns && mono_ns() >= deadline_ns)
			return -ETIMEDOUT;
	}
}

tpu_status tpu__shm_lanes_leave(struct tpu__shm_lanes *l, struct tpu__shm_coll *lane)
{
	struct lanes_ent *e;
	tpu_status st;
	int j;

	if (!l || !lane)
		return -EINVAL;
	for (j = 0; j < l->k && l->lane[j] != lane; j++)
		;
	if (j == l->k)
		return -EINVAL;
	/* A lane that failed leaves this member out of step with the others on every lane. */
	st = lane->failed ? lane->failed : tpu__shm_aborted(lane);
	if (st)
		lanes_fail(l, st == TPU_E_PEER_GONE || st == TPU_E_COLL_MISMATCH ? st :
			   -ECONNABORTED);
	/* No deadline: the lock is held only for a few stores, unless its holder died. */
	st = lock_table(l, 0);
	if (st)
		return st;
	e = ent_of(l, j);
	if (atomic_load_explicit(&e->busy, memory_order_relaxed) && ++e->left >= (uint32_t)l->n) {
		memset(e->key, 0, sizeof(e->key));
		e->joined = 0;
		e->left = 0;
		atomic_store_explicit(&e->busy, 0, memory_order_relaxed);
	}
	unlock_table(l);
	return 0;
}

tpu_status tpu__shm_lanes_kmod_join(struct tpu__shm_lanes *l, int dom)
{
	tpu_status st = 0;

	for (int j = 0; j < l->k && !st; j++) {
		int fd;

		st = tpu__shm_kmod_open(&fd);
		if (!st)
			st = tpu__shm_kmod_join(l->lane[j], fd, dom);
	}
	return st;
}

void tpu__shm_lanes_kmod_use(struct tpu__shm_lanes *l, bool on)
{
	for (int j = 0; j < l->k; j++)
		tpu__shm_kmod_use(l->lane[j], on);
}

void tpu__shm_lanes_why(const struct tpu__shm_lanes *l, char *buf, size_t size)
{
	if (!buf || !size)
		return;
	buf[0] = 0;
	for (int j = 0; l && j < l->k && !buf[0]; j++)
		tpu__shm_why(l->lane[j], buf, size);
}

int tpu__shm_lanes_busy(const struct tpu__shm_lanes *l)
{
	int busy = 0;

	for (int j = 0; j < l->k; j++)
		busy += atomic_load_explicit(&ent_of(l, j)->busy, memory_order_relaxed) != 0;
	return busy;
}
