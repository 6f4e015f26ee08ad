"""Auto-elastic admission, pure: how many workers an elastic job's world has.

A job whose workers set minReplicas may run with fewer workers than spec.workers.replicas ("asked"), never fewer
than minReplicas. Under the operator's own gang admission it does so rather than wait (each decision weighs the
cluster with the job's own pods' room counted as free, since every change of size re-forms the whole world):
- nothing of its world is placed yet (its start, or a world being re-formed): the largest size whose whole gang
  fits the free room now;
- every rank of it is placed and it has fewer than asked: it grows to the largest size that fits, no sooner than
  runPolicy.elasticGrowAfterSeconds after its last resize (a scale-up by kubectl scale: at once), only when it
  checkpoints (a resize resumes from the latest checkpoint), and only while no other job's gang waits for room
  (a waiting gang is served first);
- ranks of its world wait for room beside the running ones (a lost node's replacements): it shrinks to the
  largest size that fits instead of waiting.
A change of size is carried out by resize.reform_resized_world: every worker of the old world stops (saving where
it stops) and the new world resumes from the latest checkpoint. status.elastic says the size and why. A job that
does not fit even at minReplicas waits at the size it has, gang admission saying what is short.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, NamedTuple

from ringleader_api import ConditionType, ElasticReason, ElasticStatus, Reason, Role, TrainingJob

from .. import admission, gang_backends, placement
from ..builders import build_pod
from ..observed import parse_time
from ..round_state import Round

# A job running with fewer workers than asked looks for room this often (and at once when its operator frees some
# or a node appears).
ELASTIC_RETRY_SECONDS = 30.0
_WAITING = (Reason.WAITING_FOR_CAPACITY, Reason.UNSCHEDULABLE)


class Resize(NamedTuple):
    workers: int
    reason: ElasticReason
    message: str


def auto_elastic(job: TrainingJob) -> bool:
    """Whether the job's world size is the operator's to choose: minReplicas below replicas, and no gang scheduler
    of its own (Volcano, coscheduling, KAI) placing its pods."""
    workers = job.spec.workers
    return (
        workers.min_replicas is not None
        and workers.min_replicas < workers.replicas
        and gang_backends.named_scheduler(job) is None
    )


def below_replicas(job: TrainingJob) -> bool:
    """The job runs with fewer workers than it asks for: its rounds weigh the cluster, to grow it."""
    elastic = job.status.elastic
    return auto_elastic(job) and elastic is not None and elastic.workers < job.spec.workers.replicas


def sized(job: TrainingJob, workers: int) -> TrainingJob:
    """`job` with a world of `workers` worker pods: what the round's policies build, count and compare with."""
    if workers == job.spec.workers.replicas:
        return job
    spec = job.spec.model_copy(update={"workers": job.spec.workers.model_copy(update={"replicas": workers})})
    return job.model_copy(update={"spec": spec})


def _current(job: TrainingJob) -> int:
    """The size the job's world has now: status.elastic's, within what the spec allows now (kubectl scale)."""
    workers, elastic = job.spec.workers, job.status.elastic
    if elastic is None or not auto_elastic(job):
        return workers.replicas
    return max(workers.min_replicas or 1, min(elastic.workers, workers.replicas))


def at_current_size(job: TrainingJob) -> TrainingJob:
    """`job` at the size its world has now (what a round that does not choose a size sees)."""
    return sized(job, _current(job))


def size_world(r: Round, job: TrainingJob, cluster: admission.Cluster | None, own_gates: bool) -> None:
    """Choose the world size of `job` (as the user asks for it) and make `r.job` the job at that size. `cluster`
    (every Node and pod) is needed to change it; without one the size stays (bounded by what the spec allows now).
    `own_gates`: the operator's own gang admission places the job (not Kueue nor the Workload API, which size a
    job themselves)."""
    if not (own_gates and auto_elastic(job)):
        r.status.elastic = None
        r.job = job
        return
    asked, before, current = job.spec.workers.replicas, job.status.elastic, _current(job)
    resize = _decide(r, job, cluster, current) if cluster is not None else None
    if resize is not None:
        r.status.elastic = ElasticStatus(
            workers=resize.workers,
            requested=asked,
            reason=resize.reason,
            message=resize.message,
            last_resize_time=r.now,
        )
        r.resize_why = resize.message if resize.reason != ElasticReason.REQUESTED else ""
    elif before is not None and before.workers == current and (current < asked or before.requested == asked):
        r.status.elastic = before.model_copy(update={"requested": asked if cluster is not None else before.requested})
    else:  # its start, or kubectl scale made the size it runs at the size asked for
        at = before.last_resize_time if before is not None and before.workers == current else None
        at = r.now if before is not None and before.workers != current else at
        r.status.elastic = ElasticStatus(
            workers=current, requested=asked, reason=ElasticReason.REQUESTED, message=_asked(current, asked),
            last_resize_time=at,
        )  # fmt: skip
    elastic = r.status.elastic
    r.job = sized(job, elastic.workers)
    if elastic.workers < asked:
        _look_again(r, elastic)


def _asked(workers: int, asked: int) -> str:
    return f"{workers} workers, as spec.workers.replicas asks" if workers == asked else f"{workers} of {asked} workers"


def _decide(r: Round, job: TrainingJob, cluster: admission.Cluster, current: int) -> Resize | None:
    """The size `job` is to have, when it changes."""
    workers = [p for p in r.observed if p.role == Role.WORKER]
    if any(p.phase == "Succeeded" for p in workers):
        return None  # finishing: its world stays as it is
    gated = admission.gated_names(r.pods)
    placed = [p for p in workers if r.live(p) and p.workers in (None, current) and p.name not in gated]
    fit = _Fit(job, cluster.nodes, cluster.room(without=(job.namespace, job.name)))
    if not placed:  # nothing of its world is placed: start (or re-form) at the most that fit
        return _start(job, fit, current)
    if len(placed) < current:  # ranks of its world wait for room beside the running ones
        return _shrink(r, job, fit, current, current - len(placed))
    if current < job.spec.workers.replicas and _may_grow(r, job, cluster):
        return _grow(job, fit, current)
    return None


def _user_asked_more(job: TrainingJob) -> bool:
    """spec.workers.replicas changed since the size was last weighed (kubectl scale)."""
    return job.status.elastic is not None and job.status.elastic.requested != job.spec.workers.replicas


def _start(job: TrainingJob, fit: _Fit, current: int) -> Resize | None:
    low, asked = job.spec.workers.min_replicas or 1, job.spec.workers.replicas
    best = fit.largest(range(low, asked + 1))
    if best is None or best == current:
        return None
    if best == asked:
        return Resize(best, ElasticReason.REQUESTED, _asked(best, asked))
    why = f"{asked} do not fit ({fit.shortage(asked)})"
    return Resize(best, ElasticReason.STARTED_SMALLER, f"{best} of {asked} workers: {why}; grows when room appears")


def _shrink(r: Round, job: TrainingJob, fit: _Fit, current: int, waiting: int) -> Resize | None:
    """Once gang admission found the waiting ranks no room (the round before), the most that fit."""
    admitted = next((c for c in r.old.conditions if c.type == ConditionType.ADMITTED), None)
    if admitted is None or admitted.status != "False" or admitted.reason not in _WAITING:
        return None
    low, asked = job.spec.workers.min_replicas or 1, job.spec.workers.replicas
    best = fit.largest(range(low, current))
    if best is None:
        return None
    why = f"{waiting} of its ranks found no room beside the running ones ({admitted.message})"
    message = f"{current} -> {best} of {asked} workers: {why}; grows when room appears"
    return Resize(best, ElasticReason.SHRUNK, message)


def _grow(job: TrainingJob, fit: _Fit, current: int) -> Resize | None:
    asked = job.spec.workers.replicas
    best = fit.largest(range(current + 1, asked + 1))
    if best is None:
        return None
    if best == asked and _user_asked_more(job):
        return Resize(best, ElasticReason.REQUESTED, _asked(best, asked))
    more = "" if best == asked else "; grows further when room appears"
    return Resize(best, ElasticReason.GROWN, f"{current} -> {best} of {asked} workers: room appeared{more}")


def _may_grow(r: Round, job: TrainingJob, cluster: admission.Cluster) -> bool:
    """Growing is worth its restart now: the user asked for more since the size was last weighed; or the job
    checkpoints, no other job's gang waits for the room, and its last resize is old enough."""
    elastic = job.status.elastic
    if elastic is None or _user_asked_more(job):
        return elastic is not None
    if job.spec.checkpoint is None or cluster.room().gangs_waiting_besides((job.namespace, job.name)):
        return False
    return elastic.last_resize_time is None or r.at >= _grow_after(r, elastic)


def _grow_after(r: Round, elastic: ElasticStatus) -> datetime:
    """When the job may grow again: runPolicy.elasticGrowAfterSeconds after its last resize."""
    since = parse_time(elastic.last_resize_time) if elastic.last_resize_time else r.at
    return since + timedelta(seconds=r.job.spec.run_policy.elastic_grow_after_seconds)


def _look_again(r: Round, elastic: ElasticStatus) -> None:
    """A job below its asked size looks for room: when room is freed, and at least every ELASTIC_RETRY_SECONDS
    (room another workload freed, a node that appeared), and when its grow delay runs out."""
    r.plan.waiting_for_room = True
    r.wake_at(r.after(ELASTIC_RETRY_SECONDS))
    if elastic.last_resize_time and (ready := _grow_after(r, elastic)) > r.at:
        r.wake_at(ready)


class _Fit:
    """How many workers of the job fit the cluster's free room, its own pods' room counted as free."""

    def __init__(self, job: TrainingJob, nodes: list[dict[str, Any]], others: admission.Room) -> None:
        self.worker = build_pod(job, Role.WORKER, 0)["spec"]
        shards = job.spec.parameter_servers
        self.shards = [build_pod(job, Role.PS, i)["spec"] for i in range(shards.replicas if shards else 0)]
        asked = job.spec.placement
        self.topology = None if asked is None else placement.Topology(asked.topology_key, asked.required)
        self.nodes, self.others = nodes, others

    def gang(self, workers: int) -> list[dict[str, Any]]:
        return [self.worker] * workers + self.shards

    def largest(self, sizes: range) -> int | None:
        return placement.largest_fitting(self.gang, sizes, self.nodes, self.others, self.topology)

    def shortage(self, workers: int) -> str:
        return placement.admit(self.gang(workers), self.nodes, self.others, self.topology).message
