"""Pure builders of the objects a TrainingJob owns: one pod per rank and one headless Service.

`build_pod(job, role, index)` deep-copies the user's pod template and adds only what the job needs: names,
labels, owner reference, hostname/subdomain for a stable DNS name, the environment contract (torchrun's
variables plus RINGLEADER_*; see docs/env-contract.md), the GPU limit and the checkpoint volume. Anything the
user set is kept: env vars, resources, volumes, tolerations, node selectors. Nothing here does I/O.
"""

from __future__ import annotations

import copy
import functools
import math
from typing import Any

from ringleader_api import (
    ANNOTATION_ATTEMPT,
    CONTRACT_ENV,
    MAX_GRACE_SECONDS,
    ROLE_FIELDS,
    Role,
    TrainingJob,
)

from . import launchers, templates
from .names import (
    ANNOTATION_WORKERS,
    CHECKPOINT_VOLUME,
    DEFAULT_CHECKPOINT_DIR,
    GPU_RESOURCE,
    MASTER_PORT,
    METRICS_PORT,
    NODE_LOSS_TAINTS,
    NODE_LOSS_TOLERATION_SECONDS,
    PS_PORT,
    TOKEN_DIR,
    TOKEN_VOLUME,
    TRAINER_CONTAINER,
    owner_reference,
    pod_name,
    rank_labels,
    token_secret_name,
)  # fmt: skip
from .rank_env import cpu_threads, rank_env, worker_counts


class InvalidTemplate(ValueError):
    """The pod template cannot make a pod; the message names the field."""


STOP_GRACE_UNMEASURED_SECONDS = 60  # before worker 0 has reported a save
STOP_GRACE_MIN_SECONDS = 30  # Kubernetes' own default
STOP_GRACE_MARGIN = 3  # times the measured save plus two steps (the step in flight and the agreement's)
STOP_GRACE_ALLOWANCE_SECONDS = 10  # the signal's delivery, the process's exit, a slow disk's fsync


def stop_grace_seconds(job: TrainingJob) -> int | None:
    """The grace period that fits a stop with its save, None when the job does not checkpoint: the spec's, else
    sized from worker 0's measured save and step times (status.progress), else STOP_GRACE_UNMEASURED_SECONDS."""
    checkpoint = job.spec.checkpoint
    if checkpoint is None:
        return None
    if checkpoint.stop_grace_period_seconds is not None:
        return checkpoint.stop_grace_period_seconds
    progress = job.status.progress
    if progress is None or progress.checkpoint_seconds is None:
        return STOP_GRACE_UNMEASURED_SECONDS
    needed = STOP_GRACE_MARGIN * (progress.checkpoint_seconds + 2 * (progress.step_seconds or 0.0))
    return min(MAX_GRACE_SECONDS, max(STOP_GRACE_MIN_SECONDS, math.ceil(needed + STOP_GRACE_ALLOWANCE_SECONDS)))


def delete_grace_seconds(job: TrainingJob) -> int | None:
    """The grace period of the operator's own deletions of the job's pods (suspend, resize, cleanup): the stop's
    as measured now (pods made earlier carry an older figure), or None (each pod's own) when the job does not
    checkpoint or a template sets its own terminationGracePeriodSeconds."""
    templates_grace = any(
        "terminationGracePeriodSeconds" in (spec.template.get("spec") or {})
        for spec in (job.spec.workers, job.spec.parameter_servers)
        if spec is not None
    )
    return None if templates_grace else stop_grace_seconds(job)


def trainer_container_index(template: dict[str, Any], where: str) -> int:
    """Index of the container named `trainer`, else 0; InvalidTemplate when there is none at all."""
    containers = (template.get("spec") or {}).get("containers") or []
    if not containers:
        raise InvalidTemplate(f"{where}.spec.containers must name at least one container")
    names = [c.get("name") for c in containers]
    if any(not n for n in names):
        raise InvalidTemplate(f"{where}.spec.containers: every container needs a name")
    if len(set(names)) != len(names):
        raise InvalidTemplate(f"{where}.spec.containers: container names must be unique")
    return names.index(TRAINER_CONTAINER) if TRAINER_CONTAINER in names else 0


DEFAULT_MAX_RANKS = 10_000  # pods per job this operator makes at most (--max-replicas-per-job)


def validate(job: TrainingJob, max_ranks: int = DEFAULT_MAX_RANKS) -> None:
    """What the CRD schema cannot check: the free-form pod templates, and the operator's own cap on the ranks
    of one job (`max_ranks`, counting an elastic job at its maxReplicas). Raises InvalidTemplate."""
    workers = job.spec.workers
    ranks = max(workers.replicas, workers.max_replicas or 0) + (
        job.spec.parameter_servers.replicas if job.spec.parameter_servers else 0
    )
    if ranks > max_ranks:
        raise InvalidTemplate(
            f"spec.workers.replicas: the job asks for {ranks} pods, more than this operator's limit of {max_ranks} "
            "per job (its --max-replicas-per-job)"
        )
    for role, where in ((r, f"{ROLE_FIELDS[r]}.template") for r in (Role.WORKER, Role.PS)):
        spec = job.replicas(role)
        if spec is None:
            continue
        if (wrong := templates.check(spec.template, where)) is not None:
            raise InvalidTemplate(wrong)
        trainer = trainer_container_index(spec.template, where)
        if any(v.get("name") == TOKEN_VOLUME for v in spec.template["spec"].get("volumes") or []):
            raise InvalidTemplate(f"{where}.spec.volumes: the name {TOKEN_VOLUME} is the operator's (the job's token)")
        container = spec.template["spec"]["containers"][trainer]
        taken = [e.get("name") for e in container.get("env") or [] if e.get("name") in CONTRACT_ENV]
        if taken:
            raise InvalidTemplate(
                f"{where}.spec.containers[{trainer}].env sets {taken[0]}, which the operator sets for each rank "
                "(docs/env-contract.md): remove it"
            )
        if role == Role.WORKER and (
            split := launchers.split_world(container, worker_counts(job), f"{where}.spec.containers[{trainer}]")
        ):
            raise InvalidTemplate(str(split))
    if len(names := scheduler_names(job)) > 1:
        raise InvalidTemplate(
            "spec.parameterServers.template.spec.schedulerName must equal the workers' (the ranks are scheduled as "
            f"one gang): {' and '.join(sorted(repr(n) for n in names))}"
        )


def scheduler_names(job: TrainingJob) -> set[str]:
    """The schedulerName of every role's template ("" for the default scheduler, and for a template whose spec is
    not a mapping: `validate` refuses it, and a round may ask before)."""
    roles = [job.spec.workers, *([job.spec.parameter_servers] if job.spec.parameter_servers else [])]
    specs = [r.template.get("spec") for r in roles]
    return {str(s.get("schedulerName") or "") if isinstance(s, dict) else "" for s in specs}


def _without_nulls(fields: dict[str, Any]) -> dict[str, Any]:
    """`fields` (changed in place) without its null values: to Kubernetes a null field is an absent one, and
    the pod builder adds to some of them (tolerations, volumes, ports)."""
    for key in [k for k, v in fields.items() if v is None]:
        del fields[key]
    return fields


def _add_missing_env(container: dict[str, Any], env: dict[str, str]) -> None:
    """Add `env` to the container's own variables; one it already sets is kept (validate refuses templates that
    set a contract variable; torchrun's PET_NPROC_PER_NODE is the template's to raise)."""
    present = {e.get("name") for e in container.get("env") or []}
    container["env"] = list(container.get("env") or []) + [_env_entry(k, v) for k, v in env.items() if k not in present]


@functools.lru_cache(maxsize=1024)
def _env_entry(name: str, value: str) -> dict[str, str]:
    """One entry of a container's env, shared by every pod that has it (nothing changes a built pod's entries in
    place): most of a rank's variables are its job's, and a 10,000-rank job's first plan held 43 MB of copies
    of them. Bounded: the variables each rank has its own value of come and go."""
    return {"name": name, "value": value}


def _add_port(container: dict[str, Any], name: str, port: int) -> None:
    ports = container.setdefault("ports", [])
    if not any(p.get("containerPort") == port or p.get("name") == name for p in ports):
        ports.append({"name": name, "containerPort": port, "protocol": "TCP"})


def build_pod(
    job: TrainingJob, role: Role, index: int, attempt: int = 0, avoid_node: str | None = None
) -> dict[str, Any]:
    """The desired pod of rank (role, index) for its `attempt`-th restart (0: the first pod), preferring not to
    run on `avoid_node` when given. Raises InvalidTemplate for a template that cannot make a pod."""
    replica = job.replicas(role)
    if replica is None:
        raise InvalidTemplate(f"the job has no {role.value} replicas")
    where = f"{ROLE_FIELDS[role]}.template"
    trainer = trainer_container_index(replica.template, where)  # first: it refuses a template without containers
    meta, spec = _template_copy(replica.template)
    name = pod_name(job.name, role, index)
    container = spec["containers"][trainer]
    _wire_trainer(job, role, index, attempt, container, spec)
    _pod_rules(job, name, spec)
    if avoid_node:
        _avoid(spec, avoid_node)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": job.namespace,
            "labels": {**(meta.get("labels") or {}), **rank_labels(job.name, role, index)},
            "annotations": {
                **(meta.get("annotations") or {}),
                ANNOTATION_ATTEMPT: str(attempt),
                # The world the pod was made for: a pod of another size is re-formed (resize.py). A pod of a job
                # whose torchrun agents meet by c10d serves any size, and has none.
                **({} if job.resized_in_place else {ANNOTATION_WORKERS: str(job.spec.workers.replicas)}),
            },
            "ownerReferences": [owner_reference(job)],
        },
        "spec": spec,
    }
    return pod


def _avoid(spec: dict[str, Any], node: str) -> None:
    """Prefer any node but `node` (a straggler's replacement): preferred, not required, so a cluster with no
    other room still runs the rank; added to the template's own preferences."""
    term = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": [node]}
    affinity = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    preferred = affinity.setdefault("preferredDuringSchedulingIgnoredDuringExecution", [])
    preferred.append({"weight": 100, "preference": {"matchExpressions": [term]}})


def _template_copy(template: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A deep copy of the template's metadata and spec, explicit nulls dropped (as the API server would)."""
    template = copy.deepcopy(template)
    meta = _without_nulls(template.get("metadata") or {})
    spec = _without_nulls(template.get("spec") or {})
    for c in spec["containers"]:
        _without_nulls(c)
        if isinstance(c.get("resources"), dict):
            _without_nulls(c["resources"])
    return meta, spec


def _wire_trainer(
    job: TrainingJob, role: Role, index: int, attempt: int, container: dict[str, Any], spec: dict[str, Any]
) -> None:
    """What the operator adds to the trainer container: the rank's env, its ports, its GPUs, the job's token
    and the checkpoint volume."""
    replica = job.replicas(role)
    assert replica is not None
    _add_missing_env(container, rank_env(job, role, index, attempt))
    processes = job.spec.workers.procs_per_pod if role == Role.WORKER else 1
    _add_missing_env(container, {"OMP_NUM_THREADS": cpu_threads(container, processes)})
    # A failed rank's last lines become its termination message, which outlives nothing but is read before the
    # pod is replaced (the RankOutput event keeps them): the kubelet's own FallbackToLogsOnError.
    container.setdefault("terminationMessagePolicy", "FallbackToLogsOnError")
    _add_port(container, "metrics", METRICS_PORT)  # every rank's page: its step, for finding who stalled a job
    if role == Role.WORKER and index == 0:
        _add_port(container, "c10d", MASTER_PORT)
    if role == Role.PS:
        _add_port(container, "ps", PS_PORT)
    if replica.gpus:
        limits = container.setdefault("resources", {}).setdefault("limits", {})
        limits.setdefault(GPU_RESOURCE, replica.gpus)
    spec.setdefault("volumes", []).append(
        {"name": TOKEN_VOLUME, "secret": {"secretName": token_secret_name(job), "defaultMode": 0o444}}
    )  # readable by the trainer's non-root user; validate refuses templates that name this volume
    container.setdefault("volumeMounts", []).append(_TOKEN_MOUNT)
    checkpoint = job.spec.checkpoint
    if checkpoint is not None and checkpoint.claim_name:
        target = checkpoint.directory or DEFAULT_CHECKPOINT_DIR
        volumes = spec.setdefault("volumes", [])
        if not any(v.get("name") == CHECKPOINT_VOLUME for v in volumes):
            volumes.append({"name": CHECKPOINT_VOLUME, "persistentVolumeClaim": {"claimName": checkpoint.claim_name}})
        mounts = container.setdefault("volumeMounts", [])
        if not any(m.get("mountPath") == target for m in mounts):
            mounts.append({"name": CHECKPOINT_VOLUME, "mountPath": target})


# Shared by every pod built (nothing changes a built pod's entries in place), as _env_entry's are.
_NODE_LOSS_TOLERATIONS = {
    key: {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": NODE_LOSS_TOLERATION_SECONDS}
    for key in NODE_LOSS_TAINTS
}
_TOKEN_MOUNT = {"name": TOKEN_VOLUME, "mountPath": TOKEN_DIR, "readOnly": True}


def _pod_rules(job: TrainingJob, name: str, spec: dict[str, Any]) -> None:
    """What every rank pod gets whatever its template says: no in-place restarts, tolerance of a lost node
    for a while, its DNS name under the job's Service, the job's priority class."""
    # The operator restarts ranks itself (it counts restarts against backoffLimit and re-forms the job), so
    # the kubelet must never restart a container in place.
    spec["restartPolicy"] = "Never"
    if (grace := stop_grace_seconds(job)) is not None:  # a template's own grace period stands
        spec.setdefault("terminationGracePeriodSeconds", grace)
    tolerations = spec.setdefault("tolerations", [])
    for key, toleration in _NODE_LOSS_TOLERATIONS.items():
        if not any(t.get("key") == key for t in tolerations):
            tolerations.append(toleration)
    spec["hostname"] = name
    spec["subdomain"] = job.name
    if job.spec.run_policy.priority_class_name:
        spec.setdefault("priorityClassName", job.spec.run_policy.priority_class_name)


def desired_ranks(job: TrainingJob) -> list[tuple[Role, int]]:
    """Every (role, index) the job should have a pod for, parameter servers first (workers connect to them).
    Shared between calls for the same numbers (every round of a 10,000-rank job asks): read it, never change it."""
    ps = job.spec.parameter_servers.replicas if job.spec.parameter_servers else 0
    return _ranks(ps, job.spec.workers.replicas)


@functools.lru_cache(maxsize=64)
def _ranks(ps: int, workers: int) -> list[tuple[Role, int]]:
    return [(Role.PS, i) for i in range(ps)] + [(Role.WORKER, i) for i in range(workers)]
