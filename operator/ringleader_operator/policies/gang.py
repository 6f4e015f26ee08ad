"""Gang admission by the operator itself: the pods of a job that uses it go to the scheduler together, once
every rank has one and they fit the cluster's free room all at once. A gang that fits as its pods are created is
created released; otherwise its pods are created gated and released together later."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ringleader_api import ConditionType, Reason

from .. import admission, gangs, workload_api
from ..builders import rank_of
from ..job_objects import build_pod_group
from ..observed import parse_time
from ..round_state import Event, Round
from ..workload_api import Gang

# Gated pods that do not fit are looked at again this often (and at once when a job of this operator frees room).
ADMISSION_RETRY_SECONDS = 5.0


def admit_gang(r: Round, cluster: admission.Cluster | None, workload_gang: Gang | None = None) -> None:
    """Release the job's gated pods if they fit together, else record that they wait (failing the job past
    runPolicy.schedulingTimeoutSeconds). The gang is the gated pods that exist and the gated pods this round
    creates: when it fits, those being created go out without the gate (created straight into the scheduler's
    queue, overlapping creation with scheduling, with no release patch per pod) and the existing ones are
    released. `cluster` (every Node and pod) is needed only then; without it everything stays gated. A gang
    scheduler's PodGroup goes with the pods being created; with `workload_gang` (the cluster's own gang
    scheduling, workload_api.py) so do the job's Workload and PodGroup, the pods join that group instead of being
    gated, and the job's Admitted condition says what kube-scheduler said of the group."""
    if r.plan.create_pods and gangs.gang_scheduler(r.job) is not None:
        r.plan.scheduling_objects = [group] if (group := build_pod_group(r.job)) is not None else []
    elif workload_gang is not None:
        _hand_to_kube_scheduler(r, workload_gang)
    gated = _gated_staying(r)
    creating = [x for x in r.plan.create_pods if admission.gated(x)]
    if not (gated or creating) or cluster is None or not _every_rank_has_a_pod(r):
        return
    topology = _topology(r)
    gang = [*gated, *creating]
    verdict = admission.admit([x["spec"] for x in gang], cluster.nodes, cluster.room(), topology)
    if not verdict.fits:
        _wait_for_room(r, verdict)
        return
    r.plan.ungate_pods = sorted(x["metadata"]["name"] for x in gated)
    for pod in creating:
        admission.lift_gate(pod)
    where = ""
    if topology is not None:  # each pod pinned to the domain the simulation found room in (in the gang's order)
        for pod, domain in zip(gated, verdict.domains[: len(gated)], strict=True):
            r.plan.pin_pods[pod["metadata"]["name"]] = {topology.key: domain}
        for pod, domain in zip(creating, verdict.domains[len(gated) :], strict=True):
            pod["spec"].setdefault("nodeSelector", {})[topology.key] = domain
        domains = sorted(set(verdict.domains))
        where = f" in {len(domains)} {topology.key} domain{'s' if len(domains) > 1 else ''} ({', '.join(domains)})"
    message = f"{len(gang)} pods fit the cluster's free room together{where}: released to the scheduler"
    r.set_condition(ConditionType.ADMITTED, True, Reason.ADMITTED, message)


def _topology(r: Round) -> admission.Topology | None:
    """spec.placement as admission weighs it, the nodes the job's running pods are on as its anchor."""
    placement = r.job.spec.placement
    if placement is None:
        return None
    live = {p.name for p in r.observed if r.live(p)}
    anchor = frozenset(
        str(x["spec"]["nodeName"])
        for x in r.pods
        if (x.get("metadata") or {}).get("name") in live and (x.get("spec") or {}).get("nodeName")
    )
    return admission.Topology(placement.topology_key, placement.required, anchor)


def _hand_to_kube_scheduler(r: Round, gang: Gang) -> None:
    if r.plan.create_pods:
        placement = r.job.spec.placement
        key = placement.topology_key if placement is not None and placement.required else None
        r.plan.scheduling_objects = workload_api.objects(r.job, key)
    for pod in r.plan.create_pods:
        workload_api.join(pod, r.job)
    if gang.reading is None or not any(workload_api.member(x) for x in r.pods):
        return
    scheduled, said = gang.reading
    group = workload_api.group_name(r.job)
    if scheduled:
        message = f"kube-scheduler placed the gang (PodGroup {group})"
        r.set_condition(ConditionType.ADMITTED, True, Reason.ADMITTED, message)
    elif any(not (x.get("spec") or {}).get("nodeName") for x in r.pods if workload_api.member(x)):
        _wait(r, Reason.WAITING_FOR_CAPACITY, f"kube-scheduler: {said} (PodGroup {group})")


def _gated_staying(r: Round) -> list[dict[str, Any]]:
    """The gated pods that are neither being deleted nor about to be."""
    if (book := r.synced()) is not None and not book.gated:
        return []  # none of its pods is gated (the rank book counts them)
    gated = [x for x in r.pods if admission.gated(x)]
    if not gated:
        return []
    staying = {p.name for p in r.observed if r.live(p)}
    return [x for x in gated if (x.get("metadata") or {}).get("name") in staying]


def _every_rank_has_a_pod(r: Round) -> bool:
    """Every rank has a pod that stays or one this round creates (a rank waiting out its restart back-off has
    neither: the gang waits for it)."""
    creating = {rank_of(x) for x in r.plan.create_pods}
    return all(rank in creating or any(r.live(p) for p in r.by_rank.get(rank, [])) for rank in r.desired)


def _wait_for_room(r: Round, verdict: admission.Verdict) -> None:
    """The gated pods wait for room."""
    _wait(r, Reason.UNSCHEDULABLE if verdict.never else Reason.WAITING_FOR_CAPACITY, verdict.message)
    r.plan.waiting_for_room = True


def _wait(r: Round, reason: str, message: str) -> None:
    """The gang waits to be placed: say why (once per reason), and fail the job once
    runPolicy.schedulingTimeoutSeconds has run out since it began waiting."""
    before = next((c for c in r.status.conditions if c.type == ConditionType.ADMITTED), None)
    r.set_condition(ConditionType.ADMITTED, False, reason, message)
    if before is None or (before.status, before.reason) != ("False", reason):
        r.plan.events.append(Event("Warning", reason, message))
    admitted = next(c for c in r.status.conditions if c.type == ConditionType.ADMITTED)
    since = parse_time(admitted.last_transition_time or r.now)
    timeout = r.job.spec.run_policy.scheduling_timeout_seconds
    if timeout is not None and r.at >= since + timedelta(seconds=timeout):
        r.fail(
            reason,
            f"the pods found no room to run together within runPolicy.schedulingTimeoutSeconds ({timeout} s): "
            + message,
        )
        return
    retry = r.after(ADMISSION_RETRY_SECONDS)
    r.wake_at(retry if timeout is None else min(retry, since + timedelta(seconds=timeout)))
