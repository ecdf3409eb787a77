#!/bin/sh
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# In both VMs of tests/vm/pair.sh, after link-setup.sh: the pipe benchmark
# over rdma:// between the two hosts, beside perftest (ib_write_lat,
# ib_write_bw) and ucx_perftest (UCP tag_lat/tag_bw over rc_verbs) on the
# same rxe devices, and the pipe over tcp:// on the same link, all in one run.
#
#   tests/vm/pair.sh --name bench-rdma -- tests/vm/pair-bench.sh
#
# VM a runs the servers, one per step on a port of its own; VM b runs the
# clients in the same order (each retried until its server listens) and
# prints the results: one "bench:" line per figure, then a table with the
# ratios.  Round trips are of a 64-byte message in microseconds, medians;
# perftest's and UCX's latency tests report half a round trip, so their
# figures are doubled here.  Bandwidth is in GB/s (10^9 B/s): the pipe's is
# the median of size / (tensor out -> 64-byte reply back), one tensor in
# flight; ib_write_bw's and UCX's are streams (many messages in flight).
#
# Environment: PAIR_BENCH_QUICK=1 for fewer iterations (the default under
# make check is the normal count, which is itself small: the VMs are
# emulated); PAIR_BENCH_UCX_TLS (default rc_verbs,ud_verbs,self: rc_verbs
# carries the data, ud_verbs only wires the endpoints up).
# PAIR_BENCH_ONLY (default perftest,ucx,tpbench,coll): a subset, for trying one.
#
# coll: the world's collectives across the two VMs, four ranks (0 and 1 on
# b, 2 and 3 on a), in two levels (a segment per VM, the leaders over tcp)
# and flat (TPU_COLL_PATH=flat: every rank over the rendezvous), one after
# the other in this run: tpbench coll --env on each rank, rank 0 reporting;
# the table gives all-reduce's time under both and their ratio.
# A tool that is missing or fails is reported "unavailable" with its
# reason; VM b's exit status is non-zero when the pipe itself could not be
# measured.

sizes="65536 1048576 16777216 67108864"
dev=rxe0
base=7730
ucx_tls=${PAIR_BENCH_UCX_TLS:-rc_verbs,ud_verbs,self}
ucx_api=${PAIR_BENCH_UCX_API:-uct}
if [ "${PAIR_BENCH_QUICK:-0}" = 1 ]; then
	lat_iters=200
	tp_bw_iters=3
	budget=$((64 << 20))
else
	lat_iters=1000
	tp_bw_iters=8
	budget=$((256 << 20))
fi
step_timeout=240
only=",${PAIR_BENCH_ONLY:-perftest,ucx,tpbench,coll},"
coll_sizes=4,64K,1M,16M
coll_iters=5
[ "${PAIR_BENCH_QUICK:-0}" = 1 ] && coll_iters=3
coll_port=7790

# coll_ranks FIRST STORE_ADDR PORT PATH LOG: two ranks of the four-rank
# world on this VM under TPU_COLL_PATH=PATH; rank 0's report in LOG.  A
# rank that finds no store yet (the other VM still busy) tries again.
coll_ranks() {
	for lr in 0 1; do
		(
			tries=0
			until env WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 LOCAL_RANK=$lr RANK=$(($1 + lr)) \
				MASTER_ADDR="$2" MASTER_PORT="$3" TPU_COLL_PATH="$4" \
				timeout $step_timeout tools/tpbench coll --env --lines \
				--sizes $coll_sizes --iters $coll_iters >"$5.$lr" 2>&1; do
				tries=$((tries + 1))
				[ $tries -lt 3 ] && grep -qi -e refused -e 'timed out' "$5.$lr" || exit 1
				sleep 1
			done
		) &
		eval "coll_pid$lr=\$!"
	done
	cst=0
	wait "$coll_pid0" || cst=1
	wait "$coll_pid1" || cst=1
	cat "$5.0" "$5.1" >"$5"
	return $cst
}
want() { case "$only" in *",$1,"*) return 0 ;; esac; return 1; }

# UCX picks a GID by itself, and on rxe its first choice (the link-local
# IPv6 one) does not reach the peer here: give it the index of this host's
# IPv4 address, the GID rdma_cm and perftest use.
gid_index=
for g in /sys/class/infiniband/$dev/ports/1/gids/*; do
	case "$(cat "$g" 2>/dev/null)" in
	"0000:0000:0000:0000:0000:ffff:"*) gid_index=${g##*/}; break ;;
	esac
done
ucx_env="UCX_NET_DEVICES=$dev:1${gid_index:+ UCX_IB_GID_INDEX=$gid_index}"
[ "$ucx_api" = uct ] || ucx_env="UCX_TLS=$ucx_tls $ucx_env"

# Iterations that move about the byte budget (at least 5, at most 1000).
iters_for() {
	n=$((budget / $1))
	[ $n -lt 5 ] && n=5
	[ $n -gt 1000 ] && n=1000
	echo $n
}

# ---------------------------------------------------------------- VM a --

if [ "$TP_VM_ROLE" = a ]; then
	port=$base
	# serve LOG COMMAND...: one server, bounded; its output kept for b's report.
	serve() {
		log=$1
		shift
		timeout $step_timeout "$@" >"/tmp/$log" 2>&1
		echo "pair-bench (a): $log exited $?"
		port=$((port + 1))
	}
	if want perftest && command -v ib_write_lat >/dev/null; then
		serve srv-ib-lat ib_write_lat -d $dev -R -p $port -s 64 -n $lat_iters
		for s in $sizes; do
			serve "srv-ib-bw-$s" ib_write_bw -d $dev -R -p $port -s "$s" -n "$(iters_for "$s")"
		done
	fi
	if want ucx && command -v ucx_perftest >/dev/null; then
		serve srv-ucx-lat env $ucx_env ucx_perftest -p $port
		for s in $sizes; do
			serve "srv-ucx-bw-$s" env $ucx_env ucx_perftest -p $port
		done
	fi
	if want tpbench; then
		serve srv-tp-rdma tools/tpbench pipe --listen "rdma://$TP_VM_ADDR:$port" --channel rdma
		serve srv-tp-tcp tools/tpbench pipe --listen "tcp://$TP_VM_ADDR:$port"
	fi
	if want coll; then
		coll_ranks 2 "$TP_VM_PEER" $coll_port hier /tmp/coll-hier
		echo "pair-bench (a): coll hier exited $?"
		coll_ranks 2 "$TP_VM_PEER" $((coll_port + 1)) flat /tmp/coll-flat
		echo "pair-bench (a): coll flat exited $?"
	fi
	exit 0
fi

# ---------------------------------------------------------------- VM b --

port=$base
failed=0
results=/tmp/bench-results
: >$results

emit() {
	echo "bench: $*"
	echo "$*" >>$results
}

# client LOG COMMAND...: run a client until its server answers (a refused
# or unanswered connect is retried for up to 60 s), at most $step_timeout s
# each time.  Returns the client's last exit status.
client() {
	log=$1
	shift
	tries=0
	while :; do
		timeout $step_timeout "$@" >"/tmp/$log" 2>&1
		st=$?
		[ $st -eq 0 ] && break
		[ $st -eq 124 ] && break
		# Not listening yet: rdma_cm rejects, UCX and TCP are refused.
		grep -qi -e refused -e reject -e 'unable to perform rdma_client' \
			-e 'connect.*fail' -e 'failed to connect' "/tmp/$log" || break
		tries=$((tries + 1))
		[ $tries -lt 120 ] || break
		sleep 0.5
	done
	port=$((port + 1))
	return $st
}

half_to_rtt() { awk -v v="$1" 'BEGIN { printf "%.2f", 2 * v }'; }
mib_to_gbps() { awk -v v="$1" 'BEGIN { printf "%.4f", v * 1048576 / 1e9 }'; }

if ! want perftest; then
	:
elif command -v ib_write_lat >/dev/null; then
	# Data line: #bytes #iterations t_min t_max t_typical t_avg t_stdev ...
	if client cli-ib-lat ib_write_lat -d $dev -R -p $port -s 64 -n $lat_iters "$TP_VM_PEER"; then
		line=$(awk '$1 == 64 && NF >= 6 { print; exit }' /tmp/cli-ib-lat)
		typ=$(echo "$line" | awk '{ print $5 }')
		avg=$(echo "$line" | awk '{ print $6 }')
		if [ -n "$typ" ]; then
			emit "tool=ib_write_lat metric=rtt_us size=64 iters=$lat_iters p50=$(half_to_rtt "$typ") avg=$(half_to_rtt "$avg")"
		else
			emit "tool=ib_write_lat unavailable: no result line"
		fi
	else
		emit "tool=ib_write_lat unavailable: exit status $st: $(tail -n 1 /tmp/cli-ib-lat)"
	fi
	sed 's/^/# /' /tmp/cli-ib-lat
	for s in $sizes; do
		n=$(iters_for "$s")
		# Data line: #bytes #iterations BW_peak BW_average MsgRate (MB = MiB)
		if client "cli-ib-bw-$s" ib_write_bw -d $dev -R -p $port -s "$s" -n "$n" "$TP_VM_PEER"; then
			bw=$(awk -v s="$s" '$1 == s && NF >= 4 { print $4; exit }' "/tmp/cli-ib-bw-$s")
			if [ -n "$bw" ]; then
				emit "tool=ib_write_bw metric=bw size=$s iters=$n gbps=$(mib_to_gbps "$bw")"
			else
				emit "tool=ib_write_bw size=$s unavailable: no result line"
			fi
		else
			emit "tool=ib_write_bw size=$s unavailable: exit status $st: $(tail -n 1 "/tmp/cli-ib-bw-$s")"
		fi
		sed 's/^/# /' "/tmp/cli-ib-bw-$s"
	done
else
	emit "tool=perftest unavailable: ib_write_lat not found (package perftest)"
fi

if ! want ucx; then
	:
elif command -v ucx_perftest >/dev/null; then
	# UCT: -x rc_verbs, RDMA WRITEs as ib_write_*; UCP: tag messages.
	if [ "$ucx_api" = uct ]; then
		lat_test="-t put_lat -x rc_verbs -d $dev:1"
		bw_test="-t put_bw -D zcopy -x rc_verbs -d $dev:1"
		tag="tool=ucx_perftest api=uct tl=rc_verbs"
	else
		lat_test="-t tag_lat"
		bw_test="-t tag_bw"
		tag="tool=ucx_perftest api=ucp tls=$ucx_tls"
	fi
	# Final: iterations typical_lat avg_lat overall_lat avg_bw overall_bw ...
	if client cli-ucx-lat env $ucx_env UCX_LOG_LEVEL=info ucx_perftest "$TP_VM_PEER" -p $port \
		$lat_test -s 64 -n $lat_iters; then
		set -- $(awk '$1 == "Final:" { $1 = ""; print; exit }' /tmp/cli-ucx-lat)
		lanes=$(sed -n 's/.*ep_cfg\[[0-9]*\]: tag(\([^)]*\)).*/\1/p' /tmp/cli-ucx-lat |
			head -n 1 | tr ' ' ',')
		emit "$tag metric=rtt_us size=64 iters=$lat_iters p50=$(half_to_rtt "$2") avg=$(half_to_rtt "$3") lanes=${lanes:-rc_verbs}"
	else
		emit "tool=ucx_perftest unavailable: exit status $st: $(grep -v '^[|+]' /tmp/cli-ucx-lat | tail -n 1)"
	fi
	grep -v -e 'UCX  INFO' /tmp/cli-ucx-lat | sed 's/^/# /'
	for s in $sizes; do
		n=$(iters_for "$s")
		if client "cli-ucx-bw-$s" env $ucx_env UCX_LOG_LEVEL=info ucx_perftest "$TP_VM_PEER" -p $port \
			$bw_test -s "$s" -n "$n"; then
			set -- $(awk '$1 == "Final:" { $1 = ""; print; exit }' "/tmp/cli-ucx-bw-$s")
			lanes=$(sed -n 's/.*ep_cfg\[[0-9]*\]: tag(\([^)]*\)).*/\1/p' "/tmp/cli-ucx-bw-$s" |
				head -n 1 | tr ' ' ',')
			emit "$tag metric=bw size=$s iters=$n gbps=$(mib_to_gbps "$6") lanes=${lanes:-rc_verbs}"
		else
			emit "tool=ucx_perftest size=$s unavailable: exit status $st: $(grep -v '^[|+]' "/tmp/cli-ucx-bw-$s" | tail -n 1)"
		fi
		grep -v -e 'UCX  INFO' "/tmp/cli-ucx-bw-$s" | sed 's/^/# /'
	done
else
	emit "tool=ucx_perftest unavailable: not found (apt-get install ucx-utils on the host)"
fi

# tpbench's table line: transport channel avg p50 p90 then GB/s per size.
tp_line() { # LOG TRANSPORT
	awk -v t="$2" '$1 == t && NF == 9 { print; exit }' "$1"
}
want tpbench || set --
for x in $(want tpbench && echo rdma tcp); do
	if [ $x = rdma ]; then
		set -- --channel rdma
	else
		set --
	fi
	if client "cli-tp-$x" tools/tpbench pipe --connect "$x://$TP_VM_PEER:$port" "$@" \
		--iters $lat_iters --bw-iters $tp_bw_iters; then
		set -- $(tp_line "/tmp/cli-tp-$x" $x)
		emit "tool=tpbench transport=$1 channel=$2 metric=rtt_us size=64 iters=$lat_iters p50=$4 avg=$3"
		i=6
		for s in $sizes; do
			eval "g=\${$i}"
			emit "tool=tpbench transport=$1 channel=$2 metric=bw size=$s iters=$tp_bw_iters gbps=$g"
			i=$((i + 1))
		done
	else
		emit "tool=tpbench transport=$x unavailable: exit status $st: $(tail -n 1 "/tmp/cli-tp-$x")"
		[ $x = rdma ] && failed=1
	fi
	sed 's/^/# /' "/tmp/cli-tp-$x"
done

# The world's collectives, two levels then flat (rank 0's lines).
for path in $(want coll && echo hier flat); do
	port=$coll_port
	[ $path = flat ] && port=$((coll_port + 1))
	if coll_ranks 0 "$TP_VM_ADDR" $port $path "/tmp/coll-$path"; then
		grep '^peer=tpu ' "/tmp/coll-$path" | while read -r line; do
			emit "tool=coll path=$path ${line#peer=tpu }"
		done
	else
		emit "tool=coll path=$path unavailable: $(grep -v '^peer=' "/tmp/coll-$path" | tail -n 1)"
		[ $path = hier ] && failed=1
	fi
	sed 's/^/# /' "/tmp/coll-$path"
done

# ------------------------------------------------------------- the table --

awk -v sizes="$sizes" '
function kv(line, key,    re, m) {
	re = "(^| )" key "=[^ ]*"
	if (!match(line, re))
		return ""
	m = substr(line, RSTART, RLENGTH)
	sub(/^ /, "", m)
	return substr(m, length(key) + 2)
}
/ unavailable: / { next }
kv($0, "tool") == "coll" { next }
{
	tool = kv($0, "tool")
	if (tool == "tpbench")
		tool = "tpbench-" kv($0, "transport") "/" kv($0, "channel")
	if (!(tool in seen)) { seen[tool] = 1; order[++n] = tool }
	if (kv($0, "metric") == "rtt_us")
		rtt[tool] = kv($0, "p50")
	else
		bw[tool, kv($0, "size")] = kv($0, "gbps")
}
function v(x) { return x == "" ? "-" : x }
function ratio(a, b) { return (a == "" || b == "" || b + 0 == 0) ? "-" : sprintf("%.2f", a / b) }
END {
	ns = split(sizes, sz, " ")
	printf "\n== the pipe between the two VMs against perftest and UCX on the same rxe devices\n"
	printf "   rtt: median round trip of 64 bytes (us); GB/s = 10^9 B/s per tensor size\n"
	printf "%-22s %9s %9s %9s %9s %9s\n", "tool", "rtt_us", "64KiB", "1MiB", "16MiB", "64MiB"
	for (i = 1; i <= n; i++) {
		t = order[i]
		printf "%-22s %9s", t, v(rtt[t])
		for (k = 1; k <= ns; k++)
			printf " %9s", v(bw[t, sz[k]])
		printf "\n"
	}
	tp = "tpbench-rdma/rdma"
	printf "\nratios (the pipe over rdma against each; bandwidth: higher is better, rtt: lower is better)\n"
	split("ib_write_lat ib_write_bw ucx_perftest tpbench-tcp", refs, " ")
	for (r = 1; r <= 4; r++) {
		ref = refs[r]
		if (ref == "tpbench-tcp") {
			for (t in seen)
				if (t ~ /^tpbench-tcp\//)
					ref = t
		}
		if (!(ref in seen))
			continue
		printf "%-22s", "tp-rdma / " ref
		if (ref == "ib_write_lat") {
			printf " %9s\n", ratio(rtt[tp], rtt[ref])
			continue
		}
		printf " %9s", ref == "ib_write_bw" ? "" : ratio(rtt[tp], rtt[ref])
		for (k = 1; k <= ns; k++)
			printf " %9s", ratio(bw[tp, sz[k]], bw[ref, sz[k]])
		printf "\n"
	}
}' $results
awk '
function kv(line, key,    re, m) {
	re = "(^| )" key "=[^ ]*"
	if (!match(line, re))
		return ""
	m = substr(line, RSTART, RLENGTH)
	sub(/^ /, "", m)
	return substr(m, length(key) + 2)
}
/ unavailable: / { next }
kv($0, "tool") == "coll" {
	k = kv($0, "coll") SUBSEP kv($0, "size")
	if (!(k in seen)) { seen[k] = 1; order[++n] = k }
	t[kv($0, "path"), k] = kv($0, "time_us")
	path[kv($0, "path")] = kv($0, "transport")
}
END {
	if (!n)
		exit
	printf "\n== the world across the two VMs, 4 ranks (2 per VM): two levels (path %s) against flat (path %s)\n", path["hier"], path["flat"]
	printf "%-16s %10s %12s %12s %10s\n", "collective", "bytes", "hier_us", "flat_us", "flat/hier"
	for (i = 1; i <= n; i++) {
		split(order[i], p, SUBSEP)
		h = t["hier", order[i]]
		f = t["flat", order[i]]
		printf "%-16s %10s %12s %12s %10s\n", p[1], p[2], h == "" ? "-" : h, f == "" ? "-" : f, (h == "" || f == "" || h + 0 == 0) ? "-" : sprintf("%.2f", f / h)
	}
}' $results
if grep -q ' unavailable: ' $results; then
	echo
	echo "unavailable:"
	grep ' unavailable: ' $results | sed 's/^/  /'
fi
echo "pair-bench: load average of the host is not visible here; the VMs are emulated (TCG), $(nproc) vCPU(s) each: compare ratios only"
exit $failed
