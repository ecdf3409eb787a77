#!/bin/sh
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# In both VMs of tests/vm/pair.sh, after link-setup.sh: failures between
# two hosts over rdma:// end in a clear error, promptly, and the surviving
# side connects again.  VM a serves pipe_echo, SIGKILLs the server 2 s after
# b's pipe opened (in the middle of b's stream of tensors up to 4 MiB), and
# serves again.
# VM b reports TAP: a port nobody listens on is refused; the stream to the
# killed server fails with an error (not a hang) within BOUND seconds of
# its start; a new pipe to the restarted server echoes intact.

port=7712
bound=30

if [ "$TP_VM_ROLE" = a ]; then
	TPU_LOG=debug examples/pipe_echo serve "rdma://$TP_VM_ADDR:$port" >/tmp/echo1.log 2>&1 &
	server=$!
	# Killed once b's pipe is open and its stream has run for 2 s.
	for _ in $(seq 300); do
		grep -q 'open, transport rdma' /tmp/echo1.log && break
		sleep 0.1
	done
	sleep 2
	kill -9 "$server"
	wait "$server" 2>/dev/null
	sleep 2
	examples/pipe_echo serve "rdma://$TP_VM_ADDR:$port" >/tmp/echo2.log 2>&1 &
	server=$!
	# Serve until b is done (it reconnects within its bound), then stop.
	sleep $bound
	kill "$server" 2>/dev/null
	wait "$server" 2>/dev/null
	exit 0
fi

now() { cut -d' ' -f1 /proc/uptime; }
elapsed() { echo "$1 $2" | awk '{ printf "%.1f", $2 - $1 }'; }

echo "TAP version 13"
echo "1..3"
failed=0

t0=$(now)
if examples/pipe_echo ping "rdma://$TP_VM_PEER:1" 1 >/tmp/refused.log 2>&1; then
	echo "not ok 1 - a port nobody listens on is refused"
	failed=1
elif grep -q refused /tmp/refused.log; then
	echo "ok 1 - a port nobody listens on is refused, in $(elapsed "$t0" "$(now)") s"
else
	echo "not ok 1 - a port nobody listens on is refused"
	failed=1
fi
sed 's/^/# /' /tmp/refused.log

# The stream: started as soon as the server answers, killed under it.
t0=$(now)
tries=0
while :; do
	timeout $bound examples/pipe_echo ping "rdma://$TP_VM_PEER:$port" 100000 >/tmp/stream.log 2>&1
	st=$?
	grep -q refused /tmp/stream.log || break
	tries=$((tries + 1))
	[ $tries -lt 20 ] || break
	sleep 0.2
	t0=$(now)
done
took=$(elapsed "$t0" "$(now)")
if [ $st -ne 0 ] && [ $st -ne 124 ] && grep -q 'message [0-9]*: ' /tmp/stream.log &&
   ! grep -q refused /tmp/stream.log; then
	echo "ok 2 - a server killed mid-stream fails the stream with an error after $took s (bound $bound s)"
else
	echo "not ok 2 - a server killed mid-stream fails the stream with an error (exit $st after $took s)"
	failed=1
fi
sed 's/^/# /' /tmp/stream.log

tries=0
until examples/pipe_echo ping "rdma://$TP_VM_PEER:$port" 4 >/tmp/again.log 2>&1; do
	tries=$((tries + 1))
	[ $tries -lt $bound ] || break
	sleep 1
done
if grep -q 'intact over rdma' /tmp/again.log; then
	echo "ok 3 - a new pipe to the restarted server echoes intact"
else
	echo "not ok 3 - a new pipe to the restarted server"
	failed=1
fi
sed 's/^/# /' /tmp/again.log
exit $failed
