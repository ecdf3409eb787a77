// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * TensorFlow device names, "/job:worker/replica:0/task:1/device:CPU:0".
 *
 * TensorFlow itself also accepts partial names, wildcards and the legacy
 * "/cpu:0" form; a rendezvous key names one exact device, so only the full
 * canonical form is accepted here, which keeps build and parse inverse.
 */
#include <stdint.h>
#include <string.h>

#include "base.h"

static bool is_alpha(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool is_ident_char(char c)
{
	return is_alpha(c) || (c >= '0' && c <= '9') || c == '_';
}

/* A job name starts with a letter; a device type may also start with '_'. */
static bool valid_ident(struct tpu_str s, bool underscore_first)
{
	size_t i;

	if (!s.ptr || s.len == 0 || !(is_alpha(s.ptr[0]) || (underscore_first && s.ptr[0] == '_')))
		return false;
	for (i = 1; i < s.len; i++)
		if (!is_ident_char(s.ptr[i]))
			return false;
	return true;
}

/* Reading position in the name being parsed. */
struct cursor {
	const char *p;
	size_t left;
};

static bool eat(struct cursor *c, const char *lit)
{
	size_t n = strlen(lit);

	if (c->left < n || memcmp(c->p, lit, n))
		return false;
	c->p += n;
	c->left -= n;
	return true;
}

/* The text up to @stop (not included) or the end of the name. */
static struct tpu_str field(struct cursor *c, char stop)
{
	const char *end = c->left ? memchr(c->p, stop, c->left) : NULL;
	struct tpu_str s = { c->p, end ? (size_t)(end - c->p) : c->left };

	c->p += s.len;
	c->left -= s.len;
	return s;
}

static bool number(struct cursor *c, char stop, uint32_t *out)
{
	uint64_t v;

	if (!tpu__parse_dec(field(c, stop), TPU_DEVICE_NUMBER_MAX, &v))
		return false;
	*out = (uint32_t)v;
	return true;
}

static tpu_status bad(const char **why, const char *text)
{
	if (why)
		*why = text;
	return TPU_E_BAD_DEVICE_NAME;
}

/*
 * The last few names this thread parsed, and where their parts stood: a
 * program names the same few devices in every key it builds and parses,
 * and parsing them was about a tenth of the instructions of a remote
 * rendezvous's round trip.  Only a name equal byte for byte to one that
 * parsed is answered from here, its slices pointing into the new name.
 */
#define MEMO_NAMES	4
#define MEMO_LEN	96

struct memo {
	size_t len;			/* 0: empty */
	char name[MEMO_LEN];
	struct tpu_device_name d;	/* job and type: offsets in .ptr, from 0 */
};

static _Thread_local struct memo memo[MEMO_NAMES];
static _Thread_local unsigned int memo_next;

static bool memo_find(struct tpu_str name, struct tpu_device_name *out)
{
	for (unsigned int i = 0; i < MEMO_NAMES; i++) {
		const struct memo *m = &memo[i];

		if (m->len && m->len == name.len && !memcmp(m->name, name.ptr, name.len)) {
			*out = m->d;
			out->job.ptr = name.ptr + (uintptr_t)m->d.job.ptr;
			out->type.ptr = name.ptr + (uintptr_t)m->d.type.ptr;
			return true;
		}
	}
	return false;
}

static void memo_keep(struct tpu_str name, const struct tpu_device_name *d)
{
	struct memo *m;

	if (name.len > MEMO_LEN)
		return;
	m = &memo[memo_next++ % MEMO_NAMES];
	memcpy(m->name, name.ptr, name.len);
	m->d = *d;
	m->d.job.ptr = (const char *)(uintptr_t)(d->job.ptr - name.ptr);
	m->d.type.ptr = (const char *)(uintptr_t)(d->type.ptr - name.ptr);
	m->len = name.len;
}

TPU_API tpu_status tpu_device_name_parse(struct tpu_str name, struct tpu_device_name *out,
					 const char **why)
{
	struct cursor c = { name.ptr, name.len };
	struct tpu_device_name d;

	if (!out || (!name.ptr && name.len))
		return -EINVAL;
	if (name.len && memo_find(name, out))
		return 0;
	if (!eat(&c, "/job:"))
		return bad(why, "a device name starts with /job:");
	d.job = field(&c, '/');
	if (!valid_ident(d.job, false))
		return bad(why, "the job name must be a letter followed by letters, digits or '_'");
	if (!eat(&c, "/replica:"))
		return bad(why, "expected /replica: after the job name");
	if (!number(&c, '/', &d.replica))
		return bad(why, "the replica must be a decimal number, no leading zeros, at most 2147483647");
	if (!eat(&c, "/task:"))
		return bad(why, "expected /task: after the replica");
	if (!number(&c, '/', &d.task))
		return bad(why, "the task must be a decimal number, no leading zeros, at most 2147483647");
	if (!eat(&c, "/device:"))
		return bad(why, "expected /device: after the task");
	d.type = field(&c, ':');
	if (!valid_ident(d.type, true))
		return bad(why, "the device type must be letters, digits or '_', not starting with a digit");
	if (!eat(&c, ":"))
		return bad(why, "expected ':' and a device id after the device type");
	if (!number(&c, '\0', &d.id) || c.left)
		return bad(why, "the device id must be a decimal number, no leading zeros, at most 2147483647");
	memo_keep(name, &d);
	*out = d;
	return 0;
}

TPU_API tpu_status tpu_device_name_build(const struct tpu_device_name *dev, char *buf, size_t size,
					 size_t *len)
{
	struct tpu__writer w = { buf, size, 0 };

	if (!dev || (!buf && size))
		return -EINVAL;
	if (!valid_ident(dev->job, false) || !valid_ident(dev->type, true) ||
	    dev->replica > TPU_DEVICE_NUMBER_MAX || dev->task > TPU_DEVICE_NUMBER_MAX ||
	    dev->id > TPU_DEVICE_NUMBER_MAX)
		return TPU_E_BAD_DEVICE_NAME;
	tpu__put_lit(&w, "/job:");
	tpu__put_str(&w, dev->job);
	tpu__put_lit(&w, "/replica:");
	tpu__put_dec(&w, dev->replica);
	tpu__put_lit(&w, "/task:");
	tpu__put_dec(&w, dev->task);
	tpu__put_lit(&w, "/device:");
	tpu__put_str(&w, dev->type);
	tpu__put_lit(&w, ":");
	tpu__put_dec(&w, dev->id);
	return tpu__finish(&w, len);
}
