"""Volcano (`schedulerName: volcano`): its PodGroup with the job's priority class and the Volcano queue the job's
`scheduling.volcano.sh/queue-name` annotation names."""

from __future__ import annotations

from typing import Any

from ringleader_api import TrainingJob

from .pod_groups import PodGroupScheduler


def _spec(job: TrainingJob) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if job.spec.run_policy.priority_class_name:
        spec["priorityClassName"] = job.spec.run_policy.priority_class_name
    if queue := (job.metadata.get("annotations") or {}).get("scheduling.volcano.sh/queue-name"):
        spec["queue"] = queue
    return spec


VOLCANO = PodGroupScheduler("volcano", "scheduling.volcano.sh", "v1beta1", "scheduling.k8s.io/group-name", False, _spec)
