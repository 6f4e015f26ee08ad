"""The goodput bench's figures from the ranks' logs (bench/goodput_bench.py `measure`): the full-strength rate
is read only while every rank trains, so a run with failures is not judged by its own slow stretches."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bench.goodput_bench import SETTLE_SECONDS, compare, measure, run_root


@dataclass
class Logged:
    """A rank as `measure` reads it: its log lines."""

    lines: list[dict[str, Any]]

    def events(self) -> list[dict[str, Any]]:
        return self.lines


@dataclass
class Job:
    workers: list[Logged]

    @property
    def ranks(self) -> list[Logged]:
        return self.workers


def steps(begin: float, end: float, first: int, rate: float) -> list[dict[str, Any]]:
    """Step lines from `first` on, `rate` a second, over [begin, end)."""
    n = int((end - begin) * rate)
    return [{"ts": begin + i / rate, "step": first + i} for i in range(n)]


def test_the_rate_at_full_strength_leaves_the_replacements_out() -> None:
    # 10 steps a second; worker 1 killed at t=20 (step 300 logged just before), the survivors stand still
    # until its replacement heals at t=23 from step 300 and logs its first step at t=24; the run ends at 60.
    before = steps(0.0, 20.0, 100, 10.0)
    after = steps(24.0, 60.0, 301, 10.0)
    replacement = [{"ts": 23.0, "event": "healed", "step": 300}, *after]
    job = Job([Logged(before + after), Logged(before + replacement)])
    figures = measure(job, [(1, 20.0, "kill")], start=10.0, end=60.0)  # type: ignore[arg-type]
    assert figures["rate"] == pytest.approx(10.0, rel=0.02)  # the stand-still is not in it
    assert figures["rate_over_s"] == pytest.approx(20.0 - 5.0 + 60.0 - 24.0 - SETTLE_SECONDS)  # from half the warm-up
    assert figures["steps_lost"] == [0]
    assert figures["kill_to_full_s"] == [pytest.approx(4.0)]
    assert figures["steps_per_s_while_replaced"] == [0.0]  # no step until the replacement's first
    assert figures["goodput"] == pytest.approx((659 - 199) / (10.0 * 50.0), rel=0.02)
    assert figures["node_lost"] == {}


def test_a_node_lost_is_reported_apart() -> None:
    before = steps(0.0, 20.0, 100, 10.0)
    after = steps(22.0, 40.0, 291, 10.0)  # resumed from a checkpoint: ten steps done again
    replacement = [{"ts": 21.5, "event": "resume", "step": 290}, *after]
    job = Job([Logged(before + after), Logged(before + replacement)])
    figures = measure(job, [(1, 20.0, "node")], start=10.0, end=40.0)  # type: ignore[arg-type]
    assert figures["node_lost"] == {"worker": 1, "steps_lost": 9, "kill_to_full_s": pytest.approx(2.0)}
    assert figures["victims"] == ["node of worker 1"]
    assert figures["steps_lost"] == [9]


def test_a_kill_before_the_first_checkpoint_sends_the_job_back_to_its_start() -> None:
    # Killed at t=20 (step 299) before any checkpoint: the replacement logs no `resume`, and the job begins
    # again from step 1 at t=22. Killed again at t=40 (step 180): it resumes from the checkpoint of step 100.
    first_run, again = steps(0.0, 20.0, 100, 10.0), steps(22.0, 40.0, 1, 10.0)
    resumed = steps(42.0, 60.0, 101, 10.0)
    replacement = [*first_run, *again, {"ts": 41.0, "event": "resume", "step": 100}, *resumed]
    job = Job([Logged(first_run + again + resumed), Logged(replacement)])
    figures = measure(job, [(1, 20.0, "kill"), (1, 40.0, "kill")], start=10.0, end=60.0)  # type: ignore[arg-type]
    # The first kill's figures are not the second's resume: all 299 steps lost, full strength 2 s after it; the
    # second kill loses the steps since that checkpoint, not since the furthest step ever logged.
    assert figures["steps_lost"] == [299, 180 - 100]
    assert figures["victims"] == ["worker 1", "worker 1"]
    assert figures["kill_to_full_s"] == [pytest.approx(2.0), pytest.approx(2.0)]


def test_steps_redone_after_going_back_count_in_the_rate_at_full_strength() -> None:
    # 10 steps a second; killed at t=20 (step 299), resumed from the checkpoint of step 100 at t=22: the job is
    # back at full strength redoing steps 101-299 until t=42. Its rate is 10, not the steps past 299 over that
    # time, so its goodput is the steps it kept over 10 a second for the whole run.
    before, resumed = steps(0.0, 20.0, 100, 10.0), steps(22.0, 60.0, 101, 10.0)
    replacement = [*before, {"ts": 21.0, "event": "resume", "step": 100}, *resumed]
    job = Job([Logged(before + resumed), Logged(replacement)])
    figures = measure(job, [(1, 20.0, "kill")], start=10.0, end=60.0)  # type: ignore[arg-type]
    assert figures["rate"] == pytest.approx(10.0, rel=0.02)
    assert figures["steps_lost"] == [299 - 100]
    assert figures["goodput"] == pytest.approx((480 - 199) / (10.0 * 50.0), rel=0.02)


def test_the_killed_processs_last_lines_are_not_its_replacements() -> None:
    # Killed at t=20 (step 299 logged just before): its dying child still logs step 299 at t=20.04 and a heal's
    # `healed` at t=20.05; the replacement heals at t=23 from step 299 and steps from t=24. Before, the dying line
    # was read as the job going back one step, back at full strength 0.04 s after the kill.
    before, after = steps(0.0, 20.0, 100, 10.0), steps(24.0, 60.0, 300, 10.0)
    dying: list[dict[str, Any]] = [
        {"ts": 20.04, "step": 299},
        {"ts": 20.05, "event": "healed", "step": 298},
        {"ts": 20.06, "step": 299},
    ]
    replacement = [*before, *dying, {"ts": 23.0, "event": "healed", "step": 299}, *after]
    job = Job([Logged(before + after), Logged(replacement)])
    figures = measure(job, [(1, 20.0, "kill")], start=10.0, end=60.0)  # type: ignore[arg-type]
    assert figures["steps_lost"] == [0]
    assert figures["kill_to_full_s"] == [pytest.approx(4.0)]


def test_no_verdict_from_fewer_than_three_runs_each() -> None:
    one = {"a": [{"goodput": 0.98}], "b": [{"goodput": 0.96}]}
    assert compare(one, "b")["a"]["verdict"] == "no verdict: 1 run(s) each, 3 needed"
    three = {"a": [{"goodput": g} for g in (0.98, 0.97, 0.99)], "b": [{"goodput": g} for g in (0.90, 0.91, 0.92)]}
    assert compare(three, "b")["a"]["verdict"] == "a keeps more"


def test_a_runs_logs_are_kept_only_where_asked_and_its_checkpoints_never(tmp_path: Path) -> None:
    with run_root(None, "heal", 0) as root:
        (root / "logs").mkdir()
    assert not root.exists()
    kept = tmp_path / "kept"
    (kept / "heal-rep2").mkdir(parents=True)
    (kept / "heal-rep2" / "stale").write_text("an earlier invocation's")
    with run_root(kept, "heal", 1) as root:
        assert root == kept / "heal-rep2" and not (root / "stale").exists()
        (root / "logs").mkdir()
        (root / "logs" / "worker-0.out").write_text("{}\n")
        (root / "ckpt").mkdir()
    assert (root / "logs" / "worker-0.out").exists() and not (root / "ckpt").exists()
