"""Start and stop the dev cluster: the control plane (controlplane.py), the process node (processnode.py) and the
real node (realnode.py); the operator from this checkout is in operatorprocess.py.

`up` is idempotent: a running cluster is left alone, a stopped one is started, a missing one created.
`down` stops every process either of them started and removes the state directory, so the next `up`
starts clean. Every failure ends in one line saying what is wrong and what to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time

from . import kueue, realnode, realnode_teardown, registry
from .commands import ClusterError, api_ready, build_binaries, kubectl, preflight, say
from .controlplane import API_PORT, FAKE_POD_NETWORK, delete_control_plane, scale_fake_nodes, start_control_plane
from .layout import Layout
from .node.network import Bridge, NetworkError, run_ip, sweep_sandboxes
from .node.runtime import kill_leftovers
from .operatorprocess import operator_down
from .pids import pid_from, stop_pid
from .processnode import node_names, node_pid, start_node, wait_nodes_ready

__all__ = ["ClusterError", "down", "status", "up"]


def real_node_wanted() -> bool:
    return os.environ.get("RINGLEADER_REAL_NODE", "1") != "0"


def start_network_policy(layout: Layout) -> None:
    """NetworkPolicy enforced on the real node (netpol.py), which must run; once."""
    if not pid_from(realnode.Paths.of(layout).pidfile("kubelet")):
        raise ClusterError("NetworkPolicy is enforced on the real node, which does not run (RINGLEADER_REAL_NODE=0?)")
    try:
        realnode.start_network_policy(layout, f"https://127.0.0.1:{API_PORT}")
    except realnode.RealNodeError as e:
        raise ClusterError(f"network policy: {e}") from e


def start_real_node(layout: Layout) -> None:
    """The real node beside the process node; its failures become ClusterError with the same one line."""
    try:
        realnode.start(layout, f"https://127.0.0.1:{API_PORT}")
    except realnode.RealNodeError as e:
        raise ClusterError(f"real node: {e}") from e


def up(
    fake_nodes: int | None, gpus: int, nodes: int, build: bool = True, real_node: bool | None = None,
    kueue: bool = False, netpol: bool = False,
) -> None:  # fmt: skip
    """Start what is not running yet: the control plane, the process node(s) and, unless `real_node` is False
    (default: RINGLEADER_REAL_NODE, on unless "0"), the real node; return once every node is Ready. With `build`,
    what is missing is built first (Kueue's manager too with `kueue`: the caller starts it; kube-router with
    `netpol`, started here once the real node is Ready)."""
    if real_node is None:
        real_node = real_node_wanted()
    t0 = time.monotonic()
    layout = Layout.from_env()
    if build:
        build_binaries(kueue=kueue, netpol=netpol)
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
        if netpol:
            start_network_policy(layout)
            say("NetworkPolicy enforced on the real node (kube-router)", t0)
    if fake_nodes is not None:
        scale_fake_nodes(layout, fake_nodes)
    say(f"ready: export KUBECONFIG={layout.kubeconfig}", t0)


async def _sweep_network() -> None:
    await sweep_sandboxes()
    await Bridge().remove()
    with contextlib.suppress(NetworkError):
        await run_ip("route", "del", "blackhole", FAKE_POD_NETWORK)


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
        realnode_teardown.stop(layout)
        if left := realnode_teardown.leftovers(layout):
            say(f"the real node left behind: {', '.join(left)}")
    kueue.stop(layout)
    registry.stop(layout)  # also when the real node's start failed before its folder existed
    delete_control_plane(layout)
    shutil.rmtree(layout.state, ignore_errors=True)
    say("down", t0)


def status() -> int:
    layout = Layout.from_env()
    api = api_ready(layout)
    node = node_pid(layout)
    print(f"control plane: {'running' if api else 'not running'}")
    print(f"process node:  {f'running (pid {node})' if node else 'not running'}")
    kubelet = pid_from(realnode.Paths.of(layout).pidfile("kubelet"))
    print(f"real node:     {f'running (kubelet pid {kubelet})' if kubelet else 'not running'}")
    manager = pid_from(kueue.pidfile(layout))
    print(f"kueue:         {f'running (pid {manager})' if manager else 'not running'}")
    if api:
        print(kubectl(layout, "get", "nodes", check=False).stdout, end="")
        print(f"KUBECONFIG={layout.kubeconfig}")
    return 0 if api and node else 1
