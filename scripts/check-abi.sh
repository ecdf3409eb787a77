#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# The shared library's ABI against the committed baseline lib/abi/libtpu_user.abi,
# with libabigail (abidw, abidiff), as TAP; Documentation/abi.rst has the policy.
#
#   scripts/check-abi.sh              build build/abi/libtpu_user.so (-g), compare
#   scripts/check-abi.sh --baseline   build it and write the baseline (make abi-baseline)
#   scripts/check-abi.sh --against ABI  compare with another baseline file instead
#
# Additions (functions, enumerators) pass; a removed or changed function, or
# a public structure whose size or layout changed, fails, unless the SONAME
# changed too, which announces the break: then the baseline must be written
# again (make abi-baseline) and committed with the change, and until then the
# baseline's test fails.  Only the types of include/ count (--headers-dir).
set -uo pipefail

cd "$(dirname "$0")/.." || exit 2
top=$(pwd)
out=$top/build/abi
baseline=$top/lib/abi/libtpu_user.abi
mode=check
case "${1:-}" in
--baseline) mode=baseline ;;
--against) baseline=${2:?usage: check-abi.sh --against FILE} ;;
"") ;;
*) echo "usage: scripts/check-abi.sh [--baseline | --against FILE]" >&2; exit 2 ;;
esac

# What abidw writes must not depend on where the tree is nor on line numbers,
# so that a rebuild (or a moved comment) gives the same file.
ABIDW_FLAGS=(--headers-dir include --drop-private-types --no-corpus-path --no-comp-dir-path
	     --no-show-locs --type-id-style hash --no-elf-needed)

for tool in abidw abidiff; do
	if ! command -v "$tool" >/dev/null; then
		echo "check-abi: $tool is missing: install abigail-tools (make deps)" >&2
		[ "$mode" = check ] && { echo "1..1"; echo "not ok 1 - abigail-tools installed"; }
		exit 1
	fi
done

# Its own copy, with debug information whatever CFLAGS the tree was built with.
build() {
	${MAKE:-make} --no-print-directory -s -C lib O="$out" CFLAGS="-O2 -g" \
		"$out/libtpu_user.so" >"$out.log" 2>&1
}
mkdir -p "$out"
if ! build; then
	cat "$out.log" >&2
	[ "$mode" = check ] && { echo "1..1"; echo "not ok 1 - libtpu_user.so builds with -g"; }
	exit 1
fi
so=$(readlink -f "$out/libtpu_user.so")
soname_of() { sed -n "1s/.* soname='\([^']*\)'.*/\1/p" "$1"; }

if [ "$mode" = baseline ]; then
	mkdir -p "$(dirname "$baseline")"
	abidw "${ABIDW_FLAGS[@]}" --out-file "$baseline" "$so" || exit 1
	echo "check-abi: wrote ${baseline#"$top"/} ($(soname_of "$baseline"))"
	exit 0
fi

echo "TAP version 13"
echo "1..4"
echo "ok 1 - libtpu_user.so builds with -g ($(basename "$so"))"

current=$out/current.abi
if abidw "${ABIDW_FLAGS[@]}" --out-file "$current" "$so" 2>"$out/abidw.err" &&
   grep -q "class-decl name='tpu_tensor'" "$current"; then
	echo "ok 2 - abidw reads the public types (struct tpu_tensor among them)"
else
	echo "not ok 2 - abidw reads the public types (struct tpu_tensor among them)"
	sed 's/^/# /' "$out/abidw.err"
	exit 1
fi

if [ ! -f "$baseline" ]; then
	echo "not ok 3 - a baseline: ${baseline#"$top"/} is missing (make abi-baseline)"
	echo "not ok 4 - no incompatible change # nothing to compare with"
	exit 1
fi
old=$(soname_of "$baseline")
new=$(soname_of "$current")
status=0
if [ "$old" = "$new" ]; then
	echo "ok 3 - the baseline is of this SONAME ($new)"
else
	echo "not ok 3 - the baseline is of this SONAME: it is $old, the library $new;" \
	     "write it again with make abi-baseline and commit it"
	status=1
fi

# abidiff's status is a bit set: 1 error, 2 usage, 4 a change, 8 an
# incompatible change.  Added functions and variables are left out of the
# report (--no-added-syms), so what is left with 4 changed or went away;
# libabigail's default suppressions already call added enumerators harmless.
abidiff --no-added-syms "$baseline" "$current" >"$out/abidiff.txt" 2>&1
rc=$?
if [ $((rc & 3)) -ne 0 ]; then
	echo "not ok 4 - no incompatible change (abidiff failed, status $rc)"
	status=1
elif [ $rc -eq 0 ]; then
	echo "ok 4 - no incompatible change against the baseline"
elif [ "$old" != "$new" ]; then
	echo "ok 4 - no incompatible change # SKIP the SONAME went from $old to $new"
else
	echo "not ok 4 - no incompatible change: a removed or changed interface with the" \
	     "SONAME still $new (Documentation/abi.rst)"
	status=1
fi
[ $rc -eq 0 ] || sed 's/^/# /' "$out/abidiff.txt"
# Additions pass, but are named so that the baseline is brought up to date.
added=$(abidiff "$baseline" "$current" 2>/dev/null | grep -E "^  \[A\] " || true)
if [ -n "$added" ]; then
	echo "# added since the baseline (compatible; make abi-baseline records them):"
	sed 's/^/# /' <<<"$added"
fi
exit $status
