/*
 * A world formed from the launcher's variables, and the calls a world
 * offers, each one line: every rank all-reduces a tensor (the mean of the
 * ranks' inputs), broadcasts, all-gathers and reduce-scatters one, and
 * passes a token around the ring with tpu_world_send()/tpu_world_recv(),
 * rank 0 checking the sum when it comes back.  Then the same ring by hand,
 * through the world's rendezvous under TensorFlow keys whose devices are
 * the ranks' (tpu_world_device_name(): "/job:worker/replica:0/task:R/
 * device:CPU:0"), and one message on the world pipe to the next rank.
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

/* The collectives, one call each; every element checked. */
static tpu_status collectives(struct tpu_world *w, int me, int n)
{
	static float in[N], out[N], all[8 * 16];
	size_t off, len;
	tpu_status st;

	for (int i = 0; i < N; i++)
		in[i] = (float)(me + i);
	st = tpu_world_all_reduce(w, in, out, N, TPU_DT_FLOAT32, TPU_OP_SUM, TPU_FINAL_DIV,
				  30 * SECOND);
	if (st)
		return st;
	for (int i = 0; i < N; i++)
		if (out[i] != (float)i + (float)(n - 1) / 2.0f)
			return -EBADMSG;
	printf("rank %d: all-reduce of %d floats: the mean of the %d ranks' inputs, as expected\n",
	       me, N, n);

	/* The last rank's tensor, everywhere. */
	for (int i = 0; i < N; i++)
		out[i] = me == n - 1 ? (float)(2 * i) : 0;
	st = tpu_world_broadcast(w, out, N, TPU_DT_FLOAT32, n - 1, 30 * SECOND);
	for (int i = 0; !st && i < N; i++)
		if (out[i] != (float)(2 * i))
			st = -EBADMSG;
	/* 16 floats of each rank, side by side in rank order. */
	if (!st && n <= 8) {
		st = tpu_world_all_gather(w, in, all, 16, TPU_DT_FLOAT32, 30 * SECOND);
		for (int i = 0; !st && i < 16 * n; i++)
			if (all[i] != (float)(i / 16 + i % 16))
				st = -EBADMSG;
	}
	/* The sum of the inputs, each rank keeping its chunk. */
	if (!st)
		st = tpu_world_reduce_scatter(w, in, out, N, TPU_DT_FLOAT32, TPU_OP_SUM,
					      TPU_FINAL_NONE, 30 * SECOND);
	off = tpu_coll_chunk(N, n, me, &len);
	for (size_t i = 0; !st && i < len; i++)
		if (out[i] != (float)((int)(off + i) * n + n * (n - 1) / 2))
			st = -EBADMSG;
	if (!st)
		st = tpu_world_barrier_timeout(w, 30 * SECOND);
	if (!st)
		printf("rank %d: broadcast, all-gather, reduce-scatter and barrier as expected\n", me);
	return st;
}

/* The token's trip by rank: receive from the previous rank (not rank 0), add, send on. */
static tpu_status pass_token(struct tpu_world *w, int me, int n)
{
	static float token[N];
	int next = (me + 1) % n, prev = (me + n - 1) % n;
	tpu_status st;

	if (me != 0) {
		st = tpu_world_recv(w, prev, token, sizeof(token), NULL, 30 * SECOND);
		if (st)
			return st;
	}
	for (int i = 0; i < N; i++)
		token[i] += (float)(me + 1);
	/* A send returns once the next rank has the token, so rank 0 sends first. */
	st = tpu_world_send(w, next, token, sizeof(token), 30 * SECOND);
	if (st || me != 0)
		return st;
	st = tpu_world_recv(w, prev, token, sizeof(token), NULL, 30 * SECOND);
	if (st)
		return st;
	for (int i = 0; i < N; i++)
		if (token[i] != (float)(n * (n + 1) / 2))
			return -EBADMSG;
	printf("rank 0: the token came back with %g in every element (1 + 2 + ... + %d)\n",
	       (double)token[0], n);
	return 0;
}

/*
 * The same hop by hand, as TensorFlow's send and recv ops do it: a key
 * names the producer's and the consumer's devices, which for a world are
 * tpu_world_device_name()'s; the world's rendezvous routes by them.
 */
static tpu_status key_of(struct tpu_world *w, int src, int dst, char *key, size_t *len)
{
	char s[128], d[128];
	struct tpu_key k = { .src_incarnation = 1, .edge_name = tpu_str("hello") };
	tpu_status st = tpu_world_device_name(w, src, s, sizeof(s));

	if (!st)
		st = tpu_world_device_name(w, dst, d, sizeof(d));
	if (st)
		return st;
	k.src_device = tpu_str(s);
	k.dst_device = tpu_str(d);
	return tpu_key_build(&k, key, 512, len);
}

static tpu_status by_key(struct tpu_world *w, int me, int n)
{
	struct tpu_rendezvous *rdv = tpu_world_rendezvous(w);
	char key[512], name[128];
	int value = 100 + me, got = -1;
	struct tpu_tensor out = { .data = &value, .len = sizeof(value) };
	struct tpu_tensor in = { .data = &got, .len = sizeof(got) };
	size_t klen;
	tpu_status st = tpu_world_device_name(w, me, name, sizeof(name));

	if (!st)
		st = key_of(w, me, (me + 1) % n, key, &klen);
	if (st)
		return st;
	printf("rank %d: device %s; to rank %d under the key %s\n", me, name, (me + 1) % n, key);
	/* A send never blocks: every rank posts, then receives. */
	st = tpu_rendezvous_send(rdv, key, klen, &out, 0, NULL, NULL);
	if (!st)
		st = key_of(w, (me + n - 1) % n, me, key, &klen);
	if (!st)
		st = tpu_rendezvous_recv_wait(rdv, key, klen, &in, 30 * SECOND, NULL);
	if (!st && got != 100 + (me + n - 1) % n)
		st = -EBADMSG;
	/* Our own send was taken before we leave: the next barrier says so. */
	if (!st)
		st = tpu_world_barrier_timeout(w, 30 * SECOND);
	return st;
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
	st = collectives(w, info->rank, info->size);
	if (!st && info->size > 1)
		st = pass_token(w, info->rank, info->size);
	if (!st && info->size > 1)
		st = by_key(w, info->rank, info->size);
	if (!st && info->size > 1)
		st = pipe_hello(w, info->rank, info->size);
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
