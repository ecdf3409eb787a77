#!/bin/sh
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Runs inside one VM (tests/vm/run.sh), as root: soft-RoCE on a dummy
# network device (rxe cannot bind lo), both ends of every test using the
# one rxe device through its address, then COMMAND with
# TPU_TEST_RDMA_ADDR set to that address and TPU_TEST_RDMA_DEV to the
# netdev (which the tests may take down and up again).  Where this kernel
# cannot give soft-RoCE it says why and reports one skipped TAP point
# instead.
#
#   tests/vm/rdma-single.sh COMMAND...

set -u
addr=10.77.0.1
dev=tprdma0

say() {
	echo "rdma-single: $*"
}

# One skipped point: tests/summary.sh counts it as skipped, not as a suite
# that printed nothing.
skip() {
	say "$*"
	echo "ok 1 - soft-RoCE in one VM # SKIP $*"
	echo "1..1"
	exit 0
}

modprobe dummy || skip "no dummy network device in $(uname -r)"
ip link add "$dev" type dummy || skip "cannot add a dummy device"
# MTU 9000: rxe's active MTU becomes 4096.
ip link set "$dev" mtu 9000
ip addr add "$addr/24" dev "$dev" && ip link set "$dev" up ||
	skip "cannot address $dev"
modprobe rdma_rxe || skip "no rdma_rxe in $(uname -r)"
modprobe rdma_ucm || skip "no rdma_ucm in $(uname -r)"
rdma link add rxe0 type rxe netdev "$dev" || skip "cannot add rxe0 on $dev"
say "$(rdma link show rxe0/1 2>&1)"

TPU_TEST_RDMA_ADDR=$addr
TPU_TEST_RDMA_DEV=$dev
export TPU_TEST_RDMA_ADDR TPU_TEST_RDMA_DEV
"$@"
status=$?
rdma link delete rxe0 2>/dev/null
exit $status
