// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The implementations this build holds.  lib/Makefile defines
 * TPU_HAVE_RDV_CMA when lib/rdv_cma.c exists, so that the library builds,
 * and says "not built" instead of pretending, while the fallback is absent.
 */
#include "rdv_internal.h"

const struct tpu__rdv_ops *tpu__rdv_impl_ops(enum tpu_rdv_impl impl)
{
	switch (impl) {
	case TPU_RDV_INPROCESS:
		return &tpu__rdv_inprocess;
	case TPU_RDV_KMOD:
		return &tpu__rdv_kmod;
	case TPU_RDV_CMA:
#ifdef TPU_HAVE_RDV_CMA
		return &tpu__rdv_cma;
#else
		return NULL;
#endif
	default:
		return NULL;
	}
}
