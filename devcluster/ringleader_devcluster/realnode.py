"""The real node: a kubelet built from the Go module proxy, on Debian's containerd, runc and CNI bridge plugin,
registered with the dev cluster as `real-node`. Pods there run in containers from images, with cgroups,
limits, `kubectl logs` and `kubectl exec`, as on any cluster.

Everything it runs and writes is the dev cluster's own: containerd's state and socket, the kubelet's root,
certificates and pod logs, the CNI configuration and IP leases live under `.dev/realnode/`; containerd's root
(its images, kept for the next dev cluster) in the cache; its cgroups under
`/ringleader-real-node` in every hierarchy; its pods on the bridge `rl-cni0` (198.18.250.0/24). The node is
tainted `ringleader.dev/real-node:NoSchedule`, so only pods that tolerate the taint land there. `stop` removes
all of it, also after a kill -9 of the kubelet or containerd (see `stop`), and puts back what the bridge plugin
changed on the host (`net.ipv4.ip_forward`).

Host facts this relies on (checked here; docs/devcluster.md): cgroup v1 with the cgroupfs driver; root without
CAP_SYS_RESOURCE (containerd's `restrict_oom_score_adj`, the kubelet's `--oom-score-adj=0`); the kubelet needs
a node IP that is not loopback.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from . import images, registry, servicenet
from .certs import client_certificate
from .layout import Layout, read_versions
from .pids import pid_from, spawn, stop_pidfile, wait_ready
from .tools import RealNodeError, remove_empty_dirs, run

__all__ = ["RealNodeError"]  # raised by everything here (defined with the tool runner)

NODE_NAME = "real-node"
TAINT = "ringleader.dev/real-node"
LABEL = "ringleader.dev/real-node"  # "true" on the real node, as ringleader.dev/process-node on the process node
KUBELET_PORT = 10350  # the process node's kubelet endpoint has 10250
POD_CIDR = "198.18.250.0/24"
BRIDGE = "rl-cni0"
CNI_NETWORK = "ringleader-real-node"
CGROUP_ROOT = "ringleader-real-node"
CGROUP_FS = Path("/sys/fs/cgroup")
CNI_BIN = Path("/usr/lib/cni")
PAUSE_IMAGE = "localhost/ringleader/pause:dev"
# A small image with a shell and the usual tools (Debian's static busybox), for tests of the node itself.
BUSYBOX_IMAGE = "localhost/ringleader/busybox:dev"
BUSYBOX = Path("/bin/busybox")
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
READY_TIMEOUT = 60.0
# Written outside .dev/ by the kubelet, containerd and the CNI plugins at fixed paths; removed by `stop`.
KUBELET_SOCKET = Path("/var/lib/kubelet/device-plugins/kubelet.sock")
CONTAINER_LOG_LINKS = Path("/var/log/containers")
CNI_RESULTS = Path("/var/lib/cni/results")
CONTAINERD_RUN_DIRS = (Path("/run/containerd/s"), Path("/run/containerd/fifo"))
EMPTY_PARENTS = (
    KUBELET_SOCKET.parent, KUBELET_SOCKET.parent.parent, CNI_RESULTS, CNI_RESULTS.parent, Path("/run/containerd")
)  # fmt: skip


@dataclass(frozen=True)
class Paths:
    """Where the real node keeps its state: all of it under `<state>/realnode`."""

    root: Path
    binaries: Path
    coredns: Path
    # containerd's content store and snapshots: images pulled once stay for the next dev cluster, as the Go
    # and registry caches do (what a pod ran in is removed with the pod at teardown; only images remain)
    image_store: Path

    @classmethod
    def of(cls, layout: Layout) -> Paths:
        binaries = layout.cache / f"realnode-{read_versions()['KUBE_VERSION']}"
        return cls(layout.state / "realnode", binaries, layout.binary("coredns"), layout.cache / "containerd")

    def binary(self, name: str) -> Path:
        return self.binaries / name

    @property
    def containerd_config(self) -> Path:
        return self.root / "containerd" / "config.toml"

    @property
    def socket(self) -> Path:
        return self.root / "run" / "containerd.sock"

    @property
    def kubelet_dir(self) -> Path:
        return self.root / "kubelet"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_ipam_dir(self) -> Path:
        return self.root / "cni" / "ipam"

    @property
    def servicenet(self) -> servicenet.Files:
        return servicenet.Files(self.root / "servicenet")

    def pidfile(self, program: str) -> Path:
        return self.root / f"{program}.pid"

    def log(self, program: str) -> Path:
        return self.root / f"{program}.log"


def node_ip() -> str:
    """This machine's address on its default route: the kubelet refuses loopback, and the API server reaches the
    kubelet's endpoint there."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("203.0.113.1", 9))  # TEST-NET-3; no packet is sent: this only picks the source address
            address = s.getsockname()[0]
        except OSError as e:
            raise RealNodeError(f"no default route to take the real node's IP from ({e}): add one") from e
    if ipaddress.ip_address(address).is_loopback:
        raise RealNodeError("this machine has only a loopback address; the kubelet needs another one")
    return str(address)


def containerd_config(paths: Paths) -> str:
    """containerd 1.6's configuration (version 2) with its root, state and socket under `paths`."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{paths.image_store}"
state = "{paths.root / "run" / "containerd"}"
[grpc]
  address = "{paths.socket}"
[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  # root here lacks CAP_SYS_RESOURCE: without this every sandbox fails ("can't get final child's PID from pipe")
  restrict_oom_score_adj = true
  disable_apparmor = true
  # pods' network namespaces under the state folder, not /var/run/netns
  netns_mounts_under_state_dir = true
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{paths.root / "run" / "runc"}"
  [{cri}.cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{paths.cni_conf_dir}"
  # images named {registry.MIRRORED_HOST}/... come from the dev cluster's registry
  [{cri}.registry.mirrors."{registry.MIRRORED_HOST}"]
    endpoint = ["http://{registry.ADDRESS}"]
"""


def cni_config(paths: Paths) -> dict[str, object]:
    """A bridge network with host-local leases kept under `paths` (no masquerade: pods talk to this machine)."""
    return {
        "cniVersion": "1.0.0",
        "name": CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(paths.cni_ipam_dir),
                    "ranges": [[{"subnet": POD_CIDR}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
            {"type": "loopback"},
        ],
    }


def kubelet_config(paths: Paths, address: str, ca: Path) -> dict[str, object]:
    """The KubeletConfiguration: cgroupfs on cgroup v1, its own port, root-free paths, x509 + webhook auth."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": address,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzPort": 0,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{CGROUP_ROOT}",
        "failCgroupV1": False,
        "failSwapOn": False,
        "makeIPTablesUtilChains": False,
        "podLogsDir": str(paths.kubelet_dir / "pod-logs"),
        "containerRuntimeEndpoint": f"unix://{paths.socket}",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {"mode": "Webhook"},
        "registerWithTaints": [{"key": TAINT, "effect": "NoSchedule"}],
        "clusterDomain": servicenet.CLUSTER_DOMAIN,
        "clusterDNS": [servicenet.DNS_SERVICE_IP],
        "serializeImagePulls": False,
        "imageGCHighThresholdPercent": 100,  # images are imported, never pulled: the kubelet must not delete them
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
    }


def kubeconfig(server: str, ca: Path, cert: Path, key: Path) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "dev", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": "node", "user": {"client-certificate": str(cert), "client-key": str(key)}}],
        "contexts": [{"name": "node", "context": {"cluster": "dev", "user": "node"}}],
        "current-context": "node",
    }


def preflight(paths: Paths) -> None:
    """What the host must offer, each missing piece named with its fix."""
    for program, package in (("containerd", "containerd"), ("runc", "runc"), ("buildah", "buildah")):
        if shutil.which(program) is None:
            raise RealNodeError(f"'{program}' is missing: apt-get install {package} (make dev-cluster installs it)")
    if shutil.which("iptables-save") is None:
        raise RealNodeError("'iptables' is missing (kube-proxy needs it): apt-get install iptables")
    if not (CNI_BIN / "bridge").exists():
        raise RealNodeError(f"no CNI bridge plugin in {CNI_BIN}: apt-get install containernetworking-plugins")
    if "overlay" not in Path("/proc/filesystems").read_text():
        raise RealNodeError("the kernel offers no overlay filesystem (containerd's snapshotter): modprobe overlay")
    if not (CGROUP_FS / "memory").is_dir():
        raise RealNodeError(f"no cgroup v1 memory hierarchy under {CGROUP_FS}: the real node is set up for cgroup v1")
    for binary in [*(paths.binary(p) for p in ("kubelet", "kube-proxy", "cri-sweep", "pause")), paths.coredns]:
        if not binary.exists():
            raise RealNodeError(f"{binary} is missing: run devcluster/build-binaries.sh")


def _cgroup_dirs() -> list[Path]:
    return [h / CGROUP_ROOT for h in sorted(CGROUP_FS.iterdir()) if h.is_dir() and (h / "cgroup.procs").exists()]


def create_cgroups() -> None:
    """The kubelet's cgroupRoot in every v1 hierarchy; cpuset's needs its parent's CPUs and memory nodes first."""
    for d in _cgroup_dirs():
        d.mkdir(exist_ok=True)
        if d.parent.name == "cpuset":
            for f in ("cpuset.cpus", "cpuset.mems"):
                (d / f).write_text((d.parent / f).read_text())


def _ctr(paths: Paths, *args: str, timeout: float = 300) -> str:
    return run(["ctr", "--address", str(paths.socket), "--namespace", "k8s.io", *args], f"ctr {args[0]}", timeout)


def pause_archive(layout: Layout, paths: Paths) -> Path:
    return images.scratch_archive(
        layout,
        PAUSE_IMAGE,
        [
            ["copy", images.WORKING, str(paths.binary("pause")), "/pause"],
            ["config", "--entrypoint", '["/pause"]', "--user", "65535", images.WORKING],
        ],
    )


def busybox_archive(layout: Layout) -> Path:
    if not BUSYBOX.exists():
        raise RealNodeError(f"{BUSYBOX} is missing: apt-get install busybox-static (make dev-cluster installs it)")
    return images.scratch_archive(
        layout,
        BUSYBOX_IMAGE,
        [
            ["copy", images.WORKING, str(BUSYBOX), str(BUSYBOX)],
            # host network: no CNI set-up for a step that needs none (buildah would write /etc/cni otherwise)
            [
                "run",
                "--isolation",
                "chroot",
                "--network",
                "host",
                images.WORKING,
                "--",
                str(BUSYBOX),
                "--install",
                "-s",
                "/bin",
            ],
            ["config", "--cmd", '["/bin/sh"]', images.WORKING],
        ],
    )


def import_image(paths: Paths, archive: Path) -> None:
    _ctr(paths, "images", "import", "--no-unpack", str(archive))


def _spawn(paths: Paths, program: str, argv: list[str]) -> int:
    return spawn(argv, paths.pidfile(program), paths.log(program))


def _start_containerd(paths: Paths) -> None:
    pid = _spawn(paths, "containerd", ["containerd", "--config", str(paths.containerd_config)])
    wait_ready("containerd", paths.socket.exists, pid, paths.log("containerd"), 30)


def start(layout: Layout, server: str) -> None:
    """Start the image registry, CoreDNS, containerd, the kubelet and kube-proxy (each once; a running one is left
    alone) and return once the kubelet is started and kube-proxy's rules are in place; the caller waits for the
    node to be Ready (`processnode.wait_nodes_ready` with the kubelet's pid file)."""
    paths = Paths.of(layout)
    preflight(paths)
    registry.start(layout)
    address, pki = node_ip(), layout.pki
    servicenet.start_dns(
        paths.servicenet, coredns=paths.coredns, kubectl=layout.binary("kubectl"), admin_kubeconfig=layout.kubeconfig,
        pki=pki, kubeconfig=_kubeconfig_for(server, pki), address=address,
    )  # fmt: skip
    if not pid_from(paths.pidfile("kubelet")):
        _start_kubelet(layout, paths, server, address)
    servicenet.start_proxy(
        paths.servicenet, kube_proxy=paths.binary("kube-proxy"), pki=pki, kubeconfig=_kubeconfig_for(server, pki),
        node_name=NODE_NAME, address=address, node_registered=lambda: _node_registered(layout),
    )  # fmt: skip


def _kubeconfig_for(server: str, pki: Path) -> servicenet.KubeconfigFor:
    return lambda cert, key: kubeconfig(server, pki / "ca.crt", cert, key)


def _node_registered(layout: Layout) -> bool:
    argv = [str(layout.binary("kubectl")), "--kubeconfig", str(layout.kubeconfig), "--request-timeout=5s",
            "get", "node", NODE_NAME, "-o", "name"]  # fmt: skip
    return subprocess.run(argv, capture_output=True, timeout=15, check=False).returncode == 0


def _start_kubelet(layout: Layout, paths: Paths, server: str, address: str) -> None:
    for d in (paths.containerd_config.parent, paths.socket.parent, paths.cni_conf_dir, paths.kubelet_dir):
        d.mkdir(parents=True, exist_ok=True)
    paths.containerd_config.write_text(containerd_config(paths))
    (paths.cni_conf_dir / "10-ringleader.conflist").write_text(json.dumps(cni_config(paths), indent=2))
    record = paths.root / "ip_forward.before"
    if not record.exists():  # the bridge plugin (isGateway) turns forwarding on; stop puts the old value back
        record.write_text(IP_FORWARD.read_text())
    create_cgroups()
    if not pid_from(paths.pidfile("containerd")):
        _start_containerd(paths)
    import_image(paths, pause_archive(layout, paths))
    pki = layout.pki
    # The Node authorizer and NodeRestriction treat the kubelet as the node it is by this user and group.
    cert, key = client_certificate(paths.kubelet_dir / "pki", "node", f"system:node:{NODE_NAME}", "system:nodes", pki)
    config = paths.kubelet_dir / "config.yaml"
    config.write_text(json.dumps(kubelet_config(paths, address, pki / "ca.crt"), indent=2))
    node_kubeconfig = paths.kubelet_dir / "kubeconfig"
    node_kubeconfig.write_text(json.dumps(kubeconfig(server, pki / "ca.crt", cert, key), indent=2))
    _spawn(
        paths,
        "kubelet",
        [
            str(paths.binary("kubelet")),
            "--config", str(config),
            "--kubeconfig", str(node_kubeconfig),
            "--hostname-override", NODE_NAME,
            "--node-ip", address,
            "--root-dir", str(paths.kubelet_dir / "root"),
            "--cert-dir", str(paths.kubelet_dir / "pki"),
            "--oom-score-adj=0",  # root here may not lower an oom_score_adj
            "--node-labels", f"{LABEL}=true",
        ],
    )  # fmt: skip


def _mounts_under(prefix: Path) -> list[Path]:
    """Mount points at or below `prefix`, deepest first."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = Path(line.split()[4].encode().decode("unicode_escape"))
        if point == prefix or prefix in point.parents:
            points.append(point)
    return sorted(set(points), key=lambda p: len(p.parts), reverse=True)


def _stop(paths: Paths, program: str, timeout: float) -> None:
    stop_pidfile(paths.pidfile(program), timeout)


def stop(layout: Layout) -> None:
    """Stop the real node and remove everything it made, in the order that leaves nothing behind: the kubelet
    first (it would restart pods), then every pod sandbox through containerd's CRI (so the CNI plugins release
    the veth, the lease and the network namespace; containerd is started again for this if it was killed), then
    containerd and the container shims, then mounts, the bridge, cgroups and the fixed host paths."""
    paths = Paths.of(layout)
    if not paths.root.exists():
        return
    _stop(paths, "kubelet", 20)
    servicenet.stop(paths.servicenet, paths.binary("kube-proxy"))
    registry.stop(layout)
    if paths.containerd_config.exists() and paths.binary("cri-sweep").exists():
        if not pid_from(paths.pidfile("containerd")):
            with contextlib.suppress(RealNodeError, OSError):
                paths.socket.unlink(missing_ok=True)
                _start_containerd(paths)
        _sweep_sandboxes(paths)
    _stop(paths, "containerd", 20)
    _kill_shims(paths)
    _kill_cgroup_members()  # whatever the sweep could not stop (containerd would not start, say)
    for point in [*_mounts_under(paths.root), *_mounts_under(paths.image_store)]:
        subprocess.run(["umount", "--lazy", str(point)], capture_output=True, check=False, timeout=30)
    subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True, check=False, timeout=30)
    record = paths.root / "ip_forward.before"
    if record.exists():
        IP_FORWARD.write_text(record.read_text())
    for d in _cgroup_dirs():
        if d.exists():
            subs = sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
            remove_empty_dirs([*subs, d])
    _remove_host_paths(paths)
    shutil.rmtree(paths.root, ignore_errors=True)


def _sweep_sandboxes(paths: Paths, timeout: float = 30) -> None:
    """Stop and remove every pod sandbox through the CRI, retried while containerd's CRI service is starting
    (its socket exists before the service answers)."""
    deadline = time.monotonic() + timeout
    while paths.socket.exists() and time.monotonic() < deadline:
        res = subprocess.run(
            [str(paths.binary("cri-sweep")), f"unix://{paths.socket}"], capture_output=True, timeout=90, check=False
        )
        if res.returncode == 0:
            return
        time.sleep(0.5)


def _kill_cgroup_members() -> None:
    """SIGKILL every process left in the node's cgroups (pods' processes whose shim and sandbox are gone)."""
    for hierarchy in _cgroup_dirs():
        for procs in hierarchy.rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                for pid in procs.read_text().split():
                    os.kill(int(pid), 9)


def _pids_with(*markers: bytes) -> list[int]:
    """Processes whose command line contains every one of `markers`."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                cmdline = (proc / "cmdline").read_bytes()
                if all(m in cmdline for m in markers):
                    pids.append(int(proc.name))
    return pids


def _kill_shims(paths: Paths) -> None:
    """containerd's shims outlive it by design; ours (their -address is our socket) go with the node."""
    for pid in _pids_with(b"containerd-shim", str(paths.socket).encode()):
        with contextlib.suppress(OSError):
            os.kill(pid, 9)


def _remove_host_paths(paths: Paths) -> None:
    """What the kubelet, containerd and the CNI plugins write at fixed paths outside .dev/ for this node only."""
    KUBELET_SOCKET.unlink(missing_ok=True)
    if CONTAINER_LOG_LINKS.is_dir():
        for link in CONTAINER_LOG_LINKS.iterdir():
            if link.is_symlink() and str(paths.root) in os.readlink(link):
                link.unlink()
    if CNI_RESULTS.is_dir():
        for result in CNI_RESULTS.glob(f"{CNI_NETWORK}-*"):
            result.unlink(missing_ok=True)
    # Folders those paths live in, removed only when empty: another runtime on this machine may use them.
    listening = {
        line.split()[-1] for line in Path("/proc/net/unix").read_text().splitlines()[1:] if len(line.split()) > 7
    }
    shim_sockets = CONTAINERD_RUN_DIRS[0]
    if shim_sockets.is_dir():
        for sock in shim_sockets.iterdir():  # a shim's socket outlives a killed shim; nobody listens there
            if str(sock) not in listening and not sock.is_dir():
                sock.unlink(missing_ok=True)
    remove_empty_dirs((*CONTAINERD_RUN_DIRS, *EMPTY_PARENTS))


def leftovers(layout: Layout) -> list[str]:
    """What of the real node is still on this machine (empty after `stop`): processes, mounts, the bridge,
    cgroups, fixed host paths. The teardown test uses it to prove that `stop` leaves nothing."""
    paths = Paths.of(layout)
    found = [f"process {pid}" for d in (paths.root, registry.state_dir(layout)) for pid in _pids_with(str(d).encode())]
    found += [f"mount {p}" for p in (*_mounts_under(paths.root), *_mounts_under(paths.image_store))]
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        found.append(f"bridge {BRIDGE}")
    found += [f"cgroup {d}" for d in _cgroup_dirs() if d.exists()]
    found += servicenet.iptables_leftovers()
    if KUBELET_SOCKET.exists():
        found.append(str(KUBELET_SOCKET))
    if CNI_RESULTS.is_dir():
        found += [str(p) for p in CNI_RESULTS.glob(f"{CNI_NETWORK}-*")]
    return found
