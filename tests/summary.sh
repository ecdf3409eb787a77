#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Total the TAP results of several test suites.
#
#   tests/summary.sh NAME LOG STATUS [NAME LOG STATUS]...
#
# LOG is a suite's output (TAP mixed with anything else), STATUS its exit
# status.  Prints one line per suite, the failing test points (the first
# 20, each with its suite; under each of the first five, up to six lines
# its log has after it: the reason a test printed; a crash report's line
# and first frames, as one more entry), then exactly one line
# "N passed, N failed" (", N skipped" appended when there are any), and exits
# 1 when anything failed.
#
# Test points may be nested, indented by spaces (TAP 14 subtests) or behind
# "# " (the kselftest runner wrapping each binary's TAP): only leaf results
# count, so a binary's own "ok" line is not counted on top of its tests.  A
# parent that fails with no failing child (a crashed binary), a "Bail out!",
# a suite that exits non-zero with no failing test, or one that printed no
# results at all each count as one failure, so the totals never say
# "0 failed" about a run that went wrong.
set -euo pipefail

if [ $# -eq 0 ] || [ $(($# % 3)) -ne 0 ]; then
	echo "usage: tests/summary.sh NAME LOG STATUS [NAME LOG STATUS]..." >&2
	exit 2
fi

# Prints "FAIL<tab>line" for each failing test point, then
# "passed failed skipped" for one log.
count_tap() {
	awk '
	function depth_of(prefix,    d, spaces) {
		d = gsub(/#[ ]?/, "", prefix)
		spaces = prefix
		gsub(/\t/, "    ", spaces)
		return d + int(length(spaces) / 4)
	}
	{
		sub(/\r$/, "")
		if (!match($0, /^[ \t#]*/))
			next
		prefix = substr($0, 1, RLENGTH)
		rest = substr($0, RLENGTH + 1)
		if (rest ~ /^Bail out!/) {
			failed++
			next
		}
		if (rest !~ /^(not )?ok([ \t]|$)/) {
			# What a failing point printed after itself (its log, a
			# reason a rank gave): a few lines of it for the failures list.
			if (diag_left > 0 && rest ~ /[^ \t]/) {
				diag_left--
				print "DIAG\t" substr(rest, 1, 160)
			}
			next
		}
		diag_left = 0
		d = depth_of(prefix)
		is_parent = deeper[d]
		child_failed = deeper_failed[d]
		# Everything nested below this point belongs to it: forget it.
		for (k in deeper)
			if (k + 0 >= d) {
				delete deeper[k]
				delete deeper_failed[k]
			}
		fail = (rest ~ /^not ok/)
		directive = rest
		sub(/^[^#]*/, "", directive)
		if (is_parent) {
			if (fail && !child_failed) {
				failed++
				fail_mark(d)
				print "FAIL\t" rest
				diag_left = 6
			}
		} else if (directive ~ /^#[ \t]*([Ss][Kk][Ii][Pp]|[Tt][Oo][Dd][Oo])/) {
			skipped++
		} else if (fail) {
			failed++
			fail_mark(d)
			print "FAIL\t" rest
			diag_left = 6
		} else {
			passed++
		}
		for (k = 0; k < d; k++)
			deeper[k] = 1
	}
	function fail_mark(d,    k) {
		for (k = 0; k < d; k++)
			deeper_failed[k] = 1
	}
	END { printf "%d %d %d\n", passed, failed, skipped }
	' "$1"
}

# The first crash report in a log (tap_crash_stacks() in tests/unit/tap.c):
# its line and the crashing thread's first frames from gdb, on one line.
crash_digest() {
	awk '
	{ sub(/\r$/, ""); sub(/^\[[a-z]\] /, "") }
	/tap: pid [0-9]+ died of / {
		if (!line) {
			line = $0
			sub(/^.*tap: /, "", line)
		}
		next
	}
	line && !done && /<signal handler called>/ { take = 4; next }
	take > 0 && /^#[0-9]+ / {
		fn = $0
		sub(/^#[0-9]+ +(0x[0-9a-f]+ in )?/, "", fn)
		sub(/ \(.*\) at /, " at ", fn)
		frames = frames (frames ? " < " : "") substr(fn, 1, 80)
		if (--take == 0)
			done = 1
		next
	}
	take > 0 { take = 0; done = 1 }
	END { if (line) print substr(line, 1, 200) (frames ? "; frames: " frames : "") }
	' "$1"
}

here=$(dirname "$0")
total_passed=0 total_failed=0 total_skipped=0
failures=()
while [ $# -gt 0 ]; do
	name=$1 log=$2 status=$3
	shift 3
	note=
	if [ -r "$log" ]; then
		counted=$(count_tap "$log")
		read -r passed failed skipped < <(tail -n 1 <<<"$counted")
		while IFS= read -r fail_line; do
			if [[ $fail_line == DIAG* ]]; then
				[ ${#failures[@]} -gt 0 ] &&
					failures[-1]+=$'\n'"    | ${fail_line#DIAG	}"
				continue
			fi
			fail_line=${fail_line#FAIL	}
			# A hang's watchdog printed gdb's stacks: their digest on its line.
			case $fail_line in
			*"watchdog: no test point"*|*"still running after"*)
				digest=$("$here/stack-digest.sh" "$log" 2>/dev/null || true)
				fail_line+="${digest:+; stacks: $digest}" ;;
			esac
			failures+=("$name: $fail_line")
		done < <(grep -E '^(FAIL|DIAG)	' <<<"$counted" || true)
		# A process that died of a signal said where (a forked worker's
		# report comes before the point that fails for it).
		# Only in a suite that failed: some tests make a child crash.
		if [ "$failed" -gt 0 ] || [ "$status" != 0 ]; then
			crash=$(crash_digest "$log" 2>/dev/null || true)
			[ -n "$crash" ] && failures+=("$name: a crash: $crash")
		fi
	else
		passed=0 failed=0 skipped=0
	fi
	if [ "$status" != 0 ] && [ "$failed" -eq 0 ]; then
		failed=1
		note=" (exit status $status with no failing test)"
		# Where it stopped, for the failures list (a CI log's tail is all
		# some readers get): the VM runner's verdict and the last point.
		if [ -r "$log" ]; then
			why=$(grep -a 'tests/vm: FAILED after' "$log" | tail -n 1 | sed 's/^.*tests\/vm: //' || true)
			last=$(grep -aE '^[[:space:]#]*(not )?ok([[:space:]]|$)' "$log" | tail -n 1 |
			       sed 's/^[[:space:]#]*//' | cut -c1-140 || true)
			failures+=("$name:$note${why:+; $why}; the last point: ${last:-none}")
		else
			failures+=("$name:$note")
		fi
	elif [ $((passed + failed + skipped)) -eq 0 ]; then
		failed=1
		note=" (no test results)"
		failures+=("$name:$note")
	fi
	line="$passed passed, $failed failed"
	[ "$skipped" -gt 0 ] && line+=", $skipped skipped"
	printf '  %-24s %s%s\n' "$name:" "$line" "$note"
	total_passed=$((total_passed + passed))
	total_failed=$((total_failed + failed))
	total_skipped=$((total_skipped + skipped))
done

# The failures again, just above the totals, where a log's tail shows them.
if [ ${#failures[@]} -gt 0 ]; then
	echo "failures (${#failures[@]}, the first 20):"
	shown=0
	for f in "${failures[@]:0:20}"; do
		# The lines each printed after itself, for the first five only.
		[ $shown -ge 5 ] && f=${f%%$'\n'*}
		printf '  %s\n' "$f"
		shown=$((shown + 1))
	done
fi

line="$total_passed passed, $total_failed failed"
[ $total_skipped -gt 0 ] && line+=", $total_skipped skipped"
echo "$line"
[ $total_failed -eq 0 ]
