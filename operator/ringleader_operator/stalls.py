"""Stalls, pure: a Running job whose step has not advanced for runPolicy.progressDeadlineSeconds, and the rank
that stopped first.

The progress scraper (scraper.py) keeps a `Clock` per job from worker 0's page: the step it last saw and when
that step changed, restarted whenever the job turns Running again (a recovery, a resume). Once the clock is
older than the deadline it reads every rank's page (their `Beat`s) and `find_culprit` names the rank that
stopped first; the reconcile round then acts on the `Stall` (policies/stall.py).

Which rank stopped first, from what each rank says of itself (Beat):
1. a rank whose page does not answer (a process wedged in native code, a pod cut off from the network);
2. else the rank at the lowest step (the others got further: it is behind them);
3. among those, one outside any exchange (computing, reading, stuck) before one waiting on its peers in one:
   a rank that hangs before its collective leaves every peer waiting inside it;
4. among ranks outside an exchange, the one whose last exchange completed first; when every rank waits in
   one (a communication hang), the one that entered it last: the others had waited for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ringleader_api import ROLE_NAMES, Role

ROLE_ORDER = {Role.WORKER: 0, Role.PS: 1}


def who(role: Role, index: int, pod: str, node: str) -> str:
    """`worker 1 (pod j-worker-1 on node n2)`: how stall and straggler messages name a rank."""
    where = f" on node {node}" if node else ""
    return f"{ROLE_NAMES[role]} {index} (pod {pod}{where})"


@dataclass(frozen=True)
class Beat:
    """Where one rank is, as its page says (progress.parse_beat): its step, since when it waits in an exchange
    (None: it is in none) and when its last one completed (Unix seconds). `step` None: the page has no rank
    gauges (a script that does not use the strategy API)."""

    step: int | None = None
    waiting_since: float | None = None
    exchange_done: float | None = None
    compute: float | None = None  # seconds per step outside exchanges, a moving average (stragglers.py)


@dataclass(frozen=True)
class Clock:
    """Worker 0's step as last seen, `since` (monotonic seconds) it last changed or the job turned Running,
    and that Running condition's lastTransitionTime (a new one restarts the clock)."""

    step: int | None
    since: float
    running_since: str


def tick(clock: Clock | None, step: int | None, running_since: str | None, now: float) -> Clock | None:
    """The clock after a scrape at monotonic `now` that read `step` (None: none read). `running_since`: the
    job's Running condition's lastTransitionTime while it is True, else None (the clock stops)."""
    if running_since is None:
        return None
    if clock is None or clock.running_since != running_since:
        return Clock(step, now, running_since)
    if step is not None and step != clock.step:
        return Clock(step, now, running_since)
    return clock


def overdue(clock: Clock | None, deadline: int | None, now: float) -> bool:
    """Whether the job has gone `deadline` seconds without its step advancing."""
    return clock is not None and deadline is not None and now - clock.since >= deadline


@dataclass(frozen=True)
class RankBeat:
    """One rank pod's page as read: its `beat`, or `error` (the page could not be read); `unreachable`: not even
    a connection was made to the pod's address (progress.ScrapeError)."""

    pod: str
    role: Role
    index: int
    node: str
    beat: Beat = field(default_factory=Beat)
    error: str = ""
    unreachable: bool = False

    @property
    def who(self) -> str:
        return who(self.role, self.index, self.pod, self.node)

    @property
    def waiting(self) -> bool:
        return self.beat.waiting_since is not None


@dataclass(frozen=True)
class Culprit:
    """The rank named as having stopped first, and the account of it (one line)."""

    pod: str
    role: Role
    index: int
    node: str
    message: str


def _order(b: RankBeat) -> tuple[object, ...]:
    """Sort key: the rank that stopped first sorts first (rules 2-4 of the module's docstring)."""
    # Waiting: the last to enter sorts first; outside an exchange: the first to have left its last.
    tie = -(b.beat.waiting_since or 0.0) if b.waiting else (b.beat.exchange_done or 0.0)
    return (b.beat.step, b.waiting, tie, ROLE_ORDER[b.role], b.index)


def _ago(stamp: float | None, now: float) -> str:
    return f"{max(0.0, now - stamp):.0f} s" if stamp else "ever"


def unobserved(beats: list[RankBeat]) -> bool:
    """Whether a stall found with these pages says nothing of the job: the operator reached none of its ranks
    (each read failed before a connection was made). A wedged trainer's kernel still accepts the connection and
    the read times out, so every rank unreachable at once points at the network between the operator and the
    pods (a NetworkPolicy, a route, the CNI), which replacing ranks cannot mend: such a stall is not acted on."""
    return bool(beats) and all(b.unreachable for b in beats)


def find_culprit(beats: list[RankBeat], now: float) -> Culprit | None:
    """The rank that stopped first among `beats` (read at Unix time `now`), or None when no page tells
    (none of the ranks exports its place)."""
    if not beats:
        return None
    silent = sorted((b for b in beats if b.error), key=lambda b: (ROLE_ORDER[b.role], b.index))
    if silent:
        first = silent[0]
        others = f" ({len(silent) - 1} more did not either)" if len(silent) > 1 else ""
        return _culprit(first, f"{first.who} did not answer for its metrics page: {first.error}{others}")
    placed = [b for b in beats if b.beat.step is not None]
    if not placed:
        return None
    first = min(placed, key=_order)
    waiting = sum(b.waiting for b in placed)
    if first.waiting:
        return _culprit(
            first,
            f"every rank at step {first.beat.step}, the furthest behind, waits in an exchange (a communication "
            f"hang?); {first.who} entered it last, {_ago(first.beat.waiting_since, now)} ago",
        )
    behind = sum(b.beat.step == first.beat.step for b in placed)
    ahead = f", {len(placed) - behind} ranks are past it" if behind < len(placed) else ""
    return _culprit(
        first,
        f"{first.who} stopped first: at step {first.beat.step}, outside any exchange, its last completed "
        f"{_ago(first.beat.exchange_done, now)} ago, while {waiting} of {len(placed)} ranks wait in one{ahead}",
    )


def _culprit(b: RankBeat, message: str) -> Culprit:
    return Culprit(b.pod, b.role, b.index, b.node, message)


@dataclass(frozen=True)
class Stall:
    """A stall the scraper found, for the next round to act on: the job's step (None: none was read) and for
    how long it had not advanced, the Running condition's lastTransitionTime it was measured under (a round that
    finds another one ignores it: the job has turned Running since), and the rank named, if any."""

    step: int | None
    seconds: float
    running_since: str
    culprit: Culprit | None
    ranks_read: int

    def describe(self) -> str:
        at = f"at step {self.step}" if self.step is not None else "before its first step"
        head = f"no progress for {self.seconds:.0f} s {at}"
        if self.culprit is None:
            return f"{head}; no rank said where it is ({self.ranks_read} pages read)"
        return f"{head}: {self.culprit.message}"
