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

from ringleader_trainer.elastic.rendezvous import QUORUM_SETTLE_SECONDS, decide, name_next
from ringleader_trainer.elastic.store_keys import broken_key, roster_key, world_key
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


class Coordinator:
    """Hosts the store on `port`; `run` names and decides groups until `stop` is set. The job's number of ranks is
    the one the ranks coming say (a resized job's pods are made again for their new number)."""

    def __init__(self, port: int) -> None:
        self.store: Any = dist.TCPStore(  # type: ignore[attr-defined]
            "127.0.0.1", port, None, is_master=True, wait_for_workers=False,
            timeout=datetime.timedelta(seconds=60),
        )  # fmt: skip
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
            while not self.store.check([broken_key(incarnation)]):
                if self.stop.wait(POLL_SECONDS):
                    return
            log_json(role="coordinator", event="group-broken", group=incarnation,
                     reason=self.store.get(broken_key(incarnation)).decode(errors="replace")[:200])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Serve the job's rendezvous on the port of RINGLEADER_RENDEZVOUS (or --port) until SIGTERM; a bad value is
    one line on stderr and exit 2."""
    p = argparse.ArgumentParser(prog="python -m ringleader_trainer.elastic.coordinator", description=__doc__)
    p.add_argument("--port", type=int, help="the store's port (default: RINGLEADER_RENDEZVOUS's)")
    args = p.parse_args(argv)
    try:
        port = args.port or address(os.environ, COORDINATOR_ENV)[1]
    except EnvError as e:
        print(f"coordinator: {e}", file=sys.stderr)
        return 2
    coordinator = Coordinator(port)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: coordinator.stop.set())
    log_json(role="coordinator", event="serving", port=port)
    started = time.monotonic()
    coordinator.run()
    log_json(role="coordinator", event="stopped", seconds=round(time.monotonic() - started, 1))
    return 0


if __name__ == "__main__":
    exit_now(main())  # the store's server thread would hold up the interpreter's teardown
