// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The store's server, on rank 0: one thread asleep in poll() over the
 * listening socket, every client and an eventfd that stops it.  Client
 * sockets are non-blocking, so that one slow or hostile client never holds
 * up the others; each is read frame by frame and checked against the
 * limits before anything is allocated.  A client that breaks the protocol,
 * or stalls in the middle of a frame for STORE_FRAME_MS, is dropped alone.
 *
 * A client that has not finished a request yet has shown nothing: it must
 * finish its first one within TPU_SETUP_TIMEOUT_MS of its accept, and at
 * most TPU_SETUP_MAX such clients are kept: a new one drops the oldest once
 * that one had its grace (see base.h), and waits in the backlog until then.
 * A client is read as soon as it is accepted, so that a real one, which
 * sends its request at once, is known before the next accept.
 * Out of descriptors, the server drops its oldest such client and stops
 * accepting for STORE_ACCEPT_RETRY_MS instead of polling a listening
 * socket it cannot accept from.
 *
 * With a job secret, a client proves it first (STORE_AUTH, the same
 * challenge and response as pipes, base/auth.c): until then any other
 * request is answered -EACCES and its client dropped, before anything is
 * allocated for its body.  With a secret, a client counts as known (no
 * longer new) only once it has proved it.
 *
 * A GET of a key not there yet parks its client (nothing more is read from
 * it meanwhile, which keeps its replies in order) until a SET or ADD of
 * the key or the GET's deadline.
 */
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <time.h>
#include <unistd.h>

#include "boot.h"

#define NBUCKETS	(1u << 14)
/* Bookkeeping charged per key against STORE_MAX_BYTES. */
#define ENTRY_COST	64u
/* Out of descriptors: how long the server leaves its listening socket alone. */
#define STORE_ACCEPT_RETRY_MS	100u

struct entry {
	struct entry *next;
	uint8_t *val;
	uint32_t val_len;
	uint32_t key_len;
	uint8_t key[];
};

struct sclient {
	int fd;
	bool dead;
	bool known;			/* it finished a request */
	uint64_t first_deadline;	/* until known: when it is dropped */
	uint8_t hdr[STORE_REQ_HDR];
	size_t hdr_got;
	struct store_req req;
	uint8_t *body;			/* key, then value */
	size_t body_got;
	uint64_t frame_deadline;	/* 0: not inside a frame */
	bool parked;			/* a GET waiting for its key (body: the key) */
	uint64_t park_deadline;
	uint8_t *out;			/* reply not yet written */
	size_t out_len, out_off;
	/* STORE_AUTH: 0 nothing yet, 1 challenged, 2 proved (or no secret to prove) */
	int auth;
	uint8_t nonce_c[TPU__AUTH_NONCE], nonce_s[TPU__AUTH_NONCE];
};

struct store_server {
	struct tpu__secret secret;
	int lfd;
	int wake;
	uint16_t port;
	pthread_t thread;
	struct entry *buckets[NBUCKETS];
	size_t nkeys, bytes;
	struct sclient *clients[STORE_MAX_CLIENTS];
	size_t nclients;
	size_t nnew;			/* clients not known yet */
	size_t new_max;			/* TPU_SETUP_MAX */
	uint64_t first_ms;		/* TPU_SETUP_TIMEOUT_MS */
	uint64_t grace_ms;		/* the oldest new client is dropped only after this */
	uint64_t accept_after;		/* out of descriptors: no accept before (ms) */
	/* Here rather than on the thread's stack, so that a forked child sees it. */
	struct pollfd pfd[STORE_MAX_CLIENTS + 2];
	/* For tpu__store_server_drain(): the number of clients, as of the last sweep. */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	size_t live;
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint32_t hash(const uint8_t *k, size_t n)
{
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < n; i++)
		h = (h ^ k[i]) * 16777619u;
	return h & (NBUCKETS - 1);
}

static struct entry *lookup(struct store_server *s, const uint8_t *key, size_t len)
{
	struct entry *e;

	for (e = s->buckets[hash(key, len)]; e; e = e->next)
		if (e->key_len == len && !memcmp(e->key, key, len))
			return e;
	return NULL;
}

/* Set @key to a copy of @val; -ENOSPC past the store's limits. */
static tpu_status put(struct store_server *s, const uint8_t *key, uint32_t klen, const uint8_t *val,
		      uint32_t vlen)
{
	struct entry *e = lookup(s, key, klen);
	uint8_t *copy = malloc(vlen ? vlen : 1);

	if (!copy)
		return -ENOMEM;
	memcpy(copy, val, vlen);
	if (e) {
		if (s->bytes - e->val_len + vlen > STORE_MAX_BYTES) {
			free(copy);
			return -ENOSPC;
		}
		s->bytes = s->bytes - e->val_len + vlen;
		free(e->val);
	} else {
		if (s->nkeys >= STORE_MAX_KEYS ||
		    s->bytes + ENTRY_COST + klen + vlen > STORE_MAX_BYTES ||
		    !(e = malloc(sizeof(*e) + klen))) {
			free(copy);
			return -ENOSPC;
		}
		e->key_len = klen;
		memcpy(e->key, key, klen);
		e->next = s->buckets[hash(key, klen)];
		s->buckets[hash(key, klen)] = e;
		s->nkeys++;
		s->bytes += ENTRY_COST + klen + vlen;
	}
	e->val = copy;
	e->val_len = vlen;
	return 0;
}

static void flush(struct sclient *c)
{
	while (c->out_off < c->out_len) {
		ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0) {
			if (errno != EAGAIN && errno != EINTR)
				c->dead = true;
			if (errno != EINTR)
				return;
			continue;
		}
		c->out_off += (size_t)n;
	}
	free(c->out);
	c->out = NULL;
	c->out_len = c->out_off = 0;
}

static void reply(struct sclient *c, tpu_status status, const void *val, uint32_t len)
{
	c->out = malloc(STORE_REPLY_HDR + len);
	if (!c->out) {
		c->dead = true;
		return;
	}
	tpu__store_wire_reply_put(status, len, c->out);
	if (len)
		memcpy(c->out + STORE_REPLY_HDR, val, len);
	c->out_len = STORE_REPLY_HDR + len;
	c->out_off = 0;
	flush(c);
}

static void end_frame(struct sclient *c)
{
	free(c->body);
	c->body = NULL;
	c->hdr_got = c->body_got = 0;
	c->frame_deadline = 0;
	c->parked = false;
}

/* A key was set: answer the GETs parked on it. */
static void wake_parked(struct store_server *s, const struct entry *e)
{
	for (size_t i = 0; i < s->nclients; i++) {
		struct sclient *c = s->clients[i];

		if (c->parked && c->req.key_len == e->key_len &&
		    !memcmp(c->body, e->key, e->key_len)) {
			reply(c, 0, e->val, e->val_len);
			end_frame(c);
		}
	}
}

static const char label_server[] = "tensorpipe store v1 server";
static const char label_client[] = "tensorpipe store v1 client";

/* Answer -EACCES and drop the client (the reply is 8 bytes: it goes out at once). */
static void refuse(struct sclient *c, const char *why)
{
	tpu__log_debug("store: refusing a client: %s", why);
	reply(c, -EACCES, NULL, 0);
	c->dead = true;
}

static void auth_step(struct store_server *s, struct sclient *c)
{
	uint8_t v[TPU__AUTH_NONCE + TPU__SHA256_LEN], want[TPU__SHA256_LEN];

	if (!s->secret.set) {
		refuse(c, "it has a job secret, this store has none");
	} else if (c->req.arg == 1 && c->auth == 0) {
		memcpy(c->nonce_c, c->body, TPU__AUTH_NONCE);
		if (tpu__auth_nonce(c->nonce_s)) {
			c->dead = true;
			return;
		}
		memcpy(v, c->nonce_s, TPU__AUTH_NONCE);
		tpu__auth_proof(&s->secret, label_server, c->nonce_c, c->nonce_s,
				v + TPU__AUTH_NONCE);
		c->auth = 1;
		reply(c, 0, v, sizeof(v));
	} else if (c->req.arg == 2 && c->auth == 1) {
		tpu__auth_proof(&s->secret, label_client, c->nonce_c, c->nonce_s, want);
		if (!tpu__ct_equal(want, c->body, sizeof(want))) {
			refuse(c, "a wrong proof of the job secret");
			return;
		}
		c->auth = 2;
		reply(c, 0, NULL, 0);
	} else {
		refuse(c, "authentication out of order");
	}
}

static void handle(struct store_server *s, struct sclient *c)
{
	const uint8_t *key = c->body, *val = c->body + c->req.key_len;
	struct entry *e = lookup(s, key, c->req.key_len);
	uint8_t sum[8];
	tpu_status st;
	int64_t total;

	if (c->req.op == STORE_AUTH) {
		auth_step(s, c);
		end_frame(c);
		return;
	}
	switch (c->req.op) {
	case STORE_SET:
		st = put(s, key, c->req.key_len, val, c->req.val_len);
		reply(c, st, NULL, 0);
		break;
	case STORE_GET:
		if (e) {
			reply(c, 0, e->val, e->val_len);
		} else if (c->req.arg) {
			c->parked = true;
			c->park_deadline = now_ms() + c->req.arg;
			c->frame_deadline = 0;
			return;		/* the body stays: it is the key waited for */
		} else {
			reply(c, -ETIMEDOUT, NULL, 0);
		}
		break;
	case STORE_AUTH:
		break;
	case STORE_ADD:
		total = e ? (e->val_len == 8 ? tpu__store_wire_get_i64(e->val) : 0) : 0;
		if (e && e->val_len != 8) {
			st = -EINVAL;
		} else if (__builtin_add_overflow(total, tpu__store_wire_get_i64(val), &total)) {
			st = -ERANGE;
		} else {
			tpu__store_wire_put_i64(total, sum);
			st = put(s, key, c->req.key_len, sum, 8);
		}
		reply(c, st, st ? NULL : sum, st ? 0 : 8);
		break;
	}
	/* Before end_frame(): the key lives in the frame's body. */
	if (c->req.op != STORE_GET && (e = lookup(s, key, c->req.key_len)) != NULL)
		wake_parked(s, e);
	end_frame(c);
}

/* Read what the client sent, a frame at a time, while it may be answered. */
static void client_read(struct store_server *s, struct sclient *c)
{
	uint8_t scratch[4096];

	while (!c->dead && !c->parked && !c->out) {
		uint8_t *dst;
		size_t want;
		ssize_t n;

		if (c->hdr_got < STORE_REQ_HDR) {
			dst = c->hdr + c->hdr_got;
			want = STORE_REQ_HDR - c->hdr_got;
		} else {
			dst = c->body + c->body_got;
			want = c->req.key_len + c->req.val_len - c->body_got;
			if (!c->body) {
				/* Refused: read and drop the frame, so that closing resets nothing. */
				dst = scratch;
				want = want < sizeof(scratch) ? want : sizeof(scratch);
			}
		}
		n = recv(c->fd, dst, want, MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			c->dead = true;
			return;
		}
		if (n < 0) {
			if (errno == EAGAIN)
				return;
			continue;
		}
		if (!c->frame_deadline)
			c->frame_deadline = now_ms() + STORE_FRAME_MS;
		if (c->hdr_got < STORE_REQ_HDR) {
			c->hdr_got += (size_t)n;
			if (c->hdr_got < STORE_REQ_HDR)
				continue;
			if (tpu__store_wire_req_get(c->hdr, &c->req)) {
				tpu__log_debug("store: dropping a client that sent a bad frame");
				c->dead = true;
				return;
			}
			/* Nothing is allocated for a client that has not proved the secret. */
			if (c->auth != 2 && c->req.op != STORE_AUTH)
				continue;
			c->body = malloc(c->req.key_len + c->req.val_len);
			if (!c->body) {
				c->dead = true;
				return;
			}
			continue;
		}
		c->body_got += (size_t)n;
		if (c->body_got < c->req.key_len + c->req.val_len)
			continue;
		if (!c->body)
			refuse(c, "it did not prove the job secret");
		else
			handle(s, c);
		if (!c->known && c->auth == 2) {
			c->known = true;
			s->nnew--;
		}
	}
}

static void client_free(struct sclient *c)
{
	close(c->fd);
	free(c->body);
	free(c->out);
	free(c);
}

/* Free client @i now (its slot takes the last one). */
static void client_drop(struct store_server *s, size_t i)
{
	struct sclient *c = s->clients[i];

	if (!c->known)
		s->nnew--;
	client_free(c);
	s->clients[i] = s->clients[--s->nclients];
}

/* The client without a request accepted first (or a dead one); SIZE_MAX if none. */
static size_t oldest_new(const struct store_server *s)
{
	size_t oldest = SIZE_MAX;

	for (size_t i = 0; i < s->nclients; i++) {
		const struct sclient *c = s->clients[i];

		/* One that is going anyway comes first. */
		if (!c->known && c->dead)
			return i;
		if (!c->known && (oldest == SIZE_MAX ||
				  c->first_deadline < s->clients[oldest]->first_deadline))
			oldest = i;
	}
	return oldest;
}

static void drop_oldest_new(struct store_server *s, const char *why)
{
	size_t oldest = oldest_new(s);

	if (oldest == SIZE_MAX)
		return;
	tpu__log_debug("store: dropping a client without a request: %s", why);
	client_drop(s, oldest);
}

/* Room for one more client without a request; false: try again at accept_after. */
static bool room_for_new(struct store_server *s)
{
	size_t oldest;
	uint64_t since;

	if (s->nnew < s->new_max)
		return true;
	oldest = oldest_new(s);
	if (oldest == SIZE_MAX)
		return true;
	since = s->clients[oldest]->first_deadline - s->first_ms;
	if (!s->clients[oldest]->dead && now_ms() < since + s->grace_ms) {
		s->accept_after = since + s->grace_ms;
		return false;
	}
	drop_oldest_new(s, "too many of them");
	return true;
}

static void accept_all(struct store_server *s)
{
	while (s->nclients < STORE_MAX_CLIENTS && room_for_new(s)) {
		int one = 1, fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct sclient *c;

		if (fd < 0) {
			bool short_of = errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
					errno == ENOMEM;

			if (short_of) {
				/* The connection stays in the backlog: come back for it later. */
				drop_oldest_new(s, "out of descriptors");
				s->accept_after = now_ms() + STORE_ACCEPT_RETRY_MS;
			}
			return;
		}
		c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			return;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c->fd = fd;
		c->first_deadline = now_ms() + s->first_ms;
		c->auth = s->secret.set ? 0 : 2;
		s->clients[s->nclients++] = c;
		s->nnew++;
		/* Its request is likely here already: known now, it holds no place among the new. */
		client_read(s, c);
	}
}

/* Deadlines: parked GETs answer -ETIMEDOUT, stalled frames drop their client. */
static int expire(struct store_server *s)
{
	uint64_t now = now_ms(), next = UINT64_MAX;

	for (size_t i = 0; i < s->nclients; i++) {
		struct sclient *c = s->clients[i];

		if (c->parked && c->park_deadline <= now) {
			reply(c, -ETIMEDOUT, NULL, 0);
			end_frame(c);
		}
		if (c->frame_deadline && c->frame_deadline <= now) {
			tpu__log_debug("store: dropping a client that stalled inside a frame");
			c->dead = true;
		}
		if (!c->known && c->first_deadline <= now) {
			tpu__log_debug("store: dropping a client that sent no request in time");
			c->dead = true;
		}
		/* A deadline passed already must not make the next poll's timeout. */
		if (c->dead)
			continue;
		if (!c->known && c->first_deadline < next)
			next = c->first_deadline;
		if (c->parked && c->park_deadline < next)
			next = c->park_deadline;
		if (c->frame_deadline && c->frame_deadline < next)
			next = c->frame_deadline;
	}
	if (s->accept_after > now && s->accept_after < next)
		next = s->accept_after;
	if (next == UINT64_MAX)
		return -1;
	return next <= now ? 0 : (int)(next - now + 1);
}

static void sweep(struct store_server *s)
{
	for (size_t i = 0; i < s->nclients;) {
		if (s->clients[i]->dead)
			client_drop(s, i);
		else
			i++;
	}
	pthread_mutex_lock(&s->lock);
	if (s->live != s->nclients) {
		s->live = s->nclients;
		pthread_cond_broadcast(&s->cond);
	}
	pthread_mutex_unlock(&s->lock);
}

static void *serve(void *arg)
{
	struct store_server *s = arg;
	struct pollfd *pfd = s->pfd;

	for (;;) {
		int timeout = expire(s);
		bool accepting;
		size_t n;

		sweep(s);
		n = s->nclients;
		accepting = n < STORE_MAX_CLIENTS && s->accept_after <= now_ms();
		pfd[0] = (struct pollfd){ .fd = s->wake, .events = POLLIN };
		/* A full table stops accepting: new clients wait in the backlog. */
		pfd[1] = (struct pollfd){ .fd = accepting ? s->lfd : -1, .events = POLLIN };
		for (size_t i = 0; i < n; i++) {
			struct sclient *c = s->clients[i];

			pfd[i + 2] = (struct pollfd){ .fd = c->fd,
				.events = (short)(c->out ? POLLOUT : c->parked ? POLLRDHUP : POLLIN) };
		}
		if (poll(pfd, n + 2, timeout) < 0 && errno != EINTR)
			break;
		if (pfd[0].revents)
			break;
		for (size_t i = 0; i < n; i++) {
			struct sclient *c = s->clients[i];
			short ev = pfd[i + 2].revents;

			if (ev & POLLOUT)
				flush(c);
			if (ev & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) {
				/* A client waiting for its GET has nothing to say: it left. */
				if (c->parked)
					c->dead = true;
				client_read(s, c);
			}
		}
		if (pfd[1].revents)
			accept_all(s);
	}
	return NULL;
}

static int listen_on(const char *host, uint16_t port, char *why, size_t why_size, tpu_status *err)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
	struct addrinfo *res, *ai;
	char service[8];
	int fd = -1, one = 1, rc;

	snprintf(service, sizeof(service), "%u", port);
	rc = getaddrinfo(host, service, &hints, &res);
	if (rc) {
		snprintf(why, why_size, "store address %s does not resolve: %s", host,
			 gai_strerror(rc));
		*err = -EINVAL;
		return -1;
	}
	*err = -EADDRNOTAVAIL;
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
			    ai->ai_protocol);
		if (fd < 0)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (!bind(fd, ai->ai_addr, ai->ai_addrlen) && !listen(fd, 128))
			break;
		*err = tpu__errno();
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0 && *err == -EADDRNOTAVAIL)
		snprintf(why, why_size, "store address %s is not an address of this host, "
			 "and rank 0 hosts the store there", host);
	else if (fd < 0)
		snprintf(why, why_size, "cannot listen on %s:%u for the store: %s", host, port,
			 tpu_strerror(*err));
	return fd;
}

tpu_status tpu__store_server_start(const char *host, uint16_t port, struct store_server **out,
			      char *why, size_t why_size)
{
	return tpu__store_server_start_auth(host, port, NULL, out, why, why_size);
}

tpu_status tpu__store_server_start_auth(const char *host, uint16_t port,
				       const struct tpu__secret *secret, struct store_server **out,
				       char *why, size_t why_size)
{
	struct store_server *s = calloc(1, sizeof(*s));
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	tpu_status st;

	*out = NULL;
	if (!s)
		return -ENOMEM;
	if (secret)
		s->secret = *secret;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	s->new_max = tpu__setup_max();
	s->first_ms = tpu__setup_timeout_ns() / 1000000u;
	s->grace_ms = tpu__setup_grace_ns(s->first_ms * 1000000u) / 1000000u;
	s->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	s->lfd = listen_on(host, port, why, why_size, &st);
	if (s->wake < 0 || s->lfd < 0) {
		st = s->wake < 0 ? tpu__errno() : st;
		goto fail;
	}
	getsockname(s->lfd, (struct sockaddr *)&ss, &sl);
	s->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
						 : ((struct sockaddr_in *)&ss)->sin_port);
	st = -pthread_create(&s->thread, NULL, serve, s);
	if (st)
		goto fail;
	*out = s;
	return 0;
fail:
	if (s->lfd >= 0)
		close(s->lfd);
	if (s->wake >= 0)
		close(s->wake);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->cond);
	free(s);
	return st;
}

uint16_t tpu__store_server_port(const struct store_server *s)
{
	return s->port;
}

bool tpu__store_server_drain(struct store_server *s, uint32_t timeout_ms)
{
	struct timespec until;
	bool idle;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += (time_t)(timeout_ms / 1000);
	until.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (until.tv_nsec >= 1000000000) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&s->lock);
	while (s->live && !pthread_cond_timedwait(&s->cond, &s->lock, &until))
		;
	idle = !s->live;
	pthread_mutex_unlock(&s->lock);
	return idle;
}

void tpu__store_server_stop(struct store_server *s)
{
	uint64_t one = 1;

	if (!s)
		return;
	if (write(s->wake, &one, sizeof(one)) != sizeof(one))
		tpu__log_debug("store: cannot wake the server: %s", tpu_strerror(tpu__errno()));
	pthread_join(s->thread, NULL);
	for (size_t i = 0; i < s->nclients; i++)
		client_free(s->clients[i]);
	for (size_t b = 0; b < NBUCKETS; b++) {
		struct entry *e, *next;

		for (e = s->buckets[b]; e; e = next) {
			next = e->next;
			free(e->val);
			free(e);
		}
	}
	close(s->lfd);
	close(s->wake);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->cond);
	memset(&s->secret, 0, sizeof(s->secret));
	free(s);
}
