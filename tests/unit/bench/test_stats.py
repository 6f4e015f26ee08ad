"""Intervals and verdicts of bench/stats.py: a goal is met or missed only when the whole interval says so."""

from __future__ import annotations

import pytest

from bench.stats import Interval, Verdict, at_most, paired_interval, ratio_interval, spread, within


def test_spread_is_median_and_range() -> None:
    assert spread([3.0, 1.0, 2.0, 10.0]) == Interval(2.5, 1.0, 10.0, 4)
    with pytest.raises(ValueError, match="no values"):
        spread([])


@pytest.mark.parametrize(
    ("interval", "goal", "expected"),
    [
        pytest.param(Interval(0.4, 0.3, 0.5, 5), 0.5, Verdict.MET, id="top-on-the-goal-is-met"),
        pytest.param(Interval(0.4, 0.3, 0.6, 5), 0.5, Verdict.NOISE, id="straddling-is-noise"),
        pytest.param(Interval(0.7, 0.51, 0.9, 5), 0.5, Verdict.MISSED, id="bottom-past-the-goal-is-missed"),
        pytest.param(Interval(0.45, 0.45, 0.45, 1), 0.5, Verdict.MET, id="no-spread"),
    ],
)
def test_at_most(interval: Interval, goal: float, expected: Verdict) -> None:
    assert at_most(interval, goal) is expected


@pytest.mark.parametrize(
    ("interval", "expected"),
    [
        pytest.param(Interval(1.01, 0.97, 1.04, 10), Verdict.MET, id="inside"),
        pytest.param(Interval(0.92, 0.91, 0.93, 10), Verdict.MISSED, id="faster-than-allowed-is-missed-too"),
        pytest.param(Interval(1.08, 1.06, 1.10, 10), Verdict.MISSED, id="slower"),
        pytest.param(Interval(1.00, 0.90, 1.10, 10), Verdict.NOISE, id="wider-than-the-goal"),
        pytest.param(Interval(1.04, 1.02, 1.06, 10), Verdict.NOISE, id="over-one-edge"),
    ],
)
def test_within_is_two_sided(interval: Interval, expected: Verdict) -> None:
    assert within(interval, 0.95, 1.05) is expected


def test_ratio_interval_contains_the_ratio_of_medians_and_is_reproducible() -> None:
    a, b = [1.0, 1.1, 0.9, 1.2, 1.0], [2.0, 2.2, 1.9, 2.1, 2.0]
    r = ratio_interval(a, b)
    assert r is not None
    assert r.mid == pytest.approx(0.5)
    assert r.lo <= r.mid <= r.hi
    assert r.lo >= min(a) / max(b) and r.hi <= max(a) / min(b)  # never wider than the extreme ratios
    assert ratio_interval(a, b) == r  # seeded
    assert r.n == 5


def test_ratio_interval_separates_clear_differences_and_not_overlapping_noise() -> None:
    clear = ratio_interval([1.0, 1.05, 0.95, 1.0, 1.02], [3.0, 3.1, 2.9, 3.05, 2.95])
    noisy = ratio_interval([1.0, 2.0, 0.5, 1.5, 1.0], [1.1, 0.6, 1.9, 1.2, 1.0])
    assert clear is not None and noisy is not None
    assert at_most(clear, 0.5) is Verdict.MET
    assert at_most(noisy, 1.0) is Verdict.NOISE


@pytest.mark.parametrize(
    ("a", "b"),
    [pytest.param([], [1.0], id="empty"), pytest.param([1.0], [0.0, 1.0], id="zero-denominator")],
)
def test_no_ratio_without_runs_or_with_a_zero(a: list[float], b: list[float]) -> None:
    assert ratio_interval(a, b) is None


def test_paired_interval_removes_shared_drift() -> None:
    # Each pair shares a drift factor (the machine got slower, then faster): unpaired, the two sets overlap
    # widely; paired, every ratio is 1.10 +/- 0.01.
    drift = [1.0, 1.4, 0.8, 1.2, 0.9, 1.3, 1.1, 0.85, 1.25, 0.95]
    pairs = [(d * (1.10 + 0.01 * (i % 2)), d) for i, d in enumerate(drift)]
    paired = paired_interval(pairs)
    unpaired = ratio_interval([p[0] for p in pairs], [p[1] for p in pairs])
    assert paired is not None and unpaired is not None
    assert 1.09 <= paired.lo <= paired.hi <= 1.12
    assert within(paired, 0.95, 1.05) is Verdict.MISSED
    assert unpaired.hi - unpaired.lo > 5 * (paired.hi - paired.lo)
    assert paired_interval([]) is None and paired_interval([(1.0, 0.0)]) is None
