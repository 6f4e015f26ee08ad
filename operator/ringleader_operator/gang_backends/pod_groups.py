"""Gang schedulers that place a PodGroup's pods all at once, pure: the pods' `schedulerName` names the scheduler,
the operator creates its PodGroup `<job>` (every rank, with the summed requests of all pods, so the scheduler can
tell early whether the gang fits) with the pods it creates, marks each pod as a member, and gates none: the
scheduler places all of them or none."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ringleader_api import TrainingJob

from .. import admission, quantities
from ..builders import build_pod, desired_ranks
from ..job_objects import job_metadata
from ..round_state import Round


def no_more(job: TrainingJob) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class PodGroupScheduler:
    """A scheduler that places PodGroups: its `schedulerName`, its PodGroup resource, how a pod names its group,
    and what the scheduler's PodGroup spec has besides every rank and their requests (`spec`)."""

    name: str  # the pods' schedulerName
    group: str  # of its PodGroup resource (plural "podgroups")
    version: str
    member_key: str  # the annotation or label naming a pod's PodGroup
    member_is_label: bool
    spec: Callable[[TrainingJob], dict[str, Any]] = no_more
    member_annotations: Mapping[str, str] = field(default_factory=dict)  # besides the member key, on every pod
    sizes_jobs: bool = False  # the scheduler sizes the gang, not the operator
    watches: tuple[tuple[str, str, str], ...] = ()

    @property
    def description(self) -> str:
        return f"{self.name}, from its PodGroup ({self.api_version})"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    def mark(self, pod: dict[str, Any], job: TrainingJob) -> None:
        """Make `pod` a member of the job's PodGroup (named like the job)."""
        meta = pod["metadata"]
        meta.setdefault("labels" if self.member_is_label else "annotations", {})[self.member_key] = job.name
        if self.member_annotations:
            meta.setdefault("annotations", {}).update(self.member_annotations)

    def verdict(self, job: TrainingJob, seen: tuple[str, Any] | None) -> None:
        return None

    def said(self, obj: Mapping[str, Any] | None) -> None:
        return None

    def admit(self, r: Round, cluster: admission.Cluster | None, verdict: Any) -> None:
        """The PodGroup goes out before the pods this round creates."""
        if r.plan.create_pods:
            r.plan.scheduling_objects = [self.pod_group(r.job)]

    def pod_group(self, job: TrainingJob) -> dict[str, Any]:
        """The PodGroup `<job>`: every rank at once (`minMember`), with the summed requests of all its pods."""
        total: quantities.Resources = {}
        for role, index in desired_ranks(job):
            quantities.add(total, quantities.pod_requests(build_pod(job, role, index)["spec"]))
        total.pop(quantities.PODS, None)
        resources = {k: quantities.format_quantity(v) for k, v in sorted(total.items())}
        ranks = job.spec.workers.replicas + (job.spec.parameter_servers.replicas if job.spec.parameter_servers else 0)
        return {
            "apiVersion": self.api_version,
            "kind": "PodGroup",
            "metadata": job_metadata(job, job.name),
            "spec": {"minMember": ranks, "minResources": resources, **self.spec(job)},
        }
