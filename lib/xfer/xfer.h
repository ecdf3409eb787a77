/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * lib/xfer: one-sided, batched transfers between registered memory of two
 * agents (Documentation/xfer.rst).  agent.c: the agent, its listener and
 * its peers' pipes; xfer_msg.c: the control messages read and written on
 * them; xfer_reg.c: registrations, export and deregistration; xfer_blob.c:
 * the metadata blob; xfer_load.c: loading a blob (a remote handle);
 * xfer_dmabuf.c and xfer_cuda.c: dma-buf and CUDA registrations;
 * xfer_req.c: prepared requests (the public calls); xfer_cma.c and
 * xfer_tcp.c and xfer_rdma*.c: the backends; xfer_serve.c: what a target
 * agent serves.
 *
 * Two agents talk over one pipe per direction of use: the agent that loads
 * a blob connects to the exporter (an "out" peer) and sends its requests,
 * notifications and load requests on it; the exporter sees an "in" peer and
 * answers there, and sends REVOKE when it deregisters.  Pipes are
 * authenticated by the context's job secret before any frame of ours is
 * read, so nothing here is reachable by an unauthenticated peer.
 *
 * Locks, outermost first: a->local_rw (read while a request touches local
 * memory; deregistration writes it), p->rw (read while a cma copy runs
 * against the peer; REVOKE writes it), a->lock (tables, lists, counts).
 * Pipe callbacks run on the context's thread.
 */
#ifndef TPU_XFER_H
#define TPU_XFER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "tpu_user.h"
#include "base/base.h"
#include "ctx/ctx.h"

#define XFER_MAGIC_AGENT	0x7a9e17a1U
#define XFER_MAGIC_REQ		0x7a9e1e90U
#define XFER_MAGIC_REG		0x7a9e1e61U
#define XFER_MAGIC_REMOTE	0x7a9e1e7eU

#define XFER_ID_LEN		16	/* an agent's random identity */
#define XFER_URL_MAX		128
#define XFER_REGS_MAX		65536	/* registrations per agent */
#define XFER_PEERS_MAX		1024	/* pipes per agent, in and out */
#define XFER_NOTIFS_MAX		65536	/* queued, not yet polled */
#define XFER_NOTIF_BYTES_MAX	(4U << 20)	/* their messages, all peers together */
#define XFER_IOV_BATCH		1024	/* iovecs per process_vm_* call (IOV_MAX) */
#define XFER_CHUNK_ELEMS	16384	/* tcp: elements per message */
#define XFER_CHUNK_BYTES	(16U << 20)	/* tcp: data bytes per message */
/* Bytes of messages being read and answers being sent, all in peers together. */
#define XFER_SERVE_BYTES_MAX	(64U << 20)
/* Answers queued to an in peer before its next message waits for them to go. */
#define XFER_PEER_WRITES_MAX	64
#define XFER_REVOKE_MS		2000	/* how long deregistration waits for acks */
#define XFER_LOAD_MS		10000	/* how long a load waits for its answer */

/* ---- wire (xfer_msg.c): a pipe message's metadata is this header ---- */

#define XFER_HDR_LEN		64
#define XFER_ELEM_LEN		24	/* reg id, offset, len: le64 each */

enum xfer_msg {
	XFER_HELLO = 1,		/* out -> in: payload 0 is the sender's name */
	XFER_LOAD,		/* out -> in: id, reg, key, addr (module endpoint id or 0); payload 0 the agent id */
	XFER_LOAD_ANS,		/* in -> out: id, status, addr, len, access, key (module grant or 0) */
	XFER_REQ,		/* out -> in: id (serial), op, n, flags; elements, data, notif */
	XFER_RESP,		/* in -> out: id, status; the data of a READ */
	XFER_NOTIF,		/* out -> in: payload 0 */
	XFER_REVOKE,		/* in -> out: reg */
	XFER_REVOKE_ACK,	/* out -> in: reg */
	XFER_RDMA_CONN,		/* out -> in: payload 0 our queue pairs (xfer_rdma.h) */
	XFER_RDMA_ACCEPT,	/* in -> out: status; payload 0 the target's */
};

#define XFER_F_LAST		(1U << 0)	/* REQ: the last chunk of a post */
#define XFER_F_NOTIF		(1U << 1)	/* REQ: payload 2 is a notification */
#define XFER_F_SERVED		(1U << 2)	/* LOAD_ANS: only the target's copies reach it */
#define XFER_F_RKEY		(1U << 3)	/* LOAD_ANS: key is the rkey of this peer's rdma link */

struct xfer_hdr {
	uint32_t type;
	uint32_t flags;
	uint64_t id;
	uint64_t reg;
	uint64_t key;
	uint64_t addr;
	uint64_t len;
	uint32_t n;
	int32_t status;
	uint32_t op;
	uint32_t access;
};

void tpu__xfer_hdr_put(const struct xfer_hdr *h, uint8_t buf[XFER_HDR_LEN]);
/* -EPROTO when @buf is no header of ours. */
tpu_status tpu__xfer_hdr_get(const void *buf, size_t len, struct xfer_hdr *h);

/* ---- objects ---- */

struct xfer_peer;
struct xfer_backend;
struct xfer_rdma_link;
struct xrd_dev;

struct tpu_xfer_reg {
	uint32_t magic;			/* XFER_MAGIC_REG; poisoned once deregistered or freed */
	struct tpu_agent *a;
	struct tpu_xfer_reg *next;	/* a->regs */
	uint64_t id;			/* slot in the low 32 bits, generation above */
	uint64_t key;			/* random: a blob must name it */
	uint8_t *addr;
	uint64_t len;
	unsigned int access;		/* TPU_XFER_READ | TPU_XFER_WRITE */
	atomic_bool revoked;
	atomic_uint stamp;		/* prepare's serial, to list it once per request */
	unsigned int busy;		/* a->lock: elements being served on it */
	unsigned int refs;		/* a->lock: requests that use it */
	bool gone;			/* a->lock: deregistered; freed with the last ref */
	struct xfer_peer **loaders;	/* a->lock: in peers that loaded it */
	size_t nloaders, loaders_cap;
	void *map;			/* a mapping of its own (a dma-buf's), unmapped */
	size_t map_len;			/* once no peer or request can reach it */
	struct tpu_device dev;		/* CUDA memory: only the target's copies reach it */
	uint32_t kmod_region;		/* a->lock: module region handle, if kmod_pinned or kmod_app */
	bool kmod_pinned;		/* a->lock */
	/* An application's module region (tpu_agent_register_region): granted as is. */
	bool kmod_app;
	int kmod_app_fd;		/* its endpoint, the application's */
	uint64_t kmod_offset;		/* where the registration starts in the region */
	uint32_t *kmod_grants;		/* a->lock: grants made on it, revoked when it goes */
	size_t nkmod_grants, kmod_grants_cap;
	void *rdma_mr;			/* a->lock: its MR in the agent's rdma domain */
};

struct tpu_xfer_remote {
	uint32_t magic;			/* XFER_MAGIC_REMOTE; poisoned once unloaded or freed */
	struct xfer_peer *peer;
	struct tpu_xfer_remote *next;	/* peer->remotes */
	uint64_t reg;
	uint64_t addr;			/* as the target answered the load */
	uint64_t len;
	unsigned int access;
	atomic_bool revoked;
	atomic_uint stamp;
	/* a->lock: requests that name it; unloaded (magic poisoned), the last frees it */
	unsigned int users;
	uint32_t grant;			/* kmod: the module grant the target made us, or 0 */
	uint32_t rkey;			/* rdma: what the target's answer gave this link */
};

/* A load waiting for its answer. */
struct xfer_load {
	struct xfer_load *next;
	uint64_t id;
	bool done;
	struct xfer_hdr ans;
};

/* One inbound message being read. */
struct xfer_in {
	struct xfer_hdr h;
	struct tpu_payload *pl;
	size_t npl;
	void *buf[3];
};

struct xfer_peer {
	struct tpu_agent *a;
	struct xfer_peer *next;		/* a->peers */
	bool out;			/* we connected (we post requests on it) */
	struct tpu_pipe *pipe;
	uint8_t id[XFER_ID_LEN];	/* out: the target agent's */
	char name[TPU_XFER_NAME_MAX];	/* in: what HELLO said (a claim) */
	char url[XFER_URL_MAX];
	atomic_int error;		/* first failure; 0 while usable */
	bool closed;			/* a->lock: its pipe was closed */
	pthread_rwlock_t rw;		/* cma copies read; REVOKE and failure write */
	int pid;			/* out: the kernel's word for the target, 0 if none */
	int pidfd;			/* out, cma: tells when that process is gone */
	const struct xfer_backend *be;	/* out: chosen at the first load */
	struct xfer_rdma_link *rdma;	/* a->lock: its rdma link, if any */
	bool rdma_tried;		/* out, a->lock: a link was asked for once */
	struct xfer_load *loads;	/* a->lock */
	struct tpu_xfer_req *pending;	/* a->lock: tcp posts waiting for RESPs */
	struct tpu_xfer_remote *remotes;	/* a->lock */
	uint64_t next_id;		/* a->lock */
	struct xfer_in in;		/* ctx thread */
	unsigned int serving;		/* in: a response is being written */
	uint64_t in_bytes;		/* ctx thread: of a->serve_bytes, this message's payloads */
	uint64_t resp_bytes;		/* ctx thread: and its READ answer's, until served */
	struct tpu_message *desc;	/* ctx thread: a descriptor parked for want of bytes */
	struct xfer_peer *park_next;	/* a->lock: a->parked */
	bool parked;			/* a->lock: on a->parked */
	bool stalled;			/* a->lock, in: reading waits for its writes to drain */
	bool rdone;			/* a->lock, in: its reads ended, its pipe closed */
	unsigned int io;		/* a->lock: writes in flight */
};

struct xfer_notif {
	struct xfer_notif *next;
	char peer[TPU_XFER_NAME_MAX];
	size_t len;
	uint8_t msg[];
};

struct tpu_agent {
	uint32_t magic;
	struct tpu_context *ctx;
	char name[TPU_XFER_NAME_MAX];
	uint8_t id[XFER_ID_LEN];
	char boot_id[40];
	unsigned int backends;
	struct tpu_listener *listener;
	char url_shm[XFER_URL_MAX];
	char url_tcp[XFER_URL_MAX];
	pthread_mutex_t lock;
	pthread_cond_t cond;		/* loads answered, revokes acked, serving done */
	pthread_rwlock_t local_rw;
	struct tpu_xfer_reg **slots;	/* XFER_REGS_MAX, by the id's low half */
	struct tpu_xfer_reg *regs;
	uint32_t next_gen;
	size_t nregs;
	struct xfer_peer *peers;
	size_t npeers;
	struct tpu_xfer_req *reqs;	/* a->lock: prepared, not released */
	struct xfer_notif *nq, **nq_tail;
	size_t nnotifs;
	size_t nq_bytes;			/* their messages' bytes */
	tpu_notif_cb notif_cb;
	void *notif_arg;
	atomic_uint serial;
	bool closing;
	/* On the context's list of objects left open (agent.c's agent_obj_close). */
	struct tpu__ctx_obj obj;
	bool ctx_gone;			/* its listener and pipes closed, its context's part done */
	uint64_t serve_bytes;		/* a->lock: held for in peers, XFER_SERVE_BYTES_MAX */
	struct xfer_peer *parked, **parked_tail;	/* a->lock: in peers waiting for bytes */
	unsigned int deregs;		/* a->lock: deregistrations running (they name peers) */
	int kmod_fd;			/* module endpoint (tpu_agent_use_domain), if kmod_id */
	uint64_t kmod_id;		/* a->lock: its endpoint id, 0 without one */
	uint64_t kmod_domain;		/* a->lock: its domain's id, with kmod_id */
	struct xrd_dev *rdma;		/* a->lock: the rdma device, opened at first use */
};

/* ---- requests ---- */

struct tpu_xfer_req {
	uint32_t magic;
	struct tpu_agent *a;
	struct tpu_xfer_req *next, **pprev;	/* a->lock: a->reqs; pprev NULL until linked */
	struct xfer_peer *peer;
	enum tpu_xfer_op op;
	size_t npairs;
	struct iovec *liov;		/* per pair: local memory */
	struct iovec *riov;		/* per pair: the target's address (cma) */
	uint8_t *elems;			/* per pair: wire element (tcp) */
	size_t nbatches;
	uint64_t *batch_bytes;		/* cma: bytes per XFER_IOV_BATCH pairs; tcp: per chunk */
	size_t *chunk_start;		/* tcp: first pair of each chunk, and npairs */
	size_t nchunks;
	struct tpu_xfer_reg **lregs;	/* each local registration once */
	size_t nlregs;
	struct tpu_xfer_remote **rms;	/* each remote handle once */
	size_t nrms;
	uint8_t *notif;
	size_t notif_len;
	uint64_t total;

	atomic_int state;		/* XFER_IDLE, XFER_POSTED */
	tpu_status status;		/* of the last post, once idle */
	tpu_xfer_cb cb;
	void *arg;
	/* tcp, a->lock */
	struct tpu_xfer_req *pend_next;
	uint64_t serial;
	size_t chunks_left;
	unsigned int writes_out;
	tpu_status first_err;
	unsigned int in_cb;		/* a->lock: completions whose callback runs */
	void *be_data;			/* the backend's (rdma: work requests) */
};

enum { XFER_IDLE, XFER_POSTED };

/* A backend: how requests to one peer move.  rdma slots in here too. */
struct xfer_backend {
	const char *name;
	/* Make @p usable (after its first load answered); errors rule it out. */
	tpu_status (*attach)(struct xfer_peer *p);
	/* Post a prepared, validated request; completes it (now or later). */
	void (*post)(struct tpu_xfer_req *r);
	/* Take back what a post left in flight; false if it finished already. */
	bool (*cancel)(struct tpu_xfer_req *r);
	/* Optional: build what every post of @r reuses (be_data), and free it. */
	tpu_status (*prepare)(struct tpu_xfer_req *r);
	void (*release)(struct tpu_xfer_req *r);
};

extern const struct xfer_backend tpu__xfer_cma;
extern const struct xfer_backend tpu__xfer_tcp;
extern const struct xfer_backend tpu__xfer_kmod;

/* xfer_kmod.c */
uint32_t tpu__xfer_kmod_grant(struct tpu_agent *a, struct tpu_xfer_reg *r, uint64_t grantee);
void tpu__xfer_kmod_unpin(struct tpu_agent *a, struct tpu_xfer_reg *r);
tpu_status tpu__xfer_kmod_check(struct tpu_agent *a, uint32_t grant, unsigned int access);
void tpu__xfer_kmod_close(struct tpu_agent *a);
extern const struct xfer_backend tpu__xfer_rdma;

/* xfer_rdma_dev.c: the hooks the shared code calls (no-ops without rdma). */
/* Longest handshake payload (XRD_CONN_LEN(XRD_QPS_MAX)). */
#define XFER_RDMA_INFO_MAX	84
/* Context thread: an in peer's XFER_RDMA_CONN, an out peer's XFER_RDMA_ACCEPT. */
void tpu__xfer_rdma_conn(struct xfer_peer *p);
void tpu__xfer_rdma_accept(struct xfer_peer *p);
/* Out peer @p, before its first load: ask the target for an rdma link. */
tpu_status tpu__xfer_rdma_connect(struct xfer_peer *p);
/* a->lock held: @r granted to in peer @p's link; its rkey. */
tpu_status tpu__xfer_rdma_grant(struct xfer_peer *p, struct tpu_xfer_reg *r, uint32_t *rkey);
/* a->lock held: @r deregistered: its MRs in peers' domains go (rkeys die). */
void tpu__xfer_rdma_reg_drop_remote(struct tpu_agent *a, struct tpu_xfer_reg *r);
/* a->lock held: and its local MR (once no post is between its check and its post). */
void tpu__xfer_rdma_reg_drop_local(struct tpu_xfer_reg *r);
/* @p failed: its link stops. */
void tpu__xfer_rdma_peer_fail(struct xfer_peer *p, tpu_status st);
/* @p is freed: so is its link. */
void tpu__xfer_rdma_peer_free(struct xfer_peer *p);
/* The agent goes: its device and thread (after every peer was freed). */
void tpu__xfer_rdma_agent_free(struct tpu_agent *a);

/* agent.c */
tpu_status tpu__xfer_agent_check(const struct tpu_agent *a);
/* Send a message (copies @hdr and every payload); 0 or the pipe's error. */
tpu_status tpu__xfer_send(struct xfer_peer *p, const struct xfer_hdr *h, const void *const *data,
			  const size_t *len, size_t n);
/* @r's notification message to @p. */
tpu_status tpu__xfer_send_notif(struct xfer_peer *p, const struct tpu_xfer_req *r);
/* @ts: CLOCK_REALTIME @ms from now, for pthread_cond_timedwait(). */
void tpu__xfer_deadline_in(struct timespec *ts, int ms);
/* Send with payloads the caller keeps valid until @done(arg, status). */
tpu_status tpu__xfer_send_ref(struct xfer_peer *p, const struct xfer_hdr *h,
			      const void *const *data, const size_t *len, size_t n,
			      void (*done)(void *arg, tpu_status st), void *arg);
/* Mark @p failed with @st (first error wins), fail what waits on it. */
void tpu__xfer_peer_fail(struct xfer_peer *p, tpu_status st);
/* Close @p's pipe once (its callbacks then fail). */
void tpu__xfer_peer_close(struct xfer_peer *p);
/* Resume reading an in peer once the response it held went out. */
void tpu__xfer_serve_resume(struct xfer_peer *p);
/* Context thread: give back @bytes of a->serve_bytes, read on what waited for them. */
void tpu__xfer_serve_release(struct tpu_agent *a, uint64_t bytes);
/* The out peer for agent @id at @url, connected (and HELLO sent) if new. */
tpu_status tpu__xfer_peer_out(struct tpu_agent *a, const uint8_t id[XFER_ID_LEN],
			      const char *url, struct xfer_peer **out);
void tpu__xfer_notif_push(struct tpu_agent *a, const char *peer, const void *msg, size_t len);

/* xfer_msg.c: descriptor limits per message type; and dispatch. */
tpu_status tpu__xfer_in_check(struct xfer_peer *p, const struct xfer_hdr *h,
			      const struct tpu_message *desc);
void tpu__xfer_in_dispatch(struct xfer_peer *p);

/* xfer_reg.c */
struct tpu_xfer_reg *tpu__xfer_reg_find(struct tpu_agent *a, uint64_t id);	/* a->lock */
void tpu__xfer_regs_free(struct tpu_agent *a);
void tpu__xfer_reg_forget_peer(struct tpu_agent *a, struct xfer_peer *p);	/* a->lock */
void tpu__xfer_revoke_acked(struct xfer_peer *p, uint64_t reg);
/* Drop a request's reference (a->lock held); frees a deregistered one. */
void tpu__xfer_reg_put(struct tpu_xfer_reg *r);
/* Register @len bytes at @addr; @map, @map_len: a mapping @reg then owns (or NULL). */
tpu_status tpu__xfer_register(struct tpu_agent *a, void *addr, size_t len, unsigned int access,
			      void *map, size_t map_len, struct tpu_xfer_reg **out);
/* xfer_cuda.c: the target's copy of @len bytes at @off of @r from (@in) or to @host. */
tpu_status tpu__xfer_reg_copy(struct tpu_xfer_reg *r, uint64_t off, void *host, uint64_t len,
			      bool in);

/* xfer_blob.c */
struct xfer_blob {
	unsigned int access;
	uint8_t agent[XFER_ID_LEN];
	uint64_t reg;
	uint64_t key;
	uint64_t addr;
	uint64_t len;
	uint32_t pid;
	char boot_id[40];
	char url_shm[XFER_URL_MAX];
	char url_tcp[XFER_URL_MAX];
};
size_t tpu__xfer_blob_put(const struct xfer_blob *b, uint8_t *buf, size_t size);
tpu_status tpu__xfer_blob_get(const void *buf, size_t len, struct xfer_blob *b);

/* xfer_load.c */
void tpu__xfer_load_answered(struct xfer_peer *p, const struct xfer_hdr *h);
/* a->lock held: a request that named @rm is freed (the last frees an unloaded one). */
void tpu__xfer_remote_put(struct tpu_xfer_remote *rm);
void tpu__xfer_revoke(struct xfer_peer *p, uint64_t reg);

/* xfer_req.c */
void tpu__xfer_req_complete(struct tpu_xfer_req *r, tpu_status st);
/* tpu_agent_destroy(): release the requests the caller left; how many. */
size_t tpu__xfer_reqs_release(struct tpu_agent *a);
/* Check every local registration and remote handle of @r is live. */
tpu_status tpu__xfer_req_live(const struct tpu_xfer_req *r);

/* xfer_req.c: bytes of tcp chunk @c of @r. */
uint64_t tpu__xfer_chunk_bytes(const struct tpu_xfer_req *r, size_t c);

/* xfer_tcp.c */
void tpu__xfer_tcp_resp(struct xfer_peer *p);
void tpu__xfer_tcp_fail_pending(struct xfer_peer *p, tpu_status st);

/* xfer_serve.c */
void tpu__xfer_serve(struct xfer_peer *p);
void tpu__xfer_serve_load(struct xfer_peer *p);

#endif /* TPU_XFER_H */
