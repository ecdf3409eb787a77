// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The shared segment's single-copy path through the module: a member
 * registers the buffers others read (or write) as module regions, grants
 * each to every other member's endpoint with the one access it needs, and
 * the others copy with TP_IOC_COPY.  No ptrace permission between members
 * is used: the grant alone lets a member reach exactly those bytes.
 *
 * Trust: the endpoint ids and grant ids in the segment are a peer's
 * word.  An id that is not the peer's endpoint only makes our grant
 * useless (the kernel lets nobody else in the domain use it, and only
 * the host's members, who hold the domain's descriptor, are in it); a
 * grant id that is not a grant of that peer to this endpoint with that
 * access makes the kernel refuse the copy (-ENOENT, -EACCES), which fails
 * the call.  Offsets are ours, computed from the call every member
 * described the same, and the kernel bounds them by the grant.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "coll_shm.h"
#include "dev/dev.h"

static _Atomic uint64_t way_count[SHM_WAYS];
uint32_t tpu__shm_kmod_grant_skew;

uint64_t tpu__shm_coll_way_count(int way)
{
	return way >= 0 && way < SHM_WAYS ? atomic_load(&way_count[way]) : 0;
}

void tpu__shm_coll_count_way(int way)
{
	atomic_fetch_add_explicit(&way_count[way], 1, memory_order_relaxed);
}

static tpu_status kioctl(int fd, unsigned long cmd, void *arg)
{
	int rc;

	do
		rc = ioctl(fd, cmd, arg);
	while (rc < 0 && errno == EINTR);
	return rc < 0 ? -errno : 0;
}

tpu_status tpu__shm_kmod_open(int *fd)
{
	struct tp_info info = { 0 };
	tpu_status st = tpu__open_device(NULL, fd);

	if (st)
		return st;
	st = kioctl(*fd, TP_IOC_GET_INFO, &info);
	if (!st && !(info.features & TP_FEAT_GRANT))
		st = -EOPNOTSUPP;
	if (st) {
		close(*fd);
		*fd = -1;
	}
	return st;
}

tpu_status tpu__shm_kmod_domain(int fd, int *dom)
{
	struct tp_domain_create dc = { 0 };
	tpu_status st = kioctl(fd, TP_IOC_DOMAIN_CREATE, &dc);

	*dom = st ? -1 : dc.fd;
	return st;
}

tpu_status tpu__shm_kmod_join(struct tpu__shm_coll *s, int fd, int dom)
{
	struct tp_domain_attach at = { .fd = dom };
	struct tp_endpoint_info ei = { 0 };
	tpu_status st;

	if (!s || fd < 0 || dom < 0) {
		if (fd >= 0)
			close(fd);
		return -EINVAL;
	}
	if (s->kfd >= 0)
		close(s->kfd);
	s->kfd = fd;
	st = kioctl(fd, TP_IOC_DOMAIN_ATTACH, &at);
	if (!st)
		st = kioctl(fd, TP_IOC_ENDPOINT_INFO, &ei);
	if (!st && (!ei.id || ei.domain_id != at.id))
		st = -EPROTO;
	shm_line(s, s->rank)->ep = st ? 0 : ei.id;
	return st;
}

void tpu__shm_kmod_use(struct tpu__shm_coll *s, bool on)
{
	if (!s)
		return;
	if (on && s->kfd >= 0) {
		s->eps = calloc((size_t)s->n, sizeof(*s->eps));
		if (s->eps)
			for (int r = 0; r < s->n; r++)
				s->eps[r] = shm_line(s, r)->ep;
	}
	/*
	 * Without memory for the ids this member grants nothing: the others
	 * then read its buffers with process_vm_readv (its own reads still go
	 * through their grants).
	 */
	s->kmod = on && s->kfd >= 0;
	if (!s->kmod && s->kfd >= 0) {
		close(s->kfd);
		s->kfd = -1;
	}
}

/*
 * Register @len bytes at @addr with @access; grant them (@gaccess) to
 * member @only, or with -1 to every other member.
 */
static void expose(struct tpu__shm_coll *s, int which, const void *addr, size_t len,
		   uint32_t access, uint32_t gaccess, struct shm_grants *tab, bool out, int only)
{
	struct tp_region_register reg = { .addr = (uintptr_t)addr, .len = len,
					   .access = access };
	tpu_status st = kioctl(s->kfd, TP_IOC_REGION_REGISTER, &reg);

	if (st) {
		tpu__log_debug("coll: shm: member %d cannot register %zu bytes with the module "
			       "(%s): its peers read them with process_vm_readv", s->rank, len,
			       tpu_strerror(st));
		return;
	}
	s->regions[which] = reg.handle;
	for (int r = 0; r < s->n; r++) {
		struct tp_grant g = { .grantee = s->eps ? s->eps[r] : 0, .len = len,
				      .region = reg.handle, .access = gaccess };

		if (r == s->rank || !g.grantee || (only >= 0 && r != only))
			continue;
		st = kioctl(s->kfd, TP_IOC_GRANT, &g);
		if (st) {
			tpu__log_debug("coll: shm: member %d cannot grant to member %d: %s",
				       s->rank, r, tpu_strerror(st));
			continue;
		}
		if (out)
			tab[r].out = g.id + tpu__shm_kmod_grant_skew;
		else
			tab[r].in = g.id + tpu__shm_kmod_grant_skew;
	}
}

void tpu__shm_kmod_expose(struct tpu__shm_coll *s, uint64_t call, const struct tpu__shm_call *c,
			  size_t es)
{
	struct shm_grants tab[TPU__SHM_MAX_MEMBERS];
	size_t bytes = c->count * es;
	bool root = s->rank == c->root;

	memset(tab, 0, sizeof(tab));
	switch (c->type) {
	case TPU_COLL_BROADCAST:
		/*
		 * The root's input, read by all; where it is split, a
		 * receiver's output too, its share written by the root alone.
		 */
		if (root)
			expose(s, 0, c->in, bytes, TP_ACCESS_READ, TP_ACCESS_READ, tab, false, -1);
		else if (shm_bcast_split(s->n, bytes))
			expose(s, 1, c->out, bytes, TP_ACCESS_WRITE, TP_ACCESS_WRITE, tab, true,
			       c->root);
		break;
	case TPU_COLL_GATHER:
	case TPU_COLL_REDUCE_SCATTER:
		expose(s, 0, c->in, bytes, TP_ACCESS_READ, TP_ACCESS_READ, tab, false, -1);
		break;
	default:
		/*
		 * The output is written after it is registered, before the
		 * others read it: pinned for writing, so that the pages the
		 * module reads are the ones this member writes (a read pin of
		 * an untouched page would keep the zero page).  First: in
		 * place, the input's read pin then finds the same pages.
		 */
		expose(s, 1, c->out, bytes, TP_ACCESS_ALL, TP_ACCESS_READ, tab, true, -1);
		expose(s, 0, c->in, bytes, TP_ACCESS_READ, TP_ACCESS_READ, tab, false, -1);
		break;
	}
	memcpy(shm_slot(s, s->rank, call), tab, (size_t)s->n * sizeof(tab[0]));
}

void tpu__shm_kmod_end(struct tpu__shm_coll *s)
{
	for (int i = 0; i < 2; i++) {
		struct tp_region_release rel = { .handle = s->regions[i] };

		/* The release ends every grant of the region before it returns. */
		if (s->regions[i])
			kioctl(s->kfd, TP_IOC_REGION_RELEASE, &rel);
		s->regions[i] = 0;
	}
}

uint32_t tpu__shm_kmod_grant(const struct tpu__shm_coll *s, int r, uint64_t call, bool out)
{
	struct shm_grants g;

	if (!s->kmod)
		return 0;
	memcpy(&g, shm_slot(s, r, call) + (size_t)s->rank * sizeof(g), sizeof(g));
	return out ? g.out : g.in;
}

tpu_status tpu__shm_kmod_copy(struct tpu__shm_coll *s, uint32_t grant, uint64_t offset,
			      void *buf, size_t len, bool write)
{
	/* TP_COPY_MAX_BYTES per list: elements of 1 GiB, as many as a list takes. */
	struct tp_copy_elem e[4];
	size_t done = 0;
	tpu_status st = 0;

	while (done < len && !st) {
		struct tp_copy cp = { .elems = (uintptr_t)e };

		for (; done < len && cp.nr_elems < 4; cp.nr_elems++) {
			size_t piece = len - done < (1u << 30) ? len - done : (1u << 30);

			e[cp.nr_elems] = (struct tp_copy_elem){
				.addr = (uintptr_t)buf + done, .offset = offset + done,
				.len = piece, .grant = grant,
				.flags = write ? TP_COPY_WRITE : TP_COPY_READ };
			done += piece;
		}
		st = kioctl(s->kfd, TP_IOC_COPY, &cp);
	}
	return st;
}
