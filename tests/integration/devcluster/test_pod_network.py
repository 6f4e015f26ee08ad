"""One pod network: a pod on the real node and a pod on the process node reach each other over TCP, each by the
other's cluster name under one headless Service, as pods on two nodes of any cluster do (Kubernetes requires
every pod to reach every pod; the host routes between the two nodes' bridges)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes import client
from ringleader_devcluster import realnode
from ringleader_devcluster.layout import Layout

from tests.support.cluster import busybox_pod, logs, python_pod, wait_for, wait_phase

from .test_real_node import busybox_image  # noqa: F401  (the fixture: the node-test image on the real node)

PORT = 7000
SERVICE = "net"

# The process-node pod: answers every connection with "process" (HTTP, for busybox's wget), then connects to
# the real-node pod by its name until it answers, and prints the address it resolved and what it got.
PROCESS_SIDE = f"""
import http.server, socket, threading, time
class Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"process\\n")
server = http.server.ThreadingHTTPServer(("0.0.0.0", {PORT}), Page)
threading.Thread(target=server.serve_forever, daemon=True).start()
deadline = time.time() + 120
while time.time() < deadline:
    try:
        address = socket.gethostbyname("real.{SERVICE}")
        with socket.create_connection((address, {PORT}), timeout=3) as s:
            s.settimeout(3)
            got = s.makefile().readline().strip()
        if got:
            print("got", got, "from", address, flush=True)
            break
    except OSError as e:
        print("not yet:", e, flush=True)
    time.sleep(1)
time.sleep(600)
"""

# The real-node pod: answers every connection with "real", and asks the process-node pod for its page by name
# (resolved by cluster DNS through the resolver's search path, as ping does; read with nc: busybox's static wget
# crashes in its resolver).
REAL_SIDE = f"""
(while true; do echo real | nc -l -p {PORT}; done) &
i=0
until ip=$(ping -c1 -W1 proc.{SERVICE} 2>&1 | sed -n 's/^PING [^(]*(\\([0-9.]*\\)).*/\\1/p') && [ -n "$ip" ] \\
    && out=$(printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 "$ip" {PORT} | tail -1) && [ -n "$out" ]; do
  i=$((i+1)); [ $i -gt 120 ] && break; sleep 1
done
echo "got $out from $ip"
sleep 600
"""


def _member(pod: dict[str, Any], hostname: str) -> dict[str, Any]:
    """`pod` as `<hostname>.net`: selected by the headless Service, named under it."""
    pod["metadata"]["labels"] = {"app": SERVICE}
    pod["spec"].update(hostname=hostname, subdomain=SERVICE)
    return pod


def test_a_pod_on_each_node_reaches_the_other_over_tcp_by_its_cluster_name(
    core: client.CoreV1Api, namespace: str, layout: Layout, kubeconfig: Path
) -> None:
    core.create_namespaced_service(
        namespace,
        {"metadata": {"name": SERVICE},
         "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": {"app": SERVICE}}},
    )  # fmt: skip
    core.create_namespaced_pod(namespace, _member(busybox_pod("real", REAL_SIDE), "real"))
    core.create_namespaced_pod(namespace, _member(python_pod("proc", PROCESS_SIDE), "proc"))
    real = wait_phase(core, namespace, "real", {"Running"}, timeout=60)
    proc = wait_phase(core, namespace, "proc", {"Running"}, timeout=60)
    assert real.spec.node_name == realnode.NODE_NAME and proc.spec.node_name != realnode.NODE_NAME

    def got(pod: str) -> str | None:
        return next((line for line in logs(core, namespace, pod).splitlines() if line.startswith("got ")), None)

    # Each side resolved the other's name to the address the API server shows, and read its answer there.
    assert wait_for("the process-node pod to read the real-node pod", lambda: got("proc"), 150) == (
        f"got real from {real.status.pod_ip}"
    ), logs(core, namespace, "proc")
    assert wait_for("the real-node pod to read the process-node pod", lambda: got("real"), 150) == (
        f"got process from {proc.status.pod_ip}"
    ), logs(core, namespace, "real")
