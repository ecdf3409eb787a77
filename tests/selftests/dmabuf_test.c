// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * dma-buf: TP_IOC_REGION_EXPORT and TP_IOC_REGION_IMPORT with every
 * validation error; exports mapped and imported again; imports from the
 * kernel's own exporters (/dev/udmabuf over a memfd, /dev/dma_heap/system)
 * as source and destination of transfers, every byte checked through the
 * exporter's own mapping; lifetimes (an export outliving its handle, an
 * import outliving its descriptor), the memory-lock charge and descriptor
 * leaks; the access a descriptor's open mode allows, and only shared
 * mappings.  udmabuf and the system heap exist from Debian's 6.12 kernel on;
 * their tests skip, saying so, where they are missing.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/dma-heap.h>
#include <linux/udmabuf.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "tp_test_require.h"

#define LEN		(256 * TPT_KIB)
#define SEED_A		0xd3ab0fULL
#define SEED_B		0xb0f00dULL

#define REQUIRE_DMABUF(p) TPT_REQUIRE_FEATURES((p)->info, TP_FEAT_DMABUF)

static int do_export(int fd, uint32_t handle, int *dmabuf, uint64_t *size)
{
	struct tp_region_export e = { .handle = handle };
	int ret = tpt_ioctl(fd, TP_IOC_REGION_EXPORT, &e);

	if (!ret) {
		*dmabuf = e.fd;
		if (size)
			*size = e.size;
	}
	return ret;
}

static int do_export_flags(int fd, uint32_t handle, uint32_t flags,
			   int *dmabuf)
{
	struct tp_region_export e = { .handle = handle, .flags = flags };
	int ret = tpt_ioctl(fd, TP_IOC_REGION_EXPORT, &e);

	if (!ret)
		*dmabuf = e.fd;
	return ret;
}

static int do_import(int fd, int dmabuf, uint32_t access, uint32_t *handle,
		     uint64_t *len)
{
	struct tp_region_import im = { .fd = dmabuf, .access = access };
	int ret = tpt_ioctl(fd, TP_IOC_REGION_IMPORT, &im);

	if (!ret) {
		if (handle)
			*handle = im.handle;
		if (len)
			*len = im.len;
	}
	return ret;
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -errno;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1;	/* the directory's own descriptor */
}

/* A udmabuf over a sealed memfd; the memfd's mapping shows its bytes. */
struct udma {
	int memfd;
	int dmabuf;
	uint8_t *map;
};

static int udma_open(struct udma *u, size_t len)
{
	struct udmabuf_create c = { .size = len };
	int dev, ret = 0;

	u->memfd = u->dmabuf = -1;
	u->map = NULL;
	dev = open("/dev/udmabuf", O_RDWR | O_CLOEXEC);
	if (dev < 0)
		return -ENODEV;
	u->memfd = memfd_create("tp-udmabuf", MFD_ALLOW_SEALING | MFD_CLOEXEC);
	if (u->memfd < 0 || ftruncate(u->memfd, len) ||
	    fcntl(u->memfd, F_ADD_SEALS, F_SEAL_SHRINK)) {
		ret = -errno;
		goto out;
	}
	c.memfd = u->memfd;
	c.flags = UDMABUF_FLAGS_CLOEXEC;
	u->dmabuf = ioctl(dev, UDMABUF_CREATE, &c);
	if (u->dmabuf < 0) {
		ret = -errno;
		goto out;
	}
	u->map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED,
		      u->memfd, 0);
	if (u->map == MAP_FAILED) {
		u->map = NULL;
		ret = -errno;
	}
out:
	close(dev);
	return ret;
}

static void udma_close(struct udma *u, size_t len)
{
	if (u->map)
		munmap(u->map, len);
	if (u->dmabuf >= 0)
		close(u->dmabuf);
	if (u->memfd >= 0)
		close(u->memfd);
}

/* A buffer of the system heap whose descriptor has the open mode @mode. */
static int heap_alloc_mode(size_t len, int mode, int *dmabuf)
{
	struct dma_heap_allocation_data a = {
		.len = len, .fd_flags = mode | O_CLOEXEC,
	};
	int heap = open("/dev/dma_heap/system", O_RDONLY | O_CLOEXEC);
	int err = 0;

	if (heap < 0)
		return -ENODEV;
	if (ioctl(heap, DMA_HEAP_IOCTL_ALLOC, &a))
		err = -errno;
	else
		*dmabuf = a.fd;
	close(heap);
	return err;
}

/* A buffer of the system heap; its own mmap shows its bytes. */
static int heap_alloc(size_t len, int *dmabuf, uint8_t **map)
{
	int fd, err = heap_alloc_mode(len, O_RDWR, &fd);
	void *m;

	if (err)
		return err;
	m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		err = -errno;
		close(fd);
		return err;
	}
	*dmabuf = fd;
	*map = m;
	return 0;
}

FIXTURE(dmabuf)
{
	struct tpt_pair p;
	int fds_before;
};

FIXTURE_SETUP(dmabuf)
{
	self->fds_before = count_fds();
	ASSERT_EQ(0, tpt_pair_open(&self->p, LEN));
}

FIXTURE_TEARDOWN(dmabuf)
{
	tpt_pair_close(&self->p);
	/* Every test closes what it opened: no descriptor is left over. */
	EXPECT_EQ(self->fds_before, count_fds());
}

/*
 * A tensor from the pair's producer lands in region @dst of the consumer,
 * then, with @src, one from that region of the consumer lands in the pair's
 * sink (an endpoint may post and take keys of its own domain).
 */
static void round_trip(struct __test_metadata *_metadata, struct tpt_pair *p,
		       uint32_t dst, uint32_t src, uint64_t len)
{
	uint64_t got = 0;

	ASSERT_EQ(0, tpt_send(p->prod, "in", p->src, 0, len, 1));
	ASSERT_EQ(0, tpt_recv(p->cons, "in", dst, 0, len,
			      TPT_SAFETY_TIMEOUT_NS, &got));
	EXPECT_EQ(len, got);
	if (src) {
		memset(p->dbuf, 0, len);
		ASSERT_EQ(0, tpt_send(p->cons, "out", src, 0, len, 2));
		ASSERT_EQ(0, tpt_recv(p->cons, "out", p->dst, 0, len,
				      TPT_SAFETY_TIMEOUT_NS, &got));
		EXPECT_EQ(len, got);
	}
}

/* ---- validation ---------------------------------------------------------- */

TEST_F(dmabuf, export_with_flags_or_reserved_fails_einval)
{
	struct tp_region_export e = {
		.flags = (uint32_t)~TP_REGION_EXPORT_FLAGS_ALL,
	};
	uint32_t h;

	REQUIRE_DMABUF(&self->p);
	ASSERT_EQ(0, tpt_alloc(self->p.prod, LEN, &h, NULL));
	e.handle = h;
	EXPECT_EQ(-EINVAL, tpt_ioctl(self->p.prod, TP_IOC_REGION_EXPORT, &e));
	e.flags = 0;
	e.reserved = 1;
	EXPECT_EQ(-EINVAL, tpt_ioctl(self->p.prod, TP_IOC_REGION_EXPORT, &e));
}

TEST_F(dmabuf, export_of_unknown_handle_fails_enoent)
{
	int fd;

	REQUIRE_DMABUF(&self->p);
	EXPECT_EQ(-ENOENT, do_export(self->p.prod, 4242, &fd, NULL));
}

TEST_F(dmabuf, export_of_pinned_user_memory_fails_einval)
{
	int fd;

	REQUIRE_DMABUF(&self->p);
	EXPECT_EQ(-EINVAL, do_export(self->p.prod, self->p.src, &fd, NULL));
}

TEST_F(dmabuf, import_with_flags_or_bad_access_fails_einval)
{
	struct tp_region_import im = { .access = TP_ACCESS_READ, .flags = 1 };
	uint64_t size;
	int db;
	uint32_t h;

	REQUIRE_DMABUF(&self->p);
	ASSERT_EQ(0, tpt_alloc(self->p.prod, LEN, &h, NULL));
	ASSERT_EQ(0, do_export(self->p.prod, h, &db, &size));
	im.fd = db;
	EXPECT_EQ(-EINVAL, tpt_ioctl(self->p.cons, TP_IOC_REGION_IMPORT, &im));
	im.flags = 0;
	im.access = 0;
	EXPECT_EQ(-EINVAL, tpt_ioctl(self->p.cons, TP_IOC_REGION_IMPORT, &im));
	im.access = TP_ACCESS_ALL + 1;
	EXPECT_EQ(-EINVAL, tpt_ioctl(self->p.cons, TP_IOC_REGION_IMPORT, &im));
	close(db);
}

TEST_F(dmabuf, import_of_a_closed_descriptor_fails_ebadf)
{
	REQUIRE_DMABUF(&self->p);
	EXPECT_EQ(-EBADF, do_import(self->p.cons, 1000, TP_ACCESS_READ, NULL,
				    NULL));
	EXPECT_EQ(-EBADF, do_import(self->p.cons, -1, TP_ACCESS_READ, NULL,
				    NULL));
}

TEST_F(dmabuf, import_of_a_file_that_is_no_dmabuf_fails_einval)
{
	REQUIRE_DMABUF(&self->p);
	/* The domain's descriptor and the endpoint itself are files too. */
	EXPECT_EQ(-EINVAL, do_import(self->p.cons, self->p.domain_fd,
				     TP_ACCESS_READ, NULL, NULL));
	EXPECT_EQ(-EINVAL, do_import(self->p.cons, self->p.prod,
				     TP_ACCESS_READ, NULL, NULL));
}

/* ---- the module's own exports -------------------------------------------- */

TEST_F(dmabuf, export_maps_the_same_pages_as_the_region)
{
	uint8_t *rm, *dm;
	uint64_t off, size = 0;
	uint32_t h;
	int db;

	REQUIRE_DMABUF(&self->p);
	ASSERT_EQ(0, tpt_alloc(self->p.prod, LEN, &h, &off));
	ASSERT_EQ(0, do_export(self->p.prod, h, &db, &size));
	EXPECT_EQ(LEN, size);
	rm = tpt_map_region(self->p.prod, off, LEN, PROT_READ | PROT_WRITE);
	dm = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, db, 0);
	ASSERT_NE(NULL, rm);
	ASSERT_NE(MAP_FAILED, dm);
	tpt_fill(rm, LEN, SEED_A);
	EXPECT_TRUE(tpt_check(dm, LEN, SEED_A));
	tpt_fill(dm, LEN / 2, SEED_B);
	EXPECT_TRUE(tpt_check(rm, LEN / 2, SEED_B));
	/* Past the dma-buf's end there is nothing to map. */
	EXPECT_EQ(MAP_FAILED, mmap(NULL, 2 * LEN, PROT_READ, MAP_SHARED, db, 0));
	munmap(dm, LEN);
	munmap(rm, LEN);
	close(db);
}

TEST_F(dmabuf, export_rounds_its_size_up_to_whole_pages)
{
	uint64_t size = 0;
	uint32_t h;
	int db;

	REQUIRE_DMABUF(&self->p);
	ASSERT_EQ(0, tpt_alloc(self->p.prod, 1000, &h, NULL));
	ASSERT_EQ(0, do_export(self->p.prod, h, &db, &size));
	EXPECT_EQ(tpt_page_size(), size);
	close(db);
}

TEST_F(dmabuf, an_exported_region_cannot_be_donated)
{
	struct tp_send s;
	uint32_t h;
	int db;

	REQUIRE_DMABUF(&self->p);
	ASSERT_EQ(0, tpt_alloc(self->p.prod, LEN, &h, NULL));
	ASSERT_EQ(0, do_export(self->p.prod, h, &db, NULL));
	tpt_send_prep(&s, "d", 1, h, 0, LEN, 1);
	s.flags = TP_SEND_DONATE;
	EXPECT_EQ(-EBUSY, tpt_ioctl(self->p.prod, TP_IOC_SEND, &s));
	close(db);
	/* With the dma-buf gone it is an ordinary idle region again. */
	EXPECT_EQ(0, tpt_ioctl(self->p.prod, TP_IOC_SEND, &s));
}

TEST_F(dmabuf, own_export_imported_elsewhere_carries_transfers_both_ways)
{
	uint32_t h, imp;
	uint64_t off, len = 0;
	uint8_t *rm;
	int db;

	REQUIRE_DMABUF(&self->p);
	ASSERT_EQ(0, tpt_alloc(self->p.prod, LEN, &h, &off));
	ASSERT_EQ(0, do_export(self->p.prod, h, &db, NULL));
	ASSERT_EQ(0, do_import(self->p.cons, db, TP_ACCESS_READ |
			       TP_ACCESS_WRITE, &imp, &len));
	EXPECT_EQ(LEN, len);
	rm = tpt_map_region(self->p.prod, off, LEN, PROT_READ | PROT_WRITE);
	ASSERT_NE(NULL, rm);
	/* Into the import: the exporter's pages hold the bytes. */
	round_trip(_metadata, &self->p, imp, 0, LEN);
	EXPECT_TRUE(tpt_check(rm, LEN, TPT_SEED_SRC));
	/* Out of it, after the exporter wrote new bytes. */
	tpt_fill(rm, LEN, SEED_B);
	ASSERT_EQ(0, tpt_send(self->p.cons, "x", imp, 0, LEN, 3));
	ASSERT_EQ(0, tpt_recv(self->p.cons, "x", self->p.dst, 0, LEN,
			      TPT_SAFETY_TIMEOUT_NS, NULL));
	EXPECT_TRUE(tpt_check(self->p.dbuf, LEN, SEED_B));
	munmap(rm, LEN);
	close(db);
}

TEST_F(dmabuf, an_import_is_the_source_of_a_send)
{
	uint32_t h, imp;
	uint64_t off;
	uint8_t *rm;
	int db;

	REQUIRE_DMABUF(&self->p);
	ASSERT_EQ(0, tpt_alloc(self->p.cons, LEN, &h, &off));
	rm = tpt_map_region(self->p.cons, off, LEN, PROT_READ | PROT_WRITE);
	ASSERT_NE(NULL, rm);
	tpt_fill(rm, LEN, SEED_A);
	ASSERT_EQ(0, do_export(self->p.cons, h, &db, NULL));
	ASSERT_EQ(0, do_import(self->p.prod, db, TP_ACCESS_READ, &imp, NULL));
	ASSERT_EQ(0, tpt_send(self->p.prod, "k", imp, 0, LEN, 1));
	ASSERT_EQ(0, tpt_recv(self->p.cons, "k", self->p.dst, 0, LEN,
			      TPT_SAFETY_TIMEOUT_NS, NULL));
	EXPECT_TRUE(tpt_check(self->p.dbuf, LEN, SEED_A));
	munmap(rm, LEN);
	close(db);
}

TEST_F(dmabuf, an_import_keeps_its_access_and_is_neither_mapped_nor_donated)
{
	struct tp_send s;
	uint32_t h, imp;
	int db;

	REQUIRE_DMABUF(&self->p);
	ASSERT_EQ(0, tpt_alloc(self->p.prod, LEN, &h, NULL));
	ASSERT_EQ(0, do_export(self->p.prod, h, &db, NULL));
	ASSERT_EQ(0, do_import(self->p.cons, db, TP_ACCESS_READ, &imp, NULL));
	/* READ only: no RECV into it. */
	ASSERT_EQ(0, tpt_send(self->p.prod, "k", self->p.src, 0, LEN, 1));
	EXPECT_EQ(-EACCES, tpt_recv_nonblock(self->p.cons, "k", imp, 0, LEN,
					     NULL));
	tpt_send_prep(&s, "d", 1, imp, 0, LEN, 2);
	s.flags = TP_SEND_DONATE;
	EXPECT_EQ(-EINVAL, tpt_ioctl(self->p.cons, TP_IOC_SEND, &s));
	EXPECT_EQ(NULL, tpt_map_region(self->p.cons,
				       (uint64_t)imp << TP_MMAP_REGION_SHIFT,
				       LEN, PROT_READ));
	/* An import is not an allocated region: it cannot be exported. */
	EXPECT_EQ(-EINVAL, do_export(self->p.cons, imp, &db, NULL));
	close(db);
}

/* ---- what a descriptor allows ------------------------------------------- */

/* The open mode of a descriptor: O_RDONLY, O_WRONLY or O_RDWR. */
static int fd_mode(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl < 0 ? -errno : (fl & O_ACCMODE);
}

TEST_F(dmabuf, export_refuses_private_mappings_einval)
{
	uint32_t h;
	int db;

	REQUIRE_DMABUF(&self->p);
	ASSERT_EQ(0, tpt_alloc(self->p.prod, LEN, &h, NULL));
	ASSERT_EQ(0, do_export(self->p.prod, h, &db, NULL));
	/* A private copy would stop following the region at its first write. */
	EXPECT_EQ(MAP_FAILED, mmap(NULL, LEN, PROT_READ | PROT_WRITE,
				   MAP_PRIVATE, db, 0));
	EXPECT_EQ(EINVAL, errno);
	EXPECT_EQ(MAP_FAILED, mmap(NULL, LEN, PROT_READ, MAP_PRIVATE, db, 0));
	EXPECT_EQ(EINVAL, errno);
	close(db);
}

/*
 * A read-only export (the module's own way to hand a buffer out for
 * reading; works on every kernel) maps only for reading and imports only
 * with TP_ACCESS_READ: no RECV can write through it.
 */
TEST_F(dmabuf, read_only_export_is_never_written_through_an_import)
{
	uint32_t h, imp;
	uint64_t off;
	uint8_t *rm, *dm;
	int db;

	REQUIRE_DMABUF(&self->p);
	ASSERT_EQ(0, tpt_alloc(self->p.prod, LEN, &h, &off));
	rm = tpt_map_region(self->p.prod, off, LEN, PROT_READ | PROT_WRITE);
	ASSERT_NE(NULL, rm);
	tpt_fill(rm, LEN, SEED_A);
	ASSERT_EQ(0, do_export_flags(self->p.prod, h,
				     TP_REGION_EXPORT_READ_ONLY, &db));
	EXPECT_EQ(O_RDONLY, fd_mode(db));
	EXPECT_EQ(MAP_FAILED, mmap(NULL, LEN, PROT_READ | PROT_WRITE,
				   MAP_SHARED, db, 0));
	EXPECT_EQ(EACCES, errno);
	dm = mmap(NULL, LEN, PROT_READ, MAP_SHARED, db, 0);
	ASSERT_NE(MAP_FAILED, dm);
	EXPECT_TRUE(tpt_check(dm, LEN, SEED_A));
	munmap(dm, LEN);

	EXPECT_EQ(-EACCES, do_import(self->p.cons, db, TP_ACCESS_WRITE, NULL,
				     NULL));
	EXPECT_EQ(-EACCES, do_import(self->p.cons, db,
				     TP_ACCESS_READ | TP_ACCESS_WRITE, NULL,
				     NULL));
	/* Reading is what it was handed out for. */
	ASSERT_EQ(0, do_import(self->p.cons, db, TP_ACCESS_READ, &imp, NULL));
	ASSERT_EQ(0, tpt_send(self->p.cons, "ro", imp, 0, LEN, 1));
	ASSERT_EQ(0, tpt_recv(self->p.cons, "ro", self->p.dst, 0, LEN,
			      TPT_SAFETY_TIMEOUT_NS, NULL));
	EXPECT_TRUE(tpt_check(self->p.dbuf, LEN, SEED_A));
	/* Nothing wrote the exporter's bytes. */
	EXPECT_TRUE(tpt_check(rm, LEN, SEED_A));
	ASSERT_EQ(0, tpt_release(self->p.cons, imp));
	munmap(rm, LEN);
	close(db);
}

/*
 * The system heap hands out descriptors of the open mode asked for: a
 * read-only one imports for reading only, a write-only one for writing only.
 */
TEST_F(dmabuf, dma_heap_descriptor_mode_bounds_the_import)
{
	uint64_t got = 0;
	uint32_t imp;
	uint8_t *m;
	int ro, wo, ret;

	REQUIRE_DMABUF(&self->p);
	ret = heap_alloc_mode(LEN, O_RDONLY, &ro);
	if (ret == -ENODEV)
		SKIP(return, "no /dev/dma_heap/system (in Debian's 6.12, absent from 6.1)");
	ASSERT_EQ(0, ret);
	ASSERT_EQ(O_RDONLY, fd_mode(ro));
	/* The kernel itself lets no writable mapping of it exist... */
	EXPECT_EQ(MAP_FAILED, mmap(NULL, LEN, PROT_READ | PROT_WRITE,
				   MAP_SHARED, ro, 0));
	/* ...and the module lets no RECV write it. */
	EXPECT_EQ(-EACCES, do_import(self->p.cons, ro, TP_ACCESS_WRITE, NULL,
				     NULL));
	EXPECT_EQ(-EACCES, do_import(self->p.cons, ro,
				     TP_ACCESS_READ | TP_ACCESS_WRITE, NULL,
				     NULL));
	ASSERT_EQ(0, do_import(self->p.cons, ro, TP_ACCESS_READ, &imp, NULL));
	ASSERT_EQ(0, tpt_send(self->p.cons, "ro", imp, 0, LEN, 1));
	ASSERT_EQ(0, tpt_recv(self->p.cons, "ro", self->p.dst, 0, LEN,
			      TPT_SAFETY_TIMEOUT_NS, &got));
	EXPECT_EQ(LEN, got);
	EXPECT_TRUE(tpt_all_bytes(self->p.dbuf, LEN, 0));
	ASSERT_EQ(0, tpt_release(self->p.cons, imp));
	m = mmap(NULL, LEN, PROT_READ, MAP_SHARED, ro, 0);
	ASSERT_NE(MAP_FAILED, m);
	EXPECT_TRUE(tpt_all_bytes(m, LEN, 0));
	munmap(m, LEN);
	close(ro);

	ASSERT_EQ(0, heap_alloc_mode(LEN, O_WRONLY, &wo));
	ASSERT_EQ(O_WRONLY, fd_mode(wo));
	EXPECT_EQ(-EACCES, do_import(self->p.cons, wo, TP_ACCESS_READ, NULL,
				     NULL));
	ASSERT_EQ(0, do_import(self->p.cons, wo, TP_ACCESS_WRITE, &imp, NULL));
	ASSERT_EQ(0, tpt_send(self->p.prod, "wo", self->p.src, 0, LEN, 2));
	ASSERT_EQ(0, tpt_recv(self->p.cons, "wo", imp, 0, LEN,
			      TPT_SAFETY_TIMEOUT_NS, NULL));
	ASSERT_EQ(0, tpt_release(self->p.cons, imp));
	close(wo);
}

/* ---- revocation ---------------------------------------------------------- */

static int do_revoke(int fd, uint32_t handle, uint32_t flags)
{
	struct tp_region_revoke rv = { .handle = handle, .flags = flags };

	return tpt_ioctl(fd, TP_IOC_REGION_REVOKE, &rv);
}

TEST_F(dmabuf, revoke_validation_errors)
{
	uint32_t h;

	REQUIRE_DMABUF(&self->p);
	EXPECT_EQ(-ENOENT, do_revoke(self->p.prod, 4242, 0));
	EXPECT_EQ(-EINVAL, do_revoke(self->p.prod, self->p.src, 0));
	ASSERT_EQ(0, tpt_alloc(self->p.prod, LEN, &h, NULL));
	EXPECT_EQ(-EINVAL, do_revoke(self->p.prod, h, 1));
	/* Nothing exported: nobody to tell, and that is fine. */
	EXPECT_EQ(0, do_revoke(self->p.prod, h, 0));
}

TEST_F(dmabuf, revoked_import_fails_enodev_and_the_exporter_keeps_its_pages)
{
	uint32_t h, imp, again;
	uint64_t off;
	uint8_t *rm;
	int db;

	REQUIRE_DMABUF(&self->p);
	ASSERT_EQ(0, tpt_alloc(self->p.prod, LEN, &h, &off));
	rm = tpt_map_region(self->p.prod, off, LEN, PROT_READ | PROT_WRITE);
	ASSERT_NE(NULL, rm);
	ASSERT_EQ(0, do_export(self->p.prod, h, &db, NULL));
	ASSERT_EQ(0, do_import(self->p.cons, db,
			       TP_ACCESS_READ | TP_ACCESS_WRITE, &imp, NULL));
	round_trip(_metadata, &self->p, imp, 0, LEN);
	EXPECT_TRUE(tpt_check(rm, LEN, TPT_SEED_SRC));

	ASSERT_EQ(0, do_revoke(self->p.prod, h, 0));
	tpt_fill(rm, LEN, SEED_B);
	ASSERT_EQ(0, tpt_send(self->p.prod, "after", self->p.src, 0, LEN, 9));
	EXPECT_EQ(-ENODEV, tpt_recv_nonblock(self->p.cons, "after", imp, 0,
					     LEN, NULL));
	EXPECT_EQ(-ENODEV, tpt_send(self->p.cons, "from", imp, 0, LEN, 10));
	/* The RECV took nothing, the revocation wrote nothing. */
	EXPECT_EQ(0, tpt_recv_nonblock(self->p.cons, "after", self->p.dst, 0,
				       LEN, NULL));
	EXPECT_TRUE(tpt_check(rm, LEN, SEED_B));
	/* A new import of the same dma-buf works. */
	ASSERT_EQ(0, do_import(self->p.cons, db, TP_ACCESS_READ, &again, NULL));
	ASSERT_EQ(0, tpt_send(self->p.cons, "again", again, 0, LEN, 11));
	ASSERT_EQ(0, tpt_recv(self->p.cons, "again", self->p.dst, 0, LEN,
			      TPT_SAFETY_TIMEOUT_NS, NULL));
	EXPECT_TRUE(tpt_check(self->p.dbuf, LEN, SEED_B));
	munmap(rm, LEN);
	close(db);
}

/* A pending SEND whose source is revoked can never be copied: it ends. */
TEST_F(dmabuf, send_pending_from_a_revoked_import_completes_enodev)
{
	struct tp_completion c[2];
	uint32_t h, imp;
	int db, n;

	REQUIRE_DMABUF(&self->p);
	ASSERT_EQ(0, tpt_alloc(self->p.prod, LEN, &h, NULL));
	ASSERT_EQ(0, do_export(self->p.prod, h, &db, NULL));
	ASSERT_EQ(0, do_import(self->p.cons, db, TP_ACCESS_READ, &imp, NULL));
	ASSERT_EQ(0, tpt_send(self->p.cons, "k", imp, 0, LEN, 21));
	ASSERT_EQ(0, do_revoke(self->p.prod, h, 0));
	EXPECT_EQ(-ENODEV, tpt_recv_nonblock(self->p.cons, "k", self->p.dst, 0,
					     LEN, NULL));
	n = tpt_read_completions(self->p.cons, c, 2, 5000);
	ASSERT_EQ(1, n);
	EXPECT_EQ(21ULL, c[0].user_data);
	EXPECT_EQ(-ENODEV, c[0].status);
	/* Gone, not pending again: the key is free. */
	EXPECT_EQ(-EAGAIN, tpt_recv_nonblock(self->p.cons, "k", self->p.dst, 0,
					     LEN, NULL));
	close(db);
}

/*
 * A revocation that lands while a 64 MiB copy into the import runs stops
 * the copy at a chunk: the RECV fails with -ENODEV and the tensor, whose
 * source is fine, is pending again for the next RECV, intact.  The test
 * revokes once the domain shows the slot claimed, and tries again if the
 * copy finished first.
 */
TEST_F(dmabuf, revocation_during_a_copy_stops_it_and_loses_nothing)
{
	const uint64_t big = 64 * TPT_MIB;
	struct tpt_thread_recv t;
	uint32_t hs, hd, h, imp;
	uint8_t *src, *dst;
	unsigned int i, hit = 0;
	char key[16];
	int64_t v;
	int db;

	REQUIRE_DMABUF(&self->p);
	TPT_REQUIRE_DEBUGFS();
	TPT_REQUIRE_PIN(3 * big);
	src = tpt_map(big);
	dst = tpt_map(big);
	ASSERT_TRUE(src && dst);
	tpt_fill(src, big, SEED_A);
	ASSERT_EQ(0, tpt_register(self->p.prod, src, big, TP_ACCESS_READ, &hs));
	ASSERT_EQ(0, tpt_register(self->p.cons, dst, big, TP_ACCESS_WRITE,
				  &hd));
	for (i = 0; i < 8 && !hit; i++) {
		uint64_t deadline = tpt_now_ns() + 20 * TPT_NSEC_PER_SEC;

		snprintf(key, sizeof(key), "rv%u", i);
		ASSERT_EQ(0, tpt_alloc(self->p.prod, big, &h, NULL));
		ASSERT_EQ(0, do_export(self->p.prod, h, &db, NULL));
		ASSERT_EQ(0, do_import(self->p.cons, db, TP_ACCESS_WRITE, &imp,
				       NULL));
		ASSERT_EQ(0, tpt_send(self->p.prod, key, hs, 0, big, i));
		ASSERT_EQ(0, tpt_thread_recv_start(&t, self->p.cons, key, imp,
						   big, TPT_SAFETY_TIMEOUT_NS));
		while (tpt_now_ns() < deadline &&
		       __atomic_load_n(&t.ret, __ATOMIC_RELAXED) == 1 &&
		       (tpt_domain_stat(self->p.domain_id, "claimed", &v) ||
			v != 1))
			;
		ASSERT_EQ(0, do_revoke(self->p.prod, h, 0));
		ASSERT_EQ(0, tpt_thread_recv_join(&t, TPT_SAFETY_TIMEOUT_MS));
		if (t.ret == -ENODEV) {
			hit = 1;
			ASSERT_EQ(0, tpt_recv_nonblock(self->p.cons, key, hd, 0,
						       big, NULL));
			EXPECT_TRUE(tpt_check(dst, big, SEED_A));
		} else {
			ASSERT_EQ(0, t.ret);
		}
		ASSERT_EQ(0, tpt_release(self->p.cons, imp));
		close(db);
		ASSERT_EQ(0, tpt_release(self->p.prod, h));
	}
	TH_LOG("the revocation landed mid-copy in attempt %u", i);
	tpt_unmap(src, big);
	tpt_unmap(dst, big);
	if (!hit)
		SKIP(return, "every copy finished before its revocation");
}

/* ---- lifetimes and charges ----------------------------------------------- */

TEST_F(dmabuf, export_outlives_its_handle_and_keeps_the_charge_until_closed)
{
	int64_t pages0, pages1;
	uint32_t h;
	uint8_t *dm;
	int db;

	REQUIRE_DMABUF(&self->p);
	TPT_REQUIRE_DEBUGFS();
	ASSERT_EQ(0, tpt_stat("alloc_pages", &pages0));
	ASSERT_EQ(0, tpt_alloc(self->p.prod, LEN, &h, NULL));
	ASSERT_EQ(0, do_export(self->p.prod, h, &db, NULL));
	ASSERT_EQ(0, tpt_release(self->p.prod, h));
	dm = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, db, 0);
	ASSERT_NE(MAP_FAILED, dm);
	tpt_fill(dm, LEN, SEED_A);
	EXPECT_TRUE(tpt_check(dm, LEN, SEED_A));
	ASSERT_EQ(0, tpt_stat("alloc_pages", &pages1));
	EXPECT_EQ(pages0 + (int64_t)(LEN / tpt_page_size()), pages1);
	munmap(dm, LEN);
	close(db);
	EXPECT_EQ(0, tpt_wait_stat("alloc_pages", pages0, 5000));
}

TEST_F(dmabuf, import_outlives_the_exporters_descriptor)
{
	int64_t regions0;
	uint32_t h, imp;
	int db;

	REQUIRE_DMABUF(&self->p);
	TPT_REQUIRE_DEBUGFS();
	ASSERT_EQ(0, tpt_stat("regions", &regions0));
	ASSERT_EQ(0, tpt_alloc(self->p.prod, LEN, &h, NULL));
	ASSERT_EQ(0, do_export(self->p.prod, h, &db, NULL));
	ASSERT_EQ(0, do_import(self->p.cons, db, TP_ACCESS_WRITE, &imp, NULL));
	close(db);
	ASSERT_EQ(0, tpt_release(self->p.prod, h));
	/* The import holds the dma-buf, which holds the exported region. */
	round_trip(_metadata, &self->p, imp, 0, LEN);
	/* Above the setup's: the exported region and the import. */
	EXPECT_EQ(0, tpt_wait_stat("regions", regions0 + 2, 1000));
	ASSERT_EQ(0, tpt_release(self->p.cons, imp));
	EXPECT_EQ(0, tpt_wait_stat("regions", regions0, 5000));
}

TEST_F(dmabuf, cycles_of_export_and_import_leak_no_descriptor)
{
	uint32_t h, imp;
	int db, i;

	REQUIRE_DMABUF(&self->p);
	for (i = 0; i < 64; i++) {
		ASSERT_EQ(0, tpt_alloc(self->p.prod, 4096, &h, NULL));
		ASSERT_EQ(0, do_export(self->p.prod, h, &db, NULL));
		ASSERT_EQ(0, do_import(self->p.cons, db, TP_ACCESS_READ, &imp,
				       NULL));
		close(db);
		ASSERT_EQ(0, tpt_release(self->p.cons, imp));
		ASSERT_EQ(0, tpt_release(self->p.prod, h));
	}
	/* The teardown compares the descriptor count with the setup's. */
}

/* ---- the kernel's exporters ---------------------------------------------- */

TEST_F(dmabuf, udmabuf_import_carries_transfers_both_ways)
{
	struct udma u;
	uint32_t imp;
	int ret;

	REQUIRE_DMABUF(&self->p);
	ret = udma_open(&u, LEN);
	if (ret == -ENODEV)
		SKIP(return, "no /dev/udmabuf (built into Debian's 6.12, absent from 6.1)");
	ASSERT_EQ(0, ret);
	ASSERT_EQ(0, do_import(self->p.cons, u.dmabuf,
			       TP_ACCESS_READ | TP_ACCESS_WRITE, &imp, NULL));
	round_trip(_metadata, &self->p, imp, 0, LEN);
	EXPECT_TRUE(tpt_check(u.map, LEN, TPT_SEED_SRC));

	/* The memfd's writer changes the bytes; a SEND from the import reads them. */
	tpt_fill(u.map, LEN, SEED_B);
	ASSERT_EQ(0, tpt_release(self->p.cons, imp));
	ASSERT_EQ(0, do_import(self->p.prod, u.dmabuf, TP_ACCESS_READ, &imp,
			       NULL));
	memset(self->p.dbuf, 0, LEN);
	ASSERT_EQ(0, tpt_send(self->p.prod, "u", imp, 0, LEN, 5));
	ASSERT_EQ(0, tpt_recv(self->p.cons, "u", self->p.dst, 0, LEN,
			      TPT_SAFETY_TIMEOUT_NS, NULL));
	EXPECT_TRUE(tpt_check(self->p.dbuf, LEN, SEED_B));
	udma_close(&u, LEN);
}

TEST_F(dmabuf, dma_heap_import_carries_transfers_both_ways)
{
	uint8_t *map;
	uint32_t imp;
	int db, ret;

	REQUIRE_DMABUF(&self->p);
	ret = heap_alloc(LEN, &db, &map);
	if (ret == -ENODEV)
		SKIP(return, "no /dev/dma_heap/system (in Debian's 6.12, absent from 6.1)");
	ASSERT_EQ(0, ret);
	ASSERT_EQ(0, do_import(self->p.cons, db,
			       TP_ACCESS_READ | TP_ACCESS_WRITE, &imp, NULL));
	round_trip(_metadata, &self->p, imp, imp, LEN);
	EXPECT_TRUE(tpt_check(map, LEN, TPT_SEED_SRC));
	EXPECT_TRUE(tpt_check(self->p.dbuf, LEN, TPT_SEED_SRC));
	/* The importer outlives the heap buffer's descriptor and mapping. */
	munmap(map, LEN);
	close(db);
	memset(self->p.dbuf, 0, LEN);
	ASSERT_EQ(0, tpt_send(self->p.prod, "h", self->p.src, 0, LEN, 7));
	ASSERT_EQ(0, tpt_recv(self->p.cons, "h", imp, 0, LEN,
			      TPT_SAFETY_TIMEOUT_NS, NULL));
	ASSERT_EQ(0, tpt_release(self->p.cons, imp));
}

TEST_F(dmabuf, an_import_larger_than_max_region_bytes_fails_e2big)
{
	struct tpt_params saved = { 0 };
	uint8_t *map;
	int db, ret;

	REQUIRE_DMABUF(&self->p);
	ret = heap_alloc(2 * TPT_MIB, &db, &map);
	if (ret == -ENODEV)
		SKIP(return, "no /dev/dma_heap/system (in Debian's 6.12, absent from 6.1)");
	ASSERT_EQ(0, ret);
	munmap(map, 2 * TPT_MIB);
	ret = tpt_params_set(&saved, "max_region_mb", 1);
	if (ret) {
		close(db);
		SKIP(return, "cannot set max_region_mb (needs root)");
	}
	EXPECT_EQ(-E2BIG, do_import(self->p.cons, db, TP_ACCESS_READ, NULL,
				    NULL));
	tpt_params_restore(&saved);
	close(db);
}

TEST_HARNESS_MAIN
