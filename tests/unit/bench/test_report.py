"""BENCHMARKS.md and the plots from results (bench/report.py): the figures, the goal verdicts, what is missing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import report
from bench.record import range_verdict

METRICS = ("created_s", "running_s", "requests_per_job", "cpu_s", "peak_rss_mb")
MACHINE = {"date": "2026-11-23 10:00 UTC", "commit": "abc1234", "cpus": 2, "cpu_model": "Test CPU", "memory_gb": 24}


def op(created: float, rss: float) -> dict[str, float]:
    return {"created_s": created, "running_s": created * 2, "requests_per_job": 40.0, "cpu_s": 1.0,
            "peak_rss_mb": rss, "n": 3}  # fmt: skip


def control_plane(burst_ratio_created: float, rss: float) -> dict[str, Any]:
    rows = []
    for jobs, workers, mine, theirs in [(1, 64, 1.0, 4.0), (1, 256, 2.0, 2.0), (500, 4, burst_ratio_created, 1.0)]:
        ours, peer = op(mine, rss), op(theirs, 50)
        ratio = {k: ours[k] / peer[k] for k in METRICS}
        rows.append({"jobs": jobs, "workers": workers, "ringleader": ours, "training-operator": peer, "ratio": ratio})
    goals = {"created_ratio_single_max": 0.5, "created_ratio_burst_max": 1.0, "operator_rss_mb_max": 250.0}
    return {"machine": MACHINE, "goals": goals, "reps": 3, "fake_nodes": 24, "rows": rows}


@pytest.mark.parametrize(
    ("burst", "rss", "expected"),
    [
        (0.8, 200.0, ["1 job x 64 workers: time to all pods created 0.25x the training-operator's "
                      "(goal <= 0.5x): **met**",
                      "1 job x 256 workers: time to all pods created 1.00x the training-operator's "
                      "(goal <= 0.5x): **missed**",
                      "500 jobs x 4 workers: time to all pods created 0.80x the training-operator's "
                      "(goal <= 1x): **met**",
                      "peak RSS, the largest over the scenarios: 200 MB (goal <= 250 MB): **met**"]),
        (1.5, 300.0, ["500 jobs x 4 workers: time to all pods created 1.50x the training-operator's "
                      "(goal <= 1x): **missed**",
                      "peak RSS, the largest over the scenarios: 300 MB (goal <= 250 MB): **missed**"]),
    ],
)  # fmt: skip
def test_control_plane_goals_are_judged_from_the_medians(burst: float, rss: float, expected: list[str]) -> None:
    text = "\n".join(report.control_plane(control_plane(burst, rss)))
    for line in expected:
        assert line in text
    assert "| 1 job x 64 workers | created (s) | 4.00 | 1.00 | 0.25x |" in text
    burst_alone = control_plane(burst, rss)
    del burst_alone["rows"][2]["training-operator"], burst_alone["rows"][2]["ratio"]
    alone = "\n".join(report.control_plane(burst_alone))
    assert "- 500 jobs x 4 workers: not judged, no run of the training-operator" in alone
    assert (
        "commit `abc1234`" in text
        and "(training-operator + Ringleader: 1x64: 3 + 3, 1x256: 3 + 3, 500x4: 3 + 3)" in text
    )
    assert "span commits" not in text
    kept = control_plane(burst, rss)
    kept["runs"] = [{"commit": "abc1234"}, {"commit": "def5678"}, {"commit": "abc1234"}, {}]
    assert "the runs span commits `abc1234`, `def5678`" in "\n".join(report.control_plane(kept))


def allreduce_row(ranks: int, size: int, gloo_s: float, ring_s: float) -> dict[str, Any]:
    def impl(t: float) -> dict[str, float]:
        return {"median_s": t, "busbw_GBps": size / t / 1e9 * 2 * (ranks - 1) / ranks}

    return {
        "ranks": ranks,
        "bytes": size,
        "gloo": impl(gloo_s),
        "ring": impl(ring_s),
        "ring_over_gloo": gloo_s / ring_s,
    }


@pytest.mark.parametrize(("ring_s_at_16m", "verdict"), [(1.0, "1.00x: **met**"), (2.0, "0.50x: **missed**")])
def test_allreduce_goal_looks_at_16_mb_and_above_only(ring_s_at_16m: float, verdict: str) -> None:
    rows = [allreduce_row(2, 1024, 1.0, 10.0), allreduce_row(2, 16 << 20, 1.0, ring_s_at_16m)]
    text = "\n".join(report.allreduce({"machine": MACHINE, "reps": 5, "rows": rows}))
    assert f"Lowest ratio there {verdict}" in text  # the 0.10x at 1 KB does not count
    assert "| 2 | 16 MB |" in text and "| 2 | 1 KB |" in text


def test_strategies_report_the_overhead_over_plain_ddp() -> None:
    rows = [{"config": "allreduce (gloo)", "workers": 2, "median_step_s": 0.3, "samples_per_s": 426.7,
             "vs_allreduce_gloo": 1.0}]  # fmt: skip
    result = {"machine": MACHINE, "steps": 40, "rows": rows, "goal_overhead": 0.05,
              "overhead_vs_baseline": {"2": 0.031, "4": 0.07}}  # fmt: skip
    text = "\n".join(report.strategies(result))
    assert "| 2 | allreduce (gloo) | 300 | 427 | 1.00x |" in text
    assert "(2 workers): +3.1% step time: **met**" in text
    assert "(4 workers): +7.0% step time: **missed**" in text


def test_gpu_section_reports_each_strategy_against_nccl_and_the_rings_staging_cost() -> None:
    result = {"machine": MACHINE, "gpu": "NVIDIA H100", "torch": "2.11", "nccl": "2.28.9", "model": "wide-mlp",
              "batch_per_worker": 64, "steps": 60, "reps": 3,
              "strategies": [{"config": "ps synchronous, 1 worker, 1 shard", "median_step_s": 0.298, "min_s": 0.2897,
                              "max_s": 0.3075, "vs_allreduce_nccl": 95.6}],
              "ring_cuda_vs_cpu": [{"bytes": 1 << 24, "median_s": {"cpu": 0.00632, "cuda": 0.0103},
                                    "verdict": "cpu is faster"}]}  # fmt: skip
    text = "\n".join(report.gpu(result))
    assert "NVIDIA H100, torch 2.11, NCCL 2.28.9" in text and "median of 3 interleaved runs" in text
    assert "| ps synchronous, 1 worker, 1 shard | 298.0 | 289.7-307.5 | 95.6x |" in text
    assert "| 16 MB | 6.32 | 10.30 | 1.63x | cpu is faster |" in text


def test_recovery_and_checkpoint_verdicts() -> None:
    recovery = {"machine": MACHINE, "goal_s": 15.0, "kills": 5, "rows": [
        {"case": "allreduce", "victim": "worker-1", "recovery_s": [5, 6, 7, 8, 9], "median_s": 7.0, "max_s": 9.0},
        {"case": "ps-sync", "victim": "worker-1", "recovery_s": [20] * 5, "median_s": 20.0, "max_s": 20.0},
    ]}  # fmt: skip
    text = "\n".join(report.recovery(recovery))
    assert "| allreduce | worker-1 | 5 | 7.00 | 9.00 | **met** |" in text
    assert "| ps-sync | worker-1 | 5 | 20.00 | 20.00 | **missed** |" in text
    checkpoint = {"machine": MACHINE, "goal_share": 0.03, "rows": [
        {"example": "wide-mlp", "workers": 2, "interval": 100, "median_step_s": 0.3, "median_save_s": 0.6,
         "overhead_share": 0.02},
    ]}  # fmt: skip
    assert "| wide-mlp | 2 | 100 | 300.0 | 600 | 2.00% | **met** |" in "\n".join(report.checkpoint(checkpoint))


def test_write_makes_the_report_and_png_plots_and_names_what_is_missing(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    (results / "control-plane.json").write_text(json.dumps(control_plane(0.8, 200.0)))
    rows = [allreduce_row(r, s, 1.0, 1.0) for r in (2, 4) for s in (1024, 1 << 24)]
    (results / "allreduce.json").write_text(json.dumps({"machine": MACHINE, "reps": 5, "rows": rows}))
    written = report.write(report.load(results), tmp_path / "BENCHMARKS.md", tmp_path / "plots")
    assert {p.name for p in written} == {"BENCHMARKS.md", "control-plane.png", "allreduce.png"}
    for png in (tmp_path / "plots").iterdir():
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    text = (tmp_path / "BENCHMARKS.md").read_text()
    assert "## Control plane" in text and "Lowest ratio there 1.00x: **met**" in text
    assert "Not measured yet: run `make bench-cluster`." in text  # recovery
    assert "Not measured yet: run `make bench-trainer`." in text  # strategies, checkpoint


def test_launchers_and_devcluster_sections_report_their_figures_and_verdicts() -> None:
    launchers = {
        "machine": MACHINE,
        "settings": {"workers": 8, "reps": 5},
        "create_to_all_initialized_s": {
            "torchrun": {"summary": {"n": 5, "median": 20.0, "min": 18.0, "max": 22.0}},
            "trainer": {"summary": {"n": 5, "median": 10.0, "min": 9.0, "max": 11.0}},
        },
        "ratio_torchrun_over_trainer": 2.0,
        "verdict": "trainer is faster",
    }
    lat = {"summary": {"n": 100, "median": 0.3, "p99": 2.5, "max": 2.5}}
    devcluster = {
        "machine": MACHINE,
        "settings": {"rounds": 4, "concurrency": 4},
        "goals": {"warm_start_s": 30.0, "pod_running_p99_s": 1.0, "real_node_pod_running_p99_s": 2.0},
        "warm_start_s": {"summary": {"n": 3, "median": 5.0, "max": 6.0}},
        "pod_create_to_running_s": {"process": {"summary": {**lat["summary"], "p99": 0.6}}, "real": lat},
    }
    text = report.render({"launchers": launchers, "devcluster": devcluster})
    assert "| torchrun | 5 | 20.00 | 18.00 | 22.00 |" in text
    assert "torchrun / trainer: 2.00x; trainer is faster." in text
    assert "| pod create -> Running, process node | 100 | 300 ms | 600 ms (p99) | p99 <= 1 s | **met** |" in text
    assert "| pod create -> Running, real node | 100 | 300 ms | 2500 ms (p99) | p99 <= 2 s | **missed** |" in text


@pytest.mark.parametrize(
    ("runs", "verdict"),
    [
        ({"a": [1.0, 2.0], "b": [1.5, 3.0]}, "not distinguishable (the runs' ranges overlap)"),
        ({"a": [1.0, 2.0], "b": [2.5, 3.0]}, "a is faster"),
        ({"a": [4.0, 5.0], "b": [1.0, 2.0], "c": [2.1, 3.0]}, "b is faster"),
        ({"a": [4.0, 5.0], "b": [1.0, 2.0], "c": [1.9, 3.0]}, "not distinguishable (the runs' ranges overlap)"),
    ],
)
def test_systems_are_told_apart_only_when_no_two_ranges_overlap(runs: dict[str, list[float]], verdict: str) -> None:
    assert range_verdict(runs) == verdict
