"""Where this process's collectives stand, per process group, from torch's flight recorder: what names the rank a
stalled collective waits on (the operator compares the ranks' pages: stalls.find_culprit).

torch records every collective a process group issues, on by default (TORCH_FR_BUFFER_SIZE, 2000 entries),
ProcessGroupGloo and ProcessGroupNCCL each into its own recorder. The recorder's status without its entries
(`includeCollectives=False`: a few hundred bytes, tens of microseconds) says, per group, the sequence number of
the last collective this process entered (enqueued) and of the last it saw complete. Every member of a group
enters the same collectives in the same order, so a rank whose number is behind its group's others never
reached the collective they wait in. (Point-to-point sends and receives are counted too: a group that carries
them, a pipeline's, is left out.) Read when the metrics page is served, never per step.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import NamedTuple

import torch.distributed as dist

BACKENDS = ("gloo", "nccl")  # the recorders a process may have; a group's number is counted by each apart
MAX_GROUPS = 16  # groups a page shows at most (the operator reads no more): the trainer makes a few
MAX_NUMBER = 2**53


class GroupStatus(NamedTuple):
    """One process group's place: `group` is `<backend>/<name>` (torch names groups in the order every rank
    creates them, so the same group has the same name on every member), `entered` the sequence number of the
    last collective this process entered in it, `completed` of the last it saw complete (-1: none seen)."""

    group: str
    entered: int
    completed: int


def parse_status(backend: str, raw: bytes | str, skip: Collection[str] = ()) -> list[GroupStatus]:
    """The groups a recorder's JSON status dump names (its `pg_status`), those with a collective entered and not
    named in `skip`; fields that are not whole numbers in range leave their group out."""
    try:
        status = json.loads(raw).get("pg_status") or {}
    except (ValueError, AttributeError):
        return []
    out = []
    for name, place in status.items() if isinstance(status, dict) else ():
        if name in skip:
            continue
        try:
            entered = int(place["last_enqueued_collective"])
            completed = int(place.get("last_completed_collective", -1))
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
        if 0 < entered <= MAX_NUMBER and -1 <= completed <= MAX_NUMBER:
            out.append(GroupStatus(f"{backend}/{name}", entered, completed))
    return out


def read(skip: Collection[str] = ()) -> list[GroupStatus]:
    """This process's groups, from every recorder it has (none before the first collective, and none from a
    torch without the recorder), sorted by group, at most MAX_GROUPS. `skip`: names of groups left out, those
    that carry point-to-point sends and receives (a pipeline's): the recorder counts them with the collectives,
    so the members' numbers differ by what each sent and would name the wrong rank."""
    if not dist.is_available():
        return []
    from torch._C import _distributed_c10d as c10d  # the recorder's dump is only exposed there

    found: list[GroupStatus] = []
    for backend in BACKENDS:
        try:
            raw = c10d._dump_fr_trace_json(includeCollectives=False, backend=backend)
        except (AttributeError, TypeError, RuntimeError):  # an older torch, a build without that backend
            continue
        found += parse_status(backend, raw, skip)
    return sorted(found, key=lambda g: g.group)[:MAX_GROUPS]
