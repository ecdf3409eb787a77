#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Run a command inside a throw-away QEMU VM booted from the installed
# distribution kernel, with the host's root shared read-only over 9p (so the
# repository and every host binary and library are simply there).
#
#   tests/vm/run.sh [options] [--] COMMAND...
#
# COMMAND is shell code run by /bin/sh from the repository directory, as root;
# several words are joined with spaces, as ssh does.
#
# Options:
#   -m, --module FILE   insmod FILE before COMMAND and rmmod it afterwards;
#                       a module that will not unload fails the run
#   -n, --name NAME     keep this run's files in build/vm/NAME (default: run)
#   -t, --timeout SEC   kill the VM after SEC seconds (default: 1200)
#   -i, --interactive   serial console on this terminal (Ctrl-A x quits)
#   --link-listen SOCK  a virtio NIC joined to another VM through the unix
#   --link-connect SOCK socket SOCK: one VM listens, the other connects
#                       (no host bridge, no root networking; see pair.sh)
#   -e, --env NAME=VAL  also set NAME in the guest command's environment
#                       (values without spaces)
#
# Environment: KVER or KDIR (which kernel; default as for the build),
# TP_VM_KERNEL (kernel image, default /boot/vmlinuz-KVER), TP_VM_KDIR (a
# kernel build tree to boot, such as make check-debug's: its bzImage, with
# virtio and 9p built in), TP_VM_MEM (2G),
# TP_VM_SMP (2), TP_VM_ACCEL (kvm or tcg; default: kvm when a probe boot
# under KVM works, see accel.sh), TP_VM_CPU,
# TP_VM_APPEND (extra kernel arguments), TP_VM_OUT (build/vm).
#
# The command's output streams here from a second 9p share; the kernel's
# serial console goes to build/vm/NAME/serial.log.  The exit status is the
# command's, or non-zero when the VM crashed, timed out, or the kernel logged
# a BUG, Oops, WARNING or stack trace; 75 when a linked VM's kernel died
# before /init or of the emulator's stray single-step trap (see pair.sh).
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
here="$repo/tests/vm"

usage() {
	sed -n '/^#   tests\/vm\/run.sh/,/^# a BUG/s/^# \{0,1\}//p' "$0" >&2
	exit 2
}

module=
name=run
timeout_s=${TP_VM_TIMEOUT:-1200}
interactive=0
link=
guest_env=
while [ $# -gt 0 ]; do
	case "$1" in
	--link-listen)    link="server=on,addr.type=unix,addr.path=${2:?}"; shift 2 ;;
	--link-connect)   link="server=off,addr.type=unix,addr.path=${2:?}"; shift 2 ;;
	-e|--env)         guest_env="$guest_env ${2:?}"; shift 2 ;;
	-m|--module)      module=${2:?}; shift 2 ;;
	-n|--name)        name=${2:?}; shift 2 ;;
	-t|--timeout)     timeout_s=${2:?}; shift 2 ;;
	-i|--interactive) interactive=1; shift ;;
	-h|--help)        usage ;;
	--)               shift; break ;;
	-*)               usage ;;
	*)                break ;;
	esac
done
[ $# -gt 0 ] || [ $interactive -eq 1 ] || usage
command="$*"
[ -n "$command" ] || command='exec bash || exec sh'

# init passes paths through word splitting; keep them simple.
case "$repo" in
*[[:space:]]*) echo "tests/vm: the repository path must not contain spaces: $repo" >&2; exit 2 ;;
esac

if [ -n "$module" ] && [ ! -f "$module" ]; then
	echo "tests/vm: module $module not built (run 'make')" >&2
	exit 2
fi
# Boot the kernel the module was built for: its vermagic names it.  A kernel
# installed meanwhile must not change what this run boots.
if [ -n "$module" ]; then
	kver=$(modinfo -F vermagic "$module" 2>/dev/null | cut -d' ' -f1)
	if [ -z "$kver" ]; then
		echo "tests/vm: cannot read the vermagic of $module" >&2
		exit 2
	fi
	if [ -n "${KVER:-}" ] && [ "$KVER" != "$kver" ]; then
		echo "tests/vm: $module is built for $kver, not KVER=$KVER" >&2
		exit 2
	fi
else
	kver=${KVER:-$("$repo/scripts/kernel-version.sh" "${KDIR:-}")}
fi
# TP_VM_KDIR: a kernel built here (make check-debug's), booted from its tree.
if [ -n "${TP_VM_KDIR:-}" ]; then
	kernel=${TP_VM_KERNEL:-$TP_VM_KDIR/arch/x86/boot/bzImage}
else
	kernel=${TP_VM_KERNEL:-/boot/vmlinuz-$kver}
fi
if [ ! -r "$kernel" ]; then
	echo "tests/vm: cannot read kernel image $kernel for $kver (install linux-image-$kver, or run 'make deps')" >&2
	exit 2
fi

# Why a VM at all: say it once, in a form a newcomer can act on.
explain_vm() {
	local running reason
	running=$(uname -r)
	if [ ! -d "/lib/modules/$running" ]; then
		reason="the running kernel ($running) has no /lib/modules/$running, so it cannot load modules"
	elif [ "$running" != "$kver" ]; then
		reason="the module is built for $kver but the running kernel is $running"
	else
		reason="this keeps the host kernel out of reach of a crashing test module"
	fi
	echo "tests/vm: $reason;"
	echo "tests/vm: booting $kernel in QEMU ($accel, ${smp} CPUs, $mem) and running there instead;"
	echo "tests/vm: $accel because $accel_reason."
}

# KVM only where a probe boot proved it works (tests/vm/accel.sh).
accel_verdict=$("$here/accel.sh" "$kernel") || exit 2
accel=${accel_verdict%%$'\n'*}
accel_reason=${accel_verdict#*$'\n'}
# TCG runs "rep movsb" a byte at a time, so a guest kernel that trusts ERMS or
# FSRM copies to and from user space at about 40 MB/s; without them it uses
# "rep movsq" and copies about six times faster.  Everything else TCG can do
# stays on.  Figures from inside the VM are for ratios within one run only.
cpu=${TP_VM_CPU:-max,-erms,-fsrm}
[ "$accel" = kvm ] && cpu=${TP_VM_CPU:-host}
mem=${TP_VM_MEM:-2G}
smp=${TP_VM_SMP:-2}

out=${TP_VM_OUT:-$repo/build/vm}/$name
rm -rf "$out"
mkdir -p "$out"
out=$(cd "$out" && pwd)

printf '%s\n' "$command" >"$out/cmd.sh"
# The guest sees the module through the output share wherever it was built
# (the guest's /tmp, for one, is its own).
if [ -n "$module" ]; then
	cp "$module" "$out/"
	guest_module=/run/tp-out/$(basename "$module")
fi
: >"$out/guest.log"
{
	echo "TP_REPO='$repo'"
	echo "TP_MODULE='${guest_module:-}'"
	echo "TP_INTERACTIVE=$interactive"
	# Under emulation the tests' watchdogs (alarm) allow for a slower CPU.
	[ "$accel" = tcg ] && guest_env="$guest_env TP_TEST_EMULATED=1"
	echo "TP_GUEST_ENV='${guest_env# }'"
	echo "TP_TERM='${TERM:-linux}'"
} >"$out/settings"
TP_VM_KDIR=${TP_VM_KDIR:-} "$here/make-initramfs.sh" "$kver" "$out/settings" "$out/initramfs.cpio"

# oops=panic and panic_on_warn turn any kernel complaint into a panic, and
# panic=-1 with -no-reboot turns the panic into a QEMU exit without a status.
# TCG is slow and the host may be busy: give RCU a longer stall timeout so a
# stall report means a real livelock, not emulation speed.
append="console=ttyS0 oops=panic panic_on_warn=1 panic=-1 rcupdate.rcu_cpu_stall_timeout=60"
append+=" ${TP_VM_APPEND:-}"

# shellcheck disable=SC2054 # the commas separate QEMU sub-options
qemu=(
	qemu-system-x86_64
	-accel "$accel" -cpu "$cpu" -smp "$smp" -m "$mem"
	-kernel "$kernel" -initrd "$out/initramfs.cpio" -append "$append"
	-display none -vga none -no-reboot
	-device isa-debug-exit,iobase=0xf4,iosize=0x04
	# multidevs=remap keeps inode numbers unique across host file systems.
	-virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"
	-virtfs "local,path=$out,mount_tag=tpout,security_model=none"
)
if [ -n "$link" ]; then
	# A MAC of our own per end, derived from the side, so the two differ.
	case "$link" in server=on*) mac=52:54:00:7e:00:01 ;; *) mac=52:54:00:7e:00:02 ;; esac
	qemu+=(-netdev "stream,id=link0,$link" -device "virtio-net-pci,netdev=link0,mac=$mac")
else
	qemu+=(-nic none)
fi

explain_vm

if [ $interactive -eq 1 ]; then
	qemu+=(-chardev "stdio,id=con,mux=on,signal=off,logfile=$out/serial.log"
		-serial chardev:con -mon chardev=con)
	"${qemu[@]}" || true
	exit "$(cat "$out/status" 2>/dev/null || echo 1)"
fi

qemu+=(-serial "file:$out/serial.log" -monitor none)

# One boot of the VM: sets qemu_status and elapsed.
boot() {
	started=$(date +%s)
	# Bash makes background jobs ignore SIGINT; stop the VM ourselves on exit.
	timeout -k 10 "$timeout_s" "${qemu[@]}" 2>"$out/qemu.log" &
	vm_pid=$!
	trap 'kill $vm_pid 2>/dev/null || true' EXIT
	tail -n +1 -s 0.2 -f --pid=$vm_pid "$out/guest.log" &
	tail_pid=$!
	set +e
	wait $vm_pid
	qemu_status=$?
	set -e
	wait $tail_pid 2>/dev/null || true
	trap - EXIT
	elapsed=$(( $(date +%s) - started ))
}

# A kernel that died in its own boot, before it started /init, ran neither
# the module nor the command: the debug kernel under TCG does so now and
# then in its early interrupt set-up (3 boots of about 20 in one CI run).
# That boot's report is printed and kept, and the VM boots again, up to
# three boots in all; a third such death fails the run as any other.
# A VM linked to another cannot boot again alone (its peer's end of the
# link went with the first QEMU): it exits 75 and pair.sh boots the pair
# again.
died_early() {
	! grep -q 'Run /init as init process' "$out/serial.log" && [ ! -s "$out/status" ] &&
		[ $qemu_status -ne 124 ] && [ $qemu_status -ne 137 ]
}
# The other death that is the emulator's, not the tested code's: under TCG
# a single-step trap that nothing asked for (tests/vm/stray-step-trap.sh),
# whose WARNING panic_on_warn makes fatal.  Booted again once per run; its
# report and the command's output so far are kept, and printed.
stray_step_retried=0
stray_step() {
	[ "$accel" = tcg ] && [ $stray_step_retried -eq 0 ] && [ ! -s "$out/status" ] &&
		"$here/stray-step-trap.sh" "$out/serial.log"
}
boot
for n in 1 2; do
	if died_early; then
		why="the kernel died while booting, before /init (nothing of ours ran)"
	elif stray_step; then
		stray_step_retried=1
		why="the emulator (TCG) trapped the kernel in a single step nothing asked for (a WARNING in exc_debug_kernel; see tests/vm/stray-step-trap.sh)"
	else
		break
	fi
	mv "$out/serial.log" "$out/serial.boot$n.log"
	mv "$out/guest.log" "$out/guest.boot$n.log"
	: >"$out/guest.log"
	echo "tests/vm: $why;" \
	     "its logs are $out/serial.boot$n.log and $out/guest.boot$n.log:"
	"$here/check-serial-log.sh" "$out/serial.boot$n.log" | sed 's/^/  /' || true
	if [ -n "$link" ]; then
		echo "tests/vm: linked to another VM: the pair boots again, not this VM alone"
		exit 75
	fi
	echo "tests/vm: booting once more"
	boot
done

# Judge the run: every way it can go wrong gets its own message.  Success
# needs both the status file (written over 9p) and an odd QEMU exit code
# (isa-debug-exit): QEMU failing to start also exits 1.
failed=1
reason=
guest_status=
[ -s "$out/status" ] && guest_status=$(cat "$out/status")
if [ $qemu_status -eq 124 ] || [ $qemu_status -eq 137 ]; then
	reason="timed out after ${timeout_s}s"
elif [ $((qemu_status & 1)) -eq 0 ] || [ -z "$guest_status" ]; then
	reason="the VM stopped without the guest reporting a status (kernel panic, or QEMU exit status $qemu_status)"
	guest_status=
elif [ "$guest_status" != 0 ]; then
	reason="the guest command exited with status $guest_status"
else
	failed=0
fi

if ! kernel_errors=$("$here/check-serial-log.sh" "$out/serial.log"); then
	failed=1
	echo "tests/vm: the kernel reported errors (from $out/serial.log):"
	# shellcheck disable=SC2001 # indents every line, not a substitution
	sed 's/^/  /' <<<"$kernel_errors"
	reason=${reason:-"kernel errors in the serial log"}
fi

if [ $failed -ne 0 ]; then
	echo "tests/vm: FAILED after ${elapsed}s: $reason"
	echo "tests/vm: logs: $out/guest.log (command), $out/serial.log (kernel)"
	if [ -z "$kernel_errors" ] && [ -z "$guest_status" ]; then
		echo "tests/vm: last lines of the serial log:"
		tail -n 15 "$out/serial.log" 2>/dev/null | sed 's/^/  /' || true
		if [ -s "$out/qemu.log" ]; then
			echo "tests/vm: QEMU said:"
			sed 's/^/  /' "$out/qemu.log"
		fi
	fi
	# The guest's status when it has one, so callers can tell test failures apart.
	if [ -n "$guest_status" ] && [ "$guest_status" != 0 ]; then
		exit "$guest_status"
	fi
	exit 1
fi
echo "tests/vm: passed in ${elapsed}s (logs in $out)"
