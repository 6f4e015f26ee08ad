"""One reconcile round's state, pure: what the round observed, the status it is building and the plan so far.

`plan` (reconcile.py) opens a `Round` and hands it to the policies in turn (policies/); each reads the
observation, writes status and adds to the plan through the few methods here, so that how a condition is
set, how a job fails and how a timed wake-up is asked for are written once.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, NamedTuple

from ringleader_api import (
    LABEL_JOB,
    LABEL_ROLE,
    ConditionType,
    JobPhase,
    PendingLoss,
    RankStatus,
    ReplicaStatus,
    Role,
    TrainingJob,
    TrainingJobStatus,
    shared_rank,
)

from .conditions import set_condition
from .names import rank_key, rank_of_key
from .observed import Delta, ObservedPod, own_ranks, parse_time
from .rankbook import COUNTED, Observations, RankBook, settled


class Event(NamedTuple):
    """A Kubernetes Event to emit about the job."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass
class Plan:
    """What the I/O layer is to do for the job after one round, and the status to write."""

    create_pods: list[dict[str, Any]] = field(default_factory=list)
    delete_pods: list[str] = field(default_factory=list)
    create_service: bool = False
    # The pods it creates name the job's coordinator (rank_env.wants_coordinator): make it first where it is missing.
    ensure_coordinator: bool = False
    end_coordinator: bool = False  # the job, which may have had a coordinator, ended this round: delete it
    status: TrainingJobStatus = field(default_factory=TrainingJobStatus)
    events: list[Event] = field(default_factory=list)
    force_delete_pods: list[str] = field(default_factory=list)  # stuck terminating on a lost node
    requeue_after: float | None = None  # seconds until the next timed decision (a back-off, deadline, TTL)
    delete_job: bool = False  # ttlSecondsAfterFinished has run out: delete the job (its pods go with it)
    ungate_pods: list[str] = field(default_factory=list)  # gang admitted: lift the gate from these pods
    pin_pods: dict[str, dict[str, str]] = field(default_factory=dict)  # and add these to their nodeSelector
    waiting_for_room: bool = False  # gated pods wait for room; a round is due when others free some
    # The gang scheduler's PodGroup, or the Workload API's Workload and PodGroup: created, in order, before the pods.
    scheduling_objects: list[dict[str, Any]] = field(default_factory=list)
    foreign_pods: list[str] = field(default_factory=list)  # carry the job's labels, are not its ranks: ignored
    # status.progress is the round's to write (the job finished: its last step; a stop saved: its step)
    writes_progress: bool = False
    ranks_as_read: bool = False  # status.ranks is as read (Round.ranks_as_read): compared by that, not entry by entry
    kill_pods: list[str] = field(default_factory=list)  # stopped first in a stall: deleted with a short grace


RankKey = tuple[Role, int]


@dataclass
class Round:
    """A round in progress. `old` is the status as read; `status` (the plan's) is the one being built.

    `observed` are the job's rank pods; policies that decide a pod is going mark it deleting here too, so the
    policies after them see the world as it will be. `desired` and `by_rank` are filled once the spec is
    known to be valid (`plan` does it)."""

    job: TrainingJob
    pods: list[dict[str, Any]]  # every pod carrying the job's labels, as read
    now: str  # RFC 3339, whole seconds
    at: datetime  # `now`, parsed
    old: TrainingJobStatus
    plan: Plan
    observed: list[ObservedPod]
    restarts: dict[Role, int]  # per role, restarts so far (grows as this round decides restarts)
    desired: list[RankKey] = field(default_factory=list)
    by_rank: dict[RankKey, list[ObservedPod]] = field(default_factory=dict)
    restarting: list[tuple[str, str]] = field(default_factory=list)  # (reason, message) of restarts decided now
    gone: dict[str, ObservedPod] = field(default_factory=dict)  # rank pods lately deleted, by name: last state
    lost_steps: int = 0  # steps trained and not checkpointed, lost to the replacements decided now (goodput)
    pending_loss: PendingLoss | None = None  # replacements decided now whose cost is measured later (goodput)
    stalled_seconds: float = 0.0  # of the Running time counted now, those of a stall found in it (goodput)
    resize_why: str = ""  # why the world's size changes in this round, when the operator chose it (elastic)
    # The job's rank book (rankbook.py), brought up to date with `observed`, and the ranks whose pods changed since
    # the round it was last brought up to date by (None: no book; the round counts afresh).
    book: RankBook | None = None
    changed: set[RankKey] = field(default_factory=set)
    visited: list[RankKey] | None = None  # the ranks the rank decisions looked at (None: not taken this round)
    changed_ranks: set[str] = field(default_factory=set)  # status.ranks keys changed in this round (change_rank)
    unwanted: set[RankKey] = field(default_factory=set)  # ranks the job no longer has whose pods are still there
    _steady: RankBook | bool | None = False  # steady()'s answer, once asked (False: not yet)
    # planned_to_go's index of plan.delete_pods and plan.kill_pods (the lists it has seen, how far, the names)
    _going_lists: tuple[list[str], ...] = ()
    _going_counts: list[int] = field(default_factory=list)
    _going: set[str] = field(default_factory=set)

    @classmethod
    def open(
        cls,
        job: TrainingJob,
        pods: list[dict[str, Any]],
        now: str,
        gone: list[dict[str, Any]] | None = None,
        seen: Observations | None = None,
        delta: Delta | None = None,
    ) -> Round:
        """`gone`: the last states of the job's pods the watch saw deleted lately (podcache.PodCache.deleted).
        `seen`: the job's pods as earlier rounds observed them (rankbook.Observations); `delta`: what changed among
        `pods` since (podcache.PodDelta)."""
        old = job.status
        out = Plan(status=_copy_status(old))
        out.status.observed_generation = int(job.metadata.get("generation", 0))
        before = seen.job_uid if seen is not None else None
        observed, out.foreign_pods = own_ranks(job, pods, seen, delta)
        restarts = {r: (old.replica_statuses.get(r.value) or ReplicaStatus()).restarts for r in Role}
        last = {p.name: p for p in own_ranks(job, gone)[0]} if gone else {}
        r = cls(job, pods, now, parse_time(now), old, out, observed, restarts, gone=last)
        if seen is not None:
            if seen.book is None or seen.job_uid != before:
                seen.book = RankBook()
            changed = seen.book.update(observed, seen.changed, seen.ranks)
            r.book, r.changed = (seen.book, changed) if changed is not None else (None, set())
        return r

    @property
    def status(self) -> TrainingJobStatus:
        return self.plan.status

    @property
    def generation(self) -> int:
        return self.status.observed_generation

    def synced(self) -> RankBook | None:
        """The rank book, while it holds what this round sees (a policy that marks pods going replaces
        `observed`; from then on the round counts afresh)."""
        return self.book if self.book is not None and self.observed is self.book.observed else None

    def index_ranks(self, desired: list[RankKey]) -> None:
        """`desired` and `by_rank`, which policies read and never change (it may be the rank book's own)."""
        self.desired = desired
        if (book := self.synced()) is not None:
            self.by_rank = book.by_rank
            return
        self.by_rank = {}
        for p in self.observed:
            self.by_rank.setdefault((p.role, p.index), []).append(p)

    def steady(self) -> RankBook | None:
        """The rank book, when this round may decide by what changed since the last round: the book holds this
        round's pods, and the last round planned for this job as it is now and left status.ranks as read (entries
        shared by value: compared by identity, in C). Asked once the ranks are indexed (index_ranks)."""
        if self._steady is False:
            book = self.synced()
            self._steady = (
                book
                if book is not None
                and book.planned_for == self._planned_for()
                and book.ranks_after is not None
                and (book.ranks_after is self.old.ranks or book.ranks_after == self.old.ranks)
                else None
            )
        return self._steady if isinstance(self._steady, RankBook) else None

    def wanted(self, rank: RankKey) -> bool:
        """The rank is one of the desired ranks."""
        role, index = rank
        shards = self.job.spec.parameter_servers
        count = self.job.spec.workers.replicas if role == Role.WORKER else shards.replicas if shards else 0
        return 0 <= index < count

    def ranks_to_look_at(self) -> list[RankKey]:
        """The desired ranks the rank decisions must look at, in order: all of them, or, in a steady round (see
        `steady`), those whose pods changed since the last round and those it left unsettled (rankbook.settled:
        the others' decisions would leave them as they are)."""
        book = self.steady()
        if book is None:
            self.visited = self.desired
            return self.desired
        look = [rank for rank in self.changed | book.unsettled if self.wanted(rank)]
        self.visited = sorted(look, key=lambda rank: (rank[0] != Role.PS, rank[1]))  # desired_ranks' order
        return self.visited

    def _planned_for(self) -> tuple[Any, ...]:
        """What a round's rank decisions depend on besides the pods and status.ranks: the job, its spec's
        generation and the world it runs at."""
        shards = self.job.spec.parameter_servers
        return (self.job.metadata.get("uid"), self.generation, self.job.spec.workers.replicas,
                shards.replicas if shards else 0)  # fmt: skip

    def keep_book(self) -> None:
        """At the round's end: what the next round needs of this one (RankBook.unsettled, ranks_after), or that
        it must look at every rank (the rank decisions were not taken, or the book fell out of step)."""
        book = self.book
        if book is None:
            return
        if self.visited is None or self.synced() is None:
            book.ranks_after = None
            return
        going = {*self.plan.delete_pods, *self.plan.kill_pods, *self.plan.force_delete_pods}
        look = {*self.visited, *book.unsettled, *self.changed}
        look.update((p.role, p.index) for name in going if (p := book.pods.get(name)) is not None)
        look.update(rank_of_key(key) for key in self.changed_ranks)
        ranks = self.status.ranks
        book.unsettled = {
            rank for rank in look
            if not settled(self.job, ranks.get(rank_key(*rank)) or NOTHING_KNOWN, self.by_rank.get(rank, ()), going)
        }  # fmt: skip
        # The ranks as read where this round left them so (the same object next round, while the job is not
        # written: compared by identity), else a copy.
        book.ranks_after = self.old.ranks if self.ranks_as_read() else dict(ranks)
        book.planned_for = self._planned_for()
        book.unwanted = self.unwanted

    def ranks_as_read(self) -> bool:
        """status.ranks is as read: no entry was put, and none removed (policies remove entries only with nothing
        put in their place: resize.drop_unwanted_ranks)."""
        return not self.changed_ranks and len(self.status.ranks) == len(self.old.ranks)

    def change_rank(self, key: str, **changes: Any) -> RankStatus:
        """Change the rank's entry in status.ranks (a new instance: entries are frozen and shared, see
        RankStatus); returns it."""
        rank = self.status.ranks.get(key) or NOTHING_KNOWN
        return self.put_rank(key, rank.model_copy(update=changes))

    def put_rank(self, key: str, rank: RankStatus) -> RankStatus:
        """Make `rank` the rank's entry in status.ranks (ranks alike share one instance: shared_rank); returns it."""
        self.status.ranks[key] = kept = shared_rank(rank)
        self.changed_ranks.add(key)
        return kept

    def set_condition(self, kind: ConditionType, ok: bool | None, reason: str, message: str) -> None:
        """Set a condition (`ok` None: Unknown); one that turns True or Unknown says so in an event (Warning for
        Failed, Stalled, Straggler, and for what is not known), except Restarting, whose restarts have an event
        per rank already."""
        before = self.status.conditions
        self.status.conditions = set_condition(before, kind, ok, reason, message, self.now, self.generation)
        if ok is not False and self.status.conditions != before and kind != ConditionType.RESTARTING:
            warn = ok is None or kind in (ConditionType.FAILED, ConditionType.STALLED, ConditionType.STRAGGLER)
            self.plan.events.append(Event("Warning" if warn else "Normal", reason, message))

    def fail(self, reason: str, message: str) -> None:
        self.set_condition(ConditionType.FAILED, True, reason, message)
        self.status.phase = JobPhase.FAILED
        self.status.completion_time = self.now

    @property
    def running_since(self) -> str | None:
        """The lastTransitionTime of the Running condition as read, while it is True (what the scraper's
        findings carry: one made under another Running is old)."""
        running = next((c for c in self.old.conditions if c.type == ConditionType.RUNNING), None)
        return running.last_transition_time if running is not None and running.status == "True" else None

    @property
    def failed(self) -> bool:
        return self.status.phase == JobPhase.FAILED

    def wake_at(self, moment: datetime) -> None:
        """Ask for a round at `moment` (the soonest of all asked for in this round wins)."""
        seconds = (moment - self.at).total_seconds()
        current = self.plan.requeue_after
        self.plan.requeue_after = seconds if current is None else min(current, seconds)

    def after(self, seconds: float) -> datetime:
        return self.at + timedelta(seconds=seconds)

    def summarize(self) -> None:
        """The counts in status: per role, the ready/desired workers for `kubectl get`, the worker pods of the
        current world size with their selector (what the scale subresource reads), and the world's ranks."""
        st, workers, book = self.status, self.job.spec.workers.replicas, self.synced()
        for role in Role:
            if self.job.replicas(role) is not None:
                st.replica_statuses[role.value] = (
                    _counts(self.observed, role, self.restarts[role]) if book is None
                    else ReplicaStatus(**dict(zip(COUNTED, book.counts.get(role, (0,) * 4), strict=True)),
                                       restarts=self.restarts[role])
                )  # fmt: skip
        st.workers = f"{st.replica_statuses.get(Role.WORKER.value, ReplicaStatus()).ready}/{workers}"
        if st.elastic is not None and st.elastic.workers < st.elastic.requested:
            st.workers += f" of {st.elastic.requested}"  # an elastic job running smaller than asked (elastic.py)
        in_world = (None, workers)
        if book is None:
            st.replicas = sum(p.role == Role.WORKER and self.live(p) and p.workers in in_world for p in self.observed)
        else:  # the book's count of them, less those planned to go in this round
            going = {*self.plan.delete_pods, *self.plan.kill_pods}
            leaving = [book.pods.get(name) for name in going]
            st.replicas = (
                book.worlds[None]
                + book.worlds[workers]
                - sum(
                    p is not None and p.role == Role.WORKER and not p.deleting and p.workers in in_world
                    for p in leaving
                )
            )
        st.selector = f"{LABEL_JOB}={self.job.name},{LABEL_ROLE}={Role.WORKER.value}"
        shards = self.job.spec.parameter_servers
        st.world_size = workers * self.job.spec.workers.procs_per_pod + (shards.replicas if shards else 0)

    def live(self, p: ObservedPod) -> bool:
        """The pod stays: not being deleted, and not among the deletions planned so far."""
        return not p.deleting and not self.planned_to_go(p.name)

    def planned_to_go(self, name: str) -> bool:
        """The pod is among the deletions planned so far (plan.delete_pods or kill_pods). Asked once per pod by
        several policies, so the lists' names are kept in a set, extended as the lists grow (policies append to
        them or assign new ones; none removes a name): a set lookup instead of a scan of a 10,000-name list."""
        deletes, kills = self.plan.delete_pods, self.plan.kill_pods
        seen = self._going_lists
        if not seen or seen[0] is not deletes or seen[1] is not kills:
            self._going_lists, self._going_counts, self._going = (deletes, kills), [0, 0], set()
        counts = self._going_counts
        if len(deletes) > counts[0] or len(kills) > counts[1]:
            self._going.update(deletes[counts[0] :], kills[counts[1] :])
            self._going_counts = [len(deletes), len(kills)]
        return name in self._going


NOTHING_KNOWN = RankStatus()  # a rank's entry before the operator knows anything of it (shared: frozen)


def _copy_status(old: TrainingJobStatus) -> TrainingJobStatus:
    """A copy of `old` the round may change: deep, except that the ranks' entries are shared (frozen: a round
    changes one by replacing it, `Round.change_rank`); copying 10,000 of them was most of a steady round."""
    out = old.model_copy()
    for name in type(old).model_fields:
        if name != "ranks":
            setattr(out, name, copy.deepcopy(getattr(old, name)))
    out.ranks = dict(old.ranks)
    return out


def _counts(pods: list[ObservedPod], role: Role, restarts: int) -> ReplicaStatus:
    mine = [p for p in pods if p.role == role and not p.deleting]
    return ReplicaStatus(
        active=sum(p.phase in ("Pending", "Running") for p in mine),
        ready=sum(p.ready and p.phase == "Running" for p in mine),
        succeeded=sum(p.phase == "Succeeded" for p in mine),
        failed=sum(p.phase == "Failed" for p in mine),
        restarts=restarts,
    )
