// SPDX-License-Identifier: GPL-2.0
/*
 * Grants: one-sided copies between endpoints of a domain (TP_FEAT_GRANT).
 *
 * A grant names a range of the granter's region, the access allowed and
 * the one endpoint (by id) that may use it.  TP_IOC_COPY resolves and
 * checks its whole list first, then copies each element between the
 * caller's own address space and the granted pages, in the caller's
 * context.  The granted side is reached through its pinned pages, so the
 * granter's address space is never walked and no ptrace right is involved.
 *
 * Revocation: a grant leaves the domain's table (no new copy finds it),
 * is marked revoked, and synchronize_srcu() waits for the chunk that may be
 * running.  A chunk runs with page faults disabled, so a copier's slow or
 * userfaultfd-backed memory cannot hold a revoke up: it faults its pages
 * in outside the read section and tries again.
 *
 * Lock order: tp_endpoint.grant_lock, then tp_domain.grants' xarray lock.
 */
#include <linux/highmem.h>
#include <linux/mm.h>
#include <linux/pagemap.h>
#include <linux/sched/signal.h>
#include <linux/sizes.h>
#include <linux/slab.h>
#include <linux/srcu.h>
#include <linux/uaccess.h>
#include "tp_internal.h"

/* Bytes copied between two checks for revocation and fatal signals. */
#define TP_GRANT_CHUNK	SZ_1M

DEFINE_STATIC_SRCU(tp_grant_srcu);

static atomic64_t tp_endpoint_ids = ATOMIC64_INIT(0);

/**
 * tp_endpoint_new_id() - the id of a new endpoint.
 *
 * Return: a number never returned before while the module is loaded.
 */
u64 tp_endpoint_new_id(void)
{
	return atomic64_inc_return(&tp_endpoint_ids);
}

/**
 * tp_grant_endpoint_init() - grant state of a new endpoint.
 * @ep:		the endpoint.
 */
void tp_grant_endpoint_init(struct tp_endpoint *ep)
{
	ep->id = tp_endpoint_new_id();
	mutex_init(&ep->grant_lock);
	INIT_LIST_HEAD(&ep->grants);
	ep->nr_grants = 0;
}

/**
 * tp_grant_domain_init() - grant table of a new domain.
 * @dom:	the domain.
 */
void tp_grant_domain_init(struct tp_domain *dom)
{
	xa_init_flags(&dom->grants, XA_FLAGS_ALLOC1);
	dom->next_grant = 0;
}

static void tp_grant_destroy(struct kref *ref)
{
	struct tp_access_grant *g = container_of(ref, struct tp_access_grant, ref);

	tp_region_put(g->region);
	kfree(g);
}

static void tp_grant_put(struct tp_access_grant *g)
{
	kref_put(&g->ref, tp_grant_destroy);
}

/**
 * tp_endpoint_info() - TP_IOC_ENDPOINT_INFO: the endpoint's id and domain.
 * @ep:		the calling endpoint.
 * @arg:	the command; @id and @domain_id are set.
 *
 * Return: 0 or -EINVAL.
 */
int tp_endpoint_info(struct tp_endpoint *ep, struct tp_endpoint_info *arg)
{
	struct tp_domain *dom = tp_endpoint_domain(ep);

	if ((arg->flags & ~TP_ENDPOINT_INFO_FLAGS_ALL) || arg->reserved0 ||
	    memchr_inv(arg->reserved, 0, sizeof(arg->reserved)))
		return -EINVAL;
	arg->id = ep->id;
	arg->domain_id = dom ? dom->id : 0;
	return 0;
}

/* The checks of TP_IOC_GRANT that need no lookup. */
static int tp_grant_check_args(const struct tp_grant *arg)
{
	if ((arg->flags & ~TP_GRANT_FLAGS_ALL) || arg->reserved || arg->id)
		return -EINVAL;
	if (!arg->access || (arg->access & ~TP_ACCESS_ALL))
		return -EINVAL;
	if (!arg->len || !arg->grantee)
		return -EINVAL;
	return 0;
}

/**
 * tp_grant_create() - TP_IOC_GRANT: grant a range of a region.
 * @ep:		the calling endpoint.
 * @arg:	the command; @id is set.
 *
 * Return: 0 or a negative errno as documented in the uapi header.
 */
int tp_grant_create(struct tp_endpoint *ep, struct tp_grant *arg)
{
	struct tp_domain *dom = tp_endpoint_domain(ep);
	struct tp_region *r;
	struct tp_access_grant *g;
	u64 end;
	int err;

	err = tp_grant_check_args(arg);
	if (err)
		return err;
	if (!dom)
		return -ENOLINK;
	r = tp_region_get(ep, arg->region);
	if (!r)
		return -ENOENT;
	if (r->kind == TP_REGION_DMABUF) {
		err = -EOPNOTSUPP;
		goto put_region;
	}
	if (arg->access & ~r->access) {
		err = -EACCES;
		goto put_region;
	}
	if (check_add_overflow(arg->offset, arg->len, &end) || end > r->len) {
		err = -ERANGE;
		goto put_region;
	}
	g = kzalloc(sizeof(*g), GFP_KERNEL_ACCOUNT);
	if (!g) {
		err = -ENOMEM;
		goto put_region;
	}
	kref_init(&g->ref);
	g->region = r;		/* the region reference passes to the grant */
	g->offset = arg->offset;
	g->len = arg->len;
	g->grantee = arg->grantee;
	g->access = arg->access;

	mutex_lock(&ep->grant_lock);
	if (ep->nr_grants >= TP_GRANTS_MAX) {
		err = -ENOSPC;
		goto unlock;
	}
	/*
	 * A release of the handle erases it, then walks our list under
	 * grant_lock: either it is gone now, or that walk will see this grant.
	 */
	if (xa_load(&ep->regions, arg->region) != r) {
		err = -ENOENT;
		goto unlock;
	}
	/* Published last: a copy may find the grant as soon as it is in. */
	err = xa_alloc_cyclic(&dom->grants, &g->id, g, xa_limit_31b,
			      &dom->next_grant, GFP_KERNEL_ACCOUNT);
	if (err < 0)
		goto unlock;
	list_add_tail(&g->node, &ep->grants);
	ep->nr_grants++;
	mutex_unlock(&ep->grant_lock);
	arg->id = g->id;
	return 0;

unlock:
	mutex_unlock(&ep->grant_lock);
	if (err == -EBUSY)	/* the id space is full */
		err = -ENOSPC;
	tp_grant_put(g);
	return err;

put_region:
	tp_region_put(r);
	return err;
}

/*
 * Wait until no copy chunk can touch the grants on @gone any more, then
 * drop the table's references.  Called with no lock held.
 */
static void tp_grant_finish_revoke(struct list_head *gone)
{
	struct tp_access_grant *g, *tmp;

	if (list_empty(gone))
		return;
	list_for_each_entry(g, gone, node)
		WRITE_ONCE(g->revoked, true);
	synchronize_srcu(&tp_grant_srcu);
	list_for_each_entry_safe(g, tmp, gone, node) {
		list_del(&g->node);
		tp_grant_put(g);
	}
}

/* Take @g off its domain's table and @ep's list; @ep->grant_lock held. */
static void tp_grant_unpublish(struct tp_endpoint *ep, struct tp_domain *dom,
			       struct tp_access_grant *g, struct list_head *gone)
{
	lockdep_assert_held(&ep->grant_lock);
	xa_erase(&dom->grants, g->id);
	list_move_tail(&g->node, gone);
	ep->nr_grants--;
}

/**
 * tp_grant_revoke() - TP_IOC_GRANT_REVOKE: end one of the caller's grants.
 * @ep:		the calling endpoint.
 * @arg:	the command.
 *
 * Return: 0, -EINVAL, -ENOLINK or -ENOENT.
 */
int tp_grant_revoke(struct tp_endpoint *ep, const struct tp_grant_revoke *arg)
{
	struct tp_domain *dom = tp_endpoint_domain(ep);
	struct tp_access_grant *g;
	LIST_HEAD(gone);
	int err = -ENOENT;

	if (arg->flags & ~TP_GRANT_REVOKE_FLAGS_ALL)
		return -EINVAL;
	if (!dom)
		return -ENOLINK;
	mutex_lock(&ep->grant_lock);
	/* Only this endpoint's grants are on its list. */
	list_for_each_entry(g, &ep->grants, node) {
		if (g->id == arg->id) {
			tp_grant_unpublish(ep, dom, g, &gone);
			err = 0;
			break;
		}
	}
	mutex_unlock(&ep->grant_lock);
	tp_grant_finish_revoke(&gone);
	return err;
}

/**
 * tp_grant_revoke_region() - end the grants of a region whose handle goes.
 * @ep:		the endpoint releasing the handle.
 * @r:		the region.
 */
void tp_grant_revoke_region(struct tp_endpoint *ep, struct tp_region *r)
{
	struct tp_domain *dom = tp_endpoint_domain(ep);
	struct tp_access_grant *g, *tmp;
	LIST_HEAD(gone);

	if (!dom)
		return;
	mutex_lock(&ep->grant_lock);
	list_for_each_entry_safe(g, tmp, &ep->grants, node) {
		if (g->region == r)
			tp_grant_unpublish(ep, dom, g, &gone);
	}
	mutex_unlock(&ep->grant_lock);
	tp_grant_finish_revoke(&gone);
}

/**
 * tp_grant_revoke_all() - end every grant of an endpoint being released.
 * @ep:		the endpoint.
 */
void tp_grant_revoke_all(struct tp_endpoint *ep)
{
	struct tp_domain *dom = tp_endpoint_domain(ep);
	struct tp_access_grant *g, *tmp;
	LIST_HEAD(gone);

	if (dom) {
		mutex_lock(&ep->grant_lock);
		list_for_each_entry_safe(g, tmp, &ep->grants, node)
			tp_grant_unpublish(ep, dom, g, &gone);
		mutex_unlock(&ep->grant_lock);
		tp_grant_finish_revoke(&gone);
	}
	mutex_destroy(&ep->grant_lock);
}

/* The grant @id of @dom with a reference, or NULL. */
static struct tp_access_grant *tp_grant_get(struct tp_domain *dom, u32 id)
{
	struct tp_access_grant *g;

	xa_lock(&dom->grants);
	g = xa_load(&dom->grants, id);
	if (g)
		kref_get(&g->ref);
	xa_unlock(&dom->grants);
	return g;
}

/*
 * Check element @e for endpoint @ep and resolve its grant into *@gp (a
 * reference).  Nothing is looked up for a malformed element.
 */
static int tp_copy_check(struct tp_endpoint *ep, struct tp_domain *dom,
			 const struct tp_copy_elem *e, struct tp_access_grant **gp)
{
	u32 need;
	u64 end;
	struct tp_access_grant *g;

	if (e->flags != TP_COPY_READ && e->flags != TP_COPY_WRITE)
		return -EINVAL;
	if (e->addr + e->len < e->addr)
		return -EINVAL;
	g = tp_grant_get(dom, e->grant);
	if (!g)
		return -ENOENT;
	*gp = g;
	need = e->flags == TP_COPY_READ ? TP_ACCESS_READ : TP_ACCESS_WRITE;
	if (g->grantee != ep->id || !(g->access & need))
		return -EACCES;
	if (check_add_overflow(e->offset, e->len, &end) || end > g->len)
		return -ERANGE;
	if (!access_ok(u64_to_user_ptr(e->addr), e->len))
		return -EFAULT;
	return 0;
}

/*
 * Bytes from page @idx, offset @pofs, of @r that are one kernel span:
 * consecutive pages, and within one folio, as hardened usercopy refuses a
 * copy that runs from one folio into the next.
 */
static size_t tp_grant_span(const struct tp_region *r, unsigned long idx,
			    unsigned int pofs, size_t max)
{
	size_t bytes = PAGE_SIZE - pofs;
	struct folio *folio;
	unsigned long pfn;

	if (IS_ENABLED(CONFIG_HIGHMEM))
		return min(bytes, max);
	folio = page_folio(r->pages[idx]);
	max = min(max, folio_size(folio) -
		  offset_in_folio(folio, page_address(r->pages[idx]) + pofs));
	pfn = page_to_pfn(r->pages[idx]);
	while (bytes < max && idx + 1 < r->nr_pages &&
	       page_to_pfn(r->pages[idx + 1]) == pfn + 1) {
		idx++;
		pfn++;
		bytes += PAGE_SIZE;
	}
	return min(bytes, max);
}

/*
 * One span, under the read section, with page faults disabled.
 * Return: bytes not copied (a local fault), or -ENOENT when revoked.
 */
static long tp_grant_copy_span(struct tp_access_grant *g, u64 roff, void __user *u,
			       size_t n, bool to_user)
{
	struct page *page = g->region->pages[roff >> PAGE_SHIFT];
	unsigned long left;
	void *k;
	int idx;

	idx = srcu_read_lock(&tp_grant_srcu);
	if (READ_ONCE(g->revoked)) {
		srcu_read_unlock(&tp_grant_srcu, idx);
		return -ENOENT;
	}
	k = kmap_local_page(page) + offset_in_page(roff);
	pagefault_disable();
	if (to_user)
		left = __copy_to_user_inatomic(u, k, n);
	else
		left = __copy_from_user_inatomic(k, u, n);
	pagefault_enable();
	kunmap_local(k);
	if (!to_user) {
		/* The span is consecutive pages of one folio (tp_grant_span). */
		unsigned long i, pages = DIV_ROUND_UP(offset_in_page(roff) + n, PAGE_SIZE);

		for (i = 0; i < pages; i++)
			flush_dcache_page(nth_page(page, i));
	}
	srcu_read_unlock(&tp_grant_srcu, idx);
	return left;
}

/* Copy element @e through grant @g. */
static int tp_copy_one(struct tp_access_grant *g, const struct tp_copy_elem *e)
{
	const bool to_user = e->flags == TP_COPY_READ;
	struct tp_region *r = g->region;
	void __user *u = u64_to_user_ptr(e->addr);
	u64 roff = r->first + g->offset + e->offset;
	u64 left = e->len, since_check = 0;

	while (left) {
		size_t n = tp_grant_span(r, roff >> PAGE_SHIFT,
					 offset_in_page(roff),
					 min_t(u64, left, TP_GRANT_CHUNK));
		long miss = tp_grant_copy_span(g, roff, u, n, to_user);
		size_t want;

		if (miss < 0)
			return miss;
		n -= miss;
		roff += n;
		u += n;
		left -= n;
		since_check += n;
		if (miss) {
			/* Fault the next page in with no lock held, retry. */
			want = min_t(size_t, miss, PAGE_SIZE - offset_in_page(u));
			if ((to_user ? fault_in_writeable(u, want) :
				       fault_in_readable(u, want)) == want)
				return -EFAULT;
		}
		if (miss || since_check >= TP_GRANT_CHUNK) {
			since_check = 0;
			if (fatal_signal_pending(current))
				return -EINTR;
			cond_resched();
		}
	}
	return 0;
}

/**
 * tp_grant_copy() - TP_IOC_COPY: copy a list to and from granted ranges.
 * @ep:		the calling endpoint, the grantee.
 * @arg:	the command.
 *
 * Context: process context of the caller's mm; sleeps.
 * Return: 0 or a negative errno as documented in the uapi header.
 */
int tp_grant_copy(struct tp_endpoint *ep, const struct tp_copy *arg)
{
	struct tp_domain *dom = tp_endpoint_domain(ep);
	struct tp_copy_elem *elems;
	struct tp_access_grant **grants;
	u64 total = 0;
	u32 i, n = arg->nr_elems;
	int err = 0;

	if ((arg->flags & ~TP_COPY_FLAGS_ALL) ||
	    memchr_inv(arg->reserved, 0, sizeof(arg->reserved)) || !n)
		return -EINVAL;
	if (n > TP_COPY_MAX_ELEMS)
		return -E2BIG;
	if (!dom)
		return -ENOLINK;
	elems = kvmalloc_array(n, sizeof(*elems), GFP_KERNEL_ACCOUNT);
	grants = kvcalloc(n, sizeof(*grants), GFP_KERNEL_ACCOUNT);
	if (!elems || !grants) {
		err = -ENOMEM;
		goto out;
	}
	if (copy_from_user(elems, u64_to_user_ptr(arg->elems),
			   array_size(n, sizeof(*elems)))) {
		err = -EFAULT;
		goto out;
	}
	/* The whole list passes before any byte moves. */
	for (i = 0; i < n; i++) {
		err = tp_copy_check(ep, dom, &elems[i], &grants[i]);
		if (err)
			goto out;
		total += elems[i].len;
		if (total > TP_COPY_MAX_BYTES) {
			err = -E2BIG;
			goto out;
		}
	}
	for (i = 0; i < n && !err; i++)
		err = tp_copy_one(grants[i], &elems[i]);
out:
	if (grants) {
		for (i = 0; i < n && grants[i]; i++)
			tp_grant_put(grants[i]);
	}
	kvfree(grants);
	kvfree(elems);
	return err;
}
