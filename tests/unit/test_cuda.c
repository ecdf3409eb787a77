// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * CUDA memory through pipes: the cuda_staged and cuda_ipc channels, against
 * the driver the library loads (TPU_CUDA_DRIVER, else libcuda.so.1).  make
 * run points TPU_CUDA_DRIVER at tests/cuda_standin's stand-in, whose device
 * memory the CPU cannot touch (a channel that dereferences it crashes the
 * test) and whose streams run late (a channel that does not wait for a
 * stream reads stale bytes).  Without any driver the list is skipped.
 *
 * Every byte is checked through the driver's own copies.  Also: the
 * channel each device pair negotiates, a writer in another process
 * (CUDA IPC for real), stream ordering, bad devices and pointers, and a
 * process without a driver (or without a device) getting TPU_E_NO_CUDA.
 */
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cuda_harness.h"
#include "tap.h"
#include "tpu_user.h"

/* A forked child that reads one byte of device memory dies of SIGSEGV. */
static void guard(void)
{
	tpu__cu_ptr d = dev_filled(0, 4096, 1);
	int status = 0;
	pid_t pid;

	if (!d) {
		CHECK(false, "cuda: device memory for the guard test");
		return;
	}
	/* Under valgrind the child's invalid read is reported: that is the point. */
	pid = fork();
	if (pid == 0) {
		volatile const uint8_t *p = (const uint8_t *)(uintptr_t)d;

		/* The default action, not a sanitizer's handler. */
		signal(SIGSEGV, SIG_DFL);
		_exit(p[0] == pat_byte(0, 1) ? 10 : 11);
	}
	if (pid > 0 && waitpid(pid, &status, 0) != pid)
		status = -1;
	CHECK(pid > 0 && WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV,
	      "cuda: the CPU touching device memory dies of SIGSEGV (status %#x)", status);
	cu->mem_free(d);
}

/* Writes that name devices or memory wrongly are refused at once. */
static void bad_tensors(void)
{
	struct rec r;
	struct tag tag = { &r, 0 };
	tpu__cu_ptr d = dev_filled(0, 4096, 3), gone = dev_filled(0, 4096, 3);
	struct tpu_message_tensor t = { .data = (void *)(uintptr_t)d, .len = 4096,
					.device = { TPU_DEVICE_CUDA, 0 } };
	struct tpu_message m = { .tensors = &t, .ntensors = 1 };
	tpu__cu_ctx cur = (tpu__cu_ctx)&r;
	struct pair pp;

	rec_init(&r);
	if (!d || !gone || !pair_open(&pp, "tcp://127.0.0.1:0", NULL)) {
		CHECK(false, "cuda: bad tensors: set-up");
		return;
	}
	tpu__cuda_enter(0);
	cu->mem_free(gone);
	/* The checks below run on this thread: its (lack of a) context stays. */
	cu->ctx_set_current(NULL);
	t.device.index = 4096;
	CHECK_STATUS(tpu_pipe_write(pp.client, &m, on_write, &tag), -ENODEV,
		     "cuda: a device ordinal the driver lacks is -ENODEV");
	t.device.index = 0;
	t.len = 4097;
	CHECK_STATUS(tpu_pipe_write(pp.client, &m, on_write, &tag), -EINVAL,
		     "cuda: a tensor running past its allocation is -EINVAL");
	t.len = 4096;
	t.data = (void *)(uintptr_t)gone;
	CHECK_STATUS(tpu_pipe_write(pp.client, &m, on_write, &tag), -EINVAL,
		     "cuda: freed device memory is -EINVAL");
	if (tpu__cuda_ndevices() > 1) {
		t.data = (void *)(uintptr_t)d;
		t.device.index = 1;
		CHECK_STATUS(tpu_pipe_write(pp.client, &m, on_write, &tag), -EINVAL,
			     "cuda: device 0's memory named device 1 is -EINVAL");
	}
	t = (struct tpu_message_tensor){ .data = &tag, .len = 8, .stream = &tag };
	CHECK_STATUS(tpu_pipe_write(pp.client, &m, on_write, &tag), -EINVAL,
		     "cuda: a stream on a CPU tensor is -EINVAL");
	CHECK(r.n == 0, "cuda: refused writes never call back");
	CHECK(!cu->ctx_get_current(&cur) && cur == NULL,
	      "cuda: checking a tensor leaves the caller's current context alone");
	pair_close(&pp);
	tpu__cuda_enter(0);
	cu->mem_free(d);
}

/*
 * Ends that share no CUDA channel (basic only): CUDA writes queued before
 * the pipe opened fail alone, in order, and the CPU write between them
 * goes through.
 */
static void no_channel(void)
{
	struct tpu_context_options o = { .channels = "basic" };
	struct tpu_context *a = NULL, *b = NULL;
	struct tpu_listener *l = NULL;
	struct tpu_pipe *c = NULL;
	const char *url = "tcp://127.0.0.1:0";
	char got[300], cpu[64] = "cpu";
	tpu__cu_ptr d = dev_filled(0, 4096, 9);
	struct tpu_message_tensor t[3] = {
		{ .data = (void *)(uintptr_t)d, .len = 4096, .device = { TPU_DEVICE_CUDA, 0 } },
		{ .data = cpu, .len = sizeof(cpu) },
		{ .data = (void *)(uintptr_t)d, .len = 4096, .device = { TPU_DEVICE_CUDA, 0 },
		  .target = { TPU_DEVICE_CUDA, 0 } },
	};
	struct tpu_message m[3];
	struct rec ra, rw;
	struct tag ta = { &ra, 0 }, tw[3] = { { &rw, 0 }, { &rw, 1 }, { &rw, 2 } };
	bool ok;

	rec_init(&ra);
	rec_init(&rw);
	ok = d && !tpu_context_create(&o, &a) && !tpu_context_create(&o, &b) &&
	     !tpu_listener_create(a, &url, 1, &l) && !tpu_listener_url(l, NULL, got, sizeof(got)) &&
	     !tpu_listener_accept(l, on_accept, &ta) && !tpu_pipe_connect(b, got, &c);
	for (int k = 0; ok && k < 3; k++) {
		m[k] = (struct tpu_message){ .tensors = &t[k], .ntensors = 1 };
		ok = !tpu_pipe_write(c, &m[k], on_write, &tw[k]);
	}
	ok = ok && rec_wait(&rw, 3);
	CHECK(ok && rw.order[0] == 0 && rw.st[0] == -ENOPROTOOPT && rw.order[1] == 1 &&
	      rw.st[1] == 0 && rw.order[2] == 2 && rw.st[2] == -ENOPROTOOPT,
	      "cuda: without a common CUDA channel CUDA writes fail alone (-ENOPROTOOPT), in order");
	CHECK(ok && !strcmp(tpu_pipe_channel(c, TPU_DEVICE_CUDA, TPU_DEVICE_CUDA), "") &&
	      !strcmp(tpu_pipe_channel(c, TPU_DEVICE_CPU, TPU_DEVICE_CPU), "basic"),
	      "cuda: tpu_pipe_channel says \"\" for a pair without a channel");
	tpu_pipe_close(c);
	if (rec_wait(&ra, 1) && !ra.st[0])
		tpu_pipe_close(ra.pipe);
	tpu_listener_close(l);
	tpu_context_destroy(b);
	tpu_context_destroy(a);
	if (d && !tpu__cuda_enter(0))
		cu->mem_free(d);
}

/* VMM memory: what the library exports of it, and what the stand-in refuses. */
static void vmm_cases(void)
{
	struct vmm v, closed;
	tpu__cu_ptr d = dev_filled(0, 4096, 71);
	uint64_t size = 0, off = 0;
	uint8_t buf[16];
	int fd = -1;
	bool ok;

	if (!tpu__cuda_has_vmm()) {
		CHECK(true, "cuda: VMM # SKIP the driver lacks the VMM entry points");
		if (d)
			cu->mem_free(d);
		return;
	}
	if (!d || !vmm_filled(0, 3 << 20, 70, true, &v) || !vmm_filled(0, 4096, 72, false, &closed)) {
		CHECK(false, "cuda: VMM allocations for the tests");
		return;
	}
	ok = !tpu__cuda_vmm_export((void *)(uintptr_t)(v.p + 100), 0, &fd, &size, &off);
	CHECK(ok && fd >= 0 && size == v.size && off == 100,
	      "cuda: a VMM allocation exports as a descriptor, its mapping's size and the offset "
	      "(size %llu of %zu, offset %llu)", (unsigned long long)size, v.size,
	      (unsigned long long)off);
	if (fd >= 0)
		close(fd);
	CHECK_STATUS(tpu__cuda_vmm_export((void *)(uintptr_t)d, 0, &fd, &size, &off), -ENOENT,
		     "cuda: memory from cuMemAlloc is not VMM memory (-ENOENT)");
	CHECK_STATUS(tpu__cuda_vmm_export((void *)(uintptr_t)closed.p, 0, &fd, &size, &off),
		     -EOPNOTSUPP,
		     "cuda: a VMM allocation not made exportable as a descriptor is -EOPNOTSUPP");
	if (standin_counts) {
		tpu__cu_ipc_handle h;
		tpu__cu_mem_prop prop = { .type = TPU__CU_MEM_PINNED,
					  .location = { TPU__CU_LOCATION_DEVICE, 0 } };
		tpu__cu_mem_handle mh = 0;
		tpu__cu_ptr p = 0;

		CHECK(cu->mem_free(v.p) == TPU__CU_ERROR_INVALID_VALUE,
		      "cuda stand-in: cuMemFree of VMM memory is CUDA_ERROR_INVALID_VALUE");
		CHECK(cu->ipc_get(&h, v.p) == TPU__CU_ERROR_INVALID_VALUE,
		      "cuda stand-in: VMM memory has no legacy IPC handle");
		CHECK(cu->mem_unreserve(v.p, v.size) == TPU__CU_ERROR_INVALID_VALUE,
		      "cuda stand-in: freeing an address range still mapped is refused");
		CHECK(!cu->mem_create(&mh, 2 << 20, &prop, 0) && !cu->mem_reserve(&p, 2 << 20, 0, 0, 0) &&
		      !cu->mem_map(p, 2 << 20, 0, mh, 0) &&
		      cu->memcpy_dtoh(buf, p, sizeof(buf)) == TPU__CU_ERROR_ILLEGAL_ADDRESS,
		      "cuda stand-in: a mapping without cuMemSetAccess faults (CUDA_ERROR_ILLEGAL_ADDRESS)");
		if (p) {
			cu->mem_unmap(p, 2 << 20);
			cu->mem_unreserve(p, 2 << 20);
		}
		if (mh)
			cu->mem_release(mh);
	}
	vmm_free(&v);
	vmm_free(&closed);
	cu->mem_free(d);
}

/* The stand-in catches misuse with the driver's error codes. */
static void standin_misuse(void)
{
	tpu__cu_ptr d = dev_filled(0, 8192, 5);
	tpu__cu_ipc_handle h;
	uint8_t buf[16];

	if (!d) {
		CHECK(false, "cuda stand-in: an allocation");
		return;
	}
	CHECK(cu->memcpy_dtoh(buf, d + 8190, 16) == TPU__CU_ERROR_INVALID_VALUE,
	      "cuda stand-in: a copy past an allocation is CUDA_ERROR_INVALID_VALUE");
	CHECK(cu->memcpy_htod(d, (const void *)(uintptr_t)d, 16) == TPU__CU_ERROR_INVALID_VALUE,
	      "cuda stand-in: device memory passed as host memory is CUDA_ERROR_INVALID_VALUE");
	CHECK(cu->ipc_get(&h, d) == 0 &&
	      cu->ipc_open(&(tpu__cu_ptr){ 0 }, h, 0) == TPU__CU_ERROR_INVALID_CONTEXT,
	      "cuda stand-in: a process opening its own IPC handle is refused");
	CHECK(cu->ipc_close(d) == TPU__CU_ERROR_INVALID_VALUE,
	      "cuda stand-in: closing memory never opened by IPC is CUDA_ERROR_INVALID_VALUE");
	if (tpu__cuda_ndevices() > 1) {
		tpu__cu_stream s1 = NULL;

		/* A stream of device 1 used while device 0's context is current. */
		CHECK(!tpu__cuda_enter(1) && !cu->stream_create(&s1, 0) && !tpu__cuda_enter(0) &&
		      cu->memcpy_dtoh_async(buf, d, 16, s1) == TPU__CU_ERROR_INVALID_CONTEXT,
		      "cuda stand-in: another context's stream is CUDA_ERROR_INVALID_CONTEXT");
		if (s1 && !tpu__cuda_enter(1))
			cu->stream_destroy(s1);
		tpu__cuda_enter(0);
	}
	{
		tpu__cu_event e = NULL;

		CHECK(!cu->event_create(&e, 0) && !cu->event_destroy(e) &&
		      cu->event_query(e) == TPU__CU_ERROR_INVALID_HANDLE,
		      "cuda stand-in: a destroyed event is CUDA_ERROR_INVALID_HANDLE");
	}
	{
		/*
		 * The synchronous copies' model (that a pageable copy lands
		 * late is what the transfers above catch; here, what is sure).
		 */
		uint8_t a[64], b[64], *pin = NULL;
		tpu__cu_stream s = NULL;

		pat_fill(a, sizeof(a), 90);
		CHECK(!cu->stream_create(&s, TPU__CU_STREAM_NON_BLOCKING) &&
		      !cu->memcpy_htod(d, a, sizeof(a)) && !cu->stream_sync(NULL) &&
		      !cu->memcpy_dtoh_async(b, d, sizeof(b), s) && !cu->stream_sync(s) &&
		      pat_holds(b, sizeof(b), 90),
		      "cuda stand-in: a pageable cuMemcpyHtoD's bytes are in place once the NULL stream is synchronised");
		pat_fill(a, sizeof(a), 91);
		CHECK(!cu->memcpy_htod(d, a, sizeof(a)) && !cu->memcpy_dtoh(b, d, sizeof(b)) &&
		      pat_holds(b, sizeof(b), 91),
		      "cuda stand-in: cuMemcpyDtoH waits for the NULL stream's work");
		if (!cu->host_alloc((void **)&pin, sizeof(a), 0))
			pat_fill(pin, sizeof(a), 92);
		CHECK(pin && !cu->memcpy_htod(d, pin, sizeof(a)) &&
		      !cu->memcpy_dtoh_async(b, d, sizeof(b), s) && !cu->stream_sync(s) &&
		      pat_holds(b, sizeof(b), 92),
		      "cuda stand-in: a cuMemcpyHtoD from page-locked memory is done when it returns");
		if (pin)
			cu->host_free(pin);
		if (s)
			cu->stream_destroy(s);
	}
	CHECK(cu->mem_free(d) == 0 && cu->mem_free(d) == TPU__CU_ERROR_INVALID_VALUE,
	      "cuda stand-in: a double free is CUDA_ERROR_INVALID_VALUE");
	CHECK(cu->memcpy_dtoh(buf, d, 16) == TPU__CU_ERROR_INVALID_VALUE,
	      "cuda stand-in: a copy from freed memory is CUDA_ERROR_INVALID_VALUE");
}

/*
 * Run this binary again with @env added, as one of the peers below; its
 * exit status (-1 if it did not run).
 */
static int spawn_self(const char *env1, const char *env2, pid_t *out)
{
	extern char **environ;
	char self[4096], *argv[] = { "unit_tests", NULL }, *envp[256];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	size_t k = 0;
	pid_t pid;
	int status;

	if (n <= 0)
		return -1;
	self[n] = '\0';
	for (char **e = environ; *e && k < 250; e++)
		if (strncmp(*e, "UNIT_ONLY=", 10) && strncmp(*e, "TPU_CUDA_DRIVER=", 16) &&
		    strncmp(*e, "TPU_CUDA_STANDIN_DEVICES=", 25) &&
		    strncmp(*e, "TPU_CUDA_STANDIN_DELAY_US=", 26))
			envp[k++] = *e;
	/* The driver goes on unless env1 or env2 name another. */
	if (getenv("TPU_CUDA_DRIVER") && strncmp(env1, "TPU_CUDA_DRIVER=", 16) &&
	    (!env2 || strncmp(env2, "TPU_CUDA_DRIVER=", 16)))
		envp[k++] = getenv("TPU_CUDA_DRIVER") - strlen("TPU_CUDA_DRIVER=");
	envp[k++] = (char *)env1;
	if (env2)
		envp[k++] = (char *)env2;
	envp[k] = NULL;
	if (posix_spawn(&pid, self, NULL, NULL, argv, envp))
		return -1;
	if (out) {
		*out = pid;
		return 0;
	}
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
		return -1;
	return WEXITSTATUS(status);
}

/*
 * What cuda_writer() sends: message k from @src, suggested for @dst, seed
 * 60 + k; the fourth, from VMM memory, when the driver has VMM.
 */
static const uint32_t wsrc[4] = { TPU_DEVICE_CUDA, TPU_DEVICE_CUDA, TPU_DEVICE_CPU, TPU_DEVICE_CUDA };
static const uint32_t wdst[4] = { TPU_DEVICE_CUDA, TPU_DEVICE_CPU, TPU_DEVICE_CUDA, TPU_DEVICE_CUDA };
static const char *const wwhat[4] = { "", "", "", " (VMM memory)" };

static int nwrites(void)
{
	return tpu__cuda_has_vmm() ? 4 : 3;
}

/*
 * Read cuda_writer()'s three messages from @pipe, each where the writer
 * suggested, and check every byte; the CUDA-source ones must come over
 * @want_dev, the CPU-source one over cuda_staged.  false at the first
 * failure.
 */
static bool read_writers(struct tpu_pipe *pipe, const char *want_dev, const char *where)
{
	bool ok = true;

	for (int k = 0; ok && k < nwrites(); k++) {
		struct rec rd, rr;
		struct tag td = { &rd, 0 }, tr = { &rr, 0 };
		struct tpu_message *d;
		uint8_t *h = calloc(1, BIG);
		const char *want = wsrc[k] == TPU_DEVICE_CUDA ? want_dev : "cuda_staged";
		tpu__cu_ptr dr = 0;

		rec_init(&rd);
		rec_init(&rr);
		ok = h && !tpu_pipe_read_descriptor(pipe, on_desc, &td) && rec_wait(&rd, 1) &&
		     !rd.st[0];
		if (ok && wdst[k] == TPU_DEVICE_CUDA)
			ok = !tpu__cuda_enter(0) && !cu->mem_alloc(&dr, BIG);
		if (ok) {
			d = rd.msg[0];
			d->tensors[0].device = (struct tpu_device){ wdst[k], 0 };
			d->tensors[0].data = wdst[k] == TPU_DEVICE_CUDA ? (void *)(uintptr_t)dr : h;
			ok = d->tensors[0].len == BIG && d->tensors[0].target.type == wdst[k] &&
			     !tpu_pipe_read(pipe, d, on_write, &tr) && rec_wait(&rr, 1) && !rr.st[0];
		}
		ok = ok && !strcmp(tpu_pipe_channel(pipe, wsrc[k], wdst[k]), want) &&
		     (wdst[k] == TPU_DEVICE_CUDA ? dev_holds(0, dr, BIG, 60 + k)
						 : pat_holds(h, BIG, 60 + k));
		CHECK(ok, "cuda: %s %s->%s tensor%s over %s, every byte in place", where,
		      type_name(wsrc[k]), type_name(wdst[k]), wwhat[k], want);
		if (dr && !tpu__cuda_enter(0))
			cu->mem_free(dr);
		free(h);
	}
	return ok;
}

/* A writer in another process: CUDA IPC from its memory, staging from its CPU memory. */
static void cross_process(void)
{
	struct tpu_context *ctx = NULL;
	struct tpu_listener *l = NULL;
	char shm[64], got[300], env[400];
	const char *url = shm;
	struct rec ra;
	struct tag ta = { &ra, 0 };
	unsigned long allocs0 = 0, live0 = 0, opened0 = 0, allocs1, live1, opened1;
	unsigned long vmm0 = 0, resv0 = 0, vmm1 = 0, resv1 = 0;
	pid_t child = -1;
	int status = -1;
	bool ok;

	rec_init(&ra);
	/* shm: cuda_ipc goes only where the kernel proves the writer's pid. */
	snprintf(shm, sizeof(shm), "shm://tpu-unit-cuda-x-%d", (int)getpid());
	if (standin_counts)
		standin_counts(&allocs0, &live0, &opened0);
	if (standin_vmm_counts)
		standin_vmm_counts(&vmm0, &resv0);
	ok = !tpu_context_create(NULL, &ctx) && !tpu_listener_create(ctx, &url, 1, &l) &&
	     !tpu_listener_url(l, NULL, got, sizeof(got)) && !tpu_listener_accept(l, on_accept, &ta);
	snprintf(env, sizeof(env), "TPU_TEST_CUDA_WRITER=%s", got);
	/*
	 * The writer's stand-in is slow (its NULL stream's fills land 80 ms
	 * late), ours is not: a writer whose descriptor leaves before its
	 * bytes are in place is caught, however loaded the machine.
	 */
	ok = ok && !spawn_self(env, "TPU_CUDA_STANDIN_DELAY_US=20000", &child) &&
	     rec_wait(&ra, 1) && !ra.st[0];
	CHECK(ok, "cuda: a writer process connected");
	if (ok)
		read_writers(ra.pipe, "cuda_ipc", "another process's");
	if (child > 0) {
		waitpid(child, &status, 0);
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "cuda: the writer process saw its writes complete (status %#x)", status);
	}
	if (standin_counts) {
		standin_counts(&allocs1, &live1, &opened1);
		CHECK(opened1 - opened0 == 2 && live1 == live0 && allocs1 == allocs0,
		      "cuda: the reader opened two IPC handles and closed them, leaking nothing "
		      "(opened %lu, live %lu, allocations %lu -> %lu)", opened1 - opened0, live1,
		      allocs0, allocs1);
	}
	if (standin_vmm_counts) {
		standin_vmm_counts(&vmm1, &resv1);
		CHECK(vmm1 == vmm0 && resv1 == resv0,
		      "cuda: the reader unmapped the writer's VMM allocation and freed its address "
		      "range (allocations %lu -> %lu, reservations %lu -> %lu)", vmm0, vmm1, resv0,
		      resv1);
	}
	if (ra.n && ra.pipe)
		tpu_pipe_close(ra.pipe);
	tpu_listener_close(l);
	tpu_context_destroy(ctx);
}

/*
 * The reader of another host (tests/vm/pair-xfer.sh): listen on @url,
 * read cuda_writer()'s messages from the first pipe, print TAP; the exit
 * status says whether every byte arrived.
 */
int cuda_reader(const char *url)
{
	struct tpu_context *ctx = NULL;
	struct tpu_listener *l = NULL;
	struct rec ra;
	struct tag ta = { &ra, 0 };
	bool ok;

	rec_init(&ra);
	if (!cuda_harness_open("cuda reader"))
		return 1;
	ok = !tpu_context_create(NULL, &ctx) && !tpu_listener_create(ctx, &url, 1, &l) &&
	     !tpu_listener_accept(l, on_accept, &ta);
	/* The other host's writer may take a while to start: two minutes. */
	for (int i = 0; ok && i < 6 && !rec_wait(&ra, 1); i++)
		;
	ok = ok && ra.n && !ra.st[0];
	CHECK(ok, "cuda: a writer on another host connected to %s", url);
	ok = ok && read_writers(ra.pipe, "cuda_staged", "another host's");
	if (ra.n && ra.pipe)
		tpu_pipe_close(ra.pipe);
	tpu_listener_close(l);
	tpu_context_destroy(ctx);
	cuda_harness_close();
	return tap_finish();
}

/*
 * The writer process of cross_process() and of tests/vm/pair-xfer.sh; its
 * exit status: 2 no connection or API, 3 device memory, 4 a write refused,
 * 5 no answer, 6 a write failed, 7 a descriptor left open; plus 10 where a
 * write had already arrived (the reader took this writer: do not retry).
 */
int cuda_writer(const char *url)
{
	struct tpu_context *ctx = NULL;
	struct tpu_pipe *p = NULL;
	struct tpu_message_tensor t[4];
	struct tpu_message m[4];
	struct rec w;
	struct tag tw = { &w, 0 };
	uint8_t *h = malloc(BIG);
	tpu__cu_ptr d[2] = { 0, 0 };
	struct vmm v = { 0 };
	int rc = 0, n, fds = -1;

	rec_init(&w);
	if (tpu__cuda_api(&cu, NULL) || !h || tpu_context_create(NULL, &ctx) ||
	    tpu_pipe_connect(ctx, url, &p))
		return 2;
	n = nwrites();
	pat_fill(h, BIG, 62);
	t[0] = (struct tpu_message_tensor){ .len = BIG, .device = { TPU_DEVICE_CUDA, 0 },
					    .target = { TPU_DEVICE_CUDA, 0 } };
	t[1] = (struct tpu_message_tensor){ .len = BIG, .device = { TPU_DEVICE_CUDA, 0 } };
	t[2] = (struct tpu_message_tensor){ .data = h, .len = BIG,
					    .target = { TPU_DEVICE_CUDA, 0 } };
	t[3] = t[0];
	for (int k = 0; !rc && k < n; k++) {
		/*
		 * Each device tensor filled just before its write, by a
		 * synchronous copy from pageable memory that lands late on
		 * the NULL stream (stream NULL): the reader, another process,
		 * must not see the descriptor before those bytes are in place.
		 */
		if (k < 2 && !(d[k] = dev_filled(0, BIG, 60 + k)))
			rc = 3;
		if (k == 3 && !vmm_filled(0, BIG, 63, true, &v))
			rc = 3;
		if (k != 2)
			t[k].data = (void *)(uintptr_t)(k == 3 ? v.p : d[k]);
		m[k] = (struct tpu_message){ .tensors = &t[k], .ntensors = 1 };
		/* The VMM one alone: its export must be closed once ACKed. */
		if (k == 3 && !rc && rec_wait(&w, 3))
			fds = count_fds();
		if (!rc && tpu_pipe_write(p, &m[k], on_write, &tw))
			rc = 4;
	}
	if (!rc && !rec_wait(&w, n))
		rc = 5;
	for (int k = 0; !rc && k < n; k++)
		if (w.st[k])
			rc = 6;
	/* The transport may still be closing a descriptor of its own: two seconds. */
	for (int i = 0; !rc && n == 4 && count_fds() != fds; i++) {
		struct timespec ms10 = { 0, 10000000 };

		if (i == 200)
			rc = 7;
		nanosleep(&ms10, NULL);
	}
	/* Once a write arrived the reader has this writer: a retry would find nobody. */
	if (rc && w.n && !w.st[0])
		rc += 10;
	if (rc)
		fprintf(stderr, "cuda writer to %s: exit status %d, %d writes answered\n", url, rc,
			w.n);
	tpu_pipe_close(p);
	tpu_context_destroy(ctx);
	tpu__cuda_enter(0);
	cu->mem_free(d[0]);
	cu->mem_free(d[1]);
	vmm_free(&v);
	free(h);
	return rc;
}

/*
 * The peer of absent(): a process whose driver is missing (or has no
 * device).  Its exit status: 0 when a CUDA tensor is TPU_E_NO_CUDA and
 * the negotiation still offers staging to a peer with CUDA.
 */
int cuda_absent(void)
{
	uint8_t b[64];
	struct tpu_message_tensor t = { .data = b, .len = sizeof(b),
					.device = { TPU_DEVICE_CUDA, 0 } };
	struct tpu_message m = { .tensors = &t, .ntensors = 1 };
	struct rec r;
	struct tag tag = { &r, 0 };
	struct pair pp;
	int rc = 0;

	rec_init(&r);
	if (tpu__cuda_api(NULL, NULL) != TPU_E_NO_CUDA)
		return 2;
	if (!pair_open(&pp, "tcp://127.0.0.1:0", NULL))
		return 3;
	if (tpu_pipe_write(pp.client, &m, on_write, &tag) != TPU_E_NO_CUDA)
		rc = 4;
	/* Staging needs no driver on a CPU side; IPC needs one on both. */
	else if (strcmp(tpu_pipe_channel(pp.server, TPU_DEVICE_CPU, TPU_DEVICE_CUDA), "cuda_staged") ||
		 strcmp(tpu_pipe_channel(pp.server, TPU_DEVICE_CUDA, TPU_DEVICE_CUDA), "cuda_staged"))
		rc = 5;
	pair_close(&pp);
	return rc;
}

static void absent(void)
{
	int rc = spawn_self("TPU_TEST_CUDA_ABSENT=1", "TPU_CUDA_DRIVER=/nonexistent/libcuda.so.1",
			    NULL);

	CHECK(rc == 0, "cuda: without a driver a CUDA tensor is TPU_E_NO_CUDA (peer exit %d)", rc);
	if (standin_counts) {
		rc = spawn_self("TPU_TEST_CUDA_ABSENT=1", "TPU_CUDA_STANDIN_DEVICES=0", NULL);
		CHECK(rc == 0, "cuda: a driver without devices is TPU_E_NO_CUDA (peer exit %d)", rc);
	}
}

void test_cuda(void)
{
	char shm[64];
	uint32_t dev1;

	if (!cuda_harness_open("cuda"))
		return;
	CHECK(tpu__cuda_ndevices() >= 1, "cuda: the driver has a device");
	dev1 = tpu__cuda_ndevices() > 1 ? 1 : 0;
	guard();
	/* cuda_ipc acts on the writer's pid, which only shm proves (chan_cuda_ipc.c). */
	cuda_pairs("tcp://127.0.0.1:0", NULL, "cuda_staged", "cuda_staged", NULL, dev1);
	snprintf(shm, sizeof(shm), "shm://tpu-unit-cuda-%d", (int)getpid());
	cuda_pairs(shm, NULL, "cuda_ipc", "cuda_staged", NULL, dev1);
	cuda_pairs("tcp://127.0.0.1:0", "cuda_staged,cma", "cuda_staged", "cuda_staged", NULL, dev1);
	stream_order(shm, NULL, "cuda_ipc");
	stream_order("tcp://127.0.0.1:0", "cuda_staged", "cuda_staged");
	bad_tensors();
	no_channel();
	if (standin_counts)
		standin_misuse();
	vmm_cases();
	cross_process();
	absent();
	cuda_harness_close();
}
