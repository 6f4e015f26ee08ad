"""Percent done, the time left and the final step, from what worker 0 reports: table-style."""

from __future__ import annotations

from typing import Any

import pytest
from ringleader_api import Progress
from ringleader_operator.estimates import finished, with_estimates


@pytest.mark.parametrize(
    ("reported", "want"),
    [
        ({"step": 150, "totalSteps": 600, "stepSeconds": 0.2}, (25.0, 90)),  # 450 steps left at 0.2 s
        ({"step": 150, "totalSteps": 600}, (25.0, None)),  # no step time yet: no ETA
        ({"step": 150}, (None, None)),  # the script did not say how many steps: neither
        ({"step": 700, "totalSteps": 600, "stepSeconds": 0.2}, (100.0, 0)),  # a lie past the end: capped
        ({"step": 1, "totalSteps": 3, "stepSeconds": 0.0004}, (33.3, 1)),  # rounded up: never "0 s" too soon
    ],
)
def test_percent_and_eta(reported: dict[str, Any], want: tuple[Any, ...]) -> None:
    p = with_estimates(Progress.model_validate(reported))
    assert (p.percent, p.eta_seconds) == want


def test_a_finished_job_shows_its_last_step_and_nothing_left() -> None:
    p = finished(Progress.model_validate({"step": 580, "totalSteps": 600, "stepSeconds": 0.5, "percent": 96.7}))
    assert (p.step, p.percent, p.eta_seconds) == (600, 100.0, 0)
    untold = Progress.model_validate({"step": 580})
    assert finished(untold) == untold  # without a total the last scrape is all there is
