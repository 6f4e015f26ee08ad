"""status.ranks stays short whatever the job's size: ranks alike share one entry (the API's serializer groups
them), and the history of ranks that were replaced and run again is kept for the most recently replaced only.

Each rank replaced differently (another restart count, another reason, another time) is an entry of its own.
Past MAX_RANK_ENTRIES such entries, the least recently replaced of the settled ranks (running again: their pod
of the current attempt was seen, no back-off pending) are forgotten: they go back to a plain seen rank and
status.ranksForgotten counts them. Only settled ranks are forgotten because a rank's attempt tells its current
pod from the one being replaced; once the current pod was seen running the old one is gone (they share a name),
so the attempt has nothing left to tell apart. Their restarts still count in replicaStatuses, against
backoffLimit; what is lost is the rank's own back-off step and its lastMessage.
"""

from __future__ import annotations

from ringleader_api import MAX_RANK_ENTRIES, RankStatus, Role, rank_groups

from ..observed import parse_time
from ..round_state import Round


def forget_settled_history(r: Round) -> None:
    """Keep at most MAX_RANK_ENTRIES groups of replaced ranks in status.ranks (see the module's docstring)."""
    as_read, book = r.ranks_as_read(), r.book
    if as_read and book is not None and book.bounded is r.old.ranks:
        return  # the ranks (the very entries) an earlier round counted below the bound
    if len(Role) * len(set(map(id, r.status.ranks.values()))) <= MAX_RANK_ENTRIES:
        if as_read and book is not None:
            book.bounded = r.old.ranks
        return  # fewer groups than that (a group is a role's ranks sharing an entry); the common case, counted in C
    groups = {
        group: keys
        for group, keys in rank_groups(r.status.ranks).items()
        if (rank := r.status.ranks[keys[0]]).attempt or rank.last_reason
    }
    excess = len(groups) - MAX_RANK_ENTRIES
    if excess <= 0:
        return
    settled = [keys for keys in groups.values() if _settled(r, r.status.ranks[keys[0]])]
    settled.sort(key=lambda keys: r.status.ranks[keys[0]].last_replaced or "")
    for keys in settled[:excess]:
        for key in keys:
            r.put_rank(key, RankStatus(pod_seen=True))
        r.status.ranks_forgotten += len(keys)


def _settled(r: Round, rank: RankStatus) -> bool:
    return rank.pod_seen and (rank.restart_after is None or parse_time(rank.restart_after) <= r.at)
