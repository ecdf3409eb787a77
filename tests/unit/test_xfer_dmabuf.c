// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * dma-buf registrations (tpu_agent_register_dmabuf), list xfer_dmabuf.
 * A memfd stands in for a mappable dma-buf (udmabuf's buffers are memfd
 * pages): an unaligned piece of it is registered and exported, and a peer
 * agent reads and writes it over cma and tcp; what lands is checked
 * through the fd itself, and deregistration unmaps it.  Then the refusals:
 * bad arguments, a piece past the buffer's end, an fd not open for
 * writing, one that does not map.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tap.h"
#include "tpu_user.h"

#define BUF	(64u << 10)
#define OFF	100u		/* not page aligned */
#define LEN	8000u

static int memfd(const char *name)
{
	int fd = memfd_create(name, MFD_CLOEXEC);

	if (fd >= 0 && ftruncate(fd, BUF)) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Whether /proc/self/maps still maps the memfd called @name. */
static bool mapped(const char *name)
{
	char line[512];
	bool found = false;
	FILE *f = fopen("/proc/self/maps", "r");

	while (f && fgets(line, sizeof(line), f))
		found = found || strstr(line, name);
	if (f)
		fclose(f);
	return found;
}

static void peer_moves_bytes(unsigned int backend, const char *be)
{
	struct tpu_agent_options o = { .backends = backend };
	struct tpu_context *ca = NULL, *cb = NULL;
	struct tpu_agent *a = NULL, *b = NULL;
	struct tpu_xfer_reg *ra = NULL, *rb = NULL;
	struct tpu_xfer_remote *rm = NULL;
	struct tpu_xfer_req *req = NULL;
	static uint8_t local[LEN], back[LEN];
	uint8_t blob[TPU_XFER_BLOB_MAX];
	size_t blen = 0;
	int fd = memfd("tpu-xfer-dmabuf");
	tpu_status st;

	for (size_t i = 0; i < LEN; i++)
		local[i] = (uint8_t)(i * 13 + 5);
	if (fd < 0 || tpu_context_create(NULL, &ca) || tpu_context_create(NULL, &cb) ||
	    tpu_agent_create(ca, &o, &a) || tpu_agent_create(cb, &o, &b) ||
	    tpu_agent_register(a, local, LEN, 0, &ra)) {
		CHECK(false, "%s: set-up", be);
		goto out;
	}
	st = tpu_agent_register_dmabuf(b, fd, OFF, LEN, TPU_XFER_READ | TPU_XFER_WRITE, &rb);
	CHECK_STATUS(st, 0, "%s: a mappable buffer at an unaligned offset registers", be);
	CHECK(!st && mapped("tpu-xfer-dmabuf"), "%s: it is mapped while registered", be);
	if (st || tpu_agent_export(rb, blob, sizeof(blob), &blen) ||
	    tpu_agent_load(a, blob, blen, &rm))
		goto out;
	CHECK(!strcmp(tpu_xfer_remote_backend(rm), be) && tpu_xfer_remote_size(rm) == LEN,
	      "%s: loaded with its length", be);
	{
		struct tpu_xfer_local_elem l = { ra, 0, LEN };
		struct tpu_xfer_remote_elem r = { rm, 0, LEN };

		st = tpu_xfer_prepare(a, TPU_XFER_OP_WRITE, &l, 1, &r, 1, NULL, 0, &req);
		if (!st)
			st = tpu_xfer_post(req, NULL, NULL);
		if (!st)
			st = tpu_xfer_wait(req, 10000);
		tpu_xfer_release(req);
		req = NULL;
	}
	CHECK_STATUS(st, 0, "%s: a WRITE into the buffer", be);
	CHECK(pread(fd, back, LEN, OFF) == (ssize_t)LEN && !memcmp(back, local, LEN),
	      "%s: the buffer holds it at the offset (read through the fd)", be);
	memset(back, 0x5a, 16);
	CHECK(pwrite(fd, back, 16, OFF + LEN - 16) == (ssize_t)16, "%s: the buffer's owner writes", be);
	{
		struct tpu_xfer_local_elem l = { ra, 0, 16 };
		struct tpu_xfer_remote_elem r = { rm, LEN - 16, 16 };

		memset(local, 0, 16);
		st = tpu_xfer_prepare(a, TPU_XFER_OP_READ, &l, 1, &r, 1, NULL, 0, &req);
		if (!st)
			st = tpu_xfer_post(req, NULL, NULL);
		if (!st)
			st = tpu_xfer_wait(req, 10000);
		tpu_xfer_release(req);
		req = NULL;
	}
	CHECK(!st && !memcmp(local, back, 16), "%s: a READ of its last 16 bytes sees it (%s)", be,
	      tpu_status_name(st));
	{
		struct tpu_xfer_local_elem l = { ra, 0, 17 };
		struct tpu_xfer_remote_elem r = { rm, LEN - 16, 17 };

		CHECK_STATUS(tpu_xfer_prepare(a, TPU_XFER_OP_READ, &l, 1, &r, 1, NULL, 0, &req),
			     -EINVAL, "%s: one byte past its end is refused", be);
	}
	tpu_agent_unload(rm);
	rm = NULL;
	CHECK_STATUS(tpu_agent_deregister(rb), 0, "%s: deregistered", be);
	rb = NULL;
	CHECK(!mapped("tpu-xfer-dmabuf"), "%s: and unmapped", be);
out:
	tpu_agent_unload(rm);
	if (rb)
		tpu_agent_deregister(rb);
	tpu_agent_destroy(a);
	tpu_agent_destroy(b);
	tpu_context_destroy(ca);
	tpu_context_destroy(cb);
	if (fd >= 0)
		close(fd);
}

static void refusals(void)
{
	struct tpu_context *c = NULL;
	struct tpu_agent *a = NULL;
	struct tpu_xfer_reg *r = (struct tpu_xfer_reg *)&c;
	int fd = memfd("tpu-xfer-refused"), ro = -1, path = -1;
	char name[64];

	if (fd < 0 || tpu_context_create(NULL, &c) || tpu_agent_create(c, NULL, &a)) {
		CHECK(false, "refusals: set-up");
		goto out;
	}
	snprintf(name, sizeof(name), "/proc/self/fd/%d", fd);
	ro = open(name, O_RDONLY | O_CLOEXEC);
	path = open(name, O_PATH | O_CLOEXEC);
	CHECK_STATUS(tpu_agent_register_dmabuf(NULL, fd, 0, 1, 0, &r), -EINVAL, "no agent");
	CHECK(r == (struct tpu_xfer_reg *)&c, "*out untouched without an agent");
	CHECK_STATUS(tpu_agent_register_dmabuf(a, fd, 0, 1, 0, NULL), -EINVAL, "no out");
	CHECK_STATUS(tpu_agent_register_dmabuf(a, -1, 0, 1, 0, &r), -EINVAL, "fd -1");
	CHECK(r == NULL, "*out cleared on failure");
	CHECK_STATUS(tpu_agent_register_dmabuf(a, fd, 0, 0, 0, &r), -EINVAL, "length 0");
	CHECK_STATUS(tpu_agent_register_dmabuf(a, fd, 0, 1, 4, &r), -EINVAL, "unknown access");
	CHECK_STATUS(tpu_agent_register_dmabuf(a, fd, UINT64_MAX, 2, 0, &r), -EINVAL,
		     "offset + length wraps");
	CHECK_STATUS(tpu_agent_register_dmabuf(a, fd, BUF - 10, 11, 0, &r), -ERANGE,
		     "one byte past the buffer's end");
	CHECK_STATUS(tpu_agent_register_dmabuf(a, fd, BUF - 10, 10, 0, &r), 0,
		     "ending exactly at it");
	tpu_agent_deregister(r);
	CHECK_STATUS(tpu_agent_register_dmabuf(a, ro, 0, 10, 0, &r), -EACCES,
		     "an fd not open for writing");
	CHECK_STATUS(tpu_agent_register_dmabuf(a, path, 0, 10, 0, &r), -ENODEV,
		     "an fd that does not map (O_PATH)");
	CHECK(!mapped("tpu-xfer-refused"), "no refusal leaves a mapping");
out:
	if (ro >= 0)
		close(ro);
	if (path >= 0)
		close(path);
	tpu_agent_destroy(a);
	tpu_context_destroy(c);
	if (fd >= 0)
		close(fd);
}

void test_xfer_dmabuf(void)
{
	peer_moves_bytes(TPU_XFER_BACKEND_CMA, "cma");
	peer_moves_bytes(TPU_XFER_BACKEND_TCP, "tcp");
	refusals();
}
