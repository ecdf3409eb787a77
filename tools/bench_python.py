#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""Python tensors between two processes: tpu_user against PyTorch's own ways.

One run, one pair of processes (A measures, B answers), four paths:

  tpu_user    a rendezvous A shares with B (the kernel module's when it is
              loaded, else process_vm_readv): A send_async()s a torch tensor,
              B recv_into()s its preallocated one
  gloo        torch.distributed send / recv over the Gloo backend (loopback TCP)
  mp.Queue    torch.multiprocessing's Queue: put / get of the tensor, whose
              storage moves to shared memory once; B gets that memory, not a copy
  tpu_user, THP memory   the same, the tensors in one 64 MiB tpu_user.empty()
              region (memory advised to huge pages), as tpbench's are
  C           tools/tpbench rdv --impl <same> --json: the library's own figure for
              the path tpu_user takes (rendezvous, cross-process, recv into place)

Bandwidth as tpbench measures it: from before A's send to B's receive
returning, B stamping CLOCK_MONOTONIC (one clock for both) and sending the
stamp back; the median over the iterations.  Round trip: A sends a 64-byte
tensor, B receives it and sends it back, A receives it (median, p90).

    PYTHONPATH=build/python python3 tools/bench_python.py [--iters N] [--json]

The machine's load average is printed with the table: ratios measured in
one run mean more than the absolute figures on a loaded machine.
"""
import argparse
import json
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

import tpu_user

SIZES = [1 << 20, 64 << 20]
SMALL = 64
HERE = os.path.dirname(os.path.abspath(__file__))


_region = None


def thp_empty(nbytes):
    """A float32 torch tensor at the start of one 64 MiB tpu_user.empty() region
    (memory advised to huge pages): what tpbench gives its tensors, every size
    in one such region, so that the two compare the path, not the memory."""
    global _region
    if _region is None:
        _region = torch.from_dlpack(tpu_user.empty(SIZES[-1] // 4, "float32"))
    return _region[:nbytes // 4]


def new_tensor(nbytes, thp):
    return thp_empty(nbytes) if thp else torch.empty(nbytes // 4, dtype=torch.float32)


def now():
    return time.monotonic_ns()	# CLOCK_MONOTONIC, as tpbench's stamps


def quant(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * q / 100))]


# ---------------------------------------------------------------- tpu_user
def tpu_a(rdv, iters, bw_iters, thp=False):
    res = {}
    msg = torch.full((SMALL // 4,), 1.0)
    back = torch.empty_like(msg)
    t = []
    for i in range(iters + 10):
        t0 = now()
        rdv.send(f"ping/{i}", msg)
        rdv.recv_into(f"pong/{i}", back)
        if i >= 10:
            t.append(now() - t0)
    if t:
        res["rtt_us"] = (statistics.median(t) / 1e3, quant(t, 90) / 1e3)
    stamp = torch.zeros(2, dtype=torch.int64)
    for size in SIZES:
        src = new_tensor(size, thp)
        src.copy_(torch.arange(size // 4, dtype=torch.float32))
        t = []
        for i in range(bw_iters + 1):
            t0 = now()
            fut = rdv.send_async(f"bw/{size}/{i}", src)
            rdv.recv_into(f"ack/{size}/{i}", stamp)
            fut.result()
            if i == 0:
                assert stamp[1].item() == 1, "tpu_user: tensor arrived corrupted"
            else:
                t.append(stamp[0].item() - t0)
        res[size] = size / statistics.median(t)		# bytes per ns = GB/s
    return res


def tpu_b(rdv, iters, bw_iters, thp=False):
    msg = torch.empty(SMALL // 4)
    for i in range(iters + 10):
        rdv.recv_into(f"ping/{i}", msg)
        rdv.send(f"pong/{i}", msg)
    for size in SIZES:
        dst = new_tensor(size, thp)
        dst.zero_()
        for i in range(bw_iters + 1):
            rdv.recv_into(f"bw/{size}/{i}", dst)
            t = now()
            ok = 1 if i > 0 or bool((dst == torch.arange(size // 4, dtype=torch.float32)).all()) \
                else 0
            rdv.send(f"ack/{size}/{i}", torch.tensor([t, ok], dtype=torch.int64))


# ---------------------------------------------------------------- gloo
def gloo_a(iters, bw_iters):
    res = {}
    msg = torch.full((SMALL // 4,), 1.0)
    t = []
    for i in range(iters + 10):
        t0 = now()
        dist.send(msg, 1)
        dist.recv(msg, 1)
        if i >= 10:
            t.append(now() - t0)
    res["rtt_us"] = (statistics.median(t) / 1e3, quant(t, 90) / 1e3)
    stamp = torch.zeros(2, dtype=torch.int64)
    for size in SIZES:
        src = torch.arange(size // 4, dtype=torch.float32)
        t = []
        for i in range(bw_iters + 1):
            t0 = now()
            dist.send(src, 1)
            dist.recv(stamp, 1)
            if i == 0:
                assert stamp[1].item() == 1, "gloo: tensor arrived corrupted"
            else:
                t.append(stamp[0].item() - t0)
        res[size] = size / statistics.median(t)
    return res


def gloo_b(iters, bw_iters):
    msg = torch.empty(SMALL // 4)
    for i in range(iters + 10):
        dist.recv(msg, 0)
        dist.send(msg, 0)
    for size in SIZES:
        dst = torch.empty(size // 4, dtype=torch.float32)
        for i in range(bw_iters + 1):
            dist.recv(dst, 0)
            t = now()
            ok = 1 if i > 0 or bool((dst == torch.arange(size // 4, dtype=torch.float32)).all()) \
                else 0
            dist.send(torch.tensor([t, ok], dtype=torch.int64), 0)


# ---------------------------------------------------------------- mp.Queue
def mpq_a(qa, qb, iters, bw_iters):
    res = {}
    msg = torch.full((SMALL // 4,), 1.0)
    t = []
    for i in range(iters + 10):
        t0 = now()
        qa.put(msg)
        qb.get()
        if i >= 10:
            t.append(now() - t0)
    res["rtt_us"] = (statistics.median(t) / 1e3, quant(t, 90) / 1e3)
    for size in SIZES:
        t = []
        for i in range(bw_iters + 1):
            src = torch.arange(size // 4, dtype=torch.float32)	# a new tensor each time
            t0 = now()
            qa.put(src)
            stamp, ok = qb.get()
            if i == 0:
                assert ok, "mp.Queue: tensor arrived corrupted"
            else:
                t.append(stamp - t0)
        res[size] = size / statistics.median(t)
    return res


def mpq_b(qa, qb, iters, bw_iters):
    for i in range(iters + 10):
        qb.put(qa.get())
    for size in SIZES:
        for i in range(bw_iters + 1):
            dst = qa.get()
            t = now()
            ok = i > 0 or bool((dst == torch.arange(size // 4, dtype=torch.float32)).all())
            del dst
            qb.put((t, ok))


# ---------------------------------------------------------------- the pair
def responder(sock, qa, qb, port, iters, bw_iters):
    torch.set_num_threads(1)
    _, fds, _, _ = socket.recv_fds(sock, 16, 1)
    with tpu_user.Context() as ctx, ctx.join(fds[0]) as rdv:
        os.close(fds[0])
        tpu_b(rdv, iters, bw_iters)
        tpu_b(rdv, 0, bw_iters, thp=True)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback only
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=1,
                            world_size=2)
    gloo_b(iters, bw_iters)
    dist.destroy_process_group()
    mpq_b(qa, qb, iters, bw_iters)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tpbench(impl, iters):
    exe = os.path.join(HERE, "tpbench")
    p = subprocess.run([exe, "rdv", "--impl", impl, "--iters", str(iters), "--json"],
                       capture_output=True, text=True, timeout=600)
    if p.returncode:
        raise SystemExit(f"tpbench failed: {p.stderr}")
    r = json.loads(p.stdout)["results"][0]
    return {"rtt_us": (r["rtt_us"]["median"], r["rtt_us"]["p90"]),
            SIZES[0]: r["gbps"][str(SIZES[0])], SIZES[1]: r["gbps"][str(SIZES[1])]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=200, help="round trips (default 200)")
    ap.add_argument("--bw-iters", type=int, default=10, help="timed transfers per size")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args()
    torch.set_num_threads(1)

    # The C figure before and after the Python paths: on a loaded machine the
    # two bracket what the load did meanwhile; the ratios use their mean.
    impl0 = "kmod" if tpu_user.probe()["path"] == "kmod" else "cma"
    c_before = tpbench(impl0, args.iters)
    mp = multiprocessing.get_context("fork")	# before any thread of ours exists
    qa, qb = mp.Queue(), mp.Queue()
    sa, sb = socket.socketpair()
    port = free_port()
    load0 = os.getloadavg()[0]
    child = mp.Process(target=responder, args=(sb, qa, qb, port, args.iters, args.bw_iters))
    child.start()

    res = {}
    with tpu_user.Context() as ctx, ctx.rendezvous() as rdv:
        impl = rdv.impl
        fd = rdv.share()
        socket.send_fds(sa, [b"f"], [fd])
        os.close(fd)
        res["tpu_user"] = tpu_a(rdv, args.iters, args.bw_iters)
        thp = tpu_a(rdv, 0, args.bw_iters, thp=True)
        thp["rtt_us"] = res["tpu_user"]["rtt_us"]
        res["tpu_user, THP memory"] = thp
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback only
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0,
                            world_size=2)
    res["gloo"] = gloo_a(args.iters, args.bw_iters)
    dist.destroy_process_group()
    res["mp.Queue"] = mpq_a(qa, qb, args.iters, args.bw_iters)
    child.join(60)
    c_after = tpbench(impl, args.iters)
    res[f"C tpbench rdv {impl}, before"] = c_before
    res[f"C tpbench rdv {impl}, after"] = c_after
    load1 = os.getloadavg()[0]
    c = {k: tuple((x + y) / 2 for x, y in zip(c_before[k], c_after[k]))
         if k == "rtt_us" else (c_before[k] + c_after[k]) / 2 for k in c_before}

    if args.json:
        print(json.dumps({"impl": impl, "loadavg_1min": [load0, load1], "cpus": os.cpu_count(),
                          "results": {k: {str(s): v for s, v in r.items()}
                                      for k, r in res.items()}}))
        return
    t = res["tpu_user"]
    print(f"torch tensors between two processes (tpu_user rendezvous: {impl}); "
          f"GB/s, median of {args.bw_iters}; round trip of {SMALL} bytes in us")
    print(f"{'path':<28}{'rtt p50':>9}{'rtt p90':>9}{'1 MiB':>9}{'64 MiB':>9}")
    for name, r in res.items():
        print(f"{name:<28}{r['rtt_us'][0]:9.1f}{r['rtt_us'][1]:9.1f}"
              f"{r[SIZES[0]]:9.2f}{r[SIZES[1]]:9.2f}")
    g = res["gloo"]
    print(f"tpu_user / gloo:       {t[SIZES[0]] / g[SIZES[0]]:.2f}x at 1 MiB, "
          f"{t[SIZES[1]] / g[SIZES[1]]:.2f}x at 64 MiB")
    h = res["tpu_user, THP memory"]
    print(f"tpu_user / C (mean):   {t[SIZES[0]] / c[SIZES[0]]:.2f}x at 1 MiB, "
          f"{t[SIZES[1]] / c[SIZES[1]]:.2f}x at 64 MiB (torch's memory); "
          f"{h[SIZES[0]] / c[SIZES[0]]:.2f}x, {h[SIZES[1]] / c[SIZES[1]]:.2f}x (THP memory, as C's)")
    print(f"round trip:            tpu_user {t['rtt_us'][0] - c['rtt_us'][0]:+.1f} us against C's")
    print(f"load: 1-minute load average {load0:.2f} before, {load1:.2f} after, "
          f"{os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
