"""The dev cluster's process nodes: the main agent (one or more nodes), extra agents added and powered off by
the node-loss tests, and waiting until nodes are Ready."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

from .commands import READY_TIMEOUT, ClusterError, ensure_port_free, kubectl, say
from .layout import Layout
from .node.network import sweep_sandboxes
from .node.runtime import kill_leftovers
from .pids import pid_from, spawn, wait_gone
from .waiting import WaitTimeout, wait_until

KUBELET_PORT = 10250
NODE_NAME = "process-node"


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


def node_names(nodes: int) -> list[str]:
    return [NODE_NAME] if nodes == 1 else [f"{NODE_NAME}-{i}" for i in range(nodes)]
