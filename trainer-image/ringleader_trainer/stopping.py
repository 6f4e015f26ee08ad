"""Lossless stop: a rank told to stop (SIGTERM: the pod is deleted, evicted, suspended, resized, its node
drained) finishes the step it is in; the workers agree on one step; every rank writes its checkpoint at that
step and ends. Nothing trained is lost when the save fits in the pod's grace period.

- `StopSignal` turns SIGTERM into a flag (installed only when the job checkpoints: without a checkpoint there
  is nothing to save, and SIGTERM ends the process at once, as before).
- `StopVote` is the agreement of the collective strategies (allreduce, local SGD): one one-element allreduce
  (MAX) per step, pipelined: the vote launched at the boundary of step k is read at the boundary of step k+1,
  so its latency hides behind a step of compute, and every worker reads the same result at the same step.
  A stop asked for during step k therefore ends the run at step k+1 or k+2, the same step on every worker.
  (Under the parameter-server strategy the shards carry the request instead: `ps`.)
- `Stopped` ends the training process once the checkpoint of that step is written: exit STOPPED (202) on a
  rank that was signalled, which the operator does not count as a failure; a rank that was not (its pod
  stays, a peer's went) recovers in place and resumes from that checkpoint with the peer's replacement.
"""

from __future__ import annotations

import signal
import time
from types import FrameType

import torch
import torch.distributed as dist

from ringleader_trainer.exitcodes import ExitCode, TrainerError

STOP_SIGNALS = (signal.SIGTERM,)


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
    worker, in the same order as the group's other collectives (all ranks make the same calls)."""

    def __init__(self, group: dist.ProcessGroup | None) -> None:
        self.group = group
        self.pending: tuple[dist.Work, torch.Tensor] | None = None

    def poll(self, wants: bool) -> bool:
        """True when the vote launched at the previous boundary found some worker wanting to stop: every
        worker gets True at the same boundary, and no further vote is launched. Otherwise launch this
        boundary's vote (CPU tensor: gloo's, beside NCCL on GPUs) and return False."""
        if self.pending is not None:
            work, flag = self.pending
            self.pending = None
            work.wait()  # bounded by the group's timeout: a lost peer raises, as any collective's would
            if flag.item():
                return True
        flag = torch.tensor([1 if wants else 0], dtype=torch.int32)
        work = dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.group, async_op=True)
        assert work is not None  # async_op=True returns the work
        self.pending = (work, flag)
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
