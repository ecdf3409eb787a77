#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# checkpatch.pl --strict and kernel-doc on every file of the module and the
# uapi header, as TAP: one point per file and tool.  The tools come from the
# given linux-source tarball (extracted once by ksft-cache.sh); make check
# passes the newest installed one, whose rules are the strictest.
#
#   scripts/lint-kernel.sh /usr/src/linux-source-X.tar.xz
set -uo pipefail

cd "$(dirname "$0")/.." || exit 2
tarball=${1:?usage: lint-kernel.sh LINUX_SOURCE_TARBALL}
LINUX_SRC_TARBALL=$tarball scripts/ksft-cache.sh >&2 || exit 1
src=$(scripts/ksft-cache.sh --dir)/$(basename "$tarball" .tar.xz)

files=()
for f in kmod/*.c kmod/*.h include/uapi/linux/*.h; do
	case "$f" in *.mod.c) continue ;; esac
	files+=("$f")
done

echo "TAP version 13"
echo "1..$(( 2 * ${#files[@]} ))"
echo "# tools from $(basename "$tarball" .tar.xz)"
n=0
failed=0
for f in "${files[@]}"; do
	n=$((n + 1))
	if out=$(perl "$src/scripts/checkpatch.pl" --strict --no-tree --terse -f "$f" 2>&1) &&
	   ! grep -q -E '(ERROR|WARNING|CHECK):' <<<"$out"; then
		echo "ok $n - checkpatch --strict: $f"
	else
		echo "not ok $n - checkpatch --strict: $f"
		sed 's/^/# /' <<<"$out"
		failed=1
	fi
	n=$((n + 1))
	out=$(perl "$src/scripts/kernel-doc" -none -v "$f" 2>&1 | grep -E ': (warning|error):')
	if [ -z "$out" ]; then
		echo "ok $n - kernel-doc: $f"
	else
		echo "not ok $n - kernel-doc: $f"
		sed 's/^/# /' <<<"$out"
		failed=1
	fi
done
exit $failed
