"""Each rank, every round: create its pod, or count its pod's failure and restart it after its back-off.

Each pod carries the attempt it was created for (the rank's restarts and clean stops at the time);
status.ranks remembers both, so an ending is counted exactly once however often the operator stops between
writing the count and deleting the pod. A pod being deleted still holds its name, so its replacement is
created only once it is gone. Which failures restart a rank is in `failures`.

A pod someone else deletes (an eviction, a drain, a person) is counted while its reason shows, except when
the job checkpoints: then its trainer may be saving the step it stops at (trainer's lossless stop), and its
exit code decides, read once it has ended (or, when the pod is gone before a round saw that, from the last
state the watch delivered: `Round.gone`). Exit 202 is a clean stop: the rank is recreated and nothing is
counted. A pod still running past its grace period is counted as before.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any, Literal

from ringleader_api import ROLE_FIELDS, ROLE_NAMES, FailureCount, FailureRecord, RankStatus, Reason, Role, ranges

from ..budgets import INCIDENT_SECONDS, Budget, Step, budget, charge, escalate, same_incident
from ..builders import build_pod
from ..failures import RESTART_REASONS, Decision, Failure, Kind, backoff_seconds, decide, failure_class
from ..names import pod_name, rank_key
from ..observed import ObservedPod, format_time, parse_time
from ..rankbook import current, exited_under_always
from ..round_state import NOTHING_KNOWN, Event, RankKey, Round
from .goodput import note_lost_work

# A pod still terminating this long after its grace period ended sits on a node that no longer answers (a
# live kubelet would have confirmed the deletion): remove it so the rank's name is free for its replacement.
FORCE_DELETE_AFTER_SECONDS = 30.0
# An event message is cut at 1024 characters (by kopf, which posts them): the RankOutput note stays under it.
OUTPUT_EVENT_CHARACTERS = 1000


def reconcile_ranks(r: Round) -> None:
    """Look at every desired rank once (r.desired, r.by_rank must be set), or at those of them that may need it
    (Round.ranks_to_look_at: the others are settled, their decision would leave them as they are)."""
    for role, index in r.ranks_to_look_at():
        key = rank_key(role, index)
        rank = r.status.ranks.get(key) or NOTHING_KNOWN
        mine = r.by_rank.get((role, index), [])
        live = [p for p in mine if not p.deleting]
        if live:
            _watch(r, key, rank, live[0])
        elif mine:  # only a terminating pod holds the name
            _watch_going(r, key, rank, mine[0])
        elif rank.pod_seen:  # the pod vanished while the operator was not looking
            name = pod_name(r.job.name, role, index)
            last = r.gone.get(name)  # its last state, if the watch delivered its deletion lately
            if last is not None and current(rank, last):
                gone = _going_failure(last)
            else:
                gone = Failure(Kind.DELETED, None, "pod disappeared")
            count_failure(r, role, index, name, gone)
        elif rank.restart_after and (after := parse_time(rank.restart_after)) > r.at:
            r.wake_at(after)
        else:
            r.plan.create_pods.append(build_pod(r.job, role, index, attempt=rank.attempt, avoid_node=rank.avoid_node))


def _may_be_saving(r: Round, pod: ObservedPod, failure: Failure) -> bool:
    """A pod being deleted whose trainer may be writing the checkpoint of the step it stops at: the job
    checkpoints, the trainer has not ended, and its node still answers (a lost node's pod saves nothing)."""
    return r.job.spec.checkpoint is not None and not pod.ended and failure.kind != Kind.NODE_LOST


def _going_failure(pod: ObservedPod) -> Failure:
    """Why a pod someone else deleted went: its own exit code is no program error (it was told to go)."""
    f = pod.failure()
    return f if f.kind != Kind.EXIT else Failure(Kind.DELETED, f.exit_code, f.detail)


def _watch(r: Round, key: str, rank: RankStatus, pod: ObservedPod) -> None:
    """The rank's pod is there: a failed one (or a parameter server that exited under Always, or one whose
    container will not start) is counted."""
    if not current(rank, pod):
        if not r.planned_to_go(pod.name):  # counted already (or replaced with its gang just now)
            r.plan.delete_pods.append(pod.name)
        return
    if not rank.pod_seen:
        r.change_rank(key, pod_seen=True)
    if pod.phase == "Failed":
        failure = pod.failure()
        if pod.output.strip():
            r.plan.events.append(Event("Warning", Reason.RANK_OUTPUT, output_note(pod)))
    elif exited_under_always(r.job, pod):
        failure = Failure(Kind.EXITED)
    elif (not_started := pod.start_failure()) is not None:  # its image cannot be pulled: waiting will not help
        failure = not_started
    else:
        return
    if count_failure(r, pod.role, pod.index, pod.name, failure):
        r.plan.delete_pods.append(pod.name)


def output_note(pod: ObservedPod) -> str:
    """The RankOutput event's message: which attempt of which rank, then its last lines (the end of its
    termination message, cut at a line, to fit an event)."""
    head = f"{ROLE_NAMES[pod.role]} {pod.index} (pod {pod.name}) attempt {pod.attempt or 0} ended; its last lines:"
    tail = pod.output.rstrip("\n")[-(OUTPUT_EVENT_CHARACTERS - len(head)) :]
    if "\n" in tail and len(tail) < len(pod.output.rstrip("\n")):
        tail = tail.split("\n", 1)[1]  # no partial first line
    return f"{head}\n{tail}"


def _watch_going(r: Round, key: str, rank: RankStatus, pod: ObservedPod) -> None:
    """The rank's pod is being deleted. Deleted by someone else (eviction, node loss, a person): counted now,
    while its reason shows, or (a job that checkpoints) once its trainer has ended or its grace is over.
    Stuck past its grace on a lost node: removed for good."""
    if rank.pod_seen and current(rank, pod):
        failure = _going_failure(pod)
        deadline = parse_time(pod.deletion_deadline) if pod.deletion_deadline else r.at
        if _may_be_saving(r, pod, failure) and r.at < deadline:
            r.wake_at(deadline)  # its end (a pod event) or the deadline brings the next round
        else:
            count_failure(r, pod.role, pod.index, pod.name, failure)
    if pod.deletion_deadline:
        stuck = parse_time(pod.deletion_deadline) + timedelta(seconds=FORCE_DELETE_AFTER_SECONDS)
        if r.at >= stuck:
            r.plan.force_delete_pods.append(pod.name)
        else:
            r.wake_at(stuck)


def count_failure(r: Round, role: Role, index: int, pod: str, failure: Failure) -> bool:
    """Count the failure of the rank's current attempt against its class's budget (budgets.py) and name it
    (status.lastFailure); True when the rank is to be restarted (after its class's back-off), False when the job
    fails instead."""
    key = rank_key(role, index)
    rank = r.status.ranks.get(key) or NOTHING_KNOWN
    spec = r.job.replicas(role)
    assert spec is not None
    policy = r.job.spec.run_policy
    where = f" on node {failure.node}" if failure.node else ""
    what = f"{ROLE_NAMES[role]} {index} (pod {pod}{where}) {failure.describe()}"
    if failure.kind == Kind.STOPPED:  # it saved where it stopped: recreated at once, no restart counted
        note = f"{what}; recreating it (not counted against any failure budget)"
        replace_rank(r, key, failure, failure.describe(), None, note, "Normal", stops=rank.stops + 1)
        return True
    kind, evidence = failure_class(failure)
    classed = f", class {kind.value}" + (f": {evidence}" if evidence != failure.describe() else "")
    what += classed
    detail = failure.describe() + classed
    rules = spec.failure_rules
    limits = budget(policy, kind)
    ended = parse_time(failure.at) if failure.at else r.at
    counted = r.status.failures.get(kind.value)
    joins = same_incident(counted, ended, rank.last_replaced)
    count, over, exhausted = charge(counted, limits, failure.said.error, r.at, ended, joins)
    decision, reason, matched = decide(spec.restart_policy, failure, exhausted is not None, rules)
    rule = f"{ROLE_FIELDS[role]}.failureRules[{matched}]"
    by_rule = f"; {rule} ({rules[matched].action.value}) matched" if matched is not None else ""
    _name(r, FailureRecord(
        failure_class=kind, rank=key, pod=pod, node=failure.node, exit_code=failure.exit_code, evidence=evidence,
        time=failure.at or r.now,
    ))  # fmt: skip
    if decision == Decision.FAIL:
        r.status.failures[kind.value] = count
        if reason == Reason.BACKOFF_LIMIT:  # its class's budget is spent (decide says so with this reason)
            r.fail(exhausted or reason, f"{what}{by_rule}; {over}")
        else:
            r.fail(reason or Reason.FAILED, what + by_rule)
        return False
    if decision == Decision.IGNORE:
        _recreate_uncounted(r, key, failure, detail, f"{what}{by_rule}", limits)
        return True
    r.status.failures[kind.value] = count
    decision, escalated = _escalate(r, decision, ended, rank.last_replaced)
    if decision == Decision.FAIL:
        r.fail(Reason.ESCALATION_EXHAUSTED, f"{what}{by_rule}; {escalated}")
        return False
    _schedule_restart(r, (role, index), rank.restarts + 1, failure, detail, (what, by_rule), (limits, count),
                      decision == Decision.RESTART_GANG, escalated)  # fmt: skip
    return True


def _schedule_restart(
    r: Round, rank: RankKey, restarts: int, failure: Failure, detail: str, said: tuple[str, str],
    charged: tuple[Budget, FailureCount], gang: bool, escalated: str,
) -> None:  # fmt: skip
    """Replace `rank` (its `restarts`-th restart) after its class's back-off, with every other rank when `gang`;
    `said`: what happened and the rule that matched (or ""), `charged` the class's budget and its count now,
    `escalated` why a restart of the rank alone became more (or "")."""
    (what, by_rule), (limits, count) = said, charged
    r.restarts[rank[0]] += 1
    delay = backoff_seconds(restarts, limits.base_seconds, limits.cap_seconds)
    # `now` carries whole seconds (truncated, as status times do): one second more makes the wait at least
    # `delay` from the moment the failure was seen.
    after = r.after(math.ceil(delay) + 1)
    others = ", and every other rank with it," if gang else ""
    why = f"{escalated}; " if escalated else ""
    note = (
        f"{what}{by_rule}; restarting it{others} in {math.ceil(delay)} s ({why}restart {restarts} of this rank; "
        f"{limits.describe(count)})"
    )
    replace_rank(r, rank_key(*rank), failure, detail, after, note, "Warning", restarts=restarts)
    r.wake_at(after)
    if gang:
        _restart_gang(r, rank, what)


def _recreate_uncounted(r: Round, key: str, failure: Failure, detail: str, what: str, limits: Budget) -> None:
    """A failure a rule ignores: the rank is recreated after its class's back-off, nothing counted."""
    rank = r.status.ranks.get(key) or NOTHING_KNOWN
    uncounted = rank.uncounted + 1
    delay = backoff_seconds(uncounted, limits.base_seconds, limits.cap_seconds)
    after = r.after(math.ceil(delay) + 1)
    note = f"{what}: recreating it in {math.ceil(delay)} s (not counted against any failure budget)"
    replace_rank(r, key, failure, detail, after, note, "Normal", uncounted=uncounted)
    r.wake_at(after)


def _escalate(r: Round, decision: Decision, ended: datetime, replaced: str | None) -> tuple[Decision, str]:
    """runPolicy.escalation: how far a counted failure (ended at `ended`, of a rank last replaced at `replaced`)
    goes (its rank, the gang, the job) and why (empty: as decided). Without it, as decided."""
    policy = r.job.spec.run_policy.escalation
    if policy is None:
        return decision, ""
    joins = same_incident(r.status.escalation, ended, replaced)
    r.status.escalation, step, why = escalate(r.status.escalation, policy, r.at, ended, joins)
    if step == Step.FAIL:
        return Decision.FAIL, why
    if step == Step.GANG:
        return Decision.RESTART_GANG, why
    return decision, why


def _name(r: Round, failure: FailureRecord) -> None:
    """status.lastFailure names the first failure of the job's latest incident: a failure that ended within
    INCIDENT_SECONDS after it belongs to it; one that ended before it (seen later) was the first; one that ended
    later still begins a new incident."""
    last = r.status.last_failure
    if last is not None and last.time:
        gap = (parse_time(failure.time) - parse_time(last.time)).total_seconds()
        if 0 <= gap < INCIDENT_SECONDS or gap <= -INCIDENT_SECONDS:
            return
    r.status.last_failure = failure


def _restart_gang(r: Round, failed: tuple[Role, int], what: str) -> None:
    """Recreate every other rank with a live pod of its current attempt (not counted: the gang restarts for one
    rank's failure): deleted with the trainer pods' grace (a job that checkpoints saves where it stops). One
    event and one note name them all by range (`workers 0-6,8-1999`), not one per rank."""
    others: dict[Role, list[int]] = {}
    for (role, index), pods in r.by_rank.items():
        key = rank_key(role, index)
        rank = r.status.ranks.get(key)
        live = [p for p in pods if r.live(p) and rank is not None and current(rank, p)]
        if (role, index) == failed or rank is None or not live:
            continue
        detail = f"restarted with its gang: {what}"
        replace_rank(r, key, Failure(Kind.GANG), detail, None, "", "Normal", uncounted=rank.uncounted + 1)
        r.plan.delete_pods.append(live[0].name)
        others.setdefault(role, []).append(index)
    if others:
        named = ", ".join(f"{ROLE_NAMES[role]}s {ranges.encode(indexes)}" for role, indexes in others.items())
        note = f"{named} restart with their gang: {what}"
        r.restarting.append((RESTART_REASONS[Kind.GANG], note))
        r.plan.events.append(Event("Normal", RESTART_REASONS[Kind.GANG], note))


def replace_rank(
    r: Round, key: str, failure: Failure, detail: str, after: datetime | None, note: str,
    kind: Literal["Normal", "Warning"], **counted: Any,
) -> None:  # fmt: skip
    """What the rank's status, the job's Restarting condition and an Event say of a pod that is to be replaced
    (no earlier than `after`, when given). `detail` (the rank's lastMessage) names no rank: ranks replaced alike
    share one entry in status.ranks; `note` (the event and the condition) names it (none: the caller announces).
    `counted`: the rank's counters as the replacement leaves them (restarts=3, ...), and any other of its fields
    that change with it."""
    note_lost_work(r, failure)
    reason = RESTART_REASONS[failure.kind]
    r.change_rank(
        key, pod_seen=False, restart_after=None if after is None else format_time(after), last_reason=reason,
        last_message=detail, last_exit_code=failure.exit_code, last_replaced=r.now, **counted,
    )  # fmt: skip
    if note:  # a gang's ranks are announced together (_restart_gang)
        r.restarting.append((reason, note))
        r.plan.events.append(Event(kind, reason, note))
