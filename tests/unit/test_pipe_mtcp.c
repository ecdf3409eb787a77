// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The mtcp channel: how tensors are cut into stripes, negotiation (only
 * beside a tcp pipe, TPU_MTCP_LANES checked), the lanes really being extra
 * connections, tensors of awkward sizes arriving byte for byte both ways,
 * many messages in order across lanes, and a writer dying mid-tensor.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pipe_harness.h"
#include "pipe_internal.h"
#include "tap.h"
#include "tpu_user.h"

#define TCP_URL	"tcp://127.0.0.1:0"

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		p[i] = (uint8_t)(seed >> 16);
	}
}

static int count_sockets(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d))) {
		struct stat sb;

		if (e->d_name[0] != '.' && !fstatat(dirfd(d), e->d_name, &sb, 0) &&
		    S_ISSOCK(sb.st_mode))
			n++;
	}
	closedir(d);
	return n;
}

/* Stripes cover the tensor exactly, in order, and are as even as can be. */
static void stripes(void)
{
	static const uint64_t lens[] = {
		1, 32769, PIPE_MTCP_CHUNK_MIN - 1, PIPE_MTCP_CHUNK_MIN, 2 * PIPE_MTCP_CHUNK_MIN + 1,
		(1u << 20) + 3, (16u << 20) + 7, TPU_PIPE_MAX_LEN,
	};
	bool ok = true, even = true;

	for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
		for (unsigned int lanes = 1; lanes <= TPU__WIRE_LANES_MAX; lanes++) {
			unsigned int k = tpu__mtcp_stripes(lens[li], lanes);
			uint64_t next = 0, lo = UINT64_MAX, hi = 0;

			ok &= k >= 1 && k <= lanes;
			/* No stripe smaller than the minimum unless the tensor is. */
			ok &= k == 1 || lens[li] / k >= PIPE_MTCP_CHUNK_MIN;
			for (unsigned int i = 0; i < k; i++) {
				uint64_t off, n;

				tpu__mtcp_stripe(lens[li], k, i, &off, &n);
				ok &= off == next && n > 0;
				next = off + n;
				lo = n < lo ? n : lo;
				hi = n > hi ? n : hi;
			}
			ok &= next == lens[li];
			even &= hi - lo <= 1;
		}
	}
	CHECK(ok, "mtcp_stripes_cover_every_tensor_exactly_in_order");
	CHECK(even, "mtcp_stripes_differ_by_at_most_one_byte");
	CHECK(tpu__mtcp_stripes(64u << 20, 4) == 4 && tpu__mtcp_stripes(300u << 10, 4) == 1 &&
	      tpu__mtcp_stripes(512u << 10, 4) == 2 && tpu__mtcp_stripes(64u << 20, 16) == 16,
	      "mtcp_stripe_count_follows_size_and_lanes");
}

static void lanes_env(void)
{
	static const char *const bad[] = { "0", "17", "x", "-1", "4x", " 4" };
	struct tpu_context *ctx = NULL;
	struct tpu_listener *l = NULL;
	struct tpu_pipe *p = NULL;
	const char *url = TCP_URL;
	int refused = 0;

	if (tpu_context_create(NULL, &ctx)) {
		CHECK(false, "mtcp_lanes_env_context");
		return;
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		setenv("TPU_MTCP_LANES", bad[i], 1);
		refused += tpu_listener_create(ctx, &url, 1, &l) == -EINVAL &&
			   tpu_pipe_connect(ctx, "tcp://127.0.0.1:1", &p) == -EINVAL;
	}
	unsetenv("TPU_MTCP_LANES");
	CHECK(refused == (int)(sizeof(bad) / sizeof(bad[0])),
	      "mtcp_bad_TPU_MTCP_LANES_is_einval_for_listener_and_connect (%d of %zu)", refused,
	      sizeof(bad) / sizeof(bad[0]));
	tpu_context_destroy(ctx);
}

/* The channel each end reports once set up (the connector may still be at it). */
static bool channels_are(struct pair *pp, const char *want)
{
	for (int i = 0; i < WAIT_S * 1000 && !tpu_pipe_channel(pp->client, TPU_DEVICE_CPU,
							       TPU_DEVICE_CPU)[0]; i++)
		usleep(1000);
	return !strcmp(tpu_pipe_channel(pp->client, TPU_DEVICE_CPU, TPU_DEVICE_CPU), want) &&
	       !strcmp(tpu_pipe_channel(pp->server, TPU_DEVICE_CPU, TPU_DEVICE_CPU), want);
}

static void negotiation(void)
{
	struct pair pp;
	char shm[64];
	int before = count_sockets(), during;
	bool up;

	setenv("TPU_MTCP_LANES", "16", 1);
	up = pair_open(&pp, TCP_URL, "mtcp");
	during = count_sockets();
	CHECK(up && channels_are(&pp, "mtcp") && !strcmp(tpu_pipe_transport(pp.client), "tcp"),
	      "mtcp_chosen_over_tcp_when_both_allow_it (%s)",
	      up ? tpu_pipe_channel(pp.client, TPU_DEVICE_CPU, TPU_DEVICE_CPU) : "-");
	/* Both ends live here: the listening socket, 2 for the pipe, 2 per lane. */
	CHECK(up && during - before >= 1 + 2 + 2 * 16,
	      "mtcp_16_lanes_are_16_more_connections_each_side (%d sockets)", during - before);
	pair_close(&pp);
	unsetenv("TPU_MTCP_LANES");

	/* Lanes are tcp connections: a pipe over shm never gets them. */
	snprintf(shm, sizeof(shm), "shm://mtcp-neg-%d", (int)getpid());
	up = pair_open(&pp, shm, "mtcp");
	CHECK(up && channels_are(&pp, "basic"), "mtcp_not_chosen_beside_shm (%s)",
	      up ? tpu_pipe_channel(pp.client, TPU_DEVICE_CPU, TPU_DEVICE_CPU) : "-");
	pair_close(&pp);

	up = pair_open(&pp, TCP_URL, "basic");
	CHECK(up && channels_are(&pp, "basic"), "mtcp_not_chosen_when_not_allowed (%s)",
	      up ? tpu_pipe_channel(pp.client, TPU_DEVICE_CPU, TPU_DEVICE_CPU) : "-");
	pair_close(&pp);
}

/*
 * One message of tensors of the given sizes from @from to @to, checked
 * byte for byte; true if it all arrived.
 */
static bool send_tensors(struct tpu_pipe *from, struct tpu_pipe *to, const size_t *lens,
			 size_t n, uint32_t seed)
{
	struct tpu_message_tensor t[8] = { 0 };
	struct tpu_message m = { .tensors = t, .ntensors = n };
	uint8_t *src[8] = { 0 }, *dst[8] = { 0 };
	struct rec w, r;
	struct tag tw = { &w, 0 }, tr = { &r, 0 };
	bool ok = n <= 8;

	rec_init(&w);
	rec_init(&r);
	for (size_t i = 0; ok && i < n; i++) {
		src[i] = malloc(lens[i]);
		dst[i] = calloc(1, lens[i]);
		ok = src[i] && dst[i];
		if (ok) {
			fill(src[i], lens[i], seed + (uint32_t)i);
			t[i] = (struct tpu_message_tensor){ .data = src[i], .len = lens[i] };
		}
	}
	ok = ok && !tpu_pipe_write(from, &m, on_write, &tw) &&
	     !tpu_pipe_read_descriptor(to, on_desc, &tr) && rec_wait(&r, 1) && !r.st[0] &&
	     r.msg[0]->ntensors == n;
	for (size_t i = 0; ok && i < n; i++) {
		ok = r.msg[0]->tensors[i].len == lens[i];
		r.msg[0]->tensors[i].data = dst[i];
	}
	ok = ok && !tpu_pipe_read(to, r.msg[0], on_write, &tr) && rec_wait(&r, 2) && !r.st[1] &&
	     rec_wait(&w, 1) && !w.st[0];
	for (size_t i = 0; ok && i < n; i++)
		ok = !memcmp(src[i], dst[i], lens[i]);
	for (size_t i = 0; i < n; i++) {
		free(src[i]);
		free(dst[i]);
	}
	return ok;
}

static void data(void)
{
	/* Inline, one stripe, one under two, several uneven, many. */
	static const size_t one[] = { 40u << 10 };
	static const size_t mixed[] = { 100, (300u << 10) + 1, (512u << 10) - 1, (1u << 20) + 3,
					(16u << 20) + 7, 0 };
	struct pair pp;
	bool up, ok;

	setenv("TPU_MTCP_LANES", "3", 1);
	up = pair_open(&pp, TCP_URL, "mtcp");
	unsetenv("TPU_MTCP_LANES");
	CHECK(up && channels_are(&pp, "mtcp"), "mtcp_pair_for_data");
	CHECK(up && send_tensors(pp.client, pp.server, one, 1, 1),
	      "mtcp_one_stripe_tensor_arrives_intact");
	CHECK(up && send_tensors(pp.client, pp.server, mixed, 6, 2),
	      "mtcp_six_tensors_of_awkward_sizes_arrive_intact");
	CHECK(up && send_tensors(pp.server, pp.client, mixed, 6, 3),
	      "mtcp_the_other_way_too");
	/* Lanes taken round-robin stay in step over many messages of 1..4 stripes. */
	ok = up;
	for (int i = 0; ok && i < 24; i++) {
		size_t len[2] = { (size_t)(i % 4 + 1) * PIPE_MTCP_CHUNK_MIN + (size_t)i, 33u << 10 };

		ok = send_tensors(i & 1 ? pp.server : pp.client, i & 1 ? pp.client : pp.server, len,
				  2, 100 + (uint32_t)i);
	}
	CHECK(ok, "mtcp_24_messages_both_ways_keep_lanes_in_step");
	if (up)
		pair_close(&pp);
}

/* A writer killed while a 64 MiB striped tensor is on its way, its descriptor read. */
static void writer_killed(void)
{
	enum { LEN = 64u << 20 };
	struct writer_peer ww;
	struct rec rd;
	struct tag td = { &rd, 0 };
	uint8_t *sink = malloc(LEN);
	bool ok = sink && writer_start(&ww, TCP_URL, "mtcp", LEN, true);

	rec_init(&rd);
	ok = ok && !strcmp(tpu_pipe_channel(ww.pipe, TPU_DEVICE_CPU, TPU_DEVICE_CPU), "mtcp");
	/*
	 * Killed before the read starts, so that however slowly this side
	 * runs (valgrind) the tensor cannot all have crossed: the lanes'
	 * socket buffers hold far less than 64 MiB.
	 */
	writer_kill(&ww);
	if (ok) {
		ww.desc->tensors[0].data = sink;
		ok = !tpu_pipe_read(ww.pipe, ww.desc, on_write, &td);
	}
	ok = ok && rec_wait(&rd, 1);
	CHECK(ok && rd.st[0] != 0, "mtcp_read_fails_when_the_writer_dies_mid_tensor (%s)",
	      tpu_status_name(rd.n > 0 ? rd.st[0] : 0));
	writer_close(&ww);
	free(sink);
}

void test_pipe_mtcp(void)
{
	stripes();
	lanes_env();
	negotiation();
	data();
	writer_killed();
}
