// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * tpbench: how fast does a tensor move between two processes on one host?
 *
 * One run measures, for each size, every path this machine offers:
 *
 *   memcpy            one process copies between two warm buffers: the ceiling
 *   process_vm_readv  the consumer pulls from the producer's memory (the
 *                     fallback without the module; pins the source each call)
 *   kmod_copy         SEND from a pre-registered region, RECV into a
 *                     pre-registered region, completion read: one copy
 *   kmod_donate       SEND DONATE of a REGION_ALLOC buffer, RECV DONATE,
 *                     completion read: the pages change owner, no copy
 *   donate_cycle      kmod_donate plus everything a program pays to use
 *                     donation: producer REGION_ALLOC + mmap + fault-in +
 *                     munmap, consumer mmap + fault-in + munmap + RELEASE
 *
 * The parent is the consumer, a forked child the producer.  Each transfer's
 * time is the sum of the system calls on its critical path, each side timing
 * its own calls on CLOCK_MONOTONIC; the socket messages that pace the two
 * processes are not counted, just as process_vm_readv's time does not count
 * how the consumer learnt the producer's address.  Filling the source is not
 * counted for any path.  Each point is the median of --iters runs after one
 * run whose data is checked.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench_coll.h"
#include "bench_cuda.h"
#include "bench_pipe.h"
#include "bench_rdv.h"
#include "bench_uring.h"
#include "bench_xfer.h"
#include "host_state.h"
#include "json.h"
#include "peer.h"
#include "tensor.h"
#include "tpu_user.h"
#include "units.h"

#define KEY_BYTES 256
#define TIMEOUT_NS (60ull * 1000000000ull)
#define TIMEOUT_MS 60000
#define MAX_SIZES 64

enum path { P_MEMCPY, P_CMA, P_KCOPY, P_DONATE, P_DONATE_CYCLE, NPATHS };

static const char *const path_names[NPATHS] = {
	"memcpy", "process_vm_readv", "kmod_copy", "kmod_donate", "donate_cycle",
};

/* Narrow table headings, same order. */
static const char *const path_heads[NPATHS] = {
	"memcpy", "pvm_readv", "kmod_copy", "donate", "donate_cyc",
};

struct options {
	uint64_t min, max;
	unsigned int factor, iters;
	bool json, no_kmod, want[NPATHS];
	const char *dev;
};

struct bench {
	struct options o;
	uint64_t incarnation;
	bool kmod;			/* the module is used this run */
	struct tpu_probe_result probe;
	struct peer peer;
	struct tpu_endpoint *ep;	/* the consumer's */
	uint64_t sizes[MAX_SIZES];
	unsigned int nsizes;
	uint64_t median[MAX_SIZES][NPATHS];	/* ns; 0: not measured */
	uint64_t *samples;			/* o.iters entries */
};

/* Producer commands and its replies, on the socketpair. */
enum cmd { CMD_BUFFER = 1, CMD_REGISTER, CMD_SEND, CMD_DONATE, CMD_COMPLETE, CMD_FREE, CMD_QUIT };

struct cmd_msg {
	uint32_t cmd;
	uint32_t pad;
	uint64_t size;
	uint64_t iter;
};

struct reply {
	int32_t status;
	uint32_t pad;
	uint64_t addr;		/* CMD_BUFFER: the source's address */
	uint64_t checksum;	/* CMD_BUFFER, CMD_DONATE of iter 0: the source's checksum */
	uint64_t ns;		/* the timed system calls */
	uint64_t setup_ns;	/* CMD_DONATE: alloc, map, fault-in and munmap */
};

/* ------------------------------------------------------------------ */
/* Shared by both processes                                            */
/* ------------------------------------------------------------------ */

static tpu_status bench_key(const struct bench *b, const char *path, uint64_t size,
			    uint64_t iter, char *key, size_t *len)
{
	char edge[64];
	struct tpu_key k = {
		.src_device = tpu_str("/job:bench/replica:0/task:0/device:CPU:0"),
		.src_incarnation = b->incarnation,
		.dst_device = tpu_str("/job:bench/replica:0/task:1/device:CPU:0"),
		.edge_name = { edge, 0 },
		.frame_id = 0,
		.iter_id = iter,
	};

	k.edge_name.len = (size_t)snprintf(edge, sizeof(edge), "tpbench_%s_%" PRIu64, path, size);
	return tpu_key_build(&k, key, KEY_BYTES, len);
}

/*
 * Ask for transparent huge pages, as tensor allocators do for large
 * buffers; --no-thp measures with whatever the system gives by default.
 */
static bool advise_thp = true;

static void *map_anon(uint64_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	if (advise_thp && len >= (2u << 20))
		madvise(p, len, MADV_HUGEPAGE);
	/* Fault everything in now so no path pays for first touches. */
	memset(p, 0, len);
	return p;
}

/* The producer's tensor of @size and the consumer's copy of it agree on this seed. */
static uint32_t seed_of(uint64_t size)
{
	return (uint32_t)(size * 2654435761u);
}

/* ------------------------------------------------------------------ */
/* Producer                                                            */
/* ------------------------------------------------------------------ */

struct producer {
	const struct bench *b;
	struct tpu_endpoint *ep;
	void *src;
	uint64_t size;
	uint32_t region;
	bool registered;
};

static void producer_free(struct producer *pr)
{
	if (pr->registered)
		tpu_region_release(pr->ep, pr->region);
	if (pr->src)
		munmap(pr->src, pr->size);
	pr->registered = false;
	pr->src = NULL;
}

static tpu_status producer_send(struct producer *pr, const struct cmd_msg *c, struct reply *r)
{
	struct tpu_send_args s = { .region = pr->region, .len = c->size, .user_data = c->iter };
	char key[KEY_BYTES];
	uint64_t t0;
	tpu_status st = bench_key(pr->b, "copy", c->size, c->iter, key, &s.key_len);

	if (st)
		return st;
	s.key = key;
	t0 = now_ns();
	st = tpu_send(pr->ep, &s);
	r->ns = now_ns() - t0;
	return st;
}

static tpu_status producer_donate(struct producer *pr, const struct cmd_msg *c, struct reply *r)
{
	struct tpu_send_args s = { .len = c->size, .user_data = c->iter, .flags = TPU_SEND_DONATE };
	char key[KEY_BYTES];
	uint64_t t0, t1;
	void *buf;
	tpu_status st = bench_key(pr->b, "donate", c->size, c->iter, key, &s.key_len);

	if (st)
		return st;
	s.key = key;
	t0 = now_ns();
	st = tpu_region_alloc_mapped(pr->ep, c->size, TPU_MAP_POPULATE, &s.region, &buf);
	r->setup_ns = now_ns() - t0;
	if (st)
		return st;
	/* Only the checked run needs real data; the buffer is zeroed otherwise. */
	if (c->iter == 0) {
		tensor_fill(buf, c->size, seed_of(c->size));
		r->checksum = tensor_checksum(buf, c->size);
	}
	t0 = now_ns();
	tpu_region_munmap(buf, c->size);
	t1 = now_ns();
	st = tpu_send(pr->ep, &s);
	r->ns = now_ns() - t1;
	r->setup_ns += t1 - t0;
	if (st)
		tpu_region_release(pr->ep, s.region);
	return st;
}

static tpu_status producer_complete(struct producer *pr, const struct cmd_msg *c, struct reply *r)
{
	struct tpu_completion comp;
	uint64_t t0 = now_ns();
	size_t n;
	tpu_status st = tpu_completions_read(pr->ep, &comp, 1, TIMEOUT_MS, &n);

	r->ns = now_ns() - t0;
	if (st)
		return st;
	if (comp.user_data != c->iter || (!comp.status && comp.len != c->size))
		return -EBADMSG;
	return comp.status;
}

static tpu_status producer_do(struct producer *pr, const struct cmd_msg *c, struct reply *r)
{
	tpu_status st = 0;

	switch (c->cmd) {
	case CMD_BUFFER:
		producer_free(pr);
		pr->src = map_anon(c->size);
		if (!pr->src)
			return -ENOMEM;
		pr->size = c->size;
		tensor_fill(pr->src, c->size, seed_of(c->size));
		r->addr = (uintptr_t)pr->src;
		r->checksum = tensor_checksum(pr->src, c->size);
		return 0;
	case CMD_REGISTER:
		if (!pr->ep || !pr->src)
			return -EINVAL;
		if (!pr->registered) {
			st = tpu_region_register(pr->ep, pr->src, pr->size, TPU_ACCESS_READ,
						 &pr->region);
			pr->registered = !st;
		}
		return st;
	case CMD_SEND:
		return pr->registered ? producer_send(pr, c, r) : -EINVAL;
	case CMD_DONATE:
		return pr->ep ? producer_donate(pr, c, r) : -EINVAL;
	case CMD_COMPLETE:
		return pr->ep ? producer_complete(pr, c, r) : -EINVAL;
	case CMD_FREE:
		producer_free(pr);
		return 0;
	default:
		return -EINVAL;
	}
}

static int producer_main(struct peer *p, void *arg)
{
	struct producer pr = { .b = arg };
	struct cmd_msg c;
	struct reply r = { 0 };
	int domain_fd;

	/* An endpoint belongs to its opener: the producer opens its own and joins the domain. */
	if (pr.b->kmod) {
		r.status = tpu_endpoint_open(pr.b->o.dev, &pr.ep);
		if (!r.status)
			r.status = tpu_fd_recv(p->sock, &domain_fd);
		if (!r.status) {
			r.status = tpu_domain_attach(pr.ep, domain_fd, NULL);
			close(domain_fd);
		}
	}
	if (!r.status)
		r.status = tpu_cma_allow(p->pid);
	if (peer_send(p, &r, sizeof(r)) || r.status)
		return 1;
	while (!peer_recv(p, &c, sizeof(c)) && c.cmd != CMD_QUIT) {
		memset(&r, 0, sizeof(r));
		r.status = producer_do(&pr, &c, &r);
		if (peer_send(p, &r, sizeof(r)))
			break;
	}
	producer_free(&pr);
	tpu_endpoint_close(pr.ep);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Consumer                                                            */
/* ------------------------------------------------------------------ */

static tpu_status ask(struct bench *b, uint32_t cmd, uint64_t size, uint64_t iter, struct reply *r)
{
	struct cmd_msg c = { .cmd = cmd, .size = size, .iter = iter };
	int err = peer_send(&b->peer, &c, sizeof(c));

	if (!err)
		err = peer_recv(&b->peer, r, sizeof(*r));
	/* The socket failing means the producer is gone: nothing more can be measured. */
	if (err) {
		fprintf(stderr, "tpbench: lost the producer: %s\n", tpu_strerror(err));
		exit(1);
	}
	return r->status;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, unsigned int n)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void note(const struct bench *b, const char *path, uint64_t size, const char *what,
		 tpu_status st)
{
	char sz[32];

	fprintf(stderr, "tpbench: %s at %s skipped: %s: %s\n", path,
		format_size(size, sz, sizeof(sz)), what, tpu_strerror(st));
	if (st == -ENOMEM && b->kmod)
		fprintf(stderr, "tpbench:   pinned and allocated bytes count against RLIMIT_MEMLOCK:"
			" raise ulimit -l, or run as root\n");
}

static bool check(const char *path, uint64_t size, uint64_t got, uint64_t want)
{
	char sz[32];

	if (got == want)
		return true;
	fprintf(stderr, "tpbench: %s at %s delivered wrong data (checksum %016" PRIx64
		", expected %016" PRIx64 ")\n", path, format_size(size, sz, sizeof(sz)), got, want);
	return false;
}

static int run_memcpy(struct bench *b, unsigned int si, uint8_t *dst)
{
	uint64_t size = b->sizes[si], sum, t0;
	uint8_t *src = map_anon(size);
	unsigned int i;

	if (!src) {
		note(b, "memcpy", size, "allocating", -ENOMEM);
		return 0;
	}
	tensor_fill(src, size, seed_of(size));
	sum = tensor_checksum(src, size);
	for (i = 0; i <= b->o.iters; i++) {
		t0 = now_ns();
		memcpy(dst, src, size);
		/* Keep the compiler from treating the copy as dead. */
		__asm__ __volatile__("" : : "r"(dst) : "memory");
		if (i)
			b->samples[i - 1] = now_ns() - t0;
		else if (!check("memcpy", size, tensor_checksum(dst, size), sum))
			return -1;
	}
	munmap(src, size);
	b->median[si][P_MEMCPY] = median(b->samples, b->o.iters);
	return 0;
}

static int run_cma(struct bench *b, unsigned int si, uint8_t *dst, const struct reply *buf)
{
	uint64_t size = b->sizes[si], t0;
	unsigned int i;
	tpu_status st;

	memset(dst, 0, size);
	for (i = 0; i <= b->o.iters; i++) {
		t0 = now_ns();
		st = tpu_cma_read(b->peer.pid, buf->addr, dst, size);
		if (st) {
			note(b, "process_vm_readv", size, "reading the producer", st);
			return 0;
		}
		if (i)
			b->samples[i - 1] = now_ns() - t0;
		else if (!check("process_vm_readv", size, tensor_checksum(dst, size), buf->checksum))
			return -1;
	}
	b->median[si][P_CMA] = median(b->samples, b->o.iters);
	return 0;
}

static int run_kcopy(struct bench *b, unsigned int si, uint8_t *dst, const struct reply *buf)
{
	uint64_t size = b->sizes[si], t0, ns;
	struct tpu_recv_args rv = { .len = size, .timeout_ns = TIMEOUT_NS };
	char key[KEY_BYTES];
	struct reply r;
	unsigned int i;
	uint32_t region;
	tpu_status st;
	int rc = 0;

	st = ask(b, CMD_REGISTER, size, 0, &r);
	if (st) {
		note(b, "kmod_copy", size, "registering the source", st);
		return 0;
	}
	st = tpu_region_register(b->ep, dst, size, TPU_ACCESS_WRITE, &region);
	if (st) {
		note(b, "kmod_copy", size, "registering the destination", st);
		return 0;
	}
	memset(dst, 0, size);
	rv.region = region;
	rv.key = key;
	for (i = 0; i <= b->o.iters && !st; i++) {
		st = bench_key(b, "copy", size, i, key, &rv.key_len);
		if (!st)
			st = ask(b, CMD_SEND, size, i, &r);
		if (st) {
			note(b, "kmod_copy", size, "SEND", st);
			break;
		}
		ns = r.ns;
		rv.len = size;
		t0 = now_ns();
		st = tpu_recv(b->ep, &rv);
		ns += now_ns() - t0;
		if (st) {
			note(b, "kmod_copy", size, "RECV", st);
			break;
		}
		st = ask(b, CMD_COMPLETE, size, i, &r);
		if (st) {
			note(b, "kmod_copy", size, "completion", st);
			break;
		}
		ns += r.ns;
		if (i) {
			b->samples[i - 1] = ns;
		} else if (!check("kmod_copy", size, tensor_checksum(dst, size), buf->checksum)) {
			rc = -1;
			break;
		}
	}
	tpu_region_release(b->ep, region);
	if (!st && !rc)
		b->median[si][P_KCOPY] = median(b->samples, b->o.iters);
	return rc;
}

/* One donated transfer; *handoff and *cycle get its two costs. */
static tpu_status donate_once(struct bench *b, uint64_t size, unsigned int i, uint64_t *handoff,
			      uint64_t *cycle, bool *intact)
{
	struct tpu_recv_args rv = { .len = size, .timeout_ns = TIMEOUT_NS, .flags = TPU_RECV_DONATE };
	uint64_t t0, recv_ns, map_ns, sum = 0;
	char key[KEY_BYTES];
	struct reply sent, done;
	void *got;
	tpu_status st;

	st = bench_key(b, "donate", size, i, key, &rv.key_len);
	if (!st)
		st = ask(b, CMD_DONATE, size, i, &sent);
	if (st)
		return st;
	rv.key = key;
	t0 = now_ns();
	st = tpu_recv(b->ep, &rv);
	recv_ns = now_ns() - t0;
	if (st)
		return st;
	t0 = now_ns();
	st = tpu_region_mmap(b->ep, rv.mmap_offset, rv.len, TPU_MAP_POPULATE, &got);
	map_ns = now_ns() - t0;
	if (!st && i == 0)
		sum = tensor_checksum(got, rv.len);
	t0 = now_ns();
	if (!st)
		tpu_region_munmap(got, rv.len);
	tpu_region_release(b->ep, rv.region);
	map_ns += now_ns() - t0;
	if (st)
		return st;
	*intact = i != 0 || (rv.len == size && sum == sent.checksum);
	st = ask(b, CMD_COMPLETE, size, i, &done);
	*handoff = sent.ns + recv_ns + done.ns;
	*cycle = *handoff + sent.setup_ns + map_ns;
	return st;
}

static int run_donate(struct bench *b, unsigned int si)
{
	uint64_t size = b->sizes[si];
	uint64_t *cycles = b->samples + b->o.iters;
	uint64_t handoff, cycle;
	unsigned int i;
	bool intact;
	tpu_status st;

	for (i = 0; i <= b->o.iters; i++) {
		st = donate_once(b, size, i, &handoff, &cycle, &intact);
		if (st) {
			note(b, "kmod_donate", size, "transfer", st);
			return 0;
		}
		if (!intact) {
			fprintf(stderr, "tpbench: kmod_donate delivered wrong data\n");
			return -1;
		}
		if (i) {
			b->samples[i - 1] = handoff;
			cycles[i - 1] = cycle;
		}
	}
	b->median[si][P_DONATE] = median(b->samples, b->o.iters);
	b->median[si][P_DONATE_CYCLE] = median(cycles, b->o.iters);
	return 0;
}

static int run_size(struct bench *b, unsigned int si)
{
	uint64_t size = b->sizes[si];
	uint8_t *dst = map_anon(size);
	struct reply buf;
	tpu_status st;
	int rc = 0;

	if (!dst) {
		note(b, "every path", size, "allocating", -ENOMEM);
		return 0;
	}
	st = ask(b, CMD_BUFFER, size, 0, &buf);
	if (st) {
		note(b, "every two-process path", size, "producer allocating", st);
	} else {
		if (b->o.want[P_CMA])
			rc = run_cma(b, si, dst, &buf);
		if (!rc && b->kmod && b->o.want[P_KCOPY])
			rc = run_kcopy(b, si, dst, &buf);
		ask(b, CMD_FREE, 0, 0, &buf);
	}
	/* The producer's buffer is gone by now, so memcpy's two buffers fit where it was. */
	if (!rc && b->o.want[P_MEMCPY])
		rc = run_memcpy(b, si, dst);
	munmap(dst, size);
	if (!rc && b->kmod && b->o.want[P_DONATE])
		rc = run_donate(b, si);
	return rc;
}

/* ------------------------------------------------------------------ */
/* Output                                                              */
/* ------------------------------------------------------------------ */

static double gbps(uint64_t size, uint64_t ns)
{
	return ns ? (double)size / (double)ns : 0.0;
}

/* Bandwidth of @a over @b at size @si, 0 when either was not measured. */
static double ratio(const struct bench *b, unsigned int si, enum path a, enum path o)
{
	uint64_t na = b->median[si][a], no = b->median[si][o];

	return na && no ? (double)no / (double)na : 0.0;
}

static const struct {
	enum path a, b;
	const char *name;
	const char *head;
} ratios[] = {
	{ P_KCOPY, P_CMA, "kmod_copy/process_vm_readv", "copy/pvm" },
	{ P_KCOPY, P_MEMCPY, "kmod_copy/memcpy", "copy/memcpy" },
	{ P_DONATE, P_KCOPY, "kmod_donate/kmod_copy", "donate/copy" },
	{ P_DONATE_CYCLE, P_KCOPY, "donate_cycle/kmod_copy", "cycle/copy" },
	{ P_CMA, P_MEMCPY, "process_vm_readv/memcpy", "pvm/memcpy" },
};

#define NRATIOS (sizeof(ratios) / sizeof(ratios[0]))

static bool path_shown(const struct bench *b, enum path p)
{
	if ((p == P_KCOPY || p == P_DONATE || p == P_DONATE_CYCLE) && !b->kmod)
		return false;
	return b->o.want[p];
}

static void print_table(const struct bench *b, const char *title, bool bandwidth)
{
	unsigned int si, p;
	char sz[32];

	printf("\n%s\n%10s", title, "size");
	for (p = 0; p < NPATHS; p++)
		if (path_shown(b, p))
			printf(" %11s", path_heads[p]);
	printf("\n");
	for (si = 0; si < b->nsizes; si++) {
		printf("%10s", format_size(b->sizes[si], sz, sizeof(sz)));
		for (p = 0; p < NPATHS; p++) {
			uint64_t ns = b->median[si][p];

			if (!path_shown(b, p))
				continue;
			if (!ns)
				printf(" %11s", "-");
			else if (bandwidth)
				printf(" %11.2f", gbps(b->sizes[si], ns));
			else
				printf(" %11.2f", (double)ns / 1e3);
		}
		printf("\n");
	}
}

static void print_ratios(const struct bench *b)
{
	unsigned int si, r;
	char sz[32];
	bool any = false;

	for (r = 0; r < NRATIOS; r++)
		any |= path_shown(b, ratios[r].a) && path_shown(b, ratios[r].b);
	if (!any)
		return;
	printf("\nratios of bandwidth (above 1: the first is faster)\n%10s", "size");
	for (r = 0; r < NRATIOS; r++)
		if (path_shown(b, ratios[r].a) && path_shown(b, ratios[r].b))
			printf(" %11s", ratios[r].head);
	printf("\n");
	for (si = 0; si < b->nsizes; si++) {
		printf("%10s", format_size(b->sizes[si], sz, sizeof(sz)));
		for (r = 0; r < NRATIOS; r++) {
			double x = ratio(b, si, ratios[r].a, ratios[r].b);

			if (!path_shown(b, ratios[r].a) || !path_shown(b, ratios[r].b))
				continue;
			if (x)
				printf(" %10.2fx", x);
			else
				printf(" %11s", "-");
		}
		printf("\n");
	}
}

static void print_human(const struct bench *b)
{
	printf("\ncolumns: memcpy = one process; pvm_readv = process_vm_readv pull; kmod_copy = SEND +\n"
	       "RECV + completion between registered regions; donate = SEND/RECV DONATE + completion;\n"
	       "donate_cyc = donate + alloc, map, fault-in, unmap and release on both sides\n");
	print_table(b, "bandwidth, GB/s (10^9 bytes per second), median", true);
	print_table(b, "time per transfer, microseconds, median", false);
	print_ratios(b);
}

static void print_json(const struct bench *b)
{
	unsigned int si, p, r;
	struct json j;

	json_init(&j, stdout);
	json_object_begin(&j, NULL);
	json_string(&j, "tool", "tpbench");
	json_string(&j, "library", tpu_version_string());
	json_u64(&j, "iters", b->o.iters);
	json_bool(&j, "kmod", b->kmod);
	json_string(&j, "kmod_detail",
		    b->kmod ? "used" : b->o.no_kmod && b->probe.path == TPU_PATH_KMOD ?
		    "present, not used (--no-kmod)" : b->probe.detail);
	json_array_begin(&j, "results");
	for (si = 0; si < b->nsizes; si++) {
		json_object_begin(&j, NULL);
		json_u64(&j, "size", b->sizes[si]);
		for (p = 0; p < NPATHS; p++) {
			uint64_t ns = b->median[si][p];

			if (!ns) {
				json_null(&j, path_names[p]);
				continue;
			}
			json_object_begin(&j, path_names[p]);
			json_double(&j, "us", (double)ns / 1e3, 3);
			json_double(&j, "gbps", gbps(b->sizes[si], ns), 3);
			json_object_end(&j);
		}
		json_object_begin(&j, "ratios");
		for (r = 0; r < NRATIOS; r++) {
			double x = ratio(b, si, ratios[r].a, ratios[r].b);

			if (x)
				json_double(&j, ratios[r].name, x, 3);
			else
				json_null(&j, ratios[r].name);
		}
		json_object_end(&j);
		json_object_end(&j);
	}
	json_array_end(&j);
	json_object_end(&j);
	json_finish(&j);
}

/* ------------------------------------------------------------------ */
/* Set-up                                                              */
/* ------------------------------------------------------------------ */

static void usage(FILE *f)
{
	fprintf(f,
"usage: tpbench [--min SIZE] [--max SIZE] [--factor N] [--iters N] [--mode LIST]\n"
"               [--json] [--no-kmod] [--dev PATH]\n"
"\n"
"Two processes (the parent consumes, a forked child produces) move tensors of\n"
"--min to --max bytes (default 4K to 256M, times --factor each step, default 4)\n"
"and time every path; each point is the median of --iters runs (default 10)\n"
"after one run whose data is checked.  SIZE takes K, M, G suffixes.\n"
"\n"
"--mode LIST  comma-separated subset of: memcpy, cma, copy, donate (default all)\n"
"  memcpy   memcpy between two warm buffers of one process: the ceiling\n"
"  cma      process_vm_readv: the consumer pulls from the producer's buffer\n"
"  copy     kmod copy: time of SEND from a pre-registered region + RECV into a\n"
"           pre-registered region + reading the completion\n"
"  donate   kmod donate, reported twice:\n"
"           kmod_donate   SEND DONATE + RECV DONATE + reading the completion,\n"
"                         the handoff of the pages itself;\n"
"           donate_cycle  the whole cycle a program pays for a donated tensor:\n"
"                         the producer's REGION_ALLOC, mmap and fault-in (a fresh\n"
"                         zeroed buffer each time) and munmap, the consumer's mmap,\n"
"                         fault-in, munmap and REGION_RELEASE, plus the handoff.\n"
"Each side times its own system calls on CLOCK_MONOTONIC and the times are\n"
"added; the socket messages pacing the two processes and filling the source\n"
"are not counted for any path.\n"
"\n"
"tpbench uring [--size BYTES] [--rounds N] [--json]: SEND/RECV pairs through\n"
"             io_uring commands against the ioctls, at queue depth 1 and 16\n"
"tpbench pipe [--transport tcp|shm] [--channel kmod|cma|mtcp|basic] [--iters N]\n"
"             [--bw-iters N] [--json] [--rtt-only] [--one-context] [--pin same|split]:\n"
"             pipe round trip (avg, p50, p90) and\n"
"             bandwidth at 64 KiB..64 MiB per transport/channel pair\n"
"tpbench pipe --listen URL | --connect URL [--transport T] [--channel C] ...:\n"
"             the same between two hosts: --listen answers one pipe on URL\n"
"             (tcp://, rdma://), --connect measures it and prints its line\n"
"tpbench rdv [--impl inprocess|kmod|cma|all] [--iters N] [--hog N] [--pin same|split]\n"
"             [--json]:\n"
"             round trip and bandwidth of the rendezvous API, per\n"
"             implementation, with same-run references\n"
"tpbench rdv --remote [--transport shm|tcp] [--iters N] [--hog N] [--pin same|split]\n"
"             [--json]:\n"
"             the remote rendezvous between two workers against its pipe\n"
"tpbench host [--json]: the 1-minute load and the round trip of one cache line\n"
"             between two CPUs (the other benchmarks print it before and after)\n"
"tpbench cuda [--pair cpu-cuda|cuda-cpu|cuda-cuda] [--channel cuda_ipc|cuda_staged|cuda_dmabuf]\n"
"             [--transport shm|tcp] [--size BYTES] [--iters N] [--json]: CUDA\n"
"             tensors to a reader process, per device pair and channel, every\n"
"             byte checked (TPU_CUDA_DRIVER names the driver)\n"
"tpbench cuda --listen URL | --connect URL [--pair P] [--channel C] ...:\n"
"             the same between two hosts (cuda_staged unless --channel says)\n"
"--no-kmod    run only the paths that need no module (automatic when\n"
"             /dev/tensorpipe is not usable; the reason is printed)\n"
"--no-thp     do not madvise(MADV_HUGEPAGE) buffers of 2 MiB and more\n"
"--json       print the results as JSON instead of tables\n"
"--dev PATH   device node (default " TPU_DEVICE_PATH ")\n"
"\n"
"The largest size needs about twice its bytes of memory; the kmod paths pin or\n"
"allocate memory charged to RLIMIT_MEMLOCK (ulimit -l; unlimited for root).\n");
}

static int parse_modes(char *list, bool *want)
{
	char *tok, *save = NULL;

	memset(want, 0, NPATHS * sizeof(*want));
	for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (!strcmp(tok, "memcpy"))
			want[P_MEMCPY] = true;
		else if (!strcmp(tok, "cma") || !strcmp(tok, "process_vm_readv"))
			want[P_CMA] = true;
		else if (!strcmp(tok, "copy") || !strcmp(tok, "kmod_copy"))
			want[P_KCOPY] = true;
		else if (!strcmp(tok, "donate") || !strcmp(tok, "kmod_donate"))
			want[P_DONATE] = want[P_DONATE_CYCLE] = true;
		else
			return -1;
	}
	return 0;
}

static int parse_args(int argc, char **argv, struct options *o)
{
	int i;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		uint64_t n;

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			exit(0);
		} else if (!strcmp(a, "--json")) {
			o->json = true;
		} else if (!strcmp(a, "--no-kmod")) {
			o->no_kmod = true;
		} else if (!strcmp(a, "--no-thp")) {
			advise_thp = false;
		} else if (!v) {
			break;
		} else if (!strcmp(a, "--min") && !parse_size(v, &n) && n) {
			o->min = n;
			i++;
		} else if (!strcmp(a, "--max") && !parse_size(v, &n) && n) {
			o->max = n;
			i++;
		} else if (!strcmp(a, "--factor") && !parse_size(v, &n) && n >= 2 && n <= 1024) {
			o->factor = (unsigned int)n;
			i++;
		} else if (!strcmp(a, "--iters") && !parse_size(v, &n) && n >= 1 && n <= 100000) {
			o->iters = (unsigned int)n;
			i++;
		} else if (!strcmp(a, "--mode") && !parse_modes(argv[i + 1], o->want)) {
			i++;
		} else if (!strcmp(a, "--dev")) {
			o->dev = v;
			i++;
		} else {
			break;
		}
	}
	if (i < argc) {
		fprintf(stderr, "tpbench: bad argument: %s\n", argv[i]);
		return -1;
	}
	if (o->max < o->min || o->max > SIZE_MAX / 4) {
		fprintf(stderr, "tpbench: --max must be at least --min and fit in memory\n");
		return -1;
	}
	return 0;
}

/* The kmod paths pin memory: lift the soft memlock limit to the hard one. */
static void raise_memlock(void)
{
	struct rlimit rl;

	if (!getrlimit(RLIMIT_MEMLOCK, &rl) && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_MEMLOCK, &rl);
	}
}

static int start_producer(struct bench *b)
{
	struct reply r;
	int domain_fd = -1, err;
	tpu_status st = 0;

	err = peer_fork(&b->peer, producer_main, b);
	if (err) {
		fprintf(stderr, "tpbench: fork: %s\n", tpu_strerror(err));
		return -1;
	}
	if (b->kmod) {
		st = tpu_endpoint_open(b->o.dev, &b->ep);
		if (!st)
			st = tpu_domain_create(b->ep, &domain_fd, NULL);
		if (!st)
			st = tpu_domain_attach(b->ep, domain_fd, NULL);
		if (!st)
			st = tpu_fd_send(b->peer.sock, domain_fd);
		if (domain_fd >= 0)
			close(domain_fd);
	}
	if (!st)
		st = peer_recv(&b->peer, &r, sizeof(r));
	if (!st)
		st = r.status;
	if (st) {
		fprintf(stderr, "tpbench: setting up the two processes: %s (%s)\n", tpu_strerror(st),
			tpu_status_name(st));
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct bench b = {
		.o = { .min = 4096, .max = 256u << 20, .factor = 4, .iters = 10 },
		.peer = { -1, -1 },
	};
	struct cmd_msg quit = { .cmd = CMD_QUIT };
	unsigned int si, p;
	uint64_t s;
	int rc = 0;

	if (argc > 1 && !strcmp(argv[1], "uring"))
		return bench_uring_main(argc - 1, argv + 1);
	if (argc > 1 && !strcmp(argv[1], "rdv"))
		return bench_rdv_main(argc - 1, argv + 1);
	if (argc > 1 && !strcmp(argv[1], "pipe"))
		return bench_pipe_main(argc - 1, argv + 1);
	if (argc > 1 && !strcmp(argv[1], "coll"))
		return bench_coll_main(argc - 1, argv + 1);
	if (argc > 1 && !strcmp(argv[1], "cuda"))
		return bench_cuda_main(argc - 1, argv + 1);
	if (argc > 1 && !strcmp(argv[1], "host"))
		return bench_host_main(argc - 1, argv + 1);
	if (argc > 1 && !strcmp(argv[1], "xfer"))
		return bench_xfer_main(argc - 1, argv + 1);
	for (p = 0; p < NPATHS; p++)
		b.o.want[p] = true;
	if (parse_args(argc, argv, &b.o))
		return 1;
	for (s = b.o.min; s <= b.o.max && b.nsizes < MAX_SIZES; s *= b.o.factor) {
		b.sizes[b.nsizes++] = s;
		if (s > b.o.max / b.o.factor)
			break;
	}
	b.samples = calloc(2 * (size_t)b.o.iters, sizeof(*b.samples));
	if (!b.samples)
		return 1;

	tpu_probe(b.o.dev, &b.probe);
	b.kmod = b.probe.path == TPU_PATH_KMOD && !b.o.no_kmod;
	if (!b.kmod) {
		if (b.probe.path == TPU_PATH_KMOD)
			fprintf(stderr, "tpbench: --no-kmod: the module is present but not used\n");
		else
			fprintf(stderr, "tpbench: %s\ntpbench: the kmod paths are skipped (as with --no-kmod)\n",
				b.probe.detail);
	}
	if (b.probe.cma_status)
		b.o.want[P_CMA] = false;
	b.incarnation = now_ns() ^ ((uint64_t)getpid() << 32);
	raise_memlock();
	if (start_producer(&b))
		return 1;
	if (!b.o.json)
		printf("tpbench: libtpu_user %s; consumer pid %d, producer pid %d; %s;"
		       " median of %u runs after 1 checked run\n",
		       tpu_version_string(), (int)getpid(), (int)b.peer.pid,
		       b.kmod ? "kmod paths included" : "kmod paths skipped", b.o.iters);
	for (si = 0; si < b.nsizes && !rc; si++)
		rc = run_size(&b, si);
	peer_send(&b.peer, &quit, sizeof(quit));
	if (peer_wait(&b.peer))
		rc = 1;
	tpu_endpoint_close(b.ep);
	if (b.o.json)
		print_json(&b);
	else
		print_human(&b);
	free(b.samples);
	return rc ? 1 : 0;
}
