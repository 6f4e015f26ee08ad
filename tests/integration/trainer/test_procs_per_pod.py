"""Several ranks per pod (spec.workers.procsPerPod) as plain processes: each "pod" is one supervisor process
(`python -m ringleader_trainer` with the operator's environment for that pod), which starts a training process
per rank. The ranks train as the same number of one-rank pods do; a process lost takes its pod with it, and the
other pod's ranks heal in place."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import torch
from ringleader_trainer.checkpoints import store as ckpt

from tests.support.launch import LocalJob, children, job_spec, launch

ARGS = ["--example", "digits-mlp", "--steps", "60", "--log-every", "10", "--timeout", "120"]


def start(tmp_path: Path, name: str, pods: int, procs: int, **spec: Any) -> tuple[LocalJob, Path]:
    final = tmp_path / name / "final.pt"
    job = job_spec("multi", "allreduce", pods, **spec)
    job.spec.workers.procs_per_pod = procs
    return launch(job, [*ARGS, "--save-final", str(final)], tmp_path / name / "logs"), final


def test_two_pods_of_two_ranks_train_as_four_pods_of_one(tmp_path: Path) -> None:
    four, four_final = start(tmp_path, "four", 4, 1)
    assert four.wait(300) == [0] * 4, four.logs()
    multi, multi_final = start(tmp_path, "two-by-two", 2, 2)
    assert multi.wait(300) == [0, 0], multi.logs()
    done = [e for pod in multi.workers for e in pod.events("done")]
    assert sorted(e["index"] for e in done) == [0, 1, 2, 3]  # each pod ran two ranks
    assert {e["step"] for e in done} == {60}
    a, b = torch.load(four_final, weights_only=True), torch.load(multi_final, weights_only=True)
    for name in a:  # the same world of four ranks, the same data shards
        torch.testing.assert_close(b[name], a[name], rtol=1e-5, atol=1e-6, msg=f"{name} differs")


def test_a_lost_process_takes_its_pod_and_the_other_pods_ranks_heal_in_place(tmp_path: Path) -> None:
    checkpoint = {"checkpoint": {"directory": str(tmp_path / "ckpt"), "intervalSteps": 20}}
    job, final = start(tmp_path, "chaos", 2, 2, **checkpoint)
    deadline = time.monotonic() + 300
    while 20 not in ckpt.complete_steps(tmp_path / "ckpt", ckpt.expected_files(4, 0)):
        assert time.monotonic() < deadline and all(r.proc.poll() is None for r in job.ranks), job.logs()
        time.sleep(0.02)
    pod0, pod1 = job.workers
    survivors = set(children(pod0.proc.pid))
    assert len(survivors) == 2 and len(children(pod1.proc.pid)) == 2
    victim = children(pod1.proc.pid)[1]
    os.kill(victim, signal.SIGKILL)
    assert pod1.proc.wait(60) == -signal.SIGKILL  # its sibling killed too: the pod ends as the process did
    pod1.restart()  # the operator's part: a new pod for the same two ranks
    assert job.wait(300) == [0, 0], job.logs()
    heals = pod0.events("heal")
    assert len(heals) == 2 and not pod0.events("recover"), job.logs()  # each of pod 0's ranks healed once, in place
    healed = pod1.events("healed")  # the new pod's two ranks took pod 0's state: no checkpoint read
    # Served by pod 0's ranks (one of them, when the other's exchange had failed where its peer's completed and
    # it was served too).
    assert len(healed) == 2 and {e["source"] for e in healed} <= {0, 1} and not pod1.events("resume"), job.logs()
    assert {e["step"] for e in healed} == {e["step"] for e in heals} and min(e["step"] for e in heals) >= 20
    assert final.exists()
