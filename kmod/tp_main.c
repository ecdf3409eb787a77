// SPDX-License-Identifier: GPL-2.0
/*
 * tensorpipe.ko: module parameters and the /dev/tensorpipe misc device.
 */
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include "tp_internal.h"

unsigned int tp_max_slots = 4096;
module_param_named(max_slots, tp_max_slots, uint, 0644);
MODULE_PARM_DESC(max_slots,
		 "Pending SENDs per domain, and outstanding SENDs per endpoint (default 4096)");

unsigned int tp_max_regions = 4096;
module_param_named(max_regions, tp_max_regions, uint, 0644);
MODULE_PARM_DESC(max_regions, "Regions one endpoint may hold (default 4096)");

unsigned int tp_max_key_len = 1024;
module_param_named(max_key_len, tp_max_key_len, uint, 0644);
MODULE_PARM_DESC(max_key_len, "Longest key in bytes, clamped to 256..4096 (default 1024)");

unsigned int tp_max_region_mb = 16384;
module_param_named(max_region_mb, tp_max_region_mb, uint, 0644);
MODULE_PARM_DESC(max_region_mb, "Largest region in MiB, at most 65536 (default 16384)");

/**
 * tp_key_len_limit() - the key length limit in force.
 *
 * Return: max_key_len clamped to the range the ABI promises.
 */
u32 tp_key_len_limit(void)
{
	return clamp_t(u32, READ_ONCE(tp_max_key_len), 256, TP_KEY_MAX_ABI);
}

/**
 * tp_region_bytes_limit() - the region size limit in force.
 *
 * Return: max_region_mb in bytes, at least one page and at most what an
 * mmap offset can address.
 */
u64 tp_region_bytes_limit(void)
{
	u64 bytes = (u64)READ_ONCE(tp_max_region_mb) << 20;

	return clamp_t(u64, bytes, PAGE_SIZE, 1ULL << TP_MMAP_REGION_SHIFT);
}

unsigned int tp_max_user_ops = 65536;
module_param_named(max_user_ops, tp_max_user_ops, uint, 0644);
MODULE_PARM_DESC(max_user_ops,
		 "Pending SENDs and waiting io_uring RECVs per user, all endpoints together (default 65536)");

static struct miscdevice tp_miscdev = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "tensorpipe",
	.fops = &tp_endpoint_fops,
	/* Access to data is governed by domain descriptors, not the node. */
	.mode = 0666,
};

/**
 * tp_device() - the module's device, for dma-buf attachments.
 *
 * Return: the misc device's struct device.
 */
struct device *tp_device(void)
{
	return tp_miscdev.this_device;
}

static int __init tp_init(void)
{
	int err;

	tp_debugfs_init();
	err = misc_register(&tp_miscdev);
	if (err) {
		tp_debugfs_exit();
		return err;
	}
	return 0;
}

static void __exit tp_exit(void)
{
	misc_deregister(&tp_miscdev);
	tp_debugfs_exit();
}

module_init(tp_init);
module_exit(tp_exit);

MODULE_LICENSE("GPL");
MODULE_IMPORT_NS(DMA_BUF);
MODULE_DESCRIPTION("Zero-copy tensor rendezvous between processes");
MODULE_AUTHOR("The tensorpipe authors");
