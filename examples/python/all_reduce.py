#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""All-reduce, broadcast and all-gather of torch tensors over a tpu_user world.

Start it as torchrun starts workers; tpu_user reads the same variables
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; its store listens on
MASTER_PORT + 1, beside torch's own):

    torchrun --nproc-per-node 3 examples/python/all_reduce.py
    python3 -m torch.distributed.run --nproc-per-node 3 examples/python/all_reduce.py

or with no launcher at all, which starts 3 ranks itself with those variables
set.  Each rank checks its results and exits 1 if one is wrong.
"""
import os
import socket
import subprocess
import sys

try:
    import torch
except ImportError:  # NumPy serves as well
    torch = None
import numpy as np

import tpu_user


def tensor(values, dtype="float32"):
    if torch is not None:
        return torch.tensor(values, dtype=getattr(torch, dtype))
    return np.array(values, dtype=dtype)


def as_numpy(t):
    return t.numpy() if torch is not None and isinstance(t, torch.Tensor) else np.asarray(t)


def rank_main() -> int:
    with tpu_user.Context() as ctx, ctx.world(timeout=60) as world:
        rank, size = world.rank, world.size
        n = 1 << 16
        x = tensor([float(rank + i) for i in range(n)])
        world.all_reduce(x, op="sum")
        want = np.arange(n, dtype=np.float32) * size + size * (size - 1) / 2
        ok = np.array_equal(as_numpy(x), want)

        m = tensor([float(rank)] * 8)
        world.all_reduce(m, op="mean")
        ok &= np.allclose(as_numpy(m), (size - 1) / 2)

        b = tensor([rank * 10 + i for i in range(5)], "int64")
        world.broadcast(b, src=size - 1)
        ok &= as_numpy(b).tolist() == [(size - 1) * 10 + i for i in range(5)]

        g = np.asarray(world.all_gather(tensor([rank, rank], "int32")))
        ok &= g.tolist() == [[r, r] for r in range(size)]
        world.barrier()
        print(f"rank {rank} of {size}: all_reduce, broadcast, all_gather "
              f"{'as expected' if ok else 'WRONG'}", flush=True)
        return 0 if ok else 1


def free_port() -> int:
    # Two ports in a row: MASTER_PORT (torch's store) and MASTER_PORT + 1 (ours).
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue


def launch(n: int) -> int:
    """Be the launcher: the variables torchrun sets, one process per rank."""
    port = free_port()
    procs = []
    for rank in range(n):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(n), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, __file__], env=env))
    return max(p.wait() for p in procs)


if __name__ == "__main__":
    if "RANK" in os.environ or "OMPI_COMM_WORLD_RANK" in os.environ:
        sys.exit(rank_main())
    sys.exit(launch(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
