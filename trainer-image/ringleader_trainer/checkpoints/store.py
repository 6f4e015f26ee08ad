"""Checkpoints: one file per rank in a directory per step; a step is complete when every rank's file is there.

    <directory>/step-00000100/worker-0.pt ... worker-<N-1>.pt, ps-0.pt ... ps-<P-1>.pt

A rank writes its file under a temporary name in the same directory, fsyncs it and renames it into place, so a
file either is whole or is not there: a run killed mid-write leaves only a temporary file, which is ignored.
Files are `torch.save`d dicts of tensors and plain values, read back with `torch.load(weights_only=True)`:
loading a checkpoint never runs code from it.

Each step directory also names the world that wrote it (`world.json`: workers and parameter servers, plain
JSON), so a step is complete when every file of *that* world is there, whatever world reads it.

Resume: every rank proposes the newest complete step whose file loads (`propose`); the ranks take the
minimum (a collective in the strategy), which every rank has complete, and each loads its file of it: its
own, or, after an elastic resize to more workers (allreduce and local SGD, whose workers all hold the whole
model, and sharded, whose files hold only progress and RNG states beside the shards every world reads back),
worker 0's for a worker the old world did not have.
Worker 0 prunes all but the newest `keep` complete steps (and incomplete ones older than those).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import torch

from ringleader_trainer.exitcodes import ExitCode, TrainerError, one_line

FORMAT = 1
STEP_DIR = re.compile(r"^step-(\d{8,})$")
NO_CHECKPOINT = -1  # proposals: nothing complete yet
UNLOADABLE = -2  # complete steps exist but none of this rank's files loads


class CheckpointError(TrainerError):
    """A checkpoint exists but cannot be loaded (and no older one can)."""

    exit_code = ExitCode.CORRUPT_CHECKPOINT


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


WORLD_FILE = "world.json"
World = tuple[int, int]  # (workers, parameter servers)


def write_world(step_path: Path, world: World) -> None:
    """Record the world that writes this step (every rank writes the same content; the last rename wins)."""
    save_bytes(step_path / WORLD_FILE, json.dumps({"workers": world[0], "ps": world[1]}).encode())


def world_of(step_path: Path) -> World | None:
    """The world that wrote the step; None for a step from before worlds were recorded or an unreadable file."""
    try:
        data = json.loads((step_path / WORLD_FILE).read_text())
        return int(data["workers"]), int(data["ps"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def complete_in_own_world(directory: Path, default: World) -> list[tuple[int, World]]:
    """(step, the world that wrote it) for each step holding every file of that world, newest first; a step
    without a recorded world is taken as `default`'s."""
    out = []
    for s in steps(directory):
        path = step_dir(directory, s)
        world = world_of(path) or default
        if expected_files(*world) <= {p.name for p in path.iterdir()}:
            out.append((s, world))
    return out


def save_atomic(path: Path, state: dict[str, Any]) -> None:
    _write_atomic(path, lambda f: torch.save({"format": FORMAT, **state}, f))


def save_bytes(path: Path, data: bytes) -> None:
    _write_atomic(path, lambda f: f.write(data))


def _write_atomic(path: Path, write: Callable[[BinaryIO], object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
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
    elastic: bool = False  # every worker holds the whole model: a step of another worker count can be resumed

    @property
    def world(self) -> World:
        return self.num_workers, self.num_ps

    @property
    def expected(self) -> frozenset[str]:
        return expected_files(*self.world)

    def path(self, step: int) -> Path:
        """This rank's file of `step`, where it writes."""
        return step_dir(self.directory, step) / rank_file(self.role, self.index)

    def source(self, step: int, world: World | None = None) -> Path | None:
        """The file this rank resumes from at `step` (written by `world`, else the recorded one): its own, or
        worker 0's for a worker the old world did not have; None when the step cannot serve this world."""
        world = world or world_of(step_dir(self.directory, step)) or self.world
        if world == self.world:
            return self.path(step)
        if not self.elastic or world[1] or self.num_ps or self.role != "worker":
            return None
        index = self.index if self.index < world[0] else 0
        return step_dir(self.directory, step) / rank_file("worker", index)

    def propose(self) -> tuple[int, dict[str, Any] | None, list[str]]:
        """(newest complete step whose file this rank can load, its state, warnings about newer steps that
        could not serve). NO_CHECKPOINT when no complete step serves this world; UNLOADABLE when some would
        but none of their files loads."""
        warnings: list[str] = []
        usable = 0
        for step, world in complete_in_own_world(self.directory, self.world):
            path = self.source(step, world)
            if path is None:
                warnings.append(
                    f"checkpoint step {step} was written by {world[0]} workers and {world[1]} parameter servers; "
                    f"this job has {self.num_workers} and {self.num_ps} and cannot resume from it"
                )
                continue
            usable += 1
            try:
                return step, load(path), warnings
            except CheckpointError as e:
                warnings.append(str(e))
        return (UNLOADABLE if usable else NO_CHECKPOINT), None, warnings

    def due(self, step: int) -> bool:
        return step > 0 and step % self.interval == 0

    def save(self, step: int, state: dict[str, Any]) -> Path:
        path = self.path(step)
        write_world(path.parent, self.world)
        save_atomic(path, {"step": step, **state})
        if self.role == "worker" and self.index == 0:
            self.prune()
        return path

    def prune(self) -> None:
        """Keep the newest `keep` complete steps and anything newer (possibly still being written)."""
        complete = [s for s, _ in complete_in_own_world(self.directory, self.world)]
        if len(complete) <= self.keep:
            return
        oldest_kept = complete[self.keep - 1]
        for step in steps(self.directory):
            if step < oldest_kept:
                shutil.rmtree(step_dir(self.directory, step), ignore_errors=True)
