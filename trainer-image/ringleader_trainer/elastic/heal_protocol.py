"""A strategy's part in healing (`healing` has the plans and the exchange of states): the survivors' side of a heal
(`heal`, and `_healed_after` for a caller whose collective failed on a lost peer), the state a rank holds to serve a
replacement (`hold`), and the protocol a strategy that heals implements, whose defaults serve where every worker
holds the whole model and optimizer (allreduce). Mixed into `Strategy`, whose state it uses."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn

from ringleader_trainer.checkpoints.training import HEALED_FROM, LAST_CHECKPOINT, load_state
from ringleader_trainer.elastic import healing, recovery
from ringleader_trainer.elastic.rendezvous import Rendezvous, TrainingEnded
from ringleader_trainer.elastic.stopping import StopSignal, StopVote
from ringleader_trainer.env import RankEnv
from ringleader_trainer.exitcodes import StrategyUsageError, one_line
from ringleader_trainer.logs import log_json
from ringleader_trainer.metrics import TrainerMetrics
from ringleader_trainer.options import Options
from ringleader_trainer.strategies.tools import unwrap


class HealingProtocol:
    """The healing half of `Strategy` (which sets the state declared here in its constructor)."""

    env: RankEnv
    options: Options
    rendezvous: Rendezvous
    metrics: TrainerMetrics
    stop: StopSignal
    heals: bool
    steps_done: int
    communication_rounds: int
    resumed: dict[str, Any] | None
    last_checkpoint: int | None
    progress: Mapping[str, Any]
    heals_done: int
    caught_up: bool
    workers_group: dist.ProcessGroup | None
    _held: tuple[nn.Module, torch.optim.Optimizer] | None
    _pending: bool
    _void_steps: int
    _vote: StopVote | None
    _votes_from: int

    if TYPE_CHECKING:

        @property
        def device(self) -> torch.device: ...

        @property
        def quorum(self) -> int | None: ...

        def held_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]: ...

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
        own = self.steps_done
        if rank in agreed.advance:  # a peer completed the commit this rank's failed in: apply the step it holds
            self._held[1].step()
        source = agreed.sources.get(rank)
        self.caught_up = source is not None
        if source is not None:
            state = healing.receive(source)
            self.take_state(state)
            self.steps_done, self.communication_rounds = agreed.step, int(state.get("rounds", 0))
        # The script had made `own` steps (or was in the next); this rank's state is now `steps_done`'s (a step
        # applied, a newer state received), so its steps until its count reaches that are void: none, or the one
        # it is in, unless this rank was left out of a group that trained on without it.
        self._void_steps += max(0, self.steps_done - own)
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
            except TrainingEnded:
                raise  # the others trained their last step without this rank: nothing is left to heal into
            except Exception as e:
                error = e

    @property
    def void_steps(self) -> int:
        """The script's steps still to come that a heal moved this rank past (it received a state that many
        steps ahead of its own count): each does no exchange, its loss NaN, its optimizer step nothing."""
        return self._void_steps

    def _take_void(self) -> bool:
        """Whether this optimizer step is void (a heal moved this rank past it), counting it off."""
        if not self._void_steps:
            return False
        self._void_steps -= 1
        return True
