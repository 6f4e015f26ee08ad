"""Level-based reconcile, pure: from the job and the pods that exist, decide what to create and delete and
what the status is. The I/O layer applies the plan; running it twice on the same input gives the same plan.

Pods are bucketed by their rank labels; a pod being deleted still occupies its name, so its replacement is
created only once it is gone. Each pod carries the attempt it was created for (the rank's restart count at
the time); status.ranks remembers every rank's restarts, so a failure is counted exactly once however often
the operator stops between writing the count and deleting the pod. Restart decisions are in `failures`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from . import admission, gangs
from .api import (
    KIND,
    CleanPodPolicy,
    ConditionType,
    RankStatus,
    ReplicaStatus,
    RestartPolicy,
    Role,
    TrainingJob,
    TrainingJobStatus,
)
from .builders import (
    ANNOTATION_ATTEMPT,
    ANNOTATION_WORKERS,
    DEFAULT_MAX_RANKS,
    LABEL_INDEX,
    LABEL_JOB,
    LABEL_ROLE,
    InvalidTemplate,
    build_pod,
    build_pod_group,
    desired_ranks,
    pod_name,
    rank_key,
    validate,
)
from .conditions import TERMINAL, Reason, finished, set_condition
from .failures import RESTART_REASONS, Decision, Failure, Kind, backoff_seconds, classify, decide_restart

# Gated pods that do not fit are looked at again this often (and at once when a job of this operator frees room).
ADMISSION_RETRY_SECONDS = 5.0
# A pod still terminating this long after its grace period ended sits on a node that no longer answers (a
# live kubelet would have confirmed the deletion): remove it so the rank's name is free for its replacement.
FORCE_DELETE_AFTER_SECONDS = 30.0


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)


def format_time(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class ObservedPod:
    name: str
    role: Role
    index: int
    phase: str
    ready: bool
    exit_code: int | None
    reason: str  # pod.status.reason, else the failing container's terminated reason
    disruption: str  # the DisruptionTarget condition's reason, when Kubernetes set one
    attempt: int | None  # None for a pod made before attempts were recorded: taken as the current one
    workers: int | None  # the world it was made for; None for a pod made before worlds were recorded
    deletion_deadline: str | None  # metadata.deletionTimestamp: set once the pod is being deleted

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
        annotations = meta.get("annotations") or {}
        try:
            attempt: int | None = int(annotations[ANNOTATION_ATTEMPT])
        except (KeyError, ValueError):
            attempt = None
        try:
            workers: int | None = int(annotations[ANNOTATION_WORKERS])
        except (KeyError, ValueError):
            workers = None
        status = pod.get("status") or {}
        exit_code, reason = None, ""
        for cs in status.get("containerStatuses") or []:
            term = (cs.get("state") or {}).get("terminated")
            if term and term.get("exitCode", 0) != 0:
                exit_code = int(term["exitCode"])
                reason = term.get("reason") or ""
                break
        conditions = status.get("conditions") or []
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        disruption = next(
            (
                c.get("reason") or ""
                for c in conditions
                if c.get("type") == "DisruptionTarget" and c.get("status") == "True"
            ),
            "",
        )
        return cls(
            name=meta.get("name", ""),
            role=role,
            index=index,
            phase=status.get("phase") or "Pending",
            ready=ready,
            exit_code=exit_code,
            reason=status.get("reason") or reason,
            disruption=disruption,
            attempt=attempt,
            workers=workers,
            deletion_deadline=meta.get("deletionTimestamp"),
        )

    @property
    def deleting(self) -> bool:
        return self.deletion_deadline is not None

    def failure(self) -> Failure:
        return classify(self.exit_code, self.reason, self.disruption)


FOREIGN_PODS_NAMED = 5  # pods named in the event about foreign pods; the rest are counted


def own_ranks(job: TrainingJob, pods: list[dict[str, Any]]) -> tuple[list[ObservedPod], list[str]]:
    """The job's ranks among `pods` (the pods carrying its job label), and the names of the others.

    A rank is a pod with valid rank labels whose controller is this job (by UID) and whose name is that rank's
    name. A pod that only carries the labels (made by hand, by another controller) is never counted, restarted
    or deleted: two such pods marked Succeeded must not finish the job."""
    uid = str(job.metadata.get("uid", ""))
    ranks, foreign = [], []
    for pod in pods:
        meta = pod.get("metadata") or {}
        rank = ObservedPod.from_pod(pod)
        controlled = any(
            o.get("controller") and o.get("kind") == KIND and o.get("uid") == uid
            for o in meta.get("ownerReferences") or []
        )
        if rank is not None and controlled and rank.name == pod_name(job.name, rank.role, rank.index):
            ranks.append(rank)
        else:
            foreign.append(str(meta.get("name", "")))
    return ranks, sorted(foreign)


def foreign_pods_message(names: list[str]) -> str:
    """The Warning event's message for pods carrying a job's labels that are not its ranks (a few named)."""
    shown = ", ".join(names[:FOREIGN_PODS_NAMED])
    more = f" and {len(names) - FOREIGN_PODS_NAMED} more" if len(names) > FOREIGN_PODS_NAMED else ""
    return (
        f"{len(names)} pods carry this job's labels but are not its ranks (not controlled by it, or not named as "
        f"one); ignored: {shown}{more}"
    )


@dataclass
class Plan:
    create_pods: list[dict[str, Any]] = field(default_factory=list)
    delete_pods: list[str] = field(default_factory=list)
    create_service: bool = False
    status: TrainingJobStatus = field(default_factory=TrainingJobStatus)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    force_delete_pods: list[str] = field(default_factory=list)  # stuck terminating on a lost node
    requeue_after: float | None = None  # seconds until the next timed decision (a back-off, deadline, TTL)
    delete_job: bool = False  # ttlSecondsAfterFinished has run out: delete the job (its pods go with it)
    ungate_pods: list[str] = field(default_factory=list)  # gang admitted: lift the gate from these pods
    waiting_for_room: bool = False  # gated pods wait for room; a round is due when others free some
    pod_group: dict[str, Any] | None = None  # the gang scheduler's PodGroup, created before the pods
    foreign_pods: list[str] = field(default_factory=list)  # carry the job's labels, are not its ranks: ignored


ROLE_NAMES = {Role.WORKER: "worker", Role.PS: "parameter server"}


def _counts(pods: list[ObservedPod], role: Role) -> ReplicaStatus:
    mine = [p for p in pods if p.role == role and not p.deleting]
    return ReplicaStatus(
        active=sum(p.phase in ("Pending", "Running") for p in mine),
        ready=sum(p.ready and p.phase == "Running" for p in mine),
        succeeded=sum(p.phase == "Succeeded" for p in mine),
        failed=sum(p.phase == "Failed" for p in mine),
    )


def earlier_job_leftovers(job_uid: str, objects: list[dict[str, Any]]) -> list[str]:
    """Names of the pods and Service among `objects` that a deleted TrainingJob of the same name still owns.

    Deleting a job leaves its pods and Service to the garbage collector, which removes them shortly after;
    a job created again under the same name meanwhile would take the old, finished pods for its own (and be
    Succeeded at once) and find every name it creates taken. Its round waits until these are gone."""
    out = []
    for obj in objects:
        meta = obj.get("metadata") or {}
        owners = [o for o in meta.get("ownerReferences") or [] if o.get("kind") == KIND]
        if owners and all(o.get("uid") != job_uid for o in owners):
            out.append(str(meta.get("name", "")))
    return out


def plan(
    job: TrainingJob,
    pods: list[dict[str, Any]],
    service_exists: bool,
    now: str,
    cluster: admission.Cluster | None = None,
    max_ranks: int = DEFAULT_MAX_RANKS,
) -> Plan:
    """The whole reconcile decision for one job at time `now` (RFC 3339). `cluster` (every Node and pod) is
    needed only while some of the job's pods carry the gang gate; without it they stay gated. A job with more
    than `max_ranks` pods fails as an invalid spec."""
    gen = int(job.metadata.get("generation", 0))
    old = job.status
    out = Plan(status=old.model_copy(deep=True))
    st = out.status
    st.observed_generation = gen
    observed, out.foreign_pods = own_ranks(job, pods)
    workers = job.spec.workers.replicas
    restarts = {r: (old.replica_statuses.get(r.value) or ReplicaStatus()).restarts for r in Role}

    def set_cond(kind: ConditionType, ok: bool, reason: str, message: str) -> None:
        before = st.conditions
        st.conditions = set_condition(st.conditions, kind, ok, reason, message, now, gen)
        # A restart has its own event per rank (see count), so the Restarting condition adds none.
        if ok and st.conditions != before and kind != ConditionType.RESTARTING:
            out.events.append(("Warning" if kind == ConditionType.FAILED else "Normal", reason, message))

    def fail(reason: str, message: str) -> None:
        set_cond(ConditionType.FAILED, True, reason, message)
        st.phase = "Failed"
        st.completion_time = now

    now_t = parse_time(now)

    def wait_for(moment: datetime) -> None:
        seconds = (moment - now_t).total_seconds()
        out.requeue_after = seconds if out.requeue_after is None else min(out.requeue_after, seconds)

    def finish_counts() -> Plan:
        for role in Role:
            if job.replicas(role) is not None:
                st.replica_statuses[role.value] = _counts(observed, role).model_copy(
                    update={"restarts": restarts[role]}
                )
        ready = st.replica_statuses.get("worker", ReplicaStatus()).ready
        st.workers = f"{ready}/{job.spec.workers.replicas}"
        st.replicas = sum(
            p.role == Role.WORKER and not p.deleting and p.name not in out.delete_pods and p.workers in (None, workers)
            for p in observed
        )
        st.selector = f"{LABEL_JOB}={job.name},{LABEL_ROLE}={Role.WORKER.value}"
        expire_after_ttl()
        return out

    def expire_after_ttl() -> None:
        """runPolicy.ttlSecondsAfterFinished: a job finished before this round is deleted once its TTL has run
        out, else a round is asked for then. One that finishes in this round is not deleted yet (its status and
        events are written first) but asks for that round too: nothing else would bring it, since a finished
        job's pods may never change again."""
        ttl = job.spec.run_policy.ttl_seconds_after_finished
        if ttl is None or not finished(st.conditions):
            return
        ended = st.completion_time or next(
            (c.last_transition_time for c in st.conditions if c.status == "True" and c.type in TERMINAL), None
        )
        if not ended:
            return
        expires = parse_time(ended) + timedelta(seconds=ttl)
        if finished(old.conditions) and now_t >= expires:
            out.delete_job = True
        else:
            wait_for(expires)

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
        validate(job, max_ranks)
    except InvalidTemplate as e:
        fail(Reason.INVALID_SPEC, str(e))
        return finish_counts()
    desired = desired_ranks(job)  # after validate: a job over the cap is refused without listing its ranks

    if not any(c.type == ConditionType.CREATED for c in st.conditions):
        set_cond(ConditionType.CREATED, True, Reason.CREATED, f"TrainingJob {job.name} is created")
    if job.spec.run_policy.suspend:
        out.delete_pods = [p.name for p in observed if not p.deleting]
        for rank in st.ranks.values():  # the operator deletes these pods: their going is no failure
            rank.pod_seen = False
        set_cond(ConditionType.SUSPENDED, True, Reason.SUSPENDED, "the job is suspended; its pods are deleted")
        set_cond(ConditionType.RUNNING, False, Reason.SUSPENDED, "the job is suspended")
        st.phase = "Suspended"
        # As for a batch Job: the start time (and with it the activeDeadlineSeconds clock) begins again on resume.
        st.start_time = None
        return finish_counts()
    if any(c.type == ConditionType.SUSPENDED and c.status == "True" for c in st.conditions):
        set_cond(ConditionType.SUSPENDED, False, Reason.RESUMED, "the job is resumed")
        out.events.append(("Normal", Reason.RESUMED, "the job is resumed: its pods are created again"))
    if not st.start_time:
        st.start_time = now

    deadline_seconds = job.spec.run_policy.active_deadline_seconds
    if deadline_seconds is not None:
        deadline = parse_time(st.start_time) + timedelta(seconds=deadline_seconds)
        if now_t >= deadline:
            fail(
                Reason.DEADLINE_EXCEEDED,
                f"the job ran longer than runPolicy.activeDeadlineSeconds ({deadline_seconds} s)",
            )
            # Stop the ranks whatever cleanPodPolicy says: a job past its deadline must not hold resources.
            out.delete_pods = [p.name for p in observed if not p.deleting and p.phase in ("Pending", "Running")]
            clean_pods()
            return finish_counts()
        wait_for(deadline)

    out.create_service = not service_exists
    # A resized job (kubectl scale) re-forms: every worker of the old world goes, not counted as a failure, and
    # the new world starts together from the latest checkpoint (the trainer reads its size from the env).
    old_world = sorted(
        {p.workers for p in observed if p.role == Role.WORKER and not p.deleting and p.workers not in (None, workers)}
    )
    if old_world:
        resized = [p for p in observed if p.role == Role.WORKER and not p.deleting]
        out.delete_pods += [p.name for p in resized]
        for p in resized:
            st.ranks.setdefault(rank_key(p.role, p.index), RankStatus()).pod_seen = False
        message = (
            f"workers {old_world[-1]} -> {workers}: every worker restarts at the new world size and resumes from "
            "the latest checkpoint"
        )
        set_cond(ConditionType.RESTARTING, True, Reason.RESIZED, message)
        out.events.append(("Normal", Reason.RESIZED, message))
        st.phase = "Restarting"
        # From here on they count as going (as they will be once the deletions land).
        observed = [replace(p, deletion_deadline=now) if p in resized else p for p in observed]
    by_rank: dict[tuple[Role, int], list[ObservedPod]] = {}
    for p in observed:
        by_rank.setdefault((p.role, p.index), []).append(p)
    wanted = set(desired)
    out.delete_pods += [p.name for p in observed if (p.role, p.index) not in wanted and not p.deleting]
    for key in [k for k in st.ranks if k not in {rank_key(r, i) for r, i in desired}]:
        del st.ranks[key]  # a rank the job no longer has (scaled down)

    backoff = job.spec.run_policy.restart_backoff
    limit = job.spec.run_policy.backoff_limit
    restarting: list[tuple[str, str]] = []  # (condition reason, message) of the restarts decided now

    def count(role: Role, index: int, rank: RankStatus, pod_name: str, failure: Failure) -> bool:
        """Count the failure of the rank's current attempt; True when the rank is to be restarted."""
        spec = job.replicas(role)
        assert spec is not None
        what = f"{ROLE_NAMES[role]} {index} (pod {pod_name}) {failure.describe()}"
        total = sum(restarts.values())
        decision, reason = decide_restart(spec.restart_policy, failure, total, limit)
        if decision == Decision.FAIL:
            fail(
                reason or Reason.FAILED,
                what + (f"; backoffLimit {limit} reached" if reason == Reason.BACKOFF_LIMIT else ""),
            )
            return False
        restarts[role] += 1
        rank.restarts += 1
        delay = backoff_seconds(rank.restarts, backoff.base_seconds, backoff.cap_seconds)
        # `now` carries whole seconds (truncated, as status times do): one second more makes the wait at least
        # `delay` from the moment the failure was seen.
        after = now_t + timedelta(seconds=math.ceil(delay) + 1)
        rank.pod_seen = False
        rank.restart_after = format_time(after)
        rank.last_reason = RESTART_REASONS[failure.kind]
        rank.last_message = what
        rank.last_exit_code = failure.exit_code
        note = (
            f"{what}; restarting it in {math.ceil(delay)} s (restart {rank.restarts} of this rank, "
            f"{total + 1} of backoffLimit {limit})"
        )
        restarting.append((rank.last_reason, note))
        out.events.append(("Warning", rank.last_reason, note))
        wait_for(after)
        return True

    def failed_waiting(verdict: admission.Verdict) -> bool:
        """Record that the gated pods wait for room; True when runPolicy.schedulingTimeoutSeconds ran out and
        the job failed."""
        reason = Reason.UNSCHEDULABLE if verdict.never else Reason.WAITING_FOR_CAPACITY
        before = next((c for c in st.conditions if c.type == ConditionType.ADMITTED), None)
        set_cond(ConditionType.ADMITTED, False, reason, verdict.message)
        if before is None or (before.status, before.reason) != ("False", reason):
            out.events.append(("Warning", reason, verdict.message))
        out.waiting_for_room = True
        since = parse_time(
            next(c.last_transition_time for c in st.conditions if c.type == ConditionType.ADMITTED) or now
        )
        timeout = job.spec.run_policy.scheduling_timeout_seconds
        if timeout is not None and now_t >= since + timedelta(seconds=timeout):
            fail(
                reason,
                f"the pods found no room to run together within runPolicy.schedulingTimeoutSeconds ({timeout} s): "
                + verdict.message,
            )
            return True
        retry = now_t + timedelta(seconds=ADMISSION_RETRY_SECONDS)
        wait_for(retry if timeout is None else min(retry, since + timedelta(seconds=timeout)))
        return False

    for role, index in desired:
        spec = job.replicas(role)
        assert spec is not None
        rank = st.ranks.setdefault(rank_key(role, index), RankStatus())
        mine = by_rank.get((role, index), [])
        live = [p for p in mine if not p.deleting]
        if live:
            pod = live[0]
            if pod.attempt is not None and pod.attempt < rank.restarts:
                out.delete_pods.append(pod.name)  # counted already; the operator stopped before deleting it
                continue
            rank.pod_seen = True
            if pod.phase == "Failed":
                failure = pod.failure()
            elif pod.phase == "Succeeded" and role == Role.PS and spec.restart_policy == RestartPolicy.ALWAYS:
                failure = Failure(Kind.EXITED)
            else:
                continue
            if count(role, index, rank, pod.name, failure):
                out.delete_pods.append(pod.name)
        elif mine:  # only a terminating pod holds the name
            pod = mine[0]
            if rank.pod_seen and (pod.attempt is None or pod.attempt >= rank.restarts):
                # Deleted by someone else (eviction, node loss, a person): count it now, while its reason shows.
                f = pod.failure()
                count(
                    role,
                    index,
                    rank,
                    pod.name,
                    f if f.kind != Kind.EXIT else Failure(Kind.DELETED, f.exit_code, f.detail),
                )
            if pod.deletion_deadline:
                stuck = parse_time(pod.deletion_deadline) + timedelta(seconds=FORCE_DELETE_AFTER_SECONDS)
                if now_t >= stuck:
                    out.force_delete_pods.append(pod.name)
                else:
                    wait_for(stuck)
        elif rank.pod_seen:  # the pod vanished while the operator was not looking
            count(role, index, rank, pod_name(job.name, role, index), Failure(Kind.DELETED, None, "pod disappeared"))
        elif rank.restart_after and (after := parse_time(rank.restart_after)) > now_t:
            wait_for(after)
        else:
            out.create_pods.append(build_pod(job, role, index, attempt=rank.restarts))

    if st.phase == "Failed":
        clean_pods()
        return finish_counts()

    if out.create_pods and gangs.gang_scheduler(job) is not None:
        out.pod_group = build_pod_group(job)
    staying = {p.name for p in observed if not p.deleting} - set(out.delete_pods)
    going = {p.name for p in observed} - staying
    gated = [x for x in pods if admission.gated(x) and (x.get("metadata") or {}).get("name") in staying]
    every_rank_has_a_pod = not out.create_pods and all(
        any(p.name not in going for p in by_rank.get(rank, [])) for rank in desired
    )
    if gated and every_rank_has_a_pod and cluster is not None:
        verdict = admission.admit([x["spec"] for x in gated], cluster.nodes, cluster.pods)
        if verdict.fits:
            out.ungate_pods = sorted(x["metadata"]["name"] for x in gated)
            set_cond(
                ConditionType.ADMITTED,
                True,
                Reason.ADMITTED,
                f"{len(gated)} pods fit the cluster's free room together: released to the scheduler",
            )
        elif failed_waiting(verdict):
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
        set_cond(ConditionType.RESTARTING, True, restarting[0][0], "; ".join(note for _, note in restarting))
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
