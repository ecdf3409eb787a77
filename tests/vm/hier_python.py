# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""One rank of a four-rank world on two hosts (two ranks on each), run by
tests/vm/pair-xfer.sh in both VMs with torchrun's variables: the Python
World's collectives and then the torch.distributed backend "tpu" must take
the two-level path ("hier") and give every rank the reference's result.
The torch part needs the backend built (make python); without torch it
says so and the World part alone decides."""
import datetime
import os
import sys

import numpy as np

import tpu_user

rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

with tpu_user.Context() as ctx, ctx.world(timeout=120) as w:
    x = np.full(1001, rank + 1, dtype=np.float32)
    w.all_reduce(x, timeout=60)
    assert (x == n * (n + 1) // 2).all(), x[:4]
    assert w.coll_path() == "hier", w.coll_path()
    big = np.arange(300007, dtype=np.float64) * (rank + 1)
    w.all_reduce(big, op="max", timeout=60)
    assert (big == np.arange(300007) * n).all()
    b = np.full(9, rank, dtype=np.int64)
    w.broadcast(b, src=n - 1, timeout=60)
    assert (b == n - 1).all(), b
    g = np.asarray(w.all_gather(np.array([rank, -rank], dtype=np.int32), timeout=60))
    assert g[:, 0].tolist() == list(range(n)) and g[:, 1].tolist() == [-r for r in range(n)]
    rs = np.asarray(w.reduce_scatter(np.ones(4 * n + 1, dtype=np.float32), timeout=60))
    assert (rs == n).all() and len(rs) == (5 if rank == 0 else 4), rs
    m = np.full(3, float(rank))
    w.all_reduce(m, op="mean", timeout=60)
    assert np.allclose(m, (n - 1) / 2), m
print(f"rank {rank}: the World's collectives in two levels, checked", flush=True)

try:
    import torch
    import torch.distributed as dist
    import tpu_user.torch  # noqa: F401  (registers "tpu")
except ImportError as e:
    print(f"rank {rank}: no torch backend here ({e}): its part skipped", flush=True)
    sys.exit(0)

port = int(os.environ["MASTER_PORT"]) + 2
dist.init_process_group("tpu", init_method=f"tcp://{os.environ['MASTER_ADDR']}:{port}",
                        rank=rank, world_size=n, timeout=datetime.timedelta(seconds=120))
assert tpu_user.torch.coll_path() == "hier", tpu_user.torch.coll_path()
t = torch.arange(1000, dtype=torch.float32) * (rank + 1)
dist.all_reduce(t)
assert torch.equal(t, torch.arange(1000, dtype=torch.float32) * (n * (n + 1) // 2))
t = torch.full((5,), rank, dtype=torch.int64)
dist.broadcast(t, src=1)
assert (t == 1).all()
outs = [torch.empty(3, dtype=torch.float64) for _ in range(n)]
dist.all_gather(outs, torch.full((3,), float(rank), dtype=torch.float64))
assert [int(o[0]) for o in outs] == list(range(n))
out = torch.empty(2, dtype=torch.float32)
dist.reduce_scatter(out, [torch.full((2,), float(rank + i)) for i in range(n)])
assert (out == sum(r + rank for r in range(n))).all(), out
dist.barrier()
dist.destroy_process_group()
print(f"rank {rank}: the torch backend in two levels, checked", flush=True)
