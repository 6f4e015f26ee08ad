"""The SDK's answers to what an API server says, one line each: a cluster without the TrainingJob API, an unknown
job, a refused spec (its fields named), a name taken, a server that does not answer. The server here is a stand-in
that answers fixed statuses (the dev-cluster tests meet the real one)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from ringleader.client import Client
from ringleader.errors import InvalidSpec, NotFound, NoTrainingJobApi, RingleaderError

JOBS = "/apis/ringleader.dev/v1alpha1/namespaces/ns/trainingjobs"


class Answers(BaseHTTPRequestHandler):
    """Answers (status, body) by method and path; 404 for anything else."""

    routes: ClassVar[dict[tuple[str, str], tuple[int, dict[str, Any]]]] = {}

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        status, body = self.routes.get((self.command, self.path.split("?")[0]), (404, _status(404, "NotFound")))
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = do_DELETE = _answer

    def log_message(self, *args: Any) -> None:
        pass


def _status(code: int, reason: str, message: str = "", causes: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason,
            "message": message or reason, "details": {"causes": causes or []}}  # fmt: skip


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig pointing at the stand-in server."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Answers)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "s", "cluster": {"server": f"http://127.0.0.1:{httpd.server_port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "s", "user": "u", "namespace": "ns"}}],
    }))  # fmt: skip
    yield kubeconfig
    httpd.shutdown()
    Answers.routes = {}


def served() -> None:
    resources = {"kind": "APIResourceList", "groupVersion": "ringleader.dev/v1alpha1", "resources": [
        {"name": "trainingjobs", "namespaced": True, "kind": "TrainingJob", "verbs": ["get"], "singularName": ""},
    ]}  # fmt: skip
    Answers.routes[("GET", "/apis/ringleader.dev/v1alpha1")] = (200, resources)


def test_the_namespace_is_the_contexts_unless_given(server: Path) -> None:
    config = json.loads(server.read_text())
    config["contexts"].append({"name": "other", "context": {"cluster": "s", "user": "u", "namespace": "team"}})
    server.write_text(json.dumps(config))
    assert Client(kubeconfig_path=str(server)).namespace == "ns"  # the current context's
    assert Client(kubeconfig_path=str(server), context="other").namespace == "team"
    assert Client("mine", kubeconfig_path=str(server), context="other").namespace == "mine"


def test_a_cluster_without_the_crd(server: Path) -> None:
    client = Client(kubeconfig_path=str(server), request_timeout=5)
    with pytest.raises(NoTrainingJobApi, match=r"has no TrainingJob API \(crd trainingjobs.ringleader.dev\): install"):
        client.get("x")


def test_an_unknown_job(server: Path) -> None:
    served()
    with pytest.raises(NotFound) as e:
        Client(kubeconfig_path=str(server), request_timeout=5).get("x")
    assert str(e.value) == "trainingjob 'x' not found in namespace 'ns'"


@pytest.mark.parametrize(
    ("answer", "error", "message"),
    [
        (_status(422, "Invalid", "TrainingJob.ringleader.dev \"j\" is invalid: ...", [
            {"field": "spec.workers.replicas", "message": "Invalid value: 0: should be greater than or equal to 1"},
            {"field": "spec.strategy", "message": "Unsupported value: \"gossip\"\nsecond line"},
        ]), InvalidSpec, "trainingjob 'j' is invalid: spec.workers.replicas: Invalid value: 0: should be greater "
                         "than or equal to 1; spec.strategy: Unsupported value: \"gossip\""),
        (_status(422, "Invalid", "", [{"field": "<nil>", "message": "Invalid value: \"object\": name too long"}]),
         InvalidSpec, "trainingjob 'j' is invalid: name too long"),
        (_status(409, "AlreadyExists"), RingleaderError, "trainingjob 'j' already exists: choose another --name"),
        (_status(403, "Forbidden", "trainingjobs is forbidden: User \"u\" cannot create"), RingleaderError,
         "trainingjob 'j': trainingjobs is forbidden: User \"u\" cannot create"),
        (_status(500, "InternalError", "etcd\nleader changed"), RingleaderError, "trainingjob 'j': HTTP 500: etcd"),
    ],
)  # fmt: skip
def test_refusals_are_one_line(server: Path, answer: dict[str, Any], error: type[Exception], message: str) -> None:
    served()
    Answers.routes[("POST", JOBS)] = (answer["code"], answer)
    with pytest.raises(error) as e:
        Client(kubeconfig_path=str(server), request_timeout=5).create({"metadata": {"name": "j"}})
    assert str(e.value) == message


def test_a_server_that_does_not_answer(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "s", "cluster": {"server": "http://127.0.0.1:9"}}],  # discard: nothing listens
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "c", "context": {"cluster": "s", "user": "u"}}],
    }))  # fmt: skip
    client = Client(kubeconfig_path=str(kubeconfig), request_timeout=2)
    assert client.namespace == "default"
    with pytest.raises(RingleaderError, match=r"^cannot reach the API server at http://127.0.0.1:9: ") as e:
        client.list()
    assert "\n" not in str(e.value)
