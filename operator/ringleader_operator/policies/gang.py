"""Gang admission by the operator itself: the pods of a job that uses it are created gated and released to
the scheduler together, once every rank has one and they fit the cluster's free room all at once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from .. import admission, gangs
from ..api import ConditionType
from ..conditions import Reason
from ..job_objects import build_pod_group
from ..observed import parse_time
from ..round_state import Event, Round

# Gated pods that do not fit are looked at again this often (and at once when a job of this operator frees room).
ADMISSION_RETRY_SECONDS = 5.0


def admit_gang(r: Round, cluster: admission.Cluster | None) -> None:
    """Release the job's gated pods if they fit together, else record that they wait (failing the job past
    runPolicy.schedulingTimeoutSeconds). `cluster` (every Node and pod) is needed only while some pods carry
    the gate; without it they stay gated. A gang scheduler's PodGroup goes with the pods being created."""
    if r.plan.create_pods and gangs.gang_scheduler(r.job) is not None:
        r.plan.pod_group = build_pod_group(r.job)
    gated = _gated_staying(r)
    if not gated or cluster is None or not _every_rank_has_a_pod(r):
        return
    verdict = admission.admit([x["spec"] for x in gated], cluster.nodes, cluster.pods)
    if not verdict.fits:
        _wait_for_room(r, verdict)
        return
    r.plan.ungate_pods = sorted(x["metadata"]["name"] for x in gated)
    message = f"{len(gated)} pods fit the cluster's free room together: released to the scheduler"
    r.set_condition(ConditionType.ADMITTED, True, Reason.ADMITTED, message)


def _gated_staying(r: Round) -> list[dict[str, Any]]:
    """The gated pods that are neither being deleted nor about to be."""
    staying = {p.name for p in r.observed if r.live(p)}
    return [x for x in r.pods if admission.gated(x) and (x.get("metadata") or {}).get("name") in staying]


def _every_rank_has_a_pod(r: Round) -> bool:
    return not r.plan.create_pods and all(any(r.live(p) for p in r.by_rank.get(rank, [])) for rank in r.desired)


def _wait_for_room(r: Round, verdict: admission.Verdict) -> None:
    """The gated pods wait for room: say why (once per reason), and fail the job once
    runPolicy.schedulingTimeoutSeconds has run out since they began waiting."""
    reason = Reason.UNSCHEDULABLE if verdict.never else Reason.WAITING_FOR_CAPACITY
    before = next((c for c in r.status.conditions if c.type == ConditionType.ADMITTED), None)
    r.set_condition(ConditionType.ADMITTED, False, reason, verdict.message)
    if before is None or (before.status, before.reason) != ("False", reason):
        r.plan.events.append(Event("Warning", reason, verdict.message))
    r.plan.waiting_for_room = True
    admitted = next(c for c in r.status.conditions if c.type == ConditionType.ADMITTED)
    since = parse_time(admitted.last_transition_time or r.now)
    timeout = r.job.spec.run_policy.scheduling_timeout_seconds
    if timeout is not None and r.at >= since + timedelta(seconds=timeout):
        r.fail(
            reason,
            f"the pods found no room to run together within runPolicy.schedulingTimeoutSeconds ({timeout} s): "
            + verdict.message,
        )
        return
    retry = r.after(ADMISSION_RETRY_SECONDS)
    r.wake_at(retry if timeout is None else min(retry, since + timedelta(seconds=timeout)))
