"""scheduler-plugins' coscheduling (`schedulerName: scheduler-plugins-scheduler`): its PodGroup gives up on a gang
after runPolicy.schedulingTimeoutSeconds."""

from __future__ import annotations

from typing import Any

from ringleader_api import TrainingJob

from .pod_groups import PodGroupScheduler


def _spec(job: TrainingJob) -> dict[str, Any]:
    timeout = job.spec.run_policy.scheduling_timeout_seconds
    return {"scheduleTimeoutSeconds": timeout} if timeout else {}


COSCHEDULING = PodGroupScheduler(
    "scheduler-plugins-scheduler", "scheduling.x-k8s.io", "v1alpha1", "scheduling.x-k8s.io/pod-group", True, _spec
)
