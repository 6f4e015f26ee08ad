"""Healing: a lost rank costs the step it interrupted, not the steps since the last checkpoint.

When a peer is lost, the survivors keep their state in memory: each leaves the broken process group, joins the
next one with the lost rank's replacement (`rendezvous.Rendezvous`), and the ranks agree on the state to
continue from (`agree`): every rank says the step its live state is at (a rank just started has none), the
newest wins, and every rank short of it (the replacement; a survivor whose last exchange failed where a peer's
completed) receives that state from a rank holding it (`plan`), over the job's process group. No rank reads a
checkpoint; the interrupted step is done again, with the same data. Only when no rank holds live state (the
job's first start, or every rank started again) do the ranks agree on a checkpoint instead
(`checkpointing.agree_on_resume`).

What is sent is what a checkpoint holds (model, optimizer, step, RNG states): its skeleton (the state with each
tensor replaced by an empty stand-in of its shape and type) in the checkpoint's format (`torch.save`), read back
with `torch.load(weights_only=True)`, then each tensor's bytes as they lie in memory, received into tensors the
receiver allocated from the skeleton. Receiving a peer's state runs no code from it, and its size is bounded
before anything is allocated; the tensors are neither serialized nor copied on either side (a 200 MB state took
0.6 s through torch.save and torch.load whole).

A strategy heals when its state can be served by a peer (`Strategy.heals`): under allreduce every worker
holds the same model and optimizer; under local SGD each worker's successor keeps a copy of its state as of the
last sync; under pipeline with data-parallel replicas each stage's replicas hold the same stage. The others keep
recovering from the newest checkpoint (`recovery`).
"""

from __future__ import annotations

import copy
import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from ringleader_trainer.exitcodes import ExitCode, TrainerError
from ringleader_trainer.transport import wire

NO_STATE = -1  # a rank's step when it holds no live state (just started)
UNSERVABLE = -2  # a rank's step when its state is between two consistent points (a sync half done)
# The most a received state may say it holds: a bound on what a peer can make this rank allocate.
MAX_STATE_BYTES = 1 << 40


class HealError(TrainerError):
    """A peer's state could not be received or read."""

    exit_code = ExitCode.PEER_LOST


class Unhealable(TrainerError):
    """No live rank can serve a rank short of the agreed state (the ranks holding it were lost too, or a
    survivor is between two consistent points): every rank of the group raises it together and they resume
    from the newest checkpoint instead (`recovery`)."""

    exit_code = ExitCode.PEER_LOST


# Collectives inside autograd (DDP's reducer) surface a backend failure as a plain RuntimeError; these mark it.
BACKEND_FAILURES = (
    "gloo/transport",
    "Connection reset by peer",
    "Connection closed by peer",
    "NCCL error",
    "ring neighbour",
)


def peer_lost(exc: BaseException) -> bool:
    """Whether `exc` says a peer is gone: a failure of torch's backends or of the sockets below our own wire
    code (exit PEER_LOST when it ends the trainer)."""
    if isinstance(exc, TrainerError):
        return exc.exit_code == ExitCode.PEER_LOST
    return isinstance(exc, (dist.DistError, ConnectionError, TimeoutError)) or (
        isinstance(exc, RuntimeError) and any(m in str(exc) for m in BACKEND_FAILURES)
    )


@dataclass(frozen=True)
class Report:
    """What a rank says of its state when a group forms: the step it is at (NO_STATE, UNSERVABLE), whether
    it holds a copy of its predecessor's state there (local SGD's backups; unused where every rank serves),
    whether a peer at the same step may hold a newer state (`behind`: local SGD training short, a rank whose
    sync's average failed where a peer's may have completed), and whether it holds the next step's gradients,
    averaged, ready to apply (`pending`: a rank lost its peer in the commit that ends a step of a state held in
    parts, after its own part's averaging completed; a peer that completed the commit stepped)."""

    step: int
    holds_predecessor: bool = False
    behind: bool = False
    pending: bool = False


@dataclass(frozen=True)
class Plan:
    """Who continues from where: the group continues from `step`; each rank in `advance` first applies the step
    it holds pending (reaching `step`); each rank in `sources` then receives the state from the rank it names."""

    step: int
    sources: Mapping[int, int]
    advance: frozenset[int] = frozenset()


def newest_serves(reports: Sequence[Report], parts: int = 1) -> Plan | None:
    """The plan where every rank holds a whole copy of its part of the state: rank i holds part i % `parts`, the
    same as every other rank of that part (allreduce: one part, the whole model; pipeline: a stage, its
    data-parallel replicas alike). The group continues from the newest step; every rank short of it receives its
    part from a rank of the same part at it, those taking the receivers in turn; where some ranks at it are
    `behind` and some not, those behind receive too. A rank one step short with that step `pending` applies it
    and serves: a peer at the newest step completed the commit the pending rank's failed in, so every part's
    averaging had completed. None when no rank holds live state; Unhealable when no live rank of a part is at (or
    can reach) the newest step."""
    newest = max((r.step for r in reports), default=NO_STATE)
    if newest < 0:
        return None
    current = any(r.step == newest and not r.behind for r in reports)
    advance = frozenset(i for i, r in enumerate(reports) if r.pending and r.step + 1 == newest)
    sources: dict[int, int] = {}
    for part in range(parts):
        ranks = range(part, len(reports), parts)
        holders = [
            i for i in ranks if i in advance or (reports[i].step == newest and not (current and reports[i].behind))
        ]
        receivers = [i for i in ranks if i not in holders]
        if receivers and not holders:
            raise Unhealable(f"no live rank holds part {part} of the state (of {parts}) as of step {newest}")
        sources |= {r: holders[k % len(holders)] for k, r in enumerate(receivers)}
    return Plan(newest, sources, advance)


def successor_serves(reports: Sequence[Report]) -> Plan | None:
    """The plan where each rank's own state lives on only in its successor's copy (local SGD: each rank's
    optimizer state is its own; rank i + 1 keeps rank i's state as of the last sync): every rank with live
    state must be at the same step, and each rank without is served by its successor, which must hold its
    copy there. None when no rank holds live state; Unhealable when a rank short of it cannot be served."""
    if any(r.step == UNSERVABLE for r in reports):
        raise Unhealable("a surviving rank was lost between two syncs")
    live = {r.step for r in reports if r.step != NO_STATE}
    if not live:
        return None
    if len(live) > 1:
        raise Unhealable(f"the surviving ranks are at different syncs ({', '.join(map(str, sorted(live)))})")
    (step,) = live
    sources = {}
    for i, r in enumerate(reports):
        if r.step == NO_STATE:
            successor = (i + 1) % len(reports)
            if reports[successor].step != step or not reports[successor].holds_predecessor:
                raise Unhealable(f"rank {i}'s state as of step {step} was held by rank {successor}, lost too")
            sources[i] = successor
    return Plan(step, sources)


def gather(mine: Report) -> list[Report]:
    """Every rank's report, in rank order, over the default group: a collective every rank of the group calls
    at the same point (right after joining it)."""
    own = torch.tensor([mine.step, mine.holds_predecessor, mine.behind, mine.pending], dtype=torch.int64)
    reports = [torch.zeros(4, dtype=torch.int64) for _ in range(dist.get_world_size())]
    dist.all_gather(reports, own)
    return [Report(int(r[0]), bool(r[1]), bool(r[2]), bool(r[3])) for r in reports]


def encode(state: Mapping[str, Any]) -> torch.Tensor:
    """`state` as bytes (a uint8 tensor over the buffer torch.save wrote: no copy) in the checkpoint's format."""
    buffer = io.BytesIO()
    torch.save(dict(state), buffer)
    return torch.frombuffer(buffer.getbuffer(), dtype=torch.uint8)


def decode(data: torch.Tensor, source: int) -> dict[str, Any]:
    """The state `encode` made, read without running code from it; HealError naming the source if it is not."""
    try:
        state = torch.load(io.BytesIO(data.numpy().tobytes()), map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises several types for truncated or foreign bytes
        raise HealError(f"the state rank {source} sent cannot be read: {type(e).__name__}") from e
    if not isinstance(state, dict):
        raise HealError(f"the state rank {source} sent is not a state")
    return state


def send(state: Mapping[str, Any], to: int) -> None:
    """Send `state` to rank `to` (which calls `receive` from this rank): the size of its skeleton, the skeleton,
    then each of its tensors' bytes, in the skeleton's order."""
    tensors: list[torch.Tensor] = []
    skeleton = encode(_hollow(state, tensors))
    dist.send(torch.tensor([skeleton.numel()], dtype=torch.int64), dst=to)
    dist.send(skeleton, dst=to)
    for tensor in tensors:
        if tensor.numel():
            dist.send(wire.tensor_view(tensor), dst=to)


def checked_size(n: int, sender: str) -> int:
    """`n`, the size of a state `sender` says it will send; HealError unless it is within MAX_STATE_BYTES."""
    if not 0 < n <= MAX_STATE_BYTES:
        raise HealError(f"{sender} would send a state of {n} bytes")
    return n


def receive(source: int) -> dict[str, Any]:
    """The state rank `source` sends (`send`); HealError if its skeleton's size or the tensors it says follow are
    out of bounds, or it cannot be read."""
    size = torch.zeros(1, dtype=torch.int64)
    dist.recv(size, src=source)
    data = torch.empty(checked_size(int(size.item()), f"rank {source}"), dtype=torch.uint8)
    dist.recv(data, src=source)
    skeleton = decode(data, source)
    sizes: list[int] = []

    def measure(stand_in: torch.Tensor) -> torch.Tensor:
        sizes.append(stand_in.numel() * stand_in.element_size())
        return stand_in

    _fill(skeleton, measure)
    if sum(sizes) > MAX_STATE_BYTES:
        raise HealError(f"rank {source} would send tensors of {sum(sizes)} bytes")
    state: dict[str, Any] = _fill(skeleton, _received_from(source))
    return state


def _hollow(value: Any, tensors: list[torch.Tensor]) -> Any:
    """`value` with each tensor in it replaced by a stand-in of its shape and type on the meta device (no data),
    the tensors appended to `tensors` (on the CPU, contiguous) in the order `_fill` meets their stand-ins."""

    def stand_in(tensor: torch.Tensor) -> torch.Tensor:
        tensors.append(tensor.detach().cpu().contiguous())
        return torch.empty(tensor.shape, dtype=tensor.dtype, device="meta")

    return _map_tensors(value, stand_in)


def _fill(value: Any, make: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """`value` with each stand-in tensor (on the meta device) replaced by `make(stand_in)`, in `_hollow`'s order."""
    return _map_tensors(value, lambda tensor: make(tensor) if tensor.is_meta else tensor)


def _map_tensors(value: Any, change: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """A copy of `value` (dicts, lists and tuples within it copied, in order) with each tensor `t` in it
    replaced by `change(t)`."""
    if isinstance(value, torch.Tensor):
        return change(value)
    if isinstance(value, dict):
        changed = copy.copy(value)  # its type and attributes (a module's state dict keeps its `_metadata`)
        for key, item in value.items():
            changed[key] = _map_tensors(item, change)
        return changed
    if isinstance(value, (list, tuple)):
        return type(value)(_map_tensors(item, change) for item in value)
    return value


def _received_from(source: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """A `_fill` maker: a tensor of the stand-in's shape and type, its bytes received from rank `source`."""

    def receive_one(meta: torch.Tensor) -> torch.Tensor:
        tensor = torch.empty(meta.shape, dtype=meta.dtype)
        if tensor.numel():
            dist.recv(wire.tensor_view(tensor), src=source)
        return tensor

    return receive_one
