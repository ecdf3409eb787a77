// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * tpbench xfer: READ and WRITE batches of one block size between two
 * agents (this process posts, a forked child is the target), per batch
 * size, against same-run references on the same pieces: raw
 * process_vm_readv/writev with the same iovecs (1024 a call) to the
 * child's pid, and memcpy between two buffers of this process.  The
 * remote pieces are spread over the child's buffer in a shuffled order,
 * as KV-cache blocks are.  Each point is the best of --reps runs of
 * enough posts to move about 64 MiB; a post is prepared once.
 *
 *   tpbench xfer [--backend cma|tcp|kmod|rdma] [--mem MiB] [--reps N] [--mib N]
 *                [--blocks B,B,...] [--batches N,N,...]
 *
 * --mib: about how many MiB each rep moves (64).  With rdma the raw
 * references are perftest's ib_write_bw/ib_read_bw, run beside it by
 * tests/vm/xfer-rdma-bench.sh; the process_vm_* and memcpy columns are
 * then left out (0).
 *
 * Columns: op, block, batch, GB/s of xfer, of process_vm_*, of memcpy,
 * xfer over process_vm_*, microseconds per batch of xfer and of
 * process_vm_*, and the overhead per batch against the goal (2 us + 100
 * ns per element).  With kmod (both agents in one module domain) two more:
 * GB/s of the module's own two-sided copy of the same pieces (a SEND and
 * a RECV per piece between two endpoints of this process, the pieces
 * pinned) and xfer over it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_xfer.h"
#include "tpu_user.h"

static uint64_t ns_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * The target: register @mem bytes, send the blob, live until the pipe
 * closes.  @dfd: the module domain to join (kmod), or -1.
 */
static int child_main(int wfd, size_t mem, int dfd)
{
	uint8_t blob[TPU_XFER_BLOB_MAX], c;
	struct tpu_context *ctx;
	struct tpu_agent *a;
	struct tpu_xfer_reg *r;
	uint8_t *m = malloc(mem);
	size_t n;

	if (!m)
		return 1;
	memset(m, 0x5c, mem);
	if (tpu_context_create(NULL, &ctx) || tpu_agent_create(ctx, NULL, &a) ||
	    (dfd >= 0 && tpu_agent_use_domain(a, dfd)) ||
	    tpu_agent_register(a, m, mem, TPU_XFER_READ | TPU_XFER_WRITE, &r) ||
	    tpu_agent_export(r, blob, sizeof(blob), &n) || write(wfd, &n, sizeof(n)) != sizeof(n) ||
	    write(wfd, blob, n) != (ssize_t)n || write(wfd, &m, sizeof(m)) != sizeof(m))
		return 1;
	while (read(wfd, &c, 1) > 0)
		;
	tpu_agent_destroy(a);
	tpu_context_destroy(ctx);
	return 0;
}

struct point {
	double xfer_ns, pvm_ns, mcpy_ns, two_ns;	/* per batch, best rep */
};

static double best_of(unsigned int reps, unsigned int iters, int (*fn)(void *), void *arg)
{
	double best = 1e30;
	unsigned int r, i;

	for (r = 0; r < reps; r++) {
		uint64_t t0 = ns_now();

		for (i = 0; i < iters; i++)
			if (fn(arg))
				return -1;
		if ((double)(ns_now() - t0) / iters < best)
			best = (double)(ns_now() - t0) / iters;
	}
	return best;
}

struct run {
	struct tpu_xfer_req *req;
	pid_t pid;
	int write;
	struct iovec *liov, *riov;
	size_t n;
	uint8_t *dst;			/* memcpy: a second local buffer */
	/* kmod's two-sided reference: @ep[0] has @local, @ep[1] has @dst */
	struct tpu_endpoint *ep[2];
	uint32_t reg[2];
	uint8_t *local;
	size_t blk;
	uint64_t key;
};

/*
 * The module's two-sided copy of the same pieces: SEND from one endpoint,
 * RECV into the other, one pair per piece; completions read as they come.
 */
static int do_two_sided(void *arg)
{
	struct run *r = arg;
	struct tpu_endpoint *from = r->ep[r->write ? 0 : 1], *to = r->ep[r->write ? 1 : 0];
	uint32_t rfrom = r->reg[r->write ? 0 : 1], rto = r->reg[r->write ? 1 : 0];
	struct tpu_completion c[64];
	size_t i, unread = 0, got;

	for (i = 0; i < r->n; i++) {
		uint64_t key = ++r->key;
		uint64_t loff = (uint64_t)((uint8_t *)r->liov[i].iov_base - r->local);
		uint64_t roff = (uint64_t)((uint8_t *)r->riov[i].iov_base - r->dst);
		struct tpu_send_args s = { .key = &key, .key_len = sizeof(key), .region = rfrom,
					   .offset = r->write ? loff : roff, .len = r->blk };
		struct tpu_recv_args v = { .key = &key, .key_len = sizeof(key), .region = rto,
					   .offset = r->write ? roff : loff, .len = r->blk };

		if (tpu_send(from, &s) || tpu_recv(to, &v))
			return -1;
		if (++unread == 64) {
			while (unread) {
				if (tpu_completions_read(from, c, unread, 1000, &got))
					return -1;
				unread -= got;
			}
		}
	}
	while (unread) {
		if (tpu_completions_read(from, c, unread, 1000, &got))
			return -1;
		unread -= got;
	}
	return 0;
}

static int do_xfer(void *arg)
{
	struct run *r = arg;

	return tpu_xfer_post(r->req, NULL, NULL) || tpu_xfer_wait(r->req, 60000);
}

static int do_pvm(void *arg)
{
	struct run *r = arg;
	size_t i;

	for (i = 0; i < r->n; i += 1024) {
		size_t k = r->n - i < 1024 ? r->n - i : 1024;
		ssize_t got = r->write ? process_vm_writev(r->pid, r->liov + i, k, r->riov + i, k, 0)
				       : process_vm_readv(r->pid, r->liov + i, k, r->riov + i, k, 0);

		if (got < 0)
			return -1;
	}
	return 0;
}

static int do_memcpy(void *arg)
{
	struct run *r = arg;
	size_t i;

	/* The same pieces, the remote side's layout in a buffer of this process. */
	for (i = 0; i < r->n; i++) {
		if (r->write)
			memcpy(r->riov[i].iov_base, r->liov[i].iov_base, r->liov[i].iov_len);
		else
			memcpy(r->liov[i].iov_base, r->riov[i].iov_base, r->liov[i].iov_len);
	}
	return 0;
}

/* "a,b,c" into @out (at most 16); false if malformed. */
static bool parse_list(const char *s, size_t *out, size_t *n)
{
	char *e;

	*n = 0;
	while (*s && *n < 16) {
		unsigned long v = strtoul(s, &e, 0);

		if (e == s || !v)
			return false;
		if (*e == 'k' || *e == 'K')
			v <<= 10, e++;
		else if (*e == 'm' || *e == 'M')
			v <<= 20, e++;
		out[(*n)++] = v;
		if (*e != ',')
			return !*e;
		s = e + 1;
	}
	return *n > 0 && !*s;
}

int bench_xfer_main(int argc, char **argv)
{
	size_t blocks[16] = { 4096, 65536, 1 << 20 }, nblocks = 3;
	size_t batches[16] = { 1, 4, 16, 64, 256, 1024 }, nbatches = 6;
	size_t mib = 64;
	unsigned int backend = TPU_XFER_BACKEND_CMA, reps = 5;
	struct tpu_endpoint *dep = NULL, *ep2[2] = { NULL, NULL };
	uint32_t reg2[2] = { 0, 0 };
	int dfd = -1;
	size_t mem = 256u << 20, bi, ni, i;
	struct tpu_agent_options o = { 0 };
	struct tpu_context *ctx = NULL;
	struct tpu_agent *a = NULL;
	struct tpu_xfer_reg *lr = NULL;
	struct tpu_xfer_remote *rm = NULL;
	uint8_t blob[TPU_XFER_BLOB_MAX], *local, *dst;
	uint8_t *rbase;		/* the raw references' address of the child's buffer */
	int sv[2], op, rc = 0;
	size_t blen;
	pid_t child;
	tpu_status st;

	for (i = 1; i < (size_t)argc; i++) {
		if (!strcmp(argv[i], "--backend") && i + 1 < (size_t)argc) {
			i++;
			backend = !strcmp(argv[i], "tcp")  ? TPU_XFER_BACKEND_TCP :
				  !strcmp(argv[i], "kmod") ? TPU_XFER_BACKEND_KMOD :
				  !strcmp(argv[i], "rdma") ? TPU_XFER_BACKEND_RDMA :
							     TPU_XFER_BACKEND_CMA;
		} else if (!strcmp(argv[i], "--blocks") && i + 1 < (size_t)argc &&
			   parse_list(argv[i + 1], blocks, &nblocks)) {
			i++;
		} else if (!strcmp(argv[i], "--batches") && i + 1 < (size_t)argc &&
			   parse_list(argv[i + 1], batches, &nbatches)) {
			i++;
		} else if (!strcmp(argv[i], "--mib") && i + 1 < (size_t)argc) {
			mib = (size_t)strtoul(argv[++i], NULL, 0);
		} else if (!strcmp(argv[i], "--mem") && i + 1 < (size_t)argc) {
			mem = (size_t)strtoul(argv[++i], NULL, 0) << 20;
		} else if (!strcmp(argv[i], "--reps") && i + 1 < (size_t)argc) {
			reps = (unsigned int)strtoul(argv[++i], NULL, 0);
		} else {
			fprintf(stderr, "usage: tpbench xfer [--backend cma|tcp|kmod|rdma] [--mem MiB] "
					"[--reps N] [--mib N] [--blocks B,..] [--batches N,..]\n");
			return 2;
		}
	}
	if (backend == TPU_XFER_BACKEND_KMOD) {
		/* One domain for both agents; the child inherits its descriptor. */
		st = tpu_endpoint_open(NULL, &dep);
		if (!st)
			st = tpu_domain_create(dep, &dfd, NULL);
		if (st) {
			fprintf(stderr, "tpbench xfer: kmod: %s\n", tpu_strerror(st));
			return 1;
		}
	}
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return 1;
	child = fork();
	if (child == 0) {
		close(sv[0]);
		_exit(child_main(sv[1], mem, dfd));
	}
	close(sv[1]);
	if (read(sv[0], &blen, sizeof(blen)) != sizeof(blen) || blen > sizeof(blob) ||
	    read(sv[0], blob, blen) != (ssize_t)blen ||
	    read(sv[0], &rbase, sizeof(rbase)) != sizeof(rbase)) {
		fprintf(stderr, "tpbench xfer: the target did not start\n");
		return 1;
	}
	local = malloc(mem);
	dst = malloc(mem);
	memset(local, 0x3a, mem);
	memset(dst, 0x3b, mem);
	o.backends = backend;
	st = tpu_context_create(NULL, &ctx);
	if (!st)
		st = tpu_agent_create(ctx, &o, &a);
	if (!st && dfd >= 0)
		st = tpu_agent_use_domain(a, dfd);
	for (i = 0; !st && dfd >= 0 && i < 2; i++) {
		st = tpu_endpoint_open(NULL, &ep2[i]);
		if (!st)
			st = tpu_domain_attach(ep2[i], dfd, NULL);
		if (!st)
			st = tpu_region_register(ep2[i], i ? dst : local, mem,
						 TPU_ACCESS_READ | TPU_ACCESS_WRITE, &reg2[i]);
	}
	if (!st)
		st = tpu_agent_register(a, local, mem, 0, &lr);
	if (!st)
		st = tpu_agent_load(a, blob, blen, &rm);
	if (st) {
		fprintf(stderr, "tpbench xfer: %s\n", tpu_strerror(st));
		rc = 1;
		goto out;
	}
	printf("# tpbench xfer: backend %s, target pid %d, best of %u\n",
	       tpu_xfer_remote_backend(rm), (int)child, reps);
	printf("%-5s %7s %5s %8s %8s %8s %6s %9s %9s %9s %9s", "op", "block", "batch", "xfer",
	       "pvm", "memcpy", "x/pvm", "xfer_us", "pvm_us", "ovh_us", "goal_us");
	printf(dfd >= 0 ? " %8s %6s\n" : "\n", "2sided", "x/2s");
	for (op = 0; op < 2; op++)
		for (bi = 0; bi < nblocks; bi++)
			for (ni = 0; ni < nbatches; ni++) {
				size_t blk = blocks[bi], n = batches[ni], slots = mem / blk;
				struct tpu_xfer_local_elem *le;
				struct tpu_xfer_remote_elem *re;
				struct run r = { .pid = child, .write = op, .n = n, .dst = dst,
						 .ep = { ep2[0], ep2[1] }, .reg = { reg2[0], reg2[1] },
						 .local = local, .blk = blk };
				unsigned int iters;
				struct point pt;
				double gb;

				if (n > slots)
					continue;
				le = calloc(n, sizeof(*le));
				re = calloc(n, sizeof(*re));
				r.liov = calloc(n, sizeof(*r.liov));
				r.riov = calloc(n, sizeof(*r.riov));
				for (i = 0; i < n; i++) {
					/* A stride coprime with the slots shuffles the remote order. */
					size_t slot = (i * 7919) % slots;

					le[i] = (struct tpu_xfer_local_elem){ lr, i * blk, blk };
					re[i] = (struct tpu_xfer_remote_elem){ rm, slot * blk, blk };
					r.liov[i].iov_base = local + i * blk;
					r.liov[i].iov_len = blk;
					r.riov[i].iov_base = rbase + slot * blk;
					r.riov[i].iov_len = blk;
				}
				st = tpu_xfer_prepare(a, op ? TPU_XFER_OP_WRITE : TPU_XFER_OP_READ, le, n, re,
						      n, NULL, 0, &r.req);
				if (st) {
					fprintf(stderr, "prepare: %s\n", tpu_strerror(st));
					rc = 1;
					goto out;
				}
				/* About 64 MiB a rep, at least 3 and at most 2000 posts. */
				iters = (unsigned int)((mib << 20) / (n * blk));
				iters = iters < 3 ? 3 : iters > 2000 ? 2000 : iters;
				do_xfer(&r);	/* warm: pages faulted, caches */
				pt.xfer_ns = best_of(reps, iters, do_xfer, &r);
				pt.pvm_ns = pt.mcpy_ns = 1e30;	/* rdma: references run beside */
				if (backend != TPU_XFER_BACKEND_RDMA) {
					do_pvm(&r);
					pt.pvm_ns = best_of(reps, iters, do_pvm, &r);
					/* memcpy: the same layout in @dst */
					for (i = 0; i < n; i++)
						r.riov[i].iov_base =
							dst + (size_t)((i * 7919) % slots) * blk;
					pt.mcpy_ns = best_of(reps, iters, do_memcpy, &r);
				}
				pt.two_ns = dfd >= 0 ? best_of(reps, iters, do_two_sided, &r) : 1;
				if (pt.xfer_ns < 0 || pt.pvm_ns < 0 || pt.two_ns < 0) {
					fprintf(stderr, "tpbench xfer: a transfer failed\n");
					rc = 1;
				}
				gb = (double)(n * blk);
				printf("%-5s %7zu %5zu %8.3f %8.3f %8.3f %6.2f %9.2f %9.2f %9.2f %9.2f",
				       op ? "WRITE" : "READ", blk, n, gb / pt.xfer_ns, gb / pt.pvm_ns,
				       gb / pt.mcpy_ns, pt.pvm_ns < 1e29 ? pt.pvm_ns / pt.xfer_ns : 0,
				       pt.xfer_ns / 1e3, pt.pvm_ns < 1e29 ? pt.pvm_ns / 1e3 : 0,
				       pt.pvm_ns < 1e29 ? (pt.xfer_ns - pt.pvm_ns) / 1e3 : 0,
				       2.0 + 0.1 * n);
				if (dfd >= 0)
					printf(" %8.3f %6.2f", gb / pt.two_ns, pt.two_ns / pt.xfer_ns);
				printf("\n");
				fflush(stdout);
				free(le);
				free(re);
				tpu_xfer_release(r.req);
				free(r.liov);
				free(r.riov);
			}
out:
	tpu_agent_destroy(a);
	tpu_context_destroy(ctx);
	tpu_endpoint_close(ep2[0]);
	tpu_endpoint_close(ep2[1]);
	tpu_endpoint_close(dep);
	if (dfd >= 0)
		close(dfd);
	close(sv[0]);
	waitpid(child, NULL, 0);
	free(local);
	free(dst);
	return rc;
}
