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
import shutil
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


def _environment_paths(env: dict[str, str]) -> list[Path]:
    """Where the project's code and Python live: the PYTHONPATH entries and the interpreter's prefix."""
    paths = [Path(p).resolve() for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return [*paths, Path(sys.prefix).resolve()]


def hides(target: Path, environment: list[Path]) -> bool:
    """Whether a volume mounted at `target` would hide one of the `environment` paths."""
    return any(target == p or target in p.parents for p in environment)


def launch(spec: dict[str, Any]) -> None:
    """Never returns on success: the process image is replaced by the container's command."""
    if spec.get("hostname"):
        socket.sethostname(spec["hostname"])  # in the pod's own UTS namespace
    environment = _environment_paths(spec.get("env") or {})
    for m in spec.get("mounts", []):
        if hides(Path(m["target"]), environment):
            # The project's environment stands in for the image's files, and an image never keeps its code
            # under a volume's mount point (a chart's /tmp emptyDir, say): mounted, the volume would hide the
            # code. The pod keeps the host's directory there instead.
            print(f"ringleader process node: not mounting {m['target']}: it holds the project's environment",
                  file=sys.stderr)  # fmt: skip
            continue
        _bind(m["source"], m["target"], bool(m.get("readOnly")))
    workdir = spec.get("workingDir") or "/"
    try:
        Path(workdir).mkdir(parents=True, exist_ok=True)
        os.chdir(workdir)
    except OSError as e:
        raise StartError(f"working directory {workdir}: {e.strerror}") from e
    argv = spec["argv"]
    env = spec["env"]
    gid, uid = spec.get("runAsGroup"), spec.get("runAsUser")
    if uid is not None and int(uid) != 0:
        argv = _as_user(argv, env, int(uid), int(gid if gid is not None else uid))
    elif gid is not None or uid is not None:
        os.setgroups([])
        os.setgid(int(gid if gid is not None else uid or 0))
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as e:
        raise StartError(f'exec: "{argv[0]}": {e.strerror}') from e


def _as_user(argv: list[str], env: dict[str, str], uid: int, gid: int) -> list[str]:
    """The command line that runs `argv` as uid:gid. A container's image is readable by any user; here the
    "image" is the project's Python environment, often under root's home (mode 0700), so the process keeps
    one capability, CAP_DAC_READ_SEARCH (read and search any file, as an ambient capability that survives
    exec), and nothing else: it still writes only where uid:gid may, as in a real pod. `setpriv` (util-linux)
    sets the ids and the capability and execs the command, so the process stays the container's main one."""
    exe = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=env.get("PATH", os.defpath))
    if exe is None or not os.access(exe, os.X_OK):
        raise StartError(f'exec: "{argv[0]}": executable file not found in $PATH')
    return [
        "setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
        "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search", "--", exe, *argv[1:],
    ]  # fmt: skip


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
