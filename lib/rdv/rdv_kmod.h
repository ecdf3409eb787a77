/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The kmod rendezvous's registration cache (rdv_kmod_reg.c): module regions
 * for tpu_buffers that live on another endpoint (a memfd buffer, or a
 * module buffer of the context's endpoint used by a rendezvous with its
 * own), registered once and reused.  Keyed by the buffer's id, which is
 * never reused, so a freed buffer can never be mistaken for a new one at
 * the same address.  Memory given by a bare pointer is not cached: pages
 * pinned at an address say nothing about the pages there after a free and
 * a new allocation, so it is registered for its operation only.
 */
#ifndef TPU_RDV_KMOD_H
#define TPU_RDV_KMOD_H

#include "rdv.h"

#define KM_REG_MAX 64

struct km_reg {
	uint64_t buf_id;
	unsigned int access;
	uint32_t handle;
	uint64_t last_use;
};

struct km_regcache {
	struct km_reg ent[KM_REG_MAX];
	size_t n;
	uint64_t clock;
};

/*
 * The region covering all of @buf with @access on @ep, registered now
 * unless cached.  Evicting the least recently used entry is safe while a
 * command still uses it: the module keeps its pages until the command ends.
 */
tpu_status tpu__km_reg_get(struct km_regcache *c, struct tpu_endpoint *ep, const struct tpu_buffer *buf,
		      unsigned int access, uint32_t *handle);
void tpu__km_reg_release_all(struct km_regcache *c, struct tpu_endpoint *ep);

#endif
