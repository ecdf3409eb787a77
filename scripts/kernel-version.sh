#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Print the release (KVER) of the kernel that tensorpipe.ko is built for.
#
#   scripts/kernel-version.sh [KDIR]
#   scripts/kernel-version.sh --all
#
# With KDIR, the release that kbuild tree was configured for.  Without it, the
# running kernel when its build tree is installed, otherwise the newest
# installed distribution kernel: build hosts and CI containers often run a
# kernel that has no /lib/modules at all, and `uname -r` would then name a
# kernel nobody can build for.
set -euo pipefail

# --all: every installed kernel the test VM can boot and the module can be
# built for (a kbuild tree and a /boot image), oldest first: make check's
# kernel matrix.
if [ "${1:-}" = "--all" ]; then
	for build in /lib/modules/*/build; do
		kver=$(basename "$(dirname "$build")")
		[ -f "$build/Makefile" ] && [ -r "/boot/vmlinuz-$kver" ] && echo "$kver"
	done | sort -V
	exit 0
fi

if [ $# -gt 0 ] && [ -n "$1" ]; then
	# UTS_RELEASE is what the module's vermagic records; Debian's
	# include/config/kernel.release holds the upstream version instead.
	uts="$1/include/generated/utsrelease.h"
	if [ -r "$uts" ]; then
		sed -n 's/^#define UTS_RELEASE "\(.*\)"$/\1/p' "$uts"
		exit 0
	fi
	echo "kernel-version: $uts missing (is $1 a prepared kbuild tree?)" >&2
	exit 1
fi

running=$(uname -r)
if [ -d "/lib/modules/$running/build" ]; then
	echo "$running"
	exit 0
fi

# Version order, not byte order: 6.1.0-10 is newer than 6.1.0-9.
newest=$(for build in /lib/modules/*/build; do
	[ -d "$build" ] && basename "$(dirname "$build")"
done | sort -V | tail -n 1)
if [ -z "$newest" ]; then
	echo "kernel-version: no kernel build tree under /lib/modules (run 'make deps')" >&2
	exit 1
fi
echo "$newest"
