// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The collectives object and the executor of a step (TF's
 * CollectiveExecutor): a run is one member's part of one instance, on a
 * thread of its own, so runs of a step proceed in any order and never
 * block the context's thread, where the rendezvous calls back.  A run
 * that fails for any reason but a verdict aborts the rendezvous, so the
 * members waiting on it fail now rather than at their timeouts (TF's
 * StartAbort on error).  Where a group's members are processes of one
 * host, the calls lanes serve run there instead (coll_lanes.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coll.h"
#include "rdv/rdv.h"

#define COLL_PEER_FAILED	(-ECONNABORTED)

static tpu_status coll_new(struct tpu_rendezvous *rdv, bool owns, struct tpu_coll **out)
{
	struct tpu_coll *coll = calloc(1, sizeof(*coll));

	if (!coll)
		return -ENOMEM;
	coll->magic = TPU__MAGIC_COLL;
	coll->fork_gen = tpu__fork_gen();
	coll->rdv = rdv;
	coll->owns_rdv = owns;
	pthread_mutex_init(&coll->lock, NULL);
	pthread_cond_init(&coll->cond, NULL);
	*out = coll;
	return 0;
}

tpu_status tpu__coll_check(const struct tpu_coll *coll)
{
	tpu_status st = tpu__magic_check(coll, coll ? &coll->magic : NULL, TPU__MAGIC_COLL);

	if (!st && tpu__forked_since(coll->fork_gen))
		st = TPU_E_FORKED;
	return st;
}

static tpu_status exec_check(const struct tpu_coll_exec *exec)
{
	tpu_status st = tpu__magic_check(exec, exec ? &exec->magic : NULL, TPU__MAGIC_EXEC);

	if (!st && tpu__forked_since(exec->fork_gen))
		st = TPU_E_FORKED;
	return st;
}

TPU_API tpu_status tpu_coll_create(struct tpu_rendezvous *rdv, struct tpu_coll **out)
{
	tpu_status st;

	if (!rdv || !out)
		return -EINVAL;
	*out = NULL;
	st = tpu__rdv_check(rdv);
	return st ? st : coll_new(rdv, false, out);
}

TPU_API tpu_status tpu_coll_create_cluster(struct tpu_context *ctx,
					   const struct tpu_remote_options *opts,
					   struct tpu_coll **out)
{
	struct tpu_rendezvous *rdv;
	tpu_status err;

	if (!out)
		return -EINVAL;
	err = tpu_rendezvous_create_remote(ctx, opts, &rdv);
	if (err)
		return err;
	err = coll_new(rdv, true, out);
	if (err)
		tpu_rendezvous_destroy(rdv);
	return err;
}

TPU_API struct tpu_rendezvous *tpu_coll_rendezvous(struct tpu_coll *coll)
{
	return tpu__coll_check(coll) ? NULL : coll->rdv;
}

static void coll_free(struct tpu_coll *coll)
{
	if (coll->owns_rdv)
		tpu_rendezvous_destroy(coll->rdv);
	tpu__coll_forget_all(coll);
	tpu__coll_lanes_forget_all(coll);
	pthread_mutex_destroy(&coll->lock);
	pthread_cond_destroy(&coll->cond);
	tpu__quarantine(coll, &coll->magic);
}

TPU_API void tpu_coll_destroy(struct tpu_coll *coll)
{
	unsigned int execs;
	tpu_status st;

	if (!coll)
		return;
	st = tpu__coll_check(coll);
	if (st == TPU_E_FORKED) {
		/*
		 * The child's copy of the struct goes; its lock may have been
		 * held by a parent thread, and its rendezvous is the parent's.
		 */
		tpu__quarantine(coll, &coll->magic);
		return;
	}
	if (st) {
		tpu__log_debug("tpu_coll_destroy(%p): %s; ignored", (void *)coll, tpu_strerror(st));
		return;
	}
	pthread_mutex_lock(&coll->lock);
	coll->magic = TPU__MAGIC_DEAD;
	execs = coll->execs;
	coll->doomed = execs > 0;
	pthread_mutex_unlock(&coll->lock);
	if (execs) {
		/* Their runs in flight still use it: the last one's destroy frees it. */
		fprintf(stderr, "tpu: tpu_coll_destroy(%p) with %u executor(s) not destroyed; "
			"it is freed with the last of them\n", (void *)coll, execs);
		return;
	}
	coll_free(coll);
}

TPU_API void tpu_coll_last_reason(struct tpu_coll *coll, char *buf, size_t size)
{
	if (!buf || !size)
		return;
	buf[0] = 0;
	if (tpu__coll_check(coll))
		return;
	pthread_mutex_lock(&coll->lock);
	snprintf(buf, size, "%s", coll->last_reason);
	pthread_mutex_unlock(&coll->lock);
}

TPU_API tpu_status tpu_coll_exec_create(struct tpu_coll *coll, int64_t step_id,
					struct tpu_coll_exec **out)
{
	struct tpu_coll_exec *exec;
	tpu_status st;

	if (!out)
		return -EINVAL;
	*out = NULL;
	st = tpu__coll_check(coll);
	if (st)
		return st;
	if (step_id < 0)
		return -EINVAL;
	exec = calloc(1, sizeof(*exec));
	if (!exec)
		return -ENOMEM;
	/* Counted under the lock the destroy reads the count under. */
	pthread_mutex_lock(&coll->lock);
	if (coll->magic == TPU__MAGIC_COLL)
		coll->execs++;
	else
		st = TPU_E_DESTROYED;
	pthread_mutex_unlock(&coll->lock);
	if (st) {
		free(exec);
		return st;
	}
	exec->magic = TPU__MAGIC_EXEC;
	exec->fork_gen = tpu__fork_gen();
	exec->coll = coll;
	exec->step_id = step_id;
	pthread_mutex_init(&exec->lock, NULL);
	pthread_cond_init(&exec->cond, NULL);
	*out = exec;
	return 0;
}

TPU_API void tpu_coll_exec_destroy(struct tpu_coll_exec *exec)
{
	struct tpu_coll *coll;
	tpu_status st;
	bool last;

	if (!exec)
		return;
	st = exec_check(exec);
	if (st == TPU_E_FORKED) {
		/* The runs it counts are the parent's threads: nothing to wait for here. */
		tpu__quarantine(exec, &exec->magic);
		return;
	}
	if (st) {
		tpu__log_debug("tpu_coll_exec_destroy(%p): %s; ignored", (void *)exec,
			       tpu_strerror(st));
		return;
	}
	pthread_mutex_lock(&exec->lock);
	while (exec->running)
		pthread_cond_wait(&exec->cond, &exec->lock);
	exec->magic = TPU__MAGIC_DEAD;
	pthread_mutex_unlock(&exec->lock);
	pthread_mutex_destroy(&exec->lock);
	pthread_cond_destroy(&exec->cond);
	coll = exec->coll;
	tpu__quarantine(exec, &exec->magic);
	pthread_mutex_lock(&coll->lock);
	last = --coll->execs == 0 && coll->doomed;
	pthread_mutex_unlock(&coll->lock);
	if (last)
		coll_free(coll);
}

TPU_API tpu_status tpu_coll_exec_abort(struct tpu_coll_exec *exec, tpu_status status)
{
	tpu_status st = exec_check(exec);

	if (st)
		return st;
	if (status >= 0 || status < -TPU_ERRNO_MAX)
		return -EINVAL;
	pthread_mutex_lock(&exec->lock);
	if (!exec->aborted)
		exec->aborted = status;
	pthread_mutex_unlock(&exec->lock);
	return tpu_rendezvous_abort(exec->coll->rdv, status);
}

static tpu_status run_impl(struct tpu__coll_run *run)
{
	const struct tpu__coll_impl *impl;
	tpu_status err;

	bool ran;

	err = tpu__coll_lanes_run(run, false, &ran);
	if (ran || err)
		return err;
	err = tpu__coll_resolve(run);
	if (err)
		return err;
	err = tpu__coll_lanes_run(run, true, &ran);
	if (ran || err)
		return err;
	impl = tpu__coll_impl_find(run->inst.type, run->res.impl);
	return impl ? impl->run(run) : -ENOENT;
}

static void run_free(struct tpu__coll_run *run)
{
	tpu__coll_run_fini(run);
	pthread_mutex_destroy(&run->lock);
	pthread_cond_destroy(&run->cond);
	free(run);
}

/* One run from start to callback, on whichever thread calls it; frees @run. */
static void run_body(struct tpu__coll_run *run)
{
	struct tpu_coll_exec *exec = run->exec;
	struct tpu_coll *coll = run->coll;
	tpu_status err = run_impl(run);

	/*
	 * A verdict (mismatch, unknown implementation) reached every member
	 * alike and a local -EINVAL sent nothing; anything else may leave
	 * peers waiting on this member, so the step ends for all of them.
	 */
	if (err && err != TPU_E_COLL_MISMATCH && err != -ENOENT && err != -EINVAL)
		tpu_rendezvous_abort(coll->rdv, COLL_PEER_FAILED);
	tpu__coll_drain(run, -1);
	if (err) {
		pthread_mutex_lock(&coll->lock);
		if (run->reason[0])
			snprintf(coll->last_reason, sizeof(coll->last_reason), "%s", run->reason);
		else
			snprintf(coll->last_reason, sizeof(coll->last_reason),
				 "instance %d of group %d, rank %d, step %lld: %s",
				 (int)run->inst.instance_key, (int)run->group_key, run->rank,
				 (long long)exec->step_id, tpu_status_name(err));
		pthread_mutex_unlock(&coll->lock);
	}
	run->done(run->arg, err);
	run_free(run);
	pthread_mutex_lock(&exec->lock);
	exec->running--;
	pthread_cond_broadcast(&exec->cond);
	pthread_mutex_unlock(&exec->lock);
}

static void *run_thread(void *arg)
{
	run_body(arg);
	return NULL;
}

/* A checked run of @exec, counted as running; the caller starts it. */
static tpu_status run_new(struct tpu_coll_exec *exec, const struct tpu_coll_group *group,
			  const struct tpu_coll_instance *instance,
			  const struct tpu_coll_member *member, const void *in, void *out,
			  tpu_coll_cb done, void *arg, struct tpu__coll_run **out_run)
{
	struct tpu__coll_run *run;
	pthread_condattr_t cattr;
	tpu_status err;

	err = exec_check(exec);
	if (!err)
		err = tpu__coll_check(exec->coll);
	if (err)
		return err;
	if (!done)
		return -EINVAL;
	pthread_mutex_lock(&exec->lock);
	err = exec->aborted;
	pthread_mutex_unlock(&exec->lock);
	if (err)
		return err;
	run = calloc(1, sizeof(*run));
	if (!run)
		return -ENOMEM;
	pthread_mutex_init(&run->lock, NULL);
	/* wait_op() times its waits on CLOCK_MONOTONIC, as the deadline is. */
	pthread_condattr_init(&cattr);
	pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC);
	pthread_cond_init(&run->cond, &cattr);
	pthread_condattr_destroy(&cattr);
	run->coll = exec->coll;
	run->exec = exec;
	err = tpu__coll_run_init(run, group, instance, member);
	/* A broadcast's source needs only its input, the others only their output. */
	if (!err && (instance->type == TPU_COLL_BROADCAST ? (member->is_source ? !in : !out) :
		     (!in || !out)))
		err = -EINVAL;
	if (err) {
		run_free(run);
		return err;
	}
	run->in = in;
	run->out = out;
	run->done = done;
	run->arg = arg;
	run->deadline_ns = tpu__coll_now_ns() + run->inst.timeout_ns;
	pthread_mutex_lock(&exec->lock);
	exec->running++;
	pthread_mutex_unlock(&exec->lock);
	*out_run = run;
	return 0;
}

TPU_API tpu_status tpu_coll_exec_start(struct tpu_coll_exec *exec,
				       const struct tpu_coll_group *group,
				       const struct tpu_coll_instance *instance,
				       const struct tpu_coll_member *member, const void *in,
				       void *out, tpu_coll_cb done, void *arg)
{
	struct tpu__coll_run *run;
	pthread_attr_t attr;
	pthread_t tid;
	tpu_status err;

	err = run_new(exec, group, instance, member, in, out, done, arg, &run);
	if (err)
		return err;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	err = -pthread_create(&tid, &attr, run_thread, run);
	pthread_attr_destroy(&attr);
	if (err) {
		pthread_mutex_lock(&exec->lock);
		exec->running--;
		pthread_cond_broadcast(&exec->cond);
		pthread_mutex_unlock(&exec->lock);
		run_free(run);
	}
	return err;
}

static void keep_status(void *arg, tpu_status status)
{
	*(tpu_status *)arg = status;
}

/* On the caller's thread: every hand-off between threads costs latency on a busy host. */
TPU_API tpu_status tpu_coll_exec_run(struct tpu_coll_exec *exec,
				     const struct tpu_coll_group *group,
				     const struct tpu_coll_instance *instance,
				     const struct tpu_coll_member *member, const void *in,
				     void *out)
{
	struct tpu__coll_run *run;
	tpu_status status = 0, err;

	err = run_new(exec, group, instance, member, in, out, keep_status, &status, &run);
	if (err)
		return err;
	run_body(run);
	return status;
}
