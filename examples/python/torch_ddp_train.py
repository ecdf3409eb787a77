#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""An ordinary DistributedDataParallel training script; the only lines that
name this project are `import tpu_user.torch` and the backend "tpu".

    torchrun --nproc_per_node 2 examples/python/torch_ddp_train.py

(or any launcher that sets MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE).
Prints the final loss and a checksum of the weights, the same on every rank.
"""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import tpu_user.torch  # noqa: F401  (registers the backend "tpu")


def main():
    dist.init_process_group("tpu")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                    torch.nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    # y = sum of x's first half; each rank its own shard of the samples.
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(256, 16, generator=g)
    y = x[:, :8].sum(1, keepdim=True)
    for step in range(40):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    total = torch.tensor([loss.item()])
    dist.all_reduce(total)
    checksum = sum(p.detach().double().sum().item() for p in model.parameters())
    print(f"rank {rank}/{world}: mean loss {total.item() / world:.4f} "
          f"weights checksum {checksum:.10f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
