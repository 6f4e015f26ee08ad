"""bench/sharded_bench.py's summary (pure): memory against allreduce judged against 1/N + 15 % for stage 3, and
step times judged only where the noise allows; and their rows in BENCHMARKS.md."""

from __future__ import annotations

from typing import Any

import pytest

from bench import report
from bench.sharded_bench import SUBJECTS, summarize
from bench.stats import Interval

MIB = 2**20
MACHINE = {"date": "2026-11-26 09:00 UTC", "commit": "abc1234", "cpus": 2, "cpu_model": "Test CPU", "memory_gb": 24}


def runs(zero3_share: float, zero3_step: float) -> dict[str, list[dict[str, Any]]]:
    """3 repetitions per subject, memory runs and time runs, +/- 1 % apart; allreduce holds 1000 MiB per worker
    and steps in 1 s, zero3 `zero3_share` of that memory and `zero3_step` s, the other stages in between."""
    share = {"allreduce": 1.0, "zero1": 0.8, "zero2": 0.5, "zero3": zero3_share}
    step = {"allreduce": 1.0, "zero1": 1.0, "zero2": 1.2, "zero3": zero3_step}
    out: dict[str, list[dict[str, Any]]] = {s: [] for s in SUBJECTS}
    for subject in SUBJECTS:
        for k in (0.99, 1.0, 1.01):
            memory = [int(1000 * MIB * share[subject] * k), int(990 * MIB * share[subject] * k)]
            out[subject].append({"memory": True, "memory_bytes": memory, "median_step_s": 9.0, "wall_s": 1})
            out[subject].append({"memory": False, "memory_bytes": [0], "median_step_s": step[subject] * k})
    return out


@pytest.mark.parametrize(
    ("share", "step", "memory_verdict", "step_verdict"),
    [
        (0.30, 1.5, "met", "slower"),
        (0.50, 1.0, "missed", "not distinguishable at this noise"),
        (0.40, 0.7, "not distinguishable at this noise", "faster"),  # on the goal itself
    ],
)
def test_stage_three_is_judged_against_one_over_n_plus_15_percent(
    share: float, step: float, memory_verdict: str, step_verdict: str
) -> None:
    rows = {r["subject"]: r for r in summarize(4, runs(share, step))}
    zero3 = rows["zero3"]
    assert zero3["memory_goal"] == pytest.approx(0.40)
    assert zero3["memory_mib"] == pytest.approx(1000 * share)  # the fullest worker, median over repetitions
    assert zero3["memory_verdict"] == memory_verdict and zero3["step_verdict"] == step_verdict
    assert rows["zero1"]["memory_verdict"] is None  # only stage 3 has a goal
    assert rows["allreduce"]["memory_vs_allreduce"]["median"] == 1.0


def test_the_sections_render_the_rows() -> None:
    sharded = {"machine": MACHINE, "rows": summarize(2, runs(0.4, 1.5)),
               "settings": {"example": "large-mlp", "optimizer": "adam", "batch_per_worker": 32, "steps": 8,
                            "repeats": 3}}  # fmt: skip
    lines = report.sharded(sharded)
    (zero3,) = [line for line in lines if line.startswith("| 2 | zero3 | 400 | 0.40x (")]
    assert "| <= 0.65x: **met** | 1500 | 1.50x (" in zero3 and zero3.endswith("| slower |"), zero3
    bubble = Interval(0.21, 0.2, 0.22, 10)
    pipeline = {"machine": MACHINE, "settings": {"steps": 12, "warmup_steps": 2, "forward_ms": 10, "backward_ms": 20},
                "rows": [{"stages": 2, "micro_batches": 4, "median_step_s": 0.16, "bubble": bubble.mid,
                          "bubble_range": [bubble.lo, bubble.hi], "formula": 0.2, "excess": 0.01}]}  # fmt: skip
    assert "| 2 | 4 | 160 | 0.210 (0.200-0.220) | 0.200 | +0.010 |" in report.pipeline(pipeline)
