"""Gangs through Kubernetes' own Workload API (`scheduling.k8s.io/v1alpha2`, Kubernetes 1.36 with the
GenericWorkload and GangScheduling feature gates), pure: the objects that make kube-scheduler place all of a
job's pods or none.

Where the cluster serves that API (and the operator is told to, or left to find out: `--gang-backend`), a job
that names no gang scheduler of its own gets, instead of the operator's gate:

- a Workload named like the job, owned by it, whose one pod-group template asks for a gang of every rank
  (`gang.minCount`) and, with `spec.placement` required, for one domain of its topology key;
- a PodGroup made from that template, named `<job>-<ranks>` (a new size is a new group: a PodGroup's policy
  does not change);
- every pod joining that group (`spec.schedulingGroup.podGroupName`), without the operator's gate.

kube-scheduler then binds none of the gang's pods until all of them fit. The group's `PodGroupScheduled`
condition says whether it did (`reading`), which the job's `Admitted` condition repeats (and
runPolicy.schedulingTimeoutSeconds counts from).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ringleader_api import LABEL_JOB, ConditionType, Reason, TrainingJob

from .. import admission
from ..names import owner_reference
from ..round_state import Round
from .own_gate import release
from .waiting import wait

GROUP = "scheduling.k8s.io"
VERSION = "v1alpha2"
API_VERSION = f"{GROUP}/{VERSION}"
TEMPLATE = "ranks"  # the Workload's one pod-group template


@dataclass(frozen=True)
class Gang:
    """A round's view of the job's gang under the Workload API: what kube-scheduler last said of its PodGroup
    (`reading`; None before it said anything)."""

    reading: tuple[bool, str] | None = None


def ranks(job: TrainingJob) -> int:
    """Pods of the gang: every worker pod and parameter-server shard."""
    return job.spec.workers.replicas + (job.spec.parameter_servers.replicas if job.spec.parameter_servers else 0)


def group_name(job: TrainingJob) -> str:
    return f"{job.name}-{ranks(job)}"


def _policy(job: TrainingJob) -> dict[str, Any]:
    return {"gang": {"minCount": ranks(job)}}


def _constraints(topology_key: str | None) -> dict[str, Any]:
    return {"schedulingConstraints": {"topology": [{"key": topology_key}]}} if topology_key else {}


def objects(job: TrainingJob, topology_key: str | None = None) -> list[dict[str, Any]]:
    """The job's Workload and PodGroup, in the order they are created. `topology_key`: every pod in one domain
    of that node label."""
    meta = {"namespace": job.namespace, "labels": {LABEL_JOB: job.name}, "ownerReferences": [owner_reference(job)]}
    template = {"name": TEMPLATE, "schedulingPolicy": _policy(job), **_constraints(topology_key)}
    workload = {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": {"name": job.name, **meta},
        "spec": {
            "controllerRef": {"apiGroup": "ringleader.dev", "kind": "TrainingJob", "name": job.name},
            "podGroupTemplates": [template],
        },
    }
    group = {
        "apiVersion": API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": group_name(job), **meta},
        "spec": {
            "podGroupTemplateRef": {"workload": {"workloadName": job.name, "podGroupTemplateName": TEMPLATE}},
            "schedulingPolicy": _policy(job),
            **_constraints(topology_key),
        },
    }
    return [workload, group]


def join(pod: dict[str, Any], job: TrainingJob) -> None:
    """Make `pod` a member of the job's PodGroup, for kube-scheduler to place with the rest: no operator gate."""
    spec = pod["spec"]
    admission.lift_gate(pod)
    spec["schedulingGroup"] = {"podGroupName": group_name(job)}


def member(pod: dict[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("schedulingGroup"))


def reading(group: Mapping[str, Any] | None) -> tuple[bool, str] | None:
    """What the PodGroup's status says: (scheduled, message), None before kube-scheduler has looked at it."""
    conditions = ((group or {}).get("status") or {}).get("conditions") or []
    scheduled = next((c for c in conditions if c.get("type") == "PodGroupScheduled"), None)
    if scheduled is None:
        return None
    message = str(scheduled.get("message") or scheduled.get("reason") or "")
    return scheduled.get("status") == "True", message


@dataclass(frozen=True)
class WorkloadApi:
    """The backend: gangs through kube-scheduler, what it says of each read back from the PodGroup's status."""

    name: str = "workload-api"
    description: str = "kube-scheduler's gang scheduling (scheduling.k8s.io/v1alpha2 Workloads and PodGroups)"
    sizes_jobs: bool = False  # kube-scheduler places the gang at the size the job asks for
    watches: tuple[tuple[str, str, str], ...] = ((GROUP, VERSION, "podgroups"),)
    serves: tuple[str, ...] = ("workloads", "podgroups")  # what the cluster must serve of GROUP/VERSION

    def mark(self, pod: dict[str, Any], job: TrainingJob) -> None:
        join(pod, job)

    def said(self, obj: Mapping[str, Any] | None) -> tuple[bool, str] | None:
        return reading(obj)

    def verdict(self, job: TrainingJob, seen: tuple[str, Any] | None) -> Gang:
        """What kube-scheduler said of the job's current PodGroup (a PodGroup of another size says nothing)."""
        return Gang(seen[1] if seen is not None and seen[0] == group_name(job) else None)

    def admit(self, r: Round, cluster: admission.Cluster | None, verdict: Any) -> None:
        """The pods this round creates join the job's PodGroup (its Workload and PodGroup created before them);
        the job's Admitted condition says what kube-scheduler said of the group. Pods an operator with its own
        gate created before the switch are still released by it."""
        if r.plan.create_pods:
            placement = r.job.spec.placement
            key = placement.topology_key if placement is not None and placement.required else None
            r.plan.scheduling_objects = objects(r.job, key)
        release(r, cluster)
        gang = verdict if isinstance(verdict, Gang) else Gang()
        if gang.reading is None or not any(member(x) for x in r.pods):
            return
        scheduled, said = gang.reading
        group = group_name(r.job)
        if scheduled:
            message = f"kube-scheduler placed the gang (PodGroup {group})"
            r.set_condition(ConditionType.ADMITTED, True, Reason.ADMITTED, message)
        elif any(not (x.get("spec") or {}).get("nodeName") for x in r.pods if member(x)):
            wait(r, Reason.WAITING_FOR_CAPACITY, f"kube-scheduler: {said} (PodGroup {group})")


WORKLOAD_API = WorkloadApi()
