"""NVIDIA's KAI Scheduler (`schedulerName: kai-scheduler`): its PodGroup (`scheduling.run.ai/v2alpha2`) with the
job's priority class and the KAI queue its `kai.scheduler/queue` label names; each pod names the group by its
`pod-group-name` annotation and tells KAI's pod grouper to leave it alone (`kai.scheduler/skip-podgrouper`), so
the grouper makes no second PodGroup of its own for the job's pods."""

from __future__ import annotations

from typing import Any

from ringleader_api import TrainingJob

from .pod_groups import PodGroupScheduler

QUEUE_LABEL = "kai.scheduler/queue"


def _spec(job: TrainingJob) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if queue := (job.metadata.get("labels") or {}).get(QUEUE_LABEL):
        spec["queue"] = queue
    if job.spec.run_policy.priority_class_name:
        spec["priorityClassName"] = job.spec.run_policy.priority_class_name
    return spec


KAI = PodGroupScheduler(
    "kai-scheduler", "scheduling.run.ai", "v2alpha2", "pod-group-name", False, _spec,
    member_annotations={"kai.scheduler/skip-podgrouper": "true"},
)  # fmt: skip
