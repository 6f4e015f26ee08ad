"""Pipeline parallelism with GPipe's schedule (`torch.distributed.pipelining`), optionally times data-parallel
replicas (RINGLEADER_PIPELINE_STAGES, RINGLEADER_PIPELINE_MICRO_BATCHES; spec.pipeline).

The model, an `nn.Sequential`, is cut into `stages` consecutive parts of about equal parameter count; worker
`replica x stages + stage` holds part `stage` of pipeline `replica`. Each batch is split into `micro_batches`;
GPipe runs every micro-batch's forward pass through the stages, then every backward pass, and the stage's
gradients are the mean over the micro-batches (the whole batch's gradient, as one unsplit model computes it).
With several replicas the gradients of each stage are then averaged over its replicas, and each replica reads
its own share of the data. The idle share of a step, GPipe's bubble, is (stages - 1) / (micro_batches +
stages - 1).

Each worker's checkpoint holds its stage's parameters and optimizer state under the whole model's parameter
names.

Healing: the replicas of a stage hold the same parameters and optimizer state (they step on the same averaged
gradients), so with two or more pipelines a lost worker's replacement receives its stage's state from a live
replica of that stage (`healing.newest_serves` by stage) and the interrupted step is done again; the gradients
are averaged over the replicas inside `forward_backward`, so a replica lost there is healed from there too.
The stages average over separate groups, so one stage's replicas could complete their averaging and step while
another's could not (a worker lost between the two), leaving no live rank with the latter stage at the newest
step; a commit over every worker after the averaging (`Strategy.commit_step`) keeps every rank from stepping
until every stage's averaging completed, and a rank whose commit failed where a peer's completed applies its
averaged gradients while healing.
With one pipeline nobody holds a lost stage but the checkpoint: every worker resumes from the newest complete
one.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

from ringleader_trainer.elastic import healing
from ringleader_trainer.exitcodes import StrategyUsageError
from ringleader_trainer.strategies.tools import materialize, own_stream, patch_step, rebuild_optimizer
from ringleader_trainer.strategy import LossFn, Strategy


def split_stages(sizes: Sequence[int], stages: int) -> list[range]:
    """Cut modules of `sizes` parameters (in order) into `stages` consecutive runs of about equal totals, each
    starting with a module that has parameters (one without goes with the run before it): each cut is the
    allowed one whose running total is nearest the next equal share, leaving an allowed cut for every later one.
    ValueError when there are fewer modules with parameters than stages."""
    allowed = [j for j in range(1, len(sizes)) if sizes[j] > 0]
    if stages < 1 or len(allowed) < stages - 1 or not any(sizes):
        with_params = sum(1 for s in sizes if s > 0)
        raise ValueError(f"a model of {with_params} modules with parameters cannot make {stages} pipeline stages")
    prefix = list(itertools.accumulate(sizes, initial=0))
    total = prefix[-1]
    cuts = [0]
    for k in range(1, stages):
        usable = [j for j in allowed if j > cuts[-1]]
        usable = usable[: len(usable) - (stages - 1 - k)]
        cuts.append(min(usable, key=lambda j: abs(prefix[j] * stages - total * k)))
    return [range(a, b) for a, b in zip(cuts, [*cuts[1:], len(sizes)], strict=True)]


class PipelineStrategy(Strategy):
    """GPipe over `stages` workers per pipeline, `world_size / stages` pipelines averaging their gradients."""

    name = "pipeline"
    materializes_meta = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        settings = self.env.pipeline
        if settings is None:
            raise StrategyUsageError("strategy pipeline needs RINGLEADER_PIPELINE_STAGES")
        self.stages, self.micro_batches = settings.stages, settings.micro_batches
        self.replica, self.stage = divmod(self.env.index, self.stages)
        self.replicas = self.env.num_workers // self.stages
        self.heals = self.replicas > 1  # a stage's replica serves it
        self._pipe: PipelineStage | None = None
        self._schedule: tuple[LossFn, ScheduleGPipe] | None = None
        self._evaluator: ScheduleGPipe | None = None
        self._batch: int | None = None
        self._layout: list[list[tuple[str, torch.Size, torch.dtype]]] = []

    # Every worker creates every group, in the same order (torch.distributed requires it), watched with the job's.
    def _groups(self) -> None:
        with self.rendezvous.watched():
            pipes = [dist.new_group([r * self.stages + s for s in range(self.stages)]) for r in range(self.replicas)]
            replicas = [dist.new_group([r * self.stages + s for r in range(self.replicas)])
                        for s in range(self.stages)]  # fmt: skip
        pipe, replica = pipes[self.replica], replicas[self.stage]
        if not isinstance(pipe, dist.ProcessGroup) or not isinstance(replica, dist.ProcessGroup):
            raise StrategyUsageError("this worker is not in its own pipeline's groups")  # new_group's non-member
        self.pipeline_group, self.replica_group = pipe, replica
        self.point_to_point_groups.add(pipe.group_name)  # its stages send and receive: counts differ by stage

    @property
    def data_rank(self) -> int:
        return self.replica

    @property
    def data_parallel_size(self) -> int:
        return self.replicas

    @property
    def last_stage_rank(self) -> int:
        return self.replica * self.stages + self.stages - 1

    def distributed_model(self, model: nn.Module) -> nn.Module:
        if not isinstance(model, nn.Sequential):
            raise StrategyUsageError(f"strategy pipeline splits an nn.Sequential into stages; this model is a "
                                     f"{type(model).__name__}")  # fmt: skip
        try:
            parts = split_stages([sum(p.numel() for p in m.parameters()) for m in model], self.stages)
        except ValueError as e:
            raise StrategyUsageError(f"{e} (spec.pipeline.stages)") from None
        self._groups()
        names = list(model._modules)
        self._names = {id(p): name for name, p in model.named_parameters()}
        self._layout = [
            [(f"{names[i]}.{k}", v.shape, v.dtype) for i in part for k, v in model[i].state_dict().items()]
            for part in parts
        ]
        # The stage keeps the whole model's module names, so its state_dict and checkpoints use the model's.
        mine = nn.Sequential(OrderedDict((names[i], model[i]) for i in parts[self.stage]))
        if any(p.is_meta for p in mine.parameters()):  # allocate this stage only; the stage's replicas agree
            materialize(mine, self.device, own_stream(self.stage))
        mine = mine.to(self.device)
        self._pipe = PipelineStage(mine, self.stage, self.stages, self.device, group=self.pipeline_group)
        return mine

    def distributed_optimizer(self, optimizer: torch.optim.Optimizer, model: nn.Module) -> torch.optim.Optimizer:
        """The optimizer over this stage's parameters only (the others are not this worker's to step), its
        step() first averaging the stage's gradients over the replicas."""
        stage_optimizer = rebuild_optimizer(optimizer, self._names, model, keep_missing=False)

        def exchange() -> None:  # the gradients were averaged over the replicas in forward_backward
            self.communication_rounds += 1

        if self.heals:
            self.hold(model, stage_optimizer)
        return patch_step(stage_optimizer, exchange, local=True, after=self._advance, void=self._take_void)

    def _forward_backward(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn: LossFn) -> float:
        """One GPipe step over the micro-batches of (x, y); the batch's mean loss, on every stage."""
        if self._pipe is None:
            raise StrategyUsageError("call distributed_model(model) before forward_backward()")
        if x.shape[0] % self.micro_batches:
            raise StrategyUsageError(f"a batch of {x.shape[0]} samples does not split into {self.micro_batches} "
                                     "micro-batches (spec.pipeline.microBatches)")  # fmt: skip
        if self._schedule is None or self._schedule[0] is not loss_fn:
            self._schedule = (loss_fn, ScheduleGPipe(self._pipe, self.micro_batches, loss_fn=loss_fn))
        schedule = self._schedule[1]
        self._batch = x.shape[0]
        self.metrics.entered_exchange()
        losses: list[torch.Tensor] = []
        inputs = (x.to(self.device),) if self._pipe.is_first else ()
        target = y.to(self.device) if self._pipe.is_last else None
        schedule.step(*inputs, target=target, losses=losses)
        loss = torch.stack(losses).mean().detach() if losses else torch.zeros((), device=self.device)
        dist.broadcast(loss, src=self.last_stage_rank, group=self.pipeline_group)  # the last stage has it
        if self.replicas > 1:
            grads = [p.grad for p in self._pipe.submod.parameters() if p.grad is not None]
            self.average_(grads, self.replica_group, self.replicas)
            self.commit_step()  # a stage's replicas may complete their averaging where another stage's fail
        else:
            self.metrics.left_exchange()
        return float(loss.item())

    def evaluate(self, model: nn.Module, x: torch.Tensor, score: Callable[[torch.Tensor], float]) -> float:
        """`score` of the whole model's outputs for x, computed on the last stage and given to every stage.
        x runs in chunks of the training batch (the stages' buffers have its shape), the last one padded."""
        if self._pipe is None:
            raise StrategyUsageError("call distributed_model(model) before evaluate()")
        if self._evaluator is None:
            self._evaluator = ScheduleGPipe(self._pipe, self.micro_batches)
        chunk = self._batch or self.micro_batches
        outputs = []
        with torch.no_grad():
            for start in range(0, x.shape[0], chunk):
                part = x[start : start + chunk]
                padded = torch.cat([part, part.new_zeros((chunk - part.shape[0], *part.shape[1:]))])
                out = self._evaluator.eval(padded.to(self.device)) if self._pipe.is_first else self._evaluator.eval()
                if self._pipe.is_last:
                    outputs.append(out[: part.shape[0]])
        value = torch.tensor([score(torch.cat(outputs)) if outputs else 0.0], dtype=torch.float64)
        dist.broadcast(value, src=self.last_stage_rank, group=self.pipeline_group)
        return float(value.item())

    # ---- healing (elastic/healing.py) ----------------------------------------------------------------------------
    def heal_plan(self, reports: Sequence[healing.Report]) -> healing.Plan | None:
        """Each rank short of the newest step receives its stage from a replica of that stage (worker i holds
        stage i % stages; a group heals with every worker, never short of one)."""
        return healing.newest_serves(reports, parts=self.stages)

    def _regroup(self) -> None:
        """The pipelines' and the replicas' groups built anew on the new group, the stage's module kept (a new
        PipelineStage and schedules: they hold the group, and a failed step left them mid-schedule)."""
        super()._regroup()
        if self._pipe is not None:
            self._groups()
            self._pipe = PipelineStage(self._pipe.submod, self.stage, self.stages, self.device,
                                       group=self.pipeline_group)  # fmt: skip
            self._schedule = self._evaluator = None

    def full_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The whole model's parameters on worker 0, sent by each stage of the first pipeline as plain tensors
        in the layout `distributed_model` recorded (no pickle on the wire); the other workers get {}."""
        if self.replica:
            return {}
        if self.stage:
            for tensor in model.state_dict().values():
                dist.send(tensor.detach().cpu().contiguous(), dst=0)
            return {}
        state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        for stage in range(1, self.stages):
            for name, shape, dtype in self._layout[stage]:
                state[name] = torch.empty(shape, dtype=dtype)
                dist.recv(state[name], src=stage)
        return state
