"""Table tests of the remaining small helpers: IP pools, GPU pools, log tails, node status, versions, ports."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
from ringleader_devcluster import cluster, commands, controlplane, realnode, servicenet
from ringleader_devcluster.layout import Layout, read_versions
from ringleader_devcluster.node.kubeletapi import tail_bytes
from ringleader_devcluster.node.network import Bridge, IPPool, NetworkError, netns_name
from ringleader_devcluster.node.nodestatus import KUBELET_VERSION, node_status
from ringleader_devcluster.node.pod_prepare import _referenced
from ringleader_devcluster.node.podworker import GPUPool
from ringleader_devcluster.node.shim import hides


def test_ip_pool_skips_network_and_gateway_and_reuses_released_addresses_last() -> None:
    pool = IPPool(ipaddress.IPv4Network("198.18.1.0/29"))  # hands out .2 to .6
    assert [pool.allocate() for _ in range(2)] == ["198.18.1.2", "198.18.1.3"]
    pool.release("198.18.1.2")
    assert pool.allocate() == "198.18.1.4"  # not the address just released
    assert [pool.allocate() for _ in range(3)] == ["198.18.1.5", "198.18.1.6", "198.18.1.2"]  # wraps around
    with pytest.raises(NetworkError, match="exhausted"):
        pool.allocate()
    pool.release("198.18.1.5")
    assert pool.allocate() == "198.18.1.5"


def test_bridge_layout() -> None:
    b = Bridge()
    assert b.gateway == "198.18.0.1"
    assert [str(b.node_cidr(i)) for i in range(2)] == ["198.18.1.0/24", "198.18.2.0/24"]
    assert netns_name("0a1b2c3d-4e5f-6789-abcd-ef0123456789") == "rl-0a1b2c3d4e5f"


def test_one_pod_network_the_real_nodes_pods_off_link_for_the_process_nodes() -> None:
    """Both nodes' pods are in the one cluster pod network kube-proxy knows; the real node's range is outside the
    process nodes' on-link network, so a process-node pod reaches it through the host (its default route)
    instead of asking for it on its own bridge, where no one answers."""
    everything = ipaddress.IPv4Network(servicenet.POD_CIDRS)
    process, real = Bridge().network, ipaddress.IPv4Network(realnode.POD_CIDR)
    assert process.subnet_of(everything) and real.subnet_of(everything)
    assert not process.overlaps(real)
    assert ipaddress.IPv4Network(controlplane.FAKE_POD_NETWORK).overlaps(everything) is False


def test_gpu_pool_hands_out_disjoint_indices_and_refuses_overcommit() -> None:
    gpus = GPUPool(4)
    assert gpus.allocate("a", 3) == [0, 1, 2]
    assert gpus.allocate("b", 2) is None
    assert gpus.allocate("b", 1) == [3]
    assert gpus.allocate("a", 3) == [0, 1, 2]  # idempotent per pod
    gpus.release("a")
    assert (gpus.free, gpus.allocate("c", 2)) == (3, [0, 1])


@pytest.mark.parametrize(
    ("lines", "limit", "want"),
    [
        (None, None, b"a\nb\nc\n"),
        (2, None, b"b\nc\n"),
        (0, None, b""),
        (None, 3, b"a\nb"),
        (2, 3, b"b\nc"),
        (10, None, b"a\nb\nc\n"),
    ],
)
def test_tail_bytes(lines: int | None, limit: int | None, want: bytes) -> None:
    assert tail_bytes(b"a\nb\nc\n", lines, limit) == want


def test_node_status_advertises_gpus_and_only_an_internal_ip() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    st = node_status(cpu="4", memory="8Gi", pods=10, gpus=2, address="198.18.0.1", port=10250, now=now, since=now)
    assert st["capacity"]["nvidia.com/gpu"] == "2" and st["allocatable"] == st["capacity"]
    assert st["addresses"] == [{"type": "InternalIP", "address": "198.18.0.1"}]
    assert {c["type"]: c["status"] for c in st["conditions"]}["Ready"] == "True"
    no_gpu = node_status(cpu="4", memory="8Gi", pods=10, gpus=0, address="a", port=1, now=now, since=now)
    assert "nvidia.com/gpu" not in no_gpu["capacity"]


def test_referenced_config_maps_and_secrets_everywhere_in_a_pod() -> None:
    pod = {
        "spec": {
            "initContainers": [{"name": "i", "envFrom": [{"secretRef": {"name": "s1"}}]}],
            "containers": [
                {
                    "name": "c",
                    "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "c1", "key": "k"}}}],
                    "envFrom": [{"configMapRef": {"name": "c2"}}],
                }
            ],
            "volumes": [
                {"name": "v", "secret": {"secretName": "s2"}},
                {"name": "w", "configMap": {"name": "c3"}},
                {"name": "p", "projected": {"sources": [{"configMap": {"name": "c4"}}, {"secret": {"name": "s3"}}]}},
            ],
        }
    }
    assert _referenced(pod, "configMap") == {"c1", "c2", "c3", "c4"}
    assert _referenced(pod, "secret") == {"s1", "s2", "s3"}


def test_versions_and_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    v = read_versions()
    assert v["KUBE_VERSION"].startswith("v1.36.") and set(v) >= {"ETCD_VERSION", "KWOK_VERSION", "HELM_VERSION"}
    monkeypatch.setenv("RINGLEADER_CACHE", str(tmp_path / "c"))
    monkeypatch.setenv("RINGLEADER_DEV_DIR", str(tmp_path / "s"))
    layout = Layout.from_env()
    assert layout.binary("kubectl") == tmp_path / "c" / f"kubernetes-{v['KUBE_VERSION']}" / "kubectl"
    assert layout.kubeconfig == tmp_path / "s" / "kubeconfig"


def test_wrapper_modules_pin_the_versions_in_versions_env() -> None:
    """build-binaries.sh names cache folders after versions.env; the Go wrapper modules must build those."""
    v = read_versions()
    root = Path(__file__).resolve().parents[3] / "devcluster" / "go"
    kube_mod = (root / "kube" / "go.mod").read_text()
    etcd_mod = (root / "etcd" / "go.mod").read_text()
    assert f"k8s.io/kubernetes {v['KUBE_VERSION']}" in kube_mod
    staging = v["KUBE_VERSION"].replace("v1.", "v0.")
    assert f"k8s.io/client-go => k8s.io/client-go {staging}" in kube_mod
    assert f"go.etcd.io/etcd/server/v3 {v['ETCD_VERSION']}" in etcd_mod
    router_mod = (root / "kube-router" / "go.mod").read_text()
    assert f"github.com/cloudnativelabs/kube-router/v2 {v['KUBE_ROUTER_VERSION']}" in router_mod
    assert KUBELET_VERSION.startswith(f"{v['KUBE_VERSION']}-")  # the process node reports the cluster's version


def test_dev_requirements_pin_the_packages_runtime_dependencies() -> None:
    """The venv installs requirements/dev.txt only; it must carry each package's pinned dependencies."""
    import tomllib

    root = Path(__file__).resolve().parents[3]
    pins = {
        line.split("==")[0].lower(): line.split("==")[1]
        for name in ("dev.txt", "trainer.txt")
        for line in (root / "requirements" / name).read_text().splitlines()
        if "==" in line and not line.startswith("#")
    }
    own = {"ringleader-api": "api"}  # the repository's own packages: on the PYTHONPATH, not in the venv
    for package in ("api", "operator", "cli", "devcluster", "trainer-image"):
        deps = tomllib.loads((root / package / "pyproject.toml").read_text())["project"]["dependencies"]
        for dep in deps:
            name = dep.split("=")[0].split(">")[0].split("<")[0].strip().lower()
            if name in own:
                assert (root / own[name] / "pyproject.toml").is_file(), f"{package} needs {name}, not in the repository"
                continue
            assert name in pins, f"{package} needs {name}, missing from requirements/dev.txt"
            if "==" in dep:
                assert dep.split("==")[1] == pins[name], f"{name} pinned differently in {package}/pyproject.toml"


@pytest.mark.parametrize(
    ("target", "hidden"),
    [("/tmp", True), ("/tmp/ci", True), ("/tmp/ci/operator", True), ("/tmp/other", False), ("/data", False)],
)
def test_a_volume_over_the_projects_environment_is_not_mounted(target: str, hidden: bool) -> None:
    assert hides(Path(target), [Path("/tmp/ci/operator"), Path("/opt/venv")]) is hidden


def test_a_busy_port_is_waited_for_briefly_then_named_with_its_holder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(commands, "PORT_GRACE_SECONDS", 1.0)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    with pytest.raises(cluster.ClusterError, match=rf"port {port} \(kube-apiserver\) is busy \(held by .*python"):
        commands.ensure_port_free(port, "kube-apiserver")
    # A server that closes within the grace period (as one stopped a moment ago does) is waited for.
    threading.Timer(0.3, server.close).start()
    commands.ensure_port_free(port, "kube-apiserver")


LEASE = list(controlplane.LONG_LEASE_FLAGS)


@pytest.mark.parametrize(
    ("argv", "qps", "burst", "want"),
    [
        (["kube-scheduler", "--kubeconfig=k"], 1000, 2000,
         ["kube-scheduler", "--kubeconfig=k", "--kube-api-qps=1000", "--kube-api-burst=2000", *LEASE]),
        # a budget set before is replaced, not repeated
        (["kube-scheduler", "--kube-api-qps=1000", "--kubeconfig=k", "--kube-api-burst=2000", *LEASE], 200, 400,
         ["kube-scheduler", "--kubeconfig=k", "--kube-api-qps=200", "--kube-api-burst=400", *LEASE]),
        # None: back to the scheduler's defaults (its lease too), no flag at all
        (["kube-scheduler", "--kube-api-qps=1000", "--kube-api-burst=2000", *LEASE], None, None, ["kube-scheduler"]),
        (["kube-scheduler"], None, None, ["kube-scheduler"]),
    ],
)  # fmt: skip
def test_scheduler_argv_sets_or_drops_the_client_budget_and_its_long_lease(
    argv: list[str], qps: int | None, burst: int | None, want: list[str]
) -> None:
    assert controlplane.scheduler_argv(argv, qps, burst) == want


KCM = ["kube-controller-manager", "--kubeconfig=k", "--node-monitor-grace-period=40s"]


@pytest.mark.parametrize(
    ("argv", "long_lease", "want"),
    [
        (KCM, True, [*KCM, *LEASE]),
        ([*KCM, *LEASE], True, [*KCM, *LEASE]),  # already long: the same command line, so no restart
        ([*KCM, *LEASE], False, KCM),  # back to Kubernetes' default lease; node monitoring kept
        (KCM, False, KCM),
        # a lease flag of another value (set by hand) is replaced, not repeated
        ([*KCM, "--leader-elect-lease-duration=30s"], True, [*KCM, *LEASE]),
    ],
)
def test_controller_manager_argv_sets_or_drops_the_long_lease_and_keeps_the_rest(
    argv: list[str], long_lease: bool, want: list[str]
) -> None:
    assert controlplane.controller_manager_argv(argv, long_lease) == want


def test_following_a_log_keeps_the_line_written_just_before_the_container_ended(tmp_path: Path) -> None:
    """The container writes its last line and exits at the moment the node asks whether it still runs, and its
    pod is deleted with its log file right after: the line is still sent (a `logs --follow` across a rank's
    restart lost its last line before)."""
    from aiohttp.test_utils import TestClient, TestServer
    from ringleader_devcluster.node.kubeletapi import LogSource, make_app

    log = tmp_path / "0.log"
    log.write_bytes(b"first\n")

    def running() -> bool:
        if log.exists():
            with log.open("ab") as f:
                f.write(b"last words\n")
            log.unlink()
        return False

    async def follow() -> str:
        app = make_app(lambda ns, pod, container, previous: LogSource(log, running))
        async with TestClient(TestServer(app)) as http:
            response = await http.get("/containerLogs/ns/pod/main", params={"follow": "true"})
            return await response.text()

    assert asyncio.run(follow()) == "first\nlast words\n"


def test_a_terminal_capture_is_cut_where_its_style_changes_and_drawn_cell_by_cell(tmp_path: Path) -> None:
    from rich.text import Text
    from ringleader_devcluster import screencap

    line = "\x1b[1mjob\x1b[0m ok \x1b[38;5;197mbar\x1b[0m"
    runs = [(a, b, str(s)) for a, b, s in screencap._runs(Text.from_ansi(line))]
    assert runs == [(0, 3, "bold"), (3, 7, "none"), (7, 10, "color(197)")]
    png = tmp_path / "t.png"
    screencap.render([line, "second line"], png, columns=40)
    width, height = int.from_bytes(png.read_bytes()[16:20], "big"), int.from_bytes(png.read_bytes()[20:24], "big")
    cell = screencap.SIZE * screencap.DPI / 72
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (width, height) == (int(40 * cell * screencap.ADVANCE + 2 * screencap.PAD),
                               int(2 * cell * screencap.LINE + 2 * screencap.PAD))  # fmt: skip


def test_a_failed_containers_message_is_the_end_of_its_log_as_the_kubelet_gives_it() -> None:
    """terminationMessagePolicy FallbackToLogsOnError: the last 80 lines, of which the last 2048 bytes."""
    from ringleader_devcluster.node.podstatus import log_tail_message

    assert log_tail_message(b"") == ""
    assert log_tail_message(b"one\ntwo\nTraceback: boom\n") == "one\ntwo\nTraceback: boom\n"
    many = b"".join(f"line {i}\n".encode() for i in range(100))
    assert log_tail_message(many).splitlines() == [f"line {i}" for i in range(20, 100)]
    long = b"x" * 5000 + b"\nlast\n"
    assert log_tail_message(long) == ("x" * 2042) + "\nlast\n"


def test_the_wheel_folder_is_named_by_the_pins_and_complete_only_once_marked(tmp_path: Path) -> None:
    """A changed pin is another folder; a download cut short (no marker) is never taken for whole."""
    from ringleader_devcluster import wheels

    layout = Layout(cache=tmp_path / "cache", state=tmp_path / "state")
    pins = tmp_path / "trainer.txt"
    pins.write_text("torch==2.15.0\n")
    first = wheels.folder(layout, pins)
    pins.write_text("torch==2.16.0\n")
    second = wheels.folder(layout, pins)
    assert first != second and first.parent == second.parent == layout.cache / "wheels"
    second.mkdir(parents=True)
    assert not wheels.complete(second)
    (second / wheels.COMPLETE).touch()
    assert wheels.complete(second) and wheels.download(layout, pins) == second  # nothing fetched again


def test_kube_router_enforces_policy_alone_for_the_real_node_on_the_clusters_service_range() -> None:
    """Its firewall only (no routes, no service proxy: the CNI bridge and kube-proxy do those), for the real node,
    with the API server's service range, health on loopback only, and its read access granted by name."""
    from ringleader_devcluster import netpol

    args = netpol.argv(Path("/bin/kube-router"), Path("/k.conf"), realnode.NODE_NAME)
    assert {"--run-firewall=true", "--run-router=false", "--run-service-proxy=false", "--run-loadbalancer=false",
            f"--service-cluster-ip-range={servicenet.SERVICE_CIDR}", f"--hostname-override={realnode.NODE_NAME}",
            "--health-addr=127.0.0.1", "--metrics-port=0"} <= set(args)  # fmt: skip
    role, binding = netpol.api_objects()
    granted = {r for rule in role["rules"] for r in rule["resources"]}
    assert {"pods", "namespaces", "nodes", "networkpolicies", "endpointslices"} <= granted
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": netpol.USER}]
