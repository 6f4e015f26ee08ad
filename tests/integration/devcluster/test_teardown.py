"""Start/stop contract of the dev cluster. Runs last in this folder: it takes the cluster down and brings a
fresh one back up, so later users of the session's clients would hold stale credentials."""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from pathlib import Path

import pytest
from kubernetes import client, config
from ringleader_devcluster import cluster, processnode, realnode, realnode_teardown, servicenet
from ringleader_devcluster.layout import Layout
from ringleader_devcluster.node.network import NETNS_PREFIX

from tests.support.cluster import busybox_pod, gone, python_pod, wait_for, wait_phase

pytestmark = pytest.mark.lifecycle


def _cmdlines() -> dict[int, bytes]:
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                out[int(entry)] = Path(f"/proc/{entry}/cmdline").read_bytes()
    return out


def _apiserver_pid(layout: Layout) -> int:
    return int((layout.cluster_dir / "pids" / "kube-apiserver.pid").read_text())


def test_agent_crash_fails_never_pods_and_restarts_the_others(
    core: client.CoreV1Api, namespace: str, layout: Layout, kubeconfig: Path
) -> None:
    script = "import time\ntime.sleep(600)"
    core.create_namespaced_pod(namespace, python_pod("never", script))
    core.create_namespaced_pod(namespace, python_pod("always", script, restart_policy="Always"))
    core.create_namespaced_pod(namespace, python_pod("done", "print('finished')"))
    for name in ("never", "always"):
        wait_phase(core, namespace, name, {"Running"})
    wait_phase(core, namespace, "done", {"Succeeded"})
    agent = processnode.node_pid(layout)
    assert agent is not None
    os.kill(agent, signal.SIGKILL)
    cluster.up(fake_nodes=None, gpus=8, nodes=1, build=False)  # starts a new agent, like a rebooted node
    pod = wait_phase(core, namespace, "never", {"Failed"})
    assert pod.status.reason == "NodeRestarted"

    def restarted() -> bool:
        st = core.read_namespaced_pod("always", namespace).status
        return bool(
            st.phase == "Running" and st.container_statuses[0].restart_count == 1 and st.container_statuses[0].ready
        )

    wait_for("the Always pod to run again with restartCount 1", restarted)
    # A pod that finished under the old agent keeps its final status and is removed when deleted.
    assert core.read_namespaced_pod("done", namespace).status.phase == "Succeeded"
    core.delete_namespaced_pod("done", namespace)
    wait_for("finished pod removed", lambda: gone(lambda: core.read_namespaced_pod("done", namespace)), timeout=20)


def test_up_twice_is_a_no_op(layout: Layout, kubeconfig: Path) -> None:
    before = (_apiserver_pid(layout), processnode.node_pid(layout))
    cluster.up(fake_nodes=None, gpus=8, nodes=1, build=False)
    assert (_apiserver_pid(layout), processnode.node_pid(layout)) == before


def test_no_process_outlives_down_and_up_starts_clean(
    core: client.CoreV1Api, namespace: str, layout: Layout, kubeconfig: Path
) -> None:
    marker = f"outlive-{uuid.uuid4().hex}"
    script = f"import time  # {marker}\ntime.sleep(600)"
    core.create_namespaced_pod(namespace, python_pod("long", script))
    core.create_namespaced_pod(namespace, python_pod("long-host", script, hostNetwork=True))
    realnode.import_image(realnode.Paths.of(layout), realnode.busybox_archive(layout))
    # The shell stays (it has more to do after sleep), so the marker shows in its command line.
    core.create_namespaced_pod(namespace, busybox_pod("boxed", f"sleep 600; echo {marker}"))
    for name in ("long", "long-host", "boxed"):
        wait_phase(core, namespace, name, {"Running"})
    state = str(layout.state).encode()
    # Running is reported once the sandbox launcher runs; the marker shows once it has exec'd the script.
    wait_for("all three pod processes", lambda: sum(marker.encode() in c for c in _cmdlines().values()) == 3)
    assert any(state in c for c in _cmdlines().values())  # etcd, apiserver ... run from the state directory

    # The harsh case: the node agent, the kubelet, containerd and kube-proxy (its iptables rules in place) die
    # without cleaning up, then the cluster is taken down.
    agent = processnode.node_pid(layout)
    assert agent is not None
    os.kill(agent, signal.SIGKILL)
    paths = realnode.Paths.of(layout)
    for program in ("kubelet", "containerd"):
        os.kill(int(paths.pidfile(program).read_text()), signal.SIGKILL)
    assert servicenet.iptables_leftovers()
    os.kill(int(paths.servicenet.pidfile("kube-proxy").read_text()), signal.SIGKILL)
    assert any(marker.encode() in c for c in _cmdlines().values())
    cluster.down()

    left = {pid: c for pid, c in _cmdlines().items() if marker.encode() in c or state in c}
    assert not left, f"processes outlived down: {left}"
    assert not layout.state.exists()
    assert (
        not [n for n in os.listdir("/var/run/netns") if n.startswith(NETNS_PREFIX)]
        if os.path.isdir("/var/run/netns")
        else True
    )
    assert not Path("/sys/class/net/rl0").exists()
    assert realnode_teardown.leftovers(layout) == []

    cluster.up(fake_nodes=None, gpus=8, nodes=1, build=False)
    fresh = client.CoreV1Api(config.new_client_from_config(config_file=str(layout.kubeconfig)))
    for node in ("process-node", realnode.NODE_NAME):
        ready = {c.type: c.status for c in fresh.read_node(node).status.conditions}
        assert ready["Ready"] == "True"
    assert [p.metadata.name for p in fresh.list_pod_for_all_namespaces().items] == []
