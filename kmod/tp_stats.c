// SPDX-License-Identifier: GPL-2.0
/*
 * Counters and their debugfs files: /sys/kernel/debug/tensorpipe/stats for
 * the module, domain-<id> for each domain, and keys-<id> listing what is
 * pending in a domain, key by key, so that a RECV that never matches its
 * SEND (a one-byte difference in the key) can be seen.  Counting is a few
 * atomic adds per operation; nothing is logged per operation.
 */
#include <linux/debugfs.h>
#include <linux/errno.h>
#include <linux/seq_file.h>
#include "tp_internal.h"

atomic64_t tp_stats[TP_STAT_COUNT];

static const char * const tp_stat_names[TP_STAT_COUNT] = {
	[TP_STAT_ENDPOINTS] = "endpoints",
	[TP_STAT_DOMAINS] = "domains",
	[TP_STAT_REGIONS] = "regions",
	[TP_STAT_PINNED_PAGES] = "pinned_pages",
	[TP_STAT_ALLOC_PAGES] = "alloc_pages",
	[TP_STAT_PENDING_SLOTS] = "pending_slots",
	[TP_STAT_SENDS] = "sends",
	[TP_STAT_RECVS] = "recvs",
	[TP_STAT_BYTES_COPIED] = "bytes_copied",
	[TP_STAT_BYTES_DONATED] = "bytes_donated",
	[TP_STAT_ERR_INVAL] = "err_inval",
	[TP_STAT_ERR_MSGSIZE] = "err_msgsize",
	[TP_STAT_ERR_EXIST] = "err_exist",
	[TP_STAT_ERR_TIMEDOUT] = "err_timedout",
	[TP_STAT_ERR_CANCELED] = "err_canceled",
	[TP_STAT_ERR_ABORTED] = "err_aborted",
	[TP_STAT_ERR_MEMBER_DIED] = "err_member_died",
	[TP_STAT_ERR_MEMLOCK] = "err_memlock",
	[TP_STAT_ERR_OTHER] = "err_other",
};

static struct dentry *tp_debugfs_dir;

/**
 * tp_stat_error() - count a failed command by kind.
 * @err:	the negative errno the command returned.
 *
 * Slots failed by an abort and RLIMIT_MEMLOCK refusals are also counted
 * where they are detected (err_aborted, err_memlock), and operations ended
 * by a member's death only there (err_member_died); here a command's errno
 * picks one counter, so a memlock refusal shows in err_other as well.
 * -EAGAIN from a non-blocking poll and a RECV restarted after a signal
 * without handler are not failures.
 */
void tp_stat_error(long err)
{
	switch (err) {
	case -EAGAIN:
	case -ERESTARTNOHAND:
	case -EOWNERDEAD:
		return;
	case -EINVAL:
		tp_stat_add(TP_STAT_ERR_INVAL, 1);
		return;
	case -EMSGSIZE:
		tp_stat_add(TP_STAT_ERR_MSGSIZE, 1);
		return;
	case -EEXIST:
		tp_stat_add(TP_STAT_ERR_EXIST, 1);
		return;
	case -ETIMEDOUT:
		tp_stat_add(TP_STAT_ERR_TIMEDOUT, 1);
		return;
	case -ECANCELED:
		tp_stat_add(TP_STAT_ERR_CANCELED, 1);
		return;
	}
	tp_stat_add(TP_STAT_ERR_OTHER, 1);
}

static int tp_stats_show(struct seq_file *m, void *unused)
{
	int i;

	for (i = 0; i < TP_STAT_COUNT; i++)
		seq_printf(m, "%s %lld\n", tp_stat_names[i],
			   (long long)atomic64_read(&tp_stats[i]));
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(tp_stats);

static int tp_domain_show(struct seq_file *m, void *unused)
{
	struct tp_domain *dom = m->private;
	unsigned int claimed = 0;
	struct tp_slot *slot;
	int bkt;

	mutex_lock(&dom->lock);
	hash_for_each(dom->slots, bkt, slot, node)
		claimed += slot->claimed;
	seq_printf(m, "pending_slots %u\nwaiters %u\nsends %llu\nrecvs %llu\n",
		   dom->nr_slots, dom->nr_waiters, dom->stats.sends,
		   dom->stats.recvs);
	seq_printf(m, "claimed %u\n", claimed);
	seq_printf(m, "bytes_copied %llu\nbytes_donated %llu\nabort_status %d\n",
		   dom->stats.bytes_copied, dom->stats.bytes_donated,
		   dom->abort_status);
	mutex_unlock(&dom->lock);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(tp_domain);

/*
 * One line per pending SEND ("send", "claimed" while a RECV delivers it) and
 * per waiting RECV ("recv"), with the key's length and its bytes, escaped
 * where they are not printable.  At most TP_KEYS_SHOWN lines of each kind.
 */
#define TP_KEYS_SHOWN	1024

static int tp_keys_show(struct seq_file *m, void *unused)
{
	struct tp_domain *dom = m->private;
	unsigned int n = 0;
	struct tp_waiter *w;
	struct tp_slot *slot;
	int bkt;

	mutex_lock(&dom->lock);
	hash_for_each(dom->slots, bkt, slot, node) {
		if (n++ == TP_KEYS_SHOWN)
			break;
		seq_printf(m, "%s %u %*pE\n", slot->claimed ? "claimed" : "send",
			   slot->key_len, (int)slot->key_len, slot->key);
	}
	n = 0;
	hash_for_each(dom->waiters, bkt, w, node) {
		if (n++ == TP_KEYS_SHOWN)
			break;
		seq_printf(m, "recv %u %*pE\n", w->key_len, (int)w->key_len,
			   w->key);
	}
	mutex_unlock(&dom->lock);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(tp_keys);

/**
 * tp_debugfs_init() - create the debugfs directory and the global file.
 *
 * Return: 0; debugfs is optional, the module works without it.
 */
int tp_debugfs_init(void)
{
	tp_debugfs_dir = debugfs_create_dir("tensorpipe", NULL);
	debugfs_create_file("stats", 0444, tp_debugfs_dir, NULL,
			    &tp_stats_fops);
	return 0;
}

/**
 * tp_debugfs_exit() - remove the debugfs directory.
 */
void tp_debugfs_exit(void)
{
	debugfs_remove_recursive(tp_debugfs_dir);
}

/**
 * tp_debugfs_add_domain() - create a domain's debugfs file.
 * @dom:	the new domain, with its id set.
 */
void tp_debugfs_add_domain(struct tp_domain *dom)
{
	char name[32];

	snprintf(name, sizeof(name), "domain-%llu", dom->id);
	dom->debugfs = debugfs_create_file(name, 0444, tp_debugfs_dir, dom,
					   &tp_domain_fops);
	/* Keys are data: readable by root only. */
	snprintf(name, sizeof(name), "keys-%llu", dom->id);
	dom->debugfs_keys = debugfs_create_file(name, 0400, tp_debugfs_dir,
						dom, &tp_keys_fops);
}

/**
 * tp_debugfs_remove_domain() - remove a domain's debugfs file.
 * @dom:	the domain being destroyed.
 *
 * debugfs_remove() waits for readers, so @dom outlives every show().
 */
void tp_debugfs_remove_domain(struct tp_domain *dom)
{
	debugfs_remove(dom->debugfs_keys);
	debugfs_remove(dom->debugfs);
}
