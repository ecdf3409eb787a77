// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The cuda_dmabuf channel and the dma-buf region calls under it.  It needs
 * the module (/dev/tensorpipe) and a CUDA driver that exports dma-bufs the
 * module can import: in the 6.12 VM the stand-in's exports are real
 * udmabufs over its memfds; on 6.1 (no /dev/udmabuf) and on a GPU whose
 * dma-bufs the CPU cannot map, the channel must stay out of the
 * negotiation.  Every byte is checked through the driver's own copies.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/udmabuf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda_harness.h"
#include "tap.h"
#include "tpu_user.h"

/* A udmabuf of @len bytes over a new memfd, which *memfd keeps; -1 if none. */
static int make_udmabuf(size_t len, int *memfd)
{
	struct udmabuf_create c = { .flags = UDMABUF_FLAGS_CLOEXEC, .size = len };
	int dev = open("/dev/udmabuf", O_RDWR | O_CLOEXEC), fd = -1;

	*memfd = memfd_create("tpu-unit-udmabuf", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (dev >= 0 && *memfd >= 0 && !ftruncate(*memfd, (off_t)len) &&
	    !fcntl(*memfd, F_ADD_SEALS, F_SEAL_SHRINK)) {
		c.memfd = (uint32_t)*memfd;
		fd = ioctl(dev, UDMABUF_CREATE, &c);
	}
	if (dev >= 0)
		close(dev);
	return fd;
}

/*
 * The region calls over a udmabuf: a tensor sent from ordinary memory
 * lands in the imported region (seen through the memfd), and an exported
 * region imported again is the same pages.
 */
static void region_calls(struct tpu_endpoint *ep)
{
	size_t len = 3 * 4096;
	uint8_t *src = malloc(len), *seen = MAP_FAILED, *mapped = NULL;
	uint32_t h_src = 0, h_dst = 0, h_alloc = 0, h_again = 0;
	uint64_t got_len = 0, exp_size = 0;
	int memfd = -1, ub = make_udmabuf(len, &memfd), exp_fd = -1, domain = -1;
	struct tpu_send_args s = { .key = "dmabuf/k", .key_len = 8 };
	struct tpu_recv_args r = { .key = "dmabuf/k", .key_len = 8 };
	struct tpu_completion c;
	size_t n = 0;
	bool ok;

	CHECK(ub >= 0, "cuda_dmabuf: a udmabuf to import");
	if (ub < 0 || !src)
		goto out;
	pat_fill(src, len, 7);
	ok = !tpu_region_import(ep, ub, TPU_ACCESS_WRITE, &h_dst, &got_len);
	CHECK(ok && got_len == len, "cuda_dmabuf: tpu_region_import of a udmabuf gives its length (%llu)",
	      (unsigned long long)got_len);
	close(ub);
	ub = -1;
	ok = !tpu_region_register(ep, src, len, TPU_ACCESS_READ, &h_src) &&
	     !tpu_domain_create(ep, &domain, NULL) && !tpu_domain_attach(ep, domain, NULL);
	s.region = h_src;
	s.len = len;
	r.region = h_dst;
	r.len = len;
	ok = ok && !tpu_send(ep, &s) && !tpu_recv(ep, &r) && r.len == len &&
	     !tpu_completions_read(ep, &c, 1, 1000, &n) && n == 1 && c.status == 0;
	seen = mmap(NULL, len, PROT_READ, MAP_SHARED, memfd, 0);
	CHECK(ok && seen != MAP_FAILED && pat_holds(seen, len, 7),
	      "cuda_dmabuf: a RECV into an imported region lands in the exporter's pages "
	      "(the udmabuf was closed after the import)");
	CHECK_STATUS(tpu_region_import(ep, memfd, TPU_ACCESS_READ, &h_again, NULL), -EINVAL,
		     "cuda_dmabuf: importing a descriptor that is not a dma-buf is -EINVAL");
	ok = !tpu_region_alloc_mapped(ep, 4096, 0, &h_alloc, (void **)&mapped);
	if (ok)
		memset(mapped, 0x5a, 4096);
	ok = ok && !tpu_region_export(ep, h_alloc, &exp_fd, &exp_size) && exp_size == 4096 &&
	     !tpu_region_import(ep, exp_fd, TPU_ACCESS_READ, &h_again, &got_len) && got_len == 4096;
	CHECK(ok, "cuda_dmabuf: tpu_region_export, then tpu_region_import of its dma-buf");
	CHECK_STATUS(tpu_region_export(ep, h_src, &(int){ 0 }, NULL), -EINVAL,
		     "cuda_dmabuf: exporting a registered (not allocated) region is -EINVAL");
out:
	if (h_again)
		tpu_region_release(ep, h_again);
	if (exp_fd >= 0)
		close(exp_fd);
	if (mapped)
		munmap(mapped, 4096);
	if (h_alloc)
		tpu_region_release(ep, h_alloc);
	if (seen != MAP_FAILED)
		munmap(seen, len);
	if (h_src)
		tpu_region_release(ep, h_src);
	if (h_dst)
		tpu_region_release(ep, h_dst);
	if (domain >= 0)
		close(domain);
	if (ub >= 0)
		close(ub);
	if (memfd >= 0)
		close(memfd);
	free(src);
}

/* Each device pair through cuda_dmabuf beside kmod, and nothing left behind. */
static void pairs(const char *url, uint32_t dev1)
{
	unsigned long allocs0 = 0, allocs1 = 0, live, opened;
	int fds0 = count_fds(), fds1;

	if (standin_counts)
		standin_counts(&allocs0, &live, &opened);
	cuda_pairs(url, "kmod,cuda_dmabuf", "cuda_dmabuf", "cuda_dmabuf", "kmod", dev1);
	fds1 = count_fds();
	if (standin_counts)
		standin_counts(&allocs1, &live, &opened);
	CHECK(fds1 == fds0 && allocs1 == allocs0,
	      "cuda_dmabuf: no descriptor or device allocation left behind (fds %d -> %d, "
	      "allocations %lu -> %lu)", fds0, fds1, allocs0, allocs1);
}

/* No module, or no dma-buf export: CUDA pairs get no cuda_dmabuf. */
static void not_offered(const char *url, const char *why)
{
	struct pair pp;
	bool ok = pair_open(&pp, url, "kmod,cuda_dmabuf,cuda_staged");

	CHECK(ok && !strcmp(tpu_pipe_channel(pp.server, TPU_DEVICE_CUDA, TPU_DEVICE_CUDA),
			    "cuda_staged") &&
	      !strcmp(tpu_pipe_channel(pp.server, TPU_DEVICE_CPU, TPU_DEVICE_CUDA), "cuda_staged"),
	      "cuda_dmabuf: %s: CUDA pairs over %s fall back to cuda_staged", why, url);
	pair_close(&pp);
}

void test_cuda_dmabuf(void)
{
	struct tpu_endpoint *ep = NULL;
	struct tpu_info info;
	char shm[64];
	uint32_t dev1;

	snprintf(shm, sizeof(shm), "shm://tpu-unit-dmabuf-%d", (int)getpid());
	if (!cuda_harness_open("cuda_dmabuf"))
		return;
	dev1 = tpu__cuda_ndevices() > 1 ? 1 : 0;
	if (tpu_endpoint_open(NULL, &ep)) {
		not_offered(shm, "without the module");
		CHECK(true, "cuda_dmabuf # SKIP no %s: the module is not loaded", TPU_DEVICE_PATH);
		goto out;
	}
	if (tpu_endpoint_info(ep, &info) || !(info.features & TPU_FEAT_DMABUF)) {
		not_offered(shm, "a module without TPU_FEAT_DMABUF");
		CHECK(true, "cuda_dmabuf # SKIP the module lacks TPU_FEAT_DMABUF");
		goto out;
	}
	if (access("/dev/udmabuf", F_OK)) {
		not_offered(shm, "no /dev/udmabuf for the stand-in's exports");
		CHECK(true, "cuda_dmabuf # SKIP no /dev/udmabuf (Linux 6.12 has it; 6.1 does not)");
		goto out;
	}
	if (standin_counts && getenv("TPU_CUDA_STANDIN_DMABUF") &&
	    !strcmp(getenv("TPU_CUDA_STANDIN_DMABUF"), "0")) {
		not_offered(shm, "a device that cannot export dma-bufs");
		goto out;
	}
	region_calls(ep);
	if (!standin_counts) {
		struct pair pp;
		bool offered = pair_open(&pp, shm, "kmod,cuda_dmabuf") &&
			       !strcmp(tpu_pipe_channel(pp.server, TPU_DEVICE_CUDA, TPU_DEVICE_CUDA),
				       "cuda_dmabuf");

		pair_close(&pp);
		/* A real GPU's dma-bufs may offer the CPU no mapping (NVIDIA's do not). */
		if (!offered) {
			CHECK(true, "cuda_dmabuf # SKIP the module cannot import this driver's "
			      "dma-bufs (TPU_LOG=debug says why)");
			goto out;
		}
	}
	pairs(shm, dev1);
	stream_order(shm, "kmod,cuda_dmabuf", "cuda_dmabuf");
out:
	tpu_endpoint_close(ep);
	cuda_harness_close();
}
