// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The single-process rendezvous cases, run once per implementation.  Each
 * point's name starts with the implementation's, so a failure says which.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rdv_cases.h"
#include "tap.h"

#define MS 1000000ull
/* Generous: the VM runs under TCG. */
#define WAIT_NS (20000 * MS)

/* ---- a log of callbacks ----------------------------------------------- */

struct ev {
	int tag;
	tpu_status st;
	size_t len;
};

struct evlog {
	pthread_mutex_t m;
	pthread_cond_t c;
	struct ev ev[2048];
	int n;
};

struct cbarg {
	struct evlog *log;
	int tag;
};

static void log_init(struct evlog *l)
{
	memset(l, 0, sizeof(*l));
	pthread_mutex_init(&l->m, NULL);
	pthread_cond_init(&l->c, NULL);
}

static void log_fini(struct evlog *l)
{
	pthread_mutex_destroy(&l->m);
	pthread_cond_destroy(&l->c);
}

static void log_add(struct evlog *l, int tag, tpu_status st, size_t len)
{
	pthread_mutex_lock(&l->m);
	if (l->n < (int)(sizeof(l->ev) / sizeof(l->ev[0])))
		l->ev[l->n] = (struct ev){ tag, st, len };
	l->n++;
	pthread_cond_broadcast(&l->c);
	pthread_mutex_unlock(&l->m);
}

/* Wait until @n callbacks are in; false on timeout. */
static bool log_wait(struct evlog *l, int n)
{
	uint64_t end = rdv_now_ns() + WAIT_NS;
	struct timespec ts;
	bool ok;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)(WAIT_NS / 1000000000ull);
	pthread_mutex_lock(&l->m);
	while (l->n < n && rdv_now_ns() < end)
		pthread_cond_timedwait(&l->c, &l->m, &ts);
	ok = l->n >= n;
	pthread_mutex_unlock(&l->m);
	return ok;
}

static int log_count(struct evlog *l)
{
	int n;

	pthread_mutex_lock(&l->m);
	n = l->n;
	pthread_mutex_unlock(&l->m);
	return n;
}

static void send_cb(void *arg, tpu_status st)
{
	struct cbarg *a = arg;

	log_add(a->log, a->tag, st, 0);
}

static void recv_cb(void *arg, tpu_status st, size_t len)
{
	struct cbarg *a = arg;

	log_add(a->log, a->tag, st, len);
}

/* ---- fixture ------------------------------------------------------------ */

struct fx {
	const struct rdv_impl *impl;
	struct tpu_context *ctx;
	struct tpu_rendezvous *rdv;
};

static bool fx_open(struct fx *f, const struct rdv_impl *impl)
{
	struct tpu_context_options o = { .flags = impl->ctx_flags };

	f->impl = impl;
	f->rdv = NULL;
	if (tpu_context_create(&o, &f->ctx))
		return false;
	if (tpu_rendezvous_create(f->ctx, impl->impl, &f->rdv)) {
		tpu_context_destroy(f->ctx);
		return false;
	}
	return true;
}

static void fx_close(struct fx *f)
{
	tpu_rendezvous_destroy(f->rdv);
	tpu_context_destroy(f->ctx);
}

static tpu_status send_str(struct fx *f, const char *key, const char *s, struct cbarg *a)
{
	struct tpu_tensor t = { .data = (void *)s, .len = strlen(s) };

	return tpu_rendezvous_send(f->rdv, key, strlen(key), &t, 0, send_cb, a);
}

static tpu_status recv_into(struct fx *f, const char *key, void *dst, size_t cap,
			    uint64_t timeout_ns, struct cbarg *a)
{
	struct tpu_tensor t = { .data = dst, .len = cap };

	return tpu_rendezvous_recv(f->rdv, key, strlen(key), &t, timeout_ns, recv_cb, a);
}

#define N(f) ((f)->impl->name)

/* ---- orderings ---------------------------------------------------------- */

static void recv_before_send(const struct rdv_impl *impl)
{
	struct evlog l;
	struct cbarg rs = { &l, 1 }, ss = { &l, 2 };
	char dst[64] = { 0 };
	struct fx f;

	log_init(&l);
	if (!fx_open(&f, impl)) {
		CHECK(false, "%s_fixture_opens", impl->name);
		return;
	}
	CHECK_STATUS(recv_into(&f, "k", dst, sizeof(dst), 0, &rs), 0, "%s_recv_posted_first_is_accepted", N(&f));
	CHECK_STATUS(send_str(&f, "k", "hello", &ss), 0, "%s_send_after_recv_is_accepted", N(&f));
	CHECK(log_wait(&l, 2), "%s_recv_before_send_both_callbacks_run", N(&f));
	CHECK(l.ev[0].tag == 1 && l.ev[0].st == 0 && l.ev[0].len == 5 && memcmp(dst, "hello", 5) == 0,
	      "%s_recv_before_send_delivers_the_bytes", N(&f));
	CHECK(l.n == 2 && l.ev[1].tag == 2 && l.ev[1].st == 0, "%s_recv_before_send_send_completes_ok", N(&f));
	fx_close(&f);
	log_fini(&l);
}

static void send_before_recv(const struct rdv_impl *impl)
{
	struct evlog l;
	struct cbarg rs = { &l, 1 }, ss = { &l, 2 };
	char dst[64] = { 0 };
	size_t len = 0;
	struct fx f;

	log_init(&l);
	if (!fx_open(&f, impl))
		return;
	CHECK_STATUS(send_str(&f, "key", "world!", &ss), 0, "%s_send_posted_first_is_accepted", N(&f));
	CHECK_STATUS(recv_into(&f, "key", dst, sizeof(dst), 0, &rs), 0, "%s_recv_after_send_is_accepted", N(&f));
	CHECK(log_wait(&l, 2), "%s_send_before_recv_both_callbacks_run", N(&f));
	CHECK(memcmp(dst, "world!", 6) == 0, "%s_send_before_recv_delivers_the_bytes", N(&f));
	/* Each key is delivered once: a second receive waits, then times out. */
	{
		struct tpu_tensor t = { .data = dst, .len = sizeof(dst) };

		CHECK_STATUS(tpu_rendezvous_recv_wait(f.rdv, "key", 3, &t, 50 * MS, &len), -ETIMEDOUT,
			     "%s_a_key_is_delivered_only_once", N(&f));
	}
	fx_close(&f);
	log_fini(&l);
}

static void recv_wait_cases(const struct rdv_impl *impl)
{
	struct evlog l;
	struct cbarg ss = { &l, 1 };
	char dst[16] = { 0 };
	struct tpu_tensor t = { .data = dst, .len = sizeof(dst) };
	uint64_t t0;
	size_t len = 0;
	struct fx f;
	tpu_status st;

	log_init(&l);
	if (!fx_open(&f, impl))
		return;
	CHECK_STATUS(send_str(&f, "w", "abc", &ss), 0, "%s_send_for_recv_wait", N(&f));
	CHECK_STATUS(tpu_rendezvous_recv_wait(f.rdv, "w", 1, &t, 0, &len), 0,
		     "%s_recv_wait_gets_a_posted_tensor", N(&f));
	CHECK(len == 3 && memcmp(dst, "abc", 3) == 0, "%s_recv_wait_reports_length_and_bytes", N(&f));
	t0 = rdv_now_ns();
	st = tpu_rendezvous_recv_wait(f.rdv, "none", 4, &t, 100 * MS, &len);
	CHECK_STATUS(st, -ETIMEDOUT, "%s_recv_wait_times_out", N(&f));
	CHECK(rdv_now_ns() - t0 >= 90 * MS, "%s_recv_wait_timeout_is_not_early", N(&f));
	CHECK(log_wait(&l, 1) && l.ev[0].st == 0, "%s_send_callback_after_recv_wait", N(&f));
	fx_close(&f);
	log_fini(&l);
}

/* A receiver in a thread of its own, for the blocking send's other side. */
struct late_recv {
	struct tpu_rendezvous *rdv;
	const char *key;
	uint64_t delay_ns;
	char dst[16];
	tpu_status st;
	size_t len;
};

static void *late_recv_main(void *arg)
{
	struct late_recv *r = arg;
	struct tpu_tensor t = { .data = r->dst, .len = sizeof(r->dst) };
	struct timespec d = { .tv_sec = 0, .tv_nsec = (long)r->delay_ns };

	nanosleep(&d, NULL);
	r->st = tpu_rendezvous_recv_wait(r->rdv, r->key, strlen(r->key), &t, 10000 * MS, &r->len);
	return NULL;
}

static void send_wait_cases(const struct rdv_impl *impl)
{
	struct tpu_tensor s = { .data = "blocking", .len = 8 };
	struct late_recv r;
	char dst[16] = { 0 };
	struct tpu_tensor t = { .data = dst, .len = sizeof(dst) };
	pthread_t th;
	uint64_t t0;
	struct fx f;

	if (!fx_open(&f, impl))
		return;
	/* Returns once the receiver, 100 ms later, has the bytes. */
	r = (struct late_recv){ .rdv = f.rdv, .key = "sw", .delay_ns = 100 * MS };
	/* Before the thread exists: its 100 ms cannot have begun earlier. */
	t0 = rdv_now_ns();
	CHECK(pthread_create(&th, NULL, late_recv_main, &r) == 0, "%s_receiver_thread_starts", N(&f));
	CHECK_STATUS(tpu_rendezvous_send_wait(f.rdv, "sw", 2, &s, 0, 0), 0,
		     "%s_send_wait_returns_when_the_tensor_was_taken", N(&f));
	CHECK(rdv_now_ns() - t0 >= 90 * MS, "%s_send_wait_waits_for_the_receiver", N(&f));
	pthread_join(th, NULL);
	CHECK(r.st == 0 && r.len == 8 && memcmp(r.dst, "blocking", 8) == 0,
	      "%s_send_wait_delivers_the_bytes", N(&f));
	/* Nobody takes it: withdrawn after the timeout, the key is free again. */
	t0 = rdv_now_ns();
	CHECK_STATUS(tpu_rendezvous_send_wait(f.rdv, "lonely", 6, &s, 0, 100 * MS), -ETIMEDOUT,
		     "%s_send_wait_times_out", N(&f));
	CHECK(rdv_now_ns() - t0 >= 90 * MS, "%s_send_wait_timeout_is_not_early", N(&f));
	CHECK_STATUS(tpu_rendezvous_recv_wait(f.rdv, "lonely", 6, &t, 50 * MS, NULL), -ETIMEDOUT,
		     "%s_send_wait_that_timed_out_left_nothing", N(&f));
	CHECK_STATUS(tpu_rendezvous_send_wait(NULL, "k", 1, &s, 0, 0), -EINVAL,
		     "%s_send_wait_without_rendezvous_is_einval", N(&f));
	fx_close(&f);
}

/*
 * A recv_wait or send_wait blocked in a thread of its own (kmod: in its
 * own TP_IOC_RECV, or reading its SEND's completion, not through the
 * context thread), and what must wake it from another thread.
 */
struct blocked {
	pthread_t th;
	struct tpu_rendezvous *rdv;
	const char *key;
	bool send;
	size_t cap;
	uint64_t timeout_ns;
	char buf[64];
	tpu_status st;
	size_t len;
	uint64_t took_ns;
	volatile bool done;
};

static void *blocked_main(void *arg)
{
	struct blocked *b = arg;
	struct tpu_tensor t = { .data = b->buf, .len = b->send ? 5 : b->cap };
	uint64_t t0 = rdv_now_ns();

	if (b->send)
		b->st = tpu_rendezvous_send_wait(b->rdv, b->key, strlen(b->key), &t, 0,
						 b->timeout_ns);
	else
		b->st = tpu_rendezvous_recv_wait(b->rdv, b->key, strlen(b->key), &t,
						 b->timeout_ns, &b->len);
	b->took_ns = rdv_now_ns() - t0;
	__atomic_store_n(&b->done, true, __ATOMIC_RELEASE);
	return NULL;
}

static bool blocked_start(struct blocked *b, struct tpu_rendezvous *rdv, const char *key,
			  bool send, size_t cap, uint64_t timeout_ns)
{
	*b = (struct blocked){ .rdv = rdv, .key = key, .send = send, .cap = cap,
			       .timeout_ns = timeout_ns, .st = 1 };
	if (send)
		memcpy(b->buf, "hello", 5);
	return pthread_create(&b->th, NULL, blocked_main, b) == 0;
}

/* Join the thread if it ends within @ms; false (and a leaked thread) if not. */
static bool blocked_end(struct blocked *b, unsigned int ms)
{
	uint64_t end = rdv_now_ns() + ms * MS;

	while (!__atomic_load_n(&b->done, __ATOMIC_ACQUIRE) && rdv_now_ns() < end)
		usleep(1000);
	if (!__atomic_load_n(&b->done, __ATOMIC_ACQUIRE))
		return false;
	pthread_join(b->th, NULL);
	return true;
}

static uint64_t process_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void blocked_waiter_cases(const struct rdv_impl *impl)
{
	struct evlog l;
	struct cbarg ss = { &l, 1 };
	struct blocked b;
	char dst[64];
	struct tpu_tensor t = { .data = dst, .len = sizeof(dst) };
	uint64_t c0;
	size_t len = 0;
	bool ended;
	struct fx f;

	log_init(&l);
	if (!fx_open(&f, impl))
		return;
	/* Asleep: no CPU while nothing comes. */
	if (blocked_start(&b, f.rdv, "bk/recv", false, 16, 0)) {
		usleep(100000);
		c0 = process_cpu_ns();
		usleep(200000);
		c0 = process_cpu_ns() - c0;
		CHECK(c0 < 40 * MS, "%s_blocked_recv_wait_uses_no_cpu (%llu ns in 200 ms)", N(&f),
		      (unsigned long long)c0);
		CHECK_STATUS(tpu_rendezvous_cancel(f.rdv, "bk/recv", 7), 0,
			     "%s_cancel_of_a_blocked_recv_wait_succeeds", N(&f));
		ended = blocked_end(&b, 10000);
		CHECK(ended && b.st == -ECANCELED,
		      "%s_cancel_from_another_thread_wakes_a_blocked_recv_wait (%d)", N(&f), b.st);
		if (!ended)
			goto stuck;
	}
	/* Cancelled at once: the waiter may not be in the kernel yet. */
	if (blocked_start(&b, f.rdv, "bk/race", false, 16, 0)) {
		uint64_t end = rdv_now_ns() + WAIT_NS;

		/*
		 * -ENOENT until the thread issued it: then at once.  Yielding, so
		 * that under valgrind (one thread at a time) the waiter runs.
		 */
		while (tpu_rendezvous_cancel(f.rdv, "bk/race", 7) == -ENOENT && rdv_now_ns() < end)
			sched_yield();
		ended = blocked_end(&b, 10000);
		CHECK(ended && b.st == -ECANCELED,
		      "%s_cancel_racing_a_recv_wait_going_to_sleep_wakes_it (%d)", N(&f), b.st);
		if (!ended)
			goto stuck;
	}
	if (blocked_start(&b, f.rdv, "bk/send", true, 0, 0)) {
		usleep(100000);
		CHECK_STATUS(tpu_rendezvous_cancel(f.rdv, "bk/send", 7), 0,
			     "%s_cancel_of_a_blocked_send_wait_succeeds", N(&f));
		ended = blocked_end(&b, 10000);
		CHECK(ended && b.st == -ECANCELED,
		      "%s_cancel_from_another_thread_wakes_a_blocked_send_wait (%d)", N(&f), b.st);
		if (!ended)
			goto stuck;
		CHECK_STATUS(tpu_rendezvous_recv_wait(f.rdv, "bk/send", 7, &t, 50 * MS, NULL),
			     -ETIMEDOUT, "%s_a_cancelled_send_wait_left_nothing", N(&f));
	}
	/* A send from another thread reaches the sleeping receiver. */
	if (blocked_start(&b, f.rdv, "bk/late", false, 16, 0)) {
		usleep(100000);
		CHECK_STATUS(send_str(&f, "bk/late", "late bytes", &ss), 0,
			     "%s_late_send_to_a_blocked_recv_wait_starts", N(&f));
		ended = blocked_end(&b, 10000);
		CHECK(ended && b.st == 0 && b.len == 10 &&
		      memcmp(b.buf, "late bytes", 10) == 0,
		      "%s_late_send_wakes_a_blocked_recv_wait_with_the_bytes (%d)", N(&f), b.st);
		if (!ended)
			goto stuck;
		CHECK(log_wait(&l, 1) && l.ev[0].st == 0, "%s_late_send_is_called_back", N(&f));
	}
	/* A blocked send_wait returns once another thread took the tensor. */
	if (blocked_start(&b, f.rdv, "bk/taken", true, 0, 0)) {
		usleep(100000);
		CHECK_STATUS(tpu_rendezvous_recv_wait(f.rdv, "bk/taken", 8, &t, WAIT_NS, &len), 0,
			     "%s_recv_of_a_blocked_send_wait_succeeds", N(&f));
		ended = blocked_end(&b, 10000);
		CHECK(ended && b.st == 0 && len == 5 && memcmp(dst, "hello", 5) == 0,
		      "%s_a_blocked_send_wait_returns_once_taken (%d)", N(&f), b.st);
		if (!ended)
			goto stuck;
	}
	/* Too small while asleep: -EMSGSIZE with the length, the tensor stays. */
	if (blocked_start(&b, f.rdv, "bk/big", false, 4, 0)) {
		usleep(100000);
		CHECK_STATUS(send_str(&f, "bk/big", "twelve bytes", &ss), 0,
			     "%s_send_to_a_too_small_blocked_recv_wait_starts", N(&f));
		ended = blocked_end(&b, 10000);
		CHECK(ended && b.st == -EMSGSIZE && b.len == 12,
		      "%s_blocked_recv_wait_too_small_is_emsgsize_with_the_length (%d, %zu)", N(&f),
		      b.st, b.len);
		if (!ended)
			goto stuck;
		CHECK_STATUS(tpu_rendezvous_recv_wait(f.rdv, "bk/big", 6, &t, WAIT_NS, &len), 0,
			     "%s_emsgsize_kept_the_tensor_for_a_retry", N(&f));
		CHECK(len == 12 && memcmp(dst, "twelve bytes", 12) == 0,
		      "%s_the_retry_gets_the_bytes", N(&f));
	}
	/* The deadline: not early, not much late, and nothing taken after it. */
	if (blocked_start(&b, f.rdv, "bk/deadline", false, 16, 150 * MS)) {
		ended = blocked_end(&b, 10000);
		CHECK(ended && b.st == -ETIMEDOUT,
		      "%s_blocked_recv_wait_deadline_is_etimedout (%d)", N(&f), b.st);
		if (!ended)
			goto stuck;
		CHECK(b.took_ns >= 140 * MS && b.took_ns < 5000 * MS,
		      "%s_blocked_recv_wait_deadline_is_honoured (%llu ms)", N(&f),
		      (unsigned long long)(b.took_ns / MS));
		CHECK_STATUS(send_str(&f, "bk/deadline", "after", &ss), 0,
			     "%s_send_after_a_timed_out_recv_wait_starts", N(&f));
		CHECK_STATUS(tpu_rendezvous_recv_wait(f.rdv, "bk/deadline", 11, &t, WAIT_NS, &len), 0,
			     "%s_a_timed_out_recv_wait_took_nothing", N(&f));
	}
	/* Abort from another thread ends a blocked receive with its status. */
	if (blocked_start(&b, f.rdv, "bk/abort", false, 16, 0)) {
		usleep(100000);
		CHECK_STATUS(tpu_rendezvous_abort(f.rdv, -EPIPE), 0,
			     "%s_abort_with_a_blocked_recv_wait_succeeds", N(&f));
		ended = blocked_end(&b, 10000);
		CHECK(ended && b.st == -EPIPE,
		      "%s_abort_wakes_a_blocked_recv_wait_with_its_status (%d)", N(&f), b.st);
		if (!ended)
			goto stuck;
	}
	fx_close(&f);
	log_fini(&l);
	return;
stuck:
	/* Destroying the rendezvous ends the stuck wait (TPU_E_CLOSED). */
	fx_close(&f);
	CHECK(blocked_end(&b, 10000), "%s_destroy_ends_a_stuck_waiter", N(&f));
	log_fini(&l);
}

static void timeout_callback(const struct rdv_impl *impl)
{
	struct evlog l;
	struct cbarg rs = { &l, 1 }, ss = { &l, 2 }, rs2 = { &l, 3 };
	char dst[16];
	struct fx f;

	log_init(&l);
	if (!fx_open(&f, impl))
		return;
	CHECK_STATUS(recv_into(&f, "t", dst, sizeof(dst), 30 * MS, &rs), 0, "%s_recv_with_timeout_accepted", N(&f));
	CHECK(log_wait(&l, 1) && l.ev[0].st == -ETIMEDOUT, "%s_recv_callback_gets_etimedout", N(&f));
	/* A timed-out receive takes nothing: the next one gets the tensor. */
	CHECK_STATUS(send_str(&f, "t", "late", &ss), 0, "%s_send_after_a_timeout", N(&f));
	CHECK_STATUS(recv_into(&f, "t", dst, sizeof(dst), 0, &rs2), 0, "%s_recv_after_a_timeout", N(&f));
	CHECK(log_wait(&l, 3), "%s_after_a_timeout_the_key_still_works", N(&f));
	fx_close(&f);
	log_fini(&l);
}

/* ---- cancel, abort, errors ----------------------------------------------- */

static void cancel_cases(const struct rdv_impl *impl)
{
	struct evlog l;
	struct cbarg rs = { &l, 1 }, ss = { &l, 2 };
	char dst[16];
	struct fx f;

	log_init(&l);
	if (!fx_open(&f, impl))
		return;
	CHECK_STATUS(tpu_rendezvous_cancel(f.rdv, "x", 1), -ENOENT, "%s_cancel_of_nothing_is_enoent", N(&f));
	CHECK_STATUS(recv_into(&f, "c", dst, sizeof(dst), 0, &rs), 0, "%s_recv_to_cancel", N(&f));
	CHECK_STATUS(tpu_rendezvous_cancel(f.rdv, "c", 1), 0, "%s_cancel_of_a_waiting_recv_succeeds", N(&f));
	CHECK(log_wait(&l, 1) && l.ev[0].st == -ECANCELED, "%s_cancelled_recv_callback_gets_ecanceled", N(&f));
	CHECK_STATUS(send_str(&f, "s", "payload", &ss), 0, "%s_send_to_cancel", N(&f));
	CHECK_STATUS(tpu_rendezvous_cancel(f.rdv, "s", 1), 0, "%s_cancel_of_a_pending_send_succeeds", N(&f));
	CHECK(log_wait(&l, 2) && l.ev[1].st == -ECANCELED, "%s_cancelled_send_callback_gets_ecanceled", N(&f));
	fx_close(&f);
	log_fini(&l);
}

static void abort_cases(const struct rdv_impl *impl)
{
	struct evlog l;
	struct cbarg rs = { &l, 1 }, ss = { &l, 2 }, late = { &l, 3 };
	char dst[16];
	struct fx f;
	tpu_status st;

	log_init(&l);
	if (!fx_open(&f, impl))
		return;
	CHECK_STATUS(recv_into(&f, "a", dst, sizeof(dst), 0, &rs), 0, "%s_recv_before_abort", N(&f));
	CHECK_STATUS(send_str(&f, "b", "x", &ss), 0, "%s_send_before_abort", N(&f));
	CHECK_STATUS(tpu_rendezvous_abort(f.rdv, -EPIPE), 0, "%s_abort_succeeds", N(&f));
	CHECK(log_wait(&l, 2) && l.ev[0].st == -EPIPE && l.ev[1].st == -EPIPE,
	      "%s_abort_fails_pending_ops_with_its_status", N(&f));
	CHECK_STATUS(tpu_rendezvous_abort(f.rdv, -EIO), -EALREADY, "%s_second_abort_is_ealready", N(&f));
	/* Later operations fail too: at once, or through the callback. */
	st = send_str(&f, "c", "y", &late);
	CHECK(st == -EPIPE || (st == 0 && log_wait(&l, 3) && l.ev[2].st == -EPIPE),
	      "%s_send_after_abort_fails_with_the_status", N(&f));
	fx_close(&f);
	log_fini(&l);
}

static void msgsize_case(const struct rdv_impl *impl)
{
	struct evlog l;
	struct cbarg small = { &l, 1 }, big = { &l, 2 }, ss = { &l, 3 };
	char tiny[4], dst[32];
	struct fx f;

	log_init(&l);
	if (!fx_open(&f, impl))
		return;
	CHECK_STATUS(send_str(&f, "m", "0123456789", &ss), 0, "%s_send_for_emsgsize", N(&f));
	CHECK_STATUS(recv_into(&f, "m", tiny, sizeof(tiny), 0, &small), 0, "%s_small_recv_accepted", N(&f));
	CHECK(log_wait(&l, 1) && l.ev[0].st == -EMSGSIZE && l.ev[0].len == 10,
	      "%s_too_small_recv_gets_emsgsize_and_the_length", N(&f));
	CHECK_STATUS(recv_into(&f, "m", dst, sizeof(dst), 0, &big), 0, "%s_retry_recv_accepted", N(&f));
	CHECK(log_wait(&l, 3) && memcmp(dst, "0123456789", 10) == 0,
	      "%s_after_emsgsize_the_tensor_stays_for_a_retry", N(&f));
	fx_close(&f);
	log_fini(&l);
}

static void duplicate_send(const struct rdv_impl *impl)
{
	struct evlog l;
	struct cbarg a = { &l, 1 }, b = { &l, 2 };
	struct fx f;
	tpu_status st;

	log_init(&l);
	if (!fx_open(&f, impl))
		return;
	CHECK_STATUS(send_str(&f, "d", "one", &a), 0, "%s_first_send_of_a_key", N(&f));
	st = send_str(&f, "d", "two", &b);
	/* At once, or (kmod: the module decides) in the callback. */
	CHECK(st == -EEXIST || (st == 0 && log_wait(&l, 1) && l.ev[0].tag == 2 && l.ev[0].st == -EEXIST),
	      "%s_second_pending_send_of_a_key_is_eexist", N(&f));
	fx_close(&f);
	log_fini(&l);
}

static void zero_length(const struct rdv_impl *impl)
{
	struct evlog l;
	struct cbarg rs = { &l, 1 }, ss = { &l, 2 };
	struct tpu_tensor empty = { .data = NULL, .len = 0 };
	char dst[8];
	struct fx f;

	log_init(&l);
	if (!fx_open(&f, impl))
		return;
	CHECK_STATUS(tpu_rendezvous_send(f.rdv, "z", 1, &empty, 0, send_cb, &ss), 0,
		     "%s_empty_tensor_send_accepted", N(&f));
	CHECK_STATUS(recv_into(&f, "z", dst, sizeof(dst), 0, &rs), 0, "%s_empty_tensor_recv_accepted", N(&f));
	CHECK(log_wait(&l, 2) && ((l.ev[0].tag == 1 && l.ev[0].st == 0 && l.ev[0].len == 0) ||
				  (l.ev[1].tag == 1 && l.ev[1].st == 0 && l.ev[1].len == 0)),
	      "%s_empty_tensor_is_delivered", N(&f));
	fx_close(&f);
	log_fini(&l);
}

/* ---- callback order, many keys, destroy ---------------------------------- */

static void order_per_key(const struct rdv_impl *impl)
{
	enum { R = 8 };
	struct evlog l, sl;
	struct cbarg rs[R], ss[R];
	char dst[R][8];
	bool in_order = true;
	struct fx f;
	int i;

	log_init(&l);
	log_init(&sl);
	if (!fx_open(&f, impl))
		return;
	for (i = 0; i < R; i++) {
		rs[i] = (struct cbarg){ &l, i };
		CHECK_STATUS(recv_into(&f, "o", dst[i], sizeof(dst[i]), 0, &rs[i]), 0,
			     "%s_queued_recv_%d_accepted", N(&f), i);
	}
	/* One tensor at a time: a key holds one pending send. */
	for (i = 0; i < R; i++) {
		char msg[16];

		snprintf(msg, sizeof(msg), "m%d", i);
		ss[i] = (struct cbarg){ &sl, i };
		if (send_str(&f, "o", msg, &ss[i]) || !log_wait(&sl, i + 1))
			break;
	}
	CHECK(i == R && log_wait(&l, R), "%s_every_queued_recv_is_called_back", N(&f));
	for (i = 0; i < R && i < l.n; i++) {
		char want[16];

		snprintf(want, sizeof(want), "m%d", l.ev[i].tag);
		in_order = in_order && l.ev[i].tag == i && l.ev[i].st == 0 &&
			   memcmp(dst[i], want, strlen(want)) == 0;
	}
	CHECK(in_order, "%s_recvs_of_one_key_are_served_and_called_back_in_issue_order", N(&f));
	fx_close(&f);
	log_fini(&l);
	log_fini(&sl);
}

static void many_keys(const struct rdv_impl *impl)
{
	enum { K = 500, LEN = 256 };
	struct evlog *l = malloc(sizeof(*l));
	struct cbarg *args = calloc(2 * K, sizeof(*args));
	uint8_t (*src)[LEN] = malloc(K * LEN), (*dst)[LEN] = calloc(K, LEN);
	bool ok = true, data = true;
	struct fx f;
	int i;

	if (!l || !args || !src || !dst)
		goto out;
	log_init(l);
	if (!fx_open(&f, impl))
		goto out_log;
	for (i = 0; i < K; i++) {
		char key[32];
		struct tpu_tensor s = { .data = src[i], .len = LEN };
		struct tpu_tensor d = { .data = dst[i], .len = LEN };

		snprintf(key, sizeof(key), "many/%d", i);
		rdv_fill(src[i], LEN, (uint64_t)i);
		args[2 * i] = (struct cbarg){ l, 2 * i };
		args[2 * i + 1] = (struct cbarg){ l, 2 * i + 1 };
		/* Even keys: receive first; odd keys: send first. */
		if (i % 2 == 0) {
			ok = ok && !tpu_rendezvous_recv(f.rdv, key, strlen(key), &d, 0, recv_cb, &args[2 * i]);
			ok = ok && !tpu_rendezvous_send(f.rdv, key, strlen(key), &s, 0, send_cb, &args[2 * i + 1]);
		} else {
			ok = ok && !tpu_rendezvous_send(f.rdv, key, strlen(key), &s, 0, send_cb, &args[2 * i + 1]);
			ok = ok && !tpu_rendezvous_recv(f.rdv, key, strlen(key), &d, 0, recv_cb, &args[2 * i]);
		}
	}
	CHECK(ok, "%s_many_keys_all_accepted", N(&f));
	CHECK(log_wait(l, 2 * K), "%s_many_keys_all_called_back", N(&f));
	for (i = 0; i < l->n && i < 2 * K; i++)
		ok = ok && l->ev[i].st == 0;
	for (i = 0; i < K; i++)
		data = data && rdv_checksum(dst[i], LEN) == rdv_checksum(src[i], LEN);
	CHECK(ok && data, "%s_many_keys_each_delivered_to_its_own_key_intact", N(&f));
	fx_close(&f);
out_log:
	log_fini(l);
out:
	free(l);
	free(args);
	free(src);
	free(dst);
}

static void destroy_fails_pending(const struct rdv_impl *impl)
{
	struct evlog l;
	struct cbarg rs = { &l, 1 }, ss = { &l, 2 }, q = { &l, 3 };
	char dst[8], dst2[8];
	struct fx f;

	log_init(&l);
	if (!fx_open(&f, impl))
		return;
	CHECK_STATUS(recv_into(&f, "p", dst, sizeof(dst), 0, &rs), 0, "%s_recv_left_pending", N(&f));
	CHECK_STATUS(recv_into(&f, "p", dst2, sizeof(dst2), 0, &q), 0, "%s_queued_recv_left_pending", N(&f));
	CHECK_STATUS(send_str(&f, "q", "zz", &ss), 0, "%s_send_left_pending", N(&f));
	tpu_rendezvous_destroy(f.rdv);
	f.rdv = NULL;
	CHECK(log_count(&l) == 3, "%s_destroy_returns_after_every_callback", N(&f));
	CHECK(l.ev[0].st == TPU_E_CLOSED && l.ev[1].st == TPU_E_CLOSED && l.ev[2].st == TPU_E_CLOSED,
	      "%s_destroy_fails_pending_ops_with_closed", N(&f));
	tpu_context_destroy(f.ctx);
	log_fini(&l);
}

static void context_destroy_closes(const struct rdv_impl *impl)
{
	struct evlog l;
	struct cbarg rs = { &l, 1 };
	char dst[8];
	struct fx f;

	log_init(&l);
	if (!fx_open(&f, impl))
		return;
	CHECK_STATUS(recv_into(&f, "left", dst, sizeof(dst), 0, &rs), 0, "%s_recv_on_a_forgotten_rendezvous", N(&f));
	tpu_context_destroy(f.ctx);
	CHECK(log_count(&l) == 1 && l.ev[0].st == TPU_E_CLOSED,
	      "%s_context_destroy_calls_back_a_forgotten_rendezvous_with_closed", N(&f));
	log_fini(&l);
}

/* A callback that says it started, then takes its time. */
struct slow_cb {
	struct evlog *log;
	atomic_bool returned;
};

static void slow_recv_cb(void *arg, tpu_status st, size_t len)
{
	struct slow_cb *c = arg;

	log_add(c->log, 1, st, len);
	usleep(200 * 1000);
	atomic_store(&c->returned, true);
}

/*
 * A destroy from another thread while the context's thread runs a
 * callback returns only once that callback did: the callback may still
 * use the rendezvous's implementation (a blocked waiter's wake-up did,
 * after ->release had freed its state: valgrind saw it in CI).
 */
static void destroy_waits_for_a_running_callback(const struct rdv_impl *impl)
{
	struct evlog l, sl;
	struct slow_cb c = { &l, false };
	struct cbarg ss = { &sl, 2 };
	char dst[8];
	struct fx f;

	log_init(&l);
	log_init(&sl);
	if (!fx_open(&f, impl))
		return;
	/* The send first, and called back first: the slow callback is the last one. */
	CHECK_STATUS(send_str(&f, "s", "go", &ss), 0, "%s_send_for_a_slow_callback", N(&f));
	CHECK_STATUS(tpu_rendezvous_recv(f.rdv, "s", 1, &(struct tpu_tensor){ .data = dst,
					 .len = sizeof(dst) }, 0, slow_recv_cb, &c), 0,
		     "%s_recv_with_a_slow_callback", N(&f));
	CHECK(log_wait(&sl, 1) && log_wait(&l, 1), "%s_the_send_was_called_back_and_the_slow_"
	      "callback_started", N(&f));
	tpu_rendezvous_destroy(f.rdv);
	f.rdv = NULL;
	CHECK(atomic_load(&c.returned),
	      "%s_destroy_from_another_thread_returns_after_a_running_callback_returned", N(&f));
	tpu_context_destroy(f.ctx);
	log_fini(&l);
	log_fini(&sl);
}

/*
 * A call that meets a destroy of its rendezvous from another thread, the
 * two released at once, many times: the call finds it destroyed, or gets
 * in first and is ended by the destroy (or its own 1 ms runs out), and
 * never reads the implementation's state after the destroy freed it (a
 * call that passed the handle's check just before the destroy claimed it
 * read the released ops: a worker's SIGSEGV in CI).
 */
enum race_call { RACE_RECV_WAIT, RACE_SEND_WAIT, RACE_CANCEL, RACE_ABORT, RACE_CALLS };

struct racer {
	struct tpu_rendezvous *rdv;
	enum race_call call;
	atomic_int *ready;
	tpu_status st;
};

static void *race_call(void *arg)
{
	struct racer *r = arg;
	char b[8] = "race";
	struct tpu_tensor t = { .data = b, .len = sizeof(b) };

	atomic_fetch_add(r->ready, 1);
	while (atomic_load(r->ready) < 2)
		sched_yield();
	switch (r->call) {
	case RACE_RECV_WAIT:
		r->st = tpu_rendezvous_recv_wait(r->rdv, "race", 4, &t, 1000000, NULL);
		break;
	case RACE_SEND_WAIT:
		r->st = tpu_rendezvous_send_wait(r->rdv, "race", 4, &t, 0, 1000000);
		break;
	case RACE_CANCEL:
		r->st = tpu_rendezvous_cancel(r->rdv, "race", 4);
		break;
	default:
		r->st = tpu_rendezvous_abort(r->rdv, -ECONNRESET);
		break;
	}
	return NULL;
}

static bool race_status_ok(enum race_call call, tpu_status st)
{
	if (st == TPU_E_DESTROYED)
		return true;
	switch (call) {
	case RACE_RECV_WAIT:
	case RACE_SEND_WAIT:
		return st == TPU_E_CLOSED || st == -ETIMEDOUT || st == -ECONNRESET;
	case RACE_CANCEL:
		return st == 0 || st == -ENOENT;
	default:
		return st == 0;
	}
}

static void calls_racing_a_destroy(const struct rdv_impl *impl)
{
	unsigned int rounds = impl->impl == TPU_RDV_INPROCESS ? 2000 : 200, i, bad = 0;
	unsigned int early[RACE_CALLS] = { 0 };
	struct tpu_context_options o = { .flags = impl->ctx_flags };
	struct tpu_context *ctx;
	tpu_status last = 0;

	if (tpu_context_create(&o, &ctx)) {
		CHECK(false, "%s_context_for_the_destroy_races", impl->name);
		return;
	}
	for (i = 0; i < rounds && !bad; i++) {
		atomic_int ready = 0;
		struct racer r = { .call = i % RACE_CALLS, .ready = &ready, .st = 1 };
		pthread_t th;

		if (tpu_rendezvous_create(ctx, impl->impl, &r.rdv) ||
		    pthread_create(&th, NULL, race_call, &r)) {
			bad++;
			break;
		}
		atomic_fetch_add(&ready, 1);
		while (atomic_load(&ready) < 2)
			sched_yield();
		tpu_rendezvous_destroy(r.rdv);
		pthread_join(th, NULL);
		early[r.call] += r.st == TPU_E_DESTROYED;
		if (!race_status_ok(r.call, r.st)) {
			bad++;
			last = r.st;
		}
	}
	if (bad)
		tap_diag("%s: round %u: call %u returned %s", impl->name, i, i % RACE_CALLS,
			 tpu_status_name(last));
	tap_diag("%s: of %u rounds, calls that found the rendezvous destroyed: recv_wait %u, "
		 "send_wait %u, cancel %u, abort %u", impl->name, rounds, early[0], early[1],
		 early[2], early[3]);
	CHECK(!bad && i == rounds, "%s_calls_racing_a_destroy_from_another_thread_end_cleanly",
	      impl->name);
	tpu_context_destroy(ctx);
}

/* A callback that leaves the rendezvous it was called for. */
struct leaver {
	struct tpu_rendezvous *rdv;
	struct evlog *log;
};

static void leave_in_callback(void *arg, tpu_status st, size_t len)
{
	struct leaver *v = arg;

	tpu_rendezvous_destroy(v->rdv);
	log_add(v->log, 1, st, len);
}

static void destroy_from_callback(const struct rdv_impl *impl)
{
	struct evlog l;
	struct cbarg other = { &l, 2 }, ss = { &l, 3 };
	struct leaver v;
	char dst[8], dst2[8];
	bool got1 = false, got2 = false;
	struct fx f;
	int i;

	log_init(&l);
	if (!fx_open(&f, impl))
		return;
	v = (struct leaver){ f.rdv, &l };
	CHECK_STATUS(tpu_rendezvous_recv(f.rdv, "x", 1, &(struct tpu_tensor){ .data = dst, .len = sizeof(dst) }, 0,
					 leave_in_callback, &v), 0, "%s_recv_whose_callback_destroys", N(&f));
	CHECK_STATUS(recv_into(&f, "y", dst2, sizeof(dst2), 0, &other), 0, "%s_recv_left_for_the_destroy", N(&f));
	CHECK_STATUS(send_str(&f, "x", "bye", &ss), 0, "%s_send_that_triggers_the_destroy", N(&f));
	CHECK(log_wait(&l, 3), "%s_every_callback_runs_when_a_callback_destroys", N(&f));
	for (i = 0; i < l.n && i < 3; i++) {
		got1 = got1 || (l.ev[i].tag == 1 && l.ev[i].st == 0);
		got2 = got2 || (l.ev[i].tag == 2 && l.ev[i].st == TPU_E_CLOSED);
	}
	CHECK(got1 && got2, "%s_destroy_from_a_callback_closes_the_other_ops", N(&f));
	tpu_context_destroy(f.ctx);
	log_fini(&l);
}

/* ---- buffers -------------------------------------------------------------- */

struct bufrec {
	struct evlog *log;
	struct tpu_buffer *buf;
	size_t len;
	tpu_status st;
};

static void recv_buffer_cb(void *arg, tpu_status st, struct tpu_buffer *buf, size_t len)
{
	struct bufrec *r = arg;

	r->buf = buf;
	r->len = len;
	r->st = st;
	log_add(r->log, 9, st, len);
}

static void buffer_cases(const struct rdv_impl *impl)
{
	enum { LEN = 3 * 4096 + 17 };
	struct evlog l;
	struct cbarg ss = { &l, 1 }, s2 = { &l, 2 };
	struct bufrec r = { &l, NULL, 0, 1 }, r2 = { &l, NULL, 0, 1 };
	struct tpu_buffer *b = NULL;
	struct tpu_tensor t;
	uint64_t sum;
	uint8_t plain[100];
	struct fx f;

	log_init(&l);
	if (!fx_open(&f, impl))
		return;
	CHECK_STATUS(tpu_buffer_alloc(f.ctx, LEN, &b), 0, "%s_buffer_alloc", N(&f));
	if (!b)
		goto out;
	CHECK(tpu_buffer_size(b) == LEN && tpu_buffer_data(b) != NULL, "%s_buffer_has_its_size", N(&f));
	rdv_fill(tpu_buffer_data(b), LEN, 77);
	sum = rdv_checksum(tpu_buffer_data(b), LEN);
	t = (struct tpu_tensor){ .data = tpu_buffer_data(b), .len = LEN, .buffer = b };
	CHECK_STATUS(tpu_rendezvous_send(f.rdv, "g", 1, &t, TPU_SEND_GIVE, send_cb, &ss), 0,
		     "%s_give_a_buffer", N(&f));
	CHECK_STATUS(tpu_rendezvous_recv_buffer(f.rdv, "g", 1, LEN, 0, recv_buffer_cb, &r), 0,
		     "%s_recv_buffer_accepted", N(&f));
	if (!log_wait(&l, 2) || r.st)
		tap_diag("recv_buffer of a given buffer: %d callbacks, status %s, len %zu",
			 log_count(&l), tpu_status_name(r.st), r.len);
	CHECK(log_wait(&l, 2) && r.st == 0 && r.buf && r.len == LEN &&
	      rdv_checksum(tpu_buffer_data(r.buf), LEN) == sum,
	      "%s_given_buffer_arrives_intact_in_a_new_buffer", N(&f));
	tpu_buffer_free(r.buf);

	/* recv_buffer of ordinary memory copies into a buffer of its own. */
	rdv_fill(plain, sizeof(plain), 5);
	t = (struct tpu_tensor){ .data = plain, .len = sizeof(plain) };
	CHECK_STATUS(tpu_rendezvous_send(f.rdv, "h", 1, &t, 0, send_cb, &s2), 0, "%s_send_plain_memory", N(&f));
	CHECK_STATUS(tpu_rendezvous_recv_buffer(f.rdv, "h", 1, 4096, 0, recv_buffer_cb, &r2), 0,
		     "%s_recv_buffer_of_plain_memory", N(&f));
	if (!log_wait(&l, 4) || r2.st)
		tap_diag("recv_buffer of plain memory: %d callbacks, status %s, len %zu",
			 log_count(&l), tpu_status_name(r2.st), r2.len);
	CHECK(log_wait(&l, 4) && r2.st == 0 && r2.buf && r2.len == sizeof(plain) &&
	      memcmp(tpu_buffer_data(r2.buf), plain, sizeof(plain)) == 0,
	      "%s_recv_buffer_of_plain_memory_is_intact", N(&f));
	tpu_buffer_free(r2.buf);
out:
	fx_close(&f);
	log_fini(&l);
}

/*
 * A given buffer that a plain receive copies from is freed by the
 * rendezvous: a memfd buffer's descriptor is closed once the send's
 * callback ran (valgrind sees the rest).
 */
static void given_to_a_copy(const struct rdv_impl *impl)
{
	enum { LEN = 2 * 4096 };
	struct evlog l;
	struct cbarg ss = { &l, 1 }, rr = { &l, 2 };
	struct tpu_buffer *b = NULL;
	uint8_t *dst = calloc(1, LEN);
	struct tpu_tensor t;
	uint64_t sum = 0;
	int fds = -1;
	bool ok;
	struct fx f;

	log_init(&l);
	if (!dst || !fx_open(&f, impl)) {
		free(dst);
		return;
	}
	/* Round the ring's first use out of the count. */
	ok = !tpu_buffer_alloc(f.ctx, LEN, &b);
	tpu_buffer_free(b);
	fds = count_fds();
	ok = ok && !tpu_buffer_alloc(f.ctx, LEN, &b);
	if (ok) {
		rdv_fill(tpu_buffer_data(b), LEN, 9);
		sum = rdv_checksum(tpu_buffer_data(b), LEN);
		t = (struct tpu_tensor){ .data = tpu_buffer_data(b), .len = LEN, .buffer = b };
		ok = !tpu_rendezvous_send(f.rdv, "gc", 2, &t, TPU_SEND_GIVE, send_cb, &ss) &&
		     !recv_into(&f, "gc", dst, LEN, 0, &rr) && log_wait(&l, 2);
	}
	/*
	 * No more than before: another descriptor of the fixture may close
	 * meanwhile (once, in the debug kernel's VM: 9 -> 8), but the
	 * buffer's must not stay open.
	 */
	for (int i = 0; i < 100 && count_fds() > fds; i++)
		usleep(10000);
	CHECK(ok && rdv_checksum(dst, LEN) == sum && count_fds() <= fds,
	      "%s_a_given_buffer_copied_by_a_plain_receive_is_freed (fds %d -> %d)", N(&f), fds,
	      count_fds());
	fx_close(&f);
	log_fini(&l);
	free(dst);
}

static void large_integrity(const struct rdv_impl *impl)
{
	enum { LEN = 4 << 20 };
	uint8_t *src = malloc(LEN), *dst = malloc(LEN);
	struct evlog l;
	struct cbarg ss = { &l, 1 };
	struct tpu_tensor s = { .data = src, .len = LEN }, d = { .data = dst, .len = LEN };
	size_t len = 0;
	struct fx f;

	log_init(&l);
	if (!src || !dst || !fx_open(&f, impl))
		goto out;
	rdv_fill(src, LEN, 1234);
	memset(dst, 0, LEN);
	CHECK_STATUS(tpu_rendezvous_send(f.rdv, "big", 3, &s, 0, send_cb, &ss), 0, "%s_large_send", N(&f));
	CHECK_STATUS(tpu_rendezvous_recv_wait(f.rdv, "big", 3, &d, 0, &len), 0, "%s_large_recv_wait", N(&f));
	CHECK(len == LEN && rdv_checksum(dst, LEN) == rdv_checksum(src, LEN),
	      "%s_4MiB_tensor_checksum_matches", N(&f));
	CHECK(log_wait(&l, 1), "%s_large_send_called_back", N(&f));
	fx_close(&f);
out:
	log_fini(&l);
	free(src);
	free(dst);
}

/* ---- callbacks that act ------------------------------------------------------ */

struct chain {
	struct tpu_rendezvous *rdv;
	struct evlog *log;
	char dst[8];
	tpu_status wait_st;
	tpu_status send_wait_st;
	tpu_status send_st;
	struct cbarg reply;
};

static void chain_recv_cb(void *arg, tpu_status st, size_t len)
{
	struct chain *c = arg;
	struct tpu_tensor t = { .data = c->dst, .len = sizeof(c->dst) };
	struct tpu_tensor r = { .data = "pong", .len = 4 };

	(void)len;
	c->wait_st = tpu_rendezvous_recv_wait(c->rdv, "never", 5, &t, 0, NULL);
	c->send_wait_st = tpu_rendezvous_send_wait(c->rdv, "never", 5, &r, 0, 0);
	c->send_st = tpu_rendezvous_send(c->rdv, "reply", 5, &r, 0, send_cb, &c->reply);
	log_add(c->log, 100, st, 0);
}

static void callback_actions(const struct rdv_impl *impl)
{
	struct evlog l;
	struct cbarg ss = { &l, 1 };
	struct chain c;
	char got[8] = { 0 };
	struct tpu_tensor t = { .data = got, .len = sizeof(got) };
	size_t len = 0;
	struct fx f;

	log_init(&l);
	if (!fx_open(&f, impl))
		return;
	c = (struct chain){ .rdv = f.rdv, .log = &l, .reply = { &l, 2 } };
	CHECK_STATUS(tpu_rendezvous_recv(f.rdv, "ping", 4, &(struct tpu_tensor){ .data = c.dst, .len = sizeof(c.dst) },
					 0, chain_recv_cb, &c), 0, "%s_recv_with_acting_callback", N(&f));
	CHECK_STATUS(send_str(&f, "ping", "ping", &ss), 0, "%s_send_ping", N(&f));
	CHECK_STATUS(tpu_rendezvous_recv_wait(f.rdv, "reply", 5, &t, 0, &len), 0,
		     "%s_reply_sent_from_a_callback_arrives", N(&f));
	CHECK(memcmp(got, "pong", 4) == 0, "%s_reply_bytes_intact", N(&f));
	CHECK(c.wait_st == -EDEADLK, "%s_recv_wait_inside_a_callback_is_edeadlk", N(&f));
	CHECK(c.send_wait_st == -EDEADLK, "%s_send_wait_inside_a_callback_is_edeadlk", N(&f));
	CHECK(c.send_st == 0, "%s_send_inside_a_callback_is_accepted", N(&f));
	fx_close(&f);
	log_fini(&l);
}

/* ---- stress: N producers x M consumers x K keys, random order ---------------- */

enum { ST_N = 3, ST_M = 3, ST_K = 48, ST_LEN = 512 };

struct stress {
	struct tpu_rendezvous *rdv;
	uint8_t src[ST_K][ST_LEN];
	uint8_t dst[ST_K][ST_LEN];
	pthread_mutex_t m;
	pthread_cond_t c;
	int sends_done;
	int send_errors;
	int recv_errors;
};

struct worker {
	struct stress *s;
	int id;
	unsigned int seed;
};

static void stress_send_cb(void *arg, tpu_status st)
{
	struct stress *s = arg;

	pthread_mutex_lock(&s->m);
	s->sends_done++;
	s->send_errors += st != 0;
	pthread_cond_broadcast(&s->c);
	pthread_mutex_unlock(&s->m);
}

static void shuffle(int *v, int n, unsigned int *seed)
{
	int i;

	for (i = n - 1; i > 0; i--) {
		int j = rand_r(seed) % (i + 1), x = v[i];

		v[i] = v[j];
		v[j] = x;
	}
}

/* Producer p sends the keys k with k % ST_N == p, in random order. */
static void *producer(void *arg)
{
	struct worker *w = arg;
	int keys[ST_K], n = 0, i;

	for (i = w->id; i < ST_K; i += ST_N)
		keys[n++] = i;
	shuffle(keys, n, &w->seed);
	for (i = 0; i < n; i++) {
		char key[32];
		struct tpu_tensor t = { .data = w->s->src[keys[i]], .len = ST_LEN };

		snprintf(key, sizeof(key), "stress/%d", keys[i]);
		if (tpu_rendezvous_send(w->s->rdv, key, strlen(key), &t, 0, stress_send_cb, w->s))
			stress_send_cb(w->s, -EIO);
	}
	return NULL;
}

/* Consumer c receives the keys k with k % ST_M == c, in random order. */
static void *consumer(void *arg)
{
	struct worker *w = arg;
	int keys[ST_K], n = 0, i;

	for (i = w->id; i < ST_K; i += ST_M)
		keys[n++] = i;
	shuffle(keys, n, &w->seed);
	for (i = 0; i < n; i++) {
		char key[32];
		struct tpu_tensor t = { .data = w->s->dst[keys[i]], .len = ST_LEN };
		size_t len = 0;
		tpu_status st;

		snprintf(key, sizeof(key), "stress/%d", keys[i]);
		st = tpu_rendezvous_recv_wait(w->s->rdv, key, strlen(key), &t, WAIT_NS, &len);
		if (st || len != ST_LEN) {
			pthread_mutex_lock(&w->s->m);
			w->s->recv_errors++;
			pthread_mutex_unlock(&w->s->m);
		}
	}
	return NULL;
}

static void stress(const struct rdv_impl *impl)
{
	struct stress *s = calloc(1, sizeof(*s));
	struct worker pw[ST_N], cw[ST_M];
	pthread_t pt[ST_N], ct[ST_M];
	bool data = true;
	struct fx f;
	int i;

	if (!s || !fx_open(&f, impl)) {
		free(s);
		return;
	}
	s->rdv = f.rdv;
	pthread_mutex_init(&s->m, NULL);
	pthread_cond_init(&s->c, NULL);
	for (i = 0; i < ST_K; i++)
		rdv_fill(s->src[i], ST_LEN, 1000 + (uint64_t)i);
	for (i = 0; i < ST_M; i++) {
		cw[i] = (struct worker){ s, i, 7u * (unsigned int)i + 1 };
		pthread_create(&ct[i], NULL, consumer, &cw[i]);
	}
	for (i = 0; i < ST_N; i++) {
		pw[i] = (struct worker){ s, i, 13u * (unsigned int)i + 3 };
		pthread_create(&pt[i], NULL, producer, &pw[i]);
	}
	for (i = 0; i < ST_N; i++)
		pthread_join(pt[i], NULL);
	for (i = 0; i < ST_M; i++)
		pthread_join(ct[i], NULL);
	pthread_mutex_lock(&s->m);
	while (s->sends_done < ST_K)
		pthread_cond_wait(&s->c, &s->m);
	pthread_mutex_unlock(&s->m);
	for (i = 0; i < ST_K; i++)
		data = data && rdv_checksum(s->dst[i], ST_LEN) == rdv_checksum(s->src[i], ST_LEN);
	CHECK(s->recv_errors == 0 && s->send_errors == 0,
	      "%s_stress_%dx%dx%d_every_op_succeeds", N(&f), ST_N, ST_M, ST_K);
	CHECK(data, "%s_stress_every_tensor_arrives_at_its_key_intact", N(&f));
	fx_close(&f);
	pthread_mutex_destroy(&s->m);
	pthread_cond_destroy(&s->c);
	free(s);
}

void rdv_cases_run(const struct rdv_impl *impl)
{
	struct fx f;

	tap_diag("rendezvous cases over %s", impl->name);
	if (!fx_open(&f, impl)) {
		CHECK(false, "%s_rendezvous_can_be_created", impl->name);
		return;
	}
	CHECK(tpu_rendezvous_impl(f.rdv) == impl->impl || impl->impl == TPU_RDV_AUTO,
	      "%s_rendezvous_reports_its_implementation", impl->name);
	fx_close(&f);
	recv_before_send(impl);
	send_before_recv(impl);
	recv_wait_cases(impl);
	send_wait_cases(impl);
	blocked_waiter_cases(impl);
	timeout_callback(impl);
	cancel_cases(impl);
	abort_cases(impl);
	msgsize_case(impl);
	duplicate_send(impl);
	zero_length(impl);
	order_per_key(impl);
	many_keys(impl);
	destroy_fails_pending(impl);
	context_destroy_closes(impl);
	destroy_from_callback(impl);
	destroy_waits_for_a_running_callback(impl);
	calls_racing_a_destroy(impl);
	buffer_cases(impl);
	given_to_a_copy(impl);
	large_integrity(impl);
	callback_actions(impl);
	stress(impl);
	rdv_device_run(impl);
}
