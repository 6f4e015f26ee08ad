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
the rendezvous in `elastic/rendezvous.py`, checkpoints and the resume agreement in `checkpoints/training.py`, and
`startup.from_env` puts them together.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ringleader_trainer import flightrecorder
from ringleader_trainer.checkpoints import store as ckpt
from ringleader_trainer.checkpoints.training import (
    HEALED_FROM,
    LAST_CHECKPOINT,
    TrainingCheckpointer,
    agree_on_resume,
    load_state,
    worker_state,
)
from ringleader_trainer.elastic import healing, recovery
from ringleader_trainer.elastic.rendezvous import Rendezvous
from ringleader_trainer.elastic.stopping import Stopped, StopSignal, StopVote
from ringleader_trainer.env import RankEnv, Role
from ringleader_trainer.exitcodes import ExitCode, TrainerError, one_line
from ringleader_trainer.logs import log_json
from ringleader_trainer.metrics import TrainerMetrics
from ringleader_trainer.strategies.parameter_server.layout import flat_views
from ringleader_trainer.strategies.parameter_server.shards import ServerStats
from ringleader_trainer.strategies.ring import ring_allreduce

ALLREDUCE_IMPLEMENTATIONS = ("native", "ring")
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (model's output, targets) -> the loss


class StrategyUsageError(TrainerError):
    """The script called the API in a way this rank's strategy cannot honour."""

    exit_code = ExitCode.BAD_CONFIG


@dataclass(frozen=True)
class Options:
    rendezvous_timeout: float = 300.0  # seconds to reach the master and every peer at start
    timeout: float = 300.0  # seconds any one collective or parameter-server exchange may take
    allreduce: str = "native"  # "native": torch.distributed (gloo on CPU, NCCL on GPU); "ring": ours
    log_every: int = 20  # steps between JSON log lines (`report`)
    max_recoveries: int = 10  # times a rank heals or recovers in place after losing a peer before it exits 201
    heal: bool = True  # where the strategy heals, continue from a live peer's state; else from the newest checkpoint


class Strategy:
    """What every strategy offers; `from_env` returns the subclass the environment names."""

    name = ""
    # Whether distributed_model() takes a model built on the meta device (no memory yet) and allocates it:
    # under sharded each worker then allocates only its shard.
    materializes_meta = False
    # Whether a live peer can serve this rank's state to a lost rank's replacement (elastic/healing.py): the survivors
    # of a loss then continue from the step it interrupted. The others resume from the newest checkpoint.
    heals = False
    # Whether, with spec.workers.minReplicas, the survivors of a loss train on without the lost rank until its
    # replacement joins (a per-step quorum; gradients averaged over the workers present).
    trains_short = False

    def __init__(
        self,
        env: RankEnv,
        options: Options,
        checkpoints: ckpt.Checkpointer | None = None,
        rendezvous: Rendezvous | None = None,
    ) -> None:
        """Built once, with everything it needs (`from_env`: the environment contract read, the options, the job's
        checkpoints when it keeps them); `start` then joins the group."""
        self.env, self.options = env, options
        self.rendezvous = rendezvous or Rendezvous(env, options.rendezvous_timeout, options.timeout)
        self.timeout = datetime.timedelta(seconds=options.timeout)
        self.steps_done = 0  # optimizer steps completed, counting those before a resume
        self.communication_rounds = 0  # exchanges of gradients or parameters this process made
        self.metrics = TrainerMetrics()
        # Process groups this strategy also sends and receives in (their members' collective numbers differ
        # by what each sent): the flight recorder's numbers of those are not compared, so not shown.
        self.point_to_point_groups: set[str] = set()
        self.metrics.watch_collectives(lambda: flightrecorder.read(self.point_to_point_groups))
        self.workers_group: dist.ProcessGroup | None = None
        self.checkpoints = checkpoints  # None: the job keeps no checkpoints
        self.resumed: dict[str, Any] | None = None
        self.stop = StopSignal()  # installed by `enable_stop`
        self._vote: StopVote | None = None
        # Each parameter's name, by its id, as distributed_model() received it: rebuild_optimizer() finds the
        # parameters a strategy replaced (sharding, a pipeline stage) by them. None until distributed_model().
        self._names: dict[int, str] | None = None
        self._log_window = (time.perf_counter(), 0)  # (time, step) at the last report; reset at resume
        self.progress: Mapping[str, Any] = {}  # the script's progress after its last step (`maybe_save`)
        self.last_checkpoint: int | None = None  # the step of the job's newest checkpoint this rank knows of
        self.heals_done = 0
        self.caught_up = False  # the last heal gave this survivor a peer's newer state
        # The model (unwrapped) and optimizer whose state this rank serves a peer's replacement (healing), once
        # the script has handed both over (distributed_optimizer).
        self._held: tuple[nn.Module, torch.optim.Optimizer] | None = None
        self._skip_step = False  # a heal moved this rank past the step it was in: its optimizer step is void
        self._pending = False  # in `commit_step`: this rank's part of the step is averaged, not yet applied
        # The first step after whose boundary the workers vote on stopping: after a heal, the step after the one
        # the group continues from. The ranks reach the new group at different points of a step (in its
        # exchange, at its boundary, or new); from there they make the same collectives in the same order.
        self._votes_from = 0

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
    def present(self) -> int:
        """The workers in the group now: `world_size`, or fewer while a lost one is replaced (`quorum`)."""
        return dist.get_world_size(self.workers_group) if dist.is_initialized() else self.world_size

    @property
    def quorum(self) -> int | None:
        """The fewest workers a group re-formed after a loss may train with (spec.workers.minReplicas) while the
        lost ones are replaced; None: every worker (the survivors wait for the replacements)."""
        if not (self.trains_short and self.heals and self.options.heal) or self.env.num_ps:
            return None
        return self.env.min_workers

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

    def forward_backward(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn: LossFn) -> float:
        """loss_fn(model(x), y), its gradients accumulated by backward(); returns the loss. Under pipeline, the
        GPipe schedule over the micro-batches, and the batch's loss on every stage.

        Where the strategy heals, a peer lost during the exchange is healed from here (`heal`) and the step is
        done again with the same batch; in the rare case that the group had completed this step without this
        rank, it takes that state instead, the optimizer's step() that follows does nothing and the loss is
        NaN. A script that calls backward() itself recovers from the newest checkpoint instead."""
        while True:
            step = self.steps_done
            try:
                return self._forward_backward(model, x, y, loss_fn)
            except Exception as e:
                if not self._healed_after(e):
                    raise
            if self.steps_done != step:
                self._skip_step = True
                return math.nan
            for p in model.parameters():  # what the failed exchange left is no gradient
                p.grad = None

    def _forward_backward(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn: LossFn) -> float:
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
        rate = (step - s0) * batch_size * self.data_parallel_size * self.present / self.world_size / elapsed
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
                self.allreduce_(flat).div_(self.present)
            else:
                dist.all_reduce(flat, group=group)
                flat.div_(size or dist.get_world_size(group))
            self.metrics.left_exchange()
            for t, mean in zip(tensors, flat_views(flat, tensors), strict=True):
                t.copy_(mean)

    def commit_step(self) -> None:
        """End the exchange of a step whose state is held in parts (a pipeline's stages, HSDP's shards), each
        part's gradients averaged over its own replicas: one small allreduce over every worker, so that no rank
        steps unless every part's averaging completed (else a peer lost there could leave one part stepped and
        another not, with no live rank holding the latter at the newest step). A rank that loses a peer here
        holds its step pending (`healing.Report.pending`) and applies it if a peer completed the commit. Nothing
        where the strategy does not heal (one replica: nobody serves a part) or healing is off."""
        if not (self.heals and self.options.heal):
            return
        self._pending = True
        self.metrics.entered_exchange()
        dist.all_reduce(torch.zeros(1), group=self.workers_group)
        self.metrics.left_exchange()
        self._pending = False

    def allreduce_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum over the workers in place, with the configured implementation."""
        if self.options.allreduce == "ring":
            return ring_allreduce(tensor, group=self.workers_group)
        dist.all_reduce(tensor, group=self.workers_group)
        return tensor

    def finish(self) -> None:
        """After the last step: complete any pending exchange."""

    # ---- lossless stop (elastic/stopping.py) ----------------------------------------------------------------
    def enable_stop(self) -> None:
        """Take SIGTERM as a request to stop at an agreed step with a checkpoint there (`from_env` calls
        this once the group is formed, when the job checkpoints)."""
        self.stop.install()
        self.enable_votes()

    def enable_votes(self) -> None:
        """Vote at step boundaries (`stop_agreed`): on a stop, and on re-forming the group to take in a rank
        waiting to join it (`from_env` calls this when the job checkpoints, or trains short of a lost rank)."""
        if self._vote is None:
            self._vote = StopVote(self.workers_group, self.metrics)

    def stop_agreed(self) -> bool:
        """Whether the workers stop at this step boundary: called by every worker after every step
        (`TrainingCheckpointer.maybe_save`), True on all of them at the same step. A peer lost while a vote
        was in flight is healed from here; the votes start again after it (at the next boundary, where every
        rank of the new group is)."""
        if self._vote is None or self.steps_done < self._votes_from:
            return False
        watch = self.rendezvous.watch
        try:
            stop = self._vote.poll(self.stop.requested, joiner=watch is not None and watch.joiner.is_set())
        except Exception as e:
            if not self._healed_after(e):
                raise
            return False
        if self._vote.regroup:  # every worker is at this boundary: re-form the group with the rank waiting
            self.heal("a rank waits to join the group", counted=False)
        return stop

    def stop_step(self, step: int) -> int:
        """The step this worker's stop is saved as, once `stop_agreed` said it stops after `step`: that step,
        which every worker shares (a strategy whose workers run at their own pace names another)."""
        return step

    def stopped(self, step: int) -> Stopped:
        """The exception that ends this rank after its checkpoint at `step` (the stop it agreed to)."""
        return Stopped(step, signalled=self.stop.requested)

    # ---- where to continue from: a live peer's state (elastic/healing.py) or the newest checkpoint ---------------
    def start(self) -> None:
        """What `from_env` does once with the strategy it built: join the job's first group and agree where to
        continue from (`join`), take SIGTERM as a stop at an agreed step when the job checkpoints (else, with a
        quorum, vote on taking a lost rank's replacement in), and serve this rank's metrics page (on its pod's
        port plus its local rank: worker 0's holds the job's progress, each rank's says where it is)."""
        self.join()
        if self.checkpoints is not None:
            self.enable_stop()
        elif self.quorum is not None:
            self.enable_votes()
        self._log_window = (time.perf_counter(), self.steps_done)
        self.metrics.serve(self.env.metrics_port)

    def join(self) -> None:
        """Join the job's first process group and agree where to continue from (`from_env` calls this once):
        from a live peer's state when some rank holds one (this rank replaces a lost one), else from the
        newest checkpoint every rank can load, else from the start."""
        self.rendezvous.join()
        if self.env.num_ps:
            with self.rendezvous.watched():  # every rank calls it
                group = dist.new_group(list(range(self.env.num_workers)), timeout=self.timeout)
            self.workers_group = group if isinstance(group, dist.ProcessGroup) else None  # None on shards
        reports = healing.gather(healing.Report(healing.NO_STATE))
        agreed = self.heal_plan(reports) if self.heals and self.options.heal else None
        if agreed is None:
            agree_on_resume(self)
            self.metrics.resumed(self.steps_done)
            return
        source = agreed.sources[dist.get_rank()]  # a rank just started holds nothing: it receives
        state = healing.receive(source)
        self.resumed, self.steps_done = state, agreed.step
        self.communication_rounds = int(state.get("rounds", 0))
        self._votes_from = self.first_vote_after(agreed.step)
        self.metrics.resumed(self.steps_done)
        log_json(role=self.env.role, index=self.env.index, event="healed", step=agreed.step,
                 source=self.rendezvous.roster[source])  # fmt: skip

    def hold(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Keep `model` and `optimizer` as the state this rank serves a lost peer's replacement, and take the
        state a live peer sent if this rank is one (distributed_optimizer calls this under a strategy that
        heals, so a script that does not restore() still continues from it)."""
        self._held = (unwrap(model), optimizer)
        if self.resumed is not None and HEALED_FROM in self.resumed:
            self.take_state(self.resumed)

    def heal(self, reason: str, counted: bool = True) -> None:
        """Continue after a lost peer with no checkpoint read: leave the broken group, form the next with the
        peer's replacement (or, with a `quorum`, with the survivors alone until it comes: they train on short of
        it, and re-form with it at a step boundary, `stop_agreed`), and send the agreed state to the ranks short
        of it (or receive it). A collective: every survivor calls it once it sees the loss; the replacement's
        side is `join`. Unhealable (on every rank of the group) when no live rank can serve a rank short of it.
        `counted`: against `max_recoveries` (not the re-forming that takes a replacement in)."""
        if self._held is None:
            raise StrategyUsageError("heal() needs the model and optimizer: call distributed_optimizer() first")
        started = time.perf_counter()
        log_json(role=self.env.role, index=self.env.index, event="heal-start", step=self.steps_done, reason=reason)
        self.rendezvous.leave()
        self.rendezvous.join(self.quorum)
        rank, roster = dist.get_rank(), self.rendezvous.roster
        agreed = self.heal_plan(healing.gather(self.heal_report()))
        assert agreed is not None  # this rank holds live state
        self._pending = False
        if rank in agreed.advance:  # a peer completed the commit this rank's failed in: apply the step it holds
            self._held[1].step()
        source = agreed.sources.get(rank)
        self.caught_up = source is not None
        if source is not None:
            state = healing.receive(source)
            self.take_state(state)
            self.steps_done, self.communication_rounds = agreed.step, int(state.get("rounds", 0))
        served = sorted(r for r, s in agreed.sources.items() if s == rank)
        for receiver in served:
            healing.send(self.state_for(receiver), receiver)
        # After the exchange of states, where the replacement builds its own (its distributed_model): groups
        # built on the new one (dist.new_group) are built by every member in the same order.
        self._regroup()
        self.heals_done += counted
        self._votes_from = self.first_vote_after(agreed.step)
        self.metrics.resumed(self.steps_done)  # its own step: under local SGD a survivor keeps its steps
        log_json(
            role=self.env.role, index=self.env.index, event="heal", step=agreed.step,
            source=None if source is None else roster[source], served=[roster[r] for r in served],
            present=len(roster), seconds=round(time.perf_counter() - started, 3),
        )  # fmt: skip

    # The healing protocol (elastic/healing.py) a strategy that heals implements; these serve where every worker holds
    # the whole model and optimizer (allreduce).
    def heal_report(self) -> healing.Report:
        """What this rank holds to serve a replacement: the step of its live state, and whether it holds the
        next one pending (`commit_step`)."""
        return healing.Report(self.steps_done, pending=self._pending)

    def heal_plan(self, reports: Sequence[healing.Report]) -> healing.Plan | None:
        """Who serves whom, from every rank's report; None when no rank holds live state."""
        return healing.newest_serves(reports)

    def state_for(self, receiver: int) -> dict[str, Any]:
        """What this rank sends `receiver`, which continues from it: a worker's whole state (`live_state`)."""
        return self.live_state()

    def first_vote_after(self, step: int) -> int:
        """The first step at whose boundary the workers vote on stopping once a group continues from `step`: the
        next, where every rank of the group is, however it reached it."""
        return step + 1

    def live_state(self) -> dict[str, Any]:
        """What this rank's checkpoint would hold at this step, and the newest checkpoint's step (a replacement
        reports it)."""
        if self._held is None:
            raise StrategyUsageError("no state to serve before distributed_optimizer()")
        state = self.held_state(*self._held)
        return state | {
            "step": self.steps_done,
            HEALED_FROM: self.env.global_rank,
            LAST_CHECKPOINT: self.last_checkpoint,
        }

    def held_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """This rank's model and optimizer state, with its progress and RNGs, as plain tensors and values (what
        `take_state` takes back): a worker's checkpoint (`worker_state`)."""
        return worker_state(self, model, optimizer, self.progress)

    def take_state(self, state: Mapping[str, Any]) -> None:
        """Load a live peer's state (`live_state`) into the model and optimizer held, and this process's RNGs."""
        if self._held is None:
            raise StrategyUsageError("no model to load a peer's state into before distributed_optimizer()")
        load_state(state, *self._held, self.device)

    def _regroup(self) -> None:
        """Move what this strategy built on the broken group (DDP, the stop vote, a pipeline's groups) to the new
        one, once the ranks short of the agreed state have received it."""
        if self._vote is not None:
            self._vote = StopVote(self.workers_group, self.metrics)

    def _healed_after(self, error: BaseException) -> bool:
        """Whether this rank healed after `error`, so the caller does again what failed: True when the error is
        a lost peer, the strategy heals and holds its state, no stop was asked for and recoveries are left.
        A peer lost again while healing is healed from too."""
        while True:
            used = recovery.recoveries() + self.heals_done
            heals = self.heals and self.options.heal and self._held is not None
            if not heals or self.stop.requested or not healing.peer_lost(error):
                return False
            if isinstance(error, healing.Unhealable):
                raise error
            if used >= self.options.max_recoveries:
                return False
            try:
                self.heal(one_line(error))
                return True
            except Exception as e:
                error = e

    def _take_skip(self) -> bool:
        """Whether this optimizer step is void (a heal moved this rank past it), clearing the mark."""
        skip, self._skip_step = self._skip_step, False
        return skip

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
    optimizer: torch.optim.Optimizer,
    before: Callable[[], None],
    local: bool,
    after: Callable[[], None],
    void: Callable[[], bool] = lambda: False,
) -> torch.optim.Optimizer:
    """`optimizer` with its step() running `before`, then (if `local`) the original step, then `after`; nothing
    when `void()` says the step is void (a heal moved the rank past it)."""
    if getattr(optimizer, "_ringleader_distributed", False):
        raise StrategyUsageError("distributed_optimizer() was already applied to this optimizer")
    original = optimizer.step

    def step(closure: Callable[[], float] | None = None) -> float | None:
        if void():
            return None
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
