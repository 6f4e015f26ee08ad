"""Start and stop the dev cluster: etcd, kube-apiserver, kube-controller-manager and kube-scheduler through
kwokctl's binary runtime (with our own builds, fully offline), plus the process node agent.

`up` is idempotent: a running cluster is left alone, a stopped one is started, a missing one created.
`down` stops every process either of them started and removes the state directory, so the next `up`
starts clean. Every failure ends in one line saying what is wrong and what to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import realnode, registry, servicenet
from .layout import CLUSTER_NAME, DEVCLUSTER_DIR, PACKAGE_DIR, Layout
from .node.network import Bridge, NetworkError, run_ip, sweep_sandboxes
from .node.runtime import kill_leftovers
from .pids import is_running, pid_from, spawn, stop_pid, stop_pidfile, wait_gone, wait_ready
from .waiting import WaitTimeout, wait_until

API_PORT = int(os.environ.get("RINGLEADER_API_PORT", "16443"))
KUBELET_PORT = 10250
NODE_NAME = "process-node"
FAKE_NODE_TAINT = "kwok.x-k8s.io/node=fake"
FAKE_POD_NETWORK = "198.19.0.0/16"  # the other half of RFC 2544's benchmarking range
READY_TIMEOUT = 90.0
# The API server audits only the requests of service accounts in this namespace: the control-plane benchmark
# runs each operator it compares under one of them and counts its requests in the audit log.
AUDITED_NAMESPACE = "bench-operators"


class ClusterError(Exception):
    """One line for the user: what is wrong and what to do."""


def say(msg: str, t0: float | None = None, prefix: str = "dev-cluster") -> None:
    suffix = f" ({time.monotonic() - t0:.1f}s)" if t0 is not None else ""
    print(f"[{prefix}] {msg}{suffix}", flush=True)


def _run(
    argv: list[str], *, env: dict[str, str] | None = None, timeout: float = 300, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run a command with a deadline; output is captured through a file, not a pipe, because components
    that kwokctl starts inherit its stdout and would keep a pipe open (and us waiting) forever."""
    try:
        with tempfile.TemporaryFile("w+") as out:
            proc = subprocess.run(
                argv, env=env, timeout=timeout, text=True, stdin=subprocess.DEVNULL, stdout=out, stderr=out, check=False
            )
            out.seek(0)
            res = subprocess.CompletedProcess(argv, proc.returncode, out.read(), "")
    except subprocess.TimeoutExpired as e:
        raise ClusterError(f"{Path(argv[0]).name} {' '.join(argv[1:3])} did not finish within {timeout:.0f}s") from e
    except FileNotFoundError as e:
        raise ClusterError(f"{argv[0]} not found: run 'make dev-cluster' to build it") from e
    if check and res.returncode != 0:
        detail = ((res.stderr or "") + (res.stdout or "")).strip().splitlines()
        last = detail[-1] if detail else f"exit code {res.returncode}"
        raise ClusterError(f"{Path(argv[0]).name} {' '.join(argv[1:3])} failed: {last}")
    return res


def preflight(layout: Layout) -> None:
    if os.geteuid() != 0:
        raise ClusterError(
            "the process node needs root (network namespaces, bind mounts): run as root, e.g. sudo make dev-cluster"
        )
    for tool, pkg in (("ip", "iproute2"), ("unshare", "util-linux"), ("setpriv", "util-linux"), ("mount", "mount")):
        if shutil.which(tool) is None:
            raise ClusterError(f"'{tool}' is missing: install it (apt-get install {pkg}) and run again")
    missing = [
        n
        for n in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kwokctl", "kubectl")
        if not layout.binary(n).exists()
    ]
    if missing:
        raise ClusterError(
            f"binaries missing from {layout.cache}: {', '.join(missing)}; run devcluster/build-binaries.sh"
        )


def build_binaries() -> None:
    res = subprocess.run(["bash", str(DEVCLUSTER_DIR / "build-binaries.sh")], check=False)
    if res.returncode != 0:
        raise ClusterError("building the control-plane binaries failed (see the lines above)")


def _kwok_env(layout: Layout) -> dict[str, str]:
    return {**os.environ, "KWOK_WORKDIR": str(layout.kwok_workdir)}


def kubectl(layout: Layout, *args: str, timeout: float = 30, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _run(
        [str(layout.binary("kubectl")), "--kubeconfig", str(layout.kubeconfig), "--request-timeout=10s", *args],
        timeout=timeout,
        check=check,
    )


def helm(layout: Layout, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the cached helm against the dev cluster."""
    return _run(
        [str(layout.binary("helm")), "--kubeconfig", str(layout.kubeconfig), *args], timeout=timeout, check=check
    )


def api_ready(layout: Layout) -> bool:
    if not layout.kubeconfig.exists():
        return False
    return kubectl(layout, "get", "--raw", "/readyz", timeout=15, check=False).returncode == 0


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


PORT_GRACE_SECONDS = 10.0  # a server stopped a moment ago may still be closing its socket


def ensure_port_free(port: int, what: str, host: str = "127.0.0.1", fix: str = "stop what listens there") -> None:
    """Return once `port` can be bound (waiting out a server that is still closing it); else ClusterError
    naming the port, what needs it and, where `ss` can tell, the process that holds it."""
    deadline = time.monotonic() + PORT_GRACE_SECONDS
    while not port_free(port, host):
        if time.monotonic() >= deadline:
            holder = subprocess.run(
                ["ss", "-Htlnp", f"sport = :{port}"], capture_output=True, text=True, check=False, timeout=5
            ).stdout.split()
            held = f" (held by {holder[-1]})" if holder else ""
            raise ClusterError(f"port {port} ({what}) is busy{held}: {fix}")
        time.sleep(0.2)


def _kwokctl_config(layout: Layout) -> Path:
    """Options kwokctl has no flag for: loopback-only binding; the bridge address in the API server's
    certificate, so pods reach it through the process node's relay with verified TLS; the controller-manager's
    node monitoring at Kubernetes' defaults (kwokctl slows it down for fake nodes) so a lost process node is
    noticed; and kwok managing only its own fake nodes, never the process node."""
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
            "kubeApiserverCertSANs": [
                bridge.gateway,
                servicenet.KUBERNETES_SERVICE_IP,  # in-cluster clients on the real node connect there
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            "kubectlBinary": str(layout.binary("kubectl")),
        },
        "componentsPatches": [
            {"name": "kwok-controller", "extraArgs": override},
            # The real node's kubelet authenticates the API server by its client certificate and is reached at
            # its InternalIP (its Hostname address is not resolvable here). The API server listens on every
            # address (TLS, authenticated; the rest of the control plane stays on loopback) because the
            # `kubernetes` Service's endpoint is this machine's address, where kube-proxy sends pods of the
            # real node; its service range is written out because servicenet.py relies on it.
            {
                "name": "kube-apiserver",
                "extraArgs": [
                    {"key": "bind-address", "value": "0.0.0.0", "override": True},
                    {"key": "service-cluster-ip-range", "value": servicenet.SERVICE_CIDR},
                    {"key": "kubelet-client-certificate", "value": str(layout.pki / "admin.crt")},
                    {"key": "kubelet-client-key", "value": str(layout.pki / "admin.key")},
                    {"key": "kubelet-preferred-address-types", "value": "InternalIP,Hostname"},
                ],
            },
            # kwokctl's own options for these are overridden by its defaults for fake nodes (25 s, 3m20s).
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
    env = _kwok_env(layout)
    pids = _component_pids(layout)
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
    _run(args, env=env, timeout=180)


def _restart_control_plane(layout: Layout, kwokctl: str, env: dict[str, str]) -> None:
    say("starting the stopped components of the existing control plane")
    # A component still shutting down counts as started for kwokctl, which then waits for it: bound that.
    try:
        _run([kwokctl, "start", "cluster", "--name", CLUSTER_NAME], env=env, timeout=60)
    except ClusterError as e:
        raise ClusterError(f"{e}; run 'make dev-cluster-down' and start again") from e
    try:
        wait_until("the API server to be ready", lambda: api_ready(layout), READY_TIMEOUT, every=0.5)
    except WaitTimeout as e:
        raise ClusterError(f"{e}; see {layout.cluster_dir / 'logs'}") from None


def node_pid(layout: Layout) -> int | None:
    return pid_from(layout.node_pidfile)


def _spawn_agent(
    layout: Layout, state_dir: Path, name: str, nodes: int, gpus: int, kubelet_port: int, *extra: str
) -> int:
    """Start a process node agent with its state (pods, agent.log, agent.pid) in `state_dir`; its pid."""
    ensure_port_free(kubelet_port, "process node kubelet endpoint", "0.0.0.0")
    state_dir.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "ringleader_devcluster.node",
        "--kubeconfig",
        str(layout.kubeconfig),
        "--state-dir",
        str(state_dir),
        "--name",
        name,
        "--nodes",
        str(nodes),
        "--gpus",
        str(gpus),
        "--kubelet-port",
        str(kubelet_port),
        "--tls-cert",
        str(layout.pki / "admin.crt"),
        "--tls-key",
        str(layout.pki / "admin.key"),
        "--backoff-base",
        os.environ.get("RINGLEADER_BACKOFF_BASE", "10"),
        *extra,
    ]
    return spawn(argv, state_dir / "agent.pid", state_dir / "agent.log")


def start_node(layout: Layout, gpus: int, nodes: int) -> None:
    if node_pid(layout):
        say("process node already running")
        return
    pid = _spawn_agent(layout, layout.node_dir, NODE_NAME, nodes, gpus, KUBELET_PORT)
    say(f"process node started (pid {pid}, log {layout.node_log})")


def add_node(name: str, index: int, gpus: int = 8) -> None:
    """Start one more process node, `name`, in an agent of its own beside the dev cluster's (state under
    .dev/nodes/<name>, pod CIDR 198.18.<index+1>.0/24, kubelet port KUBELET_PORT + index); return once it is
    Ready. `index` must not be taken by the main agent's nodes (it holds 0 .. nodes-1)."""
    layout = Layout.from_env()
    state_dir = layout.extra_nodes_dir / name
    if pid_from(state_dir / "agent.pid"):
        raise ClusterError(f"node {name} already runs")
    t0 = time.monotonic()
    _spawn_agent(layout, state_dir, name, 1, gpus, KUBELET_PORT + index, "--cidr-index", str(index), "--no-api-relay")
    wait_nodes_ready(layout, [name], t0, pidfile=state_dir / "agent.pid", log=state_dir / "agent.log")
    say(f"node {name} added", t0)


def power_off_node(name: str) -> None:
    """What losing power does to a machine, done to node `name` (added by `add_node`): its agent and every
    process of its pods die at once (SIGKILL), and their network namespaces go. The Node object stays and
    simply stops reporting, as a real one would; the controller-manager's node lifecycle takes over."""
    layout = Layout.from_env()
    state_dir = layout.extra_nodes_dir / name
    pid = pid_from(state_dir / "agent.pid")
    if pid:
        os.kill(pid, signal.SIGKILL)
        wait_gone(pid, 10)
    kill_leftovers(state_dir / "pods")
    asyncio.run(sweep_sandboxes(state_dir / "pods"))


def remove_node(name: str) -> None:
    """Power node `name` off (if it still runs), delete its Node object and its state."""
    layout = Layout.from_env()
    power_off_node(name)
    kubectl(layout, "delete", "node", name, "--ignore-not-found", "--wait=false", check=False)
    shutil.rmtree(layout.extra_nodes_dir / name, ignore_errors=True)


def wait_nodes_ready(
    layout: Layout,
    names: list[str],
    t0: float,
    pidfile: Path | None = None,
    log: Path | None = None,
    agent: str = "the process node",
) -> None:
    """Wait until nodes `names` are Ready; fail at once, naming `agent`, if the process running them (the main
    process node's agent by default) exits."""
    pidfile, log = pidfile or layout.node_pidfile, log or layout.node_log

    def ready() -> bool:
        if pid_from(pidfile) is None:
            tail = log.read_text().strip().splitlines()[-1:] if log.exists() else []
            raise ClusterError(f"{agent} exited: {tail[0] if tail else 'no log'} (log: {log})")
        res = kubectl(layout, "get", "nodes", "-o", "json", check=False)
        if res.returncode != 0:
            return False
        ready = {
            n["metadata"]["name"]
            for n in json.loads(res.stdout)["items"]
            for c in n["status"].get("conditions", [])
            if c["type"] == "Ready" and c["status"] == "True"
        }
        return ready.issuperset(names)

    try:
        wait_until(f"nodes {', '.join(names)} to be Ready", ready, READY_TIMEOUT, every=0.5)
    except WaitTimeout as e:
        raise ClusterError(f"{e} (log: {log})") from None


def scale_fake_nodes(layout: Layout, count: int) -> None:
    """kwok fake nodes. Their pods get addresses from FAKE_POD_NETWORK, which is blackholed on this machine:
    nothing runs behind them, and traffic to them (a metrics scrape, say) must never leave the host."""
    say(f"scaling kwok fake nodes to {count}")
    _run(["ip", "route", "replace", "blackhole", FAKE_POD_NETWORK], timeout=15)
    first_cidr = FAKE_POD_NETWORK.replace("/16", "/24")
    _run(
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
        env=_kwok_env(layout),
        timeout=300,
    )
    if count:
        # Opt-in only: a pod lands on a node that runs nothing only if it tolerates this taint.
        kubectl(
            layout, "taint", "nodes", "-l", "type=kwok", f"{FAKE_NODE_TAINT}:NoSchedule", "--overwrite", timeout=120
        )


def real_node_wanted() -> bool:
    return os.environ.get("RINGLEADER_REAL_NODE", "1") != "0"


def start_real_node(layout: Layout) -> None:
    """The real node beside the process node; its failures become ClusterError with the same one line."""
    try:
        realnode.start(layout, f"https://127.0.0.1:{API_PORT}")
    except realnode.RealNodeError as e:
        raise ClusterError(f"real node: {e}") from e


def node_names(nodes: int) -> list[str]:
    return [NODE_NAME] if nodes == 1 else [f"{NODE_NAME}-{i}" for i in range(nodes)]


def up(fake_nodes: int | None, gpus: int, nodes: int, build: bool = True, real_node: bool | None = None) -> None:
    """Start what is not running yet: the control plane, the process node(s) and, unless `real_node` is False
    (default: RINGLEADER_REAL_NODE, on unless "0"), the real node; return once every node is Ready."""
    if real_node is None:
        real_node = real_node_wanted()
    t0 = time.monotonic()
    layout = Layout.from_env()
    if build:
        build_binaries()
    preflight(layout)
    start_control_plane(layout)
    say("control plane ready", t0)
    start_node(layout, gpus, nodes)
    if real_node:
        start_real_node(layout)
    wait_nodes_ready(layout, node_names(nodes), t0)
    if real_node:
        paths = realnode.Paths.of(layout)
        wait_nodes_ready(
            layout, [realnode.NODE_NAME], t0, paths.pidfile("kubelet"), paths.log("kubelet"), "the kubelet"
        )
        say(f"real node ready (kubelet, containerd; log {paths.log('kubelet')})", t0)
    if fake_nodes is not None:
        scale_fake_nodes(layout, fake_nodes)
    say(f"ready: export KUBECONFIG={layout.kubeconfig}", t0)


async def _sweep_network() -> None:
    await sweep_sandboxes()
    await Bridge().remove()
    with contextlib.suppress(NetworkError):
        await run_ip("route", "del", "blackhole", FAKE_POD_NETWORK)


def _component_pids(layout: Layout) -> list[int]:
    """PIDs of etcd, the API server, controller-manager, scheduler and kwok from kwokctl's pid files."""
    pids = []
    for f in (layout.cluster_dir / "pids").glob("*.pid"):
        with contextlib.suppress(ValueError):
            pids.append(int(f.read_text().strip()))
    return pids


CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


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


def down() -> None:
    t0 = time.monotonic()
    layout = Layout.from_env()
    operator_down()
    pid = node_pid(layout)
    if pid:
        say("stopping the process node and its pods")
        stop_pid(pid, timeout=45)
    for pidfile in layout.extra_nodes_dir.glob("*/agent.pid"):
        if pid := pid_from(pidfile):
            stop_pid(pid, timeout=45)
    # Whatever a crashed agent left behind: sandboxes (and every process inside them) and the bridge.
    for pods in [layout.node_dir / "pods", *layout.extra_nodes_dir.glob("*/pods")]:
        kill_leftovers(pods)
    asyncio.run(_sweep_network())
    if realnode.Paths.of(layout).root.exists():
        say("stopping the real node (kubelet, its pods, containerd, kube-proxy, CoreDNS)")
        realnode.stop(layout)
        if left := realnode.leftovers(layout):
            say(f"the real node left behind: {', '.join(left)}")
    registry.stop(layout)  # also when the real node's start failed before its folder existed
    if layout.binary("kwokctl").exists() and layout.cluster_dir.exists():
        say("deleting the control plane")
        pids = _component_pids(layout)
        _run(
            [str(layout.binary("kwokctl")), "delete", "cluster", "--name", CLUSTER_NAME],
            env=_kwok_env(layout),
            timeout=120,
            check=False,
        )
        # kwokctl signals the components and returns; wait until they are really gone (ports free).
        for pid in pids:
            stop_pid(pid, timeout=20)
    shutil.rmtree(layout.state, ignore_errors=True)
    say("down", t0)


OPERATOR_METRICS_PORT = 18080
CHART_RELEASE, CHART_NAMESPACE = "ringleader", "ringleader-system"  # where `make demo` installs the chart
OPERATOR_HEALTH_PORT = 18081


def operator_up() -> None:
    """Install the CRD and run the operator from this checkout against the dev cluster, in the background
    (log: .dev/operator/operator.log). Idempotent."""
    layout = Layout.from_env()
    if not api_ready(layout):
        raise ClusterError("the dev cluster is not running: run 'make dev-cluster' first")
    crds = DEVCLUSTER_DIR.parent / "crds"
    kubectl(layout, "apply", "-f", str(crds / "trainingjob.yaml"), "-f", str(crds / "kopf-peering.yaml"))
    kubectl(
        layout, "wait", "--for=condition=Established", "crd/trainingjobs.ringleader.dev",
        "crd/clusterkopfpeerings.kopf.dev", "--timeout=30s", timeout=40,
    )  # fmt: skip
    kubectl(layout, "apply", "-f", str(PACKAGE_DIR / "peering.yaml"))
    pidfile = _operator_pidfile(layout)
    if pid_from(pidfile):
        say("operator already running")
        return
    if helm(layout, "status", CHART_RELEASE, "--namespace", CHART_NAMESPACE, check=False).returncode == 0:
        say(f"uninstalling the helm release {CHART_RELEASE} ('make demo'): one operator acts on the jobs at a time")
        helm(layout, "uninstall", CHART_RELEASE, "--namespace", CHART_NAMESPACE, "--wait", timeout=180)
    for port in (OPERATOR_METRICS_PORT, OPERATOR_HEALTH_PORT):
        ensure_port_free(port, "operator metrics/health", "0.0.0.0")
    layout.operator_dir.mkdir(parents=True, exist_ok=True)
    log = layout.operator_dir / "operator.log"
    argv = [
        sys.executable,
        "-m",
        "ringleader_operator",
        "--metrics-port",
        str(OPERATOR_METRICS_PORT),
        "--health-port",
        str(OPERATOR_HEALTH_PORT),
    ]
    env = {**os.environ, "KUBECONFIG": str(layout.kubeconfig)}
    pid = spawn(argv, pidfile, log, env)
    wait_ready("the operator", lambda: _listening(OPERATOR_HEALTH_PORT), pid, log, 30, ClusterError)
    say(f"operator running (pid {pid}, log {log})")


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def operator_down() -> None:
    if stop_pidfile(_operator_pidfile(Layout.from_env()), timeout=20):
        say("operator stopped")


def _operator_pidfile(layout: Layout) -> Path:
    return layout.operator_dir / "operator.pid"


def operator_pid() -> int | None:
    """The dev cluster's operator process, if it runs."""
    return pid_from(_operator_pidfile(Layout.from_env()))


def kill_operator(pid: int) -> None:
    """SIGKILL the operator (no clean shutdown, as a crash would be) and wait until it is gone."""
    os.kill(pid, signal.SIGKILL)
    wait_gone(pid, timeout=10)
    _operator_pidfile(Layout.from_env()).unlink(missing_ok=True)


def status() -> int:
    layout = Layout.from_env()
    api = api_ready(layout)
    node = node_pid(layout)
    print(f"control plane: {'running' if api else 'not running'}")
    print(f"process node:  {f'running (pid {node})' if node else 'not running'}")
    kubelet = pid_from(realnode.Paths.of(layout).pidfile("kubelet"))
    print(f"real node:     {f'running (kubelet pid {kubelet})' if kubelet else 'not running'}")
    if api:
        print(kubectl(layout, "get", "nodes", check=False).stdout, end="")
        print(f"KUBECONFIG={layout.kubeconfig}")
    return 0 if api and node else 1
