// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * libcuda_standin.so: a stand-in for the CUDA driver, for tests only (never
 * installed).  It implements, over host memory, exactly the entry points
 * lib/cuda resolves (struct tpu__cuda_api), so that the cuda channels run
 * on machines without a GPU: TPU_CUDA_DRIVER=path/libcuda_standin.so.
 *
 * Device memory: each allocation is a memfd, mapped twice: PROT_NONE at the
 * address handed out as the device pointer, so that the CPU faults on any
 * touch of "device" memory, and read-write at a private address that only
 * this file's copies use.
 *
 * Streams: a worker thread per stream runs its queued copies, event
 * records and event waits in order, each copy after a delay
 * (TPU_CUDA_STANDIN_DELAY_US, default 2000 us), so that a caller which does
 * not wait for a stream's work sees stale bytes.  The NULL stream (the
 * legacy default stream) of each device is such a worker too, made on
 * first use: copies, event records and waits on NULL run there, late.
 * The synchronous copies behave as the driver documents ("API
 * synchronization behavior"): cuMemcpyHtoD from host memory that is not
 * page-locked waits for the NULL stream, copies the source aside and
 * returns, and the device write lands later on the NULL stream
 * (PAGEABLE_LAG delays: later than a copy queued just after it on another
 * stream, so that whoever does not order after the NULL stream reads
 * stale bytes); from page-locked memory (cuMemHostAlloc), and cuMemcpyDtoH,
 * wait for the NULL stream, then copy; cuMemcpyDtoD only queues on the
 * NULL stream.  The NULL stream does not synchronise implicitly with other
 * streams (the driver's legacy stream does with blocking streams): the
 * stand-in is the stricter.  cuMemFree, cuMemUnmap and
 * cuIpcCloseMemHandle let the NULL streams' work end first (the driver
 * synchronises around a free), other streams' not: a library copy still
 * queued on freed memory stays an error.
 *
 * CUDA IPC: a handle names the owner's pid and the memfd's descriptor; the
 * importer opens /proc/PID/fd/FD (same user) and maps it the same way.
 *
 * VMM (cuMemCreate and friends): an allocation is a memfd; a reservation
 * is PROT_NONE address space; cuMemMap maps the memfd there like device
 * memory, usable only after cuMemSetAccess; a POSIX descriptor export is a
 * dup of the memfd (only for allocations that asked for that handle type),
 * and an import maps what it names.  Legacy IPC handles and cuMemFree
 * refuse VMM memory, as the driver does.  Granularity: 2 MiB.
 *
 * dma-buf export (cuMemGetHandleForAddressRange): a real udmabuf over the
 * allocation's memfd pages, from /dev/udmabuf (Linux 6.12 has it built in),
 * so that a module importing it takes the real path; without that device,
 * or with TPU_CUDA_STANDIN_DMABUF=0, CUDA_ERROR_NOT_SUPPORTED, as a device
 * without dma-buf support answers.
 *
 * Misuse gives the driver's error codes: no cuInit, no current context,
 * pointers outside allocations, host pointers inside them, double frees,
 * closing what was not opened, copies whose memory went away before the
 * stream ran them (CUDA_ERROR_ILLEGAL_ADDRESS, sticky).
 *
 * Environment: TPU_CUDA_STANDIN_DEVICES (device count, default 2; 0 makes
 * cuDeviceGetCount report none), TPU_CUDA_STANDIN_DELAY_US,
 * TPU_CUDA_STANDIN_DMABUF.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/udmabuf.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cuda.h"

#define API __attribute__((visibility("default")))
#define DEVICES_MAX	8
/* A pageable cuMemcpyHtoD lands this many delays after it returned. */
#define PAGEABLE_LAG	4
#define IPC_MAGIC	0x49535054u	/* "TPSI" */

typedef tpu__cu_result CUresult;

struct CUctx_st {
	int dev;
};

enum op_kind { OP_COPY, OP_RECORD, OP_WAIT };

struct CUevent_st {
	uint32_t magic;
	int refs;		/* the user's and queued operations' */
	uint64_t recorded;	/* records issued */
	uint64_t completed;	/* records reached */
};
#define EVENT_MAGIC	0x45564e54u

struct op {
	struct op *next;
	enum op_kind kind;
	/* OP_COPY: a device side as a device address, a host side as a pointer */
	uintptr_t dst, src;
	bool dst_dev, src_dev;
	size_t len;
	unsigned int lag;	/* delays before the copy */
	void *owned;		/* a staged source, freed once copied */
	/* OP_RECORD, OP_WAIT */
	struct CUevent_st *ev;
	uint64_t gen;
};

struct CUstream_st {
	uint32_t magic;
	int dev;
	pthread_t thread;
	struct op *head, **tail;
	bool busy, stop;
	pthread_cond_t cond;	/* under lock: work queued, or done */
};
#define STREAM_MAGIC	0x5354524du

struct alloc {
	struct alloc *next;
	uintptr_t base;
	size_t size;
	int fd;
	char *shadow;		/* the read-write mapping */
	int dev;
	bool ipc;		/* opened from another process's handle */
	struct phys *phys;	/* a VMM mapping (cuMemMap) of this allocation */
	bool access;		/* VMM: cuMemSetAccess made it usable */
};

/* A VMM allocation (cuMemCreate, cuMemImportFromShareableHandle). */
struct phys {
	struct phys *next;
	unsigned long long id;	/* the handle */
	int fd;
	size_t size;
	int dev;
	bool fd_ok;		/* exportable as a POSIX descriptor */
	int refs;		/* handles held (create, import, retain) */
	int maps;		/* cuMemMap mappings */
};

/* A reserved range (cuMemAddressReserve): PROT_NONE, nothing behind it. */
struct resv {
	struct resv *next;
	uintptr_t base;
	size_t size;
};

struct host {
	struct host *next;
	void *p;
	size_t size;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ev_cond = PTHREAD_COND_INITIALIZER;
static bool initialised;
static int ndev;
static long delay_us = 2000;
static struct CUctx_st contexts[DEVICES_MAX];
static __thread struct CUctx_st *current;
static struct alloc *allocs;
static struct host *hosts;
static CUresult sticky;		/* an asynchronous failure, returned by later calls */
static unsigned long live_ipc, opened_ipc;
static struct phys *physs;
static struct resv *resvs;
static unsigned long long next_phys = 1;
/* Each device's NULL stream, made on first use; never destroyed. */
static struct CUstream_st *null_streams[DEVICES_MAX];

static void null_drain_all(void);

/* Counters for the tests: allocations and IPC mappings alive, IPC opens so far. */
API void tpu_cuda_standin_counts(unsigned long *allocations, unsigned long *ipc_live,
				 unsigned long *ipc_opened);
API void tpu_cuda_standin_counts(unsigned long *allocations, unsigned long *ipc_live,
				 unsigned long *ipc_opened)
{
	unsigned long n = 0;

	pthread_mutex_lock(&lock);
	for (struct alloc *a = allocs; a; a = a->next)
		n += !a->ipc;
	*allocations = n;
	*ipc_live = live_ipc;
	*ipc_opened = opened_ipc;
	pthread_mutex_unlock(&lock);
}

/* lock held: the allocation holding [p, p + len), or NULL. */
static struct alloc *find(uintptr_t p, size_t len)
{
	for (struct alloc *a = allocs; a; a = a->next)
		if (p >= a->base && p - a->base < a->size && len <= a->size - (p - a->base))
			return a;
	return NULL;
}

/* lock held: whether a host pointer range overlaps device memory. */
static bool host_bad(const void *p, size_t len)
{
	uintptr_t h = (uintptr_t)p;

	if (!p && len)
		return true;
	for (struct alloc *a = allocs; a; a = a->next)
		if (h < a->base + a->size && h + len > a->base)
			return true;
	return false;
}

/* lock held: the calling thread may use the driver. */
static CUresult ready(void)
{
	if (!initialised)
		return TPU__CU_ERROR_NOT_INITIALIZED;
	if (!current)
		return TPU__CU_ERROR_INVALID_CONTEXT;
	return sticky;
}

API CUresult cuInit(unsigned int flags)
{
	const char *v = getenv("TPU_CUDA_STANDIN_DEVICES");
	const char *d = getenv("TPU_CUDA_STANDIN_DELAY_US");

	if (flags)
		return TPU__CU_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	ndev = v ? atoi(v) : 2;
	if (ndev < 0 || ndev > DEVICES_MAX)
		ndev = 0;
	if (d)
		delay_us = atol(d);
	for (int i = 0; i < DEVICES_MAX; i++)
		contexts[i].dev = i;
	initialised = true;
	pthread_mutex_unlock(&lock);
	return 0;
}

API CUresult cuDeviceGetCount(int *n)
{
	if (!initialised)
		return TPU__CU_ERROR_NOT_INITIALIZED;
	if (!n)
		return TPU__CU_ERROR_INVALID_VALUE;
	*n = ndev;
	return 0;
}

API CUresult cuDeviceGet(tpu__cu_dev *d, int ordinal)
{
	if (!initialised)
		return TPU__CU_ERROR_NOT_INITIALIZED;
	if (!d)
		return TPU__CU_ERROR_INVALID_VALUE;
	if (ordinal < 0 || ordinal >= ndev)
		return TPU__CU_ERROR_INVALID_DEVICE;
	*d = ordinal;
	return 0;
}

API CUresult cuDevicePrimaryCtxRetain(tpu__cu_ctx *c, tpu__cu_dev d)
{
	if (!initialised)
		return TPU__CU_ERROR_NOT_INITIALIZED;
	if (!c)
		return TPU__CU_ERROR_INVALID_VALUE;
	if (d < 0 || d >= ndev)
		return TPU__CU_ERROR_INVALID_DEVICE;
	*c = &contexts[d];
	return 0;
}

API CUresult cuDevicePrimaryCtxRelease_v2(tpu__cu_dev d)
{
	if (!initialised)
		return TPU__CU_ERROR_NOT_INITIALIZED;
	return d < 0 || d >= ndev ? TPU__CU_ERROR_INVALID_DEVICE : 0;
}

API CUresult cuCtxSetCurrent(tpu__cu_ctx c)
{
	if (!initialised)
		return TPU__CU_ERROR_NOT_INITIALIZED;
	if (c && (c < contexts || c >= contexts + ndev))
		return TPU__CU_ERROR_INVALID_CONTEXT;
	current = c;
	return 0;
}

API CUresult cuCtxGetCurrent(tpu__cu_ctx *c)
{
	if (!initialised)
		return TPU__CU_ERROR_NOT_INITIALIZED;
	if (!c)
		return TPU__CU_ERROR_INVALID_VALUE;
	*c = current;
	return 0;
}

/* lock held: map @fd of @size bytes as device memory of @dev. */
static CUresult map_alloc(int fd, size_t size, int dev, bool ipc, uintptr_t *out)
{
	struct alloc *a = calloc(1, sizeof(*a));
	void *dp, *sh;

	if (!a)
		return TPU__CU_ERROR_OUT_OF_MEMORY;
	dp = mmap(NULL, size, PROT_NONE, MAP_SHARED, fd, 0);
	sh = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (dp == MAP_FAILED || sh == MAP_FAILED) {
		if (dp != MAP_FAILED)
			munmap(dp, size);
		if (sh != MAP_FAILED)
			munmap(sh, size);
		free(a);
		return TPU__CU_ERROR_OUT_OF_MEMORY;
	}
	*a = (struct alloc){ .next = allocs, .base = (uintptr_t)dp, .size = size, .fd = fd,
			     .shadow = sh, .dev = dev, .ipc = ipc };
	allocs = a;
	*out = a->base;
	return 0;
}

/* lock held: unlink @a and drop all but its device-side mapping. */
static void unlink_alloc(struct alloc *a)
{
	for (struct alloc **pp = &allocs; *pp; pp = &(*pp)->next) {
		if (*pp == a) {
			*pp = a->next;
			break;
		}
	}
	munmap(a->shadow, a->size);
	close(a->fd);
	free(a);
}

/* lock held: unlink and unmap @a. */
static void unmap_alloc(struct alloc *a)
{
	munmap((void *)a->base, a->size);
	unlink_alloc(a);
}

API CUresult cuMemAlloc_v2(tpu__cu_ptr *p, size_t len)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), size;
	uintptr_t base;
	CUresult r;
	int fd;

	pthread_mutex_lock(&lock);
	r = ready();
	if (!r && (!p || !len))
		r = TPU__CU_ERROR_INVALID_VALUE;
	if (r)
		goto out;
	size = (len + page - 1) / page * page;
	/* Sealed against shrinking, as udmabuf requires of the memfds it exports. */
	fd = memfd_create("cuda-standin", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, (off_t)size) || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK)) {
		if (fd >= 0)
			close(fd);
		r = TPU__CU_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	r = map_alloc(fd, size, current->dev, false, &base);
	if (r)
		close(fd);
	else
		*p = base;
out:
	pthread_mutex_unlock(&lock);
	return r;
}

API CUresult cuMemFree_v2(tpu__cu_ptr p)
{
	struct alloc *a;
	CUresult r;

	pthread_mutex_lock(&lock);
	r = ready();
	if (!r)
		null_drain_all();
	a = r ? NULL : find((uintptr_t)p, 1);
	if (!r && (!a || a->base != p || a->ipc || a->phys))
		r = TPU__CU_ERROR_INVALID_VALUE;	/* not an allocation, or freed already */
	if (!r)
		unmap_alloc(a);
	pthread_mutex_unlock(&lock);
	return r;
}

API CUresult cuMemGetAddressRange_v2(tpu__cu_ptr *base, size_t *len, tpu__cu_ptr p)
{
	struct alloc *a;
	CUresult r;

	pthread_mutex_lock(&lock);
	r = ready();
	a = r ? NULL : find((uintptr_t)p, 1);
	if (!r && !a)
		r = TPU__CU_ERROR_INVALID_VALUE;
	if (!r) {
		if (base)
			*base = a->base;
		if (len)
			*len = a->size;
	}
	pthread_mutex_unlock(&lock);
	return r;
}

API CUresult cuMemHostAlloc(void **p, size_t len, unsigned int flags)
{
	struct host *h;
	CUresult r;

	(void)flags;
	pthread_mutex_lock(&lock);
	r = ready();
	if (!r && (!p || !len))
		r = TPU__CU_ERROR_INVALID_VALUE;
	h = r ? NULL : calloc(1, sizeof(*h));
	if (!r && h) {
		h->p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (h->p == MAP_FAILED) {
			free(h);
			h = NULL;
		}
	}
	if (!r && !h)
		r = TPU__CU_ERROR_OUT_OF_MEMORY;
	if (!r) {
		h->size = len;
		h->next = hosts;
		hosts = h;
		*p = h->p;
	}
	pthread_mutex_unlock(&lock);
	return r;
}

API CUresult cuMemFreeHost(void *p)
{
	CUresult r = TPU__CU_ERROR_INVALID_VALUE;

	pthread_mutex_lock(&lock);
	if (!initialised)
		r = TPU__CU_ERROR_NOT_INITIALIZED;
	for (struct host **pp = &hosts; initialised && *pp; pp = &(*pp)->next) {
		struct host *h = *pp;

		if (h->p == p) {
			*pp = h->next;
			munmap(h->p, h->size);
			free(h);
			r = 0;
			break;
		}
	}
	pthread_mutex_unlock(&lock);
	return r;
}

/* lock held: check a copy's sides; 0 or the driver's error. */
static bool usable(const struct alloc *a)
{
	return !a->phys || a->access;
}

static CUresult copy_check(uintptr_t dst, bool dst_dev, uintptr_t src, bool src_dev, size_t len)
{
	CUresult r = ready();

	if (r)
		return r;
	if (dst_dev ? !find(dst, len) : host_bad((void *)dst, len))
		return TPU__CU_ERROR_INVALID_VALUE;
	if (src_dev ? !find(src, len) : host_bad((void *)src, len))
		return TPU__CU_ERROR_INVALID_VALUE;
	/* A VMM mapping nobody gave access to faults on the device. */
	if ((dst_dev && len && !usable(find(dst, len))) || (src_dev && len && !usable(find(src, len))))
		return TPU__CU_ERROR_ILLEGAL_ADDRESS;
	return 0;
}

/* lock held: do the copy through the read-write mappings. */
static CUresult copy_now(uintptr_t dst, bool dst_dev, uintptr_t src, bool src_dev, size_t len)
{
	char *d = (char *)dst;
	const char *s = (const char *)src;

	if (dst_dev) {
		struct alloc *a = find(dst, len);

		if (!a)
			return TPU__CU_ERROR_ILLEGAL_ADDRESS;
		d = a->shadow + (dst - a->base);
	}
	if (src_dev) {
		struct alloc *a = find(src, len);

		if (!a)
			return TPU__CU_ERROR_ILLEGAL_ADDRESS;
		s = a->shadow + (src - a->base);
	}
	if (len)
		memmove(d, s, len);
	return 0;
}

/* ---- streams and events -------------------------------------------- */

/*
 * lock held: free a destroyed event or stream later, so that a handle used
 * after its destroy still reads as dead (CUDA_ERROR_INVALID_HANDLE) instead
 * of reading freed memory: the last QUARANTINE of them are kept.
 */
#define QUARANTINE	1024
static void *quarantine[QUARANTINE];
static unsigned int quarantine_next;

static void bury(void *obj)
{
	free(quarantine[quarantine_next]);
	quarantine[quarantine_next] = obj;
	quarantine_next = (quarantine_next + 1) % QUARANTINE;
}

static void event_put(struct CUevent_st *e)
{
	if (--e->refs == 0) {
		e->magic = 0;
		bury(e);
	}
}

static void *stream_main(void *arg)
{
	struct CUstream_st *s = arg;

	pthread_mutex_lock(&lock);
	for (;;) {
		struct op *o;

		while (!s->head && !s->stop)
			pthread_cond_wait(&s->cond, &lock);
		if (!s->head)
			break;
		o = s->head;
		s->busy = true;
		if (o->kind == OP_COPY) {
			CUresult r;

			long us = delay_us * (long)o->lag;

			/* Slow "hardware": whoever does not wait reads stale bytes. */
			pthread_mutex_unlock(&lock);
			if (us > 0)
				nanosleep(&(struct timespec){ us / 1000000, (us % 1000000) * 1000 },
					  NULL);
			pthread_mutex_lock(&lock);
			r = copy_now(o->dst, o->dst_dev, o->src, o->src_dev, o->len);
			if (r && !sticky)
				sticky = r;
			free(o->owned);
		} else if (o->kind == OP_RECORD) {
			if (o->ev->completed < o->gen)
				o->ev->completed = o->gen;
			pthread_cond_broadcast(&ev_cond);
		} else {
			while (o->ev->completed < o->gen)
				pthread_cond_wait(&ev_cond, &lock);
		}
		s->head = o->next;
		if (!s->head)
			s->tail = &s->head;
		if (o->ev)
			event_put(o->ev);
		free(o);
		s->busy = false;
		pthread_cond_broadcast(&s->cond);
	}
	pthread_mutex_unlock(&lock);
	return NULL;
}

/* lock held: a stream handle of the current context, not NULL. */
static CUresult stream_ok(struct CUstream_st *s)
{
	if (s->magic != STREAM_MAGIC)
		return TPU__CU_ERROR_INVALID_HANDLE;
	return s->dev == current->dev ? 0 : TPU__CU_ERROR_INVALID_CONTEXT;
}

/* lock held: a new stream of device @dev, its worker started. */
static CUresult stream_new(int dev, struct CUstream_st **out)
{
	struct CUstream_st *s = calloc(1, sizeof(*s));

	if (!s)
		return TPU__CU_ERROR_OUT_OF_MEMORY;
	s->magic = STREAM_MAGIC;
	s->dev = dev;
	s->tail = &s->head;
	pthread_cond_init(&s->cond, NULL);
	if (pthread_create(&s->thread, NULL, stream_main, s)) {
		pthread_cond_destroy(&s->cond);
		free(s);
		return TPU__CU_ERROR_OUT_OF_MEMORY;
	}
	*out = s;
	return 0;
}

/*
 * lock held, ready(): the stream handle @s names in the current context;
 * NULL names the context's NULL stream, made on first use.
 */
static CUresult stream_of(struct CUstream_st *s, struct CUstream_st **out)
{
	CUresult r = 0;

	if (s) {
		r = stream_ok(s);
	} else {
		if (!null_streams[current->dev])
			r = stream_new(current->dev, &null_streams[current->dev]);
		s = null_streams[current->dev];
	}
	if (!r)
		*out = s;
	return r;
}

static void enqueue(struct CUstream_st *s, struct op *o)
{
	*s->tail = o;
	s->tail = &o->next;
	pthread_cond_broadcast(&s->cond);
}

API CUresult cuStreamCreate(tpu__cu_stream *out, unsigned int flags)
{
	struct CUstream_st *s;
	CUresult r;

	(void)flags;
	pthread_mutex_lock(&lock);
	r = ready();
	if (!r && !out)
		r = TPU__CU_ERROR_INVALID_VALUE;
	if (!r)
		r = stream_new(current->dev, &s);
	if (!r)
		*out = s;
	pthread_mutex_unlock(&lock);
	return r;
}

/* lock held: wait until @s ran everything queued. */
static void stream_drain(struct CUstream_st *s)
{
	while (s->head || s->busy)
		pthread_cond_wait(&s->cond, &lock);
}

/* lock held: the NULL streams of all devices ran what was queued (a free's wait). */
static void null_drain_all(void)
{
	for (int i = 0; i < DEVICES_MAX; i++)
		if (null_streams[i])
			stream_drain(null_streams[i]);
}

API CUresult cuStreamSynchronize(tpu__cu_stream s)
{
	CUresult r;

	pthread_mutex_lock(&lock);
	r = ready();
	if (!r)
		r = stream_of(s, &s);
	if (!r)
		stream_drain(s);
	if (!r)
		r = sticky;
	pthread_mutex_unlock(&lock);
	return r;
}

API CUresult cuStreamDestroy_v2(tpu__cu_stream s)
{
	CUresult r;

	pthread_mutex_lock(&lock);
	r = ready();
	if (!r)
		r = s ? stream_ok(s) : TPU__CU_ERROR_INVALID_HANDLE;
	if (!r) {
		/* The driver lets queued work finish first. */
		stream_drain(s);
		s->stop = true;
		s->magic = 0;
		pthread_cond_broadcast(&s->cond);
	}
	pthread_mutex_unlock(&lock);
	if (!r) {
		pthread_join(s->thread, NULL);
		pthread_mutex_lock(&lock);
		bury(s);
		pthread_mutex_unlock(&lock);
	}
	return r;
}

/*
 * lock held, copy_check() passed: queue a copy on @s, @lag delays late;
 * @owned (a staged source, or NULL) goes with it.
 */
static CUresult copy_queue(uintptr_t dst, bool dst_dev, uintptr_t src, bool src_dev, size_t len,
			   struct CUstream_st *s, unsigned int lag, void *owned)
{
	struct op *o = calloc(1, sizeof(*o));

	if (!o)
		return TPU__CU_ERROR_OUT_OF_MEMORY;
	*o = (struct op){ .kind = OP_COPY, .dst = dst, .dst_dev = dst_dev, .src = src,
			  .src_dev = src_dev, .len = len, .lag = lag, .owned = owned };
	enqueue(s, o);
	return 0;
}

static CUresult copy_async(uintptr_t dst, bool dst_dev, uintptr_t src, bool src_dev, size_t len,
			   struct CUstream_st *s)
{
	CUresult r;

	pthread_mutex_lock(&lock);
	r = copy_check(dst, dst_dev, src, src_dev, len);
	if (!r)
		r = stream_of(s, &s);
	if (!r)
		r = copy_queue(dst, dst_dev, src, src_dev, len, s, 1, NULL);
	pthread_mutex_unlock(&lock);
	return r;
}

/* lock held: whether [p, p + len) lies in page-locked memory of cuMemHostAlloc. */
static bool pinned(const void *p, size_t len)
{
	for (struct host *h = hosts; h; h = h->next)
		if ((uintptr_t)p - (uintptr_t)h->p < h->size &&
		    len <= h->size - ((uintptr_t)p - (uintptr_t)h->p))
			return true;
	return false;
}

/*
 * The synchronous copies, as "API synchronization behavior" describes
 * them.  Host to device from pageable memory: the NULL stream's work
 * first, then the source is staged and the call returns; the device
 * write lands later, on the NULL stream.  From page-locked memory, and
 * device to host: the NULL stream's work first, then the copy, done on
 * return.  (Device to device: copy_async on the NULL stream.)
 */
static CUresult copy_sync(uintptr_t dst, bool dst_dev, uintptr_t src, bool src_dev, size_t len)
{
	struct CUstream_st *s = NULL;
	void *staged = NULL;
	CUresult r;

	pthread_mutex_lock(&lock);
	r = ready();
	if (!r)
		r = stream_of(NULL, &s);
	if (!r) {
		stream_drain(s);
		r = copy_check(dst, dst_dev, src, src_dev, len);
	}
	if (!r && dst_dev && !src_dev && !pinned((const void *)src, len)) {
		staged = malloc(len ? len : 1);
		if (!staged) {
			r = TPU__CU_ERROR_OUT_OF_MEMORY;
		} else {
			memcpy(staged, (const void *)src, len);
			r = copy_queue(dst, true, (uintptr_t)staged, false, len, s, PAGEABLE_LAG,
				       staged);
			if (r)
				free(staged);
		}
	} else if (!r) {
		r = copy_now(dst, dst_dev, src, src_dev, len);
	}
	pthread_mutex_unlock(&lock);
	return r;
}

API CUresult cuMemcpyHtoD_v2(tpu__cu_ptr d, const void *s, size_t n)
{
	return copy_sync((uintptr_t)d, true, (uintptr_t)s, false, n);
}

API CUresult cuMemcpyDtoH_v2(void *d, tpu__cu_ptr s, size_t n)
{
	return copy_sync((uintptr_t)d, false, (uintptr_t)s, true, n);
}

API CUresult cuMemcpyDtoD_v2(tpu__cu_ptr d, tpu__cu_ptr s, size_t n)
{
	return copy_async((uintptr_t)d, true, (uintptr_t)s, true, n, NULL);
}

API CUresult cuMemcpyHtoDAsync_v2(tpu__cu_ptr d, const void *src, size_t n, tpu__cu_stream s)
{
	return copy_async((uintptr_t)d, true, (uintptr_t)src, false, n, s);
}

API CUresult cuMemcpyDtoHAsync_v2(void *d, tpu__cu_ptr src, size_t n, tpu__cu_stream s)
{
	return copy_async((uintptr_t)d, false, (uintptr_t)src, true, n, s);
}

API CUresult cuMemcpyDtoDAsync_v2(tpu__cu_ptr d, tpu__cu_ptr src, size_t n, tpu__cu_stream s)
{
	return copy_async((uintptr_t)d, true, (uintptr_t)src, true, n, s);
}

API CUresult cuEventCreate(tpu__cu_event *out, unsigned int flags)
{
	struct CUevent_st *e;
	CUresult r;

	(void)flags;
	pthread_mutex_lock(&lock);
	r = ready();
	if (!r && !out)
		r = TPU__CU_ERROR_INVALID_VALUE;
	e = r ? NULL : calloc(1, sizeof(*e));
	if (!r && !e)
		r = TPU__CU_ERROR_OUT_OF_MEMORY;
	if (!r) {
		e->magic = EVENT_MAGIC;
		e->refs = 1;
		*out = e;
	}
	pthread_mutex_unlock(&lock);
	return r;
}

static CUresult event_ok(struct CUevent_st *e)
{
	CUresult r = ready();

	if (!r && (!e || e->magic != EVENT_MAGIC))
		r = TPU__CU_ERROR_INVALID_HANDLE;
	return r;
}

API CUresult cuEventDestroy_v2(tpu__cu_event e)
{
	CUresult r;

	pthread_mutex_lock(&lock);
	r = event_ok(e);
	if (!r) {
		/* Queued records and waits keep it until they ran. */
		e->magic = e->refs > 1 ? 0xdeadu : 0;
		event_put(e);
	}
	pthread_mutex_unlock(&lock);
	return r;
}

API CUresult cuEventRecord(tpu__cu_event e, tpu__cu_stream s)
{
	struct op *o;
	CUresult r;

	pthread_mutex_lock(&lock);
	r = event_ok(e);
	if (!r)
		r = stream_of(s, &s);
	if (!r) {
		o = calloc(1, sizeof(*o));
		if (!o) {
			r = TPU__CU_ERROR_OUT_OF_MEMORY;
		} else {
			*o = (struct op){ .kind = OP_RECORD, .ev = e, .gen = ++e->recorded };
			e->refs++;
			enqueue(s, o);
		}
	}
	pthread_mutex_unlock(&lock);
	return r;
}

API CUresult cuEventQuery(tpu__cu_event e)
{
	CUresult r;

	pthread_mutex_lock(&lock);
	r = event_ok(e);
	if (!r && e->completed < e->recorded)
		r = TPU__CU_ERROR_NOT_READY;
	pthread_mutex_unlock(&lock);
	return r;
}

API CUresult cuEventSynchronize(tpu__cu_event e)
{
	CUresult r;

	pthread_mutex_lock(&lock);
	r = event_ok(e);
	if (!r) {
		uint64_t gen = e->recorded;

		while (e->completed < gen)
			pthread_cond_wait(&ev_cond, &lock);
		r = sticky;
	}
	pthread_mutex_unlock(&lock);
	return r;
}

API CUresult cuStreamWaitEvent(tpu__cu_stream s, tpu__cu_event e, unsigned int flags)
{
	struct op *o;
	CUresult r;

	pthread_mutex_lock(&lock);
	r = event_ok(e);
	if (!r)
		r = stream_of(s, &s);
	if (!r && flags)
		r = TPU__CU_ERROR_INVALID_VALUE;
	if (!r && e->completed < e->recorded) {
		o = calloc(1, sizeof(*o));
		if (!o) {
			r = TPU__CU_ERROR_OUT_OF_MEMORY;
		} else {
			*o = (struct op){ .kind = OP_WAIT, .ev = e, .gen = e->recorded };
			e->refs++;
			enqueue(s, o);
		}
	}
	pthread_mutex_unlock(&lock);
	return r;
}

/* ---- pointers and IPC ---------------------------------------------- */

API CUresult cuPointerGetAttribute(void *out, tpu__cu_ptr_attr attr, tpu__cu_ptr p)
{
	struct alloc *a;
	CUresult r;

	pthread_mutex_lock(&lock);
	r = initialised ? (out ? 0 : TPU__CU_ERROR_INVALID_VALUE) : TPU__CU_ERROR_NOT_INITIALIZED;
	a = r ? NULL : find((uintptr_t)p, 1);
	if (!r && !a) {
		bool host = false;

		for (struct host *h = hosts; h; h = h->next)
			host |= (uintptr_t)p - (uintptr_t)h->p < h->size;
		if (host && attr == TPU__CU_PTR_ATTR_MEMORY_TYPE)
			*(unsigned int *)out = TPU__CU_MEMORYTYPE_HOST;
		else
			r = TPU__CU_ERROR_INVALID_VALUE;
	} else if (!r) {
		if (attr == TPU__CU_PTR_ATTR_MEMORY_TYPE)
			*(unsigned int *)out = TPU__CU_MEMORYTYPE_DEVICE;
		else if (attr == TPU__CU_PTR_ATTR_DEVICE_ORDINAL)
			*(int *)out = a->dev;
		else if (attr == TPU__CU_PTR_ATTR_CONTEXT)
			*(tpu__cu_ctx *)out = &contexts[a->dev];
		else
			r = TPU__CU_ERROR_INVALID_VALUE;
	}
	pthread_mutex_unlock(&lock);
	return r;
}

struct ipc_words {
	uint32_t magic;
	uint32_t pid;
	int32_t fd;
	int32_t dev;
	uint64_t size;
};
_Static_assert(sizeof(struct ipc_words) <= sizeof(tpu__cu_ipc_handle), "fits a handle");

API CUresult cuIpcGetMemHandle(tpu__cu_ipc_handle *h, tpu__cu_ptr p)
{
	struct alloc *a;
	CUresult r;

	pthread_mutex_lock(&lock);
	r = ready();
	a = r ? NULL : find((uintptr_t)p, 1);
	/* VMM memory has no legacy IPC handle. */
	if (!r && (!h || !a || a->base != p || a->ipc || a->phys))
		r = TPU__CU_ERROR_INVALID_VALUE;
	if (!r) {
		struct ipc_words w = { IPC_MAGIC, (uint32_t)getpid(), a->fd, a->dev, a->size };

		memset(h, 0, sizeof(*h));
		memcpy(h, &w, sizeof(w));
	}
	pthread_mutex_unlock(&lock);
	return r;
}

API CUresult cuIpcOpenMemHandle_v2(tpu__cu_ptr *p, tpu__cu_ipc_handle h, unsigned int flags)
{
	struct ipc_words w;
	char path[64];
	struct stat sb;
	uintptr_t base;
	CUresult r;
	int fd = -1;

	(void)flags;
	memcpy(&w, &h, sizeof(w));
	pthread_mutex_lock(&lock);
	r = ready();
	if (!r && (!p || w.magic != IPC_MAGIC))
		r = TPU__CU_ERROR_INVALID_VALUE;
	/* As the driver: a process cannot open its own handles. */
	if (!r && w.pid == (uint32_t)getpid())
		r = TPU__CU_ERROR_INVALID_CONTEXT;
	if (!r) {
		snprintf(path, sizeof(path), "/proc/%u/fd/%d", w.pid, w.fd);
		fd = open(path, O_RDWR | O_CLOEXEC);
		if (fd < 0 || fstat(fd, &sb) || (uint64_t)sb.st_size != w.size)
			r = TPU__CU_ERROR_INVALID_HANDLE;
	}
	if (!r)
		r = map_alloc(fd, (size_t)w.size, current->dev, true, &base);
	if (r) {
		if (fd >= 0)
			close(fd);
	} else {
		*p = base;
		live_ipc++;
		opened_ipc++;
	}
	pthread_mutex_unlock(&lock);
	return r;
}

API CUresult cuIpcCloseMemHandle(tpu__cu_ptr p)
{
	struct alloc *a;
	CUresult r;

	pthread_mutex_lock(&lock);
	r = ready();
	if (!r)
		null_drain_all();
	a = r ? NULL : find((uintptr_t)p, 1);
	if (!r && (!a || !a->ipc || a->base != p))
		r = TPU__CU_ERROR_INVALID_VALUE;	/* never opened, or closed already */
	if (!r) {
		unmap_alloc(a);
		live_ipc--;
	}
	pthread_mutex_unlock(&lock);
	return r;
}

/* lock held: a udmabuf over [off, off + size) of @memfd, or why not. */
static CUresult udmabuf_over(int memfd, uint64_t off, size_t size, int *out)
{
	struct udmabuf_create c = { .memfd = (uint32_t)memfd, .flags = UDMABUF_FLAGS_CLOEXEC,
				    .offset = off, .size = size };
	const char *env = getenv("TPU_CUDA_STANDIN_DMABUF");
	int dev, fd, err;

	if (env && !strcmp(env, "0"))
		return TPU__CU_ERROR_NOT_SUPPORTED;
	dev = open("/dev/udmabuf", O_RDWR | O_CLOEXEC);
	if (dev < 0)
		return TPU__CU_ERROR_NOT_SUPPORTED;
	fd = ioctl(dev, UDMABUF_CREATE, &c);
	err = errno;
	close(dev);
	if (fd < 0) {
		/* udmabuf caps a buffer's size (its size_limit_mb parameter, 64 by default). */
		fprintf(stderr, "cuda stand-in: UDMABUF_CREATE of %zu bytes: %s\n", size,
			strerror(err));
		return err == ENOMEM ? TPU__CU_ERROR_OUT_OF_MEMORY : TPU__CU_ERROR_INVALID_VALUE;
	}
	*out = fd;
	return 0;
}

/* Page-aligned ranges of one allocation, as the driver requires. */
API CUresult cuMemGetHandleForAddressRange(void *handle, tpu__cu_ptr p, size_t size,
					   tpu__cu_range_handle_type type,
					   unsigned long long flags)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	struct alloc *a;
	CUresult r;

	pthread_mutex_lock(&lock);
	r = ready();
	a = r ? NULL : find((uintptr_t)p, size);
	if (!r && (!handle || !a || !size || type != TPU__CU_RANGE_HANDLE_DMA_BUF_FD || flags ||
		   p % page || size % page))
		r = TPU__CU_ERROR_INVALID_VALUE;
	if (!r)
		r = udmabuf_over(a->fd, (uint64_t)(p - a->base), size, handle);
	pthread_mutex_unlock(&lock);
	return r;
}

/* ---- VMM --------------------------------------------------------------- */

#define GRANULARITY	(2u << 20)

/* Counters for the tests: VMM allocations and reservations alive. */
API void tpu_cuda_standin_vmm_counts(unsigned long *allocations, unsigned long *reservations);
API void tpu_cuda_standin_vmm_counts(unsigned long *allocations, unsigned long *reservations)
{
	unsigned long n = 0, m = 0;

	pthread_mutex_lock(&lock);
	for (struct phys *ph = physs; ph; ph = ph->next)
		n++;
	for (struct resv *rv = resvs; rv; rv = rv->next)
		m++;
	*allocations = n;
	*reservations = m;
	pthread_mutex_unlock(&lock);
}

/* lock held */
static struct phys *phys_find(unsigned long long id)
{
	for (struct phys *ph = physs; ph; ph = ph->next)
		if (ph->id == id)
			return ph;
	return NULL;
}

/* lock held: free @ph once no handle and no mapping holds it. */
static void phys_put(struct phys *ph)
{
	if (ph->refs || ph->maps)
		return;
	for (struct phys **pp = &physs; *pp; pp = &(*pp)->next) {
		if (*pp == ph) {
			*pp = ph->next;
			break;
		}
	}
	close(ph->fd);
	free(ph);
}

/* lock held */
static CUresult phys_new(int fd, size_t size, int dev, bool fd_ok, unsigned long long *out)
{
	struct phys *ph = calloc(1, sizeof(*ph));

	if (!ph)
		return TPU__CU_ERROR_OUT_OF_MEMORY;
	*ph = (struct phys){ .next = physs, .id = next_phys++, .fd = fd, .size = size, .dev = dev,
			     .fd_ok = fd_ok, .refs = 1 };
	physs = ph;
	*out = ph->id;
	return 0;
}

/* lock held: the reservation holding [p, p + size), or NULL. */
static struct resv *resv_find(uintptr_t p, size_t size)
{
	for (struct resv *rv = resvs; rv; rv = rv->next)
		if (p >= rv->base && p - rv->base < rv->size && size <= rv->size - (p - rv->base))
			return rv;
	return NULL;
}

static bool prop_ok(const tpu__cu_mem_prop *prop)
{
	return prop && prop->type == TPU__CU_MEM_PINNED &&
	       prop->location.type == TPU__CU_LOCATION_DEVICE && prop->location.id >= 0 &&
	       prop->location.id < ndev && !(prop->handle_types & ~TPU__CU_HANDLE_POSIX_FD);
}

API CUresult cuMemGetAllocationGranularity(size_t *g, const tpu__cu_mem_prop *prop,
					   tpu__cu_granularity option)
{
	CUresult r;

	pthread_mutex_lock(&lock);
	r = initialised ? 0 : TPU__CU_ERROR_NOT_INITIALIZED;
	if (!r && (!g || !prop_ok(prop) || option > 1))
		r = TPU__CU_ERROR_INVALID_VALUE;
	if (!r)
		*g = GRANULARITY;
	pthread_mutex_unlock(&lock);
	return r;
}

API CUresult cuMemCreate(tpu__cu_mem_handle *h, size_t size, const tpu__cu_mem_prop *prop,
			 unsigned long long flags)
{
	CUresult r;
	int fd;

	pthread_mutex_lock(&lock);
	r = ready();
	if (!r && (!h || !size || size % GRANULARITY || !prop_ok(prop) || flags))
		r = TPU__CU_ERROR_INVALID_VALUE;
	if (r)
		goto out;
	fd = memfd_create("cuda-standin-vmm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, (off_t)size) || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK)) {
		if (fd >= 0)
			close(fd);
		r = TPU__CU_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	r = phys_new(fd, size, prop->location.id, prop->handle_types & TPU__CU_HANDLE_POSIX_FD, h);
	if (r)
		close(fd);
out:
	pthread_mutex_unlock(&lock);
	return r;
}

API CUresult cuMemRelease(tpu__cu_mem_handle h)
{
	struct phys *ph;
	CUresult r;

	pthread_mutex_lock(&lock);
	r = initialised ? 0 : TPU__CU_ERROR_NOT_INITIALIZED;
	ph = r ? NULL : phys_find(h);
	if (!r && (!ph || !ph->refs))
		r = TPU__CU_ERROR_INVALID_VALUE;
	if (!r) {
		ph->refs--;
		phys_put(ph);
	}
	pthread_mutex_unlock(&lock);
	return r;
}

API CUresult cuMemAddressReserve(tpu__cu_ptr *p, size_t size, size_t align, tpu__cu_ptr addr,
				 unsigned long long flags)
{
	struct resv *rv = NULL;
	void *m = MAP_FAILED;
	CUresult r;

	pthread_mutex_lock(&lock);
	r = initialised ? 0 : TPU__CU_ERROR_NOT_INITIALIZED;
	/* Alignments above a page and fixed addresses are not modelled. */
	if (!r && (!p || !size || size % GRANULARITY || (align && align % GRANULARITY) || addr ||
		   flags))
		r = TPU__CU_ERROR_INVALID_VALUE;
	if (!r) {
		rv = calloc(1, sizeof(*rv));
		m = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (!rv || m == MAP_FAILED) {
			if (m != MAP_FAILED)
				munmap(m, size);
			free(rv);
			r = TPU__CU_ERROR_OUT_OF_MEMORY;
		}
	}
	if (!r) {
		*rv = (struct resv){ .next = resvs, .base = (uintptr_t)m, .size = size };
		resvs = rv;
		*p = rv->base;
	}
	pthread_mutex_unlock(&lock);
	return r;
}

API CUresult cuMemAddressFree(tpu__cu_ptr p, size_t size)
{
	struct resv *rv;
	CUresult r;

	pthread_mutex_lock(&lock);
	r = initialised ? 0 : TPU__CU_ERROR_NOT_INITIALIZED;
	rv = r ? NULL : resv_find((uintptr_t)p, size);
	if (!r && (!rv || rv->base != p || rv->size != size))
		r = TPU__CU_ERROR_INVALID_VALUE;
	/* Still mapped: the driver wants cuMemUnmap first. */
	for (struct alloc *a = allocs; !r && a; a = a->next)
		if (a->base < rv->base + rv->size && a->base + a->size > rv->base)
			r = TPU__CU_ERROR_INVALID_VALUE;
	if (!r) {
		for (struct resv **pp = &resvs; *pp; pp = &(*pp)->next) {
			if (*pp == rv) {
				*pp = rv->next;
				break;
			}
		}
		munmap((void *)rv->base, rv->size);
		free(rv);
	}
	pthread_mutex_unlock(&lock);
	return r;
}

API CUresult cuMemMap(tpu__cu_ptr p, size_t size, size_t offset, tpu__cu_mem_handle h,
		      unsigned long long flags)
{
	struct phys *ph;
	struct alloc *a = NULL;
	void *dp = MAP_FAILED, *sh = MAP_FAILED;
	int fd = -1;
	CUresult r;

	pthread_mutex_lock(&lock);
	r = initialised ? 0 : TPU__CU_ERROR_NOT_INITIALIZED;
	ph = r ? NULL : phys_find(h);
	/* The driver maps whole allocations, at offset 0, into reserved space. */
	if (!r && (!ph || !ph->refs || offset || flags || size != ph->size ||
		   !resv_find((uintptr_t)p, size) || find((uintptr_t)p, 1)))
		r = TPU__CU_ERROR_INVALID_VALUE;
	if (!r) {
		a = calloc(1, sizeof(*a));
		fd = dup(ph->fd);
		if (a && fd >= 0)
			dp = mmap((void *)(uintptr_t)p, size, PROT_NONE, MAP_SHARED | MAP_FIXED,
				  fd, 0);
		if (dp != MAP_FAILED)
			sh = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (sh == MAP_FAILED) {
			/* Put the reservation back as it was. */
			if (dp != MAP_FAILED)
				mmap((void *)(uintptr_t)p, size, PROT_NONE,
				     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
			if (fd >= 0)
				close(fd);
			free(a);
			r = TPU__CU_ERROR_OUT_OF_MEMORY;
		}
	}
	if (!r) {
		*a = (struct alloc){ .next = allocs, .base = (uintptr_t)p, .size = size, .fd = fd,
				     .shadow = sh, .dev = ph->dev, .phys = ph };
		allocs = a;
		ph->maps++;
	}
	pthread_mutex_unlock(&lock);
	return r;
}

API CUresult cuMemSetAccess(tpu__cu_ptr p, size_t size, const tpu__cu_mem_access *desc,
			    size_t count)
{
	struct alloc *a;
	CUresult r;

	pthread_mutex_lock(&lock);
	r = initialised ? 0 : TPU__CU_ERROR_NOT_INITIALIZED;
	a = r ? NULL : find((uintptr_t)p, size);
	if (!r && (!a || !a->phys || a->base != p || a->size != size || !desc || count != 1 ||
		   desc->location.type != TPU__CU_LOCATION_DEVICE || desc->location.id < 0 ||
		   desc->location.id >= ndev || desc->flags != TPU__CU_ACCESS_READWRITE))
		r = TPU__CU_ERROR_INVALID_VALUE;
	if (!r)
		a->access = true;
	pthread_mutex_unlock(&lock);
	return r;
}

API CUresult cuMemUnmap(tpu__cu_ptr p, size_t size)
{
	struct alloc *a;
	struct phys *ph;
	CUresult r;

	pthread_mutex_lock(&lock);
	r = initialised ? 0 : TPU__CU_ERROR_NOT_INITIALIZED;
	if (!r)
		null_drain_all();
	a = r ? NULL : find((uintptr_t)p, size);
	if (!r && (!a || !a->phys || a->base != p || a->size != size))
		r = TPU__CU_ERROR_INVALID_VALUE;
	if (!r) {
		ph = a->phys;
		/* The range stays reserved: empty address space replaces the mapping. */
		mmap((void *)(uintptr_t)p, size, PROT_NONE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
		unlink_alloc(a);
		ph->maps--;
		phys_put(ph);
	}
	pthread_mutex_unlock(&lock);
	return r;
}

API CUresult cuMemExportToShareableHandle(void *shareable, tpu__cu_mem_handle h,
					  tpu__cu_handle_type type, unsigned long long flags)
{
	struct phys *ph;
	CUresult r;
	int fd;

	pthread_mutex_lock(&lock);
	r = initialised ? 0 : TPU__CU_ERROR_NOT_INITIALIZED;
	ph = r ? NULL : phys_find(h);
	if (!r && type != TPU__CU_HANDLE_POSIX_FD)
		r = TPU__CU_ERROR_NOT_SUPPORTED;
	/* Only what cuMemCreate was asked to make exportable as a descriptor. */
	if (!r && (!shareable || !ph || !ph->refs || !ph->fd_ok || flags))
		r = TPU__CU_ERROR_INVALID_VALUE;
	if (!r) {
		fd = fcntl(ph->fd, F_DUPFD_CLOEXEC, 0);
		if (fd < 0)
			r = TPU__CU_ERROR_OUT_OF_MEMORY;
		else
			*(int *)shareable = fd;
	}
	pthread_mutex_unlock(&lock);
	return r;
}

API CUresult cuMemImportFromShareableHandle(tpu__cu_mem_handle *h, void *os_handle,
					    tpu__cu_handle_type type)
{
	int fd = (int)(intptr_t)os_handle, mine = -1;
	struct stat sb;
	CUresult r;

	pthread_mutex_lock(&lock);
	r = ready();
	if (!r && type != TPU__CU_HANDLE_POSIX_FD)
		r = TPU__CU_ERROR_NOT_SUPPORTED;
	if (!r && (!h || fd < 0 || fstat(fd, &sb) || !S_ISREG(sb.st_mode) || !sb.st_size ||
		   sb.st_size % GRANULARITY))
		r = TPU__CU_ERROR_INVALID_VALUE;
	if (!r) {
		mine = fcntl(fd, F_DUPFD_CLOEXEC, 0);
		r = mine < 0 ? TPU__CU_ERROR_OUT_OF_MEMORY : 0;
	}
	if (!r)
		r = phys_new(mine, (size_t)sb.st_size, current->dev, true, h);
	if (r && mine >= 0)
		close(mine);
	pthread_mutex_unlock(&lock);
	return r;
}

API CUresult cuMemRetainAllocationHandle(tpu__cu_mem_handle *h, void *addr)
{
	struct alloc *a;
	CUresult r;

	pthread_mutex_lock(&lock);
	r = initialised ? 0 : TPU__CU_ERROR_NOT_INITIALIZED;
	a = r ? NULL : find((uintptr_t)addr, 1);
	/* cuMemAlloc's memory has no allocation handle. */
	if (!r && (!h || !a || !a->phys))
		r = TPU__CU_ERROR_INVALID_VALUE;
	if (!r) {
		a->phys->refs++;
		*h = a->phys->id;
	}
	pthread_mutex_unlock(&lock);
	return r;
}

API CUresult cuGetErrorString(CUresult r, const char **s)
{
	static const struct {
		CUresult r;
		const char *s;
	} names[] = {
		{ TPU__CU_SUCCESS, "no error" },
		{ TPU__CU_ERROR_INVALID_VALUE, "invalid argument" },
		{ TPU__CU_ERROR_OUT_OF_MEMORY, "out of memory" },
		{ TPU__CU_ERROR_NOT_INITIALIZED, "initialization error" },
		{ TPU__CU_ERROR_NO_DEVICE, "no CUDA-capable device is detected" },
		{ TPU__CU_ERROR_INVALID_DEVICE, "invalid device ordinal" },
		{ TPU__CU_ERROR_INVALID_CONTEXT, "invalid device context" },
		{ TPU__CU_ERROR_INVALID_HANDLE, "invalid resource handle" },
		{ TPU__CU_ERROR_NOT_READY, "device not ready" },
		{ TPU__CU_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered" },
		{ TPU__CU_ERROR_NOT_SUPPORTED, "operation not supported" },
	};

	if (!s)
		return TPU__CU_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (names[i].r == r) {
			*s = names[i].s;
			return 0;
		}
	}
	*s = NULL;
	return TPU__CU_ERROR_INVALID_VALUE;
}
