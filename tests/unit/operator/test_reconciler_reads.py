"""What a reconcile round reads from the API server: the job's Service only until it is known to exist (read
or created), again on a fresh round or when the job is a new one under the same name; fresh rounds are due
every FRESH_SECONDS; a round that creates a gang weighs it against the cluster first (created released when it
fits, gated and weighed again later when not). Against a
recording fake of Kube (a narrow unit test of the reconciler's bookkeeping)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from ringleader_operator import admission
from ringleader_operator import reconciler as reconciler_module
from ringleader_operator.admission import Cluster
from ringleader_operator.api import Role
from ringleader_operator.reconciler import Reconciler

from tests.unit.operator.builders import TEMPLATE, gpu_node, pod


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

    async def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        self.calls.append("get_job")
        return {
            "metadata": {"name": name, "namespace": namespace, "uid": self.uid, "generation": 1},
            "spec": {"workers": {"replicas": 2, "template": TEMPLATE}},
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

    async def create_if_absent(self, body: dict[str, Any]) -> None:
        kind = {"Secret": "secret", "NetworkPolicy": "network_policy", "Service": "service"}[body["kind"]]
        self.calls.append(f"create_{kind}")
        if kind == "network_policy":
            self.policy = body
        if kind == "service":
            self.service_exists = True

    async def patch_status(
        self, namespace: str, name: str, status: dict[str, Any], resource_version: str | None = None
    ) -> None:
        self.calls.append("patch_status")
        self.status = status

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

    async def ungate_pods(self, namespace: str, names: list[str]) -> None:
        self.calls.append("ungate_pods")

    async def create_pod_group(self, body: dict[str, Any]) -> None:
        self.calls.append("create_pod_group")

    async def delete_job(self, namespace: str, name: str, uid: str) -> None:
        self.calls.append("delete_job")

    async def nodes(self) -> list[dict[str, Any]]:
        return self.node_list

    async def cluster(self) -> Cluster:
        return Cluster(self.node_list, [])

    async def close(self) -> None:
        self.calls.append("close")


def _rounds(kube: FakeKube, steps: list[tuple[bool, str]], **options: Any) -> list[list[str]]:
    """Run one round per step (fresh, job uid); the Service reads and creates of each round (and the Secret's
    and NetworkPolicy's creates, which go with the Service's)."""
    r = Reconciler(kube, emit=lambda *_: None, **options)
    out = []

    async def main() -> None:
        for fresh, uid in steps:
            kube.uid = uid
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


def test_a_fresh_round_is_due_first_and_then_after_fresh_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube(service_exists=True)
    r = Reconciler(kube, emit=lambda *_: None)
    assert r.fresh_due("ns", "j")
    asyncio.run(r.round("ns", "j", True))
    assert not r.fresh_due("ns", "j")
    assert r.fresh_due("ns", "other")
    monkeypatch.setattr(reconciler_module, "FRESH_SECONDS", 0.0)
    assert r.fresh_due("ns", "j")


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
    assert all(kube.status["ranks"][f"worker-{i}"]["podSeen"] for i in range(2))


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
        assert not r.admission_lock.locked() and "a" not in kube.created_by_job
        second = asyncio.create_task(r.round("ns", "b", False))
        await asyncio.sleep(0.05)
        kube.landed.set()
        await asyncio.gather(first, second)
        r.queue.close()

    asyncio.run(main())
    assert [admission.gated(p) for p in kube.created_by_job["a"]] == [False, False]
    assert [admission.gated(p) for p in kube.created_by_job["b"]] == [True, True]
