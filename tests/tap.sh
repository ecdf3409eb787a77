# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# shellcheck shell=bash
#
# TAP for the shell checks, sourced (bash):
#
#   point OK DESCRIPTION	one test point; OK is 1 for a pass
#   tap_end			print the plan; the status is 0 when none failed
#
# The plan comes last, so a script may decide its points as it goes.
n=0
failed=0

point() {
	n=$((n + 1))
	if [ "$1" = 1 ]; then
		echo "ok $n - $2"
	else
		echo "not ok $n - $2"
		failed=$((failed + 1))
	fi
}

tap_end() {
	echo "1..$n"
	[ "$failed" -eq 0 ]
}
