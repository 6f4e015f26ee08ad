"""The SDK: `Client` does what the CLI's commands do, for notebooks and scripts, on the official Kubernetes client.

    from ringleader import Client
    client = Client()                                  # kubeconfig (or the pod's service account), its namespace
    name = client.submit("train.py", workers=4)        # ConfigMap + TrainingJob; returns the job's name
    client.wait(name, timeout=600)                     # the final phase; WaitTimeout past the timeout
    for line in client.logs(name): print(line.rank, line.text)
    print(client.diagnose(name).text())

Every request has a timeout (`request_timeout`, seconds); every error is a `RingleaderError` whose text is one line
naming the job, field or file. Jobs are read and written as `ringleader_api` models, the operator's own.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import config as kubeconfig
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from pydantic import ValidationError
from ringleader_api import GROUP, LABEL_JOB, PLURAL, VERSION, JobPhase, Progress, TrainingJob

from . import diagnose as diagnosis
from . import logmerge, podlogs, submission
from .apierrors import api_error, first_line
from .errors import NotFound, NoTrainingJobApi, RingleaderError, WaitTimeout
from .jobstate import JobState, event_time


class Client:
    """A TrainingJob client for one namespace. `kubeconfig_path`/`context` pick the cluster as kubectl does;
    without a kubeconfig, a pod's service account is used."""

    def __init__(
        self,
        namespace: str | None = None,
        kubeconfig_path: str | None = None,
        context: str | None = None,
        request_timeout: float = 30.0,
    ) -> None:
        self.timeout = request_timeout
        default_namespace = "default"
        try:
            kubeconfig.load_kube_config(config_file=kubeconfig_path, context=context)
            contexts, active = kubeconfig.list_kube_config_contexts(config_file=kubeconfig_path)
            chosen = active if context is None else next((c for c in contexts if c.get("name") == context), {})
            default_namespace = ((chosen or {}).get("context") or {}).get("namespace") or "default"
        except (ConfigException, FileNotFoundError) as e:
            try:
                kubeconfig.load_incluster_config()
            except ConfigException:
                where = kubeconfig_path or "KUBECONFIG or ~/.kube/config"
                raise RingleaderError(f"no usable kubeconfig ({where}): {first_line(str(e))}") from None
            default_namespace = _incluster_namespace()
        self.namespace = namespace or default_namespace
        self.custom = k8s.CustomObjectsApi()
        self.core = k8s.CoreV1Api()
        self.server = k8s.Configuration.get_default_copy().host

    # --- jobs -------------------------------------------------------------------------------------------------

    def get(self, name: str) -> TrainingJob:
        """The job as the operator's models read it."""
        return _model(self.get_raw(name))

    def get_raw(self, name: str) -> dict[str, Any]:
        with self._api(f"trainingjob {name!r}"):
            return dict(
                self.custom.get_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, PLURAL, name, _request_timeout=self.timeout
                )
            )

    def list(self) -> builtins.list[TrainingJob]:
        with self._api("trainingjobs"):
            items = self.custom.list_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, _request_timeout=self.timeout
            )["items"]
        return [_model(item) for item in items]

    def create(self, job: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        """Create a TrainingJob from its manifest (server-side dry run with `dry_run`); the stored object."""
        name = job.get("metadata", {}).get("name", "")
        extra = {"dry_run": "All"} if dry_run else {}
        with self._api(f"trainingjob {name!r}"):
            return dict(
                self.custom.create_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, PLURAL, job, _request_timeout=self.timeout, **extra
                )
            )

    def delete(self, name: str) -> None:
        """Delete the job; its pods, Service and submitted script go with it (owner references)."""
        with self._api(f"trainingjob {name!r}"):
            self.custom.delete_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, name, propagation_policy="Background",
                _request_timeout=self.timeout,
            )  # fmt: skip

    def suspend(self, name: str) -> None:
        """runPolicy.suspend: the ranks stop (saving a checkpoint when the job has them) and no pod runs."""
        self._patch(name, {"spec": {"runPolicy": {"suspend": True}}})

    def resume(self, name: str) -> None:
        self._patch(name, {"spec": {"runPolicy": {"suspend": False}}})

    def scale(self, name: str, workers: int) -> None:
        """An elastic job's worker count (within minReplicas..maxReplicas), through the scale subresource."""
        with self._api(f"trainingjob {name!r}"):
            self.custom.patch_namespaced_custom_object_scale(
                GROUP, VERSION, self.namespace, PLURAL, name, {"spec": {"replicas": workers}},
                _request_timeout=self.timeout,
            )  # fmt: skip

    def _patch(self, name: str, body: dict[str, Any]) -> None:
        with self._api(f"trainingjob {name!r}"):
            self.custom.patch_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, name, body, _request_timeout=self.timeout
            )

    # --- submit -----------------------------------------------------------------------------------------------

    def submit(
        self,
        script: str | Path,
        *,
        args: Sequence[str] = (),
        workers: int = 2,
        strategy: str = "allreduce",
        parameter_servers: int | None = None,
        ps_mode: str = "synchronous",
        gpus: int = 0,
        image: str = submission.DEFAULT_IMAGE,
        name: str | None = None,
        requirements: str | Path | None = None,
        cpu: str | None = None,
        memory: str | None = None,
        env: dict[str, str] | None = None,
        restart_policy: str = "OnFailure",
        backoff_limit: int | None = None,
        checkpoint_every: int | None = None,
        checkpoint_claim: str | None = None,
        deadline_seconds: int | None = None,
        priority_class: str | None = None,
        node_selector: dict[str, str] | None = None,
        tolerations: Sequence[str] = (),
    ) -> str:
        """Pack `script` (and `requirements`) into a ConfigMap and run it as a TrainingJob; the job's name.
        Nothing is left behind when it fails: the job is validated by the API server (a dry run) first, and a
        ConfigMap made before a refusal is deleted."""
        sub = submission.from_files(
            script, self.namespace, args=args, workers=workers, strategy=strategy, parameter_servers=parameter_servers,
            ps_mode=ps_mode, gpus=gpus, image=image, name=name, requirements=requirements, cpu=cpu,
            memory=memory, env=env, restart_policy=restart_policy, backoff_limit=backoff_limit,
            checkpoint_every=checkpoint_every, checkpoint_claim=checkpoint_claim, deadline_seconds=deadline_seconds,
            priority_class=priority_class, node_selector=dict(node_selector or {}), tolerations=tuple(tolerations),
        )  # fmt: skip
        configmap, job = submission.build(sub, submission.job_name(sub.script_name, sub.name))
        return self.create_submission(configmap, job)

    def create_submission(self, configmap: dict[str, Any], job: dict[str, Any]) -> str:
        """Create the job and its script's ConfigMap so that a failure leaves neither: the job is dry-run first
        (the API server's schema and rules), then the ConfigMap, the job, and the ConfigMap's owner reference."""
        name = job["metadata"]["name"]
        self.create(job, dry_run=True)
        cm_name = configmap["metadata"]["name"]
        with self._api(f"configmap {cm_name!r}"):
            self.core.create_namespaced_config_map(self.namespace, configmap, _request_timeout=self.timeout)
        created: dict[str, Any] | None = None
        try:
            created = self.create(job)
            with self._api(f"configmap {cm_name!r}"):
                self.core.patch_namespaced_config_map(
                    cm_name, self.namespace, {"metadata": {"ownerReferences": [submission.owner_reference(created)]}},
                    _request_timeout=self.timeout,
                )  # fmt: skip
        except BaseException:
            self._undo(cm_name, created)
            raise
        return str(name)

    def _undo(self, configmap: str, job: dict[str, Any] | None) -> None:
        """Remove what a failed submit made, and only that: the ConfigMap, and the job if this call created it
        (by uid: a job of the same name made by someone else in between stays). Best effort: the first error is
        the one reported."""
        deletes: builtins.list[Callable[[], Any]] = [
            lambda: self.core.delete_namespaced_config_map(configmap, self.namespace, _request_timeout=self.timeout)
        ]
        if job is not None:
            meta = job["metadata"]
            deletes.append(lambda: self.custom.delete_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, meta["name"], _request_timeout=self.timeout,
                body={"preconditions": {"uid": meta["uid"]}},
            ))  # fmt: skip
        for delete in deletes:
            with suppress(ApiException, urllib3.exceptions.HTTPError):
                delete()

    # --- progress, wait -----------------------------------------------------------------------------------------

    def progress(self, name: str) -> Progress | None:
        """Worker 0's progress as the operator last wrote it (step, loss, samples/s, ETA); None before any."""
        return self.get(name).status.progress

    def wait(
        self, name: str, timeout: float | None = None, poll_seconds: float = 2.0,
        on_change: Callable[[TrainingJob], None] | None = None,
    ) -> JobPhase:  # fmt: skip
        """Poll until the job Succeeds or Fails; its final phase. WaitTimeout after `timeout` seconds.
        `on_change` sees the job each time its status changed (what `watch` draws)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        seen: dict[str, Any] | None = None
        while True:
            raw = self.get_raw(name)
            job = _model(raw)
            if on_change is not None and raw.get("status") != seen:
                seen = raw.get("status")
                on_change(job)
            if job.status.phase in podlogs.FINAL:
                return job.status.phase
            if deadline is not None and time.monotonic() >= deadline:
                phase = job.status.phase.value if job.status.phase else "not started"
                raise WaitTimeout(f"trainingjob {name!r} still {phase} after {timeout:g} s")
            time.sleep(poll_seconds if deadline is None else max(0.0, min(poll_seconds, deadline - time.monotonic())))

    # --- state: pods and events -----------------------------------------------------------------------------------

    def state(self, name: str) -> JobState:
        """The job with its pods and events, as describe, diagnose and logs read them (and as tests record them)."""
        job = self.get_raw(name)
        with self._api(f"pods of trainingjob {name!r}"):
            pods = self.core.list_namespaced_pod(
                self.namespace, label_selector=f"{LABEL_JOB}={name}", _request_timeout=self.timeout
            )
        return JobState(
            job=job,
            pods=[self._plain(p) for p in pods.items],
            events=self.events(name, job),
        )

    def events(self, name: str, job: dict[str, Any] | None = None) -> builtins.list[dict[str, Any]]:
        """Events about the job and its ranks' pods since it was made (a job deleted and made again under its name
        has its own), oldest first."""
        job = job if job is not None else self.get_raw(name)
        meta = job.get("metadata") or {}
        since = logmerge.parse_time(meta.get("creationTimestamp") or "") or logmerge.EPOCH
        pods = {f"{name}-{rank}" for rank in JobState(job).ranks()}
        with self._api(f"events of trainingjob {name!r}"):
            about_job = self.core.list_namespaced_event(
                self.namespace, field_selector=f"involvedObject.uid={meta.get('uid', '')}",
                _request_timeout=self.timeout,
            ).items  # fmt: skip
            about_pods = self.core.list_namespaced_event(
                self.namespace, field_selector="involvedObject.kind=Pod", _request_timeout=self.timeout
            ).items
        found = [self._plain(e) for e in about_job]
        for e in about_pods:
            if e.involved_object.name in pods:
                event = self._plain(e)
                if (logmerge.parse_time(event_time(event)) or logmerge.EPOCH) >= since:
                    found.append(event)
        return sorted(found, key=event_time)

    def diagnose(self, name: str) -> diagnosis.Diagnosis:
        return diagnosis.diagnose(self.state(name))

    # --- logs -------------------------------------------------------------------------------------------------

    def logs(
        self, name: str, rank: str | None = None, follow: bool = False, since_seconds: int | None = None,
        tail: int | None = None, max_ranks: int = logmerge.MAX_RANKS,
    ) -> Iterator[logmerge.LogLine]:  # fmt: skip
        """Every rank's lines (or `rank`'s, e.g. "worker-1"), merged by time, with a marker between two attempts
        of a rank; the last lines of attempts whose pods are gone come from the operator's RankOutput events.
        `follow` streams until the job ends, across the ranks' restarts. A job of more than `max_ranks` ranks has
        its first `max_ranks` read (a note says so first); the bytes read are bounded (podlogs.TOTAL_LOG_BYTES)."""
        return podlogs.JobLogs(self).lines(name, rank, follow, since_seconds, tail, max_ranks)

    def _plain(self, obj: Any) -> Any:
        """A client model as the plain JSON-shaped dicts the rest of the CLI reads."""
        return self.core.api_client.sanitize_for_serialization(obj)

    def read_pod(self, name: str) -> dict[str, Any] | None:
        """The pod `name` as plain dicts; None where it is gone."""
        try:
            with self._api(f"pod {name!r}"):
                pod = self.core.read_namespaced_pod(name, self.namespace, _request_timeout=self.timeout)
        except NotFound:
            return None
        return dict(self._plain(pod))

    # --- errors -----------------------------------------------------------------------------------------------

    @contextmanager
    def _api(self, what: str) -> Iterator[None]:
        try:
            yield
        except ApiException as e:
            if e.status == 404 and not self._serves_trainingjobs():
                raise NoTrainingJobApi(
                    f"the cluster at {self.server} has no TrainingJob API (crd trainingjobs.{GROUP}): install "
                    "Ringleader first (helm install ringleader helm/ringleader)"
                ) from None
            raise api_error(e, what, self.namespace) from None
        except urllib3.exceptions.HTTPError as e:
            raise RingleaderError(f"cannot reach the API server at {self.server}: {first_line(str(e))}") from None

    def _serves_trainingjobs(self) -> bool:
        try:
            resources = k8s.CustomObjectsApi(self.custom.api_client).get_api_resources(
                GROUP, VERSION, _request_timeout=self.timeout
            )
        except ApiException:
            return False
        return any(r.name == PLURAL for r in resources.resources)


def _model(raw: dict[str, Any]) -> TrainingJob:
    try:
        return TrainingJob.model_validate(raw)
    except ValidationError as e:
        name = raw.get("metadata", {}).get("name", "")
        why = e.errors()[0]["msg"]
        raise RingleaderError(f"trainingjob {name!r} does not read as ringleader.dev/v1alpha1: {why}") from None


def _incluster_namespace() -> str:
    try:
        return Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read_text().strip() or "default"
    except OSError:
        return "default"
