"""The trainer's metrics are what the operator's progress parser reads; exit codes match the ExitCode policy."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from ringleader.jobfacts import EXIT_RECORD
from ringleader_api import RestartPolicy
from ringleader_operator import evidence, progress
from ringleader_operator.failures import STOPPED_EXIT_CODE, Decision, Failure, Kind, classify, decide_restart
from ringleader_operator.stalls import Beat
from ringleader_trainer import exitrecord
from ringleader_trainer.examples.train import ConfigError
from ringleader_trainer.exitcodes import ExitCode
from ringleader_trainer.metrics import TrainerMetrics

DOC = Path(__file__).resolve().parents[2] / "docs" / "exit-codes.md"


def test_operator_reads_the_trainers_metrics_page() -> None:
    m = TrainerMetrics()
    m.update(step=420, loss=0.25, samples_per_second=1234.5, step_seconds=0.25)
    m.last_checkpoint_step.set(400)
    m.checkpoint_seconds.set(1.5)
    m.total_steps.set(600)
    parsed = progress.parse(m.text(), "2026-01-01T00:00:00Z")
    assert parsed is not None
    assert (parsed.step, parsed.loss, parsed.samples_per_second) == (420, 0.25, 1234.5)
    assert (parsed.last_checkpoint_step, parsed.checkpoint_seconds, parsed.step_seconds) == (400, 1.5, 0.25)
    assert (parsed.total_steps, parsed.percent, parsed.eta_seconds) == (600, 70.0, 45)
    assert (parsed.resumed_step, parsed.resumed_at) == (None, None)  # a page from before the trainer said it
    m.resumed(380)  # healed from a live peer, or resumed from a checkpoint: where worker 0 continued from
    parsed = progress.parse(m.text(), "2026-01-01T00:00:00Z")
    assert parsed is not None and (parsed.step, parsed.resumed_step) == (380, 380) and parsed.resumed_at is not None


def test_operator_reads_where_a_rank_is_from_its_page() -> None:
    m = TrainerMetrics()
    assert progress.parse_beat(m.text()) == Beat(0, None, None)  # nothing done yet
    before = time.time()
    m.reached(57)
    stepped_at = progress.parse_beat(m.text()).stepped_at  # what ends a job's start-up (stalls.tick)
    assert stepped_at is not None and before <= stepped_at <= time.time()
    m.entered_exchange()
    waiting = progress.parse_beat(m.text())
    assert waiting.step == 57 and waiting.waiting_since is not None and waiting.exchange_done is None
    m.entered_exchange()  # a second bucket of the same exchange keeps the first stamp
    assert progress.parse_beat(m.text()).waiting_since == waiting.waiting_since
    m.left_exchange()
    done = progress.parse_beat(m.text())
    assert done.waiting_since is None and done.exchange_done is not None and done.exchange_done >= waiting.waiting_since
    assert done.compute is None  # a step's work is timed from one step to the next
    m.reached(58)
    timed = progress.parse_beat(m.text())
    assert timed.step == 58 and timed.compute is not None and timed.compute > 0


def test_operator_reads_each_process_groups_place_from_a_ranks_page() -> None:
    """The flight recorder's numbers per process group (flightrecorder.read) reach the operator's beat."""
    m = TrainerMetrics()
    m.watch_collectives(lambda: [("gloo/0", 1234, 1233), ("gloo/1", 7, -1)])
    m.reached(57)
    assert progress.parse_beat(m.text()).collectives == (("gloo/0", 1234, 1233), ("gloo/1", 7, -1))
    empty = TrainerMetrics()
    empty.watch_collectives(list)  # before the first collective: no group
    empty.reached(1)
    assert progress.parse_beat(empty.text()).collectives == ()

    def broken() -> list[tuple[str, int, int]]:
        raise RuntimeError("the recorder's dump failed")

    still = TrainerMetrics()
    still.watch_collectives(broken)  # the page is still served, its place without groups
    still.reached(3)
    beat = progress.parse_beat(still.text())
    assert beat.step == 3 and beat.collectives == ()


@pytest.mark.parametrize("code", list(ExitCode), ids=[c.name for c in ExitCode])
def test_exit_codes_agree_with_the_exit_code_restart_policy(code: ExitCode) -> None:
    if code == ExitCode.OK:
        return
    decision, _ = decide_restart(RestartPolicy.EXIT_CODE, Failure(Kind.EXIT, int(code)))
    assert (decision == Decision.RESTART) == code.retryable


def test_docs_list_every_exit_code() -> None:
    documented = {int(c) for c in re.findall(r"^\| (\d+) \|", DOC.read_text(), flags=re.MULTILINE)}
    assert documented == {int(c) for c in ExitCode}


def test_the_operator_reads_the_trainers_clean_stop_as_one() -> None:
    assert STOPPED_EXIT_CODE == ExitCode.STOPPED
    assert classify(int(ExitCode.STOPPED), "Error", "").kind == Kind.STOPPED


def test_operator_reads_the_trainers_exit_record() -> None:
    """The last line a failing rank writes (exitrecord.py) is what the operator's evidence.read takes from its
    termination message: the exception, where it was raised, the step a stopping rank saved."""

    def fail() -> None:
        raise ValueError("bad shape (3, 4)\nsecond line")

    try:
        fail()
    except ValueError as e:
        said = evidence.read("Traceback (most recent call last):\n...\n" + exitrecord.record(1, e) + "\n")
    assert (said.exception, said.message, said.code) == ("ValueError", "bad shape (3, 4)", 1)
    assert said.frames[-1].startswith("test_trainer_contracts.py:") and said.frames[-1].endswith(" in fail")
    assert exitrecord.record(1, ValueError("x")).startswith(EXIT_RECORD)  # what `ringleader diagnose` skips
    stopped = evidence.read(exitrecord.record(ExitCode.STOPPED, saved_step=540))
    assert (stopped.saved_step, stopped.code, stopped.exception) == (540, 202, "")
    qualified = evidence.read(exitrecord.record(3, ConfigError("--steps must be at least 1")))
    assert qualified.exception == "ringleader_trainer.examples.train.ConfigError"
