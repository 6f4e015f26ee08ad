"""Rank processes forked from a server that imported torch once (multiprocessing's forkserver), for the
trainer's tests: each `python -m ringleader_trainer` otherwise spends about 3.5 CPU-seconds importing torch
before its first line runs, which on a 2-core machine made those imports the larger part of the suite.

The child runs the same command line the plain process would: `-m <module>` or a script, with its own
environment, argv and log files, through `runpy` as the interpreter does. What it shares with the server is
torch's (and numpy's) already-imported modules, nothing of ours: every `ringleader_*` module is imported
fresh in the child, after its environment is in place. Two things differ from a fresh interpreter and are
handled here: OpenMP read OMP_NUM_THREADS when the server loaded torch, so the server starts with the value
every rank gets (`THREADS`, what `launch` writes) and a rank asking for another runs as a plain process (a
forked child must not set torch's thread count itself: its own forks, the trainer's training processes,
would then find torch's thread pool invalid); and a multiprocessing child ends with `os._exit`, so the child
runs its `atexit` functions itself. Exit codes are the interpreter's: the code of `SystemExit`, 1 for an
uncaught exception (its traceback on stderr), -N when signal N ended it.

Benchmarks keep plain processes (`tests.support.launch`'s default): a rank's start-up is part of what they time.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import signal
import subprocess
import sys
from multiprocessing import forkserver
from multiprocessing.context import ForkServerContext
from pathlib import Path

# What the server imports once; anything that fails to import is left to the child (forkserver ignores it).
PRELOAD = ["torch", "torch.distributed", "torch.nn", "torch.optim", "numpy"]
THREADS = "1"  # OMP_NUM_THREADS of the server, hence of every forked rank


@functools.cache
def context() -> ForkServerContext:
    """The forkserver context, with its preload set on first use (the server starts with the first child)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    before = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = THREADS  # the server's environment, read by OpenMP as it loads
    try:
        forkserver.ensure_running()
    finally:
        if before is None:
            del os.environ["OMP_NUM_THREADS"]
        else:
            os.environ["OMP_NUM_THREADS"] = before
    return ctx


def _redirect(fd: int, path: str) -> None:
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(target, fd)
    os.close(target)


def _child(command: list[str], env: dict[str, str], out: str, err: str) -> None:
    """Runs in the forked child: `command` as `sys.executable` would run it, output appended to `out`/`err`."""
    import atexit
    import runpy

    _redirect(1, out)
    _redirect(2, err)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    # A fresh interpreter's streams for files: stdout block-buffered, stderr line-buffered.
    sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1)  # noqa: SIM115
    os.environ.clear()
    os.environ.update(env)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.orig_argv = list(command)  # what a rank re-executes to recover in place without a supervisor
    try:
        if command[1] == "-m":
            sys.argv = [command[2], *command[3:]]
            runpy.run_module(command[2], run_name="__main__", alter_sys=True)
        else:
            script = command[1]
            sys.argv = [script, *command[2:]]
            sys.path.insert(0, str(Path(script).resolve().parent))
            runpy.run_path(script, run_name="__main__")
    finally:
        atexit._run_exitfuncs()


class Forked:
    """The parts of `subprocess.Popen` the tests use, for a child of the forkserver running `command`
    (`[python, -m, module, ...]` or `[python, script, ...]`); `env` must pass `can_fork`."""

    def __init__(self, command: list[str], env: dict[str, str], out: Path, err: Path) -> None:
        self.args = command
        self._process = context().Process(target=_child, args=(command, env, str(out), str(err)), daemon=True)
        self._process.start()
        assert self._process.pid is not None
        self.pid: int = self._process.pid

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        code = self._process.exitcode
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # as Popen: no signal to a process already reaped (its pid may be reused)
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def can_fork(env: dict[str, str]) -> bool:
    """Whether a rank with environment `env` runs as a forked child as it would as a process of its own."""
    return env.get("OMP_NUM_THREADS") == THREADS
