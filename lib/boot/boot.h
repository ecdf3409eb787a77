/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * lib/boot: forming a world of ranks from what a launcher set (torchrun,
 * Open MPI's mpirun).  boot_env.c reads the environment; store_wire.c,
 * store_server.c and store_client.c are a small key-value store that
 * rank 0 hosts over TCP (the role torch's TCPStore plays); world.c forms
 * the world (each rank publishes its URLs in the store and reads the
 * others') and gives its remote rendezvous; world_pipe.c gives a pipe to
 * any peer on demand.  Built on the public rendezvous and pipe calls, on
 * lib/base and lib/ctx.  Not installed.
 *
 * The store is set-up, not the data path: the clients use plain blocking
 * sockets on the calling thread, the server one thread that sleeps in
 * poll().  Everything a client sends is checked against the limits below
 * before anything is allocated, and a bad frame drops that client only.
 */
#ifndef TPU_BOOT_H
#define TPU_BOOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* ---- limits ---- */

#define STORE_KEY_MAX		256		/* bytes, at least 1 */
#define STORE_VALUE_MAX		(64u << 10)	/* bytes */
#define STORE_MAX_KEYS		(1u << 18)
#define STORE_MAX_BYTES		(64u << 20)	/* keys, values and bookkeeping */
#define STORE_MAX_CLIENTS	1024
/* A client must finish a frame it started within this long. */
#define STORE_FRAME_MS		10000
/* Longest wait a GET may ask for. */
#define STORE_GET_MAX_MS	(3600u * 1000u)

/* ---- wire (store_wire.c) ---- */

/*
 * A request: a 16-byte header (op, 3 zero bytes, key length, value length,
 * argument; little endian), the key, the value.  A reply: status (int32),
 * value length, the value.  ADD carries its delta, and answers the new
 * total, as 8-byte little-endian integers.
 */
enum store_op {
	STORE_SET = 1,		/* key, value */
	STORE_GET = 2,		/* key; arg: how long to wait for it, ms */
	STORE_ADD = 3,		/* key, value: int64 delta */
	/*
	 * Proving the job secret, first on a connection, when the server has
	 * one: arg 1, key the client's nonce; the reply's value is the
	 * server's nonce and proof.  arg 2, key the client's proof; the reply
	 * 0.  Anything else before that is answered -EACCES and the client
	 * dropped; a server without a secret answers AUTH -EACCES.
	 */
	STORE_AUTH = 4,
};

/* Bytes of a nonce or a proof (STORE_AUTH's key). */
#define STORE_AUTH_LEN		32

#define STORE_REQ_HDR		16
#define STORE_REPLY_HDR		8

struct store_req {
	enum store_op op;
	uint32_t key_len;
	uint32_t val_len;
	uint32_t arg;
};

void tpu__store_wire_req_put(const struct store_req *r, uint8_t hdr[STORE_REQ_HDR]);
/* -EPROTO when @hdr is no request within the limits. */
tpu_status tpu__store_wire_req_get(const uint8_t hdr[STORE_REQ_HDR], struct store_req *r);
void tpu__store_wire_reply_put(tpu_status status, uint32_t val_len, uint8_t hdr[STORE_REPLY_HDR]);
/* -EPROTO when the length is over STORE_VALUE_MAX. */
tpu_status tpu__store_wire_reply_get(const uint8_t hdr[STORE_REPLY_HDR], tpu_status *status,
				uint32_t *val_len);
void tpu__store_wire_put_i64(int64_t v, uint8_t out[8]);
int64_t tpu__store_wire_get_i64(const uint8_t in[8]);

/* ---- server (store_server.c): rank 0 ---- */

struct store_server;

/*
 * Listen on @host:@port (a numeric address or a name this host has) and
 * serve from a thread of its own until tpu__store_server_stop().
 */
tpu_status tpu__store_server_start(const char *host, uint16_t port, struct store_server **out,
			      char *why, size_t why_size);
/* The port listened on (when started with port 0). */
uint16_t tpu__store_server_port(const struct store_server *s);
/*
 * Wait until every client has gone (at most @timeout_ms): a rank that
 * passed the last barrier may not have read its answer yet when rank 0
 * passes it.  False if some client stayed.
 */
bool tpu__store_server_drain(struct store_server *s, uint32_t timeout_ms);
/* The same, with the job secret every client must prove first (NULL or !set: none). */
tpu_status tpu__store_server_start_auth(const char *host, uint16_t port,
				       const struct tpu__secret *secret, struct store_server **out,
				       char *why, size_t why_size);
/* Close every client and free the server (NULL is ignored). */
void tpu__store_server_stop(struct store_server *s);

/* ---- client (store_client.c) ---- */

struct store_client;

/*
 * Connect to @host:@port, trying again (backing off up to 250 ms) while
 * nobody listens yet, for at most @timeout_ms.  Errors: -ETIMEDOUT (the
 * last error is in @why), -EINVAL (an address that does not resolve).
 */
tpu_status tpu__store_client_connect(const char *host, uint16_t port, uint32_t timeout_ms,
				struct store_client **out, char *why, size_t why_size);
void tpu__store_client_close(struct store_client *c);
/* CLOCK_MONOTONIC in ms, the clock of tpu__store_client_bound(). */
uint64_t tpu__store_now_ms(void);
/*
 * Bound every later request on @c to end by @deadline (tpu__store_now_ms()
 * time; 0 lifts it): a request made past it fails -ETIMEDOUT without being
 * sent, a GET waits at most until it, and a reply that does not come by
 * it (and a short grace) fails -ETIMEDOUT and closes the stream.  The
 * caller's timeout thus bounds a whole call of several requests.
 */
void tpu__store_client_bound(struct store_client *c, uint64_t deadline);
/*
 * Prove @secret to the server and check its proof (first, before any other
 * request).  -EACCES: the server has another secret or none (then @why
 * says so and the connection is closed).
 */
tpu_status tpu__store_client_auth(struct store_client *c, const struct tpu__secret *secret,
				  char *why, size_t why_size);
/* The socket, for getsockname(): which local address reaches the store. */
int tpu__store_client_fd(const struct store_client *c);
tpu_status tpu__store_set(struct store_client *c, const char *key, const void *val, size_t len);
/*
 * Wait up to @timeout_ms for @key; -ETIMEDOUT if it was not set by then,
 * -EMSGSIZE (and *@len the value's length) if @size is too small.
 */
tpu_status tpu__store_get(struct store_client *c, const char *key, void *buf, size_t size,
		     size_t *len, uint32_t timeout_ms);
/* Add @delta to the integer under @key (0 when absent); *@total gets the sum. */
tpu_status tpu__store_add(struct store_client *c, const char *key, int64_t delta, int64_t *total);
/*
 * Wait until @n clients reached barrier @name (each barrier name once per
 * client); -ETIMEDOUT after @timeout_ms.
 */
tpu_status tpu__store_barrier(struct store_client *c, const char *name, uint32_t n,
			 uint32_t timeout_ms);

/* ---- environment (boot_env.c) ---- */

/* Split "HOST:PORT" or "[V6]:PORT"; false if it is not one. */
bool tpu__boot_split_addr(const char *addr, char *host, size_t host_size, uint16_t *port);

#endif /* TPU_BOOT_H */
