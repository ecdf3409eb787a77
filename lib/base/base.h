/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * lib/base: the bottom layer (status strings, log, keys and device names,
 * text helpers, streaming copies, descriptor passing, facts about this
 * host, a spin-then-sleep hand-off between threads, bounded free lists
 * of recycled records).  It calls nothing
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
#include <string.h>

#include <linux/tensorpipe.h>

#include "tpu_user.h"

#include "copy_stream.h"
#include "waitword.h"
#include "le_bytes.h"
#include "free_list.h"
#include "call_gate.h"

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

/*
 * Whether a public structure's reserved tail (@n bytes at @p) is zero, as
 * Documentation/abi.rst asks: later fields take that room, so a caller
 * that put something there is refused now rather than misread later.
 */
#define tpu__reserved_zero(r) tpu__all_zero((r), sizeof(r))
static inline bool tpu__all_zero(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t any = 0, w;
	size_t i = 0;

	/* A word at a time: every send and receive checks its tensor's reserved words. */
	for (; i + sizeof(w) <= n; i += sizeof(w)) {
		memcpy(&w, b + i, sizeof(w));
		any |= w;
	}
	for (; i < n; i++)
		any |= b[i];
	return !any;
}

static inline tpu_status tpu__errno(void)
{
	return errno > 0 ? -errno : -EIO;
}

/*
 * Resource bounds (limits.c).  tpu__env_u64: the decimal value of
 * environment variable @name within @min..@max, else @def (logged).  The
 * set-up bounds of listeners (pipe, shm, the store): how long a connection
 * may take to finish its handshake (TPU_SETUP_TIMEOUT_MS), and how many may
 * be in their handshake at once per listener (TPU_SETUP_MAX).  Past the
 * cap the oldest is dropped if it had its grace (a tenth of the timeout,
 * at most TPU__SETUP_GRACE_MAX_MS), else the newcomer waits or is refused:
 * a burst of real peers finishes in far less than the grace.
 */
#define TPU__SETUP_TIMEOUT_MS_DEFAULT	10000u
#define TPU__SETUP_MAX_DEFAULT		128u
#define TPU__SETUP_GRACE_MAX_MS		100u
uint64_t tpu__env_u64(const char *name, uint64_t def, uint64_t min, uint64_t max);
uint64_t tpu__setup_timeout_ns(void);
unsigned int tpu__setup_max(void);
uint64_t tpu__setup_grace_ns(uint64_t timeout_ns);

/* Debug log (TPU_LOG=debug), one line, on stderr (log.c). */
void tpu__log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
bool tpu__log_debug_enabled(void);
/*
 * A line logged whether or not debug is on: a setting the user asked for
 * that the library refuses (an unsafe secret file).  Rare by design.
 */
void tpu__log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

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

/*
 * SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), sha256.c; the job secret
 * and the proofs made with it, auth.c (Documentation/security.rst).
 */
#define TPU__SHA256_LEN		32
#define TPU__AUTH_NONCE		32
#define TPU__SECRET_MAX		4096	/* bytes of a secret as given */

struct tpu__sha256 {
	uint32_t h[8];
	uint64_t len;
	uint8_t buf[64];
	size_t n;
};

void tpu__sha256_init(struct tpu__sha256 *s);
void tpu__sha256_update(struct tpu__sha256 *s, const void *data, size_t len);
/* Writes the digest and wipes @s. */
void tpu__sha256_final(struct tpu__sha256 *s, uint8_t out[TPU__SHA256_LEN]);

struct tpu__hmac {
	struct tpu__sha256 inner, outer;
};

void tpu__hmac_init(struct tpu__hmac *m, const void *key, size_t key_len);
void tpu__hmac_update(struct tpu__hmac *m, const void *data, size_t len);
void tpu__hmac_final(struct tpu__hmac *m, uint8_t out[TPU__SHA256_LEN]);
/* Equal, in a time that depends on @n only. */
bool tpu__ct_equal(const void *a, const void *b, size_t n);

/* A job secret, as the key proofs are made with; !set: none. */
struct tpu__secret {
	bool set;
	uint8_t key[TPU__SHA256_LEN];
};

/* @len 0: none. */
void tpu__secret_from_bytes(struct tpu__secret *out, const void *secret, size_t len);
/*
 * TPU_JOB_SECRET or TPU_JOB_SECRET_FILE (none: 0 and !out->set).  Errors,
 * each logged: -EACCES (a file group or others may read, or another
 * user's), -EINVAL (both set, empty or too long), the errno of open/read.
 */
tpu_status tpu__secret_from_env(struct tpu__secret *out);
/* Fresh random bytes from getrandom(); never a weaker fallback. */
tpu_status tpu__auth_nonce(uint8_t out[TPU__AUTH_NONCE]);
/* HMAC-SHA256(key, @label NUL @nonce_a @nonce_b). */
void tpu__auth_proof(const struct tpu__secret *s, const char *label,
		     const uint8_t nonce_a[TPU__AUTH_NONCE], const uint8_t nonce_b[TPU__AUTH_NONCE],
		     uint8_t out[TPU__SHA256_LEN]);

#endif /* TPU_BASE_H */
