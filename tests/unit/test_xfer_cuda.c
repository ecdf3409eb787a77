// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * CUDA registrations (tpu_agent_register_cuda), list xfer_cuda, on the
 * driver TPU_CUDA_DRIVER names (the stand-in, or a GPU's).  A target
 * registers device memory; a tcp peer reads it and writes it, checked by
 * the driver's own copies; a cma peer's load is refused, as is the memory
 * as a request's local side, host memory and ranges past an allocation.
 */
#include <errno.h>
#include <string.h>

#include "cuda_harness.h"
#include "tap.h"
#include "tpu_user.h"

#define LEN	(256u << 10)

static tpu_status run(struct tpu_agent *a, enum tpu_xfer_op op, struct tpu_xfer_reg *l,
		      struct tpu_xfer_remote *rm, uint64_t off, uint64_t len)
{
	struct tpu_xfer_local_elem le = { l, 0, len };
	struct tpu_xfer_remote_elem re = { rm, off, len };
	struct tpu_xfer_req *req = NULL;
	tpu_status st = tpu_xfer_prepare(a, op, &le, 1, &re, 1, NULL, 0, &req);

	if (!st)
		st = tpu_xfer_post(req, NULL, NULL);
	if (!st)
		st = tpu_xfer_wait(req, 20000);
	tpu_xfer_release(req);
	return st;
}

static void served_by_the_target(void)
{
	struct tpu_agent_options tcp = { .backends = TPU_XFER_BACKEND_TCP, .name = "tcp" };
	struct tpu_agent_options cma = { .backends = TPU_XFER_BACKEND_CMA, .name = "cma" };
	struct tpu_context *ct = NULL, *cr = NULL;
	struct tpu_agent *t = NULL, *r = NULL, *rc = NULL;
	struct tpu_xfer_reg *dreg = NULL, *hreg = NULL;
	struct tpu_xfer_remote *rm = NULL, *rmc = (struct tpu_xfer_remote *)&ct;
	static uint8_t host[LEN];
	uint8_t blob[TPU_XFER_BLOB_MAX];
	size_t blen = 0;
	tpu__cu_ptr d = dev_filled(0, LEN, 7);
	tpu_status st;

	if (!d || tpu_context_create(NULL, &ct) || tpu_context_create(NULL, &cr) ||
	    tpu_agent_create(ct, NULL, &t) || tpu_agent_create(cr, &tcp, &r) ||
	    tpu_agent_create(cr, &cma, &rc) || tpu_agent_register(r, host, LEN, 0, &hreg)) {
		CHECK(false, "xfer_cuda: set-up");
		goto out;
	}
	st = tpu_agent_register_cuda(t, 0, (void *)(uintptr_t)d, LEN,
				     TPU_XFER_READ | TPU_XFER_WRITE, &dreg);
	CHECK_STATUS(st, 0, "xfer_cuda: device memory registers");
	if (st || tpu_agent_export(dreg, blob, sizeof(blob), &blen))
		goto out;
	CHECK_STATUS(tpu_agent_load(rc, blob, blen, &rmc), -EOPNOTSUPP,
		     "xfer_cuda: a cma peer's load is refused (no host copy reaches it)");
	CHECK(rmc == NULL, "xfer_cuda: and gets no handle");
	st = tpu_agent_load(r, blob, blen, &rm);
	CHECK_STATUS(st, 0, "xfer_cuda: a tcp peer loads it");
	if (st)
		goto out;
	CHECK_STATUS(run(r, TPU_XFER_OP_READ, hreg, rm, 0, LEN), 0, "xfer_cuda: READ of it all");
	CHECK(pat_holds(host, LEN, 7), "xfer_cuda: the device's bytes arrived");
	pat_fill(host, LEN, 9);
	CHECK_STATUS(run(r, TPU_XFER_OP_WRITE, hreg, rm, 0, LEN), 0, "xfer_cuda: WRITE of it all");
	CHECK(dev_holds(0, d, LEN, 9), "xfer_cuda: the device holds them (read by the driver)");
	CHECK_STATUS(run(r, TPU_XFER_OP_READ, hreg, rm, LEN - 10, 11), -EINVAL,
		     "xfer_cuda: one byte past its end is refused");
out:
	tpu_agent_unload(rm);
	if (dreg)
		tpu_agent_deregister(dreg);
	tpu_agent_destroy(t);
	tpu_agent_destroy(r);
	tpu_agent_destroy(rc);
	tpu_context_destroy(ct);
	tpu_context_destroy(cr);
	if (d)
		cu->mem_free(d);
}

/* The requester's own device memory as a local piece: refused at preparation. */
static void not_a_local_piece(void)
{
	struct tpu_agent_options tcp = { .backends = TPU_XFER_BACKEND_TCP };
	struct tpu_context *ca = NULL, *cb = NULL;
	struct tpu_agent *a = NULL, *b = NULL;
	struct tpu_xfer_reg *dreg = NULL, *breg = NULL, *bad = NULL;
	struct tpu_xfer_remote *rm = NULL;
	static uint8_t hb[4096];
	uint8_t blob[TPU_XFER_BLOB_MAX];
	size_t blen = 0;
	tpu__cu_ptr d = dev_filled(0, 4096, 3);

	if (!d || tpu_context_create(NULL, &ca) || tpu_context_create(NULL, &cb) ||
	    tpu_agent_create(ca, &tcp, &a) || tpu_agent_create(cb, &tcp, &b) ||
	    tpu_agent_register(b, hb, sizeof(hb), TPU_XFER_WRITE, &breg) ||
	    tpu_agent_export(breg, blob, sizeof(blob), &blen) || tpu_agent_load(a, blob, blen, &rm) ||
	    tpu_agent_register_cuda(a, 0, (void *)(uintptr_t)d, 4096, 0, &dreg)) {
		CHECK(false, "xfer_cuda: local set-up");
		goto out;
	}
	CHECK_STATUS(run(a, TPU_XFER_OP_WRITE, dreg, rm, 0, 16), -EOPNOTSUPP,
		     "xfer_cuda: device memory as a request's local piece is refused");
	CHECK_STATUS(tpu_agent_register_cuda(a, 0, hb, sizeof(hb), 0, &bad), -EINVAL,
		     "xfer_cuda: host memory is not device memory");
	CHECK(bad == NULL, "xfer_cuda: *out cleared");
	CHECK_STATUS(tpu_agent_register_cuda(a, 0, (void *)(uintptr_t)d, 4097, 0, &bad), -EINVAL,
		     "xfer_cuda: one byte past the allocation");
	CHECK_STATUS(tpu_agent_register_cuda(a, 0, NULL, 1, 0, &bad), -EINVAL, "xfer_cuda: NULL");
	CHECK_STATUS(tpu_agent_register_cuda(a, 0, (void *)(uintptr_t)d, 16, 8, &bad), -EINVAL,
		     "xfer_cuda: unknown access");
	CHECK(tpu_agent_register_cuda(a, 99, (void *)(uintptr_t)d, 16, 0, &bad) != 0,
	      "xfer_cuda: a device the driver does not have");
out:
	tpu_agent_unload(rm);
	tpu_agent_destroy(a);
	tpu_agent_destroy(b);
	tpu_context_destroy(ca);
	tpu_context_destroy(cb);
	if (d)
		cu->mem_free(d);
}

void test_xfer_cuda(void)
{
	if (!cuda_harness_open("xfer_cuda"))
		return;
	served_by_the_target();
	not_a_local_piece();
	cuda_harness_close();
}
