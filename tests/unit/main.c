// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* Host unit tests of libtpu_user: everything that needs no module. */
#include "tap.h"

int main(void)
{
	test_status();
	test_version();
	test_device_name();
	test_key();
	test_endpoint_args();
	test_fdpass();
	test_cma();
	test_probe();
	test_rendezvous();
	test_cma_table();
	test_cma_viability();
	test_rdv_cma();
	test_pipe_wire();
	test_shm_ring();
	test_xport_tcp();
	test_xport_shm();
	test_pipe();
	test_pipe_core();
	return tap_finish();
}
