/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The rendezvous test list, one list for every implementation: the host
 * unit tests run it over inprocess (and cma), tests/rdv/rdv_test over all
 * that are available, in the VM too.  TAP points through tests/unit/tap.h.
 */
#ifndef RDV_CASES_H
#define RDV_CASES_H

#include <stdbool.h>
#include <stdint.h>

#include "tpu_user.h"

/* How to make a rendezvous of the implementation under test. */
struct rdv_impl {
	enum tpu_rdv_impl impl;
	unsigned int ctx_flags;
	const char *name;
};

/* Every single-process case (orderings, errors, stress...) over @impl. */
void rdv_cases_run(const struct rdv_impl *impl);
/* CUDA tensors over @impl (rdv_device.c); skipped without a driver. */
void rdv_device_run(const struct rdv_impl *impl);
/* Cases across fork (needs share/join): not for inprocess. */
void rdv_xproc_run(const struct rdv_impl *impl);
void rdv_xproc_death_run(const struct rdv_impl *impl);
/*
 * The remote rendezvous between worker processes over @transport ("shm",
 * "tcp"); @want_channel, if not NULL, is the channel their pipes must use.
 */
void rdv_remote_run(const char *transport, unsigned int ctx_flags, const char *want_channel);

/* True when a rendezvous of @impl can be made here; @why says why not. */
bool rdv_impl_available(const struct rdv_impl *impl, const char **why);

/* Helpers shared by the case files. */
uint64_t rdv_checksum(const void *data, size_t len);
void rdv_fill(void *data, size_t len, uint64_t seed);
uint64_t rdv_now_ns(void);

#endif
