#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# tpbench's host probe (tools/host_state.c): the cache-line round trip and
# load it prints beside every benchmark, checked as TAP.  It must measure a
# plausible round trip where two CPUs are allowed, say why not (and fail)
# where one is, and appear before and after a benchmark's run in its JSON.
# With --pin, the report says where the two sides ran.
#
#   tests/tools/host-check.sh [TPBENCH]
set -uo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
tpbench=${1:-$top/tools/tpbench}
# shellcheck source=tests/tap.sh
. "$top/tests/tap.sh"

# The value of "key": in a one-line JSON object ("null" stays "null").
field() {	# field JSON KEY
	sed -n "s/.*\"$2\": \\([^,}]*\\).*/\\1/p" <<<"$1" | head -n 1
}

if [ ! -x "$tpbench" ]; then
	point 0 "tpbench is built ($tpbench)"
	echo "1..$n"
	exit 1
fi

if [ "$(nproc)" -ge 2 ]; then
	out=$("$tpbench" host --json)
	rc=$?
	rtt=$(field "$out" line_rtt_ns)
	point $([ $rc -eq 0 ] && echo 1 || echo 0) "tpbench host exits 0 on two CPUs (got $rc: $out)"
	point $(awk -v v="$rtt" 'BEGIN { print (v + 0 > 1 && v + 0 < 1e6) ? 1 : 0 }') \
		"the round trip is a plausible number of ns (1 to 1e6): $rtt"
	a=$(field "$out" cpu_a)
	b=$(field "$out" cpu_b)
	point $([ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$b" ] && echo 1 || echo 0) \
		"it names two different CPUs ($a, $b)"
else
	echo "ok $((n + 1)) # SKIP one CPU online: no round trip to measure"
	n=$((n + 1))
fi

cpu=$(taskset -pc $$ | sed 's/.*: *//; s/[,-].*//')
out=$(taskset -c "$cpu" "$tpbench" host --json)
rc=$?
point $([ $rc -eq 2 ] && [ "$(field "$out" line_rtt_ns)" = null ] && echo 1 || echo 0) \
	"pinned to one CPU: exit 2 and no round trip (got $rc: $out)"
point $(grep -q '"why": "this process may run on one CPU only"' <<<"$out" && echo 1 || echo 0) \
	"pinned to one CPU: it says why"

out=$("$tpbench" host --bogus 2>&1)
rc=$?
point $([ $rc -eq 1 ] && grep -q usage <<<"$out" && echo 1 || echo 0) \
	"a bad argument prints the usage and exits 1 (got $rc)"

out=$("$tpbench" rdv --impl inprocess --iters 5 --json 2>/dev/null)
point $(grep -q '"host_before": {' <<<"$out" && grep -q '"host_after": {' <<<"$out" &&
	echo 1 || echo 0) "tpbench rdv --json carries host_before and host_after"
out=$("$tpbench" rdv --impl inprocess --iters 5 2>/dev/null)
point $(grep -q '^host: cache-line round trip between CPUs .* before the run; .* after$' <<<"$out" &&
	echo 1 || echo 0) "tpbench rdv prints the host line before and after"

# --pin: where the two sides ran, said in the report (tools/pin.c).
point $(grep -q '^placement: not pinned' <<<"$out" && echo 1 || echo 0) \
	"tpbench rdv says when nothing was pinned"
out=$("$tpbench" rdv --impl inprocess --iters 5 --pin same 2>/dev/null)
rc=$?
point $([ $rc -eq 0 ] &&
	grep -Eq '^placement: --pin same: this process on CPU ([0-9]+), its peers on CPU \1$' <<<"$out" &&
	echo 1 || echo 0) "tpbench rdv --pin same puts both sides on one CPU (got $rc)"
out=$("$tpbench" rdv --impl inprocess --iters 5 --pin split --json 2>&1)
rc=$?
if [ "$(nproc)" -ge 2 ]; then
	a=$(sed -n 's/.*"placement": "[^"]*on CPU \([0-9]*\), its peers on CPU \([0-9]*\)".*/\1 \2/p' <<<"$out")
	point $([ $rc -eq 0 ] && [ -n "$a" ] && [ "${a% *}" != "${a#* }" ] && echo 1 || echo 0) \
		"tpbench rdv --pin split --json names two different CPUs (got $rc: $a)"
else
	echo "ok $((n + 1)) # SKIP one CPU online: nothing to split"
	n=$((n + 1))
fi
out=$("$tpbench" rdv --impl inprocess --iters 5 --pin across 2>&1)
rc=$?
point $([ $rc -eq 1 ] && grep -q 'say same or split' <<<"$out" && echo 1 || echo 0) \
	"tpbench rdv --pin with another word exits 1 and says what it takes (got $rc)"
out=$(taskset -c "$cpu" "$tpbench" pipe --transport shm --channel basic --rtt-only --iters 5 \
	--pin split 2>&1)
rc=$?
point $([ $rc -eq 2 ] && grep -q 'pin split' <<<"$out" && echo 1 || echo 0) \
	"tpbench pipe --pin split on one allowed CPU refuses (got $rc)"

tap_end
