// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Forming a world: rank 0 starts the store, every rank connects to it,
 * joins (world_member.c: its size agrees, its rank is its own), creates
 * its remote rendezvous and pipe listener, publishes their URLs and its
 * host identity under "tpu/world/RANK" and reads every other rank's,
 * which makes the rendezvous's cluster map: shm URLs for the ranks of
 * this host, tcp for the others.  The world's timeout bounds each call
 * as a whole (tpu__store_client_bound()).  Destroy is a barrier first,
 * so that rank 0 keeps the store while another rank may still ask it who
 * dials a pipe.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "world.h"

void tpu__world_ref(struct tpu_world *w)
{
	atomic_fetch_add(&w->refs, 1);
}

void tpu__world_unref(struct tpu_world *w)
{
	if (atomic_fetch_sub(&w->refs, 1) != 1)
		return;
	pthread_mutex_destroy(&w->lock);
	pthread_mutex_destroy(&w->store_lock);
	pthread_cond_destroy(&w->cond);
	free(w->pipes);
	tpu__world_coll_free(w->coll);
	free(w->rdv_url);
	free(w->pipe_url);
	tpu__quarantine(w, &w->magic);
}

tpu_status tpu__world_check(const struct tpu_world *w)
{
	tpu_status st = tpu__magic_check(w, w ? &w->magic : NULL, WORLD_MAGIC);

	if (!st && tpu__forked_since(w->fork_gen))
		st = TPU_E_FORKED;
	return st;
}

/*
 * Counted first, then the magic read again, both sequentially consistent
 * as the destroy's claim and its look at @users are: a call that finds
 * the world live here was counted before the destroy looked.
 */
tpu_status tpu__world_enter(struct tpu_world *w)
{
	tpu_status st = tpu__world_check(w);

	if (st)
		return st;
	atomic_fetch_add(&w->users, 1);
	if (__atomic_load_n(&w->magic, __ATOMIC_SEQ_CST) == WORLD_MAGIC)
		return 0;
	tpu__world_leave(w, 0);
	return TPU_E_DESTROYED;
}

tpu_status tpu__world_leave(struct tpu_world *w, tpu_status st)
{
	if (st && atomic_load(&w->cancel))
		st = TPU_E_CLOSED;
	/* Under the lock: the destroy, once it saw 0, frees the lock itself. */
	pthread_mutex_lock(&w->lock);
	if (atomic_fetch_sub(&w->users, 1) == 1)
		pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
	return st;
}

static bool world_ok(const struct tpu_world *w)
{
	return !tpu__world_check(w);
}

char tpu__world_host_salt[16];

/*
 * The shm transport reaches a peer when both share the boot and the
 * network namespace; the same facts its compatibility descriptor checks.
 */
static void host_id(char *buf, size_t size)
{
	char boot[64] = "?";

	if (tpu__boot_id(boot, sizeof(boot)))
		snprintf(boot, sizeof(boot), "?");
	snprintf(buf, size, "%s:%lu%s%s", boot, tpu__ns_inode("net"),
		 tpu__world_host_salt[0] ? ":" : "", tpu__world_host_salt);
}

/*
 * Where to listen when the caller did not say.  When the launcher says
 * every rank is on this host: loopback tcp and shm.  Otherwise tcp on
 * the address this host reaches the store from (the one other hosts can
 * reach it on), and shm as well when the context allows it: the launcher
 * may not have said where the ranks are (no LOCAL_WORLD_SIZE), and the
 * ranks that turn out to share this host (exchange()) dial it.
 */
static tpu_status listen_here(struct tpu_world *w, char *url, size_t size, char *shm,
			      size_t shm_size)
{
	static atomic_uint serial;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char ip[INET6_ADDRSTRLEN];

	*url = *shm = '\0';
	/* A caller's store has no socket to learn this host's address from. */
	if (w->ext_store || w->info.size == 1 || w->info.local_size == w->info.size)
		return 0;
	if (getsockname(tpu__store_client_fd(w->store), (struct sockaddr *)&ss, &sl))
		return tpu__errno();
	if (ss.ss_family == AF_INET6 &&
	    inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, ip, sizeof(ip)))
		snprintf(url, size, "tcp://[%s]:0", ip);
	else if (ss.ss_family == AF_INET &&
		 inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, ip, sizeof(ip)))
		snprintf(url, size, "tcp://%s:0", ip);
	else
		return -EAFNOSUPPORT;
	snprintf(shm, shm_size, "shm://tpu-world-%d-%u", (int)getpid(),
		 atomic_fetch_add(&serial, 1));
	return 0;
}

static void task_of(const struct tpu_world *w, int rank, char *buf, size_t size)
{
	snprintf(buf, size, "/job:%s/replica:0/task:%d", w->job, rank);
}

/*
 * The URLs this rank publishes for the rendezvous (@rdv) or the pipe
 * listener: "far", tcp if it listens there (else its first URL), for
 * other hosts; "near", shm or "-", for ranks of this host.
 */
static tpu_status own_urls(struct tpu_world *w, bool rdv, char *far, char *near)
{
	tpu_status st = rdv ? tpu_rendezvous_url(w->rdv, "tcp", far, WORLD_URL_MAX)
			    : tpu_listener_url(w->listener, "tcp", far, WORLD_URL_MAX);

	if (st)
		st = rdv ? tpu_rendezvous_url(w->rdv, NULL, far, WORLD_URL_MAX)
			 : tpu_listener_url(w->listener, NULL, far, WORLD_URL_MAX);
	if (st)
		return st;
	if (rdv ? tpu_rendezvous_url(w->rdv, "shm", near, WORLD_URL_MAX)
		: tpu_listener_url(w->listener, "shm", near, WORLD_URL_MAX))
		snprintf(near, WORLD_URL_MAX, "-");
	return 0;
}

/*
 * The pipe listener's URLs: the rendezvous's, with shm names of their own
 * and any fixed tcp or rdma port made 0 (the rendezvous holds that port;
 * peers learn the pipe listener's from the store).
 */
static tpu_status pipe_urls(const char *const *urls, size_t n, char ***out)
{
	char **v = calloc(n ? n : 1, sizeof(*v));

	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		bool shm = !strncmp(urls[i], "shm://", 6);
		bool port = !strncmp(urls[i], "tcp://", 6) || !strncmp(urls[i], "rdma://", 7);
		const char *colon = strrchr(urls[i], ':');
		int len = (int)strlen(urls[i]);

		/* "...:PORT": keep everything up to the colon, then port 0. */
		if (port && colon && colon[1] && strspn(colon + 1, "0123456789") == strlen(colon + 1))
			len = (int)(colon - urls[i]) + 1;
		else
			port = false;
		if (asprintf(&v[i], "%.*s%s", len, urls[i], shm ? "-pipe" : port ? "0" : "") < 0) {
			while (i--)
				free(v[i]);
			free(v);
			return -ENOMEM;
		}
	}
	*out = v;
	return 0;
}

static tpu_status listen_all(struct tpu_world *w, const struct tpu_world_options *o)
{
	struct tpu_remote_options ro = { .listen_urls = o->listen_urls, .nlisten = o->nlisten };
	char self[WORLD_TASK_MAX], here[WORLD_URL_MAX], shm[WORLD_URL_MAX];
	const char *here_p[2] = { here, shm };
	char **purls = NULL;
	tpu_status st;

	task_of(w, w->info.rank, self, sizeof(self));
	ro.task = self;
	if (!ro.listen_urls) {
		st = listen_here(w, here, sizeof(here), shm, sizeof(shm));
		if (st)
			return st;
		if (*here) {
			ro.listen_urls = here_p;
			ro.nlisten = 2;
		}
	}
	st = tpu_rendezvous_create_remote(w->ctx, &ro, &w->rdv);
	if (st == TPU_E_NO_TRANSPORT && !o->listen_urls && ro.nlisten == 2) {
		/* The context rules shm out: tcp alone, as across hosts. */
		ro.nlisten = 1;
		st = tpu_rendezvous_create_remote(w->ctx, &ro, &w->rdv);
	}
	if (st)
		return st;
	st = pipe_urls(ro.listen_urls, ro.nlisten, &purls);
	if (st)
		return st;
	st = tpu_listener_create(w->ctx, (const char *const *)purls, ro.nlisten, &w->listener);
	for (size_t i = 0; i < ro.nlisten; i++)
		free(purls[i]);
	free(purls);
	return st;
}

/*
 * Which of @r's URLs this rank dials.  Same host identity and an shm URL
 * on both sides: shm (the pipe's own handshake checks the same facts
 * again, so a false claim only costs a failed connect); else the far URL.
 */
static void choose(struct tpu_world *w, int r, const char *host, const char *far,
		   const char *near, const char *pfar, const char *pnear, const char *own_near)
{
	bool same = !strcmp(host, w->host);
	bool shm = same && strcmp(near, "-") && strcmp(pnear, "-") && strcmp(own_near, "-");

	snprintf(w->rdv_url[r], WORLD_URL_MAX, "%s", shm ? near : far);
	snprintf(w->pipe_url[r], WORLD_URL_MAX, "%s", shm ? pnear : pfar);
	tpu__log_debug("world: rank %d reaches rank %d at %s: %s", w->info.rank, r, w->rdv_url[r],
		       shm ? "same host (boot id and network namespace match), shm" :
		       !same ? "another host (boot id or network namespace differ)" :
		       !strcmp(own_near, "-") ? "same host, but this rank does not listen on shm" :
		       "same host, but that rank does not listen on shm");
}

/* "HOST FAR NEAR PFAR PNEAR" of a peer into its fields; false if it is not one. */
static bool split_entry(char *val, char *f[5])
{
	char *save = NULL;
	int i;

	for (i = 0; i < 5; i++) {
		f[i] = strtok_r(i ? NULL : val, " ", &save);
		if (!f[i] || strlen(f[i]) >= (i ? WORLD_URL_MAX : WORLD_HOST_MAX))
			return false;
	}
	return !strtok_r(NULL, " ", &save);
}

/* Publish this rank's URLs, then learn every other rank's. */
static tpu_status exchange(struct tpu_world *w, uint64_t deadline)
{
	char key[64], val[4 * WORLD_URL_MAX + WORLD_HOST_MAX + 8], task[WORLD_TASK_MAX];
	char far[WORLD_URL_MAX], near[WORLD_URL_MAX], pfar[WORLD_URL_MAX], pnear[WORLD_URL_MAX];
	int me = w->info.rank;
	tpu_status st;
	size_t len;

	st = own_urls(w, true, far, near);
	if (!st)
		st = own_urls(w, false, pfar, pnear);
	if (st)
		return st;
	snprintf(w->rdv_url[me], WORLD_URL_MAX, "%s", far);
	snprintf(w->pipe_url[me], WORLD_URL_MAX, "%s", pfar);
	snprintf(key, sizeof(key), "tpu/world/%d", me);
	len = (size_t)snprintf(val, sizeof(val), "%s %s %s %s %s", w->host, far, near, pfar, pnear);
	st = tpu__world_store_set(w, key, val, len);
	for (int r = 0; !st && r < w->info.size; r++) {
		char *f[5];

		if (r == me)
			continue;
		snprintf(key, sizeof(key), "tpu/world/%d", r);
		st = tpu__world_wait_key(w, key, val, sizeof(val) - 1, &len, deadline);
		if (st == -ETIMEDOUT)
			fprintf(stderr, "tpu: world: rank %d: rank %d did not join within %u ms\n",
				me, r, w->timeout_ms);
		if (st)
			return st == -EMSGSIZE ? -EPROTO : st;
		val[len] = '\0';
		if (!split_entry(val, f))
			return -EPROTO;
		choose(w, r, f[0], f[1], f[2], f[3], f[4], near);
		task_of(w, r, task, sizeof(task));
		st = tpu_rendezvous_add_peer(w->rdv, task, w->rdv_url[r]);
	}
	/* A conflict found by a rank that came after the others were read. */
	return st ? st : tpu__world_broken(w);
}

static bool job_ok(const char *job)
{
	size_t n = strlen(job);

	if (!n || n >= 64 || !((*job | 0x20) >= 'a' && (*job | 0x20) <= 'z'))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!(job[i] == '_' || (job[i] >= '0' && job[i] <= '9') ||
		      ((job[i] | 0x20) >= 'a' && (job[i] | 0x20) <= 'z')))
			return false;
	return true;
}

/* @store: the library's store is used, so its address must be there. */
static tpu_status info_ok(const struct tpu_world_info *i, bool store)
{
	return i->size >= 1 && i->size <= TPU_WORLD_MAX && i->rank >= 0 && i->rank < i->size &&
	       (!store || (i->store_port && i->store_host[0])) &&
	       memchr(i->store_host, '\0', sizeof(i->store_host)) ? 0 : -EINVAL;
}

static void pipes_close(void *w)
{
	tpu__world_pipes_close(w);
}

/* The world's part of its context (pipes, listener, rendezvous), once. */
static void ctx_part_close(struct tpu_world *w)
{
	if (w->ctx_gone)
		return;
	w->ctx_gone = true;
	if (w->obj.close)
		tpu__ctx_del_obj(w->ctx, &w->obj);
	if (w->listener || w->pipes)
		tpu__ctx_run_sync(w->ctx, pipes_close, w);
	tpu_rendezvous_destroy(w->rdv);
	w->rdv = NULL;
}

/*
 * tpu_context_destroy() of a context whose world was not destroyed first:
 * its part goes now, while the context's thread still runs; the world's
 * destroy later does the rest (the barrier, the store, the segment).
 */
static void world_obj_close(struct tpu__ctx_obj *o)
{
	struct tpu_world *w = tpu__container_of(o, struct tpu_world, obj);

	fprintf(stderr, "tpu: world: rank %d: its context is destroyed before it; its pipes "
		"and rendezvous close now, tpu_world_destroy() does the rest\n", w->info.rank);
	ctx_part_close(w);
}

static void teardown(struct tpu_world *w)
{
	ctx_part_close(w);
	tpu__store_client_close(w->store);
	w->store = NULL;
	/* The others may still be reading the last barrier's answer. */
	if (w->server && !tpu__store_server_drain(w->server, w->timeout_ms))
		tpu__log_debug("world: stopping the store with clients still connected");
	tpu__store_server_stop(w->server);
	w->server = NULL;
	/*
	 * The segment, its mapping and the module's regions go now, not with
	 * the last reference: the context thread drops the accept's and the
	 * hellos' later, and a caller that destroyed the world may unmap the
	 * buffers it lent, or expect /dev/shm and its mappings clean.
	 */
	tpu__world_coll_drop_shm(w->coll);
	w->magic = TPU__MAGIC_DEAD;
	tpu__world_unref(w);
}

static tpu_status form(struct tpu_context *ctx, const struct tpu_world_options *opts,
		       const struct tpu_world_store *ext, struct tpu_world **out)
{
	static const struct tpu_world_options none;
	const struct tpu_world_options *o = opts ? opts : &none;
	char why[256] = "";
	struct tpu__secret secret;
	struct tpu_world *w;
	uint64_t deadline;
	tpu_status st;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!ctx || (o->nlisten && !o->listen_urls) || (o->job && !job_ok(o->job)) ||
	    !tpu__reserved_zero(o->reserved))
		return -EINVAL;
	if (ext && (!o->info || !ext->set || !ext->get || !ext->add ||
		    !tpu__reserved_zero(ext->reserved)))
		return -EINVAL;
	if (tpu__ctx_on_thread(ctx))
		return -EDEADLK;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->magic = WORLD_MAGIC;
	w->fork_gen = tpu__fork_gen();
	atomic_init(&w->refs, 1);
	atomic_init(&w->users, 0);
	atomic_init(&w->cancel, false);
	w->ctx = ctx;
	if (ext) {
		w->ext = *ext;
		w->ext_store = true;
	}
	pthread_mutex_init(&w->lock, NULL);
	pthread_mutex_init(&w->store_lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	snprintf(w->job, sizeof(w->job), "%s", o->job ? o->job : "worker");
	w->timeout_ms = o->timeout_ms ? o->timeout_ms : WORLD_DEFAULT_MS;
	/* The timeout bounds the whole call, however many requests it makes. */
	deadline = tpu__store_now_ms() + w->timeout_ms;
	host_id(w->host, sizeof(w->host));
	if (o->info) {
		w->info = *o->info;
		/* The caller's strings, whatever they hold, end inside their arrays. */
		w->info.convention[sizeof(w->info.convention) - 1] = '\0';
		w->info.store_from[sizeof(w->info.store_from) - 1] = '\0';
		w->info.detail[sizeof(w->info.detail) - 1] = '\0';
		st = info_ok(&w->info, !ext);
	} else {
		st = tpu_world_info_from_env(&w->info);
		if (st)
			fprintf(stderr, "tpu: world: %s\n", w->info.detail);
	}
	if (st)
		goto fail;
	w->rdv_url = calloc((size_t)w->info.size, sizeof(*w->rdv_url));
	w->pipe_url = calloc((size_t)w->info.size, sizeof(*w->pipe_url));
	w->pipes = calloc((size_t)w->info.size, sizeof(*w->pipes));
	if (!w->rdv_url || !w->pipe_url || !w->pipes) {
		st = -ENOMEM;
		goto fail;
	}
	if (ext)
		goto joined;
	/* The store and every pipe of the world prove the context's secret, if it has one. */
	tpu__ctx_secret(ctx, &secret);
	if (w->info.rank == 0)
		st = tpu__store_server_start_auth(w->info.store_host, w->info.store_port, &secret,
						  &w->server, why, sizeof(why));
	if (st == -EADDRINUSE) {
		/* Perhaps the store of this world, and this a second rank 0. */
		tpu_status again = tpu__world_rank0_again(w, &secret, deadline);

		if (again != -EADDRINUSE) {
			memset(&secret, 0, sizeof(secret));
			st = again;
			goto fail;
		}
	}
	if (!st)
		st = tpu__store_client_connect(w->info.store_host, w->info.store_port, w->timeout_ms,
					  &w->store, why, sizeof(why));
	if (!st && secret.set)
		st = tpu__store_client_auth(w->store, &secret, why, sizeof(why));
	memset(&secret, 0, sizeof(secret));
	if (st) {
		/* Rank 0 started twice finds the first one's store on its port. */
		fprintf(stderr, "tpu: world: rank %d: %s%s\n", w->info.rank, why,
			st == -EADDRINUSE && w->info.rank == 0 ?
			" (is rank 0 started twice, or another job using this port?)" : "");
		goto fail;
	}
	tpu__world_store_bound(w, deadline);
joined:
	st = tpu__world_join(w, deadline);
	if (!st)
		st = listen_all(w, o);
	if (!st)
		st = tpu__world_pipes_start(w);
	if (!st)
		st = exchange(w, deadline);
	if (st == -ETIMEDOUT && tpu__world_store_lost(w))
		fprintf(stderr, "tpu: world: rank %d: the store at %s:%u did not answer within "
			"%u ms\n", w->info.rank, w->info.store_host, w->info.store_port,
			w->timeout_ms);
	if (st)
		goto fail;
	tpu__log_debug("world: rank %d of %d formed (rendezvous %s, pipes %s)", w->info.rank,
		       w->info.size, w->rdv_url[w->info.rank], w->pipe_url[w->info.rank]);
	/* Closed before the pipes it owns, and the rendezvous, if the context goes first. */
	w->obj = (struct tpu__ctx_obj){ .close = world_obj_close, .pass = TPU__CTX_PASS_OWNER,
					.what = "a world" };
	tpu__ctx_add_obj(ctx, &w->obj);
	*out = w;
	return 0;
fail:
	tpu__log_debug("world: forming failed: %s", tpu_strerror(st));
	teardown(w);
	return st;
}

TPU_API tpu_status tpu_world_create(struct tpu_context *ctx, const struct tpu_world_options *opts,
				    struct tpu_world **out)
{
	return form(ctx, opts, NULL, out);
}

TPU_API tpu_status tpu_world_create_with_store(struct tpu_context *ctx,
					       const struct tpu_world_options *opts,
					       const struct tpu_world_store *store,
					       struct tpu_world **out)
{
	if (!store) {
		if (out)
			*out = NULL;
		return -EINVAL;
	}
	return form(ctx, opts, store, out);
}

static tpu_status barrier(struct tpu_world *w);

/* This destroy's, unless another thread's destroy has it (or is done). */
static bool world_claim(struct tpu_world *w)
{
	uint32_t live = WORLD_MAGIC;

	return __atomic_compare_exchange_n(&w->magic, &live, TPU__MAGIC_DEAD, false,
					   __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

/*
 * Calls of other threads still inside: end them (see world.h) and wait
 * until they have left.  The shared segment's waits see @cancel within
 * TPU__SHM_LIVENESS_NS, the store's within a slice of their polls (200
 * ms).  A caller's tpu_world_barrier() ends with TPU_E_CLOSED too; it
 * counted this rank already, so the destroy's barrier waits for that
 * one's "go" (barrier()), the one the other ranks' destroys complete.
 */
static void end_calls(struct tpu_world *w)
{
	pthread_mutex_lock(&w->lock);
	if (!atomic_load(&w->users)) {
		pthread_mutex_unlock(&w->lock);
		return;
	}
	atomic_store(&w->cancel, true);
	tpu__log_debug("world: rank %d: destroyed with %d call(s) of other threads inside; "
		       "they end with TPU_E_CLOSED", w->info.rank, atomic_load(&w->users));
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
	tpu_rendezvous_destroy(w->rdv);
	pthread_mutex_lock(&w->lock);
	while (atomic_load(&w->users))
		pthread_cond_wait(&w->cond, &w->lock);
	pthread_mutex_unlock(&w->lock);
	/* Nobody is inside: the rendezvous is gone, and the destroy's barrier may wait. */
	w->rdv = NULL;
	atomic_store(&w->cancel, false);
}

TPU_API void tpu_world_destroy(struct tpu_world *w)
{
	tpu_status st = tpu__world_check(w);

	if (st == TPU_E_FORKED) {
		/*
		 * A child's copy: no barrier (the child is not a rank), no store
		 * server (its thread is the parent's), no pipes or rendezvous
		 * (the parent's context).  Only the child's descriptor of the
		 * store connection and its copies of the arrays go.
		 */
		tpu__store_client_close(w->store);
		free(w->pipes);
		free(w->rdv_url);
		free(w->pipe_url);
		tpu__quarantine(w, &w->magic);
		return;
	}
	if (st || !world_claim(w)) {
		if (w)
			tpu__log_debug("tpu_world_destroy(%p): %s; ignored", (void *)w,
				       tpu_strerror(st ? st : TPU_E_DESTROYED));
		return;
	}
	end_calls(w);
	/* Only the library's store needs rank 0 to stay until the others leave. */
	if (!w->ext_store) {
		pthread_mutex_lock(&w->store_lock);
		st = barrier(w);
		pthread_mutex_unlock(&w->store_lock);
	}
	if (st)
		tpu__log_debug("world: rank %d leaves without the others: %s", w->info.rank,
			       tpu_strerror(st));
	teardown(w);
}

/* Every rank adds one to the count; the last one sets "go", which all wait for. */
static tpu_status barrier(struct tpu_world *w)
{
	uint64_t deadline = tpu__store_now_ms() + w->timeout_ms;
	/* A barrier a destroy cut short counted this rank: the destroy's waits for its "go". */
	bool counted = w->barrier_cut;
	unsigned int n = counted ? w->barriers - 1 : w->barriers++;
	char count[48], go[48];
	int64_t total = 0;
	tpu_status st = 0;
	size_t len;

	w->barrier_cut = false;
	snprintf(count, sizeof(count), "tpu/barrier/%u/count", n);
	snprintf(go, sizeof(go), "tpu/barrier/%u/go", n);
	tpu__world_store_bound(w, deadline);
	if (!counted) {
		st = tpu__world_store_add(w, count, 1, &total);
		if (!st && total == (int64_t)w->info.size)
			st = tpu__world_store_set(w, go, "1", 1);
	}
	if (!st) {
		st = tpu__world_wait_key(w, go, NULL, 0, &len, deadline);
		w->barrier_cut = st == TPU_E_CLOSED;
	}
	if (st == -EMSGSIZE)
		st = 0;
	/* A rank that joined twice, found since the world formed. */
	return st ? st : tpu__world_broken(w);
}

TPU_API tpu_status tpu_world_barrier(struct tpu_world *w)
{
	tpu_status st = tpu__world_check(w);

	if (st)
		return st;
	if (tpu__ctx_on_thread(w->ctx))
		return -EDEADLK;
	st = tpu__world_enter(w);
	if (st)
		return st;
	pthread_mutex_lock(&w->store_lock);
	st = barrier(w);
	pthread_mutex_unlock(&w->store_lock);
	return tpu__world_leave(w, st);
}

TPU_API const struct tpu_world_info *tpu_world_get_info(const struct tpu_world *w)
{
	return world_ok(w) ? &w->info : NULL;
}

TPU_API struct tpu_rendezvous *tpu_world_rendezvous(struct tpu_world *w)
{
	return world_ok(w) ? w->rdv : NULL;
}

TPU_API const char *tpu_world_url(const struct tpu_world *w, int rank, const char *what)
{
	if (!world_ok(w) || rank < 0 || rank >= w->info.size || !what)
		return NULL;
	if (!strcmp(what, "rdv"))
		return w->rdv_url[rank];
	if (!strcmp(what, "pipe"))
		return w->pipe_url[rank];
	return NULL;
}
