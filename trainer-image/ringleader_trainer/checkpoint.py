"""Checkpoints: one file per rank in a directory per step; a step is complete when every rank's file is there.

    <directory>/step-00000100/worker-0.pt ... worker-<N-1>.pt, ps-0.pt ... ps-<P-1>.pt

A rank writes its file under a temporary name in the same directory, fsyncs it and renames it into place, so a
file either is whole or is not there: a run killed mid-write leaves only a temporary file, which is ignored.
Files are `torch.save`d dicts of tensors and plain values, read back with `torch.load(weights_only=True)`:
loading a checkpoint never runs code from it.

Resume: every rank proposes the newest complete step whose own file loads (`propose`); the ranks take the
minimum (a collective in the strategy), which every rank has complete, and each loads its own file of it.
Worker 0 prunes all but the newest `keep` complete steps (and incomplete ones older than those).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ringleader_trainer.exitcodes import one_line

FORMAT = 1
STEP_DIR = re.compile(r"^step-(\d{8,})$")
NO_CHECKPOINT = -1  # proposals: nothing complete yet
UNLOADABLE = -2  # complete steps exist but none of this rank's files loads


class CheckpointError(Exception):
    """A checkpoint exists but cannot be loaded (and no older one can)."""


def step_dir(directory: Path, step: int) -> Path:
    return directory / f"step-{step:08d}"


def rank_file(role: str, index: int) -> str:
    return f"{role}-{index}.pt"


def expected_files(num_workers: int, num_ps: int) -> frozenset[str]:
    return frozenset([rank_file("worker", i) for i in range(num_workers)] + [rank_file("ps", i) for i in range(num_ps)])


def steps(directory: Path) -> list[int]:
    """Every step directory, newest first."""
    if not directory.is_dir():
        return []
    found = [int(m.group(1)) for p in directory.iterdir() if (m := STEP_DIR.match(p.name)) and p.is_dir()]
    return sorted(found, reverse=True)


def complete_steps(directory: Path, expected: frozenset[str]) -> list[int]:
    """Steps whose directory holds every expected file, newest first."""
    return [s for s in steps(directory) if expected <= {p.name for p in step_dir(directory, s).iterdir()}]


def save_atomic(path: Path, state: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save({"format": FORMAT, **state}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a crash
    finally:
        os.close(dir_fd)


def load(path: Path) -> dict[str, Any]:
    """Load one rank's file; CheckpointError (one line, naming the file) if it is unreadable or foreign."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises several types for truncated or foreign files
        raise CheckpointError(f"checkpoint {path} cannot be loaded: {one_line(e)}") from e
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {path} is not a ringleader checkpoint (format {FORMAT})")
    return state


@dataclass
class Checkpointer:
    """One rank's view of the checkpoint directory."""

    directory: Path
    role: str
    index: int
    num_workers: int
    num_ps: int
    interval: int
    keep: int

    @property
    def expected(self) -> frozenset[str]:
        return expected_files(self.num_workers, self.num_ps)

    def path(self, step: int) -> Path:
        return step_dir(self.directory, step) / rank_file(self.role, self.index)

    def propose(self) -> tuple[int, dict[str, Any] | None, list[str]]:
        """(newest complete step whose own file loads, its state, warnings about newer unloadable files).
        NO_CHECKPOINT when nothing is complete; UNLOADABLE when no complete step's own file loads."""
        warnings: list[str] = []
        complete = complete_steps(self.directory, self.expected)
        for step in complete:
            try:
                return step, load(self.path(step)), warnings
            except CheckpointError as e:
                warnings.append(str(e))
        return (UNLOADABLE if complete else NO_CHECKPOINT), None, warnings

    def due(self, step: int) -> bool:
        return step > 0 and step % self.interval == 0

    def save(self, step: int, state: dict[str, Any]) -> Path:
        path = self.path(step)
        save_atomic(path, {"step": step, **state})
        if self.role == "worker" and self.index == 0:
            self.prune()
        return path

    def prune(self) -> None:
        """Keep the newest `keep` complete steps and anything newer (possibly still being written)."""
        complete = complete_steps(self.directory, self.expected)
        if len(complete) <= self.keep:
            return
        oldest_kept = complete[self.keep - 1]
        for step in steps(self.directory):
            if step < oldest_kept:
                shutil.rmtree(step_dir(self.directory, step), ignore_errors=True)
