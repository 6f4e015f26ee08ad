"""What a reconcile round reads from the API server: the job's Service only until it is known to exist (read
or created), again on a fresh round or when the job is a new one under the same name; fresh rounds are due
every FRESH_SECONDS; a round that creates a gang weighs it against the cluster first (created released when it
fits, gated and weighed again later when not). Against a
recording fake of Kube (a narrow unit test of the reconciler's bookkeeping)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from prometheus_client import REGISTRY
from ringleader_api import Role, TrainingJobStatus
from ringleader_api import status as status_module
from ringleader_operator import admission, observed, round_reader, status_writes
from ringleader_operator import reconciler as reconciler_module
from ringleader_operator.admission import Cluster
from ringleader_operator.jobmemory import PLAN_SHARE
from ringleader_operator.kube_errors import Conflict
from ringleader_operator.reconciler import Reconciler

from tests.unit.operator.builders import TEMPLATE, gpu_node, pod
from tests.unit.operator.test_status_writes import merge


class FakeKube:
    """Answers a round's reads from fields and records its calls by name."""

    def __init__(self, service_exists: bool, pods: bool = True) -> None:
        self.uid = "u1"
        self.service_exists = service_exists
        self.pods = pods
        self.calls: list[str] = []
        self.foreign: list[dict[str, Any]] = []  # pods carrying the job's labels that it does not own
        self.node_list: list[dict[str, Any]] = []  # the cluster's nodes, for gang admission
        self.status: dict[str, Any] = {}  # the last status written
        self.stored: dict[str, Any] = {}  # the job's status as the API server holds it

    async def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        self.calls.append("get_job")
        return {
            "metadata": {"name": name, "namespace": namespace, "uid": self.uid, "generation": 1},
            "spec": {"workers": {"replicas": 2, "template": TEMPLATE}},
            "status": self.stored,
        }

    async def list_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        self.calls.append("list_pods")
        if not self.pods:
            return []
        owner = {"kind": "TrainingJob", "name": job, "uid": self.uid, "controller": True}
        pods = [pod(Role.WORKER, i, "Running") for i in range(2)]
        for p in pods:
            p["metadata"]["ownerReferences"] = [owner]
        return pods + self.foreign

    async def read_service(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls.append("read_service")
        if not self.service_exists:
            return None
        return {"metadata": {"name": name, "ownerReferences": [{"kind": "TrainingJob", "uid": self.uid}]}}

    async def delete_deployment(self, namespace: str, name: str) -> None:
        self.calls.append("delete_deployment")

    async def create_if_absent(self, body: dict[str, Any]) -> None:
        kind = {
            "Secret": "secret",
            "NetworkPolicy": "network_policy",
            "Service": "service",
            "Deployment": "deployment",
        }[body["kind"]]
        self.calls.append(f"create_{kind}")
        if kind == "network_policy":
            self.policy = body
        if kind == "service":
            self.service_exists = True

    async def patch_status(
        self, namespace: str, name: str, status: dict[str, Any], resource_version: str | None = None
    ) -> dict[str, Any] | None:
        self.calls.append("patch_status")
        self.status = status
        return None  # the job as written is not answered: rounds read it again

    async def create_pods(self, pods: list[dict[str, Any]]) -> int:
        self.calls.append("create_pods")
        self.created = pods
        return len(pods)

    # The rest of KubeApi: recorded, answering as an empty cluster would.
    async def pod_ip(self, namespace: str, name: str) -> str | None:
        self.calls.append("pod_ip")
        return None

    async def delete_pods(self, namespace: str, names: list[str], grace_seconds: int | None = None) -> None:
        self.calls.append("delete_pods")

    async def ungate_pods(
        self, namespace: str, names: list[str], pins: dict[str, dict[str, str]] | None = None
    ) -> None:
        self.calls.append("ungate_pods")

    async def create_scheduling_object(self, body: dict[str, Any]) -> None:
        self.calls.append(f"create_{body['kind']}")

    async def delete_job(self, namespace: str, name: str, uid: str) -> None:
        self.calls.append("delete_job")

    async def nodes(self) -> list[dict[str, Any]]:
        return self.node_list

    async def cluster(self) -> Cluster:
        return Cluster(self.node_list, [])

    async def serves(self, group: str, version: str, *plurals: str) -> bool:
        self.calls.append("serves")
        return False

    async def get_workload(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls.append("get_workload")
        return None

    async def create_workload(self, body: dict[str, Any]) -> dict[str, Any] | None:
        self.calls.append("create_workload")
        return body

    async def delete_workload(self, namespace: str, name: str, uid: str) -> None:
        self.calls.append("delete_workload")

    async def patch_workload(
        self, namespace: str, name: str, body: dict[str, Any], resource_version: str, status: bool = False
    ) -> dict[str, Any] | None:
        self.calls.append("patch_workload")
        return None

    async def get_cluster_object(self, group: str, version: str, plural: str, name: str) -> dict[str, Any] | None:
        self.calls.append(f"get_{plural}")
        return None

    async def close(self) -> None:
        self.calls.append("close")


def _rounds(kube: FakeKube, steps: list[tuple[bool, str]], **options: Any) -> list[list[str]]:
    """Run one round per step (fresh, job uid); the Service reads and creates of each round (and the Secret's
    and NetworkPolicy's creates, which go with the Service's)."""
    r = Reconciler(kube, emit=lambda *_: None, **options)
    out = []

    async def main() -> None:
        for fresh, uid in steps:
            if uid != kube.uid:  # a new job of the same name: its watch event comes first
                kube.uid = uid
                assert r.job_seen(await kube.get_job("ns", "j"))
            kube.calls.clear()
            await r.round("ns", "j", fresh)
            out.append([c for c in kube.calls if any(k in c for k in ("service", "secret", "network_policy"))])

    asyncio.run(main())
    return out


R, S, C = "read_service", "create_secret", "create_service"


@pytest.mark.parametrize(
    ("service_exists", "steps", "want"),
    [
        (True, [(False, "u1")] * 3, [[R], [], []]),  # read once, then known
        (True, [(False, "u1"), (False, "u1"), (True, "u1"), (False, "u1")], [[R], [], [R], []]),  # fresh reads
        (False, [(False, "u1")] * 3, [[R, S, C], [], []]),  # created, token first: known without reading back
        (True, [(False, "u1"), (False, "u2"), (False, "u2")], [[R], [R], []]),  # a new job of the same name
    ],
    ids=["read-once", "fresh-reads-again", "created", "new-uid-reads-again"],
)
def test_the_service_is_read_until_known(
    service_exists: bool, steps: list[tuple[bool, str]], want: list[list[str]]
) -> None:
    assert _rounds(FakeKube(service_exists), steps) == want


def test_with_operator_pods_a_new_job_gets_its_network_policy_before_its_service() -> None:
    kube = FakeKube(service_exists=False)
    got = _rounds(kube, [(False, "u1")] * 2, operator_pods=("ops", {"app": "ringleader"}))
    assert got == [[R, S, "create_network_policy", C], []]
    assert kube.policy["spec"]["ingress"][1]["from"][0]["podSelector"] == {"matchLabels": {"app": "ringleader"}}


def test_a_fresh_round_is_due_fresh_seconds_after_the_job_was_first_seen_or_last_read_fresh() -> None:
    kube = FakeKube(service_exists=True)
    r = Reconciler(kube, emit=lambda *_: None)
    assert not r.fresh_due("ns", "j")  # first seen now: the pod cache was listed before
    r.memory(("ns", "j")).fresh_read_at -= reconciler_module.FRESH_SECONDS
    assert r.fresh_due("ns", "j")
    kube.calls.clear()
    asyncio.run(r.round("ns", "j", True))
    assert kube.calls[:3] == ["get_job", "list_pods", "read_service"]  # a fresh round reads all three
    assert not r.fresh_due("ns", "j")
    r.memory(("ns", "j")).fresh_read_at -= reconciler_module.FRESH_SECONDS - 1
    assert not r.fresh_due("ns", "j")


@pytest.mark.parametrize(
    ("nodes", "gated"), [([gpu_node(8)], False), ([], True)], ids=["room:created-released", "no-room:created-gated"]
)
def test_a_round_that_creates_a_gang_weighs_it_first_and_looks_at_its_pods_at_once(
    nodes: list[dict[str, Any]], gated: bool
) -> None:
    kube = FakeKube(service_exists=True, pods=False)
    kube.node_list = nodes
    r = Reconciler(kube, emit=lambda *_: None)

    async def main() -> float | None:
        await r.round("ns", "j", False)
        pending = r.queue.timers.get(("ns", "j"))
        due = None if pending is None else pending.when() - asyncio.get_running_loop().time()
        r.queue.close()
        return due

    due = asyncio.run(main())
    assert "create_pods" in kube.calls and "ungate_pods" not in kube.calls  # no release patch per pod
    assert [admission.gated(p) for p in kube.created] == [gated, gated]
    # The next round comes at once (no pod event needed): it records the ranks' pods as seen, so that one
    # evicted in its first second counts as the rank's failure.
    assert due is not None and due <= 0.0
    assert not any(rank.get("podSeen") for rank in kube.status.get("ranks", {}).values())
    kube.pods = True  # the created pods, as the next round reads them
    asyncio.run(r.round("ns", "j", False))
    assert kube.status["ranks"] == {"worker-0-1": {"podSeen": True}}  # ranks alike: one entry


def test_an_older_operators_per_rank_entries_are_rewritten_as_one_group_and_removed() -> None:
    """status.ranks as an operator before range keys wrote it: the first round writes the group and removes the
    old keys by null (a merge patch keeps keys it does not name), though the status means the same."""
    old_entry = {"restarts": 0, "stops": 0, "stalls": 0, "uncounted": 0, "straggles": 0, "podSeen": True,
                 "lastReason": "", "lastMessage": ""}  # fmt: skip
    kube = FakeKube(service_exists=True)
    kube.stored = {"ranks": {"worker-0": old_entry, "worker-1": old_entry}}
    r = Reconciler(kube, emit=lambda *_: None)

    async def main() -> None:
        await r.round("ns", "j", False)
        r.queue.close()

    asyncio.run(main())
    assert kube.status["ranks"] == {"worker-0-1": {"podSeen": True}, "worker-0": None, "worker-1": None}


def test_a_status_key_the_new_status_leaves_out_is_removed_by_null_once_and_progress_is_left_alone() -> None:
    """A key the API server holds and the round's status no longer has (here one an older operator wrote) is
    named null in the write, so it goes; the scraper's progress is not the round's to remove; and once the key is
    gone the next round writes nothing (no write each round for a key that stays)."""
    kube = FakeKube(service_exists=True)
    kube.stored = {"retiredField": {"a": 1}, "progress": {"step": 7}}
    r = Reconciler(kube, emit=lambda *_: None)

    async def main() -> None:
        await r.round("ns", "j", True)  # fresh: the job as kube.stored holds it
        assert kube.status["retiredField"] is None and "progress" not in kube.status
        kube.stored = merge(kube.stored, kube.status)
        assert "retiredField" not in kube.stored and kube.stored["progress"] == {"step": 7}
        kube.calls.clear()
        await r.round("ns", "j", True)
        assert "patch_status" not in kube.calls, kube.calls
        r.queue.close()

    asyncio.run(main())


def test_a_settled_pending_loss_is_removed_from_the_stored_goodput_by_null() -> None:
    """goodput.pendingLoss, settled by the round once worker 0's page says where it continued from, is named null
    in the write (a merge patch keeps a nested key it does not name: the loss would stay pending for good)."""
    kube = FakeKube(service_exists=True)
    pending = {"step": 400, "atMost": 400, "resumedAt": "2026-01-01T00:00:00.000Z"}
    kube.stored = {
        "progress": {"step": 690, "resumedStep": 450, "resumedAt": "2026-01-01T00:00:29.000Z"},
        "goodput": {"accountedAt": "2026-01-01T00:00:00Z", "pendingLoss": pending},
    }
    r = Reconciler(kube, emit=lambda *_: None)

    async def main() -> None:
        await r.round("ns", "j", True)
        assert kube.status["goodput"]["pendingLoss"] is None, kube.status["goodput"]
        kube.stored = merge(kube.stored, kube.status)
        assert "pendingLoss" not in kube.stored["goodput"] and kube.stored["goodput"]["stepsLost"] == 0
        r.queue.close()

    asyncio.run(main())


def test_pods_the_job_does_not_own_are_reported_once_per_change() -> None:
    kube = FakeKube(service_exists=True)
    events: list[tuple[str, str]] = []
    r = Reconciler(kube, emit=lambda _obj, _kind, reason, message: events.append((reason, message)))

    def stray(name: str) -> dict[str, Any]:
        p = pod(Role.WORKER, 0, "Succeeded")
        p["metadata"] |= {"name": name, "ownerReferences": []}
        return p

    async def rounds(n: int) -> None:
        for _ in range(n):
            await r.round("ns", "j", True)

    asyncio.run(rounds(2))
    assert all(reason != "ForeignPodsIgnored" for reason, _ in events)
    events.clear()
    kube.foreign = [stray("j-worker-0-copy")]
    asyncio.run(rounds(3))
    kube.foreign.append(stray("by-hand"))
    asyncio.run(rounds(2))
    kube.foreign = []
    asyncio.run(rounds(1))
    foreign = [message for reason, message in events if reason == "ForeignPodsIgnored"]
    assert len(foreign) == 2, events
    assert foreign[0].endswith("ignored: j-worker-0-copy") and foreign[1].endswith("ignored: by-hand, j-worker-0-copy")


class SlowWrites(FakeKube):
    """Jobs of two 3-GPU workers by name; pod creates that land only when `landed` is set, and are recorded."""

    def __init__(self) -> None:
        super().__init__(service_exists=False, pods=False)
        self.landed = asyncio.Event()
        self.created_by_job: dict[str, list[dict[str, Any]]] = {}

    async def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        job = await super().get_job(namespace, name)
        job["metadata"]["uid"] = f"uid-{name}"
        job["spec"]["workers"]["gpus"] = 3
        return job

    async def read_service(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None  # each job's Service is created by its round

    async def create_pods(self, pods: list[dict[str, Any]]) -> int:
        await self.landed.wait()
        self.created_by_job[pods[0]["metadata"]["labels"]["ringleader.dev/job-name"]] = pods
        return len(pods)


def test_admission_counts_the_room_a_decision_claimed_before_its_writes_land() -> None:
    """Job a fits the 8-GPU node and is released; its creates are still in flight when job b decides, and the
    node shows none of a's pods yet: b must still see the room as taken and wait, gated."""
    kube = SlowWrites()
    kube.node_list = [gpu_node(8)]
    r = Reconciler(kube, emit=lambda *_: None)

    async def main() -> None:
        first = asyncio.create_task(r.round("ns", "a", False))
        await asyncio.sleep(0.05)  # a has decided and released the lock; its creates wait
        assert not r.admission.lock.locked() and "a" not in kube.created_by_job
        second = asyncio.create_task(r.round("ns", "b", False))
        await asyncio.sleep(0.05)
        kube.landed.set()
        await asyncio.gather(first, second)
        r.queue.close()

    asyncio.run(main())
    assert [admission.gated(p) for p in kube.created_by_job["a"]] == [False, False]
    assert [admission.gated(p) for p in kube.created_by_job["b"]] == [True, True]


def _job(uid: str = "u1", generation: int = 1, rv: int = 1, phase: str | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "j", "namespace": "ns", "uid": uid, "generation": generation, "resourceVersion": str(rv),
                     "managedFields": [{"manager": "kubectl"}]},
        "spec": {"workers": {"replicas": 2, "template": TEMPLATE}},
        **({"status": {"phase": phase}} if phase else {}),
    }  # fmt: skip


@pytest.mark.parametrize(
    ("events", "want"),
    [
        ([_job()], [True]),  # first sight (created, or listed at start)
        ([_job(), _job(rv=2, phase="Running")], [True, False]),  # a status write: no round
        ([_job(), _job(generation=2, rv=3)], [True, True]),  # the spec changed
        ([_job(), _job(generation=2, rv=3), _job(generation=2, rv=4, phase="Running")], [True, True, False]),
        ([_job(), _job(uid="u2", rv=9)], [True, True]),  # a new job of the same name, its predecessor's end unseen
    ],
    ids=["new", "status-only", "new-generation", "status-after-new-generation", "new-uid"],
)
def test_a_job_event_asks_for_a_round_when_the_job_is_new_or_its_spec_changed(
    events: list[dict[str, Any]], want: list[bool]
) -> None:
    async def seen() -> tuple[Reconciler, list[bool]]:  # on an event loop, as kopf calls it: a running job's
        r = Reconciler(FakeKube(service_exists=True), emit=lambda *_: None)  # scrapes are scheduled on it
        answers = [r.job_seen(e) for e in events]
        r.scrapes.close()
        return r, answers

    r, answers = asyncio.run(seen())
    assert answers == want
    kept = r.memory(("ns", "j")).body
    assert kept is not None and kept["metadata"]["resourceVersion"] == events[-1]["metadata"]["resourceVersion"]
    assert "managedFields" not in kept["metadata"]


class WritesAnswer(FakeKube):
    """Status writes answer the job as written (a newer resourceVersion); the first `conflicts` of them meet a
    newer version instead."""

    def __init__(self, conflicts: int = 0) -> None:
        super().__init__(service_exists=True)
        self.rv, self.conflicts = 5, conflicts

    async def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        self.calls.append("get_job")
        return _job(rv=self.rv, phase="Pending")

    async def patch_status(
        self, namespace: str, name: str, status: dict[str, Any], resource_version: str | None = None
    ) -> dict[str, Any] | None:
        self.calls.append(f"patch_status@{resource_version}")
        if self.conflicts:
            self.conflicts -= 1
            self.rv += 1
            raise Conflict("the object has been modified", 409)
        self.rv += 1
        self.status = status
        return {**_job(rv=self.rv), "status": status}


def test_rounds_read_the_job_as_last_seen_and_from_the_api_server_only_when_they_must() -> None:
    kube = WritesAnswer(conflicts=1)
    r = Reconciler(kube, emit=lambda *_: None)

    async def main() -> list[str]:
        assert r.job_seen(_job(rv=5, phase="Pending"))
        await r.trigger("ns", "j")  # reads the job as its event showed it; the write meets a newer one
        await r.trigger("ns", "j")  # as its own write answered it: no read
        calls = list(kube.calls)
        r.job_gone("ns", "j")
        await r.trigger("ns", "j")  # the job went: asked again, the API server answers
        r.queue.close()
        return [*calls, "|", *kube.calls[len(calls) :]]

    calls = [c for c in asyncio.run(main()) if c == "|" or "job" in c or "status" in c]  # the job's reads, writes
    # conflict -> the round runs again at once, reading the job from the API server; then no more reads
    assert calls[:3] == ["patch_status@5", "get_job", "patch_status@6"], calls
    assert calls.count("get_job") == 2 and calls[calls.index("|") + 1] == "get_job", calls


def test_the_jobs_by_phase_gauge_moves_by_each_jobs_change() -> None:
    r = Reconciler(FakeKube(service_exists=True), emit=lambda *_: None)

    def gauge() -> dict[str, float]:
        return {p: REGISTRY.get_sample_value("ringleader_jobs", {"phase": p}) or 0.0 for p in ("Pending", "Running")}

    r._record_phase(("ns", "a"), "")  # no phase yet counts as Pending
    r._record_phase(("ns", "b"), "Running")
    assert gauge() == {"Pending": 1, "Running": 1}
    r._record_phase(("ns", "a"), "Running")
    r._record_phase(("ns", "a"), "Running")  # no change, no count
    assert gauge() == {"Pending": 0, "Running": 2}
    r.job_gone("ns", "b")
    r.job_gone("ns", "b")  # gone twice (an event and a round): counted once
    assert gauge() == {"Pending": 0, "Running": 1}


class ManagedElsewhere(FakeKube):
    """A job whose spec.managedBy names `managed_by`."""

    def __init__(self, managed_by: str) -> None:
        super().__init__(service_exists=False)
        self.managed_by = managed_by

    async def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        job = await super().get_job(namespace, name)
        job["spec"]["managedBy"] = self.managed_by
        return job


@pytest.mark.parametrize(
    ("managed_by", "acted"),
    [("kueue.x-k8s.io/multikueue", False), ("example.com/other", False), ("ringleader.dev/operator", True)],
)
def test_a_job_managed_by_another_controller_is_left_alone(managed_by: str, acted: bool) -> None:
    kube = ManagedElsewhere(managed_by)
    r = Reconciler(kube, emit=lambda *_: None)
    asyncio.run(r.round("ns", "j", False))
    writes = [c for c in kube.calls if c.startswith(("create", "patch", "delete"))]
    assert bool(writes) is acted, kube.calls
    assert (("ns", "j") in r.jobs) is acted  # nothing kept of a job that is not ours


@pytest.mark.parametrize(("round_seconds", "window"), [(None, 0.5), (0.01, 0.5), (0.03, 1.2), (0.1, 4.0), (2.0, 5.0)])
def test_a_large_jobs_pod_events_wait_longer_to_share_a_round(round_seconds: float | None, window: float) -> None:
    """The window grows with what the job's last round cost (40 x), from 0.5 s up to 5 s."""
    r = Reconciler(FakeKube(service_exists=True), emit=lambda *_: None)
    if round_seconds is not None:
        r.memory(("ns", "j")).round_seconds = round_seconds
    assert r.pod_events_window("ns", "j") == pytest.approx(window)
    r.queue.close()


def count_status_encodings(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that grows by one with each status encoding (status_writes.status_json) from now on."""
    calls: list[int] = []
    real = status_writes.status_json

    def counted(*args: Any, **kwargs: Any) -> dict[str, Any]:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(status_writes, "status_json", counted)
    return calls


def test_a_steady_round_writes_and_serializes_nothing_while_the_stored_ranks_are_as_last_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A round whose plan leaves the status as read writes nothing; once status.ranks is stored as this process
    last found it, such a round does not even serialize the status (a 10,000-rank job's status costs that much)."""
    kube = FakeKube(service_exists=True)
    r = Reconciler(kube, emit=lambda *_: None)
    serialized = count_status_encodings(monkeypatch)

    def round_() -> None:
        async def main() -> None:
            await r.round("ns", "j", True)  # fresh: the job as kube.stored holds it
            r.queue.close()

        asyncio.run(main())

    round_()
    assert kube.calls.count("patch_status") == 1
    kube.stored = merge(kube.stored, kube.status)  # the API server applies the patch
    round_()  # the status is as planned: nothing written; the stored ranks are now known
    assert kube.calls.count("patch_status") == 1 and serialized
    serialized.clear()
    round_()
    assert kube.calls.count("patch_status") == 1 and not serialized
    kube.stored = {**kube.stored, "ranks": {"worker-0": {"podSeen": True}, "worker-1": {"podSeen": True}}}
    round_()  # someone else wrote them per rank: grouped again
    assert kube.calls.count("patch_status") == 2 and kube.status["ranks"]["worker-0-1"] == {"podSeen": True}


class VersionedKube(FakeKube):
    """A FakeKube whose job has resourceVersions, its status written by merge patch (answered with the job),
    and whose pods run or not as `running` says."""

    def __init__(self) -> None:
        super().__init__(service_exists=True)
        self.version, self.running = 1, False

    async def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        job = await super().get_job(namespace, name)
        job["metadata"]["resourceVersion"] = str(self.version)
        return job

    async def list_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        pods = await super().list_pods(namespace, job)
        for p in pods:
            p["status"]["phase"] = "Running" if self.running else "Pending"
        return pods

    async def patch_status(
        self, namespace: str, name: str, status: dict[str, Any], resource_version: str | None = None
    ) -> dict[str, Any] | None:
        await super().patch_status(namespace, name, status, resource_version)
        self.stored, self.version = merge(self.stored, status), self.version + 1
        return await self.get_job(namespace, name)


def test_a_round_compares_its_status_with_the_one_it_wrote_last_not_the_one_read_encoded_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While the job read is the version this process's last status write made, a round that changed the status
    encodes only its own (status.ranks grouped: a 10,000-rank job's round pays that once, not twice); a status
    someone else wrote since is encoded from what was read."""
    kube = VersionedKube()
    r = Reconciler(kube, emit=lambda *_: None)
    encoded = count_status_encodings(monkeypatch)

    def round_(fresh: bool = False) -> None:
        encoded.clear()

        async def main() -> None:
            await r.round("ns", "j", fresh)
            r.queue.close()

        asyncio.run(main())

    round_(fresh=True)
    assert kube.calls.count("patch_status") == 1
    kube.running = True
    round_()  # the pods run: the counts change, compared with what the last write left
    assert kube.calls.count("patch_status") == 2 and kube.status["replicaStatuses"]["worker"]["active"] == 2
    assert len(encoded) == 1
    kube.stored = {**kube.stored, "workers": "9/2"}  # someone else's write, a newer version
    kube.version += 1
    r.jobs[("ns", "j")].body = None  # as its watch event would bring it
    round_()
    assert kube.calls.count("patch_status") == 3 and kube.status["workers"] == "2/2"
    assert len(encoded) == 2  # the status read, encoded to compare


def test_the_status_encoding_counts_in_the_rounds_cost_that_sets_its_pod_events_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A large job's round spends as much encoding its status as planning: the window its pod events share grows
    with both (the plan of two ranks costs next to nothing here; the encoding is made to take 0.05 s)."""
    kube = VersionedKube()
    r = Reconciler(kube, emit=lambda *_: None)
    real = status_writes.status_json

    def slow(*args: Any, **kwargs: Any) -> dict[str, Any]:
        time.sleep(0.05)
        return real(*args, **kwargs)

    monkeypatch.setattr(status_writes, "status_json", slow)

    async def main() -> None:
        await r.round("ns", "j", True)
        r.queue.close()

    asyncio.run(main())
    assert kube.calls.count("patch_status") == 1
    assert r.pod_events_window("ns", "j") >= PLAN_SHARE * 0.05


def test_a_jobs_pods_are_searched_for_an_earlier_jobs_leftovers_until_found_free_and_on_fresh_rounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kube = FakeKube(service_exists=True)
    r = Reconciler(kube, emit=lambda *_: None)
    searched: list[str] = []
    real = observed.earlier_job_leftovers

    def counted(uid: str, objects: list[dict[str, Any]]) -> list[str]:
        searched.append(uid)
        return real(uid, objects)

    monkeypatch.setattr(round_reader, "earlier_job_leftovers", counted)

    async def main() -> None:
        for fresh in (True, False, False, True):
            await r.round("ns", "j", fresh)
        kube.uid = "u2"  # the job made again under its name: its pods are searched again
        r.jobs[("ns", "j")].body = None
        await r.round("ns", "j", False)
        r.queue.close()

    asyncio.run(main())
    assert searched == ["u1", "u1", "u2"]


def test_a_round_that_writes_new_counts_neither_groups_nor_parses_ranks_it_left_as_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A starting job's rounds write its counts again and again, its ranks unchanged: such a round groups status.ranks
    only the first time (then reuses that encoding), and the job its write made is parsed with the ranks of the last
    parse (the same dict), while what is written stays what a whole encoding says."""
    kube = VersionedKube()
    r = Reconciler(kube, emit=lambda *_: None)
    grouped: list[int] = []
    rank_groups = status_module.rank_groups

    def counted(ranks: Any) -> Any:
        grouped.append(len(ranks))
        return rank_groups(ranks)

    monkeypatch.setattr(status_module, "rank_groups", counted)

    def round_(fresh: bool = False) -> None:
        async def main() -> None:
            await r.round("ns", "j", fresh)
            r.queue.close()

        asyncio.run(main())

    round_(fresh=True)
    kube.running = True
    round_()
    assert kube.stored["ranks"], kube.stored  # the pods seen: entries that stay while only counts change
    record = r.jobs[("ns", "j")]
    writes, ranks = kube.calls.count("patch_status"), record.parsed[1].status.ranks if record.parsed else None
    by_round = []
    for running in (False, True, False):
        kube.running = running
        grouped.clear()
        round_()
        by_round.append(len(grouped))
        assert kube.calls.count("patch_status") == writes + 1, kube.calls  # the counts changed: written
        writes += 1
        assert record.parsed is not None and record.parsed[1].status.ranks is ranks  # not parsed again
        whole = status_writes.status_json(TrainingJobStatus.model_validate(kube.stored))
        assert {k: v for k, v in kube.stored.items() if k != "progress"} == whole
    assert sum(by_round) <= 1, by_round  # grouped once at most (the first write after the ranks were read)
