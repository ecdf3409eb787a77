// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * rdv_test: the rendezvous case list over every implementation available
 * here, and the cross-process cases over those that cross processes.
 * inprocess always; kmod when /dev/tensorpipe answers; cma when it is
 * built into the library and process_vm_readv is permitted.  An
 * implementation not available is reported as a skip, not a failure.
 * Prints TAP; exit status 0 when every point passed.
 *
 * Then the remote rendezvous between worker processes (shm and tcp).
 *
 *   tests/rdv/rdv_test [inprocess|kmod|cma|remote ...]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdv_cases.h"
#include "tap.h"

static const struct rdv_impl impls[] = {
	{ TPU_RDV_INPROCESS, 0, "inprocess" },
	{ TPU_RDV_KMOD, 0, "kmod" },
	{ TPU_RDV_CMA, TPU_CTX_NO_KMOD, "cma" },
};

static bool wanted(const char *name, int argc, char **argv)
{
	int i;

	for (i = 1; i < argc; i++)
		if (strcmp(argv[i], name) == 0)
			return true;
	return argc < 2;
}

int main(int argc, char **argv)
{
	const char *why;
	size_t i;

	setvbuf(stdout, NULL, _IOLBF, 0);
	/* A hang fails by itself, with the stacks, long before the VM's timeout. */
	tap_watchdog(getenv("TP_TEST_EMULATED") ? 600 : 180);
	tap_crash_stacks();
	for (i = 0; i < sizeof(impls) / sizeof(impls[0]); i++) {
		const struct rdv_impl *impl = &impls[i];

		if (!wanted(impl->name, argc, argv))
			continue;
		if (!rdv_impl_available(impl, &why)) {
			tap_diag("SKIP %s: not available here: %s", impl->name, why);
			continue;
		}
		rdv_cases_run(impl);
		if (impl->impl != TPU_RDV_INPROCESS) {
			rdv_xproc_run(impl);
			rdv_xproc_death_run(impl);
		}
	}
	if (wanted("remote", argc, argv)) {
		const struct rdv_impl kmod = { TPU_RDV_KMOD, 0, "kmod" };
		bool module = rdv_impl_available(&kmod, &why);

		/* With the module, pipes between processes over shm use its channel. */
		rdv_remote_run("shm", module ? 0 : TPU_CTX_NO_KMOD, module ? "kmod" : "cma");
		rdv_remote_run("tcp", module ? 0 : TPU_CTX_NO_KMOD, NULL);
	}
	return tap_finish();
}
