/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * tensorpipe: zero-copy tensor rendezvous through /dev/tensorpipe.
 *
 * This header is the whole contract between user space and tensorpipe.ko.
 * It compiles on its own in user space.
 *
 * Model
 * -----
 * An *endpoint* is one open() of /dev/tensorpipe.  It belongs to the process
 * (mm) that opened it: every ioctl, read and mmap from another mm (a fork
 * child using an inherited descriptor, say) fails with -EPERM.
 *
 * A *region* is memory known to an endpoint, named by a __u32 handle that is
 * valid on that endpoint only: either user memory pinned by
 * TP_IOC_REGION_REGISTER, or a kernel buffer from TP_IOC_REGION_ALLOC that the
 * process maps with mmap(fd, offset = mmap_offset).  Pinned and allocated
 * bytes are charged to the user who opened the endpoint (its real uid), as
 * io_uring charges registered buffers: the user's locked pages, wherever its
 * endpoints went (kept across execve(), inherited, passed to another
 * process), are bounded by RLIMIT_MEMLOCK of the task that pins or allocates
 * (no limit with CAP_IPC_LOCK).  They also show as "VmPin" in
 * /proc/PID/status of the process that created the region.  Pending SENDs
 * and waiting io_uring RECVs, which hold kernel memory for their keys, are
 * bounded per user by the module parameter max_user_ops (-EDQUOT).
 *
 * A *domain* is a rendezvous namespace: a table of keys.  TP_IOC_DOMAIN_CREATE
 * returns a new file descriptor that is the capability to the domain; an
 * endpoint joins it with TP_IOC_DOMAIN_ATTACH given that descriptor (passed
 * over a Unix socket or inherited).  An endpoint joins at most one domain.
 *
 * A *slot* is a tensor posted under a key by TP_IOC_SEND.  SEND never blocks:
 * it references the source region and returns.  TP_IOC_RECV, issued before
 * or after the SEND, takes the slot (each key is delivered exactly once) and
 * copies the bytes from the producer's pinned pages straight into the
 * consumer's region in the consumer's context (one copy), or, for a donated
 * buffer, hands its pages over without copying.  When the slot has been
 * consumed, cancelled or aborted the producer finds a struct tp_completion
 * with the SEND's user_data by read() on the endpoint; poll() reports EPOLLIN
 * while completions are queued.
 *
 * An endpoint attached with TP_DOMAIN_ATTACH_MEMBER makes its opener a
 * *member* of the domain.  When a member dies (its last thread exits with
 * the endpoint still open; a close() is an orderly leave), everything the
 * other members' endpoints had pending at that moment ends with
 * -EOWNERDEAD: their waiting RECVs return it and their unclaimed SENDs
 * complete with it.  A RECV copying from the dead member's pages, which stay
 * pinned, still completes.  Operations started afterwards behave as usual,
 * but for one thing: the dead member's own SENDs that nobody had claimed
 * are withdrawn, and the first RECV of such a key afterwards that finds no
 * SEND of it returns -EOWNERDEAD at once instead of waiting (the domain
 * remembers the last 1024 such keys; a new SEND of the key forgets it).
 * Endpoints attached without the flag neither report nor hear of deaths
 * (TP_FEAT_MEMBER_DEATH).
 *
 * Grants (TP_FEAT_GRANT)
 * ----------------------
 * Every endpoint has an id, unique until the module is unloaded and never
 * reused (TP_IOC_ENDPOINT_INFO).  An endpoint attached to a domain GRANTs a
 * byte range of one of its regions, for TP_ACCESS_READ and/or
 * TP_ACCESS_WRITE, to the endpoint of that domain with a given id
 * (TP_IOC_GRANT); it gets a grant id, a number valid in the domain.  Only
 * that endpoint, while attached to the same domain, can use the grant: it
 * issues TP_IOC_COPY with a list of elements, each copying between a range
 * of its own address space and a range of a granted region, in either
 * direction.  The module checks the whole list (form, grant, grantee,
 * access, bounds) before it moves any byte; a list that fails any check
 * moves nothing.  No ptrace permission between the two processes is needed
 * or used: the grant alone decides, so users that must not see each
 * other's memory can share exactly the granted bytes and nothing else.
 * A grant ends with TP_IOC_GRANT_REVOKE, when its region's handle is
 * released, and when the granting endpoint's file is released.  A revoke
 * returns only once no copy can touch the range any more: a copy in
 * progress stops before its next chunk of at most 1 MiB (and fails with
 * -ENOENT, having moved a prefix of its list).
 *
 * Conventions
 * -----------
 * All structures have explicit padding, sizes that are multiples of 8 and
 * pointers carried as __u64, so 32-bit and 64-bit processes share one layout.
 * Every flags and reserved field must be zero unless documented: a non-zero
 * unknown bit or reserved field fails with -EINVAL.  Each command's known
 * flags are collected in one mask (TP_SEND_FLAGS_ALL, ...; 0 for commands
 * with none yet) that a new flag must join.  An unknown command fails
 * with -ENOTTY.  Commands return 0 or a negative errno through ioctl(2)
 * (that is, -1 with errno set); the errors each can return are listed with it.
 * Common to every command: -EFAULT (an argument could not be read or
 * written), -EPERM (the caller is not the endpoint's process).
 *
 * io_uring
 * --------
 * TP_IOC_SEND, TP_IOC_RECV and TP_IOC_CANCEL (and TP_IOC_COPY, with
 * TP_FEAT_GRANT) can also be submitted as IORING_OP_URING_CMD on the
 * endpoint's fd (TP_FEAT_URING_CMD): sqe->cmd_op is the ioctl number and
 * the struct lies in the SQE's command area, which needs a ring created
 * with IORING_SETUP_SQE128 (else the CQE is -EINVAL).
 * The struct is read once, at submission.  Validation errors are the
 * ioctl's, reported as the CQE's res.  Another cmd_op gives -EOPNOTSUPP.
 *
 * - SEND: the CQE arrives when the slot completes, in place of the read()
 *   record: res is 0 or the status a struct tp_completion would carry.
 * - RECV: the CQE arrives when the tensor is in place, or the RECV failed
 *   (-ETIMEDOUT, -ECANCELED, abort status...).  res is 0, or with
 *   TP_RECV_DONATE the new region's handle (its mmap offset is
 *   handle << TP_MMAP_REGION_SHIFT).  TP_RECV_NONBLOCK gives -EAGAIN at once.
 *   No thread waits: the copy runs as task work in the submitting task.
 * - CANCEL: res is the number of operations cancelled, or -ENOENT.
 * - COPY: copied at submission, in the submitting task; res is 0 or the
 *   ioctl's error.
 *
 * With IORING_SETUP_CQE32, the first extra word of a SEND's or RECV's CQE is
 * the tensor's length (also for -EMSGSIZE).  A command whose process exits
 * or whose ring is closed, or whose task calls execve(), completes with
 * -ECANCELED; a pending SEND is then withdrawn.  With
 * TP_FEAT_URING_KERNEL_CANCEL io_uring itself asks for that at once and a
 * thread that exits while its process lives leaves its commands pending (its
 * ring still sees their CQEs; a RECV whose key arrives after the thread is
 * gone ends with -ECANCELED and takes nothing).  Without it the module
 * notices within about 100 ms, and a thread's exit also ends the thread's
 * commands.  A RECV's task work takes no tensor once its ring is closing,
 * except, with TP_FEAT_URING_KERNEL_CANCEL, a key that arrived just before
 * the ring's last close; closing the
 * endpoint's fd alone cancels nothing, as the command holds the file.
 */
#ifndef _UAPI_LINUX_TENSORPIPE_H
#define _UAPI_LINUX_TENSORPIPE_H

#include <linux/const.h>
#include <linux/ioctl.h>
#include <linux/types.h>

/**
 * define TP_ABI_VERSION - version of this interface, reported by GET_INFO
 */
#define TP_ABI_VERSION		1

/**
 * define TP_DEVICE_PATH - path of the character device
 */
#define TP_DEVICE_PATH		"/dev/tensorpipe"

/**
 * define TP_KEY_MAX_ABI - hard upper bound of a key length, in bytes.
 *
 * The limit in force is struct tp_info.max_key_len (module parameter
 * max_key_len); it is never below 256 and never above this value.
 */
#define TP_KEY_MAX_ABI		4096

/**
 * define TP_MMAP_REGION_SHIFT - bit position of the region handle in an mmap offset.
 *
 * The mmap offset of region @h is @h << TP_MMAP_REGION_SHIFT; a region is
 * therefore at most 1 << TP_MMAP_REGION_SHIFT bytes (64 GiB).
 */
#define TP_MMAP_REGION_SHIFT	36

/* Feature bits in struct tp_info.features. */
/**
 * define TP_FEAT_REGION_ALLOC - TP_IOC_REGION_ALLOC and mmap of its buffers
 */
#define TP_FEAT_REGION_ALLOC	_BITULL(0)
/**
 * define TP_FEAT_DONATE - TP_SEND_DONATE and TP_RECV_DONATE
 */
#define TP_FEAT_DONATE		_BITULL(1)
/**
 * define TP_FEAT_RECV_TIMEOUT - struct tp_recv.timeout_ns is honoured
 */
#define TP_FEAT_RECV_TIMEOUT	_BITULL(2)
/**
 * define TP_FEAT_LARGE_ALLOC - allocated buffers use 2 MiB chunks when memory allows
 */
#define TP_FEAT_LARGE_ALLOC	_BITULL(3)
/**
 * define TP_FEAT_URING_CMD - SEND/RECV/CANCEL accepted as IORING_OP_URING_CMD
 */
#define TP_FEAT_URING_CMD	_BITULL(4)
/**
 * define TP_FEAT_URING_KERNEL_CANCEL - io_uring cancels the module's waiting
 * commands itself (kernels with IORING_URING_CMD_CANCELABLE); see io_uring
 * above for what changes
 */
#define TP_FEAT_URING_KERNEL_CANCEL	_BITULL(5)
/**
 * define TP_FEAT_DMABUF - TP_IOC_REGION_EXPORT and TP_IOC_REGION_IMPORT
 */
#define TP_FEAT_DMABUF			_BITULL(6)
/**
 * define TP_FEAT_MEMBER_DEATH - TP_DOMAIN_ATTACH_MEMBER is accepted, and
 * the death of a domain's member ends the other members' pending
 * operations with -EOWNERDEAD (see Domains above)
 */
#define TP_FEAT_MEMBER_DEATH		_BITULL(7)
/**
 * define TP_FEAT_GRANT - TP_IOC_ENDPOINT_INFO, TP_IOC_GRANT,
 * TP_IOC_GRANT_REVOKE and TP_IOC_COPY (also as an io_uring command): one
 * endpoint grants a range of its region to another endpoint of its domain,
 * which then copies to and from it (see Grants below)
 */
#define TP_FEAT_GRANT			_BITULL(8)

/**
 * struct tp_info - what the loaded module implements (TP_IOC_GET_INFO).
 * @abi_version:	out: TP_ABI_VERSION of the module.
 * @flags:		in: must be 0.
 * @features:		out: TP_FEAT_* bits.
 * @max_key_len:	out: longest key accepted, in bytes (>= 256).
 * @max_regions:	out: regions one endpoint may hold at once.
 * @max_slots:		out: pending SENDs one domain may hold at once; also
 *			the most SENDs one endpoint may have outstanding
 *			(pending, or completed but not yet read).
 * @page_size:		out: PAGE_SIZE of the kernel.
 * @max_region_bytes:	out: largest region, in bytes.
 * @reserved:		must be 0 on input; 0 on output.
 */
struct tp_info {
	__u32 abi_version;
	__u32 flags;
	__u64 features;
	__u32 max_key_len;
	__u32 max_regions;
	__u32 max_slots;
	__u32 page_size;
	__u64 max_region_bytes;
	__u64 reserved[4];
};

/* Access bits for struct tp_region_register.access. */
/**
 * define TP_ACCESS_READ - the region may be the source of a SEND
 */
#define TP_ACCESS_READ		_BITUL(0)
/**
 * define TP_ACCESS_WRITE - the region may be the destination of a RECV
 */
#define TP_ACCESS_WRITE		_BITUL(1)
/**
 * define TP_ACCESS_ALL - every TP_ACCESS_* bit; a new bit must join it
 */
#define TP_ACCESS_ALL		(TP_ACCESS_READ | TP_ACCESS_WRITE)

/**
 * struct tp_region_register - pin user memory (TP_IOC_REGION_REGISTER).
 * @addr:	in: start address; need not be page aligned.
 * @len:	in: length in bytes, 1 .. tp_info.max_region_bytes.
 * @access:	in: TP_ACCESS_READ and/or TP_ACCESS_WRITE (at least one).
 *		WRITE pins for writing (breaking copy-on-write); a READ-only
 *		region pins the pages present now, so populate the memory
 *		before registering it.
 * @flags:	in: must be 0.
 * @handle:	out: region handle, valid on this endpoint only.
 * @reserved:	must be 0.
 *
 * Pages are pinned long-term (FOLL_LONGTERM) until the region is released
 * and no pending SEND references it.
 */
struct tp_region_register {
	__u64 addr;
	__u64 len;
	__u32 access;
	__u32 flags;
	__u32 handle;
	__u32 reserved;
};

/**
 * struct tp_region_alloc - allocate a mappable kernel buffer (TP_IOC_REGION_ALLOC).
 * @len:	in: length in bytes, 1 .. tp_info.max_region_bytes.  Memory
 *		and mappings come in whole pages, but SEND and RECV ranges are
 *		checked against @len.  The buffer is zeroed.
 * @flags:	in: must be 0.
 * @handle:	out: region handle; the region has READ and WRITE access.
 * @mmap_offset: out: offset to pass to mmap(2) on this endpoint's fd.
 *		Mappings must be MAP_SHARED (MAP_PRIVATE fails with -EINVAL:
 *		a private copy would stop following the region at its first
 *		write); through an endpoint opened read-only they map
 *		without PROT_WRITE only.  They are not inherited by fork
 *		children, and their pages are ordinary pages that
 *		pin_user_pages, O_DIRECT and ibv_reg_mr accept.
 * @reserved:	must be 0.
 *
 * Besides RLIMIT_MEMLOCK, the pages (and the table that lists them) are
 * charged to the memory cgroup of the allocating task, as kernel memory,
 * and stay charged there until they are freed, even when donated to or
 * shared with a task of another cgroup.  Above the cgroup's memory.max
 * the allocation fails with -ENOMEM rather than calling the OOM killer.
 */
struct tp_region_alloc {
	__u64 len;
	__u32 flags;
	__u32 handle;
	__u64 mmap_offset;
	__u64 reserved;
};

/**
 * struct tp_region_release - drop a region handle (TP_IOC_REGION_RELEASE).
 * @handle:	in: region handle.
 * @flags:	in: must be 0.
 *
 * The handle becomes invalid at once.  Pages stay pinned (and charged) while
 * a pending SEND or an mmap still uses them.
 */
struct tp_region_release {
	__u32 handle;
	__u32 flags;
};

/**
 * struct tp_domain_create - create a rendezvous domain (TP_IOC_DOMAIN_CREATE).
 * @flags:	in: must be 0.
 * @fd:		out: new O_CLOEXEC file descriptor for the domain.  Holding
 *		it is the right to attach endpoints to the domain.
 * @id:		out: domain id, as shown in debugfs.
 *
 * The calling endpoint is not attached; use TP_IOC_DOMAIN_ATTACH.
 */
struct tp_domain_create {
	__u32 flags;
	__s32 fd;
	__u64 id;
};

/**
 * struct tp_domain_attach - join a domain (TP_IOC_DOMAIN_ATTACH).
 * @fd:		in: a domain file descriptor from TP_IOC_DOMAIN_CREATE.
 * @flags:	in: 0 or TP_DOMAIN_ATTACH_MEMBER.
 * @id:		out: domain id.
 */
struct tp_domain_attach {
	__s32 fd;
	__u32 flags;
	__u64 id;
};

/* Flags for struct tp_send.flags. */
/**
 * define TP_SEND_DONATE - give the pages of an allocated region to the consumer.
 *
 * The region must come from TP_IOC_REGION_ALLOC, @offset must be 0, and the
 * region must be idle: not mapped (munmap it first), not the source of
 * another pending SEND and not the destination of a RECV in progress.  The
 * handle is consumed by the SEND: it is invalid on return, and the pages
 * belong to the slot until a RECV takes them.  Pins on the pages taken
 * through an earlier mapping (ibv_reg_mr, O_DIRECT in flight) are not seen:
 * drop them before donating.
 */
#define TP_SEND_DONATE		_BITUL(0)
/**
 * define TP_SEND_FLAGS_ALL - every TP_SEND_* flag; a new flag must join it
 */
#define TP_SEND_FLAGS_ALL	TP_SEND_DONATE

/**
 * struct tp_send - post a tensor under a key (TP_IOC_SEND).
 * @key_ptr:	in: address of the key bytes (any bytes, not NUL terminated).
 * @key_len:	in: key length, 1 .. tp_info.max_key_len.
 * @flags:	in: 0 (copy) or TP_SEND_DONATE.
 * @region:	in: source region handle (READ access).
 * @reserved0:	must be 0.
 * @offset:	in: byte offset of the tensor in the region.
 * @len:	in: tensor length in bytes; may be 0.
 * @user_data:	in: opaque value returned in the completion.
 * @reserved:	must be 0.
 *
 * Never blocks.  The source must not be modified until the completion for
 * @user_data has been read: the copy happens when the consumer arrives.
 */
struct tp_send {
	__u64 key_ptr;
	__u32 key_len;
	__u32 flags;
	__u32 region;
	__u32 reserved0;
	__u64 offset;
	__u64 len;
	__u64 user_data;
	__u64 reserved[2];
};

/* Flags for struct tp_recv.flags. */
/**
 * define TP_RECV_NONBLOCK - fail at once (EAGAIN) instead of waiting for the key
 */
#define TP_RECV_NONBLOCK	_BITUL(0)
/**
 * define TP_RECV_DONATE - receive into a new region instead of @region.
 *
 * A donated slot's pages become the new region without a copy; any other slot
 * is copied into a newly allocated region.  @region and @offset must be 0 on
 * input; @len is the largest tensor accepted.
 */
#define TP_RECV_DONATE		_BITUL(1)
/**
 * define TP_RECV_FLAGS_ALL - every TP_RECV_* flag; a new flag must join it
 */
#define TP_RECV_FLAGS_ALL	(TP_RECV_NONBLOCK | TP_RECV_DONATE)

/**
 * struct tp_recv - take the tensor posted under a key (TP_IOC_RECV).
 * @key_ptr:	in: address of the key bytes.
 * @key_len:	in: key length, 1 .. tp_info.max_key_len.
 * @flags:	in: TP_RECV_NONBLOCK, TP_RECV_DONATE.
 * @region:	in: destination region handle (WRITE access);
 *		out with TP_RECV_DONATE: the new region's handle.
 * @reserved0:	must be 0.
 * @offset:	in: byte offset in the destination region.
 * @len:	in: capacity in bytes; out: the tensor's length.
 * @timeout_ns:	in: relative timeout in nanoseconds; 0 waits forever.
 * @user_data:	in: opaque, returned unchanged (for asynchronous use).
 * @mmap_offset: out with TP_RECV_DONATE: mmap offset of the new region.
 * @reserved:	must be 0.
 *
 * Waits (unless TP_RECV_NONBLOCK) until a SEND with the same key is pending
 * in the endpoint's domain.  A tensor longer than @len fails with -EMSGSIZE
 * and @len set to the tensor's length; the slot stays for a retry.
 */
struct tp_recv {
	__u64 key_ptr;
	__u32 key_len;
	__u32 flags;
	__u32 region;
	__u32 reserved0;
	__u64 offset;
	__u64 len;
	__u64 timeout_ns;
	__u64 user_data;
	__u64 mmap_offset;
	__u64 reserved[2];
};

/* Flags for struct tp_cancel.flags: at least one must be set. */
/**
 * define TP_CANCEL_SEND - withdraw this endpoint's pending SEND of the key
 */
#define TP_CANCEL_SEND		_BITUL(0)
/**
 * define TP_CANCEL_RECV - wake this endpoint's RECVs waiting on the key with ECANCELED
 */
#define TP_CANCEL_RECV		_BITUL(1)
/**
 * define TP_CANCEL_FLAGS_ALL - every TP_CANCEL_* flag; a new flag must join it
 */
#define TP_CANCEL_FLAGS_ALL	(TP_CANCEL_SEND | TP_CANCEL_RECV)

/*
 * Commands without flags so far: their flags field must be 0.  A first flag
 * goes into the command's mask, which every handler checks.
 */
/**
 * define TP_INFO_FLAGS_ALL - flags of struct tp_info (none yet)
 */
#define TP_INFO_FLAGS_ALL		0
/**
 * define TP_REGION_REGISTER_FLAGS_ALL - flags of struct tp_region_register (none yet)
 */
#define TP_REGION_REGISTER_FLAGS_ALL	0
/**
 * define TP_REGION_ALLOC_FLAGS_ALL - flags of struct tp_region_alloc (none yet)
 */
#define TP_REGION_ALLOC_FLAGS_ALL	0
/**
 * define TP_REGION_RELEASE_FLAGS_ALL - flags of struct tp_region_release (none yet)
 */
#define TP_REGION_RELEASE_FLAGS_ALL	0
/**
 * define TP_DOMAIN_CREATE_FLAGS_ALL - flags of struct tp_domain_create (none yet)
 */
#define TP_DOMAIN_CREATE_FLAGS_ALL	0
/**
 * define TP_DOMAIN_ATTACH_MEMBER - attach as a member, whose opener's death
 * ends the other members' pending operations, and theirs this endpoint's,
 * with -EOWNERDEAD (TP_FEAT_MEMBER_DEATH)
 */
#define TP_DOMAIN_ATTACH_MEMBER		(1U << 0)
/**
 * define TP_DOMAIN_ATTACH_FLAGS_ALL - flags of struct tp_domain_attach
 */
#define TP_DOMAIN_ATTACH_FLAGS_ALL	TP_DOMAIN_ATTACH_MEMBER
/**
 * define TP_ABORT_FLAGS_ALL - flags of struct tp_abort (none yet)
 */
#define TP_ABORT_FLAGS_ALL		0
/**
 * define TP_ENDPOINT_INFO_FLAGS_ALL - flags of struct tp_endpoint_info (none yet)
 */
#define TP_ENDPOINT_INFO_FLAGS_ALL	0
/**
 * define TP_GRANT_FLAGS_ALL - flags of struct tp_grant (none yet)
 */
#define TP_GRANT_FLAGS_ALL		0
/**
 * define TP_GRANT_REVOKE_FLAGS_ALL - flags of struct tp_grant_revoke (none yet)
 */
#define TP_GRANT_REVOKE_FLAGS_ALL	0
/**
 * define TP_COPY_FLAGS_ALL - flags of struct tp_copy (none yet)
 */
#define TP_COPY_FLAGS_ALL		0

/**
 * struct tp_cancel - cancel pending operations on a key (TP_IOC_CANCEL).
 * @key_ptr:	in: address of the key bytes.
 * @key_len:	in: key length, 1 .. tp_info.max_key_len.
 * @flags:	in: TP_CANCEL_SEND and/or TP_CANCEL_RECV.
 * @count:	out: number of operations cancelled.
 * @reserved:	must be 0.
 *
 * A cancelled SEND completes with status -ECANCELED; a cancelled RECV
 * returns -ECANCELED.  A SEND already being consumed cannot be cancelled.
 */
struct tp_cancel {
	__u64 key_ptr;
	__u32 key_len;
	__u32 flags;
	__u32 count;
	__u32 reserved;
};

/**
 * struct tp_abort - abort the endpoint's domain (TP_IOC_ABORT).
 * @status:	in: a negative errno value of <errno.h>, -EHWPOISON .. -1, that
 *		every pending and every later SEND and RECV of the domain fails
 *		with.  The kernel's internal codes (512 and up) are refused.
 * @flags:	in: must be 0.
 *
 * Abort is final for the domain.  Pending SENDs complete with @status; waiting
 * RECVs return @status; later SEND and RECV fail with @status.
 */
struct tp_abort {
	__s32 status;
	__u32 flags;
};

/**
 * define TP_REGION_EXPORT_READ_ONLY - hand the buffer out for reading only
 *
 * The new descriptor is open O_RDONLY: wherever it is passed, it maps only
 * without PROT_WRITE and imports only with TP_ACCESS_READ.  The region's
 * owner still writes through its own handle and mappings.
 */
#define TP_REGION_EXPORT_READ_ONLY	_BITUL(0)
/**
 * define TP_REGION_EXPORT_FLAGS_ALL - every TP_REGION_EXPORT_* flag; a new
 * flag must join it
 */
#define TP_REGION_EXPORT_FLAGS_ALL	TP_REGION_EXPORT_READ_ONLY

/**
 * struct tp_region_export - a region as a dma-buf (TP_IOC_REGION_EXPORT).
 * @handle:	in: an allocated region of this endpoint (TP_IOC_REGION_ALLOC
 *		or a donating RECV).
 * @flags:	in: 0 or TP_REGION_EXPORT_READ_ONLY.
 * @fd:		out: a new dma-buf file descriptor, close-on-exec, open for
 *		reading and writing unless TP_REGION_EXPORT_READ_ONLY.
 * @reserved:	must be 0.
 * @size:	out: the dma-buf's size, the region's length rounded up to
 *		whole pages.
 *
 * The dma-buf shares the region's pages, without a copy: a device can map
 * it (ibv_reg_dmabuf_mr, a GPU's import), another process can mmap() it or
 * import it with TP_IOC_REGION_IMPORT.  It holds the region: the pages stay,
 * and stay charged to the region's user, until the handle is released and
 * the last reference to the dma-buf is gone.  An exported region cannot be
 * donated (-EBUSY).  The dma-buf maps only shared (MAP_SHARED; MAP_PRIVATE
 * fails with -EINVAL, as for udmabuf): a private copy would stop following
 * the region at its first write.
 */
struct tp_region_export {
	__u32 handle;
	__u32 flags;
	__s32 fd;
	__u32 reserved;
	__u64 size;
};

/**
 * define TP_REGION_REVOKE_FLAGS_ALL - flags of struct tp_region_revoke (none yet)
 */
#define TP_REGION_REVOKE_FLAGS_ALL	0

/**
 * struct tp_region_revoke - withdraw a region's dma-bufs (TP_IOC_REGION_REVOKE).
 * @handle:	in: an allocated region of this endpoint.
 * @flags:	in: 0.
 *
 * Every importer of the region's dma-bufs that can be told (a dynamic
 * attachment, such as this module's imports) is told that the buffer moved;
 * the module's imports of it then fail every later SEND, RECV and delivery
 * with -ENODEV, and a copy in progress stops within a chunk.  The region,
 * its mappings and the dma-bufs themselves stay; a new import works again.
 * Importers that pinned the buffer are not told.
 */
struct tp_region_revoke {
	__u32 handle;
	__u32 flags;
};

/**
 * define TP_REGION_IMPORT_FLAGS_ALL - flags of struct tp_region_import (none yet)
 */
#define TP_REGION_IMPORT_FLAGS_ALL	0

/**
 * struct tp_region_import - a dma-buf as a region (TP_IOC_REGION_IMPORT).
 * @fd:		in: a dma-buf file descriptor (from a GPU driver, udmabuf, a
 *		dma-buf heap, or TP_IOC_REGION_EXPORT).
 * @access:	in: TP_ACCESS_READ and/or TP_ACCESS_WRITE (at least one).
 * @flags:	in: 0.
 * @handle:	out: the new region's handle.
 * @len:	out: the region's length, the dma-buf's size.
 *
 * The region is the source or destination of slots like any other; the
 * module reaches its bytes through the exporter's kernel mapping (vmap),
 * bracketed by begin_cpu_access/end_cpu_access, so an exporter that offers
 * no kernel mapping cannot be imported (-EOPNOTSUPP).  The region holds its
 * own reference to the dma-buf: closing @fd afterwards changes nothing.  When
 * the exporter moves or revokes the buffer (it calls move_notify), the
 * region stops working for good: later SENDs, RECVs and deliveries that
 * use it fail with -ENODEV, a copy in progress stops within a chunk, and
 * nothing touches the old memory again.  The
 * exporter's memory is not charged to RLIMIT_MEMLOCK again.  An imported
 * region cannot be mapped through the endpoint (mmap the dma-buf itself) or
 * donated.  The access asked for must be one @fd's open mode allows, as
 * for mmap(): TP_ACCESS_READ needs a descriptor open for reading,
 * TP_ACCESS_WRITE one open for writing (-EACCES otherwise), so a dma-buf
 * handed out read-only is never written through the module.
 */
struct tp_region_import {
	__s32 fd;
	__u32 access;
	__u32 flags;
	__u32 handle;
	__u64 len;
};

/**
 * define TP_GRANTS_MAX - grants one endpoint may hold at once
 */
#define TP_GRANTS_MAX		4096
/**
 * define TP_COPY_MAX_ELEMS - most elements in one TP_IOC_COPY
 */
#define TP_COPY_MAX_ELEMS	1024
/**
 * define TP_COPY_MAX_BYTES - most bytes, summed over its elements, one
 * TP_IOC_COPY moves (4 GiB)
 */
#define TP_COPY_MAX_BYTES	(1ULL << 32)

/**
 * struct tp_endpoint_info - who this endpoint is (TP_IOC_ENDPOINT_INFO).
 * @id:		out: the endpoint's id, never 0, unique and never reused
 *		while the module stays loaded; what TP_IOC_GRANT names.
 * @domain_id:	out: the attached domain's id, 0 when not attached.
 * @flags:	in: must be 0.
 * @reserved0:	must be 0.
 * @reserved:	must be 0 on input; 0 on output.
 */
struct tp_endpoint_info {
	__u64 id;
	__u64 domain_id;
	__u32 flags;
	__u32 reserved0;
	__u64 reserved[2];
};

/**
 * struct tp_grant - let another endpoint of the domain reach a range of a
 * region (TP_IOC_GRANT).
 * @grantee:	in: the id (struct tp_endpoint_info) of the endpoint that
 *		may use the grant.  The module does not look it up: a grant
 *		to an id that is not attached to this domain is never usable.
 * @offset:	in: start of the granted range in the region.
 * @len:	in: length of the granted range, at least 1.
 * @region:	in: a region handle of this endpoint, pinned user memory or
 *		an allocated buffer (not an imported dma-buf).
 * @access:	in: TP_ACCESS_READ (the grantee may read the range) and/or
 *		TP_ACCESS_WRITE (it may write it); each must be an access
 *		the region itself has.
 * @flags:	in: must be 0.
 * @id:		must be 0 on input; out: the grant id, valid in this
 *		domain, never 0.  Ids are handed out cyclically, so a revoked
 *		id is not reused soon.
 * @reserved:	must be 0.
 *
 * The grant holds the region: its pages stay pinned until the grant ends.
 * While granted, an allocated region cannot be donated (-EBUSY).
 */
struct tp_grant {
	__u64 grantee;
	__u64 offset;
	__u64 len;
	__u32 region;
	__u32 access;
	__u32 flags;
	__u32 id;
	__u64 reserved;
};

/**
 * struct tp_grant_revoke - end a grant (TP_IOC_GRANT_REVOKE).
 * @id:		in: a grant id this endpoint created.
 * @flags:	in: must be 0.
 */
struct tp_grant_revoke {
	__u32 id;
	__u32 flags;
};

/* Directions for struct tp_copy_elem.flags: exactly one must be set. */
/**
 * define TP_COPY_READ - copy from the granted range to local memory
 * (needs TP_ACCESS_READ in the grant)
 */
#define TP_COPY_READ		_BITUL(0)
/**
 * define TP_COPY_WRITE - copy from local memory to the granted range
 * (needs TP_ACCESS_WRITE in the grant)
 */
#define TP_COPY_WRITE		_BITUL(1)
/**
 * define TP_COPY_ELEM_FLAGS_ALL - every TP_COPY_* direction; a new bit must join it
 */
#define TP_COPY_ELEM_FLAGS_ALL	(TP_COPY_READ | TP_COPY_WRITE)

/**
 * struct tp_copy_elem - one piece of a TP_IOC_COPY.
 * @addr:	local address in the caller's own address space; any
 *		alignment.  @addr + @len must not wrap.
 * @offset:	offset in the granted range (not in the region).
 * @len:	bytes to copy; 0 is allowed and copies nothing (the element
 *		is still checked).
 * @grant:	grant id, of a grant to the calling endpoint.
 * @flags:	TP_COPY_READ or TP_COPY_WRITE.
 */
struct tp_copy_elem {
	__u64 addr;
	__u64 offset;
	__u64 len;
	__u32 grant;
	__u32 flags;
};

/**
 * struct tp_copy - copy a list of pieces to and from granted ranges (TP_IOC_COPY).
 * @elems:	in: address of an array of @nr_elems struct tp_copy_elem.
 * @nr_elems:	in: 1 .. TP_COPY_MAX_ELEMS.
 * @flags:	in: must be 0.
 * @reserved:	must be 0.
 *
 * Every element is checked before any byte moves; then the elements are
 * copied in order, in the caller's context.  A fault on local memory the
 * checks could not foresee (a range that is not mapped, or not writable
 * for TP_COPY_READ) stops the copy with -EFAULT after a prefix of the list
 * was copied, as a revoke in progress does with -ENOENT.
 */
struct tp_copy {
	__u64 elems;
	__u32 nr_elems;
	__u32 flags;
	__u64 reserved[2];
};

/* Values of struct tp_completion.op. */
/**
 * define TP_OP_SEND - the completion of a TP_IOC_SEND
 */
#define TP_OP_SEND		1

/**
 * struct tp_completion - one record returned by read(2) on an endpoint.
 * @user_data:	the user_data of the operation.
 * @status:	0 when the consumer took the tensor; -ECANCELED after
 *		TP_IOC_CANCEL; the abort status after TP_IOC_ABORT;
 *		-EOWNERDEAD when another member of the domain died while
 *		the SEND was pending (TP_DOMAIN_ATTACH_MEMBER); -ENODEV as
 *		TP_IOC_RECV says.
 * @op:		TP_OP_SEND.
 * @len:	bytes delivered (0 unless @status is 0).
 * @reserved:	0.
 *
 * read(2) returns as many whole records as fit in the buffer (-EINVAL if not
 * even one fits), blocks until at least one is queued unless the fd is
 * O_NONBLOCK (then -EAGAIN).  Once the source's completion has been read the
 * source buffer may be reused.
 */
struct tp_completion {
	__u64 user_data;
	__s32 status;
	__u32 op;
	__u64 len;
	__u64 reserved;
};

/**
 * define TP_IOC_MAGIC - ioctl type byte of tensorpipe
 */
#define TP_IOC_MAGIC		0xB9

/**
 * define TP_IOC_GET_INFO - report ABI version, features and limits.
 *
 * Errors: -EINVAL (flags or reserved non-zero).
 */
#define TP_IOC_GET_INFO		_IOWR(TP_IOC_MAGIC, 0x00, struct tp_info)

/**
 * define TP_IOC_REGION_REGISTER - pin user memory as a region.
 *
 * Errors: -EINVAL (no access bit, unknown bits, flags or reserved non-zero,
 * len 0, addr + len wraps), -E2BIG (len above max_region_bytes), -ENOSPC
 * (max_regions reached), -ENOMEM (RLIMIT_MEMLOCK exceeded, or out of
 * memory), -EFAULT (range not mapped, or not writable for TP_ACCESS_WRITE).
 */
#define TP_IOC_REGION_REGISTER	_IOWR(TP_IOC_MAGIC, 0x01, struct tp_region_register)

/**
 * define TP_IOC_REGION_ALLOC - allocate a zeroed buffer to mmap.
 *
 * Errors: -EINVAL (flags or reserved non-zero, len 0), -E2BIG (len above
 * max_region_bytes), -ENOSPC (max_regions reached), -ENOMEM (RLIMIT_MEMLOCK
 * exceeded, the memory cgroup's limit reached, or out of memory).
 */
#define TP_IOC_REGION_ALLOC	_IOWR(TP_IOC_MAGIC, 0x02, struct tp_region_alloc)

/**
 * define TP_IOC_REGION_RELEASE - drop a region handle.
 *
 * Errors: -EINVAL (flags non-zero), -ENOENT (no such handle on this endpoint).
 */
#define TP_IOC_REGION_RELEASE	_IOW(TP_IOC_MAGIC, 0x03, struct tp_region_release)

/**
 * define TP_IOC_DOMAIN_CREATE - create a domain, return its descriptor.
 *
 * Errors: -EINVAL (flags non-zero), -EMFILE or -ENFILE (no free descriptor),
 * -ENOMEM.
 */
#define TP_IOC_DOMAIN_CREATE	_IOWR(TP_IOC_MAGIC, 0x04, struct tp_domain_create)

/**
 * define TP_IOC_DOMAIN_ATTACH - attach this endpoint to a domain.
 *
 * Errors: -EINVAL (unknown flags, or @fd is not a domain descriptor),
 * -EBADF (@fd is not open), -EBUSY (the endpoint is already attached).
 */
#define TP_IOC_DOMAIN_ATTACH	_IOWR(TP_IOC_MAGIC, 0x05, struct tp_domain_attach)

/**
 * define TP_IOC_SEND - post a tensor under a key; never blocks.
 *
 * Errors: -EINVAL (unknown flags, reserved non-zero, key_len 0, DONATE with a
 * registered region or a non-zero offset), -ENAMETOOLONG (key_len above
 * max_key_len), -ENOLINK (endpoint not attached to a domain), -ENOENT (no such
 * region), -EACCES (region lacks TP_ACCESS_READ), -ERANGE (offset + len past
 * the region's end, or wrapping), -EBUSY (DONATE of a region still mapped or in use),
 * -EEXIST (a SEND of this key is already pending in the domain), -ENOSPC (the
 * domain holds max_slots pending SENDs), -ENOBUFS (this endpoint has max_slots
 * SENDs outstanding: read completions first), -EDQUOT (the user has
 * max_user_ops SENDs outstanding and io_uring RECVs waiting, over all its
 * endpoints), -ENODEV (the region is an import its exporter revoked),
 * -ENOMEM, or the domain's abort status.  The completion's status is one
 * of those of struct tp_completion.
 */
#define TP_IOC_SEND		_IOWR(TP_IOC_MAGIC, 0x06, struct tp_send)

/**
 * define TP_IOC_RECV - take the tensor posted under a key.
 *
 * Errors: -EINVAL (unknown flags, reserved non-zero, key_len 0, DONATE with a
 * non-zero region or offset), -ENAMETOOLONG, -ENOLINK, -ENOENT (no such
 * region), -EACCES (region lacks TP_ACCESS_WRITE), -ERANGE (offset + len past
 * the region's end, or wrapping), -EMSGSIZE (tensor longer than len; len is
 * set to its length, the slot stays), -EAGAIN (NONBLOCK and no such key),
 * -ETIMEDOUT, -EINTR (a signal handler ran, even with SA_RESTART; nothing
 * was taken; without a handler the call restarts and its timeout with it),
 * -ECANCELED (TP_IOC_CANCEL with TP_CANCEL_RECV), -ENOSPC (DONATE, and the
 * endpoint holds max_regions regions; the slot stays), -ENOMEM
 * (RLIMIT_MEMLOCK or memory, for DONATE; the slot stays), -EDQUOT (as an
 * io_uring command only: the user's max_user_ops is reached), -ENODEV (the
 * destination is an import its exporter revoked; or the tensor's source is,
 * and then the SEND completes with -ENODEV too), -EOWNERDEAD (another
 * member of the domain died while this RECV waited; only for an endpoint
 * attached with TP_DOMAIN_ATTACH_MEMBER), or the domain's abort
 * status.  A tensor whose producer closed its endpoint while
 * this RECV was copying it is not offered again when the copy fails: it is
 * gone with its producer.
 */
#define TP_IOC_RECV		_IOWR(TP_IOC_MAGIC, 0x07, struct tp_recv)

/**
 * define TP_IOC_CANCEL - cancel this endpoint's operations on a key.
 *
 * Errors: -EINVAL (no or unknown flags, reserved non-zero, key_len 0),
 * -ENAMETOOLONG, -ENOLINK, -ENOENT (nothing of this endpoint to cancel).
 */
#define TP_IOC_CANCEL		_IOWR(TP_IOC_MAGIC, 0x08, struct tp_cancel)

/**
 * define TP_IOC_ABORT - abort the endpoint's domain.
 *
 * Errors: -EINVAL (flags non-zero, status outside -EHWPOISON .. -1), -ENOLINK,
 * -EALREADY (the domain was already aborted; its status is unchanged).
 */
#define TP_IOC_ABORT		_IOW(TP_IOC_MAGIC, 0x09, struct tp_abort)

/**
 * define TP_IOC_REGION_EXPORT - export an allocated region as a DMA buffer
 *
 * Errors: -EINVAL (unknown flags or reserved non-zero; the region is pinned
 * user memory or an import, not an allocated region), -ENOENT (no such
 * region), -EMFILE (no free descriptor), -ENOMEM.
 */
#define TP_IOC_REGION_EXPORT	_IOWR(TP_IOC_MAGIC, 0x0A, struct tp_region_export)

/**
 * define TP_IOC_REGION_IMPORT - register a DMA buffer as a region
 *
 * Errors: -EINVAL (flags non-zero, access 0 or unknown bits, @fd is not a
 * dma-buf), -EBADF (@fd is not open), -EACCES (@fd is not open for reading
 * and TP_ACCESS_READ was asked, or not for writing and TP_ACCESS_WRITE
 * was), -E2BIG (dma-buf larger than
 * max_region_bytes), -ENOSPC (max_regions reached), -EOPNOTSUPP (the
 * exporter offers no kernel mapping, or only I/O memory), -ENOMEM.
 */
#define TP_IOC_REGION_IMPORT	_IOWR(TP_IOC_MAGIC, 0x0B, struct tp_region_import)

/**
 * define TP_IOC_REGION_REVOKE - tell the importers of a region's DMA buffers to stop
 *
 * Errors: -EINVAL (flags non-zero; not an allocated region), -ENOENT.
 */
#define TP_IOC_REGION_REVOKE	_IOW(TP_IOC_MAGIC, 0x0C, struct tp_region_revoke)

/**
 * define TP_IOC_ENDPOINT_INFO - report the endpoint's id and domain
 *
 * Errors: -EINVAL (flags or reserved non-zero).
 */
#define TP_IOC_ENDPOINT_INFO	_IOWR(TP_IOC_MAGIC, 0x0D, struct tp_endpoint_info)

/**
 * define TP_IOC_GRANT - grant a range of a region to an endpoint of the domain
 *
 * Errors: -EINVAL (flags or reserved non-zero, access 0 or unknown bits,
 * len 0, grantee 0), -ENOLINK (endpoint not attached to a domain), -ENOENT
 * (no such region), -EOPNOTSUPP (the region is an imported dma-buf),
 * -EACCES (an access bit the region lacks), -ERANGE (offset + len past the
 * region's end, or wrapping), -ENOSPC (the endpoint holds TP_GRANTS_MAX
 * grants), -ENOMEM.
 */
#define TP_IOC_GRANT		_IOWR(TP_IOC_MAGIC, 0x0E, struct tp_grant)

/**
 * define TP_IOC_GRANT_REVOKE - end a grant this endpoint created
 *
 * Returns once no copy can touch the granted range any more.
 * Errors: -EINVAL (flags non-zero), -ENOLINK (not attached), -ENOENT (no
 * such grant of this endpoint: never created, already revoked, or another
 * endpoint's).
 */
#define TP_IOC_GRANT_REVOKE	_IOW(TP_IOC_MAGIC, 0x0F, struct tp_grant_revoke)

/**
 * define TP_IOC_COPY - copy a list of pieces to and from granted ranges
 *
 * Also an io_uring command (TP_FEAT_URING_CMD and TP_FEAT_GRANT): the
 * struct tp_copy lies in the SQE's command area, the list is read at
 * submission and copied before the CQE is posted; res is 0 or the error.
 * Errors, checked for the whole list before any byte moves, in the
 * elements' order: -EINVAL (flags or reserved non-zero, nr_elems 0, an
 * element's flags not exactly one direction, addr + len wrapping),
 * -E2BIG (nr_elems above TP_COPY_MAX_ELEMS, or the lengths sum above
 * TP_COPY_MAX_BYTES), -ENOLINK (endpoint not attached), -ENOENT (no such
 * grant in the domain, or revoked), -EACCES (the grant is for another
 * endpoint, or lacks the access the direction needs), -ERANGE (offset +
 * len past the granted range, or wrapping), -EFAULT (the list cannot be
 * read, or a local range is outside the user address space), -ENOMEM.
 * While copying: -EFAULT (local memory faulted), -ENOENT (a grant was
 * revoked), -EINTR (fatal signal); a prefix of the list has then moved.
 */
#define TP_IOC_COPY		_IOW(TP_IOC_MAGIC, 0x10, struct tp_copy)

#endif /* _UAPI_LINUX_TENSORPIPE_H */
