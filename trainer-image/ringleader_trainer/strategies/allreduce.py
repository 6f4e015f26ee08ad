"""Data parallel by allreduce: DDP (gloo on CPU, NCCL on GPU), or Ringleader's own ring as DDP's hook. Every
worker holds the whole model and optimizer, so a lost worker's replacement heals from any survivor."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ringleader_trainer.checkpoints.training import HEALED_FROM
from ringleader_trainer.metrics import TrainerMetrics
from ringleader_trainer.strategies.ring import ring_allreduce
from ringleader_trainer.strategies.tools import patch_step
from ringleader_trainer.strategy import Strategy

BUCKETS = "ddp_buckets"  # in a live peer's state: DDP's gradient buckets there (parameter indices)


class AllreduceStrategy(Strategy):
    """Data parallel: gradients averaged over the workers every step (DDP buckets, overlapped with backward)."""

    name = "allreduce"
    heals = True
    trains_short = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._ddp: DistributedDataParallel | None = None

    def distributed_model(self, model: nn.Module) -> nn.Module:
        model = model.to(self.device)
        ids = [self.env.local_rank] if self.device.type == "cuda" else None
        peer = self.resumed if self.resumed is not None and HEALED_FROM in self.resumed else None
        if peer is None:
            ddp = DistributedDataParallel(model, device_ids=ids, process_group=self.workers_group)
        else:  # the survivors are mid-run: no start-up collectives, and their buckets, so sums add alike
            with bucket_layout(peer[BUCKETS]):
                ddp = DistributedDataParallel(model, device_ids=ids, process_group=self.workers_group, init_sync=False)
        self._ddp = ddp
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

        self.hold(model, optimizer)
        return patch_step(optimizer, exchange, local=True, after=self._advance, void=self._take_void)

    def live_state(self) -> dict[str, Any]:
        state = super().live_state()
        if self._ddp is not None:
            state[BUCKETS] = buckets_of(self._ddp)
        return state

    def _regroup(self) -> None:
        super()._regroup()
        if self._ddp is not None:
            self._ddp._update_process_group(self.workers_group or dist.group.WORLD)


def buckets_of(ddp: DistributedDataParallel) -> list[list[int]]:
    """DDP's gradient buckets now, in the order it reduces them, each as the indices of its parameters among
    the model's trainable ones. After its first step DDP orders them as the gradients became ready there."""
    params = [p for p in ddp.module.parameters() if p.requires_grad]
    index = {id(p): i for i, p in enumerate(params)}
    return [[index[id(p)] for p in bucket.parameters()] for bucket in ddp.reducer._get_zeros_like_grad_buckets()]


@contextlib.contextmanager
def bucket_layout(buckets: Sequence[Sequence[int]]) -> Iterator[None]:
    """Within: a new DistributedDataParallel starts with `buckets` (`buckets_of` a peer's) instead of its own
    first guess. Each element's sum over three or more ranks rounds as its place in the bucket says (gloo
    reduces chunks starting at different ranks), so a replacement that guessed differently from the survivors
    would train on sums that differ from theirs in the last bits for a step, and diverge from them. DDP takes
    its buckets from `dist._compute_bucket_assignment_by_size` (which it returns in reverse: it reverses them
    back); that one call is swapped for the peer's layout, each bucket's size limit being DDP's cap."""
    compute = dist._compute_bucket_assignment_by_size  # type: ignore[attr-defined]

    def peers(params: Any, limits: Sequence[int], *args: Any, **kwargs: Any) -> tuple[list[list[int]], list[int]]:
        return [list(b) for b in reversed(buckets)], [limits[-1]] * len(buckets)

    dist._compute_bucket_assignment_by_size = peers  # type: ignore[attr-defined,assignment]
    try:
        yield
    finally:
        dist._compute_bucket_assignment_by_size = compute  # type: ignore[attr-defined]


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
                ring_allreduce(buf, group=self.strategy.workers_group).div_(self.strategy.present)
            except BaseException as e:  # DDP raises it from backward()
                fut.set_exception(e)  # type: ignore[arg-type]  # torch's stub says T
            else:
                fut.set_result(buf)

        self.pool.submit(run)
        return fut
