#!/bin/sh
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Runs inside each VM of a pair (tests/vm/pair.sh), as root: brings up the
# virtio NIC of the link with TP_VM_ADDR, waits until TP_VM_PEER answers,
# then puts soft-RoCE on the NIC (rdma_rxe, device rxe0) and loads rdma_ucm
# for rdma_cm users.  Prints what it did; exits non-zero, saying why, when a
# step fails.
#
#   tests/vm/link-setup.sh [--no-rdma]

set -u
rdma=1
[ "${1:-}" = "--no-rdma" ] && rdma=0

say() {
	echo "link-setup ($TP_VM_ROLE): $*"
}

fail() {
	say "$*"
	exit 1
}

modprobe virtio_net 2>/dev/null || true	# built in on the debug kernel
nic=
for i in 1 2 3 4 5 6 7 8 9 10; do
	for d in /sys/class/net/*; do
		[ -e "$d/device" ] && nic=$(basename "$d") && break
	done
	[ -n "$nic" ] && break
	sleep 0.5
done
[ -n "$nic" ] || fail "no NIC appeared (virtio_net)"

# MTU 9000: rxe's active MTU becomes 4096, which moves large messages faster.
ip link set "$nic" mtu 9000 || fail "cannot set the MTU of $nic"
ip addr add "$TP_VM_ADDR/24" dev "$nic" || fail "cannot address $nic"
ip link set "$nic" up || fail "cannot bring $nic up"

tries=0
until busybox ping -c 1 -W 1 "$TP_VM_PEER" >"/tmp/ping.log" 2>&1; do
	tries=$((tries + 1))
	[ $tries -lt 60 ] || fail "$TP_VM_PEER does not answer on $nic: $(tail -n 2 /tmp/ping.log)"
done
say "$nic is $TP_VM_ADDR, $TP_VM_PEER answers"

[ $rdma -eq 1 ] || exit 0
# A kernel with them built in (the debug kernel) has no module to load.
modprobe rdma_rxe 2>/dev/null || [ -d /sys/module/rdma_rxe ] ||
	say "rdma_rxe is not a module here: taking it as built in"
modprobe rdma_ucm 2>/dev/null || [ -c /dev/infiniband/rdma_cm ] ||
	fail "no rdma_ucm: /dev/infiniband/rdma_cm is missing"
rdma link add rxe0 type rxe netdev "$nic" || fail "cannot add rxe0 on $nic"
say "soft-RoCE: $(rdma link show rxe0/1 2>&1)"
