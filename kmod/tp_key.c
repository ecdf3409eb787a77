// SPDX-License-Identifier: GPL-2.0
/*
 * Keys: the byte strings that name tensors in a domain.  They are checked
 * against the length limit in force, copied from user space once, hashed
 * for the domain's tables and compared byte for byte.
 */
#include <linux/jhash.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/uaccess.h>
#include "tp_internal.h"

/**
 * tp_key_check() - validate a key length against the limit in force.
 * @len:	key length.
 *
 * Return: 0, -EINVAL (empty) or -ENAMETOOLONG.
 */
int tp_key_check(u32 len)
{
	if (!len)
		return -EINVAL;
	if (len > tp_key_len_limit())
		return -ENAMETOOLONG;
	return 0;
}

/**
 * tp_key_copy() - copy a key from user space.
 * @uptr:	user address.
 * @len:	length, already checked.
 *
 * Return: a kmalloc()ed copy or an ERR_PTR().
 */
u8 *tp_key_copy(u64 uptr, u32 len)
{
	/* A waiting RECV may hold it long: charge it to the caller's cgroup. */
	u8 *key = kmalloc(len, GFP_KERNEL_ACCOUNT | __GFP_NOWARN);

	if (!key)
		return ERR_PTR(-ENOMEM);
	if (copy_from_user(key, u64_to_user_ptr(uptr), len)) {
		kfree(key);
		return ERR_PTR(-EFAULT);
	}
	return key;
}

/**
 * tp_key_hash() - bucket hash of a key.
 * @key:	key bytes.
 * @len:	key length.
 *
 * Return: the hash.
 */
u32 tp_key_hash(const u8 *key, u32 len)
{
	return jhash(key, len, 0);
}

/**
 * tp_key_eq() - whether two keys are the same bytes.
 * @a:		first key.
 * @alen:	its length.
 * @b:		second key.
 * @blen:	its length.
 *
 * Return: true when equal.
 */
bool tp_key_eq(const u8 *a, u32 alen, const u8 *b, u32 blen)
{
	return alen == blen && !memcmp(a, b, alen);
}
