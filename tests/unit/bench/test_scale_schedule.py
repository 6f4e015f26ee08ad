"""The scale benchmark's order of runs: every point once per repetition, subjects rotating."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.scale_bench import kept_runs, schedule


def test_every_subject_runs_every_point_once_per_repetition_and_none_always_first() -> None:
    order = schedule([(1, 1000), (1000, 8)], ["floor", "a", "b"], reps=3)
    assert len(order) == 2 * 3 * 3 and len(set(order)) == len(order)
    firsts = {rep: next(s for j, w, s, r in order if r == rep and (j, w) == (1, 1000)) for rep in range(3)}
    assert sorted(firsts.values()) == ["a", "b", "floor"]


def test_a_run_of_some_points_keeps_the_earlier_runs_of_the_others(tmp_path: Path) -> None:
    earlier: dict[str, Any] = {
        "machine": {"date": "2026-11-26"},
        "settings": ["Ringleader at commit a1; points (jobs x workers): 1x1000, 1x2000", "3 kwok fake nodes"],
        "runs": [
            {"jobs": 1, "workers": 1000, "subject": "floor", "commit": "a1"},
            {"jobs": 1, "workers": 2000, "subject": "ringleader", "commit": "a1"},
        ],
    }
    path = tmp_path / "scale.json"
    path.write_text(json.dumps(earlier))
    runs, settings = kept_runs(path, [(1, 2000), (1, 5000)])
    assert runs == [earlier["runs"][0]]
    assert settings[0].startswith("points 1x1000 kept from an earlier invocation (2026-11-26, a1)")
    assert settings[1:] == ["  Ringleader at commit a1; points (jobs x workers): 1x1000, 1x2000", "  3 kwok fake nodes"]
    assert kept_runs(path, [(1, 1000), (1, 2000)]) == ([], [])
    assert kept_runs(tmp_path / "none.json", [(1, 1000)]) == ([], [])
