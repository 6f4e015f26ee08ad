"""Trainer image: from a one-line change of the trainer's code to a pod running the new code on the real node.

    python bench/image_rebuild_bench.py [--reps 5]

Each repetition appends a comment line to `ringleader_trainer/__init__.py` in a copy of the image's build
context, then times the path a developer waits on: `images.publish` (buildah rebuilds the layers after the
change, and pushes the image to the dev cluster's registry, which has every other layer) and a pod on the real
node (`imagePullPolicy: Always`: containerd fetches and unpacks only the new layer) that imports the package
and checks that it carries the change. The first repetition is the image's first build from that copy if its
layers are not cached yet; the median is over the repetitions after it. Results go to
bench/results/image_rebuild.json with every repetition; nothing is asserted. Needs `make dev-cluster`.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from kubernetes import client, config
from ringleader_devcluster import images, realnode
from ringleader_devcluster.layout import REPO_ROOT, Layout

from bench.common import bench_wait, delete_namespace, new_namespace
from bench.record import summary, write_result

GOAL_S = 30.0
MARK = "# image rebuild benchmark"


def copy_context(to: Path) -> Path:
    """The trainer image's build inputs (its Dockerfile and every folder it copies) in a folder of their own."""
    for rel in (images.TRAINER.dockerfile, *images.TRAINER.inputs):
        src, dst = REPO_ROOT / rel, to / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dst)
    return to


def check_pod(name: str, line: str) -> dict[str, Any]:
    script = f"import inspect, ringleader_trainer as t; assert {line!r} in inspect.getsource(t), 'old code'"
    return {
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {realnode.LABEL: "true"},
            "tolerations": [{"key": realnode.TAINT, "operator": "Exists", "effect": "NoSchedule"}],
            "automountServiceAccountToken": False,
            "containers": [
                {"name": "main", "image": images.TRAINER.name, "imagePullPolicy": "Always",
                 "command": ["python", "-c", script]}
            ],
        },
    }  # fmt: skip


def wait_done(core: client.CoreV1Api, ns: str, name: str, timeout: float = 900) -> str:
    def ended() -> str | None:
        phase = core.read_namespaced_pod(name, ns).status.phase
        return str(phase) if phase in ("Succeeded", "Failed") else None

    return bench_wait(f"pod {name} to finish", ended, timeout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    layout = Layout.from_env()
    print(f"[bench] settings: reps={args.reps}, image={images.TRAINER.name}, change=one comment line", flush=True)
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(layout.kubeconfig)))
    ns = new_namespace(core, "rebuild")
    reps: list[dict[str, float]] = []
    try:
        with tempfile.TemporaryDirectory(dir=layout.cache) as tmp:
            context = copy_context(Path(tmp))
            init = context / "trainer-image" / "ringleader_trainer" / "__init__.py"
            original = init.read_text()
            for i in range(args.reps + 1):
                line = f"{MARK} {time.time_ns()}"
                init.write_text(f"{original}{line}\n")
                t0 = time.monotonic()
                images.publish(layout, images.TRAINER, context)
                pushed = time.monotonic() - t0
                core.create_namespaced_pod(ns, check_pod(f"check-{i}", line))
                phase = wait_done(core, ns, f"check-{i}")
                total = time.monotonic() - t0
                if phase != "Succeeded":
                    raise SystemExit(f"bench: the pod did not run the new code ({phase})")
                label = "first (not counted)" if i == 0 else f"{i}/{args.reps}"
                print(f"[bench] {label}: build+push {pushed:.1f}s, runnable {total:.1f}s", flush=True)
                if i:
                    reps.append({"build_push_s": pushed, "change_to_running_s": total})
    finally:
        delete_namespace(core, ns)
    result = {
        "settings": {"reps": args.reps, "image": images.TRAINER.name, "change": "one comment line in __init__.py"},
        "goal_s": GOAL_S,
        "build_push_s": summary([r["build_push_s"] for r in reps]),
        "change_to_running_s": summary([r["change_to_running_s"] for r in reps]),
        "repetitions": reps,
    }
    write_result("image_rebuild", result)


if __name__ == "__main__":
    main()
