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

# Where the time goes, for the CI budget: minutes since the start.
elapsed() {
	printf '%d min %02d s after the start of make check' $((SECONDS / 60)) $((SECONDS % 60))
}

echo "== unit tests (host)"
$make --no-print-directory -C tests/unit run 2>&1 | tee "$logs/unit.log"
unit_status=${PIPESTATUS[0]}
echo "check: the unit tests ended $(elapsed)"

# The kernel matrix: KVER= picks one kernel, KVERS= a list, and by default
# every installed kernel that the VM can boot (Debian's 6.1 and 6.12).
if [ -n "${KVER:-}" ]; then
	kvers=$KVER
else
	kvers=${KVERS:-$(scripts/kernel-version.sh --all)}
fi
[ -n "$kvers" ] || { echo "check: no kernel to build for (run 'make deps')" >&2; exit 2; }
$make --no-print-directory -C tests/rdv >"$logs/rdv-build.log" 2>&1 || cat "$logs/rdv-build.log"
$make --no-print-directory -C tests/pipe >"$logs/pipe-build.log" 2>&1 || cat "$logs/pipe-build.log"
# Before the VMs: the VM pair runs two of them between its hosts.
$make --no-print-directory -s -C examples >"$logs/examples-build.log" 2>&1 || cat "$logs/examples-build.log"
# The pair's Python ranks (tests/vm/hier_python.py) import the bindings from build/python.
$make --no-print-directory -s python >"$logs/python-build.log" 2>&1 || cat "$logs/python-build.log"

# Each suite's result goes to its kernel's list (record), so that the
# summary keeps the kernels' order when their suites ran side by side.
record() {	# KVER NAME LOG STATUS
	printf '%s\t%s\t%s\n' "$2" "$3" "$4" >>"$logs/results-$1.tsv"
}

# The collectives' VM keeps both cores busy (forked workers that spin).
coll_vm_suite() {	# KVER MODULE
	local kver=$1 mod=$2

	echo "== collectives between processes, kmod channel (VM, $kver)"
	# tests/unit's coll lists: forked workers over shm, their pipes on the kmod
	# channel (a case asserts it), then over tcp on loopback (brought up first);
	# world_shm: the world's collectives over their shared segment beside the
	# module; xfer_kmod: one-sided transfers through the module's grants.
	KVER=$kver tests/vm/run.sh --name "check-coll-$kver" --module "$mod" \
		-e UNIT_ONLY=coll_dtype,coll,world_shm,xfer_kmod -- 'ip link set lo up && tests/unit/build/plain/unit_tests'
	record "$kver" "collectives (VM, $kver)" "build/vm/check-coll-$kver/guest.log" "$?"
}

# The suites that boot one VM each.  Under TCG such a VM keeps about half
# of the two cores busy (its tests sleep on timeouts, 9p round trips and
# each other), so the kernels' lists run side by side (TP_CHECK_VM_JOBS at
# a time, default 2); each list's output is printed whole when it ends.
# Every second list starts with the collectives, which the first runs
# last, so that the two busy runs overlap the other list's idle ones.
single_vm_suites() {	# KVER MODULE COLL_FIRST
	local kver=$1 mod=$2

	[ "$3" = 1 ] && coll_vm_suite "$kver" "$mod"
	echo "== selftests (VM, $kver)"
	# run.sh streams the guest's output and keeps it in build/vm/NAME/guest.log.
	KVER=$kver tests/vm/run.sh --name "check-$kver" --module "$mod" -- tests/selftests/run.sh
	record "$kver" "selftests (VM, $kver)" "build/vm/check-$kver/guest.log" "$?"

	echo "== rendezvous over every implementation (VM, $kver)"
	# The library's case list over inprocess, kmod (uring_cmd) and cma.
	# CUDA tensors too, with the stand-in driver (rdv_device.c).
	KVER=$kver tests/vm/run.sh --name "check-rdv-$kver" --module "$mod" \
		-e TPU_CUDA_DRIVER=tests/unit/build/libcuda_standin.so -- tests/rdv/rdv_test
	record "$kver" "rendezvous (VM, $kver)" "build/vm/check-rdv-$kver/guest.log" "$?"

	echo "== pipes between processes, kmod channel (VM, $kver)"
	KVER=$kver tests/vm/run.sh --name "check-pipe-$kver" --module "$mod" -- tests/pipe/pipe_vm_test
	record "$kver" "pipes (VM, $kver)" "build/vm/check-pipe-$kver/guest.log" "$?"

	echo "== CUDA tensors through dma-buf imports, stand-in driver (VM, $kver)"
	# The stand-in's dma-bufs are real udmabufs (6.12 has /dev/udmabuf; on 6.1
	# the list says so and skips); then a device that cannot export them; then
	# tpbench cuda over cuda_dmabuf as a correctness check (not a measurement).
	KVER=$kver tests/vm/run.sh --name "check-dmabuf-$kver" --module "$mod" \
		-e UNIT_ONLY=cuda_dmabuf -e TPU_CUDA_DRIVER=tests/unit/build/libcuda_standin.so -- \
		'tests/unit/build/plain/unit_tests && TPU_CUDA_STANDIN_DMABUF=0 tests/unit/build/plain/unit_tests &&
		 tests/cuda_standin/tpbench-check.sh --dmabuf'
	record "$kver" "cuda dma-buf, stand-in (VM, $kver)" "build/vm/check-dmabuf-$kver/guest.log" "$?"

	echo "== rdma transport, pipes and one-sided transfers over soft-RoCE in one VM (VM, $kver)"
	# Both ends on one rxe device bound to a dummy netdev (tests/vm/rdma-single.sh).
	KVER=$kver tests/vm/run.sh --name "check-rdma-$kver" -e UNIT_ONLY=xport_rdma,pipe_rdma,rdma_port,xfer_rdma \
		-- tests/vm/rdma-single.sh tests/unit/build/plain/unit_tests
	record "$kver" "rdma, soft-RoCE (VM, $kver)" "build/vm/check-rdma-$kver/guest.log" "$?"

	[ "$3" = 1 ] || coll_vm_suite "$kver" "$mod"
}

# The suites that boot two VMs (both cores busy): one at a time.
pair_vm_suites() {	# KVER MODULE
	local kver=$1 mod=$2 pair_status xfer_status fail_status down_status

	echo "== two VMs over soft-RoCE (VM pair, $kver)"
	KVER=$kver tests/vm/pair.sh --name "check-pair-$kver" --module "$mod" -- tests/vm/pair-smoke.sh
	pair_status=$?
	record "$kver" "two VMs, soft-RoCE ($kver)" "build/vm/check-pair-$kver-b/guest.log" "$pair_status"

	echo "== a pipe over rdma://, a world and one-sided transfers between two VMs (VM pair, $kver)"
	KVER=$kver tests/vm/pair.sh --name "check-xfer-$kver" -- tests/vm/pair-xfer.sh
	xfer_status=$?
	record "$kver" "two VMs, rdma pipe and world ($kver)" "build/vm/check-xfer-$kver-b/guest.log" "$xfer_status"

	echo "== failures between two VMs over rdma:// (VM pair, $kver)"
	KVER=$kver tests/vm/pair.sh --name "check-fail-$kver" -- tests/vm/pair-fail.sh
	fail_status=$?
	record "$kver" "two VMs, rdma failures ($kver)" "build/vm/check-fail-$kver-b/guest.log" "$fail_status"

	echo "== a peer that vanishes: its link down, then its power off (VM pair, $kver)"
	# VM a reports; VM b powers itself off on purpose.
	KVER=$kver tests/vm/pair.sh --name "check-down-$kver" --may-power-off b -- tests/vm/pair-down.sh
	down_status=$?
	record "$kver" "two VMs, a vanishing rdma peer ($kver)" "build/vm/check-down-$kver-a/guest.log" "$down_status"
}

built=()
for kver in $kvers; do
	rm -f "$logs/results-$kver.tsv"
	kdir=/lib/modules/$kver/build
	mod=build/kmod/$kver/tensorpipe.ko
	echo "== tensorpipe.ko for $kver"
	mkdir -p "build/kmod/$kver"
	if $make --no-print-directory -C kmod KDIR="$kdir" >"$logs/kmod-$kver.log" 2>&1 &&
	   cp kmod/tensorpipe.ko "$mod"; then
		build_status=0
	else
		build_status=1
		cat "$logs/kmod-$kver.log"
	fi
	# W=1 warnings fail the build as surely as errors.
	if grep -q 'warning:' "$logs/kmod-$kver.log"; then
		grep 'warning:' "$logs/kmod-$kver.log"
		build_status=1
	fi
	echo "ok 1 - tensorpipe.ko builds W=1 clean for $kver" >"$logs/kmod-$kver.tap"
	[ $build_status -eq 0 ] || sed -i 's/^ok/not ok/' "$logs/kmod-$kver.tap"
	record "$kver" "module build ($kver)" "$logs/kmod-$kver.tap" "$build_status"
	[ $build_status -eq 0 ] && built+=("$kver")
done

vm_jobs=${TP_CHECK_VM_JOBS:-2}
[ ${#built[@]} -gt 1 ] || vm_jobs=1
running=0
started=0
[ "$vm_jobs" -gt 1 ] &&
	echo "== the single-VM suites of ${built[*]}, $vm_jobs kernels at a time (each kernel's output follows when it ends)"
for kver in "${built[@]}"; do
	if [ "$vm_jobs" -le 1 ]; then
		single_vm_suites "$kver" "build/kmod/$kver/tensorpipe.ko" 0
		continue
	fi
	if [ $running -ge "$vm_jobs" ]; then
		wait -n
		running=$((running - 1))
	fi
	single_vm_suites "$kver" "build/kmod/$kver/tensorpipe.ko" $((started % 2)) \
		>"$logs/vm-$kver.out" 2>&1 &
	running=$((running + 1))
	started=$((started + 1))
done
wait
if [ "$vm_jobs" -gt 1 ]; then
	for kver in "${built[@]}"; do
		cat "$logs/vm-$kver.out"
	done
fi
echo "check: the single-VM suites ended $(elapsed)"
for kver in "${built[@]}"; do
	pair_vm_suites "$kver" "build/kmod/$kver/tensorpipe.ko"
done
echo "check: the VM pairs ended $(elapsed)"

results=()
for kver in $kvers; do
	while IFS=$'\t' read -r suite log status; do
		results+=("$suite" "$log" "$status")
	done <"$logs/results-$kver.tsv"
done

echo "== pipes between processes, cma channel (host)"
tests/pipe/pipe_vm_test 2>&1 | tee "$logs/pipe-host.log"
pipe_host_status=${PIPESTATUS[0]}

echo "== tpbench cuda against the stand-in CUDA driver, a correctness check (host)"
$make --no-print-directory -s -C tools tpbench >"$logs/tools-build.log" 2>&1 || cat "$logs/tools-build.log"
tests/cuda_standin/tpbench-check.sh 2>&1 | tee "$logs/tpbench-cuda.log"
tpbench_cuda_status=${PIPESTATUS[0]}

echo "== tpbench's host probe: the cross-CPU cache-line round trip (host)"
tests/tools/host-check.sh 2>&1 | tee "$logs/tpbench-host.log"
tpbench_host_status=${PIPESTATUS[0]}

echo "== examples: a two-process rendezvous and a pipe echo server (host)"
$make --no-print-directory -s -C examples run 2>&1 | tee "$logs/examples.log"
examples_status=${PIPESTATUS[0]}

echo "== python: the tpu_user bindings with NumPy and PyTorch (host)"
tests/python/run.sh 2>&1 | tee "$logs/python.log"
python_status=${PIPESTATUS[0]}

echo "== checkpatch --strict and kernel-doc on the module and the uapi header"
# With the newest installed kernel source's rules, whatever make exported.
lint_tarball=$(ls /usr/src/linux-source-*.tar.xz 2>/dev/null | sort -V | tail -n 1)
scripts/lint-kernel.sh "$lint_tarball" 2>&1 | tee "$logs/lint.log"
lint_status=${PIPESTATUS[0]}

echo "== layers: lib/'s include graph, its Makefile and file lists (host)"
scripts/check-layers.py 2>&1 | tee "$logs/layers.log"
layers_status=${PIPESTATUS[0]}

echo "== abi: libtpu_user.so against its baseline, abidiff (host)"
scripts/check-abi.sh 2>&1 | tee "$logs/abi.log"
abi_status=${PIPESTATUS[0]}

echo "== packaging: dkms build per kernel, make install, Debian packages, lintian (host)"
TP_KVERS="$kvers" scripts/check-packaging.sh 2>&1 | tee "$logs/packaging.log"
packaging_status=${PIPESTATUS[0]}

echo "== fuzz: the pipe wire decoder (host, bounded time)"
tests/fuzz/run.sh "${TP_FUZZ_SECONDS:-20}" 2>&1 | tee "$logs/fuzz.log"
fuzz_status=${PIPESTATUS[0]}

echo "check: the host suites ended $(elapsed)"

# .ci/run ran make check-debug first: its suites count in these totals too
# (TP_DEBUG_RESULTS names its results file; missing, that run failed early).
debug_results=()
if [ -n "${TP_DEBUG_RESULTS:-}" ]; then
	if [ -r "$TP_DEBUG_RESULTS" ]; then
		while IFS=$'\t' read -r name log status; do
			debug_results+=("$name" "$log" "$status")
		done <"$TP_DEBUG_RESULTS"
	else
		debug_results+=("make check-debug (no results: it stopped early)" /dev/null 1)
	fi
fi

echo "== results"
exec tests/summary.sh \
	"${debug_results[@]}" \
	"unit tests (host)" "$logs/unit.log" "$unit_status" \
	"${results[@]}" \
	"pipes (host)" "$logs/pipe-host.log" "$pipe_host_status" \
	"tpbench cuda, stand-in (host)" "$logs/tpbench-cuda.log" "$tpbench_cuda_status" \
	"tpbench host probe (host)" "$logs/tpbench-host.log" "$tpbench_host_status" \
	"examples (host)" "$logs/examples.log" "$examples_status" \
	"python (host)" "$logs/python.log" "$python_status" \
	"checkpatch, kernel-doc" "$logs/lint.log" "$lint_status" \
	"layers (host)" "$logs/layers.log" "$layers_status" \
	"abi (host)" "$logs/abi.log" "$abi_status" \
	"packaging (host)" "$logs/packaging.log" "$packaging_status" \
	"fuzz (host)" "$logs/fuzz.log" "$fuzz_status"
