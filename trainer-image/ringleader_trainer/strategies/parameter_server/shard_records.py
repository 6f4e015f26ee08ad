"""What a parameter-server shard is given and gives back: its modes, where its backup lives (`Backups`), what it
tells and asks its strategy (`ShardHooks`), its counts (`ServerStats`), and the failure that ends every rank
(`ShardFailed`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from torch import nn

from ringleader_trainer.transport.wire import PeerLost

SYNCHRONOUS, ASYNCHRONOUS, BOUNDED = "synchronous", "asynchronous", "bounded-staleness"


@dataclass(frozen=True)
class Backups:
    """Primary/backup (ps_backup): where this shard's backup lives (shard `to` at `addr`), and the parameters of
    the shard whose backup this one keeps (the shard before it)."""

    to: int
    addr: tuple[str, int]
    of: int
    of_params: Sequence[nn.Parameter]


class ShardFailed(PeerLost):
    """The shard itself failed (another worker lost past the timeout, a round not completed in time): everyone
    ends, even where a lost worker's slot would be given back."""


@dataclass
class ServerStats:
    updates: int = 0
    max_lead_on_release: int = 0  # the most steps any worker was ahead of the slowest when let go
    waits: int = 0  # releases held back by the staleness bound
    rejected: int = 0  # connections dropped: no proof of the job's token, a bad hello, a taken slot


def _nothing(*_: object) -> None:
    return None


@dataclass(frozen=True)
class ShardHooks:
    """What a shard tells its strategy and asks it, given at construction. Under the shard's lock: `progress`
    (the slowest worker's clock advanced to it; once more at the end: the strategy checkpoints there) and
    `apply` (before and after each update: the strategy stamps its metrics). On a connection's thread:
    `reject` (peer address, why), `lost` (worker, why), `rejoined` (worker, its clock), `backup` (event,
    detail: its link linked or lost). `asked_to_stop`: whether this shard's own rank was asked to stop."""

    progress: Callable[[int], None] = _nothing
    apply: tuple[Callable[[], None], Callable[[], None]] = (_nothing, _nothing)
    reject: Callable[[str, str], None] = _nothing
    lost: Callable[[int, str], None] = _nothing
    rejoined: Callable[[int, int], None] = _nothing
    backup: Callable[[str, str], None] = _nothing
    asked_to_stop: Callable[[], bool] = lambda: False
