"""`python tests/support/stuck_trainer.py ARGS`: the audited trainer (`audited_trainer.py`) in which one worker gets
stuck in an exchange, as a rank continued after a SIGSTOP may stay stuck in a gloo send whose connection its
group watch shut down meanwhile (elastic/rescue.py), which a test cannot bring about at will:

    RINGLEADER_TEST_STUCK=INDEX:STEP:MARKER

worker INDEX, as it enters training step STEP's exchange (counted from 1: its metrics stamp the exchange started),
first creates the file MARKER, then holds its training thread there for an hour, beyond any timeout of a test;
its other threads (the group watch, the pulse) run on. Once: a fresh process of it (its recovery in place, the
same command and environment) finds MARKER there and trains on."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ringleader_trainer.metrics import TrainerMetrics
from ringleader_trainer.strategy import Strategy

AUDITED = Path(__file__).with_name("audited_trainer.py")
STUCK_SECONDS = 3600.0
index, step, marker = os.environ["RINGLEADER_TEST_STUCK"].split(":", 2)
strategies: list[Strategy] = []
init, entered_exchange = Strategy.__init__, TrainerMetrics.entered_exchange


def _init(self: Strategy, *args: Any, **kwargs: Any) -> None:
    init(self, *args, **kwargs)
    strategies.append(self)


def _entered_or_stuck(self: TrainerMetrics) -> None:
    entered_exchange(self)
    strategy = strategies[-1] if strategies else None
    if strategy is None or strategy.metrics is not self or os.path.exists(marker):
        return
    if strategy.env.role == "worker" and strategy.env.index == int(index) and strategy.steps_done + 1 == int(step):
        Path(marker).touch()
        time.sleep(STUCK_SECONDS)


Strategy.__init__ = _init  # type: ignore[method-assign]
TrainerMetrics.entered_exchange = _entered_or_stuck  # type: ignore[method-assign]
exec(compile(AUDITED.read_text(), str(AUDITED), "exec"), {"__name__": "__main__", "__file__": str(AUDITED)})
