#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Build the Debian packages of debian/ (tensorpipe-dkms, libtpu-user1,
# libtpu-user-dev, tensorpipe-tools, and the -dbgsym packages) with
# dpkg-buildpackage -us -uc -b, in a copy of the tree (scripts/copy-tree.sh)
# so that the build leaves nothing in it.  The .deb, .buildinfo and .changes
# files land in OUTDIR; the copy is removed after a successful build.
#
#   scripts/build-deb.sh [OUTDIR]     default: build/deb
#
# Needs the Build-Depends of debian/control (make deps installs them).
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$top/build/deb}
mkdir -p "$out"
out=$(cd "$out" && pwd)
version=$("$top/scripts/version.sh")
src=$out/tensorpipe-$version

for tool in dpkg-buildpackage dh dh_dkms; do
	if ! command -v "$tool" >/dev/null; then
		echo "build-deb: $tool is missing (make deps installs it)" >&2
		exit 1
	fi
done

# What an earlier build left here, this version's or another's.
rm -rf "$src"
rm -f "$out"/tensorpipe_*.changes "$out"/tensorpipe_*.buildinfo \
      "$out"/tensorpipe-dkms_*.deb "$out"/tensorpipe-tools*_*.deb "$out"/libtpu-user*_*.deb

"$top/scripts/copy-tree.sh" "$src"
cd "$src"
echo "build-deb: dpkg-buildpackage in $src"
dpkg-buildpackage -us -uc -b -Jauto
cd "$out"
rm -rf "$src"
echo "build-deb: in $out:"
ls -1 ./*.deb ./*.changes
