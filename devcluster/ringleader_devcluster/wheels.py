"""The trainer's wheels, downloaded once per machine into the cache: torch's are about 5 GB, and both the
project's venv (`make venv`) and the trainer image (images.py mounts the folder into its build) install from
here, so a fresh machine fetches them once instead of twice. Standard library only: it runs before the venv exists.

    python3 -m ringleader_devcluster.wheels    # download what is missing; print the folder (progress: stderr)

The folder is named after requirements/trainer.txt's digest: a changed pin is a new folder (older ones are
removed once the new one is complete), and a folder is complete only once its `.complete` marker exists, so an
interrupted download is started again, never taken for whole.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .layout import REPO_ROOT, Layout

REQUIREMENTS = REPO_ROOT / "requirements" / "trainer.txt"
COMPLETE = ".complete"
DOWNLOAD_TIMEOUT = 3600  # seconds for all of it; pip's own timeout bounds each connection


def say(message: str) -> None:
    """Progress goes to stderr: stdout carries only the folder, for the Makefile to read."""
    print(f"[wheels] {message}", file=sys.stderr, flush=True)


def folder(layout: Layout, requirements: Path = REQUIREMENTS) -> Path:
    """Where the wheels of `requirements` live (whether or not they are there yet)."""
    digest = hashlib.sha256(requirements.read_bytes()).hexdigest()[:12]
    return layout.cache / "wheels" / f"trainer-{digest}"


def complete(path: Path) -> bool:
    return (path / COMPLETE).exists()


def _pip(layout: Layout) -> list[str]:
    """A pip to download with: this Python's own, else one in a small venv of the cache (Debian's python3 has
    none; its venv module, which the dev cluster requires, brings one)."""
    if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, check=False).returncode == 0:
        return [sys.executable, "-m", "pip"]
    tool = layout.cache / "pip-download"
    if not (tool / "bin" / "pip").exists():
        subprocess.run([sys.executable, "-m", "venv", str(tool)], check=True, timeout=300)
    return [str(tool / "bin" / "pip")]


def download(layout: Layout, requirements: Path = REQUIREMENTS) -> Path:
    """The folder holding every wheel `requirements` needs, downloaded if it is not complete yet."""
    path = folder(layout, requirements)
    if complete(path):
        return path
    t0 = time.monotonic()
    say(f"downloading the trainer's wheels into {path} (torch's are about 5 GB; once per machine)")
    partial = path.with_name(path.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    subprocess.run(
        [*_pip(layout), "download", "--disable-pip-version-check", "--only-binary=:all:",
         "--dest", str(partial), "--requirement", str(requirements)],
        check=True, timeout=DOWNLOAD_TIMEOUT, stdout=sys.stderr,
    )  # fmt: skip
    (partial / COMPLETE).touch()
    shutil.rmtree(path, ignore_errors=True)
    partial.rename(path)
    for older in path.parent.glob("trainer-*"):
        if older != path:
            shutil.rmtree(older, ignore_errors=True)
    size = sum(f.stat().st_size for f in path.iterdir()) / 2**30
    say(f"{len(list(path.glob('*.whl')))} wheels, {size:.1f} GiB ({time.monotonic() - t0:.0f}s)")
    return path


def main() -> int:
    try:
        print(download(Layout.from_env()))
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        print(f"wheels: downloading the trainer's wheels failed: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
