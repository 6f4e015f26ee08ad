"""Where a process's CPU goes: py-spy samples of it for a while, summed into its top frames.

`record(pid, seconds, out)` runs `py-spy record --format raw` (collapsed stacks: one line per distinct stack,
`outer;...;inner count`; py-spy leaves out samples of threads that are idle, so the counts are CPU) and
`top_frames(text)` turns them into the frames that held the most samples: by self (the innermost frame, where
the CPU was spent) and by total (any frame of the stack, the code that caused it).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

RATE = 100  # samples a second
EVERYWHERE = 0.9  # a frame on this share of the stacks or more is left out of the totals


@dataclass(frozen=True)
class Frames:
    samples: int  # samples of a busy thread in the recording
    self_: list[tuple[str, int]]  # (frame, samples) where it was the innermost frame, most first
    total: list[tuple[str, int]]  # (frame, samples) of stacks it was on, most first


def record(pid: int, seconds: float | None, out: Path) -> subprocess.Popen[bytes]:
    """Start recording `pid` into `out` (raw collapsed stacks) for `seconds` (None: until stopped with SIGINT,
    which makes py-spy write what it has); the caller waits on the process (`Recording` does both)."""
    spy = Path(sys.executable).with_name("py-spy")
    argv = [str(spy), "record", "--pid", str(pid), "--rate", str(RATE), "--format", "raw", "--output", str(out)]
    if seconds is not None:
        argv += ["--duration", str(max(1, round(seconds)))]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


class Recording:
    """py-spy attached to a process from now until `stop` (or its `seconds` run out)."""

    def __init__(self, pid: int, out: Path, seconds: float | None = None) -> None:
        self.out, self.seconds = out, seconds
        self.spy = record(pid, seconds, out)

    def stop(self, cpu_seconds: float) -> list[str]:
        """Stop (or wait for the set duration to end) and describe the samples against `cpu_seconds`."""
        if self.seconds is None and self.spy.poll() is None:
            self.spy.send_signal(signal.SIGINT)
        _, err = self.spy.communicate(timeout=(self.seconds or 0) + 60)
        if not self.out.exists():
            raise SystemExit(
                f"bench: py-spy wrote nothing ({self.spy.returncode}): {err.decode(errors='replace')[-500:]}"
            )
        return describe(top_frames(self.out.read_text()), cpu_seconds)


def frame_name(frame: str) -> str:
    """`plan (ringleader_operator/reconcile.py:120)` -> `plan (ringleader_operator/reconcile.py)`: a function,
    whichever of its lines the sample was on; the path from the package directory on (no machine's paths)."""
    name, _, where = frame.partition(" (")
    path = where.rsplit(":", 1)[0].rstrip(")")
    for marker in ("site-packages/", "lib/python"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    else:
        path = "/".join(path.split("/")[-2:])
    return f"{name} ({path})" if path else name


def top_frames(text: str, n: int = 10) -> Frames:
    """The `n` frames with the most samples, by self and by total (leaving out frames on EVERYWHERE of the
    stacks or more: the event loop's), from py-spy's raw output."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        k = int(count)
        frames = [frame_name(f) for f in stack.split(";") if f and not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        samples += k
        own[frames[-1]] += k
        for f in set(frames):
            total[f] += k
    # The frames on (nearly) every stack are the event loop's and the program's entry: they say nothing.
    telling = Counter({f: k for f, k in total.items() if k < EVERYWHERE * samples})
    return Frames(samples, own.most_common(n), telling.most_common(n))


def describe(frames: Frames, cpu_seconds: float) -> list[str]:
    """Lines for a log or a note: each frame's share of the samples and of the CPU seconds measured."""
    lines = [f"{frames.samples} samples at {RATE} Hz, {cpu_seconds:.2f} CPU-s"]
    for title, rows in (("self", frames.self_), ("total", frames.total)):
        lines.append(f"  by {title}:")
        for frame, k in rows:
            share = k / frames.samples if frames.samples else 0.0
            lines.append(f"    {100 * share:5.1f}%  {frame}")
    return lines
