"""One job of thousands of ranks, and a thousand small jobs: what the operator costs as n grows (issue 29).

    python -m bench.scale_bench [--workers 1000 2000 5000 10000] [--small-jobs 1000] [--reps 3]
                                [--subjects floor ringleader training-operator] [--idle 60] [--late-idle 300]
                                [--fresh] [--profile] [--operator-tree PATH] [--gang-backend gates]
                                [--other-pods 20000]

On the dev cluster's kwok fake nodes (sized to hold the largest point; kwok runs nothing, so a pod is Running as
soon as it is bound), at matched client budgets (bench/control_plane_plan.py's "matched": both operators and
kube-scheduler with a generous budget, so neither operator is held back by a client limit the other lacks), per
point and subject, interleaved in an order that rotates by repetition:

- floor: the same objects created by a plain client (32 at once), no operator: the TrainingJobs, then the
  Secrets, Services and pods Ringleader's operator makes for them, built by its code: how fast this cluster can
  make and run those pods at all;
- floor/worker-0-named (only when asked for in --subjects): the floor with the headless Service selecting worker
  0 alone, not every rank: what the control plane spends on a Service over every pod (results in a `-services`
  file of their own, a report section of its own);
- ringleader: one TrainingJob of n workers (this checkout's operator, a fresh process per run);
- training-operator: one PyTorchJob of n workers (Kubeflow's, bench/peer), for comparison.

Per run: created_s (the last pod exists), running_s (every pod Running), the operator's CPU seconds to all Running
(cpu_running_s) and per pod, its CPU seconds in the `--idle` seconds after (per minute, the job running and
nothing changing) and again in as many seconds from `--late-idle` seconds after the first window began (the steady
state: the first window still holds the tail of the start's events on a saturated machine), its peak RSS, the job
object's size and its status's size as the API server returns them (managedFields included), its API requests per
pod (audit log, until 10 s after Running), and how often a node turned not Ready during the run (a run that saw
one is flagged: its figures are not clean). Results go to bench/results/scale.json after every run (a bench
stopped part way keeps the runs it finished), which keeps its runs of the points not measured this time (unless
--fresh); `bench/report.py` turns them into BENCHMARKS.md's table with intervals and verdicts. `--gang-backend`
runs Ringleader's operator with that backend (subject `ringleader/<backend>`; results in scale-<backend>.json, a
section of the report of its own, so run the floor beside it): the dev cluster serves Kubernetes' Workload API,
which the operator's default (auto) uses, while most clusters do not serve it and get the operator's own gate:
`make bench-scale` measures that one (`--gang-backend gates`). `--other-pods N` keeps N pods of another workload
Running beside every run (results in a `-others` file of their own, a report section of its own): both operators
cache every pod of the cluster. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import secrets
import subprocess
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
from kubernetes import client, config, watch
from ringleader_api import Role, TrainingJob
from ringleader_devcluster import commands, controlplane, operatorprocess
from ringleader_devcluster.layout import REPO_ROOT, Layout
from ringleader_operator import admission, builders, names
from ringleader_operator.job_objects import build_service, build_token_secret
from ringleader_operator.kube import CREATE_CONCURRENCY

from bench import control_plane_bench as cpb
from bench import control_plane_plan as plan
from bench import profile as profiling
from bench.common import delete_namespace, new_namespace, proc_stats
from bench.identity import ensure_namespace
from bench.record import RESULTS, commit_of, machine, point_order, write_result
from bench.subjects import Subject, install_crd, kubeflow_training_operator, ringleader, ringleader_job

RESULT = RESULTS / "scale.json"
FLOOR = "floor"
# The floor with the headless Service selecting worker 0 alone (the rendezvous address), not every rank: what the
# control plane spends on a Service over every pod (EndpointSlice and Endpoints syncs each cost the Service's size,
# and kube-scheduler's default topology spreading counts the pods a Service selects).
FLOOR_NAMED0 = "floor/worker-0-named"
FLOORS = (FLOOR, FLOOR_NAMED0)
PODS_PER_NODE = 110
CONFIG = plan.CONFIGS["matched"]


class NodeFlaps:
    """Watches the cluster's nodes during a run and counts how often one turned not Ready (on a machine of few
    cores a busy operator can starve kwok, whose fake nodes then miss their lease renewals): a run that saw a
    flap is reported as such, not as clean numbers."""

    def __init__(self, core: client.CoreV1Api) -> None:
        self.core, self.flaps, self.named = core, 0, set[str]()
        self.stopped = threading.Event()
        listed = core.list_node()
        self.ready = {n.metadata.name: _ready(n) for n in listed.items}
        self.rv = listed.metadata.resource_version
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.is_set():
            w = watch.Watch()
            try:
                for ev in w.stream(self.core.list_node, resource_version=self.rv, timeout_seconds=30):
                    node = ev["object"]
                    self.rv = node.metadata.resource_version
                    ready, before = _ready(node), self.ready.get(node.metadata.name)
                    if before and not ready and ev["type"] != "DELETED":
                        self.flaps += 1
                        self.named.add(node.metadata.name)
                    self.ready[node.metadata.name] = ready
                    if self.stopped.is_set():
                        break
            except Exception:  # a broken watch: list again (transitions in between are missed, not invented)
                listed = self.core.list_node()
                self.ready = {n.metadata.name: _ready(n) for n in listed.items}
                self.rv = listed.metadata.resource_version
            finally:
                w.stop()

    def stop(self) -> dict[str, Any]:
        self.stopped.set()
        return {"node_flaps": self.flaps, "nodes_flapped": sorted(self.named)[:5]}


def _ready(node: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def floor_objects(job: dict[str, Any], all_named: bool = True) -> list[dict[str, Any]]:
    """What Ringleader's operator makes for the stored TrainingJob `job` (its uid set), built by the operator's own
    code: the token Secret, the headless Service, and every pod as a job admitted at once has it (ungated). The
    floor creates these itself, so its pods cost the control plane what the operator's do (their env, owner
    reference, token volume and the Service's endpoints), and the ratio to it is the operator's own overhead."""
    model = TrainingJob.model_validate(job)
    pods = [builders.build_pod(model, role, index) for role, index in builders.desired_ranks(model)]
    for pod in pods:
        admission.lift_gate(pod)
    service = build_service(model)
    if not all_named:  # `all_named` False: the Service selects worker 0 alone (FLOOR_NAMED0)
        service["spec"]["selector"] = names.rank_labels(model.name, Role.WORKER, 0)
    return [build_token_secret(model, secrets.token_hex(32)), service, *pods]


class RawCreates:
    """Creates objects from bodies serialized beforehand, through the Kubernetes client's own connection pool and
    credentials but none of its per-call work (argument validation, a walk of the body, json, the answer's
    models): the floor's client must not be what paces it. The answers are read, not decoded."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        _, self.host, self.headers, _, _ = api.param_serialize("POST", "", header_params=headers,
                                                                auth_settings=["BearerToken"])  # fmt: skip

    def __call__(self, path: str, body: bytes) -> None:
        # urllib3 itself: the client's request path json-encodes any body it is given, bytes included
        r = self.api.rest_client.pool_manager.request("POST", self.host + path, body=body, headers=self.headers,
                                                      timeout=60)  # fmt: skip
        if not 200 <= r.status <= 299:
            raise SystemExit(f"bench: floor: POST {path}: {r.status} {r.data[:300]!r}")


FLOOR_PATHS = {"Pod": "pods", "Service": "services", "Secret": "secrets"}


def floor_run(
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    layout: Layout,
    jobs: int,
    workers: int,
    all_named: bool = True,
) -> dict[str, Any]:
    """Ringleader's objects for `jobs` jobs of `workers` made by a plain client, no operator running: the
    TrainingJobs (left without status), then their Secrets, Services and pods, as many at once as the operator
    creates pods (kube.CREATE_CONCURRENCY). Created and Running are timed from the first job's create, as an
    operator's run is; the other bodies are built (they name each job's uid) and serialized before their creates.
    The control plane's CPU per component is measured over the same span as an operator's run (to SETTLE_S after
    all Running), for comparison: what the operator's presence costs the cluster."""
    ns = new_namespace(core)
    total = jobs * workers
    pods = cpb.PodWatch(core, ns, total)
    create = RawCreates(core.api_client)
    names = [f"j{i}" if jobs > 1 else "big" for i in range(jobs)]
    cluster0 = cpb.cluster_cpu_by_component(layout)
    t0 = time.monotonic()
    with ThreadPoolExecutor(CREATE_CONCURRENCY) as pool:
        stored = list(pool.map(lambda name: custom.create_namespaced_custom_object(
            "ringleader.dev", "v1alpha1", ns, "trainingjobs", ringleader_job(name, workers, cpb.FAKE_POD),
            _request_timeout=60), names))  # fmt: skip
        bodies = [(f"/api/v1/namespaces/{ns}/{FLOOR_PATHS[o['kind']]}", orjson.dumps(o))
                  for j in stored for o in floor_objects(j, all_named)]  # fmt: skip
        list(pool.map(lambda b: create(*b), bodies))
    pods.wait(1800)
    if pods.running_at is None or pods.created_at is None:
        raise SystemExit(f"bench: floor: {len(pods.running)} of {total} pods Running after 30 min")
    time.sleep(max(0.0, pods.running_at + cpb.SETTLE_S - time.monotonic()))
    cluster_cpu = cpb.cpu_spent(cluster0, cpb.cluster_cpu_by_component(layout))
    out = {
        "created_s": pods.created_at - t0,
        "running_s": pods.running_at - t0,
        "cluster_cpu_s": sum(cluster_cpu.values()),
        "cluster_cpu_by_component_s": cluster_cpu,
    }
    delete_namespace(core, ns)
    return out


class OtherPods:
    """`count` pods of another workload (no job's, in a namespace of their own, Running on the kwok nodes) that
    stay for the whole invocation: both operators watch pods cluster-wide, so these are in their caches too
    (issue 29: memory linear in pods, the same beside 20,000 pods of other workloads)."""

    def __init__(self, core: client.CoreV1Api, count: int) -> None:
        self.core, self.count, self.ns = core, count, new_namespace(core, "bench-other")

    def fill(self) -> None:
        """Create the pods and wait until all run (a failure leaves them to `remove`)."""
        core, count = self.core, self.count
        print(f"[bench] creating {count} pods of another workload in {self.ns}", flush=True)
        running = cpb.PodWatch(core, self.ns, count)
        create = RawCreates(core.api_client)
        path = f"/api/v1/namespaces/{self.ns}/pods"

        def body(i: int) -> bytes:
            meta = {"name": f"other-{i}", "labels": {"app": "other"}}
            return orjson.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": cpb.FAKE_POD})

        with ThreadPoolExecutor(CREATE_CONCURRENCY) as pool:
            list(pool.map(lambda i: create(path, body(i)), range(count)))
        running.wait(1800)
        if running.running_at is None:
            raise SystemExit(f"bench: {len(running.running)} of {count} other pods Running after 30 min")
        print(f"[bench] {count} pods of another workload Running", flush=True)

    def remove(self) -> None:
        print(f"[bench] deleting the {self.count} other pods (minutes)", flush=True)
        delete_namespace(self.core, self.ns, timeout=1800)


def at_running(
    custom: client.CustomObjectsApi, subject: Subject, idle_s: float, late_s: float, profile: Profile | None = None
) -> Any:
    """What `control_plane_bench.run` measures once every pod runs: the object's size, then the idle CPU over
    `idle_s` seconds, and again over `idle_s` seconds from `late_s` seconds after the first window began (none
    when `late_s` is 0); `profile`: py-spy's samples of the operator's start (stopped here) and of each idle
    window (their top frames join the figures)."""

    def idle_window(pid: int, key: str, out_file: Path | None) -> dict[str, Any]:
        spy = profiling.Recording(pid, out_file, idle_s) if out_file is not None else None
        cpu0 = proc_stats(pid)["cpu_seconds"]
        time.sleep(idle_s)
        idle = proc_stats(pid)["cpu_seconds"] - cpu0
        out: dict[str, Any] = {f"{key}_cpu_s_per_min": idle * 60 / idle_s}
        if spy is not None:
            out[f"{key}_profile"] = spy.stop(idle)
            _show(key.replace("_", " "), out[f"{key}_profile"])
        return out

    def measure(ns: str, pid: int) -> dict[str, Any]:
        objs = custom.list_namespaced_custom_object(subject.group, subject.version, ns, subject.plural)["items"]
        sizes = [len(json.dumps(o)) for o in objs]
        status = [len(json.dumps(o.get("status") or {})) for o in objs]
        out: dict[str, Any] = {"object_bytes": max(sizes, default=0), "status_bytes": max(status, default=0)}
        if profile is not None and profile.start is not None:
            out["start_profile"] = profile.start.stop(proc_stats(pid)["cpu_seconds"] - profile.start_cpu)
            _show("start", out["start_profile"])
        began = time.monotonic()
        out |= idle_window(pid, "idle", profile.idle if profile is not None else None)
        if late_s > 0:
            print(f"[bench]   waiting for the late idle window, {late_s:g} s after the first began", flush=True)
            time.sleep(max(0.0, began + late_s - time.monotonic()))
            out |= idle_window(pid, "late_idle", profile.late_idle if profile is not None else None)
        return out

    return measure


class Profile:
    """Where py-spy's samples of one run go: from the operator's start to all Running, then each idle window."""

    def __init__(self, directory: Path, run: str) -> None:
        self.started, self.idle = directory / f"start-{run}.txt", directory / f"idle-{run}.txt"
        self.late_idle = directory / f"late-idle-{run}.txt"
        self.start: profiling.Recording | None = None
        self.start_cpu = 0.0

    def profiled(self, subject: Subject) -> Subject:
        """`subject`, its operator recorded from the moment it is ready."""

        def start(log: Path, flags: Sequence[str]) -> subprocess.Popen[bytes]:
            proc = subject.start(log, flags)
            self.start_cpu = proc_stats(proc.pid)["cpu_seconds"]
            self.start = profiling.Recording(proc.pid, self.started)
            return proc

        return dataclasses.replace(subject, start=start)


def _show(phase: str, lines: list[str]) -> None:
    print(f"[bench]   profile of the {phase}:", flush=True)
    print("\n".join(f"[bench]   {line}" for line in lines), flush=True)


def schedule(points: list[tuple[int, int]], subjects: list[str], reps: int) -> list[tuple[int, int, str, int]]:
    """(jobs, workers, subject, rep) in the order they run: every point once per repetition, the subjects of a
    point in an order that rotates by repetition, so no subject always goes first."""
    order = []
    for rep in range(reps):
        for jobs, workers in points:
            shift = rep % len(subjects)
            for name in subjects[shift:] + subjects[:shift]:
                order.append((jobs, workers, name, rep))
    return order


def kept_runs(path: Path, points: list[tuple[int, int]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The runs `path` already holds of points other than `points`, and its settings lines for them: a run of
    the 10,000-worker point alone keeps the smaller points measured before (each run names its commit; the
    floor and the operators of one point always come from the same invocation)."""
    if not path.exists():
        return [], []
    earlier = json.loads(path.read_text())
    runs = [r for r in earlier.get("runs", []) if (r["jobs"], r["workers"]) not in points]
    if not runs:
        return [], []
    kept = point_order({(r["jobs"], r["workers"]) for r in runs})
    commits = sorted({r.get("commit", "?") for r in runs})
    when = earlier.get("machine", {}).get("date", "?")
    line = (f"points {', '.join(f'{j}x{w}' for j, w in kept)} kept from an earlier invocation ({when}, "
            f"{', '.join(commits)}), whose settings were:")  # fmt: skip
    settings = [s for s in earlier.get("settings", []) if not s.startswith(("points ", "  "))]
    return runs, [line, *(f"  {s}" for s in settings)]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, nargs="*", default=[1000, 2000, 5000, 10000], help="one job of n workers")
    p.add_argument("--small-jobs", type=int, default=1000, help="jobs of 8 workers created together (0: none)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--subjects", nargs="+", choices=[*FLOORS, *plan.OPERATORS], default=[FLOOR, *plan.OPERATORS])
    p.add_argument("--idle", type=float, default=60.0, help="seconds of idle CPU measured after all Running")
    p.add_argument(
        "--late-idle", type=float, default=300.0, help="seconds after the first idle window began that a second "
        "one begins (the steady state; 0: none)",
    )  # fmt: skip
    p.add_argument("--profile", action="store_true", help="py-spy the operator's start and idle seconds: top frames")
    p.add_argument(
        "--fresh", dest="keep", action="store_false", help="drop the result file's runs of other points (kept by "
        "default: each point may come from its own invocation)",
    )  # fmt: skip
    p.add_argument(
        "--gang-backend", choices=["gates", "workload-api"], help="Ringleader's --gang-backend (default: its own, "
        "auto: the Workload API where served, as on the dev cluster); its runs are the subject ringleader/<backend>",
    )  # fmt: skip
    p.add_argument(
        "--other-pods", type=int, default=0, help="pods of another workload Running beside every run (both "
        "operators cache pods cluster-wide); results in scale[-backend]-others.json",
    )  # fmt: skip
    p.add_argument(
        "--operator-tree", type=Path, help="another checkout's operator and CRD (an earlier commit: its results go "
        "to scale-<commit>.json, not into BENCHMARKS.md)",
    )  # fmt: skip
    return p.parse_args()


def operator_flags(name: str, gang_backend: str | None) -> list[str]:
    """The flags `--gang-backend` adds to subject `name`'s operator (Ringleader's only)."""
    return [f"--gang-backend={gang_backend}"] if gang_backend and name == plan.RINGLEADER else []


def subject_label(name: str, gang_backend: str | None) -> str:
    """The subject a run is recorded under: Ringleader with a chosen gang backend is a row of its own."""
    return f"{name}/{gang_backend}" if operator_flags(name, gang_backend) else name


def make_subjects(
    names: list[str], layout: Layout, core: client.CoreV1Api, workdir: Path, tree: Path
) -> dict[str, Subject]:
    """The operators among `names`, set up (Ringleader's from `tree`)."""
    subjects: dict[str, Subject] = {}
    if any(name in FLOORS for name in names) and plan.RINGLEADER not in names:
        install_crd(layout, core, tree)  # the floor makes TrainingJobs too
    for name in names:
        if name == plan.RINGLEADER:
            subjects[name] = ringleader(layout, core, workdir, tree)
        elif name == plan.PEER:
            subjects[name] = kubeflow_training_operator(layout, core, workdir)
    return subjects


def provenance(args: argparse.Namespace) -> tuple[str, Path, str]:
    """The commit the runs are recorded at, the tree the operator runs from, and the result file's stem: another
    checkout's operator (`--operator-tree`) or another gang backend are not the default's figures, so their runs
    go to a file of their own (with their own floor); the report shows scale-gates.json in a section of its own
    and leaves another checkout's files out. A run of `floor/worker-0-named` goes to a `-services` file (its
    own report section), so the main file's floor stays the one of its operators' invocation."""
    commit, tree, result = machine()["commit"], REPO_ROOT, RESULT.stem
    if args.operator_tree is not None:
        tree = args.operator_tree.resolve()
        other = commit_of(tree)
        commit, result = f"{other} (the operator; the benchmark at {commit})", f"{RESULT.stem}-{other}"
    if args.gang_backend:
        result = f"{result}-{args.gang_backend}"
    if args.other_pods:
        result = f"{result}-others"
    if FLOOR_NAMED0 in args.subjects:  # a floor of another pod shape: not the floor the operators are set against
        result = f"{result}-services"
    return commit, tree, result


def settings_lines(args: argparse.Namespace, commit: str, points: list[tuple[int, int]], nodes: int) -> list[str]:
    """What the benchmark prints before its runs and keeps with its results."""
    late = f", and again over {args.idle:g} s from {args.late_idle:g} s after that (late idle)"
    return [
        f"Ringleader at commit {commit}; points (jobs x workers): {', '.join(f'{j}x{w}' for j, w in points)}",
        f"{nodes} kwok fake nodes of {PODS_PER_NODE} pods; {CONFIG.scheduler_setting()}; {args.reps} repetitions",
        "kube-scheduler and kube-controller-manager hold a 60 s leader lease renewed within 40 s "
        "(controlplane.LONG_LEASE_FLAGS): at Kubernetes' 15 s either lost it under a 5,000-pod start and exited",
        *(f"{op}: {', '.join(f'{k} {v}' for k, v in CONFIG.settings[op].items())}" for op in plan.OPERATORS),
        f"ringleader's gang backend: {args.gang_backend or 'auto (the Workload API, which the dev cluster serves)'}",
        f"floor: the TrainingJobs and the Secrets, Services and pods Ringleader's operator makes for them (built by "
        f"its code, ungated, serialized beforehand) created by a plain client ({CREATE_CONCURRENCY} at once, as the "
        "operator creates pods), no operator",
        f"idle CPU measured over {args.idle:g} s after all Running (and {cpb.SETTLE_S:g} s of settling)"
        + (late if args.late_idle else ""),
        *([f"{args.other_pods} pods of another workload Running in a namespace of their own through every run "
           "(both operators cache pods cluster-wide)"] if args.other_pods else []),
        *(["Ringleader's operator recorded by py-spy (--profile, 100 Hz) from its start: its CPU figures include "
           "what the sampling costs it"] if args.profile else []),
    ]  # fmt: skip


def operator_run(
    args: argparse.Namespace,
    subject: Subject,
    name: str,
    point: tuple[int, int],
    profile: Profile | None,
    kube: tuple[client.CoreV1Api, client.CustomObjectsApi],
    layout: Layout,
) -> dict[str, Any]:
    """One run of the operator `subject` (named `name`) at `point` (jobs, workers); `profile`: py-spy's record of
    it, if any."""
    (jobs, workers), (core, custom) = point, kube
    if profile is not None:
        subject = profile.profiled(subject)
    measure = at_running(custom, subject, args.idle, args.late_idle, profile)
    flags = [*CONFIG.args[name], *operator_flags(name, args.gang_backend)]
    r = cpb.run(subject, flags, core, custom, layout, jobs, workers, measure)
    r["cpu_ms_per_pod"] = r["cpu_running_s"] * 1000 / (jobs * workers)
    r["requests_per_pod"] = r["requests"]["total"] / (jobs * workers)
    return r


def main() -> None:
    args = parse_args()
    layout = Layout.from_env()
    if not commands.api_ready(layout):
        raise SystemExit("bench: the dev cluster is not running (start it with `make dev-cluster`)")
    operatorprocess.operator_down()  # one operator acts on TrainingJobs at a time
    points = [(1, w) for w in args.workers] + ([(args.small_jobs, 8)] if args.small_jobs else [])
    largest = max(jobs * workers for jobs, workers in points)
    nodes = math.ceil((largest + args.other_pods) / PODS_PER_NODE) + 1
    commit, tree, result = provenance(args)
    settings = settings_lines(args, commit, points, nodes)
    for line in settings:
        print(f"[bench] {line}", flush=True)
    controlplane.scale_fake_nodes(layout, nodes)
    controlplane.set_scheduler_budget(layout, *(CONFIG.scheduler or (None, None)))
    controlplane.set_controller_manager_lease(layout, True)
    api = config.new_client_from_config(config_file=str(layout.kubeconfig))
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    workdir = layout.state / "bench"
    ensure_namespace(core)
    subjects = make_subjects(args.subjects, layout, core, workdir, tree)
    runs, earlier = kept_runs(RESULTS / f"{result}.json", points) if args.keep else ([], [])
    order = schedule(points, args.subjects, args.reps)

    def save() -> None:
        write_result(result, {"settings": settings + earlier, "reps": args.reps, "idle_s": args.idle,
                              "late_idle_s": args.late_idle, "runs": runs})  # fmt: skip

    others = OtherPods(core, args.other_pods) if args.other_pods else None
    try:
        if others is not None:
            others.fill()
        for i, (jobs, workers, name, rep) in enumerate(order):
            flaps = NodeFlaps(core)
            if name in FLOORS:
                r = floor_run(core, custom, layout, jobs, workers, all_named=name == FLOOR)
            else:
                profiled = args.profile and name == plan.RINGLEADER  # py-spy records Ringleader's operator only
                profile = Profile(workdir, f"{jobs}x{workers}-{rep + 1}") if profiled else None
                r = operator_run(args, subjects[name], name, (jobs, workers), profile, (core, custom), layout)
            r |= flaps.stop()
            if r["node_flaps"]:
                print(f"[bench] WARNING: {r['node_flaps']} times a node turned not Ready during this run "
                      f"({', '.join(r['nodes_flapped'])}): its figures are not clean", flush=True)  # fmt: skip
            runs.append(
                {
                    **r,
                    "subject": subject_label(name, args.gang_backend),
                    "jobs": jobs,
                    "workers": workers,
                    "rep": rep,
                    "commit": commit,
                    **({"other_pods": args.other_pods} if args.other_pods else {}),
                }
            )
            shown = ", ".join(f"{k} {v:.2f}" for k, v in r.items() if isinstance(v, float | int) and k != "jobs")
            print(f"[bench] ({i + 1}/{len(order)}) {jobs}x{workers} {name} rep {rep + 1}: {shown}", flush=True)
            save()  # after every run: a bench stopped hours in keeps what it measured
    finally:
        save()  # a control plane that gave way mid-run must not lose the runs before it
        if others is not None:
            others.remove()
        controlplane.set_scheduler_budget(layout, None, None)
        controlplane.set_controller_manager_lease(layout, False)
        controlplane.scale_fake_nodes(layout, 0)


if __name__ == "__main__":
    main()
