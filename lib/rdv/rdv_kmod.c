// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The kmod rendezvous: a /dev/tensorpipe domain per rendezvous, one
 * endpoint per member, and SEND, RECV and CANCEL as io_uring commands on
 * the context's ring, so that no thread waits per operation: each CQE
 * becomes the op's result.  The module copies once, from the producer's
 * pinned pages into the consumer's; a given buffer of the context's own
 * endpoint is donated instead (its pages change owner), and recv_buffer
 * receives a donated region and maps it.  Tensors of at most KM_SMALL bytes
 * in memory the module does not know go through a slot of a region the
 * rendezvous allocated once (a memcpy each side), not through a
 * registration and a release per operation.
 *
 * The blocking calls skip the context thread (one wake-up per hand-off,
 * the module's own, instead of three: the caller's eventfd to the context
 * thread, the module's task work there, and that thread's post of the
 * caller's word).  A recv_wait started on the caller's thread is parked
 * (KM_PARKED) and its waiter issues the blocking TP_IOC_RECV itself when
 * it goes to sleep (km_wait_sleep), with the time left to its deadline; a
 * send_wait issues TP_IOC_SEND, which never blocks, from the caller's
 * thread (KM_SENT), and its completion, queued for read() on the endpoint,
 * is read by a waiter of the rendezvous: one at a time sleeps in poll() on
 * the endpoint and the kick eventfd (the reader), the others on a futex.
 * A cancel from another thread takes a parked receive that has not
 * entered the kernel yet, and otherwise repeats TP_IOC_CANCEL until the
 * module found it.  Everything else (callbacks, recv_buffer, GIVE, a
 * receive queued behind another of its key) goes through the ring.
 *
 * Peer death comes from the module (TP_FEAT_MEMBER_DEATH): every member
 * attaches with TP_DOMAIN_ATTACH_MEMBER, and when a member process dies
 * with its endpoint open, what the others had pending ends with
 * -EOWNERDEAD, reported as TPU_E_PEER_GONE, as the cma rendezvous does.
 */
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <liburing.h>
#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "rdv_kmod.h"

struct km_state {
	struct tpu_context *ctx;
	struct tpu__ep_ref *ep;
	int domain_fd;
	pthread_mutex_t lock;		/* what follows */
	struct km_cmd *cmds;		/* commands whose CQE is due */
	bool closing;
	struct km_regcache cache;
	uint64_t features;		/* the module's TPU_FEAT_* */
	bool have_zero;
	uint32_t zero_region;		/* for empty tensors, which cannot be registered */
	bool have_small;
	uint32_t small_region;		/* KM_SMALL_SLOTS slots of KM_SMALL bytes, mapped at small */
	uint8_t *small;
	uint64_t small_free;		/* bit i: slot i is free */
	unsigned int direct_sends;	/* KM_SENT commands: their completions are read() */
	bool reader;			/* a waiter reads them (km_wait_sleep) */
	/* Where waiters sleep (see the top of the file); atomic access only. */
	uint32_t wake_seq;		/* the futex word, bumped by every kick */
	unsigned int futex_sleepers;
	bool reader_asleep;		/* the reader is in poll(): write kick_fd */
	int kick_fd;
	uint64_t spin_base, spin_cur;	/* km_spin; spin_cur: atomic access */
};

/*
 * A waiter's spin grows up to this while its peer answers just too late;
 * less than the context thread's 2 ms: a virtual CPU's tick is 4 ms, and
 * a peer queued behind the spinner on its CPU waits that long.
 */
#define KM_MAX_SPIN_NS	500000u
/* A spin this long yields the CPU between two looks (km_spin). */
#define KM_YIELD_AFTER_NS	20000u

/* How a command reached the module. */
enum km_how {
	KM_RING,			/* an io_uring command; its CQE ends it */
	KM_PARKED,			/* a recv_wait's RECV, for its waiter to issue */
	KM_IN_IOCTL,			/* that RECV, in the waiter's TP_IOC_RECV now */
	KM_SENT,			/* a send_wait's TP_IOC_SEND; ends by read() */
};

/*
 * Small tensors in memory the module does not know travel through slots of
 * a region allocated once per rendezvous: a memcpy of at most KM_SMALL
 * bytes costs far less than pinning and releasing a page per operation.
 */
#define KM_SMALL	4096u
#define KM_SMALL_SLOTS	64u
#define KM_NO_SLOT	UINT32_MAX

/* One io_uring command: an op's SEND or RECV, or a CANCEL (op NULL). */
struct km_cmd {
	struct km_cmd *next, *prev;
	struct km_state *km;
	struct tpu__op *op;
	bool temp;			/* temp_region registered for this op only */
	uint32_t temp_region;
	bool donated;			/* SEND DONATE of donated_region */
	uint32_t donated_region;
	struct tpu_buffer *give;	/* a given buffer copied from: freed at the end */
	uint8_t *cancel_key;
	size_t cancel_len;
	uint32_t slot;			/* a small slot, or KM_NO_SLOT */
	uint64_t id;			/* unique in the process: a SEND's user_data */
	enum km_how how;		/* under km->lock */
	uint32_t region;		/* KM_PARKED: where the RECV goes */
	uint64_t offset;
	bool destroy_seen;		/* km_destroy: cancelled already */
};

static _Atomic uint64_t km_next_id;

/*
 * The direct op this thread issued last (its id) and on which rendezvous:
 * its waiter is this thread.  The id is looked up, never dereferenced, so
 * a stale one (the op finished elsewhere) is harmless.
 */
static _Thread_local const struct km_state *km_mine;
static _Thread_local uint64_t km_mine_id;

static int km_fd(const struct km_state *km)
{
	return tpu_endpoint_fd(tpu__ep_ref_get(km->ep));
}

static void km_link(struct km_state *km, struct km_cmd *c)
{
	c->prev = NULL;
	c->next = km->cmds;
	if (km->cmds)
		km->cmds->prev = c;
	km->cmds = c;
}

static void km_unlink(struct km_state *km, struct km_cmd *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		km->cmds = c->next;
	if (c->next)
		c->next->prev = c->prev;
}

/* Free what the command holds that is not the op's. */
static void km_cmd_free(struct km_state *km, struct km_cmd *c)
{
	struct tpu_endpoint *ep = tpu__ep_ref_get(km->ep);

	if (c->slot != KM_NO_SLOT) {
		pthread_mutex_lock(&km->lock);
		km->small_free |= 1ull << c->slot;
		pthread_mutex_unlock(&km->lock);
	}
	if (c->temp)
		tpu_region_release(ep, c->temp_region);
	if (c->give)
		tpu_buffer_free(c->give);
	free(c->cancel_key);
	free(c);
}

/* ---- where the bytes are ---------------------------------------------- */

/* km->lock held. */
static tpu_status km_zero_region(struct km_state *km, uint32_t *handle)
{
	uint64_t off;
	tpu_status st;

	if (!km->have_zero) {
		st = tpu_region_alloc(tpu__ep_ref_get(km->ep), 1, &km->zero_region, &off);
		if (st)
			return st;
		km->have_zero = true;
	}
	*handle = km->zero_region;
	return 0;
}

/* A free small slot for @c, its region and offset; km->lock held. */
static bool km_small_slot(struct km_state *km, struct km_cmd *c, uint32_t *region, uint64_t *offset)
{
	struct tpu_endpoint *ep = tpu__ep_ref_get(km->ep);
	uint64_t off;
	void *addr;

	if (!km->have_small) {
		if (tpu_region_alloc(ep, KM_SMALL * KM_SMALL_SLOTS, &km->small_region, &off))
			return false;
		if (tpu_region_mmap(ep, off, KM_SMALL * KM_SMALL_SLOTS, 0, &addr)) {
			tpu_region_release(ep, km->small_region);
			return false;
		}
		km->small = addr;
		km->small_free = KM_SMALL_SLOTS == 64 ? UINT64_MAX : (1ull << KM_SMALL_SLOTS) - 1;
		km->have_small = true;
	}
	if (!km->small_free)
		return false;
	c->slot = (uint32_t)__builtin_ctzll(km->small_free);
	km->small_free &= ~(1ull << c->slot);
	*region = km->small_region;
	*offset = (uint64_t)c->slot * KM_SMALL;
	return true;
}

/*
 * The region and offset of @t for @access: the buffer's own region when it
 * lives on this endpoint, a cached registration for other buffers, else a
 * registration for this command only.  km->lock held.
 */
static tpu_status km_locate(struct km_state *km, struct km_cmd *c, const struct tpu_tensor *t,
			    unsigned int access, uint32_t *region, uint64_t *offset)
{
	struct tpu_endpoint *ep = tpu__ep_ref_get(km->ep);
	const struct tpu_buffer *buf = t->buffer;
	tpu_status st;

	*offset = 0;
	if (t->len == 0)
		return km_zero_region(km, region);
	if (buf && (buf->kind == TPU__BUF_KMOD || buf->kind == TPU__BUF_DMABUF) &&
	    buf->ep == km->ep) {
		*region = buf->region;
		*offset = (uint64_t)((const uint8_t *)t->data - (const uint8_t *)buf->data);
		return 0;
	}
	/* Device memory behind an import: no other way to reach it. */
	if (buf && buf->kind == TPU__BUF_DMABUF)
		return -EXDEV;
	if (buf && buf->kind != TPU__BUF_HEAP) {
		st = tpu__km_reg_get(&km->cache, ep, buf, access, region);
		if (!st)
			*offset = (uint64_t)((const uint8_t *)t->data -
					     (const uint8_t *)buf->data);
		return st;
	}
	if (t->len <= KM_SMALL && km_small_slot(km, c, region, offset)) {
		if (access == TPU_ACCESS_READ)
			memcpy(km->small + *offset, t->data, t->len);
		return 0;
	}
	st = tpu_region_register(ep, t->data, t->len, access, region);
	if (!st) {
		c->temp = true;
		c->temp_region = *region;
	}
	return st;
}

/* ---- completions ------------------------------------------------------ */

/* A received donated region, mapped into a buffer. */
static tpu_status km_map_received(struct km_state *km, uint32_t region, size_t len,
				  struct tpu_buffer **out)
{
	struct tpu_endpoint *ep = tpu__ep_ref_get(km->ep);
	void *addr;
	tpu_status st;

	/* An empty tensor has no pages to map. */
	if (len == 0) {
		tpu_region_release(ep, region);
		return tpu__buffer_alloc_heap(0, out);
	}
	st = tpu_region_mmap(ep, (uint64_t)region << TP_MMAP_REGION_SHIFT, len, 0, &addr);
	if (st) {
		tpu_region_release(ep, region);
		return st;
	}
	tpu__ep_ref_hold(km->ep);
	st = tpu__buffer_wrap_kmod(km->ep, region, addr, len, out);
	if (st) {
		munmap(addr, len);
		tpu_region_release(ep, region);
		tpu__ep_ref_put(km->ep);
	}
	return st;
}

static void km_result(struct km_state *km, struct km_cmd *c, int res, uint64_t len)
{
	struct tpu__op *op = c->op;

	op->status = res < 0 ? res : 0;
	op->len = (res >= 0 || res == -EMSGSIZE) ? (size_t)len : 0;
	switch (op->kind) {
	case TPU__OP_SEND:
		/*
		 * A DONATE that failed before it was posted still owns its
		 * handle; one that failed later consumed it, and handles are
		 * allocated cyclically, so releasing a dead one cannot hit
		 * another region.
		 */
		if (res < 0 && c->donated)
			tpu_region_release(tpu__ep_ref_get(km->ep), c->donated_region);
		if (res < 0)
			op->len = 0;
		break;
	case TPU__OP_RECV:
		/* Into a small slot: now into the caller's memory. */
		if (res >= 0 && c->slot != KM_NO_SLOT)
			memcpy(op->tensor.data, km->small + (uint64_t)c->slot * KM_SMALL, op->len);
		break;
	case TPU__OP_RECV_BUFFER:
		if (res >= 0)
			op->status = km_map_received(km, (uint32_t)res, (size_t)len,
						     &op->out_buffer);
		break;
	}
	if (op->status == -ECANCELED && km->closing)
		op->status = TPU_E_CLOSED;
	/* The module's word for another member of the domain that died. */
	if (op->status == -EOWNERDEAD)
		op->status = TPU_E_PEER_GONE;
}

static void km_cqe(void *arg, const struct io_uring_cqe *cqe)
{
	struct km_cmd *c = arg;
	struct km_state *km = c->km;
	struct tpu__op *op = c->op;

	if (op)
		km_result(km, c, cqe->res, cqe->big_cqe[0]);
	pthread_mutex_lock(&km->lock);
	km_unlink(km, c);
	pthread_mutex_unlock(&km->lock);
	km_cmd_free(km, c);
	if (op)
		tpu__op_complete(op);
}

/* ---- the blocking calls, on their own thread -------------------------- */

/* The command with @id, if it has not ended; km->lock held. */
static struct km_cmd *km_find(struct km_state *km, uint64_t id)
{
	struct km_cmd *c;

	for (c = km->cmds; c; c = c->next)
		if (c->id == id)
			return c;
	return NULL;
}

/* Wake the waiters asleep in km_wait_sleep (the word's kick). */
static void km_kick(struct km_state *km)
{
	uint64_t one = 1;

	atomic_fetch_add((_Atomic uint32_t *)&km->wake_seq, 1);
	if (atomic_load((_Atomic bool *)&km->reader_asleep))
		while (write(km->kick_fd, &one, sizeof(one)) < 0 && errno == EINTR)
			;
	if (atomic_load((_Atomic unsigned int *)&km->futex_sleepers))
		syscall(SYS_futex, &km->wake_seq, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/*
 * End a direct command taken off the list, with the module's @res and
 * @len, on a thread that holds no lock (@locked: the front end's is held,
 * in ->cancel).
 */
static void km_finish(struct km_state *km, struct km_cmd *c, int res, uint64_t len, bool locked)
{
	struct tpu__op *op = c->op;

	km_result(km, c, res, len);
	km_cmd_free(km, c);
	if (locked)
		tpu__op_complete(op);
	else
		tpu__op_complete_unlocked(op);
}

/* Take @c off the list; km->lock held. */
static void km_take(struct km_state *km, struct km_cmd *c)
{
	km_unlink(km, c);
	if (c->how == KM_SENT)
		km->direct_sends--;
}

/* Whether @op can skip the ring: a blocking call's, on its waiter's thread. */
static bool km_direct(struct tpu_rendezvous *rdv, const struct tpu__op *op)
{
	struct km_state *km = rdv->impl_state;

	if (!op->direct || !tpu__rdv_issuing(rdv) || tpu__ctx_on_thread(km->ctx))
		return false;
	/*
	 * A send without a callback is direct too (nothing to call back), but
	 * has no waiter to read its completion: the ring's thread reads it.
	 */
	if (op->kind == TPU__OP_SEND)
		return op->cb.send && !(op->flags & TPU_SEND_GIVE);
	return op->kind == TPU__OP_RECV && (km->features & TPU_FEAT_RECV_TIMEOUT);
}

/*
 * The waiter's own RECV, taken from KM_PARKED to KM_IN_IOCTL by the
 * caller.  With @wait, block in the module until the tensor is in place,
 * the op is cancelled, or @deadline_ns passes; without, look once.  When
 * nothing was taken the RECV is parked again (the front end cancels it
 * once its deadline passed).
 */
static void km_issue_recv(struct km_state *km, struct km_cmd *c, bool wait, uint64_t deadline_ns)
{
	struct tpu__op *op = c->op;
	struct tpu_recv_args a = {
		.key = op->key, .key_len = op->key_len, .flags = wait ? 0 : TPU_RECV_NONBLOCK,
		.region = c->region, .offset = c->offset, .len = op->tensor.len,
	};
	tpu_status st = -ETIMEDOUT;
	uint64_t now = tpu__mono_ns();

	if (!deadline_ns || now < deadline_ns) {
		a.timeout_ns = deadline_ns ? deadline_ns - now : 0;
		st = tpu_recv(tpu__ep_ref_get(km->ep), &a);
	}
	pthread_mutex_lock(&km->lock);
	/* Not there yet, our own time limit, or a signal: nothing taken, parked again. */
	if ((st == -EAGAIN && !wait) || (st == -ETIMEDOUT && deadline_ns) || st == -EINTR) {
		c->how = KM_PARKED;
		pthread_mutex_unlock(&km->lock);
		return;
	}
	km_take(km, c);
	pthread_mutex_unlock(&km->lock);
	km_finish(km, c, st, a.len, false);
}

static void km_block_recv(struct km_state *km, struct km_cmd *c, uint64_t deadline_ns)
{
	km_issue_recv(km, c, true, deadline_ns);
}

/* One look, without blocking; its deadline is the front end's to keep. */
static void km_try_recv(struct km_state *km, struct km_cmd *c)
{
	km_issue_recv(km, c, false, 0);
}

/* End the KM_SENT commands of @n completion records. */
static void km_sent_done(struct km_state *km, const struct tp_completion *done, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		struct km_cmd *c;

		pthread_mutex_lock(&km->lock);
		c = km_find(km, done[i].user_data);
		if (c && c->how == KM_SENT)
			km_take(km, c);
		else
			c = NULL;
		pthread_mutex_unlock(&km->lock);
		if (c)
			km_finish(km, c, done[i].status, done[i].len, false);
	}
}

/*
 * Read the completions of KM_SENT commands that are there; never blocks
 * (the endpoint is O_NONBLOCK, km_start).  One reader at a time: see
 * km->reader.
 */
static void km_read_completions(struct km_state *km)
{
	struct tp_completion done[16];
	ssize_t got;

	do {
		got = read(tpu_endpoint_fd(tpu__ep_ref_get(km->ep)), done, sizeof(done));
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return;
		km_sent_done(km, done, (size_t)got / sizeof(done[0]));
	} while ((size_t)got == sizeof(done));
}

/* The reader's sleep: until a completion or a kick, or @deadline_ns. */
static void km_reader_sleep(struct km_state *km, uint32_t token, uint64_t deadline_ns)
{
	struct pollfd p[2] = {
		{ .fd = tpu_endpoint_fd(tpu__ep_ref_get(km->ep)), .events = POLLIN },
		{ .fd = km->kick_fd, .events = POLLIN },
	};
	int ms = -1;
	uint64_t n;

	if (deadline_ns) {
		uint64_t now = tpu__mono_ns();

		ms = now >= deadline_ns ? 0 :
		     (int)((deadline_ns - now + 999999) / 1000000 > INT_MAX ? INT_MAX :
			   (deadline_ns - now + 999999) / 1000000);
	}
	/* Said before the token is looked at: a kick after it writes kick_fd. */
	atomic_store((_Atomic bool *)&km->reader_asleep, true);
	if (atomic_load((_Atomic uint32_t *)&km->wake_seq) == token &&
	    poll(p, 2, ms) > 0 && (p[1].revents & POLLIN)) {
		while (read(km->kick_fd, &n, sizeof(n)) > 0)
			;
	}
	atomic_store((_Atomic bool *)&km->reader_asleep, false);
	if (p[0].revents & POLLIN)
		km_read_completions(km);
}

/*
 * While its waiter spins (and before each sleep): the waiter's own parked
 * RECV once without blocking (TP_RECV_NONBLOCK), and the send_wait
 * completions that are there.  A spinning waiter then finds its tensor
 * with no wake-up at all, as a polling pipe does.
 */
static void km_progress(struct tpu_rendezvous *rdv, enum tpu__ww_phase phase)
{
	struct km_state *km = rdv->impl_state;
	struct km_cmd *c = NULL;
	bool read = false;

	if (phase == TPU__WW_SPIN_END)
		return;
	pthread_mutex_lock(&km->lock);
	if (km_mine == km && km_mine_id)
		c = km_find(km, km_mine_id);
	if (c && c->how == KM_PARKED) {
		c->how = KM_IN_IOCTL;
	} else {
		c = NULL;
		/* One reader at a time: a read() after another's could block. */
		read = km->direct_sends && !km->reader;
		if (read)
			km->reader = true;
	}
	pthread_mutex_unlock(&km->lock);
	if (c) {
		km_try_recv(km, c);
	} else if (read) {
		km_read_completions(km);
		pthread_mutex_lock(&km->lock);
		km->reader = false;
		pthread_mutex_unlock(&km->lock);
	}
}

static uint32_t km_wait_token(struct tpu_rendezvous *rdv)
{
	struct km_state *km = rdv->impl_state;

	return atomic_load((_Atomic uint32_t *)&km->wake_seq);
}

static void km_wait_kick(struct tpu_rendezvous *rdv)
{
	km_kick(rdv->impl_state);
}

/*
 * Where a waiter blocks: in the module for its own parked RECV; else,
 * while send_wait completions are due and no other waiter reads them, in
 * poll() as the reader; else on the futex.
 */
static void km_block(struct tpu_rendezvous *rdv, uint32_t token, uint64_t deadline_ns);

/*
 * Before blocking, poll for the waiter's own work for a while, as the
 * context thread polls a pipe's shared memory: a peer that answers within
 * it costs no wake-up on either side (each costs tens of microseconds on
 * a virtual CPU).  Not while this thread backs off (tpu__spin_contended).
 * True when kicked (the word may be posted).
 */
static bool km_spin(struct tpu_rendezvous *rdv, uint32_t token, uint64_t deadline_ns)
{
	struct km_state *km = rdv->impl_state;
	uint64_t now = tpu__mono_ns(), start = now, last, until;
	uint64_t spin = atomic_load((_Atomic uint64_t *)&km->spin_cur);

	if (!spin || tpu__spin_contended(now))
		return false;
	until = deadline_ns && deadline_ns < now + spin ? deadline_ns : now + spin;
	do {
		last = now;
		km_progress(rdv, TPU__WW_SPIN_POLL);
		if (atomic_load((_Atomic uint32_t *)&km->wake_seq) != token)
			return true;
		/*
		 * Past KM_YIELD_AFTER_NS the peer may be queued behind us on
		 * this CPU: let it run (sched_yield returns at once if not).
		 */
		if (now - start > KM_YIELD_AFTER_NS)
			sched_yield();
		else
			tpu__cpu_relax();
		now = tpu__mono_ns();
		if (now - last > TPU__PREEMPT_GAP_NS) {
			tpu__spin_preempted(now);
			atomic_store((_Atomic uint64_t *)&km->spin_cur, km->spin_base);
			return false;
		}
	} while (now < until);
	return false;
}

/*
 * A blocked recv_wait or send_wait that stops spinning: km_spin, then
 * km_block.  Woken soon after the spin gave up: the peer answers a little
 * more slowly than we spin, and two ends that both sleep every time stay
 * that slow, so spin longer next time (up to KM_MAX_SPIN_NS); a long sleep
 * means idleness: back to the base.
 */
static void km_wait_sleep(struct tpu_rendezvous *rdv, uint32_t token, uint64_t deadline_ns)
{
	struct km_state *km = rdv->impl_state;
	uint64_t t0, slept, spin;

	if (km_spin(rdv, token, deadline_ns))
		return;
	t0 = tpu__mono_ns();
	km_block(rdv, token, deadline_ns);
	slept = tpu__mono_ns() - t0;
	spin = atomic_load((_Atomic uint64_t *)&km->spin_cur);
	if (!km->spin_base || tpu__spin_contended(t0 + slept) || slept >= KM_MAX_SPIN_NS)
		spin = km->spin_base;
	else
		spin = spin * 2 > KM_MAX_SPIN_NS ? KM_MAX_SPIN_NS : spin * 2;
	atomic_store((_Atomic uint64_t *)&km->spin_cur, spin);
}

/* Block: see km_wait_sleep. */
static void km_block(struct tpu_rendezvous *rdv, uint32_t token, uint64_t deadline_ns)
{
	struct km_state *km = rdv->impl_state;
	struct km_cmd *c = NULL;
	bool others;

	pthread_mutex_lock(&km->lock);
	if (km_mine == km && km_mine_id)
		c = km_find(km, km_mine_id);
	if (c && c->how == KM_PARKED) {
		c->how = KM_IN_IOCTL;
		pthread_mutex_unlock(&km->lock);
		km_block_recv(km, c, deadline_ns);
		return;
	}
	if (km->direct_sends && !km->reader) {
		km->reader = true;
		pthread_mutex_unlock(&km->lock);
		km_reader_sleep(km, token, deadline_ns);
		pthread_mutex_lock(&km->lock);
		km->reader = false;
		/* Completions may still be due: another waiter may read now. */
		others = km->direct_sends &&
			 atomic_load((_Atomic unsigned int *)&km->futex_sleepers);
		pthread_mutex_unlock(&km->lock);
		if (others)
			km_kick(km);
		return;
	}
	atomic_fetch_add((_Atomic unsigned int *)&km->futex_sleepers, 1);
	pthread_mutex_unlock(&km->lock);
	{
		struct timespec ts;
		uint64_t now = tpu__mono_ns();

		if (deadline_ns) {
			uint64_t left = now >= deadline_ns ? 0 : deadline_ns - now;

			ts.tv_sec = (time_t)(left / 1000000000ull);
			ts.tv_nsec = (long)(left % 1000000000ull);
		}
		if (!deadline_ns || now < deadline_ns)
			syscall(SYS_futex, &km->wake_seq, FUTEX_WAIT_PRIVATE, token,
				deadline_ns ? &ts : NULL, NULL, 0);
	}
	atomic_fetch_sub((_Atomic unsigned int *)&km->futex_sleepers, 1);
}

/*
 * Cancel this member's parked RECV @id of @key (->cancel, or destroy):
 * one not in the kernel yet ends here with -ECANCELED; one in its
 * waiter's TP_IOC_RECV is cancelled there, again until the module has
 * found it (the waiter may be between its lock and its system call).
 */
static void km_cancel_parked(struct km_state *km, uint64_t id, const uint8_t *key, size_t key_len,
			     bool locked)
{
	struct tpu_endpoint *ep = tpu__ep_ref_get(km->ep);
	uint32_t count;
	struct km_cmd *c;

	for (;;) {
		pthread_mutex_lock(&km->lock);
		c = km_find(km, id);
		if (c && c->how == KM_PARKED) {
			km_take(km, c);
			pthread_mutex_unlock(&km->lock);
			km_finish(km, c, -ECANCELED, 0, locked);
			return;
		}
		pthread_mutex_unlock(&km->lock);
		if (!c)
			return;
		count = 0;
		if (!tpu_cancel(ep, key, key_len, TPU_CANCEL_RECV, &count) && count)
			return;
		sched_yield();
	}
}

/* ---- submission ------------------------------------------------------- */

/* Queue the command on the ring; km->lock held. */
static tpu_status km_submit(struct km_state *km, struct km_cmd *c, unsigned int cmd_op,
			    const void *arg, size_t arg_len)
{
	struct io_uring_sqe *sqe = tpu__ctx_sqe(km->ctx, km_cqe, c);

	if (!sqe)
		return -ENOMEM;
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = km_fd(km);
	sqe->cmd_op = cmd_op;
	memcpy(sqe->cmd, arg, arg_len);
	km_link(km, c);
	return tpu__ctx_submit(km->ctx);
}

static struct km_cmd *km_cmd_new(struct km_state *km, struct tpu__op *op)
{
	struct km_cmd *c = calloc(1, sizeof(*c));

	if (c) {
		c->km = km;
		c->op = op;
		c->slot = KM_NO_SLOT;
		c->id = atomic_fetch_add(&km_next_id, 1) + 1;
	}
	return c;
}

static bool km_can_donate(const struct km_state *km, const struct tpu__op *op)
{
	const struct tpu_buffer *buf = op->tensor.buffer;

	/* The context's buffers, or ones received here: on this endpoint either way. */
	return (op->flags & TPU_SEND_GIVE) && buf->kind == TPU__BUF_KMOD && buf->ep == km->ep;
}

/* send_wait's SEND, from its own thread: TP_IOC_SEND, which never blocks. */
static tpu_status km_send_direct(struct km_state *km, struct km_cmd *c, struct tpu__op *op)
{
	struct tpu_send_args a = { .key = op->key, .key_len = op->key_len,
				   .len = op->tensor.len, .user_data = c->id };
	tpu_status st;

	pthread_mutex_lock(&km->lock);
	st = km_locate(km, c, &op->tensor, TPU_ACCESS_READ, &a.region, &a.offset);
	if (!st)
		st = tpu_send(tpu__ep_ref_get(km->ep), &a);
	if (!st) {
		c->how = KM_SENT;
		km_link(km, c);
		km->direct_sends++;
		km_mine = km;
		km_mine_id = c->id;
	}
	pthread_mutex_unlock(&km->lock);
	if (st)
		km_cmd_free(km, c);
	return st;
}

static tpu_status km_send(struct tpu_rendezvous *rdv, struct tpu__op *op)
{
	struct km_state *km = rdv->impl_state;
	struct km_cmd *c = km_cmd_new(km, op);
	struct tp_send s;
	uint64_t offset = 0;
	tpu_status st;

	if (!c)
		return -ENOMEM;
	if (km_direct(rdv, op))
		return km_send_direct(km, c, op);
	memset(&s, 0, sizeof(s));
	s.key_ptr = (uintptr_t)op->key;
	s.key_len = (uint32_t)op->key_len;
	s.len = op->tensor.len;
	pthread_mutex_lock(&km->lock);
	if (km_can_donate(km, op)) {
		s.flags = TP_SEND_DONATE;
		s.region = op->tensor.buffer->region;
	} else {
		st = km_locate(km, c, &op->tensor, TPU_ACCESS_READ, &s.region, &offset);
		if (st)
			goto fail;
		s.offset = offset;
	}
	/*
	 * The module refuses to donate a mapped region, and on the context
	 * thread the SEND reaches it within km_submit: unmap first (nobody
	 * maps it again).  The buffer is ours from here (see tpu__rdv_ops).
	 */
	if (s.flags & TP_SEND_DONATE) {
		c->donated = true;
		c->donated_region = s.region;
		tpu__buffer_unmap_for_donate(op->tensor.buffer);
		op->tensor.buffer = NULL;
	}
	st = km_submit(km, c, TP_IOC_SEND, &s, sizeof(s));
	if (st && (s.flags & TP_SEND_DONATE)) {
		/* Too late to give the buffer back: fail the op through its callback. */
		tpu_region_release(tpu__ep_ref_get(km->ep), s.region);
		pthread_mutex_unlock(&km->lock);
		km_cmd_free(km, c);
		op->status = st;
		tpu__op_complete(op);
		return 0;
	}
	if (st)
		goto fail;
	if (op->flags & TPU_SEND_GIVE && !(s.flags & TP_SEND_DONATE)) {
		c->give = op->tensor.buffer;
	}
	pthread_mutex_unlock(&km->lock);
	return 0;
fail:
	pthread_mutex_unlock(&km->lock);
	km_cmd_free(km, c);
	return st;
}

static tpu_status km_recv(struct tpu_rendezvous *rdv, struct tpu__op *op)
{
	struct km_state *km = rdv->impl_state;
	struct km_cmd *c = km_cmd_new(km, op);
	struct tp_recv r;
	uint64_t offset = 0;
	tpu_status st = 0;

	if (!c)
		return -ENOMEM;
	if (km_direct(rdv, op)) {
		/* recv_wait's RECV: its waiter issues it (km_wait_sleep). */
		pthread_mutex_lock(&km->lock);
		st = km_locate(km, c, &op->tensor, TPU_ACCESS_WRITE, &c->region, &c->offset);
		if (!st) {
			c->how = KM_PARKED;
			km_link(km, c);
			km_mine = km;
			km_mine_id = c->id;
		}
		pthread_mutex_unlock(&km->lock);
		if (st)
			km_cmd_free(km, c);
		return st;
	}
	memset(&r, 0, sizeof(r));
	r.key_ptr = (uintptr_t)op->key;
	r.key_len = (uint32_t)op->key_len;
	r.len = op->tensor.len;
	r.timeout_ns = op->timeout_ns;
	pthread_mutex_lock(&km->lock);
	if (op->kind == TPU__OP_RECV_BUFFER)
		r.flags = TP_RECV_DONATE;
	else
		st = km_locate(km, c, &op->tensor, TPU_ACCESS_WRITE, &r.region, &offset);
	r.offset = offset;
	if (!st)
		st = km_submit(km, c, TP_IOC_RECV, &r, sizeof(r));
	pthread_mutex_unlock(&km->lock);
	if (st)
		km_cmd_free(km, c);
	return st;
}

/* CANCEL through the ring, so that it comes after the commands it targets. */
static tpu_status km_cancel_key(struct km_state *km, const uint8_t *key, size_t key_len)
{
	struct km_cmd *c = km_cmd_new(km, NULL);
	struct tp_cancel tc;
	tpu_status st;

	if (!c)
		return -ENOMEM;
	c->cancel_key = malloc(key_len);
	if (!c->cancel_key) {
		free(c);
		return -ENOMEM;
	}
	memcpy(c->cancel_key, key, key_len);
	c->cancel_len = key_len;
	memset(&tc, 0, sizeof(tc));
	tc.key_ptr = (uintptr_t)c->cancel_key;
	tc.key_len = (uint32_t)key_len;
	tc.flags = TP_CANCEL_SEND | TP_CANCEL_RECV;
	st = km_submit(km, c, TP_IOC_CANCEL, &tc, sizeof(tc));
	if (st)
		km_cmd_free(km, c);
	return st;
}

static bool same_key(const struct km_cmd *c, const uint8_t *key, size_t key_len)
{
	return c->op && c->op->key_len == key_len && memcmp(c->op->key, key, key_len) == 0;
}

static int km_cancel(struct tpu_rendezvous *rdv, const uint8_t *key, size_t key_len)
{
	struct km_state *km = rdv->impl_state;
	bool ring = false, sent = false;
	uint64_t parked = 0;
	struct km_cmd *c;
	int n = 0;
	tpu_status st = 0;

	pthread_mutex_lock(&km->lock);
	for (c = km->cmds; c; c = c->next) {
		if (!same_key(c, key, key_len))
			continue;
		n++;
		if (c->how == KM_RING)
			ring = true;
		else if (c->how == KM_SENT)
			sent = true;
		else
			parked = c->id;	/* one at most: only a key's first RECV is started */
	}
	/*
	 * Through the ring when it has commands of the key, so that the
	 * CANCEL comes after them; it finds the direct ones too (same
	 * endpoint).  A SEND being taken cannot be cancelled: it completes.
	 */
	if (ring)
		st = km_cancel_key(km, key, key_len);
	else if (sent)
		tpu_cancel(tpu__ep_ref_get(km->ep), key, key_len, TPU_CANCEL_SEND, NULL);
	pthread_mutex_unlock(&km->lock);
	if (parked)
		km_cancel_parked(km, parked, key, key_len, true);
	if (st)
		return st;
	return n ? n : -ENOENT;
}

static tpu_status km_abort(struct tpu_rendezvous *rdv, tpu_status status)
{
	struct km_state *km = rdv->impl_state;

	return tpu_abort(tpu__ep_ref_get(km->ep), status);
}

/* ---- life ------------------------------------------------------------- */

static tpu_status km_endpoint(struct km_state *km)
{
	struct tpu_endpoint *ep;
	struct tpu_info info;
	int fd, flags;
	tpu_status st;

	if (tpu__ctx_claim_endpoint(km->ctx)) {
		km->ep = tpu__ctx_endpoint_ref(km->ctx);
	}
	if (!km->ep) {
		st = tpu_endpoint_open(tpu__ctx_dev_path(km->ctx), &ep);
		if (st)
			return st;
		km->ep = tpu__ep_ref_new(ep);
		if (!km->ep) {
			tpu_endpoint_close(ep);
			return -ENOMEM;
		}
	}
	st = tpu_endpoint_info(tpu__ep_ref_get(km->ep), &info);
	if (!st && !(info.features & TPU_FEAT_URING_CMD))
		st = -EOPNOTSUPP;
	km->features = info.features;
	/*
	 * read() of completions (send_wait's) must not block: whoever reads
	 * has polled, or looks without waiting.  Only read() minds the flag,
	 * and nothing else reads this endpoint.
	 */
	fd = tpu_endpoint_fd(tpu__ep_ref_get(km->ep));
	flags = st ? 0 : fcntl(fd, F_GETFL);
	if (!st && (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0))
		st = tpu__errno();
	return st;
}

static void km_free(struct km_state *km)
{
	struct tpu_endpoint *ep = tpu__ep_ref_get(km->ep);

	if (ep) {
		tpu__km_reg_release_all(&km->cache, ep);
		if (km->have_zero)
			tpu_region_release(ep, km->zero_region);
		if (km->have_small) {
			munmap(km->small, KM_SMALL * KM_SMALL_SLOTS);
			tpu_region_release(ep, km->small_region);
		}
	}
	if (km->domain_fd >= 0)
		close(km->domain_fd);
	if (km->kick_fd >= 0)
		close(km->kick_fd);
	tpu__ep_ref_put(km->ep);
	pthread_mutex_destroy(&km->lock);
	free(km);
}

static tpu_status km_start(struct tpu_rendezvous *rdv, int join_fd)
{
	struct km_state *km = calloc(1, sizeof(*km));
	tpu_status st;

	if (!km)
		return -ENOMEM;
	km->ctx = rdv->ctx;
	km->domain_fd = -1;
	pthread_mutex_init(&km->lock, NULL);
	km->kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	km->spin_base = tpu__ctx_spin_ns(rdv->ctx);
	km->spin_cur = km->spin_base;
	st = km->kick_fd < 0 ? tpu__errno() : km_endpoint(km);
	if (!st && join_fd < 0)
		st = tpu_domain_create(tpu__ep_ref_get(km->ep), &km->domain_fd, NULL);
	if (!st && join_fd >= 0) {
		km->domain_fd = fcntl(join_fd, F_DUPFD_CLOEXEC, 0);
		if (km->domain_fd < 0)
			st = tpu__errno();
	}
	if (!st)
		/* As a member, so that a dead peer's ops end (TP_FEAT_MEMBER_DEATH). */
		st = tpu__domain_attach(tpu__ep_ref_get(km->ep), km->domain_fd,
					(km->features & TPU_FEAT_MEMBER_DEATH) ?
					TP_DOMAIN_ATTACH_MEMBER : 0, NULL);
	if (st) {
		km_free(km);
		return st;
	}
	rdv->impl_state = km;
	return 0;
}

static tpu_status km_create(struct tpu_rendezvous *rdv)
{
	return km_start(rdv, -1);
}

static tpu_status km_join(struct tpu_rendezvous *rdv, int fd)
{
	return km_start(rdv, fd);
}

static tpu_status km_share(struct tpu_rendezvous *rdv, int *fd)
{
	struct km_state *km = rdv->impl_state;

	*fd = fcntl(km->domain_fd, F_DUPFD_CLOEXEC, 0);
	return *fd < 0 ? tpu__errno() : 0;
}

static bool km_idle(void *arg)
{
	struct km_state *km = arg;
	bool idle;

	pthread_mutex_lock(&km->lock);
	idle = km->cmds == NULL;
	pthread_mutex_unlock(&km->lock);
	return idle;
}

static void km_destroy(struct tpu_rendezvous *rdv)
{
	struct km_state *km = rdv->impl_state;
	struct km_cmd *c, *d;

	pthread_mutex_lock(&km->lock);
	km->closing = true;
	/* One CANCEL per key still out; the module completes each command once. */
	for (c = km->cmds; c; c = c->next) {
		if (!c->op || c->how == KM_PARKED || c->how == KM_IN_IOCTL)
			continue;
		for (d = km->cmds; d != c; d = d->next)
			if (same_key(d, c->op->key, c->op->key_len))
				break;
		if (d == c)
			km_cancel_key(km, c->op->key, c->op->key_len);
	}
	pthread_mutex_unlock(&km->lock);
	/* Receives parked for, or blocked in, a waiter on another thread. */
	for (;;) {
		uint8_t *key = NULL;
		size_t key_len = 0;
		uint64_t id = 0;

		pthread_mutex_lock(&km->lock);
		for (c = km->cmds; c; c = c->next) {
			if ((c->how == KM_PARKED || c->how == KM_IN_IOCTL) && !c->destroy_seen)
				break;
		}
		if (c) {
			c->destroy_seen = true;
			id = c->id;
			key_len = c->op->key_len;
			key = malloc(key_len);
			if (key)
				memcpy(key, c->op->key, key_len);
		}
		pthread_mutex_unlock(&km->lock);
		if (!c)
			break;
		if (key)
			km_cancel_parked(km, id, key, key_len, false);
		free(key);
	}
	tpu__ctx_wait(km->ctx, km_idle, km);
}

/* Once no thread is inside: a waiter's last read or a cancel still uses the endpoint. */
static void km_release(struct tpu_rendezvous *rdv)
{
	struct km_state *km = rdv->impl_state;

	rdv->impl_state = NULL;
	km_free(km);
}

struct tpu__ep_ref *tpu__rdv_kmod_endpoint(struct tpu_rendezvous *rdv)
{
	struct km_state *km = rdv->impl_state;

	return rdv->ops == &tpu__rdv_kmod && km ? km->ep : NULL;
}

const struct tpu__rdv_ops tpu__rdv_kmod = {
	.impl = TPU_RDV_KMOD,
	.create = km_create,
	.join = km_join,
	.share = km_share,
	.destroy = km_destroy,
	.release = km_release,
	.send = km_send,
	.recv = km_recv,
	.cancel = km_cancel,
	.abort = km_abort,
	.progress = km_progress,
	.wait_token = km_wait_token,
	.wait_sleep = km_wait_sleep,
	.wait_kick = km_wait_kick,
};
