// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The cuda_ipc channel: the reader copies straight out of the writer's
 * device memory and ACKs the tensor; the writer holds its memory until
 * that ACK (like cma for CPU memory).
 *
 * Writer: waits for the work queued on the tensor's stream (an event, not
 * the device; NULL is the legacy default stream) before the descriptor
 * leaves, then describes the tensor (104 bytes): memory from
 * cuMemAlloc by its allocation's CUDA IPC handle; VMM memory (cuMemCreate,
 * made exportable as a POSIX descriptor) by a descriptor of its allocation
 * (cuMemExportToShareableHandle), kept open until the ACK, and the size of
 * its mapping; either way the offset in it, its device, the writer's pid
 * and the tensor's address.  Reader: opens the handle on its own tensor's
 * device (or device 0 for a CPU destination), or takes the descriptor out
 * of the writer with pidfd_getfd() (the same permission as
 * process_vm_readv: one user, ptrace access; see fd_of for older kernels)
 * and maps the allocation;
 * copies (device to device, or device to host) after the work queued on
 * its stream; closes what it opened; ACKs.  Between two pipes of one
 * process nothing is opened (the driver refuses a process its own
 * handles): the reader copies from the writer's address.
 *
 * Compatibility descriptor: boot id, pid namespace, uid (one host, one
 * user), and a CUDA driver with a device on this end.
 *
 * Trust: as for cma, the pid in a descriptor is only the peer's claim; it
 * must be the pid the transport proved (shm's SO_PEERCRED), or the read
 * fails with -EPERM and the pipe with it.  Otherwise a peer could name our
 * own pid and an address (the one-process copy) or another process of our
 * user (pidfd_getfd).  So the channel goes only beside shm.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "channel.h"

/*
 * handle (64), then little-endian: offset (8), pid (4), device (4),
 * address (8), kind (4), descriptor (4), mapping size (8).
 */
#define D_OFFSET	TPU__CU_IPC_HANDLE_SIZE
#define D_PID		(D_OFFSET + 8)
#define D_DEVICE	(D_PID + 4)
#define D_ADDRESS	(D_DEVICE + 4)
#define D_KIND		(D_ADDRESS + 8)
#define D_FD		(D_KIND + 4)
#define D_SIZE		(D_FD + 4)
#define IPC_DESC_LEN	(D_SIZE + 8)

enum { KIND_LEGACY, KIND_VMM };

/*
 * Writer: the descriptors exported for tensors not ACKed yet, per pipe
 * (link).  The reader dups them out of this process, so they stay open
 * until the ACK or until the pipe closes.
 */
struct vmm_export {
	struct vmm_export *next;
	const struct tpu__chan_link *link;
	uint64_t seq;
	uint32_t idx;
	int fd;
};

static pthread_mutex_t exports_lock = PTHREAD_MUTEX_INITIALIZER;
static struct vmm_export *exports;	/* exports_lock */

static void exports_add(const struct tpu__chan_xfer *x, int fd)
{
	struct vmm_export *e = malloc(sizeof(*e));

	/* Without memory the reader finds no descriptor and reports it. */
	if (!e) {
		close(fd);
		return;
	}
	*e = (struct vmm_export){ .link = x->link, .seq = x->seq, .idx = x->idx, .fd = fd };
	pthread_mutex_lock(&exports_lock);
	e->next = exports;
	exports = e;
	pthread_mutex_unlock(&exports_lock);
}

/* Close the exports of @l (tensor @idx of message @seq only, unless @all). */
static void exports_drop(const struct tpu__chan_link *l, bool all, uint64_t seq, uint32_t idx)
{
	struct vmm_export **pp, *e;

	pthread_mutex_lock(&exports_lock);
	for (pp = &exports; (e = *pp);) {
		if (e->link == l && (all || (e->seq == seq && e->idx == idx))) {
			*pp = e->next;
			close(e->fd);
			free(e);
		} else {
			pp = &e->next;
		}
	}
	pthread_mutex_unlock(&exports_lock);
}

/*
 * Nothing to describe when the export fails: the reader finds an all-zero
 * handle, which no driver opens, and reports it.  The tensor's stream is
 * waited for here, not in ipc_send: the descriptor goes on the wire before
 * the send, and a reader in another process copies at once.  A failed
 * wait describes nothing (not even the pid); ipc_send reports it.
 */
static void ipc_describe(const struct tpu__chan_xfer *x, uint8_t *d)
{
	tpu__cu_ipc_handle h;
	uint64_t off = 0, size = 0;
	int fd = -1;

	memset(d, 0, IPC_DESC_LEN);
	if (tpu__cuda_stream_done(x->t->device.index, x->t->stream))
		return;
	tpu__chan_put_le(d + D_PID, (uint32_t)getpid(), 4);
	tpu__chan_put_le(d + D_DEVICE, x->t->device.index, 4);
	tpu__chan_put_le(d + D_ADDRESS, (uint64_t)(uintptr_t)x->t->data, 8);
	if (!tpu__cuda_ipc_export(x->t->data, x->t->device.index, &h, &off)) {
		memcpy(d, &h, TPU__CU_IPC_HANDLE_SIZE);
		tpu__chan_put_le(d + D_OFFSET, off, 8);
		return;
	}
	if (tpu__cuda_vmm_export(x->t->data, x->t->device.index, &fd, &size, &off))
		return;
	tpu__chan_put_le(d + D_OFFSET, off, 8);
	tpu__chan_put_le(d + D_KIND, KIND_VMM, 4);
	tpu__chan_put_le(d + D_FD, (uint32_t)fd, 4);
	tpu__chan_put_le(d + D_SIZE, size, 8);
	exports_add(x, fd);
}

/*
 * The reader reads once the user's work on the tensor is done (waited for
 * in ipc_describe; again here, for its status); then its ACK.
 */
static tpu_status ipc_send(struct tpu__chan_link *l, struct tpu__chan_xfer *x)
{
	tpu_status st;

	(void)l;
	st = tpu__cuda_stream_done(x->t->device.index, x->t->stream);
	if (st)
		return st;
	x->part_start(x, TPU__PART_ACK);
	return 0;
}

static void ipc_acked(struct tpu__chan_link *l, uint64_t seq, uint32_t idx)
{
	exports_drop(l, false, seq, idx);
}

static void ipc_close(struct tpu__chan_link *l)
{
	exports_drop(l, true, 0, 0);
}

/*
 * Descriptor @fd of process @pid, as a descriptor of this one.  Without
 * pidfd_getfd (Linux before 5.6, or valgrind), /proc/PID/fd/FD opened
 * anew: the same permission, but only a descriptor of a file that can be
 * opened again (the stand-in's memfds can; a driver's may not).
 */
static tpu_status fd_of(uint32_t pid, int fd, int *out)
{
	long pidfd = syscall(SYS_pidfd_open, (pid_t)pid, 0);
	long mine = -1;

	if (pidfd >= 0) {
		mine = syscall(SYS_pidfd_getfd, (int)pidfd, fd, 0);
		close((int)pidfd);
	}
	if (mine < 0 && errno == ENOSYS) {
		char path[64];

		snprintf(path, sizeof(path), "/proc/%u/fd/%d", pid, fd);
		mine = open(path, O_RDWR | O_CLOEXEC);
	}
	if (mine < 0) {
		tpu_status st = tpu__errno();

		tpu__log_debug("cuda_ipc: descriptor %d of pid %u: %s", fd, pid, tpu_strerror(st));
		return st;
	}
	*out = (int)mine;
	return 0;
}

/* The writer's VMM allocation, mapped here on device @dev; the copy; the unmap. */
static tpu_status vmm_copy(struct tpu__chan_xfer *x, uint32_t pid, uint32_t dev,
			   struct tpu_device src)
{
	const uint8_t *d = x->desc;
	struct tpu_message_tensor *t = x->t;
	uint64_t off = tpu__chan_get_le(d + D_OFFSET, 8), size = tpu__chan_get_le(d + D_SIZE, 8);
	void *base;
	int fd;
	tpu_status st, st2;

	if (off > size || t->len > size - off)
		return -EPROTO;
	st = fd_of(pid, (int)tpu__chan_get_le(d + D_FD, 4), &fd);
	if (st)
		return st;
	st = tpu__cuda_vmm_open(fd, size, dev, &base);
	close(fd);
	if (st)
		return st;
	st = tpu__cuda_copy_from_peer(t->data, t->device, (char *)base + off, src, t->len,
				      t->stream);
	st2 = tpu__cuda_vmm_close(dev, base, size);
	return st ? st : st2;
}

static tpu_status ipc_copy(struct tpu__chan_xfer *x)
{
	const uint8_t *d = x->desc;
	struct tpu_message_tensor *t = x->t;
	tpu__cu_ipc_handle h;
	uint64_t off = tpu__chan_get_le(d + D_OFFSET, 8);
	uint32_t pid = (uint32_t)tpu__chan_get_le(d + D_PID, 4);
	struct tpu_device src = { TPU_DEVICE_CUDA, (uint32_t)tpu__chan_get_le(d + D_DEVICE, 4) };
	uint32_t dev = t->device.type == TPU_DEVICE_CUDA ? t->device.index : 0;
	void *base;
	tpu_status st, st2;

	if (pid == (uint32_t)getpid()) {
		/* One process: the writer's address is ours (see above). */
		uint64_t addr = tpu__chan_get_le(d + D_ADDRESS, 8);

		return tpu__cuda_copy_from_peer(t->data, t->device, (const void *)(uintptr_t)addr,
						src, t->len, t->stream);
	}
	/* The opened memory counts as this end's device for the copy. */
	src.index = dev;
	if (tpu__chan_get_le(d + D_KIND, 4) == KIND_VMM)
		return vmm_copy(x, pid, dev, src);
	memcpy(&h, d, TPU__CU_IPC_HANDLE_SIZE);
	st = tpu__cuda_ipc_open(&h, dev, &base);
	if (st)
		return st;
	st = tpu__cuda_copy_from_peer(t->data, t->device, (char *)base + off, src, t->len,
				      t->stream);
	st2 = tpu__cuda_ipc_close(dev, base);
	return st ? st : st2;
}

static tpu_status ipc_recv(struct tpu__chan_link *l, struct tpu__chan_xfer *x)
{
	int peer = l->conn ? l->conn->ops->peer_pid(l->conn) : 0;
	uint32_t pid = (uint32_t)tpu__chan_get_le(x->desc + D_PID, 4);

	/* The recv's error fails this read and the pipe: the peer broke the protocol. */
	if (peer <= 0 || pid != (uint32_t)peer) {
		tpu__log_debug("pipe: cuda_ipc: the peer (pid %d, as the kernel says) named pid %u "
			       "for a tensor: refused", peer, pid);
		return -EPERM;
	}
	return x->ack(x, ipc_copy(x));
}

static tpu_status ipc_descriptor(struct tpu_context *ctx, char *buf, size_t size)
{
	char boot[64];
	const char *why;
	tpu_status st = tpu__cuda_api(NULL, &why);

	(void)ctx;
	if (st) {
		tpu__log_debug("pipe: no cuda_ipc channel: %s", why);
		return st;
	}
	st = tpu__boot_id(boot, sizeof(boot));
	if (st)
		return st;
	/* v2: the descriptor grew VMM's fields. */
	snprintf(buf, size, "cuda_ipc:v2:%s:%llu:%u", boot, (unsigned long long)tpu__cma_pid_ns(),
		 (unsigned int)geteuid());
	return 0;
}

static bool ipc_supports(const struct tpu__xport *x, enum tpu_device_type src,
			 enum tpu_device_type dst)
{
	(void)dst;
	return src == TPU_DEVICE_CUDA && x->proves_peer;
}

const struct tpu__chan tpu__chan_cuda_ipc = {
	.name = "cuda_ipc",
	.wire_id = 6,
	.flags = TPU__CHAN_ACKED,
	.desc_len = IPC_DESC_LEN,
	.descriptor = ipc_descriptor,
	.supports = ipc_supports,
	.describe = ipc_describe,
	.send = ipc_send,
	.recv = ipc_recv,
	.acked = ipc_acked,
	.close = ipc_close,
};
