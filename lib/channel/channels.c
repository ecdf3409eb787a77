// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The channels a pipe may use, worst first: the listener picks the best one
 * both ends offer (pipe_setup.c).  Adding a channel: its file, and its
 * entry here.
 */
#include <string.h>

#include "channel.h"

extern const struct tpu__chan tpu__chan_mtcp;
extern const struct tpu__chan tpu__chan_cma;
extern const struct tpu__chan tpu__chan_rdma;
extern const struct tpu__chan tpu__chan_cuda_staged;
extern const struct tpu__chan tpu__chan_cuda_ipc;
extern const struct tpu__chan tpu__chan_cuda_dmabuf;

const struct tpu__chan *const tpu__chans[] = {
	&tpu__chan_basic,	/* first: always there */
	&tpu__chan_mtcp,
	/* Below cma and kmod: on one host a local copy beats a loop through the NIC. */
	&tpu__chan_rdma,
	&tpu__chan_cma,
	&tpu__chan_kmod,
	/*
	 * CUDA memory (no CPU-to-CPU pair): on one host the GPU's own copy
	 * (ipc) beats the module's CPU copy (dmabuf), which beats staging.
	 */
	&tpu__chan_cuda_staged,
	&tpu__chan_cuda_dmabuf,
	&tpu__chan_cuda_ipc,
};

const unsigned int tpu__nchans = sizeof(tpu__chans) / sizeof(tpu__chans[0]);

_Static_assert(sizeof(tpu__chans) / sizeof(tpu__chans[0]) <= TPU__CHAN_MAX,
	       "TPU__CHAN_MAX bounds the table");

const struct tpu__chan *tpu__chan_by_name(const char *name, size_t len)
{
	for (unsigned int i = 0; i < tpu__nchans; i++)
		if (strlen(tpu__chans[i]->name) == len && !memcmp(tpu__chans[i]->name, name, len))
			return tpu__chans[i];
	return NULL;
}

int tpu__chan_index(const struct tpu__chan *c)
{
	for (unsigned int i = 0; i < tpu__nchans; i++)
		if (tpu__chans[i] == c)
			return (int)i;
	return -1;
}

bool tpu__chan_beside(const struct tpu__chan *cpu, const struct tpu__chan *dev)
{
	return !(dev->flags & TPU__CHAN_ON_KMOD) || cpu == &tpu__chan_kmod;
}
