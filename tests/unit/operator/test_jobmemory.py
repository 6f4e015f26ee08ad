"""A job's record (jobmemory.py): a job read again keeps the ranks of its last parse where its status.ranks are the
same as written, and reads exactly what a whole parse reads."""

from __future__ import annotations

from typing import Any

import pytest
from ringleader_api import TrainingJob
from ringleader_operator.jobmemory import parse_job

from tests.unit.operator.builders import TEMPLATE


def body(status: Any) -> dict[str, Any]:
    meta = {"name": "j", "namespace": "ns", "uid": "u", "generation": 1}
    out: dict[str, Any] = {"metadata": meta, "spec": {"workers": {"replicas": 4, "template": TEMPLATE}}}
    return out if status is None else out | {"status": status}


RANKS = {"worker-0-3": {"podSeen": True}}
OTHER = {"worker-0-2": {"podSeen": True}, "worker-3": {"restarts": 1, "podSeen": True}}


@pytest.mark.parametrize(
    ("before", "after", "kept"),
    [
        ({"ranks": RANKS, "workers": "0/4"}, {"ranks": RANKS, "workers": "4/4"}, True),  # only the counts changed
        ({"ranks": RANKS}, {"ranks": OTHER}, False),  # a rank's entry changed: read again
        ({"ranks": RANKS}, {"ranks": {}}, False),  # nothing to keep
        (None, {"ranks": RANKS}, False),  # no status before
        ({"ranks": RANKS}, None, False),  # no status now
        ({"ranks": RANKS}, "not an object", False),  # the models' error, as a whole parse gives it
    ],
    ids=["counts-only", "entry-changed", "ranks-emptied", "no-status-before", "no-status-now", "invalid-status"],
)
def test_a_job_read_again_keeps_its_ranks_only_where_they_are_the_same_as_written(
    before: Any, after: Any, kept: bool
) -> None:
    first_body = body(before)
    first = (first_body, TrainingJob.model_validate(first_body))
    new = body(after)
    try:
        whole = TrainingJob.model_validate(new)
    except ValueError as e:
        with pytest.raises(type(e)):
            parse_job(new, first)
        return
    job = parse_job(new, first)
    assert job == whole  # exactly what a whole parse reads
    assert (job.status.ranks is first[1].status.ranks) == kept
    assert parse_job(new, None) == whole
