"""runPolicy.cleanPodPolicy: which pods of an ended job are deleted; and an ended job's coordinator."""

from __future__ import annotations

from ringleader_api import CleanPodPolicy, TrainingJob

from ..conditions import finished
from ..round_state import Round

STILL_RUNNING = ("Pending", "Running")


def clean_pods(r: Round) -> None:
    """For a job that has ended (or is ending in this round): All deletes every pod, Running those still
    Pending or Running, None none. Pods already going are not named again."""
    policy = r.job.spec.run_policy.clean_pod_policy
    for p in r.observed:
        if not r.live(p):
            continue
        if policy == CleanPodPolicy.ALL or (policy == CleanPodPolicy.RUNNING and p.phase in STILL_RUNNING):
            r.plan.delete_pods.append(p.name)


def stop_running_pods(r: Round) -> None:
    """Delete every pod still Pending or Running, whatever cleanPodPolicy says (a job past its deadline must not
    hold resources)."""
    r.plan.delete_pods = [p.name for p in r.observed if not p.deleting and p.phase in STILL_RUNNING]


def end_coordinator(r: Round, job: TrainingJob) -> None:
    """In the round `job` ends in, its coordinator goes, whatever cleanPodPolicy says (it holds nothing anyone
    reads after the ranks), where it may have had one (minReplicas: at some size it trained short; a delete of
    none is nothing)."""
    if job.spec.workers.min_replicas is not None and finished(r.status.conditions) and not finished(r.old.conditions):
        r.plan.end_coordinator = True
