"""Lossless stop: a rank told to stop (SIGTERM: the pod is deleted, evicted, suspended, resized, its node
drained) finishes the step it is in; the workers agree on one step; every rank writes its checkpoint at that
step and ends. Nothing trained is lost when the save fits in the pod's grace period.

- `StopSignal` turns SIGTERM into a flag (installed only when the job checkpoints: without a checkpoint there
  is nothing to save, and SIGTERM ends the process at once, as before).
- `StopVote` is the agreement of the collective strategies (allreduce, local SGD): a small allreduce (MAX)
  about every 50 ms of steps, pipelined: the vote launched at one boundary is read at the next vote's, so its
  latency hides behind compute, and every worker reads the same result at the same step. A stop asked for
  ends the run within about two vote periods (one or two steps of a slow model), the same step everywhere.
  (Under the parameter-server strategy the shards carry the request instead: `ps`.)
- `Stopped` ends the training process once the checkpoint of that step is written: exit STOPPED (202) on a
  rank that was signalled, which the operator does not count as a failure; a rank that was not (its pod
  stays, a peer's went) recovers in place and resumes from that checkpoint with the peer's replacement.
"""

from __future__ import annotations

import math
import signal
import time
from types import FrameType

import torch
import torch.distributed as dist

from ringleader_trainer.exitcodes import ExitCode, TrainerError
from ringleader_trainer.metrics import TrainerMetrics

STOP_SIGNALS = (signal.SIGTERM,)
VOTE_EVERY_SECONDS = 0.05  # the time between two votes, at the workers' pace
MAX_STEPS_BETWEEN = 100  # however fast the steps, a vote at least this often


class StopSignal:
    """A flag SIGTERM raises. Python runs the handler in the main thread between bytecodes, so it does no I/O:
    the training loop reports the stop once it acts on it."""

    def __init__(self) -> None:
        self.requested_at: float | None = None  # time.monotonic() of the first signal

    @property
    def requested(self) -> bool:
        return self.requested_at is not None

    def install(self) -> None:
        for s in STOP_SIGNALS:
            signal.signal(s, self._handle)

    def request(self) -> None:
        if self.requested_at is None:
            self.requested_at = time.monotonic()

    def _handle(self, _signum: int, _frame: FrameType | None) -> None:
        self.request()


class StopVote:
    """The workers' pipelined agreement on whether to stop: `poll(wants)` at every step boundary, on every
    worker, in the same order as the group's other collectives (all ranks make the same calls).

    A vote is a three-element allreduce (MAX): whether some worker wants to stop, how many steps to the next
    vote, and whether some worker knows of a rank waiting to join the group (healing's quorum). Each worker
    proposes enough steps to fill VOTE_EVERY_SECONDS at its own recent pace (at most
    MAX_STEPS_BETWEEN, at least 1); all take the fewest, the slowest worker's (sent as MAX_STEPS_BETWEEN minus
    the proposal, so one MAX serves both). So a vote costs one small collective every ~50 ms,
    not every step (a 2.7 ms step paid 7 % for a vote each step), and a stop comes within about two such
    periods; every worker reads the same answer at the same step, so they agree on the schedule too."""

    def __init__(self, group: dist.ProcessGroup | None, metrics: TrainerMetrics | None = None) -> None:
        """`metrics`: stamped while a vote's result is waited for (an exchange, like any collective)."""
        self.group, self.metrics = group, metrics
        self.regroup = False  # the vote found a rank waiting to join: every worker re-forms the group here
        self.pending: tuple[dist.Work, torch.Tensor] | None = None
        self.every = 1  # steps from one vote to the next, as the last vote agreed
        self.steps = 0  # steps since the last vote
        self.since = time.perf_counter()  # when the last vote was launched

    def poll(self, wants: bool, joiner: bool = False) -> bool:
        """True when the vote in flight found some worker wanting to stop: every worker gets True at the same
        boundary, and no further vote is launched. Otherwise, at a vote's boundary, launch the next vote (a CPU
        tensor: gloo's, beside NCCL on GPUs) and return False. `joiner`: this worker knows of a rank waiting to
        join; when the vote in flight found one, `regroup` turns True on every worker at the same boundary and
        no further vote is launched (the group is re-formed there)."""
        self.steps += 1
        if self.steps < self.every:
            return False
        if self.pending is not None:
            work, result = self.pending
            self.pending = None
            if self.metrics is not None:
                self.metrics.entered_exchange()
            work.wait()  # bounded by the group's timeout: a lost peer raises, as any collective's would
            if self.metrics is not None:
                self.metrics.left_exchange()
            stop, spare, joining = (int(v) for v in result.tolist())
            if stop:
                return True
            if joining:
                self.regroup = True
                return False
            self.every = max(1, MAX_STEPS_BETWEEN - spare)
        now = time.perf_counter()
        pace = (now - self.since) / self.steps
        self.steps, self.since = 0, now
        proposal = min(MAX_STEPS_BETWEEN, max(1, math.ceil(VOTE_EVERY_SECONDS / max(pace, 1e-6))))
        vote = torch.tensor([int(wants), MAX_STEPS_BETWEEN - proposal, int(joiner)], dtype=torch.int64)
        work = dist.all_reduce(vote, op=dist.ReduceOp.MAX, group=self.group, async_op=True)
        assert work is not None  # async_op=True returns the work
        self.pending = (work, vote)
        return False

    def drain(self) -> None:
        """Complete the vote in flight (after the last step), so that nothing is pending when the group goes."""
        if self.pending is not None:
            self.pending[0].wait()
            self.pending = None


class Stopped(TrainerError):
    """Training stopped on request after its checkpoint at `step` was written."""

    exit_code = ExitCode.STOPPED

    def __init__(self, step: int, signalled: bool) -> None:
        why = "this rank was asked to stop" if signalled else "a peer was asked to stop"
        super().__init__(f"stopped at step {step} with its checkpoint written: {why}")
        self.step, self.signalled = step, signalled
