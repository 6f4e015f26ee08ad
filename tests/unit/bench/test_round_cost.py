"""The round-cost benchmark's run: the operator's own rounds against its in-memory API end with the job Running,
its status written grouped, and a CPU time for each timed round."""

from __future__ import annotations

import asyncio

import pytest

from bench.round_cost_bench import InMemoryApi, child


@pytest.mark.parametrize("flip", [False, True])
def test_a_run_times_each_round_of_a_running_job(flip: bool) -> None:
    out = child(size=40, changed=3, rounds=4, flip=flip)
    assert len(out["round_cpu_s"]) == 4 and all(t > 0 for t in out["round_cpu_s"])
    assert 0 < out["status_bytes"] < 2000  # one entry for 40 ranks


def test_the_in_memory_api_applies_status_as_a_merge_patch() -> None:
    api = InMemoryApi({"metadata": {"resourceVersion": "1"}, "status": {"ranks": {"worker-0": {"restarts": 1}}}}, [1])
    patch = {"phase": "Running", "ranks": {"worker-0": None, "worker-1": {}}}
    written = asyncio.run(api.patch_status("ns", "j", patch))
    assert written["status"] == {"phase": "Running", "ranks": {"worker-1": {}}}
    assert written["metadata"]["resourceVersion"] == "2"
