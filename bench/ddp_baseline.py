"""A plain torchrun DDP script doing the trainer's `wide-mlp` work, as the baseline for the trainer's overhead.

    python -m torch.distributed.run --standalone --nproc-per-node 2 bench/ddp_baseline.py [--steps 40]

The same model shape (~25M parameters: 1024 -> 3 x 3280 -> 10), the same synthetic data (Gaussian inputs
labelled by a random linear teacher, 8192 samples, 7/8 for training), each rank's disjoint shard of 64 samples a
step, SGD with momentum 0.9 at lr 0.01, gloo on the CPU. Nothing of Ringleader is imported: this is what a user
would write by hand. Rank 0 prints a JSON line with the throughput of every `--log-every` steps, the same
window the trainer logs.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=64)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8192, 1024, generator=g)
    y = (x @ torch.randn(1024, 10, generator=g)).argmax(dim=1)
    train = TensorDataset(x[: 8192 - 8192 // 8], y[: 8192 - 8192 // 8])
    torch.manual_seed(0)
    hidden = 3280
    model = DistributedDataParallel(
        nn.Sequential(
            nn.Linear(1024, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, 10),
        )
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    sampler: DistributedSampler[tuple[torch.Tensor, ...]] = DistributedSampler(
        train, num_replicas=world, rank=rank, shuffle=True, seed=0, drop_last=True
    )
    step, epoch = 0, 0
    window = (time.perf_counter(), 0)
    while step < args.steps:
        sampler.set_epoch(epoch)
        for xb, yb in DataLoader(train, batch_size=args.batch_size, sampler=sampler):
            optimizer.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            optimizer.step()
            step += 1
            if step % args.log_every == 0:
                now = time.perf_counter()
                rate = (step - window[1]) * args.batch_size * world / (now - window[0])
                window = (now, step)
                if rank == 0:
                    print(json.dumps({"step": step, "loss": round(loss.item(), 6), "samples_per_second": rate}),
                          flush=True)  # fmt: skip
            if step >= args.steps:
                break
        epoch += 1
    dist.barrier()  # as in examples/plain_ddp.py: no rank closes its connections while a peer still uses them
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
