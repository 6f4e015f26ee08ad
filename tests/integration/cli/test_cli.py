"""The `ringleader` CLI and SDK against the dev cluster and the operator: submit under each strategy followed with
--watch, logs across a rank's restart, the diagnose command on a failed job (test_diagnose.py has every rule), bad
input that leaves nothing behind, and the kubectl plugin found by kubectl from a pip install of the package."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from ringleader import Client
from ringleader.errors import InvalidSpec
from ringleader_devcluster.layout import Layout

from tests.support.cluster import wait_for
from tests.support.jobs import get

pytestmark = pytest.mark.usefixtures("operator")

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "train_custom.py"
STEPS = 4000  # about 10 s here: long enough for the operator's scrape (every 5 s) to report progress meanwhile
KEPT = "--- worker-1: the last lines of attempt 0 (its pod is gone; kept by the operator) ---"
RESTARTING_SCRIPT = """\
import os, sys, time
attempt, rank = os.environ["RINGLEADER_ATTEMPT"], os.environ["RANK"]
print(f"attempt {attempt} rank {rank} starting", flush=True)
time.sleep(4)
if rank == "1" and attempt == "0":
    print("attempt 0 of rank 1 fails now", flush=True)
    sys.exit(1)
print(f"attempt {attempt} rank {rank} done", flush=True)
"""


def env() -> dict[str, str]:
    """The CLI's process: this checkout's packages, whatever PYTHONPATH the tests were started with."""
    paths = [str(REPO / "cli"), str(REPO / "api"), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def ringleader(kubeconfig: Path, ns: str, *argv: str) -> list[str]:
    return [sys.executable, "-m", "ringleader", "--kubeconfig", str(kubeconfig), "-n", ns, *argv]


def run(kubeconfig: Path, ns: str, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ringleader(kubeconfig, ns, *argv), capture_output=True, text=True, timeout=timeout, env=env(), check=False
    )


def script(tmp_path: Path, text: str, name: str = "job.py") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_submit_runs_the_example_under_each_strategy_to_succeeded_with_watch(kubeconfig: Path, namespace: str) -> None:
    # The CLI's flags for a strategy and for shards; each strategy's run through the operator: test_examples_chart.
    strategies = {"ar": ["--strategy", "allreduce"], "ps": ["--strategy", "parameter-server", "--ps", "1"]}
    runs = {
        name: subprocess.Popen(
            ringleader(
                kubeconfig,
                namespace,
                "submit",
                str(EXAMPLE),
                "--name",
                f"tc-{name}",
                *options,
                "--watch",
                "--",
                "--steps",
                str(STEPS),
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env(),
        )
        for name, options in strategies.items()
    }
    for name, proc in runs.items():
        out, err = proc.communicate(timeout=400)
        lines = out.splitlines()
        assert proc.returncode == 0, (name, out, err)
        assert lines[0] == f"tc-{name}"  # submit prints the job's name first
        assert lines[-1].startswith("[Succeeded]"), lines
        # watch drew the job's progress while it ran: step, total and percent from worker 0
        assert any(re.match(rf"\[Running\] step \d+/{STEPS} \(\d+%\)", line) for line in lines), lines
    c = Client(namespace, str(kubeconfig))
    assert {j.name: j.status.phase for j in c.list()} == {f"tc-{n}": "Succeeded" for n in strategies}


def test_logs_show_both_attempts_of_a_restarted_rank_in_order(kubeconfig: Path, namespace: str, tmp_path: Path) -> None:
    job = script(tmp_path, RESTARTING_SCRIPT)
    assert run(kubeconfig, namespace, "submit", str(job), "--name", "rs").returncode == 0
    follow = subprocess.run(ringleader(kubeconfig, namespace, "logs", "rs", "--follow"), capture_output=True,
                            text=True, timeout=180, env=env(), check=False)  # fmt: skip
    assert follow.returncode == 0, follow.stderr
    lines = [line.strip() for line in follow.stdout.splitlines()]
    w1 = [line for line in lines if line.startswith("worker-1 |") or line.startswith("--- worker-1")]
    # A follower that attached after attempt 0's pod was replaced (a busy machine) shows its kept lines, under a
    # line saying so; one that attached in time streamed them. The lines are the same either way.
    if w1[:1] == [KEPT]:
        w1 = w1[1:]
    assert len(w1) >= 3 and w1[:2] == ["worker-1 | attempt 0 rank 1 starting",
                                       "worker-1 | attempt 0 of rank 1 fails now"], lines  # fmt: skip
    assert w1[2].startswith(
        "--- worker-1: attempt 1 starts (worker 1 (pod rs-worker-1 on node process-node) failed with exit code 1"
    )
    assert w1[3:] == ["worker-1 | attempt 1 rank 1 starting", "worker-1 | attempt 1 rank 1 done"], lines
    assert "worker-0 | attempt 0 rank 0 done" in lines
    # Merged by time: worker 0 started before worker 1's first attempt failed and before its second started.
    assert lines.index("worker-0 | attempt 0 rank 0 starting") < lines.index("worker-1 | attempt 1 rank 1 starting")

    # Afterwards the first attempt's pod is gone; its last lines were kept by the operator (the kubelet's
    # FallbackToLogsOnError message, in a RankOutput event) and come first, then the marker, then attempt 1.
    after = run(kubeconfig, namespace, "logs", "rs", "--rank", "worker-1")
    shown = [line.strip() for line in after.stdout.splitlines()]
    assert shown[:3] == [
        KEPT,
        "worker-1 | attempt 0 rank 1 starting",
        "worker-1 | attempt 0 of rank 1 fails now",
    ], shown
    assert shown[3].startswith(
        "--- worker-1: attempt 1 starts (worker 1 (pod rs-worker-1 on node process-node) failed with exit code 1"
    )
    assert shown[4:] == ["worker-1 | attempt 1 rank 1 starting", "worker-1 | attempt 1 rank 1 done"], shown
    # Following once the job has ended shows the same: the kept lines of the attempt whose pod is gone, the
    # marker, the last attempt's lines; then it returns.
    late = run(kubeconfig, namespace, "logs", "rs", "--rank", "worker-1", "--follow")
    assert [line.strip() for line in late.stdout.splitlines()] == shown, (late.stdout, late.stderr)
    # At most --max-ranks ranks are read, the first ones, and a note says so.
    few = run(kubeconfig, namespace, "logs", "rs", "--max-ranks", "1").stdout.splitlines()
    assert few[0] == "[ringleader] rs has 2 ranks: the first 1 are shown (--rank, --max-ranks)", few
    assert {line.split("|")[0].strip() for line in few[1:]} == {"worker-0"}, few
    # The SDK's iterator gives the same lines.
    sdk = [(line.rank, line.attempt, line.text) for line in Client(namespace, str(kubeconfig)).logs("rs", "worker-1")]
    assert sdk[1:3] == [("worker-1", 0, "attempt 0 rank 1 starting"), ("worker-1", 0, "attempt 0 of rank 1 fails now")]
    assert sdk[4:] == [("worker-1", 1, "attempt 1 rank 1 starting"), ("worker-1", 1, "attempt 1 rank 1 done")]


def test_diagnose_of_a_job_failed_by_its_exit_code(kubeconfig: Path, namespace: str, tmp_path: Path) -> None:
    job = script(tmp_path, "import sys\nprint('bad --lr', flush=True)\nsys.exit(3)\n")
    submitted = run(kubeconfig, namespace, "submit", str(job), "--name", "ex3", "--workers", "2",
                    "--restart-policy", "ExitCode", "--watch")  # fmt: skip
    assert submitted.returncode == 1, submitted.stdout  # watch exits with the job's outcome
    assert "why: ringleader diagnose ex3" in submitted.stdout
    out = run(kubeconfig, namespace, "diagnose", "ex3")
    assert out.returncode == 1
    assert out.stdout.startswith("ex3: Failed (RankFailed)\n"), out.stdout
    assert "exited with code 3 (BAD_CONFIG)" in out.stdout
    assert "next: its last lines say why: ringleader logs ex3 --rank worker-" in out.stdout


def test_bad_input_is_one_line_and_leaves_nothing(
    kubeconfig: Path, namespace: str, tmp_path: Path, core: client.CoreV1Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = script(tmp_path, "print(1)\n")
    unknown = run(kubeconfig, namespace, "describe", "nope")
    assert (unknown.returncode, unknown.stderr) == (3, f"ringleader: error: trainingjob 'nope' not found in "
                                                       f"namespace '{namespace}'\n")  # fmt: skip
    # A name the CRD's own rule refuses (pod names would pass 63 characters): the API server's message, no objects.
    long = "n" * 60
    refused = run(kubeconfig, namespace, "submit", str(job), "--name", long, "--workers", "12")
    assert refused.returncode == 2
    assert refused.stderr.startswith(f"ringleader: error: trainingjob '{long}' is invalid: ")
    assert "metadata.name is too long" in refused.stderr and refused.stderr.count("\n") == 1
    assert core.list_namespaced_config_map(namespace, label_selector="ringleader.dev/job-name").items == []
    # A job refused after its ConfigMap was made (here: the create fails on the way): both are removed.
    c = Client(namespace, str(kubeconfig))
    real = c.custom.create_namespaced_custom_object

    def refuse(*args: Any, **kw: Any) -> Any:
        if kw.get("dry_run"):
            return real(*args, **kw)
        raise ApiException(status=422, reason="Unprocessable Entity")

    monkeypatch.setattr(c.custom, "create_namespaced_custom_object", refuse)
    with pytest.raises(InvalidSpec):
        c.submit(job, name="halfway")
    assert core.list_namespaced_config_map(namespace, label_selector="ringleader.dev/job-name").items == []
    monkeypatch.undo()
    # The job made, the ConfigMap's owner reference refused: the job this call made goes too.
    monkeypatch.setattr(c.core, "patch_namespaced_config_map", lambda *a, **kw: refuse())
    with pytest.raises(InvalidSpec):
        c.submit(job, name="ownerless")
    assert core.list_namespaced_config_map(namespace, label_selector="ringleader.dev/job-name").items == []
    wait_for("the half-made job gone", lambda: not c.list(), timeout=30)
    monkeypatch.undo()
    # The SDK: submit, wait, the ConfigMap owned by the job (deleted with it).
    name = c.submit(job, workers=1)
    assert c.wait(name, timeout=120) == "Succeeded"
    owner = core.read_namespaced_config_map(f"{name}-script", namespace).metadata.owner_references[0]
    assert (owner.kind, owner.name) == ("TrainingJob", name)


def test_kubectl_finds_the_plugin_installed_with_pip(
    kubeconfig: Path, namespace: str, tmp_path: Path, layout: Layout, custom: client.CustomObjectsApi
) -> None:
    """pip installs the package and the API package into a fresh virtual environment, finding their dependencies
    (with the pinned versions) in the dev venv, offline; its `kubectl-ringleader` is then a kubectl plugin."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = subprocess.run([str(venv / "bin" / "python"), "-c", purelib], capture_output=True, text=True, check=True,
                          timeout=30).stdout.strip()  # fmt: skip
    (Path(site) / "dev-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    sources = [
        str(shutil.copytree(REPO / d, tmp_path / "src" / d, ignore=shutil.ignore_patterns("__pycache__")))
        for d in ("api", "cli")
    ]  # built from copies: setuptools writes build/ beside the sources
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
         "--no-build-isolation", "--no-index", *sources],
        timeout=300, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    path = f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"
    plugin_env = {"PATH": path, "KUBECONFIG": str(kubeconfig), "HOME": str(tmp_path)}
    kubectl_bin = str(layout.binary("kubectl"))
    listed = subprocess.run([kubectl_bin, "plugin", "list"], env=plugin_env, capture_output=True, text=True,
                            timeout=30, check=False)  # fmt: skip
    assert str(venv / "bin" / "kubectl-ringleader") in listed.stdout, (listed.stdout, listed.stderr)
    job = script(tmp_path, "print('from the plugin')\n")
    started = time.monotonic()
    made = subprocess.run([kubectl_bin, "ringleader", "-n", namespace, "submit", str(job), "--name", "plug",
                           "--workers", "1", "--watch"], env=plugin_env, capture_output=True, text=True,
                          timeout=180, check=False)  # fmt: skip
    assert made.returncode == 0, (made.stdout, made.stderr, time.monotonic() - started)
    assert get(custom, namespace, "plug")["status"]["phase"] == "Succeeded"
