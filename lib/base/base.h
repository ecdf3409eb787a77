/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * lib/base: the bottom layer (status strings, log, keys and device names,
 * text helpers, streaming copies, descriptor passing, facts about this
 * host).  It calls nothing else of the library; every other folder may
 * include this header.  Not installed.
 *
 * Internal symbols carry the tpu__ prefix so they cannot collide with a
 * program that links the static library.
 */
#ifndef TPU_BASE_H
#define TPU_BASE_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <linux/tensorpipe.h>

#include "tpu_user.h"

#include "copy_stream.h"

/* The structure of type @type whose member @member is at @ptr. */
#define tpu__container_of(ptr, type, member) \
	((type *)(void *)((char *)(ptr) - offsetof(type, member)))

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

/* Debug log (TPU_LOG=debug), one line, on stderr (log.c). */
void tpu__log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
bool tpu__log_debug_enabled(void);

/* Facts about this machine, for compatibility descriptors (host_id.c). */
tpu_status tpu__boot_id(char *buf, size_t size);
/* Inode of /proc/self/ns/<ns>, 0 if unknown. */
unsigned long tpu__ns_inode(const char *ns);

#endif /* TPU_BASE_H */
