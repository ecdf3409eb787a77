/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Internal objects of tensorpipe.ko and the rules that keep them consistent.
 *
 * Object lifetimes are all reference counted; a file descriptor holds one
 * reference to what it names:
 *
 *   endpoint  (struct tp_endpoint)  one open() of /dev/tensorpipe
 *   region    (struct tp_region)    pinned user pages or an allocated buffer
 *   domain    (struct tp_domain)    a table of keys; a file is its capability
 *   slot      (struct tp_slot)      one SEND, from posting to its completion
 *   user      (struct tp_user)      per-user limits; each endpoint and each
 *                                   charged region holds one
 *
 * Lock order: tp_domain.lock, then tp_endpoint.lock.  No lock is held while
 * copying, pinning, allocating or freeing.
 */
#ifndef _TP_INTERNAL_H
#define _TP_INTERNAL_H

#include <linux/atomic.h>
#include <linux/hashtable.h>
#include <linux/iosys-map.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/spinlock.h>
#include <linux/types.h>
#include <linux/wait.h>
#include <linux/workqueue.h>
#include <linux/xarray.h>
#include <uapi/linux/tensorpipe.h>

struct dentry;
struct device;
struct dma_buf;
struct dma_buf_attachment;
struct file;
struct io_uring_cmd;
struct mm_struct;
struct page;
struct vm_area_struct;

/*
 * Errno values user space may see are below 512; from there up are the
 * kernel's internal codes (-ERESTARTSYS, -EIOCBQUEUED...), which io_uring and
 * the C library would misread.
 */
#define TP_ERRNO_MAX	511

/* Module parameters, read with READ_ONCE at each use (root may change them). */
extern unsigned int tp_max_slots;
extern unsigned int tp_max_regions;
extern unsigned int tp_max_key_len;
extern unsigned int tp_max_region_mb;
extern unsigned int tp_max_user_ops;

u32 tp_key_len_limit(void);
u64 tp_region_bytes_limit(void);

/**
 * enum tp_region_kind - where a region's pages come from.
 * @TP_REGION_USER: user memory pinned with pin_user_pages_fast().
 * @TP_REGION_ALLOC: pages allocated by the module, mappable with mmap().
 * @TP_REGION_DMABUF: an imported dma-buf, reached through its kernel mapping.
 */
enum tp_region_kind {
	TP_REGION_USER,
	TP_REGION_ALLOC,
	TP_REGION_DMABUF,
};

/**
 * struct tp_user - what one user (real uid) holds, wherever its endpoints went.
 * @node:	in the module's table of users, under its lock.
 * @uid:	the user.
 * @user:	the kernel's user_struct (get_uid()), whose locked_vm is
 *		charged for pinned and allocated pages.
 * @ref:	each endpoint and each charged region hold one.
 * @ops:	pending SENDs (until their slot is freed) and waiting io_uring
 *		RECVs of the user's endpoints, limited by max_user_ops.
 */
struct tp_user {
	struct hlist_node node;
	kuid_t uid;
	struct user_struct *user;
	refcount_t ref;
	atomic_t ops;
};

/**
 * struct tp_region - memory a SEND reads from or a RECV writes to.
 * @ref:	references: the owner's handle table, each pending slot, each
 *		mapping (vma) and each copy in progress.
 * @kind:	TP_REGION_USER or TP_REGION_ALLOC.
 * @access:	TP_ACCESS_* bits.
 * @len:	length in bytes.
 * @first:	byte offset of the region's start in pages[0] (user regions
 *		need not start on a page boundary).
 * @nr_pages:	entries in @pages.
 * @pages:	the pages; NULL once an allocated region's pages were donated,
 *		and for an imported dma-buf.
 * @charged_mm:	mm whose pinned_vm shows @nr_pages (mmgrab()bed) as
 *		"VmPin", NULL when nothing is charged.
 * @charged_user: the user charged (a reference), NULL when nothing is.
 * @locked:	pages charged to @charged_user's locked_vm (0 under
 *		CAP_IPC_LOCK).
 * @dmabuf:	an imported dma-buf (a reference), else NULL.
 * @attach:	the module's attachment to @dmabuf.
 * @map:	@dmabuf's kernel mapping, where the bytes are copied.
 * @revoked:	the exporter moved or revoked @dmabuf: nothing may touch
 *		@map any more.  Set once, under tp_dmabuf_srcu (tp_dmabuf.c).
 * @export_lock: protects @exports.
 * @exports:	the dma-bufs exported from this region (struct tp_export).
 *
 * Everything but @ref is fixed once the region is published, except that
 * donation moves @pages away, which tp_region_detach() allows only while
 * nobody else holds a reference.
 */
struct tp_region {
	struct kref ref;
	enum tp_region_kind kind;
	u32 access;
	u64 len;
	unsigned int first;
	unsigned long nr_pages;
	struct page **pages;
	struct mm_struct *charged_mm;
	struct tp_user *charged_user;
	unsigned long locked;
	struct dma_buf *dmabuf;
	struct dma_buf_attachment *attach;
	struct iosys_map map;
	bool revoked;
	struct mutex export_lock;	/* @exports */
	struct list_head exports;
};

/**
 * struct tp_endpoint - state of one open() of /dev/tensorpipe.
 * @ref:	the file holds one reference, each slot of this endpoint one.
 * @mm:		the opener's mm (mmgrab()bed); other mms get -EPERM.
 * @tgid:	the opener's process (a reference), the domain member whose
 *		death the endpoint's flush reports.
 * @owner:	the opener's user, charged for what the endpoint holds.
 * @regions:	handle -> struct tp_region (one reference each); the xarray's
 *		own lock serialises handle allocation and removal.
 * @nr_regions:	entries in @regions, limited by tp_max_regions.
 * @next_handle: cursor of the cyclic handle allocator, so that a released
 *		handle is not handed out again at once.
 * @domain_lock: serialises attaching.
 * @domain:	the attached domain (one reference) or NULL; set once under
 *		@domain_lock, never cleared before release.
 * @lock:	protects @done, @outstanding and @dead.
 * @done:	completed slots waiting to be read().
 * @outstanding: SENDs of this endpoint pending or completed but unread.
 * @dead:	the file was released: completions are dropped.
 * @wq:		woken when a completion is queued.
 * @sends:	this endpoint's pending slots; protected by the domain's lock.
 * @withdrawn:	the file was released and its pending SENDs withdrawn: a
 *		claimed slot of this producer whose delivery fails must end,
 *		as nothing would withdraw it again.  Protected by the domain's
 *		lock.
 * @urecvs:	this endpoint's io_uring RECVs waiting for a key; protected
 *		by the domain's lock.
 * @member:	attached with TP_DOMAIN_ATTACH_MEMBER; set once under
 *		@domain_lock before @domain is published.
 * @died:	the opener, a member, died with the endpoint open, and the
 *		other members' pending operations were ended; protected by
 *		the domain's lock.
 * @monitor:	on kernels that do not cancel uring_cmds themselves, runs
 *		while io_uring commands are pending, to fail those whose task
 *		exits or whose ring is closed (see tp_uring.c).
 * @id:		unique endpoint id (TP_IOC_ENDPOINT_INFO), fixed at open.
 * @grant_lock:	protects @grants and @nr_grants.
 * @grants:	the grants this endpoint created and has not revoked
 *		(struct tp_access_grant.node).
 * @nr_grants:	entries in @grants, at most TP_GRANTS_MAX.
 */
struct tp_endpoint {
	struct kref ref;
	struct mm_struct *mm;
	struct pid *tgid;
	struct tp_user *owner;
	struct xarray regions;
	atomic_t nr_regions;
	u32 next_handle;
	struct mutex domain_lock;	/* serialises attaching */
	struct tp_domain *domain;
	spinlock_t lock;		/* @done, @outstanding, @dead */
	struct list_head done;
	unsigned int outstanding;
	bool dead;
	wait_queue_head_t wq;
	struct list_head sends;
	bool withdrawn;
	struct list_head urecvs;
	bool member;
	bool died;
	struct delayed_work monitor;
	u64 id;
	struct mutex grant_lock;	/* @grants, @nr_grants */
	struct list_head grants;
	unsigned int nr_grants;
};

#define TP_DOMAIN_HASH_BITS	8
/* Keys of a dead producer's SENDs remembered per domain (the oldest go). */
#define TP_DOMAIN_ORPHANS	1024

/**
 * struct tp_orphan - the key of a SEND whose producer died before a RECV
 * took it.
 * @node:	in tp_domain.orphans.
 * @hash:	tp_key_hash() of @key.
 * @key_len:	length of @key.
 * @key:	the key.
 */
struct tp_orphan {
	struct list_head node;
	u32 hash;
	u32 key_len;
	u8 key[];
};

/**
 * struct tp_domain_stats - per-domain counters, protected by tp_domain.lock.
 * @sends:		SENDs accepted.
 * @recvs:		RECVs that delivered a tensor.
 * @bytes_copied:	bytes delivered by copying.
 * @bytes_donated:	bytes delivered by moving pages.
 */
struct tp_domain_stats {
	u64 sends;
	u64 recvs;
	u64 bytes_copied;
	u64 bytes_donated;
};

/**
 * struct tp_domain - a rendezvous table of keys.
 * @ref:	the domain file and each attached endpoint hold one reference.
 * @id:		number shown in debugfs and returned to user space.
 * @lock:	protects @slots, @waiters, @nr_slots, @abort_status, @stats
 *		and every endpoint's @sends list.
 * @slots:	pending slots hashed by key.
 * @waiters:	RECVs waiting for a key, hashed by key.
 * @nr_slots:	entries in @slots, limited by tp_max_slots.
 * @nr_waiters:	entries in @waiters.
 * @abort_status: 0, or the negative errno of TP_IOC_ABORT.
 * @orphans:	keys of unclaimed SENDs withdrawn because their producer, a
 *		member, died (struct tp_orphan, oldest first): a RECV of one
 *		that finds no slot fails with -EOWNERDEAD instead of waiting.
 * @nr_orphans:	entries in @orphans, at most TP_DOMAIN_ORPHANS.
 * @stats:	counters for debugfs.
 * @debugfs:	this domain's debugfs file of counters.
 * @debugfs_keys: this domain's debugfs file listing its pending keys.
 * @grants:	grant id -> struct tp_access_grant (one reference each); the
 *		xarray's own lock serialises lookup, allocation and removal.
 * @next_grant:	cursor of the cyclic grant id allocator, under @grants' lock.
 */
struct tp_domain {
	struct kref ref;
	u64 id;
	struct mutex lock;	/* see the kernel-doc above */
	DECLARE_HASHTABLE(slots, TP_DOMAIN_HASH_BITS);
	DECLARE_HASHTABLE(waiters, TP_DOMAIN_HASH_BITS);
	unsigned int nr_slots;
	unsigned int nr_waiters;
	int abort_status;
	struct list_head orphans;
	unsigned int nr_orphans;
	struct tp_domain_stats stats;
	struct dentry *debugfs;
	struct dentry *debugfs_keys;
	struct xarray grants;
	u32 next_grant;
};

/**
 * struct tp_slot - one SEND from posting to completion.
 * @node:	in tp_domain.slots while pending.
 * @ep_node:	in the producer's tp_endpoint.sends while pending, then in
 *		its tp_endpoint.done once completed.
 * @ep:		the producer (one reference).
 * @cmd:	the io_uring command that posted the SEND, completed instead of
 *		queueing @cqe for read(); NULL for the ioctl.
 * @region:	the source (one reference).
 * @offset:	byte offset of the tensor in @region.
 * @len:	tensor length in bytes.
 * @flags:	TP_SEND_* flags.
 * @claimed:	a RECV is delivering the slot; it stays in the hash (so a
 *		second SEND of the key still fails with -EEXIST) but other
 *		RECVs and CANCEL pass it by.  Protected by tp_domain.lock.
 * @hash:	hash of the key.
 * @cqe:	the completion record handed to read().
 * @key_len:	length of @key.
 * @key:	the key bytes.
 */
struct tp_slot {
	struct hlist_node node;
	struct list_head ep_node;
	struct tp_endpoint *ep;
	struct io_uring_cmd *cmd;
	struct tp_region *region;
	u64 offset;
	u64 len;
	u32 flags;
	bool claimed;
	u32 hash;
	struct tp_completion cqe;
	u32 key_len;
	u8 key[];
};

/**
 * struct tp_waiter - a RECV waiting for its key.
 * @node:	in tp_domain.waiters.
 * @ep:		the consumer, for TP_IOC_CANCEL.
 * @hash:	hash of the key.
 * @key_len:	length of @key.
 * @key:	the key bytes (the waiter's own copy).
 * @wake:	tells the waiter that @event changed; called under
 *		tp_domain.lock, must not sleep.  A blocking ioctl wakes its
 *		task, an io_uring RECV schedules task work.
 * @wq:		where a blocking waiter sleeps.
 * @event:	0 while nothing happened; 1 when a SEND of the key arrived or
 *		the domain was aborted (look again); a negative errno when the
 *		wait must end with it.  Written under tp_domain.lock.
 */
struct tp_waiter {
	struct hlist_node node;
	struct tp_endpoint *ep;
	u32 hash;
	u32 key_len;
	const u8 *key;
	void (*wake)(struct tp_waiter *w);
	wait_queue_head_t wq;
	int event;
};

/* tp_stats.c: global counters for debugfs. */
enum tp_stat {
	TP_STAT_ENDPOINTS,
	TP_STAT_DOMAINS,
	TP_STAT_REGIONS,
	TP_STAT_PINNED_PAGES,
	TP_STAT_ALLOC_PAGES,
	TP_STAT_PENDING_SLOTS,
	TP_STAT_SENDS,
	TP_STAT_RECVS,
	TP_STAT_BYTES_COPIED,
	TP_STAT_BYTES_DONATED,
	TP_STAT_ERR_INVAL,
	TP_STAT_ERR_MSGSIZE,
	TP_STAT_ERR_EXIST,
	TP_STAT_ERR_TIMEDOUT,
	TP_STAT_ERR_CANCELED,
	TP_STAT_ERR_ABORTED,
	TP_STAT_ERR_MEMBER_DIED,
	TP_STAT_ERR_MEMLOCK,
	TP_STAT_ERR_OTHER,
	TP_STAT_COUNT
};

extern atomic64_t tp_stats[TP_STAT_COUNT];

static inline void tp_stat_add(enum tp_stat s, s64 v)
{
	atomic64_add(v, &tp_stats[s]);
}

void tp_stat_error(long err);
int tp_debugfs_init(void);
void tp_debugfs_exit(void);
void tp_debugfs_add_domain(struct tp_domain *dom);
void tp_debugfs_remove_domain(struct tp_domain *dom);

/* tp_user.c */
struct tp_user *tp_user_get_current(void);
void tp_user_get(struct tp_user *u);
void tp_user_put(struct tp_user *u);
long tp_user_lock_pages(struct tp_user *u, unsigned long npages);
void tp_user_unlock_pages(struct tp_user *u, unsigned long npages);
int tp_user_op_get(struct tp_user *u);
void tp_user_op_put(struct tp_user *u);

/* tp_region.c */
int tp_region_register(struct tp_endpoint *ep, struct tp_region_register *arg);
int tp_region_alloc(struct tp_endpoint *ep, struct tp_region_alloc *arg);
int tp_region_release(struct tp_endpoint *ep, u32 handle);
void tp_region_release_all(struct tp_endpoint *ep);
struct tp_region *tp_region_get(struct tp_endpoint *ep, u32 handle);
int tp_region_detach(struct tp_endpoint *ep, u32 handle, struct tp_region *r);
int tp_region_reserve(struct tp_endpoint *ep, u32 *handle);
void tp_region_unreserve(struct tp_endpoint *ep, u32 handle);
void tp_region_publish(struct tp_endpoint *ep, u32 handle, struct tp_region *r);
struct tp_region *tp_region_new_alloc(u64 len, struct tp_endpoint *ep);
struct tp_region *tp_region_new_donated(struct tp_region *donor,
					struct tp_endpoint *ep);
void tp_region_put(struct tp_region *r);
int tp_region_mmap(struct tp_endpoint *ep, struct vm_area_struct *vma);
int tp_region_map_vma(struct tp_region *r, struct vm_area_struct *vma);
struct tp_region *tp_region_shell(enum tp_region_kind kind, u64 len,
				  unsigned int first);
int tp_region_check_len(u64 len);

/* tp_dmabuf.c */
int tp_region_export(struct tp_endpoint *ep, struct tp_region_export *arg,
		     void __user *uarg);
int tp_region_import(struct tp_endpoint *ep, struct tp_region_import *arg);
int tp_region_revoke(struct tp_endpoint *ep, const struct tp_region_revoke *arg);
void tp_region_dmabuf_release(struct tp_region *r);
int tp_region_cpu_access(struct tp_region *r, bool begin);
bool tp_region_revoked(const struct tp_region *r);
int tp_dmabuf_read_lock(void);
void tp_dmabuf_read_unlock(int idx);

/* tp_main.c */
struct device *tp_device(void);

/* tp_copy.c */
int tp_copy_pages(struct tp_region *dst, u64 dst_off,
		  struct tp_region *src, u64 src_off, u64 len);

/* tp_domain.c */
int tp_domain_create(struct tp_domain_create *arg, void __user *uarg);
int tp_domain_attach(struct tp_endpoint *ep, struct tp_domain_attach *arg);
void tp_domain_put(struct tp_domain *dom);
int tp_domain_abort(struct tp_endpoint *ep, const struct tp_abort *arg);
void tp_domain_member_died(struct tp_endpoint *ep);
void tp_domain_orphan_add(struct tp_domain *dom, const u8 *key, u32 key_len,
			  u32 hash);
bool tp_domain_orphan_take(struct tp_domain *dom, const u8 *key, u32 key_len,
			   u32 hash);
void tp_domain_orphans_free(struct tp_domain *dom);

/* tp_key.c */
int tp_key_check(u32 len);
u8 *tp_key_copy(u64 uptr, u32 len);
u32 tp_key_hash(const u8 *key, u32 len);
bool tp_key_eq(const u8 *a, u32 alen, const u8 *b, u32 blen);

/* tp_slot.c */
int tp_send(struct tp_endpoint *ep, const struct tp_send *arg,
	    struct io_uring_cmd *cmd);
int tp_recv(struct tp_endpoint *ep, struct tp_recv *arg);
int tp_recv_check(struct tp_endpoint *ep, struct tp_recv *arg,
		  struct tp_region **dstp);
int tp_recv_claim(struct tp_domain *dom, const u8 *key, u32 key_len,
		  u32 hash, struct tp_recv *arg, struct tp_slot **slotp);
int tp_recv_deliver(struct tp_domain *dom, struct tp_endpoint *ep,
		    struct tp_slot *slot, struct tp_region *dst,
		    struct tp_recv *arg);
int tp_cancel(struct tp_endpoint *ep, struct tp_cancel *arg);
void tp_slot_complete(struct tp_slot *slot, int status, u64 len);
void tp_slot_withdraw_all(struct tp_endpoint *ep);
void tp_slot_free(struct tp_slot *slot);
void tp_waiter_signal(struct tp_waiter *w, int event);
void tp_waiters_wake_all(struct tp_domain *dom, int event);
void tp_slot_unpublish(struct tp_domain *dom, struct tp_slot *slot,
		       struct list_head *to);

/**
 * struct tp_access_grant - a range of a region another endpoint may copy to or from.
 * @ref:	the domain's table holds one until the grant is revoked;
 *		each copy using it holds one.
 * @id:		grant id in the domain.
 * @node:	in the granter's tp_endpoint.grants, under its grant_lock.
 * @region:	the granted region (one reference).
 * @offset:	start of the range in @region.
 * @len:	length of the range.
 * @grantee:	id of the only endpoint that may use the grant.
 * @access:	TP_ACCESS_* bits granted.
 * @revoked:	set once when the grant is revoked, before
 *		synchronize_srcu(); read by copies under tp_grant_srcu, so that
 *		no chunk starts after the revoke returned.
 *
 * Everything but @ref, @node and @revoked is fixed at creation.
 */
struct tp_access_grant {
	struct kref ref;
	u32 id;
	struct list_head node;
	struct tp_region *region;
	u64 offset;
	u64 len;
	u64 grantee;
	u32 access;
	bool revoked;
};

/* tp_grant.c */
u64 tp_endpoint_new_id(void);
void tp_grant_endpoint_init(struct tp_endpoint *ep);
void tp_grant_domain_init(struct tp_domain *dom);
int tp_endpoint_info(struct tp_endpoint *ep, struct tp_endpoint_info *arg);
int tp_grant_create(struct tp_endpoint *ep, struct tp_grant *arg);
int tp_grant_revoke(struct tp_endpoint *ep, const struct tp_grant_revoke *arg);
void tp_grant_revoke_region(struct tp_endpoint *ep, struct tp_region *r);
void tp_grant_revoke_all(struct tp_endpoint *ep);
int tp_grant_copy(struct tp_endpoint *ep, const struct tp_copy *arg);

/* tp_uring.c */
int tp_uring_cmd(struct io_uring_cmd *cmd, unsigned int issue_flags);
void tp_uring_track_send(struct tp_endpoint *ep, struct tp_slot *slot);
void tp_uring_send_done(struct tp_slot *slot);
void tp_uring_endpoint_init(struct tp_endpoint *ep);
void tp_uring_endpoint_release(struct tp_endpoint *ep);

/**
 * tp_endpoint_domain() - the domain an endpoint is attached to.
 * @ep:		endpoint.
 *
 * Return: the domain, or NULL when not attached.  The endpoint's reference
 * keeps it alive for as long as the endpoint is.
 */
static inline struct tp_domain *tp_endpoint_domain(struct tp_endpoint *ep)
{
	/* Pairs with the release in tp_domain_attach(): see a whole domain. */
	return smp_load_acquire(&ep->domain);
}

/* tp_endpoint.c */
void tp_endpoint_put(struct tp_endpoint *ep);
extern const struct file_operations tp_endpoint_fops;

#endif /* _TP_INTERNAL_H */
