"""Stragglers, pure: ranks that work much slower than their peers (runPolicy.stragglerThreshold).

Every rank exports how long each step takes it outside exchanges (its own work: the step's wall time less the
time it waited on peers; a moving average over about 10 steps). In a synchronous job the peers of a slow rank
wait for it, so their own work stays short while its grows: a rank whose work per step is `threshold` times
the median of the other ranks of its role (workers with workers, shards with shards) is slow. One that stays
slow in every reading for `windowSeconds` is a straggler: named in the job's Straggler condition, and under
stragglerPolicy Replace recreated once, its replacement preferring another node (policies/straggler.py).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ringleader_api import Role

from .stalls import RankBeat, who

NAMED_AT_MOST = 5  # ranks a condition message names; the rest are counted


@dataclass(frozen=True)
class Slow:
    """A rank working `factor` times its peers' median (`compute` against `median` seconds per step)."""

    pod: str
    role: Role
    index: int
    node: str
    compute: float
    median: float

    @property
    def factor(self) -> float:
        return self.compute / self.median

    def describe(self) -> str:
        return (
            f"{who(self.role, self.index, self.pod, self.node)} works {self.factor:.1f}x its peers' median "
            f"({self.compute:.3g} s a step against {self.median:.3g} s)"
        )


def find_slow(beats: list[RankBeat], threshold: float) -> list[Slow]:
    """The ranks whose work per step is at least `threshold` times the median of their role's other ranks
    (ranks that did not say, and roles of one rank, are not judged), slowest first."""
    out = []
    for role in Role:
        timed = [b for b in beats if b.role == role and b.beat.compute]
        for i, b in enumerate(timed):
            others = [o.beat.compute or 0.0 for j, o in enumerate(timed) if j != i]
            if not others:
                continue
            median = statistics.median(others)
            compute = b.beat.compute or 0.0
            if median > 0 and compute >= threshold * median:
                out.append(Slow(b.pod, b.role, b.index, b.node, compute, median))
    return sorted(out, key=lambda s: (-s.factor, s.role.value, s.index))


@dataclass(frozen=True)
class Watch:
    """The job's slow ranks by pod, and since when (monotonic seconds) each has been slow in every reading,
    under the Running condition of `running_since` (a new one starts over)."""

    running_since: str
    since: dict[str, float]


def confirm(
    watch: Watch | None, slow: list[Slow], running_since: str, now: float, window: float
) -> tuple[Watch, list[Slow]]:
    """The watch after a reading at `now` that found `slow`, and the stragglers: the ranks slow in every reading
    for at least `window` seconds. A rank not slow in this reading starts over."""
    before = watch.since if watch is not None and watch.running_since == running_since else {}
    since = {s.pod: before.get(s.pod, now) for s in slow}
    return Watch(running_since, since), [s for s in slow if now - since[s.pod] >= window]


@dataclass(frozen=True)
class Stragglers:
    """What a reading found, for the job's next round: the stragglers (none: the Straggler condition turns False)
    under the Running condition of `running_since`, and the threshold and window they were judged by."""

    running_since: str
    ranks: tuple[Slow, ...]
    threshold: float
    window: float

    def describe(self) -> str:
        if not self.ranks:
            return f"no rank works {self.threshold:g}x its peers' median or more"
        named = "; ".join(s.describe() for s in self.ranks[:NAMED_AT_MOST])
        more = f"; and {len(self.ranks) - NAMED_AT_MOST} more" if len(self.ranks) > NAMED_AT_MOST else ""
        return f"{named}{more}, for {self.window:g} s or more"


def read_every(window: float, ranks: int, pages_per_second: float) -> float:
    """Seconds between two readings of a job's pages: three readings a window, but no more than
    `pages_per_second` pages a second for the job (a 10,000-rank job at 50 a second: every 200 s)."""
    return max(window / 3, ranks / pages_per_second)
