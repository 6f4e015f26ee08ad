"""Every rank says where it is (its step and whether it waits in an exchange) and how long its own work takes
a step on its own metrics page, under every strategy; with one worker hung by `--hang-at-step`, the operator's
reading of those pages (ringleader_operator.stalls.find_culprit) names that worker, and with one slowed by
`--straggler`, its straggler reading (stragglers.find_slow) names that one. Where the exchanges are torch's
collectives, the flight recorder's numbers on the pages (flightrecorder.py) show the hung worker one collective
behind, and the account says so. The hang flag hangs only a pod's first attempt."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from ringleader_api import Role
from ringleader_operator.progress import parse_beat
from ringleader_operator.stalls import RankBeat, find_culprit
from ringleader_operator.stragglers import find_slow
from ringleader_trainer import flightrecorder

from tests.support.launch import LocalJob, Rank, job_spec, launch

HANG_AT = 20
ARGS = ["--example", "digits-mlp", "--steps", "60", "--log-every", "5", "--timeout", "60",
        "--hang-at-step", f"{HANG_AT}:1"]  # fmt: skip

CASES = [
    ("allreduce", {}, 0, []),
    ("allreduce", {}, 0, ["--allreduce", "ring"]),
    ("local-sgd", {"localSGD": {"period": 4}}, 0, []),
    ("parameter-server", {"parameterServer": {"mode": "synchronous"}}, 1, []),
]
IDS = ["allreduce", "ring", "local-sgd", "ps-synchronous"]
# Those whose exchanges are torch's collectives, where the flight recorder's numbers show the hung worker behind
# (the ring and the parameter server exchange over their own connections; a pipeline's group, whose stages
# also send and receive, is not compared).
RECORDED = {"allreduce": True, "local-sgd": True, "parameter-server": False, "sharded": True, "pipeline": False}
HUNG_CASES = [*CASES, ("sharded", {}, 0, []), ("pipeline", {}, 0, [])]
HUNG_IDS = [*IDS, "sharded", "pipeline"]


def page_of(rank: Rank) -> RankBeat:
    with urllib.request.urlopen(f"http://127.0.0.1:{rank.metrics_port}/metrics", timeout=5) as r:
        beat = parse_beat(r.read().decode())
    return RankBeat(f"t-{rank.role}-{rank.index}", Role(rank.role), rank.index, "", beat)


def wait_for_hang(job: LocalJob) -> None:
    deadline = time.monotonic() + 300
    while not job.workers[1].events("hang"):
        assert time.monotonic() < deadline and all(r.proc.poll() is None for r in job.ranks), job.logs()
        time.sleep(0.1)


@pytest.mark.parametrize(("strategy", "spec", "ps", "extra"), HUNG_CASES, ids=HUNG_IDS)
def test_the_pages_name_the_hung_worker(
    tmp_path: Path, strategy: str, spec: dict[str, Any], ps: int, extra: list[str]
) -> None:
    job = launch(job_spec("t", strategy, 3, ps, **spec), [*ARGS, *extra], tmp_path)
    try:
        wait_for_hang(job)
        assert job.workers[1].events("hang")[0]["step"] == HANG_AT
        time.sleep(2)  # the others reach the exchange the hung worker never joins
        beats = [page_of(r) for r in job.ranks]
        assert all(b.beat.step is not None for b in beats), beats  # every rank serves its page
        assert beats[1].beat.step == HANG_AT and not beats[1].waiting
        assert beats[0].waiting and beats[2].waiting, beats
        culprit = find_culprit(beats, time.time())
        assert culprit is not None and (culprit.role, culprit.index) == (Role.WORKER, 1), culprit
        assert f"stopped first: at step {HANG_AT}, outside any exchange" in culprit.message
        recorder = "torch's flight recorder says it never entered collective"
        if RECORDED[strategy] and "ring" not in extra:  # the hung worker's number is behind the others'
            ((group, entered, _),) = beats[1].beat.collectives
            assert all(b.beat.collectives[0][:2] == (group, entered + 1) for b in (beats[0], beats[2])), beats
            assert f"{recorder} {entered + 1} of process group {group}" in culprit.message, culprit.message
        else:
            assert recorder not in culprit.message, culprit.message
    finally:
        job.kill()


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ('{"pg_status": {"0": {"last_enqueued_collective": "26", "last_completed_collective": "25"}, '
         '"1": {"last_enqueued_collective": "3", "last_completed_collective": "-1"}}}',
         [("gloo/0", 26, 25), ("gloo/1", 3, -1)]),
        ('{"pg_status": {"0": {"last_enqueued_collective": "-1", "last_completed_collective": "-1"}}}', []),
        ('{"pg_status": {"0": {"last_enqueued_collective": "x"}, "1": [], "2": {}}}', []),
        ('{"pg_status": {"0": {"last_enqueued_collective": "9007199254740993"}}}', []),  # past any real count
        ('{"pg_status": []}', []),
        ("not json", []),
        ("[1, 2]", []),
    ],
    ids=["two-groups", "none-entered", "bad-fields", "huge", "not-a-map", "not-json", "not-an-object"],
)  # fmt: skip
def test_the_recorders_status_is_read_within_bounds(raw: str, want: list[tuple[str, int, int]]) -> None:
    assert flightrecorder.parse_status("gloo", raw) == want


def test_a_replacement_pod_does_not_hang(tmp_path: Path) -> None:
    """RINGLEADER_ATTEMPT above 0 (the rank's replacement pod): the fault flag does nothing."""
    job = launch(job_spec("t", "allreduce", 2), ARGS, tmp_path, env_overrides={"RINGLEADER_ATTEMPT": "1"})
    assert job.wait(300) == [0, 0], job.logs()
    assert not job.workers[1].events("hang")


@pytest.mark.parametrize(("strategy", "spec", "ps", "extra"), CASES, ids=IDS)
def test_the_pages_name_the_straggler(
    tmp_path: Path, strategy: str, spec: dict[str, Any], ps: int, extra: list[str]
) -> None:
    args = ["--example", "digits-mlp", "--steps", "100000", "--log-every", "5", "--straggler", "2:0.05", *extra]
    job = launch(job_spec("t", strategy, 3, ps, **spec), args, tmp_path)
    try:
        deadline = time.monotonic() + 300
        while job.workers[0].last_step() < 60:  # the moving average settled (about 10 steps)
            assert time.monotonic() < deadline and all(r.proc.poll() is None for r in job.ranks), job.logs()
            time.sleep(0.1)
        slow = find_slow([page_of(r) for r in job.ranks], 3.0)
        assert [(s.role, s.index) for s in slow] == [(Role.WORKER, 2)], slow
        assert slow[0].compute >= 0.05
    finally:
        job.kill()
