// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Pipes over the rdma transport through the public API (pipe_harness.h).
 * Without an RDMA device (the host): an rdma:// listener is refused with
 * TPU_E_NO_DEVICE and pipes over tcp still work with rdma in the
 * context's transport list.  With TPU_TEST_RDMA_ADDR (tests/vm/rdma-single.sh):
 * messages with payloads and tensors of 1 byte to 9 MiB, every byte
 * compared, with the tensors inline on the transport (basic), on the
 * channel the ends choose and on the rdma channel (RDMA READs); memory
 * freed and reused between transfers; close with a read pending; the
 * writer's process killed mid-pull, then a new pipe; no allocation in
 * warm round trips (test_pipe_alloc.c).
 */
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "channel/channel.h"
#include "pipe_harness.h"
#include "tap.h"
#include "tpu_user.h"

#define MiB	(1u << 20)

static bool have_device(void)
{
	int n = 0;
	struct ibv_device **d = ibv_get_device_list(&n);

	if (d)
		ibv_free_device_list(d);
	return d && n > 0;
}

static int64_t now_ms_(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void pattern(uint8_t *p, size_t n, unsigned int seed)
{
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < n; i++) {
		x = x * 1103515245u + 12345u;
		p[i] = (uint8_t)(x >> 16);
	}
}

static void no_device(void)
{
	const char *url = "rdma://127.0.0.1:0";
	struct tpu_context_options o = { .transports = "tcp,rdma" };
	struct tpu_context *ctx = NULL;
	struct tpu_listener *l = NULL;
	struct pair pp;
	tpu_status st;

	if (tpu_context_create(&o, &ctx)) {
		CHECK(false, "pipe_rdma_context_lists_rdma");
		return;
	}
	st = tpu_listener_create(ctx, &url, 1, &l);
	CHECK_STATUS(st, TPU_E_NO_DEVICE, "pipe_rdma_listener_without_a_device_is_no_device");
	tpu_listener_close(l);
	tpu_context_destroy(ctx);
	CHECK(pair_open(&pp, "tcp://127.0.0.1:0", NULL) &&
	      !strcmp(tpu_pipe_transport(pp.server), "tcp"),
	      "pipe_tcp_still_works_where_rdma_is_not_viable");
	pair_close(&pp);
}

/* N messages, each a payload and a tensor of growing size, read and compared one by one. */
static void messages(const char *url, const char *channels, const char *name)
{
	static const size_t sizes[] = { 1, 100, 4096, 40000, 65536, 300000, 4 * MiB,
					9 * MiB + 3 };
	enum { N = sizeof(sizes) / sizeof(sizes[0]) };
	struct pair pp;
	struct rec w, rd, rr;
	struct tag tw[N], td = { &rd, 0 }, tr = { &rr, 0 };
	struct tpu_payload pl[N];
	struct tpu_message_tensor tt[N];
	struct tpu_message m[N];
	uint8_t *src[N] = { 0 }, *dst_pl = malloc(10 * MiB), *dst_t = malloc(10 * MiB);
	bool up = pair_open(&pp, url, channels), ok = up && dst_pl && dst_t;

	rec_init(&w);
	rec_init(&rd);
	rec_init(&rr);
	/* The accepting end is delivered once negotiated; the connecting end may still be. */
	CHECK(up && !strcmp(tpu_pipe_transport(pp.server), "rdma"),
	      "pipe_rdma_%s_negotiated_on_rdma", name);
	if (up)
		tap_diag("pipe over rdma (%s): channel %s", name,
			 tpu_pipe_channel(pp.server, TPU_DEVICE_CPU, TPU_DEVICE_CPU));
	for (int i = 0; ok && i < N; i++) {
		src[i] = malloc(2 * sizes[i]);
		if (!src[i]) {
			ok = false;
			break;
		}
		pattern(src[i], 2 * sizes[i], (unsigned int)i + 1);
		pl[i] = (struct tpu_payload){ .data = src[i], .len = sizes[i] };
		tt[i] = (struct tpu_message_tensor){ .data = src[i] + sizes[i], .len = sizes[i] };
		m[i] = (struct tpu_message){ .payloads = &pl[i], .npayloads = 1,
					     .tensors = &tt[i], .ntensors = 1 };
		tw[i] = (struct tag){ &w, i };
		ok = !tpu_pipe_write(pp.client, &m[i], on_write, &tw[i]);
	}
	for (int i = 0; ok && i < N; i++) {
		struct tpu_message *d;

		ok = !tpu_pipe_read_descriptor(pp.server, on_desc, &td) && rec_wait(&rd, i + 1) &&
		     !rd.st[i];
		d = ok ? rd.msg[i] : NULL;
		ok = ok && d->npayloads == 1 && d->ntensors == 1 && d->payloads[0].len == sizes[i] &&
		     d->tensors[0].len == sizes[i];
		if (!ok)
			break;
		d->payloads[0].data = dst_pl;
		d->tensors[0].data = dst_t;
		ok = !tpu_pipe_read(pp.server, d, on_write, &tr) && rec_wait(&rr, i + 1) &&
		     !rr.st[i] && !memcmp(dst_pl, src[i], sizes[i]) &&
		     !memcmp(dst_t, src[i] + sizes[i], sizes[i]);
		if (!ok)
			tap_diag("message %d (%zu bytes): %s", i, sizes[i],
				 tpu_status_name(rr.n > i ? rr.st[i] : rd.n > i ? rd.st[i] : 0));
	}
	ok = ok && rec_wait(&w, N);
	for (int i = 0; ok && i < N; i++)
		ok = !w.st[i] && w.order[i] == i;
	CHECK(ok, "pipe_rdma_%s_%d_messages_of_1_byte_to_9_MiB_arrive_byte_exact", name, (int)N);
	if (channels && !strcmp(channels, "rdma"))
		CHECK(up && !strcmp(tpu_pipe_channel(pp.server, TPU_DEVICE_CPU, TPU_DEVICE_CPU),
				    "rdma"),
		      "pipe_rdma_tensors_went_over_the_rdma_channel");
	pair_close(&pp);
	for (int i = 0; i < N; i++)
		free(src[i]);
	free(dst_pl);
	free(dst_t);
}

/*
 * The channel registers per transfer, never by address: a tensor freed
 * and another allocated (most likely at the same address, large mallocs
 * are mappings) with other bytes arrives with its own bytes.
 */
static void reuse_after_free(const char *url)
{
	enum { ROUNDS = 4, LEN = 2 * MiB };
	struct pair pp;
	struct rec w, rd, rr;
	struct tag tw = { &w, 0 }, td = { &rd, 0 }, tr = { &rr, 0 };
	uint8_t *dst = malloc(LEN), *prev = NULL;
	bool ok = pair_open(&pp, url, "rdma") && dst;
	int same_addr = 0;

	rec_init(&w);
	rec_init(&rd);
	rec_init(&rr);
	for (int i = 0; ok && i < ROUNDS; i++) {
		uint8_t *src = malloc(LEN);
		struct tpu_message_tensor t = { .data = src, .len = LEN };
		struct tpu_message m = { .tensors = &t, .ntensors = 1 }, *d;

		if (!src) {
			ok = false;
			break;
		}
		same_addr += src == prev;
		prev = src;
		pattern(src, LEN, 100u + (unsigned int)i);
		ok = !tpu_pipe_write(pp.client, &m, on_write, &tw) &&
		     !tpu_pipe_read_descriptor(pp.server, on_desc, &td) && rec_wait(&rd, i + 1) &&
		     !rd.st[i];
		d = ok ? rd.msg[i] : NULL;
		if (ok)
			d->tensors[0].data = dst;
		ok = ok && !tpu_pipe_read(pp.server, d, on_write, &tr) && rec_wait(&rr, i + 1) &&
		     rec_wait(&w, i + 1) && !rr.st[i] && !w.st[i] && !memcmp(dst, src, LEN);
		free(src);
	}
	CHECK(ok, "pipe_rdma_channel_tensor_freed_and_reallocated_arrives_with_its_own_bytes "
		  "(%d of %d at the same address)", same_addr, ROUNDS - 1);
	pair_close(&pp);
	free(dst);
}

/*
 * A tensor that names its tpu_buffer is registered once per pipe (the
 * whole buffer) and taken from the pipe's cache afterwards, wherever in
 * the buffer it lies; a buffer freed and another allocated (at the same
 * address or not) is registered anew, and its tensors arrive with their
 * own bytes.  The counters are the writer's (the reader registers each
 * destination, uncounted).
 */
static void buffer_cache(const char *url)
{
	enum { ROUNDS = 3, SENDS = 3, LEN = 2 * MiB };
	struct pair pp;
	struct rec w, rd, rr;
	struct tag tw = { &w, 0 }, td = { &rd, 0 }, tr = { &rr, 0 };
	uint8_t *dst = malloc(LEN), *prev = NULL;
	bool ok = pair_open(&pp, url, "rdma") && dst, counted = true;
	int same_addr = 0, n = 0;

	rec_init(&w);
	rec_init(&rd);
	rec_init(&rr);
	for (int i = 0; ok && i < ROUNDS; i++) {
		struct tpu_buffer *b = NULL;
		unsigned long regs = atomic_load(&tpu__chan_rdma_regs);
		unsigned long hits = atomic_load(&tpu__chan_rdma_cache_hits);
		uint8_t *data;

		if (tpu_buffer_alloc(pp.a, LEN, &b)) {
			ok = false;
			break;
		}
		data = tpu_buffer_data(b);
		same_addr += data == prev;
		prev = data;
		pattern(data, LEN, 200u + (unsigned int)i);
		for (int k = 0; ok && k < SENDS; k++, n++) {
			size_t off = (size_t)k * 4096;
			struct tpu_message_tensor t = { .data = data + off, .len = LEN - off,
							.buffer = b };
			struct tpu_message m = { .tensors = &t, .ntensors = 1 }, *d;

			ok = !tpu_pipe_write(pp.client, &m, on_write, &tw) &&
			     !tpu_pipe_read_descriptor(pp.server, on_desc, &td) &&
			     rec_wait(&rd, n + 1) && !rd.st[n];
			d = ok ? rd.msg[n] : NULL;
			if (ok)
				d->tensors[0].data = dst;
			ok = ok && !tpu_pipe_read(pp.server, d, on_write, &tr) &&
			     rec_wait(&rr, n + 1) && rec_wait(&w, n + 1) && !rr.st[n] && !w.st[n] &&
			     !memcmp(dst, data + off, LEN - off);
		}
		if (atomic_load(&tpu__chan_rdma_regs) - regs != 1 ||
		    atomic_load(&tpu__chan_rdma_cache_hits) - hits != SENDS - 1) {
			tap_diag("round %d: %lu registrations, %lu cache hits", i,
				 atomic_load(&tpu__chan_rdma_regs) - regs,
				 atomic_load(&tpu__chan_rdma_cache_hits) - hits);
			counted = false;
		}
		tpu_buffer_free(b);
	}
	CHECK(ok, "pipe_rdma_channel_tensors_in_tpu_buffers_arrive_byte_exact_across_free_and_"
		  "reallocation (%d of %d buffers at the same address)", same_addr, ROUNDS - 1);
	CHECK(ok && counted, "pipe_rdma_channel_registers_each_tpu_buffer_once_per_pipe "
		  "(%d sends of each of %d buffers)", SENDS, ROUNDS);
	pair_close(&pp);
	free(dst);
}

/*
 * The reader closes its pipe while its RDMA READs pull a 32 MiB tensor:
 * its read fails with TPU_E_CLOSED (the queue pair stopped first, so
 * nothing writes into the buffer afterwards), the writer's write fails,
 * nothing hangs.
 */
static void close_mid_pull(const char *url)
{
	const size_t len = 32 * MiB;
	struct pair pp;
	struct rec w, rd, rr;
	struct tag tw = { &w, 0 }, td = { &rd, 0 }, tr = { &rr, 0 };
	uint8_t *src = calloc(1, len), *dst = malloc(len);
	struct tpu_message_tensor t = { .data = src, .len = len };
	struct tpu_message m = { .tensors = &t, .ntensors = 1 };
	bool ok = pair_open(&pp, url, "rdma") && src && dst;

	rec_init(&w);
	rec_init(&rd);
	rec_init(&rr);
	ok = ok && !tpu_pipe_write(pp.client, &m, on_write, &tw) &&
	     !tpu_pipe_read_descriptor(pp.server, on_desc, &td) && rec_wait(&rd, 1) && !rd.st[0];
	if (ok) {
		rd.msg[0]->tensors[0].data = dst;
		ok = !tpu_pipe_read(pp.server, rd.msg[0], on_write, &tr);
	}
	if (ok) {
		struct timespec ts = { 0, 20 * 1000 * 1000 };

		nanosleep(&ts, NULL);
		tpu_pipe_close(pp.server);
		pp.server = NULL;
	}
	ok = ok && rec_wait(&rr, 1) && rec_wait(&w, 1);
	CHECK(ok && (rr.st[0] == TPU_E_CLOSED || !rr.st[0]) && (w.st[0] || !rr.st[0]),
	      "pipe_rdma_reader_closing_mid_pull_ends_both_sides (read %s, write %s)",
	      tpu_status_name(rr.n ? rr.st[0] : 0), tpu_status_name(w.n ? w.st[0] : 0));
	pair_close(&pp);
	free(src);
	free(dst);
}

/*
 * A listener on tcp and rdma, a peer that connects over tcp: the two ends
 * negotiate rdma (both have a device, the listener listens on it) and the
 * pipe moves there, then carries a tensor over the rdma channel.
 */
static void negotiated_from_tcp(const char *host)
{
	struct tpu_context *a = NULL, *b = NULL;
	struct tpu_listener *l = NULL;
	struct tpu_pipe *c = NULL;
	struct rec ra, w, rd, rr;
	struct tag ta = { &ra, 0 }, tw = { &w, 0 }, td = { &rd, 0 }, tr = { &rr, 0 };
	char u0[128], u1[128], got[300];
	const char *urls[2] = { u0, u1 };
	enum { LEN = 3 * MiB };
	uint8_t *src = malloc(LEN), *dst = malloc(LEN);
	struct tpu_message_tensor t = { .data = src, .len = LEN };
	struct tpu_message m = { .tensors = &t, .ntensors = 1 };
	bool ok;

	rec_init(&ra);
	rec_init(&w);
	rec_init(&rd);
	rec_init(&rr);
	snprintf(u0, sizeof(u0), "tcp://%s:0", host);
	snprintf(u1, sizeof(u1), "rdma://%s:0", host);
	ok = src && dst && !tpu_context_create(NULL, &a) && !tpu_context_create(NULL, &b) &&
	     !tpu_listener_create(a, urls, 2, &l) &&
	     !tpu_listener_url(l, "tcp", got, sizeof(got)) &&
	     !tpu_listener_accept(l, on_accept, &ta) && !tpu_pipe_connect(b, got, &c) &&
	     rec_wait(&ra, 1) && !ra.st[0];
	CHECK(ok && !strcmp(tpu_pipe_transport(ra.pipe), "rdma") &&
	      /* Not cma: rdma cannot prove the peer's pid (chan_cma.c). */
	      !strcmp(tpu_pipe_channel(ra.pipe, TPU_DEVICE_CPU, TPU_DEVICE_CPU), "rdma"),
	      "pipe_connected_over_tcp_moves_to_rdma_when_both_have_a_device (%s, %s)",
	      ok ? tpu_pipe_transport(ra.pipe) : "-",
	      ok ? tpu_pipe_channel(ra.pipe, TPU_DEVICE_CPU, TPU_DEVICE_CPU) : "-");
	if (ok) {
		pattern(src, LEN, 7);
		ok = !tpu_pipe_write(c, &m, on_write, &tw) &&
		     !tpu_pipe_read_descriptor(ra.pipe, on_desc, &td) && rec_wait(&rd, 1) &&
		     !rd.st[0];
		if (ok) {
			rd.msg[0]->tensors[0].data = dst;
			ok = !tpu_pipe_read(ra.pipe, rd.msg[0], on_write, &tr) && rec_wait(&rr, 1) &&
			     rec_wait(&w, 1) && !rr.st[0] && !w.st[0] && !memcmp(src, dst, LEN);
		}
	}
	CHECK(ok, "pipe_moved_to_rdma_carries_a_3_MiB_tensor_intact");
	tpu_pipe_close(c);
	if (ra.n && ra.pipe)
		tpu_pipe_close(ra.pipe);
	tpu_listener_close(l);
	tpu_context_destroy(b);
	tpu_context_destroy(a);
	free(src);
	free(dst);
}

#define PEER_LEN	(64 * MiB)

/*
 * The peer process: connect to @url, write one message with a PEER_LEN
 * tensor (rdma channel) and wait to be killed.  A fresh process, not a
 * fork: a child must not use the verbs contexts its parent opened.
 */
int pipe_rdma_writer(const char *url)
{
	struct tpu_context_options o = { .channels = "rdma" };
	struct tpu_context *ctx;
	struct tpu_pipe *p;
	uint8_t *src = calloc(1, PEER_LEN);
	struct tpu_message_tensor t = { .data = src, .len = PEER_LEN };
	struct tpu_message m = { .tensors = &t, .ntensors = 1 };
	struct rec w;
	struct tag tw = { &w, 0 };

	rec_init(&w);
	if (!src || tpu_context_create(&o, &ctx) || tpu_pipe_connect(ctx, url, &p) ||
	    tpu_pipe_write(p, &m, on_write, &tw))
		return 1;
	for (;;)
		pause();
}

/*
 * The writer's process is killed once its descriptor arrived: the read
 * of its tensor fails within the bound of the transport (its rdma_cm ids
 * go with the process, or the READs time out), and this side connects
 * again.
 */
static void peer_killed(const char *url)
{
	extern char **environ;
	struct tpu_context_options o = { .channels = "rdma" };
	struct tpu_context *ctx = NULL;
	struct tpu_listener *l = NULL;
	struct rec ra, rd, rr;
	struct tag ta = { &ra, 0 }, td = { &rd, 0 }, tr = { &rr, 0 };
	char got[300], envv[400], self[4096], *argv[] = { "unit_tests", NULL }, *envp[256];
	ssize_t selflen = readlink("/proc/self/exe", self, sizeof(self) - 1);
	uint8_t *sink = malloc(PEER_LEN);
	pid_t child = -1;
	int64_t t0 = 0;
	size_t n = 0;
	bool ok;

	rec_init(&ra);
	rec_init(&rd);
	rec_init(&rr);
	/* readlink, not exec of /proc/self/exe: under valgrind that is valgrind. */
	if (selflen > 0)
		self[selflen] = '\0';
	ok = sink && selflen > 0 && !tpu_context_create(&o, &ctx) && !tpu_listener_create(ctx, &url, 1, &l) &&
	     !tpu_listener_url(l, NULL, got, sizeof(got)) &&
	     !tpu_listener_accept(l, on_accept, &ta);
	if (ok) {
		snprintf(envv, sizeof(envv), "TPU_TEST_RDMA_WRITER=%s", got);
		for (char **e = environ; *e && n < 254; e++)
			if (strncmp(*e, "UNIT_ONLY=", 10))
				envp[n++] = *e;
		envp[n++] = envv;
		envp[n] = NULL;
		ok = !posix_spawn(&child, self, NULL, NULL, argv, envp);
	}
	ok = ok && rec_wait(&ra, 1) && !ra.st[0] &&
	     !tpu_pipe_read_descriptor(ra.pipe, on_desc, &td) && rec_wait(&rd, 1) && !rd.st[0];
	if (!ok)
		tap_diag("pipe_rdma: the writer process did not connect and describe its tensor");
	/*
	 * Killed before the pull starts, so that however slowly this side
	 * runs (valgrind) the tensor cannot have crossed; the pipe may have
	 * failed before the read is asked for, which is as good.
	 */
	if (child > 0) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
		t0 = now_ms_();
	}
	if (ok) {
		tpu_status st;

		rd.msg[0]->tensors[0].data = sink;
		st = tpu_pipe_read(ra.pipe, rd.msg[0], on_write, &tr);
		ok = st ? (rr.st[0] = st, true) : rec_wait(&rr, 1);
	}
	CHECK(ok && rr.st[0] && now_ms_() - t0 < 5000,
	      "pipe_rdma_read_fails_within_5_s_when_the_writer_process_dies (%s, %lld ms)",
	      tpu_status_name(rr.st[0]), (long long)(now_ms_() - t0));
	if (ra.n && ra.pipe)
		tpu_pipe_close(ra.pipe);
	tpu_listener_close(l);
	tpu_context_destroy(ctx);
	free(sink);
	messages(url, "rdma", "rdma_after_a_peer_died");
}

/* Closing a pipe with a descriptor read pending: TPU_E_CLOSED here, the peer's ends too. */
static void close_pending(const char *url)
{
	struct pair pp;
	struct rec a, b;
	struct tag ta = { &a, 0 }, tb = { &b, 0 };
	bool ok = pair_open(&pp, url, NULL);

	rec_init(&a);
	rec_init(&b);
	ok = ok && !tpu_pipe_read_descriptor(pp.client, on_desc, &ta) &&
	     !tpu_pipe_read_descriptor(pp.server, on_desc, &tb);
	if (ok) {
		tpu_pipe_close(pp.client);
		pp.client = NULL;
	}
	ok = ok && rec_wait(&a, 1) && rec_wait(&b, 1);
	CHECK(ok && a.st[0] == TPU_E_CLOSED && b.st[0] && b.st[0] != TPU_E_CLOSED,
	      "pipe_rdma_close_fails_pending_reads_here_and_at_the_peer (%s, %s)",
	      tpu_status_name(a.n ? a.st[0] : 0), tpu_status_name(b.n ? b.st[0] : 0));
	pair_close(&pp);
}

void test_pipe_rdma(void)
{
	const char *host = getenv("TPU_TEST_RDMA_ADDR");
	char url[128];

	if (!have_device()) {
		no_device();
		return;
	}
	if (!host || !*host) {
		tap_diag("pipe_rdma: a device but no TPU_TEST_RDMA_ADDR: not tested");
		return;
	}
	snprintf(url, sizeof(url), "rdma://%s:0", host);
	messages(url, "basic", "basic");
	messages(url, NULL, "chosen");
	messages(url, "rdma", "rdma");
	negotiated_from_tcp(host);
	reuse_after_free(url);
	buffer_cache(url);
	close_mid_pull(url);
	close_pending(url);
	peer_killed(url);
	pipe_alloc_round_trips("rdma", url);
}
