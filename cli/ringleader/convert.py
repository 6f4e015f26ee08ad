"""A Kubeflow PyTorchJob (kubeflow.org/v1) as a TrainingJob, pure: what `ringleader convert` prints.

The Master and the Workers become the job's workers, the Master as worker 0 (rank 0, the rendezvous host, as in
Kubeflow); their pod template is kept as written (its container `pytorch` renamed `trainer`, the one the operator
wires), so the same image and command run: `torchrun` with no options forms the whole world from the PET_*
variables the operator writes, as the training-operator's did. Carried over: replicas, restartPolicy,
nprocPerNode (procsPerPod), the GPUs of the template's limit, elasticPolicy (its bounds, and torchrun's c10d
rendezvous with its maxRestarts: spec.torchrun), runPolicy
(cleanPodPolicy, with Kubeflow's default None made explicit; ttlSecondsAfterFinished, activeDeadlineSeconds,
backoffLimit, suspend, schedulingPolicy's priorityClass and scheduleTimeoutSeconds), a managedBy other than
the training-operator's, metadata's name, namespace, labels and annotations.

Nothing is dropped silently: a field that changes what runs and has no equivalent (a Master template that differs
from the Workers', `standalone`, nprocPerNode `cpu`) is a one-line error naming it; one that Ringleader does
otherwise or needs no longer (the rendezvous's host, port, id and conf, HPA metrics, minResources, a contract variable
the template sets) is a warning naming it. Other documents of the file (a ConfigMap holding the script) pass
through unchanged.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from ringleader_api import API_VERSION, CONTRACT_ENV, KIND, TrainingJob

from .errors import UsageError

PYTORCHJOB_API = "kubeflow.org/v1"
PYTORCHJOB_KIND = "PyTorchJob"
KUBEFLOW_CONTAINER = "pytorch"  # the container the training-operator wires
TRAINER_CONTAINER = "trainer"  # the one Ringleader's operator wires (else the first)
KUBEFLOW_MANAGED_BY = "kubeflow.org/training-operator"
GPU = "nvidia.com/gpu"
RESTART_POLICIES = ("Always", "OnFailure", "Never", "ExitCode")
CLEAN_POD_POLICIES = ("None", "Running", "All")
KEPT_METADATA = ("name", "namespace", "labels", "annotations")
# Set by the API server (or the training-operator): the object's history, not what the user asked for.
SERVER_METADATA = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink",
                   "ownerReferences", "finalizers", "deletionTimestamp", "deletionGracePeriodSeconds")  # fmt: skip
VOLCANO = "volcano"
VOLCANO_QUEUE = "scheduling.volcano.sh/queue-name"


class ConversionError(UsageError):
    """The PyTorchJob cannot become a TrainingJob that runs the same thing: the message names the field."""


@dataclass
class Converted:
    """The documents to print (TrainingJobs in place of PyTorchJobs, the others as they were) and the warnings,
    each `<path>: <what happens instead>`."""

    documents: list[Any] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def convert_documents(documents: Iterable[Any]) -> Converted:
    """Every PyTorchJob of `documents` converted; other documents kept. Raises ConversionError."""
    out = Converted()
    for i, doc in enumerate(documents):
        if doc is None:
            continue
        if isinstance(doc, dict) and doc.get("kind") == PYTORCHJOB_KIND:
            if doc.get("apiVersion") != PYTORCHJOB_API:
                raise ConversionError(
                    f"document {i + 1}: apiVersion {doc.get('apiVersion')!r}: only {PYTORCHJOB_API} PyTorchJobs convert"
                )
            job, warnings = convert(doc)
            out.documents.append(job)
            out.warnings += warnings
        else:
            out.documents.append(doc)
    if not any(isinstance(d, dict) and d.get("kind") == KIND for d in out.documents):
        raise ConversionError(f"no {PYTORCHJOB_API} {PYTORCHJOB_KIND} in the input")
    return out


def convert(pytorchjob: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """One PyTorchJob as a TrainingJob (a dict, as applied), and the warnings. Raises ConversionError."""
    c = _Conversion(copy.deepcopy(pytorchjob))
    return c.run(), c.warnings


class _Conversion:
    """Takes the PyTorchJob apart field by field (each one handled is removed), so what is left at the end is what
    has no equivalent, and is named."""

    def __init__(self, obj: dict[str, Any]) -> None:
        self.obj = obj
        self.warnings: list[str] = []
        self.name = str((obj.get("metadata") or {}).get("name") or "")
        self.managed_by: Any = None
        self.torchrun: dict[str, Any] | None = None  # spec.torchrun, from an elasticPolicy

    def warn(self, path: str, what: str) -> None:
        self.warnings.append(f"{self._where()}{path}: {what}")

    def fail(self, path: str, what: str) -> ConversionError:
        return ConversionError(f"{self._where()}{path}: {what}")

    def _where(self) -> str:
        return f"PyTorchJob {self.name}: " if self.name else "PyTorchJob: "

    def run(self) -> dict[str, Any]:
        meta = self._metadata()
        spec = _mapping(self.obj.pop("spec", None), "spec", self)
        self.obj.pop("status", None)  # what the training-operator observed: a new job starts without it
        for key in sorted(set(self.obj) - {"apiVersion", "kind"}):
            self.warn(key, "not a field of a TrainingJob; dropped")
        workers = self._workers(spec)
        out_spec: dict[str, Any] = {"workers": workers}
        if self.torchrun is not None:
            out_spec["torchrun"] = self.torchrun
        run_policy = self._run_policy(spec, workers, meta)
        if run_policy:
            out_spec["runPolicy"] = run_policy
        if self.managed_by and self.managed_by != KUBEFLOW_MANAGED_BY:  # MultiKueue's: carried; Kubeflow's: ours now
            out_spec["managedBy"] = self.managed_by
        for key in sorted(spec):
            self.warn(f"spec.{key}", "has no TrainingJob equivalent; dropped")
        job = {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta, "spec": out_spec}
        try:
            TrainingJob.model_validate(job)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(x) for x in first["loc"])
            raise self.fail(f"(as a TrainingJob) {where}", first["msg"]) from None
        return job

    # ---- metadata --------------------------------------------------------------------------------------------
    def _metadata(self) -> dict[str, Any]:
        meta = _mapping(self.obj.pop("metadata", None), "metadata", self)
        if not meta.get("name"):
            raise self.fail("metadata.name", "missing: a TrainingJob needs a name (generateName is not carried)")
        out = {k: meta.pop(k) for k in KEPT_METADATA if meta.get(k)}
        for key in SERVER_METADATA:
            meta.pop(key, None)
        for key in sorted(meta):
            self.warn(f"metadata.{key}", "not carried")
        return out

    # ---- replicas --------------------------------------------------------------------------------------------
    def _workers(self, spec: dict[str, Any]) -> dict[str, Any]:
        replicas = _mapping(spec.pop("pytorchReplicaSpecs", None), "spec.pytorchReplicaSpecs", self)
        master = replicas.pop("Master", None)
        worker = replicas.pop("Worker", None)
        if replicas:
            kind = sorted(replicas)[0]
            raise self.fail(f"spec.pytorchReplicaSpecs.{kind}", "unknown replica type: only Master and Worker")
        if master is None and worker is None:
            raise self.fail("spec.pytorchReplicaSpecs", "needs a Master or a Worker replica spec")
        masters = self._replica(master, "Master") if master is not None else None
        workers = self._replica(worker, "Worker") if worker is not None else None
        if masters is not None and masters[0] != 1:
            raise self.fail("spec.pytorchReplicaSpecs.Master.replicas", f"{masters[0]}: a PyTorchJob has one Master")
        if masters is not None and workers is not None:
            self._same("restartPolicy", masters[1], workers[1])
            self._same_template(masters[2], workers[2])
        count = (masters[0] if masters else 0) + (workers[0] if workers else 0)
        policy, template = (workers or masters)[1:]  # type: ignore[index]
        out: dict[str, Any] = {"replicas": count, "restartPolicy": policy}
        self._elastic(spec, out, masters is not None)
        template = self._template(template)
        gpus = _gpus(template)
        if gpus:
            out["gpus"] = gpus
        procs = self._procs_per_pod(spec, gpus)
        if procs is not None and procs != 1:
            out["procsPerPod"] = procs
        out["template"] = template
        return out

    def _replica(self, spec: Any, kind: str) -> tuple[int, str, dict[str, Any]]:
        where = f"spec.pytorchReplicaSpecs.{kind}"
        spec = _mapping(spec, where, self)
        replicas = spec.pop("replicas", 1)
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 1:
            raise self.fail(f"{where}.replicas", f"{replicas!r}: a whole number of pods, at least 1")
        policy = spec.pop("restartPolicy", "OnFailure")  # the training-operator's default for PyTorch
        if policy not in RESTART_POLICIES:
            raise self.fail(f"{where}.restartPolicy", f"{policy!r}: one of {', '.join(RESTART_POLICIES)}")
        template = _mapping(spec.pop("template", None), f"{where}.template", self)
        for key in sorted(spec):
            self.warn(f"{where}.{key}", "has no TrainingJob equivalent; dropped")
        return replicas, str(policy), template

    def _same(self, key: str, master: Any, worker: Any) -> None:
        if master != worker:
            raise self.fail(
                f"spec.pytorchReplicaSpecs.Master.{key}",
                f"{master!r} differs from the Workers' {worker!r}: a TrainingJob's workers (the Master is worker 0) "
                "share one",
            )

    def _same_template(self, master: dict[str, Any], worker: dict[str, Any]) -> None:
        differs = _first_difference(master, worker, "template")
        if differs is not None:
            raise self.fail(
                f"spec.pytorchReplicaSpecs.Master.{differs}",
                "differs from the Workers' template: a TrainingJob's workers (the Master is worker 0) share one "
                "template; make them equal",
            )

    def _template(self, template: dict[str, Any]) -> dict[str, Any]:
        pod = template.get("spec") or {}
        containers = pod.get("containers") or []
        if not containers:
            raise self.fail("template.spec.containers", "missing: the pod needs a container")
        for c in containers:
            if c.get("name") == KUBEFLOW_CONTAINER and not any(x.get("name") == TRAINER_CONTAINER for x in containers):
                c["name"] = TRAINER_CONTAINER
            env = c.get("env") or []
            contract = [e.get("name") for e in env if e.get("name") in CONTRACT_ENV]
            for name in contract:
                self.warn(
                    f"template.spec.containers[{c.get('name')}].env.{name}",
                    "the operator sets it for each rank; dropped",
                )
            if contract:
                c["env"] = [e for e in env if e.get("name") not in CONTRACT_ENV]
        return template

    # ---- elastic and processes per pod ------------------------------------------------------------------------
    def _elastic(self, spec: dict[str, Any], workers: dict[str, Any], has_master: bool) -> None:
        policy = spec.pop("elasticPolicy", None)
        if policy is None:
            return
        policy = _mapping(policy, "spec.elasticPolicy", self)
        where = "spec.elasticPolicy"
        if policy.pop("standalone", False):
            raise self.fail(f"{where}.standalone", "true starts a world of one node in every pod; remove it")
        bounds = {k: policy.pop(k) for k in ("minReplicas", "maxReplicas") if policy.get(k) is not None}
        if bounds and has_master:
            raise self.fail(where, "elastic with a Master: make it Workers only (the Master does not scale)")
        low, high = bounds.get("minReplicas", workers["replicas"]), bounds.get("maxReplicas", workers["replicas"])
        if not low <= workers["replicas"] <= high:
            raise self.fail(
                where, f"the Workers' replicas {workers['replicas']} are outside minReplicas-maxReplicas {low}-{high}"
            )
        workers.update(bounds)
        if "nProcPerNode" in policy:
            spec.setdefault("nprocPerNode", str(policy.pop("nProcPerNode")))
        # Kubeflow's elastic mode is torchrun's elastic rendezvous: so is Ringleader's spec.torchrun c10d.
        self.torchrun = {"rendezvous": "c10d"}
        backend = policy.pop("rdzvBackend", None)
        if backend not in (None, "c10d"):
            self.warn(f"{where}.rdzvBackend", f"{backend}: Ringleader's elastic rendezvous is c10d, hosted by worker 0")
        for key in ("rdzvHost", "rdzvPort", "rdzvId", "rdzvConf"):
            if policy.pop(key, None) is not None:
                self.warn(
                    f"{where}.{key}", "the operator sets the rendezvous (worker 0's agent, the job's UID); dropped"
                )
        if (restarts := policy.pop("maxRestarts", None)) is not None:
            self.torchrun["maxRestarts"] = restarts
        if policy.pop("metrics", None):
            self.warn(
                f"{where}.metrics",
                "no HorizontalPodAutoscaler is made: point one at the TrainingJob (its scale subresource), or let "
                "auto-elastic admission size it",
            )
        for key in sorted(policy):
            self.warn(f"{where}.{key}", "has no TrainingJob equivalent; dropped")

    def _procs_per_pod(self, spec: dict[str, Any], gpus: int) -> int | None:
        value = spec.pop("nprocPerNode", None)
        if value is None:
            return gpus or None
        where = "spec.nprocPerNode"
        text = str(value).strip()
        if text.isdigit() and int(text) >= 1:
            procs = int(text)
            if gpus and procs != gpus:
                raise self.fail(where, f"{procs} with {gpus} GPUs per pod: Ringleader gives each process one GPU")
            return procs
        if text == "gpu":
            if not gpus:
                raise self.fail(where, f"gpu: the pods ask for no {GPU}")
            return gpus
        if text == "auto":
            if not gpus:
                self.warn(where, "auto on pods without GPUs: torchrun starts one process per CPU; Ringleader one")
            return gpus or None
        if text == "cpu":
            raise self.fail(where, "cpu (a process per CPU of the node): give the number of processes per pod")
        raise self.fail(where, f"{value!r}: a number of processes, gpu or auto")

    # ---- run policy --------------------------------------------------------------------------------------------
    def _run_policy(self, spec: dict[str, Any], workers: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
        policy = _mapping(spec.pop("runPolicy", None) or {}, "spec.runPolicy", self)
        where = "spec.runPolicy"
        out: dict[str, Any] = {}
        clean = policy.pop("cleanPodPolicy", None) or "None"  # Kubeflow keeps the pods unless told otherwise
        if clean not in CLEAN_POD_POLICIES:
            raise self.fail(f"{where}.cleanPodPolicy", f"{clean!r}: one of {', '.join(CLEAN_POD_POLICIES)}")
        out["cleanPodPolicy"] = clean
        for key in ("ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit", "suspend"):
            if policy.get(key) is not None:
                out[key] = policy.pop(key)
            policy.pop(key, None)
        if "backoffLimit" not in out:
            self.warn(f"{where}.backoffLimit", "unset: Kubeflow restarts without a limit; Ringleader allows 3 restarts")
        self.managed_by = policy.pop("managedBy", None) or spec.pop("managedBy", None)
        self._scheduling(_mapping(policy.pop("schedulingPolicy", None) or {}, f"{where}.schedulingPolicy", self),
                         out, workers, meta)  # fmt: skip
        for key in sorted(policy):
            self.warn(f"{where}.{key}", "has no TrainingJob equivalent; dropped")
        return out

    def _scheduling(self, policy: dict[str, Any], out: dict[str, Any], workers: dict[str, Any],
                    meta: dict[str, Any]) -> None:  # fmt: skip
        where = "spec.runPolicy.schedulingPolicy"
        if (priority := policy.pop("priorityClass", None)) is not None:
            out["priorityClassName"] = priority
        if (timeout := policy.pop("scheduleTimeoutSeconds", None)) is not None:
            out["schedulingTimeoutSeconds"] = timeout
        if (minimum := policy.pop("minAvailable", None)) is not None and minimum != workers["replicas"]:
            self.warn(f"{where}.minAvailable", f"{minimum}: Ringleader places every rank of a job together")
        if policy.pop("minResources", None):
            self.warn(f"{where}.minResources", "computed from the pods' requests; dropped")
        if queue := policy.pop("queue", None):
            scheduler = (
                ((workers["template"].get("spec") or {}).get("schedulerName")) if "template" in workers else None
            )
            if scheduler == VOLCANO:
                meta.setdefault("annotations", {})[VOLCANO_QUEUE] = queue
            else:
                self.warn(f"{where}.queue", f"{queue}: a Volcano queue, and the pods are not scheduled by Volcano; "
                          "for Kueue label the job kueue.x-k8s.io/queue-name")  # fmt: skip
        for key in sorted(policy):
            self.warn(f"{where}.{key}", "has no TrainingJob equivalent; dropped")


def _mapping(value: Any, where: str, c: _Conversion) -> dict[str, Any]:
    if value is None:
        raise c.fail(where, "missing")
    if not isinstance(value, dict):
        raise c.fail(where, f"a mapping, not {type(value).__name__}")
    return value


def _gpus(template: dict[str, Any]) -> int:
    """The nvidia.com/gpu limit (or request) of the trainer container, 0 when it has none or it is not whole."""
    containers = (template.get("spec") or {}).get("containers") or []
    trainer = next((c for c in containers if c.get("name") == TRAINER_CONTAINER), containers[0] if containers else {})
    resources = trainer.get("resources") or {}
    value = (resources.get("limits") or {}).get(GPU) or (resources.get("requests") or {}).get(GPU)
    try:
        return int(str(value)) if value is not None else 0
    except ValueError:
        return 0


def _first_difference(a: Any, b: Any, path: str) -> str | None:
    """The path of the first place `a` and `b` differ (None: equal). A container's place is its name."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if (found := _first_difference(a.get(key), b.get(key), f"{path}.{key}")) is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            label = x.get("name") if isinstance(x, dict) and x.get("name") else str(i)
            if (found := _first_difference(x, y, f"{path}[{label}]")) is not None:
                return found
        return None
    return None if a == b else path
