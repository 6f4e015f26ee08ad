"""The idle profile's summary: py-spy's collapsed stacks summed by innermost frame and by any frame."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.profile import Recording, describe, frame_name, top_frames

KOPF = "<module> (/opt/venv/lib/python3.11/site-packages/kopf/_core/reactor/running.py:{})"
PLAN = "plan (/home/u/ringleader/operator/ringleader_operator/reconcile.py:{})"
RAW = "\n".join(
    [
        f"{KOPF.format(120)};{PLAN.format(88)};deepcopy (/usr/lib/python3.11/copy.py:128) 30",
        f"{KOPF.format(120)};{PLAN.format(91)} 10",
        f"{KOPF.format(121)};loads (/usr/lib/python3.11/json/__init__.py:346) 60",
        "not a stack line",
    ]
)


@pytest.mark.parametrize(
    ("frame", "name"),
    [
        ("plan (/home/u/ringleader/operator/ringleader_operator/reconcile.py:88)",
         "plan (ringleader_operator/reconcile.py)"),
        ("run (/opt/venv/lib/python3.11/site-packages/kopf/_core/reactor/running.py:120)",
         "run (kopf/_core/reactor/running.py)"),
        ("deepcopy (/usr/lib/python3.11/copy.py:128)", "deepcopy (3.11/copy.py)"),
        ("<module>", "<module>"),
    ],
)  # fmt: skip
def test_a_frame_is_named_by_function_and_path_from_its_package(frame: str, name: str) -> None:
    assert frame_name(frame) == name


def test_samples_are_summed_by_innermost_frame_and_by_any_frame_of_the_stack() -> None:
    frames = top_frames(RAW, n=3)
    assert frames.samples == 100
    assert frames.self_ == [("loads (3.11/json/__init__.py)", 60), ("deepcopy (3.11/copy.py)", 30),
                            ("plan (ringleader_operator/reconcile.py)", 10)]  # fmt: skip
    # A function on the stack through two of its lines counts once per sample; the frame on every stack is left
    # out of the totals.
    assert frames.total == [("loads (3.11/json/__init__.py)", 60), ("plan (ringleader_operator/reconcile.py)", 40),
                            ("deepcopy (3.11/copy.py)", 30)]  # fmt: skip
    lines = describe(frames, 1.5)
    assert lines[:3] == ["100 samples at 100 Hz, 1.50 CPU-s", "  by self:", "     60.0%  loads (3.11/json/__init__.py)"]


def test_no_samples_describe_an_empty_profile() -> None:
    frames = top_frames("")
    assert (frames.samples, frames.self_, frames.total) == (0, [], [])
    assert describe(frames, 0.0) == ["0 samples at 100 Hz, 0.00 CPU-s", "  by self:", "  by total:"]


def test_a_recording_stopped_by_sigint_keeps_the_busy_function(tmp_path: Path) -> None:
    """py-spy attached to a busy child until stopped: what it wrote names the function that spun."""
    busy = "def spin():\n    while True:\n        sum(range(10000))\nspin()"
    child = subprocess.Popen([sys.executable, "-c", busy])
    try:
        time.sleep(0.5)
        recording = Recording(child.pid, tmp_path / "spy.txt")
        time.sleep(2)
        lines = recording.stop(2.0)
    finally:
        child.kill()
    assert lines[0].startswith(tuple(f"{n} samples" for n in range(50, 400))), lines[0]
    assert "spin (<string>)" in lines[2], lines
