// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * tpbench uring: what does a SEND/RECV pair cost through io_uring commands
 * compared with the plain ioctls, at queue depth 1 and 16?
 *
 * One process, two endpoints in one domain (producer A, consumer B), small
 * tensors so that the per-operation cost dominates.  One transfer is:
 *
 *   ioctl   SEND on A, RECV on B, read() of A's completion: three calls
 *           (at depth N: N SENDs, N RECVs, one read() of N records)
 *   uring   a SEND SQE on A and a RECV SQE on B, one io_uring_enter that
 *           submits and waits, two CQEs reaped (at depth N: 2N SQEs, one
 *           enter, 2N CQEs)
 *   recv-first  as uring, but each RECV is queued before its SEND, so it
 *           waits in the kernel and the SEND completes it through task work
 *
 * Each point is the median over --iters rounds of the time per transfer.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <linux/tensorpipe.h>

#include "bench_uring.h"
#include "json.h"
#include "units.h"

#define MAX_DEPTH	64
#define KEY_LEN		16

struct ubench {
	int a, b;			/* producer and consumer endpoints */
	uint32_t src, dst;		/* their regions */
	size_t size;
	unsigned int rounds;
	struct io_uring ring;
	char keys[MAX_DEPTH][KEY_LEN];
	uint8_t *src_mem, *dst_mem;
};

static int ubench_setup(struct ubench *u, const char *dev)
{
	struct tp_domain_create dc = { 0 };
	struct tp_domain_attach at = { 0 };
	struct tp_region_register rs = { 0 }, rd = { 0 };
	unsigned int i;
	int err;

	u->a = open(dev, O_RDWR | O_CLOEXEC);
	u->b = open(dev, O_RDWR | O_CLOEXEC);
	if (u->a < 0 || u->b < 0)
		return -errno;
	if (ioctl(u->a, TP_IOC_DOMAIN_CREATE, &dc))
		return -errno;
	at.fd = dc.fd;
	if (ioctl(u->a, TP_IOC_DOMAIN_ATTACH, &at) || ioctl(u->b, TP_IOC_DOMAIN_ATTACH, &at))
		return -errno;
	close(dc.fd);
	u->src_mem = malloc(u->size * MAX_DEPTH);
	u->dst_mem = malloc(u->size * MAX_DEPTH);
	if (!u->src_mem || !u->dst_mem)
		return -ENOMEM;
	memset(u->src_mem, 0x5a, u->size * MAX_DEPTH);
	memset(u->dst_mem, 0, u->size * MAX_DEPTH);
	rs = (struct tp_region_register){ .addr = (uintptr_t)u->src_mem,
					  .len = u->size * MAX_DEPTH, .access = TP_ACCESS_READ };
	rd = (struct tp_region_register){ .addr = (uintptr_t)u->dst_mem,
					  .len = u->size * MAX_DEPTH, .access = TP_ACCESS_WRITE };
	if (ioctl(u->a, TP_IOC_REGION_REGISTER, &rs) || ioctl(u->b, TP_IOC_REGION_REGISTER, &rd))
		return -errno;
	u->src = rs.handle;
	u->dst = rd.handle;
	for (i = 0; i < MAX_DEPTH; i++)
		snprintf(u->keys[i], KEY_LEN, "ub%u", i);
	err = io_uring_queue_init(4 * MAX_DEPTH, &u->ring, IORING_SETUP_SQE128 | IORING_SETUP_CQE32);
	return err;
}

static void ubench_teardown(struct ubench *u)
{
	io_uring_queue_exit(&u->ring);
	close(u->a);
	close(u->b);
	free(u->src_mem);
	free(u->dst_mem);
}

static struct tp_send send_of(const struct ubench *u, unsigned int i)
{
	return (struct tp_send){ .key_ptr = (uintptr_t)u->keys[i], .key_len = strlen(u->keys[i]),
				 .region = u->src, .offset = i * u->size, .len = u->size,
				 .user_data = i };
}

static struct tp_recv recv_of(const struct ubench *u, unsigned int i)
{
	return (struct tp_recv){ .key_ptr = (uintptr_t)u->keys[i], .key_len = strlen(u->keys[i]),
				 .region = u->dst, .offset = i * u->size, .len = u->size };
}

/* One round of @depth transfers through the ioctls. */
static int round_ioctl(struct ubench *u, unsigned int depth)
{
	struct tp_completion c[MAX_DEPTH];
	unsigned int i, got = 0;
	ssize_t n;

	for (i = 0; i < depth; i++) {
		struct tp_send s = send_of(u, i);

		if (ioctl(u->a, TP_IOC_SEND, &s))
			return -errno;
	}
	for (i = 0; i < depth; i++) {
		struct tp_recv r = recv_of(u, i);

		if (ioctl(u->b, TP_IOC_RECV, &r))
			return -errno;
	}
	while (got < depth) {
		n = read(u->a, c, (depth - got) * sizeof(c[0]));
		if (n < 0)
			return -errno;
		got += n / sizeof(c[0]);
	}
	return 0;
}

static int prep_cmd(struct io_uring *ring, int fd, unsigned int op, const void *arg,
		    size_t len, uint64_t data)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);

	if (!sqe)
		return -EBUSY;
	/* SQE128: the 80-byte command area runs into the second half. */
	memset(sqe, 0, offsetof(struct io_uring_sqe, cmd) + 80);
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = fd;
	sqe->cmd_op = op;
	sqe->user_data = data;
	memcpy(sqe->cmd, arg, len);
	return 0;
}

/*
 * One round of @depth transfers through io_uring commands.  With
 * @recv_first every RECV waits for its key and the SEND's arrival completes
 * it through task work; otherwise each RECV finds its key posted.
 */
static int round_uring_order(struct ubench *u, unsigned int depth, bool recv_first)
{
	struct io_uring_cqe *cqe;
	unsigned int i, seen = 0;
	int err = 0, ret;

	for (i = 0; i < depth; i++) {
		struct tp_send s = send_of(u, i);
		struct tp_recv r = recv_of(u, i);

		if (recv_first ? prep_cmd(&u->ring, u->b, TP_IOC_RECV, &r, sizeof(r), i) : 0)
			return -EBUSY;
		if (prep_cmd(&u->ring, u->a, TP_IOC_SEND, &s, sizeof(s), i))
			return -EBUSY;
		if (recv_first ? 0 : prep_cmd(&u->ring, u->b, TP_IOC_RECV, &r, sizeof(r), i))
			return -EBUSY;
	}
	ret = io_uring_submit_and_wait(&u->ring, 2 * depth);
	if (ret < 0)
		return ret;
	while (seen < 2 * depth) {
		ret = io_uring_wait_cqe(&u->ring, &cqe);
		if (ret < 0)
			return ret;
		if (cqe->res < 0 && !err)
			err = cqe->res;
		io_uring_cqe_seen(&u->ring, cqe);
		seen++;
	}
	return err;
}

static int round_uring(struct ubench *u, unsigned int depth)
{
	return round_uring_order(u, depth, false);
}

static int round_uring_waiting(struct ubench *u, unsigned int depth)
{
	return round_uring_order(u, depth, true);
}

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return a < b ? -1 : a > b;
}

/* Median nanoseconds per transfer over the rounds, or a negative errno. */
static int64_t measure(struct ubench *u, int (*round)(struct ubench *, unsigned int),
		       unsigned int depth)
{
	uint64_t *ns = calloc(u->rounds, sizeof(*ns)), t0, med;
	unsigned int i;
	int err = round(u, depth);	/* warm-up, not counted */

	if (!ns)
		return -ENOMEM;
	for (i = 0; i < u->rounds && !err; i++) {
		t0 = now_ns();
		err = round(u, depth);
		ns[i] = (now_ns() - t0) / depth;
	}
	qsort(ns, u->rounds, sizeof(*ns), cmp_u64);
	med = ns[u->rounds / 2];
	free(ns);
	return err ? err : (int64_t)med;
}

int bench_uring_main(int argc, char **argv)
{
	const char *dev = TP_DEVICE_PATH;
	bool json = false;
	struct ubench u = { .size = 4096, .rounds = 2000 };
	static const unsigned int depths[] = { 1, 16 };
	int64_t res[2][3];
	unsigned int d;
	uint64_t n;
	int i, err;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--size") && i + 1 < argc && !parse_size(argv[i + 1], &n) &&
		    n && n <= (64u << 20) / MAX_DEPTH) {
			u.size = n;
			i++;
		} else if (!strcmp(argv[i], "--rounds") && i + 1 < argc &&
			   !parse_size(argv[i + 1], &n) && n >= 1 && n <= 1000000) {
			u.rounds = (unsigned int)n;
			i++;
		} else if (!strcmp(argv[i], "--dev") && i + 1 < argc) {
			dev = argv[++i];
		} else if (!strcmp(argv[i], "--json")) {
			json = true;
		} else {
			fprintf(stderr, "tpbench uring: bad argument: %s\n"
				"usage: tpbench uring [--size BYTES] [--rounds N] [--json] [--dev PATH]\n",
				argv[i]);
			return 1;
		}
	}
	err = ubench_setup(&u, dev);
	if (err) {
		fprintf(stderr, "tpbench uring: setting up %s: %s\n", dev, strerror(-err));
		return 1;
	}
	for (d = 0; d < 2; d++) {
		res[d][0] = measure(&u, round_ioctl, depths[d]);
		res[d][1] = measure(&u, round_uring, depths[d]);
		res[d][2] = measure(&u, round_uring_waiting, depths[d]);
		if (res[d][0] < 0 || res[d][1] < 0 || res[d][2] < 0) {
			fprintf(stderr, "tpbench uring: depth %u: %s\n", depths[d],
				strerror((int)-(res[d][0] < 0 ? res[d][0] :
						res[d][1] < 0 ? res[d][1] : res[d][2])));
			ubench_teardown(&u);
			return 1;
		}
	}
	ubench_teardown(&u);
	if (json) {
		struct json j;

		json_init(&j, stdout);
		json_object_begin(&j, NULL);
		json_string(&j, "mode", "uring");
		json_u64(&j, "size", u.size);
		json_u64(&j, "rounds", u.rounds);
		json_array_begin(&j, "points");
		for (d = 0; d < 2; d++) {
			json_object_begin(&j, NULL);
			json_u64(&j, "depth", depths[d]);
			json_i64(&j, "ioctl_ns", res[d][0]);
			json_i64(&j, "uring_ns", res[d][1]);
			json_i64(&j, "uring_recv_first_ns", res[d][2]);
			json_object_end(&j);
		}
		json_array_end(&j);
		json_object_end(&j);
		json_finish(&j);
		return 0;
	}
	printf("tpbench uring: %zu-byte tensors, one process, two endpoints; median of %u rounds\n"
	       "microseconds per SEND/RECV pair (ioctl: SEND + RECV + read of the completion;\n"
	       "uring: two SQE128 commands, one submit-and-wait, two CQEs; recv-first: each\n"
	       "RECV waits and the SEND completes it through task work)\n\n"
	       "  depth      ioctl      uring  recv-first   uring/ioctl  recv-first/ioctl\n",
	       u.size, u.rounds);
	for (d = 0; d < 2; d++)
		printf("  %5u %10.2f %10.2f %11.2f %12.2fx %16.2fx\n", depths[d], res[d][0] / 1e3,
		       res[d][1] / 1e3, res[d][2] / 1e3, (double)res[d][1] / (double)res[d][0],
		       (double)res[d][2] / (double)res[d][0]);
	return 0;
}
