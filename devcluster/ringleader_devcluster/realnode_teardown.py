"""Stopping the real node (realnode.py) so that nothing of it is left on the machine, also after a kill -9 of
the kubelet or containerd, and listing what is left (the teardown test's proof)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from pathlib import Path

from . import netpol, registry, servicenet
from .layout import Layout
from .pids import pid_from, stop_pidfile
from .realnode import (
    BRIDGE,
    CNI_NETWORK,
    CNI_RESULTS,
    CONTAINER_LOG_LINKS,
    CONTAINERD_RUN_DIRS,
    EMPTY_PARENTS,
    IP_FORWARD,
    KUBELET_SOCKET,
    Paths,
    cgroup_dirs,
    start_containerd,
)
from .tools import RealNodeError, remove_empty_dirs


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
    netpol.stop(layout)  # before kube-proxy's cleanup: kube-router would put its chains back
    servicenet.stop(paths.servicenet, paths.binary("kube-proxy"))
    registry.stop(layout)
    if paths.containerd_config.exists() and paths.binary("cri-sweep").exists():
        if not pid_from(paths.pidfile("containerd")):
            with contextlib.suppress(RealNodeError, OSError):
                paths.socket.unlink(missing_ok=True)
                start_containerd(paths)
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
    for d in cgroup_dirs():
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
    for hierarchy in cgroup_dirs():
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
    found += [f"cgroup {d}" for d in cgroup_dirs() if d.exists()]
    found += servicenet.iptables_leftovers()
    found += [f"ipset {name}" for name in netpol.ipset_leftovers()]
    if KUBELET_SOCKET.exists():
        found.append(str(KUBELET_SOCKET))
    if CNI_RESULTS.is_dir():
        found += [str(p) for p in CNI_RESULTS.glob(f"{CNI_NETWORK}-*")]
    return found
