"""Level-based reconcile, pure: from the job and the pods that exist, decide what to create and delete and
what the status is. The I/O layer applies the plan; running it twice on the same input gives the same plan.

Pods are bucketed by their rank labels; a pod being deleted still occupies its name, so its replacement is
created only once it is gone. Restart decisions per restartPolicy, bounded by runPolicy.backoffLimit:
Never fails the job; OnFailure and Always recreate the rank; ExitCode recreates on 128-255 (signals,
OOM kills, infrastructure) and fails on 1-127 (the program's own error).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .api import (
    CleanPodPolicy,
    ConditionType,
    ReplicaStatus,
    RestartPolicy,
    Role,
    TrainingJob,
    TrainingJobStatus,
)
from .builders import LABEL_INDEX, LABEL_ROLE, InvalidTemplate, build_pod, desired_ranks, validate
from .conditions import Reason, finished, set_condition


class Decision(StrEnum):
    RESTART = "Restart"
    FAIL = "Fail"


def decide_restart(
    policy: RestartPolicy, exit_code: int | None, restarts: int, backoff_limit: int
) -> tuple[Decision, Reason | None]:
    """What to do with a rank whose pod failed, and why it fails if it does. `restarts` counts the job's
    restarts so far; a pod that failed without an exit code (evicted, lost) counts as infrastructure."""
    if policy == RestartPolicy.NEVER:
        return Decision.FAIL, Reason.FAILED
    if policy == RestartPolicy.EXIT_CODE and exit_code is not None and not 128 <= exit_code <= 255:
        return Decision.FAIL, Reason.FAILED
    if restarts >= backoff_limit:
        return Decision.FAIL, Reason.BACKOFF_LIMIT
    return Decision.RESTART, None


@dataclass(frozen=True)
class ObservedPod:
    name: str
    role: Role
    index: int
    phase: str
    ready: bool
    deleting: bool
    exit_code: int | None
    message: str

    @classmethod
    def from_pod(cls, pod: dict[str, Any]) -> ObservedPod | None:
        """None for a pod without valid rank labels (not ours to manage)."""
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        try:
            role = Role(labels.get(LABEL_ROLE, ""))
            index = int(labels.get(LABEL_INDEX, ""))
        except ValueError:
            return None
        status = pod.get("status") or {}
        statuses = status.get("containerStatuses") or []
        exit_code, message = None, ""
        for cs in statuses:
            term = (cs.get("state") or {}).get("terminated")
            if term and term.get("exitCode", 0) != 0:
                exit_code = int(term["exitCode"])
                message = term.get("reason") or ""
                break
        if exit_code is None and status.get("phase") == "Failed":
            message = status.get("reason") or status.get("message") or ""
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        return cls(
            name=meta.get("name", ""),
            role=role,
            index=index,
            phase=status.get("phase") or "Pending",
            ready=ready,
            deleting=bool(meta.get("deletionTimestamp")),
            exit_code=exit_code,
            message=message,
        )


@dataclass
class Plan:
    create_pods: list[dict[str, Any]] = field(default_factory=list)
    delete_pods: list[str] = field(default_factory=list)
    create_service: bool = False
    status: TrainingJobStatus = field(default_factory=TrainingJobStatus)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)


ROLE_NAMES = {Role.WORKER: "worker", Role.PS: "parameter server"}


def _counts(pods: list[ObservedPod], role: Role) -> ReplicaStatus:
    mine = [p for p in pods if p.role == role and not p.deleting]
    return ReplicaStatus(
        active=sum(p.phase in ("Pending", "Running") for p in mine),
        ready=sum(p.ready and p.phase == "Running" for p in mine),
        succeeded=sum(p.phase == "Succeeded" for p in mine),
        failed=sum(p.phase == "Failed" for p in mine),
    )


def plan(job: TrainingJob, pods: list[dict[str, Any]], service_exists: bool, now: str) -> Plan:
    """The whole reconcile decision for one job at time `now` (RFC 3339)."""
    gen = int(job.metadata.get("generation", 0))
    old = job.status
    out = Plan(status=old.model_copy(deep=True))
    st = out.status
    st.observed_generation = gen
    observed = [p for p in (ObservedPod.from_pod(x) for x in pods) if p is not None]
    desired = desired_ranks(job)
    restarts = {r: (old.replica_statuses.get(r.value) or ReplicaStatus()).restarts for r in Role}

    def set_cond(kind: ConditionType, ok: bool, reason: str, message: str) -> None:
        before = st.conditions
        st.conditions = set_condition(st.conditions, kind, ok, reason, message, now, gen)
        if ok and st.conditions != before:
            out.events.append(("Warning" if kind == ConditionType.FAILED else "Normal", reason, message))

    def fail(reason: str, message: str) -> None:
        set_cond(ConditionType.FAILED, True, reason, message)
        st.phase = "Failed"

    def finish_counts() -> Plan:
        for role in Role:
            if job.replicas(role) is not None:
                st.replica_statuses[role.value] = _counts(observed, role).model_copy(
                    update={"restarts": restarts[role]}
                )
        ready = st.replica_statuses.get("worker", ReplicaStatus()).ready
        st.workers = f"{ready}/{job.spec.workers.replicas}"
        return out

    def clean_pods() -> None:
        policy = job.spec.run_policy.clean_pod_policy
        for p in observed:
            if p.deleting or p.name in out.delete_pods:
                continue
            if policy == CleanPodPolicy.ALL or (policy == CleanPodPolicy.RUNNING and p.phase in ("Pending", "Running")):
                out.delete_pods.append(p.name)

    if finished(st.conditions):
        clean_pods()
        return finish_counts()

    try:
        validate(job)
    except InvalidTemplate as e:
        fail(Reason.INVALID_SPEC, str(e))
        return finish_counts()

    if not any(c.type == ConditionType.CREATED for c in st.conditions):
        set_cond(ConditionType.CREATED, True, Reason.CREATED, f"TrainingJob {job.name} is created")
    if not st.start_time:
        st.start_time = now

    if job.spec.run_policy.suspend:
        out.delete_pods = [p.name for p in observed if not p.deleting]
        set_cond(ConditionType.SUSPENDED, True, Reason.SUSPENDED, "the job is suspended; its pods are deleted")
        set_cond(ConditionType.RUNNING, False, Reason.SUSPENDED, "the job is suspended")
        st.phase = "Suspended"
        return finish_counts()
    if any(c.type == ConditionType.SUSPENDED and c.status == "True" for c in st.conditions):
        set_cond(ConditionType.SUSPENDED, False, Reason.RESUMED, "the job is resumed")

    out.create_service = not service_exists
    by_rank: dict[tuple[Role, int], list[ObservedPod]] = {}
    for p in observed:
        by_rank.setdefault((p.role, p.index), []).append(p)
    wanted = set(desired)
    out.delete_pods += [p.name for p in observed if (p.role, p.index) not in wanted and not p.deleting]

    restarting: list[str] = []
    for role, index in desired:
        present = [p for p in by_rank.get((role, index), []) if not p.deleting]
        if not present:
            if not by_rank.get((role, index)):  # a terminating pod still holds the name: wait for it
                out.create_pods.append(build_pod(job, role, index))
            continue
        pod = present[0]
        spec = job.replicas(role)
        assert spec is not None
        if pod.phase == "Failed":
            what = f"{ROLE_NAMES[role]} {index} (pod {pod.name}) failed"
            what += f" with exit code {pod.exit_code}" if pod.exit_code is not None else f": {pod.message or 'unknown'}"
            limit = job.spec.run_policy.backoff_limit
            decision, reason = decide_restart(spec.restart_policy, pod.exit_code, sum(restarts.values()), limit)
            if decision == Decision.FAIL:
                detail = f"; backoffLimit {limit} reached" if reason == Reason.BACKOFF_LIMIT else ""
                fail(reason or Reason.FAILED, what + detail)
            else:
                restarts[role] += 1
                out.delete_pods.append(pod.name)
                restarting.append(f"{what}; restarting it (restart {sum(restarts.values())})")
        elif pod.phase == "Succeeded" and spec.restart_policy == RestartPolicy.ALWAYS and role == Role.PS:
            restarts[role] += 1
            out.delete_pods.append(pod.name)
            restarting.append(f"{ROLE_NAMES[role]} {index} exited; restartPolicy Always restarts it")

    if st.phase == "Failed":
        clean_pods()
        return finish_counts()

    workers_done = all(
        any(p.phase == "Succeeded" and not p.deleting for p in by_rank.get((Role.WORKER, i), []))
        for i in range(job.spec.workers.replicas)
    )
    if workers_done:
        set_cond(ConditionType.SUCCEEDED, True, Reason.SUCCEEDED, f"all {job.spec.workers.replicas} workers succeeded")
        st.phase = "Succeeded"
        st.completion_time = now
        clean_pods()
        return finish_counts()
    if restarting:
        set_cond(ConditionType.RESTARTING, True, Reason.RESTARTING, "; ".join(restarting))
        st.phase = "Restarting"
        return finish_counts()
    all_running = all(
        any(p.phase in ("Running", "Succeeded") and not p.deleting for p in by_rank.get(rank, [])) for rank in desired
    )
    if all_running:
        set_cond(ConditionType.RUNNING, True, Reason.RUNNING, "all ranks are running")
        st.phase = "Running"
    elif st.phase not in ("Running", "Restarting"):
        st.phase = "Pending"
    return finish_counts()
