// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* What the CUDA lists share: the driver, patterns in device memory, one transfer. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_harness.h"
#include "tap.h"

const struct tpu__cuda_api *cu;
void (*standin_counts)(unsigned long *, unsigned long *, unsigned long *);
void (*standin_vmm_counts)(unsigned long *, unsigned long *);
static void *driver;

bool cuda_harness_open(const char *list)
{
	const char *why = NULL;
	tpu_status st = tpu__cuda_api(&cu, &why);

	if (st) {
		/* Asked for a driver and it did not load: that is a failure. */
		if (getenv("TPU_CUDA_DRIVER"))
			CHECK(false, "%s: the driver TPU_CUDA_DRIVER names loads (%s)", list, why);
		else
			CHECK(true, "%s # SKIP %s (TPU_CUDA_DRIVER unset)", list, why);
		return false;
	}
	if (!driver) {
		driver = dlopen(getenv("TPU_CUDA_DRIVER") ? getenv("TPU_CUDA_DRIVER") : "libcuda.so.1",
				RTLD_NOW | RTLD_NOLOAD);
		if (driver) {
			*(void **)&standin_counts = dlsym(driver, "tpu_cuda_standin_counts");
			*(void **)&standin_vmm_counts = dlsym(driver, "tpu_cuda_standin_vmm_counts");
		}
	}
	tap_diag("%s: %s%s", list, why, standin_counts ? " (the stand-in)" : "");
	return true;
}

void cuda_harness_close(void)
{
	if (driver)
		dlclose(driver);
	driver = NULL;
	standin_counts = NULL;
	standin_vmm_counts = NULL;
}

uint8_t pat_byte(size_t i, unsigned int seed)
{
	return (uint8_t)(i * 131 + seed + (i >> 9));
}

void pat_fill(uint8_t *b, size_t len, unsigned int seed)
{
	for (size_t i = 0; i < len; i++)
		b[i] = pat_byte(i, seed);
}

bool pat_holds(const uint8_t *b, size_t len, unsigned int seed)
{
	for (size_t i = 0; i < len; i++)
		if (b[i] != pat_byte(i, seed))
			return false;
	return true;
}

/*
 * @len bytes of @seed's pattern on CUDA device @dev (0 on failure), by a
 * synchronous cuMemcpyHtoD from pageable memory: it may return before the
 * bytes land (the stand-in's land late, on the NULL stream), so a user of
 * the memory with stream NULL must be ordered after the NULL stream.
 */
tpu__cu_ptr dev_filled(uint32_t dev, size_t len, unsigned int seed)
{
	uint8_t *h = malloc(len);
	tpu__cu_ptr d = 0;

	if (h && !tpu__cuda_enter(dev) && !cu->mem_alloc(&d, len)) {
		pat_fill(h, len, seed);
		if (cu->memcpy_htod(d, h, len)) {
			cu->mem_free(d);
			d = 0;
		}
	}
	free(h);
	return d;
}

/* Whether device memory @d holds @seed's pattern, read back by the driver. */
bool dev_holds(uint32_t dev, tpu__cu_ptr d, size_t len, unsigned int seed)
{
	uint8_t *h = malloc(len);
	bool ok = h && !tpu__cuda_enter(dev) && !cu->memcpy_dtoh(h, d, len) && pat_holds(h, len, seed);

	free(h);
	return ok;
}

bool vmm_filled(uint32_t dev, size_t len, unsigned int seed, bool exportable, struct vmm *v)
{
	tpu__cu_mem_prop prop = { .type = TPU__CU_MEM_PINNED,
				  .handle_types = exportable ? TPU__CU_HANDLE_POSIX_FD : 0,
				  .location = { TPU__CU_LOCATION_DEVICE, (int)dev } };
	tpu__cu_mem_access acc = { .location = { TPU__CU_LOCATION_DEVICE, (int)dev },
				   .flags = TPU__CU_ACCESS_READWRITE };
	tpu__cu_mem_handle h = 0;
	uint8_t *buf = malloc(len);
	size_t g = 0;
	bool ok, mapped = false;

	memset(v, 0, sizeof(*v));
	v->dev = dev;
	ok = buf && tpu__cuda_has_vmm() && !tpu__cuda_enter(dev) &&
	     !cu->mem_granularity(&g, &prop, TPU__CU_GRANULARITY_MINIMUM) && g;
	if (ok) {
		v->size = (len + g - 1) / g * g;
		ok = !cu->mem_create(&h, v->size, &prop, 0);
	}
	ok = ok && !cu->mem_reserve(&v->p, v->size, 0, 0, 0);
	if (ok)
		mapped = ok = !cu->mem_map(v->p, v->size, 0, h, 0);
	ok = ok && !cu->mem_set_access(v->p, v->size, &acc, 1);
	if (h)
		cu->mem_release(h);
	if (ok) {
		pat_fill(buf, len, seed);
		ok = !cu->memcpy_htod(v->p, buf, len);
	}
	if (!ok) {
		if (mapped)
			cu->mem_unmap(v->p, v->size);
		if (v->p)
			cu->mem_unreserve(v->p, v->size);
		v->p = 0;
	}
	free(buf);
	return ok;
}

void vmm_free(struct vmm *v)
{
	if (!v->p || tpu__cuda_enter(v->dev))
		return;
	cu->mem_unmap(v->p, v->size);
	cu->mem_unreserve(v->p, v->size);
	v->p = 0;
}

/*
 * One tensor of @len bytes from @w at the client to @r at the server of
 * @pp; true when the read completed with @want_read and, if 0, every byte
 * arrived.  A CUDA source is filled by dev_filled(), its bytes still on
 * their way on the NULL stream; a CUDA destination read with stream NULL
 * too, the same way, with other bytes: a channel that does not order
 * after the NULL stream sends stale bytes, or has its own overwritten.
 */
bool xfer(struct pair *pp, struct end w, struct end r, size_t len, unsigned int seed,
		 tpu_status want_read)
{
	struct rec rw, rd, rr;
	struct tag tw = { &rw, 0 }, td = { &rd, 0 }, tr = { &rr, 0 };
	uint8_t *hw = malloc(len), *hr = calloc(1, len);
	tpu__cu_ptr dw = 0, dr = 0;
	struct tpu_message_tensor t = { .len = len, .device = { w.type, w.dev },
					.target = { r.type, r.dev }, .stream = w.stream };
	struct tpu_message m = { .tensors = &t, .ntensors = 1 };
	struct tpu_message *d;
	bool ok = hw && hr;

	rec_init(&rw);
	rec_init(&rd);
	rec_init(&rr);
	if (ok && w.type == TPU_DEVICE_CUDA) {
		dw = dev_filled(w.dev, len, seed);
		t.data = (void *)(uintptr_t)dw;
		ok = dw;
	} else if (ok) {
		pat_fill(hw, len, seed);
		t.data = hw;
	}
	if (ok && r.type == TPU_DEVICE_CUDA && !r.stream)
		ok = (dr = dev_filled(r.dev, len, seed + 77)) != 0;
	else if (ok && r.type == TPU_DEVICE_CUDA)
		ok = !tpu__cuda_enter(r.dev) && !cu->mem_alloc(&dr, len);
	ok = ok && !tpu_pipe_write(pp->client, &m, on_write, &tw) &&
	     !tpu_pipe_read_descriptor(pp->server, on_desc, &td) && rec_wait(&rd, 1) && !rd.st[0];
	if (ok) {
		d = rd.msg[0];
		ok = d->ntensors == 1 && d->tensors[0].len == len &&
		     d->tensors[0].target.type == r.type && d->tensors[0].target.index == r.dev;
		d->tensors[0].device = (struct tpu_device){ r.type, r.dev };
		d->tensors[0].data = r.type == TPU_DEVICE_CUDA ? (void *)(uintptr_t)dr : hr;
		d->tensors[0].stream = r.stream;
		ok = ok && !tpu_pipe_read(pp->server, d, on_write, &tr) && rec_wait(&rr, 1) &&
		     rr.st[0] == want_read;
		if (rr.n && rr.st[0] != want_read)
			tap_diag("cuda: read status %s, want %s", tpu_status_name(rr.st[0]),
				 tpu_status_name(want_read));
	}
	ok = ok && rec_wait(&rw, 1) && (want_read || !rw.st[0]);
	if (ok && !want_read)
		ok = r.type == TPU_DEVICE_CUDA ? dev_holds(r.dev, dr, len, seed) : pat_holds(hr, len, seed);
	if (dw && !tpu__cuda_enter(w.dev))
		cu->mem_free(dw);
	if (dr && !tpu__cuda_enter(r.dev))
		cu->mem_free(dr);
	free(hw);
	free(hr);
	return ok;
}

const char *type_name(uint32_t t)
{
	return t == TPU_DEVICE_CUDA ? "cuda" : "cpu";
}


/*
 * Each device pair over a pipe at @url with @channels (NULL: all), small
 * and over one copy chunk, every byte checked: CUDA sources must
 * negotiate @from_cuda, CPU ones @from_cpu, and CPU to CPU @cpu (NULL:
 * anything but a cuda channel).
 */
void cuda_pairs(const char *url, const char *channels, const char *from_cuda,
		const char *from_cpu, const char *cpu, uint32_t dev1)
{
	static const struct {
		uint32_t src, dst;
	} p[] = {
		{ TPU_DEVICE_CPU, TPU_DEVICE_CUDA },
		{ TPU_DEVICE_CUDA, TPU_DEVICE_CPU },
		{ TPU_DEVICE_CUDA, TPU_DEVICE_CUDA },
	};
	const char *got;
	struct pair pp;

	if (!pair_open(&pp, url, channels)) {
		CHECK(false, "cuda: a pipe over %s with channels %s", url, channels ? channels : "(all)");
		pair_close(&pp);
		return;
	}
	got = tpu_pipe_channel(pp.server, TPU_DEVICE_CPU, TPU_DEVICE_CPU);
	if (cpu)
		CHECK(!strcmp(got, cpu), "cuda: CPU->CPU over %s is %s's (got '%s')", url, cpu, got);
	else
		CHECK(strncmp(got, "cuda", 4) != 0, "cuda: CPU->CPU tensors never take a cuda channel");
	for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++) {
		const char *want = p[i].src == TPU_DEVICE_CUDA ? from_cuda : from_cpu;

		got = tpu_pipe_channel(pp.server, p[i].src, p[i].dst);
		CHECK(!strcmp(got, want), "cuda: %s %s->%s negotiates %s (got '%s')", url,
		      type_name(p[i].src), type_name(p[i].dst), want, got);
		for (int big = 0; big < 2; big++) {
			size_t len = big ? BIG : SMALL;
			struct end w = { p[i].src, 0, NULL }, r = { p[i].dst, dev1, NULL };

			CHECK(xfer(&pp, w, r, len, (unsigned int)(i * 2 + big), 0),
			      "cuda: %s %s->%s over %s, %zu bytes, every byte in place", url,
			      type_name(p[i].src), type_name(p[i].dst), want, len);
			/* The client's view, now that a message went through. */
			if (!big)
				CHECK(!strcmp(tpu_pipe_channel(pp.client, p[i].src, p[i].dst), want),
				      "cuda: both ends agree on %s->%s", type_name(p[i].src),
				      type_name(p[i].dst));
		}
	}
	pair_close(&pp);
}

/*
 * The writer's bytes come from work still queued on its stream: eight
 * late copies (the stand-in delays each).  A channel that does not wait
 * for the stream sends the old bytes.
 */
void stream_order(const char *url, const char *channels, const char *want)
{
	struct rec rw, rd, rr;
	struct tag tw = { &rw, 0 }, td = { &rd, 0 }, tr = { &rr, 0 };
	size_t len = 1u << 20, part = len / 8;
	uint8_t *fresh = malloc(len), *got = calloc(1, len);
	tpu__cu_ptr d = dev_filled(0, len, 40), dr = 0;
	tpu__cu_stream s = NULL, sr = NULL;
	struct tpu_message_tensor t = { .data = (void *)(uintptr_t)d, .len = len,
					.device = { TPU_DEVICE_CUDA, 0 },
					.target = { TPU_DEVICE_CUDA, 0 } };
	struct tpu_message m = { .tensors = &t, .ntensors = 1 };
	struct pair pp;
	bool ok = fresh && got && d && pair_open(&pp, url, channels);

	rec_init(&rw);
	rec_init(&rd);
	rec_init(&rr);
	CHECK(ok && !strcmp(tpu_pipe_channel(pp.server, TPU_DEVICE_CUDA, TPU_DEVICE_CUDA), want),
	      "cuda: stream order over %s: the pipe", want);
	if (!ok)
		goto out;
	pat_fill(fresh, len, 41);
	/* The fill on the NULL stream ends before @s (non-blocking) overwrites it. */
	ok = !tpu__cuda_enter(0) && !cu->stream_sync(NULL) &&
	     !cu->stream_create(&s, TPU__CU_STREAM_NON_BLOCKING) &&
	     !cu->stream_create(&sr, TPU__CU_STREAM_NON_BLOCKING) && !cu->mem_alloc(&dr, len);
	for (size_t i = 0; ok && i < 8; i++)
		ok = !cu->memcpy_htod_async(d + i * part, fresh + i * part, part, s);
	t.stream = s;
	ok = ok && !tpu_pipe_write(pp.client, &m, on_write, &tw) &&
	     !tpu_pipe_read_descriptor(pp.server, on_desc, &td) && rec_wait(&rd, 1) && !rd.st[0];
	if (ok) {
		struct tpu_message *dm = rd.msg[0];

		dm->tensors[0].device = (struct tpu_device){ TPU_DEVICE_CUDA, 0 };
		dm->tensors[0].data = (void *)(uintptr_t)dr;
		dm->tensors[0].stream = sr;
		ok = !tpu_pipe_read(pp.server, dm, on_write, &tr) && rec_wait(&rr, 1) && !rr.st[0];
	}
	ok = ok && rec_wait(&rw, 1) && !rw.st[0];
	/* The reader's stream: work queued after the callback sees the bytes. */
	ok = ok && !tpu__cuda_enter(0) && !cu->memcpy_dtoh_async(got, dr, len, sr) &&
	     !cu->stream_sync(sr);
	CHECK(ok && pat_holds(got, len, 41),
	      "cuda: over %s the writer's bytes are those its stream's work left", want);
	pair_close(&pp);
out:
	if (!tpu__cuda_enter(0)) {
		if (s)
			cu->stream_destroy(s);
		if (sr)
			cu->stream_destroy(sr);
		if (d)
			cu->mem_free(d);
		if (dr)
			cu->mem_free(dr);
	}
	free(fresh);
	free(got);
}
