// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Forming a world (tpu_world_create) from the launcher variables, set in
 * fork()ed ranks as torchrun or mpirun would set them: every rank sends a
 * tensor to every other through the world's rendezvous and passes a
 * message around the ring of world pipes, every byte checked.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "boot_harness.h"
#include "tap.h"
#include "tpu_user.h"
#include "world.h"

#define SECOND		1000000000ull
#define TENSOR_LEN	(64u << 10)

struct job {
	const char *convention;		/* "torchrun" or "openmpi" */
	const char *transport;		/* "tcp" or "shm" */
	bool hosts;			/* no LOCAL_*: the launcher does not say where ranks are */
	bool salted;			/* hosts, and host identities made to differ */
	uint16_t port;			/* the store's */
	char jobid[16];			/* openmpi: gives the derived port */
};

static void launcher_env(const struct job *j, int rank, int n)
{
	char r[16], s[16], p[16];

	boot_env_clear();
	snprintf(r, sizeof(r), "%d", rank);
	snprintf(s, sizeof(s), "%d", n);
	if (!strcmp(j->convention, "torchrun")) {
		/* torchrun's MASTER_PORT is its own store's; ours is the next. */
		snprintf(p, sizeof(p), "%u", j->port - 1u);
		setenv("RANK", r, 1);
		setenv("WORLD_SIZE", s, 1);
		if (!j->hosts) {
			setenv("LOCAL_RANK", r, 1);
			setenv("LOCAL_WORLD_SIZE", s, 1);
		}
		setenv("MASTER_ADDR", "127.0.0.1", 1);
		setenv("MASTER_PORT", p, 1);
	} else {
		setenv("OMPI_COMM_WORLD_RANK", r, 1);
		setenv("OMPI_COMM_WORLD_SIZE", s, 1);
		setenv("OMPI_COMM_WORLD_LOCAL_RANK", r, 1);
		setenv("OMPI_COMM_WORLD_LOCAL_SIZE", s, 1);
		setenv("OMPI_MCA_ess_base_jobid", j->jobid, 1);
	}
}

static size_t key_of(char *buf, int src, int dst)
{
	char s[96], d[96];
	struct tpu_key k = { .src_incarnation = 1 };
	size_t len = 0;

	snprintf(s, sizeof(s), "/job:worker/replica:0/task:%d/device:CPU:0", src);
	snprintf(d, sizeof(d), "/job:worker/replica:0/task:%d/device:CPU:0", dst);
	k.src_device = tpu_str(s);
	k.dst_device = tpu_str(d);
	k.edge_name = tpu_str("w");
	tpu_key_build(&k, buf, 256, &len);
	return len;
}

static void fill(uint8_t *p, size_t n, int src, int dst)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 31 + (size_t)src * 7 + (size_t)dst * 3);
}

static bool filled(const uint8_t *p, size_t n, int src, int dst)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (uint8_t)(i * 31 + (size_t)src * 7 + (size_t)dst * 3))
			return false;
	return true;
}

/* A pipe callback's result, waited for by the rank's thread. */
struct done {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool set;
	tpu_status st;
	struct tpu_message *msg;
};

static void done_post(struct done *d, tpu_status st, struct tpu_message *m)
{
	pthread_mutex_lock(&d->lock);
	d->set = true;
	d->st = st;
	d->msg = m;
	pthread_cond_signal(&d->cond);
	pthread_mutex_unlock(&d->lock);
}

static void on_msg(void *arg, tpu_status st, struct tpu_message *m)
{
	done_post(arg, st, m);
}

static tpu_status done_wait(struct done *d, struct tpu_message **m)
{
	tpu_status st;

	pthread_mutex_lock(&d->lock);
	while (!d->set)
		pthread_cond_wait(&d->cond, &d->lock);
	d->set = false;
	st = d->st;
	if (m)
		*m = d->msg;
	pthread_mutex_unlock(&d->lock);
	return st;
}

/* The ring: write to the next rank, read from the previous one. */
static int ring(struct tpu_world *w, int me, int n)
{
	static uint8_t out[TENSOR_LEN], in[TENSOR_LEN];
	struct done wd = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 0, NULL };
	struct done rd = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 0, NULL };
	struct tpu_message_tensor t = { .data = out, .len = sizeof(out) };
	struct tpu_message msg = { .metadata = "ring", .metadata_len = 4, .tensors = &t,
				   .ntensors = 1 };
	struct tpu_pipe *next = NULL, *prev = NULL, *again = NULL;
	struct tpu_message *desc = NULL;

	fill(out, sizeof(out), me, (me + 1) % n);
	R_CHECK(tpu_world_pipe(w, (me + 1) % n, &next) == 0 && next);
	R_CHECK(tpu_world_pipe(w, (me + n - 1) % n, &prev) == 0 && prev);
	R_CHECK(tpu_world_pipe(w, (me + 1) % n, &again) == 0 && again == next);
	R_CHECK(tpu_pipe_write(next, &msg, on_msg, &wd) == 0);
	R_CHECK(tpu_pipe_read_descriptor(prev, on_msg, &rd) == 0);
	R_CHECK(done_wait(&rd, &desc) == 0 && desc);
	R_CHECK(desc->metadata_len == 4 && !memcmp(desc->metadata, "ring", 4));
	R_CHECK(desc->ntensors == 1 && desc->tensors[0].len == sizeof(in));
	desc->tensors[0].data = in;
	R_CHECK(tpu_pipe_read(prev, desc, on_msg, &rd) == 0);
	R_CHECK(done_wait(&rd, NULL) == 0);
	R_CHECK(filled(in, sizeof(in), (me + n - 1) % n, me));
	R_CHECK(done_wait(&wd, NULL) == 0);
	return 0;
}

/* The world's "reaches rank" lines, kept by the log handler of a rank's process. */
static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;
static char seen[4096];

static void keep_line(void *arg, const char *line)
{
	(void)arg;
	pthread_mutex_lock(&seen_lock);
	if (strstr(line, "reaches rank") && strlen(seen) + strlen(line) + 2 < sizeof(seen)) {
		strcat(seen, line);
		strcat(seen, "\n");
	}
	pthread_mutex_unlock(&seen_lock);
}

static bool log_says(const char *what)
{
	bool yes;

	pthread_mutex_lock(&seen_lock);
	yes = strstr(seen, what) != NULL;
	if (!yes)
		fprintf(stderr, "# log lacks \"%s\": %s\n", what, seen);
	pthread_mutex_unlock(&seen_lock);
	return yes;
}

/* The transport rank @me should reach rank @r's URLs on. */
static const char *want_transport(const struct job *j, int me, int r)
{
	if (!j->hosts)
		return j->transport;
	/* Its own URL is the one for other hosts; ranks of this host use shm. */
	return r == me || j->salted ? "tcp" : "shm";
}

/* Blobs through rank 0's store: rank 0's of the most a store value holds. */
static int blobs(struct tpu_world *w, int me, int n)
{
	static uint8_t mine[TPU_WORLD_BLOB_MAX], all[3][TPU_WORLD_BLOB_MAX];
	size_t lens[3], len = me ? (size_t)me * 1000 : TPU_WORLD_BLOB_MAX;

	R_CHECK(n <= 3);
	fill(mine, len, me, 9);
	R_CHECK(tpu_world_exchange_blobs(w, mine, len, all, TPU_WORLD_BLOB_MAX, lens) == 0);
	for (int r = 0; r < n; r++)
		R_CHECK(lens[r] == (r ? (size_t)r * 1000 : TPU_WORLD_BLOB_MAX) &&
			filled(all[r], lens[r], r, 9));
	return 0;
}

static int world_rank(int me, int n, void *arg)
{
	const struct job *j = arg;
	/* Without LOCAL_* the world itself must choose: the context allows all. */
	struct tpu_context_options co = { .transports = j->hosts ? NULL : j->transport };
	struct tpu_world_options wo = { .timeout_ms = 20000 };
	static uint8_t out[8][TENSOR_LEN], in[TENSOR_LEN];
	const struct tpu_world_info *info;
	struct tpu_context *ctx = NULL;
	struct tpu_world *w = NULL;
	struct tpu_rendezvous *rdv;
	const char *tr, *ch;
	char key[256], task[96];
	size_t klen, len = 0;
	int rc;

	launcher_env(j, me, n);
	if (j->salted)
		snprintf(tpu__world_host_salt, sizeof(tpu__world_host_salt), "host%d", me);
	if (j->hosts)
		tpu_log_set_handler(keep_line, NULL, true);
	R_CHECK(tpu_context_create(&co, &ctx) == 0);
	R_CHECK(tpu_world_create(ctx, &wo, &w) == 0);
	info = tpu_world_get_info(w);
	R_CHECK(info && info->rank == me && info->size == n &&
		info->local_size == (j->hosts ? -1 : n) &&
		!strcmp(info->convention, j->convention) && info->store_port == j->port);
	for (int r = 0; r < n; r++)
		R_CHECK(!strncmp(tpu_world_url(w, r, "rdv"), want_transport(j, me, r), 3) &&
			!strncmp(tpu_world_url(w, r, "pipe"), want_transport(j, me, r), 3));
	rdv = tpu_world_rendezvous(w);
	R_CHECK(rdv && tpu_rendezvous_impl(rdv) == TPU_RDV_REMOTE);
	/* For other hosts: tcp on the address that reaches the store. */
	if (j->hosts)
		R_CHECK(!strncmp(tpu_world_url(w, me, "rdv"), "tcp://127.0.0.1:", 16));
	if (j->salted)
		R_CHECK(!strncmp(tpu_world_url(w, (me + 1) % n, "rdv"), "tcp://127.0.0.1:", 16));
	if (j->hosts)
		R_CHECK(log_says(j->salted ? "another host" : "same host (boot id"));
	for (int r = 0; r < n; r++) {
		struct tpu_tensor t = { .data = out[r], .len = TENSOR_LEN };

		if (r == me)
			continue;
		fill(out[r], TENSOR_LEN, me, r);
		klen = key_of(key, me, r);
		R_CHECK(tpu_rendezvous_send(rdv, key, klen, &t, 0, NULL, NULL) == 0);
	}
	for (int r = 0; r < n; r++) {
		struct tpu_tensor t = { .data = in, .len = TENSOR_LEN };

		if (r == me)
			continue;
		klen = key_of(key, r, me);
		R_CHECK(tpu_rendezvous_recv_wait(rdv, key, klen, &t, 20 * SECOND, &len) == 0);
		R_CHECK(len == TENSOR_LEN && filled(in, len, r, me));
		/* Ranks of one host move tensors over shm, whatever the launcher said. */
		snprintf(task, sizeof(task), "/job:worker/replica:0/task:%d", r);
		if (j->hosts && !j->salted)
			R_CHECK(tpu_rendezvous_peer_path(rdv, task, &tr, &ch) == 0 &&
				!strcmp(tr, "shm"));
	}
	R_CHECK(blobs(w, me, n) == 0);
	rc = ring(w, me, n);
	R_CHECK(tpu_world_barrier(w) == 0);
	tpu_world_destroy(w);
	tpu_context_destroy(ctx);
	tpu_log_set_handler(NULL, NULL, false);
	return rc;
}

/* An Open MPI job id whose derived store port is free on this host now. */
static bool pick_jobid(struct job *j)
{
	struct tpu_world_info info;

	for (int id = (int)getpid(); id < (int)getpid() + 50; id++) {
		boot_env_clear();
		setenv("OMPI_COMM_WORLD_RANK", "0", 1);
		setenv("OMPI_COMM_WORLD_SIZE", "1", 1);
		setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
		setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "1", 1);
		snprintf(j->jobid, sizeof(j->jobid), "%d", id);
		setenv("OMPI_MCA_ess_base_jobid", j->jobid, 1);
		if (tpu_world_info_from_env(&info))
			return false;
		boot_env_clear();
		if (boot_port_is_free(info.store_port)) {
			j->port = info.store_port;
			return true;
		}
	}
	return false;
}

static void worlds_of_three(void)
{
	static const char *const conventions[] = { "torchrun", "openmpi" };
	static const char *const transports[] = { "tcp", "shm" };

	for (int c = 0; c < 2; c++)
		for (int t = 0; t < 2; t++) {
			struct job j = { .convention = conventions[c], .transport = transports[t] };
			bool ok = true;

			if (c == 0)
				j.port = boot_free_port();
			else
				ok = pick_jobid(&j);
			CHECK(ok && j.port > 1 && boot_run_ranks(3, world_rank, &j, 120),
			      "world_of_3_%s_ranks_over_%s_exchange_tensors_and_ring_pipes",
			      j.convention, j.transport);
		}
	{
		struct job j = { .convention = "torchrun", .transport = "tcp", .hosts = true,
				 .port = boot_free_port() };

		CHECK(j.port > 1 && boot_run_ranks(3, world_rank, &j, 120),
		      "world_of_3_on_one_host_without_local_sizes_finds_it_and_talks_over_shm");
		j.salted = true;
		j.port = boot_free_port();
		CHECK(j.port > 1 && boot_run_ranks(3, world_rank, &j, 120),
		      "world_of_3_on_different_hosts_dials_tcp_on_the_store_route_and_exchanges");
	}
}

/*
 * Pipes to the world's listener that do not say a rank of this world first
 * (garbage, a rank out of range, the world's own rank) are closed by it.
 */
static void bad_hellos_are_closed(struct tpu_context *ctx, struct tpu_world *w)
{
	static const char *const hellos[] = { "hello", "tpu-world-hello 1", "tpu-world-hello 0",
					      "tpu-world-hello 00", "tpu-world-hello " };

	for (size_t i = 0; i < sizeof(hellos) / sizeof(hellos[0]); i++) {
		struct done wd = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 0, NULL };
		struct done rd = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 0, NULL };
		struct tpu_message msg = { .metadata = hellos[i], .metadata_len = strlen(hellos[i]) };
		struct tpu_pipe *p = NULL;
		bool written = false, ok;

		ok = tpu_pipe_connect(ctx, tpu_world_url(w, 0, "pipe"), &p) == 0 &&
		     (written = tpu_pipe_write(p, &msg, on_msg, &wd) == 0) &&
		     tpu_pipe_read_descriptor(p, on_msg, &rd) == 0;
		/* The world closes its end: our read fails instead of hanging. */
		ok = ok && done_wait(&rd, NULL) != 0;
		if (written)
			done_wait(&wd, NULL);
		tpu_pipe_close(p);
		CHECK(ok, "world_closes_a_pipe_whose_first_message_is_\"%s\"", hellos[i]);
	}
}

static void world_of_one_and_bad_calls(void)
{
	struct tpu_world_info info = { .rank = 0, .size = 1, .local_rank = -1, .local_size = -1,
				       .store_host = "127.0.0.1", .store_port = boot_free_port() };
	struct tpu_world_options wo = { .info = &info, .job = "trainer", .timeout_ms = 5000 };
	struct tpu_context *ctx = NULL;
	struct tpu_world *w = NULL;
	struct tpu_pipe *p = NULL;
	char url[256];

	boot_env_clear();
	CHECK(tpu_context_create(NULL, &ctx) == 0, "world_context_created");
	CHECK(tpu_world_create(ctx, NULL, &w) == -ENOENT && !w,
	      "world_create_without_launcher_variables_is_enoent");
	CHECK(tpu_world_create(NULL, &wo, &w) == -EINVAL && tpu_world_create(ctx, &wo, NULL) ==
	      -EINVAL, "world_create_with_null_is_einval");
	{
		struct tpu_world_options bad = wo;

		bad.job = "9lives";
		CHECK(tpu_world_create(ctx, &bad, &w) == -EINVAL, "world_create_with_bad_job_name_is_einval");
	}
	{
		struct tpu_world_info bad = info;
		struct tpu_world_options o = wo;

		bad.rank = 1;
		o.info = &bad;
		CHECK(tpu_world_create(ctx, &o, &w) == -EINVAL, "world_create_with_rank_not_below_size_is_einval");
	}
	CHECK(tpu_world_create(ctx, &wo, &w) == 0 && w, "world_of_one_rank_forms");
	CHECK(tpu_rendezvous_url(tpu_world_rendezvous(w), NULL, url, sizeof(url)) == 0 &&
	      !strcmp(url, tpu_world_url(w, 0, "rdv")), "world_publishes_its_rendezvous_url");
	CHECK(tpu_world_pipe(w, 0, &p) == -EINVAL && tpu_world_pipe(w, 1, &p) == -EINVAL &&
	      tpu_world_pipe(w, -1, &p) == -EINVAL && !p, "world_pipe_to_self_or_out_of_range_is_einval");
	CHECK(!tpu_world_url(w, 1, "rdv") && !tpu_world_url(w, 0, "x") &&
	      !tpu_world_get_info(NULL) && !tpu_world_rendezvous(NULL),
	      "world_accessors_refuse_bad_arguments");
	CHECK(tpu_world_barrier(w) == 0 && tpu_world_barrier(w) == 0, "world_barrier_of_one_returns");
	bad_hellos_are_closed(ctx, w);
	tpu_world_destroy(w);
	tpu_world_destroy(NULL);
	tpu_context_destroy(ctx);
}

/* Rank 1 of 2 whose rank 0 never comes fails within its bound. */
static void world_without_rank0_times_out(void)
{
	struct tpu_world_info info = { .rank = 1, .size = 2, .local_rank = 1, .local_size = 2,
				       .store_host = "127.0.0.1", .store_port = boot_free_port() };
	struct tpu_world_options wo = { .info = &info, .timeout_ms = 800 };
	struct tpu_context *ctx = NULL;
	struct tpu_world *w = NULL;
	uint64_t t0;
	tpu_status st = -1;

	if (tpu_context_create(NULL, &ctx) == 0) {
		t0 = boot_now_ms();
		st = tpu_world_create(ctx, &wo, &w);
		t0 = boot_now_ms() - t0;
		tpu_context_destroy(ctx);
		CHECK(st == -ETIMEDOUT && !w && t0 >= 790 && t0 < 5000,
		      "world_create_without_rank0_fails_etimedout_within_its_bound (%llu ms)",
		      (unsigned long long)t0);
		return;
	}
	CHECK(false, "world_create_without_rank0_fails_etimedout_within_its_bound");
}

/* ---- membership: a rank started twice, sizes that differ ---- */

/* This process's stderr into a fresh file (its path in @path); the old one returned. */
static int stderr_to_file(char *path, size_t size)
{
	int saved, fd;

	snprintf(path, size, "/tmp/tpu-world-test-XXXXXX");
	fd = mkstemp(path);
	if (fd < 0)
		return -1;
	fflush(stderr);
	saved = dup(2);
	dup2(fd, 2);
	close(fd);
	return saved;
}

/* Put stderr back; true if the file said both @a and @b (then it is removed). */
static bool stderr_said(int saved, const char *path, const char *a, const char *b)
{
	char buf[8192];
	ssize_t n = -1;
	int fd;

	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
	}
	unlink(path);
	if (n < 0)
		return false;
	buf[n] = '\0';
	if (!strstr(buf, a) || !strstr(buf, b)) {
		fprintf(stderr, "# stderr was: %s\n", buf);
		return false;
	}
	return true;
}

struct member_case {
	uint16_t port;
	int rank[3], size[3];		/* per process */
	int sync[2];			/* a process whose create failed writes here */
	tpu_status want;
	const char *said[2];
};

/*
 * Every process must fail with @want, promptly, and say why on stderr: the
 * one that found the conflict in tpu_world_create(), the others there or
 * in their first barrier (made once the finder has failed, so that the
 * store knows the world is broken by then).
 */
static int member_proc(int p, int n, void *arg)
{
	struct member_case *c = arg;
	struct tpu_world_info info = { .rank = c->rank[p], .size = c->size[p], .local_rank = -1,
				       .local_size = -1, .store_host = "127.0.0.1",
				       .store_port = c->port };
	struct tpu_world_options wo = { .info = &info, .timeout_ms = 15000 };
	struct pollfd pf = { .fd = c->sync[0], .events = POLLIN };
	char path[64], b[4] = { 0 };
	struct tpu_context *ctx = NULL;
	struct tpu_world *w = NULL;
	uint64_t t0;
	tpu_status st;
	int saved;

	boot_env_clear();
	saved = stderr_to_file(path, sizeof(path));
	R_CHECK(saved >= 0);
	R_CHECK(tpu_context_create(NULL, &ctx) == 0);
	t0 = boot_now_ms();
	st = tpu_world_create(ctx, &wo, &w);
	if (st) {
		R_CHECK(write(c->sync[1], b, (size_t)n - 1) == n - 1);
	} else {
		/* Old code: nobody fails, and the barrier below passes. */
		if (poll(&pf, 1, 8000) == 1)
			R_CHECK(read(c->sync[0], b, 1) == 1);
		st = tpu_world_barrier(w);
		tpu_world_destroy(w);
	}
	t0 = boot_now_ms() - t0;
	tpu_context_destroy(ctx);
	R_CHECK(stderr_said(saved, path, c->said[0], c->said[1]));
	if (st != c->want || t0 >= 12000)
		fprintf(stderr, "# process %d (rank %d of %d): %s after %llu ms\n", p, c->rank[p],
			c->size[p], tpu_status_name(st), (unsigned long long)t0);
	R_CHECK(st == c->want);
	R_CHECK(t0 < 12000);
	return 0;
}

static bool run_members(struct member_case *c, int nproc)
{
	bool ok;

	c->port = boot_free_port();
	if (!c->port || pipe(c->sync))
		return false;
	ok = boot_run_ranks(nproc, member_proc, c, 60);
	close(c->sync[0]);
	close(c->sync[1]);
	return ok;
}

static void membership_conflicts(void)
{
	struct member_case dup = { .rank = { 0, 1, 1 }, .size = { 2, 2, 2 }, .want = -EEXIST,
				   .said = { "rank 1 joined twice", "rank 1" } };
	struct member_case sizes = { .rank = { 0, 1 }, .size = { 2, 3 }, .want = -EINVAL,
				     .said = { "disagree on the world's size", "rank" } };

	struct member_case dup0 = { .rank = { 0, 1, 0 }, .size = { 2, 2, 2 }, .want = -EEXIST,
				    .said = { "rank 0 joined twice", "rank 0" } };

	CHECK(run_members(&dup, 3),
	      "world_with_rank_1_started_twice_fails_eexist_on_every_process_naming_the_rank");
	CHECK(run_members(&dup0, 3),
	      "world_with_rank_0_started_twice_fails_eexist_on_every_process_naming_the_rank");
	CHECK(run_members(&sizes, 2),
	      "world_whose_ranks_disagree_on_its_size_fails_einval_on_both_saying_so");
}

/* ---- bounds: a store that accepts and never answers ---- */

/* Listens on loopback and never accepts: connects succeed, nothing answers. */
static int silent_listener(uint16_t *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 16) ||
	    getsockname(fd, (struct sockaddr *)&a, &len)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	*port = ntohs(a.sin_port);
	return fd;
}

static void world_with_silent_store_fails_within_its_timeout(void)
{
	struct tpu_world_info info = { .rank = 1, .size = 2, .local_rank = -1, .local_size = -1,
				       .store_host = "127.0.0.1" };
	struct tpu_world_options wo = { .info = &info, .timeout_ms = 1000 };
	struct tpu_context *ctx = NULL;
	struct tpu_world *w = NULL;
	tpu_status st = -1;
	uint64_t t0 = 0;
	int fd = silent_listener(&info.store_port);

	if (fd >= 0 && tpu_context_create(NULL, &ctx) == 0) {
		t0 = boot_now_ms();
		st = tpu_world_create(ctx, &wo, &w);
		t0 = boot_now_ms() - t0;
		tpu_context_destroy(ctx);
	}
	if (fd >= 0)
		close(fd);
	CHECK(st == -ETIMEDOUT && !w && t0 < 2000,
	      "world_create_with_a_store_that_never_answers_fails_within_its_1s_timeout (%s, %llu ms)",
	      tpu_status_name(st), (unsigned long long)t0);
}

/* ---- listen URLs with a fixed port ---- */

static void fixed_listen_ports(void)
{
	struct tpu_world_info info = { .rank = 0, .size = 1, .local_rank = -1, .local_size = -1,
				       .store_host = "127.0.0.1", .store_port = boot_free_port() };
	uint16_t busy_port = 0, free_port = boot_free_port();
	char busy[64], fixed[64], tail[16];
	const char *urls[1] = { fixed };
	struct tpu_world_options wo = { .info = &info, .listen_urls = urls, .nlisten = 1,
					.timeout_ms = 5000 };
	struct tpu_remote_options ro = { .task = "/job:worker/replica:0/task:0", .listen_urls = urls,
					 .nlisten = 1 };
	struct tpu_context *ctx = NULL;
	struct tpu_rendezvous *rdv = NULL;
	struct tpu_world *w = NULL;
	tpu_status st;
	int fd = silent_listener(&busy_port);

	if (fd < 0 || tpu_context_create(NULL, &ctx)) {
		CHECK(false, "fixed_port_tests_set_up");
		if (fd >= 0)
			close(fd);
		return;
	}
	/* A free fixed port: the rendezvous takes it, the pipe listener any other. */
	snprintf(fixed, sizeof(fixed), "tcp://127.0.0.1:%u", free_port);
	snprintf(tail, sizeof(tail), ":%u", free_port);
	st = tpu_world_create(ctx, &wo, &w);
	CHECK(st == 0 && !strcmp(tpu_world_url(w, 0, "rdv"), fixed) &&
	      !strstr(tpu_world_url(w, 0, "pipe"), tail),
	      "world_with_a_free_fixed_listen_port_gives_it_to_the_rendezvous (%s)",
	      tpu_status_name(st));
	tpu_world_destroy(w);
	w = NULL;
	/* A port some other socket holds: -EADDRINUSE, from the world and the rendezvous alike. */
	snprintf(busy, sizeof(busy), "tcp://127.0.0.1:%u", busy_port);
	urls[0] = busy;
	info.store_port = boot_free_port();
	st = tpu_world_create(ctx, &wo, &w);
	CHECK(st == -EADDRINUSE && !w, "world_with_a_listen_port_in_use_is_eaddrinuse (%s)",
	      tpu_status_name(st));
	st = tpu_rendezvous_create_remote(ctx, &ro, &rdv);
	CHECK(st == -EADDRINUSE && !rdv, "remote_rendezvous_with_a_listen_port_in_use_is_eaddrinuse (%s)",
	      tpu_status_name(st));
	tpu_rendezvous_destroy(rdv);
	close(fd);
	tpu_context_destroy(ctx);
}

/* ---- the remote rendezvous's task list ---- */

static void remote_task_list_is_checked(void)
{
	static const char *const lu[] = { "tcp://127.0.0.1:0" };
	struct tpu_remote_task twice[] = {
		{ "/job:worker/replica:0/task:1", "tcp://127.0.0.1:7001" },
		{ "/job:worker/replica:0/task:1", "tcp://127.0.0.1:7002" },
	};
	struct tpu_remote_task gopher[] = { { "/job:worker/replica:0/task:1", "gopher://127.0.0.1:70" } };
	struct tpu_remote_task bare[] = { { "/job:worker/replica:0/task:1", "tcp://" } };
	struct tpu_remote_options ro = { .task = "/job:worker/replica:0/task:0", .listen_urls = lu,
					 .nlisten = 1 };
	struct tpu_context *ctx = NULL;
	struct tpu_rendezvous *rdv = NULL;
	tpu_status st;

	if (tpu_context_create(NULL, &ctx)) {
		CHECK(false, "remote_task_list_context_created");
		return;
	}
	ro.peers = twice;
	ro.npeers = 2;
	st = tpu_rendezvous_create_remote(ctx, &ro, &rdv);
	CHECK(st == -EINVAL && !rdv, "remote_create_with_a_task_listed_twice_is_einval_as_documented (%s)",
	      tpu_status_name(st));
	ro.peers = gopher;
	ro.npeers = 1;
	st = tpu_rendezvous_create_remote(ctx, &ro, &rdv);
	CHECK(st == -EINVAL && !rdv, "remote_create_with_an_unknown_url_scheme_is_einval (%s)",
	      tpu_status_name(st));
	ro.peers = bare;
	st = tpu_rendezvous_create_remote(ctx, &ro, &rdv);
	CHECK(st == -EINVAL && !rdv, "remote_create_with_a_url_without_address_is_einval (%s)",
	      tpu_status_name(st));
	ro.peers = twice;
	ro.npeers = 1;
	st = tpu_rendezvous_create_remote(ctx, &ro, &rdv);
	CHECK(st == 0 && tpu_rendezvous_add_peer(rdv, twice[0].task, twice[0].url) == 0 &&
	      tpu_rendezvous_add_peer(rdv, twice[1].task, twice[1].url) == -EEXIST &&
	      tpu_rendezvous_add_peer(rdv, "/job:worker/replica:0/task:2", "gopher://x:1") == -EINVAL,
	      "remote_add_peer_keeps_eexist_for_a_changed_url_and_refuses_unknown_schemes");
	tpu_rendezvous_destroy(rdv);
	tpu_context_destroy(ctx);
}

void test_world(void)
{
	world_of_one_and_bad_calls();
	world_without_rank0_times_out();
	world_with_silent_store_fails_within_its_timeout();
	fixed_listen_ports();
	remote_task_list_is_checked();
	membership_conflicts();
	worlds_of_three();
	boot_env_clear();
}
