/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* The CUDA lists' shared helpers (cuda_harness.c). */
#ifndef CUDA_HARNESS_H
#define CUDA_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/cuda.h"
#include "pipe_harness.h"

#define BIG	((5u << 20) + 3)	/* over one 4 MiB chunk of tpu__cuda_copy */
#define SMALL	100			/* under TPU_PIPE_INLINE_MAX: CUDA still uses a channel */

/* The driver the library loaded (TPU_CUDA_DRIVER, else libcuda.so.1). */
extern const struct tpu__cuda_api *cu;
/* The stand-in's counters, when the driver is the stand-in (else NULL). */
extern void (*standin_counts)(unsigned long *allocations, unsigned long *ipc_live,
			      unsigned long *ipc_opened);
extern void (*standin_vmm_counts)(unsigned long *allocations, unsigned long *reservations);
/*
 * Load the driver for test list @list: true, or false after a skip (no
 * driver asked for) or a failure (TPU_CUDA_DRIVER set and not loading).
 */
bool cuda_harness_open(const char *list);
void cuda_harness_close(void);

uint8_t pat_byte(size_t i, unsigned int seed);
void pat_fill(uint8_t *b, size_t len, unsigned int seed);
bool pat_holds(const uint8_t *b, size_t len, unsigned int seed);
/* @len bytes of @seed's pattern on CUDA device @dev (0 on failure). */
tpu__cu_ptr dev_filled(uint32_t dev, size_t len, unsigned int seed);
/* Whether device memory @d holds @seed's pattern, read back by the driver. */
bool dev_holds(uint32_t dev, tpu__cu_ptr d, size_t len, unsigned int seed);

/* A VMM allocation mapped read-write on one device (cuMemCreate, cuMemMap). */
struct vmm {
	uint32_t dev;
	tpu__cu_ptr p;
	size_t size;		/* whole granules */
};
/*
 * @len bytes of @seed's pattern in a new VMM allocation on @dev, made
 * exportable as a POSIX descriptor if @exportable: true, or false with
 * nothing left behind.
 */
bool vmm_filled(uint32_t dev, size_t len, unsigned int seed, bool exportable, struct vmm *v);
void vmm_free(struct vmm *v);

struct end {
	uint32_t type, dev;		/* where the tensor lies at this end */
	void *stream;
};

/*
 * One tensor of @len bytes from @w at the client to @r at the server of
 * @pp; true when the read completed with @want_read and, if 0, every byte
 * arrived.
 */
bool xfer(struct pair *pp, struct end w, struct end r, size_t len, unsigned int seed,
	  tpu_status want_read);
const char *type_name(uint32_t t);
/*
 * Each device pair over a pipe at @url with @channels (NULL: all), every
 * byte checked; CUDA sources must negotiate @from_cuda, CPU sources
 * @from_cpu, CPU to CPU @cpu (NULL: anything but a cuda channel).
 */
void cuda_pairs(const char *url, const char *channels, const char *from_cuda,
		const char *from_cpu, const char *cpu, uint32_t dev1);
/*
 * Over a pipe at @url with @channels (NULL: all), which must negotiate
 * @want for CUDA to CUDA: the writer's bytes are those its stream's late
 * work left, and the reader's stream sees them.
 */
void stream_order(const char *url, const char *channels, const char *want);

#endif
