#!/bin/sh
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Runs the tensorpipe selftests and prints their TAP.  Needs the module
# loaded (insmod kmod/tensorpipe.ko); run as root so that the tests needing
# debugfs, module parameters, a cgroup or a privilege drop do not skip.
#
#   tests/selftests/run.sh [test_binary ...]
#
# TP_SELFTEST_DIR: where the binaries are (default: this script's directory).
# TP_SELFTEST_TIMEOUT: seconds one binary may run (default 1800).
# Exit status: 0 when every test passed or skipped, 1 otherwise.

set -u

here=$(cd "$(dirname "$0")" && pwd)
bindir=${TP_SELFTEST_DIR:-$here}
limit=${TP_SELFTEST_TIMEOUT:-1800}
params=/sys/module/tensorpipe/parameters
all="info_test region_test domain_test slot_test slot_errors_test \
completion_test donate_test dmabuf_test memcg_test member_test uring_test stress_test \
compat_test fault_test grant_test grant_fuzz_test"

if [ ! -c /dev/tensorpipe ]; then
	echo "Bail out! /dev/tensorpipe missing: load the module first" \
	     "(insmod kmod/tensorpipe.ko)"
	exit 1
fi

if [ "$(id -u)" -eq 0 ]; then
	if ! grep -qs ' /sys/kernel/debug debugfs ' /proc/mounts; then
		mount -t debugfs none /sys/kernel/debug ||
			echo "# could not mount debugfs; its tests will skip"
	fi
	# memcg_test needs a cgroup2 hierarchy (a bare VM has none mounted);
	# never mount over a cgroup v1 tree.
	if ! grep -qs ' cgroup2 ' /proc/mounts &&
	   ! grep -qs ' /sys/fs/cgroup ' /proc/mounts; then
		mount -t cgroup2 none /sys/fs/cgroup ||
			echo "# could not mount cgroup2; memcg_test will skip"
	fi
else
	echo "# not root: tests needing debugfs or module parameters will skip"
fi

# A test killed by its timeout cannot restore the parameters it lowered.
saved=""
if [ -d "$params" ]; then
	for p in "$params"/*; do
		[ -r "$p" ] && saved="$saved $(basename "$p")=$(cat "$p")"
	done
fi

restore_params() {
	for kv in $saved; do
		param=${kv%%=*}
		[ -w "$params/$param" ] &&
			echo "${kv#*=}" > "$params/$param" 2>/dev/null
	done
}

if command -v timeout > /dev/null 2>&1; then
	run_limited() { timeout -k 10 "$limit" "$@"; }
else
	run_limited() { "$@"; }
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/tp-selftests.XXXXXX") || exit 1
trap 'restore_params; rm -rf "$work"' EXIT INT TERM

passed=0
failed=0
skipped=0
bad_binaries=""

# shellcheck disable=SC2086 # $all is a list of words
[ $# -gt 0 ] || set -- $all
for name in "$@"; do
	bin=$bindir/$(basename "$name")
	echo "# ===== $(basename "$name") ====="
	if [ ! -x "$bin" ] && [ "$(basename "$name")" = compat_test ]; then
		echo "# compat_test not built: the compiler cannot target -m32"
		skipped=$((skipped + 1))
		continue
	fi
	if [ ! -x "$bin" ]; then
		echo "# $bin is missing: build with make -C tests/selftests"
		failed=$((failed + 1))
		bad_binaries="$bad_binaries $name"
		continue
	fi
	log=$work/log
	{ run_limited "$bin" 2>&1; echo $? > "$work/rc"; } | tee "$log"
	rc=$(cat "$work/rc")
	restore_params
	# Its first write is the TAP header: without it and without a fatal
	# signal, the kernel could not start an i386 binary at all.
	if [ "$(basename "$name")" = compat_test ] && [ "$rc" -lt 128 ] &&
	   ! grep -q '^TAP version' "$log"; then
		printf 'TAP version 13\n1..1\n'
		echo "ok 1 # SKIP compat_test: no 32-bit executables here"
		skipped=$((skipped + 1))
		continue
	fi

	p=$(grep -c '^ok [0-9]' "$log")
	s=$(grep -c '^ok [0-9][0-9]* # SKIP' "$log")
	f=$(grep -c '^not ok [0-9]' "$log")
	passed=$((passed + p - s))
	skipped=$((skipped + s))
	failed=$((failed + f))
	if [ "$rc" -ne 0 ]; then
		bad_binaries="$bad_binaries $name"
		# Crashed or timed out without reporting a failure itself.
		[ "$f" -eq 0 ] && failed=$((failed + 1))
		echo "# $name exited with status $rc"
	fi
done

echo "# tensorpipe selftests: $passed passed, $failed failed, $skipped skipped"
if [ -n "$bad_binaries" ] || [ "$failed" -ne 0 ]; then
	echo "# failing:$bad_binaries"
	exit 1
fi
exit 0
