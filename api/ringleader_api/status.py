"""What the operator reports: conditions and their reasons, each role's and rank's state (counts, range strings and a
bounded list of ranks worth naming), the job's phase, and the status (`TrainingJobStatus`; its progress and
goodput are `progress`'s)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from enum import StrEnum
from typing import Any

from pydantic import (
    ConfigDict,
    Field,
    FieldSerializationInfo,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)

from . import ranges
from .failures import FailureClass
from .names import MAX_RANK_ENTRIES, MAX_REPLICAS, Model
from .progress import Goodput, Progress
from .spec import Role


class ConditionType(StrEnum):
    CREATED = "Created"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"
    ADMITTED = "Admitted"  # gang admission: False while the pods wait for room to run all at once
    STALLED = "Stalled"  # runPolicy.progressDeadlineSeconds passed without progress; False once it is past
    STRAGGLER = "Straggler"  # some rank works runPolicy.stragglerThreshold times slower than its peers


class Reason(StrEnum):
    """Every reason the operator writes in conditions and events (CamelCase, as Kubernetes reasons are)."""

    CREATED = "JobCreated"
    RUNNING = "JobRunning"
    PENDING = "PodsPending"
    RESTARTING = "RankRestarting"
    STOPPED = "RankStopped"  # asked to stop, it saved a checkpoint where it stopped: recreated, not counted
    EVICTED = "RankEvicted"
    NODE_LOST = "NodeLost"
    POD_DELETED = "PodDeleted"
    SUCCEEDED = "JobSucceeded"
    FAILED = "RankFailed"
    FAILURE_RULE = "FailureRule"  # a role's failure rule with action FailJob matched a rank's ending
    GANG_RESTART = "GangRestart"  # a failure rule's RestartGang: every other rank recreated (not counted)
    IGNORED = "FailureIgnored"  # a failure rule's Ignore: the rank recreated, not counted
    BACKOFF_LIMIT = "BackoffLimitExceeded"
    ESCALATION_EXHAUSTED = "EscalationExhausted"  # runPolicy.escalation: past its rank and gang restarts
    FAILURE_BUDGET = "FailureBudgetExceeded"  # a class's failureBudgets limit or sameErrorLimit reached
    INVALID_SPEC = "InvalidSpec"
    SUSPENDED = "JobSuspended"
    RESUMED = "JobResumed"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    RESIZED = "Resized"
    ADMITTED = "GangAdmitted"
    UNSCHEDULABLE = "Unschedulable"  # the pods could not run together even on the cluster's empty nodes
    WAITING_FOR_CAPACITY = "WaitingForCapacity"  # they could, once others free the room
    FOREIGN_PODS = "ForeignPodsIgnored"  # pods carrying the job's labels that it does not own
    # worker 0's metrics page could not be read, several times (an event); Stalled Unknown: no stall can be told
    PROGRESS_UNAVAILABLE = "ProgressUnavailable"
    PROGRESS_DEADLINE = "ProgressDeadlineExceeded"  # no step for runPolicy.progressDeadlineSeconds: Stalled
    PROGRESS_RESUMED = "ProgressResumed"  # the job got past the step it stalled at
    PROGRESS_AVAILABLE = "ProgressAvailable"  # Stalled Unknown (progress unreadable) turns False: it is read again
    RANK_STALLED = "RankStalled"  # the rank that stopped first in a stall, replaced (not counted)
    RANK_NOT_STARTED = "RankNotStarted"  # its container could not start (its image not pulled): counted
    STALL_LIMIT = "StallLimitExceeded"  # one stall more than runPolicy.stallLimit
    STRAGGLERS = "RanksStraggling"  # Straggler=True: ranks working runPolicy.stragglerThreshold x their peers
    NO_STRAGGLERS = "NoStragglers"
    RANK_STRAGGLED = "RankStraggled"  # a straggler replaced (stragglerPolicy Replace; not counted)
    RANK_OUTPUT = "RankOutput"  # the last lines a failed rank wrote (its termination message), kept past its pod
    # Kueue (label kueue.x-k8s.io/queue-name): Suspended=True while the job's Workload waits for admission, and
    # after Kueue evicted it (preemption, a stopped queue) until it is admitted again.
    QUEUED = "Queued"
    QUEUE_ADMITTED = "QueueAdmitted"
    QUEUE_EVICTED = "QueueEvicted"


class Condition(Model):
    type: ConditionType
    status: str = Field(description="True, False or Unknown.")
    reason: str = ""
    message: str = ""
    last_transition_time: str = ""
    observed_generation: int = 0


class ReplicaStatus(Model):
    active: int = 0
    ready: int = 0
    succeeded: int = 0
    failed: int = 0
    restarts: int = 0


class FailureCount(Model):
    """Failures of one class (status.failures): the budget's count and what the same-error limit looks at."""

    total: int = Field(0, description="Failures of this class over the job's life.")
    in_window: int = Field(
        0,
        description="Incidents counted in the current window (failureBudgets' windowSeconds): failures of ranks "
        "that ended within 30 s of an incident's first (a node lost with 8 ranks) count once.",
    )
    window_start: str | None = Field(None, description="When the current window began (its first failure).")
    last_error: str = Field("", description="The last incident's error (exception type: message), if it said one.")
    same_errors: int = Field(0, description="Incidents in a row with that error.")
    incident_start: str | None = Field(None, description="When the latest incident's first failure ended.")
    incident_failures: int = Field(0, description="Failures in the latest incident (counted as one).")


class FailureRecord(Model):
    """One failure, named and classed: the first of the job's latest incident (status.lastFailure)."""

    failure_class: FailureClass = Field(alias="class", description="Infrastructure, UserCode or Resources.")
    rank: str = Field(description="The rank that failed (`worker-1`).")
    pod: str
    node: str = ""
    exit_code: int | None = None
    evidence: str = Field("", description="What tells the class: the exception and where, OOMKilled, the node lost.")
    time: str = Field("", description="When it ended (its container's finishedAt), else when it was seen.")


class RankStatus(Model):
    """One rank's restart history; the operator's memory of it lives here, not in the operator process."""

    # Frozen: ranks alike share one instance (as status.ranks is read, one per written entry, and as rounds copy a
    # status), so a change is a new instance (`model_copy(update=...)`), never an assignment that would reach every
    # rank sharing it. A job of 10,000 ranks then reads and copies its ranks without 10,000 validations or copies.
    model_config = ConfigDict(frozen=True)

    restarts: int = Field(0, description="Times this rank was restarted (counted against its class's budget).")
    stops: int = Field(0, description="Times this rank stopped cleanly on request and was recreated (not counted).")
    stalls: int = Field(0, description="Times this rank was replaced for stopping first in a stall (not counted).")
    uncounted: int = Field(
        0, description="Times this rank was recreated by a failure rule's Ignore or a gang restart (not counted)."
    )
    straggles: int = Field(0, description="Times this rank was replaced as a straggler (not counted).")
    avoid_node: str | None = Field(None, description="A node this rank's pods prefer not to run on (it straggled).")
    pod_seen: bool = Field(False, description="The pod of the current attempt was observed running or done.")
    last_reason: str = Field("", description="Why the rank was last restarted (a condition reason).")
    last_message: str = ""
    last_exit_code: int | None = None
    restart_after: str | None = Field(None, description="The replacement pod is created no earlier than this.")
    last_replaced: str | None = Field(None, description="When the operator last decided to replace the rank's pod.")

    @property
    def attempt(self) -> int:
        """The attempt number of the rank's current pod: every replacement, counted or not, is a new one."""
        return self.restarts + self.stops + self.stalls + self.straggles + self.uncounted


_DEFAULT_RANK_FIELDS = tuple(RankStatus().__dict__.values())  # a rank the operator remembers nothing of

SHARED_RANKS_LIMIT = 4096  # distinct rank entries kept for sharing (a job has at most MAX_RANK_ENTRIES and a few)

_shared_ranks: dict[RankStatus, RankStatus] = {}


def shared_rank(rank: RankStatus) -> RankStatus:
    """The one instance of ranks equal to `rank` (frozen, so ranks alike may share it): status.ranks as read and
    as rounds change it then holds a few instances however many ranks it has, and two such statuses compare
    entry by entry by identity. Bounded: past SHARED_RANKS_LIMIT the table starts again (sharing is a saving,
    never needed for correctness)."""
    kept = _shared_ranks.get(rank)
    if kept is not None:
        return kept
    if len(_shared_ranks) >= SHARED_RANKS_LIMIT:
        _shared_ranks.clear()
    _shared_ranks[rank] = rank
    return rank


def rank_groups(ranks: Mapping[str, RankStatus]) -> dict[tuple[str, tuple[Any, ...]], list[str]]:
    """The per-rank keys (`worker-3`) of ranks alike (same role, every field equal) by (role, fields), in the
    order first met; ranks at their defaults left out. One group is one entry of status.ranks as written.
    Each instance's fields are read once (ranks alike mostly share one: RankStatus is frozen)."""
    groups: dict[tuple[str, tuple[Any, ...]], list[str]] = {}
    fields_of: dict[int, tuple[Any, ...]] = {}
    for key, rank in ranks.items():
        fields = fields_of.get(id(rank))
        if fields is None:
            fields = fields_of[id(rank)] = tuple(rank.__dict__.values())
        if fields != _DEFAULT_RANK_FIELDS:
            groups.setdefault((key.rpartition("-")[0], fields), []).append(key)
    return groups


ROLE_VALUES = frozenset(r.value for r in Role)


def rank_entries(groups: dict[str, Any]) -> dict[str, Any]:
    """status.ranks as written (`worker-0-2,5`: one entry for ranks alike) -> one entry per rank (`worker-0`,
    `worker-1`, ...), the ranks of an entry sharing its value. An older operator's keys (`worker-1`) are groups of
    one. A key that does not parse, or ranks past the API's maximum, are left out: status is the operator's own
    record, and a corrupt entry must not make the job unreadable."""
    return {f"{role}-{i}": value for role, indexes, value in _rank_spans(groups) for i in indexes}


def _rank_spans(groups: dict[str, Any]) -> Iterator[tuple[str, list[int], Any]]:
    """(role, its indexes, the entry) for each entry of status.ranks as written that parses (see rank_entries)."""
    named = 0
    for key, value in groups.items():
        role, _, spans = str(key).partition("-")
        if role not in ROLE_VALUES or value is None:
            continue
        try:
            indexes = ranges.decode(spans, 2 * MAX_REPLICAS - named)
        except ranges.RangeError:
            continue
        named += len(indexes)
        yield role, indexes, value


class JobPhase(StrEnum):
    """A one-word summary of a job's conditions, for `kubectl get tj`. Its lifecycle (written by `plan`)::

        new -> Pending -> Running -> Succeeded
                  ^  |  ^    |
                  |  v  |    v
                  |  Restarting   (a rank failed and waits out its back-off; or the world was resized)
                  |
        any of the above, not yet ended <-> Suspended    (runPolicy.suspend; resuming goes back to Pending)
        new, or any of the above, not ended <-> Queued   (a Kueue queue's job whose Workload is not admitted:
                                                          waiting, or evicted by Kueue; admitted goes to Pending)
        any of the above, not yet ended  -> Failed       (a rank failed for good, backoffLimit, the deadline,
                                                          an invalid spec, no room within the scheduling timeout)

    Succeeded and Failed are final: the Succeeded or Failed condition is True and nothing changes any more."""

    PENDING = "Pending"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"
    QUEUED = "Queued"


class ElasticReason(StrEnum):
    """Why an elastic job runs at the size status.elastic.workers says (auto-elastic admission)."""

    REQUESTED = "Requested"  # spec.workers.replicas: it fits
    STARTED_SMALLER = "StartedSmaller"  # replicas did not fit at the start: the most that fit, not below minReplicas
    SHRUNK = "Shrunk"  # a rank's replacement found no room (a lost node): the most that fit, instead of waiting
    GROWN = "Grown"  # room appeared: grown to the most that fit


class ElasticStatus(Model):
    """Auto-elastic admission (spec.workers.minReplicas set, the operator's own gang admission): the size of the
    job's world and why."""

    workers: int = Field(
        description="Worker pods of the job's world now: spec.workers.replicas, or fewer (not below minReplicas) "
        "while only that many fit."
    )
    requested: int = Field(description="spec.workers.replicas when this size was chosen.")
    reason: ElasticReason
    message: str = ""
    last_resize_time: str | None = Field(None, description="When the size last changed.")


class TrainingJobStatus(Model):
    phase: JobPhase | None = Field(
        None, description="Pending, Running, Restarting, Succeeded, Failed, Suspended or Queued."
    )

    @field_validator("phase", mode="before")
    @classmethod
    def _unset_phase(cls, value: object) -> object:
        """An empty phase (written by versions that had no enum) reads as none yet."""
        return None if value == "" else value

    @model_validator(mode="before")
    @classmethod
    def _expand_rank_groups(cls, data: Any) -> Any:
        """status.ranks as written (`worker-0-2,5`: one entry for ranks alike) -> one entry per rank, as the
        operator works with them. An older operator's keys (`worker-1`) are groups of one, so its restart counts
        carry over. A key that does not parse, or more ranks than the API allows, is left out (status is the
        operator's own record: a corrupt entry must not make the job unreadable)."""
        if not isinstance(data, dict) or not isinstance(data.get("ranks"), dict):
            return data
        expanded: dict[str, Any] = {}
        for role, indexes, value in _rank_spans(data["ranks"]):
            try:  # once per entry, its ranks sharing the instance (frozen); one that does not validate is left out
                rank = shared_rank(value if isinstance(value, RankStatus) else RankStatus.model_validate(value))
            except ValidationError:
                continue
            expanded.update((f"{role}-{i}", rank) for i in indexes)
        return data | {"ranks": expanded}

    @field_serializer("ranks")
    def _group_ranks(self, ranks: dict[str, RankStatus], info: FieldSerializationInfo) -> dict[str, Any]:
        """Ranks alike (same role, every field equal) under one key, `<role>-<range string>`; ranks at their
        defaults left out; each entry without its default fields. A job of 10,000 healthy ranks writes one entry."""
        groups = [
            (role, [int(k.rpartition("-")[2]) for k in keys], ranks[keys[0]])
            for (role, _), keys in rank_groups(ranks).items()
        ]
        out: dict[str, Any] = {}
        for role, indexes, rank in sorted(groups, key=lambda g: (g[0], min(g[1]))):
            out[f"{role}-{ranges.encode(indexes)}"] = rank.model_dump(
                mode=info.mode, by_alias=info.by_alias, exclude_defaults=True
            )
        return out

    conditions: list[Condition] = Field(default_factory=list)
    replica_statuses: dict[str, ReplicaStatus] = Field(default_factory=dict, description="Per role: worker, ps.")
    ranks: dict[str, RankStatus] = Field(
        default_factory=dict,
        description="What the operator remembers of each rank (restarts and why), ranks alike grouped under one "
        "key: the role and a range string of its indexes (`worker-0-2,5`: workers 0, 1, 2 and 5; `ps-0`); ranks "
        "it remembers nothing of are left out, so a job whose ranks run alike keeps one entry however many it has.",
    )
    workers: str = Field("", description="ready/desired workers, for kubectl get.")
    world_size: int = Field(0, description="Ranks of the training's world: worker pods x procsPerPod, and shards.")
    replicas: int = Field(0, description="Worker pods of the current world size (the scale subresource reads it).")
    selector: str = Field("", description="Label selector of the worker pods (for the scale subresource).")
    start_time: str | None = None
    completion_time: str | None = None
    observed_generation: int = 0
    progress: Progress | None = None
    stalls: int = Field(0, description="Stalls so far (runPolicy.progressDeadlineSeconds).")
    last_stall_step: int | None = Field(
        None, description="The job's step at its last stall: the Stalled condition turns False past it."
    )
    goodput: Goodput | None = Field(None, description="Where the job's wall time went.")
    elastic: ElasticStatus | None = Field(
        None, description="An elastic job's size and why (minReplicas set; fewer workers run while only that many fit)."
    )
    failures: dict[str, FailureCount] = Field(
        default_factory=dict, description="Per class of failure (Infrastructure, UserCode, Resources): its counts."
    )
    escalation: FailureCount | None = Field(
        None, description="Counted incidents in runPolicy.escalation's current window (inWindow, windowStart)."
    )
    last_failure: FailureRecord | None = Field(
        None,
        description="The first failure of the job's latest incident (failures within 30 s of it belong to it): "
        "the rank, pod and node, its class and the evidence.",
    )
    ranks_forgotten: int = Field(
        0,
        description="Ranks whose restart history left status.ranks to keep it short (the least recently replaced "
        f"first, once more than {MAX_RANK_ENTRIES} entries would be kept); their restarts still count in "
        "replicaStatuses.",
    )
