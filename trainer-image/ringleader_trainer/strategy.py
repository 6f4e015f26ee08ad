"""The strategy API: a few calls that make one training script run under whichever strategy the TrainingJob
names (docs/trainer.md has the complete example).

    strategy = ringleader_trainer.from_env()           # rendezvous; agrees on the checkpoint to resume from
    model, optimizer = build()                         # same seed on every rank
    if strategy.is_server:                             # parameter-server shards serve, then return
        strategy.serve(model, optimizer)
        return strategy.close()
    model = strategy.distributed_model(model)          # DDP under allreduce; unchanged otherwise
    optimizer = strategy.distributed_optimizer(optimizer, model)  # step() now exchanges as the strategy says
    checkpoints = strategy.checkpointer(model, optimizer)
    progress = checkpoints.restore() or {}             # the `progress` dict saved with the checkpoint
    for step in range(strategy.steps_done, total):
        ...; optimizer.zero_grad(); loss.backward(); optimizer.step()
        strategy.report(step + 1, loss.item(), batch_size)
        checkpoints.maybe_save(step + 1, progress={...})
    checkpoints.save(total, progress={...})
    strategy.finish(); strategy.close()

One process group spans every rank (workers, then shards: RINGLEADER_GLOBAL_RANK); the workers' collectives
run in a sub-group of the workers. Every wait is bounded: the rendezvous by `rendezvous_timeout`, collectives
and parameter-server exchanges by `timeout`. Failures raise the exceptions `exitcodes.exit_code_for` maps to
the documented exit codes.

This module holds the API every strategy offers (`Strategy`, `Options`); the strategies are in `strategies/`,
the rendezvous in `rendezvous.py`, checkpoints and the resume agreement in `checkpointing.py`, and
`startup.from_env` puts them together.
"""

from __future__ import annotations

import contextlib
import datetime
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ringleader_trainer import checkpoint as ckpt
from ringleader_trainer import flightrecorder
from ringleader_trainer.checkpointing import TrainingCheckpointer
from ringleader_trainer.env import RankEnv, Role
from ringleader_trainer.exitcodes import ExitCode, TrainerError
from ringleader_trainer.logs import log_json
from ringleader_trainer.metrics import TrainerMetrics
from ringleader_trainer.ps import ServerStats, flat_views
from ringleader_trainer.ring import ring_allreduce
from ringleader_trainer.stopping import Stopped, StopSignal, StopVote

ALLREDUCE_IMPLEMENTATIONS = ("native", "ring")


class StrategyUsageError(TrainerError):
    """The script called the API in a way this rank's strategy cannot honour."""

    exit_code = ExitCode.BAD_CONFIG


@dataclass(frozen=True)
class Options:
    rendezvous_timeout: float = 300.0  # seconds to reach the master and every peer at start
    timeout: float = 300.0  # seconds any one collective or parameter-server exchange may take
    allreduce: str = "native"  # "native": torch.distributed (gloo on CPU, NCCL on GPU); "ring": ours
    log_every: int = 20  # steps between JSON log lines (`report`)


class Strategy:
    """What every strategy offers; `from_env` returns the subclass the environment names."""

    name = ""
    # Whether distributed_model() takes a model built on the meta device (no memory yet) and allocates it:
    # under sharded each worker then allocates only its shard.
    materializes_meta = False

    def __init__(self, env: RankEnv, options: Options) -> None:
        self.env, self.options = env, options
        self.timeout = datetime.timedelta(seconds=options.timeout)
        self.steps_done = 0  # optimizer steps completed, counting those before a resume
        self.communication_rounds = 0  # exchanges of gradients or parameters this process made
        self.metrics = TrainerMetrics()
        # Process groups this strategy also sends and receives in (their members' collective numbers differ
        # by what each sent): the flight recorder's numbers of those are not compared, so not shown.
        self.point_to_point_groups: set[str] = set()
        self.metrics.watch_collectives(lambda: flightrecorder.read(self.point_to_point_groups))
        self.workers_group: dist.ProcessGroup | None = None
        self.checkpoints: ckpt.Checkpointer | None = None
        self.resumed: dict[str, Any] | None = None
        self.stop = StopSignal()  # installed by `enable_stop`
        self._vote: StopVote | None = None
        # Each parameter's name, by its id, as distributed_model() received it: rebuild_optimizer() finds the
        # parameters a strategy replaced (sharding, a pipeline stage) by them. None until distributed_model().
        self._names: dict[int, str] | None = None
        self._log_window = (time.perf_counter(), 0)  # (time, step) at the last report; reset at resume

    # ---- identity -----------------------------------------------------------------------------------
    @property
    def is_server(self) -> bool:
        return self.env.role == Role.PS

    @property
    def is_worker(self) -> bool:
        return self.env.role == Role.WORKER

    @property
    def rank(self) -> int:
        """The worker's index (torchrun's RANK); parameter servers have none."""
        if self.env.worker is None:
            raise StrategyUsageError("parameter-server ranks have no worker rank")
        return self.env.worker.rank

    @property
    def world_size(self) -> int:
        """The number of workers."""
        return self.env.num_workers

    @property
    def data_rank(self) -> int:
        """Which share of the data this worker reads (`data.shard_loader`): its rank; under pipeline, its
        pipeline's index (every stage of a pipeline reads the same batches)."""
        return self.rank

    @property
    def data_parallel_size(self) -> int:
        """Into how many shares the data is split: the workers; under pipeline, the pipelines."""
        return self.world_size

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", self.env.local_rank) if torch.cuda.is_available() else torch.device("cpu")

    # ---- the calls a script makes -------------------------------------------------------------------
    def distributed_model(self, model: nn.Module) -> nn.Module:
        return model.to(self.device)

    def distributed_optimizer(self, optimizer: torch.optim.Optimizer, model: nn.Module) -> torch.optim.Optimizer:
        """The same optimizer object, its `step()` now doing this strategy's exchange."""
        raise NotImplementedError

    def serve(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> ServerStats:
        raise StrategyUsageError(f"strategy {self.name} has no parameter servers; serve() is for ps ranks")

    def checkpointer(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> TrainingCheckpointer:
        return TrainingCheckpointer(self, model, optimizer, saves_model=True)

    def forward_backward(
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> float:
        """loss_fn(model(x), y), its gradients accumulated by backward(); returns the loss. Under pipeline, the
        GPipe schedule over the micro-batches, and the batch's loss on every stage."""
        loss = loss_fn(model(x.to(self.device)), y.to(self.device))
        loss.backward()
        return float(loss.item())

    def evaluate(self, model: nn.Module, x: torch.Tensor, score: Callable[[torch.Tensor], float]) -> float:
        """score(model's outputs for x), without gradients (a collective under sharded and pipeline: every
        worker calls it, and every worker gets the score)."""
        with torch.no_grad():
            return score(model(x.to(self.device)))

    def final_model(self, model: nn.Module) -> nn.Module:
        """The trained model to evaluate, as `distributed_model` returned it or unwrapped (under sharded, a
        collective: every worker calls it and runs its forward pass)."""
        return unwrap(model)

    def full_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The whole model's state_dict on worker 0 (under sharded, a collective: every worker calls it, and
        only worker 0's holds the tensors)."""
        return self.final_model(model).state_dict()

    def set_total_steps(self, steps: int) -> None:
        """Say how many steps the run takes: the operator shows progress in percent and an ETA from it."""
        self.metrics.total_steps.set(steps)

    def report(self, step: int, loss: float, batch_size: int, **extra: Any) -> None:
        """Call after each step: every `log_every` steps, log a JSON line and (worker 0) update the metrics."""
        self.metrics.reached(step)
        if step % self.options.log_every:
            return
        t0, s0 = self._log_window
        now = time.perf_counter()
        elapsed = max(now - t0, 1e-9)
        rate = (step - s0) * batch_size * self.data_parallel_size / elapsed
        self._log_window = (now, step)
        self.metrics.update(step, loss, rate, elapsed / (step - s0) if step > s0 else None)
        log_json(
            role=self.env.role, index=self.env.index, strategy=self.name, step=step, loss=round(loss, 6),
            samples_per_second=round(rate, 1), rounds=self.communication_rounds, **extra,
        )  # fmt: skip

    def average_(
        self, tensors: Sequence[torch.Tensor], group: dist.ProcessGroup | None = None, size: int | None = None
    ) -> None:
        """Replace each tensor by its mean over the workers (or over `group`, of `size` ranks), in one allreduce
        of their concatenation."""
        if not tensors:
            return
        with torch.no_grad():
            flat = torch.cat([t.detach().reshape(-1) for t in tensors])
            self.metrics.entered_exchange()
            if group is None:
                self.allreduce_(flat).div_(self.world_size)
            else:
                dist.all_reduce(flat, group=group)
                flat.div_(size or dist.get_world_size(group))
            self.metrics.left_exchange()
            for t, mean in zip(tensors, flat_views(flat, tensors), strict=True):
                t.copy_(mean)

    def allreduce_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum over the workers in place, with the configured implementation."""
        if self.options.allreduce == "ring":
            return ring_allreduce(tensor, group=self.workers_group)
        dist.all_reduce(tensor, group=self.workers_group)
        return tensor

    def finish(self) -> None:
        """After the last step: complete any pending exchange."""

    # ---- lossless stop (stopping.py) ----------------------------------------------------------------
    def enable_stop(self) -> None:
        """Take SIGTERM as a request to stop at an agreed step with a checkpoint there (`from_env` calls
        this once the group is formed, when the job checkpoints)."""
        self.stop.install()
        self._vote = StopVote(self.workers_group, self.metrics)

    def stop_agreed(self) -> bool:
        """Whether the workers stop at this step boundary: called by every worker after every step
        (`TrainingCheckpointer.maybe_save`), True on all of them at the same step."""
        return self._vote is not None and self._vote.poll(self.stop.requested)

    def stop_step(self, step: int) -> int:
        """The step this worker's stop is saved as, once `stop_agreed` said it stops after `step`: that step,
        which every worker shares (a strategy whose workers run at their own pace names another)."""
        return step

    def stopped(self, step: int) -> Stopped:
        """The exception that ends this rank after its checkpoint at `step` (the stop it agreed to)."""
        return Stopped(step, signalled=self.stop.requested)

    def close(self) -> None:
        """Leave the process group once every rank is done (worker 0 hosts the rendezvous store)."""
        if self._vote is not None:
            self._vote.drain()
        if dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()

    # ---- shared helpers -----------------------------------------------------------------------------
    def _advance(self) -> None:
        self.steps_done += 1


def patch_step(
    optimizer: torch.optim.Optimizer, before: Callable[[], None], local: bool, after: Callable[[], None]
) -> torch.optim.Optimizer:
    """`optimizer` with its step() running `before`, then (if `local`) the original step, then `after`."""
    if getattr(optimizer, "_ringleader_distributed", False):
        raise StrategyUsageError("distributed_optimizer() was already applied to this optimizer")
    original = optimizer.step

    def step(closure: Callable[[], float] | None = None) -> float | None:
        before()
        loss = original(closure) if local else None
        after()
        return loss

    optimizer.step = step  # type: ignore[method-assign,assignment]
    optimizer._ringleader_distributed = True  # type: ignore[attr-defined]
    return optimizer


def unwrap(model: nn.Module) -> nn.Module:
    """The model itself, out of DistributedDataParallel's wrapper if it is in one."""
    return model.module if isinstance(model, DistributedDataParallel) else model


def own_stream(index: int) -> int:
    """A seed of its own for the `index`-th part of a model (a shard, a stage), derived from the seed the
    script set, so the parts' initial values are not copies of one another."""
    return torch.initial_seed() + 1_000_003 * (index + 1)


def materialize(model: nn.Module, device: torch.device, seed: int) -> None:
    """Allocate a module built on the meta device (or what a strategy kept of it) on `device`, initialized as
    its modules' reset_parameters() do, drawing from `seed` (the caller's random state is left as it was)."""
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        model.to_empty(device=device)
        for module in model.modules():
            if callable(reset := getattr(module, "reset_parameters", None)):
                reset()


def rebuild_optimizer(
    optimizer: torch.optim.Optimizer, names: dict[int, str] | None, model: nn.Module, keep_missing: bool = True
) -> torch.optim.Optimizer:
    """A new optimizer of `optimizer`'s class and settings over `model`'s parameters now, found by the names
    (`names`: id of each parameter the optimizer was built over -> its name in the model then) after a strategy
    replaced or dropped them (sharding, a pipeline stage). With `keep_missing` False, parameters the model no
    longer has are left out (another stage's); otherwise they are an error."""
    if names is None:
        raise StrategyUsageError("call distributed_model(model) before distributed_optimizer()")
    current = dict(unwrap(model).named_parameters())
    groups = []
    for group in optimizer.param_groups:
        try:
            params = [current[names[id(p)]] for p in group["params"] if keep_missing or names.get(id(p)) in current]
        except KeyError:
            raise StrategyUsageError("the optimizer holds parameters that are not the model's") from None
        groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": params})
    return type(optimizer)(groups, **optimizer.defaults)


@contextlib.contextmanager
def unpatched(optimizer: torch.optim.Optimizer) -> Iterator[torch.optim.Optimizer]:
    """`optimizer` with its own step() for the duration: for code that steps it to create its state (DCP's
    get_state_dict does, with zero gradients and lr), which is no training step to count or exchange."""
    patched = optimizer.__dict__.pop("step", None)
    try:
        yield optimizer
    finally:
        if patched is not None:
            optimizer.step = patched  # type: ignore[method-assign]
