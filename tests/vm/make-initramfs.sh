#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Build the test VM's initramfs: static busybox, the modules that mount the
# host root over virtio-9p (taken from /lib/modules/KVER, in dependency
# order), init, and the run's settings file.  No device nodes are needed
# (init mounts devtmpfs), so this works without root.
#
#   tests/vm/make-initramfs.sh KVER SETTINGS_FILE OUTPUT.cpio
set -euo pipefail

kver=${1:?usage: make-initramfs.sh KVER SETTINGS_FILE OUTPUT.cpio}
settings=${2:?settings file}
output=${3:?output file}
here=$(cd "$(dirname "$0")" && pwd)

busybox=$(command -v busybox || true)
if [ -z "$busybox" ] || ! file -L "$busybox" 2>/dev/null | grep -q 'statically linked'; then
	# Without file(1) we cannot tell; Debian's busybox-static is in /bin.
	busybox=/bin/busybox
fi
[ -x "$busybox" ] || { echo "make-initramfs: no busybox (package busybox-static)" >&2; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"/{bin,sbin,dev,proc,sys,newroot,modules}
cp "$busybox" "$stage/bin/busybox"
# init links the other applets at boot, without a fork per link here.
ln -s busybox "$stage/bin/sh"

# The kernel asks /sbin/modprobe of the initramfs for modules it wants on its
# own (crypto, for example); answer from the host tree mounted at /newroot.
cat >"$stage/sbin/modprobe" <<'WRAPPER'
#!/bin/sh
exec /bin/chroot /newroot /sbin/modprobe "$@"
WRAPPER
chmod +x "$stage/sbin/modprobe"

# Dependency order from modules.dep; a module can appear more than once.
: >"$stage/modules/order"
# A kernel of our own (TP_VM_KDIR) has them built in: nothing to load.
builtin=0
if [ -n "${TP_VM_KDIR:-}" ] && [ -f "$TP_VM_KDIR/.config" ]; then
	builtin=1
	for opt in CONFIG_9P_FS CONFIG_NET_9P_VIRTIO CONFIG_VIRTIO_PCI; do
		grep -qx "$opt=y" "$TP_VM_KDIR/.config" || builtin=0
	done
	if [ $builtin -eq 0 ]; then
		echo "make-initramfs: $TP_VM_KDIR/.config lacks 9p or virtio built in (=y)" >&2
		exit 1
	fi
fi
[ $builtin -eq 1 ] || modprobe -a -S "$kver" --show-depends 9p 9pnet_virtio virtio_pci |
	awk '$1 == "insmod" && !seen[$2]++ { print $2 }' |
	while read -r path; do
		name=$(basename "$path")
		# busybox insmod cannot decompress; newer kernels ship .ko.xz/.ko.zst.
		case "$name" in
		*.ko.xz)  xz -dc "$path" >"$stage/modules/${name%.xz}"; name=${name%.xz} ;;
		*.ko.zst) zstd -qdc "$path" >"$stage/modules/${name%.zst}"; name=${name%.zst} ;;
		*.ko.gz)  gzip -dc "$path" >"$stage/modules/${name%.gz}"; name=${name%.gz} ;;
		*)        cp "$path" "$stage/modules/$name" ;;
		esac
		echo "$name" >>"$stage/modules/order"
	done
if [ $builtin -eq 0 ] && [ ! -s "$stage/modules/order" ]; then
	echo "make-initramfs: no 9p/virtio modules for $kver under /lib/modules/$kver" >&2
	exit 1
fi

cp "$here/init" "$stage/init"
chmod +x "$stage/init"
cp "$settings" "$stage/tp-vm.conf"

# Uncompressed: the kernel unpacks it faster than it would decompress it.
(cd "$stage" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) >"$output"
