"""A complete training script on Ringleader's strategy API: the same file runs under every TrainingJob strategy
(allreduce, parameter-server in any mode, local-sgd) and resumes from checkpoints. docs/trainer.md walks through it.

    python -u train_custom.py --steps 200     # in the trainer container of every rank
"""

from __future__ import annotations

import argparse

import ringleader_trainer
import torch
from ringleader_trainer.exitcodes import exit_now
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--save-final", help="worker 0 writes the final model's state_dict here")
    args = parser.parse_args()

    strategy = ringleader_trainer.from_env()  # rendezvous, and agree on the checkpoint to resume from

    torch.manual_seed(0)  # every rank builds the same model
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
    optimizer: torch.optim.Optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

    if strategy.is_server:  # parameter-server ranks hold a shard and apply the optimizer to it
        strategy.serve(model, optimizer)
        strategy.close()
        return

    strategy.set_total_steps(args.steps)  # kubectl get tj: progress in percent and an ETA
    model = strategy.distributed_model(model)  # DDP under allreduce
    optimizer = strategy.distributed_optimizer(optimizer, model)  # step() exchanges per the strategy
    checkpoints = strategy.checkpointer(model, optimizer)
    checkpoints.restore()  # no-op on a fresh start; strategy.steps_done is where to continue

    # Each worker's own data: here a seeded stream of a fixed linear target, different per rank.
    target = torch.linspace(-1, 1, 8)
    for step in range(strategy.steps_done, args.steps):
        g = torch.Generator().manual_seed(step * strategy.world_size + strategy.rank)
        x = torch.randn(32, 8, generator=g)
        y = (x @ target).unsqueeze(1)
        x, y = x.to(strategy.device), y.to(strategy.device)  # the model is there (a GPU when the pod has one)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        strategy.report(step + 1, loss.item(), batch_size=32)  # JSON log line; worker 0's metrics
        checkpoints.maybe_save(step + 1, progress={})
    checkpoints.save(args.steps, progress={})
    strategy.finish()  # local SGD's last average; parameter servers are told this worker is done
    if args.save_final and strategy.rank == 0:
        torch.save(checkpoints.model.state_dict(), args.save_final)
    strategy.close()


if __name__ == "__main__":
    main()
    exit_now(0)  # skip the interpreter's teardown, where torch's leftover threads can abort it (docs/trainer.md)
