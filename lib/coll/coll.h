/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * lib/coll: collectives as TensorFlow defines them, on the public
 * rendezvous calls only (coll_group.c: a group and an instance checked and
 * ranked; coll_resolve.c: parameters agreed among the members on first
 * run, then cached; coll_exec.c: the executor of a step, its runs and
 * abort; coll_xfer.c: PostToPeer/RecvFromPeer, a run's sends and receives
 * under execution keys; coll_registry.c: implementations by name;
 * coll_ring.c: ring all-reduce; coll_doubling.c: recursive doubling
 * all-reduce for small tensors; coll_tree.c: tree broadcast;
 * coll_gather.c: ring all-gather; coll_reduce_scatter.c: ring
 * reduce-scatter; coll_all_to_all.c: pairwise all-to-all; coll_permute.c:
 * permute; coll_reduce_ops.c: the merge and final
 * ops; coll_dtype.c: element sizes, float16 and bfloat16).  Not installed.
 *
 * Objects: a tpu_coll holds the rendezvous and the cache of resolved
 * instances; an executor (one step) counts its runs; a run is one
 * member's part of one instance, on its own thread, and owns every
 * operation it posted until they all completed.  Lock order: run->lock
 * alone (callbacks of the rendezvous take it); coll->lock and exec->lock
 * are never held across a rendezvous call.
 */
#ifndef TPU_COLL_H
#define TPU_COLL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/base.h"

#define TPU__MAGIC_COLL		0xc011c011U
#define TPU__COLL_VERSION	2	/* 2: the record carries a permutation */
#define TPU__COLL_DEVICE_MAX	256
#define TPU__COLL_KEY_MAX	(2 * TPU__COLL_DEVICE_MAX + 128)
/* Bytes per transfer: chunks are cut into pieces so reducing one overlaps moving the next. */
#define TPU__COLL_PIECE		(256u << 10)

/* What one member knows of an instance, as sent to rank 0 (same ABI on every member). */
struct tpu__coll_record {
	uint32_t version;
	int32_t group_key;
	int32_t group_size;
	int32_t num_tasks;
	int32_t instance_key;
	int32_t type;
	int32_t dtype;
	int32_t op;
	int32_t final_op;
	int32_t num_subdivs;
	int32_t subdiv_offsets[TPU_COLL_MAX_SUBDIVS];
	int32_t ndims;
	int32_t is_source;
	int32_t rank;
	int32_t has_offsets;
	uint64_t count;
	int64_t dims[TPU_COLL_MAX_DIMS];
	uint64_t devices_hash;
	char impl[32];
	char device_type[32];
	int32_t permutation[TPU_COLL_MAX_MEMBERS];	/* permute only */
};

/* Rank 0's answer: the status every member returns, or the completed parameters. */
struct tpu__coll_verdict {
	int32_t status;
	int32_t pad;
	struct tpu_coll_resolved res;
	char reason[192];
};

struct tpu__coll_cached {
	struct tpu__coll_cached *next;
	struct tpu__coll_record rec;
	struct tpu_coll_resolved res;
	bool resolving;
};

/*
 * A group's choice of lanes (coll_lanes.c), made once, at its first run
 * that lanes could serve; kept until the tpu_coll goes.
 */
enum { TPU__LANES_DECIDING = 1, TPU__LANES_ON, TPU__LANES_OFF };
struct tpu__coll_lanes {
	struct tpu__coll_lanes *next;
	int32_t group_key;
	int state;			/* TPU__LANES_* */
	struct tpu__shm_lanes *lanes;	/* TPU__LANES_ON */
	char why[160];			/* TPU__LANES_OFF: the reason, for the log */
};

struct tpu_coll {
	uint32_t magic;			/* TPU__MAGIC_COLL; poisoned by destroy */
	unsigned int fork_gen;		/* tpu__fork_gen() at creation */
	struct tpu_rendezvous *rdv;
	bool owns_rdv;
	pthread_mutex_t lock;
	pthread_cond_t cond;		/* a resolution finished */
	unsigned int execs;		/* under lock: executors not destroyed yet */
	bool doomed;			/* under lock: destroyed; the last executor frees it */
	struct tpu__coll_cached *cache;
	/* Under lock; cond wakes the runs waiting for a group's choice. */
	struct tpu__coll_lanes *lanes;
	bool no_lanes;			/* tpu__coll_no_lanes(): set before any run */
	char last_reason[320];
};

struct tpu_coll_exec {
	uint32_t magic;			/* TPU__MAGIC_EXEC; poisoned by destroy */
	unsigned int fork_gen;		/* tpu__fork_gen() at creation */
	struct tpu_coll *coll;
	int64_t step_id;
	pthread_mutex_t lock;
	pthread_cond_t cond;		/* a run finished */
	unsigned int running;
	tpu_status aborted;
};

struct tpu__coll_run;

/*
 * At every public entry: NULL or not one (-EINVAL), destroyed
 * (TPU_E_DESTROYED), or made before the fork() of this child
 * (TPU_E_FORKED).
 */
tpu_status tpu__coll_check(const struct tpu_coll *coll);

/* One send or receive of a run; listed on the run until it completed and was reaped. */
struct tpu__coll_op {
	struct tpu__coll_op *next;
	struct tpu__coll_run *run;
	bool is_send;
	bool done;
	int subdiv;
	int chunk;			/* sends: the chunk of the buffer it reads, or -1 */
	tpu_status status;
	size_t len;
	size_t key_len;
	char key[TPU__COLL_KEY_MAX];
};

struct tpu__coll_run {
	struct tpu_coll *coll;
	struct tpu_coll_exec *exec;
	/* The group, ranked: devices[r] is rank r's (owned, sorted). */
	int32_t group_key;
	int n;
	int rank;
	char **devices;
	int num_tasks;
	char device_type[32];
	/* The instance, copied. */
	struct tpu_coll_instance inst;
	int64_t dims[TPU_COLL_MAX_DIMS];
	int32_t offsets[TPU_COLL_MAX_SUBDIVS];
	int32_t perm[TPU_COLL_MAX_MEMBERS];
	char impl[32];
	bool is_source;
	struct tpu_coll_resolved res;
	size_t esize;
	const void *in;
	void *out;
	tpu_coll_cb done;
	void *arg;
	uint64_t deadline_ns;
	char reason[256];
	/* Keys without instance or step: the group's choice of lanes (coll_lanes.c). */
	bool group_keys;
	pthread_mutex_t lock;
	pthread_cond_t cond;		/* an operation completed */
	struct tpu__coll_op *ops;
};

/* coll_group.c */
tpu_status tpu__coll_run_init(struct tpu__coll_run *run, const struct tpu_coll_group *group,
			      const struct tpu_coll_instance *instance,
			      const struct tpu_coll_member *member);
void tpu__coll_run_fini(struct tpu__coll_run *run);
void tpu__coll_record_of(const struct tpu__coll_run *run, struct tpu__coll_record *rec);
uint64_t tpu__coll_now_ns(void);

/* coll_lanes.c */
/* The task part of a device name: everything before "/device:". */
size_t tpu__coll_task_len(const char *dev);
/* TPU_COLL_PATH as a tpu_coll group reads it: TPU__LANES_*, or -1 for anything else. */
enum { TPU__LANES_AUTO, TPU__LANES_RDV };
int tpu__coll_lanes_mode(const char *mode);
/*
 * This member's half of a group's choice of lanes: true when every other
 * of the @n ranked @devices is a task whose worker is another process of
 * this host, one per member, its pid proven on this member's pipe to it
 * over @rdv (waiting out a negotiation until @deadline_ns); @pids gets
 * them (this member's own at @rank).  Else false, and @why says why.
 */
bool tpu__coll_lanes_local(struct tpu_rendezvous *rdv, char *const *devices, int n, int rank,
			   uint64_t deadline_ns, pid_t *pids, char *why, size_t size);
/*
 * Run @run's collective on its group's lanes where the group has them:
 * *@ran false when the rendezvous must run it (the group took no lanes,
 * or lanes do not serve this call: all-to-all, permute, a named
 * implementation).  Before resolution (@resolved false) only where the
 * group chose lanes already (a broadcast: and its instance was resolved
 * once, for its source); after it, at a
 * group's first call that lanes could serve, its members decide together
 * (every member alike, or the run fails).
 */
tpu_status tpu__coll_lanes_run(struct tpu__coll_run *run, bool resolved, bool *ran);
/*
 * Keep @coll's groups on the rendezvous, deciding nothing: the world's own
 * groups (lib/boot), whose path the world chose, and which make a tpu_coll
 * per call (a choice would cost its rounds on every call).
 */
void tpu__coll_no_lanes(struct tpu_coll *coll);
/* Choices this process took part in (tests). */
unsigned long tpu__coll_lanes_choices(void);
/* Detach every group's lanes (tpu_coll_destroy). */
void tpu__coll_lanes_forget_all(struct tpu_coll *coll);
/* Calls this process ran on lanes, and those of them the module copied (tests). */
unsigned long tpu__coll_lanes_runs(void);
unsigned long tpu__coll_lanes_kmod_runs(void);

/* coll_resolve.c */
tpu_status tpu__coll_resolve(struct tpu__coll_run *run);
/* After a run on lanes: tpu_coll_resolved() says "lanes" for its instance. */
void tpu__coll_note_lanes(struct tpu__coll_run *run, int source_rank);
void tpu__coll_forget_all(struct tpu_coll *coll);

/* coll_xfer.c: the execution key is "coll/G/I/TAG/SUBDIV/INDEX", frame = step. */
tpu_status tpu__coll_post_send(struct tpu__coll_run *run, int peer, const char *tag, int subdiv,
			       uint64_t index, const void *buf, size_t len, int chunk);
tpu_status tpu__coll_post_recv(struct tpu__coll_run *run, int peer, const char *tag, int subdiv,
			       uint64_t index, void *buf, size_t len, struct tpu__coll_op **op);
/* Wait for a receive of exactly @len bytes and forget it. */
tpu_status tpu__coll_wait_recv(struct tpu__coll_run *run, struct tpu__coll_op *op, size_t len);
/* Wait for the sends of @subdiv (-1: any) reading @chunk (-1: any). */
tpu_status tpu__coll_wait_sends(struct tpu__coll_run *run, int subdiv, int chunk);
/*
 * Wait, without a deadline, for every operation of @subdiv (-1: any) still
 * posted, and free them: after a failure, the abort makes them complete.
 */
void tpu__coll_drain(struct tpu__coll_run *run, int subdiv);

/* coll_registry.c */
typedef tpu_status (*tpu__coll_fn)(struct tpu__coll_run *run);
struct tpu__coll_impl {
	const char *name;
	enum tpu_coll_type type;
	tpu__coll_fn run;
};
const struct tpu__coll_impl *tpu__coll_impl_find(enum tpu_coll_type type, const char *name);
/* Rank 0's choice when the instance names none. */
const char *tpu__coll_impl_choose(enum tpu_coll_type type, size_t bytes, int n, int num_tasks);

/* The implementations. */
tpu_status tpu__coll_ring_allreduce(struct tpu__coll_run *run);
tpu_status tpu__coll_doubling_allreduce(struct tpu__coll_run *run);
tpu_status tpu__coll_tree_broadcast(struct tpu__coll_run *run);
tpu_status tpu__coll_ring_gather(struct tpu__coll_run *run);
tpu_status tpu__coll_ring_reduce_scatter(struct tpu__coll_run *run);
tpu_status tpu__coll_pairwise_all_to_all(struct tpu__coll_run *run);
tpu_status tpu__coll_direct_permute(struct tpu__coll_run *run);

/* coll_reduce_ops.c: @a = @a op @b, element-wise; the final op on @a. */
void tpu__coll_reduce(enum tpu_dtype dtype, enum tpu_reduce_op op, void *a, const void *b,
		      size_t count);
void tpu__coll_final(enum tpu_dtype dtype, enum tpu_final_op op, void *a, size_t count, int n);

/* coll_dtype.c: IEEE binary16 and bfloat16 through float32, rounding to nearest even. */
float tpu__f16_to_f32(uint16_t h);
uint16_t tpu__f32_to_f16(float f);
float tpu__bf16_to_f32(uint16_t h);
uint16_t tpu__f32_to_bf16(float f);
bool tpu__dtype_valid(enum tpu_dtype dtype);

/*
 * coll_shm_seg.c, coll_shm.c: the collectives of members on one host over
 * a segment they share (a memfd one member made; the caller passes it and
 * the members' pids, as the kernel proved them).  Small tensors go through
 * the segment's slots; larger ones are read straight from the members'
 * buffers with process_vm_readv.
 */
struct tpu__shm_coll;
#define TPU__SHM_SLOT		(256u << 10)	/* bytes per member and call */
#define TPU__SHM_MAX_MEMBERS	64
/* How often a member that sleeps on a peer looks whether the peer still lives. */
#define TPU__SHM_LIVENESS_NS	2000000ull

/* A sealed memfd of the segment's size, its header written; *@fd the caller's. */
tpu_status tpu__shm_coll_create(int n, size_t slot, int *fd);
/*
 * Map @fd as member @rank of @n: -EPERM unless it is a memfd sealed
 * against growing and shrinking, -EPROTO unless its size and header are a
 * segment of @n members of @slot bytes.  @pids[r] must be the kernel's
 * word on member r (this member's own: ignored).
 */
tpu_status tpu__shm_coll_attach(int fd, int n, int rank, size_t slot, const pid_t *pids,
				struct tpu__shm_coll **out);
void tpu__shm_coll_detach(struct tpu__shm_coll *s);
/*
 * Descriptor @num of process @pid (a pid the kernel proved), copied into
 * this one (pidfd_getfd(); /proc/PID/fd where that is missing): the kernel
 * checks the right to, as for process_vm_readv.  Nothing about the file is
 * checked here: its attach does (tpu__shm_coll_attach(), tpu__shm_lanes_attach()).
 */
tpu_status tpu__shm_take_fd(pid_t pid, int num, int *fd);

/*
 * Lanes (coll_shm_lanes.c): one sealed memfd of @k complete segments and a
 * table of which instance holds which, for groups whose instances run in
 * any order.  Made, checked and mapped like a segment; a run enters with
 * its instance's key (group key, instance key, step id), joining the lane
 * another member claimed for it or claiming a free one (waiting for one,
 * within @deadline_ns, CLOCK_MONOTONIC, 0: none), runs its one call
 * there, and leaves; the last member to leave frees the lane.
 */
struct tpu__shm_lanes;
#define TPU__SHM_MAX_LANES	64
tpu_status tpu__shm_lanes_create(int n, int k, size_t slot, int *fd);
tpu_status tpu__shm_lanes_attach(int fd, int n, int rank, int k, size_t slot, const pid_t *pids,
				 struct tpu__shm_lanes **out);
void tpu__shm_lanes_detach(struct tpu__shm_lanes *l);
tpu_status tpu__shm_lanes_enter(struct tpu__shm_lanes *l, const uint64_t key[3],
				uint64_t deadline_ns, struct tpu__shm_coll **lane);
tpu_status tpu__shm_lanes_leave(struct tpu__shm_lanes *l, struct tpu__shm_coll *lane);
/*
 * The module path for every lane: an endpoint of its own per lane, joined
 * to domain @dom (tpu__shm_kmod_join); then, alike on every member once
 * all joined or not, tpu__shm_lanes_kmod_use (tpu__shm_kmod_use per lane).
 */
tpu_status tpu__shm_lanes_kmod_join(struct tpu__shm_lanes *l, int dom);
void tpu__shm_lanes_kmod_use(struct tpu__shm_lanes *l, bool on);
/* A mismatch's reason, as the lane that found it keeps it ("" if none). */
void tpu__shm_lanes_why(const struct tpu__shm_lanes *l, char *buf, size_t size);
/* Lanes claimed now (tests: all free once every run left). */
int tpu__shm_lanes_busy(const struct tpu__shm_lanes *l);

struct tpu__shm_call {
	enum tpu_coll_type type;	/* REDUCTION, BROADCAST, GATHER, REDUCE_SCATTER */
	enum tpu_dtype dtype;
	enum tpu_reduce_op op;
	enum tpu_final_op final_op;
	int root;			/* broadcast */
	uint64_t count;
	const void *in;			/* broadcast: the root's buffer */
	void *out;			/* broadcast: the others' buffer */
	uint64_t deadline_ns;		/* CLOCK_MONOTONIC */
	/* Nonzero ends the call (TPU_E_CLOSED) and fails the segment; may be NULL. */
	const atomic_bool *cancel;
};

/*
 * Run one collective; every member calls the same ones in the same order.
 * TPU_E_COLL_MISMATCH when the members called different ones (@reason
 * says how); like any other failure (-ETIMEDOUT, TPU_E_PEER_GONE when a
 * member died, -ECONNABORTED when another member failed) it fails every
 * member's call and every later one (tpu__shm_mismatch fails the segment,
 * as tpu_world_all_reduce's documentation says).
 */
tpu_status tpu__shm_coll_run(struct tpu__shm_coll *s, const struct tpu__shm_call *c,
			     char *reason, size_t size);
/* Which way the last call went: "slots", "cma", "kmod" or "kmod+cma"; for the log. */
const char *tpu__shm_coll_last_way(const struct tpu__shm_coll *s);
/*
 * Fail the segment for every member: this member's later calls fail with
 * @st, the others' pending and later ones with -ECONNABORTED (a caller
 * that failed elsewhere, e.g. a two-level world's leader over the network).
 */
void tpu__shm_coll_fail(struct tpu__shm_coll *s, tpu_status st);
/*
 * Waiters yield their core at every look instead of spinning on it (a
 * two-level world: a host's ranks wait while their leader talks over the
 * network, and its threads and the network stack need the cores).
 */
void tpu__shm_coll_yield(struct tpu__shm_coll *s);

/*
 * The module path (coll_shm_kmod.c): large tensors copied by the module
 * through grants (TP_IOC_GRANT, TP_IOC_COPY) instead of process_vm_readv.
 * An endpoint of /dev/tensorpipe with TP_FEAT_GRANT in *@fd (else
 * TPU_E_NO_DEVICE or -EOPNOTSUPP); a new domain's descriptor in *@dom.
 */
tpu_status tpu__shm_kmod_open(int *fd);
tpu_status tpu__shm_kmod_domain(int fd, int *dom);
/*
 * Attach endpoint @fd to domain @dom and publish its id in this member's
 * line; the segment owns @fd from then on, whatever the result.
 */
tpu_status tpu__shm_kmod_join(struct tpu__shm_coll *s, int fd, int dom);
/*
 * Every member joined (@on; each reads every member's id once, now) or
 * not (the endpoint is closed): the same on every member.
 */
void tpu__shm_kmod_use(struct tpu__shm_coll *s, bool on);

/* Chunk @c of @n over @count elements: balanced, the first count % n one longer. */
static inline size_t tpu__coll_chunk_start(size_t count, int n, int c)
{
	size_t q = count / (size_t)n, r = count % (size_t)n;

	return (size_t)c * q + ((size_t)c < r ? (size_t)c : r);
}

static inline size_t tpu__coll_chunk_len(size_t count, int n, int c)
{
	return tpu__coll_chunk_start(count, n, c + 1) - tpu__coll_chunk_start(count, n, c);
}

#endif /* TPU_COLL_H */
