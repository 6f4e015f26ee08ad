"""What `ringleader submit` creates, built without I/O: a ConfigMap holding the script (and its requirements) and
the TrainingJob that runs it in every rank.

The script is mounted read-only at SCRIPT_DIR in the trainer container and started as `python -u <script> ARGS`
(through `sh -c` with `pip install --target` first when a requirements file is given; the arguments travel as
positional parameters, never spliced into the shell text). The pod template meets Pod Security "restricted", as
the examples do. The job is built as a `ringleader_api.TrainingJob`, so every bound the CRD enforces is checked
here first with the same message the operator would give. `from_files` reads the script and requirements; the rest
does no I/O.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any

from pydantic import ValidationError
from ringleader_api import (
    API_VERSION,
    KIND,
    LABEL_JOB,
    PSMode,
    RestartPolicy,
    Strategy,
    TrainingJob,
)

from .errors import UsageError

VERSION = "0.1.0"
DEFAULT_IMAGE = f"ringleader/trainer:{VERSION}"
SCRIPT_DIR = "/opt/ringleader/submitted"
DEPS_DIR = "/tmp/ringleader-deps"  # pip's --target: the image's own site-packages are not the user's to write
SCRIPT_VOLUME = "ringleader-script"
CONFIGMAP_LIMIT = 1_000_000  # a ConfigMap's data may not exceed 1 MiB; some room is kept for its metadata
ANNOTATION_SCRIPT = "ringleader.dev/script"  # which key of the ConfigMap is the script (for describe)
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti)?$")


@dataclass(frozen=True)
class Submission:
    """One `submit`: the script's file name and text, and how to run it."""

    script_name: str
    script: str
    args: Sequence[str] = ()
    workers: int = 2
    strategy: Strategy = Strategy.ALLREDUCE
    parameter_servers: int | None = None  # parameter-server only (1 when not given)
    ps_mode: PSMode = PSMode.SYNCHRONOUS
    gpus: int = 0
    image: str = DEFAULT_IMAGE
    name: str | None = None
    namespace: str = "default"
    requirements: str | None = None
    cpu: str | None = None
    memory: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    restart_policy: RestartPolicy = RestartPolicy.ON_FAILURE
    backoff_limit: int | None = None
    checkpoint_every: int | None = None  # steps between checkpoints (spec.checkpoint)
    checkpoint_claim: str | None = None  # a PersistentVolumeClaim for them
    deadline_seconds: int | None = None  # runPolicy.activeDeadlineSeconds
    priority_class: str | None = None
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: Sequence[str] = ()  # KEY[=VALUE][:EFFECT], as kubectl taint writes taints


def job_name(script_name: str, name: str | None, suffix: str | None = None) -> str:
    """`name` if given (checked), else the script's stem as a DNS label plus 5 random characters
    (`train_custom.py` -> `train-custom-x7k2p`), so submitting the same script twice makes two jobs."""
    if name is not None:
        if not _DNS_LABEL.match(name) or len(name) > 63:
            raise UsageError(f"--name {name!r}: a job name is lowercase letters, digits and '-' (a DNS label)")
        return name
    stem = re.sub(r"[^a-z0-9]+", "-", PurePath(script_name).stem.lower()).strip("-")[:40].strip("-") or "job"
    tail = (
        suffix
        if suffix is not None
        else "".join(secrets.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(5))
    )
    return f"{stem}-{tail}"


def configmap_name(job: str) -> str:
    return f"{job}-script"


def build(sub: Submission, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ConfigMap and the TrainingJob of a submission named `name`, as the API server takes them. The
    ConfigMap gets its owner reference (the job's uid) once the job exists: `owner_reference`."""
    _check(sub)
    data = {sub.script_name: sub.script}
    if sub.requirements is not None:
        data["requirements.txt"] = sub.requirements
    size = sum(len(k) + len(v.encode()) for k, v in data.items())
    if size > CONFIGMAP_LIMIT:
        raise UsageError(
            f"{sub.script_name}: {size} bytes with its requirements, over a ConfigMap's 1 MiB; build an image with it"
        )
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": configmap_name(name),
            "namespace": sub.namespace,
            "labels": {LABEL_JOB: name},
            "annotations": {ANNOTATION_SCRIPT: sub.script_name},
        },
        "data": data,
    }
    return configmap, _job(sub, name)


def _job(sub: Submission, name: str) -> dict[str, Any]:
    template = _template(sub, name)
    spec: dict[str, Any] = {
        "strategy": sub.strategy.value,
        "workers": {
            "replicas": sub.workers, "gpus": sub.gpus, "restartPolicy": sub.restart_policy.value, "template": template,
        },
    }  # fmt: skip
    if sub.strategy == Strategy.PARAMETER_SERVER:
        spec["parameterServer"] = {"mode": sub.ps_mode.value}
        spec["parameterServers"] = {
            "replicas": sub.parameter_servers or 1, "restartPolicy": sub.restart_policy.value, "template": template,
        }  # fmt: skip
    run_policy = {
        k: v for k, v in (("backoffLimit", sub.backoff_limit), ("activeDeadlineSeconds", sub.deadline_seconds),
                          ("priorityClassName", sub.priority_class)) if v is not None
    }  # fmt: skip
    if run_policy:
        spec["runPolicy"] = run_policy
    if sub.checkpoint_every is not None or sub.checkpoint_claim is not None:
        checkpoint: dict[str, Any] = {"intervalSteps": sub.checkpoint_every or 100}
        if sub.checkpoint_claim is not None:
            checkpoint["claimName"] = sub.checkpoint_claim
        spec["checkpoint"] = checkpoint
    job = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": sub.namespace},
        "spec": spec,
    }
    try:
        TrainingJob.model_validate(job)  # the CRD's bounds, with the field named
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UsageError(f"{where}: {first['msg']}") from None
    return job


def _template(sub: Submission, name: str) -> dict[str, Any]:
    script = f"{SCRIPT_DIR}/{sub.script_name}"
    if sub.requirements is None:
        command = ["python", "-u", script, *sub.args]
    else:
        # "$@" are the script's arguments, passed as sh's positional parameters after $0.
        shell = (
            f"pip install --quiet --no-cache-dir --disable-pip-version-check --target {DEPS_DIR} "
            f"-r {SCRIPT_DIR}/requirements.txt && PYTHONPATH={DEPS_DIR}${{PYTHONPATH:+:$PYTHONPATH}} "
            f'exec python -u {script} "$@"'
        )
        command = ["sh", "-c", shell, "ringleader-submit", *sub.args]
    container: dict[str, Any] = {
        "name": "trainer",
        "image": sub.image,
        "command": command,
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": SCRIPT_VOLUME, "mountPath": SCRIPT_DIR, "readOnly": True}],
    }
    if sub.env:
        container["env"] = [{"name": k, "value": v} for k, v in sub.env.items()]
    requests = {k: v for k, v in (("cpu", sub.cpu), ("memory", sub.memory)) if v is not None}
    if requests:
        limits = {"memory": sub.memory} if sub.memory is not None else {}
        container["resources"] = {"requests": requests, **({"limits": limits} if limits else {})}
    pod: dict[str, Any] = {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
        "volumes": [{"name": SCRIPT_VOLUME, "configMap": {"name": configmap_name(name)}}],
    }
    if sub.node_selector:
        pod["nodeSelector"] = dict(sub.node_selector)
    if sub.tolerations:
        pod["tolerations"] = [toleration(t) for t in sub.tolerations]
    return {"metadata": {"labels": {LABEL_JOB: name}}, "spec": pod}


EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def toleration(text: str) -> dict[str, str]:
    """`KEY[=VALUE][:EFFECT]` (how `kubectl taint` writes a taint) as the toleration of that taint: Equal with a
    value, Exists without; every effect when none is given."""
    body, _, effect = text.partition(":")
    key, eq, value = body.partition("=")
    if not _LABEL_KEY.match(key) or (effect and effect not in EFFECTS):
        raise UsageError(f"--toleration {text!r}: KEY[=VALUE][:EFFECT], EFFECT one of {', '.join(EFFECTS)}")
    out = {"key": key, "operator": "Equal", "value": value} if eq else {"key": key, "operator": "Exists"}
    return {**out, "effect": effect} if effect else out


def _check(sub: Submission) -> None:
    if not sub.script_name.endswith(".py"):
        raise UsageError(f"{sub.script_name}: the script is a Python file (.py)")
    if "/" in sub.script_name or sub.script_name in ("requirements.txt",):
        raise UsageError(f"{sub.script_name}: a file name, not a path")
    for key in sub.env:
        if not _ENV_NAME.match(key):
            raise UsageError(f"--env {key}: not a variable name")
    for flag, value in (("--cpu", sub.cpu), ("--memory", sub.memory)):
        if value is not None and not _QUANTITY.match(value):
            raise UsageError(f"{flag} {value!r}: not a Kubernetes quantity (e.g. 2, 500m, 4Gi)")
    for key in sub.node_selector:
        if not _LABEL_KEY.match(key):
            raise UsageError(f"--node-selector {key}: not a label key")
    if sub.strategy != Strategy.PARAMETER_SERVER and sub.parameter_servers is not None:
        raise UsageError("--ps: parameter servers are for --strategy parameter-server")


def owner_reference(job: dict[str, Any]) -> dict[str, Any]:
    """The owner reference that makes the ConfigMap go with the job (garbage collection)."""
    meta = job["metadata"]
    return {"apiVersion": API_VERSION, "kind": KIND, "name": meta["name"], "uid": meta["uid"], "controller": False}


def from_files(script: str | Path, namespace: str, **options: Any) -> Submission:
    """A `Submission` of the file `script` (and `requirements=`, a file) with the CLI's or SDK's options; a missing or
    unreadable file, or a value out of its choices, is a UsageError naming it."""
    requirements = options.pop("requirements", None)
    try:
        return Submission(
            script_name=Path(script).name,
            script=_read_text(Path(script), "script"),
            requirements=None if requirements is None else _read_text(Path(requirements), "requirements"),
            namespace=namespace,
            args=tuple(options.pop("args", ())),
            strategy=Strategy(options.pop("strategy", Strategy.ALLREDUCE)),
            ps_mode=PSMode(options.pop("ps_mode", PSMode.SYNCHRONOUS)),
            restart_policy=RestartPolicy(options.pop("restart_policy", RestartPolicy.ON_FAILURE)),
            env=dict(options.pop("env", None) or {}),
            **options,
        )
    except ValueError as e:
        raise UsageError(str(e).strip().splitlines()[0]) from None


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such {what} file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: cannot read the {what}: {e}") from None
