#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Decide how QEMU runs the test VM: KVM when it demonstrably boots a guest,
# TCG (software emulation) otherwise.  A /dev/kvm node proves nothing: on
# some hosts QEMU aborts ("failed to set MSR") or the guest hangs before the
# kernel prints a line.  So KVM is tried once with a short boot of KERNEL
# (no root file system: the kernel panics, which is the success signal) and
# a deadline; the verdict is cached until the host reboots.
#
#   tests/vm/accel.sh KERNEL
#
# Prints two lines: "kvm" or "tcg", then the reason in one sentence.
# TP_VM_ACCEL=kvm|tcg forces the answer without a probe.
# TP_VM_KVM_PROBE_TIMEOUT: seconds the probe boot may take (default 20).
set -uo pipefail

kernel=${1:?usage: accel.sh KERNEL}

case "${TP_VM_ACCEL:-}" in
kvm|tcg)
	echo "$TP_VM_ACCEL"
	echo "TP_VM_ACCEL=$TP_VM_ACCEL forces it"
	exit 0 ;;
"") ;;
*)
	echo "tests/vm: TP_VM_ACCEL must be kvm or tcg, not '$TP_VM_ACCEL'" >&2
	exit 2 ;;
esac

if [ ! -w /dev/kvm ]; then
	echo tcg
	echo "/dev/kvm is absent or not writable"
	exit 0
fi

cache_root=/var/cache/tensorpipe
{ mkdir -p "$cache_root" 2>/dev/null && [ -w "$cache_root" ]; } ||
	cache_root=${XDG_CACHE_HOME:-$HOME/.cache}/tensorpipe
mkdir -p "$cache_root"
boot_id=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null || echo unknown)
qemu_version=$(qemu-system-x86_64 --version 2>/dev/null | head -n 1)
key=$(printf '%s\n%s\n%s\n' "$boot_id" "$qemu_version" "$kernel" | md5sum | cut -c1-16)
verdict=$cache_root/kvm-probe-$key

if [ -s "$verdict" ]; then
	cat "$verdict"
	exit 0
fi

limit=${TP_VM_KVM_PROBE_TIMEOUT:-20}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# No initrd and no root: a healthy guest boots to "VFS: Unable to mount root
# fs" and panics, and panic=-1 with -no-reboot makes QEMU exit.
# The braces keep bash's own "Aborted" job report out of the output.
{ timeout -k 5 "$limit" qemu-system-x86_64 -accel kvm -cpu host -smp 1 -m 256M \
	-kernel "$kernel" -append "console=ttyS0 panic=-1" \
	-display none -vga none -nic none -no-reboot -monitor none \
	-serial "file:$work/serial.log" >"$work/qemu.log" 2>&1; } 2>/dev/null
status=$?

if grep -q 'Kernel panic' "$work/serial.log" 2>/dev/null; then
	result=kvm
	reason="a probe boot under KVM reached the kernel's root mount"
elif [ $status -eq 124 ] || [ $status -eq 137 ]; then
	result=tcg
	if [ -s "$work/serial.log" ]; then
		reason="a probe boot under KVM stalled after the kernel started (no panic within ${limit}s)"
	else
		reason="a probe boot under KVM printed nothing within ${limit}s"
	fi
else
	result=tcg
	said=$(grep -m1 -v '^$' "$work/qemu.log" 2>/dev/null)
	reason="a probe boot under KVM failed (QEMU exit status $status${said:+: $said})"
fi
# Two VMs may start at once (make check runs some side by side): each
# writes its own file, and the rename makes either verdict whole.
printf '%s\n%s\n' "$result" "$reason" | tee "$verdict.$$"
mv "$verdict.$$" "$verdict"
