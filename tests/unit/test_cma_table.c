// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The cma rendezvous's shared key table (lib/cma_table.c): slot states,
 * limits, abort, wakeups, and the death of a member in each role, within
 * one process, across threads and across fork()ed processes.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cma_table.h"
#include "tap.h"
#include "tpu_user.h"

#define KEY(s) (const uint8_t *)(s), sizeof(s) - 1

static int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A table and a second mapping of it, as a joining process would have. */
static bool two_views(struct tpu__cma_table *a, struct tpu__cma_table *b)
{
	if (tpu__cma_table_create(a, 1))
		return false;
	if (tpu__cma_table_open(b, a->fd)) {
		tpu__cma_table_close(a);
		return false;
	}
	return true;
}

static tpu_status post(struct tpu__cma_table *t, struct tpu__cma_who who, const uint8_t *key,
		       size_t key_len, const void *src, size_t len, struct tpu__cma_ref *ref)
{
	tpu_status st = tpu__cma_lock(t);

	if (st)
		return st;
	st = tpu__cma_post(t, who, getpid(), key, key_len, (uintptr_t)src, len, ref);
	tpu__cma_unlock(t);
	return st;
}

static tpu_status claim(struct tpu__cma_table *t, struct tpu__cma_who who, const uint8_t *key,
			size_t key_len, uint64_t cap, struct tpu__cma_claim *c)
{
	tpu_status st = tpu__cma_lock(t);

	if (st)
		return st;
	st = tpu__cma_claim(t, who, key, key_len, cap, c);
	tpu__cma_unlock(t);
	return st;
}

static tpu_status finish(struct tpu__cma_table *t, struct tpu__cma_who who,
			 const struct tpu__cma_claim *c, tpu_status pull)
{
	tpu_status st = tpu__cma_lock(t);

	if (st)
		return st;
	st = tpu__cma_finish(t, who, c, pull);
	tpu__cma_unlock(t);
	return st;
}

static int state_of(struct tpu__cma_table *t, struct tpu__cma_ref ref)
{
	int s;

	if (tpu__cma_lock(t))
		return -1;
	s = (int)tpu__cma_state_of(t, ref);
	tpu__cma_unlock(t);
	return s;
}

static void release(struct tpu__cma_table *t, struct tpu__cma_ref ref)
{
	if (tpu__cma_lock(t))
		return;
	tpu__cma_release(t, ref);
	tpu__cma_unlock(t);
}

static bool alive(struct tpu__cma_table *t, struct tpu__cma_who who)
{
	bool a;

	if (tpu__cma_lock(t))
		return false;
	a = tpu__cma_member_alive(t, who);
	tpu__cma_unlock(t);
	return a;
}

static void recognise_and_open(void)
{
	struct tpu__cma_table a, b;
	int other = memfd_create("not-a-table", MFD_CLOEXEC);

	if (!two_views(&a, &b)) {
		CHECK(false, "cma_table_created_and_opened");
		return;
	}
	CHECK(tpu__cma_fd_is_table(a.fd), "cma_table_memfd_starts_with_the_magic");
	CHECK(other >= 0 && write(other, "TPUCMA00-and-more", 17) == 17 &&
	      !tpu__cma_fd_is_table(other), "cma_table_other_memfd_is_not_recognised");
	CHECK_STATUS(tpu__cma_table_open(&b, other), -EINVAL,
		     "cma_table_open_of_other_fd_is_einval");
	CHECK_STATUS(tpu__cma_table_open(&b, -1), -EINVAL, "cma_table_open_of_bad_fd_is_einval");
	CHECK(!tpu__cma_fd_is_table(-1), "cma_table_bad_fd_is_not_recognised");
	CHECK(tpu__cma_table_pid_ns(&a) == 1, "cma_table_keeps_the_creators_pid_namespace_id");
	CHECK(ftruncate(a.fd, 4096) != 0, "cma_table_memfd_size_is_sealed");
	{
		/* A table of version 4 (whose producers wait for DONE unbounded) is refused. */
		struct tpu__cma_table c;
		uint32_t v = 4, keep = 0;

		CHECK(pread(a.fd, &keep, sizeof(keep), TPU__CMA_MAGIC_LEN) == sizeof(keep) &&
		      keep == TPU__CMA_VERSION &&
		      pwrite(a.fd, &v, sizeof(v), TPU__CMA_MAGIC_LEN) == sizeof(v),
		      "cma_table_version_rewritten_to_4");
		CHECK_STATUS(tpu__cma_table_open(&c, a.fd), -EINVAL,
			     "cma_table_of_version_4_is_refused");
		CHECK(pwrite(a.fd, &keep, sizeof(keep), TPU__CMA_MAGIC_LEN) == sizeof(keep) &&
		      tpu__cma_table_open(&c, a.fd) == 0, "cma_table_of_this_version_opens_again");
		tpu__cma_table_close(&c);
	}
	close(other);
	tpu__cma_table_close(&a);
	/* The opened view has its own descriptor and mapping. */
	CHECK(tpu__cma_fd_is_table(b.fd), "cma_table_open_view_outlives_the_creators");
	tpu__cma_table_close(&b);
}

static void post_claim_done(void)
{
	static const char tensor[] = "a tensor of some bytes";
	struct tpu__cma_table a, b;
	struct tpu__cma_who prod, cons;
	struct tpu__cma_ref ref, ref2;
	struct tpu__cma_claim c = { 0 };
	char got[sizeof(tensor)] = { 0 };

	if (!two_views(&a, &b) || tpu__cma_member_join(&a, 0, &prod) ||
	    tpu__cma_member_join(&b, 0, &cons)) {
		CHECK(false, "cma_table_set_up");
		return;
	}
	CHECK(prod.idx != cons.idx && alive(&a, prod) && alive(&b, cons),
	      "cma_table_members_join_distinct_and_alive");
	CHECK_STATUS(post(&a, prod, KEY("k1"), tensor, sizeof(tensor), &ref), 0,
		     "cma_table_post_succeeds");
	CHECK(state_of(&a, ref) == TPU__CMA_POSTED && tpu__cma_used(&a) == 1,
	      "cma_table_posted_slot_reads_posted");
	CHECK_STATUS(post(&b, cons, KEY("k1"), tensor, 1, &ref2), -EEXIST,
		     "cma_table_second_post_of_a_pending_key_is_eexist");
	CHECK_STATUS(claim(&b, cons, KEY("k2"), 100, &c), -EAGAIN,
		     "cma_table_claim_of_an_absent_key_is_eagain");
	CHECK_STATUS(claim(&b, cons, KEY("k"), 100, &c), -EAGAIN,
		     "cma_table_claim_of_a_key_prefix_is_eagain");
	CHECK_STATUS(claim(&b, cons, KEY("k1"), sizeof(tensor) - 1, &c), -EMSGSIZE,
		     "cma_table_claim_into_too_small_room_is_emsgsize");
	CHECK(c.len == sizeof(tensor) && state_of(&a, ref) == TPU__CMA_POSTED,
	      "cma_table_emsgsize_reports_the_length_and_keeps_the_slot");
	CHECK_STATUS(claim(&b, cons, KEY("k1"), sizeof(tensor), &c), 0,
		     "cma_table_claim_with_room_succeeds");
	CHECK(state_of(&a, ref) == TPU__CMA_CLAIMED && c.pid == getpid() &&
	      c.len == sizeof(tensor) && c.addr == (uintptr_t)tensor,
	      "cma_table_claim_says_where_to_pull_from");
	CHECK_STATUS(post(&b, cons, KEY("k1"), tensor, 1, &ref2), -EEXIST,
		     "cma_table_post_of_a_claimed_key_is_eexist");
	CHECK_STATUS(claim(&a, prod, KEY("k1"), 100, &c), -EAGAIN,
		     "cma_table_claimed_slot_is_not_claimed_twice");
	CHECK_STATUS(tpu_cma_read(c.pid, c.addr, got, (size_t)c.len), 0, "cma_table_pull_succeeds");
	CHECK_STATUS(finish(&b, cons, &c, 0), 0, "cma_table_finish_after_pull_succeeds");
	CHECK(state_of(&a, ref) == TPU__CMA_DONE && !memcmp(got, tensor, sizeof(tensor)),
	      "cma_table_finished_slot_reads_done_and_data_arrived");
	CHECK_STATUS(post(&b, cons, KEY("k1"), tensor, 3, &ref2), 0,
		     "cma_table_key_can_be_posted_again_once_taken");
	release(&a, ref);
	CHECK(state_of(&a, ref) == TPU__CMA_FREE && tpu__cma_used(&a) == 1,
	      "cma_table_release_frees_the_slot");
	release(&b, ref2);
	CHECK(tpu__cma_used(&a) == 0, "cma_table_is_empty_after_all_released");
	tpu__cma_member_leave(&a, prod);
	CHECK(!alive(&b, prod) && alive(&b, cons), "cma_table_member_that_left_is_not_alive");
	tpu__cma_member_leave(&b, cons);
	tpu__cma_table_close(&a);
	tpu__cma_table_close(&b);
}

static void failed_pull_and_withdraw(void)
{
	struct tpu__cma_table t;
	struct tpu__cma_who me;
	struct tpu__cma_ref ref;
	struct tpu__cma_claim c;
	char big[TPU__CMA_MAX_KEY + 1];

	if (tpu__cma_table_create(&t, 0) || tpu__cma_member_join(&t, 0, &me)) {
		CHECK(false, "cma_table_set_up");
		return;
	}
	memset(big, 'k', sizeof(big));
	CHECK_STATUS(post(&t, me, (const uint8_t *)big, sizeof(big), big, 1, &ref), -ENAMETOOLONG,
		     "cma_table_post_of_an_overlong_key_is_enametoolong");
	CHECK_STATUS(post(&t, me, (const uint8_t *)big, sizeof(big) - 1, big, 1, &ref), 0,
		     "cma_table_post_of_a_longest_key_succeeds");
	release(&t, ref);
	CHECK_STATUS(post(&t, me, KEY("fault"), NULL, 8, &ref), 0, "cma_table_post_of_bad_address");
	CHECK_STATUS(claim(&t, me, KEY("fault"), 8, &c), 0, "cma_table_claim_of_own_post");
	CHECK_STATUS(finish(&t, me, &c, tpu_cma_read(c.pid, c.addr, big, 8)), -EFAULT,
		     "cma_table_failed_pull_returns_its_error");
	CHECK(state_of(&t, ref) == TPU__CMA_POSTED, "cma_table_failed_pull_puts_the_slot_back");
	CHECK_STATUS(finish(&t, me, &c, 0), -EIO, "cma_table_finish_of_an_unclaimed_slot_is_eio");
	release(&t, ref);
	CHECK_STATUS(claim(&t, me, KEY("fault"), 8, &c), -EAGAIN,
		     "cma_table_withdrawn_post_cannot_be_claimed");
	CHECK_STATUS(post(&t, me, KEY("empty"), NULL, 0, &ref), 0, "cma_table_post_of_zero_bytes");
	CHECK_STATUS(claim(&t, me, KEY("empty"), 0, &c), 0,
		     "cma_table_zero_bytes_fit_zero_room");
	tpu__cma_member_leave(&t, me);
	tpu__cma_table_close(&t);
}

static tpu_status post_inline(struct tpu__cma_table *t, struct tpu__cma_who who,
			      const uint8_t *key, size_t key_len, const void *src, size_t len,
			      struct tpu__cma_ref *ref)
{
	tpu_status st = tpu__cma_lock(t);

	if (st)
		return st;
	st = tpu__cma_post_inline(t, who, getpid(), key, key_len, src, len, ref);
	tpu__cma_unlock(t);
	return st;
}

static tpu_status claim_into(struct tpu__cma_table *t, struct tpu__cma_who who,
			     const uint8_t *key, size_t key_len, void *dst, uint64_t cap,
			     struct tpu__cma_claim *c)
{
	tpu_status st = tpu__cma_lock(t);

	if (st)
		return st;
	st = tpu__cma_claim_into(t, who, key, key_len, cap, dst, c);
	tpu__cma_unlock(t);
	return st;
}

/*
 * Small tensors in the slot: copied at post (the source may change after),
 * copied out and DONE in one step, or claimed and read from the table; the
 * lock-free looks agree with the slot states.
 */
static void inline_slots(void)
{
	uint8_t src[TPU__CMA_INLINE_MAX + 1], got[TPU__CMA_INLINE_MAX + 1];
	struct tpu__cma_table a, b;
	struct tpu__cma_who prod, cons;
	struct tpu__cma_ref ref, ref2;
	struct tpu__cma_claim c = { 0 };
	const uint8_t *bytes;

	if (!two_views(&a, &b) || tpu__cma_member_join(&a, 0, &prod) ||
	    tpu__cma_member_join(&b, 0, &cons)) {
		CHECK(false, "cma_table_set_up");
		return;
	}
	CHECK(tpu__cma_member_end(&a) == (prod.idx > cons.idx ? prod.idx : cons.idx) + 1,
	      "cma_table_member_end_is_past_the_highest_member");
	CHECK(tpu__cma_members_look_alive(&b), "cma_table_joined_members_look_alive");
	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (uint8_t)(i * 13 + 1);
	CHECK_STATUS(post_inline(&a, prod, KEY("big"), src, TPU__CMA_INLINE_MAX + 1, &ref), -EINVAL,
		     "cma_table_inline_post_over_the_limit_is_einval");
	CHECK(!tpu__cma_peek_key(&b, KEY("big")), "cma_table_refused_inline_post_leaves_no_slot");
	CHECK_STATUS(post_inline(&a, prod, KEY("in"), src, TPU__CMA_INLINE_MAX, &ref), 0,
		     "cma_table_inline_post_at_the_limit_succeeds");
	memset(src, 0, sizeof(src));
	CHECK(tpu__cma_peek_key(&b, KEY("in")) && !tpu__cma_peek_key(&b, KEY("i")) &&
	      tpu__cma_peek_state(&b, ref) == TPU__CMA_POSTED,
	      "cma_table_peeks_see_the_posted_slot");
	CHECK_STATUS(claim_into(&b, cons, KEY("in"), got, TPU__CMA_INLINE_MAX - 1, &c), -EMSGSIZE,
		     "cma_table_inline_claim_into_too_small_room_is_emsgsize");
	CHECK(c.len == TPU__CMA_INLINE_MAX && state_of(&a, ref) == TPU__CMA_POSTED,
	      "cma_table_inline_emsgsize_keeps_the_slot");
	memset(got, 0xee, sizeof(got));
	CHECK_STATUS(claim_into(&b, cons, KEY("in"), got, TPU__CMA_INLINE_MAX, &c), 0,
		     "cma_table_inline_claim_into_succeeds");
	CHECK(c.inl && c.done && c.len == TPU__CMA_INLINE_MAX && got[TPU__CMA_INLINE_MAX] == 0xee,
	      "cma_table_inline_claim_into_copies_the_length_only");
	CHECK(got[0] == 1 && got[TPU__CMA_INLINE_MAX - 1] == (uint8_t)((TPU__CMA_INLINE_MAX - 1) * 13 + 1),
	      "cma_table_inline_bytes_are_those_at_post_time");
	CHECK(state_of(&a, ref) == TPU__CMA_DONE && tpu__cma_peek_state(&a, ref) == TPU__CMA_DONE &&
	      !tpu__cma_peek_key(&b, KEY("in")),
	      "cma_table_inline_claim_into_leaves_the_slot_done");
	CHECK_STATUS(claim_into(&b, cons, KEY("in"), got, sizeof(got), &c), -EAGAIN,
		     "cma_table_inline_tensor_is_taken_once");
	release(&a, ref);
	CHECK(tpu__cma_peek_state(&a, ref) == TPU__CMA_FREE, "cma_table_peek_of_a_released_slot");

	/* No destination: claimed as usual, the bytes read from the table. */
	src[0] = 42;
	CHECK_STATUS(post_inline(&a, prod, KEY("buf"), src, 1, &ref), 0,
		     "cma_table_inline_post_of_one_byte");
	CHECK_STATUS(claim(&b, cons, KEY("buf"), 8, &c), 0, "cma_table_inline_claim_succeeds");
	bytes = tpu__cma_inline_bytes(&b, &c);
	CHECK(c.inl && !c.done && state_of(&a, ref) == TPU__CMA_CLAIMED && bytes && bytes[0] == 42,
	      "cma_table_inline_claim_reads_the_bytes_from_the_table");
	CHECK_STATUS(finish(&b, cons, &c, 0), 0, "cma_table_inline_finish_succeeds");
	CHECK(state_of(&a, ref) == TPU__CMA_DONE, "cma_table_inline_finished_slot_reads_done");
	release(&a, ref);

	/* A slot reused for a pull: not inline any more. */
	CHECK_STATUS(post(&a, prod, KEY("pull"), src, 1, &ref2), 0, "cma_table_post_after_inline");
	CHECK_STATUS(claim_into(&b, cons, KEY("pull"), got, 8, &c), 0,
		     "cma_table_claim_into_of_a_pulled_tensor_succeeds");
	CHECK(!c.inl && !c.done && state_of(&a, ref2) == TPU__CMA_CLAIMED,
	      "cma_table_claim_into_of_a_pulled_tensor_leaves_it_to_the_pull");
	release(&a, ref2);
	CHECK_STATUS(post_inline(&a, prod, KEY("none"), NULL, 0, &ref), 0,
		     "cma_table_inline_post_of_zero_bytes");
	CHECK_STATUS(claim_into(&b, cons, KEY("none"), got, 0, &c), 0,
		     "cma_table_inline_zero_bytes_fit_zero_room");
	CHECK(c.done && c.len == 0, "cma_table_inline_zero_bytes_are_done");
	release(&a, ref);
	tpu__cma_member_leave(&a, prod);
	tpu__cma_member_leave(&b, cons);
	tpu__cma_table_close(&a);
	tpu__cma_table_close(&b);
}

/* Scans stop at the last slot in use, so freed slots at the end go first. */
static void scan_mark(void)
{
	struct tpu__cma_table t;
	struct tpu__cma_who me;
	struct tpu__cma_ref a, b, c, d;
	struct tpu__cma_claim cl;

	if (tpu__cma_table_create(&t, 0) || tpu__cma_member_join(&t, 0, &me) ||
	    post(&t, me, KEY("a"), "a", 1, &a) || post(&t, me, KEY("b"), "b", 1, &b) ||
	    post(&t, me, KEY("c"), "c", 1, &c)) {
		CHECK(false, "cma_table_set_up");
		return;
	}
	CHECK(a.idx == 0 && b.idx == 1 && c.idx == 2, "cma_table_fills_slots_in_order");
	release(&t, b);
	release(&t, c);
	CHECK_STATUS(post(&t, me, KEY("d"), "d", 1, &d), 0, "cma_table_post_after_releases");
	CHECK(d.idx == 1, "cma_table_reuses_the_lowest_free_slot");
	CHECK_STATUS(claim(&t, me, KEY("d"), 1, &cl), 0, "cma_table_reused_slot_is_found");
	release(&t, a);
	release(&t, d);
	CHECK(tpu__cma_used(&t) == 0 && !post(&t, me, KEY("e"), "e", 1, &d) && d.idx == 0,
	      "cma_table_empty_table_starts_again_at_slot_0");
	tpu__cma_member_leave(&t, me);
	tpu__cma_table_close(&t);
}

static void abort_and_capacity(void)
{
	struct tpu__cma_table t;
	struct tpu__cma_who me;
	struct tpu__cma_ref ref, first = { 0 };
	char key[32];
	bool all = true;
	int i;

	if (tpu__cma_table_create(&t, 0) || tpu__cma_member_join(&t, 0, &me)) {
		CHECK(false, "cma_table_set_up");
		return;
	}
	for (i = 0; i < TPU__CMA_SLOTS && all; i++) {
		int n = snprintf(key, sizeof(key), "key-%d", i);

		all = !post(&t, me, (const uint8_t *)key, (size_t)n, key, 1, i ? &ref : &first);
	}
	CHECK(all && tpu__cma_used(&t) == TPU__CMA_SLOTS, "cma_table_holds_its_capacity_of_posts");
	CHECK_STATUS(post(&t, me, KEY("one-more"), key, 1, &ref), -ENOSPC,
		     "cma_table_post_beyond_capacity_is_enospc");
	release(&t, first);
	CHECK_STATUS(post(&t, me, KEY("one-more"), key, 1, &ref), 0,
		     "cma_table_freed_slot_is_reused");
	CHECK_STATUS(tpu__cma_abort_status(&t), 0, "cma_table_not_aborted_at_first");
	tpu__cma_lock(&t);
	CHECK_STATUS(tpu__cma_abort(&t, -ECONNRESET), 0, "cma_table_abort_succeeds");
	CHECK_STATUS(tpu__cma_abort(&t, -EPIPE), -EALREADY, "cma_table_second_abort_is_ealready");
	tpu__cma_unlock(&t);
	CHECK_STATUS(tpu__cma_abort_status(&t), -ECONNRESET,
		     "cma_table_keeps_the_first_abort_status");
	CHECK_STATUS(post(&t, me, KEY("late"), key, 1, &ref), -ECONNRESET,
		     "cma_table_post_after_abort_fails_with_the_status");
	tpu__cma_member_leave(&t, me);
	tpu__cma_table_close(&t);
}

/* --- wakeups ------------------------------------------------------------- */

struct waiter {
	struct tpu__cma_table *t;
	uint32_t seen;
	int64_t timeout_ns;
	tpu_status status;
	int64_t elapsed_ns;
	int64_t cpu_ns;
};

static void *wait_thread(void *arg)
{
	struct waiter *w = arg;
	int64_t t0 = mono_ns(), c0 = thread_cpu_ns();

	w->status = tpu__cma_wait(w->t, w->seen, w->timeout_ns);
	w->elapsed_ns = mono_ns() - t0;
	w->cpu_ns = thread_cpu_ns() - c0;
	return NULL;
}

static void wakeups(void)
{
	struct tpu__cma_table t;
	struct waiter w;
	pthread_t th;
	uint32_t seen;

	if (tpu__cma_table_create(&t, 0)) {
		CHECK(false, "cma_table_set_up");
		return;
	}
	seen = tpu__cma_wake_seq(&t);
	CHECK_STATUS(tpu__cma_wait(&t, seen, 1000000), -ETIMEDOUT,
		     "cma_table_wait_without_a_wake_times_out");
	tpu__cma_wake(&t);
	CHECK(tpu__cma_wake_seq(&t) != seen, "cma_table_wake_bumps_the_word");
	CHECK_STATUS(tpu__cma_wait(&t, seen, -1), 0,
		     "cma_table_wait_after_a_missed_wake_returns_at_once");

	/* Idle: 200 ms asleep must cost (almost) no CPU. */
	w = (struct waiter){ .t = &t, .seen = tpu__cma_wake_seq(&t), .timeout_ns = 200000000 };
	if (pthread_create(&th, NULL, wait_thread, &w) == 0) {
		pthread_join(th, NULL);
		CHECK(w.status == -ETIMEDOUT && w.elapsed_ns >= 190000000,
		      "cma_table_wait_sleeps_until_its_timeout");
		CHECK(w.cpu_ns < 20000000, "cma_table_wait_does_not_busy_loop (cpu %lld ns)",
		      (long long)w.cpu_ns);
	}

	/* A sleeper with a long timeout is woken by another thread at once. */
	w = (struct waiter){ .t = &t, .seen = tpu__cma_wake_seq(&t), .timeout_ns = 10000000000LL };
	if (pthread_create(&th, NULL, wait_thread, &w) == 0) {
		usleep(50000);
		tpu__cma_wake(&t);
		pthread_join(th, NULL);
		CHECK(w.status == 0 && w.elapsed_ns < 5000000000LL,
		      "cma_table_wake_from_another_thread_ends_the_wait");
	}
	tpu__cma_table_close(&t);
}

/* --- death of members ------------------------------------------------------ */

struct joiner {
	struct tpu__cma_table *t;
	struct tpu__cma_who who;
	tpu_status status;
};

/* Joins and ends without leaving: the thread's exit is the member's death. */
static void *join_and_vanish(void *arg)
{
	struct joiner *j = arg;

	j->status = tpu__cma_member_join(j->t, 0, &j->who);
	return NULL;
}

static void thread_death(void)
{
	struct tpu__cma_table t;
	struct joiner j = { .t = &t };
	struct tpu__cma_who again;
	pthread_t th;

	if (tpu__cma_table_create(&t, 0) || pthread_create(&th, NULL, join_and_vanish, &j)) {
		CHECK(false, "cma_table_set_up");
		return;
	}
	pthread_join(th, NULL);
	CHECK(!j.status && !alive(&t, j.who), "cma_table_member_whose_thread_ended_is_dead");
	CHECK(!tpu__cma_member_join(&t, 0, &again) && again.idx == j.who.idx &&
	      again.gen != j.who.gen,
	      "cma_table_dead_members_slot_is_reused_with_a_new_generation");
	CHECK(!alive(&t, j.who) && alive(&t, again), "cma_table_old_generation_stays_dead");
	tpu__cma_member_leave(&t, again);
	tpu__cma_table_close(&t);
}

static int wait_child(pid_t pid)
{
	int ws;

	if (pid < 0 || waitpid(pid, &ws, 0) != pid)
		return -1;
	return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

static void producer_death(void)
{
	struct tpu__cma_table t;
	struct tpu__cma_who me;
	struct tpu__cma_ref ref;
	struct tpu__cma_claim c;
	pid_t pid;

	if (tpu__cma_table_create(&t, 0) || tpu__cma_member_join(&t, 0, &me)) {
		CHECK(false, "cma_table_set_up");
		return;
	}
	pid = fork();
	if (pid == 0) {
		struct tpu__cma_who child;
		static const char data[] = "orphan";

		if (tpu__cma_member_join(&t, 0, &child) ||
		    post(&t, child, KEY("orphan"), data, sizeof(data), &ref) ||
		    post(&t, child, KEY("orphan2"), data, sizeof(data), &ref) ||
		    post_inline(&t, child, KEY("orphan3"), data, sizeof(data), &ref))
			_exit(1);
		_exit(0);
	}
	CHECK(wait_child(pid) == 0 && tpu__cma_used(&t) == 3, "cma_table_child_posted_and_died");
	CHECK(!tpu__cma_members_look_alive(&t),
	      "cma_table_members_do_not_look_alive_while_a_death_waits_to_be_noticed");
	/*
	 * Its bytes are in the table, but a dead producer's tensors are
	 * dropped all the same, and the claim says why nothing will come.
	 */
	CHECK(tpu__cma_peek_key(&t, KEY("orphan3")), "cma_table_dead_producers_inline_slot_is_seen");
	CHECK_STATUS(claim_into(&t, me, KEY("orphan3"), (char[16]){ 0 }, 16, &c), TPU_E_PEER_GONE,
		     "cma_table_inline_post_of_a_dead_producer_is_not_claimed_but_peer_gone");
	CHECK(tpu__cma_used(&t) == 2 && !tpu__cma_peek_key(&t, KEY("orphan3")),
	      "cma_table_dead_producers_inline_slot_is_dropped_by_the_claim");
	CHECK(tpu__cma_members_look_alive(&t), "cma_table_members_look_alive_once_the_death_is_noticed");
	CHECK_STATUS(claim(&t, me, KEY("orphan"), 100, &c), TPU_E_PEER_GONE,
		     "cma_table_post_of_a_dead_producer_is_not_claimed_but_peer_gone");
	/* Dropped by that claim: the next one waits as for any key (-EAGAIN). */
	CHECK_STATUS(claim(&t, me, KEY("orphan"), 100, &c), -EAGAIN,
		     "cma_table_dead_producers_key_is_unknown_after_one_peer_gone");
	CHECK(tpu__cma_used(&t) == 1, "cma_table_dead_producers_slot_is_dropped_by_the_claim");
	CHECK_STATUS(post(&t, me, KEY("orphan2"), "x", 1, &ref), 0,
		     "cma_table_key_of_a_dead_producer_can_be_posted_again");
	CHECK(tpu__cma_used(&t) == 1, "cma_table_dead_producers_slot_is_dropped_by_the_post");
	CHECK_STATUS(claim(&t, me, KEY("orphan2"), 100, &c), 0,
		     "cma_table_post_replacing_a_dead_producers_slot_can_be_claimed");
	tpu__cma_member_leave(&t, me);
	tpu__cma_table_close(&t);
}

static void consumer_death(void)
{
	static const char data[] = "claimed by a process that dies";
	struct tpu__cma_table t;
	struct tpu__cma_who me;
	struct tpu__cma_ref ref;
	struct tpu__cma_claim c;
	uint32_t seen;
	pid_t pid;

	if (tpu__cma_table_create(&t, 0) || tpu__cma_member_join(&t, 0, &me) ||
	    post(&t, me, KEY("k"), data, sizeof(data), &ref)) {
		CHECK(false, "cma_table_set_up");
		return;
	}
	pid = fork();
	if (pid == 0) {
		struct tpu__cma_who child;

		if (tpu__cma_member_join(&t, 0, &child) ||
		    claim(&t, child, KEY("k"), sizeof(data), &c))
			_exit(1);
		_exit(0);
	}
	CHECK(wait_child(pid) == 0, "cma_table_child_claimed_and_died");
	seen = tpu__cma_wake_seq(&t);
	CHECK(state_of(&t, ref) == TPU__CMA_POSTED,
	      "cma_table_claim_of_a_dead_consumer_reads_posted_again");
	CHECK(tpu__cma_wake_seq(&t) != seen, "cma_table_undone_claim_wakes_the_consumers");
	CHECK_STATUS(claim(&t, me, KEY("k"), sizeof(data), &c), 0,
		     "cma_table_another_consumer_claims_after_the_death");

	/* The same when a live consumer finds the dead claim first. */
	CHECK_STATUS(finish(&t, me, &c, -EPERM), -EPERM,
		     "cma_table_refused_pull_gives_the_key_back");
	pid = fork();
	if (pid == 0) {
		struct tpu__cma_who child;

		if (tpu__cma_member_join(&t, 0, &child) ||
		    claim(&t, child, KEY("k"), sizeof(data), &c))
			_exit(1);
		_exit(0);
	}
	CHECK(wait_child(pid) == 0, "cma_table_second_child_claimed_and_died");
	CHECK_STATUS(claim(&t, me, KEY("k"), sizeof(data), &c), 0,
		     "cma_table_consumer_takes_over_a_dead_consumers_claim");
	tpu__cma_member_leave(&t, me);
	tpu__cma_table_close(&t);
}

static void lock_holder_death(void)
{
	struct tpu__cma_table t;
	struct tpu__cma_who me;
	struct tpu__cma_ref ref;
	pid_t pid;

	if (tpu__cma_table_create(&t, 0) || tpu__cma_member_join(&t, 0, &me) ||
	    post(&t, me, KEY("k"), "x", 1, &ref)) {
		CHECK(false, "cma_table_set_up");
		return;
	}
	pid = fork();
	if (pid == 0)
		_exit(tpu__cma_lock(&t) ? 1 : 0);
	CHECK(wait_child(pid) == 0, "cma_table_child_died_holding_the_lock");
	CHECK_STATUS(tpu__cma_lock(&t), 0, "cma_table_lock_of_a_dead_holder_is_recovered");
	CHECK(tpu__cma_used(&t) == 1, "cma_table_recovered_table_counts_its_slots");
	tpu__cma_unlock(&t);
	CHECK(state_of(&t, ref) == TPU__CMA_POSTED, "cma_table_recovered_table_keeps_its_posts");
	tpu__cma_member_leave(&t, me);
	tpu__cma_table_close(&t);
}

/*
 * Two processes, each as in real use: the child posts its own memory and
 * sleeps on the table until its slot is DONE; the parent claims, pulls
 * from the child and finishes, which wakes the child.
 */
static void across_processes(void)
{
	enum { LEN = 3 * 4096 + 17 };
	struct tpu__cma_table t;
	struct tpu__cma_who me;
	struct tpu__cma_claim c = { 0 };
	int64_t t0;
	uint8_t *got;
	tpu_status st = -EAGAIN;
	int rc;
	bool same = true;
	pid_t pid;
	size_t i;

	if (tpu__cma_table_create(&t, 0) || tpu__cma_member_join(&t, 0, &me)) {
		CHECK(false, "cma_table_set_up");
		return;
	}
	pid = fork();
	if (pid == 0) {
		struct tpu__cma_who child;
		struct tpu__cma_ref ref;
		uint8_t *src = malloc(LEN);
		int64_t deadline = mono_ns() + 20000000000LL;

		if (!src || tpu__cma_member_join(&t, 0, &child))
			_exit(1);
		for (i = 0; i < LEN; i++)
			src[i] = (uint8_t)(i * 13 + 1);
		if (post(&t, child, KEY("x"), src, LEN, &ref))
			_exit(2);
		tpu__cma_wake(&t);
		for (;;) {
			uint32_t seen = tpu__cma_wake_seq(&t);

			if (state_of(&t, ref) == TPU__CMA_DONE)
				break;
			if (mono_ns() > deadline)
				_exit(3);
			tpu__cma_wait(&t, seen, 1000000000);
		}
		release(&t, ref);
		tpu__cma_member_leave(&t, child);
		free(src);
		_exit(0);
	}
	/* Allocated after the fork, so that the child's exit leaks nothing. */
	got = malloc(LEN);
	t0 = mono_ns();
	while (got && pid > 0 && mono_ns() - t0 < 20000000000LL) {
		uint32_t seen = tpu__cma_wake_seq(&t);

		st = claim(&t, me, KEY("x"), LEN, &c);
		if (st != -EAGAIN)
			break;
		tpu__cma_wait(&t, seen, 1000000000);
	}
	CHECK_STATUS(st, 0, "cma_table_parent_claims_the_childs_post");
	if (!st) {
		st = finish(&t, me, &c, tpu_cma_read(c.pid, c.addr, got, LEN));
		tpu__cma_wake(&t);
	}
	CHECK_STATUS(st, 0, "cma_table_parent_pulls_from_the_child");
	for (i = 0; got && i < LEN && same; i++)
		same = got[i] == (uint8_t)(i * 13 + 1);
	CHECK(same && c.pid == pid, "cma_table_pulled_bytes_are_the_childs");
	rc = wait_child(pid);
	CHECK(rc == 0, "cma_table_child_saw_done_through_the_shared_futex (exit %d)", rc);
	CHECK(tpu__cma_used(&t) == 0, "cma_table_child_released_its_slot");
	tpu__cma_member_leave(&t, me);
	tpu__cma_table_close(&t);
	free(got);
}

static void member_listing(void)
{
	struct tpu__cma_table t;
	struct tpu__cma_who a, b;
	pid_t pids[4];
	uint64_t addrs[4];
	size_t n;

	if (tpu__cma_table_create(&t, 0) || tpu__cma_member_join(&t, 11, &a) ||
	    tpu__cma_member_join(&t, 22, &b)) {
		CHECK(false, "cma_table_set_up");
		return;
	}
	tpu__cma_lock(&t);
	n = tpu__cma_members(&t, &a, pids, addrs, 4);
	CHECK(n == 1 && pids[0] == getpid() && addrs[0] == 22,
	      "cma_table_lists_the_other_members_with_their_probe_address");
	n = tpu__cma_members(&t, NULL, pids, addrs, 4);
	CHECK(n == 2, "cma_table_lists_every_member_without_self");
	tpu__cma_unlock(&t);
	tpu__cma_member_leave(&t, a);
	tpu__cma_member_leave(&t, b);
	tpu__cma_table_close(&t);
}

void test_cma_table(void)
{
	recognise_and_open();
	post_claim_done();
	failed_pull_and_withdraw();
	inline_slots();
	scan_mark();
	abort_and_capacity();
	wakeups();
	thread_death();
	member_listing();
	producer_death();
	consumer_death();
	lock_holder_death();
	across_processes();
}
