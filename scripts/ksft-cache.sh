#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Extract the few kernel-source files the build borrows (the kselftest
# harness, checkpatch.pl and its data files, kernel-doc) from Debian's
# linux-source tarball into a cache outside the source tree.  Unpacking the
# 139 MB tarball takes a while, so it happens once per machine, not per clean
# build, and nothing from the kernel tree is copied into this repository.
#
#   scripts/ksft-cache.sh          make sure the cache is filled
#   scripts/ksft-cache.sh --dir    print the cache directory and exit
#
# Environment:
#   LINUX_SRC_TARBALL  default: /usr/src/linux-source-6.1.tar.xz
#   TP_SRC_CACHE       default: /var/cache/tensorpipe/linux-src, or
#                      ~/.cache/tensorpipe/linux-src when that is not writable
# The files land in $TP_SRC_CACHE/<tarball name without .tar.xz>/.
set -euo pipefail

tarball=${LINUX_SRC_TARBALL:-/usr/src/linux-source-6.1.tar.xz}
top=$(basename "$tarball" .tar.xz)

members=(
	tools/testing/selftests/kselftest_harness.h
	tools/testing/selftests/kselftest.h
	scripts/checkpatch.pl
	scripts/spelling.txt
	scripts/const_structs.checkpatch
	scripts/kernel-doc
)

default_cache() {
	local system=/var/cache/tensorpipe/linux-src
	# An unprivileged user can still use a cache root filled earlier.
	if [ -d "$system/$top" ] || { mkdir -p "$system" 2>/dev/null && [ -w "$system" ]; }; then
		echo "$system"
	else
		echo "${XDG_CACHE_HOME:-$HOME/.cache}/tensorpipe/linux-src"
	fi
}
cache=${TP_SRC_CACHE:-$(default_cache)}

if [ "${1:-}" = "--dir" ]; then
	echo "$cache"
	exit 0
fi

complete=1
for m in "${members[@]}"; do
	[ -f "$cache/$top/$m" ] || complete=0
done
[ $complete -eq 1 ] && exit 0

if [ ! -r "$tarball" ]; then
	echo "ksft-cache: $tarball not found; run 'make deps' (package linux-source-6.1)" >&2
	exit 1
fi

echo "ksft-cache: extracting kselftest harness and checkpatch from $tarball (once)"
mkdir -p "$cache"
# Extract beside the final place and rename, so an interrupted or concurrent
# run never leaves a half-filled cache that later runs would trust.
tmp=$(mktemp -d "$cache/.extract.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# --occurrence lets tar stop once every member is found instead of
# decompressing the whole archive.
tar -xJf "$tarball" -C "$tmp" --occurrence "${members[@]/#/$top/}"
rm -rf "${cache:?}/$top"
mv "$tmp/$top" "$cache/$top"
echo "ksft-cache: done: $cache/$top"
