// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * tpdemo: two processes hand float32 tensors to each other by TensorFlow
 * rendezvous key.
 *
 * The parent is the consumer: it opens /dev/tensorpipe, creates a domain and
 * passes the domain's descriptor to the forked producer over a Unix
 * socketpair; the producer attaches to it.  Tensors from 4 KiB to 16 MiB then
 * travel through the module, some posted before the consumer asks for them,
 * some after, and the last one donated (its pages change owner, no copy).
 * The socket only carries checksums and pacing; tensor bytes never touch it.
 *
 * Without the module the demo says why and shows the fallback instead: the
 * consumer pulls each tensor out of the producer with process_vm_readv.
 *
 * usage: tpdemo [--dev PATH] [--no-kmod]
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "peer.h"
#include "tensor.h"
#include "tpu_user.h"
#include "units.h"

#define KIB 1024u
#define MIB (1024u * 1024u)
#define BUF_BYTES (16 * MIB)
#define KEY_BYTES 512
#define RECV_TIMEOUT_NS (10ull * 1000000000ull)
#define COMPLETION_TIMEOUT_MS 10000
/* How long the producer lets a waiting RECV sit before posting the key. */
#define LATE_SEND_NS (20 * 1000 * 1000)

struct demo_tensor {
	uint32_t bytes;
	bool recv_first;	/* the consumer asks before the producer posts */
	bool donate;
	const char *edge;
};

static const struct demo_tensor tensors[] = {
	{ 4 * KIB, false, false, "edge_1_embedding" },
	{ 64 * KIB, true, false, "edge_2_conv1" },
	{ 1 * MIB, false, false, "edge_3_conv2" },
	{ 4 * MIB, true, false, "edge_4_dense" },
	{ 16 * MIB, false, false, "edge_5_logits" },
	{ 16 * MIB, true, true, "edge_6_gradients" },
};

#define NTENSORS (sizeof(tensors) / sizeof(tensors[0]))

/* Control messages on the socketpair. */
enum msg_kind {
	MSG_READY = 1,		/* producer -> consumer: attached / ready */
	MSG_WANT,		/* consumer -> producer: about to wait for tensor @index */
	MSG_POSTED,		/* producer -> consumer: tensor @index posted (or, CMA, at @addr) */
	MSG_TAKEN,		/* consumer -> producer: tensor @index received and checked */
	MSG_COMPLETED,		/* producer -> consumer: completion for @index read */
};

struct msg {
	uint32_t kind;
	uint32_t index;
	int32_t status;		/* the sender's failure, or the completion's status */
	uint32_t pad;
	uint64_t checksum;
	uint64_t addr;		/* CMA: where the producer holds the tensor */
	uint64_t ns;		/* duration the sender measured */
	uint64_t len;		/* completion: bytes delivered */
};

struct demo {
	const char *dev;
	uint64_t incarnation;
};

static int fail(const char *who, const char *what, tpu_status st)
{
	fprintf(stderr, "tpdemo: %s: %s: %s (%s)\n", who, what, tpu_strerror(st),
		tpu_status_name(st));
	return 1;
}

static int send_msg(const struct peer *p, uint32_t kind, uint32_t index, struct msg *m)
{
	m->kind = kind;
	m->index = index;
	return peer_send(p, m, sizeof(*m));
}

/* Receive a message of the expected kind; a producer failure arrives as its status. */
static int recv_msg(const struct peer *p, uint32_t kind, struct msg *m)
{
	int err = peer_recv(p, m, sizeof(*m));

	if (err)
		return err;
	if (m->status && kind != MSG_COMPLETED)
		return m->status;
	return m->kind == kind ? 0 : -EBADMSG;
}

static int build_key(const struct demo *d, const struct demo_tensor *t, char *key, size_t *len)
{
	struct tpu_key k = {
		.src_device = tpu_str("/job:worker/replica:0/task:0/device:CPU:0"),
		.src_incarnation = d->incarnation,
		.dst_device = tpu_str("/job:worker/replica:0/task:1/device:CPU:0"),
		.edge_name = tpu_str(t->edge),
		.frame_id = 0,
		.iter_id = 0,
	};

	return tpu_key_build(&k, key, KEY_BYTES, len);
}

static void *map_anon(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	/* Touch every page: a READ-only registration pins only pages present now. */
	memset(p, 0, len);
	return p;
}

static double us(uint64_t ns)
{
	return (double)ns / 1e3;
}

static double gbps(uint64_t bytes, uint64_t ns)
{
	return ns ? (double)bytes / (double)ns : 0.0;
}

static void sleep_ns(long ns)
{
	struct timespec ts = { 0, ns };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* ------------------------------------------------------------------ */
/* Through the module                                                  */
/* ------------------------------------------------------------------ */

/* Producer: post one tensor, copied from the registered buffer or donated. */
static tpu_status produce_one(struct tpu_endpoint *ep, const struct demo *d, uint32_t i,
			      void *buf, uint32_t region, struct msg *m)
{
	const struct demo_tensor *t = &tensors[i];
	struct tpu_send_args s = { .len = t->bytes, .user_data = i };
	char key[KEY_BYTES];
	uint64_t t0;
	tpu_status st;

	st = build_key(d, t, key, &s.key_len);
	if (st)
		return st;
	s.key = key;
	if (t->donate) {
		/* A donated buffer comes from the module and is unmapped before it is sent. */
		st = tpu_region_alloc_mapped(ep, t->bytes, 0, &s.region, &buf);
		if (st)
			return st;
		tensor_fill(buf, t->bytes, i);
		m->checksum = tensor_checksum(buf, t->bytes);
		tpu_region_munmap(buf, t->bytes);
		s.flags = TPU_SEND_DONATE;
	} else {
		tensor_fill(buf, t->bytes, i);
		m->checksum = tensor_checksum(buf, t->bytes);
		s.region = region;
	}
	t0 = now_ns();
	st = tpu_send(ep, &s);
	m->ns = now_ns() - t0;
	return st;
}

static int producer_kmod(struct peer *p, void *arg)
{
	const struct demo *d = arg;
	struct tpu_endpoint *ep;
	struct tpu_completion c;
	struct msg m = { 0 };
	uint32_t region, i;
	int domain_fd = -1;
	size_t n;
	void *buf;
	tpu_status st;

	st = tpu_endpoint_open(d->dev, &ep);
	if (!st)
		st = tpu_fd_recv(p->sock, &domain_fd);
	if (!st)
		st = tpu_domain_attach(ep, domain_fd, NULL);
	if (domain_fd >= 0)
		close(domain_fd);
	buf = st ? NULL : map_anon(BUF_BYTES);
	if (!st && !buf)
		st = -ENOMEM;
	if (!st)
		st = tpu_region_register(ep, buf, BUF_BYTES, TPU_ACCESS_READ, &region);
	m.status = st;
	if (send_msg(p, MSG_READY, 0, &m) || st)
		return 1;

	for (i = 0; i < NTENSORS; i++) {
		memset(&m, 0, sizeof(m));
		if (tensors[i].recv_first) {
			if (recv_msg(p, MSG_WANT, &m))
				return 1;
			sleep_ns(LATE_SEND_NS);
		}
		m.status = produce_one(ep, d, i, buf, region, &m);
		if (send_msg(p, MSG_POSTED, i, &m) || m.status)
			return 1;
		if (recv_msg(p, MSG_TAKEN, &m))
			return 1;
		/* Only now may the source buffer be written again. */
		memset(&m, 0, sizeof(m));
		m.status = tpu_completions_read(ep, &c, 1, COMPLETION_TIMEOUT_MS, &n);
		if (!m.status) {
			m.status = c.status;
			m.len = c.len;
			if (c.user_data != i)
				m.status = -EBADMSG;
		}
		if (send_msg(p, MSG_COMPLETED, i, &m))
			return 1;
	}
	tpu_endpoint_close(ep);
	return 0;
}

/* Consumer: take one tensor, check it, and tell the story. */
static int consume_one(struct tpu_endpoint *ep, const struct peer *p, const struct demo *d,
		       uint32_t i, void *buf, uint32_t region)
{
	const struct demo_tensor *t = &tensors[i];
	struct tpu_recv_args r = { .len = t->bytes, .timeout_ns = RECV_TIMEOUT_NS };
	char key[KEY_BYTES], sz[32];
	struct msg m = { 0 };
	uint64_t t0, recv_ns, sum;
	void *got = buf;
	tpu_status st;
	int err;

	st = build_key(d, t, key, &r.key_len);
	if (st)
		return fail("consumer", "building the key", st);
	r.key = key;
	if (t->donate)
		r.flags = TPU_RECV_DONATE;
	else
		r.region = region;

	printf("[%u] %s float32[%u]  key %s\n", i + 1, format_size(t->bytes, sz, sizeof(sz)),
	       t->bytes / 4, key);
	if (t->recv_first) {
		if ((err = send_msg(p, MSG_WANT, i, &m)))
			return fail("consumer", "asking the producer", err);
	} else if ((err = recv_msg(p, MSG_POSTED, &m))) {
		return fail("consumer", "waiting for the producer", err);
	}

	t0 = now_ns();
	st = tpu_recv(ep, &r);
	recv_ns = now_ns() - t0;
	if (st)
		return fail("consumer", "RECV", st);
	if (t->recv_first && (err = recv_msg(p, MSG_POSTED, &m)))
		return fail("consumer", "waiting for the producer", err);
	if (t->donate) {
		st = tpu_region_mmap(ep, r.mmap_offset, r.len, 0, &got);
		if (st)
			return fail("consumer", "mapping the donated region", st);
	}
	sum = tensor_checksum(got, r.len);
	if (t->donate) {
		tpu_region_munmap(got, r.len);
		tpu_region_release(ep, r.region);
	}
	if (r.len != t->bytes || sum != m.checksum) {
		fprintf(stderr, "tpdemo: consumer: tensor %u damaged: %" PRIu64 " bytes, checksum %016"
			PRIx64 ", expected %016" PRIx64 "\n", i + 1, r.len, sum, m.checksum);
		return 1;
	}

	if (t->recv_first)
		printf("    recv before send: RECV waited; %.0f ms later the producer posted the key\n"
		       "    (its SEND returned in %.1f us) and RECV woke up\n",
		       LATE_SEND_NS / 1e6, us(m.ns));
	else
		printf("    send before recv: SEND returned in %.1f us; RECV found the key posted\n"
		       "    and returned in %.1f us\n", us(m.ns), us(recv_ns));
	if (t->donate)
		printf("    DONATE: the producer's pages became the consumer's region %u, no byte copied\n",
		       r.region);
	else
		printf("    RECV copied the bytes once, from the producer's pinned pages into the consumer's\n");

	memset(&m, 0, sizeof(m));
	if ((err = send_msg(p, MSG_TAKEN, i, &m)) || (err = recv_msg(p, MSG_COMPLETED, &m)))
		return fail("consumer", "talking to the producer", err);
	if (m.status || m.len != t->bytes) {
		fprintf(stderr, "tpdemo: producer's completion for tensor %u: status %d (%s), %" PRIu64
			" bytes\n", i + 1, m.status, tpu_strerror(m.status), m.len);
		return 1;
	}
	printf("    checksum %016" PRIx64 " matches; the producer read its completion (%" PRIu64
	       " bytes delivered)%s\n\n", sum, m.len,
	       t->donate ? "" : " and may write its buffer again");
	return 0;
}

static int demo_kmod(const struct demo *d)
{
	struct tpu_endpoint *ep = NULL;
	struct peer p = { -1, -1 };
	struct msg m;
	uint64_t domain_id;
	uint32_t region, i;
	int domain_fd = -1, rc = 1, err;
	void *buf = NULL;
	tpu_status st;

	/* Fork first: an endpoint belongs to the process that opened it. */
	err = peer_fork(&p, producer_kmod, (void *)d);
	if (err)
		return fail("consumer", "fork", err);
	st = tpu_endpoint_open(d->dev, &ep);
	if (!st)
		st = tpu_domain_create(ep, &domain_fd, &domain_id);
	if (!st)
		st = tpu_domain_attach(ep, domain_fd, NULL);
	if (!st)
		st = tpu_fd_send(p.sock, domain_fd);
	if (domain_fd >= 0)
		close(domain_fd);
	if (st) {
		fail("consumer", "setting up the domain", st);
		goto out;
	}
	printf("consumer (pid %d) opened %s, created domain %" PRIu64
	       " and passed its descriptor to the producer over a Unix socketpair\n",
	       (int)getpid(), d->dev ? d->dev : TPU_DEVICE_PATH, domain_id);
	if ((err = recv_msg(&p, MSG_READY, &m))) {
		fail("consumer", "producer set-up", err);
		goto out;
	}
	printf("producer (pid %d) opened its own endpoint, attached to domain %" PRIu64
	       " and registered a 16 MiB source buffer\n\n", (int)p.pid, domain_id);

	buf = map_anon(BUF_BYTES);
	if (!buf) {
		fail("consumer", "allocating", -ENOMEM);
		goto out;
	}
	st = tpu_region_register(ep, buf, BUF_BYTES, TPU_ACCESS_WRITE, &region);
	if (st) {
		fail("consumer", "registering the destination buffer", st);
		goto out;
	}
	for (i = 0; i < NTENSORS; i++)
		if (consume_one(ep, &p, d, i, buf, region))
			goto out;
	printf("all %zu tensors arrived intact, in both orders, one of them donated\n", NTENSORS);
	rc = 0;
out:
	tpu_endpoint_close(ep);
	if (buf)
		munmap(buf, BUF_BYTES);
	if (peer_wait(&p) && !rc) {
		fprintf(stderr, "tpdemo: the producer failed\n");
		rc = 1;
	}
	return rc;
}

/* ------------------------------------------------------------------ */
/* Without the module: process_vm_readv                                */
/* ------------------------------------------------------------------ */

static int producer_cma(struct peer *p, void *arg)
{
	struct msg m = { 0 };
	void *buf = map_anon(BUF_BYTES);
	uint32_t i;

	(void)arg;
	/* Under Yama scope 1 a parent may already read its child; naming it costs nothing. */
	m.status = buf ? tpu_cma_allow(p->pid) : -ENOMEM;
	if (send_msg(p, MSG_READY, 0, &m) || m.status)
		return 1;
	for (i = 0; i < NTENSORS; i++) {
		tensor_fill(buf, tensors[i].bytes, i);
		m.checksum = tensor_checksum(buf, tensors[i].bytes);
		m.addr = (uintptr_t)buf;
		if (send_msg(p, MSG_POSTED, i, &m) || recv_msg(p, MSG_TAKEN, &m))
			return 1;
	}
	return 0;
}

static int demo_cma(const struct demo *d)
{
	struct peer p = { -1, -1 };
	char key[KEY_BYTES], sz[32];
	struct msg m;
	uint32_t i;
	void *buf = NULL;
	int rc = 1, err;

	err = peer_fork(&p, producer_cma, NULL);
	if (err)
		return fail("consumer", "fork", err);
	/* After fork: a buffer shared copy-on-write with the child would be copied on first write. */
	buf = map_anon(BUF_BYTES);
	if (!buf) {
		fail("consumer", "allocating", -ENOMEM);
		goto out;
	}
	if ((err = recv_msg(&p, MSG_READY, &m))) {
		fail("consumer", "producer set-up", err);
		goto out;
	}
	printf("consumer (pid %d) and producer (pid %d) share only a Unix socketpair; the producer\n"
	       "announces each tensor's key, address and checksum on it, the consumer pulls the bytes\n"
	       "with process_vm_readv (one copy; the kernel pins the source pages on every call)\n\n",
	       (int)getpid(), (int)p.pid);
	for (i = 0; i < NTENSORS; i++) {
		const struct demo_tensor *t = &tensors[i];
		uint64_t t0, ns, sum;
		size_t klen;
		tpu_status st = build_key(d, t, key, &klen);

		if (st) {
			fail("consumer", "building the key", st);
			goto out;
		}
		if ((err = recv_msg(&p, MSG_POSTED, &m))) {
			fail("consumer", "waiting for the producer", err);
			goto out;
		}
		t0 = now_ns();
		st = tpu_cma_read(p.pid, m.addr, buf, t->bytes);
		ns = now_ns() - t0;
		if (st) {
			fail("consumer", "process_vm_readv", st);
			goto out;
		}
		sum = tensor_checksum(buf, t->bytes);
		printf("[%u] %s float32[%u]  key %s\n", i + 1, format_size(t->bytes, sz, sizeof(sz)),
		       t->bytes / 4, key);
		printf("    pulled from producer address 0x%" PRIx64 " in %.1f us (%.2f GB/s); checksum %s\n",
		       m.addr, us(ns), gbps(t->bytes, ns), sum == m.checksum ? "matches" : "WRONG");
		if (sum != m.checksum)
			goto out;
		if ((err = send_msg(&p, MSG_TAKEN, i, &m))) {
			fail("consumer", "talking to the producer", err);
			goto out;
		}
	}
	printf("\nall %zu tensors arrived intact through the process_vm_readv fallback\n", NTENSORS);
	rc = 0;
out:
	if (buf)
		munmap(buf, BUF_BYTES);
	if (peer_wait(&p) && !rc)
		rc = 1;
	return rc;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: tpdemo [--dev PATH] [--no-kmod]\n"
		   "  two processes exchange float32 tensors (4 KiB .. 16 MiB) by TensorFlow\n"
		   "  rendezvous key through /dev/tensorpipe, in both orders and once by DONATE;\n"
		   "  without the module (or with --no-kmod) it shows the process_vm_readv fallback\n");
}

int main(int argc, char **argv)
{
	struct demo d = { NULL, 0 };
	struct tpu_probe_result pr;
	bool no_kmod = false;
	int i;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--dev") && i + 1 < argc) {
			d.dev = argv[++i];
		} else if (!strcmp(argv[i], "--no-kmod")) {
			no_kmod = true;
		} else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		} else {
			usage(stderr);
			return 1;
		}
	}
	/* Any value will do; it only has to be the same on both sides, as in TensorFlow. */
	d.incarnation = now_ns() * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();

	printf("tpdemo: libtpu_user %s\n", tpu_version_string());
	tpu_probe(d.dev, &pr);
	if (pr.path == TPU_PATH_KMOD && !no_kmod)
		return demo_kmod(&d);
	if (pr.path == TPU_PATH_KMOD)
		printf("--no-kmod: the module is present but not used; showing the fallback.\n\n");
	else
		printf("%s\n\n", pr.detail);
	if (pr.cma_status) {
		printf("nothing to demonstrate: process_vm_readv is not usable either (%s)\n",
		       tpu_strerror(pr.cma_status));
		return 1;
	}
	return demo_cma(&d);
}
