"""runPolicy.progressDeadlineSeconds: act on a stall the progress scraper found (stalls.py), and turn Stalled
False once the job is past the step it stalled at.

When the scraper could not read the pages that would tell (`Unavailable`: a script that serves none, a network
between the operator and the pods that drops everything), Stalled turns Unknown (reason ProgressUnavailable,
saying why) and nothing else happens: a rank the operator cannot read is not a rank that hangs. It turns False
once worker 0's progress is read again.

A stall sets Stalled=True (a Warning event says which rank stopped first, and where) and counts in
status.stalls. Then runPolicy.onStall: Fail fails the job; Recover replaces the rank named (its pod deleted
with a short grace: it is stuck, a save will not come; its peers lose it, recover in place and resume from
the newest checkpoint with its replacement), or every rank when none was named. Replacements for a stall are
not counted against backoffLimit; a stall beyond runPolicy.stallLimit fails the job instead.
"""

from __future__ import annotations

from ringleader_api import ROLE_NAMES, ConditionType, Reason, StallAction

from ..conditions import condition, is_true
from ..failures import Failure, Kind
from ..names import rank_key
from ..observed import ObservedPod, parse_time
from ..round_state import NOTHING_KNOWN, Round
from ..stalls import Stall, Unavailable
from .restarts import replace_rank

STALLED_POD_GRACE_SECONDS = 5  # a stuck rank saves nothing on SIGTERM; its log's last lines get out


def act_on_stall(r: Round, stall: Stall | Unavailable | None) -> None:
    """After the ranks are reconciled (r.by_rank set): Stalled False once past the stall, then the new stall,
    if it was found while the job is Running as it is now (an older one is dropped)."""
    _resumed(r)
    if stall is None or r.failed or r.running_since != stall.running_since:
        return
    if isinstance(stall, Unavailable):
        if not is_true(r.status.conditions, ConditionType.STALLED):  # a stall being recovered from stays named
            r.set_condition(ConditionType.STALLED, None, Reason.PROGRESS_UNAVAILABLE, stall.message)
        return
    policy = r.job.spec.run_policy
    r.stalled_seconds = stall.seconds
    r.status.stalls += 1
    r.status.last_stall_step = stall.step
    message = stall.describe()
    r.set_condition(ConditionType.STALLED, True, Reason.PROGRESS_DEADLINE, message)
    if policy.on_stall == StallAction.FAIL:
        r.fail(Reason.PROGRESS_DEADLINE, f"{message} (runPolicy.onStall is Fail)")
        return
    if r.status.stalls > policy.stall_limit:
        r.fail(Reason.STALL_LIMIT, f"{message}; stall {r.status.stalls}, runPolicy.stallLimit {policy.stall_limit}")
        return
    culprit = stall.culprit
    named = [] if culprit is None else r.by_rank.get((culprit.role, culprit.index), [])
    live = [p for p in named if r.live(p) and p.name == culprit.pod] if culprit is not None else []
    if culprit is not None and not live:
        return  # the rank named has gone meanwhile: its replacement is under way already
    targets = live or [p for pods in r.by_rank.values() for p in pods if r.live(p)]
    for pod in targets:
        _replace_stalled(r, pod, culprit is None)


def _replace_stalled(r: Round, pod: ObservedPod, whole_gang: bool) -> None:
    key = rank_key(pod.role, pod.index)
    stalls = (r.status.ranks.get(key) or NOTHING_KNOWN).stalls + 1
    what = f"{ROLE_NAMES[pod.role]} {pod.index} (pod {pod.name})"
    why = "no rank said which stopped first: replacing every rank" if whole_gang else "it stopped first"
    note = f"{what}: the job stalled and {why}; recreating it (not counted against backoffLimit)"
    failure = Failure(Kind.STALLED)
    replace_rank(r, key, failure, failure.describe(), None, note, "Warning", stalls=stalls)
    r.plan.kill_pods.append(pod.name)


def _resumed(r: Round) -> None:
    """Stalled turns False once worker 0's step (status.progress) is past the step the job stalled at, or (Stalled
    Unknown) once its progress was read after the condition turned Unknown."""
    stalled = condition(r.status.conditions, ConditionType.STALLED)
    if stalled is None or r.old.progress is None:
        return
    if stalled.status == "Unknown":
        read = r.old.progress.updated_at
        if read and parse_time(read) > parse_time(stalled.last_transition_time):
            message = f"worker 0's progress is read again (step {r.old.progress.step})"
            r.set_condition(ConditionType.STALLED, False, Reason.PROGRESS_AVAILABLE, message)
        return
    if stalled.status != "True":
        return
    last = r.status.last_stall_step
    if r.old.progress.step > (last if last is not None else -1):
        at = f"step {last}" if last is not None else "its start"
        message = f"step {r.old.progress.step} is past the stall at {at}"
        r.set_condition(ConditionType.STALLED, False, Reason.PROGRESS_RESUMED, message)
