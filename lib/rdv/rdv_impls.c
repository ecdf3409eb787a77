// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* The implementations behind the rendezvous front end. */
#include "rdv.h"

const struct tpu__rdv_ops *tpu__rdv_impl_ops(enum tpu_rdv_impl impl)
{
	switch (impl) {
	case TPU_RDV_INPROCESS:
		return &tpu__rdv_inprocess;
	case TPU_RDV_KMOD:
		return &tpu__rdv_kmod;
	case TPU_RDV_CMA:
		return &tpu__rdv_cma;
	default:
		return NULL;
	}
}
