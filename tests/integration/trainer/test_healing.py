"""Healing as plain processes: a rank is SIGKILLed mid-run and started again (what the operator does for its pod);
the survivors keep their state, re-form the group with the replacement and send it the state it continues from,
and the run ends with exactly the parameters of an uninterrupted one. No rank reads a checkpoint, though one
exists from before the kill.

- allreduce: every worker holds the whole state; the replacement continues from the interrupted step.
- local SGD: the replacement gets its own state as of the last sync from its successor and does its local steps
  since then again, while the survivors go on to the next sync."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from ringleader_trainer import checkpoint as ckpt

from tests.support.launch import LocalJob, job_spec, launch

AUDITED = Path(__file__).parents[2] / "support" / "audited_trainer.py"
# Worker 0 sleeps 40 ms a step so the kill lands mid-run; it changes no numbers.
ARGS = ["--example", "digits-mlp", "--steps", "80", "--log-every", "1", "--straggler", "0:0.04", "--timeout", "120"]
SAVED, KILLED_AFTER = 20, 30  # a checkpoint at step 20, the kill once the victim has logged step 30
PERIOD = 8  # local SGD's default: its replacement starts from the last sync, up to this many steps back


def start(tmp_path: Path, name: str, strategy: str) -> tuple[LocalJob, Path, Path]:
    directory, final = tmp_path / name / "ckpt", tmp_path / name / "final.pt"
    job = job_spec("h", strategy, 3, checkpoint={"directory": str(directory), "intervalSteps": SAVED})
    return launch(job, [*ARGS, "--save-final", str(final)], tmp_path / name / "logs", script=AUDITED), directory, final


@pytest.mark.parametrize("strategy", ["allreduce", "local-sgd"])
@pytest.mark.parametrize("victim", [1, 0], ids=["worker-1", "worker-0-hosting-the-store"])
def test_a_killed_rank_heals_from_a_live_peer_and_the_run_ends_bit_identical(
    tmp_path: Path, strategy: str, victim: int
) -> None:
    whole, _, whole_final = start(tmp_path, "whole", strategy)
    assert whole.wait(600) == [0, 0, 0], whole.logs()

    job, directory, final = start(tmp_path, "healed", strategy)
    target = job.workers[victim]
    deadline = time.monotonic() + 300
    while SAVED not in ckpt.complete_steps(directory, ckpt.expected_files(3, 0)) or target.last_step() < KILLED_AFTER:
        assert time.monotonic() < deadline and all(r.proc.poll() is None for r in job.ranks), job.logs()
        time.sleep(0.01)
    pids = {r.proc.pid for r in job.ranks if r is not target}
    target.proc.kill()
    target.proc.wait()
    killed_at = max(r.last_step() for r in job.ranks)
    target.restart()  # the operator's part: a new pod for the same rank
    assert job.wait(600) == [0, 0, 0], job.logs()

    survivors = [r for r in job.ranks if r is not target]
    assert {r.proc.pid for r in survivors} == pids  # nobody else exited
    back = PERIOD if strategy == "local-sgd" else 0  # how far before the kill the replacement may start
    for r in survivors:
        heals = r.events("heal")
        assert len(heals) == 1 and heals[0]["step"] >= KILLED_AFTER - back, job.logs()
        assert not r.events("recover") and not r.events("resume"), job.logs()
    healed = target.events("healed")
    assert len(healed) == 1 and KILLED_AFTER - back <= healed[0]["step"] <= killed_at, job.logs()
    assert not target.events("resume"), job.logs()
    reads = [line for r in job.ranks for line in r.stderr.splitlines() if line.startswith("audit: read")]
    assert not reads, reads  # no rank opened a checkpoint file to read it
    a, b = torch.load(whole_final, weights_only=True), torch.load(final, weights_only=True)
    for name in a:
        assert torch.equal(a[name], b[name]), f"{name} differs after healing"
