// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * What silent clients can hold of the bootstrap store's server
 * (Documentation/security.rst, "Resource bounds"): clients that connect
 * and never send a byte are dropped after TPU_SETUP_TIMEOUT_MS; more of
 * them than the server has slots (STORE_MAX_CLIENTS) do not keep ranks
 * from meeting, since past TPU_SETUP_MAX the oldest are dropped; and a
 * server out of descriptors (a child process with a low RLIMIT_NOFILE)
 * neither spins nor stays stuck once the descriptors are back.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "boot.h"
#include "boot_harness.h"
#include "tap.h"

/* A silent connection to 127.0.0.1:@port; non-blocking, so a full backlog cannot stall us. */
static int silent_connect(uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) && errno != EINPROGRESS) {
		close(fd);
		fd = -1;
	}
	return fd;
}

static void set_knobs(const char *timeout_ms, const char *max)
{
	setenv("TPU_SETUP_TIMEOUT_MS", timeout_ms, 1);
	setenv("TPU_SETUP_MAX", max, 1);
}

static void clear_knobs(void)
{
	unsetenv("TPU_SETUP_TIMEOUT_MS");
	unsetenv("TPU_SETUP_MAX");
}

/* A client sets, gets and says it works. */
static bool client_works(uint16_t port)
{
	struct store_client *c = NULL;
	char why[256], buf[8];
	size_t len = 0;
	bool ok = !tpu__store_client_connect("127.0.0.1", port, 5000, &c, why, sizeof(why)) &&
		  !tpu__store_set(c, "ok", "yes", 3) &&
		  !tpu__store_get(c, "ok", buf, sizeof(buf), &len, 1000) && len == 3;

	tpu__store_client_close(c);
	return ok;
}

static void silent_clients_time_out(void)
{
	enum { N = 20 };
	struct store_server *s = NULL;
	char why[256];
	int fds[N], closed = 0;
	uint64_t t0, took;
	bool up;

	set_knobs("500", "64");
	up = !tpu__store_server_start("127.0.0.1", 0, &s, why, sizeof(why));
	t0 = boot_now_ms();
	for (int i = 0; i < N; i++)
		fds[i] = up ? silent_connect(tpu__store_server_port(s)) : -1;
	while (up && closed < N && boot_now_ms() - t0 < 8000) {
		usleep(20000);
		closed = 0;
		for (int i = 0; i < N; i++)
			closed += fds[i] >= 0 && hung_up(fds[i]);
	}
	took = boot_now_ms() - t0;
	CHECK(up && closed == N && took >= 400,
	      "bounds_store_silent_clients_are_dropped_after_the_deadline (%d of %d, %llu ms)",
	      closed, N, (unsigned long long)took);
	CHECK(up && client_works(tpu__store_server_port(s)),
	      "bounds_store_serves_a_client_after_dropping_silent_ones");
	for (int i = 0; i < N; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	tpu__store_server_stop(s);
	clear_knobs();
}

/*
 * Two silent clients 200 ms apart: when the first one's deadline passes,
 * the server must still wake for the second's (a passed deadline once made
 * its poll() wait for ever, so the second stayed until some other traffic).
 */
static void staggered_silent_clients(void)
{
	struct store_server *s = NULL;
	char why[256];
	int a = -1, b = -1;
	uint64_t t0;
	bool up, b_gone = false;

	set_knobs("500", "64");
	up = !tpu__store_server_start("127.0.0.1", 0, &s, why, sizeof(why));
	if (up) {
		a = silent_connect(tpu__store_server_port(s));
		usleep(200000);
		b = silent_connect(tpu__store_server_port(s));
	}
	t0 = boot_now_ms();
	while (up && b >= 0 && !b_gone && boot_now_ms() - t0 < 3000) {
		usleep(20000);
		b_gone = hung_up(b);
	}
	CHECK(up && a >= 0 && hung_up(a) && b_gone,
	      "bounds_store_a_later_silent_client_is_dropped_at_its_own_deadline (%llu ms)",
	      (unsigned long long)(boot_now_ms() - t0));
	if (a >= 0)
		close(a);
	if (b >= 0)
		close(b);
	tpu__store_server_stop(s);
	clear_knobs();
}

/* What a rank does with the store when a world forms: publish, read the others', meet. */
static int meeting_rank(int rank, int n, void *arg)
{
	uint16_t port = *(uint16_t *)arg;
	struct store_client *c = NULL;
	char why[256], key[32], val[32], got[32];
	size_t len = 0;

	R_CHECK(!tpu__store_client_connect("127.0.0.1", port, 10000, &c, why, sizeof(why)));
	snprintf(key, sizeof(key), "url-%d", rank);
	snprintf(val, sizeof(val), "tcp://rank-%d", rank);
	R_CHECK(!tpu__store_set(c, key, val, strlen(val)));
	for (int r = 0; r < n; r++) {
		snprintf(key, sizeof(key), "url-%d", r);
		snprintf(val, sizeof(val), "tcp://rank-%d", r);
		R_CHECK(!tpu__store_get(c, key, got, sizeof(got), &len, 10000) &&
			len == strlen(val) && !memcmp(got, val, len));
	}
	R_CHECK(!tpu__store_barrier(c, "formed", (uint32_t)n, 10000));
	tpu__store_client_close(c);
	return 0;
}

static void ranks_meet_behind_a_flood(void)
{
	enum { N = STORE_MAX_CLIENTS + 100 };
	static int fds[N];
	struct store_server *s = NULL;
	uint16_t port = 0;
	char why[256];
	bool up;
	int opened = 0;

	/* A long deadline: only the cap can make room here. */
	set_knobs("60000", "32");
	up = !tpu__store_server_start("127.0.0.1", 0, &s, why, sizeof(why));
	if (up)
		port = tpu__store_server_port(s);
	for (int i = 0; i < N; i++) {
		fds[i] = up ? silent_connect(port) : -1;
		opened += fds[i] >= 0;
	}
	/*
	 * Until every connect is through (those whose SYN met a full backlog
	 * try again a second later): only then do they hold what they can.
	 */
	for (uint64_t t0 = boot_now_ms(); up && boot_now_ms() - t0 < 10000; usleep(50000)) {
		int done = 0;

		for (int i = 0; i < N; i++) {
			struct pollfd p = { .fd = fds[i], .events = POLLOUT };

			done += fds[i] < 0 || (poll(&p, 1, 0) == 1 && p.revents);
		}
		if (done == N)
			break;
	}
	usleep(200000);
	CHECK(up && opened == N && boot_run_ranks(3, meeting_rank, &port, 40),
	      "bounds_store_ranks_meet_behind_%d_silent_clients (%d opened)", N, opened);
	for (int i = 0; i < N; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	tpu__store_server_stop(s);
	clear_knobs();
}

/* Real clients come in a burst over the cap: each sends at once, so none is pushed out. */
static void burst_of_ranks_over_the_cap(void)
{
	struct store_server *s = NULL;
	uint16_t port = 0;
	char why[256];
	bool up;

	set_knobs("60000", "2");
	up = !tpu__store_server_start("127.0.0.1", 0, &s, why, sizeof(why));
	if (up)
		port = tpu__store_server_port(s);
	CHECK(up && boot_run_ranks(12, meeting_rank, &port, 40),
	      "bounds_store_12_ranks_meet_with_a_setup_cap_of_2");
	tpu__store_server_stop(s);
	clear_knobs();
}

static long cpu_us(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000L + ru.ru_utime.tv_usec +
	       ru.ru_stime.tv_usec;
}

/*
 * The child: a store server allowed descriptors 0..15.  It sends its port,
 * waits for a byte (the flood is on), sends the CPU time it used over the
 * next second, waits for a byte (stop), and exits.
 */
static void starved_server(int to_parent, int from_parent)
{
	struct rlimit rl;
	struct store_server *s = NULL;
	char why[256], b;
	uint16_t port;
	long t0, used;

	/* Only these two and stdio stay: the limit then bounds the server alone. */
	if (dup2(to_parent, 3) < 0 || dup2(from_parent, 4) < 0)
		_exit(2);
	syscall(SYS_close_range, 5u, ~0u, 0u);
	if (tpu__store_server_start("127.0.0.1", 0, &s, why, sizeof(why)))
		_exit(3);
	/* Only the soft limit: valgrind refuses to change the hard one. */
	if (getrlimit(RLIMIT_NOFILE, &rl))
		_exit(4);
	rl.rlim_cur = 16;
	if (setrlimit(RLIMIT_NOFILE, &rl))
		_exit(4);
	port = tpu__store_server_port(s);
	if (write(3, &port, sizeof(port)) != sizeof(port) || read(4, &b, 1) != 1)
		_exit(5);
	t0 = cpu_us();
	sleep(1);
	used = cpu_us() - t0;
	if (write(3, &used, sizeof(used)) != sizeof(used) || read(4, &b, 1) != 1)
		_exit(6);
	tpu__store_server_stop(s);
	_exit(0);
}

static void out_of_descriptors(void)
{
	enum { N = 60 };
	int up_p[2], down_p[2], fds[N], status;
	struct sigaction old_pipe;
	uint16_t port = 0;
	long used = -1;
	pid_t pid;
	bool ok;

	/* A child that died early must fail a check, not kill this process. */
	sigaction(SIGPIPE, &(struct sigaction){ .sa_handler = SIG_IGN }, &old_pipe);
	for (int i = 0; i < N; i++)
		fds[i] = -1;
	/* The default deadline (10 s): what frees descriptors here is the server's own doing. */
	clear_knobs();
	if (pipe2(up_p, O_CLOEXEC) || pipe2(down_p, O_CLOEXEC)) {
		CHECK(false, "bounds_store_pipes_for_the_starved_server");
		sigaction(SIGPIPE, &old_pipe, NULL);
		return;
	}
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		close(up_p[0]);
		close(down_p[1]);
		alarm(60);
		starved_server(up_p[1], down_p[0]);
	}
	close(up_p[1]);
	close(down_p[0]);
	ok = pid > 0 && read(up_p[0], &port, sizeof(port)) == sizeof(port);
	for (int i = 0; ok && i < N; i++)
		fds[i] = silent_connect(port);
	/* Time for the server to take what it can and run out. */
	usleep(300000);
	ok = ok && write(down_p[1], "f", 1) == 1 &&
	     read(up_p[0], &used, sizeof(used)) == sizeof(used);
	CHECK(ok && used >= 0 && used < 100000,
	      "bounds_store_out_of_descriptors_does_not_spin (%ld us of cpu in 1 s)", used);
	for (int i = 0; i < N; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	CHECK(ok && client_works(port), "bounds_store_serves_again_once_descriptors_are_back");
	if (pid > 0) {
		if (write(down_p[1], "s", 1) != 1)
			kill(pid, SIGKILL);
		if (waitpid(pid, &status, 0) == pid && (!WIFEXITED(status) || WEXITSTATUS(status)))
			tap_diag("starved server: %s %d", WIFEXITED(status) ? "exit" : "signal",
				 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
	}
	close(up_p[0]);
	close(down_p[1]);
	sigaction(SIGPIPE, &old_pipe, NULL);
}

void test_bounds_store(void)
{
	silent_clients_time_out();
	staggered_silent_clients();
	ranks_meet_behind_a_flood();
	burst_of_ranks_over_the_cap();
	out_of_descriptors();
}
