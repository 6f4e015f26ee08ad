"""The control-plane benchmark's plan (bench/control_plane_plan.py): the order of runs, the configurations'
flags, and the reading of the runs."""

from __future__ import annotations

from typing import Any

import pytest

from bench import control_plane_plan as cp
from bench.stats import Verdict

TO, RL = cp.PEER, cp.RINGLEADER


def test_schedule_interleaves_operators_and_configurations() -> None:
    order = cp.schedule([(1, 8), (500, 4)], lambda jobs, _: 1 if jobs > 1 else 2, ["defaults", "matched"])
    got = [(p.jobs, p.rep, p.config, p.operator) for p in order]
    assert got == [
        (1, 0, "defaults", TO), (1, 0, "defaults", RL),  # A B
        (1, 0, "matched", RL), (1, 0, "matched", TO),  # B A
        (1, 1, "matched", TO), (1, 1, "matched", RL),  # the next repetition starts with the other configuration
        (1, 1, "defaults", RL), (1, 1, "defaults", TO),
        (500, 0, "defaults", TO), (500, 0, "defaults", RL),
        (500, 0, "matched", RL), (500, 0, "matched", TO),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("reps", "first"),
    [pytest.param(5, 3, id="odd"), pytest.param(6, 3, id="even")],
)
def test_each_operator_goes_first_about_as_often(reps: int, first: int) -> None:
    order = cp.schedule([(1, 64)], lambda *_: reps, ["matched"])
    firsts = [order[i].operator for i in range(0, len(order), 2)]
    assert firsts.count(TO) == first and firsts.count(RL) == reps - first


def test_matched_configuration_gives_both_the_same_budget() -> None:
    matched = cp.CONFIGS["matched"]
    assert "--kube-api-qps=1000" in matched.args[TO] and "--kube-api-qps=1000" in matched.args[RL]
    assert "--kube-api-burst=2000" in matched.args[TO] and "--kube-api-burst=2000" in matched.args[RL]
    assert "--controller-threads=16" in matched.args[TO]
    assert cp.CONFIGS["defaults"].args == {TO: (), RL: ()}
    for config in cp.CONFIGS.values():
        assert config.settings[TO]["qps"] and config.settings[RL]["qps"]  # the header prints both budgets
    # The scheduler, which binds both operators' pods, gets the same budget, and the header says so.
    assert matched.scheduler == (1000, 2000) and cp.CONFIGS["defaults"].scheduler is None
    assert matched.scheduler_setting() == "kube-scheduler: client QPS 1000, burst 2000"
    assert "defaults (client QPS 50, burst 100)" in cp.CONFIGS["defaults"].scheduler_setting()


def runs(config: str, jobs: int, workers: int, op: str, running: list[float]) -> list[dict[str, Any]]:
    return [
        {"config": config, "jobs": jobs, "workers": workers, "operator": op, "created_s": t / 2, "running_s": t,
         "requests_per_job": 10.0, "cpu_s": t, "peak_rss_mb": 100.0}
        for t in running
    ]  # fmt: skip


def test_compare_gives_medians_ranges_and_a_ratio_interval_per_configuration() -> None:
    measured = [
        *runs("matched", 1, 64, TO, [4.0, 4.2, 3.8, 4.1, 3.9]),
        *runs("matched", 1, 64, RL, [1.0, 1.1, 0.9, 1.05, 0.95]),
        *runs("defaults", 1, 64, RL, [2.0]),
    ]
    rows = cp.compare(measured)
    assert [(r.config, r.workers) for r in rows] == [("defaults", 64), ("matched", 64)]
    defaults, matched = rows
    assert TO not in defaults.operators and defaults.ratio == {}  # one side only: no ratio
    assert matched.operators[TO]["running_s"].mid == 4.0
    assert (matched.operators[RL]["running_s"].lo, matched.operators[RL]["running_s"].hi) == (0.9, 1.1)
    ratio = matched.ratio["running_s"]
    assert ratio.mid == pytest.approx(0.25) and 0.9 / 4.2 <= ratio.lo <= 0.25 <= ratio.hi <= 1.1 / 3.8
    assert cp.row_from(matched.as_dict()) == matched  # what the report reads back is what was written


def test_judge_reads_each_goal_at_its_configuration() -> None:
    measured = [
        *runs("matched", 1, 64, TO, [4.0, 4.2, 3.8]),
        *runs("matched", 1, 64, RL, [1.0, 1.1, 0.9]),
        *runs("defaults", 1, 256, TO, [4.0, 4.2, 3.8]),
        *runs("defaults", 1, 256, RL, [1.0, 1.1, 0.9]),  # a fine figure at the wrong configuration: not judged
    ]
    judged = {(j.goal.metric, j.scenario): j for j in cp.judge(cp.compare(measured))}
    assert judged[("running_s", (1, 64))].verdict is Verdict.MET
    assert judged[("running_s", (1, 256))].verdict is None
    assert "not judged" in judged[("running_s", (1, 256))].line()
    assert judged[("cpu_s", (1, 64))].verdict is Verdict.MET  # the CPU goal covers every measured scenario
    assert ("cpu_s", (1, 256)) not in judged
    assert judged[("peak_rss_mb", (500, 4))].verdict is None


def test_a_figure_a_run_could_not_take_is_left_out_not_read_as_zero() -> None:
    measured = [*runs("matched", 500, 4, TO, [40.0, 41.0, 42.0]), *runs("matched", 500, 4, RL, [60.0, 61.0, 62.0])]
    measured[-1]["requests_per_job"] = None  # the audit log rotated during that run
    (row,) = cp.compare(measured)
    assert row.operators[RL]["requests_per_job"].n == 2 and row.operators[RL]["running_s"].n == 3
    assert row.ratio["requests_per_job"].mid == 1.0


def test_a_result_that_keeps_earlier_runs_keeps_the_settings_of_their_configurations() -> None:
    kept = ["Ringleader at commit old", "[defaults] ringleader: qps 50", "[matched] ringleader: qps 1000"]
    new = ["Ringleader at commit new", "[defaults] ringleader: qps 50, burst 100"]
    assert cp.merge_settings(kept, new) == [*new, "[matched] ringleader: qps 1000"]
    assert cp.merge_settings([], new) == new
