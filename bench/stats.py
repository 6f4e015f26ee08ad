"""Intervals and verdicts that respect noise, pure (no I/O, no clock): what every comparison in BENCHMARKS.md
is judged by.

- `spread`: the median of a set of repetitions with its min-max range.
- `ratio_interval`: median(a) / median(b) for two independent sets of runs (two systems measured in the same
  invocation, interleaved), with a percentile bootstrap interval: each side resampled with replacement, the ratio
  of the resampled medians taken `resamples` times. Seeded, so a report regenerated from the same runs says the
  same thing.
- `paired_interval`: for paired runs (the same pair of configurations run back to back, order alternating), the
  median of the per-pair ratios with a bootstrap interval over the pairs. Pairing removes the drift that both
  members of a pair share (another tenant on the machine, thermal state), which is most of the noise here.
- `at_most` and `within`: a goal is met only when the whole interval is inside it, missed only when the whole
  interval is outside it, and otherwise "not distinguishable at this noise". `within` is two-sided: an overhead
  of -8 % +/- 1 % misses a "within 5 %" goal as surely as +8 % does.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

RESAMPLES = 4000
CONFIDENCE = 0.95
SEED = 20261125


class Verdict(StrEnum):
    MET = "met"
    MISSED = "missed"
    NOISE = "not distinguishable at this noise"


@dataclass(frozen=True)
class Interval:
    """A point estimate and the interval around it (`lo` <= `mid` <= `hi` is not guaranteed for bootstrap
    intervals of a ratio, but `lo` <= `hi` is)."""

    mid: float
    lo: float
    hi: float
    n: int

    def as_dict(self) -> dict[str, float]:
        return {"median": self.mid, "lo": self.lo, "hi": self.hi, "n": self.n}

    def as_delta(self) -> dict[str, float]:
        """A ratio's interval read as a relative difference (ratio - 1: +0.05 is 5 % more), as `as_dict`."""
        return {"median": self.mid - 1, "lo": self.lo - 1, "hi": self.hi - 1, "n": self.n}

    def text(self, fmt: str = "{:.2f}", unit: str = "") -> str:
        """ "1.23x (1.10-1.40x)": the estimate and its interval, for tables."""
        return f"{fmt.format(self.mid)}{unit} ({fmt.format(self.lo)}-{fmt.format(self.hi)}{unit})"


def spread(values: Sequence[float]) -> Interval:
    """Median and min-max of a non-empty set of repetitions."""
    if not values:
        raise ValueError("spread of no values")
    return Interval(statistics.median(values), min(values), max(values), len(values))


def _percentiles(samples: list[float], confidence: float) -> tuple[float, float]:
    ordered = sorted(samples)
    tail = (1 - confidence) / 2
    lo = ordered[int(tail * (len(ordered) - 1))]
    hi = ordered[round((1 - tail) * (len(ordered) - 1))]
    return lo, hi


def ratio_interval(
    a: Sequence[float],
    b: Sequence[float],
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
) -> Interval | None:
    """median(a) / median(b) with a percentile bootstrap interval; None when a median of `b` can be zero (no
    ratio exists) or either side is empty."""
    if not a or not b or min(b) <= 0:
        return None
    rng = random.Random(seed)
    ratios = [
        statistics.median(rng.choices(a, k=len(a))) / statistics.median(rng.choices(b, k=len(b)))
        for _ in range(resamples)
    ]
    lo, hi = _percentiles(ratios, confidence)
    return Interval(statistics.median(a) / statistics.median(b), lo, hi, min(len(a), len(b)))


def paired_interval(
    pairs: Sequence[tuple[float, float]],
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
) -> Interval | None:
    """The median over pairs of a / b, with a bootstrap interval over the pairs; None without pairs or with a
    zero denominator."""
    if not pairs or any(b <= 0 for _, b in pairs):
        return None
    ratios = [a / b for a, b in pairs]
    rng = random.Random(seed)
    medians = [statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(resamples)]
    lo, hi = _percentiles(medians, confidence)
    return Interval(statistics.median(ratios), lo, hi, len(pairs))


def at_most(interval: Interval, goal: float) -> Verdict:
    """One-sided goal "<= goal": met when the interval's top is within it, missed when its bottom is past it."""
    if interval.hi <= goal:
        return Verdict.MET
    if interval.lo > goal:
        return Verdict.MISSED
    return Verdict.NOISE


def within(interval: Interval, low: float, high: float) -> Verdict:
    """Two-sided goal "low <= x <= high" (an overhead "within 5 %" is within(i, 0.95, 1.05) on a ratio)."""
    if low <= interval.lo and interval.hi <= high:
        return Verdict.MET
    if interval.hi < low or interval.lo > high:
        return Verdict.MISSED
    return Verdict.NOISE


def time_verdict(ratio: Interval) -> str:
    """A time's ratio to a baseline's, in words: "faster" or "slower" only when the whole interval says so."""
    return "not distinguishable" if ratio.lo <= 1 <= ratio.hi else ("slower" if ratio.lo > 1 else "faster")
