// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The job secret (Documentation/security.rst): SHA-256 and HMAC-SHA256
 * against the standards' test vectors, the secret's sources, and the
 * challenge and response on pipes (tcp, a transport switch to shm, mtcp
 * lanes) and on the store, attacked by peers without the secret, with a
 * wrong one and by raw sockets speaking the wire, each followed by a
 * legitimate peer that must still be served.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base.h"
#include "boot.h"
#include "boot_harness.h"
#include "pipe_harness.h"
#include "pipe_wire.h"
#include "tap.h"

/* ---- SHA-256 (FIPS 180-4 examples) and HMAC-SHA256 (RFC 4231) ---- */

static void hex(const uint8_t *d, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", d[i]);
}

static bool sha_is(const void *msg, size_t len, const char *want)
{
	struct tpu__sha256 s;
	uint8_t d[TPU__SHA256_LEN];
	char h[2 * TPU__SHA256_LEN + 1];

	tpu__sha256_init(&s);
	tpu__sha256_update(&s, msg, len);
	tpu__sha256_final(&s, d);
	hex(d, sizeof(d), h);
	if (strcmp(h, want))
		tap_diag("sha256: got %s, want %s", h, want);
	return !strcmp(h, want);
}

static bool hmac_is(const void *key, size_t klen, const void *msg, size_t len, const char *want)
{
	struct tpu__hmac m;
	uint8_t d[TPU__SHA256_LEN];
	char h[2 * TPU__SHA256_LEN + 1];

	tpu__hmac_init(&m, key, klen);
	tpu__hmac_update(&m, msg, len);
	tpu__hmac_final(&m, d);
	hex(d, sizeof(d), h);
	if (strcmp(h, want))
		tap_diag("hmac: got %s, want %s", h, want);
	return !strcmp(h, want);
}

static void vectors(void)
{
	static const char two_blocks[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	static uint8_t million[1000000], key[131];
	struct tpu__sha256 s;
	uint8_t d[TPU__SHA256_LEN];
	char h[2 * TPU__SHA256_LEN + 1];

	CHECK(sha_is("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
	      "sha256_abc");
	CHECK(sha_is("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
	      "sha256_empty");
	CHECK(sha_is(two_blocks, strlen(two_blocks),
		     "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"),
	      "sha256_448_bits");
	memset(million, 'a', sizeof(million));
	CHECK(sha_is(million, sizeof(million),
		     "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"),
	      "sha256_million_a");
	/* The same million fed in uneven pieces: the buffering across blocks. */
	tpu__sha256_init(&s);
	for (size_t off = 0, step = 1; off < sizeof(million); off += step, step = step * 3 % 97 + 1)
		tpu__sha256_update(&s, million + off,
				   step < sizeof(million) - off ? step : sizeof(million) - off);
	tpu__sha256_final(&s, d);
	hex(d, sizeof(d), h);
	CHECK(!strcmp(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"),
	      "sha256_million_a_in_pieces");

	memset(key, 0x0b, 20);
	CHECK(hmac_is(key, 20, "Hi There", 8,
		      "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
	      "hmac_sha256_rfc4231_case_1");
	CHECK(hmac_is("Jefe", 4, "what do ya want for nothing?", 28,
		      "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
	      "hmac_sha256_rfc4231_case_2");
	memset(key, 0xaa, sizeof(key));
	CHECK(hmac_is(key, 131, "Test Using Larger Than Block-Size Key - Hash Key First", 54,
		      "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"),
	      "hmac_sha256_rfc4231_case_6_long_key");
	CHECK(tpu__ct_equal("abcd", "abcd", 4) && !tpu__ct_equal("abcd", "abce", 4) &&
	      !tpu__ct_equal("xbcd", "abcd", 4), "ct_equal");
}

/* ---- where the secret comes from ---- */

static void secret_sources(void)
{
	char path[] = "/tmp/tpu-secret-XXXXXX";
	struct tpu_context *ctx = NULL;
	int fd = mkstemp(path);

	CHECK(fd >= 0 && write(fd, "s3cret\n", 7) == 7, "secret_file_written");
	close(fd);
	setenv("TPU_JOB_SECRET_FILE", path, 1);
	chmod(path, 0640);
	CHECK_STATUS(tpu_context_create(NULL, &ctx), -EACCES, "secret_file_group_readable_refused");
	CHECK(!ctx, "no_context_on_a_refused_secret_file");
	chmod(path, 0604);
	CHECK_STATUS(tpu_context_create(NULL, &ctx), -EACCES, "secret_file_world_readable_refused");
	chmod(path, 0600);
	CHECK_STATUS(tpu_context_create(NULL, &ctx), 0, "secret_file_owner_only_taken");
	tpu_context_destroy(ctx);
	ctx = NULL;
	setenv("TPU_JOB_SECRET", "other", 1);
	CHECK_STATUS(tpu_context_create(NULL, &ctx), -EINVAL, "secret_both_variables_refused");
	unsetenv("TPU_JOB_SECRET_FILE");
	unsetenv("TPU_JOB_SECRET");
	unlink(path);
	setenv("TPU_JOB_SECRET_FILE", path, 1);
	CHECK_STATUS(tpu_context_create(NULL, &ctx), -ENOENT, "secret_file_missing_refused");
	unsetenv("TPU_JOB_SECRET_FILE");

	CHECK_STATUS(tpu_context_create(NULL, &ctx), 0, "context_without_secret");
	CHECK_STATUS(tpu_context_set_secret(ctx, NULL, 3), -EINVAL, "set_secret_null_with_len");
	CHECK_STATUS(tpu_context_set_secret(ctx, path, TPU__SECRET_MAX + 1), -EINVAL,
		     "set_secret_too_long");
	CHECK_STATUS(tpu_context_set_secret(ctx, "k", 1), 0, "set_secret");
	CHECK_STATUS(tpu_context_set_secret(ctx, NULL, 0), 0, "set_secret_clears");
	CHECK_STATUS(tpu_context_set_secret(NULL, "k", 1), -EINVAL, "set_secret_null_context");
	tpu_context_destroy(ctx);
}

/* ---- pipes ---- */

static struct tpu_context *ctx_with(const char *secret, const char *transports,
				    const char *channels)
{
	struct tpu_context_options o = { .transports = transports, .channels = channels };
	struct tpu_context *ctx = NULL;

	if (tpu_context_create(&o, &ctx))
		return NULL;
	if (secret && tpu_context_set_secret(ctx, secret, strlen(secret))) {
		tpu_context_destroy(ctx);
		return NULL;
	}
	return ctx;
}

/* A listener that accepts for ever, keeping what it accepts (closed at the end). */
struct acceptor {
	struct tpu_listener *l;
	pthread_mutex_t lock;
	int accepted;
	char xport[8], chan[8];
	struct tpu_pipe *pipes[16];
};

static void acceptor_cb(void *arg, tpu_status st, struct tpu_pipe *p)
{
	struct acceptor *a = arg;

	if (st)
		return;
	pthread_mutex_lock(&a->lock);
	if (a->accepted < 16)
		a->pipes[a->accepted] = p;
	else
		tpu_pipe_close(p);
	a->accepted++;
	snprintf(a->xport, sizeof(a->xport), "%s", tpu_pipe_transport(p));
	snprintf(a->chan, sizeof(a->chan), "%s", tpu_pipe_channel(p, TPU_DEVICE_CPU,
								 TPU_DEVICE_CPU));
	pthread_mutex_unlock(&a->lock);
	tpu_listener_accept(a->l, acceptor_cb, a);
}

static int accepted(struct acceptor *a)
{
	int n;

	pthread_mutex_lock(&a->lock);
	n = a->accepted;
	pthread_mutex_unlock(&a->lock);
	return n;
}

/* Wait up to 5 s for the count to reach @n. */
static bool accepted_reaches(struct acceptor *a, int n)
{
	for (int i = 0; i < 500 && accepted(a) < n; i++)
		usleep(10000);
	return accepted(a) >= n;
}

/* Connect from @ctx to @url and write one small message: its status. */
static tpu_status try_pipe(struct tpu_context *ctx, const char *url, char *xport, size_t size)
{
	char byte = 'x';
	struct tpu_payload pl = { .data = &byte, .len = 1 };
	struct tpu_message m = { .payloads = &pl, .npayloads = 1 };
	struct tpu_pipe *p;
	struct rec r;
	struct tag t = { &r, 0 };
	tpu_status st;

	rec_init(&r);
	st = tpu_pipe_connect(ctx, url, &p);
	if (st)
		return st;
	st = tpu_pipe_write(p, &m, on_write, &t);
	if (!st)
		st = rec_wait(&r, 1) ? r.st[0] : -ETIMEDOUT;
	if (xport)
		snprintf(xport, size, "%s", st ? "" : tpu_pipe_transport(p));
	tpu_pipe_close(p);
	return st;
}

static int tcp_port_of(const char *url)
{
	const char *c = strrchr(url, ':');

	return c ? atoi(c + 1) : -1;
}

static int raw_connect(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Read what comes within 5 s until EOF: its length (-1 if it never closes). */
static ssize_t read_until_eof(int fd, uint8_t *buf, size_t size)
{
	size_t got = 0;

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t n;

		if (poll(&p, 1, 5000) != 1)
			return -1;
		n = recv(fd, buf + got, size - got, 0);
		if (n <= 0)
			return n < 0 && errno != ECONNRESET ? -1 : (ssize_t)got;
		got += (size_t)n;
		if (got == size)
			return -1;
	}
}

/* A raw client's frame: header and @len bytes of body (zeros but for @body). */
static size_t raw_frame(uint8_t *out, uint16_t type, const void *body, uint32_t len)
{
	tpu__wire_hdr_encode(out, type, len);
	memset(out + TPU__WIRE_HDR_LEN, 0, len);
	if (body)
		memcpy(out + TPU__WIRE_HDR_LEN, body, len);
	return TPU__WIRE_HDR_LEN + len;
}

static void pipes(void)
{
	struct tpu_context *lc = ctx_with("alpha", "tcp,shm", NULL);
	struct tpu_context *good = ctx_with("alpha", "tcp,shm", NULL);
	struct tpu_context *wrong = ctx_with("beta", "tcp,shm", NULL);
	struct tpu_context *none = ctx_with(NULL, "tcp,shm", NULL);
	struct tpu_context *open_l = ctx_with(NULL, "tcp", NULL);
	struct tpu_context *ml = ctx_with("alpha", "tcp", "mtcp"), *mc = ctx_with("alpha", "tcp", "mtcp");
	struct acceptor a = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct acceptor o = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct acceptor m = { .lock = PTHREAD_MUTEX_INITIALIZER };
	char shm[64], tcp_url[300], open_url[300], m_url[300], xport[8] = "";
	const char *urls[2] = { "tcp://127.0.0.1:0", shm };
	const char *one = "tcp://127.0.0.1:0";
	uint8_t buf[4096], body[68];
	struct tpu__wire_hdr h;
	int n, fd;
	ssize_t got;

	snprintf(shm, sizeof(shm), "shm://auth-test-%d", (int)getpid());
	if (!lc || !good || !wrong || !none || !open_l || !ml || !mc ||
	    tpu_listener_create(lc, urls, 2, &a.l) ||
	    tpu_listener_url(a.l, "tcp", tcp_url, sizeof(tcp_url)) ||
	    tpu_listener_accept(a.l, acceptor_cb, &a) ||
	    tpu_listener_create(open_l, &one, 1, &o.l) ||
	    tpu_listener_url(o.l, "tcp", open_url, sizeof(open_url)) ||
	    tpu_listener_accept(o.l, acceptor_cb, &o) || tpu_listener_create(ml, &one, 1, &m.l) ||
	    tpu_listener_url(m.l, "tcp", m_url, sizeof(m_url)) ||
	    tpu_listener_accept(m.l, acceptor_cb, &m)) {
		CHECK(false, "pipe_auth_setup");
		goto out;
	}
	CHECK_STATUS(try_pipe(good, tcp_url, xport, sizeof(xport)), 0, "pipe_same_secret_served");
	CHECK(accepted_reaches(&a, 1) && !strcmp(xport, "shm") && !strcmp(a.xport, "shm"),
	      "pipe_same_secret_switches_to_shm_and_joins (%s)", xport);
	CHECK_STATUS(try_pipe(mc, m_url, NULL, 0), 0, "pipe_same_secret_mtcp_lanes_served");
	CHECK(accepted_reaches(&m, 1) && !strcmp(m.chan, "mtcp"), "pipe_mtcp_lanes_joined (%s)",
	      m.chan);

	n = accepted(&a);
	CHECK_STATUS(try_pipe(wrong, tcp_url, NULL, 0), -EACCES, "pipe_wrong_secret_refused");
	CHECK_STATUS(try_pipe(none, tcp_url, NULL, 0), -EACCES, "pipe_without_secret_refused");
	CHECK_STATUS(try_pipe(wrong, m_url, NULL, 0), -EACCES, "pipe_wrong_secret_refused_mtcp");
	CHECK_STATUS(try_pipe(good, open_url, NULL, 0), -EACCES,
		     "pipe_with_secret_to_a_listener_without_fails_clearly");
	CHECK(accepted(&o) == 0, "listener_without_secret_accepted_nothing");

	/* Raw sockets: a HELLO with no proof is answered with a refusal and closed. */
	fd = raw_connect(tcp_port_of(tcp_url));
	CHECK(fd >= 0, "raw_connect");
	got = -1;
	if (fd >= 0) {
		size_t len = raw_frame(buf, TPU__WIRE_HELLO, NULL, 8);

		got = send(fd, buf, len, MSG_NOSIGNAL) == (ssize_t)len ?
		      read_until_eof(fd, buf, sizeof(buf)) : -1;
		close(fd);
	}
	CHECK(got >= TPU__WIRE_HDR_LEN && !tpu__wire_hdr_decode(buf, &h) &&
	      h.type == TPU__WIRE_WELCOME, "raw_hello_without_proof_refused_and_closed");
	/* A challenge, then a made-up proof: closed, never accepted. */
	fd = raw_connect(tcp_port_of(tcp_url));
	got = -1;
	if (fd >= 0) {
		size_t len;

		memset(body, 0, sizeof(body));
		body[0] = 1;
		len = raw_frame(buf, TPU__WIRE_AUTH, body, sizeof(body));
		got = send(fd, buf, len, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
		/* AUTH 2 back: 16 + 68 bytes. */
		for (size_t have = 0; !got && have < len;) {
			ssize_t r = recv(fd, buf + have, len - have, 0);

			if (r <= 0)
				got = -1;
			else
				have += (size_t)r;
		}
		body[0] = 3;
		memset(body + 36, 0x5a, 32);
		len = raw_frame(buf, TPU__WIRE_AUTH, body, sizeof(body));
		if (!got && send(fd, buf, len, MSG_NOSIGNAL) == (ssize_t)len)
			got = read_until_eof(fd, buf, sizeof(buf));
		else
			got = -1;
		close(fd);
	}
	CHECK(got >= 0, "raw_forged_proof_closed");
	/* Anything but AUTH first: closed without an answer worth having. */
	fd = raw_connect(tcp_port_of(tcp_url));
	got = -1;
	if (fd >= 0) {
		size_t len = raw_frame(buf, TPU__WIRE_MSG, NULL, 64);

		got = send(fd, buf, len, MSG_NOSIGNAL) == (ssize_t)len ?
		      read_until_eof(fd, buf, sizeof(buf)) : -1;
		close(fd);
	}
	CHECK(got == 0, "raw_message_before_proof_closed");
	CHECK(accepted(&a) == n, "nothing_unauthenticated_accepted");

	CHECK_STATUS(try_pipe(good, tcp_url, NULL, 0), 0, "pipe_legitimate_peer_served_after");
	CHECK(accepted_reaches(&a, n + 1), "pipe_legitimate_peer_accepted_after");
out:
	for (int i = 0; i < 16; i++) {
		tpu_pipe_close(a.pipes[i]);
		tpu_pipe_close(o.pipes[i]);
		tpu_pipe_close(m.pipes[i]);
	}
	tpu_listener_close(a.l);
	tpu_listener_close(o.l);
	tpu_listener_close(m.l);
	tpu_context_destroy(mc);
	tpu_context_destroy(ml);
	tpu_context_destroy(open_l);
	tpu_context_destroy(none);
	tpu_context_destroy(wrong);
	tpu_context_destroy(good);
	tpu_context_destroy(lc);
}

/* ---- the store ---- */

static void store(void)
{
	struct tpu__secret alpha, beta;
	struct store_server *s = NULL, *open_s = NULL;
	struct store_client *c = NULL;
	char why[256] = "";
	uint8_t hdr[STORE_REQ_HDR], buf[64];
	struct store_req r = { .op = STORE_GET, .key_len = 1 };
	size_t len = 0;
	uint16_t port;
	int fd;
	ssize_t got = -1;

	tpu__secret_from_bytes(&alpha, "alpha", 5);
	tpu__secret_from_bytes(&beta, "beta", 4);
	if (tpu__store_server_start_auth("127.0.0.1", 0, &alpha, &s, why, sizeof(why)) ||
	    tpu__store_server_start("127.0.0.1", 0, &open_s, why, sizeof(why))) {
		CHECK(false, "store_auth_setup: %s", why);
		goto out;
	}
	port = tpu__store_server_port(s);
	CHECK_STATUS(tpu__store_client_connect("127.0.0.1", port, 5000, &c, why, sizeof(why)), 0,
		     "store_connect");
	CHECK_STATUS(tpu__store_client_auth(c, &alpha, why, sizeof(why)), 0, "store_auth_same_secret");
	CHECK_STATUS(tpu__store_set(c, "k", "v", 1), 0, "store_authenticated_set");
	tpu__store_client_close(c);
	c = NULL;

	/* No proof: the first request is refused and the client dropped. */
	CHECK_STATUS(tpu__store_client_connect("127.0.0.1", port, 5000, &c, why, sizeof(why)), 0,
		     "store_connect_unauthenticated");
	CHECK_STATUS(tpu__store_set(c, "k", "evil", 4), -EACCES, "store_without_secret_refused");
	CHECK(tpu__store_get(c, "k", buf, sizeof(buf), &len, 0) != 0,
	      "store_without_secret_dropped");
	tpu__store_client_close(c);
	c = NULL;
	CHECK_STATUS(tpu__store_client_connect("127.0.0.1", port, 5000, &c, why, sizeof(why)), 0,
		     "store_connect_wrong");
	CHECK_STATUS(tpu__store_client_auth(c, &beta, why, sizeof(why)), -EACCES,
		     "store_wrong_secret_refused");
	tpu__store_client_close(c);
	c = NULL;
	/* A raw GET: answered -EACCES, then closed. */
	fd = raw_connect(port);
	if (fd >= 0) {
		tpu__store_wire_req_put(&r, hdr);
		if (send(fd, hdr, sizeof(hdr), MSG_NOSIGNAL) == sizeof(hdr) &&
		    send(fd, "k", 1, MSG_NOSIGNAL) == 1)
			got = read_until_eof(fd, buf, sizeof(buf));
		close(fd);
	}
	CHECK(got == STORE_REPLY_HDR && (int32_t)(buf[0] | buf[1] << 8 | buf[2] << 16 |
						 (uint32_t)buf[3] << 24) == -EACCES,
	      "store_raw_get_refused_and_closed");
	/* A store without a secret refuses a client that has one, clearly. */
	CHECK_STATUS(tpu__store_client_connect("127.0.0.1", tpu__store_server_port(open_s), 5000, &c,
					       why, sizeof(why)), 0, "store_connect_open");
	CHECK_STATUS(tpu__store_client_auth(c, &alpha, why, sizeof(why)), -EACCES,
		     "store_with_secret_to_a_store_without_fails_clearly");
	tpu__store_client_close(c);
	c = NULL;

	CHECK_STATUS(tpu__store_client_connect("127.0.0.1", port, 5000, &c, why, sizeof(why)), 0,
		     "store_connect_after");
	CHECK_STATUS(tpu__store_client_auth(c, &alpha, why, sizeof(why)), 0, "store_auth_after");
	len = 0;
	CHECK(tpu__store_get(c, "k", buf, sizeof(buf), &len, 0) == 0 && len == 1 && buf[0] == 'v',
	      "store_legitimate_client_served_after_and_value_untouched");
out:
	tpu__store_client_close(c);
	tpu__store_server_stop(s);
	tpu__store_server_stop(open_s);
}

/* ---- a world: its ranks share the secret, or one is refused ---- */

struct world_job {
	uint16_t port;
	const char *odd;	/* rank 2's secret ("": none) */
};

static int world_rank(int rank, int n, void *arg)
{
	const struct world_job *j = arg;
	struct tpu_context_options co = { .transports = "tcp" };
	struct tpu_world_options wo = { .timeout_ms = j->odd ? 3000 : 20000 };
	const char *secret = rank == 2 && j->odd ? j->odd : "job-secret";
	struct tpu_context *ctx = NULL;
	struct tpu_world *w = NULL;
	char v[32];
	tpu_status st;

	boot_env_clear();
	snprintf(v, sizeof(v), "127.0.0.1:%u", j->port);
	setenv("TPU_STORE_ADDR", v, 1);
	snprintf(v, sizeof(v), "%d", rank);
	setenv("RANK", v, 1);
	setenv("LOCAL_RANK", v, 1);
	snprintf(v, sizeof(v), "%d", n);
	setenv("WORLD_SIZE", v, 1);
	setenv("LOCAL_WORLD_SIZE", v, 1);
	if (*secret)
		setenv("TPU_JOB_SECRET", secret, 1);
	else
		unsetenv("TPU_JOB_SECRET");
	R_CHECK(tpu_context_create(&co, &ctx) == 0);
	st = tpu_world_create(ctx, &wo, &w);
	if (!j->odd) {
		R_CHECK(st == 0 && tpu_world_barrier(w) == 0);
	} else if (rank == 2) {
		/* The store refuses it: clearly, not after a timeout. */
		R_CHECK(st == -EACCES);
	} else {
		R_CHECK(st != 0);
	}
	tpu_world_destroy(w);
	tpu_context_destroy(ctx);
	unsetenv("TPU_JOB_SECRET");
	return 0;
}

static void world(void)
{
	struct world_job same = { .port = boot_free_port() };
	struct world_job wrong = { .port = boot_free_port(), .odd = "not-the-job's" };
	struct world_job none = { .port = boot_free_port(), .odd = "" };

	CHECK(same.port > 1 && boot_run_ranks(3, world_rank, &same, 60),
	      "world_of_3_with_one_secret_forms");
	CHECK(wrong.port > 1 && boot_run_ranks(3, world_rank, &wrong, 60),
	      "world_rank_with_another_secret_refused");
	CHECK(none.port > 1 && boot_run_ranks(3, world_rank, &none, 60),
	      "world_rank_without_the_secret_refused");
	boot_env_clear();
}

void test_auth(void)
{
	vectors();
	secret_sources();
	pipes();
	store();
	world();
}
