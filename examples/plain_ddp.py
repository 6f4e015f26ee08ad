"""An ordinary torchrun-style DDP script with no Ringleader imports: under `strategy: allreduce` the operator
writes MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE and LOCAL_RANK, so it runs unchanged."""

from __future__ import annotations

import datetime
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(50):
        g = torch.Generator().manual_seed(step * world + rank)
        x = torch.randn(16, 4, generator=g)
        loss = nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    weights = model.module.weight.detach().clone()
    gathered = [torch.empty_like(weights) for _ in range(world)]
    dist.all_gather(gathered, weights)
    assert all(torch.equal(w, weights) for w in gathered), "replicas diverged"
    print(f"rank {rank}/{world}: final loss {loss.item():.4f}, replicas identical", flush=True)
    # Every rank's last collective is finished before any rank tears its connections down.
    dist.barrier()
    dist.destroy_process_group()
    # torch's gloo backend frees a finished collective's tensors on its own worker thread, which needs the GIL.
    # A script that exits the instant its last collective returns can reach interpreter shutdown first; that
    # thread then aborts the process ("terminate called without an active exception", exit -6) after all the
    # work is done: 3 runs in 50 here. A short pause lets it finish (0 aborts in 100 runs).
    time.sleep(0.1)


if __name__ == "__main__":
    main()
