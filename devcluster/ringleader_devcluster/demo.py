"""`make demo`: the operator installed with helm into the dev cluster, one example job followed to the end.

    python -m ringleader_devcluster.demo [--example examples/digits-allreduce.yaml] [--timeout 900]

Expects the dev cluster to run (`make demo` starts it first). With the real node (the default), it builds the
operator and trainer images from their Dockerfiles (buildah; again only when their inputs changed) and pushes
them to the dev cluster's registry, installs the chart in helm/ringleader from the operator image as the release
`ringleader` in namespace `ringleader-system`, and runs the example's ranks in the trainer image, both on the
real node, in namespaces enforcing Pod Security "restricted" (the example's pod template is given the real
node's selector and toleration, the image and the restricted security settings: realpods.on_real_node).
Without the real node (RINGLEADER_REAL_NODE=0) both run on the process node from this checkout's code. It
applies the example in namespace `ringleader-demo` (deleting an earlier run of the same job first), prints the
job's phase, step, each rank's loss and a progress bar until it ends, then the final accuracy and what to look
at next. Exits 1 if the job fails or does not finish within --timeout seconds.
"""

from __future__ import annotations

import argparse
import copy
import functools
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

from . import cluster, commands, images, operatorprocess, realnode
from .cluster import ClusterError
from .layout import REPO_ROOT, Layout
from .realpods import on_real_node, with_empty_dir
from .tools import RealNodeError

RELEASE, RELEASE_NAMESPACE = operatorprocess.CHART_RELEASE, operatorprocess.CHART_NAMESPACE
DEMO_NAMESPACE = "ringleader-demo"
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}
CHART = REPO_ROOT / "helm" / "ringleader"
GROUP, VERSION, PLURAL = "ringleader.dev", "v1alpha1", "trainingjobs"
PROCESS_NODE_VALUES = ["--set", "image.tag=dev"]  # the process node records the image; it runs the checkout's code


def real_node_values() -> list[str]:
    """The chart's operator from the operator image, on the real node."""
    repository, tag = images.OPERATOR.name.rsplit(":", 1)
    return [
        "--set", f"image.repository={repository}", "--set", f"image.tag={tag}", "--set", "image.pullPolicy=Always",
        "--set-string", f"nodeSelector.{realnode.LABEL.replace('.', chr(92) + '.')}=true",
        "--set", f"tolerations[0].key={realnode.TAINT}", "--set", "tolerations[0].operator=Exists",
        "--set", "tolerations[0].effect=NoSchedule",
    ]  # fmt: skip


def code_hash() -> str:
    """A digest of the operator's source in this checkout: as a pod annotation it rolls the Deployment when
    the code changed (the image tag, which would do that on a real cluster, never changes here)."""
    digest = hashlib.sha256()
    for package in ("api/ringleader_api", "operator/ringleader_operator"):
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            digest.update(str(path.relative_to(REPO_ROOT)).encode() + path.read_bytes())
    return digest.hexdigest()[:12]


BAR = 30


say = functools.partial(commands.say, prefix="demo")


def ensure_namespace(layout: Layout, name: str, labels: dict[str, str]) -> None:
    if commands.kubectl(layout, "get", "namespace", name, check=False).returncode != 0:
        commands.kubectl(layout, "create", "namespace", name)
    commands.kubectl(layout, "label", "--overwrite", "namespace", name, *(f"{k}={v}" for k, v in labels.items()))


def install_operator(layout: Layout, real: bool) -> None:
    """helm upgrade --install the chart and wait until the operator's pod is ready."""
    if operatorprocess.operator_pid():
        say("stopping the operator started by 'make operator-up' (the chart's takes over)")
        operatorprocess.operator_down()
    t0 = time.monotonic()
    where = "from the operator image on the real node" if real else "on the process node"
    say(f"installing the operator with helm {where} (release {RELEASE}, namespace {RELEASE_NAMESPACE})")
    ensure_namespace(layout, RELEASE_NAMESPACE, RESTRICTED if real else {})
    commands.helm(
        layout, "upgrade", "--install", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE,
        "--wait", "--timeout", "180s", *(real_node_values() if real else PROCESS_NODE_VALUES),
        "--set-string", f"podAnnotations.ringleader\\.dev/code={code_hash()}", timeout=200,
    )  # fmt: skip
    say("operator ready", t0)


def rank_progress(core: client.CoreV1Api, namespace: str, job: str) -> dict[str, tuple[int, float]]:
    """Each running rank's latest logged (step, loss) (from its JSON log lines), by pod name."""
    out = {}
    for pod in core.list_namespaced_pod(namespace, label_selector=f"ringleader.dev/job-name={job}").items:
        try:
            text = core.read_namespaced_pod_log(pod.metadata.name, namespace, tail_lines=20, _request_timeout=5)
        except client.ApiException:
            continue
        for line in reversed((text or "").splitlines()):
            if line.startswith("{") and '"loss"' in line:
                try:
                    entry = json.loads(line)
                    out[pod.metadata.name] = (int(entry.get("step", 0)), float(entry["loss"]))
                except (ValueError, KeyError, TypeError):
                    continue
                break
    return out


def bar(done: int, total: int) -> str:
    filled = BAR * min(done, total) // total if total else 0
    return "[" + "#" * filled + "." * (BAR - filled) + f"] {done}/{total}"


def condition(job: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (job.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def follow(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, ns: str, name: str, total: int, timeout: float
) -> bool:
    """Print a status line every second until the job ends; True if it succeeded."""
    deadline = time.monotonic() + timeout
    tty = sys.stdout.isatty()
    last = ""
    while time.monotonic() < deadline:
        job = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
        status = job.get("status") or {}
        ended = next((k for k in ("Succeeded", "Failed") if (condition(job, k) or {}).get("status") == "True"), None)
        # The status's progress is sampled every 5 s, and a short job trains between two samples: the ranks'
        # own log lines (every 20 steps) move the bar between them. A job that succeeded did every step.
        ranks = rank_progress(core, ns, name)
        sampled = int((status.get("progress") or {}).get("step") or 0)
        step = total if ended == "Succeeded" else max([sampled, *(logged for logged, _ in ranks.values())])
        losses = " ".join(f"{pod.rsplit('-', 2)[-2]}-{pod.rsplit('-', 1)[-1]}={loss:.3f}"
                          for pod, (_, loss) in sorted(ranks.items()))  # fmt: skip
        line = f"[demo] {status.get('phase', 'Pending'):<10} step {bar(step, total)}  loss {losses or '-'}"
        if line != last:
            print(("\r\033[K" if tty else "") + line, end="" if tty else "\n", flush=True)
            last = line
        if ended:
            if tty:
                print()
            if ended == "Failed":
                c = condition(job, "Failed") or {}
                print(f"[demo] the job failed: {c.get('reason')}: {c.get('message')}", flush=True)
            return ended == "Succeeded"
        time.sleep(1)
    print(f"\n[demo] the job did not finish within {timeout:.0f} s", flush=True)
    return False


def final_accuracy(core: client.CoreV1Api, ns: str, name: str) -> float | None:
    text = core.read_namespaced_pod_log(f"{name}-worker-0", ns, container="trainer", _request_timeout=10)
    done = [json.loads(x) for x in (text or "").splitlines() if x.startswith("{") and '"event": "done"' in x]
    return float(done[-1]["test_accuracy"]) if done and "test_accuracy" in done[-1] else None


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="ringleader-demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--example", type=Path, default=REPO_ROOT / "examples" / "digits-allreduce.yaml")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds the job may take")
    args = p.parse_args(argv)
    layout = Layout.from_env()
    t0 = time.monotonic()
    ns = DEMO_NAMESPACE
    try:
        if not commands.api_ready(layout):
            raise ClusterError("the dev cluster is not running: run 'make dev-cluster' (make demo does)")
        real = cluster.real_node_wanted()
        body = yaml.safe_load(args.example.read_text())
        name = body["metadata"]["name"]
        total = _steps(body)
        if real:
            for image in (images.OPERATOR, images.TRAINER):
                images.publish(layout, image)
            body = for_real_node(body)
        pushed = time.monotonic()
        install_operator(layout, real)
        installed = time.monotonic()
        config.load_kube_config(str(layout.kubeconfig))
        core, custom = client.CoreV1Api(), client.CustomObjectsApi()
        ensure_namespace(layout, ns, RESTRICTED if real else {})
        if commands.kubectl(layout, "get", "tj", name, "-n", ns, check=False).returncode == 0:
            say(f"deleting the previous run of {name}")
            commands.kubectl(layout, "delete", "tj", name, "-n", ns, "--wait=true", timeout=120)
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
        where = "its ranks in the trainer image on the real node" if real else "its ranks on the process node"
        say(f"applied {args.example.relative_to(REPO_ROOT)} in namespace {ns}: TrainingJob {name}, {where}")
        applied = time.monotonic()
        ok = follow(core, custom, ns, name, total, args.timeout)
    except (ClusterError, RealNodeError, OSError, KeyError, yaml.YAMLError, client.ApiException) as e:
        sys.exit(f"demo: {e}")
    except KeyboardInterrupt:
        sys.exit("demo: interrupted (the job keeps running; 'make dev-cluster-down' stops everything)")
    if not ok:
        print(f"[demo] look at: kubectl -n {ns} describe tj {name}; kubectl -n {ns} logs {name}-worker-0", flush=True)
        sys.exit(1)
    accuracy = final_accuracy(core, ns, name)
    shown = f"{accuracy:.4f}" if accuracy is not None else "unknown"
    say(f"TrainingJob {name} Succeeded: test accuracy {shown}", t0)
    # Where this step's time went (the Go builds and the images built beside them printed their own times).
    spent = {"images pushed": pushed - t0, "operator installed": installed - pushed,
             "job from apply to Succeeded": time.monotonic() - applied}  # fmt: skip
    say("time: " + ", ".join(f"{what} {seconds:.1f}s" for what, seconds in spent.items()))
    _next_steps(layout, ns, name)


def _next_steps(layout: Layout, ns: str, name: str) -> None:
    """What to try next, with the commands pointed at the dev cluster and the demo's job."""
    print(
        f"""
Look around with the ringleader CLI (docs/cli.md; anywhere else: pip install ./api ./cli) and kubectl, both
pointed at the dev cluster:
  export KUBECONFIG={layout.kubeconfig}
  alias ringleader="PYTHONPATH={REPO_ROOT / "cli"}:{REPO_ROOT / "api"} {sys.executable} -m ringleader"
  alias kubectl={layout.binary("kubectl")}
  kubectl config set-context --current --namespace {ns}
  ringleader describe {name}         # one screen: phase, progress, goodput, each rank, recent events
  ringleader logs {name}             # every rank's lines merged by time (-f to follow, --rank worker-1)
  ringleader diagnose {name}         # why a job failed or waits, and what to do
  ringleader submit examples/train_custom.py --workers 3 --watch -- --steps 2000   # your own script
  ringleader watch NAME                   # a job's progress bar to its end
  kubectl get tj                          # every TrainingJob: phase, workers, step, age
  kubectl -n {RELEASE_NAMESPACE} logs deploy/{RELEASE}   # the operator
Run another: python -m ringleader_devcluster.demo --example examples/digits-ps-sync.yaml
Tear down:   make dev-cluster-down       (everything: cluster, operator, jobs)""",
        flush=True,
    )


def for_real_node(body: dict[str, Any]) -> dict[str, Any]:
    """The example's TrainingJob with every role's pod template made for the real node and the trainer image.
    Checkpoints without a claim go to an emptyDir at /checkpoints in each pod (the root filesystem is
    read-only; the dev cluster has no storage provisioner: a claim keeps them across pods,
    examples/checkpoint-pvc.yaml)."""
    out = copy.deepcopy(body)
    spec = out["spec"]
    scratch = "checkpoint" in spec and not (spec["checkpoint"] or {}).get("claimName")
    for role in ("workers", "parameterServers"):
        if role not in spec:
            continue
        template = on_real_node(spec[role].get("template") or {}, images.TRAINER.name)
        spec[role]["template"] = with_empty_dir(template, "checkpoints", "/checkpoints") if scratch else template
    return out


def _steps(body: dict[str, Any]) -> int:
    """The step count in the example's trainer command (--steps N), else the built-in examples' 600."""
    command = body["spec"]["workers"]["template"]["spec"]["containers"][0].get("command") or []
    if "--steps" in command:
        return int(command[command.index("--steps") + 1])
    return 600


if __name__ == "__main__":
    main()
