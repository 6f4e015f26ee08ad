"""Where a process's CPU goes: py-spy samples of it for a while, summed into its top frames.

`record(pid, seconds, out)` runs `py-spy record --format raw` (collapsed stacks: one line per distinct stack,
`outer;...;inner count`; py-spy leaves out samples of threads that are idle, so the counts are CPU) and
`top_frames(text)` turns them into the frames that held the most samples: by self (the innermost frame, where
the CPU was spent) and by total (any frame of the stack, the code that caused it).
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

RATE = 100  # samples a second


@dataclass(frozen=True)
class Frames:
    samples: int  # samples of a busy thread in the recording
    self_: list[tuple[str, int]]  # (frame, samples) where it was the innermost frame, most first
    total: list[tuple[str, int]]  # (frame, samples) of stacks it was on, most first


def record(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes]:
    """Start recording `pid` for `seconds` into `out` (raw collapsed stacks); the caller waits on the process."""
    spy = Path(sys.executable).with_name("py-spy")
    argv = [str(spy), "record", "--pid", str(pid), "--duration", str(max(1, round(seconds))), "--rate", str(RATE),
            "--format", "raw", "--output", str(out)]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


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
    """The `n` frames with the most samples, by self and by total, from py-spy's raw output."""
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
    return Frames(samples, own.most_common(n), total.most_common(n))


def describe(frames: Frames, cpu_seconds: float) -> list[str]:
    """Lines for a log or a note: each frame's share of the samples and of the CPU seconds measured."""
    lines = [f"{frames.samples} samples at {RATE} Hz, {cpu_seconds:.2f} CPU-s"]
    for title, rows in (("self", frames.self_), ("total", frames.total)):
        lines.append(f"  by {title}:")
        for frame, k in rows:
            share = k / frames.samples if frames.samples else 0.0
            lines.append(f"    {100 * share:5.1f}%  {frame}")
    return lines
