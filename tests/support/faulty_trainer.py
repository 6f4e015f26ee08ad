"""`python tests/support/faulty_trainer.py ARGS`: the audited trainer (`audited_trainer.py`) in which one worker
dies, as its pod would, at a moment a kill from outside hits only by chance:

    RINGLEADER_TEST_DIE=INDEX:STEP:MARKER[:after-commit]

worker INDEX, training step STEP (counted from 1), ends its process and its supervisor (SIGKILL) as it enters the
step's last allreduce over a sub-group of the workers, counted in the step before (the gradients' averaging over
a group of replicas: the pipeline's `Strategy.average_`, HSDP's all-reduce over the replicate dimension inside
backward), every other exchange of the step done; with `after-commit`, once its `Strategy.commit_step` of that
step has completed, before it steps. It does so once: it first creates the file MARKER, and its replacement (the
same command and environment) finds it there and trains on. And

    RINGLEADER_TEST_COMMIT_LOST=INDEX

makes worker INDEX's commit of that step fail as a lost peer's would (ConnectionError) once it has completed:
the rank then holds the step pending where its peers stepped, which no kill from outside can arrange."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import torch.distributed as dist
from ringleader_trainer.strategy import Strategy

AUDITED = Path(__file__).with_name("audited_trainer.py")
index, step, marker, *where = os.environ["RINGLEADER_TEST_DIE"].split(":", 3)
commit_lost = os.environ.get("RINGLEADER_TEST_COMMIT_LOST")
strategies: list[Strategy] = []
calls: dict[int, int] = {}  # by training step: this rank's allreduces over a sub-group of the workers
init, all_reduce, commit_step = Strategy.__init__, dist.all_reduce, Strategy.commit_step


def _die() -> None:
    Path(marker).touch()
    os.kill(os.getppid(), signal.SIGKILL)  # the supervisor, which stands for the pod
    os.kill(os.getpid(), signal.SIGKILL)


def _init(self: Strategy, *args: Any, **kwargs: Any) -> None:
    init(self, *args, **kwargs)
    strategies.append(self)


def _all_reduce_or_die(tensor: Any, *args: Any, **kwargs: Any) -> Any:
    group = kwargs.get("group", args[1] if len(args) > 1 else None)
    if strategies and group is not None and dist.get_world_size(group) < dist.get_world_size():
        strategy = strategies[-1]
        training = strategy.steps_done + 1
        calls[training] = calls.get(training, 0) + 1
        mine = strategy.env.role == "worker" and strategy.env.index == int(index) and training == int(step)
        if mine and not where and calls[training] == calls.get(training - 1) and not os.path.exists(marker):
            _die()
    return all_reduce(tensor, *args, **kwargs)


def _commit_then_die_or_fail(self: Strategy) -> None:
    commit_step(self)
    if self.env.role != "worker" or self.steps_done + 1 != int(step):
        return
    if self.env.index == int(index) and where == ["after-commit"] and not os.path.exists(marker):
        _die()
    lost = marker + ".lost"
    if commit_lost is not None and self.env.index == int(commit_lost) and not os.path.exists(lost):
        Path(lost).touch()
        self._pending = True  # as commit_step leaves it when its allreduce raises
        raise ConnectionError("Connection reset by peer (the faulty trainer's)")


Strategy.__init__ = _init  # type: ignore[method-assign]
dist.all_reduce = _all_reduce_or_die
Strategy.commit_step = _commit_then_die_or_fail  # type: ignore[method-assign]
exec(compile(AUDITED.read_text(), str(AUDITED), "exec"), {"__name__": "__main__", "__file__": str(AUDITED)})
