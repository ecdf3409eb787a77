// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The store's client: one blocking socket, one request at a time.  Ranks
 * start in any order, so connecting is retried (backing off from 10 ms to
 * 250 ms, never spinning) until the caller's bound.  Each reply is awaited
 * with poll() for the request's own wait plus STORE_REPLY_SLACK_MS, so a
 * server that died is noticed instead of waited for.  A caller's bound
 * (tpu__store_client_bound()) caps all of it: a GET asks the server to
 * wait no longer than the bound, and a server that accepts but never
 * answers costs at most the bound plus STORE_BOUND_GRACE_MS.
 */
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "boot.h"

#define STORE_REPLY_SLACK_MS	10000u
/*
 * Past a bound, how long a reply may still take: a GET cut to the bound
 * is answered (-ETIMEDOUT) by the server right at it, and closing the
 * stream first would make every later request on it fail.
 */
#define STORE_BOUND_GRACE_MS	250u

struct store_client {
	int fd;
	uint64_t bound;		/* tpu__store_now_ms() deadline; 0: none */
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t tpu__store_now_ms(void)
{
	return now_ms();
}

void tpu__store_client_bound(struct store_client *c, uint64_t deadline)
{
	c->bound = deadline;
}

static void sleep_ms(uint64_t ms)
{
	struct timespec ts = { .tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/* One connect attempt to @ai, bounded by @ms (a host that drops SYNs). */
static int try_connect(const struct addrinfo *ai, uint64_t ms, tpu_status *err)
{
	int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
			ai->ai_protocol);
	struct pollfd p = { .fd = fd, .events = POLLOUT };
	socklen_t len = sizeof(int);
	int soerr = 0, one = 1;

	if (fd < 0) {
		*err = tpu__errno();
		return -1;
	}
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) && errno != EINPROGRESS) {
		*err = tpu__errno();
		goto fail;
	}
	if (poll(&p, 1, (int)(ms ? ms : 1)) != 1) {
		*err = -ETIMEDOUT;
		goto fail;
	}
	getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
	if (soerr) {
		*err = -soerr;
		goto fail;
	}
	/* Blocking from here: requests wait in poll() with their own bound. */
	if (fcntl(fd, F_SETFL, 0) < 0) {
		*err = tpu__errno();
		goto fail;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
fail:
	close(fd);
	return -1;
}

tpu_status tpu__store_client_connect(const char *host, uint16_t port, uint32_t timeout_ms,
				struct store_client **out, char *why, size_t why_size)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
	uint64_t deadline = now_ms() + timeout_ms, backoff = 10, now;
	tpu_status err = -ETIMEDOUT;
	struct store_client *c;
	char service[8];
	int fd = -1, rc;

	*out = NULL;
	snprintf(service, sizeof(service), "%u", port);
	for (;;) {
		struct addrinfo *res, *ai;

		rc = getaddrinfo(host, service, &hints, &res);
		if (rc && rc != EAI_AGAIN) {
			snprintf(why, why_size, "store address %s does not resolve: %s", host,
				 gai_strerror(rc));
			return -EINVAL;
		}
		for (ai = rc ? NULL : res; ai && fd < 0; ai = ai->ai_next) {
			now = now_ms();
			fd = try_connect(ai, deadline > now ? deadline - now : 1, &err);
		}
		if (!rc)
			freeaddrinfo(res);
		if (fd >= 0)
			break;
		now = now_ms();
		if (now >= deadline) {
			snprintf(why, why_size, "no store at %s:%u after %u ms (rank 0 not up?): %s",
				 host, port, timeout_ms, tpu_strerror(err));
			return -ETIMEDOUT;
		}
		sleep_ms(backoff < deadline - now ? backoff : deadline - now);
		backoff = backoff * 2 > 250 ? 250 : backoff * 2;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return -ENOMEM;
	}
	c->fd = fd;
	*out = c;
	return 0;
}

void tpu__store_client_close(struct store_client *c)
{
	if (!c)
		return;
	close(c->fd);
	free(c);
}

int tpu__store_client_fd(const struct store_client *c)
{
	return c->fd;
}

/* Until @deadline: a server that stopped reading must not hold us either. */
static tpu_status send_all(int fd, const void *p, size_t n, uint64_t deadline)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN) {
			struct pollfd pf = { .fd = fd, .events = POLLOUT };
			uint64_t now = now_ms();

			if (now >= deadline || poll(&pf, 1, (int)(deadline - now)) == 0)
				return -ETIMEDOUT;
			continue;
		}
		if (w <= 0)
			return w < 0 ? tpu__errno() : -EPIPE;
		p = (const uint8_t *)p + w;
		n -= (size_t)w;
	}
	return 0;
}

static tpu_status recv_all(int fd, void *p, size_t n, uint64_t deadline)
{
	while (n) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		uint64_t now = now_ms();
		ssize_t r;

		if (now >= deadline)
			return -ETIMEDOUT;
		r = poll(&pf, 1, (int)(deadline - now));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? tpu__errno() : -ETIMEDOUT;
		r = recv(fd, p, n, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? tpu__errno() : -ECONNRESET;
		p = (uint8_t *)p + r;
		n -= (size_t)r;
	}
	return 0;
}

/*
 * One request and its reply; the reply's value goes to @buf (up to @size;
 * the rest is read and dropped so the stream stays in step).  A broken
 * stream (a lost or garbled reply) fails this and every later call.
 */
static tpu_status request(struct store_client *c, enum store_op op, const char *key,
			  const void *val, size_t val_len, uint32_t arg, void *buf, size_t size,
			  size_t *len)
{
	struct store_req r = { .op = op, .key_len = (uint32_t)strlen(key),
			       .val_len = (uint32_t)val_len, .arg = arg };
	uint8_t hdr[STORE_REQ_HDR > STORE_REPLY_HDR ? STORE_REQ_HDR : STORE_REPLY_HDR];
	uint64_t now = now_ms(), deadline;
	tpu_status st, status;
	uint32_t got;

	if (c->fd < 0)
		return -ENOTCONN;
	if (!r.key_len || strlen(key) > STORE_KEY_MAX || val_len > STORE_VALUE_MAX)
		return -EINVAL;
	if (c->bound) {
		/* Nothing sent yet: the stream stays usable. */
		if (now >= c->bound)
			return -ETIMEDOUT;
		if (op == STORE_GET && r.arg > c->bound - now)
			r.arg = (uint32_t)(c->bound - now);
	}
	deadline = now + r.arg + STORE_REPLY_SLACK_MS;
	if (c->bound && deadline > c->bound + STORE_BOUND_GRACE_MS)
		deadline = c->bound + STORE_BOUND_GRACE_MS;
	tpu__store_wire_req_put(&r, hdr);
	st = send_all(c->fd, hdr, STORE_REQ_HDR, deadline);
	if (!st)
		st = send_all(c->fd, key, r.key_len, deadline);
	if (!st && val_len)
		st = send_all(c->fd, val, val_len, deadline);
	if (!st)
		st = recv_all(c->fd, hdr, STORE_REPLY_HDR, deadline);
	if (!st)
		st = tpu__store_wire_reply_get(hdr, &status, &got);
	if (!st && got) {
		uint8_t *tmp = malloc(got);

		st = tmp ? recv_all(c->fd, tmp, got, deadline) : -ENOMEM;
		if (!st && buf)
			memcpy(buf, tmp, got < size ? got : size);
		free(tmp);
	}
	if (st) {
		/* The stream is out of step now: nothing more can be asked on it. */
		close(c->fd);
		c->fd = -1;
		return st;
	}
	if (len)
		*len = got;
	if (!status && got > size)
		return -EMSGSIZE;
	return status;
}

/* One STORE_AUTH step: send @data as the key, read a reply of up to @size bytes. */
static tpu_status auth_step(struct store_client *c, uint32_t arg, const uint8_t data[STORE_AUTH_LEN],
			    uint8_t *out, size_t size, size_t *len, tpu_status *status)
{
	struct store_req r = { .op = STORE_AUTH, .key_len = STORE_AUTH_LEN, .arg = arg };
	uint8_t hdr[STORE_REQ_HDR];
	uint64_t deadline = now_ms() + STORE_REPLY_SLACK_MS;
	uint32_t got = 0;
	tpu_status st;

	if (c->bound && deadline > c->bound + STORE_BOUND_GRACE_MS)
		deadline = c->bound + STORE_BOUND_GRACE_MS;
	tpu__store_wire_req_put(&r, hdr);
	st = send_all(c->fd, hdr, STORE_REQ_HDR, deadline);
	if (!st)
		st = send_all(c->fd, data, STORE_AUTH_LEN, deadline);
	if (!st)
		st = recv_all(c->fd, hdr, STORE_REPLY_HDR, deadline);
	if (!st)
		st = tpu__store_wire_reply_get(hdr, status, &got);
	if (!st && got != (*status ? 0 : size))
		st = -EPROTO;
	if (!st && got)
		st = recv_all(c->fd, out, got, deadline);
	*len = got;
	return st;
}

tpu_status tpu__store_client_auth(struct store_client *c, const struct tpu__secret *secret,
				  char *why, size_t why_size)
{
	uint8_t nonce_c[TPU__AUTH_NONCE], v[TPU__AUTH_NONCE + TPU__SHA256_LEN];
	uint8_t want[TPU__SHA256_LEN];
	tpu_status st, status = 0;
	size_t len;

	if (!c || c->fd < 0 || !secret || !secret->set)
		return -EINVAL;
	st = tpu__auth_nonce(nonce_c);
	if (!st)
		st = auth_step(c, 1, nonce_c, v, sizeof(v), &len, &status);
	if (!st && !status) {
		tpu__auth_proof(secret, "tensorpipe store v1 server", nonce_c, v, want);
		if (!tpu__ct_equal(want, v + TPU__AUTH_NONCE, sizeof(want)))
			status = -EACCES;
	}
	if (!st && !status) {
		tpu__auth_proof(secret, "tensorpipe store v1 client", nonce_c, v, want);
		st = auth_step(c, 2, want, NULL, 0, &len, &status);
	}
	if (!st)
		st = status;
	if (st) {
		snprintf(why, why_size, "the store %s: %s",
			 st == -EACCES ? "does not share this job's secret (another one, or none)"
				       : "failed while proving the job secret", tpu_strerror(st));
		close(c->fd);
		c->fd = -1;
	}
	return st;
}

tpu_status tpu__store_set(struct store_client *c, const char *key, const void *val, size_t len)
{
	if (!c || !key || (!val && len))
		return -EINVAL;
	return request(c, STORE_SET, key, val, len, 0, NULL, 0, NULL);
}

tpu_status tpu__store_get(struct store_client *c, const char *key, void *buf, size_t size,
		     size_t *len, uint32_t timeout_ms)
{
	if (!c || !key || (!buf && size) || timeout_ms > STORE_GET_MAX_MS)
		return -EINVAL;
	return request(c, STORE_GET, key, NULL, 0, timeout_ms, buf, size, len);
}

tpu_status tpu__store_add(struct store_client *c, const char *key, int64_t delta, int64_t *total)
{
	uint8_t d[8], t[8];
	size_t len = 0;
	tpu_status st;

	if (!c || !key)
		return -EINVAL;
	tpu__store_wire_put_i64(delta, d);
	st = request(c, STORE_ADD, key, d, 8, 0, t, 8, &len);
	if (!st && len != 8)
		st = -EPROTO;
	if (!st && total)
		*total = tpu__store_wire_get_i64(t);
	return st;
}

/*
 * Every client adds one to the barrier's count; the one that makes it @n
 * sets the barrier's "go" key, which the others wait for.
 */
tpu_status tpu__store_barrier(struct store_client *c, const char *name, uint32_t n,
			 uint32_t timeout_ms)
{
	char count[STORE_KEY_MAX + 1], go[STORE_KEY_MAX + 1];
	int64_t total = 0;
	tpu_status st;
	size_t len;

	if (!c || !name || !n || strlen(name) > STORE_KEY_MAX - 16)
		return -EINVAL;
	snprintf(count, sizeof(count), "%s/count", name);
	snprintf(go, sizeof(go), "%s/go", name);
	st = tpu__store_add(c, count, 1, &total);
	if (!st && total == (int64_t)n)
		st = tpu__store_set(c, go, "1", 1);
	if (!st)
		st = tpu__store_get(c, go, NULL, 0, &len, timeout_ms);
	if (st == -EMSGSIZE)
		st = 0;
	return st;
}
