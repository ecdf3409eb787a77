// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* The kmod rendezvous's registration cache; see rdv_kmod.h for why so. */
#include "rdv_kmod.h"

tpu_status tpu__km_reg_get(struct km_regcache *c, struct tpu_endpoint *ep, const struct tpu_buffer *buf,
		      unsigned int access, uint32_t *handle)
{
	struct km_reg *e, *victim = NULL;
	tpu_status st;
	size_t i;

	for (i = 0; i < c->n; i++) {
		e = &c->ent[i];
		if (e->buf_id == buf->id && e->access == access) {
			e->last_use = ++c->clock;
			*handle = e->handle;
			return 0;
		}
	}
	if (c->n < KM_REG_MAX) {
		victim = &c->ent[c->n];
	} else {
		victim = &c->ent[0];
		for (i = 1; i < c->n; i++)
			if (c->ent[i].last_use < victim->last_use)
				victim = &c->ent[i];
	}
	st = tpu_region_register(ep, buf->data, buf->len, access, handle);
	if (st)
		return st;
	if (victim == &c->ent[c->n])
		c->n++;
	else
		tpu_region_release(ep, victim->handle);
	victim->buf_id = buf->id;
	victim->access = access;
	victim->handle = *handle;
	victim->last_use = ++c->clock;
	return 0;
}

void tpu__km_reg_release_all(struct km_regcache *c, struct tpu_endpoint *ep)
{
	size_t i;

	for (i = 0; i < c->n; i++)
		tpu_region_release(ep, c->ent[i].handle);
	c->n = 0;
}
