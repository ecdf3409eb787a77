#!/bin/sh
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# A world formed under a real launcher: Open MPI's mpirun starts 4 ranks of
# examples/world_hello on this host, which pass a tensor around the ring
# and all-reduce one as a collective group, with no set-up of their own.
# Optional: skipped, with the reason, when mpirun is not installed
# (Debian: openmpi-bin).  Prints TAP.  usage: world_mpirun.sh TOP
set -u
top=$1
echo "1..1"
if ! command -v mpirun >/dev/null 2>&1; then
	echo "ok 1 - world_and_collective_group_form_under_mpirun_np_4 # SKIP mpirun not installed (apt-get install openmpi-bin)"
	exit 0
fi
if ! make -s -C "$top/examples" world_hello >/dev/null 2>&1; then
	echo "not ok 1 - world_and_collective_group_form_under_mpirun_np_4"
	echo "#   examples/world_hello does not build"
	exit 1
fi
# --allow-run-as-root: CI runs as root; --oversubscribe: fewer cores than ranks;
# oob_tcp_if_include: mpirun's own connections on loopback only.
out=$(timeout 120 mpirun --allow-run-as-root --oversubscribe -np 4 \
	--mca oob_tcp_if_include lo "$top/examples/world_hello" 2>&1)
rc=$?
if [ $rc -eq 0 ] && echo "$out" | grep -q "the token came back" &&
   [ "$(echo "$out" | grep -c 'all-reduce of .* as expected')" -eq 4 ]; then
	echo "ok 1 - world_and_collective_group_form_under_mpirun_np_4"
	echo "$out" | sed 's/^/# /'
	exit 0
fi
echo "not ok 1 - world_and_collective_group_form_under_mpirun_np_4"
echo "$out" | sed 's/^/#   /'
exit 1
