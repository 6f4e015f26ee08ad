"""The operator's own gang admission (`--gang-backend gates`, the default), pure: every pod is created with the
operator's scheduling gate, and the gate is lifted from all of the gang's pods at once when they fit the cluster's
free room together (admission.py weighs it). A gang that fits as its pods are created is created released."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ringleader_api import ConditionType, Reason, TrainingJob

from .. import admission, placement
from ..names import rank_of
from ..round_state import Round
from .waiting import wait


@dataclass(frozen=True)
class OwnGate:
    name: str = "gates"
    description: str = "the operator's own gate (pods released together once they fit)"
    sizes_jobs: bool = True  # the operator sees the room, so it can size an elastic job to it
    watches: tuple[tuple[str, str, str], ...] = ()

    def mark(self, pod: dict[str, Any], job: TrainingJob) -> None:
        """Held back from the scheduler until the whole gang fits; the operator lifts the gate."""
        spec = pod["spec"]
        spec["schedulingGates"] = [*(spec.get("schedulingGates") or []), {"name": admission.GATE}]

    def verdict(self, job: TrainingJob, seen: tuple[str, Any] | None) -> None:
        return None

    def said(self, obj: Mapping[str, Any] | None) -> None:
        return None

    def admit(self, r: Round, cluster: admission.Cluster | None, verdict: Any) -> None:
        """Release the job's gated pods if they fit together, else record that they wait (failing the job past
        runPolicy.schedulingTimeoutSeconds). The gang is the gated pods that exist and the pods this round
        creates: when it fits, those being created go out without the gate (created straight into the
        scheduler's queue, overlapping creation with scheduling, with no release patch per pod) and the existing
        ones are released. `cluster` (every Node and pod) is needed only then; without it everything stays
        gated."""
        release(r, cluster)


OWN_GATE = OwnGate()


def release(r: Round, cluster: admission.Cluster | None) -> None:
    """Lift the gate from the gang (the gated pods that stay and those this round creates gated) if it fits
    `cluster`, else say that it waits."""
    gated = _gated_staying(r)
    creating = [x for x in r.plan.create_pods if admission.gated(x)]
    if not (gated or creating) or cluster is None or not _every_rank_has_a_pod(r):
        return
    topology = _topology(r)
    gang = [*gated, *creating]
    fit = placement.admit([x["spec"] for x in gang], cluster.nodes, cluster.room(), topology)
    if not fit.fits:
        wait(r, Reason.UNSCHEDULABLE if fit.never else Reason.WAITING_FOR_CAPACITY, fit.message)
        r.plan.waiting_for_room = True
        return
    r.plan.ungate_pods = sorted(x["metadata"]["name"] for x in gated)
    for pod in creating:
        admission.lift_gate(pod)
    where = ""
    if topology is not None:  # each pod pinned to the domain the simulation found room in (in the gang's order)
        for pod, domain in zip(gated, fit.domains[: len(gated)], strict=True):
            r.plan.pin_pods[pod["metadata"]["name"]] = {topology.key: domain}
        for pod, domain in zip(creating, fit.domains[len(gated) :], strict=True):
            pod["spec"].setdefault("nodeSelector", {})[topology.key] = domain
        domains = sorted(set(fit.domains))
        where = f" in {len(domains)} {topology.key} domain{'s' if len(domains) > 1 else ''} ({', '.join(domains)})"
    message = f"{len(gang)} pods fit the cluster's free room together{where}: released to the scheduler"
    r.set_condition(ConditionType.ADMITTED, True, Reason.ADMITTED, message)


def _topology(r: Round) -> placement.Topology | None:
    """spec.placement as admission weighs it, the nodes the job's running pods are on as its anchor."""
    asked = r.job.spec.placement
    if asked is None:
        return None
    live = {p.name for p in r.observed if r.live(p)}
    anchor = frozenset(
        str(x["spec"]["nodeName"])
        for x in r.pods
        if (x.get("metadata") or {}).get("name") in live and (x.get("spec") or {}).get("nodeName")
    )
    return placement.Topology(asked.topology_key, asked.required, anchor)


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
