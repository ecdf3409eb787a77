// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The segment of the shared-memory collectives: made, checked and mapped,
 * and the one way members wait for each other on it.  Each member counts
 * the phases it published in its own line (a futex word); a waiter spins
 * briefly on a peer's word, then sleeps on it, waking every
 * TPU__SHM_LIVENESS_NS to look whether the peer's process still lives (a
 * pidfd of the pid the kernel proved: readable once it exited).  Any
 * failure is written to the header, every sleeper is woken, and from then
 * on every member's call fails: the members are out of step.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "coll_shm.h"

/*
 * A waiter spins, then sleeps on the futex after YIELD_NS.  With no more
 * members than cores it spins all that time, unless the peer it waits for
 * last ran on this very CPU: then the peer waits for this core, and the
 * waiter yields it at every look (spinning on costs each hand-off the
 * whole spin: on a loaded 2-core host a 4-byte all-reduce of 2 members
 * sharing a core took twice the spin, 45 us for a 20 us spin, against 5 us
 * yielding).  With more members than cores some share a core anyway: after
 * SPIN_NS, a peer on another core would have answered, and the waiter
 * yields at every look.  SPIN_NS is short: a peer on another core that has
 * not answered in half a microsecond is most often itself waiting for its
 * core (4 members on 2 cores hand each core over once per call; a 2 us
 * spin made each hand-off wait for the spin on the other core: 4 members,
 * 4 B all-reduce, median of the slowest member 8.6-10 us against 6.0 with
 * 0.5 us, 2 members unchanged at 0.4).  After CROWD_SLEEP_NS it sleeps on
 * the futex, since a yield does not reliably hand the core to the member
 * it waits for (4 members on a loaded 2-core host: a 256 KiB all-gather
 * took 0.6-2.8 ms yielding up to YIELD_NS, 0.17 ms sleeping after 50 us;
 * sleeping after 2 us made a 4-byte one take 40-47 us instead of 10).
 */
#define SPIN_NS		500u
#define YIELD_NS	20000000u
#define CROWD_SLEEP_NS	50000u
#define SEALS		(F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

size_t tpu__shm_seg_size(int n, size_t slot)
{
	return SHM_LINE * (1 + (size_t)n) + 2 * slot * (size_t)n +
	       (size_t)n * SHM_RING * (sizeof(struct shm_desc) + SHM_SMALL);
}

static void futex_wake(_Atomic uint32_t *w)
{
	syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void futex_sleep(_Atomic uint32_t *w, uint32_t val, uint64_t ns)
{
	struct timespec ts = { .tv_sec = (time_t)(ns / 1000000000u),
			       .tv_nsec = (long)(ns % 1000000000u) };

	/* Shared (not private): the word lives in several processes' mappings. */
	syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, val, &ts, NULL, 0);
}

/* A slot's parts are counted in 16 bits, below SHM_REDUCED. */
static bool slot_parts_ok(size_t slot)
{
	return slot / SHM_PART < SHM_REDUCED - 1;
}

bool tpu__shm_seg_args_ok(int n, size_t slot)
{
	return n >= 1 && n <= TPU__SHM_MAX_MEMBERS && slot && !(slot % 64) && slot_parts_ok(slot);
}

void tpu__shm_seg_init(void *region, int n, size_t slot)
{
	struct shm_hdr *h = region;

	h->magic = SHM_MAGIC;
	h->n = (uint32_t)n;
	h->slot = slot;
	atomic_init(&h->abort, 0);
}

tpu_status tpu__shm_coll_create(int n, size_t slot, int *fd)
{
	size_t size = tpu__shm_seg_size(n, slot);
	struct shm_hdr *h;
	int f;

	if (n < 1 || n > TPU__SHM_MAX_MEMBERS || !slot || slot % 64 || !slot_parts_ok(slot) || !fd)
		return -EINVAL;
	f = memfd_create("tpu-coll", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (f < 0)
		return -errno;
	if (ftruncate(f, (off_t)size))
		goto fail;
	h = mmap(NULL, SHM_LINE, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
	if (h == MAP_FAILED)
		goto fail;
	tpu__shm_seg_init(h, n, slot);
	munmap(h, SHM_LINE);
	if (fcntl(f, F_ADD_SEALS, SEALS))
		goto fail;
	*fd = f;
	return 0;
fail:
	{
		tpu_status st = -errno;

		close(f);
		return st;
	}
}

tpu_status tpu__shm_check_fd(int fd, size_t size)
{
	struct stat sb;
	int seals = fcntl(fd, F_GET_SEALS);

	/* Not a memfd (or not sealed): a file someone else could grow, shrink or truncate. */
	if (seals < 0 || (seals & SEALS) != SEALS)
		return -EPERM;
	if (fstat(fd, &sb) || !S_ISREG(sb.st_mode) || (uint64_t)sb.st_size != size)
		return -EPROTO;
	return 0;
}

tpu_status tpu__shm_take_fd(pid_t pid, int num, int *fd)
{
	int pidfd;
	tpu_status st = 0;

	*fd = -1;
	if (pid <= 0 || num < 0)
		return -EINVAL;
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (pidfd < 0 && errno != ENOSYS)
		return errno == ESRCH ? TPU_E_PEER_GONE : -errno;
	*fd = pidfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pidfd, num, 0);
	if (*fd < 0 && (pidfd < 0 || errno == ENOSYS)) {
		char path[64];

		/*
		 * Before Linux 5.6 (or under valgrind): the same file through
		 * /proc, which the kernel lets this process open under the
		 * same ptrace check.
		 */
		snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, num);
		*fd = open(path, O_RDWR | O_CLOEXEC);
	}
	if (*fd < 0)
		st = -errno;
	if (pidfd >= 0)
		close(pidfd);
	return st;
}

tpu_status tpu__shm_coll_attach(int fd, int n, int rank, size_t slot, const pid_t *pids,
				struct tpu__shm_coll **out)
{
	size_t size;
	void *base;
	tpu_status st;

	if (!tpu__shm_seg_args_ok(n, slot) || rank < 0 || rank >= n || !pids || !out)
		return -EINVAL;
	size = tpu__shm_seg_size(n, slot);
	st = tpu__shm_check_fd(fd, size);
	if (st)
		return st;
	base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED)
		return -errno;
	/* A child forked later has no part in the group: the segment goes when the members do. */
	madvise(base, size, MADV_DONTFORK);
	st = tpu__shm_coll_attach_at(base, true, n, rank, slot, pids, out);
	if (st)
		munmap(base, size);
	return st;
}

tpu_status tpu__shm_coll_attach_at(void *base, bool own, int n, int rank, size_t slot,
				   const pid_t *pids, struct tpu__shm_coll **out)
{
	struct tpu__shm_coll *s;
	const struct shm_hdr *h;
	tpu_status st;

	if (!base || !tpu__shm_seg_args_ok(n, slot) || rank < 0 || rank >= n || !pids || !out)
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->n = n;
	s->rank = rank;
	s->slot = slot;
	s->size = tpu__shm_seg_size(n, slot);
	s->way = "";
	s->kfd = -1;
	s->pids = calloc((size_t)n, sizeof(*s->pids));
	s->pidfds = calloc((size_t)n, sizeof(*s->pidfds));
	s->tmp = aligned_alloc(64, TPU__COLL_PIECE);
	if (!s->pids || !s->pidfds || !s->tmp) {
		st = -ENOMEM;
		goto fail;
	}
	for (int r = 0; r < n; r++)
		s->pidfds[r] = -1;
	h = base;
	if (h->magic != SHM_MAGIC || h->n != (uint32_t)n || h->slot != slot) {
		st = -EPROTO;
		goto fail;
	}
	for (int r = 0; r < n; r++) {
		if (r == rank)
			continue;
		if (pids[r] <= 0) {
			st = -EINVAL;
			goto fail;
		}
		s->pids[r] = pids[r];
		s->pidfds[r] = (int)syscall(SYS_pidfd_open, pids[r], 0);
		/* Before Linux 5.3 (or under valgrind): the pid's /proc entry instead. */
		if (s->pidfds[r] < 0 && errno != ENOSYS) {
			st = errno == ESRCH ? TPU_E_PEER_GONE : -errno;
			goto fail;
		}
	}
	{
		cpu_set_t cpus;

		s->spin_ns = !sched_getaffinity(0, sizeof(cpus), &cpus) &&
			     n <= CPU_COUNT(&cpus) ? YIELD_NS : SPIN_NS;
	}
	/* Only now: a failure above leaves the caller's mapping to the caller. */
	s->base = base;
	s->own_base = own;
	s->pids[rank] = getpid();
	shm_line(s, rank)->pid = (int32_t)getpid();
	s->seq = atomic_load(&shm_line(s, rank)->seq);
	*out = s;
	return 0;
fail:
	tpu__shm_coll_detach(s);
	return st;
}

void tpu__shm_coll_detach(struct tpu__shm_coll *s)
{
	if (!s)
		return;
	if (s->base && s->own_base)
		munmap(s->base, s->size);
	for (int r = 0; s->pidfds && r < s->n; r++)
		if (s->pidfds[r] >= 0)
			close(s->pidfds[r]);
	free(s->pidfds);
	free(s->pids);
	free(s->tmp);
	if (s->kfd >= 0) {
		tpu__shm_kmod_end(s);
		close(s->kfd);
	}
	free(s->eps);
	free(s);
}

static bool reached(uint32_t seq, uint32_t target)
{
	return (int32_t)(seq - target) >= 0;
}

/* What another member wrote to the header: only the statuses a member writes there. */
tpu_status tpu__shm_aborted(const struct tpu__shm_coll *s)
{
	int32_t a = atomic_load_explicit(&shm_hdr(s)->abort, memory_order_acquire);

	if (!a)
		return 0;
	if (a == TPU_E_PEER_GONE || a == TPU_E_COLL_MISMATCH)
		return a;
	return -ECONNABORTED;
}

/* Without a pidfd: gone, or a zombie ("Z") or dead ("X") in /proc/PID/stat. */
static bool proc_dead(pid_t pid)
{
	char path[48], buf[256], *paren;
	ssize_t len;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT || errno == ESRCH;
	len = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (len <= 0)
		return true;
	buf[len] = 0;
	paren = strrchr(buf, ')');
	return paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}

bool tpu__shm_dead(const struct tpu__shm_coll *s, int r, int within_ms)
{
	struct pollfd p = { .fd = s->pidfds[r], .events = POLLIN };

	if (s->pidfds[r] < 0) {
		if (within_ms > 0 && !proc_dead(s->pids[r]))
			poll(NULL, 0, within_ms);
		return proc_dead(s->pids[r]);
	}
	return poll(&p, 1, within_ms) == 1 && (p.revents & (POLLIN | POLLHUP));
}

tpu_status tpu__shm_fail(struct tpu__shm_coll *s, tpu_status st, tpu_status peer_st)
{
	int32_t zero = 0;

	if (!s->failed)
		s->failed = st;
	atomic_compare_exchange_strong(&shm_hdr(s)->abort, &zero, (int32_t)peer_st);
	for (int r = 0; r < s->n; r++) {
		futex_wake(&shm_line(s, r)->seq);
		futex_wake(&shm_line(s, r)->ready);
	}
	return s->failed;
}

/*
 * The first member to find a mismatch writes its reason before it fails
 * the segment, so that a member that returned early from that call (and
 * fails a later one) can say why.
 */
tpu_status tpu__shm_mismatch(struct tpu__shm_coll *s, const char *why)
{
	struct shm_hdr *h = shm_hdr(s);
	uint32_t zero = 0;

	if (atomic_compare_exchange_strong(&h->why_state, &zero, 1)) {
		snprintf(h->why, sizeof(h->why), "%s", why ? why : "");
		atomic_store_explicit(&h->why_state, 2, memory_order_release);
	}
	return tpu__shm_fail(s, TPU_E_COLL_MISMATCH, TPU_E_COLL_MISMATCH);
}

void tpu__shm_why(const struct tpu__shm_coll *s, char *buf, size_t size)
{
	const struct shm_hdr *h = shm_hdr(s);
	size_t i = 0;

	if (!buf || !size)
		return;
	if (atomic_load_explicit(&h->why_state, memory_order_acquire) == 2)
		for (; i + 1 < size && i < sizeof(h->why) && h->why[i]; i++)
			buf[i] = h->why[i] >= 0x20 && h->why[i] < 0x7f ? h->why[i] : '?';
	buf[i] = 0;
}

/* Say which CPU this member runs on (a plain store, and only when it changed). */
static int here(struct tpu__shm_coll *s)
{
	struct shm_line *l = shm_line(s, s->rank);
	int cpu = sched_getcpu();

	if (atomic_load_explicit(&l->cpu, memory_order_relaxed) != cpu)
		atomic_store_explicit(&l->cpu, cpu, memory_order_relaxed);
	return cpu;
}

void tpu__shm_publish(struct tpu__shm_coll *s)
{
	struct shm_line *l = shm_line(s, s->rank);

	here(s);
	atomic_store(&l->seq, ++s->seq);
	if (atomic_load(&l->waiters))
		futex_wake(&l->seq);
}

/* Every so often while waiting: another member's failure, a death, the deadline. */
static tpu_status check(struct tpu__shm_coll *s, int r, uint64_t deadline_ns, bool look)
{
	tpu_status st = tpu__shm_aborted(s);

	if (st) {
		s->failed = st;
		return st;
	}
	if (s->cancel && atomic_load_explicit(s->cancel, memory_order_relaxed))
		return tpu__shm_fail(s, TPU_E_CLOSED, -ECONNABORTED);
	if (look && tpu__shm_dead(s, r, 0)) {
		tpu__log_debug("coll: shm: member %d (pid %d) died", r, (int)s->pids[r]);
		return tpu__shm_fail(s, TPU_E_PEER_GONE, TPU_E_PEER_GONE);
	}
	if (deadline_ns && tpu__mono_ns() >= deadline_ns)
		return tpu__shm_fail(s, -ETIMEDOUT, -ECONNABORTED);
	return 0;
}

/* Phases: a serial number, compared so that it may wrap. */
static bool phase_reached(uint32_t v, uint32_t target)
{
	return reached(v, target);
}

/* Parts: the same call (its low 16 bits) with as many parts, or a later call. */
static bool parts_reached(uint32_t v, uint32_t target)
{
	int16_t calls = (int16_t)((v >> 16) - (target >> 16));

	return calls > 0 || (!calls && (v & 0xffffu) >= (target & 0xffffu));
}

/* Wait until @ok(@w, @target), @w being a word of member @r's line. */
static tpu_status wait_word(struct tpu__shm_coll *s, int r, _Atomic uint32_t *w,
			    bool (*ok)(uint32_t, uint32_t), uint32_t target, uint64_t deadline_ns)
{
	struct shm_line *l = shm_line(s, r);
	uint64_t start;
	tpu_status st;

	if (s->failed)
		return s->failed;
	/* Often there already: no clock read. */
	if (ok(atomic_load_explicit(w, memory_order_acquire), target))
		return 0;
	start = tpu__mono_ns();
	for (unsigned int i = 1;; i++) {
		uint64_t spun;

		if (ok(atomic_load_explicit(w, memory_order_acquire), target))
			return 0;
		if (i & 15) {
			tpu__cpu_relax();
			continue;
		}
		st = check(s, r, deadline_ns, false);
		if (st)
			return st;
		spun = tpu__mono_ns() - start;
		if (spun > (s->spin_ns == SPIN_NS ? CROWD_SLEEP_NS : YIELD_NS))
			break;
		/*
		 * The peer last looked from this very CPU: it waits for this
		 * core, and runs only when this member gives it up.
		 */
		if (spun > s->spin_ns ||
		    atomic_load_explicit(&l->cpu, memory_order_relaxed) == here(s))
			sched_yield();
	}
	for (;;) {
		uint64_t ns = TPU__SHM_LIVENESS_NS, now = tpu__mono_ns();
		uint32_t v;

		if (deadline_ns && deadline_ns > now && deadline_ns - now < ns)
			ns = deadline_ns - now;
		atomic_fetch_add(&l->waiters, 1);
		v = atomic_load(w);
		if (!ok(v, target))
			futex_sleep(w, v, ns);
		atomic_fetch_sub(&l->waiters, 1);
		if (ok(atomic_load_explicit(w, memory_order_acquire), target))
			return 0;
		st = check(s, r, deadline_ns, true);
		if (st)
			return st;
	}
}

tpu_status tpu__shm_wait(struct tpu__shm_coll *s, int r, uint32_t target, uint64_t deadline_ns)
{
	return wait_word(s, r, &shm_line(s, r)->seq, phase_reached, target, deadline_ns);
}

/* Call k is k + 1 there: the word's first value, 0, names no call. */
static uint32_t parts_word(uint64_t call, uint32_t parts)
{
	return (uint32_t)((call + 1) & 0xffffu) << 16 | (parts & 0xffffu);
}

void tpu__shm_ready(struct tpu__shm_coll *s, uint64_t call, uint32_t parts)
{
	struct shm_line *l = shm_line(s, s->rank);

	atomic_store(&l->ready, parts_word(call, parts));
	if (atomic_load(&l->waiters))
		futex_wake(&l->ready);
}

tpu_status tpu__shm_wait_ready(struct tpu__shm_coll *s, int r, uint64_t call, uint32_t parts,
			       uint64_t deadline_ns)
{
	return wait_word(s, r, &shm_line(s, r)->ready, parts_reached, parts_word(call, parts),
			 deadline_ns);
}

bool tpu__shm_arrived(const struct tpu__shm_coll *s, int r, uint64_t call)
{
	/* Sequentially consistent, like the owner's store: of two members, one sees the other. */
	return parts_reached(atomic_load(&shm_line(s, r)->ready), parts_word(call, 0));
}

tpu_status tpu__shm_barrier(struct tpu__shm_coll *s, uint64_t deadline_ns)
{
	tpu_status st = s->failed;

	if (st)
		return st;
	tpu__shm_publish(s);
	return tpu__shm_wait_all(s, deadline_ns);
}

tpu_status tpu__shm_wait_all(struct tpu__shm_coll *s, uint64_t deadline_ns)
{
	tpu_status st = s->failed;

	if (st)
		return st;
	/* Starting after this member's own rank spreads the first waits over the peers. */
	for (int k = 1; k < s->n && !st; k++)
		st = tpu__shm_wait(s, (s->rank + k) % s->n, s->seq, deadline_ns);
	/* A member may have published this phase and failed after. */
	if (!st)
		st = tpu__shm_aborted(s);
	if (st && !s->failed)
		s->failed = st;
	return st;
}

void tpu__shm_coll_fail(struct tpu__shm_coll *s, tpu_status st)
{
	if (s)
		tpu__shm_fail(s, st, -ECONNABORTED);
}

void tpu__shm_coll_yield(struct tpu__shm_coll *s)
{
	if (s)
		s->spin_ns = 0;
}
