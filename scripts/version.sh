#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Print the project's version, MAJOR.MINOR.PATCH.  It is written in one
# place, the TPU_VERSION_* macros of include/tpu_user.h (the library's
# version, which lib/Makefile reads the same way); the DKMS tree, the Debian
# packages and the man pages take it from here.
#
#   scripts/version.sh [HEADER]
set -euo pipefail

header=${1:-$(dirname "$0")/../include/tpu_user.h}
version=$(sed -n 's/^#define TPU_VERSION_\(MAJOR\|MINOR\|PATCH\)[[:space:]]*\([0-9]*\).*/\2/p' \
	"$header" | paste -sd.)
if ! [[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
	echo "version: no TPU_VERSION_MAJOR/MINOR/PATCH in $header (got '$version')" >&2
	exit 1
fi
echo "$version"
