# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""One rank of test_torch_dist_ddp.py: the same small model trained with
DistributedDataParallel twice from the same start, its gradients averaged
once by a Gloo group and once by the "tpu" default group, several buckets;
prints the largest difference between the two runs' final parameters, and
between this rank's and rank 0's.

    python3 torch_dist_ddp.py RANK WORLD INIT_METHOD [STEPS]
"""
import copy
import datetime
import json
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import tpu_user.torch  # noqa: F401


def train(model, group, rank, steps):
    ddp = DDP(model, process_group=group, bucket_cap_mb=0.05)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    for step in range(steps):
        g = torch.Generator().manual_seed(1000 * step + rank)
        x = torch.randn(16, 32, generator=g)
        y = torch.randn(16, 4, generator=g)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()]), loss.item()


def main():
    rank, n, init = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    steps = int(sys.argv[4]) if len(sys.argv) > 4 else 30
    torch.set_num_threads(1)
    timeout = datetime.timedelta(seconds=60)
    dist.init_process_group("tpu", init_method=init, rank=rank, world_size=n, timeout=timeout)
    gloo = dist.new_group(backend="gloo", timeout=timeout)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                                torch.nn.Tanh(), torch.nn.Linear(64, 4))
    with torch.no_grad():        # ranks start apart: DDP must take rank 0's
        for p in model.parameters():
            p.add_(0.01 * rank)
    start = torch.cat([p.detach().flatten() for p in model.parameters()])
    p_gloo, loss_gloo = train(copy.deepcopy(model), gloo, rank, steps)
    p_tpu, loss_tpu = train(copy.deepcopy(model), None, rank, steps)
    zero = p_tpu.clone()
    dist.broadcast(zero, 0, group=gloo)
    print(json.dumps({"rank": rank, "params": p_tpu.numel(),
                      "moved": (p_tpu - start).abs().max().item(),
                      "vs_gloo": (p_tpu - p_gloo).abs().max().item(),
                      "scale": p_gloo.abs().max().item(),
                      "vs_rank0": (p_tpu - zero).abs().max().item(),
                      "loss_tpu": loss_tpu, "loss_gloo": loss_gloo}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
