#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""gloo_torch_coll_bench: Gloo's collectives through torch.distributed (its
"gloo" backend, TCP on 127.0.0.1), for hosts without libgloo-dev (where
gloo_coll_bench.cc cannot be built), measured as tpbench coll measures ours.

  gloo_torch_coll_bench.py [--ranks N] [--sizes LIST] [--iters N]

The parent forks N ranks; for each collective and size one warm-up
operation, then --iters operations back to back, each timed by every rank;
an operation's time is the slowest rank's, the median over the operations is
printed, and the bus bandwidth is counted as nccl-tests counts it.  float32
sums, broadcast from rank 0, all-gather of SIZE bytes per rank.  torch's
gloo backend has no reduce-scatter: none is measured.  The times include
the Python call into torch (a few microseconds).

Output, one line per collective and size:
  peer=gloo transport=tcp coll=all-reduce ranks=2 size=1048576 iters=10 time_us=.. busbw=..
"""
import argparse
import multiprocessing as mp
import os
import socket
import statistics
import sys
import time


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if s and s[-1] in mult:
        return int(s[:-1]) * mult[s[-1]]
    return int(s)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


KINDS = ("all-reduce", "broadcast", "all-gather")


def rank_main(rank, n, port, sizes, iters, queue):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback only
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=n)
    big = max(sizes) // 4
    t = torch.ones(big, dtype=torch.float32)
    outs = [torch.zeros(big, dtype=torch.float32) for _ in range(n)]
    for kind in KINDS:
        for size in sizes:
            count = size // 4
            x = t[:count]
            gathered = [o[:count] for o in outs]
            times = []
            for it in range(iters + 1):
                t0 = time.perf_counter()
                if kind == "all-reduce":
                    dist.all_reduce(x)
                elif kind == "broadcast":
                    dist.broadcast(x, 0)
                else:
                    dist.all_gather(gathered, x)
                if it:
                    times.append(time.perf_counter() - t0)
            queue.put((rank, kind, size, times))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--sizes", default="4,64K,1M,16M,64M")
    ap.add_argument("--iters", type=int, default=10)
    a = ap.parse_args()
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    if a.ranks < 1 or a.ranks > 8 or a.iters < 1 or min(sizes) < 4:
        ap.error("bad arguments")
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=rank_main, args=(r, a.ranks, port, sizes, a.iters, queue))
             for r in range(a.ranks)]
    for p in procs:
        p.start()
    got = {}
    expected = len(KINDS) * len(sizes) * a.ranks
    rc = 0
    for _ in range(expected):
        try:
            rank, kind, size, times = queue.get(timeout=600)
        except Exception:
            rc = 1
            break
        got.setdefault((kind, size), []).append(times)
        if len(got[(kind, size)]) == a.ranks:
            slowest = [max(ts) for ts in zip(*got[(kind, size)])]
            med = statistics.median_low(slowest)
            n = a.ranks
            bus = 2.0 * (n - 1) / n if kind == "all-reduce" else \
                1.0 if kind == "broadcast" else float(n - 1)
            size4 = size - size % 4
            print(f"peer=gloo transport=tcp coll={kind} ranks={n} size={size4} "
                  f"iters={a.iters} time_us={med * 1e6:.1f} "
                  f"busbw={size4 * bus / med / 1e9:.3f}", flush=True)
    for p in procs:
        p.join(timeout=60)
        if p.exitcode != 0:
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
