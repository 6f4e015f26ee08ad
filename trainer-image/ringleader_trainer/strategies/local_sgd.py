"""Local SGD: workers step alone for a period, then average their parameters.

Healing: at every sync each worker sends its whole state (model, optimizer, RNGs) to its successor (worker i to
worker i + 1, the last to worker 0), which keeps it until the next sync. The parameters are the same everywhere
after a sync; the optimizer's state (momentum) is each worker's own. A lost worker's replacement gets its state
as of the last sync from its successor and does its local steps since then again (no exchange: the same data,
the same numbers) while the survivors carry on to the next sync, where all average as if nothing had happened.

Training short (spec.workers.minReplicas; `Strategy.quorum`): the survivors of a loss form a group of their own
at once and train on, averaging over the workers present; the replacement, taken in at a step boundary, gets a
survivor's live state there (parameters mid-period, optimizer state, the step) and starts from the step the
group is at: its own batches of the steps it missed are not trained on, as under allreduce, and no state is
exchanged at syncs (a live peer serves instead of a backup).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ringleader_trainer.checkpoints.training import HEALED_FROM, LAST_CHECKPOINT
from ringleader_trainer.elastic import healing
from ringleader_trainer.exitcodes import StrategyUsageError
from ringleader_trainer.strategies.tools import patch_step
from ringleader_trainer.strategy import Strategy


class LocalSGDStrategy(Strategy):
    """Local SGD: `tau` optimizer steps on each worker alone, then the workers' parameters are averaged."""

    name = "local-sgd"
    heals = True
    trains_short = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._synced = healing.NO_STATE  # the step of the last sync whose average this worker completed
        self._backed = healing.NO_STATE  # the step of the last sync whose exchange of states it completed
        self._predecessor: torch.Tensor | None = None  # the predecessor's state then (healing.encode'd)

    @property
    def period(self) -> int:
        if self.env.local_sgd_period is None:  # the env reader requires it under local-sgd
            raise StrategyUsageError("RINGLEADER_LOCAL_SGD_PERIOD is not set")
        return self.env.local_sgd_period

    def distributed_optimizer(self, optimizer: torch.optim.Optimizer, model: nn.Module) -> torch.optim.Optimizer:
        self._params = [p for p in model.parameters()]
        self.hold(model, optimizer)
        if self.resumed is not None and HEALED_FROM in self.resumed:
            # A replacement: its state is its predecessor's at the last sync, which its successor kept; its own
            # predecessor's copy was lost with the rank it replaces (until the next sync).
            self._synced = self._backed = self.steps_done
        else:
            if self.steps_done == 0:  # start from the same point (resumed ranks load their own)
                self._average_parameters(count=False)
            elif self.resumed is not None:  # the checkpoint's state is what its successor backs up, not the model
                self.take_state(self.resumed)  # as built (the script's restore() loads the same again)
            self._synced = self.steps_done
            if self.quorum is None:
                self._exchange_states()

        def after() -> None:
            self._advance()
            if self.steps_done % self.period == 0:
                self._sync()

        return patch_step(optimizer, lambda: None, local=True, after=after, void=self._take_void)

    def _sync(self) -> None:
        """Average the parameters, then send this worker's state to its successor. A peer lost in the average
        is healed from here, and the average done again with its replacement; one lost in the exchange
        leaves the survivors between two syncs, which no successor can serve (they resume from the newest
        checkpoint)."""
        while True:
            try:
                self._average_parameters()
                break
            except Exception as e:
                if not self._healed_after(e):
                    raise
                if self.caught_up:  # training short: a peer that completed this average served its state
                    break
        self._synced = self.steps_done
        if self.quorum is not None:  # a live peer serves a replacement: no backups to keep
            return
        try:
            self._exchange_states()
        except Exception as e:
            # Between two syncs: this worker's report says so and every rank of the next group gives up
            # healing together (Unhealable, raised here), to resume from the newest checkpoint.
            self._healed_after(e)
            raise

    def _exchange_states(self) -> None:
        """Send this worker's state to its successor and keep its predecessor's: every worker's size, then the
        bytes, as two collectives (not sends and receives: the flight recorder then numbers the group's
        operations alike on every worker, as the operator's stall reading compares them)."""
        n, me = self.world_size, self.rank
        if n == 1:
            self._backed = self._synced
            return
        mine = healing.encode(self.live_state())
        sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(n)]
        dist.all_gather(sizes, torch.tensor([mine.numel()], dtype=torch.int64), group=self.workers_group)
        before, after = (me - 1) % n, (me + 1) % n
        incoming = healing.checked_size(int(sizes[before].item()), f"worker {before}")
        theirs = torch.empty(incoming, dtype=torch.uint8)
        out, into = [0] * n, [0] * n
        out[after], into[before] = mine.numel(), incoming
        dist.all_to_all_single(theirs, mine, into, out, group=self.workers_group)
        self._predecessor, self._backed = theirs, self._synced

    def _average_parameters(self, count: bool = True) -> None:
        self.average_(self._params)
        if count:
            self.communication_rounds += 1

    def finish(self) -> None:
        if self.steps_done % self.period:  # a partial period at the end: average it too
            self._sync()

    # ---- healing (elastic/healing.py) ----------------------------------------------------------------------------
    def heal_report(self) -> healing.Report:
        if self.quorum is not None:  # its live state; behind if this sync's average did not complete here
            due = self.steps_done % self.period == 0 and self.steps_done > 0
            return healing.Report(self.steps_done, behind=due and self._synced != self.steps_done)
        if self._synced != self._backed:  # averaged, but the states of that sync not exchanged
            return healing.Report(healing.UNSERVABLE)
        return healing.Report(self._synced, self._predecessor is not None)

    def heal_plan(self, reports: Any) -> healing.Plan | None:
        if self.quorum is not None:
            return healing.newest_serves(reports)  # a rank left behind takes the newest: its steps till then are void
        return healing.successor_serves(reports)

    def state_for(self, receiver: int) -> dict[str, Any]:
        """The receiver's own state as of the last sync, which this worker (its successor) kept; training
        short, this worker's live state."""
        if self.quorum is not None:
            return self.live_state()
        if self._predecessor is None:
            raise healing.Unhealable(f"worker {self.rank} holds no copy of worker {receiver}'s state")
        state = healing.decode(self._predecessor, receiver)
        return state | {HEALED_FROM: self.env.global_rank, LAST_CHECKPOINT: self.last_checkpoint}

    def first_vote_after(self, step: int) -> int:
        """The next sync: the replacement does its local steps again until then without a collective, so the
        votes wait for the sync, where every worker is (training short, the next step: the replacement starts
        where the group is)."""
        if self.quorum is not None:
            return step + 1
        return (step // self.period + 1) * self.period
