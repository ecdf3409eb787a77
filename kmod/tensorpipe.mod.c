#include <linux/module.h>
#define INCLUDE_VERMAGIC
#include <linux/build-salt.h>
#include <linux/elfnote-lto.h>
#include <linux/export-internal.h>
#include <linux/vermagic.h>
#include <linux/compiler.h>

BUILD_SALT;
BUILD_LTO_INFO;

MODULE_INFO(vermagic, VERMAGIC_STRING);
MODULE_INFO(name, KBUILD_MODNAME);

__visible struct module __this_module
__section(".gnu.linkonce.this_module") = {
	.name = KBUILD_MODNAME,
	.init = init_module,
#ifdef CONFIG_MODULE_UNLOAD
	.exit = cleanup_module,
#endif
	.arch = MODULE_ARCH_INIT,
};

#ifdef CONFIG_RETPOLINE
MODULE_INFO(retpoline, "Y");
#endif


static const struct modversion_info ____versions[]
__used __section("__versions") = {
	{ 0x9eca777b, "pin_user_pages_fast" },
	{ 0x587f22d7, "devmap_managed_key" },
	{ 0xfd08c8e3, "hrtimer_sleeper_start_expires" },
	{ 0xd6f2e701, "anon_inode_getfile" },
	{ 0x88db9f48, "__check_object_size" },
	{ 0x47978cc, "misc_deregister" },
	{ 0xb3533ef0, "unpin_user_pages_dirty_lock" },
	{ 0x91c14d8d, "param_ops_uint" },
	{ 0x13c49cc2, "_copy_from_user" },
	{ 0x656e4a6e, "snprintf" },
	{ 0x9291cd3b, "memdup_user" },
	{ 0x92540fbf, "finish_wait" },
	{ 0xe02c9c92, "__xa_erase" },
	{ 0x87f6d5d4, "unpin_user_pages" },
	{ 0x3b3d8b33, "fd_install" },
	{ 0x69acdf38, "memcpy" },
	{ 0x37a0cba, "kfree" },
	{ 0xdef3fb11, "seq_lseek" },
	{ 0x7de31af2, "__put_devmap_managed_page_refs" },
	{ 0x8c26d495, "prepare_to_wait_event" },
	{ 0xe2964344, "__wake_up" },
	{ 0xba8fbd64, "_raw_spin_lock" },
	{ 0xbdfb6dbb, "__fentry__" },
	{ 0x3f4547a7, "put_unused_fd" },
	{ 0x65487097, "__x86_indirect_thunk_rax" },
	{ 0x1000e51, "schedule" },
	{ 0xa19b956, "__stack_chk_fail" },
	{ 0x296695f, "refcount_warn_saturate" },
	{ 0x7682ba4e, "__copy_overflow" },
	{ 0xc6cbbc89, "capable" },
	{ 0x7cd8d75e, "page_offset_base" },
	{ 0x599fb41c, "kvmalloc_node" },
	{ 0x70f05ec9, "split_page" },
	{ 0x3ef022ec, "compat_ptr_ioctl" },
	{ 0xbcb36fe4, "hugetlb_optimize_vmemmap_key" },
	{ 0xfe487975, "init_wait_entry" },
	{ 0x8311a48c, "hrtimer_init_sleeper" },
	{ 0x68f31cbd, "__list_add_valid" },
	{ 0xa1194a8a, "fput" },
	{ 0x8df92f66, "memchr_inv" },
	{ 0xa85a3e6d, "xa_load" },
	{ 0x505f95b0, "noop_llseek" },
	{ 0xb04a43ad, "__xa_alloc_cyclic" },
	{ 0x4dfa8d4b, "mutex_lock" },
	{ 0xedd0b017, "debugfs_remove" },
	{ 0x449ad0a7, "memcmp" },
	{ 0xe1537255, "__list_del_entry_valid" },
	{ 0xcefb0c9f, "__mutex_init" },
	{ 0x68fb37ae, "current_task" },
	{ 0x844c8938, "misc_register" },
	{ 0x5b8239ca, "__x86_return_thunk" },
	{ 0x6b10bee1, "_copy_to_user" },
	{ 0xd9a5ea54, "__init_waitqueue_head" },
	{ 0x5690cb1e, "__mmdrop" },
	{ 0xa0ebc08, "__xa_cmpxchg" },
	{ 0x745a981, "xa_erase" },
	{ 0x1db3ba77, "seq_read" },
	{ 0x97651e6c, "vmemmap_base" },
	{ 0x59edad5e, "debugfs_create_file" },
	{ 0x3213f038, "mutex_unlock" },
	{ 0xa843805a, "get_unused_fd_flags" },
	{ 0xd9491c14, "xa_destroy" },
	{ 0x8fa25c24, "xa_find" },
	{ 0x11dd3e1e, "alloc_pages" },
	{ 0xd184be77, "__folio_put" },
	{ 0x3952887, "ktime_add_safe" },
	{ 0xb43f9365, "ktime_get" },
	{ 0xf0949581, "seq_printf" },
	{ 0x5b3e282f, "xa_store" },
	{ 0xc07351b3, "__SCT__cond_resched" },
	{ 0x102fe6de, "hrtimer_cancel" },
	{ 0xc7c7a019, "single_release" },
	{ 0xdf36914b, "xa_find_after" },
	{ 0x606e9d01, "kmalloc_trace" },
	{ 0xc1d8cfaf, "__fdget" },
	{ 0x7aa1756e, "kvfree" },
	{ 0xc941a41a, "single_open" },
	{ 0xf4316fcd, "debugfs_create_dir" },
	{ 0xb5b54b34, "_raw_spin_unlock" },
	{ 0xeb233a45, "__kmalloc" },
	{ 0xe2c17b5d, "__SCT__might_resched" },
	{ 0x7a7caba8, "kmalloc_caches" },
	{ 0x9060323f, "module_layout" },
};

MODULE_INFO(depends, "");

