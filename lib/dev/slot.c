// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* Slots: SEND, RECV, CANCEL and ABORT on keys of the endpoint's domain. */
#include <stdint.h>
#include <string.h>

#include "dev.h"

/*
 * The ABI carries key lengths in 32 bits; a longer size_t must not be
 * truncated into a different, valid length.  An empty key is left to the
 * module, which owns that rule.
 */
static tpu_status check_key(const void *key, size_t key_len)
{
	if (!key)
		return -EINVAL;
	if (key_len > UINT32_MAX)
		return -ENAMETOOLONG;
	return 0;
}

TPU_API tpu_status tpu_send(struct tpu_endpoint *ep, const struct tpu_send_args *args)
{
	struct tp_send s;
	tpu_status st;

	if (!ep || !args)
		return -EINVAL;
	st = check_key(args->key, args->key_len);
	if (st)
		return st;
	memset(&s, 0, sizeof(s));
	s.key_ptr = (uintptr_t)args->key;
	s.key_len = (uint32_t)args->key_len;
	s.flags = args->flags;
	s.region = args->region;
	s.offset = args->offset;
	s.len = args->len;
	s.user_data = args->user_data;
	return tpu__ioctl(ep, TP_IOC_SEND, &s);
}

TPU_API tpu_status tpu_recv(struct tpu_endpoint *ep, struct tpu_recv_args *args)
{
	struct tp_recv r;
	tpu_status st;

	if (!ep || !args)
		return -EINVAL;
	st = check_key(args->key, args->key_len);
	if (st)
		return st;
	memset(&r, 0, sizeof(r));
	r.key_ptr = (uintptr_t)args->key;
	r.key_len = (uint32_t)args->key_len;
	r.flags = args->flags;
	r.region = args->region;
	r.offset = args->offset;
	r.len = args->len;
	r.timeout_ns = args->timeout_ns;
	st = tpu__ioctl(ep, TP_IOC_RECV, &r);
	/* len is meaningful after -EMSGSIZE too: it is the size to retry with. */
	if (!st || st == -EMSGSIZE)
		args->len = r.len;
	if (!st && (args->flags & TPU_RECV_DONATE)) {
		args->region = r.region;
		args->mmap_offset = r.mmap_offset;
	}
	return st;
}

TPU_API tpu_status tpu_cancel(struct tpu_endpoint *ep, const void *key, size_t key_len,
			      unsigned int flags, uint32_t *count)
{
	struct tp_cancel c;
	tpu_status st;

	if (!ep)
		return -EINVAL;
	st = check_key(key, key_len);
	if (st)
		return st;
	memset(&c, 0, sizeof(c));
	c.key_ptr = (uintptr_t)key;
	c.key_len = (uint32_t)key_len;
	c.flags = flags;
	st = tpu__ioctl(ep, TP_IOC_CANCEL, &c);
	if (!st && count)
		*count = c.count;
	return st;
}

TPU_API tpu_status tpu_abort(struct tpu_endpoint *ep, int status)
{
	struct tp_abort a;

	if (!ep)
		return -EINVAL;
	memset(&a, 0, sizeof(a));
	a.status = status;
	return tpu__ioctl(ep, TP_IOC_ABORT, &a);
}
