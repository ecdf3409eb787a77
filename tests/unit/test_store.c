// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The bootstrap store (lib/boot): rank 0's server and its clients, across
 * fork()ed processes, with timeouts, an absent server and hostile clients.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "boot.h"
#include "boot_harness.h"
#include "tap.h"

static void pattern(uint8_t *p, size_t n, unsigned int seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 7 + seed * 13 + (i >> 8));
}

static size_t value_len(int rank)
{
	return rank == 0 ? STORE_VALUE_MAX : (size_t)rank * 1000 + 1;
}

/*
 * Each rank sets its key, reads every other's, adds to a counter, and
 * meets the others at barriers; rank 0 starts its server late, so the
 * others' connects are retried.
 */
static int store_rank(int rank, int n, void *arg)
{
	uint16_t port = *(uint16_t *)arg;
	static uint8_t want[STORE_VALUE_MAX], got[STORE_VALUE_MAX];
	struct store_server *s = NULL;
	struct store_client *c = NULL;
	char why[256], key[32];
	int64_t total = 0;
	size_t len = 0;

	if (rank == 0) {
		usleep(300 * 1000);
		R_CHECK(tpu__store_server_start("127.0.0.1", port, &s, why, sizeof(why)) == 0);
	}
	R_CHECK(tpu__store_client_connect("127.0.0.1", port, 10000, &c, why, sizeof(why)) == 0);
	pattern(want, value_len(rank), (unsigned int)rank);
	snprintf(key, sizeof(key), "value/%d", rank);
	R_CHECK(tpu__store_set(c, key, want, value_len(rank)) == 0);
	for (int r = 0; r < n; r++) {
		snprintf(key, sizeof(key), "value/%d", r);
		R_CHECK(tpu__store_get(c, key, got, sizeof(got), &len, 10000) == 0);
		pattern(want, value_len(r), (unsigned int)r);
		R_CHECK(len == value_len(r) && !memcmp(got, want, len));
	}
	R_CHECK(tpu__store_add(c, "sum", rank + 1, &total) == 0);
	R_CHECK(total >= rank + 1 && total <= n * (n + 1) / 2);
	R_CHECK(tpu__store_barrier(c, "after-add", (uint32_t)n, 10000) == 0);
	R_CHECK(tpu__store_add(c, "sum", 0, &total) == 0 && total == n * (n + 1) / 2);
	/* Rank 0 stops the server only once nobody needs it. */
	R_CHECK(tpu__store_barrier(c, "end", (uint32_t)n, 10000) == 0);
	tpu__store_client_close(c);
	if (s)
		R_CHECK(tpu__store_server_drain(s, 10000));
	tpu__store_server_stop(s);
	return 0;
}

static void store_across_processes(void)
{
	for (int n = 2; n <= 4; n++) {
		uint16_t port = boot_free_port();

		CHECK(port && boot_run_ranks(n, store_rank, &port, 60),
		      "store_set_get_add_barrier_across_%d_processes_with_late_rank0", n);
	}
}

/* A server and a client in this process. */
static bool local_store(struct store_server **s, struct store_client **c)
{
	char why[256];

	*c = NULL;
	if (tpu__store_server_start("127.0.0.1", 0, s, why, sizeof(why)))
		return false;
	return !tpu__store_client_connect("127.0.0.1", tpu__store_server_port(*s), 5000, c, why, sizeof(why));
}

static void store_timeouts_and_limits(void)
{
	struct store_server *s = NULL;
	struct store_client *c = NULL;
	char big_key[STORE_KEY_MAX + 2], buf[4];
	uint64_t t0;
	size_t len = 0;
	tpu_status st;

	if (!local_store(&s, &c)) {
		CHECK(false, "store_server_starts_on_loopback_port_0");
		tpu__store_client_close(c);
		tpu__store_server_stop(s);
		return;
	}
	t0 = boot_now_ms();
	st = tpu__store_get(c, "missing", buf, sizeof(buf), &len, 300);
	t0 = boot_now_ms() - t0;
	CHECK(st == -ETIMEDOUT && t0 >= 290 && t0 < 5000,
	      "store_get_of_missing_key_times_out_after_its_timeout (%llu ms)",
	      (unsigned long long)t0);
	CHECK(tpu__store_get(c, "missing", buf, sizeof(buf), &len, 0) == -ETIMEDOUT,
	      "store_get_with_timeout_0_does_not_wait");
	CHECK(tpu__store_set(c, "k", "hello", 5) == 0 &&
	      tpu__store_get(c, "k", buf, sizeof(buf), &len, 0) == -EMSGSIZE && len == 5 &&
	      !memcmp(buf, "hell", 4), "store_get_into_small_buffer_is_emsgsize_with_length");
	CHECK(tpu__store_set(c, "k", "", 0) == 0 && tpu__store_get(c, "k", buf, sizeof(buf), &len, 0) == 0 &&
	      len == 0, "store_set_replaces_a_value_and_empty_values_are_kept");
	memset(big_key, 'k', sizeof(big_key) - 1);
	big_key[sizeof(big_key) - 1] = '\0';
	CHECK(tpu__store_set(c, big_key, "v", 1) == -EINVAL && tpu__store_set(c, "", "v", 1) == -EINVAL,
	      "store_refuses_keys_over_256_bytes_and_empty_keys");
	CHECK(tpu__store_set(c, "v", buf, STORE_VALUE_MAX + 1) == -EINVAL,
	      "store_refuses_values_over_64_kib");
	CHECK(tpu__store_set(c, "text", "abc", 3) == 0 && tpu__store_add(c, "text", 1, NULL) == -EINVAL,
	      "store_add_to_a_value_that_is_not_a_counter_is_einval");
	CHECK(tpu__store_add(c, "n", INT64_MAX, NULL) == 0 && tpu__store_add(c, "n", 1, NULL) == -ERANGE,
	      "store_add_overflow_is_erange");
	t0 = boot_now_ms();
	st = tpu__store_barrier(c, "alone", 2, 300);
	t0 = boot_now_ms() - t0;
	CHECK(st == -ETIMEDOUT && t0 < 5000, "store_barrier_missing_a_member_times_out");
	CHECK(tpu__store_set(c, "k", "still", 5) == 0, "store_client_works_after_timeouts");
	tpu__store_client_close(c);
	tpu__store_server_stop(s);
}

static void store_absent_rank0(void)
{
	struct store_client *c = NULL;
	uint16_t port = boot_free_port();
	char why[256] = "";
	uint64_t t0 = boot_now_ms();
	tpu_status st = tpu__store_client_connect("127.0.0.1", port, 700, &c, why, sizeof(why));

	t0 = boot_now_ms() - t0;
	CHECK(st == -ETIMEDOUT && !c && t0 >= 690 && t0 < 3000 && strstr(why, "rank 0"),
	      "store_client_without_rank0_fails_within_its_bound (%llu ms: %s)",
	      (unsigned long long)t0, why);
}

/* A raw connection to the server. */
static int raw_connect(uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* True when the server closed @fd within 3 s (and sent nothing). */
static bool dropped(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char c;

	return poll(&p, 1, 3000) == 1 && recv(fd, &c, 1, 0) <= 0;
}

static void store_hostile_clients(void)
{
	struct hostile {
		const char *name;
		uint8_t hdr[STORE_REQ_HDR];
	} cases[] = {
		{ "unknown_op", { 99, 0, 0, 0, 1, 0, 0, 0 } },
		{ "nonzero_reserved_byte", { STORE_SET, 1, 0, 0, 1, 0, 0, 0 } },
		{ "empty_key", { STORE_SET, 0, 0, 0, 0, 0, 0, 0 } },
		{ "key_over_256_bytes", { STORE_SET, 0, 0, 0, 1, 1, 0, 0 } },
		{ "value_of_4_gib", { STORE_SET, 0, 0, 0, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff } },
		{ "value_just_over_64_kib", { STORE_SET, 0, 0, 0, 1, 0, 0, 0, 1, 0, 1, 0 } },
		{ "get_with_a_value", { STORE_GET, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0 } },
		{ "get_waiting_over_an_hour", { STORE_GET, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
						0xff, 0xff, 0xff, 0x7f } },
		{ "add_without_8_bytes", { STORE_ADD, 0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0 } },
	};
	struct store_server *s = NULL;
	struct store_client *c = NULL, *waiter = NULL;
	char why[256], buf[16];
	size_t len = 0;
	int parked_fd, stalled_fd = -1;
	uint64_t stalled_at = 0;

	if (!local_store(&s, &c)) {
		CHECK(false, "store_server_starts_for_hostile_clients");
		goto out;
	}
	/* Half a header, then nothing: checked last, after STORE_FRAME_MS. */
	stalled_fd = raw_connect(tpu__store_server_port(s));
	stalled_at = boot_now_ms();
	CHECK(stalled_fd >= 0 && write(stalled_fd, "\x01\0\0\0\x01", 5) == 5,
	      "store_stalled_client_sent_half_a_header");
	CHECK(!tpu__store_client_connect("127.0.0.1", tpu__store_server_port(s), 5000, &waiter, why,
				    sizeof(why)), "store_second_client_connects");
	/* A well-formed GET left parked on a raw socket that then goes away. */
	parked_fd = raw_connect(tpu__store_server_port(s));
	if (parked_fd >= 0) {
		uint8_t get[STORE_REQ_HDR + 1];
		struct store_req r = { .op = STORE_GET, .key_len = 1, .arg = 60000 };

		tpu__store_wire_req_put(&r, get);
		get[STORE_REQ_HDR] = 'p';
		CHECK(write(parked_fd, get, sizeof(get)) == (ssize_t)sizeof(get),
		      "store_raw_get_sent");
		close(parked_fd);
	}
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int fd = raw_connect(tpu__store_server_port(s));

		CHECK(fd >= 0 && write(fd, cases[i].hdr, STORE_REQ_HDR) == STORE_REQ_HDR &&
		      dropped(fd), "store_drops_a_client_sending_%s", cases[i].name);
		if (fd >= 0)
			close(fd);
		CHECK(tpu__store_set(c, "alive", &i, sizeof(i)) == 0 &&
		      tpu__store_get(waiter, "alive", buf, sizeof(buf), &len, 1000) == 0 &&
		      len == sizeof(i) && !memcmp(buf, &i, sizeof(i)),
		      "store_serves_others_after_dropping_%s", cases[i].name);
	}
	{
		/* Garbage of every length, then a client half-way through a frame leaves. */
		int fd = raw_connect(tpu__store_server_port(s));
		uint8_t junk[4096];

		pattern(junk, sizeof(junk), 99);
		CHECK(fd >= 0 && write(fd, junk, sizeof(junk)) > 0 && dropped(fd),
		      "store_drops_a_client_sending_random_bytes");
		if (fd >= 0)
			close(fd);
		fd = raw_connect(tpu__store_server_port(s));
		CHECK(fd >= 0 && write(fd, junk, 7) == 7, "store_half_header_sent");
		if (fd >= 0)
			close(fd);
	}
	CHECK(tpu__store_set(c, "end", "ok", 2) == 0 &&
	      tpu__store_get(waiter, "end", buf, sizeof(buf), &len, 1000) == 0 && len == 2,
	      "store_keeps_serving_after_hostile_clients");
	if (stalled_fd >= 0) {
		struct pollfd p = { .fd = stalled_fd, .events = POLLIN };
		char ch;

		CHECK(poll(&p, 1, STORE_FRAME_MS + 5000) == 1 && recv(stalled_fd, &ch, 1, 0) <= 0 &&
		      boot_now_ms() - stalled_at >= STORE_FRAME_MS - 100,
		      "store_drops_a_client_stalled_inside_a_frame_after_%u_ms", STORE_FRAME_MS);
		close(stalled_fd);
	}
out:
	tpu__store_client_close(waiter);
	tpu__store_client_close(c);
	tpu__store_server_stop(s);
}

static void store_parked_get_wakes_on_set(void)
{
	struct store_server *s = NULL;
	struct store_client *c = NULL;
	char buf[8], why[256];
	size_t len = 0;
	int ok;
	pid_t pid;

	if (!local_store(&s, &c)) {
		CHECK(false, "store_server_starts_for_parked_get");
		goto out;
	}
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		/* The child's own client sets the key after the parent started waiting. */
		struct store_client *cc = NULL;
		int rc;

		alarm(30);
		usleep(200 * 1000);
		rc = tpu__store_client_connect("127.0.0.1", tpu__store_server_port(s), 5000, &cc, why,
					  sizeof(why)) || tpu__store_set(cc, "late", "yes", 3);
		tpu__store_client_close(cc);
		_exit(rc);
	}
	ok = tpu__store_get(c, "late", buf, sizeof(buf), &len, 10000) == 0 && len == 3 &&
	     !memcmp(buf, "yes", 3);
	ok &= pid > 0 && waitpid(pid, NULL, 0) == pid;
	CHECK(ok, "store_get_waits_for_a_key_another_process_sets_later");
out:
	tpu__store_client_close(c);
	tpu__store_server_stop(s);
}

/*
 * A caller's bound covers every request: against a listener that accepts
 * and never answers, a SET fails at the bound (not the reply slack of
 * 10 s); against a live server, a GET cut to the bound is answered by the
 * server, so the stream stays usable after it.
 */
static void store_client_bound(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct store_server *s = NULL;
	struct store_client *c = NULL;
	char why[256], buf[4];
	size_t len = 0;
	uint64_t t0;
	tpu_status st = -1;

	if (lfd >= 0 && !bind(lfd, (struct sockaddr *)&a, sizeof(a)) && !listen(lfd, 4) &&
	    !getsockname(lfd, (struct sockaddr *)&a, &alen) &&
	    !tpu__store_client_connect("127.0.0.1", ntohs(a.sin_port), 2000, &c, why, sizeof(why))) {
		t0 = boot_now_ms();
		tpu__store_client_bound(c, tpu__store_now_ms() + 500);
		st = tpu__store_set(c, "k", "v", 1);
		t0 = boot_now_ms() - t0;
		CHECK(st == -ETIMEDOUT && t0 >= 490 && t0 < 1500,
		      "store_request_to_a_silent_server_ends_at_the_callers_bound (%llu ms)",
		      (unsigned long long)t0);
		CHECK(tpu__store_set(c, "k", "v", 1) == -ENOTCONN,
		      "store_stream_without_its_reply_is_closed");
	} else {
		CHECK(false, "store_request_to_a_silent_server_ends_at_the_callers_bound");
	}
	tpu__store_client_close(c);
	if (lfd >= 0)
		close(lfd);
	if (!local_store(&s, &c)) {
		CHECK(false, "store_server_starts_for_bounds");
	} else {
		t0 = boot_now_ms();
		tpu__store_client_bound(c, tpu__store_now_ms() + 300);
		st = tpu__store_get(c, "missing", buf, sizeof(buf), &len, 5000);
		t0 = boot_now_ms() - t0;
		CHECK(st == -ETIMEDOUT && t0 >= 290 && t0 < 1500,
		      "store_get_longer_than_the_bound_ends_at_the_bound (%llu ms)",
		      (unsigned long long)t0);
		CHECK(tpu__store_set(c, "late", "x", 1) == -ETIMEDOUT,
		      "store_request_past_the_bound_fails_without_being_sent");
		tpu__store_client_bound(c, 0);
		CHECK(tpu__store_set(c, "late", "x", 1) == 0 &&
		      tpu__store_get(c, "late", buf, sizeof(buf), &len, 0) == 0 && len == 1,
		      "store_stream_stays_usable_after_a_bounded_get_timed_out");
	}
	tpu__store_client_close(c);
	tpu__store_server_stop(s);
}

void test_store(void)
{
	store_across_processes();
	store_timeouts_and_limits();
	store_absent_rank0();
	store_hostile_clients();
	store_parked_get_wakes_on_set();
	store_client_bound();
}
