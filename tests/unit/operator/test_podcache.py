"""The pod cache's overlay of the operator's own writes on kopf's index (podcache.overlay)."""

from __future__ import annotations

from typing import Any

import pytest
from ringleader_operator.podcache import OVERLAY_SECONDS, PodCache, overlay, trim

LABEL = "ringleader.dev/job-name"


def pod(name: str, rv: int, job: str = "a", ns: str = "ns", gated: bool = False) -> dict[str, Any]:
    gates = [{"name": "ringleader.dev/gang"}] if gated else []
    return {"metadata": {"namespace": ns, "name": name, "resourceVersion": str(rv), "labels": {LABEL: job}},
            "spec": {"schedulingGates": gates}}  # fmt: skip


def names_rv(pods: list[dict[str, Any]]) -> dict[str, int]:
    return {p["metadata"]["name"]: int(p["metadata"]["resourceVersion"]) for p in pods}


@pytest.mark.parametrize(
    ("indexed", "written", "now", "want", "left"),
    [
        # nothing written: the index as it is
        ([pod("a-0", 5)], {}, 0.0, {"a-0": 5}, set()),
        # released from the gate (rv 9), the watch still shows the gated pod (rv 5): the release counts
        ([pod("a-0", 5, gated=True)], {"a-0": (0.0, pod("a-0", 9))}, 1.0, {"a-0": 9}, {"a-0"}),
        # the watch caught up (or went further): the written entry goes
        ([pod("a-0", 9)], {"a-0": (0.0, pod("a-0", 9))}, 1.0, {"a-0": 9}, set()),
        ([pod("a-0", 12)], {"a-0": (0.0, pod("a-0", 9))}, 1.0, {"a-0": 12}, set()),
        # just created, not watched yet: added
        ([], {"a-1": (0.0, pod("a-1", 7))}, 1.0, {"a-1": 7}, {"a-1"}),
        # a write the watch never confirmed is forgotten after OVERLAY_SECONDS
        ([], {"a-1": (0.0, pod("a-1", 7))}, OVERLAY_SECONDS + 1, {}, set()),
    ],
)  # fmt: skip
def test_overlay(
    indexed: list[dict[str, Any]], written: dict[str, Any], now: float, want: dict[str, int], left: set[str]
) -> None:
    table = {(w[1]["metadata"]["namespace"], k): w for k, w in written.items()}
    got = overlay(indexed, [table], now)
    assert names_rv(got) == want
    assert {k[1] for k in table} == left


def test_cache_reads_the_index_by_job_and_all() -> None:
    cache = PodCache(LABEL)
    assert not cache.ready
    cache.index = {("ns", "a"): [pod("a-0", 3)], ("ns", "b"): [pod("b-0", 4, job="b")], ("ns", None): []}
    cache.wrote({**pod("a-1", 8), "metadata": {**pod("a-1", 8)["metadata"], "managedFields": [{"x": 1}]}}, 0.0)
    assert cache.ready
    assert names_rv(cache.job_pods("ns", "a", 1.0)) == {"a-0": 3, "a-1": 8}
    assert names_rv(cache.all_pods(1.0)) == {"a-0": 3, "a-1": 8, "b-0": 4}
    assert all("managedFields" not in p["metadata"] for p in cache.all_pods(1.0))


def test_a_jobs_pods_show_only_its_own_writes_and_others_are_kept() -> None:
    cache = PodCache(LABEL)
    cache.index = {}
    for p in (pod("a-0", 7), pod("b-0", 7, job="b"), pod("a-9", 7, ns="other")):
        cache.wrote(p, 0.0)
    assert names_rv(cache.job_pods("ns", "a", 1.0)) == {"a-0": 7}
    assert names_rv(cache.job_pods("ns", "b", 1.0)) == {"b-0": 7}
    assert names_rv(cache.all_pods(1.0)) == {"a-0": 7, "b-0": 7, "a-9": 7}
    assert cache.all_pods(OVERLAY_SECONDS + 1) == [] and cache.written == {}  # forgotten, groups removed


def test_trim_drops_managed_fields_only() -> None:
    body: dict[str, Any] = {"metadata": {"name": "x", "managedFields": [{"manager": "m"}]}, "spec": {"a": 1}}
    assert trim(body) == {"metadata": {"name": "x"}, "spec": {"a": 1}}
    assert body["metadata"]["managedFields"]  # the original is left alone
