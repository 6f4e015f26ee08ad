"""Builders for the operator's pure-layer tests: a job, its rank pods as the API server shows them, times."""

from __future__ import annotations

import copy
from typing import Any

from ringleader_api import Role, TrainingJob
from ringleader_operator.admission import GATE
from ringleader_operator.builders import desired_ranks
from ringleader_operator.names import rank_labels
from ringleader_operator.reading import Reading
from ringleader_operator.reconcile import plan
from ringleader_operator.round_state import Round

NOW = "2026-01-01T00:00:00Z"

TEMPLATE = {"spec": {"containers": [{"name": "trainer", "image": "t", "command": ["python", "t.py"]}]}}


def training_job(
    *,
    name: str = "j",
    namespace: str = "ns",
    uid: str = "u",
    template: dict[str, Any] | None = None,
    workers: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
    **spec: Any,
) -> TrainingJob:
    """A TrainingJob as the API server hands it over (generation 1): two workers running `template` (TEMPLATE by
    default), `workers` overriding fields of their spec, `spec` adding fields of the job's."""
    # A copy: a test may change the job's template in place, and the next job must not see it.
    body = {"workers": {"replicas": 2, "template": copy.deepcopy(template or TEMPLATE), **(workers or {})}, **spec}
    meta = {"name": name, "namespace": namespace, "uid": uid, "generation": 1}
    return TrainingJob.model_validate({"metadata": meta, "spec": body, "status": status or {}})


def job(status: dict[str, Any] | None = None, **spec: Any) -> TrainingJob:
    """Job `j` in namespace `ns` (the reconcile and policy tests' job), its status as given."""
    return training_job(status=status, **spec)


def pod(
    role: Role,
    index: int,
    phase: str,
    exit_code: int | None = None,
    deleting: bool = False,
    ready: bool = True,
    attempt: int | None = 0,
    reason: str = "",
    disruption: str = "",
    deadline: str = NOW,
    output: str = "",
    waiting: str = "",
) -> dict[str, Any]:
    """A rank pod of job `j` as the API serves it; `output`: its trainer container's termination message;
    `waiting`: why its trainer container waits (`ImagePullBackOff`), with a kubelet's message."""
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": str(ready and phase == "Running")}],
    }
    if exit_code is not None:
        ended = {"exitCode": exit_code, "reason": "Error", **({"message": output} if output else {})}
        status["containerStatuses"] = [{"name": "trainer", "state": {"terminated": ended}}]
    if waiting:
        message = 'Back-off pulling image "registry/missing:1": not found'
        status["containerStatuses"] = [
            {"name": "trainer", "state": {"waiting": {"reason": waiting, "message": message}}}
        ]
    if reason:
        status["reason"] = reason
    if disruption:
        status["conditions"].append({"type": "DisruptionTarget", "status": "True", "reason": disruption})
    meta: dict[str, Any] = {
        "name": f"j-{role.value}-{index}",
        "labels": rank_labels("j", role, index),
        "ownerReferences": [{"kind": "TrainingJob", "name": "j", "uid": "u", "controller": True}],
    }
    if attempt is not None:
        meta["annotations"] = {"ringleader.dev/attempt": str(attempt)}
    if deleting:
        meta["deletionTimestamp"] = deadline
    return {"metadata": meta, "status": status}


def after(seconds: int) -> str:
    return f"2026-01-01T00:{seconds // 60:02d}:{seconds % 60:02d}Z"


def gated(p: dict[str, Any], gpus: int = 3) -> dict[str, Any]:
    """`p` still held back by the gang gate, asking for `gpus`."""
    limits = {"nvidia.com/gpu": gpus}
    spec = {"containers": [{"name": "trainer", "resources": {"limits": limits}}], "schedulingGates": [{"name": GATE}]}
    return {**p, "spec": spec}


def gpu_node(gpus: int) -> dict[str, Any]:
    return {
        "metadata": {"name": "n1"},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus), "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def round_of(j: TrainingJob, pods: list[dict[str, Any]] | None = None, now: str = NOW) -> Round:
    """A round over `pods` at `now`, its ranks indexed (as `plan` has them when the rank policies run)."""
    r = Round.open(j, pods or [], now)
    r.index_ranks(desired_ranks(j))
    return r


def names(pods: list[dict[str, Any]]) -> list[str]:
    return [x["metadata"]["name"] for x in pods]


def again(p: Any, pods: list[dict[str, Any]], *, now: str = NOW, **spec: Any) -> Any:
    """The next round: the job as the last plan left its status."""
    return plan(Reading(job(status=p.status.model_dump(by_alias=True), **spec), pods, True), now)


def conds(p: Any) -> dict[str, str]:
    return {c.type.value: c.status for c in p.status.conditions}
