// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Forming a world: rank 0 starts the store, every rank connects to it,
 * creates its remote rendezvous and pipe listener, publishes their URLs
 * under "tpu/world/RANK" and reads every other rank's, which makes the
 * rendezvous's cluster map.  Destroy is a barrier first, so that rank 0
 * keeps the store while another rank may still ask it who dials a pipe.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

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

static bool world_ok(const struct tpu_world *w)
{
	return !tpu__world_check(w);
}

/*
 * Where to listen when the caller did not say: loopback tcp and shm when
 * every rank is on this host, else tcp on the address this host reaches
 * the store from, which is the one the other hosts can reach it on.
 */
static tpu_status listen_here(struct tpu_world *w, char *url, size_t size)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char ip[INET6_ADDRSTRLEN];

	if (w->info.size == 1 || w->info.local_size == w->info.size) {
		*url = '\0';
		return 0;
	}
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
	return 0;
}

static void task_of(const struct tpu_world *w, int rank, char *buf, size_t size)
{
	snprintf(buf, size, "/job:%s/replica:0/task:%d", w->job, rank);
}

/* The listener's (or rendezvous's) URL peers should dial: tcp if it has one. */
static tpu_status own_url(struct tpu_world *w, bool rdv, char *buf, size_t size)
{
	tpu_status st = rdv ? tpu_rendezvous_url(w->rdv, "tcp", buf, size)
			    : tpu_listener_url(w->listener, "tcp", buf, size);

	if (st)
		st = rdv ? tpu_rendezvous_url(w->rdv, NULL, buf, size)
			 : tpu_listener_url(w->listener, NULL, buf, size);
	return st;
}

/* The pipe listener's URLs: the rendezvous's, with shm names of their own. */
static tpu_status pipe_urls(const char *const *urls, size_t n, char ***out)
{
	char **v = calloc(n ? n : 1, sizeof(*v));

	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		bool shm = !strncmp(urls[i], "shm://", 6);

		if (asprintf(&v[i], "%s%s", urls[i], shm ? "-pipe" : "") < 0) {
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
	char self[WORLD_TASK_MAX], here[WORLD_URL_MAX];
	const char *here_p = here;
	char **purls = NULL;
	tpu_status st;

	task_of(w, w->info.rank, self, sizeof(self));
	ro.task = self;
	if (!ro.listen_urls) {
		st = listen_here(w, here, sizeof(here));
		if (st)
			return st;
		if (*here) {
			ro.listen_urls = &here_p;
			ro.nlisten = 1;
		}
	}
	st = tpu_rendezvous_create_remote(w->ctx, &ro, &w->rdv);
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

/* Publish this rank's URLs, then learn every other rank's. */
static tpu_status exchange(struct tpu_world *w)
{
	char key[64], val[2 * WORLD_URL_MAX + 2], task[WORLD_TASK_MAX];
	int me = w->info.rank;
	tpu_status st;
	size_t len;

	st = own_url(w, true, w->rdv_url[me], WORLD_URL_MAX);
	if (!st)
		st = own_url(w, false, w->pipe_url[me], WORLD_URL_MAX);
	if (st)
		return st;
	snprintf(key, sizeof(key), "tpu/world/%d", me);
	len = (size_t)snprintf(val, sizeof(val), "%s %s", w->rdv_url[me], w->pipe_url[me]);
	st = tpu__store_set(w->store, key, val, len);
	for (int r = 0; !st && r < w->info.size; r++) {
		char *sp;

		if (r == me)
			continue;
		snprintf(key, sizeof(key), "tpu/world/%d", r);
		st = tpu__store_get(w->store, key, val, sizeof(val) - 1, &len, w->timeout_ms);
		if (st == -ETIMEDOUT)
			tpu__log_debug("world: rank %d did not join within %u ms", r, w->timeout_ms);
		if (st)
			break;
		val[len] = '\0';
		sp = strchr(val, ' ');
		if (!sp || sp - val >= WORLD_URL_MAX || strlen(sp + 1) >= WORLD_URL_MAX)
			return -EPROTO;
		memcpy(w->rdv_url[r], val, (size_t)(sp - val));
		w->rdv_url[r][sp - val] = '\0';
		memcpy(w->pipe_url[r], sp + 1, strlen(sp + 1) + 1);
		task_of(w, r, task, sizeof(task));
		st = tpu_rendezvous_add_peer(w->rdv, task, w->rdv_url[r]);
	}
	return st;
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

static tpu_status info_ok(const struct tpu_world_info *i)
{
	return i->size >= 1 && i->size <= TPU_WORLD_MAX && i->rank >= 0 && i->rank < i->size &&
	       i->store_port && i->store_host[0] &&
	       memchr(i->store_host, '\0', sizeof(i->store_host)) ? 0 : -EINVAL;
}

static void pipes_close(void *w)
{
	tpu__world_pipes_close(w);
}

static void teardown(struct tpu_world *w)
{
	if (w->listener || w->pipes)
		tpu__ctx_run_sync(w->ctx, pipes_close, w);
	tpu_rendezvous_destroy(w->rdv);
	w->rdv = NULL;
	tpu__store_client_close(w->store);
	w->store = NULL;
	/* The others may still be reading the last barrier's answer. */
	if (w->server && !tpu__store_server_drain(w->server, w->timeout_ms))
		tpu__log_debug("world: stopping the store with clients still connected");
	tpu__store_server_stop(w->server);
	w->server = NULL;
	w->magic = TPU__MAGIC_DEAD;
	tpu__world_unref(w);
}

TPU_API tpu_status tpu_world_create(struct tpu_context *ctx, const struct tpu_world_options *opts,
				    struct tpu_world **out)
{
	static const struct tpu_world_options none;
	const struct tpu_world_options *o = opts ? opts : &none;
	char why[256] = "";
	struct tpu_world *w;
	tpu_status st;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!ctx || (o->nlisten && !o->listen_urls) || (o->job && !job_ok(o->job)))
		return -EINVAL;
	if (tpu__ctx_on_thread(ctx))
		return -EDEADLK;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->magic = WORLD_MAGIC;
	w->fork_gen = tpu__fork_gen();
	atomic_init(&w->refs, 1);
	w->ctx = ctx;
	pthread_mutex_init(&w->lock, NULL);
	pthread_mutex_init(&w->store_lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	snprintf(w->job, sizeof(w->job), "%s", o->job ? o->job : "worker");
	w->timeout_ms = o->timeout_ms ? o->timeout_ms : WORLD_DEFAULT_MS;
	if (o->info) {
		w->info = *o->info;
		/* The caller's strings, whatever they hold, end inside their arrays. */
		w->info.convention[sizeof(w->info.convention) - 1] = '\0';
		w->info.store_from[sizeof(w->info.store_from) - 1] = '\0';
		w->info.detail[sizeof(w->info.detail) - 1] = '\0';
		st = info_ok(&w->info);
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
	if (w->info.rank == 0)
		st = tpu__store_server_start(w->info.store_host, w->info.store_port, &w->server,
					why, sizeof(why));
	if (!st)
		st = tpu__store_client_connect(w->info.store_host, w->info.store_port, w->timeout_ms,
					  &w->store, why, sizeof(why));
	if (st) {
		fprintf(stderr, "tpu: world: rank %d: %s\n", w->info.rank, why);
		goto fail;
	}
	st = listen_all(w, o);
	if (!st)
		st = tpu__world_pipes_start(w);
	if (!st)
		st = exchange(w);
	if (st)
		goto fail;
	tpu__log_debug("world: rank %d of %d formed (rendezvous %s, pipes %s)", w->info.rank,
		       w->info.size, w->rdv_url[w->info.rank], w->pipe_url[w->info.rank]);
	*out = w;
	return 0;
fail:
	tpu__log_debug("world: forming failed: %s", tpu_strerror(st));
	teardown(w);
	return st;
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
	if (st) {
		if (w)
			tpu__log_debug("tpu_world_destroy(%p): %s; ignored", (void *)w,
				       tpu_strerror(st));
		return;
	}
	st = tpu_world_barrier(w);
	if (st)
		tpu__log_debug("world: rank %d leaves without the others: %s", w->info.rank,
			       tpu_strerror(st));
	teardown(w);
}

TPU_API tpu_status tpu_world_barrier(struct tpu_world *w)
{
	char name[32];
	tpu_status st = tpu__world_check(w);

	if (st)
		return st;
	if (tpu__ctx_on_thread(w->ctx))
		return -EDEADLK;
	pthread_mutex_lock(&w->store_lock);
	snprintf(name, sizeof(name), "tpu/barrier/%u", w->barriers++);
	st = tpu__store_barrier(w->store, name, (uint32_t)w->info.size, w->timeout_ms);
	pthread_mutex_unlock(&w->store_lock);
	return st;
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
