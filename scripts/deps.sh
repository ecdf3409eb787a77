#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Install the Debian packages that building and testing need, or, when not
# root, print the exact command that would.
#
#   scripts/deps.sh            install what is missing (root) / advise (user)
#   scripts/deps.sh --list     print the package list and exit
#
# TP_EXTRA_PACKAGES adds packages to the list (space separated).
set -euo pipefail

packages=(
	gcc make bc perl pkg-config	# user space and kbuild (bc: kbuild's timeconst)
	linux-image-amd64		# Debian 12's kernel (6.1), booted by the test VM
	linux-headers-amd64		# its kbuild tree, to build tensorpipe.ko against
	linux-image-6.12-amd64		# 6.12 (Debian 13's line), the second kernel
	linux-headers-6.12-amd64	# of make check's matrix, and its kbuild tree
	linux-source-6.1		# the kselftest harness, extracted once
	linux-source-6.12		# checkpatch.pl and kernel-doc of the newest kernel,
					# and the source of make check-debug's kernel
	bison flex libelf-dev libssl-dev	# to build that kernel
	xz-utils			# to unpack that tarball
	qemu-system-x86			# the test VM
	busybox-static cpio kmod	# the VM's initramfs and module loading
	liburing-dev			# io_uring for the library and tools
	libibverbs-dev librdmacm-dev	# rdma-core verbs and rdma_cm
	rdma-core ibverbs-providers	# and soft-RoCE's user-space provider (rxe)
	ibverbs-utils rdmacm-utils perftest	# rping, ib_write_bw: the two-VM tests and benchmarks
	valgrind			# leak checks of the host unit tests
	gdb				# native stacks of a hung Python test (tests/python/conftest.py)
	abigail-tools			# abidw, abidiff: the library's ABI against its baseline
	openmpi-bin			# mpirun, to start a world the way MPI jobs start
	clang libclang-rt-14-dev	# libFuzzer, for the pipe wire decoder's fuzz test
	python3-dev python3-setuptools	# the Python bindings (python/, make python)
	libdlpack-dev			# DLPack's header, for tensors in and out of them
	python3-pytest python3-numpy	# their tests (make check-python)
	python3-torch			# and PyTorch, for the torch tests, examples and benchmark
	libtorch-dev pybind11-dev	# the torch.distributed backend "tpu" (python/torch/)
	dkms dh-dkms debhelper		# DKMS and the Debian packages (make deb,
	dpkg-dev fakeroot lintian man-db	# make check-packaging), their lint, man pages
)
# shellcheck disable=SC2206 # word splitting of the extra list is the point
packages+=(${TP_EXTRA_PACKAGES:-})

if [ "${1:-}" = "--list" ]; then
	echo "${packages[*]}"
	exit 0
fi

if ! command -v dpkg-query >/dev/null 2>&1; then
	echo "deps: not a Debian system; install the equivalents of: ${packages[*]}" >&2
	exit 0
fi

missing=()
for pkg in "${packages[@]}"; do
	status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
	[ "$status" = "install ok installed" ] || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0

install_cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
	echo "deps: missing packages: ${missing[*]}" >&2
	echo "deps: install them with:" >&2
	echo "  sudo sh -c 'apt-get update && DEBIAN_FRONTEND=noninteractive $install_cmd'" >&2
	exit 1
fi

echo "deps: installing ${missing[*]}"
# Package lists are often absent in fresh containers; one update is enough.
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
# shellcheck disable=SC2086 # the command line is kept in one string to print it above
$install_cmd
