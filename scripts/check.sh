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

echo "== results"
exec tests/summary.sh \
	"unit tests (host)" "$logs/unit.log" "$unit_status" \
	"selftests (VM)" build/vm/check/guest.log "$vm_status"
