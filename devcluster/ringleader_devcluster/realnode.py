"""The real node: a kubelet built from the Go module proxy, on Debian's containerd, runc and CNI bridge plugin,
registered with the dev cluster as `real-node`. Pods there run in containers from images, with cgroups,
limits, `kubectl logs` and `kubectl exec`, as on any cluster.

Everything it runs and writes is the dev cluster's own: containerd's state and socket, the kubelet's root,
certificates and pod logs, the CNI configuration and IP leases live under `.dev/realnode/`; containerd's root
(its images, kept for the next dev cluster) in the cache; its cgroups under
`/ringleader-real-node` in every hierarchy; its pods on the bridge `rl-cni0` (198.18.250.0/24). The node is
tainted `ringleader.dev/real-node:NoSchedule`, so only pods that tolerate the taint land there.
`realnode_teardown.stop` removes all of it, also after a kill -9 of the kubelet or containerd, and puts back what
the bridge plugin changed on the host (`net.ipv4.ip_forward`).

Host facts this relies on (checked here; docs/devcluster.md): cgroup v1 with the cgroupfs driver; root without
CAP_SYS_RESOURCE (containerd's `restrict_oom_score_adj`, the kubelet's `--oom-score-adj=0`); the kubelet needs
a node IP that is not loopback.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from . import images, netpol, registry, servicenet
from .certs import client_certificate
from .layout import Layout, read_versions
from .pids import pid_from, spawn, wait_ready
from .tools import RealNodeError, run

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
# Written outside .dev/ by the kubelet, containerd and the CNI plugins at fixed paths (realnode_teardown removes them).
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


def cgroup_dirs() -> list[Path]:
    return [h / CGROUP_ROOT for h in sorted(CGROUP_FS.iterdir()) if h.is_dir() and (h / "cgroup.procs").exists()]


def create_cgroups() -> None:
    """The kubelet's cgroupRoot in every v1 hierarchy; cpuset's needs its parent's CPUs and memory nodes first."""
    for d in cgroup_dirs():
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


def start_containerd(paths: Paths) -> None:
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


def start_network_policy(layout: Layout, server: str) -> None:
    """NetworkPolicy enforced for this node's pods (netpol.py: kube-router's policy controller), once."""
    netpol.start(layout, binary=layout.binary("kube-router"), kubectl=layout.binary("kubectl"), pki=layout.pki,
                 kubeconfig=_kubeconfig_for(server, layout.pki), node_name=NODE_NAME)  # fmt: skip


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
    # On now, not at the first pod's sandbox: the host routes between this node's pods and the process node's
    # (node/network.py), and a process-node pod may talk to a real-node pod's address before that.
    IP_FORWARD.write_text("1\n")
    create_cgroups()
    if not pid_from(paths.pidfile("containerd")):
        start_containerd(paths)
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
