"""The process node agent: registers Node objects, keeps them Ready, runs the pods bound to them.

One agent serves one or more nodes (all on one bridge, each with its own pod CIDR and GPU pool). It is
level-based like a kubelet: every (re)list of pods reconciles the workers it has with the pods that exist,
so a missed watch event heals at the next relist.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from kubernetes_asyncio import client, config, watch

from .hostsfile import Endpoint, endpoints_from_slice
from .kubeletapi import ApiRelay, LogSource, serve_kubelet_api
from .network import Bridge, IPPool, sweep_sandboxes
from .nodeapi import LIST_TIMEOUT, NodeApi, NodeApiError
from .nodestatus import micro_time, node_status, utcnow
from .podworker import GPUPool, NodeContext, PodWorker, remove_stale_pod_dirs
from .runtime import kill_leftovers, log_path

log = logging.getLogger("ringleader.node")

LEASE_SECONDS = 40
HEARTBEAT_EVERY = 10.0
STATUS_EVERY = 30.0
WATCH_SECONDS = 240
RELAY_PORT = 443
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class Agent:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.state = Path(args.state_dir)
        self.bridge = Bridge(name=args.bridge)
        self.workers: dict[str, PodWorker] = {}
        self.slices: dict[str, list[Endpoint]] = {}
        self.nodes: dict[str, NodeContext] = {}
        self.started = utcnow()
        self.stop = asyncio.Event()
        self.hosts_dirty = asyncio.Event()

    def endpoints(self) -> list[Endpoint]:
        return [e for eps in self.slices.values() for e in eps]

    # ---- setup ------------------------------------------------------------------------------------------
    async def setup(self) -> None:
        await config.load_kube_config(config_file=self.args.kubeconfig)
        self.api = NodeApi.of(client.ApiClient())
        swept = kill_leftovers(self.state / "pods")
        swept += await sweep_sandboxes(self.state / "pods")
        if swept:
            log.info("removed %d containers and pod sandboxes left from an earlier run", swept)
        await self.bridge.ensure()
        api = urlparse(str(self.api.api_client.configuration.host))
        self.relay: ApiRelay | None = None
        if self.args.api_relay:  # one per bridge: a second agent's pods use the first one's
            self.relay = ApiRelay(self.bridge.gateway, RELAY_PORT, str(api.hostname or "127.0.0.1"), api.port or 443)
            await self.relay.start()
        base_env = {
            "PATH": f"{Path(sys.executable).parent}:{DEFAULT_PATH}",
            "HOME": "/root",
            # The project's Python environment: the venv's interpreter plus the checkout's packages.
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
            "KUBERNETES_SERVICE_HOST": self.bridge.gateway,
            "KUBERNETES_SERVICE_PORT": str(RELAY_PORT),
            "KUBERNETES_SERVICE_PORT_HTTPS": str(RELAY_PORT),
            "KUBERNETES_PORT": f"tcp://{self.bridge.gateway}:{RELAY_PORT}",
        }
        for i in range(self.args.nodes):
            name = self.args.name if self.args.nodes == 1 else f"{self.args.name}-{i}"
            self.nodes[name] = NodeContext(
                name=name,
                api=self.api,
                bridge=self.bridge,
                pool=IPPool(self.bridge.node_cidr(self.args.cidr_index + i)),
                gpus=GPUPool(self.args.gpus),
                pods_dir=self.state / "pods",
                volumes_dir=self.state / "volumes",
                base_env=base_env,
                endpoints=self.endpoints,
                backoff_base=self.args.backoff_base,
                backoff_cap=self.args.backoff_cap,
            )
            await self.register(name, self.args.cidr_index + i)
        self.kubelet = await serve_kubelet_api(
            self.resolve_log,
            self.bridge.gateway,
            self.args.kubelet_port,
            Path(self.args.tls_cert),
            Path(self.args.tls_key),
        )

    def _status(self) -> dict[str, Any]:
        return node_status(
            cpu=self.args.cpu,
            memory=self.args.memory,
            pods=self.args.max_pods,
            gpus=self.args.gpus,
            address=self.bridge.gateway,
            port=self.args.kubelet_port,
            now=utcnow(),
            since=self.started,
        )

    async def register(self, name: str, index: int) -> None:
        cidr = str(self.bridge.node_cidr(index))
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": self._status()["nodeInfo"]["architecture"],
                    "ringleader.dev/process-node": "true",
                },
            },
            "spec": {"podCIDR": cidr, "podCIDRs": [cidr]},
        }
        if await self.api.register_node(body):
            log.info("registered node %s (pod CIDR %s, %d GPUs)", name, cidr, self.args.gpus)
        await self.api.patch_node_status(name, self._status())

    # ---- heartbeats -------------------------------------------------------------------------------------
    async def heartbeat(self, name: str) -> None:
        last_status = 0.0
        loop = asyncio.get_running_loop()
        while not self.stop.is_set():
            try:
                renewed = micro_time(utcnow())
                await self.api.renew_lease(
                    name, {"holderIdentity": name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": renewed}
                )
                if loop.time() - last_status >= STATUS_EVERY:
                    await self.api.patch_node_status(name, self._status())
                    last_status = loop.time()
            except NodeApiError as e:
                log.warning("heartbeat for %s failed: %s", name, e)
            await self._sleep(HEARTBEAT_EVERY)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), seconds)

    # ---- watches ----------------------------------------------------------------------------------------
    async def list_watch(
        self,
        what: str,
        list_fn: Callable[..., Awaitable[Any]],
        on_sync: Callable[[list[dict[str, Any]]], None],
        on_event: Callable[[str, dict[str, Any]], None],
        **kwargs: Any,
    ) -> None:
        """List, hand the full set to on_sync, then watch from that resourceVersion; relist on any error."""
        while not self.stop.is_set():
            try:
                listed = await list_fn(_request_timeout=LIST_TIMEOUT, **kwargs)
                items = [self.api.plain(o) for o in listed.items]
                on_sync(items)
                w = watch.Watch()
                async with w.stream(
                    list_fn,
                    resource_version=listed.metadata.resource_version,
                    timeout_seconds=WATCH_SECONDS,
                    _request_timeout=WATCH_SECONDS + 30,
                    allow_watch_bookmarks=True,
                    **kwargs,
                ) as stream:
                    async for event in stream:
                        kind = event["type"]
                        if kind == "ERROR":
                            break
                        if kind == "BOOKMARK":
                            continue
                        on_event(kind, self.api.plain(event["object"]))
            except asyncio.CancelledError:
                raise
            except Exception as e:  # any failure: back off briefly and relist (level-based)
                log.warning("%s watch interrupted (%s); relisting", what, e)
                await self._sleep(1.0)

    def pods_synced(self, node: str, pods: list[dict[str, Any]]) -> None:
        seen = set()
        for pod in pods:
            seen.add(pod["metadata"]["uid"])
            self.pod_event(node, "MODIFIED", pod)
        for uid, w in list(self.workers.items()):
            if w.node.name == node and uid not in seen:
                w.vanished()

    def pod_event(self, node: str, kind: str, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        worker = self.workers.get(uid)
        if kind == "DELETED":
            if worker:
                worker.vanished()
            return
        if worker is not None:
            worker.update(pod)
            return
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp"):
            return  # finished before this agent started; nothing to run
        worker = PodWorker(self.nodes[node], pod)
        self.workers[uid] = worker
        worker.task.add_done_callback(functools.partial(self._forget, uid))
        if pod["metadata"].get("deletionTimestamp"):
            worker.update(pod)

    def _forget(self, uid: str, _task: asyncio.Task[None]) -> None:
        self.workers.pop(uid, None)

    def slices_synced(self, slices: list[dict[str, Any]]) -> None:
        self.slices = {s["metadata"]["uid"]: endpoints_from_slice(s) for s in slices}
        self.hosts_dirty.set()

    def slice_event(self, kind: str, obj: dict[str, Any]) -> None:
        uid = obj["metadata"]["uid"]
        if kind == "DELETED":
            self.slices.pop(uid, None)
        else:
            self.slices[uid] = endpoints_from_slice(obj)
        self.hosts_dirty.set()

    async def refresh_hosts(self) -> None:
        while not self.stop.is_set():
            await self.hosts_dirty.wait()
            self.hosts_dirty.clear()
            for w in list(self.workers.values()):
                w.refresh_hosts()
            await asyncio.sleep(0.05)  # coalesce bursts of endpoint updates

    # ---- kubelet API ------------------------------------------------------------------------------------
    def resolve_log(self, ns: str, pod: str, container: str, previous: bool) -> LogSource | None:
        for w in self.workers.values():
            meta = w.pod["metadata"]
            if meta["namespace"] != ns or meta["name"] != pod:
                continue
            record = w.containers.get(container) or w.init.get(container)
            if record is None:
                return None
            count = record.restart_count
            if previous:
                if count == 0:
                    return None
                return LogSource(log_path(w.container_dir(container), count - 1), lambda: False)
            return LogSource(log_path(w.container_dir(container), count), functools.partial(w.is_running, container))
        return None

    # ---- main -------------------------------------------------------------------------------------------
    async def run(self) -> None:
        await self.setup()
        remove_stale_pod_dirs(self.state / "pods", keep=set())
        tasks = [asyncio.create_task(self.refresh_hosts())]
        for name in self.nodes:
            tasks.append(asyncio.create_task(self.heartbeat(name)))
            tasks.append(
                asyncio.create_task(
                    self.list_watch(
                        f"pods of {name}",
                        self.api.pod_lister(),
                        functools.partial(self.pods_synced, name),
                        functools.partial(self.pod_event, name),
                        field_selector=f"spec.nodeName={name}",
                    )
                )
            )
        tasks.append(
            asyncio.create_task(
                self.list_watch(
                    "endpoint slices",
                    self.api.slice_lister(),
                    self.slices_synced,
                    self.slice_event,
                )
            )
        )
        log.info("process node ready: %s", ", ".join(self.nodes))
        await self.stop.wait()
        log.info("stopping: killing %d pods", len(self.workers))
        for w in list(self.workers.values()):
            w.vanished()
        await asyncio.gather(*(w.task for w in list(self.workers.values())), return_exceptions=True)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await sweep_sandboxes(self.state / "pods")
        if self.relay is not None:
            await self.relay.close()
        await self.kubelet.cleanup()
        await self.api.close()


def dump_tasks() -> None:
    """SIGUSR1: log where every task waits, for diagnosing a stuck pod."""
    for task in asyncio.all_tasks():
        frames = task.get_stack(limit=3)
        where = " <- ".join(f"{f.f_code.co_name}:{f.f_lineno}" for f in reversed(frames))
        log.info("task %s: %s", task.get_name(), where)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="ringleader-process-node", description=__doc__)
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--state-dir", required=True, help="pod directories, logs and PVC-like volumes")
    p.add_argument("--name", default="process-node", help="node name (suffixed -0, -1 ... when --nodes > 1)")
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--cpu", default="16")
    p.add_argument("--memory", default="32Gi")
    p.add_argument("--max-pods", type=int, default=110)
    p.add_argument(
        "--gpus", type=int, default=8, help="fake nvidia.com/gpu per node (indices via CUDA_VISIBLE_DEVICES)"
    )
    p.add_argument("--kubelet-port", type=int, default=10250)
    p.add_argument("--tls-cert", required=True, help="serving certificate of the kubelet endpoint")
    p.add_argument("--tls-key", required=True)
    p.add_argument("--bridge", default="rl0")
    p.add_argument("--cidr-index", type=int, default=0,
                   help="first node's pod CIDR is 198.18.<index+1>.0/24")  # fmt: skip
    p.add_argument("--api-relay", action=argparse.BooleanOptionalAction, default=True,
                   help="relay the API server on the bridge (only the first agent on a bridge does)")  # fmt: skip
    p.add_argument("--backoff-base", type=float, default=10.0, help="CrashLoopBackOff base, seconds (kubelet: 10)")
    p.add_argument("--backoff-cap", type=float, default=300.0, help="CrashLoopBackOff cap, seconds (kubelet: 300)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if os.geteuid() != 0:
        sys.exit("process node: must run as root (it creates network namespaces and bind mounts)")

    async def amain() -> None:
        agent = Agent(args)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, agent.stop.set)
        loop.add_signal_handler(signal.SIGUSR1, dump_tasks)
        await agent.run()

    asyncio.run(amain())


if __name__ == "__main__":
    main()
