#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Exit 0 when the first complaint in a VM's serial log is a single-step
# trap that nothing asked for: "WARNING: ... exc_debug_kernel" with the
# #DB frame below it.  Our VMs run no kprobes, kgdb or debugger, so kernel
# code never sets the trap flag; QEMU's software emulation (TCG) now and
# then delivers one anyway, with a corrupt EFLAGS in the trapped frame
# (seen once in soft-RoCE's worker, in a VM without our module), and
# panic_on_warn stops the VM.  run.sh boots such a VM again; under KVM it
# does not (the caller checks the accelerator).  Exit 1 otherwise.
#
#   tests/vm/stray-step-trap.sh SERIAL_LOG
set -uo pipefail

log=${1:?usage: stray-step-trap.sh SERIAL_LOG}

first=$(grep -n -a -E 'WARNING:|BUG:|Oops|KASAN|UBSAN|general protection|Kernel panic|rcu: INFO:|soft lockup|hard LOCKUP|blocked for more than' "$log" |
	grep -v -F -e 'RETBleed: WARNING:' -e 'Spectre V2 : WARNING:' | head -n 1) || exit 1
[ -n "$first" ] || exit 1
line=${first%%:*}
[[ $first == *"WARNING: "*" at arch/x86/kernel/traps.c:"*" exc_debug_kernel+"* ]] || exit 1
# The report's stack shows the trap's own frame within the next 40 lines.
tail -n "+$line" "$log" | head -n 40 | grep -q -a -F '<#DB>'
