// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * A world formed from the launcher's variables passes a tensor around the
 * ring: rank 0 starts it, every rank adds its rank + 1 to each element and
 * hands it to the next through the world's rendezvous, and rank 0 checks
 * the sum when it comes back.  Then every rank writes one message on the
 * world pipe to the next rank and reads one from the previous, and last the
 * ranks form a collective group over the world's rendezvous and all-reduce
 * a tensor (the mean of the ranks' inputs), each checking the result: the
 * launcher's variables are all the set-up a group needs.
 *
 *   mpirun -np 3 ./world_hello                     Open MPI, one host
 *   torchrun --nproc-per-node 3 --no-python ./world_hello
 *   ./world_hello                                  no launcher: forks 3 ranks
 *                                                  with torchrun's variables set
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <tpu_user.h>
#include <unistd.h>

#define SECOND	1000000000ull
#define N	4096	/* floats */

static size_t ring_key(char *buf, int src, int dst, const char *edge)
{
	char s[64], d[64];
	struct tpu_key k = { .src_incarnation = 1 };
	size_t len = 0;

	snprintf(s, sizeof(s), "/job:worker/replica:0/task:%d/device:CPU:0", src);
	snprintf(d, sizeof(d), "/job:worker/replica:0/task:%d/device:CPU:0", dst);
	k.src_device = tpu_str(s);
	k.dst_device = tpu_str(d);
	k.edge_name = tpu_str(edge);
	tpu_key_build(&k, buf, 256, &len);
	return len;
}

/* The tensor's trip: receive from the previous rank (not rank 0), add, send on. */
static tpu_status pass_token(struct tpu_world *w, int me, int n)
{
	static float token[N];
	struct tpu_rendezvous *rdv = tpu_world_rendezvous(w);
	struct tpu_tensor t = { .data = token, .len = sizeof(token) };
	int next = (me + 1) % n, prev = (me + n - 1) % n;
	char key[256];
	size_t klen;
	tpu_status st;

	if (me != 0) {
		klen = ring_key(key, prev, me, "token");
		st = tpu_rendezvous_recv_wait(rdv, key, klen, &t, 30 * SECOND, NULL);
		if (st)
			return st;
	}
	for (int i = 0; i < N; i++)
		token[i] += (float)(me + 1);
	klen = ring_key(key, me, next, "token");
	st = tpu_rendezvous_send_wait(rdv, key, klen, &t, 0, 30 * SECOND);
	if (st || me != 0)
		return st;
	klen = ring_key(key, prev, me, "token");
	st = tpu_rendezvous_recv_wait(rdv, key, klen, &t, 30 * SECOND, NULL);
	if (st)
		return st;
	for (int i = 0; i < N; i++)
		if (token[i] != (float)(n * (n + 1) / 2))
			return -EBADMSG;
	printf("rank 0: the token came back with %g in every element (1 + 2 + ... + %d)\n",
	       (double)token[0], n);
	return 0;
}

struct wait_one {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int done;
	tpu_status st;
	struct tpu_message *msg;
};

static void one_done(void *arg, tpu_status st, struct tpu_message *msg)
{
	struct wait_one *o = arg;

	pthread_mutex_lock(&o->lock);
	o->done++;
	o->st = o->st ? o->st : st;
	o->msg = msg;
	pthread_cond_signal(&o->cond);
	pthread_mutex_unlock(&o->lock);
}

static tpu_status wait_for(struct wait_one *o, int n)
{
	pthread_mutex_lock(&o->lock);
	while (o->done < n)
		pthread_cond_wait(&o->cond, &o->lock);
	pthread_mutex_unlock(&o->lock);
	return o->st;
}

/* One message to the next rank on the world pipe, one from the previous. */
static tpu_status pipe_hello(struct tpu_world *w, int me, int n)
{
	struct wait_one wr = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, NULL };
	struct wait_one rd = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, NULL };
	char text[64], got[64] = "";
	struct tpu_payload pl = { .data = text };
	struct tpu_message msg = { .payloads = &pl, .npayloads = 1 };
	struct tpu_pipe *next, *prev;
	tpu_status st;

	pl.len = (size_t)snprintf(text, sizeof(text), "hello from rank %d", me);
	st = tpu_world_pipe(w, (me + 1) % n, &next);
	if (!st)
		st = tpu_world_pipe(w, (me + n - 1) % n, &prev);
	if (!st)
		st = tpu_pipe_write(next, &msg, one_done, &wr);
	if (!st)
		st = tpu_pipe_read_descriptor(prev, one_done, &rd);
	if (!st)
		st = wait_for(&rd, 1);
	if (st)
		return st;
	if (rd.msg->npayloads != 1 || rd.msg->payloads[0].len >= sizeof(got))
		return -EBADMSG;
	rd.msg->payloads[0].data = got;
	st = tpu_pipe_read(prev, rd.msg, one_done, &rd);
	if (!st)
		st = wait_for(&rd, 2);
	if (!st)
		st = wait_for(&wr, 1);
	if (!st)
		printf("rank %d: pipe from rank %d says \"%s\"\n", me, (me + n - 1) % n, got);
	return st;
}

/* All-reduce over the world: rank r gives r + i at element i; every rank gets the mean. */
static tpu_status all_reduce(struct tpu_world *w, int me, int n)
{
	static float in[N], out[N];
	char names[8][64];
	const char *devices[8];
	struct tpu_coll *coll = NULL;
	struct tpu_coll_exec *exec = NULL;
	struct tpu_coll_group g = { .group_key = 1, .group_size = n, .device_type = "CPU",
				    .devices = devices };
	struct tpu_coll_instance inst = { .instance_key = 1, .type = TPU_COLL_REDUCTION,
					  .dtype = TPU_DT_FLOAT32, .count = N, .op = TPU_OP_SUM,
					  .final_op = TPU_FINAL_DIV };
	struct tpu_coll_member m;
	tpu_status st;

	if (n > 8)
		return 0;	/* this example names at most 8 members */
	for (int r = 0; r < n; r++) {
		snprintf(names[r], sizeof(names[r]), "/job:worker/replica:0/task:%d/device:CPU:0", r);
		devices[r] = names[r];
	}
	g.num_tasks = n;
	m = (struct tpu_coll_member){ .device = names[me] };
	for (int i = 0; i < N; i++)
		in[i] = (float)(me + i);
	st = tpu_coll_create(tpu_world_rendezvous(w), &coll);
	if (!st)
		st = tpu_coll_exec_create(coll, 1, &exec);
	if (!st)
		st = tpu_coll_exec_run(exec, &g, &inst, &m, in, out);
	tpu_coll_exec_destroy(exec);
	tpu_coll_destroy(coll);
	if (st)
		return st;
	for (int i = 0; i < N; i++)
		if (out[i] != (float)i + (float)(n - 1) / 2.0f)
			return -EBADMSG;
	printf("rank %d: all-reduce of %d floats: the mean of the %d ranks' inputs, as expected\n",
	       me, N, n);
	return 0;
}

static int run_rank(void)
{
	struct tpu_context *ctx = NULL;
	struct tpu_world *w = NULL;
	const struct tpu_world_info *info;
	tpu_status st;

	st = tpu_context_create(NULL, &ctx);
	if (!st)
		st = tpu_world_create(ctx, NULL, &w);
	if (st) {
		fprintf(stderr, "world_hello: %s\n", tpu_strerror(st));
		tpu_context_destroy(ctx);
		return 1;
	}
	info = tpu_world_get_info(w);
	printf("rank %d of %d (%s), store %s:%u\n", info->rank, info->size, info->convention,
	       info->store_host, info->store_port);
	st = info->size > 1 ? pass_token(w, info->rank, info->size) : 0;
	if (!st && info->size > 1)
		st = pipe_hello(w, info->rank, info->size);
	if (!st)
		st = all_reduce(w, info->rank, info->size);
	if (st)
		fprintf(stderr, "rank %d: %s\n", info->rank, tpu_strerror(st));
	tpu_world_destroy(w);
	tpu_context_destroy(ctx);
	return st != 0;
}

/* No launcher: be one, as torchrun would on this host. */
static int demo(int n)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), rc = 0, status;
	char port[16], num[16];
	pid_t pid[8];

	/* A free port for torch's store; ours is the next one. */
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) ||
	    getsockname(fd, (struct sockaddr *)&a, &len))
		return 1;
	close(fd);
	snprintf(port, sizeof(port), "%u", ntohs(a.sin_port) - 1u);
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int r = 0; r < n; r++) {
		pid[r] = fork();
		if (pid[r] == 0) {
			snprintf(num, sizeof(num), "%d", r);
			setenv("RANK", num, 1);
			setenv("LOCAL_RANK", num, 1);
			snprintf(num, sizeof(num), "%d", n);
			setenv("WORLD_SIZE", num, 1);
			setenv("LOCAL_WORLD_SIZE", num, 1);
			setenv("MASTER_ADDR", "127.0.0.1", 1);
			setenv("MASTER_PORT", port, 1);
			_exit(run_rank());
		}
	}
	for (int r = 0; r < n; r++)
		if (waitpid(pid[r], &status, 0) != pid[r] || !WIFEXITED(status) ||
		    WEXITSTATUS(status))
			rc = 1;
	return rc;
}

int main(void)
{
	struct tpu_world_info info;

	if (tpu_world_info_from_env(&info) == -ENOENT)
		return demo(3);
	setvbuf(stdout, NULL, _IOLBF, 0);
	return run_rank();
}
