"""The ledger of room (admission.Ledger): kept pod event by pod event, it equals `Room.of` the pods it was told
of under any order of events, and a view of it with changes and without a job equals `Room.of` those pods, so
that gang admission decides as it did when it weighed every pod of the cluster in each round."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from ringleader_api import LABEL_JOB
from ringleader_operator.admission import GATE, Cluster, Ledger, Room
from ringleader_operator.placement import admit

from .test_admission import gang_pod, node

KEYS = [(ns, f"p{i}") for ns in ("a", "b") for i in range(5)]
JOBS = ["j1", "j2", None]
NODES = [node(f"n{i}", gpus=4, cpu="8") for i in range(3)]
_uids = itertools.count()

pods = st.fixed_dictionaries(
    {
        "job": st.sampled_from(JOBS),
        "state": st.sampled_from(["bound", "bound", "released", "gated", "other-gate", "finished"]),
        "node": st.sampled_from([n["metadata"]["name"] for n in NODES] + ["gone-node"]),
        "gpus": st.integers(0, 3),
        "cpu": st.sampled_from(["500m", "1", "1.5", "2"]),
        "deleting": st.booleans(),
    }
)
events = st.lists(st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), pods)), max_size=30)


def build(k: tuple[str, str], d: dict[str, Any]) -> dict[str, Any]:
    """A pod digest of `k` as `d` says (each a new version: a uid of its own, so no remembered requests mix)."""
    meta: dict[str, Any] = {"namespace": k[0], "name": k[1], "uid": f"u{next(_uids)}", "resourceVersion": "1"}
    meta["labels"] = {LABEL_JOB: d["job"]} if d["job"] else {}
    if d["deleting"]:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict[str, Any] = {"containers": [{"resources": {"requests": {"cpu": d["cpu"]},
                                                          "limits": {"nvidia.com/gpu": d["gpus"]}}}]}  # fmt: skip
    status = {"phase": "Succeeded" if d["state"] == "finished" else "Running" if d["state"] == "bound" else "Pending"}
    if d["state"] in ("bound", "finished"):
        spec["nodeName"] = d["node"]
    if d["state"] == "gated":
        spec["schedulingGates"] = [{"name": GATE}]
    if d["state"] == "other-gate":
        spec["schedulingGates"] = [{"name": "example.com/quota"}]
    return {"metadata": meta, "spec": spec, "status": status}


def apply(
    events: list[tuple[tuple[str, str], dict[str, Any] | None]],
    ledger: Ledger,
    state: dict[tuple[str, str], dict[str, Any]],
) -> None:
    for k, d in events:
        if d is None:
            ledger.remove(k)
            state.pop(k, None)
        else:
            state[k] = build(k, d)
            ledger.put(k, state[k])


@settings(max_examples=200, deadline=None)
@given(events)
def test_the_kept_ledger_equals_the_room_of_its_pods_under_any_order_of_events(
    seen: list[tuple[tuple[str, str], dict[str, Any] | None]],
) -> None:
    ledger, state = Ledger(), dict[tuple[str, str], dict[str, Any]]()
    apply(seen, ledger, state)
    assert ledger.view() == Room.of(state.values())
    assert set(ledger.parts) <= set(state)
    assert {g: len(ks) for g, ks in ledger.groups.items()} == Counter(p.group for p in ledger.parts.values())


@settings(max_examples=200, deadline=None)
@given(events, events, st.sampled_from([None, *(("a", j) for j in JOBS), ("b", "j1")]))
def test_a_view_with_changes_and_without_a_job_equals_the_room_of_those_pods(
    seen: list[tuple[tuple[str, str], dict[str, Any] | None]],
    later: list[tuple[tuple[str, str], dict[str, Any] | None]],
    without: tuple[str, str | None] | None,
) -> None:
    """`later` stands for what the pod watch has not delivered yet (the operator's own writes, other jobs' claims):
    the view counts those versions (None: gone) in place of the kept ones, the ledger itself unchanged."""
    ledger, state = Ledger(), dict[tuple[str, str], dict[str, Any]]()
    apply(seen, ledger, state)
    before = ledger.view()
    changes: dict[tuple[str, str], dict[str, Any] | None] = {}
    for k, d in later:
        changes[k] = None if d is None else build(k, d)
    over = {**state, **{k: p for k, p in changes.items() if p is not None}}
    over = {k: p for k, p in over.items() if changes.get(k, p) is not None}
    want = Room.of(p for p in over.values() if without is None or _group(p) != without)
    assert ledger.view(changes, without) == want
    assert ledger.view() == before  # a view changes nothing kept
    # And admission decides the same on either.
    for gpus in (1, 3, 4):
        gang = [gang_pod(gpus), gang_pod(1)]
        assert admit(gang, NODES, ledger.view(changes, without)) == admit(gang, NODES, want)


def _group(pod: dict[str, Any]) -> tuple[str, str | None]:
    return pod["metadata"]["namespace"], pod["metadata"]["labels"].get(LABEL_JOB)


def test_a_cluster_of_pods_and_one_of_a_ledger_offer_the_same_room_without_a_job() -> None:
    def pod(name: str, job: str, state: str, gpus: int) -> dict[str, Any]:
        return build(
            ("a", name), {"job": job, "state": state, "node": "n0", "gpus": gpus, "cpu": "1", "deleting": False}
        )

    pods = [pod("p0", "j1", "bound", 2), pod("p1", "j2", "bound", 1), pod("p2", "j2", "gated", 1)]
    ledger = Ledger()
    for p in pods:
        ledger.put((p["metadata"]["namespace"], p["metadata"]["name"]), p)
    listed, kept = Cluster(NODES, pods), Cluster(NODES, rooms=lambda without: ledger.view(None, without))
    for without in (None, ("a", "j1"), ("a", "j2")):
        assert listed.room(without) == kept.room(without)
    assert listed.room().gangs_waiting_besides(("a", "j1")) and not listed.room().gangs_waiting_besides(("a", "j2"))
    assert listed.room(("a", "j1")).bound["n0"]["nvidia.com/gpu"] == 1


def test_the_reconcilers_kept_cluster_counts_its_writes_and_other_jobs_claims_as_the_listed_one_did() -> None:
    """The pod watch's index and ledger, what this process wrote since (newer than the index), and the room other
    jobs' admissions claimed: `ClusterAdmission.cluster` offers what `Room.of` the pods overlaid so (claims.overlay over
    podcache.overlay) takes, its own job's claims left out."""
    from ringleader_operator.podcache import PodCache, PodIndexes, overlay
    from ringleader_operator.reconciler import Reconciler

    from .test_reconciler_reads import FakeKube

    def pod(name: str, job: str, state: str, gpus: int, version: int) -> dict[str, Any]:
        p = build(("a", name), {"job": job, "state": state, "node": "n1", "gpus": gpus, "cpu": "1", "deleting": False})
        p["metadata"]["resourceVersion"] = str(version)
        return p

    kube = FakeKube(service_exists=True)
    kube.node_list = NODES
    ledger = Ledger()
    indexes = PodIndexes(LABEL_JOB, "role", "index", also=ledger)
    for p in (pod("x-0", "x", "bound", 2, 1), pod("y-0", "y", "gated", 4, 2), pod("y-1", "y", "gated", 4, 3)):
        indexes.apply("ADDED", p)
    cache = PodCache(LABEL_JOB, indexes)
    r = Reconciler(kube, emit=lambda *_: None, cache=cache, clusterwide=True, ledger=ledger)
    cache.listed()
    now = time.monotonic()
    cache.wrote(pod("y-0", "y", "released", 4, 5), now)  # y's release, not yet delivered by the watch
    cache.wrote(pod("x-0", "x", "bound", 2, 1), now)  # delivered already: the index's version stands
    r.admission.claims.claim(
        ("a", "z"), [pod("z-0", "z", "released", 3, 0)], now
    )  # z's admission, its create not back yet
    r.admission.claims.claim(
        ("a", "y"), [pod("y-1", "y", "released", 4, 3)], now
    )  # y's own claim: left out of y's round
    listed = r.admission.claims.overlay(overlay(list(indexes.by_job["a", "x"]) + list(indexes.by_job["a", "y"]),
                                      cache.written.values(), now), now, ("a", "y"))  # fmt: skip
    cluster = asyncio.run(r.admission.cluster(exclude=("a", "y")))
    assert cluster.room() == Room.of(listed)
    assert cluster.room(("a", "x")) == Room.of(p for p in listed if p["metadata"]["name"] != "x-0")
    assert sorted(k[1] for k in cluster.room().waiting) == ["y-0", "z-0"]  # y-1 stays gated: its claim is y's
