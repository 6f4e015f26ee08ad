"""Lossless stop (ringleader_trainer.elastic.stopping) with the trainer as plain processes: SIGTERM at an arbitrary
step makes every rank write its checkpoint at one agreed step and end STOPPED (202), and the resumed run ends
exactly where an uninterrupted one does; a rank whose peer alone was told to stop recovers in place."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from ringleader_trainer.checkpoints import store as ckpt
from ringleader_trainer.exitcodes import ExitCode

from tests.support.launch import LocalJob, Rank, job_spec, launch

STEPS = 60
# Worker 0 sleeps 40 ms a step so that a signal lands mid-run; the interval is longer than the run, so the only
# checkpoints are the stop's and the final one.
ARGS = ["--example", "digits-mlp", "--steps", str(STEPS), "--log-every", "1", "--straggler", "0:0.04"]
CHECKPOINT_INTERVAL = 1000
SIGNAL_AT = 23  # not a multiple of anything the run does periodically

CASES = [
    ("allreduce", {}, 0, []),
    ("allreduce", {}, 0, ["--allreduce", "ring"]),
    ("local-sgd", {"localSGD": {"period": 4}}, 0, []),
    ("diloco", {"diloco": {"period": 4, "outerMomentum": 0.5}}, 0, []),
    ("parameter-server", {"parameterServer": {"mode": "synchronous"}}, 2, []),
]
IDS = ["allreduce", "ring", "local-sgd", "diloco", "ps-synchronous"]


def start(tmp_path: Path, name: str, strategy: str, spec: dict[str, Any], ps: int, extra: list[str]) -> LocalJob:
    checkpoint = {"checkpoint": {"directory": str(tmp_path / "ckpt"), "intervalSteps": CHECKPOINT_INTERVAL}}
    job = job_spec("t", strategy, 2, ps, **spec, **checkpoint)
    return launch(job, [*ARGS, *extra, "--save-final", str(tmp_path / name / "final.pt")], tmp_path / name)


def uninterrupted(tmp_path: Path, strategy: str, spec: dict[str, Any], ps: int, extra: list[str]) -> Path:
    job = start(tmp_path / "whole", "run", strategy, spec, ps, extra)
    assert job.wait(600) == [0] * len(job.ranks), job.logs()
    return tmp_path / "whole" / "run" / "final.pt"


def signal_at(job: LocalJob, step: int, ranks: list[Rank]) -> None:
    """SIGTERM to `ranks` once worker 0 has logged `step`."""
    deadline = time.monotonic() + 300
    while job.workers[0].last_step() < step:
        assert time.monotonic() < deadline and all(r.proc.poll() is None for r in job.ranks), job.logs()
        time.sleep(0.01)
    for r in ranks:
        r.proc.send_signal(signal.SIGTERM)


def same_params(a: Path, b: Path) -> None:
    x, y = torch.load(a, weights_only=True), torch.load(b, weights_only=True)
    assert x.keys() == y.keys()
    for name in x:
        assert torch.equal(x[name], y[name]), f"{name} differs after the stop and resume"


@pytest.mark.parametrize(("strategy", "spec", "ps", "extra"), CASES, ids=IDS)
def test_sigterm_to_every_rank_saves_at_one_step_and_the_resumed_run_is_bit_identical(
    tmp_path: Path, strategy: str, spec: dict[str, Any], ps: int, extra: list[str]
) -> None:
    whole = uninterrupted(tmp_path, strategy, spec, ps, extra)
    first = start(tmp_path, "stopped", strategy, spec, ps, extra)
    signal_at(first, SIGNAL_AT, first.ranks)  # a suspend: every pod deleted at once
    assert first.wait(300) == [ExitCode.STOPPED] * len(first.ranks), first.logs()
    directory = tmp_path / "ckpt"
    (stopped_at,) = ckpt.complete_steps(directory, ckpt.expected_files(2, ps))
    # Worker 0's 40 ms steps: a vote every 2 steps (stopping.VOTE_EVERY_SECONDS), read 2 steps later.
    assert SIGNAL_AT <= stopped_at <= SIGNAL_AT + 6, stopped_at  # the next votes' boundaries, not an interval's
    assert {e["step"] for r in first.ranks for e in r.events("checkpoint")} == {stopped_at}
    assert "stopped at step" in first.ranks[0].stderr

    again = start(tmp_path, "again", strategy, spec, ps, extra)
    assert again.wait(600) == [0] * len(again.ranks), again.logs()
    assert {e["step"] for r in again.ranks for e in r.events("resume")} == {stopped_at}
    same_params(whole, tmp_path / "again" / "final.pt")


def test_a_peer_that_was_not_signalled_recovers_in_place_and_resumes_at_the_stop(tmp_path: Path) -> None:
    """An eviction: only worker 1's pod goes. It saves with the others and ends STOPPED; worker 0 recovers in
    place, waits for worker 1's replacement, and both resume at the stop's step."""
    whole = uninterrupted(tmp_path, "allreduce", {}, 0, [])
    job = start(tmp_path, "evicted", "allreduce", {}, 0, [])
    evicted = job.workers[1]
    signal_at(job, SIGNAL_AT, [evicted])
    assert evicted.proc.wait(300) == ExitCode.STOPPED, job.logs()
    (stopped_at,) = ckpt.complete_steps(tmp_path / "ckpt", ckpt.expected_files(2, 0))
    evicted.restart()  # the operator's replacement pod
    assert job.wait(600) == [0, 0], job.logs()
    assert [e["reason"] for e in job.workers[0].events("recover")] == [
        f"stopped at step {stopped_at} with its checkpoint written: a peer was asked to stop"
    ]
    assert {e["step"] for r in job.ranks for e in r.events("resume")} == {stopped_at}
    same_params(whole, tmp_path / "evicted" / "final.pt")


def test_bounded_staleness_workers_stop_at_the_step_shard_0_names_when_another_shard_is_told(tmp_path: Path) -> None:
    """Workers run at their own pace (worker 1 up to 3 steps ahead of worker 0); only shard 1 is told to stop:
    the request goes through the workers to shard 0, which names one step; every worker trains on to it, each
    rank writes its file of that step; shard 1 ends STOPPED, the others recover in place and, with shard 1's
    replacement, resume there and finish."""
    spec = {"parameterServer": {"mode": "bounded-staleness", "maxStaleness": 3}}
    job = start(tmp_path, "stopped", "parameter-server", spec, 2, [])
    told = job.servers[1]
    signal_at(job, SIGNAL_AT, [told])
    assert told.proc.wait(300) == ExitCode.STOPPED, job.logs()
    (stopped_at,) = ckpt.complete_steps(tmp_path / "ckpt", ckpt.expected_files(2, 2))
    assert SIGNAL_AT < stopped_at <= SIGNAL_AT + 3 + 3, stopped_at  # within the staleness bound of the signal
    told.restart()
    assert job.wait(600) == [0] * 4, job.logs()
    assert {e["step"] for r in job.ranks for e in r.events("resume")} == {stopped_at}
    assert all(e["step"] == STEPS for r in job.workers for e in r.events("done"))


@pytest.mark.parametrize(
    "spec",
    [{"parameterServer": {"mode": "asynchronous"}}, {"parameterServer": {"mode": "bounded-staleness",
                                                                          "maxStaleness": 100}}],
    ids=["asynchronous", "bounded-staleness"],
)  # fmt: skip
def test_an_asynchronous_stop_does_not_wait_for_a_worker_far_behind(tmp_path: Path, spec: dict[str, Any]) -> None:
    """Worker 0 takes 100 ms a step, worker 1 a few: when every rank is told to stop, worker 1 is dozens of
    steps ahead. Worker 0 does not train on up to the step shard 0 names (which took it past its pod's grace
    period): it stops within a step and skips to it, so every rank's file of the stop is of that one step; the
    resumed run (worker 0 no longer slowed) finishes from there."""
    steps = 2000
    args = ["--example", "digits-mlp", "--steps", str(steps), "--log-every", "1"]
    checkpoint = {"checkpoint": {"directory": str(tmp_path / "ckpt"), "intervalSteps": CHECKPOINT_INTERVAL}}
    job = job_spec("t", "parameter-server", 2, 2, **spec, **checkpoint)
    first = launch(job, [*args, "--straggler", "0:0.1"], tmp_path / "stopped")
    signal_at(first, 5, first.ranks)  # a suspend, with worker 1 far ahead
    told = first.workers[0].last_step()
    assert first.wait(120) == [ExitCode.STOPPED] * 4, first.logs()
    (stopped_at,) = ckpt.complete_steps(tmp_path / "ckpt", ckpt.expected_files(2, 2))
    trained = first.workers[0].last_step()
    assert trained <= told + 3, (told, trained)  # it stopped where it was, not at the furthest worker's step
    assert stopped_at > trained + 5, (stopped_at, trained)  # worker 1 was that far ahead: the step skipped to
    again = launch(job, args, tmp_path / "again")
    assert again.wait(600) == [0] * 4, again.logs()
    assert {e["step"] for r in again.ranks for e in r.events("resume")} == {stopped_at}
    assert all(e["step"] == steps for r in again.workers for e in r.events("done"))
