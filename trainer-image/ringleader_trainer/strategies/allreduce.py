"""Data parallel by allreduce: DDP (gloo on CPU, NCCL on GPU), or Ringleader's own ring as DDP's hook."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ringleader_trainer.metrics import TrainerMetrics
from ringleader_trainer.ring import ring_allreduce
from ringleader_trainer.strategy import Strategy, patch_step


class AllreduceStrategy(Strategy):
    """Data parallel: gradients averaged over the workers every step (DDP buckets, overlapped with backward)."""

    name = "allreduce"

    def distributed_model(self, model: nn.Module) -> nn.Module:
        model = model.to(self.device)
        ids = [self.env.local_rank] if self.device.type == "cuda" else None
        ddp = DistributedDataParallel(model, device_ids=ids, process_group=self.workers_group)
        if self.options.allreduce == "ring":
            hook = RingHook(self)
            # A lambda: DDP checks a hook's annotations against real types, and ours are strings here.
            ddp.register_comm_hook(None, lambda state, bucket: hook(bucket))
        self._stamp_exchange(ddp)
        return ddp

    def _stamp_exchange(self, ddp: DistributedDataParallel) -> None:  # bench/stall_bench.py turns it off
        stamp_exchange(ddp, self.metrics)

    def distributed_optimizer(self, optimizer: torch.optim.Optimizer, model: nn.Module) -> torch.optim.Optimizer:
        params = [p for p in model.parameters() if p.requires_grad]

        def exchange() -> None:
            if isinstance(model, DistributedDataParallel):  # DDP has averaged them during backward
                self.metrics.left_exchange()
            else:
                self.average_([p.grad for p in params if p.grad is not None])
            self.communication_rounds += 1

        return patch_step(optimizer, exchange, local=True, after=self._advance)


def stamp_exchange(ddp: DistributedDataParallel, metrics: TrainerMetrics) -> None:
    """Stamp the moment this rank's gradients start going out (its metrics' exchange_started): when the first
    gradient of the step is accumulated, DDP's first bucket is about to be launched. A rank stuck before
    that (in its forward pass, a read, a sleep) has not entered the exchange its peers wait in. A hook on the
    last parameter (in backward's order, about the first ready) and on the first (the last ready, in case
    the other has no gradient this step): two calls a step, costing nothing measurable, where a Python comm
    hook doing the allreduce itself added about 60 us to every step of the digits MLP (10 % on one rank)."""
    params = [p for p in ddp.parameters() if p.requires_grad]
    for p in {id(q): q for q in (params[:1] + params[-1:])}.values():
        p.register_post_accumulate_grad_hook(lambda _: metrics.entered_exchange())


class RingHook:
    """DDP communication hook: average each gradient bucket with our ring, on one background thread, so the
    exchange of a ready bucket overlaps the backward pass computing the next (as gloo's own allreduce does).
    One thread keeps the buckets in DDP's order, which is the same on every rank, as the ring's links need."""

    def __init__(self, strategy: Strategy) -> None:
        self.strategy = strategy
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ring-hook")

    def __call__(self, bucket: Any) -> torch.futures.Future[torch.Tensor]:
        buf: torch.Tensor = bucket.buffer()
        fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()

        def run() -> None:
            try:
                ring_allreduce(buf, group=self.strategy.workers_group).div_(self.strategy.world_size)
            except BaseException as e:  # DDP raises it from backward()
                fut.set_exception(e)  # type: ignore[arg-type]  # torch's stub says T
            else:
                fut.set_result(buf)

        self.pool.submit(run)
        return fut
