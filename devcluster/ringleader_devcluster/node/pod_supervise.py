"""A pod worker's supervision: containers started, probed (startup, readiness, liveness, like the kubelet's
prober) and restarted under restartPolicy with CrashLoopBackOff; init containers one by one first."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from .pod_state import PodWorkerState, log
from .podplan import ContainerPlan
from .podstatus import ContainerRecord, restart_delay, should_restart
from .probe_spec import Probe
from .probes import check
from .runtime import ContainerProcess, Mount


class Supervision(PodWorkerState):
    def _env(self, c: ContainerPlan, gpu_ids: list[int]) -> dict[str, str]:
        # HOSTNAME as a container runtime sets it, unless the pod sets its own.
        env = {"HOSTNAME": self.plan.hostname if self.plan else "", **c.env}
        if c.gpus:
            ids = ",".join(map(str, gpu_ids))
            env["CUDA_VISIBLE_DEVICES"] = ids
            env["NVIDIA_VISIBLE_DEVICES"] = ids
        return env

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
