// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The kmod backend: the module copies, checking every element against a
 * grant (TP_IOC_GRANT, TP_IOC_COPY).  An agent joins a module domain with
 * tpu_agent_use_domain(); the domain's descriptor is the capability, so
 * only processes the application handed it to take part.
 *
 * Trust: a loader sends its endpoint id with LOAD.  The target grants its
 * registration to that id; the kernel lets only the endpoint with that id,
 * attached to the same domain, use the grant, so a false id gains the
 * liar nothing.  The grant id in the answer is checked by a zero-length
 * copy, which the kernel refuses unless the grant exists, is ours, and
 * allows the access the answer claims.  Deregistration releases the
 * module region, which ends its grants before it returns (no copy lands
 * afterwards), before the loaders are even told.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "xfer.h"
#include "dev/dev.h"

static tpu_status kmod_ioctl(int fd, unsigned long cmd, void *arg)
{
	return ioctl(fd, cmd, arg) < 0 ? -errno : 0;
}

TPU_API tpu_status tpu_agent_use_domain(struct tpu_agent *a, int domain_fd)
{
	struct tp_info info = { 0 };
	struct tp_domain_attach at = { .fd = domain_fd };
	struct tp_endpoint_info ei = { 0 };
	tpu_status st = tpu__xfer_agent_check(a);
	int fd;

	if (st)
		return st;
	if (domain_fd < 0)
		return -EBADF;
	st = tpu__open_device(NULL, &fd);
	if (st)
		return st;
	st = kmod_ioctl(fd, TP_IOC_GET_INFO, &info);
	if (!st && !(info.features & TP_FEAT_GRANT))
		st = -EOPNOTSUPP;
	if (!st)
		st = kmod_ioctl(fd, TP_IOC_DOMAIN_ATTACH, &at);
	if (!st)
		st = kmod_ioctl(fd, TP_IOC_ENDPOINT_INFO, &ei);
	if (!st) {
		pthread_mutex_lock(&a->lock);
		if (a->kmod_id) {
			st = -EBUSY;
		} else {
			a->kmod_fd = fd;
			a->kmod_id = ei.id;
			a->kmod_domain = ei.domain_id;
		}
		pthread_mutex_unlock(&a->lock);
	}
	if (st) {
		tpu__log_debug("xfer: no kmod for agent %s: %s", a->name, tpu_strerror(st));
		close(fd);
	}
	return st;
}

/* a->lock held: remember grant @id of an application's region, to revoke it later. */
static tpu_status kmod_note_grant(struct tpu_xfer_reg *r, uint32_t id)
{
	if (r->nkmod_grants == r->kmod_grants_cap) {
		size_t cap = r->kmod_grants_cap ? 2 * r->kmod_grants_cap : 4;
		uint32_t *n = realloc(r->kmod_grants, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		r->kmod_grants = n;
		r->kmod_grants_cap = cap;
	}
	r->kmod_grants[r->nkmod_grants++] = id;
	return 0;
}

/* a->lock held: grant @r to the module endpoint @grantee; the grant id or 0. */
uint32_t tpu__xfer_kmod_grant(struct tpu_agent *a, struct tpu_xfer_reg *r, uint64_t grantee)
{
	struct tp_grant g = { .grantee = grantee, .len = r->len, .access = r->access };
	int fd = a->kmod_fd;
	tpu_status st = 0;

	if (!a->kmod_id || !grantee || !(a->backends & TPU_XFER_BACKEND_KMOD))
		return 0;
	if (r->kmod_app) {
		/* The application's region, granted through its own endpoint: no second pin. */
		fd = r->kmod_app_fd;
		g.offset = r->kmod_offset;
	} else if (!r->kmod_pinned) {
		struct tp_region_register reg = {
			.addr = (uintptr_t)r->addr, .len = r->len, .access = r->access,
		};

		st = kmod_ioctl(a->kmod_fd, TP_IOC_REGION_REGISTER, &reg);
		if (!st) {
			r->kmod_region = reg.handle;
			r->kmod_pinned = true;
		}
	}
	if (!st) {
		g.region = r->kmod_region;
		st = kmod_ioctl(fd, TP_IOC_GRANT, &g);
	}
	if (!st && r->kmod_app) {
		st = kmod_note_grant(r, g.id);
		if (st) {
			struct tp_grant_revoke rv = { .id = g.id };

			kmod_ioctl(fd, TP_IOC_GRANT_REVOKE, &rv);
		}
	}
	if (st) {
		tpu__log_debug("xfer: no kmod grant to endpoint %llu: %s",
			       (unsigned long long)grantee, tpu_strerror(st));
		return 0;
	}
	return g.id;
}

/*
 * a->lock held: the registration goes; its grants end before this returns
 * (releasing our pin ends them; an application's region stays its own,
 * so each grant made on it is revoked).
 */
void tpu__xfer_kmod_unpin(struct tpu_agent *a, struct tpu_xfer_reg *r)
{
	struct tp_region_release rel = { .handle = r->kmod_region };
	size_t i;

	if (r->kmod_app) {
		for (i = 0; i < r->nkmod_grants; i++) {
			struct tp_grant_revoke rv = { .id = r->kmod_grants[i] };

			kmod_ioctl(r->kmod_app_fd, TP_IOC_GRANT_REVOKE, &rv);
		}
		free(r->kmod_grants);
		r->kmod_grants = NULL;
		r->nkmod_grants = r->kmod_grants_cap = 0;
		return;
	}
	if (!r->kmod_pinned)
		return;
	kmod_ioctl(a->kmod_fd, TP_IOC_REGION_RELEASE, &rel);
	r->kmod_pinned = false;
}

TPU_API tpu_status tpu_agent_register_region(struct tpu_agent *a, struct tpu_endpoint *ep,
					     uint32_t handle, uint64_t offset, size_t len,
					     void *addr, unsigned int access,
					     struct tpu_xfer_reg **out)
{
	struct tp_endpoint_info ei = { 0 };
	struct tp_grant g = { .region = handle, .offset = offset, .len = len,
			      .access = access ? access : TP_ACCESS_READ };
	struct tp_grant_revoke rv = { 0 };
	int fd = tpu_endpoint_fd(ep);
	uint64_t id, dom;
	tpu_status st = tpu__xfer_agent_check(a);

	if (st)
		return st;
	if (!out)
		return -EINVAL;
	*out = NULL;
	if (fd < 0 || !addr || !len || (uintptr_t)addr + len < (uintptr_t)addr ||
	    (access & ~(TPU_XFER_READ | TPU_XFER_WRITE)))
		return -EINVAL;
	pthread_mutex_lock(&a->lock);
	id = a->kmod_id;
	dom = a->kmod_domain;
	pthread_mutex_unlock(&a->lock);
	/* Loaders reach it through grants of @ep: it must be in the agent's domain. */
	if (!id)
		return -EXDEV;
	st = kmod_ioctl(fd, TP_IOC_ENDPOINT_INFO, &ei);
	if (st)
		return st;
	if (!ei.domain_id || ei.domain_id != dom)
		return -EXDEV;
	/* The kernel, not the caller, says the handle, range and access hold. */
	g.grantee = id;
	st = kmod_ioctl(fd, TP_IOC_GRANT, &g);
	if (st)
		return st;
	rv.id = g.id;
	kmod_ioctl(fd, TP_IOC_GRANT_REVOKE, &rv);
	/* Its mapping is host memory to the other backends (and local pieces). */
	st = tpu_agent_register(a, addr, len, access, out);
	if (st)
		return st;
	pthread_mutex_lock(&a->lock);
	(*out)->kmod_app = true;
	(*out)->kmod_app_fd = fd;
	(*out)->kmod_region = handle;
	(*out)->kmod_offset = offset;
	pthread_mutex_unlock(&a->lock);
	return 0;
}

/*
 * The load's answer named grant @grant with @access: 0 when the kernel
 * agrees (a zero-length copy each way the access allows), else why not.
 */
tpu_status tpu__xfer_kmod_check(struct tpu_agent *a, uint32_t grant, unsigned int access)
{
	struct tp_copy_elem e[2] = { 0 };
	struct tp_copy c = { .elems = (uintptr_t)e };

	if (!a->kmod_id || !grant)
		return TPU_E_NO_TRANSPORT;
	if (access & TPU_XFER_READ) {
		e[c.nr_elems].grant = grant;
		e[c.nr_elems++].flags = TP_COPY_READ;
	}
	if (access & TPU_XFER_WRITE) {
		e[c.nr_elems].grant = grant;
		e[c.nr_elems++].flags = TP_COPY_WRITE;
	}
	return c.nr_elems ? kmod_ioctl(a->kmod_fd, TP_IOC_COPY, &c) : -EPROTO;
}

void tpu__xfer_kmod_close(struct tpu_agent *a)
{
	if (a->kmod_id)
		close(a->kmod_fd);
	a->kmod_id = 0;
}

static tpu_status kmod_attach(struct xfer_peer *p)
{
	return p->a->kmod_id ? 0 : TPU_E_NO_TRANSPORT;
}

/* The handle of @r whose granted range holds pair @i's remote piece. */
static const struct tpu_xfer_remote *remote_of(const struct tpu_xfer_req *r, size_t i)
{
	uint64_t base = (uintptr_t)r->riov[i].iov_base, len = r->riov[i].iov_len;
	unsigned int need = r->op == TPU_XFER_OP_READ ? TPU_XFER_READ : TPU_XFER_WRITE;
	size_t k;

	for (k = 0; k < r->nrms; k++) {
		const struct tpu_xfer_remote *rm = r->rms[k];

		if (rm->grant && (rm->access & need) && base >= rm->addr && base - rm->addr <= rm->len &&
		    len <= rm->len - (base - rm->addr))
			return rm;
	}
	return NULL;
}

/* Every post of @r reuses the element list built here, once. */
static tpu_status kmod_prepare(struct tpu_xfer_req *r)
{
	const uint32_t dir = r->op == TPU_XFER_OP_READ ? TP_COPY_READ : TP_COPY_WRITE;
	struct tp_copy_elem *e = calloc(r->npairs + 1, sizeof(*e));
	size_t i;

	if (!e)
		return -ENOMEM;
	for (i = 0; i < r->npairs; i++) {
		const struct tpu_xfer_remote *rm = remote_of(r, i);

		if (!rm) {
			free(e);
			return TPU_E_REVOKED;
		}
		e[i].addr = (uintptr_t)r->liov[i].iov_base;
		e[i].len = r->liov[i].iov_len;
		e[i].offset = (uintptr_t)r->riov[i].iov_base - rm->addr;
		e[i].grant = rm->grant;
		e[i].flags = dir;
	}
	r->be_data = e;
	return 0;
}

static void kmod_release(struct tpu_xfer_req *r)
{
	free(r->be_data);
	r->be_data = NULL;
}

static tpu_status kmod_copy(struct tpu_xfer_req *r)
{
	struct tp_copy_elem *e = r->be_data;
	size_t i, n;
	tpu_status st = 0;

	for (i = 0; !st && i < r->npairs; i += n) {
		struct tp_copy c = { .elems = (uintptr_t)&e[i] };
		size_t j;

		n = r->npairs - i;
		if (n > TP_COPY_MAX_ELEMS)
			n = TP_COPY_MAX_ELEMS;
		c.nr_elems = (uint32_t)n;
		st = kmod_ioctl(r->a->kmod_fd, TP_IOC_COPY, &c);
		if (st == -ENOENT)
			st = TPU_E_REVOKED;	/* the target deregistered */
		else if (st == -E2BIG) {
			/* More than TP_COPY_MAX_BYTES: one pair a call. */
			for (j = 0; !st && j < n; j++) {
				c.elems = (uintptr_t)&e[i + j];
				c.nr_elems = 1;
				st = kmod_ioctl(r->a->kmod_fd, TP_IOC_COPY, &c);
			}
		}
	}
	return st;
}

static void kmod_post(struct tpu_xfer_req *r)
{
	struct xfer_peer *p = r->peer;
	struct tpu_agent *a = r->a;
	tpu_status st;

	pthread_rwlock_rdlock(&a->local_rw);
	st = atomic_load(&p->error);
	if (!st)
		st = tpu__xfer_req_live(r);
	if (!st)
		st = kmod_copy(r);
	pthread_rwlock_unlock(&a->local_rw);
	if (!st && r->notif)
		st = tpu__xfer_send_notif(p, r);
	tpu__xfer_req_complete(r, st);
}

static bool kmod_cancel(struct tpu_xfer_req *r)
{
	(void)r;
	return false;		/* a post is over when it returns */
}

const struct xfer_backend tpu__xfer_kmod = {
	.name = "kmod",
	.attach = kmod_attach,
	.post = kmod_post,
	.cancel = kmod_cancel,
	.prepare = kmod_prepare,
	.release = kmod_release,
};
