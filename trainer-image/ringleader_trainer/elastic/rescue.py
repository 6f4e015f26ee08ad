"""The last resort for a rank stuck in a broken group (`Rescue`): a fresh copy of itself.

When a group breaks, its members' watches shut its connections down (`GroupWatch`) and every exchange pending on
them fails at once, so the rank heals or recovers. One case escapes: a send gloo had queued for writing when the
connection failed never fails ("Timed out waiting ...ms for send operation to complete"; gloo's
`Pair::signalException` passes over queued writes), and `ProcessGroupGloo.abort` does not wake it: the rank would
wait out the collective's whole timeout (300 s by default) while its peers train on without it. The watch holds a
broken group's connections open and drains them, so that sends in flight complete, and shuts a connection its own
gloo is still writing on only once that write is done; what remains is a write to a peer frozen (SIGSTOP, a lost
node) with its buffers full, or killed that very moment, and a rank stuck after a break for a reason not yet found
(seen once in CI, a healthy rank under heavy load, its coordinator restarting). The rank's main thread is then
blocked in C++ (DDP's reducer, gloo's work), out of Python's reach; the rescue, run on the watch's thread,
recovers the rank in place instead (`recovery.reexec`): the new process joins the group as a lost rank's
replacement does, and receives a live peer's state.

It acts only on a rank that is provably stuck: its group broke, its watch shut the connections down, and after a
grace (RESCUE_SECONDS, or RESCUE_STEPS steps' compute for slow steps) the rank still has not left the group and is
still in the exchange it entered before the break. A rank that was computing when the group broke is not in an
exchange from before it, and its next exchange fails at once on the shut connections. Where the collective's own
timeout ends sooner than the grace, it is left to that timeout (the rank then heals without a new process).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ringleader_trainer.elastic import recovery
from ringleader_trainer.logs import log_json
from ringleader_trainer.metrics import RankPlace

RESCUE_SECONDS = 10.0  # the least grace: a healthy rank fails on shut connections in milliseconds
RESCUE_STEPS = 3.0  # the grace in steps of this rank's compute, for steps slower than RESCUE_SECONDS / 3


def grace(compute: float) -> float:
    """Seconds a rank gets to leave a broken group before it is taken for stuck, for `compute` seconds per step."""
    return max(RESCUE_SECONDS, RESCUE_STEPS * compute)


def stuck(started: float, shut_at: float) -> bool:
    """Whether a rank that entered its current exchange at `started` (Unix time; 0: in none) is in one it entered
    before its group's connections were shut down at `shut_at`."""
    return 0.0 < started < shut_at


class Rescue:
    """Called on a group watch's thread once it shut a broken group's connections down (at `shut_at`, Unix time),
    with the event its rank sets on leaving the group: waits the grace, and recovers the rank in place if it is
    still stuck in an exchange from before the break. `limit()`: the recoveries this rank may still start
    (`recovery.reexec`'s limit); with none left, or a collective timeout (`timeout`, seconds) no longer than the
    grace, the rank is left to that timeout."""

    def __init__(self, place: RankPlace, timeout: float, limit: Callable[[], int], **log: object) -> None:
        self.place, self.timeout, self.limit, self.log = place, timeout, limit, log

    def __call__(self, shut_at: float, left: threading.Event) -> None:
        wait = grace(self.place.compute)
        if wait >= self.timeout or left.wait(wait):
            return
        started = self.place.started  # read once: the training thread clears it when an exchange ends
        if not stuck(started, shut_at):
            return
        stuck_for = time.time() - started
        reason = (f"stuck {stuck_for:.0f} s in an exchange its group broke under (still {wait:.0f} s after the "
                  "group's connections were shut down)")  # fmt: skip
        log_json(**self.log, event="stuck", seconds=round(stuck_for, 1), grace=round(wait, 1))
        recovery.reexec(reason, self.limit())  # returns only when no recovery is left: the timeout ends it
