// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * What a peer that never finishes its set-up can hold of a pipe listener,
 * over tcp and shm (Documentation/security.rst, "Resource bounds"): raw
 * sockets of this process that connect and stay silent are closed after
 * TPU_SETUP_TIMEOUT_MS; past TPU_SETUP_MAX the oldest are closed at once;
 * a set-up frame announcing more than 16 KiB is refused at its header, so
 * that half-sent large frames make the listener allocate nothing.  After
 * each attack a real pipe still connects.  A shm listener out of
 * descriptors (a child process with a low RLIMIT_NOFILE) neither spins nor
 * gives up.  The knobs are set small here so that the list runs in seconds.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pipe_harness.h"
#include "tap.h"
#include "tpu_user.h"

#define SILENT_MAX	16

static uint64_t ms_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void set_knobs(unsigned int timeout_ms, unsigned int max)
{
	char v[32];

	snprintf(v, sizeof(v), "%u", timeout_ms);
	setenv("TPU_SETUP_TIMEOUT_MS", v, 1);
	snprintf(v, sizeof(v), "%u", max);
	setenv("TPU_SETUP_MAX", v, 1);
}

static void clear_knobs(void)
{
	unsetenv("TPU_SETUP_TIMEOUT_MS");
	unsetenv("TPU_SETUP_MAX");
}

/* A raw connection to a listener's tcp:// or shm:// URL; -1 on failure. */
static int raw_connect(const char *url)
{
	int fd = -1;

	if (!strncmp(url, "tcp://", 6)) {
		struct sockaddr_in sa = { .sin_family = AF_INET };

		sa.sin_port = htons((uint16_t)atoi(strrchr(url, ':') + 1));
		sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
			close(fd);
			fd = -1;
		}
	} else if (!strncmp(url, "shm://", 6)) {
		/* The shm transport's abstract socket name (lib/transport/shm.h). */
		static const char prefix[] = "tensorpipe-shm/";
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		size_t n = strlen(url + 6);

		memcpy(sa.sun_path + 1, prefix, sizeof(prefix) - 1);
		memcpy(sa.sun_path + sizeof(prefix), url + 6, n);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd >= 0 && connect(fd, (struct sockaddr *)&sa,
				       (socklen_t)(offsetof(struct sockaddr_un, sun_path) +
						   sizeof(prefix) + n))) {
			close(fd);
			fd = -1;
		}
	}
	return fd;
}

/* Wait up to @ms until every fd of @fds[0..n) hung up; how many did. */
static int wait_hung_up(const int *fds, int n, unsigned int ms)
{
	uint64_t end = ms_now() + ms;
	int done;

	for (;;) {
		done = 0;
		for (int i = 0; i < n; i++)
			done += fds[i] >= 0 && hung_up(fds[i]);
		if (done == n || ms_now() >= end)
			return done;
		usleep(20000);
	}
}

static void close_all(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

/* A real pipe still gets through the listener of @pp. */
static bool legit_connects(struct pair *pp, const char *url)
{
	struct rec r;
	struct tag t = { &r, 0 };
	struct tpu_pipe *p = NULL;
	bool ok;

	rec_init(&r);
	ok = !tpu_listener_accept(pp->l, on_accept, &t) && !tpu_pipe_connect(pp->b, url, &p) &&
	     rec_wait(&r, 1) && !r.st[0];
	tpu_pipe_close(p);
	if (r.n > 0)
		tpu_pipe_close(r.pipe);
	return ok;
}

static bool open_pair(struct pair *pp, const char *url, char *got, size_t size)
{
	return pair_open(pp, url, NULL) && !tpu_listener_url(pp->l, NULL, got, size);
}

/* Silent connections are closed once the set-up deadline passed. */
static void silent_connections(const char *url, const char *name)
{
	enum { N = 10 };
	int fds[N];
	char got[300] = "";
	struct pair pp;
	bool up;
	uint64_t t0;
	int closed;

	set_knobs(1500, 64);
	up = open_pair(&pp, url, got, sizeof(got));
	t0 = ms_now();
	for (int i = 0; i < N; i++)
		fds[i] = up ? raw_connect(got) : -1;
	closed = wait_hung_up(fds, N, 8000);
	CHECK(up && closed == N, "bounds_%s_silent_connections_are_closed_after_the_setup_deadline "
	      "(%d of %d, %llu ms)", name, closed, N, (unsigned long long)(ms_now() - t0));
	close_all(fds, N);
	CHECK(up && legit_connects(&pp, got), "bounds_%s_a_real_pipe_connects_after_silent_ones",
	      name);
	pair_close(&pp);
	clear_knobs();
}

/* How many of @fds[0..n) the far end hung up on, now. */
static int count_hung_up(const int *fds, int n)
{
	int k = 0;

	for (int i = 0; i < n; i++)
		k += fds[i] >= 0 && hung_up(fds[i]);
	return k;
}

/*
 * Past TPU_SETUP_MAX, long before the deadline: a burst over the cap loses
 * one connection (the newcomer while all are young); connections older than
 * the grace (100 ms here) make room for new ones, oldest first.
 */
static void setup_cap(const char *url, const char *name)
{
	enum { CAP = 4 };
	int burst[CAP + 1], late[CAP];
	char got[300] = "";
	struct pair pp;
	bool up, late_open = true;
	int closed = 0, survivors = 0;

	set_knobs(60000, CAP);
	/* One connection for the pair itself: mtcp's lanes would count against CAP too. */
	up = pair_open(&pp, url, "basic") && !tpu_listener_url(pp.l, NULL, got, sizeof(got));
	for (int i = 0; i < CAP + 1; i++)
		burst[i] = up ? raw_connect(got) : -1;
	for (uint64_t end = ms_now() + 3000; up && ms_now() < end && closed < 1; usleep(20000))
		closed = count_hung_up(burst, CAP + 1);
	usleep(200000);
	closed = count_hung_up(burst, CAP + 1);
	CHECK(up && closed == 1, "bounds_%s_a_burst_over_the_setup_cap_loses_one_connection (%d)",
	      name, closed);

	usleep(300000);
	for (int i = 0; i < CAP; i++) {
		late[i] = up ? raw_connect(got) : -1;
		/* One at a time, so that each finds the burst's oldest one. */
		usleep(20000);
	}
	for (uint64_t end = ms_now() + 3000; up && ms_now() < end; usleep(20000))
		if (count_hung_up(burst, CAP + 1) == CAP + 1)
			break;
	survivors = CAP + 1 - count_hung_up(burst, CAP + 1);
	for (int i = 0; i < CAP; i++)
		late_open &= late[i] >= 0 && !hung_up(late[i]);
	CHECK(up && !survivors && late_open,
	      "bounds_%s_past_the_setup_cap_the_oldest_connections_make_room "
	      "(%d of the first left, the new %s)", name, survivors, late_open ? "open" : "closed");
	/* Once they too are past their grace, a real pipe gets through. */
	usleep(300000);
	CHECK(up && legit_connects(&pp, got), "bounds_%s_a_real_pipe_connects_with_the_cap_full",
	      name);
	close_all(burst, CAP + 1);
	close_all(late, CAP);
	pair_close(&pp);
	clear_knobs();
}

static long rss_kib(void)
{
	long pages = -1;
	FILE *f = fopen("/proc/self/statm", "r");

	if (f) {
		if (fscanf(f, "%*d %ld", &pages) != 1)
			pages = -1;
		fclose(f);
	}
	return pages < 0 ? -1 : pages * (sysconf(_SC_PAGESIZE) / 1024);
}

/* A HELLO header announcing @len body bytes. */
static void hello_hdr(uint8_t h[16], uint32_t len)
{
	memset(h, 0, 16);
	memcpy(h, "TPW1", 4);
	h[4] = 1;	/* HELLO */
	h[8] = (uint8_t)len;
	h[9] = (uint8_t)(len >> 8);
	h[10] = (uint8_t)(len >> 16);
	h[11] = (uint8_t)(len >> 24);
}

/* Large set-up frames are refused at their header: nothing is allocated for them. */
static void half_sent_frames(void)
{
	enum { N = 24, BODY = 512 << 10 };
	static uint8_t body[BODY];
	struct timeval tv = { .tv_sec = 2 };
	uint8_t h[16];
	int fds[N], one;
	char got[300] = "";
	struct pair pp;
	long before, after;
	bool up;

	set_knobs(60000, 64);
	up = open_pair(&pp, "tcp://127.0.0.1:0", got, sizeof(got));
	/* Over the 16 KiB set-up limit, well under the 1 MiB of any frame. */
	one = up ? raw_connect(got) : -1;
	hello_hdr(h, 17u << 10);
	if (one >= 0 && send(one, h, sizeof(h), MSG_NOSIGNAL) != (ssize_t)sizeof(h)) {
		close(one);
		one = -1;
	}
	CHECK(one >= 0 && wait_hung_up(&one, 1, 3000) == 1,
	      "bounds_tcp_a_setup_frame_over_16_kib_is_refused_at_its_header");
	if (one >= 0)
		close(one);

	before = rss_kib();
	hello_hdr(h, 1u << 20);
	for (int i = 0; i < N; i++) {
		fds[i] = up ? raw_connect(got) : -1;
		if (fds[i] < 0)
			continue;
		setsockopt(fds[i], SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		/* Refused at the header, the body's send fails; before, it was read in. */
		if (send(fds[i], h, sizeof(h), MSG_NOSIGNAL) == (ssize_t)sizeof(h))
			(void)!send(fds[i], body, sizeof(body), MSG_NOSIGNAL);
	}
	usleep(300000);
	after = rss_kib();
	CHECK(up && before > 0 && after - before < 4096,
	      "bounds_tcp_%d_half_sent_1_mib_hellos_hold_no_memory (rss +%ld KiB)", N,
	      after - before);
	CHECK(up && wait_hung_up(fds, N, 3000) == N,
	      "bounds_tcp_half_sent_1_mib_hellos_are_closed");
	close_all(fds, N);
	CHECK(up && legit_connects(&pp, got),
	      "bounds_tcp_a_real_pipe_connects_after_half_sent_frames");
	pair_close(&pp);
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
 * The descriptor limit that leaves exactly @spare numbers free below it
 * (new descriptors take the lowest free number; those open above the
 * limit stay open).
 */
static rlim_t limit_with_spare(int spare)
{
	static bool open_fd[4096];
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int lim = 0;

	memset(open_fd, 0, sizeof(open_fd));
	while (d && (e = readdir(d)))
		if (atoi(e->d_name) > 0 && atoi(e->d_name) < 4096)
			open_fd[atoi(e->d_name)] = true;
	if (d)
		closedir(d);
	open_fd[0] = true;
	for (; lim < 4096 && spare; lim++)
		spare -= !open_fd[lim];
	return (rlim_t)lim;
}

static atomic_int starved_accepts;
static atomic_int starved_status;

static void starved_on_accept(void *arg, tpu_status st, struct tpu_pipe *p)
{
	(void)arg;
	atomic_store(&starved_status, st);
	atomic_fetch_add(&starved_accepts, 1);
	tpu_pipe_close(p);
}

/*
 * The child: a shm pipe listener with six descriptors to spare.  It says
 * when it listens, waits for a byte (the flood is on), sends the CPU time
 * it used over the next second, then accepts one pipe and sends its status
 * (-1: none came within 8 s).
 */
static void starved_listener(const char *url, int to_parent, int from_parent)
{
	struct tpu_context_options o = { .channels = "basic", .transports = "shm" };
	struct tpu_context *ctx = NULL;
	struct tpu_listener *l = NULL;
	struct rlimit rl;
	long t0, used;
	int st = -1;
	char b;

	if (tpu_context_create(&o, &ctx) || tpu_listener_create(ctx, &url, 1, &l) ||
	    getrlimit(RLIMIT_NOFILE, &rl))
		_exit(2);
	/* Only the soft limit: valgrind refuses to change the hard one. */
	rl.rlim_cur = limit_with_spare(6);
	if (setrlimit(RLIMIT_NOFILE, &rl) || write(to_parent, "r", 1) != 1 ||
	    read(from_parent, &b, 1) != 1)
		_exit(3);
	t0 = cpu_us();
	sleep(1);
	used = cpu_us() - t0;
	if (write(to_parent, &used, sizeof(used)) != sizeof(used) ||
	    tpu_listener_accept(l, starved_on_accept, NULL))
		_exit(4);
	for (int i = 0; i < 400 && !atomic_load(&starved_accepts); i++)
		usleep(20000);
	if (atomic_load(&starved_accepts))
		st = atomic_load(&starved_status);
	if (write(to_parent, &st, sizeof(st)) != sizeof(st))
		_exit(5);
	tpu_listener_close(l);
	tpu_context_destroy(ctx);
	_exit(0);
}

/* A shm listener out of descriptors backs off, and accepts again once they are back. */
static void shm_out_of_descriptors(void)
{
	enum { N = 40 };
	struct tpu_context_options o = { .channels = "basic", .transports = "shm" };
	struct tpu_context *ctx = NULL;
	struct tpu_pipe *p = NULL;
	struct sigaction old_pipe;
	int up_p[2], down_p[2], fds[N], status, st = -1;
	long used = -1;
	char url[64], b;
	pid_t pid;
	bool ok;

	for (int i = 0; i < N; i++)
		fds[i] = -1;
	snprintf(url, sizeof(url), "shm://bounds-starved-%d", (int)getpid());
	set_knobs(60000, 64);
	/* A child that died early must fail a check, not kill this process. */
	sigaction(SIGPIPE, &(struct sigaction){ .sa_handler = SIG_IGN }, &old_pipe);
	if (pipe2(up_p, O_CLOEXEC) || pipe2(down_p, O_CLOEXEC)) {
		CHECK(false, "bounds_shm_pipes_for_the_starved_listener");
		sigaction(SIGPIPE, &old_pipe, NULL);
		clear_knobs();
		return;
	}
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		close(up_p[0]);
		close(down_p[1]);
		alarm(60);
		starved_listener(url, up_p[1], down_p[0]);
	}
	close(up_p[1]);
	close(down_p[0]);
	ok = pid > 0 && read(up_p[0], &b, 1) == 1;
	for (int i = 0; ok && i < N; i++)
		fds[i] = raw_connect(url);
	/* Time for the listener to take what it can and run out. */
	usleep(300000);
	ok = ok && write(down_p[1], "f", 1) == 1 &&
	     read(up_p[0], &used, sizeof(used)) == sizeof(used);
	CHECK(ok && used >= 0 && used < 100000,
	      "bounds_shm_listener_out_of_descriptors_does_not_spin (%ld us of cpu in 1 s)", used);
	close_all(fds, N);
	ok = ok && !tpu_context_create(&o, &ctx) && !tpu_pipe_connect(ctx, url, &p) &&
	     read(up_p[0], &st, sizeof(st)) == sizeof(st);
	CHECK(ok && st == 0, "bounds_shm_listener_accepts_again_once_descriptors_are_back (%s)",
	      st == -1 ? "no pipe accepted" : tpu_status_name(st));
	tpu_pipe_close(p);
	tpu_context_destroy(ctx);
	if (pid > 0) {
		kill(pid, SIGKILL);
		if (waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status))
			tap_diag("starved listener: exit %d", WEXITSTATUS(status));
	}
	close(up_p[0]);
	close(down_p[1]);
	sigaction(SIGPIPE, &old_pipe, NULL);
	clear_knobs();
}

void test_bounds_pipe(void)
{
	char shm[64];

	silent_connections("tcp://127.0.0.1:0", "tcp");
	snprintf(shm, sizeof(shm), "shm://bounds-silent-%d", (int)getpid());
	silent_connections(shm, "shm");
	setup_cap("tcp://127.0.0.1:0", "tcp");
	snprintf(shm, sizeof(shm), "shm://bounds-cap-%d", (int)getpid());
	setup_cap(shm, "shm");
	half_sent_frames();
	shm_out_of_descriptors();
}
