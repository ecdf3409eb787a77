#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# `make check-debug`: the module's VM suites on a debug kernel (KASAN,
# lockdep, DEBUG_ATOMIC_SLEEP, PROVE_RCU, DEBUG_OBJECTS, kmemleak, failslab
# and fail_page_alloc; see tests/vm/debug-kernel.config), built once per
# machine by scripts/debug-kernel.sh.  Any report of those checkers in the
# serial log fails its run (tests/vm/check-serial-log.sh), kmemleak is
# asked after each suite, and fault_test injects allocation failures.
# Ends with the summary line of tests/summary.sh.
#
#   scripts/check-debug.sh
#
# TP_FAULT_ITERS (default 2000) and TP_FAULT_SEED: the fault-injection run.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 2
logs=build/check-debug
mkdir -p "$logs"
make=${MAKE:-make}

# The suites' results for make check's totals (.ci/run: TP_DEBUG_RESULTS),
# written at the end: none left from an earlier run.
rm -f "$logs/results"

echo "== the debug kernel (built once per machine)"
started=$(date +%s)
if ! kdir=$(scripts/debug-kernel.sh); then
	echo "check-debug: no debug kernel" >&2
	exit 1
fi
echo "check-debug: $kdir ($(( $(date +%s) - started )) s)"

echo "== tensorpipe.ko for the debug kernel"
mod=build/kmod/debug/tensorpipe.ko
mkdir -p build/kmod/debug
if $make --no-print-directory -C kmod KDIR="$kdir" >"$logs/kmod.log" 2>&1 &&
   ! grep -q 'warning:' "$logs/kmod.log" && cp kmod/tensorpipe.ko "$mod"; then
	echo "ok 1 - tensorpipe.ko builds W=1 clean for the debug kernel" >"$logs/kmod.tap"
	build_status=0
else
	cat "$logs/kmod.log"
	echo "not ok 1 - tensorpipe.ko builds W=1 clean for the debug kernel" >"$logs/kmod.tap"
	build_status=1
fi
$make --no-print-directory -s -C tests/rdv >"$logs/rdv-build.log" 2>&1 || cat "$logs/rdv-build.log"
$make --no-print-directory -s -C tests/pipe >"$logs/pipe-build.log" 2>&1 || cat "$logs/pipe-build.log"
$make --no-print-directory -s -C examples >"$logs/examples-build.log" 2>&1 || cat "$logs/examples-build.log"
# pair-xfer.sh's CUDA points: the unit binary (reader and writer) and the stand-in driver.
$make --no-print-directory -s -C tests/unit "$PWD/tests/unit/build/plain/unit_tests" \
	"$PWD/tests/unit/build/libcuda_standin.so" >"$logs/unit-build.log" 2>&1 ||
	cat "$logs/unit-build.log"

results=("module build (debug)" "$logs/kmod.tap" "$build_status")

# One suite in one VM; its exit status goes to $logs/status-SUITE.
debug_suite() {
	local suite=$1 cmd

	case $suite in
	selftests) cmd=tests/selftests/run.sh ;;
	rdv)       cmd=tests/rdv/rdv_test ;;
	pipe)      cmd=tests/pipe/pipe_vm_test ;;
	esac
	echo "== $suite (VM, debug kernel)"
	tests/vm/run.sh --name "debug-$suite" --module "$mod" \
		--env "TP_FAULT_ITERS=$TP_FAULT_ITERS" \
		--env "TP_FAULT_SEED=${TP_FAULT_SEED:-1}" -- \
		"$cmd; st=\$?; tests/vm/kmemleak.sh || st=1; exit \$st"
	echo $? >"$logs/status-$suite"
}

if [ $build_status -eq 0 ]; then
	export TP_VM_KDIR=$kdir
	# KASAN and lockdep make everything slower under emulation.
	export TP_VM_TIMEOUT=${TP_VM_TIMEOUT:-2400}
	export TP_FAULT_ITERS=${TP_FAULT_ITERS:-2000}
	# The selftests' VM beside the rendezvous's and then the pipes' (each
	# keeps about half of the two cores busy under TCG); each line's output
	# is printed whole when it ends.
	echo "== selftests, rdv and pipe (VM, debug kernel), two VMs at a time (the output of each follows when it ends)"
	rm -f "$logs"/status-*
	debug_suite selftests >"$logs/vm-selftests.out" 2>&1 &
	{ debug_suite rdv; debug_suite pipe; } >"$logs/vm-rdv-pipe.out" 2>&1 &
	wait
	cat "$logs/vm-selftests.out" "$logs/vm-rdv-pipe.out"
	for suite in selftests rdv pipe; do
		results+=("$suite (VM, debug kernel)" "build/vm/debug-$suite/guest.log" \
			  "$(cat "$logs/status-$suite" 2>/dev/null || echo 1)")
	done
	echo "== two VMs over soft-RoCE (VM pair, debug kernel)"
	# rxe and the virtio NIC under KASAN and lockdep; both guests scan for leaks.
	tests/vm/pair.sh --name debug-pair --module "$mod" -- \
		"tests/vm/pair-smoke.sh; st=\$?; tests/vm/kmemleak.sh || st=1; exit \$st"
	results+=("two VMs, soft-RoCE (debug kernel)" "build/vm/debug-pair-b/guest.log" "$?")
	echo "== a pipe over rdma:// and a world between two VMs (VM pair, debug kernel)"
	# Under emulation on a shared machine the four-rank worlds took 37 s
	# idle and 91 s beside two busy loops: their waits and bounds times 4.
	tests/vm/pair.sh --name debug-xfer --module "$mod" -- \
		"TP_PAIR_NO_PYTHON=1 TPU_TEST_TIME_SCALE=4 tests/vm/pair-xfer.sh; st=\$?; tests/vm/kmemleak.sh || st=1; exit \$st"
	results+=("two VMs, rdma pipe and world (debug kernel)" "build/vm/debug-xfer-b/guest.log" "$?")
fi

echo "== results"
# NAME<tab>LOG<tab>STATUS per suite: .ci/run has make check total them
# with its own, so that a failure here shows in the tail of CI's log.
for ((i = 0; i < ${#results[@]}; i += 3)); do
	printf '%s\t%s\t%s\n' "${results[i]}" "${results[i + 1]}" "${results[i + 2]}"
done >"$logs/results"
exec tests/summary.sh "${results[@]}"
