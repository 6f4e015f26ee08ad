"""Builders and waits for TrainingJob integration tests."""

from __future__ import annotations

import contextlib
import copy
import json
import re
import urllib.request
from pathlib import Path
from typing import Any

from kubernetes import client
from ringleader_api import TrainingJobStatus
from ringleader_devcluster.operatorprocess import OPERATOR_METRICS_PORT

from tests.support.cluster import PROCESS_NODE_SELECTOR, logs, wait_for

GROUP, VERSION, PLURAL = "ringleader.dev", "v1alpha1", "trainingjobs"


def training_job(name: str, script: str, workers: int = 2, **spec: Any) -> dict[str, Any]:
    """A TrainingJob whose ranks run `python -c script` on the process node."""
    template = {
        "spec": {
            "nodeSelector": PROCESS_NODE_SELECTOR,
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {"name": "trainer", "image": "ringleader/trainer:dev", "command": ["python", "-u", "-c", script]}
            ],
        }
    }
    body: dict[str, Any] = {"workers": {"replicas": workers, "template": template}, **spec}
    if body.get("strategy") == "parameter-server":
        body.setdefault("parameterServers", {"replicas": 2, "template": copy.deepcopy(template)})
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob", "metadata": {"name": name}, "spec": body}


def digits_job(name: str, workers: int, steps: int, directory: Path, pace: float = 0.05, **spec: Any) -> dict[str, Any]:
    """A TrainingJob training the digits MLP for `steps` steps with checkpoints in `directory` every 20 steps;
    worker 0 is slowed by `pace` seconds a step, so a test can act while it runs (and, under a synchronous
    strategy, every rank waits for it instead of using the CPU)."""
    body = training_job(name, "", workers=workers, **spec)
    body["spec"]["checkpoint"] = {"directory": str(directory), "intervalSteps": 20}
    for role in ("workers", "parameterServers"):
        if role in body["spec"]:
            body["spec"][role]["template"]["spec"]["containers"][0]["command"] = [
                "python", "-u", "-m", "ringleader_trainer", "--example", "digits-mlp", "--steps", str(steps),
                "--log-every", "10", "--straggler", f"0:{pace}",
            ]  # fmt: skip
    return body


def create(custom: client.CustomObjectsApi, ns: str, body: dict[str, Any]) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)


def get(custom: client.CustomObjectsApi, ns: str, name: str) -> dict[str, Any]:
    return dict(custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name))


def condition(job: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (job.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def rank_status(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """status.ranks per rank (`worker-1`), every field: the operator writes ranks alike under one range key
    (`worker-0-2`) and leaves fields at their defaults out."""
    ranks = TrainingJobStatus.model_validate(job.get("status") or {}).ranks
    return {key: rank.model_dump(by_alias=True) for key, rank in ranks.items()}


def finished(job: dict[str, Any]) -> bool:
    """Whether the job ended: Succeeded or Failed is True."""
    return any((c := condition(job, k)) is not None and c["status"] == "True" for k in ("Succeeded", "Failed"))


def wait_condition(
    custom: client.CustomObjectsApi, ns: str, name: str, kind: str, timeout: float = 90, status: str = "True"
) -> dict[str, Any]:
    """Wait until condition `kind` has `status`; returns the job."""

    def check() -> dict[str, Any] | None:
        job = get(custom, ns, name)
        c = condition(job, kind)
        return job if c and c["status"] == status else None

    suffix = "" if status == "True" else f" {status}"
    return wait_for(f"TrainingJob {ns}/{name} condition {kind}{suffix}", check, timeout)


def wait_finished(custom: client.CustomObjectsApi, ns: str, name: str, what: str, timeout: float) -> dict[str, Any]:
    """Wait until the job ended (Succeeded or Failed, `finished`), failing the test naming `what`; returns the job."""

    def ended() -> dict[str, Any] | None:
        job = get(custom, ns, name)
        return job if finished(job) else None

    return wait_for(what, ended, timeout)


def trainer_events(core: client.CoreV1Api, ns: str, pod: str, event: str) -> list[dict[str, Any]]:
    """The JSON lines with `event` the pod's trainer container logged."""
    lines = [json.loads(x) for x in logs(core, ns, pod, container="trainer").splitlines() if x.startswith("{")]
    return [e for e in lines if e.get("event") == event]


def pods_of(core: client.CoreV1Api, ns: str, job: str, **kw: Any) -> list[Any]:
    return list(core.list_namespaced_pod(ns, label_selector=f"ringleader.dev/job-name={job}", **kw).items)


def live_pods(core: client.CoreV1Api, ns: str, job: str) -> list[Any]:
    """The job's pods that are not being deleted."""
    return [p for p in pods_of(core, ns, job) if not p.metadata.deletion_timestamp]


def round_durations() -> dict[str, int]:
    """The dev cluster's operator's round-duration histogram: rounds so far ("count") and, per bucket bound
    ("0.5", "2.5", ...), the rounds that took at most that many seconds."""
    with urllib.request.urlopen(f"http://127.0.0.1:{OPERATOR_METRICS_PORT}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {
        le: int(float(value))
        for le, value in re.findall(r'^ringleader_reconcile_duration_seconds_bucket\{le="([^"]+)"\} (\S+)$', text, re.M)
    }
    out["count"] = out.get("+Inf", 0)  # every round falls in the last bucket
    return out


def operator_rounds() -> int:
    """Reconcile rounds the dev cluster's operator has run."""
    return round_durations()["count"]


def wait_rounds(n: int, timeout: float = 60) -> None:
    """Wait until the operator has run `n` more rounds: to see that something does not happen, let the
    operator decide that many times instead of sleeping."""
    target = operator_rounds() + n
    wait_for(f"{n} more reconcile rounds", lambda: operator_rounds() >= target or None, timeout=timeout)


def rank_processes(namespace: str, job: str, role: str, index: int) -> list[int]:
    """The process node's processes of one rank (its trainer and what it forked), told by the environment the
    operator gives each rank."""
    want = {f"RINGLEADER_NAMESPACE={namespace}", f"RINGLEADER_JOB_NAME={job}", f"RINGLEADER_ROLE={role}",
            f"RINGLEADER_INDEX={index}"}  # fmt: skip
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):  # gone meanwhile, or another user's
            if want <= set((entry / "environ").read_bytes().decode(errors="replace").split("\0")):
                found.append(int(entry.name))
    return found
