/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * libtpu_user: user-space access to /dev/tensorpipe.
 *
 * This is the foundation the rendezvous library grows from.  It offers:
 *
 *   - versions: of this library, and of the module's ABI (TP_IOC_GET_INFO);
 *   - status codes: one integer type, tpu_status, for every call, with
 *     tpu_strerror() and tpu_status_name();
 *   - the device layer: one function per ioctl of the tensorpipe ABI, on an
 *     opaque endpoint (an open of the device);
 *   - a probe that says whether /dev/tensorpipe is usable, why not, and which
 *     path a cross-process transfer would take instead (process_vm_readv);
 *   - the process_vm_readv pull used when the module is absent, and passing
 *     a descriptor (a domain) over a Unix socket;
 *   - TensorFlow-style rendezvous keys and device names, built and parsed.
 *
 * The semantics of each device-layer call are those of the ioctl it wraps,
 * documented command by command in <linux/tensorpipe.h>; this header says
 * only what the library adds.  The header is self-contained: it does not
 * need the uapi header, and the library checks at build time that the
 * constants below equal the ABI's.
 *
 * Every call is safe with bad arguments: it returns a status and never
 * dereferences a NULL pointer it was given.
 *
 * Thread safety: the key, device-name, status and version functions are
 * pure.  An endpoint may be used from several threads at once, as the
 * module serialises what needs it, except that tpu_completions_read()
 * expects one reader at a time.
 */
#ifndef TPU_USER_H
#define TPU_USER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with -fvisibility=hidden; only what carries this is exported. */
#define TPU_API __attribute__((visibility("default")))

/* ------------------------------------------------------------------ */
/* Status                                                              */
/* ------------------------------------------------------------------ */

/**
 * typedef tpu_status - result of every call that can fail.
 *
 * 0 is success.  -1 .. -TPU_ERRNO_MAX are negative errno values, passed on
 * unchanged from the kernel (their meaning per command is documented in
 * <linux/tensorpipe.h>) or from libc; an abort status chosen by a program is
 * in this range too.  Values below that are the library's own, TPU_E_*.
 */
typedef int tpu_status;

#define TPU_ERRNO_MAX		4095

enum {
	TPU_OK			= 0,
	/** the device node does not exist: the module is not loaded */
	TPU_E_NO_DEVICE		= -10001,
	/** the file opened is not a tensorpipe device (GET_INFO unknown) */
	TPU_E_NOT_TENSORPIPE	= -10002,
	/** the module speaks an ABI version this library was not built for */
	TPU_E_ABI_MISMATCH	= -10003,
	/** a string is not a rendezvous key "src;incarnation;dst;edge;frame:iter" */
	TPU_E_BAD_KEY		= -10004,
	/** a string is not a full device name "/job:J/replica:R/task:T/device:TYPE:N" */
	TPU_E_BAD_DEVICE_NAME	= -10005,
	/** nothing usable: a pipe transport ruled out (context options, TPU_TRANSPORTS), or no viable rendezvous implementation */
	TPU_E_NO_TRANSPORT	= -10006,
	/** the rendezvous or context was destroyed before the operation finished */
	TPU_E_CLOSED		= -10007,
	/** the process at the other end died (a rendezvous peer, see tpu_rendezvous_create) */
	TPU_E_PEER_GONE		= -10008,
	/**
	 * an object (context, rendezvous, pipe, listener, buffer, world, coll,
	 * executor) used after its destroy, free or close.  Destroying one
	 * twice is harmless (ignored); an endpoint closed twice likewise.
	 * The check reads the object's own poisoned memory, kept for a while
	 * after it goes away: use long after destroy is undefined as ever.
	 */
	TPU_E_DESTROYED		= -10009,
	/**
	 * an object used in a child forked after its creation: no object
	 * survives fork(), everything but endpoints refuses use there.
	 * Destroying one in the child returns at once and releases only the
	 * child's copy (memory, mappings, descriptors), never what the parent
	 * shares; a context's, world's or executor's copy may stay allocated.
	 * An endpoint is the module's descriptor: the child shares it as any
	 * inherited descriptor, and closing it closes the child's copy only.
	 */
	TPU_E_FORKED		= -10010,
	/** a URL whose scheme names no transport of this library (tcp://, shm://, rdma://) */
	TPU_E_URL_SCHEME	= -10011,
	/** a tcp:// or rdma:// URL without its port (HOST:PORT, [V6]:PORT) */
	TPU_E_URL_PORT		= -10012,
	/** the members of a collective disagree on its parameters (type, data type, count...) */
	TPU_E_COLL_MISMATCH	= -10013,
	/** no usable CUDA driver: libcuda.so.1 (or TPU_CUDA_DRIVER) absent, no GPU, or CUDA support not built */
	TPU_E_NO_CUDA		= -10014,
	/** a CUDA driver call failed (TPU_LOG=debug names the call and the driver's error) */
	TPU_E_CUDA		= -10015,
	/** not a transfer metadata blob of this library: truncated, corrupted, another version, or of an agent the address no longer serves */
	TPU_E_BAD_BLOB		= -10016,
	/** the registration was deregistered (or its agent is gone): no peer reaches it any more */
	TPU_E_REVOKED		= -10017,
};

/** tpu_strerror - a readable sentence for any status; never NULL */
TPU_API const char *tpu_strerror(tpu_status status);
/** tpu_status_name - the symbol of a status ("EINVAL", "TPU_E_BAD_KEY", "OK"); never NULL */
TPU_API const char *tpu_status_name(tpu_status status);

/* ------------------------------------------------------------------ */
/* Log                                                                 */
/* ------------------------------------------------------------------ */

/**
 * typedef tpu_log_fn - receives one line the library logs.
 * @line:	the line, NUL-terminated, without "tpu: " and newline; valid
 *		only during the call.
 *
 * It runs on whichever thread logs, a context's completion thread
 * included: it must not block, nor call the library.
 */
typedef void (*tpu_log_fn)(void *arg, const char *line);

/**
 * tpu_log_set_handler - send the library's log lines to @fn instead of stderr.
 * @fn:		the handler; NULL puts stderr back.
 * @debug:	log the debug lines even without TPU_LOG=debug (with it they
 *		are logged anyway).
 *
 * For bindings that route the log into their language's own (Python's
 * logging).  Safe from any thread; a line being logged as the handler
 * changes goes to the old handler or the new one, never lost, and @fn is
 * not called once this returned with another handler.
 */
TPU_API void tpu_log_set_handler(tpu_log_fn fn, void *arg, bool debug);

/* ------------------------------------------------------------------ */
/* Versions                                                            */
/* ------------------------------------------------------------------ */

/*
 * The major version is the N of the SONAME libtpu_user.so.N: it goes up
 * with every change that breaks programs built against an earlier header
 * (Documentation/abi.rst), the minor with every addition.
 */
#define TPU_VERSION_MAJOR	1
#define TPU_VERSION_MINOR	2
#define TPU_VERSION_PATCH	0
/** TPU_VERSION - this header's library version as one comparable number */
#define TPU_VERSION \
	((TPU_VERSION_MAJOR << 16) | (TPU_VERSION_MINOR << 8) | TPU_VERSION_PATCH)

/** tpu_version - TPU_VERSION of the library actually linked (may differ from the header's) */
TPU_API uint32_t tpu_version(void);
/** tpu_version_string - the linked library's version as "MAJOR.MINOR.PATCH" */
TPU_API const char *tpu_version_string(void);
/** tpu_abi_version - the tensorpipe ABI version the library was built for */
TPU_API uint32_t tpu_abi_version(void);
/**
 * tpu_module_abi_version - ask the loaded module which ABI it speaks.
 * @dev_path:	device node, NULL for TPU_DEVICE_PATH.
 * @abi:	out: the module's abi_version.
 *
 * Opens the device, issues TP_IOC_GET_INFO and closes it.  Unlike
 * tpu_endpoint_open() it reports a module of another ABI version instead of
 * refusing it.
 */
TPU_API tpu_status tpu_module_abi_version(const char *dev_path, uint32_t *abi);

/* ------------------------------------------------------------------ */
/* Device layer                                                        */
/* ------------------------------------------------------------------ */

#define TPU_DEVICE_PATH		"/dev/tensorpipe"

/* Feature bits of struct tpu_info.features (equal to the ABI's TP_FEAT_*). */
#define TPU_FEAT_REGION_ALLOC	(1ULL << 0)
#define TPU_FEAT_DONATE		(1ULL << 1)
#define TPU_FEAT_RECV_TIMEOUT	(1ULL << 2)
#define TPU_FEAT_LARGE_ALLOC	(1ULL << 3)
#define TPU_FEAT_URING_CMD	(1ULL << 4)
#define TPU_FEAT_URING_KERNEL_CANCEL	(1ULL << 5)
#define TPU_FEAT_DMABUF		(1ULL << 6)
#define TPU_FEAT_MEMBER_DEATH	(1ULL << 7)
#define TPU_FEAT_GRANT		(1ULL << 8)

/** tpu_feature_name - short name of one feature bit ("donate"), or NULL if unknown */
TPU_API const char *tpu_feature_name(uint64_t feature_bit);

/** struct tpu_info - what the module reports (see struct tp_info) */
struct tpu_info {
	uint32_t abi_version;
	uint64_t features;
	uint32_t max_key_len;
	uint32_t max_regions;
	uint32_t max_slots;
	uint32_t page_size;
	uint64_t max_region_bytes;
};

/**
 * struct tpu_endpoint - one open of the device (opaque).
 *
 * Like the descriptor inside it, an endpoint belongs to the process that
 * opened it: after fork() the child must open its own.
 */
struct tpu_endpoint;

/**
 * tpu_endpoint_open - open the device and check it speaks our ABI.
 * @dev_path:	device node, NULL for TPU_DEVICE_PATH.
 * @out:	out: the endpoint; NULL on failure.
 *
 * Errors: TPU_E_NO_DEVICE (no such node), TPU_E_NOT_TENSORPIPE,
 * TPU_E_ABI_MISMATCH, or the errno of open(2) (-EACCES, -EMFILE, ...).
 */
TPU_API tpu_status tpu_endpoint_open(const char *dev_path, struct tpu_endpoint **out);
/** tpu_endpoint_close - close the endpoint (NULL is ignored); its pending SENDs are withdrawn */
TPU_API void tpu_endpoint_close(struct tpu_endpoint *ep);
/** tpu_endpoint_fd - the descriptor, for poll/epoll on completions; -1 for NULL */
TPU_API int tpu_endpoint_fd(const struct tpu_endpoint *ep);
/** tpu_endpoint_info - query the module now (its limits may change at run time) */
TPU_API tpu_status tpu_endpoint_info(struct tpu_endpoint *ep, struct tpu_info *info);

/* Access bits of tpu_region_register (equal to the ABI's TP_ACCESS_*). */
#define TPU_ACCESS_READ		(1U << 0)
#define TPU_ACCESS_WRITE	(1U << 1)

/** tpu_region_register - pin [addr, addr + len) as a region (TP_IOC_REGION_REGISTER) */
TPU_API tpu_status tpu_region_register(struct tpu_endpoint *ep, const void *addr, size_t len,
				       unsigned int access, uint32_t *handle);
/**
 * tpu_region_alloc - allocate a zeroed kernel buffer to mmap (TP_IOC_REGION_ALLOC).
 *
 * The pages count against RLIMIT_MEMLOCK and the caller's memory cgroup:
 * -ENOMEM past either limit (or when memory runs out), never the OOM killer.
 */
TPU_API tpu_status tpu_region_alloc(struct tpu_endpoint *ep, size_t len, uint32_t *handle,
				    uint64_t *mmap_offset);
/** tpu_region_release - drop a region handle (TP_IOC_REGION_RELEASE) */
TPU_API tpu_status tpu_region_release(struct tpu_endpoint *ep, uint32_t handle);

/* Flags of tpu_region_mmap. */
/** TPU_MAP_POPULATE - fault every page in now rather than on first touch */
#define TPU_MAP_POPULATE	(1U << 0)

/**
 * tpu_region_mmap - map an allocated or donated region read-write, shared.
 * @mmap_offset: from tpu_region_alloc() or a DONATE receive.
 * @len:	bytes to map, at least 1.
 * @flags:	0 or TPU_MAP_POPULATE.
 * @addr:	out: the mapping.
 */
TPU_API tpu_status tpu_region_mmap(struct tpu_endpoint *ep, uint64_t mmap_offset, size_t len,
				   unsigned int flags, void **addr);
/** tpu_region_munmap - undo tpu_region_mmap() (a DONATE send needs its region unmapped) */
TPU_API tpu_status tpu_region_munmap(void *addr, size_t len);
/**
 * tpu_region_alloc_mapped - tpu_region_alloc() then tpu_region_mmap().
 *
 * On failure nothing is left behind: the region is released if mapping it failed.
 */
TPU_API tpu_status tpu_region_alloc_mapped(struct tpu_endpoint *ep, size_t len, unsigned int flags,
					   uint32_t *handle, void **addr);

/**
 * tpu_region_export - an allocated region as a dma-buf (TP_IOC_REGION_EXPORT).
 * @handle:	a region from tpu_region_alloc() or a DONATE receive.
 * @fd:		out: a new close-on-exec dma-buf descriptor; the caller closes it.
 * @size:	out, may be NULL: the dma-buf's size (whole pages).
 *
 * Needs TPU_FEAT_DMABUF (else -ENOTTY from an older module).  The
 * descriptor is open for reading and writing; the dma-buf maps MAP_SHARED
 * only (MAP_PRIVATE: -EINVAL).
 */
TPU_API tpu_status tpu_region_export(struct tpu_endpoint *ep, uint32_t handle, int *fd,
				     uint64_t *size);
/**
 * tpu_region_import - a dma-buf as a region (TP_IOC_REGION_IMPORT).
 * @fd:		a dma-buf (udmabuf, a dma-buf heap, a GPU driver's export, or
 *		tpu_region_export()); the region holds its own reference, so
 *		the caller may close @fd at once.
 * @access:	TPU_ACCESS_READ and/or TPU_ACCESS_WRITE.
 * @handle:	out: the region, released with tpu_region_release().
 * @len:	out, may be NULL: the region's length.
 *
 * -EOPNOTSUPP when the exporter offers the CPU no mapping of the buffer
 * (the module copies with the CPU); -EBADF/-EINVAL for a descriptor that
 * is not a dma-buf; -EACCES when @access asks for more than @fd's open mode
 * allows (TPU_ACCESS_WRITE of a descriptor opened read-only, such as a
 * dma-buf heap buffer allocated O_RDONLY, or TPU_ACCESS_READ of a
 * write-only one).
 */
TPU_API tpu_status tpu_region_import(struct tpu_endpoint *ep, int fd, unsigned int access,
				     uint32_t *handle, uint64_t *len);
/** tpu_region_revoke - tell the importers of a region's dma-bufs that it moved (TP_IOC_REGION_REVOKE) */
TPU_API tpu_status tpu_region_revoke(struct tpu_endpoint *ep, uint32_t handle);

/**
 * tpu_domain_create - create a domain (TP_IOC_DOMAIN_CREATE).
 * @domain_fd:	out: O_CLOEXEC descriptor, the capability to attach to it.
 * @id:		out, may be NULL: the domain id shown in debugfs.
 *
 * The endpoint itself is not attached: call tpu_domain_attach() too.
 */
TPU_API tpu_status tpu_domain_create(struct tpu_endpoint *ep, int *domain_fd, uint64_t *id);
/** tpu_domain_attach - join the domain of @domain_fd; @id (may be NULL) gets its id */
TPU_API tpu_status tpu_domain_attach(struct tpu_endpoint *ep, int domain_fd, uint64_t *id);

/* Flags of struct tpu_send_args (equal to the ABI's TP_SEND_*). */
#define TPU_SEND_DONATE		(1U << 0)

/** struct tpu_send_args - a SEND; fields as in struct tp_send */
struct tpu_send_args {
	const void *key;
	size_t key_len;
	unsigned int flags;
	uint32_t region;
	uint64_t offset;
	uint64_t len;
	uint64_t user_data;
};

/** tpu_send - post a tensor under a key; never blocks (TP_IOC_SEND) */
TPU_API tpu_status tpu_send(struct tpu_endpoint *ep, const struct tpu_send_args *args);

/* Flags of struct tpu_recv_args (equal to the ABI's TP_RECV_*). */
#define TPU_RECV_NONBLOCK	(1U << 0)
#define TPU_RECV_DONATE		(1U << 1)

/**
 * struct tpu_recv_args - a RECV; fields as in struct tp_recv.
 * @region:	in: destination; out with TPU_RECV_DONATE: the new region.
 * @len:	in: capacity; out: the tensor's length, also on -EMSGSIZE.
 * @mmap_offset: out with TPU_RECV_DONATE: pass to tpu_region_mmap().
 */
struct tpu_recv_args {
	const void *key;
	size_t key_len;
	unsigned int flags;
	uint32_t region;
	uint64_t offset;
	uint64_t len;
	uint64_t timeout_ns;
	uint64_t mmap_offset;
};

/** tpu_recv - take the tensor posted under a key (TP_IOC_RECV); the out fields are set on return */
TPU_API tpu_status tpu_recv(struct tpu_endpoint *ep, struct tpu_recv_args *args);

/* Flags of tpu_cancel (equal to the ABI's TP_CANCEL_*). */
#define TPU_CANCEL_SEND		(1U << 0)
#define TPU_CANCEL_RECV		(1U << 1)

/** tpu_cancel - cancel this endpoint's operations on a key; @count (may be NULL) gets how many */
TPU_API tpu_status tpu_cancel(struct tpu_endpoint *ep, const void *key, size_t key_len,
			      unsigned int flags, uint32_t *count);
/** tpu_abort - fail the domain's pending and later operations with @status (-EHWPOISON .. -1) */
TPU_API tpu_status tpu_abort(struct tpu_endpoint *ep, int status);

#define TPU_OP_SEND		1

/** struct tpu_completion - a finished SEND (see struct tp_completion) */
struct tpu_completion {
	uint64_t user_data;
	int32_t status;
	uint32_t op;
	uint64_t len;
};

/**
 * tpu_completions_read - collect finished SENDs.
 * @out:	room for @max records (@max >= 1).
 * @timeout_ms:	-1 waits for the first record, 0 does not wait, > 0 waits
 *		that long at most.
 * @count:	out: records stored, at least 1 on success.
 *
 * Errors: -EAGAIN (timeout 0 and none queued), -ETIMEDOUT, -EINTR.
 */
TPU_API tpu_status tpu_completions_read(struct tpu_endpoint *ep, struct tpu_completion *out,
					size_t max, int timeout_ms, size_t *count);

/* ------------------------------------------------------------------ */
/* Probe: which path moves a tensor between two local processes        */
/* ------------------------------------------------------------------ */

enum tpu_path {
	TPU_PATH_NONE = 0,	/* nothing usable */
	TPU_PATH_KMOD,		/* /dev/tensorpipe: one copy, or none when donating */
	TPU_PATH_CMA,		/* process_vm_readv pull, one copy, pins on every call */
};

/** tpu_path_name - "kmod", "process_vm_readv" or "none" */
TPU_API const char *tpu_path_name(enum tpu_path path);

/**
 * struct tpu_probe_result - what tpu_probe() found.
 * @path:		the path a cross-process transfer would use.
 * @kmod_status:	0 when the device is usable, otherwise why not.
 * @module_abi:		the module's ABI version, 0 when it could not be asked.
 * @module_features:	its TPU_FEAT_* bits, 0 when it could not be asked.
 * @cma_status:		0 when process_vm_readv works in this process
 *			(not forbidden by seccomp, Yama scope 3 or the kernel).
 * @yama_ptrace_scope:	/proc/sys/kernel/yama/ptrace_scope, -1 without Yama.
 *			Scope 1 lets only an ancestor pull, or a process
 *			the producer names with tpu_cma_allow().
 * @detail:		a readable account of the above, one or two sentences.
 */
struct tpu_probe_result {
	enum tpu_path path;
	tpu_status kmod_status;
	uint32_t module_abi;
	uint64_t module_features;
	tpu_status cma_status;
	int yama_ptrace_scope;
	char detail[320];
};

/**
 * tpu_probe - find whether /dev/tensorpipe is usable and what would replace it.
 * @dev_path:	device node, NULL for TPU_DEVICE_PATH.
 *
 * Returns 0 when some path is usable, TPU_E_NO_TRANSPORT when none is, or
 * -EINVAL for a NULL @out.  The result is filled in either way.
 */
TPU_API tpu_status tpu_probe(const char *dev_path, struct tpu_probe_result *out);

/* ------------------------------------------------------------------ */
/* Fallback helpers: process_vm_readv, descriptor passing              */
/* ------------------------------------------------------------------ */

/**
 * tpu_cma_read - copy @len bytes at @remote_addr in process @pid into @dst.
 *
 * Loops over short transfers.  Errors: -ESRCH (no such process), -EPERM
 * (ptrace access denied), -EFAULT (a range not mapped), -ENOSYS.
 */
TPU_API tpu_status tpu_cma_read(pid_t pid, uint64_t remote_addr, void *dst, size_t len);
/**
 * tpu_cma_allow - let process @consumer pull from this one under Yama scope 1.
 *
 * A no-op returning 0 where Yama is absent.
 */
TPU_API tpu_status tpu_cma_allow(pid_t consumer);

/** tpu_fd_send - pass descriptor @fd over the connected Unix socket @sock (SCM_RIGHTS) */
TPU_API tpu_status tpu_fd_send(int sock, int fd);
/** tpu_fd_recv - receive one descriptor (O_CLOEXEC) sent by tpu_fd_send(); -EBADMSG if none came */
TPU_API tpu_status tpu_fd_recv(int sock, int *fd);

/* ------------------------------------------------------------------ */
/* TensorFlow-style rendezvous keys                                    */
/* ------------------------------------------------------------------ */

/** struct tpu_str - a string slice; not NUL terminated when it points into a key */
struct tpu_str {
	const char *ptr;
	size_t len;
};

/** tpu_str - a slice of a NUL-terminated string (NULL gives the empty slice) */
TPU_API struct tpu_str tpu_str(const char *s);

/* Largest replica, task and device id, as TensorFlow stores them in an int. */
#define TPU_DEVICE_NUMBER_MAX	2147483647u

/**
 * struct tpu_device_name - "/job:JOB/replica:R/task:T/device:TYPE:ID".
 * @job:	[A-Za-z][A-Za-z0-9_]*
 * @type:	[A-Za-z_][A-Za-z0-9_]* (CPU, GPU, TPU, ...)
 *
 * Only full names in this canonical order are accepted: a rendezvous key
 * names the exact device.  Numbers are decimal without leading zeros.
 */
struct tpu_device_name {
	struct tpu_str job;
	uint32_t replica;
	uint32_t task;
	struct tpu_str type;
	uint32_t id;
};

/**
 * tpu_device_name_parse - split a device name into its parts.
 * @out:	out: slices point into @name.
 * @why:	out, may be NULL: on failure, a fixed sentence naming the fault.
 *
 * Errors: TPU_E_BAD_DEVICE_NAME, -EINVAL (NULL argument).
 */
TPU_API tpu_status tpu_device_name_parse(struct tpu_str name, struct tpu_device_name *out,
					 const char **why);
/**
 * tpu_device_name_build - write @dev as a NUL-terminated name into @buf.
 * @len:	out, may be NULL: length without the NUL, also when it did not fit.
 *
 * Errors: TPU_E_BAD_DEVICE_NAME (a part is invalid), -ENOSPC (@size too
 * small; *@len says how much is needed), -EINVAL.
 */
TPU_API tpu_status tpu_device_name_build(const struct tpu_device_name *dev, char *buf, size_t size,
					 size_t *len);

/**
 * struct tpu_key - "SRC;INCARNATION;DST;EDGE;FRAME:ITER", as TensorFlow's
 * Rendezvous::CreateKey writes it.
 * @src_device, @dst_device: full device names.
 * @src_incarnation: written as 16 lower-case hex digits; 1 .. 16 digits of
 *		either case are accepted when parsing.
 * @edge_name:	non-empty; no ';' and no NUL.
 * @frame_id, @iter_id: decimal.
 */
struct tpu_key {
	struct tpu_str src_device;
	uint64_t src_incarnation;
	struct tpu_str dst_device;
	struct tpu_str edge_name;
	uint64_t frame_id;
	uint64_t iter_id;
};

/**
 * tpu_key_parse - split a rendezvous key; slices point into @key.
 *
 * Both device names are checked as tpu_device_name_parse() does.
 * Errors: TPU_E_BAD_KEY, TPU_E_BAD_DEVICE_NAME, -EINVAL.
 */
TPU_API tpu_status tpu_key_parse(struct tpu_str key, struct tpu_key *out, const char **why);
/**
 * tpu_key_build - write a rendezvous key, NUL-terminated, into @buf.
 *
 * The parts are checked as tpu_key_parse() would, so what is built parses.
 * Errors as tpu_device_name_build(), plus TPU_E_BAD_KEY.
 */
TPU_API tpu_status tpu_key_build(const struct tpu_key *key, char *buf, size_t size, size_t *len);

/* ------------------------------------------------------------------ */
/* Context, buffers and the rendezvous                                 */
/* ------------------------------------------------------------------ */

/*
 * A TensorFlow-style rendezvous: a producer posts a tensor under a key and
 * never blocks; a consumer asks for the key before or after, with a
 * callback or blocking; each key is delivered once.
 *
 * Everything asynchronous belongs to a context: one io_uring and one
 * completion thread.  Every callback runs on that thread, and every
 * callback is called exactly once, with an error status when the
 * operation failed, was cancelled, aborted, or its context destroyed.
 * Receives of the same key on the same rendezvous are served and called
 * back in the order they were issued (the first receive gets the first
 * tensor); a send is called back when it is done.  A callback may issue
 * new operations and destroy a rendezvous; it must not block (see
 * tpu_rendezvous_recv_wait) nor destroy its own context.  Calls are
 * thread-safe.  A context, like an endpoint, belongs to the process that
 * made it: after fork() the child makes its own.
 *
 * Three implementations stand behind one API, chosen when a rendezvous is
 * created (TPU_RDV_AUTO picks the first that works, in this order, unless
 * the rendezvous is only for threads of one process):
 *
 *   kmod	/dev/tensorpipe domain, SEND/RECV as io_uring commands: one
 *		copy in the kernel, none when a tpu_buffer is donated;
 *   cma	no module: a key table in shared memory (a memfd) and a
 *		process_vm_readv pull by the consumer, one copy;
 *   inprocess	threads of one process: the pointer is handed over, the
 *		consumer's callback copies nothing unless it asked for a copy.
 */

/** struct tpu_context - one io_uring and one completion thread (opaque) */
struct tpu_context;

/* Flags of struct tpu_context_options. */
/** TPU_CTX_NO_KMOD - never use /dev/tensorpipe (as if the module were absent) */
#define TPU_CTX_NO_KMOD		(1U << 0)

/**
 * struct tpu_context_options - how to create a context; zeroed means defaults.
 * @dev_path:	device node, NULL for TPU_DEVICE_PATH.
 * @entries:	io_uring size, 0 for 256.
 * @flags:	TPU_CTX_* flags.
 * @transports:	pipes: comma list of the transports allowed ("tcp,shm"),
 *		NULL for all.
 * @channels:	pipes: comma list of the channels allowed ("kmod,cma,basic"),
 *		NULL for all; basic is always allowed.
 * @reserved:	zero (room for later options; -EINVAL otherwise).
 */
struct tpu_context_options {
	const char *dev_path;
	unsigned int entries;
	unsigned int flags;
	const char *transports;
	const char *channels;
	uint64_t reserved[4];
};

/**
 * tpu_context_create - start a context and its completion thread.
 * @opts:	options, NULL for defaults.
 * @out:	out: the context.
 *
 * The environment variable TPU_LOG=debug makes the library log, on stderr,
 * which implementation each rendezvous uses and why, and, when a receive
 * times out or a rendezvous is destroyed with operations pending, every key
 * this member has pending (sends and receives, unprintable bytes as \xHH),
 * so that a receive whose key differs by a byte from its send shows up
 * beside it.  For the module, the root-only debugfs file
 * /sys/kernel/debug/tensorpipe/keys-<domain id> lists every member's.
 */
TPU_API tpu_status tpu_context_create(const struct tpu_context_options *opts,
				      struct tpu_context **out);
/**
 * tpu_context_destroy - fail every pending operation with TPU_E_CLOSED, run
 * its callback, stop the thread and free the context (NULL is ignored).
 *
 * Rendezvous objects, pipes and listeners still open are destroyed first
 * (their callbacks run).  A world or an xfer agent on it should be
 * destroyed first; one still open loses its part of the context here
 * (its pipes, listener and rendezvous close; a line on stderr says so)
 * and its own destroy later frees the rest.  Buffers should be freed
 * first; one freed later is still freed correctly.
 * Not from a callback of the context.
 */
TPU_API void tpu_context_destroy(struct tpu_context *ctx);
/**
 * tpu_context_set_secret - the job secret this context's connections prove.
 * @secret:	bytes shared by every member of the job (any bytes), or NULL.
 * @len:	1 to 4096 bytes; 0 removes the secret.
 *
 * With a secret, every pipe connection (each transport, the lanes and
 * transport switches included), and the world's store, starts with a
 * mutual challenge and response (HMAC-SHA256 over both ends' fresh
 * nonces) before any other frame is read; a peer that does not prove the
 * same secret is refused (its connection closes; the listener logs why at
 * debug level and carries on), and a connect to it fails -EACCES, as does
 * one between an end with a secret and an end without.  The remote
 * rendezvous, the world and tpu_world_pipe() use the secret of the
 * context they are given.  Documentation/security.rst has the trust model.
 *
 * tpu_context_create() takes the secret from the environment:
 * TPU_JOB_SECRET (its bytes), or TPU_JOB_SECRET_FILE (the bytes of a file
 * that only its owner, this user or root, may read, one final newline
 * dropped; a file open to group or others makes tpu_context_create() fail
 * -EACCES and say so on stderr).  This call replaces it.  It applies to
 * connections set up after it returns; those already up are not touched.
 * Any thread.
 *
 * Errors: -EINVAL (NULL with @len, @len over 4096, not a context),
 * TPU_E_DESTROYED.
 */
TPU_API tpu_status tpu_context_set_secret(struct tpu_context *ctx, const void *secret, size_t len);

/** struct tpu_buffer - memory for tensors that can move without a copy (opaque) */
struct tpu_buffer;

/**
 * tpu_buffer_alloc - allocate a zeroed buffer, mapped read-write.
 * @len:	bytes, at least 1.
 *
 * From /dev/tensorpipe when the context uses it (such a buffer can be
 * donated: its pages change owner instead of being copied), else from a
 * memfd.
 */
TPU_API tpu_status tpu_buffer_alloc(struct tpu_context *ctx, size_t len, struct tpu_buffer **out);
/** tpu_buffer_data - the buffer's address; NULL for NULL, a freed buffer, or in a forked child */
TPU_API void *tpu_buffer_data(const struct tpu_buffer *buf);
/** tpu_buffer_size - the buffer's length in bytes; 0 where tpu_buffer_data() is NULL */
TPU_API size_t tpu_buffer_size(const struct tpu_buffer *buf);
/**
 * tpu_buffer_free - unmap and free a buffer (NULL is ignored); not while a
 * send uses it.  Twice is ignored; in a forked child only the child's
 * mapping goes.
 */
TPU_API void tpu_buffer_free(struct tpu_buffer *buf);

/** enum tpu_rdv_impl - implementations of the rendezvous */
enum tpu_rdv_impl {
	TPU_RDV_AUTO = 0,	/* choose: kmod, else cma (inprocess only on request) */
	TPU_RDV_INPROCESS,	/* threads of one process */
	TPU_RDV_KMOD,		/* /dev/tensorpipe with io_uring commands */
	TPU_RDV_CMA,		/* shared-memory key table + process_vm_readv */
	TPU_RDV_REMOTE,		/* workers of a cluster; see tpu_rendezvous_create_remote */
};

/** tpu_rdv_impl_name - "auto", "inprocess", "kmod", "cma" or "remote" */
TPU_API const char *tpu_rdv_impl_name(enum tpu_rdv_impl impl);

/** struct tpu_rendezvous - a table of keys shared by its members (opaque) */
struct tpu_rendezvous;

/**
 * tpu_rendezvous_create - a new, empty rendezvous.
 * @impl:	TPU_RDV_AUTO, or the implementation wanted.
 *
 * Errors: TPU_E_NO_TRANSPORT (no implementation viable, or cma asked for
 * and not built; the log and tpu_probe() say why), TPU_E_NO_DEVICE (kmod
 * asked for in a TPU_CTX_NO_KMOD context, or no module), -EOPNOTSUPP (a
 * module without TPU_FEAT_URING_CMD), the errno of what failed.
 */
TPU_API tpu_status tpu_rendezvous_create(struct tpu_context *ctx, enum tpu_rdv_impl impl,
					 struct tpu_rendezvous **out);
/**
 * tpu_rendezvous_share - a new descriptor that lets another process join.
 *
 * kmod shares its domain's descriptor, cma the memfd of its key table;
 * tpu_rendezvous_join() tells them apart.
 * @fd:		out: O_CLOEXEC descriptor to pass over a Unix socket
 *		(tpu_fd_send()) or to a child; the caller closes it.
 *
 * Errors: -ENOTSUP for an inprocess rendezvous.
 */
TPU_API tpu_status tpu_rendezvous_share(struct tpu_rendezvous *rdv, int *fd);
/**
 * tpu_rendezvous_join - join the rendezvous behind @fd (from share); @fd stays the caller's.
 *
 * A member that dies (cma, kmod) fails what the others have pending with
 * TPU_E_PEER_GONE.  A receive started after the death knows its producer
 * is dead where the dead member had posted that key and nobody took it:
 * it then ends TPU_E_PEER_GONE at once (kmod: once the module released
 * the dead member's endpoint; until then the tensor is still delivered).
 * Members are processes, not tasks: a key the dead member never posted
 * still waits (give it a timeout).
 * The remote rendezvous fails a receive from a worker that answered once
 * and no longer does with TPU_E_PEER_GONE at once.
 *
 * Errors: -EBADF, -EINVAL (@fd is not a shared rendezvous), those of create.
 */
TPU_API tpu_status tpu_rendezvous_join(struct tpu_context *ctx, int fd,
				       struct tpu_rendezvous **out);
/** tpu_rendezvous_impl - the implementation this rendezvous uses */
TPU_API enum tpu_rdv_impl tpu_rendezvous_impl(const struct tpu_rendezvous *rdv);
/**
 * tpu_rendezvous_destroy - leave the rendezvous (NULL is ignored).
 *
 * Pending operations of this member fail with TPU_E_CLOSED, their
 * callbacks run, and then it returns.  Other members are unaffected.
 * Called from a callback, callbacks already being delivered alongside
 * that one may run just after it returns.
 */
TPU_API void tpu_rendezvous_destroy(struct tpu_rendezvous *rdv);

/** enum tpu_device_type - where memory lies */
enum tpu_device_type {
	TPU_DEVICE_CPU = 0,
	TPU_DEVICE_CUDA = 1,	/* CUDA device memory (Documentation/cuda.rst) */
};

/**
 * struct tpu_device - a device: its type and index (0 for the CPU).
 * @type:	enum tpu_device_type.
 * @index:	device number.
 */
struct tpu_device {
	uint32_t type;
	uint32_t index;
};

/**
 * struct tpu_tensor - bytes to send, or room to receive into.
 * @data:	address.
 * @len:	bytes (send), or capacity (receive).
 * @buffer:	the tpu_buffer that holds @data, or NULL; lets the kmod
 *		implementation skip registering the memory.
 * @device:	where @data lies; zero (the CPU) for host memory.  CUDA
 *		memory (no @buffer, no TPU_SEND_GIVE) goes through a host
 *		buffer of the context on every implementation: a send copies
 *		it there before it returns (after the work queued on
 *		@stream), a receive copies it to the device before its
 *		callback (work queued on @stream afterwards sees the bytes).
 * @stream:	a CUstream of @device, or NULL: for CUDA memory NULL is the
 *		legacy default stream (CUDA's stream 0) of the device's
 *		primary context, with the same guarantees as any stream (a
 *		synchronous cuMemcpyHtoD from pageable memory may still be
 *		landing there: a send waits for it).  NULL for CPU memory.
 * @reserved:	zero (room for later fields, whose zero will mean what a
 *		program written before them expects; -EINVAL otherwise).
 *
 * Zero the whole structure before filling it in (an initializer does).
 */
struct tpu_tensor {
	void *data;
	size_t len;
	struct tpu_buffer *buffer;
	struct tpu_device device;
	void *stream;
	uint64_t reserved[3];
};

/** typedef tpu_send_cb - the consumer is done with the source (or @status says why not) */
typedef void (*tpu_send_cb)(void *arg, tpu_status status);
/** typedef tpu_recv_cb - the tensor is in place, @len bytes (or @status says why not) */
typedef void (*tpu_recv_cb)(void *arg, tpu_status status, size_t len);
/**
 * typedef tpu_recv_buffer_cb - a tensor received into a new buffer, now the
 * callee's to free with tpu_buffer_free(); NULL when @status is an error.
 */
typedef void (*tpu_recv_buffer_cb)(void *arg, tpu_status status, struct tpu_buffer *buf,
				   size_t len);

/* Flags of tpu_rendezvous_send. */
/**
 * TPU_SEND_GIVE - the send takes @tensor->buffer (the whole buffer, @len
 * bytes valid); the caller must not touch or free it afterwards.  With
 * kmod the pages move to the consumer without a copy.
 */
#define TPU_SEND_GIVE		(1U << 0)

/**
 * tpu_rendezvous_send - post @tensor under @key; never blocks.
 * @flags:	0 or TPU_SEND_GIVE.
 * @done:	called when the source may be reused (or freed, for GIVE).
 *
 * The source must stay untouched until @done runs (@done may be NULL).
 * Errors returned here mean @done will not be called, and that a given
 * buffer is still the caller's: -EINVAL (bad arguments), -ENAMETOOLONG
 * (key over 4096 bytes), -EEXIST (the key is pending already), the abort
 * status, TPU_E_CLOSED.  Once the call returned 0, errors go to @done
 * instead; kmod learns of a key pending in another process, or of the
 * module's own limits, only then (-EEXIST, -ENAMETOOLONG, -ENOSPC...).  A
 * given buffer is freed by the library whatever happens after 0.
 */
TPU_API tpu_status tpu_rendezvous_send(struct tpu_rendezvous *rdv, const void *key, size_t key_len,
				       const struct tpu_tensor *tensor, unsigned int flags,
				       tpu_send_cb done, void *arg);
/**
 * tpu_rendezvous_recv - receive @key into @dst, before or after its send.
 * @timeout_ns:	0 waits until the tensor, cancel, abort or destroy;
 *		otherwise @done gets -ETIMEDOUT after that long.
 *
 * @done gets -EMSGSIZE (and the tensor's length) when @dst is too small;
 * the tensor then stays for another receive.  Errors returned here mean
 * @done will not be called: -EINVAL, -ENAMETOOLONG, the abort status,
 * TPU_E_CLOSED.
 */
TPU_API tpu_status tpu_rendezvous_recv(struct tpu_rendezvous *rdv, const void *key, size_t key_len,
				       const struct tpu_tensor *dst, uint64_t timeout_ns,
				       tpu_recv_cb done, void *arg);
/**
 * tpu_rendezvous_recv_buffer - receive @key into a new buffer of at most @max_len bytes.
 *
 * With kmod the buffer is the sender's pages when it gave a buffer of its
 * context (TPU_SEND_GIVE), a region the module filled otherwise; inprocess
 * hands over a given buffer itself.  Errors as tpu_rendezvous_recv().
 */
TPU_API tpu_status tpu_rendezvous_recv_buffer(struct tpu_rendezvous *rdv, const void *key,
					      size_t key_len, size_t max_len, uint64_t timeout_ns,
					      tpu_recv_buffer_cb done, void *arg);
/**
 * tpu_rendezvous_recv_wait - tpu_rendezvous_recv() that blocks the caller.
 * @timeout_ns:	0 waits as long as it takes; otherwise, when nothing came
 *		by then, the receive is withdrawn (as by tpu_rendezvous_cancel(),
 *		which also cancels this member's other operations on @key) and
 *		the call returns -ETIMEDOUT.
 * @len:	out, may be NULL: bytes received (the tensor's length on -EMSGSIZE).
 *
 * The caller spins briefly, then sleeps; a matching send on another thread
 * of the process wakes it directly, without the context's thread.  How
 * long it spins is learned per calling thread, which stops spinning for a
 * while (at most TPU_SPIN_BACKOFF_US, 50 ms) when it was descheduled or
 * kept waiting for a core (Documentation/library.rst, "Spinning before
 * sleeping").
 * Errors: -EDEADLK when called on the context's thread (from a callback:
 * the tensor's callback could never run), -ETIMEDOUT, -EMSGSIZE,
 * -ECANCELED, TPU_E_CLOSED, the abort status, and those of
 * tpu_rendezvous_recv().
 */
TPU_API tpu_status tpu_rendezvous_recv_wait(struct tpu_rendezvous *rdv, const void *key,
					    size_t key_len, const struct tpu_tensor *dst,
					    uint64_t timeout_ns, size_t *len);
/**
 * tpu_rendezvous_send_wait - tpu_rendezvous_send() that blocks the caller
 * until a consumer took the tensor, so the source is free on return.
 * @timeout_ns:	0 waits as long as it takes; otherwise, when no consumer
 *		took the tensor by then, the send is withdrawn (as by
 *		tpu_rendezvous_cancel(), which also cancels this member's
 *		receives of @key) and the call returns -ETIMEDOUT.
 *
 * Errors: -EDEADLK when called on the context's thread (from a callback),
 * -ETIMEDOUT, -ECANCELED, TPU_E_CLOSED, the abort status, and those of
 * tpu_rendezvous_send().  A consumer that took the tensor just as the time
 * ran out wins: the call then returns 0.
 */
TPU_API tpu_status tpu_rendezvous_send_wait(struct tpu_rendezvous *rdv, const void *key,
					    size_t key_len, const struct tpu_tensor *tensor,
					    unsigned int flags, uint64_t timeout_ns);
/**
 * tpu_rendezvous_cancel - cancel this member's pending operations on @key.
 *
 * Their callbacks run with -ECANCELED; one that finished meanwhile gets
 * its real result.  Errors: -ENOENT (nothing pending), -EINVAL.
 */
TPU_API tpu_status tpu_rendezvous_cancel(struct tpu_rendezvous *rdv, const void *key,
					 size_t key_len);
/**
 * tpu_rendezvous_abort - fail every pending and later operation of every
 * member with @status, an errno value of <errno.h> (-EHWPOISON .. -1).
 * Errors: -EINVAL, -EALREADY.
 */
TPU_API tpu_status tpu_rendezvous_abort(struct tpu_rendezvous *rdv, tpu_status status);

/**
 * struct tpu_recv_item - one key of tpu_rendezvous_recv_batch().
 * @key:	the key's bytes.
 * @key_len:	their number.
 * @dst:	where to put the tensor (@dst.len: the capacity).
 * @status:	out: this key's result, as tpu_rendezvous_recv()'s callback
 *		would have it.
 * @len:	out: bytes received (the tensor's length on -EMSGSIZE).
 */
struct tpu_recv_item {
	const void *key;
	size_t key_len;
	struct tpu_tensor dst;
	tpu_status status;
	size_t len;
};

/** TPU_RDV_BATCH_MAX - most keys in one tpu_rendezvous_recv_batch() */
#define TPU_RDV_BATCH_MAX	4096

/**
 * typedef tpu_recv_batch_cb - every key of the batch is done.
 * @status:	0 when every item succeeded, else the first failing item's.
 */
typedef void (*tpu_recv_batch_cb)(void *arg, tpu_status status, struct tpu_recv_item *items,
				  size_t n);

/**
 * tpu_rendezvous_recv_batch - receive @n keys, each into its own @dst.
 * @items:	@n items (1 .. TPU_RDV_BATCH_MAX); stay the caller's, untouched,
 *		until @done.
 * @timeout_ns:	for each key, as tpu_rendezvous_recv().
 *
 * Each key is received as by tpu_rendezvous_recv() (so keys repeated in a
 * batch are received in item order), and @done runs once, after the last.
 * The remote rendezvous writes a batch's requests back to back on each
 * worker's pipe, which gathers them into few system calls.
 * Errors returned here mean @done will not be called and nothing was
 * issued: -EINVAL (a NULL, a bad count, key or tensor), -ENAMETOOLONG,
 * the abort status, TPU_E_CLOSED.
 */
TPU_API tpu_status tpu_rendezvous_recv_batch(struct tpu_rendezvous *rdv,
					     struct tpu_recv_item *items, size_t n,
					     uint64_t timeout_ns, tpu_recv_batch_cb done,
					     void *arg);
/**
 * tpu_rendezvous_recv_batch_wait - tpu_rendezvous_recv_batch() that blocks
 * the caller until every key is done; returns the @status its callback
 * would get (each item's own is in the item).
 *
 * Errors: -EDEADLK on the context's thread, and those of recv_batch.
 */
TPU_API tpu_status tpu_rendezvous_recv_batch_wait(struct tpu_rendezvous *rdv,
						  struct tpu_recv_item *items, size_t n,
						  uint64_t timeout_ns);

/*
 * The remote rendezvous: TensorFlow's rendezvous across workers.
 *
 * Each worker (one process, normally) is a task "/job:J/replica:R/task:T"
 * with a URL; the cluster map names every task's URL.  Keys are parsed as
 * tpu_key_parse() does and their device names decide where a tensor lives:
 *
 *   - a key whose source and destination devices are on the same task is
 *     matched inside this worker, as by the inprocess implementation;
 *   - any other key is sent by the worker of its source device (a send of
 *     a key whose source is another task fails -EXDEV) and is kept there,
 *     never blocking the sender; the receive, on any other worker, asks the
 *     source's worker for it over a pipe and the tensor comes straight from
 *     the producer's memory into @dst (the pipe's channel chooses kmod,
 *     cma, shm, tcp or mtcp as usual).
 *
 * One pipe serves each pair of workers in both directions (the first to
 * need it connects, the other end adopts it); requests of every step and
 * key share it.  Receives keep their semantics: before or after the send,
 * exactly once, -EMSGSIZE leaves the tensor for another receive, timeouts
 * and cancel withdraw the request (a tensor already on its way is
 * delivered instead).  tpu_rendezvous_abort() fails this worker's
 * operations and is passed on to every worker it has a pipe with, which
 * aborts in turn.  A peer whose pipe breaks (it died or destroyed its
 * rendezvous) fails the receives waiting on it with TPU_E_PEER_GONE, and
 * the sends it was taking with TPU_E_PEER_GONE.  Workers may start in any
 * order: one that does not answer yet is tried again for 30 s, its
 * receives waiting meanwhile.  tpu_rendezvous_destroy() waits (at most
 * 10 s) for peers still reading this worker's tensors.
 */

/**
 * struct tpu_remote_task - one worker of the cluster map.
 * @task:	"/job:J/replica:R/task:T".
 * @url:	where its remote rendezvous listens ("tcp://HOST:PORT",
 *		"shm://NAME", "rdma://HOST:PORT"); another scheme is -EINVAL.
 */
struct tpu_remote_task {
	const char *task;
	const char *url;
};

/**
 * struct tpu_remote_options - how to create a remote rendezvous.
 * @task:	this worker, "/job:J/replica:R/task:T".
 * @listen_urls: URLs to accept peers on; NULL (with @nlisten 0) listens
 *		as tpu_listener_create() does by default.  A fixed port that
 *		something else holds fails -EADDRINUSE.
 * @nlisten:	their number.
 * @peers:	the cluster map so far (this worker's own entry is skipped);
 *		more with tpu_rendezvous_add_peer().
 * @npeers:	their number.
 * @reserved:	zero (room for later options; -EINVAL otherwise).
 */
struct tpu_remote_options {
	const char *task;
	const char *const *listen_urls;
	size_t nlisten;
	const struct tpu_remote_task *peers;
	size_t npeers;
	uint64_t reserved[4];
};

/**
 * tpu_rendezvous_create_remote - this worker's rendezvous of a cluster.
 *
 * A peer may have TPU_REMOTE_MAX_REQS requests (1024 by default, read here)
 * for keys not sent yet waiting at this worker; past that, or past 16 MiB
 * of their keys, its receives fail -ENOBUFS.  An answer is read only for a
 * request this worker made and only up to the length that request allowed,
 * on the pipe the request went out on.
 *
 * Pipes: without a job secret a worker asks only on pipes it opened, so
 * two workers that receive from each other keep two pipes.  With the
 * context's secret (TPU_JOB_SECRET) every pipe proves it and one pipe per
 * pair carries both directions (if both connect at once, the one the lower
 * task name opened stays; see Documentation/library.rst, "Connections").
 *
 * Errors: -EINVAL (NULL, a task that is not "/job:J/replica:R/task:T", a
 * peer listed twice with different URLs, a peer URL whose scheme is not
 * tcp://, shm:// or rdma://), those of tpu_listener_create() (-EADDRINUSE
 * for a listen port in use).
 */
TPU_API tpu_status tpu_rendezvous_create_remote(struct tpu_context *ctx,
						const struct tpu_remote_options *opts,
						struct tpu_rendezvous **out);
/**
 * tpu_rendezvous_add_peer - add @task at @url to the cluster map.
 *
 * Errors: -EINVAL (not a remote rendezvous, a bad task name, a URL that is
 * empty or whose scheme is not tcp://, shm:// or rdma://), -EEXIST (@task
 * is known with another URL; the same URL again is 0).
 * A receive from a task not in the map fails -EHOSTUNREACH.
 */
TPU_API tpu_status tpu_rendezvous_add_peer(struct tpu_rendezvous *rdv, const char *task,
					   const char *url);
/**
 * tpu_rendezvous_url - the URL peers reach this worker at, on @transport
 * ("tcp", "shm"; NULL for the first), any port 0 resolved.
 * Errors: -EINVAL (not a remote rendezvous), those of tpu_listener_url().
 */
TPU_API tpu_status tpu_rendezvous_url(const struct tpu_rendezvous *rdv, const char *transport,
				      char *buf, size_t size);
/**
 * tpu_rendezvous_peer_path - how this worker's pipe to @task moves things
 * (the one it opened, else the one @task opened to it).
 * @transport:	out: "tcp" or "shm".
 * @channel:	out: the channel for CPU tensors ("kmod", "cma", "mtcp",
 *		"basic"), "" while the two ends still negotiate.
 *
 * Errors: -EINVAL (not a remote rendezvous, NULL), -EHOSTUNREACH (@task
 * not in the map), -ENOTCONN (no pipe to it yet, or it broke).
 */
TPU_API tpu_status tpu_rendezvous_peer_path(struct tpu_rendezvous *rdv, const char *task,
					    const char **transport, const char **channel);

/*
 * Pipes: TensorPipe-style messaging between two contexts.
 *
 * A listener accepts pipes on one or more URLs; tpu_pipe_connect() opens
 * one to a URL.  The first connection only bootstraps: the two ends
 * exchange what they can use (transports and channels, each with a
 * compatibility descriptor that says whether both ends can share it) and
 * pick the best
 * common transport for frames and small payloads and, per pair of device
 * types, the best common channel for tensor bytes.  A pipe connected by
 * tcp:// between two processes of one machine therefore moves to shm:// and
 * the kmod channel when the listener offers them.
 *
 *   URL		transport
 *   tcp://HOST:PORT	TCP through io_uring (PORT 0 on a listener: any)
 *   shm://NAME	rings in shared memory, bootstrapped over an abstract
 *			Unix socket "tensorpipe-shm/NAME" (same machine and
 *			network namespace)
 *
 *   channel	tensor bytes go
 *   kmod	through /dev/tensorpipe (one copy in the kernel; none when the
 *		tensor lies in a tpu_buffer of the writer's context and the
 *		reader asks for a buffer), shm transport only (it passes the
 *		kernel domain's descriptor)
 *   cma	process_vm_readv by the reader, same machine and permissions,
 *		shm transport only: the reader pulls only from the pid the
 *		kernel gives the socket, never one the peer names
 *   basic	inline through the transport (always available)
 *   cuda_ipc	CUDA memory at the writer, same machine, shm transport only
 *		(as cma): the reader copies through a CUDA IPC handle
 *		(Documentation/cuda.rst)
 *   cuda_staged  CUDA memory on either side, any transport: inline,
 *		through page-locked host memory
 * Tensors of at most TPU_PIPE_INLINE_MAX bytes always travel inline.
 *
 * Guarantees: messages arrive in the order they were written; the
 * callbacks of one pipe end's writes, and of its reads and descriptor
 * reads, run in the order the calls were made; all callbacks of a context
 * run on its one thread; every callback runs exactly once, with an error
 * when the pipe failed or closed, and hands the caller's message back.
 * Back-pressure: a pipe reads the next message from its transport only
 * when the user asked for it (tpu_pipe_read_descriptor), so a writer whose
 * reader stops reading sees its writes stop completing instead of the
 * reader buffering them.
 *
 * TPU_TRANSPORTS and TPU_CHANNELS (comma lists, e.g. "tcp" or "cma,basic")
 * restrict the choice further than tpu_context_options does; TPU_LOG=debug
 * logs every choice.  Between hosts, tensors go over the mtcp channel:
 * striped over TPU_MTCP_LANES (1..16, default 4; set on the listener's
 * side) more tcp connections.  Calls are thread-safe; callbacks must not block.
 */

/** TPU_PIPE_MAX_PAYLOADS - most payloads in one message */
#define TPU_PIPE_MAX_PAYLOADS	64
/** TPU_PIPE_MAX_TENSORS - most tensors in one message */
#define TPU_PIPE_MAX_TENSORS	1024
/** TPU_PIPE_MAX_LEN - longest payload or tensor (1 TiB) */
#define TPU_PIPE_MAX_LEN	(1ULL << 40)
/** TPU_PIPE_MAX_METADATA - longest metadata of a message, payload or tensor */
#define TPU_PIPE_MAX_METADATA	(64U << 10)
/** TPU_PIPE_INLINE_MAX - tensors up to this size always travel inline */
#define TPU_PIPE_INLINE_MAX	(32U << 10)

/**
 * struct tpu_payload - a CPU buffer carried inline with the message.
 * @data:	bytes (write), or where to put them (read; set by the reader).
 * @len:	length (read: from the descriptor).
 * @metadata:	opaque bytes, at most TPU_PIPE_MAX_METADATA.
 * @metadata_len: their length.
 */
struct tpu_payload {
	void *data;
	size_t len;
	const void *metadata;
	size_t metadata_len;
};

/**
 * struct tpu_message_tensor - a tensor of a message.
 * @data:	bytes (write), or where to put them (read; set by the reader).
 * @len:	length (read: from the descriptor).
 * @buffer:	write: the tpu_buffer holding @data, or NULL (lets the kmod
 *		channel skip registration).  Read: set by the pipe when the
 *		reader asked for a buffer (TPU_TENSOR_WANT_BUFFER); the reader
 *		then owns it and frees it with tpu_buffer_free().
 * @device:	where @data lies (write), or where the reader put it (read).
 * @target:	write: where the writer suggests the reader put it; read: that
 *		suggestion, from the descriptor.
 * @metadata:	opaque bytes, at most TPU_PIPE_MAX_METADATA.
 * @metadata_len: their length.
 * @flags:	write: TPU_TENSOR_GIVE or 0; read: TPU_TENSOR_WANT_BUFFER or 0.
 * @stream:	CUDA tensors: a CUstream of the tensor's device, or NULL for
 *		the legacy default stream (CUDA's stream 0) of the device's
 *		primary context, which gets the same guarantees: a write
 *		reads the tensor after the work queued on it so far (a
 *		synchronous cuMemcpyHtoD from pageable memory included,
 *		which may return before its bytes land); a read's bytes are
 *		in place before work queued on it after the read's callback.
 *		Waits are on events, never the whole device.  CPU tensors:
 *		NULL.
 * @reserved:	zero (room for later fields; a write refuses anything else
 *		with -EINVAL).  Zero the whole structure before filling it in.
 */
struct tpu_message_tensor {
	void *data;
	size_t len;
	struct tpu_buffer *buffer;
	unsigned int flags;
	struct tpu_device device;
	struct tpu_device target;
	const void *metadata;
	size_t metadata_len;
	void *stream;
	uint64_t reserved[3];
};

/**
 * struct tpu_message - metadata, inline payloads and tensors.
 * @metadata:	opaque bytes, at most TPU_PIPE_MAX_METADATA.
 * @metadata_len: their length.
 * @payloads:	@npayloads payloads (at most TPU_PIPE_MAX_PAYLOADS).
 * @npayloads:	their number.
 * @tensors:	@ntensors tensors (at most TPU_PIPE_MAX_TENSORS).
 * @ntensors:	their number.
 *
 * A message given to tpu_pipe_write() (the structure and every byte it
 * points to) stays the caller's and must stay valid until the write's
 * callback.  A descriptor handed out by tpu_pipe_read_descriptor() belongs
 * to the pipe: the reader fills in the data pointers and passes it to
 * tpu_pipe_read(); the pipe frees it after the read's callback returned.
 */
struct tpu_message {
	const void *metadata;
	size_t metadata_len;
	struct tpu_payload *payloads;
	size_t npayloads;
	struct tpu_message_tensor *tensors;
	size_t ntensors;
};

/**
 * TPU_TENSOR_GIVE - the write takes the tensor's @buffer (@data must be its
 * start): the write's callback comes once the buffer is gone, and the
 * reader gets its pages without a copy when both ends use the kmod channel
 * and the reader asks for a buffer.  Freed by the library on any error.
 */
#define TPU_TENSOR_GIVE		(1U << 0)

/**
 * TPU_TENSOR_WANT_BUFFER - read: leave @data NULL and receive the tensor
 * into a new tpu_buffer (the writer's own pages when it gave a buffer and
 * both ends use the kmod channel); @buffer and @data are set before the
 * read's callback.
 */
#define TPU_TENSOR_WANT_BUFFER	(1U << 1)

/** struct tpu_listener - accepts pipes on one or more URLs (opaque) */
struct tpu_listener;
/** struct tpu_pipe - one end of a pipe (opaque) */
struct tpu_pipe;

/** typedef tpu_accept_cb - a new pipe, now the callee's (NULL on error) */
typedef void (*tpu_accept_cb)(void *arg, tpu_status status, struct tpu_pipe *pipe);
/** typedef tpu_write_cb - the message's memory is the caller's again */
typedef void (*tpu_write_cb)(void *arg, tpu_status status, struct tpu_message *msg);
/** typedef tpu_descriptor_cb - the next message's descriptor (NULL on error) */
typedef void (*tpu_descriptor_cb)(void *arg, tpu_status status, struct tpu_message *desc);
/** typedef tpu_read_cb - the message is in place (or @status says why not) */
typedef void (*tpu_read_cb)(void *arg, tpu_status status, struct tpu_message *msg);

/**
 * tpu_listener_create - listen on @nurls URLs.
 * @urls:	"tcp://HOST:PORT", "shm://NAME", "rdma://HOST:PORT" (HOST an
 *		address an RDMA device serves); NULL with @nurls 0 means
 *		every transport the context allows, on local addresses
 *		("tcp://127.0.0.1:0" and a unique shm name; never rdma).
 *
 * A connection must finish its set-up within TPU_SETUP_TIMEOUT_MS
 * (milliseconds, 10000 by default) of its accept, and at most
 * TPU_SETUP_MAX (128 by default) are in set-up per listener and transport;
 * past that the oldest is dropped once it is a tenth of the timeout (at
 * most 100 ms) old, and the newcomer is refused before that.  Both are
 * read here, from the environment (Documentation/security.rst, "Resource
 * bounds").
 *
 * Errors: -EINVAL (bad URL), TPU_E_URL_SCHEME (unknown scheme),
 * TPU_E_URL_PORT (tcp or rdma URL without a port), TPU_E_NO_TRANSPORT (one
 * the context options or TPU_TRANSPORTS rule out), TPU_E_NO_DEVICE (rdma
 * on a machine without an RDMA device or rdma_cm), -EADDRINUSE, and the
 * system's.
 */
TPU_API tpu_status tpu_listener_create(struct tpu_context *ctx, const char *const *urls,
				       size_t nurls, struct tpu_listener **out);
/**
 * tpu_listener_accept - call @done once with the next pipe (one-shot; call
 * again from @done to accept more).  -EBUSY if an accept is pending.
 */
TPU_API tpu_status tpu_listener_accept(struct tpu_listener *l, tpu_accept_cb done, void *arg);
/**
 * tpu_listener_url - the URL peers can connect to on @transport ("tcp",
 * "shm", "rdma"), with any port 0 resolved; NULL with @transport picks the first.
 * Errors: TPU_E_NO_TRANSPORT, -ENOSPC (@size too small).
 */
TPU_API tpu_status tpu_listener_url(const struct tpu_listener *l, const char *transport, char *buf,
				    size_t size);
/**
 * tpu_listener_close - stop listening; a pending accept gets TPU_E_CLOSED.
 * Pipes already accepted stay open.  NULL is ignored.
 */
TPU_API void tpu_listener_close(struct tpu_listener *l);

/**
 * tpu_pipe_connect - open a pipe to @url; returns at once.  Operations may
 * be queued immediately; they start once the pipe is established, and
 * fail with its error when it cannot be (-ECONNREFUSED, -ENOPROTOOPT when
 * the two ends have no transport in common, ...).
 */
TPU_API tpu_status tpu_pipe_connect(struct tpu_context *ctx, const char *url,
				    struct tpu_pipe **out);
/**
 * tpu_pipe_write - send @msg; @done gets it back once its memory may be reused.
 *
 * Errors returned here mean @done will not be called: -EINVAL (NULL,
 * counts, lengths or metadata over the TPU_PIPE_MAX_* limits, a data
 * pointer NULL with a length, a device type no channel moves), the error
 * that failed the pipe (its first cause: -ECONNREFUSED when nobody listened,
 * -ECONNRESET when the peer went away, ...), -EPIPE (the pipe is closing).
 */
TPU_API tpu_status tpu_pipe_write(struct tpu_pipe *pipe, struct tpu_message *msg,
				  tpu_write_cb done, void *arg);
/**
 * tpu_pipe_read_descriptor - ask for the next message's descriptor.
 *
 * One-shot: call it again (from @done, say) for the next message.  After a
 * descriptor the reader must call tpu_pipe_read() with it before the next
 * descriptor is delivered.
 */
TPU_API tpu_status tpu_pipe_read_descriptor(struct tpu_pipe *pipe, tpu_descriptor_cb done,
					    void *arg);
/**
 * tpu_pipe_read - read the message of descriptor @msg into the memory its
 * data pointers give (each at least its @len bytes; or a tensor's @buffer
 * request, see struct tpu_message_tensor).  Errors returned here: -EINVAL
 * (@msg is not the pipe's outstanding descriptor, a data pointer NULL).
 */
TPU_API tpu_status tpu_pipe_read(struct tpu_pipe *pipe, struct tpu_message *msg,
				 tpu_read_cb done, void *arg);
/**
 * tpu_pipe_close - close this end: every pending callback runs with
 * TPU_E_CLOSED (on the context thread, perhaps after this returns) and the
 * peer's with -ECONNRESET.  The pipe is freed; NULL is ignored.
 */
TPU_API void tpu_pipe_close(struct tpu_pipe *pipe);
/**
 * tpu_pipe_transport - the transport in use ("tcp", "shm", "rdma"), or ""
 * while the two ends are still negotiating.
 */
TPU_API const char *tpu_pipe_transport(const struct tpu_pipe *pipe);
/**
 * tpu_pipe_channel - the channel for tensors from @src to @dst device
 * types ("kmod", "cma", "rdma", "mtcp", "basic"; with CUDA on either side
 * "cuda_ipc" or "cuda_staged"), or "" while negotiating or if none.
 */
TPU_API const char *tpu_pipe_channel(const struct tpu_pipe *pipe, enum tpu_device_type src,
				     enum tpu_device_type dst);
/**
 * tpu_pipe_peer_pid - the process at the other end, as the kernel proved
 * it (shm: SO_PEERCRED, checked against SO_PEERPIDFD where the kernel has
 * it), never as the peer said.
 * @pid:	out: that pid, or 0 where the transport proves nothing (tcp, rdma).
 *
 * Errors: -EINVAL (NULL @pid, not a pipe), -EAGAIN while the two ends are
 * still negotiating, and those of a closed pipe.
 */
TPU_API tpu_status tpu_pipe_peer_pid(const struct tpu_pipe *pipe, int *pid);

/*
 * Bootstrap: a world of ranks formed from what the launcher set.
 *
 * A job started by torchrun or by Open MPI's mpirun gets its rank, the
 * number of ranks and the address of a small key-value store from the
 * environment (tpu_world_info_from_env()).  Rank 0 hosts the store over
 * TCP; every rank connects to it, publishes the URLs it listens on under
 * its rank and reads everyone else's.  The world then gives a remote
 * rendezvous whose cluster map names every rank as the task
 * "/job:JOB/replica:0/task:RANK", and a pipe to any peer on demand.
 *
 *   variable			torchrun		mpirun (Open MPI)
 *   rank			RANK			OMPI_COMM_WORLD_RANK
 *   number of ranks		WORLD_SIZE		OMPI_COMM_WORLD_SIZE
 *   rank on this host		LOCAL_RANK		OMPI_COMM_WORLD_LOCAL_RANK
 *   ranks on this host		LOCAL_WORLD_SIZE	OMPI_COMM_WORLD_LOCAL_SIZE
 *
 * The store's address, first found: TPU_STORE_ADDR ("HOST:PORT",
 * "[V6]:PORT"); MASTER_ADDR with MASTER_PORT + 1 (MASTER_PORT itself is
 * the port of torch's own store, which torchrun's agent or
 * torch.distributed already listens on); under mpirun with every rank on
 * one host, 127.0.0.1 and a port from 20000 .. 49999 derived from the job
 * id Open MPI sets (OMPI_MCA_ess_base_jobid, else PMIX_NAMESPACE), so
 * that two jobs of one host differ.  mpirun across hosts needs
 * TPU_STORE_ADDR or MASTER_ADDR/MASTER_PORT.  Open MPI's variables win
 * when both sets are present.  Rank 0 listens on that address only.
 */

/** TPU_WORLD_MAX - most ranks in a world */
#define TPU_WORLD_MAX		1024

/**
 * struct tpu_world_info - what the launcher said.
 * @rank:	this process's rank, 0 .. @size - 1.
 * @size:	the number of ranks, 1 .. TPU_WORLD_MAX.
 * @local_rank:	rank among the ranks of this host, -1 when not set.
 * @local_size:	ranks on this host, -1 when not set.
 * @convention:	"torchrun" or "openmpi"; "" when set by the caller.
 * @store_host:	where rank 0 hosts the store (address or host name).
 * @store_port:	its port.
 * @store_from:	which variables gave the address ("TPU_STORE_ADDR",
 *		"MASTER_ADDR/MASTER_PORT+1", "OMPI_MCA_ess_base_jobid", ...).
 * @detail:	on failure, why, naming the variable to set or fix.
 *
 * A caller that knows its world otherwise fills in @rank, @size,
 * @store_host and @store_port itself (and -1 for the local fields).
 */
struct tpu_world_info {
	int rank;
	int size;
	int local_rank;
	int local_size;
	char convention[16];
	char store_host[256];
	uint16_t store_port;
	char store_from[48];
	char detail[256];
};

/**
 * tpu_world_info_from_env - read rank, size and the store's address.
 * @info:	out: filled in; on failure only @detail is meaningful.
 *
 * Numbers are plain decimal (no sign, no spaces, no leading zero).
 * Errors: -ENOENT (no launcher's variables at all), -EINVAL (a variable
 * missing, not a number, out of range, a rank not below the size, a local
 * rank not below the local size, a bad store address); @detail names
 * the variable, and TPU_LOG=debug logs it.
 */
TPU_API tpu_status tpu_world_info_from_env(struct tpu_world_info *info);

/** struct tpu_world - this rank's view of a formed world (opaque) */
struct tpu_world;

/**
 * struct tpu_world_options - how to form a world; zeroed means defaults.
 * @info:	the world, NULL to read it with tpu_world_info_from_env().
 * @job:	the job name of the task names, NULL for "worker".
 * @listen_urls: where this rank listens, for the rendezvous; the pipe
 *		listener uses the same URLs with any port (and shm names of
 *		its own).  A fixed port something else holds fails
 *		-EADDRINUSE.  NULL: when the launcher says every rank is on
 *		this host (local size equals size), loopback tcp and shm as
 *		tpu_listener_create() does by default; otherwise tcp on the
 *		address this host reaches the store from, any port, and shm
 *		(when the context allows it) for the ranks that turn out to
 *		share this host.
 * @nlisten:	their number.
 * @timeout_ms:	bound of tpu_world_create() as a whole (connecting to the
 *		store, waiting for every rank, every store request), and of
 *		each later barrier, tpu_world_pipe() and the destroy's
 *		barrier; 0 for 30 s.
 * @reserved:	zero (room for later options; -EINVAL otherwise).
 */
struct tpu_world_options {
	const struct tpu_world_info *info;
	const char *job;
	const char *const *listen_urls;
	size_t nlisten;
	uint32_t timeout_ms;
	uint64_t reserved[4];
};

/**
 * tpu_world_create - form the world: every rank calls it.
 *
 * Rank 0 starts the store; each rank connects (retrying while rank 0 is
 * not up yet), checks its size against the first rank's and claims its
 * rank, creates its remote rendezvous and its pipe listener, publishes
 * their URLs and its host identity (boot id, network namespace) under its
 * rank and waits for every other rank's.  It dials the shm URL of a rank
 * of the same host identity, the tcp URL of the others (TPU_LOG=debug
 * says which per rank, and why).  The whole call ends within the timeout.
 * One world per job: its store keys (URLs, who dials which pipe,
 * barriers) are the job's.  Not from a callback of @ctx.
 * Rank 0's store drops a client that has not finished a request within
 * TPU_SETUP_TIMEOUT_MS of its accept and keeps at most TPU_SETUP_MAX such
 * clients (the oldest goes), read when it starts.
 * Errors: those of tpu_world_info_from_env() (the reason also goes to
 * stderr), -ETIMEDOUT (the store did not answer, or a rank did not come,
 * in time), -EEXIST (a rank was started twice: the second process fails,
 * and every other rank fails too, here or in its next barrier; stderr
 * names the rank), -EINVAL (the ranks were started with different sizes;
 * all fail the same way, and stderr gives both sizes), -EADDRNOTAVAIL
 * (rank 0: the store's address is not on this host), -EADDRINUSE (rank 0:
 * something else holds the store's port; or a listen port in use), -EPROTO
 * (a store that does not speak our protocol), -EDEADLK (on the context's
 * thread), and those of tpu_rendezvous_create_remote() and
 * tpu_listener_create().
 */
TPU_API tpu_status tpu_world_create(struct tpu_context *ctx, const struct tpu_world_options *opts,
				    struct tpu_world **out);
/**
 * struct tpu_world_store - a key-value store every rank already shares,
 * given as callbacks (for instance the c10d::Store torch hands a backend).
 * @arg:	passed to each callback.
 * @set:	store @len bytes of @val under @key (replacing any value).
 * @get:	wait up to @timeout_ms (0: do not wait) for @key; copy up to
 *		@size bytes of its value to @buf and its full length to *@len.
 *		Returns 0, -ETIMEDOUT (not set by then) or -EMSGSIZE (did not
 *		fit), or an error of the store.
 * @add:	add @delta to the integer under @key (0 when absent), the new
 *		value to *@total.
 * @reserved:	zero (room for later callbacks; -EINVAL otherwise).
 *
 * The callbacks run on the thread that called into the world (never its
 * context's thread) and may block; each returns 0 or a negative errno.
 * Keys are short printable ASCII ("tpu/world/3"); a store shared by several
 * worlds must give each its own key space (a prefix).
 */
struct tpu_world_store {
	void *arg;
	tpu_status (*set)(void *arg, const char *key, const void *val, size_t len);
	tpu_status (*get)(void *arg, const char *key, void *buf, size_t size, size_t *len,
			  uint32_t timeout_ms);
	tpu_status (*add)(void *arg, const char *key, int64_t delta, int64_t *total);
	uint64_t reserved[4];
};

/**
 * tpu_world_create_with_store - form the world through the caller's store.
 * @opts:	as tpu_world_create(), but @opts->info is required (its @rank
 *		and @size; the store fields are ignored); @opts->listen_urls
 *		NULL means loopback tcp and shm, so ranks on other hosts need
 *		URLs on an address they reach.
 * @store:	the callbacks, copied; @store->arg must outlive the world.
 *
 * As tpu_world_create() with no store of the library's own: no port, no
 * variable.  The ranks check their size and claim their rank, publish and
 * read their URLs, decide who dials each pipe and meet in
 * tpu_world_barrier() through @store.  The secret of @ctx (if any) guards
 * every pipe; @store is the channel the caller trusts to hand it out.
 * tpu_world_destroy() does not wait for the other ranks (the store is
 * the caller's, nobody has to keep it up).
 * Errors: -EINVAL (@store or @opts->info missing, a callback NULL,
 * reserved not zero) and those of tpu_world_create() (-EPROTO: a value
 * in the store that is not the world's).
 */
TPU_API tpu_status tpu_world_create_with_store(struct tpu_context *ctx,
					       const struct tpu_world_options *opts,
					       const struct tpu_world_store *store,
					       struct tpu_world **out);
/**
 * tpu_world_destroy - leave the world (NULL is ignored).
 *
 * Waits (at most the world's timeout) until every rank called it, so that
 * rank 0 keeps the store up while others still need it; then closes the
 * world's pipes, destroys its rendezvous and, on rank 0, stops the store
 * once every other rank has hung up.  A call on the world that another
 * thread is inside ends first, with TPU_E_CLOSED (a collective or a
 * send or receive at once, a wait on the store within 200 ms; a barrier
 * cut short still counts this rank); calls made after it began fail
 * with TPU_E_DESTROYED.  Before the world's context is destroyed (after
 * it, see tpu_context_destroy()); not from a callback of the context.
 * Twice is ignored.  In a
 * child forked after the world was made it returns at once: the child is
 * not a rank (its barrier and pipe calls return TPU_E_FORKED).
 */
TPU_API void tpu_world_destroy(struct tpu_world *world);
/** tpu_world_get_info - the world's info (rank, size, ...); NULL for NULL */
TPU_API const struct tpu_world_info *tpu_world_get_info(const struct tpu_world *world);
/**
 * tpu_world_rendezvous - the world's remote rendezvous; owned by the world
 * (do not destroy it), NULL for NULL.
 */
TPU_API struct tpu_rendezvous *tpu_world_rendezvous(struct tpu_world *world);
/**
 * tpu_world_url - the URL this rank reaches rank @rank at, for the
 * rendezvous (@what "rdv") or for pipes ("pipe"): shm for a rank of this
 * host, else tcp; for this rank itself, the URL other hosts dial.  NULL
 * for a bad argument.
 */
TPU_API const char *tpu_world_url(const struct tpu_world *world, int rank, const char *what);
/**
 * tpu_world_pipe - the pipe between this rank and @rank, made on first use.
 * @pipe:	out: owned by the world (do not close it); the same pipe on
 *		every later call.
 *
 * One pipe serves each pair: the first of the two ranks to ask connects
 * (the store decides who, so both asking at once is fine); the other's
 * call waits, at most the world's timeout, for that pipe to arrive.  The
 * world reads the pipe's first message itself (who is calling), so the
 * pipe's user sees only what is written after.  Not from a callback.
 * Errors: -EINVAL (bad argument, @rank out of range or this rank),
 * -ETIMEDOUT, -EDEADLK (on the context's thread), TPU_E_CLOSED, and those
 * of tpu_pipe_connect().
 */
TPU_API tpu_status tpu_world_pipe(struct tpu_world *world, int rank, struct tpu_pipe **pipe);
/**
 * tpu_world_barrier - wait until every rank called it (each time).
 * Errors: -ETIMEDOUT after the world's timeout, -EEXIST or -EINVAL when
 * the world was found broken since it formed (a rank started twice, a
 * size that differs; stderr says which), -EDEADLK, the store's.
 */
TPU_API tpu_status tpu_world_barrier(struct tpu_world *world);
/** TPU_WORLD_BLOB_MAX - longest blob tpu_world_exchange_blobs() swaps */
#define TPU_WORLD_BLOB_MAX	65536
/**
 * tpu_world_exchange_blobs - every rank publishes @blob and gets every
 * rank's, through the world's store (e.g. tpu_agent_export() blobs).
 * @blob, @len:	this rank's, at most TPU_WORLD_BLOB_MAX bytes (0 is fine).
 * @out:	size * @stride bytes: rank r's blob lands at @out + r * @stride
 *		(this rank's own is copied there too).
 * @stride:	room per rank, at least @len.
 * @lens:	size entries: rank r's length.
 *
 * Collective: every rank calls it, and makes its calls in the same order
 * as the others (each call is one round of the store's keys, which stay
 * there until the world ends).  Waits at most the world's timeout.
 * Errors: -EINVAL (NULLs, @len over TPU_WORLD_BLOB_MAX or @stride),
 * -EMSGSIZE (a rank's blob longer than @stride: @lens says how long; the
 * other blobs are read), -ETIMEDOUT (a rank that did not publish; stderr
 * says which), -EDEADLK (on the context's thread), those of the barrier
 * and the store's.
 */
TPU_API tpu_status tpu_world_exchange_blobs(struct tpu_world *world, const void *blob,
					    size_t len, void *out, size_t stride, size_t *lens);

/* ------------------------------------------------------------------ */
/* Collectives                                                         */
/* ------------------------------------------------------------------ */

/*
 * Collectives as TensorFlow defines them (collective.h): a group of
 * devices, instances of a collective over it, an executor per step.  Every
 * byte moves through a rendezvous (PostToPeer is tpu_rendezvous_send,
 * RecvFromPeer is tpu_rendezvous_recv), under TF keys whose devices are the
 * two members and whose edge names the group, instance and part, with the
 * step id as frame; so any rendezvous serves: inprocess between threads,
 * remote between workers, over whichever channel their pipes chose.
 * Where a group's members are worker processes of one host whose pids
 * their pipes prove, all-reduce, broadcast, all-gather and reduce-scatter
 * without a named implementation run on shared memory the members map
 * instead ("lanes"), chosen together at the group's first such call;
 * TPU_COLL_PATH=rdv keeps every call on the rendezvous.
 *
 * Every run of an instance resolves its parameters among the members:
 * each sends what it knows to rank 0, which checks them (and, from the
 * second run on, against the instance's first run), picks the
 * implementation and sends the verdict back; disagreement fails every
 * member with TPU_E_COLL_MISMATCH, promptly and with a reason
 * (tpu_coll_last_reason), and leaves the rendezvous usable.  The result
 * is cached in the tpu_coll (the newest 4096 instances).
 * A failure during a run aborts the rendezvous (tpu_rendezvous_abort with
 * -ECONNABORTED) so the other members fail promptly instead of waiting:
 * as in TensorFlow, a failed step ends the rendezvous.  See
 * Documentation/collectives.rst.
 */

/** enum tpu_coll_type - what a collective instance computes */
enum tpu_coll_type {
	TPU_COLL_REDUCTION = 0,	/* all-reduce: every member gets the reduction of all inputs */
	TPU_COLL_BROADCAST,	/* the source's input lands in every member's output */
	TPU_COLL_GATHER,	/* all-gather: member r's input at block r of every output */
	TPU_COLL_REDUCE_SCATTER, /* member r gets chunk r of the reduction (tpu_coll_chunk()) */
	TPU_COLL_ALL_TO_ALL,	/* block j of member r's input lands at block r of member j's output */
	TPU_COLL_PERMUTE,	/* member r's input lands in member permutation[r]'s output */
};

/** enum tpu_dtype - element types of collectives */
enum tpu_dtype {
	TPU_DT_FLOAT32 = 1,
	TPU_DT_FLOAT64,
	TPU_DT_FLOAT16,		/* IEEE binary16, reduced through float32 */
	TPU_DT_BFLOAT16,	/* reduced through float32, rounded to nearest even */
	TPU_DT_INT32,
	TPU_DT_INT64,
	TPU_DT_UINT8,
};

/** enum tpu_reduce_op - the merge op of a reduction */
enum tpu_reduce_op {
	TPU_OP_SUM = 0,
	TPU_OP_PROD,
	TPU_OP_MIN,
	TPU_OP_MAX,
};

/** enum tpu_final_op - applied once to the reduced result */
enum tpu_final_op {
	TPU_FINAL_NONE = 0,
	TPU_FINAL_DIV,		/* divide by the group size (sum then this: the mean) */
};

/** TPU_COLL_MAX_MEMBERS - most members of a group */
#define TPU_COLL_MAX_MEMBERS	64
/** TPU_COLL_MAX_SUBDIVS - most subdivisions (parallel rings) of a reduction */
#define TPU_COLL_MAX_SUBDIVS	8
/** TPU_COLL_MAX_DIMS - most dimensions of an instance's shape */
#define TPU_COLL_MAX_DIMS	8

/**
 * struct tpu_coll_group - CollGroupParams: data common to all members of a group.
 * @group_key:	names the group among the members.
 * @group_size:	members, 1 .. TPU_COLL_MAX_MEMBERS.
 * @device_type: "CPU" (the type of every member's device name).
 * @num_tasks:	distinct tasks among the members; 0 to have it counted.
 * @devices:	@group_size full device names, in any order: ranks follow
 *		their natural sort (task:2 before task:10), as TF's default rank.
 */
struct tpu_coll_group {
	int32_t group_key;
	int32_t group_size;
	const char *device_type;
	int32_t num_tasks;
	const char *const *devices;
};

/**
 * struct tpu_coll_instance - CollInstanceParams: data common to all members of an instance.
 * @instance_key: names the instance within the group.
 * @type:	TPU_COLL_REDUCTION, _BROADCAST, _GATHER, _REDUCE_SCATTER, _ALL_TO_ALL,
 *		_PERMUTE.
 * @dtype:	element type.
 * @count:	elements of each member's input (a gather's output has
 *		group_size times as many; a reduce-scatter's output is the
 *		member's chunk of them; an all-to-all's input and output are
 *		group_size blocks of @count each); may be 0.
 * @ndims, @dims: the shape, optional (@ndims 0); when given, the product
 *		of @dims must be @count, and members must agree on it.
 * @op, @final_op: reduction and reduce-scatter only.
 * @impl:	implementation by name (tpu_coll_impl_name()), NULL to let
 *		rank 0 choose by size and group shape.
 * @num_subdivs: reduction: parallel rings (1 .. TPU_COLL_MAX_SUBDIVS), 0
 *		to choose; @subdiv_offsets: where each ring starts (CollImplDetails'
 *		subdiv_offsets), NULL for evenly spread starts.
 * @timeout_ns:	the whole run, resolution included; 0 for 60 s.
 * @permutation: permute only: group_size ranks, a permutation of 0 ..
 *		group_size - 1 (every rank once): rank r's input goes to rank
 *		permutation[r], so a member's output is the input of the rank
 *		that names it; members must agree on it.  Ignored otherwise.
 * @reserved:	zero (room for later parameters; -EINVAL otherwise).
 */
struct tpu_coll_instance {
	int32_t instance_key;
	enum tpu_coll_type type;
	enum tpu_dtype dtype;
	uint64_t count;
	int32_t ndims;
	const int64_t *dims;
	enum tpu_reduce_op op;
	enum tpu_final_op final_op;
	const char *impl;
	int32_t num_subdivs;
	const int32_t *subdiv_offsets;
	uint64_t timeout_ns;
	const int32_t *permutation;
	uint64_t reserved[4];
};

/**
 * struct tpu_coll_member - what is particular to one member (CollectiveParams).
 * @device:	this member's device name, one of the group's.
 * @is_source:	broadcast: this member sends; exactly one member must.
 */
struct tpu_coll_member {
	const char *device;
	bool is_source;
};

/**
 * struct tpu_coll_resolved - an instance as resolution completed it.
 * @default_rank: this member's rank.
 * @source_rank: broadcast: the source's rank, else -1.
 * @num_tasks:	distinct tasks of the group.
 * @impl:	the implementation chosen; "lanes" where the last run went through
 *		the group's shared memory (see tpu_coll_exec_run).
 * @num_subdivs, @subdiv_offsets: the rings of a reduction.
 */
struct tpu_coll_resolved {
	int32_t default_rank;
	int32_t source_rank;
	int32_t num_tasks;
	char impl[32];
	int32_t num_subdivs;
	int32_t subdiv_offsets[TPU_COLL_MAX_SUBDIVS];
};

/** struct tpu_coll - this worker's collectives over one rendezvous (opaque) */
struct tpu_coll;
/** struct tpu_coll_exec - the collective executor of one step (opaque) */
struct tpu_coll_exec;

/**
 * tpu_coll_create - collectives over @rdv, which stays the caller's and
 * must outlive the tpu_coll.
 * Errors: -EINVAL, -ENOMEM.
 */
TPU_API tpu_status tpu_coll_create(struct tpu_rendezvous *rdv, struct tpu_coll **out);
/**
 * tpu_coll_create_cluster - a remote rendezvous for the cluster map in
 * @opts (task names and URLs), and collectives over it, which own it.
 *
 * This is the one call a launcher's bootstrap needs once it knows the map.
 * Errors: those of tpu_rendezvous_create_remote(), -ENOMEM.
 */
TPU_API tpu_status tpu_coll_create_cluster(struct tpu_context *ctx,
					   const struct tpu_remote_options *opts,
					   struct tpu_coll **out);
/** tpu_coll_rendezvous - the rendezvous the collectives move data through */
TPU_API struct tpu_rendezvous *tpu_coll_rendezvous(struct tpu_coll *coll);
/**
 * tpu_coll_destroy - free @coll (NULL is ignored); destroy its executors
 * first.  One destroyed before them is freed with the last of them (a
 * line on stderr says so): their runs in flight go on to their end, and
 * new runs and calls on @coll fail with TPU_E_DESTROYED.  A rendezvous
 * it created is destroyed with it.  Twice is ignored; in a forked child
 * it returns at once (TPU_E_FORKED otherwise).
 */
TPU_API void tpu_coll_destroy(struct tpu_coll *coll);

/**
 * tpu_coll_exec_create - the executor of step @step_id.
 *
 * Members run an instance in the same step: the step id is part of every
 * key, so a step id is used for at most one run of each instance.
 * Errors: -EINVAL, -ENOMEM, TPU_E_DESTROYED (@coll destroyed),
 * TPU_E_FORKED (@coll made before this child was forked).
 */
TPU_API tpu_status tpu_coll_exec_create(struct tpu_coll *coll, int64_t step_id,
					struct tpu_coll_exec **out);
/**
 * tpu_coll_exec_destroy - wait for the step's runs to finish (their
 * callbacks ran), then free it (NULL is ignored).  Not from a callback.
 * Twice is ignored; in a forked child it returns at once without waiting
 * (the runs are the parent's threads).
 */
TPU_API void tpu_coll_exec_destroy(struct tpu_coll_exec *exec);

/** typedef tpu_coll_cb - a run finished with @status */
typedef void (*tpu_coll_cb)(void *arg, tpu_status status);

/**
 * tpu_coll_exec_start - run one member's part of an instance, on a thread
 * of the executor; @done runs there when it finished.
 * @in:		this member's input, @instance->count elements (a broadcast's
 *		non-source members: NULL).
 * @out:	the result: @count elements, @group_size times that for a
 *		gather; may equal @in (in place).  A broadcast source may pass NULL.
 *
 * Both buffers stay the caller's and untouched until @done.  Errors to
 * @done: TPU_E_COLL_MISMATCH (the members disagree: type, data type,
 * count, shape, op, group size or devices, implementation, sources; every
 * member gets it), -ENOENT (no implementation of that name, every member),
 * -ETIMEDOUT, TPU_E_PEER_GONE (a member died), the abort status (this step
 * aborted here or on another member; -ECONNABORTED when another member's
 * run failed), -EINVAL (@in or @out missing).  Errors returned here mean
 * @done will not run: -EINVAL (bad parameters, this member not in the
 * group), -ENOMEM, the abort status.
 */
TPU_API tpu_status tpu_coll_exec_start(struct tpu_coll_exec *exec,
				       const struct tpu_coll_group *group,
				       const struct tpu_coll_instance *instance,
				       const struct tpu_coll_member *member, const void *in,
				       void *out, tpu_coll_cb done, void *arg);
/**
 * tpu_coll_exec_run - tpu_coll_exec_start() that runs on the caller's
 * thread (one hand-off fewer) and returns the status its callback would get.
 *
 * Not on the context's thread (a rendezvous callback): the run waits for
 * callbacks that thread delivers.
 */
TPU_API tpu_status tpu_coll_exec_run(struct tpu_coll_exec *exec,
				     const struct tpu_coll_group *group,
				     const struct tpu_coll_instance *instance,
				     const struct tpu_coll_member *member, const void *in,
				     void *out);
/**
 * tpu_coll_exec_abort - StartAbort: fail every pending and later run of
 * this step, here and on every member, with @status (an errno value,
 * -EHWPOISON .. -1), through tpu_rendezvous_abort() of the coll's
 * rendezvous, which ends it for every step.
 * Errors: -EINVAL, -EALREADY.
 */
TPU_API tpu_status tpu_coll_exec_abort(struct tpu_coll_exec *exec, tpu_status status);
/**
 * tpu_coll_resolved - the resolution cached for @group_key/@instance_key.
 * Errors: -EINVAL, -ENOENT (not resolved yet, or resolution failed).
 */
TPU_API tpu_status tpu_coll_resolved(struct tpu_coll *coll, int32_t group_key,
				     int32_t instance_key, struct tpu_coll_resolved *out);
/**
 * tpu_coll_last_reason - why the last run of @coll that failed failed,
 * in words (a mismatch names the field and the two members); "" if none.
 */
TPU_API void tpu_coll_last_reason(struct tpu_coll *coll, char *buf, size_t size);
/**
 * tpu_coll_impl_name - the @i-th registered implementation ("ring", "tree"...)
 * and its collective type; NULL past the last.
 */
TPU_API const char *tpu_coll_impl_name(size_t i, enum tpu_coll_type *type);
/**
 * tpu_coll_chunk - where rank @rank's chunk of @count elements starts, and
 * its length, when a reduce-scatter splits them among @n members: evenly,
 * the first @count % @n chunks one element longer.
 */
TPU_API size_t tpu_coll_chunk(uint64_t count, int n, int rank, size_t *len);
/** tpu_dtype_size - bytes per element of @dtype, 0 if unknown */
TPU_API size_t tpu_dtype_size(enum tpu_dtype dtype);

/* ------------------------------------------------------------------ */
/* Collectives of a world, by rank                                     */
/* ------------------------------------------------------------------ */

/*
 * The common case in one call: collectives and point-to-point transfers
 * over a world, by rank.  Each is the TensorFlow model above underneath (a
 * group of the world's ranks, an instance, an executor of one step) set up
 * and torn down by the call, so every call checks that the ranks
 * agree (type, data type, count, op, root) through rank 0 before any data
 * moves.  The devices of the group are the world's,
 * "/job:JOB/replica:0/task:RANK/device:CPU:0" (tpu_world_device_name()).
 *
 * Every rank calls the collectives in the same order, one at a time per
 * world (another thread's call meanwhile gets -EBUSY).  Buffers are host
 * memory the call reads and writes before it returns.  @timeout_ns bounds
 * the whole call, 0 meaning 60 s.  Errors common to them: -EINVAL (bad
 * argument, a dtype or op out of range), -E2BIG (a world of more than
 * TPU_COLL_MAX_MEMBERS ranks), -EBUSY, -EDEADLK (on the context's thread),
 * TPU_E_FORKED (in a child forked after the world was formed),
 * TPU_E_COLL_MISMATCH (the ranks called different collectives or with
 * different parameters: over the rendezvous every rank gets it,
 * tpu_world_last_reason() says what differs, and the world stays usable;
 * over a shared segment, below, it stays failed), -ETIMEDOUT,
 * TPU_E_PEER_GONE.
 * A failure other than a mismatch or a local -EINVAL ends the world's
 * rendezvous, as a failed step does in TensorFlow: later calls fail too.
 *
 * When every rank is on this host, the collectives (not send and receive)
 * meet in a shared segment instead of the rendezvous, set up at the first
 * collective (Documentation/collectives.rst): the same statuses, and a
 * member that dies fails every member's call with TPU_E_PEER_GONE within
 * a few milliseconds.  There a rank returns as soon as its own result is
 * complete (a broadcast's root once it published its tensor, a rank whose
 * reduce-scatter chunk is empty once it published its input), so a
 * mismatch is found by the ranks that read the differing rank's call, not
 * necessarily by all in that call: a rank that returned already fails a
 * later call (its next once another rank failed, at the latest the 8th)
 * with TPU_E_COLL_MISMATCH and the same reason, and the segment stays failed: every later collective
 * returns TPU_E_COLL_MISMATCH (send and receive still work).  When the ranks sit on several hosts (some with
 * more than one rank), the collectives run in two levels: each host's
 * ranks meet in a segment of their own and one leader per host meets the
 * others over the rendezvous; a failure, or a rank that dies, on one host
 * fails every rank's call on every host.  TPU_COLL_PATH=rdv or =flat (on
 * every rank) keeps the flat rendezvous, =shm (one segment for the world)
 * and =hier (two levels) make the collectives fail with -EOPNOTSUPP where
 * that cannot be had, any value but these and "auto" with -EINVAL.
 * A segment's large tensors are copied through the module's grants where
 * /dev/tensorpipe (TP_FEAT_GRANT) serves every rank, else with
 * process_vm_readv; TPU_COLL_COPY=cma keeps the latter, =kmod makes the
 * collectives fail with -EOPNOTSUPP where the module cannot be had, any
 * value but these and "auto" with -EINVAL.
 */

/**
 * tpu_world_all_reduce - every rank gets the reduction of every rank's @in.
 * @in:		@count elements of @dtype.
 * @out:	@count elements; may be @in.
 * @op:		TPU_OP_SUM, _PROD, _MIN, _MAX.
 * @final_op:	TPU_FINAL_NONE, or TPU_FINAL_DIV to divide by the world's
 *		size (with TPU_OP_SUM: the mean).
 * @timeout_ns:	the whole call; 0 for 60 s.
 */
TPU_API tpu_status tpu_world_all_reduce(struct tpu_world *world, const void *in, void *out,
					uint64_t count, enum tpu_dtype dtype, enum tpu_reduce_op op,
					enum tpu_final_op final_op, uint64_t timeout_ns);
/**
 * tpu_world_broadcast - rank @root's @buf lands in every rank's @buf.
 * @buf:	@count elements of @dtype: read on @root, written elsewhere.
 * @root:	the rank that sends; every rank names the same.
 * @timeout_ns:	the whole call; 0 for 60 s.
 */
TPU_API tpu_status tpu_world_broadcast(struct tpu_world *world, void *buf, uint64_t count,
				       enum tpu_dtype dtype, int root, uint64_t timeout_ns);
/**
 * tpu_world_all_gather - rank r's @in lands at block r of every rank's @out.
 * @in:		@count elements of @dtype.
 * @out:	size times @count elements, blocks in rank order.
 * @timeout_ns:	the whole call; 0 for 60 s.
 */
TPU_API tpu_status tpu_world_all_gather(struct tpu_world *world, const void *in, void *out,
					uint64_t count, enum tpu_dtype dtype, uint64_t timeout_ns);
/**
 * tpu_world_reduce_scatter - rank r gets chunk r of the reduction.
 * @in:		@count elements of @dtype.
 * @out:	room for this rank's chunk: tpu_coll_chunk(@count, size, rank,
 *		&len) elements (the first @count % size ranks get one more).
 * @op, @final_op: as tpu_world_all_reduce().
 * @timeout_ns:	the whole call; 0 for 60 s.
 */
TPU_API tpu_status tpu_world_reduce_scatter(struct tpu_world *world, const void *in, void *out,
					    uint64_t count, enum tpu_dtype dtype,
					    enum tpu_reduce_op op, enum tpu_final_op final_op,
					    uint64_t timeout_ns);
/**
 * tpu_world_barrier_timeout - wait until every rank called it, at most
 * @timeout_ns (0: 60 s).
 *
 * Unlike tpu_world_barrier(), which goes through the store, this is a
 * collective (an all-reduce of one byte, over the rendezvous or the shared
 * segment), in order with the other collectives above.
 */
TPU_API tpu_status tpu_world_barrier_timeout(struct tpu_world *world, uint64_t timeout_ns);
/**
 * tpu_world_coll_path - which path the collectives above take on @world:
 * "shm" (the shared segment), "hier" (a segment per host and the
 * rendezvous between hosts) or "rdv" (the rendezvous), the same on every
 * rank once decided at the first collective; "" before that, after a
 * set-up that failed, while another thread's collective runs, or for a
 * bad @world.  A caller that has its own way for the rendezvous case (a
 * framework backend) asks after one collective, e.g.
 * tpu_world_barrier_timeout().
 */
TPU_API const char *tpu_world_coll_path(struct tpu_world *world);
/**
 * tpu_world_send - send @len bytes of @data to rank @dst; returns once
 * @dst received them (the source is free again).
 * @timeout_ns:	how long @dst may take to receive; 0 for 60 s.  On
 *		-ETIMEDOUT the send is withdrawn and the next send to @dst
 *		takes its place.
 *
 * The n-th send from a rank to @dst meets the n-th tpu_world_recv() of
 * @dst from that rank, under the key "SRC;1;DST;tpu_world_p2p;0:n" of the
 * two ranks' device names.  Since a send waits for its receive, two ranks
 * that exchange either order the calls (one sends first) or send on
 * another thread.  One send to a given rank at a time (else -EBUSY).
 * Errors: -EINVAL (bad argument, @dst out of range or this rank), -EBUSY,
 * -EDEADLK, -ETIMEDOUT, TPU_E_PEER_GONE, and those of
 * tpu_rendezvous_send_wait().
 */
TPU_API tpu_status tpu_world_send(struct tpu_world *world, int dst, const void *data, size_t len,
				  uint64_t timeout_ns);
/**
 * tpu_world_recv - receive the next message of rank @src into @data.
 * @cap:	room at @data, bytes.
 * @len:	out, may be NULL: bytes received (the message's length on -EMSGSIZE).
 * @timeout_ns:	0 for 60 s.  On -ETIMEDOUT or -EMSGSIZE nothing is
 *		consumed: the next receive from @src waits for the same message.
 *
 * One receive from a given rank at a time (else -EBUSY).  Errors: -EINVAL,
 * -EBUSY, -EDEADLK, -ETIMEDOUT, -EMSGSIZE, TPU_E_PEER_GONE, and those of
 * tpu_rendezvous_recv_wait().
 */
TPU_API tpu_status tpu_world_recv(struct tpu_world *world, int src, void *data, size_t cap,
				  size_t *len, uint64_t timeout_ns);
/**
 * tpu_world_device_name - the device name of @rank in this world's keys,
 * "/job:JOB/replica:0/task:RANK/device:CPU:0", into @buf.
 *
 * These are the names the collectives above use, and the ones to put in
 * tpu_key's @src_device and @dst_device for the world's rendezvous.
 * Errors: -EINVAL (bad argument, @rank out of range), -ENOSPC (@size too small).
 */
TPU_API tpu_status tpu_world_device_name(const struct tpu_world *world, int rank, char *buf,
					 size_t size);
/**
 * tpu_world_last_reason - why the last failed collective of this rank
 * failed, in words (a mismatch names what differs and the two ranks); ""
 * if none.
 */
TPU_API void tpu_world_last_reason(struct tpu_world *world, char *buf, size_t size);

/*
 * One-sided transfers (Documentation/xfer.rst): the model of NIXL and of
 * Mooncake's Transfer Engine.  An agent registers memory once and exports
 * each registration as a small metadata blob; a peer agent loads the blob
 * (a remote handle) and posts READ or WRITE requests between lists of its
 * own pieces and the remote's, prepared once and posted many times, with
 * an optional notification delivered to the remote agent after the data.
 *
 * Backends, chosen per pair of agents at the first load:
 *   cma	same machine: process_vm_readv/writev with the request's
 *		iovecs, 1024 per call, against only the pid the kernel gives
 *		the agents' shm connection (SO_PEERCRED); needs ptrace
 *		permission between the two processes.
 *   kmod	same machine, both agents in one module domain
 *		(tpu_agent_use_domain): the target grants each loader its
 *		registration (TP_IOC_GRANT) and the module copies each list
 *		(TP_IOC_COPY), checking every element against the grant.
 *		Needs no ptrace permission, so it also serves users that must
 *		not see each other's memory; preferred when both sides have it.
 *   rdma	an RDMA device (when cma is not the choice): RDMA READ and
 *		WRITE between memory regions, queue pairs set up over the
 *		agents' pipe; the target registers a registration for a peer
 *		only when that peer loads it, and deregistration kills its
 *		rkeys first.  Posts cannot be cancelled; they end, bounded.
 *   tcp	any pipe transport: the target agent's context thread serves
 *		each request against its own registrations.
 * Trust: agents talk over pipes, so a job secret (tpu_context_set_secret)
 * is proven before a blob is worth anything; a WRITE lands only in memory
 * registered with TPU_XFER_WRITE; every element is checked against the
 * registration (by the target for tcp, the target's MR for rdma, by
 * this library for cma and rdma at preparation) and a
 * request naming anything outside it fails whole before a byte moves.
 * Calls are thread-safe.  Those that wait (load, deregister, wait,
 * destroy) must not run on a callback of the agent's context.
 */

/** struct tpu_agent - registrations, remote handles and requests (opaque) */
struct tpu_agent;
/** struct tpu_xfer_reg - memory registered with an agent (opaque) */
struct tpu_xfer_reg;
/** struct tpu_xfer_remote - a peer's registration, from its blob (opaque) */
struct tpu_xfer_remote;
/** struct tpu_xfer_req - a prepared transfer request (opaque) */
struct tpu_xfer_req;

/** TPU_XFER_READ - peers that load the export may read the registration */
#define TPU_XFER_READ		(1U << 0)
/** TPU_XFER_WRITE - peers that load the export may write it */
#define TPU_XFER_WRITE		(1U << 1)

/** TPU_XFER_BACKEND_CMA - allow the cma backend (struct tpu_agent_options) */
#define TPU_XFER_BACKEND_CMA	(1U << 0)
/** TPU_XFER_BACKEND_TCP - allow the tcp backend */
#define TPU_XFER_BACKEND_TCP	(1U << 1)
/** TPU_XFER_BACKEND_KMOD - allow the kmod backend (once tpu_agent_use_domain succeeded) */
#define TPU_XFER_BACKEND_KMOD	(1U << 2)
/** TPU_XFER_BACKEND_RDMA - allow the rdma backend (RDMA READ/WRITE between MRs) */
#define TPU_XFER_BACKEND_RDMA	(1U << 3)

/** TPU_XFER_BLOB_MAX - longest metadata blob */
#define TPU_XFER_BLOB_MAX	1024
/** TPU_XFER_NOTIF_MAX - longest notification message */
#define TPU_XFER_NOTIF_MAX	4096
/** TPU_XFER_NAME_MAX - longest agent name, its NUL included */
#define TPU_XFER_NAME_MAX	64
/** TPU_XFER_MAX_ELEMS - most elements in each list of a request */
#define TPU_XFER_MAX_ELEMS	(1U << 20)

/**
 * struct tpu_agent_options - how to create an agent; zeroed means defaults.
 * @name:	how peers' notifications name this agent (at most
 *		TPU_XFER_NAME_MAX - 1 bytes), NULL for "pid:PID".
 * @backends:	TPU_XFER_BACKEND_* allowed, 0 for all.
 * @reserved:	zero (room for later options; -EINVAL otherwise).
 */
struct tpu_agent_options {
	const char *name;
	unsigned int backends;
	unsigned int pad;
	uint64_t reserved[4];
};

/** enum tpu_xfer_op - READ: remote to local; WRITE: local to remote */
enum tpu_xfer_op {
	TPU_XFER_OP_READ = 0,
	TPU_XFER_OP_WRITE = 1,
};

/**
 * struct tpu_xfer_local_elem - a piece of a local registration.
 * @reg:	the registration (this agent's).
 * @offset:	from its start.
 * @len:	bytes (0 is allowed and moves nothing).
 */
struct tpu_xfer_local_elem {
	struct tpu_xfer_reg *reg;
	uint64_t offset;
	uint64_t len;
};

/**
 * struct tpu_xfer_remote_elem - a piece of a remote registration.
 * @remote:	the handle (every element of a request on one peer agent).
 * @offset:	from the registration's start.
 * @len:	bytes (0 is allowed).
 */
struct tpu_xfer_remote_elem {
	struct tpu_xfer_remote *remote;
	uint64_t offset;
	uint64_t len;
};

/** typedef tpu_xfer_cb - a post finished (on the posting or the context thread) */
typedef void (*tpu_xfer_cb)(void *arg, tpu_status status, struct tpu_xfer_req *req);
/** typedef tpu_notif_cb - a notification from @peer (context thread; must not block) */
typedef void (*tpu_notif_cb)(void *arg, const char *peer, const void *msg, size_t len);

/**
 * tpu_agent_create - an agent on @ctx, listening on a local shm name and
 * on tcp://127.0.0.1, or the address in TPU_XFER_ADDR for peers on other
 * hosts (what the context allows), for its peers.
 * Errors: -EINVAL (options), TPU_E_NO_TRANSPORT, those of
 * tpu_listener_create(), -ENOMEM.
 */
TPU_API tpu_status tpu_agent_create(struct tpu_context *ctx, const struct tpu_agent_options *opts,
				    struct tpu_agent **out);
/**
 * tpu_agent_destroy - close every pipe, fail every request in flight with
 * TPU_E_CLOSED, free the registrations and remote handles still held.
 * Release every request first (tpu_xfer_release); requests left are
 * released here (a line on stderr says how many), and later calls on
 * them fail with TPU_E_DESTROYED.  Peers' handles on its registrations
 * fail from then on.  Not from a callback of the context; NULL is ignored.
 */
TPU_API void tpu_agent_destroy(struct tpu_agent *a);
/**
 * tpu_agent_use_domain - let @a use the kmod backend: open its own module
 * endpoint and attach it to the domain behind @domain_fd (from
 * tpu_domain_create, passed to each process with tpu_fd_send; holding it
 * is the right to take part).  Agents in one domain then move requests
 * through the module; others fall back to cma or tcp.  Call it before
 * loading or exporting blobs that should use it; @domain_fd stays the
 * caller's.  Errors: TPU_E_NO_DEVICE (no module), -EOPNOTSUPP (a module
 * without TP_FEAT_GRANT), -EINVAL or -EBADF (@domain_fd is no domain),
 * -EBUSY (already called).
 */
TPU_API tpu_status tpu_agent_use_domain(struct tpu_agent *a, int domain_fd);
/** tpu_agent_name - the name its notifications carry; never NULL */
TPU_API const char *tpu_agent_name(const struct tpu_agent *a);
/**
 * tpu_agent_register - register @len bytes at @addr (plain or huge-page
 * host memory, mapped over the whole range) for transfers.
 * @access:	what peers that load its export may do: TPU_XFER_READ,
 *		TPU_XFER_WRITE or both; 0 exports nothing (local use only).
 * Errors: -EINVAL (NULL, @len 0, a range that wraps, unknown @access
 * bits), -EFAULT (part of the range is not mapped), -ENOSPC (65536
 * registrations), -ENOMEM.
 */
TPU_API tpu_status tpu_agent_register(struct tpu_agent *a, void *addr, size_t len,
				      unsigned int access, struct tpu_xfer_reg **out);
/**
 * tpu_agent_register_dmabuf - register @len bytes at @offset of the
 * dma-buf @fd (udmabuf, or any exporter whose buffer maps into this
 * process; @fd must be open for reading and writing).  The buffer is
 * mapped and the mapping registered as host memory: both backends reach
 * it, and it is unmapped when the registration is freed (the caller keeps
 * @fd; closing it does not end the registration).  @access as
 * tpu_agent_register().
 * Errors: -EINVAL, -ERANGE (@offset + @len beyond the buffer's size),
 * -EACCES (not open for writing), -ENODEV (the buffer does not map: its
 * exporter serves devices only), -EOPNOTSUPP (it maps raw page frames,
 * which cma peers' process_vm_readv cannot reach), those of
 * tpu_agent_register().
 */
TPU_API tpu_status tpu_agent_register_dmabuf(struct tpu_agent *a, int fd, uint64_t offset,
					     size_t len, unsigned int access,
					     struct tpu_xfer_reg **out);
/**
 * tpu_agent_register_cuda - register @len bytes of CUDA device memory at
 * @dptr (a CUdeviceptr, of CUDA device @device, loaded as for pipes:
 * Documentation/cuda.rst).  No process can reach device memory with
 * host copies, so this agent's own copies serve it, through the driver:
 * peers reach it over the tcp backend (a peer whose backend is cma fails
 * its tpu_agent_load() with -EOPNOTSUPP), and it cannot be the local side
 * of a request (tpu_xfer_prepare() fails -EOPNOTSUPP).  @access as
 * tpu_agent_register().
 * Errors: -EINVAL (not one allocation of that device, or bad arguments),
 * TPU_E_NO_CUDA (no driver), -ENODEV (no such device), those of
 * tpu_agent_register().
 */
TPU_API tpu_status tpu_agent_register_cuda(struct tpu_agent *a, uint32_t device, void *dptr,
					   size_t len, unsigned int access,
					   struct tpu_xfer_reg **out);
/**
 * tpu_agent_register_region - register @len bytes at @offset of module
 * region @handle of the application's endpoint @ep (tpu_region_register,
 * tpu_region_alloc or a DONATE receive), mapped in this process at @addr
 * (those bytes of the region: the memory given to tpu_region_register, or
 * a tpu_region_mmap of it).  @ep must be attached to the domain @a joined
 * with tpu_agent_use_domain() and outlive the registration.  kmod loaders
 * are granted the region itself through @ep (no second pin); the other
 * backends, and local pieces, reach it at @addr, as host memory.  The
 * handle, range and access are checked by the module; that @addr maps
 * those bytes is the caller's word.  Deregistration revokes the grants
 * made on it; the region stays the caller's.  @access as
 * tpu_agent_register() (and the region must allow it).
 * Errors: -EINVAL (bad arguments, @ep NULL, @addr NULL), -EXDEV (@a has
 * no domain, or @ep is not in it), -ENOENT (no such region of @ep),
 * -ERANGE (past the region), -EACCES (access the region lacks),
 * -EOPNOTSUPP (an imported dma-buf region), -EFAULT (@addr not mapped
 * over @len), those of tpu_agent_register().
 */
TPU_API tpu_status tpu_agent_register_region(struct tpu_agent *a, struct tpu_endpoint *ep,
					     uint32_t handle, uint64_t offset, size_t len,
					     void *addr, unsigned int access,
					     struct tpu_xfer_reg **out);
/**
 * tpu_agent_deregister - revoke and free @reg.  Returns once no peer can
 * reach the memory: every peer that loaded it acknowledged the revocation
 * (one that does not within 2 s has its pipe closed) and no request is
 * being served on it.  Requests of peers that name it fail TPU_E_REVOKED;
 * local requests that use it fail likewise when posted.
 * Errors: -EINVAL, -EDEADLK (called on the context's thread),
 * TPU_E_DESTROYED (deregistered already, or freed with its agent).
 */
TPU_API tpu_status tpu_agent_deregister(struct tpu_xfer_reg *reg);
/**
 * tpu_agent_export - write @reg's metadata blob (at most
 * TPU_XFER_BLOB_MAX bytes) to @buf; *@len gets its length.  The blob names
 * the agent, the registration, a random key and the addresses to reach the
 * agent; it grants nothing by itself: a loader must connect and prove the
 * job secret, and the access is the registration's.
 * Errors: -EINVAL (NULL, @access 0), -ENOSPC (@size too small; *@len says).
 */
TPU_API tpu_status tpu_agent_export(const struct tpu_xfer_reg *reg, void *buf, size_t size,
				    size_t *len);
/**
 * tpu_agent_load - a handle on the registration a peer's blob exports:
 * connects to its agent (once per peer agent), which confirms the
 * registration and tells its bounds and access.  Blocks up to 10 s.
 * Errors: -EINVAL, TPU_E_BAD_BLOB (not a blob, truncated, corrupted, or
 * the address now serves another agent), TPU_E_REVOKED (deregistered, or
 * the key does not match), TPU_E_NO_TRANSPORT (no backend both agents
 * allow), -EACCES (the job secrets differ), -ETIMEDOUT, the pipe's errors.
 */
TPU_API tpu_status tpu_agent_load(struct tpu_agent *a, const void *blob, size_t len,
				  struct tpu_xfer_remote **out);
/**
 * tpu_agent_unload - free a remote handle; release the requests using it
 * first.  While some are left it is only marked (a line on stderr says
 * so): their posts fail TPU_E_REVOKED, and the last release frees it.
 * An unloaded handle is refused from then on (twice is ignored).
 */
TPU_API void tpu_agent_unload(struct tpu_xfer_remote *rm);
/** tpu_xfer_remote_backend - "kmod", "cma", "rdma" or "tcp": how requests on @rm move */
TPU_API const char *tpu_xfer_remote_backend(const struct tpu_xfer_remote *rm);
/** tpu_xfer_remote_size - the registration's length in bytes (0 for NULL) */
TPU_API uint64_t tpu_xfer_remote_size(const struct tpu_xfer_remote *rm);

/**
 * tpu_xfer_prepare - check and build a request once; post it many times.
 * @op:		READ (remote into local) or WRITE (local into remote).
 * @local, @nlocal:	this agent's pieces (1 .. TPU_XFER_MAX_ELEMS).
 * @remote, @nremote:	the peer's pieces, all of one peer agent, totalling
 *		the same bytes as @local; pieces are paired in order.
 * @notif, @notif_len:	a message (at most TPU_XFER_NOTIF_MAX bytes)
 *		delivered to the peer agent after each post's data, or NULL.
 * Errors: -EINVAL (NULL, counts, totals differ, an element outside its
 * registration, handles of several peers or of another agent),
 * -EACCES (READ of a registration not exported for reading, WRITE of one
 * not exported for writing), TPU_E_REVOKED, TPU_E_DESTROYED (a
 * registration deregistered or a handle unloaded already), -ENOMEM.
 */
TPU_API tpu_status tpu_xfer_prepare(struct tpu_agent *a, enum tpu_xfer_op op,
				    const struct tpu_xfer_local_elem *local, size_t nlocal,
				    const struct tpu_xfer_remote_elem *remote, size_t nremote,
				    const void *notif, size_t notif_len, struct tpu_xfer_req **out);
/**
 * tpu_xfer_post - start @req; @done (may be NULL) gets its status, on this
 * thread before the call returns (cma) or on the context's thread (tcp).
 * Errors returned here mean @done is not called: -EINVAL, -EBUSY (still
 * in flight).  Failures of the transfer go to @done and tpu_xfer_poll():
 * TPU_E_REVOKED, TPU_E_PEER_GONE or -ESRCH (the peer died), the peer's
 * -EINVAL or -EACCES (it refused an element: nothing moved), -ECANCELED.
 */
TPU_API tpu_status tpu_xfer_post(struct tpu_xfer_req *req, tpu_xfer_cb done, void *arg);
/** tpu_xfer_poll - -EINPROGRESS while in flight, else the last post's status */
TPU_API tpu_status tpu_xfer_poll(const struct tpu_xfer_req *req);
/**
 * tpu_xfer_wait - wait for the post in flight and its callback to return,
 * @timeout_ms (-1: forever); its status, or -ETIMEDOUT (still in flight).
 * Not from the request's own callback.
 */
TPU_API tpu_status tpu_xfer_wait(struct tpu_xfer_req *req, int timeout_ms);
/**
 * tpu_xfer_cancel - finish the post in flight with -ECANCELED; bytes of
 * it may have moved already.  -EALREADY when none is in flight.
 */
TPU_API tpu_status tpu_xfer_cancel(struct tpu_xfer_req *req);
/** tpu_xfer_release - free @req (cancels a post in flight); NULL is ignored */
TPU_API void tpu_xfer_release(struct tpu_xfer_req *req);

/**
 * tpu_agent_notif_poll - take the oldest notification: the sender's name
 * into @peer (@peer_size bytes, NUL-terminated, cut if longer), the message
 * into @msg (@size bytes; *@len its full length).  Per peer, notifications
 * come in the order their posts completed.  Errors: -EAGAIN (none),
 * -ENOSPC (@size too small: the notification stays queued), -EINVAL.
 */
TPU_API tpu_status tpu_agent_notif_poll(struct tpu_agent *a, char *peer, size_t peer_size,
					void *msg, size_t size, size_t *len);
/**
 * tpu_agent_set_notif_cb - deliver notifications to @cb (on the context's
 * thread) instead of queueing them; NULL queues again.  Those queued
 * already stay queued.
 */
TPU_API tpu_status tpu_agent_set_notif_cb(struct tpu_agent *a, tpu_notif_cb cb, void *arg);

#ifdef __cplusplus
}
#endif

#endif /* TPU_USER_H */
