/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * lib/base: the bottom layer (status strings, log, keys and device names,
 * text helpers, streaming copies, descriptor passing, facts about this
 * host, a spin-then-sleep hand-off between threads).  It calls nothing
 * else of the library; every other folder may include this header.  Not
 * installed.
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
#include "waitword.h"

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

/*
 * Magic words of the public objects and the quarantine of destroyed ones
 * (quarantine.c): a destroyed object's magic reads TPU__MAGIC_DEAD and its
 * memory stays allocated while the next 256 objects go away.
 */
#define TPU__MAGIC_DEAD		0xdead0bcfU
#define TPU__MAGIC_CONTEXT	0x7c0e7e47U
#define TPU__MAGIC_RDV		0x7d0ec0deU
#define TPU__MAGIC_PIPE		0x7919e001U
#define TPU__MAGIC_LISTENER	0x71157e2eU
#define TPU__MAGIC_BUFFER	0x7b0ff3e5U
#define TPU__MAGIC_EXEC		0x7e7ec0deU
#define TPU__MAGIC_ENDPOINT	0x7e9d9017U
/* Poison *@magic, keep @obj for a while, then free() it. */
void tpu__quarantine(void *obj, uint32_t *magic);
/* 0 when *@magic is @want; TPU_E_DESTROYED when poisoned; -EINVAL otherwise or for NULL. */
tpu_status tpu__magic_check(const void *obj, const uint32_t *magic, uint32_t want);

/*
 * fork() generations (fork.c): an object keeps tpu__fork_gen() from its
 * creation; tpu__forked_since() that value is true in any child forked
 * since, where the object must refuse use (TPU_E_FORKED).
 */
unsigned int tpu__fork_gen(void);
bool tpu__forked_since(unsigned int gen);

/* Facts about this machine, for compatibility descriptors (host_id.c). */
tpu_status tpu__boot_id(char *buf, size_t size);
/* Inode of /proc/self/ns/<ns>, 0 if unknown. */
unsigned long tpu__ns_inode(const char *ns);

#endif /* TPU_BASE_H */
