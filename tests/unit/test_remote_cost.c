// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The remote rendezvous's work per round trip (lib/remote), counted where
 * a timing could not tell on a shared host:
 *
 *   - a ping-pong between two workers of this process over shm: each
 *     REQ hashes its key for the outbox once (a send brings the front
 *     end's hash), two per round trip; each task parses each key once
 *     (four per round trip); once warm, next to no heap allocation;
 *   - with a job secret (small sends pushed): once warm, next to no heap
 *     allocation either in round trips; in bursts of sends made before
 *     their receives (the inbox), also when the bursts pile up behind busy
 *     context threads (tpu__remote_hold_ctx), a burst or two that meet
 *     more in flight than any before, and then none;
 *   - the key hash spreads keys over the tables' low bits;
 *   - the task a key names is the device name up to its first
 *     "/device:", found by tpu__remote_key_tasks for keys whose job or
 *     edge name holds "device" too.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "remote/remote.h"
#include "remote_harness.h"
#include "tap.h"
#include "tpu_user.h"

#define TASK_A		"/job:worker/replica:0/task:0"
#define TASK_B		"/job:worker/replica:0/task:1"
#define ROUNDS		100
#define WAIT_NS		(10ull * 1000000000ull)
#define INC		5	/* the source incarnation of the keys */
#define BURST		16	/* sends ahead of their receives: within the push window */
#define WARM_WINDOWS	6	/* windows of 10 bursts, at most, to warm the caches */
#define MEASURED	4	/* windows of 10 bursts counted once warm */
#define ALLOCATING_MAX	6	/* of their bursts, at most this many allocate */

struct worker {
	struct rh_worker rw;
	tpu_status err;
	uint64_t vals[4 * ROUNDS + (WARM_WINDOWS + MEASURED) * 10 * BURST];
	atomic_uint bursts_sent;	/* burst sends called back */
	_Atomic tpu_status burst_err;	/* the first of them that failed */
};

static tpu_status take(struct worker *w, const char *src, const char *dst, const char *edge,
		       unsigned int i)
{
	uint64_t got = ~0ull;
	struct tpu_tensor t = { .data = &got, .len = sizeof(got) };
	char k[RH_KEY_MAX];
	size_t kl = rh_key(k, src, dst, edge, INC, i), len = 0;
	tpu_status st = tpu_rendezvous_recv_wait(w->rw.rdv, k, kl, &t, WAIT_NS, &len);

	return st ? st : len == sizeof(got) && got == i ? 0 : -EBADMSG;
}

static tpu_status give(struct worker *w, const char *src, const char *dst, const char *edge,
		       unsigned int i)
{
	struct tpu_tensor t = { .data = &w->vals[i], .len = sizeof(w->vals[i]) };
	char k[RH_KEY_MAX];
	size_t kl = rh_key(k, src, dst, edge, INC, i);

	w->vals[i] = i;
	return tpu_rendezvous_send(w->rw.rdv, k, kl, &t, 0, NULL, NULL);
}

static void *answer(void *arg)
{
	struct worker *b = arg;

	for (unsigned int i = 0; i < ROUNDS && !b->err; i++) {
		b->err = take(b, TASK_A, TASK_B, "ping", i);
		if (!b->err)
			b->err = give(b, TASK_B, TASK_A, "pong", i);
	}
	return NULL;
}

/* One round trip on this thread: A posts, B takes, B posts back, A takes. */
static tpu_status round_here(struct worker *a, struct worker *b, unsigned int i)
{
	tpu_status err = give(a, TASK_A, TASK_B, "here", i);

	if (!err)
		err = take(b, TASK_A, TASK_B, "here", i);
	if (!err)
		err = give(b, TASK_B, TASK_A, "back", i);
	if (!err)
		err = take(a, TASK_B, TASK_A, "back", i);
	return err;
}

static void costs_per_round_trip(struct worker *a, struct worker *b)
{
	unsigned long h0, h, k0, k, m0, m;
	tpu_status err = 0;
	unsigned int i;
	pthread_t th;

	/* Round trips first: the pipes are set up and the free lists filled (slowly). */
	for (i = 0; i < 3 * ROUNDS && !err; i++)
		err = round_here(a, b, i);
	CHECK_STATUS(err, 0, "remote cost: %d first round trips on one thread", 3 * ROUNDS);
	if (err)
		return;
	m0 = allocs_counted();
	for (i = 3 * ROUNDS; i < 4 * ROUNDS && !err; i++)
		err = round_here(a, b, i);
	m = allocs_counted() - m0;
	CHECK_STATUS(err, 0, "remote cost: %d more round trips on one thread", ROUNDS);
	/*
	 * Outbox entries, REQs, writes and fetches reuse what the ones before
	 * freed (ten a round trip without).  0 here; a few are let pass for
	 * the front end's op list, which grows when the context thread that
	 * recycles posted sends lags (a loaded host).
	 */
	CHECK(m < ROUNDS / 4, "remote cost: %lu heap allocations in %d round trips once warm "
	      "(under %d)", m, ROUNDS, ROUNDS / 4);

	h0 = tpu__remote_outbox_hashes();
	k0 = tpu__remote_key_parses();
	if (pthread_create(&th, NULL, answer, b)) {
		CHECK(false, "remote cost: a thread for worker B");
		return;
	}
	for (i = 0; i < ROUNDS && !err; i++) {
		err = give(a, TASK_A, TASK_B, "ping", i);
		if (!err)
			err = take(a, TASK_B, TASK_A, "pong", i);
	}
	if (err)
		tpu_rendezvous_abort(b->rw.rdv, err);
	pthread_join(th, NULL);
	h = tpu__remote_outbox_hashes() - h0;
	k = tpu__remote_key_parses() - k0;
	CHECK(!err && !b->err, "remote cost: %d round trips (%s, %s)", ROUNDS, tpu_strerror(err),
	      tpu_strerror(b->err));
	/* Each REQ hashes its key once; a send has the front end's hash. */
	CHECK(h == 2ul * ROUNDS, "remote cost: %lu outbox key hashes in %d round trips (%d)", h,
	      ROUNDS, 2 * ROUNDS);
	/*
	 * A key is parsed once per task: its receive's, and on the producer
	 * its send's or its REQ's, whichever came first (the outbox entry
	 * keeps what the parse found for the other).  A REQ that arrives
	 * while the send is between its lookup and its parse is parsed too
	 * (both find no entry): rare, so a tenth more is allowed; the code
	 * before parsing once made 6 per round trip.
	 */
	CHECK(k >= 4ul * ROUNDS && k <= 4ul * ROUNDS + ROUNDS / 10,
	      "remote cost: %lu key parses in %d round trips (%d to %d)", k, ROUNDS, 4 * ROUNDS,
	      4 * ROUNDS + ROUNDS / 10);
}

#define HOLD_NS		(20ull * 1000000ull)

static void burst_sent(void *arg, tpu_status status)
{
	struct worker *w = arg;
	tpu_status none = 0;

	if (status)
		atomic_compare_exchange_strong(&w->burst_err, &none, status);
	atomic_fetch_add(&w->bursts_sent, 1);
}

/* give(), with a callback that counts it done. */
static tpu_status give_counted(struct worker *w, const char *edge, unsigned int i)
{
	struct tpu_tensor t = { .data = &w->vals[i], .len = sizeof(w->vals[i]) };
	char k[RH_KEY_MAX];
	size_t kl = rh_key(k, TASK_A, TASK_B, edge, INC, i);

	w->vals[i] = i;
	return tpu_rendezvous_send(w->rw.rdv, k, kl, &t, 0, burst_sent, w);
}

/* Hold @w's pipe context thread for HOLD_NS once its last hold is over. */
static tpu_status hold(struct worker *w)
{
	tpu_status err = -EBUSY;

	for (int ms = 0; err == -EBUSY && ms < 1000; ms++) {
		err = tpu__remote_hold_ctx(w->rw.rdv, HOLD_NS);
		if (err == -EBUSY)
			usleep(1000);
	}
	return err;
}

/*
 * A sends BURST keys before B asks for any (pushed, into B's inbox), then B
 * takes them.  @held: both pipe contexts' threads are busy for HOLD_NS
 * first, so that every send and push of the burst is in flight at once, as
 * on a loaded host (the most that the caches must keep); and A's again
 * while B takes them, so that B's CREDITs wait unread.  The burst ends when
 * A's sends are called back too (a receive returns before its push's
 * write is done), so that the next burst's sends do not meet these.
 */
static tpu_status burst(struct worker *a, struct worker *b, unsigned int first, bool held)
{
	unsigned int i, want = atomic_load(&a->bursts_sent);
	tpu_status err = 0;
	int ms;

	if (held)
		err = hold(a) ?: hold(b);
	for (i = first; i < first + BURST && !err; i++, want++)
		err = give_counted(a, "burst", i);
	/* And A's again while B takes them: B's CREDITs pile up, unread. */
	if (held && !err)
		err = hold(a);
	for (i = first; i < first + BURST && !err; i++)
		err = take(b, TASK_A, TASK_B, "burst", i);
	for (ms = 0; !err && atomic_load(&a->bursts_sent) != want && ms < 10000; ms++)
		usleep(1000);
	if (!err && atomic_load(&a->bursts_sent) != want)
		err = -ETIMEDOUT;
	return err ?: atomic_load(&a->burst_err);
}

static unsigned long pushes_made(struct worker *w)
{
	struct remote_push_stats s = { 0 };

	return tpu__remote_push_stats(w->rw.rdv, &s) ? 0 : s.pushed;
}

/*
 * With a job secret, the push records, the inbox entries and the tensors
 * pushed into the inbox are recycled too: a push cost a malloc, and one
 * that waited in the inbox a record and a memfd buffer (five system calls).
 */
static void push_costs(struct worker *a, struct worker *b)
{
	unsigned long m0, m, p0, p, inboxed, total = 0;
	struct remote_push_stats s0 = { 0 }, s = { 0 };
	unsigned int i, w, first, allocating = 0;
	tpu_status err = 0;

	for (i = 0; i < 3 * ROUNDS && !err; i++)
		err = round_here(a, b, i);
	for (i = 0; i < 5 * BURST && !err; i += BURST)
		err = burst(a, b, i, true);
	CHECK_STATUS(err, 0, "remote push cost: %d first round trips and %d bursts", 3 * ROUNDS, 5);
	if (err)
		return;
	p0 = pushes_made(a) + pushes_made(b);
	m0 = allocs_counted();
	for (i = 3 * ROUNDS; i < 4 * ROUNDS && !err; i++)
		err = round_here(a, b, i);
	m = allocs_counted() - m0;
	p = pushes_made(a) + pushes_made(b) - p0;
	CHECK_STATUS(err, 0, "remote push cost: %d more round trips", ROUNDS);
	CHECK(p > 0, "remote push cost: %lu of their %d sends were pushed", p, 2 * ROUNDS);
	CHECK(m < ROUNDS / 4, "remote push cost: %lu heap allocations in %d round trips with %lu "
	      "pushes, once warm (under %d)", m, ROUNDS, p, ROUNDS / 4);
	/*
	 * How many records a burst finds in flight depends on when the
	 * threads run: the caches are warm once ten bursts in a row allocate
	 * less than one each would without them.
	 */
	first = 5 * BURST;
	for (w = 0; w < WARM_WINDOWS && !err; w++) {
		m0 = allocs_counted();
		for (i = 0; i < 10 && !err; i++, first += BURST)
			err = burst(a, b, first, i % 2);
		if (allocs_counted() - m0 < BURST)
			break;
	}
	CHECK_STATUS(err, 0, "remote push cost: %u windows of 10 bursts to warm the caches "
		     "(%d at most)", w < WARM_WINDOWS ? w + 1 : w, WARM_WINDOWS);
	if (err || tpu__remote_push_stats(b->rw.rdv, &s0))
		return;
	/*
	 * Warm, the caches can still meet a burst with more in flight than
	 * any before (a thread preempted at the wrong moment), and keep what
	 * it needed: a burst or two allocate, then none.  Without them, or
	 * with one too small, every burst that piles up allocates again
	 * (7 to 16 of 30 here with 8 pipe blocks kept instead of 32; 0 to 4
	 * of 30 with 32, two busy processes on the two cores).
	 */
	p0 = pushes_made(a);
	for (i = 0; i < MEASURED * 10 && !err; i++, first += BURST) {
		m0 = allocs_counted();
		err = burst(a, b, first, i % 2);
		m = allocs_counted() - m0;
		allocating += m > 0;
		total += m;
		printf("%s%lu%s", i ? " " : "# allocations per burst: ", m,
		       i + 1 < MEASURED * 10 ? "" : "\n");
	}
	p = pushes_made(a) - p0;
	inboxed = tpu__remote_push_stats(b->rw.rdv, &s) ? 0 : s.inboxed - s0.inboxed;
	CHECK_STATUS(err, 0, "remote push cost: %d bursts of %d sends ahead of their receives, "
		     "every other one behind busy context threads", MEASURED * 10, BURST);
	CHECK(p > 0, "remote push cost: %lu of the bursts' %d sends were pushed, %lu into the inbox",
	      p, MEASURED * 10 * BURST, inboxed);
	CHECK(allocating <= ALLOCATING_MAX, "remote push cost: %u of %d bursts allocated (%lu "
	      "allocations in all), at most %d", allocating, MEASURED * 10, total, ALLOCATING_MAX);
}

static void key_task_case(const char *src_dev, const char *dst_dev, const char *edge,
			  const char *want_src, const char *want_dst)
{
	struct tpu_key k = { .src_incarnation = 1, .iter_id = 2 };
	struct tpu_str src = { 0 }, dst = { 0 };
	char buf[512];
	size_t len = 0;
	bool ok;

	k.src_device = (struct tpu_str){ src_dev, strlen(src_dev) };
	k.dst_device = (struct tpu_str){ dst_dev, strlen(dst_dev) };
	k.edge_name = (struct tpu_str){ edge, strlen(edge) };
	ok = !tpu_key_build(&k, buf, sizeof(buf), &len) &&
	     tpu__remote_key_tasks((const uint8_t *)buf, len, &src, &dst);
	CHECK(ok && src.len == strlen(want_src) && !memcmp(src.ptr, want_src, src.len) &&
	      dst.len == strlen(want_dst) && !memcmp(dst.ptr, want_dst, dst.len),
	      "remote cost: the tasks of %s -> %s are %s and %s", src_dev, dst_dev, want_src,
	      want_dst);
}

/*
 * The keys' hash (tpu__rdv_key_hash, eight bytes a step) spreads keys over
 * the low bits the tables index by, also keys that differ only in a high
 * byte of one of those words, or only in their iteration.
 */
static void key_hash_spread(void)
{
	unsigned int count[64] = { 0 }, worst = 0, i;
	char k[RH_KEY_MAX];
	size_t len;

	for (i = 0; i < 256; i++) {
		memset(k, 'k', 40);
		k[15] = (char)i;	/* the top byte of the second word */
		count[tpu__rdv_key_hash((const uint8_t *)k, 40) & 63]++;
	}
	for (i = 0; i < 64; i++)
		worst = count[i] > worst ? count[i] : worst;
	CHECK(worst <= 16, "remote cost: 256 keys that differ in one word's top byte: at most %u "
	      "in one of 64 buckets (16)", worst);
	memset(count, 0, sizeof(count));
	worst = 0;
	for (i = 0; i < 256; i++) {
		len = rh_key(k, TASK_A, TASK_B, "edge", INC, i);
		count[tpu__rdv_key_hash((const uint8_t *)k, len) & 63]++;
	}
	for (i = 0; i < 64; i++)
		worst = count[i] > worst ? count[i] : worst;
	CHECK(worst <= 16, "remote cost: 256 keys that differ in their iteration: at most %u in one "
	      "of 64 buckets (16)", worst);
}

void test_remote_cost(void)
{
	struct worker a = { 0 }, b = { 0 };
	bool ok;

	key_hash_spread();
	key_task_case(TASK_A "/device:CPU:0", TASK_B "/device:GPU:3", "x", TASK_A, TASK_B);
	key_task_case("/job:device/replica:0/task:1/device:CPU:0",
		      "/job:devices/replica:2/task:10/device:GPU:0", "/device:CPU:0",
		      "/job:device/replica:0/task:1", "/job:devices/replica:2/task:10");
	ok = rh_shm_worker_open(&a.rw, TASK_A, "remotecost", "a", NULL) &&
	     rh_shm_worker_open(&b.rw, TASK_B, "remotecost", "b", NULL);
	CHECK(ok, "remote cost: two workers over shm");
	if (ok)
		ok = !tpu_rendezvous_add_peer(a.rw.rdv, TASK_B, b.rw.url) &&
		     !tpu_rendezvous_add_peer(b.rw.rdv, TASK_A, a.rw.url);
	if (ok)
		costs_per_round_trip(&a, &b);
	rh_worker_close(&b.rw);
	rh_worker_close(&a.rw);

	ok = rh_shm_worker_open(&a.rw, TASK_A, "remotecost", "pa", "costsecret") &&
	     rh_shm_worker_open(&b.rw, TASK_B, "remotecost", "pb", "costsecret");
	CHECK(ok, "remote cost: two workers over shm with a job secret");
	if (ok)
		ok = !tpu_rendezvous_add_peer(a.rw.rdv, TASK_B, b.rw.url) &&
		     !tpu_rendezvous_add_peer(b.rw.rdv, TASK_A, a.rw.url);
	if (ok)
		push_costs(&a, &b);
	rh_worker_close(&b.rw);
	rh_worker_close(&a.rw);
}
