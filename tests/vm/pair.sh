#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Run a command in two VMs joined by a private link, as two hosts: VM "a"
# and VM "b" (one vCPU each, software emulation unless KVM works), each with
# a virtio NIC on a QEMU stream netdev over a unix socket (no host bridge,
# no root networking), addresses 10.77.0.1 and 10.77.0.2 on that link only,
# and soft-RoCE (rxe0) on top unless --no-rdma.
#
#   tests/vm/pair.sh [--module FILE] [--name NAME] [--timeout SEC]
#                    [--no-rdma] [--may-power-off ROLE] -- COMMAND...
#
# COMMAND runs in both, from the repository directory, after
# tests/vm/link-setup.sh, with TP_VM_ROLE (a or b), TP_VM_ADDR and
# TP_VM_PEER set; it decides by role what to do.  Each VM's output is
# prefixed with its role; its files are in build/vm/NAME-a and NAME-b.  The
# exit status is 0 only when both VMs passed (see run.sh for what fails a
# VM).  --may-power-off ROLE: that VM may power itself off (a test of a
# peer that vanishes): it then passes when its kernel logged the power-down
# and the other VM passed.  TP_VM_MEM defaults to 1G per VM here.
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
here="$repo/tests/vm"
name=pair
args=()
setup_args=
may_power_off=
while [ $# -gt 0 ]; do
	case "$1" in
	-m|--module)  args+=(--module "${2:?}"); shift 2 ;;
	-n|--name)    name=${2:?}; shift 2 ;;
	-t|--timeout) args+=(--timeout "${2:?}"); shift 2 ;;
	--no-rdma)    setup_args=--no-rdma; shift ;;
	--may-power-off) may_power_off=${2:?}; shift 2 ;;
	--)           shift; break ;;
	*)            echo "usage: see the header of $0" >&2; exit 2 ;;
	esac
done
[ $# -gt 0 ] || { echo "pair.sh: no command" >&2; exit 2; }
command="tests/vm/link-setup.sh $setup_args && { $*; }"

sock_dir=$(mktemp -d "${TMPDIR:-/tmp}/tp-pair.XXXXXX")
trap 'rm -rf "$sock_dir"; kill $pid_a $pid_b 2>/dev/null' EXIT
sock=$sock_dir/link.sock

run_vm() {
	local role=$1 addr=$2 peer=$3 link=$4
	TP_VM_SMP=${TP_VM_SMP:-1} TP_VM_MEM=${TP_VM_MEM:-1G} \
	"$here/run.sh" "${args[@]}" --name "$name-$role" "$link" "$sock" \
		--env "TP_VM_ROLE=$role" --env "TP_VM_ADDR=$addr" \
		--env "TP_VM_PEER=$peer" -- "$command" 2>&1 | sed -u "s/^/[$role] /"
	return "${PIPESTATUS[0]}"
}

# A process and everything it started (run.sh, its QEMU, the sed).
kill_tree() { # PID
	local child children
	children=$(pgrep -P "$1")
	kill "$1" 2>/dev/null || true
	for child in $children; do
		kill_tree "$child"
	done
}

# Both VMs, once; sets status_a and status_b.
run_pair() {
	rm -f "$sock"
	run_vm a 10.77.0.1 10.77.0.2 --link-listen &
	pid_a=$!
	# The connecting VM needs the listener's socket to exist.
	for _ in $(seq 100); do
		[ -S "$sock" ] && break
		sleep 0.1
	done
	if [ ! -S "$sock" ]; then
		echo "pair.sh: VM a did not open $sock" >&2
		wait $pid_a
		exit 1
	fi
	run_vm b 10.77.0.2 10.77.0.1 --link-connect &
	pid_b=$!

	# A VM whose kernel died outside the tests (75) took the link with it: its
	# partner would only wait out its own deadlines, so it goes at once.
	local first status
	wait -n -p first $pid_a $pid_b
	status=$?
	if [ "$first" = "$pid_a" ]; then
		status_a=$status
		[ $status_a -eq 75 ] && kill_tree $pid_b
		wait $pid_b
		status_b=$?
	else
		status_b=$status
		[ $status_b -eq 75 ] && kill_tree $pid_a
		wait $pid_a
		status_a=$?
	fi
}

run_pair
# A kernel that died before /init, or of the emulator's stray single-step
# trap (75, see run.sh), died of a cause outside our code, and took the
# link with it: both VMs boot again, up to three times in all, as run.sh
# does for one.
for _ in 1 2; do
	[ $status_a -eq 75 ] || [ $status_b -eq 75 ] || break
	echo "pair.sh: a kernel died of a cause outside the tests (VM a exited $status_a," \
	     "VM b $status_b; its reason is above); booting the pair once more"
	run_pair
done
# run.sh's own build directory (TP_VM_OUT, build/vm by default).
powered_off() { # ROLE
	grep -q 'reboot: Power down' "${TP_VM_OUT:-$repo/build/vm}/$name-$1/serial.log" 2>/dev/null
}
if [ "$may_power_off" = a ] && [ $status_a -ne 0 ] && powered_off a; then
	echo "pair.sh: VM a powered itself off, as its test asked"
	status_a=0
elif [ "$may_power_off" = b ] && [ $status_b -ne 0 ] && powered_off b; then
	echo "pair.sh: VM b powered itself off, as its test asked"
	status_b=0
fi
echo "pair.sh: VM a exited $status_a, VM b exited $status_b"
[ $status_a -eq 0 ] && [ $status_b -eq 0 ]
