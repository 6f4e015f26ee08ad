"""In-place recovery: a rank whose peer was lost replaces its own process instead of exiting.

When a collective or a parameter-server exchange fails because another rank died, the survivors would
otherwise exit 201 and the operator would recreate every pod, counting a restart for each. Instead each
survivor re-executes itself (`os.execv`, same command line, same pod): the new process tears nothing down
by hand (the old process group, sockets and threads die with the old image), rendezvouses again with the
replacement of the lost rank in a new incarnation of the group, agrees on the newest complete checkpoint and
continues from it. Only the rank that actually died is restarted by the operator, and only it counts.

The number of recoveries is carried across exec in RINGLEADER_RECOVERIES; past the limit the rank exits 201
and the operator's restart policy decides.
"""

from __future__ import annotations

import contextlib
import os
import sys

from ringleader_trainer.strategy import log_json

RECOVERIES_ENV = "RINGLEADER_RECOVERIES"


def recoveries() -> int:
    """How many times this rank has recovered in place so far."""
    try:
        return int(os.environ.get(RECOVERIES_ENV, "0"))
    except ValueError:
        return 0


def reexec(reason: str, limit: int) -> None:
    """Replace this process with a fresh copy of itself; returns only when `limit` recoveries are used up."""
    done = recoveries()
    if done >= limit:
        return
    log_json(event="recover", recovery=done + 1, reason=reason)
    sys.stdout.flush()
    sys.stderr.flush()
    os.environ[RECOVERIES_ENV] = str(done + 1)
    _close_on_exec()
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


def _close_on_exec() -> None:
    """torch's sockets (the rendezvous store's listener, gloo's pairs and event loop) are not close-on-exec:
    inherited, they would keep the store's port bound and hide this rank's departure from its peers. Closing
    them now would pull them from under gloo's running threads (which abort), so mark them to close at exec."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2:
            with contextlib.suppress(OSError):  # the directory's own fd is gone by now
                os.set_inheritable(fd, False)
