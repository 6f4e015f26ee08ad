"""Fixtures of the operator's integration tests: a watch of every pod state in the test's namespace."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import urllib3
from kubernetes import client, watch
from kubernetes.client import ApiException


@dataclass
class PodLog:
    """Every state each pod of a namespace went through, from a watch: when it was released to the scheduler
    (no gate), bound to a node and ended, and whether the scheduler ever called it unschedulable."""

    released: dict[str, float] = field(default_factory=dict)
    bound: dict[str, float] = field(default_factory=dict)
    ended: dict[str, float] = field(default_factory=dict)
    unschedulable: list[str] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)  # every pod an event came for: an empty log proves nothing
    failure: BaseException | None = None  # what ended the watch thread, other than a broken watch

    def see(self, pod: Any, now: float) -> None:
        name = pod.metadata.name
        self.seen.add(name)
        if not pod.spec.scheduling_gates:
            self.released.setdefault(name, now)
        if pod.spec.node_name:
            self.bound.setdefault(name, now)
        if pod.status.phase in ("Succeeded", "Failed"):
            self.ended.setdefault(name, now)
        for c in pod.status.conditions or []:
            if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
                self.unschedulable.append(f"{name}: {c.message}")

    def partial(self, job: str, slack: float = 2.0) -> bool:
        """Whether a pod of `job` was bound while a peer was still held back (beyond the moment it takes the
        operator to lift the gates of a whole gang, one request per pod)."""
        mine = [p for p in self.released if p.startswith(f"{job}-")]
        bound = [self.bound[p] for p in mine if p in self.bound]
        return bool(bound) and max(self.released[p] for p in mine) > min(bound) + slack


@pytest.fixture
def pod_log(core: client.CoreV1Api, namespace: str) -> Iterator[PodLog]:
    log = PodLog()
    w = watch.Watch()
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            try:
                for event in w.stream(core.list_namespaced_pod, namespace, timeout_seconds=5):
                    log.see(event["object"], time.monotonic())
                    if stop.is_set():
                        break
            except (ApiException, urllib3.exceptions.HTTPError, OSError):  # a watch that broke is opened again
                time.sleep(0.2)
            except BaseException as e:  # anything else is the test's own error: the test fails with it
                log.failure = e
                return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield log
    stop.set()
    w.stop()
    thread.join(timeout=10)
    assert log.failure is None, f"the pod watch failed: {log.failure!r}"
