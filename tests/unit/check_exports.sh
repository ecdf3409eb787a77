#!/bin/sh
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# The shared library must export exactly the functions its header declares
# with TPU_API: nothing internal leaks out, nothing promised is missing.
# Prints TAP.  usage: check_exports.sh [LIBRARY.so [HEADER.h]]
# (by default this tree's lib/libtpu_user.so and include/tpu_user.h)
set -u
top=$(cd "$(dirname "$0")/../.." && pwd) || exit 1
lib=${1:-$top/lib/libtpu_user.so}
header=${2:-$top/include/tpu_user.h}
for f in "$lib" "$header"; do
	if [ ! -r "$f" ]; then
		echo "check_exports.sh: cannot read $f (build it with make lib)" >&2
		exit 2
	fi
done
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

nm -D --defined-only "$lib" | awk '$2 == "T" { print $3 }' | sort >"$tmp/exported"
# Declarations span lines; join the header and pick the name before each "(".
grep -v "^#define" "$header" | tr "\n" " " | grep -o 'TPU_API [^(;]*(' | sed 's/($//; s/.*[ *]//' | sort -u \
	>"$tmp/declared"

rc=0
echo "1..2"
extra=$(comm -23 "$tmp/exported" "$tmp/declared")
if [ -z "$extra" ]; then
	echo "ok 1 - shared_library_exports_nothing_beyond_the_header"
else
	echo "not ok 1 - shared_library_exports_nothing_beyond_the_header"
	echo "$extra" | sed 's/^/#   exported, not declared: /'
	rc=1
fi
missing=$(comm -13 "$tmp/exported" "$tmp/declared")
if [ -z "$missing" ] && [ -s "$tmp/declared" ]; then
	echo "ok 2 - shared_library_exports_every_function_the_header_declares"
else
	echo "not ok 2 - shared_library_exports_every_function_the_header_declares"
	echo "$missing" | sed 's/^/#   declared, not exported: /'
	rc=1
fi
exit $rc
