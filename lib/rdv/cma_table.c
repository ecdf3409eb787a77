// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The cma rendezvous key table in shared memory; cma_table.h explains the
 * layout, the slot states and how a dead member is recognised.
 */
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "cma_table.h"
#include "rdv.h"

#define CACHELINE	64
#define NO_MEMBER	((struct tpu__cma_who){ .idx = UINT32_MAX, .gen = 0 })

enum { MEMBER_FREE = 0, MEMBER_LIVE = 1 };

struct tpu__cma_header {
	char magic[TPU__CMA_MAGIC_LEN];
	uint32_t version;
	uint32_t nslots;
	uint32_t max_key;
	uint32_t nmembers;
	/* A 32-bit process cannot share a 64-bit one's mutexes. */
	uint32_t mutex_size;
	uint32_t word_size;
	uint64_t size;
	uint64_t pid_ns;
	pthread_mutex_t lock;
	uint32_t wake;			/* the futex word; atomic access only */
	int32_t abort_status;
	uint64_t next_seq;
	uint32_t used;
	uint32_t hwm;			/* slots from here on are all FREE */
	uint32_t deaths;		/* members found dead so far; atomic access */
	uint32_t joins;			/* members joined so far; atomic access */
	uint32_t sleepers;		/* threads in tpu__cma_wait(); atomic access */
	uint32_t member_hwm;		/* member slots from here on never used; atomic access */
	uint32_t futex_wakes;		/* FUTEX_WAKE calls on the wake word; atomic access */
};

struct tpu__cma_member {
	pthread_mutex_t alive;		/* locked by the member while joined */
	uint32_t state;
	uint32_t gen;
	int32_t pid;
	uint32_t reserved;
	uint64_t probe_addr;
} __attribute__((aligned(CACHELINE)));

struct tpu__cma_slot {
	uint32_t state;			/* stored last when a slot is filled */
	uint32_t key_len;
	uint64_t key_hash;
	uint64_t seq;
	uint64_t addr;
	uint64_t len;
	int32_t pid;
	uint32_t inl;			/* 1: the bytes are in the slot's inline area */
	struct tpu__cma_who producer;
	struct tpu__cma_who consumer;
} __attribute__((aligned(CACHELINE)));

static size_t align_up(size_t v, size_t a)
{
	return (v + a - 1) / a * a;
}

static size_t off_members(void)
{
	return align_up(sizeof(struct tpu__cma_header), CACHELINE);
}

static size_t off_slots(void)
{
	return off_members() + TPU__CMA_MEMBERS * sizeof(struct tpu__cma_member);
}

static size_t off_inline(void)
{
	return align_up(off_slots() + TPU__CMA_SLOTS * sizeof(struct tpu__cma_slot), CACHELINE);
}

static size_t off_keys(void)
{
	return align_up(off_inline() + (size_t)TPU__CMA_SLOTS * TPU__CMA_INLINE_MAX, CACHELINE);
}

static size_t table_size(void)
{
	return align_up(off_keys() + (size_t)TPU__CMA_SLOTS * TPU__CMA_MAX_KEY, 4096);
}

static void set_views(struct tpu__cma_table *t, void *map)
{
	uint8_t *base = map;

	t->hdr = map;
	t->members = (struct tpu__cma_member *)(base + off_members());
	t->slots = (struct tpu__cma_slot *)(base + off_slots());
	t->keys = base + off_keys();
	t->inl = base + off_inline();
}

static tpu_status init_shared_mutex(pthread_mutex_t *m)
{
	pthread_mutexattr_t a;
	int rc;

	if (pthread_mutexattr_init(&a))
		return -ENOMEM;
	rc = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	if (!rc)
		rc = pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	if (!rc)
		rc = pthread_mutex_init(m, &a);
	pthread_mutexattr_destroy(&a);
	return -rc;
}

static tpu_status init_table(struct tpu__cma_table *t, uint64_t pid_ns)
{
	struct tpu__cma_header *h = t->hdr;
	tpu_status st;
	uint32_t i;

	h->version = TPU__CMA_VERSION;
	h->nslots = TPU__CMA_SLOTS;
	h->max_key = TPU__CMA_MAX_KEY;
	h->nmembers = TPU__CMA_MEMBERS;
	h->mutex_size = sizeof(pthread_mutex_t);
	h->word_size = sizeof(void *);
	h->size = t->size;
	h->pid_ns = pid_ns;
	h->next_seq = 1;
	st = init_shared_mutex(&h->lock);
	for (i = 0; !st && i < TPU__CMA_MEMBERS; i++)
		st = init_shared_mutex(&t->members[i].alive);
	/* The magic last: a table is recognisable only once complete. */
	if (!st)
		memcpy(h->magic, TPU__CMA_MAGIC, TPU__CMA_MAGIC_LEN);
	return st;
}

tpu_status tpu__cma_table_create(struct tpu__cma_table *t, uint64_t pid_ns)
{
	void *map;
	tpu_status st;

	if (!t)
		return -EINVAL;
	t->hdr = NULL;
	t->size = table_size();
	t->fd = memfd_create("tpu-cma-rendezvous", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (t->fd < 0)
		return tpu__errno();
	/* Sealed size: no member can shrink the table under the others (SIGBUS). */
	if (ftruncate(t->fd, (off_t)t->size) ||
	    fcntl(t->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		st = tpu__errno();
		close(t->fd);
		return st;
	}
	map = mmap(NULL, t->size, PROT_READ | PROT_WRITE, MAP_SHARED, t->fd, 0);
	if (map == MAP_FAILED) {
		st = tpu__errno();
		close(t->fd);
		return st;
	}
	set_views(t, map);
	st = init_table(t, pid_ns);
	if (st)
		tpu__cma_table_close(t);
	return st;
}

bool tpu__cma_fd_is_table(int fd)
{
	char magic[TPU__CMA_MAGIC_LEN];

	return fd >= 0 && pread(fd, magic, sizeof(magic), 0) == (ssize_t)sizeof(magic) &&
	       !memcmp(magic, TPU__CMA_MAGIC, sizeof(magic));
}

static bool layout_matches(const struct tpu__cma_header *h, size_t size)
{
	return !memcmp(h->magic, TPU__CMA_MAGIC, TPU__CMA_MAGIC_LEN) &&
	       h->version == TPU__CMA_VERSION && h->nslots == TPU__CMA_SLOTS &&
	       h->max_key == TPU__CMA_MAX_KEY && h->nmembers == TPU__CMA_MEMBERS &&
	       h->mutex_size == sizeof(pthread_mutex_t) && h->word_size == sizeof(void *) &&
	       h->size == size;
}

tpu_status tpu__cma_table_open(struct tpu__cma_table *t, int fd)
{
	struct stat sb;
	void *map;
	tpu_status st;

	if (!t || fd < 0)
		return -EINVAL;
	t->hdr = NULL;
	if (fstat(fd, &sb))
		return tpu__errno();
	t->size = table_size();
	if (!S_ISREG(sb.st_mode) || (uint64_t)sb.st_size != t->size || !tpu__cma_fd_is_table(fd))
		return -EINVAL;
	t->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (t->fd < 0)
		return tpu__errno();
	map = mmap(NULL, t->size, PROT_READ | PROT_WRITE, MAP_SHARED, t->fd, 0);
	if (map == MAP_FAILED) {
		st = tpu__errno();
		close(t->fd);
		return st;
	}
	set_views(t, map);
	if (!layout_matches(t->hdr, t->size)) {
		/* Another version's protocol (its wake-ups, say) must not meet ours. */
		if (t->hdr->version != TPU__CMA_VERSION)
			tpu__log_debug("cma table: version %u, this library speaks %u: refused",
				       t->hdr->version, TPU__CMA_VERSION);
		tpu__cma_table_close(t);
		return -EINVAL;
	}
	return 0;
}

void tpu__cma_table_close(struct tpu__cma_table *t)
{
	if (!t || !t->hdr)
		return;
	munmap(t->hdr, t->size);
	close(t->fd);
	t->hdr = NULL;
	t->fd = -1;
}

uint64_t tpu__cma_table_pid_ns(const struct tpu__cma_table *t)
{
	return t->hdr->pid_ns;
}

/* --- wakeups ------------------------------------------------------------ */

static long futex(uint32_t *word, int op, uint32_t val, const struct timespec *ts)
{
	return syscall(SYS_futex, word, op, val, ts, NULL, 0);
}

uint32_t tpu__cma_wake_seq(const struct tpu__cma_table *t)
{
	return __atomic_load_n(&t->hdr->wake, __ATOMIC_ACQUIRE);
}

void tpu__cma_wake(struct tpu__cma_table *t)
{
	/* Sequentially consistent, against the sleeper's count-then-check. */
	__atomic_add_fetch(&t->hdr->wake, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&t->hdr->sleepers, __ATOMIC_SEQ_CST)) {
		__atomic_add_fetch(&t->hdr->futex_wakes, 1, __ATOMIC_RELAXED);
		futex(&t->hdr->wake, FUTEX_WAKE, INT_MAX, NULL);
	}
}

void tpu__cma_wake_lazy(struct tpu__cma_table *t)
{
	__atomic_add_fetch(&t->hdr->wake, 1, __ATOMIC_SEQ_CST);
}

uint32_t tpu__cma_futex_wakes(const struct tpu__cma_table *t)
{
	return __atomic_load_n(&t->hdr->futex_wakes, __ATOMIC_RELAXED);
}

tpu_status tpu__cma_wait(struct tpu__cma_table *t, uint32_t seen, int64_t timeout_ns)
{
	struct timespec ts;
	tpu_status rc;

	if (timeout_ns >= 0) {
		ts.tv_sec = (time_t)(timeout_ns / 1000000000);
		ts.tv_nsec = (long)(timeout_ns % 1000000000);
	}
	__atomic_add_fetch(&t->hdr->sleepers, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&t->hdr->wake, __ATOMIC_SEQ_CST) != seen)
		rc = 0;		/* changed already, which is a wakeup too */
	else if (futex(&t->hdr->wake, FUTEX_WAIT, seen, timeout_ns >= 0 ? &ts : NULL) == 0)
		rc = 0;
	else
		rc = errno == EAGAIN ? 0 : tpu__errno();	/* EAGAIN: changed already */
	__atomic_sub_fetch(&t->hdr->sleepers, 1, __ATOMIC_SEQ_CST);
	return rc;
}

/* --- the lock ----------------------------------------------------------- */

/* The last holder died mid-update: recount, since slot states are whole. */
static void repair(struct tpu__cma_table *t)
{
	struct tpu__cma_header *h = t->hdr;
	uint32_t i, used = 0, hwm = 0;

	for (i = 0; i < TPU__CMA_SLOTS; i++) {
		struct tpu__cma_slot *s = &t->slots[i];

		if (s->state > TPU__CMA_DONE || s->key_len > TPU__CMA_MAX_KEY)
			s->state = TPU__CMA_FREE;
		if (s->state != TPU__CMA_FREE) {
			used++;
			hwm = i + 1;
		}
		if (s->seq >= h->next_seq)
			h->next_seq = s->seq + 1;
	}
	h->used = used;
	h->hwm = hwm;
}

/*
 * The table lock is held for a few slot updates only, so a contended one
 * is spun for briefly before sleeping: on an idle machine a futex sleep and
 * wake-up cost tens of microseconds, more than the whole hand-off.  Not
 * while this thread backs off from spinning (it was descheduled mid-spin
 * lately), where the holder may need this core to finish.
 */
#define LOCK_SPINS	256
#define LOCK_RELAX	16

static int lock_spin_then_sleep(pthread_mutex_t *lock)
{
	int rc, i, j;

	if (!tpu__spin_contended(tpu__mono_ns())) {
		for (i = 0; i < LOCK_SPINS; i++) {
			rc = pthread_mutex_trylock(lock);
			if (rc != EBUSY)
				return rc;
			for (j = 0; j < LOCK_RELAX; j++)
				tpu__cpu_relax();
		}
	}
	return pthread_mutex_lock(lock);
}

tpu_status tpu__cma_lock(struct tpu__cma_table *t)
{
	int rc = lock_spin_then_sleep(&t->hdr->lock);

	if (rc == EOWNERDEAD) {
		repair(t);
		rc = pthread_mutex_consistent(&t->hdr->lock);
	}
	return -rc;
}

void tpu__cma_unlock(struct tpu__cma_table *t)
{
	pthread_mutex_unlock(&t->hdr->lock);
}

/* --- members ------------------------------------------------------------ */

static bool same_who(struct tpu__cma_who a, struct tpu__cma_who b)
{
	return a.idx == b.idx && a.gen == b.gen;
}

static void member_free(struct tpu__cma_member *m)
{
	m->state = MEMBER_FREE;
	m->gen++;
}

/*
 * Whether a member's liveness mutex reads as held by a thread that has not
 * died, without writing to it: a failing trylock is a locked write to a
 * line the other processes look at too, and every send and receive looks
 * at every member.  glibc keeps a robust mutex's owner in __lock, and the
 * kernel, when the owner dies, clears it and sets FUTEX_OWNER_DIED before
 * the process can be waited for.  Elsewhere, false: ask trylock.
 */
static bool held_by_a_live_owner(pthread_mutex_t *mutex)
{
#ifdef __GLIBC__
	unsigned int word = (unsigned int)__atomic_load_n(&mutex->__data.__lock,
							  __ATOMIC_ACQUIRE);

	return (word & FUTEX_TID_MASK) && !(word & FUTEX_OWNER_DIED);
#else
	(void)mutex;
	return false;
#endif
}

bool tpu__cma_member_alive(struct tpu__cma_table *t, struct tpu__cma_who who)
{
	struct tpu__cma_member *m;
	int rc;

	if (who.idx >= TPU__CMA_MEMBERS)
		return false;
	m = &t->members[who.idx];
	if (m->state != MEMBER_LIVE || m->gen != who.gen)
		return false;
	if (held_by_a_live_owner(&m->alive))
		return true;
	rc = pthread_mutex_trylock(&m->alive);
	/* EDEADLK: the member's own thread asks about itself. */
	if (rc == EBUSY || rc == EDEADLK)
		return true;
	if (rc == EOWNERDEAD)
		pthread_mutex_consistent(&m->alive);
	if (rc == 0 || rc == EOWNERDEAD)
		pthread_mutex_unlock(&m->alive);
	member_free(m);
	/* Joined and not left: its process died.  Every helper hears of it. */
	__atomic_add_fetch(&t->hdr->deaths, 1, __ATOMIC_SEQ_CST);
	tpu__cma_wake(t);
	return false;
}

uint32_t tpu__cma_deaths(const struct tpu__cma_table *t)
{
	return __atomic_load_n(&t->hdr->deaths, __ATOMIC_SEQ_CST);
}

uint32_t tpu__cma_joins(const struct tpu__cma_table *t)
{
	return __atomic_load_n(&t->hdr->joins, __ATOMIC_SEQ_CST);
}

uint32_t tpu__cma_member_end(const struct tpu__cma_table *t)
{
	uint32_t end = __atomic_load_n(&t->hdr->member_hwm, __ATOMIC_SEQ_CST);

	return end < TPU__CMA_MEMBERS ? end : TPU__CMA_MEMBERS;
}

bool tpu__cma_members_look_alive(const struct tpu__cma_table *t)
{
	uint32_t i, end = tpu__cma_member_end(t);

	for (i = 0; i < end; i++) {
		struct tpu__cma_member *m = &t->members[i];

		if (__atomic_load_n(&m->state, __ATOMIC_ACQUIRE) == MEMBER_LIVE &&
		    !held_by_a_live_owner(&m->alive))
			return false;
	}
	return true;
}

bool tpu__cma_member_pid(struct tpu__cma_table *t, uint32_t idx, struct tpu__cma_who *who,
			 pid_t *pid)
{
	struct tpu__cma_member *m;

	if (idx >= TPU__CMA_MEMBERS)
		return false;
	m = &t->members[idx];
	*who = (struct tpu__cma_who){ idx, m->gen };
	if (!tpu__cma_member_alive(t, *who))
		return false;
	*pid = m->pid;
	return true;
}

tpu_status tpu__cma_member_join(struct tpu__cma_table *t, uint64_t probe_addr,
				struct tpu__cma_who *me)
{
	tpu_status st = tpu__cma_lock(t);
	uint32_t i;
	int rc;

	if (st)
		return st;
	st = -EUSERS;
	for (i = 0; i < TPU__CMA_MEMBERS; i++) {
		struct tpu__cma_member *m = &t->members[i];

		if (m->state == MEMBER_LIVE &&
		    tpu__cma_member_alive(t, (struct tpu__cma_who){ i, m->gen }))
			continue;
		/* EBUSY: its last member has left but not yet let go of the mutex. */
		rc = pthread_mutex_trylock(&m->alive);
		if (rc == EOWNERDEAD)
			rc = pthread_mutex_consistent(&m->alive);
		if (rc)
			continue;
		m->gen++;
		m->pid = getpid();
		m->probe_addr = probe_addr;
		m->state = MEMBER_LIVE;
		*me = (struct tpu__cma_who){ i, m->gen };
		if (__atomic_load_n(&t->hdr->member_hwm, __ATOMIC_RELAXED) <= i)
			__atomic_store_n(&t->hdr->member_hwm, i + 1, __ATOMIC_SEQ_CST);
		__atomic_add_fetch(&t->hdr->joins, 1, __ATOMIC_SEQ_CST);
		st = 0;
		break;
	}
	tpu__cma_unlock(t);
	/* The other members' helpers hear of the newcomer, to watch it. */
	if (!st)
		tpu__cma_wake(t);
	return st;
}

void tpu__cma_member_leave(struct tpu__cma_table *t, struct tpu__cma_who me)
{
	struct tpu__cma_member *m;
	bool mine;

	if (me.idx >= TPU__CMA_MEMBERS)
		return;
	m = &t->members[me.idx];
	/* A failed lock still lets go of the member: the mutex is ours either way. */
	mine = !tpu__cma_lock(t);
	if (m->state == MEMBER_LIVE && m->gen == me.gen)
		member_free(m);
	if (mine)
		tpu__cma_unlock(t);
	pthread_mutex_unlock(&m->alive);
}

size_t tpu__cma_members(struct tpu__cma_table *t, const struct tpu__cma_who *self, pid_t *pids,
			uint64_t *probe_addrs, size_t max)
{
	uint32_t i, end = tpu__cma_member_end(t);
	size_t n = 0;

	for (i = 0; i < end && n < max; i++) {
		struct tpu__cma_member *m = &t->members[i];
		struct tpu__cma_who who = { i, m->gen };

		if ((self && same_who(*self, who)) || !tpu__cma_member_alive(t, who))
			continue;
		pids[n] = m->pid;
		probe_addrs[n] = m->probe_addr;
		n++;
	}
	return n;
}

/* --- slots -------------------------------------------------------------- */

/* FNV-1a: a cheap filter before comparing whole keys. */
static uint64_t key_hash(const uint8_t *key, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	while (len--)
		h = (h ^ *key++) * 0x100000001b3ULL;
	return h;
}

static uint8_t *slot_key(struct tpu__cma_table *t, uint32_t idx)
{
	return t->keys + (size_t)idx * TPU__CMA_MAX_KEY;
}

static uint32_t scan_end(struct tpu__cma_table *t)
{
	uint32_t hwm = t->hdr->hwm;

	return hwm < TPU__CMA_SLOTS ? hwm : TPU__CMA_SLOTS;
}

/* A pending (POSTED or CLAIMED) slot holding exactly this key. */
static bool pending_match(struct tpu__cma_table *t, uint32_t idx, const uint8_t *key,
			  size_t key_len, uint64_t hash)
{
	const struct tpu__cma_slot *s = &t->slots[idx];

	return (s->state == TPU__CMA_POSTED || s->state == TPU__CMA_CLAIMED) &&
	       s->key_hash == hash && s->key_len == key_len &&
	       !memcmp(slot_key(t, idx), key, key_len);
}

static void slot_free(struct tpu__cma_table *t, struct tpu__cma_slot *s)
{
	struct tpu__cma_header *h = t->hdr;

	__atomic_store_n(&s->state, TPU__CMA_FREE, __ATOMIC_RELEASE);
	if (h->used)
		h->used--;
	/* Keep scans as short as the slots in use, not as the busiest moment. */
	while (h->hwm && h->hwm <= TPU__CMA_SLOTS && t->slots[h->hwm - 1].state == TPU__CMA_FREE)
		h->hwm--;
}

/* Drop what nobody will ever reap: slots whose producer is gone. */
static bool reap_dead(struct tpu__cma_table *t, uint32_t *free_idx)
{
	uint32_t i, end = scan_end(t);
	bool found = false;

	for (i = 0; i < end; i++) {
		struct tpu__cma_slot *s = &t->slots[i];

		if (s->state == TPU__CMA_FREE || tpu__cma_member_alive(t, s->producer))
			continue;
		/* A live consumer still pulling finishes first, and drops it. */
		if (s->state == TPU__CMA_CLAIMED && tpu__cma_member_alive(t, s->consumer))
			continue;
		slot_free(t, s);
		if (!found)
			*free_idx = i;
		found = true;
	}
	return found;
}

static uint8_t *slot_inline(struct tpu__cma_table *t, uint32_t idx)
{
	return t->inl + (size_t)idx * TPU__CMA_INLINE_MAX;
}

/* @data: the bytes to keep in the slot (inline), or NULL: @addr in @pid. */
static tpu_status post(struct tpu__cma_table *t, struct tpu__cma_who me, pid_t pid,
		       const uint8_t *key, size_t key_len, uint64_t addr, const void *data,
		       uint64_t len, struct tpu__cma_ref *ref)
{
	struct tpu__cma_header *h = t->hdr;
	uint64_t hash = key_hash(key, key_len);
	uint32_t i, end = scan_end(t), idx = UINT32_MAX;
	struct tpu__cma_slot *s;

	if (key_len > TPU__CMA_MAX_KEY)
		return -ENAMETOOLONG;
	if (h->abort_status)
		return h->abort_status;
	for (i = 0; i < end; i++) {
		s = &t->slots[i];
		if (s->state == TPU__CMA_FREE) {
			if (idx == UINT32_MAX)
				idx = i;
			continue;
		}
		if (!pending_match(t, i, key, key_len, hash))
			continue;
		if (tpu__cma_member_alive(t, s->producer) || s->state == TPU__CMA_CLAIMED)
			return -EEXIST;
		slot_free(t, s);
		if (idx == UINT32_MAX)
			idx = i;
	}
	if (idx == UINT32_MAX && end < TPU__CMA_SLOTS)
		idx = end;
	if (idx == UINT32_MAX && !reap_dead(t, &idx))
		return -ENOSPC;
	/* Freeing on the way may have lowered the mark below the slot taken. */
	if (h->hwm <= idx)
		h->hwm = idx + 1;
	s = &t->slots[idx];
	memcpy(slot_key(t, idx), key, key_len);
	s->key_len = (uint32_t)key_len;
	s->key_hash = hash;
	s->seq = h->next_seq++;
	s->addr = addr;
	s->len = len;
	s->pid = pid;
	s->inl = data != NULL;
	if (data && len)
		memcpy(slot_inline(t, idx), data, (size_t)len);
	s->producer = me;
	s->consumer = NO_MEMBER;
	__atomic_store_n(&s->state, TPU__CMA_POSTED, __ATOMIC_RELEASE);
	h->used++;
	*ref = (struct tpu__cma_ref){ idx, s->seq };
	return 0;
}

tpu_status tpu__cma_post(struct tpu__cma_table *t, struct tpu__cma_who me, pid_t pid,
			 const uint8_t *key, size_t key_len, uint64_t addr, uint64_t len,
			 struct tpu__cma_ref *ref)
{
	return post(t, me, pid, key, key_len, addr, NULL, len, ref);
}

tpu_status tpu__cma_post_inline(struct tpu__cma_table *t, struct tpu__cma_who me, pid_t pid,
				const uint8_t *key, size_t key_len, const void *data,
				uint64_t len, struct tpu__cma_ref *ref)
{
	static const uint8_t none;

	if (len > TPU__CMA_INLINE_MAX || (!data && len))
		return -EINVAL;
	/* Not NULL even for no bytes: NULL means "not inline". */
	return post(t, me, pid, key, key_len, (uintptr_t)data, data ? data : &none, len, ref);
}

tpu_status tpu__cma_claim(struct tpu__cma_table *t, struct tpu__cma_who me, const uint8_t *key,
			  size_t key_len, uint64_t capacity, struct tpu__cma_claim *out)
{
	return tpu__cma_claim_into(t, me, key, key_len, capacity, NULL, out);
}

tpu_status tpu__cma_claim_into(struct tpu__cma_table *t, struct tpu__cma_who me,
			       const uint8_t *key, size_t key_len, uint64_t capacity, void *dst,
			       struct tpu__cma_claim *out)
{
	uint64_t hash = key_hash(key, key_len);
	uint32_t i, end = scan_end(t);
	bool orphan = false;

	if (key_len > TPU__CMA_MAX_KEY)
		return -ENAMETOOLONG;
	for (i = 0; i < end; i++) {
		struct tpu__cma_slot *s = &t->slots[i];

		if (!pending_match(t, i, key, key_len, hash))
			continue;
		if (s->state == TPU__CMA_CLAIMED && tpu__cma_member_alive(t, s->consumer))
			continue;
		if (!tpu__cma_member_alive(t, s->producer)) {
			/* Its producer posted this very key, then died: nobody else will. */
			slot_free(t, s);
			orphan = true;
			continue;
		}
		s->consumer = NO_MEMBER;
		s->state = TPU__CMA_POSTED;
		if (s->len > capacity) {
			out->len = s->len;
			return -EMSGSIZE;
		}
		s->consumer = me;
		*out = (struct tpu__cma_claim){
			.idx = i, .seq = s->seq, .pid = s->pid, .addr = s->addr, .len = s->len,
			.inl = s->inl != 0,
		};
		/* The length was checked when posted; the table is shared, so again. */
		if (out->inl && out->len > TPU__CMA_INLINE_MAX) {
			slot_free(t, s);
			return -EIO;
		}
		if (out->inl && dst) {
			if (out->len)
				memcpy(dst, slot_inline(t, i), (size_t)out->len);
			out->done = true;
			__atomic_store_n(&s->state, TPU__CMA_DONE, __ATOMIC_RELEASE);
		} else {
			__atomic_store_n(&s->state, TPU__CMA_CLAIMED, __ATOMIC_RELEASE);
		}
		return 0;
	}
	return orphan ? TPU_E_PEER_GONE : -EAGAIN;
}

const void *tpu__cma_inline_bytes(const struct tpu__cma_table *t, const struct tpu__cma_claim *c)
{
	if (c->idx >= TPU__CMA_SLOTS || c->len > TPU__CMA_INLINE_MAX)
		return NULL;
	return t->inl + (size_t)c->idx * TPU__CMA_INLINE_MAX;
}

static struct tpu__cma_slot *slot_of(struct tpu__cma_table *t, uint32_t idx, uint64_t seq)
{
	struct tpu__cma_slot *s;

	if (idx >= TPU__CMA_SLOTS)
		return NULL;
	s = &t->slots[idx];
	return s->state != TPU__CMA_FREE && s->seq == seq ? s : NULL;
}

tpu_status tpu__cma_finish(struct tpu__cma_table *t, struct tpu__cma_who me,
			   const struct tpu__cma_claim *c, tpu_status pull_status)
{
	struct tpu__cma_slot *s = slot_of(t, c->idx, c->seq);

	/* Only ours while we live: nobody takes a live consumer's claim. */
	if (!s || s->state != TPU__CMA_CLAIMED || !same_who(s->consumer, me))
		return -EIO;
	if (!tpu__cma_member_alive(t, s->producer)) {
		slot_free(t, s);
		return -ESRCH;
	}
	if (!pull_status) {
		/* Released: a producer that sees DONE without the lock sees the pull over. */
		__atomic_store_n(&s->state, TPU__CMA_DONE, __ATOMIC_RELEASE);
		return 0;
	}
	s->consumer = NO_MEMBER;
	s->state = TPU__CMA_POSTED;
	/* The producer is alive, so its pid was right: something else failed. */
	return pull_status == -ESRCH ? -EIO : pull_status;
}

enum tpu__cma_state tpu__cma_state_of(struct tpu__cma_table *t, struct tpu__cma_ref ref)
{
	struct tpu__cma_slot *s = slot_of(t, ref.idx, ref.seq);

	if (!s)
		return TPU__CMA_FREE;
	if (s->state == TPU__CMA_CLAIMED && !tpu__cma_member_alive(t, s->consumer)) {
		s->consumer = NO_MEMBER;
		s->state = TPU__CMA_POSTED;
		/* Consumers waiting for this key must look again. */
		tpu__cma_wake(t);
	}
	return (enum tpu__cma_state)s->state;
}

bool tpu__cma_peek_key(const struct tpu__cma_table *t, const uint8_t *key, size_t key_len)
{
	uint64_t hash = key_hash(key, key_len);
	uint32_t i, end = __atomic_load_n(&t->hdr->hwm, __ATOMIC_ACQUIRE);

	if (end > TPU__CMA_SLOTS)
		end = TPU__CMA_SLOTS;
	for (i = 0; i < end; i++) {
		const struct tpu__cma_slot *s = &t->slots[i];
		/* The state first: the rest was written before a POSTED was stored. */
		uint32_t st = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);

		if ((st == TPU__CMA_POSTED || st == TPU__CMA_CLAIMED) &&
		    __atomic_load_n(&s->key_hash, __ATOMIC_RELAXED) == hash &&
		    __atomic_load_n(&s->key_len, __ATOMIC_RELAXED) == key_len)
			return true;
	}
	return false;
}

enum tpu__cma_state tpu__cma_peek_state(const struct tpu__cma_table *t, struct tpu__cma_ref ref)
{
	const struct tpu__cma_slot *s;
	uint32_t st;

	if (ref.idx >= TPU__CMA_SLOTS)
		return TPU__CMA_FREE;
	s = &t->slots[ref.idx];
	st = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
	if (st > TPU__CMA_DONE || __atomic_load_n(&s->seq, __ATOMIC_RELAXED) != ref.seq)
		return TPU__CMA_FREE;
	return (enum tpu__cma_state)st;
}

void tpu__cma_release(struct tpu__cma_table *t, struct tpu__cma_ref ref)
{
	struct tpu__cma_slot *s = slot_of(t, ref.idx, ref.seq);

	if (s)
		slot_free(t, s);
}

tpu_status tpu__cma_abort_status(struct tpu__cma_table *t)
{
	return __atomic_load_n(&t->hdr->abort_status, __ATOMIC_ACQUIRE);
}

tpu_status tpu__cma_abort(struct tpu__cma_table *t, tpu_status status)
{
	if (t->hdr->abort_status)
		return -EALREADY;
	__atomic_store_n(&t->hdr->abort_status, status, __ATOMIC_RELEASE);
	return 0;
}

uint32_t tpu__cma_used(struct tpu__cma_table *t)
{
	return t->hdr->used;
}
