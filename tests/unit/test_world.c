// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Forming a world (tpu_world_create) from the launcher variables, set in
 * fork()ed ranks as torchrun or mpirun would set them: every rank sends a
 * tensor to every other through the world's rendezvous and passes a
 * message around the ring of world pipes, every byte checked.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "boot_harness.h"
#include "tap.h"
#include "tpu_user.h"

#define SECOND		1000000000ull
#define TENSOR_LEN	(64u << 10)

struct job {
	const char *convention;		/* "torchrun" or "openmpi" */
	const char *transport;		/* "tcp" or "shm" */
	bool hosts;			/* no LOCAL_*: as if the ranks spanned hosts */
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

static int world_rank(int me, int n, void *arg)
{
	const struct job *j = arg;
	/* Across hosts the world itself must choose tcp: the context allows all. */
	struct tpu_context_options co = { .transports = j->hosts ? NULL : j->transport };
	struct tpu_world_options wo = { .timeout_ms = 20000 };
	static uint8_t out[8][TENSOR_LEN], in[TENSOR_LEN];
	const struct tpu_world_info *info;
	struct tpu_context *ctx = NULL;
	struct tpu_world *w = NULL;
	struct tpu_rendezvous *rdv;
	char key[256];
	size_t klen, len = 0;
	int rc;

	launcher_env(j, me, n);
	R_CHECK(tpu_context_create(&co, &ctx) == 0);
	R_CHECK(tpu_world_create(ctx, &wo, &w) == 0);
	info = tpu_world_get_info(w);
	R_CHECK(info && info->rank == me && info->size == n &&
		info->local_size == (j->hosts ? -1 : n) &&
		!strcmp(info->convention, j->convention) && info->store_port == j->port);
	for (int r = 0; r < n; r++)
		R_CHECK(!strncmp(tpu_world_url(w, r, "rdv"), j->transport, 3) &&
			!strncmp(tpu_world_url(w, r, "pipe"), j->transport, 3));
	rdv = tpu_world_rendezvous(w);
	R_CHECK(rdv && tpu_rendezvous_impl(rdv) == TPU_RDV_REMOTE);
	/* Across hosts: tcp on the address that reaches the store, no shm. */
	if (j->hosts)
		R_CHECK(!strncmp(tpu_world_url(w, me, "rdv"), "tcp://127.0.0.1:", 16) &&
			tpu_rendezvous_url(rdv, "shm", key, sizeof(key)) != 0);
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
	}
	rc = ring(w, me, n);
	R_CHECK(tpu_world_barrier(w) == 0);
	tpu_world_destroy(w);
	tpu_context_destroy(ctx);
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
		      "world_of_3_without_local_sizes_listens_on_the_store_route_and_exchanges");
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

void test_world(void)
{
	world_of_one_and_bad_calls();
	world_without_rank0_times_out();
	worlds_of_three();
	boot_env_clear();
}
