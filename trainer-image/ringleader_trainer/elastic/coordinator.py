"""The job's coordinator: `python -m ringleader_trainer.elastic.coordinator`, a process of its own beside the ranks
that hosts the rendezvous store and decides each group's members, so that no rank's loss takes the store with it.

Without one, worker 0 hosts the store and decides (elastic/rendezvous.py): its loss stops every survivor until its
replacement hosts a new store, even where the others could train on short of it (spec.workers.minReplicas). With
one, the ranks are all clients (`RankEnv.rendezvous`), and worker 0's loss is like any other's.

The coordinator names a group (an incarnation), decides its members once enough ranks came (`rendezvous.decide`:
every rank, or with the quorum the ranks ask for, those there), and waits until a rank says the group is broken (a
member lost, a rank waiting to join it, a group that failed to form); then it names the next. It keeps nothing
else: a coordinator replaced mid-run starts again with an empty store, the ranks see theirs gone, leave their
group and come to the new coordinator's first, where every survivor holds its live state (a heal in which nobody
receives; that first group waits FIRST_SETTLE_SECONDS for ranks still reconnecting). It holds no job state worth
a checkpoint, reads nothing from the ranks but the store's keys, and ends on SIGTERM (its job ended).

It also judges the members' pulses (`Pulses`): a member whose pulse stops for `--silent-after` seconds is told
lost, as a collective's failure would tell it, so that the others re-form without it and train on. A stopped
process or a lost node closes no connection: without this the survivors wait in a collective until its timeout, or
until the lost rank's replacement comes (on a real cluster, once the node is found NotReady: a minute or more).
A member wrongly judged silent (a rank stalled that long) costs little: it finds the group formed without it,
waits, and is taken in at the next step boundary from the group's live state.
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import sys
import threading
import time
from typing import Any

import torch.distributed as dist

from ringleader_trainer.elastic.rendezvous import QUORUM_SETTLE_SECONDS, decide, left, name_next
from ringleader_trainer.elastic.store_keys import (
    PULSE_SECONDS,
    broken_key,
    pulse_key,
    roster_key,
    tell_lost,
    world_key,
)
from ringleader_trainer.env import COORDINATOR_ENV, EnvError, address
from ringleader_trainer.exitcodes import exit_now
from ringleader_trainer.logs import log_json

# Seconds between two looks at whether the current group is broken: a loss's survivors wait for the next group's
# name at most this long on top of their own noticing.
POLL_SECONDS = 0.05
# A coordinator's first group, when the ranks coming ask for a quorum, is of survivors reconnecting after this
# coordinator replaced a lost one: nobody is known lost, and each comes when its connect retries reach the new
# store (a second or two apart here); the usual settling time would leave the slower ones out of the group.
FIRST_SETTLE_SECONDS = 5.0
NAMED_AT_MOST = 8  # missing ranks a group's log line names (the rest counted): bounded for a job of 10,000 ranks
FOREVER = float("inf")
# Seconds a member's pulse may stand still before it is told lost: five beats missed. torchft's lighthouse gives a
# replica's heartbeat 5 s too.
SILENT_AFTER_SECONDS = 5.0


class Pulses:
    """The members' pulses of one group, as the coordinator saw them (`look`). A member is silent once its pulse,
    having moved since the group was decided, stands still for more than `silent_after` seconds. One whose pulse has
    not moved yet is still forming the group (at 10,000 ranks gloo's connecting may outlast `silent_after`): the
    group's forming has its own timeout."""

    def __init__(self, members: list[int], values: list[bytes], silent_after: float) -> None:
        self.members, self.silent_after = members, silent_after
        self.seen = dict(zip(members, values, strict=True))  # each member's pulse when last looked at
        self.moved: dict[int, float] = {}  # members seen beating in this group: when their pulse last moved

    def look(self, values: list[bytes], now: float) -> list[int]:
        """The members silent at `now` (monotonic seconds), given their pulses' values now, in `members`' order."""
        silent = []
        for rank, value in zip(self.members, values, strict=True):
            if value != self.seen[rank]:
                self.seen[rank], self.moved[rank] = value, now
            elif rank in self.moved and now - self.moved[rank] > self.silent_after:
                silent.append(rank)
        return silent


class Coordinator:
    """Decides groups in `store` (the one it hosts, `serve`): `run` names and decides them until `stop` is set. The
    job's number of ranks is the one the ranks coming say (a resized job's pods are made again for their new
    number)."""

    def __init__(self, store: Any, silent_after: float = SILENT_AFTER_SECONDS) -> None:
        self.store, self.silent_after = store, silent_after
        self.stop = threading.Event()

    def run(self) -> None:
        """Name a group, decide its members, wait until it is broken; again, until `stop`."""
        last: list[int] = []
        while not self.stop.is_set():
            incarnation = name_next(self.store)
            settle = QUORUM_SETTLE_SECONDS if last else FIRST_SETTLE_SECONDS
            members = decide(self.store, incarnation, None, None, last, FOREVER, self.stop, settle)
            if self.stop.is_set():
                return
            self.store.set(roster_key(incarnation), ",".join(map(str, members)))
            world = int(self.store.get(world_key(incarnation)))  # set by every rank before it came
            missing = sorted(set(range(world)) - set(members))
            log_json(role="coordinator", event="group", group=incarnation, members=len(members),
                     missing=missing[:NAMED_AT_MOST], missing_count=len(missing))  # fmt: skip
            last = members
            if not self._watch(incarnation, members):
                return
            log_json(role="coordinator", event="group-broken", group=incarnation,
                     reason=self.store.get(broken_key(incarnation)).decode(errors="replace")[:200])  # fmt: skip

    def _watch(self, incarnation: str, members: list[int]) -> bool:
        """Wait until `incarnation` is broken, telling it so when a member's pulse stops (True), or until `stop`
        (False). A member without a pulse yet (its watch has not beaten: still forming the group, or a trainer from
        before pulses) gets one here, at 0, so that reading them never waits on a key nobody has written."""
        keys = [pulse_key(r) for r in members]
        if not self.store.check(keys):
            for key in keys:
                self.store.add(key, 0)
        pulses = Pulses(members, self.store.multi_get(keys), self.silent_after)
        next_look = time.monotonic() + PULSE_SECONDS
        while not self.store.check([broken_key(incarnation)]):
            if time.monotonic() >= next_look:
                next_look = time.monotonic() + PULSE_SECONDS
                silent = pulses.look(self.store.multi_get(keys), time.monotonic())
                if silent:  # those done training are not lost
                    done = left(self.store, incarnation)
                    silent = [r for r in silent if r not in done]
                if silent:
                    named = ",".join(map(str, silent[:NAMED_AT_MOST])) + ("..." if len(silent) > NAMED_AT_MOST else "")
                    tell_lost(self.store, incarnation, f"rank {named} silent for {self.silent_after:g} s")
                    continue
            if self.stop.wait(POLL_SECONDS):
                return False
        return True


def serve(port: int) -> Any:
    """The rendezvous store, hosted by this process on `port` (every interface)."""
    return dist.TCPStore(  # type: ignore[attr-defined]
        "127.0.0.1", port, None, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(seconds=60)
    )


def main(argv: list[str] | None = None) -> int:
    """Serve the job's rendezvous on the port of RINGLEADER_RENDEZVOUS (or --port) until SIGTERM; a bad value is
    one line on stderr and exit 2."""
    p = argparse.ArgumentParser(prog="python -m ringleader_trainer.elastic.coordinator", description=__doc__)
    p.add_argument("--port", type=int, help="the store's port (default: RINGLEADER_RENDEZVOUS's)")
    p.add_argument("--silent-after", type=float, default=SILENT_AFTER_SECONDS, metavar="SECONDS",
                   help="seconds a member's pulse may stand still before it is told lost (%(default)s)")  # fmt: skip
    args = p.parse_args(argv)
    if args.silent_after <= PULSE_SECONDS:
        print(f"coordinator: --silent-after must be more than a pulse ({PULSE_SECONDS:g} s)", file=sys.stderr)
        return 2
    try:
        port = args.port or address(os.environ, COORDINATOR_ENV)[1]
    except EnvError as e:
        print(f"coordinator: {e}", file=sys.stderr)
        return 2
    coordinator = Coordinator(serve(port), args.silent_after)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: coordinator.stop.set())
    log_json(role="coordinator", event="serving", port=port)
    started = time.monotonic()
    coordinator.run()
    log_json(role="coordinator", event="stopped", seconds=round(time.monotonic() - started, 1))
    return 0


if __name__ == "__main__":
    exit_now(main())  # the store's server thread would hold up the interpreter's teardown
