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

from ringleader_api import LABEL_JOB, TrainingJob

from . import admission
from .builders import owner_reference

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
