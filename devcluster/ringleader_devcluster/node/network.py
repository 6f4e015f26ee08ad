"""Pod networking for the process node: one Linux bridge, one network namespace and veth pair per pod.

Every pod gets its own IP on the bridge, so two pods can both listen on port 29500 exactly as on a real
cluster. Addresses come from 198.18.0.0/15, the range RFC 2544 sets aside for benchmarking networks, so they
never clash with a LAN. The bridge is not connected to any uplink: pods reach each other and the host directly,
and any other address through the host (their default route). The process nodes' network is the lower half of
198.18.0.0/16, so the real node's pods (realnode.POD_CIDR, in the upper half, on a bridge of their own) are
off-link for a process-node pod and reached through the host, which routes between the two bridges as a CNI
routes between nodes: one pod network (servicenet.POD_CIDRS), every pod reaching every other.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import shutil
import signal
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

NETNS_PREFIX = "rl-"
NETNS_RUN_DIR = Path("/var/run/netns")
NETNS_ETC_DIR = Path("/etc/netns")  # `ip netns exec` bind-mounts files from here over /etc
COMMAND_TIMEOUT = 15.0
POD_NETWORK = ipaddress.IPv4Network("198.18.0.0/17")


class NetworkError(Exception):
    """A network command failed; the message carries the command and what it printed."""


async def run_ip(*args: str, stdin: str | None = None) -> str:
    """Run one `ip` command (or a `-batch -` of them); raise NetworkError on failure or timeout."""
    proc = await asyncio.create_subprocess_exec(
        "ip",
        *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(
            proc.communicate(stdin.encode() if stdin is not None else None), COMMAND_TIMEOUT
        )
    except TimeoutError as e:
        proc.kill()
        raise NetworkError(f"ip {' '.join(args)}: no answer within {COMMAND_TIMEOUT:.0f}s") from e
    if proc.returncode != 0:
        detail = err.decode().strip() or out.decode().strip()
        raise NetworkError(f"ip {' '.join(args)}{' (batch)' if stdin else ''}: {detail}")
    return out.decode()


@dataclass
class IPPool:
    """Addresses of one node's pod CIDR; .0, .1 and the broadcast address are never handed out.

    Addresses are handed out in turn, wrapping around, like the host-local IPAM plugin: a released
    address comes back only after every other one. Handing it straight to the next pod would let that pod
    share it with the namespace just deleted, which the kernel tears down some time later, and let
    neighbours keep the old interface's MAC in their ARP caches: the new pod's connections would be reset
    or time out for tens of seconds (seen when a replaced rank got its predecessor's address)."""

    cidr: ipaddress.IPv4Network
    used: set[ipaddress.IPv4Address] = field(default_factory=set)
    last: ipaddress.IPv4Address | None = None

    def allocate(self) -> str:
        hosts = [ip for ip in self.cidr.hosts() if int(ip) - int(self.cidr.network_address) >= 2]
        start = hosts.index(self.last) + 1 if self.last in hosts else 0
        for ip in hosts[start:] + hosts[:start]:
            if ip not in self.used:
                self.used.add(ip)
                self.last = ip
                return str(ip)
        raise NetworkError(f"pod CIDR {self.cidr} is exhausted")

    def release(self, ip: str) -> None:
        self.used.discard(ipaddress.IPv4Address(ip))


@dataclass(frozen=True)
class Bridge:
    name: str = "rl0"
    network: ipaddress.IPv4Network = POD_NETWORK

    @property
    def gateway(self) -> str:
        """The host's address on the bridge: node InternalIP, kubelet endpoint and API relay."""
        return str(self.network.network_address + 1)

    def node_cidr(self, index: int) -> ipaddress.IPv4Network:
        """Pod CIDR of node `index`: 198.18.<index+1>.0/24."""
        return list(self.network.subnets(new_prefix=24))[index + 1]

    async def ensure(self) -> None:
        """Create the bridge with the gateway address if missing; idempotent."""
        existing = await run_ip("-o", "link", "show")
        if f" {self.name}:" not in existing:
            await run_ip("link", "add", self.name, "type", "bridge")
        addrs = await run_ip("-o", "-4", "addr", "show", "dev", self.name)
        if f"{self.gateway}/" not in addrs:
            await run_ip("addr", "add", f"{self.gateway}/{self.network.prefixlen}", "dev", self.name)
        await run_ip("link", "set", self.name, "up")

    async def remove(self) -> None:
        with contextlib.suppress(NetworkError):
            await run_ip("link", "del", self.name)


def netns_name(pod_uid: str) -> str:
    return NETNS_PREFIX + pod_uid.replace("-", "")[:12]


async def create_sandbox(bridge: Bridge, netns: str, ip: str, hosts: str, resolv: str) -> None:
    """Network namespace `netns` with eth0 at `ip` on the bridge, default route via the gateway, and the
    pod's hosts and resolv.conf in /etc/netns/<netns>/ for `ip netns exec` to bind over /etc."""
    etc = NETNS_ETC_DIR / netns
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "hosts").write_text(hosts)
    (etc / "resolv.conf").write_text(resolv)
    host_veth = "rlv" + netns[len(NETNS_PREFIX) :][:11]
    await run_ip(
        "-batch",
        "-",
        stdin=(
            f"netns add {netns}\n"
            f"link add {host_veth} type veth peer name eth0 netns {netns}\n"
            f"link set {host_veth} master {bridge.name} up\n"
        ),
    )
    await run_ip(
        "-n",
        netns,
        "-batch",
        "-",
        stdin=(
            "link set lo up\n"
            f"addr add {ip}/{bridge.network.prefixlen} dev eth0\n"
            "link set eth0 up\n"
            f"route add default via {bridge.gateway}\n"
        ),
    )


def write_hosts(netns: str, hosts: str) -> bool:
    """Refresh a pod's hosts file in place (the bind mount pins the inode, so a rename would not show).
    Returns whether it changed."""
    path = NETNS_ETC_DIR / netns / "hosts"
    try:
        if path.read_text() == hosts:
            return False
        with path.open("r+") as f:
            f.write(hosts)
            f.truncate()
        return True
    except FileNotFoundError:
        return False


async def netns_pids(netns: str) -> list[int]:
    try:
        out = await run_ip("netns", "pids", netns)
    except NetworkError:
        return []
    return [int(p) for p in out.split()]


async def delete_sandbox(netns: str) -> None:
    """Kill whatever still runs in the namespace, then delete it (the veth pair goes with it)."""
    for pid in await netns_pids(netns):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    try:
        await run_ip("netns", "del", netns)
    except NetworkError as e:
        if "No such file" not in str(e):
            log.warning("deleting %s: %s", netns, e)
    shutil.rmtree(NETNS_ETC_DIR / netns, ignore_errors=True)


async def sweep_sandboxes(pods_dir: Path | None = None) -> int:
    """Delete the namespaces of the pods recorded under `pods_dir` (left by a crash or a previous run of
    this agent), or, without it, every namespace any process node created. Another agent serving other
    nodes on the same bridge keeps its pods' namespaces."""
    if pods_dir is not None:
        names = [netns_name(d.name.rsplit("_", 1)[-1]) for d in pods_dir.iterdir()] if pods_dir.exists() else []
    else:
        names = [p.name for p in NETNS_RUN_DIR.glob(NETNS_PREFIX + "*")] if NETNS_RUN_DIR.exists() else []
        names += [p.name for p in NETNS_ETC_DIR.glob(NETNS_PREFIX + "*")] if NETNS_ETC_DIR.exists() else []
    present = {n for n in names if (NETNS_RUN_DIR / n).exists() or (NETNS_ETC_DIR / n).exists()}
    for name in sorted(present):
        await delete_sandbox(name)
    return len(present)
