"""`ringleader diagnose`: a job's conditions, events, exit codes and pod states turned into what happened and what
to do next. Pure: each rule reads a `JobState` and says zero or more `Finding`s; the tests run every rule on job
states recorded from real jobs (tests/unit/cli/states/).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ringleader_api import ConditionType, JobPhase, Reason, rank_entries

from . import jobfacts as facts
from .jobfacts import EXIT_CODES
from .jobstate import JobState, rank_of_pod
from .logmerge import rank_order

PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                          "RegistryUnavailable"})  # fmt: skip


@dataclass(frozen=True)
class Finding:
    rule: str  # which rule (a stable id: oom-killed, image-pull, ...)
    severity: str  # error (why it failed or cannot run), warning (it recovers, but look), info
    what: str  # one line: what happened
    detail: str = ""  # the evidence, as Kubernetes or the operator said it
    next: str = ""  # what to do


@dataclass
class Diagnosis:
    job: str
    phase: str
    headline: str
    findings: list[Finding] = field(default_factory=list)

    def text(self) -> str:
        marks = {"error": "x", "warning": "!", "info": "-"}
        lines = [self.headline]
        for f in self.findings:
            lines.append(f"{marks.get(f.severity, '-')} {f.what}")
            if f.detail:
                lines.append(f"    {f.detail}")
            if f.next:
                lines.append(f"    next: {f.next}")
        return "\n".join(lines)


def diagnose(state: JobState) -> Diagnosis:
    status = state.job.get("status") or {}
    phase = status.get("phase") or "Pending"
    ended = facts.condition(state, ConditionType.FAILED) or facts.condition(state, ConditionType.SUCCEEDED)
    because = f" ({ended['reason']})" if ended and ended.get("status") == "True" and ended.get("reason") else ""
    findings = [f for rule in RULES for f in rule(state)]
    if not findings:
        findings = [_healthy(state, phase)]
    return Diagnosis(state.name, phase, f"{state.name}: {phase}{because}", findings)


# --- rules ------------------------------------------------------------------------------------------------------


def _failed_by(reason: Reason, rule: str, what: str, next_step: str) -> Callable[[JobState], list[Finding]]:
    """The rule for a job the operator failed with `reason`: an error saying `what`, the condition's message as the
    evidence, and `next_step`."""

    def found(state: JobState) -> list[Finding]:
        failed = facts.true_condition(state, ConditionType.FAILED)
        if failed is None or failed.get("reason") != reason:
            return []
        return [Finding(rule, "error", what, failed.get("message", ""), next_step)]

    found.__name__ = rule.replace("-", "_")
    return found


invalid_spec = _failed_by(
    Reason.INVALID_SPEC, "invalid-spec", "the operator refused the spec; no pod was made",
    "fix the field it names, then delete the job and submit it again",
)  # fmt: skip
deadline = _failed_by(
    Reason.DEADLINE_EXCEEDED, "deadline", "the job ran past runPolicy.activeDeadlineSeconds",
    "raise activeDeadlineSeconds, or train fewer steps",
)  # fmt: skip
backoff_limit = _failed_by(
    Reason.BACKOFF_LIMIT, "backoff-limit", "the job used up its restarts (runPolicy.backoffLimit)",
    "the exit codes above say why the ranks failed; fix that first",
)  # fmt: skip
failure_rule = _failed_by(
    Reason.FAILURE_RULE, "failure-rule", "a failure rule of the job failed it at once (action FailJob)",
    "the rule and the ending it matched are named above",
)  # fmt: skip


def oom_killed(state: JobState) -> list[Finding]:
    ranks = facts.ranks_where(state, lambda c: c.get("reason") == "OOMKilled", lambda m: "OOMKilled" in m)
    if not ranks:
        return []
    limit = facts.memory_limit(state)
    has = f"its memory limit is {limit}" if limit else "it has no memory limit of its own (the node's memory ran out)"
    return [
        Finding(
            "oom-killed",
            "error",
            f"{facts.names(ranks)} {'was' if len(ranks) == 1 else 'were'} killed for using more memory than allowed",
            has,
            "raise resources.limits.memory of the trainer container in spec.workers.template (with requests to match), "
            "or use less memory per rank: a smaller batch, a smaller model, more ranks",
        )
    ]


def evicted(state: JobState) -> list[Finding]:
    events = facts.operator_events(state, Reason.EVICTED)
    pods = [p for p in state.pods if (p.get("status") or {}).get("reason") == "Evicted"]
    if not events and not pods:
        return []
    detail = (pods[0].get("status") or {}).get("message", "") if pods else events[-1].get("message", "")
    return [
        Finding(
            "evicted",
            "warning",
            f"{facts.count(len(events) or len(pods), 'pod')} of the job evicted",
            detail,
            "evicted ranks are recreated without counting against backoffLimit; if the node was short of memory or "
            "disk, give the trainer requests equal to its limits (Guaranteed QoS) so others are evicted first",
        )
    ]


def node_lost(state: JobState) -> list[Finding]:
    events = facts.operator_events(state, Reason.NODE_LOST)
    if not events:
        return []
    return [
        Finding(
            "node-lost",
            "warning",
            f"{facts.count(len(events), 'rank')} lost with {'its' if len(events) == 1 else 'their'} node",
            events[-1].get("message", ""),
            "the ranks are recreated on other nodes (not counted against backoffLimit); if it repeats, look at the "
            "node: kubectl describe node",
        )
    ]


def image_pull(state: JobState) -> list[Finding]:
    stuck: dict[str, tuple[str, str]] = {}
    for pod in state.pods:
        for cs in facts.container_statuses(pod):
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in PULL_REASONS:
                stuck[rank_of_pod(pod)] = (cs.get("image", ""), f"{waiting['reason']}: {waiting.get('message', '')}")
    if not stuck:
        return []
    image, detail = next(iter(stuck.values()))
    return [
        Finding(
            "image-pull",
            "error",
            f"{facts.names(list(stuck))} cannot pull image {image}",
            detail.strip(": "),
            "check the image name and tag, that the nodes can reach the registry, and imagePullSecrets in the pod "
            "template",
        )
    ]


def unschedulable(state: JobState) -> list[Finding]:
    admitted = facts.condition(state, ConditionType.ADMITTED)
    if admitted is not None and admitted.get("status") == "False" and not facts.ended(state):
        if admitted.get("reason") == Reason.UNSCHEDULABLE:
            return [
                Finding(
                    "unschedulable",
                    "error",
                    "the job does not fit the cluster even when it is empty",
                    admitted.get("message", ""),
                    "lower replicas, or the GPUs, CPU or memory per pod, or add nodes with what is short; "
                    "runPolicy.schedulingTimeoutSeconds bounds the wait",
                )
            ]
        return [
            Finding(
                "waiting-for-capacity",
                "warning",
                "the job waits for room to run all its ranks at once",
                admitted.get("message", ""),
                "it starts when other pods free the room; lower replicas to start sooner",
            )
        ]
    failed = facts.true_condition(state, ConditionType.FAILED)
    if failed is not None and failed.get("reason") == Reason.UNSCHEDULABLE:
        return [
            Finding(
                "unschedulable",
                "error",
                "the job never fitted the cluster within its scheduling timeout",
                failed.get("message", ""),
                "lower what it asks for, or add nodes with what is short",
            )
        ]
    pending = [
        (rank_of_pod(p), c.get("message", ""))
        for p in state.pods for c in (p.get("status") or {}).get("conditions") or []
        if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
    ]  # fmt: skip
    if not pending or facts.ended(state):
        return []
    return [
        Finding(
            "unschedulable",
            "warning",
            f"{facts.names([r for r, _ in pending])} not scheduled",
            pending[0][1],
            "the scheduler's message says what is short (resources, taints, node selectors)",
        )
    ]


def exit_codes(state: JobState) -> list[Finding]:
    """Ranks whose program exited with an error: the last exit code the operator recorded for each rank, and the
    exit codes of pods that ended, grouped by code (OOMKilled is its own rule)."""
    by_code: dict[int, set[str]] = {}
    for rank, info in rank_entries((state.job.get("status") or {}).get("ranks") or {}).items():
        code = info.get("lastExitCode")
        if code and code != 202 and "OOMKilled" not in (info.get("lastMessage") or ""):
            by_code.setdefault(int(code), set()).add(rank)
    for pod in state.pods:
        for cs in facts.container_statuses(pod):
            term = (cs.get("state") or {}).get("terminated") or {}
            if term.get("exitCode") and term.get("reason") != "OOMKilled" and term["exitCode"] != 202:
                by_code.setdefault(int(term["exitCode"]), set()).add(rank_of_pod(pod))
    findings = []
    for code, ranks in sorted(by_code.items()):
        name, meaning = EXIT_CODES.get(code, ("", "the program's own exit code"))
        label = f" ({name})" if name else ""
        first = sorted(ranks, key=rank_order)[0]
        said = facts.last_line(state, first)
        findings.append(Finding(
            f"exit-{code}" if name else "exit-code", "error" if facts.failed_by_ranks(state) else "warning",
            f"{facts.names(sorted(ranks, key=rank_order))} exited with code {code}{label}",
            meaning + (f"; {first}'s last line: {said}" if said else ""), _exit_next(state, code, first),
        ))  # fmt: skip
    return findings


def stalled(state: JobState) -> list[Finding]:
    cond = facts.true_condition(state, ConditionType.STALLED)
    failed = facts.true_condition(state, ConditionType.FAILED)
    if cond is None and not (failed and failed.get("reason") == Reason.STALL_LIMIT):
        return []
    message = (cond or failed or {}).get("message", "")
    culprit = re.search(r"(worker|ps|parameter server) (\d+)", message)
    rank = f"{'ps' if culprit and culprit.group(1) != 'worker' else 'worker'}-{culprit.group(2)}" if culprit else ""
    see = f"ringleader logs {state.name} --rank {rank}" if rank else f"ringleader logs {state.name}"
    return [
        Finding(
            "stalled",
            "error" if failed else "warning",
            "the job stopped making progress (Stalled)",
            message,
            f"read the rank that stopped first: {see}; a hang in the script or ranks calling different collectives; "
            "if checkpoints take longer than runPolicy.progressDeadlineSeconds, raise it",
        )
    ]


# What to do about the first failure of an incident, by its class (status.lastFailure; docs/operator.md).
CLASS_NEXT = {
    "Infrastructure": "not the program's doing: retried under runPolicy.failureBudgets.infrastructure (20 an hour by "
    "default, apart from backoffLimit); if it repeats on one node, look at it: kubectl describe node {node}",
    "UserCode": "the program's own error: read it with ringleader logs {job} --rank {rank}; the same exception three "
    "times in a row is not retried (failureBudgets.userCode.sameErrorLimit)",
    "Resources": "out of memory: raise the trainer container's memory limit (or the GPU's share), or use less per "
    "rank: a smaller batch, a smaller model, more ranks",
}


def failure_class(state: JobState) -> list[Finding]:
    """The first failure of the latest incident, as the operator named and classed it (status.lastFailure)."""
    last = (state.job.get("status") or {}).get("lastFailure")
    if not isinstance(last, dict) or last.get("class") not in CLASS_NEXT:
        return []
    kind, rank, node = str(last["class"]), str(last.get("rank", "")), str(last.get("node", ""))
    where = f" on node {node}" if node else ""
    at = f" at {last['time']}" if last.get("time") else ""
    return [
        Finding(
            "failure-class",
            "error" if facts.true_condition(state, ConditionType.FAILED) else "warning",
            f"{rank} failed first{where}{at}: {kind}",
            str(last.get("evidence", "")),
            CLASS_NEXT[kind].format(node=node or "NODE", job=state.name, rank=rank),
        )
    ]


def progress_unavailable(state: JobState) -> list[Finding]:
    """Stalled Unknown: the operator cannot read the job's progress, so its progress deadline is not acted on."""
    cond = facts.condition(state, ConditionType.STALLED)
    if cond is None or cond.get("status") != "Unknown":
        return []
    return [
        Finding(
            "progress-unavailable",
            "warning",
            "the job's progress cannot be read: runPolicy.progressDeadlineSeconds is not acted on",
            str(cond.get("message", "")),
            "serve the progress page (strategy.report, docs/trainer.md), or admit the operator's pods to port 9090 of "
            "the job's pods (docs/troubleshooting.md)",
        )
    ]


def straggler(state: JobState) -> list[Finding]:
    cond = facts.true_condition(state, ConditionType.STRAGGLER)
    if cond is None:
        return []
    return [
        Finding(
            "straggler",
            "warning",
            "a rank is much slower than its peers",
            cond.get("message", ""),
            "runPolicy.stragglerPolicy: Replace moves it to another node; look at the node it names",
        )
    ]


def suspended(state: JobState) -> list[Finding]:
    if (state.job.get("status") or {}).get("phase") != JobPhase.SUSPENDED:
        return []
    return [
        Finding(
            "suspended",
            "info",
            "the job is suspended (runPolicy.suspend): no pod runs",
            "",
            f"ringleader resume {state.name}",
        )
    ]


def pod_warnings(state: JobState) -> list[Finding]:
    """Warnings about the job's pods the rules above do not explain (a volume that does not mount, a sandbox that
    fails, a container that keeps crashing): the newest of each reason, while the job has not ended."""
    if facts.ended(state):
        return []
    covered = {"Failed", "BackOff", "FailedScheduling"}  # told by image-pull, exit codes and unschedulable
    newest: dict[str, dict[str, Any]] = {}
    for e in state.events:
        on_pod = (e.get("involvedObject") or {}).get("kind") == "Pod"
        if e.get("type") == "Warning" and on_pod and e.get("reason") not in covered:
            newest[str(e.get("reason"))] = e
    return [
        Finding("pod-warning", "warning", f"{(e.get('involvedObject') or {}).get('name')}: {reason}",
                e.get("message", ""), "kubectl describe pod shows the rest")
        for reason, e in newest.items()
    ]  # fmt: skip


RULES: tuple[Callable[[JobState], list[Finding]], ...] = (
    invalid_spec, oom_killed, image_pull, unschedulable, exit_codes, failure_class, stalled, progress_unavailable,
    straggler, deadline, backoff_limit, failure_rule, evicted, node_lost, suspended, pod_warnings,
)  # fmt: skip


# --- helpers ----------------------------------------------------------------------------------------------------


def _healthy(state: JobState, phase: str) -> Finding:
    progress = (state.job.get("status") or {}).get("progress") or {}
    step, total = progress.get("step"), progress.get("totalSteps")
    at = f" at step {step}" + (f" of {total}" if total else "") if step is not None else ""
    if phase == JobPhase.SUCCEEDED:
        return Finding("succeeded", "info", f"the job succeeded{at}")
    if phase == JobPhase.RUNNING:
        return Finding("running", "info", f"running{at}, nothing wrong found", "", f"ringleader watch {state.name}")
    return Finding("no-problem", "info", f"{phase}: nothing wrong found yet", "",
                   f"ringleader describe {state.name} shows each rank")  # fmt: skip


def _exit_next(state: JobState, code: int, rank: str) -> str:
    logs = f"ringleader logs {state.name} --rank {rank}"
    if code == 200:
        return (f"check that worker 0 runs ({logs.replace(rank, 'worker-0')}), that NetworkPolicies let the job's "
                "pods reach each other, and that cluster DNS resolves the job's Service")  # fmt: skip
    if code == 201:
        return f"another rank failed first: ringleader describe {state.name} shows which; then {logs}"
    if code == 2:
        return f"start the script as the examples do (python or torchrun with no options): {logs}"
    return f"its last lines say why: {logs}"
