// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Built with TPU__HAVE_CUDA_H when lib/Makefile finds <cuda.h> (CUDA_HOME,
 * default /usr/local/cuda): the driver's own prototypes must fit struct
 * tpu__cuda_api's entries exactly (-Werror turns a mismatch into a build
 * failure), and the values cuda.h copies must be the driver's.  Nothing of
 * this file runs; without <cuda.h> it is empty.
 */
#ifdef TPU__HAVE_CUDA_H
#include <stddef.h>

#include <cuda.h>

#define TPU__CUDA_FROM_CUDA_H
#include "cuda.h"

/*
 * Every entry point, under the name cuda_driver.c looks it up by: the
 * types are compared without taking an address, so nothing here refers to
 * the driver's symbols.
 */
#define FITS(field, fn)								\
	_Static_assert(__builtin_types_compatible_p(__typeof__(&fn),		\
		       __typeof__(((struct tpu__cuda_api *)0)->field)), #fn " fits ." #field)
FITS(init, cuInit);
FITS(device_get_count, cuDeviceGetCount);
FITS(device_get, cuDeviceGet);
FITS(primary_retain, cuDevicePrimaryCtxRetain);
FITS(primary_release, cuDevicePrimaryCtxRelease_v2);
FITS(ctx_set_current, cuCtxSetCurrent);
FITS(ctx_get_current, cuCtxGetCurrent);
FITS(mem_alloc, cuMemAlloc_v2);
FITS(mem_free, cuMemFree_v2);
FITS(mem_range, cuMemGetAddressRange_v2);
FITS(host_alloc, cuMemHostAlloc);
FITS(host_free, cuMemFreeHost);
FITS(memcpy_htod, cuMemcpyHtoD_v2);
FITS(memcpy_dtoh, cuMemcpyDtoH_v2);
FITS(memcpy_dtod, cuMemcpyDtoD_v2);
FITS(memcpy_htod_async, cuMemcpyHtoDAsync_v2);
FITS(memcpy_dtoh_async, cuMemcpyDtoHAsync_v2);
FITS(memcpy_dtod_async, cuMemcpyDtoDAsync_v2);
FITS(stream_create, cuStreamCreate);
FITS(stream_destroy, cuStreamDestroy_v2);
FITS(stream_sync, cuStreamSynchronize);
FITS(stream_wait_event, cuStreamWaitEvent);
FITS(event_create, cuEventCreate);
FITS(event_destroy, cuEventDestroy_v2);
FITS(event_record, cuEventRecord);
FITS(event_query, cuEventQuery);
FITS(event_sync, cuEventSynchronize);
FITS(pointer_attr, cuPointerGetAttribute);
FITS(ipc_get, cuIpcGetMemHandle);
FITS(ipc_open, cuIpcOpenMemHandle_v2);
FITS(ipc_close, cuIpcCloseMemHandle);
FITS(error_string, cuGetErrorString);
FITS(range_handle, cuMemGetHandleForAddressRange);
FITS(mem_create, cuMemCreate);
FITS(mem_release, cuMemRelease);
FITS(mem_granularity, cuMemGetAllocationGranularity);
FITS(mem_reserve, cuMemAddressReserve);
FITS(mem_unreserve, cuMemAddressFree);
FITS(mem_map, cuMemMap);
FITS(mem_unmap, cuMemUnmap);
FITS(mem_set_access, cuMemSetAccess);
FITS(mem_export, cuMemExportToShareableHandle);
FITS(mem_import, cuMemImportFromShareableHandle);
FITS(mem_retain, cuMemRetainAllocationHandle);

#define SAME(ours, theirs) _Static_assert((ours) == (theirs), #ours " is " #theirs)
SAME(TPU__CU_SUCCESS, CUDA_SUCCESS);
SAME(TPU__CU_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_VALUE);
SAME(TPU__CU_ERROR_OUT_OF_MEMORY, CUDA_ERROR_OUT_OF_MEMORY);
SAME(TPU__CU_ERROR_NOT_INITIALIZED, CUDA_ERROR_NOT_INITIALIZED);
SAME(TPU__CU_ERROR_NO_DEVICE, CUDA_ERROR_NO_DEVICE);
SAME(TPU__CU_ERROR_INVALID_DEVICE, CUDA_ERROR_INVALID_DEVICE);
SAME(TPU__CU_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_CONTEXT);
SAME(TPU__CU_ERROR_INVALID_HANDLE, CUDA_ERROR_INVALID_HANDLE);
SAME(TPU__CU_ERROR_NOT_READY, CUDA_ERROR_NOT_READY);
SAME(TPU__CU_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_ILLEGAL_ADDRESS);
SAME(TPU__CU_ERROR_NOT_SUPPORTED, CUDA_ERROR_NOT_SUPPORTED);
SAME(TPU__CU_IPC_HANDLE_SIZE, CU_IPC_HANDLE_SIZE);
SAME(TPU__CU_IPC_LAZY_PEER, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
SAME(TPU__CU_PTR_ATTR_CONTEXT, CU_POINTER_ATTRIBUTE_CONTEXT);
SAME(TPU__CU_PTR_ATTR_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_MEMORY_TYPE);
SAME(TPU__CU_PTR_ATTR_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL);
SAME(TPU__CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_HOST);
SAME(TPU__CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_DEVICE);
SAME(TPU__CU_STREAM_NON_BLOCKING, CU_STREAM_NON_BLOCKING);
SAME(TPU__CU_EVENT_DISABLE_TIMING, CU_EVENT_DISABLE_TIMING);
SAME(TPU__CU_MEMHOSTALLOC_PORTABLE, CU_MEMHOSTALLOC_PORTABLE);
SAME(TPU__CU_RANGE_HANDLE_DMA_BUF_FD, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD);
SAME(TPU__CU_HANDLE_POSIX_FD, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
SAME(TPU__CU_MEM_PINNED, CU_MEM_ALLOCATION_TYPE_PINNED);
SAME(TPU__CU_LOCATION_DEVICE, CU_MEM_LOCATION_TYPE_DEVICE);
SAME(TPU__CU_ACCESS_READWRITE, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
SAME(TPU__CU_GRANULARITY_MINIMUM, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
/* Our VMM structures, field by field. */
SAME(sizeof(struct tpu__cu_mem_location_s), sizeof(CUmemLocation));
SAME(offsetof(struct tpu__cu_mem_location_s, id), offsetof(CUmemLocation, id));
SAME(sizeof(struct tpu__cu_mem_access_s), sizeof(CUmemAccessDesc));
SAME(offsetof(struct tpu__cu_mem_access_s, flags), offsetof(CUmemAccessDesc, flags));
SAME(sizeof(struct tpu__cu_mem_prop_s), sizeof(CUmemAllocationProp));
SAME(offsetof(struct tpu__cu_mem_prop_s, handle_types),
     offsetof(CUmemAllocationProp, requestedHandleTypes));
SAME(offsetof(struct tpu__cu_mem_prop_s, location), offsetof(CUmemAllocationProp, location));
SAME(offsetof(struct tpu__cu_mem_prop_s, win32_meta),
     offsetof(CUmemAllocationProp, win32HandleMetaData));
SAME(offsetof(struct tpu__cu_mem_prop_s, flags), offsetof(CUmemAllocationProp, allocFlags));
SAME(sizeof(CUdeviceptr), sizeof(unsigned long long));
SAME(sizeof(CUipcMemHandle), 64);
SAME(sizeof(CUresult), sizeof(unsigned int));
#else
/* No <cuda.h>: nothing to compare (an empty file is not ISO C). */
typedef int tpu__cuda_abi_unchecked;
#endif
