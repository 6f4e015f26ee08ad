"""The scale benchmark's order of runs: every point once per repetition, subjects rotating."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from bench import control_plane_bench as cpb
from bench.scale_bench import floor_objects, kept_runs, operator_flags, provenance, schedule, subject_label
from bench.subjects import ringleader_job


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


@pytest.mark.parametrize(
    ("name", "backend", "flags", "label"),
    [
        ("ringleader", None, [], "ringleader"),
        ("ringleader", "gates", ["--gang-backend=gates"], "ringleader/gates"),
        ("training-operator", "gates", [], "training-operator"),  # it has no such flag
        ("floor", "workload-api", [], "floor"),
    ],
)
def test_a_chosen_gang_backend_is_ringleaders_alone_and_a_subject_of_its_own(
    name: str, backend: str | None, flags: list[str], label: str
) -> None:
    assert operator_flags(name, backend) == flags
    assert subject_label(name, backend) == label


@pytest.mark.parametrize(
    ("backend", "others", "subjects", "stem"),
    [
        (None, 0, ["floor", "ringleader"], "scale"),
        ("gates", 0, ["floor", "ringleader"], "scale-gates"),
        ("gates", 20000, ["ringleader"], "scale-gates-others"),
        (None, 0, ["floor", "floor/worker-0-named"], "scale-services"),
    ],
)
def test_another_gang_backends_runs_and_runs_beside_other_pods_or_of_another_floor_go_to_files_of_their_own(
    backend: str | None, others: int, subjects: list[str], stem: str
) -> None:
    args = argparse.Namespace(operator_tree=None, gang_backend=backend, other_pods=others, subjects=subjects)
    assert provenance(args)[2] == stem


@pytest.mark.parametrize(("all_named", "selected"), [(True, 4), (False, 1)])
def test_the_floors_service_selects_every_rank_or_worker_0_alone(all_named: bool, selected: int) -> None:
    job = ringleader_job("big", 4, cpb.FAKE_POD)
    job["metadata"] |= {"namespace": "ns", "uid": "u1"}
    objects = floor_objects(job, all_named)
    (service,) = [o for o in objects if o["kind"] == "Service"]
    pods = [o for o in objects if o["kind"] == "Pod"]
    selector = service["spec"]["selector"].items()
    assert sum(selector <= p["metadata"]["labels"].items() for p in pods) == selected
    assert all(p["spec"]["subdomain"] == "big" and "schedulingGates" not in p["spec"] for p in pods)
