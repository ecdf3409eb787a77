/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * lib/cuda: CUDA device memory, through the CUDA driver loaded at run time.
 *
 * The driver is dlopen()ed on first use: libcuda.so.1, or the file that
 * TPU_CUDA_DRIVER names (the tests' stand-in, tests/cuda_standin/).  Only
 * the entry points listed in struct tpu__cuda_api are resolved.  Nothing is
 * linked against CUDA, so one library binary runs with and without a GPU;
 * without one every call here returns TPU_E_NO_CUDA and the reason is
 * logged once (TPU_LOG=debug).  The few driver types and values used are
 * declared below; cuda_abi_check.c compares them with <cuda.h> when the
 * build finds it (CUDA_HOME, default /usr/local/cuda).
 *
 * Thread-safe.  Built only on lib/base.  Not installed.
 */
#ifndef TPU_CUDA_H
#define TPU_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "tpu_user.h"

/* The VMM structures, laid out as <cuda.h>'s (cuda_abi_check.c compares them). */
struct tpu__cu_mem_location_s {
	unsigned int type;			/* CUmemLocationType */
	int id;
};

struct tpu__cu_mem_access_s {			/* CUmemAccessDesc */
	struct tpu__cu_mem_location_s location;
	unsigned int flags;			/* CUmemAccess_flags */
};

struct tpu__cu_mem_prop_s {			/* CUmemAllocationProp */
	unsigned int type;			/* CUmemAllocationType */
	unsigned int handle_types;		/* CUmemAllocationHandleType */
	struct tpu__cu_mem_location_s location;
	void *win32_meta;
	struct {
		unsigned char compression;
		unsigned char gpu_direct_rdma;
		unsigned short usage;
		unsigned char reserved[4];
	} flags;
};

#ifdef TPU__CUDA_FROM_CUDA_H
/* cuda_abi_check.c: the driver's own declarations, to compare with ours. */
typedef CUresult tpu__cu_result;
typedef CUdevice tpu__cu_dev;
typedef CUdeviceptr tpu__cu_ptr;
typedef CUcontext tpu__cu_ctx;
typedef CUstream tpu__cu_stream;
typedef CUevent tpu__cu_event;
typedef CUipcMemHandle tpu__cu_ipc_handle;
typedef CUpointer_attribute tpu__cu_ptr_attr;
typedef CUmemRangeHandleType tpu__cu_range_handle_type;
typedef CUmemGenericAllocationHandle tpu__cu_mem_handle;
typedef CUmemAllocationHandleType tpu__cu_handle_type;
typedef CUmemAllocationGranularity_flags tpu__cu_granularity;
typedef CUmemAccessDesc tpu__cu_mem_access;
typedef CUmemAllocationProp tpu__cu_mem_prop;
#else
typedef unsigned int tpu__cu_result;
typedef int tpu__cu_dev;
typedef unsigned long long tpu__cu_ptr;
typedef struct CUctx_st *tpu__cu_ctx;
typedef struct CUstream_st *tpu__cu_stream;
typedef struct CUevent_st *tpu__cu_event;
typedef struct CUipcMemHandle_st {
	char reserved[64];
} tpu__cu_ipc_handle;
typedef unsigned int tpu__cu_ptr_attr;
typedef unsigned int tpu__cu_range_handle_type;
typedef unsigned long long tpu__cu_mem_handle;
typedef unsigned int tpu__cu_handle_type;
typedef unsigned int tpu__cu_granularity;
typedef struct tpu__cu_mem_access_s tpu__cu_mem_access;
typedef struct tpu__cu_mem_prop_s tpu__cu_mem_prop;
#endif

/* Driver values used (CUDA driver API, stable since CUDA 4). */
#define TPU__CU_SUCCESS			0
#define TPU__CU_ERROR_INVALID_VALUE	1
#define TPU__CU_ERROR_OUT_OF_MEMORY	2
#define TPU__CU_ERROR_NOT_INITIALIZED	3
#define TPU__CU_ERROR_NO_DEVICE		100
#define TPU__CU_ERROR_INVALID_DEVICE	101
#define TPU__CU_ERROR_INVALID_CONTEXT	201
#define TPU__CU_ERROR_INVALID_HANDLE	400
#define TPU__CU_ERROR_NOT_READY		600
#define TPU__CU_ERROR_ILLEGAL_ADDRESS	700
#define TPU__CU_ERROR_NOT_SUPPORTED	801
#define TPU__CU_IPC_HANDLE_SIZE		64
#define TPU__CU_IPC_LAZY_PEER		0x1	/* CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS */
#define TPU__CU_PTR_ATTR_CONTEXT	1	/* CU_POINTER_ATTRIBUTE_CONTEXT */
#define TPU__CU_PTR_ATTR_MEMORY_TYPE	2	/* CU_POINTER_ATTRIBUTE_MEMORY_TYPE */
#define TPU__CU_PTR_ATTR_DEVICE_ORDINAL	9	/* CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL */
#define TPU__CU_MEMORYTYPE_HOST		1
#define TPU__CU_MEMORYTYPE_DEVICE	2
#define TPU__CU_STREAM_NON_BLOCKING	0x1
#define TPU__CU_EVENT_DISABLE_TIMING	0x2
#define TPU__CU_MEMHOSTALLOC_PORTABLE	0x1
#define TPU__CU_RANGE_HANDLE_DMA_BUF_FD	0x1	/* CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD */
#define TPU__CU_HANDLE_POSIX_FD		0x1	/* CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR */
#define TPU__CU_MEM_PINNED		0x1	/* CU_MEM_ALLOCATION_TYPE_PINNED */
#define TPU__CU_LOCATION_DEVICE		0x1	/* CU_MEM_LOCATION_TYPE_DEVICE */
#define TPU__CU_ACCESS_READWRITE	0x3	/* CU_MEM_ACCESS_FLAGS_PROT_READWRITE */
#define TPU__CU_GRANULARITY_MINIMUM	0x0	/* CU_MEM_ALLOC_GRANULARITY_MINIMUM */

/*
 * The entry points used; each comment is the symbol looked up (the _v2
 * names are what <cuda.h> maps the plain names to).  Optional ones are
 * NULL when the driver lacks them.
 */
struct tpu__cuda_api {
	tpu__cu_result (*init)(unsigned int flags);			/* cuInit */
	tpu__cu_result (*device_get_count)(int *n);			/* cuDeviceGetCount */
	tpu__cu_result (*device_get)(tpu__cu_dev *d, int ordinal);	/* cuDeviceGet */
	tpu__cu_result (*primary_retain)(tpu__cu_ctx *c, tpu__cu_dev d);	/* cuDevicePrimaryCtxRetain */
	tpu__cu_result (*primary_release)(tpu__cu_dev d);		/* cuDevicePrimaryCtxRelease_v2 */
	tpu__cu_result (*ctx_set_current)(tpu__cu_ctx c);		/* cuCtxSetCurrent */
	tpu__cu_result (*ctx_get_current)(tpu__cu_ctx *c);		/* cuCtxGetCurrent */
	tpu__cu_result (*mem_alloc)(tpu__cu_ptr *p, size_t len);	/* cuMemAlloc_v2 */
	tpu__cu_result (*mem_free)(tpu__cu_ptr p);			/* cuMemFree_v2 */
	tpu__cu_result (*mem_range)(tpu__cu_ptr *base, size_t *len, tpu__cu_ptr p); /* cuMemGetAddressRange_v2 */
	tpu__cu_result (*host_alloc)(void **p, size_t len, unsigned int flags);	/* cuMemHostAlloc */
	tpu__cu_result (*host_free)(void *p);				/* cuMemFreeHost */
	tpu__cu_result (*memcpy_htod)(tpu__cu_ptr d, const void *s, size_t n);	/* cuMemcpyHtoD_v2 */
	tpu__cu_result (*memcpy_dtoh)(void *d, tpu__cu_ptr s, size_t n);	/* cuMemcpyDtoH_v2 */
	tpu__cu_result (*memcpy_dtod)(tpu__cu_ptr d, tpu__cu_ptr s, size_t n);	/* cuMemcpyDtoD_v2 */
	tpu__cu_result (*memcpy_htod_async)(tpu__cu_ptr d, const void *s, size_t n,
					    tpu__cu_stream st);	/* cuMemcpyHtoDAsync_v2 */
	tpu__cu_result (*memcpy_dtoh_async)(void *d, tpu__cu_ptr s, size_t n,
					    tpu__cu_stream st);	/* cuMemcpyDtoHAsync_v2 */
	tpu__cu_result (*memcpy_dtod_async)(tpu__cu_ptr d, tpu__cu_ptr s, size_t n,
					    tpu__cu_stream st);	/* cuMemcpyDtoDAsync_v2 */
	tpu__cu_result (*stream_create)(tpu__cu_stream *s, unsigned int flags);	/* cuStreamCreate */
	tpu__cu_result (*stream_destroy)(tpu__cu_stream s);		/* cuStreamDestroy_v2 */
	tpu__cu_result (*stream_sync)(tpu__cu_stream s);		/* cuStreamSynchronize */
	tpu__cu_result (*stream_wait_event)(tpu__cu_stream s, tpu__cu_event e,
					    unsigned int flags);	/* cuStreamWaitEvent */
	tpu__cu_result (*event_create)(tpu__cu_event *e, unsigned int flags);	/* cuEventCreate */
	tpu__cu_result (*event_destroy)(tpu__cu_event e);		/* cuEventDestroy_v2 */
	tpu__cu_result (*event_record)(tpu__cu_event e, tpu__cu_stream s);	/* cuEventRecord */
	tpu__cu_result (*event_query)(tpu__cu_event e);			/* cuEventQuery */
	tpu__cu_result (*event_sync)(tpu__cu_event e);			/* cuEventSynchronize */
	tpu__cu_result (*pointer_attr)(void *out, tpu__cu_ptr_attr attr,
				       tpu__cu_ptr p);		/* cuPointerGetAttribute */
	tpu__cu_result (*ipc_get)(tpu__cu_ipc_handle *h, tpu__cu_ptr p);	/* cuIpcGetMemHandle */
	tpu__cu_result (*ipc_open)(tpu__cu_ptr *p, tpu__cu_ipc_handle h,
				   unsigned int flags);		/* cuIpcOpenMemHandle_v2 */
	tpu__cu_result (*ipc_close)(tpu__cu_ptr p);			/* cuIpcCloseMemHandle */
	tpu__cu_result (*error_string)(tpu__cu_result r, const char **s);	/* cuGetErrorString */
	/* Optional: drivers of CUDA 11.7 and later. */
	tpu__cu_result (*range_handle)(void *handle, tpu__cu_ptr p, size_t size,
				       tpu__cu_range_handle_type type,
				       unsigned long long flags);	/* cuMemGetHandleForAddressRange */
	/*
	 * Optional, all or none (CUDA 10.2 and later): virtual memory
	 * management.  The library maps another process's allocations with
	 * them; the tests also create some.
	 */
	tpu__cu_result (*mem_create)(tpu__cu_mem_handle *h, size_t size, const tpu__cu_mem_prop *prop,
				     unsigned long long flags);	/* cuMemCreate */
	tpu__cu_result (*mem_release)(tpu__cu_mem_handle h);		/* cuMemRelease */
	tpu__cu_result (*mem_granularity)(size_t *g, const tpu__cu_mem_prop *prop,
					  tpu__cu_granularity option);	/* cuMemGetAllocationGranularity */
	tpu__cu_result (*mem_reserve)(tpu__cu_ptr *p, size_t size, size_t align, tpu__cu_ptr addr,
				      unsigned long long flags);	/* cuMemAddressReserve */
	tpu__cu_result (*mem_unreserve)(tpu__cu_ptr p, size_t size);	/* cuMemAddressFree */
	tpu__cu_result (*mem_map)(tpu__cu_ptr p, size_t size, size_t offset, tpu__cu_mem_handle h,
				  unsigned long long flags);		/* cuMemMap */
	tpu__cu_result (*mem_unmap)(tpu__cu_ptr p, size_t size);	/* cuMemUnmap */
	tpu__cu_result (*mem_set_access)(tpu__cu_ptr p, size_t size, const tpu__cu_mem_access *desc,
					 size_t count);		/* cuMemSetAccess */
	tpu__cu_result (*mem_export)(void *shareable, tpu__cu_mem_handle h, tpu__cu_handle_type type,
				     unsigned long long flags);	/* cuMemExportToShareableHandle */
	tpu__cu_result (*mem_import)(tpu__cu_mem_handle *h, void *os_handle,
				     tpu__cu_handle_type type);	/* cuMemImportFromShareableHandle */
	tpu__cu_result (*mem_retain)(tpu__cu_mem_handle *h, void *addr);	/* cuMemRetainAllocationHandle */
};

/*
 * The driver, loaded and initialised once (0), or TPU_E_NO_CUDA; *why (if
 * not NULL) gets a sentence either way.  The first failure is logged.
 */
tpu_status tpu__cuda_api(const struct tpu__cuda_api **api, const char **why);
/* Number of devices (0 without a driver). */
unsigned int tpu__cuda_ndevices(void);
/* A driver result as a status: 0, or TPU_E_CUDA logged with @call's name. */
tpu_status tpu__cuda_check(tpu__cu_result r, const char *call);
/*
 * Make device @index's primary context current on this thread: 0,
 * TPU_E_NO_CUDA, or -ENODEV for an ordinal the driver does not have.
 */
tpu_status tpu__cuda_enter(uint32_t index);
/*
 * Whether @len bytes at @p lie in memory of CUDA device @index: 0, or
 * -EINVAL (not device memory, another device's, or past its allocation),
 * TPU_E_NO_CUDA, -ENODEV.  The calling thread's current context is kept.
 */
tpu_status tpu__cuda_check_ptr(const void *p, size_t len, uint32_t index);

/*
 * Copy @len bytes from @src (on @sdev) to @dst (on @ddev); either may be
 * CPU or CUDA memory, one of them the user's tensor: the destination when
 * it is CUDA memory, else the source.  The copy runs on the library's own
 * stream of that CUDA device, after the work queued so far on @stream (a
 * CUstream of that device; NULL is its legacy default stream, CUDA's
 * stream 0, of the primary context, never "none"), in chunks; it returns
 * once the bytes are in place (it waits for its own event only, never the
 * whole device), and work queued on @stream afterwards is ordered after
 * it.
 */
tpu_status tpu__cuda_copy(void *dst, struct tpu_device ddev, const void *src,
			  struct tpu_device sdev, size_t len, void *stream);
/*
 * The same for a copy out of another writer's memory (cuda_ipc's reader):
 * ordered after @stream only when the destination, the user's tensor, is
 * CUDA memory.  A CPU destination has no stream, and the source's writer
 * waited for its own before describing it.
 */
tpu_status tpu__cuda_copy_from_peer(void *dst, struct tpu_device ddev, const void *src,
				    struct tpu_device sdev, size_t len, void *stream);
/*
 * Wait until the work queued so far on @stream of device @index is done
 * (NULL: its legacy default stream), through an event recorded on it.
 */
tpu_status tpu__cuda_stream_done(uint32_t index, void *stream);
/* Page-locked host memory for staging (cuMemHostAlloc), and its free. */
tpu_status tpu__cuda_host_alloc(size_t len, void **out);
void tpu__cuda_host_free(void *p);
/*
 * CUDA IPC: the handle of the allocation holding @p on device @index, and
 * @p's offset in it; open another process's handle (its base address in
 * *base); close it.
 */
tpu_status tpu__cuda_ipc_export(const void *p, uint32_t index, tpu__cu_ipc_handle *h,
				uint64_t *offset);
tpu_status tpu__cuda_ipc_open(const tpu__cu_ipc_handle *h, uint32_t index, void **base);
tpu_status tpu__cuda_ipc_close(uint32_t index, void *base);
/* Whether the driver has the VMM entry points (tpu__cuda_vmm_*). */
bool tpu__cuda_has_vmm(void);
/*
 * The VMM allocation mapped at @p on device @index as a new POSIX
 * descriptor (cuMemExportToShareableHandle), the caller's to close; the
 * mapping's size and @p's offset in it.  -ENOENT when @p is not VMM
 * memory (cuMemRetainAllocationHandle refuses it), -EOPNOTSUPP without
 * VMM or when the allocation was not made exportable as a descriptor.
 */
tpu_status tpu__cuda_vmm_export(const void *p, uint32_t index, int *fd, uint64_t *size,
				uint64_t *offset);
/*
 * Map another process's exported VMM allocation (@fd, @size bytes) on
 * device @index, read-write; its address in *base.  @fd stays the
 * caller's.  Undone by tpu__cuda_vmm_close.
 */
tpu_status tpu__cuda_vmm_open(int fd, uint64_t size, uint32_t index, void **base);
tpu_status tpu__cuda_vmm_close(uint32_t index, void *base, uint64_t size);
/*
 * The pages holding [@p, @p + @len) of device @index as a new dma-buf
 * (cuMemGetHandleForAddressRange): *fd, close-on-exec, the caller's to
 * close; *offset is @p's offset in it.  -EOPNOTSUPP when the driver or the
 * device cannot export dma-bufs.
 */
tpu_status tpu__cuda_dmabuf_export(const void *p, size_t len, uint32_t index, int *fd,
				   uint64_t *offset);

#endif /* TPU_CUDA_H */
