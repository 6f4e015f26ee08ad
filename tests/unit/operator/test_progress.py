"""Parsing rank 0's metrics page into status.progress."""

from __future__ import annotations

import pytest
from ringleader_operator.progress import ScrapeError, parse

NOW = "2026-01-01T00:00:00Z"
PAGE = """# HELP ringleader_trainer_step Optimizer steps done.
# TYPE ringleader_trainer_step gauge
ringleader_trainer_step 1200.0
# TYPE ringleader_trainer_loss gauge
ringleader_trainer_loss 0.123456789
# TYPE ringleader_trainer_samples_per_second gauge
ringleader_trainer_samples_per_second 4321.987
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.0
"""


def test_parse_full_page() -> None:
    p = parse(PAGE, NOW)
    assert p is not None
    assert (p.step, p.loss, p.samples_per_second, p.updated_at) == (1200, 0.123457, 4321.99, NOW)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("ringleader_trainer_step 5\n", (5, None, None)),
        ("ringleader_trainer_step 5\nringleader_trainer_loss NaN\n", (5, None, None)),
        ("ringleader_trainer_loss 1.0\n", None),
        ("", None),
    ],
    ids=["step-only", "nan-loss-dropped", "no-step", "empty"],
)
def test_parse_partial_pages(text: str, want: tuple[int, float | None, float | None] | None) -> None:
    p = parse(text, NOW)
    assert (None if p is None else (p.step, p.loss, p.samples_per_second)) == want


def test_garbage_is_a_scrape_error() -> None:
    with pytest.raises(ScrapeError):
        parse("ringleader_trainer_step {{{ not metrics\n", NOW)
