// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The job secret and the proofs made with it (Documentation/security.rst).
 *
 * A secret comes from TPU_JOB_SECRET (the bytes of the variable) or
 * TPU_JOB_SECRET_FILE (the bytes of a file only its owner may read, one
 * trailing newline dropped), or from tpu_context_set_secret().  It is kept
 * as a 32-byte key, SHA-256 of a fixed label and the secret, so that any
 * length works alike and the raw bytes need not stay in memory.
 *
 * A proof is HMAC-SHA256(key, label NUL nonce_a nonce_b): the label names
 * the protocol and the role of the end that proves (so that a proof cannot
 * be reflected back, or replayed to another service), and the two fresh
 * nonces, both ends' own, bind it to one exchange.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base.h"

void tpu__secret_from_bytes(struct tpu__secret *out, const void *secret, size_t len)
{
	static const char label[] = "tensorpipe job secret v1";
	struct tpu__sha256 s;

	memset(out, 0, sizeof(*out));
	if (!len)
		return;
	tpu__sha256_init(&s);
	tpu__sha256_update(&s, label, sizeof(label));
	tpu__sha256_update(&s, secret, len);
	tpu__sha256_final(&s, out->key);
	out->set = true;
}

/* The contents of @path, if only its owner (this user or root) may read it. */
static tpu_status secret_file(const char *path, struct tpu__secret *out)
{
	uint8_t buf[TPU__SECRET_MAX + 1];
	struct stat sb;
	size_t len = 0;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	tpu_status st = 0;

	if (fd < 0) {
		st = tpu__errno();
		tpu__log_error("TPU_JOB_SECRET_FILE %s: %s", path, tpu_strerror(st));
		return st;
	}
	if (fstat(fd, &sb)) {
		st = tpu__errno();
	} else if (!S_ISREG(sb.st_mode)) {
		tpu__log_error("TPU_JOB_SECRET_FILE %s is not a regular file", path);
		st = -EINVAL;
	} else if (sb.st_mode & (S_IRWXG | S_IRWXO)) {
		tpu__log_error("TPU_JOB_SECRET_FILE %s is open to group or others (mode %03o): "
			       "refused; chmod 600 it", path, (unsigned int)(sb.st_mode & 0777));
		st = -EACCES;
	} else if (sb.st_uid != geteuid() && sb.st_uid != 0) {
		tpu__log_error("TPU_JOB_SECRET_FILE %s belongs to another user: refused", path);
		st = -EACCES;
	}
	while (!st && len < sizeof(buf)) {
		n = read(fd, buf + len, sizeof(buf) - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			st = tpu__errno();
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	if (!st && len && buf[len - 1] == '\n')
		len--;
	if (!st && (!len || len > TPU__SECRET_MAX)) {
		tpu__log_error("TPU_JOB_SECRET_FILE %s: a secret is 1 to %u bytes", path,
			       TPU__SECRET_MAX);
		st = -EINVAL;
	}
	if (!st)
		tpu__secret_from_bytes(out, buf, len);
	memset(buf, 0, sizeof(buf));
	return st;
}

tpu_status tpu__secret_from_env(struct tpu__secret *out)
{
	const char *v = getenv("TPU_JOB_SECRET"), *f = getenv("TPU_JOB_SECRET_FILE");

	memset(out, 0, sizeof(*out));
	if (v && *v && f && *f) {
		tpu__log_error("both TPU_JOB_SECRET and TPU_JOB_SECRET_FILE are set: use one");
		return -EINVAL;
	}
	if (f && *f)
		return secret_file(f, out);
	if (v && *v) {
		if (strlen(v) > TPU__SECRET_MAX) {
			tpu__log_error("TPU_JOB_SECRET: a secret is 1 to %u bytes", TPU__SECRET_MAX);
			return -EINVAL;
		}
		tpu__secret_from_bytes(out, v, strlen(v));
	}
	return 0;
}

tpu_status tpu__auth_nonce(uint8_t out[TPU__AUTH_NONCE])
{
	size_t got = 0;

	/* No fallback: a guessable challenge is worse than none. */
	while (got < TPU__AUTH_NONCE) {
		ssize_t n = getrandom(out + got, TPU__AUTH_NONCE - got, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? tpu__errno() : -EIO;
		got += (size_t)n;
	}
	return 0;
}

void tpu__auth_proof(const struct tpu__secret *s, const char *label,
		     const uint8_t nonce_a[TPU__AUTH_NONCE], const uint8_t nonce_b[TPU__AUTH_NONCE],
		     uint8_t out[TPU__SHA256_LEN])
{
	struct tpu__hmac m;

	tpu__hmac_init(&m, s->key, sizeof(s->key));
	tpu__hmac_update(&m, label, strlen(label) + 1);
	tpu__hmac_update(&m, nonce_a, TPU__AUTH_NONCE);
	tpu__hmac_update(&m, nonce_b, TPU__AUTH_NONCE);
	tpu__hmac_final(&m, out);
}
