"""`ringleader diagnose` on real jobs of the dev cluster: one job per way a job goes wrong, all started at once, each
diagnosed when it got there. With RINGLEADER_RECORD_STATES=DIR each state read is kept: tests/unit/cli/states/
are recorded so, and the unit tests run every rule on them."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from ringleader import Client, submission
from ringleader.submission import Submission
from ringleader_api import RestartPolicy

from tests.support.cluster import wait_for
from tests.support.diagnosis import diagnose_job

pytestmark = pytest.mark.usefixtures("operator")

TRAINER = """\
import os, sys
os.execvp(sys.executable, [sys.executable, "-u", "-m", "ringleader_trainer", *sys.argv[1:]])
"""
SLEEP = "import time\nprint('working', flush=True)\ntime.sleep(60)\n"
# Worker 0 never opens the rendezvous; worker 1 (the trainer) gives up after 3 s: exit 200.
NO_MASTER = """\
import os, sys, time
if os.environ["RANK"] == "0":
    time.sleep(60)
os.execvp(sys.executable, [sys.executable, "-u", "-m", "ringleader_trainer", "--example", "digits-mlp",
                           "--rendezvous-timeout", "3"])
"""


@dataclass
class Case:
    sub: Submission
    ready: Callable[[dict[str, Any]], bool]  # the job (as read) is where it is to be diagnosed
    rules: set[str]  # the rules that must be found (others may be too)
    phrase: str  # a phrase the diagnosis must say
    run_policy: dict[str, Any] | None = None
    act: Callable[[Client, client.CoreV1Api, str], None] | None = None  # something done to it while it runs


def condition(kind: str, status: str = "True", reason: str | None = None) -> Callable[[dict[str, Any]], bool]:
    def holds(job: dict[str, Any]) -> bool:
        for c in (job.get("status") or {}).get("conditions") or []:
            if c["type"] == kind and c["status"] == status and (reason is None or c.get("reason") == reason):
                return True
        return False

    return holds


def phase(name: str) -> Callable[[dict[str, Any]], bool]:
    return lambda job: (job.get("status") or {}).get("phase") == name


def evict_worker_1(c: Client, core: client.CoreV1Api, name: str) -> None:
    pod = f"{name}-worker-1"

    def running() -> bool:
        found = c.read_pod(pod)  # None until the operator made it
        return found is not None and found["status"].get("phase") == "Running"

    wait_for(f"{pod} running", running, timeout=60)
    core.create_namespaced_pod_eviction(pod, c.namespace, {"metadata": {"name": pod, "namespace": c.namespace}})


def suspend(c: Client, core: client.CoreV1Api, name: str) -> None:
    wait_for(f"{name} running", lambda: phase("Running")(c.get_raw(name)), timeout=60)
    c.suspend(name)


def evicted_once(job: dict[str, Any]) -> bool:
    return any(r.get("lastReason") == "RankEvicted" for r in ((job.get("status") or {}).get("ranks") or {}).values())


CASES: dict[str, Case] = {
    "exit-code-3": Case(
        Submission("job.py", "import sys\nsys.exit(3)\n", restart_policy=RestartPolicy.EXIT_CODE),
        phase("Failed"),
        {"exit-3"},
        "exited with code 3 (BAD_CONFIG)",
    ),
    "invalid-spec": Case(
        Submission("job.py", SLEEP, env={"RANK": "5"}),
        phase("Failed"),
        {"invalid-spec"},
        "RANK",
    ),
    "unschedulable": Case(
        Submission("job.py", SLEEP, cpu="5000"),
        condition("Admitted", "False", "Unschedulable"),
        {"unschedulable"},
        "does not fit the cluster even when it is empty",
    ),
    "rendezvous-timeout": Case(
        Submission("job.py", NO_MASTER, restart_policy=RestartPolicy.NEVER),
        phase("Failed"),
        {"exit-200"},
        "RENDEZVOUS_TIMEOUT",
    ),
    "stalled": Case(
        Submission(
            "job.py",
            TRAINER,
            args=("--example", "digits-mlp", "--steps", "100000", "--hang-at-step", "30:1", "--log-every", "10"),
        ),
        phase("Failed"),
        {"stalled"},
        "worker 1",
        # The deadline counts from Running, start-up included: it must cover torch's import on a busy machine,
        # or the stall is found before any rank serves its page and no rank can be named.
        {"progressDeadlineSeconds": 30, "onStall": "Fail"},
    ),
    "straggler": Case(
        Submission("job.py", TRAINER, args=("--example", "digits-mlp", "--steps", "100000", "--straggler", "1:0.2")),
        condition("Straggler"),
        {"straggler"},
        "worker 1",
        {"stragglerThreshold": 3, "stragglerWindowSeconds": 4},
    ),
    "deadline": Case(
        Submission("job.py", SLEEP),
        phase("Failed"),
        {"deadline"},
        "activeDeadlineSeconds",
        {"activeDeadlineSeconds": 3},
    ),
    "backoff-limit": Case(
        Submission("job.py", "import sys\nprint('no luck', flush=True)\nsys.exit(1)\n", workers=1),
        phase("Failed"),
        {"backoff-limit", "exit-1"},
        "used up its restarts",
        {"backoffLimit": 1},
    ),
    "evicted": Case(
        Submission("job.py", SLEEP),
        evicted_once,
        {"evicted"},
        "1 pod of the job evicted",
        act=evict_worker_1,
    ),
    "suspended": Case(Submission("job.py", SLEEP), phase("Suspended"), {"suspended"}, "ringleader resume", act=suspend),
    "progress-unavailable": Case(
        Submission("job.py", SLEEP, workers=1),
        condition("Stalled", status="Unknown"),
        {"progress-unavailable"},
        "progressDeadlineSeconds is not acted on",
        {"progressDeadlineSeconds": 5},
    ),
    "succeeded": Case(
        Submission("job.py", "print('done')\n", workers=1), phase("Succeeded"), {"succeeded"}, "the job succeeded"
    ),
}


def test_diagnose_says_what_went_wrong_with_each_job(kubeconfig: Path, namespace: str, core: client.CoreV1Api) -> None:
    c = Client(namespace, str(kubeconfig))
    for name, case in CASES.items():
        sub = Submission(**{**case.sub.__dict__, "namespace": namespace})
        configmap, job = submission.build(sub, name)
        if case.run_policy:
            job["spec"]["runPolicy"] = {**job["spec"].get("runPolicy", {}), **case.run_policy}
        c.create_submission(configmap, job)
    for name, case in CASES.items():
        if case.act is not None:
            case.act(c, core, name)
    pending = dict(CASES)
    deadline = time.monotonic() + 180
    while pending and time.monotonic() < deadline:
        for name, case in list(pending.items()):
            if not case.ready(c.get_raw(name)):
                continue
            found = diagnose_job(kubeconfig, namespace, name, record_as=name)
            text = found.text()
            assert case.rules <= {f.rule for f in found.findings}, (name, text)
            assert case.phrase in text, (name, text)
            c.delete(name)  # the rest of the cluster is for the others
            del pending[name]
        time.sleep(1)
    assert not pending, {n: c.get_raw(n).get("status", {}).get("conditions") for n in pending}
