#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Build and run the pipe wire format fuzzer for a bounded time, printing TAP.
#
#   tests/fuzz/run.sh [SECONDS]     (default 20)
#
# The fuzzer works on a temporary copy of the seed corpus, so runs do not
# accumulate state.  Prints "ok 1 - fuzz_pipe_wire: N runs in S s, no crash",
# or "not ok 1 - ..." with the path of the crash reproducer (kept in
# tests/fuzz/build/crashes/) and the end of the fuzzer's log, and exits 1;
# or "ok 1 - fuzz_pipe_wire # SKIP reason" when clang cannot build a
# libFuzzer binary here.  FUZZ_CC overrides the compiler (default clang).
set -uo pipefail

duration=${1:-20}
case $duration in
''|*[!0-9]*|0) echo "usage: $0 [SECONDS]  (a positive whole number)" >&2; exit 2 ;;
esac

here=$(cd "$(dirname "$0")" && pwd)
cc=${FUZZ_CC:-clang}
make=${MAKE:-make}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fuzz_pipe_wire.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT

echo "1..1"

skip() {
	echo "ok 1 - fuzz_pipe_wire # SKIP $*"
	exit 0
}

fail() {
	echo "not ok 1 - fuzz_pipe_wire: $1"
	if [ -n "${2:-}" ] && [ -f "$2" ]; then
		tail -n 40 "$2" | sed 's/^/# /'
	fi
	exit 1
}

# Can this compiler link a libFuzzer binary at all?  (Not: is our code right.)
command -v "$cc" >/dev/null 2>&1 || skip "$cc not installed"
printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n);\n%s\n' \
	'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; (void)n; return 0; }' \
	>"$tmp/probe.c"
"$cc" -fsanitize=fuzzer,address,undefined -o "$tmp/probe" "$tmp/probe.c" >"$tmp/probe.log" 2>&1 ||
	skip "$cc cannot link -fsanitize=fuzzer (libFuzzer missing: apt-get install libclang-rt-14-dev)"

"$make" --no-print-directory -C "$here" FUZZ_CC="$cc" all >"$tmp/build.log" 2>&1 ||
	fail "build failed" "$tmp/build.log"

mkdir -p "$tmp/corpus" "$tmp/artifacts" "$here/build/crashes"
cp "$here"/build/seeds/* "$tmp/corpus/"

# -timeout: one input taking a second is a hang; -rss_limit_mb: a leak or a
# huge allocation is a failure too.
"$here/build/fuzz_pipe_wire" "$tmp/corpus" -dict="$here/fuzz_pipe_wire.dict" \
	-max_total_time="$duration" -timeout=5 -rss_limit_mb=2048 -print_final_stats=1 \
	-artifact_prefix="$tmp/artifacts/" >"$tmp/fuzz.log" 2>&1
status=$?

crash=$(find "$tmp/artifacts" -type f | head -n 1)
if [ $status -ne 0 ] || [ -n "$crash" ]; then
	if [ -n "$crash" ]; then
		kept="$here/build/crashes/$(basename "$crash")"
		cp "$crash" "$kept"
		fail "crashed (exit $status), reproducer $kept (replay: $here/build/fuzz_pipe_wire $kept)" \
			"$tmp/fuzz.log"
	fi
	fail "fuzzer exited $status without a reproducer" "$tmp/fuzz.log"
fi

runs=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1/p' "$tmp/fuzz.log" | tail -n 1)
secs=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\2/p' "$tmp/fuzz.log" | tail -n 1)
[ -n "$runs" ] || fail "no run count in the fuzzer's log" "$tmp/fuzz.log"
cov=$(grep -o 'cov: [0-9]*' "$tmp/fuzz.log" | tail -n 1)
echo "ok 1 - fuzz_pipe_wire: $runs runs in $secs s, no crash"
inputs=$(find "$tmp/corpus" -type f | wc -l)
echo "# $((runs / (secs > 0 ? secs : 1))) runs/s, ${cov:-cov: ?} edges, corpus $inputs inputs"
