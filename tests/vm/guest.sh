#!/bin/sh
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Runs inside the test VM, chrooted into the host's (read-only) root, from
# init.  Loads the module under test, runs the command that run.sh stored in
# $TP_VM_OUT/cmd.sh from the repository directory, and unloads the module
# again: a module that will not unload after the run leaked a reference,
# which fails the run like a failed test.

cd "$TP_REPO" || exit 125

module_name=
if [ -n "$TP_MODULE" ]; then
	module_name=$(modinfo -F name "$TP_MODULE") || exit 126
	if ! insmod "$TP_MODULE"; then
		echo "tp-vm: insmod $TP_MODULE failed"
		exit 126
	fi
fi

sh "$TP_VM_OUT/cmd.sh"
status=$?

if [ -n "$module_name" ] && ! rmmod "$module_name"; then
	echo "tp-vm: rmmod $module_name failed after the run (leaked reference?)"
	[ $status -eq 0 ] && status=127
fi
exit $status
