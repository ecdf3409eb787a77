#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""A producer process posts torch tensors by key; a consumer takes them.

The parent makes a rendezvous (the kernel module's when it is loaded,
process_vm_readv otherwise), shares its descriptor with a child and
becomes the consumer: it receives the first tensors as new tensors, then
into one preallocated tensor (the fast path), and checks every value.

    python3 examples/python/producer_consumer.py
"""
import os
import subprocess
import sys

import numpy as np

try:
    import torch
except ImportError:
    torch = None

import tpu_user

STEPS = 8
SHAPE = (256, 1024)	# 1 MiB of float32


def batch(step):
    if torch is not None:
        return torch.full(SHAPE, float(step)) + torch.arange(SHAPE[1], dtype=torch.float32)
    return np.full(SHAPE, float(step), np.float32) + np.arange(SHAPE[1], dtype=np.float32)


def producer(fd: int) -> int:
    with tpu_user.Context() as ctx, ctx.join(fd) as rdv:
        for step in range(STEPS):
            # send() returns once the consumer took the tensor: it may change again.
            rdv.send(f"batch/{step}", batch(step), timeout=30)
    return 0


def consumer() -> int:
    with tpu_user.Context() as ctx, ctx.rendezvous() as rdv:
        print(f"rendezvous: {rdv.impl}")
        fd = rdv.share()
        child = subprocess.Popen([sys.executable, __file__, "--producer", str(fd)],
                                 pass_fds=[fd])
        os.close(fd)
        out = torch.empty(SHAPE) if torch is not None else np.empty(SHAPE, np.float32)
        ok = True
        for step in range(STEPS):
            if step < STEPS // 2:
                t = rdv.recv(f"batch/{step}", timeout=30)		# a new Tensor
                got = torch.from_dlpack(t) if torch is not None else np.asarray(t)
            else:
                got = rdv.recv_into(f"batch/{step}", out, timeout=30)	# no allocation
            want = batch(step)
            same = bool((got == want).all())
            ok &= same
            print(f"step {step}: {tuple(got.shape)} {got.dtype} "
                  f"{'as sent' if same else 'WRONG'}")
        ok &= child.wait(30) == 0
        return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--producer":
        sys.exit(producer(int(sys.argv[2])))
    sys.exit(consumer())
