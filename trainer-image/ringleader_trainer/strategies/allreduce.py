"""Data parallel by allreduce: DDP (gloo on CPU, NCCL on GPU), or Ringleader's own ring as DDP's hook."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from ringleader_trainer.ring import ring_allreduce
from ringleader_trainer.strategy import Strategy, patch_step


class AllreduceStrategy(Strategy):
    """Data parallel: gradients averaged over the workers every step (DDP buckets, overlapped with backward)."""

    name = "allreduce"

    def distributed_model(self, model: nn.Module) -> nn.Module:
        model = model.to(self.device)
        ids = [self.env.local_rank] if self.device.type == "cuda" else None
        ddp = DistributedDataParallel(model, device_ids=ids, process_group=self.workers_group)
        hook = RingHook(self) if self.options.allreduce == "ring" else NativeHook(self)
        # A lambda: DDP checks a hook's annotations against real types, and ours are strings here.
        ddp.register_comm_hook(None, lambda state, bucket: hook(bucket))
        return ddp

    def distributed_optimizer(self, optimizer: torch.optim.Optimizer, model: nn.Module) -> torch.optim.Optimizer:
        params = [p for p in model.parameters() if p.requires_grad]

        def exchange() -> None:
            if isinstance(model, DistributedDataParallel):  # DDP has averaged them during backward
                self.metrics.left_exchange()
            else:
                self.average_([p.grad for p in params if p.grad is not None])
            self.communication_rounds += 1

        return patch_step(optimizer, exchange, local=True, after=self._advance)


class NativeHook:
    """DDP communication hook: torch's own allreduce of each bucket (`default_hooks.allreduce_hook`, what DDP
    does without a hook), with the moment this rank enters the step's exchange stamped: a rank stuck before
    its backward pass has not, while its peers wait in the collective (what names it when the job stalls)."""

    def __init__(self, strategy: Strategy) -> None:
        self.strategy = strategy

    def __call__(self, bucket: Any) -> torch.futures.Future[torch.Tensor]:
        self.strategy.metrics.entered_exchange()
        return default_hooks.allreduce_hook(self.strategy.workers_group, bucket)  # type: ignore[arg-type]


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
        self.strategy.metrics.entered_exchange()

        def run() -> None:
            try:
                ring_allreduce(buf, group=self.strategy.workers_group).div_(self.strategy.world_size)
            except BaseException as e:  # DDP raises it from backward()
                fut.set_exception(e)  # type: ignore[arg-type]  # torch's stub says T
            else:
                fut.set_result(buf)

        self.pool.submit(run)
        return fut
