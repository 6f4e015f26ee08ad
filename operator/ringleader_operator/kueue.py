"""Kueue's job contract for TrainingJobs, pure: the Workload a queued job needs, what Kueue's answer means for the
job, and the Workload status writes that are the job controller's part. The reconciler does the I/O.

A job joins a Kueue queue with the label `kueue.x-k8s.io/queue-name` (Kueue registers TrainingJob as an external
framework; the operator plays the part Kueue's own job reconcilers play for built-in kinds,
pkg/controller/jobframework in Kueue):

- the operator creates one Workload per job (owned by it, named like Kueue names them): a pod set per role with
  the pods' count and template (Kueue reads the requests, node selectors, tolerations and priority from it), the
  queue, and the priority of the job's WorkloadPriorityClass (label `kueue.x-k8s.io/priority-class`) or
  PriorityClass;
- until Kueue admits the Workload the job has no pods (phase Queued); once it is admitted, the pods are created
  with the node labels and tolerations of the ResourceFlavors Kueue assigned to each pod set;
- when Kueue evicts the Workload (preemption, a stopped queue, deactivation) the pods are deleted (a stop, not a
  failure: the ranks checkpoint on SIGTERM) and, once they are gone, the operator clears the Workload's quota
  reservation so Kueue queues it again; admitted again, the job resumes from its newest checkpoint;
- a job whose spec changes what the Workload says (a resize) gets a new Workload, queued again;
- a finished job marks its Workload Finished, which releases its quota; `runPolicy.suspend` deactivates it.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field
from typing import Any

from ringleader_api import KIND, LABEL_JOB, Role, TrainingJob

from .builders import build_pod
from .names import owner_reference

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
API_VERSION = f"{GROUP}/{VERSION}"
WORKLOADS = "workloads"
QUEUE_LABEL = f"{GROUP}/queue-name"
PRIORITY_LABEL = f"{GROUP}/priority-class"  # a WorkloadPriorityClass
JOB_UID_LABEL = f"{GROUP}/job-uid"
FINALIZER = f"{GROUP}/resource-in-use"
# Evictions after which Kueue expects the job controller to mark the Workload requeued (Kueue's reconciler).
REQUEUED_AFTER = ("Preempted", "NodeFailures")
# What of a pod a Workload's template keeps: what Kueue reads (requests, placement, priority), not the rank's
# environment, volumes or gates.
TEMPLATE_SPEC_FIELDS = (
    "nodeSelector", "affinity", "tolerations", "priorityClassName", "runtimeClassName", "overhead",
    "topologySpreadConstraints", "restartPolicy",
)  # fmt: skip
CONTAINER_FIELDS = ("name", "image", "resources")
MESSAGE_MAX = 1000  # of Kueue's messages copied into a condition


class PriorityMissing(Exception):
    """The job's priority class does not exist: Kueue cannot order it, so its Workload is not made yet."""


def queue_name(job: TrainingJob) -> str | None:
    """The Kueue LocalQueue the job joins (its label), None when it is not queued by Kueue."""
    labels = job.metadata.get("labels") or {}
    return labels.get(QUEUE_LABEL) or None


def workload_name(job: TrainingJob) -> str:
    """`trainingjob-<job>-<5 hex>` (as Kueue names a job's Workload): a new job of the same name gets another."""
    digest = hashlib.sha256(f"{KIND}/{job.name}/{job.metadata.get('uid', '')}".encode()).hexdigest()[:5]
    return f"{KIND.lower()}-{job.name}-{digest}"


def pod_sets(job: TrainingJob) -> list[dict[str, Any]]:
    """One pod set per role: its pod count and its pods' template as Kueue reads it."""
    sets = []
    for role in (Role.WORKER, Role.PS):
        replica = job.replicas(role)
        if replica is None or replica.replicas < 1:
            continue
        pod = build_pod(job, role, 0)
        spec = pod["spec"]
        template_spec = {k: copy.deepcopy(spec[k]) for k in TEMPLATE_SPEC_FIELDS if k in spec}
        for kind in ("initContainers", "containers"):
            if spec.get(kind):
                template_spec[kind] = [{k: c[k] for k in CONTAINER_FIELDS if k in c} for c in spec[kind]]
        sets.append({"name": role.value, "count": replica.replicas, "template": {"spec": template_spec}})
    return sets


def build_workload(job: TrainingJob, priority: int | None, priority_class: tuple[str, str] | None) -> dict[str, Any]:
    """The job's Workload. `priority_class`: (kind, name), kind WorkloadPriorityClass or PriorityClass;
    `priority`: that class's value."""
    spec: dict[str, Any] = {"queueName": queue_name(job) or "", "podSets": pod_sets(job)}
    if priority_class is not None:
        kind, name = priority_class
        group = GROUP if kind == "WorkloadPriorityClass" else "scheduling.k8s.io"
        spec["priorityClassRef"] = {"group": group, "kind": kind, "name": name}
    if priority is not None:
        spec["priority"] = priority
    if job.spec.run_policy.suspend:
        spec["active"] = False
    return {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(job),
            "namespace": job.namespace,
            "labels": {LABEL_JOB: job.name, JOB_UID_LABEL: str(job.metadata.get("uid", ""))},
            "ownerReferences": [owner_reference(job)],
        },
        "spec": spec,
    }


def priority_class(job: TrainingJob) -> tuple[str, str] | None:
    """The class whose value is the Workload's priority: the job's WorkloadPriorityClass label first (Kueue's
    order), else the pods' PriorityClass."""
    labels = job.metadata.get("labels") or {}
    if labels.get(PRIORITY_LABEL):
        return ("WorkloadPriorityClass", labels[PRIORITY_LABEL])
    pods = pod_sets(job)
    names = [s["template"]["spec"].get("priorityClassName") for s in pods]
    name = next((n for n in names if n), None)
    return ("PriorityClass", name) if name else None


def _shape(sets: list[dict[str, Any]]) -> list[tuple[str, int, str]]:
    """What of the pod sets decides admission: names, counts and every container's resources."""
    out = []
    for s in sets:
        spec = (s.get("template") or {}).get("spec") or {}
        resources = [
            repr(sorted(((c.get("resources") or {}).get(k) or {}).items()))
            for kind in ("initContainers", "containers")
            for c in spec.get(kind) or []
            for k in ("requests", "limits")
        ]
        out.append((str(s.get("name")), int(s.get("count") or 0), "|".join(resources)))
    return sorted(out)


def matches(workload: dict[str, Any], job: TrainingJob) -> bool:
    """Whether `workload` still describes the job: the same pod sets (counts, requests) and queue. A Workload that
    does not is replaced (its admission was for another job)."""
    spec = workload.get("spec") or {}
    return spec.get("queueName") == queue_name(job) and _shape(spec.get("podSets") or []) == _shape(pod_sets(job))


def _condition(workload: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (workload.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def _true(workload: dict[str, Any], kind: str) -> bool:
    c = _condition(workload, kind)
    return c is not None and c.get("status") == "True"


@dataclass(frozen=True)
class QueueState:
    """What Kueue's answer means for the job's pods in this round.

    `admitted`: the pods may run, on `placement` (per pod set: node labels and tolerations of its flavors).
    Otherwise they may not: `evicted` names why Kueue took the admission back (a reason, Kueue's message), else
    the job waits and `message` says for what."""

    admitted: bool
    message: str = ""
    evicted: tuple[str, str] | None = None
    placement: dict[str, tuple[dict[str, str], list[dict[str, Any]]]] = field(default_factory=dict)


def read(workload: dict[str, Any]) -> QueueState:
    """The state of the job's Workload as Kueue left it (placement not yet filled: see `place`)."""
    name = (workload.get("metadata") or {}).get("name", "")
    queue = (workload.get("spec") or {}).get("queueName", "")
    evicted = _condition(workload, "Evicted")
    if evicted is not None and evicted.get("status") == "True":
        reason, message = str(evicted.get("reason") or "Evicted"), _clip(evicted.get("message"))
        return QueueState(False, f"evicted by Kueue ({reason}): {message}", (reason, message))
    if _true(workload, "Admitted"):
        cluster_queue = ((workload.get("status") or {}).get("admission") or {}).get("clusterQueue", "")
        return QueueState(True, f"admitted by Kueue's ClusterQueue {cluster_queue} (Workload {name})")
    reserved = _condition(workload, "QuotaReserved")
    why = _clip(reserved.get("message")) if reserved is not None and reserved.get("message") else "not yet looked at"
    return QueueState(False, f"waiting in Kueue's queue {queue} (Workload {name}): {why}")


def _clip(message: object) -> str:
    text = str(message or "")
    return text if len(text) <= MESSAGE_MAX else text[: MESSAGE_MAX - 3] + "..."


def assigned_flavors(workload: dict[str, Any]) -> dict[str, list[str]]:
    """Per pod set, the ResourceFlavors Kueue assigned it (admission.podSetAssignments)."""
    admission = (workload.get("status") or {}).get("admission") or {}
    return {
        str(a.get("name")): sorted(set((a.get("flavors") or {}).values()))
        for a in admission.get("podSetAssignments") or []
    }


def place(state: QueueState, workload: dict[str, Any], flavors: dict[str, dict[str, Any]]) -> QueueState:
    """`state` with the placement of each pod set: the node labels and tolerations of its assigned flavors
    (`flavors`: ResourceFlavor objects by name)."""
    placement = {}
    for pod_set, names in assigned_flavors(workload).items():
        labels: dict[str, str] = {}
        tolerations: list[dict[str, Any]] = []
        for name in names:
            flavor_spec = (flavors.get(name) or {}).get("spec") or {}
            labels.update(flavor_spec.get("nodeLabels") or {})
            tolerations.extend(t for t in flavor_spec.get("tolerations") or [] if t not in tolerations)
        placement[pod_set] = (labels, tolerations)
    return QueueState(state.admitted, state.message, state.evicted, placement)


def apply_placement(pod: dict[str, Any], role: Role, state: QueueState) -> None:
    """Put the pod on its pod set's flavors: their node labels join its node selector (the template's own keys
    win: Kueue assigned the flavor knowing them) and their tolerations join its own."""
    labels, tolerations = state.placement.get(role.value, ({}, []))
    spec = pod["spec"]
    if labels:
        spec["nodeSelector"] = {**labels, **(spec.get("nodeSelector") or {})}
    if tolerations:
        own = spec.setdefault("tolerations", [])
        own.extend(t for t in tolerations if t not in own)


def _set_condition(conditions: list[dict[str, Any]], new: dict[str, Any]) -> list[dict[str, Any]]:
    """Kubernetes' condition semantics: the transition time moves only when the status changes."""
    out = [c for c in conditions if c.get("type") != new["type"]]
    old = next((c for c in conditions if c.get("type") == new["type"]), None)
    if old is not None and old.get("status") == new["status"]:
        new = {**new, "lastTransitionTime": old.get("lastTransitionTime") or new["lastTransitionTime"]}
    return [*out, new]


def _status_condition(
    workload: dict[str, Any], kind: str, status: bool, reason: str, message: str, now: str
) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True" if status else "False",
        "reason": reason,
        "message": _clip(message),
        "lastTransitionTime": now,
        "observedGeneration": int((workload.get("metadata") or {}).get("generation") or 0),
    }


def requeue_status(workload: dict[str, Any], now: str) -> dict[str, Any]:
    """The Workload status that gives an evicted Workload's quota back once the job's pods are gone (what Kueue's
    own job reconcilers write): no admission, QuotaReserved and Admitted False, Requeued True after a preemption
    or lost nodes (Kueue queues it again)."""
    evicted = _condition(workload, "Evicted") or {}
    reason, message = str(evicted.get("reason") or "Evicted"), str(evicted.get("message") or "")
    conditions = list((workload.get("status") or {}).get("conditions") or [])
    for c in (
        _status_condition(workload, "Requeued", reason in REQUEUED_AFTER, reason, message, now),
        _status_condition(workload, "QuotaReserved", False, "Pending", message, now),
        _status_condition(workload, "Admitted", False, "NoReservation", "The workload has no reservation", now),
    ):
        conditions = _set_condition(conditions, c)
    return {"admission": None, "conditions": conditions}


def finished(workload: dict[str, Any]) -> bool:
    return _true(workload, "Finished")


def finished_status(workload: dict[str, Any], succeeded: bool, message: str, now: str) -> dict[str, Any]:
    """The Workload status of a job that ended (Kueue releases its quota)."""
    reason = "Succeeded" if succeeded else "Failed"
    conditions = list((workload.get("status") or {}).get("conditions") or [])
    done = _status_condition(workload, "Finished", True, reason, message, now)
    return {"conditions": _set_condition(conditions, done)}


def has_reservation(workload: dict[str, Any]) -> bool:
    return bool((workload.get("status") or {}).get("admission")) or _true(workload, "QuotaReserved")


def wants_active(job: TrainingJob) -> bool:
    """A suspended job's Workload is deactivated: it holds no quota and is not admitted until it is resumed."""
    return not job.spec.run_policy.suspend


def active(workload: dict[str, Any]) -> bool:
    return (workload.get("spec") or {}).get("active", True) is not False
