#!/bin/sh
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# In both VMs of tests/vm/pair.sh, after link-setup.sh: tensors between two
# hosts through the library.  VM a serves pipe_echo on rdma:// and is rank 0
# of a two-rank world formed from torchrun's variables; VM b pings it (every
# byte checked) and is rank 1: the world's store runs on a, and its
# rendezvous passes a tensor around the ring of the two hosts, checked by
# rank 0.  Then CUDA tensors between the hosts, with the tests' stand-in
# driver on both: a writes device and host memory over rdma://, b reads
# each where a suggested (device or host) and checks every byte; the
# channel must be cuda_staged (IPC and the module's dma-bufs are one host's).
# Last, tpbench cuda between the hosts (a listens, b connects): every
# device pair through cuda_staged over rdma://, every byte checked; with
# the stand-in a correctness check, not a measurement.  Then one-sided
# transfers (lib/xfer) over the rdma backend: a's agent listens on its
# address and hands its blob over a socket; b READs 10000 random pieces
# and WRITEs striped batches with notifications, which a checks.
# Then a world of four ranks, two on each VM (ranks 0 and 1 on a, 2 and 3
# on b), whose collectives run in two levels (a segment per VM, its
# leader over tcp to the other's): every collective checked against a
# reference (two types, the sum and the max, lengths 0, 1, odd and past
# the segment's slots), then a second world whose rank 3 exits: every
# other rank, on both VMs, fails its collective within 3 s.  Last, the
# same four ranks in Python (tests/vm/hier_python.py): the World's
# collectives and the torch backend's take the two levels too (not with
# TP_PAIR_NO_PYTHON set: the debug kernel's run, which is about the module).
# TPU_TEST_TIME_SCALE (default 1) multiplies the four-rank worlds' waits
# and bounds, the 3 s included, and the xfer pair's: the debug kernel's
# run, emulated on a shared machine, sets it.
# b reports TAP; a's exit status says whether its side held.

port=7711
cuda_port=7730
bench_port=7740
xfer_port=7750
standin=tests/unit/build/libcuda_standin.so
world="WORLD_SIZE=2 LOCAL_WORLD_SIZE=1 LOCAL_RANK=0 MASTER_PORT=7720"
hier="WORLD_SIZE=4 LOCAL_WORLD_SIZE=2"
scale=${TPU_TEST_TIME_SCALE:-1}

# Two ranks of the four-rank world on this VM (@1: first rank, @2: the
# store's address, @3: its port), each running the command @5...; both
# logs to @4.
two_ranks() {
	local first=$1 addr=$2 port=$3 log=$4 pids="" p lr st=0

	shift 4
	for lr in 0 1; do
		env $hier LOCAL_RANK=$lr RANK=$((first + lr)) MASTER_ADDR="$addr" \
			MASTER_PORT="$port" timeout $((300 * scale)) "$@" >"$log.$lr" 2>&1 &
		pids="$pids $!"
	done
	for p in $pids; do
		wait "$p" || st=1
	done
	cat "$log.0" "$log.1" >"$log"
	return $st
}

# The unit binary's world ranks (@4: "check" or "dies"; logs to @5).
hier_ranks() {
	two_ranks "$1" "$2" "$3" "$5" env TPU_TEST_WORLD_HIER="$4" tests/unit/build/plain/unit_tests
}

# The same world in Python (tests/vm/hier_python.py; logs to @4).
py_ranks() {
	two_ranks "$1" "$2" "$3" "$4" env PYTHONPATH=build/python /usr/bin/python3 \
		tests/vm/hier_python.py
}

if [ "$TP_VM_ROLE" = a ]; then
	examples/pipe_echo serve "rdma://$TP_VM_ADDR:$port" >/tmp/echo.log 2>&1 &
	server=$!
	# Stops when b's tpbench says goodbye; two minutes at most.
	TPU_CUDA_DRIVER=$standin timeout 120 tools/tpbench cuda \
		--listen "rdma://$TP_VM_ADDR:$bench_port" >/tmp/bench.log 2>&1 &
	bench=$!
	TPU_XFER_ADDR=$TP_VM_ADDR TPU_TEST_XFER_TARGET="$TP_VM_ADDR:$xfer_port" \
		timeout 900 tests/unit/build/plain/unit_tests >/tmp/xfer-target.log 2>&1 &
	xfer=$!
	env $world RANK=0 MASTER_ADDR="$TP_VM_ADDR" examples/world_hello
	st=$?
	# Each step that fails says so: only b's log is in the summary.
	[ $st = 0 ] || echo "pair-xfer (a): world_hello exited $st"
	kill "$server" 2>/dev/null
	wait "$server" 2>/dev/null
	# b's reader may not listen yet: a writer that b's reader did not take
	# tries again; one it took (exit status 10 and above) is final.
	tries=0
	until TPU_CUDA_DRIVER=$standin TPU_TEST_CUDA_WRITER="rdma://$TP_VM_PEER:$cuda_port" \
		tests/unit/build/plain/unit_tests >/tmp/cuda-writer.log 2>&1; do
		wst=$?
		tries=$((tries + 1))
		if [ $wst -ge 10 ] || [ $tries -ge 60 ]; then
			echo "pair-xfer (a): the cuda writer exited $wst (try $tries)"
			cat /tmp/cuda-writer.log
			st=1
			break
		fi
		sleep 1
	done
	if ! wait "$bench"; then
		echo "pair-xfer (a): tpbench cuda --listen failed"
		cat /tmp/bench.log
		st=1
	fi
	wait "$xfer" || { echo "pair-xfer (a): the xfer target exited $?"; st=1; }
	cat /tmp/xfer-target.log
	hier_ranks 0 "$TP_VM_ADDR" 7760 check /tmp/hier.log ||
		{ echo "pair-xfer (a): the two-level ranks (check) failed"; cat /tmp/hier.log; st=1; }
	hier_ranks 0 "$TP_VM_ADDR" 7761 dies /tmp/hier-dies.log ||
		{ echo "pair-xfer (a): the two-level ranks (dies) failed"; cat /tmp/hier-dies.log; st=1; }
	if [ -z "${TP_PAIR_NO_PYTHON:-}" ]; then
		py_ranks 0 "$TP_VM_ADDR" 7770 /tmp/hier-py.log ||
			{ echo "pair-xfer (a): the Python ranks failed"; cat /tmp/hier-py.log; st=1; }
	fi
	exit $st
fi

echo "TAP version 13"
echo "1..8"
failed=0
tries=0
until examples/pipe_echo ping "rdma://$TP_VM_PEER:$port" 16 >/tmp/ping.log 2>&1; do
	tries=$((tries + 1))
	if [ $tries -ge 30 ] || ! grep -q "refused" /tmp/ping.log; then
		break
	fi
	sleep 1
done
if grep -q 'intact over rdma' /tmp/ping.log; then
	echo "ok 1 - a pipe between the two hosts over rdma:// echoes 16 tensors intact"
else
	echo "not ok 1 - a pipe between the two hosts over rdma://"
	failed=1
fi
sed 's/^/# /' /tmp/ping.log
if env $world RANK=1 MASTER_ADDR="$TP_VM_PEER" examples/world_hello >/tmp/world.log 2>&1; then
	echo "ok 2 - a world of the two hosts from torchrun's variables passes a tensor around"
else
	echo "not ok 2 - a world of the two hosts from torchrun's variables"
	failed=1
fi
sed 's/^/# /' /tmp/world.log
# The reader's own points, as a subtest of point 3.
TPU_CUDA_DRIVER=$standin TPU_TEST_CUDA_READER="rdma://$TP_VM_ADDR:$cuda_port" \
	tests/unit/build/plain/unit_tests >/tmp/cuda-reader.log 2>&1
cuda_st=$?
sed 's/^/    /' /tmp/cuda-reader.log
if [ $cuda_st = 0 ]; then
	echo "ok 3 - CUDA tensors (stand-in driver) from the other host over rdma://, every byte in place"
else
	echo "not ok 3 - CUDA tensors (stand-in driver) from the other host over rdma://"
	failed=1
fi
TPU_CUDA_DRIVER=$standin tools/tpbench cuda --connect "rdma://$TP_VM_PEER:$bench_port" \
	--size 1M --iters 3 >/tmp/bench.log 2>&1
bench_st=$?
sed 's/^/# /' /tmp/bench.log
if [ $bench_st = 0 ] && [ "$(grep -c 'cuda_staged  *cuda_staged .*all correct' /tmp/bench.log)" = 3 ]; then
	echo "ok 4 - tpbench cuda between the hosts: three device pairs through cuda_staged, every byte right"
else
	echo "not ok 4 - tpbench cuda between the hosts (exit $bench_st)"
	failed=1
fi
# The requester's own points, as a subtest of point 5.
TPU_TEST_XFER_REQUESTER="$TP_VM_PEER:$xfer_port" tests/unit/build/plain/unit_tests \
	>/tmp/xfer-req.log 2>&1
xfer_st=$?
sed 's/^/    /' /tmp/xfer-req.log
if [ $xfer_st = 0 ]; then
	echo "ok 5 - one-sided transfers to the other host on the rdma backend, every byte as the reference"
else
	echo "not ok 5 - one-sided transfers to the other host on the rdma backend"
	failed=1
fi
# How long each world took (the debug kernel's run is slow): in its line.
t0=$(date +%s)
if hier_ranks 2 "$TP_VM_PEER" 7760 check /tmp/hier.log; then
	echo "ok 6 - four ranks, two on each host: every collective in two levels, checked ($(( $(date +%s) - t0 )) s)"
else
	echo "not ok 6 - four ranks, two on each host: collectives in two levels ($(( $(date +%s) - t0 )) s)"
	failed=1
fi
sed 's/^/# /' /tmp/hier.log
t0=$(date +%s)
if hier_ranks 2 "$TP_VM_PEER" 7761 dies /tmp/hier-dies.log; then
	echo "ok 7 - a rank that exits on this host fails the others on both hosts within $((3 * scale)) s ($(( $(date +%s) - t0 )) s in all)"
else
	echo "not ok 7 - a rank that exits on this host fails the others on both hosts ($(( $(date +%s) - t0 )) s in all)"
	failed=1
fi
sed 's/^/# /' /tmp/hier-dies.log
if [ -n "${TP_PAIR_NO_PYTHON:-}" ]; then
	echo "ok 8 - four ranks in Python # SKIP TP_PAIR_NO_PYTHON (the debug kernel's run: no module code in it)"
	: >/tmp/hier-py.log
elif py_ranks 2 "$TP_VM_PEER" 7770 /tmp/hier-py.log; then
	echo "ok 8 - the same four ranks in Python: the World's and the torch backend's collectives in two levels"
else
	echo "not ok 8 - four ranks in Python: the World's and the torch backend's collectives in two levels"
	failed=1
fi
sed 's/^/# /' /tmp/hier-py.log
exit $failed
