"""Level-based reconcile, pure: from the job and the pods that exist, decide what to create and delete and
what the status is. The I/O layer (reconciler.py) applies the plan; running it twice on the same input gives
the same plan.

`plan` reads top to bottom as the round's steps; each decision is a policy of its own (policies/), working
on the round's state (round_state.py) over what was observed of the pods (observed.py).
"""

from __future__ import annotations

from ringleader_api import Reason, TrainingJob

from . import admission, kueue
from .builders import InvalidTemplate, desired_ranks, validate
from .conditions import finished
from .policies import (
    cleanup,
    deadline,
    elastic,
    goodput,
    history,
    outcome,
    queue,
    resize,
    restarts,
    saves,
    stall,
    straggler,
    suspend,
    ttl,
)  # fmt: skip
from .rank_env import wants_coordinator
from .reading import Reading
from .round_state import Plan, Round


def plan(reading: Reading, now: str, cluster: admission.Cluster | None = None) -> Plan:
    """The whole reconcile decision for one job, as `reading` shows it, at time `now` (RFC 3339). `cluster`
    (every Node and pod) is needed only while some of the job's pods carry the gang gate; without it they stay
    gated. An elastic job's world may have fewer workers than it asks for (policies/elastic.py): from the size on,
    the round's policies see the job at the size it runs at (`r.job`)."""
    job, queued = reading.job, reading.queued
    r = Round.open(elastic.at_current_size(job), reading.pods, now, reading.gone, reading.seen, reading.pod_delta)
    if finished(r.status.conditions):
        cleanup.clean_pods(r)
        return _close(r, queued, job)
    try:
        validate(job, reading.max_ranks)
    except InvalidTemplate as e:
        r.fail(Reason.INVALID_SPEC, str(e))
        return _close(r, queued, job)
    gang = reading.backend
    outcome.note_created(r)
    saves.note_saves(r)
    if suspend.suspend(r) or queue.hold(r, queued):
        return _close(r, queued, job)
    suspend.resume(r)
    deadline.start_clock(r)
    if deadline.past_deadline(r):
        return _close(r, queued, job)
    r.plan.create_service = not reading.service_exists
    elastic.size_world(r, job, cluster, own_gates=reading.sizes_world)  # r.job: at that size
    resize.reform_resized_world(r)
    r.index_ranks(desired_ranks(r.job))  # after validate: a job over the cap is refused without listing its ranks
    resize.drop_unwanted_ranks(r)
    restarts.reconcile_ranks(r)
    if not r.failed:
        stall.act_on_stall(r, reading.stalled)
    straggler.report_stragglers(r, reading.slow)
    queue.place(r, queued)
    for pod in r.plan.create_pods:  # every pod it creates joins the gang its backend admits
        gang.mark(pod, r.job)
    if not r.failed:
        gang.admit(r, cluster, reading.gang_verdict)
    if r.failed:
        cleanup.clean_pods(r)
    else:
        outcome.conclude(r)
    r.plan.ensure_coordinator = bool(r.plan.create_pods) and wants_coordinator(r.job)  # the job at the size it runs
    return _close(r, queued, job)


def _close(r: Round, queued: kueue.QueueState | None, job: TrainingJob) -> Plan:
    """Every round ends here: the ranks' history kept short, the counts in status, the coordinator of a job that
    ended now, then whether an ended job's TTL has run out."""
    history.forget_settled_history(r)
    r.summarize()
    r.keep_book()
    r.plan.ranks_as_read = r.ranks_as_read()
    goodput.account(r)
    cleanup.end_coordinator(r, job)
    ttl.expire_after_ttl(r)
    if queued is not None and finished(r.status.conditions) and not finished(r.old.conditions):
        # The round after the end marks Kueue's Workload Finished (its quota goes to the next job): no event may
        # come for a job whose pods all ended, and there is no periodic round to count on.
        r.wake_at(r.at)
    return r.plan
