"""Rank-level recovery on the dev cluster: SIGKILL one rank's trainer process; the operator replaces that pod
only, the survivors re-join in place (under allreduce they heal the replacement from their live state; around a
parameter-server shard they resume from the newest checkpoint, unless the shards keep backups: then the lost
shard's replacement serves from the copy the next shard kept and no step is lost), and the job finishes with one
restart counted. The victims, the hardest of each kind of job: the worker that hosts the rendezvous store, and a
parameter-server shard, with and without backups. (Every victim recovers in place in the trainer's own tests,
tests/integration/trainer/test_recovery.py and test_healing.py; the chaos run kills random workers and shards
through the operator.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from ringleader_devcluster.processes import kill_pod_processes
from ringleader_trainer.checkpoints import store as ckpt

from tests.support.cluster import logs, wait_for
from tests.support.jobs import condition, create, get, pods_of, training_job, wait_finished

pytestmark = pytest.mark.usefixtures("operator")


def kill_trainer(pod: Any) -> None:
    assert kill_pod_processes(pod.metadata.uid, "ringleader_trainer"), f"no trainer process in pod {pod.metadata.name}"


PS = {"strategy": "parameter-server", "parameterServer": {"mode": "synchronous"}}
PS_BACKUP = {"strategy": "parameter-server", "parameterServer": {"mode": "synchronous", "backup": True}}


@pytest.mark.parametrize(
    ("spec", "victim", "event"),
    [({}, "rec-worker-0", "heal"), (PS, "rec-ps-0", "recover"), (PS_BACKUP, "rec-ps-0", "heal")],
    ids=["allreduce-store-host", "ps-shard", "ps-shard-with-backup"],
)
def test_a_killed_rank_is_replaced_and_the_others_recover_in_place(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, tmp_path: Path,
    spec: dict[str, Any], victim: str, event: str,
) -> None:  # fmt: skip
    directory = tmp_path / "ckpt"
    command = ["python", "-u", "-m", "ringleader_trainer", "--example", "digits-mlp", "--steps", "200",
               "--log-every", "10", "--straggler", "0:0.05", "--timeout", "60"]  # fmt: skip
    body = training_job("rec", "", workers=3, **spec)
    body["spec"]["checkpoint"] = {"directory": str(directory), "intervalSteps": 20}
    for role in ("workers", "parameterServers"):
        if role in body["spec"]:
            body["spec"][role]["restartPolicy"] = "ExitCode"
            body["spec"][role]["template"]["spec"]["containers"][0]["command"] = command
    ps = 2 if spec else 0
    create(custom, namespace, body)

    def diagnosis() -> str:
        tails = {}
        for p in pods_of(core, namespace, "rec"):
            try:
                whole = logs(core, namespace, p.metadata.name, container="trainer")
                (tmp_path / f"{p.metadata.name}.log").write_text(whole)  # the whole log, for a post-mortem
                tails[p.metadata.name] = "\n".join(
                    line for line in whole.splitlines() if not line.startswith("frame #")
                )[-2500:]
            except client.ApiException as e:  # gone meanwhile
                tails[p.metadata.name] = f"(no logs: {e.reason})"
        return f"{get(custom, namespace, 'rec').get('status')}\n" + "\n".join(f"--- {k}\n{v}" for k, v in tails.items())

    try:
        wait_for("checkpoint 20 of every rank",
                 lambda: 20 in ckpt.complete_steps(directory, ckpt.expected_files(3, ps)), timeout=180)  # fmt: skip
    except AssertionError as e:
        raise AssertionError(f"{e}\n{diagnosis()}") from None
    before = {p.metadata.name: p.metadata.uid for p in pods_of(core, namespace, "rec")}
    kill_trainer(next(p for p in pods_of(core, namespace, "rec") if p.metadata.name == victim))
    wait_for(
        f"a new pod for {victim}",
        lambda: any(
            p.metadata.name == victim and p.metadata.uid != before[victim] for p in pods_of(core, namespace, "rec")
        ),
        timeout=60,
    )

    try:
        job = wait_finished(custom, namespace, "rec", "the job to finish", timeout=300)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{diagnosis()}") from None
    assert condition(job, "Succeeded"), f"{condition(job, 'Failed')}\n{diagnosis()}"
    restarts = {role: s.get("restarts", 0) for role, s in job["status"]["replicaStatuses"].items()}
    assert sum(restarts.values()) == 1, restarts  # only the killed rank was restarted
    after = {p.metadata.name: p.metadata.uid for p in pods_of(core, namespace, "rec")}
    # The others kept their pods (finished workers stay; cleanPodPolicy Running may have removed shards).
    assert all(after[n] == uid for n, uid in before.items() if n != victim and n in after)
    survivor = next(n for n in before if n != victim and "worker" in n)
    # allreduce heals from a live peer, a shard from its backup; without one, a shard's loss sends all back
    assert f'"event": "{event}"' in logs(core, namespace, survivor, container="trainer")
    if spec is PS_BACKUP:  # served on from the copy: nothing redone
        goodput = job["status"].get("goodput") or {}
        assert goodput.get("stepsLost", 0) == 0 and "pendingLoss" not in goodput, (goodput, diagnosis())
        assert "shard 0's backup" in logs(core, namespace, survivor, container="trainer")
