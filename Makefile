# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# tensorpipe: top-level build and test entry points.
#
#   make              module (kmod/tensorpipe.ko), library, tools, selftests
#   make python       the Python bindings (python/, import tpu_user) into build/python:
#                     PYTHONPATH=build/python $(PYTHON) -c 'import tpu_user'
#   make torch       the torch.distributed backend "tpu" (python/torch/; part of
#                     make python; skipped, with the reason, without libtorch-dev)
#   make check-python the Python tests (pytest; NumPy, PyTorch when installed)
#   make check        host unit tests, then the selftests in a QEMU VM;
#                     ends with one line "N passed, N failed[, N skipped]"
#   make check-debug  the VM suites on a debug kernel (KASAN, lockdep,
#                     kmemleak, fault injection), built once per machine
#   make demo         tools/tpdemo in the VM, module loaded
#   make bench        tools/tpbench on the host (module-free paths) and in the VM
#   make bench-peers  TensorPipe and UCX benchmarks beside tpbench pipe, Gloo
#                     and Open MPI collectives beside tpbench coll
#   make bench-torch  torch.distributed over backends gloo and tpu side by side
#                     (tools/bench_torch.py: collectives 4 B..64 MiB, a DDP step)
#   make bench-rdma   tpbench pipe over rdma:// and tcp:// between two VMs,
#                     beside ib_write_lat/ib_write_bw and ucx_perftest
#                     (rc_verbs) on the same soft-RoCE devices
#   make checkpatch   checkpatch.pl --strict on the module and the uapi header
#   make check-abi    the shared library's ABI against lib/abi/libtpu_user.abi
#                     (abidiff; also a suite of make check, Documentation/abi.rst)
#   make abi-baseline write that baseline again (after a SONAME change, or to
#                     record additions)
#   make deps         install missing Debian packages (or print the command)
#   make vm-shell     interactive shell in the VM, module loaded
#   make install      library (shared, static), headers, tpu_user.pc, tools and
#                     their man pages under PREFIX (default /usr/local)
#   make uninstall    remove them again (same PREFIX, DESTDIR)
#   make dkms-install (root) the module's source to /usr/src/tensorpipe-VERSION,
#                     dkms add/build/install for KVER, udev rule, group
#   make dkms-remove  (root) dkms remove for all kernels, source and rule
#   make deb          Debian packages into build/deb (dpkg-buildpackage in a copy)
#   make check-packaging  dkms build for each kernel in private trees, make
#                     install into a DESTDIR, the packages and lintian (TAP);
#                     also a suite of make check
#   make clean
#
# check, demo and bench install missing packages first (as root) and extract
# the kselftest harness (linux-source-6.1) and checkpatch (newest linux-source) once.
#
# Variables (set on the command line, e.g. make check KVER=6.1.0-56-amd64):
#   KVER          kernel release to build for and to boot in the VM; default:
#                 the running kernel when /lib/modules/`uname -r`/build exists,
#                 else the newest installed /lib/modules/*/build
#   KDIR          kbuild tree, default /lib/modules/$(KVER)/build
#   TP_SRC_CACHE  where the linux-source files are extracted, default
#                 /var/cache/tensorpipe/linux-src (~/.cache/... if not writable)
#   BENCH_ARGS    arguments for tools/tpbench in the VM
#   BENCH_HOST_ARGS  arguments for tools/tpbench on the host
#   TP_VM_MEM, TP_VM_SMP, TP_VM_TIMEOUT, TP_VM_APPEND: see tests/vm/run.sh
#   PYTHON        the interpreter the bindings are built for and tested with,
#                 default /usr/bin/python3 (Debian's, whose numpy and torch the tests use)
#   PREFIX, DESTDIR  where make install puts things (also LIBDIR, INCDIR,
#                 BINDIR, MANDIR: see lib/Makefile, tools/Makefile)

# Computed once per make (:=), not at every use; a sub-make started after
# `make deps` installed the headers computes it again.
ifeq ($(origin KVER),undefined)
KVER := $(shell scripts/kernel-version.sh $(KDIR) 2>/dev/null)
endif
KDIR ?= /lib/modules/$(KVER)/build

ifeq ($(origin TP_SRC_CACHE),undefined)
TP_SRC_CACHE := $(shell scripts/ksft-cache.sh --dir)
endif
LINUX_SRC_TARBALL ?= /usr/src/linux-source-6.1.tar.xz
LINUX_SRC := $(TP_SRC_CACHE)/$(notdir $(LINUX_SRC_TARBALL:.tar.xz=))
KSFT_DIR := $(LINUX_SRC)/tools/testing/selftests
# checkpatch and kernel-doc come from the newest installed linux-source,
# whose rules are the strictest; the harness stays with 6.1's.
LINT_SRC_TARBALL ?= $(or $(lastword $(shell ls /usr/src/linux-source-*.tar.xz 2>/dev/null | sort -V)),$(LINUX_SRC_TARBALL))
LINT_SRC := $(TP_SRC_CACHE)/$(notdir $(LINT_SRC_TARBALL:.tar.xz=))
CHECKPATCH := $(LINT_SRC)/scripts/checkpatch.pl
KERNEL_DOC := $(LINT_SRC)/scripts/kernel-doc
# The scripts and sub-makes find the same cache and tools through these.
export TP_SRC_CACHE LINUX_SRC_TARBALL LINT_SRC_TARBALL KSFT_DIR CHECKPATCH KERNEL_DOC

MODULE := kmod/tensorpipe.ko
BENCH_ARGS ?=
BENCH_HOST_ARGS ?= --no-kmod
# Two processes with tensors up to 256 MiB each, plus the kernel's copies.
BENCH_VM_MEM ?= 4G

# Generated kbuild files are not ours to lint.
CHECKPATCH_FILES = $(filter-out %.mod.c,$(wildcard kmod/*.c kmod/*.h include/uapi/linux/*.h))

.PHONY: python check-python
.PHONY: all kmod lib tools selftests ksft-cache deps prepare check check-debug demo bench bench-peers bench-torch bench-rdma \
	checkpatch check-abi abi-baseline vm-shell clean help

all: kmod lib tools selftests

kmod:
	@test -d "$(KDIR)" || { echo "No kernel build tree at '$(KDIR)': run 'make deps' or pass KDIR=/KVER=." >&2; exit 1; }
	$(MAKE) -C kmod KDIR=$(KDIR) W=1

lib:
	$(MAKE) -C lib

tools: lib
	$(MAKE) -C tools

PYTHON ?= /usr/bin/python3
export PYTHON

# Built from the static library, in place under build/python (no install).
python: lib
	cd python && $(PYTHON) setup.py -q build --build-base ../build/python/tmp \
		--build-lib ../build/python
	@$(MAKE) --no-print-directory torch PYTHON=$(PYTHON)

# The torch.distributed backend "tpu" (python/torch/, C++); says why when skipped.
.PHONY: torch
torch: lib
	@$(MAKE) --no-print-directory -C python/torch PYTHON=$(PYTHON) OUT=$(CURDIR)/build/python

# Not part of check: minutes of both cores.  BENCH_TORCH_ARGS for tools/bench_torch.py.
bench-torch: python
	PYTHONPATH=$(CURDIR)/build/python $(PYTHON) tools/bench_torch.py $(BENCH_TORCH_ARGS)

check-python: python
	@tests/python/run.sh

selftests: ksft-cache
	$(MAKE) -C tests/selftests KSFT_DIR=$(KSFT_DIR)

ksft-cache:
	@scripts/ksft-cache.sh
	@LINUX_SRC_TARBALL=$(LINT_SRC_TARBALL) scripts/ksft-cache.sh

deps:
	@scripts/deps.sh

# Packages first, then a fresh make for the build, so KVER and KDIR are
# worked out after the kernel headers exist on a new machine.
prepare:
	@scripts/deps.sh
	+@$(MAKE) --no-print-directory ksft-cache
	+@$(MAKE) --no-print-directory all

check: prepare
	+@scripts/check.sh

check-debug: prepare
	+@scripts/check-debug.sh

demo: prepare
	@tests/vm/run.sh --name demo --module $(MODULE) -- tools/tpdemo

bench: prepare
	@echo "== tpbench on the host (paths that need no module)"
	tools/tpbench $(BENCH_HOST_ARGS)
	@echo
	tools/tpbench rdv --impl inprocess,cma
	@echo
	tools/tpbench pipe
	@echo "== tpbench in the VM (module loaded)"
	@TP_VM_MEM=$(BENCH_VM_MEM) tests/vm/run.sh --name bench --module $(MODULE) -- \
		'tools/tpbench $(BENCH_ARGS) && echo && tools/tpbench uring && echo && tools/tpbench rdv && echo && tools/tpbench pipe --iters 500'

# TensorPipe (libtensorpipe-dev) and UCX (ucx_perftest) beside tpbench pipe,
# Gloo (libgloo-dev) and Open MPI beside tpbench coll, on the host, then in
# the VM against the kmod channel (the collectives at the --quick sizes there:
# 4 ranks of 256 MiB tensors would not fit its memory).
bench-peers: prepare
	@echo "== tpbench pipe and the peers on the host"
	tools/tpbench pipe
	tools/bench-peers.sh
	@echo "== tpbench pipe and the peers in the VM (module loaded)"
	@TP_VM_MEM=$(BENCH_VM_MEM) tests/vm/run.sh --name bench-peers --module $(MODULE) -- \
		'tools/tpbench pipe --iters 500 --bw-iters 5 && tools/bench-peers.sh --no-install --only tensorpipe,ucx,pvm && tools/bench-peers.sh --no-install --quick --only gloo,mpi'
	@$(MAKE) --no-print-directory bench-rdma

# The pipe between two VMs over soft-RoCE against perftest and UCX in one
# run (tests/vm/pair-bench.sh); ratios, the VMs being emulated.  Two vCPUs
# per VM so that the busy-polling peers do not starve rxe's kernel work.
bench-rdma: prepare
	@echo "== tpbench pipe, perftest and ucx_perftest between two VMs (soft-RoCE)"
	@TP_VM_SMP=$${TP_VM_SMP:-2} tests/vm/pair.sh --name bench-rdma -- tests/vm/pair-bench.sh

check-abi:
	scripts/check-abi.sh

abi-baseline:
	scripts/check-abi.sh --baseline

checkpatch: ksft-cache
	perl $(CHECKPATCH) --strict --no-tree -f $(CHECKPATCH_FILES)

vm-shell: prepare
	@tests/vm/run.sh --interactive --name shell --module $(MODULE)

# Installation and packaging; packaging/Makefile has the module's side,
# debian/ the packages, scripts/check-packaging.sh their test.
.PHONY: install uninstall dkms-install dkms-remove deb check-packaging

install:
	$(MAKE) -C lib install
	$(MAKE) -C tools install

uninstall:
	$(MAKE) -C tools uninstall
	$(MAKE) -C lib uninstall

dkms-install:
	$(MAKE) -C packaging dkms-install KVER=$(KVER)

dkms-remove:
	$(MAKE) -C packaging dkms-remove

deb:
	scripts/build-deb.sh build/deb

check-packaging:
	scripts/check-packaging.sh

clean:
	@for dir in kmod lib tools tests/unit tests/selftests tests/rdv tests/pipe tests/fuzz; do \
		if [ -f $$dir/Makefile ]; then $(MAKE) -C $$dir KDIR=$(KDIR) clean || exit 1; fi; \
	done
	rm -rf build python/build python/*.egg-info

help:
	@sed -n '3,/^$$/s/^# \{0,1\}//p' Makefile
