#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# `make check` after the build: run every suite even when an earlier one
# fails, keep each suite's output in build/, and total the TAP results.
#
#   scripts/check.sh
set -uo pipefail

cd "$(dirname "$0")/.." || exit 2
logs=build/check
mkdir -p "$logs"
make=${MAKE:-make}

echo "== unit tests (host)"
$make --no-print-directory -C tests/unit run 2>&1 | tee "$logs/unit.log"
unit_status=${PIPESTATUS[0]}

echo "== selftests (VM)"
# run.sh streams the guest's output and keeps it in build/vm/check/guest.log.
tests/vm/run.sh --name check --module kmod/tensorpipe.ko -- tests/selftests/run.sh
vm_status=$?

echo "== rendezvous over every implementation (VM)"
# The library's case list over inprocess, kmod (uring_cmd) and cma, in a VM of its own.
$make --no-print-directory -C tests/rdv >"$logs/rdv-build.log" 2>&1 || cat "$logs/rdv-build.log"
tests/vm/run.sh --name check-rdv --module kmod/tensorpipe.ko -- tests/rdv/rdv_test
rdv_status=$?

echo "== pipes between processes, kmod channel (VM)"
$make --no-print-directory -C tests/pipe >"$logs/pipe-build.log" 2>&1 || cat "$logs/pipe-build.log"
tests/vm/run.sh --name check-pipe --module kmod/tensorpipe.ko -- tests/pipe/pipe_vm_test
pipe_status=$?

echo "== pipes between processes, cma channel (host)"
tests/pipe/pipe_vm_test 2>&1 | tee "$logs/pipe-host.log"
pipe_host_status=${PIPESTATUS[0]}

echo "== fuzz: the pipe wire decoder (host, bounded time)"
tests/fuzz/run.sh "${TP_FUZZ_SECONDS:-20}" 2>&1 | tee "$logs/fuzz.log"
fuzz_status=${PIPESTATUS[0]}

echo "== results"
exec tests/summary.sh \
	"unit tests (host)" "$logs/unit.log" "$unit_status" \
	"selftests (VM)" build/vm/check/guest.log "$vm_status" \
	"rendezvous (VM)" build/vm/check-rdv/guest.log "$rdv_status" \
	"pipes (VM)" build/vm/check-pipe/guest.log "$pipe_status" \
	"pipes (host)" "$logs/pipe-host.log" "$pipe_host_status" \
	"fuzz (host)" "$logs/fuzz.log" "$fuzz_status"
