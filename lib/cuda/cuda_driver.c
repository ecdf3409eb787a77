// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The CUDA driver, loaded at run time (see cuda.h), and the few operations
 * the channels need: copies between host and device memory ordered after a
 * user's stream, page-locked staging memory, CUDA IPC handles.
 *
 * Each device gets the driver's primary context (retained once, never
 * released: the process may keep using it) and one stream of the
 * library's own, created on first use.  One lock serialises the copies of
 * all devices: the channels call from their contexts' threads, and the
 * copies of one stream must not interleave.
 *
 * A user's stream of NULL is the device's legacy default stream (CUDA's
 * stream 0), not "no stream": a synchronous cuMemcpyHtoD from pageable
 * memory, for one, returns before its bytes land there.  Our stream is
 * non-blocking, so nothing orders it after stream 0 implicitly: events
 * recorded on NULL do, as on any other stream.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda.h"
#include "base/base.h"

/* Most devices used; a larger ordinal is -ENODEV. */
#define CUDA_DEVICES_MAX	64
/* A copy goes in chunks of this many bytes, each queued behind the last. */
#define CUDA_CHUNK		(4u << 20)

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static struct tpu__cuda_api cuda;
static tpu_status cuda_status;
static char cuda_why[256];
static int cuda_ndev;
static bool cuda_vmm;		/* every VMM entry point resolved */

static pthread_mutex_t cuda_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	bool ready;
	tpu__cu_ctx ctx;
	tpu__cu_stream stream;
} cuda_dev[CUDA_DEVICES_MAX];

#define SYM(field, name) { offsetof(struct tpu__cuda_api, field), name, false }
#define OPT(field, name) { offsetof(struct tpu__cuda_api, field), name, true }
static const struct {
	size_t off;
	const char *name;
	bool optional;
} cuda_syms[] = {
	SYM(init, "cuInit"),
	SYM(device_get_count, "cuDeviceGetCount"),
	SYM(device_get, "cuDeviceGet"),
	SYM(primary_retain, "cuDevicePrimaryCtxRetain"),
	SYM(primary_release, "cuDevicePrimaryCtxRelease_v2"),
	SYM(ctx_set_current, "cuCtxSetCurrent"),
	SYM(ctx_get_current, "cuCtxGetCurrent"),
	SYM(mem_alloc, "cuMemAlloc_v2"),
	SYM(mem_free, "cuMemFree_v2"),
	SYM(mem_range, "cuMemGetAddressRange_v2"),
	SYM(host_alloc, "cuMemHostAlloc"),
	SYM(host_free, "cuMemFreeHost"),
	SYM(memcpy_htod, "cuMemcpyHtoD_v2"),
	SYM(memcpy_dtoh, "cuMemcpyDtoH_v2"),
	SYM(memcpy_dtod, "cuMemcpyDtoD_v2"),
	SYM(memcpy_htod_async, "cuMemcpyHtoDAsync_v2"),
	SYM(memcpy_dtoh_async, "cuMemcpyDtoHAsync_v2"),
	SYM(memcpy_dtod_async, "cuMemcpyDtoDAsync_v2"),
	SYM(stream_create, "cuStreamCreate"),
	SYM(stream_destroy, "cuStreamDestroy_v2"),
	SYM(stream_sync, "cuStreamSynchronize"),
	SYM(stream_wait_event, "cuStreamWaitEvent"),
	SYM(event_create, "cuEventCreate"),
	SYM(event_destroy, "cuEventDestroy_v2"),
	SYM(event_record, "cuEventRecord"),
	SYM(event_query, "cuEventQuery"),
	SYM(event_sync, "cuEventSynchronize"),
	SYM(pointer_attr, "cuPointerGetAttribute"),
	SYM(ipc_get, "cuIpcGetMemHandle"),
	SYM(ipc_open, "cuIpcOpenMemHandle_v2"),
	SYM(ipc_close, "cuIpcCloseMemHandle"),
	SYM(error_string, "cuGetErrorString"),
	OPT(range_handle, "cuMemGetHandleForAddressRange"),
	OPT(mem_create, "cuMemCreate"),
	OPT(mem_release, "cuMemRelease"),
	OPT(mem_granularity, "cuMemGetAllocationGranularity"),
	OPT(mem_reserve, "cuMemAddressReserve"),
	OPT(mem_unreserve, "cuMemAddressFree"),
	OPT(mem_map, "cuMemMap"),
	OPT(mem_unmap, "cuMemUnmap"),
	OPT(mem_set_access, "cuMemSetAccess"),
	OPT(mem_export, "cuMemExportToShareableHandle"),
	OPT(mem_import, "cuMemImportFromShareableHandle"),
	OPT(mem_retain, "cuMemRetainAllocationHandle"),
};
#undef SYM
#undef OPT

_Static_assert(sizeof(cuda_syms) / sizeof(cuda_syms[0]) ==
	       sizeof(struct tpu__cuda_api) / sizeof(void (*)(void)),
	       "a symbol per entry point");

static void cuda_load(void)
{
	const char *path = getenv("TPU_CUDA_DRIVER");
	void *h;
	int n = 0;
	tpu__cu_result r;

	cuda_status = TPU_E_NO_CUDA;
	if (!path || !*path)
		path = "libcuda.so.1";
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(cuda_why, sizeof(cuda_why), "no CUDA driver: %s", dlerror());
		goto out;
	}
	for (size_t i = 0; i < sizeof(cuda_syms) / sizeof(cuda_syms[0]); i++) {
		void *f = dlsym(h, cuda_syms[i].name);

		if (!f && cuda_syms[i].optional)
			continue;
		if (!f) {
			snprintf(cuda_why, sizeof(cuda_why), "CUDA driver %s lacks %s", path,
				 cuda_syms[i].name);
			dlclose(h);
			goto out;
		}
		/* POSIX: a function's address survives the trip through void *. */
		memcpy((char *)&cuda + cuda_syms[i].off, &f, sizeof(f));
	}
	cuda_vmm = cuda.mem_create && cuda.mem_release && cuda.mem_granularity && cuda.mem_reserve &&
		   cuda.mem_unreserve && cuda.mem_map && cuda.mem_unmap && cuda.mem_set_access &&
		   cuda.mem_export && cuda.mem_import && cuda.mem_retain;
	r = cuda.init(0);
	if (r == TPU__CU_SUCCESS)
		r = cuda.device_get_count(&n);
	if (r != TPU__CU_SUCCESS || n <= 0) {
		const char *s = NULL;

		if (r != TPU__CU_SUCCESS && cuda.error_string(r, &s) != TPU__CU_SUCCESS)
			s = NULL;
		snprintf(cuda_why, sizeof(cuda_why), "CUDA driver %s: %s", path,
			 r != TPU__CU_SUCCESS ? (s ? s : "cuInit failed") : "no GPU");
		/* The handle stays open: the driver may have started threads. */
		goto out;
	}
	cuda_ndev = n < CUDA_DEVICES_MAX ? n : CUDA_DEVICES_MAX;
	cuda_status = 0;
	snprintf(cuda_why, sizeof(cuda_why), "CUDA driver %s: %d device%s", path, n,
		 n == 1 ? "" : "s");
out:
	/* Said once: every later call answers from what was found here. */
	tpu__log_debug("cuda: %s", cuda_why);
}

tpu_status tpu__cuda_api(const struct tpu__cuda_api **api, const char **why)
{
	pthread_once(&cuda_once, cuda_load);
	if (why)
		*why = cuda_why;
	if (api)
		*api = cuda_status ? NULL : &cuda;
	return cuda_status;
}

unsigned int tpu__cuda_ndevices(void)
{
	return tpu__cuda_api(NULL, NULL) ? 0 : (unsigned int)cuda_ndev;
}

tpu_status tpu__cuda_check(tpu__cu_result r, const char *call)
{
	const char *s = NULL;

	if (r == TPU__CU_SUCCESS)
		return 0;
	if (cuda.error_string(r, &s) != TPU__CU_SUCCESS || !s)
		s = "unknown error";
	tpu__log_debug("cuda: %s: %s (%u)", call, s, (unsigned int)r);
	return TPU_E_CUDA;
}

/* The device's context current and its stream made; cuda_lock held. */
static tpu_status dev_enter_locked(uint32_t index)
{
	tpu__cu_dev d;
	tpu_status st;

	if (!cuda_dev[index].ready) {
		st = tpu__cuda_check(cuda.device_get(&d, (int)index), "cuDeviceGet");
		if (!st)
			st = tpu__cuda_check(cuda.primary_retain(&cuda_dev[index].ctx, d),
					     "cuDevicePrimaryCtxRetain");
		if (st)
			return st;
		cuda_dev[index].ready = true;
	}
	st = tpu__cuda_check(cuda.ctx_set_current(cuda_dev[index].ctx), "cuCtxSetCurrent");
	if (!st && !cuda_dev[index].stream)
		st = tpu__cuda_check(cuda.stream_create(&cuda_dev[index].stream,
							TPU__CU_STREAM_NON_BLOCKING),
				     "cuStreamCreate");
	return st;
}

static tpu_status dev_check_index(uint32_t index)
{
	tpu_status st = tpu__cuda_api(NULL, NULL);

	if (st)
		return st;
	if (index >= (uint32_t)cuda_ndev) {
		tpu__log_debug("cuda: device %u: the driver has %d", index, cuda_ndev);
		return -ENODEV;
	}
	return 0;
}

tpu_status tpu__cuda_enter(uint32_t index)
{
	tpu_status st = dev_check_index(index);

	if (st)
		return st;
	pthread_mutex_lock(&cuda_lock);
	st = dev_enter_locked(index);
	pthread_mutex_unlock(&cuda_lock);
	return st;
}

/*
 * Called on the user's threads (tpu_pipe_write, tpu_pipe_read): their
 * current context is theirs, so it is put back.
 */
tpu_status tpu__cuda_check_ptr(const void *p, size_t len, uint32_t index)
{
	tpu__cu_ptr dp = (tpu__cu_ptr)(uintptr_t)p, base = 0;
	tpu__cu_ctx saved = NULL;
	unsigned int type = 0;
	int ordinal = -1;
	size_t size = 0;
	tpu_status st = dev_check_index(index);

	if (st)
		return st;
	if (cuda.ctx_get_current(&saved) != TPU__CU_SUCCESS)
		saved = NULL;
	st = tpu__cuda_enter(index);
	if (!st &&
	    (cuda.pointer_attr(&type, TPU__CU_PTR_ATTR_MEMORY_TYPE, dp) != TPU__CU_SUCCESS ||
	     type != TPU__CU_MEMORYTYPE_DEVICE ||
	     cuda.pointer_attr(&ordinal, TPU__CU_PTR_ATTR_DEVICE_ORDINAL, dp) != TPU__CU_SUCCESS ||
	     ordinal != (int)index ||
	     cuda.mem_range(&base, &size, dp) != TPU__CU_SUCCESS ||
	     len > size - (size_t)(dp - base))) {
		tpu__log_debug("cuda: %p (+%zu) is not memory of CUDA device %u", p, len, index);
		st = -EINVAL;
	}
	cuda.ctx_set_current(saved);
	return st;
}

static tpu__cu_result copy_chunk(void *dst, bool dcuda, const void *src, bool scuda, size_t n,
				 tpu__cu_stream s)
{
	tpu__cu_ptr d = (tpu__cu_ptr)(uintptr_t)dst, sp = (tpu__cu_ptr)(uintptr_t)src;

	if (dcuda && scuda)
		return cuda.memcpy_dtod_async(d, sp, n, s);
	if (dcuda)
		return cuda.memcpy_htod_async(d, src, n, s);
	return cuda.memcpy_dtoh_async(dst, sp, n, s);
}

/*
 * The copy, ordered after @user (NULL: the legacy default stream) when
 * @ordered, else after nothing of this process.
 */
static tpu_status cuda_copy(void *dst, struct tpu_device ddev, const void *src,
			    struct tpu_device sdev, size_t len, bool ordered, tpu__cu_stream user)
{
	bool dcuda = ddev.type == TPU_DEVICE_CUDA, scuda = sdev.type == TPU_DEVICE_CUDA;
	uint32_t index = dcuda ? ddev.index : sdev.index;
	tpu__cu_stream s;
	tpu__cu_event before = NULL, after = NULL;
	tpu_status st;

	if (!dcuda && !scuda) {
		if (len)
			memcpy(dst, src, len);
		return 0;
	}
	st = dev_check_index(index);
	if (st)
		return st;
	if (dcuda && scuda && sdev.index != ddev.index) {
		/* Peer copies need peer access, which this library does not set up. */
		st = dev_check_index(sdev.index);
		if (st)
			return st;
	}
	pthread_mutex_lock(&cuda_lock);
	st = dev_enter_locked(index);
	if (st)
		goto out;
	s = cuda_dev[index].stream;
	st = tpu__cuda_check(cuda.event_create(&after, TPU__CU_EVENT_DISABLE_TIMING),
			     "cuEventCreate");
	if (!st && ordered) {
		/* Behind the user's work: its stream's event, waited on by ours. */
		st = tpu__cuda_check(cuda.event_create(&before, TPU__CU_EVENT_DISABLE_TIMING),
				     "cuEventCreate");
		if (!st)
			st = tpu__cuda_check(cuda.event_record(before, user), "cuEventRecord");
		if (!st)
			st = tpu__cuda_check(cuda.stream_wait_event(s, before, 0),
					     "cuStreamWaitEvent");
	}
	for (size_t off = 0; !st && off < len; off += CUDA_CHUNK) {
		size_t n = len - off < CUDA_CHUNK ? len - off : CUDA_CHUNK;

		st = tpu__cuda_check(copy_chunk((char *)dst + off, dcuda,
						(const char *)src + off, scuda, n, s),
				     "cuMemcpyAsync");
	}
	/* Even after a failed queue: what was queued must end before we return. */
	if (after) {
		tpu_status st2 = tpu__cuda_check(cuda.event_record(after, s), "cuEventRecord");

		if (!st2)
			st2 = tpu__cuda_check(cuda.event_sync(after), "cuEventSynchronize");
		/* Done already; the user's stream is ordered after it all the same. */
		if (!st2 && ordered)
			st2 = tpu__cuda_check(cuda.stream_wait_event(user, after, 0),
					      "cuStreamWaitEvent");
		if (!st)
			st = st2;
	}
out:
	if (before)
		cuda.event_destroy(before);
	if (after)
		cuda.event_destroy(after);
	pthread_mutex_unlock(&cuda_lock);
	return st;
}

tpu_status tpu__cuda_copy(void *dst, struct tpu_device ddev, const void *src,
			  struct tpu_device sdev, size_t len, void *stream)
{
	return cuda_copy(dst, ddev, src, sdev, len, true, stream);
}

tpu_status tpu__cuda_copy_from_peer(void *dst, struct tpu_device ddev, const void *src,
				    struct tpu_device sdev, size_t len, void *stream)
{
	return cuda_copy(dst, ddev, src, sdev, len, ddev.type == TPU_DEVICE_CUDA, stream);
}

tpu_status tpu__cuda_stream_done(uint32_t index, void *stream)
{
	tpu__cu_event ev = NULL;
	tpu_status st;

	/* NULL too: the legacy default stream may hold the user's work. */
	st = dev_check_index(index);
	if (st)
		return st;
	pthread_mutex_lock(&cuda_lock);
	st = dev_enter_locked(index);
	if (!st)
		st = tpu__cuda_check(cuda.event_create(&ev, TPU__CU_EVENT_DISABLE_TIMING),
				     "cuEventCreate");
	if (!st)
		st = tpu__cuda_check(cuda.event_record(ev, stream), "cuEventRecord");
	if (!st)
		st = tpu__cuda_check(cuda.event_sync(ev), "cuEventSynchronize");
	if (ev)
		cuda.event_destroy(ev);
	pthread_mutex_unlock(&cuda_lock);
	return st;
}

tpu_status tpu__cuda_host_alloc(size_t len, void **out)
{
	tpu_status st = tpu__cuda_enter(0);

	*out = NULL;
	if (st)
		return st;
	st = tpu__cuda_check(cuda.host_alloc(out, len ? len : 1, TPU__CU_MEMHOSTALLOC_PORTABLE),
			     "cuMemHostAlloc");
	return st == TPU_E_CUDA ? -ENOMEM : st;
}

void tpu__cuda_host_free(void *p)
{
	if (p)
		tpu__cuda_check(cuda.host_free(p), "cuMemFreeHost");
}

tpu_status tpu__cuda_ipc_export(const void *p, uint32_t index, tpu__cu_ipc_handle *h,
				uint64_t *offset)
{
	tpu__cu_ptr dp = (tpu__cu_ptr)(uintptr_t)p, base = 0;
	size_t size = 0;
	tpu_status st = tpu__cuda_enter(index);

	if (!st)
		st = tpu__cuda_check(cuda.mem_range(&base, &size, dp), "cuMemGetAddressRange");
	if (!st)
		st = tpu__cuda_check(cuda.ipc_get(h, base), "cuIpcGetMemHandle");
	if (!st)
		*offset = dp - base;
	return st;
}

tpu_status tpu__cuda_ipc_open(const tpu__cu_ipc_handle *h, uint32_t index, void **base)
{
	tpu__cu_ptr p = 0;
	tpu_status st = tpu__cuda_enter(index);

	if (!st)
		st = tpu__cuda_check(cuda.ipc_open(&p, *h, TPU__CU_IPC_LAZY_PEER),
				     "cuIpcOpenMemHandle");
	*base = st ? NULL : (void *)(uintptr_t)p;
	return st;
}

tpu_status tpu__cuda_ipc_close(uint32_t index, void *base)
{
	tpu_status st = tpu__cuda_enter(index);

	if (!st)
		st = tpu__cuda_check(cuda.ipc_close((tpu__cu_ptr)(uintptr_t)base),
				     "cuIpcCloseMemHandle");
	return st;
}

tpu_status tpu__cuda_dmabuf_export(const void *p, size_t len, uint32_t index, int *fd,
				   uint64_t *offset)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t start = (uintptr_t)p & ~(page - 1);
	uintptr_t end = ((uintptr_t)p + (len ? len : 1) + page - 1) & ~(page - 1);
	tpu__cu_result r;
	int out = -1;
	tpu_status st = tpu__cuda_enter(index);

	if (st)
		return st;
	if (!cuda.range_handle) {
		tpu__log_debug("cuda: the driver lacks cuMemGetHandleForAddressRange");
		return -EOPNOTSUPP;
	}
	/* The driver exports whole host pages; device allocations are page aligned. */
	r = cuda.range_handle(&out, (tpu__cu_ptr)start, end - start,
			      TPU__CU_RANGE_HANDLE_DMA_BUF_FD, 0);
	if (r == TPU__CU_ERROR_NOT_SUPPORTED) {
		tpu__log_debug("cuda: device %u cannot export dma-bufs", index);
		return -EOPNOTSUPP;
	}
	st = tpu__cuda_check(r, "cuMemGetHandleForAddressRange");
	if (st)
		return st;
	*fd = out;
	*offset = (uintptr_t)p - start;
	return 0;
}

bool tpu__cuda_has_vmm(void)
{
	return !tpu__cuda_api(NULL, NULL) && cuda_vmm;
}

tpu_status tpu__cuda_vmm_export(const void *p, uint32_t index, int *fd, uint64_t *size,
				uint64_t *offset)
{
	tpu__cu_ptr dp = (tpu__cu_ptr)(uintptr_t)p, base = 0;
	tpu__cu_mem_handle h;
	size_t len = 0;
	tpu__cu_result r;
	int out = -1;
	tpu_status st = tpu__cuda_enter(index);

	if (st)
		return st;
	if (!tpu__cuda_has_vmm())
		return -EOPNOTSUPP;
	/* Memory from cuMemAlloc has no allocation handle: not ours to export. */
	if (cuda.mem_retain(&h, (void *)(uintptr_t)p) != TPU__CU_SUCCESS)
		return -ENOENT;
	st = tpu__cuda_check(cuda.mem_range(&base, &len, dp), "cuMemGetAddressRange");
	if (!st) {
		r = cuda.mem_export(&out, h, TPU__CU_HANDLE_POSIX_FD, 0);
		/* Made without CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR among its types. */
		if (r == TPU__CU_ERROR_INVALID_VALUE || r == TPU__CU_ERROR_NOT_SUPPORTED) {
			tpu__log_debug("cuda: %p: a VMM allocation not exportable as a descriptor", p);
			st = -EOPNOTSUPP;
		} else {
			st = tpu__cuda_check(r, "cuMemExportToShareableHandle");
		}
	}
	/* The mapping holds the allocation; our reference goes. */
	cuda.mem_release(h);
	if (st)
		return st;
	*fd = out;
	*size = len;
	*offset = dp - base;
	return 0;
}

tpu_status tpu__cuda_vmm_open(int fd, uint64_t size, uint32_t index, void **base)
{
	tpu__cu_mem_access access = { .location = { TPU__CU_LOCATION_DEVICE, (int)index },
				      .flags = TPU__CU_ACCESS_READWRITE };
	tpu__cu_mem_handle h = 0;
	tpu__cu_ptr p = 0;
	bool mapped = false;
	tpu_status st = tpu__cuda_enter(index);

	*base = NULL;
	if (st)
		return st;
	if (!tpu__cuda_has_vmm())
		return -EOPNOTSUPP;
	st = tpu__cuda_check(cuda.mem_import(&h, (void *)(intptr_t)fd, TPU__CU_HANDLE_POSIX_FD),
			     "cuMemImportFromShareableHandle");
	if (st)
		return st;
	st = tpu__cuda_check(cuda.mem_reserve(&p, (size_t)size, 0, 0, 0), "cuMemAddressReserve");
	if (!st) {
		st = tpu__cuda_check(cuda.mem_map(p, (size_t)size, 0, h, 0), "cuMemMap");
		mapped = !st;
	}
	if (!st)
		st = tpu__cuda_check(cuda.mem_set_access(p, (size_t)size, &access, 1),
				     "cuMemSetAccess");
	/* The mapping holds the allocation from here on. */
	cuda.mem_release(h);
	if (st) {
		if (mapped)
			cuda.mem_unmap(p, (size_t)size);
		if (p)
			cuda.mem_unreserve(p, (size_t)size);
		return st;
	}
	*base = (void *)(uintptr_t)p;
	return 0;
}

tpu_status tpu__cuda_vmm_close(uint32_t index, void *base, uint64_t size)
{
	tpu__cu_ptr p = (tpu__cu_ptr)(uintptr_t)base;
	tpu_status st = tpu__cuda_enter(index);

	if (!st)
		st = tpu__cuda_check(cuda.mem_unmap(p, (size_t)size), "cuMemUnmap");
	if (!st)
		st = tpu__cuda_check(cuda.mem_unreserve(p, (size_t)size), "cuMemAddressFree");
	return st;
}
