"""runPolicy.stragglerThreshold: the Straggler condition from what the progress scraper's last reading found
(stragglers.py), and under stragglerPolicy Replace each straggler recreated once.

Straggler=True names the stragglers (their pods, nodes and how much slower they work; the same text as a Warning
event whenever it changes) and turns False once a reading finds none. A straggler replaced is deleted with the
trainer pods' grace (a job that checkpoints saves where it stops, its peers recover in place and resume with
the replacement, nothing lost), and its replacement prefers any other node (status.ranks.<rank>.avoidNode). A
rank is replaced as a straggler once: slow again elsewhere, the cause is not its node, and it is only named.
Replacements are not counted against backoffLimit.
"""

from __future__ import annotations

from ringleader_api import ConditionType, Reason, StragglerPolicy

from ..conditions import is_true
from ..failures import Failure, Kind
from ..names import rank_key
from ..round_state import NOTHING_KNOWN, Round
from ..stragglers import Slow, Stragglers
from .restarts import replace_rank


def report_stragglers(r: Round, found: Stragglers | None) -> None:
    """After the ranks are reconciled (r.by_rank set). A reading from an earlier Running (or of a job no longer
    Running) is dropped."""
    if found is None or r.failed or r.running_since != found.running_since:
        return
    if not found.ranks:
        if is_true(r.status.conditions, ConditionType.STRAGGLER):
            r.set_condition(ConditionType.STRAGGLER, False, Reason.NO_STRAGGLERS, found.describe())
        return
    r.set_condition(ConditionType.STRAGGLER, True, Reason.STRAGGLERS, found.describe())
    if r.job.spec.run_policy.straggler_policy == StragglerPolicy.REPLACE:
        for slow in found.ranks:
            _replace(r, slow)


def _replace(r: Round, slow: Slow) -> None:
    key = rank_key(slow.role, slow.index)
    rank = r.status.ranks.get(key) or NOTHING_KNOWN
    pod = next((p for p in r.by_rank.get((slow.role, slow.index), []) if p.name == slow.pod and r.live(p)), None)
    if rank.straggles or pod is None or pod.attempt not in (None, rank.attempt):
        return  # replaced once already, or this pod is going anyway
    elsewhere = f", preferring a node other than {slow.node}" if slow.node else ""
    note = f"{slow.describe()}: recreating it{elsewhere} (not counted against backoffLimit)"
    failure = Failure(Kind.STRAGGLED)
    changes = {"straggles": rank.straggles + 1, "avoid_node": slow.node or None}
    replace_rank(r, key, failure, failure.describe(), None, note, "Warning", **changes)
    r.plan.delete_pods.append(pod.name)
