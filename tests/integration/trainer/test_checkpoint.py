"""Checkpoint files: atomic, complete only with every rank's file, agreed resume, pruning, safe loading."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from ringleader_trainer.checkpoints import store as ckpt
from ringleader_trainer.checkpoints.store import Checkpointer, CheckpointError


def rank(
    tmp_path: Path, role: str = "worker", index: int = 0, workers: int = 2, ps: int = 0, keep: int = 2
) -> Checkpointer:
    return Checkpointer(tmp_path, role, index, workers, ps, interval=10, keep=keep)


def save_all(tmp_path: Path, step: int, workers: int = 2, ps: int = 0) -> None:
    for i in range(workers):
        rank(tmp_path, "worker", i, workers, ps, keep=99).save(step, {"x": torch.tensor([step, i])})
    for i in range(ps):
        rank(tmp_path, "ps", i, workers, ps, keep=99).save(step, {"x": torch.tensor([step])})


def test_nothing_to_resume_from_an_empty_or_missing_directory(tmp_path: Path) -> None:
    assert rank(tmp_path / "none").propose()[0] == ckpt.NO_CHECKPOINT
    assert rank(tmp_path).propose()[0] == ckpt.NO_CHECKPOINT


def test_a_step_counts_only_once_every_rank_wrote_its_file(tmp_path: Path) -> None:
    save_all(tmp_path, 10, workers=2, ps=1)
    rank(tmp_path, "worker", 0, 2, 1).save(20, {"x": torch.tensor([20])})  # worker 1 and the shard never did
    assert ckpt.complete_steps(tmp_path, ckpt.expected_files(2, 1)) == [10]
    step, state, warnings = rank(tmp_path, "worker", 1, 2, 1).propose()
    assert step == 10 and state is not None and state["x"].tolist() == [10, 1] and warnings == []


def test_a_half_written_file_is_invisible(tmp_path: Path) -> None:
    save_all(tmp_path, 10)
    (ckpt.step_dir(tmp_path, 20)).mkdir()
    (ckpt.step_dir(tmp_path, 20) / ".worker-0.pt.abc.tmp").write_bytes(b"half")  # what a kill mid-write leaves
    assert rank(tmp_path).propose()[0] == 10


def test_a_corrupt_newest_file_falls_back_to_the_older_step_with_a_warning(tmp_path: Path) -> None:
    save_all(tmp_path, 10)
    save_all(tmp_path, 20)
    path = rank(tmp_path).path(20)
    path.write_bytes(path.read_bytes()[:100])  # truncated
    step, _, warnings = rank(tmp_path).propose()
    assert step == 10 and len(warnings) == 1 and str(path) in warnings[0] and "\n" not in warnings[0]


def test_no_loadable_file_is_unloadable_not_a_fresh_start(tmp_path: Path) -> None:
    save_all(tmp_path, 10)
    rank(tmp_path).path(10).write_bytes(b"garbage")
    step, state, warnings = rank(tmp_path).propose()
    assert (step, state) == (ckpt.UNLOADABLE, None) and "cannot be loaded" in warnings[0]


class Payload:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("echo pwned",))


def test_loading_never_runs_code_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "evil.pt"
    torch.save({"format": ckpt.FORMAT, "x": Payload()}, path)
    with pytest.raises(CheckpointError, match="cannot be loaded"):
        ckpt.load(path)


def test_foreign_files_are_refused(tmp_path: Path) -> None:
    torch.save({"weights": torch.zeros(1)}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="not a ringleader checkpoint"):
        ckpt.load(tmp_path / "other.pt")


def test_worker_zero_keeps_the_newest_complete_steps(tmp_path: Path) -> None:
    for step in (10, 20, 30, 40):
        save_all(tmp_path, step)
    rank(tmp_path, "worker", 1).save(50, {})  # incomplete and newer: kept, may still be being written
    rank(tmp_path, "worker", 0, keep=2).prune()
    assert ckpt.steps(tmp_path) == [50, 40, 30]


@pytest.mark.parametrize(("step", "due"), [(0, False), (5, False), (10, True), (20, True), (21, False)])
def test_due_every_interval(tmp_path: Path, step: int, due: bool) -> None:
    assert rank(tmp_path).due(step) is due


def elastic(tmp_path: Path, index: int, workers: int, ps: int = 0) -> Checkpointer:
    return Checkpointer(tmp_path, "worker", index, workers, ps, interval=10, keep=2, elastic=True)


@pytest.mark.parametrize(
    ("old", "new", "index", "loads"),
    [
        (4, 2, 1, [20, 1]),  # fewer workers: each keeps its own file
        (2, 3, 1, [20, 1]),
        (2, 3, 2, [20, 0]),  # a worker the old world did not have starts from worker 0's (all hold the model)
        (4, 4, 3, [20, 3]),
    ],
    ids=["4->2", "2->3-old-rank", "2->3-new-rank", "same"],
)
def test_an_elastic_job_resumes_from_a_step_of_another_worker_count(
    tmp_path: Path, old: int, new: int, index: int, loads: list[int]
) -> None:
    save_all(tmp_path, 10, workers=old)
    save_all(tmp_path, 20, workers=old)
    rank(tmp_path, "worker", 0, old, 0).save(30, {"x": torch.tensor([30, 0])})  # incomplete in its own world
    step, state, warnings = elastic(tmp_path, index, new).propose()
    assert step == 20 and state is not None and state["x"].tolist() == loads and warnings == []
    assert ckpt.world_of(ckpt.step_dir(tmp_path, 20)) == (old, 0)


def test_a_step_is_complete_only_in_the_world_that_wrote_it(tmp_path: Path) -> None:
    # 3 of 4 files look like a complete 3-worker step unless the world is recorded: it is not complete.
    for i in range(3):
        rank(tmp_path, "worker", i, 4, 0).save(10, {"x": torch.tensor([10, i])})
    assert elastic(tmp_path, 0, 3).propose()[0] == ckpt.NO_CHECKPOINT


def test_a_non_elastic_job_does_not_resume_another_worlds_step(tmp_path: Path) -> None:
    save_all(tmp_path, 10, workers=2, ps=1)
    step, state, warnings = rank(tmp_path, "worker", 0, 3, 1).propose()
    assert (step, state) == (ckpt.NO_CHECKPOINT, None)
    assert warnings == [
        "checkpoint step 10 was written by 2 workers and 1 parameter servers; this job has 3 and 1 and cannot "
        "resume from it"
    ]


def test_pruning_counts_steps_complete_in_their_own_world(tmp_path: Path) -> None:
    save_all(tmp_path, 10, workers=4)
    save_all(tmp_path, 20, workers=4)
    save_all(tmp_path, 30, workers=2)
    elastic(tmp_path, 0, 2).prune()  # keep=2: 20 (a 4-worker step) and 30 stay
    assert ckpt.steps(tmp_path) == [30, 20]
