#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# tpbench cuda against the stand-in driver: every device pair and channel
# between two processes over shm and tcp, every byte checked.  A
# correctness check (the stand-in is no GPU), printed as TAP.  The writer
# fills its tensor with cuMemcpyHtoD from pageable memory and writes it with
# stream NULL; the stand-in lands those bytes late on the NULL stream, as
# the driver may, so a channel that does not wait for stream 0 shows wrong
# bytes (as cuda_ipc did on an H200 before the fix).  With
# --dmabuf: every pair through cuda_dmabuf over shm instead, which needs
# the module and /dev/udmabuf (the VM on 6.12; skipped elsewhere, saying why).
#
#   tests/cuda_standin/tpbench-check.sh [--dmabuf] [TPBENCH [STANDIN]]
set -uo pipefail

dmabuf=0
if [ "${1:-}" = --dmabuf ]; then
	dmabuf=1
	shift
fi

top=$(cd "$(dirname "$0")/../.." && pwd)
tpbench=${1:-$top/tools/tpbench}
standin=${2:-$top/tests/unit/build/libcuda_standin.so}
# shellcheck source=tests/tap.sh
. "$top/tests/tap.sh"

if [ ! -x "$tpbench" ] || [ ! -f "$standin" ]; then
	point 0 "tpbench cuda: $tpbench and $standin are built"
	echo "1..$n"
	exit 1
fi
xports="shm tcp"
extra=()
want=5		# cpu-cuda: staged; cuda-cpu and cuda-cuda: ipc (shm only) and staged
if [ $dmabuf = 1 ]; then
	if [ ! -e /dev/tensorpipe ] || [ ! -e /dev/udmabuf ]; then
		echo "ok 1 - tpbench cuda through cuda_dmabuf # SKIP needs /dev/tensorpipe and /dev/udmabuf (Linux 6.12)"
		echo "1..1"
		exit 0
	fi
	xports=shm
	extra=(--channel cuda_dmabuf)
	want=3
fi
for xport in $xports; do
	# cuda_ipc needs a peer pid the kernel proves: shm only (security.rst).
	[ $dmabuf = 1 ] || { [ "$xport" = shm ] && want=5 || want=3; }
	out=$(TPU_CUDA_DRIVER=$standin timeout 300 "$tpbench" cuda --transport "$xport" \
		"${extra[@]}" --size 3M --iters 3 --json 2>&1)
	rc=$?
	lines=0
	while IFS= read -r line; do
		case $line in
		'{"bench": "cuda"'*) ;;
		*) echo "# $line"; continue ;;
		esac
		lines=$((lines + 1))
		pair=$(sed -n 's/.*"pair": "\([^"]*\)".*/\1/p' <<<"$line")
		chan=$(sed -n 's/.*"channel": "\([^"]*\)".*/\1/p' <<<"$line")
		got=$(sed -n 's/.*"negotiated": "\([^"]*\)".*/\1/p' <<<"$line")
		ok=0
		case $line in
		*'"status": "OK"'*'"bad_bytes": 0,'*'"standin": true'*) [ "$got" = "$chan" ] && ok=1 ;;
		esac
		point $ok "tpbench cuda over $xport: $pair through $chan (negotiated '$got'), every byte right"
	done <<<"$out"
	point $([ "$lines" = $want ] && [ $rc = 0 ] && echo 1 || echo 0) \
		"tpbench cuda over $xport: $want runs, exit status 0 (got $lines, $rc)"
done
# No driver at all: every run fails at once, saying so (a reader left
# waiting for a writer that never connected once hung the whole run).
if [ $dmabuf = 0 ]; then
	out=$(TPU_CUDA_DRIVER=/nonexistent/libcuda.so.1 timeout 60 "$tpbench" cuda --transport shm \
		--size 4096 --iters 2 --json 2>&1)
	rc=$?
	nodev=$(grep -c '"status": "ENODEV"' <<<"$out")
	point $([ "$rc" = 1 ] && [ "$nodev" = 5 ] && echo 1 || echo 0) \
		"tpbench cuda without a driver: 5 runs end ENODEV, exit status 1 (got $nodev, $rc)"
fi
tap_end
