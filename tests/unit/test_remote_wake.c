// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Wake-ups of the remote rendezvous (lib/remote, r_wait_sleep): a blocked
 * receive that stops spinning sleeps in the place of its pipe context's
 * thread, on the context's wake descriptor, so that the frame ending the
 * wait wakes the waiter alone and not that thread first.
 *
 *   - a ping-pong between two workers of this process over shm, each side
 *     answering 300 us after its receive returned (longer than any spin,
 *     shorter than the context's grace after a lender): the contexts'
 *     threads are woken for far fewer than the round trips, and the
 *     waiters slept in their place about once per receive;
 *   - a waiter asleep in that place is woken by another thread's post: a
 *     key local to the worker (the inner rendezvous completes it on the
 *     user's context thread), and an abort.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ctx/ctx.h"
#include "remote/remote.h"
#include "remote_harness.h"
#include "tap.h"
#include "tpu_user.h"
#include "waitword.h"

#define TASK_A		"/job:worker/replica:0/task:0"
#define TASK_B		"/job:worker/replica:0/task:1"
#define ROUNDS		200
#define ANSWER_US	300
#define WAIT_NS		(10ull * 1000000000ull)
#define INC		3	/* the source incarnation of the keys */

struct worker {
	struct rh_worker rw;
	tpu_status err;		/* the ping-pong's first failure */
	uint64_t vals[ROUNDS];	/* what its posted sends send, until taken */
};

static struct tpu_context *pctx_of(struct worker *w)
{
	return ((struct remote *)w->rw.rdv->impl_state)->pctx;
}

static tpu_status take(struct worker *w, const char *src, const char *dst, const char *edge,
		       unsigned int i, uint64_t *got)
{
	struct tpu_tensor t = { .data = got, .len = sizeof(*got) };
	char k[RH_KEY_MAX];
	size_t kl = rh_key(k, src, dst, edge, INC, i), len = 0;
	tpu_status st = tpu_rendezvous_recv_wait(w->rw.rdv, k, kl, &t, WAIT_NS, &len);

	return st ? st : len == sizeof(*got) && *got == i ? 0 : -EBADMSG;
}

/* A posted send of @i: its memory is the worker's until the key is taken. */
static tpu_status give(struct worker *w, const char *src, const char *dst, const char *edge,
		       unsigned int i)
{
	struct tpu_tensor t = { .data = &w->vals[i], .len = sizeof(w->vals[i]) };
	char k[RH_KEY_MAX];
	size_t kl = rh_key(k, src, dst, edge, INC, i);

	w->vals[i] = i;
	return tpu_rendezvous_send(w->rw.rdv, k, kl, &t, 0, NULL, NULL);
}

static void pause_us(long us)
{
	struct timespec ts = { 0, us * 1000 };

	nanosleep(&ts, NULL);
}

/* Worker B: answer each ping ANSWER_US after it came. */
static void *answer(void *arg)
{
	struct worker *b = arg;
	uint64_t got;

	for (unsigned int i = 0; i < ROUNDS && !b->err; i++) {
		b->err = take(b, TASK_A, TASK_B, "ping", i, &got);
		pause_us(ANSWER_US);
		if (!b->err)
			b->err = give(b, TASK_B, TASK_A, "pong", i);
	}
	return NULL;
}

static void ping_pong_wakes(struct worker *a, struct worker *b)
{
	uint64_t wakes0, sleeps0, wakes, sleeps, got;
	tpu_status err = 0;
	unsigned int i;
	pthread_t th;

	/* One round first: the pipes are set up, their wake-ups not counted. */
	err = give(a, TASK_A, TASK_B, "warm", 0);
	if (!err)
		err = take(b, TASK_A, TASK_B, "warm", 0, &got);
	CHECK_STATUS(err, 0, "remote wake: a first tensor crosses the pipes");
	if (err)
		return;
	wakes0 = tpu__ctx_wakes(pctx_of(a)) + tpu__ctx_wakes(pctx_of(b));
	sleeps0 = tpu__ctx_lend_sleeps(pctx_of(a)) + tpu__ctx_lend_sleeps(pctx_of(b));
	if (pthread_create(&th, NULL, answer, b)) {
		CHECK(false, "remote wake: a thread for worker B");
		return;
	}
	for (i = 0; i < ROUNDS && !err; i++) {
		pause_us(ANSWER_US);
		err = give(a, TASK_A, TASK_B, "ping", i);
		if (!err)
			err = take(a, TASK_B, TASK_A, "pong", i, &got);
	}
	if (err)
		tpu_rendezvous_abort(b->rw.rdv, err);
	pthread_join(th, NULL);
	wakes = tpu__ctx_wakes(pctx_of(a)) + tpu__ctx_wakes(pctx_of(b)) - wakes0;
	sleeps = tpu__ctx_lend_sleeps(pctx_of(a)) + tpu__ctx_lend_sleeps(pctx_of(b)) - sleeps0;
	CHECK(!err && !b->err, "remote wake: %d round trips with answers %d us late (%s, %s)",
	      ROUNDS, ANSWER_US, tpu_strerror(err), tpu_strerror(b->err));
	CHECK(wakes <= ROUNDS / 2,
	      "remote wake: the contexts' threads woke %llu times in %d round trips (at most %d)",
	      (unsigned long long)wakes, ROUNDS, ROUNDS / 2);
	CHECK(sleeps >= ROUNDS,
	      "remote wake: waiters slept in their place %llu times for %d receives (at least %d)",
	      (unsigned long long)sleeps, 2 * ROUNDS, ROUNDS);
}

struct poster {
	struct worker *w;
	bool abort;
	unsigned int iter;
};

/* After 50 ms: send the local key, or abort. */
static void *post_later(void *arg)
{
	struct poster *p = arg;

	pause_us(50000);
	if (p->abort)
		tpu_rendezvous_abort(p->w->rw.rdv, -ECONNABORTED);
	else
		give(p->w, TASK_A, TASK_A, "local", p->iter);
	return NULL;
}

/*
 * Until pctx's thread has not woken for 20 ms (at most 1 s): a waiter
 * lends itself only while that thread sleeps, and one busy with the last
 * test's frames has the waiter sleep on its own word instead.
 */
static void settle(struct worker *w)
{
	uint64_t before;

	for (int i = 0; i < 50; i++) {
		before = tpu__ctx_wakes(pctx_of(w));
		pause_us(20000);
		if (tpu__ctx_wakes(pctx_of(w)) == before)
			return;
	}
}

/*
 * A waiter woken by another thread's post: whatever it slept on, the post
 * ends the wait at once.  True if it slept in pctx's place.
 */
static bool woken_by_other_thread(struct worker *a, bool abort, unsigned int iter)
{
	struct poster p = { .w = a, .abort = abort, .iter = iter };
	uint64_t sleeps0, got = 0, t0;
	struct timespec ts;
	tpu_status st;
	pthread_t th;

	settle(a);
	sleeps0 = tpu__ctx_lend_sleeps(pctx_of(a));
	if (pthread_create(&th, NULL, post_later, &p)) {
		CHECK(false, "remote wake: a posting thread");
		return false;
	}
	clock_gettime(CLOCK_MONOTONIC, &ts);
	t0 = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	st = take(a, abort ? TASK_B : TASK_A, TASK_A, abort ? "never" : "local", iter, &got);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	t0 = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec - t0;
	pthread_join(th, NULL);
	CHECK_STATUS(st, abort ? -ECONNABORTED : 0, "remote wake: %s (try %u)",
		     abort ? "an abort ends a blocked receive"
			   : "a local key's send ends a blocked receive", iter);
	CHECK(t0 < 2000000000ull, "remote wake: within %llu ms of a 10 s timeout",
	      (unsigned long long)(t0 / 1000000));
	return tpu__ctx_lend_sleeps(pctx_of(a)) > sleeps0;
}

/*
 * Whether the waiter slept in pctx's place depends on that thread being
 * asleep when the wait began, which a loaded machine does not promise:
 * up to five tries, one of which must.  The abort ends the rendezvous, so
 * it runs once, last; its wake-up when lent is covered by the time check
 * (a lent waiter the abort failed to wake would sleep out the timeout).
 */
static void woken_in_place(struct worker *a)
{
	unsigned int tries = 0;
	bool lent = false;

	while (!lent && tries < 5)
		lent = woken_by_other_thread(a, false, 7 + tries++);
	CHECK(lent, "remote wake: a waiter slept in pctx's place (%u tries)", tries);
	if (!woken_by_other_thread(a, true, 20))
		tap_diag("remote wake: the aborted waiter slept on its own word, not in pctx's place");
}

/* Bound to @cpu, and the spin policy told. */
static int bind_to(int cpu)
{
	if (bind_to_cpu(cpu))
		return -1;
	tpu__spin_cpus_changed();
	return 0;
}

/*
 * Worker @task of a process bound to @cpu, listening where the other
 * process looks for it (the pid of its process in the URL), with the other
 * (@peer, in process @peer_pid) in its map.
 */
static bool bound_worker(struct worker *w, int cpu, const char *task, const char *peer,
			 pid_t peer_pid)
{
	char url[96];

	snprintf(url, sizeof(url), "shm://remotewake-%d-bound", (int)peer_pid);
	return !bind_to(cpu) && rh_shm_worker_open(&w->rw, task, "remotewake", "bound", NULL) &&
	       !tpu_rendezvous_add_peer(w->rw.rdv, peer, url);
}

struct bound_side {
	struct worker *w;
	bool first;		/* task A: pings first */
	tpu_status err;
	uint64_t taken;		/* spins that took the lone core, during the rounds */
};

/*
 * The rounds, on a thread of their own: the forking thread's spin state
 * (a quiet period from an earlier test, say) is not theirs.
 */
static void *bound_rounds(void *arg)
{
	struct bound_side *b = arg;
	uint64_t got, taken = tpu__spin_last_core_taken();

	for (unsigned int i = 0; i < ROUNDS && !b->err; i++) {
		if (b->first) {
			b->err = give(b->w, TASK_A, TASK_B, "ping", i);
			if (!b->err)
				b->err = take(b->w, TASK_B, TASK_A, "pong", i, &got);
		} else {
			b->err = take(b->w, TASK_A, TASK_B, "ping", i, &got);
			if (!b->err)
				b->err = give(b->w, TASK_B, TASK_A, "pong", i);
		}
	}
	b->taken = tpu__spin_last_core_taken() - taken;
	/* B's last pong is taken before it goes. */
	if (!b->err)
		b->err = b->first ? give(b->w, TASK_A, TASK_B, "bye", 0) :
			 take(b->w, TASK_A, TASK_B, "bye", 0, &got);
	return NULL;
}

static tpu_status bound_side_run(struct worker *w, bool first, uint64_t *taken)
{
	struct bound_side b = { .w = w, .first = first };
	pthread_t th;

	if (pthread_create(&th, NULL, bound_rounds, &b))
		return -EAGAIN;
	pthread_join(th, NULL);
	*taken = b.taken;
	return b.err;
}

/*
 * Two processes bound to cores @a and @b, a worker each: ROUNDS
 * ping-pongs.  Run in a process of its own; its exit status is 1 if
 * anything failed, plus 2 if a waiter of task A spun on its lone core.
 */
static void bound_pair(int a, int b)
{
	static struct worker wa, wb;
	pid_t parent = getpid(), pid = fork();
	uint64_t taken = 0;
	tpu_status err;

	if (pid == 0) {
		err = bound_worker(&wb, b, TASK_B, TASK_A, parent) ? 0 : -EIO;
		if (!err)
			err = bound_side_run(&wb, false, &taken);
		rh_worker_close(&wb.rw);
		_exit(err ? 1 : 0);
	}
	err = pid > 0 && bound_worker(&wa, a, TASK_A, TASK_B, pid) ? 0 : -EIO;
	if (!err)
		err = bound_side_run(&wa, true, &taken);
	if (pid > 0) {
		int ws = 0;

		if (waitpid(pid, &ws, 0) != pid || !WIFEXITED(ws) || WEXITSTATUS(ws))
			err = err ? err : -ECHILD;
	}
	rh_worker_close(&wa.rw);
	_exit((err ? 1 : 0) | (taken ? 2 : 0));
}

static int bound_run(int a, int b)
{
	pid_t pid = fork();
	int ws = 0;

	if (pid == 0)
		bound_pair(a, b);
	if (pid < 0 || waitpid(pid, &ws, 0) != pid)
		return -1;
	return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

/*
 * Workers bound to a core each (mpirun --bind-to core): a waiter lent to
 * its context reads the peer's frames itself, and no peer shares its core,
 * so it spins on that lone core; bound to one core together, it does not.
 */
static void bound_workers(void)
{
	int cpus[2], rc, tries = 0;

	if (!first_two_cpus(cpus)) {
		CHECK(true, "remote wake: bound workers # SKIP fewer than two usable cores");
		return;
	}
	/*
	 * Other processes busy on both cores (a parallel build, say) can
	 * keep every spin of 200 rounds in its back-off, as they should:
	 * a few tries, each a new pair.
	 */
	do
		rc = bound_run(cpus[0], cpus[1]);
	while (rc == 0 && ++tries < 3 && !under_valgrind());
	CHECK(rc >= 0 && !(rc & 1),
	      "remote wake: %d round trips between workers bound to a core each", ROUNDS);
	if (under_valgrind())
		CHECK(true, "remote wake: bound waiters spin # SKIP under valgrind");
	else
		CHECK(rc == 2, "remote wake: their waiters spin on their lone cores (exit %d, "
		      "%d tries)", rc, tries + (rc == 2));
	rc = bound_run(cpus[0], cpus[0]);
	CHECK(rc == 0,
	      "remote wake: workers bound to one core together do not spin on it (exit %d)", rc);
}

void test_remote_wake(void)
{
	struct worker a = { 0 }, b = { 0 };
	bool ok = rh_shm_worker_open(&a.rw, TASK_A, "remotewake", "a", NULL) &&
		  rh_shm_worker_open(&b.rw, TASK_B, "remotewake", "b", NULL);

	CHECK(ok, "remote wake: two workers over shm");
	if (ok)
		ok = !tpu_rendezvous_add_peer(a.rw.rdv, TASK_B, b.rw.url) &&
		     !tpu_rendezvous_add_peer(b.rw.rdv, TASK_A, a.rw.url);
	if (ok) {
		ping_pong_wakes(&a, &b);
		woken_in_place(&a);
	}
	rh_worker_close(&b.rw);
	rh_worker_close(&a.rw);
	bound_workers();
}
