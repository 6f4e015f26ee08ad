"""The trainer-vs-plain-DDP verdict of bench/strategy_bench.py: paired runs, a two-sided goal."""

from __future__ import annotations

import pytest

from bench.strategy_bench import overhead


@pytest.mark.parametrize(
    ("trainer", "baseline", "verdict"),
    [
        pytest.param([1.02, 1.41, 0.81, 1.22, 0.91] * 2, [1.0, 1.4, 0.8, 1.2, 0.9] * 2, "met", id="within"),
        pytest.param([0.9, 1.26, 0.72, 1.08, 0.81] * 2, [1.0, 1.4, 0.8, 1.2, 0.9] * 2, "missed", id="ten-faster"),
        pytest.param([1.1, 1.3, 0.85, 1.2, 0.9] * 2, [1.0, 1.4, 0.8, 1.2, 0.9] * 2, "not distinguishable at this noise",
                     id="noisy"),
    ],
)  # fmt: skip
def test_strategy_overhead_is_paired_and_two_sided(trainer: list[float], baseline: list[float], verdict: str) -> None:
    o = overhead(trainer, baseline)
    assert o["verdict"] == verdict and o["n"] == 10 and o["lo"] <= o["median"] <= o["hi"]
