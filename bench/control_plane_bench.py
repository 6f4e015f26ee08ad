"""Control plane side by side: Ringleader's operator against Kubeflow's training-operator on the dev cluster.

    python -m bench.control_plane_bench [--reps 5] [--burst-reps 3] [--single 8 64 256] [--burst 500]
                                        [--configs defaults matched] [--fake-nodes 24]

Both run out of cluster on this host as service accounts with their own RBAC (bench/subjects.py), watching all
namespaces, at two configurations (bench/control_plane_plan.py): each at its shipped defaults, and both at
the same generous client budget with the training-operator's controller threads raised (and kube-scheduler's
budget raised alike, restarted between configurations: controlplane.set_scheduler_budget). Pods go to kwok fake
nodes, so nothing runs behind them and a pod is Running as soon as it is bound. The same work for both: one job
of 8, 64 and 256 workers (one pod each; for the training-operator a PyTorchJob of one Master and N-1 Workers),
then `--burst` jobs of 4 workers created together by 16 client threads. Every run gets a fresh operator process
and a fresh namespace, and measures from just before the first create call:

- created_s: until the last of the pods exists (a watch from before the creates sees its ADDED event);
- running_s: until every pod was seen Running;
- requests per job: the operator's API requests counted in the API server's audit log (bench/audit.py) from
  the first create until SETTLE_S seconds after all pods were Running (so status updates are included, and
  whatever the operator does periodically for a running job in that time);
- cpu_s and peak_rss_mb of the operator process over the run (RSS is VmHWM of the fresh process);
- cluster_cpu_s: CPU of the control plane (etcd, API server, controller-manager, scheduler, kwok) over the same
  span as the requests: what the operator's requests cost the cluster. On a machine of few cores the operator
  and the control plane share them, so this bounds how fast any operator's pods can be Running.

Runs are interleaved (control_plane_plan.schedule). The settings that change the outcome are printed first and
kept in bench/results/control-plane.json with every run; per configuration and scenario the medians with their
ranges, the ratio Ringleader / training-operator with its bootstrap interval, and each goal's verdict (met only
when the interval is inside the goal) are printed. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
from kubernetes import client, config, watch
from ringleader_devcluster import commands, controlplane, operatorprocess
from ringleader_devcluster.layout import Layout, read_versions

from bench import audit
from bench import control_plane_plan as plan
from bench.common import delete_namespace, new_namespace, proc_stats
from bench.identity import ensure_namespace
from bench.record import PEER_VERSIONS, RESULTS, machine, write_result
from bench.subjects import Subject, kubeflow_training_operator, ringleader, stop

CREATE_THREADS = 16  # client threads creating the jobs of a run
RESULT = RESULTS / "control-plane.json"
PROGRESS_S = 15.0  # a run still waiting for its pods says how far it got this often
PROGRESS_PODS = 256  # deleting the namespace of a run with more pods takes minutes: say so
SETTLE_S = 10.0  # requests are counted until this long after the last pod was seen Running
FAKE_POD = {
    "nodeSelector": {"type": "kwok"},
    "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
    "containers": [{"name": "main", "image": "bench/trainer:0", "command": ["python", "train.py"]}],
}


class PodWatch:
    """Watches one namespace from before the first create and records when `total` pods first existed and when
    all `total` were first seen Running."""

    def __init__(self, core: client.CoreV1Api, ns: str, total: int) -> None:
        self.core, self.ns, self.total = core, ns, total
        self.seen: set[str] = set()
        self.running: set[str] = set()
        self.created_at: float | None = None
        self.running_at: float | None = None
        self.rv = core.list_namespaced_pod(ns).metadata.resource_version
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _note(self, pod: dict[str, Any], now: float) -> None:
        name = pod["metadata"]["name"]
        self.seen.add(name)
        if (pod.get("status") or {}).get("phase") == "Running":
            self.running.add(name)
        if self.created_at is None and len(self.seen) >= self.total:
            self.created_at = now
        if self.running_at is None and len(self.running) >= self.total:
            self.running_at = now

    def _run(self) -> None:
        """Watch until every pod ran; a watch that breaks (it can, under a burst) is resumed from a fresh
        list, whose pods count as seen at the time of the list."""
        deadline = time.monotonic() + 1800
        while self.running_at is None and time.monotonic() < deadline:
            w = watch.Watch()
            try:
                # JSON only, no client models: building a model per event made this watcher lag behind a
                # 10,000-pod start by tens of seconds (it then reported Running late), more so beside the floor's
                # creates in the same process
                for ev in w.stream(
                    self.core.list_namespaced_pod,
                    self.ns,
                    resource_version=self.rv,
                    timeout_seconds=300,
                    deserialize=False,
                ):
                    if ev["type"] in ("ADDED", "MODIFIED"):
                        self._note(ev["object"], time.monotonic())
                    if self.running_at is not None:
                        break
            except Exception as e:  # any break of the stream: list and watch again
                print(f"[bench] pod watch broke ({type(e).__name__}: {e}); listing and watching again", flush=True)
                time.sleep(1)
            finally:
                w.stop()
            if self.running_at is None:
                try:
                    listed = orjson.loads(self.core.list_namespaced_pod(self.ns, _request_timeout=120,
                                                                        _preload_content=False).data)  # fmt: skip
                except Exception as e:  # a list of 10,000 pods cut off under load: list again, not give up
                    print(f"[bench] pod list broke ({type(e).__name__}); listing again", flush=True)
                    continue
                now = time.monotonic()
                for pod in listed.get("items") or []:
                    self._note(pod, now)
                self.rv = listed["metadata"]["resourceVersion"]

    def wait(self, timeout: float) -> None:
        self.thread.join(timeout)


def run(
    subject: Subject,
    flags: Sequence[str],
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    layout: Layout,
    jobs: int,
    workers: int,
    at_running: Callable[[str, int], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One measured run on a fresh operator process (started with `flags`) and namespace. `at_running`
    (namespace, the operator's pid) measures more once every pod runs and the requests are counted; what it
    returns joins the run's figures."""
    total = jobs * workers
    proc = subject.start(layout.state / "bench" / f"{subject.name}.log", flags)
    try:
        ns = new_namespace(core)
        pods = PodWatch(core, ns, total)
        mark = audit.offset(layout.audit_log)
        cpu0 = proc_stats(proc.pid)["cpu_seconds"]
        cluster0 = cluster_cpu_by_component(layout)
        bodies = [subject.job(f"j{i}" if jobs > 1 else "big", workers, FAKE_POD) for i in range(jobs)]
        t0 = time.monotonic()
        with ThreadPoolExecutor(CREATE_THREADS) as pool:
            list(pool.map(lambda b: custom.create_namespaced_custom_object(
                subject.group, subject.version, ns, subject.plural, b, _request_timeout=60), bodies))  # fmt: skip
        while pods.thread.is_alive() and time.monotonic() - t0 < 1800:
            pods.wait(PROGRESS_S)
            if pods.thread.is_alive():  # a long run shows how far it got
                print(f"[bench]   {subject.name}: {len(pods.seen)} of {total} pods created, {len(pods.running)} "
                      f"Running ({time.monotonic() - t0:.0f} s)", flush=True)  # fmt: skip
        cpu_running = proc_stats(proc.pid)["cpu_seconds"] - cpu0  # the watch ends as the last pod runs
        if pods.running_at is None or pods.created_at is None:
            raise SystemExit(
                f"bench: {subject.name}: {len(pods.seen)} of {total} pods created, {len(pods.running)} Running "
                f"after 30 min (log: {layout.state / 'bench'})"
            )
        time.sleep(max(0.0, pods.running_at + SETTLE_S - time.monotonic()))
        reqs = audit.requests(layout.audit_log, mark, subject.user)
        stats = proc_stats(proc.pid)
        cluster_cpu = cpu_spent(cluster0, cluster_cpu_by_component(layout))
        more = at_running(ns, proc.pid) if at_running is not None else {}
        if total > PROGRESS_PODS:
            print(f"[bench]   deleting namespace {ns} ({total} pods: this takes minutes)", flush=True)
        delete_namespace(core, ns)  # while the operator runs: it removes its own finalizers
    finally:
        stop(proc)
    return {
        "operator": subject.name,
        "jobs": jobs,
        "workers": workers,
        "created_s": pods.created_at - t0,
        "running_s": pods.running_at - t0,
        "requests": reqs.as_dict(),
        "requests_per_job": reqs.total / jobs,
        "cpu_s": stats["cpu_seconds"] - cpu0,
        "cpu_running_s": cpu_running,
        "peak_rss_mb": stats["peak_rss_mb"],
        "cluster_cpu_s": sum(cluster_cpu.values()),
        "cluster_cpu_by_component_s": cluster_cpu,
        **more,
    }


def cluster_cpu_by_component(layout: Layout) -> dict[str, float]:
    """CPU seconds each control-plane process (kwokctl's pid files) has used so far. A component that has
    exited (one that lost its leader lease under the load exits) ends the benchmark saying which, not with a
    traceback: the run's figures would not be of a working cluster."""
    out = {}
    for name, pid in controlplane.components(layout).items():
        try:
            out[name] = proc_stats(pid)["cpu_seconds"]
        except FileNotFoundError:
            log = layout.cluster_dir / "logs" / f"{name}.log"
            why = f"bench: {name} exited during the run (see {log}): its figures are not of a working cluster"
            raise SystemExit(f"{why}; start it again with `make dev-cluster-down dev-cluster`") from None
    return out


def cpu_spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Each component's CPU seconds between two readings (a component missing from `before` counts from 0)."""
    return {name: round(after[name] - before.get(name, 0.0), 2) for name in sorted(after)}


def header(args: argparse.Namespace, configs: list[str], commit: str) -> list[str]:
    """Every setting that changes the outcome, printed before the runs and kept in the result."""
    peer_version = read_versions(PEER_VERSIONS)["TRAINING_OPERATOR_VERSION"]
    lines = [
        f"Ringleader at commit {commit}; Kubeflow's training-operator {peer_version}; "
        f"kube {read_versions()['KUBE_VERSION']}",
        f"{args.fake_nodes} kwok fake nodes (110 pods each, kwok without a client rate limit); jobs created by "
        f"{CREATE_THREADS} client threads",
        f"repetitions: {args.reps} per one-job scenario, {args.burst_reps} for the burst; operators alternate "
        "(A B, B A, ...) and configurations alternate by repetition",
    ]
    for name in configs:
        c = plan.CONFIGS[name]
        lines.append(f"[{name}] {c.scheduler_setting()}")
        for op in plan.OPERATORS:
            settings = ", ".join(f"{k} {v}" for k, v in c.settings[op].items())
            lines.append(f"[{name}] {op}: {settings}; flags: {' '.join(c.args[op]) or '(none)'}")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=5, help="repetitions of each one-job scenario")
    p.add_argument("--burst-reps", type=int, default=3, help="repetitions of the burst")
    p.add_argument("--single", type=int, nargs="*", default=[8, 64, 256], help="workers of the one-job runs")
    p.add_argument("--burst", type=int, default=500, help="jobs of 4 workers created together (0: none)")
    p.add_argument("--configs", nargs="+", choices=list(plan.CONFIGS), default=list(plan.CONFIGS))
    p.add_argument("--fake-nodes", type=int, default=24, help="110 pods each: room for the burst")
    p.add_argument("--only", choices=list(plan.OPERATORS), help="measure one operator (no ratios)")
    p.add_argument("--keep", action="store_true",
                   help="keep the runs of bench/results/control-plane.json that this invocation does not redo "
                        "(other configurations, scenarios or operators): measure the long burst apart")  # fmt: skip
    args = p.parse_args()
    layout = Layout.from_env()
    if not commands.api_ready(layout):
        raise SystemExit("bench: the dev cluster is not running (start it with `make dev-cluster`)")
    operatorprocess.operator_down()  # one operator acts on TrainingJobs at a time
    commit = machine()["commit"]  # each run names its own: --keep mixes runs of several invocations
    settings = header(args, args.configs, commit)
    for line in settings:
        print(f"[bench] {line}", flush=True)
    controlplane.scale_fake_nodes(layout, args.fake_nodes)
    api = config.new_client_from_config(config_file=str(layout.kubeconfig))
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    workdir = layout.state / "bench"
    ensure_namespace(core)  # the operators' service accounts live there
    factories = {plan.PEER: kubeflow_training_operator, plan.RINGLEADER: ringleader}
    operators = [name for name in plan.OPERATORS if args.only in (None, name)]
    subjects = {name: factories[name](layout, core, workdir) for name in operators}
    scenarios = [(1, w) for w in args.single] + ([(args.burst, 4)] if args.burst else [])
    order = plan.schedule(scenarios, lambda jobs, _: args.burst_reps if jobs > 1 else args.reps, args.configs,
                          operators)  # fmt: skip
    runs = []
    try:
        for i, planned in enumerate(order):
            subject, cfg = subjects[planned.operator], plan.CONFIGS[planned.config]
            controlplane.set_scheduler_budget(layout, *(cfg.scheduler or (None, None)))
            r = run(subject, cfg.args[planned.operator], core, custom, layout, planned.jobs, planned.workers)
            runs.append({**r, "config": planned.config, "rep": planned.rep, "commit": commit})
            print(
                f"[bench] ({i + 1}/{len(order)}) [{planned.config}] {plan.scenario_name(planned.jobs, planned.workers)}"
                f" {subject.name:17s} rep {planned.rep + 1}: created {r['created_s']:7.2f} s, Running "
                f"{r['running_s']:7.2f} s, {r['requests_per_job']:6.1f} requests/job, CPU {r['cpu_s']:6.1f} s, "
                f"peak RSS {r['peak_rss_mb']:4.0f} MB, control plane CPU {r['cluster_cpu_s']:6.1f} s",
                flush=True,
            )
    finally:
        controlplane.set_scheduler_budget(layout, None, None)
        controlplane.scale_fake_nodes(layout, 0)
    if args.keep and RESULT.exists():
        old = json.loads(RESULT.read_text())
        redone = {(r["config"], r["jobs"], r["workers"], r["operator"]) for r in runs}
        runs = [r for r in old.get("runs", []) if "config" in r
                and (r["config"], r["jobs"], r["workers"], r["operator"]) not in redone] + runs  # fmt: skip
        settings = plan.merge_settings(old.get("settings", []), settings)
    rows = plan.compare(runs)
    for row in rows:
        if row.ratio:
            print(f"[bench] {plan.medians_line(row)}", flush=True)
    for judged in plan.judge(rows):
        print(f"[bench] goal: {judged.line()}", flush=True)
    write_result(
        RESULT.stem,
        {"settings": settings, "reps": args.reps, "burst_reps": args.burst_reps, "fake_nodes": args.fake_nodes,
         "settle_s": SETTLE_S, "rows": [r.as_dict() for r in rows], "runs": runs},
    )  # fmt: skip


if __name__ == "__main__":
    main()
