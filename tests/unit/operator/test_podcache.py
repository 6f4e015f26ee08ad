"""The pod cache: the overlay of the operator's own writes on the pod watch's index, and the pod digests both
hold."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from ringleader_api import TrainingJob
from ringleader_operator.admission import Cluster
from ringleader_operator.changelog import CHANGE_LOG
from ringleader_operator.observed import ObservedPod, earlier_job_leftovers
from ringleader_operator.podcache import (
    GONE_SECONDS,
    OVERLAY_SECONDS,
    SHARED_BYTES,
    Grouped,
    PodCache,
    Shared,
    digest,
    overlay,
)
from ringleader_operator.quantities import pod_requests
from ringleader_operator.reading import Reading
from ringleader_operator.reconcile import plan

from .builders import training_job

LABEL = "ringleader.dev/job-name"
NOW = "2026-01-01T00:00:00Z"


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


def indexed(*pods: dict[str, Any]) -> Grouped:
    out = Grouped(LABEL)
    for p in pods:
        out.put(p)
    return out


def test_cache_reads_the_index_by_job_and_the_writes_it_has_not_caught_up_with() -> None:
    cache = PodCache(LABEL)
    assert not cache.ready
    cache.index = indexed(pod("a-0", 3), pod("b-0", 4, job="b"), pod("c-0", 5, job="c"))
    cache.wrote({**pod("a-1", 8), "metadata": {**pod("a-1", 8)["metadata"], "managedFields": [{"x": 1}]}}, 0.0)
    cache.wrote(pod("c-0", 5, job="c"), 0.0)  # the index holds this version already
    cache.wrote(pod("b-0", 6, job="b"), 0.0)
    assert cache.ready
    assert names_rv(cache.job_pods("ns", "a", 1.0)) == {"a-0": 3, "a-1": 8}
    newer = cache.newer_written(1.0)
    assert {k: int(p["metadata"]["resourceVersion"]) for k, p in newer.items()} == {("ns", "a-1"): 8, ("ns", "b-0"): 6}
    assert all("managedFields" not in p["metadata"] for p in newer.values())
    assert ("ns", "c") not in cache.written  # caught up with: dropped, its group too


def test_a_jobs_pods_show_only_its_own_writes_and_others_are_kept() -> None:
    cache = PodCache(LABEL)
    cache.index = indexed()
    for p in (pod("a-0", 7), pod("b-0", 7, job="b"), pod("a-9", 7, ns="other")):
        cache.wrote(p, 0.0)
    assert names_rv(cache.job_pods("ns", "a", 1.0)) == {"a-0": 7}
    assert names_rv(cache.job_pods("ns", "b", 1.0)) == {"b-0": 7}
    assert names_rv(list(cache.newer_written(1.0).values())) == {"a-0": 7, "b-0": 7, "a-9": 7}
    assert cache.newer_written(OVERLAY_SECONDS + 1) == {} and cache.written == {}  # forgotten, groups removed


def test_the_last_state_of_a_deleted_pod_is_kept_for_its_jobs_rounds_then_dropped() -> None:
    cache = PodCache(LABEL)
    cache.deleted({**pod("a-0", 7), "status": {"phase": "Failed"}}, 0.0)
    cache.deleted(pod("b-0", 8, job="b"), 10.0)
    cache.deleted(pod("x", 9, job=""), 10.0)  # not a job's: nothing to keep
    (last,) = cache.job_gone("ns", "a", 1.0)
    assert (last["metadata"]["name"], last["status"]) == ("a-0", {"phase": "Failed"})
    assert cache.job_gone("ns", "a", GONE_SECONDS + 1) == []  # expired, in the order they came
    assert names_rv(cache.job_gone("ns", "b", GONE_SECONDS + 1)) == {"b-0": 8}
    assert cache.job_gone("ns", "b", GONE_SECONDS + 11) == [] and cache.gone == {}


def test_a_pod_written_then_deleted_before_any_read_compared_them_is_no_phantom() -> None:
    """Released (a write) and deleted (its job deleted a moment later) between two reads: the watch's deletion ends
    the written version too, else it would take room in every admission for OVERLAY_SECONDS."""
    cache = PodCache(LABEL)
    cache.index = indexed()  # the watch never delivered the released version before the deletion
    cache.wrote(pod("a-0", 9), 0.0)
    cache.wrote(pod("a-1", 9), 0.0)
    cache.deleted(pod("a-0", 10), 0.5)
    assert names_rv(list(cache.newer_written(1.0).values())) == {"a-1": 9}  # a-1 was not deleted: still counted


def served(
    built: dict[str, Any],
    phase: str = "Pending",
    node: str | None = None,
    exit_code: int | None = None,
    reason: str = "",
    disruption: str = "",
    deleting: bool = False,
    owner: str = "u",
    waiting: str = "",
) -> dict[str, Any]:
    """A pod as the operator built it, as the API server serves it back: defaults, volumes, managedFields,
    annotations of others, and a status with everything a kubelet reports."""
    p = copy.deepcopy(built)
    meta, spec = p["metadata"], p["spec"]
    meta.update(uid=f"uid-{meta['name']}", resourceVersion="42", creationTimestamp=NOW, generation=1)
    meta["annotations"] = {**meta.get("annotations", {}), "kubectl.kubernetes.io/restartedAt": NOW}
    meta["managedFields"] = [{"manager": "ringleader", "operation": "Update", "fieldsV1": {"f:spec": {}}}]
    for ref in meta.get("ownerReferences") or []:
        ref["uid"] = owner
    if deleting:
        meta["deletionTimestamp"] = NOW
    spec.update(serviceAccountName="default", dnsPolicy="ClusterFirst", priority=0)
    spec["volumes"] = [{"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}]
    for c in spec["containers"]:
        c.update(imagePullPolicy="IfNotPresent", terminationMessagePath="/dev/termination-log")
        c["volumeMounts"] = [{"name": "kube-api-access", "mountPath": "/var/run/secrets"}]
    if node:
        spec["nodeName"] = node
        spec.pop("schedulingGates", None)
    state: dict[str, Any] = {"running": {"startedAt": NOW}}
    if exit_code is not None:
        state = {"terminated": {"exitCode": exit_code, "reason": "Error", "startedAt": NOW, "finishedAt": NOW}}
    if waiting:
        state = {"waiting": {"reason": waiting, "message": f'Back-off pulling image "registry/missing:1": {waiting}'}}
    ready = phase == "Running"
    conditions = [{"type": "Ready", "status": str(ready), "lastTransitionTime": NOW, "lastProbeTime": None}]
    if disruption:
        conditions.append({"type": "DisruptionTarget", "status": "True", "reason": disruption, "message": "m"})
    p["status"] = {
        "phase": phase,
        "conditions": conditions,
        "hostIP": "10.0.0.1",
        "podIP": "10.1.0.7",
        "qosClass": "Burstable",
        "startTime": NOW,
        "containerStatuses": [
            {"name": c["name"], "image": c["image"], "imageID": "sha256:x", "ready": ready, "restartCount": 0,
             "started": ready, "state": state, "lastState": {}}
            for c in spec["containers"]
        ],
        **({"reason": reason} if reason else {}),
    }  # fmt: skip
    return p


ONE_CPU = {"spec": {"containers": [{"name": "trainer", "image": "t", "resources": {"limits": {"cpu": "1"}}}]}}


def job(**spec: Any) -> TrainingJob:
    return training_job(template=ONE_CPU, **spec)


READY = [{"type": "Ready", "status": "True"}]
NODES = [{"metadata": {"name": "n1", "labels": {}}, "spec": {},
          "status": {"allocatable": {"cpu": "4", "pods": "110"}, "conditions": READY}}]  # fmt: skip


def scenarios() -> list[tuple[str, TrainingJob, list[dict[str, Any]]]]:
    on_failure = job(runPolicy={"restartPolicy": "OnFailure"})
    built = plan(Reading(on_failure, [], True), NOW).create_pods
    first, second = built
    return [
        ("gated, waiting for admission", on_failure, [served(first), served(second)]),
        ("bound and running", on_failure, [served(first, "Running", "n1"), served(second, "Running", "n1")]),
        ("one rank failed", on_failure, [served(first, "Running", "n1"), served(second, "Failed", "n1", exit_code=3)]),
        ("one rank evicted", on_failure, [served(first, "Running", "n1"),
            served(second, "Failed", "n1", reason="Evicted", disruption="EvictionByEvictionAPI", deleting=True)]),
        ("pods of an earlier job of this name", on_failure, [served(first, "Succeeded", "n1", owner="old")]),
        ("one rank's image not pulled", on_failure, [served(first, "Running", "n1"),
            served(second, "Pending", "n1", waiting="ImagePullBackOff")]),
        ("one rank's image pulled a first time", on_failure, [served(first, "Running", "n1"),
            served(second, "Pending", "n1", waiting="ErrImagePull")]),
    ]  # fmt: skip


@pytest.mark.parametrize(("what", "the_job", "pods"), scenarios(), ids=[s[0] for s in scenarios()])
def test_decisions_on_digests_equal_those_on_whole_pods(
    what: str, the_job: TrainingJob, pods: list[dict[str, Any]]
) -> None:
    digests = [digest(p) for p in pods]
    assert [ObservedPod.from_pod(d) for d in digests] == [ObservedPod.from_pod(p) for p in pods]
    assert earlier_job_leftovers("u", digests) == earlier_job_leftovers("u", pods)
    assert [pod_requests(d["spec"]) for d in digests] == [pod_requests(p["spec"]) for p in pods]
    whole = plan(Reading(the_job, pods, True), NOW, Cluster(NODES, pods))
    assert plan(Reading(the_job, digests, True), NOW, Cluster(NODES, digests)) == whole


def test_the_digest_keeps_what_is_read_and_drops_the_rest() -> None:
    built = plan(Reading(job(), [], True), NOW).create_pods[0]
    d = digest(served(built, "Failed", "n1", exit_code=3))
    assert d["metadata"]["annotations"] == built["metadata"]["annotations"]  # ours only: not kubectl's
    assert "managedFields" not in d["metadata"] and "volumes" not in d["spec"]
    assert d["spec"]["containers"] == [{"name": "trainer", "resources": {"limits": {"cpu": "1"}}}]
    ended = {"terminated": {"exitCode": 3, "reason": "Error", "finishedAt": NOW}}  # startedAt dropped
    assert d["status"]["containerStatuses"] == [{"name": "trainer", "state": ended}]
    assert d["status"]["podIP"] == "10.1.0.7" and d["spec"]["nodeName"] == "n1"


def test_digests_of_pods_alike_share_their_common_parts_and_only_those() -> None:
    first, second = plan(Reading(job(), [], True), NOW).create_pods[:2]
    a, b = digest(served(first, "Running", "n1")), digest(served(second, "Failed", "n1", exit_code=3))
    for part, k in (("metadata", "ownerReferences"), ("spec", "tolerations"), ("spec", "containers")):
        assert a[part][k] is b[part][k]  # one object serves both
    assert a["status"]["containerStatuses"] != b["status"]["containerStatuses"]  # unlike parts stay apart
    assert a["metadata"]["labels"] is not b["metadata"]["labels"]  # each rank's index: never shared


def test_the_shared_parts_table_is_bounded_and_skips_long_parts() -> None:
    table = Shared(limit=3)
    long = {"message": "x" * SHARED_BYTES}
    assert table(long) is long and not table.parts  # a long part is kept as it is, not remembered
    kept = [table({"i": i}) for i in range(3)]
    assert table({"i": 0}) is kept[0]
    table({"i": 3})  # the table is full: it starts again
    assert len(table.parts) == 1 and table({"i": 0}) is not kept[0] and table({"i": 0}) == kept[0]


def changed_since(index: Grouped, since: int | None, group: tuple[str, str] = ("ns", "a")) -> dict[str, int] | None:
    """The names and versions the index says changed in `group` since revision `since` (-1: gone; None: it
    cannot say)."""
    delta = index.delta(group, since)
    assert delta is not None
    if delta.changed is None:
        return None
    return {n: -1 if p is None else int(p["metadata"]["resourceVersion"]) for n, p in delta.changed.items()}


def test_a_group_says_which_pods_changed_since_a_revision_of_it() -> None:
    index = Grouped(LABEL)
    assert index.delta(("ns", "a"), None) is None  # no pods, no revision
    index.put(pod("a-0", 1))
    first = index.delta(("ns", "a"), None)
    assert first is not None and first.changed is None and first.source is index  # no revision to compare with
    index.put(pod("b-0", 2, job="b"))  # another group's change leaves this one's revision as it is
    assert changed_since(index, first.revision) == {}
    index.put(pod("a-1", 3))
    index.put(pod("a-0", 4))
    index.put(pod("a-0", 5))
    index.remove(("ns", "a-1"))
    assert changed_since(index, first.revision) == {"a-0": 5, "a-1": -1}
    later = index.delta(("ns", "a"), first.revision)
    assert later is not None and changed_since(index, later.revision) == {}
    assert changed_since(index, later.revision + 100) is None  # not a revision it had


def test_a_reader_further_behind_than_the_log_or_of_a_group_made_again_reads_the_group_whole() -> None:
    index = Grouped(LABEL)
    index.put(pod("a-0", 1))
    start = index.delta(("ns", "a"), None)
    assert start is not None
    for rv in range(2, CHANGE_LOG + 2):  # the log's length of changes after the start: the start's own forgotten
        index.put(pod("a-0", rv))
    assert changed_since(index, start.revision) == {"a-0": CHANGE_LOG + 1}  # every change since still remembered
    index.put(pod("a-1", CHANGE_LOG + 2))
    assert changed_since(index, start.revision) is None  # one of them forgotten now
    gone = index.delta(("ns", "a"), None)
    assert gone is not None
    index.remove(("ns", "a-0"))
    index.remove(("ns", "a-1"))
    assert index.delta(("ns", "a"), gone.revision) is None  # no pods left
    index.put(pod("a-0", CHANGE_LOG + 3))  # the group made again: what was before is not remembered
    assert changed_since(index, gone.revision) is None


def test_the_cache_gives_no_delta_while_its_own_writes_stand_in_for_the_index() -> None:
    cache = PodCache(LABEL)
    cache.index = Grouped(LABEL)
    cache.index.put(pod("a-0", 1))
    pods, delta = cache.job_pods_since("ns", "a", 0.0, None)
    assert names_rv(pods) == {"a-0": 1} and delta is not None and delta.changed is None
    cache.wrote(pod("a-0", 2), 0.0)
    assert cache.job_pods_since("ns", "a", 1.0, (cache.index, delta.revision))[1] is None  # overlaid
    cache.index.put(pod("a-0", 2))  # the watch caught up: the write goes
    pods, caught_up = cache.job_pods_since("ns", "a", 2.0, (cache.index, delta.revision))
    assert names_rv(pods) == {"a-0": 2} and caught_up is not None and caught_up.changed is not None
    assert set(caught_up.changed) == {"a-0"}
    other = Grouped(LABEL)  # a revision of another index is no revision of this one
    assert cache.job_pods_since("ns", "a", 2.0, (other, caught_up.revision))[1].changed is None  # type: ignore[union-attr]
