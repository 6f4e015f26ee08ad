"""One pod's life on the process node, from the scheduler's bind to the object's removal.

prepare (config refs, IP, GPUs, sandbox, volumes) -> init containers one by one -> regular containers
supervised under restartPolicy with CrashLoopBackOff -> terminal phase (resources released) -> on deletion:
SIGTERM, grace period, SIGKILL, sandbox removed, object deleted with grace 0 as the kubelet does.
Status is recomputed from the container records and patched only when it changed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import shutil
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiException, CoreV1Api

from .hostsfile import Endpoint, render_hosts, resolv_conf
from .network import Bridge, IPPool, create_sandbox, delete_sandbox, netns_name, write_hosts
from .podplan import (
    ContainerPlan,
    Lookups,
    MissingReference,
    PodPlan,
    UnsupportedPod,
    VolumePlan,
    plan_pod,
)
from .podstatus import (
    ContainerRecord,
    PodView,
    State,
    build_status,
    pod_phase,
    restart_delay,
    should_restart,
)
from .probe_spec import Probe
from .probes import check
from .runtime import ContainerProcess, Mount, now

log = logging.getLogger(__name__)

API_TIMEOUT = 10  # seconds, every API call
# A call to the API server that failed on the way, saying nothing about the request: the connection failed,
# timed out or was closed (aiohttp's ServerDisconnectedError and payload errors are no OSError). The node
# retries them, as the operator's I/O layer (ringleader_operator.kube) counts them as the API being unavailable.
NETWORK_ERRORS = (OSError, TimeoutError, aiohttp.ClientError)
RETRY_PREPARE = 2.0  # seconds between attempts while a config map or secret is missing


@dataclass
class GPUPool:
    """GPU indices of one node, handed out per pod the way a device plugin would."""

    count: int
    held: dict[str, list[int]] = field(default_factory=dict)

    def allocate(self, uid: str, n: int) -> list[int] | None:
        if uid in self.held:
            return self.held[uid]
        busy = {i for ids in self.held.values() for i in ids}
        free = [i for i in range(self.count) if i not in busy]
        if n > len(free):
            return None
        self.held[uid] = free[:n]
        return self.held[uid]

    def release(self, uid: str) -> None:
        self.held.pop(uid, None)

    @property
    def free(self) -> int:
        return self.count - sum(len(ids) for ids in self.held.values())


@dataclass
class NodeContext:
    """What every pod worker of one node shares."""

    name: str
    api: CoreV1Api
    bridge: Bridge
    pool: IPPool
    gpus: GPUPool
    pods_dir: Path
    volumes_dir: Path  # PVC-like directories, kept across pods
    base_env: dict[str, str]
    endpoints: Callable[[], Iterable[Endpoint]]
    backoff_base: float
    backoff_cap: float

    @property
    def host_ip(self) -> str:
        return self.bridge.gateway


def _is_terminal(phase: str) -> bool:
    return phase in ("Succeeded", "Failed")


class PodWorker:
    def __init__(self, node: NodeContext, pod: dict[str, Any]) -> None:
        self.node = node
        self.pod = pod
        meta = pod["metadata"]
        self.uid: str = meta["uid"]
        self.key = f"{meta['namespace']}/{meta['name']}"
        self.dir = node.pods_dir / f"{meta['namespace']}_{meta['name']}_{self.uid}"
        self.plan: PodPlan | None = None
        self.init: dict[str, ContainerRecord] = {}
        self.containers: dict[str, ContainerRecord] = {}
        self.procs: dict[str, ContainerProcess] = {}
        self.pod_ip = ""
        self.netns: str | None = None
        self.sandbox_ready = False
        self.phase = "Pending"
        self.reason = ""
        self.message = ""
        self.start_time = now()
        self.stopping = asyncio.Event()
        self.gone = False
        self.gone_quiet = False  # never publish status (the pod's status is final already)
        self.dirty = asyncio.Event()
        self.published: dict[str, Any] | None = None
        spec_containers = pod["spec"]["containers"]
        for c in pod["spec"].get("initContainers") or []:
            self.init[c["name"]] = ContainerRecord(
                name=c["name"], image=c.get("image", ""), init=True, waiting_reason="PodInitializing"
            )
        for c in spec_containers:
            self.containers[c["name"]] = ContainerRecord(
                name=c["name"],
                image=c.get("image", ""),
                waiting_reason="PodInitializing" if self.init else "ContainerCreating",
            )
        self.task = asyncio.create_task(self.run(), name=f"pod {self.key}")

    # ---- events from the agent -------------------------------------------------------------------------
    def update(self, pod: dict[str, Any]) -> None:
        self.pod = pod
        if pod["metadata"].get("deletionTimestamp"):
            self.stopping.set()

    def vanished(self) -> None:
        """The object is gone (force-deleted): stop at once, nothing left to report to."""
        self.gone = True
        self.stopping.set()

    def refresh_hosts(self) -> None:
        if self.netns and self.plan:
            write_hosts(self.netns, self._hosts())

    def container_dir(self, name: str) -> Path:
        return self.dir / "containers" / name

    def is_running(self, container: str) -> bool:
        p = self.procs.get(container)
        return p is not None and p.running

    # ---- lifecycle --------------------------------------------------------------------------------------
    async def run(self) -> None:
        publisher = asyncio.create_task(self._publish_loop())
        try:
            if _is_terminal((self.pod.get("status") or {}).get("phase") or ""):
                # Finished before this worker existed (an earlier agent ran it): its status is final, so only
                # the deletion is left to carry out.
                self.gone_quiet = True
                await self.stopping.wait()
                await self._finish()
                return
            try:
                if not self._lost_by_restart() and await self._prepare() and await self._run_init():
                    await self._run_containers()
                if not self.stopping.is_set() and not _is_terminal(self.phase):
                    self.phase = pod_phase(self._policy(), list(self.init.values()), list(self.containers.values()))
                    self._mark()
            except Exception as e:  # a bug here must fail the pod visibly, not re-run it on the next relist
                log.exception("[%s] pod worker crashed", self.key)
                self._fail("NodeAgentError", f"process node error: {e}")
            await self._teardown()
            log.info("[%s] %s; resources released", self.key, self.phase if not self.stopping.is_set() else "stopped")
            await self.stopping.wait()
            await self._finish()
            log.info("[%s] removed", self.key)
        finally:
            publisher.cancel()

    def _lost_by_restart(self) -> bool:
        """A pod that already ran under an earlier agent process lost its processes when that agent died, like
        containers on a rebooted node: under restartPolicy Never that fails the pod; otherwise its containers
        start again with restartCount raised by one. Returns whether the pod failed."""
        previous = {s["name"]: s for s in (self.pod.get("status") or {}).get("containerStatuses") or []}
        ran = any(set(s.get("state") or {}) & {"running", "terminated"} for s in previous.values())
        if not ran:
            return False
        if self._policy() == "Never":
            self._fail("NodeRestarted", "the process node restarted while this pod ran; its processes were lost")
            return True
        for name, record in self.containers.items():
            count = int((previous.get(name) or {}).get("restartCount", 0)) + 1
            self.containers[name] = replace(record, restart_count=count)
        return False

    def _policy(self) -> str:
        return str(self.pod["spec"].get("restartPolicy", "Always"))

    def _grace(self) -> float:
        meta_grace = self.pod["metadata"].get("deletionGracePeriodSeconds")
        if meta_grace is not None:
            return float(meta_grace)
        return float(self.plan.grace_seconds if self.plan else 30)

    async def _lookups(self) -> Lookups:
        """Fetch every config map and secret the pod names, then serve them to the pure planner."""
        ns = self.pod["metadata"]["namespace"]
        cms: dict[str, dict[str, str] | None] = {}
        secrets: dict[str, dict[str, str] | None] = {}
        for name in _referenced(self.pod, "configMap"):
            try:
                obj = await self.node.api.read_namespaced_config_map(name, ns, _request_timeout=API_TIMEOUT)
                cms[name] = dict(obj.data or {})
            except ApiException as e:
                if e.status != 404:
                    raise
                cms[name] = None
        for name in _referenced(self.pod, "secret"):
            try:
                sec = await self.node.api.read_namespaced_secret(name, ns, _request_timeout=API_TIMEOUT)
                secrets[name] = {k: base64.b64decode(v).decode() for k, v in (sec.data or {}).items()}
            except ApiException as e:
                if e.status != 404:
                    raise
                secrets[name] = None
        return Lookups(config_map=lambda _ns, n: cms.get(n), secret=lambda _ns, n: secrets.get(n))

    async def _prepare(self) -> bool:
        """Plan, allocate and build the sandbox. False when the pod failed or is being deleted."""
        spec = self.pod["spec"]
        if not spec.get("hostNetwork"):
            self.pod_ip = self.node.pool.allocate()
        host_ip = self.node.host_ip
        while True:
            if self.stopping.is_set():
                return False
            try:
                lookups = await self._lookups()
                self.plan = plan_pod(self.pod, lookups, self.node.base_env, self.pod_ip or host_ip, host_ip)
                break
            except UnsupportedPod as e:
                return self._fail(e.reason, e.message)
            except MissingReference as e:
                self._all_waiting("CreateContainerConfigError", str(e))
            except ApiException as e:
                self._all_waiting("CreateContainerConfigError", f"reading referenced objects: {e.reason}")
            except NETWORK_ERRORS as e:
                self._all_waiting(
                    "CreateContainerConfigError", f"reading referenced objects: {str(e) or type(e).__name__}"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), RETRY_PREPARE)
        if self.node.gpus.allocate(self.uid, self.plan.gpus) is None:
            return self._fail(
                "UnexpectedAdmissionError",
                "Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. "
                f"Requested: {self.plan.gpus}, Available: {self.node.gpus.free}",
            )
        try:
            await self._prepare_volumes(self.plan)
            if not self.plan.host_network:
                self.netns = netns_name(self.uid)
                await create_sandbox(
                    self.node.bridge, self.netns, self.pod_ip, self._hosts(), resolv_conf(self.plan.namespace)
                )
        except (*NETWORK_ERRORS, ApiException, RuntimeError) as e:
            return self._fail("FailedCreatePodSandBox", str(e) or type(e).__name__)
        self.sandbox_ready = True
        self._mark()
        return True

    def _hosts(self) -> str:
        assert self.plan is not None
        return render_hosts(
            namespace=self.plan.namespace,
            pod_ip=self.pod_ip,
            hostname=self.plan.hostname,
            subdomain=self.plan.subdomain,
            endpoints=self.node.endpoints(),
            api_ip=self.node.host_ip,
        )

    def _volume_dir(self, v: VolumePlan) -> Path:
        if v.kind == "host":
            return Path(v.host_path)
        if v.claim:
            return self.node.volumes_dir / str(self.pod["metadata"]["namespace"]) / v.claim
        return self.dir / "volumes" / v.name

    async def _prepare_volumes(self, plan: PodPlan) -> None:
        for v in plan.volumes:
            path = self._volume_dir(v)
            if v.kind == "host":
                if v.host_path_type in ("", "DirectoryOrCreate"):
                    path.mkdir(parents=True, exist_ok=True)
                elif v.host_path_type == "FileOrCreate":
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.touch(exist_ok=True)
                elif not path.exists():
                    raise RuntimeError(f"hostPath {v.host_path} of volume {v.name!r} does not exist")
                continue
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o777)  # like emptyDir on a kubelet: writable whatever runAsUser the pod picks
            for rel, data in v.files.items():
                target = path / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
                target.chmod(0o644)
            for rel, audience, seconds in v.token_requests:
                token = await self._service_account_token(audience, seconds)
                (path / rel).write_text(token)
                (path / rel).chmod(0o644)

    async def _service_account_token(self, audience: str, seconds: int) -> str:
        meta, spec = self.pod["metadata"], self.pod["spec"]
        body = {
            "spec": {
                "audiences": [audience] if audience else None,
                "expirationSeconds": seconds,
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": self.uid},
            }
        }
        resp = await self.node.api.create_namespaced_service_account_token(
            spec.get("serviceAccountName") or "default", meta["namespace"], body, _request_timeout=API_TIMEOUT
        )
        return str(resp.status.token)

    def _mounts(self, c: ContainerPlan) -> list[Mount]:
        assert self.plan is not None
        by_name = {v.name: v for v in self.plan.volumes}
        out = []
        for m in c.mounts:
            src = self._volume_dir(by_name[m.volume])
            if m.sub_path:
                src = src / m.sub_path
                if not src.exists():
                    src.mkdir(parents=True, exist_ok=True)
            out.append(Mount(str(src), m.mount_path, m.read_only))
        return out

    def _env(self, c: ContainerPlan, gpu_ids: list[int]) -> dict[str, str]:
        # HOSTNAME as a container runtime sets it, unless the pod sets its own.
        env = {"HOSTNAME": self.plan.hostname if self.plan else "", **c.env}
        if c.gpus:
            ids = ",".join(map(str, gpu_ids))
            env["CUDA_VISIBLE_DEVICES"] = ids
            env["NVIDIA_VISIBLE_DEVICES"] = ids
        return env

    def _gpu_split(self) -> dict[str, list[int]]:
        """Each regular container gets its own slice of the pod's GPUs; init containers may use all."""
        assert self.plan is not None
        ids = self.node.gpus.held.get(self.uid, [])
        out, i = {}, 0
        for c in self.plan.containers:
            out[c.name] = ids[i : i + c.gpus]
            i += c.gpus
        for c in self.plan.init_containers:
            out[c.name] = ids[: c.gpus]
        return out

    async def _start(self, c: ContainerPlan, record: ContainerRecord, gpus: list[int]) -> ContainerProcess | None:
        try:
            proc = await ContainerProcess.start(
                c,
                self._env(c, gpus),
                self._mounts(c),
                self.netns,
                self.container_dir(c.name),
                record.restart_count,
                hostname=self.plan.hostname if self.plan else "",
            )
        except OSError as e:
            self._set(c, record.waiting("RunContainerError", str(e)))
            return None
        self.procs[c.name] = proc
        log.info("[%s] container %s started (pid %d, restarts %d)", self.key, c.name, proc.pgid, record.restart_count)
        # Without probes a running container is ready; with one it waits for the probe's first success.
        ready = not c.init and c.readiness is None and c.startup is None
        self._set(c, replace(record.running(proc.started_at), ready=ready))
        return proc

    def _records(self, c: ContainerPlan) -> dict[str, ContainerRecord]:
        return self.init if c.init else self.containers

    def _set(self, c: ContainerPlan, record: ContainerRecord) -> None:
        self._records(c)[c.name] = record
        self._mark()

    def _set_ready(self, c: ContainerPlan, ready: bool) -> None:
        record = self._records(c)[c.name]
        if record.state == State.RUNNING and record.ready != ready:
            self._set(c, replace(record, ready=ready))

    async def _probe(self, c: ContainerPlan, proc: ContainerProcess, env: dict[str, str]) -> None:
        """Startup, then readiness and liveness probes while `proc` runs, like the kubelet's prober.
        A failed startup or liveness probe stops the container; restartPolicy decides what follows."""
        loop = asyncio.get_running_loop()

        async def attempt(p: Probe) -> bool:
            return await check(p, self.pod_ip, self.netns, env)

        if c.startup is not None and not await self._started(c.startup, attempt):
            log.info("[%s] container %s failed its startup probe; stopping it", self.key, c.name)
            await proc.stop(self._grace())
            return
        if c.readiness is None:
            self._set_ready(c, True)
        start = loop.time()
        due = {
            "readiness": start + (c.readiness.initial_delay if c.readiness else 0),
            "liveness": start + (c.liveness.initial_delay if c.liveness else 0),
        }
        readiness = _Streaks()
        live_failures = 0
        while proc.running:
            now_t = loop.time()
            if c.readiness is not None and now_t >= due["readiness"]:
                ready = readiness.verdict(await attempt(c.readiness), c.readiness)
                if ready is not None:
                    self._set_ready(c, ready)
                due["readiness"] = now_t + c.readiness.period
            if c.liveness is not None and now_t >= due["liveness"]:
                live_failures = 0 if await attempt(c.liveness) else live_failures + 1
                if live_failures >= c.liveness.failure_threshold:
                    log.info("[%s] container %s failed its liveness probe; restarting it", self.key, c.name)
                    await proc.stop(self._grace())
                    return
                due["liveness"] = now_t + c.liveness.period
            pending = [t for k, t in due.items() if getattr(c, k) is not None]
            await asyncio.sleep(max(0.05, min(pending) - loop.time()) if pending else 3600)

    @staticmethod
    async def _started(probe: Probe, attempt: Callable[[Probe], Awaitable[bool]]) -> bool:
        """Run the startup probe until it passes (True) or fails failureThreshold times in a row (False)."""
        await asyncio.sleep(probe.initial_delay)
        failures = 0
        while not await attempt(probe):
            failures += 1
            if failures >= probe.failure_threshold:
                return False
            await asyncio.sleep(probe.period)
        return True

    async def _supervise(self, c: ContainerPlan, gpus: list[int], policy: str) -> int:
        """Run one container until it ends for good under `policy`; returns its last exit code."""
        record = self._records(c)[c.name]
        while True:
            proc = await self._start(c, record, gpus)
            if proc is None:
                exit_code = 128
            else:
                stop = asyncio.create_task(self.stopping.wait())
                done = asyncio.create_task(proc.wait())
                prober = asyncio.create_task(self._probe(c, proc, self._env(c, gpus)))
                await asyncio.wait({stop, done}, return_when=asyncio.FIRST_COMPLETED)
                if not done.done():
                    await proc.stop(self._grace())
                stop.cancel()
                prober.cancel()
                term = await done
                record = self._records(c)[c.name].terminated(term)
                self._set(c, record)
                exit_code = term.exit_code
            if self.stopping.is_set() or not should_restart(policy, exit_code):
                return exit_code
            record = self._records(c)[c.name]
            delay = restart_delay(record.restart_count, self.node.backoff_base, self.node.backoff_cap)
            if delay > 0:
                self._set(
                    c,
                    record.waiting(
                        "CrashLoopBackOff", f"back-off {delay:g}s restarting failed container={c.name} pod={self.key}"
                    ),
                )
                try:
                    await asyncio.wait_for(self.stopping.wait(), delay)
                    return exit_code
                except TimeoutError:
                    pass
            record = self._records(c)[c.name]
            record = replace(record.waiting("ContainerCreating"), restart_count=record.restart_count + 1)

    async def _run_init(self) -> bool:
        assert self.plan is not None
        gpus = self._gpu_split()
        # An init container is retried on failure unless the pod never restarts anything.
        policy = "Never" if self._policy() == "Never" else "OnFailure"
        for c in self.plan.init_containers:
            if await self._supervise(c, gpus[c.name], policy) != 0 or self.stopping.is_set():
                return False
        return True

    async def _run_containers(self) -> None:
        assert self.plan is not None
        gpus = self._gpu_split()
        await asyncio.gather(*(self._supervise(c, gpus[c.name], self._policy()) for c in self.plan.containers))

    async def _teardown(self) -> None:
        """Stop every process, remove the sandbox, give back the IP and GPUs."""
        await asyncio.gather(*(p.stop(0 if self.gone else self._grace()) for p in self.procs.values()))
        if self.netns:
            await delete_sandbox(self.netns)
        if self.pod_ip:
            self.node.pool.release(self.pod_ip)
        self.node.gpus.release(self.uid)
        self.sandbox_ready = False
        self._mark()
        await asyncio.sleep(0)  # let the publisher see the final state before the object goes

    async def _finish(self) -> None:
        """The pod is being deleted and nothing of it runs any more: remove the object (grace 0)."""
        if not self.gone:
            meta = self.pod["metadata"]
            try:
                await self.node.api.delete_namespaced_pod(
                    meta["name"],
                    meta["namespace"],
                    # With a body the API server reads DeleteOptions from it, not from query parameters.
                    body={"gracePeriodSeconds": 0, "preconditions": {"uid": self.uid}},
                    _request_timeout=API_TIMEOUT,
                )
            except ApiException as e:
                if e.status not in (404, 409):
                    log.warning("[%s] final delete failed: %s", self.key, e.reason)
            except NETWORK_ERRORS as e:  # the object stays; the next list or watch event brings it back
                log.warning("[%s] final delete failed: %s", self.key, str(e) or type(e).__name__)
        shutil.rmtree(self.dir, ignore_errors=True)

    # ---- status -----------------------------------------------------------------------------------------
    def _fail(self, reason: str, message: str) -> bool:
        log.info("[%s] failed: %s: %s", self.key, reason, message)
        self.phase, self.reason, self.message = "Failed", reason, message
        for name, r in self.containers.items():
            self.containers[name] = r.waiting(reason, message)
        self._mark()
        return False

    def _all_waiting(self, reason: str, message: str) -> None:
        for name, r in self.containers.items():
            self.containers[name] = r.waiting(reason, message)
        self._mark()

    def _mark(self) -> None:
        self.dirty.set()

    def _current_phase(self) -> str:
        if _is_terminal(self.phase):
            return self.phase
        return pod_phase(self._policy(), list(self.init.values()), list(self.containers.values()))

    def status(self, at: datetime) -> dict[str, Any]:
        old = (self.pod.get("status") or {}).get("conditions") or []
        view = PodView(
            phase=self._current_phase(),
            pod_ip=self.pod_ip,
            host_ip=self.node.host_ip,
            start_time=self.start_time,
            sandbox_ready=self.sandbox_ready,
            reason=self.reason,
            message=self.message,
        )
        return build_status(view, list(self.init.values()), list(self.containers.values()), old, at)

    async def _publish_loop(self) -> None:
        while True:
            await self.dirty.wait()
            self.dirty.clear()
            if self.gone or self.gone_quiet:
                continue
            status = self.status(now())
            if _same_status(status, self.published):
                continue
            meta = self.pod["metadata"]
            body = {"status": {**_NULLABLE, **status}}
            try:
                await self.node.api.patch_namespaced_pod_status(
                    meta["name"],
                    meta["namespace"],
                    body,
                    _request_timeout=API_TIMEOUT,
                    _content_type="application/merge-patch+json",
                )
                self.published = status
                # Keep our conditions' transition times until the watch delivers the object back.
                self.pod.setdefault("status", {})["conditions"] = status["conditions"]
            except ApiException as e:
                if e.status == 404:
                    self.gone = True
                    continue
                log.warning("[%s] status patch failed (%s: %s); retrying", self.key, e.reason, _message(e))
                await asyncio.sleep(0.5)
                self._mark()
            except NETWORK_ERRORS as e:
                log.warning("[%s] status patch failed (%s); retrying", self.key, str(e) or type(e).__name__)
                await asyncio.sleep(0.5)
                self._mark()


# Keys we own in the merge patch: absent means "clear it", so each goes out as null unless set.
_NULLABLE: dict[str, Any] = {
    "reason": None,
    "message": None,
    "initContainerStatuses": None,
    "podIP": None,
    "podIPs": None,
}


def _message(e: ApiException) -> str:
    try:
        return str(json.loads(e.body).get("message", ""))
    except (TypeError, ValueError):
        return str(e.body)[:200]


def _strip_times(status: dict[str, Any]) -> dict[str, Any]:
    return {**status, "conditions": [{**c, "lastTransitionTime": None} for c in status.get("conditions", [])]}


def _same_status(a: dict[str, Any], b: dict[str, Any] | None) -> bool:
    return b is not None and _strip_times(a) == _strip_times(b)


def _referenced(pod: dict[str, Any], kind: str) -> set[str]:
    """Names of config maps (kind="configMap") or secrets (kind="secret") a pod refers to anywhere."""
    spec = pod["spec"]
    names: set[str] = set()
    for c in (spec.get("initContainers") or []) + spec["containers"]:
        for src in c.get("envFrom") or []:
            ref = src.get(f"{kind}Ref")
            if ref:
                names.add(ref["name"])
        for e in c.get("env") or []:
            ref = (e.get("valueFrom") or {}).get(f"{kind}KeyRef")
            if ref:
                names.add(ref["name"])
    for v in spec.get("volumes") or []:
        if kind in v:
            names.add(v[kind]["secretName" if kind == "secret" else "name"])
        for part in (v.get("projected") or {}).get("sources") or []:
            if kind in part:
                names.add(part[kind]["name"])
    return names


def remove_stale_pod_dirs(pods_dir: Path, keep: set[str]) -> None:
    """Drop directories of pods this node no longer knows (left by a previous run of the agent)."""
    if not pods_dir.exists():
        return
    for d in pods_dir.iterdir():
        if d.name.rsplit("_", 1)[-1] not in keep:
            shutil.rmtree(d, ignore_errors=True)


@dataclass
class _Streaks:
    """A readiness probe's successes and failures in a row."""

    successes: int = 0
    failures: int = 0

    def verdict(self, passed: bool, probe: Probe) -> bool | None:
        """Ready (True) after successThreshold passes in a row, not ready (False) after failureThreshold
        failures in a row, else None (no change)."""
        if passed:
            self.successes, self.failures = self.successes + 1, 0
            return True if self.successes >= probe.success_threshold else None
        self.successes, self.failures = 0, self.failures + 1
        return False if self.failures >= probe.failure_threshold else None
