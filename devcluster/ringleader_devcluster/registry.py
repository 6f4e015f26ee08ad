"""The dev cluster's image registry: CNCF distribution's registry (built from the Go module proxy), on loopback,
its storage in the cache so it outlives a dev cluster.

Ringleader's images are pushed there from buildah's storage and the real node's containerd pulls them, as a
cluster pulls from its registry: a rebuilt image sends only its changed layers (buildah remembers which blobs
the registry has), and the node fetches and unpacks only those. Images named `localhost/<path>:<tag>` are
served from it (containerd's mirror for the host `localhost`, see realnode.containerd_config), so manifests
keep those names. It listens on loopback only, where the node's containerd and buildah run, and takes no
credentials: nothing outside this machine reaches it.
"""

from __future__ import annotations

import json
from pathlib import Path

from .layout import Layout
from .pids import pid_from, spawn, stop_pidfile, wait_ready
from .tools import RealNodeError, http_ok

ADDRESS = "127.0.0.1:15000"
MIRRORED_HOST = "localhost"  # images named localhost/... are pulled from here


def storage(layout: Layout) -> Path:
    return layout.cache / "registry"


def state_dir(layout: Layout) -> Path:
    return layout.state / "registry"


def config(storage_dir: Path) -> dict[str, object]:
    """distribution's configuration: files under `storage_dir`, loopback only, warnings only in its log."""
    return {
        "version": 0.1,
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(storage_dir)}, "delete": {"enabled": True}},
        "http": {"addr": ADDRESS},
    }


def serving() -> bool:
    return http_ok(f"http://{ADDRESS}/v2/")


def start(layout: Layout) -> None:
    """Start the registry once (a running one is left alone) and return when it answers."""
    state = state_dir(layout)
    if pid_from(state / "registry.pid"):
        return
    program = layout.binary("registry")
    if not program.exists():
        raise RealNodeError(f"{program} is missing: run devcluster/build-binaries.sh")
    state.mkdir(parents=True, exist_ok=True)
    storage(layout).mkdir(parents=True, exist_ok=True)
    settings = state / "config.yml"
    settings.write_text(json.dumps(config(storage(layout)), indent=2))  # JSON is YAML
    log = state / "registry.log"
    pid = spawn([str(program), "serve", str(settings)], state / "registry.pid", log)
    wait_ready("the image registry", serving, pid, log, 30)


def stop(layout: Layout) -> None:
    stop_pidfile(state_dir(layout) / "registry.pid", 10)


def reference(name: str) -> str:
    """Where image `name` (localhost/<path>:<tag>) lives in the registry, as a transport reference for buildah."""
    host, _, path = name.partition("/")
    if host != MIRRORED_HOST:
        raise RealNodeError(f"image {name}: only {MIRRORED_HOST}/... names are served by the dev cluster's registry")
    return f"docker://{ADDRESS}/{path}"
