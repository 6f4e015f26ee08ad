"""A pod worker's preparation: the config maps and secrets it names, its plan, its IP, GPUs, sandbox and
volumes. Retries while a referenced object is missing; fails the pod for what cannot work."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from .hostsfile import render_hosts, resolv_conf
from .network import NetworkError, create_sandbox, netns_name
from .nodeapi import NodeApiError
from .pod_state import RETRY_PREPARE, PodWorkerState
from .podenv import Lookups, MissingReference, UnsupportedPod
from .podplan import PodPlan, plan_pod


class Preparation(PodWorkerState):
    async def _lookups(self) -> Lookups:
        """Fetch every config map and secret the pod names, then serve them to the pure planner."""
        ns = self.pod["metadata"]["namespace"]
        cms: dict[str, dict[str, str] | None] = {}
        secrets: dict[str, dict[str, str] | None] = {}
        for name in _referenced(self.pod, "configMap"):
            cms[name] = await self.node.api.config_map_data(ns, name)
        for name in _referenced(self.pod, "secret"):
            secrets[name] = await self.node.api.secret_data(ns, name)
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
            except NodeApiError as e:
                self._all_waiting("CreateContainerConfigError", f"reading referenced objects: {e}")
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
        except (NodeApiError, NetworkError, OSError, RuntimeError) as e:
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
        return await self.node.api.service_account_token(
            meta["namespace"], spec.get("serviceAccountName") or "default", body
        )


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
