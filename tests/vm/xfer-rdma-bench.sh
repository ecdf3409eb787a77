#!/bin/sh
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Runs inside one VM under tests/vm/rdma-single.sh (soft-RoCE rxe0 on a
# dummy netdev at $TPU_TEST_RDMA_ADDR): tpbench xfer over the rdma backend
# against perftest's ib_write_bw and ib_read_bw with the same block size
# and queue-pair count, in the same run, then a table of the ratios at
# batches of 64 and more (the goal is 0.9x at 64 KiB).
#
#   tests/vm/run.sh -- tests/vm/rdma-single.sh tests/vm/xfer-rdma-bench.sh
#
# QPS (4), BLOCKS (4096 65536 1048576), BATCHES (1,16,64,256), MIB (64 per rep).
set -u
qps=${QPS:-4}
blocks=${BLOCKS:-"4096 65536 1048576"}
batches=${BATCHES:-1,16,64,256}
mib=${MIB:-64}
addr=${TPU_TEST_RDMA_ADDR:?run under tests/vm/rdma-single.sh}
out=$(mktemp -d)
port=18600

echo "xfer-rdma-bench: $(uptime)"
command -v ib_write_bw >/dev/null || { echo "xfer-rdma-bench: no perftest"; exit 1; }

# perftest, one block size: GB/s (its Gb/s over 8), the same bytes per QP as ours.
perf() {
	op=$1 size=$2
	iters=$(( (mib << 20) / size / qps ))
	[ "$iters" -lt 200 ] && iters=200
	port=$((port + 1))
	# Server, then client to it; a client that came too early is rejected
	# and its server may give up with it: the pair tries again.  Each
	# gives up after 120 s.
	tries=0
	while :; do
		timeout 120 "ib_${op}_bw" -d rxe0 -R -F -q "$qps" -s "$size" -n "$iters" \
			-p "$port" --report_gbits >"$out/srv" 2>&1 &
		srv=$!
		sleep 3
		timeout 120 "ib_${op}_bw" -d rxe0 -R -F -q "$qps" -s "$size" -n "$iters" \
			-p "$port" --report_gbits "$addr" >"$out/cli" 2>&1 && break
		kill $srv 2>/dev/null
		wait $srv
		tries=$((tries + 1))
		[ $tries -ge 5 ] && break
		port=$((port + 1))
	done
	wait $srv
	grep -q "^ *$size " "$out/cli" || sed 's/^/xfer-rdma-bench: perftest: /' "$out/cli" "$out/srv" >&2
	awk -v s="$size" '$1 == s { printf "%.4f", $4 / 8; found = 1 } END { if (!found) printf "nan" }' \
		"$out/cli"
}

# Per block size, ours then perftest's, so that both see the same load.
: >"$out/table"
status=0
for b in $blocks; do
	TPU_XFER_RDMA_QPS=$qps tools/tpbench xfer --backend rdma --mem 128 --reps 3 --mib "$mib" \
		--blocks "$b" --batches "$batches" | tee "$out/xfer" || status=1
	for op in write read; do
		OP=$(echo $op | tr a-z A-Z)
		ib=$(perf "$op" "$b")
		echo "xfer-rdma-bench: ib_${op}_bw -q $qps -s $b: $(grep "^ *$b " "$out/cli")"
		awk -v op="$OP" -v b="$b" -v ib="$ib" '
			$1 == op && $2 == b {
				gb = $2 * $3 / ($8 * 1000)	# from the time per batch: more digits
				r = ib > 0 ? gb / ib : 0
				printf "%-5s %8s %6s %8.4f %8.4f %6.2f\n", op, b, $3, gb, ib, r
			}' "$out/xfer" >>"$out/table"
	done
done
echo "xfer-rdma-bench: $qps queue pairs; GB/s; ib_*_bw's average with the same block and QPs"
printf '%-5s %8s %6s %8s %8s %6s\n' op block batch xfer ib_bw ratio
cat "$out/table"
echo "xfer-rdma-bench: $(uptime)"
rm -rf "$out"
exit $status
