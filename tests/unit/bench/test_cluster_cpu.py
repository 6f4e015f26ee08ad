"""The control plane's CPU as the benchmarks read it: summed over kwokctl's pid files, and a component that has
exited (kube-controller-manager losing its lease under a 5,000-pod start exits) ends the benchmark naming it."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from bench import control_plane_bench as cpb


def _layout(tmp_path: Path, pids: dict[str, int]) -> Any:
    (tmp_path / "pids").mkdir()
    for name, pid in pids.items():
        (tmp_path / "pids" / f"{name}.pid").write_text(f"{pid}\n")
    return SimpleNamespace(cluster_dir=tmp_path)


def test_the_cpu_of_running_components_is_summed(tmp_path: Path) -> None:
    assert (
        sum(
            cpb.cluster_cpu_by_component(
                _layout(tmp_path, {"etcd": os.getpid(), "kube-scheduler": os.getpid()})
            ).values()
        )
        > 0
    )


def test_a_component_that_exited_ends_the_benchmark_naming_it(tmp_path: Path) -> None:
    gone = 2**22 + 1  # above Linux's largest pid: never a process
    with pytest.raises(SystemExit, match=r"kube-controller-manager exited during the run .*not of a working cluster"):
        cpb.cluster_cpu_by_component(_layout(tmp_path, {"etcd": os.getpid(), "kube-controller-manager": gone}))


def test_each_components_cpu_is_read_and_its_share_of_a_span_is_what_it_spent(tmp_path: Path) -> None:
    layout = _layout(tmp_path, {"etcd": os.getpid(), "kube-scheduler": os.getpid()})
    before = cpb.cluster_cpu_by_component(layout)
    assert set(before) == {"etcd", "kube-scheduler"} and before["etcd"] > 0
    assert cpb.cpu_spent({"etcd": 1.0}, {"etcd": 3.5, "kube-scheduler": 2.0}) == {"etcd": 2.5, "kube-scheduler": 2.0}
