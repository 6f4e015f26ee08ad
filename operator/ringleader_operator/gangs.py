"""Gang schedulers the operator hands placement to, pure: which one a job names, and its PodGroup.

When the pods' `schedulerName` names Volcano or scheduler-plugins' coscheduling, the operator does not gate
the pods itself: it creates that scheduler's PodGroup with `minMember` = every rank and marks each pod as a
member, and the scheduler places all of them or none. Otherwise the operator's own gang admission applies
(`admission`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ringleader_api import TrainingJob


@dataclass(frozen=True)
class GangScheduler:
    scheduler_name: str
    group: str  # of its PodGroup resource (plural "podgroups")
    version: str
    member_key: str  # the annotation or label naming a pod's PodGroup
    member_is_label: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


VOLCANO = GangScheduler("volcano", "scheduling.volcano.sh", "v1beta1", "scheduling.k8s.io/group-name", False)
COSCHEDULING = GangScheduler(
    "scheduler-plugins-scheduler", "scheduling.x-k8s.io", "v1alpha1", "scheduling.x-k8s.io/pod-group", True
)
GANG_SCHEDULERS = {s.scheduler_name: s for s in (VOLCANO, COSCHEDULING)}


def scheduler_names(job: TrainingJob) -> set[str]:
    """The schedulerName of every role's template ("" for the default scheduler)."""
    roles = [job.spec.workers, *([job.spec.parameter_servers] if job.spec.parameter_servers else [])]
    return {str((r.template.get("spec") or {}).get("schedulerName") or "") for r in roles}


def gang_scheduler(job: TrainingJob) -> GangScheduler | None:
    """The gang scheduler the job's pods name, if any (`validate` makes sure all roles name the same)."""
    names = scheduler_names(job)
    return GANG_SCHEDULERS.get(next(iter(names))) if len(names) == 1 else None


def mark_member(pod: dict[str, Any], job: TrainingJob, scheduler: GangScheduler) -> None:
    """Make `pod` a member of the job's PodGroup (named like the job)."""
    meta = pod["metadata"]
    meta.setdefault("labels" if scheduler.member_is_label else "annotations", {})[scheduler.member_key] = job.name


def pod_group_spec(job: TrainingJob, scheduler: GangScheduler, min_resources: Mapping[str, str]) -> dict[str, Any]:
    """The spec of the job's PodGroup for `scheduler`: every rank must be placeable at once (`minMember`),
    with the summed requests of all pods (`minResources`) so the scheduler can tell early whether it fits."""
    ranks = job.spec.workers.replicas + (job.spec.parameter_servers.replicas if job.spec.parameter_servers else 0)
    spec: dict[str, Any] = {"minMember": ranks, "minResources": dict(min_resources)}
    policy = job.spec.run_policy
    if scheduler is VOLCANO:
        if policy.priority_class_name:
            spec["priorityClassName"] = policy.priority_class_name
        queue = (job.metadata.get("annotations") or {}).get("scheduling.volcano.sh/queue-name")
        if queue:
            spec["queue"] = queue
    elif policy.scheduling_timeout_seconds:
        spec["scheduleTimeoutSeconds"] = policy.scheduling_timeout_seconds
    return spec
