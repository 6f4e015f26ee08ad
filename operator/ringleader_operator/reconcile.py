"""Level-based reconcile, pure: from the job and the pods that exist, decide what to create and delete and
what the status is. The I/O layer (reconciler.py) applies the plan; running it twice on the same input gives
the same plan.

`plan` reads top to bottom as the round's steps; each decision is a policy of its own (policies/), working
on the round's state (round_state.py) over what was observed of the pods (observed.py).
"""

from __future__ import annotations

from typing import Any

from ringleader_api import Reason, TrainingJob

from . import admission, kueue, workload_api
from .builders import DEFAULT_MAX_RANKS, InvalidTemplate, desired_ranks, validate
from .conditions import finished
from .observed import Observations
from .policies import (
    cleanup,
    deadline,
    elastic,
    gang,
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
from .round_state import Plan, Round
from .stalls import Stall, Unavailable
from .stragglers import Stragglers


def plan(
    job: TrainingJob,
    pods: list[dict[str, Any]],
    service_exists: bool,
    now: str,
    cluster: admission.Cluster | None = None,
    max_ranks: int = DEFAULT_MAX_RANKS,
    gone: list[dict[str, Any]] | None = None,
    stalled: Stall | Unavailable | None = None,
    slow: Stragglers | None = None,
    queued: kueue.QueueState | None = None,
    workload_gang: workload_api.Gang | None = None,
    seen: Observations | None = None,
) -> Plan:
    """The whole reconcile decision for one job at time `now` (RFC 3339). `pods` are those carrying the job's
    labels (its ranks are picked from them). `cluster` (every Node and pod) is needed only while some of the
    job's pods carry the gang gate; without it they stay gated. A job with more than `max_ranks` pods fails
    as an invalid spec. `gone`: the last states of its pods lately deleted (how each ended). `stalled`: a stall
    the progress scraper found, to act on; `slow`: the stragglers its last reading found. `queued`: what Kueue
    says of the job's Workload (None: Kueue does not queue the job). `workload_gang`: gangs go to kube-scheduler
    through the Workload API (workload_api.py) instead of the operator's own gate; what it said of this job's.
    An elastic job's world may have fewer workers than it asks for (policies/elastic.py): from the size on, the
    round's policies see the job at the size it runs at (`r.job`). `seen`: the job's pods as its earlier rounds
    observed them (reused for pods that did not change; the plan is the same without)."""
    r = Round.open(elastic.at_current_size(job), pods, now, gone, seen)
    if finished(r.status.conditions):
        cleanup.clean_pods(r)
        return _close(r, queued)
    try:
        validate(job, max_ranks)
    except InvalidTemplate as e:
        r.fail(Reason.INVALID_SPEC, str(e))
        return _close(r, queued)
    outcome.note_created(r)
    saves.note_saves(r)
    if suspend.suspend(r) or queue.hold(r, queued):
        return _close(r, queued)
    suspend.resume(r)
    deadline.start_clock(r)
    if deadline.past_deadline(r):
        return _close(r, queued)
    r.plan.create_service = not service_exists
    elastic.size_world(r, job, cluster, own_gates=queued is None and workload_gang is None)  # r.job: at that size
    resize.reform_resized_world(r)
    r.index_ranks(desired_ranks(r.job))  # after validate: a job over the cap is refused without listing its ranks
    resize.drop_unwanted_ranks(r)
    restarts.reconcile_ranks(r)
    if not r.failed:
        stall.act_on_stall(r, stalled)
    straggler.report_stragglers(r, slow)
    queue.place(r, queued)
    if not r.failed:
        gang.admit_gang(r, cluster, workload_gang)
    if r.failed:
        cleanup.clean_pods(r)
    else:
        outcome.conclude(r)
    return _close(r, queued)


def _close(r: Round, queued: kueue.QueueState | None) -> Plan:
    """Every round ends here: the ranks' history kept short, the counts in status, then whether an ended job's TTL
    has run out."""
    history.forget_settled_history(r)
    r.summarize()
    r.keep_book()
    goodput.account(r)
    ttl.expire_after_ttl(r)
    if queued is not None and finished(r.status.conditions) and not finished(r.old.conditions):
        # The round after the end marks Kueue's Workload Finished (its quota goes to the next job): no event may
        # come for a job whose pods all ended, and there is no periodic round to count on.
        r.wake_at(r.at)
    return r.plan
