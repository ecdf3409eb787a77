// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * TensorFlow rendezvous keys:
 *
 *   SRC_DEVICE;SRC_INCARNATION;DST_DEVICE;EDGE_NAME;FRAME_ID:ITER_ID
 *
 * as Rendezvous::CreateKey writes them, the incarnation as 16 hex digits.
 * The module treats a key as opaque bytes; these helpers exist so that
 * programs agree on one spelling and can read a key back.
 */
#include <string.h>

#include "base.h"

#define KEY_PARTS 5

static tpu_status bad(const char **why, const char *text)
{
	if (why)
		*why = text;
	return TPU_E_BAD_KEY;
}

static bool parse_hex(struct tpu_str s, uint64_t *out)
{
	uint64_t v = 0;
	size_t i;

	if (s.len == 0 || s.len > 16)
		return false;
	for (i = 0; i < s.len; i++) {
		char c = s.ptr[i];
		unsigned int d;

		if (c >= '0' && c <= '9')
			d = (unsigned int)(c - '0');
		else if (c >= 'a' && c <= 'f')
			d = (unsigned int)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			d = (unsigned int)(c - 'A' + 10);
		else
			return false;
		v = v << 4 | d;
	}
	*out = v;
	return true;
}

static bool valid_edge(struct tpu_str s)
{
	return s.ptr && s.len && !memchr(s.ptr, ';', s.len) && !memchr(s.ptr, '\0', s.len);
}

static bool parse_frame_iter(struct tpu_str s, uint64_t *frame, uint64_t *iter)
{
	const char *colon = memchr(s.ptr, ':', s.len);
	struct tpu_str f, i;

	if (!colon)
		return false;
	f.ptr = s.ptr;
	f.len = (size_t)(colon - s.ptr);
	i.ptr = colon + 1;
	i.len = s.len - f.len - 1;
	return tpu__parse_dec(f, UINT64_MAX, frame) && tpu__parse_dec(i, UINT64_MAX, iter);
}

/*
 * The last keys' first three parts ("SRC;INC;DST;"), parsed: a program's
 * keys differ from step to step only in their edge and ids, so a key that
 * starts with one of these bytes for byte parses only its last two parts
 * (half the instructions of a remote rendezvous's parse).
 */
#define PREFIX_MEMOS	4
#define PREFIX_LEN	256

struct prefix_memo {
	size_t len;			/* 0: empty */
	size_t src_len, dst_off, dst_len;
	uint64_t incarnation;
	char bytes[PREFIX_LEN];
};

static _Thread_local struct prefix_memo prefix_memo[PREFIX_MEMOS];
static _Thread_local unsigned int prefix_next;

static const struct prefix_memo *prefix_find(struct tpu_str key)
{
	for (unsigned int i = 0; i < PREFIX_MEMOS; i++) {
		const struct prefix_memo *m = &prefix_memo[i];

		if (m->len && key.len > m->len && !memcmp(key.ptr, m->bytes, m->len))
			return m;
	}
	return NULL;
}

static void prefix_keep(const struct tpu_key *k, const char *key, size_t len)
{
	struct prefix_memo *m = &prefix_memo[prefix_next];

	if (len > PREFIX_LEN)
		return;
	prefix_next = (prefix_next + 1) % PREFIX_MEMOS;
	memcpy(m->bytes, key, len);
	m->len = len;
	m->src_len = k->src_device.len;
	m->dst_off = (size_t)(k->dst_device.ptr - key);
	m->dst_len = k->dst_device.len;
	m->incarnation = k->src_incarnation;
}

TPU_API tpu_status tpu_key_parse(struct tpu_str key, struct tpu_key *out, const char **why)
{
	struct tpu_str part[KEY_PARTS];
	struct tpu_device_name dev;
	const char *p = key.ptr, *end = key.ptr + key.len;
	const struct prefix_memo *m;
	struct tpu_key k;
	tpu_status st;
	int n = 0;

	if (!out || !key.ptr)
		return -EINVAL;
	/* A known prefix: its three parts are parsed already, split the rest. */
	m = prefix_find(key);
	if (m) {
		part[0] = (struct tpu_str){ key.ptr, m->src_len };
		part[2] = (struct tpu_str){ key.ptr + m->dst_off, m->dst_len };
		k.src_incarnation = m->incarnation;
		p = key.ptr + m->len;
		n = 3;
	}
	for (; n < KEY_PARTS; n++) {
		const char *semi = memchr(p, ';', (size_t)(end - p));

		part[n].ptr = p;
		part[n].len = (size_t)((semi ? semi : end) - p);
		if (!semi) {
			if (n != KEY_PARTS - 1)
				return bad(why, "a key has five parts separated by ';', this one has fewer");
			break;
		}
		if (n == KEY_PARTS - 1)
			return bad(why, "a key has five parts separated by ';', this one has more");
		p = semi + 1;
	}
	if (!m) {
		st = tpu_device_name_parse(part[0], &dev, why);
		if (st)
			return st;
		if (!parse_hex(part[1], &k.src_incarnation))
			return bad(why, "the source incarnation must be 1 to 16 hex digits");
		st = tpu_device_name_parse(part[2], &dev, why);
		if (st)
			return st;
	}
	if (!valid_edge(part[3]))
		return bad(why, "the edge name must be non-empty, without NUL bytes");
	if (!parse_frame_iter(part[4], &k.frame_id, &k.iter_id))
		return bad(why, "the last part must be FRAME:ITER, two decimal numbers without leading zeros");
	k.src_device = part[0];
	k.dst_device = part[2];
	k.edge_name = part[3];
	if (!m)
		prefix_keep(&k, key.ptr, (size_t)(part[3].ptr - key.ptr));
	*out = k;
	return 0;
}

TPU_API tpu_status tpu_key_build(const struct tpu_key *key, char *buf, size_t size, size_t *len)
{
	struct tpu__writer w = { buf, size, 0 };
	struct tpu_device_name dev;
	tpu_status st;

	if (!key || (!buf && size))
		return -EINVAL;
	st = tpu_device_name_parse(key->src_device, &dev, NULL);
	if (!st)
		st = tpu_device_name_parse(key->dst_device, &dev, NULL);
	if (st)
		return st == -EINVAL ? TPU_E_BAD_DEVICE_NAME : st;
	if (!valid_edge(key->edge_name))
		return TPU_E_BAD_KEY;
	tpu__put_str(&w, key->src_device);
	tpu__put_lit(&w, ";");
	tpu__put_hex16(&w, key->src_incarnation);
	tpu__put_lit(&w, ";");
	tpu__put_str(&w, key->dst_device);
	tpu__put_lit(&w, ";");
	tpu__put_str(&w, key->edge_name);
	tpu__put_lit(&w, ";");
	tpu__put_dec(&w, key->frame_id);
	tpu__put_lit(&w, ":");
	tpu__put_dec(&w, key->iter_id);
	return tpu__finish(&w, len);
}
