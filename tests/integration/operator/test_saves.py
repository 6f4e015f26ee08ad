"""The step a stop saved, in status, for every strategy: one job each of allreduce, local SGD, sharded, pipeline and the
synchronous parameter server has a rank evicted, is resized (the elastic strategies), is suspended and resumed, and
then loses a rank to a SIGKILL. After each stop, status.progress.lastCheckpointStep is the step the stopping ranks
saved (read from their exit records: their pages are gone), no step is counted lost, and the SIGKILL's lost steps are
counted from the suspend's save; where the strategy heals from a live peer (allreduce, local SGD, sharded in 2
replica groups of 2, pipeline of 2 stages x 2 pipelines, a parameter-server worker), none are, and worker 0's step
never goes back (under allreduce, and local SGD, with minReplicas 2, it keeps rising while the killed rank is
replaced: the two survivors train on). An asynchronous and a bounded-staleness parameter-server job are suspended
while worker 1 (unpaced) is far ahead of worker 0 (the issue's own report): every rank stops at the one step shard 0
names and the status says it. The jobs run side by side (four at a time), each on its own thread, so their waits
overlap."""

from __future__ import annotations

import json
import os
import signal
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from ringleader_trainer.checkpoints import store as ckpt

from tests.support.cluster import logs, wait_for
from tests.support.jobs import (
    GROUP,
    PLURAL,
    VERSION,
    create,
    digits_job,
    get,
    pods_of,
    rank_processes,
    rank_status,
    trainer_events,
)

pytestmark = pytest.mark.usefixtures("operator")

LOG_EVERY = 10  # digits_job's
JOBS_AT_ONCE = 4
# Worker 0's seconds a step. At digits_job's 50 ms the ranks of four jobs training (about 13) held the two cores,
# and a replacement's start (about 7 s of CPU importing torch) took over a minute; at 200 ms they use a quarter.
PACE = 0.2
# A replacement's start, to its rendezvous: a resumed job's four pods may be starting beside it, each rank's
# import taking its share of two cores.
REPLACEMENT_START = 180


@dataclass(frozen=True)
class Case:
    name: str
    spec: dict[str, Any]
    ps: int = 0
    workers: int = 2
    elastic: bool = False  # resized 2 -> 3 (allreduce, local SGD and sharded may be)
    suspend_only: bool = False  # suspended once, no eviction and no kill
    heals: bool = False  # a lost rank's replacement is served by a live peer: no step lost (healing.py)
    trains_short: bool = False  # with minReplicas, the survivors train on while a lost rank is replaced


CASES = [
    Case("ar", {"strategy": "allreduce"}, elastic=True, heals=True, trains_short=True),
    Case("lsgd", {"strategy": "local-sgd", "localSGD": {"period": 4}}, elastic=True, heals=True, trains_short=True),
    Case("shard", {"strategy": "sharded"}, elastic=True),
    Case("hsdp", {"strategy": "sharded", "sharded": {"replicas": 2}}, workers=4, heals=True),
    Case("pipe", {"strategy": "pipeline", "pipeline": {"stages": 2}}, workers=4, heals=True),
    Case("ps", {"strategy": "parameter-server", "parameterServer": {"mode": "synchronous"}}, ps=1, heals=True),
    Case("ps-async", {"strategy": "parameter-server", "parameterServer": {"mode": "asynchronous"}}, ps=2,
         suspend_only=True),
    Case("ps-bounded", {"strategy": "parameter-server",
                        "parameterServer": {"mode": "bounded-staleness", "maxStaleness": 500}}, ps=2,
         suspend_only=True),
]  # fmt: skip


class Scenario:
    """One job's run through an eviction, a resize, a suspend and a SIGKILL, checking status after each."""

    def __init__(self, core: client.CoreV1Api, custom: client.CustomObjectsApi, ns: str, case: Case, root: Path):
        self.core, self.custom, self.ns, self.case = core, custom, ns, case
        self.directory = root / case.name
        self.workers = case.workers

    @property
    def name(self) -> str:
        return self.case.name

    def status(self) -> dict[str, Any]:
        return dict(get(self.custom, self.ns, self.name).get("status") or {})

    def progress(self) -> dict[str, Any]:
        return dict(self.status().get("progress") or {})

    def steps_lost(self) -> int:
        return int((self.status().get("goodput") or {}).get("stepsLost", 0))

    def logs_tail(self) -> str:
        """The last lines each worker's trainer logged (no stack frames), for a failure's message."""
        tails = []
        for i in range(self.workers):
            pod = f"{self.name}-worker-{i}"
            try:
                lines = [x for x in logs(self.core, self.ns, pod, container="trainer").splitlines()
                         if not x.startswith("frame #")]  # fmt: skip
            except client.ApiException as e:  # gone meanwhile
                lines = [f"(no logs: {e.reason})"]
            tails.append(f"--- {pod}\n" + "\n".join(lines[-25:]))
        return "\n".join(tails)

    def patch(self, spec: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, self.name, {"spec": spec})

    def newest_save(self, after: int) -> int | None:
        """The newest step every rank of the current world saved, when newer than `after`."""
        world = (self.workers, self.case.ps)
        steps = [s for s, w in ckpt.complete_in_own_world(self.directory, world) if w == world]
        return steps[0] if steps and steps[0] > after else None

    def saved_in_status(self, saved: int, what: str) -> None:
        """status.progress says the step the stop saved, and no step is counted lost for a clean stop."""
        wait_for(f"{self.name}: the {what}'s save (step {saved}) in status",
                 lambda: self.progress().get("lastCheckpointStep") == saved, timeout=30)  # fmt: skip
        assert self.steps_lost() == 0, (self.name, what, self.status().get("goodput"))

    def training_past(self, step: int, what: str) -> int:
        """Wait until status shows worker 0 past `step`, while Running; the step it shows."""

        def past() -> int | None:
            status = self.status()
            shown = int((status.get("progress") or {}).get("step", 0))
            return shown if status.get("phase") == "Running" and shown > step else None

        return wait_for(f"{self.name}: {what}", past, timeout=180)

    def run(self) -> None:
        body = digits_job(self.name, self.workers, 100_000, self.directory, pace=PACE, **self.case.spec)
        body["spec"]["checkpoint"]["intervalSteps"] = 100_000  # the stops' saves are the only checkpoints
        for role in ("workers", "parameterServers"):
            if role in body["spec"]:
                del body["spec"][role]["template"]["spec"]["terminationGracePeriodSeconds"]  # the operator's
        if "parameterServers" in body["spec"]:
            body["spec"]["parameterServers"]["replicas"] = self.case.ps
        if self.case.elastic:
            body["spec"]["workers"] |= {"minReplicas": 2, "maxReplicas": 3}
        create(self.custom, self.ns, body)
        if self.case.suspend_only:
            self.suspend(self.training_past(20, "training past step 20"), resume=False)
            status = self.status()
            assert status["replicaStatuses"]["worker"]["restarts"] == 0, status  # every rank stopped cleanly (202)
            assert (status.get("failures") or {}) == {}, status
            return
        saved = self.evict(self.training_past(20, "training past step 20"))
        if self.case.elastic:
            saved = self.resize(self.training_past(saved + 20, "training past the eviction's save"))
        saved = self.suspend(self.training_past(saved + 20, "training before the suspend"))
        self.kill(saved)

    def evict(self, after: int) -> int:
        pod = f"{self.name}-worker-1"
        eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod, namespace=self.ns))
        self.core.create_namespaced_pod_eviction(pod, self.ns, eviction)
        saved = wait_for(f"{self.name}: the eviction's save", lambda: self.newest_save(after - 1), timeout=60)
        self.saved_in_status(saved, "eviction")
        rank = rank_status(get(self.custom, self.ns, self.name))["worker-1"]
        stopped = (rank["restarts"], rank["stops"], rank["lastReason"], rank["lastExitCode"])
        assert stopped == (0, 1, "RankStopped", 202), (self.name, rank)  # a clean stop: no restart counted
        # Worker 0 was not told to stop: it recovers in place and resumes at that save with worker 1's replacement.
        seen: list[int] = []

        def resumed() -> bool:
            seen[:] = [e["step"] for e in trainer_events(self.core, self.ns, f"{self.name}-worker-0", "resume")]
            return seen == [saved]

        try:
            wait_for(f"{self.name}: worker 0 resumed at the eviction's save", resumed, timeout=REPLACEMENT_START)
        except AssertionError as e:  # a late replacement, or a resume at another step: say which
            replacement = [(p.metadata.name, p.status.phase) for p in pods_of(self.core, self.ns, self.name)]
            raise AssertionError(f"{e}; worker 0 resumed at {seen} (the save: {saved}); pods: {replacement}\n"
                                 f"{self.logs_tail()}") from None  # fmt: skip
        return saved

    def resize(self, after: int) -> int:
        self.patch({"workers": {"replicas": 3}})
        saved = wait_for(f"{self.name}: the resize's save", lambda: self.newest_save(after - 1), timeout=60)
        self.saved_in_status(saved, "resize")
        self.workers = 3
        return saved

    def suspend(self, after: int, resume: bool = True) -> int:
        self.patch({"runPolicy": {"suspend": True}})
        wait_for(f"{self.name}: suspended with no pods",
                 lambda: self.status().get("phase") == "Suspended" and not pods_of(self.core, self.ns, self.name),
                 timeout=90)  # fmt: skip
        saved = self.newest_save(after - 1)
        assert saved is not None, f"{self.name}: the suspend saved no step past {after - 1}"
        self.saved_in_status(saved, "suspend")
        if resume:
            self.patch({"runPolicy": {"suspend": False}})
        return saved

    def kill(self, saved: int) -> None:
        """SIGKILL worker 1 once worker 0 trained past the suspend's save: the steps lost are counted from that
        save, from at least what status showed before the kill to at most worker 0's step when it lost its
        peer (the newest it logged before recovering, plus the steps between two log lines)."""
        seen = self.training_past(saved + 30, "training after the resume")
        before = self.progress().get("resumedAt")
        pids = rank_processes(self.ns, self.name, "worker", 1)
        assert pids, f"{self.name}: no process of worker 1"
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        if self.case.heals:
            self.healed(seen, before)
            return
        lost = wait_for(
            f"{self.name}: steps lost to the SIGKILL", lambda: self.steps_lost() or None, timeout=REPLACEMENT_START
        )
        reached = worker0_step_before_recovery(self.core, self.ns, self.name)
        period = int((self.case.spec.get("localSGD") or {}).get("period", 1))
        assert seen - saved <= lost <= reached + LOG_EVERY + period - saved, (self.name, seen, reached, saved, lost)

    def healed(self, seen: int, before: str | None) -> None:
        """Worker 1's replacement heals from a live peer: once worker 0's page says where it continued from (a
        continuation after `before`) and the operator has counted what the loss cost, it is nothing, and the
        step status shows never went below `seen` meanwhile."""
        shown: list[int] = []

        def counted() -> bool | None:
            status = self.status()
            progress, goodput = status.get("progress") or {}, status.get("goodput") or {}
            shown.append(int(progress.get("step", 0)))
            if progress.get("resumedAt") in (None, before) or goodput.get("pendingLoss") is not None:
                return None
            return status.get("phase") == "Running" or None

        wait_for(f"{self.name}: the heal counted", counted, timeout=REPLACEMENT_START)
        if not (min(shown) >= seen and shown == sorted(shown)):  # the step went back: the workers' logs say why
            back = next(b for a, b in zip([seen, *shown], shown, strict=False) if b < a)
            raise AssertionError(f"{self.name}: the step shown went back from {seen} to {back}\n{self.logs_tail()}")
        assert self.steps_lost() == 0, (self.name, self.status().get("goodput"))
        pod = f"{self.name}-worker-0"
        events = trainer_events(self.core, self.ns, pod, "heal")
        assert events and events[0]["step"] >= seen - LOG_EVERY, (self.name, events)
        if self.case.trains_short:  # minReplicas 2: the two survivors train on until the replacement joins

            def both() -> list[dict[str, Any]] | None:
                heals = trainer_events(self.core, self.ns, pod, "heal")
                return heals if len(heals) > 1 else None

            events = wait_for(f"{self.name}: the replacement taken in", both, timeout=REPLACEMENT_START)
            assert [e["present"] for e in events] == [2, 3] and events[1]["step"] > events[0]["step"], events
        else:
            assert len(events) == 1, (self.name, events)


def worker0_step_before_recovery(core: client.CoreV1Api, ns: str, job: str) -> int:
    """The newest step worker 0's pod (made at the resume) logged before it recovered from losing a peer."""
    lines = [json.loads(x) for x in logs(core, ns, f"{job}-worker-0", container="trainer").splitlines()
             if x.startswith("{")]  # fmt: skip
    resumed = min(i for i, e in enumerate(lines) if e.get("event") == "resume")
    recovered = next((i for i, e in enumerate(lines) if i > resumed and e.get("event") == "recover"), len(lines))
    return max(int(e["step"]) for e in lines[resumed:recovered] if "step" in e and "event" not in e)


@pytest.mark.timeout(1200)  # eight jobs through four stops each, on two cores: about 500 s; pyproject's 600 is too near
def test_every_strategy_says_the_step_each_stop_saved_and_counts_lost_steps_from_it(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, tmp_path: Path
) -> None:
    scenarios = [Scenario(core, custom, namespace, case, tmp_path) for case in CASES]
    # At most JOBS_AT_ONCE side by side: all eight at once (33 ranks importing torch at each stop) held the two
    # cores long enough for this test's waits, and a test running beside it, to time out.
    with ThreadPoolExecutor(JOBS_AT_ONCE) as pool:
        futures = {s.name: pool.submit(s.run) for s in scenarios}
    failed = {name: f"{type(e).__name__}: {e}" for name, f in futures.items() if (e := f.exception()) is not None}
    assert not failed, "\n".join(f"{name}: {why}" for name, why in failed.items())  # whole: the logs are at its end
