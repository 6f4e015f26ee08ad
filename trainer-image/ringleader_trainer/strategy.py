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

This module holds the API every strategy offers (`Strategy`, `Options`; its healing half is
`elastic/heal_protocol.py`, the helpers strategies share `strategies/tools.py`); the strategies are in `strategies/`,
the rendezvous in `elastic/rendezvous.py`, checkpoints and the resume agreement in `checkpoints/training.py`, and
`startup.from_env` puts them together.
"""

from __future__ import annotations

import datetime
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ringleader_trainer import flightrecorder
from ringleader_trainer.checkpoints import store as ckpt
from ringleader_trainer.checkpoints.training import TrainingCheckpointer, agree_on_resume, worker_state
from ringleader_trainer.elastic import healing
from ringleader_trainer.elastic.heal_protocol import HealingProtocol
from ringleader_trainer.elastic.rendezvous import Rendezvous
from ringleader_trainer.elastic.rescue import Rescue
from ringleader_trainer.elastic.stopping import Stopped, StopSignal, StopVote
from ringleader_trainer.env import RankEnv, Role
from ringleader_trainer.exitcodes import StrategyUsageError
from ringleader_trainer.logs import log_json
from ringleader_trainer.metrics import TrainerMetrics
from ringleader_trainer.options import Options
from ringleader_trainer.strategies.parameter_server.layout import flat_views
from ringleader_trainer.strategies.parameter_server.shard_records import ServerStats
from ringleader_trainer.strategies.ring import ring_allreduce
from ringleader_trainer.strategies.tools import unwrap

# The API (Options and StrategyUsageError live in modules of their own, which the healing half imports too).
__all__ = ["ALLREDUCE_IMPLEMENTATIONS", "LossFn", "Options", "Strategy", "StrategyUsageError"]

ALLREDUCE_IMPLEMENTATIONS = ("native", "ring")
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (model's output, targets) -> the loss


class Strategy(HealingProtocol):
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
    # Whether this strategy's exchanges run on its process group's connections, so that a rank still in one long
    # after the group broke is stuck and is recovered in place (elastic/rescue.py).
    exchanges_in_group = True

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
        if self.exchanges_in_group:
            self.rendezvous.rescue = Rescue(
                self.metrics.place, options.timeout, lambda: options.max_recoveries - self.heals_done,
                role=env.role, index=env.index,
            )  # fmt: skip
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
        self._void_steps = 0  # the script's steps a heal moved this rank past: their optimizer steps are void
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
        done again with the same batch; where the group had completed this step (or more) without this rank, it
        takes that state instead, and this step and the script's next until its count reaches the state's are
        void (`void_steps`): no exchange, the loss NaN, the optimizer's step() nothing. A script that calls
        backward() itself recovers from the newest checkpoint instead."""
        while True:
            if self._void_steps:
                return math.nan
            try:
                return self._forward_backward(model, x, y, loss_fn)
            except Exception as e:
                if not self._healed_after(e):
                    raise
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

    def held_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """This rank's model and optimizer state, with its progress and RNGs, as plain tensors and values (what
        `take_state` takes back): a worker's checkpoint (`worker_state`)."""
        return worker_state(self, model, optimizer, self.progress)

    def close(self) -> None:
        """Leave the process group once every rank is done (worker 0 hosts the rendezvous store)."""
        if self._vote is not None:
            self._vote.drain()
        if dist.is_initialized():
            dist.barrier()
        self.rendezvous.depart()

    # ---- shared helpers -----------------------------------------------------------------------------
    def _advance(self) -> None:
        self.steps_done += 1
