"""Pods on the process node against the real control plane: exit codes, logs, env, volumes, restarts,
unsupported features, graceful deletion."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

from kubernetes import client
from ringleader_devcluster.layout import Layout

from tests.support.cluster import gone, kubectl, logs, python_pod, wait_for, wait_phase


def test_kubectl_get_nodes_shows_process_node_ready(layout: Layout, kubeconfig: Path) -> None:
    out = kubectl(layout, kubeconfig, "get", "nodes", "--no-headers").stdout
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines()}
    assert rows.get("process-node") == "Ready"


def test_pod_prints_42_succeeds_and_kubectl_logs_reads_it(
    core: client.CoreV1Api, namespace: str, layout: Layout, kubeconfig: Path
) -> None:
    core.create_namespaced_pod(namespace, python_pod("p42", "print(42)"))
    pod = wait_phase(core, namespace, "p42", {"Succeeded", "Failed"})
    assert pod.status.phase == "Succeeded"
    term = pod.status.container_statuses[0].state.terminated
    assert (term.exit_code, term.reason) == (0, "Completed")
    assert pod.status.pod_ip.startswith("198.18.")
    # Through the API server's proxy to the node's kubelet endpoint, exactly as a user would.
    out = kubectl(layout, kubeconfig, "-n", namespace, "logs", "p42").stdout
    assert out == "42\n"


def test_pod_exiting_3_fails_with_exit_code_3(core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_pod(namespace, python_pod("p3", "import sys; print('bye'); sys.exit(3)"))
    pod = wait_phase(core, namespace, "p3", {"Succeeded", "Failed"})
    assert pod.status.phase == "Failed"
    status = pod.status.container_statuses[0]
    assert status.state.terminated.exit_code == 3
    assert status.state.terminated.reason == "Error"
    assert status.restart_count == 0


def test_env_from_field_refs_config_maps_secrets_and_var_expansion(core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "cfg"}, "data": {"lr": "0.1", "bs": "32"}})
    core.create_namespaced_secret(namespace, {"metadata": {"name": "sec"}, "stringData": {"token": "s3cret"}})
    env: list[dict[str, Any]] = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "ROLE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['role']"}}},
        {"name": "LR", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "lr"}}},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "token"}}},
        {"name": "WHO", "value": "$(ROLE)-$(POD_NAME)"},
    ]
    script = "import os; print(' '.join(os.environ[k] for k in 'POD_NAME POD_NS ROLE LR TOKEN WHO CFG_bs'.split()))"
    pod = python_pod("envs", script, env=env, labels={"role": "worker"})
    pod["spec"]["containers"][0]["envFrom"] = [{"prefix": "CFG_", "configMapRef": {"name": "cfg"}}]
    pod["spec"]["containers"][0]["args"] = []
    core.create_namespaced_pod(namespace, pod)
    done = wait_phase(core, namespace, "envs", {"Succeeded", "Failed"})
    assert logs(core, namespace, "envs").split() == ["envs", namespace, "worker", "0.1", "s3cret", "worker-envs", "32"]
    assert done.status.phase == "Succeeded"


def test_missing_config_map_waits_then_runs_when_created(core: client.CoreV1Api, namespace: str) -> None:
    env = [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "late", "key": "x"}}}]
    core.create_namespaced_pod(namespace, python_pod("waits", "import os; print(os.environ['X'])", env=env))

    def waiting_reason() -> str | None:
        st = core.read_namespaced_pod("waits", namespace).status.container_statuses
        return st[0].state.waiting.reason if st and st[0].state.waiting else None

    assert wait_for("CreateContainerConfigError", waiting_reason) == "CreateContainerConfigError"
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "late"}, "data": {"x": "here"}})
    assert wait_phase(core, namespace, "waits", {"Succeeded", "Failed"}).status.phase == "Succeeded"
    assert logs(core, namespace, "waits") == "here\n"


def test_volumes_empty_dir_shared_config_map_files_and_working_dir(core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "files"}, "data": {"hello.txt": "hi"}})
    # written whole, then renamed into place: the reader polls for the name, and an open file's content is
    # written at its close, so the name alone could show an empty file
    writer = (
        "import os\n"
        "with open('/scratch-a/.msg', 'w') as f: f.write('from-a')\n"
        "os.rename('/scratch-a/.msg', '/scratch-a/msg')"
    )
    reader = (
        "import os, time\n"
        "for _ in range(100):\n"
        "    if os.path.exists('/scratch-b/msg'): break\n"
        "    time.sleep(0.1)\n"
        "print(open('/scratch-b/msg').read(), open('/etc/cfg/hello.txt').read(), os.getcwd())"
    )
    pod = python_pod("vols", writer)
    spec = pod["spec"]
    spec["volumes"] = [{"name": "scratch", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "files"}}]
    spec["containers"][0]["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch-a"}]
    spec["containers"].append(
        {
            "name": "reader",
            "image": "python:3.11",
            "command": ["python", "-c", reader],
            "workingDir": "/scratch-b",
            "volumeMounts": [
                {"name": "scratch", "mountPath": "/scratch-b"},
                {"name": "cfg", "mountPath": "/etc/cfg", "readOnly": True},
            ],
        }
    )
    core.create_namespaced_pod(namespace, pod)
    done = wait_phase(core, namespace, "vols", {"Succeeded", "Failed"})
    assert done.status.phase == "Succeeded"
    assert logs(core, namespace, "vols", container="reader").split() == ["from-a", "hi", "/scratch-b"]
    # The mounts lived only in the pod's mount namespace.
    assert not Path("/scratch-a/msg").exists()


def test_init_container_runs_first(core: client.CoreV1Api, namespace: str) -> None:
    pod = python_pod("init", "print(open('/w/ready').read())")
    pod["spec"]["volumes"] = [{"name": "w", "emptyDir": {}}]
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "w", "mountPath": "/w"}]
    pod["spec"]["initContainers"] = [
        {
            "name": "setup",
            "image": "python:3.11",
            "command": ["python", "-c", "open('/w/ready','w').write('set-up')"],
            "volumeMounts": [{"name": "w", "mountPath": "/w"}],
        }
    ]
    core.create_namespaced_pod(namespace, pod)
    done = wait_phase(core, namespace, "init", {"Succeeded", "Failed"})
    assert done.status.phase == "Succeeded"
    assert done.status.init_container_statuses[0].state.terminated.exit_code == 0
    assert logs(core, namespace, "init") == "set-up\n"


def test_on_failure_restarts_until_success_and_counts_restarts(core: client.CoreV1Api, namespace: str) -> None:
    # Fails on its first run, succeeds on the second: the count survives in an emptyDir.
    script = (
        "import os, sys\n"
        "p = '/state/runs'\n"
        "n = int(open(p).read()) if os.path.exists(p) else 0\n"
        "open(p, 'w').write(str(n + 1))\n"
        "print('run', n)\n"
        "sys.exit(0 if n >= 1 else 7)"
    )
    pod = python_pod("flaky", script, restart_policy="OnFailure")
    pod["spec"]["volumes"] = [{"name": "state", "emptyDir": {}}]
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "state", "mountPath": "/state"}]
    core.create_namespaced_pod(namespace, pod)
    done = wait_phase(core, namespace, "flaky", {"Succeeded", "Failed"})
    status = done.status.container_statuses[0]
    assert done.status.phase == "Succeeded"
    assert status.restart_count == 1
    assert status.last_state.terminated.exit_code == 7
    assert logs(core, namespace, "flaky", previous=True) == "run 0\n"
    assert logs(core, namespace, "flaky") == "run 1\n"


def test_always_policy_backs_off_and_reports_crash_loop(core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_pod(namespace, python_pod("crashy", "raise SystemExit(2)", restart_policy="Always"))

    def crash_loop() -> bool:
        st = core.read_namespaced_pod("crashy", namespace).status.container_statuses
        return bool(
            st and st[0].restart_count >= 1 and st[0].state.waiting and st[0].state.waiting.reason == "CrashLoopBackOff"
        )

    wait_for("CrashLoopBackOff after a restart", crash_loop, timeout=60)
    pod = core.read_namespaced_pod("crashy", namespace)
    assert pod.status.phase == "Running"
    assert pod.status.container_statuses[0].last_state.terminated.exit_code == 2


def test_unsupported_features_fail_with_a_reason(core: client.CoreV1Api, namespace: str) -> None:
    nfs = python_pod("nfs", "print(1)")
    nfs["spec"]["volumes"] = [{"name": "share", "nfs": {"server": "nfs.example", "path": "/x"}}]
    no_cmd = python_pod("nocmd", "")
    del no_cmd["spec"]["containers"][0]["command"]
    bad_exec = python_pod("badexec", "")
    bad_exec["spec"]["containers"][0]["command"] = ["no-such-binary-anywhere"]
    for pod in (nfs, no_cmd, bad_exec):
        core.create_namespaced_pod(namespace, pod)
    p = wait_phase(core, namespace, "nfs", {"Failed"})
    assert p.status.reason == "UnsupportedVolume" and "nfs" in p.status.message
    p = wait_phase(core, namespace, "nocmd", {"Failed"})
    assert p.status.reason == "ContainerCannotRun" and "command" in p.status.message
    p = wait_phase(core, namespace, "badexec", {"Failed"})
    term = p.status.container_statuses[0].state.terminated
    assert (term.reason, term.exit_code) == ("StartError", 128)
    assert "no-such-binary-anywhere" in term.message


def _pids_with(marker: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    pids.append(int(entry))
            except OSError:
                pass
    return pids


def test_deleting_a_running_pod_stops_its_processes_within_the_grace_period(
    core: client.CoreV1Api, namespace: str
) -> None:
    marker = f"marker-{uuid.uuid4().hex}"
    # Ignores SIGTERM and forks a child: both must be gone after the grace period (SIGKILL to the group).
    script = (
        f"# {marker}\n"
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: print('TERM ignored', flush=True))\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', '{marker}'])\n"
        "print('up', flush=True)\n"
        "time.sleep(600)"
    )
    pod = python_pod("sleeper", script)
    pod["spec"]["terminationGracePeriodSeconds"] = 3
    core.create_namespaced_pod(namespace, pod)
    wait_phase(core, namespace, "sleeper", {"Running"})
    wait_for("both processes", lambda: len(_pids_with(marker)) == 2, timeout=30)
    t0 = time.monotonic()
    core.delete_namespaced_pod("sleeper", namespace)
    wait_for("processes to stop", lambda: not _pids_with(marker), timeout=3 + 5)
    stopped = time.monotonic() - t0
    assert stopped >= 2.5, "SIGTERM was ignored, so only SIGKILL after the 3 s grace period may stop it"
    wait_for("pod object removed", lambda: gone(lambda: core.read_namespaced_pod("sleeper", namespace)), timeout=10)


def test_readiness_probe_gates_ready_and_liveness_probe_restarts(core: client.CoreV1Api, namespace: str) -> None:
    # Serves HTTP only after 2 s: Ready must stay False until then. The liveness probe checks a file the
    # container deletes after 4 s, so the kubelet logic must restart it (restartCount >= 1).
    script = (
        "import http.server, os, threading, time\n"
        "open('/tmp/alive-' + os.environ['HOSTNAME'], 'w').close()\n"
        "time.sleep(2)\n"
        "srv = http.server.HTTPServer(('0.0.0.0', 8080), http.server.SimpleHTTPRequestHandler)\n"
        "threading.Thread(target=srv.serve_forever, daemon=True).start()\n"
        "time.sleep(2)\n"
        "os.remove('/tmp/alive-' + os.environ['HOSTNAME'])\n"
        "time.sleep(600)\n"
    )
    host = f"probe-{uuid.uuid4().hex[:6]}"
    pod = python_pod("probed", script, restart_policy="Always", env=[{"name": "HOSTNAME", "value": host}])
    c = pod["spec"]["containers"][0]
    c["readinessProbe"] = {"httpGet": {"port": 8080, "path": "/"}, "periodSeconds": 1}
    c["livenessProbe"] = {
        "exec": {"command": ["test", "-e", f"/tmp/alive-{host}"]},
        "periodSeconds": 1,
        "failureThreshold": 2,
        "initialDelaySeconds": 1,
    }
    core.create_namespaced_pod(namespace, pod)
    wait_phase(core, namespace, "probed", {"Running"})

    def ready() -> bool:
        st = core.read_namespaced_pod("probed", namespace).status.container_statuses
        return bool(st and st[0].ready)

    started = time.monotonic()
    assert not ready()
    wait_for("readiness probe success", ready, timeout=20)
    assert time.monotonic() - started >= 0.5

    def restarted() -> bool:
        st = core.read_namespaced_pod("probed", namespace).status.container_statuses
        return bool(st and st[0].restart_count >= 1)

    wait_for("liveness restart", restarted, timeout=40)
