#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# The Python bindings' tests, as TAP for tests/summary.sh: builds them
# (make python), runs pytest with $PYTHON (default /usr/bin/python3,
# Debian's, whose numpy and torch the tests use) and prints one TAP line
# per test (conftest.py writes them).  Tests that need PyTorch skip without it.
#
#   tests/python/run.sh [pytest arguments]
set -uo pipefail

cd "$(dirname "$0")/../.." || exit 2
PYTHON=${PYTHON:-/usr/bin/python3}
tap=build/python/tests.tap
mkdir -p build/python

echo "TAP version 13"
if ! make -s --no-print-directory python PYTHON="$PYTHON" >build/python/build.log 2>&1; then
	sed 's/^/# /' build/python/build.log
	echo "1..1"
	echo "not ok 1 - python: the tpu_user extension builds"
	exit 1
fi
if ! "$PYTHON" -c 'import pytest, numpy' 2>/dev/null; then
	echo "1..1"
	echo "not ok 1 - python: pytest and numpy importable by $PYTHON (make deps)"
	exit 1
fi
rm -f "$tap"
TPU_PY_TAP=$tap timeout 900 "$PYTHON" -m pytest -q -p no:cacheprovider tests/python "$@" 2>&1 |
	sed 's/^/# /'
status=${PIPESTATUS[0]}
if [ -s "$tap" ]; then
	# The plan line last in the file: put it first.
	grep '^1\.\.' "$tap"
	grep -v '^1\.\.' "$tap"
else
	echo "1..1"
	echo "not ok 1 - python: pytest reported no results (status $status)"
	status=1
fi
exit "$status"
