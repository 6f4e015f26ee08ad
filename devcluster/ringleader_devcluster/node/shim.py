"""The last step before a container's command runs: executed inside the pod's network namespace and a
private mount namespace (`ip netns exec` or `unshare --mount`), it binds the pod's volumes over their mount
paths, enters the working directory, drops to runAsUser/runAsGroup and execs the command, so the process the
node started *is* the container's main process and its exit code is the container's.

Usage: python -m ringleader_devcluster.node.shim LAUNCH_JSON

If anything before exec fails, the reason goes to `start-error` beside LAUNCH_JSON and the exit code is 128,
which the node reports as a StartError, like a container runtime does.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

START_ERROR_EXIT = 128


class StartError(Exception):
    pass


def _bind(source: str, target: str, read_only: bool) -> None:
    src = Path(source)
    dst = Path(target)
    if src.is_dir():
        dst.mkdir(parents=True, exist_ok=True)
    else:
        dst.parent.mkdir(parents=True, exist_ok=True)
        if not dst.exists():
            dst.touch()
    try:
        subprocess.run(["mount", "--bind", str(src), str(dst)], check=True, capture_output=True, timeout=10)
        if read_only:
            subprocess.run(["mount", "-o", "remount,bind,ro", str(dst)], check=True, capture_output=True, timeout=10)
    except subprocess.CalledProcessError as e:
        raise StartError(f"mount {source} at {target}: {e.stderr.decode().strip()}") from e


def launch(spec: dict[str, Any]) -> None:
    """Never returns on success: the process image is replaced by the container's command."""
    if spec.get("hostname"):
        socket.sethostname(spec["hostname"])  # in the pod's own UTS namespace
    for m in spec.get("mounts", []):
        _bind(m["source"], m["target"], bool(m.get("readOnly")))
    workdir = spec.get("workingDir") or "/"
    try:
        Path(workdir).mkdir(parents=True, exist_ok=True)
        os.chdir(workdir)
    except OSError as e:
        raise StartError(f"working directory {workdir}: {e.strerror}") from e
    gid, uid = spec.get("runAsGroup"), spec.get("runAsUser")
    if gid is not None or uid is not None:
        os.setgroups([])
        os.setgid(int(gid if gid is not None else uid or 0))
    if uid is not None:
        os.setuid(int(uid))
    argv = spec["argv"]
    env = spec["env"]
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as e:
        raise StartError(f'exec: "{argv[0]}": {e.strerror}') from e


def main() -> None:
    path = Path(sys.argv[1])
    try:
        launch(json.loads(path.read_text()))
    except (StartError, OSError, KeyError, ValueError) as e:
        (path.parent / "start-error").write_text(str(e))
        print(f"ringleader process node: {e}", file=sys.stderr)
        sys.exit(START_ERROR_EXIT)


if __name__ == "__main__":
    main()
