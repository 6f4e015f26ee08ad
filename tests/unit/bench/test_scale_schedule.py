"""The scale benchmark's order of runs: every point once per repetition, subjects rotating."""

from __future__ import annotations

from bench.scale_bench import schedule


def test_every_subject_runs_every_point_once_per_repetition_and_none_always_first() -> None:
    order = schedule([(1, 1000), (1000, 8)], ["floor", "a", "b"], reps=3)
    assert len(order) == 2 * 3 * 3 and len(set(order)) == len(order)
    firsts = {rep: next(s for j, w, s, r in order if r == rep and (j, w) == (1, 1000)) for rep in range(3)}
    assert sorted(firsts.values()) == ["a", "b", "floor"]
