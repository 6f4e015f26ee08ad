"""runPolicy.ttlSecondsAfterFinished: when an ended job is deleted."""

from __future__ import annotations

from datetime import timedelta

from ..conditions import TERMINAL, finished
from ..observed import parse_time
from ..round_state import Round


def expire_after_ttl(r: Round) -> None:
    """A job that had ended before this round is deleted once its TTL has run out, else a round is asked for
    then. One that ends in this round is not deleted yet (its status and events are written first) but asks
    for that round too: nothing else would bring it, since an ended job's pods may never change again."""
    ttl = r.job.spec.run_policy.ttl_seconds_after_finished
    st = r.status
    if ttl is None or not finished(st.conditions):
        return
    ended = st.completion_time or next(
        (c.last_transition_time for c in st.conditions if c.status == "True" and c.type in TERMINAL), None
    )
    if not ended:
        return
    expires = parse_time(ended) + timedelta(seconds=ttl)
    if finished(r.old.conditions) and r.at >= expires:
        r.plan.delete_job = True
    else:
        r.wake_at(expires)
