"""The step a stop saved, from the stopping ranks' exit records (policies/saves.py): a suspend's, an eviction's,
a resize's; status.progress says it, and the round writes status.progress."""

from __future__ import annotations

from typing import Any

import pytest
from ringleader_api import Role
from ringleader_operator.reading import Reading
from ringleader_operator.reconcile import plan

from ..builders import NOW, job, pod

W = Role.WORKER


def stopped(index: int, saved: int | None, deleting: bool = True) -> dict[str, Any]:
    """Worker `index`, ended by a clean stop (202) whose exit record says it saved step `saved` (None: no record)."""
    record = f'ringleader-trainer: stopped: ...\n{{"event": "exit", "code": 202, "savedStep": {saved}}}\n'
    return pod(W, index, "Failed", exit_code=202, deleting=deleting, output=record if saved is not None else "")


@pytest.mark.parametrize(
    ("spec", "progress", "pods", "want"),
    [
        # (spec, status.progress, the pods) -> (lastCheckpointStep, step) written, None: not written by the round
        ({"runPolicy": {"suspend": True}}, {"step": 530, "lastCheckpointStep": 500}, [stopped(0, 541), stopped(1, 541)],
         (541, 541)),  # suspended past step 500: the save of the stop, not the last interval's (or 0)
        ({"runPolicy": {"suspend": True}}, None, [stopped(0, 12)], (12, 12)),  # before any scrape
        ({}, {"step": 530, "lastCheckpointStep": 500}, [pod(W, 0, "Running"), stopped(1, 531, deleting=False)],
         (531, 531)),  # an eviction: the peer saved with it
        ({"runPolicy": {"suspend": True}}, {"step": 530, "lastCheckpointStep": 541}, [stopped(0, 541)], None),
        ({"runPolicy": {"suspend": True}}, {"step": 530, "lastCheckpointStep": 500}, [stopped(0, None)], None),
        ({}, {"step": 530, "lastCheckpointStep": 500}, [pod(W, 0, "Running"), pod(W, 1, "Failed", exit_code=1,
                                                       output='{"event": "exit", "code": 1, "savedStep": 900}')],
         None),  # only a clean stop's record says what was saved
    ],
    ids=["suspend", "suspend-unscraped", "eviction", "known", "no-record", "not-a-stop"],
)  # fmt: skip
def test_the_step_a_stop_saved_is_in_status(
    spec: dict[str, Any], progress: dict[str, Any] | None, pods: list[dict[str, Any]], want: tuple[int, int] | None
) -> None:
    status = {"phase": "Running", "progress": {**progress, "updatedAt": NOW} if progress else None}
    p = plan(Reading(job(status=status, checkpoint={"intervalSteps": 100}, **spec), pods, True), NOW)
    if want is None:
        assert not p.writes_progress
        return
    assert p.writes_progress and p.status.progress is not None
    assert (p.status.progress.last_checkpoint_step, p.status.progress.step) == want
