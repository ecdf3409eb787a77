#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Build, once per machine, the debug kernel that make check-debug boots:
# Debian's linux-source-6.12 with x86_64_defconfig, kvm_guest.config and
# tests/vm/debug-kernel.config (KASAN, lockdep, kmemleak, fault injection,
# the guest's drivers built in, the rest trimmed).  The result is cached
# outside the tree, keyed by the source package's version, the fragment and
# this script, so a changed fragment rebuilds and an unchanged one is reused.
#
#   scripts/debug-kernel.sh              build if needed; print the build dir
#   scripts/debug-kernel.sh --print-dir  print the build dir, fail if not built
#
# The build dir serves as KDIR for the module and holds
# arch/x86/boot/bzImage.  TP_DEBUG_KERNEL_CACHE: default
# /var/cache/tensorpipe/debug-kernel.  TP_DEBUG_KERNEL_JOBS: make -j (nproc).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
fragment=$repo/tests/vm/debug-kernel.config
tarball=${TP_DEBUG_KERNEL_TARBALL:-/usr/src/linux-source-6.12.tar.xz}
cache=${TP_DEBUG_KERNEL_CACHE:-/var/cache/tensorpipe/debug-kernel}
jobs=${TP_DEBUG_KERNEL_JOBS:-$(nproc)}

if [ ! -r "$tarball" ]; then
	echo "debug-kernel: $tarball missing: apt-get install linux-source-6.12 (make deps)" >&2
	exit 1
fi
version=$(dpkg-query -W -f='${Version}' linux-source-6.12 2>/dev/null || stat -c %s "$tarball")
key=$( { echo "$version"; cat "$fragment"; sed -n '/^# --- config/,$p' "$0"; } | sha256sum | cut -c1-16)
dir=$cache/$key
build=$dir/build

if [ "${1:-}" = "--print-dir" ]; then
	[ -f "$dir/done" ] || { echo "debug-kernel: not built (scripts/debug-kernel.sh)" >&2; exit 1; }
	echo "$build"
	exit 0
fi

mkdir -p "$dir"
exec 9>"$dir/lock"
flock 9			# one build at a time; the second caller reuses it
if [ -f "$dir/done" ]; then
	echo "$build"
	exit 0
fi

missing=()
for pkg in bc bison flex libelf-dev libssl-dev cpio xz-utils; do
	[ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)" = "install ok installed" ] ||
		missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "debug-kernel: installing ${missing[*]}" >&2
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 install -y \
		--no-install-recommends "${missing[@]}" >&2
fi

src=$dir/src
if [ ! -f "$src/Makefile" ]; then
	echo "debug-kernel: unpacking $tarball" >&2
	rm -rf "$src" "$dir/unpack"
	mkdir -p "$dir/unpack"
	tar -xJf "$tarball" -C "$dir/unpack"
	mv "$dir/unpack"/linux-source-* "$src"
	rmdir "$dir/unpack"
fi

# --- config (part of the cache key) ---
started=$(date +%s)
mkdir -p "$build"
make -s -C "$src" O="$build" x86_64_defconfig >&2
make -s -C "$src" O="$build" kvm_guest.config >&2
"$src/scripts/kconfig/merge_config.sh" -m -O "$build" "$build/.config" "$fragment" >&2
make -s -C "$src" O="$build" olddefconfig >&2

# olddefconfig drops what it cannot satisfy without a word: check each =y.
bad=0
while read -r line; do
	case "$line" in
	CONFIG_*=y)
		grep -qx "$line" "$build/.config" || { echo "debug-kernel: $line did not stick" >&2; bad=1; } ;;
	"# CONFIG_"*" is not set")
		opt=${line#"# "}; opt=${opt%% *}
		! grep -q "^$opt=y" "$build/.config" || { echo "debug-kernel: $opt is still on" >&2; bad=1; } ;;
	esac
done <"$fragment"
[ $bad -eq 0 ] || exit 1

echo "debug-kernel: building in $build with -j$jobs (10-25 minutes on 2 cores)" >&2
make -s -C "$src" O="$build" -j"$jobs" bzImage modules >&2
make -s -C "$src" O="$build" modules_prepare >&2
touch "$dir/done"
echo "debug-kernel: built in $(( $(date +%s) - started )) s" >&2
echo "$build"
