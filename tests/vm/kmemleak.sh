#!/bin/sh
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Inside a debug-kernel VM, after the suites: ask kmemleak for what nobody
# references any more (two scans, as it wants before it reports) and fail
# when it found anything, printing its reports.  Skips (status 0, saying
# so) on a kernel without kmemleak.

f=/sys/kernel/debug/kmemleak
if [ ! -w "$f" ]; then
	echo "# kmemleak: not in this kernel; nothing scanned"
	exit 0
fi
echo scan >"$f"
sleep 2
echo scan >"$f"
report=$(cat "$f")
if [ -z "$report" ]; then
	echo "ok 1 - kmemleak: no unreferenced objects after the suites"
	exit 0
fi
echo "not ok 1 - kmemleak: unreferenced objects after the suites"
echo "$report" | sed 's/^/# /'
exit 1
