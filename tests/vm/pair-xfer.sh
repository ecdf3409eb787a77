#!/bin/sh
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# In both VMs of tests/vm/pair.sh, after link-setup.sh: tensors between two
# hosts through the library.  VM a serves pipe_echo on rdma:// and is rank 0
# of a two-rank world formed from torchrun's variables; VM b pings it (every
# byte checked) and is rank 1: the world's store runs on a, and its
# rendezvous passes a tensor around the ring of the two hosts, checked by
# rank 0.  b reports TAP; a's exit status says whether its side held.

port=7711
world="WORLD_SIZE=2 LOCAL_WORLD_SIZE=1 LOCAL_RANK=0 MASTER_PORT=7720"

if [ "$TP_VM_ROLE" = a ]; then
	examples/pipe_echo serve "rdma://$TP_VM_ADDR:$port" >/tmp/echo.log 2>&1 &
	server=$!
	env $world RANK=0 MASTER_ADDR="$TP_VM_ADDR" examples/world_hello
	st=$?
	kill "$server" 2>/dev/null
	wait "$server" 2>/dev/null
	exit $st
fi

echo "TAP version 13"
echo "1..2"
failed=0
tries=0
until examples/pipe_echo ping "rdma://$TP_VM_PEER:$port" 16 >/tmp/ping.log 2>&1; do
	tries=$((tries + 1))
	if [ $tries -ge 30 ] || ! grep -q "refused" /tmp/ping.log; then
		break
	fi
	sleep 1
done
if grep -q 'intact over rdma' /tmp/ping.log; then
	echo "ok 1 - a pipe between the two hosts over rdma:// echoes 16 tensors intact"
else
	echo "not ok 1 - a pipe between the two hosts over rdma://"
	failed=1
fi
sed 's/^/# /' /tmp/ping.log
if env $world RANK=1 MASTER_ADDR="$TP_VM_PEER" examples/world_hello >/tmp/world.log 2>&1; then
	echo "ok 2 - a world of the two hosts from torchrun's variables passes a tensor around"
else
	echo "not ok 2 - a world of the two hosts from torchrun's variables"
	failed=1
fi
sed 's/^/# /' /tmp/world.log
exit $failed
