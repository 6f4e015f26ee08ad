"""BENCHMARKS.md and the plots from results (bench/report.py): the figures, the goal verdicts, what is missing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import control_plane_plan as cp
from bench import report
from bench.record import range_verdict

MACHINE = {"date": "2026-11-23 10:00 UTC", "commit": "abc1234", "cpus": 2, "cpu_model": "Test CPU", "memory_gb": 24}
SCENARIOS = [(1, 8), (1, 64), (1, 256), (500, 4)]


def control_plane(running_ratio: float, rss: float, commits: tuple[str, ...] = ("abc1234",)) -> dict[str, Any]:
    """A result as the benchmark writes it, from runs: 3 repetitions a side, +/- 2 % apart; Ringleader's time to
    Running `running_ratio` of the peer's, its CPU 1.5x, its peak RSS `rss` (MB)."""
    runs = []
    for config in ("defaults", "matched"):
        for jobs, workers in SCENARIOS:
            for rep, k in enumerate((0.98, 1.0, 1.02)):
                commit = commits[rep % len(commits)]
                base = {"config": config, "jobs": jobs, "workers": workers, "rep": rep, "commit": commit}
                runs.append({**base, "operator": "training-operator", "created_s": 2.0 * k, "running_s": 2.0 * k,
                             "requests_per_job": 40.0, "cpu_s": 1.0 * k, "peak_rss_mb": 50.0})  # fmt: skip
                runs.append({**base, "operator": "ringleader", "created_s": 1.0 * k,
                             "running_s": 2.0 * running_ratio * k, "requests_per_job": 30.0, "cpu_s": 1.5 * k,
                             "peak_rss_mb": rss * k})  # fmt: skip
    rows = [r.as_dict() for r in cp.compare(runs)]
    return {"machine": MACHINE, "settings": ["[matched] ringleader: qps 1000"], "reps": 3, "burst_reps": 3,
            "fake_nodes": 24, "rows": rows, "runs": runs}  # fmt: skip


@pytest.mark.parametrize(
    ("ratio", "rss", "expected"),
    [
        pytest.param(0.4, 150.0, [
            "1 job x 64 workers: time to all pods Running (s), Ringleader / training-operator 0.40x (0.38-0.42x) "
            "(goal <= 0.5x): **met**",
            "500 jobs x 4 workers: time to all pods Running (s), Ringleader / training-operator 0.40x "
            "(0.38-0.42x) (goal <= 0.5x): **met**",
            "1 job x 8 workers: operator CPU (s), Ringleader / training-operator 1.50x (1.44-1.56x) "
            "(goal <= 2x): **met**",
            "500 jobs x 4 workers: Ringleader's operator peak RSS (MB) 150 (147-153) (goal <= 160): **met**",
        ], id="inside"),
        pytest.param(0.5, 170.0, [
            "1 job x 256 workers: time to all pods Running (s), Ringleader / training-operator 0.50x (0.48-0.52x) "
            "(goal <= 0.5x): **not distinguishable at this noise**",
            "500 jobs x 4 workers: Ringleader's operator peak RSS (MB) 170 (167-173) (goal <= 160): **missed**",
        ], id="on-the-edge"),
        pytest.param(0.8, 158.0, [
            "1 job x 64 workers: time to all pods Running (s), Ringleader / training-operator 0.80x (0.77-0.83x) "
            "(goal <= 0.5x): **missed**",
            "1 job x 8 workers: time to all pods Running (s), Ringleader / training-operator 0.80x (0.77-0.83x) "
            "(goal <= 1x): **met**",
            "500 jobs x 4 workers: Ringleader's operator peak RSS (MB) 158 (155-161) (goal <= 160): "
            "**not distinguishable at this noise**",
        ], id="outside"),
    ],
)  # fmt: skip
def test_control_plane_goals_are_judged_on_intervals(ratio: float, rss: float, expected: list[str]) -> None:
    text = "\n".join(report.control_plane(control_plane(ratio, rss)))
    for line in expected:
        assert line in text
    assert "| 1 job x 64 workers | created (s) | 2.00 (1.96-2.04) | 1.00 (0.98-1.02) | 0.50x (0.48-0.52x) |" in text
    assert "### `defaults`: each operator at its shipped defaults" in text
    assert "### `matched`: matched client budgets" in text
    assert "- [matched] ringleader: qps 1000" in text
    assert "commit `abc1234`" in text and "3 repetitions per one-job scenario and 3 of the burst" in text
    assert "span commits" not in text


def test_control_plane_report_names_what_it_cannot_judge() -> None:
    result = control_plane(0.4, 150.0, commits=("abc1234", "def5678"))
    result["rows"] = [r for r in result["rows"] if (r["config"], r["jobs"]) != ("matched", 500)]
    text = "\n".join(report.control_plane(result))
    assert (
        "500 jobs x 4 workers: time to all pods Running (s): not judged (no runs of both operators at `matched`)"
        in text
    )
    assert "the runs span commits `abc1234`, `def5678`" in text
    old = {"machine": MACHINE, "rows": [{"jobs": 1, "workers": 8}]}  # before configurations existed
    assert "earlier format" in report.control_plane(old)[0]


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
    paired = {
        "2": {"median": 0.031, "lo": -0.01, "hi": 0.045, "n": 10, "verdict": "met"},
        "4": {"median": -0.07, "lo": -0.09, "hi": -0.06, "n": 10, "verdict": "missed"},
    }
    result = {"machine": MACHINE, "steps": 40, "pairs": 10, "rows": rows, "goal_overhead": 0.05,
              "overhead_vs_baseline": paired}  # fmt: skip
    text = "\n".join(report.strategies(result))
    assert "| 2 | allreduce (gloo) | 300 | 427 | 1.00x |" in text
    assert (
        "(2 workers), two-sided: +3.1% step time (-1.0% to +4.5%, 95 % bootstrap interval over 10 pairs): **met**"
        in text
    )
    assert (
        "(4 workers), two-sided: -7.0% step time (-9.0% to -6.0%, 95 % bootstrap interval over 10 pairs): **missed**"
        in text
    )
    assert "10 pairs of runs back to back" in text
    old = {**result, "overhead_vs_baseline": {"2": 0.031}}
    del old["pairs"]
    assert "+3.1% step time (an earlier result without pairs: not judged" in "\n".join(report.strategies(old))


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


def test_the_gpu_tier_section_says_where_it_ran_and_how_each_test_ended() -> None:
    result = {"machine": MACHINE, "command": "tests/gpu_tier.sh", "gpu": "NVIDIA H200", "gpu_memory_mib": 143771,
              "driver": "580.1", "torch": "2.11", "cuda": "13.0", "nccl": "2.28.9", "pytest_workers": 6,
              "seconds": 121.6, "tests": [{"test": "tests/integration/trainer/test_cuda.py::test_a[1]",
                                           "outcome": "passed"},
                                          {"test": "tests/integration/trainer/test_cuda.py::test_b",
                                           "outcome": "failed"}]}  # fmt: skip
    text = "\n".join(report.gpu_tier(result))
    assert "NVIDIA H200 (143771 MiB, driver 580.1), torch 2.11, CUDA 13.0, NCCL 2.28.9" in text
    assert "1 failed, 1 passed in 122 s" in text
    assert "| `test_cuda.py::test_a[1]` | passed |" in text and "| `test_cuda.py::test_b` | failed |" in text


def test_recovery_and_checkpoint_verdicts() -> None:
    recovery = {"machine": MACHINE, "goal_s": 15.0, "kills": 5, "rows": [
        {"case": "allreduce", "victim": "worker-1", "recovery_s": [5, 6, 7, 8, 9], "median_s": 7.0, "max_s": 9.0},
        {"case": "ps-sync", "victim": "worker-1", "recovery_s": [20] * 5, "median_s": 20.0, "max_s": 20.0},
    ]}  # fmt: skip
    text = "\n".join(report.recovery(recovery))
    assert "| allreduce | worker-1 | 5 | 7.00 | 9.00 | **met** |" in text
    assert "| ps-sync | worker-1 | 5 | 20.00 | 20.00 | **missed** |" in text
    checkpoint = {"machine": MACHINE, "goal_share": 0.03, "pairs": 3, "rows": [
        {"example": "wide-mlp", "workers": 2, "interval": 100, "checkpoint_bytes": 2e8, "median_step_s": 0.3,
         "median_save_s": 0.6, "overhead_share": 0.02, "overhead_share_range": [0.018, 0.025],
         "wall_delta": {"median": 0.066, "lo": 0.04, "hi": 0.08, "n": 3}, "verdict": "missed"},
    ]}  # fmt: skip
    text = "\n".join(report.checkpoint(checkpoint))
    assert (
        "| wide-mlp | 2 | 100 | 200 | 300.0 | 600 | 2.00% (1.80%-2.50%) | +6.6% (+4.0% to +8.0%) | **missed** |" in text
    )
    assert "3 pairs of runs with and without checkpoints" in text
    assert "earlier format" in report.checkpoint({"goal_share": 0.03, "rows": []})[0]


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


def test_stop_section_reports_steps_lost_per_signal_and_the_stops_times() -> None:
    result = {"machine": MACHINE, "example": "wide-mlp", "workers": 2, "at": 37, "interval": 100, "reps": 2,
              "summary": {"stop (SIGTERM)": {"steps_lost": [0, 0], "resumed_from": [38, 39], "median_exit_s": 1.5,
                                             "exit_s_range": [1.2, 1.9], "median_stop_save_s": 0.61},
                          "kill (SIGKILL)": {"steps_lost": [37, 38], "resumed_from": [0, 0], "median_exit_s": 0.1,
                                             "exit_s_range": [0.1, 0.2], "median_stop_save_s": None}}}  # fmt: skip
    text = "\n".join(report.stop(result))
    assert "| stop (SIGTERM) | 38, 39 | 0, 0 | 1.50 (1.20-1.90) | 0.61 |" in text
    assert "| kill (SIGKILL) | 0, 0 | 37, 38 | 0.10 (0.10-0.20) | - |" in text
    assert "every rank signalled at worker 0's step 37" in text


def test_stall_sections_report_the_exports_cost_and_the_time_to_stalled() -> None:
    delta = {"median": 0.0145, "lo": 0.0102, "hi": 0.0188, "n": 40}
    export = {"goal": 0.01, "step": {"median": 0.0025}, "call_cost_s": 2.5e-7, "call_share": 1e-4, "workers": 2,
              "steps": 2000, "baseline": "0474db6", "pairs": 20, "in_process": delta, "in_process_verdict": "missed",
              "in_process_control": {"median": 0.004, "lo": 0.001, "hi": 0.007, "n": 40},
              "delta": {"median": -0.011, "lo": -0.039, "hi": 0.025, "n": 20},
              "verdict": "not distinguishable at this noise"}  # fmt: skip
    text = "\n".join(report.stall_export(export))
    assert "| the calls alone (median of 100,000) | 0.25 us | 0.010% | - |" in text
    assert "with the export vs without | - | +1.45% (+1.02% to +1.88%) | **missed** |" in text
    assert "vs `0474db6` | 2.50 ms step | -1.10% (-3.90% to +2.50%) | **not distinguishable at this noise** |" in text
    rows = [{"hang_to_stalled_s": 32.8, "hang_to_succeeded_s": 52.0, "message": "no progress for 30 s at step 50"}]
    hang = {"deadline_s": 30, "reps": 1, "rows": rows, "goal_s": 40, "verdict": "met",
            "stalled": {"median": 32.8, "lo": 32.7, "hi": 32.8, "n": 3}}  # fmt: skip
    text = "\n".join(report.stall_hang(hang))
    assert "| 30 | 32.8 (32.7-32.8) | 52 | 40 | **met** |" in text and "no progress for 30 s at step 50" in text


def test_gang_backend_and_topology_sections_report_their_figures() -> None:
    interval = {"median": 1.5, "lo": 1.0, "hi": 2.0, "n": 15}
    backends = {
        "settings": {"jobs": 100, "workers_per_job": 4, "jobs_at_once": 4, "frees_per_round": 5, "rounds": 3},
        "backends": {
            "gates": {"seconds": interval},
            "kueue": {"seconds": {**interval, "median": 2.5}, "vs_gates": {"median": 1.67, "lo": 1.2, "hi": 2.1},
                      "verdict": "slower"},
        },
    }  # fmt: skip
    text = "\n".join(report.gang_backends(backends))
    assert "| operator's own gate | 15 | 1.50 (1.00-2.00) |  |  |" in text
    assert "| Kueue v0.17 (+ the gate) | 15 | 2.50 (1.00-2.00) | 1.67x (1.20-2.10x) | slower |" in text
    assert "Workload API" not in text  # not measured: no row
    modes = {
        "none": {"gangs": 27, "domains_median": 2, "domains_mean": 1.8, "multi_pod_one_domain_share": 0.1, "waited": 0},
        "Required": {"gangs": 27, "domains_median": 1, "domains_mean": 1.0, "multi_pod_one_domain_share": 1.0,
                     "waited": 3},
    }  # fmt: skip
    settings = {"racks": 4, "nodes_per_rack": 2, "gpus_per_node": 8, "gangs": [2, 1], "gpus_per_pod": 4, "reps": 3}
    text = "\n".join(report.topology({"settings": settings, "modes": modes}))
    assert "| none | 27 | 2 | 1.80 | 10 % | 0 |" in text and "| Required | 27 | 1 | 1.00 | 100 % | 3 |" in text


def test_the_launchers_ratio_carries_its_bootstrap_interval_when_the_runs_are_kept() -> None:
    def launcher(runs: list[float]) -> dict[str, Any]:
        return {"summary": {"n": len(runs), "median": sorted(runs)[len(runs) // 2], "min": min(runs),
                            "max": max(runs)}, "runs": runs}  # fmt: skip

    apart = {
        "machine": MACHINE,
        "settings": {"workers": 8, "reps": 5},
        "create_to_all_initialized_s": {
            "torchrun": launcher([20.0, 21.0, 19.0, 20.5, 22.0]),
            "trainer": launcher([10.0, 11.0, 9.0, 10.5, 10.2]),
        },
        "ratio_torchrun_over_trainer": 2.0,
        "verdict": "trainer is faster",
    }
    text = report.render({"launchers": apart})
    assert "The ratio's 95 % bootstrap interval: " in text and "(torchrun slower)." in text
    runs = {"torchrun": launcher([10.0, 11.0, 12.0]), "trainer": launcher([10.5, 11.5, 11.0])}
    close = {**apart, "create_to_all_initialized_s": runs}
    assert "(torchrun not distinguishable)." in report.render({"launchers": close})


def scale_result(ringleader_running: float, idle: float) -> dict[str, Any]:
    """Three repetitions at one job of 1,000 and of 2,000 workers: the floor Running in 10 s a thousand pods,
    Ringleader in `ringleader_running` times that, idle at `idle` CPU-seconds a minute; one run saw a node flap."""
    runs = []
    for rep, k in enumerate((0.98, 1.0, 1.02)):
        for workers in (1000, 2000):
            base = {"jobs": 1, "workers": workers, "rep": rep, "commit": "abc1234"}
            floor = 10.0 * workers / 1000 * k
            runs.append({**base, "subject": "floor", "created_s": floor / 2, "running_s": floor, "node_flaps": 0})
            runs.append({**base, "subject": "ringleader", "created_s": floor / 2,
                         "running_s": floor * ringleader_running, "cpu_ms_per_pod": 2.0, "idle_cpu_s_per_min": idle,
                         "peak_rss_mb": 120.0, "object_bytes": 20_000, "status_bytes": 1500,
                         "requests_per_pod": 1.2, "node_flaps": int(rep == 1 and workers == 2000)})  # fmt: skip
    return {"machine": MACHINE, "settings": ["points 1x1000, 1x2000"], "reps": 3, "runs": runs}


@pytest.mark.parametrize(
    ("running", "idle", "verdicts"),
    [
        (1.05, 0.1, ["met", "met", "met", "met", "met", "flat"]),
        (1.5, 2.0, ["met", "missed", "missed", "met", "met", "flat"]),
    ],
)
def test_scale_goals_are_judged_at_the_largest_point(running: float, idle: float, verdicts: list[str]) -> None:
    lines = report.scale(scale_result(running, idle))
    goals = [line for line in lines if line.startswith("- ") and "**" in line]
    assert [g.rsplit("**", 2)[1] for g in goals] == verdicts, goals
    assert any(line.startswith("Goals of issue 29 at one job of 2000 workers") for line in lines)
    flapped = [line for line in lines if line.startswith("| 1 x 2000 | ringleader |")]
    assert flapped and flapped[0].rstrip(" |").endswith("1"), flapped  # the run that saw a flap is counted


def test_cpu_a_pod_is_judged_flat_or_growing_from_the_smallest_to_the_largest_point() -> None:
    result = scale_result(1.05, 0.1)
    growing = [{**r, "cpu_ms_per_pod": 3.0 + 0.1 * r["rep"]} if r["workers"] == 2000 and "cpu_ms_per_pod" in r else r
               for r in result["runs"]]  # fmt: skip
    for runs, verdict in ((result["runs"], "flat"), (growing, "grows with n")):
        lines = report.scale({**result, "runs": runs})
        line = next(x for x in lines if x.startswith("- operator CPU a pod at 2000 workers against at 1000"))
        assert line.endswith(f"**{verdict}**"), line


def test_ringleader_is_set_against_the_training_operator_at_each_point() -> None:
    result = scale_result(1.05, 0.1)
    peer = [{**r, "subject": "training-operator", "running_s": r["running_s"] * 2, "cpu_ms_per_pod": 2.0 * 0.8}
            for r in result["runs"] if r["subject"] == "ringleader"]  # fmt: skip
    lines = report.scale({**result, "runs": result["runs"] + peer})
    row = next(x for x in lines if x.startswith("| 1 x 1000 | ringleader |"))
    assert "0.50x (0.48-0.52x) faster; 1.25x (1.25-1.25x) slower" in row, row
    peer_row = next(x for x in lines if x.startswith("| 1 x 1000 | training-operator |"))
    assert "faster;" not in peer_row and "slower;" not in peer_row


def test_the_scale_table_shows_the_control_planes_cpu_and_kube_controller_managers_share() -> None:
    result = scale_result(1.05, 0.1)
    cpu = {"kube-apiserver": 60.0, "kube-controller-manager": 30.0, "kube-scheduler": 10.0}
    runs = [{**r, "cluster_cpu_s": 100.0 + r["rep"], "cluster_cpu_by_component_s": cpu} if r["subject"] == "floor"
            else r for r in result["runs"]]  # fmt: skip
    lines = report.scale({**result, "runs": runs})
    head = next(x for x in lines if x.startswith("| point |")).split(" | ")
    floor = next(x for x in lines if x.startswith("| 1 x 1000 | floor |")).split(" | ")
    mine = next(x for x in lines if x.startswith("| 1 x 1000 | ringleader |")).split(" | ")
    column = head.index("control plane CPU (s)")
    assert floor[column : column + 2] == ["101 (100-102)", "30 (30-30)"], floor
    assert mine[column : column + 2] == ["", ""]  # not recorded: left empty


def test_the_scale_plot_draws_each_figure_against_n(tmp_path: Path) -> None:
    from bench.report_plots import plot_scale

    plot_scale(scale_result(1.05, 0.1), tmp_path / "scale.png")
    png = (tmp_path / "scale.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    plot_scale({"runs": [{**r, "jobs": 1000} for r in scale_result(1.05, 0.1)["runs"]]}, tmp_path / "none.png")
    assert not (tmp_path / "none.png").exists()  # no one-job point: no plot


def test_the_idle_goal_is_judged_at_the_many_jobs_point_too_in_each_window() -> None:
    result = scale_result(1.05, 0.1)
    result["runs"] += [
        {**r, "jobs": 1000, "workers": 8, "idle_cpu_s_per_min": 2.5, "late_idle_cpu_s_per_min": 0.4}
        for r in result["runs"]
        if r["workers"] == 1000
    ]
    lines = report.scale(result)
    at = lines.index("Goals of issue 29 at 1000 jobs of 8 workers:")
    first, late = lines[at + 2], lines[at + 3]
    assert first.startswith("- idle <= 0.6 CPU-s a minute (first minute): 2.5") and first.endswith("**missed**")
    assert late.startswith("- idle <= 0.6 CPU-s a minute (late window") and ": 0.4" in late and late.endswith("**met**")
    one_job = lines.index("Goals of issue 29 at one job of 2000 workers (judged on the range of the runs):")
    assert lines[one_job + 4] == "- idle <= 0.6 CPU-s a minute (late window: when, the settings say): not measured"
    assert any(line.startswith("Goals of issue 29 at one job of 2000 workers") for line in lines)  # still the largest


def test_the_gate_backends_runs_have_their_own_section_judged_as_ringleaders() -> None:
    result = scale_result(1.05, 0.1)
    result["runs"] = [
        {**r, "subject": "ringleader/gates"} if r["subject"] == "ringleader" else r for r in result["runs"]
    ]
    text = report.render({"scale-gates": result})
    section = text.split("## Scale: one job of thousands of ranks", 1)[1].split("\n## ", 1)[0]
    assert "| 1 x 2000 | ringleader/gates |" in section
    assert "Goals of issue 29 at one job of 2000 workers" in section and "**met**" in section


def test_the_goodput_section_says_the_machines_speed_before_each_run_where_it_was_measured() -> None:
    """Runs of other days (a shared host's speed varies) are told apart by the probe each run recorded; runs
    from before the probe show a dash."""
    figure = {"median": 0.95, "lo": 0.9, "hi": 0.97}
    summary = {name: {"goodput": figure, "rate": {"median": 30.0}} for name in ("checkpoint", "heal")}
    runs = {"checkpoint": [{"steps_kept": 900}, {"steps_kept": 900, "torch_import_s": 6.04}],
            "heal": [{"steps_kept": 950}, {"steps_kept": 950, "torch_import_s": 5.1}]}  # fmt: skip
    settings = {"reps": 2, "workers": 4, "model": "digits-mlp", "every": 60, "seconds": 900, "lose_node": True}
    lines = report.goodput({"machine": MACHINE, "settings": settings, "summary": summary, "runs": runs})
    speed = next(line for line in lines if "machine's speed" in line)
    assert speed.endswith("checkpoint -, 6.0; heal -, 5.1")
    probeless = {name: [{"steps_kept": 900}] for name in runs}
    assert not any("machine's speed" in line for line in report.goodput(
        {"machine": MACHINE, "settings": settings, "summary": summary, "runs": probeless}))  # fmt: skip
