"""In-place recovery: a rank whose peer was lost starts a fresh copy of itself instead of exiting.

When a collective or a parameter-server exchange fails because another rank died, the survivors would
otherwise exit 201 and the operator would recreate every pod, counting a restart for each. Instead each
survivor replaces its training process with a fresh one (same command line, same pod): the new process
tears nothing down by hand (the old process group, sockets and threads die with the old process),
rendezvouses again with the replacement of the lost rank in a new incarnation of the group, agrees on the
newest complete checkpoint and continues from it. Only the rank that actually died is restarted by the
operator, and only it counts.

`python -m ringleader_trainer` runs under `supervise`: a parent that has imported torch once forks each
training process, and forks a new one when the last asks to recover. A fork costs milliseconds where a new
interpreter costs seconds of CPU (importing torch and torch._dynamo again), which every survivor paid at
the same moment as the replacement rank, on the same cores. A script of your own that calls `reexec`
without the supervisor replaces itself with `os.execv` instead.

The number of recoveries is carried in RINGLEADER_RECOVERIES; past the limit the rank exits 201 and the
operator's restart policy decides.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import traceback
from collections.abc import Callable, Mapping
from types import FrameType

from ringleader_trainer import exitrecord
from ringleader_trainer.env import LAUNCHED_BY, LOCAL_LAUNCH_ENV
from ringleader_trainer.exitcodes import ExitCode, exit_now
from ringleader_trainer.logs import log_json

RECOVERIES_ENV = "RINGLEADER_RECOVERIES"
# A forked training process's request to its supervisor for a fresh copy; never the container's exit code.
RECOVER_STATUS = 250
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
PR_SET_PDEATHSIG = 1  # linux/prctl.h
PR_SET_CHILD_SUBREAPER = 36


class _ThisProcess:
    supervised = False  # true in a training process forked by `supervise`


def recoveries() -> int:
    """How many times this rank has recovered in place so far."""
    try:
        return int(os.environ.get(RECOVERIES_ENV, "0"))
    except ValueError:
        return 0


def reexec(reason: str, limit: int) -> None:
    """Replace this process with a fresh copy of itself; returns only when `limit` recoveries are used up.

    Under `supervise` the process ends with RECOVER_STATUS and the supervisor forks the copy; otherwise
    it re-executes its own command line."""
    done = recoveries()
    if done >= limit:
        return
    log_json(event="recover", recovery=done + 1, reason=reason)
    if _ThisProcess.supervised:
        exit_now(RECOVER_STATUS)  # at once: no interpreter teardown that could wait on a stuck thread
    sys.stdout.flush()
    sys.stderr.flush()
    os.environ[RECOVERIES_ENV] = str(done + 1)
    _close_on_exec()
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


def supervise(main: Callable[[], int], preload: Callable[[], None] = lambda: None) -> int:
    """Run `main` in a forked child, again in a fresh child each time one asks to recover (`reexec`), and
    return the exit code of the last; a child killed by a signal makes this process die of the same signal.

    In a worker pod of several ranks (RINGLEADER_PROCS_PER_POD > 1, as the operator writes it) it forks one
    child per rank, each with its own RANK and LOCAL_RANK, and recovers each on its own. They end together:
    when one ends in failure (or by a signal) the others are killed and this process ends as that one did (the
    pod fails, and the operator replaces it with all its ranks); one that succeeds or stops cleanly waits for
    the rest, and the pod exits with the first non-zero code among them.

    `preload` runs once here before the first fork (imports every incarnation would otherwise repeat). It
    must start no threads the child needs (a forked child gets only the forking thread) and must not
    initialize CUDA (a forked child cannot use a CUDA context its parent made). Signals a pod receives
    (SIGTERM on deletion) are passed on to the children; each child dies with this process (PR_SET_PDEATHSIG),
    so a SIGKILL of either leaves nothing behind. Processes a training process leaves orphaned come to this
    one (as to a container's PID 1; elsewhere as their subreaper) and are reaped when they end."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    preload()
    ranks = local_ranks(os.environ)
    done = {local: recoveries() for local in ranks}
    children: dict[int, int] = {}  # pid -> the local rank it runs

    def forward(signum: int, _frame: FrameType | None) -> None:
        for pid in list(children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    previous = {s: signal.signal(s, forward) for s in FORWARDED_SIGNALS}

    def start(local: int) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            for s, handler in previous.items():
                signal.signal(s, handler)
            os.environ.update(ranks[local] | {RECOVERIES_ENV: str(done[local])})
            _run_child(main, parent)
        children[pid] = local

    for local in ranks:
        start(local)
    return _reap(children, done, start)


def _reap(children: dict[int, int], done: dict[int, int], start: Callable[[int], None]) -> int:
    """Wait on the children (pid -> its local rank) until all have ended: start again each that asks to recover
    (counted in `done`), keep the clean ends, and at the first failure kill the rest and end as it did (its exit
    code returned; its signal, which this process then dies of). The first non-zero clean end, else 0."""
    ended: list[int] = []
    while children:
        pid, status = os.waitpid(-1, 0)  # retried by Python after each forwarded signal (PEP 475)
        if pid not in children:
            continue  # an orphan a training process left behind, reaped
        local = children.pop(pid)
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == RECOVER_STATUS:
            done[local] += 1
            start(local)
            continue
        code = os.waitstatus_to_exitcode(status)
        if code in CLEAN_ENDS:
            ended.append(code)
            continue
        _kill_all(children)
        if os.WIFSIGNALED(status):
            _die_of(os.WTERMSIG(status))
        return code
    return next((c for c in ended if c), 0)


# A rank ending with these lets the pod's other ranks end as they will: success, and the agreed clean stop.
CLEAN_ENDS = (ExitCode.OK, ExitCode.STOPPED)


def local_ranks(env: Mapping[str, str]) -> dict[int, dict[str, str]]:
    """The variables each training process of this pod gets beyond the pod's own, by local rank: {0: {}} for a
    pod of one rank; in a worker pod of several (RINGLEADER_PROCS_PER_POD) not already started by a launcher,
    each its RANK (the pod's first, as the operator writes it, plus its local rank) and LOCAL_RANK. Values
    that are not numbers leave one process, which names the variable when it reads the contract."""
    try:
        procs = int(env.get("RINGLEADER_PROCS_PER_POD", "1"))
        first = int(env.get("RANK", "0"))
    except ValueError:
        return {0: {}}
    launched = any(env.get(name) for name in LAUNCHED_BY)
    if procs <= 1 or env.get("RINGLEADER_ROLE") != "worker" or launched:
        return {0: {}}
    return {
        local: {"RANK": str(first + local), "LOCAL_RANK": str(local), LOCAL_LAUNCH_ENV: "1"} for local in range(procs)
    }


def _kill_all(children: dict[int, int]) -> None:
    """SIGKILL every child left and reap them."""
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for pid in list(children):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    children.clear()


def _prctl(option: int, value: int) -> None:
    with contextlib.suppress(OSError, AttributeError):  # Linux only; elsewhere what it asks for is not done
        ctypes.CDLL(None, use_errno=True).prctl(option, value)


def _run_child(main: Callable[[], int], parent: int) -> None:
    _ThisProcess.supervised = True
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # elsewhere than Linux the child may outlive a SIGKILL of this one
    if os.getppid() != parent:  # the supervisor died before the prctl took effect
        exit_now(128 + signal.SIGKILL)
    try:
        code = main()
    except SystemExit as e:  # as the interpreter would: an int (or None: 0) is the code, a message exits 1
        if isinstance(e.code, int | None):
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException as e:
        traceback.print_exc()
        exitrecord.write(1, e)  # after the traceback: the last line, where the operator reads it
        code = 1
    exit_now(code)


def _die_of(signum: int) -> None:
    """End this process by `signum`, as the child did; as PID 1 (where the kernel ignores a signal with no
    handler) exit 128+signum, the code a shell or the container runtime reports for it."""
    with contextlib.suppress(OSError):  # SIGKILL and SIGSTOP have no handler to reset
        signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    exit_now(128 + signum)


def _close_on_exec() -> None:
    """torch's sockets (the rendezvous store's listener, gloo's pairs and event loop) are not close-on-exec:
    inherited, they would keep the store's port bound and hide this rank's departure from its peers. Closing
    them now would pull them from under gloo's running threads (which abort), so mark them to close at exec."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2:
            with contextlib.suppress(OSError):  # the directory's own fd is gone by now
                os.set_inheritable(fd, False)
