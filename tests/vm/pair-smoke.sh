#!/bin/sh
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# In both VMs of tests/vm/pair.sh, after link-setup.sh: VM a serves rping
# (rdma_cm, RC queue pairs over soft-RoCE), VM b pings it with data
# verification and reports TAP.  Proves the two-host test bed end to end.

if [ "$TP_VM_ROLE" = a ]; then
	exec rping -s -a "$TP_VM_ADDR" -C 20 -V -S 4096
fi
echo "TAP version 13"
echo "1..2"
echo "ok 1 - the link and rxe0 came up in both VMs"
sleep 2
if rping -c -a "$TP_VM_PEER" -C 20 -V -S 4096 >/tmp/rping.log 2>&1; then
	echo "ok 2 - 20 rping rounds of 4 KiB over soft-RoCE, data verified"
else
	echo "not ok 2 - rping over soft-RoCE"
	sed 's/^/# /' /tmp/rping.log
	exit 1
fi
