// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The collectives over a shared segment (coll_shm.h).  Every call starts
 * the same way: a member waits until it may reuse this call's parity (the
 * reuse rule in coll_shm.h), describes the call in its line and says so in
 * its parts word (with the first part of its slot when the call goes
 * through the slots).  No barrier follows: a member compares the
 * description of every member it reads before reading it, and at the end
 * of the call that of every other member that has arrived by then (of two
 * members, the one that arrives second sees the first's), so every pair is
 * compared by at least one of the two.  A difference fails the call and
 * the segment (TPU_E_COLL_MISMATCH, its reason in the header): a member
 * that returned early, a broadcast's root say, fails a later call (at the
 * latest the one that reuses the parity) with that reason.
 *
 * Slots (up to TPU__SHM_SLOT bytes; broadcast and all-gather only below
 * SHM_SINGLE_COPY): written and read in parts of SHM_PART bytes, each
 * announced in the owner's parts word.  Reductions are in rank order, so
 * that all get the same bits: below SHM_SPLIT each member reduces every
 * slot; from it an all-reduce is split (split_all_reduce()).  A member
 * returns once its result is complete, with no phase: the broadcast's
 * root right after filling its slot, the others once they copied or
 * reduced what they need.
 *
 * Larger: no copy through the segment.  All-reduce is a reduce-scatter
 * (member r reduces chunk r reading every other member's input with
 * process_vm_readv, one piece at a time into a buffer that stays in
 * cache) then an all-gather (each reads the other members' finished
 * chunks straight into its output), with a phase between and one at the
 * end, after which no member reads another's buffers any more.  Where the
 * members joined a module domain (coll_shm_kmod.c), those reads and
 * writes go through the grants each member made for the call (its grant
 * table in its slot, written before the first phase) with TP_IOC_COPY,
 * and the regions are released after the last phase.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>

#include "coll_shm.h"

static const char *type_name(int t)
{
	static const char *const names[] = { "all-reduce", "broadcast", "all-gather",
					     "reduce-scatter" };

	return t >= 0 && t < 4 ? names[t] : "?";
}

/* The bytes a member's slot would hold for @c. */
static uint64_t slot_bytes(const struct tpu__shm_call *c, size_t es)
{
	return c->count * es;
}

/*
 * Whether the call goes through the slots.  A broadcast or an all-gather
 * only copies: through a slot that is two copies of every byte (its owner
 * in, each reader out), read straight from the owner's buffer it is one,
 * worth a system call per member from SHM_SINGLE_COPY bytes up.
 */
static bool through_slots(const struct tpu__shm_coll *s, const struct tpu__shm_call *c,
			  size_t es)
{
	uint64_t bytes = slot_bytes(c, es);

	if (c->type == TPU_COLL_BROADCAST || c->type == TPU_COLL_GATHER)
		return bytes < SHM_SINGLE_COPY && bytes <= s->slot;
	return bytes <= s->slot;
}

/*
 * Why rank @r's call (@d) is not this rank's (@mine), in the words the
 * rendezvous path's resolution uses (coll_resolve.c), or false.
 */
static bool differs(const struct tpu__shm_coll *s, const struct shm_desc *mine,
		    const struct shm_desc *d, int r, char *why, size_t size)
{
#define FIELD(f, what) \
	if (mine->f != d->f) { \
		if (why && size) \
			snprintf(why, size, "shm: %s: rank %d has %lld, rank %d has %lld", what, \
				 s->rank, (long long)mine->f, r, (long long)d->f); \
		return true; \
	}
	FIELD(type, "collective type")
	FIELD(dtype, "data type")
	FIELD(count, "element count")
	FIELD(op, "merge op")
	FIELD(final_op, "final op")
	FIELD(root, "root rank")
#undef FIELD
	return false;
}

/*
 * Member @r's description of @call against this member's: a difference
 * fails the call (its reason in @reason) and the segment (the reason in
 * the header, for the members that returned already).
 */
static tpu_status check_one(struct tpu__shm_coll *s, uint64_t call, int r, char *reason,
			    size_t size)
{
	const struct shm_desc *mine = shm_desc_of(s, s->rank, call);
	struct shm_desc d = *shm_desc_of(s, r, call);
	char why[160];

	if (!differs(s, mine, &d, r, why, sizeof(why)))
		return 0;
	if (reason && size)
		snprintf(reason, size, "%s", why);
	return tpu__shm_mismatch(s, why);
}

/*
 * The single-copy path's start: every other member's description of
 * @call (and grant table) once it is there, compared.  No phase: a member
 * that went through the slots with another description publishes none,
 * but it says it arrived, so this member finds the difference instead of
 * waiting for it.
 */
static tpu_status check_all(struct tpu__shm_coll *s, uint64_t call, uint64_t deadline_ns,
			    char *reason, size_t size)
{
	tpu_status st = 0;

	for (int k = 1; k < s->n && !st; k++) {
		int r = (s->rank + k) % s->n;

		st = tpu__shm_wait_ready(s, r, call, 0, deadline_ns);
		if (!st)
			st = check_one(s, call, r, reason, size);
	}
	return st;
}

/* @len bytes of @src written at @addr in process @pid (process_vm_writev). */
static tpu_status cma_write(pid_t pid, uint64_t addr, const void *src, size_t len)
{
	size_t done = 0;

	if (addr > UINTPTR_MAX - len)
		return -EINVAL;
	while (done < len) {
		struct iovec local = { .iov_base = (char *)src + done, .iov_len = len - done };
		struct iovec remote = { .iov_base = (void *)(uintptr_t)(addr + done),
					.iov_len = len - done };
		ssize_t n = process_vm_writev(pid, &local, 1, &remote, 1, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (!n)
			return -EFAULT;
		done += (size_t)n;
	}
	return 0;
}

/*
 * Read @len bytes at @off of member @r's in buffer (or @out buffer) of
 * @call into @buf, or (@write) write them there from @buf: through the
 * member's grant where it made one (coll_shm_kmod.c), else with
 * process_vm_readv/writev at the address it published (at worst that
 * makes us read or write its own memory).  A failure fails the segment.
 */
static tpu_status peer_io(struct tpu__shm_coll *s, int r, uint64_t call, bool out, uint64_t off,
			  void *buf, size_t len, bool write)
{
	const struct shm_desc *d = shm_desc_of(s, r, call);
	uint32_t grant = tpu__shm_kmod_grant(s, r, call, out);
	uint64_t addr = (out ? d->out : d->in) + off;
	tpu_status st;

	if (!len)
		return 0;
	if (grant) {
		st = tpu__shm_kmod_copy(s, grant, off, buf, len, write);
	} else {
		s->fell_back = s->kmod;
		st = addr < off ? -EINVAL : write ? cma_write(s->pids[r], addr, buf, len) :
		     tpu_cma_read(s->pids[r], addr, buf, len);
	}
	if (!st)
		return 0;
	tpu__log_debug("coll: shm: %s %zu bytes of member %d (pid %d) %s: %s",
		       write ? "writing" : "reading", len, r, (int)s->pids[r],
		       grant ? "through its module grant" : "with process_vm_readv/writev",
		       tpu_strerror(st));
	/* A member that failed returns, and its buffers may go, while others read them. */
	if (tpu__shm_aborted(s))
		return tpu__shm_fail(s, tpu__shm_aborted(s), 0);
	/*
	 * An exiting process loses its memory before it is seen to exit: a
	 * read then fails with -EFAULT, and the pidfd says why a moment later.
	 * The module says -ENOENT once the member's file is released.
	 */
	if (st == -ESRCH || tpu__shm_dead(s, r, 100))
		return tpu__shm_fail(s, TPU_E_PEER_GONE, TPU_E_PEER_GONE);
	/* A grant the kernel refuses (-ENOENT, -EACCES, -EINVAL) fails the call, every member's. */
	return tpu__shm_fail(s, st, -ECONNABORTED);
}

static tpu_status pull(struct tpu__shm_coll *s, int r, uint64_t call, bool out, uint64_t off,
		       void *dst, size_t len)
{
	return peer_io(s, r, call, out, off, dst, len, false);
}

/*
 * Whether @a op @b and @b op @a are the same bits: sums and products (of
 * floats too), and every op of integers; not a float min or max, whose
 * loops keep the first operand when the other is a NaN.
 */
static bool commutes(const struct tpu__shm_call *c)
{
	return c->op == TPU_OP_SUM || c->op == TPU_OP_PROD || c->dtype == TPU_DT_INT32 ||
	       c->dtype == TPU_DT_INT64 || c->dtype == TPU_DT_UINT8;
}

/*
 * @acc (@len bytes at element offset @off of the inputs) gets this
 * member's input @mine (at the same offset) op every other member's.
 * Where the op commutes, the first peer's piece is reduced with @mine in
 * the cached buffer and copied out once, instead of copying @mine to @acc
 * first and reducing into it there: a third less memory traffic.
 */
static tpu_status reduce_from_peers(struct tpu__shm_coll *s, uint64_t call,
				    const struct tpu__shm_call *c, size_t es, char *acc,
				    const char *mine, size_t off, size_t len)
{
	bool fused = commutes(c) && s->n > 1 && mine != acc;
	tpu_status st = 0;

	if (!fused && mine != acc)
		memmove(acc, mine, len);
	for (int k = 1; k < s->n && !st; k++) {
		int r = (s->rank + k) % s->n;

		for (size_t at = 0; at < len && !st; at += TPU__COLL_PIECE) {
			size_t piece = len - at < TPU__COLL_PIECE ? len - at : TPU__COLL_PIECE;

			st = pull(s, r, call, false, off * es + at, s->tmp, piece);
			if (st)
				break;
			if (fused && k == 1) {
				tpu__coll_reduce(c->dtype, c->op, s->tmp, mine + at, piece / es);
				memcpy(acc + at, s->tmp, piece);
			} else {
				tpu__coll_reduce(c->dtype, c->op, acc + at, s->tmp, piece / es);
			}
		}
	}
	return st;
}

/* Wait until member @r's slot of @call is written up to byte @end. */
static tpu_status upto(struct tpu__shm_coll *s, int r, uint64_t call, size_t end,
		       uint64_t deadline_ns)
{
	return tpu__shm_wait_ready(s, r, call, (uint32_t)((end + SHM_PART - 1) / SHM_PART),
				   deadline_ns);
}

/*
 * Bytes [@from, @to) of every member's slot reduced, in rank order, into
 * @out (at @from - @base), one part at a time, each as soon as every
 * member wrote it.
 */
static tpu_status reduce_slots(struct tpu__shm_coll *s, uint64_t call,
			       const struct tpu__shm_call *c, size_t es, char *out, size_t base,
			       size_t from, size_t to)
{
	tpu_status st = 0;

	for (size_t at = from, end; at < to && !st; at = end) {
		end = (at / SHM_PART + 1) * SHM_PART;
		if (end > to)
			end = to;
		for (int k = 0; k < s->n && !st; k++)
			st = upto(s, (s->rank + k) % s->n, call, end, c->deadline_ns);
		if (st)
			break;
		memcpy(out + at - base, shm_data(s, 0, call) + at, end - at);
		for (int r = 1; r < s->n; r++)
			tpu__coll_reduce(c->dtype, c->op, out + at - base, shm_data(s, r, call) + at,
					 (end - at) / es);
		tpu__coll_final(c->dtype, c->final_op, out + at - base, (end - at) / es, s->n);
	}
	return st;
}

/* Member @r's slot of @call copied to @out as its parts come. */
static tpu_status copy_slot(struct tpu__shm_coll *s, uint64_t call, int r, char *out,
			    size_t bytes, uint64_t deadline_ns)
{
	tpu_status st = 0;

	for (size_t at = 0, end; at < bytes && !st; at = end) {
		end = at + SHM_PART < bytes ? at + SHM_PART : bytes;
		st = upto(s, r, call, end, deadline_ns);
		if (!st)
			memcpy(out + at, shm_data(s, r, call) + at, end - at);
	}
	return st;
}

/*
 * All-reduce as a reduce-scatter then an all-gather inside the segment:
 * each member reduces only its chunk of every slot, writes the result
 * back over its own slot's chunk (no other member reads that chunk of
 * it), says so, and copies the other chunks from their owners' slots.
 * Each element is still reduced once, in rank order: every member gets
 * the same bits.
 */
static tpu_status split_all_reduce(struct tpu__shm_coll *s, uint64_t call,
				   const struct tpu__shm_call *c, size_t es)
{
	size_t off = tpu__coll_chunk_start(c->count, s->n, s->rank) * es;
	size_t end = off + tpu__coll_chunk_len(c->count, s->n, s->rank) * es;
	char *out = c->out;
	tpu_status st = reduce_slots(s, call, c, es, out, 0, off, end);

	if (st)
		return st;
	memcpy(shm_data(s, s->rank, call) + off, out + off, end - off);
	tpu__shm_ready(s, call, SHM_REDUCED);
	for (int k = 1; k < s->n && !st; k++) {
		int r = (s->rank + k) % s->n;
		size_t o = tpu__coll_chunk_start(c->count, s->n, r) * es;

		st = tpu__shm_wait_ready(s, r, call, SHM_REDUCED, c->deadline_ns);
		if (!st)
			memcpy(out + o, shm_data(s, r, call) + o,
			       tpu__coll_chunk_len(c->count, s->n, r) * es);
	}
	return st;
}

/*
 * Reduce-scatter through the slots: no member reads the writer's own chunk
 * of its slot, so the writer fills in only the others' chunks, chunk
 * (rank + k) % n for k = 1 .. n - 1, each in parts that start at the
 * chunk's start: the next member in rank order finds its chunk written
 * first, and no byte is copied that no one reads.  A member's parts word
 * then counts parts in that order; rs_before() says where a chunk starts
 * in it.
 */
static uint32_t rs_parts(const struct tpu__shm_coll *s, const struct tpu__shm_call *c, size_t es,
			 int chunk)
{
	return (uint32_t)((tpu__coll_chunk_len(c->count, s->n, chunk) * es + SHM_PART - 1) /
			  SHM_PART);
}

/* The parts member @m writes before chunk @chunk's. */
static uint32_t rs_before(const struct tpu__shm_coll *s, const struct tpu__shm_call *c, size_t es,
			  int m, int chunk)
{
	uint32_t parts = 0;

	for (int k = 1; k < s->n && (m + k) % s->n != chunk; k++)
		parts += rs_parts(s, c, es, (m + k) % s->n);
	return parts;
}

/*
 * This member's chunk: its own input and every other member's slot
 * reduced in rank order (the bits the slots gave before), one part at a
 * time as each is written.  The first operand goes through memmove: in
 * place, rank 0's chunk and output are the same bytes.
 */
static tpu_status rs_reduce(struct tpu__shm_coll *s, uint64_t call, const struct tpu__shm_call *c,
			    size_t es)
{
	uint32_t before[TPU__SHM_MAX_MEMBERS];
	size_t off = tpu__coll_chunk_start(c->count, s->n, s->rank) * es;
	size_t len = tpu__coll_chunk_len(c->count, s->n, s->rank) * es;
	char *out = c->out;
	tpu_status st = 0;

	for (int r = 0; r < s->n; r++)
		before[r] = r == s->rank ? 0 : rs_before(s, c, es, r, s->rank);
	for (size_t at = 0, end; at < len && !st; at = end) {
		uint32_t part = (uint32_t)(at / SHM_PART) + 1;

		end = at + SHM_PART < len ? at + SHM_PART : len;
		for (int k = 1; k < s->n && !st; k++) {
			int r = (s->rank + k) % s->n;

			st = tpu__shm_wait_ready(s, r, call, before[r] + part, c->deadline_ns);
		}
		if (st)
			break;
		for (int r = 0; r < s->n; r++) {
			const char *src = r == s->rank ? (const char *)c->in + off + at :
				(const char *)shm_data(s, r, call) + off + at;

			if (!r)
				memmove(out + at, src, end - at);
			else
				tpu__coll_reduce(c->dtype, c->op, out + at, src, (end - at) / es);
		}
		tpu__coll_final(c->dtype, c->final_op, out + at, (end - at) / es, s->n);
	}
	return st;
}

static tpu_status via_slots(struct tpu__shm_coll *s, uint64_t call,
			    const struct tpu__shm_call *c, size_t es)
{
	size_t bytes = c->count * es;
	char *out = c->out;
	tpu_status st = 0;

	switch (c->type) {
	case TPU_COLL_BROADCAST:
		return s->rank == c->root ? 0 :
		       copy_slot(s, call, c->root, out, bytes, c->deadline_ns);
	case TPU_COLL_GATHER:
		/* This member's own part from its input, which is in its cache. */
		memmove(out + (size_t)s->rank * bytes, c->in, bytes);
		for (int k = 1; k < s->n && !st; k++) {
			int r = (s->rank + k) % s->n;

			st = copy_slot(s, call, r, out + (size_t)r * bytes, bytes, c->deadline_ns);
		}
		return st;
	case TPU_COLL_REDUCE_SCATTER:
		return rs_reduce(s, call, c, es);
	default:
		if (bytes >= SHM_SPLIT && s->n > 1)
			return split_all_reduce(s, call, c, es);
		return reduce_slots(s, call, c, es, out, 0, 0, bytes);
	}
}

/*
 * A large broadcast, copied by every member, the root included: chunk r
 * (tpu__coll_chunk_start()) of receiver r's output is written by the root
 * (process_vm_writev), the rest read by r from the root's input.  Each of
 * the n members then moves (n - 1) / n of the bytes: n equal copies
 * instead of n - 1 whole ones while the root idles, which on fewer cores
 * than members is what keeps every core busy to the end (4 members on 2
 * cores: 4 quarter-loads in two rounds, not 3 whole ones in two).
 */
static tpu_status split_broadcast(struct tpu__shm_coll *s, uint64_t call,
				  const struct tpu__shm_call *c, size_t es)
{
	size_t bytes = c->count * es;
	const char *in = c->in;
	char *out = c->out;
	tpu_status st = 0;

	if (!shm_bcast_split(s->n, bytes)) {
		if (s->rank != c->root)
			st = pull(s, c->root, call, false, 0, out, bytes);
		return st;
	}
	if (s->rank == c->root) {
		for (int k = 1; k < s->n && !st; k++) {
			int r = (s->rank + k) % s->n;
			size_t off = tpu__coll_chunk_start(c->count, s->n, r) * es;

			st = peer_io(s, r, call, true, off, (char *)in + off,
				     tpu__coll_chunk_len(c->count, s->n, r) * es, true);
		}
	} else {
		size_t off = tpu__coll_chunk_start(c->count, s->n, s->rank) * es;
		size_t end = off + tpu__coll_chunk_len(c->count, s->n, s->rank) * es;

		st = pull(s, c->root, call, false, 0, out, off);
		if (!st)
			st = pull(s, c->root, call, false, end, out + end, bytes - end);
	}
	return st;
}

static tpu_status via_cma(struct tpu__shm_coll *s, uint64_t call, const struct tpu__shm_call *c,
			  size_t es)
{
	size_t bytes = c->count * es;
	size_t off = tpu__coll_chunk_start(c->count, s->n, s->rank);
	size_t len = tpu__coll_chunk_len(c->count, s->n, s->rank);
	const char *in = c->in;
	char *out = c->out;
	tpu_status st = 0;

	switch (c->type) {
	case TPU_COLL_BROADCAST:
		st = split_broadcast(s, call, c, es);
		break;
	case TPU_COLL_GATHER:
		for (int k = 1; k < s->n && !st; k++) {
			int r = (s->rank + k) % s->n;

			st = pull(s, r, call, false, 0, out + (size_t)r * bytes, bytes);
		}
		if (!st)
			memmove(out + (size_t)s->rank * bytes, in, bytes);
		break;
	case TPU_COLL_REDUCE_SCATTER:
		st = reduce_from_peers(s, call, c, es, out, in + off * es, off, len * es);
		if (!st)
			tpu__coll_final(c->dtype, c->final_op, out, len, s->n);
		break;
	default:
		st = reduce_from_peers(s, call, c, es, out + off * es, in + off * es, off, len * es);
		if (!st) {
			tpu__coll_final(c->dtype, c->final_op, out + off * es, len, s->n);
			/* Every chunk reduced before anyone reads one. */
			st = tpu__shm_barrier(s, c->deadline_ns);
		}
		for (int k = 1; k < s->n && !st; k++) {
			int r = (s->rank + k) % s->n;
			size_t o = tpu__coll_chunk_start(c->count, s->n, r);

			st = pull(s, r, call, true, o * es, out + o * es,
				  tpu__coll_chunk_len(c->count, s->n, r) * es);
		}
		break;
	}
	/* No member returns (and frees its buffers) while another may still read them. */
	return st ? st : tpu__shm_barrier(s, c->deadline_ns);
}

/*
 * This member's input into its slot, one part at a time, each said
 * written, while the others already read the parts before.  A
 * reduce-scatter writes only the other members' chunks (rs_reduce()).
 */
static void fill_range(struct tpu__shm_coll *s, uint64_t call, const char *in, size_t from,
		       size_t to, uint32_t *part)
{
	unsigned char *slot = shm_data(s, s->rank, call);

	for (size_t at = from, end; at < to; at = end) {
		end = at + SHM_PART < to ? at + SHM_PART : to;
		memcpy(slot + at, in + at, end - at);
		tpu__shm_ready(s, call, ++*part);
	}
}

static void fill_slot(struct tpu__shm_coll *s, uint64_t call, const struct tpu__shm_call *c,
		      size_t es)
{
	const char *in = c->in;
	uint32_t part = 0;

	if (c->type != TPU_COLL_REDUCE_SCATTER) {
		fill_range(s, call, in, 0, c->count * es, &part);
	} else {
		for (int k = 1; k < s->n; k++) {
			int r = (s->rank + k) % s->n;
			size_t off = tpu__coll_chunk_start(c->count, s->n, r) * es;

			fill_range(s, call, in, off, off + tpu__coll_chunk_len(c->count, s->n, r) * es,
				   &part);
		}
	}
	if (!part)
		tpu__shm_ready(s, call, 0);
}

/*
 * The reuse rule (coll_shm.h): every other member finished call @call - D,
 * which its parts word says once it names call @call - D + 1.
 */
static tpu_status wait_reuse(struct tpu__shm_coll *s, uint64_t call, uint64_t deadline_ns)
{
	uint64_t back = s->small ? SHM_RING : 2;
	tpu_status st = 0;

	if (call < back)
		return 0;
	for (int k = 1; k < s->n && !st; k++)
		st = tpu__shm_wait_ready(s, (s->rank + k) % s->n, call - back + 1, 0, deadline_ns);
	return st;
}

/*
 * Whether this member reads member @r's slot in call @c: the root's for a
 * broadcast, none when this member's result is empty (a reduce-scatter
 * whose chunk has no element: 4 members, 1 element, all but rank 0), else
 * every member's.
 */
static bool reads_slot_of(const struct tpu__shm_coll *s, const struct tpu__shm_call *c, int r)
{
	if (!c->count)
		return false;
	if (c->type == TPU_COLL_BROADCAST)
		return s->rank != c->root && r == c->root;
	if (c->type == TPU_COLL_REDUCE_SCATTER)
		return tpu__coll_chunk_len(c->count, s->n, s->rank) > 0;
	return true;
}

/*
 * A call through the slots: fill (or just arrive), compare the
 * description of each member this one reads once it is there, read, then
 * compare those of the others that arrived meanwhile.  A member waits for
 * no one it does not read: of two members, the one that arrives second
 * sees the first's description at the latest at its end, so every pair
 * is still compared.  No phase: entering the next call (its parts word)
 * says this member read everything of this one.
 */
static tpu_status slot_call(struct tpu__shm_coll *s, uint64_t call, const struct tpu__shm_call *c,
			    size_t es, char *reason, size_t size)
{
	bool bcast = c->type == TPU_COLL_BROADCAST, checked[TPU__SHM_MAX_MEMBERS] = { false };
	tpu_status st = 0;

	if (!bcast || s->rank == c->root)
		fill_slot(s, call, c, es);
	else
		tpu__shm_ready(s, call, 0);
	for (int k = 1; k < s->n && !st; k++) {
		int r = (s->rank + k) % s->n;

		if (!reads_slot_of(s, c, r))
			continue;
		st = tpu__shm_wait_ready(s, r, call, 0, c->deadline_ns);
		if (!st)
			st = check_one(s, call, r, reason, size);
		checked[r] = true;
	}
	if (!st)
		st = via_slots(s, call, c, es);
	for (int r = 0; r < s->n && !st; r++)
		if (r != s->rank && !checked[r] && tpu__shm_arrived(s, r, call))
			st = check_one(s, call, r, reason, size);
	return st;
}

tpu_status tpu__shm_coll_run(struct tpu__shm_coll *s, const struct tpu__shm_call *c,
			     char *reason, size_t size)
{
	size_t es = tpu_dtype_size(c->dtype);
	uint64_t call;
	struct shm_desc *d;
	bool slots;
	int way;
	tpu_status st;

	if (!s || !c || !es || c->type < TPU_COLL_REDUCTION || c->type > TPU_COLL_REDUCE_SCATTER ||
	    c->root < 0 || c->root >= s->n || c->count > SIZE_MAX / es / (size_t)s->n)
		return -EINVAL;
	/* Another member's failure, seen at the latest here: sticky, a mismatch included. */
	st = s->failed ? s->failed : tpu__shm_aborted(s);
	s->cancel = c->cancel;
	slots = through_slots(s, c, es);
	s->small = slots && slot_bytes(c, es) <= SHM_SMALL;
	if (!st) {
		call = s->calls++;
		st = wait_reuse(s, call, c->deadline_ns);
	}
	if (st) {
		s->failed = st;
		goto out;
	}
	d = shm_desc_of(s, s->rank, call);
	*d = (struct shm_desc){ .type = c->type, .dtype = c->dtype, .op = c->op,
				.final_op = c->final_op, .root = c->root, .count = c->count,
				.in = (uint64_t)(uintptr_t)c->in, .out = (uint64_t)(uintptr_t)c->out };
	s->fell_back = false;
	if (slots) {
		st = slot_call(s, call, c, es, reason, size);
	} else {
		/* The grants are in place before the parts word that lets the others read. */
		if (s->kmod)
			tpu__shm_kmod_expose(s, call, c, es);
		/* Described, grants included: the others may compare and read. */
		tpu__shm_ready(s, call, 0);
		st = check_all(s, call, c->deadline_ns, reason, size);
		if (!st)
			st = via_cma(s, call, c, es);
		/* After the final barrier (or a failure): no member copies through these grants. */
		if (s->kmod)
			tpu__shm_kmod_end(s);
	}
	way = slots ? SHM_WAY_SLOTS : !s->kmod ? SHM_WAY_CMA :
	      s->fell_back ? SHM_WAY_MIXED : SHM_WAY_KMOD;
	s->way = way == SHM_WAY_SLOTS ? "slots" : way == SHM_WAY_CMA ? "cma" :
		 way == SHM_WAY_KMOD ? "kmod" : "kmod+cma";
	if (!st)
		tpu__shm_coll_count_way(way);
out:
	s->cancel = NULL;
	if (st == TPU_E_COLL_MISMATCH && reason && size && !reason[0]) {
		tpu__shm_why(s, reason, size);
		if (!reason[0])
			snprintf(reason, size, "shm: the members called different collectives");
	}
	if (st && st != TPU_E_COLL_MISMATCH && reason && size && !reason[0])
		snprintf(reason, size, "shm: %s of %llu elements, rank %d: %s", type_name(c->type),
			 (unsigned long long)c->count, s->rank, tpu_status_name(st));
	return st;
}

const char *tpu__shm_coll_last_way(const struct tpu__shm_coll *s)
{
	return s ? s->way : "";
}
