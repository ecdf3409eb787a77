#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""torch.distributed's backends "gloo" and "tpu" side by side, in one run.

Each world (2 and 4 ranks by default, processes on this host, file://
init) holds both: the default group on "tpu" and a Gloo group over the same
ranks.  For each operation and size the two run back to back on the same
tensors, so that the machine's load falls on both alike:

  all_reduce   SUM of float32, busbw = algbw * 2(n-1)/n
  broadcast    from rank 0,    busbw = algbw
  all_gather   list form (Gloo 1.13 has no all_gather_into_tensor); the
               size is the gathered output, busbw = algbw * (n-1)/n
  sendrecv     a ring: each rank sends to the next and receives from the
               previous at once, busbw = algbw

(NCCL-tests' conventions; algbw = size / time.)  Time: every iteration
starts at a Gloo-group barrier, each rank times its own call; the
iteration's time is the slowest rank's, and the figure is the median over
the iterations.  Then one DistributedDataParallel training step (forward,
backward with the gradient all-reduce, SGD step) of a ~25 M-parameter MLP
(100 MB of float32 gradients in DDP's default 25 MB buckets), median of
--ddp-steps steps, per backend.  Ratios are tpu/gloo: of times (below 1:
tpu is faster) and of bus bandwidths (above 1: tpu is faster).

    PYTHONPATH=build/python /usr/bin/python3 tools/bench_torch.py [--worlds 2,4]
        [--max-size 64M] [--ops all_reduce,broadcast,all_gather,sendrecv] [--json]

Not part of make check (make bench-torch).  Prints the load average: on a
loaded machine the ratios mean more than the absolute figures.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

OPS = ["all_reduce", "broadcast", "all_gather", "sendrecv"]


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper().rstrip("B").rstrip("I")
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


def fmt_size(b):
    for unit, k in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= k:
            return f"{b // k} {unit}"
    return f"{b} B"


def sizes(max_size):
    out, b = [], 4
    while b <= max_size:
        out.append(b)
        b *= 4
    return out


def bus_factor(op, n):
    return {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n}.get(op, 1.0)


# ---- the rank processes ----------------------------------------------------

def worker(args):
    import torch
    import torch.distributed as dist
    import tpu_user.torch  # noqa: F401

    torch.set_num_threads(1)
    rank, n = args.rank, args.world
    timeout = datetime.timedelta(seconds=120)
    dist.init_process_group("tpu", init_method=args.init, rank=rank, world_size=n,
                            timeout=timeout)
    groups = {"gloo": dist.new_group(backend="gloo", timeout=timeout), "tpu": None}
    sync = dist.new_group(backend="gloo", timeout=timeout)
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    out = []

    def make_op(op, nbytes, group):
        numel = max(1, nbytes // 4)
        if op == "all_reduce":
            t = torch.ones(numel)
            return lambda: dist.all_reduce(t, group=group)
        if op == "broadcast":
            t = torch.ones(numel)
            return lambda: dist.broadcast(t, 0, group=group)
        if op == "all_gather":
            per = max(1, numel // n)
            src = torch.ones(per)
            dst = [torch.empty(per) for _ in range(n)]
            return lambda: dist.all_gather(dst, src, group=group)
        if op == "sendrecv":
            s, r = torch.ones(numel), torch.empty(numel)

            def ring():
                ws = [dist.isend(s, nxt, group=group), dist.irecv(r, prv, group=group)]
                for w in ws:
                    w.wait()
            return ring
        raise ValueError(op)

    def timed(fn, iters):
        ts = []
        for _ in range(iters):
            dist.barrier(group=sync)
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        # The slowest rank's time, iteration by iteration.
        t = torch.tensor(ts, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=sync)
        return t.tolist()

    def iterations(fn):
        """As many as fit the time budget (the same count on every rank)."""
        dist.barrier(group=sync)
        t0 = time.perf_counter()
        fn()                                         # warm-up: connections, buffers
        one = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(one, op=dist.ReduceOp.MAX, group=sync)
        return int(min(args.max_iters, max(args.min_iters, args.budget / max(one.item(), 1e-6))))

    for op in args.ops:
        for nbytes in sizes(args.max_size):
            row = {"world": n, "op": op, "bytes": nbytes}
            for backend in ("gloo", "tpu"):
                fn = make_op(op, nbytes, groups[backend])
                ts = timed(fn, iterations(fn))
                med = statistics.median(ts)
                row[backend] = {"median_s": med, "iters": len(ts),
                                "busbw_GBps": nbytes / med * bus_factor(op, n) / 1e9}
            out.append(row)
            if rank == 0:
                print(json.dumps(row), flush=True)

    if args.ddp_steps:
        from torch.nn.parallel import DistributedDataParallel as DDP
        width, depth = 2048, 6                       # 6 x (2048 x 2048 + 2048) = 25.2 M
        row = {"world": n, "op": "ddp_step", "bytes": 0}
        for backend in ("gloo", "tpu"):
            torch.manual_seed(0)
            layers = []
            for _ in range(depth):
                layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
            model = torch.nn.Sequential(*layers[:-1])
            params = sum(p.numel() for p in model.parameters())
            ddp = DDP(model, process_group=groups[backend])  # default bucket_cap_mb=25
            opt = torch.optim.SGD(ddp.parameters(), lr=1e-4)
            x = torch.randn(8, width)

            def step():
                opt.zero_grad()
                ddp(x).square().mean().backward()
                opt.step()
            timed(step, 1)                           # warm-up
            ts = timed(step, args.ddp_steps)
            row[backend] = {"median_s": statistics.median(ts), "iters": len(ts), "params": params}
            row["bytes"] = params * 4
            del ddp, model, opt
        out.append(row)
        if rank == 0:
            print(json.dumps(row), flush=True)
    dist.barrier(group=sync)
    dist.destroy_process_group()


# ---- the driver -------------------------------------------------------------

def run_world(args, n):
    with tempfile.TemporaryDirectory(prefix="bench_torch.") as d:
        init = f"file://{os.path.join(d, 'store')}"
        env = dict(os.environ, OMP_NUM_THREADS="1")
        base = [sys.executable, os.path.abspath(__file__), "--worker", "--world", str(n),
                "--init", init, "--max-size", str(args.max_size), "--ops", ",".join(args.ops),
                "--budget", str(args.budget), "--min-iters", str(args.min_iters),
                "--max-iters", str(args.max_iters), "--ddp-steps", str(args.ddp_steps)]
        procs = [subprocess.Popen(base + ["--rank", str(r)], env=env, stdout=subprocess.PIPE,
                                  stderr=None if r == 0 else subprocess.DEVNULL, text=True)
                 for r in range(n)]
        rows = []
        for line in procs[0].stdout:
            if line.startswith("{"):
                rows.append(json.loads(line))
                if not args.json:
                    print_row(rows[-1], live=True)
        for p in procs:
            p.wait()
        bad = [r for r, p in enumerate(procs) if p.returncode != 0]
        if bad:
            sys.exit(f"bench_torch: ranks {bad} of the {n}-rank world failed")
        return rows


def print_row(row, live=False):
    g, t = row["gloo"], row["tpu"]
    if row["op"] == "ddp_step":
        print(f"{row['world']:>2}  {'ddp_step':<11} {g['params'] / 1e6:>6.1f} M "
              f"{g['median_s'] * 1e3:>10.1f} ms {'':>9} {t['median_s'] * 1e3:>10.1f} ms {'':>9} "
              f"{t['median_s'] / g['median_s']:>6.2f}", flush=True)
        return
    print(f"{row['world']:>2}  {row['op']:<11} {fmt_size(row['bytes']):>8} "
          f"{g['median_s'] * 1e6:>10.1f} us {g['busbw_GBps']:>9.3f} "
          f"{t['median_s'] * 1e6:>10.1f} us {t['busbw_GBps']:>9.3f} "
          f"{t['median_s'] / g['median_s']:>6.2f} {t['busbw_GBps'] / g['busbw_GBps']:>6.2f}",
          flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--max-size", default="64M")
    ap.add_argument("--budget", type=float, default=0.3, help="seconds of iterations per point")
    ap.add_argument("--min-iters", type=int, default=5)
    ap.add_argument("--max-iters", type=int, default=50)
    ap.add_argument("--ddp-steps", type=int, default=5, help="0: no DDP step")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--init", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.ops = [o for o in args.ops.split(",") if o]
    for o in args.ops:
        if o not in OPS:
            ap.error(f"unknown op {o} (known: {', '.join(OPS)})")
    args.max_size = parse_size(str(args.max_size))
    if args.worker:
        return worker(args)
    load = os.getloadavg()
    if not args.json:
        print(f"# torch.distributed gloo vs tpu, {os.cpu_count()} CPUs, load average "
              f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; ratios tpu/gloo")
        print(f"{'n':>2}  {'op':<11} {'size':>8} {'gloo time':>13} {'busbw GB/s':>9} "
              f"{'tpu time':>13} {'busbw GB/s':>9} {'time':>6} {'busbw':>6}")
    rows = []
    for n in (int(w) for w in args.worlds.split(",")):
        rows += run_world(args, n)
    if args.json:
        print(json.dumps({"load": load, "rows": rows}, indent=1))
    else:
        load = os.getloadavg()
        print(f"# load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
