"""Stalls, pure: a Running job whose step has not advanced for runPolicy.progressDeadlineSeconds (or that has
made no first step within its start-up deadline), and the rank that stopped first.

The progress scraper (scraper.py) keeps a `Clock` per job from worker 0's page: the step it last saw, whether
worker 0 has made a step since the job turned Running (start-up is over), and since when the step has not
changed, restarted whenever the job turns Running again (a recovery, a resume). The progress deadline counts
from the last step seen to advance; before the first step, the start-up deadline counts from the turn to
Running (loading data or a checkpoint, compiling, waiting for a replaced peer is not a stall). Once the clock
is overdue it reads every rank's page (their `Beat`s) and `judge` says what it found: a `Stall` naming the rank
that stopped first, which the reconcile round acts on (policies/stall.py), or `Unavailable`: the pages that
would tell cannot be read, which is reported (Stalled Unknown) and never acted on. A rank the operator cannot
read is not a rank that hangs.

Which rank stopped first, from what each rank says of itself (Beat):
1. a rank that took the connection but sent no page in time (a process wedged in native code, or stopped);
   one that refused it, could not be reached, or sent no page of ours says nothing and is left out;
2. else the rank at the lowest step (the others got further: it is behind them);
3. among those, one outside any exchange (computing, reading, stuck) before one waiting on its peers in one:
   a rank that hangs before its collective leaves every peer waiting inside it;
4. among ranks outside an exchange, the one whose last exchange completed first; when every rank waits in
   one (a communication hang), the one that entered it last: the others had waited for it.
5. torch's flight recorder, where the pages carry it (the trainer's, flightrecorder.py), overrules 2-4 when it
   tells: each rank's number of the last collective it entered in each process group; a member behind its
   group's newest never entered the collective the others wait in. The one furthest behind is named (it is
   the rank a collective waits on, whatever the steps say), and when it is the rank 2-4 name, the account
   says both.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ringleader_api import ROLE_NAMES, Role

ROLE_ORDER = {Role.WORKER: 0, Role.PS: 1}
# Seconds a job that turned Running may take to its first step when runPolicy.startupDeadlineSeconds is not set
# (or the progress deadline, if that is longer): importing torch, loading a large checkpoint, compiling.
STARTUP_DEADLINE_SECONDS = 600


def who(role: Role, index: int, pod: str, node: str) -> str:
    """`worker 1 (pod j-worker-1 on node n2)`: how stall and straggler messages name a rank."""
    where = f" on node {node}" if node else ""
    return f"{ROLE_NAMES[role]} {index} (pod {pod}{where})"


@dataclass(frozen=True)
class Beat:
    """Where one rank is, as its page says (progress.parse_beat): its step, since when it waits in an exchange
    (None: it is in none), when its last one completed and when it completed its last step (Unix seconds).
    `step` None: the page has no rank gauges (a script that does not use the strategy API)."""

    step: int | None = None
    waiting_since: float | None = None
    exchange_done: float | None = None
    compute: float | None = None  # seconds per step outside exchanges, a moving average (stragglers.py)
    stepped_at: float | None = None  # None: no step yet in this process
    # Per process group (flight recorder): (group, the last collective entered, the last seen complete).
    collectives: tuple[tuple[str, int, int], ...] = ()


@dataclass(frozen=True)
class Clock:
    """Worker 0's step as last read since the job turned Running (None: none read yet), `since` (monotonic
    seconds) it last advanced, else since the job turned Running, and that Running condition's
    lastTransitionTime (a new one restarts the clock). `started`: worker 0 has made a step since (start-up is
    over); `looked`: the ranks were read once already in this period (a page never served is looked for again
    at the start-up deadline, not at every progress deadline)."""

    step: int | None
    since: float
    running_since: str
    started: bool = False
    looked: bool = False


def tick(
    clock: Clock | None,
    step: int | None,
    running_since: str | None,
    now: float,
    stepped_at: float | None = None,
    running_at: float | None = None,
) -> Clock | None:
    """The clock after a scrape at monotonic `now` that read `step` (None: none read) and worker 0's last step's
    Unix time `stepped_at`. `running_since`: the job's Running condition's lastTransitionTime while it is True,
    else None (the clock stops); `running_at`: the same in Unix seconds. Start-up ends when the step read
    changes, or when the first page read says worker 0 made a step after the job turned Running."""
    if running_since is None:
        return None
    if clock is None or clock.running_since != running_since:
        clock = Clock(None, now, running_since)
    if step is None:
        return clock
    if clock.step is None:
        began = stepped_at is not None and running_at is not None and stepped_at >= running_at
        return dataclasses.replace(clock, step=step, started=began, since=now if began else clock.since)
    if step != clock.step:
        return dataclasses.replace(clock, step=step, since=now, started=True)
    return clock


def overdue(clock: Clock | None, deadline: int | None, startup: int, now: float) -> bool:
    """Whether the ranks are to be read: worker 0's step has not advanced for `deadline` seconds since its first
    step, or no first step came within `startup` seconds of the turn to Running, or (once) no step could be read
    at all for `deadline` seconds (a page not served: reported, never a stall)."""
    if clock is None or deadline is None:
        return False
    limit = deadline if clock.started or (clock.step is None and not clock.looked) else startup
    return now - clock.since >= limit


@dataclass(frozen=True)
class RankBeat:
    """One rank pod's page as read: its `beat`, or `error` (the page could not be read); `unreachable`: not even
    a connection was made to the pod's address, `hung`: the connection was made but no page came in time
    (progress.ScrapeError)."""

    pod: str
    role: Role
    index: int
    node: str
    beat: Beat = field(default_factory=Beat)
    error: str = ""
    unreachable: bool = False
    hung: bool = False

    @property
    def who(self) -> str:
        return who(self.role, self.index, self.pod, self.node)

    @property
    def waiting(self) -> bool:
        return self.beat.waiting_since is not None

    @property
    def told(self) -> bool:
        """Whether the read says anything of the rank: a page, or a page that did not come (it hangs)."""
        return not self.error or self.hung


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


def find_culprit(beats: list[RankBeat], now: float) -> Culprit | None:
    """The rank that stopped first among `beats` (read at Unix time `now`), or None when no page tells
    (none of the ranks exports its place)."""
    if not beats:
        return None
    silent = sorted((b for b in beats if b.error and b.hung), key=lambda b: (ROLE_ORDER[b.role], b.index))
    if silent:
        first = silent[0]
        others = f" ({len(silent) - 1} more did not either)" if len(silent) > 1 else ""
        return _culprit(first, f"{first.who} did not answer for its metrics page: {first.error}{others}")
    by_steps = _by_steps([b for b in beats if b.beat.step is not None], now)
    recorded = _by_flight_recorder(beats)
    if recorded is None:
        return by_steps
    rank, evidence = recorded
    if by_steps is not None and (by_steps.role, by_steps.index) == (rank.role, rank.index):
        return dataclasses.replace(by_steps, message=f"{by_steps.message}; {evidence}")
    at = f" at step {rank.beat.step}" if rank.beat.step is not None else ""
    return _culprit(rank, f"{rank.who}{at} holds up a collective: {evidence}")


def _by_flight_recorder(beats: list[RankBeat]) -> tuple[RankBeat, str] | None:
    """The rank a collective waits on by the flight recorder's numbers (rule 5), with the evidence; None when
    in no process group a member is behind the others."""
    members: dict[str, list[tuple[int, RankBeat]]] = {}
    for b in beats:
        for group, entered, _ in b.beat.collectives:
            members.setdefault(group, []).append((entered, b))
    behind: list[tuple[tuple[int, int, int], RankBeat, str]] = []
    for group, ranks in members.items():
        newest = max(entered for entered, _ in ranks)
        waiting = sum(entered == newest for entered, _ in ranks)
        said = (
            f"torch's flight recorder says it never entered collective {newest} of process group {group}, which "
            f"{waiting} of the {len(ranks)} members read entered and wait in"
        )
        behind += [
            ((entered - newest, ROLE_ORDER[b.role], b.index), b, f"{said} (its last: {entered})")
            for entered, b in ranks
            if entered < newest
        ]
    if not behind:
        return None
    _, rank, evidence = min(behind, key=lambda f: f[0])
    return rank, evidence


def _by_steps(placed: list[RankBeat], now: float) -> Culprit | None:
    """The rank that stopped first by steps and exchanges (rules 2-4), None without a rank placed."""
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
    how long it had not advanced (`started` False: no first step came in that long since the job turned
    Running), the Running condition's lastTransitionTime it was measured under (a round that finds another one
    ignores it: the job has turned Running since), and the rank named, if any."""

    step: int | None
    seconds: float
    running_since: str
    culprit: Culprit | None
    ranks_read: int
    started: bool = True

    def describe(self) -> str:
        if self.started:
            at = f"at step {self.step}" if self.step is not None else "before its first step"
            head = f"no progress for {self.seconds:.0f} s {at}"
        else:
            at = f" (still at step {self.step})" if self.step is not None else ""
            head = f"no first step in {self.seconds:.0f} s since the job turned Running{at}"
        if self.culprit is None:
            return f"{head}; no rank said where it is ({self.ranks_read} pages read)"
        return f"{head}: {self.culprit.message}"


@dataclass(frozen=True)
class Unavailable:
    """What the scraper found when the pages that would tell of a stall cannot be read: reported (Stalled
    Unknown, reason ProgressUnavailable), never acted on. `running_since` as in Stall; `message`: why (one line)."""

    running_since: str
    message: str


def judge(clock: Clock, beats: list[RankBeat], now: float, seconds: float) -> Stall | Unavailable:
    """What the ranks' pages (`beats`, read at Unix time `now`) make of an overdue `clock` (`seconds` since it
    last moved): a Stall only when worker 0's step was read in this period and some rank's read tells (a page,
    or a hang); else Unavailable, saying why."""
    told = [b for b in beats if b.told]
    if clock.step is not None and told:
        return Stall(clock.step, seconds, clock.running_since, find_culprit(beats, now), len(beats), clock.started)
    return Unavailable(clock.running_since, _unread(clock, beats))


_NOT_ACTED_ON = "runPolicy.progressDeadlineSeconds is not acted on until one can be read"


def _unread(clock: Clock, beats: list[RankBeat]) -> str:
    """Why no stall can be judged, in one line (the same while the cause is: the condition it sets keeps it)."""
    if not beats:
        return f"no rank pod is running to read progress from; {_NOT_ACTED_ON}"
    first = next((b.error for b in beats if b.error), "no page has ringleader_trainer_step")
    if all(b.unreachable for b in beats):
        return (
            f"none of the {len(beats)} ranks' metrics pages could be reached from the operator ({first}): the "
            f"network between the operator and the job's pods is broken (check NetworkPolicies and routes); "
            f"{_NOT_ACTED_ON}"
        )
    if clock.step is None:
        return (
            f"worker 0's step could not be read ({first}): a script that serves no progress page and a network "
            f"that refuses the operator look the same, so no stall can be told; {_NOT_ACTED_ON}"
        )
    return f"none of the {len(beats)} ranks' metrics pages could be read ({first}); {_NOT_ACTED_ON}"
