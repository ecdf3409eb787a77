/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Shared between the library's files; not installed.  Internal symbols carry
 * the tpu__ prefix so they cannot collide with a program that links the
 * static library.
 */
#ifndef TPU_INTERNAL_H
#define TPU_INTERNAL_H

#include <errno.h>

#include <linux/tensorpipe.h>

#include "tpu_user.h"

/* Grows with the rendezvous context (io_uring, completion thread). */
struct tpu_endpoint {
	int fd;
};

/*
 * ioctl(2) on the endpoint, as a status.  EINTR is returned, not retried:
 * for a RECV it means a signal arrived and the caller may want to see it.
 */
tpu_status tpu__ioctl(const struct tpu_endpoint *ep, unsigned long cmd, void *arg);

/* GET_INFO on a bare descriptor, for open and for the probe. */
tpu_status tpu__get_info(int fd, struct tpu_info *info);

/* Open the device node as a status, mapping a missing node to TPU_E_NO_DEVICE. */
tpu_status tpu__open_device(const char *dev_path, int *fd);

/*
 * Text helpers shared by keys and device names (str.c).
 *
 * A writer appends to a caller's buffer, snprintf-style: what does not fit
 * is counted but not written, so one pass both builds and measures.
 */
struct tpu__writer {
	char *buf;
	size_t size;
	size_t len;
};

void tpu__put(struct tpu__writer *w, const char *s, size_t n);
#define tpu__put_lit(w, lit) tpu__put((w), (lit), sizeof(lit) - 1)
void tpu__put_str(struct tpu__writer *w, struct tpu_str s);
void tpu__put_dec(struct tpu__writer *w, uint64_t v);
void tpu__put_hex16(struct tpu__writer *w, uint64_t v);
/* NUL-terminates; 0, or -ENOSPC with *len (if not NULL) the length needed. */
tpu_status tpu__finish(struct tpu__writer *w, size_t *len);

/* Canonical decimal: digits only, no leading zero, at most @max. */
bool tpu__parse_dec(struct tpu_str s, uint64_t max, uint64_t *out);

static inline tpu_status tpu__errno(void)
{
	return errno > 0 ? -errno : -EIO;
}

#endif /* TPU_INTERNAL_H */
