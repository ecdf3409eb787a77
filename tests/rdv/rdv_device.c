// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * CUDA tensors on the rendezvous, per implementation: device to host, host
 * to device, device to device, blocking and not, a device destination too
 * small (-EMSGSIZE keeps the tensor), the source's stream order, and the
 * arguments refused.  Device memory comes from the driver the library
 * loads (TPU_CUDA_DRIVER, else libcuda.so.1; the tests' stand-in makes it
 * memory the CPU cannot touch); every byte is read back through it.
 * Without a driver the cases skip, saying why.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rdv_cases.h"
#include "tap.h"

#define SMALL	100
#define BIG	((3u << 20) + 5)
#define WAIT_NS	(20000ull * 1000000ull)

typedef unsigned long long cu_ptr;

/* The driver calls used here, as the driver API declares them. */
static struct {
	int (*init)(unsigned int);
	int (*device_get)(int *, int);
	int (*primary_retain)(void **, int);
	int (*ctx_set_current)(void *);
	int (*mem_alloc)(cu_ptr *, size_t);
	int (*mem_free)(cu_ptr);
	int (*htod)(cu_ptr, const void *, size_t);
	int (*dtoh)(void *, cu_ptr, size_t);
	int (*stream_create)(void **, unsigned int);
	int (*stream_destroy)(void *);
	int (*stream_sync)(void *);
	int (*htod_async)(cu_ptr, const void *, size_t, void *);
} cu;

/* NULL when the driver is there; else why not. */
static const char *driver_open(void)
{
	static const char *why = "";
	const char *path = getenv("TPU_CUDA_DRIVER");
	void *h, *ctx = NULL;
	int dev = 0;

	if (why && !*why) {
		h = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
		why = h ? NULL : "no CUDA driver (TPU_CUDA_DRIVER unset, no libcuda.so.1)";
#define LOAD(f, name) if (!why && !(*(void **)&cu.f = dlsym(h, name))) why = "the driver lacks " name
		LOAD(init, "cuInit");
		LOAD(device_get, "cuDeviceGet");
		LOAD(primary_retain, "cuDevicePrimaryCtxRetain");
		LOAD(ctx_set_current, "cuCtxSetCurrent");
		LOAD(mem_alloc, "cuMemAlloc_v2");
		LOAD(mem_free, "cuMemFree_v2");
		LOAD(htod, "cuMemcpyHtoD_v2");
		LOAD(dtoh, "cuMemcpyDtoH_v2");
		LOAD(stream_create, "cuStreamCreate");
		LOAD(stream_destroy, "cuStreamDestroy_v2");
		LOAD(stream_sync, "cuStreamSynchronize");
		LOAD(htod_async, "cuMemcpyHtoDAsync_v2");
#undef LOAD
		if (!why && (cu.init(0) || cu.device_get(&dev, 0) ||
			     cu.primary_retain(&ctx, dev) || cu.ctx_set_current(ctx)))
			why = "the driver has no usable device 0";
	}
	return why;
}

/* This thread's context: the library's threads leave theirs alone. */
static void enter(void)
{
	void *ctx = NULL;
	int dev = 0;

	if (!cu.device_get(&dev, 0) && !cu.primary_retain(&ctx, dev))
		cu.ctx_set_current(ctx);
}

/*
 * @len bytes of @seed on device 0 (0 on failure), by a synchronous copy
 * from pageable memory, which may land after it returned (the stand-in's
 * do, on the NULL stream): a tensor with stream NULL must wait for it.
 */
static cu_ptr dev_new(size_t len, uint64_t seed)
{
	uint8_t *h = malloc(len);
	cu_ptr d = 0;

	enter();
	if (h && !cu.mem_alloc(&d, len)) {
		rdv_fill(h, len, seed);
		if (cu.htod(d, h, len)) {
			cu.mem_free(d);
			d = 0;
		}
	}
	free(h);
	return d;
}

static uint64_t dev_sum(cu_ptr d, size_t len)
{
	uint8_t *h = malloc(len);
	uint64_t sum = 0;

	enter();
	if (h && !cu.dtoh(h, d, len))
		sum = rdv_checksum(h, len);
	free(h);
	return sum;
}

static uint64_t seed_sum(size_t len, uint64_t seed)
{
	uint8_t *h = malloc(len);
	uint64_t sum = 0;

	if (h) {
		rdv_fill(h, len, seed);
		sum = rdv_checksum(h, len);
	}
	free(h);
	return sum;
}

struct done {
	tpu_status st;
	size_t len;
	int n;
};

static void sent(void *arg, tpu_status st)
{
	struct done *d = arg;

	d->st = st;
	__atomic_add_fetch(&d->n, 1, __ATOMIC_RELEASE);
}

static void received(void *arg, tpu_status st, size_t len)
{
	struct done *d = arg;

	d->st = st;
	d->len = len;
	__atomic_add_fetch(&d->n, 1, __ATOMIC_RELEASE);
}

/* Sleeps between looks: a spinning test starves the library's threads under valgrind. */
static bool done_wait(struct done *d)
{
	uint64_t end = rdv_now_ns() + WAIT_NS;
	struct timespec ms = { 0, 1000000 };

	while (!__atomic_load_n(&d->n, __ATOMIC_ACQUIRE) && rdv_now_ns() < end)
		nanosleep(&ms, NULL);
	return __atomic_load_n(&d->n, __ATOMIC_ACQUIRE) > 0;
}

/* After a failure: nothing of this key may stay pending on memory about to be freed. */
static void settle(struct tpu_rendezvous *rdv, const char *key, struct done *ds, struct done *dr)
{
	tpu_rendezvous_cancel(rdv, key, strlen(key));
	if (ds)
		done_wait(ds);
	if (dr)
		done_wait(dr);
}

static struct tpu_tensor on_dev(cu_ptr d, size_t len, void *stream)
{
	return (struct tpu_tensor){ .data = (void *)(uintptr_t)d, .len = len,
				    .device = { TPU_DEVICE_CUDA, 0 }, .stream = stream };
}

/* One tensor of @len bytes, from device or host memory to device or host memory. */
static void pair(struct tpu_rendezvous *rdv, const char *name, bool src_dev, bool dst_dev,
		 size_t len, bool wait, uint64_t seed)
{
	cu_ptr s = src_dev ? dev_new(len, seed) : 0, d = 0;
	uint8_t *hs = malloc(len), *hd = calloc(1, len);
	struct tpu_tensor ts = { .data = hs, .len = len }, td = { .data = hd, .len = len };
	struct done ds = { 0 }, dr = { 0 };
	const char *key = "dev/pair";
	size_t got = 0;
	bool ok = hs && hd && (!src_dev || s);
	uint64_t sum = 0;

	/* Other bytes still landing on the NULL stream: the receive must come after them. */
	if (ok && dst_dev)
		ok = (d = dev_new(len, seed + 50)) != 0;
	if (src_dev)
		ts = on_dev(s, len, NULL);
	else if (hs)
		rdv_fill(hs, len, seed);
	if (dst_dev)
		td = on_dev(d, len, NULL);
	if (ok && wait) {
		ok = !tpu_rendezvous_send(rdv, key, strlen(key), &ts, 0, sent, &ds) &&
		     !tpu_rendezvous_recv_wait(rdv, key, strlen(key), &td, WAIT_NS, &got) &&
		     got == len && done_wait(&ds) && !ds.st;
	} else if (ok) {
		ok = !tpu_rendezvous_recv(rdv, key, strlen(key), &td, 0, received, &dr) &&
		     !tpu_rendezvous_send(rdv, key, strlen(key), &ts, 0, sent, &ds) &&
		     done_wait(&dr) && !dr.st && dr.len == len && done_wait(&ds) && !ds.st;
	}
	if (ok)
		sum = dst_dev ? dev_sum(d, len) : rdv_checksum(hd, len);
	CHECK(ok && sum == seed_sum(len, seed), "%s_%s_to_%s_%zu_bytes%s_every_byte_in_place", name,
	      src_dev ? "cuda" : "cpu", dst_dev ? "cuda" : "cpu", len, wait ? "_recv_wait" : "");
	if (!ok)
		settle(rdv, key, &ds, wait ? NULL : &dr);
	enter();
	if (s)
		cu.mem_free(s);
	if (d)
		cu.mem_free(d);
	free(hs);
	free(hd);
}

/* A device destination too small: -EMSGSIZE, the length, and the tensor stays. */
static void too_small(struct tpu_rendezvous *rdv, const char *name)
{
	cu_ptr s = dev_new(SMALL, 31), small = 0, d = 0;
	struct tpu_tensor ts = on_dev(s, SMALL, NULL), td;
	struct done ds = { 0 };
	size_t got = 0;
	bool ok;

	enter();
	ok = s && !cu.mem_alloc(&small, SMALL / 2) && !cu.mem_alloc(&d, SMALL) &&
	     !tpu_rendezvous_send(rdv, "dev/small", 9, &ts, 0, sent, &ds);
	td = on_dev(small, SMALL / 2, NULL);
	CHECK(ok && tpu_rendezvous_recv_wait(rdv, "dev/small", 9, &td, WAIT_NS, &got) == -EMSGSIZE &&
	      got == SMALL, "%s_cuda_destination_too_small_is_emsgsize_with_the_length", name);
	td = on_dev(d, SMALL, NULL);
	ok = ok && !tpu_rendezvous_recv_wait(rdv, "dev/small", 9, &td, WAIT_NS, &got) &&
	     got == SMALL && dev_sum(d, SMALL) == seed_sum(SMALL, 31) && done_wait(&ds) && !ds.st;
	CHECK(ok, "%s_after_emsgsize_the_tensor_reaches_a_large_enough_device_buffer", name);
	if (!ok)
		settle(rdv, "dev/small", &ds, NULL);
	enter();
	if (s)
		cu.mem_free(s);
	if (small)
		cu.mem_free(small);
	if (d)
		cu.mem_free(d);
}

/* The sender's bytes are what the work queued on its stream left. */
static void stream_order(struct tpu_rendezvous *rdv, const char *name)
{
	size_t len = 1u << 20;
	cu_ptr s = dev_new(len, 40);
	uint8_t *fresh = malloc(len), *got = calloc(1, len);
	void *stream = NULL;
	struct tpu_tensor ts, td = { .data = got, .len = len };
	struct done ds = { 0 };
	size_t n = 0;
	bool ok;

	enter();
	/* The fill on the NULL stream ends before the non-blocking stream's copies. */
	ok = s && fresh && got && !cu.stream_sync(NULL) && !cu.stream_create(&stream, 1);
	if (ok)
		rdv_fill(fresh, len, 41);
	/* Late copies (the stand-in delays each): a send that does not wait sends seed 40. */
	for (size_t i = 0; ok && i < 4; i++)
		ok = !cu.htod_async(s + i * (len / 4), fresh + i * (len / 4), len / 4, stream);
	ts = on_dev(s, len, stream);
	ok = ok && !tpu_rendezvous_send(rdv, "dev/stream", 10, &ts, 0, sent, &ds) &&
	     !tpu_rendezvous_recv_wait(rdv, "dev/stream", 10, &td, WAIT_NS, &n) && n == len;
	ok = ok && rdv_checksum(got, len) == seed_sum(len, 41) && done_wait(&ds);
	CHECK(ok, "%s_a_cuda_send_carries_what_its_stream_left", name);
	if (!ok)
		settle(rdv, "dev/stream", &ds, NULL);
	enter();
	if (stream) {
		cu.stream_sync(stream);
		cu.stream_destroy(stream);
	}
	if (s)
		cu.mem_free(s);
	free(fresh);
	free(got);
}

static void refused(struct tpu_rendezvous *rdv, struct tpu_context *ctx, const char *name)
{
	cu_ptr s = dev_new(4096, 3);
	struct tpu_buffer *b = NULL;
	struct tpu_tensor t = on_dev(s, 4096, NULL);
	char host[16];
	struct done d = { 0 };

	CHECK_STATUS(tpu_rendezvous_send(rdv, "dev/bad", 7, &t, TPU_SEND_GIVE, sent, &d), -EINVAL,
		     "%s_giving_cuda_memory_is_einval", name);
	t.device.index = 4096;
	CHECK_STATUS(tpu_rendezvous_send(rdv, "dev/bad", 7, &t, 0, sent, &d), -ENODEV,
		     "%s_a_cuda_ordinal_the_driver_lacks_is_enodev", name);
	t = on_dev(s, 4097, NULL);
	CHECK_STATUS(tpu_rendezvous_recv(rdv, "dev/bad", 7, &t, 0, received, &d), -EINVAL,
		     "%s_a_cuda_destination_past_its_allocation_is_einval", name);
	t = (struct tpu_tensor){ .data = host, .len = sizeof(host), .stream = host };
	CHECK_STATUS(tpu_rendezvous_send(rdv, "dev/bad", 7, &t, 0, sent, &d), -EINVAL,
		     "%s_a_stream_on_host_memory_is_einval", name);
	t = (struct tpu_tensor){ .data = host, .len = sizeof(host), .device = { 7, 0 } };
	CHECK_STATUS(tpu_rendezvous_send(rdv, "dev/bad", 7, &t, 0, sent, &d), -EINVAL,
		     "%s_an_unknown_device_type_is_einval", name);
	if (!tpu_buffer_alloc(ctx, 4096, &b)) {
		t = on_dev(s, 4096, NULL);
		t.buffer = b;
		CHECK_STATUS(tpu_rendezvous_send(rdv, "dev/bad", 7, &t, 0, sent, &d), -EINVAL,
			     "%s_cuda_memory_naming_a_host_buffer_is_einval", name);
		tpu_buffer_free(b);
	}
	CHECK(d.n == 0, "%s_refused_cuda_calls_never_call_back", name);
	enter();
	if (s)
		cu.mem_free(s);
}

void rdv_device_run(const struct rdv_impl *impl)
{
	struct tpu_context_options o = { .flags = impl->ctx_flags };
	struct tpu_context *ctx = NULL;
	struct tpu_rendezvous *rdv = NULL;
	const char *why = driver_open();

	if (why) {
		CHECK(true, "%s_cuda_tensors # SKIP %s", impl->name, why);
		return;
	}
	if (tpu_context_create(&o, &ctx) || tpu_rendezvous_create(ctx, impl->impl, &rdv)) {
		CHECK(false, "%s_cuda_tensors_rendezvous", impl->name);
		tpu_context_destroy(ctx);
		return;
	}
	for (int w = 0; w < 2; w++) {
		pair(rdv, impl->name, true, false, SMALL, w, 1);
		pair(rdv, impl->name, false, true, SMALL, w, 2);
		pair(rdv, impl->name, true, true, BIG, w, 3);
	}
	pair(rdv, impl->name, true, false, BIG, false, 4);
	too_small(rdv, impl->name);
	stream_order(rdv, impl->name);
	refused(rdv, ctx, impl->name);
	tpu_rendezvous_destroy(rdv);
	tpu_context_destroy(ctx);
}
