"""A job's rank pods as its rounds keep count of them between rounds, pure: each rank's pod, the ranks whose pod
runs or is done, the counts status shows per role, and which ranks the next round must look at.

A round hands the book the pods it observed (observed.own_ranks); the book changes by the pods that changed, told
apart by instance (Observations hands an unchanged pod version over as the same ObservedPod). Where the pod cache
says which pods changed since the job's last round (podcache.PodDelta: each group of the index keeps its recent
changes by name), own_ranks looks at those alone and the book takes only their names: a round of a job whose pods
did not change touches none of them. Without (the first round, pods read from the API server, this process's
own writes not yet delivered by the watch, a pod made again under its name), it costs a pass of identity checks
over the job's pods plus work for the pods that changed, not a recount. The
round's rank decisions (policies/restarts.py) then look only at the ranks whose pods changed and those not yet
settled (`settled`): a settled rank is one the decision leaves as it is, whatever the time.

`RankBook.recount` builds a book from scratch: the property tests hold the kept book equal to it under any order
of pod events, and a plan made with the book equal to one made without."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ringleader_api import RankStatus, RestartPolicy, Role, TrainingJob

from .observed import Kept, ObservedPod

RankKey = tuple[Role, int]

# The per-role counts of pods not being deleted, as ReplicaStatus names them (`counts` holds them in this order).
COUNTED = ("active", "ready", "succeeded", "failed")
ACTIVE, READY, SUCCEEDED, FAILED = range(len(COUNTED))


@dataclass
class RankBook:
    """What the job's pods are, kept up to date by `update`. Readers treat every field as read-only."""

    pods: dict[str, ObservedPod] = field(default_factory=dict)  # by name (a rank's pod is named after it)
    by_rank: dict[RankKey, list[ObservedPod]] = field(default_factory=dict)  # each rank's pod, as a list of one
    up: set[RankKey] = field(default_factory=set)  # ranks whose pod is not being deleted and runs or is done
    counts: dict[Role, list[int]] = field(default_factory=dict)  # per role: ACTIVE, READY, SUCCEEDED, FAILED
    worlds: Counter[int | None] = field(default_factory=Counter)  # workers not being deleted, by the world they joined
    gated: int = 0  # pods carrying the gang gate
    observed: list[ObservedPod] | None = None  # the list the book was last brought up to date with
    # `down`'s: the desired ranks it was asked of (the list itself: shared per size), as a set, and those not up
    wanted: tuple[list[RankKey], set[RankKey], set[RankKey]] | None = None
    # Between rounds (Round.keep_book): the ranks the next round must look at, what the last round left status.ranks as,
    # and which job (uid, generation, ranks wanted) that round planned for. A round that finds status.ranks or the
    # job otherwise looks at every rank.
    unsettled: set[RankKey] = field(default_factory=set)
    unwanted: set[RankKey] = field(default_factory=set)  # ranks the job no longer has whose pods were still there
    ranks_after: dict[str, RankStatus] | None = None
    planned_for: tuple[Any, ...] | None = None
    bounded: dict[str, RankStatus] | None = None  # status.ranks (the object) found within policies/history's bound

    @classmethod
    def recount(cls, observed: list[ObservedPod]) -> RankBook:
        book = cls()
        book.update(observed)
        return book

    def update(
        self,
        observed: list[ObservedPod],
        changed_names: set[str] | None = None,
        by_name: dict[str, ObservedPod] | None = None,
    ) -> set[RankKey] | None:
        """Bring the book to `observed` (the job's rank pods now); returns the ranks whose pods changed, or None
        when two pods share a name (not the pods of ranks: the book is emptied and the round counts afresh).
        `changed_names` and `by_name`: the names of the only pods that changed since the book was last brought up
        to date, and the pods by name (Observations.changed and ranks): then only those are looked at."""
        if changed_names is not None and by_name is not None and self.observed is not None:
            return self._apply(observed, changed_names, by_name)
        names = {p.name for p in observed}
        if len(names) != len(observed):
            fresh = RankBook()
            self.__dict__.update(fresh.__dict__)
            return None
        changed = set[RankKey]()
        for p in observed:
            self._put(p.name, p, changed)
        if len(self.pods) != len(observed):
            for name in [n for n in self.pods if n not in names]:
                self._put(name, None, changed)
        self.observed = observed
        return changed

    def _apply(self, observed: list[ObservedPod], names: set[str], by_name: dict[str, ObservedPod]) -> set[RankKey]:
        changed = set[RankKey]()
        for name in names:
            self._put(name, by_name.get(name), changed)
        self.observed = observed
        return changed

    def _put(self, name: str, now: ObservedPod | None, changed: set[RankKey]) -> None:
        """Make `now` the pod named `name` (None: there is none), counted in place of the one before; the ranks
        whose pod changed go into `changed`."""
        before = self.pods.get(name)
        if before is now:
            return
        if before is not None:
            self._count(before, -1)
            changed.add((before.role, before.index))
        if now is None:
            del self.pods[name]
            return
        self.pods[name] = now
        self._count(now, 1)
        changed.add((now.role, now.index))

    def down(self, desired: list[RankKey]) -> set[RankKey]:
        """The ranks of `desired` whose pod is not up (none: every one runs or is done). Kept by `_count` from one
        call to the next while `desired` is the same list (builders.desired_ranks shares one per size)."""
        if self.wanted is None or self.wanted[0] is not desired:
            wanted = set(desired)
            self.wanted = (desired, wanted, wanted - self.up)
        return self.wanted[2]

    def _count(self, p: ObservedPod, sign: int) -> None:
        """Add (1) or take away (-1) the pod's part in every count and index."""
        rank = (p.role, p.index)
        if sign > 0:
            self.by_rank[rank] = [p]
        elif self.by_rank.get(rank, [None])[0] is p:
            del self.by_rank[rank]
        self.gated += sign * p.gated
        if p.deleting:
            return
        counts = self.counts.setdefault(p.role, [0, 0, 0, 0])
        counts[ACTIVE] += sign * (p.phase in ("Pending", "Running"))
        counts[READY] += sign * (p.ready and p.phase == "Running")
        counts[SUCCEEDED] += sign * (p.phase == "Succeeded")
        counts[FAILED] += sign * (p.phase == "Failed")
        if p.role == Role.WORKER:
            self.worlds[p.workers] += sign
            if not self.worlds[p.workers]:
                del self.worlds[p.workers]
        if p.phase in ("Running", "Succeeded"):
            if sign > 0:
                self.up.add(rank)
            else:
                self.up.discard(rank)
            if self.wanted is not None and rank in self.wanted[1]:
                if sign > 0:
                    self.wanted[2].discard(rank)
                else:
                    self.wanted[2].add(rank)

    def state(self) -> tuple[Any, ...]:
        """Everything the book counts, for comparing two books (the property tests)."""
        counts = {role: c for role, c in self.counts.items() if any(c)}
        return (dict(self.pods), dict(self.by_rank), set(self.up), counts, +self.worlds, self.gated)


def settled(job: TrainingJob, rank: RankStatus, pods: Iterable[ObservedPod], going: set[str]) -> bool:
    """The rank's decision (policies/restarts.py) leaves it as it is, whatever the time: its pod of the current
    attempt stays (not being deleted, none planned), was seen, and has not failed (nor, for a parameter server
    that restarts Always, ended)."""
    live = [p for p in pods if not p.deleting]
    if not live or not rank.pod_seen:
        return False
    pod = live[0]
    return pod.name not in going and current(rank, pod) and pod.phase != "Failed" and not exited_under_always(job, pod)


def current(rank: RankStatus, pod: ObservedPod) -> bool:
    """The pod is of the rank's current attempt (a pod made before attempts were recorded is taken as it)."""
    return pod.attempt is None or pod.attempt >= rank.attempt


def exited_under_always(job: TrainingJob, pod: ObservedPod) -> bool:
    """A parameter server whose program ended though its role restarts Always: counted as a failure."""
    spec = job.replicas(pod.role)
    return (
        pod.phase == "Succeeded"
        and pod.role == Role.PS
        and spec is not None
        and spec.restart_policy == RestartPolicy.ALWAYS
    )


class Observations:
    """A job's pods as its last round observed them (observed.own_ranks keeps them): a version of a pod never
    changes, so a round looks again only at the pods that changed since (of a 10,000-rank job, those whose events
    brought the round), and, where the pod index says which those are (podcache.PodDelta), at nothing else. Holds
    the job's current pods only; one per job (the operator's memory of it)."""

    def __init__(self) -> None:
        self.job_uid = ""  # whose rank each observation judged (a job made again under its name is another)
        self.kept: dict[str, Kept] = {}  # by pod name: its version, its rank and whether it is the job's
        self.ranks: dict[str, ObservedPod] = {}  # the job's ranks among them, by name, in the pods' order
        self.foreign: set[str] = set()  # the other pods' names
        self.revision: tuple[object, int] | None = None  # the pod index's revision they are of (None: unknown)
        self.changed: set[str] | None = None  # ranks whose observation the last round changed (None: it read all)
        self.listed: list[ObservedPod] | None = None  # the ranks as the last round got them (read-only)
        self.book: RankBook | None = None  # the job's ranks as its rounds keep count of them
