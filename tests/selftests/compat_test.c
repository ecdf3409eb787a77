// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * A 32-bit process through compat_ioctl: the uapi structures must mean the
 * same to an i386 process as to an x86-64 one.
 *
 * Built with -m32 as a freestanding static program (the build machine need
 * not have a 32-bit C library, so no kselftest harness either): raw int 0x80
 * system calls, its own TAP output.  It runs wherever the kernel has
 * CONFIG_IA32_EMULATION.
 */
#include <linux/tensorpipe.h>

#include <asm/unistd_32.h>
#include <linux/errno.h>
#include <linux/fcntl.h>
#include <linux/mman.h>

#ifndef __i386__
#error "compat_test must be built with -m32"
#endif

/* The layout 64-bit processes see (info_test checks it there). */
_Static_assert(sizeof(struct tp_info) == 72, "tp_info");
_Static_assert(sizeof(struct tp_region_register) == 32, "tp_region_register");
_Static_assert(sizeof(struct tp_region_alloc) == 32, "tp_region_alloc");
_Static_assert(sizeof(struct tp_region_release) == 8, "tp_region_release");
_Static_assert(sizeof(struct tp_domain_create) == 16, "tp_domain_create");
_Static_assert(sizeof(struct tp_domain_attach) == 16, "tp_domain_attach");
_Static_assert(sizeof(struct tp_send) == 64, "tp_send");
_Static_assert(sizeof(struct tp_recv) == 80, "tp_recv");
_Static_assert(sizeof(struct tp_cancel) == 24, "tp_cancel");
_Static_assert(sizeof(struct tp_abort) == 8, "tp_abort");
_Static_assert(sizeof(struct tp_region_export) == 24, "tp_region_export");
_Static_assert(sizeof(struct tp_region_import) == 24, "tp_region_import");
_Static_assert(__builtin_offsetof(struct tp_region_import, len) == 16,
	       "tp_region_import.len");
_Static_assert(sizeof(struct tp_completion) == 32, "tp_completion");
_Static_assert(__builtin_offsetof(struct tp_recv, timeout_ns) == 40,
	       "tp_recv.timeout_ns");
_Static_assert(__builtin_offsetof(struct tp_completion, len) == 16,
	       "tp_completion.len");

#define LEN		65536
#define TENSOR		40000
/* High bits set: a 64-bit field truncated to 32 bits would show. */
#define USER_DATA	0x1122334455667788ULL
#define PAGE		4096

/* gcc may call these even in freestanding code. */
void *memset(void *dst, int c, unsigned int n)
{
	unsigned char *d = dst;

	while (n--)
		*d++ = (unsigned char)c;
	return dst;
}

void *memcpy(void *dst, const void *src, unsigned int n)
{
	unsigned char *d = dst;
	const unsigned char *s = src;

	while (n--)
		*d++ = *s++;
	return dst;
}

static long sys3(long nr, long a, long b, long c)
{
	long ret;

	__asm__ volatile("int $0x80"
			 : "=a"(ret)
			 : "a"(nr), "b"(a), "c"(b), "d"(c)
			 : "memory");
	return ret;
}

/* The sixth argument goes in %ebp, which cannot be an asm operand. */
static long sys6(long nr, long a, long b, long c, long d, long e, long f)
{
	long regs[2] = { f, nr };
	long ret;

	__asm__ volatile("push %%ebp\n\t"
			 "mov 0(%%eax), %%ebp\n\t"
			 "mov 4(%%eax), %%eax\n\t"
			 "int $0x80\n\t"
			 "pop %%ebp"
			 : "=a"(ret)
			 : "a"(regs), "b"(a), "c"(b), "d"(c), "S"(d), "D"(e)
			 : "memory");
	return ret;
}

static unsigned int str_len(const char *s)
{
	unsigned int n = 0;

	while (s[n])
		n++;
	return n;
}

static void put(const char *s)
{
	sys3(__NR_write, 1, (long)s, str_len(s));
}

static void put_int(long v)
{
	char buf[16];
	int i = sizeof(buf);
	unsigned long u = v < 0 ? -(unsigned long)v : (unsigned long)v;

	buf[--i] = 0;
	do {
		buf[--i] = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (v < 0)
		buf[--i] = '-';
	put(buf + i);
}

static int tests_run, tests_failed;

static void result(int ok, const char *name, const char *why, long value)
{
	tests_run++;
	if (!ok)
		tests_failed++;
	put(ok ? "ok " : "not ok ");
	put_int(tests_run);
	put(" compat.");
	put(name);
	put("\n");
	if (!ok) {
		put("# ");
		put(why);
		put(": ");
		put_int(value);
		put("\n");
	}
}

static void skip(const char *name, const char *why)
{
	tests_run++;
	put("ok ");
	put_int(tests_run);
	put(" # SKIP compat.");
	put(name);
	put(": ");
	put(why);
	put("\n");
}

static long tp_ioctl(int fd, unsigned int cmd, void *arg)
{
	return sys3(__NR_ioctl, fd, cmd, (long)arg);
}

static void *map_anon(unsigned int len)
{
	long p = sys6(__NR_mmap2, 0, len, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	return p < 0 && p > -4096 ? 0 : (void *)p;
}

static unsigned char pattern(unsigned int i)
{
	return (unsigned char)(i * 31 + 7);
}

static void test_get_info(int fd)
{
	struct tp_info info;
	long ret;
	int i, zero = 1;

	memset(&info, 0, sizeof(info));
	ret = tp_ioctl(fd, TP_IOC_GET_INFO, &info);
	for (i = 0; i < 4; i++)
		zero &= info.reserved[i] == 0;
	result(ret == 0 && info.abi_version == TP_ABI_VERSION &&
	       info.page_size == PAGE && info.max_key_len >= 256 && zero,
	       "get_info_reports_abi_version_and_limits", "ioctl returned",
	       ret);
	info.flags = 1;
	ret = tp_ioctl(fd, TP_IOC_GET_INFO, &info);
	result(ret == -EINVAL, "get_info_with_nonzero_flags_fails_einval",
	       "ioctl returned", ret);
}

static void test_unknown_command(int fd)
{
	struct tp_info info;
	long ret = tp_ioctl(fd, _IOWR(TP_IOC_MAGIC, 0x7f, struct tp_info),
			    &info);

	result(ret == -ENOTTY, "unknown_command_fails_enotty",
	       "ioctl returned", ret);
}

struct peers {
	int prod, cons, domain;
	unsigned char *src, *dst;
	__u32 src_h, dst_h;
};

static long setup(struct peers *p)
{
	struct tp_domain_create dc;
	struct tp_domain_attach da;
	struct tp_region_register rr;
	unsigned int i;
	long ret;

	p->prod = sys3(__NR_open, (long)TP_DEVICE_PATH, O_RDWR, 0);
	p->cons = sys3(__NR_open, (long)TP_DEVICE_PATH, O_RDWR, 0);
	if (p->prod < 0)
		return p->prod;
	if (p->cons < 0)
		return p->cons;
	memset(&dc, 0, sizeof(dc));
	ret = tp_ioctl(p->prod, TP_IOC_DOMAIN_CREATE, &dc);
	if (ret)
		return ret;
	p->domain = dc.fd;
	memset(&da, 0, sizeof(da));
	da.fd = dc.fd;
	ret = tp_ioctl(p->prod, TP_IOC_DOMAIN_ATTACH, &da);
	if (!ret && da.id != dc.id)
		ret = -EPROTO;
	if (!ret)
		ret = tp_ioctl(p->cons, TP_IOC_DOMAIN_ATTACH, &da);
	if (ret)
		return ret;
	p->src = map_anon(LEN);
	p->dst = map_anon(LEN);
	if (!p->src || !p->dst)
		return -ENOMEM;
	for (i = 0; i < LEN; i++)
		p->src[i] = pattern(i);
	memset(&rr, 0, sizeof(rr));
	rr.addr = (unsigned long)p->src;
	rr.len = LEN;
	rr.access = TP_ACCESS_READ;
	ret = tp_ioctl(p->prod, TP_IOC_REGION_REGISTER, &rr);
	if (ret)
		return ret;
	p->src_h = rr.handle;
	rr.addr = (unsigned long)p->dst;
	rr.access = TP_ACCESS_WRITE;
	ret = tp_ioctl(p->cons, TP_IOC_REGION_REGISTER, &rr);
	p->dst_h = rr.handle;
	return ret;
}

static void prep_send(struct tp_send *s, const char *key, __u32 region,
		      __u64 len)
{
	memset(s, 0, sizeof(*s));
	s->key_ptr = (unsigned long)key;
	s->key_len = str_len(key);
	s->region = region;
	s->len = len;
	s->user_data = USER_DATA;
}

static void prep_recv(struct tp_recv *r, const char *key, __u32 region,
		      __u64 cap)
{
	memset(r, 0, sizeof(*r));
	r->key_ptr = (unsigned long)key;
	r->key_len = str_len(key);
	r->region = region;
	r->len = cap;
	r->timeout_ns = 2000000000ULL;
	r->user_data = USER_DATA;
}

static void test_send_recv(struct peers *p)
{
	struct tp_completion c;
	struct tp_send s;
	struct tp_recv r;
	unsigned int i, bad = 0;
	long ret, n;

	prep_send(&s, "compat", p->src_h, TENSOR);
	s.offset = 3;
	ret = tp_ioctl(p->prod, TP_IOC_SEND, &s);
	if (!ret) {
		prep_recv(&r, "compat", p->dst_h, LEN - 5);
		r.offset = 5;
		ret = tp_ioctl(p->cons, TP_IOC_RECV, &r);
	}
	for (i = 0; !ret && i < TENSOR; i++)
		bad |= p->dst[5 + i] != pattern(3 + i);
	result(ret == 0 && r.len == TENSOR && r.user_data == USER_DATA && !bad,
	       "send_then_recv_copies_the_bytes", "send/recv returned", ret);

	memset(&c, 0, sizeof(c));
	n = sys3(__NR_read, p->prod, (long)&c, sizeof(c));
	result(n == (long)sizeof(c) && c.user_data == USER_DATA &&
	       c.status == 0 && c.op == TP_OP_SEND && c.len == TENSOR,
	       "completion_record_carries_64bit_fields", "read returned", n);
}

static void test_emsgsize(struct peers *p)
{
	struct tp_send s;
	struct tp_recv r;
	long ret;

	prep_send(&s, "big", p->src_h, LEN);
	ret = tp_ioctl(p->prod, TP_IOC_SEND, &s);
	if (!ret) {
		prep_recv(&r, "big", p->dst_h, 100);
		ret = tp_ioctl(p->cons, TP_IOC_RECV, &r);
	}
	result(ret == -EMSGSIZE && r.len == LEN,
	       "recv_into_small_buffer_reports_tensor_length",
	       "recv returned", ret);
}

static void test_cancel(struct peers *p)
{
	struct tp_cancel c;
	struct tp_send s;
	long ret;

	prep_send(&s, "cancel-me", p->src_h, 10);
	ret = tp_ioctl(p->prod, TP_IOC_SEND, &s);
	memset(&c, 0, sizeof(c));
	c.key_ptr = (unsigned long)"cancel-me";
	c.key_len = 9;
	c.flags = TP_CANCEL_SEND;
	if (!ret)
		ret = tp_ioctl(p->prod, TP_IOC_CANCEL, &c);
	result(ret == 0 && c.count == 1, "cancel_reports_count",
	       "cancel returned", ret);
}

static void test_alloc_mmap(struct peers *p)
{
	struct tp_region_alloc a;
	unsigned char *m;
	long ret, addr;
	int zero = 1;
	unsigned int i;

	memset(&a, 0, sizeof(a));
	a.len = PAGE;
	ret = tp_ioctl(p->cons, TP_IOC_REGION_ALLOC, &a);
	if (ret == -ENOTTY || ret == -EOPNOTSUPP) {
		skip("alloc_region_maps_through_its_mmap_offset",
		     "no REGION_ALLOC");
		return;
	}
	if (!ret && a.mmap_offset != (__u64)a.handle << TP_MMAP_REGION_SHIFT)
		ret = -EPROTO;
	/* mmap2 takes the offset in pages, which fits for small handles. */
	addr = ret ? ret : sys6(__NR_mmap2, 0, PAGE, PROT_READ | PROT_WRITE,
				MAP_SHARED, p->cons,
				(long)(a.mmap_offset >> 12));
	if (addr < 0 && addr > -4096) {
		ret = addr;
	} else {
		m = (unsigned char *)addr;
		for (i = 0; i < PAGE; i++)
			zero &= m[i] == 0;
		m[PAGE - 1] = 0x5a;
		ret = zero && m[PAGE - 1] == 0x5a ? 0 : -EPROTO;
		sys3(__NR_munmap, addr, PAGE, 0);
	}
	result(ret == 0, "alloc_region_maps_through_its_mmap_offset",
	       "alloc/mmap returned", ret);
}

static void test_abort(struct peers *p)
{
	struct tp_abort a = { .status = -ECONNRESET };
	struct tp_send s;
	long ret = tp_ioctl(p->prod, TP_IOC_ABORT, &a);

	prep_send(&s, "after-abort", p->src_h, 10);
	if (!ret)
		ret = tp_ioctl(p->prod, TP_IOC_SEND, &s);
	result(ret == -ECONNRESET, "abort_status_reaches_later_send",
	       "send returned", ret);
}

static int run(void)
{
	struct peers p;
	long ret;

	put("TAP version 13\n1..9\n");
	memset(&p, 0, sizeof(p));
	ret = setup(&p);
	if (ret) {
		put("Bail out! setup failed: ");
		put_int(ret);
		put("\n");
		return 1;
	}
	test_get_info(p.prod);
	test_unknown_command(p.prod);
	test_send_recv(&p);
	test_emsgsize(&p);
	test_cancel(&p);
	test_alloc_mmap(&p);
	test_abort(&p);
	put("# ");
	put_int(tests_run - tests_failed);
	put(" / ");
	put_int(tests_run);
	put(" tests passed\n");
	return tests_failed != 0 || tests_run != 9;
}

__attribute__((force_align_arg_pointer, noreturn)) void _start(void)
{
	sys3(__NR_exit_group, run(), 0, 0);
	__builtin_unreachable();
}
