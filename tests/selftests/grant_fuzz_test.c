// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Seeded fuzzer for TP_IOC_ENDPOINT_INFO, TP_IOC_GRANT, TP_IOC_GRANT_REVOKE
 * and TP_IOC_COPY.  Two endpoints share a domain, a third sits in its own;
 * each owns registered regions with canary pages around them.  Random
 * calls, valid and mutated, are checked against a model: every return is 0
 * or an errno the command documents; a success must be one the model
 * allows (a revoked or foreign grant never copies); no byte changes outside
 * the destinations of a copy, and a successful copy moves exactly what the
 * model says.  GRANT_FUZZ_SEED and GRANT_FUZZ_ITERS reproduce a run.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "tp_test_require.h"

#define NEP		3	/* 0 prod, 1 cons (same domain), 2 outsider */
#define NREG		3	/* regions per endpoint */
#define MAX_GRANTS	(NEP * TP_GRANTS_MAX)
#define LB_PAGES	16
#define MAX_N		1100
#define KADDR		0xffff888000000000ULL
#define NERR		140

static uint64_t rng;

static uint64_t rnd(void)
{
	/* splitmix64: a good enough stream from any seed, zero included */
	uint64_t z = (rng += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint64_t below(uint64_t n)
{
	return n ? rnd() % n : 0;
}

static bool chance(unsigned int pct)
{
	return below(100) < pct;
}

/* A mapping with a canary page on each side and its shadow copy. */
struct arena {
	uint8_t *map;	/* canary | body | canary */
	uint8_t *body;
	uint8_t *shadow;
	size_t len;	/* of body */
};

struct region {
	struct arena a;
	uint32_t handle;
	uint32_t access;
	bool live;
};

struct endpoint {
	int fd;
	uint64_t id;
	int dom;	/* 0 shared, 1 the outsider's */
	struct region reg[NREG];
};

struct mgrant {
	int granter;
	int reg;
	int dom;
	uint32_t id;
	uint64_t grantee;
	uint64_t off;
	uint64_t len;
	uint32_t access;
	bool live;
};

struct fz {
	struct endpoint ep[NEP];
	int dfd[2];
	struct mgrant g[MAX_GRANTS];
	int ng;
	struct arena lb;	/* local memory of the copies */
	uint8_t *ro;		/* a read-only page */
	uint8_t *hole;		/* a page no access reaches */
	struct tp_copy_elem *el;
	size_t pg;
	/* [command][errno] */
	unsigned long hist[4][NERR];
	unsigned long calls;
	unsigned long releases;
	int reuse;
};

static const char *const cmd_name[4] = {
	"ENDPOINT_INFO", "GRANT", "GRANT_REVOKE", "COPY"
};

static const int ok_errs[4][10] = {
	{ EINVAL },
	{ EINVAL, ENOLINK, ENOENT, EOPNOTSUPP, EACCES, ERANGE, ENOSPC, ENOMEM },
	{ EINVAL, ENOLINK, ENOENT },
	{ EINVAL, E2BIG, ENOLINK, ENOENT, EACCES, ERANGE, EFAULT, ENOMEM,
	  EINTR },
};

static bool documented(int cmd, int ret)
{
	int i;

	if (ret == 0)
		return true;
	for (i = 0; i < 10 && ok_errs[cmd][i]; i++)
		if (ret == -ok_errs[cmd][i])
			return true;
	return false;
}

static void note(struct fz *f, int cmd, int ret)
{
	f->calls++;
	if (ret <= 0 && -ret < NERR)
		f->hist[cmd][-ret]++;
}

static int arena_init(struct arena *a, size_t len, size_t pg, uint8_t fill)
{
	a->len = len;
	a->map = mmap(NULL, len + 2 * pg, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (a->map == MAP_FAILED)
		return -1;
	a->shadow = malloc(len + 2 * pg);
	if (!a->shadow)
		return -1;
	a->body = a->map + pg;
	memset(a->map, 0xc5, pg);
	memset(a->body + len, 0x5c, pg);
	tpt_fill(a->body, len, fill);
	memcpy(a->shadow, a->map, len + 2 * pg);
	return 0;
}

static size_t arena_total(const struct arena *a, size_t pg)
{
	return a->len + 2 * pg;
}

/* Does [p, p + n) lie in the arena (canaries included)?  Sets *at. */
static bool in_arena(const struct arena *a, size_t pg, uint64_t p, uint64_t n,
		     size_t *at)
{
	uint64_t s = (uintptr_t)a->map;

	if (p < s || n > arena_total(a, pg) || p - s > arena_total(a, pg) - n)
		return false;
	*at = p - s;
	return true;
}

static int model_grant(struct fz *f, int dom, uint32_t id)
{
	int i;

	for (i = 0; i < f->ng; i++)
		if (f->g[i].dom == dom && f->g[i].id == id)
			return i;
	return -1;
}

/* A grant id: a known one (live or revoked, any domain) or made up. */
static uint32_t pick_grant_id(struct fz *f)
{
	if (f->ng && chance(85))
		return f->g[below(f->ng)].id;
	switch (below(4)) {
	case 0:
		return 0;
	case 1:
		return UINT32_MAX;
	case 2:
		return f->ng ? f->g[f->ng - 1].id + 1 + below(3) : 1;
	default:
		return (uint32_t)rnd();
	}
}

static uint64_t near(uint64_t bound)
{
	switch (below(6)) {
	case 0:
		return bound;
	case 1:
		return bound + 1;
	case 2:
		return bound ? bound - 1 : 0;
	case 3:
		return UINT64_MAX - below(4096);
	case 4:
		return (uint64_t)1 << (32 + below(32));
	default:
		return below(bound + 1);
	}
}

static int caller(void)
{
	uint64_t r = below(10);

	return r < 6 ? 1 : r < 9 ? 0 : 2;
}

static void fz_info(struct __test_metadata *_metadata, struct fz *f)
{
	struct tp_endpoint_info i = { 0 };
	int e = below(NEP), ret;
	bool clean = true;

	if (chance(20)) {
		clean = false;
		switch (below(3)) {
		case 0:
			i.flags = 1u << below(32);
			break;
		case 1:
			i.reserved0 = (uint32_t)rnd() | 1;
			break;
		default:
			i.reserved[below(2)] = rnd() | 1;
		}
	}
	if (chance(10))
		i.id = rnd();	/* out only: ignored */
	ret = tpt_ioctl(f->ep[e].fd, TP_IOC_ENDPOINT_INFO, &i);
	note(f, 0, ret);
	ASSERT_TRUE(documented(0, ret)) TH_LOG("ENDPOINT_INFO: %d", ret);
	if (clean) {
		ASSERT_EQ(0, ret);
		ASSERT_EQ(f->ep[e].id, i.id);
	} else {
		ASSERT_EQ(-EINVAL, ret);
	}
}

static void fz_grant(struct __test_metadata *_metadata, struct fz *f)
{
	struct tp_grant g = { 0 };
	struct endpoint *ep;
	struct region *r = NULL;
	int c = below(10) < 8 ? 0 : below(NEP), ri = below(NREG + 1), ret;
	bool clean = true, valid;
	struct mgrant *m;

	ep = &f->ep[c];
	if (ri < NREG) {
		r = &ep->reg[ri];
		g.region = r->handle;
	} else {
		g.region = chance(50) ? (uint32_t)rnd() : 0;
	}
	switch (below(6)) {
	case 0:
		g.grantee = f->ep[below(NEP)].id;
		break;
	case 1:
		g.grantee = chance(50) ? 0 : rnd();
		break;
	default:
		g.grantee = f->ep[1].id;
	}
	if (r && chance(70)) {
		g.offset = below(r->a.len);
		g.len = 1 + below(r->a.len - g.offset);
	} else {
		g.offset = near(r ? r->a.len : 4096);
		g.len = near(r ? r->a.len : 4096);
	}
	g.access = chance(85) ? 1 + below(3) : below(16);
	if (chance(10)) {
		clean = false;
		switch (below(3)) {
		case 0:
			g.flags = 1u << below(32);
			break;
		case 1:
			g.reserved = rnd() | 1;
			break;
		default:
			g.id = (uint32_t)rnd() | 1;
		}
	}
	valid = clean && r && r->live && g.grantee && g.len &&
		g.access && !(g.access & ~r->access) &&
		g.offset <= r->a.len && g.len <= r->a.len - g.offset;
	ret = tpt_ioctl(ep->fd, TP_IOC_GRANT, &g);
	note(f, 1, ret);
	ASSERT_TRUE(documented(1, ret)) TH_LOG("GRANT: %d", ret);
	if (ret) {
		ASSERT_FALSE(valid && ret != -ENOMEM && ret != -ENOSPC)
			TH_LOG("valid GRANT refused: %d", ret);
		return;
	}
	ASSERT_TRUE(valid) TH_LOG("GRANT accepted: reg %d off %" PRIu64
				  " len %" PRIu64 " access %u",
				  ri, (uint64_t)g.offset, (uint64_t)g.len,
				  g.access);
	ASSERT_NE(0, g.id);
	/* A live grant of the domain never shares its id. */
	ret = model_grant(f, ep->dom, g.id);
	if (ret >= 0) {
		ASSERT_FALSE(f->g[ret].live) TH_LOG("grant id %u twice", g.id);
		m = &f->g[ret];
	} else if (f->ng < MAX_GRANTS) {
		m = &f->g[f->ng++];
	} else {
		/*
		 * Forget an ended grant: an id the model does not know must
		 * not copy either, so the check stays as strict.
		 */
		m = NULL;
		for (ret = 0; ret < MAX_GRANTS && !m; ret++) {
			f->reuse = (f->reuse + 1) % MAX_GRANTS;
			if (!f->g[f->reuse].live)
				m = &f->g[f->reuse];
		}
		ASSERT_NE(NULL, m);
	}
	*m = (struct mgrant){
		.granter = c, .reg = ri, .dom = ep->dom, .id = g.id,
		.grantee = g.grantee, .off = g.offset, .len = g.len,
		.access = g.access, .live = true,
	};
}

static void fz_revoke(struct __test_metadata *_metadata, struct fz *f)
{
	struct tp_grant_revoke r = { .id = pick_grant_id(f) };
	int c = below(10) < 8 ? 0 : below(NEP), m, ret;

	if (chance(10))
		r.flags = 1u << below(32);
	m = model_grant(f, f->ep[c].dom, r.id);
	ret = tpt_ioctl(f->ep[c].fd, TP_IOC_GRANT_REVOKE, &r);
	note(f, 2, ret);
	ASSERT_TRUE(documented(2, ret)) TH_LOG("REVOKE: %d", ret);
	if (r.flags) {
		ASSERT_EQ(-EINVAL, ret);
		return;
	}
	if (m >= 0 && f->g[m].live && f->g[m].granter == c) {
		ASSERT_EQ(0, ret);
		f->g[m].live = false;
	} else {
		ASSERT_EQ(-ENOENT, ret) TH_LOG("REVOKE of dead/foreign %u", r.id);
	}
}

/*
 * Release a region's handle, which ends its grants, and register the same
 * memory again under a new handle.
 */
static void fz_release(struct __test_metadata *_metadata, struct fz *f)
{
	int e = below(NEP), ri = below(NREG), i;
	struct region *r = &f->ep[e].reg[ri];

	ASSERT_EQ(0, tpt_release(f->ep[e].fd, r->handle));
	for (i = 0; i < f->ng; i++)
		if (f->g[i].granter == e && f->g[i].reg == ri)
			f->g[i].live = false;
	ASSERT_EQ(0, tpt_register(f->ep[e].fd, r->a.body, r->a.len, r->access,
				  &r->handle));
	f->releases++;
}

/* Local memory for an element: mostly inside the local arena. */
static uint64_t pick_addr(struct fz *f, uint64_t len)
{
	uint64_t lim = f->lb.len;

	switch (below(12)) {
	case 0:
		return (uintptr_t)f->hole + below(f->pg);
	case 1:
		return (uintptr_t)f->ro + below(f->pg);
	case 2:
		return KADDR + below(1u << 20);
	case 3:
		return UINT64_MAX - below(64);
	case 4:
		return below(4096);
	default:
		if (len >= lim)
			return (uintptr_t)f->lb.body;
		return (uintptr_t)f->lb.body + below(lim - len + 1);
	}
}

static uint64_t arena_ptr(const struct arena *a)
{
	return (uintptr_t)a->map;
}

/*
 * The element as the model sees it: where its bytes go (*dst, *dlen in an
 * arena) and whether the module must accept it.
 */
struct plan {
	struct arena *src_a;	/* NULL: the element's own addr */
	struct arena *dst_a;
	size_t src_at, dst_at;
	bool valid;	/* the module must accept it */
	bool safe;	/* and it cannot fault */
};

static void plan_elem(struct fz *f, int c, const struct tp_copy_elem *e,
		      struct plan *p)
{
	struct mgrant *m;
	struct arena *ga;
	int i = model_grant(f, f->ep[c].dom, e->grant);
	size_t lat;
	bool rd = e->flags == TP_COPY_READ, wr = e->flags == TP_COPY_WRITE;

	memset(p, 0, sizeof(*p));
	if (i < 0 || !(rd || wr))
		return;
	m = &f->g[i];
	if (!m->live || m->grantee != f->ep[c].id ||
	    !(m->access & (rd ? TP_ACCESS_READ : TP_ACCESS_WRITE)) ||
	    e->offset > m->len || e->len > m->len - e->offset ||
	    e->addr + e->len < e->addr)
		return;
	ga = &f->ep[m->granter].reg[m->reg].a;
	p->valid = true;
	if (in_arena(&f->lb, f->pg, e->addr, e->len, &lat)) {
		p->safe = true;
	} else if (wr && e->addr >= (uintptr_t)f->ro &&
		   e->addr + e->len <= (uintptr_t)f->ro + f->pg) {
		/* The read-only page, as a source only. */
		p->safe = true;
		p->dst_a = ga;
		p->dst_at = f->pg + m->off + e->offset;
		return;
	} else {
		return;
	}
	if (rd) {
		p->src_a = ga;
		p->src_at = f->pg + m->off + e->offset;
		p->dst_a = &f->lb;
		p->dst_at = lat;
	} else {
		p->src_a = &f->lb;
		p->src_at = lat;
		p->dst_a = ga;
		p->dst_at = f->pg + m->off + e->offset;
	}
}

static struct arena *all_arenas(struct fz *f, int k)
{
	if (k == NEP * NREG)
		return &f->lb;
	return &f->ep[k / NREG].reg[k % NREG].a;
}

/*
 * Compare every arena with its shadow.  With @strict the two must be
 * equal; otherwise a byte may differ only inside a destination range of
 * the list (a copy stopped after a prefix), and the shadow takes it.
 */
static bool check_arenas(struct fz *f, const struct tp_copy_elem *e,
			 uint32_t n, bool strict, char *why, size_t whylen)
{
	int k;

	for (k = 0; k <= NEP * NREG; k++) {
		struct arena *a = all_arenas(f, k);
		size_t tot = arena_total(a, f->pg), b;

		if (!memcmp(a->map, a->shadow, tot))
			continue;
		for (b = 0; b < tot; b++) {
			uint64_t p = arena_ptr(a) + b;
			bool ok = false;
			uint32_t j;

			if (a->map[b] == a->shadow[b])
				continue;
			for (j = 0; !strict && j < n && !ok; j++) {
				/* Any destination the element names. */
				uint64_t lo = e[j].addr;

				if (e[j].flags == TP_COPY_READ)
					ok = p >= lo && p - lo < e[j].len;
			}
			if (!ok && !strict && k < NEP * NREG) {
				/* A WRITE into this region, within a grant. */
				int ri = k % NREG, ei = k / NREG, gi;

				for (j = 0; j < n && !ok; j++) {
					gi = model_grant(f, f->ep[ei].dom,
							 e[j].grant);
					if (gi < 0 || e[j].flags != TP_COPY_WRITE ||
					    f->g[gi].granter != ei ||
					    f->g[gi].reg != ri)
						continue;
					ok = b >= f->pg + f->g[gi].off &&
					     b - f->pg - f->g[gi].off <
					     f->g[gi].len;
				}
			}
			if (!ok) {
				snprintf(why, whylen,
					 "arena %d byte %zu changed (%s)", k, b,
					 b < f->pg || b >= f->pg + a->len ?
					 "canary" : "body");
				return false;
			}
			a->shadow[b] = a->map[b];
		}
	}
	return true;
}

/* A random live grant that endpoint @who may use, or -1. */
static int usable_grant(struct fz *f, int who)
{
	int i, start = below(f->ng ? f->ng : 1), k;

	for (k = 0; k < f->ng; k++) {
		i = (start + k) % f->ng;
		if (f->g[i].live && f->g[i].dom == f->ep[who].dom &&
		    f->g[i].grantee == f->ep[who].id)
			return i;
	}
	return -1;
}

static void fz_copy(struct __test_metadata *_metadata, struct fz *f)
{
	struct tp_copy c = { .elems = (uintptr_t)f->el };
	struct plan p;
	bool valid = true, safe = true, clean = true, good;
	int who = caller(), ret;
	char why[128];
	uint32_t n, j;

	switch (below(20)) {
	case 0:
		n = 0;
		break;
	case 1:
		n = TP_COPY_MAX_ELEMS - 1 + below(MAX_N - TP_COPY_MAX_ELEMS + 2);
		break;
	case 2:
		n = below(MAX_N + 1);
		break;
	default:
		n = 1 + below(4);
	}
	good = chance(40);
	for (j = 0; j < n && j < MAX_N; j++) {
		struct tp_copy_elem *e = &f->el[j];
		int gi = good ? usable_grant(f, who) : -1;

		if (gi >= 0) {
			/* A well-formed element, as a real user sends. */
			e->grant = f->g[gi].id;
			e->flags = f->g[gi].access == TP_ACCESS_READ ||
				   (f->g[gi].access != TP_ACCESS_WRITE &&
				    chance(50)) ? TP_COPY_READ : TP_COPY_WRITE;
			e->offset = below(f->g[gi].len + 1);
			e->len = below(f->g[gi].len - e->offset + 1);
			e->addr = pick_addr(f, e->len);
			if (chance(90))
				e->addr = (uintptr_t)f->lb.body +
					  below(f->lb.len - e->len + 1);
			continue;
		}
		e->grant = pick_grant_id(f);
		gi = model_grant(f, f->ep[who].dom, e->grant);
		e->flags = chance(90) ? 1 + below(2) : below(8);
		if (gi >= 0 && chance(80)) {
			uint64_t gl = f->g[gi].len;

			uint64_t end = gl + below(4) - 1;

			if (chance(50)) {
				e->offset = below(gl + 1);
				e->len = below(gl - e->offset + 1);
			} else if (chance(60)) {
				/* Ending just before, at or just past the end. */
				e->offset = below(end + 1);
				e->len = end - e->offset;
			} else {
				e->offset = near(gl);
				e->len = near(gl);
			}
		} else {
			e->offset = near(4096);
			e->len = near(4096);
		}
		if (e->len > f->lb.len && chance(80))
			e->len = below(f->lb.len);
		e->addr = pick_addr(f, e->len);
	}
	if (chance(5)) {
		clean = false;
		if (chance(50))
			c.flags = 1u << below(32);
		else
			c.reserved[below(2)] = rnd() | 1;
	}
	if (chance(3))
		c.elems = chance(50) ? (uintptr_t)f->hole : KADDR;
	valid = clean && n >= 1 && n <= TP_COPY_MAX_ELEMS &&
		c.elems == (uintptr_t)f->el;
	for (j = 0; valid && j < n; j++) {
		plan_elem(f, who, &f->el[j], &p);
		valid = p.valid;
		safe = safe && p.safe;
	}
	c.nr_elems = n;
	ret = tpt_ioctl(f->ep[who].fd, TP_IOC_COPY, &c);
	note(f, 3, ret);
	ASSERT_TRUE(documented(3, ret)) TH_LOG("COPY: %d", ret);
	if (ret == 0) {
		ASSERT_TRUE(valid) TH_LOG("COPY of %u accepted, model refuses",
					  n);
		/* The model applies the list in order to the shadows. */
		for (j = 0; j < n; j++) {
			plan_elem(f, who, &f->el[j], &p);
			if (p.dst_a)
				memmove(p.dst_a->shadow + p.dst_at,
					p.src_a ? p.src_a->shadow + p.src_at :
					(const uint8_t *)(uintptr_t)f->el[j].addr,
					f->el[j].len);
		}
		ASSERT_TRUE(check_arenas(f, f->el, n, true, why, sizeof(why)))
			TH_LOG("after COPY: %s", why);
		return;
	}
	ASSERT_FALSE(valid && safe && ret != -ENOMEM)
		TH_LOG("valid COPY of %u refused: %d", n, ret);
	/* Only a fault stops a copy midway here (no revoke runs). */
	ASSERT_TRUE(check_arenas(f, f->el, ret == -EFAULT ? n : 0,
				 ret != -EFAULT, why, sizeof(why)))
		TH_LOG("after failed COPY (%d): %s", ret, why);
}

static void fz_setup(struct __test_metadata *_metadata, struct fz *f)
{
	static const size_t pages[NREG] = { 1, 3, 16 };
	static const uint32_t acc[NREG] = {
		TP_ACCESS_READ | TP_ACCESS_WRITE, TP_ACCESS_READ,
		TP_ACCESS_READ | TP_ACCESS_WRITE,
	};
	int e, i;

	f->pg = tpt_page_size();
	for (e = 0; e < NEP; e++) {
		f->ep[e].fd = tpt_open();
		ASSERT_LE(0, f->ep[e].fd);
		f->ep[e].dom = e == 2;
	}
	ASSERT_EQ(0, tpt_domain_create(f->ep[0].fd, &f->dfd[0], NULL));
	ASSERT_EQ(0, tpt_domain_create(f->ep[2].fd, &f->dfd[1], NULL));
	for (e = 0; e < NEP; e++) {
		struct tp_endpoint_info inf = { 0 };

		ASSERT_EQ(0, tpt_domain_attach(f->ep[e].fd,
					       f->dfd[f->ep[e].dom], NULL));
		ASSERT_EQ(0, tpt_ioctl(f->ep[e].fd, TP_IOC_ENDPOINT_INFO,
				       &inf));
		f->ep[e].id = inf.id;
		for (i = 0; i < NREG; i++) {
			struct region *r = &f->ep[e].reg[i];

			ASSERT_EQ(0, arena_init(&r->a, pages[i] * f->pg,
						f->pg, 16 * e + i));
			r->access = acc[(i + e) % NREG];
			ASSERT_EQ(0, tpt_register(f->ep[e].fd, r->a.body,
						  r->a.len, r->access,
						  &r->handle));
			r->live = true;
		}
	}
	ASSERT_EQ(0, arena_init(&f->lb, LB_PAGES * f->pg, f->pg, 99));
	f->ro = mmap(NULL, 2 * f->pg, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, f->ro);
	memset(f->ro, 0x42, f->pg);
	ASSERT_EQ(0, mprotect(f->ro, f->pg, PROT_READ));
	/* PROT_NONE rather than unmapped: no later mapping can land there. */
	f->hole = f->ro + f->pg;
	ASSERT_EQ(0, mprotect(f->hole, f->pg, PROT_NONE));
	f->el = calloc(MAX_N, sizeof(*f->el));
	ASSERT_NE(NULL, f->el);
}

/* The test runs in a child that leaves with _exit(): write unbuffered. */
#define fz_msg(...) fprintf(stderr, "# " __VA_ARGS__)

static uint64_t env_u64(const char *name, uint64_t dflt)
{
	const char *s = getenv(name);

	return s && *s ? strtoull(s, NULL, 0) : dflt;
}

/* A fixture only for TEST_F_TIMEOUT: long runs outlast the default 30 s. */
FIXTURE(gf)
{
	int unused;
};

FIXTURE_SETUP(gf)
{
	self->unused = 0;
}

FIXTURE_TEARDOWN(gf)
{
}

TEST_F_TIMEOUT(gf, grant_fuzz, 1200)
{
	static struct fz f;
	uint64_t seed, iters, it, t0;
	struct tp_info info;
	int fd, e, i, c, k, ret;

	fd = tpt_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, tpt_get_info(fd, &info));
	close(fd);
	TPT_REQUIRE_FEATURES(info, TP_FEAT_GRANT);
	seed = env_u64("GRANT_FUZZ_SEED", (uint64_t)time(NULL) ^
		       ((uint64_t)getpid() << 32));
	iters = env_u64("GRANT_FUZZ_ITERS", 20000);
	fz_msg("grant_fuzz: GRANT_FUZZ_SEED=0x%" PRIx64
		       " GRANT_FUZZ_ITERS=%" PRIu64 "\n", seed, iters);
	rng = seed;
	fz_setup(_metadata, &f);
	t0 = tpt_now_ns();
	for (it = 0; it < iters; it++) {
		switch (below(10)) {
		case 0:
			if (chance(2))
				fz_release(_metadata, &f);
			else
				fz_info(_metadata, &f);
			break;
		case 1:
		case 2:
		case 3:
			fz_grant(_metadata, &f);
			break;
		case 4:
			fz_revoke(_metadata, &f);
			break;
		default:
			fz_copy(_metadata, &f);
		}
	}
	fz_msg("grant_fuzz: %" PRIu64 " iterations, %lu calls, %lu region releases, %.1f s\n",
	       it, f.calls, f.releases, (tpt_now_ns() - t0) / 1e9);
	for (c = 0; c < 4; c++)
		for (k = 0; k < NERR; k++)
			if (f.hist[c][k])
				fz_msg("grant_fuzz: %-13s %-8s %lu\n",
					       cmd_name[c], k ? strerror(k) : "0",
					       f.hist[c][k]);
	/* Every region releases, which ends the grants still live. */
	for (e = 0; e < NEP; e++)
		for (i = 0; i < NREG; i++)
			EXPECT_EQ(0, tpt_release(f.ep[e].fd,
						 f.ep[e].reg[i].handle));
	for (i = 0, k = 0; i < f.ng; i++) {
		struct tp_copy_elem el = {
			.addr = (uintptr_t)f.lb.body, .grant = f.g[i].id,
			.len = 1, .flags = TP_COPY_READ,
		};
		struct tp_copy cp = { .elems = (uintptr_t)&el, .nr_elems = 1 };

		for (e = 0; e < NEP; e++) {
			if (f.ep[e].dom != f.g[i].dom)
				continue;
			ret = tpt_ioctl(f.ep[e].fd, TP_IOC_COPY, &cp);
			EXPECT_TRUE(ret == -ENOENT) TH_LOG("grant %u after release: %d",
							    f.g[i].id, ret);
			k++;
		}
	}
	fz_msg("grant_fuzz: %d copies through ended grants refused\n", k);
	for (e = 0; e < NEP; e++)
		EXPECT_EQ(0, close(f.ep[e].fd));
	EXPECT_EQ(0, close(f.dfd[0]));
	EXPECT_EQ(0, close(f.dfd[1]));
}

TEST_HARNESS_MAIN
