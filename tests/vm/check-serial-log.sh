#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Fail (exit 1, printing the lines) when a VM's serial log shows the kernel
# complaining.  The boot arguments make most of these fatal already, but a
# warning printed while a test still passes must fail the run as well.
#
#   tests/vm/check-serial-log.sh SERIAL_LOG
set -euo pipefail

log=${1:?usage: check-serial-log.sh SERIAL_LOG}

patterns=(
	'BUG:'				# BUG(), NULL dereference, sleeping in atomic, ...
	'Oops'
	'WARNING:'			# WARN_ON() and lockdep
	'KASAN'
	'UBSAN'
	'general protection'
	'Call Trace'			# any other stack dump
	'Kernel panic'
	'rcu: INFO:'			# RCU stalls
	'soft lockup'
	'hard LOCKUP'
	'blocked for more than'		# hung tasks
)

# Boot-time notes about the emulated CPU's speculation flaws say WARNING too,
# depending on the CPU model; they are about QEMU, not about the code tested.
benign=(
	'RETBleed: WARNING:'
	'Spectre V2 : WARNING:'
)

matches=$(grep -n -a -F "${patterns[@]/#/-e}" "$log" | grep -v -F "${benign[@]/#/-e}" || true)
[ -z "$matches" ] && exit 0
# Stack dumps are long; the first lines of each report say what happened.
head -n 40 <<<"$matches"
exit 1
