#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Peer benchmark: run the reference libraries we compare ourselves against,
# on this machine, and print their numbers in one greppable line format.
#
#   tools/bench-peers.sh [--quick] [--only LIST] [--no-install]
#                        [--timeout SEC] [--budget SEC]
#
#   --quick       fewer iterations (on an idle 2-core machine about 20 s
#                 instead of 30 s; twice that and more under other load), and
#                 for gloo and mpi fewer sizes (about 40 s under load)
#   --only LIST   comma-separated subset of: tensorpipe, ucx, pvm, gloo, mpi
#                 (default all)
#   --no-install  never call apt-get; say what is missing instead
#   --timeout SEC limit of each single run (default 120; a run of
#                 collectives, every size of one peer, gets five times that)
#   --budget SEC  limit of the whole benchmark (default 1800); what is left
#                 when it runs out is reported unavailable
#
# Peers:
#   tensorpipe  Debian's libtensorpipe through tools/peers/tp_ref_bench (built
#               here into tools/peers/build): transports uv (TCP) and shm,
#               channels basic and cma.  Round trip of a 64-byte payload, and
#               one CPU tensor per message answered by a tiny acknowledgement
#               (mode=pingpong): GB/s = size / (tensor out + ack back).
#   ucx         ucx_perftest (package ucx-utils) over UCX_TLS=posix,self
#               (shared memory), posix,cma,self (cma carries the bulk),
#               tcp,self and cma,tcp,self.  tag_lat gives the round trip;
#               tag_bw gives streaming bandwidth (mode=stream, many sends in
#               flight); tag_lat at the tensor sizes gives a ping-pong
#               bandwidth (mode=pingpong, both directions carry the size).
#   pvm         a single process_vm_readv call of a tensor, from the project's
#               own tools/tpbench --mode cma: the raw kernel copy, a ceiling
#               for every cma path above.
#   gloo        Debian's libgloo through tools/peers/gloo_coll_bench, its TCP
#               device on 127.0.0.1 (without libgloo-dev: PyTorch's gloo
#               backend, tools/peers/gloo_torch_coll_bench.py, if
#               /usr/bin/python3 has torch): all-reduce (float32 sum, Gloo's
#               ring), broadcast from rank 0 and all-gather, 2 and 4 ranks,
#               beside tools/tpbench coll --world (peer=tpu, the world's
#               collectives: the shared segment on one host) in the same
#               run.  Sizes 4 B to 256 MiB (--quick: 4 B, 64 KiB, 1 MiB,
#               16 MiB, 64 MiB).  Both measure alike: each rank times each
#               operation, an operation takes the slowest rank's time, the
#               median of 20 operations (--quick: 10) is printed, and the
#               bus bandwidth is counted as nccl-tests counts it (all-reduce
#               size x 2(n-1)/n, broadcast size, all-gather n x size x
#               (n-1)/n, size being one rank's input).
#   mpi         Open MPI through tools/peers/mpi_coll_bench under mpirun,
#               its shared-memory BTL (--mca btl self,vader): the same
#               collectives and reduce-scatter, sizes and counting.
#
# Output lines (one per measurement), for example:
#   peer=tensorpipe transport=shm channel=cma metric=rtt_us size=64 iters=2000 avg=.. p50=.. p90=..
#   peer=ucx transport=posix tls=posix,self metric=bw mode=stream size=1048576 iters=.. us_avg=.. gbps=..
#   peer=gloo transport=tcp coll=all-reduce ranks=2 size=1048576 iters=10 time_us=.. busbw=..
#   peer=ucx unavailable: ucx_perftest not found (apt-get install ucx-utils)
# then compact tables; the collectives' one gives our speed relative to
# each peer (their time / ours: above 1 we are faster) beside the issue's
# goals: at least 1 against both at 1 MiB and above; for small tensors (64
# KiB and below) at least 1 against Gloo and at least 0.5 against Open MPI.  Round trips are in microseconds, bandwidth in GB/s
# (10^9 bytes per second).  The script exits 0 when a peer is unavailable
# (the reason is printed); non-zero only for its own errors (bad arguments).
#
# Packages (libtensorpipe-dev, g++, make, ucx-utils, libgloo-dev,
# libopenmpi-dev, openmpi-bin) are installed when
# missing, as root, where apt-get works.  Inside the test VM (TP_VM=1; the
# host's root is shared read-only, no apt) nothing is installed or built: the
# binaries built on the host are used as they are, so run this (or
# make -C tools/peers) on the host first, then, for example:
#   tests/vm/run.sh --name peers -- tools/bench-peers.sh --quick
# Nothing is pinned to a CPU; both sides of every test share the machine's
# cores, and everything that busy-polls suffers from any other load.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
peers_dir="$repo/tools/peers"
tp_bin="$peers_dir/build/tp_ref_bench"
gloo_bin="$peers_dir/build/gloo_coll_bench"
mpi_bin="$peers_dir/build/mpi_coll_bench"
sizes=(65536 1048576 16777216 67108864)
coll_ranks=(2 4)

quick=0
only="tensorpipe,ucx,pvm,gloo,mpi"
allow_install=1
step_timeout=120
budget=1800

usage() { # STATUS
	sed -n '/^#   tools\/bench-peers.sh/,/reported unavailable$/s/^# \{0,1\}//p' "$0"
	exit "$1"
}

while [ $# -gt 0 ]; do
	case "$1" in
	--quick)      quick=1; shift ;;
	--only)       only=${2:?--only needs a list}; shift 2 ;;
	--only=*)     only=${1#--only=}; shift ;;
	--no-install) allow_install=0; shift ;;
	--timeout)    step_timeout=${2:?--timeout needs seconds}; shift 2 ;;
	--budget)     budget=${2:?--budget needs seconds}; shift 2 ;;
	-h|--help)    usage 0 ;;
	*)            echo "bench-peers: unknown argument: $1" >&2; usage 2 >&2 ;;
	esac
done
for p in ${only//,/ }; do
	case "$p" in
	tensorpipe|ucx|pvm|gloo|mpi) ;;
	*) echo "bench-peers: unknown peer '$p' in --only (tensorpipe, ucx, pvm, gloo, mpi)" >&2; exit 2 ;;
	esac
done
for n in "$step_timeout" "$budget"; do
	[[ $n =~ ^[1-9][0-9]*$ ]] || { echo "bench-peers: not a number of seconds: $n" >&2; exit 2; }
done
want() { [[ ",$only," == *",$1,"* ]]; }

in_vm=0
[ "${TP_VM:-}" = 1 ] && in_vm=1

if [ $quick -eq 1 ]; then
	tp_args=(--quick)                  # 500 round trips, 256 MiB per size
	ucx_lat_iters=5000
	ucx_budget=$((256 << 20))
	ucx_max_iters=5000
	coll_sizes=4,64K,1M,16M,64M
	coll_iters=10
else
	tp_args=(--bw-bytes 2G)            # 2000 round trips, 2 GiB per size
	ucx_lat_iters=20000
	ucx_budget=$((1 << 30))
	ucx_max_iters=20000
	coll_sizes=4,1K,64K,1M,16M,64M,256M
	coll_iters=20
fi
started=$(date +%s)
deadline=$((started + budget))

work=$(mktemp -d "${TMPDIR:-/tmp}/bench-peers.XXXXXX")
results="$work/results"
: >"$results"
server_pid=
cleanup() {
	if [ -n "$server_pid" ]; then
		kill "$server_pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

# Result lines go to stdout and to the file the table is made from.
emit() {
	printf '%s\n' "$*"
	printf '%s\n' "$*" >>"$results"
}
unavailable() { # PEER-TAGS REASON
	emit "$1 unavailable: $2"
}
note() { echo "bench-peers: $*" >&2; }

# limit: the timeout for the next run, in seconds, or 1 (with the reason in
# $why) when the --budget is spent.
limit=
take_time() {
	local left=$((deadline - $(date +%s)))
	if [ $left -le 0 ]; then
		why="skipped: the time budget (--budget $budget s) is spent"
		return 1
	fi
	limit=$(( left < step_timeout ? left : step_timeout ))
	return 0
}

# ------------------------------------------------------------- packages --

pkg_ok() {
	command -v dpkg-query >/dev/null 2>&1 || return 1
	[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]
}

# ensure_packages PKG...: 0 when all are installed (installing them when
# allowed and possible); 1 with the reason in $why otherwise.
why=
ensure_packages() {
	local missing=() pkg log="$work/apt.log"
	for pkg in "$@"; do
		pkg_ok "$pkg" || missing+=("$pkg")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	local cmd="apt-get install -y --no-install-recommends ${missing[*]}"
	if [ $allow_install -eq 0 ]; then
		why="not installed: ${missing[*]} (--no-install; as root: $cmd)"
		return 1
	fi
	if [ $in_vm -eq 1 ]; then
		why="not installed: ${missing[*]} (no apt in the VM; run '$cmd' on the host)"
		return 1
	fi
	if ! command -v apt-get >/dev/null 2>&1; then
		why="not installed: ${missing[*]} (no apt-get here)"
		return 1
	fi
	if [ "$(id -u)" -ne 0 ]; then
		why="not installed: ${missing[*]} (run as root, or: sudo $cmd)"
		return 1
	fi
	note "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	# shellcheck disable=SC2086 # $cmd is one command line on purpose
	if ! timeout 600 $cmd >"$log" 2>&1; then
		# Fresh containers often have no package lists yet.
		# shellcheck disable=SC2086
		if ! { timeout 600 apt-get update -q && timeout 600 $cmd; } >>"$log" 2>&1; then
			why="could not install ${missing[*]}: $(tail -n 1 "$log")"
			return 1
		fi
	fi
	return 0
}

# The loopback interface: TensorPipe's uv transport, UCX's tcp transport and
# ucx_perftest's own connection setup all need it.  The test VM boots
# without bringing it up.
loopback_ok() {
	local flags
	flags=$(cat /sys/class/net/lo/flags 2>/dev/null || echo 0)
	(( flags & 1 )) && return 0
	if [ "$(id -u)" -eq 0 ] && command -v ip >/dev/null 2>&1 && ip link set lo up 2>/dev/null; then
		note "brought the loopback interface up"
		return 0
	fi
	return 1
}

# ----------------------------------------------------------- tensorpipe --

run_tensorpipe() {
	local tag="peer=tensorpipe"
	# Build when the tree is writable and the binary is missing or stale;
	# otherwise (the VM, a read-only checkout) use what is there.
	local need_build=0
	if [ ! -x "$tp_bin" ] || [ "$peers_dir/tp_ref_bench.cc" -nt "$tp_bin" ] ||
	   [ "$peers_dir/Makefile" -nt "$tp_bin" ]; then
		need_build=1
	fi
	if [ $need_build -eq 1 ] && [ -w "$peers_dir" ] && [ $in_vm -eq 0 ]; then
		if ! ensure_packages libtensorpipe-dev g++ make; then
			unavailable "$tag" "$why"
			return 0
		fi
		if ! make -s -C "$peers_dir" >"$work/build.log" 2>&1; then
			unavailable "$tag" "build failed: $(grep -m1 -i 'error' "$work/build.log" || tail -n 1 "$work/build.log")"
			return 0
		fi
	elif [ $need_build -eq 1 ] && [ -x "$tp_bin" ]; then
		note "using $tp_bin although it is older than its source (cannot rebuild here)"
	fi
	if [ ! -x "$tp_bin" ]; then
		unavailable "$tag" "$tp_bin not built (run tools/bench-peers.sh on the host first)"
		return 0
	fi
	if ! "$tp_bin" --help >/dev/null 2>"$work/tp.err"; then
		unavailable "$tag" "$tp_bin does not start: $(tail -n 1 "$work/tp.err") (libtensorpipe0 missing?)"
		return 0
	fi

	local lo=1 combo transport channel rc line
	loopback_ok || lo=0
	for combo in uv:basic shm:basic shm:cma uv:cma; do
		transport=${combo%%:*}
		channel=${combo#*:}
		if [ "$transport" = uv ] && [ $lo -eq 0 ]; then
			unavailable "$tag transport=$transport channel=$channel" "the loopback interface is down"
			continue
		fi
		if ! take_time; then
			unavailable "$tag transport=$transport channel=$channel" "$why"
			continue
		fi
		rc=0
		timeout -k 5 "$limit" "$tp_bin" --transport "$transport" --channel "$channel" \
			"${tp_args[@]}" --watchdog $((limit + 10)) >"$work/tp.out" 2>"$work/tp.err" || rc=$?
		while IFS= read -r line; do
			[[ $line == peer=* ]] && emit "$line"
		done <"$work/tp.out"
		if [ $rc -ne 0 ]; then
			[ $rc -eq 124 ] && echo "timed out after ${limit}s" >>"$work/tp.err"
			unavailable "$tag transport=$transport channel=$channel" \
				"exit status $rc: $(tail -n 1 "$work/tp.err")"
		fi
	done
}

# ------------------------------------------------------------------ ucx --

port_listening() { # PORT: is someone listening on it (IPv4 or IPv6)?
	local hex
	hex=$(printf '%04X' "$1")
	awk -v p=":$hex" 'FNR > 1 && $4 == "0A" && substr($2, length($2) - 4) == p { f = 1 }
		END { exit !f }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

pick_port() {
	local port tries=0
	while :; do
		port=$((20000 + RANDOM % 30000))
		port_listening "$port" || break
		tries=$((tries + 1))
		[ $tries -lt 50 ] || break
	done
	echo "$port"
}

# ucx_perf TLS ARGS...: one ucx_perftest server/client pair on localhost,
# its tcp lanes held to the loopback device (UCX would otherwise also
# open one over every other interface's address).
# Sets ucx_final (the numbers of the client's "Final:" line: iterations,
# percentile, average and overall latency in us, bandwidth average and
# overall in MiB/s, message rates) and ucx_lanes (the transports UCX chose,
# from its ep_cfg log line); returns 1 with the reason in $why on failure.
ucx_final=
ucx_lanes=
ucx_perf() {
	local tls=$1; shift
	local port waited=0 rc=0
	take_time || return 1
	port=$(pick_port)
	UCX_TLS=$tls UCX_NET_DEVICES=lo timeout -k 5 "$limit" ucx_perftest -p "$port" \
		>"$work/ucx-server.log" 2>&1 &
	server_pid=$!
	# Wait until the server listens (a probe connection would be taken for
	# the client, so look at /proc instead), at most 10 seconds.
	until port_listening "$port"; do
		if ! kill -0 "$server_pid" 2>/dev/null || [ $waited -ge 200 ]; then
			kill "$server_pid" 2>/dev/null || true
			wait "$server_pid" 2>/dev/null || true
			server_pid=
			why="server did not start: $(tail -n 1 "$work/ucx-server.log")"
			return 1
		fi
		sleep 0.05
		waited=$((waited + 1))
	done
	UCX_TLS=$tls UCX_NET_DEVICES=lo UCX_LOG_LEVEL=info timeout -k 5 "$limit" \
		ucx_perftest 127.0.0.1 -p "$port" "$@" >"$work/ucx-client.log" 2>&1 || rc=$?
	# The server ends by itself after one test; do not let a failed client
	# leave it waiting.
	if [ $rc -ne 0 ]; then
		kill "$server_pid" 2>/dev/null || true
	fi
	wait "$server_pid" 2>/dev/null || true
	server_pid=
	ucx_final=$(awk '$1 == "Final:" { $1 = ""; print; exit }' "$work/ucx-client.log")
	ucx_lanes=$(sed -n 's/.*ep_cfg\[[0-9]*\]: tag(\([^)]*\)).*/\1/p' "$work/ucx-client.log" |
		head -n 1 | tr ' ' ',')
	if [ $rc -ne 0 ] || [ -z "$ucx_final" ]; then
		why="ucx_perftest exit status $rc: $(grep -v '^[|+]' "$work/ucx-client.log" |
			grep -v -e 'UCX  INFO' -e 'UCX  DIAG' | tail -n 1)"
		[ $rc -eq 124 ] && why="ucx_perftest timed out after ${limit}s"
		return 1
	fi
	return 0
}

# iters_for SIZE DIVISOR: iterations that move about the byte budget.
iters_for() {
	local n=$((ucx_budget / $1 / $2))
	[ $n -lt 10 ] && n=10
	[ $n -gt $ucx_max_iters ] && n=$ucx_max_iters
	echo "$n"
}

run_ucx() {
	if ! command -v ucx_perftest >/dev/null 2>&1; then
		if ! ensure_packages ucx-utils || ! command -v ucx_perftest >/dev/null 2>&1; then
			unavailable "peer=ucx" "ucx_perftest not found: ${why:-apt-get install ucx-utils}"
			return 0
		fi
	fi
	if ! loopback_ok; then
		unavailable "peer=ucx" "the loopback interface is down (ucx_perftest connects over TCP)"
		return 0
	fi
	local have
	have=$(ucx_info -d 2>/dev/null | sed -n 's/^#[[:space:]]*Transport: //p' | sort -u | tr '\n' ' ')

	local spec label tls tl ok tag n w size p50 avg p90 us gbps f
	for spec in posix:posix,self posix+cma:posix,cma,self tcp:tcp,self tcp+cma:cma,tcp,self; do
		label=${spec%%:*}
		tls=${spec#*:}
		tag="peer=ucx transport=$label tls=$tls"
		ok=1
		for tl in ${tls//,/ }; do
			[[ " $have " == *" $tl "* ]] || { ok=0; break; }
		done
		if [ $ok -eq 0 ]; then
			unavailable "$tag" "UCX transport $tl not available (ucx_info -d lists: ${have% })"
			continue
		fi

		# Round trip: tag_lat reports half a round trip (one-way latency);
		# every figure is doubled here.  Its percentile comes from the last
		# 2048 iterations; p50 and p90 need a run each (-R).
		n=$ucx_lat_iters
		w=$((n / 10))
		if ucx_perf "$tls" -t tag_lat -s 64 -n "$n" -w "$w" -R 50; then
			read -r -a f <<<"$ucx_final"
			p50=$(awk -v v="${f[1]}" 'BEGIN { printf "%.2f", 2 * v }')
			avg=$(awk -v v="${f[3]}" 'BEGIN { printf "%.2f", 2 * v }')
			p90=NA
			if ucx_perf "$tls" -t tag_lat -s 64 -n "$n" -w "$w" -R 90; then
				read -r -a f <<<"$ucx_final"
				p90=$(awk -v v="${f[1]}" 'BEGIN { printf "%.2f", 2 * v }')
			fi
			emit "$tag metric=rtt_us size=64 iters=$n avg=$avg p50=$p50 p90=$p90 lanes=${ucx_lanes:-?}"
		else
			unavailable "$tag metric=rtt_us" "$why"
		fi

		# Streaming bandwidth: tag_bw keeps many sends in flight.  Its
		# "MB/s" are MiB/s; converted to GB/s (10^9 B/s).
		for size in "${sizes[@]}"; do
			n=$(iters_for "$size" 1)
			w=$(( n / 10 > 2 ? n / 10 : 2 ))
			if ucx_perf "$tls" -t tag_bw -s "$size" -n "$n" -w "$w"; then
				read -r -a f <<<"$ucx_final"
				us=${f[3]}
				gbps=$(awk -v v="${f[5]}" 'BEGIN { printf "%.3f", v * 1048576 / 1e9 }')
				emit "$tag metric=bw mode=stream size=$size iters=$n us_avg=$us gbps=$gbps lanes=${ucx_lanes:-?}"
			else
				unavailable "$tag metric=bw mode=stream size=$size" "$why"
			fi
		done

		# Ping-pong bandwidth: tag_lat at the tensor size, one message in
		# flight, the reply as large as the request; the one-way time is the
		# reported latency (half the round trip).
		for size in "${sizes[@]}"; do
			n=$(iters_for "$size" 2)
			w=$(( n / 10 > 2 ? n / 10 : 2 ))
			if ucx_perf "$tls" -t tag_lat -s "$size" -n "$n" -w "$w"; then
				read -r -a f <<<"$ucx_final"
				us=${f[3]}
				gbps=$(awk -v s="$size" -v t="$us" 'BEGIN { printf "%.3f", (t > 0 ? s / (t * 1e3) : 0) }')
				emit "$tag metric=bw mode=pingpong size=$size iters=$n us_avg=$us gbps=$gbps lanes=${ucx_lanes:-?}"
			else
				unavailable "$tag metric=bw mode=pingpong size=$size" "$why"
			fi
		done
	done
}

# ------------------------------------------------------------------ pvm --

run_pvm() {
	local tpbench="$repo/tools/tpbench" rc=0
	if [ ! -x "$tpbench" ] && [ -w "$repo/tools" ] && [ $in_vm -eq 0 ]; then
		note "building tools/tpbench"
		if make -s -C "$repo/lib" >"$work/tpbench-build.log" 2>&1; then
			make -s -C "$repo/tools" tpbench >>"$work/tpbench-build.log" 2>&1 || true
		fi
	fi
	if [ ! -x "$tpbench" ]; then
		unavailable "peer=pvm" "tools/tpbench not built (make -C lib && make -C tools)"
		return 0
	fi
	if ! take_time; then
		unavailable "peer=pvm" "$why"
		return 0
	fi
	timeout -k 5 "$limit" "$tpbench" --no-kmod --mode cma --min 64K --max 64M --factor 4 \
		--json >"$work/pvm.json" 2>"$work/pvm.err" || rc=$?
	if [ $rc -ne 0 ]; then
		unavailable "peer=pvm" "tools/tpbench exit status $rc: $(tail -n 1 "$work/pvm.err")"
		return 0
	fi
	# One result per line: { "size": N, ..., "process_vm_readv": { "us": T, "gbps": G }, ...
	# (through a file: the VM has no /dev/fd for process substitution)
	sed -n 's/.*"size": *\([0-9]*\),.*"process_vm_readv": *{ *"us": *\([0-9.]*\), *"gbps": *\([0-9.]*\).*/\1 \2 \3/p' \
		"$work/pvm.json" >"$work/pvm.txt"
	local size us gbps found=0 want_size
	while read -r size us gbps; do
		for want_size in "${sizes[@]}"; do
			if [ "$size" = "$want_size" ]; then
				emit "peer=pvm transport=process_vm_readv metric=bw mode=single_call size=$size us=$us gbps=$gbps"
				found=1
			fi
		done
	done <"$work/pvm.txt"
	[ $found -eq 1 ] || unavailable "peer=pvm" "no process_vm_readv results in tools/tpbench --json output"
}

# ---------------------------------------------------------- collectives --

# build_peer TARGET BIN PKG...: make the peer program TARGET of tools/peers
# when it is missing or older than its source (installing PKG... first);
# 0 when BIN can run, 1 with the reason in $why otherwise.
build_peer() {
	local target=$1 bin=$2; shift 2
	local need_build=0 f
	[ -x "$bin" ] || need_build=1
	for f in "$peers_dir/Makefile" "$peers_dir/$(basename "$bin")".c*; do
		[ -e "$f" ] && [ "$f" -nt "$bin" ] && need_build=1
	done
	if [ $need_build -eq 1 ] && [ -w "$peers_dir" ] && [ $in_vm -eq 0 ]; then
		ensure_packages "$@" || return 1
		if ! make -s -C "$peers_dir" "$target" >"$work/build-$target.log" 2>&1; then
			why="build failed: $(grep -m1 -i 'error' "$work/build-$target.log" ||
				tail -n 1 "$work/build-$target.log")"
			return 1
		fi
	elif [ $need_build -eq 1 ] && [ -x "$bin" ]; then
		note "using $bin although it is older than its source (cannot rebuild here)"
	fi
	if [ ! -x "$bin" ]; then
		why="$bin not built (run tools/bench-peers.sh on the host first)"
		return 1
	fi
	return 0
}

# coll_run TAG CMD...: one collective benchmark run; its peer= lines are
# emitted, a failure is reported unavailable under TAG.
coll_run() {
	local tag=$1 rc=0 line left; shift
	if ! take_time; then
		unavailable "$tag" "$why"
		return 0
	fi
	# Every collective and size in one run: five single runs' worth.
	left=$((deadline - $(date +%s)))
	limit=$((step_timeout * 5 < left ? step_timeout * 5 : left))
	timeout -k 5 "$limit" "$@" >"$work/coll.out" 2>"$work/coll.err" </dev/null || rc=$?
	while IFS= read -r line; do
		[[ $line == peer=* ]] && emit "$line"
	done <"$work/coll.out"
	if [ $rc -ne 0 ]; then
		[ $rc -eq 124 ] && echo "timed out after ${limit}s" >>"$work/coll.err"
		# The first line that says something (Open MPI frames its messages in dashes).
		unavailable "$tag" "exit status $rc: $(grep -v -e '^[[:space:]]*$' -e '^-*$' \
			"$work/coll.err" | head -n 1)"
	fi
}

run_coll() {
	local tpbench="$repo/tools/tpbench" gloo_ok=0 mpi_ok=0 tpu_ok=1 n
	if [ ! -x "$tpbench" ] && [ -w "$repo/tools" ] && [ $in_vm -eq 0 ]; then
		note "building tools/tpbench"
		if make -s -C "$repo/lib" >"$work/tpbench-build.log" 2>&1; then
			make -s -C "$repo/tools" tpbench >>"$work/tpbench-build.log" 2>&1 || true
		fi
	fi
	if [ ! -x "$tpbench" ]; then
		unavailable "peer=tpu" "tools/tpbench not built (make -C lib && make -C tools)"
		tpu_ok=0
	fi
	local gloo_cmd=("$gloo_bin")
	if want gloo; then
		if build_peer gloo "$gloo_bin" libgloo-dev g++ make; then
			gloo_ok=1
		elif /usr/bin/python3 -c 'import torch.distributed as d; assert d.is_gloo_available()' \
				>/dev/null 2>&1; then
			# No libgloo-dev: Gloo as PyTorch ships it (no reduce-scatter there).
			note "gloo: $why; using torch.distributed's gloo instead"
			gloo_cmd=(/usr/bin/python3 "$peers_dir/gloo_torch_coll_bench.py")
			gloo_ok=1
		else
			unavailable "peer=gloo" "$why"
		fi
		if [ $gloo_ok -eq 1 ] && ! loopback_ok; then
			gloo_ok=0
			unavailable "peer=gloo" "the loopback interface is down"
		fi
	fi
	if want mpi; then
		if ! build_peer mpi "$mpi_bin" libopenmpi-dev openmpi-bin make; then
			unavailable "peer=mpi" "$why"
		elif ! command -v mpirun >/dev/null 2>&1; then
			unavailable "peer=mpi" "mpirun not found (apt-get install openmpi-bin)"
		else
			mpi_ok=1
		fi
		# The test VM boots with no host name, which mpirun refuses.
		if [ $mpi_ok -eq 1 ] && [ $in_vm -eq 1 ] && [ "$(uname -n)" = "(none)" ] &&
		   [ "$(id -u)" -eq 0 ] && command -v hostname >/dev/null 2>&1 &&
		   hostname tpvm 2>/dev/null; then
			note "named the VM tpvm (Open MPI refuses the host name '(none)')"
		fi
	fi
	local mpi_root=()
	[ "$(id -u)" -eq 0 ] && mpi_root=(--allow-run-as-root)
	# Ours, Gloo's and Open MPI's in turn for each group size, so that
	# whatever else loads the machine weighs on all three alike.
	for n in "${coll_ranks[@]}"; do
		# The world's one-call collectives: the shared segment on one host.
		[ $tpu_ok -eq 1 ] && coll_run "peer=tpu ranks=$n" "$tpbench" coll --world \
			--ranks "$n" --sizes "$coll_sizes" --iters "$coll_iters" --lines
		[ $gloo_ok -eq 1 ] && coll_run "peer=gloo ranks=$n" "${gloo_cmd[@]}" --ranks "$n" \
			--sizes "$coll_sizes" --iters "$coll_iters"
		[ $mpi_ok -eq 1 ] && coll_run "peer=mpi ranks=$n" mpirun "${mpi_root[@]}" \
			--oversubscribe -np "$n" --mca btl self,vader --mca oob_tcp_if_include lo "$mpi_bin" \
			--sizes "$coll_sizes" --iters "$coll_iters"
	done
	return 0
}

print_coll_table() {
	grep -q ' coll=' "$results" || return 0
	echo
	echo "== collectives: time per operation (us) and bus bandwidth (GB/s), float32; ours = tpbench coll"
	echo "   x_gloo, x_mpi: their time / ours (above 1: we are faster); goal: >= 1 at 1 MiB and up,"
	echo "   and for 64 KiB and below >= 1 against Gloo and >= 0.5 against Open MPI (* marks a miss)"
	awk '
	function kv(line, key,    re, m) {
		re = "(^| )" key "=[^ ]*"
		if (match(line, re)) {
			m = substr(line, RSTART, RLENGTH)
			sub(/^ /, "", m)
			return substr(m, length(key) + 2)
		}
		return ""
	}
	/ unavailable: / { next }
	/ coll=/ {
		peer = kv($0, "peer"); row = kv($0, "coll") SUBSEP kv($0, "ranks") SUBSEP kv($0, "size")
		t[peer, row] = kv($0, "time_us"); bw[peer, row] = kv($0, "busbw")
		if (!(row in seen)) { seen[row] = 1; order[++n] = row }
	}
	function v(x) { return x == "" ? "-" : x }
	function human(b) {
		if (b >= 1048576 && b % 1048576 == 0) return (b / 1048576) "M"
		if (b >= 1024 && b % 1024 == 0) return (b / 1024) "K"
		return b
	}
	function ratio(peer, row, size, floor_small,    x, goal) {
		if (t[peer, row] == "" || t["tpu", row] == "" || t["tpu", row] + 0 == 0) return "-"
		x = t[peer, row] / t["tpu", row]
		goal = size >= 1048576 ? 1 : size <= 65536 ? floor_small : 0
		return sprintf("%.2f%s", x, x < goal ? "*" : "")
	}
	END {
		printf "%-14s %5s %6s | %10s %8s | %10s %8s | %10s %8s | %7s %7s\n",
			"coll", "ranks", "size", "tpu_us", "tpu_GB/s", "gloo_us", "gloo_GB/s",
			"mpi_us", "mpi_GB/s", "x_gloo", "x_mpi"
		for (i = 1; i <= n; i++) {
			r = order[i]
			split(r, k, SUBSEP)
			printf "%-14s %5s %6s | %10s %8s | %10s %8s | %10s %8s | %7s %7s\n",
				k[1], k[2], human(k[3]), v(t["tpu", r]), v(bw["tpu", r]),
				v(t["gloo", r]), v(bw["gloo", r]), v(t["mpi", r]), v(bw["mpi", r]),
				ratio("gloo", r, k[3], 1), ratio("mpi", r, k[3], 0.5)
		}
	}' "$results"
}

# ---------------------------------------------------------------- table --

print_table() {
	grep -q ' metric=' "$results" || return 0
	echo
	echo "== peers: round trip (us) of a 64-byte message; bandwidth (GB/s = 10^9 B/s) of one tensor"
	echo "   pingpong: one message in flight, then a reply; stream: many in flight (UCX tag_bw);"
	echo "   single_call: one process_vm_readv, no messaging at all"
	awk '
	function kv(line, key,    re, m) {
		re = "(^| )" key "=[^ ]*"
		if (match(line, re)) {
			m = substr(line, RSTART, RLENGTH)
			sub(/^ /, "", m)
			return substr(m, length(key) + 2)
		}
		return ""
	}
	/ unavailable: / { next }
	{
		peer = kv($0, "peer"); tr = kv($0, "transport"); ch = kv($0, "channel")
		if (ch == "") ch = "-"
		metric = kv($0, "metric"); mode = kv($0, "mode")
		if (metric == "rtt_us") {
			row = peer SUBSEP tr SUBSEP ch SUBSEP "pingpong"
			p50[row] = kv($0, "p50"); avg[row] = kv($0, "avg"); p90[row] = kv($0, "p90")
		} else if (metric == "bw") {
			if (mode == "") mode = "pingpong"
			row = peer SUBSEP tr SUBSEP ch SUBSEP mode
			bw[row, kv($0, "size")] = kv($0, "gbps")
		} else {
			next
		}
		if (!(row in seen)) { seen[row] = 1; order[++n] = row }
	}
	function v(x) { return x == "" ? "-" : x }
	END {
		printf "%-10s %-17s %-7s %-11s %8s %8s %8s %8s %8s %8s %8s\n",
			"peer", "transport", "channel", "mode", "rtt_p50", "rtt_avg", "rtt_p90",
			"64KiB", "1MiB", "16MiB", "64MiB"
		for (i = 1; i <= n; i++) {
			split(order[i], k, SUBSEP)
			r = order[i]
			printf "%-10s %-17s %-7s %-11s %8s %8s %8s %8s %8s %8s %8s\n",
				k[1], k[2], k[3], k[4], v(p50[r]), v(avg[r]), v(p90[r]),
				v(bw[r, 65536]), v(bw[r, 1048576]), v(bw[r, 16777216]), v(bw[r, 67108864])
		}
	}' "$results"
}

print_unavailable() {
	if grep -q ' unavailable: ' "$results"; then
		echo
		echo "unavailable:"
		grep ' unavailable: ' "$results" | sed 's/^/  /'
	fi
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')
# The host's cross-CPU cache-line round trip, which moves every figure here
# by several times when this host changes mode (tpbench host).
host_state() { [ -x "$repo/tools/tpbench" ] && "$repo/tools/tpbench" host 2>&1 || echo "not measured (tools/tpbench not built)"; }
host_before=$(host_state)
want tensorpipe && run_tensorpipe
want ucx && run_ucx
want pvm && run_pvm
{ want gloo || want mpi; } && run_coll
print_table
print_coll_table
print_unavailable
echo
echo "bench-peers: done in $(( $(date +%s) - started ))s on $(nproc) CPUs ($(uname -r)$([ $in_vm -eq 1 ] && echo ', in the test VM'))"
if [ $in_vm -eq 1 ]; then
	echo "bench-peers: figures from inside an emulated (TCG) VM compare only with each other, within one run"
fi
echo "bench-peers: load average before the run: $load_before (other load hurts the busy-polling peers most: UCX, TensorPipe shm)"
echo "bench-peers: before the run, $host_before"
echo "bench-peers: after the run, $(host_state)"
