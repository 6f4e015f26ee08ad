"""The dev cluster's control plane: etcd, kube-apiserver, kube-controller-manager and kube-scheduler through
kwokctl's binary runtime (with our own builds, fully offline), kwok's fake nodes, and crashing or restarting one
component for the failover tests."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import servicenet
from .commands import (
    READY_TIMEOUT,
    ClusterError,
    api_ready,
    ensure_port_free,
    kubectl,
    kwok_env,
    run_command,
    say,
)
from .layout import CLUSTER_NAME, Layout
from .node.network import Bridge
from .pids import is_running, pid_from, spawn, stop_pid, wait_gone, wait_ready
from .waiting import WaitTimeout, wait_until

API_PORT = int(os.environ.get("RINGLEADER_API_PORT", "16443"))
FAKE_NODE_TAINT = "kwok.x-k8s.io/node=fake"
FAKE_POD_NETWORK = "198.19.0.0/16"  # the other half of RFC 2544's benchmarking range
# The API server audits only the requests of service accounts in this namespace: the control-plane benchmark
# runs each operator it compares under one of them and counts its requests in the audit log.
AUDITED_NAMESPACE = "bench-operators"
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
# Kubernetes' own gang scheduling (alpha in 1.36): the Workload and PodGroup API (scheduling.k8s.io/v1alpha2), the
# scheduler placing a PodGroup all or nothing, and keeping it in one topology domain when asked. The operator uses
# it where it is served (--gang-backend auto).
FEATURE_GATES = "GenericWorkload=true,GangScheduling=true,TopologyAwareWorkloadScheduling=true"
RUNTIME_CONFIG = "scheduling.k8s.io/v1alpha2=true"


def _apiserver_patch(layout: Layout) -> dict[str, Any]:
    """kube-apiserver's options beyond kwokctl's. The real node's kubelet authenticates the API server by its
    client certificate and is reached at its InternalIP (its Hostname address is not resolvable here). The API
    server listens on every address (TLS, authenticated; the rest of the control plane stays on loopback) because
    the `kubernetes` Service's endpoint is this machine's address, where kube-proxy sends pods of the real node;
    its service range is written out because servicenet.py relies on it."""
    return {
        "name": "kube-apiserver",
        "extraArgs": [
            {"key": "bind-address", "value": "0.0.0.0", "override": True},
            {"key": "service-cluster-ip-range", "value": servicenet.SERVICE_CIDR},
            {"key": "kubelet-client-certificate", "value": str(layout.pki / "admin.crt")},
            {"key": "kubelet-client-key", "value": str(layout.pki / "admin.key")},
            {"key": "kubelet-preferred-address-types", "value": "InternalIP,Hostname"},
        ],
    }


def _kwokctl_config(layout: Layout) -> Path:
    """Options kwokctl has no flag for: loopback-only binding; the bridge address in the API server's
    certificate, so pods reach it through the process node's relay with verified TLS; node heartbeats at
    Kubernetes' own pace (kwokctl's heartbeat factor of 5 slows them down for fake nodes), so the
    controller-manager notices a lost process node within its 40 s grace period and kwok renews its fake nodes'
    leases every 10 s, inside that grace period (with the factor's 200 s leases renewed every 50 s, each fake
    node went NotReady, untaken by the scheduler, for about 10 s of every 50); and kwok managing only its own
    fake nodes, never the process node."""
    bridge = Bridge()
    override = [
        {"key": "manage-all-nodes", "value": "false", "override": True},
        {"key": "manage-nodes-with-annotation-selector", "value": "kwok.x-k8s.io/node=fake"},
    ]
    node_monitoring = [
        {"key": "node-monitor-period", "value": "5s", "override": True},
        {"key": "node-monitor-grace-period", "value": "40s", "override": True},
    ]
    cfg = {
        "kind": "KwokctlConfiguration",
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "options": {
            "bindAddress": "127.0.0.1",
            "heartbeatFactor": 1,
            "kubeApiserverCertSANs": [
                bridge.gateway,
                servicenet.KUBERNETES_SERVICE_IP,  # in-cluster clients on the real node connect there
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            "kubectlBinary": str(layout.binary("kubectl")),
            "kubeFeatureGates": FEATURE_GATES,
            "kubeRuntimeConfig": RUNTIME_CONFIG,
        },
        "componentsPatches": [
            {"name": "kwok-controller", "extraArgs": override},
            _apiserver_patch(layout),
            # Kubernetes' defaults, written out: the failover tests rely on them.
            {"name": "kube-controller-manager", "extraArgs": node_monitoring},
        ],
    }
    path = layout.state / "kwokctl.yaml"
    path.write_text(json.dumps(cfg, indent=2))  # JSON is YAML
    return path


def _audit_policy(layout: Layout) -> Path:
    """Metadata-level audit events, one per finished request, for AUDITED_NAMESPACE's service accounts only:
    nothing else is written, so the log costs the other tests nothing."""
    policy = {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived", "ResponseStarted"],
        "rules": [
            {"level": "Metadata", "userGroups": [f"system:serviceaccounts:{AUDITED_NAMESPACE}"]},
            {"level": "None"},
        ],
    }
    path = layout.state / "audit-policy.yaml"
    path.write_text(json.dumps(policy, indent=2))
    return path


def start_control_plane(layout: Layout) -> None:
    """Create the control plane (kwokctl, binary runtime), or start the stopped components of an existing one."""
    kwokctl = str(layout.binary("kwokctl"))
    env = kwok_env(layout)
    pids = component_pids(layout)
    if pids and all(is_running(p) for p in pids) and api_ready(layout):
        say("control plane already running")
        return
    if (layout.cluster_dir / "kwok.yaml").exists():
        _restart_control_plane(layout, kwokctl, env)
        return
    ensure_port_free(
        API_PORT, "kube-apiserver", fix="stop what listens there or set RINGLEADER_API_PORT to a free port"
    )
    if layout.cluster_dir.exists():
        shutil.rmtree(layout.cluster_dir)  # half-created by an interrupted run: start over
    layout.state.mkdir(parents=True, exist_ok=True)
    say(f"creating the control plane (etcd, kube-apiserver :{API_PORT}, controller-manager, scheduler)")
    binaries = {
        f"--{name}-binary": str(layout.binary(name))
        for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd")
    }
    args = [
        kwokctl, "create", "cluster", "--name", CLUSTER_NAME, "--runtime", "binary",
        "--config", str(_kwokctl_config(layout)), "--kube-apiserver-port", str(API_PORT),
        *(x for flag, path in binaries.items() for x in (flag, path)),
        "--kwok-controller-binary", str(layout.binary("kwok")), "--kubeconfig", str(layout.kubeconfig),
        "--kube-authorization", "--kube-admission", "--kube-audit-policy", str(_audit_policy(layout)),
        "--quiet-pull", "--wait", "60s",
    ]  # fmt: skip
    run_command(args, env=env, timeout=180)


def _restart_control_plane(layout: Layout, kwokctl: str, env: dict[str, str]) -> None:
    say("starting the stopped components of the existing control plane")
    # A component still shutting down counts as started for kwokctl, which then waits for it: bound that.
    try:
        run_command([kwokctl, "start", "cluster", "--name", CLUSTER_NAME], env=env, timeout=60)
    except ClusterError as e:
        raise ClusterError(f"{e}; run 'make dev-cluster-down' and start again") from e
    try:
        wait_until("the API server to be ready", lambda: api_ready(layout), READY_TIMEOUT, every=0.5)
    except WaitTimeout as e:
        raise ClusterError(f"{e}; see {layout.cluster_dir / 'logs'}") from None


def scale_fake_nodes(layout: Layout, count: int) -> None:
    """kwok fake nodes. Their pods get addresses from FAKE_POD_NETWORK, which is blackholed on this machine:
    nothing runs behind them, and traffic to them (a metrics scrape, say) must never leave the host."""
    say(f"scaling kwok fake nodes to {count}")
    run_command(["ip", "route", "replace", "blackhole", FAKE_POD_NETWORK], timeout=15)
    first_cidr = FAKE_POD_NETWORK.replace("/16", "/24")
    run_command(
        [
            str(layout.binary("kwokctl")),
            "scale",
            "node",
            "--name",
            CLUSTER_NAME,
            "--replicas",
            str(count),
            "--param",
            f'.podCIDR="{first_cidr}"',
        ],
        env=kwok_env(layout),
        timeout=300,
    )
    if count:
        # Opt-in only: a pod lands on a node that runs nothing only if it tolerates this taint.
        kubectl(
            layout, "taint", "nodes", "-l", "type=kwok", f"{FAKE_NODE_TAINT}:NoSchedule", "--overwrite", timeout=120
        )


def components(layout: Layout) -> dict[str, int]:
    """The PID of each of etcd, the API server, controller-manager, scheduler and kwok, by component name, from
    kwokctl's pid files (a file that holds no number is left out)."""
    pids = {}
    for f in sorted((layout.cluster_dir / "pids").glob("*.pid")):
        with contextlib.suppress(ValueError):
            pids[f.stem] = int(f.read_text().strip())
    return pids


def component_pids(layout: Layout) -> list[int]:
    """PIDs of etcd, the API server, controller-manager, scheduler and kwok from kwokctl's pid files."""
    return list(components(layout).values())


def restart_component(component: str, down_seconds: float = 0.0) -> None:
    """Crash one control-plane component (SIGKILL), leave it down for `down_seconds`, start it again and
    return once the API server answers: what clients of the cluster see when it fails over."""
    t0 = time.monotonic()
    stop_component(component)
    time.sleep(down_seconds)
    start_control_plane(Layout.from_env())
    say(f"{component} running again", t0)


def stop_component(component: str) -> None:
    """SIGKILL one control-plane component and wait until it is gone; `make dev-cluster` (or
    `restart_component`) starts it again."""
    if component not in CONTROL_PLANE:
        raise ClusterError(f"unknown control-plane component {component!r}: one of {', '.join(CONTROL_PLANE)}")
    layout = Layout.from_env()
    pid = pid_from(layout.cluster_dir / "pids" / f"{component}.pid")
    if pid is None:
        raise ClusterError(f"{component} does not run: start the dev cluster first ('make dev-cluster')")
    os.kill(pid, signal.SIGKILL)
    wait_gone(pid, 10)
    say(f"{component} killed")


SCHEDULER_BUDGET_FLAGS = ("--kube-api-qps=", "--kube-api-burst=")
# Under benchmark load a component's own lease renewal can time out: binding a 5,000-pod gang at QPS 1000 on 2
# cores, kube-scheduler's renewal GET waited over 5 s, and kube-controller-manager's did the same while it
# tracked those pods. Either then loses leadership and exits, and nothing restarts it until the dev cluster
# does. For a benchmark they hold a long lease (60 s, renewed within 40 s); otherwise Kubernetes' own 15 s /
# 10 s, which the failover tests rely on.
LONG_LEASE_FLAGS = ("--leader-elect-lease-duration=60s", "--leader-elect-renew-deadline=40s")
_LEASE_PREFIXES = tuple(f.split("=")[0] + "=" for f in LONG_LEASE_FLAGS)


def scheduler_argv(argv: Sequence[str], qps: int | None, burst: int | None) -> list[str]:
    """kube-scheduler's command line `argv` with its client budget set to `qps`/`burst` (None: no flag, the
    scheduler's own default of QPS 50, burst 100), and with a raised budget the long lease of LONG_LEASE_FLAGS.
    The flags are deprecated but honoured while the scheduler runs without --config, as kwokctl starts it here."""
    kept = [a for a in argv if not a.startswith((*SCHEDULER_BUDGET_FLAGS, *_LEASE_PREFIXES))]
    budget = [*([f"--kube-api-qps={qps}"] if qps else []), *([f"--kube-api-burst={burst}"] if burst else [])]
    return [*kept, *budget, *(LONG_LEASE_FLAGS if budget else ())]


def controller_manager_argv(argv: Sequence[str], long_lease: bool) -> list[str]:
    """kube-controller-manager's command line `argv` with the long lease of LONG_LEASE_FLAGS, or without it
    (Kubernetes' default lease); every other flag (the node monitoring the failover tests rely on) is kept."""
    kept = [a for a in argv if not a.startswith(_LEASE_PREFIXES)]
    return [*kept, *(LONG_LEASE_FLAGS if long_lease else ())]


def _leader(layout: Layout, component: str) -> str:
    """The holder of `component`'s leader lease in kube-system ("" when it has none)."""
    got = kubectl(
        layout, "get", "lease", "-n", "kube-system", component, "-o", "jsonpath={.spec.holderIdentity}",
        check=False,
    )  # fmt: skip
    return got.stdout.strip() if got.returncode == 0 else ""


def _rerun(layout: Layout, component: str, command: Callable[[list[str]], list[str]]) -> bool:
    """Restart `component` (kube-scheduler or kube-controller-manager) with `command(its command line)` when that
    differs from what runs, and return once the new process leads; whether it restarted. The replacement takes
    over kwokctl's pid file and log, so deleting the cluster stops it; restarting the control plane starts
    kwokctl's own command line."""
    pidfile = layout.cluster_dir / "pids" / f"{component}.pid"
    pid = pid_from(pidfile)
    if pid is None:
        raise ClusterError(f"{component} does not run: start the dev cluster first ('make dev-cluster')")
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    want = command(argv)
    if want == argv:
        return False
    cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
    before = _leader(layout, component)
    # SIGTERM: kube-scheduler gives its lease up (ReleaseOnCancel), so the next one leads at once; a new
    # controller-manager may wait out the old one's lease (15 s by default).
    stop_pid(pid, timeout=20)
    log = layout.cluster_dir / "logs" / f"{component}.log"
    new = spawn(want, pidfile, log, cwd=cwd)
    wait_ready(component, lambda: _leader(layout, component) not in ("", before), new, log, READY_TIMEOUT, ClusterError)
    return True


def set_scheduler_budget(layout: Layout, qps: int | None, burst: int | None) -> None:
    """Run kube-scheduler with the client budget `qps`/`burst` (None: its defaults), restarting it when it runs
    with another; return once the new one leads (schedules)."""
    t0 = time.monotonic()
    if _rerun(layout, "kube-scheduler", lambda argv: scheduler_argv(argv, qps, burst)):
        budget = f"QPS {qps}, burst {burst}" if qps else "its default budget"
        say(f"kube-scheduler restarted with {budget}", t0)


def set_controller_manager_lease(layout: Layout, long_lease: bool) -> None:
    """Run kube-controller-manager with the long lease of LONG_LEASE_FLAGS (for a benchmark) or with Kubernetes'
    default, restarting it when it runs with the other; return once the new one leads."""
    t0 = time.monotonic()
    if _rerun(layout, "kube-controller-manager", lambda argv: controller_manager_argv(argv, long_lease)):
        say(f"kube-controller-manager restarted with {'a 60 s' if long_lease else 'its default'} lease", t0)


def delete_control_plane(layout: Layout) -> None:
    """Delete the control plane and wait until its components are gone (their ports free)."""
    if not (layout.binary("kwokctl").exists() and layout.cluster_dir.exists()):
        return
    say("deleting the control plane")
    pids = component_pids(layout)
    run_command(
        [str(layout.binary("kwokctl")), "delete", "cluster", "--name", CLUSTER_NAME],
        env=kwok_env(layout),
        timeout=120,
        check=False,
    )
    # kwokctl signals the components and returns; wait until they are really gone (ports free).
    for pid in pids:
        stop_pid(pid, timeout=20)
