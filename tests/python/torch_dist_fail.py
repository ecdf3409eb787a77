# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""One rank of test_torch_dist_fail.py: a failure the "tpu" backend must
turn into a RuntimeError within its bound.  Prints one JSON line per
operation that was expected to fail: {"op", "raised", "s", "msg"}.

    python3 torch_dist_fail.py MODE RANK WORLD INIT_METHOD TIMEOUT_S

MODE kill: the last rank dies (SIGKILL) in the middle of an all_reduce;
nojoin: only some ranks start; timeout: rank 1 never joins rank 0's
all_reduce and recv; mismatch: the ranks' tensors differ in size.
"""
import datetime
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import tpu_user.torch  # noqa: F401


def expect_error(op, fn):
    t0 = time.monotonic()
    try:
        fn()
        res = {"op": op, "raised": False}
    except RuntimeError as e:
        res = {"op": op, "raised": True, "msg": str(e)[:500]}
    res["s"] = round(time.monotonic() - t0, 3)
    print(json.dumps(res), flush=True)


def main():
    mode, rank, n, init = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    timeout = datetime.timedelta(seconds=float(sys.argv[5]))
    if mode == "nojoin":
        expect_error("init_process_group", lambda: dist.init_process_group(
            "tpu", init_method=init, rank=rank, world_size=n, timeout=timeout))
        return
    dist.init_process_group("tpu", init_method=init, rank=rank, world_size=n, timeout=timeout)
    dist.barrier()
    if mode == "kill":
        big = torch.ones(1 << 22)             # 16 MiB: the others are mid-transfer
        if rank == n - 1:
            dist.all_reduce(torch.ones(1 << 22), async_op=True)
            time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGKILL)
        def loop():
            for _ in range(20):
                dist.all_reduce(big)
        expect_error("all_reduce", loop)
    elif mode == "timeout":
        if rank == 1:
            time.sleep(3 * timeout.total_seconds() + 2)
            os._exit(0)                       # no destroy_process_group either
        expect_error("all_reduce", lambda: dist.all_reduce(torch.ones(10)))
        expect_error("recv", lambda: dist.recv(torch.ones(10), 1))
    elif mode == "mismatch":
        expect_error("all_reduce", lambda: dist.all_reduce(torch.ones(1000 + rank)))
        bsub = dist.new_group()
        # On a shared segment the root may return before the others read its
        # call: it fails its next one instead, once a reader failed (forming
        # the next group waits for every rank).
        expect_error("broadcast", lambda: dist.broadcast(torch.ones(1000 + rank), 0, group=bsub))
        sub = dist.new_group()
        expect_error("broadcast_again", lambda: dist.broadcast(torch.ones(1000), 0, group=bsub))
        expect_error("all_gather_into_tensor", lambda: dist.all_gather_into_tensor(
            torch.zeros(n * (7 + rank)), torch.ones(7 + rank), group=sub))


if __name__ == "__main__":
    main()
