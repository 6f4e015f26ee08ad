"""Running the host tools the dev cluster's nodes and images need, with one error type and one-line messages."""

from __future__ import annotations

import contextlib
import subprocess
import threading
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path


class RealNodeError(Exception):
    """One line for the user: what is wrong and what to do."""


def run(argv: list[str], what: str, timeout: float = 120, cwd: Path | None = None) -> str:
    """Run a tool to completion and return its standard output; RealNodeError with the tool's last output line
    when it fails, is missing or outlives `timeout` seconds."""
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd)
    except subprocess.TimeoutExpired as e:
        raise RealNodeError(f"{what}: {Path(argv[0]).name} did not finish within {timeout:.0f}s") from e
    except FileNotFoundError as e:
        raise RealNodeError(f"{what}: {argv[0]} not found (make dev-cluster installs it)") from e
    if res.returncode != 0:
        lines = (res.stderr + res.stdout).strip().splitlines()
        raise RealNodeError(f"{what} failed: {lines[-1] if lines else f'exit code {res.returncode}'}")
    return res.stdout


def run_lines(
    argv: list[str], what: str, on_line: Callable[[str], None], timeout: float, cwd: Path | None = None
) -> int:
    """Run a tool, handing each line of its output (standard output and error together) to `on_line` as it comes,
    and return its exit code; RealNodeError when it is missing or outlives `timeout` seconds (it is killed)."""
    try:
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", cwd=cwd
        )
    except FileNotFoundError as e:
        raise RealNodeError(f"{what}: {argv[0]} not found (make dev-cluster installs it)") from e
    late = threading.Event()

    def kill() -> None:
        late.set()
        proc.kill()

    timer = threading.Timer(timeout, kill)
    timer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            on_line(line.rstrip("\n"))
        code = proc.wait()
    finally:
        timer.cancel()
        if proc.poll() is None:  # interrupted: the tool goes too
            proc.kill()
            proc.wait()
    if late.is_set():
        raise RealNodeError(f"{what}: {Path(argv[0]).name} did not finish within {timeout:.0f}s")
    return code


def remove_empty_dirs(dirs: Iterable[Path]) -> None:
    """Remove each folder of `dirs` that is empty, in the order given (children first); others stay: another
    program on this machine may use them."""
    for d in dirs:
        with contextlib.suppress(OSError):
            d.rmdir()


def http_ok(url: str) -> bool:
    """True when a plain-HTTP GET of `url` (a local daemon's health endpoint) answers 200 within 2 s."""
    try:
        with urllib.request.urlopen(url, timeout=2) as res:
            return bool(res.status == 200)
    except OSError:
        return False
